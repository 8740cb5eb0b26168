// gemm_int8_avx512.c - a panel of 16 Q4_0, Q5_0, Q8_0, Q4_K or Q6_K weight rows times Q8_0 columns on
// VPDPBUSD (AVX-512 VNNI on 512-bit registers, one row per 32-bit lane); the arithmetic of
// gemm_int8.h, bit for bit rg_int8_panel_mul_ref's. Also the panel packing, vectorized for the
// byte-code types.
//
// Per sub-block of 32 and column: eight VPDPBUSD (unsigned 4-bit codes of the 16 rows against 4
// broadcast activation codes), one convert, one multiply of the scales and one FMA (Q4_K: a
// second FMA for the minimum). Four columns share each sub-block's unpacked codes. On Sapphire
// Rapids the 8-row panels on 256-bit registers this replaced gave LFM2-350M Q4_K_M prompts
// 522-553 tok/s beside llama-bench's 495-509; the integer sums are exact and every output's
// float steps run in sub-block order whatever the panel width, so the bits are unchanged.
#include <string.h>

#include "cpu/gemm_int8.h"
#include "retrograd.h"

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#include <immintrin.h>

#include "cpu/transpose8_avx2.h"

static inline __m512i bcast4(const int8_t *q) {
    int32_t v;
    memcpy(&v, q, 4);
    return _mm512_set1_epi32(v);
}

enum { GROUP = 4 * RG_INT8_PANEL };  // bytes of 4 codes of the panel's 16 rows: one register

// sum over the 8 groups g of codes u[g] (4 per row lane) times activation codes q[4g .. 4g + 3].
static inline __m512i dot8(const __m512i *u, const int8_t *q) {
    __m512i s = _mm512_setzero_si512();
    for (int g = 0; g < 8; g++) s = _mm512_dpbusd_epi32(s, u[g], bcast4(q + 4 * g));
    return s;
}

// 8 loads of 64 bytes: their low nibbles into lo[0..8), high nibbles into hi[0..8).
static inline void unpack8(const uint8_t *codes, __m512i lo[8], __m512i hi[8]) {
    const __m512i low = _mm512_set1_epi8(0x0F);
    for (int g = 0; g < 8; g++) {
        __m512i v = _mm512_loadu_si512((const void *)(codes + GROUP * g));
        lo[g] = _mm512_and_si512(v, low);
        hi[g] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
    }
}

static inline void store_rows(float *y, __m512 v, int rows) {
    if (rows == RG_INT8_PANEL) _mm512_storeu_ps(y, v);
    else _mm512_mask_storeu_ps(y, (__mmask16)((1u << rows) - 1u), v);
}

// Q4_0: one block = 4 loads; codes 0..15 in the low nibbles of groups 0..3, 16..31 in the high ones.
static inline __m512 q4_0_block(const __m512i u[8], const rg_q8_cols *c, int64_t n, int64_t b, __m512 dw, __m512 acc) {
    const int8_t *q = c->q + n * c->K + b * 32;
    const int64_t cb = n * c->nb + b;
    __m512i s = _mm512_setzero_si512();
    for (int j = 0; j < 4; j++) {
        s = _mm512_dpbusd_epi32(s, u[j], bcast4(q + 4 * j));
        s = _mm512_dpbusd_epi32(s, u[4 + j], bcast4(q + 16 + 4 * j));
    }
    s = _mm512_sub_epi32(s, _mm512_set1_epi32(8 * c->sum[cb]));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(c->d[cb])), acc);
}

static void mul_q4_0(const rg_int8_panel *p, const rg_q8_cols *c, int rows, float *y, int64_t ldy) {
    const __m512i low = _mm512_set1_epi8(0x0F);
    for (int64_t n0 = 0; n0 < c->N; n0 += 4) {
        const int nc = c->N - n0 < 4 ? (int)(c->N - n0) : 4;
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int64_t b = 0; b < p->n_sub; b++) {
            __m512i u[8];
            for (int j = 0; j < 4; j++) {
                __m512i v = _mm512_loadu_si512((const void *)(p->codes + b * 4 * GROUP + GROUP * j));
                u[j] = _mm512_and_si512(v, low);
                u[4 + j] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
            }
            const __m512 dw = _mm512_loadu_ps(p->scale + b * RG_INT8_PANEL);
            if (nc == 4) {
                for (int i = 0; i < 4; i++) acc[i] = q4_0_block(u, c, n0 + i, b, dw, acc[i]);
            } else {
                for (int i = 0; i < nc; i++) acc[i] = q4_0_block(u, c, n0 + i, b, dw, acc[i]);
            }
        }
        for (int i = 0; i < nc; i++) store_rows(y + (n0 + i) * ldy, acc[i], rows);
    }
}

// Q4_K: sub-block s with codes u (8 groups), scales sc, minimums mn.
static inline __m512 q4_K_sub(const __m512i u[8], const rg_q8_cols *c, int64_t n, int64_t s, __m512 sc, __m512 mn,
                              __m512 acc) {
    const int64_t cb = n * c->nb + s;
    __m512i is = dot8(u, c->q + n * c->K + s * 32);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(sc, _mm512_set1_ps(c->d[cb])), acc);
    return _mm512_fnmadd_ps(mn, _mm512_set1_ps(c->dsum[cb]), acc);
}

static void mul_q4_K(const rg_int8_panel *p, const rg_q8_cols *c, int rows, float *y, int64_t ldy) {
    for (int64_t n0 = 0; n0 < c->N; n0 += 4) {
        const int nc = c->N - n0 < 4 ? (int)(c->N - n0) : 4;
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int64_t pr = 0; pr < p->n_sub / 2; pr++) {
            __m512i lo[8], hi[8];
            unpack8(p->codes + pr * 8 * GROUP, lo, hi);
            const int64_t s0 = 2 * pr, s1 = s0 + 1;
            const __m512 sc0 = _mm512_loadu_ps(p->scale + s0 * RG_INT8_PANEL), mn0 = _mm512_loadu_ps(p->min + s0 * RG_INT8_PANEL);
            const __m512 sc1 = _mm512_loadu_ps(p->scale + s1 * RG_INT8_PANEL), mn1 = _mm512_loadu_ps(p->min + s1 * RG_INT8_PANEL);
            for (int i = 0; i < nc; i++) {
                acc[i] = q4_K_sub(lo, c, n0 + i, s0, sc0, mn0, acc[i]);
                acc[i] = q4_K_sub(hi, c, n0 + i, s1, sc1, mn1, acc[i]);
            }
        }
        for (int i = 0; i < nc; i++) store_rows(y + (n0 + i) * ldy, acc[i], rows);
    }
}

// Q5_0, Q8_0, Q6_K: one block = 8 loads of byte codes, group g holding codes 4g..4g+3 of the 16
// rows. Q6_K sums each half of 16 (groups 0-3, 4-7) apart and scales it by its int8 scale in
// integers: sc_0 (sum_0 - 32 sx_0) + sc_1 (sum_1 - 32 sx_1), then the one FMA.
static void mul_bytes(const rg_int8_panel *p, const rg_q8_cols *c, int rows, float *y, int64_t ldy) {
    const bool q6 = p->type == RG_TYPE_Q6_K;
    for (int64_t n0 = 0; n0 < c->N; n0 += 4) {
        const int nc = c->N - n0 < 4 ? (int)(c->N - n0) : 4;
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int64_t b = 0; b < p->n_sub; b++) {
            __m512i u[8];
            for (int g = 0; g < 8; g++) u[g] = _mm512_loadu_si512((const void *)(p->codes + b * 8 * GROUP + GROUP * g));
            const __m512 dw = _mm512_loadu_ps(p->scale + b * RG_INT8_PANEL);
            const __m512i s0 = _mm512_loadu_si512((const void *)(p->sc16 + 2 * b * RG_INT8_PANEL));
            const __m512i s1 = _mm512_loadu_si512((const void *)(p->sc16 + (2 * b + 1) * RG_INT8_PANEL));
            for (int i = 0; i < nc; i++) {
                const int64_t n = n0 + i, cb = n * c->nb + b;
                const int8_t *q = c->q + n * c->K + b * 32;
                __m512i is;
                if (q6) {
                    __m512i ia = _mm512_setzero_si512(), ib = _mm512_setzero_si512();
                    for (int g = 0; g < 4; g++) {
                        ia = _mm512_dpbusd_epi32(ia, u[g], bcast4(q + 4 * g));
                        ib = _mm512_dpbusd_epi32(ib, u[4 + g], bcast4(q + 16 + 4 * g));
                    }
                    ia = _mm512_mullo_epi32(s0, _mm512_sub_epi32(ia, _mm512_set1_epi32(p->offset * c->sum16[2 * cb])));
                    ib = _mm512_mullo_epi32(s1, _mm512_sub_epi32(ib, _mm512_set1_epi32(p->offset * c->sum16[2 * cb + 1])));
                    is = _mm512_add_epi32(ia, ib);
                } else {
                    is = _mm512_sub_epi32(dot8(u, q), _mm512_set1_epi32(p->offset * c->sum[cb]));
                }
                acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(dw, _mm512_set1_ps(c->d[cb])), acc[i]);
            }
        }
        for (int i = 0; i < nc; i++) store_rows(y + (n0 + i) * ldy, acc[i], rows);
    }
}

void rg_int8_panel_mul_avx512(const rg_int8_panel *p, const rg_q8_cols *c, int rows, float *y, int64_t ldy) {
    if (p->type == RG_TYPE_Q4_0) mul_q4_0(p, c, rows, y, ldy);
    else if (p->type == RG_TYPE_Q4_K) mul_q4_K(p, c, rows, y, ldy);
    else mul_bytes(p, c, rows, y, ldy);
}

// The 32 codes of Q6_K sub-block sb (0..7) of the superblock at blk, in element order (quant_k.c's
// layout: low4 from ql's low or high nibbles, high2 from qh's bit pair k).
static inline __m256i q6_K_codes(const uint8_t *blk, int sb) {
    const int h = sb / 4, k = sb % 4;
    const __m256i low = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(0x03);
    __m256i ql = _mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32 * (k & 1)));
    if (k >> 1) ql = _mm256_srli_epi16(ql, 4);
    const __m256i qh = _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h)), 2 * k), two);
    return _mm256_or_si256(_mm256_and_si256(ql, low), _mm256_slli_epi16(qh, 4));
}

// The 32 codes of a Q5_0 or Q8_0 block in element order, + the offset (gemm_int8.h).
static inline __m256i block_codes(uint32_t type, const uint8_t *blk) {
    if (type == RG_TYPE_Q8_0)
        return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 2)), _mm256_set1_epi8((char)0x80));
    const __m128i qs = _mm_loadu_si128((const __m128i *)(blk + 6)), low = _mm_set1_epi8(0x0F);
    const __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), low), _mm_and_si128(qs, low));
    uint32_t qh;
    memcpy(&qh, blk + 2, 4);
    return _mm256_or_si256(nib, _mm256_and_si256(_mm256_movm_epi8((__mmask32)qh), _mm256_set1_epi8(0x10)));
}

void rg_int8_panel_pack_avx512(rg_int8_panel *p, const void *w, size_t w_stride, int64_t m0, int64_t M) {
    if (p->type != RG_TYPE_Q5_0 && p->type != RG_TYPE_Q8_0 && p->type != RG_TYPE_Q6_K) {
        rg_int8_panel_pack(p, w, w_stride, m0, M);  // 4-byte copies already
        return;
    }
    const bool q6 = p->type == RG_TYPE_Q6_K;
    if (!q6) memset(p->sc16, 0, sizeof(int32_t) * (size_t)(2 * p->n_sub * RG_INT8_PANEL));
    const size_t bytes = p->type == RG_TYPE_Q5_0 ? 22 : 34;
    const int live = M - m0 < RG_INT8_PANEL ? (int)(M - m0) : RG_INT8_PANEL;
    for (int64_t b = 0; b < p->n_sub; b++) {
        for (int half = 0; half < 2; half++) {  // rows 0-7, then 8-15: each 8x8 transpose fills half of every group
            __m256i v[8];
            for (int i = 0; i < 8; i++) {
                const int r = 8 * half + i;
                if (r >= live) {
                    v[i] = _mm256_setzero_si256();
                    p->scale[b * RG_INT8_PANEL + r] = 0.0f;
                    if (q6) p->sc16[2 * b * RG_INT8_PANEL + r] = p->sc16[(2 * b + 1) * RG_INT8_PANEL + r] = 0;
                    continue;
                }
                const uint8_t *row = (const uint8_t *)w + (size_t)(m0 + r) * w_stride;
                uint16_t h;
                if (q6) {  // 210-byte superblocks of 8 sub-blocks: d f16 @208, int8 scales @192
                    const uint8_t *blk = row + (size_t)(b / 8) * 210;
                    v[i] = q6_K_codes(blk, (int)(b % 8));
                    memcpy(&h, blk + 208, 2);
                    p->sc16[2 * b * RG_INT8_PANEL + r] = (int8_t)blk[192 + 2 * (b % 8)];
                    p->sc16[(2 * b + 1) * RG_INT8_PANEL + r] = (int8_t)blk[192 + 2 * (b % 8) + 1];
                } else {
                    const uint8_t *blk = row + (size_t)b * bytes;
                    v[i] = block_codes(p->type, blk);
                    memcpy(&h, blk, 2);
                }
                p->scale[b * RG_INT8_PANEL + r] = _cvtsh_ss(h);
            }
            rg_transpose8_epi32(v);
            for (int g = 0; g < 8; g++) _mm256_storeu_si256((__m256i *)(p->codes + b * 8 * GROUP + GROUP * g + 32 * half), v[g]);
        }
        _mm512_storeu_ps(p->min + b * RG_INT8_PANEL, _mm512_setzero_ps());
    }
}

#else  // a compiler without AVX-512 VNNI: never called (rg_gemm_int8_supports is false)

void rg_int8_panel_pack_avx512(rg_int8_panel *p, const void *w, size_t w_stride, int64_t m0, int64_t M) {
    rg_int8_panel_pack(p, w, w_stride, m0, M);
}

void rg_int8_panel_mul_avx512(const rg_int8_panel *p, const rg_q8_cols *c, int rows, float *y, int64_t ldy) {
    rg_int8_panel_mul_ref(p, c, rows, y, ldy);
}

#endif
