// quant_iq.c - the IQ1/IQ2/IQ3 grid types: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
// IQ3_S, IQ1_S, IQ1_M. Dequantization (spec §4.6) and the dot product with a
// Q8_K row (§4.2). There are no quantizers here (§5.8: the table has NULL).
//
// Dequantization evaluates each formula of §4.6 in f32 in the order written:
// the scale of the sub-block first, then scale·grid, then the sign. Every
// product is exact (§4), so the results equal ggml's bit for bit.
//
// The dot products work in integers inside a super-block: the 8-element
// groups give exact sums of grid·q8 (with signs), weighted by the odd integer
// sub-block scale (2s+1); one f32 multiply by d_x·d_y per super-block and a
// constant factor at the end (1/8 for IQ2 and IQ1, 1/4 for IQ3_XXS). The
// dispatched functions are these references; the blocks are small table
// lookups that gain little from SIMD without a different data layout.
#include "tensor/quant/quant.h"
#include "tensor/quant/quant_funcs.h"

#include <string.h>

#include "tensor/half.h"
#include "tensor/quant/quant_iq_grids.h"

#define QK_K 256
#define Q8K_BYTES 292  // d f32 @0, qs[256] int8 @4, bsums[16] int16 @260 (§4.2)

// Element j (0..7 or 0..3) of a grid entry: byte j of the little-endian entry.
static inline int grid_u8(uint64_t entry, int j) { return (int)((entry >> (8 * j)) & 0xFF); }
static inline int grid_i8(uint64_t entry, int j) { return (int)(int8_t)(uint8_t)((entry >> (8 * j)) & 0xFF); }

static inline float q8k_d(const uint8_t *y) {
    float d;
    memcpy(&d, y, sizeof d);
    return d;
}
static inline const int8_t *q8k_qs(const uint8_t *y) { return (const int8_t *)(y + 4); }

// Sign multiplier for bit j of a sign byte: set means negative (§4.6).
static inline float sgnf(unsigned signs, int j) { return (signs >> j) & 1 ? -1.0f : 1.0f; }
static inline int sgni(unsigned signs, int j) { return (signs >> j) & 1 ? -1 : 1; }

// One 8-element group with a u64 grid entry and a sign byte: y = db·g_j·(±1).
static inline void put8(float *y, float db, uint64_t g, unsigned signs) {
    for (int j = 0; j < 8; j++) y[j] = db * (float)grid_u8(g, j) * sgnf(signs, j);
}

// Σ g_j·q_j·(±1) over one 8-element group.
static inline int dot8(uint64_t g, unsigned signs, const int8_t *q) {
    int s = 0;
    for (int j = 0; j < 8; j++) s += grid_u8(g, j) * q[j] * sgni(signs, j);
    return s;
}

// ---------------------------------------------------------------------------
// IQ2_XXS (66 bytes): d f16 @0, then per sub-block ib two u32 a0 @2+8ib, a1 @6+8ib.

#define IQ2XXS_BYTES 66

void rg_dequant_row_iq2_xxs_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += IQ2XXS_BYTES) {
        const float d = rg_fp16_to_fp32(rg_rd16(b));
        for (int ib = 0; ib < 8; ib++) {
            const uint32_t a0 = rg_rd32(b + 2 + 8 * ib), a1 = rg_rd32(b + 6 + 8 * ib);
            const float db = d * (0.5f + (float)(a1 >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++, dst += 8)
                put8(dst, db, rg_iq2xxs_grid[(a0 >> (8 * l)) & 255], rg_ksigns_iq2xs[(a1 >> (7 * l)) & 127]);
        }
    }
}

void rg_dequant_row_iq2_xxs(const void *src, float *dst, int64_t n) { rg_dequant_row_iq2_xxs_ref(src, dst, n); }

// db = d·(2s+1)/8: integer Σ (2s+1)·Σ g·q·(±1) per super-block, times 1/8 at the end.
void rg_vec_dot_iq2_xxs_q8_k_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++, x += IQ2XXS_BYTES, y += Q8K_BYTES) {
        const float d = rg_fp16_to_fp32(rg_rd16(x)) * q8k_d(y);
        const int8_t *q8 = q8k_qs(y);
        int32_t bsum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const uint32_t a0 = rg_rd32(x + 2 + 8 * ib), a1 = rg_rd32(x + 6 + 8 * ib);
            int32_t sumi = 0;
            for (int l = 0; l < 4; l++, q8 += 8)
                sumi += dot8(rg_iq2xxs_grid[(a0 >> (8 * l)) & 255], rg_ksigns_iq2xs[(a1 >> (7 * l)) & 127], q8);
            bsum += sumi * (int32_t)(2 * (a1 >> 28) + 1);
        }
        sumf += d * (float)bsum;
    }
    *s = 0.125f * sumf;
}

void rg_vec_dot_iq2_xxs_q8_k(int64_t n, float *s, const void *x, const void *y) {
    rg_vec_dot_iq2_xxs_q8_k_ref(n, s, x, y);
}

// ---------------------------------------------------------------------------
// IQ2_XS (74 bytes): d f16 @0, qs[32] u16 @2, scales[8] @66.

#define IQ2XS_BYTES 74

void rg_dequant_row_iq2_xs_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += IQ2XS_BYTES) {
        const float d = rg_fp16_to_fp32(rg_rd16(b));
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t sc = b[66 + ib];
            const float db[2] = {d * (0.5f + (float)(sc & 15)) * 0.25f, d * (0.5f + (float)(sc >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++, dst += 8) {
                const uint16_t v = rg_rd16(b + 2 + 2 * (4 * ib + l));
                put8(dst, db[l / 2], rg_iq2xs_grid[v & 511], rg_ksigns_iq2xs[v >> 9]);
            }
        }
    }
}

void rg_dequant_row_iq2_xs(const void *src, float *dst, int64_t n) { rg_dequant_row_iq2_xs_ref(src, dst, n); }

void rg_vec_dot_iq2_xs_q8_k_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++, x += IQ2XS_BYTES, y += Q8K_BYTES) {
        const float d = rg_fp16_to_fp32(rg_rd16(x)) * q8k_d(y);
        const int8_t *q8 = q8k_qs(y);
        int32_t bsum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t sc = x[66 + ib];
            int32_t sumi[2] = {0, 0};
            for (int l = 0; l < 4; l++, q8 += 8) {
                const uint16_t v = rg_rd16(x + 2 + 2 * (4 * ib + l));
                sumi[l / 2] += dot8(rg_iq2xs_grid[v & 511], rg_ksigns_iq2xs[v >> 9], q8);
            }
            bsum += sumi[0] * (2 * (sc & 15) + 1) + sumi[1] * (2 * (sc >> 4) + 1);
        }
        sumf += d * (float)bsum;
    }
    *s = 0.125f * sumf;
}

void rg_vec_dot_iq2_xs_q8_k(int64_t n, float *s, const void *x, const void *y) {
    rg_vec_dot_iq2_xs_q8_k_ref(n, s, x, y);
}

// ---------------------------------------------------------------------------
// IQ2_S (82 bytes): d f16 @0, qs[32] @2, signs[32] @34, qh[8] @66, scales[8] @74.

#define IQ2S_BYTES 82

static inline uint64_t iq2s_entry(const uint8_t *b, int ib, int l) {
    return rg_iq2s_grid[b[2 + 4 * ib + l] | ((b[66 + ib] >> (2 * l)) & 3) << 8];
}

void rg_dequant_row_iq2_s_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += IQ2S_BYTES) {
        const float d = rg_fp16_to_fp32(rg_rd16(b));
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t sc = b[74 + ib];
            const float db[2] = {d * (0.5f + (float)(sc & 15)) * 0.25f, d * (0.5f + (float)(sc >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++, dst += 8) put8(dst, db[l / 2], iq2s_entry(b, ib, l), b[34 + 4 * ib + l]);
        }
    }
}

void rg_dequant_row_iq2_s(const void *src, float *dst, int64_t n) { rg_dequant_row_iq2_s_ref(src, dst, n); }

void rg_vec_dot_iq2_s_q8_k_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++, x += IQ2S_BYTES, y += Q8K_BYTES) {
        const float d = rg_fp16_to_fp32(rg_rd16(x)) * q8k_d(y);
        const int8_t *q8 = q8k_qs(y);
        int32_t bsum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t sc = x[74 + ib];
            int32_t sumi[2] = {0, 0};
            for (int l = 0; l < 4; l++, q8 += 8) sumi[l / 2] += dot8(iq2s_entry(x, ib, l), x[34 + 4 * ib + l], q8);
            bsum += sumi[0] * (2 * (sc & 15) + 1) + sumi[1] * (2 * (sc >> 4) + 1);
        }
        sumf += d * (float)bsum;
    }
    *s = 0.125f * sumf;
}

void rg_vec_dot_iq2_s_q8_k(int64_t n, float *s, const void *x, const void *y) { rg_vec_dot_iq2_s_q8_k_ref(n, s, x, y); }

// ---------------------------------------------------------------------------
// IQ3_XXS (98 bytes): d f16 @0, qs[64] @2 (grid indices), 8 × u32 @66 (signs + scale).

#define IQ3XXS_BYTES 98

void rg_dequant_row_iq3_xxs_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += IQ3XXS_BYTES) {
        const float d = rg_fp16_to_fp32(rg_rd16(b));
        for (int ib = 0; ib < 8; ib++) {
            const uint32_t a = rg_rd32(b + 66 + 4 * ib);
            const float db = d * (0.5f + (float)(a >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++, dst += 8) {
                const unsigned signs = rg_ksigns_iq2xs[(a >> (7 * l)) & 127];
                const uint32_t g1 = rg_iq3xxs_grid[b[2 + 8 * ib + 2 * l]];
                const uint32_t g2 = rg_iq3xxs_grid[b[2 + 8 * ib + 2 * l + 1]];
                for (int j = 0; j < 4; j++) {
                    dst[j] = db * (float)grid_u8(g1, j) * sgnf(signs, j);
                    dst[j + 4] = db * (float)grid_u8(g2, j) * sgnf(signs, j + 4);
                }
            }
        }
    }
}

void rg_dequant_row_iq3_xxs(const void *src, float *dst, int64_t n) { rg_dequant_row_iq3_xxs_ref(src, dst, n); }

// db = d·(2s+1)/4.
void rg_vec_dot_iq3_xxs_q8_k_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++, x += IQ3XXS_BYTES, y += Q8K_BYTES) {
        const float d = rg_fp16_to_fp32(rg_rd16(x)) * q8k_d(y);
        const int8_t *q8 = q8k_qs(y);
        int32_t bsum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const uint32_t a = rg_rd32(x + 66 + 4 * ib);
            int32_t sumi = 0;
            for (int l = 0; l < 4; l++, q8 += 8) {
                const unsigned signs = rg_ksigns_iq2xs[(a >> (7 * l)) & 127];
                const uint32_t g1 = rg_iq3xxs_grid[x[2 + 8 * ib + 2 * l]];
                const uint32_t g2 = rg_iq3xxs_grid[x[2 + 8 * ib + 2 * l + 1]];
                for (int j = 0; j < 4; j++)
                    sumi += grid_u8(g1, j) * q8[j] * sgni(signs, j) + grid_u8(g2, j) * q8[j + 4] * sgni(signs, j + 4);
            }
            bsum += sumi * (int32_t)(2 * (a >> 28) + 1);
        }
        sumf += d * (float)bsum;
    }
    *s = 0.25f * sumf;
}

void rg_vec_dot_iq3_xxs_q8_k(int64_t n, float *s, const void *x, const void *y) {
    rg_vec_dot_iq3_xxs_q8_k_ref(n, s, x, y);
}

// ---------------------------------------------------------------------------
// IQ3_S (110 bytes): d f16 @0, qs[64] @2, qh[8] @66, signs[32] @74, scales[4] @106.

#define IQ3S_BYTES 110

static inline uint32_t iq3s_entry(const uint8_t *b, int ib, int k) {  // k = 2l or 2l+1
    return rg_iq3s_grid[b[2 + 8 * ib + k] | ((b[66 + ib] >> k) & 1) << 8];
}

void rg_dequant_row_iq3_s_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += IQ3S_BYTES) {
        const float d = rg_fp16_to_fp32(rg_rd16(b));
        for (int ib = 0; ib < 8; ib++) {
            const int sc = (b[106 + ib / 2] >> (4 * (ib % 2))) & 15;
            const float db = d * (float)(1 + 2 * sc);
            for (int l = 0; l < 4; l++, dst += 8) {
                const unsigned signs = b[74 + 4 * ib + l];
                const uint32_t g1 = iq3s_entry(b, ib, 2 * l), g2 = iq3s_entry(b, ib, 2 * l + 1);
                for (int j = 0; j < 4; j++) {
                    dst[j] = db * (float)grid_u8(g1, j) * sgnf(signs, j);
                    dst[j + 4] = db * (float)grid_u8(g2, j) * sgnf(signs, j + 4);
                }
            }
        }
    }
}

void rg_dequant_row_iq3_s(const void *src, float *dst, int64_t n) { rg_dequant_row_iq3_s_ref(src, dst, n); }

// db = d·(2s+1).
void rg_vec_dot_iq3_s_q8_k_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++, x += IQ3S_BYTES, y += Q8K_BYTES) {
        const float d = rg_fp16_to_fp32(rg_rd16(x)) * q8k_d(y);
        const int8_t *q8 = q8k_qs(y);
        int32_t bsum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const int sc = (x[106 + ib / 2] >> (4 * (ib % 2))) & 15;
            int32_t sumi = 0;
            for (int l = 0; l < 4; l++, q8 += 8) {
                const unsigned signs = x[74 + 4 * ib + l];
                const uint32_t g1 = iq3s_entry(x, ib, 2 * l), g2 = iq3s_entry(x, ib, 2 * l + 1);
                for (int j = 0; j < 4; j++)
                    sumi += grid_u8(g1, j) * q8[j] * sgni(signs, j) + grid_u8(g2, j) * q8[j + 4] * sgni(signs, j + 4);
            }
            bsum += sumi * (1 + 2 * sc);
        }
        sumf += d * (float)bsum;
    }
    *s = sumf;
}

void rg_vec_dot_iq3_s_q8_k(int64_t n, float *s, const void *x, const void *y) { rg_vec_dot_iq3_s_q8_k_ref(n, s, x, y); }

// ---------------------------------------------------------------------------
// IQ1_S (50 bytes): d f16 @0, qs[32] @2, qh[8] u16 @34. y = dl·(g_j + delta).

#define IQ1S_BYTES 50
#define IQ1_DELTA 0.125f

void rg_dequant_row_iq1_s_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += IQ1S_BYTES) {
        const float d = rg_fp16_to_fp32(rg_rd16(b));
        for (int ib = 0; ib < 8; ib++) {
            const uint16_t h = rg_rd16(b + 34 + 2 * ib);
            const float dl = d * (float)(2 * ((h >> 12) & 7) + 1);
            const float delta = (h & 0x8000) ? -IQ1_DELTA : IQ1_DELTA;
            for (int l = 0; l < 4; l++, dst += 8) {
                const uint64_t g = rg_iq1s_grid[b[2 + 4 * ib + l] | ((h >> (3 * l)) & 7) << 8];
                for (int j = 0; j < 8; j++) dst[j] = dl * ((float)grid_i8(g, j) + delta);
            }
        }
    }
}

void rg_dequant_row_iq1_s(const void *src, float *dst, int64_t n) { rg_dequant_row_iq1_s_ref(src, dst, n); }

// Σ dl·(g + delta)·q = d·Σ_ib ls·(Σ g·q ± Σ q/8): integers 8·Σg·q ± Σq, times 1/8 at the end.
void rg_vec_dot_iq1_s_q8_k_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++, x += IQ1S_BYTES, y += Q8K_BYTES) {
        const float d = rg_fp16_to_fp32(rg_rd16(x)) * q8k_d(y);
        const int8_t *q8 = q8k_qs(y);
        int32_t bsum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const uint16_t h = rg_rd16(x + 34 + 2 * ib);
            int32_t sumg = 0, sumq = 0;
            for (int l = 0; l < 4; l++, q8 += 8) {
                const uint64_t g = rg_iq1s_grid[x[2 + 4 * ib + l] | ((h >> (3 * l)) & 7) << 8];
                for (int j = 0; j < 8; j++) sumg += grid_i8(g, j) * q8[j], sumq += q8[j];
            }
            const int32_t ls = 2 * ((h >> 12) & 7) + 1;
            bsum += ls * (8 * sumg + ((h & 0x8000) ? -sumq : sumq));
        }
        sumf += d * (float)bsum;
    }
    *s = 0.125f * sumf;
}

void rg_vec_dot_iq1_s_q8_k(int64_t n, float *s, const void *x, const void *y) { rg_vec_dot_iq1_s_q8_k_ref(n, s, x, y); }

// ---------------------------------------------------------------------------
// IQ1_M (56 bytes): qs[32] @0, qh[16] @32, scales[8] @48 (4 × u16); no d field:
// the f16 super-scale is the top nibbles of the four scale words.

#define IQ1M_BYTES 56

static inline float iq1m_d(const uint8_t *b, uint16_t sc[4]) {
    for (int k = 0; k < 4; k++) sc[k] = rg_rd16(b + 48 + 2 * k);
    const uint16_t dbits = (uint16_t)((sc[0] >> 12) | (sc[1] >> 12) << 4 | (sc[2] >> 12) << 8 | (sc[3] >> 12) << 12);
    return rg_fp16_to_fp32(dbits);
}

// Sub-block ib, group g: the 3-bit scale, the grid entry and the delta sign.
static inline int iq1m_ls(const uint16_t sc[4], int ib, int g) {
    const uint16_t w = sc[ib / 2];
    const int sh = 6 * (ib % 2) + (g < 2 ? 0 : 3);
    return 2 * ((w >> sh) & 7) + 1;
}
static inline unsigned iq1m_nib(const uint8_t *b, int ib, int g) { return (b[32 + 2 * ib + g / 2] >> (4 * (g % 2))) & 15; }

void rg_dequant_row_iq1_m_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += IQ1M_BYTES) {
        uint16_t sc[4];
        const float d = iq1m_d(b, sc);
        for (int ib = 0; ib < 8; ib++) {
            const float dl[2] = {d * (float)iq1m_ls(sc, ib, 0), d * (float)iq1m_ls(sc, ib, 2)};
            for (int g = 0; g < 4; g++, dst += 8) {
                const unsigned nib = iq1m_nib(b, ib, g);
                const uint64_t e = rg_iq1s_grid[b[4 * ib + g] | (nib & 7) << 8];
                const float delta = (nib & 8) ? -IQ1_DELTA : IQ1_DELTA;
                for (int j = 0; j < 8; j++) dst[j] = dl[g / 2] * ((float)grid_i8(e, j) + delta);
            }
        }
    }
}

void rg_dequant_row_iq1_m(const void *src, float *dst, int64_t n) { rg_dequant_row_iq1_m_ref(src, dst, n); }

void rg_vec_dot_iq1_m_q8_k_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++, x += IQ1M_BYTES, y += Q8K_BYTES) {
        uint16_t sc[4];
        const float d = iq1m_d(x, sc) * q8k_d(y);
        const int8_t *q8 = q8k_qs(y);
        int32_t bsum = 0;
        for (int ib = 0; ib < 8; ib++) {
            for (int g = 0; g < 4; g++, q8 += 8) {
                const unsigned nib = iq1m_nib(x, ib, g);
                const uint64_t e = rg_iq1s_grid[x[4 * ib + g] | (nib & 7) << 8];
                int32_t sumg = 0, sumq = 0;
                for (int j = 0; j < 8; j++) sumg += grid_i8(e, j) * q8[j], sumq += q8[j];
                bsum += iq1m_ls(sc, ib, g) * (8 * sumg + ((nib & 8) ? -sumq : sumq));
            }
        }
        sumf += d * (float)bsum;
    }
    *s = 0.125f * sumf;
}

void rg_vec_dot_iq1_m_q8_k(int64_t n, float *s, const void *x, const void *y) { rg_vec_dot_iq1_m_q8_k_ref(n, s, x, y); }
