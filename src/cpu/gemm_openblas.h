// gemm_openblas.h - gemm.c's OpenBLAS route (gemm_openblas.c), private to the two files:
// cblas_sgemm over a fixed grid of tiles of C, B (and A without a unit stride) copied or
// dequantized in slices of depth. Without RG_HAVE_OPENBLAS the route exists but is never
// chosen (rg_sgemm_have_openblas() is false).
#ifndef RG_CPU_GEMM_OPENBLAS_H
#define RG_CPU_GEMM_OPENBLAS_H

#include "cpu/gemm.h"
#include "tensor/quant/quant.h"

// The tiles of a batch and the scratch floats one thread needs.
typedef struct rg_gemm_ob_sizes {
    int64_t tm, tn, n_tiles, kb;
    int64_t floats;  // per thread: B slice + dequant row + A slice
} rg_gemm_ob_sizes;

// What every tile of a batch shares: B's dequantizer and block, and the sizes.
typedef struct rg_gemm_ob_ctx {
    rg_dequant_fn dequant;
    int64_t bs;
    size_t type_size;
    rg_gemm_ob_sizes sz;
} rg_gemm_ob_ctx;

rg_gemm_ob_sizes rg_gemm_ob_plan(const rg_gemm_batch *bt);
// One tile of one problem: C[i0:i0+m, j0:j0+n], ws: the thread's scratch (sz.floats).
void rg_gemm_ob_tile(const rg_gemm_ob_ctx *oc, const rg_gemm_batch *bt, const rg_gemm_problem *p, int64_t i0, int64_t m,
                     int64_t j0, int64_t n, float *ws);
// OpenBLAS's own threads off (our pool splits the work) and its name read, once.
void rg_gemm_ob_init(void);
// "openblas (Zen)", or "openblas (not built)".
const char *rg_gemm_ob_name(void);

#endif
