// arch_keys.h - the key rows the attention architectures share (architectures.md
// §0.3), for their tables (arch_llama.c, arch_lfm2.c): the generic keys in the
// order llama.cpp's converter writes them, and the optional ones after.
#ifndef RG_MODEL_ARCH_KEYS_H
#define RG_MODEL_ARCH_KEYS_H

#include <stddef.h>

#include "model/arch.h"
#include "model/model.h"

#define RG_KEY_HP(f) (int16_t)offsetof(rg_hparams, f)
#define RG_KEY_LAYER(f) (int16_t)offsetof(rg_layer, f)

// block_count first, so per-layer arrays can be checked against it. kv_flags / kv_written: how the architecture
// takes attention.head_count_kv.
#define RG_KEYS_ATTENTION_FIRST(kv_flags, kv_written)                                                         \
    {"block_count", RG_KEY_HP(n_layer), -1, RG_KEY_REQUIRED, 0, 0},                                          \
    {"context_length", RG_KEY_HP(n_ctx_train), -1, RG_KEY_REQUIRED, 0, 0},                                    \
    {"embedding_length", RG_KEY_HP(n_embd), -1, RG_KEY_REQUIRED, 0, 0},                                       \
    {"feed_forward_length", RG_KEY_HP(n_ff), RG_KEY_LAYER(n_ff), RG_KEY_REQUIRED, 0, 0},                      \
    {"attention.head_count", RG_KEY_HP(n_head), RG_KEY_LAYER(n_head), RG_KEY_REQUIRED, 0, 0},                 \
    {"attention.head_count_kv", RG_KEY_HP(n_head_kv), RG_KEY_LAYER(n_head_kv), kv_flags, kv_written, 0},      \
    {"rope.freq_base", RG_KEY_HP(rope_freq_base), -1, RG_KEY_FLOAT, RG_FEAT_ALL, 10000.0},                    \
    {"attention.layer_norm_rms_epsilon", RG_KEY_HP(norm_eps), -1, RG_KEY_FLOAT | RG_KEY_REQUIRED, 0, 0}

// key_length defaults to n_embd / n_head, value_length to key_length, rope.dimension_count to head_dim
// (rg_arch_check_attention); rope.scaling.factor 0 is no scaling, attention.scale 0 is 1/sqrt(head_dim).
// key_written / rope_written / vocab_written: the features whose converters write them.
#define RG_KEYS_ATTENTION_OPTIONAL(key_written, rope_written, vocab_written)                                  \
    {"attention.key_length", RG_KEY_HP(head_dim), -1, RG_KEY_DERIVED, key_written, 0},                        \
    {"attention.value_length", RG_KEY_HP(value_length), -1, RG_KEY_DERIVED, key_written, 0},                  \
    {"rope.dimension_count", RG_KEY_HP(n_rot), -1, RG_KEY_DERIVED, rope_written, 0},                          \
    {"vocab_size", RG_KEY_HP(n_vocab), -1, RG_KEY_UNREAD, vocab_written, 0},                                  \
    {"rope.scaling.factor", RG_KEY_HP(rope_scale_factor), -1, RG_KEY_FLOAT, 0, 0.0},                          \
    {"attention.scale", RG_KEY_HP(attn_scale), -1, RG_KEY_FLOAT, 0, 0.0}

#endif
