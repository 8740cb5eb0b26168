// cuda_stub.c - the tables that stand in for a build of the backend that is
// missing (cuda_twin.h): without nvcc, rg_cudastub_table answers in place of
// the nvcc twin; with RETRO_CUDA_HOST=1 in a build that could not make the
// host twin (no CUDA toolkit headers), rg_cudastub_host_table answers in place
// of it. Both say why at every entry point that needs a device, so callers
// never #ifdef and a refusal names its cause.
#include <stdio.h>

#include "base/error.h"
#include "cuda/cuda_twin.h"

static const char no_nvcc[] = "built without CUDA (configured with RG_CUDA=OFF, or nvcc was not found)";
static const char no_host[] =
    "RETRO_CUDA_HOST=1, but this build has no host execution of the CUDA code (configured with RG_CUDA_HOST=OFF, or "
    "no CUDA toolkit headers were found)";

static int not_compiled(void) { return 0; }

static int no_devices(char *reason, size_t reason_cap, const char *why) {
    if (reason && reason_cap) snprintf(reason, reason_cap, "%s", why);
    return 0;
}

static void ctx_free(rg_cuda_ctx *ctx) { (void)ctx; }

static rg_status mem_alloc(rg_cuda_ctx *ctx, size_t bytes, void **out, rg_error *err) {
    (void)ctx, (void)bytes, *out = NULL;
    return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda: no device context");
}
static void mem_free(rg_cuda_ctx *ctx, void *p) { (void)ctx, (void)p; }
static rg_status copy(rg_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, rg_error *err) {
    (void)ctx, (void)dst, (void)src, (void)bytes;
    return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda: no device context");
}
static rg_status mem_zero(rg_cuda_ctx *ctx, void *dst, size_t bytes, rg_error *err) {
    (void)ctx, (void)dst, (void)bytes;
    return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda: no device context");
}
static rg_status sync_none(rg_cuda_ctx *ctx, rg_error *err) {
    (void)ctx;
    return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda: no device context");
}
static rg_status mem_info(rg_cuda_ctx *ctx, size_t *free_bytes, size_t *total_bytes, rg_error *err) {
    (void)ctx, *free_bytes = 0, *total_bytes = 0;
    return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda: no device context");
}
static size_t ctx_bytes(const rg_cuda_ctx *ctx) { return (void)ctx, 0; }
static const struct rg_op_col *column(void) { return NULL; }
static rg_status graph_begin(rg_cuda_ctx *ctx, rg_error *err) { return sync_none(ctx, err); }
static rg_status graph_end(rg_cuda_ctx *ctx, void **graph, rg_error *err) {
    *graph = NULL;
    return sync_none(ctx, err);
}
static rg_status graph_launch(rg_cuda_ctx *ctx, void *graph, rg_error *err) {
    (void)graph;
    return sync_none(ctx, err);
}
static void graph_free(rg_cuda_ctx *ctx, void *graph) { (void)ctx, (void)graph; }
static bool dequant_supported(uint32_t type) { return (void)type, false; }
static rg_status dequant_rows(rg_cuda_ctx *ctx, const struct rg_node *n, uint32_t type, const void *src,
                              int64_t row_bytes, int64_t rows, int64_t k0, int64_t K, uint32_t dst_type, void *dst,
                              int64_t ld, rg_error *err) {
    (void)n, (void)type, (void)src, (void)row_bytes, (void)rows, (void)k0, (void)K, (void)dst_type, (void)dst, (void)ld;
    return sync_none(ctx, err);
}
static rg_status dequant_decode32(rg_cuda_ctx *ctx, uint32_t type, const void *src, int64_t n_blocks, float *dst,
                                  rg_error *err) {
    (void)type, (void)src, (void)n_blocks, (void)dst;
    return sync_none(ctx, err);
}

// The entry points that need a device, refusing with `why` (one set per table). No context
// can be made, so the memory calls are never reached with one.
#define RG_CUDA_STUB_TABLE(table, prefix, why)                                                               \
    static int prefix##_device_count(char *reason, size_t cap) { return no_devices(reason, cap, why); }      \
    static rg_status prefix##_device_get(int index, rg_cuda_device_info *out, rg_error *err) {               \
        (void)out;                                                                                           \
        return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda device %d: %s", index, why);                           \
    }                                                                                                        \
    static rg_status prefix##_add_f32(int index, const float *a, const float *b, float *y, int64_t n,       \
                                      rg_error *err) {                                                       \
        (void)a, (void)b, (void)y, (void)n;                                                                  \
        return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda device %d: %s", index, why);                           \
    }                                                                                                        \
    static rg_status prefix##_ctx_create(rg_cuda_ctx **out, int device, rg_error *err) {                     \
        *out = NULL;                                                                                         \
        return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda device %d: %s", device, why);                          \
    }                                                                                                        \
    const rg_cuda_twin table = {not_compiled, prefix##_device_count, prefix##_device_get, prefix##_add_f32,   \
                                prefix##_ctx_create, ctx_free, mem_alloc, mem_free, copy, copy, mem_zero,     \
                                sync_none, mem_info, ctx_bytes, column, graph_begin, graph_end, graph_launch, \
                                graph_free, dequant_supported, dequant_rows, dequant_decode32}

RG_CUDA_STUB_TABLE(rg_cudastub_table, stub_nvcc, no_nvcc);
RG_CUDA_STUB_TABLE(rg_cudastub_host_table, stub_host, no_host);
