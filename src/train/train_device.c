// train_device.c - a training run whose tensors live on a device (train_state.h).
//
// The step graph runs on the device with the parameters, the gradient accumulators and the
// optimizer state as device copies shared by two execs (graph/exec.h's rg_resident):
//   - the step graph: forward, loss, backward, then acc_k = acc_k + grad_k for every
//     trainable tensor (ADD, CPY_INTO into the accumulator leaf), so a row leaves its
//     gradient summed on the device;
//   - the optimizer graph, run in three segments per optimizer step:
//       [0, norms)     the squared norm of every accumulator (SUM(MUL(acc, acc))), read back:
//                      n_tensors floats, from which the host forms the global norm, the clip
//                      coefficient and the scheduled learning rate (training.md §1.4-1.5);
//       [norms, upd)   ADAMW / SGD on every tensor with those scalars in the nodes' fp[];
//       [upd, end)     the accumulators zeroed (CPY_INTO of a FILL) for the next step.
// A step thus moves the rows' tokens, labels, positions and masks in, and the loss and the
// per-tensor squared norms out; nothing else crosses. Checkpoints download the device copies
// first (rg_train_state_sync_host); a resumed run uploads what it loaded
// (rg_train_state_refresh_device).
//
// The global norm differs from the CPU's in its summation (f32 per-tensor SUMs added in
// double on the host, against the CPU's double blocks), so runs agree with the CPU's within
// roundoff, not bit for bit. F16/BF16 weights are stored back by the same stochastic
// rounding (keyed by seed, step, tensor id, element) or master-weight RNE as the host step,
// so given the same gradients the stored weights are the same bits. SGD with momentum keeps
// its heavy-ball buffer (the host's t->m) on the device, updated by the SGD node in place.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "graph/backend.h"
#include "graph/exec.h"
#include "train/train_state.h"

// What the device run adds to the state (owned by it through s->dev_run).
typedef struct rg_train_device {
    rg_backend *backend;
    rg_resident *res;
    rg_graph *og;              // the optimizer graph
    rg_exec *oex;
    rg_node **sq;              // [n_tensors] squared norms (NULL: no gradient path)
    rg_node **upd;             // [n_tensors] the ADAMW / SGD nodes
    int seg_norms, seg_upd;    // node indices ending the first two segments
    float *sq_host;            // [n_tensors]
} rg_train_device;

// acc_k += grad_k at the end of the step graph, into the accumulator leaves (grad_bufs).
rg_status rg_train_device_add_accumulation(rg_train_state *s, rg_error *err) {
    rg_graph *g = s->g;
    for (int k = 0; k < s->n_tensors; k++) {
        if (!s->grads[k]) continue;
        const rg_train_tensor *t = &s->tensors[k];
        rg_node *acc = rg_leaf(g, "grad_acc", RG_TYPE_F32, t->n_dims, t->ne, s->grad_bufs[k]);
        rg_node *sum = rg_add(g, acc, s->grads[k]);
        rg_node *put = rg_cpy_into(g, sum, acc);
        if (put) put->flags |= RG_NODE_OUTPUT;  // kept: it writes the accumulator
    }
    return rg_graph_error(g, err);
}

static rg_status build_optimizer(rg_train_state *s, rg_train_device *d, rg_error *err) {
    rg_graph *g = d->og = rg_graph_new();
    if (!g) return rg_fail(err, RG_ERR_NOMEM, "train: out of memory");
    rg_node **acc = calloc((size_t)s->n_tensors, sizeof *acc);
    if (!acc) return rg_fail(err, RG_ERR_NOMEM, "train: out of memory");
    for (int k = 0; k < s->n_tensors; k++) {
        const rg_train_tensor *t = &s->tensors[k];
        acc[k] = rg_leaf(g, "grad_acc", RG_TYPE_F32, t->n_dims, t->ne, s->grad_bufs[k]);
        d->sq[k] = rg_sum(g, rg_mul(g, acc[k], acc[k]));
        if (d->sq[k]) d->sq[k]->flags |= RG_NODE_OUTPUT;
    }
    d->seg_norms = g->n_nodes;
    const bool adamw = s->cfg.optimizer == RG_OPTIM_ADAMW;
    for (int k = 0; k < s->n_tensors; k++) {
        rg_train_tensor *t = &s->tensors[k];
        rg_node *w = rg_param(g, t->name, t->type, t->n_dims, t->ne, t->w);
        // F16/BF16 weights: stored back by stochastic rounding keyed as the host step keys it,
        // or by RNE of an F32 master (training.master_weights); the step (ip[1]) is set per step.
        rg_optim_half half = {t->master ? rg_leaf(g, "master", RG_TYPE_F32, t->n_dims, t->ne, t->master) : NULL,
                              s->cfg.seed, 1, t->id};
        const bool is_half = t->type != RG_TYPE_F32;
        if (adamw) {
            rg_node *m = rg_leaf(g, "adam_m", RG_TYPE_F32, t->n_dims, t->ne, t->m);
            rg_node *v = rg_leaf(g, "adam_v", RG_TYPE_F32, t->n_dims, t->ne, t->v);
            rg_adamw_step one = {1, 0, 0, 0, 1, 1, 1, 1};  // replaced per step
            d->upd[k] = is_half ? rg_adamw_half(g, w, acc[k], m, v, &one, &half) : rg_adamw(g, w, acc[k], m, v, &one);
        } else {
            d->upd[k] = is_half ? rg_sgd_half(g, w, acc[k], 0.0f, 0.0f, 1.0f, &half) : rg_sgd(g, w, acc[k], 0.0f, 0.0f, 1.0f);
            if (s->cfg.momentum != 0.0)  // the heavy-ball buffer: the host step's t->m, resident like AdamW's moments
                rg_sgd_momentum(g, d->upd[k], rg_leaf(g, "sgd_buf", RG_TYPE_F32, t->n_dims, t->ne, t->m),
                                (float)s->cfg.momentum);
        }
        if (d->upd[k]) d->upd[k]->flags |= RG_NODE_OUTPUT;
    }
    d->seg_upd = g->n_nodes;
    for (int k = 0; k < s->n_tensors; k++) {
        const rg_train_tensor *t = &s->tensors[k];
        rg_node *zero = rg_cpy_into(g, rg_fill(g, RG_TYPE_F32, t->n_dims, t->ne, 0.0f), acc[k]);
        if (zero) zero->flags |= RG_NODE_OUTPUT;
    }
    free(acc);
    return rg_graph_error(g, err);
}

rg_status rg_train_device_create(rg_train_state *s, rg_device device, rg_error *err) {
    rg_train_device *d = s->dev_run = calloc(1, sizeof *d);
    if (!d) return rg_fail(err, RG_ERR_NOMEM, "train: out of memory");
    d->sq = calloc((size_t)s->n_tensors, sizeof *d->sq);
    d->upd = calloc((size_t)s->n_tensors, sizeof *d->upd);
    d->sq_host = calloc((size_t)s->n_tensors, sizeof *d->sq_host);
    if (!d->sq || !d->upd || !d->sq_host) return rg_fail(err, RG_ERR_NOMEM, "train: out of memory");
    rg_status st = device == RG_DEVICE_CUDA ? rg_backend_cuda_create(&d->backend, 0, err)
                                            : rg_fail(err, RG_ERR_ARG, "train: unknown device %d", (int)device);
    if (!st) st = rg_resident_create(&d->res, d->backend, err);
    if (!st) st = build_optimizer(s, d, err);
    rg_exec_opts eo = {.pool = s->pool, .backend = d->backend, .resident = d->res};
    if (!st) st = rg_exec_create(&s->ex, s->g, &eo, err);
    if (!st) st = rg_exec_create(&d->oex, d->og, &eo, err);
    return st;
}

void rg_train_device_free(rg_train_state *s) {
    rg_train_device *d = s->dev_run;
    if (!d) return;
    rg_exec_free(s->ex);  // before the resident copies it uses
    s->ex = NULL;
    rg_exec_free(d->oex);
    rg_graph_free(d->og);
    rg_resident_free(d->res);
    rg_backend_free(d->backend);
    free(d->sq), free(d->upd), free(d->sq_host);
    free(d);
    s->dev_run = NULL;
}

void rg_train_state_set_profile(rg_train_state *s, rg_exec_profile *p) {
    if (s->ex) rg_exec_set_profile(s->ex, p);
    if (s->dev_run) rg_exec_set_profile(s->dev_run->oex, p);
}

rg_status rg_train_state_sync_host(rg_train_state *s, rg_error *err) {
    return s->dev_run ? rg_resident_sync_host(s->dev_run->res, err) : RG_OK;
}

rg_status rg_train_state_refresh_device(rg_train_state *s, rg_error *err) {
    rg_train_device *d = s->dev_run;
    for (int k = 0; d && k < s->n_tensors; k++) {
        const rg_train_tensor *t = &s->tensors[k];
        const size_t n4 = (size_t)t->nel * 4;
        const size_t nw = (size_t)t->nel * rg_type_get(t->type)->type_size;
        rg_status st = rg_resident_refresh(d->res, t->w, nw, err);
        if (!st && t->master) st = rg_resident_refresh(d->res, t->master, n4, err);
        if (!st && t->m) st = rg_resident_refresh(d->res, t->m, n4, err);
        if (!st && t->v) st = rg_resident_refresh(d->res, t->v, n4, err);
        if (st) return st;
    }
    return RG_OK;
}

// Zeroes the accumulators (the last segment of the optimizer graph).
rg_status rg_train_device_discard(rg_train_state *s, rg_error *err) {
    rg_train_device *d = s->dev_run;
    return rg_exec_run(d->oex, d->seg_upd, -1, err);
}

rg_status rg_train_device_norm(rg_train_state *s, double *norm, rg_error *err) {
    rg_train_device *d = s->dev_run;
    rg_status st = rg_exec_run(d->oex, 0, d->seg_norms, err);
    double total = 0;
    for (int k = 0; k < s->n_tensors && !st; k++) {
        st = rg_exec_read(d->oex, d->sq[k], &d->sq_host[k], sizeof(float), err);
        total += (double)d->sq_host[k];
    }
    *norm = sqrt(total);
    return st;
}

rg_status rg_train_device_update(rg_train_state *s, const rg_optim_step *os, rg_error *err) {
    rg_train_device *d = s->dev_run;
    const double bc1 = 1.0 - pow(os->beta1, (double)os->t), bc2 = 1.0 - pow(os->beta2, (double)os->t);
    for (int k = 0; k < s->n_tensors; k++) {
        rg_node *u = d->upd[k];
        const double wd = s->tensors[k].decay ? os->weight_decay : 0.0;
        if (u->op == RG_OP_ADAMW) {  // the scalars rg_optim_apply gives the same row kernel
            u->fp[0] = (float)(os->lr / bc1), u->fp[1] = (float)(1.0 - os->beta1), u->fp[2] = (float)os->beta2;
            u->fp[3] = (float)(1.0 - os->beta2), u->fp[4] = (float)os->eps, u->fp[5] = (float)(1.0 - os->lr * wd);
            u->fp[6] = (float)sqrt(bc2), u->fp[7] = os->clip;
        } else {
            u->fp[0] = (float)os->lr, u->fp[1] = (float)wd, u->fp[2] = os->clip;
            u->fp[3] = (float)os->momentum, u->fp[4] = os->t == 1 ? 1.0f : 0.0f;  // as rg_optim_apply sets them
        }
        u->ip[1] = (int64_t)(uint32_t)os->t;  // the SR key's step (half weights; unused for F32)
    }
    return rg_exec_run(d->oex, d->seg_norms, -1, err);  // the update, then the zeroing
}

void rg_train_state_exec_stats(const rg_train_state *s, rg_exec_stats *step, rg_exec_stats *optim) {
    const rg_exec_stats none = {0};
    *step = s->ex ? rg_exec_get_stats(s->ex) : none;
    *optim = s->dev_run && s->dev_run->oex ? rg_exec_get_stats(s->dev_run->oex) : none;
}

void rg_train_device_memory(const rg_train_state *s, rg_train_memory *r) {
    const rg_train_device *d = s->dev_run;
    size_t acc = 0, opt = 0;
    for (int k = 0; k < s->n_tensors; k++) {
        const rg_train_tensor *t = &s->tensors[k];
        acc += (size_t)t->nel * 4;
        opt += (size_t)t->nel * 4 * ((t->m != NULL) + (t->v != NULL) + (t->master != NULL));
    }
    const rg_plan *sp = rg_exec_device_plan(s->ex), *op = rg_exec_device_plan(d->oex);
    const size_t resident = rg_resident_bytes(d->res);
    r->on_device = true;
    r->scratch_weights = resident > acc + opt ? resident - acc - opt : 0;  // trained and frozen weights
    r->scratch_gradients = acc + (sp ? sp->grad_bytes : 0);
    r->scratch_optimizer = opt;
    r->scratch_activations = (sp ? sp->buffer_bytes - sp->grad_bytes : 0) + (op ? op->buffer_bytes : 0);
    r->scratch_scratch = (sp ? sp->scratch_bytes : 0) + (op ? op->scratch_bytes : 0);
    r->scratch_total = r->scratch_weights + r->scratch_gradients + r->scratch_optimizer + r->scratch_activations +
                       r->scratch_scratch;
    size_t fr = 0, tot = 0;
    rg_error ignored;
    if (d->backend->vt->mem_info && d->backend->vt->mem_info(d->backend, &fr, &tot, &ignored) == RG_OK)
        r->device_used = tot - fr, r->device_free = fr;
}
