// quant_k_avx2.c - AVX2/F16C kernels for Q2_K..Q6_K (dequantize, dot with Q8_K)
// and for Q8_K itself (quantize, dequantize).
//
// Compiled with -mavx2 -mf16c -mfma and -ffp-contract=off (every *_avx2.c);
// quant_k.c / quant_q8.c call these only when rg_cpu_has_avx2().
//
// Guarantees (checked by tests/test_quant_legacy_k.c):
//   - dequantization gives the reference's bits on every block: each element is
//     y = (d·sc)·q − (dmin·m) with the same f32 operations as quant_k.c;
//   - the dot products compute each super-block's integer sums exactly and then
//     run the reference's f32 expression, so they give the reference's bits;
//   - the Q8_K quantizer gives the reference's bytes (blocks with NaN or Inf go
//     to the reference).
//
// Built without AVX2 this file defines the same symbols as stubs that run the
// reference, and rg_quant_k_avx2_built = 0 keeps the dispatch scalar.
#include "tensor/quant/quant.h"
#include "tensor/quant/quant_legacy_k.h"

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)

#include <immintrin.h>

const int rg_quant_k_avx2_built = 1;

static inline float h2f(const uint8_t *p) { return _cvtsh_ss(rg_rd16(p)); }  // exact, as rg_fp16_to_fp32
static inline float rd_f32(const uint8_t *p) { return rg_f32_of(rg_rd32(p)); }
static inline __m256i load32(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }

// y[0..15] = d·(float)q[k] − m for 16 signed bytes: a multiply, then a subtract.
static inline void store16_affine(float *y, __m128i q, __m256 d, __m256 m) {
    _mm256_storeu_ps(y, _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))), m));
    _mm256_storeu_ps(
        y + 8, _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)))), m));
}

// y[0..15] = d·(float)q[k] for 16 signed bytes.
static inline void store16_scaled(float *y, __m128i q, __m256 d) {
    _mm256_storeu_ps(y, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)))));
}

// 32 bytes, byte l = 1 where bit `bit` of v's byte l is set (any bit 0..7).
static inline __m256i bit_of(__m256i v, int bit) {
    const __m256i sel = _mm256_set1_epi8((char)(1 << bit));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel), _mm256_set1_epi8(1));
}

// (v >> shift) & mask on every byte (the 16-bit shift only pulls bits from the
// neighbour byte into positions the mask drops, for shift 0..7).
static inline __m256i bits(__m256i v, int shift, int mask) {
    return _mm256_and_si256(_mm256_srli_epi16(v, shift), _mm256_set1_epi8((char)mask));
}

// ===========================================================================
// Dequantization

void rg_dequant_row_q2_K_avx2(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / RG_QK_K; i++, b += RG_Q2_K_BYTES, dst += RG_QK_K) {
        const float d = h2f(b + 80), dmin = h2f(b + 82);
        for (int h = 0; h < 2; h++) {
            const __m256i raw = load32(b + 16 + 32 * h);
            for (int j = 0; j < 4; j++) {
                const __m256i q = bits(raw, 2 * j, 3);  // elements 128h + 32j + 0..31
                const int s = 8 * h + 2 * j;
                float *y = dst + 128 * h + 32 * j;
                store16_affine(y, _mm256_castsi256_si128(q), _mm256_set1_ps(d * (float)(b[s] & 15)),
                               _mm256_set1_ps(dmin * (float)(b[s] >> 4)));
                store16_affine(y + 16, _mm256_extracti128_si256(q, 1), _mm256_set1_ps(d * (float)(b[s + 1] & 15)),
                               _mm256_set1_ps(dmin * (float)(b[s + 1] >> 4)));
            }
        }
    }
}

void rg_dequant_row_q3_K_avx2(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const __m256i four = _mm256_set1_epi8(4);
    for (int64_t i = 0; i < n / RG_QK_K; i++, b += RG_Q3_K_BYTES, dst += RG_QK_K) {
        const float d = h2f(b + 108);
        const __m256i hm = load32(b);
        for (int h = 0; h < 2; h++) {
            const __m256i raw = load32(b + 32 + 32 * h);
            for (int j = 0; j < 4; j++) {
                // Q − 4 = (q2 | hb << 2) − 4, in −4..3
                const __m256i hb = _mm256_slli_epi16(bit_of(hm, 4 * h + j), 2);
                const __m256i q = _mm256_sub_epi8(_mm256_or_si256(bits(raw, 2 * j, 3), hb), four);
                const int s = 8 * h + 2 * j;
                float *y = dst + 128 * h + 32 * j;
                store16_scaled(y, _mm256_castsi256_si128(q), _mm256_set1_ps(d * (float)(rg_k3_scale(s, b + 96) - 32)));
                store16_scaled(y + 16, _mm256_extracti128_si256(q, 1),
                               _mm256_set1_ps(d * (float)(rg_k3_scale(s + 1, b + 96) - 32)));
            }
        }
    }
}

// Q4_K and Q5_K: chunk c of 64 elements = low nibbles of 32 bytes (sub-block
// 2c), then their high nibbles (sub-block 2c + 1); Q5_K adds bit s of qh[l] << 4.
static inline void dequant_q45_K_avx2(const uint8_t *b, float *dst, int64_t n, int five) {
    const int bytes = five ? RG_Q5_K_BYTES : RG_Q4_K_BYTES;
    for (int64_t i = 0; i < n / RG_QK_K; i++, b += bytes, dst += RG_QK_K) {
        const float d = h2f(b), dmin = h2f(b + 2);
        const uint8_t *qs = b + (five ? 48 : 16);
        const __m256i qh = five ? load32(b + 16) : _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i raw = load32(qs + 32 * c);
            for (int half = 0; half < 2; half++) {
                const int s = 2 * c + half;
                __m256i q = bits(raw, 4 * half, 15);
                if (five) q = _mm256_or_si256(q, _mm256_slli_epi16(bit_of(qh, s), 4));
                int sc, m;
                rg_k4_scale_min(s, b + 4, &sc, &m);
                const __m256 d1 = _mm256_set1_ps(d * (float)sc), m1 = _mm256_set1_ps(dmin * (float)m);
                store16_affine(dst + 32 * s, _mm256_castsi256_si128(q), d1, m1);
                store16_affine(dst + 32 * s + 16, _mm256_extracti128_si256(q, 1), d1, m1);
            }
        }
    }
}

void rg_dequant_row_q4_K_avx2(const void *src, float *dst, int64_t n) { dequant_q45_K_avx2(src, dst, n, 0); }
void rg_dequant_row_q5_K_avx2(const void *src, float *dst, int64_t n) { dequant_q45_K_avx2(src, dst, n, 1); }

void rg_dequant_row_q6_K_avx2(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const __m256i off = _mm256_set1_epi8(32);
    for (int64_t i = 0; i < n / RG_QK_K; i++, b += RG_Q6_K_BYTES, dst += RG_QK_K) {
        const float d = h2f(b + 208);
        for (int h = 0; h < 2; h++) {
            const __m256i qh = load32(b + 128 + 32 * h);
            for (int k = 0; k < 4; k++) {
                const __m256i lo = bits(load32(b + 64 * h + 32 * (k & 1)), 4 * (k >> 1), 15);
                const __m256i hi = _mm256_slli_epi16(bits(qh, 2 * k, 3), 4);
                const __m256i q = _mm256_sub_epi8(_mm256_or_si256(lo, hi), off);  // −32..31
                const int s = 8 * h + 2 * k;
                float *y = dst + 128 * h + 32 * k;
                store16_scaled(y, _mm256_castsi256_si128(q), _mm256_set1_ps(d * (float)(int8_t)b[192 + s]));
                store16_scaled(y + 16, _mm256_extracti128_si256(q, 1),
                               _mm256_set1_ps(d * (float)(int8_t)b[192 + s + 1]));
            }
        }
    }
}

void rg_dequant_row_q8_K_avx2(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / RG_QK_K; i++, b += RG_Q8_K_BYTES, dst += RG_QK_K) {
        const __m256 d = _mm256_set1_ps(rd_f32(b));
        for (int k = 0; k < 16; k++)
            store16_scaled(dst + 16 * k, _mm_loadu_si128((const __m128i *)(b + 4 + 16 * k)), d);
    }
}

// ===========================================================================
// Dot products against Q8_K. maddubs(q, y) takes x levels as unsigned bytes
// (all ≤ 63, so pair sums stay within ±16128) times the signed y bytes; level
// offsets are removed as maddubs(offset, y). Each 32-byte step covers two
// sub-blocks of 16 (one per 128-bit lane), so the per-sub-block scales go in
// as an int16 vector with one value per lane, and madd widens to int32.

static inline int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

static inline __m256i lane_scales(int lo, int hi) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)lo)), _mm_set1_epi16((short)hi), 1);
}

static inline int bsum16(const uint8_t *y, int g) { return (int16_t)rg_rd16(y + 260 + 2 * g); }

void rg_vec_dot_q2_K_q8_k_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / RG_QK_K; i++, x += RG_Q2_K_BYTES, y += RG_Q8_K_BYTES) {
        int summs = 0;
        for (int j = 0; j < 16; j++) summs += (x[j] >> 4) * bsum16(y, j);
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i raw = load32(x + 16 + 32 * h);
            for (int j = 0; j < 4; j++) {
                const int sb = 8 * h + 2 * j;
                const __m256i p = _mm256_maddubs_epi16(bits(raw, 2 * j, 3), load32(y + 4 + 128 * h + 32 * j));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, lane_scales(x[sb] & 15, x[sb + 1] & 15)));
            }
        }
        const int isum = hsum_i32(acc);
        const float dy = rd_f32(y);
        const float dall = dy * h2f(x + 80), dmin = dy * h2f(x + 82);
        sumf += dall * (float)isum - dmin * (float)summs;
    }
    *s = sumf;
}

void rg_vec_dot_q3_K_q8_k_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    const __m256i four = _mm256_set1_epi8(4);
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / RG_QK_K; i++, x += RG_Q3_K_BYTES, y += RG_Q8_K_BYTES) {
        const __m256i hm = load32(x);
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i raw = load32(x + 32 + 32 * h);
            for (int j = 0; j < 4; j++) {
                const int sb = 8 * h + 2 * j;
                const __m256i q = _mm256_or_si256(bits(raw, 2 * j, 3), _mm256_slli_epi16(bit_of(hm, 4 * h + j), 2));
                const __m256i qy = load32(y + 4 + 128 * h + 32 * j);
                const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, qy), _mm256_maddubs_epi16(four, qy));
                const __m256i sc = lane_scales(rg_k3_scale(sb, x + 96) - 32, rg_k3_scale(sb + 1, x + 96) - 32);
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, sc));
            }
        }
        sumf += (rd_f32(y) * h2f(x + 108)) * (float)hsum_i32(acc);
    }
    *s = sumf;
}

static inline void vec_dot_q45_K_avx2(int64_t n, float *s, const uint8_t *x, const uint8_t *y, int five) {
    const int bytes = five ? RG_Q5_K_BYTES : RG_Q4_K_BYTES;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / RG_QK_K; i++, x += bytes, y += RG_Q8_K_BYTES) {
        const uint8_t *qs = x + (five ? 48 : 16);
        const __m256i qh = five ? load32(x + 16) : _mm256_setzero_si256();
        int summs = 0;
        __m256i acc = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i raw = load32(qs + 32 * c);
            for (int half = 0; half < 2; half++) {
                const int sb = 2 * c + half;
                int sc, m;
                rg_k4_scale_min(sb, x + 4, &sc, &m);
                summs += m * (bsum16(y, 2 * sb) + bsum16(y, 2 * sb + 1));
                __m256i q = bits(raw, 4 * half, 15);
                if (five) q = _mm256_or_si256(q, _mm256_slli_epi16(bit_of(qh, sb), 4));
                const __m256i p = _mm256_maddubs_epi16(q, load32(y + 4 + 32 * sb));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16((short)sc)));
            }
        }
        const float dy = rd_f32(y);
        const float d = dy * h2f(x), dmin = dy * h2f(x + 2);
        sumf += d * (float)hsum_i32(acc) - dmin * (float)summs;
    }
    *s = sumf;
}

void rg_vec_dot_q4_K_q8_k_avx2(int64_t n, float *s, const void *x, const void *y) { vec_dot_q45_K_avx2(n, s, x, y, 0); }
void rg_vec_dot_q5_K_q8_k_avx2(int64_t n, float *s, const void *x, const void *y) { vec_dot_q45_K_avx2(n, s, x, y, 1); }

void rg_vec_dot_q6_K_q8_k_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    const __m256i off = _mm256_set1_epi8(32);
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / RG_QK_K; i++, x += RG_Q6_K_BYTES, y += RG_Q8_K_BYTES) {
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i qh = load32(x + 128 + 32 * h);
            for (int k = 0; k < 4; k++) {
                const int sb = 8 * h + 2 * k;
                const __m256i lo = bits(load32(x + 64 * h + 32 * (k & 1)), 4 * (k >> 1), 15);
                const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(bits(qh, 2 * k, 3), 4));  // 0..63
                const __m256i qy = load32(y + 4 + 128 * h + 32 * k);
                const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, qy), _mm256_maddubs_epi16(off, qy));
                acc = _mm256_add_epi32(acc,
                                       _mm256_madd_epi16(p, lane_scales((int8_t)x[192 + sb], (int8_t)x[192 + sb + 1])));
            }
        }
        sumf += (rd_f32(y) * h2f(x + 208)) * (float)hsum_i32(acc);
    }
    *s = sumf;
}

// ===========================================================================
// Q8_K quantizer: the same bytes as rg_quantize_row_q8_K_ref.

void rg_quantize_row_q8_K_avx2(const float *src, void *dst, int64_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / RG_QK_K; i++, b += RG_Q8_K_BYTES, src += RG_QK_K) {
        __m256 amax = _mm256_setzero_ps(), unord = _mm256_setzero_ps();
        for (int k = 0; k < 32; k++) {
            const __m256 v = _mm256_loadu_ps(src + 8 * k);
            unord = _mm256_or_ps(unord, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float a = _mm_cvtss_f32(m4);
        // NaN (skipped by the scalar search, not by max_ps) or Inf: the reference decides.
        if (_mm256_movemask_ps(unord) || !(a <= 3.40282347e+38f)) {
            rg_quantize_row_q8_K_ref(src, b, RG_QK_K);
            continue;
        }
        if (a == 0.0f) {
            memset(b, 0, RG_Q8_K_BYTES);
            continue;
        }
        // The signed value of the first element with |x| == amax.
        const __m256 va = _mm256_set1_ps(a);
        float max = 0.0f;
        for (int k = 0; k < 32; k++) {
            const int mask =
                _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(src + 8 * k)), va, _CMP_EQ_OQ));
            if (mask) {
                max = src[8 * k + __builtin_ctz((unsigned)mask)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        if (!(iscale >= -3.40282347e+38f && iscale <= 3.40282347e+38f)) {
            // −127/max overflowed (max below ~4e-37): the quants are nearest_int(±Inf or
            // NaN), garbage that int8 packing would saturate; let the reference store it.
            rg_quantize_row_q8_K_ref(src, b, RG_QK_K);
            continue;
        }
        const __m256 vis = _mm256_set1_ps(iscale);
        const __m256 magic = _mm256_set1_ps(12582912.0f);
        const __m256i mant = _mm256_set1_epi32(0x007FFFFF), bias = _mm256_set1_epi32(0x00400000);
        const __m256i lim = _mm256_set1_epi32(127);
        for (int c = 0; c < 8; c++) {
            __m256i q[4];
            for (int k = 0; k < 4; k++) {
                // nearest_int: (bits(v + 1.5·2^23) & 0x7FFFFF) − 0x400000, then min(127, .)
                const __m256 t = _mm256_add_ps(_mm256_mul_ps(vis, _mm256_loadu_ps(src + 32 * c + 8 * k)), magic);
                const __m256i l = _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(t), mant), bias);
                q[k] = _mm256_min_epi32(l, lim);
            }
            const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
            const __m256i p8 = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(b + 4 + 32 * c), p8);
            // bsums of the two groups of 16: sums of 4 bytes per int32 lane, then of 4 lanes.
            __m256i s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), p8), _mm256_set1_epi16(1));
            s4 = _mm256_hadd_epi32(s4, s4);
            s4 = _mm256_hadd_epi32(s4, s4);
            rg_wr16(b + 260 + 4 * c, (uint16_t)_mm256_extract_epi32(s4, 0));
            rg_wr16(b + 262 + 4 * c, (uint16_t)_mm256_extract_epi32(s4, 4));
        }
        rg_wr32(b, rg_bits_of(1.0f / iscale));
    }
}

#else  // built without AVX2: stubs that keep the dispatch scalar

const int rg_quant_k_avx2_built = 0;

void rg_dequant_row_q2_K_avx2(const void *src, float *dst, int64_t n) { rg_dequant_row_q2_K_ref(src, dst, n); }
void rg_dequant_row_q3_K_avx2(const void *src, float *dst, int64_t n) { rg_dequant_row_q3_K_ref(src, dst, n); }
void rg_dequant_row_q4_K_avx2(const void *src, float *dst, int64_t n) { rg_dequant_row_q4_K_ref(src, dst, n); }
void rg_dequant_row_q5_K_avx2(const void *src, float *dst, int64_t n) { rg_dequant_row_q5_K_ref(src, dst, n); }
void rg_dequant_row_q6_K_avx2(const void *src, float *dst, int64_t n) { rg_dequant_row_q6_K_ref(src, dst, n); }
void rg_dequant_row_q8_K_avx2(const void *src, float *dst, int64_t n) { rg_dequant_row_q8_K_ref(src, dst, n); }
void rg_vec_dot_q2_K_q8_k_avx2(int64_t n, float *s, const void *x, const void *y) {
    rg_vec_dot_q2_K_q8_k_ref(n, s, x, y);
}
void rg_vec_dot_q3_K_q8_k_avx2(int64_t n, float *s, const void *x, const void *y) {
    rg_vec_dot_q3_K_q8_k_ref(n, s, x, y);
}
void rg_vec_dot_q4_K_q8_k_avx2(int64_t n, float *s, const void *x, const void *y) {
    rg_vec_dot_q4_K_q8_k_ref(n, s, x, y);
}
void rg_vec_dot_q5_K_q8_k_avx2(int64_t n, float *s, const void *x, const void *y) {
    rg_vec_dot_q5_K_q8_k_ref(n, s, x, y);
}
void rg_vec_dot_q6_K_q8_k_avx2(int64_t n, float *s, const void *x, const void *y) {
    rg_vec_dot_q6_K_q8_k_ref(n, s, x, y);
}
void rg_quantize_row_q8_K_avx2(const float *src, void *dst, int64_t n) { rg_quantize_row_q8_K_ref(src, dst, n); }

#endif
