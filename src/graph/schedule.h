// schedule.h - the scheduling pass: which backend runs each node, where each tensor
// lives, and the copies that follow from it.
//
// An exec has a primary backend (the CPU, or the device) and the CPU as fallback. Every
// node with a kernel on the primary backend for its types and strides runs there; any
// other node falls back to the CPU (a counted fallback). A tensor's home is the backend
// of the node that writes it; a leaf lives on the primary backend when any node there
// reads it (weights, parameters, optimizer state, caches are then uploaded once, when
// the exec is made), else on the CPU. A node that reads a tensor homed on the other
// backend gets an explicit copy before it, into a mirror of that tensor on its own
// backend, unless the mirror already holds the current bytes; a node that writes a
// foreign tensor in place (CPY_INTO, the optimizer steps, LINEAR_CE_BACK's weight
// gradient) gets a copy back after it. Copies happen only where this pass put them, so
// `RETRO_REQUIRE_GPU_RESIDENT=1` can refuse a graph before it runs by looking here.
#ifndef RG_GRAPH_SCHEDULE_H
#define RG_GRAPH_SCHEDULE_H

#include "graph/backend.h"
#include "graph/graph.h"

typedef struct rg_sched_copy {
    int at;        // node index the copy belongs to
    bool after;    // false: before node `at` (a read); true: after it (a write-back)
    rg_node *t;    // the tensor (an owner, never a view) whose bytes are copied
    bool to_home;  // true: mirror -> home (write-back), false: home -> mirror
} rg_sched_copy;

typedef struct rg_schedule {
    rg_backend_id primary;
    rg_sched_copy *copies;  // in execution order
    int n_copies;
    int n_fallback;         // nodes that run on the CPU although the primary backend is not the CPU
    int first_fallback;     // index of the first of them, -1 when none
    int n_on[RG_BACKEND_COUNT];  // nodes with a kernel run per backend
} rg_schedule;

// Sets n->backend for every node (views and leaves: their home) and lists the copies.
// primary_cell: the cells of the primary backend (its vt->cell). A node that neither the
// primary backend nor the CPU can run is an error naming it.
// pin (may be NULL): leaves for which it returns true live on the primary backend whatever
// reads them (their current bytes are there: device copies shared with other execs).
rg_status rg_schedule_build(rg_graph *g, rg_backend_id primary, rg_op_col (*primary_cell)(int op),
                            bool (*pin)(void *ctx, const rg_node *leaf), void *pin_ctx, rg_schedule *out,
                            rg_error *err);
void rg_schedule_free(rg_schedule *s);

// The tensors node n reads: its sources, then those its op's row adds (graph/ops.h's
// extra_reads: LINEAR_CE_BACK's weight and labels, read through its LINEAR_CE source).
// Returns the count (at most RG_MAX_SRC + RG_NODE_MAX_EXTRA_READS).
int rg_node_reads(const rg_node *n, rg_node **out);
// The sources n writes in place, as its op's row says (writes_src: CPY_INTO's window, the
// optimizer's parameter, moments and master, LINEAR_CE_BACK's weight gradient). Returns the
// count (at most RG_NODE_MAX_WRITES).
int rg_node_writes_src(const rg_node *n, rg_node **out);

// When `RETRO_REQUIRE_GPU_RESIDENT=1` (or require is true) and the primary backend is not
// the CPU: an error naming the first fallback node (its op, its name, why) or the first
// copy (the tensor, the node that needs it, the direction).
rg_status rg_schedule_check_resident(const rg_graph *g, const rg_schedule *s, bool require, rg_error *err);

#endif
