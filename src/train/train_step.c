// train_step.c - the step graph of a training run, built by one piece of code for every
// backend (train_state.h): the trainable tensors' nodes (full copies or LoRA A/B), the inputs,
// the forward, the loss, the backward with its named handles (each tensor's gradient from its
// parameter node, the loss's backward from the loss), layer recompute, the gradient
// accumulation, and the one pass that chooses recompute, the fused loss and flash attention
// against the memory limit by planning candidates.
#include "train/train_step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/file.h"
#include "graph/backend.h"
#include "graph/plan.h"
#include "model/forward.h"

void *rg_train_alloc64(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64)) return NULL;
    return p;
}

static double mib(size_t b) { return (double)b / 1048576.0; }

// ---------------------------------------------------------------------------
// Full fine-tuning: every model tensor becomes a parameter over a copy in its
// own type, except those the architecture's table marks frozen (leaves over the
// mapping). The visit order (the table's global rows, then each layer's rows in
// slot order) fixes the tensor ids.
typedef struct full_builder {
    rg_train_state *s;
    rg_graph *g;
    rg_error *err;
    rg_status st;
} full_builder;

// decay: the table row is a matrix, not a small elementwise weight (RG_T_F32: norms, biases,
// conv kernels, mamba2's D), which AdamW's weight decay leaves alone as PyTorch's usual
// "decay the 2-D tensors" rule does (HF stores those as 1-D or 3-D tensors).
static rg_node *full_param(full_builder *b, const rg_gguf_tensor *t, bool decay) {
    if (!t || b->st) return NULL;
    rg_train_state *s = b->s;
    if (t->type != RG_TYPE_F32 && t->type != RG_TYPE_F16 && t->type != RG_TYPE_BF16) {
        b->st = rg_fail(b->err, RG_ERR_UNSUPPORTED,
                        "train: full fine-tuning trains f32, f16 and bf16 weights in place, but '%s' is %s; "
                        "use training.method=lora (LoRA trains over any base type)",
                        t->name, rg_type_get(t->type)->name);
        return NULL;
    }
    int k = s->n_tensors++;
    rg_train_tensor *tt = &s->tensors[k];
    memset(tt, 0, sizeof *tt);
    snprintf(tt->name, sizeof tt->name, "%s", t->name);
    tt->id = (uint32_t)k;
    tt->type = t->type;
    tt->n_dims = (int)(t->n_dims ? t->n_dims : 1);
    tt->nel = 1;
    for (int d = 0; d < 4; d++) tt->ne[d] = d < tt->n_dims ? t->ne[d] : 1, tt->nel *= tt->ne[d];
    tt->decay = decay && tt->n_dims >= 2;
    size_t bytes = (size_t)tt->nel * rg_type_get(t->type)->type_size;
    if (s->weight_bufs[k]) {  // a rebuilt graph (a candidate of rg_train_step_choose): the copy exists
        tt->w = s->weight_bufs[k];
        return s->params[k] = rg_param(b->g, t->name, t->type, tt->n_dims, tt->ne, tt->w);
    }
    s->weight_bufs[k] = rg_train_alloc64(bytes);
    if (!s->weight_bufs[k]) {
        b->st = rg_fail(b->err, RG_ERR_NOMEM, "train: out of memory copying '%s' (%.1f MiB)", t->name, mib(bytes));
        return NULL;
    }
    memcpy(s->weight_bufs[k], t->data, bytes);
    rg_file_map_release(&s->model->file->map, t->data, bytes);  // the copy is what trains: do not hold both
    s->weight_bytes += bytes;
    tt->w = s->weight_bufs[k];
    return s->params[k] = rg_param(b->g, t->name, t->type, tt->n_dims, tt->ne, tt->w);
}

static rg_status full_nodes(rg_train_state *s, rg_graph *g, rg_model_nodes *w, rg_error *err) {
    const rg_model *m = s->model;
    const rg_arch *a = m->arch;
    full_builder b = {.s = s, .g = g, .err = err};
    for (int i = 0; i < a->n_global; i++) {
        const rg_arch_tensor *t = &a->global[i];
        const bool decay = !(t->flags & RG_T_F32);
        if (t->role == RG_ROLE_TOKEN_EMBD) w->tok_embd = full_param(&b, m->tok_embd, decay);
        else if (t->role == RG_ROLE_OUTPUT_NORM) w->out_norm = full_param(&b, m->out_norm, decay);
        else if (t->role == RG_ROLE_OUTPUT) w->output = m->hp.tied ? w->tok_embd : full_param(&b, m->output, decay);
    }
    w->layers = rg_arena_alloc(&g->arena, sizeof *w->layers * (size_t)m->hp.n_layer, 8);
    if (!w->layers) return rg_fail(err, RG_ERR_NOMEM, "train: out of memory");
    memset(w->layers, 0, sizeof *w->layers * (size_t)m->hp.n_layer);
    for (int64_t il = 0; il < m->hp.n_layer && !b.st; il++) {
        const rg_layer *L = &m->layers[il];
        rg_layer_nodes *N = &w->layers[il];
        for (int i = 0; i < a->n_tensors; i++) {
            const rg_arch_tensor *t = &a->tensors[i];
            N->w[t->role] = (t->flags & RG_T_FROZEN) ? rg_model_leaf(g, L->t[t->role])
                                                     : full_param(&b, L->t[t->role], !(t->flags & RG_T_F32));
        }
    }
    if (b.st) return b.st;
    return rg_graph_error(g, err);
}

// LoRA: the base is frozen leaves over the mapping; A and B are parameters.
static rg_status lora_nodes(rg_train_state *s, rg_graph *g, rg_model_nodes *w, rg_error *err) {
    const rg_train_config *c = &s->cfg;
    rg_status st = s->lora ? RG_OK  // a rebuilt graph: the same adapter
                           : rg_lora_init(&s->lora, s->model, c->lora_rank, (float)c->lora_alpha, c->lora_targets,
                                          c->seed, err);
    if (st) return st;
    if ((st = rg_model_leaf_nodes(g, s->model, w, err))) return st;
    if ((st = rg_lora_attach(g, s->lora, w, 1.0f, true, err))) return st;
    const rg_lora *l = s->lora;
    for (int64_t i = 0; i < l->n_layer * RG_LORA_N_TARGETS; i++) {
        const rg_lora_pair *p = &l->pairs[i];
        if (!p->a) continue;
        const rg_layer_nodes *N = &w->layers[i / RG_LORA_N_TARGETS];  // pair i: layer i / N, target i % N
        for (int ab = 0; ab < 2; ab++) {
            int k = s->n_tensors++;
            s->params[k] = ab ? N->lora_b[i % RG_LORA_N_TARGETS] : N->lora_a[i % RG_LORA_N_TARGETS];  // NULL: scale 0
            rg_train_tensor *tt = &s->tensors[k];
            memset(tt, 0, sizeof *tt);
            snprintf(tt->name, sizeof tt->name, "%.56s.lora_%c", p->name, ab ? 'b' : 'a');
            tt->id = (uint32_t)k;
            tt->type = RG_TYPE_F32;
            tt->n_dims = 2;
            tt->ne[0] = ab ? l->rank : p->n_in;
            tt->ne[1] = ab ? p->n_out : l->rank;
            tt->ne[2] = tt->ne[3] = 1;
            tt->nel = tt->ne[0] * tt->ne[1];
            tt->w = ab ? p->b : p->a;
            tt->decay = true;
        }
    }
    return RG_OK;
}

// Eval only: the base is frozen leaves; the given adapter, if any, is attached as leaves too. Nothing trains.
static rg_status eval_nodes(rg_train_state *s, rg_graph *g, rg_model_nodes *w, rg_error *err) {
    rg_status st = rg_model_leaf_nodes(g, s->model, w, err);
    if (!st && s->lora) st = rg_lora_attach(g, s->lora, w, s->eval_scale, false, err);
    return st;
}

// Rewrites the step graph to recompute each layer before its backward
// (training.md §9), keeping only the layer inputs, in checkpoint_dtype.
static rg_status add_recompute(rg_train_state *s, rg_node **bounds, rg_error *err) {
    int n_layer = (int)s->model->hp.n_layer;
    rg_status st = rg_graph_recompute(s->g, bounds, n_layer, s->cfg.checkpoint_dtype, s->ckpts, err);
    if (st) return st;
    s->recompute = true;
    s->n_ckpts = s->cfg.checkpoint_dtype == RG_TYPE_F32 ? 0 : n_layer;
    return RG_OK;
}

size_t rg_train_tensor_capacity(const rg_model *m) {
    // every model tensor, and room for LoRA's two per target
    return 2 * ((size_t)m->arch->n_global + (size_t)m->hp.n_layer * (size_t)m->arch->n_tensors);
}

static size_t physical_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

// training.flash_attn, decided here once for the forward, the backward (FLASH_ATTN_EXT's rule) and
// recompute (and once more by rg_train_step_choose when the materialized step would not fit the memory limit):
// on, off, or auto = on from FLASH_AUTO_CTX tokens, where bench_flash_attn measured the
// fused path faster than the materialized one on the CPU (T 4096: 1.13x; T 1024: slower), and
// whose [ctx, ctx] scores per layer are what stops long contexts fitting. A CUDA device takes the
// same rule once this build has the CUDA kernels (cuda/ops_flash.cu, the GPU's or the host
// execution's: head_dim up to 512); without them the materialized attention stays, so the step
// stays resident on the device (auto says so once; on is refused).
enum { FLASH_AUTO_CTX = 2048 };

rg_status rg_train_choose_flash(const rg_train_config *c, rg_device device, bool *flash, rg_error *err) {
    *flash = false;
    if (c->flash_attn == RG_FLASH_ATTN_OFF) return RG_OK;
    if (device != RG_DEVICE_CPU && !rg_op_cell(RG_BACKEND_CUDA, RG_OP_FLASH_ATTN_BACK).run) {
        if (c->flash_attn == RG_FLASH_ATTN_ON)
            return rg_fail(err, RG_ERR_UNSUPPORTED,
                           "train: training.flash_attn=on, but this build has no CUDA kernel for FLASH_ATTN_EXT/BACK: "
                           "set training.flash_attn=off or auto (the materialized attention) on the device");
        if (c->ctx >= FLASH_AUTO_CTX)
            fprintf(stderr, "train: training.flash_attn=auto: the materialized attention on the CUDA device "
                            "(this build has no CUDA kernel for FLASH_ATTN_EXT/BACK)\n");
        return RG_OK;
    }
    *flash = c->flash_attn == RG_FLASH_ATTN_ON || c->ctx >= FLASH_AUTO_CTX;
    return RG_OK;
}

static rg_status add_accumulation(rg_train_state *s, rg_error *err);

rg_status rg_train_step_build(rg_train_state *s, bool fused, bool recompute, rg_error *err) {
    const rg_model *m = s->model;
    const rg_train_config *cfg = &s->cfg;
    if (fused && m->hp.final_softcap > 0) {
        // LINEAR_CE computes the loss of w^T h itself: it has no place for the cap on the logits.
        if (!s->softcap_noted)
            fprintf(stderr, "train: %s caps its logits (final_logit_softcapping %g), which the fused cross-entropy does "
                    "not apply: the head and the loss run unfused\n", m->hp.arch_name, (double)m->hp.final_softcap);
        s->softcap_noted = true;
        fused = false;
    }
    rg_graph_free(s->g);
    s->g = rg_graph_new();
    s->n_tensors = 0;
    s->recompute = false;
    s->n_ckpts = 0;
    s->fused_ce = fused;
    s->ce = s->loss = s->loss_back = NULL;
    memset(s->grads, 0, rg_train_tensor_capacity(m) * sizeof *s->grads);
    if (s->params) memset(s->params, 0, rg_train_tensor_capacity(m) * sizeof *s->params);
    if (!s->g) return rg_fail(err, RG_ERR_NOMEM, "train: out of memory");
    rg_graph *g = s->g;
    rg_model_nodes w;
    memset(&w, 0, sizeof w);
    rg_status st = s->eval_only                 ? eval_nodes(s, g, &w, err)
                   : cfg->method == RG_TRAIN_FULL ? full_nodes(s, g, &w, err)
                                                  : lora_nodes(s, g, &w, err);
    if (st) return st;
    w.flash_attn = s->flash_attn;  // after the nodes: rg_model_leaf_nodes starts from the materialized attention
    const int64_t T = cfg->ctx;
    s->ids = rg_leaf(g, "ids", RG_TYPE_I32, 1, (int64_t[]){T}, NULL);
    s->pos = rg_leaf(g, "pos", RG_TYPE_I32, 1, (int64_t[]){T}, NULL);
    s->labels = rg_leaf(g, "labels", RG_TYPE_I32, 1, (int64_t[]){T}, NULL);
    // The dense document mask [T, T] only where a materialized attention reads it: a leaf no node reads is still
    // planned, and at ctx 4096 it was 64 MiB of flash attention's activations (test_train_flash's flatness check).
    bool reads_mask = false;
    for (int64_t il = 0; il < m->hp.n_layer; il++) reads_mask |= m->layers[il].mixer == RG_KIND_ATTN && !s->flash_attn;
    s->mask = reads_mask ? rg_leaf(g, "doc_mask", RG_TYPE_F32, 2, (int64_t[]){T, T}, NULL) : NULL;
    s->seg = NULL;
    for (int64_t il = 0; il < m->hp.n_layer && !s->seg; il++)  // recurrent layers restart at each document, and so does
        if (m->layers[il].mixer != RG_KIND_ATTN || s->flash_attn)  // flash attention (the mask is then not read)
            s->seg = rg_leaf(g, "doc_ids", RG_TYPE_I32, 1, (int64_t[]){T}, NULL);
    const int n_layer = (int)m->hp.n_layer;
    s->bounds = rg_arena_alloc(&g->arena, sizeof(rg_node *) * (size_t)(n_layer + 1), 8);
    s->ckpts = rg_arena_alloc(&g->arena, sizeof(rg_node *) * (size_t)n_layer, 8);
    if (!s->bounds || !s->ckpts) return rg_fail(err, RG_ERR_NOMEM, "train: out of memory");
    if (fused) {
        rg_node *hn = rg_model_forward_hidden(g, m, &w, s->ids, s->pos, s->mask, s->seg, s->bounds);  // [n_embd, T]
        s->ce = rg_linear_ce(g, w.output, hn, s->labels, -100, 0);                           // [T + 1]
        s->loss = rg_linear_ce_loss(g, s->ce);
    } else {
        rg_node *logits = rg_model_forward_bounds(g, m, &w, s->ids, s->pos, s->mask, s->seg, s->bounds);  // [V, T]
        s->loss = s->ce = rg_cross_entropy_loss(g, logits, s->labels, -100);
    }
    if (s->eval_only) {
        if ((st = rg_graph_error(g, err))) return st;
        s->ce->flags |= RG_NODE_OUTPUT, s->loss->flags |= RG_NODE_OUTPUT;
        g->n_forward = g->n_nodes;  // rg_train_state_eval_row runs the forward nodes
        return RG_OK;
    }
    if ((st = rg_graph_error(g, err)) || (st = rg_graph_backward(g, s->loss, err))) return st;
    // Named handles: the loss's backward node (its fp[0] carries the step's 1/N) and each
    // trainable tensor's gradient, from the parameter nodes recorded when they were made.
    s->loss_back = s->ce->back;
    if (!s->loss_back) return rg_fail(err, RG_ERR_ARG, "train: the step graph has no cross-entropy backward");
    for (int k = 0; k < s->n_tensors; k++) s->grads[k] = s->params[k] ? s->params[k]->grad : NULL;
    if (recompute && (st = add_recompute(s, s->bounds, err))) return st;
    return s->accumulate ? add_accumulation(s, err) : RG_OK;
}

// acc_k += grad_k at the end of the step graph (rg_acc_into), into the accumulator leaves s->acc, so
// each row leaves its gradient summed where the run lives (the first row adds to zeros). The
// leaves are external bytes unbound yet: the accumulators are allocated only once the run is
// known to fit, then bound (rg_train_step_bind_accumulators), so the plan the choice made is
// the step's whole plan.
static rg_status add_accumulation(rg_train_state *s, rg_error *err) {
    rg_graph *g = s->g;
    for (int k = 0; k < s->n_tensors; k++) {
        s->acc[k] = NULL;
        if (!s->grads[k]) continue;
        const rg_train_tensor *t = &s->tensors[k];
        rg_node *acc = s->acc[k] = rg_leaf(g, "grad_acc", RG_TYPE_F32, t->n_dims, t->ne, NULL);  // [ne]
        if (acc) acc->flags |= RG_NODE_EXTERNAL;
        rg_node *put = rg_acc_into(g, s->grads[k], acc);  // acc += grad in place: one pass, no temporary
        if (put) put->flags |= RG_NODE_OUTPUT;  // kept: it writes the accumulator
    }
    return rg_graph_error(g, err);
}

void rg_train_step_bind_accumulators(rg_train_state *s) {
    for (int k = 0; k < s->n_tensors; k++)
        if (s->acc[k]) rg_node_bind(s->acc[k], s->grad_bufs[k]);
}

// The bytes a run holds besides the step's plan: the weights (trained copies, or the mapped
// model under LoRA), the optimizer state and the accumulators.
static size_t fixed_bytes(const rg_train_state *s) {
    const rg_train_config *cfg = &s->cfg;
    size_t mapped = 0;
    for (uint64_t i = 0; i < s->model->file->n_tensors; i++) mapped += s->model->file->tensors[i].nbytes;
    return (cfg->method == RG_TRAIN_FULL ? s->weight_bytes : mapped) + s->state_bytes + s->grad_bytes;
}

rg_status rg_train_step_choose(rg_train_state *s, rg_device device, size_t memory_limit, rg_plan *plan, size_t *need,
                               size_t *limit, rg_error *err) {
    const rg_train_config *cfg = &s->cfg;
    const int threads = rg_threadpool_size(s->pool);
    bool recompute = cfg->recompute == RG_RECOMPUTE_LAYER ||
                     (cfg->recompute == RG_RECOMPUTE_AUTO && cfg->checkpoint_dtype != RG_TYPE_F32);
    rg_status st = rg_train_step_build(s, cfg->fused_ce == RG_FUSED_CE_ON, recompute, err);
    if (!st) st = rg_graph_plan(s->g, threads, 0, plan, err);
    if (st) return st;
    // The optimizer state and accumulators, known once the tensors are.
    size_t per_elem_state = cfg->optimizer == RG_OPTIM_ADAMW ? 8 : (cfg->momentum != 0.0 ? 4 : 0);
    s->state_bytes = s->grad_bytes = 0;
    for (int k = 0; k < s->n_tensors; k++) {
        const rg_train_tensor *t = &s->tensors[k];
        bool master = cfg->master_weights && t->type != RG_TYPE_F32;
        s->state_bytes += (size_t)t->nel * (per_elem_state + (master ? 4 : 0));
        if (s->accumulate) s->grad_bytes += (size_t)t->nel * 4;
    }
    // On a device its free memory is the limit, checked when the execs are made.
    *limit = memory_limit ? memory_limit : device != RG_DEVICE_CPU ? 0 : physical_memory();
    const size_t fixed = fixed_bytes(s);
    *need = fixed + plan->buffer_bytes + plan->scratch_bytes;
    if (*limit && *need > *limit && cfg->recompute == RG_RECOMPUTE_AUTO && !s->recompute) {
        // Keeping every activation does not fit: keep the layer inputs and recompute.
        if ((st = rg_train_step_build(s, s->fused_ce, true, err)) || (st = rg_graph_plan(s->g, threads, 0, plan, err)))
            return st;
        *need = fixed + plan->buffer_bytes + plan->scratch_bytes;
    }
    if (*limit && *need > *limit && cfg->fused_ce == RG_FUSED_CE_AUTO && !s->fused_ce) {
        // The logits and their gradient do not fit: the loss from the hidden states, by vocabulary chunks.
        if ((st = rg_train_step_build(s, true, s->recompute, err)) || (st = rg_graph_plan(s->g, threads, 0, plan, err)))
            return st;
        *need = fixed + plan->buffer_bytes + plan->scratch_bytes;
    }
    if (*limit && *need > *limit && cfg->flash_attn == RG_FLASH_ATTN_AUTO && !s->flash_attn && device == RG_DEVICE_CPU) {
        // The [ctx, ctx] scores (per layer, with their softmax and gradients) do not fit: attention through
        // FLASH_ATTN_EXT/BACK. So auto is flash where it is faster (from FLASH_AUTO_CTX, choose_flash) or where the
        // materialized scores do not fit (here). Last in this chain, after recompute and the fused loss: below
        // FLASH_AUTO_CTX it is the slower attention on the CPU, and the earlier steps keep their old choices.
        s->flash_attn = true;
        if ((st = rg_train_step_build(s, s->fused_ce, s->recompute, err)) ||
            (st = rg_graph_plan(s->g, threads, 0, plan, err)))
            return st;
        *need = fixed + plan->buffer_bytes + plan->scratch_bytes;
    }
    return RG_OK;
}
