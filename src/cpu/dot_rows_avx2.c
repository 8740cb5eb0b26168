// dot_rows_avx2.c - the AVX2/F16C/FMA kernels behind dot_rows.h: eight (Q4_0,
// Q5_0), four (Q4_1) or one (Q8_0, F32, F16, BF16) weight rows against one
// activation row per pass. Eight rows spread the shared work thinner (Q4_0
// ~10-15% faster in cache than four); Q4_1's second accumulator per row
// would not fit the 16 registers with eight.
//
// Q8_0 goes one row at a time, front to back, because it is bound by memory,
// not arithmetic: a single sequential stream, software-prefetched ROW_PF bytes
// ahead, is read from DRAM 3-10% faster than eight interleaved rows
// prefetched a group ahead (one and two threads, SmolLM2's 576- and
// 1536-long rows; Q4_0 loses 12-15% that way, as its unpacking makes it
// compute-bound). The activation's block scales are widened once per call.
//
// Per block of 32 weights each row costs one integer dot (maddubs + madd),
// one conversion and one FMA with the product of the two block scales; what
// only depends on the activation block (its load, its scale, the sum of its
// bytes that offset formats subtract) is done once for the group.
//   Q4_0: sum (q - 8) y = sum q y - 8 sum y     (q in 0..15 feeds maddubs unsigned)
//   Q5_0: sum (q - 16) y = sum q y - 16 sum y   (q in 0..31)
//   Q4_1: d_x d_y sum q y + m_x s_y             (s_y = d_y sum y, stored in the Q8_1 block)
//   Q8_0: maddubs(|w|, sign(y, w))              exact because y is never -128 (dot_rows.h)
// Integer sums are exact; the f32 sums differ from vec_dot's only in order.
//
// Each row has its own accumulator and four at a time are reduced together by
// one fixed tree of horizontal adds, the same for every position in the group,
// so a row's bits do not depend on which rows it was computed with.
#include "cpu/dot_rows.h"

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)

#include <stdbool.h>

#include "cpu/dot_rows_avx2.h"
#include "retrograd.h"

const int rg_dot_rows_avx2_built = 1;

// u32 qh -> 32 bytes, byte i = 0x10 when bit i is set, else 0.
static inline __m256i qh_0x10(uint32_t qh) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel), _mm256_set1_epi8(0x10));
}

// Σ over the block of maddubs(u, y) pairs widened to int32.
static inline __m256i dot_u8_i8(__m256i u, __m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1));
}

void rg_dot_rows_q4_0_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y) {
    const int64_t nb = K / 32;
    for (int64_t r = 0; r < nr; r += 8) {
        const uint8_t *p[8];
        group_rows_n(w, w_stride, r, nr, p, 8);
        const uint8_t *next = p[0] + 8 * w_stride;
        __m256 acc[8];
        for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
        const uint8_t *xb = x;
        for (int64_t b = 0; b < nb; b++, xb += Q8_0_BYTES) {
            prefetch_ahead(next, b, 8 * Q4_0_BYTES);
            const __m256i qy = _mm256_loadu_si256((const __m256i *)(xb + 2));
            const __m256i off = dot_u8_i8(_mm256_set1_epi8(8), qy);
            const __m256 dy = bcast_f16(xb);
            for (int i = 0; i < 8; i++) {
                const uint8_t *wb = p[i] + b * Q4_0_BYTES;
                const __m256i s = _mm256_sub_epi32(dot_u8_i8(nibbles(wb + 2), qy), off);
                acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(bcast_f16(wb), dy), _mm256_cvtepi32_ps(s), acc[i]);
            }
        }
        store_group(y, r, nr, reduce4(acc[0], acc[1], acc[2], acc[3]));
        store_group(y, r + 4, nr, reduce4(acc[4], acc[5], acc[6], acc[7]));
    }
}

void rg_dot_rows_q5_0_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y) {
    const int64_t nb = K / 32;
    for (int64_t r = 0; r < nr; r += 8) {
        const uint8_t *p[8];
        group_rows_n(w, w_stride, r, nr, p, 8);
        const uint8_t *next = p[0] + 8 * w_stride;
        __m256 acc[8];
        for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
        const uint8_t *xb = x;
        for (int64_t b = 0; b < nb; b++, xb += Q8_0_BYTES) {
            prefetch_ahead(next, b, 8 * Q5_0_BYTES);
            const __m256i qy = _mm256_loadu_si256((const __m256i *)(xb + 2));
            const __m256i off = dot_u8_i8(_mm256_set1_epi8(16), qy);
            const __m256 dy = bcast_f16(xb);
            for (int i = 0; i < 8; i++) {
                const uint8_t *wb = p[i] + b * Q5_0_BYTES;
                const __m256i q = _mm256_or_si256(nibbles(wb + 6), qh_0x10(rd32(wb + 2)));
                const __m256i s = _mm256_sub_epi32(dot_u8_i8(q, qy), off);
                acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(bcast_f16(wb), dy), _mm256_cvtepi32_ps(s), acc[i]);
            }
        }
        store_group(y, r, nr, reduce4(acc[0], acc[1], acc[2], acc[3]));
        store_group(y, r + 4, nr, reduce4(acc[4], acc[5], acc[6], acc[7]));
    }
}

// Two activation columns (rg_dot_rows2_fn) for Q4_0 and Q5_0: four rows per pass (eight accumulators),
// each block's values unpacked once for both columns, then per column the integer dot, its offset, the
// FMA and the reduction of the one-column kernel above (reduce4 gives a row the same bits whatever its
// group), so every column has that kernel's bits. VALUES(row, b, nb) and SCALE(row, b, nb) read block b of a
// row (packed, or unpacked below); PF: bytes of four rows' block to prefetch a group ahead (0: none).
#define LEGACY_TWO_COLS(name, OFFSET, VALUES, SCALE, PF)                                                     \
    void name(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0, const void *x1,       \
              float *y0, float *y1) {                                                                       \
        const int64_t nb = K / 32;                                                                          \
        for (int64_t r = 0; r < nr; r += 4) {                                                               \
            const uint8_t *p[4];                                                                            \
            group_rows(w, w_stride, r, nr, p);                                                              \
            const uint8_t *next = p[0] + 4 * w_stride;                                                      \
            __m256 a[4], c[4];                                                                              \
            for (int i = 0; i < 4; i++) a[i] = _mm256_setzero_ps(), c[i] = _mm256_setzero_ps();            \
            const uint8_t *xa = x0, *xc = x1;                                                               \
            for (int64_t b = 0; b < nb; b++, xa += Q8_0_BYTES, xc += Q8_0_BYTES) {                          \
                if (PF) prefetch_ahead(next, b, PF);                                                        \
                const __m256i qa = _mm256_loadu_si256((const __m256i *)(xa + 2));                           \
                const __m256i qc = _mm256_loadu_si256((const __m256i *)(xc + 2));                           \
                const __m256i oa = dot_u8_i8(_mm256_set1_epi8(OFFSET), qa);                                 \
                const __m256i oc = dot_u8_i8(_mm256_set1_epi8(OFFSET), qc);                                 \
                const __m256 da = bcast_f16(xa), dc = bcast_f16(xc);                                        \
                for (int i = 0; i < 4; i++) {                                                               \
                    const __m256i q = VALUES(p[i], b, nb);                                                  \
                    const __m256 dw = SCALE(p[i], b, nb);                                                   \
                    const __m256i sa = _mm256_sub_epi32(dot_u8_i8(q, qa), oa);                              \
                    const __m256i sc = _mm256_sub_epi32(dot_u8_i8(q, qc), oc);                              \
                    a[i] = _mm256_fmadd_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(sa), a[i]);            \
                    c[i] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dc), _mm256_cvtepi32_ps(sc), c[i]);            \
                }                                                                                           \
            }                                                                                               \
            store_group(y0, r, nr, reduce4(a[0], a[1], a[2], a[3]));                                        \
            store_group(y1, r, nr, reduce4(c[0], c[1], c[2], c[3]));                                        \
        }                                                                                                   \
    }
static inline __m256i q4_0_values(const uint8_t *wb) { return nibbles(wb + 2); }
static inline __m256i q5_0_values(const uint8_t *wb) { return _mm256_or_si256(nibbles(wb + 6), qh_0x10(rd32(wb + 2))); }
static inline __m256i q4_0_at(const uint8_t *row, int64_t b, int64_t nb) {
    return (void)nb, q4_0_values(row + b * Q4_0_BYTES);
}
static inline __m256i q5_0_at(const uint8_t *row, int64_t b, int64_t nb) {
    return (void)nb, q5_0_values(row + b * Q5_0_BYTES);
}
static inline __m256 q4_0_scale(const uint8_t *row, int64_t b, int64_t nb) {
    return (void)nb, bcast_f16(row + b * Q4_0_BYTES);
}
static inline __m256 q5_0_scale(const uint8_t *row, int64_t b, int64_t nb) {
    return (void)nb, bcast_f16(row + b * Q5_0_BYTES);
}
LEGACY_TWO_COLS(rg_dot_rows2_q4_0_avx2, 8, q4_0_at, q4_0_scale, 4 * Q4_0_BYTES)
LEGACY_TWO_COLS(rg_dot_rows2_q5_0_avx2, 16, q5_0_at, q5_0_scale, 4 * Q5_0_BYTES)

// Q4_0 and Q5_0 rows unpacked once for many columns (dot_rows.h's rg_unpack_rows_fn): a row's blocks' 32 values
// (what q4_0_values / q5_0_values give), then its block scales widened to f32, so the pair kernels below load
// what the packed ones compute and skip the unpacking. Same values, same scales (f16 to f32 is exact), the
// arithmetic of LEGACY_TWO_COLS: the same bits. (A first layout, each block as Q8_0's 34 bytes, had its loads
// cross cache lines and was slower than unpacking per pair.)
#define UNPACK_ROWS(name, TYPE, BYTES, QLOAD)                                                               \
    void name(int64_t K, int64_t nr, const void *w, size_t w_stride, uint8_t *dst) {                 \
        const int64_t nb = K / 32;                                                                     \
        const size_t row = rg_unpacked_row_bytes(TYPE, K);                                             \
        for (int64_t r = 0; r < nr; r++) {                                                             \
            const uint8_t *wr = (const uint8_t *)w + (size_t)r * w_stride;                             \
            uint8_t *d = dst + (size_t)r * row;                                                        \
            float *sc = (float *)(d + nb * 32);                                                        \
            for (int64_t b = 0; b < nb; b++) {                                                         \
                const uint8_t *wb = wr + b * (BYTES);                                                  \
                _mm256_storeu_si256((__m256i *)(d + b * 32), QLOAD(wb));                               \
                sc[b] = _cvtsh_ss((unsigned short)rd32(wb));                                           \
            }                                                                                          \
        }                                                                                              \
    }
UNPACK_ROWS(rg_unpack_rows_q4_0_avx2, RG_TYPE_Q4_0, Q4_0_BYTES, q4_0_values)
UNPACK_ROWS(rg_unpack_rows_q5_0_avx2, RG_TYPE_Q5_0, Q5_0_BYTES, q5_0_values)
static inline __m256i unpacked_at(const uint8_t *row, int64_t b, int64_t nb) {
    return (void)nb, _mm256_loadu_si256((const __m256i *)(row + b * 32));
}
static inline __m256 unpacked_scale(const uint8_t *row, int64_t b, int64_t nb) {
    return _mm256_broadcast_ss((const float *)(row + nb * 32) + b);
}
LEGACY_TWO_COLS(rg_dot_rows2_u4_avx2, 8, unpacked_at, unpacked_scale, 0)
LEGACY_TWO_COLS(rg_dot_rows2_u5_avx2, 16, unpacked_at, unpacked_scale, 0)

void rg_dot_rows_q4_1_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y) {
    const int64_t nb = K / 32;
    for (int64_t r = 0; r < nr; r += 4) {
        const uint8_t *p[4];
        group_rows(w, w_stride, r, nr, p);
        const uint8_t *next = p[0] + 4 * w_stride;
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        __m128 accm[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};  // lane 1: Σ m_x s_y
        const uint8_t *xb = x;
        for (int64_t b = 0; b < nb; b++, xb += Q8_1_BYTES) {
            prefetch_ahead(next, b, 4 * Q4_1_BYTES);
            const __m256i qy = _mm256_loadu_si256((const __m256i *)(xb + 4));
            const __m128 ys = _mm_cvtph_ps(_mm_cvtsi32_si128((int)rd32(xb)));  // d_y, s_y
            for (int i = 0; i < 4; i++) {
                const uint8_t *wb = p[i] + b * Q4_1_BYTES;
                const __m128 sc = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)rd32(wb))), ys);  // d_x d_y, m_x s_y
                acc[i] = _mm256_fmadd_ps(_mm256_broadcastss_ps(sc), _mm256_cvtepi32_ps(dot_u8_i8(nibbles(wb + 4), qy)),
                                         acc[i]);
                accm[i] = _mm_add_ps(accm[i], sc);
            }
        }
        // Lane 1 of each accm: [m0, m1, m2, m3].
        const __m128 m01 = _mm_unpacklo_ps(accm[0], accm[1]), m23 = _mm_unpacklo_ps(accm[2], accm[3]);
        const __m128 mm = _mm_shuffle_ps(m01, m23, _MM_SHUFFLE(3, 2, 3, 2));
        store_group(y, r, nr, _mm_add_ps(reduce4(acc[0], acc[1], acc[2], acc[3]), mm));
    }
}

// One Q8_0 block of a row: acc + d_x d_y maddubs(|x|, sign(y, x)).
static inline __m256 q8_0_block(const uint8_t *wb, const uint8_t *xb, __m256 dy, __m256 acc) {
    const __m256i qw = _mm256_loadu_si256((const __m256i *)(wb + 2));
    const __m256i qy = _mm256_loadu_si256((const __m256i *)(xb + 2));
    const __m256i s = dot_u8_i8(_mm256_abs_epi8(qw), _mm256_sign_epi8(qy, qw));
    return _mm256_fmadd_ps(_mm256_mul_ps(bcast_f16(wb), dy), _mm256_cvtepi32_ps(s), acc);
}

// ((v0+v4)+(v2+v6)) + ((v1+v5)+(v3+v7)) of one row's accumulator.
static inline float hsum8(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// Q8_0: see the file comment. Blocks alternate between two accumulators;
// rows longer than Q8_0_DY_MAX blocks widen the activation scales inline.
enum { ROW_PF = 4096, Q8_0_DY_MAX = 512 };
void rg_dot_rows_q8_0_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y) {
    const int64_t nb = K / 32;
    float dys[Q8_0_DY_MAX];
    const bool widened = nb <= Q8_0_DY_MAX;
    for (int64_t b = 0; widened && b < nb; b++) dys[b] = _cvtsh_ss((unsigned short)rd32((const uint8_t *)x + b * Q8_0_BYTES));
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *wb = (const uint8_t *)w + (size_t)r * w_stride, *xb = x;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int64_t b = 0;
        for (; b + 2 <= nb; b += 2, wb += 2 * Q8_0_BYTES, xb += 2 * Q8_0_BYTES) {
            _mm_prefetch((const char *)wb + ROW_PF, _MM_HINT_T0);
            const __m256 d0 = widened ? _mm256_broadcast_ss(&dys[b]) : bcast_f16(xb);
            const __m256 d1 = widened ? _mm256_broadcast_ss(&dys[b + 1]) : bcast_f16(xb + Q8_0_BYTES);
            a0 = q8_0_block(wb, xb, d0, a0);
            a1 = q8_0_block(wb + Q8_0_BYTES, xb + Q8_0_BYTES, d1, a1);
        }
        if (b < nb) a0 = q8_0_block(wb, xb, bcast_f16(xb), a0);
        y[r] = hsum8(_mm256_add_ps(a0, a1));
    }
}

// Q8_0 against NC activation rows at once: each weight block loaded once (its |q| and its scale widened once)
// for all of them, and each column's arithmetic that of rg_dot_rows_q8_0_avx2 for it alone (the same blocks into
// the same alternating accumulators, the same scales, the same final sum), so the bits are the same.
static inline void q8_0_cols(int NC, int64_t K, int64_t nr, const void *w, size_t w_stride, const void *const *x,
                             float *const *y) {
    const int64_t nb = K / 32;
    float dys[3][Q8_0_DY_MAX];
    const bool widened = nb <= Q8_0_DY_MAX;
    for (int c = 0; c < NC; c++)
        for (int64_t b = 0; widened && b < nb; b++)
            dys[c][b] = _cvtsh_ss((unsigned short)rd32((const uint8_t *)x[c] + b * Q8_0_BYTES));
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *wr = (const uint8_t *)w + (size_t)r * w_stride;
        __m256 a0[3], a1[3];
        for (int c = 0; c < NC; c++) a0[c] = _mm256_setzero_ps(), a1[c] = _mm256_setzero_ps();
        int64_t b = 0;
        for (; b + 2 <= nb; b += 2) {
            const uint8_t *wb = wr + b * Q8_0_BYTES;
            _mm_prefetch((const char *)wb + ROW_PF, _MM_HINT_T0);
            const __m256i qw0 = _mm256_loadu_si256((const __m256i *)(wb + 2));
            const __m256i qw1 = _mm256_loadu_si256((const __m256i *)(wb + Q8_0_BYTES + 2));
            const __m256i u0 = _mm256_abs_epi8(qw0), u1 = _mm256_abs_epi8(qw1);
            const __m256 s0 = bcast_f16(wb), s1 = bcast_f16(wb + Q8_0_BYTES);
            for (int c = 0; c < NC; c++) {
                const uint8_t *xb = (const uint8_t *)x[c] + b * Q8_0_BYTES;
                const __m256 d0 = widened ? _mm256_broadcast_ss(&dys[c][b]) : bcast_f16(xb);
                const __m256 d1 = widened ? _mm256_broadcast_ss(&dys[c][b + 1]) : bcast_f16(xb + Q8_0_BYTES);
                const __m256i p0 = dot_u8_i8(u0, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(xb + 2)), qw0));
                const __m256i p1 = dot_u8_i8(
                    u1, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(xb + Q8_0_BYTES + 2)), qw1));
                a0[c] = _mm256_fmadd_ps(_mm256_mul_ps(s0, d0), _mm256_cvtepi32_ps(p0), a0[c]);
                a1[c] = _mm256_fmadd_ps(_mm256_mul_ps(s1, d1), _mm256_cvtepi32_ps(p1), a1[c]);
            }
        }
        for (int c = 0; c < NC; c++) {
            if (b < nb) {
                const uint8_t *xb = (const uint8_t *)x[c] + b * Q8_0_BYTES;
                a0[c] = q8_0_block(wr + b * Q8_0_BYTES, xb, bcast_f16(xb), a0[c]);
            }
            y[c][r] = hsum8(_mm256_add_ps(a0[c], a1[c]));
        }
    }
}

void rg_dot_rows2_q8_0_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0, const void *x1,
                            float *y0, float *y1) {
    const void *const x[2] = {x0, x1};
    float *const y[2] = {y0, y1};
    q8_0_cols(2, K, nr, w, w_stride, x, y);
}

void rg_dot_rows3_q8_0_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *const x[3],
                            float *const y[3]) {
    q8_0_cols(3, K, nr, w, w_stride, x, y);
}

// ---------------------------------------------------------------------------
// F32, F16, BF16 weights against F32 activations.

static inline __m256 ld_f16(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256 ld_bf16(const uint8_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
static inline float sc_f16(const uint8_t *p) { return _cvtsh_ss((unsigned short)(p[0] | p[1] << 8)); }
static inline float sc_bf16(const uint8_t *p) {
    uint32_t u = (uint32_t)(p[0] | p[1] << 8) << 16;
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

// One row at a time, front to back, four accumulators over steps of 32, and a software
// prefetch of every line 1 KB ahead (the rows are contiguous, so past a row's end it
// fetches the next row's start). F32: on SmolLM2's layer shapes (2 threads, Zen 3) the
// one-row loop without any prefetch read 18.0-21.3 GB/s where a four-row kernel read
// 15.4-18.4 (interleaved, three runs). The prefetch: on the LFM2-350M F16 shape's 721 MB
// of matrices (2 threads, Sapphire Rapids, 2026-12-02, /tmp lab interleaved, two runs)
// the loop read 19.1-19.6 GB/s without it and 23.0-23.5 with it 1 KB ahead from a
// file's mapping in 4 KiB pages (256 B: 20.9, 512 B: 21.8-22.0, 2 KB: 21.7, 4 KB: 20.3-20.6;
// the hardware prefetchers stop at every 4 KiB page and the software one does not),
// and 26.3-26.8 against 29.9 from 2 MiB pages.
#define FLOAT_PREFETCH_AHEAD 1024
#define FLOAT_ONE_ROW(name, ES, LOAD, SCALAR)                                                                \
    void name(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y) {            \
        const float *xf = x;                                                                                \
        const int64_t k32 = K / 32 * 32, k8 = K / 8 * 8;                                                    \
        for (int64_t r = 0; r < nr; r++) {                                                                  \
            const uint8_t *p = (const uint8_t *)w + (size_t)r * w_stride;                                   \
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                                     \
            int64_t k = 0;                                                                                  \
            for (; k < k32; k += 32) {                                                                      \
                for (int o = 0; o < 32 * ES; o += 64) _mm_prefetch((const char *)p + k * ES + FLOAT_PREFETCH_AHEAD + o, _MM_HINT_T0); \
                a0 = _mm256_fmadd_ps(LOAD(p + k * ES), _mm256_loadu_ps(xf + k), a0);                        \
                a1 = _mm256_fmadd_ps(LOAD(p + (k + 8) * ES), _mm256_loadu_ps(xf + k + 8), a1);              \
                a2 = _mm256_fmadd_ps(LOAD(p + (k + 16) * ES), _mm256_loadu_ps(xf + k + 16), a2);            \
                a3 = _mm256_fmadd_ps(LOAD(p + (k + 24) * ES), _mm256_loadu_ps(xf + k + 24), a3);            \
            }                                                                                               \
            for (; k < k8; k += 8) a0 = _mm256_fmadd_ps(LOAD(p + k * ES), _mm256_loadu_ps(xf + k), a0);     \
            float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));                   \
            for (; k < K; k++) s += SCALAR(p + k * ES) * xf[k];                                             \
            y[r] = s;                                                                                       \
        }                                                                                                   \
    }

static inline __m256 ld_f32(const uint8_t *p) { return _mm256_loadu_ps((const float *)p); }
static inline float sc_f32(const uint8_t *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

FLOAT_ONE_ROW(rg_dot_rows_f32_avx2, 4, ld_f32, sc_f32)
FLOAT_ONE_ROW(rg_dot_rows_f16_avx2, 2, ld_f16, sc_f16)
FLOAT_ONE_ROW(rg_dot_rows_bf16_avx2, 2, ld_bf16, sc_bf16)

// Two activation columns per pass (dot_rows.h's rg_dot_rows2_fn): each weight vector loaded and
// widened once for both, then per column the FMAs, reduction and scalar tail of FLOAT_ONE_ROW in
// the same order into accumulators of its own, so each column's bits are the one-column kernel's.
// 8 accumulators and 4 weight vectors in the 16 registers.
#define FLOAT_TWO_COLS(name, ES, LOAD, SCALAR)                                                                \
    void name(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0, const void *x1,       \
              float *y0, float *y1) {                                                                       \
        const float *xa = x0, *xb = x1;                                                                     \
        const int64_t k32 = K / 32 * 32, k8 = K / 8 * 8;                                                    \
        for (int64_t r = 0; r < nr; r++) {                                                                  \
            const uint8_t *p = (const uint8_t *)w + (size_t)r * w_stride;                                   \
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0; \
            int64_t k = 0;                                                                                  \
            for (; k < k32; k += 32) {                                                                      \
                for (int o = 0; o < 32 * ES; o += 64) _mm_prefetch((const char *)p + k * ES + FLOAT_PREFETCH_AHEAD + o, _MM_HINT_T0); \
                const __m256 w0 = LOAD(p + k * ES), w1 = LOAD(p + (k + 8) * ES);                            \
                const __m256 w2 = LOAD(p + (k + 16) * ES), w3 = LOAD(p + (k + 24) * ES);                    \
                a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xa + k), a0);                                      \
                b0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xb + k), b0);                                      \
                a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xa + k + 8), a1);                                  \
                b1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xb + k + 8), b1);                                  \
                a2 = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xa + k + 16), a2);                                 \
                b2 = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xb + k + 16), b2);                                 \
                a3 = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xa + k + 24), a3);                                 \
                b3 = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xb + k + 24), b3);                                 \
            }                                                                                               \
            for (; k < k8; k += 8) {                                                                        \
                const __m256 wk = LOAD(p + k * ES);                                                         \
                a0 = _mm256_fmadd_ps(wk, _mm256_loadu_ps(xa + k), a0);                                      \
                b0 = _mm256_fmadd_ps(wk, _mm256_loadu_ps(xb + k), b0);                                      \
            }                                                                                               \
            float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));                   \
            float t = hsum8(_mm256_add_ps(_mm256_add_ps(b0, b1), _mm256_add_ps(b2, b3)));                   \
            for (; k < K; k++) {                                                                            \
                const float wk = SCALAR(p + k * ES);                                                        \
                s += wk * xa[k];                                                                            \
                t += wk * xb[k];                                                                            \
            }                                                                                               \
            y0[r] = s;                                                                                      \
            y1[r] = t;                                                                                      \
        }                                                                                                   \
    }

FLOAT_TWO_COLS(rg_dot_rows2_f32_avx2, 4, ld_f32, sc_f32)
FLOAT_TWO_COLS(rg_dot_rows2_f16_avx2, 2, ld_f16, sc_f16)
FLOAT_TWO_COLS(rg_dot_rows2_bf16_avx2, 2, ld_bf16, sc_bf16)

// Three columns per pass (rg_dot_rows3_fn): 12 accumulators, each weight vector loaded into the one
// register left and used by the three columns before the next, in FLOAT_ONE_ROW's order per column.
#define FMA3(W, K, I)                                                                                       \
    do {                                                                                                    \
        const __m256 w_ = (W);                                                                              \
        a##I = _mm256_fmadd_ps(w_, _mm256_loadu_ps(xa + (K)), a##I);                                        \
        b##I = _mm256_fmadd_ps(w_, _mm256_loadu_ps(xb + (K)), b##I);                                        \
        c##I = _mm256_fmadd_ps(w_, _mm256_loadu_ps(xc + (K)), c##I);                                        \
    } while (0)
#define FLOAT_THREE_COLS(name, ES, LOAD, SCALAR)                                                              \
    void name(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *const x[3], float *const y[3]) { \
        const float *xa = x[0], *xb = x[1], *xc = x[2];                                                     \
        const int64_t k32 = K / 32 * 32, k8 = K / 8 * 8;                                                    \
        for (int64_t r = 0; r < nr; r++) {                                                                  \
            const uint8_t *p = (const uint8_t *)w + (size_t)r * w_stride;                                   \
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0; \
            __m256 c0 = a0, c1 = a0, c2 = a0, c3 = a0;                                                      \
            int64_t k = 0;                                                                                  \
            for (; k < k32; k += 32) {                                                                      \
                for (int o = 0; o < 32 * ES; o += 64) _mm_prefetch((const char *)p + k * ES + FLOAT_PREFETCH_AHEAD + o, _MM_HINT_T0); \
                FMA3(LOAD(p + k * ES), k, 0);                                                               \
                FMA3(LOAD(p + (k + 8) * ES), k + 8, 1);                                                     \
                FMA3(LOAD(p + (k + 16) * ES), k + 16, 2);                                                   \
                FMA3(LOAD(p + (k + 24) * ES), k + 24, 3);                                                   \
            }                                                                                               \
            for (; k < k8; k += 8) FMA3(LOAD(p + k * ES), k, 0);                                            \
            float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));                   \
            float t = hsum8(_mm256_add_ps(_mm256_add_ps(b0, b1), _mm256_add_ps(b2, b3)));                   \
            float u = hsum8(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)));                   \
            for (; k < K; k++) {                                                                            \
                const float wk = SCALAR(p + k * ES);                                                        \
                s += wk * xa[k];                                                                            \
                t += wk * xb[k];                                                                            \
                u += wk * xc[k];                                                                            \
            }                                                                                               \
            y[0][r] = s;                                                                                    \
            y[1][r] = t;                                                                                    \
            y[2][r] = u;                                                                                    \
        }                                                                                                   \
    }

FLOAT_THREE_COLS(rg_dot_rows3_f32_avx2, 4, ld_f32, sc_f32)
FLOAT_THREE_COLS(rg_dot_rows3_f16_avx2, 2, ld_f16, sc_f16)
FLOAT_THREE_COLS(rg_dot_rows3_bf16_avx2, 2, ld_bf16, sc_bf16)

#else  // built without AVX2: never called (rg_cpu_dot_rows returns NULL)

const int rg_dot_rows_avx2_built = 0;

#define STUB(name) \
    void name(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y) { \
        (void)K, (void)nr, (void)w, (void)w_stride, (void)x, (void)y;                         \
    }
STUB(rg_dot_rows_f32_avx2)
STUB(rg_dot_rows_f16_avx2)
STUB(rg_dot_rows_bf16_avx2)
STUB(rg_dot_rows_q4_0_avx2)
STUB(rg_dot_rows_q4_1_avx2)
STUB(rg_dot_rows_q5_0_avx2)
STUB(rg_dot_rows_q8_0_avx2)

#define STUB2(name)                                                                                          \
    void name(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x0, const void *x1, float *y0, \
              float *y1) {                                                                                   \
        (void)K, (void)nr, (void)w, (void)w_stride, (void)x0, (void)x1, (void)y0, (void)y1;                  \
    }
STUB2(rg_dot_rows2_f32_avx2)
STUB2(rg_dot_rows2_f16_avx2)
STUB2(rg_dot_rows2_bf16_avx2)
STUB2(rg_dot_rows2_q4_0_avx2)
STUB2(rg_dot_rows2_q5_0_avx2)
STUB2(rg_dot_rows2_q8_0_avx2)
STUB2(rg_dot_rows2_u4_avx2)
STUB2(rg_dot_rows2_u5_avx2)
void rg_unpack_rows_q4_0_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, uint8_t *dst) {
    (void)K, (void)nr, (void)w, (void)w_stride, (void)dst;
}
void rg_unpack_rows_q5_0_avx2(int64_t K, int64_t nr, const void *w, size_t w_stride, uint8_t *dst) {
    (void)K, (void)nr, (void)w, (void)w_stride, (void)dst;
}
#define STUB3(name)                                                                                    \
    void name(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *const x[3], float *const y[3]) { \
        (void)K, (void)nr, (void)w, (void)w_stride, (void)x, (void)y;                                  \
    }
STUB3(rg_dot_rows3_f32_avx2)
STUB3(rg_dot_rows3_f16_avx2)
STUB3(rg_dot_rows3_bf16_avx2)
STUB3(rg_dot_rows3_q8_0_avx2)

#endif
