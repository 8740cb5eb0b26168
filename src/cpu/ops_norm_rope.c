// ops_norm_rope.c - RMS_NORM, RMS_NORM_BACK, ROPE and ROPE_BACK on the CPU.
//
// Math: architectures.md §0.4 (RMSNorm, RoPE NORMAL/NEOX) and training.md
// §5.1-5.2 (their backward). Every kernel splits its rows between threads with
// rg_split_range and never splits one row's reduction, so the bits do not
// depend on the thread count. All four are safe when the output shares the
// bytes of src[0] (each row is read whole, or each pair read, before it is
// written).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cpu/cpu_ops.h"
#include "cpu/cpu_rows.h"

// ---------------------------------------------------------------------------
// RMS_NORM: x [n, r1, r2, r3] -> y like x; fp[0] = eps.
// Per row: r = 1/sqrt(sum_j x_j^2 / n + eps), with the sum of squares and r in
// double (llama.cpp sums in double; we also keep the mean and 1/sqrt in
// double), then y_j = x_j * (float)r: one f32 rounding per element.

typedef struct norm_job {
    const rg_tensor *x, *dy, *y;  // x [n, rows]; dy (backward only) like x; y the output
    double eps;
} norm_job;

static void rms_norm_rows(void *p, int ith, int nth) {
    const norm_job *j = p;
    const int64_t n = j->x->ne[0];
    int64_t r0, r1;
    rg_split_range(rg_tensor_nrows(j->x), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const float *x = row_at(j->x, r);  // [n]
        float *y = row_at(j->y, r);        // [n]
        double ss = 0.0;
        for (int64_t k = 0; k < n; k++) ss += (double)x[k] * (double)x[k];
        const float scale = (float)(1.0 / sqrt(ss / (double)n + j->eps));
        for (int64_t k = 0; k < n; k++) y[k] = x[k] * scale;
    }
}

rg_status cpu_rms_norm(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const char *op = rg_op_name(RG_OP_RMS_NORM);
    const rg_tensor *x = n->src[0] ? &n->src[0]->t : NULL;
    rg_status st;
    if ((st = need_f32_rows(op, n, x, "x", err)) || (st = need_f32_rows(op, n, &n->t, "output", err)) ||
        (st = need_same_shape(op, n, x, "x", err)))
        return st;
    if (x->ne[0] <= 0 || rg_tensor_nrows(x) == 0) return RG_OK;
    norm_job j = {.x = x, .y = &n->t, .eps = (double)n->fp[0]};
    run_rows(ctx ? ctx->pool : NULL, rms_norm_rows, &j, rg_tensor_nelements(x));
    return RG_OK;
}

// RMS_NORM_BACK: (dy = src0, x = src1) both [n, rows] -> dx like x; fp[0] = eps.
// training.md §5.1: dx_j = r*dy_j - (r^3/n) * x_j * sum_k dy_k x_k, with r, both
// sums and the two coefficients in double; each dx_j is evaluated in double
// and rounded once to f32.
static void rms_norm_back_rows(void *p, int ith, int nth) {
    const norm_job *j = p;
    const int64_t n = j->x->ne[0];
    int64_t r0, r1;
    rg_split_range(rg_tensor_nrows(j->x), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const float *x = row_at(j->x, r);    // [n]
        const float *dy = row_at(j->dy, r);  // [n]
        float *dx = row_at(j->y, r);         // [n]
        double ss = 0.0, sdx = 0.0;
        for (int64_t k = 0; k < n; k++) {
            ss += (double)x[k] * (double)x[k];
            sdx += (double)dy[k] * (double)x[k];
        }
        const double rr = 1.0 / sqrt(ss / (double)n + j->eps);
        const double c = rr * rr * rr / (double)n * sdx;
        for (int64_t k = 0; k < n; k++) dx[k] = (float)(rr * (double)dy[k] - c * (double)x[k]);
    }
}

rg_status cpu_rms_norm_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const char *op = rg_op_name(RG_OP_RMS_NORM_BACK);
    const rg_tensor *dy = n->src[0] ? &n->src[0]->t : NULL;
    const rg_tensor *x = n->src[1] ? &n->src[1]->t : NULL;
    rg_status st;
    if ((st = need_f32_rows(op, n, dy, "dy", err)) || (st = need_f32_rows(op, n, x, "x", err)) ||
        (st = need_f32_rows(op, n, &n->t, "output", err)) || (st = need_same_shape(op, n, x, "x", err)) ||
        (st = need_same_shape(op, n, dy, "dy", err)))
        return st;
    if (x->ne[0] <= 0 || rg_tensor_nrows(x) == 0) return RG_OK;
    norm_job j = {.x = x, .dy = dy, .y = &n->t, .eps = (double)n->fp[0]};
    run_rows(ctx ? ctx->pool : NULL, rms_norm_back_rows, &j, 2 * rg_tensor_nelements(x));
    return RG_OK;
}

// ---------------------------------------------------------------------------
// ROPE: x [head_dim, n_head, T, b] with pos I32 [T] -> y like x.
// ip[0] = n_rot (even, <= head_dim), ip[1] = mode (0 NORMAL, 2 NEOX);
// fp[0] = freq_base, fp[1] = freq_scale. architectures.md §0.4:
//   theta_i = pos * freq_scale * base^(-2i/n_rot), i in [0, n_rot/2), in double;
//   c = (float)cos(theta_i), s = (float)sin(theta_i);
//   (a, b) -> (a*c - b*s, a*s + b*c) in f32 (each product and sum rounded).
// NORMAL pairs (2i, 2i+1); NEOX pairs (i, i + n_rot/2); dims >= n_rot copied.
// ROPE_BACK (training.md §5.2) is the transpose: the same with s negated.

typedef struct rope_job {
    const rg_tensor *x, *y;
    const int32_t *pos;  // [T]
    int64_t T, half;     // half = n_rot / 2
    int mode;
    double base, scale;
    float sign;          // +1 forward, -1 backward
    float *cs;           // [T][half][2]: cos, sin (sin already signed)
    double *freq;        // [half]: base^(-2i/n_rot), the same for every token
} rope_job;

static void rope_table(void *p, int ith, int nth) {
    const rope_job *j = p;
    int64_t t0, t1;
    rg_split_range(j->T, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        float *cs = j->cs + t * j->half * 2;
        const double ps = (double)j->pos[t] * j->scale;
        for (int64_t i = 0; i < j->half; i++) {
            const double theta = ps * j->freq[i];
            cs[2 * i] = (float)cos(theta);
            cs[2 * i + 1] = j->sign * (float)sin(theta);
        }
    }
}

static void rope_rows(void *p, int ith, int nth) {
    const rope_job *j = p;
    const int64_t hd = j->x->ne[0], nh = j->x->ne[1], half = j->half;
    // pair (i, i + off) at stride `step`: NORMAL (2i, 2i+1), NEOX (i, i + half)
    const int64_t step = j->mode == 2 ? 1 : 2, off = j->mode == 2 ? half : 1;
    int64_t r0, r1;
    rg_split_range(rg_tensor_nrows(j->x), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t t = (r / nh) % j->T;   // the token (dim 2) of this row
        const float *x = row_at(j->x, r);    // [head_dim]
        float *y = row_at(j->y, r);          // [head_dim]
        const float *cs = j->cs + t * half * 2;
        for (int64_t i = 0; i < half; i++) {
            const float c = cs[2 * i], s = cs[2 * i + 1];
            const float a = x[i * step], b = x[i * step + off];
            y[i * step] = a * c - b * s;
            y[i * step + off] = a * s + b * c;
        }
        if (y != x)
            for (int64_t k = 2 * half; k < hd; k++) y[k] = x[k];
    }
}

// The cos/sin table of the last small ROPE on this thread (no heap: nothing
// to free when the thread ends). The values depend only on the key.
#define SMALL_T 4
#define SMALL_HALF 128
typedef struct small_table {
    bool valid;
    int64_t T, half;
    double base, scale;
    float sign;
    int32_t pos[SMALL_T];
    float cs[SMALL_T * SMALL_HALF * 2];
} small_table;
static _Thread_local small_table last_small;

static rg_status rope_run(const char *op, rg_exec_ctx *ctx, rg_node *n, const char *xname, float sign,
                          rg_error *err) {
    const rg_tensor *x = n->src[0] ? &n->src[0]->t : NULL;
    const rg_tensor *pos = n->src[1] ? &n->src[1]->t : NULL;
    rg_status st;
    if ((st = need_f32_rows(op, n, x, xname, err)) || (st = need_f32_rows(op, n, &n->t, "output", err)) ||
        (st = need_same_shape(op, n, x, xname, err)))
        return st;
    if (!pos || !pos->data || pos->type != RG_TYPE_I32)
        return rg_fail(err, RG_ERR_ARG, "%s '%s': positions must be i32 with data", op, n->t.name);
    if (pos->ne[0] != x->ne[2] || rg_tensor_nrows(pos) != 1 || (pos->ne[0] > 1 && pos->nb[0] != sizeof(int32_t)))
        return rg_fail(err, RG_ERR_ARG, "%s '%s': positions have %lld entries (packed, one row) for %lld tokens", op,
                       n->t.name, (long long)rg_tensor_nelements(pos), (long long)x->ne[2]);
    const int64_t n_rot = n->ip[0], mode = n->ip[1];
    if (n_rot < 0 || n_rot % 2 || n_rot > x->ne[0])
        return rg_fail(err, RG_ERR_ARG, "%s '%s': n_rot = %lld must be even and within 0..%lld (head_dim)", op,
                       n->t.name, (long long)n_rot, (long long)x->ne[0]);
    if (mode != 0 && mode != 2)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s '%s': mode %lld (only 0 NORMAL and 2 NEOX)", op, n->t.name,
                       (long long)mode);
    if (rg_tensor_nelements(x) == 0) return RG_OK;
    rope_job j = {.x = x, .y = &n->t, .pos = pos->data, .T = x->ne[2], .half = n_rot / 2, .mode = (int)mode,
                  .base = (double)n->fp[0], .scale = (double)n->fp[1], .sign = sign};
    rg_threadpool *pool = ctx ? ctx->pool : NULL;
    if (j.half > 0 && j.T <= SMALL_T && j.half <= SMALL_HALF) {
        // A token or a few (generation): the table of the last call on this
        // thread is reused when it was for the same positions and parameters
        // (every ROPE of a token's graph: 2 per layer), else made here.
        small_table *c = &last_small;
        bool same = c->valid && c->T == j.T && c->half == j.half && c->base == j.base && c->scale == j.scale &&
                    c->sign == j.sign && memcmp(c->pos, j.pos, sizeof(int32_t) * (size_t)j.T) == 0;
        if (!same) {
            double freq[SMALL_HALF];
            for (int64_t i = 0; i < j.half; i++) freq[i] = pow(j.base, -2.0 * (double)i / (double)n_rot);
            j.cs = c->cs, j.freq = freq;
            rope_table(&j, 0, 1);
            c->valid = true, c->T = j.T, c->half = j.half, c->base = j.base, c->scale = j.scale, c->sign = j.sign;
            memcpy(c->pos, j.pos, sizeof(int32_t) * (size_t)j.T);
        }
        j.cs = c->cs, j.freq = NULL;
        run_rows(pool, rope_rows, &j, rg_tensor_nelements(x));
        return RG_OK;
    }
    if (j.half > 0) {
        j.cs = malloc(sizeof(float) * 2 * (size_t)j.half * (size_t)j.T + sizeof(double) * (size_t)j.half);
        if (!j.cs)
            return rg_fail(err, RG_ERR_NOMEM, "%s '%s': out of memory for the cos/sin table [%lld, %lld]", op,
                           n->t.name, (long long)n_rot, (long long)j.T);
        // The doubles after the floats: 2 * half * T floats are a whole number of doubles.
        j.freq = (double *)(j.cs + 2 * j.half * j.T);
        for (int64_t i = 0; i < j.half; i++) j.freq[i] = pow(j.base, -2.0 * (double)i / (double)n_rot);
        // The table costs a pow, a cos and a sin per entry.
        run_rows(pool, rope_table, &j, 64 * j.half * j.T);
    }
    run_rows(pool, rope_rows, &j, rg_tensor_nelements(x));
    free(j.cs);
    return RG_OK;
}

rg_status cpu_rope(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    return rope_run(rg_op_name(n->op), ctx, n, "x", 1.0f, err);
}

rg_status cpu_rope_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    return rope_run(rg_op_name(n->op), ctx, n, "dy", -1.0f, err);
}
