// test_session_exact.c - rg_session_eval_exact: a batch whose every token has the bits of a single-token
// step (the logits, the KV cache, the recurrent state), on every tiny architecture (llama, qwen2, qwen3,
// lfm2, mamba2, gemma2, gemma3) in F32, F16 and three quantized types, on the CPU and on the CUDA device
// (a GPU, or the host execution of the CUDA code with RETRO_CUDA_HOST=1; skipped, and counted so,
// without one). Per fixture:
//   - the reference session: a prompt batch, then the tokens one at a time (rg_session_eval, n = 1);
//   - the exact session: the same prompt batch, the same tokens as one rg_session_eval_exact batch:
//     every logit the reference's, bit for bit; then two single tokens on both: the same bits, and the
//     state files (infer/session_state.h) the same bytes;
//   - a rewind inside the exact batch (RETRO_RECURRENT_ROLLBACK=auto, so lfm2 and mamba2 keep the batch's
//     snapshots) and a continuation: the bits of the reference cut at the same position, a rewind inside
//     a batch with a fresh session as its reference (test_session_rewind cannot have one for prompt
//     batches, whose kernels choose by batch size);
//   - a batch of 40 (cut into exact batches of 32 and 8): the bits of 40 single tokens.
// The control: rg_session_eval's prompt batch of the same tokens is printed beside it (it may differ).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/cuda.h"
#include "infer/session.h"
#include "infer/session_state.h"
#include "rg_test.h"
#include "session_fixture.h"

enum { N_PROMPT = 10, N_BATCH = 7, N_CONT = 2, N_LONG = 40, N_CTX = 96 };

static rg_session *new_session(const rg_model *m, rg_device device) {
    rg_session *s = NULL;
    rg_error err = {0};
    rg_session_opts so = {.n_ctx = N_CTX, .n_threads = 2, .n_batch = 64, .device = device};
    if (rg_session_create(&s, m, &so, &err)) printf("    session: %s\n", err.msg);
    return s;
}

// tok[0..n) one at a time, each token's logits into out[V * i].
static bool singles(rg_session *s, const int32_t *tok, int n, float *out) {
    const int64_t V = rg_session_model(s)->hp.n_vocab;
    rg_error err = {0};
    for (int i = 0; i < n; i++)
        if (rg_session_eval(s, &tok[i], 1, out ? out + (size_t)i * V : NULL, 0, &err)) {
            printf("    single token: %s\n", err.msg);
            return false;
        }
    return true;
}

static bool eval_batch(rg_session *s, const int32_t *tok, int n, float *out, bool exact) {
    rg_error err = {0};
    rg_status st = exact ? rg_session_eval_exact(s, tok, n, out, &err) : rg_session_eval(s, tok, n, out, 1, &err);
    if (st) printf("    batch of %d: %s\n", n, err.msg);
    return !st;
}

// Largest |a - b| over n floats (the control's report).
static double max_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        double x = (double)a[i] - (double)b[i];
        if (x < 0) x = -x;
        if (x > d) d = x;
    }
    return d;
}

static void check_exact(const char *arch, uint32_t type, rg_device device) {
    char path[64];
    rg_model *m = sf_tiny_model(arch, type, 23, true, path, "exact");
    RG_REQUIRE(m, "model");
    const char *tn = rg_type_get(type)->name, *dev = device == RG_DEVICE_CUDA ? " (cuda)" : "";
    const int64_t V = m->hp.n_vocab;
    int32_t tok[N_PROMPT + N_LONG + N_CONT];
    for (int i = 0; i < N_PROMPT + N_LONG + N_CONT; i++) tok[i] = (int32_t)((i * 37 + 5) % V);
    const int32_t *prompt = tok, *batch = tok + N_PROMPT, *cont = tok + N_PROMPT + N_BATCH;
    const size_t nb = (size_t)(V * N_BATCH), nc = (size_t)(V * N_CONT), nl = (size_t)(V * N_LONG);
    float *want = malloc(sizeof(float) * nb), *got = malloc(sizeof(float) * nb), *prompt_lg = malloc(sizeof(float) * nb);
    float *want_c = malloc(sizeof(float) * nc), *got_c = malloc(sizeof(float) * nc);
    float *want_l = malloc(sizeof(float) * nl), *got_l = malloc(sizeof(float) * nl);
    RG_REQUIRE(want && got && prompt_lg && want_c && got_c && want_l && got_l, "memory");

    // one batch of N_BATCH against single tokens, then a continuation of single tokens
    rg_session *ref = new_session(m, device), *ex = new_session(m, device), *pr = new_session(m, device);
    bool ok = ref && ex && pr && eval_batch(ref, prompt, N_PROMPT, NULL, false) && singles(ref, batch, N_BATCH, want) &&
              eval_batch(ex, prompt, N_PROMPT, NULL, false) && eval_batch(ex, batch, N_BATCH, got, true) &&
              eval_batch(pr, prompt, N_PROMPT, NULL, false) && eval_batch(pr, batch, N_BATCH, prompt_lg, false);
    const bool same = ok && !memcmp(want, got, sizeof(float) * nb);
    ok = ok && singles(ref, cont, N_CONT, want_c) && singles(ex, cont, N_CONT, got_c);
    const bool same_c = ok && !memcmp(want_c, got_c, sizeof(float) * nc), same_s = ok && sf_same_state(ref, ex);
    printf("    %s %s%s: exact batch of %d %s, continuation %s, state %s (a prompt batch: max |diff| %.3g)\n", arch, tn,
           dev, N_BATCH, same ? "= single tokens" : "DIFFERS", same_c ? "the same bits" : "DIFFERS",
           same_s ? "the same bytes" : "DIFFERS", ok ? max_diff(want, prompt_lg, nb) : -1.0);
    RG_CHECK(ok, "%s %s%s: did not run", arch, tn, dev);
    RG_CHECK(!ok || same, "%s %s%s: the exact batch's logits are not the single tokens' bits", arch, tn, dev);
    RG_CHECK(!ok || (same_c && same_s), "%s %s%s: after the exact batch the session is not the single tokens'", arch,
             tn, dev);
    rg_session_free(ref), rg_session_free(ex), rg_session_free(pr);

    // a rewind inside the exact batch, then single tokens: the bits of single tokens cut there
    const int cut = 3;  // keep the batch's first 3 tokens
    const int32_t other[N_CONT] = {(int32_t)(7 % V), (int32_t)(19 % V)};
    ref = new_session(m, device), ex = new_session(m, device);
    rg_error err = {0};
    ok = ref && ex && eval_batch(ref, prompt, N_PROMPT, NULL, false) && singles(ref, batch, cut, NULL) &&
         singles(ref, other, N_CONT, want_c) && eval_batch(ex, prompt, N_PROMPT, NULL, false) &&
         eval_batch(ex, batch, N_BATCH, NULL, true);
    if (ok && rg_session_rewind(ex, N_PROMPT + cut, &err)) {
        printf("    rewind: %s\n", err.msg);
        ok = false;
    }
    ok = ok && singles(ex, other, N_CONT, got_c);
    const bool same_r = ok && !memcmp(want_c, got_c, sizeof(float) * nc) && sf_same_state(ref, ex);
    printf("    %s %s%s: rewind to %d inside the exact batch: %s\n", arch, tn, dev, N_PROMPT + cut,
           same_r ? "the bits of single tokens cut there" : "DIFFERS");
    RG_CHECK(same_r, "%s %s%s: a rewind inside an exact batch is not a fresh session cut there", arch, tn, dev);
    rg_session_free(ref), rg_session_free(ex);

    // longer than one exact batch (32 + 8)
    ref = new_session(m, device), ex = new_session(m, device);
    ok = ref && ex && eval_batch(ref, prompt, N_PROMPT, NULL, false) && singles(ref, batch, N_LONG, want_l) &&
         eval_batch(ex, prompt, N_PROMPT, NULL, false) && eval_batch(ex, batch, N_LONG, got_l, true);
    const bool same_l = ok && !memcmp(want_l, got_l, sizeof(float) * nl) && sf_same_state(ref, ex);
    printf("    %s %s%s: exact call of %d: %s\n", arch, tn, dev, N_LONG, same_l ? "= single tokens" : "DIFFERS");
    RG_CHECK(same_l, "%s %s%s: an exact call of %d tokens is not single tokens' bits", arch, tn, dev, N_LONG);
    rg_session_free(ref), rg_session_free(ex);

    free(want), free(got), free(prompt_lg), free(want_c), free(got_c), free(want_l), free(got_l);
    rg_model_free(m);
    unlink(path);
}

static const uint32_t TYPES[] = {RG_TYPE_F32, RG_TYPE_F16, RG_TYPE_Q4_0, RG_TYPE_Q8_0, RG_TYPE_Q4_K};

static void check_arch(const char *arch) {
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++) check_exact(arch, TYPES[i], RG_DEVICE_CPU);
}

static bool have_cuda(char *why) { return rg_cuda_device_count(why, 256) > 0; }

#define ARCH(name)                                       \
    static void test_##name(void) { check_arch(#name); }
ARCH(llama)
ARCH(qwen2)
ARCH(qwen3)
ARCH(lfm2)
ARCH(mamba2)
ARCH(gemma2)
ARCH(gemma3)

#define ON_CUDA(name, arch, type)                                      \
    static void test_cuda_##name(void) {                               \
        char why[256];                                                 \
        if (!have_cuda(why)) RG_SKIP("no CUDA device: %s", why);       \
        check_exact(arch, type, RG_DEVICE_CUDA);                       \
    }
ON_CUDA(llama_f32, "llama", RG_TYPE_F32)
ON_CUDA(qwen2_q8_0, "qwen2", RG_TYPE_Q8_0)
ON_CUDA(lfm2_f32, "lfm2", RG_TYPE_F32)
ON_CUDA(mamba2_q4_0, "mamba2", RG_TYPE_Q4_0)

static const rg_test_case cases[] = {
    RG_TEST(test_llama), RG_TEST(test_qwen2), RG_TEST(test_qwen3), RG_TEST(test_lfm2), RG_TEST(test_mamba2),
    RG_TEST(test_gemma2), RG_TEST(test_gemma3),
    RG_TEST(test_cuda_llama_f32), RG_TEST(test_cuda_qwen2_q8_0), RG_TEST(test_cuda_lfm2_f32),
    RG_TEST(test_cuda_mamba2_q4_0),
    {0},
};

int main(int argc, char **argv) {
    setenv("RETRO_RECURRENT_ROLLBACK", "auto", 1);  // the recurrent models keep the batch's snapshots
    return rg_test_run(argc, argv, cases);
}
