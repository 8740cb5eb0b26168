// ops.cu - ADD, MUL_MAT and SOFT_MAX on the device (their cells at the end; op_table.cu
// lists every cell of the CUDA column): for each op, which nodes it takes (types, shapes,
// strides), the types the report lists, and the launcher. Launchers read and write device pointers (the executor
// plans the device buffer and keeps tensors there) and only queue work on the
// context's stream.
//
//   ADD       f32 (+) f32 -> f32. a any strides (float-aligned), b any strides,
//             tiled over a as on the CPU (b.ne[i] divides a.ne[i]). One IEEE add
//             per element: bit-identical to the CPU.
//   MUL_MAT   (a quantized weight: ops_quant_mm.cu, the in-place decoder or the sliced
//             decode + cuBLAS; otherwise as follows)
//             weight f32, f16 or bf16 (packed rows, any row/slice strides),
//             x f32 (packed rows), y f32. F32 weights: cuBLAS SGEMM with
//             CUBLAS_PEDANTIC_MATH (true F32, no TF32). F16/BF16 weights by
//             RETRO_CUDA_HALF_GEMM (cuda.h): `tensor` (default) rounds x to the
//             weight's type and multiplies on the tensor cores with F32
//             accumulation (gemm_half.cu); `f32` widens the weight to F32 on the
//             device first (exact), in row slices of at most
//             RETRO_CUDA_DEQUANT_BUDGET_MB, so x is never rounded and the only
//             difference from a plain F32 dot product is the summation order.
//             Dims 2 and 3 broadcast as in
//             architectures.md §0.1: x slice i2 uses weight slice i2 / (c2 / b2).
//   SOFT_MAX  f32 rows, optional f32 mask [n_kv, >= T], causal flag, sliding window
//             (ip[1], with the causal mask: keys before end - window give 0), scale,
//             softcap, exactly the CPU's rule (ops_softmax_loss.c): z in f32
//             with no fused multiply-add, f32 expf, the row sum in double,
//             y = (float)(e * (1/sum)); fully masked rows give zeros.
//             Differences from the CPU: CUDA's expf/tanhf (<= 2 ulp) and the
//             order of the double sum.
//
// FMA rule (nvcc builds with --fmad=false, scripts/check-fma.sh): no fused multiply-add; the
// kernels round each product and sum as the CPU kernels they mirror do (most rows of
// test_ops cuda_parity are the CPU's bits, which an fmaf would change).
//
// Layout: the kernels first, then the launchers (llm.c style).
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "cuda/cuda_common.cuh"
#include "cuda/ops_quant_mm.cuh"

// ===========================================================================
// Kernels
// ===========================================================================

// add_same_f32: y[i] = a[i] + b[i] for i < n; a, b, y contiguous, same shape.
__global__ static void add_same_f32_kernel(const float *a, const float *b, float *y, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __fadd_rn(a[i], b[i]);
}

// The shape and strides (in elements) of one broadcast ADD.
typedef struct add_geom {
    int64_t ne[4];   // output shape (= a's shape); the output is contiguous
    int64_t as[4];   // a's strides
    int64_t bne[4];  // b's shape: b.ne[i] divides ne[i]
    int64_t bs[4];   // b's strides
} add_geom;
RG_KERNEL_NO_POINTERS(add_geom)

// add_bcast_f32: y[i0,i1,i2,i3] = a[i0,i1,i2,i3] + b[i0 % bne0, i1 % bne1, i2 % bne2, i3 % bne3]
// with a and b addressed through their own strides, y contiguous.
__global__ static void add_bcast_f32_kernel(const float *a, const float *b, float *y, add_geom g, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c[4];
        rg_cu_unravel4(i, g.ne, c);
        const float x = a[c[0] * g.as[0] + c[1] * g.as[1] + c[2] * g.as[2] + c[3] * g.as[3]];
        const float z = b[(c[0] % g.bne[0]) * g.bs[0] + (c[1] % g.bne[1]) * g.bs[1] + (c[2] % g.bne[2]) * g.bs[2] +
                          (c[3] % g.bne[3]) * g.bs[3]];
        y[i] = __fadd_rn(x, z);
    }
}

// IEEE binary16 bits -> binary32, exact; a NaN stays NaN (quiet, sign and
// payload kept), as rg_fp16_to_fp32 on the CPU.
__device__ static inline float f16_bits_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1F) return __uint_as_float(sign | 0x7F800000u | (m << 13) | (m ? 0x400000u : 0u));
    if (e == 0) {
        const float v = (float)m * 5.9604644775390625e-8f;  // m * 2^-24, exact
        return sign ? -v : v;
    }
    return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}

// bf16 bits -> binary32, exact.
__device__ static inline float bf16_bits_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

// widen_f16 / widen_bf16: dst[m * K + k] = (float)src[m * ld + k] for m < rows,
// k < K; turns rows of a half-precision weight into packed F32 rows.
__global__ static void widen_f16_kernel(const uint16_t *src, int64_t ld, int64_t K, int64_t rows, float *dst) {
    const int64_t n = rows * K;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t m = i / K, k = i - m * K;
        dst[i] = f16_bits_to_f32(src[m * ld + k]);
    }
}

__global__ static void widen_bf16_kernel(const uint16_t *src, int64_t ld, int64_t K, int64_t rows, float *dst) {
    const int64_t n = rows * K;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t m = i / K, k = i - m * K;
        dst[i] = bf16_bits_to_f32(src[m * ld + k]);
    }
}

// soft_max_f32: one block per row r of a [n_kv, T, H, B] (rows contiguous,
// nrows = T*H*B), query i = r % T:
//   z_k = scale * a_k;  z_k = softcap * tanhf(z_k / softcap) when softcap > 0;
//   z_k += mask[i * mask_ld + k] when there is a mask;
//   keys k >= end are causally masked, end = clamp(i + (n_kv - T) + 1, 0, n_kv) (n_kv otherwise);
//   y_k = expf(z_k - max z) / sum exp (sum in double), 0 for masked keys;
//   a row whose z are all -inf gives zeros.
__global__ static void soft_max_f32_kernel(const float *a, const float *mask, float *y, int64_t n_kv, int64_t T,
                                           int64_t nrows, int64_t mask_ld, int causal, int64_t window, float scale,
                                           float softcap) {
    RG_SHARED(float, sh_max, 32);
    RG_SHARED(double, sh_sum, 32);
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        const int64_t i = r % T;
        const float *ar = a + r * n_kv;
        float *yr = y + r * n_kv;
        const float *mr = mask ? mask + i * mask_ld : NULL;
        // keys at or beyond `end` causally masked, those before `start` out of the sliding window
        int64_t end = n_kv, start = 0;
        if (causal) {
            const int64_t lim = i + (n_kv - T) + 1;
            end = lim < 0 ? 0 : lim < n_kv ? lim : n_kv;
            if (window > 0 && end - window > 0) start = end - window;
        }
        for (int64_t k = threadIdx.x; k < start; k += blockDim.x) yr[k] = 0.0f;
        // z, kept in y; each thread later reads back only the elements it wrote.
        float mx = -INFINITY;
        for (int64_t k = start + threadIdx.x; k < end; k += blockDim.x) {
            float z = __fmul_rn(scale, ar[k]);
            if (softcap > 0.0f) z = __fmul_rn(softcap, tanhf(__fdiv_rn(z, softcap)));
            if (mr) z = __fadd_rn(z, mr[k]);
            yr[k] = z;
            if (z > mx) mx = z;
        }
        mx = rg_cu_block_reduce(mx, -INFINITY, sh_max, rg_cu_max_f32());  // a NaN never wins
        if (mx == -INFINITY) {  // every key masked: zeros, no NaN (the same branch in every thread)
            for (int64_t k = threadIdx.x; k < n_kv; k += blockDim.x) yr[k] = 0.0f;
            continue;
        }
        double sum = 0.0;
        for (int64_t k = start + threadIdx.x; k < end; k += blockDim.x) {
            const float e = expf(__fsub_rn(yr[k], mx));
            yr[k] = e;
            sum += (double)e;
        }
        sum = rg_cu_block_reduce(sum, 0.0, sh_sum, rg_cu_add());
        const double inv = 1.0 / sum;
        for (int64_t k = start + threadIdx.x; k < end; k += blockDim.x) yr[k] = (float)__dmul_rn((double)yr[k], inv);
        for (int64_t k = end + threadIdx.x; k < n_kv; k += blockDim.x) yr[k] = 0.0f;
    }
}

// ===========================================================================
// Launchers
// ===========================================================================

enum { RG_CU_THREADS = 256 };

// Blocks for n elements at RG_CU_THREADS per block; the kernels loop past the grid.
static unsigned grid_for(int64_t n) {
    int64_t b = (n + RG_CU_THREADS - 1) / RG_CU_THREADS;
    return (unsigned)(b < 1 ? 1 : b > 65535 * 16 ? 65535 * 16 : b);
}

static size_t type_size(uint32_t type) {
    return type == RG_TYPE_F32 ? 4 : (type == RG_TYPE_F16 || type == RG_TYPE_BF16) ? 2 : 0;
}

// Every stride a multiple of the element size, every dim non-empty.
static bool elem_strides(const rg_tensor *t, size_t esz) {
    for (int i = 0; i < RG_MAX_DIMS; i++)
        if (t->ne[i] <= 0 || t->nb[i] % esz) return false;
    return true;
}

// Support depends on types, shapes and strides only: the scheduler asks before any bytes are bound.
static bool has_bytes(const rg_node *s) { return s != NULL; }

// ---------------------------------------------------------------------------
// Support

static bool add_supported(const rg_node *n) {
    const rg_node *a = n->src[0], *b = n->src[1];
    if (!has_bytes(a) || !has_bytes(b) || a->t.type != RG_TYPE_F32 || b->t.type != RG_TYPE_F32) return false;
    if (!rg_tensor_same_shape(&a->t, &n->t) || !elem_strides(&a->t, 4) || !elem_strides(&b->t, 4)) return false;
    for (int i = 0; i < RG_MAX_DIMS; i++)
        if (n->t.ne[i] % b->t.ne[i]) return false;
    return true;
}

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

static bool mul_mat_supported(const rg_node *n) {
    const rg_node *w = n->src[0], *x = n->src[1];
    if (!has_bytes(w) || !has_bytes(x) || x->t.type != RG_TYPE_F32) return false;
    const size_t esz = type_size(w->t.type);
    if (!esz || !elem_strides(&w->t, esz) || !elem_strides(&x->t, 4)) return false;
    if (w->t.nb[0] != esz || x->t.nb[0] != 4) return false;  // packed rows
    const int64_t K = w->t.ne[0], M = w->t.ne[1], N = x->t.ne[1];
    if (x->t.ne[0] != K || n->t.ne[0] != M || n->t.ne[1] != N || n->t.ne[2] != x->t.ne[2] || n->t.ne[3] != x->t.ne[3])
        return false;
    if (x->t.ne[2] % w->t.ne[2] || x->t.ne[3] % w->t.ne[3]) return false;
    // cuBLAS's int API: sizes and leading dimensions (a leading dimension must cover a column).
    const int64_t ldw = M > 1 ? (int64_t)(w->t.nb[1] / esz) : K, ldx = N > 1 ? (int64_t)(x->t.nb[1] / 4) : K;
    if (!fits_int(K) || !fits_int(M) || !fits_int(N) || !fits_int(ldw) || !fits_int(ldx) || ldw < K || ldx < K)
        return false;
    return true;
}

static bool soft_max_supported(const rg_node *n) {
    const rg_node *a = n->src[0], *mask = n->src[1];
    if (n->ip[1] < 0 || (n->ip[1] > 0 && !n->ip[0])) return false;  // the CPU refuses these with the reason
    if (!has_bytes(a) || a->t.type != RG_TYPE_F32 || !rg_tensor_is_contiguous(&a->t)) return false;
    if (!rg_tensor_same_shape(&a->t, &n->t)) return false;
    if (mask) {
        const rg_tensor *m = &mask->t;
        if (!has_bytes(mask) || m->type != RG_TYPE_F32 || !elem_strides(m, 4)) return false;
        if (m->ne[0] != a->t.ne[0] || m->ne[1] < a->t.ne[1] || m->ne[2] != 1 || m->ne[3] != 1) return false;
        if (m->ne[0] > 1 && m->nb[0] != 4) return false;
    }
    return true;
}


// ---------------------------------------------------------------------------
// ADD

static rg_status run_add(rg_cuda_ctx *ctx, const rg_node *n, rg_error *err) {
    const rg_tensor *a = &n->src[0]->t, *b = &n->src[1]->t;
    const void *da = a->data, *db = b->data;
    void *dy = n->t.data;
    const int64_t count = rg_tensor_nelements(&n->t);
    if (rg_tensor_is_contiguous(a) && rg_tensor_same_shape(a, b) && rg_tensor_is_contiguous(b)) {
        RG_LAUNCH(add_same_f32_kernel, grid_for(count), RG_CU_THREADS, 0, ctx->stream, (const float *)da,
                  (const float *)db, (float *)dy, count);
    } else {
        add_geom g;
        for (int i = 0; i < 4; i++) {
            g.ne[i] = n->t.ne[i], g.as[i] = (int64_t)(a->nb[i] / 4);
            g.bne[i] = b->ne[i], g.bs[i] = (int64_t)(b->nb[i] / 4);
        }
        RG_LAUNCH(add_bcast_f32_kernel, grid_for(count), RG_CU_THREADS, 0, ctx->stream, (const float *)da,
                  (const float *)db, (float *)dy, g, count);
    }
    CU_LAUNCHED();
    return RG_OK;
}

// ---------------------------------------------------------------------------
// MUL_MAT
//
// In cuBLAS's column-major terms a weight slice W [K, M] with row stride ldw is
// a K x M matrix (lda = ldw), an x slice [K, N] is K x N (ldb = ldx), and the
// output slice Y [M, N] is M x N (ldc = M): Y = W^T X, i.e. SGEMM(T, N).

typedef struct mm_geom {
    int K, M, N;
    int64_t ldx;           // x column stride (elements)
    int64_t sx2, sx3;      // x slice strides (elements)
    int64_t c2, c3;        // output slices
    int64_t r2, r3;        // x slices per weight slice in dims 2, 3
} mm_geom;

// Y[:, columns of x slices g0 .. g0 + r2 - 1] for weight rows [0, Mc): A is
// the weight (Mc rows of K, lda), X points at the first x slice, Y at row 0 of
// the first output slice (ldc = M; consecutive output slices are contiguous).
// The r2 slices run as one GEMM when their columns are evenly spaced, else one
// GEMM per slice.
static rg_status gemm_group(rg_cuda_ctx *ctx, const rg_node *n, const mm_geom *g, const float *A, int lda, int Mc,
                            const float *X, float *Y, rg_error *err) {
    const float one = 1.0f, zero = 0.0f;
    const int64_t r2 = g->r2;
    int cols = g->N;
    int64_t ldx = g->ldx;
    int64_t slices = r2;
    if (r2 > 1 && g->N == 1 && g->sx2 >= g->K && fits_int(g->sx2) && fits_int(r2)) {
        cols = (int)r2, ldx = g->sx2, slices = 1;  // one column per slice, spaced sx2 apart
    } else if (r2 > 1 && g->sx2 == (int64_t)g->N * g->ldx && fits_int((int64_t)g->N * r2)) {
        cols = (int)(g->N * r2), slices = 1;  // the slices' columns follow each other
    }
    for (int64_t s = 0; s < slices; s++) {
        CUBLAS_TRY(cublasSgemm(ctx->cublas, CUBLAS_OP_T, CUBLAS_OP_N, Mc, cols, g->K, &one, A, lda, X + s * g->sx2,
                               (int)ldx, &zero, Y + s * (int64_t)g->M * g->N, g->M));
    }
    return RG_OK;
}

// The tensor path (gemm_half.cu): x [K, N, c2, c3] rounded to the weight's type into a
// packed copy, then Y = W^T Xh on the half weight as stored (no widened copy of it).
static rg_status mul_mat_tensor(rg_cuda_ctx *ctx, const rg_node *n, const mm_geom *g, int64_t ldw, int64_t sw2,
                                int64_t sw3, rg_error *err) {
    const rg_tensor *w = &n->src[0]->t, *x = &n->src[1]->t;
    const int64_t K = g->K, N = g->N, MN = (int64_t)g->M * N;
    const int64_t ne[4] = {K, N, g->c2, g->c3};
    const int64_t sx[4] = {1, (int64_t)(x->nb[1] / 4), g->sx2, g->sx3};
    void *buf;
    RG_TRY(rg_cuda_pool_get(ctx, RG_CU_BUF_TMP, (size_t)(K * N * g->c2 * g->c3) * 2, &buf, n, err));
    uint16_t *Xh = (uint16_t *)buf;  // [K, N, c2, c3] packed, in w's type
    RG_TRY(rg_cu_narrow(ctx, n, (const float *)x->data, ne, sx, w->type, Xh, err));
    const uint16_t *W = (const uint16_t *)w->data;
    float *Y = (float *)n->t.data;
    const int64_t sh2 = K * N, sh3 = K * N * g->c2;
    for (int64_t i3 = 0; i3 < g->c3; i3++) {
        const uint16_t *W3 = W + (i3 / g->r3) * sw3;
        const uint16_t *X3 = Xh + i3 * sh3;
        float *Y3 = Y + i3 * g->c2 * MN;
        if (g->r2 == 1) {  // weight slice i2 with x slice i2: one batched call
            RG_TRY(rg_cu_gemm_half(ctx, n, CUBLAS_OP_T, CUBLAS_OP_N, g->M, N, K, W3, ldw, sw2, X3, K, sh2, Y3, g->M,
                                   MN, g->c2, w->type, err));
            continue;
        }
        // r2 x slices share a weight slice: their packed columns follow each other
        for (int64_t i02 = 0; i02 < g->c2 / g->r2; i02++)
            RG_TRY(rg_cu_gemm_half(ctx, n, CUBLAS_OP_T, CUBLAS_OP_N, g->M, N * g->r2, K, W3 + i02 * sw2, ldw, 0,
                                   X3 + i02 * g->r2 * sh2, K, 0, Y3 + i02 * g->r2 * MN, g->M, 0, 1, w->type, err));
    }
    return RG_OK;
}

static rg_status run_mul_mat(rg_cuda_ctx *ctx, const rg_node *n, rg_error *err) {
    const rg_tensor *w = &n->src[0]->t, *x = &n->src[1]->t;
    const size_t esz = type_size(w->type);
    mm_geom g;
    g.K = (int)w->ne[0], g.M = (int)w->ne[1], g.N = (int)x->ne[1];
    g.ldx = g.N > 1 ? (int64_t)(x->nb[1] / 4) : g.K;
    g.sx2 = (int64_t)(x->nb[2] / 4), g.sx3 = (int64_t)(x->nb[3] / 4);
    g.c2 = x->ne[2], g.c3 = x->ne[3];
    g.r2 = x->ne[2] / w->ne[2], g.r3 = x->ne[3] / w->ne[3];
    const int64_t ldw = g.M > 1 ? (int64_t)(w->nb[1] / esz) : g.K;
    const int64_t sw2 = (int64_t)(w->nb[2] / esz), sw3 = (int64_t)(w->nb[3] / esz);
    const int64_t MN = (int64_t)g.M * g.N;
    const int64_t count = rg_tensor_nelements(&n->t);

    const void *dw = w->data, *dx = x->data;
    void *dy = n->t.data;
    (void)count;
    const float *X = (const float *)dx;
    float *Y = (float *)dy;

    if (w->type == RG_TYPE_F32) {
        const float *W = (const float *)dw;
        const float one = 1.0f, zero = 0.0f;
        for (int64_t i3 = 0; i3 < g.c3; i3++) {
            const float *W3 = W + (i3 / g.r3) * sw3;
            const float *X3 = X + i3 * g.sx3;
            float *Y3 = Y + i3 * g.c2 * MN;
            if (g.r2 == 1 && g.c2 > 1 && fits_int(g.c2)) {
                // weight slice i2 with x slice i2: one batched call
                CUBLAS_TRY(cublasSgemmStridedBatched(ctx->cublas, CUBLAS_OP_T, CUBLAS_OP_N, g.M, g.N, g.K, &one, W3,
                                                     (int)ldw, sw2, X3, (int)g.ldx, g.sx2, &zero, Y3, g.M, MN,
                                                     (int)g.c2));
                continue;
            }
            for (int64_t i02 = 0; i02 < g.c2 / g.r2; i02++)
                RG_TRY(gemm_group(ctx, n, &g, W3 + i02 * sw2, (int)ldw, g.M, X3 + i02 * g.r2 * g.sx2,
                                  Y3 + i02 * g.r2 * MN, err));
        }
    } else if (ctx->half_gemm == RG_CUDA_HALF_GEMM_TENSOR) {
        RG_TRY(mul_mat_tensor(ctx, n, &g, ldw, sw2, sw3, err));
    } else {
        // Widen rows [m0, m0 + mc) of one weight slice to F32, then use them for
        // every x slice that maps to this weight slice.
        const uint16_t *W = (const uint16_t *)dw;
        const int64_t row_bytes = (int64_t)g.K * 4;
        int64_t mc = g.M;
        if (ctx->dequant_budget) {
            mc = (int64_t)(ctx->dequant_budget / (size_t)row_bytes);
            if (mc < 1) mc = 1;
            if (mc > g.M) mc = g.M;
        }
        void *dt;
        RG_TRY(rg_cuda_pool_get(ctx, RG_CU_BUF_TMP, (size_t)(mc * row_bytes), &dt, n, err));
        float *Wf = (float *)dt;
        const int64_t b2 = g.c2 / g.r2, b3 = g.c3 / g.r3;
        for (int64_t i03 = 0; i03 < b3; i03++)
            for (int64_t i02 = 0; i02 < b2; i02++)
                for (int64_t m0 = 0; m0 < g.M; m0 += mc) {
                    const int64_t rows = g.M - m0 < mc ? g.M - m0 : mc;
                    const uint16_t *src = W + i03 * sw3 + i02 * sw2 + m0 * ldw;
                    if (w->type == RG_TYPE_F16)
                        RG_LAUNCH(widen_f16_kernel, grid_for(rows * g.K), RG_CU_THREADS, 0, ctx->stream, src, ldw,
                                  g.K, rows, Wf);
                    else
                        RG_LAUNCH(widen_bf16_kernel, grid_for(rows * g.K), RG_CU_THREADS, 0, ctx->stream, src, ldw,
                                  g.K, rows, Wf);
                    CU_LAUNCHED();
                    for (int64_t i3 = i03 * g.r3; i3 < (i03 + 1) * g.r3; i3++)
                        RG_TRY(gemm_group(ctx, n, &g, Wf, g.K, (int)rows, X + i3 * g.sx3 + i02 * g.r2 * g.sx2,
                                          Y + (i3 * g.c2 + i02 * g.r2) * MN + m0, err));
                }
    }
    return RG_OK;
}

// ---------------------------------------------------------------------------
// SOFT_MAX

static rg_status run_soft_max(rg_cuda_ctx *ctx, const rg_node *n, rg_error *err) {
    const rg_tensor *a = &n->src[0]->t;
    const rg_tensor *m = n->src[1] ? &n->src[1]->t : NULL;
    const int64_t count = rg_tensor_nelements(&n->t), n_kv = a->ne[0], T = a->ne[1];
    const int64_t nrows = count / n_kv;
    const void *da = a->data, *dm = m ? m->data : NULL;
    void *dy = n->t.data;
    const int64_t mask_ld = m ? (int64_t)(m->nb[1] / 4) : 0;
    const unsigned blocks = (unsigned)(nrows < 65535 * 16 ? nrows : 65535 * 16);
    RG_LAUNCH(soft_max_f32_kernel, blocks, RG_CU_THREADS, 0, ctx->stream, (const float *)da, (const float *)dm,
              (float *)dy, n_kv, T, nrows, mask_ld, n->ip[0] != 0, n->ip[1], n->fp[0], n->fp[1]);
    CU_LAUNCHED();
    return RG_OK;
}

// ---------------------------------------------------------------------------
// The cells of ADD, MUL_MAT and SOFT_MAX (op_table.cu lists every cell of the CUDA column).
// Kernels are stream-ordered: a cell returns once its work is queued; the executor
// synchronizes where host code needs the bytes.

#define CELL(fn_)                                                                    \
    static rg_status cell_##fn_(rg_exec_ctx *c, rg_node *n, rg_error *err) {         \
        rg_cuda_ctx *ctx = rg_cu_ctx(c);                                             \
        CU_TRY(cudaSetDevice(ctx->device));                                          \
        return run_##fn_(ctx, n, err);                                               \
    }
CELL(add)
CELL(soft_max)

// MUL_MAT: a quantized weight goes to ops_quant_mm.cu (which needs the exec's scratch).
static rg_status cell_mul_mat(rg_exec_ctx *c, rg_node *n, rg_error *err) {
    rg_cuda_ctx *ctx = rg_cu_ctx(c);
    CU_TRY(cudaSetDevice(ctx->device));
    const int64_t *xne = n->src[1]->t.ne;
    if (n->ip[0] == RG_MUL_MAT_COLUMNS && xne[1] > 1 && xne[2] == 1 && xne[3] == 1) {
        // Each column must get the bits of a MUL_MAT of that column alone (graph.h), and cuBLAS and
        // the quantized cells choose their algorithm by the column count: the node runs a column at a
        // time, as a single token's MUL_MAT (a few launches more for a speculative decoder's batch).
        // A session marks only 2-D products (the projections; its exact batches keep no sliced one).
        rg_node xc, yc;
        for (int64_t j = 0; j < xne[1]; j++) {
            rg_mul_mat_column(n, j, &xc, &yc);
            RG_TRY(cell_mul_mat(c, &yc, err));
        }
        return RG_OK;
    }
    if (rg_type_get(n->src[0]->t.type)->quantized) return rg_cu_qmm_run(ctx, c, n, err);
    return run_mul_mat(ctx, n, err);
}

// Every node a cell takes: F32 output, contiguous, bytes bound, not empty.
static bool plain_out(const rg_node *n) {
    return n && n->t.type == RG_TYPE_F32 && rg_tensor_is_contiguous(&n->t) && rg_tensor_nelements(&n->t) > 0;
}
static bool sup_add(const rg_node *n) { return plain_out(n) && add_supported(n); }
static bool sup_mul_mat(const rg_node *n) {
    return plain_out(n) && (mul_mat_supported(n) || rg_cu_qmm_supported(n));
}
static size_t work_mul_mat(const rg_node *n, int n_threads) {
    (void)n_threads;
    return rg_cu_qmm_work(n);  // 0 for float weights (their scratch is the context's pool)
}
static bool sup_soft_max(const rg_node *n) { return plain_out(n) && soft_max_supported(n); }

// This file's cells of the CUDA column (op_table.cu lists them).
namespace RG_CU_CELLS {
extern const rg_op_col add = rg_cu_col(cell_add, sup_add, NULL, "f32");
extern const rg_op_col mul_mat = rg_cu_col(cell_mul_mat, sup_mul_mat, work_mul_mat, rg_cu_qmm_types());
extern const rg_op_col soft_max = rg_cu_col(cell_soft_max, sup_soft_max, NULL, "f32");
}  // namespace RG_CU_CELLS
