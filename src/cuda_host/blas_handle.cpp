// blas_handle.cpp - the cuBLAS stand-in's handles, modes and status strings.
#include <stdarg.h>
#include <stdio.h>

#include <set>
#include <string>

#include "cuda_host/blas.h"
#include "cuda_host/queue.h"
#include "cuda_host/state.h"

namespace rgh {

namespace {

std::set<BlasHandle *> g_handles;
thread_local cublasStatus_t t_status = CUBLAS_STATUS_SUCCESS;
thread_local std::string t_status_detail;

struct StatusRow {
    cublasStatus_t s;
    const char *name, *text;
};
const StatusRow kStatus[] = {
    {CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS", "success"},
    {CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED", "the library was not initialized"},
    {CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED", "the resource allocation failed"},
    {CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE", "an invalid numeric value was used as an argument"},
    {CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH", "an absent device architectural feature is required"},
    {CUBLAS_STATUS_MAPPING_ERROR, "CUBLAS_STATUS_MAPPING_ERROR", "an access to GPU memory space failed"},
    {CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED", "the GPU program failed to execute"},
    {CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR", "an internal operation failed"},
    {CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED", "the functionality requested is not supported"},
    {CUBLAS_STATUS_LICENSE_ERROR, "CUBLAS_STATUS_LICENSE_ERROR", "license error"},
};

const StatusRow *find_status(cublasStatus_t s) {
    for (const StatusRow &r : kStatus)
        if (r.s == s) return &r;
    return nullptr;
}

}  // namespace

BlasHandle *blas_handle(cublasHandle_t h) {
    BlasHandle *b = reinterpret_cast<BlasHandle *>(h);
    return g_handles.count(b) ? b : nullptr;
}

cublasStatus_t blas_status(cublasStatus_t s, const char *fmt, ...) {
    t_status = s;
    const StatusRow *r = find_status(s);
    t_status_detail = r ? r->text : "unknown status";
    if (fmt) {
        char buf[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        t_status_detail += std::string(": ") + buf;
    }
    if (verbose() && s != CUBLAS_STATUS_SUCCESS) fprintf(stderr, "retrograd cuda host: cuBLAS %s\n", t_status_detail.c_str());
    return s;
}

}  // namespace rgh

using namespace rgh;

namespace {

// cublasGet*Mode / cublasGetStream: one field of the handle.
template <class T>
cublasStatus_t get_field(cublasHandle_t h, T *out, T BlasHandle::*field, const char *call) {
    std::lock_guard<std::recursive_mutex> guard(runtime_lock());
    BlasHandle *b = blas_handle(h);
    if (!b) return blas_status(CUBLAS_STATUS_NOT_INITIALIZED, "%s: %p is not a live handle", call, (void *)h);
    if (!out) return blas_status(CUBLAS_STATUS_INVALID_VALUE, "%s: NULL result pointer", call);
    *out = b->*field;
    return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

#define RGH_BLAS_ENTER(h, call)                                                                \
    std::lock_guard<std::recursive_mutex> rgh_guard_(runtime_lock());                         \
    BlasHandle *b = blas_handle(h);                                                            \
    if (!b) return blas_status(CUBLAS_STATUS_NOT_INITIALIZED, "%s: %p is not a live handle", call, (void *)(h))

cublasStatus_t cublasCreate_v2(cublasHandle_t *out) {
    std::lock_guard<std::recursive_mutex> guard(runtime_lock());
    if (!out) return blas_status(CUBLAS_STATUS_INVALID_VALUE, "cublasCreate: NULL handle pointer");
    if (sticky_error() != cudaSuccess) return blas_status(CUBLAS_STATUS_NOT_INITIALIZED, "cublasCreate: the device faulted");
    BlasHandle *b = new BlasHandle;
    g_handles.insert(b);
    *out = reinterpret_cast<cublasHandle_t>(b);
    return CUBLAS_STATUS_SUCCESS;
}

// Like cuBLAS, destroying a handle waits for the device.
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
    RGH_BLAS_ENTER(h, "cublasDestroy");
    sync_all();
    g_handles.erase(b);
    delete b;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
    RGH_BLAS_ENTER(h, "cublasSetStream");
    if (!find_stream(s, "cublasSetStream")) return blas_status(CUBLAS_STATUS_INVALID_VALUE, "cublasSetStream: not a live stream");
    b->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t h, cudaStream_t *s) {
    return get_field(h, s, &BlasHandle::stream, "cublasGetStream");
}

// The stand-in needs no workspace; the call is checked and accepted.
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *workspace, size_t bytes) {
    RGH_BLAS_ENTER(h, "cublasSetWorkspace");
    (void)b;
    if (!workspace && bytes) return blas_status(CUBLAS_STATUS_INVALID_VALUE, "cublasSetWorkspace: NULL workspace of %zu bytes", bytes);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t h, cublasPointerMode_t mode) {
    RGH_BLAS_ENTER(h, "cublasSetPointerMode");
    if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE)
        return blas_status(CUBLAS_STATUS_INVALID_VALUE, "cublasSetPointerMode: mode %d", (int)mode);
    b->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t h, cublasPointerMode_t *mode) {
    return get_field(h, mode, &BlasHandle::pointer_mode, "cublasGetPointerMode");
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    RGH_BLAS_ENTER(h, "cublasSetMathMode");
    const unsigned base = (unsigned)mode & ~(unsigned)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (base > CUBLAS_TF32_TENSOR_OP_MATH) return blas_status(CUBLAS_STATUS_INVALID_VALUE, "cublasSetMathMode: mode %d", (int)mode);
    b->math_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t *mode) {
    return get_field(h, mode, &BlasHandle::math_mode, "cublasGetMathMode");
}

cublasStatus_t cublasSetAtomicsMode(cublasHandle_t h, cublasAtomicsMode_t mode) {
    RGH_BLAS_ENTER(h, "cublasSetAtomicsMode");
    b->atomics = mode;  // the stand-in never sums with atomics
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetAtomicsMode(cublasHandle_t h, cublasAtomicsMode_t *mode) {
    return get_field(h, mode, &BlasHandle::atomics, "cublasGetAtomicsMode");
}

const char *cublasGetStatusName(cublasStatus_t s) {
    const StatusRow *r = find_status(s);
    return r ? r->name : "CUBLAS_STATUS_UNKNOWN";
}

// With the detail of this thread's last failed call when s is its status.
const char *cublasGetStatusString(cublasStatus_t s) {
    if (s != CUBLAS_STATUS_SUCCESS && s == t_status) return t_status_detail.c_str();
    const StatusRow *r = find_status(s);
    return r ? r->text : "unknown status";
}
