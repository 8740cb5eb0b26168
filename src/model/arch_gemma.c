// arch_gemma.c - gemma2 and gemma3 (architectures.md §1.6-1.8): every layer is
// GQA attention with NEOX RoPE and a GeGLU FFN (GELU, tanh approximation, on
// the gate), each branch between a pre-norm and a post-norm ("sandwich":
// x += post_attention_norm(attn(attn_norm(x))), x += post_ffw_norm(ffn(ffn_norm(x)))),
// the embeddings times sqrt(n_embd), the head tied. The converter stores every
// norm weight as 1 + w (HF computes x r (1 + w)), so the plain RMSNorm applies
// them as stored.
//   gemma2: attention logits capped (attn_logit_softcapping, default 50) on the
//           scaled scores before the mask, the head's logits capped
//           (final_logit_softcapping, default 30); even layers slide (window
//           attention.sliding_window, default 4096), odd ones are global.
//   gemma3: per-head q/k RMSNorm before RoPE, no attention cap; layer il is
//           global when (il + 1) % 6 == 0 and slides (window from the key) with
//           its own RoPE base (rope.freq_base_swa, 10000 when absent) otherwise;
//           rope.freq_base and any rope.scaling.factor are the global layers'.
// Query scale 1/sqrt(head_dim) (attention.scale overrides), except the 27B
// models (46 layers for gemma2, 62 for gemma3), which llama.cpp scales by
// 1/sqrt(n_embd / n_head).
#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "base/error.h"
#include "model/arch_keys.h"

enum { GEMMA3_SWA_PATTERN = 6 };

// In the order make-tiny writes them. The converters write key_length / value_length (head_dim), the caps
// (gemma2) and the window; gemma3's final cap only when its config has one.
static const rg_arch_key keys_gemma2[] = {
    RG_KEYS_ATTENTION_FIRST(RG_KEY_DERIVED, RG_FEAT_ALL),
    {"attn_logit_softcapping", RG_KEY_HP(attn_softcap), -1, RG_KEY_FLOAT, RG_FEAT_ALL, 50.0},
    {"final_logit_softcapping", RG_KEY_HP(final_softcap), -1, RG_KEY_FLOAT, RG_FEAT_ALL, 30.0},
    {"attention.sliding_window", RG_KEY_HP(attn_window), -1, 0, RG_FEAT_ALL, 4096},
    RG_KEYS_ATTENTION_OPTIONAL(RG_FEAT_ALL, 0, 0),
};

static const rg_arch_key keys_gemma3[] = {
    RG_KEYS_ATTENTION_FIRST(RG_KEY_DERIVED, RG_FEAT_ALL),
    {"attention.sliding_window", RG_KEY_HP(attn_window), -1, RG_KEY_REQUIRED, 0, 0},
    {"rope.freq_base_swa", RG_KEY_HP(rope_freq_base_swa), -1, RG_KEY_FLOAT, 0, 10000.0},
    {"final_logit_softcapping", RG_KEY_HP(final_softcap), -1, RG_KEY_FLOAT, 0, 0.0},
    RG_KEYS_ATTENTION_OPTIONAL(RG_FEAT_ALL, 0, 0),
};

// d = n_embd, V = n_vocab, H / Hkv = query / kv heads, Dh = head_dim (key_length), F = n_ff.
static const rg_arch_tensor global[] = {
    {RG_ROLE_TOKEN_EMBD, "token_embd.weight", NULL, {RG_DIM_EMBD, RG_DIM_VOCAB}, 0, RG_FEAT_ALL, 0, -1},   // [d, V]
    {RG_ROLE_OUTPUT_NORM, "output_norm.weight", NULL, {RG_DIM_EMBD}, 0, RG_FEAT_ALL, RG_T_F32, -1},      // [d] 1 + w
    {RG_ROLE_OUTPUT, "output.weight", NULL, {RG_DIM_EMBD, RG_DIM_VOCAB}, 0, 0, 0, -1},                    // [d, V]; absent: tied
};

#define ATTN RG_KIND_BIT(RG_KIND_ATTN)
#define FFN RG_KIND_BIT(RG_KIND_FFN)
#define REQ RG_FEAT_ALL

// Slot order (a full fine-tune numbers the tensors so) is the converter's order within a layer.
static const rg_arch_tensor tensors[] = {
    {RG_ROLE_ATTN_NORM, "blk.%d.attn_norm.weight", NULL, {RG_DIM_EMBD}, ATTN, REQ, RG_T_F32, -1},             // [d]
    {RG_ROLE_ATTN_Q, "blk.%d.attn_q.weight", NULL, {RG_DIM_EMBD, RG_DIM_Q}, ATTN, REQ, 0, RG_LORA_TARGET_Q},  // [d, H*Dh]
    {RG_ROLE_ATTN_K, "blk.%d.attn_k.weight", NULL, {RG_DIM_EMBD, RG_DIM_KV}, ATTN, REQ, 0, RG_LORA_TARGET_K},  // [d, Hkv*Dh]
    {RG_ROLE_ATTN_V, "blk.%d.attn_v.weight", NULL, {RG_DIM_EMBD, RG_DIM_KV}, ATTN, REQ, 0, RG_LORA_TARGET_V},  // [d, Hkv*Dh]
    {RG_ROLE_ATTN_Q_NORM, "blk.%d.attn_q_norm.weight", NULL, {RG_DIM_HEAD}, ATTN, RG_FEAT_QK_NORM, RG_T_F32, -1},  // [Dh]
    {RG_ROLE_ATTN_K_NORM, "blk.%d.attn_k_norm.weight", NULL, {RG_DIM_HEAD}, ATTN, RG_FEAT_QK_NORM, RG_T_F32, -1},  // [Dh]
    {RG_ROLE_ATTN_O, "blk.%d.attn_output.weight", NULL, {RG_DIM_Q, RG_DIM_EMBD}, ATTN, REQ, 0, RG_LORA_TARGET_O},  // [H*Dh, d]
    {RG_ROLE_ATTN_POST_NORM, "blk.%d.post_attention_norm.weight", NULL, {RG_DIM_EMBD}, ATTN, REQ, RG_T_F32, -1},  // [d]
    {RG_ROLE_FFN_NORM, "blk.%d.ffn_norm.weight", NULL, {RG_DIM_EMBD}, FFN, REQ, RG_T_F32, -1},                // [d] HF pre_feedforward_layernorm
    {RG_ROLE_FFN_GATE, "blk.%d.ffn_gate.weight", NULL, {RG_DIM_EMBD, RG_DIM_FF}, FFN, REQ, 0, RG_LORA_TARGET_GATE},  // [d, F]
    {RG_ROLE_FFN_UP, "blk.%d.ffn_up.weight", NULL, {RG_DIM_EMBD, RG_DIM_FF}, FFN, REQ, 0, RG_LORA_TARGET_UP},  // [d, F]
    {RG_ROLE_FFN_DOWN, "blk.%d.ffn_down.weight", NULL, {RG_DIM_FF, RG_DIM_EMBD}, FFN, REQ, 0, RG_LORA_TARGET_DOWN},  // [F, d]
    {RG_ROLE_FFN_POST_NORM, "blk.%d.post_ffw_norm.weight", NULL, {RG_DIM_EMBD}, FFN, REQ, RG_T_F32, -1},      // [d]
};

static void layer_kinds(const rg_hparams *hp, rg_layer *L, int64_t il) {
    (void)hp, (void)il;
    L->mixer = RG_KIND_ATTN;
    L->ffn = RG_KIND_FFN;
}

// What the two share once the generic attention checks passed: GeGLU, the embedding scale, the 27B query scale.
static rg_status check_common(const char *path, rg_hparams *hp, rg_layer *layers, int64_t n_layer_27b, rg_error *err) {
    const bool scale_given = hp->attn_scale != 0.0f;
    rg_status s = rg_arch_check_attention(path, hp, layers, err);
    if (s) return s;
    if (!scale_given && hp->n_layer == n_layer_27b) hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    if (hp->attn_window <= 0)
        return rg_fail(err, RG_ERR_FORMAT, "%s: %s.attention.sliding_window is %lld: the sliding layers need a window "
                       "of at least one token", path, hp->arch_name, (long long)hp->attn_window);
    if (hp->final_softcap < 0)
        return rg_fail(err, RG_ERR_FORMAT, "%s: %s.final_logit_softcapping is %g, must be positive (or absent)", path,
                       hp->arch_name, (double)hp->final_softcap);
    hp->embd_scale = sqrtf((float)hp->n_embd);
    hp->ffn_gelu = true;
    return RG_OK;
}

static rg_status check_gemma2(const char *path, rg_hparams *hp, rg_layer *layers, rg_error *err) {
    rg_status s = check_common(path, hp, layers, 46, err);
    if (s) return s;
    if (!(hp->attn_softcap > 0))
        return rg_fail(err, RG_ERR_FORMAT, "%s: gemma2.attn_logit_softcapping is %g, must be positive", path,
                       (double)hp->attn_softcap);
    if (!(hp->final_softcap > 0))
        return rg_fail(err, RG_ERR_FORMAT, "%s: gemma2.final_logit_softcapping is %g, must be positive", path,
                       (double)hp->final_softcap);
    for (int64_t il = 0; il < hp->n_layer; il++)
        if (il % 2 == 0) layers[il].window = hp->attn_window;  // llama.cpp: layer il slides iff il % 2 == 0
    return RG_OK;
}

static rg_status check_gemma3(const char *path, rg_hparams *hp, rg_layer *layers, rg_error *err) {
    rg_status s = check_common(path, hp, layers, 62, err);
    if (s) return s;
    if (!(hp->rope_freq_base_swa > 0))
        return rg_fail(err, RG_ERR_FORMAT, "%s: gemma3.rope.freq_base_swa is %g, must be positive", path,
                       (double)hp->rope_freq_base_swa);
    for (int64_t il = 0; il < hp->n_layer; il++) {
        if ((il + 1) % GEMMA3_SWA_PATTERN == 0) continue;  // global: the model's base and scaling
        layers[il].window = hp->attn_window;
        layers[il].rope_freq_base = hp->rope_freq_base_swa, layers[il].rope_freq_scale = 1.0f;
    }
    return RG_OK;
}

#define GEMMA(arch_name, feats, key_table, check)                                                              \
    {                                                                                                           \
        .name = arch_name, .features = RG_FEAT_ALL | RG_FEAT_KEY_LENGTH | (feats), .rope_mode = 2,              \
        .keys = key_table, .n_keys = (int)(sizeof key_table / sizeof key_table[0]), .global = global,           \
        .n_global = (int)(sizeof global / sizeof global[0]), .tensors = tensors,                               \
        .n_tensors = (int)(sizeof tensors / sizeof tensors[0]), .write_order = NULL,                           \
        .layer_kinds = layer_kinds, .check_hparams = check, .check_tensors = NULL,                             \
    }

const rg_arch rg_arch_gemma2 = GEMMA("gemma2", 0, keys_gemma2, check_gemma2);
const rg_arch rg_arch_gemma3 = GEMMA("gemma3", RG_FEAT_QK_NORM, keys_gemma3, check_gemma3);
