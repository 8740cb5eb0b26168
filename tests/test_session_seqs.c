// test_session_seqs.c - several sequences in one session (rg_session_opts.n_seq, infer/session.h), with
// RETRO_RECURRENT_ROLLBACK=auto, on the tiny llama, qwen2 (attention), lfm2 (short conv + attention) and mamba2
// (SSM) fixtures, F32 and Q8_0, on the CPU and the CUDA device (a GPU, or the host execution of the CUDA code),
// and gemma3 F32 and gemma2 Q8_0 on the CPU:
//   - interleaved: one script of calls on three sequences of one session (batches with every logit, single
//     tokens, exact batches, rewinds into a batch, into the ring of single tokens, a whole batch rolled back), each
//     call made also on a session of its own per sequence. Every call's logits are the same bits (memcmp) and, at
//     the end, each sequence's state file (rg_session_state_save_seq) is byte for byte its own session's, the
//     recurrent-state snapshots included: a call, a rewind above all, on one sequence changes nothing of another.
//     (That a rewind gives the bits of a fresh session fed the first p tokens is test_session_rewind's and
//     test_session_rewind_recurrent's proof, for one sequence; with this one it holds for every sequence.)
//   - save and load per sequence: a sequence saved from one session, loaded into another sequence of another
//     session: the same continuation bits as the saving sequence's, a rewind into its batch from the file's
//     snapshots, the loading session's other sequences untouched
//   - batches of several sequences in one graph (rg_session_eval_seqs): a script of steps, up to three sequences
//     a step with rewinds between, against each sequence's own session. Exact: every logit and each sequence's
//     state file, snapshots included, the same bits. Not exact (the prompt paths over the whole batch, and on
//     the CPU again with flash attention on): every logit within a stated tolerance. Bad batches refused with
//     nothing changed.
//   - bad input: a sequence the session does not hold, for every call that takes one (each RG_ERR_ARG naming the
//     sequence and how many the session holds, nothing changed); n_seq past RG_SESSION_MAX_SEQ refused
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/cuda.h"
#include "infer/session.h"
#include "infer/session_state.h"
#include "model/tiny.h"
#include "rg_test.h"
#include "session_fixture.h"

enum { N_SEQ = 3, N_CTX = 64, N_BATCH = 8, STREAM = 97 };

// Batched prompt paths against each sequence alone: the largest difference of a token's logits as a fraction of
// its largest |logit|. The kernels change with the batch's size: F32's dot products below 8 columns and the
// SGEMM from 8, and a batch's attention materialized (MUL_MAT, SOFT_MAX) where a single token's runs ATTN_DECODE
// (summation order: up to 1.3e-4 measured, gemma3's, 3e-5 the others'); Q8_0's dot products on Q8_0-rounded
// activations below 4 columns and, from 4, the GEMM on F32 activations where the CPU has neither AMX-INT8 nor
// AVX-512 VNNI (the activations' rounding: up to 2.9e-2 measured on these fixtures on AVX2 and the baseline
// kernels, 3e-2 on SmolLM2-135M, test_speculative). A wrong cache or state gives differences of the order of
// the logits themselves.
#define BATCH_TOL_F32 5e-4
#define BATCH_TOL_QUANT 5e-2

static rg_device device = RG_DEVICE_CPU;  // the sessions' (each test sets it)
static rg_flash_attn_mode flash = RG_FLASH_ATTN_AUTO;  // the sessions' prompt attention

// Sequence k's tokens: the call at position p after `op` earlier calls evaluates stream(k, p + 7 op, ...), so a
// rewound sequence continues with other tokens than it had.
static int32_t stream_id(int k, int64_t i, int64_t V) { return (int32_t)(((i % STREAM) * 37 + 11 + 101 * k) % V); }

static rg_session *new_session(const rg_model *m, int n_seq, rg_error *err) {
    setenv("RETRO_RECURRENT_ROLLBACK", "auto", 1);
    rg_session *s = NULL;
    rg_session_opts so = {.n_ctx = N_CTX, .n_threads = 2, .n_batch = N_BATCH, .device = device, .n_seq = n_seq,
                          .flash_attn = flash};
    if (rg_session_create(&s, m, &so, err)) s = NULL;
    unsetenv("RETRO_RECURRENT_ROLLBACK");
    return s;
}

// One call of the script: on sequence seq, 'b' a batch of n tokens (every logit), 's' n single tokens, 'x' an exact
// batch of n, 'r' a rewind to position n.
typedef struct call {
    int seq;
    char op;
    int n;
} call;

// Batches keep to one side of the products' kernel choice (F32: N < 8; Q8_0: N >= 4, or single tokens), as
// test_session_rewind_recurrent's cases do; both sides make the same calls anyway.
static const call script[] = {
    {0, 'b', 6}, {1, 'b', 5}, {0, 's', 2}, {2, 'b', 7}, {1, 's', 1},
    {0, 'r', 4},              // seq 0 back into its batch, after seq 2's batch
    {2, 'r', 3},              // seq 2 back into its batch, after seq 0's rewind
    {1, 'b', 4}, {0, 's', 2}, {2, 'x', 3},
    {1, 'r', 6},              // seq 1: a whole batch rolled back
    {2, 's', 2}, {0, 'r', 5}, // seq 0: back into the ring of single tokens
    {1, 's', 3}, {0, 'b', 5}, {2, 'r', 7}, {1, 'x', 2}, {2, 'b', 4}, {0, 's', 1},
};

// Runs call i of the script on sequence seq of s; logits (every token's) into out, *n_out of them.
static bool run_call(rg_session *s, int seq, int i, float *out, int64_t *n_out, rg_error *err) {
    const call *c = &script[i];
    const int64_t V = rg_session_model(s)->hp.n_vocab, at = rg_session_n_past_seq(s, seq);
    int32_t ids[N_BATCH];
    for (int j = 0; j < c->n && j < N_BATCH; j++) ids[j] = stream_id(c->seq, at + j + 7 * i, V);
    *n_out = 0;
    switch (c->op) {
    case 'b':
        *n_out = c->n;
        return !rg_session_eval_seq(s, seq, ids, c->n, out, 1, err);
    case 'x':
        *n_out = c->n;
        return !rg_session_eval_exact_seq(s, seq, ids, c->n, out, err);
    case 's':
        for (int j = 0; j < c->n; j++)
            if (rg_session_eval_seq(s, seq, &ids[j], 1, out + (size_t)j * V, 0, err)) return false;
        *n_out = c->n;
        return true;
    default:
        return !rg_session_rewind_seq(s, seq, c->n, err);
    }
}

// The first logit where a and b differ, or -1.
static int64_t first_diff(const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float))) return i;
    return -1;
}

// The script on sequences 0..2 of one session (multi) and on a session of its own per sequence (own[k]).
static bool run_script(rg_session *multi, rg_session **own, const char *tag) {
    const int64_t V = rg_session_model(multi)->hp.n_vocab;
    float *a = malloc((size_t)(V * N_BATCH) * sizeof(float)), *b = malloc((size_t)(V * N_BATCH) * sizeof(float));
    bool ok = a && b;
    for (int i = 0; ok && i < (int)(sizeof script / sizeof *script); i++) {
        const call *c = &script[i];
        rg_error err = {0};
        int64_t na = 0, nb = 0;
        ok = run_call(multi, c->seq, i, a, &na, &err) && run_call(own[c->seq], 0, i, b, &nb, &err);
        RG_CHECK(ok, "%s call %d ('%c' %d on sequence %d): %s", tag, i, c->op, c->n, c->seq, err.msg);
        const int64_t d = ok ? first_diff(a, b, na * V) : -1;
        RG_CHECK(!ok || d < 0, "%s call %d ('%c' %d on sequence %d): logit %lld is %.9g, the sequence's own "
                 "session's %.9g", tag, i, c->op, c->n, c->seq, (long long)d, d >= 0 ? a[d] : 0.0, d >= 0 ? b[d] : 0.0);
        ok = ok && d < 0 && rg_session_n_past_seq(multi, c->seq) == rg_session_n_past(own[c->seq]);
    }
    for (int k = 0; ok && k < N_SEQ; k++) {
        const bool same = sf_same_saved_seq(multi, k, own[k], 0, true);
        RG_CHECK(same, "%s sequence %d: its state file (snapshots included) differs from its own session's", tag, k);
        ok = same;
    }
    free(a), free(b);
    return ok;
}

static void check_interleaved(const rg_model *m, const char *tag) {
    rg_error err = {0};
    rg_session *multi = new_session(m, N_SEQ, &err), *own[N_SEQ] = {0};
    for (int k = 0; multi && k < N_SEQ; k++) own[k] = new_session(m, 1, &err);
    RG_CHECK(multi && own[N_SEQ - 1], "%s sessions: %s", tag, err.msg);
    if (multi && own[N_SEQ - 1] && run_script(multi, own, tag))
        printf("    %-40s %d calls on %d sequences: logits and state files equal\n", tag,
               (int)(sizeof script / sizeof *script), N_SEQ);
    for (int k = 0; k < N_SEQ; k++) rg_session_free(own[k]);
    rg_session_free(multi);
}

// Continues sequence seq of s: 3 tokens in a batch, then 2 single ones; every logit into out [V, 5].
static bool continue_seq(rg_session *s, int seq, float *out, rg_error *err) {
    const int64_t V = rg_session_model(s)->hp.n_vocab;
    const int32_t ids[5] = {stream_id(2, 50, V), stream_id(2, 51, V), stream_id(2, 52, V), stream_id(2, 53, V),
                            stream_id(2, 54, V)};
    if (rg_session_eval_seq(s, seq, ids, 3, out, 1, err)) return false;
    for (int j = 3; j < 5; j++)
        if (rg_session_eval_seq(s, seq, &ids[j], 1, out + (size_t)j * V, 0, err)) return false;
    return true;
}

// Sequence 1 of a session after the script, saved; loaded into sequence 2 of another whose sequence 0 holds a
// batch: that sequence continues (and rewinds into its last batch, from the file's snapshots) as the saving one
// does, and sequence 0 is still the bits of a session that loaded nothing.
static void check_save_load(const rg_model *m, const char *tag) {
    const int64_t V = m->hp.n_vocab;
    char path[64] = "/tmp/rg_test_seqs_XXXXXX";
    close(mkstemp(path));
    rg_error err = {0};
    rg_session *a = new_session(m, N_SEQ, &err), *own[N_SEQ] = {0};
    for (int k = 0; a && k < N_SEQ; k++) own[k] = new_session(m, 1, &err);
    rg_session *b = own[N_SEQ - 1] ? new_session(m, N_SEQ, &err) : NULL, *ref = b ? new_session(m, 1, &err) : NULL;
    float *la = malloc((size_t)(V * 5) * sizeof(float)), *lb = malloc((size_t)(V * 5) * sizeof(float));
    bool ok = ref && la && lb && run_script(a, own, tag);
    int32_t first[6];
    for (int j = 0; j < 6; j++) first[j] = stream_id(0, 90 + j, V);
    ok = ok && !rg_session_eval_seq(b, 0, first, 6, NULL, 0, &err) && !rg_session_eval(ref, first, 6, NULL, 0, &err);
    ok = ok && !rg_session_state_save_seq(a, 1, path, &err) && !rg_session_state_load_seq(b, 2, path, &err);
    RG_CHECK(ok, "%s save sequence 1, load into sequence 2: %s", tag, err.msg);
    ok = ok && rg_session_n_past_seq(b, 2) == rg_session_n_past_seq(a, 1) && rg_session_n_past_seq(b, 1) == 0;
    // The script's last calls on sequence 1: a batch of 4, a rewind to 6, single tokens, an exact batch of 2:
    // its kept batch is the exact one (positions 9, 10).
    const int64_t back = rg_session_n_past_seq(a, 1) - 1;
    ok = ok && !rg_session_rewind_seq(a, 1, back, &err) && !rg_session_rewind_seq(b, 2, back, &err);
    RG_CHECK(ok, "%s rewind to %lld after the load: %s", tag, (long long)back, err.msg);
    ok = ok && continue_seq(a, 1, la, &err) && continue_seq(b, 2, lb, &err);
    RG_CHECK(ok, "%s continuation after the load: %s", tag, err.msg);
    int64_t d = ok ? first_diff(la, lb, V * 5) : -1;
    RG_CHECK(d < 0, "%s the loaded sequence's continuation: logit %lld is %.9g, the saving sequence's %.9g", tag,
             (long long)d, d >= 0 ? lb[d] : 0.0, d >= 0 ? la[d] : 0.0);
    ok = ok && d < 0 && continue_seq(b, 0, lb, &err) && continue_seq(ref, 0, la, &err);
    d = ok ? first_diff(la, lb, V * 5) : -1;
    RG_CHECK(ok && d < 0, "%s the loading session's sequence 0 after the load: %s logit %lld", tag, err.msg,
             (long long)d);
    if (ok && d < 0) printf("    %-40s a sequence saved, loaded into another, rewound: bits equal\n", tag);
    free(la), free(lb);
    rg_session_free(ref), rg_session_free(b), rg_session_free(a);
    for (int k = 0; k < N_SEQ; k++) rg_session_free(own[k]);
    unlink(path);
}

// A step of the batched script: 'e' one rg_session_eval_seqs of the entries (sequence, tokens; n 0 ends), 'r' a
// rewind of sequence seq[0] to n[0].
typedef struct step {
    char op;
    int seq[N_SEQ], n[N_SEQ];
} step;

// At most n_batch (8) tokens a step. The rewinds: into a batch after a single token, into a batch, a whole batch.
static const step steps[] = {
    {'e', {0, 1, 2}, {4, 3, 1}}, {'e', {0, 1, 2}, {1, 1, 4}}, {'r', {0}, {2}},           {'e', {2, 0}, {1, 2}},
    {'r', {2}, {2}},             {'e', {1, 2, 0}, {5, 2, 1}}, {'r', {1}, {4}},           {'e', {2, 1, 0}, {1, 1, 3}},
    {'e', {1, 0}, {1, 1}},
};

// The entries of step i on s (one rg_session_eval_seqs, every logit; exact or not) into out; *n_out tokens.
static bool run_step(rg_session *s, int i, bool exact, int32_t (*ids)[N_BATCH], float *out, int64_t *n_out,
                     rg_error *err) {
    const step *st = &steps[i];
    const int64_t V = rg_session_model(s)->hp.n_vocab;
    rg_seq_tokens b[N_SEQ];
    int n_b = 0;
    *n_out = 0;
    if (st->op == 'r') return !rg_session_rewind_seq(s, st->seq[0], st->n[0], err);
    for (int k = 0; k < N_SEQ && st->n[k]; k++, n_b++) {
        const int64_t at = rg_session_n_past_seq(s, st->seq[k]);
        for (int t = 0; t < st->n[k]; t++) ids[k][t] = stream_id(st->seq[k], at + t + 7 * i, V);
        b[k] = (rg_seq_tokens){st->seq[k], ids[k], st->n[k]};
        *n_out += st->n[k];
    }
    return !rg_session_eval_seqs(s, b, n_b, out, 1, exact, err);
}

// The same step on the sequences' own sessions, one call each: exact batches (rg_session_eval_exact) and single
// tokens, or rg_session_eval; logits into out in the step's order.
static bool run_step_own(rg_session **own, int i, bool exact, int32_t (*ids)[N_BATCH], float *out, rg_error *err) {
    const step *st = &steps[i];
    const int64_t V = rg_session_model(own[0])->hp.n_vocab;
    if (st->op == 'r') return !rg_session_rewind(own[st->seq[0]], st->n[0], err);
    for (int k = 0; k < N_SEQ && st->n[k]; k++) {
        rg_session *o = own[st->seq[k]];
        const rg_status r = exact && st->n[k] > 1 ? rg_session_eval_exact(o, ids[k], st->n[k], out, err)
                                                  : rg_session_eval(o, ids[k], st->n[k], out, 1, err);
        if (r) return false;
        out += (size_t)st->n[k] * V;
    }
    return true;
}

// The batched script on one session and, entry by entry, on the sequences' own sessions. exact: every logit and,
// at the end, every sequence's state file (snapshots included) the same bits; otherwise (the prompt paths over
// the whole batch, whose products take other kernels as the batch's size changes) every logit within tol of the
// largest |logit| of its token, and the positions the same.
static void check_batched(const rg_model *m, const char *tag, bool exact, double tol) {
    const int64_t V = m->hp.n_vocab;
    rg_error err = {0};
    rg_session *multi = new_session(m, N_SEQ, &err), *own[N_SEQ] = {0};
    for (int k = 0; multi && k < N_SEQ; k++) own[k] = new_session(m, 1, &err);
    float *a = malloc((size_t)(V * N_BATCH) * sizeof(float)), *b = malloc((size_t)(V * N_BATCH) * sizeof(float));
    bool ok = own[N_SEQ - 1] && a && b;
    RG_CHECK(ok, "%s sessions: %s", tag, err.msg);
    double worst = 0;
    int32_t ids[N_SEQ][N_BATCH];
    for (int i = 0; ok && i < (int)(sizeof steps / sizeof *steps); i++) {
        int64_t n = 0;
        ok = run_step(multi, i, exact, ids, a, &n, &err) && run_step_own(own, i, exact, ids, b, &err);
        RG_CHECK(ok, "%s%s step %d ('%c'): %s", tag, exact ? " exact" : "", i, steps[i].op, err.msg);
        for (int64_t t = 0; ok && t < n; t++) {
            const float *x = a + t * V, *y = b + t * V;
            double big = 0, diff = 0;
            for (int64_t v = 0; v < V; v++) {
                big = fabs(y[v]) > big ? fabs(y[v]) : big;
                diff = fabs((double)x[v] - y[v]) > diff ? fabs((double)x[v] - y[v]) : diff;
            }
            const int64_t d = exact ? first_diff(x, y, V) : -1;
            RG_CHECK(d < 0, "%s exact step %d token %lld: logit %lld is %.9g, the own session's %.9g", tag, i,
                     (long long)t, (long long)d, d >= 0 ? x[d] : 0.0, d >= 0 ? y[d] : 0.0);
            RG_CHECK(diff <= tol * big, "%s step %d token %lld: logits differ by %.3g, %.3g of the largest %.3g "
                     "(tolerance %.3g)", tag, i, (long long)t, diff, diff / big, big, tol);
            worst = big > 0 && diff / big > worst ? diff / big : worst;
            ok = d < 0 && diff <= tol * big;
        }
        for (int k = 0; ok && k < N_SEQ; k++) ok = rg_session_n_past_seq(multi, k) == rg_session_n_past(own[k]);
    }
    for (int k = 0; ok && exact && k < N_SEQ; k++) {
        const bool same = sf_same_saved_seq(multi, k, own[k], 0, true);
        RG_CHECK(same, "%s exact batches: sequence %d's state file (snapshots included) differs from its own "
                 "session's", tag, k);
        ok = same;
    }
    if (ok && exact)
        printf("    %-40s %d batched steps, exact: logits and state files equal\n", tag, (int)(sizeof steps / sizeof *steps));
    else if (ok)
        printf("    %-40s %d batched steps: logits within %.2g of the largest (tolerance %.2g)\n", tag,
               (int)(sizeof steps / sizeof *steps), worst, tol);
    free(a), free(b);
    for (int k = 0; k < N_SEQ; k++) rg_session_free(own[k]);
    rg_session_free(multi);
}

// Batches refused before anything changes: a sequence twice, one the session does not hold, an empty entry, more
// than n_batch tokens, an exact batch without every logit, an id outside the vocabulary; the positions unchanged.
static void check_bad_batches(const rg_model *m, const char *tag) {
    rg_error err = {0};
    rg_session *s = new_session(m, N_SEQ, &err);
    RG_REQUIRE(s != NULL, "%s session: %s", tag, err.msg);
    const int32_t ids[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, bad_id[1] = {(int32_t)m->hp.n_vocab};
    struct {
        rg_seq_tokens b[2];
        int all;
        bool exact;
        const char *want;
    } cases[] = {
        {{{1, ids, 2}, {1, ids, 1}}, 1, false, "sequence 1 appears twice in one batch (entries 0 and 1)"},
        {{{0, ids, 2}, {3, ids, 1}}, 1, false, "sequence 3 does not exist (the session holds 3: 0..2)"},
        {{{0, ids, 2}, {2, ids, 0}}, 1, false, "entry 1 (sequence 2): no tokens to evaluate"},
        {{{0, ids, 5}, {2, ids, 4}}, 1, false, "holds 9 tokens, more than n_batch 8"},
        {{{0, ids, 2}, {2, ids, 1}}, 0, true, "all_logits must be 1"},
        {{{0, ids, 2}, {2, bad_id, 1}}, 1, false, "(sequence 2): token id"},
    };
    float *logits = malloc((size_t)(m->hp.n_vocab * 9) * sizeof(float));
    for (size_t i = 0; logits && i < sizeof cases / sizeof *cases; i++) {
        rg_status st = rg_session_eval_seqs(s, cases[i].b, 2, logits, cases[i].all, cases[i].exact, &err);
        RG_CHECK(st == RG_ERR_ARG && strstr(err.msg, cases[i].want), "%s bad batch %zu: %d '%s', wanted '%s'", tag, i,
                 st, err.msg, cases[i].want);
    }
    for (int k = 0; k < N_SEQ; k++)
        RG_CHECK(rg_session_n_past_seq(s, k) == 0, "%s a refused batch moved sequence %d to %lld", tag, k,
                 (long long)rg_session_n_past_seq(s, k));
    free(logits);
    rg_session_free(s);
}

// Whether err names sequence seq and the session's 3 sequences, and st is RG_ERR_ARG.
static bool names_seq(rg_status st, const rg_error *err, int seq) {
    char want[64];
    snprintf(want, sizeof want, "sequence %d does not exist (the session holds 3: 0..2)", seq);
    return st == RG_ERR_ARG && strstr(err->msg, want);
}

static void check_bad_sequences(const rg_model *m, const char *tag) {
    rg_error err = {0};
    rg_session *s = new_session(m, N_SEQ, &err);
    RG_REQUIRE(s != NULL, "%s session: %s", tag, err.msg);
    const int32_t ids[2] = {1, 2};
    float *logits = malloc((size_t)(m->hp.n_vocab * 2) * sizeof(float));
    RG_CHECK(!rg_session_eval_seq(s, 1, ids, 2, logits, 1, &err), "%s: %s", tag, err.msg);
    const int bad[2] = {3, -1};
    for (int i = 0; i < 2; i++) {
        const int q = bad[i];
        RG_CHECK(names_seq(rg_session_eval_seq(s, q, ids, 2, logits, 1, &err), &err, q), "%s eval %d: %s", tag, q, err.msg);
        RG_CHECK(names_seq(rg_session_eval_exact_seq(s, q, ids, 2, logits, &err), &err, q), "%s exact %d: %s", tag, q,
                 err.msg);
        RG_CHECK(names_seq(rg_session_rewind_seq(s, q, 0, &err), &err, q), "%s rewind %d: %s", tag, q, err.msg);
        RG_CHECK(names_seq(rg_session_state_save_seq(s, q, "/tmp/rg_test_seqs_never", &err), &err, q),
                 "%s save %d: %s", tag, q, err.msg);
        RG_CHECK(access("/tmp/rg_test_seqs_never", F_OK) != 0, "%s save %d wrote a file", tag, q);
        RG_CHECK(names_seq(rg_session_state_load_seq(s, q, "/tmp/rg_test_seqs_never", &err), &err, q),
                 "%s load %d: %s", tag, q, err.msg);
        rg_sampler *smp = NULL;
        rg_sampler_params sp = rg_sampler_defaults();
        if (!rg_sampler_create(&smp, &sp, (int32_t)m->hp.n_vocab, &err)) {
            int32_t out = 5;
            RG_CHECK(names_seq(rg_session_eval_sample_seq(s, q, ids, 2, smp, &out, &err), &err, q) && out == -1,
                     "%s sample %d: %s (out %d)", tag, q, err.msg, out);
            rg_sampler_free(smp);
        }
        RG_CHECK(rg_session_n_past_seq(s, q) == -1, "%s n_past of sequence %d: %lld", tag, q,
                 (long long)rg_session_n_past_seq(s, q));
    }
    RG_CHECK(rg_session_n_past_seq(s, 1) == 2 && rg_session_n_past_seq(s, 0) == 0 && rg_session_n_seq(s) == 3,
             "%s the refusals changed the positions: %lld %lld", tag, (long long)rg_session_n_past_seq(s, 0),
             (long long)rg_session_n_past_seq(s, 1));
    free(logits);
    rg_session_free(s);
    rg_session *big = NULL;
    rg_session_opts so = {.n_ctx = N_CTX, .n_threads = 1, .n_seq = RG_SESSION_MAX_SEQ + 1, .device = device};
    rg_status st = rg_session_create(&big, m, &so, &err);
    RG_CHECK(st == RG_ERR_ARG && big == NULL && strstr(err.msg, "257 sequences asked for, at most 256"),
             "%s n_seq 257: %d %s", tag, st, err.msg);
    rg_session_free(big);
}

static void check_fixture(const char *arch, uint32_t type) {
    char mpath[64], tag[48];
    rg_model *m = sf_tiny_model(arch, type, 7, true, mpath, "seqs");
    RG_CHECK(m != NULL, "%s %s: no fixture", arch, rg_type_get(type)->name);
    if (!m) return;
    sf_tag(tag, sizeof tag, device, arch, type);
    check_interleaved(m, tag);
    check_save_load(m, tag);
    check_bad_sequences(m, tag);
    check_batched(m, tag, true, 0.0);
    check_batched(m, tag, false, rg_type_get(type)->quantized ? BATCH_TOL_QUANT : BATCH_TOL_F32);
    if (device == RG_DEVICE_CPU) {  // prompt attention through FLASH_ATTN_EXT per sequence (no CUDA kernel)
        char ftag[64];
        snprintf(ftag, sizeof ftag, "%s flash", tag);
        flash = RG_FLASH_ATTN_ON;
        check_batched(m, ftag, false, rg_type_get(type)->quantized ? BATCH_TOL_QUANT : BATCH_TOL_F32);
        flash = RG_FLASH_ATTN_AUTO;
    }
    check_bad_batches(m, tag);
    rg_model_free(m);
    unlink(mpath);
}

#define CPU_CASE(name, arch, type) \
    static void test_##name(void) { check_fixture(arch, type); }
// The same on the CUDA device (a GPU, or the host execution of the CUDA code with RETRO_CUDA_HOST=1).
#define CUDA_CASE(name, arch, type) SF_CUDA_CASE(test_cuda_##name, device, check_fixture(arch, type))
#define BOTH(name, arch, type) CPU_CASE(name, arch, type) CUDA_CASE(name, arch, type)
BOTH(llama_f32, "llama", RG_TYPE_F32)
BOTH(llama_q8_0, "llama", RG_TYPE_Q8_0)
BOTH(qwen2_f32, "qwen2", RG_TYPE_F32)
BOTH(qwen2_q8_0, "qwen2", RG_TYPE_Q8_0)
BOTH(lfm2_f32, "lfm2", RG_TYPE_F32)
BOTH(lfm2_q8_0, "lfm2", RG_TYPE_Q8_0)
BOTH(mamba2_f32, "mamba2", RG_TYPE_F32)
BOTH(mamba2_q8_0, "mamba2", RG_TYPE_Q8_0)
// gemma3: sliding-window layers, per-head q/k norms; gemma2: capped scores (the CPU: the kinds' per-sequence
// parts are the same code on either device).
CPU_CASE(gemma3_f32, "gemma3", RG_TYPE_F32)
CPU_CASE(gemma2_q8_0, "gemma2", RG_TYPE_Q8_0)

static const rg_test_case cases[] = {
    RG_TEST(test_llama_f32),       RG_TEST(test_llama_q8_0),       RG_TEST(test_qwen2_f32),
    RG_TEST(test_qwen2_q8_0),      RG_TEST(test_lfm2_f32),         RG_TEST(test_lfm2_q8_0),
    RG_TEST(test_mamba2_f32),      RG_TEST(test_mamba2_q8_0),      RG_TEST(test_gemma3_f32),
    RG_TEST(test_gemma2_q8_0),     RG_TEST(test_cuda_llama_f32),
    RG_TEST(test_cuda_llama_q8_0), RG_TEST(test_cuda_qwen2_f32),   RG_TEST(test_cuda_qwen2_q8_0),
    RG_TEST(test_cuda_lfm2_f32),   RG_TEST(test_cuda_lfm2_q8_0),   RG_TEST(test_cuda_mamba2_f32),
    RG_TEST(test_cuda_mamba2_q8_0), {0}};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
