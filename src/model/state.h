// state.h - what a model keeps between evaluations of one sequence, layer by
// layer, as its layers' kinds describe it (model/layer.h): attention layers
// keep their keys and values per cached token (the KV cache), short-conv
// layers the last L-1 gated inputs, SSM layers the conv window and the SSM
// state, per sequence; FFNs keep nothing.
#ifndef RG_MODEL_STATE_H
#define RG_MODEL_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

enum { RG_STATE_MAX_BUFS = 4 };

// The version of the buffers' layout: which buffers each kind keeps, in which order, shaped how. A state file
// (infer/session_state.h) records it and is refused by a build with another: bump it when a kind's buffers change.
#define RG_STATE_LAYOUT_VERSION 1u

// One layer's buffers: its mixer's, then its FFN's, in the order of their kinds' descriptions.
typedef struct rg_layer_state {
    int n_bufs;
    void *buf[RG_STATE_MAX_BUFS];
    size_t bytes[RG_STATE_MAX_BUFS];
    uint32_t type[RG_STATE_MAX_BUFS];
    bool per_token[RG_STATE_MAX_BUFS];   // false: per sequence (recurrent), reset at a sequence's start
    size_t run_bytes[RG_STATE_MAX_BUFS]; // per-token: bytes of one token's run, the buffer being
                                         // [run, n_ctx, bytes / (run_bytes * n_ctx)] (model/layer.h); 0 per sequence
    // Exact rewind (infer/session_snap.c): set by the session while it builds a batch's graph, NULL otherwise.
    // A short-conv or SSM layer then also writes its conv inputs [C, T] into snap_conv_x and, an SSM layer, the state
    // after every token [N, P, H, T] (SSM_SCAN's part 2) into snap_ssm; each has room for snap_cap tokens.
    float *snap_conv_x, *snap_ssm;
    int64_t snap_cap;
} rg_layer_state;

typedef struct rg_model_state {
    int64_t n_ctx, n_layer;
    uint32_t token_type;      // the per-token buffers' type (F32 or F16); per-sequence ones are F32
    rg_layer_state *layers;   // [n_layer]
    size_t token_bytes, seq_bytes;  // all per-token / per-sequence buffers
    void *saved;              // rg_model_state_save's copy of the per-sequence buffers (seq_bytes), or NULL
} rg_model_state;

// Allocates (zeroed) exactly the buffers each layer's kinds describe, for n_ctx tokens. Keys per attention layer
// [head_dim, n_ctx, n_head_kv] and values stored transposed [n_ctx, head_dim, n_head_kv], so both are read by
// MUL_MAT with contiguous rows.
rg_status rg_model_state_init(rg_model_state *s, const rg_model *m, int64_t n_ctx, uint32_t token_type, rg_error *err);
void rg_model_state_free(rg_model_state *s);
// Whether any layer keeps per-sequence (recurrent) state, which cannot be rewound to an earlier position.
bool rg_model_state_recurrent(const rg_model_state *s);
// A fresh sequence: the per-sequence buffers zeroed (cached tokens are overwritten as positions are reused).
void rg_model_state_reset(rg_model_state *s);
// Copies the per-sequence buffers aside, and puts them back: an evaluation that fails changes nothing.
rg_status rg_model_state_save(rg_model_state *s, rg_error *err);
void rg_model_state_restore(rg_model_state *s);

#endif
