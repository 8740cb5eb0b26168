// ops_optim.c - the optimizer updates ADAMW and SGD on the CPU, in place.
//
// Both follow the canonical f32 evaluation of training.md §1.2 (AdamW) and
// §1.3 (SGD, no momentum) exactly: every operation is one rounded f32 op, and
// fmaf is used where the spec writes fma (the build has -ffp-contract=off, so
// nothing else is fused). The per-step scalars arrive in n->fp, computed once
// in double by the host and cast to f32 (§2.6), so the CPU, the AVX2 path
// (ops_optim_avx2.c, same bits: _mm256_fmadd_ps, _mm256_sqrt_ps and
// _mm256_div_ps round like fmaf, sqrtf and /) and the GPU agree bit for bit.
// The update is elementwise, so the bits depend on neither the thread count
// nor where a thread's range starts.
//
// A parameter stored as F16/BF16 (training.md §2, §3) is updated through an
// f32 theta and stored back as the host step (train/optim.c) stores it, with
// the same helpers (rg_optim_theta, rg_optim_store): theta is the master when
// there is one (updated in place, the parameter becomes its RNE), else the
// parameter's exact upcast, stored back by stochastic rounding keyed by
// (seed, step, tensor id, element), the node's ip[0..2].
#include <math.h>
#include <string.h>

#include "base/cpu.h"
#include "base/error.h"
#include "cpu/cpu_ops.h"
#include "tensor/half.h"
#include "train/sround.h"

#define HALF_CHUNK 2048  // elements of a half parameter widened at a time (a stack buffer of theta)

// ops_optim_avx2.c: each updates the first n - n % 8 elements, 8 lanes at a
// time, and returns how many it did; the scalar loops here finish the rest.
extern const int rg_optim_avx2_built;
int64_t rg_adamw_avx2(float *theta_out, const float *theta, const float *grad, float *m, float *v, int64_t n,
                      const float fp[8]);
int64_t rg_sgd_avx2(float *theta_out, const float *theta, const float *grad, int64_t n, const float fp[8]);
// Adds x[i]^2 (double) into lanes[i % 16] for i < n (n a multiple of 16).
void rg_sumsq_lanes_avx2(const float *x, int64_t n, double lanes[16]);

static int use_avx2(void) { return rg_optim_avx2_built && rg_cpu_has_avx2(); }

// A contiguous tensor of `type` with data and nel elements.
static rg_status need_contig(const char *op, const rg_node *n, const rg_tensor *t, const char *what, uint32_t type,
                             int64_t nel, rg_error *err) {
    if (!t || !t->data) return rg_fail(err, RG_ERR_ARG, "%s '%s': %s has no data", op, n->t.name, what);
    if (t->type != type)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s '%s': %s is %s, expected %s", op, n->t.name, what,
                       rg_type_get(t->type)->name, rg_type_get(type)->name);
    if (!rg_tensor_is_contiguous(t))
        return rg_fail(err, RG_ERR_ARG, "%s '%s': %s must be contiguous", op, n->t.name, what);
    if (rg_tensor_nelements(t) != nel) {
        char s1[96], s2[96];
        return rg_fail(err, RG_ERR_ARG, "%s '%s': %s %s does not match the parameter %s", op, n->t.name, what,
                       rg_tensor_shape_str(t, s1, sizeof s1), rg_tensor_shape_str(&n->src[0]->t, s2, sizeof s2));
    }
    return RG_OK;
}

// The sources an optimizer node needs: names[i] for src[i], i < n_src; the
// parameter and the output in the parameter's type (f32, f16, bf16), the rest
// and the master f32; a master only with a half parameter.
static rg_status optim_check(const char *op, const rg_node *n, const char *const *names, int n_src, int64_t *nel,
                             rg_error *err) {
    if (!n->src[0]) return rg_fail(err, RG_ERR_ARG, "%s '%s': no parameter", op, n->t.name);
    const uint32_t pt = n->src[0]->t.type;
    if (pt != RG_TYPE_F32 && pt != RG_TYPE_F16 && pt != RG_TYPE_BF16)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s '%s': the parameter is %s; only f32, f16 and bf16 train", op,
                       n->t.name, rg_type_get(pt)->name);
    *nel = rg_tensor_nelements(&n->src[0]->t);
    rg_status st;
    for (int i = 0; i < n_src; i++) {
        if (!n->src[i]) return rg_fail(err, RG_ERR_ARG, "%s '%s': no %s (src[%d])", op, n->t.name, names[i], i);
        if ((st = need_contig(op, n, &n->src[i]->t, names[i], i ? RG_TYPE_F32 : pt, *nel, err))) return st;
    }
    const rg_node *master = rg_optim_master(n);
    if (master && pt == RG_TYPE_F32)
        return rg_fail(err, RG_ERR_ARG, "%s '%s': an f32 parameter has no master copy", op, n->t.name);
    if (master && (st = need_contig(op, n, &master->t, "master", RG_TYPE_F32, *nel, err))) return st;
    return need_contig(op, n, &n->t, "output", pt, *nel, err);
}

// The clip source, when the node has one: F32 [1] with bytes.
static rg_status clip_check(const char *op, const rg_node *n, rg_error *err) {
    const rg_node *clip = rg_optim_clip_src(n);
    return clip ? need_contig(op, n, &clip->t, "clip", RG_TYPE_F32, 1, err) : RG_OK;
}

// Per-thread ranges of the flat element index.
typedef struct optim_job {
    void *out;                  // [nel] the updated parameter (normally the parameter's own bytes)
    const void *theta;          // [nel] the parameter as it is (f32, or f16/bf16 with type)
    const float *grad;          // [nel]
    float *m, *v;               // [nel] AdamW moments, or in m SGD's momentum buffer (NULL: none); updated in place
    bool adamw;
    float *master;              // [nel] f32 master of a half parameter, or NULL
    uint32_t type;              // the parameter's type
    int64_t nel;
    float fp[8];                // the node's scalars, the clip from its clip source when it has one
    const int64_t *ip;          // seed, step, tensor id (the SR key of a half parameter)
} optim_job;

// ---------------------------------------------------------------------------
// Half-precision parameters, shared with train/optim.c.

float *rg_optim_theta(uint32_t type, const void *w, float *master, int64_t i0, int64_t n, float *buf) {
    if (master) return master + i0;
    if (type == RG_TYPE_F32) return (float *)w + i0;
    if (type == RG_TYPE_F16) rg_fp16_to_fp32_row((const uint16_t *)w + i0, buf, n);
    else rg_bf16_to_fp32_row((const uint16_t *)w + i0, buf, n);
    return buf;
}

void rg_optim_store(uint32_t type, void *w, int64_t i0, const float *theta, int64_t n, bool from_master,
                    uint64_t seed, uint32_t step, uint32_t tensor_id) {
    if (type == RG_TYPE_F32) {
        if (theta != (float *)w + i0) memcpy((float *)w + i0, theta, sizeof(float) * (size_t)n);
    } else if (from_master) {
        if (type == RG_TYPE_F16) rg_fp32_to_fp16_row(theta, (uint16_t *)w + i0, n);
        else rg_fp32_to_bf16_row(theta, (uint16_t *)w + i0, n);
    } else {
        if (type == RG_TYPE_F16) rg_sr_f16_row(theta, (uint16_t *)w + i0, n, seed, step, tensor_id, (uint64_t)i0);
        else rg_sr_bf16_row(theta, (uint16_t *)w + i0, n, seed, step, tensor_id, (uint64_t)i0);
    }
}

// A half parameter's elements [i0, i1), HALF_CHUNK at a time: theta, the
// update (AdamW when the job has moments, else SGD), the store.
static void half_range(const optim_job *j, int64_t i0, int64_t i1) {
    float buf[HALF_CHUNK];
    for (int64_t c0 = i0; c0 < i1; c0 += HALF_CHUNK) {
        const int64_t n = i1 - c0 < HALF_CHUNK ? i1 - c0 : HALF_CHUNK;
        float *th = rg_optim_theta(j->type, j->theta, j->master, c0, n, buf);
        if (j->adamw) rg_adamw_row(th, th, j->grad + c0, j->m + c0, j->v + c0, n, j->fp);
        else if (j->m) rg_sgd_momentum_row(th, th, j->grad + c0, j->m + c0, n, j->fp);
        else rg_sgd_row(th, th, j->grad + c0, n, j->fp);
        rg_optim_store(j->type, j->out, c0, th, n, j->master != NULL, (uint64_t)j->ip[0], (uint32_t)j->ip[1],
                       (uint32_t)j->ip[2]);
    }
}

// ---------------------------------------------------------------------------
// ADAMW (param, grad, m, v) -> param. fp[0] step = lr/bc1, fp[1] omb1 = 1-beta1,
// fp[2] b2 = beta2, fp[3] omb2 = 1-beta2, fp[4] eps, fp[5] decay = 1-lr*wd
// (exactly 1: none), fp[6] bc2s = sqrt(1-beta2^t), fp[7] clip (exactly 1: none).
// Per element, §1.2 "Canonical f32 evaluation":
//   g = grad*clip;  m = fma(omb1, g - m, m);  v = fma(omb2, g*g, b2*v);
//   den = sqrt(v)/bc2s + eps;  theta = theta*decay;  theta = fma(-step, m/den, theta)
// The two skips change no bits (x*1.0f == x); they only save the multiplies.
void rg_adamw_row(float *out, const float *theta, const float *grad, float *m, float *v, int64_t n, const float fp[8]) {
    int64_t i = use_avx2() ? rg_adamw_avx2(out, theta, grad, m, v, n, fp) : 0;
    const float step = fp[0], omb1 = fp[1], b2 = fp[2], omb2 = fp[3], eps = fp[4];
    const float decay = fp[5], bc2s = fp[6], clip = fp[7];
    for (; i < n; i++) {
        float g = grad[i];
        if (clip != 1.0f) g = g * clip;
        const float mi = fmaf(omb1, g - m[i], m[i]);
        const float vi = fmaf(omb2, g * g, b2 * v[i]);
        const float den = sqrtf(vi) / bc2s + eps;
        float th = theta[i];
        if (decay != 1.0f) th = th * decay;
        out[i] = fmaf(-step, mi / den, th);
        m[i] = mi;
        v[i] = vi;
    }
}

// Σ x[i]^2 in double over 16 lanes (lane l: the i = l mod 16, in increasing
// i), then the lanes added in a fixed tree. The same bits with AVX2 or without,
// for any n; the global norm sums its 4096-element blocks with this.
double rg_sumsq_f64(const float *x, int64_t n) {
    double lanes[16] = {0};
    int64_t i = 0;
    if (use_avx2()) {
        i = n / 16 * 16;
        rg_sumsq_lanes_avx2(x, i, lanes);
    }
    for (; i < n; i++) lanes[i % 16] += (double)x[i] * (double)x[i];
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) lanes[l] += lanes[l + w];
    return lanes[0];
}

static void adamw_range(void *p, int ith, int nth) {
    const optim_job *j = p;
    int64_t i0, i1;
    rg_split_range(j->nel, ith, nth, &i0, &i1);
    if (i1 <= i0) return;
    if (j->type != RG_TYPE_F32) half_range(j, i0, i1);
    else rg_adamw_row((float *)j->out + i0, (const float *)j->theta + i0, j->grad + i0, j->m + i0, j->v + i0, i1 - i0, j->fp);
}

// The job of an optimizer node whose sources optim_check accepted. The output is
// normally bound to the parameter's bytes (an in-place update); if it is not, the
// parameter is only read and the new value goes to the output.
static optim_job job_of(const rg_node *n, int64_t nel, bool adamw) {
    const rg_node *master = rg_optim_master(n);
    optim_job j = {.out = n->t.data, .theta = n->src[0]->t.data, .grad = n->src[1]->t.data,
                   .m = adamw ? n->src[2]->t.data : n->src[3] ? n->src[3]->t.data : NULL,
                   .v = adamw ? n->src[3]->t.data : NULL, .adamw = adamw,
                   .master = master ? master->t.data : NULL, .type = n->src[0]->t.type, .nel = nel, .ip = n->ip};
    memcpy(j.fp, n->fp, sizeof j.fp);
    const rg_node *clip = rg_optim_clip_src(n);
    if (clip) j.fp[adamw ? 7 : 2] = *(const float *)clip->t.data;  // CLIP_COEF's output
    return j;
}

rg_status cpu_adamw(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    static const char *const names[4] = {"param", "grad", "m", "v"};
    int64_t nel = 0;
    rg_status st = optim_check(rg_op_name(RG_OP_ADAMW), n, names, 4, &nel, err);
    if (!st) st = clip_check(rg_op_name(RG_OP_ADAMW), n, err);
    if (st || nel == 0) return st;
    optim_job j = job_of(n, nel, true);
    rg_threadpool_run(ctx ? ctx->pool : NULL, adamw_range, &j);
    return RG_OK;
}

// ---------------------------------------------------------------------------
// SGD (param, grad) -> param. fp[0] lr, fp[1] weight decay (L2; 0: none),
// fp[2] clip (1: none). §1.3 canonical f32 without momentum:
//   g = grad*clip;  g = fma(wd, theta, g);  theta = fma(-lr, g, theta)
void rg_sgd_row(float *out, const float *theta, const float *grad, int64_t n, const float fp[8]) {
    int64_t i = use_avx2() ? rg_sgd_avx2(out, theta, grad, n, fp) : 0;
    const float lr = fp[0], wd = fp[1], clip = fp[2];
    for (; i < n; i++) {
        float g = grad[i];
        const float th = theta[i];
        if (clip != 1.0f) g = g * clip;
        if (wd != 0.0f) g = fmaf(wd, th, g);
        out[i] = fmaf(-lr, g, th);
    }
}

// fp[3] mu, fp[4] first (exactly 1: the first step). torch.optim.SGD's heavy ball with
// dampening 0 and no nesterov, in §1.3's canonical f32:
//   g = grad*clip;  g = fma(wd, theta, g);  b = first ? g : fma(1, g, mu*b);  theta = fma(-lr, b, theta)
void rg_sgd_momentum_row(float *out, const float *theta, const float *grad, float *b, int64_t n, const float fp[8]) {
    const float lr = fp[0], wd = fp[1], clip = fp[2], mu = fp[3];
    const bool first = fp[4] == 1.0f;
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i];
        const float th = theta[i];
        if (clip != 1.0f) g = g * clip;
        if (wd != 0.0f) g = fmaf(wd, th, g);
        const float bi = first ? g : fmaf(1.0f, g, mu * b[i]);
        b[i] = bi;
        out[i] = fmaf(-lr, bi, th);
    }
}

static void sgd_range(void *p, int ith, int nth) {
    const optim_job *j = p;
    int64_t i0, i1;
    rg_split_range(j->nel, ith, nth, &i0, &i1);
    if (i1 <= i0) return;
    if (j->type != RG_TYPE_F32) half_range(j, i0, i1);
    else if (j->m)
        rg_sgd_momentum_row((float *)j->out + i0, (const float *)j->theta + i0, j->grad + i0, j->m + i0, i1 - i0, j->fp);
    else rg_sgd_row((float *)j->out + i0, (const float *)j->theta + i0, j->grad + i0, i1 - i0, j->fp);
}

rg_status cpu_sgd(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    static const char *const names[2] = {"param", "grad"};
    int64_t nel = 0;
    rg_status st = optim_check(rg_op_name(RG_OP_SGD), n, names, 2, &nel, err);
    if (!st && n->src[3])
        st = need_contig(rg_op_name(n->op), n, &n->src[3]->t, "momentum buffer", RG_TYPE_F32, nel, err);
    if (!st) st = clip_check(rg_op_name(RG_OP_SGD), n, err);
    if (st || nel == 0) return st;
    optim_job j = job_of(n, nel, false);
    rg_threadpool_run(ctx ? ctx->pool : NULL, sgd_range, &j);
    return RG_OK;
}

// ---------------------------------------------------------------------------
// SUMSQ (a, prev) -> F64 [1]: prev + the block sums of a in block order, each block of
// RG_SUMSQ_BLOCK elements by rg_sumsq_f64. Threads take whole blocks into the scratch
// (one double per block); the sums are then added in index order, so the value does not
// depend on the split.
typedef struct sumsq_job {
    const float *a;
    int64_t nel, n_blocks;
    double *block_sums;  // [n_blocks]
} sumsq_job;

static int64_t sumsq_blocks(const rg_node *n) {
    const int64_t nel = n->src[0] ? rg_tensor_nelements(&n->src[0]->t) : 0;
    return (nel + RG_SUMSQ_BLOCK - 1) / RG_SUMSQ_BLOCK;
}

size_t cpu_sumsq_work(const rg_node *n, int n_threads) {
    (void)n_threads;
    return sizeof(double) * (size_t)sumsq_blocks(n);
}

static void sumsq_range(void *p, int ith, int nth) {
    sumsq_job *j = p;
    int64_t b0, b1;
    rg_split_range(j->n_blocks, ith, nth, &b0, &b1);
    for (int64_t b = b0; b < b1; b++) {
        const int64_t i0 = b * RG_SUMSQ_BLOCK, i1 = i0 + RG_SUMSQ_BLOCK < j->nel ? i0 + RG_SUMSQ_BLOCK : j->nel;
        j->block_sums[b] = rg_sumsq_f64(j->a + i0, i1 - i0);
    }
}

rg_status cpu_sumsq(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const rg_node *a = n->src[0], *prev = n->src[1];
    const int64_t nel = a ? rg_tensor_nelements(&a->t) : 0;
    rg_status st = need_contig("sumsq", n, a ? &a->t : NULL, "a", RG_TYPE_F32, nel, err);
    if (!st && prev) st = need_contig("sumsq", n, &prev->t, "prev", RG_TYPE_F64, 1, err);
    if (!st) st = need_contig("sumsq", n, &n->t, "output", RG_TYPE_F64, 1, err);
    if (st) return st;
    sumsq_job j = {.a = a->t.data, .nel = nel, .n_blocks = sumsq_blocks(n), .block_sums = ctx ? ctx->scratch : NULL};
    if (j.n_blocks && (!j.block_sums || ctx->scratch_size < cpu_sumsq_work(n, 1)))
        return rg_fail(err, RG_ERR_ARG, "sumsq '%s': scratch of %zu bytes is below the %zu needed", n->t.name,
                       ctx ? ctx->scratch_size : 0, cpu_sumsq_work(n, 1));
    if (j.n_blocks > 1) rg_threadpool_run(ctx->pool, sumsq_range, &j);
    else sumsq_range(&j, 0, 1);
    double total = prev ? *(const double *)prev->t.data : 0.0;
    for (int64_t b = 0; b < j.n_blocks; b++) total += j.block_sums[b];
    *(double *)n->t.data = total;
    return RG_OK;
}

// CLIP_COEF (total) -> F32 [1] = rg_clip_coef_f64(sqrt(total), max_norm), max_norm's bits in ip[0].
float rg_clip_coef_f64(double norm, double max_norm) {
    if (!(max_norm > 0.0)) return 1.0f;
    const double c = max_norm / (norm + 1e-6);
    return (float)(c < 1.0 ? c : 1.0);
}

rg_status cpu_clip_coef(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    (void)ctx;
    const rg_node *total = n->src[0];
    rg_status st = need_contig("clip_coef", n, total ? &total->t : NULL, "total", RG_TYPE_F64, 1, err);
    if (!st) st = need_contig("clip_coef", n, &n->t, "output", RG_TYPE_F32, 1, err);
    if (st) return st;
    double max_norm;
    memcpy(&max_norm, &n->ip[0], sizeof max_norm);
    *(float *)n->t.data = rg_clip_coef_f64(sqrt(*(const double *)total->t.data), max_norm);
    return RG_OK;
}
