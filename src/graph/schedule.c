// schedule.c - see schedule.h.
#include "graph/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "graph/ops.h"

static rg_node *owner(rg_node *n) { return n->view_of ? n->view_of : n; }
static bool runs_nothing(const rg_node *n) { return n->op == RG_OP_NONE || rg_op_defs[n->op].is_view; }

// The op table says what a node reads besides its sources and which sources it writes
// (rg_op_def.extra_reads, .writes_src).
int rg_node_reads(const rg_node *n, rg_node **out) {
    int k = 0;
    for (int s = 0; s < RG_MAX_SRC; s++)
        if (n->src[s]) out[k++] = n->src[s];
    const rg_node_tensors_fn extra = rg_op_defs[n->op].extra_reads;
    return extra ? k + extra(n, out + k) : k;
}

int rg_node_writes_src(const rg_node *n, rg_node **out) {
    const rg_node_tensors_fn writes = rg_op_defs[n->op].writes_src;
    return writes ? writes(n, out) : 0;
}

static bool cell_runs(rg_op_col c, const rg_node *n) { return c.run && (!c.supports || c.supports(n)); }

static rg_status add_copy(rg_schedule *s, int *cap, rg_sched_copy c, rg_error *err) {
    if (s->n_copies == *cap) {
        int nc = *cap ? 2 * *cap : 16;
        rg_sched_copy *p = realloc(s->copies, sizeof *p * (size_t)nc);
        if (!p) return rg_fail(err, RG_ERR_NOMEM, "schedule: out of memory");
        s->copies = p;
        *cap = nc;
    }
    s->copies[s->n_copies++] = c;
    return RG_OK;
}

rg_status rg_schedule_build(rg_graph *g, rg_backend_id primary, rg_op_col (*primary_cell)(int op),
                            bool (*pin)(void *ctx, const rg_node *leaf), void *pin_ctx, rg_schedule *out,
                            rg_error *err) {
    memset(out, 0, sizeof *out);
    out->primary = primary;
    out->first_fallback = -1;
    const int n = g->n_nodes;
    // 1. Kernels: the primary backend where it runs the node, else the CPU.
    for (int i = 0; i < n; i++) {
        rg_node *x = g->nodes[i];
        x->backend = RG_BACKEND_CPU;
        if (runs_nothing(x)) continue;
        if (primary != RG_BACKEND_CPU && cell_runs(primary_cell(x->op), x)) {
            x->backend = (int)primary;
        } else if (cell_runs(rg_op_cell(RG_BACKEND_CPU, x->op), x)) {
            if (primary != RG_BACKEND_CPU) {
                if (out->first_fallback < 0) out->first_fallback = i;
                out->n_fallback++;
            }
        } else {
            return rg_fail(err, RG_ERR_UNSUPPORTED, "schedule: no %s or CPU kernel for %s ('%s', node %d) with these types",
                           rg_backend_name(primary), rg_op_name(x->op), x->t.name, i);
        }
        out->n_on[x->backend]++;
    }
    // 2. Leaves: on the primary backend when pinned there, or when a node there reads them
    // (through views too).
    for (int i = 0; i < n && primary != RG_BACKEND_CPU && pin; i++) {
        rg_node *x = g->nodes[i];
        if (x->op == RG_OP_NONE && !x->view_of && pin(pin_ctx, x)) x->backend = (int)primary;
    }
    for (int i = 0; i < n && primary != RG_BACKEND_CPU; i++) {
        rg_node *x = g->nodes[i];
        if (runs_nothing(x)) continue;
        rg_node *r[RG_MAX_SRC + RG_NODE_MAX_EXTRA_READS];
        const int k = rg_node_reads(x, r);
        for (int q = 0; q < k; q++) {
            rg_node *o = owner(r[q]);
            if (o->op == RG_OP_NONE && x->backend == (int)primary) o->backend = (int)primary;
        }
    }
    for (int i = 0; i < n; i++) {  // views that run nothing live where their owner does
        rg_node *x = g->nodes[i];
        if (x->view_of && runs_nothing(x)) x->backend = x->view_of->backend;
    }
    if (primary == RG_BACKEND_CPU) return RG_OK;
    // 3. Copies. valid[id]: bit b set when backend b holds the tensor's current bytes.
    unsigned char *valid = calloc((size_t)n, 1);
    if (!valid) return rg_fail(err, RG_ERR_NOMEM, "schedule: out of memory");
    for (int i = 0; i < n; i++) valid[i] = (unsigned char)(1u << g->nodes[i]->backend);
    int cap = 0;
    rg_status st = RG_OK;
    for (int i = 0; i < n && !st; i++) {
        rg_node *x = g->nodes[i];
        if (runs_nothing(x)) continue;
        const unsigned b = (unsigned)x->backend;
        rg_node *r[RG_MAX_SRC + RG_NODE_MAX_EXTRA_READS], *w[RG_NODE_MAX_WRITES];
        const int k = rg_node_reads(x, r);
        for (int q = 0; q < k && !st; q++) {
            rg_node *o = owner(r[q]);
            if (valid[o->id] & (1u << b)) continue;
            st = add_copy(out, &cap, (rg_sched_copy){i, false, o, false}, err);
            valid[o->id] |= (unsigned char)(1u << b);
        }
        const int kw = rg_node_writes_src(x, w);
        for (int q = 0; q < kw && !st; q++) {
            rg_node *o = owner(w[q]);
            if (!(valid[o->id] & (1u << b))) {  // written but not read: its other bytes must come along
                st = add_copy(out, &cap, (rg_sched_copy){i, false, o, false}, err);
            }
            if (!st && (unsigned)o->backend != b) st = add_copy(out, &cap, (rg_sched_copy){i, true, o, true}, err);
            valid[o->id] = (unsigned char)((1u << o->backend) | ((unsigned)o->backend != b ? 1u << b : 0));
        }
        // The node's own output: current only where it was written.
        valid[x->id] = (unsigned char)(1u << b);
    }
    free(valid);
    return st;
}

void rg_schedule_free(rg_schedule *s) {
    if (!s) return;
    free(s->copies);
    memset(s, 0, sizeof *s);
}

rg_status rg_schedule_check_resident(const rg_graph *g, const rg_schedule *s, bool require, rg_error *err) {
    const char *env = getenv("RETRO_REQUIRE_GPU_RESIDENT");
    if (!require && !(env && !strcmp(env, "1"))) return RG_OK;
    if (s->primary == RG_BACKEND_CPU) return RG_OK;
    const char *why = require ? "the exec requires every node on the device" : "RETRO_REQUIRE_GPU_RESIDENT=1";
    if (s->first_fallback >= 0) {
        const rg_node *x = g->nodes[s->first_fallback];
        char types[128] = "";
        size_t len = 0;
        for (int q = 0; q < RG_MAX_SRC && x->src[q]; q++)
            len += (size_t)snprintf(types + len, sizeof types - len, "%s%s", q ? ", " : "", rg_type_get(x->src[q]->t.type)->name);
        return rg_fail(err, RG_ERR_UNSUPPORTED,
                       "%s: node %d '%s' (%s, sources %s) has no %s kernel for these types and would run on the CPU "
                       "(%d such nodes in all)",
                       why, s->first_fallback, x->t.name, rg_op_name(x->op), types, rg_backend_name(s->primary),
                       s->n_fallback);
    }
    if (s->n_copies) {
        const rg_sched_copy *c = &s->copies[0];
        const rg_node *x = g->nodes[c->at];
        return rg_fail(err, RG_ERR_UNSUPPORTED,
                       "%s: tensor '%s' would be copied %s node %d '%s' (%s on the %s) (%d copies a run in all)", why,
                       c->t->t.name, c->to_home ? "back to its home after" : "to the node's backend before", c->at,
                       x->t.name, rg_op_name(x->op), rg_backend_name((rg_backend_id)x->backend), s->n_copies);
    }
    return RG_OK;
}
