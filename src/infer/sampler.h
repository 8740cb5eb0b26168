// sampler.h - choosing the next token from logits: a fixed, seeded sampler chain.
//
// The chain, in llama.cpp's default order (common/sampling: penalties, top-k, top-p, min-p,
// temperature, dist):
//   1. repetition penalty over the last repeat_last_n accepted tokens: each distinct token in
//      that window once, logit > 0 divided by the penalty, otherwise multiplied (llama.cpp).
//   2. temp <= 0: greedy, the largest logit, ties to the lowest id; nothing else applies.
//   3. top-k (0: off): the k largest logits (ties to the lower id).
//   4. top-p (1: off): of the softmax over what top-k kept, sorted by probability, the
//      shortest prefix whose sum reaches top_p (at least one token).
//   5. min-p (0: off): tokens whose probability is at least min_p times the largest one.
//   6. temperature: softmax of logit / temp over what is left, and one draw from it with the
//      uniform rg_rng_uniform(seed, RG_SAMPLER_STREAM, step), step = the number of draws made.
// The filters see the penalized logits at temperature 1; temperature only reshapes the
// survivors (llama.cpp moved temperature last so that a high temperature cannot widen the
// nucleus into the tail).
//
// Reproducible: everything after the logits is IEEE double arithmetic (+ - * / and an exp
// written here, no libm, no fused multiply-add), a total order (logit descending, then id)
// wherever tokens are ranked, every sum in one fixed blocked order (sample_math.h: blocks of
// 256 list positions; a list of up to 256 candidates adds left to right), and a counter-based
// draw, so the same seed, settings and logits give the same tokens on every machine, and on
// a CUDA device: src/cuda/sampling.cu runs this chain on logits in device memory and picks the
// token this file picks (rg_session_eval_sample, infer/session.h).
//
// NaN logits count as -inf. When the largest logit is +inf, the +inf tokens share the mass.
#ifndef RG_INFER_SAMPLER_H
#define RG_INFER_SAMPLER_H

#include <stdint.h>

#include "retrograd.h"

#define RG_SAMPLER_STREAM 0x73616d706c65ull  // "sample": the rng stream of the draws

typedef struct rg_sampler_params {
    float temp;              // <= 0: greedy (default 0.8)
    int32_t top_k;           // >= 0, 0 = off (default 40)
    float top_p;             // (0, 1], 1 = off (default 0.95)
    float min_p;             // [0, 1), 0 = off (default 0.05)
    float repeat_penalty;    // > 0, 1 = off (default 1.0)
    int32_t repeat_last_n;   // >= 0 tokens of history, 0 = off (default 64)
    uint64_t seed;           // default 42
} rg_sampler_params;

typedef struct rg_sampler rg_sampler;

// The defaults listed above.
rg_sampler_params rg_sampler_defaults(void);
// RG_ERR_ARG naming the option (as the command line spells it) and its valid range.
rg_status rg_sampler_params_check(const rg_sampler_params *p, rg_error *err);

rg_status rg_sampler_create(rg_sampler **out, const rg_sampler_params *p, int32_t n_vocab, rg_error *err);
void rg_sampler_free(rg_sampler *s);
// Forgets the history and restarts the draw counter at 0.
void rg_sampler_reset(rg_sampler *s);

// Appends a token to the repetition-penalty history (prompt tokens and sampled tokens alike).
// Ids outside [0, n_vocab) are ignored.
void rg_sampler_accept(rg_sampler *s, int32_t id);
// Draws the next token from logits[n_vocab] (not modified) and advances the draw counter.
// Does not accept the token: call rg_sampler_accept with it.
int32_t rg_sampler_sample(rg_sampler *s, const float *logits);

// The tokens the chain would draw from, with their final probabilities (after temperature),
// most probable first (ties: lower id first); writes min(count, cap) and returns the count.
// Does not advance the draw counter. Greedy gives the one argmax with probability 1.
int64_t rg_sampler_candidates(rg_sampler *s, const float *logits, int32_t *ids, double *probs, int64_t cap);

// Number of draws so far (the rng index of the next draw).
uint64_t rg_sampler_step(const rg_sampler *s);

// For a sampler that runs elsewhere (the device's, src/cuda/sampling.cu) on this sampler's
// state: the settings; the distinct tokens of the penalty window (each once, in the order of
// their first appearance; none when the penalty is off), min(count, cap) written and the count
// returned (at most repeat_last_n); and the draw counter moved past a draw made there.
const rg_sampler_params *rg_sampler_get_params(const rg_sampler *s);
int32_t rg_sampler_n_vocab(const rg_sampler *s);
int64_t rg_sampler_penalized(rg_sampler *s, int32_t *ids, int64_t cap);
void rg_sampler_advance(rg_sampler *s);

#endif
