// ops_attn_decode_avx2.c - the dot products of ATTN_DECODE (ops_attn_decode.c,
// which describes the op): one row of a KV cache (a key row, or a row of the
// transposed values) against the G query heads that share its kv head, the
// row loaded (and widened from F16) once for all G. Each dot is summed exactly
// as dot_rows_avx2.c's FLOAT_ROWS sums one row (two accumulators for the even
// and odd steps of 8, one more step of 8 into the first, the tree
// ((v0+v1)+(v2+v3))+((v4+v5)+(v6+v7)), then the tail in order), so the op gives
// the bits of the MUL_MAT, SOFT_MAX, MUL_MAT it replaces. Built without AVX2
// this does nothing.
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

extern const int rg_ad_avx2_built;
void rg_attn_dots_avx2(int64_t K, const char *w, bool f16, const float *x, size_t x_stride, int64_t G, float *out,
                       size_t out_stride);

#if defined(__AVX2__)

#include <immintrin.h>

const int rg_ad_avx2_built = 1;

static inline __m256 load8(const char *p, bool f16) {
    return f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)) : _mm256_loadu_ps((const float *)p);
}

static inline float load1(const char *p, bool f16) {
    if (f16) {
        uint16_t h;
        memcpy(&h, p, 2);
        return _cvtsh_ss(h);
    }
    float f;
    memcpy(&f, p, 4);
    return f;
}

// ((v0+v1)+(v2+v3)) + ((v4+v5)+(v6+v7)), as dot_rows_avx2.c's reduce4.
static inline float tree8(__m256 v) {
    __m256 t = _mm256_hadd_ps(v, v);
    t = _mm256_hadd_ps(t, t);
    return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
}

// out[g * out_stride] = sum_k w[k] x[g * x_stride + k] for g < G <= 4, G a
// constant after inlining, so the accumulators stay in registers (a loop over
// a run-time G kept them in memory: a store-load chain per FMA, 2x slower).
static inline __attribute__((always_inline)) void dots_g(const int G, int64_t K, const char *w, bool f16, const float *x,
                                                         size_t x_stride, float *out, size_t out_stride) {
    const size_t es = f16 ? 2 : 4;
    const int64_t k16 = K / 16 * 16, k8 = K / 8 * 8;
    __m256 a[4], b[4];
    for (int g = 0; g < G; g++) a[g] = b[g] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k < k16; k += 16) {
        const __m256 w0 = load8(w + (size_t)k * es, f16), w1 = load8(w + (size_t)(k + 8) * es, f16);
        for (int g = 0; g < G; g++) {
            const float *xg = x + (size_t)g * x_stride + k;
            a[g] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xg), a[g]);
            b[g] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xg + 8), b[g]);
        }
    }
    if (k < k8) {
        const __m256 w0 = load8(w + (size_t)k * es, f16);
        for (int g = 0; g < G; g++) a[g] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + (size_t)g * x_stride + k), a[g]);
        k += 8;
    }
    for (int g = 0; g < G; g++) {
        float s = tree8(_mm256_add_ps(a[g], b[g]));
        if (k < K) {
            float t = 0.0f;
            for (int64_t kk = k; kk < K; kk++) t += load1(w + (size_t)kk * es, f16) * x[(size_t)g * x_stride + kk];
            s = s + t;
        }
        out[(size_t)g * out_stride] = s;
    }
}

// out[g * out_stride] = sum_k w[k] x[g * x_stride + k] for g < G <= AD_GMAX;
// w: K elements of F16 or F32. Heads in passes of up to 4.
void rg_attn_dots_avx2(int64_t K, const char *w, bool f16, const float *x, size_t x_stride, int64_t G, float *out,
                       size_t out_stride) {
    for (int64_t g0 = 0; g0 < G; g0 += 4) {
        const float *xg = x + (size_t)g0 * x_stride;
        float *og = out + (size_t)g0 * out_stride;
        switch (G - g0 < 4 ? G - g0 : 4) {
        case 1: dots_g(1, K, w, f16, xg, x_stride, og, out_stride); break;
        case 2: dots_g(2, K, w, f16, xg, x_stride, og, out_stride); break;
        case 3: dots_g(3, K, w, f16, xg, x_stride, og, out_stride); break;
        default: dots_g(4, K, w, f16, xg, x_stride, og, out_stride); break;
        }
    }
}

#else

const int rg_ad_avx2_built = 0;

void rg_attn_dots_avx2(int64_t K, const char *w, bool f16, const float *x, size_t x_stride, int64_t G, float *out,
                       size_t out_stride) {
    (void)K, (void)w, (void)f16, (void)x, (void)x_stride, (void)G, (void)out, (void)out_stride;
}

#endif
