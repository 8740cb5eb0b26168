// gemm_int8_tiles.h - prompt-sized MUL_MAT with Q4_0, Q5_0, Q8_0, Q4_K or Q6_K weights on the
// matrix unit's int8 tiles (TDPBUSD), for inference: gemm_int8.h's arithmetic, bit for bit.
//
// The activations are quantized to Q8_0 by the library's quantizer, as gemm_int8.c does (the
// same codes, block scales dx and code sums sx). Per 32-value sub-block s, TDPBUSD gives the
// exact integer sums sum_k u[m][k] q[n][k] (unsigned weight codes u in tile A, the activation
// codes q in tile B) of 16 weight rows by 16 columns at once, one dword each; the sums are
// exact, so they equal VPDPBUSD's. Each sub-block's tile is stored and scaled into F32
// accumulators by the same steps as gemm_int8.h's, per output, over the sub-blocks in order:
//   Q4_0, Q5_0, Q8_0:  acc = fma((float)(isum - offset sx), fl(d_w dx), acc)
//   Q4_K:              acc = fma((float)isum, fl((d sc) dx), acc); acc = fma(-(dmin m), fl(dx sx), acc)
//   Q6_K:              the two halves of 16 are two TDPBUSD (K = 16) into two tiles, combined in
//                      integers, sc_0 (isum_0 - 32 sx_0) + sc_1 (isum_1 - 32 sx_1), then one fma
// so every output has the bits of rg_int8_panel_mul_ref (and of the VNNI kernel): the tile path
// needs no reference of its own, and the tests hold it to that one. Each output is summed by one
// thread over the whole of K: the bits do not depend on the thread count.
//
// Layout. A weight panel is 32 rows (two A tiles of 16 rows), a column group 32 columns (two B
// tiles of 16), so one sub-block step is 4 TDPBUSD into 4 accumulator tiles. Per sub-block:
//   panel codes  [2 tiles][16 rows][32 bytes]       one unsigned code a byte (nibbles expanded),
//                                                    A tile t at + 512 t, stride 32 (Q6_K half h:
//                                                    + 16 h, 16 bytes a row)
//   column codes [2 tiles][8][16 columns][4 bytes]   codes 4i..4i+3 of a column in row i of its
//                                                    B tile, at + 512 t, stride 64 (Q6_K half h:
//                                                    + 256 h, 4 rows)
// Rows past M and columns past N are zero codes with zero scales; they are computed and never
// stored, so every shape (any M, any N, K a multiple of the block) reads only inside the
// buffers. Tile configuration (palette 1): tmm0-3 the accumulators 16 x 64 bytes, tmm4-5 A
// 16 x 32 (Q6_K: 16 x 16), tmm6-7 B 8 x 64 (Q6_K: 4 x 64).
//
// Paths: RG_TILES_AMX where rg_cpu_has_amx_int8() and the build has the kernel (hardware, gemm_int8_tiles_amx.c), else
// RG_TILES_EMULATED when RG_TILES_EMULATE=1 is set (the same kernel source on the emulated tiles
// of cpu/tiles.h, gemm_int8_tiles_emu.c: slow, for tests), else RG_TILES_NONE: then the VNNI
// path (gemm_int8.h) where the CPU has it, else the SGEMM, as before.
#ifndef RG_CPU_GEMM_INT8_TILES_H
#define RG_CPU_GEMM_INT8_TILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "cpu/gemm_tiles.h"

enum {
    RG_INT8T_ROWS = 32,  // weight rows per panel (two A tiles)
    RG_INT8T_COLS = 32,  // activation columns per group (two B tiles)
    RG_INT8T_SUB = 1024, // bytes of one sub-block's codes of a panel or of a column group
};

// One panel of 32 weight rows packed for the A tiles.
typedef struct rg_int8t_panel {
    uint32_t type;    // RG_TYPE_Q4_0, Q5_0, Q8_0, Q4_K or Q6_K
    int64_t n_sub;    // sub-blocks of 32 per row (K / 32)
    int32_t offset;   // what the unsigned codes are above the values' codes (gemm_int8.h's)
    uint8_t *codes;   // [n_sub][RG_INT8T_SUB]
    float *scale;     // [n_sub][32] d (Q4_K: d sc)
    float *min;       // [n_sub][32] Q4_K: dmin m (zeros otherwise)
    int32_t *sc16;    // [n_sub][2][32] Q6_K: the int8 scales of the two halves (zeros otherwise)
} rg_int8t_panel;

// One group of 32 activation columns, quantized to Q8_0 and packed for the B tiles.
typedef struct rg_int8t_cols {
    int64_t n_sub;
    uint8_t *codes;   // [n_sub][RG_INT8T_SUB] (signed codes)
    float *d;         // [n_sub][32] dx
    int32_t *sum;     // [n_sub][32] sx
    float *dsum;      // [n_sub][32] dx * (float)sx
    int32_t *sum16;   // [n_sub][2][32] the sums of each half of 16
} rg_int8t_cols;

// The int8 tile path this process takes (see above); asked once.
rg_tile_path rg_int8_tiles_path(void);
// Whether the tile path can run here for weights of this type and row length (the types and K of
// gemm_int8.h: K a multiple of 32, of 256 for Q4_K and Q6_K).
bool rg_gemm_int8_tiles_supports(uint32_t type, int64_t K);
// Scratch bytes rg_gemm_int8_tiles needs for K, N on n_threads threads.
size_t rg_gemm_int8_tiles_work(int64_t K, int64_t N, int n_threads);
// y[n * ldy + m] for m < M, n < N, on `path` (AMX only where rg_cpu_has_amx_int8(); EMULATED
// anywhere): w has M rows of type blocks (w_stride bytes apart), x has N columns of K floats (ldx
// floats apart). work: rg_gemm_int8_tiles_work bytes, 64-aligned.
void rg_gemm_int8_tiles(rg_threadpool *pool, rg_tile_path path, uint32_t type, int64_t K, int64_t M, int64_t N,
                        const void *w, size_t w_stride, const float *x, int64_t ldx, float *y, int64_t ldy,
                        void *work);

// The pieces, for the tests. Buffers from the *_alloc functions are freed with free(p->codes).
bool rg_int8t_panel_alloc(rg_int8t_panel *p, uint32_t type, int64_t K);
bool rg_int8t_cols_alloc(rg_int8t_cols *c, int64_t K);
// Rows m0 .. m0 + 31 of w (those past M zero).
void rg_int8t_panel_pack(rg_int8t_panel *p, const void *w, size_t w_stride, int64_t m0, int64_t M);
// Columns n0 .. n0 + 31 of x (those past N zero); staging: K / 32 * 34 bytes (one Q8_0 row).
void rg_int8t_cols_pack(rg_int8t_cols *c, const float *x, int64_t ldx, int64_t n0, int64_t N, uint8_t *staging);
// The panel times the column group: y[j * ldy + r] for r < rows, j < cols (rows, cols <= 32).
// The same kernel source on the emulated tiles and on AMX (the latter only where the CPU has it).
void rg_int8t_mul_emu(const rg_int8t_panel *p, const rg_int8t_cols *c, int rows, int cols, float *y, int64_t ldy);
void rg_int8t_mul_amx(const rg_int8t_panel *p, const rg_int8t_cols *c, int rows, int cols, float *y, int64_t ldy);
// Whether this build has the AMX kernel (a compiler with -mamx-int8); without it the path is never AMX.
bool rg_int8t_amx_built(void);

#endif
