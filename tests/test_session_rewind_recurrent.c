// test_session_rewind_recurrent.c - exact rewind of recurrent models (infer/session_snap.c) with
// RETRO_RECURRENT_ROLLBACK=auto, on the tiny lfm2 (short conv + attention) and mamba2 (SSM) fixtures, F32 and
// Q8_0, on the CPU:
//   - each case of the table evaluates calls (batches, single tokens), rewinds to a position, and continues
//     with the same tokens (a batch of 3 with every logit, then single tokens); a fresh session that made the
//     same calls cut at that position and the same continuation gives the same logits (memcmp), and the two
//     sessions' state files (rg_session_state_save) after it are byte for byte the same
//   - rewinds in a row, a rewind into a batch evaluated after a rewind, rg_session_truncate
//   - refusals, each leaving the session as it was (its continuation gives the bits of a session that never
//     tried): a position no snapshot holds (names the oldest kept), the default off, a state file loaded (its
//     snapshots forgotten; a batch evaluated after the load is kept again), and RETRO_RECURRENT_ROLLBACK=yes
//     at rg_session_create (names the variable and the value)
//   - the snapshot memory: rg_session_snapshot_bytes against its formula, and that formula for LFM2-350M's
//     shape (model/tiny.c's lfm2-350m) and a draft of 16 tokens, against the recurrent state of 16 positions.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/cuda.h"
#include "infer/session.h"
#include "infer/session_state.h"
#include "model/arch.h"
#include "model/quantize.h"
#include "model/tiny.h"
#include "rg_test.h"
#include "session_fixture.h"

enum { N_IDS = 40, N_CTX = 64, N_BATCH = 8, N_CONT = 5, MAX_CALLS = 12, RING = 16 };

static int32_t ids[N_IDS], cont_ids[N_CONT];
static rg_device device = RG_DEVICE_CPU;  // the sessions' (each test sets it)

static void make_ids(int64_t V) {
    for (int i = 0; i < N_IDS; i++) ids[i] = (int32_t)((i * 37 + 11) % V);
    for (int i = 0; i < N_CONT; i++) cont_ids[i] = (int32_t)((i * 29 + 3) % V);
}

static rg_model *tiny_model(const char *arch, uint32_t type, char *path) {
    return sf_tiny_model(arch, type, 7, true, path, "rewind_rec");
}

// A session made with RETRO_RECURRENT_ROLLBACK=mode (NULL: unset).
static rg_session *new_session(const rg_model *m, const char *mode, rg_error *err) {
    if (mode) setenv("RETRO_RECURRENT_ROLLBACK", mode, 1);
    else unsetenv("RETRO_RECURRENT_ROLLBACK");
    rg_session *s = NULL;
    rg_session_opts so = {.n_ctx = N_CTX, .n_threads = 2, .n_batch = N_BATCH, .device = device};
    if (rg_session_create(&s, m, &so, err)) s = NULL;
    unsetenv("RETRO_RECURRENT_ROLLBACK");
    return s;
}

// The calls: sizes of rg_session_eval calls over ids[0..), 0-terminated; stopped at `upto` tokens (the last
// call cut there: the same evaluations cut at a position).
static bool eval_calls(rg_session *s, const int *calls, int64_t upto) {
    rg_error err = {0};
    int64_t at = 0;
    for (int i = 0; calls[i] && at < upto; i++) {
        int64_t n = calls[i] < upto - at ? calls[i] : upto - at;
        if (rg_session_eval(s, ids + at, n, NULL, 0, &err)) {
            printf("    call %d (%lld tokens at %lld): %s\n", i, (long long)n, (long long)at, err.msg);
            return false;
        }
        at += n;
    }
    return true;
}

static int64_t calls_total(const int *calls) {
    int64_t n = 0;
    for (int i = 0; calls[i]; i++) n += calls[i];
    return n;
}

// The continuation: 3 tokens in one batch (every logit), then single tokens; logits into out [V, N_CONT].
static bool eval_cont(rg_session *s, float *out) {
    const int64_t V = rg_session_model(s)->hp.n_vocab;
    rg_error err = {0};
    rg_status st = rg_session_eval(s, cont_ids, 3, out, 1, &err);
    for (int i = 3; !st && i < N_CONT; i++) st = rg_session_eval(s, &cont_ids[i], 1, out + (size_t)i * V, 0, &err);
    if (st) printf("    continuation: %s\n", err.msg);
    return !st;
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)size + 1);
    *n = b ? fread(b, 1, (size_t)size, f) : 0;
    fclose(f);
    return b;
}

// Whether a and b continue alike: the same continuation logits (memcmp) and then the same state files.
static bool same_continuation(rg_session *a, rg_session *b, const char *what) {
    const int64_t V = rg_session_model(a)->hp.n_vocab;
    float *la = calloc((size_t)(V * N_CONT), sizeof(float)), *lb = calloc((size_t)(V * N_CONT), sizeof(float));
    bool ok = la && lb && eval_cont(a, la) && eval_cont(b, lb);
    int64_t first = -1;
    for (int64_t i = 0; ok && i < V * N_CONT && first < 0; i++)
        if (memcmp(&la[i], &lb[i], sizeof(float))) first = i;
    RG_CHECK(ok && first < 0, "%s: continuation logit %lld (token %lld) is %.9g, the fresh session's %.9g", what,
             (long long)first, first >= 0 ? (long long)(first / V) : -1LL, first >= 0 ? la[first] : 0.0,
             first >= 0 ? lb[first] : 0.0);
    char pa[64] = "/tmp/rg_test_rewind_aXXXXXX", pb[64] = "/tmp/rg_test_rewind_bXXXXXX";
    close(mkstemp(pa));
    close(mkstemp(pb));
    rg_error err = {0};
    bool saved = ok && !rg_session_state_save(a, pa, &err) && !rg_session_state_save(b, pb, &err);
    RG_CHECK(!ok || saved, "%s: save: %s", what, err.msg);
    size_t na = 0, nb = 0;
    unsigned char *fa = saved ? read_all(pa, &na) : NULL, *fb = saved ? read_all(pb, &nb) : NULL;
    const bool same_files = fa && fb && na == nb && !memcmp(fa, fb, na);
    RG_CHECK(!saved || same_files, "%s: the state files after the continuation differ (%zu and %zu bytes)", what, na, nb);
    free(fa), free(fb), free(la), free(lb);
    unlink(pa), unlink(pb);
    return ok && first < 0 && same_files;
}

// The rewinds that must work: the calls, then rg_session_rewind(pos). n_batch is 8: a call of more is split, and
// only its last batch is kept. f32_only: the fresh session's call cut at pos is a batch of 2 or 3 tokens, whose
// products of quantized weights take the dot products on Q8_0 activations (ops_matmul.c: N < 4), where the rewound
// session's batch took the GEMM: without AVX-512 VNNI or AMX those are other bits, the kernels' and not the
// rewind's. Likewise F32 weights take the dot products below N = 8 and the SGEMM from 8, whose bits differ: no
// case here rewinds a batch of 8 or more to fewer than 8 of its tokens (n_batch is 8: a split call's first batch
// is never the kept one).
typedef struct rewind_case {
    const char *name;
    int calls[MAX_CALLS];
    int64_t pos;
    bool f32_only;
} rewind_case;

static const rewind_case rewind_cases[] = {
    {"after a batch", {7}, 4, false},
    {"after a batch, to its second token", {7}, 2, true},
    {"single tokens after a batch, back into the batch", {6, 1, 1, 1}, 4, false},
    {"single tokens after a batch, back to the batch's end", {6, 1, 1, 1}, 6, false},
    {"single tokens after a batch, back among them (ring)", {6, 1, 1, 1}, 8, false},
    {"a whole batch rolled back", {5, 6}, 5, false},
    {"a whole batch after single tokens rolled back", {3, 1, 1, 6}, 5, false},
    {"a split call, into its last batch", {14}, 12, false},
    {"a split call, to its last batch's second token", {12}, 10, true},
    {"single tokens only (ring)", {1, 1, 1, 1, 1}, 2, false},
};

static void check_rewinds(const rg_model *m, const char *tag, bool quantized) {
    for (size_t i = 0; i < sizeof rewind_cases / sizeof *rewind_cases; i++) {
        const rewind_case *c = &rewind_cases[i];
        if (c->f32_only && quantized) continue;
        rg_error err = {0};
        rg_session *a = new_session(m, "auto", &err), *b = a ? new_session(m, "auto", &err) : NULL;
        RG_CHECK(a && b, "%s %s: session: %s", tag, c->name, err.msg);
        bool ok = a && b && eval_calls(a, c->calls, N_IDS) && eval_calls(b, c->calls, c->pos);
        rg_status st = ok ? rg_session_rewind(a, c->pos, &err) : RG_ERR_ARG;
        RG_CHECK(!ok || st == RG_OK, "%s %s: rewind to %lld of %lld refused: %s", tag, c->name, (long long)c->pos,
                 (long long)calls_total(c->calls), err.msg);
        ok = ok && !st && rg_session_n_past(a) == c->pos && rg_session_n_past(b) == c->pos;
        char what[160];
        snprintf(what, sizeof what, "%s %s (rewind %lld -> %lld)", tag, c->name, (long long)calls_total(c->calls),
                 (long long)c->pos);
        if (ok && same_continuation(a, b, what)) printf("    %-60s logits and state file equal\n", what);
        rg_session_free(a);
        rg_session_free(b);
    }
}

// Rewinds in a row, and rg_session_truncate (which restores from the snapshots as a rewind does):
//   - calls {7, 1, 1}, rewind to 8 (the ring), then to 4 (the batch, still kept): a fresh {4}
//   - calls {7}, rewind to 4, a batch of 7 other tokens, rewind to 9 (into that batch): a fresh {4} then those 5
// (the batches' sizes stay on one side of the products' kernel choice, N < 8 for F32 and N >= 4 for Q8_0 weights:
// see rewind_case's f32_only)
//   - calls {6, 1, 1, 1}, rg_session_truncate to 4: a fresh {4}
static void check_sequences(const rg_model *m, const char *tag) {
    static const int c711[MAX_CALLS] = {7, 1, 1}, c7[MAX_CALLS] = {7}, c6111[MAX_CALLS] = {6, 1, 1, 1};
    char what[160];
    rg_error err = {0};
    rg_session *a = new_session(m, "auto", &err), *b = new_session(m, "auto", &err);
    snprintf(what, sizeof what, "%s two rewinds in a row (9 -> 8 -> 4)", tag);
    bool ok = a && b && eval_calls(a, c711, N_IDS) && !rg_session_rewind(a, 8, &err) && !rg_session_rewind(a, 4, &err) &&
              eval_calls(b, c711, 4);
    RG_CHECK(ok, "%s: %s", what, err.msg);
    if (ok && same_continuation(a, b, what)) printf("    %-60s logits and state file equal\n", what);
    rg_session_free(a), rg_session_free(b);
    a = new_session(m, "auto", &err), b = new_session(m, "auto", &err);
    snprintf(what, sizeof what, "%s rewind, a new batch, rewind into it (7 -> 4 -> 11 -> 9)", tag);
    ok = a && b && eval_calls(a, c7, N_IDS) && !rg_session_rewind(a, 4, &err) &&
         !rg_session_eval(a, ids + 20, 7, NULL, 0, &err) && !rg_session_rewind(a, 9, &err) && eval_calls(b, c7, 4) &&
         !rg_session_eval(b, ids + 20, 5, NULL, 0, &err);
    RG_CHECK(ok, "%s: %s", what, err.msg);
    if (ok && same_continuation(a, b, what)) printf("    %-60s logits and state file equal\n", what);
    rg_session_free(a), rg_session_free(b);
    a = new_session(m, "auto", &err), b = new_session(m, "auto", &err);
    snprintf(what, sizeof what, "%s rg_session_truncate (9 -> 4)", tag);
    ok = a && b && eval_calls(a, c6111, N_IDS) && eval_calls(b, c6111, 4);
    if (ok) rg_session_truncate(a, 4);
    ok = ok && rg_session_n_past(a) == 4;
    RG_CHECK(ok, "%s: %s", what, err.msg);
    if (ok && same_continuation(a, b, what)) printf("    %-60s logits and state file equal\n", what);
    rg_session_free(a), rg_session_free(b);
}

// A refused rewind leaves the session as it was: its continuation gives the bits of a fresh session that made the
// same calls. expect: a fragment the error must hold.
static void check_refused(rg_session *a, const rg_model *m, const int *calls, int64_t pos, rg_status want,
                          const char *expect, const char *what) {
    rg_error err = {0};
    const int64_t n_past = rg_session_n_past(a);
    rg_status st = rg_session_rewind(a, pos, &err);
    RG_CHECK(st == want && strstr(err.msg, expect), "%s: rewind to %lld gave %d '%s', expected %d with '%s'", what,
             (long long)pos, (int)st, err.msg, (int)want, expect);
    RG_CHECK(rg_session_n_past(a) == n_past, "%s: n_past moved to %lld", what, (long long)rg_session_n_past(a));
    rg_error e2 = {0};
    rg_session *b = new_session(m, "auto", &e2);
    if (b && eval_calls(b, calls, N_IDS) && same_continuation(a, b, what))
        printf("    %-60s refused, unchanged: %s\n", what, err.msg);
    rg_session_free(b);
}

static void check_refusals(const rg_model *m, const char *tag) {
    char what[160];
    rg_error err = {0};
    // A position no snapshot holds: before the kept last batch of a split call.
    static const int split[MAX_CALLS] = {12};
    rg_session *a = new_session(m, "auto", &err);
    snprintf(what, sizeof what, "%s before the kept batch", tag);
    if (a && eval_calls(a, split, N_IDS)) check_refused(a, m, split, 5, RG_ERR_UNSUPPORTED, "oldest kept position is 8", what);
    rg_session_free(a);
    // Past the end.
    a = new_session(m, "auto", &err);
    snprintf(what, sizeof what, "%s past the end", tag);
    if (a && eval_calls(a, split, N_IDS)) check_refused(a, m, split, 13, RG_ERR_ARG, "holds 12 tokens", what);
    rg_session_free(a);
    // More single tokens than the ring holds: the first ones are gone.
    a = new_session(m, "auto", &err);
    snprintf(what, sizeof what, "%s a single token out of the ring", tag);
    int many[MAX_CALLS * 3] = {0};
    for (int i = 0; i < 2 + RING + 2; i++) many[i] = i == 0 ? 2 : 1;  // a batch of 2, then 18 single tokens
    if (a && eval_calls(a, many, N_IDS)) {
        // Kept: the batch (0..2) and the ring's last 16 steps (positions 4..19); position 3 is not.
        check_refused(a, m, many, 3, RG_ERR_UNSUPPORTED, "oldest kept position is 0", what);
    }
    rg_session_free(a);
    // off (the default).
    a = new_session(m, NULL, &err);
    RG_CHECK(a && rg_session_snapshot_bytes(a) == 0, "%s off: %lld snapshot bytes", tag,
             a ? (long long)rg_session_snapshot_bytes(a) : -1LL);
    snprintf(what, sizeof what, "%s with RETRO_RECURRENT_ROLLBACK off", tag);
    static const int batch7[MAX_CALLS] = {7};
    if (a && eval_calls(a, batch7, N_IDS)) check_refused(a, m, batch7, 3, RG_ERR_UNSUPPORTED, "RETRO_RECURRENT_ROLLBACK is off", what);
    rg_session_free(a);
    // A bad value.
    a = new_session(m, "yes", &err);
    RG_CHECK(!a && strstr(err.msg, "RETRO_RECURRENT_ROLLBACK=yes") && strstr(err.msg, "auto"),
             "%s RETRO_RECURRENT_ROLLBACK=yes: %s", tag, a ? "accepted" : err.msg);
    if (!a) printf("    %-60s refused (\"%s\")\n", "RETRO_RECURRENT_ROLLBACK=yes", err.msg);
    rg_session_free(a);
}

// Saved and loaded: the loading session holds no snapshot of the history before the load (refused, unchanged),
// and keeps those of what it evaluates after: a batch evaluated after the load rewinds exactly.
static void check_save_load(const rg_model *m, const char *tag) {
    char path[64] = "/tmp/rg_test_rewind_sXXXXXX", what[160];
    close(mkstemp(path));
    rg_error err = {0};
    static const int calls[MAX_CALLS] = {7, 1, 1};
    rg_session *a = new_session(m, "auto", &err), *c = new_session(m, "auto", &err);
    bool ok = a && c && eval_calls(a, calls, N_IDS) && !rg_session_state_save(a, path, &err) &&
              !rg_session_state_load(c, path, &err);
    RG_CHECK(ok, "%s save/load: %s", tag, err.msg);
    snprintf(what, sizeof what, "%s after a load, into the saved history", tag);
    if (ok) check_refused(c, m, calls, 4, RG_ERR_UNSUPPORTED, "no snapshot of the recurrent state is kept", what);
    rg_session_free(c);
    // The saving session still holds its own snapshots: a rewind there works.
    snprintf(what, sizeof what, "%s the saving session, after its save", tag);
    rg_session *b = new_session(m, "auto", &err);
    if (ok && b && !rg_session_rewind(a, 4, &err) && eval_calls(b, calls, 4) && same_continuation(a, b, what))
        printf("    %-60s logits and state file equal\n", what);
    RG_CHECK(!ok || rg_session_n_past(a) == 4 + N_CONT, "%s: %s", what, err.msg);
    rg_session_free(a), rg_session_free(b);
    // Loaded, then a batch of 6 evaluated and rewound to 4 of it: a session that loaded and evaluated those 4.
    snprintf(what, sizeof what, "%s after a load, into a batch evaluated after it", tag);
    c = new_session(m, "auto", &err), b = new_session(m, "auto", &err);
    ok = ok && c && b && !rg_session_state_load(c, path, &err) && !rg_session_state_load(b, path, &err) &&
         !rg_session_eval(c, ids + 9, 6, NULL, 0, &err) && !rg_session_rewind(c, 13, &err) &&
         !rg_session_eval(b, ids + 9, 4, NULL, 0, &err);
    RG_CHECK(ok, "%s: %s", what, err.msg);
    if (ok && same_continuation(c, b, what)) printf("    %-60s logits and state file equal\n", what);
    rg_session_free(c), rg_session_free(b);
    unlink(path);
}

static void check_fixture(const char *arch, uint32_t type) {
    char mpath[64], tag[48];
    rg_model *m = tiny_model(arch, type, mpath);
    RG_CHECK(m != NULL, "%s %s: no fixture", arch, rg_type_get(type)->name);
    if (!m) return;
    make_ids(m->hp.n_vocab);
    snprintf(tag, sizeof tag, "%s %s:", arch, rg_type_get(type)->name);
    check_rewinds(m, tag, rg_type_get(type)->quantized);
    check_sequences(m, tag);
    check_refusals(m, tag);
    check_save_load(m, tag);
    rg_model_free(m);
    unlink(mpath);
}

static void test_lfm2_f32(void) { check_fixture("lfm2", RG_TYPE_F32); }
static void test_lfm2_q8_0(void) { check_fixture("lfm2", RG_TYPE_Q8_0); }
static void test_mamba2_f32(void) { check_fixture("mamba2", RG_TYPE_F32); }
static void test_mamba2_q8_0(void) { check_fixture("mamba2", RG_TYPE_Q8_0); }

// The same on the CUDA device (a GPU, or the host execution of the CUDA code with RETRO_CUDA_HOST=1).
#define CUDA_CASE(name, arch, type)                                          \
    static void test_cuda_##name(void) {                                     \
        char why[256];                                                       \
        if (rg_cuda_device_count(why, sizeof why) <= 0) RG_SKIP("no CUDA device: %s", why); \
        device = RG_DEVICE_CUDA;                                             \
        check_fixture(arch, type);                                           \
        device = RG_DEVICE_CPU;                                              \
    }
CUDA_CASE(lfm2_f32, "lfm2", RG_TYPE_F32)
CUDA_CASE(lfm2_q8_0, "lfm2", RG_TYPE_Q8_0)
CUDA_CASE(mamba2_f32, "mamba2", RG_TYPE_F32)
CUDA_CASE(mamba2_q8_0, "mamba2", RG_TYPE_Q8_0)

// The snapshot memory of n_batch tokens and the ring for convs of C channels and window K-1 (n_conv of them) and
// SSM layers of NPH floats (n_ssm of them): session_snap.c's plan.
static int64_t plan_bytes(int64_t n_batch, int64_t n_conv, int64_t C, int64_t K1, int64_t n_ssm, int64_t C_ssm,
                          int64_t NPH) {
    const int64_t seq = 4 * (n_conv * C * K1 + n_ssm * (C_ssm * K1 + NPH));
    return (1 + RING) * seq + 4 * n_batch * (n_conv * C + n_ssm * (C_ssm + NPH));
}

static void test_snapshot_memory(void) {
    char mpath[64];
    rg_model *m = tiny_model("lfm2", RG_TYPE_F32, mpath);
    RG_CHECK(m != NULL, "lfm2: no fixture");
    if (!m) return;
    rg_error err = {0};
    rg_session *s = new_session(m, "auto", &err);
    RG_CHECK(s != NULL, "session: %s", err.msg);
    int64_t n_conv = 0;
    for (int64_t il = 0; il < m->hp.n_layer; il++) n_conv += m->layers[il].mixer == RG_KIND_SHORTCONV;
    const int64_t want = plan_bytes(N_BATCH, n_conv, m->hp.n_embd, m->hp.n_conv - 1, 0, 0, 0);
    RG_CHECK(s && rg_session_snapshot_bytes(s) == want, "the tiny lfm2's snapshots take %lld bytes, the plan %lld",
             s ? (long long)rg_session_snapshot_bytes(s) : -1LL, (long long)want);
    printf("    tiny lfm2 (%lld convs of %lld channels, K-1 = %lld), n_batch %d: %lld bytes, as planned\n",
           (long long)n_conv, (long long)m->hp.n_embd, (long long)(m->hp.n_conv - 1), N_BATCH, (long long)want);
    // LFM2-350M's shape (model/tiny.c): 16 layers, attention at its attn_layers, the rest short convs of n_embd
    // channels and the tiny lfm2's conv length (LFM2's L = 3); a draft of 16 tokens verified in one batch.
    const rg_tiny_shape *sh = rg_tiny_shape_find("lfm2-350m");
    RG_CHECK(sh != NULL, "no lfm2-350m shape");
    if (sh) {
        int64_t convs = 0;
        const uint64_t attn = sh->attn_layers ? sh->attn_layers : 0xaaaaaaaaaaaaaaaaull;  // 0: the odd layers
        for (int64_t il = 0; il < sh->n_layer; il++) convs += !((attn >> il) & 1);
        const int64_t K1 = m->hp.n_conv - 1, C = sh->n_embd, draft = 16;
        const int64_t state16 = draft * 4 * convs * C * K1;  // the recurrent state of 16 positions
        const int64_t batch = 4 * convs * C * K1 + draft * 4 * convs * C;  // prev + the batch's conv inputs
        const int64_t total = plan_bytes(draft, convs, C, K1, 0, 0, 0);
        printf("    LFM2-350M shape (%lld short convs of %lld channels, K-1 = %lld), a draft of %lld tokens:\n"
               "      batch snapshots %lld bytes = %.2fx the recurrent state of 16 positions (%lld bytes);\n"
               "      with the ring of %d single-token states %lld bytes = %.2fx\n",
               (long long)convs, (long long)C, (long long)K1, (long long)draft, (long long)batch,
               (double)batch / (double)state16, (long long)state16, RING, (long long)total, (double)total / (double)state16);
        RG_CHECK(total <= 2 * state16, "the snapshots of a draft of 16 take %.2fx the state of 16 positions",
                 (double)total / (double)state16);
    }
    rg_session_free(s);
    // rg_session_opts.snapshot_tokens = 3: planned for 3 tokens a batch; a batch of 7 keeps nothing (refused, naming
    // what is kept), one of 3 is kept.
    setenv("RETRO_RECURRENT_ROLLBACK", "auto", 1);
    rg_session_opts so = {.n_ctx = N_CTX, .n_threads = 2, .n_batch = N_BATCH, .snapshot_tokens = 3};
    s = NULL;
    rg_status st = rg_session_create(&s, m, &so, &err);
    unsetenv("RETRO_RECURRENT_ROLLBACK");
    RG_CHECK(!st, "session: %s", err.msg);
    make_ids(m->hp.n_vocab);
    const int64_t want3 = plan_bytes(3, n_conv, m->hp.n_embd, m->hp.n_conv - 1, 0, 0, 0);
    RG_CHECK(!st && rg_session_snapshot_bytes(s) == want3, "snapshot_tokens 3: %lld bytes, the plan %lld",
             s ? (long long)rg_session_snapshot_bytes(s) : -1LL, (long long)want3);
    st = st ? st : rg_session_eval(s, ids, 7, NULL, 0, &err);
    rg_status r = st ? st : rg_session_rewind(s, 4, &err);
    RG_CHECK(r == RG_ERR_UNSUPPORTED && strstr(err.msg, "no snapshot"), "a batch of 7 over snapshot_tokens 3: %s",
             r ? err.msg : "rewound");
    st = st ? st : rg_session_eval(s, ids + 7, 3, NULL, 0, &err);
    r = st ? st : rg_session_rewind(s, 8, &err);
    RG_CHECK(r == RG_OK, "a batch of 3 within snapshot_tokens 3: %s", err.msg);
    printf("    snapshot_tokens 3: %lld bytes; a batch of 7 keeps none (refused), one of 3 is kept\n", (long long)want3);
    rg_session_free(s);
    rg_model_free(m);
    unlink(mpath);
}

static const rg_test_case cases[] = {
    RG_TEST(test_lfm2_f32),        RG_TEST(test_lfm2_q8_0),      RG_TEST(test_mamba2_f32),
    RG_TEST(test_mamba2_q8_0),     RG_TEST(test_snapshot_memory), RG_TEST(test_cuda_lfm2_f32),
    RG_TEST(test_cuda_lfm2_q8_0),  RG_TEST(test_cuda_mamba2_f32), RG_TEST(test_cuda_mamba2_q8_0),
    {0}};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
