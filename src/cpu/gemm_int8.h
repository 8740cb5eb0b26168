// gemm_int8.h - prompt-sized MUL_MAT with Q4_0, Q5_0, Q8_0, Q4_K or Q6_K weights on int8 dot products,
// for inference.
//
// What llama.cpp does for these weights: the activations are quantized to Q8_0 (32-value
// blocks, one F16 scale each: the same quantizer as generation's Q4_0 dot products), and
// every 32-value sub-block product is an exact integer sum of unsigned weight codes u and the
// activation codes q, scaled once. With dx the activation block's scale and sx = sum_i q_i:
//   Q4_0  (value d (u - 8),   u 0..15):  acc = fma((float)(sum u q - 8 sx), d * dx, acc)
//   Q5_0  (value d (u - 16),  u 0..31):  acc = fma((float)(sum u q - 16 sx), d * dx, acc)
//   Q8_0  (value d (u - 128), u = the signed code + 128): acc = fma((float)(sum u q - 128 sx), d * dx, acc)
//   Q4_K  (value d sc u - dmin m, u 0..15): acc = fma((float)(sum u q), (d sc) * dx, acc);
//                                           acc = fma(-(dmin m), dx * (float)sx, acc)
//   Q6_K  (value d sc_h (u - 32), u 0..63, an int8 scale sc_h per half h of 16 values):
//         acc = fma((float)(sc_0 (sum_0 u q - 32 sx_0) + sc_1 (sum_1 u q - 32 sx_1)), d * dx, acc)
// over the sub-blocks in order, in float (d sc and dmin m rounded to float once per row and
// sub-block). The AVX-512 kernel and the portable reference give the same bits; each output is
// summed by one thread: the result does not depend on the thread count.
//
// Used only where the exec allows 8-bit activations (rg_exec_opts.int8_activations: sessions
// for generation, never training, whose gradients keep F32 activations) and the CPU has
// AVX-512 VNNI (rg_cpu_has_avx512_vnni); elsewhere MUL_MAT takes the SGEMM as before.
//
// The weights are repacked on the fly, a panel of 16 rows at a time, so that one 64-byte load
// gives 4 consecutive codes of all 16 rows, one row per 32-bit lane (low nibbles), and 4 codes
// of the next sub-block (high nibbles): the layout VPDPBUSD multiplies against 4 broadcast
// activation bytes. For the 4-bit types that is a copy of 4-byte pieces of the rows' code bytes:
// Q4_0's 16 bytes per block hold codes i (low) and 16 + i (high); Q4_K's 32 bytes per pair of
// sub-blocks hold sub-block 2p (low) and 2p + 1 (high). Q5_0 and Q8_0 codes take a byte each:
// a block's 32 codes of the 16 rows, expanded, are transposed 4 bytes at a time.
#ifndef RG_CPU_GEMM_INT8_H
#define RG_CPU_GEMM_INT8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/threadpool.h"

enum { RG_INT8_PANEL = 16 };  // weight rows per panel (one per 32-bit lane of a 512-bit register)

// The activations of N columns, quantized to Q8_0 and split for the kernels.
typedef struct rg_q8_cols {
    int64_t K, N, nb;  // nb = K / 32 blocks per column
    int8_t *q;         // [N][K]  the codes, column after column
    float *d;          // [N][nb] the block scales dx
    int32_t *sum;      // [N][nb] the sums of a block's codes sx
    float *dsum;       // [N][nb] dx * (float)sx
    int32_t *sum16;    // [N][nb][2] the sums of each half block's codes (Q6_K's scales cover 16 values)
} rg_q8_cols;

// One panel of 16 weight rows, repacked (rows past M are zeros with scales 0).
// What a type's unsigned weight codes are above its values' codes (the panels' offset): Q4_0 8,
// Q5_0 16, Q8_0 128, Q6_K 32, Q4_K 0 (its minimum is applied instead).
int32_t rg_int8_code_offset(uint32_t type);

typedef struct rg_int8_panel {
    uint32_t type;   // RG_TYPE_Q4_0, Q5_0, Q8_0, Q4_K or Q6_K
    int64_t n_sub;   // sub-blocks of 32 per row (K / 32)
    int32_t offset;  // what the unsigned codes are above the values' codes: 8, 16, 128, Q6_K 32 (Q4_K: 0, the minimum instead)
    uint8_t *codes;  // Q4_0: [n_sub][4 groups][16 rows][4 bytes] nibbles; Q4_K: [n_sub / 2][8][16][4] nibbles;
                     // Q5_0, Q8_0, Q6_K: [n_sub][8 groups][16 rows][4 bytes], a byte per code
    float *scale;    // [n_sub][16] d (d * sc for Q4_K)
    float *min;      // [n_sub][16] dmin * m (Q4_K; zeros otherwise)
    int32_t *sc16;   // [n_sub][2][16] Q6_K: the int8 scales of each sub-block's two halves (zeros otherwise)
} rg_int8_panel;

// Whether the int8 path can run here (AVX-512 VNNI) for weights of this type and row length.
bool rg_gemm_int8_supports(uint32_t type, int64_t K);
// Scratch bytes rg_gemm_int8 needs for K, N on n_threads threads.
size_t rg_gemm_int8_work(int64_t K, int64_t N, int n_threads);
// y[n * ldy + m] for m < M, n < N: w has M rows of type blocks (w_stride bytes apart), x has N
// columns of K floats (ldx floats apart). work: rg_gemm_int8_work bytes, 64-aligned.
void rg_gemm_int8(rg_threadpool *pool, uint32_t type, int64_t K, int64_t M, int64_t N, const void *w,
                  size_t w_stride, const float *x, int64_t ldx, float *y, int64_t ldy, void *work);

// The pieces, for the tests: quantizing columns (allocated by rg_q8_cols_alloc, freed with free(c->q)),
// packing a panel, and a panel times every column (the portable reference and the AVX-512 kernel,
// which must agree bit for bit).
bool rg_q8_cols_alloc(rg_q8_cols *c, int64_t K, int64_t N);
void rg_q8_cols_quantize(rg_q8_cols *c, const float *x, int64_t ldx);
bool rg_int8_panel_alloc(rg_int8_panel *p, uint32_t type, int64_t K);  // freed with free(p->codes)
void rg_int8_panel_pack(rg_int8_panel *p, const void *w, size_t w_stride, int64_t m0, int64_t M);
void rg_int8_panel_pack_avx512(rg_int8_panel *p, const void *w, size_t w_stride, int64_t m0, int64_t M);
void rg_int8_panel_mul_ref(const rg_int8_panel *p, const rg_q8_cols *c, int rows, float *y, int64_t ldy);
void rg_int8_panel_mul_avx512(const rg_int8_panel *p, const rg_q8_cols *c, int rows, float *y, int64_t ldy);

#endif
