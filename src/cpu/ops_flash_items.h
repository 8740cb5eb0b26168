// ops_flash_items.h - the per-item loops of FLASH_ATTN_EXT and FLASH_ATTN_BACK (the rules
// are in ops_flash.c's header), included by ops_flash.c and ops_flash_avx2.c with
// FA_FN(name) naming their entry points. Every loop below is either elementwise (the
// compiler may vectorize it without changing a bit: -ffp-contract=off keeps products and
// sums rounded apart) or a dot product in 8 lanes (element i in lane i mod 8, in order,
// then a fixed tree), written with intrinsics in the AVX2 build and as plain lanes in the
// baseline: the same operations in the same order, so the same bits.
#include <math.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>

#include "cpu/transpose8_avx2.h"
#endif

#include "base/threadpool.h"
#include "cpu/exp_poly.h"
#include "cpu/ops_flash_jobs.h"
#include "tensor/half.h"

#define BR RG_FLASH_BR
#define BC RG_FLASH_BC

// Lanes l[0..7] of a dot product after element D8 (a multiple of 8): the tail elements in
// lanes 0.., then the tree.
static inline float fa_finish(float *restrict l, const float *restrict x, const float *restrict row, int64_t D8,
                              int64_t Dh) {
    for (int64_t i = D8; i < Dh; i++) l[i - D8] = l[i - D8] + x[i] * row[i];
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

// out[r] = x . rows[r] for the n rows of rows [n][Dh].
static inline void fa_dot_rows(const float *restrict x, const float *restrict rows, int64_t n, int64_t Dh,
                               float *restrict out) {
    const int64_t D8 = Dh & ~(int64_t)7;
    int64_t r = 0;
#ifdef __AVX2__
    for (; r + 4 <= n; r += 4) {  // four rows per pass: x loaded once for the four
        const float *r0 = rows + r * Dh, *r1 = r0 + Dh, *r2 = r1 + Dh, *r3 = r2 + Dh;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t i = 0; i < D8; i += 8) {
            const __m256 xv = _mm256_loadu_ps(x + i);
            a0 = _mm256_add_ps(a0, _mm256_mul_ps(xv, _mm256_loadu_ps(r0 + i)));
            a1 = _mm256_add_ps(a1, _mm256_mul_ps(xv, _mm256_loadu_ps(r1 + i)));
            a2 = _mm256_add_ps(a2, _mm256_mul_ps(xv, _mm256_loadu_ps(r2 + i)));
            a3 = _mm256_add_ps(a3, _mm256_mul_ps(xv, _mm256_loadu_ps(r3 + i)));
        }
        float l[4][8];
        _mm256_storeu_ps(l[0], a0), _mm256_storeu_ps(l[1], a1), _mm256_storeu_ps(l[2], a2), _mm256_storeu_ps(l[3], a3);
        out[r] = fa_finish(l[0], x, r0, D8, Dh);
        out[r + 1] = fa_finish(l[1], x, r1, D8, Dh);
        out[r + 2] = fa_finish(l[2], x, r2, D8, Dh);
        out[r + 3] = fa_finish(l[3], x, r3, D8, Dh);
    }
#endif
    for (; r < n; r++) {
        const float *row = rows + r * Dh;
        float l[8] = {0};
        for (int64_t i = 0; i < D8; i += 8)
            for (int k = 0; k < 8; k++) l[k] = l[k] + x[i + k] * row[i + k];
        out[r] = fa_finish(l, x, row, D8, Dh);
    }
}

// fa_dot_rows for the rows of two vectors at once, x0 into out0 and x1 into out1 (x1 NULL:
// x0 alone): the AVX2 build loads each row once for both (4 rows x 2 vectors per pass);
// every dot product makes fa_dot_rows' operations in its order.
static inline void fa_dot_rows2(const float *restrict x0, const float *restrict x1, const float *restrict rows, int64_t n,
                                int64_t Dh, float *restrict out0, float *restrict out1) {
#ifdef __AVX2__
    if (x1) {
        const int64_t D8 = Dh & ~(int64_t)7;
        int64_t r = 0;
        for (; r + 4 <= n; r += 4) {
            const float *r0 = rows + r * Dh, *r1 = r0 + Dh, *r2 = r1 + Dh, *r3 = r2 + Dh;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
            for (int64_t i = 0; i < D8; i += 8) {
                const __m256 u = _mm256_loadu_ps(x0 + i), v = _mm256_loadu_ps(x1 + i);
                const __m256 k0 = _mm256_loadu_ps(r0 + i), k1 = _mm256_loadu_ps(r1 + i), k2 = _mm256_loadu_ps(r2 + i),
                             k3 = _mm256_loadu_ps(r3 + i);
                a0 = _mm256_add_ps(a0, _mm256_mul_ps(u, k0)), b0 = _mm256_add_ps(b0, _mm256_mul_ps(v, k0));
                a1 = _mm256_add_ps(a1, _mm256_mul_ps(u, k1)), b1 = _mm256_add_ps(b1, _mm256_mul_ps(v, k1));
                a2 = _mm256_add_ps(a2, _mm256_mul_ps(u, k2)), b2 = _mm256_add_ps(b2, _mm256_mul_ps(v, k2));
                a3 = _mm256_add_ps(a3, _mm256_mul_ps(u, k3)), b3 = _mm256_add_ps(b3, _mm256_mul_ps(v, k3));
            }
            if (D8 == Dh) {  // no tail: the eight trees at once, lanes transposed (the same adds, pair by pair)
                __m256i t[8] = {_mm256_castps_si256(a0), _mm256_castps_si256(a1), _mm256_castps_si256(a2),
                                _mm256_castps_si256(a3), _mm256_castps_si256(b0), _mm256_castps_si256(b1),
                                _mm256_castps_si256(b2), _mm256_castps_si256(b3)};
                rg_transpose8_epi32(t);
                __m256 f[8];
                for (int k = 0; k < 8; k++) f[k] = _mm256_castsi256_ps(t[k]);
                const __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(f[0], f[1]), _mm256_add_ps(f[2], f[3])),
                                                 _mm256_add_ps(_mm256_add_ps(f[4], f[5]), _mm256_add_ps(f[6], f[7])));
                float o[8];
                _mm256_storeu_ps(o, sum);
                for (int k = 0; k < 4; k++) out0[r + k] = o[k], out1[r + k] = o[4 + k];
                continue;
            }
            float l[8][8];
            _mm256_storeu_ps(l[0], a0), _mm256_storeu_ps(l[1], a1), _mm256_storeu_ps(l[2], a2), _mm256_storeu_ps(l[3], a3);
            _mm256_storeu_ps(l[4], b0), _mm256_storeu_ps(l[5], b1), _mm256_storeu_ps(l[6], b2), _mm256_storeu_ps(l[7], b3);
            const float *rk[4] = {r0, r1, r2, r3};
            for (int k = 0; k < 4; k++) {
                out0[r + k] = fa_finish(l[k], x0, rk[k], D8, Dh);
                out1[r + k] = fa_finish(l[4 + k], x1, rk[k], D8, Dh);
            }
        }
        if (r < n) {
            fa_dot_rows(x0, rows + r * Dh, n - r, Dh, out0 + r);
            fa_dot_rows(x1, rows + r * Dh, n - r, Dh, out1 + r);
        }
        return;
    }
#endif
    fa_dot_rows(x0, rows, n, Dh, out0);
    if (x1) fa_dot_rows(x1, rows, n, Dh, out1);
}

// dst[c] = exp(a) for a = src[c] - sub, clamped to a <= 0 when clamp (a NaN stays NaN), by
// exp_poly.h's exp(-|a|): its 8-lane form in the AVX2 build, the same bits as the scalar one.
static inline void fa_exp_row(float *dst, const float *src, float sub, bool clamp, int64_t n) {
    int64_t c = 0;
#ifdef __AVX2__
    const __m256 sv = _mm256_set1_ps(sub), zero = _mm256_setzero_ps();
    for (; c + 8 <= n; c += 8) {
        __m256 a = _mm256_sub_ps(_mm256_loadu_ps(src + c), sv);
        if (clamp) a = _mm256_min_ps(zero, a);  // a > 0 -> 0; a NaN or a zero: a (MINPS's second operand)
        _mm256_storeu_ps(dst + c, rg_exp_neg_abs8(a));
    }
#endif
    for (; c < n; c++) {
        float a = src[c] - sub;
        if (clamp) a = a > 0.0f ? 0.0f : a;
        dst[c] = rg_exp_neg_abs(a);
    }
}

// y += a x over n elements (each lane its own multiply and add).
static inline void fa_axpy(float *restrict y, float a, const float *restrict x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = y[i] + a * x[i];
}

// acc_i += sum_k w_ik x_k for i < n_acc (acc_i [Dh] at acc + i Dh, w_ik = w[i ws_i + k ws_k],
// x_k = xrows[k], or xbase + k xstride without xrows), k < n_terms in order, a zero weight
// skipped: fa_axpy term after term. The AVX2 build keeps 32 floats of acc_i in registers over
// the terms: the same operations in the same order, so the same bits.
static inline void fa_accum(float *restrict acc, int64_t n_acc, const float *restrict w, int64_t ws_i, int64_t ws_k,
                            const float *const *xrows, const float *xbase, int64_t xstride, int64_t n_terms, int64_t Dh) {
    for (int64_t i = 0; i < n_acc; i++) {
        float *a = acc + i * Dh;
        const float *wi = w + i * ws_i;
        int64_t e0 = 0;
#ifdef __AVX2__
        for (; e0 + 32 <= Dh; e0 += 32) {
            __m256 a0 = _mm256_loadu_ps(a + e0), a1 = _mm256_loadu_ps(a + e0 + 8), a2 = _mm256_loadu_ps(a + e0 + 16),
                   a3 = _mm256_loadu_ps(a + e0 + 24);
            for (int64_t k = 0; k < n_terms; k++) {
                const float wk = wi[k * ws_k];
                if (wk == 0.0f) continue;
                const __m256 wv = _mm256_set1_ps(wk);
                const float *x = (xrows ? xrows[k] : xbase + k * xstride) + e0;
                a0 = _mm256_add_ps(a0, _mm256_mul_ps(wv, _mm256_loadu_ps(x)));
                a1 = _mm256_add_ps(a1, _mm256_mul_ps(wv, _mm256_loadu_ps(x + 8)));
                a2 = _mm256_add_ps(a2, _mm256_mul_ps(wv, _mm256_loadu_ps(x + 16)));
                a3 = _mm256_add_ps(a3, _mm256_mul_ps(wv, _mm256_loadu_ps(x + 24)));
            }
            _mm256_storeu_ps(a + e0, a0), _mm256_storeu_ps(a + e0 + 8, a1);
            _mm256_storeu_ps(a + e0 + 16, a2), _mm256_storeu_ps(a + e0 + 24, a3);
        }
#endif
        if (e0 == Dh) continue;
        for (int64_t k = 0; k < n_terms; k++) {
            const float wk = wi[k * ws_k];
            if (wk != 0.0f) fa_axpy(a + e0, wk, (xrows ? xrows[k] : xbase + k * xstride) + e0, Dh - e0);
        }
    }
}

static inline const float *fa_qrow(const flash_job *j, int64_t s, int64_t h, int64_t t) {
    const rg_tensor *q = j->q;
    return (const float *)((const char *)q->data + t * q->nb[1] + h * q->nb[2] + s * q->nb[3]);
}

// Rows [j0, j0 + n) of kv head g of k or v (sequence s) as f32 [n][Dh] (f16 widened exactly).
// Rows are packed, or (v only) strided: a transposed view such as the session's V cache,
// [n_ctx, Dh] stored and read as [Dh, n_kv], gathered key-major (nb[1] is then the element size,
// so the inner loop reads consecutive keys). Either way the tile holds the same values.
static inline void fa_load(const flash_job *j, const rg_tensor *t, int64_t s, int64_t g, int64_t j0, int64_t n,
                           float *dst) {
    const int64_t Dh = j->d.Dh;
    const size_t es = j->f16 ? sizeof(uint16_t) : sizeof(float);
    if (t->nb[0] != es) {
        const char *base = (const char *)t->data + j0 * t->nb[1] + g * t->nb[2] + s * t->nb[3];
        float col[BC];  // n <= BC keys of element e
        for (int64_t e = 0; e < Dh; e++) {
            const char *src = base + e * t->nb[0];
            if (j->f16 && t->nb[1] == es) rg_fp16_to_fp32_row((const uint16_t *)src, col, n);
            else if (j->f16)
                for (int64_t r = 0; r < n; r++) col[r] = rg_fp16_to_fp32(*(const uint16_t *)(src + r * t->nb[1]));
            else
                for (int64_t r = 0; r < n; r++) col[r] = *(const float *)(src + r * t->nb[1]);
            for (int64_t r = 0; r < n; r++) dst[r * Dh + e] = col[r];
        }
        return;
    }
    for (int64_t r = 0; r < n; r++) {
        const char *row = (const char *)t->data + (j0 + r) * t->nb[1] + g * t->nb[2] + s * t->nb[3];
        if (j->f16) rg_fp16_to_fp32_row((const uint16_t *)row, dst + r * Dh, Dh);
        else memcpy(dst + r * Dh, row, sizeof(float) * (size_t)Dh);
    }
}

static inline const int32_t *fa_seg(const flash_job *j, int64_t s) { return j->seg ? j->seg + s * j->seg_stride : NULL; }

static inline bool fa_visible(const flash_job *j, const int32_t *seg, int64_t qpos, int64_t kpos) {
    if (j->causal && kpos > qpos) return false;
    if (j->window > 0 && qpos - kpos >= j->window) return false;
    return !seg || seg[kpos] == seg[qpos];
}

// Whether any of keys [j0, j0 + nc) is visible to any of the queries at [qpos0, qpos0 + nr):
// a tile that is not is skipped whole (above the causal diagonal, before the window, or
// in other documents).
static inline bool fa_tile_any(const flash_job *j, const int32_t *seg, int64_t qpos0, int64_t nr, int64_t j0,
                               int64_t nc) {
    if (j->causal && j0 > qpos0 + nr - 1) return false;
    if (j->window > 0 && qpos0 - (j0 + nc - 1) >= j->window) return false;
    if (!seg) return true;
    for (int64_t r = 0; r < nr; r++)
        for (int64_t c = 0; c < nc; c++)
            if (fa_visible(j, seg, qpos0 + r, j0 + c)) return true;
    return false;
}

// Key tile j0 (sequence s, kv head g) for the queries at [qpos0, qpos0 + nr): false when none
// of them sees any of its keys (the tile is skipped), else its *nc keys and values in Kt, Vt.
static inline bool fa_key_tile(const flash_job *j, const int32_t *seg, int64_t s, int64_t g, int64_t qpos0, int64_t nr,
                               int64_t j0, int64_t *nc, float *Kt, float *Vt) {
    *nc = j->d.Tk - j0 < BC ? j->d.Tk - j0 : BC;
    if (!fa_tile_any(j, seg, qpos0, nr, j0, *nc)) return false;
    fa_load(j, j->k, s, g, j0, *nc, Kt);
    fa_load(j, j->v, s, g, j0, *nc, Vt);
    return true;
}

// The scores of query rows qr[0..nr) against the key tile Kt [nc][Dh] at j0:
// S[r][c] = softcap(scale q.k), -inf where the key is not visible. The forward and both
// backward passes make them alike, so the backward's P is the forward's.
static inline void fa_scores(const flash_job *j, const float *const *qr, int64_t nr, const float *Kt, int64_t nc,
                             const int32_t *seg, int64_t qpos0, int64_t j0, float *S) {
    const float cap = j->softcap;
    for (int64_t r = 0; r < nr; r += 2) {  // q rows in pairs: each key row loaded once for two
        const bool two = r + 1 < nr;
        fa_dot_rows2(qr[r], two ? qr[r + 1] : NULL, Kt, nc, j->d.Dh, S + r * BC, two ? S + (r + 1) * BC : NULL);
    }
    // Every key visible to every row (below the diagonal, inside the window, one document): the
    // same values without asking per element (a prompt's tiles over a long cache are nearly all so).
    const bool all = !seg && (!j->causal || j0 + nc - 1 <= qpos0) && (j->window <= 0 || qpos0 + nr - 1 - j0 < j->window);
    for (int64_t r = 0; r < nr; r++) {
        float *row = S + r * BC;
        if (all && cap == 0.0f) {
            for (int64_t c = 0; c < nc; c++) row[c] = j->scale * row[c];
            continue;
        }
        for (int64_t c = 0; c < nc; c++) {
            float s = j->scale * row[c];
            if (cap > 0.0f) s = cap * tanhf(s / cap);
            row[c] = all || fa_visible(j, seg, qpos0 + r, j0 + c) ? s : -INFINITY;
        }
    }
}

// Item (s, h, query tile): m, l and the o accumulator per row over the key tiles in order
// (training.md §6.2), then o = acc / l and lse = m + log l.
static void fa_fwd_item(const flash_job *j, float *w, int64_t s, int64_t h, int64_t qt) {
    const flash_dims *d = &j->d;
    const int64_t Dh = d->Dh, g = h / d->G, i0 = qt * BR, nr = d->T - i0 < BR ? d->T - i0 : BR, off = d->Tk - d->T;
    float *Kt = w, *Vt = Kt + BC * Dh, *S = Vt + 3 * BC * Dh, *acc = S + 2 * BR * BC, *m = acc + BR * Dh, *l = m + BR;
    const int32_t *seg = fa_seg(j, s);
    const float *qr[BR];
    for (int64_t r = 0; r < nr; r++) {
        qr[r] = fa_qrow(j, s, h, i0 + r);
        m[r] = j->sinks ? j->sinks[h] : -INFINITY;  // a sink: the softmax starts from its logit (§6.7)
        l[r] = j->sinks ? 1.0f : 0.0f;
    }
    memset(acc, 0, sizeof(float) * (size_t)(nr * Dh));
    for (int64_t j0 = 0, nc; j0 < d->Tk; j0 += BC) {
        if (!fa_key_tile(j, seg, s, g, i0 + off, nr, j0, &nc, Kt, Vt)) continue;
        fa_scores(j, qr, nr, Kt, nc, seg, i0 + off, j0, S);
        for (int64_t r = 0; r < nr; r++) {
            float *p = S + r * BC, mx = m[r];
            for (int64_t c = 0; c < nc; c++) mx = p[c] > mx ? p[c] : mx;
            if (mx == -INFINITY) continue;  // nothing visible yet: m, l, acc stay
            const float alpha = rg_exp_neg_abs(m[r] - mx);  // 0 from m = -inf
            fa_exp_row(p, p, mx, false, nc);                 // S - mx <= 0: exp(-|S - mx|) is exp(S - mx)
            float ps = 0.0f;
            for (int64_t c = 0; c < nc; c++) ps = ps + p[c];  // c in order
            l[r] = alpha * l[r] + ps;
            m[r] = mx;
            float *a = acc + r * Dh;
            if (alpha != 1.0f)
                for (int64_t e = 0; e < Dh; e++) a[e] = alpha * a[e];
            fa_accum(a, 1, p, 0, 1, NULL, Vt, Dh, nc, Dh);  // a += sum_c p_c v_c
        }
    }
    for (int64_t r = 0; r < nr; r++) {
        const int64_t t = i0 + r;
        float *o = j->o + Dh * (h + d->H * (t + d->T * s));
        const float *a = acc + r * Dh;
        if (l[r] > 0.0f) {
            for (int64_t e = 0; e < Dh; e++) o[e] = a[e] / l[r];
            j->lse[t + d->T * (h + d->H * s)] = m[r] + logf(l[r]);
        } else {  // no visible key, no sink: o = 0 and P = exp(s - lse) = 0 in the backward
            memset(o, 0, sizeof(float) * (size_t)Dh);
            j->lse[t + d->T * (h + d->H * s)] = INFINITY;
        }
    }
}

void FA_FN(rg_flash_fwd_items)(void *arg, int ith, int nth) {
    const flash_job *j = arg;
    const flash_dims *d = &j->d;
    float *w = j->work + (size_t)ith * j->work_floats;
    for (int64_t it = ith; it < d->S * d->H * d->n_qt; it += nth)  // it = qt + n_qt (h + H s)
        fa_fwd_item(j, w, it / (d->n_qt * d->H), it / d->n_qt % d->H, it % d->n_qt);
}

// ---------------------------------------------------------------------------
// FLASH_ATTN_BACK (training.md §6.3, §6.5: a KV-parallel pass for dK and dV, a
// query-parallel one for dQ, both recomputing P from lse; no atomics)

void FA_FN(rg_flash_dsum_items)(void *arg, int ith, int nth) {
    const flash_job *j = arg;
    const flash_dims *d = &j->d;
    int64_t r0, r1;
    rg_split_range(d->T * d->H * d->S, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {  // r = t + T (h + H s)
        const int64_t t = r % d->T, hs = r / d->T, orow = d->Dh * ((hs % d->H) + d->H * (t + d->T * (hs / d->H)));
        float dot;
        fa_dot_rows(j->dO + orow, j->fo + orow, 1, d->Dh, &dot);
        j->Dsum[r] = dot - j->dlse[r];
    }
}

// P and g = scale dS of query rows qr (dO rows dor) of head h, rows [i0, i0 + nr), against
// the key tile Kt, Vt [nc][Dh] at j0: P = exp(S - lse) (S - lse <= 0 clamped: P <= 1),
// dP = dO.v, dS = P (dP - D), times 1 - (S/c)^2 with a softcap.
static inline void fa_back_tile(const flash_job *j, const float *const *qr, const float *const *dor, int64_t s,
                                int64_t h, int64_t i0, int64_t nr, const float *Kt, const float *Vt, int64_t j0,
                                int64_t nc, const int32_t *seg, float *P, float *G) {
    const flash_dims *d = &j->d;
    const float cap = j->softcap;
    fa_scores(j, qr, nr, Kt, nc, seg, i0 + d->Tk - d->T, j0, P);
    for (int64_t r = 0; r < nr; r += 2) {  // dP = dO.v, dO rows in pairs
        const bool two = r + 1 < nr;
        fa_dot_rows2(dor[r], two ? dor[r + 1] : NULL, Vt, nc, d->Dh, G + r * BC, two ? G + (r + 1) * BC : NULL);
    }
    for (int64_t r = 0; r < nr; r++) {
        const int64_t row = i0 + r + d->T * (h + d->H * s);
        const float lse = j->flse[row], D = j->Dsum[row];
        float *p = P + r * BC, *gr = G + r * BC, e[BC];
        fa_exp_row(e, p, lse, true, nc);
        for (int64_t c = 0; c < nc; c++) {
            const float pc = e[c];
            if (pc == 0.0f) {  // masked (S = -inf) or too small to count: no gradient
                p[c] = 0.0f, gr[c] = 0.0f;
                continue;
            }
            float ds = pc * (gr[c] - D);
            if (cap > 0.0f) {
                const float u = p[c] / cap;
                ds = ds * (1.0f - u * u);
            }
            p[c] = pc;
            gr[c] = ds * j->scale;
        }
    }
}

// Item (s, kv head g, key tile kt): dK, dV of the tile's keys over the group's heads in
// order, each over its query tiles in order.
static void fa_dkv_item(const flash_job *j, float *w, int64_t s, int64_t g, int64_t kt) {
    const flash_dims *d = &j->d;
    const int64_t Dh = d->Dh, j0 = kt * BC, nc = d->Tk - j0 < BC ? d->Tk - j0 : BC, off = d->Tk - d->T;
    float *Kt = w, *Vt = Kt + BC * Dh, *dK = Vt + BC * Dh, *dV = dK + BC * Dh, *P = dV + BC * Dh, *G = P + BR * BC;
    const int32_t *seg = fa_seg(j, s);
    fa_load(j, j->k, s, g, j0, nc, Kt);
    fa_load(j, j->v, s, g, j0, nc, Vt);
    memset(dK, 0, sizeof(float) * (size_t)(nc * Dh));
    memset(dV, 0, sizeof(float) * (size_t)(nc * Dh));
    for (int64_t h = g * d->G; h < (g + 1) * d->G; h++)
        for (int64_t i0 = 0; i0 < d->T; i0 += BR) {
            const int64_t nr = d->T - i0 < BR ? d->T - i0 : BR;
            if (!fa_tile_any(j, seg, i0 + off, nr, j0, nc)) continue;
            const float *qr[BR], *dor[BR];
            for (int64_t r = 0; r < nr; r++)
                qr[r] = fa_qrow(j, s, h, i0 + r), dor[r] = j->dO + Dh * (h + d->H * (i0 + r + d->T * s));
            fa_back_tile(j, qr, dor, s, h, i0, nr, Kt, Vt, j0, nc, seg, P, G);
            fa_accum(dV, nc, P, 1, BC, dor, NULL, 0, nr, Dh);  // dV_c += sum_r P_rc dO_r
            fa_accum(dK, nc, G, 1, BC, qr, NULL, 0, nr, Dh);   // dK_c += sum_r g_rc q_r
        }
    const size_t at = (size_t)(Dh * (j0 + d->Tk * (g + d->Hkv * s))), bytes = sizeof(float) * (size_t)(nc * Dh);
    memcpy(j->dk + at, dK, bytes);
    memcpy(j->dv + at, dV, bytes);
}

void FA_FN(rg_flash_dkv_items)(void *arg, int ith, int nth) {
    const flash_job *j = arg;
    const flash_dims *d = &j->d;
    float *w = j->work + (size_t)ith * j->work_floats;
    for (int64_t it = ith; it < d->S * d->Hkv * d->n_kt; it += nth)  // it = kt + n_kt (g + Hkv s)
        fa_dkv_item(j, w, it / (d->n_kt * d->Hkv), it / d->n_kt % d->Hkv, it % d->n_kt);
}

// Item (s, h, query tile qt): dQ of its rows over the key tiles in order.
static void fa_dq_item(const flash_job *j, float *w, int64_t s, int64_t h, int64_t qt) {
    const flash_dims *d = &j->d;
    const int64_t Dh = d->Dh, g = h / d->G, i0 = qt * BR, nr = d->T - i0 < BR ? d->T - i0 : BR, off = d->Tk - d->T;
    float *Kt = w, *Vt = Kt + BC * Dh, *P = Vt + 3 * BC * Dh, *G = P + BR * BC, *acc = G + BR * BC;
    const int32_t *seg = fa_seg(j, s);
    const float *qr[BR], *dor[BR];
    for (int64_t r = 0; r < nr; r++)
        qr[r] = fa_qrow(j, s, h, i0 + r), dor[r] = j->dO + Dh * (h + d->H * (i0 + r + d->T * s));
    memset(acc, 0, sizeof(float) * (size_t)(nr * Dh));
    for (int64_t j0 = 0, nc; j0 < d->Tk; j0 += BC) {
        if (!fa_key_tile(j, seg, s, g, i0 + off, nr, j0, &nc, Kt, Vt)) continue;
        fa_back_tile(j, qr, dor, s, h, i0, nr, Kt, Vt, j0, nc, seg, P, G);
        fa_accum(acc, nr, G, BC, 1, NULL, Kt, Dh, nc, Dh);  // dQ_r += sum_c g_rc k_c
    }
    for (int64_t r = 0; r < nr; r++)
        memcpy(j->dq + Dh * (i0 + r + d->T * (h + d->H * s)), acc + r * Dh, sizeof(float) * (size_t)Dh);
}

void FA_FN(rg_flash_dq_items)(void *arg, int ith, int nth) {
    const flash_job *j = arg;
    const flash_dims *d = &j->d;
    float *w = j->work + (size_t)ith * j->work_floats;
    for (int64_t it = ith; it < d->S * d->H * d->n_qt; it += nth)  // it = qt + n_qt (h + H s)
        fa_dq_item(j, w, it / (d->n_qt * d->H), it / d->n_qt % d->H, it % d->n_qt);
}

#undef BR
#undef BC
