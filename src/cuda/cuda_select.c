// cuda_select.c - the rg_cuda_* functions of cuda.h: each routes to one build
// of the backend (cuda_twin.h). RETRO_CUDA_HOST=1 in the environment selects
// the host twin (src/cuda/*.cu executed on the CPU by src/cuda_host/), for the
// whole process; otherwise the nvcc twin, or where nvcc was missing the stub
// that says so. The first use of the host twin's device prints one line on
// stderr, so that no figure from it passes for a GPU result.
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_twin.h"

static const rg_cuda_twin *chosen;
static pthread_once_t chosen_once = PTHREAD_ONCE_INIT;
static pthread_once_t notice_once = PTHREAD_ONCE_INIT;

static void choose(void) {
    const char *v = getenv("RETRO_CUDA_HOST");
    if (v && !strcmp(v, "1")) {
#ifdef RG_HAVE_CUDA_HOST
        chosen = &rg_cudahost_table;
#else
        chosen = &rg_cudastub_host_table;
#endif
    } else {
#ifdef RG_HAVE_CUDA
        chosen = &rg_cudadev_table;
#else
        chosen = &rg_cudastub_table;
#endif
    }
}

static const rg_cuda_twin *twin(void) {
    pthread_once(&chosen_once, choose);
    return chosen;
}

static void print_notice(void) {
    fprintf(stderr, "retrograd: RETRO_CUDA_HOST=1: the CUDA device is the host execution of the CUDA code (not a "
                    "GPU); its figures are not GPU results\n");
}

// The calls that use a device: the first one under the host twin says so.
static const rg_cuda_twin *device_twin(void) {
    const rg_cuda_twin *t = twin();
#ifdef RG_HAVE_CUDA_HOST
    if (t == &rg_cudahost_table) pthread_once(&notice_once, print_notice);
#else
    (void)notice_once, (void)print_notice;
#endif
    return t;
}

int rg_cuda_half_gemm_env(char *why, size_t why_cap) {
    const char *v = getenv("RETRO_CUDA_HALF_GEMM");
    if (!v || !*v || !strcmp(v, "tensor")) return RG_CUDA_HALF_GEMM_TENSOR;
    if (!strcmp(v, "f32")) return RG_CUDA_HALF_GEMM_F32;
    if (why) snprintf(why, why_cap, "RETRO_CUDA_HALF_GEMM=%.64s: expected 'tensor' (the default) or 'f32'", v);
    return -1;
}

int rg_cuda_dequant_budget_env(size_t *bytes, char *why, size_t why_cap) {
    const char *name = "RETRO_CUDA_DEQUANT_BUDGET_MB", *v = getenv(name);
    if (!v || !*v) name = "GGML_CUDA_DEQUANT_BUDGET_MB", v = getenv(name);
    *bytes = (size_t)64 << 20;
    if (!v || !*v) return 0;
    char *end = NULL;
    errno = 0;
    const long long mb = strtoll(v, &end, 10);
    if (end == v || *end || errno == ERANGE) {
        if (why) snprintf(why, why_cap, "%s=%.64s: expected a whole number of MiB (0 or less: no slicing)", name, v);
        return -1;
    }
    // 0 or less, or more than the address space: nothing to slice
    *bytes = mb <= 0 || (unsigned long long)mb > (SIZE_MAX >> 21) ? 0 : (size_t)mb << 20;
    return 0;
}

const char *rg_cuda_half_gemm_name(int mode) {
    return mode == RG_CUDA_HALF_GEMM_F32 ? "f32 (half weights widened, pedantic F32 SGEMM)"
                                         : "tensor (activations rounded to the weight's type, F32 accumulation)";
}

int rg_cuda_compiled(void) { return twin()->compiled(); }

int rg_cuda_device_count(char *reason, size_t reason_cap) { return device_twin()->device_count(reason, reason_cap); }

rg_status rg_cuda_device_get(int index, rg_cuda_device_info *out, rg_error *err) {
    return device_twin()->device_get(index, out, err);
}

rg_status rg_cuda_add_f32(int index, const float *a, const float *b, float *y, int64_t n, rg_error *err) {
    return device_twin()->add_f32(index, a, b, y, n, err);
}

rg_status rg_cuda_ctx_create(rg_cuda_ctx **out, int device, rg_error *err) {
    return device_twin()->ctx_create(out, device, err);
}

void rg_cuda_ctx_free(rg_cuda_ctx *ctx) {
    if (ctx) twin()->ctx_free(ctx);
}

rg_status rg_cuda_mem_alloc(rg_cuda_ctx *ctx, size_t bytes, void **out, rg_error *err) {
    return twin()->mem_alloc(ctx, bytes, out, err);
}
void rg_cuda_mem_free(rg_cuda_ctx *ctx, void *p) { twin()->mem_free(ctx, p); }
rg_status rg_cuda_copy_h2d(rg_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, rg_error *err) {
    return twin()->copy_h2d(ctx, dst, src, bytes, err);
}
rg_status rg_cuda_copy_d2h(rg_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, rg_error *err) {
    return twin()->copy_d2h(ctx, dst, src, bytes, err);
}
rg_status rg_cuda_mem_zero(rg_cuda_ctx *ctx, void *dst, size_t bytes, rg_error *err) {
    return twin()->mem_zero(ctx, dst, bytes, err);
}
rg_status rg_cuda_sync(rg_cuda_ctx *ctx, rg_error *err) { return twin()->sync(ctx, err); }
rg_status rg_cuda_mem_info(rg_cuda_ctx *ctx, size_t *free_bytes, size_t *total_bytes, rg_error *err) {
    return twin()->mem_info(ctx, free_bytes, total_bytes, err);
}
size_t rg_cuda_ctx_bytes(const rg_cuda_ctx *ctx) { return twin()->ctx_bytes(ctx); }
const struct rg_op_col *rg_cuda_column(void) { return twin()->column(); }
rg_status rg_cuda_graph_begin(rg_cuda_ctx *ctx, rg_error *err) { return twin()->graph_begin(ctx, err); }
rg_status rg_cuda_graph_end(rg_cuda_ctx *ctx, void **graph, rg_error *err) { return twin()->graph_end(ctx, graph, err); }
rg_status rg_cuda_graph_launch(rg_cuda_ctx *ctx, void *graph, rg_error *err) {
    return twin()->graph_launch(ctx, graph, err);
}
void rg_cuda_graph_free(rg_cuda_ctx *ctx, void *graph) { twin()->graph_free(ctx, graph); }
bool rg_cuda_dequant_supported(uint32_t type) { return twin()->dequant_supported(type); }
rg_status rg_cuda_dequant_rows(rg_cuda_ctx *ctx, const struct rg_node *n, uint32_t type, const void *src,
                               int64_t row_bytes, int64_t rows, int64_t k0, int64_t K, uint32_t dst_type, void *dst,
                               int64_t ld, rg_error *err) {
    return twin()->dequant_rows(ctx, n, type, src, row_bytes, rows, k0, K, dst_type, dst, ld, err);
}
rg_status rg_cuda_dequant_decode32(rg_cuda_ctx *ctx, uint32_t type, const void *src, int64_t n_blocks, float *dst,
                                   rg_error *err) {
    return twin()->dequant_decode32(ctx, type, src, n_blocks, dst, err);
}
