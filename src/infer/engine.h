// engine.h - continuous batching over a session's sequences (what `retrograd serve` runs): requests (a prompt,
// sampling settings, limits) wait in a queue and take free slots, one slot a sequence of one session; each step
// feeds one slot's prompt a chunk at a time and runs every generating slot's next token together in one exact
// batch (rg_session_eval_seqs), so the weights are read once for all of them.
//
// Every request's tokens are those it gets alone: a generated token's logits are the bits of a single-token step
// whatever shares its batch (exact batches), and a prompt is fed on its own slot in chunks of n_batch, never
// mixed with other slots' tokens. A new request takes the free slot whose cached tokens share the longest prefix
// with its prompt and keeps that prefix (the exact rewind, recurrent models included: the session keeps
// snapshots), so a conversation resent with one more message, or with its last message edited or regenerated,
// feeds only what changed; its tokens are then those of a session fed the same history (test_engine).
#ifndef RG_INFER_ENGINE_H
#define RG_INFER_ENGINE_H

#include <stdint.h>

#include "infer/sampler.h"
#include "infer/session.h"

typedef struct rg_engine rg_engine;

typedef enum rg_finish {
    RG_FINISH_NONE = 0,   // a token event: more may follow
    RG_FINISH_STOP,       // a stop token was drawn (not emitted)
    RG_FINISH_LENGTH,     // max_tokens emitted, or the slot's context is full
    RG_FINISH_CANCELLED,  // rg_engine_cancel
    RG_FINISH_ERROR,      // the evaluation failed: the message is in the event
} rg_finish;

#define RG_ENGINE_MAX_TOP_LOGPROBS 20

// What a step reports: a token drawn for request id (finish NONE), or the request's end (token -1).
typedef struct rg_engine_event {
    int id;
    int32_t token;
    rg_finish finish;
    int64_t n_prompt, n_cached;  // with the end: the prompt's tokens, and how many of them the slot's cache held
    const char *error;           // RG_FINISH_ERROR: why (valid during the callback)
    // A token event of a request with logprobs: the token's log-probability under the model (log-softmax of the
    // logits, before any sampling setting), and the n_top most likely tokens with theirs, most likely first.
    float logprob;
    int n_top;
    int32_t top_id[RG_ENGINE_MAX_TOP_LOGPROBS];
    float top_logprob[RG_ENGINE_MAX_TOP_LOGPROBS];
} rg_engine_event;

typedef struct rg_engine_opts {
    int n_slots;          // sequences decoded together (1..RG_SESSION_MAX_SEQ)
    int64_t n_ctx;        // tokens per slot (<= 0: the model's, capped at 4096)
    int64_t n_batch;      // prompt chunk and the most tokens of one batch (<= 0: 256)
    int n_threads;        // <= 0: all cores
    rg_device device;
    const struct rg_lora *lora;  // an adapter every slot runs with (not owned; outlives the engine), or NULL
    float lora_scale;            // its user scale (rg_session_opts.lora_scale)
    // Called for every event of a step, in order; user is passed back.
    void (*on_event)(void *user, const rg_engine_event *ev);
    void *user;
} rg_engine_opts;

typedef struct rg_engine_request {
    const int32_t *prompt;  // copied at submission
    int64_t n_prompt;       // >= 1
    rg_sampler_params sampling;
    int64_t max_tokens;     // <= 0: until a stop token or the context's end
    const int32_t *stop;    // tokens that end the generation (copied), e.g. the model's end-of-generation ones
    int n_stop;
    bool logprobs;          // token events carry logprob
    int top_logprobs;       // and this many alternatives (0..RG_ENGINE_MAX_TOP_LOGPROBS)
} rg_engine_request;

rg_status rg_engine_create(rg_engine **out, const rg_model *m, const rg_engine_opts *opts, rg_error *err);
void rg_engine_free(rg_engine *e);
// Queues a request; *id names it in events. Refused (RG_ERR_ARG, nothing queued) when the prompt is empty, holds
// an id outside the vocabulary, or does not leave room for a token in a slot's context, or the sampling settings
// are invalid.
rg_status rg_engine_submit(rg_engine *e, const rg_engine_request *r, int *id, rg_error *err);
// One step: queued requests take free slots, one prompting slot is fed a chunk, every generating slot draws its
// next token. Events go to opts.on_event. A failed evaluation ends the requests it served (RG_FINISH_ERROR) and
// the engine goes on; the return is an error only for what stops the engine itself (out of memory).
rg_status rg_engine_step(rg_engine *e, rg_error *err);
// Requests queued or in a slot.
int rg_engine_pending(const rg_engine *e);
// Slots serving a request (pending minus those queued).
int rg_engine_busy(const rg_engine *e);
// Ends request id (queued or in a slot) with RG_FINISH_CANCELLED at once; false when there is no such request.
bool rg_engine_cancel(rg_engine *e, int id);
// Tokens per slot (the context a request's prompt and generation share).
int64_t rg_engine_n_ctx(const rg_engine *e);
// Slots between requests (a busy slot is refused with RG_ERR_ARG): slot k's cache to path (the session's state
// of its sequence, session_state.h) and path.tokens (the tokens it holds, which prefix matching needs); back
// from those files (everything checked before the slot is touched: the model, the sizes, the tokens'
// vocabulary); or emptied. *n_tokens (may be NULL) gets the tokens saved or restored.
int rg_engine_n_slots(const rg_engine *e);
rg_status rg_engine_slot_save(rg_engine *e, int k, const char *path, int64_t *n_tokens, rg_error *err);
rg_status rg_engine_slot_load(rg_engine *e, int k, const char *path, int64_t *n_tokens, rg_error *err);
rg_status rg_engine_slot_erase(rg_engine *e, int k, rg_error *err);
// The session the slots live in (one sequence each).
rg_session *rg_engine_session(rg_engine *e);

#endif
