// dequant.cuh - the device decoders of every tensor type the CPU dequantizes (F16, BF16, the
// legacy, K, IQ, ternary, FP4 and low-bit types): for each quantized type, the 32 elements of
// one 32-element group of a block, with the bits of the CPU's rg_dequant_row_<type>
// (src/tensor/quant/*.c, spec gguf-and-types.md §4). Each formula is evaluated as the CPU
// writes it, one IEEE operation at a time (nvcc builds with --fmad=false; nothing here fuses):
// the f16 scale widened exactly, the sub-block scale first, then the products and sums in the
// CPU's order. A sign applied as a negation equals the CPU's multiplication by -1 on every
// value but a NaN (whose payload a GPU does not keep anyway).
//
// Included by .cu files after cuda/cuda_common.cuh. The decoders have internal linkage (an
// anonymous namespace), so each file has its own copy; the host functions live in dequant.cu:
//   rg_cu_qtables_get      the context's device copies of the grids and value tables
//   rg_cu_dequant_supported whether the device decodes a type
//   rg_cu_dequant_rows     a [rows, K] slice of a weight decoded to F32 / BF16 / F16
// and in kernels rg_cu_decode32(type, ...) or, for one type known at compile time,
// rg_cu_decode32_t<TYPE>(...) (in-place decoders: no F32 copy of the weight).
#ifndef RG_CUDA_DEQUANT_CUH
#define RG_CUDA_DEQUANT_CUH

#include <stdint.h>

#include "cuda/cuda_common.cuh"

// The host functions are shared by the .cu files of one twin: renamed per twin (cuda_twin.h).
#define rg_cu_qtables_get RG_CUDA_TWIN(cu_qtables_get)
#define rg_cu_dequant_supported RG_CUDA_TWIN(cu_dequant_supported)
#define rg_cu_dequant_rows RG_CUDA_TWIN(cu_dequant_rows)

// Device copies of the constant tables the decoders read (one allocation per context, uploaded
// at the first use): the IQ grids of src/tensor/quant/quant_iq{1,2,3}_grids.c, IQ4_NL's and FP4's
// 16 values. Passed to kernels by value. (The IQ sign bytes are computed, not looked up:
// ksigns_iq2xs[i] = i | parity(i) << 7.)
struct rg_cu_qtables {
    const uint64_t *iq2xxs_grid;   // [256]
    const uint64_t *iq2xs_grid;    // [512]
    const uint64_t *iq2s_grid;     // [1024]
    const uint64_t *iq1s_grid;     // [2048], int8 elements
    const uint32_t *iq3xxs_grid;   // [256]
    const uint32_t *iq3s_grid;     // [512]
    const int8_t *kvalues_iq4nl;   // [16]
    const int8_t *kvalues_fp4;     // [16], E2M1 doubled
};
RG_KERNEL_POINTERS(rg_cu_qtables, iq2xxs_grid, iq2xs_grid, iq2s_grid, iq1s_grid, iq3xxs_grid, iq3s_grid, kvalues_iq4nl,
                   kvalues_fp4)

// Host: the context's tables (allocated and uploaded at the first call, stream-ordered; an
// error during a CUDA graph capture if they were never uploaded, since a capture may not
// allocate). n (may be NULL) names the node in errors.
rg_status rg_cu_qtables_get(rg_cuda_ctx *ctx, const rg_node *n, rg_cu_qtables *out, rg_error *err);

// Host: whether the device decodes `type`: F32, F16, BF16, Q4_0 Q4_1 Q5_0 Q5_1 Q8_0, Q2_K..Q6_K,
// IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S IQ4_NL IQ4_XS, TQ1_0 TQ2_0, MXFP4 NVFP4, Q1_0 Q2_0.
bool rg_cu_dequant_supported(uint32_t type);

// Host: decode elements [k0, k0 + K) of `rows` rows of a tensor of `type` (row r starts at
// (const char *)src + r * row_bytes; k0 and K multiples of the type's block size) into dst:
// element (r, k) at dst[r * ld + k] (ld in elements, >= K). dst_type RG_TYPE_F32 gives exactly
// the bits of the CPU's rg_dequant_row_<type>; RG_TYPE_BF16 / RG_TYPE_F16 give those F32 values
// rounded to nearest even (tensor/half_bits.h's conversions). Only queues work on ctx->stream.
// An unsupported type is an error naming the type and the node.
rg_status rg_cu_dequant_rows(rg_cuda_ctx *ctx, const rg_node *n, uint32_t type, const void *src, int64_t row_bytes,
                             int64_t rows, int64_t k0, int64_t K, uint32_t dst_type, void *dst, int64_t ld,
                             rg_error *err);

// Loops over a thread's 32 outputs are unrolled under nvcc, so the arrays stay in registers
// (the host compiler has no such pragma and needs none).
#ifdef __CUDACC__
#define RG_CU_UNROLL _Pragma("unroll")
#else
#define RG_CU_UNROLL
#endif

namespace {

// Elements and bytes per block of each quantized type (tensor/types.c's, as constants).
template <uint32_t TYPE>
struct rg_cu_qtype;
#define RG_CU_QTYPE(T, BLOCK, BYTES)                                         \
    template <>                                                              \
    struct rg_cu_qtype<T> {                                                  \
        static constexpr int block = BLOCK;      /* elements per block */   \
        static constexpr int bytes = BYTES;      /* bytes per block */      \
        static constexpr int groups = BLOCK / 32; /* 32-element groups */   \
    };
RG_CU_QTYPE(RG_TYPE_Q4_0, 32, 18)
RG_CU_QTYPE(RG_TYPE_Q4_1, 32, 20)
RG_CU_QTYPE(RG_TYPE_Q5_0, 32, 22)
RG_CU_QTYPE(RG_TYPE_Q5_1, 32, 24)
RG_CU_QTYPE(RG_TYPE_Q8_0, 32, 34)
RG_CU_QTYPE(RG_TYPE_Q2_K, 256, 84)
RG_CU_QTYPE(RG_TYPE_Q3_K, 256, 110)
RG_CU_QTYPE(RG_TYPE_Q4_K, 256, 144)
RG_CU_QTYPE(RG_TYPE_Q5_K, 256, 176)
RG_CU_QTYPE(RG_TYPE_Q6_K, 256, 210)
RG_CU_QTYPE(RG_TYPE_IQ2_XXS, 256, 66)
RG_CU_QTYPE(RG_TYPE_IQ2_XS, 256, 74)
RG_CU_QTYPE(RG_TYPE_IQ2_S, 256, 82)
RG_CU_QTYPE(RG_TYPE_IQ3_XXS, 256, 98)
RG_CU_QTYPE(RG_TYPE_IQ3_S, 256, 110)
RG_CU_QTYPE(RG_TYPE_IQ1_S, 256, 50)
RG_CU_QTYPE(RG_TYPE_IQ1_M, 256, 56)
RG_CU_QTYPE(RG_TYPE_IQ4_NL, 32, 18)
RG_CU_QTYPE(RG_TYPE_IQ4_XS, 256, 136)
RG_CU_QTYPE(RG_TYPE_TQ1_0, 256, 54)
RG_CU_QTYPE(RG_TYPE_TQ2_0, 256, 66)
RG_CU_QTYPE(RG_TYPE_MXFP4, 32, 17)
RG_CU_QTYPE(RG_TYPE_NVFP4, 64, 36)
RG_CU_QTYPE(RG_TYPE_Q1_0, 128, 18)
RG_CU_QTYPE(RG_TYPE_Q2_0, 64, 18)
#undef RG_CU_QTYPE

// Every quantized type the device decodes, for code that instantiates one kernel per type:
// X(TYPE) for each. (F32, F16 and BF16 are decoded elementwise, not in 32-element groups.)
#define RG_CU_QTYPES(X)                                                                                       \
    X(RG_TYPE_Q4_0) X(RG_TYPE_Q4_1) X(RG_TYPE_Q5_0) X(RG_TYPE_Q5_1) X(RG_TYPE_Q8_0) X(RG_TYPE_Q2_K)          \
    X(RG_TYPE_Q3_K) X(RG_TYPE_Q4_K) X(RG_TYPE_Q5_K) X(RG_TYPE_Q6_K) X(RG_TYPE_IQ2_XXS) X(RG_TYPE_IQ2_XS)    \
    X(RG_TYPE_IQ2_S) X(RG_TYPE_IQ3_XXS) X(RG_TYPE_IQ3_S) X(RG_TYPE_IQ1_S) X(RG_TYPE_IQ1_M) X(RG_TYPE_IQ4_NL) \
    X(RG_TYPE_IQ4_XS) X(RG_TYPE_TQ1_0) X(RG_TYPE_TQ2_0) X(RG_TYPE_MXFP4) X(RG_TYPE_NVFP4) X(RG_TYPE_Q1_0)    \
    X(RG_TYPE_Q2_0)

// ---------------------------------------------------------------------------
// Field access (blocks are byte arrays: no alignment is assumed) and the scale formats.

__device__ inline uint32_t rg_cu_rd16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
__device__ inline uint32_t rg_cu_rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

// binary16 -> binary32, exact, as tensor/half_bits.h's rg_f32_bits_from_f16 (a NaN made quiet
// with its payload kept); a subnormal half m 2^-24 is the exact product (float)m * 2^-24.
__device__ inline float rg_cu_f16(uint32_t h) {
    const uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 31) return __uint_as_float(sign | 0x7F800000u | (m << 13) | (m ? 0x00400000u : 0u));
    if (e != 0) return __uint_as_float(sign | ((e + 127 - 15) << 23) | (m << 13));
    return __uint_as_float(sign | __float_as_uint((float)m * 5.9604644775390625e-8f));
}
__device__ inline float rg_cu_bf16(uint32_t h) { return __uint_as_float(h << 16); }

// The f16 field at p.
__device__ inline float rg_cu_f16_at(const uint8_t *p) { return rg_cu_f16(rg_cu_rd16(p)); }

// ksigns_iq2xs[i]: 7 sign bits and their parity as the eighth.
__device__ inline uint32_t rg_cu_ksigns(uint32_t i) { return i | ((uint32_t)__popc(i) & 1u) << 7; }

// v, or -v when bit j of signs is set (the CPU multiplies by -1.0f: the same bits).
__device__ inline float rg_cu_sign(float v, uint32_t signs, int j) { return (signs >> j) & 1u ? -v : v; }

// Byte j of a grid entry, unsigned and signed.
__device__ inline float rg_cu_grid_u8(uint64_t e, int j) { return (float)(uint32_t)((e >> (8 * j)) & 0xFF); }
__device__ inline float rg_cu_grid_i8(uint64_t e, int j) { return (float)(int8_t)(uint8_t)((e >> (8 * j)) & 0xFF); }

// ---------------------------------------------------------------------------
// The decoders: rg_cu_decode32_t<TYPE>(block, g, tab, y) writes elements 32 g .. 32 g + 31 of
// the block at `block` to y[0..31] (g < block / 32).

template <uint32_t TYPE>
__device__ inline void rg_cu_decode32_t(const uint8_t *b, int g, const rg_cu_qtables &tab, float *y);

// Q4_0, 18 bytes: d f16 @0 | qs[16] @2. y = (q - 8) d; element j low nibble, j + 16 high.
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_Q4_0>(const uint8_t *b, int, const rg_cu_qtables &, float *y) {
    const float d = rg_cu_f16_at(b);
RG_CU_UNROLL
    for (int j = 0; j < 16; j++) {
        const int q = b[2 + j];
        y[j] = (float)((q & 15) - 8) * d;
        y[j + 16] = (float)((q >> 4) - 8) * d;
    }
}

// Q4_1, 20 bytes: d f16 @0 | m f16 @2 | qs[16] @4. y = q d + m.
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_Q4_1>(const uint8_t *b, int, const rg_cu_qtables &, float *y) {
    const float d = rg_cu_f16_at(b), m = rg_cu_f16_at(b + 2);
RG_CU_UNROLL
    for (int j = 0; j < 16; j++) {
        const int q = b[4 + j];
        y[j] = (float)(q & 15) * d + m;
        y[j + 16] = (float)(q >> 4) * d + m;
    }
}

// Q5_0, 22 bytes: d f16 @0 | qh u32 @2 | qs[16] @6. y = (q - 16) d; bit i of qh is bit 4 of element i.
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_Q5_0>(const uint8_t *b, int, const rg_cu_qtables &, float *y) {
    const float d = rg_cu_f16_at(b);
    const uint32_t qh = rg_cu_rd32(b + 2);
RG_CU_UNROLL
    for (int j = 0; j < 16; j++) {
        const int q = b[6 + j];
        const int q0 = (q & 15) | (int)((qh >> j) & 1) << 4, q1 = (q >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
        y[j] = (float)(q0 - 16) * d;
        y[j + 16] = (float)(q1 - 16) * d;
    }
}

// Q5_1, 24 bytes: d f16 @0 | m f16 @2 | qh u32 @4 | qs[16] @8. y = q d + m.
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_Q5_1>(const uint8_t *b, int, const rg_cu_qtables &, float *y) {
    const float d = rg_cu_f16_at(b), m = rg_cu_f16_at(b + 2);
    const uint32_t qh = rg_cu_rd32(b + 4);
RG_CU_UNROLL
    for (int j = 0; j < 16; j++) {
        const int q = b[8 + j];
        const int q0 = (q & 15) | (int)((qh >> j) & 1) << 4, q1 = (q >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
        y[j] = (float)q0 * d + m;
        y[j + 16] = (float)q1 * d + m;
    }
}

// Q8_0, 34 bytes: d f16 @0 | qs[32] int8 @2. y = q d.
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_Q8_0>(const uint8_t *b, int, const rg_cu_qtables &, float *y) {
    const float d = rg_cu_f16_at(b);
RG_CU_UNROLL
    for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
}

// Q4_K / Q5_K scale and min of sub-block s (0..7) from the 12 packed bytes q (spec §4.2).
__device__ inline void rg_cu_k4_scale_min(int s, const uint8_t *q, int *sc, int *m) {
    if (s < 4) {
        *sc = q[s] & 63;
        *m = q[s + 4] & 63;
    } else {
        *sc = (q[s + 4] & 15) | ((q[s - 4] >> 6) << 4);
        *m = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
    }
}

// Q3_K's 6-bit stored scale of sub-block j (0..15) from the 12 packed bytes q.
__device__ inline int rg_cu_k3_scale(int j, const uint8_t *q) {
    const int lo = j < 8 ? q[j] & 15 : q[j - 8] >> 4;
    const int hi = (q[8 + j % 4] >> (2 * (j / 4))) & 3;
    return lo | hi << 4;
}

// Q2_K, 84 bytes: scales[16] @0 (scale | min << 4) | qs[64] @16 | d f16 @80 | dmin f16 @82.
// Element e = 32 g + l (g = 4 h + j): q = (qs[32 h + l] >> 2 j) & 3, sub-block e / 16.
// y = (d sc) q - dmin m.
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_Q2_K>(const uint8_t *b, int g, const rg_cu_qtables &, float *y) {
    const float d = rg_cu_f16_at(b + 80), dmin = rg_cu_f16_at(b + 82);
    const int h = g / 4, shift = 2 * (g % 4);
RG_CU_UNROLL
    for (int half = 0; half < 2; half++) {
        const int s = b[2 * g + half];
        const float dl = d * (float)(s & 15), ml = dmin * (float)(s >> 4);
RG_CU_UNROLL
        for (int i = 0; i < 16; i++) {
            const int l = 16 * half + i;
            y[l] = dl * (float)((b[16 + 32 * h + l] >> shift) & 3) - ml;
        }
    }
}

// Q3_K, 110 bytes: hmask[32] @0 | qs[64] @32 | scales[12] @96 | d f16 @108.
// Q = q2 | hb << 2, hb = (hmask[l] >> g) & 1; y = (d (S - 32)) (Q - 4).
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_Q3_K>(const uint8_t *b, int g, const rg_cu_qtables &, float *y) {
    const float d = rg_cu_f16_at(b + 108);
    const int h = g / 4, shift = 2 * (g % 4);
RG_CU_UNROLL
    for (int half = 0; half < 2; half++) {
        const float dl = d * (float)(rg_cu_k3_scale(2 * g + half, b + 96) - 32);
RG_CU_UNROLL
        for (int i = 0; i < 16; i++) {
            const int l = 16 * half + i;
            const int q2 = (b[32 + 32 * h + l] >> shift) & 3, hb = (b[l] >> g) & 1;
            y[l] = dl * (float)((q2 | hb << 2) - 4);
        }
    }
}

// Q4_K, 144 bytes: d f16 @0 | dmin f16 @2 | scales[12] @4 | qs[128] @16. Group g is sub-block g:
// q = (qs[32 (g / 2) + l] >> 4 (g & 1)) & 15, y = (d sc) q - dmin m.
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_Q4_K>(const uint8_t *b, int g, const rg_cu_qtables &, float *y) {
    const float d = rg_cu_f16_at(b), dmin = rg_cu_f16_at(b + 2);
    int sc, m;
    rg_cu_k4_scale_min(g, b + 4, &sc, &m);
    const float d1 = d * (float)sc, m1 = dmin * (float)m;
    const uint8_t *q = b + 16 + 32 * (g / 2);
    const int shift = 4 * (g & 1);
RG_CU_UNROLL
    for (int l = 0; l < 32; l++) y[l] = d1 * (float)((q[l] >> shift) & 15) - m1;
}

// Q5_K, 176 bytes: d f16 @0 | dmin f16 @2 | scales[12] @4 | qh[32] @16 | qs[128] @48.
// Low 4 bits as Q4_K, bit 4 = (qh[l] >> g) & 1.
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_Q5_K>(const uint8_t *b, int g, const rg_cu_qtables &, float *y) {
    const float d = rg_cu_f16_at(b), dmin = rg_cu_f16_at(b + 2);
    int sc, m;
    rg_cu_k4_scale_min(g, b + 4, &sc, &m);
    const float d1 = d * (float)sc, m1 = dmin * (float)m;
    const uint8_t *q = b + 48 + 32 * (g / 2);
    const int shift = 4 * (g & 1);
RG_CU_UNROLL
    for (int l = 0; l < 32; l++) {
        const int v = ((q[l] >> shift) & 15) | ((b[16 + l] >> g) & 1) << 4;
        y[l] = d1 * (float)v - m1;
    }
}

// Q6_K, 210 bytes: ql[128] @0 | qh[64] @128 | scales[16] int8 @192 | d f16 @208. Element
// e = 32 g + l (g = 4 h + k): low4 = (ql[64 h + l + 32 (k & 1)] >> 4 (k >> 1)) & 15,
// high2 = (qh[32 h + l] >> 2 k) & 3; y = (d scales[e / 16]) ((low4 | high2 << 4) - 32).
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_Q6_K>(const uint8_t *b, int g, const rg_cu_qtables &, float *y) {
    const float d = rg_cu_f16_at(b + 208);
    const int h = g / 4, k = g % 4;
    const uint8_t *ql = b + 64 * h + 32 * (k & 1), *qh = b + 128 + 32 * h;
    const int lshift = 4 * (k >> 1), hshift = 2 * k;
RG_CU_UNROLL
    for (int half = 0; half < 2; half++) {
        const float dl = d * (float)(int8_t)b[192 + 2 * g + half];
RG_CU_UNROLL
        for (int i = 0; i < 16; i++) {
            const int l = 16 * half + i;
            const int q = ((ql[l] >> lshift) & 15) | ((qh[l] >> hshift) & 3) << 4;
            y[l] = dl * (float)(q - 32);
        }
    }
}

// Eight elements y[j] = (db g_j) (+-1) of an 8-byte grid entry and a sign byte.
__device__ inline void rg_cu_put8(float *y, float db, uint64_t e, uint32_t signs) {
RG_CU_UNROLL
    for (int j = 0; j < 8; j++) y[j] = rg_cu_sign(db * rg_cu_grid_u8(e, j), signs, j);
}

// IQ2_XXS, 66 bytes: d f16 @0, per sub-block g two u32 a0 @2+8g, a1 @6+8g.
// db = (d (0.5 + (a1 >> 28))) 0.25; group l: grid[(a0 >> 8 l) & 255], signs (a1 >> 7 l) & 127.
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_IQ2_XXS>(const uint8_t *b, int g, const rg_cu_qtables &tab, float *y) {
    const float d = rg_cu_f16_at(b);
    const uint32_t a0 = rg_cu_rd32(b + 2 + 8 * g), a1 = rg_cu_rd32(b + 6 + 8 * g);
    const float db = d * (0.5f + (float)(a1 >> 28)) * 0.25f;
RG_CU_UNROLL
    for (int l = 0; l < 4; l++)
        rg_cu_put8(y + 8 * l, db, tab.iq2xxs_grid[(a0 >> (8 * l)) & 255], rg_cu_ksigns((a1 >> (7 * l)) & 127));
}

// IQ2_XS, 74 bytes: d f16 @0, qs[32] u16 @2, scales[8] @66. Entry v: grid[v & 511], signs v >> 9.
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_IQ2_XS>(const uint8_t *b, int g, const rg_cu_qtables &tab, float *y) {
    const float d = rg_cu_f16_at(b);
    const uint32_t sc = b[66 + g];
    const float db0 = d * (0.5f + (float)(sc & 15)) * 0.25f, db1 = d * (0.5f + (float)(sc >> 4)) * 0.25f;
RG_CU_UNROLL
    for (int l = 0; l < 4; l++) {
        const uint32_t v = rg_cu_rd16(b + 2 + 2 * (4 * g + l));
        rg_cu_put8(y + 8 * l, l < 2 ? db0 : db1, tab.iq2xs_grid[v & 511], rg_cu_ksigns(v >> 9));
    }
}

// IQ2_S, 82 bytes: d f16 @0, qs[32] @2, signs[32] @34, qh[8] @66, scales[8] @74.
// Entry qs[4 g + l] | ((qh[g] >> 2 l) & 3) << 8, sign byte signs[4 g + l].
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_IQ2_S>(const uint8_t *b, int g, const rg_cu_qtables &tab, float *y) {
    const float d = rg_cu_f16_at(b);
    const uint32_t sc = b[74 + g], qh = b[66 + g];
    const float db0 = d * (0.5f + (float)(sc & 15)) * 0.25f, db1 = d * (0.5f + (float)(sc >> 4)) * 0.25f;
RG_CU_UNROLL
    for (int l = 0; l < 4; l++)
        rg_cu_put8(y + 8 * l, l < 2 ? db0 : db1, tab.iq2s_grid[b[2 + 4 * g + l] | ((qh >> (2 * l)) & 3) << 8],
                   b[34 + 4 * g + l]);
}

// Two 4-byte grid entries and a sign byte: eight elements (db g_j) (+-1).
__device__ inline void rg_cu_put4x2(float *y, float db, uint32_t g1, uint32_t g2, uint32_t signs) {
RG_CU_UNROLL
    for (int j = 0; j < 4; j++) {
        y[j] = rg_cu_sign(db * rg_cu_grid_u8(g1, j), signs, j);
        y[j + 4] = rg_cu_sign(db * rg_cu_grid_u8(g2, j), signs, j + 4);
    }
}

// IQ3_XXS, 98 bytes: d f16 @0, qs[64] @2 (grid indices), 8 u32 @66 (signs and scale).
// db = (d (0.5 + (a >> 28))) 0.5.
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_IQ3_XXS>(const uint8_t *b, int g, const rg_cu_qtables &tab, float *y) {
    const float d = rg_cu_f16_at(b);
    const uint32_t a = rg_cu_rd32(b + 66 + 4 * g);
    const float db = d * (0.5f + (float)(a >> 28)) * 0.5f;
RG_CU_UNROLL
    for (int l = 0; l < 4; l++)
        rg_cu_put4x2(y + 8 * l, db, tab.iq3xxs_grid[b[2 + 8 * g + 2 * l]], tab.iq3xxs_grid[b[2 + 8 * g + 2 * l + 1]],
                     rg_cu_ksigns((a >> (7 * l)) & 127));
}

// IQ3_S, 110 bytes: d f16 @0, qs[64] @2, qh[8] @66, signs[32] @74, scales[4] @106.
// db = d (1 + 2 sc); entry k of group l: qs[8 g + k] | ((qh[g] >> k) & 1) << 8 (k = 2 l, 2 l + 1).
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_IQ3_S>(const uint8_t *b, int g, const rg_cu_qtables &tab, float *y) {
    const float d = rg_cu_f16_at(b);
    const int sc = (b[106 + g / 2] >> (4 * (g % 2))) & 15;
    const float db = d * (float)(1 + 2 * sc);
    const uint32_t qh = b[66 + g];
RG_CU_UNROLL
    for (int l = 0; l < 4; l++) {
        const uint32_t g1 = tab.iq3s_grid[b[2 + 8 * g + 2 * l] | ((qh >> (2 * l)) & 1) << 8];
        const uint32_t g2 = tab.iq3s_grid[b[2 + 8 * g + 2 * l + 1] | ((qh >> (2 * l + 1)) & 1) << 8];
        rg_cu_put4x2(y + 8 * l, db, g1, g2, b[74 + 4 * g + l]);
    }
}

// IQ1_S, 50 bytes: d f16 @0, qs[32] @2, qh[8] u16 @34. dl = d (2 ((h >> 12) & 7) + 1),
// y = dl (g_j + delta), delta = -+0.125 by bit 15 of h; entry qs[4 g + l] | ((h >> 3 l) & 7) << 8.
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_IQ1_S>(const uint8_t *b, int g, const rg_cu_qtables &tab, float *y) {
    const float d = rg_cu_f16_at(b);
    const uint32_t h = rg_cu_rd16(b + 34 + 2 * g);
    const float dl = d * (float)(2 * ((h >> 12) & 7) + 1);
    const float delta = (h & 0x8000u) ? -0.125f : 0.125f;
RG_CU_UNROLL
    for (int l = 0; l < 4; l++) {
        const uint64_t e = tab.iq1s_grid[b[2 + 4 * g + l] | ((h >> (3 * l)) & 7) << 8];
RG_CU_UNROLL
        for (int j = 0; j < 8; j++) y[8 * l + j] = dl * (rg_cu_grid_i8(e, j) + delta);
    }
}

// IQ1_M, 56 bytes: qs[32] @0, qh[16] @32, scales[8] @48 (4 u16); the f16 super-scale is the
// top nibbles of the four scale words. Group l: nibble (qh[2 g + l / 2] >> 4 (l % 2)) & 15,
// entry qs[4 g + l] | (nib & 7) << 8, delta by bit 3; scale 2 ((w >> sh) & 7) + 1.
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_IQ1_M>(const uint8_t *b, int g, const rg_cu_qtables &tab, float *y) {
    const uint32_t s0 = rg_cu_rd16(b + 48), s1 = rg_cu_rd16(b + 50), s2 = rg_cu_rd16(b + 52), s3 = rg_cu_rd16(b + 54);
    const float d = rg_cu_f16((s0 >> 12) | (s1 >> 12) << 4 | (s2 >> 12) << 8 | (s3 >> 12) << 12);
    const uint32_t w = rg_cu_rd16(b + 48 + 2 * (g / 2));
    const int sh = 6 * (g % 2);
    const float dl0 = d * (float)(2 * ((w >> sh) & 7) + 1), dl1 = d * (float)(2 * ((w >> (sh + 3)) & 7) + 1);
RG_CU_UNROLL
    for (int l = 0; l < 4; l++) {
        const uint32_t nib = (b[32 + 2 * g + l / 2] >> (4 * (l % 2))) & 15;
        const uint64_t e = tab.iq1s_grid[b[4 * g + l] | (nib & 7) << 8];
        const float delta = (nib & 8) ? -0.125f : 0.125f;
        const float dl = l < 2 ? dl0 : dl1;
RG_CU_UNROLL
        for (int j = 0; j < 8; j++) y[8 * l + j] = dl * (rg_cu_grid_i8(e, j) + delta);
    }
}

// IQ4_NL, 18 bytes: d f16 @0, qs[16] @2. y = d kvalues[q], nibbles as Q4_0.
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_IQ4_NL>(const uint8_t *b, int, const rg_cu_qtables &tab, float *y) {
    const float d = rg_cu_f16_at(b);
RG_CU_UNROLL
    for (int j = 0; j < 16; j++) {
        const int q = b[2 + j];
        y[j] = d * (float)tab.kvalues_iq4nl[q & 15];
        y[j + 16] = d * (float)tab.kvalues_iq4nl[q >> 4];
    }
}

// IQ4_XS, 136 bytes: d f16 @0, scales_h u16 @2, scales_l[4] @4, qs[128] @8.
// dl = d (ls - 32), ls = ((scales_l[g / 2] >> 4 (g % 2)) & 15) | ((scales_h >> 2 g) & 3) << 4.
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_IQ4_XS>(const uint8_t *b, int g, const rg_cu_qtables &tab, float *y) {
    const float d = rg_cu_f16_at(b);
    const int ls = ((b[4 + g / 2] >> (4 * (g % 2))) & 15) | (int)((rg_cu_rd16(b + 2) >> (2 * g)) & 3) << 4;
    const float dl = d * (float)(ls - 32);
    const uint8_t *qs = b + 8 + 16 * g;
RG_CU_UNROLL
    for (int j = 0; j < 16; j++) {
        const int q = qs[j];
        y[j] = dl * (float)tab.kvalues_iq4nl[q & 15];
        y[j + 16] = dl * (float)tab.kvalues_iq4nl[q >> 4];
    }
}

// TQ1_0's trit n (0 = most significant) of byte v: ((v 3^n mod 256) 3) >> 8.
__device__ inline int rg_cu_trit(uint32_t v, int n) {
    const uint32_t pow3 = n == 0 ? 1 : n == 1 ? 3 : n == 2 ? 9 : n == 3 ? 27 : 81;
    return (int)((((v * pow3) & 255u) * 3u) >> 8);
}

// TQ1_0, 54 bytes: qs[48] @0, qh[4] @48, d f16 @52; y = (t - 1) d. Elements 0..159: trit
// e / 32 of qs[e % 32]; 160..239: trit (e - 160) / 16 of qs[32 + e % 16]; 240..255: trit
// (e - 240) / 4 of qh[e % 4].
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_TQ1_0>(const uint8_t *b, int g, const rg_cu_qtables &, float *y) {
    const float d = rg_cu_f16_at(b + 52);
    if (g < 5) {
RG_CU_UNROLL
        for (int m = 0; m < 32; m++) y[m] = (float)(rg_cu_trit(b[m], g) - 1) * d;
    } else if (g < 7) {
        const int n = 2 * (g - 5);
RG_CU_UNROLL
        for (int m = 0; m < 16; m++) {
            y[m] = (float)(rg_cu_trit(b[32 + m], n) - 1) * d;
            y[16 + m] = (float)(rg_cu_trit(b[32 + m], n + 1) - 1) * d;
        }
    } else {
RG_CU_UNROLL
        for (int m = 0; m < 16; m++) y[m] = (float)(rg_cu_trit(b[32 + m], 4) - 1) * d;
RG_CU_UNROLL
        for (int i = 0; i < 16; i++) y[16 + i] = (float)(rg_cu_trit(b[48 + i % 4], i / 4) - 1) * d;
    }
}

// TQ2_0, 66 bytes: qs[64] @0, d f16 @64. Element 32 g + m (g = 4 h + k): bits 2 k of qs[32 h + m].
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_TQ2_0>(const uint8_t *b, int g, const rg_cu_qtables &, float *y) {
    const float d = rg_cu_f16_at(b + 64);
    const uint8_t *q = b + 32 * (g / 4);
    const int shift = 2 * (g % 4);
RG_CU_UNROLL
    for (int m = 0; m < 32; m++) y[m] = (float)(((q[m] >> shift) & 3) - 1) * d;
}

// MXFP4, 17 bytes: e (E8M0) @0, qs[16] @1. y = kvalues_fp4[q] 2^(e - 128) (half the E8M0
// scale; e = 0, 1 give f32 subnormals); nibbles as Q4_0.
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_MXFP4>(const uint8_t *b, int, const rg_cu_qtables &tab, float *y) {
    const uint32_t e = b[0];
    const float d = __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
RG_CU_UNROLL
    for (int j = 0; j < 16; j++) {
        const int q = b[1 + j];
        y[j] = (float)tab.kvalues_fp4[q & 15] * d;
        y[j + 16] = (float)tab.kvalues_fp4[q >> 4] * d;
    }
}

// The UE4M3 byte u as f32 (bit 7 ignored; 0 and 0x7F read as 0), spec §3.6.
__device__ inline float rg_cu_ue4m3(uint32_t u) {
    if (u == 0 || u == 0x7F) return 0.0f;
    const uint32_t exp = (u >> 3) & 15, man = u & 7;
    if (exp == 0) return (float)man * 0.001953125f;  // man 2^-9
    return __uint_as_float((exp - 7 + 127) << 23 | man << 20);
}

// NVFP4, 36 bytes: d[4] (UE4M3) @0, qs[32] @4. Sub-block s (16 elements) has scale d[s] / 2:
// low nibble of qs[8 s + j] is element 16 s + j, the high one 16 s + 8 + j. Group g: s = 2 g, 2 g + 1.
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_NVFP4>(const uint8_t *b, int g, const rg_cu_qtables &tab, float *y) {
RG_CU_UNROLL
    for (int i = 0; i < 2; i++) {
        const int s = 2 * g + i;
        const float d = rg_cu_ue4m3(b[s]) * 0.5f;
        const uint8_t *qs = b + 4 + 8 * s;
RG_CU_UNROLL
        for (int j = 0; j < 8; j++) {
            const int q = qs[j];
            y[16 * i + j] = (float)tab.kvalues_fp4[q & 15] * d;
            y[16 * i + 8 + j] = (float)tab.kvalues_fp4[q >> 4] * d;
        }
    }
}

// Q1_0, 18 bytes (128 elements): d f16 @0, qs[16] @2; bit j % 8 of qs[j / 8]: 1 -> d, 0 -> -d.
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_Q1_0>(const uint8_t *b, int g, const rg_cu_qtables &, float *y) {
    const float d = rg_cu_f16_at(b);
    const uint32_t bits = rg_cu_rd32(b + 2 + 4 * g);
RG_CU_UNROLL
    for (int j = 0; j < 32; j++) y[j] = (bits >> j) & 1u ? d : -d;
}

// Q2_0, 18 bytes (64 elements): d f16 @0, qs[16] @2; q = (qs[j / 4] >> 2 (j % 4)) & 3, y = (q - 1) d.
template <>
__device__ inline void rg_cu_decode32_t<RG_TYPE_Q2_0>(const uint8_t *b, int g, const rg_cu_qtables &, float *y) {
    const float d = rg_cu_f16_at(b);
    const uint8_t *q = b + 2 + 8 * g;
RG_CU_UNROLL
    for (int j = 0; j < 32; j++) y[j] = (float)(((q[j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
}

// The 32 elements [32 g, 32 g + 32) of one block of `type` (g < block / 32), the bits of the
// CPU's dequantization, into out[32]: for in-place decoders whose type is known only at run
// time. An unsupported type gives NaNs (the host refuses it before any launch).
__device__ inline void rg_cu_decode32(uint32_t type, const uint8_t *block, int g, const rg_cu_qtables &tab,
                                      float out[32]) {
    switch (type) {
#define RG_CU_DECODE_CASE(T)                          \
    case T:                                           \
        rg_cu_decode32_t<T>(block, g, tab, out);      \
        return;
        RG_CU_QTYPES(RG_CU_DECODE_CASE)
#undef RG_CU_DECODE_CASE
    default:
        for (int j = 0; j < 32; j++) out[j] = __uint_as_float(0x7FC00000u);
    }
}

}  // namespace

#endif
