// ops_train.cu - CUDA cells of the op table for the training ops (cuda_common.cuh):
// the weight gradient (the fused cross-entropy is in ops_linear_ce.cu). Kernels
// first, then launchers, then the registration. Every launcher only queues work
// on the context's stream and reads nothing back.
//
//   OUT_PROD        (a quantized a, e.g. the weight in MUL_MAT's dX = out_prod(W, dY^T):
//                   ops_quant_mm.cu, the in-place decoder or the sliced decode + cuBLAS)
//                   a [M, K, b2, b3] f32/f16/bf16, b [N, K, c2, c3] f32 -> [M, N, c2, c3] f32,
//                   out[i, j] = sum_k a[i, k] b[j, k]; output slice (i2, i3) reads a's slice
//                   (i2 / (c2 / b2), i3 / (c3 / b3)), as on the CPU. cuBLAS SGEMM in pedantic
//                   F32 (no TF32) on the operands' own strides: f32 a and b with packed rows
//                   along ne0 or along ne1 (plain or transposed views, e.g. the dY^T of
//                   MUL_MAT's backward); a half a (packed rows, any row and slice strides) is
//                   widened to F32 on the device first (exact), in row slices of at most
//                   RETRO_CUDA_DEQUANT_BUDGET_MB.
//                   The only difference from the CPU is the order of the F32 sums.
//                   Under RETRO_CUDA_HALF_GEMM=tensor (the default; cuda.h) a half a, or two
//                   f32 operands whose ip[0] names F16/BF16 (the weight gradient of a half
//                   weight, from MUL_MAT's backward rule), take the tensor path instead: b
//                   (and an f32 a) rounded to that type, F32 accumulation (gemm_half.cu).
//
// The optimizer's cells (ADAMW, SGD, SUMSQ, CLIP_COEF) are in ops_optim.cu.
// FMA rule (nvcc builds with --fmad=false, scripts/check-fma.sh): no fused multiply-add; the
// products are cuBLAS's (pedantic F32 or the tensor path), every other operation rounded apart.
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda/ops_quant_mm.cuh"

#include "tensor/half_bits.h"

// ===========================================================================
// Kernels
// ===========================================================================

// widen_half: dst[r + c * rows] = (float)src[r * s0 + c * s1] for r < rows, c < cols
// (strides in elements): a strided f16 (bf16 = 0) or bf16 matrix made a packed
// column-major F32 one (leading dimension rows), exactly.
__global__ static void widen_half_kernel(const uint16_t *src, int64_t s0, int64_t s1, int64_t rows, int64_t cols,
                                         int bf16, float *dst) {
    const int64_t count = rows * cols;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i / rows, r = i - c * rows;
        const uint16_t h = src[r * s0 + c * s1];
        dst[i] = __uint_as_float(bf16 ? rg_f32_bits_from_bf16(h) : rg_f32_bits_from_f16(h));
    }
}

// ===========================================================================
// Launchers
// ===========================================================================

static const int THREADS = 256;  // elementwise kernels
static const int64_t MAX_GRID = 65535 * 16, MAX_BATCH = 65535;

// Blocks for n items at `threads` per block; the kernels loop past the grid.
static unsigned grid_for(int64_t n, int threads) {
    const int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > MAX_GRID ? MAX_GRID : b);
}

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

static size_t type_size(uint32_t type) {
    return type == RG_TYPE_F32 ? 4 : (type == RG_TYPE_F16 || type == RG_TYPE_BF16) ? 2 : 0;
}

// Strides of t in elements of esz bytes; false when one is not a whole number of elements.
static bool strides_of(const rg_tensor *t, size_t esz, int64_t s[4]) {
    for (int i = 0; i < RG_MAX_DIMS; i++) {
        if (t->nb[i] % esz) return false;
        s[i] = (int64_t)(t->nb[i] / esz);
    }
    return true;
}

static bool is_plain_f32(const rg_node *n) {
    return n && n->t.type == RG_TYPE_F32 && rg_tensor_is_contiguous(&n->t) && rg_tensor_nelements(&n->t) > 0;
}

static rg_status widen(rg_cuda_ctx *ctx, const rg_node *n, const uint16_t *src, int64_t s0, int64_t s1, int64_t rows,
                       int64_t cols, uint32_t type, float *dst, rg_error *err) {
    RG_LAUNCH(widen_half_kernel, grid_for(rows * cols, THREADS), THREADS, 0, ctx->stream, src, s0, s1, rows, cols,
              type == RG_TYPE_BF16 ? 1 : 0, dst);
    CU_LAUNCHED();
    return RG_OK;
}

// ---------------------------------------------------------------------------
// OUT_PROD
//
// Column-major, an output slice is the M x N matrix C = A op(B) with ldc = M, where A is a's
// slice (M x K) and B = b's slice (N x K) enters transposed. A 2-D view with element (r, c) at
// r s0 + c s1 is a column-major matrix either as stored (s0 = 1, leading dimension s1) or
// transposed (s1 = 1, leading dimension s0).

typedef struct mat_view {
    bool trans;  // stored transposed: element (r, c) at c + r ld
    int64_t ld;
} mat_view;

static bool mat_of(int64_t ne0, int64_t ne1, int64_t s0, int64_t s1, mat_view *mv) {
    if (ne0 == 1 || s0 == 1) {
        mv->trans = false, mv->ld = ne1 > 1 ? s1 : ne0;
        return mv->ld >= ne0 && fits_int(mv->ld);
    }
    if (ne1 == 1 || s1 == 1) {
        mv->trans = true, mv->ld = ne0 > 1 ? s0 : ne1;
        return mv->ld >= ne1 && fits_int(mv->ld);
    }
    return false;
}

typedef struct op_geom {
    int64_t M, K, N, b2, b3, c2, c3, r2, r3;
    int64_t as[4], bs[4];  // strides in elements
    mat_view a, b;         // a (f32 only) and b as cuBLAS matrices
} op_geom;

static bool out_prod_geom(const rg_node *n, op_geom *g) {
    const rg_node *a = n->src[0], *b = n->src[1];
    if (!a || !b || !is_plain_f32(n) || b->t.type != RG_TYPE_F32) return false;
    const size_t esz = type_size(a->t.type);
    if (!esz || !strides_of(&a->t, esz, g->as) || !strides_of(&b->t, 4, g->bs)) return false;
    g->M = a->t.ne[0], g->K = a->t.ne[1], g->b2 = a->t.ne[2], g->b3 = a->t.ne[3];
    g->N = b->t.ne[0], g->c2 = b->t.ne[2], g->c3 = b->t.ne[3];
    if (g->K < 1 || b->t.ne[1] != g->K || g->b2 < 1 || g->b3 < 1 || g->c2 % g->b2 || g->c3 % g->b3) return false;
    if (n->t.ne[0] != g->M || n->t.ne[1] != g->N || n->t.ne[2] != g->c2 || n->t.ne[3] != g->c3) return false;
    g->r2 = g->c2 / g->b2, g->r3 = g->c3 / g->b3;
    if (!fits_int(g->M) || !fits_int(g->N) || !fits_int(g->K) || !fits_int(g->M * g->K)) return false;
    if (!mat_of(g->N, g->K, g->bs[0], g->bs[1], &g->b)) return false;
    if (a->t.type != RG_TYPE_F32) return g->M == 1 || g->as[0] == 1;  // packed rows, as the CPU takes a half a
    return mat_of(g->M, g->K, g->as[0], g->as[1], &g->a);
}

static bool sup_out_prod(const rg_node *n) {
    op_geom g;
    return out_prod_geom(n, &g) || rg_cu_qop_supported(n);
}
static size_t work_out_prod(const rg_node *n, int n_threads) {
    (void)n_threads;
    return rg_cu_qop_work(n);  // 0 unless a is quantized (the float paths use the context's pool)
}

// batch products C_i = A_i op(B) for i < count, A_i = A + i sa, B_i = B + i sb, C_i = C + i sc, m rows of C.
static rg_status gemm_batch(rg_cuda_ctx *ctx, const rg_node *n, const op_geom *g, const float *A, cublasOperation_t ta,
                            int64_t lda, int64_t sa, int64_t m, const float *B, int64_t sb, float *C, int64_t sc,
                            int64_t count, rg_error *err) {
    const float one = 1.0f, zero = 0.0f;
    const cublasOperation_t tb = g->b.trans ? CUBLAS_OP_N : CUBLAS_OP_T;
    for (int64_t i = 0; i < count; i += MAX_BATCH) {
        const int64_t nb = count - i < MAX_BATCH ? count - i : MAX_BATCH;
        CUBLAS_TRY(cublasSgemmStridedBatched(ctx->cublas, ta, tb, (int)m, (int)g->N, (int)g->K, &one, A + i * sa,
                                             (int)lda, sa, B + i * sb, (int)g->b.ld, sb, &zero, C + i * sc,
                                             (int)g->M, sc, (int)nb));
    }
    return RG_OK;
}

// The half type an OUT_PROD's product takes on the tensor path: a's own F16/BF16 type, or
// for two F32 operands the type MUL_MAT's backward rule put in ip[0] (the weight gradient
// of a half weight); RG_TYPE_F32 for none.
static uint32_t out_prod_half_type(const rg_cuda_ctx *ctx, const rg_node *n) {
    if (ctx->half_gemm != RG_CUDA_HALF_GEMM_TENSOR) return RG_TYPE_F32;
    const uint32_t at = n->src[0]->t.type;
    if (at == RG_TYPE_F16 || at == RG_TYPE_BF16) return at;
    const int64_t hint = n->ip[0];
    return hint == RG_TYPE_F16 || hint == RG_TYPE_BF16 ? (uint32_t)hint : (uint32_t)RG_TYPE_F32;
}

// The tensor path: b [N, K, c2, c3] rounded into a packed copy (column-major N x K per
// slice), a used as stored when it is half, else rounded the same way; then per slice
// C = A Bh^T with F32 accumulation (gemm_half.cu).
static rg_status out_prod_tensor(rg_cuda_ctx *ctx, const rg_node *n, const op_geom *g, uint32_t ht, rg_error *err) {
    const rg_tensor *a = &n->src[0]->t, *b = &n->src[1]->t;
    const int64_t M = g->M, N = g->N, K = g->K, MN = M * N, NK = N * K;
    void *bbuf;
    RG_TRY(rg_cuda_pool_get(ctx, RG_CU_BUF_TMP, (size_t)(NK * g->c2 * g->c3) * 2, &bbuf, n, err));
    uint16_t *Bh = (uint16_t *)bbuf;
    const int64_t bne[4] = {N, K, g->c2, g->c3};
    RG_TRY(rg_cu_narrow(ctx, n, (const float *)b->data, bne, g->bs, ht, Bh, err));
    const uint16_t *A = (const uint16_t *)a->data;
    int64_t lda = g->as[1] > 1 ? g->as[1] : 1, sa2 = g->as[2], sa3 = g->as[3];  // as stored: a[i, k] at i + k as[1]
    if (a->type == RG_TYPE_F32) {
        void *abuf;
        RG_TRY(rg_cuda_pool_get(ctx, RG_CU_BUF_TMP2, (size_t)(M * K * g->b2 * g->b3) * 2, &abuf, n, err));
        const int64_t ane[4] = {M, K, g->b2, g->b3};
        RG_TRY(rg_cu_narrow(ctx, n, (const float *)a->data, ane, g->as, ht, (uint16_t *)abuf, err));
        A = (const uint16_t *)abuf, lda = M, sa2 = M * K, sa3 = M * K * g->b2;
    } else if (lda < M) {
        return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda out_prod '%s': a's rows overlap (stride %lld < %lld)", n->t.name,
                       (long long)lda, (long long)M);
    }
    float *Y = (float *)n->t.data;
    for (int64_t i3 = 0; i3 < g->c3; i3++)
        for (int64_t i02 = 0; i02 < g->b2; i02++) {
            const int64_t first = i3 * g->c2 + i02 * g->r2;  // the first b slice reading a slice (i3 / r3, i02)
            RG_TRY(rg_cu_gemm_half(ctx, n, CUBLAS_OP_N, CUBLAS_OP_T, M, N, K, A + (i3 / g->r3) * sa3 + i02 * sa2, lda,
                                   0, Bh + first * NK, N, NK, Y + first * MN, M, MN, g->r2, ht, err));
        }
    return RG_OK;
}

static rg_status run_out_prod(rg_cuda_ctx *ctx, const rg_node *n, const rg_exec_ctx *c, rg_error *err) {
    if (rg_type_get(n->src[0]->t.type)->quantized) return rg_cu_qop_run(ctx, c, n, err);  // ops_quant_mm.cu
    op_geom g;
    if (!out_prod_geom(n, &g))
        return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda out_prod '%s': shapes or strides the cell does not take", n->t.name);
    const uint32_t ht = out_prod_half_type(ctx, n);
    if (ht != RG_TYPE_F32) return out_prod_tensor(ctx, n, &g, ht, err);
    const rg_tensor *a = &n->src[0]->t;
    const float *B = (const float *)n->src[1]->t.data;
    float *Y = (float *)n->t.data;
    const int64_t MN = g.M * g.N;
    if (a->type == RG_TYPE_F32) {
        const float *A = (const float *)a->data;
        const cublasOperation_t ta = g.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
        for (int64_t i3 = 0; i3 < g.c3; i3++) {
            const float *A3 = A + (i3 / g.r3) * g.as[3];
            const float *B3 = B + i3 * g.bs[3];
            float *Y3 = Y + i3 * g.c2 * MN;
            if (g.r2 == 1) {  // a slice per b slice: one batch over dim 2
                RG_TRY(gemm_batch(ctx, n, &g, A3, ta, g.a.ld, g.as[2], g.M, B3, g.bs[2], Y3, MN, g.c2, err));
                continue;
            }
            for (int64_t i02 = 0; i02 < g.b2; i02++)  // one a slice for r2 b slices: a stride of 0
                RG_TRY(gemm_batch(ctx, n, &g, A3 + i02 * g.as[2], ta, g.a.ld, 0, g.M, B3 + i02 * g.r2 * g.bs[2],
                                  g.bs[2], Y3 + i02 * g.r2 * MN, MN, g.r2, err));
        }
        return RG_OK;
    }
    // A half a: rows [m0, m0 + mc) of one slice widened to a packed F32 mc x K matrix, then
    // used for every b slice that reads that slice.
    const uint16_t *A = (const uint16_t *)a->data;
    int64_t mc = g.M;
    if (ctx->dequant_budget) {
        mc = (int64_t)(ctx->dequant_budget / ((size_t)g.K * 4));
        mc = mc < 1 ? 1 : mc > g.M ? g.M : mc;
    }
    void *dt;
    RG_TRY(rg_cuda_pool_get(ctx, RG_CU_BUF_TMP, (size_t)(mc * g.K) * 4, &dt, n, err));
    float *Af = (float *)dt;
    for (int64_t i03 = 0; i03 < g.b3; i03++)
        for (int64_t i02 = 0; i02 < g.b2; i02++)
            for (int64_t m0 = 0; m0 < g.M; m0 += mc) {
                const int64_t rows = g.M - m0 < mc ? g.M - m0 : mc;
                RG_TRY(widen(ctx, n, A + i03 * g.as[3] + i02 * g.as[2] + m0 * g.as[0], g.as[0], g.as[1], rows, g.K,
                             a->type, Af, err));
                for (int64_t i3 = i03 * g.r3; i3 < (i03 + 1) * g.r3; i3++)
                    RG_TRY(gemm_batch(ctx, n, &g, Af, CUBLAS_OP_N, rows, 0, rows,
                                      B + i3 * g.bs[3] + i02 * g.r2 * g.bs[2], g.bs[2],
                                      Y + (i3 * g.c2 + i02 * g.r2) * MN + m0, MN, g.r2, err));
            }
    return RG_OK;
}

// ---------------------------------------------------------------------------
// The cells (rg_cu_cell: the device set, then the run function)

// This file's cells of the CUDA column (op_table.cu lists them).
namespace RG_CU_CELLS {
extern const rg_op_col out_prod =
    rg_cu_col(rg_cu_cell<run_out_prod>, sup_out_prod, work_out_prod, rg_cu_qmm_types());
}  // namespace RG_CU_CELLS
