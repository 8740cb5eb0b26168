// dot_rows.h - many weight rows dotted with one activation row: the inner
// loop of MUL_MAT for a few columns (token generation), several rows per pass.
//
// A kernel computes y[r] = dot(w + r * w_stride, x) for r < nr, where x is one
// activation row in the weight type's vec_dot_type (quant.h) as this library's
// quantizer writes it: F32 for F32/F16/BF16 weights, Q8_0/Q8_1 blocks for the
// legacy types. Q8 activations must lie in -127..127 (the quantizer never
// writes -128); that lets the Q8_0 kernel use the sign trick exactly.
//
// Rows are taken four or eight at a time, sharing the activation loads and
// the final reduction (Q8_0: one at a time, see dot_rows_avx2.c); a short
// last group repeats its last row, so every row's arithmetic is the same
// whichever group it falls in, and the result does not depend on how a caller
// splits the rows between threads. The sums differ from the table's vec_dot
// only in the order the f32 terms are added.
#ifndef RG_CPU_DOT_ROWS_H
#define RG_CPU_DOT_ROWS_H

#include <stddef.h>
#include <stdint.h>

typedef void (*rg_dot_rows_fn)(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y);

// The kernel for weights of this type, or NULL (no such kernel on this CPU:
// use the type's vec_dot row by row).
rg_dot_rows_fn rg_cpu_dot_rows(uint32_t w_type);

// Two activation rows at once: y0[r] = dot(w_r, x0), y1[r] = dot(w_r, x1), each with exactly the
// bits the type's rg_dot_rows_fn gives for that row alone (each weight vector loaded and widened
// once for both: the columns of a small batch, a speculative decoder's verification, cost less
// than twice one).
typedef void (*rg_dot_rows2_fn)(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0, const void *x1,
                                float *y0, float *y1);
// The two-row kernel for this type, or NULL (none: call the rg_dot_rows_fn per row).
rg_dot_rows2_fn rg_cpu_dot_rows2(uint32_t w_type);
// Three activation rows at once (x[0..2] into y[0..2]), the same bits again.
typedef void (*rg_dot_rows3_fn)(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *const x[3],
                                float *const y[3]);
rg_dot_rows3_fn rg_cpu_dot_rows3(uint32_t w_type);

// Many columns (a decode batch of several sequences): rows unpacked once per tile of rows into dst,
// rg_unpacked_row_bytes(w_type, K) bytes a row (32-byte aligned blocks when dst is), so that each pair of
// columns reads them instead of unpacking again. *pair gets the kernel that dots unpacked rows (w_stride:
// rg_unpacked_row_bytes) with two columns, each with exactly the bits of the type's rg_dot_rows_fn on the
// packed rows. The layouts:
//   Q4_0, Q5_0: a row's blocks' 32 values each (what the packed kernels unpack), then its block scales as f32;
//   Q4_K: 320 bytes a block (UQ4_K_BYTES): the 256 values, 0..15, a sub-block of 32 at 32 s; the eight
//         scales as int16 each written twice in an int32 (one broadcast load a sub-block); the eight mins
//         as int16; d and dmin as f32;
//   Q6_K: 576 bytes a block (UQ6_K_BYTES): the 256 values, 0..63, in the activation's order; for each 32
//         of them the int16 scales of its two sub-blocks of 16 as one 32-byte vector; the 16 scales as
//         int16 (the offsets' sums); d as f32.
// NULL (and *pair NULL) where the type has none on this CPU or at this K.
// From rg_unpack_min_columns(w_type) columns on, unpacking once beats each pair unpacking again: at two columns
// a pass the unpacking costs each pair a full pass's worth of shuffles, which the unpacked rows save after the
// second pair (Q4_0, Q5_0: 4); the K-quants' unpacked rows are 2.2-2.7x their packed bytes, read again by each
// pair, and gain from 8 (bench_dot_rows: 0.90-0.95x at 4, 1.06-1.22x at 8, 1.14-1.40x at 16).
enum { UQ4_K_BYTES = 320, UQ6_K_BYTES = 576 };
int rg_unpack_min_columns(uint32_t w_type);
// Four columns a pass over unpacked rows (Q4_K, Q6_K: their weight loads shared by four), each column the bits of
// the type's rg_dot_rows_fn; NULL where the type has none (then pairs).
typedef void (*rg_dot_rows4_fn)(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *const x[4],
                                float *const y[4]);
rg_dot_rows4_fn rg_cpu_unpacked_rows4(uint32_t w_type);
// An inference prompt of up to this many columns takes the dot products over unpacked tiles where no integer
// GEMM serves the type (no AMX or AVX-512 VNNI): on an AVX2 CPU they beat the SGEMM on dequantized panels
// (bench_dot_rows with RG_BENCH_MUL_MAT=1, one core, four columns a pass: Q4_K/Q6_K 1.4-1.6x at 32 columns,
// 1.11-1.25x at 128 and 192; Q4_0/Q5_0 1.03-1.06x at 32, 0.90x at 48): 128 for the K-quants, 32 for Q4_0/Q5_0.
// 0 where the type unpacks nothing.
int rg_unpack_prompt_max_n(uint32_t w_type);
size_t rg_unpacked_row_bytes(uint32_t w_type, int64_t K);
typedef void (*rg_unpack_rows_fn)(int64_t K, int64_t nr, const void *w, size_t w_stride, uint8_t *dst);
rg_unpack_rows_fn rg_cpu_unpack_rows(uint32_t w_type, int64_t K, rg_dot_rows2_fn *pair);

// Internal: the AVX2 kernels (dot_rows_avx2.c), stubs doing nothing when built
// without AVX2 (rg_dot_rows_avx2_built = 0 then).
extern const int rg_dot_rows_avx2_built;
void rg_dot_rows_f32_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y);
void rg_dot_rows_f16_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y);
void rg_dot_rows_bf16_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y);
void rg_dot_rows_q4_0_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y);
void rg_dot_rows_q4_1_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y);
void rg_dot_rows_q5_0_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y);
void rg_dot_rows_q8_0_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y);
void rg_dot_rows2_f32_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0, const void *x1,
                           float *y0, float *y1);
void rg_dot_rows2_f16_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0, const void *x1,
                           float *y0, float *y1);
void rg_dot_rows2_bf16_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0, const void *x1,
                            float *y0, float *y1);
void rg_dot_rows2_q4_0_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0, const void *x1,
                            float *y0, float *y1);
void rg_dot_rows2_q5_0_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0, const void *x1,
                            float *y0, float *y1);
void rg_dot_rows2_q8_0_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0, const void *x1,
                            float *y0, float *y1);
void rg_unpack_rows_q4_0_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, uint8_t *dst);
void rg_unpack_rows_q5_0_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, uint8_t *dst);
void rg_dot_rows2_u4_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0, const void *x1,
                          float *y0, float *y1);
void rg_dot_rows2_u5_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0, const void *x1,
                          float *y0, float *y1);
void rg_dot_rows3_q8_0_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *const x[3],
                            float *const y[3]);
void rg_dot_rows3_f32_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *const x[3],
                           float *const y[3]);
void rg_dot_rows3_f16_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *const x[3],
                           float *const y[3]);
void rg_dot_rows3_bf16_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *const x[3],
                            float *const y[3]);
// dot_rows_k_avx2.c: Q4_K and Q6_K against Q8_K (rg_dot_rows_k_avx2_built = 0 without AVX2).
extern const int rg_dot_rows_k_avx2_built;
void rg_dot_rows_q4_K_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y);
void rg_dot_rows_q6_K_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y);
void rg_dot_rows2_q4_K_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0, const void *x1,
                            float *y0, float *y1);
void rg_dot_rows2_q6_K_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0, const void *x1,
                            float *y0, float *y1);
// (rows unpacked: dot_rows.h's layouts above, each unpacking with the pair kernel that reads it)
void rg_unpack_rows_q4_K_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, uint8_t *dst);
void rg_dot_rows2_uq4_K_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0, const void *x1,
                             float *y0, float *y1);
void rg_unpack_rows_q6_K_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, uint8_t *dst);
void rg_dot_rows2_uq6_K_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0, const void *x1,
                             float *y0, float *y1);
void rg_dot_rows4_uq4_K_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *const x[4],
                             float *const y[4]);
void rg_dot_rows4_uq6_K_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *const x[4],
                             float *const y[4]);
// The K-quant kernels' own limit: rows of more blocks of 256 take the table's vec_dot (and are never unpacked).
enum { RG_DOT_ROWS_K_BLOCKS_MAX = 512 };

// dot_rows_avx512.c: Q4_0 and Q5_0 on AVX-512 VNNI, preferred where rg_cpu_has_avx512_vnni()
// (rg_dot_rows_avx512_built = 0 when the compiler cannot build them).
extern const int rg_dot_rows_avx512_built;
void rg_dot_rows_q4_0_avx512(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y);
void rg_dot_rows_q5_0_avx512(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y);

#endif
