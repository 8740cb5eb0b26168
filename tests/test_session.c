// test_session.c - the forward on the tiny fixtures: KV-cached evaluation
// agrees with one full pass, token by token and in batches; bad input is
// refused without changing the cache. lfm2 and mamba2: the conv and SSM states
// carried from call to call give the logits of one batch, token by token and
// in uneven batches; a truncation to 0 starts over, one to 0 < n_past is refused.
// Prompt batches through flash attention (rg_session_opts.flash_attn on) against the
// materialized scores (off), per architecture with attention; auto's rule.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/cuda.h"
#include "graph/exec.h"
#include "infer/session.h"
#include "model/forward.h"
#include "model/tiny.h"
#include "cpu/gemm_int8.h"
#include "cpu/cpu_ops.h"
#include "cpu/gemm_int8_tiles.h"
#include "model/quantize.h"
#include "full_pass.h"
#include "rg_test.h"
#include "session_fixture.h"

enum { T = 24 };

static rg_model *tiny_arch(const char *arch, uint32_t type, bool tied, char *path) {
    return sf_tiny_model(arch, type, 5, tied, path, "session");
}

static rg_model *tiny(uint32_t type, bool tied, char *path) { return tiny_arch("qwen2", type, tied, path); }

// Logits of all T tokens in one pass without a cache.
static rg_status full_pass(rg_model *m, const int32_t *ids, float *logits, rg_error *err) {
    return rg_test_full_logits(m, NULL, 0.0f, ids, T, logits, err);
}

static double max_rel(const float *a, const float *b, int64_t n) { return rg_test_max_rel(a, b, n); }

static void check_type_on(uint32_t type, bool tied, rg_device device) {
    char path[64];
    rg_model *m = tiny(type, tied, path);
    RG_REQUIRE(m, "model");
    const int64_t V = m->hp.n_vocab;
    int32_t ids[T];
    for (int i = 0; i < T; i++) ids[i] = (i * 37 + 11) % (int32_t)V;
    float *full = malloc(sizeof(float) * V * T), *step = malloc(sizeof(float) * V * T), *last = malloc(sizeof(float) * V);
    rg_error err = {0};
    RG_REQUIRE(full_pass(m, ids, full, &err) == RG_OK, "%s", err.msg);
    bool finite = true;
    for (int64_t i = 0; i < V * T; i++) finite &= isfinite(full[i]);
    RG_CHECK(finite, "non-finite logits");
    // Token by token with the cache.
    rg_session *s;
    rg_session_opts so = {.n_ctx = 64, .n_threads = 2, .n_batch = 7, .device = device};
    RG_REQUIRE(rg_session_create(&s, m, &so, &err) == RG_OK, "%s", err.msg);
    for (int i = 0; i < T; i++) RG_REQUIRE(rg_session_eval(s, &ids[i], 1, step + (size_t)i * V, 0, &err) == RG_OK, "%s", err.msg);
    double e1 = max_rel(step, full, V * T);
    // In batches of 7 (the n_batch), all logits.
    rg_session_truncate(s, 0);
    RG_REQUIRE(rg_session_eval(s, ids, T, step, 1, &err) == RG_OK, "%s", err.msg);
    double e2 = max_rel(step, full, V * T);
    // Last-token logits only, after a prefix.
    rg_session_truncate(s, 10);
    RG_REQUIRE(rg_session_eval(s, ids + 10, T - 10, last, 0, &err) == RG_OK, "%s", err.msg);
    double e3 = max_rel(last, full + (size_t)(T - 1) * V, V);
    printf("    %s%s%s: cached token-by-token %.2e, batched %.2e, last-only %.2e (bound 1e-3, the F16 cache)\n",
           rg_type_get(type)->name, tied ? " tied" : "", device == RG_DEVICE_CUDA ? " on the cuda device" : "", e1, e2, e3);
    RG_CHECK(e1 < 1e-3 && e2 < 1e-3 && e3 < 1e-3, "cached logits differ from the full pass");
    // Over the context: refused, cache unchanged.
    int64_t before = rg_session_n_past(s);
    int32_t many[64] = {0};
    RG_CHECK(rg_session_eval(s, many, 64, NULL, 0, &err) == RG_ERR_ARG && strstr(err.msg, "exceed the context of 64"),
             "%s", err.msg);
    RG_CHECK(rg_session_n_past(s) == before, "a refused call moved the cache");
    int32_t bad = (int32_t)V;
    RG_CHECK(rg_session_eval(s, &bad, 1, NULL, 0, &err) == RG_ERR_ARG && strstr(err.msg, "outside the vocabulary"), "%s",
             err.msg);
    rg_session_free(s);
    rg_model_free(m);
    unlink(path);
    free(full), free(step), free(last);
}

static void check_type(uint32_t type, bool tied) { check_type_on(type, tied, RG_DEVICE_CPU); }

// The same on the CUDA device (a GPU, or the host execution of the CUDA code with
// RETRO_CUDA_HOST=1): batches through device-resident weights and KV cache, the ops
// without a CUDA kernel falling back per node; the logits against the CPU's full pass.
static void check_type_cuda(uint32_t type, bool tied) {
    char why[256];
    if (rg_cuda_device_count(why, sizeof why) <= 0) RG_SKIP("no CUDA device: %s", why);
    check_type_on(type, tied, RG_DEVICE_CUDA);
}
static void test_cuda_f32(void) { check_type_cuda(RG_TYPE_F32, false); }
static void test_cuda_f16_tied(void) { check_type_cuda(RG_TYPE_F16, true); }

// RETRO_CUDA_GRAPHS=1 on the device: the single-token graph is captured once and replayed for
// every later token (the cache window's offset and the number of cached keys are read from
// device memory, so a step that moves them does not change a launch), with the same logits,
// bit for bit, as the same tokens without graphs.
static void test_cuda_decode_graph_replayed(void) {
    char why[256];
    if (rg_cuda_device_count(why, sizeof why) <= 0) RG_SKIP("no CUDA device: %s", why);
    char path[64];
    rg_model *m = tiny(RG_TYPE_F16, true, path);
    RG_REQUIRE(m, "model");
    const int64_t V = m->hp.n_vocab;
    enum { N = 12 };
    float *lg[2] = {malloc(sizeof(float) * V * N), malloc(sizeof(float) * V * N)};
    const char *env = getenv("RETRO_CUDA_GRAPHS");
    char *saved = env ? strdup(env) : NULL;
    rg_exec_stats st = {0};
    rg_error err = {0};
    for (int g = 0; g < 2; g++) {
        if (g) setenv("RETRO_CUDA_GRAPHS", "1", 1);
        else unsetenv("RETRO_CUDA_GRAPHS");
        rg_session *s;
        rg_session_opts so = {.n_ctx = 64, .n_threads = 2, .device = RG_DEVICE_CUDA};
        RG_REQUIRE(rg_session_create(&s, m, &so, &err) == RG_OK, "%s", err.msg);
        for (int i = 0; i < N; i++) {
            const int32_t id = (i * 53 + 7) % (int32_t)V;
            RG_REQUIRE(rg_session_eval(s, &id, 1, lg[g] + (size_t)i * V, 0, &err) == RG_OK, "%s", err.msg);
        }
        if (g) st = rg_session_decode_stats(s);
        rg_session_free(s);
    }
    if (saved) setenv("RETRO_CUDA_GRAPHS", saved, 1);
    else unsetenv("RETRO_CUDA_GRAPHS");
    free(saved);
    printf("    decode with graphs: %llu captures, %llu replays of %d tokens, %llu parameter uploads\n",
           (unsigned long long)st.graph_captures, (unsigned long long)st.graph_launches, N,
           (unsigned long long)st.param_copies);
    RG_CHECK(st.graph_captures == 1 && st.graph_launches == N - 1, "decode graph: %llu captures, %llu replays",
             (unsigned long long)st.graph_captures, (unsigned long long)st.graph_launches);
    RG_CHECK(memcmp(lg[0], lg[1], sizeof(float) * V * N) == 0, "the logits with graphs differ from those without");
    free(lg[0]), free(lg[1]);
    rg_model_free(m);
    unlink(path);
}

static void test_f32(void) { check_type(RG_TYPE_F32, false); }
static void test_f16_tied(void) { check_type(RG_TYPE_F16, true); }
static void test_bf16(void) { check_type(RG_TYPE_BF16, false); }

// Q4_0 weights: a prompt in one batch (N >= 8: the integer GEMM on Q8_0 activations where the CPU has
// AMX-INT8 or AVX-512 VNNI or RG_TILES_EMULATE=1 is set, else the SGEMM) against the same tokens one at a time (dot products on Q8_0 activations).
// With the integer GEMM both quantize the activations the same way: within float rounding.
static void test_q4_0_prompt_matches_decode(void) {
    char path[64];
    rg_model *m = tiny(RG_TYPE_Q4_0, false, path);
    RG_REQUIRE(m, "model");
    const int64_t V = m->hp.n_vocab;
    int32_t ids[T];
    for (int i = 0; i < T; i++) ids[i] = (i * 37 + 11) % (int32_t)V;
    float *batch = malloc(sizeof(float) * V * T), *step = malloc(sizeof(float) * V * T);
    rg_error err = {0};
    rg_session *s;
    rg_session_opts so = {.n_ctx = 64, .n_threads = 2, .n_batch = T};
    RG_REQUIRE(rg_session_create(&s, m, &so, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(rg_session_eval(s, ids, T, batch, 1, &err) == RG_OK, "%s", err.msg);
    rg_session_truncate(s, 0);
    for (int i = 0; i < T; i++) RG_REQUIRE(rg_session_eval(s, &ids[i], 1, step + (size_t)i * V, 0, &err) == RG_OK, "%s", err.msg);
    double e = max_rel(batch, step, V * T);
    // the integer GEMM on VNNI or on the int8 tiles (AMX, or emulated under RG_TILES_EMULATE=1): the same bits
    bool int8 = rg_gemm_int8_supports(RG_TYPE_Q4_0, 64) || rg_gemm_int8_tiles_supports(RG_TYPE_Q4_0, 64);
    printf("    q4_0: prompt of %d in one batch (%s) against token by token: %.2e (bound %s)\n", T,
           int8 ? "integer GEMM" : "SGEMM", e, int8 ? "1e-4" : "2e-2");
    RG_CHECK(e < (int8 ? 1e-4 : 2e-2), "batched logits differ from the token-by-token ones by %.3g", e);
    rg_session_free(s);
    rg_model_free(m);
    unlink(path);
    free(batch), free(step);
}

// BF16 weights in prompts on the BF16 tiles (AMX, or emulated under RG_TILES_EMULATE=1; else a skip):
// the session's tiles cache packs each weight once and later batches read it, with the bits of a
// session without it (RG_TILES_CACHE_MB=0): a prompt of T, then one of 9 after it, all logits.
static void test_bf16_prompt_tiles_cache(void) {
    if (!cpu_prompt_bf16_tiles(RG_TYPE_BF16)) {
        RG_SKIP("prompts take no BF16 tiles here (no AMX; RG_TILES_EMULATE=1 runs the emulated tiles)");
        return;
    }
    char path[64];
    rg_model *m = tiny(RG_TYPE_BF16, false, path);
    RG_REQUIRE(m, "model");
    const int64_t V = m->hp.n_vocab, N2 = 9;
    int32_t ids[T + 9];
    for (int i = 0; i < T + N2; i++) ids[i] = (i * 41 + 3) % (int32_t)V;
    float *lg[2];
    rg_tiles_cache_stats tc[2];
    rg_error err = {0};
    for (int v = 0; v < 2; v++) {
        if (v == 0) setenv("RG_TILES_CACHE_MB", "0", 1);
        else unsetenv("RG_TILES_CACHE_MB");
        lg[v] = malloc(sizeof(float) * V * (T + N2));
        rg_session *s;
        rg_session_opts so = {.n_ctx = 64, .n_threads = 2, .n_batch = T};
        RG_REQUIRE(rg_session_create(&s, m, &so, &err) == RG_OK, "%s", err.msg);
        RG_REQUIRE(rg_session_eval(s, ids, T, lg[v], 1, &err) == RG_OK, "%s", err.msg);
        RG_REQUIRE(rg_session_eval(s, ids + T, N2, lg[v] + (size_t)T * V, 1, &err) == RG_OK, "%s", err.msg);
        tc[v] = rg_session_tiles_stats(s);
        rg_session_free(s);
    }
    unsetenv("RG_TILES_CACHE_MB");
    printf("    bf16 prompts on the tiles: without the cache %lld entries; with it %lld weights held (%.2f MiB), "
           "%lld packs, %lld hits\n", (long long)tc[0].entries, (long long)tc[1].entries, tc[1].bytes / 1048576.0,
           (long long)tc[1].packs, (long long)tc[1].hits);
    RG_CHECK(tc[0].entries == 0 && tc[0].cap == 0, "RG_TILES_CACHE_MB=0 kept a cache");
    RG_CHECK(tc[1].entries > 0 && tc[1].packs == tc[1].entries && tc[1].hits >= tc[1].entries && tc[1].refused == 0,
             "the cache: %lld entries, %lld packs, %lld hits, %lld refused", (long long)tc[1].entries,
             (long long)tc[1].packs, (long long)tc[1].hits, (long long)tc[1].refused);
    RG_CHECK(!memcmp(lg[0], lg[1], sizeof(float) * V * (T + N2)), "the logits with the cache differ from those without");
    free(lg[0]), free(lg[1]);
    rg_model_free(m);
    unlink(path);
}

// The recurrent architectures (F32 weights): a prompt in one batch against the same tokens one at a time (the
// single-token graph), in two uneven calls, and in batches of 7 inside one call: the conv and SSM states that each
// call leaves feed the next, so all agree within float rounding (1e-5 of the largest logit). Against the full pass
// without a cache: the same for mamba2, the F16 KV cache's rounding (1e-3) for lfm2's attention layers. On the
// CUDA device lfm2's batched attention multiplies the F16 cache in half precision and a single token does not
// (ATTN_DECODE), so there token by token takes the KV-cache bound too (mamba2's stay 1e-5).
static void check_recurrent_on(const char *arch, rg_device device) {
    char path[64];
    rg_model *m = tiny_arch(arch, RG_TYPE_F32, true, path);
    RG_REQUIRE(m, "model");
    const int64_t V = m->hp.n_vocab;
    int32_t ids[T];
    for (int i = 0; i < T; i++) ids[i] = (i * 37 + 11) % (int32_t)V;
    const size_t all = sizeof(float) * (size_t)(V * T);
    float *full = malloc(all), *one = malloc(all), *step = malloc(all), *two = malloc(all), *again = malloc(all);
    rg_error err = {0};
    RG_REQUIRE(full_pass(m, ids, full, &err) == RG_OK, "%s", err.msg);
    rg_session *s, *s7;
    rg_session_opts so = {.n_ctx = 64, .n_threads = 2, .n_batch = 64, .device = device};
    RG_REQUIRE(rg_session_create(&s, m, &so, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(rg_session_eval(s, ids, T, one, 1, &err) == RG_OK, "%s", err.msg);
    rg_session_truncate(s, 0);
    for (int i = 0; i < T; i++) RG_REQUIRE(rg_session_eval(s, &ids[i], 1, step + (size_t)i * V, 0, &err) == RG_OK, "%s", err.msg);
    rg_session_truncate(s, 0);
    RG_REQUIRE(rg_session_eval(s, ids, 5, two, 1, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(rg_session_eval(s, ids + 5, T - 5, two + 5 * V, 1, &err) == RG_OK, "%s", err.msg);
    so.n_batch = 7;
    RG_REQUIRE(rg_session_create(&s7, m, &so, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(rg_session_eval(s7, ids, T, again, 1, &err) == RG_OK, "%s", err.msg);
    const double e_step = max_rel(step, one, V * T), e_two = max_rel(two, one, V * T), e7 = max_rel(again, one, V * T);
    const bool attn = !strcmp(arch, "lfm2");
    const double e_full = max_rel(one, full, V * T), full_bound = attn ? 1e-3 : 1e-5;
    const double step_bound = attn && device == RG_DEVICE_CUDA ? 1e-3 : 1e-5;
    printf("    %s%s: against one batch: token by token %.2e (bound %.0e), 5 + %d tokens %.2e, batches of 7 %.2e (bound "
           "1e-5); one batch against the full pass %.2e (bound %.0e)\n", arch,
           device == RG_DEVICE_CUDA ? " on the cuda device" : "", e_step, step_bound, T - 5, e_two, e7, e_full, full_bound);
    RG_CHECK(e_step < step_bound && e_two < 1e-5 && e7 < 1e-5, "%s: the recurrent state does not carry over", arch);
    RG_CHECK(e_full < full_bound, "%s: the cached logits differ from the full pass", arch);
    // A truncation to 0 starts over: the same bits as the first batch.
    rg_session_truncate(s, 0);
    RG_REQUIRE(rg_session_eval(s, ids, T, again, 1, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(!memcmp(again, one, all), "%s: after a truncation to 0 the logits differ", arch);
    // One to 10 cannot rewind the state: refused until a truncation to 0.
    rg_session_truncate(s, 10);
    RG_CHECK(rg_session_eval(s, ids + 10, 1, NULL, 0, &err) == RG_ERR_ARG && strstr(err.msg, "recurrent state") &&
                 rg_session_n_past(s) == 10,
             "%s: truncated to 10: %s", arch, err.msg);
    rg_session_truncate(s, 0);
    RG_REQUIRE(rg_session_eval(s, ids, T, again, 1, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(!memcmp(again, one, all), "%s: after the refusal and a truncation to 0 the logits differ", arch);
    rg_session_free(s7);
    rg_session_free(s);
    rg_model_free(m);
    unlink(path);
    free(full), free(one), free(step), free(two), free(again);
}

static void test_lfm2(void) { check_recurrent_on("lfm2", RG_DEVICE_CPU); }
static void test_mamba2(void) { check_recurrent_on("mamba2", RG_DEVICE_CPU); }
static void check_recurrent_cuda(const char *arch) {
    char why[256];
    if (rg_cuda_device_count(why, sizeof why) <= 0) RG_SKIP("no CUDA device: %s", why);
    check_recurrent_on(arch, RG_DEVICE_CUDA);
}
static void test_cuda_lfm2(void) { check_recurrent_cuda("lfm2"); }
static void test_cuda_mamba2(void) { check_recurrent_cuda("mamba2"); }

static void test_loader_errors(void) {
    rg_model *m;
    rg_error err = {0};
    RG_CHECK(rg_model_load(&m, "/nonexistent.gguf", &err) == RG_ERR_IO, "%s", err.msg);
    // A file without an architecture, and one with an unsupported architecture.
    rg_gguf *g = rg_gguf_new();
    rg_gguf_set_str(g, "general.architecture", "gpt9", &err);
    char path[] = "/tmp/rg_test_archXXXXXX";
    close(mkstemp(path));
    rg_gguf_write(g, path, &err);
    rg_gguf_free(g);
    RG_CHECK(rg_model_load(&m, path, &err) == RG_ERR_UNSUPPORTED && strstr(err.msg, "'gpt9'") &&
                 strstr(err.msg, "llama, qwen2, qwen3"), "%s", err.msg);
    unlink(path);
}

// A prompt through FLASH_ATTN_EXT over the cache (flash_attn on) against the materialized scores (off): PN tokens in
// batches of 13, so every batch after the first has a cached prefix (queries at n_past.. over keys 0..n_past + 12),
// and the 34 tokens cross a flash query tile (32) and gemma's windows of 8 (gemma2's capped scores too); then
// greedy generation, where both take the same single-token graph. The two attentions differ by float rounding
// (another order of sums, the online softmax), but a layer's keys and values go into the F16 cache from hidden
// states that carry that difference, and now and then round to the other F16 neighbour (as test_arch says of
// gemma's token-by-token logits), which moves later logits by more than the rounding itself: measured 4e-7 (lfm2),
// 8e-6 to 9e-6 (qwen2, llama, gemma2) and 6e-5 (gemma3: six layers, q/k norms) of the largest logit; with the
// session's cache made F32 for a trial, 3.7e-7 to 1.0e-6 for all five (and the materialized path then equal to one
// pass bit for bit). Bound 2e-4, the greedy tokens identical, and the flash logits within the F16 cache's 1e-3 of
// one pass without a cache, as the materialized ones are.
enum { PN = 34, GEN = 8 };

static bool flash_prompt_run(rg_model *m, rg_flash_attn_mode mode, const int32_t *ids, float *logits, int32_t *gen) {
    const int64_t V = m->hp.n_vocab;
    rg_session *s;
    rg_error err = {0};
    rg_session_opts so = {.n_ctx = 64, .n_threads = 2, .n_batch = 13, .flash_attn = mode};
    if (rg_session_create(&s, m, &so, &err)) {
        RG_CHECK(0, "session: %s", err.msg);
        return false;
    }
    rg_status st = rg_session_eval(s, ids, PN, logits, 1, &err);
    float *last = malloc(sizeof(float) * (size_t)V);
    int32_t tok = 0;
    for (int64_t j = 1; j < V; j++) tok = logits[(PN - 1) * V + j] > logits[(PN - 1) * V + tok] ? (int32_t)j : tok;
    for (int i = 0; !st && i < GEN; i++) {
        gen[i] = tok;
        st = rg_session_eval(s, &tok, 1, last, 0, &err);
        tok = 0;
        for (int64_t j = 1; j < V; j++) tok = last[j] > last[tok] ? (int32_t)j : tok;
    }
    RG_CHECK(st == RG_OK, "eval (flash_attn %d): %s", (int)mode, err.msg);
    free(last);
    rg_session_free(s);
    return st == RG_OK;
}

static void test_flash_prompt(void) {
    static const char *archs[] = {"qwen2", "llama", "gemma2", "gemma3", "lfm2"};
    for (size_t a = 0; a < sizeof archs / sizeof *archs; a++) {
        char path[64];
        rg_model *m = tiny_arch(archs[a], RG_TYPE_F32, false, path);
        RG_CHECK(m, "%s: model", archs[a]);
        if (!m) continue;
        const int64_t V = m->hp.n_vocab;
        int32_t ids[PN], gen_f[GEN], gen_m[GEN];
        for (int i = 0; i < PN; i++) ids[i] = (i * 37 + 11) % (int32_t)V;
        float *fl = malloc(sizeof(float) * (size_t)(V * PN)), *ma = malloc(sizeof(float) * (size_t)(V * PN)),
              *full = malloc(sizeof(float) * (size_t)(V * PN));
        rg_error err = {0};
        if (flash_prompt_run(m, RG_FLASH_ATTN_ON, ids, fl, gen_f) && flash_prompt_run(m, RG_FLASH_ATTN_OFF, ids, ma, gen_m) &&
            rg_test_full_logits(m, NULL, 0.0f, ids, PN, full, &err) == RG_OK) {
            const double e = max_rel(fl, ma, V * PN), ef = max_rel(fl, full, V * PN), em = max_rel(ma, full, V * PN);
            const bool same = !memcmp(gen_f, gen_m, sizeof gen_f);
            printf("    %s: prompt of %d in batches of 13, flash against materialized %.2e (<= 2e-4); against one pass "
                   "%.2e flash, %.2e materialized (<= 1e-3); %d greedy tokens %s\n", archs[a], PN, e, ef, em, GEN,
                   same ? "identical" : "DIFFER");
            RG_CHECK(e <= 2e-4 && ef <= 1e-3 && same, "%s: flash %.3g from materialized, %.3g from one pass, tokens %s",
                     archs[a], e, ef, same ? "same" : "differ");
        }
        free(fl), free(ma), free(full);
        rg_model_free(m);
        unlink(path);
    }
}

// auto's rule (session.c): never for one token, on the CPU once the scores [n_kv, T, H] f32 pass 256 MiB, never on a
// device; on and off force it for a batch.
static void test_flash_prompt_rule(void) {
    static const struct {
        rg_flash_attn_mode mode;
        rg_device dev;
        int64_t n_head, T, n_kv;
        bool flash;
    } cases[] = {
        {RG_FLASH_ATTN_AUTO, RG_DEVICE_CPU, 9, 256, 4096, false},  // perplexity's batches: 36 MiB
        {RG_FLASH_ATTN_AUTO, RG_DEVICE_CPU, 9, 4096, 4096, true},  // one batch of 4096: 576 MiB
        {RG_FLASH_ATTN_AUTO, RG_DEVICE_CPU, 32, 512, 4096, false}, // exactly 256 MiB
        {RG_FLASH_ATTN_AUTO, RG_DEVICE_CPU, 32, 513, 4096, true},
        {RG_FLASH_ATTN_AUTO, RG_DEVICE_CUDA, 9, 4096, 4096, false},
        {RG_FLASH_ATTN_AUTO, RG_DEVICE_CPU, 9, 1, 1 << 20, false},
        {RG_FLASH_ATTN_ON, RG_DEVICE_CPU, 9, 2, 2, true},
        {RG_FLASH_ATTN_ON, RG_DEVICE_CPU, 9, 1, 100, false},        // a generated token keeps ATTN_DECODE
        {RG_FLASH_ATTN_OFF, RG_DEVICE_CPU, 9, 4096, 4096, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const bool got = rg_session_flash_prompt(cases[i].mode, cases[i].dev, cases[i].n_head, cases[i].T, cases[i].n_kv);
        RG_CHECK(got == cases[i].flash, "case %zu: mode %d device %d H %lld T %lld n_kv %lld: flash %d, expected %d", i,
                 (int)cases[i].mode, (int)cases[i].dev, (long long)cases[i].n_head, (long long)cases[i].T,
                 (long long)cases[i].n_kv, got, cases[i].flash);
    }
    // on is refused on a device before anything is made there.
    char path[64];
    rg_model *m = tiny(RG_TYPE_F32, false, path);
    RG_REQUIRE(m, "model");
    rg_session *s = NULL;
    rg_error err = {0};
    rg_session_opts so = {.n_ctx = 16, .n_threads = 1, .device = RG_DEVICE_CUDA, .flash_attn = RG_FLASH_ATTN_ON};
    rg_status st = rg_session_create(&s, m, &so, &err);
    RG_CHECK(st == RG_ERR_UNSUPPORTED && !s && strstr(err.msg, "no CUDA kernel"), "flash on a device: %s",
             st ? err.msg : "created");
    rg_session_free(s);
    rg_model_free(m);
    unlink(path);
}

// Generation with the draw on the device (rg_session_eval_sample, src/cuda/sampling.cu) against
// the same session drawing on the CPU from logits read back (RETRO_DEVICE_SAMPLING=0): the same
// tokens for the same seed, with and without RETRO_CUDA_GRAPHS=1; a draw on the device reads no
// logits back (the decode graph's output bytes stay 0).
enum { GEN_N = 20 };
static bool generate_with(rg_model *m, const char *device_sampling, const char *graphs, const rg_sampler_params *p,
                          int32_t *out, bool *on_device, rg_exec_stats *stats) {
    rg_error err = {0};
    if (device_sampling) setenv("RETRO_DEVICE_SAMPLING", device_sampling, 1);
    else unsetenv("RETRO_DEVICE_SAMPLING");
    if (graphs) setenv("RETRO_CUDA_GRAPHS", graphs, 1);
    else unsetenv("RETRO_CUDA_GRAPHS");
    rg_session *s = NULL;
    rg_sampler *smp = NULL;
    rg_session_opts so = {.n_ctx = 64, .n_threads = 2, .device = RG_DEVICE_CUDA};
    rg_status st = rg_session_create(&s, m, &so, &err);
    if (!st) st = rg_sampler_create(&smp, p, (int32_t)m->hp.n_vocab, &err);
    const int32_t prompt[5] = {3, 17, 4, 17, 9};
    for (int i = 0; !st && i < 5; i++) rg_sampler_accept(smp, prompt[i]);
    int32_t id = -1;
    if (!st) st = rg_session_eval_sample(s, prompt, 5, smp, &id, &err);
    for (int i = 0; !st && i < GEN_N; i++) {
        out[i] = id;
        rg_sampler_accept(smp, id);
        if (i + 1 < GEN_N) st = rg_session_eval_sample(s, &id, 1, smp, &id, &err);  // out aliases the input
    }
    RG_CHECK(st == RG_OK, "generation (RETRO_DEVICE_SAMPLING=%s): %s", device_sampling ? device_sampling : "unset", err.msg);
    if (!st)
        RG_CHECK(rg_sampler_step(smp) == GEN_N, "%llu draws counted, %d made", (unsigned long long)rg_sampler_step(smp),
                 GEN_N);
    *on_device = s && rg_session_device_sampling(s);
    if (s) *stats = rg_session_decode_stats(s);
    rg_sampler_free(smp);
    rg_session_free(s);
    return st == RG_OK;
}

static void test_cuda_device_sampling(void) {
    char why[256];
    if (rg_cuda_device_count(why, sizeof why) <= 0) RG_SKIP("no CUDA device: %s", why);
    char path[64];
    rg_model *m = tiny(RG_TYPE_F32, false, path);
    RG_REQUIRE(m, "model");
    const char *env_ds = getenv("RETRO_DEVICE_SAMPLING"), *env_g = getenv("RETRO_CUDA_GRAPHS");
    char *saved_ds = env_ds ? strdup(env_ds) : NULL, *saved_g = env_g ? strdup(env_g) : NULL;
    rg_sampler_params settings[3] = {rg_sampler_defaults(), rg_sampler_defaults(), rg_sampler_defaults()};
    settings[0].repeat_penalty = 1.3f, settings[0].repeat_last_n = 8, settings[0].seed = 3;     // the default chain
    settings[1].temp = 1.0f, settings[1].top_k = 0, settings[1].top_p = 1.0f, settings[1].min_p = 0.0f;  // no filter
    settings[2].temp = 1.5f, settings[2].top_k = 0, settings[2].top_p = 0.9f, settings[2].seed = 77;     // top-p, min-p
    for (int c = 0; c < 3; c++) {
        int32_t dev[GEN_N], host[GEN_N], graphed[GEN_N];
        bool on_dev = false, on_host = true, on_graph = false;
        rg_exec_stats sd, sh, sg;
        if (!generate_with(m, NULL, NULL, &settings[c], dev, &on_dev, &sd) ||
            !generate_with(m, "0", NULL, &settings[c], host, &on_host, &sh) ||
            !generate_with(m, "1", "1", &settings[c], graphed, &on_graph, &sg))
            break;
        RG_CHECK(on_dev && !on_host && on_graph, "device sampling: default %d, =0 %d, =1 %d", on_dev, on_host, on_graph);
        int differ = 0, changes = 0;
        for (int i = 0; i < GEN_N; i++) differ += dev[i] != host[i] || dev[i] != graphed[i], changes += i && dev[i] != dev[i - 1];
        printf("    settings %d: tokens", c);
        for (int i = 0; i < GEN_N; i++) printf(" %d", (int)dev[i]);
        printf("; decode output bytes %llu on the device, %llu on the host; %llu graph replays\n",
               (unsigned long long)sd.output_bytes, (unsigned long long)sh.output_bytes,
               (unsigned long long)sg.graph_launches);
        RG_CHECK(differ == 0, "settings %d: %d of %d tokens differ between device and host sampling", c, differ, GEN_N);
        RG_CHECK(changes > 2, "settings %d: the tokens barely change (%d)", c, changes);
        RG_CHECK(sd.output_bytes == 0 && sg.output_bytes == 0, "device sampling read %llu bytes of logits",
                 (unsigned long long)sd.output_bytes);
        RG_CHECK(sh.output_bytes == (uint64_t)(GEN_N - 1) * (uint64_t)m->hp.n_vocab * sizeof(float),
                 "host sampling read %llu bytes of logits", (unsigned long long)sh.output_bytes);
        RG_CHECK(sg.graph_launches == GEN_N - 2, "graphs: %llu replays", (unsigned long long)sg.graph_launches);
    }
    // a sampler for another vocabulary is refused before anything runs
    unsetenv("RETRO_DEVICE_SAMPLING");
    rg_session *s = NULL;
    rg_sampler *wrong = NULL;
    rg_error err = {0};
    rg_session_opts so = {.n_ctx = 16, .n_threads = 1, .device = RG_DEVICE_CUDA};
    const rg_sampler_params dp = rg_sampler_defaults();
    const int32_t one = 1;
    int32_t got = 0;
    RG_REQUIRE(rg_session_create(&s, m, &so, &err) == RG_OK && rg_sampler_create(&wrong, &dp, 7, &err) == RG_OK, "%s",
               err.msg);
    rg_status st = rg_session_eval_sample(s, &one, 1, wrong, &got, &err);
    RG_CHECK(st == RG_ERR_ARG && got == -1 && rg_session_n_past(s) == 0 && strstr(err.msg, "made for 7 tokens"), "%s",
             st ? err.msg : "accepted");
    rg_sampler_free(wrong);
    rg_session_free(s);
    s = NULL;
    // a value that is neither 0 nor 1 is refused, naming the variable
    setenv("RETRO_DEVICE_SAMPLING", "yes", 1);
    st = rg_session_create(&s, m, &so, &err);
    RG_CHECK(st == RG_ERR_ARG && !s && strstr(err.msg, "RETRO_DEVICE_SAMPLING=yes"), "%s", st ? err.msg : "accepted");
    rg_session_free(s);
    if (saved_ds) setenv("RETRO_DEVICE_SAMPLING", saved_ds, 1);
    else unsetenv("RETRO_DEVICE_SAMPLING");
    if (saved_g) setenv("RETRO_CUDA_GRAPHS", saved_g, 1);
    else unsetenv("RETRO_CUDA_GRAPHS");
    free(saved_ds), free(saved_g);
    rg_model_free(m);
    unlink(path);
}

static const rg_test_case cases[] = {
    RG_TEST(test_loader_errors),
    RG_TEST(test_f32),
    RG_TEST(test_cuda_f32),
    RG_TEST(test_cuda_f16_tied),
    RG_TEST(test_cuda_decode_graph_replayed),
    RG_TEST(test_cuda_device_sampling),
    RG_TEST(test_f16_tied),
    RG_TEST(test_bf16),
    RG_TEST(test_bf16_prompt_tiles_cache),
    RG_TEST(test_q4_0_prompt_matches_decode),
    RG_TEST(test_lfm2),
    RG_TEST(test_mamba2),
    RG_TEST(test_cuda_lfm2),
    RG_TEST(test_cuda_mamba2),
    RG_TEST(test_flash_prompt),
    RG_TEST(test_flash_prompt_rule),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
