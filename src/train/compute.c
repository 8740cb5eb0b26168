// compute.c - see compute.h.
#include "train/compute.h"

#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "cpu/gemm_tiles.h"
#include "cuda/cuda.h"
#include "train/config.h"

uint32_t rg_train_product_weight_type(const rg_model *m) {
    double elements[RG_TYPE_COUNT] = {0};
    const rg_arch *a = m->arch;
    for (int64_t il = 0; il < m->hp.n_layer; il++)
        for (int i = 0; i < a->n_tensors; i++) {
            const rg_gguf_tensor *t = a->tensors[i].lora >= 0 ? m->layers[il].t[a->tensors[i].role] : NULL;
            if (t && t->type < RG_TYPE_COUNT) elements[t->type] += (double)t->ne[0] * (double)(t->ne[1] > 0 ? t->ne[1] : 1);
        }
    if (m->output && m->output->type < RG_TYPE_COUNT)
        elements[m->output->type] += (double)m->output->ne[0] * (double)(m->output->ne[1] > 0 ? m->output->ne[1] : 1);
    uint32_t best = RG_TYPE_F32;
    for (uint32_t ty = 0; ty < RG_TYPE_COUNT; ty++)
        if (elements[ty] > elements[best]) best = ty;
    return best;
}

static const char *type_name(uint32_t type) { return rg_type_get(type)->name; }

// On a CUDA device: what its products do for these weights, and whether the key agrees.
static rg_status resolve_cuda(int asked, uint32_t weight_type, rg_train_products *p, rg_error *err) {
    char why[160] = "";
    const int mode = rg_cuda_half_gemm_env(why, sizeof why);
    if (mode < 0) return rg_fail(err, RG_ERR_ARG, "training.compute_dtype on --device cuda: %s", why);
    const bool f32_weights = weight_type == RG_TYPE_F32;
    const bool tensor = mode == RG_CUDA_HALF_GEMM_TENSOR && !f32_weights;
    // tensor: F16 weights multiply in F16, BF16 and the quantized types' wide products in BF16
    const bool f16 = tensor && weight_type == RG_TYPE_F16;
    if (asked == RG_COMPUTE_BF16 && (!tensor || f16))
        return rg_fail(err, RG_ERR_UNSUPPORTED,
                       "training.compute_dtype=bf16 on --device cuda: the device multiplies in BF16 only %s weights on "
                       "its tensor path (RETRO_CUDA_HALF_GEMM=tensor, the default); %s; use training.compute_dtype=auto, "
                       "or train on the cpu",
                       "BF16 and quantized",
                       f32_weights ? "this model's weights are f32"
                       : f16       ? "this model's weights are f16 (multiplied in F16 there)"
                                   : "RETRO_CUDA_HALF_GEMM=f32 is set");
    if (asked == RG_COMPUTE_F32 && tensor)
        return rg_fail(err, RG_ERR_UNSUPPORTED,
                       "training.compute_dtype=f32 on --device cuda: this model's %s weights multiply on the tensor "
                       "cores (RETRO_CUDA_HALF_GEMM=tensor, the default); set RETRO_CUDA_HALF_GEMM=f32 for the exact "
                       "widening, or use training.compute_dtype=auto",
                       type_name(weight_type));
    p->dtype = tensor && !f16 ? RG_COMPUTE_BF16 : RG_COMPUTE_F32;
    p->bf16_cpu = false;
    if (tensor)
        snprintf(p->where, sizeof p->where, "%s on the cuda tensor cores", f16 ? "f16" : "bf16");
    else
        snprintf(p->where, sizeof p->where, "f32");
    snprintf(p->why, sizeof p->why, "training.compute_dtype=%s; the device's %s weights, RETRO_CUDA_HALF_GEMM=%s",
             asked == RG_COMPUTE_AUTO ? "auto" : asked == RG_COMPUTE_F32 ? "f32" : "bf16", type_name(weight_type),
             mode == RG_CUDA_HALF_GEMM_F32 ? "f32" : "tensor");
    return RG_OK;
}

rg_status rg_train_products_resolve(int compute_dtype, uint32_t weight_type, rg_device device, rg_train_products *out,
                                    rg_error *err) {
    rg_train_products p;
    memset(&p, 0, sizeof p);
    if (compute_dtype != RG_COMPUTE_AUTO && compute_dtype != RG_COMPUTE_F32 && compute_dtype != RG_COMPUTE_BF16)
        return rg_fail(err, RG_ERR_ARG, "training.compute_dtype: %d is not one of auto|f32|bf16", compute_dtype);
    if (device == RG_DEVICE_CUDA) {
        rg_status st = resolve_cuda(compute_dtype, weight_type, &p, err);
        if (st) return st;
        *out = p;
        return RG_OK;
    }
    const rg_tile_path path = rg_gemm_tiles_path();
    if (compute_dtype == RG_COMPUTE_BF16 && path == RG_TILES_NONE)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "training.compute_dtype=bf16: %s", rg_gemm_tiles_missing());
    switch (compute_dtype) {
    case RG_COMPUTE_F32:
        p.dtype = RG_COMPUTE_F32;
        snprintf(p.why, sizeof p.why, "training.compute_dtype=f32: exact widening");
        break;
    case RG_COMPUTE_BF16:
        p.dtype = RG_COMPUTE_BF16;
        snprintf(p.why, sizeof p.why, "training.compute_dtype=bf16; %s weights%s", type_name(weight_type),
                 weight_type == RG_TYPE_BF16 ? "" : ", F32 accumulation as under autocast");
        break;
    default:
        p.dtype = weight_type == RG_TYPE_BF16 && path != RG_TILES_NONE ? RG_COMPUTE_BF16 : RG_COMPUTE_F32;
        if (weight_type != RG_TYPE_BF16)
            snprintf(p.why, sizeof p.why, "training.compute_dtype=auto: the weights are %s, not bf16",
                     type_name(weight_type));
        else if (path == RG_TILES_NONE)
            snprintf(p.why, sizeof p.why, "training.compute_dtype=auto: bf16 weights, but %s", rg_gemm_tiles_missing());
        else
            snprintf(p.why, sizeof p.why, "training.compute_dtype=auto: bf16 weights");
        break;
    }
    p.bf16_cpu = p.dtype == RG_COMPUTE_BF16;
    if (p.bf16_cpu)
        snprintf(p.where, sizeof p.where, "bf16 on %s", rg_tile_path_name(path));
    else
        snprintf(p.where, sizeof p.where, "f32");
    *out = p;
    return RG_OK;
}
