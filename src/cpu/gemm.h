// gemm.h - dense F32 matrix products on the thread pool: C = A·B or C += A·B.
//
// Two implementations sit behind one call:
//   RG_SGEMM_OURS      a cache-blocked kernel written here: panels of A and B
//                      are packed into the order the 6x16 AVX2/FMA micro-kernel
//                      reads them (gemm_avx2.c; a portable fallback with the same
//                      arithmetic elsewhere), threads own disjoint blocks of C.
//   RG_SGEMM_OPENBLAS  cblas_sgemm (single-threaded OpenBLAS, one call per tile
//                      of a fixed grid; only in builds with RG_HAVE_OPENBLAS).
//   RG_SGEMM_AUTO      picks per shape (rg_sgemm_pick): OpenBLAS for an F32 B
//                      and M <= 8 when the build has it, ours for everything
//                      else (measurements in gemm.c).
// The portable micro-kernel does the same fused multiply-adds (fmaf) in the
// same order as the AVX2 one, so both give the same bits.
//
// Shapes are in math order (row, column), not ggml order:
//   A(i, k) = A[i * a_rs + k * a_cs]     A: [M rows, K columns], strides in floats
//   B(k, j) = B[k * b_rs + j * b_cs]     B: [K rows, N columns], strides in floats
//   C(i, j) = C[i * ldc + j]             C: [M rows, N columns], rows contiguous, ldc >= N
// So a row-major A has (a_rs, a_cs) = (K, 1) and its transpose (1, M).
//
// Determinism: every C(i, j) is computed by one thread as a sequential sum over
// k in blocks of RG_GEMM_KC, and no element's arithmetic depends on which
// thread computes it or on how C was split. Ours gives the same bits for any
// thread count. OpenBLAS's bits depend on the shape of each call, so its calls
// cover a grid of tiles chosen from (M, N, K) alone and the bits do not depend
// on the thread count either. No split over k, no atomics.
#ifndef RG_CPU_GEMM_H
#define RG_CPU_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "retrograd.h"

typedef enum rg_sgemm_impl {
    RG_SGEMM_AUTO = 0,
    RG_SGEMM_OURS = 1,
    RG_SGEMM_OPENBLAS = 2,
    RG_SGEMM_OURS_PORTABLE = 3,  // ours with the portable micro-kernel even where AVX2 exists (tests)
    RG_SGEMM_BF16 = 4,  // products in BF16 on the CPU's matrix unit (gemm_tiles.h; training.compute_dtype=bf16)
} rg_sgemm_impl;

// The blocking of our kernel (see gemm.c for why these sizes).
#define RG_GEMM_MR 6      // rows of C per micro-kernel call
#define RG_GEMM_NR 16     // columns of C per micro-kernel call (two AVX2 vectors)
#define RG_GEMM_KC 256    // depth of one packed panel: the unit of the k order
#define RG_GEMM_TALL 12   // rows of C per call of the AVX-512 tall micro-kernel (two A panels)

// Whether this build links OpenBLAS.
bool rg_sgemm_have_openblas(void);
// "ours (avx2)", "ours (portable)", "openblas (Zen)" (OpenBLAS's core name), for the benchmarks.
const char *rg_sgemm_impl_name(rg_sgemm_impl impl);

// C = A·B (accumulate false) or C += A·B (accumulate true). M, N, K >= 0; with
// K == 0, C is zeroed or left as it is. work: rg_sgemm_work_size bytes for the
// same arguments, 64-byte aligned, or NULL to have the call allocate it.
// RG_SGEMM_OPENBLAS in a build without it fails with RG_ERR_UNSUPPORTED.
rg_status rg_sgemm(rg_threadpool *pool, rg_sgemm_impl impl, int64_t M, int64_t N, int64_t K, const float *A,
                   int64_t a_rs, int64_t a_cs, const float *B, int64_t b_rs, int64_t b_cs, float *C, int64_t ldc,
                   bool accumulate, void *work, size_t work_size, rg_error *err);
size_t rg_sgemm_work_size(rg_sgemm_impl impl, int64_t M, int64_t N, int64_t K, int n_threads);

// ---------------------------------------------------------------------------
// The general form the matmul ops use: a batch of products of one shape, with
// B either strided F32 or rows of any type with a dequantizer, dequantized
// panel by panel while packing (so a quantized weight is never expanded whole).

typedef struct rg_gemm_b {
    uint32_t type;         // RG_TYPE_F32: strided floats (rs, cs); any other type: rows (row_stride, rows_along_k)
    const void *data;
    int64_t rs, cs;        // F32: B(k, j) = ((const float *)data)[k * rs + j * cs]
    size_t row_stride;     // other types: bytes from one row to the next (each row is contiguous)
    bool rows_along_k;     // other types: true:  B(k, j) = element k of row j  (MUL_MAT's weight, rows of K)
                           //              false: B(k, j) = element j of row k  (OUT_PROD's a, rows of N)
} rg_gemm_b;

typedef struct rg_gemm_problem {
    const float *a;        // A(i, k) = a[i * a_rs + k * a_cs]
    int64_t a_rs, a_cs;
    rg_gemm_b b;
    float *c;              // C(i, j) = c[i * ldc + j]
    int64_t ldc;
} rg_gemm_problem;

// Every product of a batch has this shape and B type (pointers and strides may
// differ); get(ctx, p, &prob) fills product p for p < n_problems. Products
// write disjoint parts of C.
typedef struct rg_gemm_batch {
    int64_t M, N, K;
    uint32_t b_type;
    bool b_rows_along_k;   // for b_type != F32
    bool accumulate;
    int64_t n_problems;
    void (*get)(const void *ctx, int64_t p, rg_gemm_problem *prob);
    const void *ctx;
} rg_gemm_batch;

// Runs the batch. The results do not depend on the thread count. Fails with
// RG_ERR_UNSUPPORTED for a B type without a dequantizer, RG_ERR_ARG for a
// too small work buffer.
rg_status rg_gemm_run(rg_threadpool *pool, rg_sgemm_impl impl, const rg_gemm_batch *batch, void *work,
                      size_t work_size, rg_error *err);
// The scratch bytes rg_gemm_run needs for this batch shape (any strides) on n_threads.
size_t rg_gemm_work_size(rg_sgemm_impl impl, const rg_gemm_batch *batch, int n_threads);

// The implementation AUTO runs for a product of this shape when A has a unit
// stride and B is F32 with a unit stride or of another type (the rule and the
// measurements behind it are in gemm.c).
rg_sgemm_impl rg_sgemm_pick(int64_t M, int64_t N, int64_t K, uint32_t b_type);

// ---------------------------------------------------------------------------
// Internal: the AVX2 kernels in gemm_avx2.c, called by gemm.c after checking
// the CPU. Built without AVX2, rg_gemm_avx2_built is 0 and they are stubs.

extern const int rg_gemm_avx2_built;
// c[6 rows, 16 columns] (row r at c + r * ldc) = (add ? c : 0) + sum over k of
// a[k * 6 + r] * b[k * 16 + j], one fused multiply-add per k in increasing k.
void rg_gemm_ukernel_avx2(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, bool add);
// dst[k * 16 + j] = src[j * ld + k] for j < n (n <= 16), 0 for n <= j < 16; k < kc.
void rg_gemm_pack_bt_avx2(int64_t kc, const float *src, int64_t ld, int n, float *dst);
// dst[k * 6 + r] = src[r * ld + k] for r < n (n <= 6), 0 for n <= r < 6; k < kc.
void rg_gemm_pack_at_avx2(int64_t kc, const float *src, int64_t ld, int n, float *dst);
// rg_gemm_pack_bt_avx2 from F16 or BF16 rows (ld in elements), widened exactly to f32 on the way.
void rg_gemm_pack_bt_f16_avx2(int64_t kc, const uint16_t *src, int64_t ld, int n, float *dst);
void rg_gemm_pack_bt_bf16_avx2(int64_t kc, const uint16_t *src, int64_t ld, int n, float *dst);

// Internal: the AVX-512 tall micro-kernel (gemm_avx512.c), rg_gemm_avx512_built = 0 and a stub
// in builds without AVX-512. c[24 rows, 16 columns] (row r at c + r * ldc) = (add ? c : 0) + the
// products of four consecutive packed A panels (a, a + kc * 6, ...) and the B panel b, each
// element's sum in the same order as rg_gemm_ukernel_avx2's, so with the same bits.
extern const int rg_gemm_avx512_built;
void rg_gemm_ukernel_tall_avx512(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, bool add);
// c[12 rows, 32 columns] (+)= the two A panels at a against the B panels b0 (columns 0-15) and
// b1 (16-31): two B panels a step of k, so half the broadcasts per FMA. Same bits again.
void rg_gemm_ukernel_wide_avx512(int64_t kc, const float *a, const float *b0, const float *b1, float *c, int64_t ldc,
                                  bool add);

#endif
