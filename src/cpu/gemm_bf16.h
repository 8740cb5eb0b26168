// gemm_bf16.h - prompt-sized MUL_MAT with BF16 weights on VDPBF16PS (AVX512_BF16), for inference.
//
// What llama.cpp does for BF16 weights: the activations are rounded to BF16 (to nearest even)
// and every pair of products is added in F32 by the instruction, which multiplies exactly
// (8-bit significands) and adds the odd element's product, then the even one's, each rounded
// to nearest even, denormal inputs and results flushed to zero:
//     acc = fl(fl(acc + w[2p+1] x[2p+1]) + w[2p] x[2p])   for p = 0 .. K/2 - 1, in order
// per output, one accumulator, one thread: the bits do not depend on the thread count, and the
// portable reference below follows the same arithmetic (checked against the kernel).
//
// Used only where the exec allows rounded activations (rg_exec_opts.int8_activations:
// sessions for generation, never training) and the CPU has AVX512_BF16.
//
// The weights are repacked on the fly, a panel of 16 rows at a time: the pairs of the 16 rows
// interleaved, one row per 32-bit lane, so one 64-byte load feeds VDPBF16PS against one
// broadcast activation pair.
#ifndef RG_CPU_GEMM_BF16_H
#define RG_CPU_GEMM_BF16_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/threadpool.h"

bool rg_gemm_bf16_supports(int64_t K);  // AVX512_BF16 here and K a multiple of 16
size_t rg_gemm_bf16_work(int64_t K, int64_t N, int n_threads);
// y[n * ldy + m] for m < M, n < N: w has M rows of K BF16 values (w_stride bytes apart), x N columns of K
// floats (ldx floats apart). work: rg_gemm_bf16_work bytes, 64-aligned.
void rg_gemm_bf16(rg_threadpool *pool, int64_t K, int64_t M, int64_t N, const void *w, size_t w_stride,
                  const float *x, int64_t ldx, float *y, int64_t ldy, void *work);

// The pieces, for the tests. A panel is [K / 2][RG_BF16_PANEL rows] 32-bit pairs (rows past M zero);
// columns are [N][K] BF16.
#define RG_BF16_PANEL 16
void rg_bf16_round_cols(const float *x, int64_t ldx, int64_t K, int64_t n0, int64_t n1, uint16_t *xb);
void rg_bf16_panel_pack(uint32_t *panel, const void *w, size_t w_stride, int64_t K, int64_t m0, int64_t M);
void rg_bf16_panel_pack_avx512(uint32_t *panel, const void *w, size_t w_stride, int64_t K, int64_t m0, int64_t M);
void rg_bf16_panel_mul_ref(const uint32_t *panel, int64_t K, const uint16_t *xb, int64_t N, int rows, float *y,
                           int64_t ldy);
void rg_bf16_panel_mul_avx512(const uint32_t *panel, int64_t K, const uint16_t *xb, int64_t N, int rows, float *y,
                              int64_t ldy);

#endif
