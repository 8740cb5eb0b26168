// exec_copy.c - the executor's bytes between backends (exec_internal.h): the device side
// of create (buffer, scratch, external leaves uploaded once, staging, mirrors), the
// scheduled copies of a run, the inputs, the node parameters a device kernel reads from
// its memory, and the caller's reads and writes.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "graph/exec_internal.h"
#include "graph/resident.h"

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

// The device side of create: the device buffer and scratch, device copies of the
// external leaves that live there (uploaded once: setup copies), staging for inputs,
// mirrors for the scheduled copies. Refuses, before allocating, a run that does not fit
// the device's free memory, with the numbers.
rg_status rg_ex_create_device(rg_exec *ex, const rg_exec_opts *opts, rg_error *err) {
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

// The scheduled copies of node i, before it (after = false) or after it.
rg_status rg_ex_do_copies(rg_exec *ex, int i, bool after, rg_error *err) {
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

// Before a run: the parameters as the nodes hold them now, uploaded in one copy when any changed.
rg_status rg_ex_params_upload(rg_exec *ex, rg_error *err) {
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

// Device-homed INPUT leaves read by nodes [from, to): their host bytes (the caller's, or
// the staging rg_exec_input handed out) go up before the range runs.
rg_status rg_ex_upload_inputs(rg_exec *ex, int from, int to, rg_error *err) {
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
                used = g->nodes[j]->src[s] && rg_ex_owner(g->nodes[j]->src[s]) == x;
        if (!used) continue;
        const size_t bytes = rg_tensor_span(&x->t);
        rg_status st = ex->dev->vt->upload(ex->dev, x->t.data, src, bytes, err);
        if (st) return st;
        ex->stats.input_copies++, ex->stats.input_bytes += bytes;
    }
    return RG_OK;
}

void *rg_exec_input(rg_exec *ex, rg_node *n) {
    rg_node *o = rg_ex_owner(n);
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
