// quant_float.c - the plain float types in the quant table: F32, F16, BF16.
// Their dot products take F32 activations directly (no 8-bit detour): the
// weight is widened exactly and multiplied in f32.
#include <string.h>

#include "base/cpu.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"
#include "tensor/quant/quant_funcs.h"

void rg_vec_dot_f32_f32_avx2(int64_t n, float *s, const void *x, const void *y);
void rg_vec_dot_f16_f32_avx2(int64_t n, float *s, const void *x, const void *y);
void rg_vec_dot_bf16_f32_avx2(int64_t n, float *s, const void *x, const void *y);

void rg_dequant_row_f32_ref(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
void rg_dequant_row_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
void rg_dequant_row_f16_ref(const void *src, float *dst, int64_t n) { rg_fp16_to_fp32_row_scalar(src, dst, n); }
void rg_dequant_row_f16(const void *src, float *dst, int64_t n) { rg_fp16_to_fp32_row(src, dst, n); }
void rg_dequant_row_bf16_ref(const void *src, float *dst, int64_t n) { rg_bf16_to_fp32_row_scalar(src, dst, n); }
void rg_dequant_row_bf16(const void *src, float *dst, int64_t n) { rg_bf16_to_fp32_row(src, dst, n); }

size_t rg_quantize_row_f32(const float *src, void *dst, int64_t n, const float *imatrix) {
    (void)imatrix;
    memcpy(dst, src, (size_t)n * 4);
    return (size_t)n * 4;
}
size_t rg_quantize_row_f16(const float *src, void *dst, int64_t n, const float *imatrix) {
    (void)imatrix;
    rg_fp32_to_fp16_row(src, dst, n);
    return (size_t)n * 2;
}
size_t rg_quantize_row_bf16(const float *src, void *dst, int64_t n, const float *imatrix) {
    (void)imatrix;
    rg_fp32_to_bf16_row(src, dst, n);
    return (size_t)n * 2;
}

// The references accumulate in double: they are what the fast paths are judged against.
void rg_vec_dot_f32_f32_ref(int64_t n, float *s, const void *x, const void *y) {
    const float *a = x, *b = y;
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += (double)a[i] * b[i];
    *s = (float)acc;
}
void rg_vec_dot_f16_f32_ref(int64_t n, float *s, const void *x, const void *y) {
    const uint16_t *a = x;
    const float *b = y;
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += (double)rg_fp16_to_fp32(a[i]) * b[i];
    *s = (float)acc;
}
void rg_vec_dot_bf16_f32_ref(int64_t n, float *s, const void *x, const void *y) {
    const uint16_t *a = x;
    const float *b = y;
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += (double)rg_bf16_to_fp32(a[i]) * b[i];
    *s = (float)acc;
}

// Portable fast paths: eight f32 partial sums, the same order the AVX2 lanes use.
#define DOT8(load)                                                         \
    float acc[8] = {0};                                                    \
    int64_t i = 0;                                                         \
    for (; i + 8 <= n; i += 8)                                             \
        for (int k = 0; k < 8; k++) acc[k] += load(i + k) * b[i + k];      \
    float tail = 0;                                                        \
    for (; i < n; i++) tail += load(i) * b[i];                             \
    *s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;

static void dot_f32_portable(int64_t n, float *s, const float *a, const float *b) {
#define LD(j) a[j]
    DOT8(LD)
#undef LD
}
static void dot_f16_portable(int64_t n, float *s, const uint16_t *a, const float *b) {
#define LD(j) rg_fp16_to_fp32(a[j])
    DOT8(LD)
#undef LD
}
static void dot_bf16_portable(int64_t n, float *s, const uint16_t *a, const float *b) {
#define LD(j) rg_bf16_to_fp32(a[j])
    DOT8(LD)
#undef LD
}

void rg_vec_dot_f32_f32(int64_t n, float *s, const void *x, const void *y) {
    if (rg_cpu_has_avx2()) rg_vec_dot_f32_f32_avx2(n, s, x, y);
    else dot_f32_portable(n, s, x, y);
}
void rg_vec_dot_f16_f32(int64_t n, float *s, const void *x, const void *y) {
    if (rg_cpu_has_avx2()) rg_vec_dot_f16_f32_avx2(n, s, x, y);
    else dot_f16_portable(n, s, x, y);
}
void rg_vec_dot_bf16_f32(int64_t n, float *s, const void *x, const void *y) {
    if (rg_cpu_has_avx2()) rg_vec_dot_bf16_f32_avx2(n, s, x, y);
    else dot_bf16_portable(n, s, x, y);
}
