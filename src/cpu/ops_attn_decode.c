// ops_attn_decode.c - ATTN_DECODE: attention of T new queries against a KV
// cache in one op (the generation path of forward.c), instead of MUL_MAT,
// SOFT_MAX, MUL_MAT and a CONT.
//
//   q  [Dh, H, T] f32            the new queries (roped), packed
//   k  [Dh, n_kv, Hkv] f32/f16   cached keys, rows packed (a view of the cache)
//   vt [n_kv, Dh, Hkv] f32/f16   cached values transposed, rows packed
//   y  [Dh, H, T] f32            y[:, h, t] = sum_j p_j v_j, p = softmax_j(z_j)
//   z_j = scale q.k_j (f32), or softcap * tanhf(scale q.k_j / softcap) with fp[1] = softcap > 0
//   (SOFT_MAX's cap, gemma2)
//
// Query t sees keys j < vis = n_kv - T + 1 + t (causal), and with ip[0] = window > 0 only
// j >= vis - window (a sliding window, gemma's local layers); head h reads kv head
// h / G (G = H / Hkv, as MUL_MAT broadcasts). The chunks lie at multiples of AD_CH from key 0
// whatever T is, so a query's bits do not depend on the batch it came in (a session's exact
// batches, rg_session_eval_exact).
//
// Split-K ("flash decoding"): the keys are cut into chunks of AD_CH. A work
// item is (token, kv head, chunk): the chunk's scores for the G heads that
// read its keys (each key row loaded once for all of them), per head their max
// m, p_j = exp(scale s_j - m) and l = sum p_j, then o = sum_j p_j v_j for all
// G heads at once (each value row loaded once). A second section merges each
// head's chunks in chunk order, in double:
//   y = sum_c e^(m_c - M) o_c / sum_c e^(m_c - M) l_c,   M = max_c m_c.
// The items and the merge order depend only on the shapes, never on the
// thread count, so the results do not either. The products take four rows at
// a time with one horizontal reduction for the four (ops_attn_decode_avx2.c),
// and long contexts spread over every thread. The first version of this op
// (one (token, head) pair per part, a horizontal sum per key and head) was
// slower than the unfused ops it replaced; bench_attn measures both.
#include <math.h>
#include <string.h>

#include "base/cpu.h"
#include "base/error.h"
#include "cpu/cpu_ops.h"
#include "cpu/exp_poly.h"
#include "cpu/rows_avx2.h"
#include "tensor/half.h"

#define AD_CH 128  // keys per chunk

// ops_attn_decode_avx2.c (see there); without AVX2 they do nothing (rg_ad_avx2_built = 0).
extern const int rg_ad_avx2_built;
void rg_attn_scores_avx2(const char *k, size_t k_stride, bool f16, int64_t n, const float *q, size_t q_stride, int G,
                         int64_t Dh, float *s, size_t s_stride);
void rg_attn_values_avx2(const char *vt, size_t v_stride, bool f16, int64_t n, const float *p, size_t p_stride, int G,
                         int64_t Dh, float *o, size_t o_stride);

typedef struct ad_job {
    const rg_tensor *q, *k, *vt;
    float *y;
    int64_t Dh, H, Hkv, G, T, n_kv, n_ch, window;
    float scale, softcap;
    bool f16, avx2;
    float *work;        // per part: [G][AD_CH] scores, then probabilities
    size_t work_floats; // per part
    float *part;        // [T][H][n_ch][Dh + 2]: m, l, o
} ad_job;

static size_t part_floats(int64_t Dh) { return (size_t)Dh + 2; }

static float elem(const ad_job *j, const char *p, int64_t i) {
    return j->f16 ? rg_fp16_to_fp32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

// out[g * out_stride + r] = row_r . x_g (r < nrows rows `stride` bytes apart, n terms; g < G).
static void product(const ad_job *j, bool scores, const char *rows, size_t stride, int64_t nrows, int64_t n,
                    const float *x, size_t x_stride, float *out, size_t out_stride) {
    if (j->avx2) {
        if (scores) rg_attn_scores_avx2(rows, stride, j->f16, nrows, x, x_stride, (int)j->G, n, out, out_stride);
        else rg_attn_values_avx2(rows, stride, j->f16, n, x, x_stride, (int)j->G, nrows, out, out_stride);
        return;
    }
    for (int64_t g = 0; g < j->G; g++)
        for (int64_t r = 0; r < nrows; r++) {
            const char *row = rows + (size_t)r * stride;
            float acc = 0.0f;
            for (int64_t i = 0; i < n; i++) acc += elem(j, row, i) * x[(size_t)g * x_stride + i];
            out[(size_t)g * out_stride + r] = acc;
        }
}

// One item: token t, kv head kvh, keys [j0, j0 + n) (n > 0), for its G heads.
static void run_item(const ad_job *j, int64_t t, int64_t kvh, int64_t c, int64_t j0, int64_t n, float *p) {
    const int64_t Dh = j->Dh, h0 = kvh * j->G;
    const size_t es = j->f16 ? 2 : 4;
    const char *k = (const char *)j->k->data + kvh * j->k->nb[2] + (size_t)j0 * j->k->nb[1];
    const char *vt = (const char *)j->vt->data + kvh * j->vt->nb[2] + (size_t)j0 * es;
    const float *q = (const float *)j->q->data + (t * j->H + h0) * Dh;
    product(j, true, k, j->k->nb[1], n, Dh, q, (size_t)Dh, p, AD_CH);  // p[g][i] = k_i . q_g
    float *out = j->part + ((t * j->H + h0) * j->n_ch + c) * part_floats(Dh);
    const size_t out_stride = (size_t)j->n_ch * part_floats(Dh);  // the next head's part of this chunk
    for (int64_t g = 0; g < j->G; g++) {
        float *pg = p + g * AD_CH, mx = -INFINITY;
        double sums[8] = {0};
        if (j->avx2 && j->softcap <= 0.0f) {
            mx = rg_sm_scores_avx2(pg, NULL, j->scale, pg, n);
            rg_ce_exp_sum_avx2(pg, pg, n, mx, sums);
        } else if (j->avx2) {  // capped: the scores here, the exponentials on the vector path
            for (int64_t i = 0; i < n; i++) {
                pg[i] = j->softcap * tanhf(pg[i] * j->scale / j->softcap);
                if (pg[i] > mx) mx = pg[i];
            }
            rg_ce_exp_sum_avx2(pg, pg, n, mx, sums);
        } else {
            for (int64_t i = 0; i < n; i++) {
                pg[i] *= j->scale;
                if (j->softcap > 0.0f) pg[i] = j->softcap * tanhf(pg[i] / j->softcap);
                if (pg[i] > mx) mx = pg[i];
            }
            for (int64_t i = 0; i < n; i++) {
                pg[i] = rg_exp_neg_abs(pg[i] - mx);
                sums[i % 8] += (double)pg[i];
            }
        }
        out[g * out_stride] = mx;
        out[g * out_stride + 1] =
            (float)(((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7])));
    }
    product(j, false, vt, j->vt->nb[1], Dh, n, p, AD_CH, out + 2, out_stride);  // o[g][d] = vt_d . p_g
}

// The first key query t sees: 0, or the start of its window.
static int64_t first_key(const ad_job *j, int64_t vis) { return j->window > 0 && vis > j->window ? vis - j->window : 0; }

static void ad_items(void *arg, int ith, int nth) {
    const ad_job *j = arg;
    int64_t i0, i1;
    rg_split_range(j->T * j->Hkv * j->n_ch, ith, nth, &i0, &i1);
    float *p = j->work + (size_t)ith * j->work_floats;
    for (int64_t it = i0; it < i1; it++) {  // it = (t * Hkv + kvh) * n_ch + c
        const int64_t c = it % j->n_ch, kvh = it / j->n_ch % j->Hkv, t = it / j->n_ch / j->Hkv;
        const int64_t vis = j->n_kv - j->T + 1 + t, lo = first_key(j, vis);
        const int64_t j0 = c * AD_CH > lo ? c * AD_CH : lo, j1 = (c + 1) * AD_CH < vis ? (c + 1) * AD_CH : vis;
        if (j0 >= j1) continue;  // masked for this token: the merge skips it
        run_item(j, t, kvh, c, j0, j1 - j0, p);
    }
}

// Each (token, head): its chunks merged in chunk order, in double.
static void ad_merge(void *arg, int ith, int nth) {
    const ad_job *j = arg;
    int64_t r0, r1;
    rg_split_range(j->T * j->H, ith, nth, &r0, &r1);
    const size_t pf = part_floats(j->Dh);
    for (int64_t r = r0; r < r1; r++) {  // r = t * H + h
        const int64_t t = r / j->H, vis = j->n_kv - j->T + 1 + t, nc = (vis + AD_CH - 1) / AD_CH;
        const int64_t c0 = first_key(j, vis) / AD_CH;  // the chunks before hold no key of the window
        const float *pc = j->part + (size_t)r * j->n_ch * pf;
        double M = -INFINITY, L = 0, acc[512];
        for (int64_t c = c0; c < nc; c++) M = fmax(M, (double)pc[c * pf]);
        for (int64_t d = 0; d < j->Dh; d++) acc[d] = 0;
        for (int64_t c = c0; c < nc; c++) {
            const float *o = pc + c * pf;
            const double e = exp((double)o[0] - M);
            L += e * (double)o[1];
            for (int64_t d = 0; d < j->Dh; d++) acc[d] += e * (double)o[2 + d];
        }
        float *y = j->y + r * j->Dh;
        for (int64_t d = 0; d < j->Dh; d++) y[d] = (float)(acc[d] / L);  // L >= 1: the max contributes e^0 * l >= 1
    }
}

static size_t work_floats(int64_t G) { return (size_t)(G * AD_CH); }

size_t cpu_attn_decode_work(const rg_node *n, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    const int64_t Dh = n->src[0]->t.ne[0], H = n->src[0]->t.ne[1], T = n->src[0]->t.ne[2];
    const int64_t Hkv = n->src[1]->t.ne[2], G = Hkv > 0 ? H / Hkv : 1;
    const int64_t n_ch = (n->src[1]->t.ne[1] + AD_CH - 1) / AD_CH;
    return ((size_t)n_threads * work_floats(G) + (size_t)(T * H * n_ch) * part_floats(Dh)) * sizeof(float);
}

rg_status cpu_attn_decode(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const rg_tensor *q = &n->src[0]->t, *k = &n->src[1]->t, *vt = &n->src[2]->t;
    ad_job j = {.q = q, .k = k, .vt = vt, .y = n->t.data, .Dh = q->ne[0], .H = q->ne[1], .Hkv = k->ne[2],
                .T = q->ne[2], .n_kv = k->ne[1], .window = n->ip[0], .scale = n->fp[0], .softcap = n->fp[1],
                .f16 = k->type == RG_TYPE_F16};
    const size_t es = rg_type_get(k->type)->type_size;
    if (j.Hkv <= 0 || j.H % j.Hkv || k->ne[0] != j.Dh || vt->ne[1] != j.Dh || vt->ne[0] != j.n_kv ||
        vt->ne[2] != j.Hkv || j.T > j.n_kv || k->nb[0] != es || vt->nb[0] != es || vt->type != k->type ||
        (k->type != RG_TYPE_F32 && k->type != RG_TYPE_F16) || j.Dh < 1 || j.Dh > 512)
        return rg_fail(err, RG_ERR_ARG, "attn_decode '%s': the sources do not fit (head size %lld: at most 512)",
                       n->t.name, (long long)j.Dh);
    j.G = j.H / j.Hkv;
    j.n_ch = (j.n_kv + AD_CH - 1) / AD_CH;
    j.avx2 = rg_ad_avx2_built && rg_ce_avx2_built && rg_sm_avx2_built && rg_cpu_has_avx2();
    const int nth = rg_threadpool_size(ctx->pool);
    const size_t need = cpu_attn_decode_work(n, nth);
    if (!ctx->scratch || ctx->scratch_size < need)
        return rg_fail(err, RG_ERR_ARG, "attn_decode '%s': scratch of %zu bytes is below the %zu needed", n->t.name,
                       ctx->scratch_size, need);
    j.work_floats = work_floats(j.G);
    j.work = ctx->scratch;
    j.part = j.work + (size_t)nth * j.work_floats;
    rg_threadpool_run(ctx->pool, ad_items, &j);
    if (j.T * j.H * j.n_ch <= 64) ad_merge(&j, 0, 1);  // a few chunks: not worth a section
    else rg_threadpool_run(ctx->pool, ad_merge, &j);
    return RG_OK;
}
