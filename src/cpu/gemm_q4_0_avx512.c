// gemm_q4_0_avx512.c - a panel of 8 Q4_0 weight rows times Q8_0 columns on VPDPBUSD
// (AVX-512 VNNI on 256-bit registers); the arithmetic of gemm_q4_0.h, bit for bit
// rg_q4_0_panel_mul_ref's.
//
// Per block and column: eight VPDPBUSD (unsigned 4-bit codes of the 8 rows, one row per
// 32-bit lane, against 4 broadcast activation codes), the offset subtracted, one convert,
// one multiply of the scales and one FMA. Four columns share each block's unpacked codes.
#include <string.h>

#include "cpu/gemm_q4_0.h"

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#include <immintrin.h>

static inline __m256i bcast4(const int8_t *q) {
    int32_t v;
    memcpy(&v, q, 4);
    return _mm256_set1_epi32(v);
}

// The integer sum of one block of one column against the 8 rows, offset included.
static inline __m256i block_isum(const __m256i u[8], const int8_t *q, int32_t sum8) {
    __m256i s = _mm256_setzero_si256();
    for (int j = 0; j < 4; j++) {
        s = _mm256_dpbusd_epi32(s, u[j], bcast4(q + 4 * j));           // codes 4j..4j+3
        s = _mm256_dpbusd_epi32(s, u[4 + j], bcast4(q + 16 + 4 * j));  // codes 16+4j..16+4j+3
    }
    return _mm256_sub_epi32(s, _mm256_set1_epi32(sum8));
}

static inline void unpack(const uint8_t *codes, __m256i u[8]) {
    const __m256i low = _mm256_set1_epi8(0x0F);
    for (int j = 0; j < 4; j++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(codes + 32 * j));
        u[j] = _mm256_and_si256(v, low);
        u[4 + j] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
    }
}

static inline void store_rows(float *y, __m256 v, int rows) {
    if (rows == RG_Q4_0_PANEL) _mm256_storeu_ps(y, v);
    else _mm256_mask_storeu_ps(y, (__mmask8)((1u << rows) - 1u), v);
}

void rg_q4_0_panel_mul_avx512(const rg_q4_0_panel *p, const rg_q8_cols *c, int rows, float *y, int64_t ldy) {
    const int64_t nb = p->nb, K = c->K;
    int64_t n = 0;
    for (; n + 4 <= c->N; n += 4) {
        __m256 acc[4];
        for (int i = 0; i < 4; i++) acc[i] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            __m256i u[8];
            unpack(p->codes + b * 128, u);
            const __m256 dw = _mm256_loadu_ps(p->d + b * RG_Q4_0_PANEL);
            for (int i = 0; i < 4; i++) {
                const int64_t col = (n + i) * nb + b;
                __m256i s = block_isum(u, c->q + (n + i) * K + b * 32, c->sum8[col]);
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(c->d[col])), acc[i]);
            }
        }
        for (int i = 0; i < 4; i++) store_rows(y + (n + i) * ldy, acc[i], rows);
    }
    for (; n < c->N; n++) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            __m256i u[8];
            unpack(p->codes + b * 128, u);
            const int64_t col = n * nb + b;
            __m256i s = block_isum(u, c->q + n * K + b * 32, c->sum8[col]);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s),
                                  _mm256_mul_ps(_mm256_loadu_ps(p->d + b * RG_Q4_0_PANEL), _mm256_set1_ps(c->d[col])), acc);
        }
        store_rows(y + n * ldy, acc, rows);
    }
}

#else  // a compiler without AVX-512 VNNI: never called (rg_gemm_q4_0_available is false)

void rg_q4_0_panel_mul_avx512(const rg_q4_0_panel *p, const rg_q8_cols *c, int rows, float *y, int64_t ldy) {
    rg_q4_0_panel_mul_ref(p, c, rows, y, ldy);
}

#endif
