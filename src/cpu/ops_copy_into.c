// ops_copy_into.c - CPY_INTO: a's values written through the node's own
// strides into the window it aliases (a KV-cache write). Any strides on both
// sides; F32, F16 and BF16 on both sides (RNE conversions). With ip[0] = 1 (rg_acc_into) the
// window accumulates instead: d += a, f32 on both sides.
//
// A row whose destination elements are packed goes through the row
// converters of half.h (the same bits as the scalar conversions), its source
// first gathered into a small buffer when strided (the transposed V-cache
// write of a prompt reads a column of the new values); rows of one element
// (that write for one token) are converted in runs along dimension 1;
// anything else element by element.
#include <string.h>

#include "base/error.h"
#include "cpu/cpu_ops.h"
#include "tensor/half.h"

static float load(uint32_t type, const char *p) {
    uint16_t h;
    float f;
    switch (type) {
    case RG_TYPE_F16: memcpy(&h, p, 2); return rg_fp16_to_fp32(h);
    case RG_TYPE_BF16: memcpy(&h, p, 2); return rg_bf16_to_fp32(h);
    default: memcpy(&f, p, 4); return f;
    }
}

static void store(uint32_t type, char *p, float v) {
    uint16_t h;
    switch (type) {
    case RG_TYPE_F16: h = rg_fp32_to_fp16(v); memcpy(p, &h, 2); break;
    case RG_TYPE_BF16: h = rg_fp32_to_bf16(v); memcpy(p, &h, 2); break;
    default: memcpy(p, &v, 4); break;
    }
}

typedef struct job {
    const rg_tensor *a;
    rg_tensor *d;
} job;

// Elements per pass of the gather buffer.
enum { SEG = 256 };

// n elements of an F32 source (element stride ss bytes) into a packed F16/BF16 destination.
static void convert_run(const char *sa, size_t ss, uint32_t dtype, uint16_t *dst, int64_t n) {
    float buf[SEG];
    for (int64_t i0 = 0; i0 < n; i0 += SEG) {
        int64_t m = n - i0 < SEG ? n - i0 : SEG;
        const float *src = (const float *)(sa + i0 * (int64_t)ss);
        if (ss != sizeof(float)) {
            for (int64_t i = 0; i < m; i++) memcpy(&buf[i], sa + (i0 + i) * (int64_t)ss, sizeof(float));
            src = buf;
        }
        if (dtype == RG_TYPE_F16) rg_fp32_to_fp16_row(src, dst + i0, m);
        else rg_fp32_to_bf16_row(src, dst + i0, m);
    }
}

// Threads take disjoint ranges of rows (i1, i2, i3): no two write the same bytes.
static void copy_rows(void *p, int ith, int nth) {
    job *j = p;
    const rg_tensor *a = j->a;
    rg_tensor *d = j->d;
    int64_t rows = a->ne[1] * a->ne[2] * a->ne[3], r0, r1;
    rg_split_range(rows, ith, nth, &r0, &r1);
    // (Rows of one element - the V-cache write of one token - take the scalar path below.)
    const bool to_half = a->type == RG_TYPE_F32 && (d->type == RG_TYPE_F16 || d->type == RG_TYPE_BF16) &&
                         d->nb[0] == 2 && a->ne[0] > 1;
    // Row coordinates stepped, not divided out per row (the V-cache write of a
    // token is a few hundred one-element rows).
    int64_t i1 = r0 % a->ne[1], i2 = r0 / a->ne[1] % a->ne[2], i3 = r0 / a->ne[1] / a->ne[2];
    for (int64_t r = r0; r < r1; r++, i1++) {
        if (i1 == a->ne[1]) {
            i1 = 0;
            if (++i2 == a->ne[2]) i2 = 0, i3++;
        }
        const char *sa = (const char *)a->data + i1 * a->nb[1] + i2 * a->nb[2] + i3 * a->nb[3];
        char *sd = (char *)d->data + i1 * d->nb[1] + i2 * d->nb[2] + i3 * d->nb[3];
        if (a->type == d->type && a->nb[0] == d->nb[0] && a->nb[0] == rg_type_get(a->type)->type_size) {
            memcpy(sd, sa, (size_t)a->ne[0] * a->nb[0]);
            continue;
        }
        if (to_half) {
            convert_run(sa, a->nb[0], d->type, (uint16_t *)sd, a->ne[0]);
            continue;
        }
        for (int64_t i0 = 0; i0 < a->ne[0]; i0++) store(d->type, sd + i0 * d->nb[0], load(a->type, sa + i0 * a->nb[0]));
    }
}

// Rows of one element (the V-cache write of one token: a column of new values
// into a column of the transposed cache), F32 into F16/BF16: converted in runs
// along dimension 1, gathered, converted as a row and scattered.
static void copy_runs_dim1(const rg_tensor *a, rg_tensor *d) {
    float buf[SEG];
    uint16_t h[SEG];
    for (int64_t i3 = 0; i3 < a->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < a->ne[2]; i2++) {
            const char *sa = (const char *)a->data + i2 * a->nb[2] + i3 * a->nb[3];
            char *sd = (char *)d->data + i2 * d->nb[2] + i3 * d->nb[3];
            for (int64_t i0 = 0; i0 < a->ne[1]; i0 += SEG) {
                int64_t m = a->ne[1] - i0 < SEG ? a->ne[1] - i0 : SEG;
                for (int64_t i = 0; i < m; i++) memcpy(&buf[i], sa + (i0 + i) * a->nb[1], sizeof(float));
                if (d->type == RG_TYPE_F16) rg_fp32_to_fp16_row(buf, h, m);
                else rg_fp32_to_bf16_row(buf, h, m);
                for (int64_t i = 0; i < m; i++) memcpy(sd + (i0 + i) * d->nb[1], &h[i], sizeof(uint16_t));
            }
        }
}

// Accumulate mode (ip[0] = 1): d += a, f32 both sides, one f32 add per element (the bits of
// ADD), rows split across threads as copy_rows splits them.
static void add_rows(void *p, int ith, int nth) {
    job *j = p;
    const rg_tensor *a = j->a;
    rg_tensor *d = j->d;
    int64_t rows = a->ne[1] * a->ne[2] * a->ne[3], r0, r1;
    rg_split_range(rows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i1 = r % a->ne[1], i2 = r / a->ne[1] % a->ne[2], i3 = r / a->ne[1] / a->ne[2];
        const char *sa = (const char *)a->data + i1 * a->nb[1] + i2 * a->nb[2] + i3 * a->nb[3];
        char *sd = (char *)d->data + i1 * d->nb[1] + i2 * d->nb[2] + i3 * d->nb[3];
        if (a->nb[0] == 4 && d->nb[0] == 4) {
            const float *x = (const float *)sa;
            float *y = (float *)sd;
            for (int64_t i0 = 0; i0 < a->ne[0]; i0++) y[i0] = y[i0] + x[i0];
            continue;
        }
        for (int64_t i0 = 0; i0 < a->ne[0]; i0++) {
            float x, y;
            memcpy(&x, sa + i0 * a->nb[0], 4);
            memcpy(&y, sd + i0 * d->nb[0], 4);
            y = y + x;
            memcpy(sd + i0 * d->nb[0], &y, 4);
        }
    }
}

rg_status cpu_cpy_into(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const rg_tensor *a = &n->src[0]->t;
    if (!rg_tensor_same_shape(a, &n->t))
        return rg_fail(err, RG_ERR_ARG, "cpy_into '%s': source and window shapes differ", n->t.name);
    job j = {a, &n->t};
    if (n->ip[0]) {  // accumulate
        if (a->type != RG_TYPE_F32 || n->t.type != RG_TYPE_F32)
            return rg_fail(err, RG_ERR_ARG, "cpy_into '%s': accumulating needs f32 on both sides", n->t.name);
        if (rg_tensor_nrows(a) * a->ne[0] < 16384) add_rows(&j, 0, 1);
        else rg_threadpool_run(ctx->pool, add_rows, &j);
        return RG_OK;
    }
    if (a->ne[0] == 1 && a->type == RG_TYPE_F32 && (n->t.type == RG_TYPE_F16 || n->t.type == RG_TYPE_BF16) &&
        rg_tensor_nrows(a) < 16384)
        copy_runs_dim1(a, &n->t);
    else if (rg_tensor_nrows(a) * a->ne[0] < 16384) copy_rows(&j, 0, 1);
    else rg_threadpool_run(ctx->pool, copy_rows, &j);
    return RG_OK;
}
