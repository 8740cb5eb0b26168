// quant.c - the table of what each tensor type can do (see quant.h), and the
// whole-buffer helpers. Generated once by hand from the list of families; the
// functions live in the family files (quant_float.c, quant_legacy.c, quant_k.c,
// quant_iq*.c, quant_tq.c, quant_fp4.c, quant_lowbit.c, quant_q8.c).
#include "tensor/quant/quant.h"

#include "base/error.h"
#include "tensor/quant/quant_funcs.h"

static const rg_quant_ops table[RG_TYPE_COUNT] = {
    [RG_TYPE_F32] = {.dequant = rg_dequant_row_f32, .dequant_ref = rg_dequant_row_f32_ref, .quantize = rg_quantize_row_f32, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_F32, .vec_dot = rg_vec_dot_f32_f32, .vec_dot_ref = rg_vec_dot_f32_f32_ref},
    [RG_TYPE_F16] = {.dequant = rg_dequant_row_f16, .dequant_ref = rg_dequant_row_f16_ref, .quantize = rg_quantize_row_f16, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_F32, .vec_dot = rg_vec_dot_f16_f32, .vec_dot_ref = rg_vec_dot_f16_f32_ref},
    [RG_TYPE_BF16] = {.dequant = rg_dequant_row_bf16, .dequant_ref = rg_dequant_row_bf16_ref, .quantize = rg_quantize_row_bf16, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_F32, .vec_dot = rg_vec_dot_bf16_f32, .vec_dot_ref = rg_vec_dot_bf16_f32_ref},
    [RG_TYPE_Q4_0] = {.dequant = rg_dequant_row_q4_0, .dequant_ref = rg_dequant_row_q4_0_ref, .quantize = rg_quantize_row_q4_0, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_0, .vec_dot = rg_vec_dot_q4_0_q8_0, .vec_dot_ref = rg_vec_dot_q4_0_q8_0_ref},
    [RG_TYPE_Q4_1] = {.dequant = rg_dequant_row_q4_1, .dequant_ref = rg_dequant_row_q4_1_ref, .quantize = rg_quantize_row_q4_1, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_1, .vec_dot = rg_vec_dot_q4_1_q8_1, .vec_dot_ref = rg_vec_dot_q4_1_q8_1_ref},
    [RG_TYPE_Q5_0] = {.dequant = rg_dequant_row_q5_0, .dequant_ref = rg_dequant_row_q5_0_ref, .quantize = rg_quantize_row_q5_0, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_0, .vec_dot = rg_vec_dot_q5_0_q8_0, .vec_dot_ref = rg_vec_dot_q5_0_q8_0_ref},
    [RG_TYPE_Q5_1] = {.dequant = rg_dequant_row_q5_1, .dequant_ref = rg_dequant_row_q5_1_ref, .quantize = rg_quantize_row_q5_1, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_1, .vec_dot = rg_vec_dot_q5_1_q8_1, .vec_dot_ref = rg_vec_dot_q5_1_q8_1_ref},
    [RG_TYPE_Q8_0] = {.dequant = rg_dequant_row_q8_0, .dequant_ref = rg_dequant_row_q8_0_ref, .quantize = rg_quantize_row_q8_0, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_0, .vec_dot = rg_vec_dot_q8_0_q8_0, .vec_dot_ref = rg_vec_dot_q8_0_q8_0_ref},
    [RG_TYPE_Q8_1] = {.dequant = NULL, .dequant_ref = NULL, .quantize = rg_quantize_row_q8_1, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_1, .vec_dot = NULL, .vec_dot_ref = NULL},
    [RG_TYPE_Q2_K] = {.dequant = rg_dequant_row_q2_K, .dequant_ref = rg_dequant_row_q2_K_ref, .quantize = rg_quantize_row_q2_K, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_K, .vec_dot = rg_vec_dot_q2_K_q8_k, .vec_dot_ref = rg_vec_dot_q2_K_q8_k_ref},
    [RG_TYPE_Q3_K] = {.dequant = rg_dequant_row_q3_K, .dequant_ref = rg_dequant_row_q3_K_ref, .quantize = rg_quantize_row_q3_K, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_K, .vec_dot = rg_vec_dot_q3_K_q8_k, .vec_dot_ref = rg_vec_dot_q3_K_q8_k_ref},
    [RG_TYPE_Q4_K] = {.dequant = rg_dequant_row_q4_K, .dequant_ref = rg_dequant_row_q4_K_ref, .quantize = rg_quantize_row_q4_K, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_K, .vec_dot = rg_vec_dot_q4_K_q8_k, .vec_dot_ref = rg_vec_dot_q4_K_q8_k_ref},
    [RG_TYPE_Q5_K] = {.dequant = rg_dequant_row_q5_K, .dequant_ref = rg_dequant_row_q5_K_ref, .quantize = rg_quantize_row_q5_K, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_K, .vec_dot = rg_vec_dot_q5_K_q8_k, .vec_dot_ref = rg_vec_dot_q5_K_q8_k_ref},
    [RG_TYPE_Q6_K] = {.dequant = rg_dequant_row_q6_K, .dequant_ref = rg_dequant_row_q6_K_ref, .quantize = rg_quantize_row_q6_K, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_K, .vec_dot = rg_vec_dot_q6_K_q8_k, .vec_dot_ref = rg_vec_dot_q6_K_q8_k_ref},
    [RG_TYPE_Q8_K] = {.dequant = rg_dequant_row_q8_K, .dequant_ref = rg_dequant_row_q8_K_ref, .quantize = rg_quantize_row_q8_K, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_K, .vec_dot = NULL, .vec_dot_ref = NULL},
    [RG_TYPE_IQ2_XXS] = {.dequant = rg_dequant_row_iq2_xxs, .dequant_ref = rg_dequant_row_iq2_xxs_ref, .quantize = NULL, .quantize_needs_imatrix = true, .vec_dot_type = RG_TYPE_Q8_K, .vec_dot = rg_vec_dot_iq2_xxs_q8_k, .vec_dot_ref = rg_vec_dot_iq2_xxs_q8_k_ref},
    [RG_TYPE_IQ2_XS] = {.dequant = rg_dequant_row_iq2_xs, .dequant_ref = rg_dequant_row_iq2_xs_ref, .quantize = NULL, .quantize_needs_imatrix = true, .vec_dot_type = RG_TYPE_Q8_K, .vec_dot = rg_vec_dot_iq2_xs_q8_k, .vec_dot_ref = rg_vec_dot_iq2_xs_q8_k_ref},
    [RG_TYPE_IQ3_XXS] = {.dequant = rg_dequant_row_iq3_xxs, .dequant_ref = rg_dequant_row_iq3_xxs_ref, .quantize = NULL, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_K, .vec_dot = rg_vec_dot_iq3_xxs_q8_k, .vec_dot_ref = rg_vec_dot_iq3_xxs_q8_k_ref},
    [RG_TYPE_IQ1_S] = {.dequant = rg_dequant_row_iq1_s, .dequant_ref = rg_dequant_row_iq1_s_ref, .quantize = NULL, .quantize_needs_imatrix = true, .vec_dot_type = RG_TYPE_Q8_K, .vec_dot = rg_vec_dot_iq1_s_q8_k, .vec_dot_ref = rg_vec_dot_iq1_s_q8_k_ref},
    [RG_TYPE_IQ4_NL] = {.dequant = rg_dequant_row_iq4_nl, .dequant_ref = rg_dequant_row_iq4_nl_ref, .quantize = rg_quantize_row_iq4_nl, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_0, .vec_dot = rg_vec_dot_iq4_nl_q8_0, .vec_dot_ref = rg_vec_dot_iq4_nl_q8_0_ref},
    [RG_TYPE_IQ3_S] = {.dequant = rg_dequant_row_iq3_s, .dequant_ref = rg_dequant_row_iq3_s_ref, .quantize = NULL, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_K, .vec_dot = rg_vec_dot_iq3_s_q8_k, .vec_dot_ref = rg_vec_dot_iq3_s_q8_k_ref},
    [RG_TYPE_IQ2_S] = {.dequant = rg_dequant_row_iq2_s, .dequant_ref = rg_dequant_row_iq2_s_ref, .quantize = NULL, .quantize_needs_imatrix = true, .vec_dot_type = RG_TYPE_Q8_K, .vec_dot = rg_vec_dot_iq2_s_q8_k, .vec_dot_ref = rg_vec_dot_iq2_s_q8_k_ref},
    [RG_TYPE_IQ4_XS] = {.dequant = rg_dequant_row_iq4_xs, .dequant_ref = rg_dequant_row_iq4_xs_ref, .quantize = rg_quantize_row_iq4_xs, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_K, .vec_dot = rg_vec_dot_iq4_xs_q8_k, .vec_dot_ref = rg_vec_dot_iq4_xs_q8_k_ref},
    [RG_TYPE_IQ1_M] = {.dequant = rg_dequant_row_iq1_m, .dequant_ref = rg_dequant_row_iq1_m_ref, .quantize = NULL, .quantize_needs_imatrix = true, .vec_dot_type = RG_TYPE_Q8_K, .vec_dot = rg_vec_dot_iq1_m_q8_k, .vec_dot_ref = rg_vec_dot_iq1_m_q8_k_ref},
    [RG_TYPE_TQ1_0] = {.dequant = rg_dequant_row_tq1_0, .dequant_ref = rg_dequant_row_tq1_0_ref, .quantize = rg_quantize_row_tq1_0, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_K, .vec_dot = rg_vec_dot_tq1_0_q8_k, .vec_dot_ref = rg_vec_dot_tq1_0_q8_k_ref},
    [RG_TYPE_TQ2_0] = {.dequant = rg_dequant_row_tq2_0, .dequant_ref = rg_dequant_row_tq2_0_ref, .quantize = rg_quantize_row_tq2_0, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_K, .vec_dot = rg_vec_dot_tq2_0_q8_k, .vec_dot_ref = rg_vec_dot_tq2_0_q8_k_ref},
    [RG_TYPE_MXFP4] = {.dequant = rg_dequant_row_mxfp4, .dequant_ref = rg_dequant_row_mxfp4_ref, .quantize = rg_quantize_row_mxfp4, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_0, .vec_dot = rg_vec_dot_mxfp4_q8_0, .vec_dot_ref = rg_vec_dot_mxfp4_q8_0_ref},
    [RG_TYPE_NVFP4] = {.dequant = rg_dequant_row_nvfp4, .dequant_ref = rg_dequant_row_nvfp4_ref, .quantize = rg_quantize_row_nvfp4, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_0, .vec_dot = rg_vec_dot_nvfp4_q8_0, .vec_dot_ref = rg_vec_dot_nvfp4_q8_0_ref},
    [RG_TYPE_Q1_0] = {.dequant = rg_dequant_row_q1_0, .dequant_ref = rg_dequant_row_q1_0_ref, .quantize = rg_quantize_row_q1_0, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_0, .vec_dot = rg_vec_dot_q1_0_q8_0, .vec_dot_ref = rg_vec_dot_q1_0_q8_0_ref},
    [RG_TYPE_Q2_0] = {.dequant = rg_dequant_row_q2_0, .dequant_ref = rg_dequant_row_q2_0_ref, .quantize = rg_quantize_row_q2_0, .quantize_needs_imatrix = false, .vec_dot_type = RG_TYPE_Q8_0, .vec_dot = rg_vec_dot_q2_0_q8_0, .vec_dot_ref = rg_vec_dot_q2_0_q8_0_ref},
};

static const rg_quant_ops none = {0};

const rg_quant_ops *rg_quant_get(uint32_t type) { return type < RG_TYPE_COUNT ? &table[type] : &none; }

rg_status rg_dequantize(uint32_t type, const void *src, float *dst, int64_t n, const char *what, rg_error *err) {
    const rg_type_traits *tt = rg_type_get(type);
    const rg_quant_ops *ops = rg_quant_get(type);
    if (!ops->dequant)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s: cannot dequantize type %s (id %u)", what, tt->name, type);
    if (n < 0 || n % tt->block_size)
        return rg_fail(err, RG_ERR_ARG, "%s: %lld elements is not a multiple of the %s block size %lld", what,
                       (long long)n, tt->name, (long long)tt->block_size);
    ops->dequant(src, dst, n);
    return RG_OK;
}

rg_status rg_quantize(uint32_t type, const float *src, void *dst, int64_t n_rows, int64_t n_per_row,
                      const float *imatrix, const char *what, rg_error *err) {
    const rg_type_traits *tt = rg_type_get(type);
    const rg_quant_ops *ops = rg_quant_get(type);
    if (!ops->quantize)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s: cannot quantize to type %s (id %u)", what, tt->name, type);
    if (n_per_row <= 0 || n_per_row % tt->block_size)
        return rg_fail(err, RG_ERR_ARG, "%s: row length %lld is not a multiple of the %s block size %lld", what,
                       (long long)n_per_row, tt->name, (long long)tt->block_size);
    if (ops->quantize_needs_imatrix && !imatrix)
        return rg_fail(err, RG_ERR_ARG, "%s: type %s needs an importance matrix", what, tt->name);
    size_t row_bytes = rg_type_row_size(type, n_per_row);
    for (int64_t r = 0; r < n_rows; r++)
        ops->quantize(src + r * n_per_row, (char *)dst + (size_t)r * row_bytes, n_per_row, imatrix);
    return RG_OK;
}
