// build_loss_optim.c - the constructors of the losses (CROSS_ENTROPY_LOSS(_BACK),
// LINEAR_CE and its backward) and of the optimizer steps (ADAMW, SGD, their half-precision
// forms and SGD's momentum, the global norm's SUMSQ and CLIP_COEF): shape, type and parameter
// rules, each refusal naming the op and the tensors.
#include <math.h>
#include <string.h>

#include "graph/build_util.h"
#include "graph/pack.h"

rg_node *rg_cross_entropy_loss(rg_graph *g, rg_node *logits, rg_node *labels, int32_t ignore_index) {
    REQUIRE(logits, labels);
    char s1[160], s2[160];
    if (!need_f32(g, rg_op_name(RG_OP_CROSS_ENTROPY_LOSS), logits, "logits")) return NULL;
    if (labels->t.type != RG_TYPE_I32 || labels->t.ne[0] != logits->t.ne[1] || labels->t.ne[1] != 1 || logits->t.ne[2] != 1)
        return fail(g, RG_ERR_ARG, "cross_entropy_loss: labels %s must be i32 [n_tokens] for logits %s [n_vocab, n_tokens]",
                    shape(labels, s2), shape(logits, s1));
    int64_t ne[4] = {1, 1, 1, 1};
    rg_node *n = node_new(g, RG_OP_CROSS_ENTROPY_LOSS, RG_TYPE_F32, ne, contiguous(g, logits), labels, NULL, NULL);
    if (n) n->ip[0] = ignore_index;
    return n;
}

rg_node *rg_cross_entropy_loss_back(rg_graph *g, rg_node *dloss, rg_node *logits, rg_node *labels, int32_t ignore_index) {
    REQUIRE(dloss, logits, labels);
    char s1[160], s2[160];
    const char *op = rg_op_name(RG_OP_CROSS_ENTROPY_LOSS_BACK);
    if (!need_f32(g, op, dloss, "dloss") || !need_f32(g, op, logits, "logits"))
        return NULL;
    if (rg_tensor_nelements(&dloss->t) != 1 || labels->t.type != RG_TYPE_I32 || labels->t.ne[0] != logits->t.ne[1])
        return fail(g, RG_ERR_ARG, "cross_entropy_loss_back: dloss must be one value and labels %s i32 [n_tokens] for logits %s",
                    shape(labels, s2), shape(logits, s1));
    rg_node *n = node_new(g, RG_OP_CROSS_ENTROPY_LOSS_BACK, RG_TYPE_F32, ne_of(logits), dloss, contiguous(g, logits),
                          labels, NULL);
    if (n) n->ip[0] = ignore_index;
    return n;
}

// Leaves, or views of leaves, outlive every node (the plan keeps them).
static bool leaf_bytes(const rg_node *n) { return (n->view_of ? n->view_of : n)->op == RG_OP_NONE; }

rg_node *rg_linear_ce(rg_graph *g, rg_node *w, rg_node *h, rg_node *labels, int32_t ignore_index, int64_t chunk) {
    REQUIRE(w, h, labels);
    char s1[160], s2[160];
    if (!need_f32(g, rg_op_name(RG_OP_LINEAR_CE), h, "hidden states")) return NULL;
    if (w->t.ne[0] != h->t.ne[0] || w->t.ne[2] != 1 || w->t.ne[3] != 1 || h->t.ne[2] != 1 || h->t.ne[3] != 1)
        return fail(g, RG_ERR_ARG, "linear_ce: weight %s [n_embd, n_vocab] and hidden states %s [n_embd, n_tokens] do not fit",
                    shape(w, s1), shape(h, s2));
    if (!rg_tensor_rows_contiguous(&w->t))
        return fail(g, RG_ERR_ARG, "linear_ce: weight %s rows are not contiguous", shape(w, s1));
    if (labels->t.type != RG_TYPE_I32 || labels->t.ne[0] != h->t.ne[1] || labels->t.ne[1] != 1)
        return fail(g, RG_ERR_ARG, "linear_ce: labels %s must be i32 [n_tokens] for hidden states %s", shape(labels, s2),
                    shape(h, s1));
    if (!leaf_bytes(w) || !leaf_bytes(labels))
        return fail(g, RG_ERR_ARG, "linear_ce: weight %s and labels %s must be leaves (the backward reads them through the loss)",
                    shape(w, s1), shape(labels, s2));
    if (chunk < 0) return fail(g, RG_ERR_ARG, "linear_ce: chunk %lld must be >= 0", (long long)chunk);
    int64_t ne[4] = {h->t.ne[1] + 1, 1, 1, 1};
    rg_node *n = node_new(g, RG_OP_LINEAR_CE, RG_TYPE_F32, ne, w, contiguous(g, h), labels, NULL);
    if (n) n->ip[0] = ignore_index, n->ip[1] = chunk;
    return n;
}

rg_node *rg_linear_ce_loss(rg_graph *g, rg_node *lce) {
    REQUIRE(lce);
    char s[160];
    if (lce->op != RG_OP_LINEAR_CE) return fail(g, RG_ERR_ARG, "linear_ce_loss: %s is not a linear_ce node", shape(lce, s));
    return rg_view(g, lce, 1, (int64_t[]){1}, (size_t[]){sizeof(float)}, 0);
}

rg_node *rg_linear_ce_back(rg_graph *g, rg_node *dy, rg_node *lce, bool with_dw) {
    REQUIRE(dy, lce);
    char s1[160], s2[160];
    if (lce->op != RG_OP_LINEAR_CE) return fail(g, RG_ERR_ARG, "linear_ce_back: %s is not a linear_ce node", shape(lce, s2));
    if (!need_f32(g, rg_op_name(RG_OP_LINEAR_CE_BACK), dy, "dy")) return NULL;
    if (!same_shape(dy, lce))
        return fail(g, RG_ERR_ARG, "linear_ce_back: dy %s does not match the loss %s", shape(dy, s1), shape(lce, s2));
    rg_node *w = lce->src[0], *h = lce->src[1];
    // dw's node: its own bytes (so it can be a parameter's gradient as it is),
    // written by the kernel below, which runs after it (creation order).
    rg_node *dw = with_dw ? rg_fill(g, RG_TYPE_F32, 2, w->t.ne, 0.0f) : NULL;
    if (with_dw && !dw) return NULL;
    rg_node *n = node_new(g, RG_OP_LINEAR_CE_BACK, RG_TYPE_F32, ne_of(h), contiguous(g, dy), h, lce, dw);
    if (!n) return NULL;
    n->ip[0] = lce->ip[0], n->ip[1] = lce->ip[1];
    n->fp[0] = lce->fp[0];
    return n;
}

rg_node *rg_linear_ce_back_dw(rg_graph *g, rg_node *back) {
    REQUIRE(back);
    char s[160];
    if (back->op != RG_OP_LINEAR_CE_BACK || !back->src[3])
        return fail(g, RG_ERR_ARG, "linear_ce_back_dw: %s is not a linear_ce_back node with a weight gradient", shape(back, s));
    return back->src[3];
}

// The update writes the parameter's own bytes: the node is an alias of it
// (view_of) that nevertheless runs a kernel. The parameter is f32, or f16/bf16
// when h says how it is stored back; the other sources are f32 shaped like it.
static rg_node *optimizer_node(rg_graph *g, rg_op op, rg_node *param, rg_node *grad, rg_node *m, rg_node *v,
                               const rg_optim_half *h) {
    char s1[160], s2[160];
    const uint32_t pt = param->t.type;
    if (h ? pt != RG_TYPE_F16 && pt != RG_TYPE_BF16 : pt != RG_TYPE_F32)
        return fail(g, RG_ERR_ARG, "%s: parameter %s has type %s, expected %s", rg_op_name(op), shape(param, s1),
                    rg_type_get(pt)->name, h ? "f16 or bf16 (f32 takes the plain step)" : "f32 (halves take the _half step)");
    if (!rg_tensor_is_contiguous(&param->t))
        return fail(g, RG_ERR_ARG, "%s: parameter %s must be contiguous", rg_op_name(op), shape(param, s1));
    if (h && h->tensor_id >= (1u << 24))
        return fail(g, RG_ERR_ARG, "%s: tensor id %u of %s is not below 2^24", rg_op_name(op), h->tensor_id, shape(param, s1));
    rg_node *master = h ? h->master : NULL;
    rg_node *srcs[3] = {grad, m, v};
    for (int i = 0; i < 4; i++) {
        rg_node *x = i < 3 ? srcs[i] : master;
        if (!x) continue;  // SGD's moments, or no master (the callers REQUIRE the rest)
        if (!is_f32(x) || !same_shape(x, param) || !rg_tensor_is_contiguous(&x->t))
            return fail(g, RG_ERR_ARG, "%s: %s must be contiguous f32 shaped like the parameter %s", rg_op_name(op),
                        shape(x, s2), shape(param, s1));
    }
    rg_node *n = op == RG_OP_ADAMW ? node_new(g, op, pt, ne_of(param), param, grad, m, v)
                                   : node_new(g, op, pt, ne_of(param), param, grad, master, NULL);
    if (!n) return NULL;
    if (op == RG_OP_ADAMW) n->src[4] = master;
    if (h) n->ip[0] = (int64_t)h->seed, n->ip[1] = h->step, n->ip[2] = h->tensor_id;
    n->view_of = param->view_of ? param->view_of : param;
    n->t.view_offs = param->t.view_offs;
    n->flags &= ~RG_NODE_NEEDS_GRAD;
    n->flags |= RG_NODE_OUTPUT;
    snprintf(n->t.name, sizeof n->t.name, "%s %.50s", rg_op_name(op), param->t.name);
    return n;
}

static rg_node *adamw_node(rg_graph *g, rg_node *param, rg_node *grad, rg_node *m, rg_node *v, const rg_adamw_step *s,
                           const rg_optim_half *h) {
    REQUIRE(param, grad, m, v);
    rg_node *n = optimizer_node(g, RG_OP_ADAMW, param, grad, m, v, h);
    if (n) {
        n->fp[0] = s->step, n->fp[1] = s->omb1, n->fp[2] = s->b2, n->fp[3] = s->omb2;
        n->fp[4] = s->eps, n->fp[5] = s->decay, n->fp[6] = s->bc2s, n->fp[7] = s->clip;
    }
    return n;
}

static rg_node *sgd_node(rg_graph *g, rg_node *param, rg_node *grad, float lr, float weight_decay, float clip,
                         const rg_optim_half *h) {
    REQUIRE(param, grad);
    rg_node *n = optimizer_node(g, RG_OP_SGD, param, grad, NULL, NULL, h);
    if (n) n->fp[0] = lr, n->fp[1] = weight_decay, n->fp[2] = clip;
    return n;
}

rg_node *rg_adamw(rg_graph *g, rg_node *param, rg_node *grad, rg_node *m, rg_node *v, const rg_adamw_step *s) {
    return adamw_node(g, param, grad, m, v, s, NULL);
}

rg_node *rg_sgd(rg_graph *g, rg_node *param, rg_node *grad, float lr, float weight_decay, float clip) {
    return sgd_node(g, param, grad, lr, weight_decay, clip, NULL);
}

rg_node *rg_adamw_half(rg_graph *g, rg_node *param, rg_node *grad, rg_node *m, rg_node *v, const rg_adamw_step *s,
                       const rg_optim_half *h) {
    if (!h) return fail(g, RG_ERR_ARG, "adamw_half: no store description");
    return adamw_node(g, param, grad, m, v, s, h);
}

rg_node *rg_sgd_half(rg_graph *g, rg_node *param, rg_node *grad, float lr, float weight_decay, float clip,
                     const rg_optim_half *h) {
    if (!h) return fail(g, RG_ERR_ARG, "sgd_half: no store description");
    return sgd_node(g, param, grad, lr, weight_decay, clip, h);
}

rg_node *rg_sgd_momentum(rg_graph *g, rg_node *sgd, rg_node *buf, float momentum) {
    REQUIRE(sgd, buf);
    char s1[96], s2[96];
    if (sgd->op != RG_OP_SGD) return fail(g, RG_ERR_ARG, "sgd_momentum: %s is not an sgd node", shape(sgd, s1));
    if (!is_f32(buf) || !same_shape(buf, sgd->src[0]) || !rg_tensor_is_contiguous(&buf->t))
        return fail(g, RG_ERR_ARG, "sgd_momentum: the buffer %s must be contiguous f32 shaped like the parameter %s",
                    shape(buf, s2), shape(sgd->src[0], s1));
    if (!(momentum > 0.0f) || !(momentum < 1.0f))
        return fail(g, RG_ERR_ARG, "sgd_momentum: momentum %g is not in (0, 1)", (double)momentum);
    sgd->src[3] = buf;
    sgd->fp[3] = momentum, sgd->fp[4] = 1.0f;
    return sgd;
}

static bool is_f64_scalar(const rg_node *n) { return n->t.type == RG_TYPE_F64 && rg_tensor_nelements(&n->t) == 1; }

rg_node *rg_sumsq(rg_graph *g, rg_node *a, rg_node *prev) {
    REQUIRE(a);
    char s1[96], s2[96];
    if (!need_f32(g, "sumsq", a, "a")) return NULL;
    if (!rg_tensor_is_contiguous(&a->t)) return fail(g, RG_ERR_ARG, "sumsq: a %s must be contiguous", shape(a, s1));
    if (prev && !is_f64_scalar(prev))
        return fail(g, RG_ERR_ARG, "sumsq: prev %s must be f64 [1] (an earlier sumsq) for a %s", shape(prev, s2),
                    shape(a, s1));
    return node_new(g, RG_OP_SUMSQ, RG_TYPE_F64, (int64_t[]){1, 1, 1, 1}, a, prev, NULL, NULL);
}

rg_node *rg_clip_coef_node(rg_graph *g, rg_node *total, double max_norm) {
    REQUIRE(total);
    char s[96];
    if (!is_f64_scalar(total))
        return fail(g, RG_ERR_ARG, "clip_coef: total %s must be f64 [1] (a sumsq)", shape(total, s));
    rg_node *n = node_new(g, RG_OP_CLIP_COEF, RG_TYPE_F32, (int64_t[]){1, 1, 1, 1}, total, NULL, NULL, NULL);
    if (n) memcpy(&n->ip[0], &max_norm, sizeof max_norm);
    return n;
}

rg_node *rg_optim_set_clip(rg_graph *g, rg_node *upd, rg_node *clip) {
    REQUIRE(upd, clip);
    char s1[96], s2[96];
    if (upd->op != RG_OP_ADAMW && upd->op != RG_OP_SGD)
        return fail(g, RG_ERR_ARG, "optim_set_clip: %s is not an adamw or sgd node", shape(upd, s1));
    if (!is_f32(clip) || rg_tensor_nelements(&clip->t) != 1)
        return fail(g, RG_ERR_ARG, "optim_set_clip: the clip %s of %s must be f32 [1]", shape(clip, s2), shape(upd, s1));
    if (clip->id > upd->id)  // creation order is execution order
        return fail(g, RG_ERR_ARG, "optim_set_clip: the clip %s is made after %s", shape(clip, s2), shape(upd, s1));
    upd->src[upd->op == RG_OP_ADAMW ? 5 : 4] = clip;
    return upd;
}
