// arch.h - one description per architecture (shared/spec/architectures.md): the
// keys it reads, the tensors it holds and the kinds of layer it is made of.
//
// The loader (model_load.c), the forward (forward.c and the layer builders
// layer_*.c), full fine-tuning (train/train_state.c), LoRA (lora.c), make-tiny
// (tiny.c) and quantize find a model's tensors through these tables instead of
// naming them: a tensor is a row (its role, GGUF name, shape rule, the layer
// kinds that have it, required or optional, trained or frozen, its LoRA target),
// and a layer is its kinds plus one pointer per role. A new architecture is a
// new table (arch_<name>.c) and, when it needs one, a new layer kind.
#ifndef RG_MODEL_ARCH_H
#define RG_MODEL_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "retrograd.h"

struct rg_hparams;
struct rg_layer;
struct rg_model;

// What a tensor is for, whatever its GGUF name. Builders and the trainer find
// tensors by role; each architecture's table says which roles it has, and under
// which name and shape. Global roles first.
typedef enum rg_role {
    RG_ROLE_TOKEN_EMBD,     // token_embd.weight               [n_embd, n_vocab]
    RG_ROLE_OUTPUT_NORM,    // the final norm                  [n_embd]
    RG_ROLE_OUTPUT,         // the LM head (absent: tied)      [n_embd, n_vocab]
    RG_ROLE_N_GLOBAL,
    // per layer
    RG_ROLE_ATTN_NORM = RG_ROLE_N_GLOBAL,  // the norm before the layer's mixer (attention, short conv or SSM)
    RG_ROLE_ATTN_Q, RG_ROLE_ATTN_Q_B, RG_ROLE_ATTN_K, RG_ROLE_ATTN_K_B, RG_ROLE_ATTN_V, RG_ROLE_ATTN_V_B,
    RG_ROLE_ATTN_O, RG_ROLE_ATTN_O_B, RG_ROLE_ATTN_Q_NORM, RG_ROLE_ATTN_K_NORM,
    RG_ROLE_CONV_IN, RG_ROLE_CONV_KERNEL, RG_ROLE_CONV_OUT,                 // lfm2's short convolution
    RG_ROLE_SSM_IN, RG_ROLE_SSM_CONV, RG_ROLE_SSM_CONV_B, RG_ROLE_SSM_DT_B, // mamba2's mixer
    RG_ROLE_SSM_A, RG_ROLE_SSM_D, RG_ROLE_SSM_NORM, RG_ROLE_SSM_OUT,
    RG_ROLE_FFN_NORM, RG_ROLE_FFN_GATE, RG_ROLE_FFN_UP, RG_ROLE_FFN_DOWN,
    RG_ROLE_ATTN_POST_NORM, RG_ROLE_FFN_POST_NORM,   // gemma's norms of the attention and FFN outputs
    RG_N_ROLES
} rg_role;

// The parts a layer is made of: one mixer (attention, short convolution or
// SSM) and at most one FFN. Each kind has a graph builder and a per-layer
// state (model/layer.h).
typedef enum rg_layer_kind {
    RG_KIND_NONE,
    RG_KIND_ATTN,        // GQA self-attention with RoPE; state: the KV cache
    RG_KIND_SHORTCONV,   // lfm2's gated short convolution; state: the last L-1 gated inputs
    RG_KIND_SSM,         // mamba2's selective scan; state: the conv window and the SSM state
    RG_KIND_FFN,         // dense gated FFN (SwiGLU, or GeGLU where hparams.ffn_gelu); no state
    RG_N_KINDS
} rg_layer_kind;

#define RG_KIND_BIT(k) (1u << (k))

// The LoRA targets (model/lora.h): bit i of a target mask is target i; the
// config's lora.targets names them q, k, v, o, gate, up, down, in, out. IN and OUT are a
// recurrent mixer's input and output projections (lfm2's shortconv.in_proj / out_proj,
// mamba2's ssm_in / ssm_out), which llama.cpp's graphs adapt like any other matrix.
enum { RG_LORA_TARGET_Q, RG_LORA_TARGET_K, RG_LORA_TARGET_V, RG_LORA_TARGET_O, RG_LORA_TARGET_GATE,
       RG_LORA_TARGET_UP, RG_LORA_TARGET_DOWN, RG_LORA_TARGET_IN, RG_LORA_TARGET_OUT, RG_LORA_N_TARGETS };

// A dimension of a tensor's shape as a function of the hyperparameters and the layer.
typedef enum rg_dim {
    RG_DIM_NONE,         // past the tensor's last dimension
    RG_DIM_ONE,          // 1
    RG_DIM_EMBD,         // n_embd
    RG_DIM_EMBD_X3,      // 3 * n_embd (lfm2's in_proj: B, C, X)
    RG_DIM_VOCAB,        // n_vocab (token_embd's second dimension defines it)
    RG_DIM_Q,            // the layer's n_head * head_dim
    RG_DIM_KV,           // the layer's n_head_kv * head_dim
    RG_DIM_HEAD,         // head_dim
    RG_DIM_FF,           // the layer's n_ff
    RG_DIM_CONV,         // conv kernel length (lfm2.shortconv.l_cache, mamba2.ssm.conv_kernel)
    RG_DIM_SSM_IN,       // 2 * ssm_inner + 2 * ssm_groups * ssm_state + ssm_heads (z, xBC, dt)
    RG_DIM_SSM_CONV_CH,  // ssm_inner + 2 * ssm_groups * ssm_state (x, B, C)
    RG_DIM_SSM_HEADS,    // ssm_heads (mamba2.ssm.time_step_rank)
    RG_DIM_SSM_INNER,    // ssm_inner
    RG_DIM_SSM_GROUP,    // ssm_inner / ssm_groups (the gated norm's group)
    RG_DIM_SSM_GROUPS,   // ssm_groups
} rg_dim;

// Features an architecture has; a tensor row is required where its mask meets them.
enum {
    RG_FEAT_ALL = 1,          // every architecture: a row required by it is always required
    RG_FEAT_QKV_BIAS = 2,     // qwen2: attn_{q,k,v}.bias
    RG_FEAT_QK_NORM = 4,      // qwen3: attn_{q,k}_norm
    RG_FEAT_KEY_LENGTH = 8,   // the converter writes attention.key_length / value_length (qwen3)
    RG_FEAT_ROPE_DIMS = 16,   // the converter writes rope.dimension_count and vocab_size (llama)
};

// Tensor flags.
enum {
    RG_T_FROZEN = 1,   // a full fine-tune keeps it as it is (mamba2's A: see arch_mamba2.c)
    RG_T_F32 = 2,      // a small elementwise weight: written F32, never quantized, loaded as F32/F16/BF16 only
};

typedef struct rg_arch_tensor {
    rg_role role;
    const char *name;       // the GGUF name; a per-layer one has one %d: "blk.%d.attn_q.weight"
    const char *alt_name;   // also accepted when name is absent, or NULL
    uint8_t dims[3];        // the shape in ggml order (RG_DIM_NONE past the last)
    uint8_t kinds;          // RG_KIND_BIT of the layer kinds that have it (0: a global tensor)
    uint8_t required;       // RG_FEAT_* for which it must be present (0: optional everywhere)
    uint8_t flags;          // RG_T_*
    int8_t lora;            // the RG_LORA_TARGET_* that adapts it, or -1
} rg_arch_tensor;

// Key flags.
enum {
    RG_KEY_REQUIRED = 1,     // absent: an error naming it
    RG_KEY_FLOAT = 2,        // a float (the hparams field is a float); otherwise a non-negative integer
    RG_KEY_DERIVED = 4,      // absent: -1, and the architecture's check derives it
    RG_KEY_UNREAD = 8,       // written by converters but not read (vocab_size: token_embd's rows are the vocabulary)
    RG_KEY_ARRAY = 16,       // make-tiny writes it as a per-layer array (lfm2's head_count_kv)
};

typedef struct rg_arch_key {
    const char *suffix;     // the key is "<arch>.<suffix>"
    int16_t hp;             // offsetof(rg_hparams, field): int64_t, or float with RG_KEY_FLOAT
    int16_t layer;          // offsetof(rg_layer, field) when a per-layer array is allowed, else -1
    uint8_t flags;          // RG_KEY_*
    uint8_t written;        // RG_FEAT_* whose converters write it when it is not required (make-tiny follows)
    double def;             // the value when absent (not RG_KEY_REQUIRED / RG_KEY_DERIVED)
} rg_arch_key;

typedef struct rg_arch {
    const char *name;       // general.architecture
    uint8_t features;       // RG_FEAT_*
    int rope_mode;          // 0 NORMAL, 2 NEOX, -1 no RoPE
    const rg_arch_key *keys;
    int n_keys;
    const rg_arch_tensor *global;   // token_embd, the final norm, the head
    int n_global;
    const rg_arch_tensor *tensors;  // per layer, in slot order: the order a full fine-tune numbers them
    int n_tensors;
    const uint8_t *write_order;     // slots in the order make-tiny writes a layer (NULL: slot order)
    // Sets L->mixer and L->ffn from the layer's hyperparameters.
    void (*layer_kinds)(const struct rg_hparams *hp, struct rg_layer *L, int64_t il);
    // Fills the derived keys and checks that the keys fit together; errors name the key.
    rg_status (*check_hparams)(const char *path, struct rg_hparams *hp, struct rg_layer *layers, rg_error *err);
    // Relations between keys and tensors the shape rules cannot say (NULL: none); runs before the shape checks.
    rg_status (*check_tensors)(const struct rg_model *m, rg_error *err);
} rg_arch;

// Every architecture, NULL-terminated, and their names ("llama, qwen2, ...") for messages.
extern const rg_arch *const rg_archs[];
extern const char *const rg_model_archs;
// The architecture called name[0..len), or NULL.
const rg_arch *rg_arch_find(const char *name, size_t len);

// A dimension's value for layer L (NULL for a global tensor), and its name for messages ("n_head*head_dim").
int64_t rg_arch_dim(rg_dim d, const struct rg_hparams *hp, const struct rg_layer *L);
const char *rg_arch_dim_name(rg_dim d);
// The shape of row t in layer L: ne[4] (1 past the last dimension); returns the dimension count.
int rg_arch_shape(const rg_arch_tensor *t, const struct rg_hparams *hp, const struct rg_layer *L, int64_t ne[4]);
// "[256, 768] = [n_embd, 3*n_embd]" for messages.
void rg_arch_shape_str(const rg_arch_tensor *t, const struct rg_hparams *hp, const struct rg_layer *L, char *buf,
                       size_t cap);

// Whether layer L has row t (its kinds), and whether the architecture requires it.
bool rg_arch_tensor_in_layer(const rg_arch_tensor *t, const struct rg_layer *L);
bool rg_arch_tensor_required(const rg_arch *a, const rg_arch_tensor *t);
// The row of a GGUF tensor name ("blk.3.ffn_up.weight" or "token_embd.weight"), with its layer (-1 for a
// global one), or NULL when the architecture has no such tensor.
const rg_arch_tensor *rg_arch_tensor_of(const rg_arch *a, const char *name, int64_t *il);
// The row with a role, or NULL; the LoRA target of a role, or -1.
const rg_arch_tensor *rg_arch_role(const rg_arch *a, rg_role role);
int rg_arch_lora_target(const rg_arch *a, rg_role role);
// The row that a LoRA target adapts, or NULL when the architecture has none.
const rg_arch_tensor *rg_arch_lora_row(const rg_arch *a, int target);

// Shared by the architectures with attention (arch_llama.c, arch_lfm2.c, arch_gemma.c): head_count_kv defaults to
// head_count, key_length to n_embd / n_head, value_length to key_length, rope.dimension_count to head_dim,
// attention.scale to 1 / sqrt(head_dim); every attention layer's heads must fit, every FFN's n_ff be positive.
// Every layer gets the model's RoPE base and scale and no sliding window (gemma's check changes them per layer).
rg_status rg_arch_check_attention(const char *path, struct rg_hparams *hp, struct rg_layer *layers, rg_error *err);
// The conv kernel lengths the short-conv and SSM layers take (key names the key for the message).
enum { RG_CONV_KERNEL_MIN = 2, RG_CONV_KERNEL_MAX = 8 };
rg_status rg_arch_check_conv_kernel(const char *path, const char *key, int64_t n_conv, rg_error *err);

#endif
