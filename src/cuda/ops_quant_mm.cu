// ops_quant_mm.cu - MUL_MAT and OUT_PROD with a quantized weight on the device (every type
// dequant.cuh decodes), for the cells of ops.cu (MUL_MAT) and ops_train.cu (OUT_PROD). Two
// paths:
//
//   in place  a kernel decodes the weight's blocks as it multiplies (rg_cu_decode32: the CPU's
//             dequantized values bit for bit), F32 products and sums, no scratch and no F32
//             copy of the weight. Taken in both modes for products with few columns (N <=
//             RG_QMM_INPLACE_MAX_N: generation and decode) and for the shapes cuBLAS cannot
//             take (an OUT_PROD b with no unit stride, sizes over cuBLAS's int API).
//   sliced    wide products: the weight decoded (rg_cu_dequant_rows) in slices into the exec's
//             device scratch, never more than the dequantization budget at once
//             (RETRO_CUDA_DEQUANT_BUDGET_MB, cuda.h; 0 = the whole weight; at least one row
//             or one block column), then cuBLAS per slice: MUL_MAT slices whole weight rows,
//             OUT_PROD whole blocks of a's columns (its ne0), so a slice never splits the
//             reduction and every output is one full-length product whatever the budget.
//             RETRO_CUDA_HALF_GEMM=f32: the slice decoded to F32 and the pedantic SGEMM (the
//             seed's exact path). tensor (the default): the slice decoded to BF16 (the F32
//             value rounded to nearest even), the activations (MUL_MAT's x, OUT_PROD's b)
//             rounded to BF16 (rg_cu_narrow), F32 accumulation on the tensor cores
//             (rg_cu_gemm_half).
//
// Why N <= 8 in place: at a few columns the product is bound by reading the weight. The
// in-place kernel reads its quantized bytes once per 8 columns (0.5-1.1 bytes per element);
// the sliced path writes and reads the decoded slice as well (4 more bytes per element in
// BF16, 8 in F32), 5-10x the traffic at N = 1. Past a few dozen columns the F32 CUDA-core
// arithmetic of the in-place kernel (it decodes the weight again for every 8 columns) costs
// more than the slice's traffic, and the tensor cores win; 8 keeps single-token generation
// and short decode batches in place. (Reasoned, not measured: no GPU has run this yet.)
//
// Summation orders, fixed (the bits depend on the shapes only, never on the grid):
//   MUL_MAT in place   y[m, n] = sum_k w[k, m] x[k, n]: one warp per (row m, 8 columns); lane
//                      l sums the row's 32-element groups G = l, l + 32, l + 64, ... in
//                      increasing G, each group's 32 products in k order, then the lanes
//                      combine by the xor butterfly (offsets 16, 8, 4, 2, 1).
//   OUT_PROD in place  out[i, j] = sum_m a[i, m] b[j, m]: one thread per output element, the
//                      products added in increasing m.
//   sliced             cuBLAS's order, the same for every budget (the slices' products have
//                      the same length and operands).
// Precision against the exact product of the CPU's dequantized weights: the in-place paths
// and the f32 mode differ from the CPU's F32 product only in the summation order (each within
// gamma_K sum |w x|); the tensor mode's sliced path adds the two BF16 roundings, at most
// (2 u + u^2) |w x| per term with u = 2^-8.
//
// FMA rule (nvcc builds with --fmad=false, scripts/check-fma.sh): none; products and sums
// rounded apart (__fmul_rn, __fadd_rn), cuBLAS's own kernels aside.
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda/dequant.cuh"
#include "cuda/ops_quant_mm.cuh"

// ===========================================================================
// Kernels
// ===========================================================================

enum { QMM_WARPS = 4, QOP_THREADS = 256, QOP_COLS = 8 };

// MUL_MAT's geometry: strides of w in bytes, of x in elements; y is packed [M, N, c2, c3].
typedef struct qmm_geom {
    uint32_t type;
    int sub;  // 32-element groups per block
    int64_t K, M, N, c2, c3, r2, r3;
    int64_t wb1, wb2, wb3;
    int64_t xs1, xs2, xs3;
} qmm_geom;
RG_KERNEL_NO_POINTERS(qmm_geom)

// mul_mat_inplace: one warp per item (row m, a chunk of up to RG_QMM_INPLACE_MAX_N columns,
// x slice (i2, i3)); lane l decodes the row's groups l, l + 32, ... and multiplies each with
// the chunk's columns; then the butterfly. The item loop is the same for the warp's 32 lanes.
// One instance per type (dequant.cuh's RG_CU_QTYPES): the decoder inlined, no switch.
template <uint32_t TYPE>
__global__ static void qmm_inplace_kernel(const uint8_t *w, const float *x, float *y, qmm_geom g, rg_cu_qtables tab) {
    typedef rg_cu_qtype<TYPE> Q;
    const int lane = threadIdx.x & 31;
    const int64_t chunks = (g.N + RG_QMM_INPLACE_MAX_N - 1) / RG_QMM_INPLACE_MAX_N;
    const int64_t items = g.M * chunks * g.c2 * g.c3, groups = g.K / 32;
    for (int64_t it = (int64_t)blockIdx.x * QMM_WARPS + (threadIdx.x >> 5); it < items;
         it += (int64_t)gridDim.x * QMM_WARPS) {
        int64_t r = it;
        const int64_t m = r % g.M;
        r /= g.M;
        const int64_t n0 = (r % chunks) * RG_QMM_INPLACE_MAX_N;
        r /= chunks;
        const int64_t i2 = r % g.c2, i3 = r / g.c2;
        const int64_t nc = g.N - n0 < (int64_t)RG_QMM_INPLACE_MAX_N ? g.N - n0 : (int64_t)RG_QMM_INPLACE_MAX_N;
        const uint8_t *row = w + (i3 / g.r3) * g.wb3 + (i2 / g.r2) * g.wb2 + m * g.wb1;
        const float *xs = x + i3 * g.xs3 + i2 * g.xs2 + n0 * g.xs1;
        float acc[RG_QMM_INPLACE_MAX_N];
        for (int c = 0; c < RG_QMM_INPLACE_MAX_N; c++) acc[c] = 0.0f;
        for (int64_t G = lane; G < groups; G += 32) {
            float v[32];
            rg_cu_decode32_t<TYPE>(row + (G / Q::groups) * Q::bytes, (int)(G % Q::groups), tab, v);
            for (int c = 0; c < RG_QMM_INPLACE_MAX_N; c++) {  // constant trip count: acc stays in registers
                if (c < nc) {
                    const float *xc = xs + c * g.xs1 + G * 32;
                    float s = acc[c];
                    for (int t = 0; t < 32; t++) s = __fadd_rn(s, __fmul_rn(v[t], xc[t]));
                    acc[c] = s;
                }
            }
        }
        for (int c = 0; c < RG_QMM_INPLACE_MAX_N; c++) acc[c] = rg_cu_warp_reduce(acc[c], rg_cu_add());
        if (lane == 0)
            for (int64_t c = 0; c < nc; c++) y[((i3 * g.c2 + i2) * g.N + n0 + c) * g.M + m] = acc[c];
    }
}

// OUT_PROD's geometry: a's strides in bytes, b's in elements; out is packed [Ka, N, c2, c3].
typedef struct qop_geom {
    uint32_t type;
    int sub;  // 32-element groups per block
    int64_t Ka, M, N, c2, c3, r2, r3;
    int64_t ab1, ab2, ab3;
    int64_t bs0, bs1, bs2, bs3;
} qop_geom;
RG_KERNEL_NO_POINTERS(qop_geom)

typedef float qop_row[33];  // a decoded group of 32 values (+1: no bank conflicts)

// out_prod_inplace: one block per item (a 32-element group g of a's ne0, a chunk of up to
// QOP_COLS columns j, slice (i2, i3)). Per tile of 32 rows m: 32 threads decode group g of
// rows m into shared memory, the block stages b's tile, then thread (e, jj) adds the tile's
// products a[32 g + e, m] b[n0 + jj, m] in increasing m. One instance per type.
template <uint32_t TYPE>
__global__ static void qop_inplace_kernel(const uint8_t *a, const float *b, float *out, qop_geom g,
                                          rg_cu_qtables tab) {
    typedef rg_cu_qtype<TYPE> Q;
    RG_SHARED(qop_row, at, 32);
    RG_SHARED(float, bt, QOP_COLS * 32);
    const int tid = threadIdx.x, e = tid & 31, jj = tid >> 5;  // jj < QOP_COLS: 256 threads
    const int64_t groups = g.Ka / 32, chunks = (g.N + QOP_COLS - 1) / QOP_COLS;
    const int64_t items = groups * chunks * g.c2 * g.c3;
    for (int64_t it = blockIdx.x; it < items; it += gridDim.x) {
        int64_t r = it;
        const int64_t G = r % groups;
        r /= groups;
        const int64_t n0 = (r % chunks) * QOP_COLS;
        r /= chunks;
        const int64_t i2 = r % g.c2, i3 = r / g.c2;
        const uint8_t *as = a + (i3 / g.r3) * g.ab3 + (i2 / g.r2) * g.ab2 + (G / Q::groups) * Q::bytes;
        const float *bs = b + i3 * g.bs3 + i2 * g.bs2;
        float acc = 0.0f;
        for (int64_t m0 = 0; m0 < g.M; m0 += 32) {
            const int64_t mt = g.M - m0 < 32 ? g.M - m0 : 32;
            if (tid < mt) {
                float v[32];
                rg_cu_decode32_t<TYPE>(as + (m0 + tid) * g.ab1, (int)(G % Q::groups), tab, v);
                for (int t = 0; t < 32; t++) at[tid][t] = v[t];
            }
            for (int q = tid; q < QOP_COLS * 32; q += QOP_THREADS) {
                const int64_t j = n0 + q / 32, m = m0 + q % 32;
                bt[q] = j < g.N && m < g.M ? bs[j * g.bs0 + m * g.bs1] : 0.0f;
            }
            __syncthreads();
            for (int64_t mm = 0; mm < mt; mm++) acc = __fadd_rn(acc, __fmul_rn(at[mm][e], bt[jj * 32 + mm]));
            __syncthreads();
        }
        if (n0 + jj < g.N) out[((i3 * g.c2 + i2) * g.N + n0 + jj) * g.Ka + G * 32 + e] = acc;
    }
}

// ===========================================================================
// Launchers
// ===========================================================================

static const int64_t MAX_GRID = 65535 * 16, MAX_BATCH = 65535;

static unsigned grid_of(int64_t items, int64_t per_block) {
    const int64_t b = (items + per_block - 1) / per_block;
    return (unsigned)(b < 1 ? 1 : b > MAX_GRID ? MAX_GRID : b);
}
static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }
static size_t align256(size_t v) { return (v + 255) / 256 * 256; }

static bool decodable(uint32_t type) { return rg_type_get(type)->quantized && rg_cu_dequant_supported(type); }

// The budget the plan sizes the scratch with (the context reads the same variable when it is
// made; a bad value fails that, so the default here is never used for a run).
static size_t plan_budget(void) {
    size_t b = 0;
    return rg_cuda_dequant_budget_env(&b, NULL, 0) < 0 ? (size_t)64 << 20 : b;
}

// How many units (rows, or block columns) of `unit_bytes` a slice holds within `bytes`: at
// least one, at most `count`; bytes == 0 is no bound.
static int64_t slice_units(size_t bytes, size_t unit_bytes, int64_t count) {
    if (!bytes) return count;
    const int64_t u = (int64_t)(bytes / unit_bytes);
    return u < 1 ? 1 : u > count ? count : u;
}

static bool strides_in(const rg_tensor *t, size_t esz, int64_t s[4]) {
    for (int i = 0; i < RG_MAX_DIMS; i++) {
        if (t->nb[i] % esz) return false;
        s[i] = (int64_t)(t->nb[i] / esz);
    }
    return true;
}

static bool plain_out(const rg_node *n) {
    return n->t.type == RG_TYPE_F32 && rg_tensor_is_contiguous(&n->t) && rg_tensor_nelements(&n->t) > 0;
}

// A quantized weight's shape and strides: blocks packed along ne0 (a whole number of them,
// a multiple of 32 elements), every other stride a whole number of blocks.
static bool weight_ok(const rg_tensor *w) {
    const rg_type_traits *tt = rg_type_get(w->type);
    if (tt->block_size % 32 || w->ne[0] % tt->block_size) return false;
    if (w->ne[0] > tt->block_size && w->nb[0] != tt->type_size) return false;
    for (int i = 0; i < RG_MAX_DIMS; i++)
        if (w->ne[i] <= 0 || (i > 0 && w->nb[i] % tt->type_size)) return false;
    return true;
}

// ---------------------------------------------------------------------------
// MUL_MAT

static bool qmm_geom_of(const rg_node *n, qmm_geom *g) {
    const rg_node *w = n->src[0], *x = n->src[1];
    if (!w || !x || x->t.type != RG_TYPE_F32 || !decodable(w->t.type) || !plain_out(n) || !weight_ok(&w->t))
        return false;
    int64_t xs[4];
    if (!strides_in(&x->t, 4, xs) || (x->t.ne[0] > 1 && xs[0] != 1)) return false;  // packed x rows
    const rg_type_traits *tt = rg_type_get(w->t.type);
    g->type = w->t.type, g->sub = (int)(tt->block_size / 32);
    g->K = w->t.ne[0], g->M = w->t.ne[1], g->N = x->t.ne[1], g->c2 = x->t.ne[2], g->c3 = x->t.ne[3];
    if (x->t.ne[0] != g->K || n->t.ne[0] != g->M || n->t.ne[1] != g->N || n->t.ne[2] != g->c2 || n->t.ne[3] != g->c3)
        return false;
    if (g->c2 % w->t.ne[2] || g->c3 % w->t.ne[3]) return false;
    g->r2 = g->c2 / w->t.ne[2], g->r3 = g->c3 / w->t.ne[3];
    g->wb1 = (int64_t)w->t.nb[1], g->wb2 = (int64_t)w->t.nb[2], g->wb3 = (int64_t)w->t.nb[3];
    g->xs1 = xs[1], g->xs2 = xs[2], g->xs3 = xs[3];
    return true;
}

// The sliced path: wide enough, and within cuBLAS's int sizes (x's column stride a valid ldb).
static bool qmm_sliced(const qmm_geom *g) {
    const int64_t ldx = g->N > 1 ? g->xs1 : g->K;
    return g->N > RG_QMM_INPLACE_MAX_N && fits_int(g->K) && fits_int(g->M) && fits_int(g->N * g->r2) &&
           fits_int(ldx) && ldx >= g->K && fits_int(g->r2);
}

// The scratch of the sliced path: [slice: decoded rows, <= the budget, F32 bytes] [x in BF16].
typedef struct qmm_scratch {
    size_t slice_bytes, xh_bytes;
} qmm_scratch;

static qmm_scratch qmm_scratch_of(const qmm_geom *g, size_t budget) {
    qmm_scratch s = {0, 0};
    const size_t row = (size_t)g->K * 4;
    s.slice_bytes = align256((size_t)slice_units(budget, row, g->M) * row);
    s.xh_bytes = align256((size_t)(g->K * g->N * g->c2 * g->c3) * 2);
    return s;
}

bool rg_cu_qmm_supported(const rg_node *n) {
    qmm_geom g;
    return qmm_geom_of(n, &g);
}

size_t rg_cu_qmm_work(const rg_node *n) {
    qmm_geom g;
    if (!qmm_geom_of(n, &g) || !qmm_sliced(&g)) return 0;
    const qmm_scratch s = qmm_scratch_of(&g, plan_budget());
    return s.slice_bytes + s.xh_bytes;
}

static rg_status qmm_inplace(rg_cuda_ctx *ctx, const rg_node *n, const qmm_geom *g, rg_error *err) {
    rg_cu_qtables tab;
    RG_TRY(rg_cu_qtables_get(ctx, n, &tab, err));
    const int64_t chunks = (g->N + RG_QMM_INPLACE_MAX_N - 1) / RG_QMM_INPLACE_MAX_N;
    const unsigned grid = grid_of(g->M * chunks * g->c2 * g->c3, QMM_WARPS);
    const uint8_t *w = (const uint8_t *)n->src[0]->t.data;
    const float *x = (const float *)n->src[1]->t.data;
    float *y = (float *)n->t.data;
    switch (g->type) {
#define QMM_LAUNCH(T)                                                                               \
    case T:                                                                                         \
        RG_LAUNCH(qmm_inplace_kernel<T>, grid, QMM_WARPS * 32, 0, ctx->stream, w, x, y, *g, tab); \
        break;
        RG_CU_QTYPES(QMM_LAUNCH)
#undef QMM_LAUNCH
    default:
        return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda mul_mat '%s': no in-place decoder for %s", n->t.name,
                       rg_type_get(g->type)->name);
    }
    CU_LAUNCHED();
    return RG_OK;
}

// Rows [m0, m0 + mc) of every weight slice decoded into the scratch (F32 or BF16), then for
// each x slice reading that weight slice Y[m0 .. m0 + rows) = Wslice^T X (ldc = M).
static rg_status qmm_sliced_run(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, const qmm_geom *g,
                                rg_error *err) {
    const bool tensor = ctx->half_gemm == RG_CUDA_HALF_GEMM_TENSOR;
    const size_t esz = tensor ? 2 : 4;
    const qmm_scratch s = qmm_scratch_of(g, ctx->dequant_budget);
    void *scratch = NULL;
    RG_TRY(rg_cu_scratch(c, n, s.xh_bytes + (size_t)g->K * esz, &scratch, err));
    // The rows the budget allows, within what the executor gave (planned with the same budget).
    const size_t room = c->scratch_size - s.xh_bytes;
    const size_t bound = ctx->dequant_budget && ctx->dequant_budget < room ? ctx->dequant_budget : room;
    const int64_t mc = slice_units(bound, (size_t)g->K * esz, g->M);
    char *slice = (char *)scratch + s.xh_bytes;
    const uint8_t *W = (const uint8_t *)n->src[0]->t.data;
    const float *X = (const float *)n->src[1]->t.data;
    float *Y = (float *)n->t.data;
    const int64_t MN = g->M * g->N, ldx = g->N > 1 ? g->xs1 : g->K;
    uint16_t *Xh = (uint16_t *)scratch;  // [K, N, c2, c3] packed, BF16 (tensor mode)
    if (tensor) {
        const int64_t ne[4] = {g->K, g->N, g->c2, g->c3}, sx[4] = {1, g->xs1, g->xs2, g->xs3};
        RG_TRY(rg_cu_narrow(ctx, n, X, ne, sx, RG_TYPE_BF16, Xh, err));
    }
    const float one = 1.0f, zero = 0.0f;
    const int64_t b2 = g->c2 / g->r2, b3 = g->c3 / g->r3;
    for (int64_t i03 = 0; i03 < b3; i03++)
        for (int64_t i02 = 0; i02 < b2; i02++)
            for (int64_t m0 = 0; m0 < g->M; m0 += mc) {
                const int64_t rows = g->M - m0 < mc ? g->M - m0 : mc;
                RG_TRY(rg_cu_dequant_rows(ctx, n, g->type, W + i03 * g->wb3 + i02 * g->wb2 + m0 * g->wb1, g->wb1, rows,
                                          0, g->K, tensor ? RG_TYPE_BF16 : RG_TYPE_F32, slice, g->K, err));
                for (int64_t i3 = i03 * g->r3; i3 < (i03 + 1) * g->r3; i3++) {
                    const int64_t first = i3 * g->c2 + i02 * g->r2;  // the first x slice of this weight slice
                    float *Yf = Y + first * MN + m0;
                    if (tensor) {
                        // the r2 slices' packed columns follow each other: one product of N r2 columns
                        RG_TRY(rg_cu_gemm_half(ctx, n, CUBLAS_OP_T, CUBLAS_OP_N, rows, g->N * g->r2, g->K, slice,
                                               g->K, 0, Xh + first * g->K * g->N, g->K, 0, Yf, g->M, 0, 1,
                                               RG_TYPE_BF16, err));
                        continue;
                    }
                    const float *Xf = X + i3 * g->xs3 + i02 * g->r2 * g->xs2;
                    for (int64_t i = 0; i < g->r2; i += MAX_BATCH) {
                        const int64_t nb = g->r2 - i < MAX_BATCH ? g->r2 - i : MAX_BATCH;
                        CUBLAS_TRY(cublasSgemmStridedBatched(ctx->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows,
                                                             (int)g->N, (int)g->K, &one, (const float *)slice,
                                                             (int)g->K, 0, Xf + i * g->xs2, (int)ldx, g->xs2, &zero,
                                                             Yf + i * MN, (int)g->M, MN, (int)nb));
                    }
                }
            }
    return RG_OK;
}

rg_status rg_cu_qmm_run(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, rg_error *err) {
    qmm_geom g;
    if (!qmm_geom_of(n, &g))
        return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda mul_mat '%s': a %s weight of shapes or strides the cell does not take",
                       n->t.name, rg_type_get(n->src[0]->t.type)->name);
    return qmm_sliced(&g) ? qmm_sliced_run(ctx, c, n, &g, err) : qmm_inplace(ctx, n, &g, err);
}

// ---------------------------------------------------------------------------
// OUT_PROD

static bool qop_geom_of(const rg_node *n, qop_geom *g) {
    const rg_node *a = n->src[0], *b = n->src[1];
    if (!a || !b || b->t.type != RG_TYPE_F32 || !decodable(a->t.type) || !plain_out(n) || !weight_ok(&a->t))
        return false;
    int64_t bs[4];
    if (!strides_in(&b->t, 4, bs)) return false;
    const rg_type_traits *tt = rg_type_get(a->t.type);
    g->type = a->t.type, g->sub = (int)(tt->block_size / 32);
    g->Ka = a->t.ne[0], g->M = a->t.ne[1], g->N = b->t.ne[0], g->c2 = b->t.ne[2], g->c3 = b->t.ne[3];
    if (b->t.ne[1] != g->M || n->t.ne[0] != g->Ka || n->t.ne[1] != g->N || n->t.ne[2] != g->c2 || n->t.ne[3] != g->c3)
        return false;
    if (g->c2 % a->t.ne[2] || g->c3 % a->t.ne[3]) return false;
    g->r2 = g->c2 / a->t.ne[2], g->r3 = g->c3 / a->t.ne[3];
    g->ab1 = (int64_t)a->t.nb[1], g->ab2 = (int64_t)a->t.nb[2], g->ab3 = (int64_t)a->t.nb[3];
    g->bs0 = bs[0], g->bs1 = bs[1], g->bs2 = bs[2], g->bs3 = bs[3];
    return true;
}

// b as a cuBLAS matrix (N x M, op(B) = B^T in C = A op(B)): stored as is (element (j, m) at
// j + m ld) or transposed (at m + j ld, the backward's dY^T). False when neither holds.
static bool qop_b_matrix(const qop_geom *g, bool *trans, int64_t *ld) {
    if (g->N == 1 || g->bs0 == 1) {
        *trans = false, *ld = g->M > 1 ? g->bs1 : g->N;
        return *ld >= g->N && fits_int(*ld);
    }
    if (g->M == 1 || g->bs1 == 1) {
        *trans = true, *ld = g->N > 1 ? g->bs0 : g->M;
        return *ld >= g->M && fits_int(*ld);
    }
    return false;
}

static bool qop_sliced(const qop_geom *g) {
    bool trans;
    int64_t ld;
    return g->N > RG_QMM_INPLACE_MAX_N && qop_b_matrix(g, &trans, &ld) && fits_int(g->Ka) && fits_int(g->M) &&
           fits_int(g->N) && fits_int(g->r2);
}

// The scratch of the sliced path: [slice: a's columns for all M rows, <= the budget, F32
// bytes, at least one block column] [b in BF16, packed N x M per slice].
static qmm_scratch qop_scratch_of(const qop_geom *g, size_t budget) {
    qmm_scratch s = {0, 0};
    const int64_t bsz = g->sub * 32;
    const size_t col = (size_t)(bsz * g->M) * 4;  // one block column of every row, F32
    s.slice_bytes = align256((size_t)slice_units(budget, col, g->Ka / bsz) * col);
    s.xh_bytes = align256((size_t)(g->N * g->M * g->c2 * g->c3) * 2);
    return s;
}

bool rg_cu_qop_supported(const rg_node *n) {
    qop_geom g;
    return qop_geom_of(n, &g);
}

size_t rg_cu_qop_work(const rg_node *n) {
    qop_geom g;
    if (!qop_geom_of(n, &g) || !qop_sliced(&g)) return 0;
    const qmm_scratch s = qop_scratch_of(&g, plan_budget());
    return s.slice_bytes + s.xh_bytes;
}

static rg_status qop_inplace(rg_cuda_ctx *ctx, const rg_node *n, const qop_geom *g, rg_error *err) {
    rg_cu_qtables tab;
    RG_TRY(rg_cu_qtables_get(ctx, n, &tab, err));
    const int64_t items = g->Ka / 32 * ((g->N + QOP_COLS - 1) / QOP_COLS) * g->c2 * g->c3;
    const unsigned grid = grid_of(items, 1);
    const uint8_t *a = (const uint8_t *)n->src[0]->t.data;
    const float *b = (const float *)n->src[1]->t.data;
    float *y = (float *)n->t.data;
    switch (g->type) {
#define QOP_LAUNCH(T)                                                                          \
    case T:                                                                                    \
        RG_LAUNCH(qop_inplace_kernel<T>, grid, QOP_THREADS, 0, ctx->stream, a, b, y, *g, tab); \
        break;
        RG_CU_QTYPES(QOP_LAUNCH)
#undef QOP_LAUNCH
    default:
        return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda out_prod '%s': no in-place decoder for %s", n->t.name,
                       rg_type_get(g->type)->name);
    }
    CU_LAUNCHED();
    return RG_OK;
}

// Columns [k0, k0 + kc) of a's slice (whole blocks, every row m) decoded into the scratch as
// a column-major kc x M matrix D (D(i, m) = a[k0 + i, m], leading dimension kc), then for each
// b slice reading it out[k0 .. k0 + kc, :] = D op(B) (ldc = Ka).
static rg_status qop_sliced_run(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, const qop_geom *g,
                                rg_error *err) {
    const bool tensor = ctx->half_gemm == RG_CUDA_HALF_GEMM_TENSOR;
    const size_t esz = tensor ? 2 : 4;
    const int64_t bsz = g->sub * 32;
    const qmm_scratch s = qop_scratch_of(g, ctx->dequant_budget);
    void *scratch = NULL;
    RG_TRY(rg_cu_scratch(c, n, s.xh_bytes + (size_t)(bsz * g->M) * esz, &scratch, err));
    const size_t room = c->scratch_size - s.xh_bytes;
    const size_t bound = ctx->dequant_budget && ctx->dequant_budget < room ? ctx->dequant_budget : room;
    const int64_t kc = slice_units(bound, (size_t)(bsz * g->M) * esz, g->Ka / bsz) * bsz;
    char *slice = (char *)scratch + s.xh_bytes;
    bool btrans = false;
    int64_t ldb = 0;
    qop_b_matrix(g, &btrans, &ldb);
    const uint8_t *A = (const uint8_t *)n->src[0]->t.data;
    const float *B = (const float *)n->src[1]->t.data;
    float *Y = (float *)n->t.data;
    const int64_t MN = g->Ka * g->N, NM = g->N * g->M;
    uint16_t *Bh = (uint16_t *)scratch;  // [N, M, c2, c3] packed, BF16 (tensor mode)
    if (tensor) {
        const int64_t ne[4] = {g->N, g->M, g->c2, g->c3}, sb[4] = {g->bs0, g->bs1, g->bs2, g->bs3};
        RG_TRY(rg_cu_narrow(ctx, n, B, ne, sb, RG_TYPE_BF16, Bh, err));
    }
    const float one = 1.0f, zero = 0.0f;
    const cublasOperation_t tb = btrans ? CUBLAS_OP_N : CUBLAS_OP_T;
    const int64_t b2 = g->c2 / g->r2, b3 = g->c3 / g->r3;
    for (int64_t i03 = 0; i03 < b3; i03++)
        for (int64_t i02 = 0; i02 < b2; i02++)
            for (int64_t k0 = 0; k0 < g->Ka; k0 += kc) {
                const int64_t cols = g->Ka - k0 < kc ? g->Ka - k0 : kc;
                RG_TRY(rg_cu_dequant_rows(ctx, n, g->type, A + i03 * g->ab3 + i02 * g->ab2, g->ab1, g->M, k0, cols,
                                          tensor ? RG_TYPE_BF16 : RG_TYPE_F32, slice, cols, err));
                for (int64_t i3 = i03 * g->r3; i3 < (i03 + 1) * g->r3; i3++) {
                    const int64_t first = i3 * g->c2 + i02 * g->r2;  // the first b slice reading this a slice
                    float *Yf = Y + first * MN + k0;
                    if (tensor) {
                        RG_TRY(rg_cu_gemm_half(ctx, n, CUBLAS_OP_N, CUBLAS_OP_T, cols, g->N, g->M, slice, cols, 0,
                                               Bh + first * NM, g->N, NM, Yf, g->Ka, MN, g->r2, RG_TYPE_BF16, err));
                        continue;
                    }
                    const float *Bf = B + i3 * g->bs3 + i02 * g->r2 * g->bs2;
                    for (int64_t i = 0; i < g->r2; i += MAX_BATCH) {
                        const int64_t nb = g->r2 - i < MAX_BATCH ? g->r2 - i : MAX_BATCH;
                        CUBLAS_TRY(cublasSgemmStridedBatched(ctx->cublas, CUBLAS_OP_N, tb, (int)cols, (int)g->N,
                                                             (int)g->M, &one, (const float *)slice, (int)cols, 0,
                                                             Bf + i * g->bs2, (int)ldb, g->bs2, &zero, Yf + i * MN,
                                                             (int)g->Ka, MN, (int)nb));
                    }
                }
            }
    return RG_OK;
}

rg_status rg_cu_qop_run(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, rg_error *err) {
    qop_geom g;
    if (!qop_geom_of(n, &g))
        return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda out_prod '%s': a %s a of shapes or strides the cell does not take",
                       n->t.name, rg_type_get(n->src[0]->t.type)->name);
    return qop_sliced(&g) ? qop_sliced_run(ctx, c, n, &g, err) : qop_inplace(ctx, n, &g, err);
}

// ---------------------------------------------------------------------------
// The type list of the two cells

const char *rg_cu_qmm_types(void) {
    static char list[512];
    static bool made = false;  // the cells' constants are made once, before any thread runs
    if (made) return list;
    size_t len = (size_t)snprintf(list, sizeof list, "f32, f16, bf16");
    for (uint32_t t = 0; t < RG_TYPE_COUNT && len < sizeof list; t++)
        if (decodable(t)) len += (size_t)snprintf(list + len, sizeof list - len, ", %s", rg_type_get(t)->name);
    made = true;
    return list;
}
