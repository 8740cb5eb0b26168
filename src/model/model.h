// model.h - a llama-family model (llama, qwen2, qwen3) loaded from GGUF: its
// hyperparameters and its tensors, memory-mapped and used in place.
#ifndef RG_MODEL_H
#define RG_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"

typedef enum rg_arch { RG_ARCH_LLAMA, RG_ARCH_QWEN2, RG_ARCH_QWEN3 } rg_arch;

typedef struct rg_hparams {
    rg_arch arch;
    char arch_name[32];
    int64_t n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_rot;
    float rope_freq_base, rope_freq_scale, norm_eps, attn_scale;
    int rope_mode;         // 0 normal (llama), 2 neox (qwen2, qwen3)
    bool tied;             // no output.weight: the head is token_embd
} rg_hparams;

typedef struct rg_layer {
    const rg_gguf_tensor *attn_norm;          // [n_embd]
    const rg_gguf_tensor *wq, *wk, *wv, *wo;  // [n_embd, n_head*head_dim], [n_embd, n_head_kv*head_dim] x2, [n_head*head_dim, n_embd]
    const rg_gguf_tensor *bq, *bk, *bv, *bo;  // optional biases
    const rg_gguf_tensor *q_norm, *k_norm;    // qwen3: [head_dim]
    const rg_gguf_tensor *ffn_norm;           // [n_embd]
    const rg_gguf_tensor *ffn_gate, *ffn_up;  // [n_embd, n_ff]
    const rg_gguf_tensor *ffn_down;           // [n_ff, n_embd]
} rg_layer;

typedef struct rg_model {
    rg_gguf *file;         // owns the mapping every tensor points into
    rg_hparams hp;
    const rg_gguf_tensor *tok_embd;   // [n_embd, n_vocab]
    const rg_gguf_tensor *out_norm;   // [n_embd]
    const rg_gguf_tensor *output;     // [n_embd, n_vocab]; == tok_embd when tied
    rg_layer *layers;                 // [n_layer]
} rg_model;

// Names of the supported architectures, for messages.
extern const char *const rg_model_archs;

// Loads and validates: an unsupported architecture lists the supported ones;
// a missing key or tensor, or a tensor with the wrong shape, is an error that
// names it and says what was expected.
rg_status rg_model_load(rg_model **out, const char *path, rg_error *err);
// The same over an already-open file (the model takes ownership of g on success).
rg_status rg_model_from_gguf(rg_model **out, rg_gguf *g, rg_error *err);
void rg_model_free(rg_model *m);

#endif
