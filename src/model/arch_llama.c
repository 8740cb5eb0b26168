// arch_llama.c - llama, qwen2 and qwen3 (architectures.md §0.3, §1): one family,
// one table of keys and tensors; the three differ in their features (qwen2's
// q/k/v biases, qwen3's per-head q/k norms), their RoPE and what their
// converters write.
#include <stddef.h>

#include "model/arch_keys.h"

// In the order make-tiny writes them (the converter's). head_count_kv defaults to head_count; qwen3's converter
// writes key_length and value_length, llama's rope.dimension_count and vocab_size.
static const rg_arch_key keys[] = {
    RG_KEYS_ATTENTION_FIRST(RG_KEY_DERIVED, RG_FEAT_ALL),
    RG_KEYS_ATTENTION_OPTIONAL(RG_FEAT_KEY_LENGTH, RG_FEAT_ROPE_DIMS, RG_FEAT_ROPE_DIMS),
};

// d = n_embd, V = n_vocab, H / Hkv = query / kv heads, Dh = head_dim, F = n_ff.
static const rg_arch_tensor global[] = {
    {RG_ROLE_TOKEN_EMBD, "token_embd.weight", NULL, {RG_DIM_EMBD, RG_DIM_VOCAB}, 0, RG_FEAT_ALL, 0, -1},   // [d, V]
    {RG_ROLE_OUTPUT_NORM, "output_norm.weight", NULL, {RG_DIM_EMBD}, 0, RG_FEAT_ALL, RG_T_F32, -1},      // [d]
    {RG_ROLE_OUTPUT, "output.weight", NULL, {RG_DIM_EMBD, RG_DIM_VOCAB}, 0, 0, 0, -1},                    // [d, V]; absent: tied
};

#define ATTN RG_KIND_BIT(RG_KIND_ATTN)
#define FFN RG_KIND_BIT(RG_KIND_FFN)

// Slot order: the order a full fine-tune numbers the tensors (which keys their stochastic rounding).
static const rg_arch_tensor tensors[] = {
    {RG_ROLE_ATTN_NORM, "blk.%d.attn_norm.weight", NULL, {RG_DIM_EMBD}, ATTN, RG_FEAT_ALL, RG_T_F32, -1},       // [d]
    {RG_ROLE_ATTN_Q, "blk.%d.attn_q.weight", NULL, {RG_DIM_EMBD, RG_DIM_Q}, ATTN, RG_FEAT_ALL, 0, RG_LORA_TARGET_Q},  // [d, H*Dh]
    {RG_ROLE_ATTN_Q_B, "blk.%d.attn_q.bias", NULL, {RG_DIM_Q}, ATTN, RG_FEAT_QKV_BIAS, RG_T_F32, -1},           // [H*Dh]
    {RG_ROLE_ATTN_K, "blk.%d.attn_k.weight", NULL, {RG_DIM_EMBD, RG_DIM_KV}, ATTN, RG_FEAT_ALL, 0, RG_LORA_TARGET_K},  // [d, Hkv*Dh]
    {RG_ROLE_ATTN_K_B, "blk.%d.attn_k.bias", NULL, {RG_DIM_KV}, ATTN, RG_FEAT_QKV_BIAS, RG_T_F32, -1},          // [Hkv*Dh]
    {RG_ROLE_ATTN_V, "blk.%d.attn_v.weight", NULL, {RG_DIM_EMBD, RG_DIM_KV}, ATTN, RG_FEAT_ALL, 0, RG_LORA_TARGET_V},  // [d, Hkv*Dh]
    {RG_ROLE_ATTN_V_B, "blk.%d.attn_v.bias", NULL, {RG_DIM_KV}, ATTN, RG_FEAT_QKV_BIAS, RG_T_F32, -1},          // [Hkv*Dh]
    {RG_ROLE_ATTN_O, "blk.%d.attn_output.weight", NULL, {RG_DIM_Q, RG_DIM_EMBD}, ATTN, RG_FEAT_ALL, 0, RG_LORA_TARGET_O},  // [H*Dh, d]
    {RG_ROLE_ATTN_O_B, "blk.%d.attn_output.bias", NULL, {RG_DIM_EMBD}, ATTN, 0, RG_T_F32, -1},                  // [d]
    {RG_ROLE_ATTN_Q_NORM, "blk.%d.attn_q_norm.weight", NULL, {RG_DIM_HEAD}, ATTN, RG_FEAT_QK_NORM, RG_T_F32, -1},  // [Dh]
    {RG_ROLE_ATTN_K_NORM, "blk.%d.attn_k_norm.weight", NULL, {RG_DIM_HEAD}, ATTN, RG_FEAT_QK_NORM, RG_T_F32, -1},  // [Dh]
    {RG_ROLE_FFN_NORM, "blk.%d.ffn_norm.weight", NULL, {RG_DIM_EMBD}, FFN, RG_FEAT_ALL, RG_T_F32, -1},          // [d]
    {RG_ROLE_FFN_GATE, "blk.%d.ffn_gate.weight", NULL, {RG_DIM_EMBD, RG_DIM_FF}, FFN, RG_FEAT_ALL, 0, RG_LORA_TARGET_GATE},  // [d, F]
    {RG_ROLE_FFN_UP, "blk.%d.ffn_up.weight", NULL, {RG_DIM_EMBD, RG_DIM_FF}, FFN, RG_FEAT_ALL, 0, RG_LORA_TARGET_UP},  // [d, F]
    {RG_ROLE_FFN_DOWN, "blk.%d.ffn_down.weight", NULL, {RG_DIM_FF, RG_DIM_EMBD}, FFN, RG_FEAT_ALL, 0, RG_LORA_TARGET_DOWN},  // [F, d]
};

// The fixtures' order: the q/k norms before attn_output.
static const uint8_t write_order[] = {0, 1, 2, 3, 4, 5, 6, 9, 10, 7, 8, 11, 12, 13, 14};
_Static_assert(sizeof write_order == sizeof tensors / sizeof tensors[0], "one write slot per tensor");

static void layer_kinds(const rg_hparams *hp, rg_layer *L, int64_t il) {
    (void)hp, (void)il;
    L->mixer = RG_KIND_ATTN;
    L->ffn = RG_KIND_FFN;
}

#define FAMILY(arch_name, feats, rope)                                                                          \
    {                                                                                                           \
        .name = arch_name, .features = RG_FEAT_ALL | (feats), .rope_mode = rope, .keys = keys,                 \
        .n_keys = (int)(sizeof keys / sizeof keys[0]), .global = global,                                       \
        .n_global = (int)(sizeof global / sizeof global[0]), .tensors = tensors,                               \
        .n_tensors = (int)(sizeof tensors / sizeof tensors[0]), .write_order = write_order,                     \
        .layer_kinds = layer_kinds, .check_hparams = rg_arch_check_attention, .check_tensors = NULL,           \
    }

// llama: NORMAL RoPE on rows the converter permuted; biases accepted when present.
const rg_arch rg_arch_llama = FAMILY("llama", RG_FEAT_ROPE_DIMS, 0);
// qwen2: NEOX RoPE, q/k/v biases.
const rg_arch rg_arch_qwen2 = FAMILY("qwen2", RG_FEAT_QKV_BIAS, 2);
// qwen3: NEOX RoPE, per-head RMSNorm of q and k before it, head_dim from key_length.
const rg_arch rg_arch_qwen3 = FAMILY("qwen3", RG_FEAT_QK_NORM | RG_FEAT_KEY_LENGTH, 2);
