// ops_perf_cost.h - what one node of the op table costs, for test_ops' perf mode (ops_perf.h):
// the bytes it reads and writes and the floating-point operations it makes, from the node's
// shapes alone (no kernel is asked). These are yardsticks for "how far from the machine's
// peak", not exact counts of any kernel's instructions:
//   - bytes: each source's size plus the output's size, each counted once (a kernel that
//     reads a source twice, or caches, is not modelled); a packed output (SSM, flash) counts
//     whole; an optimizer's moments updated in place count once, as sources;
//   - FLOPs: products 2 per multiply-add (MUL_MAT 2 K M N), elementwise ops about one per
//     element (a transcendental counts one), norms and softmaxes a few per element, the scans
//     and attention by their inner products (causal and window masks counted, document
//     masks not); -1 for ops that only move bytes (copies, gathers, fills), printed "-".
// Shapes follow graph.h's op comments.
#ifndef RG_TESTS_OPS_PERF_COST_H
#define RG_TESTS_OPS_PERF_COST_H

#include "graph/graph.h"
#include "tensor/quant/quant.h"

// The bytes of t as stored packed (a strided view counts its elements, not its span).
static inline double perf_tensor_bytes(const rg_tensor *t) {
    return (double)rg_tensor_row_size(t) * (double)rg_tensor_nrows(t);
}

static inline double perf_node_bytes(const rg_node *n) {
    double b = perf_tensor_bytes(&n->t);
    for (int k = 0; k < RG_MAX_SRC; k++)
        if (n->src[k]) b += perf_tensor_bytes(&n->src[k]->t);
    return b;
}

// Query-key pairs an attention sees: T queries at positions t + Tk - T over Tk keys,
// causal (key j <= the query's position) and a window w > 0 (position - j < w).
static inline double perf_attn_pairs(int64_t T, int64_t Tk, bool causal, int64_t window) {
    double pairs = 0;
    for (int64_t t = 0; t < T; t++) {
        const int64_t p = t + Tk - T;
        int64_t hi = causal ? (p + 1 < Tk ? p + 1 : Tk) : Tk;  // keys [lo, hi)
        int64_t lo = window > 0 && causal && p - window + 1 > 0 ? p - window + 1 : 0;
        if (hi > lo) pairs += (double)(hi - lo);
    }
    return pairs;
}

static inline double perf_nel(const rg_node *n) { return (double)rg_tensor_nelements(&n->t); }
static inline double perf_src_nel(const rg_node *n, int k) {
    return n->src[k] ? (double)rg_tensor_nelements(&n->src[k]->t) : 0;
}

// Tokens whose label is not the ignore index (the fused CE skips the others); all T when the
// labels are not host bytes. Call before an exec binds the leaf to device memory.
static inline double perf_ce_tokens(const rg_node *labels, int64_t ignore) {
    const int64_t T = labels->t.ne[0];
    const int32_t *l = labels->t.data;
    if (!l || labels->t.type != RG_TYPE_I32 || !rg_tensor_is_contiguous(&labels->t)) return (double)T;
    int64_t n = 0;
    for (int64_t t = 0; t < T; t++) n += l[t] != ignore;
    return (double)n;
}

// FP operations of one run of node n; -1 when the op only moves bytes. Reads the labels of the
// fused CE: call it before an exec rebinds the leaves.
static inline double perf_node_flops(const rg_node *n) {
    const rg_node *a = n->src[0], *b = n->src[1];
    switch (n->op) {
    case RG_OP_MUL_MAT: return 2.0 * (double)a->t.ne[0] * perf_nel(n);         // w [K, M], out [M, N]
    case RG_OP_OUT_PROD: return 2.0 * (double)a->t.ne[1] * perf_nel(n);        // a [M, K], out [M, N]
    case RG_OP_ADD:
    case RG_OP_SUB:
    case RG_OP_MUL:
    case RG_OP_SCALE:
    case RG_OP_SILU:
    case RG_OP_SWIGLU:
    case RG_OP_GELU:
    case RG_OP_SOFTCAP: return perf_nel(n);
    case RG_OP_SILU_BACK:
    case RG_OP_GELU_BACK:
    case RG_OP_SOFTCAP_BACK: return 2.0 * perf_nel(n);  // the derivative, times dy
    case RG_OP_SUM:
    case RG_OP_MEAN:
    case RG_OP_SUM_ROWS:
    case RG_OP_REPEAT_BACK:
    case RG_OP_GET_ROWS_BACK: return perf_src_nel(n, 0);  // one add per element read
    case RG_OP_RMS_NORM: return 3.0 * perf_nel(n);         // x^2 summed, then x * r
    case RG_OP_RMS_NORM_BACK: return 5.0 * perf_nel(n);    // sum dy x, then dx's three terms
    case RG_OP_ROPE:
    case RG_OP_ROPE_BACK: return 3.0 * perf_nel(n);        // x0 cos - x1 sin per element
    case RG_OP_SOFT_MAX: return 4.0 * perf_nel(n);         // max, exp of the difference, sum, scale
    case RG_OP_SOFT_MAX_BACK: return 4.0 * perf_nel(n);    // sum dy y, then y (dy - s)
    case RG_OP_CROSS_ENTROPY_LOSS:
    case RG_OP_CROSS_ENTROPY_LOSS_BACK: return 4.0 * perf_src_nel(n, n->op == RG_OP_CROSS_ENTROPY_LOSS ? 0 : 1);
    case RG_OP_ADAMW: return 12.0 * perf_src_nel(n, 0);    // two moments, their corrections, the step, decay
    case RG_OP_SGD: return (n->src[3] ? 5.0 : 3.0) * perf_src_nel(n, 0);
    case RG_OP_SUMSQ: return 2.0 * perf_src_nel(n, 0);     // a square and an add per element (double)
    case RG_OP_LINEAR_CE: {  // w [d, V], h [d, T]: the logits' products, then the CE on them, per labelled token
        const double d = (double)a->t.ne[0], V = (double)a->t.ne[1], T = perf_ce_tokens(n->src[2], n->ip[0]);
        return 2.0 * d * V * T + 4.0 * V * T;
    }
    case RG_OP_LINEAR_CE_BACK: {  // the logits again, dh = w G, and dw = h G^T when src[3] is there
        const rg_node *f = n->src[2];
        const double d = (double)f->src[0]->t.ne[0], V = (double)f->src[0]->t.ne[1];
        const double T = perf_ce_tokens(f->src[2], f->ip[0]);
        return (n->src[3] ? 6.0 : 4.0) * d * V * T + 4.0 * V * T;
    }
    case RG_OP_ATTN_DECODE: {  // q [Dh, H, T], k [Dh, n_kv, Hkv]: q.k and the weighted v per visible key
        const int64_t Dh = a->t.ne[0], H = a->t.ne[1], T = a->t.ne[2], n_kv = b->t.ne[1];
        return 4.0 * (double)Dh * (double)H * perf_attn_pairs(T, n_kv, true, 0);
    }
    case RG_OP_SSM_CONV: return 2.0 * (double)b->t.ne[0] * perf_src_nel(n, 0);  // K taps per x element
    case RG_OP_SSM_CONV_BACK: return 4.0 * (double)n->src[2]->t.ne[0] * perf_src_nel(n, 1);  // dx and dc
    case RG_OP_SSM_DT: return 4.0 * perf_src_nel(n, 0);    // softplus, exp of the decay, the slope
    case RG_OP_SSM_SCAN:                                    // dt [H, T, S]; per state element: decay h +
    case RG_OP_SSM_SCAN_BACK: {                             // dt x B (3), then y += C h (2); back: about twice
        const rg_node *dt = n->op == RG_OP_SSM_SCAN ? n->src[1] : n->src[2];
        const double P = (double)n->ip[0], N = (double)n->ip[1];
        const double HTS = (double)dt->t.ne[0] * (double)dt->t.ne[1] * (double)dt->t.ne[2];
        return (n->op == RG_OP_SSM_SCAN ? 5.0 : 10.0) * N * P * HTS;
    }
    case RG_OP_FLASH_ATTN_EXT:   // q [Dh, T, H, S], k [Dh, Tk, Hkv, S]: q.k and p v per visible pair (4 Dh);
    case RG_OP_FLASH_ATTN_BACK: {  // the backward's five products per pair: 2.5 times (FlashAttention-2's count)
        const rg_node *q = n->op == RG_OP_FLASH_ATTN_EXT ? n->src[0] : n->src[1];
        const rg_node *k = n->op == RG_OP_FLASH_ATTN_EXT ? n->src[1] : n->src[2];
        const double fwd = 4.0 * (double)q->t.ne[0] * (double)q->t.ne[2] * (double)q->t.ne[3] *
                           perf_attn_pairs(q->t.ne[1], k->t.ne[1], n->ip[0] != 0, n->ip[1]);
        return n->op == RG_OP_FLASH_ATTN_EXT ? fwd : 2.5 * fwd;
    }
    default: return -1;  // FILL, GET_ROWS, REPEAT, CONT, CPY, CPY_INTO, VIEW_BACK: bytes only
    }
}

#endif
