// ops_copy.c - CONT, CPY, VIEW_BACK, GET_ROWS and GET_ROWS_BACK.
//
// Outputs are contiguous; sources may be strided views and are addressed
// through their own nb[]. Conversions to F16/BF16 are the reference RNE ones
// (rg_fp32_to_fp16 / rg_fp32_to_bf16; the row versions give the same bits).
// Every output element is written by one thread, and GET_ROWS_BACK sums each
// row in increasing token order on one thread, so no result depends on the
// thread count.
#include <stdint.h>
#include <string.h>

#include "base/error.h"
#include "cpu/cpu_ops.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"

#define CP_CHUNK 8192          // elements per unit along dimension 0 (plain types)
#define CP_MIN_PARALLEL 32768  // smaller outputs are written by the calling thread

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static inline void row_coords(const int64_t ne[4], int64_t r, int64_t *i1, int64_t *i2, int64_t *i3) {
    *i1 = r % ne[1];
    *i2 = (r / ne[1]) % ne[2];
    *i3 = r / (ne[1] * ne[2]);
}

static inline const char *src_at(const rg_tensor *s, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return (const char *)s->data + i0 * s->nb[0] + i1 * s->nb[1] + i2 * s->nb[2] + i3 * s->nb[3];
}

static void run(rg_exec_ctx *ctx, rg_parallel_fn fn, void *job, int64_t work) {
    if (work < CP_MIN_PARALLEL || !ctx || !ctx->pool) fn(job, 0, 1);
    else rg_threadpool_run(ctx->pool, fn, job);
}

static inline float to_f32(uint32_t type, const char *p) {
    uint16_t h;
    float v;
    switch (type) {
    case RG_TYPE_F16: memcpy(&h, p, 2); return rg_fp16_to_fp32(h);
    case RG_TYPE_BF16: memcpy(&h, p, 2); return rg_bf16_to_fp32(h);
    default: memcpy(&v, p, 4); return v;
    }
}

static inline void from_f32(uint32_t type, char *p, float v) {
    uint16_t h;
    switch (type) {
    case RG_TYPE_F16: h = rg_fp32_to_fp16(v), memcpy(p, &h, 2); break;
    case RG_TYPE_BF16: h = rg_fp32_to_bf16(v), memcpy(p, &h, 2); break;
    default: memcpy(p, &v, 4); break;
    }
}

// ---------------------------------------------------------------------------
// CONT and CPY: one engine. out[k] = convert(a[k]) in linear element order; when
// the shapes are equal (always, for CONT) element (i0..i3) maps to (i0..i3).

// Tile edge (elements) for sources whose dim 0 is strided (a transposed view):
// walking the output in rows would touch a new cache line per element, so a
// 32 x 32 tile is copied at a time and its source lines stay in L1.
#define CP_TILE 32

typedef struct copy_job {
    const rg_tensor *a;
    const rg_tensor *o;
    int same_shape;
    int quantized;   // same quantized type: whole rows of blocks
    int tiled;       // units are CP_TILE x CP_TILE tiles of (i0, i1) (see CP_TILE)
    int64_t nt0, nt1;  // tiles along dims 0 and 1
    int64_t chunk;   // elements per unit along dim 0
    int64_t nchunk;  // units per output row
    int64_t nunits;
} copy_job;

// Elements [c0, c1) of one output row from a row of a with the same coordinates.
static void copy_segment(uint32_t st, uint32_t dt, const char *src, size_t ss, char *dst, int64_t n) {
    size_t ds = rg_type_get(dt)->type_size;
    if (st == dt) {
        if (ss == ds) {
            memcpy(dst, src, (size_t)n * ds);
        } else if (ds == 4) {
            for (int64_t i = 0; i < n; i++) memcpy(dst + i * 4, src + i * (int64_t)ss, 4);
        } else if (ds == 2) {
            for (int64_t i = 0; i < n; i++) memcpy(dst + i * 2, src + i * (int64_t)ss, 2);
        } else {
            for (int64_t i = 0; i < n; i++) memcpy(dst + i * (int64_t)ds, src + i * (int64_t)ss, ds);
        }
        return;
    }
    size_t ssz = rg_type_get(st)->type_size;
    if (ss == ssz) {
        // Contiguous source run: the row converters (same bits as the scalar reference).
        // (src and dst never overlap: a CPY/CONT output has bytes of its own)
        if (st == RG_TYPE_F32 && dt == RG_TYPE_F16) {
            rg_fp32_to_fp16_row((const float *)src, (uint16_t *)dst, n);
            return;
        }
        if (st == RG_TYPE_F32 && dt == RG_TYPE_BF16) {
            rg_fp32_to_bf16_row((const float *)src, (uint16_t *)dst, n);
            return;
        }
        if (st == RG_TYPE_F16 && dt == RG_TYPE_F32) {
            rg_fp16_to_fp32_row((const uint16_t *)src, (float *)dst, n);
            return;
        }
        if (st == RG_TYPE_BF16 && dt == RG_TYPE_F32) {
            rg_bf16_to_fp32_row((const uint16_t *)src, (float *)dst, n);
            return;
        }
    }
    // Strided, or F16 <-> BF16 (through the exact f32 value, then one RNE rounding).
    for (int64_t i = 0; i < n; i++) from_f32(dt, dst + i * (int64_t)ds, to_f32(st, src + i * (int64_t)ss));
}

// Units [u0, u1) of a tiled copy: unit u is tile (t0, t1) of slice (i2, i3),
// t1 fastest, so consecutive tiles continue the same source rows.
static void copy_tiles(const copy_job *job, int64_t u0, int64_t u1) {
    const rg_tensor *a = job->a, *o = job->o;
    const size_t osz = rg_type_get(o->type)->type_size;
    for (int64_t u = u0; u < u1; u++) {
        int64_t t1 = u % job->nt1, t0 = (u / job->nt1) % job->nt0, s = u / (job->nt0 * job->nt1);
        int64_t i2 = s % o->ne[2], i3 = s / o->ne[2];
        int64_t c0 = t0 * CP_TILE, c1 = min64(c0 + CP_TILE, o->ne[0]);
        int64_t r1 = min64(t1 * CP_TILE + CP_TILE, o->ne[1]);
        for (int64_t i1 = t1 * CP_TILE; i1 < r1; i1++) {
            char *dst = (char *)o->data + c0 * (int64_t)osz + i1 * o->nb[1] + i2 * o->nb[2] + i3 * o->nb[3];
            const char *src = src_at(a, c0, i1, i2, i3);
            const int64_t as = (int64_t)a->nb[0];
            if (a->type == o->type && osz == 4) {
                uint32_t *d = (uint32_t *)dst;
                for (int64_t i = 0; i < c1 - c0; i++) memcpy(&d[i], src + i * as, 4);
            } else if (a->type == o->type && osz == 2) {
                uint16_t *d = (uint16_t *)dst;
                for (int64_t i = 0; i < c1 - c0; i++) memcpy(&d[i], src + i * as, 2);
            } else {
                copy_segment(a->type, o->type, src, a->nb[0], dst, c1 - c0);
            }
        }
    }
}

static void copy_worker(void *arg, int ith, int nth) {
    const copy_job *job = arg;
    const rg_tensor *a = job->a, *o = job->o;
    const size_t osz = rg_type_get(o->type)->type_size;
    int64_t u0, u1;
    rg_split_range(job->nunits, ith, nth, &u0, &u1);
    if (job->tiled) {
        copy_tiles(job, u0, u1);
        return;
    }
    for (int64_t u = u0; u < u1; u++) {
        int64_t r = u / job->nchunk, c0 = (u % job->nchunk) * job->chunk, c1 = min64(c0 + job->chunk, o->ne[0]);
        int64_t i1, i2, i3;
        row_coords(o->ne, r, &i1, &i2, &i3);
        char *dst = (char *)o->data + i1 * o->nb[1] + i2 * o->nb[2] + i3 * o->nb[3];
        if (job->quantized) {
            memcpy(dst, src_at(a, 0, i1, i2, i3), rg_type_row_size(o->type, o->ne[0]));
        } else if (job->same_shape) {
            copy_segment(a->type, o->type, src_at(a, c0, i1, i2, i3), a->nb[0], dst + c0 * (int64_t)osz, c1 - c0);
        } else {
            // Equal counts, different shapes: walk a in linear order from this
            // unit's first element, one run of a's rows at a time.
            int64_t k = r * o->ne[0] + c0, end = r * o->ne[0] + c1;
            while (k < end) {
                int64_t j0 = k % a->ne[0], j1, j2, j3;
                row_coords(a->ne, k / a->ne[0], &j1, &j2, &j3);
                int64_t len = min64(a->ne[0] - j0, end - k);
                copy_segment(a->type, o->type, src_at(a, j0, j1, j2, j3), a->nb[0],
                             dst + (k - r * o->ne[0]) * (int64_t)osz, len);
                k += len;
            }
        }
    }
}

static rg_status copy_run(rg_exec_ctx *ctx, rg_node *n, const char *op, rg_error *err) {
    const rg_node *src = n->src[0];
    if (!src || !src->t.data || !n->t.data)
        return rg_fail(err, RG_ERR_ARG, "%s '%s': the source or the output has no bytes", op, n->t.name);
    const rg_tensor *a = &src->t, *o = &n->t;
    copy_job job = {a, o, 1, 0, 0, 0, 0, CP_CHUNK, 0, 0};
    for (int i = 0; i < RG_MAX_DIMS; i++) job.same_shape &= a->ne[i] == o->ne[i];
    if (!job.same_shape && rg_tensor_nelements(a) != rg_tensor_nelements(o))
        return rg_fail(err, RG_ERR_ARG, "%s '%s': %lld elements into %lld", op, n->t.name,
                       (long long)rg_tensor_nelements(a), (long long)rg_tensor_nelements(o));
    const rg_type_traits *tt = rg_type_get(o->type);
    if (tt->block_size != 1) {
        // Quantized: only a same-type copy of whole rows whose blocks are packed.
        if (a->type != o->type || !job.same_shape || a->nb[0] != tt->type_size)
            return rg_fail(err, RG_ERR_UNSUPPORTED,
                           "%s '%s': %s source must have the output's shape and packed blocks (nb[0] = %zu, block %zu)",
                           op, n->t.name, rg_type_get(a->type)->name, a->nb[0], tt->type_size);
        job.quantized = 1;
        job.chunk = o->ne[0] ? o->ne[0] : 1;
    } else if (a->type != o->type) {
        int ok_s = a->type == RG_TYPE_F32 || a->type == RG_TYPE_F16 || a->type == RG_TYPE_BF16;
        int ok_d = o->type == RG_TYPE_F32 || o->type == RG_TYPE_F16 || o->type == RG_TYPE_BF16;
        if (!ok_s || !ok_d)
            return rg_fail(err, RG_ERR_UNSUPPORTED, "%s '%s': no conversion %s -> %s", op, n->t.name,
                           rg_type_get(a->type)->name, tt->name);
    } else if (rg_type_get(a->type)->block_size != 1 || tt->type_size == 0) {
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s '%s': type %s", op, n->t.name, tt->name);
    }
    if (rg_tensor_nelements(o) == 0) return RG_OK;
    job.nchunk = (o->ne[0] + job.chunk - 1) / job.chunk;
    job.nunits = rg_tensor_nrows(o) * job.nchunk;
    if (!job.quantized && job.same_shape && a->nb[0] != rg_type_get(a->type)->type_size && o->ne[1] > 1) {
        job.tiled = 1;
        job.nt0 = (o->ne[0] + CP_TILE - 1) / CP_TILE;
        job.nt1 = (o->ne[1] + CP_TILE - 1) / CP_TILE;
        job.nunits = job.nt0 * job.nt1 * o->ne[2] * o->ne[3];
    }
    run(ctx, copy_worker, &job, rg_tensor_nelements(o));
    return RG_OK;
}

rg_status cpu_cont(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    if (n->src[0] && n->src[0]->t.type != n->t.type)
        return rg_fail(err, RG_ERR_ARG, "cont '%s': source type %s differs from the output's %s", n->t.name,
                       rg_type_get(n->src[0]->t.type)->name, rg_type_get(n->t.type)->name);
    return copy_run(ctx, n, rg_op_name(RG_OP_CONT), err);
}

rg_status cpu_cpy(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { return copy_run(ctx, n, rg_op_name(n->op), err); }

// ---------------------------------------------------------------------------
// VIEW_BACK: out (contiguous f32, the view's base shape) = 0, then dy element
// (i0..i3) is written at byte ip[4] + sum_k i_k * ip[k]. The window is checked
// against the output's size first, so a bad ip fails instead of writing wild.
// Overlapping windows (a zero stride) are not summed: the last write wins.

typedef struct vb_job {
    const rg_node *n;
    size_t bytes;  // output size
} vb_job;

static void vb_zero_worker(void *arg, int ith, int nth) {
    const vb_job *job = arg;
    int64_t b0, b1;
    rg_split_range((int64_t)(job->bytes / 64), ith, nth, &b0, &b1);
    // 64-byte blocks; the last thread also takes the tail.
    size_t from = (size_t)b0 * 64, to = ith == nth - 1 ? job->bytes : (size_t)b1 * 64;
    memset((char *)job->n->t.data + from, 0, to - from);
}

static void vb_scatter_worker(void *arg, int ith, int nth) {
    const vb_job *job = arg;
    const rg_tensor *d = &job->n->src[0]->t;
    const int64_t *ip = job->n->ip;
    int64_t r0, r1;
    rg_split_range(rg_tensor_nrows(d), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        row_coords(d->ne, r, &i1, &i2, &i3);
        const char *src = src_at(d, 0, i1, i2, i3);
        char *dst = (char *)job->n->t.data + ip[4] + i1 * ip[1] + i2 * ip[2] + i3 * ip[3];
        if (ip[0] == 4 && d->nb[0] == 4) {
            memcpy(dst, src, (size_t)d->ne[0] * 4);
        } else {
            for (int64_t i0 = 0; i0 < d->ne[0]; i0++) memcpy(dst + i0 * ip[0], src + i0 * (int64_t)d->nb[0], 4);
        }
    }
}

rg_status cpu_view_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const rg_node *dy = n->src[0];
    if (!dy || !dy->t.data || !n->t.data || dy->t.type != RG_TYPE_F32 || n->t.type != RG_TYPE_F32)
        return rg_fail(err, RG_ERR_ARG, "view_back '%s': needs f32 dy and output with bytes", n->t.name);
    vb_job job = {n, (size_t)rg_tensor_nelements(&n->t) * 4};
    // The window's last byte must lie inside the output.
    int64_t last = n->ip[4];
    int bad = n->ip[4] < 0 || n->ip[4] % 4;
    for (int k = 0; k < 4; k++) {
        bad |= n->ip[k] < 0 || n->ip[k] % 4;
        if (dy->t.ne[k] > 0) last += (dy->t.ne[k] - 1) * n->ip[k];
    }
    int64_t nel = rg_tensor_nelements(&dy->t);
    if (bad || (nel > 0 && (uint64_t)last + 4 > job.bytes))
        return rg_fail(err, RG_ERR_ARG,
                       "view_back '%s': window (strides %lld %lld %lld %lld, offset %lld) does not fit %zu bytes",
                       n->t.name, (long long)n->ip[0], (long long)n->ip[1], (long long)n->ip[2], (long long)n->ip[3],
                       (long long)n->ip[4], job.bytes);
    if (job.bytes == 0) return RG_OK;
    run(ctx, vb_zero_worker, &job, rg_tensor_nelements(&n->t));
    if (nel) run(ctx, vb_scatter_worker, &job, nel);
    return RG_OK;
}

// ---------------------------------------------------------------------------
// GET_ROWS: a [n, rows, b2, b3] (any type with a dequantizer), ids I32 [k, e2, e3]
// -> out [n, k, e2, e3] f32; out[:, t, i2, i3] = a[:, ids[t, i2, i3], i2 % b2, i3 % b3].
// The plain case is a [n, rows], ids [k].

static inline int32_t id_at(const rg_tensor *ids, int64_t t, int64_t i2, int64_t i3) {
    int32_t v;
    memcpy(&v, (const char *)ids->data + t * ids->nb[0] + i2 * ids->nb[1] + i3 * ids->nb[2], 4);
    return v;
}

// Every id must name a row; the first bad one (in linear order) is reported.
static rg_status check_ids(const rg_node *n, const rg_tensor *ids, int64_t rows, const char *op, rg_error *err) {
    for (int64_t i3 = 0; i3 < ids->ne[2]; i3++)
        for (int64_t i2 = 0; i2 < ids->ne[1]; i2++)
            for (int64_t t = 0; t < ids->ne[0]; t++) {
                int32_t v = id_at(ids, t, i2, i3);
                if (v < 0 || v >= rows)
                    return rg_fail(err, RG_ERR_ARG, "%s '%s': id %d at position %lld is outside 0..%lld", op,
                                   n->t.name, v, (long long)(t + ids->ne[0] * (i2 + ids->ne[1] * i3)),
                                   (long long)rows - 1);
            }
    return RG_OK;
}

typedef struct gr_job {
    const rg_node *n;
    rg_dequant_fn dequant;  // NULL: plain type read element by element (strided rows)
} gr_job;

static void get_rows_worker(void *arg, int ith, int nth) {
    const gr_job *job = arg;
    const rg_tensor *a = &job->n->src[0]->t, *ids = &job->n->src[1]->t, *o = &job->n->t;
    int64_t r0, r1;
    rg_split_range(rg_tensor_nrows(o), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t t, i2, i3;
        row_coords(o->ne, r, &t, &i2, &i3);
        const char *src = src_at(a, 0, id_at(ids, t, i2, i3), i2 % a->ne[2], i3 % a->ne[3]);
        float *dst = (float *)((char *)o->data + t * o->nb[1] + i2 * o->nb[2] + i3 * o->nb[3]);
        if (job->dequant) {
            job->dequant(src, dst, o->ne[0]);
        } else {
            for (int64_t i0 = 0; i0 < o->ne[0]; i0++) dst[i0] = to_f32(a->type, src + i0 * (int64_t)a->nb[0]);
        }
    }
}

rg_status cpu_get_rows(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const rg_node *a = n->src[0], *ids = n->src[1];
    if (!a || !ids || !a->t.data || !ids->t.data || !n->t.data || n->t.type != RG_TYPE_F32 ||
        ids->t.type != RG_TYPE_I32)
        return rg_fail(err, RG_ERR_ARG, "get_rows '%s': needs a table, I32 ids and an f32 output, all with bytes",
                       n->t.name);
    const rg_tensor *o = &n->t;
    if (o->ne[0] != a->t.ne[0] || o->ne[1] != ids->t.ne[0] || o->ne[2] != ids->t.ne[1] || o->ne[3] != ids->t.ne[2] ||
        ids->t.ne[3] != 1 || a->t.ne[2] <= 0 || a->t.ne[3] <= 0 || o->ne[2] % a->t.ne[2] || o->ne[3] % a->t.ne[3])
        return rg_fail(err, RG_ERR_ARG, "get_rows '%s': output [%lld, %lld, %lld, %lld] does not match table and ids",
                       n->t.name, (long long)o->ne[0], (long long)o->ne[1], (long long)o->ne[2], (long long)o->ne[3]);
    const rg_type_traits *tt = rg_type_get(a->t.type);
    gr_job job = {n, rg_quant_get(a->t.type)->dequant};
    if (a->t.nb[0] != tt->type_size) {
        // Strided rows: only plain floats can be read element by element.
        if (a->t.type != RG_TYPE_F32 && a->t.type != RG_TYPE_F16 && a->t.type != RG_TYPE_BF16)
            return rg_fail(err, RG_ERR_UNSUPPORTED, "get_rows '%s': %s table with unpacked blocks (nb[0] = %zu)",
                           n->t.name, tt->name, a->t.nb[0]);
        job.dequant = NULL;
    } else if (!job.dequant) {
        return rg_fail(err, RG_ERR_UNSUPPORTED, "get_rows '%s': type %s cannot be read as f32", n->t.name, tt->name);
    }
    rg_status st = check_ids(n, &ids->t, a->t.ne[1], rg_op_name(RG_OP_GET_ROWS), err);
    if (st) return st;
    if (rg_tensor_nelements(o) == 0) return RG_OK;
    run(ctx, get_rows_worker, &job, rg_tensor_nelements(o));
    return RG_OK;
}

// ---------------------------------------------------------------------------
// GET_ROWS_BACK: dy [n, k...] f32, ids I32 [k...] (one id per row of dy, in
// linear order) -> out [n, V = ip[0]] f32; out[:, v] = sum over t with
// ids[t] == v of dy[:, t], in f32, in increasing t. Each thread owns the
// output rows [v0, v1): it zeroes them and scans every t, so each row's sum
// has one fixed order whatever the thread count.

static void get_rows_back_worker(void *arg, int ith, int nth) {
    const rg_node *n = arg;
    const rg_tensor *dy = &n->src[0]->t, *ids = &n->src[1]->t, *o = &n->t;
    const int64_t ne0 = o->ne[0], k = rg_tensor_nrows(dy);
    int64_t v0, v1;
    rg_split_range(o->ne[1], ith, nth, &v0, &v1);
    if (v0 == v1) return;
    float *out = o->data;  // [ne0, V]
    memset(out + v0 * ne0, 0, (size_t)((v1 - v0) * ne0) * sizeof(float));
    for (int64_t t = 0; t < k; t++) {
        // ids' linear index t as (t0, t1, t2)
        int64_t v = id_at(ids, t % ids->ne[0], (t / ids->ne[0]) % ids->ne[1], t / (ids->ne[0] * ids->ne[1]));
        if (v < v0 || v >= v1) continue;
        int64_t d1, d2, d3;
        row_coords(dy->ne, t, &d1, &d2, &d3);
        const char *src = src_at(dy, 0, d1, d2, d3);
        float *row = out + v * ne0;
        if (dy->nb[0] == 4) {
            const float *x = (const float *)src;
            for (int64_t i = 0; i < ne0; i++) row[i] += x[i];
        } else {
            for (int64_t i = 0; i < ne0; i++) {
                float x;
                memcpy(&x, src + i * (int64_t)dy->nb[0], 4);
                row[i] += x;
            }
        }
    }
}

rg_status cpu_get_rows_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const rg_node *dy = n->src[0], *ids = n->src[1];
    if (!dy || !ids || !dy->t.data || !ids->t.data || !n->t.data || n->t.type != RG_TYPE_F32 ||
        dy->t.type != RG_TYPE_F32 || ids->t.type != RG_TYPE_I32)
        return rg_fail(err, RG_ERR_ARG, "get_rows_back '%s': needs f32 dy, I32 ids and an f32 output, all with bytes",
                       n->t.name);
    const rg_tensor *o = &n->t;
    if (o->ne[0] != dy->t.ne[0] || o->ne[1] != n->ip[0] || o->ne[2] != 1 || o->ne[3] != 1 ||
        rg_tensor_nrows(&dy->t) != rg_tensor_nelements(&ids->t) || ids->t.ne[3] != 1)
        return rg_fail(err, RG_ERR_ARG,
                       "get_rows_back '%s': output [%lld, %lld] for dy with %lld rows, %lld ids and %lld table rows",
                       n->t.name, (long long)o->ne[0], (long long)o->ne[1], (long long)rg_tensor_nrows(&dy->t),
                       (long long)rg_tensor_nelements(&ids->t), (long long)n->ip[0]);
    rg_status st = check_ids(n, &ids->t, o->ne[1], rg_op_name(RG_OP_GET_ROWS_BACK), err);
    if (st) return st;
    if (rg_tensor_nelements(o) == 0) return RG_OK;
    run(ctx, get_rows_back_worker, n, rg_tensor_nelements(o) + rg_tensor_nelements(&dy->t));
    return RG_OK;
}
