// quant_iq4.c - the non-linear 4-bit types IQ4_NL (32 elements, dot with Q8_0)
// and IQ4_XS (256 elements, dot with Q8_K): dequantization (spec §4.4),
// the quantizer llama-quantize runs (§5.5, with an importance matrix §5.6), and
// the dot products. The AVX2 kernels live in quant_iq4_avx2.c and give the
// same bits as the scalar references here on every input.
//
// The quantizer is bit-exact with ggml's quantize_iq4_nl / quantize_iq4_xs
// when compiled without contraction (-ffp-contract=off, §5.9): every sum runs in
// f32 in index order and every expression is evaluated in the order written.
#include "tensor/quant/quant.h"
#include "tensor/quant/quant_funcs.h"

#include <math.h>
#include <string.h>

#include "base/cpu.h"
#include "tensor/half.h"

// §4.4
const int8_t rg_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

#define QK4_NL 32
#define IQ4NL_BYTES 18   // d f16 @0, qs[16] @2
#define QK_K 256
#define IQ4XS_BYTES 136  // d f16 @0, scales_h u16 @2, scales_l[4] @4, qs[128] @8
#define Q8_0_BYTES 34    // d f16 @0, qs[32] int8 @2 (§4.1)
#define Q8K_BYTES 292    // d f32 @0, qs[256] int8 @4, bsums[16] @260 (§4.2)

// The AVX2 kernels (quant_iq4_avx2.c; stubs calling the references when that
// file is built without -mavx2, with rg_quant_iq4_avx2_built = 0).
extern const int rg_quant_iq4_avx2_built;
void rg_dequant_row_iq4_nl_avx2(const void *src, float *dst, int64_t n);
void rg_dequant_row_iq4_xs_avx2(const void *src, float *dst, int64_t n);
void rg_vec_dot_iq4_nl_q8_0_avx2(int64_t n, float *s, const void *x, const void *y);
void rg_vec_dot_iq4_xs_q8_k_avx2(int64_t n, float *s, const void *x, const void *y);

static inline int use_avx2(void) { return rg_quant_iq4_avx2_built && rg_cpu_has_avx2(); }

// ---------------------------------------------------------------------------
// Dequantization (§4.4)

void rg_dequant_row_iq4_nl_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK4_NL; i++, b += IQ4NL_BYTES, dst += QK4_NL) {
        const float d = rg_fp16_to_fp32(rg_rd16(b));
        for (int j = 0; j < 16; j++) {
            dst[j] = d * (float)rg_kvalues_iq4nl[b[2 + j] & 15];
            dst[j + 16] = d * (float)rg_kvalues_iq4nl[b[2 + j] >> 4];
        }
    }
}

// Sub-block ib's 6-bit scale code ls (0..63); dl = d·(ls − 32).
static inline int iq4xs_ls(const uint8_t *b, int ib) {
    const uint16_t sh = rg_rd16(b + 2);
    return ((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) | ((sh >> (2 * ib)) & 3) << 4;
}

void rg_dequant_row_iq4_xs_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += IQ4XS_BYTES) {
        const float d = rg_fp16_to_fp32(rg_rd16(b));
        for (int ib = 0; ib < 8; ib++, dst += 32) {
            const float dl = d * (float)(iq4xs_ls(b, ib) - 32);
            const uint8_t *qs = b + 8 + 16 * ib;
            for (int j = 0; j < 16; j++) {
                dst[j] = dl * (float)rg_kvalues_iq4nl[qs[j] & 15];
                dst[j + 16] = dl * (float)rg_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

void rg_dequant_row_iq4_nl(const void *src, float *dst, int64_t n) {
    if (use_avx2()) rg_dequant_row_iq4_nl_avx2(src, dst, n);
    else rg_dequant_row_iq4_nl_ref(src, dst, n);
}

void rg_dequant_row_iq4_xs(const void *src, float *dst, int64_t n) {
    if (use_avx2()) rg_dequant_row_iq4_xs_avx2(src, dst, n);
    else rg_dequant_row_iq4_xs_ref(src, dst, n);
}

// ---------------------------------------------------------------------------
// Dot products. Inside a block the sums are exact integers; the AVX2 kernels
// compute the same integers and then the same f32 operations in the same
// order, so their results are identical to these.

void rg_vec_dot_iq4_nl_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK4_NL; i++, x += IQ4NL_BYTES, y += Q8_0_BYTES) {
        const int8_t *q8 = (const int8_t *)(y + 2);
        int32_t sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += rg_kvalues_iq4nl[x[2 + j] & 15] * q8[j] + rg_kvalues_iq4nl[x[2 + j] >> 4] * q8[j + 16];
        const float d = rg_fp16_to_fp32(rg_rd16(x)) * rg_fp16_to_fp32(rg_rd16(y));
        sumf += d * (float)sumi;
    }
    *s = sumf;
}

void rg_vec_dot_iq4_xs_q8_k_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++, x += IQ4XS_BYTES, y += Q8K_BYTES) {
        float dy;
        memcpy(&dy, y, sizeof dy);
        const int8_t *q8 = (const int8_t *)(y + 4);
        int32_t bsum = 0;  // |bsum| <= 8·32·127·128·32 < 2^31
        for (int ib = 0; ib < 8; ib++, q8 += 32) {
            const uint8_t *qs = x + 8 + 16 * ib;
            int32_t sumi = 0;
            for (int j = 0; j < 16; j++)
                sumi += rg_kvalues_iq4nl[qs[j] & 15] * q8[j] + rg_kvalues_iq4nl[qs[j] >> 4] * q8[j + 16];
            bsum += (iq4xs_ls(x, ib) - 32) * sumi;
        }
        const float d = rg_fp16_to_fp32(rg_rd16(x)) * dy;
        sumf += d * (float)bsum;
    }
    *s = sumf;
}

void rg_vec_dot_iq4_nl_q8_0(int64_t n, float *s, const void *x, const void *y) {
    if (use_avx2()) rg_vec_dot_iq4_nl_q8_0_avx2(n, s, x, y);
    else rg_vec_dot_iq4_nl_q8_0_ref(n, s, x, y);
}

void rg_vec_dot_iq4_xs_q8_k(int64_t n, float *s, const void *x, const void *y) {
    if (use_avx2()) rg_vec_dot_iq4_xs_q8_k_avx2(n, s, x, y);
    else rg_vec_dot_iq4_xs_q8_k_ref(n, s, x, y);
}

// ---------------------------------------------------------------------------
// Quantization (§5.5, §5.6)

#define GROUP_MAX_EPS 1e-15f

// nearest_int (§0): round half to even by adding 1.5·2^23 in f32 and reading
// the low mantissa bits. Valid for |v| < 2^22; never undefined (NaN gives junk
// that the callers clamp).
static inline int nearest_int(float v) {
    const float t = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &t, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

// The index of the nearest kvalues_iq4nl entry: binary search for the pair
// that brackets x, then the lower one when x is strictly closer to it (in f32),
// otherwise the upper one (§5.5). NaN goes to 15.
static inline int best_index_iq4nl(float x) {
    const int8_t *v = rg_kvalues_iq4nl;
    if (x <= (float)v[0]) return 0;
    if (x >= (float)v[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (x < (float)v[mid]) hi = mid;
        else lo = mid;
    }
    return x - (float)v[lo] < (float)v[hi] - x ? lo : hi;
}

// Quantizes one super-block of sb = 32 (IQ4_NL) or 256 (IQ4_XS) elements into
// the block at out, with ntry = 7 (what quantize_iq4_nl / quantize_iq4_xs use).
// qw: the imatrix weights of these sb elements, or NULL.
static void iq4_quantize_superblock(const float *x, uint8_t *out, int sb, const float *qw) {
    const int8_t *kv = rg_kvalues_iq4nl;
    const int ntry = 7;
    const int nsub = sb / 32;
    float scales[QK_K / 32];
    float weight[32];
    uint8_t L[QK_K];

    // 1. sigma2 = 2·Σx²/SB, summed in order, then scaled by the exact 2/SB.
    float sigma2 = 0.0f;
    for (int j = 0; j < sb; j++) sigma2 += x[j] * x[j];
    sigma2 *= 2.0f / (float)sb;

    // 2. A scale per 32-element sub-block.
    float max_scale = 0.0f, amax_scale = 0.0f;
    for (int ib = 0; ib < nsub; ib++) {
        const float *xb = x + 32 * ib;
        if (qw) {
            for (int j = 0; j < 32; j++) weight[j] = qw[32 * ib + j] * sqrtf(sigma2 + xb[j] * xb[j]);
        } else {
            for (int j = 0; j < 32; j++) weight[j] = xb[j] * xb[j];
        }
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++) {
            const float ax = fabsf(xb[j]);
            if (ax > amax) amax = ax, max = xb[j];
        }
        if (amax < GROUP_MAX_EPS) {
            scales[ib] = 0.0f;
            continue;
        }
        // First guess: d = −max/kv[0], the largest element on +127.
        float d = -max / (float)kv[0];
        float id = 1.0f / d;
        float sumqx = 0.0f, sumq2 = 0.0f;
        for (int j = 0; j < 32; j++) {
            const float q = (float)kv[best_index_iq4nl(id * xb[j])];
            const float w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = sumqx / sumq2;
        float best = d * sumqx;
        // Sweep: the largest element on kv[0] + itry.
        for (int itry = -ntry; itry <= ntry; itry++) {
            id = (float)(itry + kv[0]) / max;
            sumqx = sumq2 = 0.0f;
            for (int j = 0; j < 32; j++) {
                const float q = (float)kv[best_index_iq4nl(id * xb[j])];
                const float w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        const float abs_d = fabsf(d);
        if (abs_d > amax_scale) amax_scale = abs_d, max_scale = d;
    }

    uint8_t *qs;
    if (nsub > 1) {
        // 4. IQ4_XS: 6-bit sub-block scales against one f16 D.
        uint8_t *scales_l = out + 4;
        uint16_t scales_h = 0;
        qs = out + 8;
        const float d = -max_scale / 32;
        rg_wr16(out, rg_fp32_to_fp16(d));
        const float id = d != 0.0f ? 1.0f / d : 0.0f;  // NaN counts as nonzero, as in C's `d ? :`
        memset(scales_l, 0, (size_t)nsub / 2);
        for (int ib = 0; ib < nsub; ib++) {
            int l = nearest_int(id * scales[ib]);
            l = l < -32 ? -32 : l > 31 ? 31 : l;
            const float dl = d * (float)l;
            const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
            const float *xb = x + 32 * ib;
            for (int j = 0; j < 32; j++) L[32 * ib + j] = (uint8_t)best_index_iq4nl(idl * xb[j]);
            l += 32;
            scales_l[ib / 2] |= (uint8_t)((l & 15) << (4 * (ib % 2)));
            scales_h |= (uint16_t)((l >> 4) << (2 * ib));
        }
        rg_wr16(out + 2, scales_h);
    } else {
        // 3. IQ4_NL: store fp16(d), requantize with the unrounded d's reciprocal.
        qs = out + 2;
        rg_wr16(out, rg_fp32_to_fp16(scales[0]));
        const float id = scales[0] != 0.0f ? 1.0f / scales[0] : 0.0f;
        for (int j = 0; j < 32; j++) L[j] = (uint8_t)best_index_iq4nl(id * x[j]);
    }

    // Nibbles: element 32i+j low, 32i+16+j high (§4.4).
    for (int i = 0; i < nsub; i++)
        for (int j = 0; j < 16; j++) qs[16 * i + j] = (uint8_t)(L[32 * i + j] | L[32 * i + 16 + j] << 4);
}

size_t rg_quantize_row_iq4_nl(const float *src, void *dst, int64_t n, const float *imatrix) {
    uint8_t *y = dst;
    const int64_t nb = n / QK4_NL;
    for (int64_t i = 0; i < nb; i++)
        iq4_quantize_superblock(src + QK4_NL * i, y + IQ4NL_BYTES * i, QK4_NL, imatrix ? imatrix + QK4_NL * i : NULL);
    return (size_t)nb * IQ4NL_BYTES;
}

size_t rg_quantize_row_iq4_xs(const float *src, void *dst, int64_t n, const float *imatrix) {
    uint8_t *y = dst;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++)
        iq4_quantize_superblock(src + QK_K * i, y + IQ4XS_BYTES * i, QK_K, imatrix ? imatrix + QK_K * i : NULL);
    return (size_t)nb * IQ4XS_BYTES;
}
