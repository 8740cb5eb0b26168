// lora.c - see lora.h: LoRA adapters (init, load, save, attach); merging is lora_merge.c.
#include "model/lora.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tensor/quant/quant.h"
#include "train/philox.h"

static const char *const target_names[RG_LORA_N_TARGETS] = {
    "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "in_proj", "out_proj",
};

// The keyed stream of a pair's A: layer * 7 + target for the first seven targets (the ids
// they had before in_proj and out_proj existed, so every llama-family adapter starts from the
// same values as before), and a range of their own above 2^23 for in_proj and out_proj.
static uint32_t init_stream(int64_t il, int t) {
    if (t < RG_LORA_TARGET_IN) return (uint32_t)(il * RG_LORA_TARGET_IN + t);
    return (1u << 23) + (uint32_t)(il * (RG_LORA_N_TARGETS - RG_LORA_TARGET_IN) + (t - RG_LORA_TARGET_IN));
}

const char *rg_lora_target_name(int target) {
    return target >= 0 && target < RG_LORA_N_TARGETS ? target_names[target] : NULL;
}

rg_status rg_lora_parse_targets(const char *list, uint32_t *mask, rg_error *err) {
    *mask = 0;
    const char *p = list ? list : "";
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        bool found = false;
        if (n == 3 && !strncmp(p, "all", 3)) *mask |= RG_LORA_TARGETS_ALL, found = true;
        for (int t = 0; t < RG_LORA_N_TARGETS && !found; t++)
            if (strlen(target_names[t]) == n && !strncmp(p, target_names[t], n)) *mask |= 1u << t, found = true;
        if (!found && n > 0)
            return rg_fail(err, RG_ERR_ARG,
                           "lora: unknown target '%.*s' (valid: all, attn_q, attn_k, attn_v, attn_output, ffn_gate, "
                           "ffn_up, ffn_down, in_proj, out_proj)", (int)(n > 64 ? 64 : n), p);
        p += n;
        if (*p == ',') p++;
    }
    if (!*mask) return rg_fail(err, RG_ERR_ARG, "lora: no targets given");
    return RG_OK;
}

// ", attn_q, attn_k, ..." (" none yet" when the architecture has none): the names of its LoRA targets.
static void targets_list(const rg_arch *a, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = '\0';
    for (int t = 0; t < RG_LORA_N_TARGETS && o < cap; t++)
        if (rg_arch_lora_row(a, t)) o += (size_t)snprintf(buf + o, cap - o, "%s %s", o ? "," : "", target_names[t]);
    if (!o) snprintf(buf, cap, " none yet");
}

// The base tensor a target adapts in layer il (the arch table's lora column), NULL where the layer has none.
static const rg_gguf_tensor *target_tensor(const rg_model *m, int64_t il, int t) {
    const rg_arch_tensor *row = rg_arch_lora_row(m->arch, t);
    return row ? m->layers[il].t[row->role] : NULL;
}

static rg_lora *lora_new(const rg_model *m, rg_error *err) {
    rg_lora *l = calloc(1, sizeof *l);
    if (l) l->pairs = calloc((size_t)(m->hp.n_layer > 0 ? m->hp.n_layer : 1) * RG_LORA_N_TARGETS, sizeof *l->pairs);
    if (!l || !l->pairs) {
        free(l);
        rg_fail(err, RG_ERR_NOMEM, "lora: out of memory");
        return NULL;
    }
    l->n_layer = m->hp.n_layer;
    l->arch = m->arch;
    return l;
}

void rg_lora_free(rg_lora *l) {
    if (!l) return;
    for (int64_t i = 0; l->pairs && i < l->n_layer * RG_LORA_N_TARGETS; i++) {
        free(l->pairs[i].a);
        free(l->pairs[i].b);
    }
    free(l->pairs);
    free(l);
}

float rg_lora_scale(const rg_lora *l, float user_scale) {
    return (float)((double)user_scale * (double)l->alpha / (double)l->rank);
}

// Allocates a pair's buffers for W (n_in, n_out) at the given rank; B zeroed.
static rg_status pair_alloc(rg_lora_pair *p, const rg_gguf_tensor *w, int64_t rank, rg_error *err) {
    snprintf(p->name, sizeof p->name, "%s", w->name);
    p->n_in = w->ne[0];
    p->n_out = w->ne[1];
    p->a = malloc(sizeof(float) * (size_t)(p->n_in * rank));
    p->b = calloc((size_t)(rank * p->n_out), sizeof(float));
    if (!p->a || !p->b) return rg_fail(err, RG_ERR_NOMEM, "lora: out of memory for the pair of '%s'", w->name);
    return RG_OK;
}

rg_status rg_lora_init(rg_lora **out, const rg_model *m, int64_t rank, float alpha, uint32_t targets, uint64_t seed,
                       rg_error *err) {
    *out = NULL;
    if (rank < 1 || rank > 65536) return rg_fail(err, RG_ERR_ARG, "lora: rank %lld must be in 1..65536", (long long)rank);
    if (!isfinite(alpha) || alpha <= 0)
        return rg_fail(err, RG_ERR_ARG, "lora: alpha %g must be a positive number", (double)alpha);
    if (!targets || (targets & ~RG_LORA_TARGETS_ALL))
        return rg_fail(err, RG_ERR_ARG, "lora: target mask 0x%x must be a nonzero subset of 0x%x", targets,
                       RG_LORA_TARGETS_ALL);
    rg_lora *l = lora_new(m, err);
    if (!l) return RG_ERR_NOMEM;
    l->rank = rank, l->alpha = alpha, l->targets = targets;
    int64_t n_pairs = 0;
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        for (int t = 0; t < RG_LORA_N_TARGETS; t++) {
            if (!(targets & (1u << t))) continue;
            const rg_gguf_tensor *w = target_tensor(m, il, t);
            if (!w) continue;  // not in this layer's kinds (lfm2's conv layers have no attn_q)
            rg_lora_pair *p = &l->pairs[il * RG_LORA_N_TARGETS + t];
            rg_status s = pair_alloc(p, w, rank, err);
            if (s) {
                rg_lora_free(l);
                return s;
            }
            n_pairs++;
            // PEFT's kaiming_uniform_(a=sqrt 5): bound = 1/sqrt(fan_in); U in [0, 1) from 24 bits.
            const float bound = (float)(1.0 / sqrt((double)p->n_in));
            const uint32_t tensor_id = init_stream(il, t);
            const int64_t n = p->n_in * rank;
            for (int64_t i = 0; i < n; i += 4) {
                uint32_t r[4];
                rg_rand_block4(seed, 0, RG_RAND_PURPOSE_LORA_INIT, tensor_id, (uint64_t)i >> 2, r);
                for (int j = 0; j < 4 && i + j < n; j++) {
                    float u = (float)(r[j] >> 8) * 0x1p-24f;
                    p->a[i + j] = bound * (2.0f * u - 1.0f);
                }
            }
        }
    }
    if (!n_pairs) {
        char list[160];
        targets_list(m->arch, list, sizeof list);
        rg_lora_free(l);
        return rg_fail(err, RG_ERR_ARG, "lora: this %s model has none of the targeted projections (mask 0x%x); its "
                       "LoRA targets:%s", m->hp.arch_name, targets, list);
    }
    *out = l;
    return RG_OK;
}

// ---------------------------------------------------------------------------
// Loading

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static void shape_str(const rg_gguf_tensor *t, char *buf, size_t cap) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (uint32_t d = 0; d < (t->n_dims ? t->n_dims : 1) && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

// Finds (layer, target) of a base tensor name; false when it is not a target.
static bool find_target(const rg_model *m, const char *base, int64_t *il_out, int *t_out) {
    for (int64_t il = 0; il < m->hp.n_layer; il++)
        for (int t = 0; t < RG_LORA_N_TARGETS; t++) {
            const rg_gguf_tensor *w = target_tensor(m, il, t);
            if (w && !strcmp(w->name, base)) {
                *il_out = il, *t_out = t;
                return true;
            }
        }
    return false;
}

// Converts a lora tensor to F32 into dst (n elements).
static rg_status to_f32(const rg_gguf *f, const rg_gguf_tensor *t, float *dst, rg_error *err) {
    int64_t n = t->ne[0] * t->ne[1];
    const rg_quant_ops *ops = rg_quant_get(t->type);
    if (t->type == RG_TYPE_F32) {
        memcpy(dst, t->data, sizeof(float) * (size_t)n);
        return RG_OK;
    }
    if (!ops->dequant)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which cannot be read (use f32, f16 or bf16)",
                       f->path, t->name, rg_type_get(t->type)->name);
    char what[160];
    snprintf(what, sizeof what, "%s: tensor '%s'", f->path, t->name);
    return rg_dequantize(t->type, t->data, dst, n, what, err);
}

static rg_status check_meta(const rg_gguf *f, const rg_model *m, float *alpha, rg_error *err) {
    rg_gguf_str s;
    rg_status st = rg_gguf_get_str(f, "general.type", &s, NULL);
    if (st || !rg_gguf_str_eq(s, "adapter"))
        return rg_fail(err, RG_ERR_FORMAT, "%s: general.type is %s%.*s%s, expected \"adapter\": not a LoRA adapter file",
                       f->path, st ? "missing" : "\"", st ? 0 : (int)(s.len > 40 ? 40 : s.len), st ? "" : s.ptr,
                       st ? "" : "\"");
    st = rg_gguf_get_str(f, "adapter.type", &s, NULL);
    if (st || !rg_gguf_str_eq(s, "lora"))
        return rg_fail(err, RG_ERR_FORMAT, "%s: adapter.type is %s%.*s%s, expected \"lora\"", f->path,
                       st ? "missing" : "\"", st ? 0 : (int)(s.len > 40 ? 40 : s.len), st ? "" : s.ptr, st ? "" : "\"");
    st = rg_gguf_get_str(f, "general.architecture", &s, NULL);
    if (st) return rg_fail(err, RG_ERR_FORMAT, "%s: no general.architecture key", f->path);
    if (!rg_gguf_str_eq(s, m->hp.arch_name))
        return rg_fail(err, RG_ERR_ARG, "%s: the adapter is for architecture '%.*s' but the model is '%s'", f->path,
                       (int)(s.len > 40 ? 40 : s.len), s.ptr, m->hp.arch_name);
    double a = 0;
    st = rg_gguf_get_f64(f, "adapter.lora.alpha", &a, err);
    if (st == RG_ERR_NOT_FOUND) a = 0;  // llama.cpp: no alpha means the scale is the user's alone (alpha = rank)
    else if (st) return st;
    if (!isfinite(a) || fabs(a) > 3e38) return rg_fail(err, RG_ERR_FORMAT, "%s: adapter.lora.alpha %g is not finite", f->path, a);
    *alpha = (float)a;
    return RG_OK;
}

static rg_status load_pairs(rg_lora *l, const rg_gguf *f, const rg_model *m, float alpha, rg_error *err) {
    const char *rank_from = NULL;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const rg_gguf_tensor *t = &f->tensors[i];
        bool is_a = ends_with(t->name, ".lora_a"), is_b = ends_with(t->name, ".lora_b");
        if (!is_a && !is_b) {
            if (ends_with(t->name, "_norm.weight")) continue;  // llama.cpp skips these too
            return rg_fail(err, RG_ERR_FORMAT, "%s: tensor '%s' is not a LoRA tensor (names end in .lora_a or .lora_b)",
                           f->path, t->name);
        }
        char base[RG_GGUF_MAX_NAME + 1];
        snprintf(base, sizeof base, "%.*s", (int)(strlen(t->name) - 7), t->name);
        int64_t il;
        int tg;
        if (!find_target(m, base, &il, &tg)) {
            if (rg_gguf_find_tensor(m->file, base)) {
                char list[160];
                targets_list(m->arch, list, sizeof list);
                return rg_fail(err, RG_ERR_UNSUPPORTED, "%s: tensor '%s': LoRA on '%s' is not supported (only%s)",
                               f->path, t->name, base, list);
            }
            return rg_fail(err, RG_ERR_ARG, "%s: tensor '%s': the base tensor '%s' does not exist in the model %s (wrong base model?)",
                           f->path, t->name, base, m->file->path);
        }
        const rg_gguf_tensor *w = target_tensor(m, il, tg);
        const int64_t n_in = w->ne[0], n_out = w->ne[1];
        char got[96], ws[96];
        shape_str(t, got, sizeof got);
        shape_str(w, ws, sizeof ws);
        if (t->n_dims != 2 || (is_a ? t->ne[0] != n_in : t->ne[1] != n_out) || t->ne[0] < 1 || t->ne[1] < 1) {
            if (is_a)
                return rg_fail(err, RG_ERR_ARG, "%s: tensor '%s' has shape %s, expected [%lld, rank] for base '%s' %s",
                               f->path, t->name, got, (long long)n_in, base, ws);
            return rg_fail(err, RG_ERR_ARG, "%s: tensor '%s' has shape %s, expected [rank, %lld] for base '%s' %s",
                           f->path, t->name, got, (long long)n_out, base, ws);
        }
        int64_t r = is_a ? t->ne[1] : t->ne[0];
        if (!rank_from) l->rank = r, rank_from = t->name;
        else if (r != l->rank)
            return rg_fail(err, RG_ERR_ARG,
                           "%s: tensor '%s' %s has rank %lld but '%s' has rank %lld: ranks must be equal", f->path,
                           t->name, got, (long long)r, rank_from, (long long)l->rank);
        rg_lora_pair *p = &l->pairs[il * RG_LORA_N_TARGETS + tg];
        if (!p->a && !p->b) {
            snprintf(p->name, sizeof p->name, "%s", w->name);
            p->n_in = n_in, p->n_out = n_out;
        }
        float **dst = is_a ? &p->a : &p->b;
        *dst = malloc(sizeof(float) * (size_t)(t->ne[0] * t->ne[1]));
        if (!*dst) return rg_fail(err, RG_ERR_NOMEM, "lora: out of memory for '%s'", t->name);
        rg_status s = to_f32(f, t, *dst, err);
        if (s) return s;
        for (int64_t k = 0; k < t->ne[0] * t->ne[1]; k++)
            if (!isfinite((*dst)[k]))
                return rg_fail(err, RG_ERR_FORMAT, "%s: tensor '%s' holds a non-finite value at element %lld", f->path,
                               t->name, (long long)k);
        l->targets |= 1u << tg;
    }
    if (!rank_from) return rg_fail(err, RG_ERR_FORMAT, "%s: the adapter has no .lora_a/.lora_b tensors", f->path);
    for (int64_t i = 0; i < l->n_layer * RG_LORA_N_TARGETS; i++) {
        rg_lora_pair *p = &l->pairs[i];
        if (!p->a != !p->b)
            return rg_fail(err, RG_ERR_FORMAT, "%s: '%s.%s' has no matching '%s.%s'", f->path, p->name,
                           p->a ? "lora_a" : "lora_b", p->name, p->a ? "lora_b" : "lora_a");
    }
    l->alpha = alpha != 0 ? alpha : (float)l->rank;
    return RG_OK;
}

rg_status rg_lora_load(rg_lora **out, const char *path, const rg_model *m, rg_error *err) {
    *out = NULL;
    rg_gguf *f = NULL;
    rg_status s = rg_gguf_open(&f, path, err);
    if (s) return s;
    float alpha = 0;
    s = check_meta(f, m, &alpha, err);
    rg_lora *l = s ? NULL : lora_new(m, err);
    if (!s && !l) s = RG_ERR_NOMEM;
    if (!s) s = load_pairs(l, f, m, alpha, err);
    rg_gguf_free(f);
    if (s) {
        rg_lora_free(l);
        return s;
    }
    *out = l;
    return RG_OK;
}

rg_status rg_lora_save(const rg_lora *l, const rg_model *m, const char *path, rg_error *err) {
    if (l->n_layer != m->hp.n_layer)
        return rg_fail(err, RG_ERR_ARG, "lora: the adapter has %lld layers but the model %lld", (long long)l->n_layer,
                       (long long)m->hp.n_layer);
    rg_gguf *g = rg_gguf_new();
    if (!g) return rg_fail(err, RG_ERR_NOMEM, "lora: out of memory");
    rg_status s = rg_gguf_set_str(g, "general.architecture", m->hp.arch_name, err);
    if (!s) s = rg_gguf_set_str(g, "general.type", "adapter", err);
    if (!s) s = rg_gguf_set_str(g, "adapter.type", "lora", err);
    if (!s) s = rg_gguf_set_f32(g, "adapter.lora.alpha", l->alpha, err);
    for (int64_t i = 0; !s && i < l->n_layer * RG_LORA_N_TARGETS; i++) {
        const rg_lora_pair *p = &l->pairs[i];
        if (!p->a) continue;
        char name[128];
        snprintf(name, sizeof name, "%s.lora_a", p->name);
        s = rg_gguf_add_tensor(g, name, RG_TYPE_F32, 2, (int64_t[]){p->n_in, l->rank}, p->a, err);
        snprintf(name, sizeof name, "%s.lora_b", p->name);
        if (!s) s = rg_gguf_add_tensor(g, name, RG_TYPE_F32, 2, (int64_t[]){l->rank, p->n_out}, p->b, err);
    }
    if (!s) s = rg_gguf_write(g, path, err);
    rg_gguf_free(g);
    return s;
}

// ---------------------------------------------------------------------------
// The forward hook's nodes

rg_status rg_lora_attach(rg_graph *g, const rg_lora *l, rg_model_nodes *w, float user_scale, bool trainable,
                         rg_error *err) {
    if (!l || !w || !w->layers) return rg_fail(err, RG_ERR_ARG, "lora attach: no adapter or no model nodes");
    float scale = rg_lora_scale(l, user_scale);
    if (scale == 0.0f) return rg_graph_error(g, err);  // scale 0: no LoRA nodes, the plain graph
    for (int64_t il = 0; il < l->n_layer; il++) {
        rg_layer_nodes *N = &w->layers[il];
        for (int t = 0; t < RG_LORA_N_TARGETS; t++) {
            const rg_lora_pair *p = &l->pairs[il * RG_LORA_N_TARGETS + t];
            if (!p->a) continue;
            const rg_arch_tensor *row = rg_arch_lora_row(l->arch, t);
            rg_node *W = row ? N->w[row->role] : NULL;
            if (!W || W->t.ne[0] != p->n_in || W->t.ne[1] != p->n_out)
                return rg_fail(err, RG_ERR_ARG, "lora attach: '%s' is [%lld, %lld] in the adapter but %s in the graph",
                               p->name, (long long)p->n_in, (long long)p->n_out, W ? "of another shape" : "missing");
            char na[RG_GGUF_MAX_NAME + 1], nb[RG_GGUF_MAX_NAME + 1];
            snprintf(na, sizeof na, "%.50s.lora_a", p->name);
            snprintf(nb, sizeof nb, "%.50s.lora_b", p->name);
            const int64_t ne_a[2] = {p->n_in, l->rank}, ne_b[2] = {l->rank, p->n_out};
            N->lora_a[t] = trainable ? rg_param(g, na, RG_TYPE_F32, 2, ne_a, p->a) : rg_leaf(g, na, RG_TYPE_F32, 2, ne_a, p->a);
            N->lora_b[t] = trainable ? rg_param(g, nb, RG_TYPE_F32, 2, ne_b, p->b) : rg_leaf(g, nb, RG_TYPE_F32, 2, ne_b, p->b);
        }
        N->lora_scale = scale;
    }
    return rg_graph_error(g, err);
}

bool rg_lora_parse_spec(const char *spec, char *path_out, size_t cap, float *scale) {
    *scale = 1.0f;
    size_t n = strlen(spec);
    const char *colon = strrchr(spec, ':');
    if (colon && colon[1]) {
        char *end;
        errno = 0;
        double v = strtod(colon + 1, &end);
        if (!*end && !errno && isfinite(v) && fabs(v) < 1e30) {
            *scale = (float)v;
            n = (size_t)(colon - spec);
        }
    }
    if (n == 0 || n >= cap) return false;
    memcpy(path_out, spec, n);
    path_out[n] = '\0';
    return true;
}
