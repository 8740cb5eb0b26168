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
    const char *arch;    // "llama", "qwen2", "qwen3", "lfm2", "mamba2", "gemma2" or "gemma3"
    uint32_t type;       // storage type of the matrices: RG_TYPE_F32, F16 or BF16
    uint64_t seed;
    bool twin_f32;       // values rounded to `type` but stored as F32 (the F32 twin)
    bool tied;           // no output.weight: the head reuses token_embd (lfm2 and mamba2 always, as released)
    int64_t ssm_groups;  // mamba2: the SSM's group count G (0: one); it must divide the 8 heads
    const char *shape;   // NULL or "tiny": the fixtures' dimensions below; or a name of rg_tiny_shapes
    int n_threads;       // threads that make the values (rg_tiny_write, rg_tiny_build); <= 0: all cores
} rg_tiny_config;

// The hyperparameters of the tiny models (read them back from the file, not from here).
// llama: no biases, NORMAL rope. qwen2: q/k/v biases, NEOX rope. qwen3: no biases, per-head
// q/k RMSNorm, NEOX rope, head_dim 128 (so n_head * head_dim = 512 != n_embd, as in Qwen3-0.6B).
// lfm2: short-conv layers (kernel 3) at even indices and attention (per-head q/k norms) at odd
// ones, the final norm as token_embd_norm, tied, LFM2's specials and chat template. mamba2:
// inner size 2 n_embd, heads of 64, state size 16, one group (or ssm_groups), kernel 4, tied, GPT-NeoX-like
// specials and no chat template. gemma2: the sandwich norms, GeGLU, caps 0.5 (attention) and 3 (logits), layer 0
// sliding with a window of 8, layer 1 global, tied. gemma3: six layers (0-4 sliding, window 8, RoPE base 1e4;
// layer 5 global, base 1e6), per-head q/k norms, head_dim 128, no caps, tied. Both carry the ChatML tokenizer.
enum {
    RG_TINY_N_EMBD = 256,  // a multiple of 256, so K-quant and IQ fixtures use their types unchanged
    RG_TINY_N_LAYER = 2,
    RG_TINY_N_HEAD = 4,
    RG_TINY_N_HEAD_KV = 2,
    RG_TINY_N_FF = 512,
    RG_TINY_N_CTX = 256,
    RG_TINY_N_VOCAB = 512,   // 256 bytes + merges + 3 ChatML specials
    RG_TINY_QWEN3_HEAD_DIM = 128,  // llama and qwen2: n_embd / n_head = 64
    RG_TINY_MAX_LAYER = 128,       // the most layers a shape may have
};

// The dimensions of a model: the tiny fixtures', or a real model's with random weights
// (benchmarks and the GPU check need the shape, not the knowledge). A shape's vocabulary is
// the tiny tokenizer's 512 tokens padded to n_vocab with distinct "[PAD<id>]" tokens of type
// UNUSED, as llama.cpp's converter pads one: the tokenizer works, and every id is a row.
typedef struct rg_tiny_shape {
    const char *name;    // what --shape takes
    const char *model;   // the model whose dimensions these are
    int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
    float freq_base;     // rope base; 0: the architecture's (llama 1e4, qwen 1e6)
    float embd_std, norm_std;  // token_embd ~ N(0, embd_std); norms 1 + N(0, norm_std); matrices N(0, 0.02)
    bool tied;           // the head is token_embd whatever --tied says (both real models tie it)
    // A hybrid model's shape: the one architecture it is for (NULL: the llama family), lfm2's
    // attention layers (bit i: layer i; 0: the tiny pattern, odd layers) and mamba2's SSM sizes
    // (state N, head P, inner size; 0: the tiny choices, N 16, P 64, 2 n_embd).
    const char *arch;
    uint64_t attn_layers;
    int64_t ssm_state, ssm_head_dim, ssm_inner;
    int64_t head_dim;    // key_length when it is not n_embd / n_head (0: the architecture's choice)
    int64_t window;      // gemma's sliding window (0: the architecture's tiny choice)
} rg_tiny_shape;

// "tiny" (the fixtures), "smollm2" (SmolLM2-135M: 576, 30 layers, 9/3 heads, 1536, 49152),
// "1b" (Llama-3.2-1B: 2048, 16 layers, 32/8 heads, 8192, 128256, context 2048), "lfm2-350m"
// (LFM2-350M: 1024, 16 layers with attention at 2, 5, 8, 10, 12, 14, 16/8 heads, 4608, 65536,
// kernel 3) and "mamba2-130m" (mamba2-130m: 768, 24 layers, state 128, heads of 64, inner 1536,
// one group, kernel 4, 50288) and "gemma3-270m" (Gemma-3-270M: 640, 18 layers, 4/1 heads of 256, 2048, 262144,
// window 512, every sixth layer global), NULL-terminated.
extern const rg_tiny_shape rg_tiny_shapes[];
// The shape called name (NULL: "tiny"), or NULL when there is none.
const rg_tiny_shape *rg_tiny_shape_find(const char *name);

// Names of the architectures make-tiny knows, NULL-terminated.
extern const char *const rg_tiny_archs[];

// The file's keys and tensor infos, with no tensor data (data == NULL): what `make-tiny
// --dry-run` lists, and the plan that rg_tiny_build fills in memory and rg_tiny_write streams.
rg_status rg_tiny_plan(const rg_tiny_config *cfg, rg_gguf **out, rg_error *err);
// Every tensor's values in memory (the file's arena).
rg_status rg_tiny_build(const rg_tiny_config *cfg, rg_gguf **out, rg_error *err);
// The file written atomically with the values made chunk by chunk as they are written (on
// cfg->n_threads threads), never held whole: the 1b shape in BF16 is 2.5 GB. Same bytes as
// rg_gguf_write of rg_tiny_build's result.
rg_status rg_tiny_write(const rg_tiny_config *cfg, const char *path, rg_error *err);

#endif
