// session.h - running a model over growing sequences with a KV cache:
// prompt tokens in batches, then one token at a time. Each call evaluates
// new tokens of one sequence at its positions n_past.., appends their keys
// and values to that sequence's cache, and returns logits.
//
// A session holds opts.n_seq sequences (1 by default), each with its own cache,
// recurrent state, position, rewind snapshots and single-token graph, sharing
// the weights, the thread pool, the device and the batch graphs' buffers. The
// calls without _seq act on sequence 0; the _seq forms on any, and a call on
// one sequence never touches another's bits: interleaving sequences gives each
// the bits of a session of its own (test_session_seqs).
#ifndef RG_INFER_SESSION_H
#define RG_INFER_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "cpu/tiles_cache.h"
#include "graph/exec.h"
#include "infer/sampler.h"
#include "model/model.h"

typedef struct rg_session rg_session;

typedef struct rg_session_opts {
    int64_t n_ctx;       // cache length in tokens (<= 0: the model's context_length, capped at 4096)
    int n_threads;       // <= 0: all cores
    int64_t n_batch;     // tokens per evaluation when a call passes more (<= 0: 256)
    rg_device device;
    const struct rg_lora *lora;  // optional LoRA adapter (model/lora.h) applied through the graph; not owned,
                                 // it must outlive the session
    float lora_scale;            // the user's scale of that adapter (llama.cpp's --lora-scaled; 0: off)
    rg_exec_profile *profile;    // optional: every evaluation adds its time per op there (graph/exec.h); not owned
    // false (the default): prompts with Q4_0, Q5_0, Q8_0, Q4_K or Q6_K weights quantize their activations to Q8_0 for the
    // integer GEMM where the CPU has AMX-INT8 or AVX-512 VNNI (the same bits on either), as llama.cpp does and as
    // generation's dot products always do (so a token's logits do not depend on whether it came in a batch); BF16
    // weights (and F16 ones on AMX) round them to BF16 where the CPU has AMX-BF16 or AVX512_BF16. true: prompts keep F32 activations
    // (the SGEMM, as training does): slower, and what a comparison with F32 math on dequantized weights wants.
    bool exact_activations;
    // Prompt batches (several tokens over the cache) through FLASH_ATTN_EXT instead of the materialized
    // [n_kv, T, n_head] scores: auto (the default) when rg_session_flash_prompt says so, on, off (generate and
    // perplexity --flash-attn). A single token keeps its ATTN_DECODE either way. On a CUDA device auto is off and on is refused: FLASH_ATTN_EXT has no CUDA kernel.
    rg_flash_attn_mode flash_attn;
    // With RETRO_RECURRENT_ROLLBACK=auto (infer/session_snap.c): the most tokens of a batch whose recurrent-state
    // snapshots are kept (<= 0: n_batch). A longer batch keeps none (a rewind into it is refused). A speculative
    // decoder's verification batch (the draft and one token) is what needs them; a mamba2 layer keeps its whole
    // SSM state per token, so this bounds the memory.
    int64_t snapshot_tokens;
    // Exact rewind of recurrent state: 0 (the default) as RETRO_RECURRENT_ROLLBACK says (off unless auto), 1
    // auto (snapshots kept, whatever the environment says), -1 off.
    int recurrent_rollback;
    // Sequences the session holds (<= 0: 1; at most RG_SESSION_MAX_SEQ). Each keeps a cache of n_ctx tokens (and,
    // with RETRO_RECURRENT_ROLLBACK=auto, its own snapshots): memory grows with n_seq.
    int n_seq;
} rg_session_opts;

#define RG_SESSION_MAX_SEQ 256

rg_status rg_session_create(rg_session **out, const rg_model *m, const rg_session_opts *opts, rg_error *err);

// Whether a batch of n_tokens > 1 over n_kv cached keys (its own included) takes FLASH_ATTN_EXT: the session's
// one decision (session.c has the measured numbers behind auto). n_head: the model's largest layer's.
bool rg_session_flash_prompt(rg_flash_attn_mode mode, rg_device device, int64_t n_head, int64_t n_tokens, int64_t n_kv);
void rg_session_free(rg_session *s);

// Evaluates n tokens after the cached ones. logits: NULL, or [n_vocab] for the
// last token (all_logits == 0), or [n_vocab, n] for every token (all_logits == 1).
// Fails, changing nothing, when n_past + n would exceed n_ctx (names both numbers);
// any failure leaves n_past as it was (a single token of a model with recurrent
// state leaves that state lost: the next call says so).
rg_status rg_session_eval(rg_session *s, const int32_t *ids, int64_t n, float *logits, int all_logits, rg_error *err);
// The same on sequence seq (0 <= seq < n_seq; RG_ERR_ARG naming the session's sequences otherwise), and likewise
// for every _seq form below.
rg_status rg_session_eval_seq(rg_session *s, int seq, const int32_t *ids, int64_t n, float *logits, int all_logits,
                              rg_error *err);
// One sequence's tokens in a batch of several (rg_session_eval_seqs).
typedef struct rg_seq_tokens {
    int seq;
    const int32_t *ids;
    int64_t n;
} rg_seq_tokens;

// Evaluates several sequences' tokens in one graph (continuous batching: a server's step of every slot's next
// token and the prompts being read): b[0..n_b), each sequence at most once, at most n_batch tokens in all. The
// weights are read once for all of them; attention and the recurrent layers run per sequence over its own cache
// and state. logits: NULL, [n_vocab, n_b] each entry's last token (all_logits 0), or [n_vocab, sum of n] every
// token in entry order (all_logits 1). exact (all_logits must be 1): every token gets the bits of a single-token
// step (as rg_session_eval_exact), so each sequence's logits, cache and state are the bits it would have alone,
// whatever shares its batch (test_session_seqs); otherwise the products take the prompt paths over the whole
// batch (the bits then depend on its size, as rg_session_eval's do). Each sequence's snapshots are kept as its
// own evaluation keeps them (a single token in the ring, more in the batch's), and rewinds alike afterwards.
// Refused before anything changes (RG_ERR_ARG, naming the entry and sequence): an unknown or repeated sequence,
// an empty entry, a context or n_batch overflow, an id outside the vocabulary, a lost recurrent state. A failed
// run changes no sequence (as rg_session_eval). One entry is rg_session_eval_seq (or _exact_seq) itself.
rg_status rg_session_eval_seqs(rg_session *s, const rg_seq_tokens *b, int n_b, float *logits, int all_logits,
                               bool exact, rg_error *err);
// Evaluates n tokens as rg_session_eval does with all_logits = 1 (the same failures, logits NULL or [n_vocab, n]),
// every token computed exactly as a single-token step at its position computes it: the bits (logits, KV cache,
// recurrent state) of evaluating the tokens one at a time, which rg_session_eval's prompt paths (GEMMs, flash
// attention) do not promise. Each MUL_MAT runs the dot products a single token runs, for all the batch's columns
// in one pass over the weights (RG_MUL_MAT_COLUMNS, graph.h), attention over the cache runs query by query
// (ATTN_DECODE, logit caps and sliding windows included).
// What a speculative decoder's verification batch needs (greedy output the bits of decoding without it). Calls
// of more than 32 tokens run as batches of 32 (the same bits); meant for a few tokens.
rg_status rg_session_eval_exact(rg_session *s, const int32_t *ids, int64_t n, float *logits, rg_error *err);
rg_status rg_session_eval_exact_seq(rg_session *s, int seq, const int32_t *ids, int64_t n, float *logits, rg_error *err);
// Evaluates n tokens as rg_session_eval does (the same failures), then draws the next token
// from the last one's logits with smp's settings, penalty window and draw counter, and
// advances that counter (the token is not accepted: call rg_sampler_accept with it). On a CUDA
// device the draw runs there (src/cuda/sampling.cu, the same token as rg_sampler_sample) and
// only the id comes back; on the CPU, or with RETRO_DEVICE_SAMPLING=0 in the environment when
// the session was made, the logits come back and rg_sampler_sample draws. smp must be made for
// the model's n_vocab (RG_ERR_ARG otherwise). out may point into ids; it is -1 after a failure.
rg_status rg_session_eval_sample(rg_session *s, const int32_t *ids, int64_t n, rg_sampler *smp, int32_t *out,
                                 rg_error *err);
rg_status rg_session_eval_sample_seq(rg_session *s, int seq, const int32_t *ids, int64_t n, rg_sampler *smp,
                                     int32_t *out, rg_error *err);
// Whether rg_session_eval_sample draws on the device.
bool rg_session_device_sampling(const rg_session *s);
int64_t rg_session_n_past(const rg_session *s);
// Sequence seq's position; -1 for a sequence the session does not hold.
int64_t rg_session_n_past_seq(const rg_session *s, int seq);
int rg_session_n_seq(const rg_session *s);
int64_t rg_session_n_ctx(const rg_session *s);
// Forgets the cache from position n_past on (0: start over, the recurrent state of short-conv and SSM layers
// zeroed). Recurrent state is put back from a snapshot when one holds n_past (as rg_session_rewind does);
// otherwise truncating it to 0 < n_past makes the next evaluation fail, saying so, until a truncation to 0.
void rg_session_truncate(rg_session *s, int64_t n_past);
// Rewinds the sequence to its first pos tokens (0 <= pos <= n_past) and drops the rest, as if the
// evaluations had stopped at pos: the KV cache is cut (its rows from pos on are overwritten by the next
// evaluation before anything reads them), so continuing gives exactly the bits of a session that made
// the same evaluations cut at pos. A model with recurrent state (short-conv, SSM layers) rewinds to 0
// (a fresh sequence), to n_past (nothing to do), and, when the session was made with
// RETRO_RECURRENT_ROLLBACK=auto in the environment (CPU and device sessions), to any position whose state a snapshot
// still holds: inside the last evaluated batch of several tokens, or one of the last 16 single-token steps
// (infer/session_snap.c); other positions are refused, RG_ERR_UNSUPPORTED, naming the oldest kept one (off,
// the default, keeps none). Refused (RG_ERR_ARG) past the end or below 0, naming both numbers. A refusal
// changes nothing. Snapshots after pos are forgotten. A state file (infer/session_state.h) carries the saving
// session's snapshots: a session made with auto that loads it rewinds where the saving one could, with its bits
// (what its own snapshot_tokens holds of the batch; nothing with off, or from a version 1 file).
rg_status rg_session_rewind(rg_session *s, int64_t pos, rg_error *err);
rg_status rg_session_rewind_seq(rg_session *s, int seq, int64_t pos, rg_error *err);
// Bytes the session holds for recurrent-state snapshots (RETRO_RECURRENT_ROLLBACK=auto), planned at creation
// from n_batch and the ring of 16 single-token steps, for every sequence (host bytes; on a device the batch's snapshots have device copies
// too); 0 with off or for a model without recurrent state.
int64_t rg_session_snapshot_bytes(const rg_session *s);
const rg_model *rg_session_model(const rg_session *s);
// The session's BF16 tiles cache (prompts with BF16/F16 weights on AMX or the emulated tiles: each
// weight packed once and held, within half of MemAvailable or RG_TILES_CACHE_MB; cpu/tiles_cache.h):
// what it holds and how often prompts read it. Zeros when it keeps none.
rg_tiles_cache_stats rg_session_tiles_stats(const rg_session *s);
// What sequence 0's single-token graph's executor has done so far (graph/exec.h's counters: its CUDA
// graph captures and replays under RETRO_CUDA_GRAPHS=1, its copies); zeros before the first
// single-token step.
rg_exec_stats rg_session_decode_stats(const rg_session *s);

#endif
