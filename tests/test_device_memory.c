// test_device_memory.c - the seed's device_memory test: training on the CUDA device under
// RETRO_REQUIRE_GPU_RESIDENT=1.
//   - A run whose every op has a CUDA kernel (full fine-tuning of an F32 model) takes its
//     steps with nothing copied inside them: no node falls back to the CPU, the step graph
//     moves only its row in (ids, labels, positions, the document mask) and its loss out,
//     and the optimizer graph moves only the gradients' sum of squares out (8 bytes a step).
//   - LoRA on a quantized base (the seed's RETRO_CPU_FIXTURE when set, else the tiny qwen2 in
//     Q4_K_M) stays resident too: the quantized token embedding's GET_ROWS, the quantized
//     products and the fused loss run on the device, nothing copied inside a step. (In a build
//     whose CUDA column has no quantized MUL_MAT yet, the refusal must not name the GET_ROWS,
//     and the case is a skip.)
//   - A graph that would copy inside a run (a GET_ROWS of a Q8_K table: a type the CPU reads
//     and the device decoders do not) is refused before it runs, naming the node, its op and
//     its types; without the guard it runs, its fallback and copies counted, with the CPU's
//     values.
//   - The hybrids: lfm2 and mamba2 tiny models, full F32 training resident under the guard
//     (SSM_CONV/SSM_SCAN and their backward on the device), nothing copied inside a step.
// Fixtures as in the seed: RETRO_TINY_FIXTURE (an F32 model) and RETRO_CPU_FIXTURE (a quantized
// model, the seed's LFM2.5-230M-Q4_K_M) when set, else the tiny qwen2 in F32 and in Q4_K_M from
// make-tiny. Runs on a GPU, or through the host execution of
// the CUDA code (RETRO_CUDA_HOST=1); skips with the reason without either.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/cuda.h"
#include "graph/backend.h"
#include "graph/exec.h"
#include "graph/graph.h"
#include "model/model.h"
#include "rg_test.h"
#include "tensor/quant/quant.h"
#include "train/train_state.h"
#include "train_rows.h"

enum { T = 48, STEPS = 3, ROWS_PER_STEP = 2 };

static const tt_rows ROWS = {.T = T, .split = 30, .mod = 7, .rem = 3, .mul = 0x9E3779B9u, .add = 3};

// The fixture named by env, or the tiny qwen2 made in `quant` at path (*made set).
static rg_model *fixture(const char *env, uint32_t quant, const char *path, bool *made, rg_error *err) {
    const char *f = getenv(env);
    rg_model *m = NULL;
    *made = false;
    if (f && *f) {
        printf("    %s=%s\n", env, f);
        return rg_model_load(&m, f, err) ? NULL : m;
    }
    rg_tiny_config tc = {.arch = "qwen2", .type = RG_TYPE_F32, .seed = 11};
    m = tt_tiny(path, &tc, quant, err);
    *made = m != NULL;
    return m;
}

// A training state of c on the device.
static rg_status create_cuda(rg_train_state **s, const rg_model *m, const rg_train_config *c, rg_error *err) {
    rg_train_spec sp;
    rg_status st = tt_spec(&sp, c, 0, err);
    return st ? st : rg_train_state_create_on(s, m, &sp, STEPS, RG_DEVICE_CUDA, err);
}

// The same under RETRO_REQUIRE_GPU_RESIDENT=1 (the guard acts when its executors are made).
static rg_status create_guarded(rg_train_state **s, const rg_model *m, const rg_train_config *c, rg_error *err) {
    setenv("RETRO_REQUIRE_GPU_RESIDENT", "1", 1);
    rg_status st = create_cuda(s, m, c, err);
    unsetenv("RETRO_REQUIRE_GPU_RESIDENT");
    return st;
}

static bool have_device(void) {
    char why[256];
    if (rg_cuda_device_count(why, sizeof why) > 0) return true;
    printf("    no CUDA device: %s\n", why);
    return false;
}

static void test_resident_steps_make_no_copies(void) {
    if (!have_device()) RG_SKIP("no CUDA device");
    char path[256];
    snprintf(path, sizeof path, "/tmp/rg_test_device_memory_%d.gguf", (int)getpid());
    rg_error err = {0};
    bool made;
    rg_model *m = fixture("RETRO_TINY_FIXTURE", RG_TYPE_F32, path, &made, &err);
    RG_REQUIRE(m, "fixture: %s", err.msg);
    rg_train_config c = tt_config(RG_TRAIN_FULL, T);
    c.batch_size = ROWS_PER_STEP;
    c.clip_grad_norm = 1.0;
    setenv("RETRO_REQUIRE_GPU_RESIDENT", "1", 1);
    rg_train_state *s = NULL;
    rg_status st = create_cuda(&s, m, &c, &err);
    RG_CHECK(st == RG_OK, "a resident run is refused: %s", err.msg);
    for (int step = 0; st == RG_OK && step < STEPS; step++) {
        double loss, gn, lr;
        bool skipped;
        for (int r = 0; r < ROWS_PER_STEP && st == RG_OK; r++) st = tt_micro(&ROWS, s, step * ROWS_PER_STEP + r, &loss, &err);
        if (!st) st = rg_train_state_step(s, &gn, &lr, &skipped, &err);
        RG_CHECK(st == RG_OK && !skipped, "step %d: %s", step, err.msg);
    }
    unsetenv("RETRO_REQUIRE_GPU_RESIDENT");
    if (st == RG_OK) {
        rg_exec_stats a, o;
        rg_train_state_exec_stats(s, &a, &o);
        const uint64_t rows = STEPS * ROWS_PER_STEP;
        printf("    step graph, %llu rows: gpu nodes %d, cpu nodes %d (fallbacks %d), copies inside %llu to the device "
               "+ %llu to the host, in %llu bytes (%llu per row), out %llu bytes (%llu copies)\n",
               (unsigned long long)rows, a.nodes_gpu, a.nodes_cpu, a.nodes_fallback,
               (unsigned long long)a.copies_to_device, (unsigned long long)a.copies_to_host,
               (unsigned long long)a.input_bytes, (unsigned long long)(a.input_bytes / rows),
               (unsigned long long)a.output_bytes, (unsigned long long)a.output_copies);
        printf("    optimizer graph, %d steps: cpu nodes %d, copies inside %llu + %llu, out %llu bytes\n", STEPS,
               o.nodes_cpu, (unsigned long long)o.copies_to_device, (unsigned long long)o.copies_to_host,
               (unsigned long long)o.output_bytes);
        RG_CHECK(a.nodes_fallback == 0 && a.copies_scheduled == 0 && a.copies_to_device == 0 && a.copies_to_host == 0,
                 "the step graph copies inside its runs: %d fallbacks, %d scheduled, %llu + %llu copies", a.nodes_fallback,
                 a.copies_scheduled, (unsigned long long)a.copies_to_device, (unsigned long long)a.copies_to_host);
        RG_CHECK(o.nodes_fallback == 0 && o.copies_to_device == 0 && o.copies_to_host == 0,
                 "the optimizer graph copies inside its runs: %d fallbacks, %llu + %llu copies", o.nodes_fallback,
                 (unsigned long long)o.copies_to_device, (unsigned long long)o.copies_to_host);
        // A row in: ids, labels, positions (i32 [T] each) and the document mask (f32 [T, T]); the loss out.
        const uint64_t row_in = 3 * T * 4 + (uint64_t)T * T * 4;
        RG_CHECK(a.input_bytes == rows * row_in, "the step graph took in %llu bytes, expected %llu (%llu per row)",
                 (unsigned long long)a.input_bytes, (unsigned long long)(rows * row_in), (unsigned long long)row_in);
        RG_CHECK(a.output_bytes == rows * 4, "the step graph gave out %llu bytes, expected the %llu losses",
                 (unsigned long long)a.output_bytes, (unsigned long long)rows);
        // The optimizer: the gradients' F64 sum of squares per step (the global norm, for the report and
        // the skip; the clip is made on the device), nothing else.
        RG_CHECK(o.output_bytes == (uint64_t)STEPS * 8 && o.input_bytes == 0,
                 "the optimizer graph moved %llu bytes out and %llu in, expected %llu out (one f64 a step)",
                 (unsigned long long)o.output_bytes, (unsigned long long)o.input_bytes, (unsigned long long)STEPS * 8);
        const rg_train_memory mem = rg_train_state_memory(s);
        printf("    device memory: weights %zu, gradients %zu, optimizer %zu, activations %zu, scratch %zu bytes\n",
               mem.scratch_weights, mem.scratch_gradients, mem.scratch_optimizer, mem.scratch_activations,
               mem.scratch_scratch);
        RG_CHECK(mem.on_device && mem.scratch_weights > 0 && mem.scratch_optimizer > 0, "the memory report: %d %zu %zu",
                 mem.on_device, mem.scratch_weights, mem.scratch_optimizer);
    }
    rg_train_state_free(s);
    rg_model_free(m);
    if (made) unlink(path);
}

// The hybrids (issue 14): lfm2's short convolutions and attention, mamba2's mixer, full F32
// training on the device under the guard: every op, SSM_CONV/SSM_SCAN and their backward
// included, runs there, and nothing is copied inside a step.
static void resident_hybrid(const char *arch) {
    if (!have_device()) RG_SKIP("no CUDA device");
    char path[256];
    snprintf(path, sizeof path, "/tmp/rg_test_device_memory_%s_%d.gguf", arch, (int)getpid());
    rg_error err = {0};
    rg_tiny_config tc = {.arch = arch, .type = RG_TYPE_F32, .seed = 11};
    rg_model *m = tt_tiny(path, &tc, RG_TYPE_F32, &err);
    RG_REQUIRE(m, "fixture: %s", err.msg);
    rg_train_config c = tt_config(RG_TRAIN_FULL, T);
    rg_train_state *s = NULL;
    rg_status st = create_guarded(&s, m, &c, &err);
    RG_CHECK(st == RG_OK, "%s: a resident run is refused: %s", arch, err.msg);
    for (int step = 0; st == RG_OK && step < 2; step++) {
        double loss, gn, lr;
        bool skipped;
        st = tt_micro(&ROWS, s, step, &loss, &err);
        if (!st) st = rg_train_state_step(s, &gn, &lr, &skipped, &err);
        RG_CHECK(st == RG_OK, "%s step %d: %s", arch, step, err.msg);
    }
    if (st == RG_OK) {
        rg_exec_stats a, o;
        rg_train_state_exec_stats(s, &a, &o);
        printf("    %s: gpu nodes %d, cpu nodes %d, copies inside %llu + %llu, in %llu bytes per row, out %llu bytes\n",
               arch, a.nodes_gpu, a.nodes_cpu, (unsigned long long)a.copies_to_device,
               (unsigned long long)a.copies_to_host, (unsigned long long)(a.input_bytes / 2),
               (unsigned long long)a.output_bytes);
        RG_CHECK(a.nodes_fallback == 0 && a.copies_to_device + a.copies_to_host == 0 && o.nodes_fallback == 0 &&
                     o.copies_to_device + o.copies_to_host == 0,
                 "%s: %d + %d fallbacks, %llu copies", arch, a.nodes_fallback, o.nodes_fallback,
                 (unsigned long long)(a.copies_to_device + a.copies_to_host + o.copies_to_device + o.copies_to_host));
    }
    rg_train_state_free(s);
    rg_model_free(m);
    unlink(path);
}
static void test_lfm2_resident(void) { resident_hybrid("lfm2"); }
static void test_mamba2_resident(void) { resident_hybrid("mamba2"); }

// Whether this build's CUDA column takes a quantized MUL_MAT (a Q4_K weight).
static bool quant_mul_mat_on_device(void) {
    static uint8_t q[8 * 144];
    static float x[256 * 4];
    rg_graph *g = rg_graph_new();
    rg_node *mm = rg_mul_mat(g, rg_leaf(g, "w", RG_TYPE_Q4_K, 2, (int64_t[]){256, 8}, q),
                             rg_leaf(g, "x", RG_TYPE_F32, 2, (int64_t[]){256, 4}, x));
    const bool ok = mm && rg_op_cell_runs(RG_BACKEND_CUDA, mm);
    rg_graph_free(g);
    return ok;
}

static void test_quant_lora_resident(void) {
    if (!have_device()) RG_SKIP("no CUDA device");
    char path[256];
    snprintf(path, sizeof path, "/tmp/rg_test_device_memory_q_%d.gguf", (int)getpid());
    rg_error err = {0};
    bool made;
    rg_model *m = fixture("RETRO_CPU_FIXTURE", RG_TYPE_Q4_K, path, &made, &err);
    RG_REQUIRE(m, "fixture: %s", err.msg);
    rg_train_config c = tt_config(RG_TRAIN_LORA, T);
    rg_train_state *s = NULL;
    rg_status st = create_guarded(&s, m, &c, &err);
    if (!quant_mul_mat_on_device()) {
        printf("    refused (no quantized MUL_MAT on the device in this build): %s\n", err.msg);
        RG_CHECK(st != RG_OK && !strstr(err.msg, "get_rows"), "the quantized GET_ROWS does not stay resident: %s",
                 st ? err.msg : "(accepted)");
        rg_train_state_free(s);
        rg_model_free(m);
        if (made) unlink(path);
        RG_SKIP("MUL_MAT of quantized weights has no CUDA cell in this build");
    }
    RG_CHECK(st == RG_OK, "LoRA on a quantized base is refused: %s", err.msg);
    setenv("RETRO_REQUIRE_GPU_RESIDENT", "1", 1);
    for (int step = 0; st == RG_OK && step < 2; step++) {
        double loss, gn, lr;
        bool skipped;
        st = tt_micro(&ROWS, s, step, &loss, &err);
        if (!st) st = rg_train_state_step(s, &gn, &lr, &skipped, &err);
        RG_CHECK(st == RG_OK && !skipped, "step %d: %s", step, err.msg);
    }
    unsetenv("RETRO_REQUIRE_GPU_RESIDENT");
    if (st == RG_OK) {
        rg_exec_stats a, o;
        rg_train_state_exec_stats(s, &a, &o);
        printf("    lora on the quantized base: gpu nodes %d, cpu nodes %d (fallbacks %d), copies inside %llu + %llu\n",
               a.nodes_gpu, a.nodes_cpu, a.nodes_fallback, (unsigned long long)a.copies_to_device,
               (unsigned long long)a.copies_to_host);
        RG_CHECK(a.nodes_fallback == 0 && a.copies_scheduled == 0 && a.copies_to_device + a.copies_to_host == 0 &&
                     o.nodes_fallback == 0 && o.copies_to_device + o.copies_to_host == 0,
                 "copies inside the steps: %d + %d fallbacks, %llu copies", a.nodes_fallback, o.nodes_fallback,
                 (unsigned long long)(a.copies_to_device + a.copies_to_host + o.copies_to_device + o.copies_to_host));
    }
    rg_train_state_free(s);
    rg_model_free(m);
    if (made) unlink(path);
}

// A node the device cannot run: a GET_ROWS of a Q8_K table (the CPU dequantizes Q8_K; it is an
// activation type, never in a model file, and has no device decoder), summed.
static rg_graph *q8k_graph(void **table, rg_node **out) {
    enum { N = 256, ROWS = 6, K = 4 };
    static const int32_t ids[K] = {1, 5, 0, 1};
    float x[N * ROWS];
    for (int i = 0; i < N * ROWS; i++) x[i] = (float)((i * 37) % 101 - 50) / 64.0f;
    *table = malloc(rg_type_row_size(RG_TYPE_Q8_K, N) * ROWS);
    rg_error err = {0};
    if (!*table || rg_quantize(RG_TYPE_Q8_K, x, *table, ROWS, N, NULL, "q8_K table", &err) != RG_OK) return NULL;
    rg_graph *g = rg_graph_new();
    rg_node *t = rg_leaf(g, "token_embd.weight", RG_TYPE_Q8_K, 2, (int64_t[]){N, ROWS}, *table);
    rg_node *rows = rg_get_rows(g, t, rg_leaf(g, "ids", RG_TYPE_I32, 1, (int64_t[]){K}, (void *)ids));
    if (rows) snprintf(rows->t.name, sizeof rows->t.name, "inp_embd");
    *out = rg_sum(g, rg_scale(g, rows, 0.5f));
    if (*out) (*out)->flags |= RG_NODE_OUTPUT;
    return g;
}

static void test_copying_run_is_refused(void) {
    if (!have_device()) RG_SKIP("no CUDA device");
    void *table = NULL;
    rg_node *out = NULL;
    rg_graph *g = q8k_graph(&table, &out);
    rg_error err = {0};
    RG_REQUIRE(g && rg_graph_error(g, &err) == RG_OK, "graph: %s", err.msg);
    RG_CHECK(!rg_op_cell_runs(RG_BACKEND_CUDA, out->src[0]->src[0]), "the device takes a q8_K GET_ROWS");
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 2, .device = RG_DEVICE_CUDA};
    setenv("RETRO_REQUIRE_GPU_RESIDENT", "1", 1);
    rg_status st = rg_exec_create(&ex, g, &o, &err);
    unsetenv("RETRO_REQUIRE_GPU_RESIDENT");
    printf("    refused: %s\n", err.msg);
    RG_CHECK(st != RG_OK && !ex && strstr(err.msg, "RETRO_REQUIRE_GPU_RESIDENT") && strstr(err.msg, "'inp_embd'") &&
                 strstr(err.msg, "get_rows") && strstr(err.msg, "q8_K") && strstr(err.msg, "would run on the CPU"),
             "the refusal does not name the node, its op, its types and the reason: status %d, '%s'", st, err.msg);
    rg_exec_free(ex);
    // Without the guard the node falls back to the CPU, its copies counted, with the CPU's value.
    float dev = 0, cpu = 1;
    ex = NULL;
    st = rg_exec_create(&ex, g, &o, &err);
    if (!st) st = rg_exec_run(ex, 0, -1, &err);
    if (!st) st = rg_exec_read(ex, out, &dev, sizeof dev, &err);
    RG_CHECK(st == RG_OK, "without the guard: %s", err.msg);
    if (!st) {
        const rg_exec_stats a = rg_exec_get_stats(ex);
        printf("    without the guard: %d node fell back, %llu copies to the device and %llu to the host\n",
               a.nodes_fallback, (unsigned long long)a.copies_to_device, (unsigned long long)a.copies_to_host);
        RG_CHECK(a.nodes_fallback == 1 && a.copies_to_device + a.copies_to_host > 0, "fallbacks %d, copies %llu + %llu",
                 a.nodes_fallback, (unsigned long long)a.copies_to_device, (unsigned long long)a.copies_to_host);
    }
    rg_exec_free(ex);
    ex = NULL;
    o.device = RG_DEVICE_CPU;
    st = rg_exec_create(&ex, g, &o, &err);
    if (!st) st = rg_exec_run(ex, 0, -1, &err);
    if (!st) st = rg_exec_read(ex, out, &cpu, sizeof cpu, &err);
    RG_CHECK(st == RG_OK && dev == cpu, "the device's sum %.9g, the CPU's %.9g (%s)", dev, cpu, st ? err.msg : "ok");
    rg_exec_free(ex);
    rg_graph_free(g);
    free(table);
}

static const rg_test_case cases[] = {
    RG_TEST(test_resident_steps_make_no_copies),
    RG_TEST(test_lfm2_resident),
    RG_TEST(test_mamba2_resident),
    RG_TEST(test_quant_lora_resident),
    RG_TEST(test_copying_run_is_refused),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
