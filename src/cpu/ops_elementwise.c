// ops_elementwise.c - FILL, the broadcasting binary ops (ADD, SUB, MUL), SCALE,
// REPEAT and its backward, and the SiLU family.
//
// Outputs are contiguous (n->t.nb is the standard layout); sources may be any
// strided view and are always addressed through their own nb[]. Work is split
// into units of (output row, column chunk), so a single long row still uses
// every thread; each output element is written by exactly one unit, and every
// element's value depends only on its inputs, so the bits never depend on the
// thread count. REPEAT_BACK is the one reduction here: each output element is
// summed by one unit in a fixed order (see there).
//
// In-place: the executor may give ADD/SUB/MUL/SCALE/SILU the bytes of src[0]
// when src[0] dies at the node. Every loop reads its element of src[0] before
// writing the same position of the output and never reads a position it has
// already written, so out == src0 (same layout) is safe. No pointer here is
// declared restrict for that reason.
//
// The sigmoid uses our own exp (a Cephes-style polynomial, exp_poly.h) instead of
// libm's expf, so that the AVX2 kernels in ops_elementwise_avx2.c can give the
// same bits as the scalar code: both run the identical sequence of IEEE
// operations with no fused multiply-adds (the build uses -ffp-contract=off).
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/cpu.h"
#include "base/error.h"
#include "cpu/cpu_ops.h"
#include "cpu/exp_poly.h"
#include "tensor/half.h"

// ---------------------------------------------------------------------------
// Internal: the AVX2 row kernels in ops_elementwise_avx2.c. Each handles the
// largest multiple of 8 elements of n and returns how many it did; the caller
// finishes the rest with the scalar functions below. When that file is built
// without AVX2 they do nothing (return 0) and rg_ew_avx2_built is 0.
extern const int rg_ew_avx2_built;
int64_t rg_ew_silu_row_avx2(const float *x, float *y, int64_t n);
int64_t rg_ew_silu_back_row_avx2(const float *dy, const float *x, float *y, int64_t n);
int64_t rg_ew_swiglu_row_avx2(const float *g, const float *u, float *y, int64_t n);

static int use_avx2(void) { return rg_ew_avx2_built && rg_cpu_has_avx2(); }

// ---------------------------------------------------------------------------
// Work split

// Elements per unit along dimension 0: big enough to amortise the call, small
// enough that a [n, 1] tensor still spreads over the threads.
#define EW_CHUNK 8192
// Below this many output elements a node runs on the calling thread: waking
// the pool costs more than the work.
#define EW_MIN_PARALLEL 32768

typedef void (*ew_row_fn)(const rg_node *n, int64_t i1, int64_t i2, int64_t i3, int64_t c0, int64_t c1);

typedef struct ew_job {
    const rg_node *n;
    ew_row_fn row;
    int64_t nchunk;  // units per output row
    int64_t nunits;  // nrows * nchunk
} ew_job;

static void ew_worker(void *arg, int ith, int nth) {
    const ew_job *job = arg;
    const rg_tensor *t = &job->n->t;
    int64_t u0, u1;
    rg_split_range(job->nunits, ith, nth, &u0, &u1);
    for (int64_t u = u0; u < u1; u++) {
        int64_t r = u / job->nchunk, c = u % job->nchunk;
        int64_t c0 = c * EW_CHUNK, c1 = c0 + EW_CHUNK < t->ne[0] ? c0 + EW_CHUNK : t->ne[0];
        int64_t i1 = r % t->ne[1], i2 = (r / t->ne[1]) % t->ne[2], i3 = r / (t->ne[1] * t->ne[2]);
        job->row(job->n, i1, i2, i3, c0, c1);
    }
}

// Runs row over every (row, chunk) of n's output shape.
static void ew_run(rg_exec_ctx *ctx, const rg_node *n, ew_row_fn row) {
    const rg_tensor *t = &n->t;
    int64_t nel = rg_tensor_nelements(t);
    if (nel == 0) return;
    ew_job job = {n, row, (t->ne[0] + EW_CHUNK - 1) / EW_CHUNK, 0};
    job.nunits = rg_tensor_nrows(t) * job.nchunk;
    if (nel < EW_MIN_PARALLEL || !ctx || !ctx->pool) ew_worker(&job, 0, 1);
    else rg_threadpool_run(ctx->pool, ew_worker, &job);
}

static inline float *out_row(const rg_node *n, int64_t i1, int64_t i2, int64_t i3) {
    return (float *)((char *)n->t.data + i1 * n->t.nb[1] + i2 * n->t.nb[2] + i3 * n->t.nb[3]);
}

static inline const char *src_row(const rg_tensor *s, int64_t i1, int64_t i2, int64_t i3) {
    return (const char *)s->data + i1 * s->nb[1] + i2 * s->nb[2] + i3 * s->nb[3];
}

static inline float ld(const char *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

// ---------------------------------------------------------------------------
// Checks shared by the kernels: they are cheap and turn a wiring mistake into
// an error naming the node instead of a wild read.

static rg_status need_f32(const rg_node *n, const rg_node *s, const char *what, rg_error *err) {
    if (!s || !s->t.data)
        return rg_fail(err, RG_ERR_ARG, "%s '%s': source %s is missing or has no bytes", rg_op_name(n->op), n->t.name,
                       what);
    if (s->t.type != RG_TYPE_F32)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s '%s': source %s has type %s, expected f32", rg_op_name(n->op),
                       n->t.name, what, rg_type_get(s->t.type)->name);
    return RG_OK;
}

static rg_status need_out_f32(const rg_node *n, rg_error *err) {
    if (n->t.type != RG_TYPE_F32 || !n->t.data)
        return rg_fail(err, RG_ERR_ARG, "%s '%s': output must be f32 with bytes bound", rg_op_name(n->op), n->t.name);
    return RG_OK;
}

static rg_status need_same_shape(const rg_node *n, const rg_tensor *s, const char *what, rg_error *err) {
    for (int i = 0; i < RG_MAX_DIMS; i++)
        if (s->ne[i] != n->t.ne[i])
            return rg_fail(err, RG_ERR_ARG, "%s '%s': %s shape differs from the output in dim %d (%lld vs %lld)",
                           rg_op_name(n->op), n->t.name, what, i, (long long)s->ne[i], (long long)n->t.ne[i]);
    return RG_OK;
}

// big.ne[i] must be a multiple of small.ne[i] in every dimension.
static rg_status need_tiles(const rg_node *n, const rg_tensor *big, const rg_tensor *small, rg_error *err) {
    for (int i = 0; i < RG_MAX_DIMS; i++)
        if (small->ne[i] <= 0 || big->ne[i] % small->ne[i])
            return rg_fail(err, RG_ERR_ARG, "%s '%s': dim %d: %lld is not a multiple of %lld", rg_op_name(n->op),
                           n->t.name, i, (long long)big->ne[i], (long long)small->ne[i]);
    return RG_OK;
}

// ---------------------------------------------------------------------------
// FILL

typedef struct fill_job {
    void *data;
    int64_t n;
    int esz;        // 4 (f32) or 2 (f16/bf16)
    uint32_t bits;  // the value's bit pattern in the output type
} fill_job;

static void fill_worker(void *arg, int ith, int nth) {
    const fill_job *job = arg;
    int64_t i0, i1;
    rg_split_range(job->n, ith, nth, &i0, &i1);
    if (job->esz == 4) {
        uint32_t *p = job->data;
        for (int64_t i = i0; i < i1; i++) p[i] = job->bits;
    } else {
        uint16_t *p = job->data;
        uint16_t h = (uint16_t)job->bits;
        for (int64_t i = i0; i < i1; i++) p[i] = h;
    }
}

rg_status cpu_fill(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    fill_job job = {n->t.data, rg_tensor_nelements(&n->t), 4, 0};
    float v = n->fp[0];
    switch (n->t.type) {
    case RG_TYPE_F32: memcpy(&job.bits, &v, 4); break;
    case RG_TYPE_F16: job.esz = 2, job.bits = rg_fp32_to_fp16(v); break;
    case RG_TYPE_BF16: job.esz = 2, job.bits = rg_fp32_to_bf16(v); break;
    default:
        return rg_fail(err, RG_ERR_UNSUPPORTED, "fill '%s': type %s, expected f32, f16 or bf16", n->t.name,
                       rg_type_get(n->t.type)->name);
    }
    if (job.n == 0) return RG_OK;
    if (!n->t.data) return rg_fail(err, RG_ERR_ARG, "fill '%s': no bytes bound", n->t.name);
    if (job.n < EW_MIN_PARALLEL || !ctx || !ctx->pool) fill_worker(&job, 0, 1);
    else rg_threadpool_run(ctx->pool, fill_worker, &job);
    return RG_OK;
}

// ---------------------------------------------------------------------------
// ADD, SUB, MUL: a [ne0, ne1, ne2, ne3], b [ne0/k0, ne1/k1, ...] tiled over a.

#define EW_BINARY_ROW(name, OP)                                                                                      \
    static void name(const rg_node *n, int64_t i1, int64_t i2, int64_t i3, int64_t c0, int64_t c1) {                \
        const rg_tensor *a = &n->src[0]->t, *b = &n->src[1]->t;                                                     \
        float *y = out_row(n, i1, i2, i3);                                                                          \
        const char *ap = src_row(a, i1, i2, i3);                                                                    \
        const char *bp = src_row(b, i1 % b->ne[1], i2 % b->ne[2], i3 % b->ne[3]);                                   \
        const int64_t bn = b->ne[0];                                                                                \
        const size_t as = a->nb[0], bs = b->nb[0];                                                                  \
        if (as == 4 && bs == 4 && bn == n->t.ne[0]) {                                                               \
            /* the common case: same-shape rows, both contiguous (vectorised) */                                   \
            const float *x = (const float *)ap, *z = (const float *)bp;                                             \
            /* in place: a loop that only reads y, else the vectoriser's overlap                                   \
               check (y vs x) fails at run time and it falls back to scalar code */                               \
            if (x == y) for (int64_t i = c0; i < c1; i++) y[i] = y[i] OP z[i];                                       \
            else for (int64_t i = c0; i < c1; i++) y[i] = x[i] OP z[i];                                              \
        } else if (bn == 1) {                                                                                       \
            /* one value of b per row: a bias over columns, a per-row scale */                                     \
            const float z = ld(bp);                                                                                 \
            if (as == 4) {                                                                                          \
                const float *x = (const float *)ap;                                                                 \
                if (x == y) for (int64_t i = c0; i < c1; i++) y[i] = y[i] OP z;                                      \
                else for (int64_t i = c0; i < c1; i++) y[i] = x[i] OP z;                                             \
            } else {                                                                                                \
                for (int64_t i = c0; i < c1; i++) y[i] = ld(ap + i * as) OP z;                                       \
            }                                                                                                       \
        } else {                                                                                                    \
            /* general: b's row repeats every bn elements; j runs i % bn without a division */                     \
            int64_t j = c0 % bn;                                                                                    \
            for (int64_t i = c0; i < c1; i++) {                                                                     \
                y[i] = ld(ap + i * as) OP ld(bp + j * bs);                                                          \
                if (++j == bn) j = 0;                                                                               \
            }                                                                                                       \
        }                                                                                                           \
    }

EW_BINARY_ROW(add_row, +)
EW_BINARY_ROW(sub_row, -)
EW_BINARY_ROW(mul_row, *)

static rg_status binary(rg_exec_ctx *ctx, rg_node *n, ew_row_fn row, rg_error *err) {
    rg_status st;
    if ((st = need_out_f32(n, err)) || (st = need_f32(n, n->src[0], "a", err)) ||
        (st = need_f32(n, n->src[1], "b", err)) || (st = need_same_shape(n, &n->src[0]->t, "a", err)) ||
        (st = need_tiles(n, &n->t, &n->src[1]->t, err)))
        return st;
    ew_run(ctx, n, row);
    return RG_OK;
}

rg_status cpu_add(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { return binary(ctx, n, add_row, err); }
rg_status cpu_sub(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { return binary(ctx, n, sub_row, err); }
rg_status cpu_mul(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { return binary(ctx, n, mul_row, err); }

// ---------------------------------------------------------------------------
// SCALE

static void scale_row(const rg_node *n, int64_t i1, int64_t i2, int64_t i3, int64_t c0, int64_t c1) {
    const rg_tensor *a = &n->src[0]->t;
    float *y = out_row(n, i1, i2, i3);
    const char *ap = src_row(a, i1, i2, i3);
    const float s = n->fp[0];
    if (a->nb[0] == 4) {
        const float *x = (const float *)ap;
        if (x == y) for (int64_t i = c0; i < c1; i++) y[i] = y[i] * s;  // in place (see the binary ops)
        else for (int64_t i = c0; i < c1; i++) y[i] = x[i] * s;
    } else {
        for (int64_t i = c0; i < c1; i++) y[i] = ld(ap + i * a->nb[0]) * s;
    }
}

rg_status cpu_scale(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    rg_status st;
    if ((st = need_out_f32(n, err)) || (st = need_f32(n, n->src[0], "a", err)) ||
        (st = need_same_shape(n, &n->src[0]->t, "a", err)))
        return st;
    ew_run(ctx, n, scale_row);
    return RG_OK;
}

// ---------------------------------------------------------------------------
// REPEAT: out [like's shape] = a tiled. A pure copy of bits, so any type with
// one element per block works (f32, f16, bf16, i32) when out has a's type.

static void repeat_row(const rg_node *n, int64_t i1, int64_t i2, int64_t i3, int64_t c0, int64_t c1) {
    const rg_tensor *a = &n->src[0]->t;
    char *y = (char *)n->t.data + i1 * n->t.nb[1] + i2 * n->t.nb[2] + i3 * n->t.nb[3];
    const char *ap = src_row(a, i1 % a->ne[1], i2 % a->ne[2], i3 % a->ne[3]);
    const int64_t an = a->ne[0];
    const size_t as = a->nb[0], esz = n->t.nb[0];
    int64_t j = c0 % an;
    if (esz == 4) {
        uint32_t *o = (uint32_t *)y;
        for (int64_t i = c0; i < c1; i++) {
            uint32_t v;
            memcpy(&v, ap + j * as, 4);
            o[i] = v;
            if (++j == an) j = 0;
        }
    } else {
        for (int64_t i = c0; i < c1; i++) {
            memcpy(y + i * esz, ap + j * as, esz);
            if (++j == an) j = 0;
        }
    }
}

rg_status cpu_repeat(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const rg_node *a = n->src[0];
    if (!a || !a->t.data || !n->t.data)
        return rg_fail(err, RG_ERR_ARG, "repeat '%s': a source or the output has no bytes", n->t.name);
    const rg_type_traits *tt = rg_type_get(n->t.type);
    if (a->t.type != n->t.type || tt->block_size != 1)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "repeat '%s': %s -> %s, expected one unquantized type", n->t.name,
                       rg_type_get(a->t.type)->name, tt->name);
    rg_status st = need_tiles(n, &n->t, &a->t, err);
    if (st) return st;
    ew_run(ctx, n, repeat_row);
    return RG_OK;
}

// ---------------------------------------------------------------------------
// REPEAT_BACK: out [L0, L1, L2, L3] (like's shape) from a [L0*f0, L1*f1, ...].
// out[j] = sum of a[j0 + t0*L0, j1 + t1*L1, ...] over all t, accumulated in
// DOUBLE in increasing linear index of a (t3 outermost, t0 innermost) and
// rounded to f32 once. A unit owns a run of up to RB_CHUNK outputs of one
// output row, so each output is summed by one thread in that fixed order.

#define RB_CHUNK 256

typedef struct rb_job {
    const rg_node *n;
    int64_t nchunk, nunits;
} rb_job;

static void repeat_back_worker(void *arg, int ith, int nth) {
    const rb_job *job = arg;
    const rg_tensor *a = &job->n->src[0]->t, *o = &job->n->t;
    const int64_t L0 = o->ne[0], L1 = o->ne[1], L2 = o->ne[2];
    const int64_t f0 = a->ne[0] / L0, f1 = a->ne[1] / L1, f2 = a->ne[2] / L2, f3 = a->ne[3] / o->ne[3];
    const size_t as = a->nb[0];
    double acc[RB_CHUNK];
    int64_t u0, u1;
    rg_split_range(job->nunits, ith, nth, &u0, &u1);
    for (int64_t u = u0; u < u1; u++) {
        int64_t r = u / job->nchunk, c = u % job->nchunk;
        int64_t c0 = c * RB_CHUNK, c1 = c0 + RB_CHUNK < L0 ? c0 + RB_CHUNK : L0, m = c1 - c0;
        int64_t j1 = r % L1, j2 = (r / L1) % L2, j3 = r / (L1 * L2);
        for (int64_t k = 0; k < m; k++) acc[k] = 0.0;
        for (int64_t t3 = 0; t3 < f3; t3++)
            for (int64_t t2 = 0; t2 < f2; t2++)
                for (int64_t t1 = 0; t1 < f1; t1++) {
                    const char *ap = src_row(a, j1 + t1 * L1, j2 + t2 * L2, j3 + (t3 * o->ne[3]));
                    for (int64_t t0 = 0; t0 < f0; t0++) {
                        const char *p = ap + (t0 * L0 + c0) * (int64_t)as;
                        if (as == 4) {
                            const float *x = (const float *)p;
                            for (int64_t k = 0; k < m; k++) acc[k] += x[k];
                        } else {
                            for (int64_t k = 0; k < m; k++) acc[k] += ld(p + k * (int64_t)as);
                        }
                    }
                }
        float *y = out_row(job->n, j1, j2, j3);
        for (int64_t k = 0; k < m; k++) y[c0 + k] = (float)acc[k];
    }
}

rg_status cpu_repeat_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    rg_status st;
    if ((st = need_out_f32(n, err)) || (st = need_f32(n, n->src[0], "a", err)) ||
        (st = need_tiles(n, &n->src[0]->t, &n->t, err)))
        return st;
    if (rg_tensor_nelements(&n->t) == 0) return RG_OK;
    rb_job job = {n, (n->t.ne[0] + RB_CHUNK - 1) / RB_CHUNK, 0};
    job.nunits = rg_tensor_nrows(&n->t) * job.nchunk;
    if (rg_tensor_nelements(&n->src[0]->t) < EW_MIN_PARALLEL || !ctx || !ctx->pool) repeat_back_worker(&job, 0, 1);
    else rg_threadpool_run(ctx->pool, repeat_back_worker, &job);
    return RG_OK;
}

// ---------------------------------------------------------------------------
// SiLU family. sigmoid(a) = num / (1 + e) with e = exp(-|a|) <= 1 (never
// overflows) and num = 1 for a >= 0, e for a < 0.

// The exp is exp_poly.h's, shared bit for bit with ops_elementwise_avx2.c.
static inline float exp_neg_abs(float a) { return rg_exp_neg_abs(a); }

static inline float sigmoid1(float a) {
    float e = exp_neg_abs(a);
    return (a < 0.0f ? e : 1.0f) / (1.0f + e);
}

static inline float silu1(float a) { return a * sigmoid1(a); }

// dy * silu'(a) with silu'(a) = s (1 + a (1 - s)). 1 - s is computed as
// sigmoid(-a) from the same e rather than by subtraction: for large a, s
// rounds to within an ulp of 1 and 1 - s would lose every significant bit,
// while a (1 - s) still matters next to 1 up to a ~ 17.
static inline float silu_back1(float dy, float a) {
    float e = exp_neg_abs(a), d = 1.0f + e;
    float s = (a < 0.0f ? e : 1.0f) / d, c = (a < 0.0f ? 1.0f : e) / d;
    return dy * (s * (1.0f + a * c));
}

static inline float swiglu1(float g, float u) { return (g * sigmoid1(g)) * u; }

static void silu_row(const rg_node *n, int64_t i1, int64_t i2, int64_t i3, int64_t c0, int64_t c1) {
    const rg_tensor *a = &n->src[0]->t;
    float *y = out_row(n, i1, i2, i3);
    const char *ap = src_row(a, i1, i2, i3);
    int64_t i = c0;
    if (a->nb[0] == 4) {
        const float *x = (const float *)ap;
        if (use_avx2()) i += rg_ew_silu_row_avx2(x + c0, y + c0, c1 - c0);
        for (; i < c1; i++) y[i] = silu1(x[i]);
    } else {
        for (; i < c1; i++) y[i] = silu1(ld(ap + i * a->nb[0]));
    }
}

static void silu_back_row(const rg_node *n, int64_t i1, int64_t i2, int64_t i3, int64_t c0, int64_t c1) {
    const rg_tensor *d = &n->src[0]->t, *a = &n->src[1]->t;
    float *y = out_row(n, i1, i2, i3);
    const char *dp = src_row(d, i1, i2, i3), *ap = src_row(a, i1, i2, i3);
    int64_t i = c0;
    if (d->nb[0] == 4 && a->nb[0] == 4) {
        const float *dy = (const float *)dp, *x = (const float *)ap;
        if (use_avx2()) i += rg_ew_silu_back_row_avx2(dy + c0, x + c0, y + c0, c1 - c0);
        for (; i < c1; i++) y[i] = silu_back1(dy[i], x[i]);
    } else {
        for (; i < c1; i++) y[i] = silu_back1(ld(dp + i * d->nb[0]), ld(ap + i * a->nb[0]));
    }
}

static void swiglu_row(const rg_node *n, int64_t i1, int64_t i2, int64_t i3, int64_t c0, int64_t c1) {
    const rg_tensor *g = &n->src[0]->t, *u = &n->src[1]->t;
    float *y = out_row(n, i1, i2, i3);
    const char *gp = src_row(g, i1, i2, i3), *up = src_row(u, i1, i2, i3);
    int64_t i = c0;
    if (g->nb[0] == 4 && u->nb[0] == 4) {
        const float *gx = (const float *)gp, *ux = (const float *)up;
        if (use_avx2()) i += rg_ew_swiglu_row_avx2(gx + c0, ux + c0, y + c0, c1 - c0);
        for (; i < c1; i++) y[i] = swiglu1(gx[i], ux[i]);
    } else {
        for (; i < c1; i++) y[i] = swiglu1(ld(gp + i * g->nb[0]), ld(up + i * u->nb[0]));
    }
}

rg_status cpu_silu(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    rg_status st;
    if ((st = need_out_f32(n, err)) || (st = need_f32(n, n->src[0], "a", err)) ||
        (st = need_same_shape(n, &n->src[0]->t, "a", err)))
        return st;
    ew_run(ctx, n, silu_row);
    return RG_OK;
}

rg_status cpu_silu_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    rg_status st;
    if ((st = need_out_f32(n, err)) || (st = need_f32(n, n->src[0], "dy", err)) ||
        (st = need_f32(n, n->src[1], "a", err)) || (st = need_same_shape(n, &n->src[0]->t, "dy", err)) ||
        (st = need_same_shape(n, &n->src[1]->t, "a", err)))
        return st;
    ew_run(ctx, n, silu_back_row);
    return RG_OK;
}

rg_status cpu_swiglu(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    rg_status st;
    if ((st = need_out_f32(n, err)) || (st = need_f32(n, n->src[0], "gate", err)) ||
        (st = need_f32(n, n->src[1], "up", err)) || (st = need_same_shape(n, &n->src[0]->t, "gate", err)) ||
        (st = need_same_shape(n, &n->src[1]->t, "up", err)))
        return st;
    ew_run(ctx, n, swiglu_row);
    return RG_OK;
}
