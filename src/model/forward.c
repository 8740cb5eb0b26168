// forward.c - see forward.h: the embeddings, each layer's mixer and FFN built
// by their kinds (layer_*.c), the final norm and the head. Shapes are written
// beside every node in ggml order: d = n_embd, T = n_tokens, V = n_vocab.
#include "model/forward.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/layer.h"
#include "model/state.h"

rg_node *rg_model_leaf(rg_graph *g, const rg_gguf_tensor *t) {
    if (!t) return NULL;
    rg_node *n = rg_leaf(g, t->name, t->type, (int)(t->n_dims ? t->n_dims : 1), t->ne, (void *)t->data);
    if (n) n->flags |= RG_NODE_FROZEN;  // a model's weight, not trained here (trainers make parameters apart)
    return n;
}

rg_status rg_model_leaf_nodes(rg_graph *g, const rg_model *m, rg_model_nodes *w, rg_error *err) {
    w->flash_attn = false;  // the materialized attention unless the caller says otherwise
    w->exact_columns = false;
    w->tok_embd = rg_model_leaf(g, m->tok_embd);
    w->out_norm = rg_model_leaf(g, m->out_norm);
    w->output = m->hp.tied ? w->tok_embd : rg_model_leaf(g, m->output);
    w->layers = rg_arena_alloc(&g->arena, sizeof *w->layers * (size_t)m->hp.n_layer, 8);
    if (!w->layers) return rg_fail(err, RG_ERR_NOMEM, "model: out of memory");
    memset(w->layers, 0, sizeof *w->layers * (size_t)m->hp.n_layer);
    for (int64_t il = 0; il < m->hp.n_layer; il++)
        for (int r = 0; r < RG_N_ROLES; r++) w->layers[il].w[r] = rg_model_leaf(g, m->layers[il].t[r]);
    return rg_graph_error(g, err);
}

// segs, n_segs: a batch of several sequences (rg_model_forward_seqs; state NULL), last: its logits' columns.
typedef struct seqs_arg {
    const rg_seq_seg *segs;
    int n_segs;
    rg_node *last;
} seqs_arg;

static rg_node *forward(rg_graph *g, const rg_model *m, const rg_model_nodes *w, rg_node *ids, rg_node *pos,
                        rg_node *mask, rg_node *seg, rg_model_state *state, int64_t n_past, bool last_only,
                        rg_node **bounds, const seqs_arg *sq) {
    const rg_hparams *hp = &m->hp;
    if (!ids || !pos) return NULL;
    const int64_t T = ids->t.ne[0];
    rg_node *x = rg_get_rows(g, w->tok_embd, ids);  // [d, T]
    if (hp->embd_scale > 0) x = rg_scale(g, x, hp->embd_scale);  // gemma: times sqrt(n_embd)
    rg_node_set_name(x, "inp_embd");
    for (int64_t il = 0; il < hp->n_layer && x; il++) {
        if (bounds) bounds[il] = x;
        const rg_layer *L = &m->layers[il];
        rg_layer_ctx c = {.g = g, .m = m, .il = il, .layer = L, .w = &w->layers[il], .pos = pos, .mask = mask,
                          .seg = seg, .flash = w->flash_attn && !w->exact_columns, .exact_columns = w->exact_columns,
                          .state = state ? &state->layers[il] : NULL, .n_past = n_past, .n_ctx = state ? state->n_ctx : 0,
                          .segs = sq ? sq->segs : NULL, .n_segs = sq ? sq->n_segs : 0};
        const rg_layer_kind_desc *mixer = rg_layer_kind_get(L->mixer), *ffn = rg_layer_kind_get(L->ffn);
        x = mixer->build(&c, x);                                     // [d, T]
        c.state_first = mixer->n_state;
        if (ffn && x) x = ffn->build(&c, x);                         // [d, T]
        if (x) rg_node_set_name(x, "l_out.%lld", (long long)il);
    }
    if (!x) return NULL;
    if (bounds) bounds[hp->n_layer] = x;
    rg_node *hn = rg_layer_norm(g, x, w->out_norm, hp->norm_eps);   // [d, T]
    if (!w->output) return hn;                                      // rg_model_forward_hidden
    if (last_only && T > 1)                                         // generation needs the last row only
        hn = rg_view(g, hn, 2, (int64_t[]){hp->n_embd, 1}, (size_t[]){4, (size_t)hp->n_embd * 4},
                     (size_t)((T - 1) * hp->n_embd) * 4);
    if (sq && sq->last) hn = rg_get_rows(g, hn, sq->last);          // [d, n_segs]: each sequence's last token
    rg_node *logits = rg_mul_mat(g, w->output, hn);                 // [V, T]
    if (hp->final_softcap > 0) logits = rg_softcap(g, logits, hp->final_softcap);  // gemma2: cap tanh(z / cap)
    rg_node_set_name(logits, "logits");
    return logits;
}

rg_node *rg_model_forward(rg_graph *g, const rg_model *m, const rg_model_nodes *w, rg_node *ids, rg_node *pos,
                          rg_node *mask) {
    return forward(g, m, w, ids, pos, mask, NULL, NULL, 0, false, NULL, NULL);
}

rg_node *rg_model_forward_bounds(rg_graph *g, const rg_model *m, const rg_model_nodes *w, rg_node *ids, rg_node *pos,
                                 rg_node *mask, rg_node *seg, rg_node **bounds) {
    return forward(g, m, w, ids, pos, mask, seg, NULL, 0, false, bounds, NULL);
}

rg_node *rg_model_forward_kv(rg_graph *g, const rg_model *m, const rg_model_nodes *w, rg_node *ids, rg_node *pos,
                             rg_model_state *state, int64_t n_past, bool last_only) {
    return forward(g, m, w, ids, pos, NULL, NULL, state, n_past, last_only, NULL, NULL);
}

rg_node *rg_model_forward_hidden(rg_graph *g, const rg_model *m, const rg_model_nodes *w, rg_node *ids, rg_node *pos,
                                 rg_node *mask, rg_node *seg, rg_node **bounds) {
    rg_model_nodes hidden = *w;
    hidden.output = NULL;  // forward() stops at the final norm
    rg_node *hn = forward(g, m, &hidden, ids, pos, mask, seg, NULL, 0, false, bounds, NULL);
    if (hn) rg_node_set_name(hn, "result_norm");
    return hn;
}

rg_node *rg_model_forward_seqs(rg_graph *g, const rg_model *m, const rg_model_nodes *w, rg_node *ids, rg_node *pos,
                               const rg_seq_seg *segs, int n_segs, rg_node *last) {
    int64_t covered = 0;
    for (int i = 0; i < n_segs; i++) {
        if (segs[i].first != covered || segs[i].n <= 0 || !segs[i].state) {
            rg_fail(&g->err, RG_ERR_ARG, "forward: segment %d (columns %lld..%lld) does not continue the batch's "
                    "columns at %lld", i, (long long)segs[i].first, (long long)(segs[i].first + segs[i].n),
                    (long long)covered);
            return NULL;
        }
        covered += segs[i].n;
    }
    if (!ids || n_segs <= 0 || covered != ids->t.ne[0]) {
        rg_fail(&g->err, RG_ERR_ARG, "forward: %d segments cover %lld columns of a batch of %lld", n_segs,
                (long long)covered, ids ? (long long)ids->t.ne[0] : 0LL);
        return NULL;
    }
    const seqs_arg sq = {segs, n_segs, last};
    return forward(g, m, w, ids, pos, NULL, NULL, NULL, 0, false, NULL, &sq);
}
