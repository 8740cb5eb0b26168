// gemm_tiles.h - the products of an rg_gemm_batch (gemm.h) in BF16, on the CPU's matrix unit:
// what training.compute_dtype=bf16 runs (every product of a weight in the forward and the
// backward: MUL_MAT, OUT_PROD's dX and dW, LINEAR_CE's head; ops_matmul.c's node_bf16), as the
// CUDA tensor path runs RETRO_CUDA_HALF_GEMM=tensor.
//
// Arithmetic, whatever the path: A and B are rounded to BF16 to nearest even (B exactly when it
// is a BF16 weight; quantized and F16 rows are decoded to F32 first), every product is exact in
// F32 (8-bit significands), and the sums are F32, rounded to nearest even, denormal inputs read
// as zero and denormal results flushed to zero (the instructions ignore MXCSR). The order of the
// sums is the path's own, documented below; each C(i, j) is summed by one thread over the whole
// of K in that order, so the bits do not depend on the thread count or on how C is split.
//
//   RG_TILES_AMX       TDPBF16PS on AMX tiles. K in steps of 32 (one tile row of A; K padded
//                      with zeros). Per step, two partial sums from zero, over the 16 pairs in
//                      order: e over the even elements (k = 0, 2, .. 30 of the step), o over the
//                      odd ones; then C(i, j) = fl(C(i, j) + fl(e + o)) (the Intel SDM's
//                      pseudo-code of TDPBF16PS). C starts as 0, or as C with accumulate.
//   RG_TILES_EMULATED  the AMX path's kernel source, with tile registers emulated in C
//                      (cpu/tiles.h): the same bits as RG_TILES_AMX; checks every tile
//                      configuration, load and product that the hardware would refuse.
//                      Slow: for tests and for CPUs without a matrix unit (RG_TILES_EMULATE=1).
//   RG_TILES_AVX512    VDPBF16PS on 512-bit registers, for CPUs with AVX512_BF16 and no AMX.
//                      One sum per C(i, j), from 0 or C: per pair p of k (K padded to even),
//                      acc = fl(fl(acc + A(i, 2p+1) B(2p+1, j)) + A(i, 2p) B(2p, j)).
//
// rg_gemm_tiles_ref computes either order in plain C, one element at a time: the tests hold
// every path to it bit for bit.
#ifndef RG_CPU_GEMM_TILES_H
#define RG_CPU_GEMM_TILES_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/gemm.h"

typedef enum rg_tile_path {
    RG_TILES_NONE = 0,      // no BF16 path: compute_dtype=bf16 is refused (rg_gemm_tiles_missing says why)
    RG_TILES_AMX = 1,       // TDPBF16PS
    RG_TILES_AVX512 = 2,    // VDPBF16PS
    RG_TILES_EMULATED = 3,  // the AMX kernel on emulated tiles (RG_TILES_EMULATE=1)
} rg_tile_path;

// The path this process runs: AMX where usable (base/cpu.h: rg_cpu_has_amx_bf16), else
// AVX512_BF16, else the emulated tiles when RG_TILES_EMULATE=1 is set, else NONE. Asked once.
rg_tile_path rg_gemm_tiles_path(void);
// "amx", "avx512_bf16", "emulated", "none".
const char *rg_tile_path_name(rg_tile_path path);
// Why there is no BF16 path here, in words for an error: which instructions are missing and why
// AMX is not used. "" when rg_gemm_tiles_path() != RG_TILES_NONE.
const char *rg_gemm_tiles_missing(void);

// Scratch bytes rg_gemm_tiles_run needs for this batch shape (any strides) on n_threads.
size_t rg_gemm_tiles_work_size(const rg_gemm_batch *batch, int n_threads);
// Runs the batch on `path` (not NONE; AMX and AVX512 only where the CPU has them). Fails with
// RG_ERR_UNSUPPORTED for a path this CPU cannot run or a B type without a dequantizer,
// RG_ERR_ARG for a short work buffer or bad sizes.
rg_status rg_gemm_tiles_run(rg_threadpool *pool, rg_tile_path path, const rg_gemm_batch *batch, void *work,
                            size_t work_size, rg_error *err);
// A frozen B packed once (a LoRA base weight, or any weight for a whole step): every problem's B
// in the kernels' tile layout, read by rg_gemm_tiles_run_packed instead of packing B on every
// call. The layout is the same for every path (AMX, AVX512 and EMULATED read it alike); its size
// depends on N, K and n_problems only.
size_t rg_gemm_tiles_packed_b_size(const rg_gemm_batch *batch);
// Packs every problem's B (batch->get supplies it; A and C are not read) into `packed`
// (rg_gemm_tiles_packed_b_size bytes, 64-byte aligned), on the pool. Fails as rg_gemm_tiles_run
// does for a B type without a dequantizer or rows of partial blocks, RG_ERR_ARG for a short buffer.
rg_status rg_gemm_tiles_pack_b(rg_threadpool *pool, const rg_gemm_batch *batch, void *packed, size_t size,
                               rg_error *err);
// rg_gemm_tiles_run with B read from `packed` (rg_gemm_tiles_pack_b of a batch with the same N, K,
// B type and n_problems, and the same B values; this batch's B is not read). The same bits as
// rg_gemm_tiles_run; work: rg_gemm_tiles_work_size bytes (or NULL).
rg_status rg_gemm_tiles_run_packed(rg_threadpool *pool, rg_tile_path path, const rg_gemm_batch *batch,
                                   const void *packed, void *work, size_t work_size, rg_error *err);
// The portable reference of `path`'s arithmetic (AMX and EMULATED share one): single thread,
// no work buffer; the same bits as rg_gemm_tiles_run(path).
rg_status rg_gemm_tiles_ref(rg_tile_path path, const rg_gemm_batch *batch, rg_error *err);

// ---------------------------------------------------------------------------
// Internal: the kernels behind rg_gemm_tiles_run (gemm_tiles.c packs and splits the work).
//
// Packed A: tiles of 16 rows x 32 BF16 (one K step), tile (mt, s) at a + mt * a_mt_stride + s * 512
// elements, row r at + 32 r. Packed B: tiles of 16 pair-rows x 16 columns, tile (nt, s) at
// b + nt * b_nt_stride + s * 512, B(32 s + 2 q + l, 16 nt + j) at + 32 q + 2 j + l (l = 0, 1: the
// VNNI pairs TDPBF16PS and VDPBF16PS read). Padding (rows, columns, K) is zero.
#define RG_TILES_KSTEP 32        // K per tile step (16 pairs)
#define RG_TILES_TILE_ELEMS 512  // BF16 elements per packed tile (16 x 32)

typedef struct rg_tiles_block {
    const uint16_t *a;           // packed A: m_tiles (even) x n_steps tiles
    int64_t a_mt_stride;
    const uint16_t *b;           // packed B: n_tiles (even) x n_steps tiles
    int64_t b_nt_stride;
    int64_t m_tiles, n_tiles, n_steps;
    int64_t k_pairs;             // pairs of K that exist in these steps (the AVX512 order stops there)
    float *c;                    // C(0, 0) of the block, rows ldc floats apart
    int64_t ldc;
    int64_t rows, cols;          // C's rows and columns in the block (<= 16 m_tiles, <= 16 n_tiles)
    int load_c;                  // C holds the sum so far (accumulate, or an earlier K block); else from 0
    float *stage;                // 32 x 32 floats, 64-byte aligned: the block's edge tiles
} rg_tiles_block;

// The AMX order on 2 x 2 C tiles (32 x 32 of C) a pass: each A and B tile load feeds two
// TDPBF16PS. _amx: the hardware (rg_gemm_tiles_amx_built = 0 and a stub where the compiler has
// no AMX); _emu: the same source on tiles_emu.c.
extern const int rg_gemm_tiles_amx_built;
void rg_gemm_tiles_block_amx(const rg_tiles_block *blk);
void rg_gemm_tiles_block_emu(const rg_tiles_block *blk);
// The AVX512 order on VDPBF16PS over the same packed tiles (rg_gemm_tiles_avx512_built = 0 and a
// stub without AVX512_BF16 in the compiler).
extern const int rg_gemm_tiles_avx512_built;
void rg_gemm_tiles_block_avx512(const rg_tiles_block *blk);

#endif
