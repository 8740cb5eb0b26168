// exec_capture.c - CUDA Graphs (RETRO_CUDA_GRAPHS=1) for the executor (exec_internal.h).
//
// A graph replays kernel launches with the arguments they
// had when captured, so a run is captured only when everything a launch reads from the host
// side is the same as in the previous run of the same node range: every kernel node's op,
// parameters (fp, ip; except those its cell reads from device memory, rg_op_col.device_params:
// the loss scales and the optimizer's step scalars, uploaded before each run), bytes, shapes
// and strides and those of its sources (the signature). A range is captured at its second run
// with a signature and replayed while the signature holds; a changed parameter (a view moved
// by a decode step) runs the nodes again and is captured again once it repeats. Only graphs
// resident on the device (no fallback, no copy) are captured: a CPU node cannot be part of a
// CUDA graph. The inputs are uploaded before the launch and the loss read after it, as without
// graphs, so the bits are the same.

#include <math.h>
#include <stdio.h>

#include "base/error.h"
#include "graph/exec_internal.h"

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

// A tensor of a node whose cell reads its moving geometry from device memory: the bytes it
// starts from (a view's owner: its offset is in the parameters) and its strides; its own
// data and shape for one that is not a view.
static uint64_t fnv_fixed(uint64_t h, const rg_node *x) {
    const char *base = (const char *)x->t.data - (x->view_of ? x->t.view_offs : 0);
    h = fnv(h, &base, sizeof base), h = fnv(h, x->t.nb, sizeof x->t.nb);
    return x->view_of ? h : fnv(h, x->t.ne, sizeof x->t.ne);
}

static uint64_t run_signature(const rg_exec *ex, int from, int to) {
    uint64_t h = 1469598103934665603ull;
    for (int i = from; i < to; i++) {
        const rg_node *n = ex->g->nodes[i];
        if (n->op == RG_OP_NONE || rg_op_defs[n->op].is_view) continue;
        h = fnv(h, &n->op, sizeof n->op);
        if (ex->param_slot && ex->param_slot[i] >= 0 && ex->dev->vt->cell(n->op).geometry) {
            h = fnv_fixed(h, n);
            for (int s = 0; s < RG_MAX_SRC; s++)
                if (n->src[s]) h = fnv_fixed(h, n->src[s]);
            continue;
        }
        if (!ex->param_slot || ex->param_slot[i] < 0)  // device-read parameters do not change a launch
            h = fnv(h, n->fp, sizeof n->fp), h = fnv(h, n->ip, sizeof n->ip);
        h = fnv(h, &n->t.data, sizeof n->t.data), h = fnv(h, n->t.ne, sizeof n->t.ne), h = fnv(h, n->t.nb, sizeof n->t.nb);
        for (int s = 0; s < RG_MAX_SRC; s++) {
            const rg_node *x = n->src[s];
            if (!x) continue;
            h = fnv(h, &x->t.data, sizeof x->t.data), h = fnv(h, x->t.ne, sizeof x->t.ne);
            h = fnv(h, x->t.nb, sizeof x->t.nb);
        }
    }
    return h;
}

static bool can_graph(const rg_exec *ex, int from, int to) {
    return ex->graphs && ex->dev && ex->dev->vt->graph_begin && !ex->prof && from < to &&
           ex->sched.n_copies == 0 && ex->sched.n_fallback == 0 && ex->sched.n_on[RG_BACKEND_CPU] == 0;
}

// The loss check of a run that did not go node by node.
static rg_status check_losses(rg_exec *ex, int from, int to, rg_error *err) {
    for (int i = from; i < to; i++) {
        rg_node *n = ex->g->nodes[i];
        if (!(n->flags & RG_NODE_LOSS)) continue;
        float loss;
        rg_status st = ex->dev->vt->download(ex->dev, &loss, n->t.data, sizeof loss, err);
        if (st) return st;
        ex->stats.output_copies++, ex->stats.output_bytes += sizeof loss;
        ex->loss_node = n, ex->loss_value = loss;
        if (!isfinite(loss)) {
            char where[256];
            rg_ex_first_non_finite(ex, i, where, sizeof where);
            return rg_fail(err, RG_ERR_NONFINITE, "exec: the loss '%s' is %g; %s", n->t.name, (double)loss, where);
        }
    }
    return RG_OK;
}

// A resident run of nodes [from, to) through a CUDA graph; *done = false when it must run node
// by node (graphs off or not possible, the first run with these parameters, or no free slot
// for the range).
rg_status rg_ex_run_graphed(rg_exec *ex, int from, int to, bool *done, rg_error *err) {
    *done = false;
    if (!can_graph(ex, from, to)) return RG_OK;
    struct exec_graph *gs = NULL;
    const int n_slots = (int)(sizeof ex->gslot / sizeof ex->gslot[0]);
    for (int k = 0; k < n_slots && !gs; k++)
        if (ex->gslot[k].to && ex->gslot[k].from == from && ex->gslot[k].to == to) gs = &ex->gslot[k];
    for (int k = 0; k < n_slots && !gs; k++)
        if (!ex->gslot[k].to) gs = &ex->gslot[k], gs->from = from, gs->to = to, gs->last_sig = 0;
    if (!gs) return RG_OK;
    const uint64_t sig = run_signature(ex, from, to);
    rg_backend *d = ex->dev;
    rg_status st = RG_OK;
    if (gs->graph && gs->graph_sig != sig) {
        d->vt->graph_free(d, gs->graph);
        gs->graph = NULL;
    }
    if (!gs->graph && sig == gs->last_sig) {  // the second run with these parameters: capture it
        if ((st = d->vt->sync(d, err)) || (st = d->vt->graph_begin(d, err))) return st;
        rg_exec_ctx ctx = {.pool = ex->pool, .scratch = ex->scratch, .scratch_size = ex->plan.scratch_bytes,
                           .int8_activations = ex->int8_activations, .bf16_products = ex->bf16_products,
                       .tiles_cache = ex->tiles_cache};
        for (int i = from; i < to && !st; i++) {
            rg_node *n = ex->g->nodes[i];
            if (n->op == RG_OP_NONE || rg_op_defs[n->op].is_view) continue;
            st = rg_ex_run_node(ex, &ctx, n, err);
        }
        void *graph = NULL;
        rg_error e2;
        rg_status se = d->vt->graph_end(d, &graph, st ? &e2 : err);
        if (st || se) {
            if (graph) d->vt->graph_free(d, graph);
            return st ? st : se;
        }
        gs->graph = graph, gs->graph_sig = sig;
        ex->stats.graph_captures++;
    }
    gs->last_sig = sig;
    if (!gs->graph) return RG_OK;  // the first run with these parameters: node by node
    if ((st = rg_ex_upload_inputs(ex, from, to, err)) || (st = d->vt->graph_launch(d, gs->graph, err)) ||
        (st = d->vt->sync(d, err)))
        return st;
    ex->stats.graph_launches++;
    *done = true;
    return check_losses(ex, from, to, err);
}
