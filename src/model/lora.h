// lora.h - LoRA adapters: their tensors, the file llama.cpp loads with
// `--lora`, the forward hook's nodes, and merging into a base model.
//
// The format, as llama.cpp reads and writes it (checked against
// convert_lora_to_gguf.py, gguf-py's constants.py and src/llama-adapter.{h,cpp};
// the application is llm_graph_context::build_lora_mm in src/llama-graph.cpp):
//   keys    general.type = "adapter", adapter.type = "lora",
//           adapter.lora.alpha (f32), general.architecture = the base model's arch;
//   tensors "<base tensor name>.lora_a" and ".lora_b" (e.g. blk.0.attn_q.weight.lora_a),
//           F32 / F16 / BF16 (the converter's --outtype; Q8_0 too, which we also read);
//   shapes  (ggml order) W [n_in, n_out], lora_a [n_in, rank], lora_b [rank, n_out]:
//           llama-adapter.cpp refuses a pair unless W.ne[0] == a.ne[0],
//           W.ne[1] == b.ne[1] and a.ne[1] == b.ne[0]; PEFT's lora_A.weight
//           (r x in, torch order) is stored as is, so its ggml shape is [in, r];
//   apply   y = W x + s * B(A x) with mul_mat(b, mul_mat(a, x)) then scale and add;
//           s = user_scale * alpha / rank where rank = b.ne[0], and s = user_scale
//           when alpha is absent or 0 (llama_adapter_lora_weight::get_scale) - so we
//           read a missing or zero alpha as alpha = rank, which gives the same s.
//   llama.cpp skips "*_norm.weight" tensors in adapters and swaps A/B for
//   token_embd; we skip the former too and refuse LoRA on any tensor that is not
//   one of the projections the architecture's table gives a target (token_embd,
//   output: not supported).
//
// Spec: shared/spec/training.md §5.9 (shapes, scale, PEFT's initialisation, merge).
#ifndef RG_MODEL_LORA_H
#define RG_MODEL_LORA_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model/forward.h"
#include "model/model.h"

// The targets RG_LORA_TARGET_* (bit i of a target mask = target i) are declared in model/arch.h: each
// architecture's table says which of its tensors a target adapts.

#define RG_LORA_TARGETS_ALL ((1u << RG_LORA_N_TARGETS) - 1u)

typedef struct rg_lora_pair {
    char name[96];            // base tensor name, e.g. "blk.3.ffn_up.weight"
    int64_t n_in, n_out;
    float *a;                 // [n_in, rank]  F32, owned
    float *b;                 // [rank, n_out] F32, owned
} rg_lora_pair;

typedef struct rg_lora {
    int64_t rank; float alpha; uint32_t targets; // mask
    int64_t n_layer;
    const rg_arch *arch;       // the architecture of the model it was made or read for
    rg_lora_pair *pairs;       // [n_layer * RG_LORA_N_TARGETS], .a == NULL where not targeted
} rg_lora;

// The short name of a target ("attn_q", "ffn_down", "in_proj", ...), NULL outside 0..RG_LORA_N_TARGETS-1.
const char *rg_lora_target_name(int target);
// Parses a comma-separated list of target names ("attn_q,attn_v", or "all")
// into a mask; an unknown name is an error listing the valid ones.
rg_status rg_lora_parse_targets(const char *list, uint32_t *mask, rg_error *err);

// A fresh adapter for model m: A ~ U(-1/sqrt(n_in), 1/sqrt(n_in)) (PEFT's kaiming-uniform(a=sqrt 5) bound),
// drawn from rg_rand_u32(seed, 0, RG_RAND_PURPOSE_LORA_INIT, tensor_id, index) with tensor_id = layer*7+target
// and index the element's flat ggml index: U = (r >> 8) * 2^-24, A = bound * (2U - 1) in f32;
// B = 0 (so the adapted model starts equal to the base).
rg_status rg_lora_init(rg_lora **out, const rg_model *m, int64_t rank, float alpha, uint32_t targets, uint64_t seed,
                       rg_error *err);
// Reads an adapter GGUF and checks it against m (arch, every name exists in m, shapes fit, ranks equal, alpha present
// or default = rank): errors name the tensor and the expected/actual shapes. Accepts F32/F16/BF16 lora tensors
// (and any other type this library can dequantize, such as Q8_0).
rg_status rg_lora_load(rg_lora **out, const char *path, const rg_model *m, rg_error *err);
// Writes adapter.gguf atomically (the project's writer does temp+fsync+rename): the keys above, then per layer and
// target the F32 pair a, b.
rg_status rg_lora_save(const rg_lora *l, const rg_model *m, const char *path, rg_error *err);
void rg_lora_free(rg_lora *l);

// The effective multiplier of B(A x): user_scale * alpha / rank.
float rg_lora_scale(const rg_lora *l, float user_scale);

// Puts LoRA into a model's node set: for each targeted projection, A and B become graph nodes (rg_param when
// trainable, else rg_leaf) bound to l's buffers (which must outlive the graph's runs), attached to
// w->layers[il].lora_a/lora_b, with lora_scale = user_scale * alpha / rank. w must come from the model l was
// made for (rg_lora_init / rg_lora_load check that).
rg_status rg_lora_attach(rg_graph *g, const rg_lora *l, rg_model_nodes *w, float user_scale, bool trainable,
                         rg_error *err);

// Merging. Each adapted W is read into F32, gets W += s * B·A with the sum over the rank and the add done in double
// (so the merged F32 value is the exact one rounded once) and is encoded once, in the output's type for it; the
// file is written atomically, keys and tensors in the base file's order.
//   opts->type NULL: the default, rg_lora_merge_default_type: the base's own types when no adapted tensor is
//     quantized (F16/BF16 rounded to nearest even; every other tensor copied byte for byte); otherwise
//     RG_LORA_MERGE_QUANTIZED_DEFAULT for the whole file. Merged back into its own quantized type, a base whose values
//     sit on that type's grid mostly rounds back onto the same points and loses B·A (see the summary's kept).
//   opts->type a name of `retrograd quantize` (rg_quant_targets: a type or a mixture): every tensor gets the type
//     rg_quant_plan_types chooses, as quantize would write it (norms and 1-D tensors kept; a tensor whose type does
//     not change and that is not adapted is copied byte for byte, any other one converted through F32), and
//     general.file_type / general.quantization_version are set as quantize sets them.
// Quantized types use this library's reference quantizer, without an importance matrix (types that need one are
// refused, naming the tensor). Unknown names list the valid ones.
#define RG_LORA_MERGE_QUANTIZED_DEFAULT "Q8_0"

typedef struct rg_lora_merge_opts {
    int n_threads;      // <= 0: all cores
    FILE *progress;     // one line per tensor (adapted ones with their kept share and relative norm), or NULL
    const char *type;   // NULL: the default above; else a type or mixture name of `retrograd quantize`
} rg_lora_merge_opts;

// What survived, over the adapted tensors. With D = s * B·A, W the base's values and M the written values, both
// read back as F32: kept = <M - W, D> / <D, D> (1: the file moved by exactly D; 0: it did not move along D at all,
// e.g. every value rounded back to the base's grid point) and rel_norm = |M - W| / |D| (quantization noise of a
// re-encoded base makes it exceed 1 while kept stays near 1).
typedef struct rg_lora_merge_summary {
    uint64_t n_tensors, n_merged, n_converted;  // converted: not adapted, re-encoded in another type
    uint64_t bytes_base, bytes_adapter, bytes_out;
    int64_t rank;
    float alpha, scale;         // scale: the effective s
    char type[16];              // the target written ("Q8_0", "Q4_K_M"), "" for the base's own types
    double kept, rel_norm;      // over every adapted tensor together (kept 1, rel_norm 0 when D = 0 everywhere)
    double min_kept;            // the adapted tensor that kept the least, and its name
    char min_kept_tensor[96];
    uint64_t n_lost;            // adapted tensors with kept < 0.5
} rg_lora_merge_summary;

rg_status rg_lora_merge(const char *base_path, const char *adapter_path, float user_scale, const char *out_path,
                        rg_error *err);
// The same with options, progress and a summary (opts and summary may be NULL).
rg_status rg_lora_merge_ex(const char *base_path, const char *adapter_path, float user_scale, const char *out_path,
                           const rg_lora_merge_opts *opts, rg_lora_merge_summary *summary, rg_error *err);
// The default output type for merging l into m: NULL (the base's own types) or RG_LORA_MERGE_QUANTIZED_DEFAULT.
const char *rg_lora_merge_default_type(const rg_model *m, const rg_lora *l);

// Splits "PATH[:SCALE]" (the CLI's --lora value): a trailing ":<number>" is the scale, anything else is part of the
// path (scale 1). path_out gets a copy of the path (cap bytes). False when the path does not fit or is empty.
bool rg_lora_parse_spec(const char *spec, char *path_out, size_t cap, float *scale);

#endif
