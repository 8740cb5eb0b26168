// model_load.c - hyperparameters and tensors of llama-family models
// (architectures.md §0.3, §1): read, checked against each other, never copied.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/model.h"

const char *const rg_model_archs = "llama, qwen2, qwen3";

typedef struct loader {
    rg_gguf *g;
    const char *arch;
    rg_error *err;
} loader;

static rg_status get_u(loader *l, const char *suffix, int64_t *out, bool required, int64_t def) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", l->arch, suffix);
    const rg_gguf_kv *kv = rg_gguf_find(l->g, key);
    if (!kv) {
        if (required) return rg_fail(l->err, RG_ERR_FORMAT, "%s: required key '%s' is missing", l->g->path, key);
        *out = def;
        return RG_OK;
    }
    // Per-layer arrays (one value per layer) are accepted when all layers agree.
    uint64_t v;
    if (!rg_gguf_kv_u64(kv, 0, &v) || v > (uint64_t)INT32_MAX)
        return rg_fail(l->err, RG_ERR_FORMAT, "%s: key '%s' must be a non-negative integer", l->g->path, key);
    for (uint64_t i = 1; kv->type == RG_GGUF_ARRAY && i < kv->n; i++) {
        uint64_t w;
        if (!rg_gguf_kv_u64(kv, i, &w) || w != v)
            return rg_fail(l->err, RG_ERR_UNSUPPORTED, "%s: key '%s' varies per layer, which this loader does not support",
                           l->g->path, key);
    }
    *out = (int64_t)v;
    return RG_OK;
}

static rg_status get_f(loader *l, const char *suffix, float *out, bool required, float def) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", l->arch, suffix);
    double d;
    rg_status s = rg_gguf_get_f64(l->g, key, &d, l->err);
    if (s == RG_ERR_NOT_FOUND && !required) {
        *out = def;
        return RG_OK;
    }
    if (s == RG_ERR_NOT_FOUND) return rg_fail(l->err, RG_ERR_FORMAT, "%s: required key '%s' is missing", l->g->path, key);
    if (s) return s;
    if (!isfinite(d)) return rg_fail(l->err, RG_ERR_FORMAT, "%s: key '%s' is not finite", l->g->path, key);
    *out = (float)d;
    return RG_OK;
}

// A tensor with exactly the expected shape (ne in ggml order; trailing 1s implied).
static rg_status tensor(loader *l, const char *name, bool required, int n_dims, int64_t ne0, int64_t ne1,
                        const rg_gguf_tensor **out) {
    const rg_gguf_tensor *t = rg_gguf_find_tensor(l->g, name);
    *out = t;
    if (!t) return required ? rg_fail(l->err, RG_ERR_FORMAT, "%s: tensor '%s' is missing", l->g->path, name) : RG_OK;
    int64_t want[4] = {ne0, n_dims > 1 ? ne1 : 1, 1, 1};
    if (t->ne[0] != want[0] || t->ne[1] != want[1] || t->ne[2] != 1 || t->ne[3] != 1)
        return rg_fail(l->err, RG_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                       l->g->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3], (long long)want[0], (long long)want[1]);
    return RG_OK;
}

static rg_status load(rg_model *m, rg_error *err) {
    rg_gguf *g = m->file;
    rg_gguf_str arch;
    rg_status s = rg_gguf_get_str(g, "general.architecture", &arch, err);
    if (s == RG_ERR_NOT_FOUND) return rg_fail(err, RG_ERR_FORMAT, "%s: no general.architecture key: not a model file", g->path);
    if (s) return s;
    rg_hparams *hp = &m->hp;
    snprintf(hp->arch_name, sizeof hp->arch_name, "%.*s", (int)(arch.len < 31 ? arch.len : 31), arch.ptr);
    if (rg_gguf_str_eq(arch, "llama")) hp->arch = RG_ARCH_LLAMA, hp->rope_mode = 0;
    else if (rg_gguf_str_eq(arch, "qwen2")) hp->arch = RG_ARCH_QWEN2, hp->rope_mode = 2;
    else if (rg_gguf_str_eq(arch, "qwen3")) hp->arch = RG_ARCH_QWEN3, hp->rope_mode = 2;
    else
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s: architecture '%.*s' is not supported (supported: %s)", g->path,
                       (int)(arch.len > 40 ? 40 : arch.len), arch.ptr, rg_model_archs);
    loader l = {g, hp->arch_name, err};
    if ((s = get_u(&l, "context_length", &hp->n_ctx_train, true, 0))) return s;
    if ((s = get_u(&l, "embedding_length", &hp->n_embd, true, 0))) return s;
    if ((s = get_u(&l, "block_count", &hp->n_layer, true, 0))) return s;
    if ((s = get_u(&l, "feed_forward_length", &hp->n_ff, true, 0))) return s;
    if ((s = get_u(&l, "attention.head_count", &hp->n_head, true, 0))) return s;
    if ((s = get_u(&l, "attention.head_count_kv", &hp->n_head_kv, false, hp->n_head))) return s;
    if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_head <= 0 || hp->n_head_kv <= 0 || hp->n_ff <= 0 ||
        hp->n_head % hp->n_head_kv || hp->n_layer > 100000)
        return rg_fail(err, RG_ERR_FORMAT, "%s: hyperparameters do not fit together (n_embd %lld, n_layer %lld, n_head %lld, "
                       "n_head_kv %lld, n_ff %lld)", g->path, (long long)hp->n_embd, (long long)hp->n_layer,
                       (long long)hp->n_head, (long long)hp->n_head_kv, (long long)hp->n_ff);
    int64_t key_len, value_len;
    if ((s = get_u(&l, "attention.key_length", &key_len, false, hp->n_embd / hp->n_head))) return s;
    if ((s = get_u(&l, "attention.value_length", &value_len, false, key_len))) return s;
    if (key_len != value_len || key_len <= 0)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s: key_length %lld and value_length %lld must be equal", g->path,
                       (long long)key_len, (long long)value_len);
    hp->head_dim = key_len;
    if ((s = get_u(&l, "rope.dimension_count", &hp->n_rot, false, hp->head_dim))) return s;
    if (hp->n_rot != hp->head_dim)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s: rope.dimension_count %lld differs from the head size %lld", g->path,
                       (long long)hp->n_rot, (long long)hp->head_dim);
    if ((s = get_f(&l, "rope.freq_base", &hp->rope_freq_base, false, 10000.0f))) return s;
    float factor;
    if ((s = get_f(&l, "rope.scaling.factor", &factor, false, 0.0f))) return s;
    hp->rope_freq_scale = factor > 0 ? 1.0f / factor : 1.0f;
    if ((s = get_f(&l, "attention.layer_norm_rms_epsilon", &hp->norm_eps, true, 0))) return s;
    if ((s = get_f(&l, "attention.scale", &hp->attn_scale, false, 0.0f))) return s;
    if (hp->attn_scale == 0) hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);

    const int64_t d = hp->n_embd, q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
    // The vocabulary size is the embedding's second dimension.
    const rg_gguf_tensor *te = rg_gguf_find_tensor(g, "token_embd.weight");
    if (!te) return rg_fail(err, RG_ERR_FORMAT, "%s: tensor 'token_embd.weight' is missing", g->path);
    if (te->ne[0] != d || te->ne[1] <= 0 || te->ne[2] != 1 || te->ne[3] != 1)
        return rg_fail(err, RG_ERR_FORMAT, "%s: tensor 'token_embd.weight' has shape [%lld, %lld, %lld, %lld], expected "
                       "[n_embd = %lld, n_vocab]", g->path, (long long)te->ne[0], (long long)te->ne[1],
                       (long long)te->ne[2], (long long)te->ne[3], (long long)d);
    hp->n_vocab = te->ne[1];
    m->tok_embd = te;
    if ((s = tensor(&l, "output_norm.weight", true, 1, d, 0, &m->out_norm))) return s;
    if ((s = tensor(&l, "output.weight", false, 2, d, hp->n_vocab, &m->output))) return s;
    hp->tied = m->output == NULL;
    if (hp->tied) m->output = m->tok_embd;
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return rg_fail(err, RG_ERR_NOMEM, "%s: out of memory", g->path);
    for (int64_t il = 0; il < hp->n_layer; il++) {
        rg_layer *L = &m->layers[il];
        char name[96];
#define T(field, suffix, req, nd, a, b) \
        (snprintf(name, sizeof name, "blk.%lld.%s", (long long)il, suffix), s = tensor(&l, name, req, nd, a, b, &L->field))
        if (T(attn_norm, "attn_norm.weight", true, 1, d, 0)) return s;
        if (T(wq, "attn_q.weight", true, 2, d, q_dim)) return s;
        if (T(wk, "attn_k.weight", true, 2, d, kv_dim)) return s;
        if (T(wv, "attn_v.weight", true, 2, d, kv_dim)) return s;
        if (T(wo, "attn_output.weight", true, 2, q_dim, d)) return s;
        if (T(bq, "attn_q.bias", hp->arch == RG_ARCH_QWEN2, 1, q_dim, 0)) return s;
        if (T(bk, "attn_k.bias", hp->arch == RG_ARCH_QWEN2, 1, kv_dim, 0)) return s;
        if (T(bv, "attn_v.bias", hp->arch == RG_ARCH_QWEN2, 1, kv_dim, 0)) return s;
        if (T(bo, "attn_output.bias", false, 1, d, 0)) return s;
        if (T(q_norm, "attn_q_norm.weight", hp->arch == RG_ARCH_QWEN3, 1, hp->head_dim, 0)) return s;
        if (T(k_norm, "attn_k_norm.weight", hp->arch == RG_ARCH_QWEN3, 1, hp->head_dim, 0)) return s;
        if (T(ffn_norm, "ffn_norm.weight", true, 1, d, 0)) return s;
        if (T(ffn_gate, "ffn_gate.weight", true, 2, d, hp->n_ff)) return s;
        if (T(ffn_up, "ffn_up.weight", true, 2, d, hp->n_ff)) return s;
        if (T(ffn_down, "ffn_down.weight", true, 2, hp->n_ff, d)) return s;
#undef T
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
