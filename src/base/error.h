// error.h - filling an rg_error with one line that explains a failure.
#ifndef RG_BASE_ERROR_H
#define RG_BASE_ERROR_H

#include "retrograd.h"

// Formats the message into err (when err is not NULL) and returns status, so
// a failing path reads: return rg_fail(err, RG_ERR_FORMAT, "%s: ...", path);
rg_status rg_fail(rg_error *err, rg_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
