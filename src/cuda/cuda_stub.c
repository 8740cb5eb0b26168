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

static const rg_cuda_stats *ctx_stats(const rg_cuda_ctx *ctx) {
    (void)ctx;
    static const rg_cuda_stats none = {0};
    return &none;
}

static bool op_supported(const struct rg_node *n) {
    (void)n;
    return false;
}

static const char *op_types(int op) {
    (void)op;
    return NULL;
}

// The entry points that need a device, refusing with `why` (one set per table).
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
    static rg_status prefix##_op_run(rg_cuda_ctx *ctx, struct rg_node *n, rg_error *err) {                   \
        (void)ctx, (void)n;                                                                                  \
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s", why);                                                  \
    }                                                                                                        \
    const rg_cuda_twin table = {not_compiled,     prefix##_device_count, prefix##_device_get, prefix##_add_f32, \
                                prefix##_ctx_create, ctx_free,           ctx_stats,           op_supported,     \
                                op_types,         prefix##_op_run}

RG_CUDA_STUB_TABLE(rg_cudastub_table, stub_nvcc, no_nvcc);
RG_CUDA_STUB_TABLE(rg_cudastub_host_table, stub_host, no_host);
