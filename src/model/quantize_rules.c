// quantize_rules.c - see quantize_rules.h; rules from spec §6.
#include "model/quantize_rules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/error.h"

const rg_quant_target rg_quant_targets[] = {
    {"F32", RG_TYPE_F32, 0, false},        {"F16", RG_TYPE_F16, 1, false},
    {"BF16", RG_TYPE_BF16, 32, false},     {"Q4_0", RG_TYPE_Q4_0, 2, false},
    {"Q4_1", RG_TYPE_Q4_1, 3, false},      {"Q5_0", RG_TYPE_Q5_0, 8, false},
    {"Q5_1", RG_TYPE_Q5_1, 9, false},      {"Q8_0", RG_TYPE_Q8_0, 7, false},
    {"Q2_K", RG_TYPE_Q2_K, 10, true},      {"Q3_K_M", RG_TYPE_Q3_K, 12, true},
    {"Q4_K_S", RG_TYPE_Q4_K, 14, true},    {"Q4_K_M", RG_TYPE_Q4_K, 15, true},
    {"Q5_K_M", RG_TYPE_Q5_K, 17, true},    {"Q6_K", RG_TYPE_Q6_K, 18, false},
    {"Q3_K", RG_TYPE_Q3_K, 12, false},     {"Q4_K", RG_TYPE_Q4_K, 15, false},
    {"Q5_K", RG_TYPE_Q5_K, 17, false},     {"IQ4_NL", RG_TYPE_IQ4_NL, 25, false},
    {"IQ4_XS", RG_TYPE_IQ4_XS, 30, false}, {"TQ1_0", RG_TYPE_TQ1_0, 36, false},
    {"TQ2_0", RG_TYPE_TQ2_0, 37, false},   {"MXFP4", RG_TYPE_MXFP4, 38, false},
    {"NVFP4", RG_TYPE_NVFP4, 39, false},   {"Q1_0", RG_TYPE_Q1_0, 40, false},
    {"Q2_0", RG_TYPE_Q2_0, 41, false},
    {NULL, 0, 0, false},
};

const rg_quant_target *rg_quant_target_find(const char *name) {
    for (const rg_quant_target *t = rg_quant_targets; t->name; t++)
        if (strcasecmp(t->name, name) == 0) return t;
    return NULL;
}

rg_status rg_quant_target_lookup(const char *name, const rg_quant_target **out, rg_error *err) {
    *out = rg_quant_target_find(name);
    if (*out) return RG_OK;
    char list[512] = "";
    size_t o = 0;
    for (const rg_quant_target *t = rg_quant_targets; t->name && o < sizeof list; t++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", o ? ", " : "", t->name);
    return rg_fail(err, RG_ERR_ARG, "unknown type or mixture '%.64s' (valid: %s)", name, list);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

bool rg_quant_tensor_is_quantizable(const char *name, int n_dims) {
    static const char *never[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
        "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight", "attn_rel_b.weight",
        ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger",
        "a.rvq.codebook", "mm.a.code_embd", "position_embd.weight", "token_types.weight",
    };
    static const char *rwkv[] = {"first", "w0", "w1", "w2", "v0", "v1", "v2", "a0", "a1", "a2",
                                 "g1", "g2", "decay_w1", "decay_w2", "lerp_fused"};
    if (n_dims < 2 || !ends_with(name, "weight")) return false;
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (strstr(name, never[i])) return false;
    for (size_t i = 0; i < sizeof rwkv / sizeof rwkv[0]; i++) {
        char pat[48];
        snprintf(pat, sizeof pat, "time_mix_%s.weight", rwkv[i]);
        if (strstr(name, pat)) return false;
    }
    return true;
}

int rg_quant_layer_of(const char *name) {
    if (strncmp(name, "blk.", 4) != 0) return -1;
    char *end;
    long v = strtol(name + 4, &end, 10);
    return (end != name + 4 && *end == '.' && v >= 0 && v < 1000000) ? (int)v : -1;
}

// llama.cpp's use_more_bits: the first and last eighth, and every third in between.
static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

bool rg_quant_is_attn_v_like(const char *name) {
    return strstr(name, "attn_v.weight") || strstr(name, "attn_qkv.weight") || strstr(name, "attn_kv_b.weight");
}

// §6.3 for the mixtures.
static uint32_t mixture_type(const rg_quant_target *t, rg_quant_state *st, const char *name, int64_t ne0) {
    uint32_t def = t->default_type;
    int ft = (int)t->llama_ftype;
    int layer = rg_quant_layer_of(name);
    int n_layer = st->n_layer > 0 ? st->n_layer : 1;
    bool is_output = strcmp(name, "output.weight") == 0 ||
                     (!st->has_output && (strcmp(name, "token_embd.weight") == 0));
    if (is_output) return ne0 % 256 ? RG_TYPE_Q8_0 : RG_TYPE_Q6_K;
    if (strcmp(name, "token_embd.weight") == 0) return def;
    if (rg_quant_is_attn_v_like(name)) {
        int i = st->i_attention_wv++;
        uint32_t r = def;
        int n_gqa = st->n_head_kv > 0 ? st->n_head / st->n_head_kv : 1;
        if (ft == 10) r = n_gqa >= 4 ? RG_TYPE_Q4_K : RG_TYPE_Q3_K;
        else if (ft == 12) r = i < 2 ? RG_TYPE_Q5_K : RG_TYPE_Q4_K;
        else if (ft == 14) r = i < 4 ? RG_TYPE_Q5_K : def;
        else if (ft == 15) r = use_more_bits(i, st->n_attention_wv) ? RG_TYPE_Q6_K : RG_TYPE_Q4_K;
        else if (ft == 17) r = use_more_bits(i, st->n_attention_wv) ? RG_TYPE_Q6_K : RG_TYPE_Q5_K;
        if (st->n_expert == 8) r = RG_TYPE_Q8_0;
        return r;
    }
    if (strstr(name, "ffn_down")) {
        int i = layer >= 0 ? layer : 0;
        if (ft == 10) return RG_TYPE_Q3_K;
        if (ft == 12) return i < n_layer / 16 ? RG_TYPE_Q5_K : RG_TYPE_Q4_K;
        if (ft == 14) return i < n_layer / 8 ? RG_TYPE_Q5_K : def;
        if (ft == 15) return use_more_bits(i, n_layer) ? RG_TYPE_Q6_K : RG_TYPE_Q4_K;
        if (ft == 17) return use_more_bits(i, n_layer) ? RG_TYPE_Q6_K : RG_TYPE_Q5_K;
        return def;
    }
    if (strstr(name, "attn_output.weight")) {
        if (st->n_expert == 8 && (ft == 10 || ft == 12 || ft == 15)) return RG_TYPE_Q5_K;
        if (ft == 10) return RG_TYPE_Q3_K;
        if (ft == 12) return RG_TYPE_Q4_K;
        return def;
    }
    if (strstr(name, "attn_k.weight") && st->n_expert == 8) return RG_TYPE_Q8_0;
    return def;
}

// The output rule of §6.3 for single-type files: every quantized ftype but Q8_0
// puts the head in Q6_K (Q8_0 when its rows do not fit 256-blocks).
static uint32_t single_type(const rg_quant_target *t, rg_quant_state *st, const char *name, int64_t ne0) {
    bool quantized = rg_type_get(t->default_type)->quantized;
    bool is_output = strcmp(name, "output.weight") == 0 || (!st->has_output && strcmp(name, "token_embd.weight") == 0);
    if (is_output && quantized && t->default_type != RG_TYPE_Q8_0 && t->default_type != RG_TYPE_Q6_K &&
        t->default_type != RG_TYPE_MXFP4)
        return ne0 % 256 ? RG_TYPE_Q8_0 : RG_TYPE_Q6_K;
    if (rg_quant_is_attn_v_like(name)) st->i_attention_wv++;
    return t->default_type;
}

// §6.2 step 3: a type whose block does not divide ne0 falls back.
static int shape_fallback(uint32_t type, int64_t ne0) {
    const rg_type_traits *tt = rg_type_get(type);
    if (ne0 % tt->block_size == 0) return (int)type;
    uint32_t next;
    switch (type) {
    case RG_TYPE_IQ2_XXS: case RG_TYPE_IQ2_XS: case RG_TYPE_IQ2_S: case RG_TYPE_IQ3_XXS: case RG_TYPE_IQ3_S:
    case RG_TYPE_IQ1_S: case RG_TYPE_IQ1_M: case RG_TYPE_IQ4_XS: next = RG_TYPE_IQ4_NL; break;
    case RG_TYPE_Q2_K: case RG_TYPE_Q3_K: case RG_TYPE_TQ1_0: case RG_TYPE_TQ2_0: case RG_TYPE_Q2_0: next = RG_TYPE_Q4_0; break;
    case RG_TYPE_Q4_K: next = RG_TYPE_Q5_0; break;
    case RG_TYPE_Q5_K: next = RG_TYPE_Q5_1; break;
    case RG_TYPE_Q6_K: next = RG_TYPE_Q8_0; break;
    default: return -1;
    }
    if (ne0 % rg_type_get(next)->block_size == 0) return (int)next;
    return ne0 % rg_type_get(RG_TYPE_F16)->block_size == 0 ? RG_TYPE_F16 : -1;
}

int rg_quant_choose_type(const rg_quant_target *target, rg_quant_state *st, const char *name, int64_t ne0,
                         rg_error *err) {
    uint32_t want = st->pure ? target->default_type
                             : target->mixture ? mixture_type(target, st, name, ne0) : single_type(target, st, name, ne0);
    if (st->pure && rg_quant_is_attn_v_like(name)) st->i_attention_wv++;
    int got = shape_fallback(want, ne0);
    if (got < 0)
        rg_fail(err, RG_ERR_ARG, "tensor '%s': ne[0] = %lld fits neither %s nor any fallback type", name,
                (long long)ne0, rg_type_get(want)->name);
    return got;
}
