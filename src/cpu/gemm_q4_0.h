// gemm_q4_0.h - prompt-sized MUL_MAT with Q4_0 weights on int8 dot products, for inference.
//
// What llama.cpp does for these weights: the activations are quantized to Q8_0 (32-value
// blocks, one F16 scale each, the same quantizer as the dot-product path of generation), and
// every 32-block product is an exact integer sum, scaled once:
//     y[m, n] = sum over blocks b, in order, of  (float)isum(m, n, b) * (dw[m, b] * dx[n, b])
//     isum    = sum_i u[m, b, i] * q[n, b, i] - 8 * sum_i q[n, b, i]     (u = the 4-bit codes 0..15)
// in float with one fused multiply-add per block (so the AVX-512 kernel and the portable
// reference below give the same bits). Each output is summed by one thread, in block order:
// the result does not depend on the thread count.
//
// Used only where the exec allows 8-bit activations (rg_exec_opts.int8_activations: sessions
// for generation, never training, whose gradients keep F32 activations) and the CPU has
// AVX-512 VNNI (rg_cpu_has_avx512_vnni); elsewhere MUL_MAT takes the SGEMM as before.
//
// The weights are repacked on the fly, a panel of 8 rows at a time: for each block, the
// 16 code bytes of the 8 rows interleaved 4 bytes at a time, so that one 32-byte load gives
// (low nibbles) codes 4j..4j+3 and (high nibbles) codes 16+4j..16+4j+3 of all 8 rows, one
// row per 32-bit lane: the layout VPDPBUSD multiplies against 4 broadcast activation bytes.
#ifndef RG_CPU_GEMM_Q4_0_H
#define RG_CPU_GEMM_Q4_0_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/threadpool.h"

enum { RG_Q4_0_PANEL = 8 };  // weight rows per panel (one per 32-bit lane of a 256-bit register)

// The activations of N columns, quantized to Q8_0 and split for the kernels.
typedef struct rg_q8_cols {
    int64_t K, N, nb;  // nb = K / 32 blocks per column
    int8_t *q;         // [N][K]  the codes, column after column
    float *d;          // [N][nb] the block scales
    int32_t *sum8;     // [N][nb] 8 x the sum of a block's codes (the offset of the unsigned weight codes)
} rg_q8_cols;

// One panel of 8 weight rows, repacked (rows past M are zeros with scale 0).
typedef struct rg_q4_0_panel {
    int64_t nb;
    uint8_t *codes;  // [nb][4][8][4] bytes: block b, group j, row r, bytes 4j..4j+3 of the row's 16
    float *d;        // [nb][8] the rows' block scales
} rg_q4_0_panel;

// Whether the int8 path can run here (AVX-512 VNNI).
bool rg_gemm_q4_0_available(void);
// Scratch bytes rg_gemm_q4_0 needs for K, N on n_threads threads.
size_t rg_gemm_q4_0_work(int64_t K, int64_t N, int n_threads);
// y[n * ldy + m] for m < M, n < N: w has M rows of K/32 Q4_0 blocks (w_stride bytes apart), x has N
// columns of K floats (ldx floats apart). K must be a multiple of 32. work: rg_gemm_q4_0_work bytes, 64-aligned.
void rg_gemm_q4_0(rg_threadpool *pool, int64_t K, int64_t M, int64_t N, const void *w, size_t w_stride,
                  const float *x, int64_t ldx, float *y, int64_t ldy, void *work);

// The pieces, for the tests: quantizing columns, packing a panel, and a panel times every column
// (portable reference and the AVX-512 kernel, which must agree bit for bit).
void rg_q8_cols_quantize(rg_q8_cols *c, const float *x, int64_t ldx, int64_t n0, int64_t n1);
void rg_q4_0_panel_pack(rg_q4_0_panel *p, const void *w, size_t w_stride, int64_t m0, int64_t M);
void rg_q4_0_panel_mul_ref(const rg_q4_0_panel *p, const rg_q8_cols *c, int rows, float *y, int64_t ldy);
void rg_q4_0_panel_mul_avx512(const rg_q4_0_panel *p, const rg_q8_cols *c, int rows, float *y, int64_t ldy);

#endif
