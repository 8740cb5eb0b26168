// cuda_stub.c - the CUDA backend's entry points in a build without nvcc.
#include <stdio.h>

#include "base/error.h"
#include "cuda/cuda.h"

int rg_cuda_compiled(void) { return 0; }

int rg_cuda_device_count(char *reason, size_t reason_cap) {
    if (reason && reason_cap) snprintf(reason, reason_cap, "built without CUDA (configured with RG_CUDA=OFF, or nvcc was not found)");
    return 0;
}

rg_status rg_cuda_device_get(int index, rg_cuda_device_info *out, rg_error *err) {
    (void)out;
    return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda device %d: built without CUDA", index);
}

rg_status rg_cuda_add_f32(int index, const float *a, const float *b, float *y, int64_t n, rg_error *err) {
    (void)a, (void)b, (void)y, (void)n;
    return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda device %d: built without CUDA", index);
}

struct rg_cuda_ctx {
    int unused;
};

rg_status rg_cuda_ctx_create(rg_cuda_ctx **out, int device, rg_error *err) {
    *out = NULL;
    return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda device %d: built without CUDA", device);
}
void rg_cuda_ctx_free(rg_cuda_ctx *ctx) { (void)ctx; }
const rg_cuda_stats *rg_cuda_ctx_stats(const rg_cuda_ctx *ctx) {
    (void)ctx;
    static const rg_cuda_stats none = {0};
    return &none;
}
bool rg_cuda_op_supported(const struct rg_node *n) {
    (void)n;
    return false;
}
const char *rg_cuda_op_types(int op) {
    (void)op;
    return NULL;
}
rg_status rg_cuda_op_run(rg_cuda_ctx *ctx, struct rg_node *n, rg_error *err) {
    (void)ctx, (void)n;
    return rg_fail(err, RG_ERR_UNSUPPORTED, "built without CUDA");
}
