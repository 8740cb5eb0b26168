// ops_train.cu - CUDA cells of the op table for the training ops (cuda_common.cuh):
// the weight gradient and the fused cross-entropy. Kernels
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
//   LINEAR_CE       (a half w on the tensor path: h, and in the backward G, rounded to w's type
//                   and multiplied on the tensor cores, gemm_half.cu; otherwise as follows)
//                   w [d, V] f32/f16/bf16 (packed rows), h [d, T] f32, labels i32 [T] -> [T + 1]:
//                   ops_linear_ce.c's algorithm with its chunk (rg_linear_ce_chunk): per
//                   vocabulary chunk one SGEMM into the [T, chunk] scratch (a half w chunk
//                   widened first), then one block per token: the chunk's max (f32), the sum of
//                   expf(z - max) in double (a fixed tree), merged into the running (max, sum)
//                   in double in chunk order, and the target logit; then lse_t = max + log sum and
//                   the loss inv_n * sum_t (lse_t - z_t) in double (a fixed tree over t). No
//                   atomics: the bits depend only on the shapes. Differences from the CPU: the
//                   GEMM's summation order, expf (<= 2 ulp) for exp_poly.h's exp, CUDA's double
//                   exp/log (<= 1 ulp), the order of the double sums. A label outside [0, V) that
//                   is not ignored makes the loss NaN (the CPU names it; the device cannot
//                   return an error without a synchronization), which the exec's loss check reports.
//   LINEAR_CE_BACK  (dy [T + 1], h, the LINEAR_CE node, dw [d, V] f32 or NULL) -> dh [d, T]: per
//                   chunk the logits again, G = (float)(e c_t) - [v = label] dy0 inv_n with
//                   e = expf(-|z - lse_t|) and c_t = dy0 inv_n + dy[1 + t] in double (0 rows for
//                   ignored tokens), dh (+)= w_c G^T (SGEMM accumulating over chunks in order)
//                   and dw_c = h G (each chunk its own columns). Differences as LINEAR_CE's.
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

extern "C" {
#include "cpu/cpu_ops.h"  // rg_linear_ce_chunk: the CPU's chunk rule
}
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


// lce_inv_n: *inv_n = fp0 when fp0 > 0, else 1 / (the labels that are not ignored), 0 when none. One block.
__global__ static void lce_inv_n_kernel(const int32_t *labels, int64_t T, int32_t ignore, const rg_node_params *prm,
                                        double *inv_n) {
    const float fp0 = prm->fp[0];
    RG_SHARED(long long, sh_cnt, 32);
    long long cnt = 0;
    for (int64_t t = threadIdx.x; t < T; t += blockDim.x) cnt += labels[t] != ignore;
    cnt = rg_cu_block_reduce(cnt, 0LL, sh_cnt, rg_cu_add());
    if (threadIdx.x == 0) *inv_n = fp0 > 0.0f ? (double)fp0 : cnt > 0 ? __ddiv_rn(1.0, (double)cnt) : 0.0;
}

// lce_chunk_lse: one block per token t (label not ignored) of the chunk's logits
// z [T rows of ldz, nv entries] for vocabulary entries v0 ..: the chunk's max
// m_c and s_c = sum_v expf(z - m_c) in double, merged into the running (m, s)
// as ops_linear_ce.c merges them; zt[t] gets the target logit when the label
// falls in the chunk (NaN until then, so a label outside [0, V) shows in the loss).
__global__ static void lce_chunk_lse_kernel(const float *z, int64_t ldz, int64_t nv, int64_t v0, int64_t T,
                                            const int32_t *labels, int32_t ignore, int first, float *m, double *s,
                                            float *zt) {
    RG_SHARED(float, sh_max, 32);
    RG_SHARED(double, sh_sum, 32);
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
        const int32_t label = labels[t];
        if (label == ignore) continue;  // the same branch in every thread of the block
        const float *zr = z + t * ldz;  // [nv]
        float mc = -INFINITY;
        for (int64_t v = threadIdx.x; v < nv; v += blockDim.x)
            if (zr[v] > mc) mc = zr[v];
        mc = rg_cu_block_reduce(mc, -INFINITY, sh_max, rg_cu_max_f32());
        double sc = 0.0;
        for (int64_t v = threadIdx.x; v < nv; v += blockDim.x) sc = __dadd_rn(sc, (double)expf(__fsub_rn(zr[v], mc)));
        sc = rg_cu_block_reduce(sc, 0.0, sh_sum, rg_cu_add());
        if (threadIdx.x != 0) continue;
        if (first) {
            m[t] = mc, s[t] = sc, zt[t] = NAN;
        } else if (mc > m[t]) {
            s[t] = __dadd_rn(__dmul_rn(s[t], exp(__dsub_rn((double)m[t], (double)mc))), sc);
            m[t] = mc;
        } else if (mc == mc) {
            s[t] = __dadd_rn(s[t], __dmul_rn(sc, exp(__dsub_rn((double)mc, (double)m[t]))));
        } else {  // a NaN logit: the loss says so
            s[t] = NAN;
        }
        if (label >= v0 && label < v0 + nv) zt[t] = zr[label - v0];
    }
}

// lce_finish: out[1 + t] = lse_t = m + log s (0 for ignored t), out[0] = inv_n * sum_t (lse_t - zt[t])
// in double, each thread's tokens in increasing t, then the fixed tree. One block.
__global__ static void lce_finish_kernel(const float *m, const double *s, const float *zt, const int32_t *labels,
                                         int64_t T, int32_t ignore, const double *inv_n, float *out) {
    RG_SHARED(double, sh_sum, 32);
    double sum = 0.0;
    for (int64_t t = threadIdx.x; t < T; t += blockDim.x) {
        if (labels[t] == ignore) {
            out[1 + t] = 0.0f;
            continue;
        }
        const double lse = __dadd_rn((double)m[t], log(s[t]));
        out[1 + t] = (float)lse;
        sum = __dadd_rn(sum, __dsub_rn(lse, (double)zt[t]));
    }
    sum = rg_cu_block_reduce(sum, 0.0, sh_sum, rg_cu_add());
    if (threadIdx.x == 0) out[0] = (float)__dmul_rn(sum, *inv_n);
}

// lce_chunk_grad: one block per token; the chunk's logits z become their gradient in place:
// G = (float)(e * c_t), e = expf(-|z - lse_t|), c_t = dy[0] inv_n + dy[1 + t]; at the label
// (float)(e * c_t - dy[0] inv_n); 0 for an ignored token.
__global__ static void lce_chunk_grad_kernel(float *z, int64_t ldz, int64_t nv, int64_t v0, int64_t T,
                                             const int32_t *labels, int32_t ignore, const float *lse, const float *dy,
                                             const double *inv_n) {
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
        float *g = z + t * ldz;  // [nv]
        const int32_t label = labels[t];
        if (label == ignore) {
            for (int64_t v = threadIdx.x; v < nv; v += blockDim.x) g[v] = 0.0f;
            continue;
        }
        const double coef0 = __dmul_rn((double)dy[0], *inv_n);
        const double c = __dadd_rn(coef0, (double)dy[1 + t]);
        const float l = lse[t];
        for (int64_t v = threadIdx.x; v < nv; v += blockDim.x) {
            const double e = (double)expf(-fabsf(__fsub_rn(g[v], l)));
            g[v] = v0 + v == label ? (float)__dsub_rn(__dmul_rn(e, c), coef0) : (float)__dmul_rn(e, c);
        }
    }
}

// ===========================================================================
// Launchers
// ===========================================================================

static const int THREADS = 256, ROW_THREADS = 128;  // elementwise kernels; one block per row
static const int64_t MAX_GRID = 65535 * 16, MAX_BATCH = 65535;

// Blocks for n items at `threads` per block; the kernels loop past the grid.
static unsigned grid_for(int64_t n, int threads) {
    const int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > MAX_GRID ? MAX_GRID : b);
}
static unsigned rows_grid(int64_t rows) { return (unsigned)(rows < 1 ? 1 : rows < MAX_GRID ? rows : MAX_GRID); }

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
// LINEAR_CE and LINEAR_CE_BACK
//
// Column-major, the chunk's logits are Zc = Wc^T H: Wc = w's columns v0 .. v0 + nv (d x nv,
// leading dimension ldw), H = h (d x T, ldh), Zc nv x T with leading dimension chunk, i.e.
// the CPU's [T rows, chunk] scratch. The backward then makes dh (+)= Wc G and dw_c = H G^T.

typedef struct lce_geom {
    int64_t d, V, T, chunk;
    int64_t ldw, ldh;  // elements
    uint32_t wtype;
} lce_geom;

// w, h, labels as LINEAR_CE reads them (fwd: the LINEAR_CE node, h: its hidden states); the
// chunk of node n (fwd itself, or the LINEAR_CE_BACK node, as the CPU takes it).
static bool lce_geom_of(const rg_node *n, const rg_node *fwd, const rg_node *h, lce_geom *g) {
    const rg_node *w = fwd->src[0], *labels = fwd->src[2];
    if (!w || !h || !labels || h->t.type != RG_TYPE_F32 || labels->t.type != RG_TYPE_I32) return false;
    const size_t esz = type_size(w->t.type);
    if (!esz || w->t.nb[1] % esz || h->t.nb[1] % 4) return false;
    g->wtype = w->t.type;
    g->d = w->t.ne[0], g->V = w->t.ne[1], g->T = h->t.ne[1];
    if (g->d < 1 || g->V < 1 || g->T < 1 || w->t.ne[2] != 1 || w->t.ne[3] != 1) return false;
    if (h->t.ne[0] != g->d || h->t.ne[2] != 1 || h->t.ne[3] != 1) return false;
    if ((g->d > 1 && (w->t.nb[0] != esz || h->t.nb[0] != 4)) || rg_tensor_nelements(&labels->t) != g->T ||
        (g->T > 1 && labels->t.nb[0] != 4))
        return false;
    g->ldw = g->V > 1 ? (int64_t)(w->t.nb[1] / esz) : g->d;
    g->ldh = g->T > 1 ? (int64_t)(h->t.nb[1] / 4) : g->d;
    g->chunk = rg_linear_ce_chunk(n, g->V, g->T);
    return g->ldw >= g->d && g->ldh >= g->d && fits_int(g->d) && fits_int(g->V) && fits_int(g->T) &&
           fits_int(g->ldw) && fits_int(g->ldh) && fits_int(g->chunk) && g->chunk <= INT64_MAX / g->T;
}

static bool sup_linear_ce(const rg_node *n) {
    lce_geom g;
    return is_plain_f32(n) && lce_geom_of(n, n, n->src[1], &g) && rg_tensor_nelements(&n->t) == g.T + 1;
}

static bool sup_linear_ce_back(const rg_node *n) {
    const rg_node *dy = n->src[0], *h = n->src[1], *fwd = n->src[2], *dw = n->src[3];
    lce_geom g;
    if (!fwd || fwd->op != RG_OP_LINEAR_CE || !is_plain_f32(fwd) || !is_plain_f32(dy) || !is_plain_f32(n) ||
        !lce_geom_of(n, fwd, h, &g))
        return false;
    if (rg_tensor_nelements(&dy->t) != g.T + 1 || rg_tensor_nelements(&fwd->t) != g.T + 1) return false;
    if (n->t.ne[0] != g.d || n->t.ne[1] != g.T) return false;
    return !dw || (is_plain_f32(dw) && dw->t.ne[0] == g.d && dw->t.ne[1] == g.V && rg_tensor_nelements(&dw->t) == g.d * g.V);
}

// The device scratch: z [T, chunk] | for a half w: its chunk widened [d, chunk] (RETRO_CUDA_HALF_GEMM=f32),
// and h [d, T] and the chunk's G [T, chunk] rounded to w's type (the tensor path; both kept, so
// the plan does not depend on the mode) | (forward) m [T] f32, s [T] f64, zt [T] f32 | inv_n f64.
typedef struct lce_layout {
    float *z, *wf, *m, *zt;
    uint16_t *hh, *gh;
    double *s, *inv_n;
    size_t total;
} lce_layout;

static size_t align256(size_t n) { return (n + 255) / 256 * 256; }

static lce_layout lce_layout_of(void *base, const lce_geom *g, bool back) {
    lce_layout L;
    memset(&L, 0, sizeof L);
    char *b = (char *)base;
    size_t off = 0;
#define LCE_PLACE(field, T_, count)                                   \
    L.field = b ? (T_ *)(b + off) : NULL;                             \
    off += align256((size_t)(count) * sizeof(T_))
    LCE_PLACE(z, float, g->T * g->chunk);
    if (g->wtype != RG_TYPE_F32) {
        LCE_PLACE(wf, float, g->d * g->chunk);
        LCE_PLACE(hh, uint16_t, g->d * g->T);
        LCE_PLACE(gh, uint16_t, g->T * g->chunk);
    }
    if (!back) {
        LCE_PLACE(m, float, g->T);
        LCE_PLACE(s, double, g->T);
        LCE_PLACE(zt, float, g->T);
    }
    LCE_PLACE(inv_n, double, 1);
#undef LCE_PLACE
    L.total = off;
    return L;
}

static size_t work_linear_ce(const rg_node *n, int n_threads) {
    (void)n_threads;
    lce_geom g;
    return lce_geom_of(n, n, n->src[1], &g) ? lce_layout_of(NULL, &g, false).total : 0;
}

static size_t work_linear_ce_back(const rg_node *n, int n_threads) {
    (void)n_threads;
    lce_geom g;
    return n->src[2] && lce_geom_of(n, n->src[2], n->src[1], &g) ? lce_layout_of(NULL, &g, true).total : 0;
}

// The scratch laid out, or an error when the executor gave less than the cell's work size.
static rg_status lce_scratch(const rg_exec_ctx *c, const rg_node *n, const lce_geom *g, bool back, lce_layout *L,
                             rg_error *err) {
    *L = lce_layout_of(c->scratch, g, back);
    if (!c->scratch || c->scratch_size < L->total)
        return rg_fail(err, RG_ERR_ARG, "cuda %s '%s': device scratch of %zu bytes is below the %zu needed",
                       rg_op_name(n->op), n->t.name, c->scratch_size, L->total);
    return RG_OK;
}

// Wc for the chunk at v0 (nv columns): w's own bytes, or its columns widened into L->wf. *ld: its leading dimension.
static rg_status lce_weight_chunk(rg_cuda_ctx *ctx, const rg_node *n, const rg_tensor *w, const lce_geom *g,
                                  const lce_layout *L, int64_t v0, int64_t nv, const float **Wc, int64_t *ld,
                                  rg_error *err) {
    if (g->wtype == RG_TYPE_F32) {
        *Wc = (const float *)w->data + v0 * g->ldw, *ld = g->ldw;
        return RG_OK;
    }
    *Wc = L->wf, *ld = g->d;
    return widen(ctx, n, (const uint16_t *)w->data + v0 * g->ldw, 1, g->ldw, g->d, nv, g->wtype, L->wf, err);
}

// Whether a half head takes the tensor path (cuda.h): h and G rounded to its type, GemmEx.
static bool lce_tensor(const rg_cuda_ctx *ctx, const lce_geom *g) {
    return g->wtype != RG_TYPE_F32 && ctx->half_gemm == RG_CUDA_HALF_GEMM_TENSOR;
}

// The tensor path: h [d, T] (ldh) rounded to w's type into L->hh (packed, leading dimension d).
static rg_status lce_round_h(rg_cuda_ctx *ctx, const rg_node *n, const float *H, const lce_geom *g,
                             const lce_layout *L, rg_error *err) {
    const int64_t ne[4] = {g->d, g->T, 1, 1}, s[4] = {1, g->ldh, 0, 0};
    return rg_cu_narrow(ctx, n, H, ne, s, g->wtype, L->hh, err);
}

// The chunk's logits into L->z.
static rg_status lce_logits(rg_cuda_ctx *ctx, const rg_node *n, const rg_tensor *w, const float *H, const lce_geom *g,
                            const lce_layout *L, int64_t v0, int64_t nv, const float **Wc, int64_t *ldw,
                            rg_error *err) {
    if (lce_tensor(ctx, g))  // Zc = Wc^T Hh on the half columns as stored
        return rg_cu_gemm_half(ctx, n, CUBLAS_OP_T, CUBLAS_OP_N, nv, g->T, g->d, (const uint16_t *)w->data + v0 * g->ldw,
                               g->ldw, 0, L->hh, g->d, 0, L->z, g->chunk, 0, 1, g->wtype, err);
    RG_TRY(lce_weight_chunk(ctx, n, w, g, L, v0, nv, Wc, ldw, err));
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_TRY(cublasSgemm(ctx->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nv, (int)g->T, (int)g->d, &one, *Wc, (int)*ldw,
                           H, (int)g->ldh, &zero, L->z, (int)g->chunk));
    return RG_OK;
}

static rg_status run_linear_ce(rg_cuda_ctx *ctx, const rg_node *n, const rg_exec_ctx *c, rg_error *err) {
    lce_geom g;
    if (!lce_geom_of(n, n, n->src[1], &g))
        return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda linear_ce '%s': shapes or strides the cell does not take", n->t.name);
    lce_layout L;
    RG_TRY(lce_scratch(c, n, &g, false, &L, err));
    const rg_tensor *w = &n->src[0]->t;
    const float *H = (const float *)n->src[1]->t.data;
    const int32_t *labels = (const int32_t *)n->src[2]->t.data;
    const int32_t ignore = (int32_t)n->ip[0];
    const rg_node_params *prm;
    RG_TRY(rg_cu_params(c, n, &prm, err));
    RG_LAUNCH(lce_inv_n_kernel, 1, THREADS, 0, ctx->stream, labels, g.T, ignore, prm, L.inv_n);
    CU_LAUNCHED();
    if (lce_tensor(ctx, &g)) RG_TRY(lce_round_h(ctx, n, H, &g, &L, err));
    for (int64_t v0 = 0; v0 < g.V; v0 += g.chunk) {
        const int64_t nv = g.V - v0 < g.chunk ? g.V - v0 : g.chunk;
        const float *Wc;
        int64_t ldw;
        RG_TRY(lce_logits(ctx, n, w, H, &g, &L, v0, nv, &Wc, &ldw, err));
        RG_LAUNCH(lce_chunk_lse_kernel, rows_grid(g.T), ROW_THREADS, 0, ctx->stream, (const float *)L.z, g.chunk, nv,
                  v0, g.T, labels, ignore, v0 == 0 ? 1 : 0, L.m, L.s, L.zt);
        CU_LAUNCHED();
    }
    RG_LAUNCH(lce_finish_kernel, 1, THREADS, 0, ctx->stream, (const float *)L.m, (const double *)L.s,
              (const float *)L.zt, labels, g.T, ignore, (const double *)L.inv_n, (float *)n->t.data);
    CU_LAUNCHED();
    return RG_OK;
}

static rg_status run_linear_ce_back(rg_cuda_ctx *ctx, const rg_node *n, const rg_exec_ctx *c, rg_error *err) {
    const rg_node *fwd = n->src[2];
    lce_geom g;
    if (!fwd || !lce_geom_of(n, fwd, n->src[1], &g))
        return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda linear_ce_back '%s': shapes or strides the cell does not take",
                       n->t.name);
    lce_layout L;
    RG_TRY(lce_scratch(c, n, &g, true, &L, err));
    const rg_tensor *w = &fwd->src[0]->t;
    const float *H = (const float *)n->src[1]->t.data, *dy = (const float *)n->src[0]->t.data;
    const float *lse = (const float *)fwd->t.data + 1;
    const int32_t *labels = (const int32_t *)fwd->src[2]->t.data;
    const int32_t ignore = (int32_t)n->ip[0];
    float *dh = (float *)n->t.data, *dw = n->src[3] ? (float *)n->src[3]->t.data : NULL;
    const rg_node_params *prm;
    RG_TRY(rg_cu_params(c, n, &prm, err));
    RG_LAUNCH(lce_inv_n_kernel, 1, THREADS, 0, ctx->stream, labels, g.T, ignore, prm, L.inv_n);
    CU_LAUNCHED();
    const float one = 1.0f, zero = 0.0f;
    const bool tensor = lce_tensor(ctx, &g);
    if (tensor) RG_TRY(lce_round_h(ctx, n, H, &g, &L, err));
    for (int64_t v0 = 0; v0 < g.V; v0 += g.chunk) {
        const int64_t nv = g.V - v0 < g.chunk ? g.V - v0 : g.chunk;
        const float *Wc;
        int64_t ldw;
        RG_TRY(lce_logits(ctx, n, w, H, &g, &L, v0, nv, &Wc, &ldw, err));
        RG_LAUNCH(lce_chunk_grad_kernel, rows_grid(g.T), ROW_THREADS, 0, ctx->stream, L.z, g.chunk, nv, v0, g.T,
                  labels, ignore, lse, dy, (const double *)L.inv_n);
        CU_LAUNCHED();
        if (tensor) {
            // G (nv x T, leading dimension chunk) rounded to w's type, packed with leading dimension nv; then
            // dh (+)= Wc Gh and dw_c = Hh Gh^T with F32 accumulation, as the F32 path below.
            const int64_t ne[4] = {nv, g.T, 1, 1}, s[4] = {1, g.chunk, 0, 0};
            RG_TRY(rg_cu_narrow(ctx, n, L.z, ne, s, g.wtype, L.gh, err));
            RG_TRY(rg_cu_gemm_half(ctx, n, CUBLAS_OP_N, CUBLAS_OP_N, g.d, g.T, nv,
                                   (const uint16_t *)w->data + v0 * g.ldw, g.ldw, 0, L.gh, nv, 0, dh, g.d, 0, 1,
                                   g.wtype, err, v0 > 0 ? 1.0f : 0.0f));
            if (dw)
                RG_TRY(rg_cu_gemm_half(ctx, n, CUBLAS_OP_N, CUBLAS_OP_T, g.d, nv, g.T, L.hh, g.d, 0, L.gh, nv, 0,
                                       dw + v0 * g.d, g.d, 0, 1, g.wtype, err));
            continue;
        }
        // dh (+)= Wc G: d x nv times nv x T
        CUBLAS_TRY(cublasSgemm(ctx->cublas, CUBLAS_OP_N, CUBLAS_OP_N, (int)g.d, (int)g.T, (int)nv, &one, Wc, (int)ldw,
                               L.z, (int)g.chunk, v0 > 0 ? &one : &zero, dh, (int)g.d));
        if (!dw) continue;
        // dw_c = H G^T: d x T times T x nv, the chunk's own columns of dw
        CUBLAS_TRY(cublasSgemm(ctx->cublas, CUBLAS_OP_N, CUBLAS_OP_T, (int)g.d, (int)nv, (int)g.T, &one, H,
                               (int)g.ldh, L.z, (int)g.chunk, &zero, dw + v0 * g.d, (int)g.d));
    }
    return RG_OK;
}

// ---------------------------------------------------------------------------
// The cells (rg_cu_cell: the device set, then the run function)

// This file's cells of the CUDA column (op_table.cu lists them).
namespace RG_CU_CELLS {
extern const rg_op_col out_prod =
    rg_cu_col(rg_cu_cell<run_out_prod>, sup_out_prod, work_out_prod, rg_cu_qmm_types());
// The loss scales change from run to run: read on the device.
extern const rg_op_col linear_ce =
    rg_cu_col(rg_cu_cell<run_linear_ce>, sup_linear_ce, work_linear_ce, "f32, f16, bf16", true);
extern const rg_op_col linear_ce_back =
    rg_cu_col(rg_cu_cell<run_linear_ce_back>, sup_linear_ce_back, work_linear_ce_back, "f32, f16, bf16", true);
}  // namespace RG_CU_CELLS
