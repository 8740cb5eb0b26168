// ops_ssm.h - what the CPU kernels of the state-space family (ops_ssm.c, ops_ssm_scan.c)
// share: the checks before a kernel reads its sources, and the addressing of the
// document ids.
#ifndef RG_CPU_OPS_SSM_H
#define RG_CPU_OPS_SSM_H

#include "cpu/cpu_ops.h"
#include "graph/pack.h"

// Every source present has bytes, f32 or (seg) i32, and those from `packed_from` on
// (all but a strided x) are contiguous; the output is contiguous f32 of `total`
// elements. An error names the op, the node and the source.
rg_status cpu_ssm_check(const char *op, const rg_node *n, int packed_from, int64_t total, rg_error *err);

// The document ids of sequence s (seg I32 [T] shared by every sequence, or [T, S]), or NULL.
static inline const int32_t *cpu_ssm_seg(const rg_node *seg, int64_t T, int64_t s) {
    if (!seg) return NULL;
    return (const int32_t *)seg->t.data + (seg->t.ne[1] > 1 ? s * T : 0);
}

// The pool's thread count (1 without a pool).
static inline int cpu_ssm_threads(const rg_exec_ctx *ctx) {
    return ctx && ctx->pool ? rg_threadpool_size(ctx->pool) : 1;
}

#endif
