// quantize_rules.h - which tensor of a model gets which type when a file is
// quantized: llama-quantize's conventions (spec gguf-and-types.md §6), so our
// Q4_K_M is the Q4_K_M people know.
#ifndef RG_MODEL_QUANTIZE_RULES_H
#define RG_MODEL_QUANTIZE_RULES_H

#include <stdbool.h>
#include <stdint.h>

#include "retrograd.h"

// A target named on the command line: a single type or a mixture.
typedef struct rg_quant_target {
    const char *name;       // "Q4_K_M", "Q8_0", "F16", ...
    uint32_t default_type;  // the type most tensors get
    uint32_t llama_ftype;   // general.file_type written (spec §1.12)
    bool mixture;           // the per-tensor rules of §6.3 apply (otherwise: uniform)
} rg_quant_target;

// The target for a name (case-insensitive), or NULL. rg_quant_targets lists them all.
const rg_quant_target *rg_quant_target_find(const char *name);
extern const rg_quant_target rg_quant_targets[];
// The same, or RG_ERR_ARG naming it and listing every valid name ("unknown type or mixture 'Q9_0' (valid: F32, ...)").
rg_status rg_quant_target_lookup(const char *name, const rg_quant_target **out, rg_error *err);

// What the rules need to know about the model and where the walk is.
typedef struct rg_quant_state {
    int n_layer;
    int n_head, n_head_kv;
    int n_expert;
    bool has_output;          // output.weight exists (otherwise token_embd is the tied head)
    int n_attention_wv;       // attn_v-like tensors in the model
    int i_attention_wv;       // attn_v-like tensors seen so far (the rules advance it)
    bool pure;                // every quantizable tensor takes the default type
} rg_quant_state;

// Whether a tensor is quantized at all (§6.1): 2+ dims, name ends in "weight",
// not a norm, router, conv kernel, position embedding, ...
bool rg_quant_tensor_is_quantizable(const char *name, int n_dims);

// The type for one quantizable tensor with innermost dimension ne0, visited in
// (layer, name) order; applies §6.3 for mixtures and the shape fallback of §6.2.
// Returns -1 when no type fits ne0 (err names the tensor).
int rg_quant_choose_type(const rg_quant_target *target, rg_quant_state *st, const char *name, int64_t ne0,
                         rg_error *err);

// Whether the rules count this tensor as attn_v-like (attn_v, attn_qkv, attn_kv_b).
bool rg_quant_is_attn_v_like(const char *name);

// The layer index of "blk.N.…", or -1.
int rg_quant_layer_of(const char *name);

#endif
