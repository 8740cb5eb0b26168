// speculative.h - speculative decoding on a session: a drafter proposes the next few tokens,
// the target model evaluates the last drawn token and the drafts in ONE batch (all logits),
// keeps the drafts while they are what it would have drawn itself, takes its own token at the
// first mismatch (or after the last draft), and rewinds its session past the rejected ones
// (rg_session_rewind).
//
// Drafters:
//   ngram: prompt lookup decoding. The longest suffix of the context (ngram_max tokens down to
//          1) that occurred earlier in the context; the tokens that followed its latest earlier
//          occurrence are the drafts (draft_max, repeating the match's period past the end of the
//          context). Costs nothing; wins where the output copies its input (editing, extraction,
//          code).
//   model: a small model with the same vocabulary, in its own session, drafting greedily
//          (its argmax, ties to the lower id); its session is rewound with the target's.
//
// Which token the target keeps at a drafted position:
//   greedy (temp <= 0): the sampler's own choice from that position's logits (penalties
//          included); the draft is kept when it is that token.
//   sampling: speculative sampling with a point-mass proposal (both drafters propose one
//          token, deterministically): the draft d is kept with probability p(d), p the
//          sampler chain's final distribution (rg_sampler_candidates); otherwise a token is
//          drawn from p with d removed, renormalized. Together: exactly p (the rule of
//          min(1, p/q) acceptance with residual max(0, p - q) for q = the point mass at d).
//          The uniforms come from rg_rng_uniform(seed, RG_SPEC_STREAM, n) with n counting
//          this object's draws, so a seeded run is reproducible (but draws other tokens than
//          the same seed without speculation: the same distribution, not the same stream).
//
// Exactness: the verification batch runs through rg_session_eval_exact, whose every token has the
// bits of a single-token step, so greedy output is generation without speculation, bit for bit, by
// construction (test_speculative, test_session_exact).
#ifndef RG_INFER_SPECULATIVE_H
#define RG_INFER_SPECULATIVE_H

#include <stdint.h>

#include "infer/sampler.h"
#include "infer/session.h"
#include "text/tokenizer.h"

#define RG_SPEC_STREAM 0x7370656375ull  // "specu": the rng stream of the acceptance draws

typedef enum { RG_DRAFT_NGRAM = 1, RG_DRAFT_MODEL = 2 } rg_draft_kind;

// Prompt lookup: the drafts that follow the latest earlier occurrence of the longest suffix of
// toks[0..n) of ngram_max tokens down to 1 (a suffix must also have an earlier occurrence with a
// follower); where the followers reach the end of toks they go on with the period of the match
// (the suffix recurred p tokens later: draft j is draft j - p), so a run or a repeated phrase is
// drafted whole. A shorter match drafts fewer: k = ceil(draft_max * len / ngram_max) tokens for a
// suffix of len tokens (draft_max at ngram_max). Writes k tokens to out and returns k, or 0
// without a match.
int64_t rg_spec_ngram_draft(const int32_t *toks, int64_t n, int ngram_max, int64_t draft_max, int32_t *out);

// RG_ERR_ARG when a draft model's vocabulary is not the target's: the sizes (the models' n_vocab
// and the tokenizers' token counts) or the first token whose text differs, named with both texts.
rg_status rg_spec_vocab_check(const rg_tokenizer *target, int64_t target_n_vocab, const rg_tokenizer *draft,
                              int64_t draft_n_vocab, rg_error *err);

typedef struct rg_spec_opts {
    rg_draft_kind kind;
    int64_t draft_max;  // drafts per verification, >= 1 (the CLI's default 8)
    int ngram_max;      // ngram: the longest suffix looked up (<= 0: 3)
    rg_session *draft;  // model: the draft model's session, empty (n_past 0), not owned
} rg_spec_opts;

typedef struct rg_spec_stats {
    int64_t n_steps;     // verification batches
    int64_t n_drafted;   // drafted tokens verified
    int64_t n_accepted;  // of those, kept
} rg_spec_stats;

typedef struct rg_spec rg_spec;

// A speculative decoder on target (not owned). With a draft session the target must be empty too
// (the draft model sees the whole context) and the two vocabularies the same size (check the texts
// with rg_spec_vocab_check).
rg_status rg_spec_create(rg_spec **out, rg_session *target, const rg_spec_opts *opts, rg_error *err);
void rg_spec_free(rg_spec *sp);

// Tells the decoder about tokens the caller evaluated on the target itself (the prompt): the context
// the drafters see. Call it with every token evaluated outside rg_spec_step, in order.
rg_status rg_spec_push(rg_spec *sp, const int32_t *ids, int64_t n, rg_error *err);

// One speculative step. last: the token drawn and accepted into smp's history but not evaluated (the
// target's n_past is its position). Drafts up to min(draft_max, max_draft) tokens (fewer where the
// context ends), verifies them with last in one batch and writes the tokens that follow last to out
// [draft_max + 1]: *n_out >= 1 of them, the kept drafts, each already accepted into smp's history,
// then the target's own token, drawn and not accepted (the caller accepts it). Afterwards the target
// has evaluated last and the kept drafts (out[*n_out - 1] is drawn, not evaluated). A refused rewind
// (a recurrent model without the state of that position) fails with the rewind's message.
rg_status rg_spec_step(rg_spec *sp, int32_t last, rg_sampler *smp, int64_t max_draft, int32_t *out, int64_t *n_out,
                       rg_error *err);

// The verification of rg_spec_step with given drafts[k] (tests; rg_spec_step drafts and calls it).
rg_status rg_spec_verify(rg_spec *sp, int32_t last, const int32_t *drafts, int64_t k, rg_sampler *smp, int32_t *out,
                         int64_t *n_out, rg_error *err);

// Rewinds the target to its first pos tokens (rg_session_rewind), the decoder's context with it, and the
// draft model's session where it holds more: what a caller that stops inside a verified run (an end of
// generation among the kept drafts) calls before it evaluates anything else (a chat's next turn). pos may
// not go below the target's n_past when the decoder was made (RG_ERR_ARG); a refused rewind changes nothing.
rg_status rg_spec_rewind(rg_spec *sp, int64_t pos, rg_error *err);

rg_spec_stats rg_spec_get_stats(const rg_spec *sp);

#endif
