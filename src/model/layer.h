// layer.h - the kinds of layer (model/arch.h's rg_layer_kind): for each, a
// graph builder and the state it keeps between evaluations. The forward
// (forward.c) calls a layer's mixer kind, then its FFN kind; the session
// (infer/session.c, through model/state.c) allocates what their state
// descriptions say.
#ifndef RG_MODEL_LAYER_H
#define RG_MODEL_LAYER_H

#include "model/forward.h"
#include "model/state.h"

// What a builder sees of one layer.
typedef struct rg_layer_ctx {
    rg_graph *g;
    const rg_model *m;
    int64_t il;
    const rg_layer *layer;      // the model's layer: kinds and per-layer sizes
    const rg_layer_nodes *w;    // its weight nodes by role, and LoRA
    rg_node *pos;               // I32 [n_tokens]
    rg_node *mask;              // F32 [n_tokens, n_tokens] added to attention scores, or NULL
    rg_node *seg;               // I32 [n_tokens] document ids (training's packed rows: the conv and scan restart at
                                // each document, training.md 8.4), or NULL
    bool flash;                 // attention through FLASH_ATTN_EXT: documents from seg (no mask), or over the cache
    bool exact_columns;         // every token as a single-token step computes it (a session's exact batches):
                                // attention over the cache through ATTN_DECODE, query by query, at any batch size
    rg_layer_state *state;      // the layer's buffers (NULL: no cache, a full pass)
    int state_first;            // this kind's first buffer in state (the mixer's come first, then the FFN's)
    int64_t n_past;             // tokens already in the state
    int64_t n_ctx;              // tokens the per-token buffers hold
    // A batch of several sequences (rg_model_forward_seqs; state NULL then): each kind runs its per-sequence
    // part (attention over the cache, the conv and the scan) once per segment on rg_layer_seg_ctx's context,
    // over the segment's columns (rg_layer_cols), and gathers the parts' outputs (rg_layer_gather).
    const rg_seq_seg *segs;
    int n_segs;
} rg_layer_ctx;

// One buffer of a kind's state: elements per cached token (the KV cache, in the state's token type) or per
// sequence (recurrent state, F32), as a function of the hyperparameters and the layer. A per-token buffer is laid
// out [run, n_ctx, elements / run]: run elements of one token lie together, then the next token's (run: the
// keys' head_dim; 1 for the transposed values), so a token's rows can be found without knowing the kind
// (infer/session_state.c writes rows 0..n_past of each). run is NULL for per-sequence buffers.
typedef struct rg_state_buf {
    const char *name;
    bool per_token;
    int64_t (*elements)(const rg_hparams *hp, const rg_layer *L);
    int64_t (*run)(const rg_hparams *hp, const rg_layer *L);
} rg_state_buf;

typedef struct rg_layer_kind_desc {
    const char *name;           // "attention", "short conv", "ssm", "ffn"
    // x [n_embd, T] -> x + the kind's residual branch (its own pre-norm included); NULL with the graph's
    // error set when it cannot be built.
    rg_node *(*build)(const rg_layer_ctx *c, rg_node *x);
    int n_state;
    const rg_state_buf *state;
} rg_layer_kind_desc;

// The description of a kind; NULL for RG_KIND_NONE.
const rg_layer_kind_desc *rg_layer_kind_get(rg_layer_kind k);

extern const rg_layer_kind_desc rg_layer_attn, rg_layer_shortconv, rg_layer_ssm, rg_layer_ffn;

// Shared by the builders. Norm weights and biases are F32 in converted files; third-party files may store them
// as F16/BF16, which elementwise ops take after a cast.
rg_node *rg_layer_f32(rg_graph *g, rg_node *n);
// RMSNorm over the innermost dimension times the weight.
rg_node *rg_layer_norm(rg_graph *g, rg_node *x, rg_node *w, float eps);
// W x (+ lora_scale * B(A x) when the layer has a LoRA pair for W's role) (+ bias): roles of the weight and bias
// (RG_N_ROLES: none).
rg_node *rg_layer_linear(const rg_layer_ctx *c, rg_role w, rg_role b, rg_node *x);
// Segment i's context: c with that sequence's layer state, n_past and n_ctx, and no segments.
rg_layer_ctx rg_layer_seg_ctx(const rg_layer_ctx *c, int i);
// A view of x's columns first..first + n along dimension dim (the tokens' dimension of x), x's strides kept.
rg_node *rg_layer_cols(rg_graph *g, rg_node *x, int dim, int64_t first, int64_t n);
// An F32 [rows, T] tensor the segments' parts write their columns into (rg_layer_put_cols) before anything reads
// it: a leaf the graph's plan gives bytes, alive to the end of the graph (one per layer and kind: rows x T floats).
rg_node *rg_layer_gather(const rg_layer_ctx *c, const char *name, int64_t rows, int64_t T);
// Writes part [rows, n] (any shape of rows x n elements, contiguous) into dst's columns first..first + n.
void rg_layer_put_cols(rg_graph *g, rg_node *part, rg_node *dst, int64_t first);
// A leaf over buffer i of this kind's state (F32, per sequence) with the given shape; NULL without a state.
rg_node *rg_layer_state_leaf(const rg_layer_ctx *c, int i, const char *name, int n_dims, const int64_t *ne);

#endif
