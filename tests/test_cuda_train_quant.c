// test_cuda_train_quant.c - LoRA through frozen quantized bases on the CUDA device (issue 24
// item 4): the tiny qwen2 written in F32 (the control) and quantized as llama-quantize would
// (Q4_1, Q4_K_M, Q8_0, IQ4_XS; the tied head is the quantized token embedding), trained with
// LoRA for 4 optimizer steps of 2 rows on the CPU and on the device under
// RETRO_REQUIRE_GPU_RESIDENT=1 (no node may fall back: the quantized GET_ROWS, MUL_MAT, OUT_PROD
// and the fused loss all run there); the whole run (`rg_train_run`, as `retrograd train`) on the
// device writes an adapter identical in format to the CPU's (the same keys, tensor names, types
// and shapes), and 2 steps + a resume from the step-2 checkpoint + 2 steps end with the same
// adapter bytes and per-step losses as the 4 uninterrupted steps on the device. Runs on a GPU, or
// through the host execution of the CUDA code (RETRO_CUDA_HOST=1); skips with the reason without
// either.
//
// Tolerances, per-step losses and gradient norms relative to the CPU's:
//   RETRO_CUDA_HALF_GEMM=f32  the weights decoded to F32 (the CPU's bits) and multiplied in F32:
//                             only summation orders differ, as for an F32 model
//                             (test_train_device.c): 1e-4.
//   tensor (the default)      the wide quantized products decode to BF16 and round their F32
//                             operand to BF16 too (2u per term, u = 2^-8, where a half weight's
//                             product rounds only the activation: test_train_device's 4u for one
//                             rounding becomes 8u = 3.1e-2); products of few columns take the
//                             in-place F32 decoder in both modes.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda/cuda.h"
#include "graph/backend.h"
#include "graph/exec.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/quantize.h"
#include "model/tiny.h"
#include "rg_test.h"
#include "train/trainer.h"
#include "train_rows.h"

enum { T = 48, STEPS = 4, ROWS_PER_STEP = 2 };

static const tt_rows ROWS = {.T = T, .split = 30, .mod = 7, .rem = 3, .mul = 0x9E3779B9u, .add = 3};

static bool have_device(char *why, size_t cap) { return rg_cuda_device_count(why, cap) > 0; }

// The tiny qwen2 (F32) at path, quantized to llama-quantize's `target` ("Q4_K_M", ...; NULL: F32).
static rg_status tiny_fixture(const char *path, const char *target, rg_error *err) {
    char src[520];
    snprintf(src, sizeof src, "%s.src", path);
    rg_tiny_config tc = {.arch = "qwen2", .type = RG_TYPE_F32, .seed = 11};
    rg_status st = rg_tiny_write(&tc, target ? src : path, err);
    if (!st && target) {
        rg_quantize_opts o = {.n_threads = 2};
        rg_quantize_summary sum;
        st = rg_quantize_file(src, path, target, &o, &sum, err);
        unlink(src);
    }
    return st;
}

// Whether this build's CUDA column takes a quantized MUL_MAT and GET_ROWS (a Q4_K weight and
// table); *what names the first it does not. (The resident guard then checks every node.)
static bool quant_products_on_device(const char **what) {
    static uint8_t q[256 * 8 * 144 / 256];
    static float x[256 * 4];
    rg_graph *g = rg_graph_new();
    rg_node *w = rg_leaf(g, "w", RG_TYPE_Q4_K, 2, (int64_t[]){256, 8}, q);
    rg_node *xs = rg_leaf(g, "x", RG_TYPE_F32, 2, (int64_t[]){256, 4}, x);
    rg_node *mm = rg_mul_mat(g, w, xs);
    rg_node *ids = rg_leaf(g, "ids", RG_TYPE_I32, 1, (int64_t[]){4}, x);
    rg_node *gr = rg_get_rows(g, w, ids);
    const bool mm_ok = mm && rg_op_cell_runs(RG_BACKEND_CUDA, mm), gr_ok = gr && rg_op_cell_runs(RG_BACKEND_CUDA, gr);
    rg_graph_free(g);
    *what = !mm_ok   ? "MUL_MAT of quantized weights (a q4_K probe)"
            : !gr_ok ? "GET_ROWS of a quantized table (a q4_K probe)"
                     : NULL;
    return mm_ok && gr_ok;
}

// Per-step losses and gradient norms of 4 LoRA steps on the CPU and the device; the device's
// step graph under RETRO_REQUIRE_GPU_RESIDENT=1 when `resident`.
static void compare(const char *target, const char *half_gemm, bool fused) {
    char why[256];
    if (!have_device(why, sizeof why)) RG_SKIP("no CUDA device: %s", why);
    const char *missing = NULL;
    const bool resident = quant_products_on_device(&missing) || !target;
    const bool tensor = target && !strcmp(half_gemm, "tensor");
    const double bound = tensor ? 8 * 0x1p-8 : 1e-4;
    char path[256];
    snprintf(path, sizeof path, "/tmp/rg_test_cuda_train_quant_%d.gguf", (int)getpid());
    rg_error err = {0};
    RG_REQUIRE(tiny_fixture(path, target, &err) == RG_OK, "fixture %s: %s", target ? target : "f32", err.msg);
    rg_model *m = NULL;
    RG_REQUIRE(rg_model_load(&m, path, &err) == RG_OK, "load: %s", err.msg);
    rg_train_config c = tt_config(RG_TRAIN_LORA, T);
    c.batch_size = ROWS_PER_STEP;
    c.clip_grad_norm = 0.5;
    c.fused_ce = fused ? RG_FUSED_CE_ON : RG_FUSED_CE_OFF;
    rg_train_spec sp;
    RG_REQUIRE(tt_spec(&sp, &c, 0, &err) == RG_OK, "config: %s", err.msg);
    setenv("RETRO_CUDA_HALF_GEMM", half_gemm, 1);  // read when the device context is made
    if (resident) setenv("RETRO_REQUIRE_GPU_RESIDENT", "1", 1);
    rg_train_state *cpu = NULL, *dev = NULL;
    RG_REQUIRE(rg_train_state_create_on(&cpu, m, &sp, STEPS, RG_DEVICE_CPU, &err) == RG_OK, "cpu: %s", err.msg);
    rg_status st = rg_train_state_create_on(&dev, m, &sp, STEPS, RG_DEVICE_CUDA, &err);
    unsetenv("RETRO_REQUIRE_GPU_RESIDENT");
    RG_CHECK(st == RG_OK, "%s on cuda%s: %s", target ? target : "f32", resident ? " (resident)" : "", err.msg);
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
        printf("    lora %s (%s%s) step %d: loss cpu %.7f cuda %.7f (rel %.1e), grad norm %.6f vs %.6f (rel %.1e)\n",
               target ? target : "f32", half_gemm, fused ? ", fused loss" : "", step, lc, ld, el, nc, nd, en);
        worst_loss = fmax(worst_loss, el), worst_norm = fmax(worst_norm, en);
        RG_CHECK(!skc && !skd && lrc == lrd, "step %d: skipped %d %d, lr %g %g", step, skc, skd, lrc, lrd);
    }
    RG_CHECK(worst_loss <= bound, "per-step losses differ by %.3e relative (bound %.2g)", worst_loss, bound);
    RG_CHECK(worst_norm <= bound, "gradient norms differ by %.3e relative (bound %.2g)", worst_norm, bound);
    if (st == RG_OK) {
        rg_exec_stats a, o;
        rg_train_state_exec_stats(dev, &a, &o);
        printf("    step graph: gpu nodes %d, fallbacks %d, copies inside %llu + %llu\n", a.nodes_gpu, a.nodes_fallback,
               (unsigned long long)a.copies_to_device, (unsigned long long)a.copies_to_host);
        RG_CHECK(!resident || (a.nodes_fallback == 0 && a.copies_to_device + a.copies_to_host == 0 &&
                               o.nodes_fallback == 0),
                 "resident: %d + %d fallbacks, %llu copies", a.nodes_fallback, o.nodes_fallback,
                 (unsigned long long)(a.copies_to_device + a.copies_to_host));
    }
    rg_train_state_free(cpu);
    rg_train_state_free(dev);
    rg_model_free(m);
    unlink(path);
    unsetenv("RETRO_CUDA_HALF_GEMM");
    if (!resident)  // compared, but not resident: not a pass of this case
        RG_SKIP("%s has no CUDA cell in this build: the run above fell back per node", missing);
}

static void test_lora_f32_control(void) { compare(NULL, "tensor", false); }
static void test_lora_q4_1(void) { compare("Q4_1", "tensor", false); }
static void test_lora_q4_k_m(void) { compare("Q4_K_M", "tensor", false); }
static void test_lora_q4_k_m_f32_products(void) { compare("Q4_K_M", "f32", false); }
static void test_lora_q8_0(void) { compare("Q8_0", "tensor", false); }
static void test_lora_iq4_xs(void) { compare("IQ4_XS", "tensor", false); }
// training.fused_ce=on: the quantized head through LINEAR_CE(_BACK).
static void test_lora_q4_k_m_fused_loss(void) { compare("Q4_K_M", "tensor", true); }
static void test_lora_q8_0_fused_loss_f32_products(void) { compare("Q8_0", "f32", true); }

// ---------------------------------------------------------------------------
// Whole runs: the adapter's format, and a checkpoint and resume bit for bit on the device.

static int write_text(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    for (int i = 1; i <= 40; i++) fprintf(f, "Line %d: the quick brown fox jumps over the lazy dog %d times.\n", i, i % 7);
    return fclose(f);
}

static rg_status train_run(const char *model, const char *data, const char *out, rg_device dev, bool resume,
                           rg_error *err) {
    rg_train_config c;
    rg_train_config_defaults(&c);
    c.method = RG_TRAIN_LORA, c.ctx = T, c.steps = STEPS, c.batch_size = 2, c.lr = 3e-3, c.lora_rank = 4;
    c.save_every = 2, c.eval_every = 0, c.eval_split = 0, c.threads = 2, c.schedule = RG_SCHED_CONSTANT;
    rg_train_opts o = {.model_path = model, .data_path = data, .out_dir = out, .resume = resume, .progress = 3,
                       .device = dev};
    rg_status st = rg_train_config_validate(&c, &o.spec, err);
    if (st) return st;
    FILE *log = fopen("/dev/null", "w");
    o.log = log;
    rg_train_summary sum;
    st = rg_train_run(&o, &sum, err);
    if (log) fclose(log);
    return st;
}

// The "loss" of each record of OUTDIR/train.jsonl, in order; the count.
static int read_losses(const char *dir, double *loss, int cap) {
    char p[512], line[4096];
    snprintf(p, sizeof p, "%s/train.jsonl", dir);
    FILE *f = fopen(p, "r");
    int n = 0;
    while (f && n < cap && fgets(line, sizeof line, f)) {
        const char *k = strstr(line, "\"loss\":");
        if (k) loss[n++] = strtod(k + 7, NULL);
    }
    if (f) fclose(f);
    return n;
}

static void *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(len > 0 ? (size_t)len : 1);
    *n = p ? fread(p, 1, (size_t)len, f) : 0;
    fclose(f);
    return p;
}

static void remove_tree(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("    could not remove %s\n", dir);
}

// Two adapters in the same format: the same keys (names and value types), the same tensors in
// the same order with the same types and shapes.
static void same_format(const char *a_path, const char *b_path) {
    rg_gguf *a = NULL, *b = NULL;
    rg_error err = {0};
    RG_REQUIRE(rg_gguf_open(&a, a_path, &err) == RG_OK, "%s", err.msg);
    if (rg_gguf_open(&b, b_path, &err) != RG_OK) {
        rg_gguf_free(a);
        RG_REQUIRE(0, "%s", err.msg);
    }
    RG_CHECK(a->n_kv == b->n_kv && a->n_tensors == b->n_tensors, "keys %llu vs %llu, tensors %llu vs %llu",
             (unsigned long long)a->n_kv, (unsigned long long)b->n_kv, (unsigned long long)a->n_tensors,
             (unsigned long long)b->n_tensors);
    for (uint64_t i = 0; i < a->n_kv && i < b->n_kv; i++)
        RG_CHECK(a->kv[i].key.len == b->kv[i].key.len && !memcmp(a->kv[i].key.ptr, b->kv[i].key.ptr, a->kv[i].key.len) &&
                     a->kv[i].type == b->kv[i].type,
                 "key %llu: %.*s vs %.*s", (unsigned long long)i, (int)a->kv[i].key.len, a->kv[i].key.ptr,
                 (int)b->kv[i].key.len, b->kv[i].key.ptr);
    for (uint64_t i = 0; i < a->n_tensors && i < b->n_tensors; i++) {
        const rg_gguf_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        RG_CHECK(!strcmp(x->name, y->name) && x->type == y->type && x->n_dims == y->n_dims &&
                     !memcmp(x->ne, y->ne, sizeof x->ne),
                 "tensor %llu: %s %s [%lld, %lld] vs %s %s [%lld, %lld]", (unsigned long long)i, x->name,
                 rg_type_get(x->type)->name, (long long)x->ne[0], (long long)x->ne[1], y->name,
                 rg_type_get(y->type)->name, (long long)y->ne[0], (long long)y->ne[1]);
    }
    printf("    adapters: %llu keys, %llu tensors (first %s %s [%lld, %lld]), the same on both\n",
           (unsigned long long)a->n_kv, (unsigned long long)a->n_tensors, a->n_tensors ? a->tensors[0].name : "-",
           a->n_tensors ? rg_type_get(a->tensors[0].type)->name : "-", a->n_tensors ? (long long)a->tensors[0].ne[0] : 0,
           a->n_tensors ? (long long)a->tensors[0].ne[1] : 0);
    rg_gguf_free(a);
    rg_gguf_free(b);
}

static void test_lora_q4_k_m_runs_and_resume(void) {
    char why[256];
    if (!have_device(why, sizeof why)) RG_SKIP("no CUDA device: %s", why);
    const char *missing = NULL;
    const bool resident = quant_products_on_device(&missing);
    char dir[200], model[256], data[256], cpu[256], whole[256], resumed[256], p[400];
    snprintf(dir, sizeof dir, "/tmp/rg_test_cuda_train_quant_runs_%d", (int)getpid());
    RG_REQUIRE(mkdir(dir, 0755) == 0 || errno == EEXIST, "mkdir %s", dir);
    snprintf(model, sizeof model, "%s/q4km.gguf", dir);
    snprintf(data, sizeof data, "%s/text.txt", dir);
    snprintf(cpu, sizeof cpu, "%s/cpu", dir);
    snprintf(whole, sizeof whole, "%s/whole", dir);
    snprintf(resumed, sizeof resumed, "%s/resumed", dir);
    rg_error err = {0};
    RG_REQUIRE(tiny_fixture(model, "Q4_K_M", &err) == RG_OK && write_text(data) == 0, "fixture: %s", err.msg);
    if (resident) setenv("RETRO_REQUIRE_GPU_RESIDENT", "1", 1);
    rg_status st = train_run(model, data, whole, RG_DEVICE_CUDA, false, &err);
    RG_CHECK(st == RG_OK, "the device run%s: %s", resident ? " (resident)" : "", err.msg);
    // Interrupted after the step-2 checkpoint: the same run whose last checkpoint and result are gone.
    if (!st) st = train_run(model, data, resumed, RG_DEVICE_CUDA, false, &err);
    RG_CHECK(st == RG_OK, "the second device run: %s", err.msg);
    snprintf(p, sizeof p, "%s/checkpoints/step-4", resumed);
    remove_tree(p);
    snprintf(p, sizeof p, "%s/adapter.gguf", resumed);
    unlink(p);
    if (!st) st = train_run(model, data, resumed, RG_DEVICE_CUDA, true, &err);
    RG_CHECK(st == RG_OK, "the resumed device run: %s", err.msg);
    unsetenv("RETRO_REQUIRE_GPU_RESIDENT");
    rg_error cerr = {0};
    const rg_status cst = train_run(model, data, cpu, RG_DEVICE_CPU, false, &cerr);
    RG_CHECK(cst == RG_OK, "the cpu run: %s", cerr.msg);
    if (!st) st = cst;
    if (!st) {
        double lw[16], lr[16], lc[16];
        const int nw = read_losses(whole, lw, 16), nr = read_losses(resumed, lr, 16), nc = read_losses(cpu, lc, 16);
        RG_CHECK(nw == STEPS && nr == STEPS && nc == STEPS, "train.jsonl records: %d, %d, %d", nw, nr, nc);
        int same = nw == nr;
        for (int i = 0; i < nw && i < nr; i++) same &= lw[i] == lr[i];
        printf("    losses: whole %.7f %.7f %.7f %.7f | resumed %.7f %.7f %.7f %.7f | cpu %.7f %.7f %.7f %.7f\n", lw[0],
               lw[1], lw[2], lw[3], lr[0], lr[1], lr[2], lr[3], lc[0], lc[1], lc[2], lc[3]);
        RG_CHECK(same, "the resumed run's per-step losses differ from the uninterrupted run's");
        char aw[400], ar[400], ac[400];
        snprintf(aw, sizeof aw, "%s/adapter.gguf", whole);
        snprintf(ar, sizeof ar, "%s/adapter.gguf", resumed);
        snprintf(ac, sizeof ac, "%s/adapter.gguf", cpu);
        size_t n1 = 0, n2 = 0;
        void *b1 = read_file(aw, &n1), *b2 = read_file(ar, &n2);
        RG_CHECK(b1 && b2 && n1 == n2 && n1 > 0 && !memcmp(b1, b2, n1), "adapter bytes: %zu vs %zu, %s", n1, n2,
                 b1 && b2 && n1 == n2 && !memcmp(b1, b2, n1) ? "equal" : "different");
        printf("    resume on the device: adapter %zu bytes, %s\n", n1,
               b1 && b2 && n1 == n2 && !memcmp(b1, b2, n1) ? "identical" : "different");
        free(b1), free(b2);
        same_format(ac, aw);
    }
    remove_tree(dir);
    if (!resident) RG_SKIP("%s has no CUDA cell in this build: the runs above fell back per node", missing);
}

static const rg_test_case cases[] = {
    RG_TEST(test_lora_f32_control),
    RG_TEST(test_lora_q4_1),
    RG_TEST(test_lora_q4_k_m),
    RG_TEST(test_lora_q4_k_m_f32_products),
    RG_TEST(test_lora_q8_0),
    RG_TEST(test_lora_iq4_xs),
    RG_TEST(test_lora_q4_k_m_fused_loss),
    RG_TEST(test_lora_q8_0_fused_loss_f32_products),
    RG_TEST(test_lora_q4_k_m_runs_and_resume),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
