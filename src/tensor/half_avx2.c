// half_avx2.c - AVX2/F16C row kernels for the F16 and BF16 conversions.
//
// The build compiles every *_avx2.c with -mavx2 -mf16c -mfma; half.c calls
// these only after checking the CPU (rg_half_have_simd). Each kernel gives the
// same bits as the scalar loop in half.c on every input: 8 lanes at a time,
// then the scalar loop for the last n % 8 elements.
//
// Built without those flags, this file defines the same symbols as stubs that
// run the scalar loops, and rg_half_avx2_built = 0 keeps the dispatch scalar.
#include "half.h"

#if defined(__AVX2__) && defined(__F16C__)

#include <immintrin.h>

const int rg_half_avx2_built = 1;

void rg_fp16_to_fp32_row_avx2(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    // VCVTPH2PS is exact, handles subnormal halves whatever MXCSR says, and
    // quiets NaNs keeping the payload: the same bits as the scalar decoder.
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(x + i));  // [8] f16
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
    }
    if (i < n) rg_fp16_to_fp32_row_scalar(x + i, y + i, n - i);
}

void rg_fp32_to_fp16_row_avx2(const float *x, uint16_t *y, int64_t n) {
    const __m128i mag_mask = _mm_set1_epi16(0x7FFF);
    const __m128i inf_bits = _mm_set1_epi16(0x7C00);
    const __m128i payload = _mm_set1_epi16(0x01FF);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);  // [8] f32
        // Round to nearest even from the immediate, not from MXCSR.RC.
        __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
        // F16C turns a NaN into sign|0x7E00|(top 9 payload bits); the reference
        // drops the payload. Its NaN lanes are exactly those with magnitude
        // above 0x7C00 (the quiet bit is always set), so clear bits 8..0 there.
        __m128i is_nan = _mm_cmpgt_epi16(_mm_and_si128(h, mag_mask), inf_bits);
        h = _mm_andnot_si128(_mm_and_si128(is_nan, payload), h);
        _mm_storeu_si128((__m128i *)(y + i), h);
    }
    if (i < n) rg_fp32_to_fp16_row_scalar(x + i, y + i, n - i);
}

void rg_bf16_to_fp32_row_avx2(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(x + i));  // [8] bf16
        __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
        _mm256_storeu_ps(y + i, _mm256_castsi256_ps(u));
    }
    if (i < n) rg_bf16_to_fp32_row_scalar(x + i, y + i, n - i);
}

void rg_fp32_to_bf16_row_avx2(const float *x, uint16_t *y, int64_t n) {
    const __m256i mag_mask = _mm256_set1_epi32(0x7FFFFFFF);
    const __m256i inf_bits = _mm256_set1_epi32(0x7F800000);
    const __m256i round = _mm256_set1_epi32(0x7FFF);
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i quiet = _mm256_set1_epi32(0x0040);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + i));  // [8] f32 bits
        __m256i top = _mm256_srli_epi32(u, 16);
        // Same integer recipe as the scalar code; the signed compare is safe
        // because both sides are below 2^31.
        __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, mag_mask), inf_bits);
        __m256i rne = _mm256_add_epi32(_mm256_add_epi32(u, round), _mm256_and_si256(top, one));
        rne = _mm256_srli_epi32(rne, 16);
        __m256i r = _mm256_blendv_epi8(rne, _mm256_or_si256(top, quiet), is_nan);
        // Every lane is <= 0xFFFF, so unsigned-saturating packing is a plain narrowing.
        __m128i lo = _mm256_castsi256_si128(r);
        __m128i hi = _mm256_extracti128_si256(r, 1);
        _mm_storeu_si128((__m128i *)(y + i), _mm_packus_epi32(lo, hi));
    }
    if (i < n) rg_fp32_to_bf16_row_scalar(x + i, y + i, n - i);
}

#else  // built without -mavx2 -mf16c: stubs, never chosen by the dispatch

const int rg_half_avx2_built = 0;

void rg_fp16_to_fp32_row_avx2(const uint16_t *x, float *y, int64_t n) {
    rg_fp16_to_fp32_row_scalar(x, y, n);
}

void rg_fp32_to_fp16_row_avx2(const float *x, uint16_t *y, int64_t n) {
    rg_fp32_to_fp16_row_scalar(x, y, n);
}

void rg_bf16_to_fp32_row_avx2(const uint16_t *x, float *y, int64_t n) {
    rg_bf16_to_fp32_row_scalar(x, y, n);
}

void rg_fp32_to_bf16_row_avx2(const float *x, uint16_t *y, int64_t n) {
    rg_fp32_to_bf16_row_scalar(x, y, n);
}

#endif
