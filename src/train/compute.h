// compute.h - training.compute_dtype resolved against the model and the machine: whether the
// step's products (MUL_MAT, OUT_PROD, LINEAR_CE of the forward, the backward and the eval pass)
// run in BF16 on the CPU's matrix unit (cpu/gemm_tiles.h) or widened to F32, and the words the
// plan line and the reports print ("products: bf16 on amx").
//
//   auto  bf16 when the weights the products read are BF16 (rg_train_product_weight_type) and
//         rg_gemm_tiles_path() is not NONE; f32 otherwise (F32, F16 and quantized weights,
//         or a CPU without AMX-BF16 / AVX512_BF16).
//   f32   every operand widened to F32: exact, the bits of runs made before the key existed.
//   bf16  both operands rounded to BF16 (RNE), products exact, sums in F32: for any weight type
//         (F32 and a quantized base as PyTorch's autocast: masters and optimizer state stay F32;
//         quantized rows are decoded and rounded to BF16 by gemm_tiles). Refused, naming the key
//         and the missing instructions (rg_gemm_tiles_missing), where the path is NONE.
//
// On a CUDA device the products are the device's, by RETRO_CUDA_HALF_GEMM (cuda/cuda.h): tensor
// (the default) multiplies F16/BF16 weights on the tensor cores with the activations rounded to
// the weight's type, and quantized weights' wide products in BF16; f32 widens them. The key
// does not change that mode: auto takes it as it is, f32 and bf16 are accepted where the mode
// already does what they say and refused otherwise with the setting that would make it so.
// The CPU nodes of a device run (fallbacks) then multiply in F32.
#ifndef RG_TRAIN_COMPUTE_H
#define RG_TRAIN_COMPUTE_H

#include <stdbool.h>
#include <stdint.h>

#include "graph/exec.h"
#include "model/model.h"
#include "retrograd.h"

typedef struct rg_train_products {
    int dtype;           // what the key resolved to: RG_COMPUTE_F32 or RG_COMPUTE_BF16 (config.h)
    bool bf16_cpu;       // the CPU's products in BF16: rg_exec_opts.bf16_products of the run's execs
    char where[96];      // "bf16 on amx", "bf16 on avx512_bf16", "bf16 on emulated", "f32", "bf16 on the cuda tensor cores"
    char why[256];       // the reason, for the plan line: "training.compute_dtype=auto: the weights are bf16", ...
} rg_train_products;

// The type of the weights the products read: the type holding the most elements among the
// layers' projections (the tensors LoRA can adapt) and the output head. RG_TYPE_F32 for a
// model with none.
uint32_t rg_train_product_weight_type(const rg_model *m);

// Resolves compute_dtype (enum rg_compute_dtype) for weights of weight_type on `device`. Fails
// with RG_ERR_UNSUPPORTED, *out untouched, when bf16 has no path here ("training.compute_dtype=bf16:
// <rg_gemm_tiles_missing()>") or, on CUDA, when the device's mode does not do what the key asks.
rg_status rg_train_products_resolve(int compute_dtype, uint32_t weight_type, rg_device device, rg_train_products *out,
                                    rg_error *err);

#endif
