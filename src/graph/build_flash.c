// build_flash.c - the flash-attention constructors (graph.h, FLASH_ATTN_EXT and
// FLASH_ATTN_BACK): their shape, type and parameter rules, each refusal naming the
// op, the tensor at fault and the rule; the packed layouts are pack.c's.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "graph/build_util.h"
#include "graph/pack.h"

// 'name' [ne...] (type)
static const char *desc(const rg_node *n, char *buf) {
    char s[64];
    rg_tensor_shape_str(&n->t, s, sizeof s);
    snprintf(buf, 160, "'%s' %s (%s)", n->t.name, s, rg_type_get(n->t.type)->name);
    return buf;
}

static bool rows_packed(const rg_node *n) {
    return n->t.ne[0] <= 1 || n->t.nb[0] == rg_type_get(n->t.type)->type_size;
}

static bool flash_params_ok(rg_graph *g, const char *op, const rg_flash_params *p) {
    if (!isfinite(p->scale)) return refuse(g, RG_ERR_ARG, "%s: scale %g is not finite", op, (double)p->scale);
    if (!(p->softcap >= 0.0f) || isinf(p->softcap))
        return refuse(g, RG_ERR_ARG, "%s: softcap %g must be 0 (none) or a finite cap > 0", op, (double)p->softcap);
    if (p->window < 0)
        return refuse(g, RG_ERR_ARG, "%s: window %lld is negative (0: none, W > 0: qpos - kpos < W)", op,
                      (long long)p->window);
    return true;
}

// q [Dh, T, H, S] f32, k and v [Dh, Tk, Hkv, S] both f32 or both f16 (q's and k's rows packed,
// v's any: a transposed cache view), H a multiple of Hkv, Tk >= T, seg I32 [Tk] or [Tk, S], sinks f32 [H].
static bool flash_sources(rg_graph *g, const char *op, const rg_node *q, const rg_node *k, const rg_node *v,
                          const rg_node *seg, const rg_node *sinks) {
    char s1[160], s2[160];
    const uint32_t kt = k->t.type;
    if (q->t.type != RG_TYPE_F32 || !rows_packed(q))
        return refuse(g, RG_ERR_ARG, "%s: queries %s must be f32 [head_dim, T, n_head, n_seqs] with packed rows", op,
                      desc(q, s1));
    if ((kt != RG_TYPE_F32 && kt != RG_TYPE_F16) || v->t.type != kt || !rows_packed(k))
        return refuse(g, RG_ERR_ARG, "%s: keys %s and values %s must both be f32 or both f16, the keys with packed rows",
                      op, desc(k, s1), desc(v, s2));
    const int64_t Dh = q->t.ne[0], T = q->t.ne[1], H = q->t.ne[2], S = q->t.ne[3];
    const int64_t Tk = k->t.ne[1], Hkv = k->t.ne[2];
    if (k->t.ne[0] != Dh)
        return refuse(g, RG_ERR_ARG, "%s: head_dim mismatch: keys %s have head_dim %lld, queries %s have %lld", op,
                      desc(k, s1), (long long)k->t.ne[0], desc(q, s2), (long long)Dh);
    if (!rg_tensor_same_shape(&k->t, &v->t))
        return refuse(g, RG_ERR_ARG, "%s: values %s must have the keys' shape %s [head_dim, Tk, n_head_kv, n_seqs]", op,
                      desc(v, s1), desc(k, s2));
    if (Hkv < 1 || H % Hkv)
        return refuse(g, RG_ERR_ARG, "%s: n_head %lld of the queries %s is not a multiple of n_head_kv %lld of the keys %s",
                      op, (long long)H, desc(q, s1), (long long)Hkv, desc(k, s2));
    if (k->t.ne[3] != S)
        return refuse(g, RG_ERR_ARG, "%s: keys %s and queries %s have different n_seqs", op, desc(k, s1), desc(q, s2));
    if (Tk < T || T < 1)
        return refuse(g, RG_ERR_ARG, "%s: keys %s hold %lld positions, fewer than the %lld queries %s (Tk >= T >= 1)", op,
                      desc(k, s1), (long long)Tk, (long long)T, desc(q, s2));
    if (seg && (seg->t.type != RG_TYPE_I32 || seg->t.ne[0] != Tk || (seg->t.ne[1] != 1 && seg->t.ne[1] != S) ||
                seg->t.ne[2] != 1 || seg->t.ne[3] != 1))
        return refuse(g, RG_ERR_ARG, "%s: document ids %s must be i32 [Tk] = [%lld] or [Tk, n_seqs] = [%lld, %lld]", op,
                      desc(seg, s1), (long long)Tk, (long long)Tk, (long long)S);
    if (sinks && (sinks->t.type != RG_TYPE_F32 || rg_tensor_nelements(&sinks->t) != H))
        return refuse(g, RG_ERR_ARG, "%s: attention sinks %s must be f32 [n_head] = [%lld]", op, desc(sinks, s1),
                      (long long)H);
    return true;
}

rg_node *rg_flash_attn_ext(rg_graph *g, rg_node *q, rg_node *k, rg_node *v, rg_node *seg, rg_node *sinks,
                           const rg_flash_params *p) {
    const char *op = rg_op_name(RG_OP_FLASH_ATTN_EXT);
    if (!q || !k || !v || !p) return NULL;
    if (!flash_params_ok(g, op, p) || !flash_sources(g, op, q, k, v, seg, sinks)) return NULL;
    rg_node *src[RG_MAX_SRC] = {q, k, v, contiguous(g, seg), contiguous(g, sinks), NULL};
    rg_node *n = rg_graph_packed_node(g, RG_OP_FLASH_ATTN_EXT, src, (const int64_t[8]){p->causal, p->window});
    if (n) n->fp[0] = p->scale, n->fp[1] = p->softcap;
    return n;
}

rg_node *rg_flash_attn_back(rg_graph *g, rg_node *d, rg_node *fwd) {
    const char *op = rg_op_name(RG_OP_FLASH_ATTN_BACK);
    char s1[160], s2[160];
    if (!d || !fwd) return NULL;
    bool ok = true;
    if (fwd->op != RG_OP_FLASH_ATTN_EXT)
        ok = refuse(g, RG_ERR_ARG, "%s: %s is a %s node, not flash_attn_ext", op, desc(fwd, s1), rg_op_name(fwd->op));
    else if (fwd->src[4])
        ok = refuse(g, RG_ERR_UNSUPPORTED, "%s: the forward %s has attention sinks %s, whose gradient flash_attn_back "
                    "does not make (build the materialized attention for it)", op, desc(fwd, s1), desc(fwd->src[4], s2));
    else if (d->t.type != RG_TYPE_F32 || rg_tensor_nelements(&d->t) != rg_tensor_nelements(&fwd->t))
        ok = refuse(g, RG_ERR_ARG, "%s: d %s must be f32 and hold the gradient of the whole output of %s", op,
                    desc(d, s1), desc(fwd, s2));
    if (!ok) return NULL;
    rg_node *src[RG_MAX_SRC] = {contiguous(g, d), fwd->src[0], fwd->src[1], fwd->src[2], fwd, fwd->src[3]};
    rg_node *n = rg_graph_packed_node(g, RG_OP_FLASH_ATTN_BACK, src, fwd->ip);
    if (n) n->fp[0] = fwd->fp[0], n->fp[1] = fwd->fp[1];
    return n;
}

rg_node *rg_flash_part(rg_graph *g, rg_node *packed, int part) {
    char s[160];
    if (!packed) return NULL;
    if (packed->op == RG_OP_FLASH_ATTN_EXT || packed->op == RG_OP_FLASH_ATTN_BACK) return rg_pack_part(g, packed, part);
    refuse(g, RG_ERR_ARG, "flash_part: %s (%s) is not a flash attention node", desc(packed, s), rg_op_name(packed->op));
    return NULL;
}
