// tiny.c - build the tiny fixtures of every architecture (spec architectures.md
// §1-3, §5): the keys and tensors of its table (model/arch.h) that llama.cpp's
// converter writes, in its order, so a fixture loads by the same rules.
#include "model/tiny.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/rng.h"
#include "base/threadpool.h"
#include "model/model.h"
#include "tensor/half.h"
#include "text/bpe_train.h"
#include "text/tiny_corpus.h"

const char *const rg_tiny_archs[] = {"llama", "qwen2", "qwen3", "lfm2", "mamba2", "gemma2", "gemma3", NULL};

const rg_tiny_shape rg_tiny_shapes[] = {
    {"tiny", "the test fixtures", RG_TINY_N_EMBD, RG_TINY_N_LAYER, RG_TINY_N_HEAD, RG_TINY_N_HEAD_KV, RG_TINY_N_FF,
     RG_TINY_N_VOCAB, RG_TINY_N_CTX, 0.0f, 0.05f, 0.05f, false, NULL, 0, 0, 0, 0, 0, 0},
    {"smollm2", "SmolLM2-135M", 576, 30, 9, 3, 1536, 49152, 8192, 100000.0f, 0.02f, 0.0f, true, NULL, 0, 0, 0, 0, 0, 0},
    {"1b", "Llama-3.2-1B", 2048, 16, 32, 8, 8192, 128256, 2048, 500000.0f, 0.02f, 0.0f, true, NULL, 0, 0, 0, 0, 0, 0},
    // LFM2-350M's published config (the nearest released size to the seed's LFM2.5-230M): the
    // attention layers by layer_types, the short convolutions elsewhere.
    {"lfm2-350m", "LFM2-350M", 1024, 16, 16, 8, 4608, 65536, 32768, 1000000.0f, 0.02f, 0.0f, true, "lfm2",
     (1u << 2) | (1u << 5) | (1u << 8) | (1u << 10) | (1u << 12) | (1u << 14), 0, 0, 0, 0, 0},
    // state-spaces/mamba2-130m: d_model 768, 24 layers, d_state 128, headdim 64, expand 2, one group,
    // the vocabulary padded to a multiple of 16.
    {"mamba2-130m", "mamba2-130m", 768, 24, 0, 0, 0, 50288, 2048, 0.0f, 0.02f, 0.0f, true, "mamba2", 0, 128, 64, 1536, 0, 0},
    // google/gemma-3-270m's text config: head_dim 256 (n_head * head_dim = 1024 != n_embd), one kv head, the
    // 262144-token vocabulary, sliding window 512 on five of every six layers.
    {"gemma3-270m", "Gemma-3-270M", 640, 18, 4, 1, 2048, 262144, 32768, 1000000.0f, 0.02f, 0.0f, true, "gemma3", 0, 0, 0, 0,
     256, 512},
    {NULL, NULL, 0, 0, 0, 0, 0, 0, 0, 0.0f, 0.0f, 0.0f, false, NULL, 0, 0, 0, 0, 0, 0},
};

const rg_tiny_shape *rg_tiny_shape_find(const char *name) {
    for (const rg_tiny_shape *sh = rg_tiny_shapes; sh->name; sh++)
        if (!strcmp(sh->name, name ? name : "tiny")) return sh;
    return NULL;
}

// The tokenizer a fixture carries: the tiny vocabulary with these special tokens appended (so fewer merges),
// and the chat template of its family.
typedef struct tiny_vocab {
    const char *pre;              // tokenizer.ggml.pre
    const char *specials[6];      // CONTROL tokens after the bytes and merges, NULL-terminated
    int eos, pad, bos;            // indices into specials
    bool add_bos;
    const char *chat_template;    // NULL: none (a base model)
} tiny_vocab;

// What the writer chooses per architecture; the keys and tensors come from its table. The rope type is not
// stored: readers take it from general.architecture.
typedef struct tiny_arch {
    const char *name;
    int64_t head_dim;      // qwen3 declares 128 (key_length), whatever n_embd / n_head is; 0: n_embd / n_head
    float freq_base, norm_eps;
    bool tied;             // always tied, as the released models are
    const tiny_vocab *vocab;
    int64_t n_conv;        // conv kernel length (lfm2, mamba2), 0: none
    bool conv_even;        // lfm2: the even layers are short convolutions (head_count_kv 0), the odd ones attention
    int64_t ssm_state, ssm_head_dim;  // mamba2: N and P, with D_in = 2 n_embd and one group; 0: no SSM
    int64_t n_layer;       // the tiny shape's layer count for this architecture (0: RG_TINY_N_LAYER)
    int64_t window;        // gemma: the sliding layers' window, small so that the tests cross it
    float attn_softcap, final_softcap;  // gemma2: caps small enough to bend the tiny model's scores and logits
} tiny_arch;

// ChatML as Qwen2 writes it: a default system turn when none is given.
static const char chatml_template[] =
    "{%- if messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

// LFM2's: the BOS text first, an optional system turn, ChatML turns, tool responses wrapped.
static const char lfm2_template[] =
    "{{- bos_token -}}{%- set ns = namespace(system_prompt=\"\") -%}"
    "{%- if messages[0][\"role\"] == \"system\" -%}{%- set ns.system_prompt = messages[0][\"content\"] -%}"
    "{%- set messages = messages[1:] -%}{%- endif -%}"
    "{%- if ns.system_prompt -%}{{- \"<|im_start|>system\\n\" + ns.system_prompt + \"<|im_end|>\\n\" -}}{%- endif -%}"
    "{%- for message in messages -%}{{- \"<|im_start|>\" + message[\"role\"] + \"\\n\" -}}"
    "{%- set content = message[\"content\"] -%}{%- if message[\"role\"] == \"tool\" -%}"
    "{%- set content = \"<|tool_response_start|>\" + content + \"<|tool_response_end|>\" -%}{%- endif -%}"
    "{{- content + \"<|im_end|>\\n\" -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- \"<|im_start|>assistant\\n\" -}}{%- endif -%}";

static const tiny_vocab vocab_chatml = {"qwen2", {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}, 2, 0, 0, false,
                                        chatml_template};
static const tiny_vocab vocab_lfm2 = {
    "lfm2", {"<|pad|>", "<|startoftext|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"}, 4, 0, 1, true,
    lfm2_template};
static const tiny_vocab vocab_neox = {"gpt-2", {"<|endoftext|>", "<|padding|>"}, 0, 1, 0, false, NULL};

static const tiny_arch tiny_arch_table[] = {
    {"llama", 0, 10000.0f, 1e-5f, false, &vocab_chatml, 0, false, 0, 0, 0, 0, 0.0f, 0.0f},
    {"qwen2", 0, 1000000.0f, 1e-6f, false, &vocab_chatml, 0, false, 0, 0, 0, 0, 0.0f, 0.0f},
    {"qwen3", RG_TINY_QWEN3_HEAD_DIM, 1000000.0f, 1e-6f, false, &vocab_chatml, 0, false, 0, 0, 0, 0, 0.0f, 0.0f},
    {"lfm2", 0, 1000000.0f, 1e-5f, true, &vocab_lfm2, 3, true, 0, 0, 0, 0, 0.0f, 0.0f},
    {"mamba2", 0, 0.0f, 1e-5f, true, &vocab_neox, 4, false, 16, 64, 0, 0, 0.0f, 0.0f},
    // gemma2: layer 0 slides (window 8), layer 1 is global. gemma3: six layers, so that one (layer 5) is global
    // and the others slide with the local RoPE base; head_dim 128 != n_embd / n_head, as Gemma-3-270M's 256.
    {"gemma2", 0, 10000.0f, 1e-6f, true, &vocab_chatml, 0, false, 0, 0, 0, 8, 0.5f, 3.0f},
    {"gemma3", 128, 1000000.0f, 1e-6f, true, &vocab_chatml, 0, false, 0, 0, 6, 8, 0.0f, 0.0f},
};

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

// Matrices take the configured type; the table's small elementwise weights (norms, biases, conv kernels, the SSM's
// A and D) stay F32 as converters write them. Norm weights are 1 + small noise in the tiny shape (so their gradients
// matter), 1 in the large ones; the SSM's A is negative (it is -exp(A_log)), its D near 1, its dt bias near -3
// (softplus 0.05).
static tiny_recipe recipe_of(const rg_tiny_config *cfg, const rg_tiny_shape *sh, const rg_gguf_tensor *t,
                             uint64_t index) {
    const rg_arch *a = rg_arch_find(cfg->arch, strlen(cfg->arch));
    int64_t il;
    const rg_arch_tensor *row = a ? rg_arch_tensor_of(a, t->name, &il) : NULL;
    const bool f32 = !row || (row->flags & RG_T_F32);
    tiny_recipe r = {cfg->seed, index, 0.0f, 0.02f, f32 ? RG_TYPE_F32 : cfg->type, t->type};
    switch (row ? row->role : RG_N_ROLES) {
    case RG_ROLE_TOKEN_EMBD: r.std = sh->embd_std; break;
    case RG_ROLE_OUTPUT_NORM: case RG_ROLE_ATTN_NORM: case RG_ROLE_ATTN_Q_NORM: case RG_ROLE_ATTN_K_NORM:
    case RG_ROLE_FFN_NORM: case RG_ROLE_SSM_NORM: case RG_ROLE_ATTN_POST_NORM: case RG_ROLE_FFN_POST_NORM:
        r.mean = 1.0f, r.std = sh->norm_std; break;
    case RG_ROLE_ATTN_Q_B: case RG_ROLE_ATTN_K_B: case RG_ROLE_ATTN_V_B: case RG_ROLE_ATTN_O_B: case RG_ROLE_SSM_CONV_B:
        r.std = 0.01f; break;
    case RG_ROLE_CONV_KERNEL: case RG_ROLE_SSM_CONV: r.std = 0.2f; break;
    case RG_ROLE_SSM_A: r.mean = -1.0f, r.std = 0.1f; break;
    case RG_ROLE_SSM_D: r.mean = 1.0f, r.std = 0.1f; break;
    case RG_ROLE_SSM_DT_B: r.mean = -3.0f, r.std = 0.5f; break;
    default: break;
    }
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

static rg_status add_tokenizer(rg_gguf *g, const tiny_vocab *tv, int64_t n_vocab, rg_error *err) {
    rg_bpe_vocab v;
    char msg[256] = "";
    int n_specials = 0;
    while (n_specials < 6 && tv->specials[n_specials]) n_specials++;
    int n_merges = RG_TINY_N_VOCAB - 256 - n_specials;
    if (rg_bpe_train(rg_tiny_corpus, rg_tiny_corpus_len, n_merges, &v, msg, sizeof msg) != 0)
        return rg_fail(err, RG_ERR_NOMEM, "make-tiny: tokenizer training failed: %s", msg);
    rg_status s = RG_OK;
    int32_t id[6];
    for (int i = 0; i < n_specials && !s; i++)
        if ((id[i] = rg_bpe_vocab_add(&v, tv->specials[i], 3)) < 0) s = rg_fail(err, RG_ERR_NOMEM, "make-tiny: out of memory");
    if (!s && v.n_tokens != RG_TINY_N_VOCAB)
        s = rg_fail(err, RG_ERR_FORMAT, "make-tiny: tokenizer has %d tokens, expected %d (corpus too small?)",
                    v.n_tokens, RG_TINY_N_VOCAB);
    if (!s) s = rg_gguf_set_str(g, "tokenizer.ggml.model", "gpt2", err);
    if (!s) s = rg_gguf_set_str(g, "tokenizer.ggml.pre", tv->pre, err);
    if (!s) s = set_padded_tokens(g, &v, n_vocab, err);
    if (!s) s = rg_gguf_set_str_array(g, "tokenizer.ggml.merges", (const char *const *)v.merges, (uint64_t)v.n_merges, err);
    if (!s) s = rg_gguf_set_u32(g, "tokenizer.ggml.eos_token_id", (uint32_t)id[tv->eos], err);
    if (!s) s = rg_gguf_set_u32(g, "tokenizer.ggml.padding_token_id", (uint32_t)id[tv->pad], err);
    if (!s) s = rg_gguf_set_u32(g, "tokenizer.ggml.bos_token_id", (uint32_t)id[tv->bos], err);
    if (!s) s = rg_gguf_set_bool(g, "tokenizer.ggml.add_bos_token", tv->add_bos, err);
    if (!s && tv->chat_template) s = rg_gguf_set_str(g, "tokenizer.chat_template", tv->chat_template, err);
    rg_bpe_vocab_free(&v);
    return s;
}

static uint32_t file_type_of(uint32_t type) {
    return type == RG_TYPE_F16 ? 1 : type == RG_TYPE_BF16 ? 32 : 0;
}

static bool tied_of(const rg_tiny_config *cfg, const tiny_arch *a, const rg_tiny_shape *sh) {
    return cfg->tied || sh->tied || a->tied;
}

// A fixture's hyperparameters, as a loader reads them back: the shape's dimensions and the writer's choices.
typedef struct tiny_model {
    rg_hparams hp;
    rg_layer *layers;  // [hp.n_layer]
} tiny_model;

static rg_status tiny_model_make(tiny_model *tm, const rg_tiny_config *cfg, const rg_arch *arch, const tiny_arch *a,
                                 const rg_tiny_shape *sh, rg_error *err) {
    rg_hparams *hp = &tm->hp;
    memset(hp, 0, sizeof *hp);
    const bool ssm = a->ssm_state > 0;  // no attention and no FFN: their keys are 0
    const bool tiny = !strcmp(sh->name, "tiny");
    hp->n_vocab = sh->n_vocab, hp->n_ctx_train = sh->n_ctx, hp->n_embd = sh->n_embd;
    hp->n_layer = tiny && a->n_layer ? a->n_layer : sh->n_layer;
    hp->attn_window = sh->window ? sh->window : a->window;
    hp->attn_softcap = a->attn_softcap, hp->final_softcap = a->final_softcap;
    hp->n_head = ssm ? 0 : sh->n_head, hp->n_head_kv = ssm ? 0 : sh->n_head_kv, hp->n_ff = ssm ? 0 : sh->n_ff;
    hp->head_dim = hp->value_length = hp->n_rot = sh->head_dim ? sh->head_dim
                                                  : a->head_dim ? a->head_dim : ssm ? 0 : sh->n_embd / sh->n_head;
    hp->rope_freq_base = sh->freq_base > 0 ? sh->freq_base : a->freq_base;
    hp->norm_eps = a->norm_eps;
    hp->n_conv = a->n_conv;
    if (ssm) {
        hp->ssm_inner = sh->ssm_inner ? sh->ssm_inner : 2 * sh->n_embd;
        hp->ssm_state = sh->ssm_state ? sh->ssm_state : a->ssm_state;
        hp->ssm_groups = cfg->ssm_groups ? cfg->ssm_groups : 1;
        hp->ssm_heads = hp->ssm_inner / (sh->ssm_head_dim ? sh->ssm_head_dim : a->ssm_head_dim);
    }
    tm->layers = calloc((size_t)hp->n_layer, sizeof *tm->layers);
    if (!tm->layers) return rg_fail(err, RG_ERR_NOMEM, "make-tiny: out of memory");
    for (int64_t il = 0; il < hp->n_layer; il++) {
        rg_layer *L = &tm->layers[il];
        L->n_head = hp->n_head, L->n_ff = hp->n_ff;
        const bool conv = sh->attn_layers ? !(sh->attn_layers >> il & 1) : il % 2 == 0;
        L->n_head_kv = a->conv_even && conv ? 0 : hp->n_head_kv;
        arch->layer_kinds(hp, L, il);
    }
    return RG_OK;
}

// One key of the table: its scalar, or (RG_KEY_ARRAY) one INT32 per layer as llama.cpp's converter writes them.
static rg_status add_key(rg_gguf *g, const rg_arch *arch, const rg_arch_key *k, const tiny_model *tm, rg_error *err) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch->name, k->suffix);
    const char *hp = (const char *)&tm->hp;
    if (k->flags & RG_KEY_FLOAT) return rg_gguf_set_f32(g, key, *(const float *)(hp + k->hp), err);
    if (!(k->flags & RG_KEY_ARRAY)) return rg_gguf_set_u32(g, key, (uint32_t)*(const int64_t *)(hp + k->hp), err);
    int32_t v[RG_TINY_MAX_LAYER];
    const int64_t n = tm->hp.n_layer;
    if (n > RG_TINY_MAX_LAYER) return rg_fail(err, RG_ERR_ARG, "make-tiny: %lld layers for '%s'", (long long)n, key);
    for (int64_t il = 0; il < n; il++) v[il] = (int32_t)*(const int64_t *)((const char *)&tm->layers[il] + k->layer);
    return rg_gguf_set_array(g, key, RG_GGUF_I32, v, (uint64_t)n, err);
}

// The general.* keys, then the table's keys a converter writes for the architecture, in the table's order.
static rg_status add_keys(const rg_tiny_config *cfg, const rg_arch *arch, const tiny_arch *a, const rg_tiny_shape *sh,
                          const tiny_model *tm, rg_gguf *g, rg_error *err) {
    const bool tiny = !strcmp(sh->name, "tiny");
    char name[128];
    snprintf(name, sizeof name, "retrograd %s%s %s %s%s%s", sh->name, tiny ? "" : "-shape", a->name,
             rg_type_get(cfg->type)->name, cfg->twin_f32 ? " (f32 twin)" : "", tied_of(cfg, a, sh) ? " tied" : "");
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
    for (int i = 0; i < arch->n_keys && !s; i++) {
        const rg_arch_key *k = &arch->keys[i];
        if ((k->flags & RG_KEY_REQUIRED) || (k->written & arch->features)) s = add_key(g, arch, k, tm, err);
    }
    return s ? s : add_tokenizer(g, a->vocab, sh->n_vocab, err);
}

// A tensor info without data, in the type its values are stored as.
static rg_status add_info(rg_gguf *g, const rg_tiny_config *cfg, const rg_arch_tensor *t, int64_t il,
                          const tiny_model *tm, rg_error *err) {
    char name[96];
    snprintf(name, sizeof name, t->name, (int)il);
    int64_t ne[4];
    const int n_dims = rg_arch_shape(t, &tm->hp, il >= 0 ? &tm->layers[il] : NULL, ne);
    const uint32_t type = cfg->twin_f32 || (t->flags & RG_T_F32) ? RG_TYPE_F32 : cfg->type;
    return rg_gguf_add_tensor(g, name, type, (uint32_t)n_dims, ne, NULL, err);
}

// The tensors the architecture requires (and the head unless tied), in the converter's order. For llama the
// converter permutes the rows of attn_q / attn_k for NORMAL rope; random weights need no permutation: they are
// the permuted rows of some HF model, which is what transformers recovers when it undoes the permutation.
static rg_status add_tensors(const rg_tiny_config *cfg, const rg_arch *arch, const tiny_arch *a,
                             const rg_tiny_shape *sh, const tiny_model *tm, rg_gguf *g, rg_error *err) {
    rg_status s = RG_OK;
    for (int i = 0; i < arch->n_global && !s; i++) {
        const rg_arch_tensor *t = &arch->global[i];
        bool head = t->role == RG_ROLE_OUTPUT && !tied_of(cfg, a, sh);
        if (rg_arch_tensor_required(arch, t) || head) s = add_info(g, cfg, t, -1, tm, err);
    }
    for (int64_t il = 0; il < tm->hp.n_layer && !s; il++)
        for (int i = 0; i < arch->n_tensors && !s; i++) {
            const rg_arch_tensor *t = &arch->tensors[arch->write_order ? arch->write_order[i] : i];
            if (rg_arch_tensor_in_layer(t, &tm->layers[il]) && rg_arch_tensor_required(arch, t))
                s = add_info(g, cfg, t, il, tm, err);
        }
    return s;
}

static rg_status check_config(const rg_tiny_config *cfg, const tiny_arch **arch, const rg_tiny_shape **shape,
                              rg_error *err) {
    *arch = NULL;
    for (size_t i = 0; i < sizeof tiny_arch_table / sizeof tiny_arch_table[0]; i++)
        if (cfg->arch && strcmp(cfg->arch, tiny_arch_table[i].name) == 0) *arch = &tiny_arch_table[i];
    if (!*arch)
        return rg_fail(err, RG_ERR_ARG, "make-tiny: unknown architecture '%s' (supported: %s)",
                       cfg->arch ? cfg->arch : "(none)", rg_model_archs);
    if (!(*shape = rg_tiny_shape_find(cfg->shape)))
        return rg_fail(err, RG_ERR_ARG, "make-tiny: unknown shape '%s' (supported: tiny, smollm2, 1b, lfm2-350m, "
                       "mamba2-130m, gemma3-270m)", cfg->shape);
    const char *for_arch = (*shape)->arch;
    const bool llama_family = !strcmp((*arch)->name, "llama") || !strcmp((*arch)->name, "qwen2") ||
                              !strcmp((*arch)->name, "qwen3");
    if (for_arch ? strcmp(for_arch, (*arch)->name) != 0 : !llama_family && strcmp((*shape)->name, "tiny") != 0)
        return rg_fail(err, RG_ERR_ARG, "make-tiny: shape '%s' (%s) is for --arch %s, not %s", (*shape)->name,
                       (*shape)->model, for_arch ? for_arch : "llama, qwen2 or qwen3", (*arch)->name);
    if (cfg->type != RG_TYPE_F32 && cfg->type != RG_TYPE_F16 && cfg->type != RG_TYPE_BF16)
        return rg_fail(err, RG_ERR_ARG, "make-tiny: type %s is not supported yet (f32, f16, bf16)",
                       rg_type_get(cfg->type)->name);
    if (cfg->ssm_groups && !(*arch)->ssm_state)
        return rg_fail(err, RG_ERR_ARG, "make-tiny: SSM groups are mamba2's; %s has none", (*arch)->name);
    const int64_t n_heads = (*arch)->ssm_state ? 2 * (*shape)->n_embd / (*arch)->ssm_head_dim : 0;
    if (cfg->ssm_groups && (cfg->ssm_groups < 0 || n_heads % cfg->ssm_groups))
        return rg_fail(err, RG_ERR_ARG, "make-tiny: %lld SSM groups do not divide the %lld heads",
                       (long long)cfg->ssm_groups, (long long)n_heads);
    if ((*shape)->n_layer > RG_TINY_MAX_LAYER)
        return rg_fail(err, RG_ERR_ARG, "make-tiny: shape '%s' has %lld layers, more than %d", cfg->shape,
                       (long long)(*shape)->n_layer, RG_TINY_MAX_LAYER);
    return RG_OK;
}

rg_status rg_tiny_plan(const rg_tiny_config *cfg, rg_gguf **out, rg_error *err) {
    *out = NULL;
    const tiny_arch *a = NULL;
    const rg_tiny_shape *sh = NULL;
    rg_status s = check_config(cfg, &a, &sh, err);
    if (s) return s;
    const rg_arch *arch = rg_arch_find(a->name, strlen(a->name));
    tiny_model tm = {0};
    rg_gguf *g = rg_gguf_new();
    if (!g) return rg_fail(err, RG_ERR_NOMEM, "make-tiny: out of memory");
    s = tiny_model_make(&tm, cfg, arch, a, sh, err);
    if (!s) s = add_keys(cfg, arch, a, sh, &tm, g, err);
    if (!s) s = add_tensors(cfg, arch, a, sh, &tm, g, err);
    free(tm.layers);
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
