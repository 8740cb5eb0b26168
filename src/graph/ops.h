// ops.h - the op table: one row per rg_op drives the kernels, the gradients,
// the tests, the backend report and the CPU fallback. A new op is declared
// here once and is then built, differentiated, planned, scheduled, tested and
// reported by the code that walks this table.
#ifndef RG_GRAPH_OPS_H
#define RG_GRAPH_OPS_H

#include "graph/graph.h"

// What a kernel gets besides its node: the thread pool and a scratch buffer
// of the size the op's work_size asked for (shared by the threads; split it by
// ith yourself). Kernels parallelize internally with rg_threadpool_run.
typedef struct rg_exec_ctx {
    rg_threadpool *pool;
    void *scratch;
    size_t scratch_size;
    bool int8_activations;  // rg_exec_opts.int8_activations (inference only)
    struct rg_backend *backend;  // the backend running the node (its context: backend->impl); NULL: the CPU
    // For a cell with device_params (graph/backend.h): the node's fp and ip in the backend's
    // memory, current for this run; NULL otherwise.
    const struct rg_node_params *params;
    bool bf16_products;  // rg_exec_opts.bf16_products (training.compute_dtype=bf16): products on RG_SGEMM_BF16
    struct rg_tiles_cache *tiles_cache;  // rg_exec_opts.tiles_cache: frozen weights' packed BF16 tiles, or NULL
} rg_exec_ctx;

// A node's parameters as one block (the layout of rg_node's ip and fp).
typedef struct rg_node_params {
    int64_t ip[8];
    float fp[8];
    int64_t geom[4];  // the cell's geometry (rg_op_col.geometry), zeros without one
} rg_node_params;

// A kernel, on any backend (a cell of the op table, graph/backend.h): reads n->src[i]->t
// (bytes bound; strides honoured as its support rule says), writes n->t.data (contiguous,
// n->t.nb). Returns RG_OK or an error naming the node (a label out of range, a non-finite
// loss, ...). Its scratch size for n_threads, and whether it runs this node with these
// types and strides.
typedef rg_status (*rg_kernel_fn)(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
typedef size_t (*rg_work_fn)(const rg_node *n, int n_threads);
typedef bool (*rg_supports_fn)(const rg_node *n);
// Builds the gradient of n's sources from n->grad, adding each with rg_grad_add.
typedef rg_status (*rg_backward_fn)(rg_graph *g, rg_node *n, rg_error *err);

// The tensors a node reads besides its sources, or the sources it writes in place
// (graph/schedule.h's rg_node_reads and rg_node_writes_src add them up): appends to out,
// returns how many. The scheduler copies them between backends and the executor reads
// them through their mirrors, so a kernel that reads or writes a tensor it does not own
// says so here. At most RG_NODE_MAX_EXTRA_READS / RG_NODE_MAX_WRITES.
typedef int (*rg_node_tensors_fn)(const rg_node *n, rg_node **out);
#define RG_NODE_MAX_EXTRA_READS 2
#define RG_NODE_MAX_WRITES 4

// A fusion hook (one per backend column, graph/backend.h's rg_op_col.group): the nodes
// after g->nodes[i] (before `to`) that the backend runs together with it in one call.
// Fills grp (grp[0] = the node; at most RG_GROUP_MAX), returns the count and sets *last to
// the index of the last one; a count of 1 runs the node alone. run_group runs them.
#define RG_GROUP_MAX 8
typedef int (*rg_group_fn)(rg_graph *g, int i, int to, rg_node **grp, int *last);
typedef rg_status (*rg_run_group_fn)(rg_exec_ctx *ctx, rg_node *const *grp, int cnt, rg_error *err);

// One row of the op table. The CPU column is here (cpu_*); the CUDA column is the list in
// src/cuda/op_table.cu. The row's comment in ops.c names the op's shape rule (the
// constructor in graph/build*.c), its CPU and CUDA kernel files and its tests.
typedef struct rg_op_def {
    const char *name;            // the op's one name: messages, reports, profiles (rg_op_name)
    bool is_view;                // no kernel: the output shares the bytes of src[0]
    bool inplace_ok;             // the output may take over src[0]'s bytes when src[0] dies here
    rg_backward_fn backward;     // NULL: the op has no gradient (backward through it is an error)
    rg_node_tensors_fn extra_reads;  // NULL: it reads its sources only
    rg_node_tensors_fn writes_src;   // NULL: it writes its own output only
    // The CPU column.
    rg_kernel_fn cpu;
    rg_work_fn cpu_work;         // NULL: no scratch
    rg_supports_fn cpu_supports;
    const char *cpu_types;       // the types the report lists for the CPU kernel
    rg_group_fn cpu_group;       // the CPU's fusion hook (NULL: none), with cpu_run_group
    rg_run_group_fn cpu_run_group;
} rg_op_def;

extern const rg_op_def rg_op_defs[RG_OP_COUNT];

// Adds grad into src's gradient (the first contribution becomes it; later ones
// are summed with ADD in the order they arrive). Used by backward rules.
rg_status rg_grad_add(rg_graph *g, rg_node *src, rg_node *grad, rg_error *err);

// The F32 master copy an ADAMW (src[4]) or SGD (src[2]) node updates, or NULL.
static inline rg_node *rg_optim_master(const rg_node *n) {
    return n->op == RG_OP_ADAMW ? n->src[4] : n->op == RG_OP_SGD ? n->src[2] : NULL;
}
// The F32 [1] clip an ADAMW (src[5]) or SGD (src[4]) node reads instead of its fp, or NULL.
static inline rg_node *rg_optim_clip_src(const rg_node *n) {
    return n->op == RG_OP_ADAMW ? n->src[5] : n->op == RG_OP_SGD ? n->src[4] : NULL;
}

// Appends a copy of n reading src[] (a view: sharing view_of's bytes), with no
// output flags and no gradient; the caller places it (graph rewrites).
rg_node *rg_graph_clone_node(rg_graph *g, const rg_node *n, rg_node *const src[RG_MAX_SRC], rg_node *view_of);

// The node of an op that packs several results (graph/pack.h): 1-D f32 of the op's
// layout's length for these sources, ip copied; NULL with the graph's error set when
// the sources give no layout. For constructors outside build.c (build_flash.c).
rg_node *rg_graph_packed_node(rg_graph *g, rg_op op, rg_node *const src[RG_MAX_SRC], const int64_t ip[8]);

#endif
