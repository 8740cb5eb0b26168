// state.cpp - see state.h.
#include "cuda_host/state.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace rgh {

namespace {

std::recursive_mutex g_lock;
cudaError_t g_sticky = cudaSuccess;
std::string g_sticky_detail;
thread_local cudaError_t t_last = cudaSuccess;
thread_local cudaError_t t_detail_code = cudaSuccess;
thread_local std::string t_detail;  // "<text>: <detail>" for t_detail_code

struct ErrorRow {
    cudaError_t code;
    const char *name, *text;
};

// The codes this runtime returns, and the common ones a caller may pass in.
const ErrorRow kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorLaunchOutOfResources, "cudaErrorLaunchOutOfResources", "too many resources requested for launch"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorIllegalState, "cudaErrorIllegalState", "the operation cannot be performed in the present state"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {cudaErrorStreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched",
     "operation is not permitted on an event which was last recorded in a capturing stream"},
    {cudaErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {cudaErrorStreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

const ErrorRow *find_error(cudaError_t e) {
    for (const ErrorRow &r : kErrors)
        if (r.code == e) return &r;
    return nullptr;
}

const char *plain_text(cudaError_t e) {
    const ErrorRow *r = find_error(e);
    return r ? r->text : "unrecognized error code";
}

}  // namespace

std::recursive_mutex &runtime_lock(void) { return g_lock; }

bool verbose(void) {
    static int v = -1;
    if (v < 0) {
        const char *s = getenv("RETRO_CUDA_HOST_VERBOSE");
        v = s && *s && strcmp(s, "0") != 0;
    }
    return v == 1;
}

cudaError_t set_error(cudaError_t e, const char *fmt, ...) {
    t_last = e;
    t_detail_code = e;
    t_detail = plain_text(e);
    if (fmt) {
        char buf[768];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        t_detail += std::string(": ") + buf;
    }
    if (verbose() && e != cudaSuccess && e != cudaErrorNotReady)
        fprintf(stderr, "retrograd cuda host: %s: %s\n", error_name(e), t_detail.c_str());
    return e;
}

cudaError_t sticky_error(void) {
    if (g_sticky != cudaSuccess) {
        t_last = g_sticky;
        t_detail_code = g_sticky;
        t_detail = g_sticky_detail;
    }
    return g_sticky;
}

cudaError_t fault_sticky(cudaError_t e, const std::string &why) {
    if (g_sticky == cudaSuccess) {
        g_sticky = e;
        g_sticky_detail = std::string(plain_text(e)) + ": " + why;
        fprintf(stderr, "retrograd cuda host: %s (%s; every later CUDA call returns it until cudaDeviceReset)\n",
                why.c_str(), error_name(e));
    }
    return sticky_error();
}

void clear_errors(void) {
    g_sticky = cudaSuccess;
    g_sticky_detail.clear();
    t_last = cudaSuccess;
    t_detail_code = cudaSuccess;
}

cudaError_t last_error(bool reset) {
    if (g_sticky != cudaSuccess) return t_last = g_sticky;  // a faulted device reports it to every caller
    const cudaError_t e = t_last;
    if (reset) t_last = g_sticky;
    return e;
}

const char *error_name(cudaError_t e) {
    const ErrorRow *r = find_error(e);
    return r ? r->name : "unrecognized error code";
}

const char *error_text(cudaError_t e) {
    if (e != cudaSuccess && e == t_detail_code && !t_detail.empty()) return t_detail.c_str();
    return plain_text(e);
}

}  // namespace rgh
