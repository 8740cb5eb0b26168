// backward.c - automatic differentiation: walks the forward nodes in reverse
// and asks each op's backward rule (ops.c) to add its sources' gradients.
#include <stdio.h>

#include "base/error.h"
#include "graph/ops.h"

rg_status rg_grad_add(rg_graph *g, rg_node *src, rg_node *grad, rg_error *err) {
    if (!src || !(src->flags & RG_NODE_NEEDS_GRAD)) return RG_OK;  // frozen: no gradient, no buffer
    if (!grad) return rg_graph_error(g, err) ? g->err.status : rg_fail(err, RG_ERR_ARG, "backward: missing gradient");
    if (!rg_tensor_same_shape(&src->t, &grad->t) || grad->t.type != RG_TYPE_F32) {
        char a[64], b[64];
        return rg_fail(err, RG_ERR_ARG, "backward: gradient %s (%s) does not match '%s' %s",
                       rg_tensor_shape_str(&grad->t, b, sizeof b), rg_type_get(grad->t.type)->name, src->t.name,
                       rg_tensor_shape_str(&src->t, a, sizeof a));
    }
    // A gradient that is a strided view (a transpose, a permute) is made
    // contiguous, so every gradient the optimizer reads is plain F32.
    if (!rg_tensor_is_contiguous(&grad->t)) grad = rg_cont(g, grad);
    src->grad = src->grad ? rg_add(g, src->grad, grad) : grad;
    if (!src->grad) return rg_graph_error(g, err);
    return RG_OK;
}

rg_status rg_graph_backward(rg_graph *g, rg_node *loss, rg_error *err) {
    if (rg_graph_error(g, err)) return err ? err->status : g->err.status;
    if (!loss) return rg_fail(err, RG_ERR_ARG, "backward: no loss node");
    char s[64];
    if (rg_tensor_nelements(&loss->t) != 1 || loss->t.type != RG_TYPE_F32)
        return rg_fail(err, RG_ERR_ARG, "backward: the loss '%s' %s must be a single f32 value", loss->t.name,
                       rg_tensor_shape_str(&loss->t, s, sizeof s));
    if (!(loss->flags & RG_NODE_NEEDS_GRAD))
        return rg_fail(err, RG_ERR_ARG, "backward: the loss '%s' does not depend on any trainable parameter", loss->t.name);
    if (g->n_forward) return rg_fail(err, RG_ERR_ARG, "backward: the graph already has a backward pass");
    loss->flags |= RG_NODE_LOSS | RG_NODE_OUTPUT;
    g->n_forward = g->n_nodes;
    loss->grad = rg_fill(g, RG_TYPE_F32, 1, (int64_t[]){1}, 1.0f);
    if (!loss->grad) return rg_graph_error(g, err);
    for (int i = g->n_forward - 1; i >= 0; i--) {
        rg_node *n = g->nodes[i];
        if (!n->grad || !(n->flags & RG_NODE_NEEDS_GRAD) || n->op == RG_OP_NONE) continue;
        const rg_op_def *def = &rg_op_defs[n->op];
        if (!def->backward)
            return rg_fail(err, RG_ERR_UNSUPPORTED, "backward: op %s ('%s') has no gradient, but a parameter depends on it",
                           def->name, n->t.name);
        rg_status st = def->backward(g, n, err);
        if (st) return st;
        if (rg_graph_error(g, err)) return err ? err->status : g->err.status;
    }
    for (int i = 0; i < g->n_forward; i++) {
        rg_node *n = g->nodes[i];
        if ((n->flags & RG_NODE_PARAM) && n->grad) {
            // A gradient that is a view (a reshape of another node's bytes) gets its
            // own bytes, so every gradient is a plain buffer the plan accounts for.
            if (n->grad->view_of) n->grad = rg_cont(g, n->grad);
            if (!n->grad) return rg_graph_error(g, err);
            n->grad->flags |= RG_NODE_GRAD | RG_NODE_OUTPUT;
            if (!n->grad->t.name[0]) rg_node_set_name(n->grad, "grad %.50s", n->t.name);
        }
    }
    return RG_OK;
}
