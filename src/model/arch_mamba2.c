// arch_mamba2.c - mamba2 (architectures.md §3.1-3.3): every layer is an RMSNorm
// and a Mamba-2 mixer (in_proj to z, xBC, dt; a causal depthwise conv with bias
// and SiLU over xBC; the selective scan with a scalar decay per head; the D
// skip, the SiLU(z) gate, the grouped gated RMSNorm, out_proj). No FFN, no
// RoPE, no attention keys (the converter writes head_count and
// feed_forward_length as 0). The head is tied in released models.
#include <stddef.h>
#include <stdio.h>

#include "base/error.h"
#include "model/arch_keys.h"

static const rg_arch_key keys[] = {
    {"block_count", RG_KEY_HP(n_layer), -1, RG_KEY_REQUIRED, 0, 0},
    {"context_length", RG_KEY_HP(n_ctx_train), -1, RG_KEY_REQUIRED, 0, 0},        // the converter writes 2^20
    {"embedding_length", RG_KEY_HP(n_embd), -1, RG_KEY_REQUIRED, 0, 0},
    {"feed_forward_length", RG_KEY_HP(n_ff), -1, 0, RG_FEAT_ALL, 0},               // unused: 0
    {"attention.head_count", RG_KEY_HP(n_head), -1, 0, RG_FEAT_ALL, 0},            // unused: 0
    {"ssm.conv_kernel", RG_KEY_HP(n_conv), -1, RG_KEY_REQUIRED, 0, 0},             // K, 4 in released models
    {"ssm.inner_size", RG_KEY_HP(ssm_inner), -1, RG_KEY_REQUIRED, 0, 0},           // D_in = 2 n_embd
    {"ssm.state_size", RG_KEY_HP(ssm_state), -1, RG_KEY_REQUIRED, 0, 0},           // N
    {"ssm.time_step_rank", RG_KEY_HP(ssm_heads), -1, RG_KEY_REQUIRED, 0, 0},       // for Mamba-2: the head count nh
    {"ssm.group_count", RG_KEY_HP(ssm_groups), -1, RG_KEY_REQUIRED, 0, 0},         // G
    {"attention.layer_norm_rms_epsilon", RG_KEY_HP(norm_eps), -1, RG_KEY_FLOAT | RG_KEY_REQUIRED, 0, 0},
};

// d = n_embd, V = n_vocab, D_in = ssm.inner_size, N = ssm.state_size, nh = heads, G = groups, K = conv_kernel.
static const rg_arch_tensor global[] = {
    {RG_ROLE_TOKEN_EMBD, "token_embd.weight", NULL, {RG_DIM_EMBD, RG_DIM_VOCAB}, 0, RG_FEAT_ALL, 0, -1},  // [d, V]
    {RG_ROLE_OUTPUT_NORM, "output_norm.weight", NULL, {RG_DIM_EMBD}, 0, RG_FEAT_ALL, RG_T_F32, -1},     // [d] norm_f
    {RG_ROLE_OUTPUT, "output.weight", NULL, {RG_DIM_EMBD, RG_DIM_VOCAB}, 0, 0, 0, -1},                   // [d, V]; absent: tied
};

#define SSM RG_KIND_BIT(RG_KIND_SSM)
#define REQ RG_FEAT_ALL

// A is stored as A = -exp(A_log): trained directly it can turn positive and the scan grow without bound, so a
// full fine-tune keeps it (training A_log is the usual way, UNVERIFIED which is best). in/out_proj have no LoRA
// target yet.
static const rg_arch_tensor tensors[] = {
    {RG_ROLE_ATTN_NORM, "blk.%d.attn_norm.weight", NULL, {RG_DIM_EMBD}, SSM, REQ, RG_T_F32, -1},            // [d]
    {RG_ROLE_SSM_IN, "blk.%d.ssm_in.weight", NULL, {RG_DIM_EMBD, RG_DIM_SSM_IN}, SSM, REQ, 0, RG_LORA_TARGET_IN},          // [d, 2D_in+2GN+nh]
    {RG_ROLE_SSM_CONV, "blk.%d.ssm_conv1d.weight", NULL, {RG_DIM_CONV, RG_DIM_SSM_CONV_CH}, SSM, REQ, RG_T_F32, -1},  // [K, D_in+2GN]
    {RG_ROLE_SSM_CONV_B, "blk.%d.ssm_conv1d.bias", NULL, {RG_DIM_SSM_CONV_CH}, SSM, REQ, RG_T_F32, -1},     // [D_in+2GN]
    {RG_ROLE_SSM_DT_B, "blk.%d.ssm_dt.bias", NULL, {RG_DIM_SSM_HEADS}, SSM, REQ, RG_T_F32, -1},             // [nh]
    {RG_ROLE_SSM_A, "blk.%d.ssm_a", NULL, {RG_DIM_ONE, RG_DIM_SSM_HEADS}, SSM, REQ, RG_T_F32 | RG_T_FROZEN, -1},  // [1, nh]
    {RG_ROLE_SSM_D, "blk.%d.ssm_d", NULL, {RG_DIM_ONE, RG_DIM_SSM_HEADS}, SSM, REQ, RG_T_F32, -1},          // [1, nh]
    {RG_ROLE_SSM_NORM, "blk.%d.ssm_norm.weight", NULL, {RG_DIM_SSM_GROUP, RG_DIM_SSM_GROUPS}, SSM, REQ, RG_T_F32, -1},  // [D_in/G, G]
    {RG_ROLE_SSM_OUT, "blk.%d.ssm_out.weight", NULL, {RG_DIM_SSM_INNER, RG_DIM_EMBD}, SSM, REQ, 0, RG_LORA_TARGET_OUT},     // [D_in, d]
};

static void layer_kinds(const rg_hparams *hp, rg_layer *L, int64_t il) {
    (void)hp, (void)il;
    L->mixer = RG_KIND_SSM;
    L->ffn = RG_KIND_NONE;
}

static rg_status positive(const char *path, const char *key, int64_t v, rg_error *err) {
    return v > 0 ? RG_OK : rg_fail(err, RG_ERR_FORMAT, "%s: mamba2.%s is %lld, must be positive", path, key, (long long)v);
}

static rg_status check_hparams(const char *path, rg_hparams *hp, rg_layer *layers, rg_error *err) {
    (void)layers;
    rg_status s = rg_arch_check_conv_kernel(path, "mamba2.ssm.conv_kernel", hp->n_conv, err);
    if (!s) s = positive(path, "embedding_length", hp->n_embd, err);
    if (!s) s = positive(path, "ssm.inner_size", hp->ssm_inner, err);
    if (!s) s = positive(path, "ssm.state_size", hp->ssm_state, err);
    if (!s) s = positive(path, "ssm.time_step_rank", hp->ssm_heads, err);
    if (!s) s = positive(path, "ssm.group_count", hp->ssm_groups, err);
    if (s) return s;
    if (hp->ssm_inner % hp->ssm_heads)
        return rg_fail(err, RG_ERR_FORMAT, "%s: mamba2.ssm.inner_size %lld is not a multiple of mamba2.ssm.time_step_rank "
                       "%lld (the head count)", path, (long long)hp->ssm_inner, (long long)hp->ssm_heads);
    if (hp->ssm_heads % hp->ssm_groups)
        return rg_fail(err, RG_ERR_FORMAT, "%s: mamba2.ssm.time_step_rank %lld (the head count) is not a multiple of "
                       "mamba2.ssm.group_count %lld", path, (long long)hp->ssm_heads, (long long)hp->ssm_groups);
    hp->head_dim = hp->ssm_inner / hp->ssm_heads;  // P, each head's width
    hp->rope_freq_scale = 1.0f;
    return RG_OK;
}

// The conv channels are D_in + 2 G N: a state size that disagrees with them is named with the tensor that says so.
static rg_status check_tensors(const rg_model *m, rg_error *err) {
    const rg_hparams *hp = &m->hp;
    const int64_t D_in = hp->ssm_inner, G = hp->ssm_groups, N = hp->ssm_state;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.ssm_conv1d.weight", (int)il);
        const rg_gguf_tensor *t = rg_gguf_find_tensor(m->file, name);
        if (!t || t->ne[1] == D_in + 2 * G * N) continue;
        const int64_t extra = t->ne[1] - D_in;
        if (extra > 0 && extra % (2 * G) == 0)
            return rg_fail(err, RG_ERR_FORMAT, "%s: mamba2.ssm.state_size is %lld but tensor '%s' has %lld channels, which "
                           "means a state size of %lld (channels = ssm.inner_size %lld + 2 x ssm.group_count %lld x "
                           "ssm.state_size)", m->file->path, (long long)N, name, (long long)t->ne[1],
                           (long long)(extra / (2 * G)), (long long)D_in, (long long)G);
    }
    return RG_OK;
}

const rg_arch rg_arch_mamba2 = {
    .name = "mamba2", .features = RG_FEAT_ALL, .rope_mode = -1, .keys = keys,
    .n_keys = (int)(sizeof keys / sizeof keys[0]), .global = global, .n_global = (int)(sizeof global / sizeof global[0]),
    .tensors = tensors, .n_tensors = (int)(sizeof tensors / sizeof tensors[0]), .write_order = NULL,
    .layer_kinds = layer_kinds, .check_hparams = check_hparams, .check_tensors = check_tensors,
};
