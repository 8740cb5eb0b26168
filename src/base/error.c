// error.c - status names and the one helper that fills an rg_error.
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>

const char *rg_status_name(rg_status s) {
    switch (s) {
    case RG_OK: return "ok";
    case RG_ERR_IO: return "i/o error";
    case RG_ERR_FORMAT: return "format error";
    case RG_ERR_ARG: return "invalid argument";
    case RG_ERR_NOMEM: return "out of memory";
    case RG_ERR_UNSUPPORTED: return "unsupported";
    case RG_ERR_NOT_FOUND: return "not found";
    case RG_ERR_NONFINITE: return "not finite";
    }
    return "unknown status";
}

rg_status rg_fail(rg_error *err, rg_status status, const char *fmt, ...) {
    if (err) {
        err->status = status;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return status;
}
