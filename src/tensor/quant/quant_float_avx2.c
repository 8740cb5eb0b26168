// quant_float_avx2.c - F32/F16/BF16 weight rows dotted with F32 activations,
// four 8-lane FMA accumulators (32 elements per step) to hide FMA latency.
#include <stdint.h>

#include "tensor/half.h"
#include "tensor/quant/quant.h"

void rg_vec_dot_f32_f32_avx2(int64_t n, float *s, const void *x, const void *y);
void rg_vec_dot_f16_f32_avx2(int64_t n, float *s, const void *x, const void *y);
void rg_vec_dot_bf16_f32_avx2(int64_t n, float *s, const void *x, const void *y);

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

static inline float hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

static inline __m256 load_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256 load_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
static inline __m256 load_f32(const float *p) { return _mm256_loadu_ps(p); }

#define DOT_BODY(T, LOAD, SCALAR)                                                        \
    const T *a = x;                                                                      \
    const float *b = y;                                                                  \
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;                          \
    int64_t i = 0;                                                                       \
    for (; i + 32 <= n; i += 32) {                                                       \
        s0 = _mm256_fmadd_ps(LOAD(a + i), _mm256_loadu_ps(b + i), s0);                   \
        s1 = _mm256_fmadd_ps(LOAD(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);           \
        s2 = _mm256_fmadd_ps(LOAD(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);         \
        s3 = _mm256_fmadd_ps(LOAD(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);         \
    }                                                                                    \
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(LOAD(a + i), _mm256_loadu_ps(b + i), s0); \
    float tail = 0;                                                                      \
    for (; i < n; i++) tail += SCALAR(a[i]) * b[i];                                      \
    *s = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3))) + tail;

#define ID(v) (v)
void rg_vec_dot_f32_f32_avx2(int64_t n, float *s, const void *x, const void *y) { DOT_BODY(float, load_f32, ID) }
void rg_vec_dot_f16_f32_avx2(int64_t n, float *s, const void *x, const void *y) {
    DOT_BODY(uint16_t, load_f16, rg_fp16_to_fp32)
}
void rg_vec_dot_bf16_f32_avx2(int64_t n, float *s, const void *x, const void *y) {
    DOT_BODY(uint16_t, load_bf16, rg_bf16_to_fp32)
}
#else
void rg_vec_dot_f32_f32_ref(int64_t n, float *s, const void *x, const void *y);
void rg_vec_dot_f16_f32_ref(int64_t n, float *s, const void *x, const void *y);
void rg_vec_dot_bf16_f32_ref(int64_t n, float *s, const void *x, const void *y);
void rg_vec_dot_f32_f32_avx2(int64_t n, float *s, const void *x, const void *y) { rg_vec_dot_f32_f32_ref(n, s, x, y); }
void rg_vec_dot_f16_f32_avx2(int64_t n, float *s, const void *x, const void *y) { rg_vec_dot_f16_f32_ref(n, s, x, y); }
void rg_vec_dot_bf16_f32_avx2(int64_t n, float *s, const void *x, const void *y) { rg_vec_dot_bf16_f32_ref(n, s, x, y); }
#endif
