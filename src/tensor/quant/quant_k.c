// quant_k.c - the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K: scalar dequantizers
// (spec §4.2), the search helpers (§5.2), the reference quantizers (§5.3, §5.4,
// and §5.6 with an importance matrix), and the dispatch to quant_k_avx2.c; the
// dot products against Q8_K are in quant_k_dot.c.
//
// Bit-exactness with ggml depends on doing every f32 operation in the order the
// spec writes it: sums accumulate in index order, `w·x·l` is ((w·x)·l), and no
// multiply-add is fused (the build uses -ffp-contract=off, spec §5.9). Whether
// a later step uses the rounded fp16 d or the f32 d is noted at each step.
#include <math.h>

#include "base/cpu.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"
#include "tensor/quant/quant_legacy_k.h"

static inline float h2f(const uint8_t *p) { return rg_fp16_to_fp32(rg_rd16(p)); }
static inline void put_f16(uint8_t *p, float v) { rg_wr16(p, rg_fp32_to_fp16(v)); }
static inline float rd_f32(const uint8_t *p) { return rg_f32_of(rg_rd32(p)); }

static inline int use_avx2(void) { return rg_quant_k_avx2_built && rg_cpu_has_avx2(); }

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }
static inline int iclamp(int v, int lo, int hi) { return imax(lo, imin(hi, v)); }

// Groups smaller than this are treated as all zero (ggml's GROUP_MAX_EPS).
#define GROUP_MAX_EPS 1e-15f

// ===========================================================================
// Search helpers (spec §5.2)

// make_qx_quants, rmse_type 1: symmetric scale search over 19 trial scales.
// Weights are qw[i], or x[i]² when qw is NULL. L[i] = level + nmax.
float rg_make_qx_quants(int n, int nmax, const float *x, int8_t *L, const float *qw) {
    float max = 0.0f, amax = 0.0f;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.0f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = iclamp(rg_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        const float w = qw ? qw[i] : x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0.0f;
        for (int i = 0; i < n; i++) {
            const int l = iclamp(rg_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = qw ? qw[i] : x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) L[i] = (int8_t)(nmax + iclamp(rg_nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

// make_q3_quants with do_rmse: the first guess of make_qx_quants (signed L,
// weights x²), then up to 5 passes of coordinate descent on single levels.
float rg_make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0.0f, amax = 0.0f;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.0f;
    }
    const float iscale = (float)-nmax / max;
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = iclamp(rg_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0.0f) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                const int new_l = iclamp(rg_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// make_qkx2_quants / make_qkx3_quants: asymmetric (scale, min) search. The two
// differ only in the default weights (x², qkx3 only) and the degenerate test
// (max == min for qkx2, max <= min for qkx3); `qkx3` selects.
static float make_qkx_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                             uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad, bool qkx3) {
#define W(i) (weights ? weights[i] : x[i] * x[i])
    float min = x[0], max = x[0];
    float sum_w = W(0);
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = W(i);
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0.0f) min = 0.0f;
    if (qkx3 ? max <= min : max == min) {
        for (int i = 0; i < n; i++) L[i] = 0;
        *the_min = -min;
        return 0.0f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1.0f / iscale;
    float best_error = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = rg_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)iclamp(l, 0, nmax);
        float diff = scale * (float)L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += W(i) * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
        for (int i = 0; i < n; i++) {
            const int l = iclamp(rg_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            const float w = W(i);
            sum_l += w * (float)l;
            sum_l2 += w * (float)l * (float)l;
            sum_xl += w * (float)l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0.0f) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0.0f) {
                this_min = 0.0f;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0.0f;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += W(i) * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; i++) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
#undef W
}

float rg_make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                          uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    return make_qkx_quants(n, nmax, x, weights, L, the_min, Laux, rmin, rdelta, nstep, use_mad, false);
}

float rg_make_qkx3_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                          uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    return make_qkx_quants(n, nmax, x, weights, L, the_min, Laux, rmin, rdelta, nstep, use_mad, true);
}

// make_qp_quants: non-negative x onto 0..nmax. L is uint8_t as in ggml, so a
// (never expected) negative level wraps the same way.
float rg_make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *qw) {
    float max = 0.0f;
    for (int i = 0; i < n; i++) max = max > x[i] ? max : x[i];
    if (max < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.0f;
    }
    float iscale = (float)nmax / max;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)rg_nearest_int(iscale * x[i]);
    const float scale = 1.0f / iscale;
    float best_mse = 0.0f;
    for (int i = 0; i < n; i++) {
        const float diff = x[i] - scale * (float)L[i];
        best_mse += qw[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * (float)is + (float)nmax) / max;
        const float scale_is = 1.0f / iscale_is;
        float mse = 0.0f;
        for (int i = 0; i < n; i++) {
            const int l = imin(nmax, rg_nearest_int(iscale_is * x[i]));
            const float diff = x[i] - scale_is * (float)l;
            mse += qw[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = imin(nmax, rg_nearest_int(iscale * x[i]));
        L[i] = (uint8_t)l;
        sumlx += qw[i] * x[i] * (float)l;
        suml2 += qw[i] * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = qw[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            float sl2 = suml2 - w * (float)L[i] * (float)L[i];
            if (slx > 0.0f && sl2 > 0.0f) {
                const int new_l = imin(nmax, rg_nearest_int(x[i] * sl2 / slx));
                if (new_l != L[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// ===========================================================================
// Dequantization (spec §4.2). Each formula is evaluated as written:
// y = (d·sc)·q − (dmin·m), so the AVX2 kernels can give the same bits.

// Q2_K, 84 bytes: scales[16] @0 (scale nibble | min nibble << 4) | qs[64] @16 |
// d f16 @80 | dmin f16 @82. Element e = 128h + 32j + l: q = (qs[32h + l] >> 2j) & 3,
// sub-block e/16.
void rg_dequant_row_q2_K_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / RG_QK_K; i++, b += RG_Q2_K_BYTES, dst += RG_QK_K) {
        const float d = h2f(b + 80), dmin = h2f(b + 82);
        for (int e = 0; e < 256; e++) {
            const int h = e / 128, j = (e % 128) / 32, l = e % 32, s = e / 16;
            const int q = (b[16 + 32 * h + l] >> (2 * j)) & 3;
            dst[e] = (d * (float)(b[s] & 15)) * (float)q - dmin * (float)(b[s] >> 4);
        }
    }
}

// Q3_K, 110 bytes: hmask[32] @0 | qs[64] @32 | scales[12] @96 | d f16 @108.
// Q = q2 | hb << 2 with hb = (hmask[e % 32] >> (e / 32)) & 1; y = (d·(S − 32))·(Q − 4).
void rg_dequant_row_q3_K_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / RG_QK_K; i++, b += RG_Q3_K_BYTES, dst += RG_QK_K) {
        const float d = h2f(b + 108);
        for (int e = 0; e < 256; e++) {
            const int h = e / 128, j = (e % 128) / 32, l = e % 32;
            const int q2 = (b[32 + 32 * h + l] >> (2 * j)) & 3;
            const int hb = (b[e % 32] >> (e / 32)) & 1;
            const int S = rg_k3_scale(e / 16, b + 96);
            dst[e] = (d * (float)(S - 32)) * (float)((q2 | hb << 2) - 4);
        }
    }
}

// Q4_K, 144 bytes: d f16 @0 | dmin f16 @2 | scales[12] @4 | qs[128] @16.
// Element e = 64c + r: q = r < 32 ? qs[32c + r] & 15 : qs[32c + r − 32] >> 4; sub-block e/32.
void rg_dequant_row_q4_K_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / RG_QK_K; i++, b += RG_Q4_K_BYTES, dst += RG_QK_K) {
        const float d = h2f(b), dmin = h2f(b + 2);
        for (int s = 0; s < 8; s++) {
            int sc, m;
            rg_k4_scale_min(s, b + 4, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            const uint8_t *q = b + 16 + 32 * (s / 2);
            const int shift = 4 * (s & 1);
            for (int l = 0; l < 32; l++) dst[32 * s + l] = d1 * (float)((q[l] >> shift) & 15) - m1;
        }
    }
}

// Q5_K, 176 bytes: d f16 @0 | dmin f16 @2 | scales[12] @4 | qh[32] @16 | qs[128] @48.
// Low 4 bits as Q4_K, bit 4 = (qh[e % 32] >> (e / 32)) & 1.
void rg_dequant_row_q5_K_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / RG_QK_K; i++, b += RG_Q5_K_BYTES, dst += RG_QK_K) {
        const float d = h2f(b), dmin = h2f(b + 2);
        const uint8_t *qh = b + 16;
        for (int s = 0; s < 8; s++) {
            int sc, m;
            rg_k4_scale_min(s, b + 4, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            const uint8_t *q = b + 48 + 32 * (s / 2);
            const int shift = 4 * (s & 1);
            for (int l = 0; l < 32; l++) {
                const int v = ((q[l] >> shift) & 15) | ((qh[l] >> s) & 1) << 4;
                dst[32 * s + l] = d1 * (float)v - m1;
            }
        }
    }
}

// Q6_K, 210 bytes: ql[128] @0 | qh[64] @128 | scales[16] int8 @192 | d f16 @208.
// Element e = 128h + 32k + l: low4 = (ql[64h + l + 32(k & 1)] >> 4(k >> 1)) & 15,
// high2 = (qh[32h + l] >> 2k) & 3; y = (d·scales[e/16])·((low4 | high2 << 4) − 32).
void rg_dequant_row_q6_K_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / RG_QK_K; i++, b += RG_Q6_K_BYTES, dst += RG_QK_K) {
        const float d = h2f(b + 208);
        for (int e = 0; e < 256; e++) {
            const int h = e / 128, k = (e % 128) / 32, l = e % 32;
            const int lo = (b[64 * h + l + 32 * (k & 1)] >> (4 * (k >> 1))) & 15;
            const int hi = (b[128 + 32 * h + l] >> (2 * k)) & 3;
            dst[e] = (d * (float)(int8_t)b[192 + e / 16]) * (float)((lo | hi << 4) - 32);
        }
    }
}

void rg_dequant_row_q2_K(const void *src, float *dst, int64_t n) {
    if (use_avx2())
        rg_dequant_row_q2_K_avx2(src, dst, n);
    else
        rg_dequant_row_q2_K_ref(src, dst, n);
}
void rg_dequant_row_q3_K(const void *src, float *dst, int64_t n) {
    if (use_avx2())
        rg_dequant_row_q3_K_avx2(src, dst, n);
    else
        rg_dequant_row_q3_K_ref(src, dst, n);
}
void rg_dequant_row_q4_K(const void *src, float *dst, int64_t n) {
    if (use_avx2())
        rg_dequant_row_q4_K_avx2(src, dst, n);
    else
        rg_dequant_row_q4_K_ref(src, dst, n);
}
void rg_dequant_row_q5_K(const void *src, float *dst, int64_t n) {
    if (use_avx2())
        rg_dequant_row_q5_K_avx2(src, dst, n);
    else
        rg_dequant_row_q5_K_ref(src, dst, n);
}
void rg_dequant_row_q6_K(const void *src, float *dst, int64_t n) {
    if (use_avx2())
        rg_dequant_row_q6_K_avx2(src, dst, n);
    else
        rg_dequant_row_q6_K_ref(src, dst, n);
}

// ===========================================================================
// Packing shared by the quantizers.

// 2-bit levels L[256] (0..3) into qs[64]: byte 32h + l holds elements
// 128h + l, +32, +64, +96 in bits 0-1, 2-3, 4-5, 6-7 (Q2_K qs, Q3_K low bits).
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < 256; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
}

// Q4_K/Q5_K: 6-bit scale ls and min lm of sub-block j into scales[12] (spec
// §4.2). Called for j = 0..7 in order: j >= 4 ORs into bytes set by j < 4.
static void pack_k4_scale(uint8_t *sc, int j, uint8_t ls, uint8_t lm) {
    if (j < 4) {
        sc[j] = ls;
        sc[j + 4] = lm;
    } else {
        sc[j + 4] = (uint8_t)((ls & 15) | (lm & 15) << 4);
        sc[j - 4] = (uint8_t)(sc[j - 4] | (ls >> 4) << 6);
        sc[j] = (uint8_t)(sc[j] | (lm >> 4) << 6);
    }
}

// Q3_K: 6-bit stored scale l (0..63) of sub-block j into scales[12], which must
// start zeroed (spec §4.2).
static void pack_k3_scale(uint8_t *sc, int j, int l) {
    if (j < 8)
        sc[j] = (uint8_t)(l & 15);
    else
        sc[j - 8] = (uint8_t)(sc[j - 8] | (l & 15) << 4);
    sc[8 + j % 4] = (uint8_t)(sc[8 + j % 4] | ((l >> 4) & 3) << (2 * (j / 4)));
}

// ===========================================================================
// Q2_K (spec §5.4, §5.6)

// Super-block step shared by both paths: from the 16-element levels L (already
// computed), the stored scales byte array, d and dmin: requantize with the
// rounded fp16 d / dmin, skipping sub-blocks whose dj is 0, then pack.
static void q2_K_finish(const float *x, uint8_t *b, uint8_t *L) {
    const float d = h2f(b + 80), dmin = h2f(b + 82);
    for (int j = 0; j < 16; j++) {
        const float dj = d * (float)(b[j] & 15);
        if (dj == 0.0f) continue;
        const float dm = dmin * (float)(b[j] >> 4);
        for (int ii = 0; ii < 16; ii++)
            L[16 * j + ii] = (uint8_t)iclamp(rg_nearest_int((x[16 * j + ii] + dm) / dj), 0, 3);
    }
    pack_2bit(L, b + 16);
}

static void q2_K_block_ref(const float *x, uint8_t *b) {
    uint8_t L[256], Laux[16];
    float w[16], mins[16], scales[16];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 16; j++) {
        for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
        scales[j] = rg_make_qkx2_quants(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0.0f) {
        const float iscale = 15.0f / max_scale;
        for (int j = 0; j < 16; j++) b[j] = (uint8_t)rg_nearest_int(iscale * scales[j]);
        put_f16(b + 80, max_scale / 15.0f);
    } else {
        for (int j = 0; j < 16; j++) b[j] = 0;
        put_f16(b + 80, 0.0f);
    }
    if (max_min > 0.0f) {
        const float iscale = 15.0f / max_min;
        for (int j = 0; j < 16; j++) b[j] = (uint8_t)(b[j] | (unsigned)rg_nearest_int(iscale * mins[j]) << 4);
        put_f16(b + 82, max_min / 15.0f);
    } else {
        put_f16(b + 82, 0.0f);
    }
    q2_K_finish(x, b, L);
}

static void q2_K_block_impl(const float *x, uint8_t *b, const float *qw) {
    uint8_t L[256], Laux[16], Ls[16], Lm[16];
    float w[16], mins[16], scales[16], sw[16];
    float sumx2 = 0.0f;
    for (int j = 0; j < 256; j++) sumx2 += x[j] * x[j];
    const float sigma2 = sumx2 / 256.0f;
    for (int j = 0; j < 16; j++) {
        sw[j] = 0.0f;
        for (int l = 0; l < 16; l++) w[l] = qw[16 * j + l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
        for (int l = 0; l < 16; l++) sw[j] += w[l];
        scales[j] = rg_make_qkx3_quants(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36, false);
    }
    const float dm = rg_make_qp_quants(16, 15, scales, Ls, sw);
    const float mm = rg_make_qp_quants(16, 15, mins, Lm, sw);
    put_f16(b + 80, dm);
    put_f16(b + 82, mm);
    for (int j = 0; j < 16; j++) b[j] = (uint8_t)(Ls[j] | Lm[j] << 4);
    q2_K_finish(x, b, L);
}

// ===========================================================================
// Q3_K (spec §5.4, §5.6)

// Requantize with the stored fp16 d and 6-bit scales (skipping dj == 0), then
// split levels 0..7 into the hmask bit (level > 3) and the 2 low bits.
static void q3_K_finish(const float *x, uint8_t *b, int8_t *Ls) {
    uint8_t L[256];
    const float d = h2f(b + 108);
    for (int i = 0; i < 256; i++) L[i] = (uint8_t)Ls[i];
    for (int j = 0; j < 16; j++) {
        const float dj = d * (float)(rg_k3_scale(j, b + 96) - 32);
        if (dj == 0.0f) continue;
        for (int ii = 0; ii < 16; ii++)
            L[16 * j + ii] = (uint8_t)(iclamp(rg_nearest_int(x[16 * j + ii] / dj), -4, 3) + 4);
    }
    memset(b, 0, 32);  // hmask: bit e/32 of byte e%32
    for (int e = 0; e < 256; e++) {
        if (L[e] > 3) {
            b[e % 32] = (uint8_t)(b[e % 32] | 1u << (e / 32));
            L[e] = (uint8_t)(L[e] - 4);
        }
    }
    pack_2bit(L, b + 32);
}

static void q3_K_block_ref(const float *x, uint8_t *b) {
    int8_t L[256];
    float scales[16];
    float max_scale = 0.0f, amax = 0.0f;
    for (int j = 0; j < 16; j++) {
        scales[j] = rg_make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
        const float a = fabsf(scales[j]);
        if (a > amax) {
            amax = a;
            max_scale = scales[j];
        }
    }
    memset(b + 96, 0, 12);
    if (max_scale != 0.0f) {
        const float iscale = -32.0f / max_scale;
        for (int j = 0; j < 16; j++) {
            // ggml stores nearest_int(...) in an int8_t before clamping.
            const int l = (int8_t)(uint8_t)((unsigned)rg_nearest_int(iscale * scales[j]) & 0xFF);
            pack_k3_scale(b + 96, j, iclamp(l, -32, 31) + 32);
        }
        put_f16(b + 108, 1.0f / iscale);
    } else {
        put_f16(b + 108, 0.0f);
    }
    q3_K_finish(x, b, L);
}

static void q3_K_block_impl(const float *x, uint8_t *b, const float *qw) {
    int8_t L[256], Ls[16];
    float scales[16], w[16], sw[16];
    float sumx2 = 0.0f;
    for (int j = 0; j < 256; j++) sumx2 += x[j] * x[j];
    const float sigma2 = 2.0f * sumx2 / 256.0f;
    for (int j = 0; j < 16; j++) {
        for (int l = 0; l < 16; l++) w[l] = qw[16 * j + l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
        float sumw = 0.0f;
        for (int l = 0; l < 16; l++) sumw += w[l];
        sw[j] = sumw;
        scales[j] = rg_make_qx_quants(16, 4, x + 16 * j, L + 16 * j, w);
    }
    memset(b + 96, 0, 12);
    // The levels of this search are the 6-bit codes (l + 32) directly.
    const float d_block = rg_make_qx_quants(16, 32, scales, Ls, sw);
    for (int j = 0; j < 16; j++) pack_k3_scale(b + 96, j, (uint8_t)Ls[j]);
    put_f16(b + 108, d_block);
    q3_K_finish(x, b, L);
}

// ===========================================================================
// Q4_K and Q5_K (spec §5.3, §5.6); nmax = 15 or 31.

// Requantize with the stored fp16 d, dmin and 6-bit codes (keeping the search's
// levels where dj == 0), then pack the 4 low bits (and the qh bit for Q5_K).
static void q45_K_finish(const float *x, uint8_t *b, uint8_t *L, int nmax) {
    const float d = h2f(b), dmin = h2f(b + 2);
    for (int j = 0; j < 8; j++) {
        int sc, m;
        rg_k4_scale_min(j, b + 4, &sc, &m);
        const float dj = d * (float)sc;
        if (dj == 0.0f) continue;
        const float dm = dmin * (float)m;
        for (int ii = 0; ii < 32; ii++)
            L[32 * j + ii] = (uint8_t)iclamp(rg_nearest_int((x[32 * j + ii] + dm) / dj), 0, nmax);
    }
    if (nmax == 15) {
        uint8_t *q = b + 16;  // 4 chunks of 64: low nibbles = first 32, high = next 32
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) q[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + l + 32] << 4);
    } else {
        uint8_t *qh = b + 16, *ql = b + 48;
        memset(qh, 0, 32);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                int l1 = L[64 * c + l], l2 = L[64 * c + l + 32];
                if (l1 > 15) l1 -= 16, qh[l] = (uint8_t)(qh[l] | 1u << (2 * c));
                if (l2 > 15) l2 -= 16, qh[l] = (uint8_t)(qh[l] | 2u << (2 * c));
                ql[32 * c + l] = (uint8_t)(l1 | l2 << 4);
            }
        }
    }
}

static void q45_K_block_ref(const float *x, uint8_t *b, int nmax) {
    uint8_t L[256], Laux[32];
    float w[32], mins[8], scales[8];
    float max_scale = 0.0f, max_min = 0.0f;
    const float rmin = nmax == 15 ? -1.0f : -0.5f;
    const int nstep = nmax == 15 ? 20 : 15;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0.0f;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32.0f);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = rg_make_qkx2_quants(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    for (int j = 0; j < 8; j++) {
        // ggml keeps these in uint8_t before min(63, .), so a negative wraps high.
        uint8_t ls = (uint8_t)rg_nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)rg_nearest_int(inv_min * mins[j]);
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        pack_k4_scale(b + 4, j, ls, lm);
    }
    put_f16(b, max_scale / 63.0f);
    put_f16(b + 2, max_min / 63.0f);
    q45_K_finish(x, b, L, nmax);
}

static void q45_K_block_impl(const float *x, uint8_t *b, const float *qw, int nmax) {
    uint8_t L[256], Laux[32], Ls[8], Lm[8];
    float w[32], sw[8], mins[8], scales[8];
    float sum_x2 = 0.0f;
    for (int l = 0; l < 256; l++) sum_x2 += x[l] * x[l];
    const float sigma2 = 2.0f * sum_x2 / 256.0f;
    for (int j = 0; j < 8; j++) {
        for (int l = 0; l < 32; l++) w[l] = qw[32 * j + l] * sqrtf(sigma2 + x[32 * j + l] * x[32 * j + l]);
        float sumw = 0.0f;
        for (int l = 0; l < 32; l++) sumw += w[l];
        sw[j] = sumw;
        scales[j] = rg_make_qkx3_quants(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36, false);
    }
    const float d_block = rg_make_qp_quants(8, 63, scales, Ls, sw);
    const float m_block = rg_make_qp_quants(8, 63, mins, Lm, sw);
    for (int j = 0; j < 8; j++) pack_k4_scale(b + 4, j, Ls[j], Lm[j]);
    put_f16(b, d_block);
    put_f16(b + 2, m_block);
    q45_K_finish(x, b, L, nmax);
}

// ===========================================================================
// Q6_K (spec §5.4; with an imatrix the raw weights go to make_qx_quants, §5.6)

static void q6_K_block(const float *x, uint8_t *b, const float *qw) {
    int8_t L[256];
    float scales[16];
    float max_scale = 0.0f, max_abs_scale = 0.0f;
    for (int ib = 0; ib < 16; ib++) {
        scales[ib] = rg_make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, qw ? qw + 16 * ib : NULL);
        const float a = fabsf(scales[ib]);
        if (a > max_abs_scale) {
            max_abs_scale = a;
            max_scale = scales[ib];
        }
    }
    if (max_abs_scale < GROUP_MAX_EPS) {
        memset(b, 0, RG_Q6_K_BYTES);
        return;
    }
    const float iscale = -128.0f / max_scale;
    put_f16(b + 208, 1.0f / iscale);
    for (int ib = 0; ib < 16; ib++) b[192 + ib] = (uint8_t)imin(127, rg_nearest_int(iscale * scales[ib]));
    const float d = h2f(b + 208);
    for (int j = 0; j < 16; j++) {
        const float dj = d * (float)(int8_t)b[192 + j];
        if (dj == 0.0f) continue;
        for (int ii = 0; ii < 16; ii++)
            L[16 * j + ii] = (int8_t)(iclamp(rg_nearest_int(x[16 * j + ii] / dj), -32, 31) + 32);
    }
    uint8_t *ql = b, *qh = b + 128;
    for (int h = 0; h < 2; h++, ql += 64, qh += 32) {
        const int8_t *Lh = L + 128 * h;
        for (int l = 0; l < 32; l++) {
            const int q1 = Lh[l] & 15, q2 = Lh[l + 32] & 15, q3 = Lh[l + 64] & 15, q4 = Lh[l + 96] & 15;
            ql[l] = (uint8_t)(q1 | q3 << 4);
            ql[l + 32] = (uint8_t)(q2 | q4 << 4);
            qh[l] = (uint8_t)((Lh[l] >> 4) | (Lh[l + 32] >> 4) << 2 | (Lh[l + 64] >> 4) << 4 | (Lh[l + 96] >> 4) << 6);
        }
    }
}

// ===========================================================================
// Row quantizers: the reference path without an imatrix, the weighted one with.
// imatrix holds one weight per element of the row.

size_t rg_quantize_row_q2_K(const float *src, void *dst, int64_t n, const float *imatrix) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / RG_QK_K; i++, b += RG_Q2_K_BYTES) {
        if (imatrix)
            q2_K_block_impl(src + RG_QK_K * i, b, imatrix + RG_QK_K * i);
        else
            q2_K_block_ref(src + RG_QK_K * i, b);
    }
    return (size_t)(n / RG_QK_K) * RG_Q2_K_BYTES;
}

size_t rg_quantize_row_q3_K(const float *src, void *dst, int64_t n, const float *imatrix) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / RG_QK_K; i++, b += RG_Q3_K_BYTES) {
        if (imatrix)
            q3_K_block_impl(src + RG_QK_K * i, b, imatrix + RG_QK_K * i);
        else
            q3_K_block_ref(src + RG_QK_K * i, b);
    }
    return (size_t)(n / RG_QK_K) * RG_Q3_K_BYTES;
}

size_t rg_quantize_row_q4_K(const float *src, void *dst, int64_t n, const float *imatrix) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / RG_QK_K; i++, b += RG_Q4_K_BYTES) {
        if (imatrix)
            q45_K_block_impl(src + RG_QK_K * i, b, imatrix + RG_QK_K * i, 15);
        else
            q45_K_block_ref(src + RG_QK_K * i, b, 15);
    }
    return (size_t)(n / RG_QK_K) * RG_Q4_K_BYTES;
}

size_t rg_quantize_row_q5_K(const float *src, void *dst, int64_t n, const float *imatrix) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / RG_QK_K; i++, b += RG_Q5_K_BYTES) {
        if (imatrix)
            q45_K_block_impl(src + RG_QK_K * i, b, imatrix + RG_QK_K * i, 31);
        else
            q45_K_block_ref(src + RG_QK_K * i, b, 31);
    }
    return (size_t)(n / RG_QK_K) * RG_Q5_K_BYTES;
}

size_t rg_quantize_row_q6_K(const float *src, void *dst, int64_t n, const float *imatrix) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / RG_QK_K; i++, b += RG_Q6_K_BYTES)
        q6_K_block(src + RG_QK_K * i, b, imatrix ? imatrix + RG_QK_K * i : NULL);
    return (size_t)(n / RG_QK_K) * RG_Q6_K_BYTES;
}
