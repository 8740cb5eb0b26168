// transpose8_avx2.h - an 8x8 transpose of 32-bit elements in eight 256-bit registers: rows in,
// columns out (v[g] = element g of every row). The repacking of the integer and BF16 GEMMs,
// which put one weight row per 32-bit lane. Include only from files built with AVX2.
#ifndef RG_CPU_TRANSPOSE8_AVX2_H
#define RG_CPU_TRANSPOSE8_AVX2_H

#include <immintrin.h>

static inline void rg_transpose8_epi32(__m256i v[8]) {
    __m256i t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
    for (int h = 0; h < 2; h++) {  // rows 0-3, then 4-7
        __m256i *tt = t + 4 * h, *uu = u + 4 * h;
        uu[0] = _mm256_unpacklo_epi64(tt[0], tt[2]);
        uu[1] = _mm256_unpackhi_epi64(tt[0], tt[2]);
        uu[2] = _mm256_unpacklo_epi64(tt[1], tt[3]);
        uu[3] = _mm256_unpackhi_epi64(tt[1], tt[3]);
    }
    for (int g = 0; g < 4; g++) {
        v[g] = _mm256_permute2x128_si256(u[g], u[4 + g], 0x20);
        v[4 + g] = _mm256_permute2x128_si256(u[g], u[4 + g], 0x31);
    }
}

#endif
