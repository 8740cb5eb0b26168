// ops_ce_avx2.c - AVX2 row kernels of CROSS_ENTROPY_LOSS and its backward
// (ops_softmax_loss.c): the row maximum, the exponentials with their sum, and
// the scaling of the exponentials into the gradient. Each performs exactly the
// IEEE operations of the scalar loops in ops_softmax_loss.c in the same order
// (exp_poly.h's exp; the sum in 8 double partial sums, element v into sum
// v % 8), so the two paths give the same bits. Built without AVX2 these do
// nothing and rg_ce_avx2_built = 0.
#include "cpu/rows_avx2.h"

#if defined(__AVX2__)

#include <immintrin.h>
#include <math.h>

#include "cpu/exp_poly.h"

const int rg_ce_avx2_built = 1;

// The largest z[v], v < n (NaNs ignored; -inf when none).
float rg_ce_max_avx2(const float *z, int64_t n) {
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
    int64_t v = 0;
    for (; v + 16 <= n; v += 16) {
        m0 = _mm256_max_ps(_mm256_loadu_ps(z + v), m0);  // the second operand when either is NaN
        m1 = _mm256_max_ps(_mm256_loadu_ps(z + v + 8), m1);
    }
    for (; v + 8 <= n; v += 8) m0 = _mm256_max_ps(_mm256_loadu_ps(z + v), m0);
    m0 = _mm256_max_ps(m1, m0);
    float m[8];
    _mm256_storeu_ps(m, m0);
    float best = -INFINITY;
    for (int i = 0; i < 8; i++)
        if (m[i] > best) best = m[i];
    for (; v < n; v++)
        if (z[v] > best) best = z[v];
    return best;
}

// x = exp(z[v] - mx) for v < n, added to sums[v % 8] in increasing v and, when
// e is not NULL, stored to e[v] (e may be z).
void rg_ce_exp_sum_avx2(const float *z, float *e, int64_t n, float mx, double sums[8]) {
    const __m256 m = _mm256_set1_ps(mx);
    __m256d lo = _mm256_loadu_pd(sums), hi = _mm256_loadu_pd(sums + 4);
    int64_t v = 0;
    for (; v + 8 <= n; v += 8) {
        __m256 x = rg_exp_neg_abs8(_mm256_sub_ps(_mm256_loadu_ps(z + v), m));
        if (e) _mm256_storeu_ps(e + v, x);
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(x)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
    }
    _mm256_storeu_pd(sums, lo);
    _mm256_storeu_pd(sums + 4, hi);
    for (; v < n; v++) {
        float x = rg_exp_neg_abs(z[v] - mx);
        if (e) e[v] = x;
        sums[v % 8] += (double)x;
    }
}

// y[v] = (float)((double)y[v] * c) for v < n.
void rg_ce_scale_avx2(float *y, int64_t n, double c) {
    const __m256d s = _mm256_set1_pd(c);
    int64_t v = 0;
    for (; v + 8 <= n; v += 8) {
        __m256 x = _mm256_loadu_ps(y + v);
        __m128 l = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), s));
        __m128 h = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), s));
        _mm256_storeu_ps(y + v, _mm256_insertf128_ps(_mm256_castps128_ps256(l), h, 1));
    }
    for (; v < n; v++) y[v] = (float)((double)y[v] * c);
}

#else

const int rg_ce_avx2_built = 0;

float rg_ce_max_avx2(const float *z, int64_t n) {
    (void)z, (void)n;
    return 0.0f;
}
void rg_ce_exp_sum_avx2(const float *z, float *e, int64_t n, float mx, double sums[8]) {
    (void)z, (void)e, (void)n, (void)mx, (void)sums;
}
void rg_ce_scale_avx2(float *y, int64_t n, double c) { (void)y, (void)n, (void)c; }

#endif
