// gemm_tiles.h - the products of an rg_gemm_batch (gemm.h) in BF16, on the CPU's matrix unit:
// what training.compute_dtype=bf16 runs (every MUL_MAT, OUT_PROD and LINEAR_CE product of the
// forward and the backward), as the CUDA tensor path runs RETRO_CUDA_HALF_GEMM=tensor.
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
// The portable reference of `path`'s arithmetic (AMX and EMULATED share one): single thread,
// no work buffer; the same bits as rg_gemm_tiles_run(path).
rg_status rg_gemm_tiles_ref(rg_tile_path path, const rg_gemm_batch *batch, rg_error *err);

#endif
