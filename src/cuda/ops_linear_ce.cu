// ops_linear_ce.cu - the CUDA cells of the fused cross-entropy (cuda_common.cuh): LINEAR_CE and
// LINEAR_CE_BACK, the cross-entropy of w^T h by vocabulary chunks (cpu/ops_linear_ce.c's
// algorithm with its chunk, rg_linear_ce_chunk), never holding the [V, T] logits or their
// gradient. Kernels first, then launchers, then the registration. Every launcher only queues
// work on the context's stream and reads nothing back.
//
//   LINEAR_CE       w [d, V] f32, f16, bf16 or any quantized type the device decodes
//                   (rg_cu_dequant_supported; packed blocks along d), h [d, T] f32, labels i32
//                   [T] -> [T + 1]. Per vocabulary chunk one product into the [T, chunk] scratch
//                   (the chunk's logits Zc = Wc^T h), then one block per token: the chunk's max
//                   (f32), the sum of expf(z - max) in double (a fixed tree), merged into the
//                   running (max, sum) in double in chunk order, and the target logit; then
//                   lse_t = max + log sum and the loss inv_n * sum_t (lse_t - z_t) in double (a
//                   fixed tree over t). No atomics: the bits depend only on the shapes.
//                   The chunk's product by w's type and RETRO_CUDA_HALF_GEMM (cuda.h):
//                     f32 w            pedantic-F32 SGEMM on w's own columns;
//                     half w, f32      the chunk widened to F32 (exact), SGEMM;
//                     half w, tensor   h rounded to w's type, GemmEx on w's half columns (gemm_half.cu);
//                     quantized, f32   the chunk's rows decoded to F32 (rg_cu_dequant_rows: the CPU's
//                                      dequantized bits), SGEMM;
//                     quantized, tensor  the rows decoded to BF16 (the F32 value rounded to nearest
//                                      even) and h rounded to BF16 token tile by token tile, GemmEx
//                                      with F32 accumulation.
//                   Differences from the CPU: the GEMM's summation order, expf (<= 2 ulp) for
//                   exp_poly.h's exp, CUDA's double exp/log (<= 1 ulp), the order of the double
//                   sums; on the tensor path the rounding of w (a quantized head) and h to the
//                   half type, at most 2u sum_k |w h| per logit (u = 2^-8 BF16). A label outside
//                   [0, V) that is not ignored makes the loss NaN (the CPU names it; the device
//                   cannot return an error without a synchronization), which the exec's loss
//                   check reports.
//   LINEAR_CE_BACK  (dy [T + 1], h, the LINEAR_CE node, dw [d, V] f32 or NULL) -> dh [d, T]: per
//                   chunk the logits again, G = (float)(e c_t) - [v = label] dy0 inv_n with
//                   e = expf(-|z - lse_t|) and c_t = dy0 inv_n + dy[1 + t] in double (0 rows for
//                   ignored tokens), dh (+)= w_c G^T (accumulating over chunks in order) and
//                   dw_c = h G (each chunk its own columns). On the tensor path G is rounded to
//                   the half type too. A quantized head is frozen: no dw (the support rule
//                   refuses one). Differences as LINEAR_CE's.
//
// The scratch of a quantized head is the chunk's logits [T, chunk] f32 and one region of
// [d, chunk] f32 that holds the decoded rows (F32), or on the tensor path the BF16 rows in its
// first half and, in its second half, a BF16 tile of h (up to chunk tokens) and in the backward
// a BF16 tile of G (up to d tokens): so the loss holds its output, dh and the chunk, and
// nothing of size [d, T] besides dh.
//
// FMA rule (nvcc builds with --fmad=false, scripts/check-fma.sh): no fused multiply-add; the
// products are cuBLAS's (pedantic F32 or the tensor path), every other operation rounded apart.
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda/dequant.cuh"

extern "C" {
#include "cpu/cpu_ops.h"  // rg_linear_ce_chunk: the CPU's chunk rule
}
#include "tensor/half_bits.h"

// ===========================================================================
// Kernels
// ===========================================================================

// widen_half: dst[r + c * rows] = (float)src[r + c * s1] for r < rows, c < cols (s1 in
// elements): a half matrix's columns made a packed column-major F32 one (leading dimension
// rows), exactly.
__global__ static void lce_widen_half_kernel(const uint16_t *src, int64_t s1, int64_t rows, int64_t cols, int bf16,
                                             float *dst) {
    const int64_t count = rows * cols;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i / rows, r = i - c * rows;
        const uint16_t h = src[r + c * s1];
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

namespace {

const int THREADS = 256, ROW_THREADS = 128;  // elementwise kernels; one block per row
const int64_t MAX_GRID = 65535 * 16;

// Blocks for n items at `threads` per block; the kernels loop past the grid.
unsigned grid_for(int64_t n, int threads) {
    const int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > MAX_GRID ? MAX_GRID : b);
}
unsigned rows_grid(int64_t rows) { return (unsigned)(rows < 1 ? 1 : rows < MAX_GRID ? rows : MAX_GRID); }

bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

bool is_plain_f32(const rg_node *n) {
    return n && n->t.type == RG_TYPE_F32 && rg_tensor_is_contiguous(&n->t) && rg_tensor_nelements(&n->t) > 0;
}

bool is_half(uint32_t type) { return type == RG_TYPE_F16 || type == RG_TYPE_BF16; }

// A head the device decodes chunk by chunk (not f32 and not a half type).
bool is_quant(uint32_t type) { return type != RG_TYPE_F32 && !is_half(type); }

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// ---------------------------------------------------------------------------
// Geometry
//
// Column-major, the chunk's logits are Zc = Wc^T H: Wc = w's columns v0 .. v0 + nv (d x nv),
// H = h (d x T, ldh), Zc nv x T with leading dimension chunk, i.e. the CPU's [T rows, chunk]
// scratch. The backward then makes dh (+)= Wc G and dw_c = H G^T.

typedef struct lce_geom {
    int64_t d, V, T, chunk;
    int64_t ldw, ldh;    // elements (ldw: f32 and half heads)
    int64_t row_bytes;   // bytes from one vocabulary row of w to the next (a quantized head)
    uint32_t wtype;
} lce_geom;

// w, h, labels as LINEAR_CE reads them (fwd: the LINEAR_CE node, h: its hidden states); the
// chunk of node n (fwd itself, or the LINEAR_CE_BACK node, as the CPU takes it).
bool lce_geom_of(const rg_node *n, const rg_node *fwd, const rg_node *h, lce_geom *g) {
    const rg_node *w = fwd->src[0], *labels = fwd->src[2];
    if (!w || !h || !labels || h->t.type != RG_TYPE_F32 || labels->t.type != RG_TYPE_I32) return false;
    const uint32_t wt = w->t.type;
    const rg_type_traits *tr = rg_type_get(wt);
    if (is_quant(wt) && !rg_cu_dequant_supported(wt)) return false;
    if (!tr->block_size || !tr->type_size || h->t.nb[1] % 4) return false;
    g->wtype = wt;
    g->d = w->t.ne[0], g->V = w->t.ne[1], g->T = h->t.ne[1];
    if (g->d < 1 || g->V < 1 || g->T < 1 || w->t.ne[2] != 1 || w->t.ne[3] != 1) return false;
    if (h->t.ne[0] != g->d || h->t.ne[2] != 1 || h->t.ne[3] != 1) return false;
    if ((g->d > 1 && h->t.nb[0] != 4) || rg_tensor_nelements(&labels->t) != g->T || (g->T > 1 && labels->t.nb[0] != 4))
        return false;
    // Packed blocks along d: element (or block) k of a row at k * type_size bytes.
    if (g->d % tr->block_size || (g->d > tr->block_size && w->t.nb[0] != tr->type_size)) return false;
    const int64_t row = (int64_t)rg_type_row_size(wt, g->d);
    g->row_bytes = g->V > 1 ? (int64_t)w->t.nb[1] : row;
    if (g->row_bytes < row) return false;
    if (is_quant(wt)) {
        g->ldw = 0;
    } else {
        if (g->row_bytes % (int64_t)tr->type_size) return false;
        g->ldw = g->row_bytes / (int64_t)tr->type_size;
    }
    g->ldh = g->T > 1 ? (int64_t)(h->t.nb[1] / 4) : g->d;
    g->chunk = rg_linear_ce_chunk(n, g->V, g->T);
    return g->ldh >= g->d && fits_int(g->d) && fits_int(g->V) && fits_int(g->T) && fits_int(g->ldw) &&
           fits_int(g->ldh) && fits_int(g->chunk) && g->chunk <= INT64_MAX / g->T &&
           g->chunk <= INT64_MAX / 4 / g->d;
}

bool sup_linear_ce(const rg_node *n) {
    lce_geom g;
    return is_plain_f32(n) && lce_geom_of(n, n, n->src[1], &g) && rg_tensor_nelements(&n->t) == g.T + 1;
}

// A quantized head is frozen: a dw for it is refused (the node then runs on the CPU).
bool sup_linear_ce_back(const rg_node *n) {
    const rg_node *dy = n->src[0], *h = n->src[1], *fwd = n->src[2], *dw = n->src[3];
    lce_geom g;
    if (!fwd || fwd->op != RG_OP_LINEAR_CE || !is_plain_f32(fwd) || !is_plain_f32(dy) || !is_plain_f32(n) ||
        !lce_geom_of(n, fwd, h, &g))
        return false;
    if (rg_tensor_nelements(&dy->t) != g.T + 1 || rg_tensor_nelements(&fwd->t) != g.T + 1) return false;
    if (n->t.ne[0] != g.d || n->t.ne[1] != g.T) return false;
    if (dw && is_quant(g.wtype)) return false;
    return !dw || (is_plain_f32(dw) && dw->t.ne[0] == g.d && dw->t.ne[1] == g.V && rg_tensor_nelements(&dw->t) == g.d * g.V);
}

// ---------------------------------------------------------------------------
// The device scratch:
//   z [T, chunk] f32, the chunk's logits (then its gradient)
//   a half w: its chunk widened [d, chunk] f32 (RETRO_CUDA_HALF_GEMM=f32), and h [d, T] and the
//     chunk's G [T, chunk] rounded to w's type (the tensor path; both kept, so the plan does not
//     depend on the mode)
//   a quantized w: wq, [d, chunk] f32 of bytes: the decoded rows in F32, or on the tensor path
//     the BF16 rows in its first half and a BF16 tile of h or G in its second half (tile)
//   (forward) m [T] f32, s [T] f64, zt [T] f32 | inv_n f64.
typedef struct lce_layout {
    float *z, *wf, *m, *zt;
    uint16_t *hh, *gh;
    void *wq;
    uint16_t *tile;      // the second half of wq
    int64_t tile_bytes;  // its size
    double *s, *inv_n;
    size_t total;
} lce_layout;

lce_layout lce_layout_of(void *base, const lce_geom *g, bool back) {
    lce_layout L;
    memset(&L, 0, sizeof L);
    char *b = (char *)base;
    size_t off = 0;
#define LCE_PLACE(field, T_, count)                                   \
    L.field = b ? (T_ *)(b + off) : NULL;                             \
    off += align256((size_t)(count) * sizeof(T_))
    LCE_PLACE(z, float, g->T * g->chunk);
    if (is_half(g->wtype)) {
        LCE_PLACE(wf, float, g->d * g->chunk);
        LCE_PLACE(hh, uint16_t, g->d * g->T);
        LCE_PLACE(gh, uint16_t, g->T * g->chunk);
    } else if (is_quant(g->wtype)) {
        const size_t half = align256((size_t)(g->d * g->chunk) * 2);  // BF16 [d, chunk]
        L.wq = b ? (void *)(b + off) : NULL;
        L.tile = b ? (uint16_t *)(b + off + half) : NULL;
        L.tile_bytes = (int64_t)half;
        off += 2 * half;  // >= [d, chunk] f32
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

size_t work_linear_ce(const rg_node *n, int n_threads) {
    (void)n_threads;
    lce_geom g;
    return lce_geom_of(n, n, n->src[1], &g) ? lce_layout_of(NULL, &g, false).total : 0;
}

size_t work_linear_ce_back(const rg_node *n, int n_threads) {
    (void)n_threads;
    lce_geom g;
    return n->src[2] && lce_geom_of(n, n->src[2], n->src[1], &g) ? lce_layout_of(NULL, &g, true).total : 0;
}

// The scratch laid out, or an error when the executor gave less than the cell's work size.
rg_status lce_scratch(const rg_exec_ctx *c, const rg_node *n, const lce_geom *g, bool back, lce_layout *L,
                      rg_error *err) {
    *L = lce_layout_of(c->scratch, g, back);
    if (!c->scratch || c->scratch_size < L->total)
        return rg_fail(err, RG_ERR_ARG, "cuda %s '%s': device scratch of %zu bytes is below the %zu needed",
                       rg_op_name(n->op), n->t.name, c->scratch_size, L->total);
    return RG_OK;
}

// ---------------------------------------------------------------------------
// The chunk's product

// Whether the products take the tensor path (cuda.h): a half head, or a quantized one decoded to BF16.
bool lce_tensor(const rg_cuda_ctx *ctx, const lce_geom *g) {
    return g->wtype != RG_TYPE_F32 && ctx->half_gemm == RG_CUDA_HALF_GEMM_TENSOR;
}

// The half type of the tensor path: w's own, or BF16 for a quantized head.
uint32_t lce_half_type(const lce_geom *g) { return is_half(g->wtype) ? g->wtype : (uint32_t)RG_TYPE_BF16; }

// Tokens per tile of the tensor path of a quantized head: h's tile [d, tokens] and G's tile
// [nv, tokens] in BF16 must fit the region's second half (nv <= chunk).
int64_t lce_tile_tokens(const lce_geom *g, const lce_layout *L, bool grad) {
    const int64_t per = 2 * (grad ? g->chunk : g->d);
    const int64_t t = L->tile_bytes / per;
    return t < 1 ? 1 : t > g->T ? g->T : t;
}

// A half head on the tensor path: h [d, T] (ldh) rounded to w's type into L->hh (packed, leading dimension d).
rg_status lce_round_h(rg_cuda_ctx *ctx, const rg_node *n, const float *H, const lce_geom *g, const lce_layout *L,
                      rg_error *err) {
    const int64_t ne[4] = {g->d, g->T, 1, 1}, s[4] = {1, g->ldh, 0, 0};
    return rg_cu_narrow(ctx, n, H, ne, s, g->wtype, L->hh, err);
}

// The chunk's columns of w as an F32 matrix (*Wc, leading dimension *ld): w's own bytes (f32),
// the half chunk widened into L->wf, or the quantized rows decoded into L->wq.
rg_status lce_weight_f32(rg_cuda_ctx *ctx, const rg_node *n, const rg_tensor *w, const lce_geom *g,
                         const lce_layout *L, int64_t v0, int64_t nv, const float **Wc, int64_t *ld, rg_error *err) {
    if (g->wtype == RG_TYPE_F32) {
        *Wc = (const float *)w->data + v0 * g->ldw, *ld = g->ldw;
        return RG_OK;
    }
    *ld = g->d;
    if (is_quant(g->wtype)) {
        *Wc = (const float *)L->wq;
        return rg_cu_dequant_rows(ctx, n, g->wtype, (const char *)w->data + v0 * g->row_bytes, g->row_bytes, nv, 0,
                                  g->d, RG_TYPE_F32, L->wq, g->d, err);
    }
    *Wc = L->wf;
    RG_LAUNCH(lce_widen_half_kernel, grid_for(g->d * nv, THREADS), THREADS, 0, ctx->stream,
              (const uint16_t *)w->data + v0 * g->ldw, g->ldw, g->d, nv, g->wtype == RG_TYPE_BF16 ? 1 : 0, L->wf);
    CU_LAUNCHED();
    return RG_OK;
}

// The chunk's logits into L->z. On the tensor path *Wh is the chunk's half columns (leading
// dimension *ld); otherwise *Wc is its F32 columns.
rg_status lce_logits(rg_cuda_ctx *ctx, const rg_node *n, const rg_tensor *w, const float *H, const lce_geom *g,
                     const lce_layout *L, int64_t v0, int64_t nv, const float **Wc, const uint16_t **Wh, int64_t *ld,
                     rg_error *err) {
    if (lce_tensor(ctx, g) && is_half(g->wtype)) {  // Zc = Wc^T Hh on the half columns as stored
        *Wh = (const uint16_t *)w->data + v0 * g->ldw, *ld = g->ldw;
        return rg_cu_gemm_half(ctx, n, CUBLAS_OP_T, CUBLAS_OP_N, nv, g->T, g->d, *Wh, g->ldw, 0, L->hh, g->d, 0, L->z,
                               g->chunk, 0, 1, g->wtype, err);
    }
    if (lce_tensor(ctx, g)) {  // a quantized head: its rows in BF16, h rounded a tile of tokens at a time
        *Wh = (const uint16_t *)L->wq, *ld = g->d;
        RG_TRY(rg_cu_dequant_rows(ctx, n, g->wtype, (const char *)w->data + v0 * g->row_bytes, g->row_bytes, nv, 0,
                                  g->d, RG_TYPE_BF16, L->wq, g->d, err));
        const int64_t tt = lce_tile_tokens(g, L, false);
        for (int64_t t0 = 0; t0 < g->T; t0 += tt) {
            const int64_t tn = g->T - t0 < tt ? g->T - t0 : tt;
            const int64_t ne[4] = {g->d, tn, 1, 1}, s[4] = {1, g->ldh, 0, 0};
            RG_TRY(rg_cu_narrow(ctx, n, H + t0 * g->ldh, ne, s, RG_TYPE_BF16, L->tile, err));
            RG_TRY(rg_cu_gemm_half(ctx, n, CUBLAS_OP_T, CUBLAS_OP_N, nv, tn, g->d, *Wh, g->d, 0, L->tile, g->d, 0,
                                   L->z + t0 * g->chunk, g->chunk, 0, 1, RG_TYPE_BF16, err));
        }
        return RG_OK;
    }
    RG_TRY(lce_weight_f32(ctx, n, w, g, L, v0, nv, Wc, ld, err));
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_TRY(cublasSgemm(ctx->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nv, (int)g->T, (int)g->d, &one, *Wc, (int)*ld,
                           H, (int)g->ldh, &zero, L->z, (int)g->chunk));
    return RG_OK;
}

// The tensor path's dh (+)= Wh Gh for the chunk (G in L->z as F32, nv x T, leading dimension
// chunk): a half head rounds G whole into L->gh (and makes dw_c = Hh Gh^T); a quantized one
// rounds it a tile of tokens at a time into the region's second half.
rg_status lce_back_tensor(rg_cuda_ctx *ctx, const rg_node *n, const lce_geom *g, const lce_layout *L, int64_t v0,
                          int64_t nv, const uint16_t *Wh, int64_t ld, float *dh, float *dw, rg_error *err) {
    const uint32_t ht = lce_half_type(g);
    const float beta = v0 > 0 ? 1.0f : 0.0f;
    if (is_half(g->wtype)) {
        // G rounded to w's type, packed with leading dimension nv; then dh (+)= Wc Gh and dw_c = Hh Gh^T.
        const int64_t ne[4] = {nv, g->T, 1, 1}, s[4] = {1, g->chunk, 0, 0};
        RG_TRY(rg_cu_narrow(ctx, n, L->z, ne, s, ht, L->gh, err));
        RG_TRY(rg_cu_gemm_half(ctx, n, CUBLAS_OP_N, CUBLAS_OP_N, g->d, g->T, nv, Wh, ld, 0, L->gh, nv, 0, dh, g->d, 0,
                               1, ht, err, beta));
        if (dw)
            RG_TRY(rg_cu_gemm_half(ctx, n, CUBLAS_OP_N, CUBLAS_OP_T, g->d, nv, g->T, L->hh, g->d, 0, L->gh, nv, 0,
                                   dw + v0 * g->d, g->d, 0, 1, ht, err));
        return RG_OK;
    }
    const int64_t tt = lce_tile_tokens(g, L, true);
    for (int64_t t0 = 0; t0 < g->T; t0 += tt) {
        const int64_t tn = g->T - t0 < tt ? g->T - t0 : tt;
        const int64_t ne[4] = {nv, tn, 1, 1}, s[4] = {1, g->chunk, 0, 0};
        RG_TRY(rg_cu_narrow(ctx, n, L->z + t0 * g->chunk, ne, s, ht, L->tile, err));
        RG_TRY(rg_cu_gemm_half(ctx, n, CUBLAS_OP_N, CUBLAS_OP_N, g->d, tn, nv, Wh, ld, 0, L->tile, nv, 0,
                               dh + t0 * g->d, g->d, 0, 1, ht, err, beta));
    }
    return RG_OK;
}

// ---------------------------------------------------------------------------
// The cells' work

rg_status run_linear_ce(rg_cuda_ctx *ctx, const rg_node *n, const rg_exec_ctx *c, rg_error *err) {
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
    if (lce_tensor(ctx, &g) && is_half(g.wtype)) RG_TRY(lce_round_h(ctx, n, H, &g, &L, err));
    for (int64_t v0 = 0; v0 < g.V; v0 += g.chunk) {
        const int64_t nv = g.V - v0 < g.chunk ? g.V - v0 : g.chunk;
        const float *Wc = NULL;
        const uint16_t *Wh = NULL;
        int64_t ld = 0;
        RG_TRY(lce_logits(ctx, n, w, H, &g, &L, v0, nv, &Wc, &Wh, &ld, err));
        RG_LAUNCH(lce_chunk_lse_kernel, rows_grid(g.T), ROW_THREADS, 0, ctx->stream, (const float *)L.z, g.chunk, nv,
                  v0, g.T, labels, ignore, v0 == 0 ? 1 : 0, L.m, L.s, L.zt);
        CU_LAUNCHED();
    }
    RG_LAUNCH(lce_finish_kernel, 1, THREADS, 0, ctx->stream, (const float *)L.m, (const double *)L.s,
              (const float *)L.zt, labels, g.T, ignore, (const double *)L.inv_n, (float *)n->t.data);
    CU_LAUNCHED();
    return RG_OK;
}

rg_status run_linear_ce_back(rg_cuda_ctx *ctx, const rg_node *n, const rg_exec_ctx *c, rg_error *err) {
    const rg_node *fwd = n->src[2];
    lce_geom g;
    if (!fwd || !lce_geom_of(n, fwd, n->src[1], &g))
        return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda linear_ce_back '%s': shapes or strides the cell does not take",
                       n->t.name);
    float *dh = (float *)n->t.data, *dw = n->src[3] ? (float *)n->src[3]->t.data : NULL;
    if (dw && is_quant(g.wtype))
        return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda linear_ce_back '%s': a %s head is frozen (no dw)", n->t.name,
                       rg_type_get(g.wtype)->name);
    lce_layout L;
    RG_TRY(lce_scratch(c, n, &g, true, &L, err));
    const rg_tensor *w = &fwd->src[0]->t;
    const float *H = (const float *)n->src[1]->t.data, *dy = (const float *)n->src[0]->t.data;
    const float *lse = (const float *)fwd->t.data + 1;
    const int32_t *labels = (const int32_t *)fwd->src[2]->t.data;
    const int32_t ignore = (int32_t)n->ip[0];
    const rg_node_params *prm;
    RG_TRY(rg_cu_params(c, n, &prm, err));
    RG_LAUNCH(lce_inv_n_kernel, 1, THREADS, 0, ctx->stream, labels, g.T, ignore, prm, L.inv_n);
    CU_LAUNCHED();
    const float one = 1.0f, zero = 0.0f;
    const bool tensor = lce_tensor(ctx, &g);
    if (tensor && is_half(g.wtype)) RG_TRY(lce_round_h(ctx, n, H, &g, &L, err));
    for (int64_t v0 = 0; v0 < g.V; v0 += g.chunk) {
        const int64_t nv = g.V - v0 < g.chunk ? g.V - v0 : g.chunk;
        const float *Wc = NULL;
        const uint16_t *Wh = NULL;
        int64_t ld = 0;
        RG_TRY(lce_logits(ctx, n, w, H, &g, &L, v0, nv, &Wc, &Wh, &ld, err));
        RG_LAUNCH(lce_chunk_grad_kernel, rows_grid(g.T), ROW_THREADS, 0, ctx->stream, L.z, g.chunk, nv, v0, g.T,
                  labels, ignore, lse, dy, (const double *)L.inv_n);
        CU_LAUNCHED();
        if (tensor) {
            RG_TRY(lce_back_tensor(ctx, n, &g, &L, v0, nv, Wh, ld, dh, dw, err));
            continue;
        }
        // dh (+)= Wc G: d x nv times nv x T
        CUBLAS_TRY(cublasSgemm(ctx->cublas, CUBLAS_OP_N, CUBLAS_OP_N, (int)g.d, (int)g.T, (int)nv, &one, Wc, (int)ld,
                               L.z, (int)g.chunk, v0 > 0 ? &one : &zero, dh, (int)g.d));
        if (!dw) continue;
        // dw_c = H G^T: d x T times T x nv, the chunk's own columns of dw
        CUBLAS_TRY(cublasSgemm(ctx->cublas, CUBLAS_OP_N, CUBLAS_OP_T, (int)g.d, (int)nv, (int)g.T, &one, H,
                               (int)g.ldh, L.z, (int)g.chunk, &zero, dw + v0 * g.d, (int)g.d));
    }
    return RG_OK;
}

}  // namespace

// ---------------------------------------------------------------------------
// The cells (rg_cu_cell: the device set, then the run function)

// This file's cells of the CUDA column (op_table.cu lists them). The loss scales change from
// run to run: read on the device.
namespace RG_CU_CELLS {
extern const rg_op_col linear_ce = rg_cu_col(rg_cu_cell<run_linear_ce>, sup_linear_ce, work_linear_ce,
                                             "f32, f16, bf16, quantized (device decoders)", true);
extern const rg_op_col linear_ce_back = rg_cu_col(rg_cu_cell<run_linear_ce_back>, sup_linear_ce_back,
                                                  work_linear_ce_back,
                                                  "f32, f16, bf16, quantized (device decoders, no dw)", true);
}  // namespace RG_CU_CELLS
