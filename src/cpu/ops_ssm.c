// ops_ssm.c - SSM_CONV, SSM_CONV_BACK and SSM_DT on the CPU (graph.h has the shapes and
// the rules; ops_ssm_scan.c the scan).
//
// SSM_CONV, per sequence s, token t and channel ch (architectures.md §2.5, §3.5):
//   y[ch, t] = sum_{k=0..K-1} c[k, ch] * u(t-(K-1)+k)[ch]
// with u(tau) = x[:, tau] for tau >= 0, the state's column K-1+tau before the chunk. A tap
// before the token's document (rg_ssm_conv_first, cpu/ssm_math.h), or into a NULL state,
// reads zero and is skipped. The sum is in f32, k in order, each product and sum rounded
// on its own (-ffp-contract=off); the CUDA kernel (cuda/ops_ssm.cu) does the same, so the
// bits are the same. The final state's column j is u(T-(K-1)+j), masked as the taps of
// the next chunk's first token.
//
// SSM_CONV_BACK (training.md §8.1), for every position tau = -(K-1) .. T-1:
//   d u(tau)[ch] = sum_{k=0..K-1} dy[ch, tau+(K-1)-k] * c[k, ch]   (the tokens that read tau,
//                  k in order, in f32), + d final[ch, tau-T+(K-1)] when the final state holds tau
// into dx (tau >= 0) or dstate (tau < 0), and
//   dc[k, ch] = sum_s sum_t dy[ch, t, s] * u(t-(K-1)+k)[ch]   in double, s then t in order.
// Rows of positions split between the threads for dx and dstate, channels for dc; no sum is
// split, so the bits do not depend on the thread count.
#include <string.h>

#include "base/error.h"
#include "cpu/cpu_rows.h"
#include "cpu/ops_ssm.h"
#include "cpu/ssm_math.h"

rg_status cpu_ssm_check(const char *op, const rg_node *n, int packed_from, int64_t total, rg_error *err) {
    for (int i = 0; i < RG_MAX_SRC; i++) {
        const rg_node *s = n->src[i];
        if (!s) continue;
        if (!s->t.data) return rg_fail(err, RG_ERR_ARG, "%s '%s': source %d has no data", op, n->t.name, i);
        if (s->t.type != RG_TYPE_F32 && s->t.type != RG_TYPE_I32)
            return rg_fail(err, RG_ERR_UNSUPPORTED, "%s '%s': source %d is %s, expected f32 (document ids i32)", op,
                           n->t.name, i, rg_type_get(s->t.type)->name);
        if (i >= packed_from && !rg_tensor_is_contiguous(&s->t))
            return rg_fail(err, RG_ERR_ARG, "%s '%s': source %d must be contiguous", op, n->t.name, i);
    }
    if (!n->t.data || n->t.type != RG_TYPE_F32 || !rg_tensor_is_contiguous(&n->t) || rg_tensor_nelements(&n->t) != total)
        return rg_fail(err, RG_ERR_ARG, "%s '%s': the output must be contiguous f32 of %lld values", op, n->t.name,
                       (long long)total);
    return RG_OK;
}

// ---------------------------------------------------------------------------
// SSM_CONV and SSM_CONV_BACK

typedef struct conv_job {
    const rg_tensor *x;       // [C, T, S], packed rows, any row strides
    const float *c;           // [K, C]: c[k + K*ch]
    const float *state;       // [C, K-1, S] or NULL
    const rg_node *seg;       // I32 [T] or [T, S], or NULL
    int64_t C, T, S, K;
    float *y, *fin;           // forward parts: y [C, T, S], final state [C, K-1, S]
    const float *dy, *dfin;   // backward: the parts of d
    float *dx, *dstate, *dc;  // backward parts: dx [C, T, S], dstate [C, K-1, S], dc [K, C]
    double *acc;              // backward scratch [K, C]: the dc sums
} conv_job;

// Column u(tau) of sequence s ([C] floats), or NULL where it reads zero: before `first`
// (the document's first readable position), or in a NULL state.
static const float *conv_col(const conv_job *j, int64_t s, int64_t tau, int64_t first) {
    if (tau < first) return NULL;
    if (tau >= 0) return (const float *)((const char *)j->x->data + tau * j->x->nb[1] + s * j->x->nb[2]);
    return j->state ? j->state + j->C * ((j->K - 1 + tau) + (j->K - 1) * s) : NULL;
}

// Units s * (T + 1) + t: token t's y, or for t = T the final state.
static void conv_rows(void *arg, int ith, int nth) {
    const conv_job *j = arg;
    const int64_t C = j->C, T = j->T, K = j->K;
    int64_t u0, u1;
    rg_split_range(j->S * (T + 1), ith, nth, &u0, &u1);
    for (int64_t u = u0; u < u1; u++) {
        const int64_t s = u / (T + 1), t = u % (T + 1);
        const int64_t first = rg_ssm_conv_first(cpu_ssm_seg(j->seg, T, s), T, t, K);
        if (t == T) {
            for (int64_t i = 0; i < K - 1; i++) {
                const float *col = conv_col(j, s, T - (K - 1) + i, first);
                float *f = j->fin + C * (i + (K - 1) * s);  // [C]
                for (int64_t ch = 0; ch < C; ch++) f[ch] = col ? col[ch] : 0.0f;
            }
            continue;
        }
        const float *cols[RG_SSM_CONV_MAX_K];
        for (int64_t k = 0; k < K; k++) cols[k] = conv_col(j, s, t - (K - 1) + k, first);
        float *y = j->y + C * (t + T * s);  // [C]
        for (int64_t ch = 0; ch < C; ch++) {
            const float *w = j->c + K * ch;  // [K]
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++)
                if (cols[k]) acc = acc + w[k] * cols[k][ch];
            y[ch] = acc;
        }
    }
}

rg_status cpu_ssm_conv(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    rg_pack p;
    rg_status st;
    if (!rg_pack_of(n, &p)) return rg_fail(err, RG_ERR_ARG, "ssm_conv '%s': the sources give no layout", n->t.name);
    if ((st = cpu_ssm_check(rg_op_name(RG_OP_SSM_CONV), n, 1, p.total, err))) return st;
    const rg_tensor *x = &n->src[0]->t;
    conv_job j = {.x = x, .c = n->src[1]->t.data, .state = n->src[2] ? n->src[2]->t.data : NULL, .seg = n->src[3],
                  .C = x->ne[0], .T = x->ne[1], .S = x->ne[2], .K = n->src[1]->t.ne[0]};
    j.y = (float *)n->t.data + p.off[RG_SSM_CONV_Y];
    j.fin = (float *)n->t.data + p.off[RG_SSM_CONV_STATE];
    if (x->nb[0] != sizeof(float) && j.C > 1)
        return rg_fail(err, RG_ERR_ARG, "ssm_conv '%s': x needs packed rows", n->t.name);
    run_rows(ctx ? ctx->pool : NULL, conv_rows, &j, j.C * (j.T + 1) * j.S * j.K);
    return RG_OK;
}

// CONV_RS_GATHER: column j of sequence s is u(pos-(K-1)+j), from x's column or prev's (a copy).
rg_status cpu_conv_rs_gather(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    (void)ctx;
    rg_status st;
    const rg_tensor *x = &n->src[0]->t, *prev = &n->src[1]->t;
    const int64_t C = x->ne[0], T = x->ne[1], S = x->ne[2], K1 = prev->ne[1], pos = n->ip[0];
    if ((st = cpu_ssm_check(rg_op_name(RG_OP_CONV_RS_GATHER), n, 1, C * K1 * S, err))) return st;
    if (pos < 0 || pos > T || (x->nb[0] != sizeof(float) && C > 1))
        return rg_fail(err, RG_ERR_ARG, "conv_rs_gather '%s': position %lld outside 0..%lld, or x without packed rows",
                       n->t.name, (long long)pos, (long long)T);
    for (int64_t s = 0; s < S; s++)
        for (int64_t j = 0; j < K1; j++) {
            const int64_t tau = pos - K1 + j;  // u(tau): x's column tau, or prev's column K-1+tau
            const float *col = tau >= 0 ? (const float *)((const char *)x->data + tau * x->nb[1] + s * x->nb[2])
                                        : (const float *)prev->data + C * ((K1 + tau) + K1 * s);
            memcpy((float *)n->t.data + C * (j + K1 * s), col, sizeof(float) * (size_t)C);
        }
    return RG_OK;
}

// dx and dstate: units s * (T + K-1) + (tau + K-1), one position tau of sequence s each.
static void conv_back_rows(void *arg, int ith, int nth) {
    const conv_job *j = arg;
    const int64_t C = j->C, T = j->T, K = j->K, L = T + K - 1;
    int64_t u0, u1;
    rg_split_range(j->S * L, ith, nth, &u0, &u1);
    for (int64_t u = u0; u < u1; u++) {
        const int64_t s = u / L, tau = u % L - (K - 1);
        const int32_t *seg = cpu_ssm_seg(j->seg, T, s);
        // The rows of dy that read tau (tap k of token tau+(K-1)-k), and the final state's.
        const float *rows[RG_SSM_CONV_MAX_K];
        for (int64_t k = 0; k < K; k++) {
            const int64_t t = tau + (K - 1) - k;
            rows[k] = t >= 0 && t < T && tau >= rg_ssm_conv_first(seg, T, t, K) ? j->dy + C * (t + T * s) : NULL;
        }
        const int64_t i_fin = tau - (T - (K - 1));
        const float *fin = i_fin >= 0 && tau >= rg_ssm_conv_first(seg, T, T, K) ? j->dfin + C * (i_fin + (K - 1) * s)
                                                                                 : NULL;
        float *out = tau >= 0 ? j->dx + C * (tau + T * s) : j->dstate + C * ((K - 1 + tau) + (K - 1) * s);  // [C]
        for (int64_t ch = 0; ch < C; ch++) {
            const float *w = j->c + K * ch;  // [K]
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++)
                if (rows[k]) acc = acc + rows[k][ch] * w[k];
            if (fin) acc = acc + fin[ch];
            out[ch] = acc;
        }
    }
}

// dc: channels [c0, c1) per part, every sequence and token, the sums in double.
static void conv_back_kernel_grad(void *arg, int ith, int nth) {
    const conv_job *j = arg;
    const int64_t C = j->C, T = j->T, K = j->K;
    int64_t c0, c1;
    rg_split_range(C, ith, nth, &c0, &c1);
    if (c0 == c1) return;
    for (int64_t k = 0; k < K; k++)
        for (int64_t ch = c0; ch < c1; ch++) j->acc[k * C + ch] = 0.0;
    for (int64_t s = 0; s < j->S; s++) {
        const int32_t *seg = cpu_ssm_seg(j->seg, T, s);
        for (int64_t t = 0; t < T; t++) {
            const int64_t first = rg_ssm_conv_first(seg, T, t, K);
            const float *dy = j->dy + C * (t + T * s);  // [C]
            for (int64_t k = 0; k < K; k++) {
                const float *col = conv_col(j, s, t - (K - 1) + k, first);
                if (!col) continue;
                double *acc = j->acc + k * C;
                for (int64_t ch = c0; ch < c1; ch++) acc[ch] += (double)dy[ch] * (double)col[ch];
            }
        }
    }
    for (int64_t ch = c0; ch < c1; ch++)
        for (int64_t k = 0; k < K; k++) j->dc[k + K * ch] = (float)j->acc[k * C + ch];
}

size_t cpu_ssm_conv_back_work(const rg_node *n, int n_threads) {
    (void)n_threads;
    return (size_t)(n->src[2]->t.ne[0] * n->src[1]->t.ne[0]) * sizeof(double);  // [K, C]
}

rg_status cpu_ssm_conv_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    rg_pack p, pf;
    rg_status st;
    if (!rg_pack_of(n, &p) || !rg_pack_layout(RG_OP_SSM_CONV, (rg_node *[RG_MAX_SRC]){n->src[1], n->src[2]}, n->ip, &pf))
        return rg_fail(err, RG_ERR_ARG, "ssm_conv_back '%s': the sources give no layout", n->t.name);
    if ((st = cpu_ssm_check(rg_op_name(RG_OP_SSM_CONV_BACK), n, 2, p.total, err))) return st;
    if (!n->src[0]->t.data || !rg_tensor_is_contiguous(&n->src[0]->t) || rg_tensor_nelements(&n->src[0]->t) != pf.total)
        return rg_fail(err, RG_ERR_ARG, "ssm_conv_back '%s': d must be contiguous, the forward's %lld values", n->t.name,
                       (long long)pf.total);
    const rg_tensor *x = &n->src[1]->t;
    if (x->nb[0] != sizeof(float) && x->ne[0] > 1)
        return rg_fail(err, RG_ERR_ARG, "ssm_conv_back '%s': x needs packed rows", n->t.name);
    conv_job j = {.x = x, .c = n->src[2]->t.data, .state = n->src[3] ? n->src[3]->t.data : NULL, .seg = n->src[4],
                  .C = x->ne[0], .T = x->ne[1], .S = x->ne[2], .K = n->src[2]->t.ne[0]};
    const float *d = n->src[0]->t.data;
    float *out = n->t.data;
    j.dy = d + pf.off[RG_SSM_CONV_Y], j.dfin = d + pf.off[RG_SSM_CONV_STATE];
    j.dx = out + p.off[RG_SSM_CONV_BACK_DX], j.dstate = out + p.off[RG_SSM_CONV_BACK_DSTATE];
    j.dc = out + p.off[RG_SSM_CONV_BACK_DC];
    const size_t need = cpu_ssm_conv_back_work(n, 1);
    if (!ctx || !ctx->scratch || ctx->scratch_size < need)
        return rg_fail(err, RG_ERR_ARG, "ssm_conv_back '%s': scratch of %zu bytes is below the %zu needed", n->t.name,
                       ctx ? ctx->scratch_size : 0, need);
    j.acc = ctx->scratch;
    const int64_t work = j.C * (j.T + j.K - 1) * j.S * j.K;
    run_rows(ctx->pool, conv_back_rows, &j, work);
    run_rows(ctx->pool, conv_back_kernel_grad, &j, work);
    return RG_OK;
}

// ---------------------------------------------------------------------------
// SSM_DT: per (h, t, s) the step, decay and slope of rg_ssm_dt_values, into [H, T, S, 3].

typedef struct dt_job {
    const float *dt, *A;  // [H, T, S], [H]
    const rg_node *seg;
    float *out;           // [H, T, S, 3]
    int64_t H, T, S;
} dt_job;

static void dt_rows(void *arg, int ith, int nth) {
    const dt_job *j = arg;
    const int64_t H = j->H, HTS = j->H * j->T * j->S;
    int64_t r0, r1;
    rg_split_range(j->T * j->S, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {  // r = t + T * s
        const int64_t t = r % j->T, s = r / j->T;
        const bool starts = rg_ssm_starts_doc(cpu_ssm_seg(j->seg, j->T, s), t);
        for (int64_t h = 0; h < H; h++) {
            const int64_t i = h + H * r;
            rg_ssm_dt_values(j->dt[i], j->A[h], starts, &j->out[i], &j->out[i + HTS], &j->out[i + 2 * HTS]);
        }
    }
}

rg_status cpu_ssm_dt(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const rg_tensor *dt = &n->src[0]->t;
    rg_status st;
    if ((st = cpu_ssm_check(rg_op_name(RG_OP_SSM_DT), n, 0, 3 * rg_tensor_nelements(dt), err))) return st;
    dt_job j = {.dt = dt->data, .A = n->src[1]->t.data, .seg = n->src[2], .out = n->t.data, .H = dt->ne[0],
                .T = dt->ne[1], .S = dt->ne[2]};
    run_rows(ctx ? ctx->pool : NULL, dt_rows, &j, 64 * j.H * j.T * j.S);  // a few exp and log1p per element
    return RG_OK;
}
