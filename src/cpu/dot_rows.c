// dot_rows.c - see dot_rows.h: the kernel for a weight type on this CPU.
#include "cpu/dot_rows.h"

#include "base/cpu.h"
#include "retrograd.h"

rg_dot_rows_fn rg_cpu_dot_rows(uint32_t w_type) {
    if (!rg_dot_rows_avx2_built || !rg_cpu_has_avx2()) return NULL;
    if (rg_dot_rows_avx512_built && rg_cpu_has_avx512_vnni()) {
        switch (w_type) {
        case RG_TYPE_Q4_0: return rg_dot_rows_q4_0_avx512;
        case RG_TYPE_Q5_0: return rg_dot_rows_q5_0_avx512;
        default: break;
        }
    }
    switch (w_type) {
    case RG_TYPE_F32: return rg_dot_rows_f32_avx2;
    case RG_TYPE_F16: return rg_dot_rows_f16_avx2;
    case RG_TYPE_BF16: return rg_dot_rows_bf16_avx2;
    case RG_TYPE_Q4_0: return rg_dot_rows_q4_0_avx2;
    case RG_TYPE_Q4_1: return rg_dot_rows_q4_1_avx2;
    case RG_TYPE_Q5_0: return rg_dot_rows_q5_0_avx2;
    case RG_TYPE_Q8_0: return rg_dot_rows_q8_0_avx2;
    case RG_TYPE_Q4_K: return rg_dot_rows_k_avx2_built ? rg_dot_rows_q4_K_avx2 : NULL;
    case RG_TYPE_Q6_K: return rg_dot_rows_k_avx2_built ? rg_dot_rows_q6_K_avx2 : NULL;
    default: return NULL;
    }
}

rg_dot_rows2_fn rg_cpu_dot_rows2(uint32_t w_type) {
    if (!rg_dot_rows_avx2_built || !rg_cpu_has_avx2()) return NULL;
    // a pair kernel exists only where its one-column twin is the kernel rg_cpu_dot_rows picks (their bits agree)
    const rg_dot_rows_fn one = rg_cpu_dot_rows(w_type);
    switch (w_type) {
    case RG_TYPE_Q4_0: return one == rg_dot_rows_q4_0_avx2 ? rg_dot_rows2_q4_0_avx2 : NULL;
    case RG_TYPE_Q5_0: return one == rg_dot_rows_q5_0_avx2 ? rg_dot_rows2_q5_0_avx2 : NULL;
    case RG_TYPE_Q8_0: return one == rg_dot_rows_q8_0_avx2 ? rg_dot_rows2_q8_0_avx2 : NULL;
    case RG_TYPE_F32: return rg_dot_rows2_f32_avx2;
    case RG_TYPE_F16: return rg_dot_rows2_f16_avx2;
    case RG_TYPE_BF16: return rg_dot_rows2_bf16_avx2;
    case RG_TYPE_Q4_K: return rg_dot_rows_k_avx2_built ? rg_dot_rows2_q4_K_avx2 : NULL;
    case RG_TYPE_Q6_K: return rg_dot_rows_k_avx2_built ? rg_dot_rows2_q6_K_avx2 : NULL;
    default: return NULL;
    }
}

rg_dot_rows3_fn rg_cpu_dot_rows3(uint32_t w_type) {
    if (!rg_dot_rows_avx2_built || !rg_cpu_has_avx2()) return NULL;
    switch (w_type) {
    case RG_TYPE_F32: return rg_dot_rows3_f32_avx2;
    case RG_TYPE_F16: return rg_dot_rows3_f16_avx2;
    case RG_TYPE_BF16: return rg_dot_rows3_bf16_avx2;
    case RG_TYPE_Q8_0: return rg_cpu_dot_rows(w_type) == rg_dot_rows_q8_0_avx2 ? rg_dot_rows3_q8_0_avx2 : NULL;
    default: return NULL;
    }
}

size_t rg_unpacked_row_bytes(uint32_t w_type, int64_t K) {
    switch (w_type) {
    case RG_TYPE_Q4_K: return (size_t)(K / 256) * UQ4_K_BYTES;
    case RG_TYPE_Q6_K: return (size_t)(K / 256) * UQ6_K_BYTES;
    default: return ((size_t)(K / 32) * 36 + 31) / 32 * 32;
    }
}

int rg_unpack_min_columns(uint32_t w_type) { return w_type == RG_TYPE_Q4_K || w_type == RG_TYPE_Q6_K ? 8 : 4; }

rg_dot_rows4_fn rg_cpu_unpacked_rows4(uint32_t w_type) {
    rg_dot_rows2_fn pair;
    if (!rg_cpu_unpack_rows(w_type, 256, &pair)) return NULL;  // the same CPU and kernel checks
    if (w_type == RG_TYPE_Q4_K) return rg_dot_rows4_uq4_K_avx2;
    if (w_type == RG_TYPE_Q6_K) return rg_dot_rows4_uq6_K_avx2;
    return NULL;
}

int rg_unpack_prompt_max_n(uint32_t w_type) {
    switch (w_type) {
    case RG_TYPE_Q4_K: case RG_TYPE_Q6_K: return 128;
    case RG_TYPE_Q4_0: case RG_TYPE_Q5_0: return 32;
    default: return 0;
    }
}

rg_unpack_rows_fn rg_cpu_unpack_rows(uint32_t w_type, int64_t K, rg_dot_rows2_fn *pair) {
    *pair = NULL;
    if (!rg_dot_rows_avx2_built || !rg_cpu_has_avx2()) return NULL;
    // only where the one-column kernel is the AVX2 one whose bits the pair kernels share
    const rg_dot_rows_fn one = rg_cpu_dot_rows(w_type);
    if (w_type == RG_TYPE_Q4_0 && one == rg_dot_rows_q4_0_avx2) {
        *pair = rg_dot_rows2_u4_avx2;
        return rg_unpack_rows_q4_0_avx2;
    }
    if (w_type == RG_TYPE_Q5_0 && one == rg_dot_rows_q5_0_avx2) {
        *pair = rg_dot_rows2_u5_avx2;
        return rg_unpack_rows_q5_0_avx2;
    }
    if (K / 256 > RG_DOT_ROWS_K_BLOCKS_MAX) return NULL;  // the K-quant kernels' vec_dot fallback reads packed rows
    if (w_type == RG_TYPE_Q4_K && one == rg_dot_rows_q4_K_avx2) {
        *pair = rg_dot_rows2_uq4_K_avx2;
        return rg_unpack_rows_q4_K_avx2;
    }
    if (w_type == RG_TYPE_Q6_K && one == rg_dot_rows_q6_K_avx2) {
        *pair = rg_dot_rows2_uq6_K_avx2;
        return rg_unpack_rows_q6_K_avx2;
    }
    return NULL;
}
