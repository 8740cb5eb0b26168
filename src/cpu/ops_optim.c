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
#include <math.h>

#include "base/cpu.h"
#include "base/error.h"
#include "cpu/cpu_ops.h"

// ops_optim_avx2.c: each updates the first n - n % 8 elements, 8 lanes at a
// time, and returns how many it did; the scalar loops here finish the rest.
extern const int rg_optim_avx2_built;
int64_t rg_adamw_avx2(float *theta_out, const float *theta, const float *grad, float *m, float *v, int64_t n,
                      const float fp[8]);
int64_t rg_sgd_avx2(float *theta_out, const float *theta, const float *grad, int64_t n, const float fp[8]);
// Adds x[i]^2 (double) into lanes[i % 16] for i < n (n a multiple of 16).
void rg_sumsq_lanes_avx2(const float *x, int64_t n, double lanes[16]);

static int use_avx2(void) { return rg_optim_avx2_built && rg_cpu_has_avx2(); }

// A contiguous F32 tensor with data and nel elements.
static rg_status need_f32_contig(const char *op, const rg_node *n, const rg_tensor *t, const char *what, int64_t nel,
                                 rg_error *err) {
    if (!t || !t->data) return rg_fail(err, RG_ERR_ARG, "%s '%s': %s has no data", op, n->t.name, what);
    if (t->type != RG_TYPE_F32)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s '%s': %s is %s, expected f32", op, n->t.name, what,
                       rg_type_get(t->type)->name);
    if (!rg_tensor_is_contiguous(t))
        return rg_fail(err, RG_ERR_ARG, "%s '%s': %s must be contiguous", op, n->t.name, what);
    if (rg_tensor_nelements(t) != nel) {
        char s1[96], s2[96];
        return rg_fail(err, RG_ERR_ARG, "%s '%s': %s %s does not match the parameter %s", op, n->t.name, what,
                       rg_tensor_shape_str(t, s1, sizeof s1), rg_tensor_shape_str(&n->src[0]->t, s2, sizeof s2));
    }
    return RG_OK;
}

// Per-thread ranges of the flat element index.
typedef struct optim_job {
    float *out;                 // [nel] the updated parameter (normally the parameter's own bytes)
    const float *theta, *grad;  // [nel]
    float *m, *v;               // [nel] AdamW moments, updated in place
    int64_t nel;
    const float *fp;
} optim_job;

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
    if (i1 > i0) rg_adamw_row(j->out + i0, j->theta + i0, j->grad + i0, j->m + i0, j->v + i0, i1 - i0, j->fp);
}

rg_status cpu_adamw(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const char *op = "adamw";
    if (!n->src[0]) return rg_fail(err, RG_ERR_ARG, "%s '%s': no parameter", op, n->t.name);
    const int64_t nel = rg_tensor_nelements(&n->src[0]->t);
    static const char *const names[4] = {"param", "grad", "m", "v"};
    rg_status st;
    for (int i = 0; i < 4; i++) {
        if (!n->src[i]) return rg_fail(err, RG_ERR_ARG, "%s '%s': no %s (src[%d])", op, n->t.name, names[i], i);
        if ((st = need_f32_contig(op, n, &n->src[i]->t, names[i], nel, err))) return st;
    }
    if ((st = need_f32_contig(op, n, &n->t, "output", nel, err))) return st;
    if (nel == 0) return RG_OK;
    // The output is normally bound to the parameter's bytes (an in-place update);
    // if it is not, the parameter is only read and the new value goes to the output.
    optim_job j = {.out = n->t.data, .theta = n->src[0]->t.data, .grad = n->src[1]->t.data, .m = n->src[2]->t.data,
                   .v = n->src[3]->t.data, .nel = nel, .fp = n->fp};
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

static void sgd_range(void *p, int ith, int nth) {
    const optim_job *j = p;
    int64_t i0, i1;
    rg_split_range(j->nel, ith, nth, &i0, &i1);
    if (i1 > i0) rg_sgd_row(j->out + i0, j->theta + i0, j->grad + i0, i1 - i0, j->fp);
}

rg_status cpu_sgd(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const char *op = "sgd";
    if (!n->src[0]) return rg_fail(err, RG_ERR_ARG, "%s '%s': no parameter", op, n->t.name);
    const int64_t nel = rg_tensor_nelements(&n->src[0]->t);
    static const char *const names[2] = {"param", "grad"};
    rg_status st;
    for (int i = 0; i < 2; i++) {
        if (!n->src[i]) return rg_fail(err, RG_ERR_ARG, "%s '%s': no %s (src[%d])", op, n->t.name, names[i], i);
        if ((st = need_f32_contig(op, n, &n->src[i]->t, names[i], nel, err))) return st;
    }
    if ((st = need_f32_contig(op, n, &n->t, "output", nel, err))) return st;
    if (nel == 0) return RG_OK;
    optim_job j = {.out = n->t.data, .theta = n->src[0]->t.data, .grad = n->src[1]->t.data, .nel = nel, .fp = n->fp};
    rg_threadpool_run(ctx ? ctx->pool : NULL, sgd_range, &j);
    return RG_OK;
}
