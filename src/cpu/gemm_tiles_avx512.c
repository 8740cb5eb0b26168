// gemm_tiles_avx512.c - the BF16 products on VDPBF16PS (AVX512_BF16, 512-bit registers), for CPUs
// without AMX: RG_TILES_AVX512 of gemm_tiles.h, on the packed tiles of the AMX kernel.
//
// A packed B tile row (16 columns x one pair of K) is one register; an A pair is broadcast. 8 rows
// x 32 columns a pass: 16 independent accumulators hide the instruction's latency, two B loads
// feed 16 VDPBF16PS. Each C(i, j) is one accumulator over the pairs of K in increasing order,
// acc = fl(fl(acc + a(2p+1) b(2p+1)) + a(2p) b(2p)) (the instruction's own order), stopping at the
// last pair that exists (k_pairs): zero pairs past it would turn a -0 sum into +0.
#include "cpu/gemm_tiles.h"

#if defined(__AVX512BF16__) && defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#include <string.h>

const int rg_gemm_tiles_avx512_built = 1;

enum { ROWS = 8 };

static inline __mmask16 cols_mask(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1u); }

void rg_gemm_tiles_block_avx512(const rg_tiles_block *blk) {
    for (int64_t nt = 0; nt < blk->n_tiles; nt += 2) {
        const int64_t c0 = nt * 16;
        const __mmask16 m0 = cols_mask(blk->cols - c0), m1 = cols_mask(blk->cols - c0 - 16);
        const uint16_t *b0 = blk->b + nt * blk->b_nt_stride, *b1 = b0 + blk->b_nt_stride;
        for (int64_t mt = 0; mt < blk->m_tiles; mt++)
            for (int r0 = 0; r0 < 16; r0 += ROWS) {
                const int64_t i0 = mt * 16 + r0, nr = blk->rows - i0 < ROWS ? blk->rows - i0 : ROWS;
                if (nr <= 0) break;
                float *c = blk->c + i0 * blk->ldc + c0;
                __m512 acc[ROWS][2];
#pragma GCC unroll 8
                for (int r = 0; r < ROWS; r++) {
                    const int live = r < nr && blk->load_c;
                    acc[r][0] = live ? _mm512_maskz_loadu_ps(m0, c + r * blk->ldc) : _mm512_setzero_ps();
                    acc[r][1] = live ? _mm512_maskz_loadu_ps(m1, c + r * blk->ldc + 16) : _mm512_setzero_ps();
                }
                const uint16_t *at = blk->a + mt * blk->a_mt_stride + r0 * 32;
                for (int64_t s = 0; s < blk->n_steps; s++) {
                    const int64_t off = s * RG_TILES_TILE_ELEMS, left = blk->k_pairs - s * 16;
                    const int qn = left < 16 ? (int)left : 16;
                    for (int q = 0; q < qn; q++) {
                        const __m512bh w0 = (__m512bh)_mm512_loadu_si512((const void *)(b0 + off + q * 32));
                        const __m512bh w1 = (__m512bh)_mm512_loadu_si512((const void *)(b1 + off + q * 32));
#pragma GCC unroll 8
                        for (int r = 0; r < ROWS; r++) {
                            uint32_t pair;
                            memcpy(&pair, at + off + r * 32 + 2 * q, 4);
                            const __m512bh x = (__m512bh)_mm512_set1_epi32((int)pair);
                            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], x, w0);
                            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], x, w1);
                        }
                    }
                }
                for (int r = 0; r < nr; r++) {
                    _mm512_mask_storeu_ps(c + r * blk->ldc, m0, acc[r][0]);
                    _mm512_mask_storeu_ps(c + r * blk->ldc + 16, m1, acc[r][1]);
                }
            }
    }
}

#else  // a compiler without AVX512_BF16: never called (rg_gemm_tiles_avx512_built = 0)
#include <stdlib.h>

const int rg_gemm_tiles_avx512_built = 0;
void rg_gemm_tiles_block_avx512(const rg_tiles_block *blk) {
    (void)blk;
    abort();
}
#endif
