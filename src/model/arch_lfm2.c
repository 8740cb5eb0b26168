// arch_lfm2.c - lfm2 (architectures.md §2): every layer is a mixer and a
// SwiGLU FFN; the mixer is a gated short convolution where the per-layer
// array lfm2.attention.head_count_kv holds 0, and GQA attention with per-head
// q/k RMSNorm and NEOX RoPE where it holds the layer's kv heads. The final norm
// is stored as token_embd_norm (llama.cpp's converter; ollama's writes
// output_norm) and applied after the last layer, never to the embeddings. The
// head is tied in released models.
#include <stddef.h>
#include <stdio.h>

#include "base/error.h"
#include "model/arch_keys.h"

// head_count_kv is a per-layer array (0: a conv layer); the converter writes vocab_size, not key_length.
static const rg_arch_key keys[] = {
    RG_KEYS_ATTENTION_FIRST(RG_KEY_REQUIRED | RG_KEY_ARRAY, 0),
    {"shortconv.l_cache", RG_KEY_HP(n_conv), -1, RG_KEY_REQUIRED, 0, 0},                 // L, 3 in released models
    RG_KEYS_ATTENTION_OPTIONAL(0, 0, RG_FEAT_ALL),
    {"attention.sliding_window", RG_KEY_HP(attn_window), -1, 0, 0, 0},                   // > 0: refused
};

// d = n_embd, V = n_vocab, H / Hkv_i = query / layer i's kv heads, Dh = head_dim, F = n_ff, L = l_cache.
static const rg_arch_tensor global[] = {
    {RG_ROLE_TOKEN_EMBD, "token_embd.weight", NULL, {RG_DIM_EMBD, RG_DIM_VOCAB}, 0, RG_FEAT_ALL, 0, -1},  // [d, V]
    {RG_ROLE_OUTPUT_NORM, "token_embd_norm.weight", "output_norm.weight", {RG_DIM_EMBD}, 0, RG_FEAT_ALL, RG_T_F32, -1},  // [d]
    {RG_ROLE_OUTPUT, "output.weight", NULL, {RG_DIM_EMBD, RG_DIM_VOCAB}, 0, 0, 0, -1},                   // [d, V]; absent: tied
};

#define ATTN RG_KIND_BIT(RG_KIND_ATTN)
#define CONV RG_KIND_BIT(RG_KIND_SHORTCONV)
#define FFN RG_KIND_BIT(RG_KIND_FFN)
#define REQ RG_FEAT_ALL

// The short convolution's projections have no LoRA target yet.
static const rg_arch_tensor tensors[] = {
    {RG_ROLE_ATTN_NORM, "blk.%d.attn_norm.weight", NULL, {RG_DIM_EMBD}, ATTN | CONV, REQ, RG_T_F32, -1},      // [d] HF operator_norm
    {RG_ROLE_ATTN_Q, "blk.%d.attn_q.weight", NULL, {RG_DIM_EMBD, RG_DIM_Q}, ATTN, REQ, 0, RG_LORA_TARGET_Q},   // [d, H*Dh]
    {RG_ROLE_ATTN_K, "blk.%d.attn_k.weight", NULL, {RG_DIM_EMBD, RG_DIM_KV}, ATTN, REQ, 0, RG_LORA_TARGET_K},  // [d, Hkv_i*Dh]
    {RG_ROLE_ATTN_V, "blk.%d.attn_v.weight", NULL, {RG_DIM_EMBD, RG_DIM_KV}, ATTN, REQ, 0, RG_LORA_TARGET_V},  // [d, Hkv_i*Dh]
    {RG_ROLE_ATTN_O, "blk.%d.attn_output.weight", NULL, {RG_DIM_Q, RG_DIM_EMBD}, ATTN, REQ, 0, RG_LORA_TARGET_O},  // [H*Dh, d]
    {RG_ROLE_ATTN_Q_NORM, "blk.%d.attn_q_norm.weight", NULL, {RG_DIM_HEAD}, ATTN, REQ, RG_T_F32, -1},         // [Dh]
    {RG_ROLE_ATTN_K_NORM, "blk.%d.attn_k_norm.weight", NULL, {RG_DIM_HEAD}, ATTN, REQ, RG_T_F32, -1},         // [Dh]
    {RG_ROLE_CONV_IN, "blk.%d.shortconv.in_proj.weight", NULL, {RG_DIM_EMBD, RG_DIM_EMBD_X3}, CONV, REQ, 0, RG_LORA_TARGET_IN},  // [d, 3d]: B, C, X
    {RG_ROLE_CONV_KERNEL, "blk.%d.shortconv.conv.weight", NULL, {RG_DIM_CONV, RG_DIM_EMBD}, CONV, REQ, RG_T_F32, -1},  // [L, d]
    {RG_ROLE_CONV_OUT, "blk.%d.shortconv.out_proj.weight", NULL, {RG_DIM_EMBD, RG_DIM_EMBD}, CONV, REQ, 0, RG_LORA_TARGET_OUT},  // [d, d]
    {RG_ROLE_FFN_NORM, "blk.%d.ffn_norm.weight", NULL, {RG_DIM_EMBD}, FFN, REQ, RG_T_F32, -1},               // [d]
    {RG_ROLE_FFN_GATE, "blk.%d.ffn_gate.weight", NULL, {RG_DIM_EMBD, RG_DIM_FF}, FFN, REQ, 0, RG_LORA_TARGET_GATE},  // [d, F] w1
    {RG_ROLE_FFN_UP, "blk.%d.ffn_up.weight", NULL, {RG_DIM_EMBD, RG_DIM_FF}, FFN, REQ, 0, RG_LORA_TARGET_UP},  // [d, F] w3
    {RG_ROLE_FFN_DOWN, "blk.%d.ffn_down.weight", NULL, {RG_DIM_FF, RG_DIM_EMBD}, FFN, REQ, 0, RG_LORA_TARGET_DOWN},  // [F, d] w2
};

// head_count_kv[il] == 0: a short-conv layer (llama.cpp's is_recurrent).
static void layer_kinds(const rg_hparams *hp, rg_layer *L, int64_t il) {
    (void)hp, (void)il;
    L->mixer = L->n_head_kv == 0 ? RG_KIND_SHORTCONV : RG_KIND_ATTN;
    L->ffn = RG_KIND_FFN;
}

static rg_status check_hparams(const char *path, rg_hparams *hp, rg_layer *layers, rg_error *err) {
    rg_status s = rg_arch_check_conv_kernel(path, "lfm2.shortconv.l_cache", hp->n_conv, err);
    if (s) return s;
    if (hp->attn_window > 0)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s: lfm2.attention.sliding_window is %lld: sliding-window attention is "
                       "not supported", path, (long long)hp->attn_window);
    return rg_arch_check_attention(path, hp, layers, err);
}

const rg_arch rg_arch_lfm2 = {
    .name = "lfm2", .features = RG_FEAT_ALL, .rope_mode = 2, .keys = keys,
    .n_keys = (int)(sizeof keys / sizeof keys[0]), .global = global, .n_global = (int)(sizeof global / sizeof global[0]),
    .tensors = tensors, .n_tensors = (int)(sizeof tensors / sizeof tensors[0]), .write_order = NULL,
    .layer_kinds = layer_kinds, .check_hparams = check_hparams, .check_tensors = NULL,
};
