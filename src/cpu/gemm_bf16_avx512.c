// gemm_bf16_avx512.c - a panel of 8 BF16 weight rows times BF16-rounded columns on VDPBF16PS
// (AVX512_BF16 on 256-bit registers), and the panel's packing (gemm_bf16.h).
#include <string.h>

#include "cpu/gemm_bf16.h"

#if defined(__AVX512BF16__) && defined(__AVX512VL__)
#include <immintrin.h>

#include "cpu/transpose8_avx2.h"

static inline void store_rows(float *y, __m256 v, int rows) {
    if (rows == 8) _mm256_storeu_ps(y, v);
    else _mm256_mask_storeu_ps(y, (__mmask8)((1u << rows) - 1u), v);
}

static inline __m256bh bcast_pair(const uint16_t *x) {
    uint32_t v;
    memcpy(&v, x, 4);
    return (__m256bh)_mm256_set1_epi32((int)v);
}

void rg_bf16_panel_mul_avx512(const uint32_t *panel, int64_t K, const uint16_t *xb, int64_t N, int rows, float *y,
                              int64_t ldy) {
    const int64_t P = K / 2;
    int64_t n0 = 0;
    for (; n0 + 8 <= N; n0 += 8) {  // eight columns: eight independent accumulator chains
        __m256 acc[8];
        for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
        for (int64_t p = 0; p < P; p++) {
            const __m256bh w = (__m256bh)_mm256_loadu_si256((const __m256i *)(panel + p * 8));
            for (int i = 0; i < 8; i++) acc[i] = _mm256_dpbf16_ps(acc[i], w, bcast_pair(xb + (n0 + i) * K + 2 * p));
        }
        for (int i = 0; i < 8; i++) store_rows(y + (n0 + i) * ldy, acc[i], rows);
    }
    for (; n0 < N; n0++) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t p = 0; p < P; p++)
            acc = _mm256_dpbf16_ps(acc, (__m256bh)_mm256_loadu_si256((const __m256i *)(panel + p * 8)),
                                   bcast_pair(xb + n0 * K + 2 * p));
        store_rows(y + n0 * ldy, acc, rows);
    }
}

void rg_bf16_panel_pack_avx512(uint32_t *panel, const void *w, size_t w_stride, int64_t K, int64_t m0, int64_t M) {
    const int live = M - m0 < 8 ? (int)(M - m0) : 8;
    for (int64_t p0 = 0; p0 < K / 2; p0 += 8) {  // 8 pairs of the 8 rows at a time
        __m256i v[8];
        for (int r = 0; r < 8; r++)
            v[r] = r < live ? _mm256_loadu_si256((const __m256i *)((const uint8_t *)w + (size_t)(m0 + r) * w_stride + 4 * p0))
                            : _mm256_setzero_si256();
        rg_transpose8_epi32(v);
        for (int g = 0; g < 8; g++) _mm256_storeu_si256((__m256i *)(panel + (p0 + g) * 8), v[g]);
    }
}

#else  // a compiler without AVX512_BF16: never called (rg_gemm_bf16_supports is false)

void rg_bf16_panel_mul_avx512(const uint32_t *panel, int64_t K, const uint16_t *xb, int64_t N, int rows, float *y,
                              int64_t ldy) {
    rg_bf16_panel_mul_ref(panel, K, xb, N, rows, y, ldy);
}
void rg_bf16_panel_pack_avx512(uint32_t *panel, const void *w, size_t w_stride, int64_t K, int64_t m0, int64_t M) {
    rg_bf16_panel_pack(panel, w, w_stride, K, m0, M);
}

#endif
