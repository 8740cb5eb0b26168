// forward.h - the llama-family forward pass as a graph (architectures.md §1.3):
// token ids and positions in, logits out. The weights are graph nodes chosen
// by the caller: frozen leaves over the mapped file for inference, trainable
// parameters for a full fine-tune, or frozen leaves wrapped with LoRA.
#ifndef RG_MODEL_FORWARD_H
#define RG_MODEL_FORWARD_H

#include "graph/graph.h"
#include "model/model.h"

typedef struct rg_layer_nodes {
    rg_node *attn_norm, *wq, *wk, *wv, *wo, *bq, *bk, *bv, *bo, *q_norm, *k_norm;
    rg_node *ffn_norm, *ffn_gate, *ffn_up, *ffn_down;
} rg_layer_nodes;

typedef struct rg_model_nodes {
    rg_node *tok_embd, *out_norm, *output;  // output == tok_embd when tied
    rg_layer_nodes *layers;                 // [n_layer], in the graph's arena
} rg_model_nodes;

// Frozen leaves over the model's mapped tensors (never written).
rg_status rg_model_leaf_nodes(rg_graph *g, const rg_model *m, rg_model_nodes *w, rg_error *err);

// ids, pos: I32 [n_tokens]. mask: NULL, or F32 [n_tokens, n_tokens] added to
// the scores (0 or -inf; packing boundaries), always combined with the causal
// mask. Returns logits F32 [n_vocab, n_tokens], or NULL with the graph's error set.
rg_node *rg_model_forward(rg_graph *g, const rg_model *m, const rg_model_nodes *w, rg_node *ids, rg_node *pos,
                          rg_node *mask);

#endif
