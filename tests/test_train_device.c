// test_train_device.c - training on the CUDA device (train_device.c) against the same run
// on the CPU: the tiny qwen2 model, rows of two packed documents, 4 optimizer steps of 2
// rows each (gradient accumulation on the device), AdamW with decay and clipping, full
// fine-tuning of F32 weights, of BF16 weights in place (stochastic rounding) and of F16
// weights with F32 masters, and LoRA. Runs on a GPU, or through the host execution of the
// CUDA code (RETRO_CUDA_HOST=1); skips with the reason without either.
//
// Tolerances: the device's products are cuBLAS's (another summation order than the
// CPU's GEMM; the norm of given gradients is the CPU's bits, SUMSQ on both sides: only the
// gradients differ), and ops without a CUDA kernel fall back to
// the CPU per node: the same computation up to roundoff, compounded over 4 steps. Per-step
// losses and gradient norms within 1e-4 relative. The weights' changes over the 4 steps
// within 1e-3 of the change's L2 norm: AdamW divides each element's step by the root of its
// second moment, so an element whose gradient is near zero takes a full lr-sized step in
// the direction of its roundoff, and the worst single element is not a useful bound; the
// L2 of the difference is (measured under the host execution: 2.8e-5 full, 1.0e-5 LoRA).
// BF16 in place: each element's stored value is SR(theta) with the same random word on both
// sides, so the two differ only where theta's roundoff crosses a rounding threshold, by one
// BF16 step (2^-8 relative) on a few elements; measured 1.3e-3 of the change's L2, bound 2e-2
// (an update lost or applied twice is >= 1). F16 with F32 masters rounds the master by
// RNE: the F32 bound. A wrong gradient, a lost accumulation or a skipped update is an O(1)
// difference in all of them. Those bounds hold for half weights with RETRO_CUDA_HALF_GEMM=f32
// (cuda.h: the weights widened, so only summation orders differ). On the tensor path (the
// default) every product with a half weight rounds its F32 operand to the weight's type
// (unit roundoff u = 2^-8 BF16, 2^-11 F16), which the CPU does not: losses and gradient norms
// within 4u relative, the weight changes within 0.1 (BF16; LoRA on a BF16 base 0.15) / 0.04
// (F16) of their L2 (measured under the host execution: 3.5e-2, 8.2e-2 and 9.8e-3).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/cuda.h"
#include "graph/exec.h"
#include "model/model.h"
#include "model/tiny.h"
#include "rg_test.h"
#include "tensor/half.h"
#include "train/train_state.h"
#include "train_rows.h"

enum { T = 48, STEPS = 4, ROWS_PER_STEP = 2 };

// Element i of a trained tensor's stored weights, widened to double.
static double value_at(const rg_train_tensor *t, int64_t i) {
    if (t->type == RG_TYPE_F32) return ((const float *)t->w)[i];
    const uint16_t h = ((const uint16_t *)t->w)[i];
    return t->type == RG_TYPE_F16 ? rg_fp16_to_fp32(h) : rg_bf16_to_fp32(h);
}

static const tt_rows ROWS = {.T = T, .split = 30, .mod = 7, .rem = 3, .mul = 0x9E3779B9u, .add = 3};

static void compare_cfg(rg_train_method method, uint32_t type, bool master, const char *half_gemm, int optimizer,
                        bool flash) {
    char why[256];
    if (rg_cuda_device_count(why, sizeof why) <= 0) RG_SKIP("no CUDA device: %s", why);
    const bool tensor = type != RG_TYPE_F32 && !strcmp(half_gemm, "tensor");
    const double u = type == RG_TYPE_BF16 ? 0x1p-8 : 0x1p-11;
    const double step_bound = tensor ? 4 * u : 1e-4;
    setenv("RETRO_CUDA_HALF_GEMM", half_gemm, 1);  // read when the device context is made
    char path[256];
    snprintf(path, sizeof path, "/tmp/rg_test_train_device_%d.gguf", (int)getpid());
    rg_tiny_config tc = {.arch = "qwen2", .type = type, .seed = 11};
    rg_error err = {0};
    rg_model *m = tt_tiny(path, &tc, RG_TYPE_F32, &err);
    RG_REQUIRE(m, "tiny model: %s", err.msg);
    rg_train_config c = tt_config(method, T);
    c.batch_size = ROWS_PER_STEP;
    c.master_weights = master;
    c.clip_grad_norm = 0.5;  // clipping is active on these gradients
    if (optimizer == RG_OPTIM_SGD) c.optimizer = RG_OPTIM_SGD, c.momentum = 0.9, c.lr = 0.05;
    c.flash_attn = flash ? RG_FLASH_ATTN_ON : RG_FLASH_ATTN_OFF;
    if (flash) setenv("RETRO_REQUIRE_GPU_RESIDENT", "1", 1);  // FLASH_ATTN_EXT/BACK must run on the device
    rg_train_state *cpu = NULL, *dev = NULL;
    rg_train_spec sp, sp_cpu;
    RG_REQUIRE(tt_spec(&sp, &c, 0, &err) == RG_OK, "config: %s", err.msg);
    // The CPU's products stay exact F32 (training.compute_dtype=auto would take BF16 products for a BF16 model on a
    // CPU with a matrix unit); the device keeps its own mode (auto).
    rg_train_config c_cpu = c;
    c_cpu.compute_dtype = RG_COMPUTE_F32;
    RG_REQUIRE(tt_spec(&sp_cpu, &c_cpu, 0, &err) == RG_OK, "config: %s", err.msg);
    RG_REQUIRE(rg_train_state_create_on(&cpu, m, &sp_cpu, STEPS, RG_DEVICE_CPU, &err) == RG_OK, "cpu: %s", err.msg);
    rg_status st = rg_train_state_create_on(&dev, m, &sp, STEPS, RG_DEVICE_CUDA, &err);
    RG_CHECK(st == RG_OK, "cuda: %s", err.msg);
    if (st == RG_OK) RG_CHECK(cpu->flash_attn == flash && dev->flash_attn == flash, "flash %d: cpu %d, cuda %d", flash,
                              cpu->flash_attn, dev->flash_attn);
    double worst_loss = 0, worst_norm = 0;
    for (int step = 0; st == RG_OK && step < STEPS; step++) {
        double lc = 0, ld = 0;
        for (int r = 0; r < ROWS_PER_STEP; r++) {
            double a, b;
            const int row = step * ROWS_PER_STEP + r;
            RG_REQUIRE(tt_micro(&ROWS, cpu, row, &a, &err) == RG_OK, "cpu row %d: %s", row, err.msg);
            RG_REQUIRE(tt_micro(&ROWS, dev, row, &b, &err) == RG_OK, "cuda row %d: %s", row, err.msg);
            lc += a, ld += b;
        }
        double nc, nd, lrc, lrd;
        bool skc, skd;
        RG_REQUIRE(rg_train_state_step(cpu, &nc, &lrc, &skc, &err) == RG_OK, "cpu step: %s", err.msg);
        RG_REQUIRE(rg_train_state_step(dev, &nd, &lrd, &skd, &err) == RG_OK, "cuda step: %s", err.msg);
        const double el = fabs(ld - lc) / fabs(lc), en = fabs(nd - nc) / nc;
        printf("    %s%s %s%s%s%s step %d: loss cpu %.7f cuda %.7f (rel %.1e), grad norm %.6f vs %.6f (rel %.1e)\n",
               method == RG_TRAIN_FULL ? "full" : "lora", optimizer == RG_OPTIM_SGD ? " sgd+momentum" : "",
               rg_type_get(type)->name, master ? " master" : "", flash ? " flash attention" : "",
               tensor ? " tensor path" : "", step, lc, ld, el, nc, nd, en);
        worst_loss = fmax(worst_loss, el), worst_norm = fmax(worst_norm, en);
        RG_CHECK(!skc && !skd && lrc == lrd, "step %d: skipped %d %d, lr %g %g", step, skc, skd, lrc, lrd);
    }
    RG_CHECK(worst_loss <= step_bound, "per-step losses differ by %.3e relative (bound %.1e)", worst_loss, step_bound);
    RG_CHECK(worst_norm <= step_bound, "gradient norms differ by %.3e relative (bound %.1e)", worst_norm, step_bound);
    if (st == RG_OK) {
        // The device's parameters come back to the host buffers only when asked.
        RG_CHECK(rg_train_state_sync_host(dev, &err) == RG_OK, "sync: %s", err.msg);
        // The changes the two runs made to the weights, from a fresh state's: worst element and L2.
        rg_train_state *fresh = NULL;
        RG_REQUIRE(rg_train_state_create_on(&fresh, m, &sp_cpu, STEPS, RG_DEVICE_CPU, &err) == RG_OK, "%s", err.msg);
        double worst = 0, moved = 0, d2 = 0, c2 = 0;
        for (int k = 0; k < cpu->n_tensors; k++) {
            const rg_train_tensor *tc_ = &cpu->tensors[k], *td = &dev->tensors[k], *tf = &fresh->tensors[k];
            for (int64_t i = 0; i < tc_->nel; i++) {
                const double a = value_at(tc_, i), b = value_at(td, i), f = value_at(tf, i);
                const double dc = a - f, dd = b - f;
                worst = fmax(worst, fabs(dd - dc)), moved = fmax(moved, fabs(dc));
                d2 += (dd - dc) * (dd - dc), c2 += dc * dc;
            }
        }
        rg_train_state_free(fresh);
        const double rel2 = sqrt(d2 / c2);
        const double bound = tensor ? (type == RG_TYPE_BF16 ? (method == RG_TRAIN_LORA ? 0.15 : 0.1) : 0.04)
                             : type == RG_TYPE_F32 || master ? 1e-3 : 2e-2;
        printf("    weights after %d steps: |change cuda - change cpu| max %.2e (largest change %.2e), L2 %.2e of the "
               "change's (bound %g)\n",
               STEPS, worst, moved, rel2, bound);
        RG_CHECK(moved > 0 && rel2 <= bound, "the weight changes differ by %.3e of their L2 norm", rel2);
    }
    rg_train_state_free(cpu);
    rg_train_state_free(dev);
    rg_model_free(m);
    unlink(path);
    unsetenv("RETRO_CUDA_HALF_GEMM");
    unsetenv("RETRO_REQUIRE_GPU_RESIDENT");
}

static void compare(rg_train_method method, uint32_t type, bool master, const char *half_gemm) {
    compare_cfg(method, type, master, half_gemm, RG_OPTIM_ADAMW, false);
}

static void test_full_f32_on_cuda(void) { compare(RG_TRAIN_FULL, RG_TYPE_F32, false, "tensor"); }
static void test_lora_on_cuda(void) { compare(RG_TRAIN_LORA, RG_TYPE_F32, false, "tensor"); }
static void test_full_bf16_sr_on_cuda(void) { compare(RG_TRAIN_FULL, RG_TYPE_BF16, false, "f32"); }
static void test_full_f16_master_on_cuda(void) { compare(RG_TRAIN_FULL, RG_TYPE_F16, true, "f32"); }
static void test_full_bf16_sr_tensor_path(void) { compare(RG_TRAIN_FULL, RG_TYPE_BF16, false, "tensor"); }
static void test_full_f16_master_tensor_path(void) { compare(RG_TRAIN_FULL, RG_TYPE_F16, true, "tensor"); }
static void test_lora_bf16_base_tensor_path(void) { compare(RG_TRAIN_LORA, RG_TYPE_BF16, false, "tensor"); }

// RETRO_CUDA_GRAPHS=1: the step graph and the optimizer graph's two ranges (the norm; the clip,
// the updates and the zeroing) are captured once and replayed (the loss scale and the step
// scalars are read from device memory, so they do not change a launch), and the run's losses,
// norms and weights are the same bits as without graphs.
static void run_rows(rg_train_state *s, double *losses, double *norms, rg_error *err) {
    for (int step = 0; step < STEPS; step++) {
        double l = 0, a, lr;
        bool sk;
        for (int r = 0; r < ROWS_PER_STEP; r++) {
            RG_CHECK(tt_micro(&ROWS, s, step * ROWS_PER_STEP + r, &a, err) == RG_OK, "row: %s", err->msg);
            l += a;
        }
        losses[step] = l;
        RG_CHECK(rg_train_state_step(s, &norms[step], &lr, &sk, err) == RG_OK && !sk, "step: %s", err->msg);
    }
}

static void test_training_steps_replay_graphs(void) {
    char why[256];
    if (rg_cuda_device_count(why, sizeof why) <= 0) RG_SKIP("no CUDA device: %s", why);
    char path[256];
    snprintf(path, sizeof path, "/tmp/rg_test_train_device_g_%d.gguf", (int)getpid());
    rg_tiny_config tc = {.arch = "qwen2", .type = RG_TYPE_BF16, .seed = 11};
    rg_error err = {0};
    rg_model *m = tt_tiny(path, &tc, RG_TYPE_F32, &err);
    RG_REQUIRE(m, "tiny model: %s", err.msg);
    rg_train_config c = tt_config(RG_TRAIN_FULL, T);
    c.batch_size = ROWS_PER_STEP;
    c.clip_grad_norm = 0.5;
    double loss[2][STEPS], norm[2][STEPS];
    rg_train_state *s[2] = {NULL, NULL};
    rg_train_spec sp;
    RG_REQUIRE(tt_spec(&sp, &c, 0, &err) == RG_OK, "config: %s", err.msg);
    const char *env = getenv("RETRO_CUDA_GRAPHS");
    char *saved = env ? strdup(env) : NULL;  // the suite also runs whole with RETRO_CUDA_GRAPHS=1
    for (int g = 0; g < 2; g++) {
        if (g) setenv("RETRO_CUDA_GRAPHS", "1", 1);
        else unsetenv("RETRO_CUDA_GRAPHS");
        RG_REQUIRE(rg_train_state_create_on(&s[g], m, &sp, STEPS, RG_DEVICE_CUDA, &err) == RG_OK, "%s", err.msg);
        run_rows(s[g], loss[g], norm[g], &err);
        RG_CHECK(rg_train_state_sync_host(s[g], &err) == RG_OK, "sync: %s", err.msg);
    }
    if (saved) setenv("RETRO_CUDA_GRAPHS", saved, 1);
    else unsetenv("RETRO_CUDA_GRAPHS");
    free(saved);
    rg_exec_stats a, o;
    rg_train_state_exec_stats(s[1], &a, &o);
    printf("    with graphs: step graph %llu captures, %llu replays of %d rows; optimizer %llu captures, %llu replays "
           "of %d range runs; parameter uploads %llu + %llu\n",
           (unsigned long long)a.graph_captures, (unsigned long long)a.graph_launches, STEPS * ROWS_PER_STEP,
           (unsigned long long)o.graph_captures, (unsigned long long)o.graph_launches, 2 * STEPS,
           (unsigned long long)a.param_copies, (unsigned long long)o.param_copies);
    RG_CHECK(a.graph_captures == 1 && a.graph_launches == (uint64_t)(STEPS * ROWS_PER_STEP - 1),
             "the step graph: %llu captures, %llu replays (expected 1 and %d)", (unsigned long long)a.graph_captures,
             (unsigned long long)a.graph_launches, STEPS * ROWS_PER_STEP - 1);
    // The optimizer graph runs as two ranges per step: the norms, then the update and the zeroing.
    RG_CHECK(o.graph_captures == 2 && o.graph_launches == (uint64_t)(2 * (STEPS - 1)),
             "the optimizer's ranges: %llu captures, %llu replays (expected 2 and %d)",
             (unsigned long long)o.graph_captures, (unsigned long long)o.graph_launches, 2 * (STEPS - 1));
    int same = 1;
    for (int k = 0; k < STEPS; k++) same &= loss[0][k] == loss[1][k] && norm[0][k] == norm[1][k];
    for (int k = 0; k < s[0]->n_tensors; k++) {
        const rg_train_tensor *x = &s[0]->tensors[k], *y = &s[1]->tensors[k];
        same &= memcmp(x->w, y->w, (size_t)x->nel * rg_type_get(x->type)->type_size) == 0;
    }
    RG_CHECK(same, "with graphs the losses, norms or weights differ from the run without");
    for (int g = 0; g < 2; g++) rg_train_state_free(s[g]);
    rg_model_free(m);
    unlink(path);
}

// SGD with momentum: the heavy-ball buffer lives on the device and is updated in place by the
// SGD node, with the host step's first-step rule (b = g at t = 1).
static void test_sgd_momentum_on_cuda(void) { compare_cfg(RG_TRAIN_FULL, RG_TYPE_F32, false, "tensor", RG_OPTIM_SGD, false); }
static void test_lora_sgd_momentum_on_cuda(void) {
    compare_cfg(RG_TRAIN_LORA, RG_TYPE_F32, false, "tensor", RG_OPTIM_SGD, false);
}
// training.flash_attn=on on both sides: FLASH_ATTN_EXT/BACK on the device (cuda/ops_flash.cu, the
// step resident: RETRO_REQUIRE_GPU_RESIDENT=1) against the CPU's flash kernels, the F32 bounds
// (the two sum in different tile orders; the other ops as in test_full_f32_on_cuda).
static void test_full_f32_flash_on_cuda(void) { compare_cfg(RG_TRAIN_FULL, RG_TYPE_F32, false, "tensor", RG_OPTIM_ADAMW, true); }
static void test_lora_flash_on_cuda(void) { compare_cfg(RG_TRAIN_LORA, RG_TYPE_F32, false, "tensor", RG_OPTIM_ADAMW, true); }

static const rg_test_case cases[] = {
    RG_TEST(test_full_f32_on_cuda),
    RG_TEST(test_lora_on_cuda),
    RG_TEST(test_full_bf16_sr_on_cuda),
    RG_TEST(test_full_f16_master_on_cuda),
    RG_TEST(test_full_bf16_sr_tensor_path),
    RG_TEST(test_full_f16_master_tensor_path),
    RG_TEST(test_lora_bf16_base_tensor_path),
    RG_TEST(test_training_steps_replay_graphs),
    RG_TEST(test_sgd_momentum_on_cuda),
    RG_TEST(test_lora_sgd_momentum_on_cuda),
    RG_TEST(test_full_f32_flash_on_cuda),
    RG_TEST(test_lora_flash_on_cuda),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
