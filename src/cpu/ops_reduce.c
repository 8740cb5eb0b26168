// ops_reduce.c - SUM, MEAN and SUM_ROWS, accumulated in double.
//
// The bits of a sum depend only on the input, never on the thread count:
//  - SUM/MEAN cut the input (in linear element order) into fixed chunks of
//    RD_CHUNK elements, sum each chunk on its own, and add the chunk sums in
//    chunk order on the calling thread. Threads only decide who sums which
//    chunk.
//  - SUM_ROWS gives each row to one thread.
// Inside a chunk or a row, element k goes to accumulator k % 8 (k counted
// from the chunk's or row's start) and the 8 accumulators are combined in a
// fixed tree. Eight independent chains keep the adds pipelined (and let the
// compiler vectorise them) without making the order depend on anything but k.
//
// Sources may be strided views of f32, f16 or bf16; outputs are f32.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/error.h"
#include "cpu/cpu_ops.h"
#include "tensor/half.h"

#define RD_CHUNK 4096          // elements per chunk of SUM/MEAN
#define RD_ROUND 1024          // chunks summed per parallel section (their sums live on the stack)
#define RD_MIN_PARALLEL 65536  // smaller inputs are summed on the calling thread

static inline float load_elem(uint32_t type, const char *p) {
    switch (type) {
    case RG_TYPE_F16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return rg_fp16_to_fp32(h);
    }
    case RG_TYPE_BF16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return rg_bf16_to_fp32(h);
    }
    default: {
        float v;
        memcpy(&v, p, 4);
        return v;
    }
    }
}

// Adds len elements starting at p (stride st bytes) into acc, element j of the
// run going to accumulator (lane + j) % 8.
static void acc_run(double acc[8], uint32_t type, const char *p, size_t st, int64_t lane, int64_t len) {
    int64_t j = 0;
    if (type == RG_TYPE_F32 && st == 4) {
        const float *x = (const float *)p;
        for (; j < len && (lane + j) % 8; j++) acc[(lane + j) % 8] += x[j];
        for (; j + 8 <= len; j += 8)
            for (int l = 0; l < 8; l++) acc[l] += x[j + l];
    }
    for (; j < len; j++) acc[(lane + j) % 8] += load_elem(type, p + j * (int64_t)st);
}

static double acc_total(const double acc[8]) {
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

static rg_status check(const rg_node *n, const char *op, rg_error *err) {
    const rg_node *a = n->src[0];
    if (!a || !a->t.data || !n->t.data || n->t.type != RG_TYPE_F32)
        return rg_fail(err, RG_ERR_ARG, "%s '%s': needs a source with bytes and an f32 output with bytes", op,
                       n->t.name);
    uint32_t ty = a->t.type;
    if (ty != RG_TYPE_F32 && ty != RG_TYPE_F16 && ty != RG_TYPE_BF16)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s '%s': source type %s, expected f32, f16 or bf16", op, n->t.name,
                       rg_type_get(ty)->name);
    return RG_OK;
}

// ---------------------------------------------------------------------------
// SUM, MEAN

typedef struct sum_job {
    const rg_tensor *a;
    int64_t nel;
    int64_t chunk0, nchunks;  // the chunks of this round
    double part[RD_ROUND];    // part[c - chunk0] = sum of chunk c
} sum_job;

// The sum of elements [s, e) in a's linear order (i0 fastest).
static double sum_range(const rg_tensor *a, int64_t s, int64_t e) {
    double acc[8] = {0};
    const int64_t ne0 = a->ne[0], ne1 = a->ne[1], ne2 = a->ne[2];
    int64_t k = s;
    while (k < e) {
        int64_t i0 = k % ne0, r = k / ne0;
        int64_t i1 = r % ne1, i2 = (r / ne1) % ne2, i3 = r / (ne1 * ne2);
        int64_t len = ne0 - i0 < e - k ? ne0 - i0 : e - k;
        const char *p = (const char *)a->data + i0 * a->nb[0] + i1 * a->nb[1] + i2 * a->nb[2] + i3 * a->nb[3];
        acc_run(acc, a->type, p, a->nb[0], (k - s) % 8, len);
        k += len;
    }
    return acc_total(acc);
}

static void sum_worker(void *arg, int ith, int nth) {
    sum_job *job = arg;
    int64_t c0, c1;
    rg_split_range(job->nchunks, ith, nth, &c0, &c1);
    for (int64_t c = c0; c < c1; c++) {
        int64_t s = (job->chunk0 + c) * RD_CHUNK, e = s + RD_CHUNK < job->nel ? s + RD_CHUNK : job->nel;
        job->part[c] = sum_range(job->a, s, e);
    }
}

static double sum_all(rg_exec_ctx *ctx, const rg_tensor *a) {
    sum_job job;
    job.a = a;
    job.nel = rg_tensor_nelements(a);
    int64_t total_chunks = (job.nel + RD_CHUNK - 1) / RD_CHUNK;
    int parallel = job.nel >= RD_MIN_PARALLEL && ctx && ctx->pool;
    double total = 0.0;
    for (job.chunk0 = 0; job.chunk0 < total_chunks; job.chunk0 += RD_ROUND) {
        job.nchunks = total_chunks - job.chunk0 < RD_ROUND ? total_chunks - job.chunk0 : RD_ROUND;
        if (parallel) rg_threadpool_run(ctx->pool, sum_worker, &job);
        else sum_worker(&job, 0, 1);
        for (int64_t c = 0; c < job.nchunks; c++) total += job.part[c];
    }
    return total;
}

rg_status cpu_sum(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    rg_status st = check(n, rg_op_name(RG_OP_SUM), err);
    if (st) return st;
    *(float *)n->t.data = (float)sum_all(ctx, &n->src[0]->t);
    return RG_OK;
}

rg_status cpu_mean(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    rg_status st = check(n, rg_op_name(RG_OP_MEAN), err);
    if (st) return st;
    int64_t nel = rg_tensor_nelements(&n->src[0]->t);
    // The mean of nothing is NaN, as in torch.
    *(float *)n->t.data = nel ? (float)(sum_all(ctx, &n->src[0]->t) / (double)nel) : NAN;
    return RG_OK;
}

// ---------------------------------------------------------------------------
// SUM_ROWS: a [n, r1, r2, r3] -> [1, r1, r2, r3]

typedef struct rows_job {
    const rg_tensor *a;
    float *out;  // [nrows], contiguous
} rows_job;

static void sum_rows_worker(void *arg, int ith, int nth) {
    const rows_job *job = arg;
    const rg_tensor *a = job->a;
    int64_t r0, r1;
    rg_split_range(rg_tensor_nrows(a), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1 = r % a->ne[1], i2 = (r / a->ne[1]) % a->ne[2], i3 = r / (a->ne[1] * a->ne[2]);
        const char *p = (const char *)a->data + i1 * a->nb[1] + i2 * a->nb[2] + i3 * a->nb[3];
        double acc[8] = {0};
        acc_run(acc, a->type, p, a->nb[0], 0, a->ne[0]);
        job->out[r] = (float)acc_total(acc);
    }
}

rg_status cpu_sum_rows(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    rg_status st = check(n, rg_op_name(RG_OP_SUM_ROWS), err);
    if (st) return st;
    const rg_tensor *a = &n->src[0]->t;
    if (n->t.ne[0] != 1 || n->t.ne[1] != a->ne[1] || n->t.ne[2] != a->ne[2] || n->t.ne[3] != a->ne[3])
        return rg_fail(err, RG_ERR_ARG, "sum_rows '%s': output [%lld, %lld, %lld, %lld] for a source with %lld rows",
                       n->t.name, (long long)n->t.ne[0], (long long)n->t.ne[1], (long long)n->t.ne[2],
                       (long long)n->t.ne[3], (long long)rg_tensor_nrows(a));
    rows_job job = {a, n->t.data};
    if (rg_tensor_nelements(a) < RD_MIN_PARALLEL || !ctx || !ctx->pool) sum_rows_worker(&job, 0, 1);
    else rg_threadpool_run(ctx->pool, sum_rows_worker, &job);
    return RG_OK;
}
