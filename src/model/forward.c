// forward.c - see forward.h. Shapes are written beside every node in ggml
// order: d = n_embd, T = n_tokens, Dh = head_dim, H / Hkv = query / kv heads.
#include "model/forward.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/lora.h"

static rg_node *leaf_for(rg_graph *g, const rg_gguf_tensor *t) {
    if (!t) return NULL;
    return rg_leaf(g, t->name, t->type, (int)(t->n_dims ? t->n_dims : 1), t->ne, (void *)t->data);
}

rg_status rg_model_leaf_nodes(rg_graph *g, const rg_model *m, rg_model_nodes *w, rg_error *err) {
    w->tok_embd = leaf_for(g, m->tok_embd);
    w->out_norm = leaf_for(g, m->out_norm);
    w->output = m->hp.tied ? w->tok_embd : leaf_for(g, m->output);
    w->layers = rg_arena_alloc(&g->arena, sizeof *w->layers * (size_t)m->hp.n_layer, 8);
    if (!w->layers) return rg_fail(err, RG_ERR_NOMEM, "model: out of memory");
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        const rg_layer *L = &m->layers[il];
        rg_layer_nodes *N = &w->layers[il];
        N->attn_norm = leaf_for(g, L->attn_norm);
        N->wq = leaf_for(g, L->wq), N->wk = leaf_for(g, L->wk), N->wv = leaf_for(g, L->wv), N->wo = leaf_for(g, L->wo);
        N->bq = leaf_for(g, L->bq), N->bk = leaf_for(g, L->bk), N->bv = leaf_for(g, L->bv), N->bo = leaf_for(g, L->bo);
        N->q_norm = leaf_for(g, L->q_norm), N->k_norm = leaf_for(g, L->k_norm);
        N->ffn_norm = leaf_for(g, L->ffn_norm);
        N->ffn_gate = leaf_for(g, L->ffn_gate), N->ffn_up = leaf_for(g, L->ffn_up), N->ffn_down = leaf_for(g, L->ffn_down);
    }
    return rg_graph_error(g, err);
}

// Norm weights and biases are F32 in converted files; third-party files may
// store them as F16/BF16, which elementwise ops take after a cast.
static rg_node *as_f32(rg_graph *g, rg_node *n) {
    if (!n || n->t.type == RG_TYPE_F32) return n;
    return rg_cpy(g, n, RG_TYPE_F32);
}

static rg_node *norm(rg_graph *g, rg_node *x, rg_node *w, float eps) { return rg_mul(g, rg_rms_norm(g, x, eps), as_f32(g, w)); }

// W x (+ lora_scale * B(A x) when layer L has a LoRA pair for target t) (+ b).
static rg_node *linear(rg_graph *g, const rg_layer_nodes *L, int t, rg_node *w, rg_node *b, rg_node *x) {
    rg_node *y = rg_mul_mat(g, w, x);                                 // [n_out, T]
    if (L->lora_scale != 0.0f && L->lora_a[t] && L->lora_b[t]) {
        rg_node *ax = rg_mul_mat(g, L->lora_a[t], x);                 // [rank, T]
        rg_node *bax = rg_mul_mat(g, L->lora_b[t], ax);               // [n_out, T]
        y = rg_add(g, y, rg_scale(g, bax, L->lora_scale));
    }
    return b ? rg_add(g, y, as_f32(g, b)) : y;
}

rg_status rg_kv_cache_init(rg_kv_cache *c, const rg_model *m, int64_t n_ctx, uint32_t type, rg_error *err) {
    const rg_hparams *hp = &m->hp;
    memset(c, 0, sizeof *c);
    if (n_ctx <= 0) return rg_fail(err, RG_ERR_ARG, "kv cache: context %lld must be positive", (long long)n_ctx);
    if (type != RG_TYPE_F32 && type != RG_TYPE_F16) return rg_fail(err, RG_ERR_ARG, "kv cache: type must be f32 or f16");
    c->n_ctx = n_ctx, c->n_layer = hp->n_layer, c->head_dim = hp->head_dim, c->n_head_kv = hp->n_head_kv, c->type = type;
    size_t bytes = (size_t)(hp->head_dim * n_ctx * hp->n_head_kv) * rg_type_get(type)->type_size;
    c->k = calloc((size_t)hp->n_layer, sizeof *c->k);
    c->v = calloc((size_t)hp->n_layer, sizeof *c->v);
    if (!c->k || !c->v) {
        rg_kv_cache_free(c);
        return rg_fail(err, RG_ERR_NOMEM, "kv cache: out of memory");
    }
    for (int64_t il = 0; il < hp->n_layer; il++) {
        c->k[il] = calloc(1, bytes);
        c->v[il] = calloc(1, bytes);
        if (!c->k[il] || !c->v[il]) {
            rg_kv_cache_free(c);
            return rg_fail(err, RG_ERR_NOMEM, "kv cache: out of memory for %lld layers of %.1f MiB",
                           (long long)hp->n_layer, 2.0 * (double)bytes / 1048576.0);
        }
    }
    return RG_OK;
}

void rg_kv_cache_free(rg_kv_cache *c) {
    for (int64_t il = 0; il < c->n_layer; il++) {
        if (c->k) free(c->k[il]);
        if (c->v) free(c->v[il]);
    }
    free(c->k);
    free(c->v);
    c->k = c->v = NULL;
}

static rg_node *forward(rg_graph *g, const rg_model *m, const rg_model_nodes *w, rg_node *ids, rg_node *pos,
                        rg_node *mask, rg_kv_cache *cache, int64_t n_past, bool last_only, rg_node **bounds) {
    const rg_hparams *hp = &m->hp;
    if (!ids || !pos) return NULL;
    const int64_t T = ids->t.ne[0], Dh = hp->head_dim, H = hp->n_head, Hkv = hp->n_head_kv;
    const int64_t n_kv = cache ? n_past + T : T;
    rg_node *x = rg_get_rows(g, w->tok_embd, ids);  // [d, T]
    rg_node_set_name(x, "inp_embd");
    for (int64_t il = 0; il < hp->n_layer; il++) {
        if (bounds) bounds[il] = x;
        const rg_layer_nodes *L = &w->layers[il];
        rg_node *h = norm(g, x, L->attn_norm, hp->norm_eps);                             // [d, T]
        rg_node *q = rg_reshape(g, linear(g, L, RG_LORA_TARGET_Q, L->wq, L->bq, h), 3, (int64_t[]){Dh, H, T});    // [Dh, H, T]
        rg_node *k = rg_reshape(g, linear(g, L, RG_LORA_TARGET_K, L->wk, L->bk, h), 3, (int64_t[]){Dh, Hkv, T});  // [Dh, Hkv, T]
        rg_node *v = rg_reshape(g, linear(g, L, RG_LORA_TARGET_V, L->wv, L->bv, h), 3, (int64_t[]){Dh, Hkv, T});  // [Dh, Hkv, T]
        if (L->q_norm) q = norm(g, q, L->q_norm, hp->norm_eps);  // qwen3: per head, over Dh
        if (L->k_norm) k = norm(g, k, L->k_norm, hp->norm_eps);
        q = rg_rope(g, q, pos, (int)hp->n_rot, hp->rope_mode, hp->rope_freq_base, hp->rope_freq_scale);
        k = rg_rope(g, k, pos, (int)hp->n_rot, hp->rope_mode, hp->rope_freq_base, hp->rope_freq_scale);
        rg_node *Q = rg_permute(g, q, 0, 2, 1, 3);                   // [Dh, T, H]
        rg_node *K, *Vt;
        if (cache) {
            // Write the new rows, then read every cached row: the reads are created
            // after the writes, and execution follows creation order.
            size_t es = rg_type_get(cache->type)->type_size;
            int64_t C = cache->n_ctx;
            rg_node *kc = rg_leaf(g, "cache_k", cache->type, 3, (int64_t[]){Dh, C, Hkv}, cache->k[il]);
            rg_node *vc = rg_leaf(g, "cache_v", cache->type, 3, (int64_t[]){C, Dh, Hkv}, cache->v[il]);
            rg_node *kw = rg_view(g, kc, 3, (int64_t[]){Dh, T, Hkv}, (size_t[]){es, Dh * es, Dh * C * es},
                                  (size_t)(n_past * Dh) * es);
            rg_cpy_into(g, rg_permute(g, k, 0, 2, 1, 3), kw);        // [Dh, T, Hkv] at rows n_past..
            rg_node *vw = rg_view(g, vc, 3, (int64_t[]){T, Dh, Hkv}, (size_t[]){es, C * es, Dh * C * es},
                                  (size_t)n_past * es);
            rg_cpy_into(g, rg_permute(g, v, 1, 2, 0, 3), vw);        // [T, Dh, Hkv] at columns n_past..
            K = rg_view(g, kc, 3, (int64_t[]){Dh, n_kv, Hkv}, (size_t[]){es, Dh * es, Dh * C * es}, 0);   // [Dh, n_kv, Hkv]
            Vt = rg_view(g, vc, 3, (int64_t[]){n_kv, Dh, Hkv}, (size_t[]){es, C * es, Dh * C * es}, 0);  // [n_kv, Dh, Hkv]
        } else {
            K = rg_permute(g, k, 0, 2, 1, 3);                        // [Dh, T, Hkv]
            Vt = rg_cont(g, rg_permute(g, v, 1, 2, 0, 3));           // [T, Dh, Hkv]
        }
        rg_node *o;
        if (cache && T == 1) {
            // A generated token: scores, softmax and weighted sum in one op (ops_attn_decode.c).
            o = rg_reshape(g, rg_attn_decode(g, q, K, Vt, hp->attn_scale), 2, (int64_t[]){Dh * H, T});  // [Dh*H, T]
        } else {
            rg_node *kq = rg_mul_mat(g, K, Q);                       // [n_kv, T, H]; head h reads kv head h / (H/Hkv)
            kq = rg_soft_max(g, kq, mask, true, hp->attn_scale, 0.0f);  // causal: key j <= n_past + query i
            o = rg_mul_mat(g, Vt, kq);                               // [Dh, T, H]
            o = rg_reshape(g, rg_cont(g, rg_permute(g, o, 0, 2, 1, 3)), 2, (int64_t[]){Dh * H, T});  // [Dh*H, T]
        }
        x = rg_add(g, x, linear(g, L, RG_LORA_TARGET_O, L->wo, L->bo, o));  // [d, T]
        rg_node *h2 = norm(g, x, L->ffn_norm, hp->norm_eps);
        rg_node *act = rg_swiglu(g, linear(g, L, RG_LORA_TARGET_GATE, L->ffn_gate, NULL, h2),
                                 linear(g, L, RG_LORA_TARGET_UP, L->ffn_up, NULL, h2));  // [n_ff, T]
        x = rg_add(g, x, linear(g, L, RG_LORA_TARGET_DOWN, L->ffn_down, NULL, act));  // [d, T]
        rg_node_set_name(x, "l_out.%lld", (long long)il);
    }
    if (bounds) bounds[hp->n_layer] = x;
    rg_node *hn = norm(g, x, w->out_norm, hp->norm_eps);            // [d, T]
    if (!w->output) return hn;                                      // rg_model_forward_hidden
    if (last_only && T > 1)                                         // generation needs the last row only
        hn = rg_view(g, hn, 2, (int64_t[]){hp->n_embd, 1}, (size_t[]){4, (size_t)hp->n_embd * 4},
                     (size_t)((T - 1) * hp->n_embd) * 4);
    rg_node *logits = rg_mul_mat(g, w->output, hn);                 // [V, T]
    rg_node_set_name(logits, "logits");
    return logits;
}

rg_node *rg_model_forward(rg_graph *g, const rg_model *m, const rg_model_nodes *w, rg_node *ids, rg_node *pos,
                          rg_node *mask) {
    return forward(g, m, w, ids, pos, mask, NULL, 0, false, NULL);
}

rg_node *rg_model_forward_bounds(rg_graph *g, const rg_model *m, const rg_model_nodes *w, rg_node *ids, rg_node *pos,
                                 rg_node *mask, rg_node **bounds) {
    return forward(g, m, w, ids, pos, mask, NULL, 0, false, bounds);
}

rg_node *rg_model_forward_kv(rg_graph *g, const rg_model *m, const rg_model_nodes *w, rg_node *ids, rg_node *pos,
                             rg_kv_cache *cache, int64_t n_past, bool last_only) {
    return forward(g, m, w, ids, pos, NULL, cache, n_past, last_only, NULL);
}

rg_node *rg_model_forward_hidden(rg_graph *g, const rg_model *m, const rg_model_nodes *w, rg_node *ids, rg_node *pos,
                                 rg_node *mask, rg_node **bounds) {
    rg_model_nodes hidden = *w;
    hidden.output = NULL;  // forward() stops at the final norm
    rg_node *hn = forward(g, m, &hidden, ids, pos, mask, NULL, 0, false, bounds);
    rg_node_set_name(hn, "result_norm");
    return hn;
}
