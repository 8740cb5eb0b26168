// ops_elementwise_avx2.c - AVX2 row kernels for SILU, SILU_BACK and SWIGLU.
//
// The scalar code in ops_elementwise.c spends nearly all its time in the exp
// of the sigmoid; here 8 lanes run the same exp at once. Each lane performs
// exactly the IEEE operations of the scalar functions (exp_neg_abs, sigmoid1,
// silu1, silu_back1, swiglu1), in the same order and with no FMA, so the two
// paths give the same bits for every finite input, and which elements take
// which path (alignment, row tails, strides) never shows in the result.
//
// Each kernel does the largest multiple of 8 elements of n and returns that
// count; the caller runs the scalar code on the rest. Built without AVX2, the
// kernels do nothing and rg_ew_avx2_built = 0 keeps the dispatch scalar.
#include <stdint.h>

extern const int rg_ew_avx2_built;
int64_t rg_ew_silu_row_avx2(const float *x, float *y, int64_t n);
int64_t rg_ew_silu_back_row_avx2(const float *dy, const float *x, float *y, int64_t n);
int64_t rg_ew_swiglu_row_avx2(const float *g, const float *u, float *y, int64_t n);

#if defined(__AVX2__)

#include <immintrin.h>

#include "cpu/exp_poly.h"

const int rg_ew_avx2_built = 1;

// e = exp(-|a|) on 8 lanes: exp_poly.h, the scalar exp_neg_abs step by step.
static inline __m256 exp_neg_abs8(__m256 a) { return rg_exp_neg_abs8(a); }

// sigmoid(a) = (a < 0 ? e : 1) / (1 + e): the scalar sigmoid1.
static inline __m256 sigmoid8(__m256 a) {
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 e = exp_neg_abs8(a);
    __m256 neg = _mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_LT_OQ);
    return _mm256_div_ps(_mm256_blendv_ps(one, e, neg), _mm256_add_ps(one, e));
}

int64_t rg_ew_silu_row_avx2(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_loadu_ps(x + i);
        _mm256_storeu_ps(y + i, _mm256_mul_ps(a, sigmoid8(a)));
    }
    return i;
}

int64_t rg_ew_silu_back_row_avx2(const float *dy, const float *x, float *y, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_loadu_ps(x + i), g = _mm256_loadu_ps(dy + i);
        // The scalar silu_back1: s and c = 1 - s both from e, then dy * (s * (1 + a * c)).
        __m256 e = exp_neg_abs8(a), d = _mm256_add_ps(one, e);
        __m256 neg = _mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_LT_OQ);
        __m256 s = _mm256_div_ps(_mm256_blendv_ps(one, e, neg), d);
        __m256 c = _mm256_div_ps(_mm256_blendv_ps(e, one, neg), d);
        __m256 t = _mm256_add_ps(one, _mm256_mul_ps(a, c));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(g, _mm256_mul_ps(s, t)));
    }
    return i;
}

int64_t rg_ew_swiglu_row_avx2(const float *g, const float *u, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_loadu_ps(g + i), b = _mm256_loadu_ps(u + i);
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(a, sigmoid8(a)), b));
    }
    return i;
}

#else

const int rg_ew_avx2_built = 0;

int64_t rg_ew_silu_row_avx2(const float *x, float *y, int64_t n) {
    (void)x, (void)y, (void)n;
    return 0;
}
int64_t rg_ew_silu_back_row_avx2(const float *dy, const float *x, float *y, int64_t n) {
    (void)dy, (void)x, (void)y, (void)n;
    return 0;
}
int64_t rg_ew_swiglu_row_avx2(const float *g, const float *u, float *y, int64_t n) {
    (void)g, (void)u, (void)y, (void)n;
    return 0;
}

#endif
