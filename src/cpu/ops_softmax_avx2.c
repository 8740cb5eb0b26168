// ops_softmax_avx2.c - AVX2 row kernels of SOFT_MAX (ops_softmax_loss.c): the
// scaled and masked scores with their maximum, the exponentials with their
// sum, and the normalization. Each performs exactly the IEEE operations of the
// scalar loops in ops_softmax_loss.c in the same order (the exp is
// exp_poly.h's; the sum goes into 8 double partial sums, element k into sum
// k % 8, which is what the scalar loop does too), so the two paths give the
// same bits. Built without AVX2 these do nothing and rg_sm_avx2_built = 0.
#include <stdint.h>

extern const int rg_sm_avx2_built;
float rg_sm_scores_avx2(const float *a, const float *mask, float scale, float *z, int64_t n);
void rg_sm_exp_avx2(float *y, int64_t n, float mx, double sums[8]);
void rg_sm_normalize_avx2(float *y, int64_t n, double inv);

#if defined(__AVX2__)

#include <immintrin.h>
#include <math.h>

#include "cpu/exp_poly.h"

const int rg_sm_avx2_built = 1;

// z[k] = scale * a[k] (+ mask[k]) for k < n; returns the largest z (NaNs ignored, -inf when none).
float rg_sm_scores_avx2(const float *a, const float *mask, float scale, float *z, int64_t n) {
    const __m256 s = _mm256_set1_ps(scale);
    __m256 mx = _mm256_set1_ps(-INFINITY);
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        __m256 v = _mm256_mul_ps(s, _mm256_loadu_ps(a + k));
        if (mask) v = _mm256_add_ps(v, _mm256_loadu_ps(mask + k));
        _mm256_storeu_ps(z + k, v);
        mx = _mm256_max_ps(v, mx);  // the second operand when either is NaN: NaN never wins
    }
    float m[8];
    _mm256_storeu_ps(m, mx);
    float best = -INFINITY;
    for (int i = 0; i < 8; i++)
        if (m[i] > best) best = m[i];
    for (; k < n; k++) {
        float v = scale * a[k];
        if (mask) v += mask[k];
        z[k] = v;
        if (v > best) best = v;
    }
    return best;
}

// y[k] = exp(y[k] - mx) for k < n, each added to sums[k % 8] in increasing k.
void rg_sm_exp_avx2(float *y, int64_t n, float mx, double sums[8]) {
    const __m256 m = _mm256_set1_ps(mx);
    __m256d lo = _mm256_loadu_pd(sums), hi = _mm256_loadu_pd(sums + 4);
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        __m256 e = rg_exp_neg_abs8(_mm256_sub_ps(_mm256_loadu_ps(y + k), m));
        _mm256_storeu_ps(y + k, e);
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    _mm256_storeu_pd(sums, lo);
    _mm256_storeu_pd(sums + 4, hi);
    for (; k < n; k++) {
        float e = rg_exp_neg_abs(y[k] - mx);
        y[k] = e;
        sums[k % 8] += (double)e;
    }
}

// y[k] = (float)((double)y[k] * inv) for k < n.
void rg_sm_normalize_avx2(float *y, int64_t n, double inv) {
    const __m256d v = _mm256_set1_pd(inv);
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        __m256 e = _mm256_loadu_ps(y + k);
        __m128 l = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(e)), v));
        __m128 h = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)), v));
        _mm256_storeu_ps(y + k, _mm256_insertf128_ps(_mm256_castps128_ps256(l), h, 1));
    }
    for (; k < n; k++) y[k] = (float)((double)y[k] * inv);
}

#else

const int rg_sm_avx2_built = 0;

float rg_sm_scores_avx2(const float *a, const float *mask, float scale, float *z, int64_t n) {
    (void)a, (void)mask, (void)scale, (void)z, (void)n;
    return 0.0f;
}
void rg_sm_exp_avx2(float *y, int64_t n, float mx, double sums[8]) { (void)y, (void)n, (void)mx, (void)sums; }
void rg_sm_normalize_avx2(float *y, int64_t n, double inv) { (void)y, (void)n, (void)inv; }

#endif
