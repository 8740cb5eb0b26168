// test_train_flash.c - training through flash attention (training.flash_attn, training.md
// §6): the step built on FLASH_ATTN_EXT / FLASH_ATTN_BACK, documents as ids, against the
// materialized step (MUL_MAT, SOFT_MAX over the dense document mask, MUL_MAT) on the same
// rows: two packed documents per row, so the document rule is exercised, not only causality.
//   - the loss within 1e-6 relative at step 0 and 1e-5 after (the weights then differ by the
//     earlier steps' gaps), the step-0 gradients within 1e-5 of each tensor's max |g|, the
//     weights after 3 AdamW steps within 0.5 lr (Adam divides each element's gradient by its
//     own size, so an element whose gradient is near zero moves by O(lr) either way on a
//     rounding difference; measured 0.07-0.17 lr, where the fused cross-entropy's 1e-7
//     gradient gaps stay under 0.1 lr): full F32 (qwen2, untied and tied), LoRA on
//     Q8_0, full with layer recompute (FLASH_ATTN_EXT cloned by the rewrite), lfm2 (its
//     attention layers flash, its short-conv layers unchanged);
//   - the planned activations at T = 256: lower with flash (no [T, T, H] scores and
//     probabilities per layer);
//   - auto: flash from ctx 2048, the materialized scores below unless they would not fit the
//     memory limit (then flash; off is refused, naming training.flash_attn); on a CUDA device on is
//     taken where the build has the CUDA kernels and refused with the reason where it has none
//     (test_train_device compares a flash run on the device with the CPU's);
//   - rg_train_state_plan reports what the created state plans, and with flash, recompute and
//     the fused loss the planned activations per token stay flat from ctx 1024 to 4096 (within
//     10%), where the materialized attention's grow with the scores.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cuda/cuda.h"
#include "graph/backend.h"
#include "rg_test.h"
#include "train_rows.h"
#include "train/train_state.h"

enum { T = 64 };

static char model_path[256];

static rg_model *tiny(const char *arch, uint32_t type, bool tied) {
    snprintf(model_path, sizeof model_path, "/tmp/rg_test_train_flash_%d.gguf", (int)getpid());
    rg_tiny_config tc = {.arch = arch, .type = RG_TYPE_F32, .seed = 13, .tied = tied};
    rg_error err = {0};
    rg_model *m = tt_tiny(model_path, &tc, type, &err);
    RG_CHECK(m, "tiny %s: %s", arch, err.msg);
    return m;
}

static void done_model(rg_model *m) {
    rg_model_free(m);
    unlink(model_path);
}

static rg_train_config config(rg_train_method method, rg_flash_attn_mode flash, rg_recompute rc, int ctx) {
    rg_train_config c = tt_config(method, ctx);
    c.recompute = rc;
    c.fused_ce = RG_FUSED_CE_OFF;
    c.flash_attn = flash;
    return c;
}

static const tt_rows ROWS = {.T = T, .split = 29, .mod = 7, .rem = 3, .mul = 0x9E3779B1u, .add = 5};

static void flash_vs_materialized(const char *what, const char *arch, rg_train_method method, uint32_t type, bool tied,
                                  rg_recompute rc) {
    rg_model *m = tiny(arch, type, tied);
    RG_REQUIRE(m, "no model");
    rg_error err = {0};
    rg_train_config ca = config(method, RG_FLASH_ATTN_OFF, rc, T), cb = config(method, RG_FLASH_ATTN_ON, rc, T);
    rg_train_state *a = tt_state(m, &ca, 0, &err), *b = a ? tt_state(m, &cb, 0, &err) : NULL;
    if (!a || !b) {
        RG_CHECK(0, "create: %s", err.msg);
        goto out;
    }
    RG_CHECK(!a->flash_attn && b->flash_attn && a->n_tensors == b->n_tensors, "flash flags %d %d, tensors %d %d",
             a->flash_attn, b->flash_attn, a->n_tensors, b->n_tensors);
    RG_CHECK(rg_train_state_memory(b).flash_attn && !rg_train_state_memory(a).flash_attn, "memory report flags");
    double worst_loss = 0, worst_grad = 0;
    const char *where = "";
    for (int step = 0; step < 3; step++) {
        double la, lb, na, nb, lra, lrb;
        bool ska, skb;
        RG_REQUIRE(tt_micro(&ROWS, a, step, &la, &err) == RG_OK, "micro materialized: %s", err.msg);
        RG_REQUIRE(tt_micro(&ROWS, b, step, &lb, &err) == RG_OK, "micro flash: %s", err.msg);
        const double rl = fabs(lb - la) / fabs(la);
        worst_loss = fmax(worst_loss, rl);
        RG_CHECK(rl <= (step ? 1e-5 : 1e-6), "step %d: loss %.9g flash vs %.9g", step, lb, la);
        if (step == 0) {
            worst_grad = tt_grad_gap(a, b, &where);
            RG_CHECK(worst_grad <= 1e-5, "step 0: gradient gap %.3g in '%s'", worst_grad, where);
        }
        RG_REQUIRE(rg_train_state_step(a, &na, &lra, &ska, &err) == RG_OK, "step materialized: %s", err.msg);
        RG_REQUIRE(rg_train_state_step(b, &nb, &lrb, &skb, &err) == RG_OK, "step flash: %s", err.msg);
        RG_CHECK(fabs(na - nb) <= 1e-4 * na && !ska && !skb, "step %d: norms %.9g %.9g", step, na, nb);
    }
    const double wg = tt_weight_gap(a, b);
    printf("    %s: loss gap %.2g (<= 1e-6 at step 0, 1e-5 after), step 0 gradient gap %.2g in '%s' (<= 1e-5), "
           "weights after 3 AdamW steps %.2g (<= %.1g)\n",
           what, worst_loss, worst_grad, where, wg, 0.5 * ca.lr);
    RG_CHECK(wg <= 0.5 * ca.lr, "weights after 3 steps differ by %.3g", wg);
out:
    rg_train_state_free(a);
    rg_train_state_free(b);
    done_model(m);
}

static void test_full_f32(void) { flash_vs_materialized("qwen2 full f32", "qwen2", RG_TRAIN_FULL, RG_TYPE_F32, false, RG_RECOMPUTE_NONE); }
static void test_full_f32_tied(void) {
    flash_vs_materialized("qwen2 full f32, tied", "qwen2", RG_TRAIN_FULL, RG_TYPE_F32, true, RG_RECOMPUTE_NONE);
}
static void test_lora_q8_0(void) { flash_vs_materialized("qwen2 lora q8_0", "qwen2", RG_TRAIN_LORA, RG_TYPE_Q8_0, false, RG_RECOMPUTE_NONE); }
static void test_full_recompute(void) {
    flash_vs_materialized("qwen2 full f32, layer recompute", "qwen2", RG_TRAIN_FULL, RG_TYPE_F32, false, RG_RECOMPUTE_LAYER);
}
static void test_lfm2(void) { flash_vs_materialized("lfm2 full f32", "lfm2", RG_TRAIN_FULL, RG_TYPE_F32, false, RG_RECOMPUTE_NONE); }

// What flash attention is for: the planned activations without the per-layer scores.
static void test_activations_lower(void) {
    rg_model *m = tiny("qwen2", RG_TYPE_F32, false);
    RG_REQUIRE(m, "no model");
    rg_error err = {0};
    enum { TL = 256 };
    rg_train_config ca = config(RG_TRAIN_LORA, RG_FLASH_ATTN_OFF, RG_RECOMPUTE_NONE, TL),
                    cb = config(RG_TRAIN_LORA, RG_FLASH_ATTN_ON, RG_RECOMPUTE_NONE, TL);
    rg_train_state *a = tt_state(m, &ca, 0, &err), *b = a ? tt_state(m, &cb, 0, &err) : NULL;
    RG_CHECK(a && b, "create: %s", err.msg);
    if (a && b) {
        const rg_train_memory ma = rg_train_state_memory(a), mb = rg_train_state_memory(b);
        printf("    LoRA at ctx %d: activations %.2f MiB materialized, %.2f MiB flash\n", TL, ma.activations / 1048576.0,
               mb.activations / 1048576.0);
        RG_CHECK(mb.activations < ma.activations, "flash %zu bytes, materialized %zu", mb.activations, ma.activations);
    }
    rg_train_state_free(a);
    rg_train_state_free(b);
    done_model(m);
}

static void test_auto_and_device(void) {
    rg_model *m = tiny("qwen2", RG_TYPE_F32, false);
    RG_REQUIRE(m, "no model");
    rg_error err = {0};
    for (int ctx = 1024; ctx <= 2048; ctx *= 2) {
        rg_train_config c = config(RG_TRAIN_LORA, RG_FLASH_ATTN_AUTO, RG_RECOMPUTE_LAYER, ctx);
        rg_train_state *s = tt_state(m, &c, 0, &err);
        RG_CHECK(s, "create at ctx %d: %s", ctx, err.msg);
        if (s) RG_CHECK(s->flash_attn == (ctx >= 2048), "auto at ctx %d: flash %d", ctx, s->flash_attn);
        rg_train_state_free(s);
    }
    // On a device: on is taken where this build has the CUDA kernels (cuda/ops_flash.cu; with no
    // device the creation then fails for the device's own reason, not the flag's), and refused,
    // naming the key, where it has none (before anything is made on the device).
    const bool kernels = rg_op_cell(RG_BACKEND_CUDA, RG_OP_FLASH_ATTN_BACK).run != NULL;
    char why[256];
    const bool device = rg_cuda_device_count(why, sizeof why) > 0;
    rg_train_config c = config(RG_TRAIN_LORA, RG_FLASH_ATTN_ON, RG_RECOMPUTE_NONE, T);
    rg_train_state *s = NULL;
    rg_train_spec sp;
    rg_status st = tt_spec(&sp, &c, 0, &err);
    if (!st) st = rg_train_state_create_on(&s, m, &sp, c.steps, RG_DEVICE_CUDA, &err);
    printf("    on, CUDA device (%s, %s): %s\n", kernels ? "kernels built" : "no kernels", device ? "present" : why,
           st ? err.msg : s->flash_attn ? "flash attention" : "materialized");
    if (!kernels)
        RG_CHECK(st != RG_OK && !s && strstr(err.msg, "training.flash_attn=on") && strstr(err.msg, "no CUDA kernel"),
                 "flash on a device: %s", st ? err.msg : "created");
    else if (device)
        RG_CHECK(st == RG_OK && s && s->flash_attn, "flash on a device: %s", st ? err.msg : "materialized");
    else
        RG_CHECK(st != RG_OK && !strstr(err.msg, "flash_attn"), "flash on no device: %s", st ? err.msg : "created");
    rg_train_state_free(s);
    done_model(m);
}

// Below FLASH_AUTO_CTX auto is flash only when the materialized step would not fit: a limit
// between the two plans' totals (LoRA, recompute, the fused loss: the scores are what is left).
static void test_auto_fits_by_flash(void) {
    rg_model *m = tiny("qwen2", RG_TYPE_F32, false);
    RG_REQUIRE(m, "no model");
    rg_error err = {0};
    enum { TC = 1024 };
    rg_train_config coff = config(RG_TRAIN_LORA, RG_FLASH_ATTN_OFF, RG_RECOMPUTE_LAYER, TC);
    rg_train_config con = coff, cauto = coff;
    coff.fused_ce = con.fused_ce = cauto.fused_ce = RG_FUSED_CE_ON;
    coff.checkpoint_dtype = con.checkpoint_dtype = cauto.checkpoint_dtype = RG_TYPE_BF16;  // so flash is the hint left
    con.flash_attn = RG_FLASH_ATTN_ON, cauto.flash_attn = RG_FLASH_ATTN_AUTO;
    rg_train_memory moff, mon;
    RG_REQUIRE(tt_plan(m, &coff, 0, &moff, &err) == RG_OK, "plan off: %s", err.msg);
    RG_REQUIRE(tt_plan(m, &con, 0, &mon, &err) == RG_OK, "plan on: %s", err.msg);
    RG_REQUIRE(mon.total < moff.total && !moff.flash_attn && mon.flash_attn, "totals %zu flash, %zu materialized",
               mon.total, moff.total);
    const size_t limit = (moff.total + mon.total) / 2;
    printf("    LoRA at ctx %d with recompute and the fused loss: %.1f MiB materialized, %.1f MiB flash; limit %.1f MiB\n",
           TC, moff.total / 1048576.0, mon.total / 1048576.0, limit / 1048576.0);
    rg_train_state *s = tt_state(m, &cauto, 0, &err);
    RG_CHECK(s && !s->flash_attn, "auto without a limit at ctx %d: %s", TC, s ? "flash" : err.msg);
    rg_train_state_free(s);
    s = tt_state(m, &cauto, limit, &err);
    RG_CHECK(s && s->flash_attn && rg_train_state_memory(s).total <= limit, "auto under the limit: %s",
             s ? "materialized" : err.msg);
    rg_train_state_free(s);
    s = tt_state(m, &coff, limit, &err);
    RG_CHECK(!s && strstr(err.msg, "set training.flash_attn=on"), "off under the limit: %s", s ? "created" : err.msg);
    rg_train_state_free(s);
    done_model(m);
}

// The plan alone gives the created state's memory report, part by part.
static void test_plan_is_the_run(void) {
    rg_model *m = tiny("qwen2", RG_TYPE_F32, false);
    RG_REQUIRE(m, "no model");
    rg_error err = {0};
    rg_train_config c = config(RG_TRAIN_LORA, RG_FLASH_ATTN_ON, RG_RECOMPUTE_LAYER, T);
    c.fused_ce = RG_FUSED_CE_ON;
    rg_train_memory p;
    RG_REQUIRE(tt_plan(m, &c, 0, &p, &err) == RG_OK, "plan: %s", err.msg);
    rg_train_state *s = tt_state(m, &c, 0, &err);
    RG_REQUIRE(s, "create: %s", err.msg);
    const rg_train_memory r = rg_train_state_memory(s);
    RG_CHECK(p.weights == r.weights && p.gradients == r.gradients && p.optimizer == r.optimizer &&
                 p.activations == r.activations && p.scratch == r.scratch && p.total == r.total &&
                 p.flash_attn == r.flash_attn && p.recompute == r.recompute && p.fused_ce == r.fused_ce,
             "plan %zu/%zu/%zu/%zu/%zu, run %zu/%zu/%zu/%zu/%zu", p.weights, p.gradients, p.optimizer, p.activations,
             p.scratch, r.weights, r.gradients, r.optimizer, r.activations, r.scratch);
    rg_train_state_free(s);
    done_model(m);
}

// Flash, recompute and the fused loss leave no [ctx, ctx] or [n_vocab, ctx] term: the planned activations per token
// at ctx 4096 within 10% of ctx 1024's (planning only: nothing of that size is allocated).
static void test_activations_flat(void) {
    rg_model *m = tiny("llama", RG_TYPE_F32, false);
    RG_REQUIRE(m, "no model");
    rg_error err = {0};
    double per_tok[2][2];  // [flash][ctx 1024, 4096]
    for (int flash = 0; flash < 2; flash++)
        for (int i = 0; i < 2; i++) {
            const int ctx = i ? 4096 : 1024;
            rg_train_config c = config(RG_TRAIN_LORA, flash ? RG_FLASH_ATTN_ON : RG_FLASH_ATTN_OFF, RG_RECOMPUTE_LAYER, ctx);
            c.fused_ce = RG_FUSED_CE_ON;
            rg_train_memory p;
            RG_REQUIRE(tt_plan(m, &c, 0, &p, &err) == RG_OK, "plan at ctx %d: %s", ctx, err.msg);
            per_tok[flash][i] = (double)p.activations / ctx;
        }
    printf("    LoRA, recompute, fused loss: activations per token %.0f B at ctx 1024, %.0f B at 4096 with flash "
           "(materialized: %.0f, %.0f)\n", per_tok[1][0], per_tok[1][1], per_tok[0][0], per_tok[0][1]);
    RG_CHECK(fabs(per_tok[1][1] / per_tok[1][0] - 1) <= 0.10, "flash: %.0f B per token at 4096, %.0f at 1024",
             per_tok[1][1], per_tok[1][0]);
    RG_CHECK(per_tok[0][1] > 1.5 * per_tok[0][0], "materialized: %.0f B per token at 4096, %.0f at 1024 (the scores grow)",
             per_tok[0][1], per_tok[0][0]);
    done_model(m);
}

static const rg_test_case cases[] = {
    RG_TEST(test_full_f32),       RG_TEST(test_full_f32_tied),     RG_TEST(test_lora_q8_0),        RG_TEST(test_full_recompute),
    RG_TEST(test_lfm2),           RG_TEST(test_activations_lower), RG_TEST(test_auto_and_device),
    RG_TEST(test_auto_fits_by_flash), RG_TEST(test_plan_is_the_run), RG_TEST(test_activations_flat), {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
