// tiny.c - build the tiny llama, qwen2 and qwen3 fixtures (spec architectures.md
// §1, §1.4, §5), with the keys and tensors llama.cpp's converter writes for each.
#include "model/tiny.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/rng.h"
#include "base/threadpool.h"
#include "tensor/half.h"
#include "text/bpe_train.h"
#include "text/tiny_corpus.h"

const char *const rg_tiny_archs[] = {"llama", "qwen2", "qwen3", NULL};

const rg_tiny_shape rg_tiny_shapes[] = {
    {"tiny", "the test fixtures", RG_TINY_N_EMBD, RG_TINY_N_LAYER, RG_TINY_N_HEAD, RG_TINY_N_HEAD_KV, RG_TINY_N_FF,
     RG_TINY_N_VOCAB, RG_TINY_N_CTX, 0.0f, 0.05f, 0.05f, false},
    {"smollm2", "SmolLM2-135M", 576, 30, 9, 3, 1536, 49152, 8192, 100000.0f, 0.02f, 0.0f, true},
    {"1b", "Llama-3.2-1B", 2048, 16, 32, 8, 8192, 128256, 2048, 500000.0f, 0.02f, 0.0f, true},
    {NULL, NULL, 0, 0, 0, 0, 0, 0, 0, 0.0f, 0.0f, 0.0f, false},
};

const rg_tiny_shape *rg_tiny_shape_find(const char *name) {
    for (const rg_tiny_shape *sh = rg_tiny_shapes; sh->name; sh++)
        if (!strcmp(sh->name, name ? name : "tiny")) return sh;
    return NULL;
}

// What distinguishes the three architectures in a file. The rope type is not
// stored: readers take it from general.architecture (llama NORMAL, qwen NEOX).
typedef struct tiny_arch {
    const char *name;
    int64_t head_dim;      // qwen3 declares 128 (key_length), whatever n_embd / n_head is; 0: n_embd / n_head
    bool qkv_bias;         // qwen2: attn_{q,k,v}.bias
    bool qk_norm;          // qwen3: attn_{q,k}_norm.weight [head_dim]
    bool key_length;       // qwen3: attention.key_length / value_length (the converter writes HF's head_dim)
    bool rope_dims_vocab;  // llama: rope.dimension_count and vocab_size
    float freq_base, norm_eps;
} tiny_arch;

static const tiny_arch tiny_arch_table[] = {
    {"llama", 0, false, false, false, true, 10000.0f, 1e-5f},
    {"qwen2", 0, true, false, false, false, 1000000.0f, 1e-6f},
    {"qwen3", RG_TINY_QWEN3_HEAD_DIM, false, true, true, false, 1000000.0f, 1e-6f},
};

// ChatML as Qwen2 writes it: a default system turn when none is given.
static const char chatml_template[] =
    "{%- if messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

// Rounds v through the storage type, so an F32 twin holds the same values.
static float round_to(uint32_t type, float v) {
    if (type == RG_TYPE_F16) return rg_fp16_to_fp32(rg_fp32_to_fp16(v));
    if (type == RG_TYPE_BF16) return rg_bf16_to_fp32(rg_fp32_to_bf16(v));
    return v;
}

// How a tensor's values are made: mean + std * normal from its own random stream (its index
// in the file), rounded to value_type and stored as the tensor's type. A pure function of the
// config, the shape and the tensor, so any chunk of any tensor is made alone, on any thread.
typedef struct tiny_recipe {
    uint64_t seed, stream;
    float mean, std;
    uint32_t value_type, store_type;
} tiny_recipe;

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

// Matrices take the configured type; 1-D tensors (norms, biases) stay F32 as converters write
// them. Norm weights are 1 + small noise in the tiny shape (so their gradients matter), 1 in
// the large ones.
static tiny_recipe recipe_of(const rg_tiny_config *cfg, const rg_tiny_shape *sh, const rg_gguf_tensor *t,
                             uint64_t index) {
    tiny_recipe r = {cfg->seed, index, 0.0f, 0.02f, t->n_dims == 2 ? cfg->type : RG_TYPE_F32, t->type};
    if (!strcmp(t->name, "token_embd.weight")) r.std = sh->embd_std;
    else if (ends_with(t->name, "norm.weight")) r.mean = 1.0f, r.std = sh->norm_std;
    else if (ends_with(t->name, ".bias")) r.std = 0.01f;
    return r;
}

// Values [first, first + n) of a recipe, stored at dst.
static void fill_values(const tiny_recipe *r, int64_t first, int64_t n, void *dst) {
    for (int64_t i = 0; i < n; i++) {
        float v = round_to(r->value_type, r->mean + r->std * rg_rng_normal(r->seed, r->stream, (uint64_t)(first + i)));
        if (r->store_type == RG_TYPE_F32) ((float *)dst)[i] = v;
        else if (r->store_type == RG_TYPE_F16) ((uint16_t *)dst)[i] = rg_fp32_to_fp16(v);
        else ((uint16_t *)dst)[i] = rg_fp32_to_bf16(v);
    }
}

typedef struct fill_job {
    const tiny_recipe *r;
    int64_t first, n;
    uint8_t *dst;
    size_t elem;
} fill_job;

static void fill_part(void *arg, int ith, int nth) {
    const fill_job *j = arg;
    int64_t b, e;
    rg_split_range(j->n, ith, nth, &b, &e);
    if (e > b) fill_values(j->r, j->first + b, e - b, j->dst + (size_t)b * j->elem);
}

// What the writer's fill callback needs: the plan, its config and shape, and the threads.
typedef struct tiny_filler {
    const rg_gguf *g;
    const rg_tiny_config *cfg;
    const rg_tiny_shape *shape;
    rg_threadpool *pool;
} tiny_filler;

static rg_status fill_chunk(void *ctx, uint64_t index, uint64_t offset, void *dst, size_t n, rg_error *err) {
    (void)err;
    const tiny_filler *f = ctx;
    const rg_gguf_tensor *t = &f->g->tensors[index];
    const tiny_recipe r = recipe_of(f->cfg, f->shape, t, index);
    const size_t elem = t->type == RG_TYPE_F32 ? 4 : 2;
    fill_job j = {&r, (int64_t)(offset / elem), (int64_t)(n / elem), dst, elem};
    rg_threadpool_run(f->pool, fill_part, &j);
    return RG_OK;
}

// The tokenizer's 512 tokens, then "[PAD<id>]" tokens of type UNUSED up to n_vocab.
static rg_status set_padded_tokens(rg_gguf *g, const rg_bpe_vocab *v, int64_t n_vocab, rg_error *err) {
    const size_t n = (size_t)n_vocab, pad_len = 32;
    const char **texts = malloc(n * sizeof *texts);
    int32_t *types = malloc(n * sizeof *types);
    char *pads = malloc((n - (size_t)v->n_tokens) * pad_len + 1);
    rg_status s = RG_OK;
    if (!texts || !types || !pads) s = rg_fail(err, RG_ERR_NOMEM, "make-tiny: out of memory for %zu tokens", n);
    for (int32_t i = 0; i < v->n_tokens && !s; i++) {
        if (!strncmp(v->tokens[i], "[PAD", 4))
            s = rg_fail(err, RG_ERR_FORMAT, "make-tiny: token %d '%s' looks like a padding token", i, v->tokens[i]);
        texts[i] = v->tokens[i], types[i] = v->token_types[i];
    }
    for (size_t i = (size_t)v->n_tokens; i < n && !s; i++) {
        char *p = pads + (i - (size_t)v->n_tokens) * pad_len;
        snprintf(p, pad_len, "[PAD%zu]", i);
        texts[i] = p, types[i] = RG_TOKEN_TYPE_UNUSED;
    }
    if (!s) s = rg_gguf_set_str_array(g, "tokenizer.ggml.tokens", texts, (uint64_t)n, err);
    if (!s) s = rg_gguf_set_array(g, "tokenizer.ggml.token_type", RG_GGUF_I32, types, (uint64_t)n, err);
    free(texts), free(types), free(pads);
    return s;
}

static rg_status add_tokenizer(rg_gguf *g, int64_t n_vocab, rg_error *err) {
    rg_bpe_vocab v;
    char msg[256] = "";
    int n_merges = RG_TINY_N_VOCAB - 256 - 3;
    if (rg_bpe_train(rg_tiny_corpus, rg_tiny_corpus_len, n_merges, &v, msg, sizeof msg) != 0)
        return rg_fail(err, RG_ERR_NOMEM, "make-tiny: tokenizer training failed: %s", msg);
    rg_status s = RG_OK;
    int32_t endoftext = rg_bpe_vocab_add(&v, "<|endoftext|>", 3);
    int32_t im_start = rg_bpe_vocab_add(&v, "<|im_start|>", 3);
    int32_t im_end = rg_bpe_vocab_add(&v, "<|im_end|>", 3);
    if (endoftext < 0 || im_start < 0 || im_end < 0) s = rg_fail(err, RG_ERR_NOMEM, "make-tiny: out of memory");
    else if (v.n_tokens != RG_TINY_N_VOCAB)
        s = rg_fail(err, RG_ERR_FORMAT, "make-tiny: tokenizer has %d tokens, expected %d (corpus too small?)",
                    v.n_tokens, RG_TINY_N_VOCAB);
    if (!s) s = rg_gguf_set_str(g, "tokenizer.ggml.model", "gpt2", err);
    if (!s) s = rg_gguf_set_str(g, "tokenizer.ggml.pre", "qwen2", err);
    if (!s) s = set_padded_tokens(g, &v, n_vocab, err);
    if (!s) s = rg_gguf_set_str_array(g, "tokenizer.ggml.merges", (const char *const *)v.merges, (uint64_t)v.n_merges, err);
    if (!s) s = rg_gguf_set_u32(g, "tokenizer.ggml.eos_token_id", (uint32_t)im_end, err);
    if (!s) s = rg_gguf_set_u32(g, "tokenizer.ggml.padding_token_id", (uint32_t)endoftext, err);
    if (!s) s = rg_gguf_set_u32(g, "tokenizer.ggml.bos_token_id", (uint32_t)endoftext, err);
    if (!s) s = rg_gguf_set_bool(g, "tokenizer.ggml.add_bos_token", false, err);
    if (!s) s = rg_gguf_set_str(g, "tokenizer.chat_template", chatml_template, err);
    rg_bpe_vocab_free(&v);
    return s;
}

static uint32_t file_type_of(uint32_t type) {
    return type == RG_TYPE_F16 ? 1 : type == RG_TYPE_BF16 ? 32 : 0;
}

static bool tied_of(const rg_tiny_config *cfg, const rg_tiny_shape *sh) { return cfg->tied || sh->tied; }

static int64_t head_dim_of(const tiny_arch *a, const rg_tiny_shape *sh) {
    return a->head_dim ? a->head_dim : sh->n_embd / sh->n_head;
}

// The general.* keys, then the keys a converter writes for arch `a` under "<arch>.".
static rg_status add_keys(const rg_tiny_config *cfg, const tiny_arch *a, const rg_tiny_shape *sh, rg_gguf *g,
                          rg_error *err) {
    const int64_t Dh = head_dim_of(a, sh);
    const bool tiny = !strcmp(sh->name, "tiny");
    char name[128], key[96];
    snprintf(name, sizeof name, "retrograd %s%s %s %s%s%s", sh->name, tiny ? "" : "-shape", a->name,
             rg_type_get(cfg->type)->name, cfg->twin_f32 ? " (f32 twin)" : "", tied_of(cfg, sh) ? " tied" : "");
    uint32_t stored = cfg->twin_f32 ? RG_TYPE_F32 : cfg->type;
    rg_status s = rg_gguf_set_str(g, "general.architecture", a->name, err);
    if (!s) s = rg_gguf_set_str(g, "general.type", "model", err);
    if (!s) s = rg_gguf_set_str(g, "general.name", name, err);
    if (!s && !tiny) {
        char what[160];
        snprintf(what, sizeof what, "random weights with the dimensions of %s (retrograd make-tiny --shape %s)",
                 sh->model, sh->name);
        s = rg_gguf_set_str(g, "general.description", what, err);
    }
    if (!s) s = rg_gguf_set_u32(g, "general.file_type", file_type_of(stored), err);
    if (!s) s = rg_gguf_set_u64(g, "general.seed", cfg->seed, err);
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", a->name, suffix), key)
    if (!s) s = rg_gguf_set_u32(g, KEY("block_count"), (uint32_t)sh->n_layer, err);
    if (!s) s = rg_gguf_set_u32(g, KEY("context_length"), (uint32_t)sh->n_ctx, err);
    if (!s) s = rg_gguf_set_u32(g, KEY("embedding_length"), (uint32_t)sh->n_embd, err);
    if (!s) s = rg_gguf_set_u32(g, KEY("feed_forward_length"), (uint32_t)sh->n_ff, err);
    if (!s) s = rg_gguf_set_u32(g, KEY("attention.head_count"), (uint32_t)sh->n_head, err);
    if (!s) s = rg_gguf_set_u32(g, KEY("attention.head_count_kv"), (uint32_t)sh->n_head_kv, err);
    if (!s) s = rg_gguf_set_f32(g, KEY("rope.freq_base"), sh->freq_base > 0 ? sh->freq_base : a->freq_base, err);
    if (!s) s = rg_gguf_set_f32(g, KEY("attention.layer_norm_rms_epsilon"), a->norm_eps, err);
    if (!s && a->key_length) s = rg_gguf_set_u32(g, KEY("attention.key_length"), (uint32_t)Dh, err);
    if (!s && a->key_length) s = rg_gguf_set_u32(g, KEY("attention.value_length"), (uint32_t)Dh, err);
    if (!s && a->rope_dims_vocab) s = rg_gguf_set_u32(g, KEY("rope.dimension_count"), (uint32_t)Dh, err);
    if (!s && a->rope_dims_vocab) s = rg_gguf_set_u32(g, KEY("vocab_size"), (uint32_t)sh->n_vocab, err);
#undef KEY
    return s ? s : add_tokenizer(g, sh->n_vocab, err);
}

// A tensor info without data, in the type its values are stored as.
static rg_status add_info(rg_gguf *g, const rg_tiny_config *cfg, const char *name, int n_dims, int64_t ne0, int64_t ne1,
                          rg_error *err) {
    const uint32_t type = cfg->twin_f32 || n_dims != 2 ? RG_TYPE_F32 : cfg->type;
    return rg_gguf_add_tensor(g, name, type, (uint32_t)n_dims, (int64_t[]){ne0, ne1}, NULL, err);
}

// The tensors in the converter's order. For llama the converter permutes the rows of attn_q /
// attn_k for NORMAL rope; random weights need no permutation: they are the permuted rows of
// some HF model, which is what transformers recovers when it undoes the permutation.
static rg_status add_tensors(const rg_tiny_config *cfg, const tiny_arch *a, const rg_tiny_shape *sh, rg_gguf *g,
                             rg_error *err) {
    const int64_t d = sh->n_embd, H = sh->n_head, Hkv = sh->n_head_kv, F = sh->n_ff, V = sh->n_vocab;
    const int64_t Dh = head_dim_of(a, sh);
    rg_status s = add_info(g, cfg, "token_embd.weight", 2, d, V, err);
    if (!s) s = add_info(g, cfg, "output_norm.weight", 1, d, 1, err);
    if (!s && !tied_of(cfg, sh)) s = add_info(g, cfg, "output.weight", 2, d, V, err);
    for (int64_t il = 0; il < sh->n_layer && !s; il++) {
        char n[64];
#define T(suffix, dims, ne0, ne1) \
    (snprintf(n, sizeof n, "blk.%lld.%s", (long long)il, suffix), s = s ? s : add_info(g, cfg, n, dims, ne0, ne1, err))
        T("attn_norm.weight", 1, d, 1);
        T("attn_q.weight", 2, d, H * Dh);
        if (a->qkv_bias) T("attn_q.bias", 1, H * Dh, 1);
        T("attn_k.weight", 2, d, Hkv * Dh);
        if (a->qkv_bias) T("attn_k.bias", 1, Hkv * Dh, 1);
        T("attn_v.weight", 2, d, Hkv * Dh);
        if (a->qkv_bias) T("attn_v.bias", 1, Hkv * Dh, 1);
        if (a->qk_norm) T("attn_q_norm.weight", 1, Dh, 1);
        if (a->qk_norm) T("attn_k_norm.weight", 1, Dh, 1);
        T("attn_output.weight", 2, H * Dh, d);
        T("ffn_norm.weight", 1, d, 1);
        T("ffn_gate.weight", 2, d, F);
        T("ffn_up.weight", 2, d, F);
        T("ffn_down.weight", 2, F, d);
#undef T
    }
    return s;
}

static rg_status check_config(const rg_tiny_config *cfg, const tiny_arch **arch, const rg_tiny_shape **shape,
                              rg_error *err) {
    *arch = NULL;
    for (size_t i = 0; i < sizeof tiny_arch_table / sizeof tiny_arch_table[0]; i++)
        if (cfg->arch && strcmp(cfg->arch, tiny_arch_table[i].name) == 0) *arch = &tiny_arch_table[i];
    if (!*arch)
        return rg_fail(err, RG_ERR_ARG, "make-tiny: unknown architecture '%s' (supported: llama, qwen2, qwen3)",
                       cfg->arch ? cfg->arch : "(none)");
    if (!(*shape = rg_tiny_shape_find(cfg->shape)))
        return rg_fail(err, RG_ERR_ARG, "make-tiny: unknown shape '%s' (supported: tiny, smollm2, 1b)", cfg->shape);
    if (cfg->type != RG_TYPE_F32 && cfg->type != RG_TYPE_F16 && cfg->type != RG_TYPE_BF16)
        return rg_fail(err, RG_ERR_ARG, "make-tiny: type %s is not supported yet (f32, f16, bf16)",
                       rg_type_get(cfg->type)->name);
    return RG_OK;
}

rg_status rg_tiny_plan(const rg_tiny_config *cfg, rg_gguf **out, rg_error *err) {
    *out = NULL;
    const tiny_arch *a = NULL;
    const rg_tiny_shape *sh = NULL;
    rg_status s = check_config(cfg, &a, &sh, err);
    if (s) return s;
    rg_gguf *g = rg_gguf_new();
    if (!g) return rg_fail(err, RG_ERR_NOMEM, "make-tiny: out of memory");
    s = add_keys(cfg, a, sh, g, err);
    if (!s) s = add_tensors(cfg, a, sh, g, err);
    if (s) {
        rg_gguf_free(g);
        return s;
    }
    *out = g;
    return RG_OK;
}

static rg_status filler_open(tiny_filler *f, const rg_tiny_config *cfg, const rg_gguf *g, rg_error *err) {
    f->g = g, f->cfg = cfg, f->shape = rg_tiny_shape_find(cfg->shape), f->pool = NULL;
    return rg_threadpool_create(&f->pool, cfg->n_threads, err);
}

rg_status rg_tiny_build(const rg_tiny_config *cfg, rg_gguf **out, rg_error *err) {
    rg_gguf *g;
    rg_status s = rg_tiny_plan(cfg, &g, err);
    if (s) return s;
    tiny_filler f;
    s = filler_open(&f, cfg, g, err);
    for (uint64_t i = 0; i < g->n_tensors && !s; i++) {
        rg_gguf_tensor *t = &g->tensors[i];
        void *data = rg_arena_alloc(&g->arena, (size_t)t->nbytes, 64);
        if (!data) s = rg_fail(err, RG_ERR_NOMEM, "make-tiny: out of memory for %s", t->name);
        else s = fill_chunk(&f, i, 0, data, (size_t)t->nbytes, err);
        t->data = data;
    }
    rg_threadpool_free(f.pool);
    if (s) {
        rg_gguf_free(g);
        return s;
    }
    *out = g;
    return RG_OK;
}

rg_status rg_tiny_write(const rg_tiny_config *cfg, const char *path, rg_error *err) {
    rg_gguf *g;
    rg_status s = rg_tiny_plan(cfg, &g, err);
    if (s) return s;
    tiny_filler f;
    s = filler_open(&f, cfg, g, err);
    if (!s) s = rg_gguf_write_filled(g, path, fill_chunk, &f, err);
    rg_threadpool_free(f.pool);
    rg_gguf_free(g);
    return s;
}
