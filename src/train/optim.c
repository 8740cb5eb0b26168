// optim.c - see optim.h.
#include "train/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cpu/cpu_ops.h"
#include "graph/exec.h"

float rg_clip_coef(double total, double max_norm) { return rg_clip_coef_f64(total, max_norm); }

double rg_schedule_factor(int kind, int64_t s, int64_t warmup, int64_t total) {
    if (s < warmup) return (double)s / (double)(warmup > 1 ? warmup : 1);
    double span = (double)(total - warmup > 1 ? total - warmup : 1);
    switch (kind) {
    case 1: {  // linear
        double f = (double)(total - s) / span;
        return f > 0.0 ? f : 0.0;
    }
    case 2: {  // cosine, half a cycle
        double p = (double)(s - warmup) / span;
        double f = 0.5 * (1.0 + cos(M_PI * 2.0 * 0.5 * p));
        return f > 0.0 ? f : 0.0;
    }
    default:
        return 1.0;
    }
}

void rg_optim_pack(const rg_optim_step *s, bool decay, float fp[8]) {
    const double wd = decay ? s->weight_decay : 0.0;
    memset(fp, 0, sizeof(float) * 8);
    if (s->optimizer == 0) {
        const double bc1 = 1.0 - pow(s->beta1, (double)s->t), bc2 = 1.0 - pow(s->beta2, (double)s->t);
        fp[0] = (float)(s->lr / bc1);
        fp[1] = (float)(1.0 - s->beta1);
        fp[2] = (float)s->beta2;
        fp[3] = (float)(1.0 - s->beta2);
        fp[4] = (float)s->eps;
        fp[5] = (float)(1.0 - s->lr * wd);
        fp[6] = (float)sqrt(bc2);
        fp[7] = s->clip;
    } else {
        fp[0] = (float)s->lr;
        fp[1] = (float)wd;
        fp[2] = s->clip;
        fp[3] = (float)s->momentum;
        fp[4] = s->t == 1 ? 1.0f : 0.0f;  // the first step: b = g
    }
}

// ---------------------------------------------------------------------------
// The optimizer graph. Every op of it is elementwise or a sum in index order, so its leaves are
// flat: [nel] over each buffer (the bytes the step graph's shaped nodes read).

static rg_status check_tensor(const rg_train_tensor *t, const rg_optim_graph_opts *o, rg_error *err) {
    if (t->type != RG_TYPE_F32 && t->type != RG_TYPE_F16 && t->type != RG_TYPE_BF16)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "optimizer: tensor '%s' is stored as %s; only f32, f16 and bf16 train in place",
                       t->name, rg_type_get(t->type)->name);
    if (!t->grad) return rg_fail(err, RG_ERR_ARG, "optimizer: tensor '%s' has no gradient", t->name);
    if (o->optimizer == 0 && (!t->m || !t->v))
        return rg_fail(err, RG_ERR_ARG, "optimizer: tensor '%s' has no AdamW moments", t->name);
    if (o->optimizer == 1 && o->momentum != 0.0 && !t->m)
        return rg_fail(err, RG_ERR_ARG, "optimizer: tensor '%s' has no momentum buffer", t->name);
    return RG_OK;
}

rg_status rg_optim_graph_build(rg_optim_graph *og, const rg_train_tensor *ts, int n, const rg_optim_graph_opts *o,
                               rg_error *err) {
    memset(og, 0, sizeof *og);
    og->n = n;
    rg_status st;
    for (int k = 0; k < n; k++)
        if ((st = check_tensor(&ts[k], o, err))) return st;
    rg_graph *g = og->g = rg_graph_new();
    og->upd = calloc((size_t)(n ? n : 1), sizeof *og->upd);
    rg_node **grad = calloc((size_t)(n ? n : 1), sizeof *grad);
    if (!g || !og->upd || !grad) {
        free(grad);
        rg_optim_graph_free(og);
        return rg_fail(err, RG_ERR_NOMEM, "optimizer: out of memory");
    }
    for (int k = 0; k < n; k++) {
        const rg_train_tensor *t = &ts[k];
        grad[k] = rg_leaf(g, "grad", RG_TYPE_F32, 1, &t->nel, t->grad);  // [nel] the step's gradient
        if (o->norm) og->total = rg_sumsq(g, grad[k], og->total);
    }
    if (og->total) og->total->flags |= RG_NODE_OUTPUT;  // read by the caller between the segments
    og->seg_norm = g->n_nodes;
    rg_node *clip = o->norm ? rg_clip_coef_node(g, og->total, o->max_norm) : NULL;  // F32 [1]
    const rg_adamw_step one = {1, 0, 0, 0, 1, 1, 1, 1};                            // set per step
    for (int k = 0; k < n; k++) {
        const rg_train_tensor *t = &ts[k];
        rg_node *w = rg_param(g, t->name, t->type, 1, &t->nel, t->w);
        // F16/BF16 weights: stored back by stochastic rounding keyed by (seed, step, tensor id,
        // element), or by RNE of an F32 master (training.master_weights); the step (ip[1]) per step.
        const rg_optim_half half = {t->master ? rg_leaf(g, "master", RG_TYPE_F32, 1, &t->nel, t->master) : NULL,
                                    o->seed, 1, t->id};
        const bool is_half = t->type != RG_TYPE_F32;
        rg_node *u;
        if (o->optimizer == 0) {
            rg_node *m = rg_leaf(g, "adam_m", RG_TYPE_F32, 1, &t->nel, t->m);
            rg_node *v = rg_leaf(g, "adam_v", RG_TYPE_F32, 1, &t->nel, t->v);
            u = is_half ? rg_adamw_half(g, w, grad[k], m, v, &one, &half) : rg_adamw(g, w, grad[k], m, v, &one);
        } else {
            u = is_half ? rg_sgd_half(g, w, grad[k], 0.0f, 0.0f, 1.0f, &half) : rg_sgd(g, w, grad[k], 0.0f, 0.0f, 1.0f);
            if (o->momentum != 0.0)  // the heavy-ball buffer: the tensor's m
                u = rg_sgd_momentum(g, u, rg_leaf(g, "sgd_buf", RG_TYPE_F32, 1, &t->nel, t->m), (float)o->momentum);
        }
        if (clip) u = rg_optim_set_clip(g, u, clip);
        og->upd[k] = u;
    }
    og->seg_upd = g->n_nodes;
    for (int k = 0; k < n && o->zero_grads; k++) {
        const rg_train_tensor *t = &ts[k];
        rg_node *zero = rg_cpy_into(g, rg_fill(g, RG_TYPE_F32, 1, &t->nel, 0.0f), grad[k]);
        if (zero) zero->flags |= RG_NODE_OUTPUT;  // kept: it writes the accumulator
    }
    free(grad);
    if ((st = rg_graph_error(g, err))) rg_optim_graph_free(og);
    return st;
}

void rg_optim_graph_set_step(rg_optim_graph *og, const rg_train_tensor *ts, const rg_optim_step *s) {
    for (int k = 0; k < og->n; k++) {
        rg_optim_pack(s, ts[k].decay, og->upd[k]->fp);
        og->upd[k]->ip[1] = (int64_t)(uint32_t)s->t;  // the SR key's step (half weights; unused for F32)
    }
}

void rg_optim_graph_free(rg_optim_graph *og) {
    rg_graph_free(og->g);
    free(og->upd);
    memset(og, 0, sizeof *og);
}

// ---------------------------------------------------------------------------
// One-shot uses on the CPU.

static rg_status run_once(rg_graph *g, rg_threadpool *pool, int from, int to, const rg_node *out, void *dst,
                          size_t bytes, rg_error *err) {
    rg_exec *ex = NULL;
    rg_exec_opts eo = {.n_threads = 1, .pool = pool};
    rg_status st = rg_exec_create(&ex, g, &eo, err);
    if (!st) st = rg_exec_run(ex, from, to, err);
    if (!st && out) st = rg_exec_read(ex, out, dst, bytes, err);
    rg_exec_free(ex);
    return st;
}

double rg_grad_global_norm(const rg_train_tensor *ts, int n, rg_threadpool *pool) {
    rg_graph *g = rg_graph_new();
    rg_node *total = NULL;
    for (int k = 0; g && k < n; k++)
        total = rg_sumsq(g, rg_leaf(g, "grad", RG_TYPE_F32, 1, &ts[k].nel, ts[k].grad), total);
    double sum = 0.0;
    rg_error err;
    rg_status st = !g ? RG_ERR_NOMEM : rg_graph_error(g, &err);
    if (!st && total) total->flags |= RG_NODE_OUTPUT, st = run_once(g, pool, 0, -1, total, &sum, sizeof sum, &err);
    rg_graph_free(g);
    return st ? NAN : sqrt(sum);  // a failure reads as "not finite": the step is skipped, not corrupted
}

rg_status rg_optim_apply(rg_train_tensor *ts, int n, const rg_optim_step *s, rg_threadpool *pool, rg_error *err) {
    const rg_optim_graph_opts o = {.optimizer = s->optimizer, .momentum = s->momentum, .seed = s->seed};
    rg_optim_graph og;
    rg_status st = rg_optim_graph_build(&og, ts, n, &o, err);
    if (st) return st;
    rg_optim_graph_set_step(&og, ts, s);
    st = run_once(og.g, pool, og.seg_norm, og.seg_upd, NULL, NULL, 0, err);
    rg_optim_graph_free(&og);
    return st;
}
