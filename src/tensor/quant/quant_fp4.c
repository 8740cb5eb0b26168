// quant_fp4.c - the FP4 (E2M1) types MXFP4 (32 elements, E8M0 block scale) and
// NVFP4 (64 elements, four UE4M3 sub-block scales), both dotted with Q8_0:
// scale decoding and encoding (spec §3.4–3.6), dequantization (§4.4), the
// reference quantizers (§5.5; an imatrix is ignored, §5.6), dot products.
//
// Both use the doubled E2M1 table kvalues_fp4 with half of the scale, so every
// value kvalues_fp4[q]·d is exact in f32.
#include "tensor/quant/quant.h"
#include "tensor/quant/quant_funcs.h"

#include <math.h>
#include <string.h>

#include "tensor/half.h"

// §3.5: E2M1 magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6} doubled; bit 3 is the sign.
const int8_t rg_kvalues_fp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

#define QK_MXFP4 32
#define MXFP4_BYTES 17  // e (E8M0) @0, qs[16] @1
#define QK_NVFP4 64
#define NVFP4_BYTES 36  // d[4] (UE4M3) @0, qs[32] @4
#define Q8_0_BYTES 34   // d f16 @0, qs[32] int8 @2 (§4.1)

static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint32_t bits_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

// §3.4: half of the E8M0 value, 2^(e−128): e = 0 and 1 are f32 subnormals.
static inline float e8m0_half(uint8_t e) {
    return f32_from_bits(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

// §3.6: the UE4M3 byte u as f32 (bit 7 ignored; 0 and 0x7F read as 0).
static inline float ue4m3_value(uint8_t u) {
    if (u == 0 || u == 0x7F) return 0.0f;
    const uint32_t exp = (u >> 3) & 15, man = u & 7;
    if (exp == 0) return (float)man * 0x1p-9f;                 // man·2^−9
    return f32_from_bits((exp - 7 + 127) << 23 | man << 20);  // (1 + man/8)·2^(exp−7)
}

// §3.6: encode v > 0 as UE4M3 (the NVFP4 quantizer's ue()).
static uint8_t ue4m3_encode(float v) {
    if (!(v > 0.0f)) return 0;  // v <= 0 or NaN
    if (v > 448.0f) v = 448.0f;
    const uint32_t u = bits_from_f32(v);
    int e = (int)((u >> 23) & 0xFF) - 127 + 7;
    int m = (int)((u >> 20) & 7);
    if (e <= 0) {  // subnormal in UE4M3: man·2^−9, rounded half up, at most 7
        int man = (int)(v * 512.0f + 0.5f);  // v < 2^−6 here, so this is in 0..8
        if (man > 7) man = 7;
        return man < 1 ? 0 : (uint8_t)man;
    }
    if (e >= 15) return 0x7E;
    m += (int)((u >> 19) & 1);  // round half up on magnitude, lower bits ignored
    if (m == 8) {
        m = 0;
        if (++e >= 15) return 0x7E;
    }
    return (uint8_t)(e << 3 | m);
}

// §5.5: the code 0..15 whose kvalues_fp4[i]·d is nearest to x; the scan keeps
// the first minimum, so ties go to the lower code (toward zero, +0 over −0).
static inline uint8_t best_index_fp4(float x, float d) {
    int best = 0;
    float best_err = fabsf((float)rg_kvalues_fp4[0] * d - x);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf((float)rg_kvalues_fp4[i] * d - x);
        if (err < best_err) best = i, best_err = err;
    }
    return (uint8_t)best;
}

// ---------------------------------------------------------------------------
// MXFP4 (§4.4): nibbles as Q4_0 (element j low, j+16 high), y = kv[q]·2^(e−128).

void rg_dequant_row_mxfp4_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_MXFP4; i++, b += MXFP4_BYTES, dst += QK_MXFP4) {
        const float d = e8m0_half(b[0]);
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)rg_kvalues_fp4[b[1 + j] & 15] * d;
            dst[j + 16] = (float)rg_kvalues_fp4[b[1 + j] >> 4] * d;
        }
    }
}

void rg_dequant_row_mxfp4(const void *src, float *dst, int64_t n) { rg_dequant_row_mxfp4_ref(src, dst, n); }

void rg_vec_dot_mxfp4_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_MXFP4; i++, x += MXFP4_BYTES, y += Q8_0_BYTES) {
        const int8_t *q8 = (const int8_t *)(y + 2);
        int32_t sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += rg_kvalues_fp4[x[1 + j] & 15] * q8[j] + rg_kvalues_fp4[x[1 + j] >> 4] * q8[j + 16];
        const float d = rg_fp16_to_fp32(rg_rd16(y)) * e8m0_half(x[0]);
        sumf += d * (float)sumi;
    }
    *s = sumf;
}

void rg_vec_dot_mxfp4_q8_0(int64_t n, float *s, const void *x, const void *y) { rg_vec_dot_mxfp4_q8_0_ref(n, s, x, y); }

// §5.5: e = floorf(log2f(amax)) − 2 + 127 in f32; a block with amax below 2^−125
// would give a negative exponent, which is clamped to 0 (ggml's cast to uint8_t
// is undefined there); no finite amax reaches 254, and Inf is held at 254.
static uint8_t mxfp4_exponent(float amax) {
    if (!(amax > 0.0f)) return 0;
    const float e = floorf(log2f(amax)) - 2 + 127;
    if (!(e >= 0.0f)) return 0;
    if (e > 254.0f) return 254;
    return (uint8_t)e;
}

size_t rg_quantize_row_mxfp4(const float *src, void *dst, int64_t n, const float *imatrix) {
    (void)imatrix;
    uint8_t *y = dst;
    for (int64_t i = 0; i < n / QK_MXFP4; i++, src += QK_MXFP4, y += MXFP4_BYTES) {
        float amax = 0.0f;
        for (int j = 0; j < QK_MXFP4; j++)
            if (amax < fabsf(src[j])) amax = fabsf(src[j]);
        const uint8_t e = mxfp4_exponent(amax);
        const float d = e8m0_half(e);
        y[0] = e;
        for (int j = 0; j < 16; j++)
            y[1 + j] = (uint8_t)(best_index_fp4(src[j], d) | best_index_fp4(src[j + 16], d) << 4);
    }
    return (size_t)(n / QK_MXFP4) * MXFP4_BYTES;
}

// ---------------------------------------------------------------------------
// NVFP4 (§4.4): sub-block s (16 elements) has scale d[s] and qs[8s .. 8s+7]:
// low nibble of qs[8s + j] = element 16s + j, high nibble = element 16s + 8 + j.
// y = kv[q]·(UE4M3(d[s])/2).

void rg_dequant_row_nvfp4_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_NVFP4; i++, b += NVFP4_BYTES) {
        for (int s = 0; s < 4; s++, dst += 16) {
            const float d = ue4m3_value(b[s]) * 0.5f;
            const uint8_t *qs = b + 4 + 8 * s;
            for (int j = 0; j < 8; j++) {
                dst[j] = (float)rg_kvalues_fp4[qs[j] & 15] * d;
                dst[j + 8] = (float)rg_kvalues_fp4[qs[j] >> 4] * d;
            }
        }
    }
}

void rg_dequant_row_nvfp4(const void *src, float *dst, int64_t n) { rg_dequant_row_nvfp4_ref(src, dst, n); }

// One NVFP4 block spans two Q8_0 blocks: sub-blocks 0,1 in the first, 2,3 in the second.
void rg_vec_dot_nvfp4_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_NVFP4; i++, x += NVFP4_BYTES, y += 2 * Q8_0_BYTES) {
        for (int sb = 0; sb < 4; sb++) {
            const uint8_t *yb = y + Q8_0_BYTES * (sb / 2);
            const int8_t *q8 = (const int8_t *)(yb + 2) + 16 * (sb % 2);
            const uint8_t *qs = x + 4 + 8 * sb;
            int32_t sumi = 0;
            for (int j = 0; j < 8; j++)
                sumi += rg_kvalues_fp4[qs[j] & 15] * q8[j] + rg_kvalues_fp4[qs[j] >> 4] * q8[j + 8];
            const float d = rg_fp16_to_fp32(rg_rd16(yb)) * (ue4m3_value(x[sb]) * 0.5f);
            sumf += d * (float)sumi;
        }
    }
    *s = sumf;
}

void rg_vec_dot_nvfp4_q8_0(int64_t n, float *s, const void *x, const void *y) { rg_vec_dot_nvfp4_q8_0_ref(n, s, x, y); }

size_t rg_quantize_row_nvfp4(const float *src, void *dst, int64_t n, const float *imatrix) {
    (void)imatrix;
    uint8_t *y = dst;
    for (int64_t i = 0; i < n / QK_NVFP4; i++, y += NVFP4_BYTES) {
        for (int s = 0; s < 4; s++, src += 16) {
            float amax = 0.0f;
            for (int j = 0; j < 16; j++)
                if (amax < fabsf(src[j])) amax = fabsf(src[j]);
            const uint8_t u = ue4m3_encode(amax / 6.0f);
            const float d = ue4m3_value(u) * 0.5f;
            y[s] = u;
            uint8_t *qs = y + 4 + 8 * s;
            for (int j = 0; j < 8; j++) qs[j] = (uint8_t)(best_index_fp4(src[j], d) | best_index_fp4(src[j + 8], d) << 4);
        }
    }
    return (size_t)(n / QK_NVFP4) * NVFP4_BYTES;
}
