// exec.c - see exec.h: create (plan, allocate, bind), run node by node (or through a
// backend's fusion hook), free. The device side lives in exec_copy.c, CUDA-graph capture in
// exec_capture.c, the profile and the NaN trace in exec_profile.c (exec_internal.h).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "graph/exec_internal.h"
#include "graph/resident.h"

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

rg_status rg_exec_create(rg_exec **out, rg_graph *g, const rg_exec_opts *opts, rg_error *err) {
    *out = NULL;
    rg_exec *ex = calloc(1, sizeof *ex);
    if (!ex) return rg_fail(err, RG_ERR_NOMEM, "exec: out of memory");
    ex->g = g;
    ex->prof = opts->profile;
    ex->int8_activations = opts->int8_activations;
    ex->bf16_products = opts->bf16_products;
    ex->tiles_cache = opts->tiles_cache;
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
        if (ex->dev) st = rg_ex_create_device(ex, opts, err);
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
        if (n->view_of) n->t.data = (char *)rg_ex_owner(n)->t.data + n->t.view_offs;
        else if (n->offset >= 0) n->t.data = (char *)(n->backend == RG_BACKEND_CPU ? ex->buffer : ex->dbuffer) + n->offset;
    }
}

// Runs node n's kernel on its backend. Sources homed on the other backend are read
// (and, for in-place writers, written) through their mirrors: their data pointers
// point there for the length of the call.
rg_status rg_ex_run_node(rg_exec *ex, rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    rg_backend *b = rg_ex_backend_of(ex, n);
    const rg_op_col cell = rg_ex_cell(ex, n);
    if (!cell.run || (cell.supports && !cell.supports(n)))
        return rg_fail(err, RG_ERR_UNSUPPORTED, "exec: no %s kernel for %s ('%s') with these types",
                       rg_backend_name((rg_backend_id)n->backend), rg_op_defs[n->op].name, n->t.name);
    rg_node *r[RG_MAX_SRC + RG_NODE_MAX_EXTRA_READS];
    void *saved[RG_MAX_SRC + RG_NODE_MAX_EXTRA_READS];
    int k = 0;
    if (ex->dev) {
        k = rg_node_reads(n, r);
        for (int q = 0; q < k; q++) {
            saved[q] = r[q]->t.data;
            rg_node *o = rg_ex_owner(r[q]);
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

rg_status rg_exec_run(rg_exec *ex, int from, int to, rg_error *err) {
    rg_graph *g = ex->g;
    if (to < 0 || to > g->n_nodes) to = g->n_nodes;
    if (from < 0) from = 0;
    rg_exec_ctx ctx = {.pool = ex->pool, .scratch = ex->scratch, .scratch_size = ex->plan.scratch_bytes,
                       .int8_activations = ex->int8_activations, .bf16_products = ex->bf16_products,
                       .tiles_cache = ex->tiles_cache};
    const double t_run = ex->prof ? rg_ex_now_s() : 0;
    ex->loss_node = NULL;  // a run may change any loss
    if (ex->dev) {  // the node parameters, then a captured graph when one serves, else the inputs
        bool done = false;
        rg_status st = rg_ex_params_upload(ex, err);
        if (!st) st = rg_ex_run_graphed(ex, from, to, &done, err);
        if (st || done) return st;
        if ((st = rg_ex_upload_inputs(ex, from, to, err))) return st;
        ex->copy_cursor = 0;
    }
    for (int i = from; i < to; i++) {
        rg_node *n = g->nodes[i];
        const rg_op_def *def = &rg_op_defs[n->op];
        if (n->op == RG_OP_NONE || def->is_view) continue;
        rg_status st;
        const double t0 = ex->prof ? rg_ex_now_s() : 0;
        // The backend's fusion hook (rg_op_col.group), on a run with one backend: several nodes in
        // one call, as the CPU runs products of the same activations in one parallel section.
        const rg_op_col cell = ex->dev ? (rg_op_col){0} : rg_ex_cell(ex, n);
        if (cell.group && cell.run_group) {
            rg_node *grp[RG_GROUP_MAX];
            int last, cnt = cell.group(g, i, to, grp, &last);
            if (cnt > 1) {
                if ((st = cell.run_group(&ctx, grp, cnt, err))) return st;
                if (ex->prof) rg_ex_profile_add(ex->prof, grp, cnt, rg_ex_now_s() - t0);
                ex->stats.nodes_cpu += cnt;  // no device: every node is on the CPU
                i = last;
                continue;
            }
        }
        if (ex->dev && (st = rg_ex_do_copies(ex, i, false, err))) return st;
        st = rg_ex_run_node(ex, &ctx, n, err);
        if (!st && ex->dev) st = rg_ex_do_copies(ex, i, true, err);
        if (st) return st;
        if (ex->prof) {
            if (ex->dev && (st = ex->dev->vt->sync(ex->dev, err))) return st;  // time the node, not its launch
            rg_ex_profile_add(ex->prof, &n, 1, rg_ex_now_s() - t0);
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
                rg_ex_first_non_finite(ex, i, where, sizeof where);
                return rg_fail(err, RG_ERR_NONFINITE, "exec: the loss '%s' is %g; %s", n->t.name, (double)loss, where);
            }
        }
    }
    if (ex->dev) {
        rg_status st = ex->dev->vt->sync(ex->dev, err);
        if (st) return st;
        // External leaves the device wrote (caches, parameters): the resident copy is newer.
        for (int i = from; ex->resident && i < to; i++) {
            rg_node *w[RG_NODE_MAX_WRITES];
            const int kw = rg_node_writes_src(g->nodes[i], w);
            for (int q = 0; q < kw; q++) {
                rg_node *o = rg_ex_owner(w[q]);
                if (o->backend != RG_BACKEND_CPU && ex->host_of[o->id])
                    rg_resident_mark_dirty(ex->resident, ex->host_of[o->id], rg_tensor_span(&o->t));
            }
        }
    }
    if (ex->prof) {
        ex->prof->run_s += rg_ex_now_s() - t_run;
        ex->prof->runs += 1;
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
