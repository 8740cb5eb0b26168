// quant_lowbit.c - the low-bit legacy types Q1_0 (128 elements, one sign bit
// each) and Q2_0 (64 elements, 2-bit levels), both dotted with Q8_0:
// dequantization (spec §4.5), the reference quantizers (§5.5; an imatrix is
// ignored, §5.6) and the dot products (a Q1_0 block spans 4 Q8_0 blocks, a
// Q2_0 block 2).
#include "tensor/quant/quant.h"
#include "tensor/quant/quant_funcs.h"

#include <math.h>
#include <string.h>

#include "tensor/half.h"

#define QK_Q1_0 128
#define Q1_0_BYTES 18  // d f16 @0, qs[16] @2
#define QK_Q2_0 64
#define Q2_0_BYTES 18  // d f16 @0, qs[16] @2
#define Q8_0_BYTES 34  // d f16 @0, qs[32] int8 @2 (§4.1)

// ---------------------------------------------------------------------------
// Q1_0: bit j%8 of qs[j/8]; 1 -> +d, 0 -> −d.

void rg_dequant_row_q1_0_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_Q1_0; i++, b += Q1_0_BYTES, dst += QK_Q1_0) {
        const float d = rg_fp16_to_fp32(rg_rd16(b));
        for (int j = 0; j < QK_Q1_0; j++) dst[j] = (b[2 + j / 8] >> (j % 8)) & 1 ? d : -d;
    }
}

void rg_dequant_row_q1_0(const void *src, float *dst, int64_t n) { rg_dequant_row_q1_0_ref(src, dst, n); }

void rg_vec_dot_q1_0_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_Q1_0; i++, x += Q1_0_BYTES) {
        const float dx = rg_fp16_to_fp32(rg_rd16(x));
        for (int k = 0; k < 4; k++, y += Q8_0_BYTES) {  // elements 32k .. 32k+31
            const int8_t *q8 = (const int8_t *)(y + 2);
            int32_t sumi = 0;
            for (int j = 0; j < 32; j++) sumi += (x[2 + 4 * k + j / 8] >> (j % 8)) & 1 ? q8[j] : -q8[j];
            sumf += (dx * rg_fp16_to_fp32(rg_rd16(y))) * (float)sumi;
        }
    }
    *s = sumf;
}

void rg_vec_dot_q1_0_q8_0(int64_t n, float *s, const void *x, const void *y) { rg_vec_dot_q1_0_q8_0_ref(n, s, x, y); }

// §5.5: d = (Σ|x|)/128, summed in order in f32; the bit is 1 iff x >= 0.
size_t rg_quantize_row_q1_0(const float *src, void *dst, int64_t n, const float *imatrix) {
    (void)imatrix;
    uint8_t *y = dst;
    for (int64_t i = 0; i < n / QK_Q1_0; i++, src += QK_Q1_0, y += Q1_0_BYTES) {
        float sum = 0.0f;
        for (int j = 0; j < QK_Q1_0; j++) sum += fabsf(src[j]);
        rg_wr16(y, rg_fp32_to_fp16(sum / (float)QK_Q1_0));
        memset(y + 2, 0, 16);
        for (int j = 0; j < QK_Q1_0; j++)
            if (src[j] >= 0.0f) y[2 + j / 8] |= (uint8_t)(1u << (j % 8));
    }
    return (size_t)(n / QK_Q1_0) * Q1_0_BYTES;
}

// ---------------------------------------------------------------------------
// Q2_0: q = (qs[j/4] >> 2·(j%4)) & 3, y = (q − 1)·d.

void rg_dequant_row_q2_0_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_Q2_0; i++, b += Q2_0_BYTES, dst += QK_Q2_0) {
        const float d = rg_fp16_to_fp32(rg_rd16(b));
        for (int j = 0; j < QK_Q2_0; j++) dst[j] = (float)(((b[2 + j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
    }
}

void rg_dequant_row_q2_0(const void *src, float *dst, int64_t n) { rg_dequant_row_q2_0_ref(src, dst, n); }

void rg_vec_dot_q2_0_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_Q2_0; i++, x += Q2_0_BYTES) {
        const float dx = rg_fp16_to_fp32(rg_rd16(x));
        for (int k = 0; k < 2; k++, y += Q8_0_BYTES) {  // elements 32k .. 32k+31
            const int8_t *q8 = (const int8_t *)(y + 2);
            int32_t sumi = 0;
            for (int j = 0; j < 32; j++) sumi += (((x[2 + 8 * k + j / 4] >> (2 * (j % 4))) & 3) - 1) * q8[j];
            sumf += (dx * rg_fp16_to_fp32(rg_rd16(y))) * (float)sumi;
        }
    }
    *s = sumf;
}

void rg_vec_dot_q2_0_q8_0(int64_t n, float *s, const void *x, const void *y) { rg_vec_dot_q2_0_q8_0_ref(n, s, x, y); }

// §5.5: d = max|x|, id = d > 0 ? 1/d : 0, q = clamp(roundf(x·id) + 1, 0, 3).
size_t rg_quantize_row_q2_0(const float *src, void *dst, int64_t n, const float *imatrix) {
    (void)imatrix;
    uint8_t *y = dst;
    for (int64_t i = 0; i < n / QK_Q2_0; i++, src += QK_Q2_0, y += Q2_0_BYTES) {
        float amax = 0.0f;
        for (int j = 0; j < QK_Q2_0; j++)
            if (fabsf(src[j]) > amax) amax = fabsf(src[j]);
        const float d = amax;
        const float id = d > 0.0f ? 1.0f / d : 0.0f;
        rg_wr16(y, rg_fp32_to_fp16(d));
        memset(y + 2, 0, 16);
        for (int j = 0; j < QK_Q2_0; j++) {
            // roundf(x·id) + 1 clamped to 0..3, compared as floats so that NaN
            // (from NaN or Inf input) gives level 1 instead of an undefined cast.
            const float r = roundf(src[j] * id) + 1.0f;
            const int q = r >= 3.0f ? 3 : r >= 2.0f ? 2 : r < 1.0f ? 0 : 1;
            y[2 + j / 4] |= (uint8_t)(q << (2 * (j % 4)));
        }
    }
    return (size_t)(n / QK_Q2_0) * Q2_0_BYTES;
}
