// ops_attn_decode_avx2.c - the two products of ATTN_DECODE (ops_attn_decode.c,
// which describes the op), for the G query heads that share a kv head:
//
//   scores  s[g][j] = k_j . q_g               a few cached keys at a time
//   values  o[g][d] = sum_j vt_d[j] p_g[j]    a few value rows at a time
//
// Each cached row is loaded (and widened from F16) once per step of 8 for
// every head of the pass (3 heads x 3 rows or 2 x 4: one accumulator per
// (head, row), which with the widened rows and the vector fit the 16
// registers), and a head's sums of the rows are reduced together (three
// horizontal adds for up to four rows instead of two or more per row). Heads
// beyond 3 take further passes.
// Built without AVX2 these do nothing and rg_ad_avx2_built is 0.
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

extern const int rg_ad_avx2_built;
void rg_attn_scores_avx2(const char *k, size_t k_stride, bool f16, int64_t n, const float *q, size_t q_stride, int G,
                         int64_t Dh, float *s, size_t s_stride);
void rg_attn_values_avx2(const char *vt, size_t v_stride, bool f16, int64_t n, const float *p, size_t p_stride, int G,
                         int64_t Dh, float *o, size_t o_stride);

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)

#include <immintrin.h>

const int rg_ad_avx2_built = 1;

#define INLINE static inline __attribute__((always_inline))

INLINE __m256 load8(const char *p, bool f16) {
    return f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)) : _mm256_loadu_ps((const float *)p);
}
INLINE float load1(const char *p, bool f16) {
    if (f16) {
        uint16_t h;
        memcpy(&h, p, 2);
        return _cvtsh_ss(h);
    }
    float f;
    memcpy(&f, p, 4);
    return f;
}

// [hsum(a0), hsum(a1), hsum(a2), hsum(a3)], each ((v0+v1)+(v2+v3)) + ((v4+v5)+(v6+v7)).
INLINE __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

// out[g * out_stride + r] = sum_i row_r[i] x_g[i] for r < nr <= R <= 4, g < G:
// rows of n elements (f16 or f32, `stride` bytes apart), x_g = x + g * x_stride
// f32. Rows past nr repeat the last one (computed, not stored). G x R
// accumulators, R widened rows and the x vector must fit the 16 registers:
// R = 4 for G <= 2, R = 3 for G = 3 (with 4 rows one accumulator went to the
// stack, a store and reload per step, and the loop ran at a third of its speed).
INLINE void block(const int G, const int R, const bool f16, const char *rows, size_t stride, int nr, int64_t n,
                  const float *x, size_t x_stride, float *out, size_t out_stride) {
    const size_t es = f16 ? 2 : 4;
    const char *rp[4];
    for (int r = 0; r < 4; r++) rp[r] = rows + (size_t)(r < nr ? r : nr - 1) * stride;
    __m256 a[3][4];
    for (int g = 0; g < G; g++)
        for (int r = 0; r < R; r++) a[g][r] = _mm256_setzero_ps();
    const int64_t n8 = n / 8 * 8;
    for (int64_t i = 0; i < n8; i += 8) {
        __m256 v[4];
        for (int r = 0; r < R; r++) v[r] = load8(rp[r] + i * es, f16);
        for (int g = 0; g < G; g++) {
            const __m256 xg = _mm256_loadu_ps(x + (size_t)g * x_stride + i);
            for (int r = 0; r < R; r++) a[g][r] = _mm256_fmadd_ps(v[r], xg, a[g][r]);
        }
    }
    // The nr sums of a head are stored together (one vector store, masked when
    // nr < 4): a scalar loop per row here took as long as the products.
    const __m128i keep = _mm_cmpgt_epi32(_mm_set1_epi32(nr), _mm_setr_epi32(0, 1, 2, 3));
    for (int g = 0; g < G; g++) {
        __m128 sum = reduce4(a[g][0], a[g][1 % R], a[g][2 % R], a[g][3 % R]);
        if (n8 < n) {  // the last n % 8 terms of each row, in order, added to its sum
            const float *xg = x + (size_t)g * x_stride;
            float tail[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int r = 0; r < nr; r++)
                for (int64_t i = n8; i < n; i++) tail[r] += load1(rp[r] + i * es, f16) * xg[i];
            sum = _mm_add_ps(sum, _mm_loadu_ps(tail));
        }
        float *o = out + (size_t)g * out_stride;
        if (nr == 4) _mm_storeu_ps(o, sum);
        else _mm_maskstore_ps(o, keep, sum);
    }
}

// All rows of a product, R at a time, for G <= 3 heads (G and f16 constant after inlining).
INLINE void rows_g(const int G, const bool f16, const char *rows, size_t stride, int64_t nrows, int64_t n,
                   const float *x, size_t x_stride, float *out, size_t out_stride) {
    const int R = G == 3 ? 3 : 4;
    for (int64_t r = 0; r < nrows; r += R)
        block(G, R, f16, rows + (size_t)r * stride, stride, (int)(nrows - r < R ? nrows - r : R), n, x, x_stride,
              out + r, out_stride);
}

// Heads in passes of up to 3, each pass with a constant G and type.
static void product(const char *rows, size_t stride, bool f16, int64_t nrows, int64_t n, const float *x,
                    size_t x_stride, int G, float *out, size_t out_stride) {
    for (int g0 = 0; g0 < G; g0 += 3) {
        const float *xg = x + (size_t)g0 * x_stride;
        float *og = out + (size_t)g0 * out_stride;
        const int gp = G - g0 < 3 ? G - g0 : 3;
        if (f16) {
            if (gp == 3) rows_g(3, true, rows, stride, nrows, n, xg, x_stride, og, out_stride);
            else if (gp == 2) rows_g(2, true, rows, stride, nrows, n, xg, x_stride, og, out_stride);
            else rows_g(1, true, rows, stride, nrows, n, xg, x_stride, og, out_stride);
        } else {
            if (gp == 3) rows_g(3, false, rows, stride, nrows, n, xg, x_stride, og, out_stride);
            else if (gp == 2) rows_g(2, false, rows, stride, nrows, n, xg, x_stride, og, out_stride);
            else rows_g(1, false, rows, stride, nrows, n, xg, x_stride, og, out_stride);
        }
    }
}

void rg_attn_scores_avx2(const char *k, size_t k_stride, bool f16, int64_t n, const float *q, size_t q_stride, int G,
                         int64_t Dh, float *s, size_t s_stride) {
    product(k, k_stride, f16, n, Dh, q, q_stride, G, s, s_stride);  // rows: the n keys, Dh terms each
}

void rg_attn_values_avx2(const char *vt, size_t v_stride, bool f16, int64_t n, const float *p, size_t p_stride, int G,
                         int64_t Dh, float *o, size_t o_stride) {
    product(vt, v_stride, f16, Dh, n, p, p_stride, G, o, o_stride);  // rows: the Dh value rows, n terms each
}

#else

const int rg_ad_avx2_built = 0;

void rg_attn_scores_avx2(const char *k, size_t k_stride, bool f16, int64_t n, const float *q, size_t q_stride, int G,
                         int64_t Dh, float *s, size_t s_stride) {
    (void)k, (void)k_stride, (void)f16, (void)n, (void)q, (void)q_stride, (void)G, (void)Dh, (void)s, (void)s_stride;
}
void rg_attn_values_avx2(const char *vt, size_t v_stride, bool f16, int64_t n, const float *p, size_t p_stride, int G,
                         int64_t Dh, float *o, size_t o_stride) {
    (void)vt, (void)v_stride, (void)f16, (void)n, (void)p, (void)p_stride, (void)G, (void)Dh, (void)o, (void)o_stride;
}

#endif
