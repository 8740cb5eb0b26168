// test_session_rewind.c - rg_session_rewind on attention models (llama, qwen2; F32 and Q8_0), on the CPU
// and on the CUDA device (a GPU, or the host execution of the CUDA code with RETRO_CUDA_HOST=1; skipped,
// and counted so, without one). Each case evaluates a plan of batches and single tokens, rewinds to a
// position p, and continues (a batch of 3 with every logit, then 2 single tokens). Two proofs, each on
// the logits (bit for bit) and on the state file after the continuation (infer/session_state.h, byte
// for byte):
//   - nothing of the dropped tokens survives: a session that made the same evaluations with other tokens
//     from p on, rewound to p, continues with the same bits;
//   - where p ends an evaluation (a whole batch or single tokens rolled back): the bits of a fresh session
//     that made the evaluations up to p. Inside a batch a fresh session cannot be that reference: a batch
//     cut at p is a batch of another size, and the kernels' choice by size (dot products or the GEMM,
//     OpenBLAS for a few rows, flash attention) gives other bits for the same tokens (measured: they differ);
//     test_session_exact has that reference for exact batches (rg_session_eval_exact).
//   - inside a batch; inside single tokens that followed a batch; a whole batch rolled back; back across
//     a batch into the one before; to 0; to n_past (nothing to do); after the session was saved and
//     loaded into another one;
//   - refused, changing nothing (the continuation then gives the bits of a session never asked): past the
//     end, below 0; a recurrent model (lfm2, mamba2) to 0 < p < n_past without snapshots kept
//     (RETRO_RECURRENT_ROLLBACK off, the default), while its rewind to 0 starts over.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/cuda.h"
#include "infer/session.h"
#include "infer/session_state.h"
#include "rg_test.h"
#include "session_fixture.h"

enum { N_IDS = 16, N_CONT = 5, N_CTX = 64, MAX_CHUNKS = 8 };

static int32_t ids[N_IDS], cont[N_CONT];

static rg_model *tiny_model(const char *arch, uint32_t type, char *path) {
    rg_model *m = sf_tiny_model(arch, type, 11, true, path, "rewind");
    if (!m) return NULL;
    const int64_t V = m->hp.n_vocab;
    for (int i = 0; i < N_IDS; i++) ids[i] = (int32_t)((i * 37 + 11) % V);
    for (int i = 0; i < N_CONT; i++) cont[i] = (int32_t)((i * 29 + 3) % V);
    return m;
}

static rg_session *new_session(const rg_model *m, rg_device device) {
    rg_session *s = NULL;
    rg_error err = {0};
    rg_session_opts so = {.n_ctx = N_CTX, .n_threads = 2, .n_batch = 16, .device = device};
    if (rg_session_create(&s, m, &so, &err)) printf("    session: %s\n", err.msg);
    return s;
}

// The plan's evaluations (chunk sizes over tok, in order), cut at position cut (-1: whole).
static bool run_plan_of(rg_session *s, const int32_t *tok, const int *chunks, int n_chunks, int64_t cut) {
    rg_error err = {0};
    int64_t at = 0;
    for (int c = 0; c < n_chunks; c++) {
        int64_t n = chunks[c];
        if (cut >= 0 && at + n > cut) n = cut - at;
        if (n <= 0) break;
        if (rg_session_eval(s, tok + at, n, NULL, 0, &err)) {
            printf("    plan: %s\n", err.msg);
            return false;
        }
        at += n;
    }
    return true;
}

static bool run_plan(rg_session *s, const int *chunks, int n_chunks, int64_t cut) {
    return run_plan_of(s, ids, chunks, n_chunks, cut);
}

// Whether pos ends one of the plan's evaluations (or is 0).
static bool at_boundary(const int *chunks, int n_chunks, int64_t pos) {
    int64_t at = 0;
    for (int c = 0; c < n_chunks && at < pos; c++) at += chunks[c];
    return at == pos;
}

// The continuation: 3 tokens in one batch (every logit), then 2 one at a time; logits into out[V * N_CONT].
static bool eval_cont(rg_session *s, float *out) { return sf_eval_cont(s, cont, N_CONT, 3, out); }

typedef struct rewind_case {
    const char *what;
    int chunks[MAX_CHUNKS];
    int n_chunks;
    int64_t pos;
    bool via_file;  // saved after the plan, loaded into a fresh session, rewound there
} rewind_case;

static const rewind_case CASES[] = {
    {"inside a batch", {10}, 1, 6, false},
    {"inside single tokens after a batch", {8, 1, 1, 1}, 4, 9, false},
    {"a whole batch rolled back", {8, 5}, 2, 8, false},
    {"back across a batch into the one before", {8, 5}, 2, 3, false},
    {"to 0", {6, 1}, 2, 0, false},
    {"to n_past (nothing to do)", {6, 1}, 2, 7, false},
    {"after a save and a load, inside a batch", {8, 1, 1}, 3, 7, true},
    {"after a save and a load, a single token", {8, 1, 1}, 3, 9, true},
};

static void check_cases(const char *arch, uint32_t type, rg_device device) {
    char path[64];
    rg_model *m = tiny_model(arch, type, path);
    RG_REQUIRE(m, "model");
    const int64_t V = m->hp.n_vocab;
    float *got = malloc(sizeof(float) * (size_t)(V * N_CONT)), *want = malloc(sizeof(float) * (size_t)(V * N_CONT));
    int32_t other[N_IDS];
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        const rewind_case *c = &CASES[k];
        for (int i = 0; i < N_IDS; i++) other[i] = i < c->pos ? ids[i] : (int32_t)((ids[i] + 101) % V);
        const bool boundary = at_boundary(c->chunks, c->n_chunks, c->pos);
        rg_session *s = new_session(m, device), *alt = new_session(m, device), *loaded = NULL, *alt_loaded = NULL;
        rg_session *ref = boundary ? new_session(m, device) : NULL;
        rg_error err = {0};
        bool ok = s && alt && (ref || !boundary) && run_plan(s, c->chunks, c->n_chunks, -1) &&
                  run_plan_of(alt, other, c->chunks, c->n_chunks, -1);
        if (ok && c->via_file) {  // both saved, loaded into fresh sessions, rewound there
            char file[64] = "/tmp/rg_test_rewind_fXXXXXX";
            close(mkstemp(file));
            loaded = new_session(m, device), alt_loaded = new_session(m, device);
            ok = loaded && alt_loaded && !rg_session_state_save(s, file, &err) && !rg_session_state_load(loaded, file, &err) &&
                 !rg_session_state_save(alt, file, &err) && !rg_session_state_load(alt_loaded, file, &err);
            unlink(file);
            if (!ok) printf("    %s: %s\n", c->what, err.msg);
        }
        rg_session *r = loaded ? loaded : s, *ra = alt_loaded ? alt_loaded : alt;
        if (ok && (rg_session_rewind(r, c->pos, &err) || rg_session_rewind(ra, c->pos, &err))) {
            printf("    %s: rewind: %s\n", c->what, err.msg);
            ok = false;
        }
        float *alt_lg = malloc(sizeof(float) * (size_t)(V * N_CONT));
        ok = ok && alt_lg && rg_session_n_past(r) == c->pos && eval_cont(r, got) && eval_cont(ra, alt_lg);
        const bool same_alt = ok && !memcmp(got, alt_lg, sizeof(float) * (size_t)(V * N_CONT)) && sf_same_state(r, ra);
        bool same_ref = true;
        if (ok && boundary)
            same_ref = run_plan(ref, c->chunks, c->n_chunks, c->pos) && eval_cont(ref, want) &&
                       !memcmp(got, want, sizeof(float) * (size_t)(V * N_CONT)) && sf_same_state(r, ref);
        printf("    %s %s%s, %s, to %lld: %s; %s\n", arch, rg_type_get(type)->name, device == RG_DEVICE_CUDA ? " (cuda)" : "",
               c->what, (long long)c->pos, !ok ? "did not run" : same_alt ? "other dropped tokens: the same bits" : "other dropped tokens: DIFFER",
               !boundary ? "(inside a batch: no fresh reference)" : same_ref ? "a fresh session: the same bits" : "a fresh session: DIFFERS");
        RG_CHECK(ok && same_alt, "%s %s: %s: the dropped tokens changed the continuation", arch, rg_type_get(type)->name, c->what);
        RG_CHECK(!ok || same_ref, "%s %s: %s: not the bits of a fresh session that stopped at %lld", arch,
                 rg_type_get(type)->name, c->what, (long long)c->pos);
        free(alt_lg);
        rg_session_free(s), rg_session_free(alt), rg_session_free(ref), rg_session_free(loaded), rg_session_free(alt_loaded);
    }
    // Refusals: past the end, below 0; the session continues as if never asked.
    rg_session *s = new_session(m, device), *ref = new_session(m, device);
    const int chunk[1] = {7};
    if (s && ref && run_plan(s, chunk, 1, -1) && run_plan(ref, chunk, 1, -1)) {
        rg_error err = {0};
        RG_CHECK(rg_session_rewind(s, 8, &err) == RG_ERR_ARG && strstr(err.msg, "8") && strstr(err.msg, "7"),
                 "a rewind past the end: '%s'", err.msg);
        printf("    past the end: %s\n", err.msg);
        RG_CHECK(rg_session_rewind(s, -1, &err) == RG_ERR_ARG, "a rewind below 0 was not refused");
        RG_CHECK(rg_session_n_past(s) == 7, "a refused rewind moved n_past to %lld", (long long)rg_session_n_past(s));
        RG_CHECK(eval_cont(s, got) && eval_cont(ref, want) && !memcmp(got, want, sizeof(float) * (size_t)(V * N_CONT)),
                 "the continuation after refused rewinds differs from a session never asked");
    }
    rg_session_free(s), rg_session_free(ref);
    free(got), free(want);
    rg_model_free(m);
    unlink(path);
}

// A recurrent model without snapshots: refused inside the sequence, changing nothing; to 0 it starts over.
static void check_recurrent_refused(const char *arch) {
    char path[64];
    rg_model *m = tiny_model(arch, RG_TYPE_F32, path);
    RG_REQUIRE(m, "model");
    const char *env = getenv("RETRO_RECURRENT_ROLLBACK");
    char *saved = env ? strdup(env) : NULL;
    unsetenv("RETRO_RECURRENT_ROLLBACK");  // off: the default
    const int64_t V = m->hp.n_vocab;
    float *got = malloc(sizeof(float) * (size_t)(V * N_CONT)), *want = malloc(sizeof(float) * (size_t)(V * N_CONT));
    rg_session *s = new_session(m, RG_DEVICE_CPU), *ref = new_session(m, RG_DEVICE_CPU);
    const int chunk[2] = {8, 1};
    rg_error err = {0};
    if (s && ref && run_plan(s, chunk, 2, -1) && run_plan(ref, chunk, 2, -1)) {
        const rg_status st = rg_session_rewind(s, 4, &err);
        printf("    %s, rewind to 4 of 9: %s\n", arch, err.msg);
        RG_CHECK(st == RG_ERR_UNSUPPORTED && strstr(err.msg, "rewind"), "%s: rewind inside the sequence: status %d", arch,
                 (int)st);
        RG_CHECK(rg_session_n_past(s) == 9 && eval_cont(s, got) && eval_cont(ref, want) &&
                     !memcmp(got, want, sizeof(float) * (size_t)(V * N_CONT)),
                 "%s: the refused rewind changed the session", arch);
        RG_CHECK(rg_session_rewind(s, 0, &err) == RG_OK, "%s: rewind to 0: %s", arch, err.msg);
        rg_session *fresh = new_session(m, RG_DEVICE_CPU);
        RG_CHECK(fresh && eval_cont(s, got) && eval_cont(fresh, want) &&
                     !memcmp(got, want, sizeof(float) * (size_t)(V * N_CONT)),
                 "%s: after a rewind to 0, not the bits of a fresh session", arch);
        rg_session_free(fresh);
    }
    if (saved) setenv("RETRO_RECURRENT_ROLLBACK", saved, 1);
    free(saved);
    rg_session_free(s), rg_session_free(ref);
    free(got), free(want);
    rg_model_free(m);
    unlink(path);
}

static bool have_cuda(char *why) { return rg_cuda_device_count(why, 256) > 0; }

#define CASES_ON(name, arch, type) \
    static void test_##name(void) { check_cases(arch, type, RG_DEVICE_CPU); }
#define CASES_ON_CUDA(name, arch, type)                                                                \
    static void test_cuda_##name(void) {                                                               \
        char why[256];                                                                                 \
        if (!have_cuda(why)) RG_SKIP("no CUDA device: %s", why);                                       \
        check_cases(arch, type, RG_DEVICE_CUDA);                                                       \
    }
CASES_ON(llama_f32, "llama", RG_TYPE_F32)
CASES_ON(llama_q8_0, "llama", RG_TYPE_Q8_0)
CASES_ON(qwen2_f32, "qwen2", RG_TYPE_F32)
CASES_ON(qwen2_q8_0, "qwen2", RG_TYPE_Q8_0)
CASES_ON_CUDA(llama_f32, "llama", RG_TYPE_F32)
CASES_ON_CUDA(qwen2_q8_0, "qwen2", RG_TYPE_Q8_0)

static void test_lfm2_refused_without_snapshots(void) { check_recurrent_refused("lfm2"); }
static void test_mamba2_refused_without_snapshots(void) { check_recurrent_refused("mamba2"); }

static const rg_test_case cases[] = {
    RG_TEST(test_llama_f32),      RG_TEST(test_llama_q8_0),      RG_TEST(test_qwen2_f32),
    RG_TEST(test_qwen2_q8_0),     RG_TEST(test_lfm2_refused_without_snapshots),
    RG_TEST(test_mamba2_refused_without_snapshots),
    // on the device two of the four (the host execution takes about 35 s a fixture)
    RG_TEST(test_cuda_llama_f32), RG_TEST(test_cuda_qwen2_q8_0),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
