// recompute.c - activation recompute (training.md §9): a rewrite of a graph
// that already has its backward, so the backward reads a layer's inner
// activations from a second forward of that layer, run just before the
// layer's backward, instead of from the first one. The planner then frees
// each layer's activations as soon as the forward has moved past it.
//
// Segment i is the forward nodes strictly between bounds[i] (its input) and
// bounds[i + 1]. Only the inner nodes that the backward reads, and what they
// need, are computed again: the outputs of the o and down projections are
// read by nothing but an ADD, whose backward reads no values, so they are not.
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "graph/ops.h"

typedef struct rewrite {
    rg_graph *g;
    int n0, n_fwd, n_seg;
    int *seg;         // [n0] segment of an inner forward node, -1 otherwise
    bool *needed;     // [n0] inner nodes the backward needs
    rg_node **clone;  // [n0] the recomputed twin of a needed inner node
    rg_node **input;  // [n_seg] what the recompute and the backward read as segment i's input
    rg_node **ckpt;   // [n_seg] the rounded stored input (F16/BF16), or NULL
    rg_node *const *bounds;
} rewrite;

static rg_node *owner_of(rg_node *n) { return n->view_of ? n->view_of : n; }

// The node a recomputed node or a backward node reads in place of n.
static rg_node *mapped(const rewrite *r, rg_node *n) {
    if (!n || n->id >= r->n0) return n;
    if (r->seg[n->id] >= 0) return r->clone[n->id];
    for (int i = 0; i < r->n_seg; i++)
        if (n == r->bounds[i]) return r->input[i];
    return n;
}

// Every inner node may read only leaves, its own segment's input and its own segment.
static rg_status check_closed(rewrite *r, rg_error *err) {
    rg_graph *g = r->g;
    for (int i = 0; i < r->n_fwd; i++) {
        rg_node *n = g->nodes[i];
        int s = r->seg[i];
        if (s < 0) continue;
        for (int k = 0; k <= RG_MAX_SRC; k++) {
            rg_node *x = k < RG_MAX_SRC ? n->src[k] : n->view_of;
            if (!x || x->op == RG_OP_NONE || x == r->bounds[s] || (x->id < r->n0 && r->seg[x->id] == s)) continue;
            return rg_fail(err, RG_ERR_ARG,
                           "recompute: node %d '%s' (%s) of segment %d reads node %d '%s' from outside the segment",
                           i, n->t.name, rg_op_name(n->op), s, x->id, x->t.name);
        }
    }
    return RG_OK;
}

// Marks the inner nodes read by a backward node, then what those read.
static void mark_needed(rewrite *r) {
    rg_graph *g = r->g;
    for (int i = r->n_fwd; i < r->n0; i++) {
        rg_node *n = g->nodes[i];
        for (int k = 0; k <= RG_MAX_SRC; k++) {
            rg_node *x = k < RG_MAX_SRC ? n->src[k] : n->view_of;
            if (x && x->id < r->n_fwd && r->seg[x->id] >= 0) r->needed[x->id] = true;
        }
    }
    for (int i = r->n_fwd - 1; i >= 0; i--) {
        if (!r->needed[i]) continue;
        rg_node *n = g->nodes[i];
        for (int k = 0; k <= RG_MAX_SRC; k++) {
            rg_node *x = k < RG_MAX_SRC ? n->src[k] : n->view_of;
            if (x && r->seg[x->id] >= 0) r->needed[x->id] = true;
        }
    }
}

// The node's segment among the nodes created by the rewrite, or -1.
static int group_of(const rewrite *r, const int *new_group, const rg_node *x) {
    return x && x->id >= r->n0 ? new_group[x->id - r->n0] : -1;
}

rg_status rg_graph_recompute(rg_graph *g, rg_node *const *bounds, int n_seg, uint32_t ckpt_type, rg_node **ckpts,
                             rg_error *err) {
    rg_status st = rg_graph_error(g, err);
    if (st) return st;
    if (!g->n_forward) return rg_fail(err, RG_ERR_ARG, "recompute: the graph has no backward yet");
    if (n_seg < 1) return rg_fail(err, RG_ERR_ARG, "recompute: %d segments", n_seg);
    if (ckpt_type != RG_TYPE_F32 && ckpt_type != RG_TYPE_F16 && ckpt_type != RG_TYPE_BF16)
        return rg_fail(err, RG_ERR_ARG, "recompute: checkpoints are stored as f32, f16 or bf16, not %s",
                       rg_type_get(ckpt_type)->name);
    for (int i = 0; i <= n_seg; i++) {
        if (!bounds[i] || bounds[i]->id >= g->n_forward || bounds[i]->t.type != RG_TYPE_F32 || bounds[i]->view_of ||
            (i && bounds[i]->id <= bounds[i - 1]->id))
            return rg_fail(err, RG_ERR_ARG,
                           "recompute: segment bound %d must be a forward f32 node that owns its bytes, after bound %d", i,
                           i - 1);
    }
    rewrite r = {.g = g, .n0 = g->n_nodes, .n_fwd = g->n_forward, .n_seg = n_seg, .bounds = bounds};
    r.seg = malloc(sizeof(int) * (size_t)r.n0);
    r.needed = calloc((size_t)r.n0, sizeof(bool));
    r.clone = calloc((size_t)r.n0, sizeof(rg_node *));
    r.input = calloc((size_t)n_seg, sizeof(rg_node *));
    r.ckpt = calloc((size_t)n_seg, sizeof(rg_node *));
    int *new_group = NULL;
    rg_node **order = NULL;
    bool *emitted = NULL;
    if (!r.seg || !r.needed || !r.clone || !r.input || !r.ckpt) {
        st = rg_fail(err, RG_ERR_NOMEM, "recompute: out of memory");
        goto done;
    }
    for (int i = 0; i < r.n0; i++) r.seg[i] = -1;
    for (int s = 0; s < n_seg; s++)
        for (int i = bounds[s]->id + 1; i < bounds[s + 1]->id; i++)
            if (g->nodes[i]->op != RG_OP_NONE) r.seg[i] = s;
    if ((st = check_closed(&r, err))) goto done;
    mark_needed(&r);

    // The stored inputs and the recomputed nodes, appended; ordered below.
    for (int s = 0; s < n_seg; s++) {
        r.input[s] = bounds[s];
        if (ckpt_type == RG_TYPE_F32) continue;
        r.ckpt[s] = rg_cpy(g, bounds[s], ckpt_type);
        rg_node_set_name(r.ckpt[s], "ckpt.%d", s);
        if (r.ckpt[s]) r.ckpt[s]->flags |= RG_NODE_OUTPUT;
        r.input[s] = rg_cpy(g, r.ckpt[s], RG_TYPE_F32);
        rg_node_set_name(r.input[s], "ckpt.%d (widened)", s);
    }
    for (int i = 0; i < r.n_fwd; i++) {
        if (!r.needed[i]) continue;
        rg_node *n = g->nodes[i], *src[RG_MAX_SRC];
        for (int k = 0; k < RG_MAX_SRC; k++) src[k] = mapped(&r, n->src[k]);
        rg_node *c = rg_graph_clone_node(g, n, src, n->view_of ? owner_of(mapped(&r, n->view_of)) : NULL);
        if (!c) break;
        c->flags = n->flags & RG_NODE_NEEDS_GRAD;
        r.clone[i] = c;
    }
    if ((st = rg_graph_error(g, err))) goto done;

    // Point the backward at the recomputed nodes.
    for (int i = r.n_fwd; i < r.n0; i++) {
        rg_node *n = g->nodes[i];
        for (int k = 0; k < RG_MAX_SRC; k++) n->src[k] = mapped(&r, n->src[k]);
        if (n->view_of) n->view_of = owner_of(mapped(&r, n->view_of));
    }

    // New order: the forward with each rounded input right after its source;
    // then the backward, each segment's recompute placed just before the first
    // backward node that reads it.
    const int n_new = g->n_nodes - r.n0, total = g->n_nodes;
    new_group = malloc(sizeof(int) * (size_t)(n_new ? n_new : 1));
    order = malloc(sizeof(rg_node *) * (size_t)total);
    emitted = calloc((size_t)n_seg, sizeof(bool));
    if (!new_group || !order || !emitted) {
        st = rg_fail(err, RG_ERR_NOMEM, "recompute: out of memory");
        goto done;
    }
    for (int j = 0; j < n_new; j++) new_group[j] = -1;
    for (int s = 0; s < n_seg; s++) {
        if (r.ckpt[s]) new_group[r.input[s]->id - r.n0] = s;  // the widening belongs to the recompute
    }
    for (int i = 0; i < r.n_fwd; i++)
        if (r.clone[i]) new_group[r.clone[i]->id - r.n0] = r.seg[i];
    int m = 0;
    for (int i = 0; i < r.n_fwd; i++) {
        order[m++] = g->nodes[i];
        for (int s = 0; s < n_seg; s++)
            if (r.ckpt[s] && g->nodes[i] == bounds[s]) order[m++] = r.ckpt[s];
    }
    const int n_forward = m;
    for (int i = r.n_fwd; i < r.n0; i++) {
        rg_node *n = g->nodes[i];
        for (int k = 0; k <= RG_MAX_SRC; k++) {
            rg_node *x = k < RG_MAX_SRC ? n->src[k] : n->view_of;
            int s = group_of(&r, new_group, x);
            if (s < 0 || emitted[s]) continue;
            emitted[s] = true;
            for (int j = 0; j < n_new; j++)
                if (new_group[j] == s) order[m++] = g->nodes[r.n0 + j];
        }
        order[m++] = n;
    }
    // A segment nothing reads (no parameter behind it needs a gradient) is not recomputed.
    if (m > total) {
        st = rg_fail(err, RG_ERR_ARG, "recompute: internal error ordering %d nodes", total);
        goto done;
    }
    memcpy(g->nodes, order, sizeof(rg_node *) * (size_t)m);
    g->n_nodes = m;
    g->n_forward = n_forward;
    for (int i = 0; i < m; i++) g->nodes[i]->id = i;
    if (ckpts)
        for (int s = 0; s < n_seg; s++) ckpts[s] = r.ckpt[s];
done:
    free(r.seg), free(r.needed), free(r.clone), free(r.input), free(r.ckpt);
    free(new_group), free(order), free(emitted);
    return st;
}
