// quant_legacy_k.h - internal to the legacy (Q4_0..Q8_1) and K-quant (Q2_K..Q8_K)
// families: block sizes, the scalar helpers with ggml's exact x86 semantics,
// the search helpers shared by both families, and the AVX2 kernels.
//
// Files: quant_legacy.c / quant_legacy_avx2.c (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, and
// the Q8_0/Q8_1 activation kernels), quant_k.c / quant_k_avx2.c (Q2_K..Q6_K and
// the search helpers of spec §5.2), quant_q8.c (Q8_1 and Q8_K, the activation
// types). Block layouts are in spec §4.1 / §4.2 and are read as byte arrays.
#ifndef RG_QUANT_LEGACY_K_H
#define RG_QUANT_LEGACY_K_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

// Elements per block and bytes per block (spec §2).
enum {
    RG_QK_LEGACY = 32,  // Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1
    RG_QK_K = 256,  // super-block of the K-quants and Q8_K
    RG_Q4_0_BYTES = 18,  // d f16 | qs[16]
    RG_Q4_1_BYTES = 20,  // d f16 | m f16 | qs[16]
    RG_Q5_0_BYTES = 22,  // d f16 | qh u32 | qs[16]
    RG_Q5_1_BYTES = 24,  // d f16 | m f16 | qh u32 | qs[16]
    RG_Q8_0_BYTES = 34,  // d f16 | qs[32] int8
    RG_Q8_1_BYTES = 36,  // d f16 | s f16 | qs[32] int8
    RG_Q2_K_BYTES = 84,  // scales[16] | qs[64] | d f16 | dmin f16
    RG_Q3_K_BYTES = 110,  // hmask[32] | qs[64] | scales[12] | d f16
    RG_Q4_K_BYTES = 144,  // d f16 | dmin f16 | scales[12] | qs[128]
    RG_Q5_K_BYTES = 176,  // d f16 | dmin f16 | scales[12] | qh[32] | qs[128]
    RG_Q6_K_BYTES = 210,  // ql[128] | qh[64] | scales[16] int8 | d f16
    RG_Q8_K_BYTES = 292,  // d f32 | qs[256] int8 | bsums[16] int16
};

// ---------------------------------------------------------------------------
// Scalar helpers with ggml's semantics (spec §0), free of undefined behaviour
// on any input (NaN, Inf, huge values).

// nearest_int: round to nearest, ties to even, by adding 1.5·2^23 in f32 and
// reading the low mantissa bits. Valid for |v| < 2^22; outside that (and for
// NaN) it returns the same garbage as ggml, without undefined behaviour.
static inline int rg_nearest_int(float v) {
    float t = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &t, sizeof i);
    return (i & 0x007FFFFF) - 0x00400000;
}

// A C cast float -> int as x86-64 does it (CVTTSS2SI): truncation toward zero,
// and INT32_MIN for NaN and for anything outside the int32 range.
static inline int32_t rg_cvtt_i32(float v) {
    if (v >= -2147483648.0f && v < 2147483648.0f) return (int32_t)v;
    return INT32_MIN;
}

// A C cast float -> int8_t / uint8_t as x86-64 compilers emit it: CVTTSS2SI,
// then the low byte. ggml's reference quantizers store such casts directly.
static inline int rg_cvtt_i8(float v) { return (int8_t)(uint8_t)((uint32_t)rg_cvtt_i32(v) & 0xFF); }
static inline int rg_cvtt_u8(float v) { return (int)((uint32_t)rg_cvtt_i32(v) & 0xFF); }

static inline float rg_f32_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint32_t rg_bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

// Q4_K / Q5_K scale-and-min packing (spec §4.2): sub-block s (0..7) of a
// 12-byte scales array -> 6-bit scale *sc and 6-bit min *m.
static inline void rg_k4_scale_min(int s, const uint8_t *q, int *sc, int *m) {
    if (s < 4) {
        *sc = q[s] & 63;
        *m = q[s + 4] & 63;
    } else {
        *sc = (q[s + 4] & 15) | ((q[s - 4] >> 6) << 4);
        *m = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
    }
}

// Q3_K scale packing (spec §4.2): sub-block j (0..15) -> 6-bit stored value S_j
// (the signed scale is S_j - 32).
static inline int rg_k3_scale(int j, const uint8_t *q) {
    int lo = j < 8 ? q[j] & 15 : q[j - 8] >> 4;
    int hi = (q[8 + j % 4] >> (2 * (j / 4))) & 3;
    return lo | hi << 4;
}

// ---------------------------------------------------------------------------
// Search helpers of spec §5.2 (quant_k.c). Every sum is f32, in index order.

// Symmetric scale search; L gets levels 0..2·nmax-1 (signed level + nmax).
// qw NULL: weights x² (rmse_type 1, the only variant used).
float rg_make_qx_quants(int n, int nmax, const float *x, int8_t *L, const float *qw);
// Symmetric search with coordinate descent, weights x² (Q3_K without imatrix).
float rg_make_q3_quants(int n, int nmax, const float *x, int8_t *L);
// Asymmetric (scale, min) search. weights NULL means x² (make_qkx3_quants); the
// qkx2 variant requires weights and treats max == min as degenerate, qkx3 max <= min.
float rg_make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                          uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad);
float rg_make_qkx3_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                          uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad);
// Non-negative values onto 0..nmax with weights qw (sub-block scales and mins).
float rg_make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *qw);

// ---------------------------------------------------------------------------
// Scalar references of the activation quantizers (their dispatched versions
// use AVX2 kernels that give the same bytes; tests compare the two).
size_t rg_quantize_row_q8_0_ref(const float *src, void *dst, int64_t n);
size_t rg_quantize_row_q8_1_ref(const float *src, void *dst, int64_t n);
size_t rg_quantize_row_q8_K_ref(const float *src, void *dst, int64_t n);
// One Q8_0-style block of 32 (quant_legacy.c): stores fp16(d) at dd and the
// quants at qs, returns the f32 d in *d_out and the sum of the quants.
int rg_q8_block_ref(const float *x, uint8_t *dd, uint8_t *qs, float *d_out);

// ---------------------------------------------------------------------------
// AVX2 kernels. When the *_avx2.c file is built without -mavx2 they are stubs
// that run the reference, and the matching *_built constant is 0. Callers
// dispatch only when *_built && rg_cpu_has_avx2().

extern const int rg_quant_legacy_avx2_built;
void rg_dequant_row_q4_0_avx2(const void *src, float *dst, int64_t n);
void rg_dequant_row_q4_1_avx2(const void *src, float *dst, int64_t n);
void rg_dequant_row_q5_0_avx2(const void *src, float *dst, int64_t n);
void rg_dequant_row_q5_1_avx2(const void *src, float *dst, int64_t n);
void rg_dequant_row_q8_0_avx2(const void *src, float *dst, int64_t n);
void rg_vec_dot_q4_0_q8_0_avx2(int64_t n, float *s, const void *x, const void *y);
void rg_vec_dot_q4_1_q8_1_avx2(int64_t n, float *s, const void *x, const void *y);
void rg_vec_dot_q5_0_q8_0_avx2(int64_t n, float *s, const void *x, const void *y);
void rg_vec_dot_q5_1_q8_1_avx2(int64_t n, float *s, const void *x, const void *y);
void rg_vec_dot_q8_0_q8_0_avx2(int64_t n, float *s, const void *x, const void *y);
void rg_quantize_row_q8_0_avx2(const float *src, void *dst, int64_t n);
void rg_quantize_row_q8_1_avx2(const float *src, void *dst, int64_t n);

extern const int rg_quant_k_avx2_built;
void rg_dequant_row_q2_K_avx2(const void *src, float *dst, int64_t n);
void rg_dequant_row_q3_K_avx2(const void *src, float *dst, int64_t n);
void rg_dequant_row_q4_K_avx2(const void *src, float *dst, int64_t n);
void rg_dequant_row_q5_K_avx2(const void *src, float *dst, int64_t n);
void rg_dequant_row_q6_K_avx2(const void *src, float *dst, int64_t n);
void rg_dequant_row_q8_K_avx2(const void *src, float *dst, int64_t n);
void rg_vec_dot_q2_K_q8_k_avx2(int64_t n, float *s, const void *x, const void *y);
void rg_vec_dot_q3_K_q8_k_avx2(int64_t n, float *s, const void *x, const void *y);
void rg_vec_dot_q4_K_q8_k_avx2(int64_t n, float *s, const void *x, const void *y);
void rg_vec_dot_q5_K_q8_k_avx2(int64_t n, float *s, const void *x, const void *y);
void rg_vec_dot_q6_K_q8_k_avx2(int64_t n, float *s, const void *x, const void *y);
void rg_quantize_row_q8_K_avx2(const float *src, void *dst, int64_t n);

// The exported functions of the table (one list for every family).
#include "tensor/quant/quant_funcs.h"

#endif
