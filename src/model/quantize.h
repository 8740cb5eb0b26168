// quantize.h - rewrite a GGUF model with its tensors in other types
// (`retrograd quantize`): every key copied, general.file_type and
// general.quantization_version set, tensors sorted by (layer, name) as
// llama-quantize writes them, the output written atomically.
#ifndef RG_MODEL_QUANTIZE_H
#define RG_MODEL_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gguf/gguf.h"
#include "model/quantize_rules.h"
#include "retrograd.h"

typedef struct rg_quantize_opts {
    int n_threads;          // <= 0: all cores
    bool pure;              // no mixture rules: every quantizable tensor takes the default type
    bool allow_requantize;  // quantized inputs may be re-quantized (through F32)
    FILE *progress;         // one line per tensor, or NULL
} rg_quantize_opts;

typedef struct rg_quantize_summary {
    uint64_t bytes_in, bytes_out;
    uint64_t n_tensors, n_quantized;
    uint64_t count_by_type[RG_TYPE_COUNT];
    uint64_t bytes_by_type[RG_TYPE_COUNT];
} rg_quantize_summary;

rg_status rg_quantize_file(const char *in_path, const char *out_path, const char *target_name,
                           const rg_quantize_opts *opts, rg_quantize_summary *summary, rg_error *err);

// The type of every tensor of `in` in a file quantized to `target`, as rg_quantize_file chooses them (and
// `retrograd merge --type` reuses): types[i] for in->tensors[i]; a quantizable tensor (rg_quant_tensor_is_quantizable)
// gets rg_quant_choose_type's answer, the rules visiting tensors in (layer, name) order as llama-quantize does; every
// other tensor keeps its type. order (NULL, or n_tensors entries) receives that visiting order as indices into
// in->tensors, the order quantize writes them in. pure: no mixture rules. An error names the tensor that fits no type.
rg_status rg_quant_plan_types(const rg_gguf *in, const rg_quant_target *target, bool pure, uint32_t *types,
                              uint64_t *order, rg_error *err);
// Whether tensor t of file `path` can be converted to to_type: its type can be read into F32 and to_type has a
// quantizer that needs no importance matrix; otherwise RG_ERR_UNSUPPORTED naming the tensor and the type.
rg_status rg_quant_check_convert(const char *path, const rg_gguf_tensor *t, uint32_t to_type, rg_error *err);
// Sets the keys a file quantized to target carries: general.file_type (llama.cpp's ftype), and
// general.quantization_version = 2 when the target's default type is quantized.
rg_status rg_quant_set_file_keys(rg_gguf *out, const rg_quant_target *target, rg_error *err);

#endif
