// tiny.h - the tiny but complete test models behind `retrograd make-tiny`.
//
// A tiny model is deterministic from its seed and carries everything a real
// GGUF of its architecture carries: hyperparameters, a byte-level BPE
// tokenizer with merges and special tokens, and a chat template. Small enough
// that a training step takes milliseconds; the fixtures of the test suite.
#ifndef RG_MODEL_TINY_H
#define RG_MODEL_TINY_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"

typedef struct rg_tiny_config {
    const char *arch;    // "llama", "qwen2" or "qwen3"
    uint32_t type;       // storage type of the matrices: RG_TYPE_F32, F16 or BF16
    uint64_t seed;
    bool twin_f32;       // values rounded to `type` but stored as F32 (the F32 twin)
    bool tied;           // no output.weight: the head reuses token_embd
} rg_tiny_config;

// The hyperparameters of the tiny models (read them back from the file, not from here).
// llama: no biases, NORMAL rope. qwen2: q/k/v biases, NEOX rope. qwen3: no biases, per-head
// q/k RMSNorm, NEOX rope, head_dim 128 (so n_head * head_dim = 512 != n_embd, as in Qwen3-0.6B).
enum {
    RG_TINY_N_EMBD = 256,  // a multiple of 256, so K-quant and IQ fixtures use their types unchanged
    RG_TINY_N_LAYER = 2,
    RG_TINY_N_HEAD = 4,
    RG_TINY_N_HEAD_KV = 2,
    RG_TINY_N_FF = 512,
    RG_TINY_N_CTX = 256,
    RG_TINY_N_VOCAB = 512,   // 256 bytes + merges + 3 ChatML specials
    RG_TINY_QWEN3_HEAD_DIM = 128,  // llama and qwen2: n_embd / n_head = 64
};

// Names of the architectures make-tiny knows, NULL-terminated.
extern const char *const rg_tiny_archs[];

rg_status rg_tiny_build(const rg_tiny_config *cfg, rg_gguf **out, rg_error *err);
rg_status rg_tiny_write(const rg_tiny_config *cfg, const char *path, rg_error *err);

#endif
