// plan.h - memory planning: every node's bytes get an offset in one buffer,
// reused as soon as their last reader has run; the peak is known before any
// kernel runs, and a graph that does not fit a budget is refused with the
// numbers.
#ifndef RG_GRAPH_PLAN_H
#define RG_GRAPH_PLAN_H

#include <stdio.h>

#include "graph/graph.h"

typedef struct rg_plan {
    size_t buffer_bytes;     // the planned buffer: its size is the peak of everything planned
    size_t scratch_bytes;    // the largest kernel scratch (shared, reused by every op)
    size_t external_bytes;   // bytes bound from outside (weights, caller inputs)
    size_t param_bytes;      // of which trainable parameters
    size_t grad_bytes;       // parameter gradients (outputs, alive to the end; inside the buffer)
    size_t output_bytes;     // other outputs kept to the end (inside the buffer)
    size_t naive_bytes;      // what the planned nodes would take without any reuse
    int n_planned;           // nodes with bytes in the buffer
    int n_inplace;           // nodes that took over their source's bytes
} rg_plan;

// Plans g for n_threads (scratch sizes depend on it). budget = 0: no limit;
// otherwise buffer + scratch + external must fit, or RG_ERR_NOMEM names the numbers.
rg_status rg_graph_plan(rg_graph *g, int n_threads, size_t budget, rg_plan *out, rg_error *err);
// The same for the nodes whose backend (n->backend, set by the scheduler) is `backend`:
// their offsets in that backend's buffer; the other nodes' offsets are left alone.
// rg_graph_plan plans the CPU's (every node, in a graph never scheduled elsewhere).
rg_status rg_graph_plan_backend(rg_graph *g, int backend, int n_threads, size_t budget, rg_plan *out, rg_error *err);
void rg_plan_print(const rg_plan *p, FILE *f);

#endif
