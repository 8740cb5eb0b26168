// exec.h - running a planned graph: binds every node's bytes, then runs the
// nodes in order on the CPU, or on the GPU where the CUDA backend supports a
// node (falling back to the CPU per node, with the copies counted).
#ifndef RG_GRAPH_EXEC_H
#define RG_GRAPH_EXEC_H

#include "graph/graph.h"
#include "graph/plan.h"

#include <stdio.h>

typedef enum rg_device { RG_DEVICE_CPU = 0, RG_DEVICE_CUDA = 1 } rg_device;

// Where time goes, summed over runs when an exec is given one: wall seconds and
// node counts per op, and for MUL_MAT also per weight type (a group of products
// sharing one parallel section is timed as one and split by weight bytes).
// Costs two clock reads per node; NULL (the default) costs nothing.
typedef struct rg_exec_profile {
    double op_s[RG_OP_COUNT];
    int64_t op_n[RG_OP_COUNT];
    double mm_s[RG_TYPE_COUNT];
    int64_t mm_n[RG_TYPE_COUNT];
    double mm_bytes[RG_TYPE_COUNT];  // weight bytes read
    double run_s;                    // whole rg_exec_run calls
    int64_t runs;
} rg_exec_profile;

// Prints the profile to f as a table (ops by time, then MUL_MAT by weight type),
// each run's share in ms: what `retrograd generate --profile` and the benches show.
void rg_exec_profile_print(const rg_exec_profile *p, FILE *f);

// Memory that execs made one after another can reuse (a session's batches):
// the buffer and scratch an exec needs are taken from here, grown when too
// small, and left here when the exec is freed, so a new graph does not pay for
// fresh pages (their faults and zeroing were ~3% of a SmolLM2 prompt). One exec
// at a time may use it. Start zeroed; rg_exec_mem_free releases it.
typedef struct rg_exec_mem {
    void *buffer, *scratch;
    size_t buffer_cap, scratch_cap;
} rg_exec_mem;
void rg_exec_mem_free(rg_exec_mem *mem);

// Device copies of host bytes that outlive one exec: a session's weights and KV cache, a
// trainer's parameters and optimizer state. Execs made with the same `resident` (and the
// same backend) upload an external leaf the first time a device node reads it and reuse
// the copy after that; what the device writes (CPY_INTO into a cache, optimizer steps)
// stays there until rg_resident_sync_host brings it back. Keyed by (host pointer, bytes).
typedef struct rg_resident rg_resident;
struct rg_backend;
rg_status rg_resident_create(rg_resident **out, struct rg_backend *dev, rg_error *err);
// Downloads every copy the device wrote since its upload (or last sync) to its host bytes.
rg_status rg_resident_sync_host(rg_resident *r, rg_error *err);
// The host bytes changed (a caller rewrote them): upload them again, if they have a copy.
rg_status rg_resident_refresh(rg_resident *r, const void *host, size_t bytes, rg_error *err);
// The same for every copy whose host bytes lie inside [host, host + bytes) (a region rewritten whole, whose copies
// may have several lengths: a session's recurrent-state snapshots, each batch size its own copy).
rg_status rg_resident_refresh_within(rg_resident *r, const void *host, size_t bytes, rg_error *err);
size_t rg_resident_bytes(const rg_resident *r);
void rg_resident_free(rg_resident *r);

typedef struct rg_exec_opts {
    int n_threads;      // <= 0: all cores
    size_t budget;      // bytes; 0 = no limit
    rg_device device;
    rg_threadpool *pool;  // optional: a pool that outlives the exec (n_threads is then ignored)
    rg_exec_profile *profile;  // optional: time per op is added there (not owned)
    rg_exec_mem *mem;          // optional: reuse (and grow) these allocations instead of owning new ones
    // Inference only (a session's graphs, never training): MUL_MAT may quantize its activations to
    // Q8_0 for an integer GEMM where the weight type has one (Q4_0 and Q4_K on AVX-512 VNNI, cpu/gemm_int8.h), as
    // llama.cpp does and as generation's dot products already do. Gradients never see it.
    bool int8_activations;
    // Training's products in BF16 (training.compute_dtype=bf16, train/compute.h): the CPU's MUL_MAT, OUT_PROD
    // and LINEAR_CE(_BACK) run rg_gemm_run(RG_SGEMM_BF16) on the matrix unit (cpu/gemm_tiles.h) instead of the
    // F32 SGEMM; the caller checked rg_gemm_tiles_path() != RG_TILES_NONE. The plan does not depend on it (the
    // kernels' scratch covers both). Device cells ignore it.
    bool bf16_products;
    // With bf16_products, or a prompt's BF16 tiles (int8_activations): the packed BF16 tiles of frozen
    // weights (cpu/tiles_cache.h), kept by the caller across execs and steps (a trainer's LoRA base, a
    // session's BF16 weights); NULL: every product packs its weight. Not owned; it must outlive the exec.
    struct rg_tiles_cache *tiles_cache;
    // A backend to run on instead of `device` (a session's or a trainer's, kept across
    // execs; tests stand one in for a device; not owned).
    struct rg_backend *backend;
    // Refuse, before anything runs, a graph that would fall back to the CPU or copy a tensor
    // between backends inside a run (as RETRO_REQUIRE_GPU_RESIDENT=1 does for every exec).
    bool require_resident;
    // Device copies shared with other execs (with `backend`); NULL: this exec's own, released
    // with it.
    rg_resident *resident;
    // The plan rg_graph_plan made of this graph for the exec's thread count with no budget, the
    // graph unchanged since (a caller that chose between candidate graphs by planning them):
    // taken as it is instead of planning again. CPU only (a device plans its own buffer).
    const rg_plan *plan;
} rg_exec_opts;

// Counted since the exec was made. "Copies" are the scheduled ones inside runs (fallbacks);
// inputs, outputs read with rg_exec_read and the one-time uploads are counted apart.
typedef struct rg_exec_stats {
    int nodes_cpu, nodes_gpu;       // kernels run (a group of products counts each)
    int nodes_fallback;             // nodes the schedule put on the CPU although a device was asked for
    int copies_scheduled;           // copies a run makes (the schedule's list)
    uint64_t copies_to_device, bytes_to_device, copies_to_host, bytes_to_host;
    uint64_t input_copies, input_bytes;    // INPUT leaves uploaded before runs, rg_exec_write
    uint64_t output_copies, output_bytes;  // the loss, rg_exec_read, rg_exec_download_leaves
    uint64_t setup_copies, setup_bytes;    // leaves uploaded once, when the exec was made
    uint64_t graph_captures, graph_launches;  // RETRO_CUDA_GRAPHS=1: runs captured, runs replayed
    uint64_t param_copies, param_bytes;    // the device-read node parameters, uploaded when they changed
} rg_exec_stats;

typedef struct rg_exec rg_exec;

// Plans (refusing a graph over the budget before allocating anything),
// allocates the buffer and scratch, and binds every node's data pointer.
// Leaves created with data == NULL get bytes in the buffer: write them after
// this call through node->t.data (rg_exec_input on a device). On a device
// (opts.device, opts.backend) the scheduling pass (schedule.h) picks each
// node's backend, the device's buffer is planned and allocated, external
// leaves read there are uploaded once, and a run that does not fit the
// device's free memory is refused here with the numbers.
rg_status rg_exec_create(rg_exec **out, rg_graph *g, const rg_exec_opts *opts, rg_error *err);
// Runs nodes [from, to) (to = -1: to the end). A loss that comes out NaN or
// Inf is an error naming the first node whose output is not finite.
rg_status rg_exec_run(rg_exec *ex, int from, int to, rg_error *err);
// Re-derives every view's data pointer from its owner's (as rg_exec_create
// binds them), after a caller changed views' offsets (t.view_offs) and
// shapes in place: a graph reused with the same structure and no larger
// sizes than it was planned with (infer/session.c's single-token graph).
void rg_exec_rebind(rg_exec *ex);
const rg_plan *rg_exec_plan(const rg_exec *ex);
// The device buffer's plan, or NULL when the exec runs on the CPU alone.
const rg_plan *rg_exec_device_plan(const rg_exec *ex);
struct rg_schedule;
const struct rg_schedule *rg_exec_schedule(const rg_exec *ex);

// Bytes in and out of an exec whose tensors may live on a device (on the CPU these are
// plain copies). rg_exec_input: where to write a planned leaf's bytes (created with data NULL) before a run (its
// own bytes on the CPU; host staging uploaded at the next run on a device).
void *rg_exec_input(rg_exec *ex, rg_node *n);
rg_status rg_exec_read(rg_exec *ex, const rg_node *n, void *dst, size_t bytes, rg_error *err);
rg_status rg_exec_write(rg_exec *ex, rg_node *n, const void *src, size_t bytes, rg_error *err);
// Copies every external leaf the device holds (weights, parameters, optimizer state, caches
// given by the caller) back to the caller's host bytes: before a checkpoint is written.
rg_status rg_exec_download_leaves(rg_exec *ex, rg_error *err);
rg_exec_stats rg_exec_get_stats(const rg_exec *ex);
// Adds the time of later runs to p (NULL: stops profiling), as opts.profile does from the start: a
// benchmark profiles one extra step of an exec it timed without, since on a device the profile
// synchronizes after every node.
void rg_exec_set_profile(rg_exec *ex, rg_exec_profile *p);
rg_threadpool *rg_exec_pool(rg_exec *ex);
void rg_exec_free(rg_exec *ex);

#endif
