// ops_matmul.c - the CPU kernels of MUL_MAT and OUT_PROD for every weight type
// with a dequantizer, on top of gemm.c.
//
// MUL_MAT (w [K, M, b2, b3] any type, x [K, N, c2, c3] f32) -> y [M, N, c2, c3] f32
//     y[m, n] = sum_k w[k, m] * x[k, n]; slice (i2, i3) of x uses w slice
//     (i2 / (c2 / b2), i3 / (c3 / b3)).
//   N < 8 (N < 4 for types with slower dot products, see vec_max_n), i.e.
//     generation and very short prompts: one dot product per output with the
//     type's vec_dot, the activations first converted once per column to its
//     vec_dot_type (q8_0, q8_1, q8_K; F32 for F32/F16/BF16 weights), as
//     llama.cpp does. The weights are read once per column but stay in L1/L2
//     across the columns of a 16-row tile.
//   larger N (prompt processing, training): the SGEMM, with the weights
//     dequantized to F32 panel by panel as they are packed and the activations
//     in F32, so gradients never see 8-bit activations. Except, in inference
//     (rg_exec_ctx.int8_activations), the prompt paths (mul_mat_prompt_path):
//     Q4_0, Q5_0, Q8_0, Q4_K or Q6_K weights on Q8_0 activations, on the AMX int8
//     tiles (gemm_int8_tiles.h; the emulated tiles under RG_TILES_EMULATE=1) or
//     else AVX-512 VNNI (gemm_int8.h), the same bits either way; BF16 and F16
//     weights on activations rounded to BF16, on the AMX BF16 tiles (gemm_tiles.h,
//     its AMX order; emulated under RG_TILES_EMULATE=1) or else, BF16 only, on
//     AVX512_BF16 (gemm_bf16.h). As llama.cpp does. Where neither integer GEMM serves
//     Q4_0, Q5_0, Q4_K or Q6_K (an AVX2 CPU) and N is at most rg_unpack_prompt_max_n
//     (32; 128 for the K-quants), the dot products with each 16-row tile unpacked once
//     (dot_rows.h): faster there than the SGEMM on dequantized panels, and every
//     column gets the bits of its token alone.
//
// Training's products in BF16 (rg_exec_ctx.bf16_products, training.compute_dtype=bf16): every
// product of a weight (node_bf16: MUL_MAT whatever N, no dot products, no integer GEMM; OUT_PROD's
// dX and dW) runs the same batch through rg_gemm_run(RG_SGEMM_BF16): both operands rounded to BF16, F32 sums on the matrix unit
// (gemm_tiles.h). The scratch asked for covers that path wherever it exists, so a plan does not
// depend on the flag. A frozen weight's B (a LoRA base; a session's BF16 weights in prompts) is
// read from the exec's tiles cache when it has one (tiles_cache.h): packed once for the run, not
// per product, with the same bits.
//
// OUT_PROD (a [M, K, b2, b3] any type, b [N, K, c2, c3] f32, often a transposed
// view) -> [M, N, c2, c3]: out[i, j] = sum_k a[i, k] * b[j, k], broadcasting as
// MUL_MAT. Always the SGEMM; a quantized a is dequantized row segment by row
// segment while packing. dW = out_prod(X, dY) and dX = out_prod(W, dY^T).
//
// In the SGEMM's math order (gemm.h) both ops write C = output slice with rows
// along ne1 and columns along ne0:
//   MUL_MAT:  C[n, m] = sum_k A[n, k] B[k, m],  A = x (A(n, k) = x[k, n]),  B(k, m) = w[k, m]
//   OUT_PROD: C[j, i] = sum_k A[j, k] B[k, i],  A = b (A(j, k) = b[j, k]),  B(k, i) = a[i, k]
// Every output element is summed over k in one fixed order by one thread, so
// results do not depend on the thread count.
#include <string.h>

#include "base/error.h"
#include "cpu/cpu_ops.h"
#include "cpu/dot_rows.h"
#include "cpu/gemm.h"
#include "cpu/gemm_bf16.h"
#include "cpu/gemm_int8.h"
#include "cpu/gemm_int8_tiles.h"
#include "cpu/gemm_tiles.h"
#include "cpu/tiles_cache.h"
#include "tensor/quant/quant.h"

// The column count from which MUL_MAT runs the SGEMM instead of dot products:
// N < 8 for the weight types whose dot products are fast (F32, F16, BF16,
// Q4_0, Q4_1, Q4_K, Q6_K: AVX2 kernels at 20-40 GFLOP/s), N < 4 for all other
// types. Measured with w [1536, 576] on one Zen 3 core (speed of the dot
// products / speed of the SGEMM path, including converting the activations):
//            N=2   N=4   N=5   N=6   N=7   N=8   N=10
//   f32      2.4   1.0   1.2   1.0   1.2   0.7   0.55
//   f16      3.2   1.5   1.3   0.9   1.1   0.9   0.8
//   q4_0     2.9   1.3   1.1   1.2   1.1   1.0   0.8
//   q4_K     2.6   1.4   1.3   1.0   1.1   0.8   0.8
//   q6_K     2.4   1.3   1.0   0.8   1.0   0.9   0.7
//   q8_0     1.9   1.0   0.8   0.6   0.7   0.7   0.6
//   q5_K     2.1   1.0   0.8   0.7   0.8   0.7   0.5
//   iq4_xs   1.6   1.0   0.7   0.6   0.6   0.5   0.5
// (N = 7 favours the dots because 7 rows of C take two 6-row micro-tiles.)
// At N = 1 the SGEMM would dequantize every weight to use it once: the dots
// are 4-7x faster there.
static int64_t vec_max_n(uint32_t type) {
    switch (type) {
    case RG_TYPE_F32: case RG_TYPE_F16: case RG_TYPE_BF16: case RG_TYPE_Q4_0: case RG_TYPE_Q4_1:
    case RG_TYPE_Q4_K: case RG_TYPE_Q6_K:
        return 8;
    default:
        return 4;
    }
}

static int pool_threads(const rg_exec_ctx *ctx) { return rg_threadpool_size(ctx->pool); }

// The implementation of a training product: the F32 SGEMM, or BF16 on the matrix unit.
static bool weight_leaf(const rg_node *n) {
    const rg_node *o = n->view_of ? n->view_of : n;
    return o->op == RG_OP_NONE && (o->flags & (RG_NODE_PARAM | RG_NODE_FROZEN));
}
// Whether node n's product takes BF16 under ctx->bf16_products: the products of a weight (a leaf
// parameter or frozen weight, LoRA's A and B included): MUL_MAT's x W, OUT_PROD's dX = dY W (a is
// the weight) and its dW (marked by MUL_MAT's backward, graph.h). Products of two activations (the
// materialized attention's QK^T and PV and their gradients) keep F32, as on CUDA's tensor path:
// a few percent of a step's work, and on the precision tables' fixtures their rounding was the
// difference between the tiles' BF16 gradient gap of 7.4e-3 and 5.5e-3 (docs/BENCHMARKS.md).
static bool node_bf16(const rg_exec_ctx *ctx, const rg_node *n) {
    if (!ctx->bf16_products) return false;
    if (n->op == RG_OP_MUL_MAT) return weight_leaf(n->src[0]);
    if (n->op == RG_OP_OUT_PROD) return weight_leaf(n->src[0]) || n->ip[1] == RG_OUT_PROD_WEIGHT_GRAD;
    return true;
}

rg_status cpu_run_products(rg_exec_ctx *ctx, const rg_node *weight, const rg_gemm_batch *bt, void *work,
                           size_t work_size, rg_error *err) {
    if (ctx->bf16_products && ctx->tiles_cache && rg_node_frozen(weight))
        return rg_tiles_cache_run(ctx->tiles_cache, ctx->pool, bt, work, work_size, err);
    return rg_gemm_run(ctx->pool, ctx->bf16_products ? RG_SGEMM_BF16 : RG_SGEMM_AUTO, bt, work, work_size, err);
}
static rg_status run_node_products(rg_exec_ctx *ctx, const rg_node *n, const rg_gemm_batch *bt, rg_error *err) {
    if (!node_bf16(ctx, n)) return rg_gemm_run(ctx->pool, RG_SGEMM_AUTO, bt, ctx->scratch, ctx->scratch_size, err);
    return cpu_run_products(ctx, n->src[0], bt, ctx->scratch, ctx->scratch_size, err);
}

// The scratch of a batch: the F32 SGEMM's, or the BF16 path's where this CPU has one (the larger).
static size_t product_work(const rg_gemm_batch *bt, int n_threads) {
    size_t work = rg_gemm_work_size(RG_SGEMM_AUTO, bt, n_threads);
    if (rg_gemm_tiles_path() != RG_TILES_NONE) {
        size_t bf16 = rg_gemm_work_size(RG_SGEMM_BF16, bt, n_threads);
        if (bf16 > work) work = bf16;
    }
    return work;
}

static const char *node_name(const rg_node *n) { return n->t.name[0] ? n->t.name : "(unnamed)"; }

// Puts "op node: " before the message gemm.c wrote.
static rg_status prefix_error(rg_error *err, rg_status st, const char *op, const rg_node *n) {
    if (!err) return st;
    char msg[sizeof err->msg];
    memcpy(msg, err->msg, sizeof msg);
    msg[sizeof msg - 1] = 0;
    return rg_fail(err, st, "%s %s: %s", op, node_name(n), msg);
}

// Element strides of an F32 tensor in floats; false when a stride is not a whole float.
static bool f32_strides(const rg_tensor *t, int64_t s[4]) {
    for (int i = 0; i < 4; i++) {
        if (t->nb[i] % sizeof(float)) return false;
        s[i] = (int64_t)(t->nb[i] / sizeof(float));
    }
    return true;
}

// Rows of a non-F32 tensor must be whole contiguous blocks to be dequantized.
static bool rows_packed(const rg_tensor *t) { return t->nb[0] == rg_type_get(t->type)->type_size; }

// ---------------------------------------------------------------------------
// Shapes and broadcasting, shared by both ops.

typedef struct mm_shape {
    int64_t K, M, N;       // the op's names (see the file comment)
    int64_t c2, c3;        // slices of the output and of the F32 operand
    int64_t r2, r3;        // broadcast ratios: weight slice = (i2 / r2, i3 / r3)
} mm_shape;

static rg_status check_common(const rg_node *n, const rg_tensor *w, const rg_tensor *x, const char *op,
                              rg_error *err) {
    const rg_tensor *y = &n->t;
    if (x->type != RG_TYPE_F32 || y->type != RG_TYPE_F32)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s %s: src1 and the output must be f32 (got %s and %s)", op,
                       node_name(n), rg_type_get(x->type)->name, rg_type_get(y->type)->name);
    if (w->ne[2] <= 0 || w->ne[3] <= 0 || x->ne[2] % w->ne[2] || x->ne[3] % w->ne[3])
        return rg_fail(err, RG_ERR_ARG, "%s %s: src1 slices [%lld, %lld] are not a multiple of src0's [%lld, %lld]",
                       op, node_name(n), (long long)x->ne[2], (long long)x->ne[3], (long long)w->ne[2],
                       (long long)w->ne[3]);
    if (y->nb[0] != sizeof(float) || y->nb[1] % sizeof(float) || y->nb[2] % sizeof(float) || y->nb[3] % sizeof(float))
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s %s: the output must have contiguous f32 rows", op, node_name(n));
    const rg_quant_ops *ops = rg_quant_get(w->type);
    if (w->type != RG_TYPE_F32 && !ops->dequant)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s %s: no dequantizer for src0 type %s", op, node_name(n),
                       rg_type_get(w->type)->name);
    if (w->type != RG_TYPE_F32 && !rows_packed(w))
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s %s: src0 of type %s must have contiguous rows (nb[0] = %zu)", op,
                       node_name(n), rg_type_get(w->type)->name, w->nb[0]);
    return RG_OK;
}

static mm_shape shape_of(const rg_tensor *w, const rg_tensor *x, int64_t K, int64_t M, int64_t N) {
    mm_shape s = {K, M, N, x->ne[2], x->ne[3], 1, 1};
    if (w->ne[2] > 0) s.r2 = x->ne[2] / w->ne[2];
    if (w->ne[3] > 0) s.r3 = x->ne[3] / w->ne[3];
    return s;
}

// ---------------------------------------------------------------------------
// MUL_MAT through the SGEMM.

typedef struct mm_gemm_ctx {
    const rg_tensor *w, *x, *y;
    mm_shape s;
    int64_t ws[4], xs[4], ys[4];  // strides in floats (ws only for an F32 w)
} mm_gemm_ctx;

static void mul_mat_get(const void *ctx, int64_t p, rg_gemm_problem *prob) {
    const mm_gemm_ctx *c = ctx;
    int64_t i2 = p % c->s.c2, i3 = p / c->s.c2, w2 = i2 / c->s.r2, w3 = i3 / c->s.r3;
    memset(prob, 0, sizeof *prob);
    // A(n, k) = x[k, n]
    prob->a = (const float *)c->x->data + i2 * c->xs[2] + i3 * c->xs[3];
    prob->a_rs = c->xs[1], prob->a_cs = c->xs[0];
    // B(k, m) = w[k, m]
    prob->b.type = c->w->type;
    if (c->w->type == RG_TYPE_F32) {
        prob->b.data = (const float *)c->w->data + w2 * c->ws[2] + w3 * c->ws[3];
        prob->b.rs = c->ws[0], prob->b.cs = c->ws[1];
    } else {
        prob->b.data = (const char *)c->w->data + w2 * c->w->nb[2] + w3 * c->w->nb[3];
        prob->b.row_stride = c->w->nb[1];
        prob->b.rows_along_k = true;
    }
    // C(n, m) = y[m, n]
    prob->c = (float *)c->y->data + i2 * c->ys[2] + i3 * c->ys[3];
    prob->ldc = c->ys[1];
}

static rg_gemm_batch mul_mat_batch(const mm_gemm_ctx *c) {
    rg_gemm_batch bt = {c->s.N, c->s.M, c->s.K, c->w->type, true, false, c->s.c2 * c->s.c3, mul_mat_get, c};
    return bt;
}

// ---------------------------------------------------------------------------
// MUL_MAT through dot products (small N).

typedef struct mm_vec_job {
    const rg_quant_ops *ops;       // the weight type's
    rg_dot_rows_fn rows;           // several rows per pass (dot_rows.h), or NULL: ops->vec_dot per row
    rg_dot_rows2_fn rows2;         // two columns per pass, each with rows' bits (dot_rows.h), or NULL
    rg_dot_rows3_fn rows3;         // three columns per pass, the same, or NULL
    const rg_quant_ops *act_ops;   // the activation type's (quantize), NULL for F32 activations
    const rg_tensor *w, *x, *y;
    mm_shape s;
    bool x_direct;                 // F32 activations read in place (x rows contiguous)
    char *xq;                      // [c3][c2][N] activation rows of xq_row bytes (unless x_direct)
    size_t xq_row;
    float *gather;                 // [n_threads][K] a strided x column gathered before quantizing
    // Many columns (N >= rg_unpack_min_columns) of a type that has them (dot_rows.h): each tile's rows unpacked
    // once into the thread's [VEC_TILE][unpacked_row] bytes of unpacked, then dotted four or two columns a pass.
    rg_unpack_rows_fn unpack;
    rg_dot_rows2_fn unpacked2;
    rg_dot_rows4_fn unpacked4;     // four columns a pass over them, or NULL (pairs only)
    uint8_t *unpacked;             // [n_threads][VEC_TILE * unpacked_row]
    size_t unpacked_row;
} mm_vec_job;

static const float *x_column(const mm_vec_job *j, int64_t n, int64_t i2, int64_t i3, float *gather) {
    const rg_tensor *x = j->x;
    const char *base = (const char *)x->data + n * x->nb[1] + i2 * x->nb[2] + i3 * x->nb[3];
    if (x->nb[0] == sizeof(float)) return (const float *)base;
    for (int64_t k = 0; k < j->s.K; k++) memcpy(&gather[k], base + k * x->nb[0], sizeof(float));
    return gather;
}

static void vec_convert(void *p, int ith, int nth) {
    mm_vec_job *j = p;
    int64_t cols = j->s.N * j->s.c2 * j->s.c3, c0, c1;
    rg_split_range(cols, ith, nth, &c0, &c1);
    float *gather = j->gather + (size_t)ith * (size_t)j->s.K;
    for (int64_t c = c0; c < c1; c++) {
        int64_t n = c % j->s.N, i2 = (c / j->s.N) % j->s.c2, i3 = c / (j->s.N * j->s.c2);
        const float *col = x_column(j, n, i2, i3, gather);
        char *dst = j->xq + (size_t)c * j->xq_row;
        if (j->act_ops) j->act_ops->quantize(col, dst, j->s.K, NULL);
        else if (col != (const float *)dst) memcpy(dst, col, j->xq_row);
    }
}

// Activations up to this many elements are converted by the calling thread.
#define VEC_SERIAL_CONVERT 16384

// Work items are (slice, tile of 16 weight rows); a tile's rows stay in cache
// while every column passes over them.
#define VEC_TILE 16

// Column n of slice (i2, i3) as the dot products read it: x in place, or its converted row.
static inline const void *vec_x(const mm_vec_job *j, int64_t n, int64_t i2, int64_t i3) {
    if (j->x_direct) return (const char *)j->x->data + n * j->x->nb[1] + i2 * j->x->nb[2] + i3 * j->x->nb[3];
    return j->xq + (size_t)((i3 * j->s.c2 + i2) * j->s.N + n) * j->xq_row;
}

static int64_t vec_tiles(const mm_vec_job *j) {
    return (j->s.M + VEC_TILE - 1) / VEC_TILE * j->s.c2 * j->s.c3;
}

// Tiles [t0, t1) of one job. The first tile's slice (i2, i3), weight slice
// (i2 / r2, i3 / r3) and row are divided out once; after that counters walk
// them (a 64-bit division per tile cost ~16% of a token's overhead).
static void vec_run_tiles(const mm_vec_job *j, int64_t t0, int64_t t1, int ith) {
    const mm_shape *s = &j->s;
    if (t0 >= t1) return;
    const int64_t tiles = (s->M + VEC_TILE - 1) / VEC_TILE;
    const size_t wnb1 = j->w->nb[1];
    int64_t slice = t0 / tiles, tile = t0 % tiles;
    int64_t i2 = slice % s->c2, i3 = slice / s->c2;
    int64_t w2 = i2 / s->r2, k2 = i2 % s->r2, w3 = i3 / s->r3, k3 = i3 % s->r3;  // k: position in the broadcast run
    for (int64_t t = t0; t < t1; t++) {
        int64_t m0 = tile * VEC_TILE, m1 = m0 + VEC_TILE < s->M ? m0 + VEC_TILE : s->M;
        const char *w = (const char *)j->w->data + w2 * j->w->nb[2] + w3 * j->w->nb[3];
        char *y = (char *)j->y->data + i2 * j->y->nb[2] + i3 * j->y->nb[3];
        int64_t n = 0;
        if (j->unpacked) {  // the tile's rows unpacked once, then four (or two) columns per pass over them
            uint8_t *u = j->unpacked + (size_t)ith * VEC_TILE * j->unpacked_row;
            j->unpack(s->K, m1 - m0, w + m0 * wnb1, wnb1, u);
            for (; j->unpacked4 && n + 4 <= s->N; n += 4) {
                const void *const xs[4] = {vec_x(j, n, i2, i3), vec_x(j, n + 1, i2, i3), vec_x(j, n + 2, i2, i3),
                                           vec_x(j, n + 3, i2, i3)};
                float *const ys[4] = {(float *)(y + n * j->y->nb[1]) + m0, (float *)(y + (n + 1) * j->y->nb[1]) + m0,
                                      (float *)(y + (n + 2) * j->y->nb[1]) + m0, (float *)(y + (n + 3) * j->y->nb[1]) + m0};
                j->unpacked4(s->K, m1 - m0, u, j->unpacked_row, xs, ys);
            }
            for (; n + 2 <= s->N; n += 2) {
                float *y0 = (float *)(y + n * j->y->nb[1]), *y1 = (float *)(y + (n + 1) * j->y->nb[1]);
                j->unpacked2(s->K, m1 - m0, u, j->unpacked_row, vec_x(j, n, i2, i3), vec_x(j, n + 1, i2, i3),
                             &y0[m0], &y1[m0]);
            }
        }
        for (; j->rows3 && n + 3 <= s->N; n += 3) {  // three columns per pass
            const void *const xs[3] = {vec_x(j, n, i2, i3), vec_x(j, n + 1, i2, i3), vec_x(j, n + 2, i2, i3)};
            float *const ys[3] = {(float *)(y + n * j->y->nb[1]) + m0, (float *)(y + (n + 1) * j->y->nb[1]) + m0,
                                  (float *)(y + (n + 2) * j->y->nb[1]) + m0};
            j->rows3(s->K, m1 - m0, w + m0 * wnb1, wnb1, xs, ys);
        }
        for (; j->rows2 && n + 2 <= s->N; n += 2) {  // two columns per pass over the tile's rows
            float *y0 = (float *)(y + n * j->y->nb[1]), *y1 = (float *)(y + (n + 1) * j->y->nb[1]);
            j->rows2(s->K, m1 - m0, w + m0 * wnb1, wnb1, vec_x(j, n, i2, i3), vec_x(j, n + 1, i2, i3), &y0[m0],
                     &y1[m0]);
        }
        for (; n < s->N; n++) {
            const void *xc = vec_x(j, n, i2, i3);
            float *yc = (float *)(y + n * j->y->nb[1]);
            if (j->rows) j->rows(s->K, m1 - m0, w + m0 * wnb1, wnb1, xc, &yc[m0]);
            else
                for (int64_t m = m0; m < m1; m++) j->ops->vec_dot(s->K, &yc[m], w + m * wnb1, xc);
        }
        if (++tile < tiles) continue;
        tile = 0;  // next slice: i2 first, then i3
        if (++k2 == s->r2) k2 = 0, w2++;
        if (++i2 < s->c2) continue;
        i2 = 0, w2 = 0, k2 = 0;
        if (++k3 == s->r3) k3 = 0, w3++;
        i3++;
    }
}

static void vec_dots(void *p, int ith, int nth) {
    const mm_vec_job *j = p;
    int64_t t0, t1;
    rg_split_range(vec_tiles(j), ith, nth, &t0, &t1);
    vec_run_tiles(j, t0, t1, ith);
}

// Several jobs as one parallel section: their tiles in order, split as one list.
typedef struct mm_vec_group {
    const mm_vec_job *jobs;
    int n;
    int64_t total;  // tiles of all jobs
} mm_vec_group;

static void vec_group_dots(void *p, int ith, int nth) {
    const mm_vec_group *g = p;
    int64_t t0, t1, base = 0;
    rg_split_range(g->total, ith, nth, &t0, &t1);
    for (int i = 0; i < g->n && base < t1; i++) {
        int64_t nt = vec_tiles(&g->jobs[i]);
        int64_t a = t0 > base ? t0 - base : 0, b = t1 - base < nt ? t1 - base : nt;
        if (a < b) vec_run_tiles(&g->jobs[i], a, b, ith);
        base += nt;
    }
}

// Whether the dot products can run this weight (whatever the column count).
static bool vec_capable(const rg_tensor *w, int64_t K) {
    const rg_quant_ops *ops = rg_quant_get(w->type);
    if (K <= 0 || !ops->vec_dot || !rows_packed(w)) return false;
    int64_t vbs = rg_type_get(ops->vec_dot_type)->block_size;
    if (ops->vec_dot_type != RG_TYPE_F32 && !rg_quant_get(ops->vec_dot_type)->quantize) return false;
    return vbs > 0 && K % vbs == 0;
}

// Whether MUL_MAT runs the dot products, and the sizes that path needs.
static bool mul_mat_uses_vec(const rg_tensor *w, int64_t K, int64_t N) {
    return N < vec_max_n(w->type) && vec_capable(w, K);
}

// A node marked RG_MUL_MAT_COLUMNS (graph.h): each column must get the bits a MUL_MAT of that
// column alone gets. One column takes the dot products where the weight has them, and the dot
// products give every column the same arithmetic whatever N is (vec_run_tiles: each column's
// rows in the same groups), so such a node takes them for any N, reading each weight tile once
// for all its columns (a speculative decoder's verification batch costs little more than one
// token's weight reads). Without them, columns_one_by_one runs the node a column at a time.
static bool node_columns(const rg_node *n) { return n->op == RG_OP_MUL_MAT && n->ip[0] == RG_MUL_MAT_COLUMNS; }

static bool node_uses_vec(const rg_node *n, const rg_tensor *w, int64_t K, int64_t N) {
    return mul_mat_uses_vec(w, K, N) || (node_columns(n) && vec_capable(w, K));
}

static size_t vec_xq_row(const rg_tensor *w, int64_t K) {
    return rg_type_row_size(rg_quant_get(w->type)->vec_dot_type, K);
}

static bool vec_x_direct(const rg_tensor *w, const rg_tensor *x) {
    return rg_quant_get(w->type)->vec_dot_type == RG_TYPE_F32 && x->nb[0] == sizeof(float);
}

// The unpacked rows' bytes per row (0: the node does not unpack: too few columns, or a type without it).
static size_t vec_unpacked_row(const rg_tensor *w, int64_t K, int64_t N) {
    rg_dot_rows2_fn pair;
    if (N < rg_unpack_min_columns(w->type) || !rg_cpu_unpack_rows(w->type, K, &pair)) return 0;
    return rg_unpacked_row_bytes(w->type, K);
}

// Scratch: [converted columns][gathered columns][unpacked tiles], each part 64-byte aligned.
static size_t vec_work(const rg_tensor *w, const rg_tensor *x, int64_t K, int64_t N, int n_threads) {
    if (vec_x_direct(w, x)) return 0;
    size_t cols = (size_t)(N * x->ne[2] * x->ne[3]);
    size_t xq = (cols * vec_xq_row(w, K) + 63) / 64 * 64;
    size_t gather = x->nb[0] == sizeof(float) ? 0 : (size_t)n_threads * (size_t)K * sizeof(float);
    size_t unpacked = (size_t)n_threads * VEC_TILE * vec_unpacked_row(w, K, N);
    return xq + (gather + 63) / 64 * 64 + unpacked;
}

// The prompt paths of inference (when the exec allows 8-bit or BF16 activations), best first.
typedef enum mm_prompt_path {
    MM_PROMPT_NONE,         // the SGEMM on F32 activations
    MM_PROMPT_INT8_TILES,   // gemm_int8_tiles.h: TDPBUSD (AMX, or emulated under RG_TILES_EMULATE=1)
    MM_PROMPT_INT8_VNNI,    // gemm_int8.h: VPDPBUSD, the same bits
    MM_PROMPT_BF16_TILES,   // gemm_tiles.h: TDPBF16PS for BF16 and F16 weights (AMX, or emulated)
    MM_PROMPT_BF16_AVX512,  // gemm_bf16.h: VDPBF16PS for BF16 weights
    MM_PROMPT_DOTS,         // the dot products, tiles unpacked once (dot_rows.h), where no integer GEMM serves the
                            // type and N is at most rg_unpack_prompt_max_n: each column the bits of a token alone
} mm_prompt_path;

// The BF16 tiles take prompts only on the matrix unit itself (and a build with its kernel) or its
// emulation (asked for): a CPU with AVX512_BF16 and no AMX keeps gemm_bf16.h, one with neither the SGEMM.
static bool prompt_bf16_tiles(void) {
    const rg_tile_path p = rg_gemm_tiles_path();
    return (p == RG_TILES_AMX && rg_gemm_tiles_amx_built) || p == RG_TILES_EMULATED;
}

bool cpu_prompt_bf16_tiles(uint32_t weight_type) {
    return (weight_type == RG_TYPE_BF16 || weight_type == RG_TYPE_F16) && prompt_bf16_tiles();
}

// The prompt path MUL_MAT may take: a weight type one has, one slice, F32 activations with
// contiguous columns, and not the dot-product path.
static mm_prompt_path mul_mat_prompt_path(const rg_tensor *w, const rg_tensor *x, int64_t K, int64_t N) {
    if (mul_mat_uses_vec(w, K, N) || !rows_packed(w) || w->ne[2] != 1 || w->ne[3] != 1 || x->ne[2] != 1 ||
        x->ne[3] != 1 || x->nb[0] != sizeof(float) || x->nb[1] % sizeof(float) != 0)
        return MM_PROMPT_NONE;
    if (w->type == RG_TYPE_BF16 || w->type == RG_TYPE_F16) {
        if (prompt_bf16_tiles()) return MM_PROMPT_BF16_TILES;
        return w->type == RG_TYPE_BF16 && rg_gemm_bf16_supports(K) ? MM_PROMPT_BF16_AVX512 : MM_PROMPT_NONE;
    }
    if (rg_gemm_int8_tiles_supports(w->type, K)) return MM_PROMPT_INT8_TILES;
    if (rg_gemm_int8_supports(w->type, K)) return MM_PROMPT_INT8_VNNI;
    rg_dot_rows2_fn pair;
    if (N <= rg_unpack_prompt_max_n(w->type) && vec_capable(w, K) && rg_cpu_unpack_rows(w->type, K, &pair))
        return MM_PROMPT_DOTS;
    return MM_PROMPT_NONE;
}

// Scratch bytes of a prompt path (bt: the node's SGEMM batch, which the BF16 tiles run).
static size_t prompt_work(mm_prompt_path pp, const rg_tensor *w, const rg_tensor *x, const rg_gemm_batch *bt, int64_t K,
                          int64_t N, int n_threads) {
    switch (pp) {
    case MM_PROMPT_INT8_TILES: return rg_gemm_int8_tiles_work(K, N, n_threads);
    case MM_PROMPT_INT8_VNNI: return rg_gemm_int8_work(K, N, n_threads);
    case MM_PROMPT_BF16_TILES: return rg_gemm_tiles_work_size(bt, n_threads);
    case MM_PROMPT_BF16_AVX512: return rg_gemm_bf16_work(K, N, n_threads);
    case MM_PROMPT_DOTS: return vec_work(w, x, K, N, n_threads);
    default: return 0;
    }
}

size_t cpu_mul_mat_work(const rg_node *n, int n_threads) {
    const rg_tensor *w = &n->src[0]->t, *x = &n->src[1]->t;
    int64_t K = w->ne[0], M = w->ne[1], N = x->ne[1];
    if (n_threads < 1) n_threads = 1;
    mm_gemm_ctx c = {w, x, &n->t, shape_of(w, x, K, M, N), {0}, {0}, {0}};
    rg_gemm_batch bt = mul_mat_batch(&c);
    if (node_uses_vec(n, w, K, N)) {  // the dot products, or the BF16 path in training (rg_exec_ctx.bf16_products)
        size_t work = vec_work(w, x, K, N, n_threads);
        if (rg_gemm_tiles_path() != RG_TILES_NONE) {
            size_t bf16 = rg_gemm_work_size(RG_SGEMM_BF16, &bt, n_threads);
            if (bf16 > work) work = bf16;
        }
        return work;
    }
    size_t work = product_work(&bt, n_threads);
    // planned whether or not the exec allows the prompt paths (the plan does not know)
    size_t q = prompt_work(mul_mat_prompt_path(w, x, K, N), w, x, &bt, K, N, n_threads);
    if (q > work) work = q;
    return work;
}

// The checks every MUL_MAT passes; *s is its shape.
static rg_status mul_mat_check(const rg_node *n, mm_shape *s, rg_error *err) {
    const rg_tensor *w = &n->src[0]->t, *x = &n->src[1]->t, *y = &n->t;
    rg_status st = check_common(n, w, x, rg_op_name(RG_OP_MUL_MAT), err);
    if (st != RG_OK) return st;
    int64_t K = w->ne[0], M = w->ne[1], N = x->ne[1];
    if (x->ne[0] != K || y->ne[0] != M || y->ne[1] != N || y->ne[2] != x->ne[2] || y->ne[3] != x->ne[3]) {
        char a[64], b[64], c[64];
        return rg_fail(err, RG_ERR_ARG, "mul_mat %s: shapes w %s, x %s, y %s do not match", node_name(n),
                       rg_tensor_shape_str(w, a, sizeof a), rg_tensor_shape_str(x, b, sizeof b),
                       rg_tensor_shape_str(y, c, sizeof c));
    }
    *s = shape_of(w, x, K, M, N);
    return RG_OK;
}

// The dot-product job of a checked node (the activations not yet converted).
static rg_status vec_job_of(const rg_exec_ctx *ctx, const rg_node *n, const mm_shape *s, mm_vec_job *j,
                            rg_error *err) {
    const rg_tensor *w = &n->src[0]->t, *x = &n->src[1]->t;
    size_t need = vec_work(w, x, s->K, s->N, pool_threads(ctx));
    if (ctx->scratch_size < need || (need && !ctx->scratch))
        return rg_fail(err, RG_ERR_ARG, "mul_mat %s: scratch of %zu bytes is below the %zu needed", node_name(n),
                       ctx->scratch_size, need);
    const rg_quant_ops *ops = rg_quant_get(w->type);
    rg_dot_rows_fn rows = rg_cpu_dot_rows(w->type);
    *j = (mm_vec_job){ops, rows, rows ? rg_cpu_dot_rows2(w->type) : NULL, rows ? rg_cpu_dot_rows3(w->type) : NULL,
                      NULL, w, x, &n->t, *s, vec_x_direct(w, x), NULL, vec_xq_row(w, s->K), NULL,
                      NULL, NULL, NULL, NULL, 0};
    if (ops->vec_dot_type != RG_TYPE_F32) j->act_ops = rg_quant_get(ops->vec_dot_type);
    if (!j->x_direct) {
        size_t cols = (size_t)(s->N * s->c2 * s->c3);
        j->xq = ctx->scratch;
        j->gather = (float *)((char *)ctx->scratch + (cols * j->xq_row + 63) / 64 * 64);
        const size_t gather = x->nb[0] == sizeof(float) ? 0 : (size_t)pool_threads(ctx) * (size_t)s->K * 4;
        j->unpacked_row = vec_unpacked_row(w, s->K, s->N);
        if (j->unpacked_row) {
            j->unpack = rg_cpu_unpack_rows(w->type, s->K, &j->unpacked2);
            j->unpacked4 = rg_cpu_unpacked_rows4(w->type);
            j->unpacked = (uint8_t *)j->gather + (gather + 63) / 64 * 64;
        }
    }
    return RG_OK;
}

// Converts the job's activations into the scratch (unless read in place). A
// few columns (generation: one) are converted by the calling thread: far
// cheaper than handing the work to the pool and waiting for it.
static void vec_convert_all(rg_exec_ctx *ctx, mm_vec_job *j) {
    if (j->x_direct) return;
    int64_t cols = j->s.N * j->s.c2 * j->s.c3;
    if (cols * j->s.K <= VEC_SERIAL_CONVERT) vec_convert(j, 0, 1);
    else rg_threadpool_run(ctx->pool, vec_convert, j);
}

// A RG_MUL_MAT_COLUMNS node whose weight has no dot products: each column as a node of its own
// (the path a single token's MUL_MAT takes: the SGEMM with N = 1), in place in n's output.
static rg_status columns_one_by_one(rg_exec_ctx *ctx, const rg_node *n, rg_error *err) {
    rg_node xc, yc;
    for (int64_t j = 0; j < n->src[1]->t.ne[1]; j++) {
        rg_mul_mat_column(n, j, &xc, &yc);
        rg_status st = cpu_mul_mat(ctx, &yc, err);
        if (st) return st;
    }
    return RG_OK;
}

rg_status cpu_mul_mat(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const rg_tensor *w = &n->src[0]->t, *x = &n->src[1]->t, *y = &n->t;
    mm_shape s;
    rg_status st = mul_mat_check(n, &s, err);
    if (st != RG_OK) return st;
    int64_t K = s.K, M = s.M, N = s.N;
    if (M == 0 || N == 0 || s.c2 == 0 || s.c3 == 0) return RG_OK;
    if (!node_bf16(ctx, n) && node_uses_vec(n, w, K, N)) {
        mm_vec_job j;
        if ((st = vec_job_of(ctx, n, &s, &j, err))) return st;
        vec_convert_all(ctx, &j);
        rg_threadpool_run(ctx->pool, vec_dots, &j);
        return RG_OK;
    }
    if (node_columns(n) && N > 1) return columns_one_by_one(ctx, n, err);
    if (ctx->int8_activations) {
        const mm_prompt_path pp = mul_mat_prompt_path(w, x, K, N);
        const int64_t ldx = (int64_t)(x->nb[1] / sizeof(float)), ldy = (int64_t)(y->nb[1] / sizeof(float));
        mm_gemm_ctx pc = {w, x, y, s, {0}, {0}, {0}};
        const bool strided = f32_strides(x, pc.xs) && f32_strides(y, pc.ys);  // always, for checked nodes
        rg_gemm_batch pbt = mul_mat_batch(&pc);
        // a scratch planned without this path (none is short when the plan asked cpu_mul_mat_work) takes the SGEMM
        const bool fits = pp != MM_PROMPT_NONE && strided &&
                          ctx->scratch_size >= prompt_work(pp, w, x, &pbt, K, N, pool_threads(ctx));
        if (fits && pp == MM_PROMPT_DOTS) {
            mm_vec_job j;
            if ((st = vec_job_of(ctx, n, &s, &j, err))) return st;
            vec_convert_all(ctx, &j);
            rg_threadpool_run(ctx->pool, vec_dots, &j);
            return RG_OK;
        }
        if (fits && pp == MM_PROMPT_INT8_TILES) {
            rg_gemm_int8_tiles(ctx->pool, rg_int8_tiles_path(), w->type, K, M, N, w->data, w->nb[1], x->data, ldx,
                               y->data, ldy, ctx->scratch);
            return RG_OK;
        }
        if (fits && pp == MM_PROMPT_INT8_VNNI) {
            rg_gemm_int8(ctx->pool, w->type, K, M, N, w->data, w->nb[1], x->data, ldx, y->data, ldy, ctx->scratch);
            return RG_OK;
        }
        if (fits && pp == MM_PROMPT_BF16_TILES) {
            // a session's weights held as packed tiles when it keeps a cache (the same bits)
            st = ctx->tiles_cache && rg_node_frozen(n->src[0])
                     ? rg_tiles_cache_run(ctx->tiles_cache, ctx->pool, &pbt, ctx->scratch, ctx->scratch_size, err)
                     : rg_gemm_tiles_run(ctx->pool, rg_gemm_tiles_path(), &pbt, ctx->scratch, ctx->scratch_size, err);
            return st == RG_OK ? RG_OK : prefix_error(err, st, rg_op_name(RG_OP_MUL_MAT), n);
        }
        if (fits && pp == MM_PROMPT_BF16_AVX512) {
            rg_gemm_bf16(ctx->pool, K, M, N, w->data, w->nb[1], x->data, ldx, y->data, ldy, ctx->scratch);
            return RG_OK;
        }
    }
    mm_gemm_ctx c = {w, x, y, s, {0}, {0}, {0}};
    if ((w->type == RG_TYPE_F32 && !f32_strides(w, c.ws)) || !f32_strides(x, c.xs) || !f32_strides(y, c.ys))
        return rg_fail(err, RG_ERR_UNSUPPORTED, "mul_mat %s: an f32 stride is not a whole number of floats",
                       node_name(n));
    rg_gemm_batch bt = mul_mat_batch(&c);
    st = run_node_products(ctx, n, &bt, err);
    return st == RG_OK ? RG_OK : prefix_error(err, st, rg_op_name(RG_OP_MUL_MAT), n);
}

static const rg_node *owner_of(const rg_node *n) { return n->view_of ? n->view_of : n; }

// The CPU's fusion hook of MUL_MAT (ops.h's rg_group_fn): the MUL_MAT nodes after node i (up to
// `to`, views and leaves between them skipped: they run nothing) that read the same src[1] and
// no output of the group: q, k and v of a layer, gate and up. A loss is never grouped.
int cpu_mul_mat_group(rg_graph *g, int i, int to, rg_node **grp, int *last) {
    rg_node *n = g->nodes[i];
    int cnt = 0;
    grp[cnt++] = n;
    *last = i;
    if (n->flags & RG_NODE_LOSS) return cnt;
    for (int k = i + 1; k < to && cnt < RG_GROUP_MAX; k++) {
        rg_node *m = g->nodes[k];
        if (m->op == RG_OP_NONE || rg_op_defs[m->op].is_view) continue;
        if (m->op != RG_OP_MUL_MAT || m->src[1] != n->src[1] || (m->flags & RG_NODE_LOSS)) break;
        bool reads_group = false;
        for (int q = 0; q < cnt; q++)
            if (owner_of(m->src[0]) == grp[q] || owner_of(m->src[1]) == grp[q]) reads_group = true;
        if (reads_group) break;
        grp[cnt++] = m;
        *last = k;
    }
    return cnt;
}

// Consecutive MUL_MATs that read the same activations (q, k, v of a layer;
// gate and up) as one parallel section when they all take the dot products
// with the same activation type: the activations converted once, every
// node's tiles split over the threads as one list. Each output element is
// computed exactly as cpu_mul_mat computes it. Anything else runs node by node.
#define VEC_GROUP_MAX 8

rg_status cpu_mul_mat_many(rg_exec_ctx *ctx, rg_node *const *nodes, int n, rg_error *err) {
    mm_vec_job jobs[VEC_GROUP_MAX];
    bool grouped = n >= 2 && n <= VEC_GROUP_MAX && !ctx->bf16_products;
    for (int i = 0; i < n && grouped; i++) {
        const rg_node *nd = nodes[i];
        mm_shape s;
        rg_error ignored;
        grouped = nd->op == RG_OP_MUL_MAT && nd->src[1] == nodes[0]->src[1] && mul_mat_check(nd, &s, &ignored) == RG_OK &&
                  s.M > 0 && s.N > 0 && s.c2 > 0 && s.c3 > 0 && node_uses_vec(nd, &nd->src[0]->t, s.K, s.N) &&
                  vec_job_of(ctx, nd, &s, &jobs[i], &ignored) == RG_OK;
        if (grouped && i > 0)
            grouped = jobs[i].act_ops == jobs[0].act_ops && jobs[i].x_direct == jobs[0].x_direct &&
                      jobs[i].xq_row == jobs[0].xq_row;
    }
    if (!grouped) {
        for (int i = 0; i < n; i++) {
            rg_status st = cpu_mul_mat(ctx, nodes[i], err);
            if (st) return st;
        }
        return RG_OK;
    }
    vec_convert_all(ctx, &jobs[0]);  // the others read the same converted rows
    mm_vec_group g = {jobs, n, 0};
    for (int i = 0; i < n; i++) g.total += vec_tiles(&jobs[i]);
    rg_threadpool_run(ctx->pool, vec_group_dots, &g);
    return RG_OK;
}

// ---------------------------------------------------------------------------
// OUT_PROD.

typedef struct op_gemm_ctx {
    const rg_tensor *a, *b, *y;
    mm_shape s;
    int64_t as[4], bs[4], ys[4];
} op_gemm_ctx;

static void out_prod_get(const void *ctx, int64_t p, rg_gemm_problem *prob) {
    const op_gemm_ctx *c = ctx;
    int64_t i2 = p % c->s.c2, i3 = p / c->s.c2, a2 = i2 / c->s.r2, a3 = i3 / c->s.r3;
    memset(prob, 0, sizeof *prob);
    // A(j, k) = b[j, k]
    prob->a = (const float *)c->b->data + i2 * c->bs[2] + i3 * c->bs[3];
    prob->a_rs = c->bs[0], prob->a_cs = c->bs[1];
    // B(k, i) = a[i, k]: row k of a
    prob->b.type = c->a->type;
    if (c->a->type == RG_TYPE_F32) {
        prob->b.data = (const float *)c->a->data + a2 * c->as[2] + a3 * c->as[3];
        prob->b.rs = c->as[1], prob->b.cs = c->as[0];
    } else {
        prob->b.data = (const char *)c->a->data + a2 * c->a->nb[2] + a3 * c->a->nb[3];
        prob->b.row_stride = c->a->nb[1];
        prob->b.rows_along_k = false;
    }
    // C(j, i) = out[i, j]
    prob->c = (float *)c->y->data + i2 * c->ys[2] + i3 * c->ys[3];
    prob->ldc = c->ys[1];
}

static rg_gemm_batch out_prod_batch(const op_gemm_ctx *c) {
    rg_gemm_batch bt = {c->s.N, c->s.M, c->s.K, c->a->type, false, false, c->s.c2 * c->s.c3, out_prod_get, c};
    return bt;
}

size_t cpu_out_prod_work(const rg_node *n, int n_threads) {
    const rg_tensor *a = &n->src[0]->t, *b = &n->src[1]->t;
    if (n_threads < 1) n_threads = 1;
    op_gemm_ctx c = {a, b, &n->t, shape_of(a, b, a->ne[1], a->ne[0], b->ne[0]), {0}, {0}, {0}};
    rg_gemm_batch bt = out_prod_batch(&c);
    return product_work(&bt, n_threads);
}

rg_status cpu_out_prod(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const rg_tensor *a = &n->src[0]->t, *b = &n->src[1]->t, *y = &n->t;
    rg_status st = check_common(n, a, b, rg_op_name(RG_OP_OUT_PROD), err);
    if (st != RG_OK) return st;
    int64_t M = a->ne[0], K = a->ne[1], N = b->ne[0];
    if (b->ne[1] != K || y->ne[0] != M || y->ne[1] != N || y->ne[2] != b->ne[2] || y->ne[3] != b->ne[3]) {
        char s0[64], s1[64], s2[64];
        return rg_fail(err, RG_ERR_ARG, "out_prod %s: shapes a %s, b %s, out %s do not match", node_name(n),
                       rg_tensor_shape_str(a, s0, sizeof s0), rg_tensor_shape_str(b, s1, sizeof s1),
                       rg_tensor_shape_str(y, s2, sizeof s2));
    }
    op_gemm_ctx c = {a, b, y, shape_of(a, b, K, M, N), {0}, {0}, {0}};
    if ((a->type == RG_TYPE_F32 && !f32_strides(a, c.as)) || !f32_strides(b, c.bs) || !f32_strides(y, c.ys))
        return rg_fail(err, RG_ERR_UNSUPPORTED, "out_prod %s: an f32 stride is not a whole number of floats",
                       node_name(n));
    rg_gemm_batch bt = out_prod_batch(&c);
    st = run_node_products(ctx, n, &bt, err);  // B: a (dX = out_prod(W, dY^T))
    return st == RG_OK ? RG_OK : prefix_error(err, st, rg_op_name(RG_OP_OUT_PROD), n);
}
