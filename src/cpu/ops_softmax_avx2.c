// ops_softmax_avx2.c - the AVX2 scores kernel of SOFT_MAX (ops_softmax_loss.c):
// the scaled and masked scores with their maximum, exactly the IEEE operations
// of the scalar loop there in the same order, so both paths give the same
// bits. The exponentials, their sum and the normalization are the
// cross-entropy's row kernels (ops_ce_avx2.c, rows_avx2.h). Built without AVX2
// it does nothing and rg_sm_avx2_built = 0.
#include "cpu/rows_avx2.h"

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



#else

const int rg_sm_avx2_built = 0;

float rg_sm_scores_avx2(const float *a, const float *mask, float scale, float *z, int64_t n) {
    (void)a, (void)mask, (void)scale, (void)z, (void)n;
    return 0.0f;
}

#endif
