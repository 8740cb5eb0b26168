// ops_flash.c - FLASH_ATTN_EXT and FLASH_ATTN_BACK on the CPU: attention without the
// [Tk, T] scores (graph.h has the shapes and the rules; training.md §6 the algorithm).
//
// Tiles of RG_FLASH_BR query rows and RG_FLASH_BC keys (ops_flash_jobs.h). K and V tiles
// are widened to f32 (exact for f16) into the thread's scratch, V gathered when its rows are
// strided (the session's transposed V cache); q is read in place. The
// scores of a tile are S = softcap(scale q.k) with -inf where masked, each q.k in eight
// lanes and a fixed tree; a tile no query of the item can see is skipped whole, and one every
// query sees whole is not masked per element.
//
// Forward, an item per (sequence, head, query tile), keys in order (online softmax, §6.2):
//   mx = max(m, rowmax S);  alpha = exp(m - mx);  p = exp(S - mx);  l = alpha l + sum p
//   acc = alpha acc + sum_c p_c v_c  (c in order);  m = mx
// and at the end o = acc / l, lse = m + log l (o = 0, lse = +inf for a row that sees
// nothing). A sink starts a row at m = sink, l = 1. Memory beyond q, k, v and the output:
// the threads' tiles, O(Dh (BR + BC)) each.
//
// Backward (§6.3, §6.5: two passes, no atomics, no dQ accumulator in shared memory):
//   dsum  D = rowsum(dO o) - dlse per (sequence, head, row)   (dlse: lse's own gradient)
//   dkv   an item per (sequence, kv head, key tile) holds dK, dV of its keys and walks the
//         group's query heads in order, each over its query tiles in order: P = exp(S - lse),
//         dV += P^T dO, dP = dO V^T, dS = P (dP - D) (times 1 - (S/c)^2 with a softcap),
//         dK += scale dS^T Q
//   dq    an item per (sequence, head, query tile) recomputes the same P and dS over the
//         key tiles in order: dQ += scale dS K
// Each item's sums run in an order fixed by the shapes, so the bits depend on neither the
// thread count nor the item split. The loops are compiled twice (ops_flash_items.h): here,
// and with AVX2 in ops_flash_avx2.c, with the same bits; RG_NO_AVX2=1 runs these.
#include <string.h>

#include "base/cpu.h"
#include "base/error.h"
#include "cpu/cpu_ops.h"
#include "cpu/cpu_rows.h"
#include "cpu/ops_flash_jobs.h"
#include "graph/pack.h"

#define FA_FN(name) name
#include "cpu/ops_flash_items.h"

static bool flash_avx2(void) { return rg_flash_avx2_built && rg_cpu_has_avx2(); }

static int flash_threads(const rg_exec_ctx *ctx) { return ctx && ctx->pool ? rg_threadpool_size(ctx->pool) : 1; }

// The job of a FLASH_ATTN_EXT node (first = 0) or FLASH_ATTN_BACK node (first = 1, after
// d), after checking what the kernel reads: every source present has bytes, q f32, k and v
// f32 or f16 alike, rows packed, ids i32, and the output is contiguous f32 of its layout.
static rg_status flash_job_of(const char *op, const rg_node *n, int first, flash_job *j, rg_error *err) {
    memset(j, 0, sizeof *j);
    for (int i = 0; i < RG_MAX_SRC; i++)
        if (n->src[i] && !n->src[i]->t.data)
            return rg_fail(err, RG_ERR_ARG, "%s '%s': source %d ('%s') has no data", op, n->t.name, i, n->src[i]->t.name);
    const rg_node *q = n->src[first], *k = n->src[first + 1], *v = n->src[first + 2];
    const rg_node *seg = first ? n->src[5] : n->src[3];
    if (!q || !k || !v)
        return rg_fail(err, RG_ERR_ARG, "%s '%s': no queries, keys or values", op, n->t.name);
    const uint32_t kt = k->t.type;
    if (q->t.type != RG_TYPE_F32 || (kt != RG_TYPE_F32 && kt != RG_TYPE_F16) || v->t.type != kt ||
        q->t.nb[0] != sizeof(float) || k->t.nb[0] != rg_type_get(kt)->type_size)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s '%s': queries must be f32, keys and values both f32 or both f16, "
                       "q and k with packed rows (q %s, k %s, v %s)", op, n->t.name, rg_type_get(q->t.type)->name,
                       rg_type_get(kt)->name, rg_type_get(v->t.type)->name);
    flash_dims *d = &j->d;
    d->Dh = q->t.ne[0], d->T = q->t.ne[1], d->H = q->t.ne[2], d->S = q->t.ne[3];
    d->Tk = k->t.ne[1], d->Hkv = k->t.ne[2];
    if (k->t.ne[0] != d->Dh || d->Hkv < 1 || d->H % d->Hkv || d->Tk < d->T || k->t.ne[3] != d->S ||
        !rg_tensor_same_shape(&k->t, &v->t))
        return rg_fail(err, RG_ERR_ARG, "%s '%s': the shapes of q, k and v do not fit (graph.h)", op, n->t.name);
    if (seg && (seg->t.type != RG_TYPE_I32 || !rg_tensor_is_contiguous(&seg->t) || seg->t.ne[0] != d->Tk))
        return rg_fail(err, RG_ERR_ARG, "%s '%s': document ids must be contiguous i32 [Tk] or [Tk, n_seqs]", op, n->t.name);
    rg_pack p;
    if (!rg_pack_of(n, &p) || !n->t.data || n->t.type != RG_TYPE_F32 || !rg_tensor_is_contiguous(&n->t) ||
        rg_tensor_nelements(&n->t) != p.total)
        return rg_fail(err, RG_ERR_ARG, "%s '%s': the output must be contiguous f32 of its packed layout", op, n->t.name);
    d->G = d->H / d->Hkv;
    d->n_qt = (d->T + RG_FLASH_BR - 1) / RG_FLASH_BR;
    d->n_kt = (d->Tk + RG_FLASH_BC - 1) / RG_FLASH_BC;
    j->q = &q->t, j->k = &k->t, j->v = &v->t;
    j->f16 = kt == RG_TYPE_F16;
    j->seg = seg ? seg->t.data : NULL;
    j->seg_stride = seg && seg->t.ne[1] > 1 ? d->Tk : 0;
    j->causal = n->ip[0] != 0;
    j->window = n->ip[1];
    j->scale = n->fp[0], j->softcap = n->fp[1];
    j->work_floats = rg_flash_work_floats(d->Dh);
    return RG_OK;
}

static rg_status flash_scratch(const char *op, const rg_exec_ctx *ctx, const rg_node *n, size_t need, rg_error *err) {
    if (!ctx || !ctx->scratch || ctx->scratch_size < need)
        return rg_fail(err, RG_ERR_ARG, "%s '%s': scratch of %zu bytes is below the %zu needed", op, n->t.name,
                       ctx ? ctx->scratch_size : 0, need);
    return RG_OK;
}

// Below this many multiply-adds an op runs on the calling thread alone (cpu_rows.h).
static int64_t flash_work(const flash_dims *d) { return d->Dh * d->T * d->Tk * d->H * d->S; }

size_t cpu_flash_attn_ext_work(const rg_node *n, int n_threads) {
    return (size_t)(n_threads < 1 ? 1 : n_threads) * rg_flash_work_floats(n->src[0]->t.ne[0]) * sizeof(float);
}

rg_status cpu_flash_attn_ext(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const char *op = rg_op_name(RG_OP_FLASH_ATTN_EXT);
    flash_job j;
    rg_status st = flash_job_of(op, n, 0, &j, err);
    if (!st) st = flash_scratch(op, ctx, n, cpu_flash_attn_ext_work(n, flash_threads(ctx)), err);
    if (st) return st;
    const rg_node *sinks = n->src[4];
    if (sinks && (sinks->t.type != RG_TYPE_F32 || !rg_tensor_is_contiguous(&sinks->t) ||
                  rg_tensor_nelements(&sinks->t) != j.d.H))
        return rg_fail(err, RG_ERR_ARG, "%s '%s': attention sinks '%s' must be contiguous f32 [n_head]", op, n->t.name,
                       sinks->t.name);
    rg_pack p;
    rg_pack_of(n, &p);
    j.sinks = sinks ? sinks->t.data : NULL;
    j.o = (float *)n->t.data + p.off[RG_FLASH_O];
    j.lse = (float *)n->t.data + p.off[RG_FLASH_LSE];
    j.work = ctx->scratch;
    run_rows(ctx->pool, flash_avx2() ? rg_flash_fwd_items_avx2 : rg_flash_fwd_items, &j, flash_work(&j.d));
    return RG_OK;
}

// The scratch: Dsum [T, H, S], then each thread's tiles.
size_t cpu_flash_attn_back_work(const rg_node *n, int n_threads) {
    const rg_tensor *q = &n->src[1]->t;
    const size_t dsum = (size_t)(q->ne[1] * q->ne[2] * q->ne[3] + 15) / 16 * 16;
    return (dsum + (size_t)(n_threads < 1 ? 1 : n_threads) * rg_flash_work_floats(q->ne[0])) * sizeof(float);
}

rg_status cpu_flash_attn_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    const char *op = rg_op_name(RG_OP_FLASH_ATTN_BACK);
    flash_job j;
    rg_status st = flash_job_of(op, n, 1, &j, err);
    if (!st) st = flash_scratch(op, ctx, n, cpu_flash_attn_back_work(n, flash_threads(ctx)), err);
    if (st) return st;
    const rg_node *d = n->src[0], *fwd = n->src[4];
    rg_pack p, pf;
    if (!fwd || fwd->op != RG_OP_FLASH_ATTN_EXT || !rg_pack_of(fwd, &pf) || !rg_pack_of(n, &p))
        return rg_fail(err, RG_ERR_ARG, "%s '%s': source 4 must be the flash_attn_ext node", op, n->t.name);
    if (fwd->src[4])
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s '%s': the forward '%s' has attention sinks, which %s does not take",
                       op, n->t.name, fwd->t.name, op);
    if (!rg_tensor_is_contiguous(&d->t) || d->t.type != RG_TYPE_F32 || rg_tensor_nelements(&d->t) != pf.total ||
        !rg_tensor_is_contiguous(&fwd->t))
        return rg_fail(err, RG_ERR_ARG, "%s '%s': d must be contiguous f32 of the forward's %lld values", op, n->t.name,
                       (long long)pf.total);
    const float *dd = d->t.data, *fo = fwd->t.data;
    float *out = n->t.data;
    j.dO = dd + pf.off[RG_FLASH_O], j.dlse = dd + pf.off[RG_FLASH_LSE];
    j.fo = fo + pf.off[RG_FLASH_O], j.flse = fo + pf.off[RG_FLASH_LSE];
    j.dq = out + p.off[RG_FLASH_BACK_DQ], j.dk = out + p.off[RG_FLASH_BACK_DK], j.dv = out + p.off[RG_FLASH_BACK_DV];
    j.Dsum = ctx->scratch;
    j.work = j.Dsum + (j.d.T * j.d.H * j.d.S + 15) / 16 * 16;
    const bool avx2 = flash_avx2();
    run_rows(ctx->pool, avx2 ? rg_flash_dsum_items_avx2 : rg_flash_dsum_items, &j, j.d.Dh * j.d.T * j.d.H * j.d.S);
    run_rows(ctx->pool, avx2 ? rg_flash_dkv_items_avx2 : rg_flash_dkv_items, &j, 4 * flash_work(&j.d));
    run_rows(ctx->pool, avx2 ? rg_flash_dq_items_avx2 : rg_flash_dq_items, &j, 3 * flash_work(&j.d));
    return RG_OK;
}
