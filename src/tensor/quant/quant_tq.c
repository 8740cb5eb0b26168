// quant_tq.c - the ternary types TQ1_0 and TQ2_0 (256 elements, dot with Q8_K):
// dequantization (spec §4.3), the reference quantizer (§5.5; an imatrix is
// ignored, §5.6) and the dot product.
//
// Values are (t − 1)·d with t in 0..2 (TQ2_0 blocks from elsewhere may hold
// t = 3, which reads as 2·d). The dot product sums (t − 1)·q8 exactly in
// integers per super-block and multiplies once by d_x·d_y.
#include "tensor/quant/quant.h"
#include "tensor/quant/quant_funcs.h"

#include <math.h>
#include <string.h>

#include "tensor/half.h"

#define QK_K 256
#define TQ1_BYTES 54   // qs[48] @0, qh[4] @48, d f16 @52
#define TQ2_BYTES 66   // qs[64] @0, d f16 @64
#define Q8K_BYTES 292  // d f32 @0, qs[256] int8 @4, bsums[16] @260 (§4.2)

static inline float q8k_d(const uint8_t *y) {
    float d;
    memcpy(&d, y, sizeof d);
    return d;
}

// ---------------------------------------------------------------------------
// TQ1_0 (§4.3): bytes hold 5 (qh: 4) trits as a base-3 fixed-point fraction.

// Trit n (0 = most significant) of byte b: ((b·3^n mod 256)·3) >> 8.
static inline int tq1_trit(uint8_t b, int n) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const uint8_t v = (uint8_t)(b * pow3[n]);
    return (v * 3) >> 8;
}

// The 256 trits of a TQ1_0 block in element order.
static void tq1_unpack(const uint8_t *b, int8_t t[QK_K]) {
    for (int n = 0; n < 5; n++)
        for (int m = 0; m < 32; m++) t[32 * n + m] = (int8_t)tq1_trit(b[m], n);
    for (int n = 0; n < 5; n++)
        for (int m = 0; m < 16; m++) t[160 + 16 * n + m] = (int8_t)tq1_trit(b[32 + m], n);
    for (int n = 0; n < 4; n++)
        for (int m = 0; m < 4; m++) t[240 + 4 * n + m] = (int8_t)tq1_trit(b[48 + m], n);
}

void rg_dequant_row_tq1_0_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    int8_t t[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, b += TQ1_BYTES, dst += QK_K) {
        const float d = rg_fp16_to_fp32(rg_rd16(b + 52));
        tq1_unpack(b, t);
        for (int e = 0; e < QK_K; e++) dst[e] = (float)(t[e] - 1) * d;
    }
}

void rg_dequant_row_tq1_0(const void *src, float *dst, int64_t n) { rg_dequant_row_tq1_0_ref(src, dst, n); }

void rg_vec_dot_tq1_0_q8_k_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    int8_t t[QK_K];
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++, x += TQ1_BYTES, y += Q8K_BYTES) {
        const int8_t *q8 = (const int8_t *)(y + 4);
        tq1_unpack(x, t);
        int32_t sumi = 0;
        for (int e = 0; e < QK_K; e++) sumi += (t[e] - 1) * q8[e];
        sumf += (float)sumi * (rg_fp16_to_fp32(rg_rd16(x + 52)) * q8k_d(y));
    }
    *s = sumf;
}

void rg_vec_dot_tq1_0_q8_k(int64_t n, float *s, const void *x, const void *y) { rg_vec_dot_tq1_0_q8_k_ref(n, s, x, y); }

// ---------------------------------------------------------------------------
// TQ2_0 (§4.3): element e = 128h + 32n + m is bits 2n..2n+1 of qs[32h + m].

void rg_dequant_row_tq2_0_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += TQ2_BYTES) {
        const float d = rg_fp16_to_fp32(rg_rd16(b + 64));
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++)
                for (int m = 0; m < 32; m++) *dst++ = (float)(((b[32 * h + m] >> (2 * k)) & 3) - 1) * d;
    }
}

void rg_dequant_row_tq2_0(const void *src, float *dst, int64_t n) { rg_dequant_row_tq2_0_ref(src, dst, n); }

void rg_vec_dot_tq2_0_q8_k_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++, x += TQ2_BYTES, y += Q8K_BYTES) {
        const int8_t *q8 = (const int8_t *)(y + 4);
        int32_t sumi = 0;
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++)
                for (int m = 0; m < 32; m++, q8++) sumi += (((x[32 * h + m] >> (2 * k)) & 3) - 1) * *q8;
        sumf += (float)sumi * (rg_fp16_to_fp32(rg_rd16(x + 64)) * q8k_d(y));
    }
    *s = sumf;
}

void rg_vec_dot_tq2_0_q8_k(int64_t n, float *s, const void *x, const void *y) { rg_vec_dot_tq2_0_q8_k_ref(n, s, x, y); }

// ---------------------------------------------------------------------------
// Quantization (§5.5): d = max|x|, t = roundf(x/d) + 1.

// max|x| scanned as ggml's MAX(amax, |x|) = amax > |x| ? amax : |x|.
static float tq_amax(const float *x) {
    float amax = 0.0f;
    for (int j = 0; j < QK_K; j++) {
        const float ax = fabsf(x[j]);
        amax = amax > ax ? amax : ax;
    }
    return amax;
}

// roundf(v) + 1 for v in [−1, 1] (roundf ties away from zero); anything else
// (only from NaN or Inf input) is kept in 0..2 instead of converting junk.
static inline int tq_trit(float v) {
    const float r = roundf(v);
    return r >= 1.0f ? 2 : r <= -1.0f ? 0 : 1;
}

size_t rg_quantize_row_tq1_0(const float *src, void *dst, int64_t n, const float *imatrix) {
    (void)imatrix;
    uint8_t *y = dst;
    static const int pow3[5] = {81, 27, 9, 3, 1};
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K, y += TQ1_BYTES) {
        const float d = tq_amax(src);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        rg_wr16(y + 52, rg_fp32_to_fp16(d));
        // The byte of a base-3 number v of 5 trits (first element most
        // significant) is ceil(v·256/243) = (v·256 + 242)/243.
        for (int m = 0; m < 32; m++) {
            int v = 0;
            for (int k = 0; k < 5; k++) v += tq_trit(src[32 * k + m] * id) * pow3[k];
            y[m] = (uint8_t)((v * 256 + 242) / 243);
        }
        for (int m = 0; m < 16; m++) {
            int v = 0;
            for (int k = 0; k < 5; k++) v += tq_trit(src[160 + 16 * k + m] * id) * pow3[k];
            y[32 + m] = (uint8_t)((v * 256 + 242) / 243);
        }
        // qh: 4 trits times 3 (3^(4−k) for trit k), so the fifth trit is 0.
        for (int m = 0; m < 4; m++) {
            int v = 0;
            for (int k = 0; k < 4; k++) v += tq_trit(src[240 + 4 * k + m] * id) * pow3[k];
            y[48 + m] = (uint8_t)((v * 256 + 242) / 243);
        }
    }
    return (size_t)(n / QK_K) * TQ1_BYTES;
}

size_t rg_quantize_row_tq2_0(const float *src, void *dst, int64_t n, const float *imatrix) {
    (void)imatrix;
    uint8_t *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K, y += TQ2_BYTES) {
        const float d = tq_amax(src);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        rg_wr16(y + 64, rg_fp32_to_fp16(d));
        for (int h = 0; h < 2; h++)
            for (int m = 0; m < 32; m++) {
                unsigned q = 0;
                for (int k = 0; k < 4; k++) q |= (unsigned)tq_trit(src[128 * h + 32 * k + m] * id) << (2 * k);
                y[32 * h + m] = (uint8_t)q;
            }
    }
    return (size_t)(n / QK_K) * TQ2_BYTES;
}
