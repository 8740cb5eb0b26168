// backend.h - where nodes run and where their bytes live.
//
// The op table has one column per backend (rg_op_cell): for each op, whether the
// backend can run a node (supports), the kernel (run), its scratch (work), the types
// the report lists and its fusion hook. The CPU column is the table's own cpu fields
// (ops.c); the CUDA column is the list in src/cuda/op_table.cu, which the CUDA code
// defines because its kernels are C++ (there is one per build of that code: the GPU's
// and the host execution's, cuda.h). The scheduler (schedule.h), the planner, the parity suite and
// the report all read the cells through rg_op_cell, so no second list of "what runs
// where" exists.
//
// A backend object is that column plus memory: allocate and release device memory,
// copy host -> device and device -> host, zero, and synchronize. The executor plans
// one buffer per backend (plan.h), allocates it through the backend, and moves bytes
// only through these calls, so every copy is counted where it happens.
#ifndef RG_GRAPH_BACKEND_H
#define RG_GRAPH_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "graph/graph.h"
#include "graph/ops.h"

typedef enum rg_backend_id { RG_BACKEND_CPU = 0, RG_BACKEND_CUDA = 1, RG_BACKEND_COUNT } rg_backend_id;

// One cell of the op table: op x backend (its function types: graph/ops.h).
typedef struct rg_op_col {
    rg_kernel_fn run;         // NULL: this backend has no kernel for the op
    rg_supports_fn supports;  // NULL: every node of the op (types, strides) runs
    rg_work_fn work;          // NULL: no scratch
    const char *types;             // the types the report lists ("f32, f16, bf16"); NULL without a kernel
    // The kernel reads the node's fp/ip from rg_exec_ctx.params (this backend's memory, uploaded
    // by the executor before each run when they changed) instead of taking them as launch
    // arguments: a loss scale or an optimizer's step scalars that change from run to run then
    // leave a captured CUDA graph valid (exec_capture.c's signature skips them).
    bool device_params;
    // With device_params: the node's geometry that moves between runs (a decode step's cache
    // position) put into rg_node_params.geom for the kernel, which then sizes its launch only
    // from what stays fixed (the strides and the views' owners); exec_capture.c's signature
    // then reads a view's owner and strides instead of its offset and shape. NULL: none.
    void (*geometry)(const rg_node *n, int64_t geom[4]);
    // The fusion hook (graph/ops.h's rg_group_fn; NULL: none): the nodes after this one the
    // backend runs with it in one call (run_group), as the CPU runs products of the same
    // activations in one parallel section. The executor asks the hook of each node's backend
    // where a run has one backend (with a device, copies and mirrors go node by node).
    rg_group_fn group;
    rg_run_group_fn run_group;
} rg_op_col;

// The cell of op on backend b (zeroed when the backend is not built, or for views).
rg_op_col rg_op_cell(rg_backend_id b, int op);
// Whether backend b runs node n (a kernel exists and accepts its types and strides).
bool rg_op_cell_runs(rg_backend_id b, const rg_node *n);
const char *rg_backend_name(rg_backend_id b);

typedef struct rg_backend rg_backend;

typedef struct rg_backend_vt {
    rg_backend_id id;  // the column of the op table it serves (a test backend may stand in for CUDA)
    // Its cells: rg_op_cell(id, op) for real backends; a test's backend may serve a subset.
    rg_op_col (*cell)(int op);
    // Memory of this backend. Copies are ordered with the kernels (a stream); download
    // returns with the bytes in host memory.
    rg_status (*alloc)(rg_backend *b, size_t bytes, void **out, rg_error *err);
    void (*release)(rg_backend *b, void *p);
    rg_status (*upload)(rg_backend *b, void *dst, const void *host_src, size_t bytes, rg_error *err);
    rg_status (*download)(rg_backend *b, void *host_dst, const void *src, size_t bytes, rg_error *err);
    rg_status (*zero)(rg_backend *b, void *dst, size_t bytes, rg_error *err);
    rg_status (*sync)(rg_backend *b, rg_error *err);
    // Graph capture (may be NULL: no graphs): what is queued between begin and end is recorded
    // and returned as a replayable graph; launch replays it in stream order.
    rg_status (*graph_begin)(rg_backend *b, rg_error *err);
    rg_status (*graph_end)(rg_backend *b, void **graph, rg_error *err);
    rg_status (*graph_launch)(rg_backend *b, void *graph, rg_error *err);
    void (*graph_free)(rg_backend *b, void *graph);
    // This process's and the whole device's memory, for reports and refusals (may be NULL).
    rg_status (*mem_info)(rg_backend *b, size_t *free_bytes, size_t *total_bytes, rg_error *err);
    void (*destroy)(rg_backend *b);
} rg_backend_vt;

struct rg_backend {
    const rg_backend_vt *vt;
    void *impl;         // the backend's context (rg_cuda_ctx * for CUDA)
    bool host_memory;   // its memory is host memory (the CPU backend): no copies needed
    const char *label;  // for messages: "cpu", "cuda", "host execution of the CUDA code (not a GPU)"
};

// The CPU backend (a static object: host memory, memcpy, no stream).
rg_backend *rg_backend_cpu(void);
// The CUDA backend on device `device`, or an error naming the driver's reason.
rg_status rg_backend_cuda_create(rg_backend **out, int device, rg_error *err);
void rg_backend_free(rg_backend *b);

#endif
