// quant_legacy.c - the legacy 32-element types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0:
// scalar dequantizers (spec §4.1), reference quantizers (§5.1, and §5.6 with an
// importance matrix), scalar dot products against Q8_0 / Q8_1, and the
// dispatch to the AVX2 kernels of quant_legacy_avx2.c.
//
// Everything is f32 arithmetic in the order the spec writes it; the build uses
// -ffp-contract=off so that no multiply-add is fused (spec §5.9). Blocks are
// byte arrays (layouts beside each function); f16 fields go through half.h.
#include <math.h>

#include "base/cpu.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"
#include "tensor/quant/quant_legacy_k.h"

static inline float h2f(const uint8_t *p) { return rg_fp16_to_fp32(rg_rd16(p)); }
static inline void put_f16(uint8_t *p, float v) { rg_wr16(p, rg_fp32_to_fp16(v)); }

static inline int use_avx2(void) { return rg_quant_legacy_avx2_built && rg_cpu_has_avx2(); }

static inline int imin(int a, int b) { return a < b ? a : b; }

// ===========================================================================
// Dequantization (spec §4.1). In every block, element j (0..15) is the low
// nibble of qs[j] and element j+16 its high nibble; for the 5-bit types bit i
// of qh is bit 4 of element i.

// Q4_0, 18 bytes: d f16 @0 | qs[16] @2.  y = (q - 8)·d
void rg_dequant_row_q4_0_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / RG_QK_LEGACY; i++, b += RG_Q4_0_BYTES, dst += RG_QK_LEGACY) {
        const float d = h2f(b);
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)((b[2 + j] & 15) - 8) * d;
            dst[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
        }
    }
}

// Q4_1, 20 bytes: d f16 @0 | m f16 @2 | qs[16] @4.  y = q·d + m
void rg_dequant_row_q4_1_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / RG_QK_LEGACY; i++, b += RG_Q4_1_BYTES, dst += RG_QK_LEGACY) {
        const float d = h2f(b), m = h2f(b + 2);
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)(b[4 + j] & 15) * d + m;
            dst[j + 16] = (float)(b[4 + j] >> 4) * d + m;
        }
    }
}

// Q5_0, 22 bytes: d f16 @0 | qh u32 @2 | qs[16] @6.  y = (q - 16)·d
void rg_dequant_row_q5_0_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / RG_QK_LEGACY; i++, b += RG_Q5_0_BYTES, dst += RG_QK_LEGACY) {
        const float d = h2f(b);
        const uint32_t qh = rg_rd32(b + 2);
        for (int j = 0; j < 16; j++) {
            int q0 = (b[6 + j] & 15) | (int)((qh >> j) & 1) << 4;
            int q1 = (b[6 + j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            dst[j] = (float)(q0 - 16) * d;
            dst[j + 16] = (float)(q1 - 16) * d;
        }
    }
}

// Q5_1, 24 bytes: d f16 @0 | m f16 @2 | qh u32 @4 | qs[16] @8.  y = q·d + m
void rg_dequant_row_q5_1_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / RG_QK_LEGACY; i++, b += RG_Q5_1_BYTES, dst += RG_QK_LEGACY) {
        const float d = h2f(b), m = h2f(b + 2);
        const uint32_t qh = rg_rd32(b + 4);
        for (int j = 0; j < 16; j++) {
            int q0 = (b[8 + j] & 15) | (int)((qh >> j) & 1) << 4;
            int q1 = (b[8 + j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            dst[j] = (float)q0 * d + m;
            dst[j + 16] = (float)q1 * d + m;
        }
    }
}

// Q8_0, 34 bytes: d f16 @0 | qs[32] int8 @2.  y = q·d
void rg_dequant_row_q8_0_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / RG_QK_LEGACY; i++, b += RG_Q8_0_BYTES, dst += RG_QK_LEGACY) {
        const float d = h2f(b);
        for (int j = 0; j < 32; j++) dst[j] = (float)(int8_t)b[2 + j] * d;
    }
}

void rg_dequant_row_q4_0(const void *src, float *dst, int64_t n) {
    if (use_avx2())
        rg_dequant_row_q4_0_avx2(src, dst, n);
    else
        rg_dequant_row_q4_0_ref(src, dst, n);
}
void rg_dequant_row_q4_1(const void *src, float *dst, int64_t n) {
    if (use_avx2())
        rg_dequant_row_q4_1_avx2(src, dst, n);
    else
        rg_dequant_row_q4_1_ref(src, dst, n);
}
void rg_dequant_row_q5_0(const void *src, float *dst, int64_t n) {
    if (use_avx2())
        rg_dequant_row_q5_0_avx2(src, dst, n);
    else
        rg_dequant_row_q5_0_ref(src, dst, n);
}
void rg_dequant_row_q5_1(const void *src, float *dst, int64_t n) {
    if (use_avx2())
        rg_dequant_row_q5_1_avx2(src, dst, n);
    else
        rg_dequant_row_q5_1_ref(src, dst, n);
}
void rg_dequant_row_q8_0(const void *src, float *dst, int64_t n) {
    if (use_avx2())
        rg_dequant_row_q8_0_avx2(src, dst, n);
    else
        rg_dequant_row_q8_0_ref(src, dst, n);
}

// ===========================================================================
// Reference quantizers without an importance matrix (spec §5.1). Every step
// uses the unrounded f32 d / id; fp16 rounding only affects what is stored.
// The float -> small-int casts are those of ggml on x86-64 (rg_cvtt_i8/u8),
// which are the plain truncation for every finite input that gets there.

// The signed element of largest |x|: the first one strictly greater in scan order.
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void minmax(const float *x, int n, float *mn, float *mx) {
    float lo = 3.40282347e+38f, hi = -3.40282347e+38f;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo, *mx = hi;
}

static void q4_0_block_ref(const float *x, uint8_t *b) {
    const float max = signed_absmax(x, 32);
    const float d = max / -8.0f;  // opposite sign to max: max maps to q = 0
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int j = 0; j < 16; j++) {
        const float x0 = x[j] * id, x1 = x[j + 16] * id;
        const uint8_t q0 = (uint8_t)imin(15, rg_cvtt_i8(x0 + 8.5f));
        const uint8_t q1 = (uint8_t)imin(15, rg_cvtt_i8(x1 + 8.5f));
        b[2 + j] = (uint8_t)(q0 | q1 << 4);
    }
}

static void q4_1_block_ref(const float *x, uint8_t *b) {
    float min, max;
    minmax(x, 32, &min, &max);
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    put_f16(b + 2, min);
    for (int j = 0; j < 16; j++) {
        const float x0 = (x[j] - min) * id, x1 = (x[j + 16] - min) * id;
        const uint8_t q0 = (uint8_t)imin(15, rg_cvtt_i8(x0 + 0.5f));
        const uint8_t q1 = (uint8_t)imin(15, rg_cvtt_i8(x1 + 0.5f));
        b[4 + j] = (uint8_t)(q0 | q1 << 4);
    }
}

// Packs 32 five-bit levels into qs[16] and the u32 qh (spec §4.1).
static void pack_q5(const uint8_t *q, uint8_t *qs, uint8_t *qh_out) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
        qh |= (uint32_t)((q[j] & 0x10u) >> 4) << j;
        qh |= (uint32_t)((q[j + 16] & 0x10u) >> 4) << (j + 16);
    }
    rg_wr32(qh_out, qh);
}

static void q5_0_block_ref(const float *x, uint8_t *b) {
    const float max = signed_absmax(x, 32);
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t q[32];
    put_f16(b, d);
    for (int j = 0; j < 32; j++) q[j] = (uint8_t)imin(31, rg_cvtt_i8(x[j] * id + 16.5f));
    pack_q5(q, b + 6, b + 2);
}

static void q5_1_block_ref(const float *x, uint8_t *b) {
    float min, max;
    minmax(x, 32, &min, &max);
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t q[32];
    put_f16(b, d);
    put_f16(b + 2, min);
    for (int j = 0; j < 32; j++) q[j] = (uint8_t)rg_cvtt_u8((x[j] - min) * id + 0.5f);  // no clamp (spec §5.1)
    pack_q5(q, b + 8, b + 4);
}

// Q8_0 (and the d/qs of Q8_1): amax = max|x| with ggml's MAX(a, b) = a > b ? a : b,
// d = amax/127, q = roundf(x·id). Stores fp16(d) at dd and the quants at qs;
// returns the f32 d in *d_out and Σq (for Q8_1's s field).
int rg_q8_block_ref(const float *x, uint8_t *dd, uint8_t *qs, float *d_out) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) {
        const float a = fabsf(x[j]);
        amax = amax > a ? amax : a;
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(dd, d);
    int sum = 0;
    for (int j = 0; j < 32; j++) {
        const int q = rg_cvtt_i8(roundf(x[j] * id));
        qs[j] = (uint8_t)q;
        sum += q;
    }
    *d_out = d;
    return sum;
}

size_t rg_quantize_row_q8_0_ref(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    float d;
    for (int64_t i = 0; i < n / RG_QK_LEGACY; i++, b += RG_Q8_0_BYTES, src += RG_QK_LEGACY)
        rg_q8_block_ref(src, b, b + 2, &d);
    return (size_t)(n / RG_QK_LEGACY) * RG_Q8_0_BYTES;
}

// ===========================================================================
// With an importance matrix (spec §5.6): per-element weights
// qw·sqrt(σ² + x²) with σ² = Σx²/n over the whole row, then the weighted searches.

static float row_sigma2(const float *x, int64_t n) {
    float sum_x2 = 0.0f;
    for (int64_t j = 0; j < n; j++) sum_x2 += x[j] * x[j];
    return sum_x2 / (float)n;
}

static void imatrix_weights(const float *x, const float *qw, float sigma2, float *w) {
    for (int j = 0; j < 32; j++) w[j] = qw[j] * sqrtf(sigma2 + x[j] * x[j]);
}

static void quantize_q4_0_impl(const float *x, uint8_t *b, int64_t n, const float *imatrix) {
    const float sigma2 = row_sigma2(x, n);
    float w[32];
    int8_t L[32];
    for (int64_t ib = 0; ib < n / 32; ib++, b += RG_Q4_0_BYTES) {
        imatrix_weights(x + 32 * ib, imatrix + 32 * ib, sigma2, w);
        const float d = rg_make_qx_quants(32, 8, x + 32 * ib, L, w);
        put_f16(b, d);  // no requantization after the rounding (spec §5.6)
        for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(L[j] | L[j + 16] << 4);
    }
}

static void quantize_q4_1_impl(const float *x, uint8_t *b, int64_t n, const float *imatrix) {
    const float sigma2 = row_sigma2(x, n);
    float w[32];
    uint8_t L[32], Laux[32];
    for (int64_t ib = 0; ib < n / 32; ib++, b += RG_Q4_1_BYTES) {
        imatrix_weights(x + 32 * ib, imatrix + 32 * ib, sigma2, w);
        float min;
        const float d = rg_make_qkx3_quants(32, 15, x + 32 * ib, w, L, &min, Laux, -0.9f, 0.05f, 36, false);
        put_f16(b, d);
        put_f16(b + 2, -min);
        for (int j = 0; j < 16; j++) b[4 + j] = (uint8_t)(L[j] | L[j + 16] << 4);
    }
}

static void quantize_q5_0_impl(const float *x, uint8_t *b, int64_t n, const float *imatrix) {
    const float sigma2 = row_sigma2(x, n);
    float w[32];
    int8_t L[32];
    uint8_t q[32];
    for (int64_t ib = 0; ib < n / 32; ib++, b += RG_Q5_0_BYTES) {
        imatrix_weights(x + 32 * ib, imatrix + 32 * ib, sigma2, w);
        const float d = rg_make_qx_quants(32, 16, x + 32 * ib, L, w);
        put_f16(b, d);
        for (int j = 0; j < 32; j++) q[j] = (uint8_t)L[j];
        pack_q5(q, b + 6, b + 2);
    }
}

static void quantize_q5_1_impl(const float *x, uint8_t *b, int64_t n, const float *imatrix) {
    const float sigma2 = row_sigma2(x, n);
    float w[32];
    uint8_t L[32], Laux[32];
    for (int64_t ib = 0; ib < n / 32; ib++, b += RG_Q5_1_BYTES) {
        imatrix_weights(x + 32 * ib, imatrix + 32 * ib, sigma2, w);
        float min;
        const float d = rg_make_qkx3_quants(32, 31, x + 32 * ib, w, L, &min, Laux, -0.9f, 0.05f, 36, false);
        put_f16(b, d);
        put_f16(b + 2, -min);
        pack_q5(L, b + 8, b + 4);
    }
}

size_t rg_quantize_row_q4_0(const float *src, void *dst, int64_t n, const float *imatrix) {
    if (imatrix) {
        quantize_q4_0_impl(src, dst, n, imatrix);
    } else {
        uint8_t *b = dst;
        for (int64_t i = 0; i < n / 32; i++) q4_0_block_ref(src + 32 * i, b + RG_Q4_0_BYTES * i);
    }
    return (size_t)(n / 32) * RG_Q4_0_BYTES;
}

size_t rg_quantize_row_q4_1(const float *src, void *dst, int64_t n, const float *imatrix) {
    if (imatrix) {
        quantize_q4_1_impl(src, dst, n, imatrix);
    } else {
        uint8_t *b = dst;
        for (int64_t i = 0; i < n / 32; i++) q4_1_block_ref(src + 32 * i, b + RG_Q4_1_BYTES * i);
    }
    return (size_t)(n / 32) * RG_Q4_1_BYTES;
}

size_t rg_quantize_row_q5_0(const float *src, void *dst, int64_t n, const float *imatrix) {
    if (imatrix) {
        quantize_q5_0_impl(src, dst, n, imatrix);
    } else {
        uint8_t *b = dst;
        for (int64_t i = 0; i < n / 32; i++) q5_0_block_ref(src + 32 * i, b + RG_Q5_0_BYTES * i);
    }
    return (size_t)(n / 32) * RG_Q5_0_BYTES;
}

size_t rg_quantize_row_q5_1(const float *src, void *dst, int64_t n, const float *imatrix) {
    if (imatrix) {
        quantize_q5_1_impl(src, dst, n, imatrix);
    } else {
        uint8_t *b = dst;
        for (int64_t i = 0; i < n / 32; i++) q5_1_block_ref(src + 32 * i, b + RG_Q5_1_BYTES * i);
    }
    return (size_t)(n / 32) * RG_Q5_1_BYTES;
}

// Q8_0 ignores the imatrix (spec §5.6). The AVX2 kernel gives the reference's bytes.
size_t rg_quantize_row_q8_0(const float *src, void *dst, int64_t n, const float *imatrix) {
    (void)imatrix;
    if (use_avx2()) {
        rg_quantize_row_q8_0_avx2(src, dst, n);
        return (size_t)(n / RG_QK_LEGACY) * RG_Q8_0_BYTES;
    }
    return rg_quantize_row_q8_0_ref(src, dst, n);
}

// ===========================================================================
// Dot products. Per block the integer dot Σ q_x·q_y is exact; then, in f32,
// sumf += Σ·(d_x·d_y) (symmetric types), or sumf += (d_x·d_y)·Σ + m_x·s_y for
// the types with a min against Q8_1, whose s = d_y·Σq_y (spec §4.1).

void rg_vec_dot_q4_0_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++, x += RG_Q4_0_BYTES, y += RG_Q8_0_BYTES) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += ((x[2 + j] & 15) - 8) * (int8_t)y[2 + j];
            sumi += ((x[2 + j] >> 4) - 8) * (int8_t)y[2 + j + 16];
        }
        sumf += (float)sumi * (h2f(x) * h2f(y));
    }
    *s = sumf;
}

void rg_vec_dot_q4_1_q8_1_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++, x += RG_Q4_1_BYTES, y += RG_Q8_1_BYTES) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += (x[4 + j] & 15) * (int8_t)y[4 + j];
            sumi += (x[4 + j] >> 4) * (int8_t)y[4 + j + 16];
        }
        sumf += (h2f(x) * h2f(y)) * (float)sumi + h2f(x + 2) * h2f(y + 2);
    }
    *s = sumf;
}

void rg_vec_dot_q5_0_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++, x += RG_Q5_0_BYTES, y += RG_Q8_0_BYTES) {
        const uint32_t qh = rg_rd32(x + 2);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = (x[6 + j] & 15) | (int)((qh >> j) & 1) << 4;
            int q1 = (x[6 + j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            sumi += (q0 - 16) * (int8_t)y[2 + j] + (q1 - 16) * (int8_t)y[2 + j + 16];
        }
        sumf += (float)sumi * (h2f(x) * h2f(y));
    }
    *s = sumf;
}

void rg_vec_dot_q5_1_q8_1_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++, x += RG_Q5_1_BYTES, y += RG_Q8_1_BYTES) {
        const uint32_t qh = rg_rd32(x + 4);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = (x[8 + j] & 15) | (int)((qh >> j) & 1) << 4;
            int q1 = (x[8 + j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            sumi += q0 * (int8_t)y[4 + j] + q1 * (int8_t)y[4 + j + 16];
        }
        sumf += (h2f(x) * h2f(y)) * (float)sumi + h2f(x + 2) * h2f(y + 2);
    }
    *s = sumf;
}

void rg_vec_dot_q8_0_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++, x += RG_Q8_0_BYTES, y += RG_Q8_0_BYTES) {
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += (int8_t)x[2 + j] * (int8_t)y[2 + j];
        sumf += (float)sumi * (h2f(x) * h2f(y));
    }
    *s = sumf;
}

void rg_vec_dot_q4_0_q8_0(int64_t n, float *s, const void *x, const void *y) {
    if (use_avx2())
        rg_vec_dot_q4_0_q8_0_avx2(n, s, x, y);
    else
        rg_vec_dot_q4_0_q8_0_ref(n, s, x, y);
}
void rg_vec_dot_q4_1_q8_1(int64_t n, float *s, const void *x, const void *y) {
    if (use_avx2())
        rg_vec_dot_q4_1_q8_1_avx2(n, s, x, y);
    else
        rg_vec_dot_q4_1_q8_1_ref(n, s, x, y);
}
void rg_vec_dot_q5_0_q8_0(int64_t n, float *s, const void *x, const void *y) {
    if (use_avx2())
        rg_vec_dot_q5_0_q8_0_avx2(n, s, x, y);
    else
        rg_vec_dot_q5_0_q8_0_ref(n, s, x, y);
}
void rg_vec_dot_q5_1_q8_1(int64_t n, float *s, const void *x, const void *y) {
    if (use_avx2())
        rg_vec_dot_q5_1_q8_1_avx2(n, s, x, y);
    else
        rg_vec_dot_q5_1_q8_1_ref(n, s, x, y);
}
void rg_vec_dot_q8_0_q8_0(int64_t n, float *s, const void *x, const void *y) {
    if (use_avx2())
        rg_vec_dot_q8_0_q8_0_avx2(n, s, x, y);
    else
        rg_vec_dot_q8_0_q8_0_ref(n, s, x, y);
}
