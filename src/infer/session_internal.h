// session_internal.h - the session's struct, shared by the files that make up rg_session (session.c, and
// session_state.c, which reads and replaces its cache and position). Not for other modules.
#ifndef RG_INFER_SESSION_INTERNAL_H
#define RG_INFER_SESSION_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/cuda.h"
#include "graph/backend.h"
#include "graph/exec.h"
#include "infer/session.h"
#include "model/forward.h"
#include "model/state.h"

// The weights copied into huge pages (session.c: RETRO_WEIGHTS_HUGEPAGES=1).
typedef struct weight_copy {
    const uint8_t *src;  // the model's tensor data: [src, src + size)
    uint8_t *dst;        // its copy, or NULL (none)
    size_t size, mapped; // bytes of data; bytes mapped for the copy
} weight_copy;

// The single-token graph planned once for every position (session.c's header), and its nodes that move with the
// position.
typedef struct var_node {
    int idx;                          // node index
    int64_t dne[RG_MAX_DIMS];         // change of ne per position
    int64_t dnb[RG_MAX_DIMS];         // change of nb per position (bytes)
    int64_t doffs;                    // change of view_offs per position
} var_node;

typedef struct decode_graph {
    rg_graph *g;
    rg_exec *ex;
    rg_node *ids, *pos, *out;
    int64_t lo, hi;     // positions (n_past) served; planned for hi
    int64_t cur;        // the position the variable nodes are patched to now
    var_node *var;
    int n_var;
    bool failed;        // the graph could not be made (not linear): tokens build their own
} decode_graph;

// Exact rewind of recurrent state (session_snap.c has the design): what RETRO_RECURRENT_ROLLBACK=auto keeps.
#define SNAP_RING 16  // single-token steps whose state before the step is kept
typedef struct snap_store {
    bool requested;         // RETRO_RECURRENT_ROLLBACK=auto when the session was made
    bool on;                // requested and the model has recurrent state (else nothing below is allocated)
    int64_t cap;            // tokens of a batch kept (n_batch)
    uint8_t *mem;           // one allocation: prev, the ring, then each layer's snap_conv_x and snap_ssm
    size_t bytes;           // of mem
    // The last batch of several tokens: positions batch_start .. batch_start + batch_n (batch_n < 0: none kept).
    int64_t batch_start, batch_n;
    uint8_t *prev;          // the per-sequence buffers before that batch (model/state.c's copy_seq order), seq_bytes
    // The ring: entry i holds the per-sequence buffers after ring_pos[i] tokens (-1: empty), copied before the
    // single-token step at that position.
    uint8_t *ring;          // [SNAP_RING][seq_bytes]
    int64_t ring_pos[SNAP_RING];
    int ring_next;
    float **conv_x, **ssm;  // [n_layer]: each recurrent layer's conv inputs [C, cap] and SSM states [N*P*H, cap]
                            // (NULL where the layer has none)
} snap_store;

// session_snap.c, called by session.c (and session_state.c, which saves the snapshots and loads them back).
rg_status snap_init(rg_session *s, rg_error *err);
void snap_free(snap_store *sn);
// Before the graph of a batch of n > 1 tokens at n_past is built: the state copied to prev, the layers' snapshot
// pointers set (model/state.h); snap_batch_end clears them and keeps the batch when it ran (ok).
void snap_batch_begin(rg_session *s, int64_t n);
void snap_batch_end(rg_session *s, int64_t n, bool ok);
// Before a single-token step at n_past: the state copied into the ring.
void snap_token(rg_session *s);
// Forgets every snapshot of a position after pos (-1: all).
void snap_forget_after(snap_store *sn, int64_t pos);
// A part of the kept batch's snapshots as a state file holds it (session_state.c): fixed + per_token x batch_n bytes
// at p (the store's host bytes; NULL when the session keeps none), the rest of its room unused.
typedef struct snap_part {
    uint8_t *p;
    size_t fixed, per_token;
} snap_part;
// The batch's parts in the file's order into parts[1 + 2 * n_layer]: prev, then per short-conv or SSM layer its
// conv inputs and (SSM) states. Sized from the model, so a session that keeps no snapshots reads past them.
// Returns how many.
int snap_batch_parts(const rg_session *s, snap_part *parts);
// On a device: the snapshots' host bytes sent to every device copy of them (after a load rewrote them).
rg_status snap_upload(rg_session *s, rg_error *err);
// Puts back the recurrent state after pos tokens (0 < pos < n_past) when a snapshot holds it; RG_ERR_UNSUPPORTED
// naming what is kept otherwise (nothing changed). Does not move n_past.
rg_status snap_restore(rg_session *s, int64_t pos, rg_error *err);

// One sequence of a session (rg_session_opts.n_seq): everything that depends on the tokens it has seen. Its
// cache and recurrent state, its position, the snapshots that rewind it, and its single-token graph (made at its
// first single-token step: the graph's leaves point at this sequence's buffers).
typedef struct seq_slot {
    rg_model_state state;   // what each layer keeps: the KV cache of attention layers, recurrent state
    int64_t n_past;
    bool state_lost;        // the recurrent state no longer matches n_past (see rg_session_eval)
    decode_graph dec;       // g == NULL: none
    snap_store snap;        // exact rewind of recurrent state (session_snap.c)
} seq_slot;

struct rg_session {
    const rg_model *m;
    rg_session_opts opts;
    seq_slot *seqs;         // [n_seq] (opts.n_seq)
    // The sequence the call in progress acts on: every public entry point sets it before anything reads it, so
    // the files of the session (session.c, session_snap.c, session_state.c) work on s->q alone.
    seq_slot *q;
    rg_threadpool *pool;
    weight_copy wc;
    rg_exec_mem mem;    // the batch graphs' buffer and scratch, kept between evaluations
    // Prompts whose BF16/F16 weights take the BF16 tiles (AMX, or emulated): the weights packed once
    // and held (cpu/tiles_cache.h, within half of MemAvailable or RG_TILES_CACHE_MB), or NULL.
    struct rg_tiles_cache *tiles;
    // On a device: the backend and the device copies of the weights and the KV cache,
    // shared by every batch's exec (uploaded once; the cache stays on the device).
    rg_backend *dev;
    rg_resident *resident;
    // rg_session_eval_sample: on a device the draw runs there (device_sampling), with the sampler's
    // scratch made at the first draw; the penalty window's distinct ids staged in pen; on the
    // CPU the last logits land in logits.
    bool device_sampling;
    rg_cuda_sampler *dsamp;
    int32_t *pen;
    int64_t pen_cap;
    float *logits;  // [n_vocab]
};

// Points s->q at sequence seq; RG_ERR_ARG naming the session's sequences when it has none such (`what`: the call).
rg_status rg_session_pick(rg_session *s, int seq, const char *what, rg_error *err);

// A batch graph (session.c): begun with the model's leaves (flash attention as asked, unless exact) and the
// session's LoRA attached; ended with its output marked, an exact batch's MUL_MATs marked RG_MUL_MAT_COLUMNS, the
// weights bound to the session's huge-page copy (out NULL: the graph's error). The exec options batch graphs take.
rg_status session_graph_begin(rg_session *s, bool flash, bool exact, rg_graph **gp, rg_model_nodes *w, rg_error *err);
rg_status session_graph_end(rg_session *s, rg_graph *g, rg_node *out, bool exact, rg_error *err);
rg_exec_opts session_batch_exec_opts(rg_session *s);

// On a device: the per-sequence (recurrent) buffers' host bytes uploaded to their resident copies again,
// after the host bytes changed (a reset, a restore). Nothing on the CPU.
rg_status rg_session_seq_state_upload(rg_session *s, rg_error *err);

// The checks of every evaluation of the picked sequence s->q: tokens given, room in the context, ids in the
// vocabulary, recurrent state not lost; who ("" or "entry 2 (sequence 5): ") opens the message.
rg_status session_check_tokens(rg_session *s, const int32_t *ids, int64_t n, const char *who, rg_error *err);

#endif
