// model_load.c - a model read by its architecture's table (model/arch.h): the
// keys (scalars, or per-layer arrays where the table allows them), the layer
// kinds, then every tensor the layers' kinds have, each checked against its
// shape rule. Tensors are used in place from the mapping, never copied.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/model.h"

typedef struct loader {
    const rg_gguf *g;
    const rg_arch *a;
    rg_hparams *hp;
    rg_layer *layers;    // NULL while the scalar keys are read
    rg_error *err;
} loader;

static void set_value(loader *l, const rg_arch_key *k, int64_t il, double v) {
    char *hp = (char *)l->hp;
    if (k->flags & RG_KEY_FLOAT) *(float *)(hp + k->hp) = (float)v;
    else if (il < 0) *(int64_t *)(hp + k->hp) = (int64_t)v;
    else *(int64_t *)((char *)&l->layers[il] + k->layer) = (int64_t)v;
}

// One integer key: a scalar, or an array of block_count values where the table allows one per layer (the scalar
// field then holds the largest); any other array must hold one value (llama.cpp writes some keys so).
static rg_status read_int(loader *l, const rg_arch_key *k, const char *key, const rg_gguf_kv *kv) {
    const bool per_layer = k->layer >= 0;
    const int64_t n_layer = l->hp->n_layer;
    if (kv->type == RG_GGUF_ARRAY && per_layer && kv->n != (uint64_t)n_layer)
        return rg_fail(l->err, RG_ERR_FORMAT, "%s: key '%s' has %llu values but %s.block_count is %lld (one per layer)",
                       l->g->path, key, (unsigned long long)kv->n, l->a->name, (long long)n_layer);
    const uint64_t n = kv->type == RG_GGUF_ARRAY ? kv->n : 1;
    uint64_t first = 0, max = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t v;
        if (!rg_gguf_kv_u64(kv, i, &v) || v > (uint64_t)INT32_MAX)
            return rg_fail(l->err, RG_ERR_FORMAT, "%s: key '%s' must be a non-negative integer", l->g->path, key);
        if (i == 0) first = v;
        if (v > max) max = v;
        if (!per_layer && v != first)
            return rg_fail(l->err, RG_ERR_UNSUPPORTED, "%s: key '%s' varies per layer, which this loader does not support",
                           l->g->path, key);
        if (per_layer) set_value(l, k, kv->type == RG_GGUF_ARRAY ? (int64_t)i : -1, (double)v);
    }
    if (kv->n == 0 && kv->type == RG_GGUF_ARRAY)
        return rg_fail(l->err, RG_ERR_FORMAT, "%s: key '%s' is an empty array", l->g->path, key);
    if (per_layer && kv->type != RG_GGUF_ARRAY)
        for (int64_t il = 0; il < n_layer; il++) set_value(l, k, il, (double)first);
    set_value(l, k, -1, (double)(per_layer ? max : first));
    return RG_OK;
}

// Reads the keys of the table: per_layer selects the pass (scalars first: block_count sizes the layers).
static rg_status read_keys(loader *l, bool per_layer) {
    for (int i = 0; i < l->a->n_keys; i++) {
        const rg_arch_key *k = &l->a->keys[i];
        if ((k->flags & RG_KEY_UNREAD) || (k->layer >= 0) != per_layer) continue;
        char key[128];
        snprintf(key, sizeof key, "%s.%s", l->a->name, k->suffix);
        const rg_gguf_kv *kv = rg_gguf_find(l->g, key);
        if (!kv) {
            if (k->flags & RG_KEY_REQUIRED)
                return rg_fail(l->err, RG_ERR_FORMAT, "%s: required key '%s' is missing", l->g->path, key);
            const double v = (k->flags & RG_KEY_DERIVED) ? -1.0 : k->def;
            set_value(l, k, -1, v);
            for (int64_t il = 0; per_layer && il < l->hp->n_layer; il++) set_value(l, k, il, v);
            continue;
        }
        if (k->flags & RG_KEY_FLOAT) {
            double d;
            rg_status s = rg_gguf_get_f64(l->g, key, &d, l->err);
            if (s) return s;
            if (!isfinite(d)) return rg_fail(l->err, RG_ERR_FORMAT, "%s: key '%s' is not finite", l->g->path, key);
            set_value(l, k, -1, d);
            continue;
        }
        rg_status s = read_int(l, k, key, kv);
        if (s) return s;
    }
    return RG_OK;
}

static rg_status read_hparams(loader *l, rg_layer **layers_out) {
    rg_hparams *hp = l->hp;
    memset(hp, 0, sizeof *hp);
    snprintf(hp->arch_name, sizeof hp->arch_name, "%s", l->a->name);
    hp->rope_mode = l->a->rope_mode;
    rg_status s = read_keys(l, false);
    if (s) return s;
    if (hp->n_layer <= 0 || hp->n_layer > 100000)
        return rg_fail(l->err, RG_ERR_FORMAT, "%s: %s.block_count is %lld, expected 1..100000", l->g->path, l->a->name,
                       (long long)hp->n_layer);
    l->layers = calloc((size_t)hp->n_layer, sizeof *l->layers);
    *layers_out = l->layers;
    if (!l->layers) return rg_fail(l->err, RG_ERR_NOMEM, "%s: out of memory", l->g->path);
    if ((s = read_keys(l, true))) return s;
    for (int64_t il = 0; il < hp->n_layer; il++) l->a->layer_kinds(hp, &l->layers[il], il);
    return l->a->check_hparams(l->g->path, hp, l->layers, l->err);
}

rg_status rg_model_read_hparams(const rg_gguf *g, const rg_arch *a, rg_hparams *hp, rg_layer **layers, rg_error *err) {
    loader l = {g, a, hp, NULL, err};
    *layers = NULL;
    rg_status s = read_hparams(&l, layers);
    if (s) {
        free(*layers);
        *layers = NULL;
    }
    return s;
}

// The tensor of row t (layer il, or -1 for a global one): present with exactly the shape of its rule (trailing 1s
// implied), or absent where the row is optional. Every error names the tensor and the expected shape.
static rg_status find_tensor(loader *l, const rg_arch_tensor *t, int64_t il, const rg_gguf_tensor **out) {
    const rg_layer *L = il >= 0 ? &l->layers[il] : NULL;
    char name[96], alt[96] = "", want_s[320];
    snprintf(name, sizeof name, t->name, (int)il);
    if (t->alt_name) snprintf(alt, sizeof alt, t->alt_name, (int)il);
    const rg_gguf_tensor *x = rg_gguf_find_tensor(l->g, name);
    if (!x && t->alt_name) x = rg_gguf_find_tensor(l->g, alt);
    *out = x;
    rg_arch_shape_str(t, l->hp, L, want_s, sizeof want_s);
    if (!x) {
        if (!rg_arch_tensor_required(l->a, t)) return RG_OK;
        return rg_fail(l->err, RG_ERR_FORMAT, "%s: tensor '%s'%s%s%s is missing (expected %s)", l->g->path, name,
                       t->alt_name ? " (or '" : "", alt, t->alt_name ? "')" : "", want_s);
    }
    int64_t want[4];
    rg_arch_shape(t, l->hp, L, want);
    if (x->ne[0] != want[0] || x->ne[1] != want[1] || x->ne[2] != want[2] || x->ne[3] != want[3])
        return rg_fail(l->err, RG_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected %s", l->g->path,
                       x->name, (long long)x->ne[0], (long long)x->ne[1], (long long)x->ne[2], (long long)x->ne[3], want_s);
    if ((t->flags & RG_T_F32) && x->type != RG_TYPE_F32 && x->type != RG_TYPE_F16 && x->type != RG_TYPE_BF16)
        return rg_fail(l->err, RG_ERR_UNSUPPORTED, "%s: tensor '%s' is %s; an elementwise weight must be f32, f16 or bf16",
                       l->g->path, x->name, rg_type_get(x->type)->name);
    return RG_OK;
}

static rg_status load(rg_model *m, rg_error *err) {
    rg_gguf *g = m->file;
    rg_gguf_str arch;
    rg_status s = rg_gguf_get_str(g, "general.architecture", &arch, err);
    if (s == RG_ERR_NOT_FOUND) return rg_fail(err, RG_ERR_FORMAT, "%s: no general.architecture key: not a model file", g->path);
    if (s) return s;
    m->arch = rg_arch_find(arch.ptr, arch.len);
    if (!m->arch)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s: architecture '%.*s' is not supported (supported: %s)", g->path,
                       (int)(arch.len > 40 ? 40 : arch.len), arch.ptr, rg_model_archs);
    rg_hparams *hp = &m->hp;
    loader l = {g, m->arch, hp, NULL, err};
    if ((s = read_hparams(&l, &m->layers))) return s;

    // The vocabulary size is the embedding's second dimension.
    const int64_t d = hp->n_embd;
    const rg_gguf_tensor *te = rg_gguf_find_tensor(g, "token_embd.weight");
    if (!te) return rg_fail(err, RG_ERR_FORMAT, "%s: tensor 'token_embd.weight' is missing", g->path);
    if (te->ne[0] != d || te->ne[1] <= 0 || te->ne[2] != 1 || te->ne[3] != 1)
        return rg_fail(err, RG_ERR_FORMAT, "%s: tensor 'token_embd.weight' has shape [%lld, %lld, %lld, %lld], expected "
                       "[n_embd = %lld, n_vocab]", g->path, (long long)te->ne[0], (long long)te->ne[1],
                       (long long)te->ne[2], (long long)te->ne[3], (long long)d);
    hp->n_vocab = te->ne[1];
    if (m->arch->check_tensors && (s = m->arch->check_tensors(m, err))) return s;
    for (int i = 0; i < m->arch->n_global; i++) {
        const rg_arch_tensor *t = &m->arch->global[i];
        const rg_gguf_tensor *x;
        if ((s = find_tensor(&l, t, -1, &x))) return s;
        if (t->role == RG_ROLE_TOKEN_EMBD) m->tok_embd = x;
        else if (t->role == RG_ROLE_OUTPUT_NORM) m->out_norm = x;
        else if (t->role == RG_ROLE_OUTPUT) m->output = x;
    }
    hp->tied = m->output == NULL;
    if (hp->tied) m->output = m->tok_embd;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        rg_layer *L = &m->layers[il];
        for (int i = 0; i < m->arch->n_tensors; i++) {
            const rg_arch_tensor *t = &m->arch->tensors[i];
            if (rg_arch_tensor_in_layer(t, L) && (s = find_tensor(&l, t, il, &L->t[t->role]))) return s;
        }
    }
    return RG_OK;
}

rg_status rg_model_from_gguf(rg_model **out, rg_gguf *g, rg_error *err) {
    *out = NULL;
    rg_model *m = calloc(1, sizeof *m);
    if (!m) return rg_fail(err, RG_ERR_NOMEM, "%s: out of memory", g->path);
    m->file = g;
    rg_status s = load(m, err);
    if (s) {
        m->file = NULL;  // the caller keeps g on failure
        rg_model_free(m);
        return s;
    }
    *out = m;
    return RG_OK;
}

rg_status rg_model_load(rg_model **out, const char *path, rg_error *err) {
    rg_gguf *g;
    rg_status s = rg_gguf_open(&g, path, err);
    if (s) return s;
    s = rg_model_from_gguf(out, g, err);
    if (s) rg_gguf_free(g);
    return s;
}

void rg_model_free(rg_model *m) {
    if (!m) return;
    free(m->layers);
    rg_gguf_free(m->file);
    free(m);
}
