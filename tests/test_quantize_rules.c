// test_quantize_rules.c - which tensor gets which type: llama-quantize's
// conventions (spec §6) on a 32-layer llama-shaped model and edge cases.
#include <string.h>

#include "model/quantize_rules.h"
#include "rg_test.h"

static void test_never_quantized(void) {
    static const struct { const char *name; int n_dims; bool want; } cases[] = {
        {"blk.0.attn_q.weight", 2, true},      {"token_embd.weight", 2, true},
        {"output.weight", 2, true},            {"blk.0.attn_norm.weight", 1, false},
        {"blk.0.attn_q.bias", 1, false},       {"blk.0.ssm_norm.weight", 2, false},
        {"blk.3.ffn_gate_inp.weight", 2, false}, {"blk.0.ssm_conv1d.weight", 2, false},
        {"blk.0.shortconv.conv.weight", 2, false}, {"blk.0.ssm_a", 2, false},
        {"position_embd.weight", 2, false},    {"blk.0.time_mix_w1.weight", 2, false},
        {"blk.0.attn_q.weight", 1, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        RG_CHECK(rg_quant_tensor_is_quantizable(cases[i].name, cases[i].n_dims) == cases[i].want, "%s (%d dims)",
                 cases[i].name, cases[i].n_dims);
}

static void test_use_more_bits_layers_for_q4_k_m(void) {
    const rg_quant_target *t = rg_quant_target_find("q4_k_m");
    RG_REQUIRE(t && t->mixture && t->llama_ftype == 15, "Q4_K_M target");
    rg_quant_state st = {.n_layer = 32, .n_head = 32, .n_head_kv = 8, .has_output = true, .n_attention_wv = 32};
    rg_error err = {0};
    // Spec §6.2: for n = 32, use_more_bits is true on layers 0-3, 6, 9, ..., 27 and 28-31.
    static const int more[] = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
    for (int layer = 0; layer < 32; layer++) {
        int want_more = 0;
        for (size_t k = 0; k < sizeof more / sizeof more[0]; k++) want_more |= more[k] == layer;
        char name[64];
        snprintf(name, sizeof name, "blk.%d.attn_v.weight", layer);
        int v = rg_quant_choose_type(t, &st, name, 4096, &err);
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", layer);
        int d = rg_quant_choose_type(t, &st, name, 14336, &err);
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", layer);
        int q = rg_quant_choose_type(t, &st, name, 4096, &err);
        uint32_t want = want_more ? RG_TYPE_Q6_K : RG_TYPE_Q4_K;
        RG_CHECK(v == (int)want && d == (int)want && q == RG_TYPE_Q4_K, "layer %d: attn_v %s ffn_down %s attn_q %s",
                 layer, rg_type_get((uint32_t)v)->name, rg_type_get((uint32_t)d)->name, rg_type_get((uint32_t)q)->name);
    }
    RG_CHECK(rg_quant_choose_type(t, &st, "output.weight", 4096, &err) == RG_TYPE_Q6_K, "output");
    RG_CHECK(rg_quant_choose_type(t, &st, "token_embd.weight", 4096, &err) == RG_TYPE_Q4_K, "untied embedding");
}

static void test_mixture_table(void) {
    // One row per (mixture, tensor): spec §6.3 for a 32-layer model with GQA 4.
    static const struct { const char *mix; const char *name; int64_t ne0; uint32_t want; } cases[] = {
        {"Q2_K", "blk.5.attn_v.weight", 4096, RG_TYPE_Q4_K},    // n_gqa >= 4
        {"Q2_K", "blk.5.ffn_down.weight", 14336, RG_TYPE_Q3_K},
        {"Q2_K", "blk.5.attn_output.weight", 4096, RG_TYPE_Q3_K},
        {"Q2_K", "blk.5.ffn_up.weight", 4096, RG_TYPE_Q2_K},
        {"Q3_K_M", "blk.0.ffn_down.weight", 14336, RG_TYPE_Q5_K},  // layer < 32/16
        {"Q3_K_M", "blk.2.ffn_down.weight", 14336, RG_TYPE_Q4_K},
        {"Q3_K_M", "blk.9.attn_output.weight", 4096, RG_TYPE_Q4_K},
        {"Q3_K_M", "blk.9.attn_k.weight", 4096, RG_TYPE_Q3_K},
        {"Q5_K_M", "blk.4.ffn_down.weight", 14336, RG_TYPE_Q5_K},
        {"Q5_K_M", "blk.6.ffn_down.weight", 14336, RG_TYPE_Q6_K},
        {"Q4_K_S", "blk.3.ffn_down.weight", 14336, RG_TYPE_Q5_K},  // first n/8 layers
        {"Q4_K_S", "blk.4.ffn_down.weight", 14336, RG_TYPE_Q4_K},
        {"Q4_0", "output.weight", 4096, RG_TYPE_Q6_K},             // single types keep the Q6_K head
        {"Q8_0", "output.weight", 4096, RG_TYPE_Q8_0},
        {"Q4_0", "blk.1.attn_v.weight", 4096, RG_TYPE_Q4_0},
        {"Q4_K_M", "output.weight", 4000, RG_TYPE_Q8_0},           // head rows not a multiple of 256
        {"Q4_K_M", "blk.1.attn_q.weight", 96, RG_TYPE_Q5_0},       // shape fallback Q4_K -> Q5_0
        {"Q6_K", "blk.1.attn_q.weight", 96, RG_TYPE_Q8_0},         // Q6_K -> Q8_0
        {"IQ4_XS", "blk.1.attn_q.weight", 96, RG_TYPE_IQ4_NL},     // IQ -> IQ4_NL
        {"Q2_K", "blk.1.attn_q.weight", 48, RG_TYPE_F16},          // nothing quantized fits 48
    };
    rg_error err = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const rg_quant_target *t = rg_quant_target_find(cases[i].mix);
        RG_REQUIRE(t, "target %s", cases[i].mix);
        rg_quant_state st = {.n_layer = 32, .n_head = 32, .n_head_kv = 8, .has_output = true, .n_attention_wv = 32,
                             .i_attention_wv = rg_quant_layer_of(cases[i].name)};
        int got = rg_quant_choose_type(t, &st, cases[i].name, cases[i].ne0, &err);
        RG_CHECK(got == (int)cases[i].want, "%s %s (ne0 %lld): got %s, want %s", cases[i].mix, cases[i].name,
                 (long long)cases[i].ne0, got >= 0 ? rg_type_get((uint32_t)got)->name : err.msg,
                 rg_type_get(cases[i].want)->name);
    }
}

static void test_tied_embedding_is_the_head(void) {
    const rg_quant_target *t = rg_quant_target_find("Q4_K_M");
    rg_quant_state st = {.n_layer = 24, .n_head = 14, .n_head_kv = 2, .has_output = false};
    rg_error err = {0};
    RG_CHECK(rg_quant_choose_type(t, &st, "token_embd.weight", 896, &err) == RG_TYPE_Q8_0, "896 is not a 256 multiple");
    RG_CHECK(rg_quant_choose_type(t, &st, "token_embd.weight", 1024, &err) == RG_TYPE_Q6_K, "tied head gets Q6_K");
}

static void test_pure_and_errors(void) {
    const rg_quant_target *t = rg_quant_target_find("Q4_K_M");
    rg_quant_state st = {.n_layer = 32, .pure = true, .has_output = true};
    rg_error err = {0};
    RG_CHECK(rg_quant_choose_type(t, &st, "output.weight", 4096, &err) == RG_TYPE_Q4_K, "pure head");
    RG_CHECK(rg_quant_choose_type(t, &st, "blk.0.ffn_down.weight", 4096, &err) == RG_TYPE_Q4_K, "pure ffn_down");
    const rg_quant_target *q8 = rg_quant_target_find("Q8_0");
    RG_CHECK(rg_quant_choose_type(q8, &st, "blk.0.attn_q.weight", 50, &err) == -1 && strstr(err.msg, "blk.0.attn_q.weight"),
             "%s", err.msg);
    RG_CHECK(rg_quant_target_find("Q9_K") == NULL && rg_quant_target_find("q4_k_m") != NULL, "lookup");
    RG_CHECK(rg_quant_layer_of("blk.17.ffn_up.weight") == 17 && rg_quant_layer_of("output.weight") == -1 &&
                 rg_quant_layer_of("blk.x.w") == -1, "layer parse");
}

static const rg_test_case cases[] = {
    RG_TEST(test_never_quantized),
    RG_TEST(test_use_more_bits_layers_for_q4_k_m),
    RG_TEST(test_mixture_table),
    RG_TEST(test_tied_embedding_is_the_head),
    RG_TEST(test_pure_and_errors),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
