// ops_softmax_loss.c - SOFT_MAX, SOFT_MAX_BACK, CROSS_ENTROPY_LOSS and
// CROSS_ENTROPY_LOSS_BACK on the CPU.
//
// Math: architectures.md §0.4 (causal attention), training.md §5.3 (softmax
// and its backward), §5.4 (softcap) and §5.8 (cross-entropy with an ignore
// index). Threads own whole rows (rg_split_range); every reduction runs over
// one row in index order, and the loss adds the per-row terms in row order
// after the parallel part, so the bits never depend on the thread count.
#include <math.h>
#include <stdlib.h>

#include "base/cpu.h"
#include "base/error.h"
#include "cpu/cpu_ops.h"
#include "cpu/rows_avx2.h"
#include "cpu/cpu_rows.h"
#include "cpu/exp_poly.h"

// ---------------------------------------------------------------------------
// SOFT_MAX: a [n_kv, T, H, b], mask [n_kv, >= T] f32 or NULL -> y like a.
// ip[0] = causal, ip[1] = sliding window (0 = none), fp[0] = scale, fp[1] = softcap (0 = none). For query row i:
//   z_j = softcap > 0 ? softcap * tanhf(scale*a_j / softcap) : scale*a_j   (f32, §5.4)
//   z_j += mask[j, i]                                  (when a mask is given)
//   z_j = -inf when causal and j > i + (n_kv - T)      (llama.cpp's causal rule)
//   z_j = -inf when window > 0 and (i + n_kv - T) - j >= window   (§1.7; the keys before `start` below)
//   y_j = exp(z_j - max_k z_k) / sum_k exp(z_k - max)  (§5.3)
// The exponentials are f32 (exp_poly.h's polynomial, within 2 ulp of expf, the
// same bits from the AVX2 kernels of ops_softmax_avx2.c); their sum is
// accumulated in double, key j into partial sum j % 8, the 8 then added in a
// fixed tree, and y_j = (float)(e_j * (1/sum)) with 1/sum in double. A row whose z
// are all -inf gives y = 0 (§5.3 [ours]), never NaN. The mask is shared by
// every head (dims 2 and 3 of a); a taller mask (padded, as llama.cpp pads
// KQ masks) uses its first T rows.

typedef struct sm_job {
    const rg_tensor *a, *mask, *y, *dy;  // forward: a, mask, y (output); backward: dy, y, a, out in `out`
    const rg_tensor *out;
    int causal;
    int64_t window;
    float scale, softcap;
} sm_job;

// The AVX2 row kernels (rows_avx2.h): the same bits as the loops below.

static void soft_max_rows(void *p, int ith, int nth) {
    const sm_job *j = p;
    const int64_t n_kv = j->a->ne[0], T = j->a->ne[1];
    const int64_t n_past = n_kv - T;
    const bool avx2 = rg_sm_avx2_built && rg_cpu_has_avx2();
    int64_t r0, r1;
    rg_split_range(rg_tensor_nrows(j->a), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i = r % T;            // the query row
        float *yrow = row_at(j->y, r);      // [n_kv]
        // Keys at or beyond `end` are causally masked, those before `start` out of the sliding window.
        int64_t end = n_kv, start = 0;
        if (j->causal) {
            int64_t lim = i + n_past + 1;
            end = lim < 0 ? 0 : lim < n_kv ? lim : n_kv;
            if (j->window > 0 && end - j->window > 0) start = end - j->window;
        }
        for (int64_t k = 0; k < start; k++) yrow[k] = 0.0f;
        // The row from `start` on: without a window the whole row, as before.
        const float *a = row_at(j->a, r) + start;
        float *y = yrow + start;
        const float *mask = j->mask ? (const float *)((const char *)j->mask->data + i * j->mask->nb[1]) + start : NULL;
        end -= start;
        const int64_t n_row = n_kv - start;
        float mx = -INFINITY;
        if (avx2 && j->softcap <= 0.0f) {
            mx = rg_sm_scores_avx2(a, mask, j->scale, y, end);
        } else {
            for (int64_t k = 0; k < end; k++) {
                float z = j->scale * a[k];
                if (j->softcap > 0.0f) z = j->softcap * tanhf(z / j->softcap);
                if (mask) z += mask[k];
                y[k] = z;
                if (z > mx) mx = z;
            }
        }
        if (mx == -INFINITY) {  // every key masked: zeros, no NaN
            for (int64_t k = 0; k < n_row; k++) y[k] = 0.0f;
            continue;
        }
        // exp(z - max) <= 1 (exp_poly.h; exp(-inf) = 0 for keys the mask
        // removed), summed in double into 8 partial sums, key k into sum k % 8.
        double sums[8] = {0};
        if (avx2) {
            rg_ce_exp_sum_avx2(y, y, end, mx, sums);
        } else {
            for (int64_t k = 0; k < end; k++) {
                float e = rg_exp_neg_abs(y[k] - mx);
                y[k] = e;
                sums[k % 8] += (double)e;
            }
        }
        const double sum = ((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7]));
        const double inv = 1.0 / sum;  // sum >= 1: the max contributes exp(0)
        if (avx2) {
            rg_ce_scale_avx2(y, end, inv);
        } else {
            for (int64_t k = 0; k < end; k++) y[k] = (float)((double)y[k] * inv);
        }
        for (int64_t k = end; k < n_row; k++) y[k] = 0.0f;
    }
}

rg_status cpu_soft_max(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const char *op = rg_op_name(RG_OP_SOFT_MAX);
    const rg_tensor *a = n->src[0] ? &n->src[0]->t : NULL;
    const rg_tensor *mask = n->src[1] ? &n->src[1]->t : NULL;
    rg_status st;
    if ((st = need_f32_rows(op, n, a, "a", err)) || (st = need_f32_rows(op, n, &n->t, "output", err)) ||
        (st = need_same_shape(op, n, a, "a", err)))
        return st;
    if (mask) {
        if ((st = need_f32_rows(op, n, mask, "mask", err))) return st;
        if (mask->ne[0] != a->ne[0] || mask->ne[1] < a->ne[1] || mask->ne[2] != 1 || mask->ne[3] != 1) {
            char s1[96], s2[96];
            return rg_fail(err, RG_ERR_ARG, "%s '%s': mask %s does not fit scores %s (expected [n_kv, >= T])", op,
                           n->t.name, rg_tensor_shape_str(mask, s1, sizeof s1), rg_tensor_shape_str(a, s2, sizeof s2));
        }
    }
    if (rg_tensor_nelements(a) == 0) return RG_OK;
    if (n->ip[1] < 0 || (n->ip[1] > 0 && !n->ip[0]))
        return rg_fail(err, RG_ERR_ARG, "%s '%s': sliding window %lld needs the causal mask", op, n->t.name,
                       (long long)n->ip[1]);
    sm_job j = {.a = a, .mask = mask, .y = &n->t, .causal = n->ip[0] != 0, .window = n->ip[1], .scale = n->fp[0],
                .softcap = n->fp[1]};
    // An exp per element: worth the pool from a quarter of the usual size.
    run_rows(ctx ? ctx->pool : NULL, soft_max_rows, &j, 4 * rg_tensor_nelements(a));
    return RG_OK;
}

// SOFT_MAX_BACK: (dy, y, a) [n_kv, rows] -> da like y; fp[0] = scale, fp[1] = softcap.
// §5.3: dz_j = y_j (dy_j - sum_k y_k dy_k), the sum in double; §5.4 with the
// capped input scale*a: da_j = dz_j * scale * (1 - t_j^2), t_j = tanhf(scale*a_j/softcap)
// (the forward's f32 t), else da_j = dz_j * scale. Each da_j is evaluated in
// double from the f32 inputs and rounded once. a is read only with a softcap.
static void soft_max_back_rows(void *p, int ith, int nth) {
    const sm_job *j = p;
    const int64_t n_kv = j->y->ne[0];
    const double scale = (double)j->scale;
    int64_t r0, r1;
    rg_split_range(rg_tensor_nrows(j->y), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const float *dy = row_at(j->dy, r);  // [n_kv]
        const float *y = row_at(j->y, r);    // [n_kv]
        const float *a = j->softcap > 0.0f ? row_at(j->a, r) : NULL;
        float *da = row_at(j->out, r);       // [n_kv]
        double s = 0.0;
        for (int64_t k = 0; k < n_kv; k++) s += (double)y[k] * (double)dy[k];
        for (int64_t k = 0; k < n_kv; k++) {
            double g = (double)y[k] * ((double)dy[k] - s) * scale;
            if (a) {
                double t = (double)tanhf(j->scale * a[k] / j->softcap);
                g *= 1.0 - t * t;
            }
            da[k] = (float)g;
        }
    }
}

rg_status cpu_soft_max_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const char *op = rg_op_name(RG_OP_SOFT_MAX_BACK);
    const rg_tensor *dy = n->src[0] ? &n->src[0]->t : NULL;
    const rg_tensor *y = n->src[1] ? &n->src[1]->t : NULL;
    const rg_tensor *a = n->src[2] ? &n->src[2]->t : NULL;
    const float softcap = n->fp[1];
    rg_status st;
    if ((st = need_f32_rows(op, n, dy, "dy", err)) || (st = need_f32_rows(op, n, y, "y", err)) ||
        (st = need_f32_rows(op, n, &n->t, "output", err)) || (st = need_same_shape(op, n, dy, "dy", err)) ||
        (st = need_same_shape(op, n, y, "y", err)))
        return st;
    if (softcap > 0.0f) {
        if (!a) return rg_fail(err, RG_ERR_ARG, "%s '%s': a softcap of %g needs the scores a (src[2])", op, n->t.name,
                               (double)softcap);
        if ((st = need_f32_rows(op, n, a, "a", err)) || (st = need_same_shape(op, n, a, "a", err))) return st;
    }
    if (rg_tensor_nelements(y) == 0) return RG_OK;
    sm_job j = {.dy = dy, .y = y, .a = softcap > 0.0f ? a : NULL, .out = &n->t, .scale = n->fp[0], .softcap = softcap};
    rg_threadpool_run(ctx ? ctx->pool : NULL, soft_max_back_rows, &j);
    return RG_OK;
}

// ---------------------------------------------------------------------------
// CROSS_ENTROPY_LOSS: logits Z [V, T] (f32; dims 2, 3 fold into T), labels I32 [T]
// -> L [1]. ip[0] = ignore_index; fp[0] = inv_n (> 0: the step's 1/N_valid; 0:
// count N_valid here). training.md §5.8:
//   lse_t = m_t + log sum_v exp(Z[v,t] - m_t),  m_t = max_v Z[v,t]
//   L = inv_n * sum_{t valid} (lse_t - Z[label_t, t])
// exp in f32 (exp_poly.h's exp of an argument <= 0, within 2 ulp of expf, so
// no overflow even for logits of 1e4), the row sum (8 double partial sums,
// element v into sum v % 8, added in a fixed tree, as SOFT_MAX does), log, lse
// and the sum over t in double. The AVX2 row kernels (ops_ce_avx2.c) give the
// same bits as the scalar loops. Row terms are computed in
// parallel into a [T] double array and added in increasing t on one thread.
// N_valid = 0 with fp[0] == 0 gives L = 0. A label outside [0, V) other than
// ignore_index is an error naming its position.
// CROSS_ENTROPY_LOSS_BACK: (dL [1], Z [V, T], labels [T]) -> dZ [V, T]:
//   dZ[v,t] = (softmax_t(v) - [v == label_t]) * dL * inv_n for valid t, 0 otherwise,
// with softmax_t(v) = exp(Z[v,t] - m_t) / sum (double) and each element
// rounded once to f32. The backward recomputes m_t and the sum (the forward is
// another node); the exponentials go into dZ on the way and are scaled there.

typedef struct ce_job {
    const rg_tensor *z;      // [V, T]
    const int32_t *labels;   // [T]
    int32_t ignore;
    double *terms;           // forward: [T] lse_t - Z[label_t, t] (0 for ignored rows)
    const rg_tensor *dz;     // backward output [V, T]
    double coef;             // backward: dL * inv_n
} ce_job;


// Row max and sum_v exp(Z[v] - max) (double) of one row of V logits; when e is
// not NULL the exponentials are stored there too (e may be z: each z[v] is
// read before e[v] is written).
void rg_ce_row_max_sumexp(const float *z, float *e, int64_t V, bool avx2, float *mx_out, double *sum_out) {
    float mx = -INFINITY;
    double sums[8] = {0};
    if (avx2) {
        mx = rg_ce_max_avx2(z, V);
        rg_ce_exp_sum_avx2(z, e, V, mx, sums);
    } else {
        for (int64_t v = 0; v < V; v++)
            if (z[v] > mx) mx = z[v];
        for (int64_t v = 0; v < V; v++) {
            float x = rg_exp_neg_abs(z[v] - mx);
            if (e) e[v] = x;
            sums[v % 8] += (double)x;
        }
    }
    *mx_out = mx;
    *sum_out = ((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7]));
}

static void ce_rows(void *p, int ith, int nth) {
    const ce_job *j = p;
    const int64_t V = j->z->ne[0];
    const bool avx2 = rg_ce_avx2_built && rg_cpu_has_avx2();
    int64_t t0, t1;
    rg_split_range(rg_tensor_nrows(j->z), ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        if (j->labels[t] == j->ignore) {
            j->terms[t] = 0.0;
            continue;
        }
        const float *z = row_at(j->z, t);  // [V]
        float mx;
        double sum;
        rg_ce_row_max_sumexp(z, NULL, V, avx2, &mx, &sum);
        j->terms[t] = ((double)mx + log(sum)) - (double)z[j->labels[t]];
    }
}

static void ce_back_rows(void *p, int ith, int nth) {
    const ce_job *j = p;
    const int64_t V = j->z->ne[0];
    const bool avx2 = rg_ce_avx2_built && rg_cpu_has_avx2();
    int64_t t0, t1;
    rg_split_range(rg_tensor_nrows(j->z), ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        float *dz = row_at(j->dz, t);  // [V]
        const int32_t label = j->labels[t];
        if (label == j->ignore) {
            for (int64_t v = 0; v < V; v++) dz[v] = 0.0f;
            continue;
        }
        const float *z = row_at(j->z, t);  // [V]; may share bytes with dz
        float mx;
        double sum;
        rg_ce_row_max_sumexp(z, dz, V, avx2, &mx, &sum);  // dz[v] = exp(z[v] - mx)
        const double c = j->coef / sum;
        const float e_label = dz[label];
        if (avx2) {
            rg_ce_scale_avx2(dz, V, c);
        } else {
            for (int64_t v = 0; v < V; v++) dz[v] = (float)((double)dz[v] * c);
        }
        dz[label] = (float)((double)e_label * c - j->coef);
    }
}

// Checks shapes and labels; sets *inv_n (double) and *n_valid.
static rg_status ce_prepare(const char *op, const rg_node *n, const rg_tensor *z, const rg_tensor *labels,
                            double *inv_n, int64_t *n_valid, rg_error *err) {
    rg_status st;
    if ((st = need_f32_rows(op, n, z, "logits", err))) return st;
    if (!labels || !labels->data || labels->type != RG_TYPE_I32)
        return rg_fail(err, RG_ERR_ARG, "%s '%s': labels must be i32 with data", op, n->t.name);
    const int64_t V = z->ne[0], T = rg_tensor_nrows(z);
    if (rg_tensor_nelements(labels) != T || (labels->ne[0] > 1 && labels->nb[0] != sizeof(int32_t)) ||
        rg_tensor_nrows(labels) != 1) {
        char s1[96], s2[96];
        return rg_fail(err, RG_ERR_ARG, "%s '%s': labels %s (packed, one row) do not match logits %s", op, n->t.name,
                       rg_tensor_shape_str(labels, s1, sizeof s1), rg_tensor_shape_str(z, s2, sizeof s2));
    }
    const int32_t *lab = labels->data;
    const int32_t ignore = (int32_t)n->ip[0];
    int64_t cnt = 0;
    for (int64_t t = 0; t < T; t++) {
        if (lab[t] == ignore) continue;
        if (lab[t] < 0 || lab[t] >= V)
            return rg_fail(err, RG_ERR_ARG, "cross_entropy '%s': label %d at position %lld is outside 0..%lld",
                           n->t.name, (int)lab[t], (long long)t, (long long)(V - 1));
        cnt++;
    }
    *n_valid = cnt;
    *inv_n = n->fp[0] > 0.0f ? (double)n->fp[0] : cnt > 0 ? 1.0 / (double)cnt : 0.0;
    return RG_OK;
}

rg_status cpu_cross_entropy_loss(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const char *op = rg_op_name(RG_OP_CROSS_ENTROPY_LOSS);
    const rg_tensor *z = n->src[0] ? &n->src[0]->t : NULL;
    const rg_tensor *labels = n->src[1] ? &n->src[1]->t : NULL;
    rg_status st;
    double inv_n;
    int64_t n_valid;
    if ((st = need_f32_rows(op, n, &n->t, "output", err)) ||
        (st = ce_prepare(op, n, z, labels, &inv_n, &n_valid, err)))
        return st;
    if (rg_tensor_nelements(&n->t) != 1)
        return rg_fail(err, RG_ERR_ARG, "%s '%s': the output must hold one element, not %lld", op, n->t.name,
                       (long long)rg_tensor_nelements(&n->t));
    float *out = n->t.data;
    const int64_t T = rg_tensor_nrows(z);
    if (n_valid == 0) {  // §5.8: no valid token, loss 0 (the trainer warns)
        *out = 0.0f;
        return RG_OK;
    }
    ce_job j = {.z = z, .labels = labels->data, .ignore = (int32_t)n->ip[0]};
    j.terms = malloc(sizeof(double) * (size_t)T);
    if (!j.terms)
        return rg_fail(err, RG_ERR_NOMEM, "%s '%s': out of memory for %lld row losses", op, n->t.name, (long long)T);
    rg_threadpool_run(ctx ? ctx->pool : NULL, ce_rows, &j);
    double sum = 0.0;
    for (int64_t t = 0; t < T; t++) sum += j.terms[t];
    free(j.terms);
    *out = (float)(sum * inv_n);
    return RG_OK;
}

rg_status cpu_cross_entropy_loss_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const char *op = rg_op_name(RG_OP_CROSS_ENTROPY_LOSS_BACK);
    const rg_tensor *dl = n->src[0] ? &n->src[0]->t : NULL;
    const rg_tensor *z = n->src[1] ? &n->src[1]->t : NULL;
    const rg_tensor *labels = n->src[2] ? &n->src[2]->t : NULL;
    rg_status st;
    double inv_n;
    int64_t n_valid;
    if ((st = need_f32_rows(op, n, dl, "dL", err)) || (st = need_f32_rows(op, n, &n->t, "output", err)) ||
        (st = ce_prepare(op, n, z, labels, &inv_n, &n_valid, err)) || (st = need_same_shape(op, n, z, "logits", err)))
        return st;
    if (rg_tensor_nelements(dl) != 1)
        return rg_fail(err, RG_ERR_ARG, "%s '%s': dL must hold one element, not %lld", op, n->t.name,
                       (long long)rg_tensor_nelements(dl));
    if (rg_tensor_nelements(z) == 0) return RG_OK;
    ce_job j = {.z = z, .labels = labels->data, .ignore = (int32_t)n->ip[0], .dz = &n->t,
                .coef = (double)*(const float *)dl->data * inv_n};
    rg_threadpool_run(ctx ? ctx->pool : NULL, ce_back_rows, &j);
    return RG_OK;
}
