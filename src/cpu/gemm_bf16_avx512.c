// gemm_bf16_avx512.c - a panel of 16 BF16 weight rows times BF16-rounded columns on VDPBF16PS
// (AVX512_BF16 on 512-bit registers, one row per 32-bit lane), and the panel's packing
// (gemm_bf16.h).
//
// 12 columns a pass: twelve independent accumulator chains hide the instruction's latency, and
// each step of p is one 64-byte load of the panel's pairs against twelve broadcast activation
// pairs. On Sapphire Rapids (two 512-bit pipes) SmolLM2-135M BF16 prompts ran 444-450 tok/s
// with the 8-row panels on 256-bit registers this replaced (8 columns a pass), beside
// llama-bench's 610-642. Every output is still one accumulator over p in order, so the bits are
// the reference's whatever the panel width.
#include <string.h>

#include "cpu/gemm_bf16.h"

#if defined(__AVX512BF16__) && defined(__AVX512VL__)
#include <immintrin.h>

#include "cpu/transpose8_avx2.h"

enum { COLS = 12 };

static inline void store_rows(float *y, __m512 v, int rows) {
    if (rows == RG_BF16_PANEL) _mm512_storeu_ps(y, v);
    else _mm512_mask_storeu_ps(y, (__mmask16)((1u << rows) - 1u), v);
}

static inline __m512bh bcast_pair(const uint16_t *x) {
    uint32_t v;
    memcpy(&v, x, 4);
    return (__m512bh)_mm512_set1_epi32((int)v);
}

// Columns n0 .. n0 + NC of the panel: NC chains, each the p loop of one column.
#define PANEL_COLUMNS(NC)                                                                                     \
    do {                                                                                                    \
        __m512 acc[NC];                                                                                     \
        for (int i = 0; i < NC; i++) acc[i] = _mm512_setzero_ps();                                          \
        for (int64_t p = 0; p < P; p++) {                                                                   \
            const __m512bh w = (__m512bh)_mm512_loadu_si512((const void *)(panel + p * RG_BF16_PANEL));      \
            for (int i = 0; i < NC; i++) acc[i] = _mm512_dpbf16_ps(acc[i], w, bcast_pair(xb + (n0 + i) * K + 2 * p)); \
        }                                                                                                   \
        for (int i = 0; i < NC; i++) store_rows(y + (n0 + i) * ldy, acc[i], rows);                          \
    } while (0)

void rg_bf16_panel_mul_avx512(const uint32_t *panel, int64_t K, const uint16_t *xb, int64_t N, int rows, float *y,
                              int64_t ldy) {
    const int64_t P = K / 2;
    int64_t n0 = 0;
    for (; n0 + COLS <= N; n0 += COLS) PANEL_COLUMNS(COLS);
    for (; n0 + 4 <= N; n0 += 4) PANEL_COLUMNS(4);
    for (; n0 < N; n0++) PANEL_COLUMNS(1);
}

void rg_bf16_panel_pack_avx512(uint32_t *panel, const void *w, size_t w_stride, int64_t K, int64_t m0, int64_t M) {
    for (int half = 0; half < 2; half++) {  // rows 0-7, then 8-15 of the panel
        const int64_t r0 = m0 + 8 * half;
        const int live = M - r0 <= 0 ? 0 : M - r0 < 8 ? (int)(M - r0) : 8;
        for (int64_t p0 = 0; p0 < K / 2; p0 += 8) {  // 8 pairs of the 8 rows at a time
            __m256i v[8];
            for (int r = 0; r < 8; r++)
                v[r] = r < live ? _mm256_loadu_si256((const __m256i *)((const uint8_t *)w + (size_t)(r0 + r) * w_stride + 4 * p0))
                                : _mm256_setzero_si256();
            rg_transpose8_epi32(v);
            for (int g = 0; g < 8; g++) _mm256_storeu_si256((__m256i *)(panel + (p0 + g) * RG_BF16_PANEL + 8 * half), v[g]);
        }
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
