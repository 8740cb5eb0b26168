// speculative.c - speculative decoding on a session (speculative.h): the prompt-lookup and
// draft-model drafters, the one-batch verification and the rewind past rejected drafts.
#include "infer/speculative.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/rng.h"

struct rg_spec {
    rg_session *target, *draft;  // not owned
    rg_draft_kind kind;
    int64_t draft_max;
    int ngram_max;
    int64_t n_vocab;
    int64_t base;        // the target's n_past when made: hist[i] sits at position base + i
    int32_t *hist;       // [cap]: the tokens the target has evaluated since base, in order
    int64_t n_hist, cap;
    int32_t *batch;      // [draft_max + 1]: the last drawn token and the drafts
    int32_t *drafts;     // [draft_max]
    float *logits;       // [n_vocab, draft_max + 1]: the verification's rows
    float *dlogits;      // [n_vocab]: the draft model's last row
    int32_t *cand_ids;   // [n_vocab]: the sampler's candidates (sampling only)
    double *cand_p;      // [n_vocab]
    uint64_t n_draws;    // uniforms drawn from RG_SPEC_STREAM
    rg_spec_stats stats;
};

int64_t rg_spec_ngram_draft(const int32_t *toks, int64_t n, int ngram_max, int64_t draft_max, int32_t *out) {
    if (ngram_max <= 0) ngram_max = 3;
    if (draft_max <= 0) return 0;
    for (int64_t len = ngram_max < n ? ngram_max : n - 1; len >= 1; len--) {
        const int32_t *suffix = toks + n - len;
        // the latest earlier start i with a follower: i + len <= n - 1
        for (int64_t i = n - len - 1; i >= 0; i--) {
            if (memcmp(toks + i, suffix, (size_t)len * sizeof *toks) != 0) continue;
            // the followers toks[i + len .. n), then, past the end, the pattern repeated with its period p (the
            // suffix recurs p tokens after i): a run or a repeated phrase goes on, draft_max tokens in all
            // A shorter match is weaker evidence: it drafts draft_max * len / ngram_max tokens (rounded up). A
            // single common token matched elsewhere rarely predicts eight more, and each draft costs a column
            // of the verification batch (on SmolLM2's copy task, bench_speculative: len-1 drafts of 8 were kept
            // whole once in three).
            const int64_t p = n - len - i, k = (draft_max * len + ngram_max - 1) / ngram_max;
            for (int64_t j = 0; j < k; j++) out[j] = i + len + j < n ? toks[i + len + j] : out[j - p];
            return k;
        }
    }
    return 0;
}

rg_status rg_spec_vocab_check(const rg_tokenizer *target, int64_t target_n_vocab, const rg_tokenizer *draft,
                              int64_t draft_n_vocab, rg_error *err) {
    if (target_n_vocab != draft_n_vocab)
        return rg_fail(err, RG_ERR_ARG,
                       "the draft model's vocabulary is not the target's: n_vocab %" PRId64 " against the target's %" PRId64,
                       draft_n_vocab, target_n_vocab);
    const int32_t nt = rg_tokenizer_n_tokens(target), nd = rg_tokenizer_n_tokens(draft);
    if (nt != nd)
        return rg_fail(err, RG_ERR_ARG,
                       "the draft model's tokenizer is not the target's: %" PRId32 " tokens against the target's %" PRId32,
                       nd, nt);
    for (int32_t id = 0; id < nt; id++) {
        size_t lt = 0, ld = 0;
        const char *tt = rg_token_text(target, id, &lt), *td = rg_token_text(draft, id, &ld);
        if (lt != ld || memcmp(tt, td, lt) != 0)
            return rg_fail(err, RG_ERR_ARG,
                           "the draft model's vocabulary is not the target's: token %" PRId32 " is '%.40s' in the draft "
                           "model and '%.40s' in the target",
                           id, td, tt);
        if (rg_token_type(target, id) != rg_token_type(draft, id))
            return rg_fail(err, RG_ERR_ARG,
                           "the draft model's vocabulary is not the target's: token %" PRId32 " ('%.40s') has type %d in the "
                           "draft model and %d in the target",
                           id, tt, rg_token_type(draft, id), rg_token_type(target, id));
    }
    return RG_OK;
}

rg_status rg_spec_create(rg_spec **out, rg_session *target, const rg_spec_opts *opts, rg_error *err) {
    *out = NULL;
    if (opts->kind != RG_DRAFT_NGRAM && opts->kind != RG_DRAFT_MODEL)
        return rg_fail(err, RG_ERR_ARG, "speculative decoding: unknown drafter %d", (int)opts->kind);
    if (opts->draft_max < 1 || opts->draft_max > 1024)
        return rg_fail(err, RG_ERR_ARG, "speculative decoding: draft_max %" PRId64 " is outside [1, 1024]",
                       opts->draft_max);
    const int64_t V = rg_session_model(target)->hp.n_vocab;
    if (opts->kind == RG_DRAFT_MODEL) {
        if (!opts->draft) return rg_fail(err, RG_ERR_ARG, "speculative decoding: the model drafter needs a draft session");
        const int64_t Vd = rg_session_model(opts->draft)->hp.n_vocab;
        if (Vd != V)
            return rg_fail(err, RG_ERR_ARG,
                           "the draft model's vocabulary is not the target's: n_vocab %" PRId64 " against the target's %" PRId64,
                           Vd, V);
        if (rg_session_n_past(target) != 0 || rg_session_n_past(opts->draft) != 0)
            return rg_fail(err, RG_ERR_ARG,
                           "speculative decoding with a draft model starts from empty sessions (the target holds %" PRId64
                           " tokens, the draft model %" PRId64 ")",
                           rg_session_n_past(target), rg_session_n_past(opts->draft));
    }
    rg_spec *sp = calloc(1, sizeof *sp);
    if (!sp) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    sp->target = target;
    sp->draft = opts->kind == RG_DRAFT_MODEL ? opts->draft : NULL;
    sp->kind = opts->kind;
    sp->draft_max = opts->draft_max;
    sp->ngram_max = opts->ngram_max > 0 ? opts->ngram_max : 3;
    sp->n_vocab = V;
    sp->base = rg_session_n_past(target);
    const size_t D = (size_t)opts->draft_max;
    sp->batch = malloc((D + 1) * sizeof *sp->batch);
    sp->drafts = malloc(D * sizeof *sp->drafts);
    sp->logits = malloc((size_t)V * (D + 1) * sizeof *sp->logits);
    sp->dlogits = malloc((size_t)V * sizeof *sp->dlogits);
    sp->cand_ids = malloc((size_t)V * sizeof *sp->cand_ids);
    sp->cand_p = malloc((size_t)V * sizeof *sp->cand_p);
    if (!sp->batch || !sp->drafts || !sp->logits || !sp->dlogits || !sp->cand_ids || !sp->cand_p) {
        rg_spec_free(sp);
        return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    }
    *out = sp;
    return RG_OK;
}

void rg_spec_free(rg_spec *sp) {
    if (!sp) return;
    free(sp->hist), free(sp->batch), free(sp->drafts), free(sp->logits), free(sp->dlogits);
    free(sp->cand_ids), free(sp->cand_p);
    free(sp);
}

rg_status rg_spec_push(rg_spec *sp, const int32_t *ids, int64_t n, rg_error *err) {
    if (sp->n_hist + n > sp->cap) {
        int64_t cap = sp->cap ? sp->cap : 256;
        while (cap < sp->n_hist + n) cap *= 2;
        int32_t *h = realloc(sp->hist, (size_t)cap * sizeof *h);
        if (!h) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
        sp->hist = h, sp->cap = cap;
    }
    memcpy(sp->hist + sp->n_hist, ids, (size_t)n * sizeof *ids);
    sp->n_hist += n;
    return RG_OK;
}

rg_spec_stats rg_spec_get_stats(const rg_spec *sp) { return sp->stats; }

// err's message with prefix put first (a failure said to be the draft model's, or the rewind's).
static rg_status prefixed(rg_error *err, rg_status st, const char *prefix) {
    if (!err) return st;
    char msg[sizeof err->msg];
    memcpy(msg, err->msg, sizeof msg);
    return rg_fail(err, st, "%s%.900s", prefix, msg);
}
static rg_status draft_failed(rg_error *err, rg_status st) { return prefixed(err, st, "the draft model: "); }

rg_status rg_spec_rewind(rg_spec *sp, int64_t pos, rg_error *err) {
    if (pos < sp->base)
        return rg_fail(err, RG_ERR_ARG,
                       "speculative decoding: rewind to %" PRId64 ", before the %" PRId64 " tokens the decoder started after",
                       pos, sp->base);
    rg_status st = rg_session_rewind(sp->target, pos, err);
    if (st) return st;
    if (sp->base + sp->n_hist > pos) sp->n_hist = pos - sp->base;
    if (sp->draft && rg_session_n_past(sp->draft) > pos && (st = rg_session_rewind(sp->draft, pos, err)))
        return draft_failed(err, st);
    return RG_OK;
}

// The largest logit's id, ties to the lower id (a NaN is passed over: it never stays the best).
static int32_t argmax(const float *row, int64_t n) {
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (row[i] > row[best] || row[best] != row[best]) best = (int32_t)i;
    return best;
}

// The draft model's k greedy drafts after hist (which ends with the last drawn token): its session first
// catches up with the context in one batch (the tokens since its n_past), then steps token by token.
// Leaves its n_past at the context plus k - 1 (the last draft is drawn, not evaluated).
static rg_status draft_with_model(rg_spec *sp, int64_t k, rg_error *err) {
    const int64_t have = rg_session_n_past(sp->draft);  // positions: hist[i] at i (base is 0 with a draft model)
    const int64_t V = sp->n_vocab;
    rg_status st = rg_session_eval(sp->draft, sp->hist + have, sp->n_hist - have, sp->dlogits, 0, err);
    if (st) return st;
    for (int64_t j = 0; j < k; j++) {
        sp->drafts[j] = argmax(sp->dlogits, V);
        if (j + 1 < k && (st = rg_session_eval(sp->draft, &sp->drafts[j], 1, sp->dlogits, 0, err))) return st;
    }
    return RG_OK;
}

// The target's token at a drafted position (row: its logits there; d the draft, or -1 after the last
// one): *kept when d stands, else the token it draws instead.
static int32_t choose(rg_spec *sp, rg_sampler *smp, const float *row, int32_t d, bool *kept) {
    const rg_sampler_params *p = rg_sampler_get_params(smp);
    *kept = false;
    if (p->temp <= 0 || d < 0) {  // greedy, or no draft to weigh: the sampler's own draw
        int32_t c = rg_sampler_sample(smp, row);
        *kept = c == d;
        return c;
    }
    // p(d) of the chain's final distribution, and the rest of it
    const int64_t n = rg_sampler_candidates(smp, row, sp->cand_ids, sp->cand_p, sp->n_vocab);
    double pd = 0, rest = 0;
    for (int64_t i = 0; i < n; i++) {
        if (sp->cand_ids[i] == d) pd = sp->cand_p[i];
        else rest += sp->cand_p[i];
    }
    const double u = rg_rng_uniform(p->seed, RG_SPEC_STREAM, sp->n_draws++);
    if (u < pd || rest <= 0) {
        *kept = true;
        return d;
    }
    // rejected: a draw from p with d's mass removed, renormalized
    const double v = rg_rng_uniform(p->seed, RG_SPEC_STREAM, sp->n_draws++) * rest;
    double acc = 0;
    int32_t last = -1;
    for (int64_t i = 0; i < n; i++) {
        if (sp->cand_ids[i] == d) continue;
        last = sp->cand_ids[i];
        acc += sp->cand_p[i];
        if (v < acc) return last;
    }
    return last;  // rounding left v at the top: the last candidate
}

rg_status rg_spec_verify(rg_spec *sp, int32_t last, const int32_t *drafts, int64_t k, rg_sampler *smp, int32_t *out,
                         int64_t *n_out, rg_error *err) {
    *n_out = 0;
    if (k < 0 || k > sp->draft_max)
        return rg_fail(err, RG_ERR_ARG, "speculative decoding: %" PRId64 " drafts, outside [0, %" PRId64 "]", k,
                       sp->draft_max);
    const int64_t pos = rg_session_n_past(sp->target), V = sp->n_vocab;  // last's position
    if (pos != sp->base + sp->n_hist)
        return rg_fail(err, RG_ERR_ARG,
                       "speculative decoding: the target holds %" PRId64 " tokens but the decoder saw %" PRId64
                       " (evaluate through rg_spec_push/rg_spec_step only)",
                       pos, sp->base + sp->n_hist);
    sp->batch[0] = last;
    memcpy(sp->batch + 1, drafts, (size_t)k * sizeof *drafts);
    rg_status st = rg_session_eval_exact(sp->target, sp->batch, k + 1, sp->logits, err);  // [V, k + 1], single-token bits
    if (st) return st;
    // row j: the target's distribution after batch[0..j]
    int64_t n_kept = 0;
    for (int64_t j = 0; j <= k; j++) {
        bool kept;
        int32_t c = choose(sp, smp, sp->logits + (size_t)j * V, j < k ? drafts[j] : -1, &kept);
        out[j] = c;
        if (!kept) break;
        rg_sampler_accept(smp, c);
        n_kept++;
    }
    *n_out = n_kept + 1;
    sp->stats.n_steps++;
    sp->stats.n_drafted += k;
    sp->stats.n_accepted += n_kept;
    // The target keeps last and the kept drafts; the rejected ones go (nothing to do when all were kept).
    if (n_kept < k && (st = rg_session_rewind(sp->target, pos + 1 + n_kept, err)))
        return prefixed(err, st, "speculative decoding cannot drop the rejected drafts: ");
    if (sp->draft && rg_session_n_past(sp->draft) > pos + 1 + n_kept &&
        (st = rg_session_rewind(sp->draft, pos + 1 + n_kept, err)))
        return draft_failed(err, st);
    st = rg_spec_push(sp, &last, 1, err);
    if (!st) st = rg_spec_push(sp, out, n_kept, err);
    return st;
}

rg_status rg_spec_step(rg_spec *sp, int32_t last, rg_sampler *smp, int64_t max_draft, int32_t *out, int64_t *n_out,
                       rg_error *err) {
    *n_out = 0;
    // room: the batch [last, drafts] must fit the target's context (and the draft model's steps its own)
    const int64_t pos = rg_session_n_past(sp->target);
    int64_t k = sp->draft_max < max_draft ? sp->draft_max : max_draft;
    if (k > rg_session_n_ctx(sp->target) - pos - 1) k = rg_session_n_ctx(sp->target) - pos - 1;
    if (sp->draft && k > rg_session_n_ctx(sp->draft) - pos) k = rg_session_n_ctx(sp->draft) - pos;
    if (k < 0) k = 0;
    // the drafters see the context with last at its end
    rg_status st = rg_spec_push(sp, &last, 1, err);
    if (st) return st;
    if (k > 0 && sp->kind == RG_DRAFT_NGRAM) k = rg_spec_ngram_draft(sp->hist, sp->n_hist, sp->ngram_max, k, sp->drafts);
    else if (k > 0) st = draft_with_model(sp, k, err);
    sp->n_hist--;  // rg_spec_verify pushes last again once the target has evaluated it
    if (st) return draft_failed(err, st);
    return rg_spec_verify(sp, last, sp->drafts, k, smp, out, n_out, err);
}
