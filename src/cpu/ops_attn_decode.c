// ops_attn_decode.c - ATTN_DECODE: attention of T new queries against a KV
// cache in one op with one parallel section (the generation path of
// forward.c), instead of MUL_MAT, SOFT_MAX, MUL_MAT and a CONT, three parallel
// sections per layer.
//
//   q  [Dh, H, T] f32            the new queries (roped), packed
//   k  [Dh, n_kv, Hkv] f32/f16   cached keys, rows packed (a view of the cache)
//   vt [n_kv, Dh, Hkv] f32/f16   cached values transposed, rows packed
//   y  [Dh, H, T] f32            y[:, h, t] = sum_j p_j v_j, p = softmax_j(scale q.k_j)
//
// Query t sees keys j < vis = n_kv - T + 1 + t (causal); head h reads kv head
// h / G (G = H / Hkv, as MUL_MAT broadcasts). The work items are the T x H
// (token, head) pairs, split between the parts in order; a part takes its
// consecutive heads of one kv head (up to AD_GMAX) together, so each key row
// and each value row is loaded once for all of them. Per head, the arithmetic
// is that of the ops this one replaces: the scores are the dot products of
// MUL_MAT's F16/F32 rows (dot_rows_avx2.c's order, or the type's vec_dot
// without AVX2), z = scale * s, SOFT_MAX's exponentials (exp_poly.h) summed
// in 8 double partial sums and scaled by 1 / sum in double, masked keys 0,
// and the outputs MUL_MAT's dot products of each value row with all n_kv
// probabilities. So the results are the bits of the unfused graph (greedy
// generation unchanged) and do not depend on the thread count.
#include <math.h>
#include <string.h>

#include "base/cpu.h"
#include "base/error.h"
#include "cpu/cpu_ops.h"
#include "cpu/rows_avx2.h"
#include "cpu/exp_poly.h"
#include "tensor/quant/quant.h"

#define AD_GMAX 8  // heads per pass over a kv head's rows

// ops_attn_decode_avx2.c: out[g * out_stride] = w . x[g * x_stride ..] (K
// terms) for G <= AD_GMAX, summed as dot_rows_avx2.c sums a row.
extern const int rg_ad_avx2_built;
void rg_attn_dots_avx2(int64_t K, const char *w, bool f16, const float *x, size_t x_stride, int64_t G, float *out,
                       size_t out_stride);

typedef struct ad_job {
    const rg_tensor *q, *k, *vt;
    float *y;
    int64_t Dh, H, Hkv, G, T, n_kv;
    float scale;
    bool f16, avx2;
    const rg_quant_ops *ops;  // the cache type's (vec_dot without AVX2)
    float *p;                 // [nth][AD_GMAX][n_kv] scores, then probabilities
} ad_job;

static void dots(const ad_job *j, int64_t K, const char *w, const float *x, size_t x_stride, int64_t G, float *out,
                 size_t out_stride) {
    if (j->avx2) {
        rg_attn_dots_avx2(K, w, j->f16, x, x_stride, G, out, out_stride);
        return;
    }
    for (int64_t g = 0; g < G; g++) j->ops->vec_dot(K, &out[(size_t)g * out_stride], w, x + (size_t)g * x_stride);
}

// p [n_kv]: the first vis scores become SOFT_MAX's probabilities, the rest 0.
static void softmax_row(const ad_job *j, float *p, int64_t vis) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < vis; i++) {
        p[i] = j->scale * p[i];
        if (p[i] > mx) mx = p[i];
    }
    double sums[8] = {0};
    if (j->avx2) {
        rg_ce_exp_sum_avx2(p, p, vis, mx, sums);
    } else {
        for (int64_t i = 0; i < vis; i++) {
            p[i] = rg_exp_neg_abs(p[i] - mx);
            sums[i % 8] += (double)p[i];
        }
    }
    const double sum = ((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7]));
    const double inv = 1.0 / sum;  // sum >= 1: the max contributes exp(0)
    if (j->avx2) {
        rg_ce_scale_avx2(p, vis, inv);
    } else {
        for (int64_t i = 0; i < vis; i++) p[i] = (float)((double)p[i] * inv);
    }
    for (int64_t i = vis; i < j->n_kv; i++) p[i] = 0.0f;
}

// Heads h0 .. h0 + G - 1 of token t, all reading kv head kvh.
static void run_heads(const ad_job *j, int64_t t, int64_t h0, int64_t G, float *p) {
    const int64_t kvh = h0 / j->G, n_kv = j->n_kv, vis = n_kv - j->T + 1 + t, Dh = j->Dh;
    const char *k = (const char *)j->k->data + kvh * j->k->nb[2];
    const char *vt = (const char *)j->vt->data + kvh * j->vt->nb[2];
    const float *q = (const float *)j->q->data + (t * j->H + h0) * Dh;
    float *y = j->y + (t * j->H + h0) * Dh;
    for (int64_t i = 0; i < vis; i++) dots(j, Dh, k + i * j->k->nb[1], q, (size_t)Dh, G, &p[i], (size_t)n_kv);
    for (int64_t g = 0; g < G; g++) softmax_row(j, p + g * n_kv, vis);
    for (int64_t d = 0; d < Dh; d++) dots(j, n_kv, vt + d * j->vt->nb[1], p, (size_t)n_kv, G, &y[d], (size_t)Dh);
}

static void ad_heads(void *arg, int ith, int nth) {
    const ad_job *j = arg;
    int64_t r0, r1;
    rg_split_range(j->T * j->H, ith, nth, &r0, &r1);
    float *p = j->p + (size_t)ith * AD_GMAX * (size_t)j->n_kv;
    while (r0 < r1) {  // r = t * H + h; a run stays within one kv head
        const int64_t t = r0 / j->H, h = r0 % j->H, kv_end = (h / j->G + 1) * j->G;
        int64_t G = r1 - r0 < kv_end - h ? r1 - r0 : kv_end - h;
        if (G > AD_GMAX) G = AD_GMAX;
        run_heads(j, t, h, G, p);
        r0 += G;
    }
}

size_t cpu_attn_decode_work(const rg_node *n, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    return (size_t)n_threads * AD_GMAX * (size_t)n->src[1]->t.ne[1] * sizeof(float);
}

rg_status cpu_attn_decode(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const rg_tensor *q = &n->src[0]->t, *k = &n->src[1]->t, *vt = &n->src[2]->t;
    ad_job j = {q, k, vt, n->t.data, q->ne[0], q->ne[1], k->ne[2], 0, q->ne[2], k->ne[1], n->fp[0],
                k->type == RG_TYPE_F16, false, rg_quant_get(k->type), NULL};
    const size_t es = rg_type_get(k->type)->type_size;
    if (j.Hkv <= 0 || j.H % j.Hkv || k->ne[0] != j.Dh || vt->ne[1] != j.Dh || vt->ne[0] != j.n_kv ||
        vt->ne[2] != j.Hkv || j.T > j.n_kv || k->nb[0] != es || vt->nb[0] != es || vt->type != k->type ||
        (k->type != RG_TYPE_F32 && k->type != RG_TYPE_F16))
        return rg_fail(err, RG_ERR_ARG, "attn_decode '%s': the sources do not fit", n->t.name);
    j.G = j.H / j.Hkv;
    j.avx2 = rg_ad_avx2_built && rg_ce_avx2_built && rg_cpu_has_avx2();
    const size_t need = (size_t)rg_threadpool_size(ctx->pool) * AD_GMAX * (size_t)j.n_kv * sizeof(float);
    if (!ctx->scratch || ctx->scratch_size < need)
        return rg_fail(err, RG_ERR_ARG, "attn_decode '%s': scratch of %zu bytes is below the %zu needed", n->t.name,
                       ctx->scratch_size, need);
    j.p = ctx->scratch;
    rg_threadpool_run(ctx->pool, ad_heads, &j);
    return RG_OK;
}
