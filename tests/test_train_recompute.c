// test_train_recompute.c - activation recompute (training.md §9): with the
// layer inputs kept in F32 the step's loss, every gradient and the weights
// after AdamW steps are the same bits as keeping every activation, while the
// activation memory shrinks; inputs kept in F16/BF16 give a gradient gap of a
// few units of their roundoff (the §4.1 metric), an F16 input out of range is
// refused naming the layer, and `auto` switches recompute on when the run
// would not fit otherwise. Also the rewrite's own errors.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "graph/exec.h"
#include "model/model.h"
#include "model/tiny.h"
#include "rg_test.h"
#include "train_rows.h"
#include "train/train_state.h"

enum { T = 64 };

static char model_path[256];

static rg_model *tiny(uint32_t type) {
    snprintf(model_path, sizeof model_path, "/tmp/rg_test_recompute_%d.gguf", (int)getpid());
    rg_tiny_config tc = {.arch = "qwen2", .type = type, .seed = 7};
    rg_error err = {0};
    rg_model *m = tt_tiny(model_path, &tc, RG_TYPE_F32, &err);
    RG_CHECK(m, "tiny model: %s", err.msg);
    return m;
}

static void done_model(rg_model *m) {
    rg_model_free(m);
    unlink(model_path);
}

static rg_train_config config(rg_train_method method, rg_recompute rc, uint32_t ckpt) {
    rg_train_config c = tt_config(method, T);
    c.recompute = rc;
    c.checkpoint_dtype = ckpt;
    c.flash_attn = RG_FLASH_ATTN_OFF;  // as auto is at this ctx, and not the rescue of a run over a limit (test_train_flash)
    return c;
}

// Rows: two packed documents (positions restart, no attention across), some
// positions without a target.
static const tt_rows ROWS = {.T = T, .split = 40, .mod = 7, .rem = 3, .mul = 0x9E3779B9u, .add = 1};
static rg_train_state *state(const rg_model *m, const rg_train_config *c, size_t limit, rg_error *err) {
    return tt_state(m, c, limit, err);
}
static rg_status micro(rg_train_state *s, int r, double *loss, rg_error *err) { return tt_micro(&ROWS, s, r, loss, err); }

// Two states over one model; false (both freed, the failure recorded) when either cannot be made.
static bool two_states(const rg_model *m, const rg_train_config *ca, const rg_train_config *cb, rg_train_state **a,
                       rg_train_state **b) {
    rg_error err = {0};
    *a = state(m, ca, 0, &err);
    *b = *a ? state(m, cb, 0, &err) : NULL;
    if (*a && *b) return true;
    RG_CHECK(0, "create: %s", err.msg);
    rg_train_state_free(*a);
    *a = NULL;
    return false;
}

static size_t tensor_bytes(const rg_train_tensor *t) { return (size_t)t->nel * rg_type_get(t->type)->type_size; }

// Keeping every activation and recomputing from F32 layer inputs: same bits.
static void same_bits(rg_train_method method, uint32_t type) {
    rg_model *m = tiny(type);
    RG_REQUIRE(m, "no model");
    rg_error err = {0};
    rg_train_config ca = config(method, RG_RECOMPUTE_NONE, RG_TYPE_F32), cb = config(method, RG_RECOMPUTE_LAYER, RG_TYPE_F32);
    rg_train_state *a, *b;
    if (!two_states(m, &ca, &cb, &a, &b)) goto out;
    RG_CHECK(!a->recompute && b->recompute, "recompute flags %d %d", a->recompute, b->recompute);
    rg_train_memory ma = rg_train_state_memory(a), mb = rg_train_state_memory(b);
    RG_CHECK(mb.activations < ma.activations, "activations with recompute %zu, without %zu", mb.activations, ma.activations);
    RG_CHECK(a->g->n_nodes < b->g->n_nodes, "nodes %d vs %d", a->g->n_nodes, b->g->n_nodes);
    printf("    %s %s: activations %.2f MiB kept, %.2f MiB with layer recompute; %d -> %d nodes\n",
           method == RG_TRAIN_FULL ? "full" : "lora", rg_type_get(type)->name, ma.activations / 1048576.0,
           mb.activations / 1048576.0, a->g->n_nodes, b->g->n_nodes);
    for (int step = 0; step < 3; step++) {
        double la, lb, na, nb, lra, lrb;
        bool ska, skb;
        RG_REQUIRE(micro(a, step, &la, &err) == RG_OK, "micro a: %s", err.msg);
        RG_REQUIRE(micro(b, step, &lb, &err) == RG_OK, "micro b: %s", err.msg);
        RG_CHECK(memcmp(&la, &lb, sizeof la) == 0, "step %d loss %.9g vs %.9g", step, la, lb);
        int differ = 0;
        for (int k = 0; k < a->n_tensors; k++)
            if (memcmp(a->tensors[k].grad, b->tensors[k].grad, (size_t)a->tensors[k].nel * 4)) {
                if (differ++ < 3) RG_CHECK(0, "step %d: the gradient of '%s' differs", step, a->tensors[k].name);
            }
        RG_CHECK(differ == 0, "step %d: %d of %d gradients differ", step, differ, a->n_tensors);
        RG_REQUIRE(rg_train_state_step(a, &na, &lra, &ska, &err) == RG_OK, "step a: %s", err.msg);
        RG_REQUIRE(rg_train_state_step(b, &nb, &lrb, &skb, &err) == RG_OK, "step b: %s", err.msg);
        RG_CHECK(na == nb && !ska && !skb, "step %d: norms %.9g %.9g", step, na, nb);
    }
    for (int k = 0; k < a->n_tensors; k++)
        RG_CHECK(!memcmp(a->tensors[k].w, b->tensors[k].w, tensor_bytes(&a->tensors[k])),
                 "after 3 steps '%s' differs", a->tensors[k].name);
out:
    rg_train_state_free(a);
    rg_train_state_free(b);
    done_model(m);
}

static void test_full_f32_same_bits(void) { same_bits(RG_TRAIN_FULL, RG_TYPE_F32); }
static void test_full_bf16_same_bits(void) { same_bits(RG_TRAIN_FULL, RG_TYPE_BF16); }
static void test_lora_f32_same_bits(void) { same_bits(RG_TRAIN_LORA, RG_TYPE_F32); }

// §4.1: worst over tensors of max|Δ| / max|g|, and the 2-norm ratio.
static void gap(const rg_train_state *ref, const rg_train_state *s, double *worst, double *l2) {
    *worst = 0;
    double d2 = 0, g2 = 0;
    for (int k = 0; k < ref->n_tensors; k++) {
        const float *g = ref->tensors[k].grad, *h = s->tensors[k].grad;
        double md = 0, mg = 0;
        for (int64_t i = 0; i < ref->tensors[k].nel; i++) {
            double d = fabs((double)h[i] - (double)g[i]);
            md = d > md ? d : md;
            mg = fabs((double)g[i]) > mg ? fabs((double)g[i]) : mg;
            d2 += d * d, g2 += (double)g[i] * (double)g[i];
        }
        double t = mg > 0 ? md / mg : (md > 0 ? INFINITY : 0);
        *worst = t > *worst ? t : *worst;
    }
    *l2 = sqrt(d2 / g2);
}

// Inputs rounded to F16/BF16: the loss is the first forward's (same bits), the
// gradient is off by a few units of the roundoff.
static void half_checkpoints(uint32_t ckpt, double lo, double hi) {
    rg_model *m = tiny(RG_TYPE_F32);
    RG_REQUIRE(m, "no model");
    rg_error err = {0};
    rg_train_config ca = config(RG_TRAIN_FULL, RG_RECOMPUTE_NONE, RG_TYPE_F32);
    rg_train_config cb = config(RG_TRAIN_FULL, RG_RECOMPUTE_AUTO, ckpt);  // auto: recompute, for the dtype
    rg_train_state *a, *b;
    if (!two_states(m, &ca, &cb, &a, &b)) goto out;
    RG_CHECK(b->recompute && b->n_ckpts == RG_TINY_N_LAYER, "recompute %d, %d stored inputs", b->recompute, b->n_ckpts);
    rg_train_memory mb = rg_train_state_memory(b);
    RG_CHECK(mb.recompute && mb.checkpoint_type == ckpt, "memory report: recompute %d type %u", mb.recompute,
             mb.checkpoint_type);
    double la, lb, worst, l2;
    RG_REQUIRE(micro(a, 0, &la, &err) == RG_OK, "micro a: %s", err.msg);
    RG_REQUIRE(micro(b, 0, &lb, &err) == RG_OK, "micro b: %s", err.msg);
    RG_CHECK(la == lb, "loss %.9g vs %.9g", la, lb);
    gap(a, b, &worst, &l2);
    printf("    %s layer inputs: worst relative gradient gap %.3g, 2-norm %.3g (tolerance (%g, %g])\n",
           rg_type_get(ckpt)->name, worst, l2, lo, hi);
    RG_CHECK(worst > lo && worst <= hi, "worst gap %.3g outside (%g, %g]", worst, lo, hi);
    RG_CHECK(l2 <= worst, "2-norm gap %.3g above the worst %.3g", l2, worst);
out:
    rg_train_state_free(a);
    rg_train_state_free(b);
    done_model(m);
}

// u16 = 4.9e-4, ubf16 = 3.9e-3 (training.md §9.4): a few units, never zero.
static void test_f16_checkpoints_gap(void) { half_checkpoints(RG_TYPE_F16, 1e-6, 1e-2); }
static void test_bf16_checkpoints_gap(void) { half_checkpoints(RG_TYPE_BF16, 1e-5, 6e-2); }

// Embeddings scaled far past 65504: the F16 input of layer 0 overflows.
static void test_f16_overflow_named(void) {
    rg_model *m = tiny(RG_TYPE_F32);
    RG_REQUIRE(m, "no model");
    rg_error err = {0};
    rg_train_config c = config(RG_TRAIN_FULL, RG_RECOMPUTE_LAYER, RG_TYPE_F16);
    rg_train_state *s = state(m, &c, 0, &err);
    if (!s) {
        RG_CHECK(0, "create: %s", err.msg);
        done_model(m);
        return;
    }
    for (int k = 0; k < s->n_tensors; k++) {
        if (strcmp(s->tensors[k].name, "token_embd.weight")) continue;
        float *w = s->tensors[k].w;
        for (int64_t i = 0; i < s->tensors[k].nel; i++) w[i] *= 1e7f;
    }
    double loss;
    rg_status st = micro(s, 0, &loss, &err);
    RG_CHECK(st == RG_ERR_NONFINITE && strstr(err.msg, "training.checkpoint_dtype=f16 cannot hold the input of layer 0") &&
                 strstr(err.msg, "bf16"),
             "status %d: %s", st, err.msg);
    rg_train_state_free(s);
    // BF16 holds the same values.
    c.checkpoint_dtype = RG_TYPE_BF16;
    s = state(m, &c, 0, &err);
    RG_REQUIRE(s, "create: %s", err.msg);
    for (int k = 0; k < s->n_tensors; k++) {
        if (strcmp(s->tensors[k].name, "token_embd.weight")) continue;
        float *w = s->tensors[k].w;
        for (int64_t i = 0; i < s->tensors[k].nel; i++) w[i] *= 1e7f;
    }
    st = micro(s, 0, &loss, &err);
    RG_CHECK(st == RG_OK, "bf16: %s", err.msg);
    rg_train_state_free(s);
    done_model(m);
}

// auto: keep everything when it fits, recompute when only that fits; none is
// then refused with a hint.
static void test_auto_fits_by_recompute(void) {
    rg_model *m = tiny(RG_TYPE_F32);
    RG_REQUIRE(m, "no model");
    rg_error err = {0};
    rg_train_config cn = config(RG_TRAIN_FULL, RG_RECOMPUTE_NONE, RG_TYPE_F32), cl = config(RG_TRAIN_FULL, RG_RECOMPUTE_LAYER, RG_TYPE_F32);
    rg_train_state *a, *b;
    if (!two_states(m, &cn, &cl, &a, &b)) {
        done_model(m);
        return;
    }
    size_t keep = rg_train_state_memory(a).total, layer = rg_train_state_memory(b).total;
    rg_train_state_free(a);
    rg_train_state_free(b);
    RG_REQUIRE(layer < keep, "recompute %zu vs %zu", layer, keep);
    size_t limit = (keep + layer) / 2;
    rg_train_config ca = config(RG_TRAIN_FULL, RG_RECOMPUTE_AUTO, RG_TYPE_F32);
    a = state(m, &ca, 0, &err);
    RG_CHECK(a && !a->recompute, "auto without a limit: %s", a ? "recompute on" : err.msg);
    rg_train_state_free(a);
    a = state(m, &ca, limit, &err);
    RG_CHECK(a && a->recompute, "auto under a limit: %s", a ? "recompute off" : err.msg);
    rg_train_state_free(a);
    a = state(m, &cn, limit, &err);
    RG_CHECK(!a && strstr(err.msg, "set training.recompute=layer"), "none under a limit: %s", a ? "created" : err.msg);
    rg_train_state_free(a);
    a = state(m, &cl, layer - 1, &err);
    RG_CHECK(!a && strstr(err.msg, "with layer recompute") && strstr(err.msg, "checkpoint_dtype=bf16"),
             "layer under a smaller limit: %s", a ? "created" : err.msg);
    rg_train_state_free(a);
    done_model(m);
}

// The rewrite on a small graph: its errors.
static void test_rewrite_errors(void) {
    rg_error err = {0};
    rg_graph *g = rg_graph_new();
    int64_t ne[2] = {8, 4};
    rg_node *w = rg_param(g, "w", RG_TYPE_F32, 2, (int64_t[]){8, 8}, NULL);
    rg_node *x = rg_leaf(g, "x", RG_TYPE_F32, 2, ne, NULL);
    rg_node *h0 = rg_silu(g, x);
    rg_node *h1 = rg_mul_mat(g, w, h0);
    rg_node *h2 = rg_add(g, rg_silu(g, h1), h0);  // segment 1 reads h0, the input of segment 0
    rg_node *h3 = rg_mul_mat(g, w, h2);
    rg_node *loss = rg_sum(g, h3);
    rg_node *b1[3] = {h0, h1, h3};
    RG_CHECK(rg_graph_recompute(g, b1, 2, RG_TYPE_F32, NULL, &err) == RG_ERR_ARG && strstr(err.msg, "no backward"),
             "%s", err.msg);
    RG_REQUIRE(rg_graph_backward(g, loss, &err) == RG_OK, "%s", err.msg);
    rg_node *b2[3] = {h1, h0, h3};
    RG_CHECK(rg_graph_recompute(g, b2, 2, RG_TYPE_F32, NULL, &err) == RG_ERR_ARG && strstr(err.msg, "segment bound 1"),
             "%s", err.msg);
    RG_CHECK(rg_graph_recompute(g, b1, 2, RG_TYPE_Q8_0, NULL, &err) == RG_ERR_ARG && strstr(err.msg, "q8_0"), "%s",
             err.msg);
    RG_CHECK(rg_graph_recompute(g, b1, 2, RG_TYPE_F32, NULL, &err) == RG_ERR_ARG && strstr(err.msg, "from outside the segment"),
             "%s", err.msg);
    rg_graph_free(g);
}

static const rg_test_case cases[] = {
    RG_TEST(test_full_f32_same_bits),
    RG_TEST(test_full_bf16_same_bits),
    RG_TEST(test_lora_f32_same_bits),
    RG_TEST(test_f16_checkpoints_gap),
    RG_TEST(test_bf16_checkpoints_gap),
    RG_TEST(test_f16_overflow_named),
    RG_TEST(test_auto_fits_by_recompute),
    RG_TEST(test_rewrite_errors),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
