// test_engine.c - continuous batching (infer/engine.h) on the tiny llama (attention) and lfm2 (short conv +
// attention: its prefix reuse runs through the snapshots) fixtures, F32 and Q8_0, on the CPU and the CUDA device
// (a GPU, or the host execution of the CUDA code):
//   - alone: seven requests (greedy and seeded draws, prompts of 3..19 tokens against chunks of 8) on three slots,
//     so four wait in the queue and take slots others freed; each request's tokens are those it gets on an engine
//     of one slot by itself, and each ends with its finish reason (max_tokens) and no cached prompt tokens
//   - prefix reuse: a request, then its conversation resent with the reply and a new message (the cache keeps
//     everything the slot evaluated), then again with the reply's second half edited (a rewind into the single
//     tokens); each request's tokens are a session's fed the same history the same way, and the events report
//     how many prompt tokens the cache held
//   - stop tokens end a request without emitting them; a cancel ends a queued request and a running one, the
//     others unchanged
//   - the same request again: the same tokens (greedy and seeded), the chunks before the prompt's last from the cache;
//     also after a longer prompt went through the slot, and after the slot went to a file, was emptied and came back
//   - logprobs: the log-softmax of a session's logits, the alternatives in order with the greedy token first
//   - bad requests refused, nothing queued: an empty prompt, ids outside the vocabulary, a prompt filling the
//     context, invalid sampling
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infer/engine.h"
#include "rg_test.h"
#include "session_fixture.h"

enum { N_REQ = 7, MAX_GEN = 12, N_CTX = 64, N_BATCH = 8 };

static rg_device device = RG_DEVICE_CPU;  // the engines' (each test sets it)

typedef struct record {
    int32_t tokens[N_REQ + 8][MAX_GEN + 1];
    int n[N_REQ + 8];
    rg_finish finish[N_REQ + 8];
    int64_t cached[N_REQ + 8];
    int order_errors;
} record;

static void on_event(void *user, const rg_engine_event *ev) {
    record *r = user;
    if (ev->id < 0 || ev->id >= N_REQ + 8) return;
    if (r->finish[ev->id] != RG_FINISH_NONE) r->order_errors++;  // an event after the end
    if (ev->finish == RG_FINISH_NONE) {
        if (r->n[ev->id] < MAX_GEN + 1) r->tokens[ev->id][r->n[ev->id]++] = ev->token;
    } else {
        r->finish[ev->id] = ev->finish;
        r->cached[ev->id] = ev->n_cached;
    }
}

static rg_engine *new_engine(const rg_model *m, int n_slots, record *rec, rg_error *err) {
    memset(rec, 0, sizeof *rec);
    rg_engine *e = NULL;
    rg_engine_opts o = {.n_slots = n_slots, .n_ctx = N_CTX, .n_batch = N_BATCH, .n_threads = 2, .device = device,
                        .on_event = on_event, .user = rec};
    if (rg_engine_create(&e, m, &o, err)) e = NULL;
    return e;
}

static bool run_all(rg_engine *e, rg_error *err) {
    for (int i = 0; i < 200 && rg_engine_pending(e) > 0; i++)
        if (rg_engine_step(e, err)) return false;
    return rg_engine_pending(e) == 0;
}

// Request i: its prompt (distinct first tokens, so no two share a prefix), greedy or seeded draws.
static int64_t request_of(int i, int64_t V, int32_t *prompt, rg_engine_request *r) {
    const int64_t n = 3 + (i * 5) % 17;
    for (int64_t t = 0; t < n; t++) prompt[t] = (int32_t)((i + 1 + t * (31 + i)) % V);
    *r = (rg_engine_request){.prompt = prompt, .n_prompt = n, .sampling = rg_sampler_defaults(),
                             .max_tokens = 4 + i % 5};
    if (i % 2) r->sampling.temp = 0;
    r->sampling.seed = 100 + (uint64_t)i;
    return n;
}

static void check_alone(const rg_model *m, const char *tag) {
    const int64_t V = m->hp.n_vocab;
    rg_error err = {0};
    static record many, one;
    rg_engine *e = new_engine(m, 3, &many, &err);
    RG_REQUIRE(e != NULL, "%s engine: %s", tag, err.msg);
    int32_t prompts[N_REQ][32];
    for (int i = 0; i < N_REQ; i++) {
        rg_engine_request r;
        request_of(i, V, prompts[i], &r);
        int id;
        RG_CHECK(!rg_engine_submit(e, &r, &id, &err) && id == i, "%s submit %d: %s", tag, i, err.msg);
    }
    RG_CHECK(run_all(e, &err), "%s: the requests did not finish: %s", tag, err.msg);
    rg_engine_free(e);
    int same = 0;
    for (int i = 0; i < N_REQ; i++) {
        rg_engine *a = new_engine(m, 1, &one, &err);
        rg_engine_request r;
        request_of(i, V, prompts[i], &r);
        int id;
        bool ok = a && !rg_engine_submit(a, &r, &id, &err) && run_all(a, &err);
        RG_CHECK(ok, "%s request %d alone: %s", tag, i, err.msg);
        const bool eq = ok && one.n[0] == many.n[i] && !memcmp(one.tokens[0], many.tokens[i], sizeof(int32_t) * (size_t)one.n[0]);
        RG_CHECK(eq, "%s request %d: %d tokens among others (first %d), %d alone (first %d)", tag, i, many.n[i],
                 many.tokens[i][0], one.n[0], one.tokens[0][0]);
        RG_CHECK(many.finish[i] == RG_FINISH_LENGTH && many.n[i] == r.max_tokens && many.cached[i] == 0,
                 "%s request %d: finish %d after %d tokens (max %lld), %lld cached", tag, i, many.finish[i], many.n[i],
                 (long long)r.max_tokens, (long long)many.cached[i]);
        same += eq;
        rg_engine_free(a);
    }
    RG_CHECK(many.order_errors == 0, "%s: %d events after a request's end", tag, many.order_errors);
    printf("    %-32s %d requests on 3 slots: %d with their tokens alone\n", tag, N_REQ, same);
}

// A session fed hist as the engine's slot was: parts in order, each n tokens in chunks of n_batch or one at a time
// (single); then max greedy draws into out, each evaluated but the last. Returns how many, or -1.
typedef struct run_part {
    int64_t n;
    bool single;
} run_part;

static int reference(const rg_model *m, const int32_t *hist, const run_part *parts, int n_parts, int max, int32_t *out,
                     rg_error *err) {
    rg_session *s = NULL;
    rg_session_opts so = {.n_ctx = N_CTX, .n_threads = 2, .n_batch = N_BATCH, .device = device};
    if (rg_session_create(&s, m, &so, err)) return -1;
    const int64_t V = m->hp.n_vocab;
    float *logits = malloc(sizeof(float) * (size_t)V);
    int64_t at = 0;
    rg_status st = RG_OK;
    for (int p = 0; !st && p < n_parts; p++) {
        for (int64_t done = 0; !st && done < parts[p].n;) {
            const int64_t left = parts[p].n - done, step = parts[p].single ? 1 : (left < N_BATCH ? left : N_BATCH);
            st = rg_session_eval(s, hist + at, step, logits, 0, err);
            at += step, done += step;
        }
    }
    int n = 0;
    for (; !st && n < max; n++) {
        int32_t best = 0;
        for (int64_t v = 1; v < V; v++)
            if (logits[v] > logits[best]) best = (int32_t)v;
        out[n] = best;
        if (n + 1 < max) st = rg_session_eval(s, &best, 1, logits, 0, err);
    }
    free(logits);
    rg_session_free(s);
    return st ? -1 : n;
}

static void check_prefix_reuse(const rg_model *m, const char *tag) {
    const int64_t V = m->hp.n_vocab;
    rg_error err = {0};
    static record rec;
    rg_engine *e = new_engine(m, 2, &rec, &err);
    RG_REQUIRE(e != NULL, "%s engine: %s", tag, err.msg);
    int32_t p[48];
    for (int t = 0; t < 11; t++) p[t] = (int32_t)((7 + t * 13) % V);
    rg_engine_request r = {.prompt = p, .n_prompt = 11, .sampling = rg_sampler_defaults(), .max_tokens = 5};
    r.sampling.temp = 0;
    int id;
    bool ok = !rg_engine_submit(e, &r, &id, &err) && run_all(e, &err) && rec.n[0] == 5;
    RG_CHECK(ok, "%s first request: %s", tag, err.msg);
    if (!ok) {
        rg_engine_free(e);
        return;
    }
    // The conversation resent: the prompt, the reply (its last token was emitted, never evaluated), a new message.
    int64_t n = 11;
    for (int t = 0; t < 5; t++) p[n++] = rec.tokens[0][t];
    for (int t = 0; t < 6; t++) p[n++] = (int32_t)((3 + t * 17) % V);
    r.n_prompt = n;
    r.max_tokens = 4;
    const int64_t n_resent = n;
    ok = !rg_engine_submit(e, &r, &id, &err) && run_all(e, &err);
    int32_t want[8];
    const run_part parts1[] = {{11, false}, {4, true}, {n - 15, false}};
    int got = ok ? reference(m, p, parts1, 3, 4, want, &err) : -1;
    RG_CHECK(got == 4 && rec.n[1] == 4 && !memcmp(want, rec.tokens[1], sizeof(int32_t) * 4),
             "%s resent conversation: tokens differ from the session fed the same history (%s)", tag, err.msg);
    RG_CHECK(rec.cached[1] == 15, "%s resent conversation: %lld prompt tokens cached, expected 15 (the prompt and the "
             "reply's evaluated tokens)", tag, (long long)rec.cached[1]);
    // Edited: the reply's last three tokens replaced (a rewind to 13, into the single tokens).
    n = 13;
    const int32_t was = p[13];
    for (int t = 0; t < 4; t++) p[n++] = (int32_t)((5 + t * 19) % V);
    if (p[13] == was) p[13] = (int32_t)((p[13] + 1) % V);  // the edit starts at 13
    r.n_prompt = n;
    ok = !rg_engine_submit(e, &r, &id, &err) && run_all(e, &err);
    const run_part parts2[] = {{11, false}, {2, true}, {n - 13, false}};
    got = ok ? reference(m, p, parts2, 3, 4, want, &err) : -1;
    RG_CHECK(got == 4 && rec.n[2] == 4 && !memcmp(want, rec.tokens[2], sizeof(int32_t) * 4),
             "%s edited conversation: tokens differ from the session fed the same history (%s)", tag, err.msg);
    RG_CHECK(rec.cached[2] == 13, "%s edited conversation: %lld prompt tokens cached, expected 13", tag,
             (long long)rec.cached[2]);
    printf("    %-32s resent: 15 of %lld prompt tokens from the cache, edited: 13 of %lld; tokens as a session's\n",
           tag, (long long)n_resent, (long long)n);
    rg_engine_free(e);
}

static void check_stop_cancel(const rg_model *m, const char *tag) {
    const int64_t V = m->hp.n_vocab;
    rg_error err = {0};
    static record rec, alone;
    int32_t prompts[3][32];
    rg_engine_request r[3];
    for (int i = 0; i < 3; i++) request_of(i, V, prompts[i], &r[i]), r[i].max_tokens = 8, r[i].sampling.temp = 0;
    // What request 0 draws alone; then a stop on its third token.
    rg_engine *a = new_engine(m, 1, &alone, &err);
    int id;
    bool ok = a && !rg_engine_submit(a, &r[0], &id, &err) && run_all(a, &err) && alone.n[0] == 8;
    rg_engine_free(a);
    RG_REQUIRE(ok, "%s alone: %s", tag, err.msg);
    const int32_t stop = alone.tokens[0][2];
    int first = 0;
    while (alone.tokens[0][first] != stop) first++;  // the stop token's first draw
    r[0].stop = &stop, r[0].n_stop = 1;
    rg_engine *e = new_engine(m, 1, &rec, &err);  // one slot: request 2 waits in the queue
    ok = e && !rg_engine_submit(e, &r[0], &id, &err) && !rg_engine_submit(e, &r[1], &id, &err) &&
         !rg_engine_submit(e, &r[2], &id, &err);
    RG_REQUIRE(ok, "%s submit: %s", tag, err.msg);
    RG_CHECK(rg_engine_cancel(e, 2) && rec.finish[2] == RG_FINISH_CANCELLED, "%s: the queued request not cancelled", tag);
    RG_CHECK(!rg_engine_cancel(e, 2) && !rg_engine_cancel(e, 9), "%s: a cancel of no request succeeded", tag);
    for (int i = 0; i < 50 && rec.finish[0] == RG_FINISH_NONE; i++) rg_engine_step(e, &err);
    RG_CHECK(rec.finish[0] == RG_FINISH_STOP && rec.n[0] == first && !memcmp(rec.tokens[0], alone.tokens[0],
             sizeof(int32_t) * (size_t)first), "%s stop: finish %d after %d tokens, expected %d", tag, rec.finish[0],
             rec.n[0], first);
    for (int i = 0; i < 50 && rec.n[1] < 2; i++) rg_engine_step(e, &err);
    RG_CHECK(rg_engine_cancel(e, 1) && rec.finish[1] == RG_FINISH_CANCELLED && rg_engine_pending(e) == 0,
             "%s: the running request not cancelled (pending %d)", tag, rg_engine_pending(e));
    rg_engine_free(e);
}

static void check_bad_requests(const rg_model *m, const char *tag) {
    const int64_t V = m->hp.n_vocab;
    rg_error err = {0};
    static record rec;
    rg_engine *e = new_engine(m, 2, &rec, &err);
    RG_REQUIRE(e != NULL, "%s engine: %s", tag, err.msg);
    int32_t p[N_CTX];
    for (int i = 0; i < N_CTX; i++) p[i] = i % (int32_t)V;
    const int32_t bad[2] = {1, (int32_t)V};
    rg_engine_request ok = {.prompt = p, .n_prompt = 4, .sampling = rg_sampler_defaults()};
    struct {
        rg_engine_request r;
        const char *want;
    } cases[] = {
        {ok, "the prompt is empty"},
        {ok, "outside the vocabulary"},
        {ok, "leave no room in a slot's context of 64"},
        {ok, "sampling: --top-p 2 is out of range"},
        {ok, "stop token 0 is -3"},
    };
    cases[0].r.n_prompt = 0;
    cases[1].r.prompt = bad, cases[1].r.n_prompt = 2;
    cases[2].r.n_prompt = N_CTX;
    cases[3].r.sampling.top_p = 2.0f;
    const int32_t neg = -3;
    cases[4].r.stop = &neg, cases[4].r.n_stop = 1;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int id = 5;
        rg_status st = rg_engine_submit(e, &cases[i].r, &id, &err);
        RG_CHECK(st == RG_ERR_ARG && id == -1 && strstr(err.msg, cases[i].want), "%s bad request %zu: %d '%s', wanted "
                 "'%s'", tag, i, st, err.msg, cases[i].want);
    }
    RG_CHECK(rg_engine_pending(e) == 0, "%s: a refused request was queued", tag);
    rg_engine_free(e);
    rg_engine_opts o = {.n_slots = 0};
    rg_engine *none = NULL;
    RG_CHECK(rg_engine_create(&none, m, &o, &err) == RG_ERR_ARG && !none && strstr(err.msg, "0 slots"),
             "%s 0 slots: %s", tag, err.msg);
}

// The same request again (greedy, then seeded draws) on the slot that served it: the prompt's last chunk is fed
// again as it was, so the tokens are the first run's, bit for bit, and the cache held the chunks before it.
static void check_same_again(const rg_model *m, const char *tag) {
    const int64_t V = m->hp.n_vocab;
    rg_error err = {0};
    static record rec;
    rg_engine *e = new_engine(m, 1, &rec, &err);
    RG_REQUIRE(e != NULL, "%s engine: %s", tag, err.msg);
    int32_t p[19];
    for (int i = 0; i < 19; i++) p[i] = (int32_t)((i * 11 + 5) % V);
    rg_engine_request r = {.prompt = p, .n_prompt = 19, .sampling = rg_sampler_defaults(), .max_tokens = MAX_GEN};
    for (int run = 0; run < 4; run++) {  // greedy twice, then seeded draws twice
        r.sampling.temp = run < 2 ? 0.0f : 1.0f;
        r.sampling.seed = 5;
        int id;
        RG_REQUIRE(rg_engine_submit(e, &r, &id, &err) == RG_OK, "%s submit: %s", tag, err.msg);
        RG_REQUIRE(run_all(e, &err), "%s run: %s", tag, err.msg);
        if (run % 2 == 0) continue;
        RG_CHECK(rec.n[id] == rec.n[id - 1] && memcmp(rec.tokens[id], rec.tokens[id - 1], sizeof(int32_t) *
                 (size_t)rec.n[id]) == 0, "%s run %d: the same request again drew other tokens", tag, run);
        RG_CHECK(rec.cached[id] == 16, "%s run %d: %lld prompt tokens from the cache, want 16 (the chunks before "
                 "the last)", tag, run, (long long)rec.cached[id]);
    }
    // A longer prompt through the same slot in between (it keeps the first 19 tokens), then the first greedy
    // request once more: still the first run's tokens.
    int32_t longer[24];
    memcpy(longer, p, sizeof p);
    for (int i = 19; i < 24; i++) longer[i] = (int32_t)((i * 5 + 1) % V);
    rg_engine_request rl = r;
    rl.prompt = longer, rl.n_prompt = 24, rl.sampling.temp = 0;
    r.sampling.temp = 0;
    int id_long, id_again;
    RG_REQUIRE(rg_engine_submit(e, &rl, &id_long, &err) == RG_OK && run_all(e, &err), "%s longer: %s", tag, err.msg);
    RG_REQUIRE(rg_engine_submit(e, &r, &id_again, &err) == RG_OK && run_all(e, &err), "%s again: %s", tag, err.msg);
    RG_CHECK(rec.cached[id_long] >= 19, "%s: the longer prompt took %lld tokens from the cache", tag,
             (long long)rec.cached[id_long]);
    RG_CHECK(rec.n[id_again] == rec.n[0] && memcmp(rec.tokens[id_again], rec.tokens[0], sizeof(int32_t) *
             (size_t)rec.n[0]) == 0, "%s: the first request after a longer one drew other tokens", tag);
    // The slot to a file, emptied, back from the file: the same request finds its prompt and draws the same.
    char path[64];
    snprintf(path, sizeof path, "engine-slot-%d.bin", (int)getpid());
    int64_t n_saved = 0, n_loaded = 0;
    RG_CHECK(rg_engine_slot_save(e, 0, path, &n_saved, &err) == RG_OK && n_saved > 19, "%s save: %s", tag, err.msg);
    RG_CHECK(rg_engine_slot_erase(e, 0, &err) == RG_OK, "%s erase: %s", tag, err.msg);
    RG_CHECK(rg_engine_slot_load(e, 0, path, &n_loaded, &err) == RG_OK && n_loaded == n_saved, "%s load: %s", tag,
             err.msg);
    int id_loaded;
    RG_REQUIRE(rg_engine_submit(e, &r, &id_loaded, &err) == RG_OK && run_all(e, &err), "%s after load: %s", tag,
               err.msg);
    RG_CHECK(rec.cached[id_loaded] >= 18 && rec.n[id_loaded] == rec.n[0] && memcmp(rec.tokens[id_loaded],
             rec.tokens[0], sizeof(int32_t) * (size_t)rec.n[0]) == 0, "%s: after the slot's file: %lld cached, other "
             "tokens?", tag, (long long)rec.cached[id_loaded]);
    RG_CHECK(rg_engine_slot_load(e, 1, path, NULL, &err) == RG_ERR_ARG && strstr(err.msg, "slots are 0..0"),
             "%s: load into slot 1 of 1: %s", tag, err.msg);
    char tpath[80];
    snprintf(tpath, sizeof tpath, "%s.tokens", path);
    FILE *f = fopen(tpath, "r+b");
    if (f) {  // a token file whose count disagrees with the state: refused, the slot untouched
        const int64_t bad = 3;
        fseek(f, 8, SEEK_SET);
        fwrite(&bad, 8, 1, f);
        fclose(f);
    }
    RG_CHECK(rg_engine_slot_load(e, 0, path, NULL, &err) == RG_ERR_FORMAT, "%s: a corrupt token file: %s", tag,
             err.msg);
    unlink(path);
    unlink(tpath);
    rg_engine_free(e);
}

// Logprobs: a greedy request's token events carry the log-softmax of a session's logits fed the same tokens, and
// the top alternatives in order, the drawn token first; top_logprobs past the limit is refused.
typedef struct lp_record {
    int n;
    rg_engine_event ev[8];
} lp_record;

static void on_lp_event(void *user, const rg_engine_event *ev) {
    lp_record *r = user;
    if (ev->finish == RG_FINISH_NONE && r->n < 8) r->ev[r->n++] = *ev;
}

static void check_logprobs(const rg_model *m, const char *tag) {
    const int64_t V = m->hp.n_vocab;
    rg_error err = {0};
    lp_record rec = {0};
    rg_engine *e = NULL;
    rg_engine_opts o = {.n_slots = 2, .n_ctx = N_CTX, .n_batch = N_BATCH, .n_threads = 2, .device = device,
                        .on_event = on_lp_event, .user = &rec};
    RG_REQUIRE(rg_engine_create(&e, m, &o, &err) == RG_OK, "%s engine: %s", tag, err.msg);
    int32_t p[6];
    for (int i = 0; i < 6; i++) p[i] = (int32_t)((i * 7 + 3) % V);
    rg_engine_request r = {.prompt = p, .n_prompt = 6, .sampling = rg_sampler_defaults(), .max_tokens = 4,
                           .logprobs = true, .top_logprobs = 5};
    r.sampling.temp = 0;
    int id;
    RG_REQUIRE(rg_engine_submit(e, &r, &id, &err) == RG_OK, "%s submit: %s", tag, err.msg);
    RG_REQUIRE(run_all(e, &err), "%s run: %s", tag, err.msg);
    r.top_logprobs = RG_ENGINE_MAX_TOP_LOGPROBS + 1;
    RG_CHECK(rg_engine_submit(e, &r, &id, &err) == RG_ERR_ARG && strstr(err.msg, "top_logprobs"), "%s: %s", tag,
             err.msg);
    rg_engine_free(e);
    RG_REQUIRE(rec.n == 4, "%s: %d token events", tag, rec.n);
    rg_session *s = NULL;
    rg_session_opts so = {.n_ctx = N_CTX, .n_threads = 2, .n_batch = N_BATCH, .device = device};
    RG_REQUIRE(rg_session_create(&s, m, &so, &err) == RG_OK, "%s session: %s", tag, err.msg);
    float *logits = malloc(sizeof(float) * (size_t)V);
    rg_status st = rg_session_eval(s, p, 6, logits, 0, &err);
    for (int k = 0; !st && k < rec.n; k++) {
        const rg_engine_event *ev = &rec.ev[k];
        double mx = logits[0], sum = 0;
        for (int64_t v = 1; v < V; v++) mx = logits[v] > mx ? logits[v] : mx;
        for (int64_t v = 0; v < V; v++) sum += exp(logits[v] - mx);
        const double lse = mx + log(sum);
        RG_CHECK(fabs(ev->logprob - (logits[ev->token] - lse)) < 1e-5, "%s token %d: logprob %g, want %g", tag, k,
                 ev->logprob, logits[ev->token] - lse);
        RG_CHECK(ev->n_top == 5 && ev->top_id[0] == ev->token && ev->top_logprob[0] == ev->logprob,
                 "%s token %d: the greedy token is not the first alternative", tag, k);
        for (int j = 1; j < ev->n_top; j++) {
            RG_CHECK(ev->top_logprob[j] <= ev->top_logprob[j - 1], "%s token %d: alternatives out of order", tag, k);
            int above = 0;  // tokens more likely than alternative j: exactly j of them (ties aside)
            for (int64_t v = 0; v < V; v++) above += logits[v] > logits[ev->top_id[j]];
            RG_CHECK(above <= j, "%s token %d: alternative %d has %d tokens above it", tag, k, j, above);
        }
        st = rg_session_eval(s, &ev->token, 1, logits, 0, &err);
    }
    RG_CHECK(!st, "%s reference: %s", tag, err.msg);
    free(logits);
    rg_session_free(s);
}

static void check_fixture(const char *arch, uint32_t type) {
    char mpath[64], tag[48];
    rg_model *m = sf_tiny_model(arch, type, 9, true, mpath, "engine");
    RG_CHECK(m != NULL, "%s %s: no fixture", arch, rg_type_get(type)->name);
    if (!m) return;
    sf_tag(tag, sizeof tag, device, arch, type);
    check_alone(m, tag);
    check_prefix_reuse(m, tag);
    check_stop_cancel(m, tag);
    check_bad_requests(m, tag);
    check_logprobs(m, tag);
    check_same_again(m, tag);
    rg_model_free(m);
    unlink(mpath);
}

#define CPU_CASE(name, arch, type) \
    static void test_##name(void) { check_fixture(arch, type); }
#define CUDA_CASE(name, arch, type) SF_CUDA_CASE(test_cuda_##name, device, check_fixture(arch, type))
CPU_CASE(llama_f32, "llama", RG_TYPE_F32)
CPU_CASE(llama_q8_0, "llama", RG_TYPE_Q8_0)
CPU_CASE(lfm2_f32, "lfm2", RG_TYPE_F32)
CPU_CASE(lfm2_q8_0, "lfm2", RG_TYPE_Q8_0)
CUDA_CASE(llama_f32, "llama", RG_TYPE_F32)
CUDA_CASE(lfm2_q8_0, "lfm2", RG_TYPE_Q8_0)

static const rg_test_case cases[] = {
    RG_TEST(test_llama_f32), RG_TEST(test_llama_q8_0), RG_TEST(test_lfm2_f32), RG_TEST(test_lfm2_q8_0),
    RG_TEST(test_cuda_llama_f32), RG_TEST(test_cuda_lfm2_q8_0), {0}};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
