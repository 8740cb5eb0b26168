// test_session_rewind_recurrent.c - exact rewind of recurrent models (infer/session_snap.c) with
// RETRO_RECURRENT_ROLLBACK=auto, on the tiny lfm2 (short conv + attention) and mamba2 (SSM) fixtures, F32 and
// Q8_0, on the CPU:
//   - each case of the table evaluates calls (batches, single tokens), rewinds to a position, and continues
//     with the same tokens (a batch of 3 with every logit, then single tokens); a fresh session that made the
//     same calls cut at that position and the same continuation gives the same logits (memcmp), and the two
//     sessions' state files (rg_session_state_save) after it are byte for byte the same
//   - rewinds in a row, a rewind into a batch evaluated after a rewind, rg_session_truncate
//   - refusals, each leaving the session as it was (its continuation gives the bits of a session that never
//     tried): a position no snapshot holds (names the oldest kept), the default off, and
//     RETRO_RECURRENT_ROLLBACK=yes at rg_session_create (names the variable and the value)
//   - state files carry the snapshots (format version 2): saved after a batch and single tokens, loaded into a
//     fresh session, rewound into the batch, to its end, into the ring, twice in a row: the saving session's bits
//     rewound the same way (logits, and the whole state files after the continuation, snapshots included);
//     loaded into a session keeping 3 tokens a batch (the first 3 kept, the rest refused naming what is kept) or
//     one with off (the off refusal); a version 1 file loads (no snapshots: the rewind refused); bad snapshot
//     records (a corrupt byte, truncated, positions, counts or size wrong with the checksum right) refused,
//     naming the problem, the session left as it was; a batch evaluated after a load is kept
//   - the snapshot memory: rg_session_snapshot_bytes against its formula, and that formula for LFM2-350M's
//     shape (model/tiny.c's lfm2-350m) and a draft of 16 tokens, against the recurrent state of 16 positions.
#include <stdint.h>
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
// snapshot_tokens: rg_session_opts' (0: n_batch).
static rg_session *new_session_cap(const rg_model *m, const char *mode, int64_t snapshot_tokens, rg_error *err) {
    if (mode) setenv("RETRO_RECURRENT_ROLLBACK", mode, 1);
    else unsetenv("RETRO_RECURRENT_ROLLBACK");
    rg_session *s = NULL;
    rg_session_opts so = {.n_ctx = N_CTX, .n_threads = 2, .n_batch = N_BATCH, .device = device,
                          .snapshot_tokens = snapshot_tokens};
    if (rg_session_create(&s, m, &so, err)) s = NULL;
    unsetenv("RETRO_RECURRENT_ROLLBACK");
    return s;
}

static rg_session *new_session(const rg_model *m, const char *mode, rg_error *err) {
    return new_session_cap(m, mode, 0, err);
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

// Whether a and b continue alike: the same continuation logits (memcmp) and then the same state files: their state
// (snapshots false: sessions that reached it along other paths keep other snapshots), or the whole files.
static bool same_continuation_as(rg_session *a, rg_session *b, const char *what, bool snapshots) {
    const int64_t V = rg_session_model(a)->hp.n_vocab;
    float *la = calloc((size_t)(V * N_CONT), sizeof(float)), *lb = calloc((size_t)(V * N_CONT), sizeof(float));
    bool ok = la && lb && eval_cont(a, la) && eval_cont(b, lb);
    int64_t first = -1;
    for (int64_t i = 0; ok && i < V * N_CONT && first < 0; i++)
        if (memcmp(&la[i], &lb[i], sizeof(float))) first = i;
    RG_CHECK(ok && first < 0, "%s: continuation logit %lld (token %lld) is %.9g, the fresh session's %.9g", what,
             (long long)first, first >= 0 ? (long long)(first / V) : -1LL, first >= 0 ? la[first] : 0.0,
             first >= 0 ? lb[first] : 0.0);
    const bool same_files = ok && sf_same_saved(a, b, snapshots);
    RG_CHECK(!ok || same_files, "%s: the state files after the continuation differ%s", what,
             snapshots ? " (snapshots included)" : "");
    free(la), free(lb);
    return ok && first < 0 && same_files;
}

static bool same_continuation(rg_session *a, rg_session *b, const char *what) {
    return same_continuation_as(a, b, what, false);
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

// The calls a saving session makes before its save: the batch's snapshots hold positions 0..7, the ring 7 and 8.
static const int save_calls[MAX_CALLS] = {7, 1, 1};

// A session (auto) that made save_calls and saved to path (the same bytes each time), or NULL.
static rg_session *saver(const rg_model *m, const char *path, rg_error *err) {
    rg_session *a = new_session(m, "auto", err);
    if (a && (!eval_calls(a, save_calls, N_IDS) || rg_session_state_save(a, path, err))) {
        rg_session_free(a);
        a = NULL;
    }
    return a;
}

// A session made with RETRO_RECURRENT_ROLLBACK=mode and snapshot_tokens that loaded path, or NULL.
static rg_session *loader(const rg_model *m, const char *mode, int64_t snapshot_tokens, const char *path,
                          rg_error *err) {
    rg_session *c = new_session_cap(m, mode, snapshot_tokens, err);
    if (c && rg_session_state_load(c, path, err)) {
        rg_session_free(c);
        c = NULL;
    }
    return c;
}

// Rewinds c and a to each of pos[0..n) in turn; then c continues with a's bits, snapshots included.
static void check_rewound_alike(rg_session *c, rg_session *a, const int64_t *pos, int n, const char *what) {
    rg_error err = {0};
    bool ok = c && a;
    for (int i = 0; ok && i < n; i++) ok = !rg_session_rewind(c, pos[i], &err) && !rg_session_rewind(a, pos[i], &err);
    RG_CHECK(ok, "%s: %s", what, err.msg);
    if (ok && same_continuation_as(c, a, what, true))
        printf("    %-60s logits and state file (snapshots too) equal\n", what);
}

// A loaded session rewinds where the saving session could, with its bits: into the batch, to its end, into the ring,
// twice in a row.
static void check_loaded_rewinds(const rg_model *m, const char *tag, const char *path) {
    static const struct {
        int64_t pos[2];
        int n;
        const char *where;
    } targets[] = {{{4}, 1, "inside the batch"}, {{2}, 1, "to the batch's second token"}, {{7}, 1, "to the batch's end"},
                   {{8}, 1, "into the ring"}, {{8, 4}, 2, "into the ring, then the batch"}};
    for (size_t i = 0; i < sizeof targets / sizeof *targets; i++) {
        char what[160];
        rg_error err = {0};
        snprintf(what, sizeof what, "%s loaded, rewound %s (9 -> %lld)", tag, targets[i].where,
                 (long long)targets[i].pos[targets[i].n - 1]);
        rg_session *a = saver(m, path, &err), *c = a ? loader(m, "auto", 0, path, &err) : NULL;
        RG_CHECK(a && c, "%s: %s", what, err.msg);
        check_rewound_alike(c, a, targets[i].pos, targets[i].n, what);
        rg_session_free(a), rg_session_free(c);
    }
}

// Loaded into sessions that keep less: snapshot_tokens 3 keeps the batch's first 3 tokens (a rewind to 2 exact, to
// 4 refused naming what is kept, the ring kept), off keeps none (the existing refusal).
static void check_loaded_smaller(const rg_model *m, const char *tag, const char *path) {
    char what[160];
    rg_error err = {0};
    rg_session *a = saver(m, path, &err), *c = a ? loader(m, "auto", 3, path, &err) : NULL;
    RG_CHECK(a && c, "%s snapshot_tokens 3: %s", tag, err.msg);
    snprintf(what, sizeof what, "%s loaded keeping 3 tokens a batch, into the rest", tag);
    if (a && c) check_refused(c, m, save_calls, 4, RG_ERR_UNSUPPORTED, "snapshots cover positions 0..3", what);
    rg_session_free(a), rg_session_free(c);
    static const int64_t to2[] = {2}, to8[] = {8};
    a = saver(m, path, &err), c = a ? loader(m, "auto", 3, path, &err) : NULL;
    snprintf(what, sizeof what, "%s loaded keeping 3 tokens a batch, rewound to 2", tag);
    check_rewound_alike(c, a, to2, 1, what);
    rg_session_free(a), rg_session_free(c);
    a = saver(m, path, &err), c = a ? loader(m, "auto", 3, path, &err) : NULL;
    snprintf(what, sizeof what, "%s loaded keeping 3 tokens a batch, rewound to 8 (ring)", tag);
    check_rewound_alike(c, a, to8, 1, what);
    rg_session_free(a), rg_session_free(c);
    c = loader(m, NULL, 0, path, &err);
    RG_CHECK(c != NULL, "%s off: %s", tag, err.msg);
    snprintf(what, sizeof what, "%s loaded with RETRO_RECURRENT_ROLLBACK off", tag);
    if (c) check_refused(c, m, save_calls, 4, RG_ERR_UNSUPPORTED, "RETRO_RECURRENT_ROLLBACK is off", what);
    rg_session_free(c);
}

// A state file's checksum made right again after an edit (session_state.c: FNV-1a of every byte before the last 8).
static void fix_checksum(unsigned char *b, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i + 8 < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    memcpy(b + n - 8, &h, 8);
}

// The saved file as format version 1 (no snapshots) loads: its state continues as the saving session's, and a
// rewind into the history is refused as before.
static void check_version1(const rg_model *m, const char *tag, const unsigned char *b, size_t n) {
    char v1[64] = "/tmp/rg_test_rewind_v1XXXXXX", what[160];
    close(mkstemp(v1));
    const size_t end = sf_state_end(b, n);
    unsigned char *e = malloc(end + 8);
    RG_REQUIRE(e, "out of memory");
    memcpy(e, b, end);
    memcpy(e + 8, &(uint32_t){1}, 4);
    fix_checksum(e, end + 8);
    sf_write_all(v1, e, end + 8);
    rg_error err = {0};
    rg_session *c = loader(m, "auto", 0, v1, &err);
    RG_CHECK(c && rg_session_n_past(c) == 9, "%s a version 1 file: %s", tag, c ? "wrong n_past" : err.msg);
    snprintf(what, sizeof what, "%s a version 1 file (%zu bytes, %zu less), rewound", tag, end + 8, n - end - 8);
    if (c) check_refused(c, m, save_calls, 4, RG_ERR_UNSUPPORTED, "no snapshot of the recurrent state is kept", what);
    rg_session_free(c);
    free(e);
    unlink(v1);
}

// Bad snapshot records: each load refused naming the problem, the session (loaded from the good file) left as it
// was: afterwards it rewinds into the batch with the saving session's bits.
static void check_bad_snapshots(const rg_model *m, const char *tag, const char *path, const unsigned char *b, size_t n) {
    char bad[64] = "/tmp/rg_test_rewind_badXXXXXX", what[160];
    close(mkstemp(bad));
    const size_t end = sf_state_end(b, n);
    uint64_t seq = 0;
    memcpy(&seq, b + end, 8);
    const size_t last_ring = n - 16 - (size_t)seq - 16;  // the last ring entry's header
    struct {
        const char *what, *needle;
        size_t at;        // the byte or field changed (SIZE_MAX: none)
        int64_t value;    // written as an i64 (u32 fields: as the low 4 bytes); < 0: the byte flipped
        int width;        // of the field: 8 or 4
        size_t length;    // the file's new length
        bool fix;         // the checksum made right again
    } edits[] = {
        {"a corrupt byte in the kept batch", "checksum", end + 32 + 5, -1, 1, n, false},
        {"a corrupt byte in a ring snapshot", "checksum", n - 19, -1, 1, n, false},
        {"truncated inside the snapshots", "truncated", SIZE_MAX, 0, 0, n - 20, false},
        {"the kept batch past the end (checksum right)", "kept batch", end + 16, 40, 8, n, true},
        {"a ring position past the end (checksum right)", "ring snapshot", last_ring, 50, 8, n, true},
        {"more ring entries than fit (checksum right)", "ring snapshots", end + 24, 1000, 4, n, true},
        {"the snapshots' size wrong (checksum right)", "snapshots' size", n - 16, 7, 8, n, true},
    };
    rg_error err = {0};
    rg_session *a = saver(m, path, &err), *c = a ? loader(m, "auto", 0, path, &err) : NULL;
    unsigned char *e = malloc(n);
    RG_REQUIRE(a && c && e, "%s: %s", tag, err.msg);
    for (size_t i = 0; i < sizeof edits / sizeof *edits; i++) {
        memcpy(e, b, n);
        if (edits[i].at != SIZE_MAX && edits[i].value < 0) e[edits[i].at] ^= 0x5a;
        else if (edits[i].at != SIZE_MAX) memcpy(e + edits[i].at, &edits[i].value, (size_t)edits[i].width);
        if (edits[i].fix) fix_checksum(e, edits[i].length);
        sf_write_all(bad, e, edits[i].length);
        rg_status st = rg_session_state_load(c, bad, &err);
        RG_CHECK(st == RG_ERR_FORMAT && strstr(err.msg, edits[i].needle) && rg_session_n_past(c) == 9,
                 "%s %s: %d '%s' (want '%s'), n_past %lld", tag, edits[i].what, (int)st, st ? err.msg : "accepted",
                 edits[i].needle, (long long)rg_session_n_past(c));
        printf("    %s %s: %s\n", tag, edits[i].what, st ? err.msg : "accepted");
    }
    static const int64_t to4[] = {4};
    snprintf(what, sizeof what, "%s after the refused loads, rewound to 4", tag);
    check_rewound_alike(c, a, to4, 1, what);
    rg_session_free(a), rg_session_free(c);
    free(e);
    unlink(bad);
}

// Saved and loaded: the loaded session holds the saving session's snapshots (format version 2), and keeps those of
// what it evaluates after: a batch evaluated after the load rewinds exactly.
static void check_save_load(const rg_model *m, const char *tag) {
    char path[64] = "/tmp/rg_test_rewind_sXXXXXX", what[160];
    close(mkstemp(path));
    rg_error err = {0};
    rg_session *a = saver(m, path, &err);
    size_t n = 0;
    unsigned char *b = a ? sf_read_all(path, &n) : NULL;
    RG_CHECK(a && b, "%s save: %s", tag, err.msg);
    rg_session_free(a);
    if (b) {
        check_loaded_rewinds(m, tag, path);
        check_loaded_smaller(m, tag, path);
        check_version1(m, tag, b, n);
        check_bad_snapshots(m, tag, path, b, n);
    }
    free(b);
    // Loaded, then a batch of 6 evaluated and rewound to 4 of it: a session that loaded and evaluated those 4.
    snprintf(what, sizeof what, "%s after a load, into a batch evaluated after it", tag);
    rg_session *c = new_session(m, "auto", &err), *d = new_session(m, "auto", &err);
    bool ok = c && d && !rg_session_state_load(c, path, &err) && !rg_session_state_load(d, path, &err) &&
              !rg_session_eval(c, ids + 9, 6, NULL, 0, &err) && !rg_session_rewind(c, 13, &err) &&
              !rg_session_eval(d, ids + 9, 4, NULL, 0, &err);
    RG_CHECK(ok, "%s: %s", what, err.msg);
    if (ok && same_continuation(c, d, what)) printf("    %-60s logits and state file equal\n", what);
    rg_session_free(c), rg_session_free(d);
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
#define CUDA_CASE(name, arch, type) SF_CUDA_CASE(test_cuda_##name, device, check_fixture(arch, type))
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
