// engine.c - see engine.h. A step: queued requests take free slots (the one whose cache shares the longest
// prefix with the prompt, rewound to it), one prompting slot is fed a chunk (round robin among them, so a long
// prompt does not hold the others' first tokens back by more than a chunk each), then every generating slot's
// drawn token is evaluated in one exact batch and its next token drawn.
#include "infer/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/file.h"
#include "infer/session_state.h"

typedef enum { SLOT_FREE, SLOT_PROMPT, SLOT_GEN } slot_phase;

typedef struct request {
    int id;
    int32_t *prompt;  // [n_prompt], owned
    int64_t n_prompt;
    rg_sampler_params sampling;
    int64_t max_tokens;
    int32_t *stop;  // [n_stop], owned
    int n_stop;
    bool logprobs;
    int top_logprobs;
} request;

typedef struct slot {
    slot_phase phase;
    request r;           // what it serves (not FREE)
    int32_t *hist;       // [n_ctx]: the tokens in the slot's sequence (its cache), n_hist of them
    int64_t n_hist;
    int64_t n_cached;    // prompt tokens the cache held at admission
    int32_t *chunk_from;  // [n_ctx + 1]: where a prompt chunk fed into the slot ended at position b, its start a
                          // (-1 elsewhere; cleared past a rewind)
    int32_t pending;     // SLOT_GEN: the token drawn and emitted, evaluated at the next step
    int64_t n_gen;       // tokens emitted
    rg_sampler *smp;
    uint64_t freed_at;   // when it was last freed (the least recently used wins a tie)
} slot;

struct rg_engine {
    const rg_model *m;
    rg_engine_opts o;
    rg_session *s;
    slot *slots;
    request *queue;  // FIFO [n_queue]
    int n_queue, cap_queue;
    int next_id, rr;
    uint64_t tick;
    float *logits;  // [n_vocab, n_batch]
};

static void request_free(request *r) {
    free(r->prompt);
    free(r->stop);
    memset(r, 0, sizeof *r);
}

static void emit(rg_engine *e, int id, int32_t token, rg_finish finish, const slot *sl, const char *error) {
    rg_engine_event ev = {.id = id, .token = token, .finish = finish, .error = error};
    if (sl) ev.n_prompt = sl->r.n_prompt, ev.n_cached = sl->n_cached;
    if (e->o.on_event) e->o.on_event(e->o.user, &ev);
}

// Ends the slot's request with `finish`; the slot keeps its cache (and hist) for the next request.
static void slot_finish(rg_engine *e, slot *sl, rg_finish finish, const char *error) {
    emit(e, sl->r.id, -1, finish, sl, error);
    rg_sampler_free(sl->smp);
    sl->smp = NULL;
    request_free(&sl->r);
    sl->phase = SLOT_FREE;
    sl->freed_at = ++e->tick;
}

// After a failed evaluation: the slot's sequence back to a fresh start (a failure may leave a recurrent state
// lost), its request ended with the error.
static void slot_fail(rg_engine *e, slot *sl, const char *msg) {
    rg_error ignored;
    rg_session_rewind_seq(e->s, (int)(sl - e->slots), 0, &ignored);
    sl->n_hist = 0;
    slot_finish(e, sl, RG_FINISH_ERROR, msg);
}

rg_status rg_engine_create(rg_engine **out, const rg_model *m, const rg_engine_opts *opts, rg_error *err) {
    *out = NULL;
    if (opts->n_slots < 1 || opts->n_slots > RG_SESSION_MAX_SEQ)
        return rg_fail(err, RG_ERR_ARG, "engine: %d slots: expected 1..%d", opts->n_slots, RG_SESSION_MAX_SEQ);
    rg_engine *e = calloc(1, sizeof *e);
    if (!e) return rg_fail(err, RG_ERR_NOMEM, "engine: out of memory");
    e->m = m;
    e->o = *opts;
    rg_session_opts so = {.n_ctx = opts->n_ctx, .n_threads = opts->n_threads, .n_batch = opts->n_batch,
                          .device = opts->device, .n_seq = opts->n_slots, .recurrent_rollback = 1,
                          .lora = opts->lora, .lora_scale = opts->lora_scale};
    rg_status st = rg_session_create(&e->s, m, &so, err);
    if (!st) {
        e->o.n_ctx = rg_session_n_ctx(e->s);
        e->o.n_batch = opts->n_batch > 0 ? opts->n_batch : 256;
        e->slots = calloc((size_t)opts->n_slots, sizeof *e->slots);
        e->logits = malloc(sizeof(float) * (size_t)(m->hp.n_vocab * e->o.n_batch));
        if (!e->slots || !e->logits) st = rg_fail(err, RG_ERR_NOMEM, "engine: out of memory");
    }
    for (int i = 0; !st && i < opts->n_slots; i++)
        if (!(e->slots[i].hist = malloc(sizeof(int32_t) * (size_t)e->o.n_ctx)) ||
            !(e->slots[i].chunk_from = malloc(sizeof(int32_t) * (size_t)(e->o.n_ctx + 1))))
            st = rg_fail(err, RG_ERR_NOMEM, "engine: out of memory for %d slots of %lld tokens", opts->n_slots,
                         (long long)e->o.n_ctx);
    if (st) {
        rg_engine_free(e);
        return st;
    }
    for (int i = 0; i < opts->n_slots; i++)
        for (int64_t p = 0; p <= e->o.n_ctx; p++) e->slots[i].chunk_from[p] = -1;
    *out = e;
    return RG_OK;
}

void rg_engine_free(rg_engine *e) {
    if (!e) return;
    for (int i = 0; e->slots && i < e->o.n_slots; i++) {
        rg_sampler_free(e->slots[i].smp);
        request_free(&e->slots[i].r);
        free(e->slots[i].hist);
        free(e->slots[i].chunk_from);
    }
    for (int i = 0; i < e->n_queue; i++) request_free(&e->queue[i]);
    free(e->queue);
    free(e->slots);
    free(e->logits);
    rg_session_free(e->s);
    free(e);
}

rg_session *rg_engine_session(rg_engine *e) { return e->s; }

int rg_engine_pending(const rg_engine *e) {
    int n = e->n_queue;
    for (int i = 0; i < e->o.n_slots; i++) n += e->slots[i].phase != SLOT_FREE;
    return n;
}

int rg_engine_busy(const rg_engine *e) { return rg_engine_pending(e) - e->n_queue; }

rg_status rg_engine_submit(rg_engine *e, const rg_engine_request *r, int *id, rg_error *err) {
    *id = -1;
    const int64_t V = e->m->hp.n_vocab;
    if (!r->prompt || r->n_prompt < 1) return rg_fail(err, RG_ERR_ARG, "engine: the prompt is empty");
    if (r->n_prompt >= e->o.n_ctx)
        return rg_fail(err, RG_ERR_ARG, "engine: the prompt's %lld tokens leave no room in a slot's context of %lld",
                       (long long)r->n_prompt, (long long)e->o.n_ctx);
    for (int64_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= V)
            return rg_fail(err, RG_ERR_ARG, "engine: prompt token %lld is %d, outside the vocabulary of %lld",
                           (long long)i, r->prompt[i], (long long)V);
    for (int i = 0; i < r->n_stop; i++)
        if (r->stop[i] < 0 || r->stop[i] >= V)
            return rg_fail(err, RG_ERR_ARG, "engine: stop token %d is %d, outside the vocabulary of %lld", i,
                           r->stop[i], (long long)V);
    if (r->top_logprobs < 0 || r->top_logprobs > RG_ENGINE_MAX_TOP_LOGPROBS)
        return rg_fail(err, RG_ERR_ARG, "engine: top_logprobs %d is outside [0, %d]", r->top_logprobs,
                       RG_ENGINE_MAX_TOP_LOGPROBS);
    rg_error why;
    if (rg_sampler_params_check(&r->sampling, &why))
        return rg_fail(err, RG_ERR_ARG, "engine: the request's sampling: %s", why.msg);
    if (e->n_queue == e->cap_queue) {
        const int cap = e->cap_queue ? 2 * e->cap_queue : 16;
        request *q = realloc(e->queue, sizeof *q * (size_t)cap);
        if (!q) return rg_fail(err, RG_ERR_NOMEM, "engine: out of memory");
        e->queue = q, e->cap_queue = cap;
    }
    request q = {.id = e->next_id, .n_prompt = r->n_prompt, .sampling = r->sampling, .max_tokens = r->max_tokens,
                 .n_stop = r->n_stop, .logprobs = r->logprobs, .top_logprobs = r->top_logprobs};
    q.prompt = malloc(sizeof(int32_t) * (size_t)r->n_prompt);
    q.stop = malloc(sizeof(int32_t) * (size_t)(r->n_stop > 0 ? r->n_stop : 1));
    if (!q.prompt || !q.stop) {
        request_free(&q);
        return rg_fail(err, RG_ERR_NOMEM, "engine: out of memory");
    }
    memcpy(q.prompt, r->prompt, sizeof(int32_t) * (size_t)r->n_prompt);
    if (r->n_stop > 0) memcpy(q.stop, r->stop, sizeof(int32_t) * (size_t)r->n_stop);
    e->queue[e->n_queue++] = q;
    *id = e->next_id++;
    return RG_OK;
}

static int64_t common_prefix(const int32_t *a, int64_t na, const int32_t *b, int64_t nb) {
    int64_t n = 0;
    while (n < na && n < nb && a[n] == b[n]) n++;
    return n;
}

// Queued requests into free slots, in order: each takes the free slot sharing the longest prefix with its prompt
// (the least recently freed among equals), rewound to that prefix (at most the prompt less its last token, whose
// logits the first draw needs). A prompt the slot holds whole, ending where a prompt chunk fed into the slot ended
// (the same request again, a regenerated reply), is rewound to that chunk's start instead, so the chunk is fed
// again as it was and the first draw sees a fresh prompt's bits, not those of its last token fed alone: the same
// request gets the same tokens whatever the slot served since. A rewind the session refuses (no snapshot holds it) falls
// back to the prompt less its last token, then starts the slot over.
static int64_t keep_for(const slot *sl, const request *q) {
    const int64_t keep = common_prefix(sl->hist, sl->n_hist, q->prompt, q->n_prompt);
    if (keep >= q->n_prompt && sl->chunk_from[q->n_prompt] >= 0) return sl->chunk_from[q->n_prompt];
    return keep > q->n_prompt - 1 ? q->n_prompt - 1 : keep;
}

static rg_status admit(rg_engine *e, rg_error *err) {
    while (e->n_queue > 0) {
        request *q = &e->queue[0];
        slot *best = NULL;
        int64_t best_keep = -1;
        for (int i = 0; i < e->o.n_slots; i++) {
            slot *sl = &e->slots[i];
            if (sl->phase != SLOT_FREE) continue;
            const int64_t keep = keep_for(sl, q);
            if (keep > best_keep || (keep == best_keep && sl->freed_at < best->freed_at)) best = sl, best_keep = keep;
        }
        if (!best) return RG_OK;  // every slot busy
        const int k = (int)(best - e->slots);
        rg_error refused;
        if (rg_session_rewind_seq(e->s, k, best_keep, &refused)) {
            const int64_t alt = common_prefix(best->hist, best->n_hist, q->prompt, q->n_prompt - 1);
            if (alt <= best_keep || rg_session_rewind_seq(e->s, k, alt, &refused)) {
                best_keep = 0;
                rg_status st = rg_session_rewind_seq(e->s, k, 0, err);
                if (st) return st;
            } else {
                best_keep = alt;
            }
        }
        for (int64_t p = best_keep + 1; p <= best->n_hist; p++) best->chunk_from[p] = -1;  // chunks cut by the rewind
        best->n_hist = best_keep;
        best->n_cached = best_keep;
        best->r = *q;
        memmove(e->queue, e->queue + 1, sizeof *e->queue * (size_t)(e->n_queue - 1));
        e->n_queue--;
        best->n_gen = 0;
        best->phase = SLOT_PROMPT;
        rg_status st = rg_sampler_create(&best->smp, &best->r.sampling, (int32_t)e->m->hp.n_vocab, err);
        if (st) {
            slot_finish(e, best, RG_FINISH_ERROR, err->msg);
            continue;
        }
        for (int64_t i = 0; i < best->r.n_prompt; i++) rg_sampler_accept(best->smp, best->r.prompt[i]);
    }
    return RG_OK;
}

// The drawn token's log-softmax and the n_top largest, most likely first (ties: the lower id).
static void logprobs_of(rg_engine_event *ev, const float *logits, int64_t V, int n_top) {
    float mx = logits[0];
    for (int64_t i = 1; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int64_t i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
    const double lse = mx + log(sum);
    ev->logprob = (float)(logits[ev->token] - lse);
    if (n_top > RG_ENGINE_MAX_TOP_LOGPROBS) n_top = RG_ENGINE_MAX_TOP_LOGPROBS;
    int n = 0;
    for (int64_t i = 0; i < V && n_top > 0; i++) {
        if (n == n_top && logits[i] <= logits[ev->top_id[n - 1]]) continue;
        int j = n < n_top ? n++ : n - 1;  // insertion into the sorted list
        while (j > 0 && logits[ev->top_id[j - 1]] < logits[i]) {
            ev->top_id[j] = ev->top_id[j - 1];
            j--;
        }
        ev->top_id[j] = (int32_t)i;
    }
    ev->n_top = n;
    for (int i = 0; i < n; i++) ev->top_logprob[i] = (float)(logits[ev->top_id[i]] - lse);
}

// A token drawn for the slot's request: a stop token ends it (not emitted); otherwise it is emitted, and the
// request ends when max_tokens are out or the context has no room to evaluate it.
static void took(rg_engine *e, slot *sl, const float *logits) {
    const int32_t tok = rg_sampler_sample(sl->smp, logits);
    rg_sampler_accept(sl->smp, tok);
    for (int i = 0; i < sl->r.n_stop; i++)
        if (sl->r.stop[i] == tok) {
            slot_finish(e, sl, RG_FINISH_STOP, NULL);
            return;
        }
    rg_engine_event ev = {.id = sl->r.id, .token = tok};
    if (sl->r.logprobs) logprobs_of(&ev, logits, e->m->hp.n_vocab, sl->r.top_logprobs);
    if (e->o.on_event) e->o.on_event(e->o.user, &ev);
    sl->n_gen++;
    if ((sl->r.max_tokens > 0 && sl->n_gen >= sl->r.max_tokens) || sl->n_hist + 1 > e->o.n_ctx) {
        slot_finish(e, sl, RG_FINISH_LENGTH, NULL);
        return;
    }
    sl->pending = tok;
    sl->phase = SLOT_GEN;
}

// One chunk of one prompting slot's prompt (round robin); the first token drawn when the prompt is in.
static void feed_prompt(rg_engine *e) {
    const int n = e->o.n_slots;
    for (int t = 0; t < n; t++) {
        const int k = (e->rr + t) % n;
        slot *sl = &e->slots[k];
        if (sl->phase != SLOT_PROMPT) continue;
        e->rr = (k + 1) % n;
        const int64_t left = sl->r.n_prompt - sl->n_hist, chunk = left < e->o.n_batch ? left : e->o.n_batch;
        const bool last = chunk == left;
        rg_error err;
        if (rg_session_eval_seq(e->s, k, sl->r.prompt + sl->n_hist, chunk, last ? e->logits : NULL, 0, &err)) {
            slot_fail(e, sl, err.msg);
            return;
        }
        memcpy(sl->hist + sl->n_hist, sl->r.prompt + sl->n_hist, sizeof(int32_t) * (size_t)chunk);
        sl->chunk_from[sl->n_hist + chunk] = (int32_t)sl->n_hist;
        sl->n_hist += chunk;
        if (last) took(e, sl, e->logits);
        return;
    }
}

// Every generating slot's pending token in exact batches of at most n_batch sequences, then each one's next draw.
static void decode(rg_engine *e) {
    const int64_t V = e->m->hp.n_vocab;
    rg_seq_tokens b[64];
    slot *who[64];
    int k = 0;
    while (k < e->o.n_slots) {
        int n_b = 0;
        for (; k < e->o.n_slots && n_b < 64 && n_b < e->o.n_batch; k++)
            if (e->slots[k].phase == SLOT_GEN) {
                who[n_b] = &e->slots[k];
                b[n_b] = (rg_seq_tokens){k, &e->slots[k].pending, 1};
                n_b++;
            }
        if (n_b == 0) continue;
        rg_error err;
        if (rg_session_eval_seqs(e->s, b, n_b, e->logits, 1, true, &err)) {
            for (int i = 0; i < n_b; i++) slot_fail(e, who[i], err.msg);
            continue;
        }
        for (int i = 0; i < n_b; i++) {
            slot *sl = who[i];
            sl->hist[sl->n_hist++] = sl->pending;
            took(e, sl, e->logits + (size_t)i * V);
        }
    }
}

rg_status rg_engine_step(rg_engine *e, rg_error *err) {
    rg_status st = admit(e, err);
    if (st) return st;
    feed_prompt(e);
    decode(e);
    return RG_OK;
}

bool rg_engine_cancel(rg_engine *e, int id) {
    for (int i = 0; i < e->n_queue; i++)
        if (e->queue[i].id == id) {
            emit(e, id, -1, RG_FINISH_CANCELLED, NULL, NULL);
            request_free(&e->queue[i]);
            memmove(e->queue + i, e->queue + i + 1, sizeof *e->queue * (size_t)(e->n_queue - i - 1));
            e->n_queue--;
            return true;
        }
    for (int i = 0; i < e->o.n_slots; i++)
        if (e->slots[i].phase != SLOT_FREE && e->slots[i].r.id == id) {
            slot_finish(e, &e->slots[i], RG_FINISH_CANCELLED, NULL);
            return true;
        }
    return false;
}

int64_t rg_engine_n_ctx(const rg_engine *e) { return e->o.n_ctx; }

int rg_engine_n_slots(const rg_engine *e) { return e->o.n_slots; }

static rg_status free_slot(rg_engine *e, int k, const char *what, rg_error *err) {
    if (k < 0 || k >= e->o.n_slots)
        return rg_fail(err, RG_ERR_ARG, "engine: %s slot %d: the slots are 0..%d", what, k, e->o.n_slots - 1);
    if (e->slots[k].phase != SLOT_FREE)
        return rg_fail(err, RG_ERR_ARG, "engine: %s slot %d: it is serving a request", what, k);
    return RG_OK;
}

// The slot's tokens beside the session's state: "RGSLOTT1", int64 n, int32 tokens[n] (little-endian hosts).
rg_status rg_engine_slot_save(rg_engine *e, int k, const char *path, int64_t *n_tokens, rg_error *err) {
    rg_status st = free_slot(e, k, "save", err);
    if (st) return st;
    const slot *sl = &e->slots[k];
    if (rg_session_n_past_seq(e->s, k) != sl->n_hist)
        return rg_fail(err, RG_ERR_ARG, "engine: save slot %d: its cache holds %lld positions, its history %lld", k,
                       (long long)rg_session_n_past_seq(e->s, k), (long long)sl->n_hist);
    char tpath[4096];
    if (snprintf(tpath, sizeof tpath, "%s.tokens", path) >= (int)sizeof tpath)
        return rg_fail(err, RG_ERR_ARG, "engine: save slot %d: the path is too long", k);
    const size_t bytes = 16 + sizeof(int32_t) * (size_t)sl->n_hist;
    char *buf = malloc(bytes);
    if (!buf) return rg_fail(err, RG_ERR_NOMEM, "engine: out of memory");
    memcpy(buf, "RGSLOTT1", 8);
    memcpy(buf + 8, &sl->n_hist, 8);
    memcpy(buf + 16, sl->hist, sizeof(int32_t) * (size_t)sl->n_hist);
    st = rg_session_state_save_seq(e->s, k, path, err);
    if (!st) st = rg_atomic_write_file(tpath, buf, bytes, err);
    free(buf);
    if (!st && n_tokens) *n_tokens = sl->n_hist;
    return st;
}

rg_status rg_engine_slot_load(rg_engine *e, int k, const char *path, int64_t *n_tokens, rg_error *err) {
    rg_status st = free_slot(e, k, "restore", err);
    if (st) return st;
    char tpath[4096];
    if (snprintf(tpath, sizeof tpath, "%s.tokens", path) >= (int)sizeof tpath)
        return rg_fail(err, RG_ERR_ARG, "engine: restore slot %d: the path is too long", k);
    FILE *f = fopen(tpath, "rb");
    if (!f) return rg_fail(err, RG_ERR_IO, "engine: restore slot %d: %s: cannot open", k, tpath);
    char magic[8];
    int64_t n = -1;
    bool ok = fread(magic, 1, 8, f) == 8 && memcmp(magic, "RGSLOTT1", 8) == 0 && fread(&n, 8, 1, f) == 1 && n >= 0 &&
              n <= e->o.n_ctx;
    int32_t *toks = ok ? malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1)) : NULL;
    ok = ok && toks && fread(toks, sizeof(int32_t), (size_t)n, f) == (size_t)n && fgetc(f) == EOF;
    fclose(f);
    for (int64_t i = 0; ok && i < n; i++) ok = toks[i] >= 0 && toks[i] < e->m->hp.n_vocab;
    if (!ok) {
        free(toks);
        return rg_fail(err, RG_ERR_FORMAT, "engine: restore slot %d: %s is not a slot token file of at most %lld "
                                           "tokens of this vocabulary", k, tpath, (long long)e->o.n_ctx);
    }
    st = rg_session_state_load_seq(e->s, k, path, err);  // checks the model, the sizes, the checksum first
    if (!st && rg_session_n_past_seq(e->s, k) != n) {
        rg_fail(err, RG_ERR_FORMAT, "engine: restore slot %d: %s holds %lld positions, its token file %lld", k, path,
                (long long)rg_session_n_past_seq(e->s, k), (long long)n);
        rg_error ignored;
        rg_session_rewind_seq(e->s, k, 0, &ignored);
        e->slots[k].n_hist = 0;
        st = RG_ERR_FORMAT;
    }
    if (!st) {
        slot *sl = &e->slots[k];
        memcpy(sl->hist, toks, sizeof(int32_t) * (size_t)n);
        sl->n_hist = n;
        for (int64_t p = 0; p <= e->o.n_ctx; p++) sl->chunk_from[p] = -1;
        if (n_tokens) *n_tokens = n;
    }
    free(toks);
    return st;
}

rg_status rg_engine_slot_erase(rg_engine *e, int k, rg_error *err) {
    rg_status st = free_slot(e, k, "erase", err);
    if (st) return st;
    st = rg_session_rewind_seq(e->s, k, 0, err);
    if (st) return st;
    e->slots[k].n_hist = 0;
    for (int64_t p = 0; p <= e->o.n_ctx; p++) e->slots[k].chunk_from[p] = -1;
    return RG_OK;
}
