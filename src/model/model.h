// model.h - a model loaded from GGUF by its architecture's table (model/arch.h):
// its hyperparameters and its tensors, memory-mapped and used in place.
#ifndef RG_MODEL_H
#define RG_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "model/arch.h"

typedef struct rg_hparams {
    char arch_name[32];
    int64_t n_vocab, n_ctx_train, n_embd, n_layer;
    // Keys that may be per-layer arrays: the largest layer's value here, each layer's in rg_layer.
    int64_t n_head, n_head_kv, n_ff;
    int64_t head_dim, value_length, n_rot;
    float rope_freq_base, rope_freq_scale, rope_scale_factor, norm_eps, attn_scale;
    int rope_mode;          // 0 normal (llama), 2 neox (qwen2, qwen3, lfm2), -1 none (mamba2)
    bool tied;              // no output.weight: the head is token_embd
    int64_t attn_window;    // attention.sliding_window: lfm2's (0: none; refused there), gemma's sliding layers' window
    float attn_softcap;     // gemma2.attn_logit_softcapping: cap * tanh(scale q.k / cap) before the mask (0: none)
    float final_softcap;    // {gemma2,gemma3}.final_logit_softcapping: the same on the head's logits (0: none)
    float rope_freq_base_swa;  // gemma3.rope.freq_base_swa: the sliding layers' RoPE base (10000 when absent)
    float embd_scale;       // the token embeddings are multiplied by it (gemma: sqrt(n_embd)); 0: not scaled
    bool ffn_gelu;          // the FFN's gate goes through GELU (tanh approximation: GeGLU), not SiLU (gemma)
    int64_t n_conv;         // conv kernel length: lfm2.shortconv.l_cache, mamba2.ssm.conv_kernel
    int64_t ssm_inner, ssm_state, ssm_heads, ssm_groups;  // mamba2.ssm.*: D_in, N, nh (time_step_rank), G
} rg_hparams;

// A layer: its kinds and its tensors by role (NULL where it has none).
typedef struct rg_layer {
    rg_layer_kind mixer;    // RG_KIND_ATTN, RG_KIND_SHORTCONV or RG_KIND_SSM
    rg_layer_kind ffn;      // RG_KIND_FFN or RG_KIND_NONE
    int64_t n_head, n_head_kv, n_ff;
    int64_t window;                        // attention: the sliding window (0: global, every earlier key)
    float rope_freq_base, rope_freq_scale;  // attention: this layer's RoPE (gemma3's sliding layers have their own)
    const rg_gguf_tensor *t[RG_N_ROLES];
} rg_layer;

typedef struct rg_model {
    rg_gguf *file;          // owns the mapping every tensor points into
    const rg_arch *arch;
    rg_hparams hp;
    const rg_gguf_tensor *tok_embd;   // [n_embd, n_vocab]
    const rg_gguf_tensor *out_norm;   // [n_embd]
    const rg_gguf_tensor *output;     // [n_embd, n_vocab]; == tok_embd when tied
    rg_layer *layers;                 // [n_layer]
} rg_model;

// Loads and validates: an unsupported architecture lists the supported ones;
// a missing key or tensor, or a tensor with the wrong shape, is an error that
// names it and says what was expected.
rg_status rg_model_load(rg_model **out, const char *path, rg_error *err);
// The same over an already-open file (the model takes ownership of g on success).
rg_status rg_model_from_gguf(rg_model **out, rg_gguf *g, rg_error *err);
void rg_model_free(rg_model *m);

// The hyperparameters alone, read by the architecture's key table (layers: [hp->n_layer], allocated; the
// caller frees it). What quantize reads of a file it does not load.
rg_status rg_model_read_hparams(const rg_gguf *g, const rg_arch *a, rg_hparams *hp, rg_layer **layers, rg_error *err);

#endif
