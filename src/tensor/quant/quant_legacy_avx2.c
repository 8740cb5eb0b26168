// quant_legacy_avx2.c - AVX2/F16C/FMA kernels for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0
// (dequantize, dot with Q8_0/Q8_1) and for the Q8_0/Q8_1 activation quantizers.
//
// The build compiles every *_avx2.c with -mavx2 -mf16c -mfma (and, like every
// file, -ffp-contract=off, so separate multiply and add intrinsics stay separate).
// quant_legacy.c calls these only when rg_cpu_has_avx2().
//
// Guarantees (checked by tests/test_quant_legacy_k.c):
//   - dequantization gives the reference's bits on every block: each element is
//     the same single f32 multiply (and add) as in quant_legacy.c;
//   - the quantizers give the reference's bytes on every input (a block with a
//     NaN or Inf in it, or whose 1/d overflows, is handed to the reference);
//   - the dot products compute each block's integer dot exactly and differ from
//     the reference only in how the f32 terms d_x·d_y·Σ are summed (8 lanes, FMA).
//
// Built without AVX2 this file defines the same symbols as stubs that run the
// reference, and rg_quant_legacy_avx2_built = 0 keeps the dispatch scalar.
#include "tensor/quant/quant.h"
#include "tensor/quant/quant_legacy_k.h"

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)

#include <immintrin.h>
#include <math.h>

#include "tensor/half.h"

const int rg_quant_legacy_avx2_built = 1;

static inline float h2f(const uint8_t *p) { return _cvtsh_ss(rg_rd16(p)); }  // exact, as rg_fp16_to_fp32

// 16 packed bytes -> 32 nibbles in element order: bytes 0..15 = low nibbles
// (elements 0..15), bytes 16..31 = high nibbles (elements 16..31).
static inline __m256i unpack_nibbles(const uint8_t *qs) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(raw), _mm_srli_epi16(raw, 4), 1);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

// u32 qh -> 32 bytes, byte i = 0x10 when bit i of qh is set, else 0.
static inline __m256i qh_bit4(uint32_t qh) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i sel = _mm256_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128,  //
                                         1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// y[0..31] = (float)q[k]·d for 32 signed bytes q in element order.
static inline void store_scaled(float *y, __m256i q, __m256 d) {
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    _mm256_storeu_ps(y + 0, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), d));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), d));
    _mm256_storeu_ps(y + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), d));
    _mm256_storeu_ps(y + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), d));
}

// y[0..31] = (float)q[k]·d + m, the multiply and the add rounded separately.
static inline void store_affine(float *y, __m256i q, __m256 d, __m256 m) {
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int k = 0; k < 4; k++) {
        const __m256 p = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[k])), d);
        _mm256_storeu_ps(y + 8 * k, _mm256_add_ps(p, m));
    }
}

void rg_dequant_row_q4_0_avx2(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const __m256i eight = _mm256_set1_epi8(8);
    for (int64_t i = 0; i < n / 32; i++, b += RG_Q4_0_BYTES, dst += 32)
        store_scaled(dst, _mm256_sub_epi8(unpack_nibbles(b + 2), eight), _mm256_set1_ps(h2f(b)));
}

void rg_dequant_row_q4_1_avx2(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 32; i++, b += RG_Q4_1_BYTES, dst += 32)
        store_affine(dst, unpack_nibbles(b + 4), _mm256_set1_ps(h2f(b)), _mm256_set1_ps(h2f(b + 2)));
}

void rg_dequant_row_q5_0_avx2(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const __m256i sixteen = _mm256_set1_epi8(16);
    for (int64_t i = 0; i < n / 32; i++, b += RG_Q5_0_BYTES, dst += 32) {
        const __m256i q = _mm256_or_si256(unpack_nibbles(b + 6), qh_bit4(rg_rd32(b + 2)));
        store_scaled(dst, _mm256_sub_epi8(q, sixteen), _mm256_set1_ps(h2f(b)));
    }
}

void rg_dequant_row_q5_1_avx2(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 32; i++, b += RG_Q5_1_BYTES, dst += 32) {
        const __m256i q = _mm256_or_si256(unpack_nibbles(b + 8), qh_bit4(rg_rd32(b + 4)));
        store_affine(dst, q, _mm256_set1_ps(h2f(b)), _mm256_set1_ps(h2f(b + 2)));
    }
}

void rg_dequant_row_q8_0_avx2(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 32; i++, b += RG_Q8_0_BYTES, dst += 32)
        store_scaled(dst, _mm256_loadu_si256((const __m256i *)(b + 2)), _mm256_set1_ps(h2f(b)));
}

// ---------------------------------------------------------------------------
// Dot products. maddubs multiplies unsigned bytes by signed bytes and adds
// pairs into int16: with x levels 0..31 and any y byte the pair sums stay
// within ±7936, so nothing saturates. Offsets (q − 8, q − 16) are taken off as
// maddubs(offset, y), which is exact for y = −128 too (a sign trick is not).

static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m256i madd_pairs(__m256i p16) { return _mm256_madd_epi16(p16, _mm256_set1_epi16(1)); }

// Two blocks per iteration into two accumulators, so consecutive blocks' FMAs
// do not wait on each other; one horizontal sum at the end.
static inline __m256i q4_0_block_i32(const uint8_t *x, const uint8_t *y) {
    const __m256i qx = unpack_nibbles(x + 2);
    const __m256i qy = _mm256_loadu_si256((const __m256i *)(y + 2));
    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(qx, qy), _mm256_maddubs_epi16(_mm256_set1_epi8(8), qy));
    return madd_pairs(p);
}

void rg_vec_dot_q4_0_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    const int64_t nb = n / 32;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2, x += 2 * RG_Q4_0_BYTES, y += 2 * RG_Q8_0_BYTES) {
        const __m256i p0 = q4_0_block_i32(x, y);
        const __m256i p1 = q4_0_block_i32(x + RG_Q4_0_BYTES, y + RG_Q8_0_BYTES);
        const __m256 d0 = _mm256_set1_ps(h2f(x) * h2f(y));
        const __m256 d1 = _mm256_set1_ps(h2f(x + RG_Q4_0_BYTES) * h2f(y + RG_Q8_0_BYTES));
        acc0 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(p1), acc1);
    }
    if (i < nb) acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x) * h2f(y)), _mm256_cvtepi32_ps(q4_0_block_i32(x, y)), acc0);
    *s = hsum_ps(_mm256_add_ps(acc0, acc1));
}

static inline __m256i q4_1_block_i32(const uint8_t *x, const uint8_t *y) {
    const __m256i qx = unpack_nibbles(x + 4);
    const __m256i qy = _mm256_loadu_si256((const __m256i *)(y + 4));
    return madd_pairs(_mm256_maddubs_epi16(qx, qy));
}

// Lane 0 = d_x·d_y, lane 1 = m_x·s_y: the two f16 pairs of a Q4_1 and a Q8_1
// block converted and multiplied together (the same f32 products as the ref).
static inline __m128 q4_1_scales(const uint8_t *x, const uint8_t *y) {
    const __m128 a = _mm_cvtph_ps(_mm_cvtsi32_si128((int)rg_rd32(x)));
    const __m128 b = _mm_cvtph_ps(_mm_cvtsi32_si128((int)rg_rd32(y)));
    return _mm_mul_ps(a, b);
}

void rg_vec_dot_q4_1_q8_1_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    const int64_t nb = n / 32;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    __m128 accm0 = _mm_setzero_ps(), accm1 = _mm_setzero_ps();  // lane 1: Σ m_x·s_y
    int64_t i = 0;
    for (; i + 3 < nb; i += 4, x += 4 * RG_Q4_1_BYTES, y += 4 * RG_Q8_1_BYTES) {
        for (int k = 0; k < 4; k++) {
            const __m256i p = q4_1_block_i32(x + k * RG_Q4_1_BYTES, y + k * RG_Q8_1_BYTES);
            const __m128 sc = q4_1_scales(x + k * RG_Q4_1_BYTES, y + k * RG_Q8_1_BYTES);
            acc[k] = _mm256_fmadd_ps(_mm256_broadcastss_ps(sc), _mm256_cvtepi32_ps(p), acc[k]);
            if (k & 1) accm1 = _mm_add_ps(accm1, sc);
            else accm0 = _mm_add_ps(accm0, sc);
        }
    }
    for (; i < nb; i++, x += RG_Q4_1_BYTES, y += RG_Q8_1_BYTES) {
        const __m128 sc = q4_1_scales(x, y);
        acc[0] = _mm256_fmadd_ps(_mm256_broadcastss_ps(sc), _mm256_cvtepi32_ps(q4_1_block_i32(x, y)), acc[0]);
        accm0 = _mm_add_ps(accm0, sc);
    }
    const __m128 m = _mm_add_ps(accm0, accm1);
    *s = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))) +
         _mm_cvtss_f32(_mm_shuffle_ps(m, m, 1));
}

void rg_vec_dot_q5_0_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    const __m256i sixteen = _mm256_set1_epi8(16);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++, x += RG_Q5_0_BYTES, y += RG_Q8_0_BYTES) {
        const __m256i qx = _mm256_or_si256(unpack_nibbles(x + 6), qh_bit4(rg_rd32(x + 2)));
        const __m256i qy = _mm256_loadu_si256((const __m256i *)(y + 2));
        const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(qx, qy), _mm256_maddubs_epi16(sixteen, qy));
        const __m256 d = _mm256_set1_ps(h2f(x) * h2f(y));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(madd_pairs(p)), acc);
    }
    *s = hsum_ps(acc);
}

void rg_vec_dot_q5_1_q8_1_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    __m256 acc = _mm256_setzero_ps();
    float summ = 0.0f;
    for (int64_t i = 0; i < n / 32; i++, x += RG_Q5_1_BYTES, y += RG_Q8_1_BYTES) {
        const __m256i qx = _mm256_or_si256(unpack_nibbles(x + 8), qh_bit4(rg_rd32(x + 4)));
        const __m256i qy = _mm256_loadu_si256((const __m256i *)(y + 4));
        const __m256 d = _mm256_set1_ps(h2f(x) * h2f(y));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(madd_pairs(_mm256_maddubs_epi16(qx, qy))), acc);
        summ += h2f(x + 2) * h2f(y + 2);
    }
    *s = hsum_ps(acc) + summ;
}

// Both operands signed (−128 included), so widen to int16 and use madd: exact.
// Even and odd bytes are sign-extended in place (shifts stay inside 128-bit
// lanes), then madd of each half adds adjacent products into int32.
static inline __m256i q8_0_block_i32(const uint8_t *x, const uint8_t *y) {
    const __m256i a = _mm256_loadu_si256((const __m256i *)(x + 2));
    const __m256i b = _mm256_loadu_si256((const __m256i *)(y + 2));
    const __m256i a_odd = _mm256_srai_epi16(a, 8), b_odd = _mm256_srai_epi16(b, 8);
    const __m256i a_even = _mm256_srai_epi16(_mm256_slli_epi16(a, 8), 8);
    const __m256i b_even = _mm256_srai_epi16(_mm256_slli_epi16(b, 8), 8);
    return _mm256_add_epi32(_mm256_madd_epi16(a_even, b_even), _mm256_madd_epi16(a_odd, b_odd));
}

void rg_vec_dot_q8_0_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    const int64_t nb = n / 32;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2, x += 2 * RG_Q8_0_BYTES, y += 2 * RG_Q8_0_BYTES) {
        const __m256i p0 = q8_0_block_i32(x, y);
        const __m256i p1 = q8_0_block_i32(x + RG_Q8_0_BYTES, y + RG_Q8_0_BYTES);
        const __m256 d0 = _mm256_set1_ps(h2f(x) * h2f(y));
        const __m256 d1 = _mm256_set1_ps(h2f(x + RG_Q8_0_BYTES) * h2f(y + RG_Q8_0_BYTES));
        acc0 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(p1), acc1);
    }
    if (i < nb) acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x) * h2f(y)), _mm256_cvtepi32_ps(q8_0_block_i32(x, y)), acc0);
    *s = hsum_ps(_mm256_add_ps(acc0, acc1));
}

// ---------------------------------------------------------------------------
// Q8_0 / Q8_1 activation quantizers, the same bytes as rg_q8_block_ref.

// roundf (ties away from zero) on 8 lanes: t = trunc(v); v − t is exact for
// |v| < 2^23, and |v − t| >= 0.5 means one more step away from zero.
static inline __m256 round_away(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    const __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const __m256 step = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, sign));  // ±1 with v's sign
    return _mm256_add_ps(t, _mm256_and_ps(up, step));
}

// 4 x 8 int32 (each within int8 range) -> 32 int8 in element order.
static inline __m256i pack_i32x32(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    // Lane-wise packing leaves 4-byte groups in the order a0 b0 c0 d0 a1 b1 c1 d1.
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// One block of 32: returns 0 (and writes nothing) when the reference must do it.
// Otherwise stores fp16(d) at dd and the quants at qs, and returns 1 with the
// f32 d and Σq.
static inline int q8_block_avx2(const float *x, uint8_t *dd, uint8_t *qs, float *d_out, int *sum_out) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps(), unord = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        unord = _mm256_or_ps(unord, _mm256_cmp_ps(v[k], v[k], _CMP_UNORD_Q));
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[k]));
    }
    if (_mm256_movemask_ps(unord)) return 0;  // NaN: the scalar scan order matters
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float a = _mm_cvtss_f32(m);
    const float d = a / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    if (!(a <= 3.40282347e+38f) || !(id <= 3.40282347e+38f)) return 0;  // Inf in the block, or 1/d overflows
    rg_wr16(dd, rg_fp32_to_fp16(d));
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; k++) q[k] = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(v[k], vid)));
    _mm256_storeu_si256((__m256i *)qs, pack_i32x32(q[0], q[1], q[2], q[3]));
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    *sum_out = _mm_cvtsi128_si32(s4);
    *d_out = d;
    return 1;
}

void rg_quantize_row_q8_0_avx2(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 32; i++, b += RG_Q8_0_BYTES, src += 32) {
        float d;
        int sum;
        if (!q8_block_avx2(src, b, b + 2, &d, &sum)) rg_q8_block_ref(src, b, b + 2, &d);
    }
}

void rg_quantize_row_q8_1_avx2(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 32; i++, b += RG_Q8_1_BYTES, src += 32) {
        float d;
        int sum;
        if (!q8_block_avx2(src, b, b + 4, &d, &sum)) sum = rg_q8_block_ref(src, b, b + 4, &d);
        rg_wr16(b + 2, rg_fp32_to_fp16((float)sum * d));
    }
}

#else  // built without AVX2: stubs that keep the dispatch scalar

const int rg_quant_legacy_avx2_built = 0;

void rg_dequant_row_q4_0_avx2(const void *src, float *dst, int64_t n) { rg_dequant_row_q4_0_ref(src, dst, n); }
void rg_dequant_row_q4_1_avx2(const void *src, float *dst, int64_t n) { rg_dequant_row_q4_1_ref(src, dst, n); }
void rg_dequant_row_q5_0_avx2(const void *src, float *dst, int64_t n) { rg_dequant_row_q5_0_ref(src, dst, n); }
void rg_dequant_row_q5_1_avx2(const void *src, float *dst, int64_t n) { rg_dequant_row_q5_1_ref(src, dst, n); }
void rg_dequant_row_q8_0_avx2(const void *src, float *dst, int64_t n) { rg_dequant_row_q8_0_ref(src, dst, n); }
void rg_vec_dot_q4_0_q8_0_avx2(int64_t n, float *s, const void *x, const void *y) {
    rg_vec_dot_q4_0_q8_0_ref(n, s, x, y);
}
void rg_vec_dot_q4_1_q8_1_avx2(int64_t n, float *s, const void *x, const void *y) {
    rg_vec_dot_q4_1_q8_1_ref(n, s, x, y);
}
void rg_vec_dot_q5_0_q8_0_avx2(int64_t n, float *s, const void *x, const void *y) {
    rg_vec_dot_q5_0_q8_0_ref(n, s, x, y);
}
void rg_vec_dot_q5_1_q8_1_avx2(int64_t n, float *s, const void *x, const void *y) {
    rg_vec_dot_q5_1_q8_1_ref(n, s, x, y);
}
void rg_vec_dot_q8_0_q8_0_avx2(int64_t n, float *s, const void *x, const void *y) {
    rg_vec_dot_q8_0_q8_0_ref(n, s, x, y);
}
void rg_quantize_row_q8_0_avx2(const float *src, void *dst, int64_t n) { rg_quantize_row_q8_0_ref(src, dst, n); }
void rg_quantize_row_q8_1_avx2(const float *src, void *dst, int64_t n) { rg_quantize_row_q8_1_ref(src, dst, n); }

#endif
