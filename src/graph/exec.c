// exec.c - see exec.h.
#include "graph/exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "cpu/cpu_ops.h"
#include "graph/backend.h"
#include "graph/ops.h"
#include "graph/resident.h"
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
    rg_exec_profile *prof;
};

static rg_status params_setup(rg_exec *ex, rg_error *err);

// Grows *p (capacity *cap) to hold `need` bytes, 64-byte aligned; false when out of memory.
static bool mem_reserve(void **p, size_t *cap, size_t need) {
    if (need <= *cap && *p) return true;
    free(*p);
    *cap = 0;
    *p = aligned_alloc(64, (need + 63) / 64 * 64);
    if (*p) *cap = (need + 63) / 64 * 64;
    return *p != NULL;
}

void rg_exec_mem_free(rg_exec_mem *mem) {
    if (!mem) return;
    free(mem->buffer);
    free(mem->scratch);
    memset(mem, 0, sizeof *mem);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double weight_bytes(const rg_node *n) {
    const rg_tensor *w = &n->src[0]->t;
    return (double)rg_tensor_row_size(w) * (double)(rg_tensor_nelements(w) / (w->ne[0] > 0 ? w->ne[0] : 1));
}

// Adds the seconds `dt` of nodes grp[0..cnt) (one parallel section) to the profile.
static void profile_add(rg_exec_profile *p, rg_node *const *grp, int cnt, double dt) {
    if (grp[0]->op != RG_OP_MUL_MAT) {
        p->op_s[grp[0]->op] += dt;
        p->op_n[grp[0]->op] += 1;
        return;
    }
    double total = 0;
    for (int q = 0; q < cnt; q++) total += weight_bytes(grp[q]);
    for (int q = 0; q < cnt; q++) {
        const double share = total > 0 ? dt * weight_bytes(grp[q]) / total : dt / cnt;
        const uint32_t ty = grp[q]->src[0]->t.type;
        p->op_s[RG_OP_MUL_MAT] += share;
        p->op_n[RG_OP_MUL_MAT] += 1;
        if (ty < RG_TYPE_COUNT) {
            p->mm_s[ty] += share;
            p->mm_n[ty] += 1;
            p->mm_bytes[ty] += weight_bytes(grp[q]);
        }
    }
}

void rg_exec_profile_print(const rg_exec_profile *p, FILE *f) {
    const double runs = p->runs > 0 ? (double)p->runs : 1.0;
    double nodes_s = 0;
    for (int o = 0; o < RG_OP_COUNT; o++) nodes_s += p->op_s[o];
    fprintf(f, "profile: %lld runs, %.3f ms per run, %.3f ms of it in nodes\n", (long long)p->runs, 1e3 * p->run_s / runs,
            1e3 * nodes_s / runs);
    bool done[RG_OP_COUNT] = {false};
    for (;;) {  // ops by decreasing time
        int best = -1;
        for (int o = 0; o < RG_OP_COUNT; o++)
            if (!done[o] && p->op_n[o] && (best < 0 || p->op_s[o] > p->op_s[best])) best = o;
        if (best < 0) break;
        done[best] = true;
        fprintf(f, "  %-18s %6.0f nodes %8.3f ms %5.1f%%\n", rg_op_defs[best].name, p->op_n[best] / runs,
                1e3 * p->op_s[best] / runs, p->run_s > 0 ? 100 * p->op_s[best] / p->run_s : 0.0);
    }
    for (int t = 0; t < RG_TYPE_COUNT; t++) {
        if (!p->mm_n[t]) continue;
        const double s = p->mm_s[t] / runs, mb = p->mm_bytes[t] / runs / 1e6;
        fprintf(f, "  MUL_MAT %-10s %6.0f nodes %8.3f ms %7.2f MB %6.2f GB/s\n", rg_type_get((uint32_t)t)->name,
                p->mm_n[t] / runs, 1e3 * s, mb, s > 0 ? mb / 1e3 / s : 0.0);
    }
}

static rg_node *owner(rg_node *n) { return n->view_of ? n->view_of : n; }

static rg_backend *backend_of(const rg_exec *ex, const rg_node *n) {
    return n->backend == RG_BACKEND_CPU || !ex->dev ? rg_backend_cpu() : ex->dev;
}

static double mib(size_t b) { return (double)b / 1048576.0; }

// "812 B", "3.2 KiB", "45.10 MiB", "2.31 GiB": sizes in messages, readable at any scale.
typedef struct size_str {
    char s[32];
} size_str;
static size_str human(size_t b) {
    size_str r;
    if (b < 1024) snprintf(r.s, sizeof r.s, "%zu B", b);
    else if (b < ((size_t)1 << 20)) snprintf(r.s, sizeof r.s, "%.1f KiB", (double)b / 1024.0);
    else if (b < ((size_t)1 << 30)) snprintf(r.s, sizeof r.s, "%.2f MiB", mib(b));
    else snprintf(r.s, sizeof r.s, "%.2f GiB", (double)b / 1073741824.0);
    return r;
}

// The device side of create: the device buffer and scratch, device copies of the
// external leaves that live there (uploaded once: setup copies), staging for inputs,
// mirrors for the scheduled copies. Refuses, before allocating, a run that does not fit
// the device's free memory, with the numbers.
static rg_status create_device(rg_exec *ex, const rg_exec_opts *opts, rg_error *err) {
    rg_graph *g = ex->g;
    const int n = g->n_nodes;
    rg_status st = rg_graph_plan_backend(g, ex->dev->vt->id, 1, 0, &ex->dplan, err);
    if (st) return st;
    ex->mirror = calloc((size_t)n, sizeof(void *));
    ex->host_of = calloc((size_t)n, sizeof(void *));
    ex->staging = calloc((size_t)n, sizeof(void *));
    ex->dev_own = calloc((size_t)n, sizeof(void *));
    ex->dev_of = calloc((size_t)n, sizeof(void *));
    if (!ex->mirror || !ex->host_of || !ex->staging || !ex->dev_own || !ex->dev_of)
        return rg_fail(err, RG_ERR_NOMEM, "exec: out of memory");
    // What the device must hold: its buffer and scratch, the external leaves homed there
    // (weights, parameters), and the mirrors of tensors homed on the CPU.
    size_t weights = 0, params = 0, mirrors_dev = 0;
    for (int i = 0; i < n; i++) {
        rg_node *x = g->nodes[i];
        if (x->view_of || x->backend != (int)ex->dev->vt->id || x->op != RG_OP_NONE || x->offset >= 0) continue;
        if (x->flags & RG_NODE_PARAM) params += rg_tensor_span(&x->t);
        else weights += rg_tensor_span(&x->t);
    }
    for (int c = 0; c < ex->sched.n_copies; c++) {
        const rg_node *o = ex->sched.copies[c].t;
        if (o->backend == RG_BACKEND_CPU && !ex->sched.copies[c].to_home) mirrors_dev += rg_tensor_span(&o->t);
    }
    const size_t need = ex->dplan.buffer_bytes + ex->dplan.scratch_bytes + weights + params + mirrors_dev;
    size_t free_b = 0, total_b = 0;
    if (ex->dev->vt->mem_info && ex->dev->vt->mem_info(ex->dev, &free_b, &total_b, err) == RG_OK &&
        (need > free_b || (opts->budget && need > opts->budget))) {
        const size_t limit = opts->budget && opts->budget < free_b ? opts->budget : free_b;
        return rg_fail(err, RG_ERR_NOMEM,
                       "exec: the run needs %s on %s but %s %s (of %s): weights %s, parameters %s, gradients %s, "
                       "other activations and optimizer state %s, scratch %s, copies of CPU tensors %s. Next levers: "
                       "training.recompute, a shorter context, LoRA instead of full fine-tuning",
                       human(need).s, ex->dev->label, human(limit).s, limit == free_b ? "are free" : "is the budget",
                       human(total_b).s, human(weights).s, human(params).s, human(ex->dplan.grad_bytes).s,
                       human(ex->dplan.buffer_bytes - ex->dplan.grad_bytes).s, human(ex->dplan.scratch_bytes).s,
                       human(mirrors_dev).s);
    }
    rg_backend *d = ex->dev;
    st = d->vt->alloc(d, ex->dplan.buffer_bytes ? ex->dplan.buffer_bytes : 64, &ex->dbuffer, err);
    if (!st && ex->dplan.scratch_bytes) st = d->vt->alloc(d, ex->dplan.scratch_bytes, &ex->dscratch, err);
    if (!st) st = params_setup(ex, err);
    for (int i = 0; i < n && !st; i++) {
        rg_node *x = g->nodes[i];
        if (x->view_of || x->backend != (int)d->vt->id) continue;
        if (x->offset >= 0) {
            x->t.data = (char *)ex->dbuffer + x->offset;
            if (x->op == RG_OP_NONE) {
                st = d->vt->zero(d, x->t.data, rg_tensor_span(&x->t), err);
                if (!st && (x->flags & RG_NODE_INPUT)) {
                    ex->staging[i] = calloc(1, rg_tensor_span(&x->t) ? rg_tensor_span(&x->t) : 1);
                    if (!ex->staging[i]) st = rg_fail(err, RG_ERR_NOMEM, "exec: out of memory");
                }
            }
        } else if (x->op == RG_OP_NONE) {  // external: a device copy, uploaded once
            const size_t bytes = rg_tensor_span(&x->t);
            ex->host_of[i] = x->t.data;
            bool fresh = true;
            if (ex->resident) st = rg_resident_get(ex->resident, x->t.data, bytes, &ex->dev_of[i], &fresh, err);
            else if (!(st = d->vt->alloc(d, bytes ? bytes : 1, &ex->dev_own[i], err))) ex->dev_of[i] = ex->dev_own[i];
            if (!st && fresh && x->t.data && bytes) {
                st = d->vt->upload(d, ex->dev_of[i], x->t.data, bytes, err);
                ex->stats.setup_copies++, ex->stats.setup_bytes += bytes;
            }
            if (!st) x->t.data = ex->dev_of[i];
        }
    }
    for (int c = 0; c < ex->sched.n_copies && !st; c++) {
        const rg_node *o = ex->sched.copies[c].t;
        if (ex->mirror[o->id]) continue;
        const size_t bytes = rg_tensor_span(&o->t) ? rg_tensor_span(&o->t) : 1;
        st = o->backend == RG_BACKEND_CPU ? d->vt->alloc(d, bytes, &ex->mirror[o->id], err)
                                          : rg_backend_cpu()->vt->alloc(rg_backend_cpu(), bytes, &ex->mirror[o->id], err);
    }
    if (!st) st = d->vt->sync(d, err);
    return st;
}

rg_status rg_exec_create(rg_exec **out, rg_graph *g, const rg_exec_opts *opts, rg_error *err) {
    *out = NULL;
    rg_exec *ex = calloc(1, sizeof *ex);
    if (!ex) return rg_fail(err, RG_ERR_NOMEM, "exec: out of memory");
    ex->g = g;
    ex->prof = opts->profile;
    ex->int8_activations = opts->int8_activations;
    rg_status st = rg_graph_error(g, err);
    if (!st && opts->pool) ex->pool = opts->pool;
    else if (!st) {
        st = rg_threadpool_create(&ex->pool, opts->n_threads, err);
        ex->own_pool = true;
    }
    ex->resident = opts->resident;
    const char *graphs_env = getenv("RETRO_CUDA_GRAPHS");
    ex->graphs = graphs_env && !strcmp(graphs_env, "1");
    if (!st && opts->backend) ex->dev = opts->backend;
    else if (!st && opts->device == RG_DEVICE_CUDA) {
        st = rg_backend_cuda_create(&ex->dev, 0, err);
        ex->own_dev = !st;
    }
    if (ex->dev && ex->dev->host_memory && ex->dev->vt->id == RG_BACKEND_CPU) ex->dev = NULL;  // the CPU itself
    if (!st) {
        st = ex->dev ? rg_schedule_build(g, ex->dev->vt->id, ex->dev->vt->cell, ex->resident ? rg_resident_pins : NULL,
                                         ex->resident, &ex->sched, err)
                     : rg_schedule_build(g, RG_BACKEND_CPU, NULL, NULL, NULL, &ex->sched, err);
    }
    if (!st && ex->dev) st = rg_schedule_check_resident(g, &ex->sched, opts->require_resident, err);
    if (!st && opts->plan && !ex->dev && !opts->budget) ex->plan = *opts->plan;  // planned by the caller
    else if (!st) st = rg_graph_plan(g, rg_threadpool_size(ex->pool), ex->dev ? 0 : opts->budget, &ex->plan, err);
    if (!st && opts->mem) {
        rg_exec_mem *mem = opts->mem;
        bool ok = mem_reserve(&mem->buffer, &mem->buffer_cap, ex->plan.buffer_bytes ? ex->plan.buffer_bytes : 64) &&
                  (!ex->plan.scratch_bytes || mem_reserve(&mem->scratch, &mem->scratch_cap, ex->plan.scratch_bytes));
        ex->buffer = mem->buffer;
        ex->scratch = ex->plan.scratch_bytes ? mem->scratch : NULL;
        if (!ok)
            st = rg_fail(err, RG_ERR_NOMEM, "exec: cannot allocate the %.2f MiB the plan needs",
                         (ex->plan.buffer_bytes + ex->plan.scratch_bytes) / 1048576.0);
    } else if (!st) {
        ex->own_mem = true;
        ex->buffer = aligned_alloc(64, ex->plan.buffer_bytes ? (ex->plan.buffer_bytes + 63) / 64 * 64 : 64);
        ex->scratch = ex->plan.scratch_bytes ? aligned_alloc(64, (ex->plan.scratch_bytes + 63) / 64 * 64) : NULL;
        if (!ex->buffer || (ex->plan.scratch_bytes && !ex->scratch))
            st = rg_fail(err, RG_ERR_NOMEM, "exec: cannot allocate the %.2f MiB the plan needs",
                         (ex->plan.buffer_bytes + ex->plan.scratch_bytes) / 1048576.0);
    }
    if (!st) {
        // Host-homed nodes first (create_device reads the leaves' host bytes for the uploads).
        for (int i = 0; i < g->n_nodes; i++) {
            rg_node *n = g->nodes[i];
            if (!n->view_of && n->backend == RG_BACKEND_CPU && n->offset >= 0) n->t.data = (char *)ex->buffer + n->offset;
        }
        if (ex->dev) st = create_device(ex, opts, err);
    }
    if (st) {
        rg_exec_free(ex);
        return st;
    }
    rg_exec_rebind(ex);
    // Leaves allocated in the host buffer start as zeros, not as what a previous node left.
    for (int i = 0; i < g->n_nodes; i++) {
        rg_node *n = g->nodes[i];
        if (n->op == RG_OP_NONE && n->offset >= 0 && n->backend == RG_BACKEND_CPU)
            memset(n->t.data, 0, rg_tensor_span(&n->t));
    }
    *out = ex;
    return RG_OK;
}

// Bind: planned nodes in the buffer, views and aliases on their owner (owners come first).
void rg_exec_rebind(rg_exec *ex) {
    rg_graph *g = ex->g;
    for (int i = 0; i < g->n_nodes; i++) {
        rg_node *n = g->nodes[i];
        if (n->view_of) n->t.data = (char *)owner(n)->t.data + n->t.view_offs;
        else if (n->offset >= 0) n->t.data = (char *)(n->backend == RG_BACKEND_CPU ? ex->buffer : ex->dbuffer) + n->offset;
    }
}

// The scheduled copies of node i, before it (after = false) or after it.
static rg_status do_copies(rg_exec *ex, int i, bool after, rg_error *err) {
    rg_sched_copy *c = ex->sched.copies;
    int k = ex->copy_cursor;
    // Runs move forward, but a caller may run a range again: find the copies of node i.
    if (k >= ex->sched.n_copies || c[k].at > i || (c[k].at == i && c[k].after && !after)) k = 0;
    while (k < ex->sched.n_copies && (c[k].at < i || (c[k].at == i && !after && c[k].after) ||
                                       (c[k].at == i && after && !c[k].after)))
        k++;
    for (; k < ex->sched.n_copies && c[k].at == i && c[k].after == after; k++) {
        rg_node *o = c[k].t;
        const size_t bytes = rg_tensor_span(&o->t);
        void *home = o->t.data, *mir = ex->mirror[o->id];
        const bool home_cpu = o->backend == RG_BACKEND_CPU;
        void *dst = c[k].to_home ? home : mir;
        const void *src = c[k].to_home ? mir : home;
        // Host -> device when the bytes go to the device side, device -> host otherwise.
        const bool to_device = c[k].to_home ? !home_cpu : home_cpu;
        rg_status st = to_device ? ex->dev->vt->upload(ex->dev, dst, src, bytes, err)
                                 : ex->dev->vt->download(ex->dev, dst, src, bytes, err);
        if (st) return st;
        if (to_device) ex->stats.copies_to_device++, ex->stats.bytes_to_device += bytes;
        else ex->stats.copies_to_host++, ex->stats.bytes_to_host += bytes;
    }
    ex->copy_cursor = k;
    return RG_OK;
}

// Runs node n's kernel on its backend. Sources homed on the other backend are read
// (and, for in-place writers, written) through their mirrors: their data pointers
// point there for the length of the call.
// The device-read parameters (rg_op_col.device_params): a slot for each node on the device
// whose cell reads its fp/ip from device memory.
static rg_status params_setup(rg_exec *ex, rg_error *err) {
    rg_graph *g = ex->g;
    ex->param_slot = malloc(sizeof(int) * (size_t)(g->n_nodes ? g->n_nodes : 1));
    if (!ex->param_slot) return rg_fail(err, RG_ERR_NOMEM, "exec: out of memory");
    for (int i = 0; i < g->n_nodes; i++) {
        const rg_node *n = g->nodes[i];
        ex->param_slot[i] = -1;
        if (n->op == RG_OP_NONE || rg_op_defs[n->op].is_view || n->backend != (int)ex->dev->vt->id) continue;
        if (ex->dev->vt->cell(n->op).device_params) ex->param_slot[i] = ex->n_params++;
    }
    if (!ex->n_params) return RG_OK;
    ex->params_sent = calloc((size_t)ex->n_params, sizeof *ex->params_sent);
    if (!ex->params_sent) return rg_fail(err, RG_ERR_NOMEM, "exec: out of memory");
    return ex->dev->vt->alloc(ex->dev, sizeof(rg_node_params) * (size_t)ex->n_params, &ex->params_dev, err);
}

// Before a run: the parameters as the nodes hold them now, uploaded in one copy when any changed.
static rg_status params_upload(rg_exec *ex, rg_error *err) {
    if (!ex->n_params) return RG_OK;
    bool changed = !ex->params_valid;
    for (int i = 0; i < ex->g->n_nodes; i++) {
        const int k = ex->param_slot[i];
        if (k < 0) continue;
        const rg_node *n = ex->g->nodes[i];
        rg_node_params p;
        memset(&p, 0, sizeof p);
        memcpy(p.ip, n->ip, sizeof p.ip), memcpy(p.fp, n->fp, sizeof p.fp);
        const rg_op_col cell = ex->dev->vt->cell(n->op);
        if (cell.geometry) cell.geometry(n, p.geom);
        if (memcmp(&p, &ex->params_sent[k], sizeof p)) ex->params_sent[k] = p, changed = true;
    }
    if (!changed) return RG_OK;
    const size_t bytes = sizeof(rg_node_params) * (size_t)ex->n_params;
    rg_status st = ex->dev->vt->upload(ex->dev, ex->params_dev, ex->params_sent, bytes, err);
    if (st) return st;
    ex->params_valid = true;
    ex->stats.param_copies++, ex->stats.param_bytes += bytes;
    return RG_OK;
}

static rg_status run_node(rg_exec *ex, rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    rg_backend *b = backend_of(ex, n);
    const rg_op_col cell = b == rg_backend_cpu() ? rg_op_cell(RG_BACKEND_CPU, n->op) : b->vt->cell(n->op);
    if (!cell.run || (cell.supports && !cell.supports(n)))
        return rg_fail(err, RG_ERR_UNSUPPORTED, "exec: no %s kernel for %s ('%s') with these types",
                       rg_backend_name((rg_backend_id)n->backend), rg_op_defs[n->op].name, n->t.name);
    rg_node *r[RG_MAX_SRC + 2];
    void *saved[RG_MAX_SRC + 2];
    int k = 0;
    if (ex->dev) {
        k = rg_node_reads(n, r);
        for (int q = 0; q < k; q++) {
            saved[q] = r[q]->t.data;
            rg_node *o = owner(r[q]);
            if (o->backend != n->backend && ex->mirror[o->id])
                r[q]->t.data = (char *)ex->mirror[o->id] + (r[q] == o ? 0 : r[q]->t.view_offs);
        }
    }
    // A node that writes into another node's bytes (CPY_INTO's window, the optimizer's
    // parameter) and runs away from that tensor's home writes its mirror.
    void *saved_out = n->t.data;
    if (ex->dev && n->view_of && n->view_of->backend != n->backend && ex->mirror[n->view_of->id])
        n->t.data = (char *)ex->mirror[n->view_of->id] + n->t.view_offs;
    rg_exec_ctx c = *ctx;
    c.backend = b == rg_backend_cpu() ? NULL : b;
    if (c.backend) c.scratch = ex->dscratch, c.scratch_size = ex->dplan.scratch_bytes;
    c.params = NULL;
    if (c.backend && ex->param_slot && ex->param_slot[n->id] >= 0)
        c.params = (const rg_node_params *)ex->params_dev + ex->param_slot[n->id];
    rg_status st = cell.run(&c, n, err);
    n->t.data = saved_out;
    for (int q = k - 1; q >= 0; q--) r[q]->t.data = saved[q];
    if (n->backend == RG_BACKEND_CPU) ex->stats.nodes_cpu++;
    else ex->stats.nodes_gpu++;
    return st;
}

// A node's output in host memory (a temporary copy for device-homed nodes): NULL when
// it cannot be read (not F32, not contiguous, no bytes).
static const float *host_values(rg_exec *ex, const rg_node *n, float **tmp) {
    *tmp = NULL;
    if (n->t.type != RG_TYPE_F32 || !rg_tensor_is_contiguous(&n->t) || !n->t.data) return NULL;
    if (n->backend == RG_BACKEND_CPU || !ex->dev) return n->t.data;
    const size_t bytes = rg_tensor_span(&n->t);
    rg_error e;
    *tmp = malloc(bytes ? bytes : 1);
    if (!*tmp || ex->dev->vt->download(ex->dev, *tmp, n->t.data, bytes, &e)) return NULL;
    return *tmp;
}

// The planner reuses bytes, so by the time the loss is seen the culprit's
// output may be gone. The graph is deterministic: run it again from the
// start, checking each node's output right after its kernel.
static void first_non_finite(rg_exec *ex, int upto, char *buf, size_t cap) {
    rg_graph *g = ex->g;
    rg_exec_ctx ctx = {ex->pool, ex->scratch, ex->plan.scratch_bytes, ex->int8_activations, NULL, NULL};
    rg_error ignored;
    ex->copy_cursor = 0;
    for (int i = 0; i <= upto; i++) {
        rg_node *n = g->nodes[i];
        const rg_op_def *def = &rg_op_defs[n->op];
        if (def->is_view) continue;
        if (n->op != RG_OP_NONE) {  // leaves run nothing, but a caller's NaN input is named too
            if (ex->dev && do_copies(ex, i, false, &ignored)) break;
            if (run_node(ex, &ctx, n, &ignored) != RG_OK) break;
            if (ex->dev && do_copies(ex, i, true, &ignored)) break;
        }
        float *tmp;
        const float *v = host_values(ex, n, &tmp);
        const int64_t count = rg_tensor_nelements(&n->t);
        int64_t k = 0;
        while (v && k < count && isfinite(v[k])) k++;
        if (v && k < count) {
            snprintf(buf, cap, "first non-finite value: node %d '%s' (%s, on the %s) element %lld = %g", i, n->t.name,
                     rg_op_name(n->op), rg_backend_name((rg_backend_id)n->backend), (long long)k, (double)v[k]);
            free(tmp);
            return;
        }
        free(tmp);
    }
    snprintf(buf, cap, "no node before it holds a non-finite value");
}

// MUL_MAT nodes after node i (up to `to`, views and leaves between them
// skipped: they run nothing) that read the same src[1] and no output of the
// group: q, k and v of a layer, gate and up. Returns the count (1: none
// follow) and the index of the last one.
#define GROUP_MAX 8
static int mul_mat_group(rg_graph *g, int i, int to, rg_node **grp, int *last) {
    rg_node *n = g->nodes[i];
    int cnt = 0;
    grp[cnt++] = n;
    *last = i;
    for (int k = i + 1; k < to && cnt < GROUP_MAX; k++) {
        rg_node *m = g->nodes[k];
        if (m->op == RG_OP_NONE || rg_op_defs[m->op].is_view) continue;
        if (m->op != RG_OP_MUL_MAT || m->src[1] != n->src[1] || (m->flags & RG_NODE_LOSS)) break;
        bool reads_group = false;
        for (int q = 0; q < cnt; q++)
            if (owner(m->src[0]) == grp[q] || owner(m->src[1]) == grp[q]) reads_group = true;
        if (reads_group) break;
        grp[cnt++] = m;
        *last = k;
    }
    return cnt;
}

// Device-homed INPUT leaves read by nodes [from, to): their host bytes (the caller's, or
// the staging rg_exec_input handed out) go up before the range runs.
static rg_status upload_inputs(rg_exec *ex, int from, int to, rg_error *err) {
    rg_graph *g = ex->g;
    for (int i = 0; i < g->n_nodes; i++) {
        rg_node *x = g->nodes[i];
        // Only the leaves the exec gave bytes (tokens, labels, masks): external leaves (weights,
        // parameters, caches) went up once and change through rg_exec_write.
        if (x->op != RG_OP_NONE || x->view_of || x->backend == RG_BACKEND_CPU || !ex->staging[i]) continue;
        const void *src = ex->staging[i];
        // Read in this range? (inputs are few; the scan is over the range's sources)
        bool used = false;
        for (int j = from; j < to && !used; j++)
            for (int s = 0; s < RG_MAX_SRC && !used; s++)
                used = g->nodes[j]->src[s] && owner(g->nodes[j]->src[s]) == x;
        if (!used) continue;
        const size_t bytes = rg_tensor_span(&x->t);
        rg_status st = ex->dev->vt->upload(ex->dev, x->t.data, src, bytes, err);
        if (st) return st;
        ex->stats.input_copies++, ex->stats.input_bytes += bytes;
    }
    return RG_OK;
}

// ---------------------------------------------------------------------------
// CUDA Graphs (RETRO_CUDA_GRAPHS=1). A graph replays kernel launches with the arguments they
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
            first_non_finite(ex, i, where, sizeof where);
            return rg_fail(err, RG_ERR_NONFINITE, "exec: the loss '%s' is %g; %s", n->t.name, (double)loss, where);
        }
    }
    return RG_OK;
}

// A resident run of nodes [from, to) through a CUDA graph; *done = false when it must run node
// by node (the first run with these parameters, or no free slot for the range).
static rg_status run_graphed(rg_exec *ex, int from, int to, bool *done, rg_error *err) {
    *done = false;
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
        rg_exec_ctx ctx = {ex->pool, ex->scratch, ex->plan.scratch_bytes, ex->int8_activations, NULL, NULL};
        for (int i = from; i < to && !st; i++) {
            rg_node *n = ex->g->nodes[i];
            if (n->op == RG_OP_NONE || rg_op_defs[n->op].is_view) continue;
            st = run_node(ex, &ctx, n, err);
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
    if ((st = upload_inputs(ex, from, to, err)) || (st = d->vt->graph_launch(d, gs->graph, err)) ||
        (st = d->vt->sync(d, err)))
        return st;
    ex->stats.graph_launches++;
    *done = true;
    return check_losses(ex, from, to, err);
}

rg_status rg_exec_run(rg_exec *ex, int from, int to, rg_error *err) {
    rg_graph *g = ex->g;
    if (to < 0 || to > g->n_nodes) to = g->n_nodes;
    if (from < 0) from = 0;
    rg_exec_ctx ctx = {ex->pool, ex->scratch, ex->plan.scratch_bytes, ex->int8_activations, NULL, NULL};
    const double t_run = ex->prof ? now_s() : 0;
    ex->loss_node = NULL;  // a run may change any loss
    if (ex->dev) {
        rg_status st = params_upload(ex, err);
        if (st) return st;
    }
    if (can_graph(ex, from, to)) {
        bool done;
        rg_status st = run_graphed(ex, from, to, &done, err);
        if (st || done) return st;
    }
    if (ex->dev) {
        rg_status st = upload_inputs(ex, from, to, err);
        if (st) return st;
        ex->copy_cursor = 0;
    }
    for (int i = from; i < to; i++) {
        rg_node *n = g->nodes[i];
        const rg_op_def *def = &rg_op_defs[n->op];
        if (n->op == RG_OP_NONE || def->is_view) continue;
        rg_status st;
        const double t0 = ex->prof ? now_s() : 0;
        if (n->op == RG_OP_MUL_MAT && n->backend == RG_BACKEND_CPU && !ex->dev && !(n->flags & RG_NODE_LOSS)) {
            // Several products of the same activations: one parallel section (ops_matmul.c).
            rg_node *grp[GROUP_MAX];
            int last, cnt = mul_mat_group(g, i, to, grp, &last);
            if (cnt > 1) {
                st = cpu_mul_mat_many(&ctx, grp, cnt, err);
                if (st) return st;
                if (ex->prof) profile_add(ex->prof, grp, cnt, now_s() - t0);
                ex->stats.nodes_cpu += cnt;
                i = last;
                continue;
            }
        }
        if (ex->dev && (st = do_copies(ex, i, false, err))) return st;
        st = run_node(ex, &ctx, n, err);
        if (!st && ex->dev) st = do_copies(ex, i, true, err);
        if (st) return st;
        if (ex->prof) {
            if (ex->dev && (st = ex->dev->vt->sync(ex->dev, err))) return st;  // time the node, not its launch
            profile_add(ex->prof, &n, 1, now_s() - t0);
        }
        if (n->flags & RG_NODE_LOSS) {
            float loss;
            if (n->backend == RG_BACKEND_CPU || !ex->dev) loss = *(const float *)n->t.data;
            else {
                if ((st = ex->dev->vt->download(ex->dev, &loss, n->t.data, sizeof loss, err))) return st;
                ex->stats.output_copies++, ex->stats.output_bytes += sizeof loss;
                ex->loss_node = n, ex->loss_value = loss;
            }
            if (!isfinite(loss)) {
                char where[256];
                first_non_finite(ex, i, where, sizeof where);
                return rg_fail(err, RG_ERR_NONFINITE, "exec: the loss '%s' is %g; %s", n->t.name, (double)loss, where);
            }
        }
    }
    if (ex->dev) {
        rg_status st = ex->dev->vt->sync(ex->dev, err);
        if (st) return st;
        // External leaves the device wrote (caches, parameters): the resident copy is newer.
        for (int i = from; ex->resident && i < to; i++) {
            rg_node *w[4];
            const int kw = rg_node_writes_src(g->nodes[i], w);
            for (int q = 0; q < kw; q++) {
                rg_node *o = owner(w[q]);
                if (o->backend != RG_BACKEND_CPU && ex->host_of[o->id])
                    rg_resident_mark_dirty(ex->resident, ex->host_of[o->id], rg_tensor_span(&o->t));
            }
        }
    }
    if (ex->prof) {
        ex->prof->run_s += now_s() - t_run;
        ex->prof->runs += 1;
    }
    return RG_OK;
}

void *rg_exec_input(rg_exec *ex, rg_node *n) {
    rg_node *o = owner(n);
    if (!ex->dev || o->backend == RG_BACKEND_CPU) return n->t.data;
    // A planned leaf: its staging (uploaded at every run that reads it). An external leaf
    // lives on the device after create: NULL (change it with rg_exec_write).
    void *host = ex->staging[o->id];
    return host ? (char *)host + (n == o ? 0 : n->t.view_offs) : NULL;
}

rg_status rg_exec_read(rg_exec *ex, const rg_node *n, void *dst, size_t bytes, rg_error *err) {
    if (bytes > rg_tensor_span(&n->t))
        return rg_fail(err, RG_ERR_ARG, "exec: reading %zu bytes of '%s', which spans %zu", bytes, n->t.name,
                       rg_tensor_span(&n->t));
    if (!n->t.data) return rg_fail(err, RG_ERR_ARG, "exec: '%s' has no bytes bound", n->t.name);
    if (!ex->dev || n->backend == RG_BACKEND_CPU) {
        memcpy(dst, n->t.data, bytes);
        return RG_OK;
    }
    if (n == ex->loss_node && bytes == sizeof ex->loss_value) {  // downloaded by this run's loss check
        memcpy(dst, &ex->loss_value, bytes);
        return RG_OK;
    }
    rg_status st = ex->dev->vt->download(ex->dev, dst, n->t.data, bytes, err);
    if (!st) ex->stats.output_copies++, ex->stats.output_bytes += bytes;
    return st;
}

rg_status rg_exec_write(rg_exec *ex, rg_node *n, const void *src, size_t bytes, rg_error *err) {
    if (bytes > rg_tensor_span(&n->t))
        return rg_fail(err, RG_ERR_ARG, "exec: writing %zu bytes into '%s', which spans %zu", bytes, n->t.name,
                       rg_tensor_span(&n->t));
    if (!n->t.data) return rg_fail(err, RG_ERR_ARG, "exec: '%s' has no bytes bound", n->t.name);
    if (!ex->dev || n->backend == RG_BACKEND_CPU) {
        memcpy(n->t.data, src, bytes);
        return RG_OK;
    }
    rg_status st = ex->dev->vt->upload(ex->dev, n->t.data, src, bytes, err);
    if (!st) st = ex->dev->vt->sync(ex->dev, err);
    if (!st) ex->stats.input_copies++, ex->stats.input_bytes += bytes;
    return st;
}

rg_status rg_exec_download_leaves(rg_exec *ex, rg_error *err) {
    if (!ex->dev) return RG_OK;
    for (int i = 0; i < ex->g->n_nodes; i++) {
        rg_node *x = ex->g->nodes[i];
        if (!ex->host_of[i] || !ex->dev_of[i]) continue;
        rg_status st = ex->dev->vt->download(ex->dev, ex->host_of[i], ex->dev_of[i], rg_tensor_span(&x->t), err);
        if (st) return st;
        ex->stats.output_copies++, ex->stats.output_bytes += rg_tensor_span(&x->t);
    }
    return RG_OK;
}

const rg_schedule *rg_exec_schedule(const rg_exec *ex) { return &ex->sched; }
const rg_plan *rg_exec_device_plan(const rg_exec *ex) { return ex->dev ? &ex->dplan : NULL; }

const rg_plan *rg_exec_plan(const rg_exec *ex) { return &ex->plan; }
rg_threadpool *rg_exec_pool(rg_exec *ex) { return ex->pool; }

void rg_exec_set_profile(rg_exec *ex, rg_exec_profile *p) { ex->prof = p; }

rg_exec_stats rg_exec_get_stats(const rg_exec *ex) {
    rg_exec_stats s = ex->stats;
    s.nodes_fallback = ex->sched.n_fallback;
    s.copies_scheduled = ex->sched.n_copies;
    return s;
}

void rg_exec_free(rg_exec *ex) {
    if (!ex) return;
    if (ex->dev) {
        rg_error ignored;
        ex->dev->vt->sync(ex->dev, &ignored);
        rg_graph *g = ex->g;
        for (int i = 0; i < g->n_nodes; i++) {
            rg_node *x = g->nodes[i];
            if (ex->mirror && ex->mirror[i]) {
                if (x->backend == RG_BACKEND_CPU) ex->dev->vt->release(ex->dev, ex->mirror[i]);
                else free(ex->mirror[i]);
            }
            if (ex->dev_own && ex->dev_own[i]) ex->dev->vt->release(ex->dev, ex->dev_own[i]);
            if (ex->host_of && ex->dev_of && ex->dev_of[i]) x->t.data = ex->host_of[i];  // the caller's bytes again
            else if (x->backend != RG_BACKEND_CPU && !x->view_of && x->offset >= 0) x->t.data = NULL;
            if (ex->staging) free(ex->staging[i]);
        }
        for (int i = 0; i < g->n_nodes; i++)
            if (g->nodes[i]->view_of && g->nodes[i]->view_of->t.data)
                g->nodes[i]->t.data = (char *)g->nodes[i]->view_of->t.data + g->nodes[i]->t.view_offs;
        for (size_t k = 0; k < sizeof ex->gslot / sizeof ex->gslot[0]; k++)
            if (ex->gslot[k].graph) ex->dev->vt->graph_free(ex->dev, ex->gslot[k].graph);
        if (ex->dbuffer) ex->dev->vt->release(ex->dev, ex->dbuffer);
        if (ex->dscratch) ex->dev->vt->release(ex->dev, ex->dscratch);
        if (ex->params_dev) ex->dev->vt->release(ex->dev, ex->params_dev);
        if (ex->own_dev) rg_backend_free(ex->dev);
    }
    free(ex->mirror), free(ex->host_of), free(ex->staging), free(ex->dev_own), free(ex->dev_of);
    free(ex->param_slot), free(ex->params_sent);
    rg_schedule_free(&ex->sched);
    if (ex->own_pool) rg_threadpool_free(ex->pool);
    if (ex->own_mem) {
        free(ex->buffer);
        free(ex->scratch);
    }
    free(ex);
}
