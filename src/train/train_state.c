// train_state.c - see train_state.h.
#include "train/train_state.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cpu/tiles_cache.h"
#include "graph/plan.h"
#include "tensor/half.h"
#include "train/train_step.h"

static double mib(size_t b) { return (double)b / 1048576.0; }

// A layer input too large for F16 was stored as Inf: the recompute would start
// from it, so the step's gradient is meaningless. Names the layer and the token.
static rg_status check_checkpoints(const rg_train_state *s, rg_error *err) {
    for (int il = 0; il < s->n_ckpts; il++) {
        const rg_node *c = s->ckpts[il];
        const int64_t d = c->t.ne[0], n = rg_tensor_nelements(&c->t);
        const uint16_t *h = c->t.data;
        uint16_t *copy = NULL;  // on a device: the stored inputs read back
        if (s->dev_run) {
            copy = malloc(sizeof(uint16_t) * (size_t)n);
            if (!copy) return rg_fail(err, RG_ERR_NOMEM, "train: out of memory");
            rg_status st = rg_exec_read(s->ex, c, copy, sizeof(uint16_t) * (size_t)n, err);
            if (st) {
                free(copy);
                return st;
            }
            h = copy;
        }
        const uint16_t exp_mask = c->t.type == RG_TYPE_F16 ? 0x7c00 : 0x7f80;
        for (int64_t i = 0; i < n; i++) {
            if ((h[i] & exp_mask) != exp_mask) continue;
            free(copy);
            return rg_fail(err, RG_ERR_NONFINITE,
                           "train: training.checkpoint_dtype=%s cannot hold the input of layer %d: element %lld of token "
                           "%lld is beyond its range (|x| > %s); use training.checkpoint_dtype=bf16 or f32",
                           c->t.type == RG_TYPE_F16 ? "f16" : "bf16", il, (long long)(i % d), (long long)(i / d),
                           c->t.type == RG_TYPE_F16 ? "65504" : "3.39e38");
        }
        free(copy);
    }
    return RG_OK;
}

rg_status rg_train_state_create(rg_train_state **out, const rg_model *m, const rg_train_spec *spec, int64_t total_steps,
                                rg_error *err) {
    return rg_train_state_create_on(out, m, spec, total_steps, RG_DEVICE_CPU, err);
}

static rg_train_memory memory_of(const rg_train_state *s, const rg_plan *p);

// Optimizer state, masters and accumulators, after the run was found to fit.
static rg_status alloc_state(rg_train_state *s, rg_error *err) {
    const rg_train_config *cfg = &s->cfg;
    for (int k = 0; k < s->n_tensors; k++) {
        rg_train_tensor *t = &s->tensors[k];
        size_t n4 = (size_t)t->nel * 4;
        if (cfg->optimizer == RG_OPTIM_ADAMW || cfg->momentum != 0.0) t->m = rg_train_alloc64(n4);
        if (cfg->optimizer == RG_OPTIM_ADAMW) t->v = rg_train_alloc64(n4);
        if (cfg->master_weights && t->type != RG_TYPE_F32) t->master = rg_train_alloc64(n4);
        if (s->accumulate) s->grad_bufs[k] = rg_train_alloc64(n4);
        if ((!t->m && (cfg->optimizer == RG_OPTIM_ADAMW || cfg->momentum != 0.0)) ||
            (!t->v && cfg->optimizer == RG_OPTIM_ADAMW) || (!t->master && cfg->master_weights && t->type != RG_TYPE_F32) ||
            (s->accumulate && !s->grad_bufs[k]))
            return rg_fail(err, RG_ERR_NOMEM, "train: out of memory for the optimizer state of '%s'", t->name);
        if (t->m) memset(t->m, 0, n4);
        if (t->v) memset(t->v, 0, n4);
        if (s->accumulate) memset(s->grad_bufs[k], 0, n4);
        if (t->master) {
            if (t->type == RG_TYPE_F16) rg_fp16_to_fp32_row(t->w, t->master, t->nel);
            else rg_bf16_to_fp32_row(t->w, t->master, t->nel);
        }
    }
    return RG_OK;
}

// The gradient each tensor's update reads: its accumulator, or (one row a step on the CPU) the
// step graph's gradient output; a zero buffer for a tensor the loss does not reach.
static rg_status bind_grads(rg_train_state *s, rg_error *err) {
    for (int k = 0; k < s->n_tensors; k++) {
        if (!s->accumulate) s->grad_bufs[k] = s->grads[k] ? (float *)s->grads[k]->t.data : NULL;
        if (!s->grad_bufs[k]) {
            s->grads[k] = NULL;  // freed with the state (rg_train_state_free)
            s->grad_bufs[k] = rg_train_alloc64((size_t)s->tensors[k].nel * 4);
            if (!s->grad_bufs[k]) return rg_fail(err, RG_ERR_NOMEM, "train: out of memory");
            memset(s->grad_bufs[k], 0, (size_t)s->tensors[k].nel * 4);
        }
        s->tensors[k].grad = s->grad_bufs[k];
    }
    return RG_OK;
}

// The refusal of a run over the limit, with the parts and the setting that would help.
static rg_status refuse_over_limit(const rg_train_state *s, const rg_plan *plan, size_t need, size_t limit,
                                   rg_device device, rg_error *err) {
    const rg_model *m = s->model;
    const rg_train_config *cfg = &s->cfg;
    size_t mapped = 0;
    for (uint64_t i = 0; i < m->file->n_tensors; i++) mapped += m->file->tensors[i].nbytes;
    size_t weights = cfg->method == RG_TRAIN_FULL ? s->weight_bytes : mapped;
    bool recomputing = s->recompute, any_attn = false;
    for (int64_t il = 0; il < m->hp.n_layer; il++) any_attn |= m->layers[il].mixer == RG_KIND_ATTN;
    const bool flashing = s->flash_attn || !any_attn;  // no hint for flash attention: on, or nothing to make flash
    return rg_fail(err, RG_ERR_NOMEM,
                   "train: the run needs %.1f MiB but the limit is %.1f MiB (weights %.1f, gradients %.1f, optimizer "
                   "state %.1f, activations %.1f%s, scratch %.1f MiB); lower training.ctx, %suse LoRA, or raise "
                   "training.memory_limit_gb",
                   mib(need), mib(limit), mib(weights), mib(plan->grad_bytes + s->grad_bytes), mib(s->state_bytes),
                   mib(plan->buffer_bytes - plan->grad_bytes), recomputing ? " with layer recompute" : "",
                   mib(plan->scratch_bytes),
                   cfg->recompute == RG_RECOMPUTE_NONE ? "set training.recompute=layer, "
                   : cfg->fused_ce == RG_FUSED_CE_OFF  ? "set training.fused_ce=on, "
                   : recomputing && cfg->checkpoint_dtype == RG_TYPE_F32 ? "set training.checkpoint_dtype=bf16, "
                   : !flashing && device == RG_DEVICE_CPU                ? "set training.flash_attn=on, "
                                                                         : "");
}

// rg_train_state_create_on, or with plan (rg_train_state_plan) the step built and planned with the same choices,
// its memory into *plan and nothing more allocated: no buffer, no optimizer state, no refusal over the limit.
static rg_status create(rg_train_state **out, const rg_model *m, const rg_train_spec *spec, int64_t total_steps,
                        rg_device device, rg_train_memory *planned, rg_error *err) {
    *out = NULL;
    rg_status st;
    const rg_train_config *cfg = &spec->cfg;  // checked at the edge (rg_train_config_validate)
    const size_t memory_limit = spec->memory_limit;
    rg_train_state *s = calloc(1, sizeof *s);
    if (!s) return rg_fail(err, RG_ERR_NOMEM, "train: out of memory");
    s->model = m;
    s->cfg = *cfg;
    s->ctx = cfg->ctx;
    s->lr = spec->lr;
    s->total_steps = total_steps;
    // On a device the gradients are always summed into accumulators there.
    s->accumulate = cfg->batch_size * cfg->grad_accum > 1 || device != RG_DEVICE_CPU;
    size_t cap = rg_train_tensor_capacity(m);
    s->tensors = calloc(cap, sizeof *s->tensors);
    s->weight_bufs = calloc(cap, sizeof *s->weight_bufs);
    s->grad_bufs = calloc(cap, sizeof *s->grad_bufs);
    s->grads = calloc(cap, sizeof *s->grads);
    s->params = calloc(cap, sizeof *s->params);
    s->acc = calloc(cap, sizeof *s->acc);
    st = !s->tensors || !s->weight_bufs || !s->grad_bufs || !s->grads || !s->params || !s->acc
             ? rg_fail(err, RG_ERR_NOMEM, "train: out of memory")
             : rg_train_choose_flash(cfg, device, &s->flash_attn, err);
    // training.compute_dtype against the model and the machine: refused here, before anything runs
    if (!st) st = rg_train_products_resolve(cfg->compute_dtype, rg_train_product_weight_type(m), device, &s->products, err);
    if (!st) st = rg_threadpool_create(&s->pool, cfg->threads > 0 ? (int)cfg->threads : 0, err);
    // Plan first (the choice of recompute, fused loss and flash attention), so a run that cannot
    // fit is refused before the big allocations.
    rg_plan plan;
    size_t need = 0, limit = 0;
    if (!st) st = rg_train_step_choose(s, device, memory_limit, &plan, &need, &limit, err);
    // The frozen weights' BF16 tiles, held when memory allows (a LoRA base packed once for the whole run).
    if (!st && s->products.bf16_cpu && device == RG_DEVICE_CPU) {
        const size_t wanted = rg_tiles_cache_wanted(s->g), cap = rg_tiles_cache_default_cap(need, limit);
        s->tiles_cap = cap < wanted ? cap : wanted;
    }
    if (!st && planned) {
        *planned = memory_of(s, &plan);
        rg_train_state_free(s);
        return RG_OK;
    }
    if (!st && limit && need > limit) st = refuse_over_limit(s, &plan, need, limit, device, err);
    if (!st) st = alloc_state(s, err);
    if (!st) rg_train_step_bind_accumulators(s);
    if (!st && s->tiles_cap) st = rg_tiles_cache_create(&s->tiles, s->tiles_cap, err);
    rg_exec_opts eo = {.pool = s->pool, .bf16_products = s->products.bf16_cpu, .tiles_cache = s->tiles};
    if (!st && device != RG_DEVICE_CPU) st = rg_train_device_create(s, device, &eo, err);
    // The chosen step is planned once: on the CPU the exec takes the choice's plan (a device
    // schedules the graph and plans its own buffer).
    rg_exec_opts step_eo = eo;
    step_eo.plan = device == RG_DEVICE_CPU ? &plan : NULL;
    if (!st) st = rg_exec_create(&s->ex, s->g, &step_eo, err);
    if (!st) st = bind_grads(s, err);
    const rg_optim_graph_opts oo = {.optimizer = (int)cfg->optimizer, .momentum = cfg->momentum, .seed = cfg->seed,
                                    .norm = true, .max_norm = cfg->clip_grad_norm, .zero_grads = s->accumulate};
    if (!st) st = rg_optim_graph_build(&s->og, s->tensors, s->n_tensors, &oo, err);
    if (!st) st = rg_exec_create(&s->oex, s->og.g, &eo, err);
    if (st) {
        rg_train_state_free(s);
        return st;
    }
    *out = s;
    return RG_OK;
}

rg_status rg_train_state_create_on(rg_train_state **out, const rg_model *m, const rg_train_spec *spec,
                                   int64_t total_steps, rg_device device, rg_error *err) {
    return create(out, m, spec, total_steps, device, NULL, err);
}

rg_status rg_train_state_plan(const rg_model *m, const rg_train_spec *spec, rg_train_memory *out, rg_error *err) {
    rg_train_state *s;
    memset(out, 0, sizeof *out);
    return create(&s, m, spec, spec->cfg.steps, RG_DEVICE_CPU, out, err);
}

rg_status rg_train_state_create_eval(rg_train_state **out, const rg_model *m, const rg_train_spec *spec,
                                     rg_lora *adapter, float user_scale, rg_error *err) {
    *out = NULL;
    const rg_train_config *cfg = &spec->cfg;  // checked at the edge (rg_train_config_validate)
    rg_status st = RG_OK;
    rg_train_state *s = calloc(1, sizeof *s);
    if (!s) {
        rg_lora_free(adapter);
        return rg_fail(err, RG_ERR_NOMEM, "eval: out of memory");
    }
    s->model = m;
    s->cfg = *cfg;
    s->ctx = cfg->ctx;
    s->eval_only = true;
    s->lora = adapter;
    s->eval_scale = user_scale;
    s->grads = calloc(rg_train_tensor_capacity(m), sizeof *s->grads);
    if (!s->grads) st = rg_fail(err, RG_ERR_NOMEM, "eval: out of memory");
    if (!st) st = rg_train_choose_flash(cfg, RG_DEVICE_CPU, &s->flash_attn, err);
    if (!st) st = rg_train_products_resolve(cfg->compute_dtype, rg_train_product_weight_type(m), RG_DEVICE_CPU, &s->products, err);
    if (!st) st = rg_threadpool_create(&s->pool, cfg->threads > 0 ? (int)cfg->threads : 0, err);
    if (!st) st = rg_train_step_build(s, cfg->fused_ce == RG_FUSED_CE_ON, false, err);
    // The frozen weights' BF16 tiles for the whole evaluation (the plan's limit: the machine's memory).
    if (!st && s->products.bf16_cpu) {
        const size_t wanted = rg_tiles_cache_wanted(s->g), cap = rg_tiles_cache_default_cap(0, 0);
        s->tiles_cap = cap < wanted ? cap : wanted;
        if (s->tiles_cap) st = rg_tiles_cache_create(&s->tiles, s->tiles_cap, err);
    }
    rg_exec_opts eo = {.pool = s->pool, .bf16_products = s->products.bf16_cpu, .tiles_cache = s->tiles};
    if (!st) st = rg_exec_create(&s->ex, s->g, &eo, err);  // the one plan of the eval graph
    if (st) {
        rg_train_state_free(s);
        return st;
    }
    *out = s;
    return RG_OK;
}

void rg_train_state_free(rg_train_state *s) {
    if (!s) return;
    rg_exec_free(s->ex);  // the execs before the resident copies they use
    rg_exec_free(s->oex);
    rg_tiles_cache_free(s->tiles);  // after the execs that read it
    rg_optim_graph_free(&s->og);
    rg_train_device_free(s);
    rg_graph_free(s->g);
    for (int k = 0; k < s->n_tensors; k++) {
        rg_train_tensor *t = &s->tensors[k];
        free(t->m), free(t->v), free(t->master);
        if (s->weight_bufs) free(s->weight_bufs[k]);
        if (s->grad_bufs && (s->accumulate || !s->grads[k])) free(s->grad_bufs[k]);
    }
    rg_threadpool_free(s->pool);
    rg_lora_free(s->lora);
    free(s->tensors), free(s->weight_bufs), free(s->grad_bufs), free(s->grads), free(s->params), free(s->acc);
    free(s);
}

rg_train_memory rg_train_state_memory(const rg_train_state *s) { return memory_of(s, rg_exec_plan(s->ex)); }

// The memory report, one function for both backends and for rg_train_state_plan: the host
// parts from the step's plan p; on a device also its own parts, from the execs' device plans
// and the resident copies (trained and frozen weights, accumulators, optimizer state).
static rg_train_memory memory_of(const rg_train_state *s, const rg_plan *p) {
    rg_train_memory r = {0};
    size_t mapped = 0;
    for (uint64_t i = 0; i < s->model->file->n_tensors; i++) mapped += s->model->file->tensors[i].nbytes;
    r.weights = s->cfg.method == RG_TRAIN_FULL ? s->weight_bytes : mapped;
    for (int k = 0; s->lora && k < s->n_tensors; k++) r.weights += (size_t)s->tensors[k].nel * 4;  // LoRA A and B
    r.gradients = p->grad_bytes + s->grad_bytes;
    r.optimizer = s->state_bytes;
    r.activations = p->buffer_bytes - p->grad_bytes;
    r.scratch = p->scratch_bytes;
    r.recompute = s->recompute;
    r.fused_ce = s->fused_ce;
    r.flash_attn = s->flash_attn;
    r.checkpoint_type = s->cfg.checkpoint_dtype;
    r.total = r.weights + r.gradients + r.optimizer + r.activations + r.scratch;
    if (s->products.bf16_cpu && !s->dev_run) r.tiles_wanted = rg_tiles_cache_wanted(s->g), r.tiles_cap = s->tiles_cap;
    if (!s->dev_run) return r;
    size_t acc = 0, opt = 0, resident = 0;
    for (int k = 0; k < s->n_tensors; k++) {
        const rg_train_tensor *t = &s->tensors[k];
        acc += (size_t)t->nel * 4;
        opt += (size_t)t->nel * 4 * ((t->m != NULL) + (t->v != NULL) + (t->master != NULL));
    }
    rg_train_device_usage(s, &resident, &r.device_used, &r.device_free);
    const rg_plan *sp = rg_exec_device_plan(s->ex), *op = rg_exec_device_plan(s->oex);
    r.on_device = true;
    r.scratch_weights = resident > acc + opt ? resident - acc - opt : 0;  // trained and frozen weights
    r.scratch_gradients = acc + (sp ? sp->grad_bytes : 0);
    r.scratch_optimizer = opt;
    r.scratch_activations = (sp ? sp->buffer_bytes - sp->grad_bytes : 0) + (op ? op->buffer_bytes : 0);
    r.scratch_scratch = (sp ? sp->scratch_bytes : 0) + (op ? op->scratch_bytes : 0);
    r.scratch_total = r.scratch_weights + r.scratch_gradients + r.scratch_optimizer + r.scratch_activations +
                      r.scratch_scratch;
    return r;
}

// ---------------------------------------------------------------------------
// The row's inputs, written where the exec reads them (host staging when they live on a device).
static void bind_row(rg_train_state *s, const int32_t *ids, const int32_t *labels, const int32_t *pos, const int32_t *seg) {
    const int64_t T = s->ctx;
    memcpy(rg_exec_input(s->ex, s->ids), ids, sizeof(int32_t) * (size_t)T);
    memcpy(rg_exec_input(s->ex, s->labels), labels, sizeof(int32_t) * (size_t)T);
    memcpy(rg_exec_input(s->ex, s->pos), pos, sizeof(int32_t) * (size_t)T);
    float *mask = s->mask ? rg_exec_input(s->ex, s->mask) : NULL;  // [T keys, T queries]: query q reads keys of
    for (int64_t q = 0; mask && q < T; q++)       // its own document only (NULL: no attention layer reads it)
        for (int64_t k = 0; k < T; k++) mask[q * T + k] = seg[k] == seg[q] ? 0.0f : -INFINITY;
    int32_t *doc = s->seg ? rg_exec_input(s->ex, s->seg) : NULL;
    if (doc) memcpy(doc, seg, sizeof(int32_t) * (size_t)T);
}

static int64_t count_targets(const int32_t *labels, int64_t T) {
    int64_t n = 0;
    for (int64_t i = 0; i < T; i++) n += labels[i] != -100;
    return n;
}

rg_status rg_train_state_micro(rg_train_state *s, const int32_t *ids, const int32_t *labels, const int32_t *pos,
                               const int32_t *seg, double inv_n, double *loss, rg_error *err) {
    bind_row(s, ids, labels, pos, seg);
    *loss = 0.0;
    if (count_targets(labels, s->ctx) == 0) return RG_OK;  // nothing to learn from this row: its gradient is zero
    s->ce->fp[0] = (float)inv_n;
    s->loss_back->fp[0] = (float)inv_n;  // the gradient is normalised by the whole step's targets too
    rg_status st = rg_exec_run(s->ex, 0, -1, err);
    if (!st) st = check_checkpoints(s, err);
    float lv = 0;
    if (!st) st = rg_exec_read(s->ex, s->loss, &lv, sizeof lv, err);
    if (st) return st;
    *loss = (double)lv;
    s->rows_this_step++;
    return RG_OK;
}

rg_status rg_train_state_eval_row(rg_train_state *s, const int32_t *ids, const int32_t *labels, const int32_t *pos,
                                  const int32_t *seg, double *loss_sum, int64_t *n_targets, rg_error *err) {
    *loss_sum = 0.0;
    *n_targets = count_targets(labels, s->ctx);
    if (*n_targets == 0) return RG_OK;
    bind_row(s, ids, labels, pos, seg);
    s->ce->fp[0] = 1.0f;  // the sum over the row's targets
    rg_status st = rg_exec_run(s->ex, 0, s->g->n_forward, err);
    float lv = 0;
    if (!st) st = rg_exec_read(s->ex, s->loss, &lv, sizeof lv, err);
    if (st) return st;
    *loss_sum = (double)lv;
    return RG_OK;
}

// Zeroes the accumulators (the optimizer graph's last segment); nothing without them.
static rg_status zero_accumulators(rg_train_state *s, rg_error *err) {
    return s->accumulate ? rg_exec_run(s->oex, s->og.seg_upd, -1, err) : RG_OK;
}

void rg_train_state_discard(rg_train_state *s) {
    s->rows_this_step = 0;
    rg_error ignored;
    zero_accumulators(s, &ignored);  // a failure here shows at the next run
}

rg_status rg_train_state_step(rg_train_state *s, double *grad_norm, double *lr_used, bool *skipped, rg_error *err) {
    *skipped = false;
    // A step whose rows had no targets at all has nothing to apply (accumulators are zero already).
    if (s->rows_this_step == 0 && !s->accumulate)
        for (int k = 0; k < s->n_tensors; k++) memset(s->tensors[k].grad, 0, (size_t)s->tensors[k].nel * 4);
    s->rows_this_step = 0;
    double total = 0.0;  // the gradients' sum of squares, the norm segment's one output
    rg_status st = rg_exec_run(s->oex, 0, s->og.seg_norm, err);
    if (!st && s->og.total) st = rg_exec_read(s->oex, s->og.total, &total, sizeof total, err);
    if (st) return st;
    const double norm = sqrt(total);
    *grad_norm = norm;
    const rg_train_config *c = &s->cfg;
    double lr = s->lr * rg_schedule_factor((int)c->schedule, s->t, c->warmup_steps, s->total_steps);
    *lr_used = lr;
    if (!isfinite(norm)) {
        *skipped = true;
        return zero_accumulators(s, err);
    }
    // The clip comes from the graph's CLIP_COEF node; the rest of the step's scalars are set here.
    const rg_optim_step os = {.optimizer = (int)c->optimizer, .lr = lr, .beta1 = c->beta1, .beta2 = c->beta2,
                              .eps = c->eps, .weight_decay = c->weight_decay, .momentum = c->momentum, .t = s->t + 1,
                              .seed = c->seed, .clip = 1.0f};
    rg_optim_graph_set_step(&s->og, s->tensors, &os);
    if ((st = rg_exec_run(s->oex, s->og.seg_norm, -1, err))) return st;  // clip, update, accumulators zeroed
    s->t++;
    return RG_OK;
}

void rg_train_state_set_profile(rg_train_state *s, rg_exec_profile *p) {
    if (s->ex) rg_exec_set_profile(s->ex, p);
    if (s->oex) rg_exec_set_profile(s->oex, p);
}

void rg_train_state_exec_stats(const rg_train_state *s, rg_exec_stats *step, rg_exec_stats *optim) {
    const rg_exec_stats none = {0};
    *step = s->ex ? rg_exec_get_stats(s->ex) : none;
    *optim = s->oex ? rg_exec_get_stats(s->oex) : none;
}
