// forward.h - a model's forward pass as a graph: token ids and positions in,
// logits out; each layer is built by its kinds (model/layer.h). The weights are graph nodes chosen
// by the caller: frozen leaves over the mapped file for inference, trainable
// parameters for a full fine-tune, or frozen leaves wrapped with LoRA.
#ifndef RG_MODEL_FORWARD_H
#define RG_MODEL_FORWARD_H

#include "graph/graph.h"
#include "model/model.h"

typedef struct rg_layer_nodes {
    rg_node *w[RG_N_ROLES];   // the layer's weights by role (model/arch.h), NULL where it has none
    // LoRA (model/lora.h, rg_lora_attach): per target (RG_LORA_TARGET_*, the arch table's lora column),
    // A [n_in, rank] and B [rank, n_out] or NULL; a projection with both becomes
    // W x + lora_scale * B(A x). lora_scale 0: none (the graph is the plain one).
    rg_node *lora_a[RG_LORA_N_TARGETS], *lora_b[RG_LORA_N_TARGETS];
    float lora_scale;
} rg_layer_nodes;

typedef struct rg_model_nodes {
    rg_node *tok_embd, *out_norm, *output;  // output == tok_embd when tied
    rg_layer_nodes *layers;                 // [n_layer], in the graph's arena
    // Attention layers take FLASH_ATTN_EXT (its backward FLASH_ATTN_BACK) with the documents as
    // ids (seg) instead of MUL_MAT + SOFT_MAX over the dense mask, or over the KV cache instead
    // of the [n_kv, T, H] scores; training decides it once (train_state.c, training.flash_attn),
    // a session per prompt batch (session.c, rg_session_flash_prompt). rg_model_leaf_nodes: false.
    bool flash_attn;
    // Every token of a batch over the cache computed as a single-token step computes it: attention through
    // ATTN_DECODE, query by query (infer/session.c's exact batches, which also mark the MUL_MATs
    // RG_MUL_MAT_COLUMNS). Excludes flash_attn. rg_model_leaf_nodes: false.
    bool exact_columns;
} rg_model_nodes;

// Frozen leaves over the model's mapped tensors (never written).
rg_status rg_model_leaf_nodes(rg_graph *g, const rg_model *m, rg_model_nodes *w, rg_error *err);
// A frozen leaf over one mapped tensor (NULL for NULL).
rg_node *rg_model_leaf(rg_graph *g, const rg_gguf_tensor *t);

struct rg_model_state;

// ids, pos: I32 [n_tokens]. mask: NULL, or F32 [n_tokens, n_tokens] added to
// the scores (0 or -inf; packing boundaries), always combined with the causal
// mask. Returns logits F32 [n_vocab, n_tokens], or NULL with the graph's error set.
rg_node *rg_model_forward(rg_graph *g, const rg_model *m, const rg_model_nodes *w, rg_node *ids, rg_node *pos,
                          rg_node *mask);
// Training's forward over one packed row: the same, with seg (NULL, or I32
// [n_tokens] document ids: the short conv and the SSM restart at each
// document's start, as the mask does for attention, training.md 8.4) and the
// layer boundaries for activation recompute (rg_graph_recompute): bounds[il]
// is layer il's input (bounds[0] the token embeddings) and bounds[n_layer] the
// last layer's output; n_layer + 1 entries.
rg_node *rg_model_forward_bounds(rg_graph *g, const rg_model *m, const rg_model_nodes *w, rg_node *ids, rg_node *pos,
                                 rg_node *mask, rg_node *seg, rg_node **bounds);
// Training with the fused cross-entropy (rg_linear_ce): the same, stopping at
// the final normed hidden states [n_embd, n_tokens]; the caller applies
// w->output (the LM head, or tok_embd when tied) inside the loss. seg and
// bounds as rg_model_forward_bounds (may be NULL). A model whose logits are
// capped (hparams.final_softcap, gemma2) needs the cap after the head, which
// the fused loss does not apply: train it through rg_model_forward_bounds.
rg_node *rg_model_forward_hidden(rg_graph *g, const rg_model *m, const rg_model_nodes *w, rg_node *ids, rg_node *pos,
                                 rg_node *mask, rg_node *seg, rg_node **bounds);
// The same with the per-layer state (model/state.h): attention layers write the n_tokens new keys and values at
// positions n_past.. and read all n_past + n_tokens cached ones. last_only: logits [n_vocab, 1] for the last
// token (generation).
rg_node *rg_model_forward_kv(rg_graph *g, const rg_model *m, const rg_model_nodes *w, rg_node *ids, rg_node *pos,
                             struct rg_model_state *state, int64_t n_past, bool last_only);

// One sequence's part of a batch of several (rg_model_forward_seqs): its tokens are the batch's columns
// first..first + n, evaluated at its positions n_past.. over its state.
typedef struct rg_seq_seg {
    struct rg_model_state *state;
    int64_t first, n, n_past;
} rg_seq_seg;

// The same for a batch of several sequences, each over its own state (continuous batching): the embeddings,
// norms, FFNs and projections run once over all the batch's columns, attention and the recurrent layers' conv
// and scan per segment over its sequence's cache and state, their outputs gathered back into the batch's
// columns. ids, pos: I32 [n_tokens], the segments in column order covering them. last: NULL (logits
// [n_vocab, n_tokens]) or I32 [n_segs], each segment's last column (logits [n_vocab, n_segs]).
rg_node *rg_model_forward_seqs(rg_graph *g, const rg_model *m, const rg_model_nodes *w, rg_node *ids, rg_node *pos,
                               const rg_seq_seg *segs, int n_segs, rg_node *last);

#endif
