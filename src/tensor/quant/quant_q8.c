// quant_q8.c - the activation types that dot products quantize to at run time:
// Q8_1 (partner of Q4_1/Q5_1) and Q8_K (partner of the K-quants), spec §4.1,
// §4.2, §5.1. Neither appears in files. Q8_0, also a storage type, lives in
// quant_legacy.c. The dispatched quantizers use AVX2 kernels that give the
// reference's bytes on every input (they fall back to the reference for a
// block with NaN or Inf in it).
#include <math.h>

#include "base/cpu.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"
#include "tensor/quant/quant_funcs.h"
#include "tensor/quant/quant_legacy_k.h"

// Q8_1, 36 bytes: d f16 @0 | s f16 @2 | qs[32] int8 @4.
// As Q8_0, plus s = fp16(Σq · d) with the unrounded f32 d.
size_t rg_quantize_row_q8_1_ref(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / RG_QK_LEGACY; i++, b += RG_Q8_1_BYTES, src += RG_QK_LEGACY) {
        float d;
        const int sum = rg_q8_block_ref(src, b, b + 4, &d);
        rg_wr16(b + 2, rg_fp32_to_fp16((float)sum * d));
    }
    return (size_t)(n / RG_QK_LEGACY) * RG_Q8_1_BYTES;
}

size_t rg_quantize_row_q8_1(const float *src, void *dst, int64_t n, const float *imatrix) {
    (void)imatrix;
    if (rg_quant_legacy_avx2_built && rg_cpu_has_avx2()) {
        rg_quantize_row_q8_1_avx2(src, dst, n);
        return (size_t)(n / RG_QK_LEGACY) * RG_Q8_1_BYTES;
    }
    return rg_quantize_row_q8_1_ref(src, dst, n);
}

// Q8_K, 292 bytes: d f32 @0 | qs[256] int8 @4 | bsums[16] int16 @260.
// max = the signed element of largest |x| (first strictly greater); then
// iscale = −127/max, q = min(127, nearest_int(iscale·x)), d = 1/iscale, and
// bsums[g] = Σ q[16g .. 16g+15]. An all-zero block (NaNs are skipped by the
// search) gives d = 0 and zero quants; ggml leaves its bsums unwritten, we zero them.
size_t rg_quantize_row_q8_K_ref(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / RG_QK_K; i++, b += RG_Q8_K_BYTES, src += RG_QK_K) {
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < RG_QK_K; j++) {
            const float ax = fabsf(src[j]);
            if (ax > amax) {
                amax = ax;
                max = src[j];
            }
        }
        if (amax == 0.0f) {
            memset(b, 0, RG_Q8_K_BYTES);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < RG_QK_K; j++) {
            const int v = rg_nearest_int(iscale * src[j]);
            b[4 + j] = (uint8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += (int8_t)b[4 + 16 * g + l];
            rg_wr16(b + 260 + 2 * g, (uint16_t)sum);
        }
        rg_wr32(b, rg_bits_of(1.0f / iscale));
    }
    return (size_t)(n / RG_QK_K) * RG_Q8_K_BYTES;
}

size_t rg_quantize_row_q8_K(const float *src, void *dst, int64_t n, const float *imatrix) {
    (void)imatrix;
    if (rg_quant_k_avx2_built && rg_cpu_has_avx2()) {
        rg_quantize_row_q8_K_avx2(src, dst, n);
        return (size_t)(n / RG_QK_K) * RG_Q8_K_BYTES;
    }
    return rg_quantize_row_q8_K_ref(src, dst, n);
}

// y = d·q with the f32 d.
void rg_dequant_row_q8_K_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / RG_QK_K; i++, b += RG_Q8_K_BYTES, dst += RG_QK_K) {
        const float d = rg_f32_of(rg_rd32(b));
        for (int j = 0; j < RG_QK_K; j++) dst[j] = d * (float)(int8_t)b[4 + j];
    }
}

void rg_dequant_row_q8_K(const void *src, float *dst, int64_t n) {
    if (rg_quant_k_avx2_built && rg_cpu_has_avx2())
        rg_dequant_row_q8_K_avx2(src, dst, n);
    else
        rg_dequant_row_q8_K_ref(src, dst, n);
}
