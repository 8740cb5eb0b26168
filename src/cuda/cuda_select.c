// cuda_select.c - the rg_cuda_* functions of cuda.h: each routes to one build
// of the backend (cuda_twin.h). RETRO_CUDA_HOST=1 in the environment selects
// the host twin (src/cuda/*.cu executed on the CPU by src/cuda_host/), for the
// whole process; otherwise the nvcc twin, or where nvcc was missing the stub
// that says so. The first use of the host twin's device prints one line on
// stderr, so that no figure from it passes for a GPU result.
#include <pthread.h>
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

const rg_cuda_stats *rg_cuda_ctx_stats(const rg_cuda_ctx *ctx) { return twin()->ctx_stats(ctx); }

bool rg_cuda_op_supported(const struct rg_node *n) { return twin()->op_supported(n); }

const char *rg_cuda_op_types(int op) { return twin()->op_types(op); }

rg_status rg_cuda_op_run(rg_cuda_ctx *ctx, struct rg_node *n, rg_error *err) { return twin()->op_run(ctx, n, err); }
