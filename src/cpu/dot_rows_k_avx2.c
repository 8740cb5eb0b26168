// dot_rows_k_avx2.c - dot_rows.h kernels for the K-quants that Q4_K_M files
// hold (Q4_K, Q6_K) against a Q8_K activation row: token generation.
//
// The table's vec_dot (quant_k_avx2.c) redoes per row what depends only on the
// activation, and unpacks each sub-block's 6-bit scale and min in scalar code:
// on SmolLM2's Q4_K_M file its rows ran at 4-5.5 GB/s against Q8_0's 8.8 on the
// same token. Here the activation's per-block terms are made once per call:
//   dy[b]      its block scale;
//   Q4_K: pair[b][s] = bsum[2s] + bsum[2s+1], the sum of sub-block s's 32
//         bytes (Q8_K stores sums of 16), for the mins:
//         Σ_i (d sc_s q_i - dmin m_s) y_i = d sc_s Σ q_i y_i - dmin m_s Σ y_i;
//   Q6_K: the 16 bsums, for the offset: Σ sc_j (q_i - 32) y_i over sub-block j
//         = sc_j Σ q_i y_i - 32 sc_j bsum_j (one madd for all 16 sub-blocks,
//         where vec_dot spends a maddubs per 32 bytes).
// A row's eight Q4_K scales and mins are unpacked with four 32-bit word
// operations (the spec's per-sub-block formula applied to all bytes at once).
// Rows go one at a time, front to back, software-prefetched ROW_PF bytes ahead
// (as the Q8_0 kernel in dot_rows_avx2.c). Integer sums are exact; per block
// the integer total goes into eight f32 lanes with d dy (one FMA), Q4_K's mins
// into four more with dmin dy (one FMA), so the result differs from vec_dot's
// only in the order of f32 additions (test_dot_rows bounds it). Every kernel of
// a type (one, two or four columns, packed or unpacked rows) does each column's
// arithmetic in the same order: a column has the same bits in any of them.
#include "cpu/dot_rows.h"

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)

#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "retrograd.h"
#include "tensor/quant/quant.h"

const int rg_dot_rows_k_avx2_built = 1;

enum { QK = 256, Q4_K_BYTES = 144, Q6_K_BYTES = 210, Q8_K_BYTES = 292, ROW_PF = 4096, BLOCKS_MAX = RG_DOT_ROWS_K_BLOCKS_MAX };

static inline __m256i load32(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline float rd_f32(const uint8_t *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline float rd_f16(const uint8_t *p) { return _cvtsh_ss((unsigned short)(p[0] | p[1] << 8)); }
// (v >> shift) & mask on every byte.
static inline __m256i bits(__m256i v, int shift, int mask) {
    return _mm256_and_si256(_mm256_srli_epi16(v, shift), _mm256_set1_epi8((char)mask));
}
static inline float hsum8(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
// (v0+v2)+(v1+v3) of four f32 lanes.
static inline float hsum4(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
// int16 scale s broadcast to every 16-bit lane.
static inline __m256i bcast16(int s) { return _mm256_set1_epi16((short)s); }
// Two int16 scales: lo on the low 128-bit lane, hi on the high one.
static inline __m256i lanes16(int lo, int hi) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)lo)), _mm_set1_epi16((short)hi), 1);
}

// Rows longer than BLOCKS_MAX blocks (131072 elements) take the table's vec_dot.
static void fallback(uint32_t type, int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y) {
    const rg_quant_ops *ops = rg_quant_get(type);
    for (int64_t r = 0; r < nr; r++) ops->vec_dot(K, &y[r], (const uint8_t *)w + (size_t)r * w_stride, x);
}

// What a Q4_K row's dot needs of one Q8_K activation row, made once per call: the block scales and
// the sub-block pair sums (the mins' terms).
typedef struct q4k_act {
    const uint8_t *x;
    float dys[BLOCKS_MAX];
    __m128i pairs[BLOCKS_MAX];  // 8 int16: sub-block sums of the activation
} q4k_act;

static void q4k_act_of(q4k_act *a, const void *x, int64_t nb) {
    a->x = x;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *yb = (const uint8_t *)x + b * Q8_K_BYTES;
        a->dys[b] = rd_f32(yb);
        const __m128i lo = _mm_loadu_si128((const __m128i *)(yb + 260)), hi = _mm_loadu_si128((const __m128i *)(yb + 276));
        a->pairs[b] = _mm_hadd_epi16(lo, hi);  // |pair| <= 32 * 127: fits
    }
}

// A Q4_K block's scales and mins: bytes 0..3 of sc from u0 (& 63), of m from u1; bytes 4..7 take the
// low/high nibbles of u2 and the top two bits of u0 (sc) or u1 (m) (spec: Q4_K scale packing).
static inline __m128i q4k_scales(const uint8_t *xb, uint8_t sc[8]) {
    const uint32_t u0 = rd32(xb + 4), u1 = rd32(xb + 8), u2 = rd32(xb + 12);
    const uint32_t sc_lo = u0 & 0x3f3f3f3fu, m_lo = u1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
    const uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
    memcpy(sc, &sc_lo, 4);
    memcpy(sc + 4, &sc_hi, 4);
    return _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)m_hi, (int)m_lo));  // the mins, int16
}

// A block's end for one column, the same in every Q4_K kernel: its integer total into eight f32 lanes with d dy,
// its mins' four pair sums (int32, exact) into four lanes with dmin dy.
static inline void q4k_block_end(float d, float dmin, float dy, __m256i isum, __m128i m16, __m128i pairs, __m256 *acc,
                                 __m128 *mins) {
    *acc = _mm256_fmadd_ps(_mm256_set1_ps(d * dy), _mm256_cvtepi32_ps(isum), *acc);
    *mins = _mm_fmadd_ps(_mm_set1_ps(dmin * dy), _mm_cvtepi32_ps(_mm_madd_epi16(m16, pairs)), *mins);
}

// C activation columns against rows [0, nr): each weight block's scales and nibbles unpacked once for
// all C, then per column the integer dot, the FMA into its eight lanes and its mins in one fixed order,
// so every column has the bits of C = 1.
static inline void q4k_rows(int C, int64_t nb, int64_t nr, const void *w, size_t w_stride, const q4k_act *a,
                            float *const *y) {
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *xb = (const uint8_t *)w + (size_t)r * w_stride;
        __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        __m128 mins[2] = {_mm_setzero_ps(), _mm_setzero_ps()};
        for (int64_t b = 0; b < nb; b++, xb += Q4_K_BYTES) {
            _mm_prefetch((const char *)xb + ROW_PF, _MM_HINT_T0);
            _mm_prefetch((const char *)xb + ROW_PF + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)xb + ROW_PF + 128, _MM_HINT_T0);
            uint8_t sc[8];
            const __m128i m16 = q4k_scales(xb, sc);
            __m256i isum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
            for (int c = 0; c < 4; c++) {
                const __m256i raw = load32(xb + 16 + 32 * c), q0 = bits(raw, 0, 15), q1 = bits(raw, 4, 15);
                for (int k = 0; k < C; k++) {
                    const uint8_t *yq = a[k].x + b * Q8_K_BYTES + 4;
                    const __m256i p0 = _mm256_maddubs_epi16(q0, load32(yq + 64 * c));
                    const __m256i p1 = _mm256_maddubs_epi16(q1, load32(yq + 64 * c + 32));
                    isum[k] = _mm256_add_epi32(isum[k], _mm256_madd_epi16(p0, bcast16(sc[2 * c])));
                    isum[k] = _mm256_add_epi32(isum[k], _mm256_madd_epi16(p1, bcast16(sc[2 * c + 1])));
                }
            }
            for (int k = 0; k < C; k++)
                q4k_block_end(rd_f16(xb), rd_f16(xb + 2), a[k].dys[b], isum[k], m16, a[k].pairs[b], &acc[k], &mins[k]);
        }
        for (int k = 0; k < C; k++) y[k][r] = hsum8(acc[k]) - hsum4(mins[k]);
    }
}

// Two columns of rows longer than BLOCKS_MAX blocks: the table's vec_dot for each (true), else false.
static bool fallback2(uint32_t type, int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0,
                      const void *x1, float *y0, float *y1) {
    if (K / QK <= BLOCKS_MAX) return false;
    fallback(type, K, nr, w, w_stride, x0, y0);
    fallback(type, K, nr, w, w_stride, x1, y1);
    return true;
}

void rg_dot_rows_q4_K_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y) {
    const int64_t nb = K / QK;
    if (nb > BLOCKS_MAX) {
        fallback(RG_TYPE_Q4_K, K, nr, w, w_stride, x, y);
        return;
    }
    q4k_act a;
    q4k_act_of(&a, x, nb);
    q4k_rows(1, nb, nr, w, w_stride, &a, &y);
}

void rg_dot_rows2_q4_K_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0, const void *x1,
                            float *y0, float *y1) {
    const int64_t nb = K / QK;
    if (fallback2(RG_TYPE_Q4_K, K, nr, w, w_stride, x0, x1, y0, y1)) return;
    q4k_act a[2];
    q4k_act_of(&a[0], x0, nb);
    q4k_act_of(&a[1], x1, nb);
    float *const y[2] = {y0, y1};
    q4k_rows(2, nb, nr, w, w_stride, a, y);
}

// C activation columns (Q8_K rows xs[k], block scales dys[k]) against Q6_K rows [0, nr): each block's
// 6-bit values assembled once for all C, then per column its integer dot and FMA in one fixed order.
static inline void q6k_rows(int C, int64_t nb, int64_t nr, const void *w, size_t w_stride, const uint8_t *const *xs,
                            float (*dys)[BLOCKS_MAX], float *const *y) {
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *xb = (const uint8_t *)w + (size_t)r * w_stride;
        __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int64_t b = 0; b < nb; b++, xb += Q6_K_BYTES) {
            for (int o = 0; o < Q6_K_BYTES; o += 64) _mm_prefetch((const char *)xb + ROW_PF + o, _MM_HINT_T0);
            // Offsets: 32 Σ_j sc_j bsum_j over the 16 sub-blocks of 16.
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(xb + 192)));
            __m256i isum[2];
            for (int k = 0; k < C; k++) {
                const __m256i offs = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)(xs[k] + b * Q8_K_BYTES + 260)));
                isum[k] = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_setzero_si256(), offs), 5);
            }
            for (int h = 0; h < 2; h++) {
                const __m256i qh = load32(xb + 128 + 32 * h);
                for (int j = 0; j < 4; j++) {
                    const int sb = 8 * h + 2 * j;
                    const __m256i lo = bits(load32(xb + 64 * h + 32 * (j & 1)), 4 * (j >> 1), 15);
                    const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(bits(qh, 2 * j, 3), 4));  // 0..63
                    const __m256i s16 = lanes16((int8_t)xb[192 + sb], (int8_t)xb[193 + sb]);
                    for (int k = 0; k < C; k++) {
                        const __m256i p = _mm256_maddubs_epi16(q, load32(xs[k] + b * Q8_K_BYTES + 4 + 128 * h + 32 * j));
                        isum[k] = _mm256_add_epi32(isum[k], _mm256_madd_epi16(p, s16));
                    }
                }
            }
            for (int k = 0; k < C; k++)
                acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(rd_f16(xb + 208) * dys[k][b]), _mm256_cvtepi32_ps(isum[k]), acc[k]);
        }
        for (int k = 0; k < C; k++) y[k][r] = hsum8(acc[k]);
    }
}

void rg_dot_rows_q6_K_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y) {
    const int64_t nb = K / QK;
    if (nb > BLOCKS_MAX) {
        fallback(RG_TYPE_Q6_K, K, nr, w, w_stride, x, y);
        return;
    }
    float dys[1][BLOCKS_MAX];
    for (int64_t b = 0; b < nb; b++) dys[0][b] = rd_f32((const uint8_t *)x + b * Q8_K_BYTES);
    const uint8_t *xs[1] = {x};
    q6k_rows(1, nb, nr, w, w_stride, xs, dys, &y);
}

void rg_dot_rows2_q6_K_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0, const void *x1,
                            float *y0, float *y1) {
    const int64_t nb = K / QK;
    if (fallback2(RG_TYPE_Q6_K, K, nr, w, w_stride, x0, x1, y0, y1)) return;
    float dys[2][BLOCKS_MAX];
    for (int64_t b = 0; b < nb; b++) {
        dys[0][b] = rd_f32((const uint8_t *)x0 + b * Q8_K_BYTES);
        dys[1][b] = rd_f32((const uint8_t *)x1 + b * Q8_K_BYTES);
    }
    const uint8_t *xs[2] = {x0, x1};
    float *const y[2] = {y0, y1};
    q6k_rows(2, nb, nr, w, w_stride, xs, dys, y);
}

// Rows unpacked once for many columns (dot_rows.h's layouts): what q4k_rows and q6k_rows make of each block for
// every pair of columns, made once per tile. The values, scales and mins are the ones they compute, d and dmin
// widened exactly to f32, and the pair kernels below repeat their arithmetic in the same order: the same bits.
// Every block of rows [0, nr) through block(packed, unpacked) (inlined: block is a constant at each call).
static inline void unpack_blocks(int64_t K, int64_t nr, const void *w, size_t w_stride, uint8_t *dst, size_t in_bytes,
                                 size_t out_bytes, void (*block)(const uint8_t *xb, uint8_t *d)) {
    const int64_t nb = K / QK;
    for (int64_t r = 0; r < nr; r++)
        for (int64_t b = 0; b < nb; b++)
            block((const uint8_t *)w + (size_t)r * w_stride + (size_t)b * in_bytes,
                  dst + ((size_t)r * (size_t)nb + (size_t)b) * out_bytes);
}

static void unpack_q4_K_block(const uint8_t *xb, uint8_t *d) {
    for (int c = 0; c < 4; c++) {
        const __m256i raw = load32(xb + 16 + 32 * c);
        _mm256_storeu_si256((__m256i *)(d + 64 * c), bits(raw, 0, 15));
        _mm256_storeu_si256((__m256i *)(d + 64 * c + 32), bits(raw, 4, 15));
    }
    uint8_t sc[8];
    _mm_storeu_si128((__m128i *)(d + 288), q4k_scales(xb, sc));
    uint32_t twice[8];
    for (int s = 0; s < 8; s++) twice[s] = sc[s] * 0x00010001u;
    memcpy(d + 256, twice, sizeof twice);
    const float dd[4] = {rd_f16(xb), rd_f16(xb + 2), 0.0f, 0.0f};
    memcpy(d + 304, dd, sizeof dd);
}

void rg_unpack_rows_q4_K_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, uint8_t *dst) {
    unpack_blocks(K, nr, w, w_stride, dst, Q4_K_BYTES, UQ4_K_BYTES, unpack_q4_K_block);
}

// C columns (2 or 4) over unpacked Q4_K rows: each sub-block's values and scale loaded once for all C, then per
// column the integer dot and q4k_block_end in q4k_rows' order.
static inline void uq4k_rows(int C, int64_t K, int64_t nr, const void *w, size_t w_stride, const void *const *x,
                             float *const *y) {
    const int64_t nb = K / QK;  // <= BLOCKS_MAX: rg_cpu_unpack_rows offers no unpacking beyond
    q4k_act a[4];
    for (int k = 0; k < C; k++) q4k_act_of(&a[k], x[k], nb);
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *ub = (const uint8_t *)w + (size_t)r * w_stride;
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        __m128 mins[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
        for (int64_t b = 0; b < nb; b++, ub += UQ4_K_BYTES) {
            __m256i isum[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                               _mm256_setzero_si256()};
            for (int s = 0; s < 8; s++) {
                const __m256i q = load32(ub + 32 * s);
                const __m256i s16 = _mm256_castps_si256(_mm256_broadcast_ss((const float *)(ub + 256 + 4 * s)));
                for (int k = 0; k < C; k++) {
                    const __m256i p = _mm256_maddubs_epi16(q, load32(a[k].x + b * Q8_K_BYTES + 4 + 32 * s));
                    isum[k] = _mm256_add_epi32(isum[k], _mm256_madd_epi16(p, s16));
                }
            }
            const __m128i m16 = _mm_loadu_si128((const __m128i *)(ub + 288));
            const float d = rd_f32(ub + 304), dmin = rd_f32(ub + 308);
            for (int k = 0; k < C; k++) q4k_block_end(d, dmin, a[k].dys[b], isum[k], m16, a[k].pairs[b], &acc[k], &mins[k]);
        }
        for (int k = 0; k < C; k++) y[k][r] = hsum8(acc[k]) - hsum4(mins[k]);
    }
}

// The two- and four-column entry points (dot_rows.h) of a C-column kernel over unpacked rows.
#define UNPACKED_ENTRIES(name2, name4, rows)                                                                   \
    void name2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0, const void *x1,        \
               float *y0, float *y1) {                                                                         \
        const void *const x[2] = {x0, x1};                                                                     \
        float *const y[2] = {y0, y1};                                                                          \
        rows(2, K, nr, w, w_stride, x, y);                                                                     \
    }                                                                                                          \
    void name4(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *const x[4], float *const y[4]) { \
        rows(4, K, nr, w, w_stride, x, y);                                                                     \
    }
UNPACKED_ENTRIES(rg_dot_rows2_uq4_K_avx2, rg_dot_rows4_uq4_K_avx2, uq4k_rows)

static void unpack_q6_K_block(const uint8_t *xb, uint8_t *d) {
    for (int h = 0; h < 2; h++) {
        const __m256i qh = load32(xb + 128 + 32 * h);
        for (int j = 0; j < 4; j++) {
            const int c = 4 * h + j, sb = 2 * c;
            const __m256i lo = bits(load32(xb + 64 * h + 32 * (j & 1)), 4 * (j >> 1), 15);
            _mm256_storeu_si256((__m256i *)(d + 32 * c), _mm256_or_si256(lo, _mm256_slli_epi16(bits(qh, 2 * j, 3), 4)));
            _mm256_storeu_si256((__m256i *)(d + 256 + 32 * c), lanes16((int8_t)xb[192 + sb], (int8_t)xb[193 + sb]));
        }
    }
    _mm256_storeu_si256((__m256i *)(d + 512), _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(xb + 192))));
    const float dd[8] = {rd_f16(xb + 208)};
    memcpy(d + 544, dd, sizeof dd);
}

void rg_unpack_rows_q6_K_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, uint8_t *dst) {
    unpack_blocks(K, nr, w, w_stride, dst, Q6_K_BYTES, UQ6_K_BYTES, unpack_q6_K_block);
}

// C columns (2 or 4) over unpacked Q6_K rows: each 32 values and their scales loaded once for all C, then per column
// q6k_rows' arithmetic in its order.
static inline void uq6k_rows(int C, int64_t K, int64_t nr, const void *w, size_t w_stride, const void *const *x,
                             float *const *y) {
    const int64_t nb = K / QK;  // <= BLOCKS_MAX, as above
    float dys[4][BLOCKS_MAX];
    const uint8_t *xs[4];
    for (int k = 0; k < C; k++) {
        xs[k] = x[k];
        for (int64_t b = 0; b < nb; b++) dys[k][b] = rd_f32(xs[k] + b * Q8_K_BYTES);
    }
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *ub = (const uint8_t *)w + (size_t)r * w_stride;
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int64_t b = 0; b < nb; b++, ub += UQ6_K_BYTES) {
            const __m256i sc16 = load32(ub + 512);
            __m256i isum[4];
            for (int k = 0; k < C; k++) {
                const __m256i offs = _mm256_madd_epi16(sc16, load32(xs[k] + b * Q8_K_BYTES + 260));
                isum[k] = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_setzero_si256(), offs), 5);
            }
            for (int c = 0; c < 8; c++) {
                const __m256i q = load32(ub + 32 * c), s16 = load32(ub + 256 + 32 * c);
                for (int k = 0; k < C; k++) {
                    const __m256i p = _mm256_maddubs_epi16(q, load32(xs[k] + b * Q8_K_BYTES + 4 + 32 * c));
                    isum[k] = _mm256_add_epi32(isum[k], _mm256_madd_epi16(p, s16));
                }
            }
            const float d = rd_f32(ub + 544);
            for (int k = 0; k < C; k++)
                acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(d * dys[k][b]), _mm256_cvtepi32_ps(isum[k]), acc[k]);
        }
        for (int k = 0; k < C; k++) y[k][r] = hsum8(acc[k]);
    }
}

UNPACKED_ENTRIES(rg_dot_rows2_uq6_K_avx2, rg_dot_rows4_uq6_K_avx2, uq6k_rows)

#else  // built without AVX2: never called (rg_cpu_dot_rows returns NULL)

const int rg_dot_rows_k_avx2_built = 0;

#define STUB_ROWS(name)                                                                                 \
    void name(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y) {       \
        (void)K, (void)nr, (void)w, (void)w_stride, (void)x, (void)y;                                   \
    }
#define STUB_ROWS2(name)                                                                                \
    void name(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0, const void *x1,  \
              float *y0, float *y1) {                                                                   \
        (void)K, (void)nr, (void)w, (void)w_stride, (void)x0, (void)x1, (void)y0, (void)y1;             \
    }
#define STUB_UNPACK(name)                                                                               \
    void name(int64_t K, int64_t nr, const void *w, size_t w_stride, uint8_t *dst) {                   \
        (void)K, (void)nr, (void)w, (void)w_stride, (void)dst;                                          \
    }
STUB_ROWS(rg_dot_rows_q4_K_avx2)
STUB_ROWS(rg_dot_rows_q6_K_avx2)
STUB_ROWS2(rg_dot_rows2_q4_K_avx2)
STUB_ROWS2(rg_dot_rows2_q6_K_avx2)
STUB_UNPACK(rg_unpack_rows_q4_K_avx2)
STUB_UNPACK(rg_unpack_rows_q6_K_avx2)
STUB_ROWS2(rg_dot_rows2_uq4_K_avx2)
STUB_ROWS2(rg_dot_rows2_uq6_K_avx2)
#define STUB_ROWS4(name)                                                                                \
    void name(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *const x[4],           \
              float *const y[4]) {                                                                      \
        (void)K, (void)nr, (void)w, (void)w_stride, (void)x, (void)y;                                   \
    }
STUB_ROWS4(rg_dot_rows4_uq4_K_avx2)
STUB_ROWS4(rg_dot_rows4_uq6_K_avx2)

#endif
