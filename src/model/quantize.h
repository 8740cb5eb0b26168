// quantize.h - rewrite a GGUF model with its tensors in other types
// (`retrograd quantize`): every key copied, general.file_type and
// general.quantization_version set, tensors sorted by (layer, name) as
// llama-quantize writes them, the output written atomically.
#ifndef RG_MODEL_QUANTIZE_H
#define RG_MODEL_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

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

#endif
