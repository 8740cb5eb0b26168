// exec_internal.h - what the executor's files share (graph/exec.h is the interface):
// the rg_exec object and the steps each file provides. exec.c runs (create, bind, run,
// free); exec_copy.c moves bytes between backends (the device side of create, scheduled
// copies, inputs, node parameters, reads and writes); exec_capture.c captures and
// replays CUDA graphs; exec_profile.c times nodes and traces the first non-finite value.
#ifndef RG_GRAPH_EXEC_INTERNAL_H
#define RG_GRAPH_EXEC_INTERNAL_H

#include "graph/backend.h"
#include "graph/exec.h"
#include "graph/ops.h"
#include "graph/schedule.h"

struct rg_exec {
    rg_graph *g;
    rg_plan plan;           // the host buffer's plan
    rg_plan dplan;          // the primary device's buffer (zeroed when the primary backend is the CPU)
    void *buffer;
    void *scratch;
    rg_threadpool *pool;
    rg_backend *dev;        // the primary backend when it is not the CPU; NULL otherwise
    bool own_dev;
    rg_schedule sched;
    void *dbuffer, *dscratch;  // on dev
    // Per node id (NULL arrays when dev is NULL):
    void **mirror;          // the tensor's bytes on the backend that is not its home (scheduled copies)
    void **host_of;         // a device-homed external leaf: the caller's host bytes (restored on free)
    void **staging;         // a device-homed planned INPUT leaf: the host bytes rg_exec_input hands out
    void **dev_own;         // device memory this exec allocated for that node (external leaves)
    void **dev_of;          // the device copy of a device-homed external leaf (own or from `resident`)
    rg_resident *resident;  // device copies that outlive the exec (rg_exec_opts.resident), or NULL
    int copy_cursor;        // index into sched.copies of the next copy (runs move forward)
    // RETRO_CUDA_GRAPHS=1: runs of a node range captured once and replayed (run_graphed), one
    // slot per range (a training run's optimizer graph runs as two ranges a step).
    bool graphs;
    struct exec_graph {
        int from, to;       // the range; to == 0: the slot is free
        void *graph;        // the captured run, or NULL
        uint64_t graph_sig; // the signature it was captured with
        uint64_t last_sig;  // the signature of the last run of the range (captured at its second sight)
    } gslot[4];
    rg_exec_stats stats;
    // Node parameters the device's kernels read from its memory (rg_op_col.device_params): a
    // slot per such node (param_slot[id], -1 for the others), the block on the device and the
    // copy last uploaded.
    int *param_slot;
    int n_params;
    rg_node_params *params_sent;
    void *params_dev;
    bool params_valid;
    // The last device loss the run's finiteness check downloaded: rg_exec_read of that node
    // returns it instead of copying the same 4 bytes again (one read-back per row, not two).
    const rg_node *loss_node;
    float loss_value;
    bool own_pool;
    bool own_mem;  // buffer and scratch are this exec's (not an rg_exec_mem's)
    bool int8_activations;
    bool bf16_products;
    struct rg_tiles_cache *tiles_cache;  // rg_exec_opts.tiles_cache (not owned)
    rg_exec_profile *prof;
};

static inline rg_node *rg_ex_owner(rg_node *n) { return n->view_of ? n->view_of : n; }

// The backend running node n in this exec.
static inline rg_backend *rg_ex_backend_of(const rg_exec *ex, const rg_node *n) {
    return n->backend == RG_BACKEND_CPU || !ex->dev ? rg_backend_cpu() : ex->dev;
}

// The cell of node n's op on the backend running it.
static inline rg_op_col rg_ex_cell(const rg_exec *ex, const rg_node *n) {
    rg_backend *b = rg_ex_backend_of(ex, n);
    return b == rg_backend_cpu() ? rg_op_cell(RG_BACKEND_CPU, n->op) : b->vt->cell(n->op);
}

// exec.c
rg_status rg_ex_run_node(rg_exec *ex, rg_exec_ctx *ctx, rg_node *n, rg_error *err);

// exec_copy.c
rg_status rg_ex_create_device(rg_exec *ex, const rg_exec_opts *opts, rg_error *err);
rg_status rg_ex_do_copies(rg_exec *ex, int i, bool after, rg_error *err);
rg_status rg_ex_upload_inputs(rg_exec *ex, int from, int to, rg_error *err);
rg_status rg_ex_params_upload(rg_exec *ex, rg_error *err);

// exec_capture.c: a resident run of nodes [from, to) through a CUDA graph (RETRO_CUDA_GRAPHS=1);
// *done = false when it must run node by node.
rg_status rg_ex_run_graphed(rg_exec *ex, int from, int to, bool *done, rg_error *err);

// exec_profile.c
double rg_ex_now_s(void);
// Adds the seconds `dt` of nodes grp[0..cnt) (one kernel call) to the profile.
void rg_ex_profile_add(rg_exec_profile *p, rg_node *const *grp, int cnt, double dt);
// Runs nodes [0, upto] again, checking each output: names the first non-finite value in buf.
void rg_ex_first_non_finite(rg_exec *ex, int upto, char *buf, size_t cap);

#endif
