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

struct rg_session {
    const rg_model *m;
    rg_session_opts opts;
    rg_model_state state;   // what each layer keeps: the KV cache of attention layers, recurrent state
    rg_threadpool *pool;
    int64_t n_past;
    bool state_lost;        // the recurrent state no longer matches n_past (see rg_session_eval)
    decode_graph dec;   // g == NULL: none
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

#endif
