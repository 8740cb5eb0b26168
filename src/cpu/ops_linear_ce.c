// ops_linear_ce.c - LINEAR_CE and LINEAR_CE_BACK on the CPU: the cross-entropy
// of the logits Z = w^T h without materializing Z or its gradient
// (training.md §7.1-7.2, CCE with a fixed order instead of locks).
//
// w [d, V] any type with a dequantizer (the LM head or the tied embedding),
// h [d, T] f32 (the final normed hidden states), labels I32 [T].
// The vocabulary is walked in chunks of `chunk` entries (ip[1], 0 = auto:
// [T, chunk] f32 of about 4 MiB, at most V / 8, at least 64); the chunk's logits
// Zc [T, chunk] live in the op's scratch, so the planner accounts for them.
//
// LINEAR_CE -> out [T + 1]. Per chunk, in increasing v:
//   Zc = h^T w[:, v0 .. v0 + nv)               one rg_gemm_run, w as typed B
//                                              (MUL_MAT's product, dequantized
//                                              panel by panel while packing)
//   per valid token t (threads own tokens):
//     m_c = max_v Zc[t, v]                    (f32)
//     s_c = sum_v exp(Zc[t, v] - m_c)         exp_poly.h's f32 exp; 8 double
//                                              partial sums (v % 8) added in a
//                                              fixed tree: CROSS_ENTROPY_LOSS's rows
//     (m, s) <- (M, s e^(m - M) + s_c e^(m_c - M)), M = max(m, m_c)   (double, libm exp)
//     z_t = Zc[t, label_t - v0] when the label falls in the chunk
// then lse_t = m + log s (double), out[1 + t] = lse_t (0 for ignored t) and
// out[0] = inv_n * sum_t (lse_t - z_t) summed in increasing t in double. So
// every value is a function of the chunk size and never of the thread count.
// fp[0] = inv_n (> 0: the step's 1/N_valid; 0: 1/N_valid counted here), ip[0]
// the ignore index; a label outside [0, V) that is not ignored is an error
// naming its position. Ignored tokens still ride along in the GEMMs (their
// columns cost 1/T each); compacting them out is not done.
//
// LINEAR_CE_BACK (dy [T + 1], h, the LINEAR_CE node (w, labels and the lse
// come from it), dw [d, V] or NULL) -> dh [d, T], and dw written into src[3]'s
// bytes (a FILL node made just before: a gradient with its own bytes, which a
// parameter can take as it is; the fill's zeros are overwritten). Per chunk,
// in increasing v:
//   Zc recomputed as above
//   G[t, v] = (float)(e * c_t) - [v = label_t] dy0 inv_n,  e = exp(Zc - lse_t),
//             c_t = dy0 * inv_n + dy[1 + t]   (the lse outputs' own gradient)
//   0 for ignored t
//   dh  (+)= w_c G^T      rg_gemm_run, accumulating over chunks in order
//   dw_c  = h G           rg_gemm_run, each chunk its own rows of dw
// The backward takes 6 T V d flops with dw, 4 without: with the forward 8 and
// 6, against 6 and 4 for MUL_MAT + CROSS_ENTROPY_LOSS, which holds the logits
// and their gradient, 2 x 4 V T bytes.
//
// With rg_exec_ctx.bf16_products (training.compute_dtype=bf16) the three products run
// rg_gemm_run(RG_SGEMM_BF16): h, G and the head's rows rounded to BF16, F32 sums (gemm_tiles.h);
// the chunk's max, exponentials and sums stay as above. The scratch covers both paths where this
// CPU has the BF16 one, so the plan does not depend on the flag.
#include <math.h>
#include <string.h>

#include "base/cpu.h"
#include "base/error.h"
#include "cpu/cpu_ops.h"
#include "cpu/rows_avx2.h"
#include "cpu/cpu_rows.h"
#include "cpu/exp_poly.h"
#include "cpu/gemm.h"
#include "cpu/gemm_tiles.h"
#include "tensor/quant/quant.h"


#define LCE_CHUNK_BYTES (4u << 20)  // the automatic chunk's [T, chunk] f32
#define LCE_CHUNK_MIN 64

static size_t align64(size_t n) { return (n + 63) / 64 * 64; }

// The chunk of a LINEAR_CE / LINEAR_CE_BACK node over V entries and T tokens
// (the CUDA cells take the same, cpu_ops.h):
// ip[1], or [T, chunk] f32 of about LCE_CHUNK_BYTES but at most an eighth of
// the vocabulary (so a small vocabulary's scratch stays well below its
// logits), a multiple of 16 (the GEMM's column block), at least LCE_CHUNK_MIN.
int64_t rg_linear_ce_chunk(const rg_node *n, int64_t V, int64_t T) {
    int64_t c = n->ip[1];
    if (c <= 0) {
        c = (int64_t)(LCE_CHUNK_BYTES / sizeof(float)) / (T > 0 ? T : 1) / 16 * 16;
        int64_t eighth = (V + 8 * 16 - 1) / (8 * 16) * 16;
        if (c > eighth) c = eighth;
        if (c < LCE_CHUNK_MIN) c = LCE_CHUNK_MIN;
    }
    return c < V ? c : V > 0 ? V : 1;
}

// ---------------------------------------------------------------------------
// The three products of a chunk, in gemm.h's math order.

typedef struct lce_ctx {
    const rg_tensor *w, *h;
    float *z;            // [T rows, chunk] the chunk's logits, then their gradient
    int64_t chunk;       // z's row stride
    int64_t v0;          // the chunk's first vocabulary entry
    float *dh, *dw;      // [d, T], [d, V] (backward)
} lce_ctx;

// Z(t, v) = sum_k h[k, t] w[k, v0 + v]: A = h^T, B = w's rows v0.. (rows along k).
static void logits_get(const void *p, int64_t i, rg_gemm_problem *prob) {
    const lce_ctx *c = p;
    (void)i;
    memset(prob, 0, sizeof *prob);
    prob->a = c->h->data;
    prob->a_rs = (int64_t)(c->h->nb[1] / sizeof(float)), prob->a_cs = 1;
    prob->b.type = c->w->type;
    if (c->w->type == RG_TYPE_F32) {
        const int64_t ws1 = (int64_t)(c->w->nb[1] / sizeof(float));
        prob->b.data = (const float *)c->w->data + c->v0 * ws1;
        prob->b.rs = 1, prob->b.cs = ws1;
    } else {
        prob->b.data = (const char *)c->w->data + c->v0 * (int64_t)c->w->nb[1];
        prob->b.row_stride = c->w->nb[1];
        prob->b.rows_along_k = true;
    }
    prob->c = c->z;
    prob->ldc = c->chunk;
}

// dh(t, k) (+)= sum_v G(t, v) w[k, v0 + v]: A = G, B(v, k) = element k of w's row v0 + v.
static void dh_get(const void *p, int64_t i, rg_gemm_problem *prob) {
    const lce_ctx *c = p;
    (void)i;
    memset(prob, 0, sizeof *prob);
    prob->a = c->z;
    prob->a_rs = c->chunk, prob->a_cs = 1;
    prob->b.type = c->w->type;
    if (c->w->type == RG_TYPE_F32) {
        const int64_t ws1 = (int64_t)(c->w->nb[1] / sizeof(float));
        prob->b.data = (const float *)c->w->data + c->v0 * ws1;
        prob->b.rs = ws1, prob->b.cs = 1;
    } else {
        prob->b.data = (const char *)c->w->data + c->v0 * (int64_t)c->w->nb[1];
        prob->b.row_stride = c->w->nb[1];
        prob->b.rows_along_k = false;
    }
    prob->c = c->dh;
    prob->ldc = c->h->ne[0];
}

// dw(v0 + v, k) = sum_t G(t, v) h[k, t]: A = G^T, B(t, k) = h[k, t].
static void dw_get(const void *p, int64_t i, rg_gemm_problem *prob) {
    const lce_ctx *c = p;
    (void)i;
    memset(prob, 0, sizeof *prob);
    prob->a = c->z;
    prob->a_rs = 1, prob->a_cs = c->chunk;
    prob->b.type = RG_TYPE_F32;
    prob->b.data = c->h->data;
    prob->b.rs = (int64_t)(c->h->nb[1] / sizeof(float)), prob->b.cs = 1;
    prob->c = c->dw + c->v0 * c->h->ne[0];
    prob->ldc = c->h->ne[0];
}

enum { LCE_LOGITS, LCE_DH, LCE_DW };

static rg_gemm_batch lce_batch(int kind, const rg_tensor *w, int64_t d, int64_t T, int64_t nv, bool accumulate,
                               const lce_ctx *c) {
    rg_gemm_batch b = {0};
    b.n_problems = 1;
    b.ctx = c;
    b.accumulate = accumulate;
    switch (kind) {
    case LCE_LOGITS: b.M = T, b.N = nv, b.K = d, b.b_type = w->type, b.b_rows_along_k = true, b.get = logits_get; break;
    case LCE_DH: b.M = T, b.N = d, b.K = nv, b.b_type = w->type, b.b_rows_along_k = false, b.get = dh_get; break;
    default: b.M = nv, b.N = d, b.K = T, b.b_type = RG_TYPE_F32, b.get = dw_get; break;
    }
    return b;
}

// The largest gemm scratch of the products a node runs (whole and last chunk).
static size_t gemm_work(const rg_tensor *w, int64_t d, int64_t V, int64_t T, int64_t chunk, int n_kinds,
                        int n_threads) {
    size_t most = 0;
    const bool tiles = rg_gemm_tiles_path() != RG_TILES_NONE;  // the BF16 products may run here
    const int64_t sizes[2] = {chunk, V % chunk ? V % chunk : chunk};
    for (int k = 0; k < n_kinds; k++)
        for (int s = 0; s < 2; s++) {
            rg_gemm_batch b = lce_batch(k, w, d, T, sizes[s], false, NULL);
            size_t need = rg_gemm_work_size(RG_SGEMM_AUTO, &b, n_threads);
            if (need > most) most = need;
            need = tiles ? rg_gemm_work_size(RG_SGEMM_BF16, &b, n_threads) : 0;
            if (need > most) most = need;
        }
    return most;
}

// Scratch: z [T, chunk] | m [T] f32 | s [T] f64 | z_t [T] f32 | gemm work.
typedef struct lce_layout {
    float *z, *m, *zt;
    double *s;
    void *work;
    size_t work_size, total;
} lce_layout;

static lce_layout layout(void *base, const rg_tensor *w, int64_t d, int64_t V, int64_t T, int64_t chunk, bool back,
                         int n_threads) {
    lce_layout L = {0};
    size_t off = 0;
    char *b = base;
    L.z = (float *)(b ? b + off : NULL), off += align64((size_t)(T * chunk) * sizeof(float));
    if (!back) {
        L.m = (float *)(b ? b + off : NULL), off += align64((size_t)T * sizeof(float));
        L.s = (double *)(b ? b + off : NULL), off += align64((size_t)T * sizeof(double));
        L.zt = (float *)(b ? b + off : NULL), off += align64((size_t)T * sizeof(float));
    }
    L.work_size = gemm_work(w, d, V, T, chunk, back ? 3 : 1, n_threads);
    L.work = b ? b + off : NULL;
    L.total = off + L.work_size;
    return L;
}

size_t cpu_linear_ce_work(const rg_node *n, int n_threads) {
    const rg_tensor *w = &n->src[0]->t;
    const int64_t d = w->ne[0], V = w->ne[1], T = n->src[1]->t.ne[1];
    return layout(NULL, w, d, V, T, rg_linear_ce_chunk(n, V, T), false, n_threads < 1 ? 1 : n_threads).total;
}

size_t cpu_linear_ce_back_work(const rg_node *n, int n_threads) {
    const rg_tensor *w = &n->src[2]->src[0]->t;
    const int64_t d = w->ne[0], V = w->ne[1], T = n->src[1]->t.ne[1];
    return layout(NULL, w, d, V, T, rg_linear_ce_chunk(n, V, T), true, n_threads < 1 ? 1 : n_threads).total;
}

// ---------------------------------------------------------------------------
// Checks shared by both kernels; fills *inv_n and *n_valid.

static rg_status lce_check(const char *op, const rg_node *n, const rg_tensor *w, const rg_tensor *h,
                           const rg_tensor *labels, int32_t ignore, float fp0, double *inv_n, int64_t *n_valid,
                           rg_error *err) {
    rg_status st;
    if ((st = need_f32_rows(op, n, h, "hidden states", err))) return st;
    if (!w->data) return rg_fail(err, RG_ERR_ARG, "%s '%s': the weight has no data", op, n->t.name);
    const int64_t d = w->ne[0], V = w->ne[1], T = h->ne[1];
    if (h->ne[0] != d || h->ne[2] != 1 || h->ne[3] != 1 || w->ne[2] != 1 || w->ne[3] != 1) {
        char s1[96], s2[96];
        return rg_fail(err, RG_ERR_ARG, "%s '%s': weight %s and hidden states %s do not fit", op, n->t.name,
                       rg_tensor_shape_str(w, s1, sizeof s1), rg_tensor_shape_str(h, s2, sizeof s2));
    }
    if (w->type != RG_TYPE_F32 && (!rg_quant_get(w->type)->dequant || w->nb[0] != rg_type_get(w->type)->type_size))
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s '%s': weight type %s needs a dequantizer and packed rows", op,
                       n->t.name, rg_type_get(w->type)->name);
    if (w->type == RG_TYPE_F32 && (w->nb[0] != sizeof(float) || w->nb[1] % sizeof(float)))
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s '%s': an f32 weight needs packed rows", op, n->t.name);
    if (h->nb[1] % sizeof(float))
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s '%s': the hidden states' row stride is not whole floats", op, n->t.name);
    if (!labels || !labels->data || labels->type != RG_TYPE_I32 || rg_tensor_nelements(labels) != T ||
        (T > 1 && labels->nb[0] != sizeof(int32_t)))
        return rg_fail(err, RG_ERR_ARG, "%s '%s': labels must be packed i32 [%lld]", op, n->t.name, (long long)T);
    const int32_t *lab = labels->data;
    int64_t cnt = 0;
    for (int64_t t = 0; t < T; t++) {
        if (lab[t] == ignore) continue;
        if (lab[t] < 0 || lab[t] >= V)
            return rg_fail(err, RG_ERR_ARG, "%s '%s': label %d at position %lld is outside 0..%lld", op, n->t.name,
                           (int)lab[t], (long long)t, (long long)(V - 1));
        cnt++;
    }
    *n_valid = cnt;
    *inv_n = fp0 > 0.0f ? (double)fp0 : cnt > 0 ? 1.0 / (double)cnt : 0.0;
    return RG_OK;
}

// ---------------------------------------------------------------------------
// The per-token passes over one chunk (threads own tokens).

typedef struct lce_rows {
    float *z;                // [T, chunk]: the logits; the backward turns them into G in place
    int64_t T, chunk, v0, nv;
    const int32_t *labels;
    int32_t ignore;
    bool first;              // forward: the first chunk
    float *m, *zt;           // forward: running max, target logit [T]
    double *s;               // forward: running sum [T]
    const float *lse;        // backward: [T], the forward's out + 1
    const float *dy;         // backward: [T + 1]
    double coef0;            // backward: dy[0] * inv_n
} lce_rows;

static bool avx2_rows(void) { return rg_ce_avx2_built && rg_cpu_has_avx2(); }

// The chunk's max and sum_v exp(z[v] - max) (8 double partial sums, v % 8,
// then a fixed tree), the same operations as CROSS_ENTROPY_LOSS's rows.
static void chunk_lse_rows(void *p, int ith, int nth) {
    const lce_rows *j = p;
    const bool avx2 = avx2_rows();
    int64_t t0, t1;
    rg_split_range(j->T, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        const int32_t label = j->labels[t];
        if (label == j->ignore) continue;
        const float *z = j->z + t * j->chunk;  // [nv]
        float mc;
        double sc;
        rg_ce_row_max_sumexp(z, NULL, j->nv, avx2, &mc, &sc);
        if (label >= j->v0 && label < j->v0 + j->nv) j->zt[t] = z[label - j->v0];
        if (j->first) {
            j->m[t] = mc, j->s[t] = sc;
        } else if (mc > j->m[t]) {
            j->s[t] = j->s[t] * exp((double)j->m[t] - (double)mc) + sc;
            j->m[t] = mc;
        } else if (mc == mc) {
            j->s[t] += sc * exp((double)mc - (double)j->m[t]);
        } else {  // a NaN logit: the loss says so
            j->s[t] = NAN;
        }
    }
}

static void chunk_grad_rows(void *p, int ith, int nth) {
    const lce_rows *j = p;
    const bool avx2 = avx2_rows();
    int64_t t0, t1;
    rg_split_range(j->T, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        float *g = j->z + t * j->chunk;  // [nv]
        const int32_t label = j->labels[t];
        if (label == j->ignore) {
            memset(g, 0, sizeof(float) * (size_t)j->nv);
            continue;
        }
        const float lse = j->lse[t];
        const double c = j->coef0 + (double)j->dy[1 + t];
        // e = exp(z - lse) in place (z <= lse up to rounding; exp_poly takes -|x|), then e * c.
        const bool has_label = label >= j->v0 && label < j->v0 + j->nv;
        double unused[8] = {0};
        if (avx2) {
            rg_ce_exp_sum_avx2(g, g, j->nv, lse, unused);
        } else {
            for (int64_t v = 0; v < j->nv; v++) g[v] = rg_exp_neg_abs(g[v] - lse);
        }
        const float e_label = has_label ? g[label - j->v0] : 0.0f;
        if (avx2) {
            rg_ce_scale_avx2(g, j->nv, c);
        } else {
            for (int64_t v = 0; v < j->nv; v++) g[v] = (float)((double)g[v] * c);
        }
        if (has_label) g[label - j->v0] = (float)((double)e_label * c - j->coef0);
    }
}

// ---------------------------------------------------------------------------
// The kernels.

static const char *name_of(const rg_node *n) { return n->t.name[0] ? n->t.name : "(unnamed)"; }

static rg_status gemm_failed(rg_error *err, rg_status st, const char *op, const rg_node *n) {
    char msg[sizeof err->msg];
    memcpy(msg, err->msg, sizeof msg);
    msg[sizeof msg - 1] = 0;
    return rg_fail(err, st, "%s %s: %s", op, name_of(n), msg);
}

rg_status cpu_linear_ce(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const char *op = rg_op_name(RG_OP_LINEAR_CE);
    const rg_tensor *w = &n->src[0]->t, *h = &n->src[1]->t, *labels = &n->src[2]->t;
    const int32_t ignore = (int32_t)n->ip[0];
    double inv_n = 0.0;
    int64_t n_valid = 0;
    rg_status st = lce_check(op, n, w, h, labels, ignore, n->fp[0], &inv_n, &n_valid, err);
    if (st) return st;
    const int64_t d = w->ne[0], V = w->ne[1], T = h->ne[1];
    if ((st = need_f32_rows(op, n, &n->t, "output", err))) return st;
    if (rg_tensor_nelements(&n->t) != T + 1)
        return rg_fail(err, RG_ERR_ARG, "%s '%s': the output must hold %lld values", op, n->t.name, (long long)(T + 1));
    float *out = n->t.data;  // [T + 1]
    memset(out, 0, sizeof(float) * (size_t)(T + 1));
    if (n_valid == 0 || V == 0) return RG_OK;  // §5.8: no valid token, loss 0
    const int64_t chunk = rg_linear_ce_chunk(n, V, T);
    const int nth = rg_threadpool_size(ctx->pool);
    lce_layout L = layout(ctx->scratch, w, d, V, T, chunk, false, nth);
    if (!ctx->scratch || ctx->scratch_size < L.total)
        return rg_fail(err, RG_ERR_ARG, "%s '%s': scratch of %zu bytes is below the %zu needed", op, n->t.name,
                       ctx->scratch_size, L.total);
    const rg_node *wn = n->src[0];  // the head: its products through cpu_run_products (a frozen head's tiles kept)
    lce_ctx c = {.w = w, .h = h, .z = L.z, .chunk = chunk};
    lce_rows r = {.z = L.z, .T = T, .chunk = chunk, .labels = labels->data, .ignore = ignore, .m = L.m, .zt = L.zt,
                  .s = L.s};
    for (int64_t v0 = 0; v0 < V; v0 += chunk) {
        const int64_t nv = V - v0 < chunk ? V - v0 : chunk;
        c.v0 = v0;
        rg_gemm_batch b = lce_batch(LCE_LOGITS, w, d, T, nv, false, &c);
        if ((st = cpu_run_products(ctx, wn, &b, L.work, L.work_size, err))) return gemm_failed(err, st, op, n);
        r.v0 = v0, r.nv = nv, r.first = v0 == 0;
        run_rows(ctx->pool, chunk_lse_rows, &r, T * nv * 4);
    }
    const int32_t *lab = labels->data;
    double sum = 0.0;
    for (int64_t t = 0; t < T; t++) {
        if (lab[t] == ignore) continue;
        const double lse = (double)L.m[t] + log(L.s[t]);
        out[1 + t] = (float)lse;
        sum += lse - (double)L.zt[t];
    }
    out[0] = (float)(sum * inv_n);
    return RG_OK;
}

rg_status cpu_linear_ce_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const char *op = rg_op_name(RG_OP_LINEAR_CE_BACK);
    const rg_node *fwd = n->src[2];
    if (!fwd || fwd->op != RG_OP_LINEAR_CE || !fwd->t.data)
        return rg_fail(err, RG_ERR_ARG, "%s '%s': src[2] must be the linear_ce node, run", op, n->t.name);
    const rg_tensor *dyt = &n->src[0]->t, *h = &n->src[1]->t, *w = &fwd->src[0]->t, *labels = &fwd->src[2]->t;
    const rg_tensor *dwt = n->src[3] ? &n->src[3]->t : NULL;
    const int32_t ignore = (int32_t)n->ip[0];
    double inv_n = 0.0;
    int64_t n_valid = 0;
    rg_status st = lce_check(op, n, w, h, labels, ignore, n->fp[0], &inv_n, &n_valid, err);
    if (st) return st;
    const int64_t d = w->ne[0], V = w->ne[1], T = h->ne[1];
    const bool with_dw = dwt != NULL;
    if ((st = need_f32_rows(op, n, dyt, "dy", err)) || (st = need_f32_rows(op, n, &n->t, "output", err)) ||
        (with_dw && (st = need_f32_rows(op, n, dwt, "dw", err))))
        return st;
    if (rg_tensor_nelements(dyt) != T + 1 || n->t.ne[0] != d || n->t.ne[1] != T || !rg_tensor_is_contiguous(&n->t) ||
        (with_dw && (dwt->ne[0] != d || dwt->ne[1] != V || !rg_tensor_is_contiguous(dwt)))) {
        char s1[96], s2[96];
        return rg_fail(err, RG_ERR_ARG, "%s '%s': dy %s or the packed outputs (dh %s) do not fit d = %lld, T = %lld, V = %lld",
                       op, n->t.name, rg_tensor_shape_str(dyt, s1, sizeof s1), rg_tensor_shape_str(&n->t, s2, sizeof s2),
                       (long long)d, (long long)T, (long long)V);
    }
    const float *dy = dyt->data;
    float *dh = n->t.data, *dw = with_dw ? dwt->data : NULL;
    memset(dh, 0, sizeof(float) * (size_t)(d * T));
    if (dw) memset(dw, 0, sizeof(float) * (size_t)(d * V));
    const double coef0 = (double)dy[0] * inv_n;
    bool any = false;
    const int32_t *lab = labels->data;
    for (int64_t t = 0; t < T && !any; t++) any = lab[t] != ignore && (coef0 != 0.0 || dy[1 + t] != 0.0f);
    if (!any || V == 0) return RG_OK;  // every G is 0
    const int64_t chunk = rg_linear_ce_chunk(n, V, T);
    const int nth = rg_threadpool_size(ctx->pool);
    lce_layout L = layout(ctx->scratch, w, d, V, T, chunk, true, nth);
    if (!ctx->scratch || ctx->scratch_size < L.total)
        return rg_fail(err, RG_ERR_ARG, "%s '%s': scratch of %zu bytes is below the %zu needed", op, n->t.name,
                       ctx->scratch_size, L.total);
    const rg_sgemm_impl impl = ctx->bf16_products ? RG_SGEMM_BF16 : RG_SGEMM_AUTO;  // dW's product (B: h)
    const rg_node *wn = fwd->src[0];
    lce_ctx c = {.w = w, .h = h, .z = L.z, .chunk = chunk, .dh = dh, .dw = dw};
    lce_rows r = {.z = L.z, .T = T, .chunk = chunk, .labels = lab, .ignore = ignore,
                  .lse = (const float *)fwd->t.data + 1, .dy = dy, .coef0 = coef0};
    for (int64_t v0 = 0; v0 < V; v0 += chunk) {
        const int64_t nv = V - v0 < chunk ? V - v0 : chunk;
        c.v0 = v0;
        rg_gemm_batch b = lce_batch(LCE_LOGITS, w, d, T, nv, false, &c);
        if ((st = cpu_run_products(ctx, wn, &b, L.work, L.work_size, err))) return gemm_failed(err, st, op, n);
        r.v0 = v0, r.nv = nv;
        run_rows(ctx->pool, chunk_grad_rows, &r, T * nv * 4);
        b = lce_batch(LCE_DH, w, d, T, nv, v0 > 0, &c);
        if ((st = cpu_run_products(ctx, wn, &b, L.work, L.work_size, err))) return gemm_failed(err, st, op, n);
        if (!with_dw) continue;
        b = lce_batch(LCE_DW, w, d, T, nv, false, &c);
        if ((st = rg_gemm_run(ctx->pool, impl, &b, L.work, L.work_size, err))) return gemm_failed(err, st, op, n);
    }
    return RG_OK;
}
