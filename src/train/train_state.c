// train_state.c - see train_state.h.
#include "train/train_state.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/file.h"
#include "graph/backend.h"
#include "graph/plan.h"
#include "model/forward.h"
#include "tensor/half.h"

static void *alloc64(size_t n) {
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
    if (s->weight_bufs[k]) {  // a rebuilt graph (training.fused_ce=auto): the copy exists, maybe trained
        tt->w = s->weight_bufs[k];
        return rg_param(b->g, t->name, t->type, tt->n_dims, tt->ne, tt->w);
    }
    s->weight_bufs[k] = alloc64(bytes);
    if (!s->weight_bufs[k]) {
        b->st = rg_fail(b->err, RG_ERR_NOMEM, "train: out of memory copying '%s' (%.1f MiB)", t->name, mib(bytes));
        return NULL;
    }
    memcpy(s->weight_bufs[k], t->data, bytes);
    rg_file_map_release(&s->model->file->map, t->data, bytes);  // the copy is what trains: do not hold both
    s->weight_bytes += bytes;
    tt->w = s->weight_bufs[k];
    return rg_param(b->g, t->name, t->type, tt->n_dims, tt->ne, tt->w);
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
        for (int ab = 0; ab < 2; ab++) {
            int k = s->n_tensors++;
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

static size_t model_tensor_count(const rg_model *m) {
    return (size_t)m->arch->n_global + (size_t)m->hp.n_layer * (size_t)m->arch->n_tensors;
}

static size_t physical_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

// (Re)builds the step graph into s->g: the trainable tensors' nodes, the
// inputs, the forward, the loss (LINEAR_CE on the hidden states when fused,
// else CROSS_ENTROPY_LOSS on the logits), the backward, layer recompute when
// asked, and the plan (an eval-only state stops after the loss). A second call replaces the graph and keeps the
// trained buffers and the adapter (their order, hence the tensor ids, is the same).
// training.flash_attn, decided here once for the forward, the backward (FLASH_ATTN_EXT's rule) and
// recompute (and once more by create when the materialized step would not fit the memory limit):
// on, off, or auto = on from FLASH_AUTO_CTX tokens, where bench_flash_attn measured the
// fused path faster than the materialized one on the CPU (T 4096: 1.13x; T 1024: slower), and
// whose [ctx, ctx] scores per layer are what stops long contexts fitting. A CUDA device takes the
// same rule once this build has the CUDA kernels (cuda/ops_flash.cu, the GPU's or the host
// execution's: head_dim up to 512); without them the materialized attention stays, so the step
// stays resident on the device (auto says so once; on is refused).
enum { FLASH_AUTO_CTX = 2048 };

static rg_status choose_flash(const rg_train_config *c, rg_device device, bool *flash, rg_error *err) {
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

static rg_status build_step(rg_train_state *s, bool fused, bool recompute, rg_plan *plan, rg_error *err) {
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
    memset(s->grads, 0, model_tensor_count(m) * 2 * sizeof *s->grads);
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
        return rg_graph_plan(g, rg_threadpool_size(s->pool), 0, plan, err);
    }
    if ((st = rg_graph_error(g, err)) || (st = rg_graph_backward(g, s->loss, err))) return st;
    for (int i = g->n_forward; i < g->n_nodes; i++) {
        rg_node *n = g->nodes[i];
        if (fused ? n->op == RG_OP_LINEAR_CE_BACK && n->src[2] == s->ce
                  : n->op == RG_OP_CROSS_ENTROPY_LOSS_BACK && n->src[1] == s->ce->src[0])
            s->loss_back = n;
    }
    if (!s->loss_back) return rg_fail(err, RG_ERR_ARG, "train: the step graph has no cross-entropy backward");
    // The gradient node of every trainable tensor (matched by its bytes).
    for (int i = 0; i < g->n_forward; i++) {
        rg_node *n = g->nodes[i];
        if (!(n->flags & RG_NODE_PARAM)) continue;
        for (int k = 0; k < s->n_tensors; k++)
            if (s->tensors[k].w == n->t.data) s->grads[k] = n->grad;
    }
    if (recompute && (st = add_recompute(s, s->bounds, err))) return st;
    return rg_graph_plan(g, rg_threadpool_size(s->pool), 0, plan, err);
}

rg_status rg_train_state_create(rg_train_state **out, const rg_model *m, const rg_train_spec *spec, int64_t total_steps,
                                rg_error *err) {
    return rg_train_state_create_on(out, m, spec, total_steps, RG_DEVICE_CPU, err);
}

static rg_train_memory memory_of(const rg_train_state *s, const rg_plan *p);

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
    if ((st = choose_flash(cfg, device, &s->flash_attn, err))) {
        rg_train_state_free(s);
        return st;
    }
    // On a device the gradients are always summed into accumulators there (train_device.c).
    s->accumulate = cfg->batch_size * cfg->grad_accum > 1 || device != RG_DEVICE_CPU;
    size_t cap = model_tensor_count(m) * 2;
    s->tensors = calloc(cap, sizeof *s->tensors);
    s->weight_bufs = calloc(cap, sizeof *s->weight_bufs);
    s->grad_bufs = calloc(cap, sizeof *s->grad_bufs);
    s->grads = calloc(cap, sizeof *s->grads);
    if (!s->tensors || !s->weight_bufs || !s->grad_bufs || !s->grads) {
        rg_train_state_free(s);
        return rg_fail(err, RG_ERR_NOMEM, "train: out of memory");
    }
    int threads = cfg->threads > 0 ? (int)cfg->threads : 0;
    if ((st = rg_threadpool_create(&s->pool, threads, err))) {
        rg_train_state_free(s);
        return st;
    }
    // Plan first, so a run that cannot fit is refused before the big allocations.
    rg_plan plan;
    bool recompute = cfg->recompute == RG_RECOMPUTE_LAYER ||
                     (cfg->recompute == RG_RECOMPUTE_AUTO && cfg->checkpoint_dtype != RG_TYPE_F32);
    if ((st = build_step(s, cfg->fused_ce == RG_FUSED_CE_ON, recompute, &plan, err))) {
        rg_train_state_free(s);
        return st;
    }
    rg_graph *g = s->g;
    size_t per_elem_state = cfg->optimizer == RG_OPTIM_ADAMW ? 8 : (cfg->momentum != 0.0 ? 4 : 0);
    size_t state = 0, acc = 0;
    for (int k = 0; k < s->n_tensors; k++) {
        const rg_train_tensor *t = &s->tensors[k];
        bool master = cfg->master_weights && t->type != RG_TYPE_F32;
        state += (size_t)t->nel * (per_elem_state + (master ? 4 : 0));
        if (s->accumulate) acc += (size_t)t->nel * 4;
    }
    s->state_bytes = state;
    s->grad_bytes = acc;
    size_t mapped = 0;
    for (uint64_t i = 0; i < m->file->n_tensors; i++) mapped += m->file->tensors[i].nbytes;
    // On a device its free memory is the limit, checked when the execs are made.
    size_t limit = memory_limit ? memory_limit : device != RG_DEVICE_CPU ? 0 : physical_memory();
    size_t fixed = (cfg->method == RG_TRAIN_FULL ? s->weight_bytes : mapped) + state + acc;
    size_t need = fixed + plan.buffer_bytes + plan.scratch_bytes;
    if (limit && need > limit && cfg->recompute == RG_RECOMPUTE_AUTO && !s->recompute) {
        // Keeping every activation does not fit: keep the layer inputs and recompute.
        if ((st = add_recompute(s, s->bounds, err)) || (st = rg_graph_plan(g, rg_threadpool_size(s->pool), 0, &plan, err))) {
            rg_train_state_free(s);
            return st;
        }
        need = fixed + plan.buffer_bytes + plan.scratch_bytes;
    }
    if (limit && need > limit && cfg->fused_ce == RG_FUSED_CE_AUTO && !s->fused_ce) {
        // The logits and their gradient do not fit: the loss from the hidden states, by vocabulary chunks.
        if ((st = build_step(s, true, s->recompute, &plan, err))) {
            rg_train_state_free(s);
            return st;
        }
        g = s->g;
        need = fixed + plan.buffer_bytes + plan.scratch_bytes;
    }
    if (limit && need > limit && cfg->flash_attn == RG_FLASH_ATTN_AUTO && !s->flash_attn && device == RG_DEVICE_CPU) {
        // The [ctx, ctx] scores (per layer, with their softmax and gradients) do not fit: attention through
        // FLASH_ATTN_EXT/BACK. So auto is flash where it is faster (from FLASH_AUTO_CTX, choose_flash) or where the
        // materialized scores do not fit (here). Last in this chain, after recompute and the fused loss: below
        // FLASH_AUTO_CTX it is the slower attention on the CPU, and the earlier steps keep their old choices.
        s->flash_attn = true;
        if ((st = build_step(s, s->fused_ce, s->recompute, &plan, err))) {
            rg_train_state_free(s);
            return st;
        }
        g = s->g;
        need = fixed + plan.buffer_bytes + plan.scratch_bytes;
    }
    if (planned) {
        *planned = memory_of(s, &plan);
        rg_train_state_free(s);
        return RG_OK;
    }
    if (limit && need > limit) {
        size_t weights = cfg->method == RG_TRAIN_FULL ? s->weight_bytes : mapped;
        bool recomputing = s->recompute, any_attn = false;
        for (int64_t il = 0; il < m->hp.n_layer; il++) any_attn |= m->layers[il].mixer == RG_KIND_ATTN;
        const bool flashing = s->flash_attn || !any_attn;  // no hint for flash attention: on, or nothing to make flash
        rg_train_state_free(s);
        return rg_fail(err, RG_ERR_NOMEM,
                       "train: the run needs %.1f MiB but the limit is %.1f MiB (weights %.1f, gradients %.1f, optimizer "
                       "state %.1f, activations %.1f%s, scratch %.1f MiB); lower training.ctx, %suse LoRA, or raise "
                       "training.memory_limit_gb",
                       mib(need), mib(limit), mib(weights), mib(plan.grad_bytes + acc), mib(state),
                       mib(plan.buffer_bytes - plan.grad_bytes), recomputing ? " with layer recompute" : "",
                       mib(plan.scratch_bytes),
                       cfg->recompute == RG_RECOMPUTE_NONE ? "set training.recompute=layer, "
                       : cfg->fused_ce == RG_FUSED_CE_OFF  ? "set training.fused_ce=on, "
                       : recomputing && cfg->checkpoint_dtype == RG_TYPE_F32 ? "set training.checkpoint_dtype=bf16, "
                       : !flashing && device == RG_DEVICE_CPU                ? "set training.flash_attn=on, "
                                                                             : "");
    }
    // Optimizer state, masters, accumulators.
    for (int k = 0; k < s->n_tensors; k++) {
        rg_train_tensor *t = &s->tensors[k];
        size_t n4 = (size_t)t->nel * 4;
        if (cfg->optimizer == RG_OPTIM_ADAMW || cfg->momentum != 0.0) t->m = alloc64(n4);
        if (cfg->optimizer == RG_OPTIM_ADAMW) t->v = alloc64(n4);
        if (cfg->master_weights && t->type != RG_TYPE_F32) t->master = alloc64(n4);
        if (s->accumulate) s->grad_bufs[k] = alloc64(n4);
        if ((!t->m && (cfg->optimizer == RG_OPTIM_ADAMW || cfg->momentum != 0.0)) ||
            (!t->v && cfg->optimizer == RG_OPTIM_ADAMW) || (!t->master && cfg->master_weights && t->type != RG_TYPE_F32) ||
            (s->accumulate && !s->grad_bufs[k])) {
            rg_train_state_free(s);
            return rg_fail(err, RG_ERR_NOMEM, "train: out of memory for the optimizer state of '%s'", t->name);
        }
        if (t->m) memset(t->m, 0, n4);
        if (t->v) memset(t->v, 0, n4);
        if (t->master) {
            if (t->type == RG_TYPE_F16) rg_fp16_to_fp32_row(t->w, t->master, t->nel);
            else rg_bf16_to_fp32_row(t->w, t->master, t->nel);
        }
    }
    if (device != RG_DEVICE_CPU) {
        for (int k = 0; k < s->n_tensors; k++) memset(s->grad_bufs[k], 0, (size_t)s->tensors[k].nel * 4);
        if ((st = rg_train_device_add_accumulation(s, err)) ||
            (st = rg_train_device_create(s, device, err))) {
            rg_train_state_free(s);
            return st;
        }
        for (int k = 0; k < s->n_tensors; k++) s->tensors[k].grad = s->grad_bufs[k];
        *out = s;
        return RG_OK;
    }
    rg_exec_opts eo = {.pool = s->pool};
    if ((st = rg_exec_create(&s->ex, g, &eo, err))) {
        rg_train_state_free(s);
        return st;
    }
    for (int k = 0; k < s->n_tensors; k++) {
        float *gp = s->grads[k] ? (float *)s->grads[k]->t.data : NULL;
        if (!s->accumulate) s->grad_bufs[k] = gp;
        if (!s->grad_bufs[k]) {
            // no path from the loss (cannot happen for a llama-family model); a zero gradient keeps the step defined
            s->grad_bufs[k] = alloc64((size_t)s->tensors[k].nel * 4);
            if (!s->grad_bufs[k]) {
                rg_train_state_free(s);
                return rg_fail(err, RG_ERR_NOMEM, "train: out of memory");
            }
            memset(s->grad_bufs[k], 0, (size_t)s->tensors[k].nel * 4);
            s->grads[k] = NULL;
        }
        s->tensors[k].grad = s->grad_bufs[k];
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
    s->grads = calloc(model_tensor_count(m) * 2, sizeof *s->grads);
    if (!s->grads) st = rg_fail(err, RG_ERR_NOMEM, "eval: out of memory");
    if (!st) st = choose_flash(cfg, RG_DEVICE_CPU, &s->flash_attn, err);
    if (!st) st = rg_threadpool_create(&s->pool, cfg->threads > 0 ? (int)cfg->threads : 0, err);
    rg_plan plan;
    if (!st) st = build_step(s, cfg->fused_ce == RG_FUSED_CE_ON, false, &plan, err);
    rg_exec_opts eo = {.pool = s->pool};
    if (!st) st = rg_exec_create(&s->ex, s->g, &eo, err);
    if (st) {
        rg_train_state_free(s);
        return st;
    }
    *out = s;
    return RG_OK;
}

void rg_train_state_free(rg_train_state *s) {
    if (!s) return;
    rg_train_device_free(s);
    rg_exec_free(s->ex);
    rg_graph_free(s->g);
    for (int k = 0; k < s->n_tensors; k++) {
        rg_train_tensor *t = &s->tensors[k];
        free(t->m), free(t->v), free(t->master);
        if (s->weight_bufs) free(s->weight_bufs[k]);
        if (s->grad_bufs && (s->accumulate || !s->grads[k])) free(s->grad_bufs[k]);
    }
    rg_threadpool_free(s->pool);
    rg_lora_free(s->lora);
    free(s->tensors), free(s->weight_bufs), free(s->grad_bufs), free(s->grads);
    free(s);
}

rg_train_memory rg_train_state_memory(const rg_train_state *s) {
    rg_train_memory r = memory_of(s, rg_exec_plan(s->ex));
    if (s->dev_run) rg_train_device_memory(s, &r);
    return r;
}

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

typedef struct acc_job {
    float *acc;
    const float *g;
    int64_t n;
    bool first;
} acc_job;

static void acc_range(void *p, int ith, int nth) {
    acc_job *j = p;
    int64_t i0, i1;
    rg_split_range(j->n, ith, nth, &i0, &i1);
    if (j->first) memcpy(j->acc + i0, j->g + i0, sizeof(float) * (size_t)(i1 - i0));
    else
        for (int64_t i = i0; i < i1; i++) j->acc[i] += j->g[i];
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
    if (s->accumulate && !s->dev_run) {
        for (int k = 0; k < s->n_tensors; k++) {
            if (!s->grads[k]) continue;
            acc_job j = {.acc = s->grad_bufs[k], .g = s->grads[k]->t.data, .n = s->tensors[k].nel,
                         .first = s->rows_this_step == 0};
            rg_threadpool_run(s->pool, acc_range, &j);
        }
    }
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

void rg_train_state_discard(rg_train_state *s) {
    s->rows_this_step = 0;
    rg_error ignored;
    if (s->dev_run) rg_train_device_discard(s, &ignored);  // a failure here shows at the next run
}

rg_status rg_train_state_step(rg_train_state *s, double *grad_norm, double *lr_used, bool *skipped, rg_error *err) {
    *skipped = false;
    // A step whose rows had no targets at all has nothing to apply.
    if (s->rows_this_step == 0) {
        for (int k = 0; k < s->n_tensors; k++) memset(s->tensors[k].grad, 0, (size_t)s->tensors[k].nel * 4);
    }
    s->rows_this_step = 0;
    double norm;
    if (s->dev_run) {
        rg_status ns = rg_train_device_norm(s, &norm, err);
        if (ns) return ns;
    } else {
        norm = rg_grad_global_norm(s->tensors, s->n_tensors, s->pool);
    }
    *grad_norm = norm;
    const rg_train_config *c = &s->cfg;
    double lr = s->lr * rg_schedule_factor((int)c->schedule, s->t, c->warmup_steps, s->total_steps);
    *lr_used = lr;
    if (!isfinite(norm)) {
        *skipped = true;
        return s->dev_run ? rg_train_device_discard(s, err) : RG_OK;
    }
    rg_optim_step st = {.optimizer = (int)c->optimizer, .lr = lr, .beta1 = c->beta1, .beta2 = c->beta2, .eps = c->eps,
                        .weight_decay = c->weight_decay, .momentum = c->momentum, .t = s->t + 1, .seed = c->seed,
                        .clip = rg_clip_coef(norm, c->clip_grad_norm)};
    rg_status rs = s->dev_run ? rg_train_device_update(s, &st, err) : rg_optim_apply(s->tensors, s->n_tensors, &st, s->pool, err);
    if (rs) return rs;
    s->t++;
    return RG_OK;
}
