// quant_iq4_avx2.c - AVX2 kernels for IQ4_NL and IQ4_XS (spec §4.4).
//
// The build compiles every *_avx2.c with -mavx2 -mf16c -mfma; quant_iq4.c
// calls these only after rg_cpu_has_avx2(). Each kernel gives the same bits as
// its scalar reference in quant_iq4.c on every input:
//   - dequantization: the 16-entry table lookup is a byte shuffle; d (or
//     dl = d·(ls−32), computed in scalar f32 exactly as the reference does)
//     times the table value is one rounding of an exact product either way;
//   - dot products: the per-block integer sums are exact (16-bit products
//     widened by vpmaddwd, no saturation even for q8 = −128), then the same
//     scalar f32 operations in the same order as the reference.
//
// Built without those flags, this file defines the same symbols as stubs that
// call the references, and rg_quant_iq4_avx2_built = 0 keeps dispatch scalar.
#include "tensor/quant/quant.h"

#include <string.h>

#include "tensor/half.h"

extern const int rg_quant_iq4_avx2_built;
void rg_dequant_row_iq4_nl_avx2(const void *src, float *dst, int64_t n);
void rg_dequant_row_iq4_xs_avx2(const void *src, float *dst, int64_t n);
void rg_vec_dot_iq4_nl_q8_0_avx2(int64_t n, float *s, const void *x, const void *y);
void rg_vec_dot_iq4_xs_q8_k_avx2(int64_t n, float *s, const void *x, const void *y);

void rg_dequant_row_iq4_nl_ref(const void *src, float *dst, int64_t n);
void rg_dequant_row_iq4_xs_ref(const void *src, float *dst, int64_t n);
void rg_vec_dot_iq4_nl_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void rg_vec_dot_iq4_xs_q8_k_ref(int64_t n, float *s, const void *x, const void *y);

#if defined(__AVX2__)

#include <immintrin.h>

const int rg_quant_iq4_avx2_built = 1;

// 16 packed nibble pairs -> the 32 table values as int8, in element order:
// lanes 0..15 = low nibbles (elements 0..15), lanes 16..31 = high nibbles.
static inline __m256i iq4_lookup32(const uint8_t *qs, __m128i table) {
    const __m128i m4 = _mm_set1_epi8(15);
    const __m128i b = _mm_loadu_si128((const __m128i *)qs);
    const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(b, m4));
    const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(b, 4), m4));
    return _mm256_set_m128i(hi, lo);
}

// 32 int8 values times a scale, stored as 32 floats.
static inline void store_scaled32(float *dst, __m256i v8, float d) {
    const __m256 vd = _mm256_set1_ps(d);
    const __m128i lo = _mm256_castsi256_si128(v8), hi = _mm256_extracti128_si256(v8, 1);
    _mm256_storeu_ps(dst + 0, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
    _mm256_storeu_ps(dst + 8, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
    _mm256_storeu_ps(dst + 16, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
    _mm256_storeu_ps(dst + 24, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
}

// Σ a_i·b_i over 32 int8 pairs as 8 int32 partial sums (exact).
static inline __m256i dot32_i8(__m256i a, const int8_t *b) {
    const __m256i bv = _mm256_loadu_si256((const __m256i *)b);
    const __m256i a_lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(a));
    const __m256i a_hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(a, 1));
    const __m256i b_lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(bv));
    const __m256i b_hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(bv, 1));
    return _mm256_add_epi32(_mm256_madd_epi16(a_lo, b_lo), _mm256_madd_epi16(a_hi, b_hi));
}

static inline int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

static inline __m128i kvalues_table(void) { return _mm_loadu_si128((const __m128i *)rg_kvalues_iq4nl); }

void rg_dequant_row_iq4_nl_avx2(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const __m128i table = kvalues_table();
    for (int64_t i = 0; i < n / 32; i++, b += 18, dst += 32)
        store_scaled32(dst, iq4_lookup32(b + 2, table), rg_fp16_to_fp32(rg_rd16(b)));
}

void rg_dequant_row_iq4_xs_avx2(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const __m128i table = kvalues_table();
    for (int64_t i = 0; i < n / 256; i++, b += 136) {
        const float d = rg_fp16_to_fp32(rg_rd16(b));
        const uint16_t sh = rg_rd16(b + 2);
        for (int ib = 0; ib < 8; ib++, dst += 32) {
            const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) | ((sh >> (2 * ib)) & 3) << 4;
            const float dl = d * (float)(ls - 32);
            store_scaled32(dst, iq4_lookup32(b + 8 + 16 * ib, table), dl);
        }
    }
}

void rg_vec_dot_iq4_nl_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    const __m128i table = kvalues_table();
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++, x += 18, y += 34) {
        const int32_t sumi = hsum_i32(dot32_i8(iq4_lookup32(x + 2, table), (const int8_t *)(y + 2)));
        const float d = rg_fp16_to_fp32(rg_rd16(x)) * rg_fp16_to_fp32(rg_rd16(y));
        sumf += d * (float)sumi;
    }
    *s = sumf;
}

void rg_vec_dot_iq4_xs_q8_k_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    const __m128i table = kvalues_table();
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 256; i++, x += 136, y += 292) {
        float dy;
        memcpy(&dy, y, sizeof dy);
        const uint16_t sh = rg_rd16(x + 2);
        __m256i acc = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((x[4 + ib / 2] >> (4 * (ib % 2))) & 15) | ((sh >> (2 * ib)) & 3) << 4;
            const __m256i p = dot32_i8(iq4_lookup32(x + 8 + 16 * ib, table), (const int8_t *)(y + 4 + 32 * ib));
            acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(p, _mm256_set1_epi32(ls - 32)));
        }
        const float d = rg_fp16_to_fp32(rg_rd16(x)) * dy;
        sumf += d * (float)hsum_i32(acc);
    }
    *s = sumf;
}

#else  // built without AVX2: stubs, never dispatched to

const int rg_quant_iq4_avx2_built = 0;

void rg_dequant_row_iq4_nl_avx2(const void *src, float *dst, int64_t n) { rg_dequant_row_iq4_nl_ref(src, dst, n); }
void rg_dequant_row_iq4_xs_avx2(const void *src, float *dst, int64_t n) { rg_dequant_row_iq4_xs_ref(src, dst, n); }
void rg_vec_dot_iq4_nl_q8_0_avx2(int64_t n, float *s, const void *x, const void *y) {
    rg_vec_dot_iq4_nl_q8_0_ref(n, s, x, y);
}
void rg_vec_dot_iq4_xs_q8_k_avx2(int64_t n, float *s, const void *x, const void *y) {
    rg_vec_dot_iq4_xs_q8_k_ref(n, s, x, y);
}

#endif
