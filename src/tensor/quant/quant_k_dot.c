// quant_k_dot.c - the K-quants' scalar dot products against Q8_K (quant.h), and the
// dispatch to quant_k_avx2.c's. Split from quant_k.c (the dequantizers and quantizers),
// whose bit-exactness rules hold here too: every f32 operation in the spec's order, no
// fused multiply-add (the build uses -ffp-contract=off, spec §5.9).
#include "base/cpu.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"
#include "tensor/quant/quant_legacy_k.h"

static inline float h2f(const uint8_t *p) { return rg_fp16_to_fp32(rg_rd16(p)); }
static inline float rd_f32(const uint8_t *p) { return rg_f32_of(rg_rd32(p)); }

static inline int use_avx2(void) { return rg_quant_k_avx2_built && rg_cpu_has_avx2(); }

// ===========================================================================
// Dot products against Q8_K (292 bytes: d f32 @0 | qs[256] @4 | bsums[16] i16 @260).
// Per super-block the integer sums are exact; the f32 step is
//   sumf += (d_x·d_y)·isum − (dmin_x·d_y)·summs
// where summs = Σ m_s·(bsums of sub-block s) for the types with mins. The AVX2
// kernels compute the same integers, so they give the same bits.

static inline int bsum16(const uint8_t *y, int g) { return (int16_t)rg_rd16(y + 260 + 2 * g); }

void rg_vec_dot_q2_K_q8_k_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / RG_QK_K; i++, x += RG_Q2_K_BYTES, y += RG_Q8_K_BYTES) {
        int summs = 0, isum = 0;
        for (int j = 0; j < 16; j++) summs += (x[j] >> 4) * bsum16(y, j);
        for (int j = 0; j < 16; j++) {
            int sumi = 0;
            for (int l = 0; l < 16; l++) {
                const int e = 16 * j + l, h = e / 128, sh = 2 * ((e % 128) / 32);
                sumi += ((x[16 + 32 * h + e % 32] >> sh) & 3) * (int8_t)y[4 + e];
            }
            isum += (x[j] & 15) * sumi;
        }
        const float dy = rd_f32(y);
        const float dall = dy * h2f(x + 80), dmin = dy * h2f(x + 82);
        sumf += dall * (float)isum - dmin * (float)summs;
    }
    *s = sumf;
}

void rg_vec_dot_q3_K_q8_k_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / RG_QK_K; i++, x += RG_Q3_K_BYTES, y += RG_Q8_K_BYTES) {
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            int sumi = 0;
            for (int l = 0; l < 16; l++) {
                const int e = 16 * j + l, h = e / 128, sh = 2 * ((e % 128) / 32);
                const int q = ((x[32 + 32 * h + e % 32] >> sh) & 3) | ((x[e % 32] >> (e / 32)) & 1) << 2;
                sumi += (q - 4) * (int8_t)y[4 + e];
            }
            isum += (rg_k3_scale(j, x + 96) - 32) * sumi;
        }
        sumf += (rd_f32(y) * h2f(x + 108)) * (float)isum;
    }
    *s = sumf;
}

// Q4_K and Q5_K share everything but where the 4 low bits and the 5th bit live.
static void vec_dot_q45_K_ref(int64_t n, float *s, const uint8_t *x, const uint8_t *y, int five) {
    const int bytes = five ? RG_Q5_K_BYTES : RG_Q4_K_BYTES;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / RG_QK_K; i++, x += bytes, y += RG_Q8_K_BYTES) {
        const uint8_t *qs = x + (five ? 48 : 16), *qh = x + 16;
        int summs = 0, isum = 0;
        for (int j = 0; j < 8; j++) {
            int sc, m;
            rg_k4_scale_min(j, x + 4, &sc, &m);
            summs += m * (bsum16(y, 2 * j) + bsum16(y, 2 * j + 1));
            int sumi = 0;
            for (int l = 0; l < 32; l++) {
                int q = (qs[32 * (j / 2) + l] >> (4 * (j & 1))) & 15;
                if (five) q |= ((qh[l] >> j) & 1) << 4;
                sumi += q * (int8_t)y[4 + 32 * j + l];
            }
            isum += sc * sumi;
        }
        const float dy = rd_f32(y);
        const float d = dy * h2f(x), dmin = dy * h2f(x + 2);
        sumf += d * (float)isum - dmin * (float)summs;
    }
    *s = sumf;
}

void rg_vec_dot_q4_K_q8_k_ref(int64_t n, float *s, const void *x, const void *y) { vec_dot_q45_K_ref(n, s, x, y, 0); }
void rg_vec_dot_q5_K_q8_k_ref(int64_t n, float *s, const void *x, const void *y) { vec_dot_q45_K_ref(n, s, x, y, 1); }

void rg_vec_dot_q6_K_q8_k_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / RG_QK_K; i++, x += RG_Q6_K_BYTES, y += RG_Q8_K_BYTES) {
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            int sumi = 0;
            for (int l = 0; l < 16; l++) {
                const int e = 16 * j + l, h = e / 128, k = (e % 128) / 32, r = e % 32;
                const int lo = (x[64 * h + r + 32 * (k & 1)] >> (4 * (k >> 1))) & 15;
                const int hi = (x[128 + 32 * h + r] >> (2 * k)) & 3;
                sumi += ((lo | hi << 4) - 32) * (int8_t)y[4 + e];
            }
            isum += (int8_t)x[192 + j] * sumi;
        }
        sumf += (rd_f32(y) * h2f(x + 208)) * (float)isum;
    }
    *s = sumf;
}

void rg_vec_dot_q2_K_q8_k(int64_t n, float *s, const void *x, const void *y) {
    if (use_avx2())
        rg_vec_dot_q2_K_q8_k_avx2(n, s, x, y);
    else
        rg_vec_dot_q2_K_q8_k_ref(n, s, x, y);
}
void rg_vec_dot_q3_K_q8_k(int64_t n, float *s, const void *x, const void *y) {
    if (use_avx2())
        rg_vec_dot_q3_K_q8_k_avx2(n, s, x, y);
    else
        rg_vec_dot_q3_K_q8_k_ref(n, s, x, y);
}
void rg_vec_dot_q4_K_q8_k(int64_t n, float *s, const void *x, const void *y) {
    if (use_avx2())
        rg_vec_dot_q4_K_q8_k_avx2(n, s, x, y);
    else
        rg_vec_dot_q4_K_q8_k_ref(n, s, x, y);
}
void rg_vec_dot_q5_K_q8_k(int64_t n, float *s, const void *x, const void *y) {
    if (use_avx2())
        rg_vec_dot_q5_K_q8_k_avx2(n, s, x, y);
    else
        rg_vec_dot_q5_K_q8_k_ref(n, s, x, y);
}
void rg_vec_dot_q6_K_q8_k(int64_t n, float *s, const void *x, const void *y) {
    if (use_avx2())
        rg_vec_dot_q6_K_q8_k_avx2(n, s, x, y);
    else
        rg_vec_dot_q6_K_q8_k_ref(n, s, x, y);
}
