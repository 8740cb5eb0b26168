// tiny.c - build the tiny llama, qwen2 and qwen3 fixtures (spec architectures.md
// §1, §1.4, §5), with the keys and tensors llama.cpp's converter writes for each.
#include "model/tiny.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/rng.h"
#include "tensor/half.h"
#include "text/bpe_train.h"
#include "text/tiny_corpus.h"

const char *const rg_tiny_archs[] = {"llama", "qwen2", "qwen3", NULL};

// What distinguishes the three architectures in a file. The rope type is not
// stored: readers take it from general.architecture (llama NORMAL, qwen NEOX).
typedef struct tiny_arch {
    const char *name;
    int64_t head_dim;      // qwen3 declares 128 (key_length), whatever n_embd / n_head is
    bool qkv_bias;         // qwen2: attn_{q,k,v}.bias
    bool qk_norm;          // qwen3: attn_{q,k}_norm.weight [head_dim]
    bool key_length;       // qwen3: attention.key_length / value_length (the converter writes HF's head_dim)
    bool rope_dims_vocab;  // llama: rope.dimension_count and vocab_size
    float freq_base, norm_eps;
} tiny_arch;

static const tiny_arch tiny_arch_table[] = {
    {"llama", RG_TINY_N_EMBD / RG_TINY_N_HEAD, false, false, false, true, 10000.0f, 1e-5f},
    {"qwen2", RG_TINY_N_EMBD / RG_TINY_N_HEAD, true, false, false, false, 1000000.0f, 1e-6f},
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

typedef struct builder {
    rg_gguf *g;
    const rg_tiny_config *cfg;
    uint64_t stream;  // one random stream per tensor, in creation order
    rg_error *err;
} builder;

// Adds a tensor whose values are mean + std * normal. Matrices take the
// configured type; 1-D tensors (norms, biases) stay F32 as converters write them.
static rg_status add_tensor(builder *b, const char *name, int n_dims, int64_t ne0, int64_t ne1, float mean, float std) {
    int64_t n = ne0 * ne1;
    uint32_t value_type = n_dims == 2 ? b->cfg->type : RG_TYPE_F32;
    uint32_t store_type = b->cfg->twin_f32 ? RG_TYPE_F32 : value_type;
    size_t elem = store_type == RG_TYPE_F32 ? 4 : 2;
    void *data = rg_arena_alloc(&b->g->arena, (size_t)n * elem, 64);
    if (!data) return rg_fail(b->err, RG_ERR_NOMEM, "make-tiny: out of memory for %s", name);
    uint64_t stream = b->stream++;
    for (int64_t i = 0; i < n; i++) {
        float v = round_to(value_type, mean + std * rg_rng_normal(b->cfg->seed, stream, (uint64_t)i));
        if (store_type == RG_TYPE_F32) ((float *)data)[i] = v;
        else if (store_type == RG_TYPE_F16) ((uint16_t *)data)[i] = rg_fp32_to_fp16(v);
        else ((uint16_t *)data)[i] = rg_fp32_to_bf16(v);
    }
    int64_t ne[2] = {ne0, ne1};
    return rg_gguf_add_tensor(b->g, name, store_type, (uint32_t)n_dims, ne, data, b->err);
}

static rg_status add_tokenizer(rg_gguf *g, rg_error *err) {
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
    if (!s) s = rg_gguf_set_str_array(g, "tokenizer.ggml.tokens", (const char *const *)v.tokens, (uint64_t)v.n_tokens, err);
    if (!s) s = rg_gguf_set_array(g, "tokenizer.ggml.token_type", RG_GGUF_I32, v.token_types, (uint64_t)v.n_tokens, err);
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

// The keys a converter writes for arch `a` under "<arch>.", then the tensors.
// For llama the converter permutes the rows of attn_q / attn_k for NORMAL rope;
// random weights need no permutation: they are the permuted rows of some HF
// model, which is what transformers recovers when it undoes the permutation.
static rg_status build_model(const rg_tiny_config *cfg, const tiny_arch *a, rg_gguf *g, rg_error *err) {
    const int64_t d = RG_TINY_N_EMBD, H = RG_TINY_N_HEAD, Hkv = RG_TINY_N_HEAD_KV, F = RG_TINY_N_FF;
    const int64_t Dh = a->head_dim, V = RG_TINY_N_VOCAB;
    char name[96], key[96];
    snprintf(name, sizeof name, "retrograd tiny %s %s%s%s", a->name, rg_type_get(cfg->type)->name,
             cfg->twin_f32 ? " (f32 twin)" : "", cfg->tied ? " tied" : "");
    uint32_t stored = cfg->twin_f32 ? RG_TYPE_F32 : cfg->type;
    rg_status s = rg_gguf_set_str(g, "general.architecture", a->name, err);
    if (!s) s = rg_gguf_set_str(g, "general.type", "model", err);
    if (!s) s = rg_gguf_set_str(g, "general.name", name, err);
    if (!s) s = rg_gguf_set_u32(g, "general.file_type", file_type_of(stored), err);
    if (!s) s = rg_gguf_set_u64(g, "general.seed", cfg->seed, err);
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", a->name, suffix), key)
    if (!s) s = rg_gguf_set_u32(g, KEY("block_count"), RG_TINY_N_LAYER, err);
    if (!s) s = rg_gguf_set_u32(g, KEY("context_length"), RG_TINY_N_CTX, err);
    if (!s) s = rg_gguf_set_u32(g, KEY("embedding_length"), (uint32_t)d, err);
    if (!s) s = rg_gguf_set_u32(g, KEY("feed_forward_length"), (uint32_t)F, err);
    if (!s) s = rg_gguf_set_u32(g, KEY("attention.head_count"), (uint32_t)H, err);
    if (!s) s = rg_gguf_set_u32(g, KEY("attention.head_count_kv"), (uint32_t)Hkv, err);
    if (!s) s = rg_gguf_set_f32(g, KEY("rope.freq_base"), a->freq_base, err);
    if (!s) s = rg_gguf_set_f32(g, KEY("attention.layer_norm_rms_epsilon"), a->norm_eps, err);
    if (!s && a->key_length) s = rg_gguf_set_u32(g, KEY("attention.key_length"), (uint32_t)Dh, err);
    if (!s && a->key_length) s = rg_gguf_set_u32(g, KEY("attention.value_length"), (uint32_t)Dh, err);
    if (!s && a->rope_dims_vocab) s = rg_gguf_set_u32(g, KEY("rope.dimension_count"), (uint32_t)Dh, err);
    if (!s && a->rope_dims_vocab) s = rg_gguf_set_u32(g, KEY("vocab_size"), (uint32_t)V, err);
#undef KEY
    if (!s) s = add_tokenizer(g, err);
    if (s) return s;

    builder b = {g, cfg, 0, err};
    // Norm weights are 1 + small noise, not all ones, so their gradients matter.
    const float w_std = 0.02f, e_std = 0.05f, b_std = 0.01f, n_std = 0.05f;
    s = add_tensor(&b, "token_embd.weight", 2, d, V, 0.0f, e_std);
    if (!s) s = add_tensor(&b, "output_norm.weight", 1, d, 1, 1.0f, n_std);
    if (!s && !cfg->tied) s = add_tensor(&b, "output.weight", 2, d, V, 0.0f, w_std);
    for (int il = 0; il < RG_TINY_N_LAYER && !s; il++) {
        char n[64];
#define T(suffix, dims, ne0, ne1, mean, std) \
    (snprintf(n, sizeof n, "blk.%d.%s", il, suffix), s = s ? s : add_tensor(&b, n, dims, ne0, ne1, mean, std))
        T("attn_norm.weight", 1, d, 1, 1.0f, n_std);
        T("attn_q.weight", 2, d, H * Dh, 0.0f, w_std);
        if (a->qkv_bias) T("attn_q.bias", 1, H * Dh, 1, 0.0f, b_std);
        T("attn_k.weight", 2, d, Hkv * Dh, 0.0f, w_std);
        if (a->qkv_bias) T("attn_k.bias", 1, Hkv * Dh, 1, 0.0f, b_std);
        T("attn_v.weight", 2, d, Hkv * Dh, 0.0f, w_std);
        if (a->qkv_bias) T("attn_v.bias", 1, Hkv * Dh, 1, 0.0f, b_std);
        if (a->qk_norm) T("attn_q_norm.weight", 1, Dh, 1, 1.0f, n_std);
        if (a->qk_norm) T("attn_k_norm.weight", 1, Dh, 1, 1.0f, n_std);
        T("attn_output.weight", 2, H * Dh, d, 0.0f, w_std);
        T("ffn_norm.weight", 1, d, 1, 1.0f, n_std);
        T("ffn_gate.weight", 2, d, F, 0.0f, w_std);
        T("ffn_up.weight", 2, d, F, 0.0f, w_std);
        T("ffn_down.weight", 2, F, d, 0.0f, w_std);
#undef T
    }
    return s;
}

rg_status rg_tiny_build(const rg_tiny_config *cfg, rg_gguf **out, rg_error *err) {
    *out = NULL;
    const tiny_arch *a = NULL;
    for (size_t i = 0; i < sizeof tiny_arch_table / sizeof tiny_arch_table[0]; i++)
        if (cfg->arch && strcmp(cfg->arch, tiny_arch_table[i].name) == 0) a = &tiny_arch_table[i];
    if (!a)
        return rg_fail(err, RG_ERR_ARG, "make-tiny: unknown architecture '%s' (supported: llama, qwen2, qwen3)",
                       cfg->arch ? cfg->arch : "(none)");
    if (cfg->type != RG_TYPE_F32 && cfg->type != RG_TYPE_F16 && cfg->type != RG_TYPE_BF16)
        return rg_fail(err, RG_ERR_ARG, "make-tiny: type %s is not supported yet (f32, f16, bf16)",
                       rg_type_get(cfg->type)->name);
    rg_gguf *g = rg_gguf_new();
    if (!g) return rg_fail(err, RG_ERR_NOMEM, "make-tiny: out of memory");
    rg_status s = build_model(cfg, a, g, err);
    if (s) {
        rg_gguf_free(g);
        return s;
    }
    *out = g;
    return RG_OK;
}

rg_status rg_tiny_write(const rg_tiny_config *cfg, const char *path, rg_error *err) {
    rg_gguf *g;
    rg_status s = rg_tiny_build(cfg, &g, err);
    if (s) return s;
    s = rg_gguf_write(g, path, err);
    rg_gguf_free(g);
    return s;
}
