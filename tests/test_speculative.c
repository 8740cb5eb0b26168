// test_speculative.c - speculative decoding (infer/speculative.h): the prompt-lookup drafter's
// proposals on hand-made token arrays; on the tiny fixtures and SmolLM2, a token's logits in a
// verification batch (rg_session_eval_exact) the bits of the same token evaluated alone (per weight type), greedy
// output with --draft ngram and with a draft model (the target's Q4_0 copy) token for token that
// of generation without speculation; speculative sampling's first token drawn with the sampler's
// distribution, and seeded runs reproducible; a draft model with another vocabulary refused, and
// a recurrent target's rewind past a rejected draft refused with a clear error.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infer/session.h"
#include "infer/speculative.h"
#include "model/quantize.h"
#include "model/tiny.h"
#include "rg_test.h"

// --- the ngram drafter on hand-made arrays

typedef struct ngram_case {
    const char *what;
    int32_t toks[16];
    int n, ngram_max, draft_max;
    int32_t want[16];
    int n_want;
} ngram_case;

static const ngram_case ngram_cases[] = {
    {"the suffix 1 2 3 seen at 0, then its period 4", {1, 2, 3, 4, 1, 2, 3}, 7, 3, 8, {4, 1, 2, 3, 4, 1, 2, 3}, 8},
    {"draft_max caps it", {1, 2, 3, 4, 1, 2, 3}, 7, 3, 2, {4, 1}, 2},
    {"no earlier occurrence", {1, 2, 3, 4}, 4, 3, 8, {0}, 0},
    {"down to one token: a third of draft_max, rounded up", {5, 6, 7, 9, 7}, 5, 3, 5, {9, 7}, 2},
    {"one token at ngram_max 1: all of draft_max, period 2", {5, 6, 7, 9, 7}, 5, 1, 5, {9, 7, 9, 7, 9}, 5},
    {"the latest occurrence of the suffix", {1, 2, 1, 3, 1}, 5, 3, 3, {3}, 1},
    {"the longest suffix before a later shorter one", {1, 2, 3, 8, 9, 3, 7, 1, 2, 3}, 10, 3, 8, {8, 9, 3, 7, 1, 2, 3, 8}, 8},
    {"ngram_max 1 takes the later single token", {1, 2, 3, 8, 9, 3, 7, 1, 2, 3}, 10, 1, 4, {7, 1, 2, 3}, 4},
    {"a run of one token goes on", {4, 4, 4, 4}, 4, 3, 6, {4, 4, 4, 4, 4, 4}, 6},
    {"a match of 2 of 3: two thirds, rounded up", {1, 2, 5, 6, 7, 8, 0, 1, 2}, 9, 3, 4, {5, 6, 7}, 3},
    {"followers before the end need no period", {1, 2, 5, 6, 7, 8, 0, 1, 2}, 9, 2, 4, {5, 6, 7, 8}, 4},
    {"one token", {4}, 1, 3, 8, {0}, 0},
    {"empty", {0}, 0, 3, 8, {0}, 0},
};

static void test_ngram_drafts(void) {
    for (size_t c = 0; c < sizeof ngram_cases / sizeof ngram_cases[0]; c++) {
        const ngram_case *t = &ngram_cases[c];
        int32_t out[16] = {0};
        int64_t k = rg_spec_ngram_draft(t->toks, t->n, t->ngram_max, t->draft_max, out);
        bool ok = k == t->n_want && memcmp(out, t->want, (size_t)k * sizeof *out) == 0;
        RG_CHECK(ok, "%s: %lld drafts (%d %d %d ...), want %d (%d %d %d ...)", t->what, (long long)k, out[0], out[1],
                 out[2], t->n_want, t->want[0], t->want[1], t->want[2]);
    }
}

// --- the tiny fixtures

// A tiny model of arch in type (quantized types written in F32, then quantized), from seed 5; path gets its file.
static rg_model *tiny_model(const char *arch, uint32_t type, char *path, rg_tokenizer **tok) {
    strcpy(path, "/tmp/rg_test_specXXXXXX");
    close(mkstemp(path));
    const bool quantized = rg_type_get(type)->quantized;
    rg_tiny_config cfg = {.arch = arch, .type = quantized ? RG_TYPE_F32 : type, .seed = 5, .n_threads = 2};
    rg_quantize_opts qo = {.n_threads = 2, .pure = true};
    rg_quantize_summary qs;
    rg_error err = {0};
    rg_model *m = NULL;
    if (rg_tiny_write(&cfg, path, &err) ||
        (quantized && rg_quantize_file(path, path, rg_type_get(type)->name, &qo, &qs, &err)) ||
        rg_model_load(&m, path, &err) || (tok && rg_tokenizer_load(tok, m->file, &err))) {
        printf("    %s\n", err.msg);
        return NULL;
    }
    return m;
}

enum { N_PROMPT = 24, N_GEN = 40 };

// A prompt that repeats itself: 12 tokens twice (the ngram drafter finds its continuation).
static void repeating_prompt(int32_t *ids, int64_t V) {
    for (int i = 0; i < N_PROMPT; i++) ids[i] = (int32_t)(((i % 12) * 37 + 11) % V);
}

static rg_session *session(const rg_model *m) {
    rg_session *s = NULL;
    rg_error err = {0};
    rg_session_opts so = {.n_ctx = 128, .n_threads = 2};
    if (rg_session_create(&s, m, &so, &err)) printf("    %s\n", err.msg);
    return s;
}

// n tokens after the prompt without speculation, as `generate` draws them: the prompt's last logits, then one
// token at a time (the draw is not evaluated).
static bool generate_plain(const rg_model *m, const rg_sampler_params *p, const int32_t *prompt, int32_t *out, int n) {
    const int64_t V = m->hp.n_vocab;
    rg_session *s = session(m);
    rg_sampler *smp = NULL;
    float *logits = malloc(sizeof(float) * V);
    rg_error err = {0};
    bool ok = s && !rg_sampler_create(&smp, p, (int32_t)V, &err);
    for (int i = 0; ok && i < N_PROMPT; i++) rg_sampler_accept(smp, prompt[i]);
    ok = ok && !rg_session_eval(s, prompt, N_PROMPT, logits, 0, &err);
    for (int i = 0; ok && i < n; i++) {
        out[i] = rg_sampler_sample(smp, logits);
        rg_sampler_accept(smp, out[i]);
        if (i + 1 < n) ok = !rg_session_eval(s, &out[i], 1, logits, 0, &err);
    }
    if (!ok) printf("    plain generation: %s\n", err.msg);
    rg_sampler_free(smp);
    rg_session_free(s);
    free(logits);
    return ok;
}

// The same with speculation (draft: the draft model's session, or NULL for ngram); the decoder's stats.
// Returns the status; err says why.
static rg_status generate_spec(const rg_model *m, rg_session *draft, int draft_max, const rg_sampler_params *p,
                               const int32_t *prompt, int32_t *out, int n, rg_spec_stats *stats, rg_error *err) {
    const int64_t V = m->hp.n_vocab;
    rg_session *s = session(m);
    rg_sampler *smp = NULL;
    rg_spec *sp = NULL;
    float *logits = malloc(sizeof(float) * V);
    int32_t q[17];
    rg_spec_opts o = {.kind = draft ? RG_DRAFT_MODEL : RG_DRAFT_NGRAM, .draft_max = draft_max, .draft = draft};
    rg_status st = s ? rg_sampler_create(&smp, p, (int32_t)V, err) : RG_ERR_ARG;
    if (!st) st = rg_spec_create(&sp, s, &o, err);
    for (int i = 0; !st && i < N_PROMPT; i++) rg_sampler_accept(smp, prompt[i]);
    if (!st) st = rg_session_eval(s, prompt, N_PROMPT, logits, 0, err);
    if (!st) st = rg_spec_push(sp, prompt, N_PROMPT, err);
    int64_t n_q = 0, i_q = 0;
    bool in_history = false;
    for (int i = 0; !st && i < n; i++) {
        out[i] = i == 0 ? rg_sampler_sample(smp, logits) : q[i_q++];
        if (i > 0) in_history = i_q < n_q;
        if (!in_history) rg_sampler_accept(smp, out[i]);
        if (i + 1 < n && i_q == n_q) {
            st = rg_spec_step(sp, out[i], smp, n - i - 2, q, &n_q, err);
            i_q = 0;
        }
    }
    if (sp) *stats = rg_spec_get_stats(sp);
    rg_spec_free(sp);
    rg_sampler_free(smp);
    rg_session_free(s);
    free(logits);
    return st;
}

static rg_sampler_params greedy(void) {
    rg_sampler_params p = rg_sampler_defaults();
    p.temp = 0;
    return p;
}

enum { MAX_BATCH = 17 };  // a verification batch of draft-max 16
static const int32_t more[MAX_BATCH] = {7, 300, 42, 7, 11, 480, 3, 99, 7, 5, 61, 300, 42, 8, 250, 1, 7};

// Whether n tokens evaluated in one batch after the prompt (exact: rg_session_eval_exact, the verification batch;
// else rg_session_eval's prompt batch) give the bits of the same tokens evaluated one at a time (n <= MAX_BATCH):
// the rows of a verification batch against what generation without speculation computes. *max_rel: the largest
// difference over the largest |logit|.
static bool batch_bits_equal(const rg_model *m, const int32_t *prompt, int n, bool exact, double *max_rel) {
    const int64_t V = m->hp.n_vocab;
    float *batch = malloc(sizeof(float) * V * MAX_BATCH), *step = malloc(sizeof(float) * V * MAX_BATCH);
    rg_session *s = session(m);
    rg_error err = {0};
    bool ok = s && !rg_session_eval(s, prompt, N_PROMPT, NULL, 0, &err) &&
              !(exact ? rg_session_eval_exact(s, more, n, batch, &err) : rg_session_eval(s, more, n, batch, 1, &err)) &&
              !rg_session_rewind(s, N_PROMPT, &err);
    for (int i = 0; ok && i < n; i++) ok = !rg_session_eval(s, &more[i], 1, step + (size_t)i * V, 0, &err);
    RG_CHECK(ok, "%s", err.msg);
    bool same = ok && memcmp(batch, step, sizeof(float) * V * (size_t)n) == 0;
    double diff = 0, top = 0;
    for (int64_t i = 0; ok && i < V * n; i++) {
        double d = fabs((double)batch[i] - step[i]);
        if (d > diff) diff = d;
        if (fabs((double)step[i]) > top) top = fabs((double)step[i]);
    }
    *max_rel = top > 0 ? diff / top : 0;
    rg_session_free(s);
    free(batch), free(step);
    return same;
}

// Greedy with --draft ngram (draft_max drafts): the tokens of generation without it, and drafts accepted on the
// repeating prompt. The verification batches (up to draft_max + 1 tokens, rg_session_eval_exact) give the
// single-token bits (checked here, and by test_batch_bits), so equal tokens follow by construction.
static void check_greedy_ngram(uint32_t type, int draft_max) {
    char path[64];
    rg_model *m = tiny_model("qwen2", type, path, NULL);
    RG_REQUIRE(m, "model");
    int32_t prompt[N_PROMPT], plain[N_GEN], spec[N_GEN];
    repeating_prompt(prompt, m->hp.n_vocab);
    double rel;
    bool same_bits = batch_bits_equal(m, prompt, draft_max + 1, true, &rel);
    const rg_sampler_params p = greedy();
    rg_error err = {0};
    rg_spec_stats ss = {0};
    RG_REQUIRE(generate_plain(m, &p, prompt, plain, N_GEN), "plain generation");
    RG_REQUIRE(generate_spec(m, NULL, draft_max, &p, prompt, spec, N_GEN, &ss, &err) == RG_OK, "%s", err.msg);
    int first_diff = -1;
    for (int i = 0; i < N_GEN && first_diff < 0; i++)
        if (plain[i] != spec[i]) first_diff = i;
    printf("    %s, draft-max %d: batches of %d %s single-token rows (max rel %.2e); ngram: %lld drafted, %lld accepted "
           "in %lld batches; greedy %s%s\n",
           rg_type_get(type)->name, draft_max, draft_max + 1, same_bits ? "bit-identical to" : "differ from", rel, (long long)ss.n_drafted,
           (long long)ss.n_accepted, (long long)ss.n_steps,
           first_diff < 0 ? "identical" : "differs", " (by construction)");
    RG_CHECK(same_bits, "%s: exact batches of %d should give the single-token bits", rg_type_get(type)->name,
             draft_max + 1);
    RG_CHECK(first_diff < 0, "%s: greedy with --draft ngram differs at token %d: %d against %d", rg_type_get(type)->name,
             first_diff, first_diff >= 0 ? spec[first_diff] : 0, first_diff >= 0 ? plain[first_diff] : 0);
    RG_CHECK(ss.n_accepted > 0 && ss.n_steps < N_GEN - 1, "%s: no draft accepted on a repeating prompt",
             rg_type_get(type)->name);
    rg_model_free(m);
    unlink(path);
}

static void test_greedy_ngram_f32(void) { check_greedy_ngram(RG_TYPE_F32, 8); }
static void test_greedy_ngram_f16(void) { check_greedy_ngram(RG_TYPE_F16, 8); }
static void test_greedy_ngram_q8_0(void) { check_greedy_ngram(RG_TYPE_Q8_0, 8); }
static void test_greedy_ngram_q4_0(void) { check_greedy_ngram(RG_TYPE_Q4_0, 16); }
static void test_greedy_ngram_q4_k(void) { check_greedy_ngram(RG_TYPE_Q4_K, 16); }
static void test_greedy_ngram_q8_0_short(void) { check_greedy_ngram(RG_TYPE_Q8_0, 2); }

// Greedy with a draft model: the F32 target drafted for by its own Q4_0 copy (the same vocabulary).
static void test_greedy_draft_model(void) {
    char path[64], dpath[64];
    rg_tokenizer *tok = NULL, *dtok = NULL;
    rg_model *m = tiny_model("qwen2", RG_TYPE_F32, path, &tok), *dm = tiny_model("qwen2", RG_TYPE_Q4_0, dpath, &dtok);
    RG_REQUIRE(m && dm, "models");
    rg_error err = {0};
    RG_CHECK(rg_spec_vocab_check(tok, m->hp.n_vocab, dtok, dm->hp.n_vocab, &err) == RG_OK, "%s", err.msg);
    int32_t prompt[N_PROMPT], plain[N_GEN], spec[N_GEN];
    repeating_prompt(prompt, m->hp.n_vocab);
    const rg_sampler_params p = greedy();
    rg_spec_stats ss = {0};
    rg_session *ds = session(dm);
    RG_REQUIRE(ds && generate_plain(m, &p, prompt, plain, N_GEN), "plain generation");
    RG_REQUIRE(generate_spec(m, ds, 8, &p, prompt, spec, N_GEN, &ss, &err) == RG_OK, "%s", err.msg);
    printf("    draft model (Q4_0 for F32): %lld drafted, %lld accepted in %lld batches\n", (long long)ss.n_drafted,
           (long long)ss.n_accepted, (long long)ss.n_steps);
    RG_CHECK(memcmp(plain, spec, sizeof plain) == 0, "greedy with a draft model differs from generation without it");
    RG_CHECK(ss.n_accepted > 0, "the target's own Q4_0 copy had no draft accepted");
    rg_session_free(ds);
    rg_tokenizer_free(tok), rg_tokenizer_free(dtok);
    rg_model_free(m), rg_model_free(dm);
    unlink(path), unlink(dpath);
}

// Another vocabulary: the texts (lfm2's specials against qwen2's ChatML ones) and the sizes named.
static void test_draft_vocab_refused(void) {
    char path[64], dpath[64];
    rg_tokenizer *tok = NULL, *dtok = NULL;
    rg_model *m = tiny_model("qwen2", RG_TYPE_F32, path, &tok), *dm = tiny_model("lfm2", RG_TYPE_F32, dpath, &dtok);
    RG_REQUIRE(m && dm, "models");
    rg_error err = {0};
    rg_status st = rg_spec_vocab_check(tok, m->hp.n_vocab, dtok, dm->hp.n_vocab, &err);
    printf("    lfm2's vocabulary for qwen2: %s\n", err.msg);
    RG_CHECK(st == RG_ERR_ARG && strstr(err.msg, "not the target's"), "%s", err.msg);
    st = rg_spec_vocab_check(tok, m->hp.n_vocab, tok, m->hp.n_vocab + 1, &err);
    RG_CHECK(st == RG_ERR_ARG && strstr(err.msg, "n_vocab 513 against the target's 512"), "%s", err.msg);
    rg_tokenizer_free(tok), rg_tokenizer_free(dtok);
    rg_model_free(m), rg_model_free(dm);
    unlink(path), unlink(dpath);
}

// A recurrent target: a rejected draft needs a rewind into the short-conv state. Until the session keeps
// snapshots it is refused, naming the rewind; once it keeps them the step must give the plain greedy tokens.
static void test_recurrent_target(void) {
    char path[64];
    rg_model *m = tiny_model("lfm2", RG_TYPE_F32, path, NULL);
    RG_REQUIRE(m, "model");
    const int64_t V = m->hp.n_vocab;
    int32_t prompt[N_PROMPT], plain[3];
    repeating_prompt(prompt, V);
    const rg_sampler_params p = greedy();
    RG_REQUIRE(generate_plain(m, &p, prompt, plain, 3), "plain generation");
    rg_session *s = session(m);
    rg_sampler *smp = NULL;
    rg_spec *sp = NULL;
    rg_error err = {0};
    rg_spec_opts o = {.kind = RG_DRAFT_NGRAM, .draft_max = 4};
    RG_REQUIRE(s && !rg_sampler_create(&smp, &p, (int32_t)V, &err) && !rg_spec_create(&sp, s, &o, &err), "%s", err.msg);
    RG_REQUIRE(!rg_session_eval(s, prompt, N_PROMPT, NULL, 0, &err) && !rg_spec_push(sp, prompt, N_PROMPT, &err), "%s",
               err.msg);
    // plain[0] drawn; drafts: the right second token, then a wrong one
    const int32_t drafts[2] = {plain[1], (plain[2] + 1) % (int32_t)V};
    int32_t out[5];
    int64_t n_out = 0;
    rg_sampler_accept(smp, plain[0]);
    rg_status st = rg_spec_verify(sp, plain[0], drafts, 2, smp, out, &n_out, &err);
    if (st) {
        printf("    lfm2 target, a rejected draft: %s\n", err.msg);
        RG_CHECK(st == RG_ERR_UNSUPPORTED && strstr(err.msg, "cannot drop the rejected drafts") &&
                 strstr(err.msg, "rewind to position 26"), "%s", err.msg);
    } else {
        RG_CHECK(n_out == 2 && out[0] == plain[1] && out[1] == plain[2] && rg_session_n_past(s) == N_PROMPT + 2,
                 "lfm2 after the rewind: %lld tokens (%d %d), want 2 (%d %d)", (long long)n_out, out[0], out[1], plain[1],
                 plain[2]);
    }
    rg_spec_free(sp);
    rg_sampler_free(smp);
    rg_session_free(s);
    rg_model_free(m);
    unlink(path);
}

// Speculative sampling keeps the sampler's distribution: the token after a forced draft d, over many
// verifications of the same context, comes out as often as the chain's p says (4 standard deviations), d
// included (kept with p(d)); and a seeded generation gives the same tokens twice.
static void test_sampling(void) {
    char path[64];
    rg_model *m = tiny_model("qwen2", RG_TYPE_F32, path, NULL);
    RG_REQUIRE(m, "model");
    const int64_t V = m->hp.n_vocab;
    int32_t prompt[N_PROMPT];
    repeating_prompt(prompt, V);
    rg_sampler_params p = rg_sampler_defaults();
    p.temp = 1.5f, p.top_k = 6, p.top_p = 1, p.min_p = 0, p.seed = 7;
    rg_session *s = session(m);
    rg_sampler *smp = NULL;
    rg_spec *sp = NULL;
    rg_error err = {0};
    rg_spec_opts o = {.kind = RG_DRAFT_NGRAM, .draft_max = 2};
    RG_REQUIRE(s && !rg_sampler_create(&smp, &p, (int32_t)V, &err) && !rg_spec_create(&sp, s, &o, &err), "%s", err.msg);
    RG_REQUIRE(!rg_session_eval(s, prompt, N_PROMPT - 1, NULL, 0, &err) && !rg_spec_push(sp, prompt, N_PROMPT - 1, &err),
               "%s", err.msg);
    const int32_t last = prompt[N_PROMPT - 1];
    // the chain's distribution at the draft's position: the batch's row 0 (the bits verification sees)
    float *rows = malloc(sizeof(float) * V * 2);
    int32_t ids[8];
    double probs[8];
    const int32_t pair[2] = {last, 0};
    RG_REQUIRE(!rg_session_eval(s, pair, 2, rows, 1, &err) && !rg_session_rewind(s, N_PROMPT - 1, &err), "%s", err.msg);
    int64_t nc = rg_sampler_candidates(smp, rows, ids, probs, 8);
    RG_REQUIRE(nc == 6, "%lld candidates", (long long)nc);
    const int32_t d = ids[2];  // a draft of middling probability
    enum { TRIALS = 3000 };
    int counts[6] = {0}, other = 0;
    for (int t = 0; t < TRIALS; t++) {
        // a fresh decoder over the same context (made after it: its context starts there) and a sampler of another
        // seed: another pair of uniforms
        rg_sampler *ts = NULL;
        rg_sampler_params pt = p;
        pt.seed = 1000 + (uint64_t)t;
        rg_spec_free(sp);
        sp = NULL;
        RG_REQUIRE(!rg_sampler_create(&ts, &pt, (int32_t)V, &err) && !rg_spec_create(&sp, s, &o, &err), "%s", err.msg);
        int32_t out[3];
        int64_t n_out = 0;
        rg_status st = rg_spec_verify(sp, last, &d, 1, ts, out, &n_out, &err);
        rg_sampler_free(ts);
        RG_REQUIRE(!st && !rg_session_rewind(s, N_PROMPT - 1, &err), "%s", err.msg);
        int j = 0;
        while (j < 6 && ids[j] != out[0]) j++;
        if (j < 6) counts[j]++;
        else other++;
    }
    double worst = 0;
    for (int j = 0; j < 6; j++) {
        double mean = TRIALS * probs[j], sd = sqrt(TRIALS * probs[j] * (1 - probs[j])) + 1e-9;
        double z = fabs(counts[j] - mean) / sd;
        if (z > worst) worst = z;
    }
    printf("    temp 1.5, top-k 6, draft = the 3rd candidate (p %.3f): %d trials, worst deviation %.2f sd\n", probs[2],
           TRIALS, worst);
    RG_CHECK(other == 0 && worst < 4.0, "speculative sampling's first token is off the distribution: %.2f sd, %d outside",
             worst, other);
    rg_spec_free(sp);
    rg_sampler_free(smp);
    rg_session_free(s);
    free(rows);
    // seeded runs reproducible
    int32_t a[N_GEN], b[N_GEN];
    rg_spec_stats ss;
    p.top_k = 40, p.temp = 0.8f;
    RG_REQUIRE(generate_spec(m, NULL, 8, &p, prompt, a, N_GEN, &ss, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(generate_spec(m, NULL, 8, &p, prompt, b, N_GEN, &ss, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(memcmp(a, b, sizeof a) == 0, "two seeded runs with --draft ngram differ");
    rg_model_free(m);
    unlink(path);
}

// Verification batches (rg_session_eval_exact) give the bits of single-token steps for every weight type and
// batch size 2..17 (memcmp); rg_session_eval's prompt batches of the same tokens are printed beside them, the
// control: they take the SGEMM (F32 activations) past a few columns and differ by a rounding or more.
static void test_batch_bits(void) {
    const uint32_t types[] = {RG_TYPE_F32, RG_TYPE_F16, RG_TYPE_BF16, RG_TYPE_Q8_0, RG_TYPE_Q4_0, RG_TYPE_Q4_1,
                              RG_TYPE_Q4_K, RG_TYPE_Q6_K};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        char path[64];
        rg_model *m = tiny_model("qwen2", types[t], path, NULL);
        RG_REQUIRE(m, "model");
        int32_t prompt[N_PROMPT];
        repeating_prompt(prompt, m->hp.n_vocab);
        printf("    %-5s exact:", rg_type_get(types[t])->name);
        int differ = 0;
        double rel;
        for (int n = 2; n <= MAX_BATCH; n++) differ += !batch_bits_equal(m, prompt, n, true, &rel);
        printf(" %s; prompt batches:", differ ? "DIFFER" : "the same bits at 2..17");
        for (int n = 2; n <= MAX_BATCH; n += 5) {
            bool same = batch_bits_equal(m, prompt, n, false, &rel);
            printf(" %d:%s", n, same ? "same" : "");
            if (!same) printf("%.1e", rel);
        }
        printf("\n");
        RG_CHECK(differ == 0, "%s: %d exact batch sizes of 2..17 differ from single-token steps",
                 rg_type_get(types[t])->name, differ);
        rg_model_free(m);
        unlink(path);
    }
}

// The same for a real model after a prompt of 100 tokens: exact batches of 2..17 the single-token bits (memcmp),
// prompt batches printed as the control; then greedy generation of 64 tokens after a prompt that repeats itself,
// with --draft ngram (draft-max 8 and 16): the tokens of generation without it.
static void check_batch_bits_model(const char *path) {
    rg_model *m = NULL;
    rg_error err = {0};
    RG_REQUIRE(rg_model_load(&m, path, &err) == RG_OK, "%s", err.msg);
    const int64_t V = m->hp.n_vocab;
    enum { NP = 100 };
    int32_t prompt[NP];
    for (int i = 0; i < NP; i++) prompt[i] = (int32_t)((i * 7919 + 13) % V);
    float *batch = malloc(sizeof(float) * V * MAX_BATCH), *step = malloc(sizeof(float) * V * MAX_BATCH);
    rg_session *s = NULL;
    rg_session_opts so = {.n_ctx = 256, .n_threads = 2};
    RG_REQUIRE(!rg_session_create(&s, m, &so, &err) && !rg_session_eval(s, prompt, NP, NULL, 0, &err), "%s", err.msg);
    printf("    %s: exact (prompt batch):", path);
    for (int n = 2; n <= MAX_BATCH; n += 3) {
        bool ok = true;
        for (int i = 0; ok && i < n; i++) ok = !rg_session_eval(s, &more[i], 1, step + (size_t)i * V, 0, &err);
        ok = ok && !rg_session_rewind(s, NP, &err) && !rg_session_eval_exact(s, more, n, batch, &err) &&
             !rg_session_rewind(s, NP, &err);
        RG_REQUIRE(ok, "%s", err.msg);
        const bool same = !memcmp(batch, step, sizeof(float) * (size_t)(V * n));
        ok = !rg_session_eval(s, more, n, batch, 1, &err) && !rg_session_rewind(s, NP, &err);
        RG_REQUIRE(ok, "%s", err.msg);
        double diff = 0, top = 0;
        for (int64_t i = 0; i < V * n; i++) {
            double d = fabs((double)batch[i] - step[i]);
            if (d > diff) diff = d;
            if (fabs((double)step[i]) > top) top = fabs((double)step[i]);
        }
        printf(" %d:%s (%.1e)", n, same ? "same" : "DIFFERS", diff / top);
        RG_CHECK(same, "an exact batch of %d is not the single-token bits", n);
    }
    printf("\n");
    rg_session_free(s);
    free(batch), free(step);
    // greedy: a prompt of 12 tokens repeated twice (the ngram drafter finds its continuation)
    int32_t rp[N_PROMPT], plain[64], spec[64];
    for (int i = 0; i < N_PROMPT; i++) rp[i] = prompt[i % 12];
    const rg_sampler_params p = greedy();
    RG_REQUIRE(generate_plain(m, &p, rp, plain, 64), "plain generation");
    for (int dm = 8; dm <= 16; dm += 8) {
        rg_spec_stats ss = {0};
        RG_REQUIRE(generate_spec(m, NULL, dm, &p, rp, spec, 64, &ss, &err) == RG_OK, "%s", err.msg);
        printf("    greedy, draft-max %d: %lld drafted, %lld accepted in %lld batches; %s\n", dm, (long long)ss.n_drafted,
               (long long)ss.n_accepted, (long long)ss.n_steps, memcmp(plain, spec, sizeof plain) ? "DIFFERS" : "identical");
        RG_CHECK(!memcmp(plain, spec, sizeof plain), "greedy with --draft ngram (draft-max %d) differs on %s", dm, path);
    }
    rg_model_free(m);
}

// RG_SPEC_MODEL=FILE, else RG_SMOLLM2's file (llama-shaped, Q4_1); a skip without either.
static void test_batch_bits_model(void) {
    const char *path = getenv("RG_SPEC_MODEL");
    if (!path || !*path) path = getenv("RG_SMOLLM2");
    if (!path || !*path) RG_SKIP("neither RG_SPEC_MODEL nor RG_SMOLLM2 names a model");
    check_batch_bits_model(path);
}

// RG_GEMMA3's Gemma-3-270M (Q4_K_M; sliding-window layers, a head of 262,144 tokens); a skip without it.
static void test_batch_bits_gemma3(void) {
    const char *path = getenv("RG_GEMMA3");
    if (!path || !*path) RG_SKIP("RG_GEMMA3 names no model (scripts/gemma3.sh installs it)");
    check_batch_bits_model(path);
}

// rg_spec_rewind: after verified runs, a rewind of the target with the decoder (a stop inside a verified run, a
// chat's next turn) leaves the decoder in step: greedy steps from there give the tokens of plain generation from
// the same point; below the decoder's start it is refused, changing nothing.
static void test_spec_rewind(void) {
    char path[64];
    rg_model *m = tiny_model("qwen2", RG_TYPE_F32, path, NULL);
    RG_REQUIRE(m, "model");
    const int64_t V = m->hp.n_vocab;
    int32_t prompt[N_PROMPT], plain[N_GEN], q[9];
    repeating_prompt(prompt, V);
    const rg_sampler_params p = greedy();
    RG_REQUIRE(generate_plain(m, &p, prompt, plain, N_GEN), "plain generation");
    rg_session *s = session(m);
    rg_sampler *smp = NULL;
    rg_spec *sp = NULL;
    rg_error err = {0};
    rg_spec_opts o = {.kind = RG_DRAFT_NGRAM, .draft_max = 8};
    RG_REQUIRE(s && !rg_sampler_create(&smp, &p, (int32_t)V, &err) && !rg_spec_create(&sp, s, &o, &err), "%s", err.msg);
    RG_REQUIRE(!rg_session_eval(s, prompt, N_PROMPT, NULL, 0, &err) && !rg_spec_push(sp, prompt, N_PROMPT, &err), "%s",
               err.msg);
    // verified runs from plain[0] on (each drawn token is plain's: greedy is exact), until the target is 20 past
    int64_t at = 0, n_q = 0;
    for (int i = 0; i < N_PROMPT; i++) rg_sampler_accept(smp, prompt[i]);
    rg_sampler_accept(smp, plain[0]);
    while (rg_session_n_past(s) < N_PROMPT + 20) {
        RG_REQUIRE(!rg_spec_step(sp, plain[at], smp, 8, q, &n_q, &err), "%s", err.msg);
        RG_CHECK(!memcmp(q, plain + at + 1, sizeof(int32_t) * (size_t)n_q), "a verified run is not plain's tokens");
        at += n_q;
        rg_sampler_accept(smp, plain[at]);
    }
    // back to N_PROMPT + 10 (plain[10] drawn, not evaluated), with a fresh sampler history to match
    const int64_t pos = N_PROMPT + 10;
    {  // a decoder made after the prompt starts there: a rewind below it is refused, changing nothing
        rg_session *s2 = session(m);
        rg_spec *sp2 = NULL;
        RG_REQUIRE(s2 && !rg_session_eval(s2, prompt, N_PROMPT, NULL, 0, &err) && !rg_spec_create(&sp2, s2, &o, &err),
                   "%s", err.msg);
        RG_CHECK(rg_spec_rewind(sp2, N_PROMPT - 1, &err) == RG_ERR_ARG && rg_session_n_past(s2) == N_PROMPT,
                 "a rewind below the decoder's start was not refused");
        printf("    below the start: %s\n", err.msg);
        rg_spec_free(sp2);
        rg_session_free(s2);
    }
    RG_REQUIRE(rg_spec_rewind(sp, pos, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(rg_session_n_past(s) == pos, "n_past %lld after the rewind", (long long)rg_session_n_past(s));
    rg_sampler_free(smp);
    RG_REQUIRE(!rg_sampler_create(&smp, &p, (int32_t)V, &err), "%s", err.msg);
    for (int i = 0; i < N_PROMPT; i++) rg_sampler_accept(smp, prompt[i]);
    for (int i = 0; i <= 10; i++) rg_sampler_accept(smp, plain[i]);
    at = 10;
    bool same = true;
    while (at + 9 < N_GEN) {
        rg_status st = rg_spec_step(sp, plain[at], smp, 8, q, &n_q, &err);
        RG_REQUIRE(st == RG_OK, "after the rewind: %s", err.msg);
        same = same && !memcmp(q, plain + at + 1, sizeof(int32_t) * (size_t)n_q);
        at += n_q;
        rg_sampler_accept(smp, plain[at]);
    }
    RG_CHECK(same, "after rg_spec_rewind the verified runs are not plain generation's tokens");
    rg_spec_free(sp);
    rg_sampler_free(smp);
    rg_session_free(s);
    rg_model_free(m);
    unlink(path);
}

static const rg_test_case cases[] = {
    RG_TEST(test_batch_bits),
    RG_TEST(test_batch_bits_model),
    RG_TEST(test_batch_bits_gemma3),
    RG_TEST(test_ngram_drafts),
    RG_TEST(test_greedy_ngram_f32),
    RG_TEST(test_greedy_ngram_f16),
    RG_TEST(test_greedy_ngram_q8_0),
    RG_TEST(test_greedy_ngram_q4_0),
    RG_TEST(test_greedy_ngram_q4_k),
    RG_TEST(test_greedy_ngram_q8_0_short),
    RG_TEST(test_greedy_draft_model),
    RG_TEST(test_draft_vocab_refused),
    RG_TEST(test_recurrent_target),
    RG_TEST(test_sampling),
    RG_TEST(test_spec_rewind),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
