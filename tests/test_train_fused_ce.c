// test_train_fused_ce.c - training with the fused cross-entropy
// (training.fused_ce, training.md §7): the step built on LINEAR_CE (the loss
// from the final hidden states and the output matrix, the logits never held)
// against the step built on MUL_MAT + CROSS_ENTROPY_LOSS, on the tiny model:
// the loss, every gradient and three AdamW steps agree within stated
// tolerances (not bit for bit: the fused op sums the log-sum-exp by chunks and
// recomputes the logits), the activation memory is lower, `auto` turns it on
// under a memory limit only, it combines with layer recompute, and eval rows
// give the same loss.
//
// Tolerances, from the sizes of the differences (f32 roundoff of sums of 256
// products, seen 1e-7 .. 1e-6 relative):
//   loss            |fused - unfused| / |unfused| <= 1e-6 per row
//   gradients       training.md §4.1's worst relative gap (max|Δ| / max|g| per
//                   tensor, worst tensor) at the first step <= 1e-5 (seen 9e-7)
//   3 AdamW steps   every weight within 0.1 lr of the unfused run's (an
//                   update is lr m / sqrt(v), |m / sqrt(v)| ~ 1 even for a
//                   gradient at roundoff level, whose sign the two runs may
//                   round differently: seen 0.034 lr; a gradient with a wrong
//                   sign moves a weight by 2 lr per step), the losses of each
//                   later step within 1e-5 and the gradient norms within 1e-4
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "model/quantize.h"
#include "model/tiny.h"
#include "rg_test.h"
#include "train_rows.h"
#include "train/train_state.h"

enum { T = 64 };

static char model_path[256];

// The tiny qwen2 (type F32, or Q8_0 through the quantizer from the F32 file).
static rg_model *tiny(uint32_t type, bool tied) {
    snprintf(model_path, sizeof model_path, "/tmp/rg_test_fused_ce_%d.gguf", (int)getpid());
    rg_tiny_config tc = {.arch = "qwen2", .type = RG_TYPE_F32, .seed = 11, .tied = tied};
    rg_error err = {0};
    rg_model *m = tt_tiny(model_path, &tc, type, &err);
    RG_CHECK(m, "tiny model: %s", err.msg);
    return m;
}

static void done_model(rg_model *m) {
    rg_model_free(m);
    unlink(model_path);
}

static rg_train_config config(rg_train_method method, rg_fused_ce fused, rg_recompute rc) {
    rg_train_config c = tt_config(method, T);
    c.recompute = rc;
    c.fused_ce = fused;
    c.flash_attn = RG_FLASH_ATTN_OFF;  // as auto is at this ctx, and not the rescue of a run over a limit (test_train_flash)
    return c;
}

// Rows: two packed documents, some positions without a target.
static const tt_rows ROWS = {.T = T, .split = 37, .mod = 5, .rem = 2, .mul = 0x85EBCA6Bu, .add = 3};
static rg_train_state *state(const rg_model *m, const rg_train_config *c, size_t limit, rg_error *err) {
    return tt_state(m, c, limit, err);
}
static rg_status micro(rg_train_state *s, int r, double *loss, rg_error *err) { return tt_micro(&ROWS, s, r, loss, err); }

// The unfused step (a) against the fused one (b), same config otherwise.
static void fused_vs_unfused(const char *what, rg_train_method method, uint32_t type, bool tied, rg_recompute rc) {
    rg_model *m = tiny(type, tied);
    RG_REQUIRE(m, "no model");
    rg_error err = {0};
    rg_train_config ca = config(method, RG_FUSED_CE_OFF, rc), cb = config(method, RG_FUSED_CE_ON, rc);
    rg_train_state *a = state(m, &ca, 0, &err), *b = a ? state(m, &cb, 0, &err) : NULL;
    if (!a || !b) {
        RG_CHECK(0, "create: %s", err.msg);
        goto out;
    }
    RG_CHECK(!a->fused_ce && b->fused_ce && a->n_tensors == b->n_tensors, "fused flags %d %d, tensors %d %d",
             a->fused_ce, b->fused_ce, a->n_tensors, b->n_tensors);
    rg_train_memory ma = rg_train_state_memory(a), mb = rg_train_state_memory(b);
    RG_CHECK(mb.fused_ce && !ma.fused_ce, "memory report flags");
    // LoRA: lower. A full fine-tune of the tiny model peaks at the end of the
    // backward, where every gradient is held and the logits [512, 64] are long
    // gone; the fused graph places its buffers differently there (seen: 1.01
    // [n_embd, ctx] f32 buffers above the unfused peak; allowed: 2).
    const size_t slack = method == RG_TRAIN_LORA ? 0 : 2 * (size_t)RG_TINY_N_EMBD * T * 4;
    RG_CHECK(mb.activations < ma.activations + slack, "activations fused %zu, unfused %zu", mb.activations, ma.activations);
    printf("    %s: activations %.3f MiB unfused, %.3f MiB fused (scratch %.3f / %.3f MiB)\n", what,
           ma.activations / 1048576.0, mb.activations / 1048576.0, ma.scratch / 1048576.0, mb.scratch / 1048576.0);
    double worst_loss = 0, worst_grad = 0;
    const char *where = "";
    for (int step = 0; step < 3; step++) {
        double la, lb, na, nb, lra, lrb;
        bool ska, skb;
        RG_REQUIRE(micro(a, step, &la, &err) == RG_OK, "micro unfused: %s", err.msg);
        RG_REQUIRE(micro(b, step, &lb, &err) == RG_OK, "micro fused: %s", err.msg);
        double rl = fabs(lb - la) / fabs(la);
        worst_loss = fmax(worst_loss, rl);
        RG_CHECK(rl <= (step ? 1e-5 : 1e-6), "step %d: loss %.9g fused vs %.9g", step, lb, la);
        if (step == 0) {  // later steps start from weights that differ by the earlier steps' gaps
            worst_grad = tt_grad_gap(a, b, &where);
            RG_CHECK(worst_grad <= 1e-5, "step 0: gradient gap %.3g in '%s'", worst_grad, where);
        }
        RG_REQUIRE(rg_train_state_step(a, &na, &lra, &ska, &err) == RG_OK, "step unfused: %s", err.msg);
        RG_REQUIRE(rg_train_state_step(b, &nb, &lrb, &skb, &err) == RG_OK, "step fused: %s", err.msg);
        RG_CHECK(fabs(na - nb) <= 1e-4 * na && !ska && !skb, "step %d: norms %.9g %.9g", step, na, nb);
    }
    double wg = tt_weight_gap(a, b);
    printf("    %s: loss gap %.2g (<= 1e-6 at step 0, 1e-5 after), step 0 gradient gap %.2g in '%s' (<= 1e-5), "
           "weights after 3 AdamW steps %.2g (<= %.1g)\n",
           what, worst_loss, worst_grad, where, wg, 0.1 * ca.lr);
    RG_CHECK(wg <= 0.1 * ca.lr, "weights after 3 steps differ by %.3g", wg);
out:
    rg_train_state_free(a);
    rg_train_state_free(b);
    done_model(m);
}

static void test_full_f32(void) { fused_vs_unfused("full f32", RG_TRAIN_FULL, RG_TYPE_F32, false, RG_RECOMPUTE_NONE); }
static void test_full_f32_tied(void) {
    fused_vs_unfused("full f32 tied", RG_TRAIN_FULL, RG_TYPE_F32, true, RG_RECOMPUTE_NONE);
}
static void test_lora_q8_0(void) { fused_vs_unfused("lora q8_0", RG_TRAIN_LORA, RG_TYPE_Q8_0, false, RG_RECOMPUTE_NONE); }
static void test_full_f32_recompute(void) {
    fused_vs_unfused("full f32, layer recompute", RG_TRAIN_FULL, RG_TYPE_F32, false, RG_RECOMPUTE_LAYER);
}
static void test_lora_q8_0_recompute(void) {
    fused_vs_unfused("lora q8_0, layer recompute", RG_TRAIN_LORA, RG_TYPE_Q8_0, false, RG_RECOMPUTE_LAYER);
}

// Recompute and the fused loss together hold less than recompute alone.
static void test_recompute_plus_fused_smaller(void) {
    rg_model *m = tiny(RG_TYPE_Q8_0, false);
    RG_REQUIRE(m, "no model");
    rg_error err = {0};
    rg_train_config cl = config(RG_TRAIN_LORA, RG_FUSED_CE_OFF, RG_RECOMPUTE_LAYER);
    rg_train_config cf = config(RG_TRAIN_LORA, RG_FUSED_CE_ON, RG_RECOMPUTE_LAYER);
    rg_train_state *a = state(m, &cl, 0, &err), *b = a ? state(m, &cf, 0, &err) : NULL;
    RG_CHECK(a && b, "create: %s", err.msg);
    if (a && b) {
        rg_train_memory ma = rg_train_state_memory(a), mb = rg_train_state_memory(b);
        printf("    lora q8_0: activations %.3f MiB with recompute, %.3f MiB with recompute + fused\n",
               ma.activations / 1048576.0, mb.activations / 1048576.0);
        RG_CHECK(ma.recompute && mb.recompute && mb.fused_ce && mb.activations < ma.activations, "%zu vs %zu",
                 mb.activations, ma.activations);
    }
    rg_train_state_free(a);
    rg_train_state_free(b);
    done_model(m);
}

// auto: unfused when it fits, fused when only that fits; off is then refused
// with a hint naming the key (LoRA on Q8_0 with layer recompute: the logits
// are what is left to save).
static void test_auto_fits_by_fusing(void) {
    rg_model *m = tiny(RG_TYPE_Q8_0, false);
    RG_REQUIRE(m, "no model");
    rg_error err = {0};
    rg_train_config coff = config(RG_TRAIN_LORA, RG_FUSED_CE_OFF, RG_RECOMPUTE_LAYER);
    rg_train_config con = config(RG_TRAIN_LORA, RG_FUSED_CE_ON, RG_RECOMPUTE_LAYER);
    rg_train_state *a = state(m, &coff, 0, &err), *b = a ? state(m, &con, 0, &err) : NULL;
    if (!a || !b) {
        RG_CHECK(0, "create: %s", err.msg);
        rg_train_state_free(a);
        done_model(m);
        return;
    }
    // What the limit is held against: the report's total less the adapter
    // (the report counts A and B with the weights; the plan check does not).
    size_t adapter = 0;
    for (int k = 0; k < a->n_tensors; k++) adapter += (size_t)a->tensors[k].nel * 4;
    size_t unfused = rg_train_state_memory(a).total - adapter, fused = rg_train_state_memory(b).total - adapter;
    rg_train_state_free(a);
    rg_train_state_free(b);
    RG_REQUIRE(fused < unfused, "fused %zu vs unfused %zu", fused, unfused);
    size_t limit = (unfused + fused) / 2;
    rg_train_config cauto = config(RG_TRAIN_LORA, RG_FUSED_CE_AUTO, RG_RECOMPUTE_LAYER);
    a = state(m, &cauto, 0, &err);
    RG_CHECK(a && !a->fused_ce, "auto without a limit: %s", a ? "fused" : err.msg);
    rg_train_state_free(a);
    a = state(m, &cauto, limit, &err);
    RG_CHECK(a && a->fused_ce && a->recompute, "auto under a limit: %s", a ? "not fused" : err.msg);
    if (a) {  // the rebuilt graph trains, with the same adapter tensors
        double loss;
        RG_CHECK(a->n_tensors > 0 && micro(a, 0, &loss, &err) == RG_OK && loss > 0, "micro after the rebuild: %s", err.msg);
        printf("    limit %.3f MiB: auto chose the fused loss (%.3f MiB; unfused %.3f MiB)\n", limit / 1048576.0,
               fused / 1048576.0, unfused / 1048576.0);
    }
    rg_train_state_free(a);
    a = state(m, &coff, limit, &err);
    RG_CHECK(!a && strstr(err.msg, "set training.fused_ce=on"), "off under a limit: %s", a ? "created" : err.msg);
    rg_train_state_free(a);
    done_model(m);
}

// Eval rows (the forward part of the graph) give the same loss sum.
static void test_eval_row(void) {
    rg_model *m = tiny(RG_TYPE_Q8_0, false);
    RG_REQUIRE(m, "no model");
    rg_error err = {0};
    rg_train_config ca = config(RG_TRAIN_LORA, RG_FUSED_CE_OFF, RG_RECOMPUTE_NONE);
    rg_train_config cb = config(RG_TRAIN_LORA, RG_FUSED_CE_ON, RG_RECOMPUTE_NONE);
    rg_train_state *a = state(m, &ca, 0, &err), *b = a ? state(m, &cb, 0, &err) : NULL;
    RG_CHECK(a && b, "create: %s", err.msg);
    for (int r = 0; a && b && r < 2; r++) {
        int32_t ids[T], labels[T], pos[T], seg[T];
        tt_make_row(&ROWS, r, ids, labels, pos, seg);
        double sa, sb;
        int64_t na, nb;
        RG_CHECK(rg_train_state_eval_row(a, ids, labels, pos, seg, &sa, &na, &err) == RG_OK, "eval unfused: %s", err.msg);
        RG_CHECK(rg_train_state_eval_row(b, ids, labels, pos, seg, &sb, &nb, &err) == RG_OK, "eval fused: %s", err.msg);
        printf("    row %d: loss sum %.7f unfused, %.7f fused over %lld targets\n", r, sa, sb, (long long)na);
        RG_CHECK(na == nb && na > 0 && fabs(sa - sb) <= 1e-6 * fabs(sa), "row %d: %.9g vs %.9g", r, sa, sb);
    }
    rg_train_state_free(a);
    rg_train_state_free(b);
    done_model(m);
}

static const rg_test_case cases[] = {
    RG_TEST(test_full_f32),
    RG_TEST(test_full_f32_tied),
    RG_TEST(test_lora_q8_0),
    RG_TEST(test_full_f32_recompute),
    RG_TEST(test_lora_q8_0_recompute),
    RG_TEST(test_recompute_plus_fused_smaller),
    RG_TEST(test_auto_fits_by_fusing),
    RG_TEST(test_eval_row),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
