// layer.c - see layer.h: the kinds' table and what their builders share.
#include "model/layer.h"

#include <stdio.h>

#include "base/error.h"

const rg_layer_kind_desc *rg_layer_kind_get(rg_layer_kind k) {
    switch (k) {
    case RG_KIND_ATTN: return &rg_layer_attn;
    case RG_KIND_SHORTCONV: return &rg_layer_shortconv;
    case RG_KIND_SSM: return &rg_layer_ssm;
    case RG_KIND_FFN: return &rg_layer_ffn;
    default: return NULL;
    }
}

rg_node *rg_layer_f32(rg_graph *g, rg_node *n) {
    if (!n || n->t.type == RG_TYPE_F32) return n;
    return rg_cpy(g, n, RG_TYPE_F32);
}

rg_node *rg_layer_norm(rg_graph *g, rg_node *x, rg_node *w, float eps) {
    return rg_mul(g, rg_rms_norm(g, x, eps), rg_layer_f32(g, w));
}

rg_node *rg_layer_linear(const rg_layer_ctx *c, rg_role w, rg_role b, rg_node *x) {
    rg_graph *g = c->g;
    const rg_layer_nodes *L = c->w;
    rg_node *y = rg_mul_mat(g, L->w[w], x);                          // [n_out, T]
    const int t = rg_arch_lora_target(c->m->arch, w);
    if (L->lora_scale != 0.0f && t >= 0 && L->lora_a[t] && L->lora_b[t]) {
        rg_node *ax = rg_mul_mat(g, L->lora_a[t], x);                // [rank, T]
        rg_node *bax = rg_mul_mat(g, L->lora_b[t], ax);              // [n_out, T]
        y = rg_add(g, y, rg_scale(g, bax, L->lora_scale));
    }
    rg_node *bias = b < RG_N_ROLES ? L->w[b] : NULL;
    return bias ? rg_add(g, y, rg_layer_f32(g, bias)) : y;
}

rg_node *rg_layer_state_leaf(const rg_layer_ctx *c, int i, const char *name, int n_dims, const int64_t *ne) {
    if (!c->state) return NULL;
    const int j = c->state_first + i;
    rg_node *n = rg_leaf(c->g, name, c->state->type[j], n_dims, ne, c->state->buf[j]);
    if (n && (size_t)rg_tensor_nelements(&n->t) * sizeof(float) != c->state->bytes[j]) {
        rg_fail(&c->g->err, RG_ERR_ARG, "%s layer %lld: state buffer %s holds %zu bytes, not %zu", c->m->hp.arch_name,
                (long long)c->il, name, c->state->bytes[j], (size_t)rg_tensor_nelements(&n->t) * sizeof(float));
        return NULL;
    }
    return n;
}

rg_layer_ctx rg_layer_seg_ctx(const rg_layer_ctx *c, int i) {
    rg_layer_ctx s = *c;
    const rg_seq_seg *sg = &c->segs[i];
    s.state = &sg->state->layers[c->il];
    s.n_past = sg->n_past;
    s.n_ctx = sg->state->n_ctx;
    s.segs = NULL;
    s.n_segs = 0;
    return s;
}

rg_node *rg_layer_cols(rg_graph *g, rg_node *x, int dim, int64_t first, int64_t n) {
    if (!x) return NULL;
    int64_t ne[RG_MAX_DIMS];
    size_t nb[RG_MAX_DIMS];
    int n_dims = 1;
    for (int k = 0; k < RG_MAX_DIMS; k++) {
        ne[k] = k == dim ? n : x->t.ne[k];
        nb[k] = x->t.nb[k];
        if (ne[k] != 1 || k <= dim) n_dims = k + 1;
    }
    return rg_view(g, x, n_dims, ne, nb, (size_t)first * x->t.nb[dim]);
}

rg_node *rg_layer_gather(const rg_layer_ctx *c, const char *name, int64_t rows, int64_t T) {
    rg_node *n = rg_leaf(c->g, name, RG_TYPE_F32, 2, (int64_t[]){rows, T}, NULL);
    if (n) n->flags &= ~RG_NODE_INPUT;  // written by the graph itself: no caller bytes (nor a device upload)
    return n;
}

void rg_layer_put_cols(rg_graph *g, rg_node *part, rg_node *dst, int64_t first) {
    if (!part || !dst) return;
    const int64_t rows = dst->t.ne[0], n = rg_tensor_nelements(&part->t) / rows;
    rg_cpy_into(g, rg_reshape(g, part, 2, (int64_t[]){rows, n}), rg_layer_cols(g, dst, 1, first, n));
}
