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

rg_status rg_cuda_ctx_create(rg_cuda_ctx **out, int device, rg_error *err) {
    *out = NULL;
    return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda device %d: built without CUDA", device);
}
void rg_cuda_ctx_free(rg_cuda_ctx *ctx) { (void)ctx; }

static rg_status none(rg_error *err) { return rg_fail(err, RG_ERR_UNSUPPORTED, "built without CUDA"); }
rg_status rg_cuda_mem_alloc(rg_cuda_ctx *ctx, size_t bytes, void **out, rg_error *err) {
    (void)ctx, (void)bytes, *out = NULL;
    return none(err);
}
void rg_cuda_mem_free(rg_cuda_ctx *ctx, void *p) { (void)ctx, (void)p; }
rg_status rg_cuda_copy_h2d(rg_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, rg_error *err) {
    (void)ctx, (void)dst, (void)src, (void)bytes;
    return none(err);
}
rg_status rg_cuda_copy_d2h(rg_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, rg_error *err) {
    (void)ctx, (void)dst, (void)src, (void)bytes;
    return none(err);
}
rg_status rg_cuda_mem_zero(rg_cuda_ctx *ctx, void *dst, size_t bytes, rg_error *err) {
    (void)ctx, (void)dst, (void)bytes;
    return none(err);
}
rg_status rg_cuda_sync(rg_cuda_ctx *ctx, rg_error *err) { return (void)ctx, none(err); }
rg_status rg_cuda_mem_info(rg_cuda_ctx *ctx, size_t *free_bytes, size_t *total_bytes, rg_error *err) {
    (void)ctx, *free_bytes = 0, *total_bytes = 0;
    return none(err);
}
size_t rg_cuda_ctx_bytes(const rg_cuda_ctx *ctx) { return (void)ctx, 0; }
const struct rg_op_col *rg_cuda_column(void) { return NULL; }
