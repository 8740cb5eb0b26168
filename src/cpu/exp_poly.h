// exp_poly.h - e = exp(-|a|) in f32 with a Cephes-style polynomial, as a
// scalar function and (in files built with AVX2) an 8-lane one that performs
// exactly the same IEEE operations in the same order with no fused
// multiply-adds (the build uses -ffp-contract=off), so the two give the same
// bits for every input and which elements take which path never shows.
// Used by the SiLU family (ops_elementwise*.c) and SOFT_MAX (ops_softmax*.c,
// whose arguments z - max are <= 0, so exp(-|z - max|) is their exp).
//
// Accuracy: within 2 ulp of exp over [-87.3, 0]; 0 below -87.3 (exp(-87.3) ~
// 1.2e-38, the smallest normal range), NaN for NaN.
#ifndef RG_CPU_EXP_POLY_H
#define RG_CPU_EXP_POLY_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define RG_EXP_LOG2E 1.44269504088896341f
#define RG_EXP_LN2_HI 0.693359375f       // 9 significant bits: n * LN2_HI is exact for |n| <= 127
#define RG_EXP_LN2_LO -2.12194440e-4f
#define RG_EXP_ROUND 12582912.0f         // 1.5 * 2^23: (v + R) - R rounds v to the nearest integer, ties even
#define RG_EXP_CUTOFF 87.3f              // exp(-87.3) ~ 1.2e-38, still normal; beyond, e = 0
#define RG_EXP_P0 1.9875691500e-4f
#define RG_EXP_P1 1.3981999507e-3f
#define RG_EXP_P2 8.3334519073e-3f
#define RG_EXP_P3 4.1665795894e-2f
#define RG_EXP_P4 1.6666665459e-1f
#define RG_EXP_P5 5.0000001201e-1f

// e = exp(-|a|), 0 beyond the cutoff, NaN for NaN. Every step is one rounded
// IEEE operation, in the order the AVX2 version performs them.
static inline float rg_exp_neg_abs(float a) {
    float ax = fabsf(a);
    if (!(ax <= RG_EXP_CUTOFF)) return ax > RG_EXP_CUTOFF ? 0.0f : ax;  // too small to matter, or NaN
    float x = -ax;
    float fn = (x * RG_EXP_LOG2E + RG_EXP_ROUND) - RG_EXP_ROUND;  // n = round(x / ln2), in -126..0
    float r = (x - fn * RG_EXP_LN2_HI) - fn * RG_EXP_LN2_LO;      // x - n ln2, |r| <= ln2/2
    float p = RG_EXP_P0;
    p = p * r + RG_EXP_P1;
    p = p * r + RG_EXP_P2;
    p = p * r + RG_EXP_P3;
    p = p * r + RG_EXP_P4;
    p = p * r + RG_EXP_P5;
    p = p * (r * r) + r;
    p = p + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)fn + 127) << 23;  // 2^n, a normal number
    float scale;
    memcpy(&scale, &bits, 4);
    return p * scale;
}

#if defined(__AVX2__)
#include <immintrin.h>

// rg_exp_neg_abs on 8 lanes, step by step.
static inline __m256 rg_exp_neg_abs8(__m256 a) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 ax = _mm256_andnot_ps(sign, a);                                      // |a|
    __m256 big = _mm256_cmp_ps(ax, _mm256_set1_ps(RG_EXP_CUTOFF), _CMP_GT_OQ);  // e underflows: force 0
    __m256 x = _mm256_xor_ps(ax, sign);                                         // -|a|
    __m256 fn = _mm256_mul_ps(x, _mm256_set1_ps(RG_EXP_LOG2E));
    fn = _mm256_sub_ps(_mm256_add_ps(fn, _mm256_set1_ps(RG_EXP_ROUND)), _mm256_set1_ps(RG_EXP_ROUND));
    __m256 r = _mm256_sub_ps(x, _mm256_mul_ps(fn, _mm256_set1_ps(RG_EXP_LN2_HI)));
    r = _mm256_sub_ps(r, _mm256_mul_ps(fn, _mm256_set1_ps(RG_EXP_LN2_LO)));
    __m256 p = _mm256_set1_ps(RG_EXP_P0);
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(RG_EXP_P1));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(RG_EXP_P2));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(RG_EXP_P3));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(RG_EXP_P4));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(RG_EXP_P5));
    p = _mm256_add_ps(_mm256_mul_ps(p, _mm256_mul_ps(r, r)), r);
    p = _mm256_add_ps(p, one);
    // 2^n from the exponent bits; fn is an integer in -126..0 on the lanes
    // that are kept (NaN and cut-off lanes are fixed below or stay NaN).
    __m256i n = _mm256_cvttps_epi32(fn);
    __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
    return _mm256_andnot_ps(big, _mm256_mul_ps(p, scale));
}
#endif

#endif
