// ops_ssm_scan_items.h - the per-item loops of SSM_SCAN and SSM_SCAN_BACK (the rules are
// in ops_ssm_scan.c's header), included by ops_ssm_scan.c and ops_ssm_scan_avx2.c with
// SCAN_FN(name) naming their entry points.
#include <string.h>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "base/threadpool.h"
#include "cpu/ops_ssm.h"
#include "cpu/ops_ssm_scan_jobs.h"
#include "cpu/ssm_math.h"

// Token t of sequence s in xBC [D, T, S]: x of head h [P], B and C of its group [N].
typedef struct scan_token {
    const float *x, *B, *C;
} scan_token;

static inline scan_token token_of(const scan_dims *d, const float *xbc, int64_t s, int64_t t, int64_t h) {
    const float *row = xbc + d->D * (t + d->T * s);
    const int64_t g = h / (d->H / d->G);
    scan_token k = {row + d->P * h, row + d->P * d->H + d->N * g, row + d->P * d->H + d->N * (d->G + g)};
    return k;
}

#ifdef __AVX512F__
// Lanes 8..15 of v (AVX-512 F alone: no DQ's extractf32x8).
static inline __m256 hi8(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }
#endif

// One token's step of one head: out = decay * in + B (x * step) ([N][P]; out may be in);
// y (when not NULL) = sum_n out[n][:] C[n]. xs [P] is scratch.
static inline void scan_step(const scan_dims *d, const scan_token *k, float step, float decay, const float *in, float *out,
                      float *xs, float *y) {
    const int64_t P = d->P;
    int64_t p0 = 0;  // lanes done 16 (AVX-512) or 8 (AVX2) at a time: n in order per block, y in a register
#ifdef __AVX512F__
    for (; p0 + 16 <= P; p0 += 16) {
        const __m512 xv = _mm512_mul_ps(_mm512_loadu_ps(k->x + p0), _mm512_set1_ps(step)), dv = _mm512_set1_ps(decay);
        __m512 yv = _mm512_setzero_ps();
        for (int64_t n = 0; n < d->N; n++) {
            const __m512 so = _mm512_add_ps(_mm512_mul_ps(dv, _mm512_loadu_ps(in + n * P + p0)),
                                            _mm512_mul_ps(_mm512_set1_ps(k->B[n]), xv));
            _mm512_storeu_ps(out + n * P + p0, so);
            if (y) yv = _mm512_add_ps(yv, _mm512_mul_ps(so, _mm512_set1_ps(k->C[n])));
        }
        if (y) _mm512_storeu_ps(y + p0, yv);
    }
#endif
#ifdef __AVX2__
    for (; p0 + 8 <= P; p0 += 8) {
        const __m256 xv = _mm256_mul_ps(_mm256_loadu_ps(k->x + p0), _mm256_set1_ps(step)), dv = _mm256_set1_ps(decay);
        __m256 yv = _mm256_setzero_ps();
        for (int64_t n = 0; n < d->N; n++) {
            const __m256 so = _mm256_add_ps(_mm256_mul_ps(dv, _mm256_loadu_ps(in + n * P + p0)),
                                            _mm256_mul_ps(_mm256_set1_ps(k->B[n]), xv));
            _mm256_storeu_ps(out + n * P + p0, so);
            if (y) yv = _mm256_add_ps(yv, _mm256_mul_ps(so, _mm256_set1_ps(k->C[n])));
        }
        if (y) _mm256_storeu_ps(y + p0, yv);
    }
    if (p0 == P) return;
#endif
    for (int64_t p = p0; p < P; p++) xs[p] = k->x[p] * step;
    if (y)
        for (int64_t p = p0; p < P; p++) y[p] = 0.0f;
    for (int64_t n = 0; n < d->N; n++) {
        const float b = k->B[n], c = k->C[n];
        const float *si = in + n * P;
        float *so = out + n * P;
        for (int64_t p = p0; p < P; p++) so[p] = decay * si[p] + b * xs[p];
        if (y)
            for (int64_t p = p0; p < P; p++) y[p] = y[p] + so[p] * c;
    }
}

// state [N, P, H, S] (n contiguous) of item (s, h) <-> [n][p].
static inline void state_load(const scan_dims *d, const float *state, int64_t s, int64_t h, float *S_np) {
    const int64_t N = d->N, P = d->P;
    if (!state) {
        memset(S_np, 0, sizeof(float) * (size_t)(N * P));
        return;
    }
    const float *src = state + N * P * (h + d->H * s);
    for (int64_t p = 0; p < P; p++)
        for (int64_t n = 0; n < N; n++) S_np[n * P + p] = src[n + N * p];
}

static inline void state_store(const scan_dims *d, const float *S_np, float scale, int64_t s, int64_t h, float *state) {
    const int64_t N = d->N, P = d->P;
    float *dst = state + N * P * (h + d->H * s);
    for (int64_t p = 0; p < P; p++)
        for (int64_t n = 0; n < N; n++) dst[n + N * p] = scale * S_np[n * P + p];
}

void SCAN_FN(rg_ssm_scan_items)(void *arg, int ith, int nth) {
    const scan_job *j = arg;
    const scan_dims *d = &j->d;
    float *S_np = j->work + (size_t)ith * j->work_floats, *xs = S_np + d->N * d->P;
    int64_t i0, i1;
    rg_split_range(d->S * d->H, ith, nth, &i0, &i1);
    for (int64_t i = i0; i < i1; i++) {
        const int64_t s = i / d->H, h = i % d->H;
        const int32_t *seg = cpu_ssm_seg(j->seg, d->T, s);
        state_load(d, j->state, s, h, S_np);
        for (int64_t t = 0; t < d->T; t++) {
            const scan_token k = token_of(d, j->xbc, s, t, h);
            float step, decay, slope;
            rg_ssm_dt_values(j->dt[h + d->H * (t + d->T * s)], j->A[h], rg_ssm_starts_doc(seg, t), &step, &decay, &slope);
            scan_step(d, &k, step, decay, S_np, S_np, xs, j->y + d->P * (h + d->H * (t + d->T * s)));
            // The snapshot of S_t, stored as the final state is (state [N, P, H] of the token's column t + T s).
            if (j->states) state_store(d, S_np, 1.0f, 0, h, j->states + d->N * d->P * d->H * (t + d->T * s));
        }
        state_store(d, S_np, 1.0f, s, h, j->fin);
    }
}

// Token t of item (s, h) walked back: G becomes G_t, and every term of t is written.
static inline void back_token(const scan_back_job *j, int64_t s, int64_t h, int64_t t, float decay_next, const float *S_prev,
                       const float *S_cur, float *G, float *gB, float *q, double *dA_acc) {
    const scan_dims *d = &j->d;
    const int64_t N = d->N, P = d->P, it = h + d->H * (t + d->T * s), HTS = d->H * d->T * d->S;
    const scan_token k = token_of(d, j->xbc, s, t, h);
    const float step = j->dta[it], decay = j->dta[it + HTS], slope = j->dta[it + 2 * HTS];
    const float *dy = j->dy + P * it;  // [P]
    int64_t p_done = 0;  // lanes p already done 8 at a time (AVX2), the rest below
    float *dB = j->dB_h + N * (h + d->H * (t + d->T * s)), *dC = j->dC_h + N * (h + d->H * (t + d->T * s));  // [N]
    bool sums_done = false;  // dB and dC already made (the fused AVX-512 loop)
#ifdef __AVX512F__
    if (P % 16 == 0 && P <= 64) {
        // All of a head's lanes in registers (P / 16 vectors each of dy, x, gB, q), n outer: one
        // pass over G, S_prev and S_cur makes G, gB, q, dB and dC. Every lane's sums over n run in
        // n order as below; dB's and dC's sums over p run in rg_ssm_lanes_sum's eight lanes
        // (p mod 8), each vector's low half added before its high half: the same bits.
        enum { VMAX = 4 };
        const int nv = (int)(P / 16);
        __m512 dyv[VMAX], xv[VMAX], gb[VMAX], qq[VMAX];
        for (int v = 0; v < nv; v++) {
            dyv[v] = _mm512_loadu_ps(dy + 16 * v), xv[v] = _mm512_loadu_ps(k.x + 16 * v);
            gb[v] = qq[v] = _mm512_setzero_ps();
        }
        const __m512 dn = _mm512_set1_ps(decay_next);
        for (int64_t n = 0; n < N; n++) {
            const __m512 cn = _mm512_set1_ps(k.C[n]), bn = _mm512_set1_ps(k.B[n]);
            float *Gn = G + n * P;
            const float *Sp = S_prev + n * P, *Sc = S_cur + n * P;
            __m256 ca = _mm256_setzero_ps(), ba = _mm256_setzero_ps();
            for (int v = 0; v < nv; v++) {
                const __m512 gv = _mm512_add_ps(_mm512_mul_ps(cn, dyv[v]), _mm512_mul_ps(dn, _mm512_loadu_ps(Gn + 16 * v)));
                _mm512_storeu_ps(Gn + 16 * v, gv);
                gb[v] = _mm512_add_ps(gb[v], _mm512_mul_ps(gv, bn));
                qq[v] = _mm512_add_ps(qq[v], _mm512_mul_ps(gv, _mm512_loadu_ps(Sp + 16 * v)));
                const __m512 cp = _mm512_mul_ps(_mm512_loadu_ps(Sc + 16 * v), dyv[v]), bp = _mm512_mul_ps(gv, xv[v]);
                ca = _mm256_add_ps(_mm256_add_ps(ca, _mm512_castps512_ps256(cp)), hi8(cp));
                ba = _mm256_add_ps(_mm256_add_ps(ba, _mm512_castps512_ps256(bp)), hi8(bp));
            }
            float c_acc[RG_SSM_LANES], b_acc[RG_SSM_LANES];
            _mm256_storeu_ps(c_acc, ca);
            _mm256_storeu_ps(b_acc, ba);
            dC[n] = rg_ssm_lanes_sum(c_acc);
            dB[n] = step * rg_ssm_lanes_sum(b_acc);
        }
        for (int v = 0; v < nv; v++) _mm512_storeu_ps(gB + 16 * v, gb[v]), _mm512_storeu_ps(q + 16 * v, qq[v]);
        p_done = P, sums_done = true;
    }
#endif
#ifdef __AVX2__
    // Blocks of 8 lanes p, n in order inside a block: gB and q stay in registers; every lane
    // makes the scalar loop's operations in its order (separate multiplies and adds).
    for (; p_done + 8 <= P; p_done += 8) {
        const __m256 dyv = _mm256_loadu_ps(dy + p_done), dn = _mm256_set1_ps(decay_next);
        __m256 gb = _mm256_setzero_ps(), qq = _mm256_setzero_ps();
        for (int64_t n = 0; n < N; n++) {
            float *Gn = G + n * P + p_done;
            const __m256 gv = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(k.C[n]), dyv), _mm256_mul_ps(dn, _mm256_loadu_ps(Gn)));
            _mm256_storeu_ps(Gn, gv);
            gb = _mm256_add_ps(gb, _mm256_mul_ps(gv, _mm256_set1_ps(k.B[n])));
            qq = _mm256_add_ps(qq, _mm256_mul_ps(gv, _mm256_loadu_ps(S_prev + n * P + p_done)));
        }
        _mm256_storeu_ps(gB + p_done, gb);
        _mm256_storeu_ps(q + p_done, qq);
    }
#endif
    for (int64_t p = p_done; p < P; p++) gB[p] = 0.0f, q[p] = 0.0f;
    for (int64_t n = 0; n < N && p_done < P; n++) {
        const float c = k.C[n], b = k.B[n];
        float *Gn = G + n * P;
        const float *Sp = S_prev + n * P;
        for (int64_t p = p_done; p < P; p++) {
            const float gv = c * dy[p] + decay_next * Gn[p];
            Gn[p] = gv;
            gB[p] = gB[p] + gv * b;
            q[p] = q[p] + gv * Sp[p];
        }
    }
    float *dx = j->dxbc + d->D * (t + d->T * s) + P * h;  // [P]
    double s1 = 0.0, s2 = 0.0;
    for (int64_t p = 0; p < P; p++) {
        dx[p] = step * gB[p];
        s1 += (double)k.x[p] * (double)gB[p];
        s2 += (double)q[p];
    }
    for (int64_t n = 0; n < N && !sums_done; n++) {  // the sums over p in rg_ssm_lanes_sum's order
        const float *Gn = G + n * P, *Sc = S_cur + n * P;
        float c_acc[RG_SSM_LANES] = {0}, b_acc[RG_SSM_LANES] = {0};
        int64_t p = 0;
#ifdef __AVX2__
        {  // lane l of the vectors is lane l of rg_ssm_lanes_sum (p = l mod 8)
            __m256 cv = _mm256_setzero_ps(), bv = _mm256_setzero_ps();
            for (; p + 8 <= P; p += 8) {
                cv = _mm256_add_ps(cv, _mm256_mul_ps(_mm256_loadu_ps(Sc + p), _mm256_loadu_ps(dy + p)));
                bv = _mm256_add_ps(bv, _mm256_mul_ps(_mm256_loadu_ps(Gn + p), _mm256_loadu_ps(k.x + p)));
            }
            _mm256_storeu_ps(c_acc, cv);
            _mm256_storeu_ps(b_acc, bv);
        }
#endif
        for (; p + RG_SSM_LANES <= P; p += RG_SSM_LANES)
            for (int l = 0; l < RG_SSM_LANES; l++) {
                c_acc[l] = c_acc[l] + Sc[p + l] * dy[p + l];
                b_acc[l] = b_acc[l] + Gn[p + l] * k.x[p + l];
            }
        for (int l = 0; p < P; p++, l++) {
            c_acc[l] = c_acc[l] + Sc[p] * dy[p];
            b_acc[l] = b_acc[l] + Gn[p] * k.x[p];
        }
        dC[n] = rg_ssm_lanes_sum(c_acc);
        dB[n] = step * rg_ssm_lanes_sum(b_acc);
    }
    const double ad = (double)j->A[h] * (double)decay;
    j->ddt[it] = (float)((s1 + ad * s2) * (double)slope);
    *dA_acc += (double)step * (double)decay * s2;
}

void SCAN_FN(rg_ssm_scan_back_items)(void *arg, int ith, int nth) {
    const scan_back_job *j = arg;
    const scan_dims *d = &j->d;
    const int64_t N = d->N, P = d->P, NP = N * P, HTS = d->H * d->T * d->S;
    float *G = j->work + (size_t)ith * j->work_floats;  // [N][P]
    float *ckpt = G + NP;                               // [n_chunks][N][P]: the state before each chunk
    float *buf = ckpt + j->n_chunks * NP;               // [L + 1][N][P]: a chunk's states, the one before it first
    float *xs = buf + (j->L + 1) * NP, *gB = xs + P, *q = gB + P;
    int64_t i0, i1;
    rg_split_range(d->S * d->H, ith, nth, &i0, &i1);
    for (int64_t i = i0; i < i1; i++) {
        const int64_t s = i / d->H, h = i % d->H;
        // The checkpoints: the forward's states, kept before every chunk.
        state_load(d, j->state, s, h, buf);
        for (int64_t c = 0; c < j->n_chunks; c++) {
            memcpy(ckpt + c * NP, buf, sizeof(float) * (size_t)NP);
            for (int64_t t = c * j->L; t < d->T && t < (c + 1) * j->L; t++) {
                const int64_t it = h + d->H * (t + d->T * s);
                const scan_token k = token_of(d, j->xbc, s, t, h);
                scan_step(d, &k, j->dta[it], j->dta[it + HTS], buf, buf, xs, NULL);
            }
        }
        // Back over the chunks, last first: the chunk's states again, then its tokens in reverse.
        state_load(d, j->dfin, s, h, G);
        float decay_next = 1.0f;  // G_{T-1} = C dy^T + the final state's gradient
        double dA_acc = 0.0;
        for (int64_t c = j->n_chunks - 1; c >= 0; c--) {
            const int64_t t0 = c * j->L, len = (d->T - t0 < j->L ? d->T - t0 : j->L);
            memcpy(buf, ckpt + c * NP, sizeof(float) * (size_t)NP);
            for (int64_t r = 0; r < len; r++) {
                const int64_t it = h + d->H * (t0 + r + d->T * s);
                const scan_token k = token_of(d, j->xbc, s, t0 + r, h);
                scan_step(d, &k, j->dta[it], j->dta[it + HTS], buf + r * NP, buf + (r + 1) * NP, xs, NULL);
            }
            for (int64_t r = len - 1; r >= 0; r--) {
                back_token(j, s, h, t0 + r, decay_next, buf + r * NP, buf + (r + 1) * NP, G, gB, q, &dA_acc);
                decay_next = j->dta[h + d->H * (t0 + r + d->T * s) + HTS];
            }
        }
        state_store(d, G, decay_next, s, h, j->dstate);  // dstate = decay_0 G_0
        j->dA_h[s * d->H + h] = dA_acc;
    }
}

