// ops_gelu_softcap.c - GELU with the tanh approximation, the softcap, and their
// backward on the CPU (the Gemma family: architectures.md §1.6, §1.7, §7).
//
//   GELU          y = 0.5 a (1 + t),  t = tanh(c (a + k a^3)),  c = sqrt(2/pi), k = 0.044715
//   GELU_BACK     y = dy (0.5 (1 + t) + 0.5 a (1 - t^2) c (1 + 3 k a^2))
//   SOFTCAP       y = cap tanh(a / cap),  cap = fp[0] > 0
//   SOFTCAP_BACK  y = dy (1 - tanh^2(a / cap))
//
// Each element is computed in double from its f32 inputs and rounded once, so
// a value never depends on the thread count or the split. The constructors
// (graph/build.c) hand packed sources; threads own ranges of elements.
#include <math.h>

#include "base/error.h"
#include "cpu/cpu_ops.h"
#include "cpu/cpu_rows.h"

#define GELU_C 0.79788456080286535588  // sqrt(2 / pi)
#define GELU_K 0.044715

typedef struct ew_job {
    const float *a, *dy;  // dy NULL for the forward ops
    float *y;
    int64_t n;
    rg_op op;
    double cap;
} ew_job;

static inline double gelu1(double a) { return 0.5 * a * (1.0 + tanh(GELU_C * (a + GELU_K * a * a * a))); }

static inline double gelu_grad1(double a) {
    const double t = tanh(GELU_C * (a + GELU_K * a * a * a));
    return 0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * GELU_C * (1.0 + 3.0 * GELU_K * a * a);
}

static void ew_part(void *p, int ith, int nth) {
    const ew_job *j = p;
    int64_t i0, i1;
    rg_split_range(j->n, ith, nth, &i0, &i1);
    for (int64_t i = i0; i < i1; i++) {
        const double a = j->a[i];
        double v;
        switch (j->op) {
        case RG_OP_GELU: v = gelu1(a); break;
        case RG_OP_GELU_BACK: v = (double)j->dy[i] * gelu_grad1(a); break;
        case RG_OP_SOFTCAP: v = j->cap * tanh(a / j->cap); break;
        default: {  // RG_OP_SOFTCAP_BACK
            const double t = tanh(a / j->cap);
            v = (double)j->dy[i] * (1.0 - t * t);
        }
        }
        j->y[i] = (float)v;
    }
}

// Checks the sources (a packed f32 a, and dy of its shape for a backward) and runs the op.
static rg_status run(rg_exec_ctx *ctx, rg_node *n, const char *op, bool back, rg_error *err) {
    const rg_tensor *dy = back && n->src[0] ? &n->src[0]->t : NULL;
    const rg_tensor *a = n->src[back ? 1 : 0] ? &n->src[back ? 1 : 0]->t : NULL;
    rg_status st;
    if ((st = need_f32_rows(op, n, a, "a", err)) || (st = need_f32_rows(op, n, &n->t, "output", err)) ||
        (st = need_same_shape(op, n, a, "a", err)))
        return st;
    if (back && ((st = need_f32_rows(op, n, dy, "dy", err)) || (st = need_same_shape(op, n, dy, "dy", err)))) return st;
    if (!rg_tensor_is_contiguous(a) || (dy && !rg_tensor_is_contiguous(dy)) || !rg_tensor_is_contiguous(&n->t))
        return rg_fail(err, RG_ERR_ARG, "%s '%s': the sources and the output must be contiguous", op, n->t.name);
    const bool cap_op = n->op == RG_OP_SOFTCAP || n->op == RG_OP_SOFTCAP_BACK;
    if (cap_op && !(n->fp[0] > 0.0f))
        return rg_fail(err, RG_ERR_ARG, "%s '%s': cap %g must be positive", op, n->t.name, (double)n->fp[0]);
    ew_job j = {.a = a->data, .dy = dy ? dy->data : NULL, .y = n->t.data, .n = rg_tensor_nelements(a), .op = n->op,
                .cap = cap_op ? (double)n->fp[0] : 0.0};
    // A tanh per element: worth the pool from a quarter of the usual size.
    run_rows(ctx ? ctx->pool : NULL, ew_part, &j, 4 * j.n);
    return RG_OK;
}

rg_status cpu_gelu(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    return run(ctx, n, rg_op_name(n->op), false, err);
}
rg_status cpu_gelu_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    return run(ctx, n, rg_op_name(n->op), true, err);
}
rg_status cpu_softcap(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    return run(ctx, n, rg_op_name(n->op), false, err);
}
rg_status cpu_softcap_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    return run(ctx, n, rg_op_name(n->op), true, err);
}
