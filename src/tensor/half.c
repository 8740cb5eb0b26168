// half.c - scalar F16/BF16 conversions (the reference) and the row dispatch.
//
// The rules are those of shared/spec/gguf-and-types.md §3.2 (F16) and §3.3
// (BF16). Everything here works on bit patterns, so it does not depend on the
// FPU's rounding mode, flush-to-zero or denormals-are-zero settings. This file
// is built without any -m flags; the AVX2/F16C kernels live in half_avx2.c.
#include "half.h"

#include "half_bits.h"

#include <stdatomic.h>
#include <string.h>

static inline uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

// ---------------------------------------------------------------------------
// F16 and BF16: the bit-pattern conversions of half_bits.h (shared with the
// CUDA kernels). The scalar rows call them directly so that no value travels
// through a float register (on x87 that would quiet a signalling NaN).

uint16_t rg_fp32_to_fp16(float f) {
    return rg_f16_from_f32_bits(bits_of(f));
}

float rg_fp16_to_fp32(uint16_t h) {
    return float_of(rg_f32_bits_from_f16(h));
}

uint16_t rg_fp32_to_bf16(float f) {
    return rg_bf16_from_f32_bits(bits_of(f));
}

float rg_bf16_to_fp32(uint16_t h) {
    return float_of((uint32_t)h << 16);
}

// ---------------------------------------------------------------------------
// Scalar rows

void rg_fp16_to_fp32_row_scalar(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = rg_f32_bits_from_f16(x[i]);
        memcpy(&y[i], &u, sizeof u);
    }
}

void rg_fp32_to_fp16_row_scalar(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        y[i] = rg_f16_from_f32_bits(u);
    }
}

void rg_bf16_to_fp32_row_scalar(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)x[i] << 16;
        memcpy(&y[i], &u, sizeof u);
    }
}

void rg_fp32_to_bf16_row_scalar(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        y[i] = rg_bf16_from_f32_bits(u);
    }
}

// ---------------------------------------------------------------------------
// Dispatch

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define RG_HALF_X86 1
#include <cpuid.h>
#endif

static int detect_simd(void) {
#ifdef RG_HALF_X86
    if (!rg_half_avx2_built) return 0;
    // The runtime's AVX2 probe also checks that the OS saves the YMM registers.
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2")) return 0;
    // clang 14 does not know __builtin_cpu_supports("f16c"): ask CPUID leaf 1
    // directly (ECX bit 29). F16C uses the YMM state checked above.
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
    return (ecx >> 29) & 1;
#else
    return 0;
#endif
}

int rg_half_have_simd(void) {
    // -1 until probed. Concurrent first calls may both probe; they agree, and
    // the atomic keeps that race well defined.
    static atomic_int have_simd = -1;
    int v = atomic_load_explicit(&have_simd, memory_order_relaxed);
    if (v < 0) {
        v = detect_simd();
        atomic_store_explicit(&have_simd, v, memory_order_relaxed);
    }
    return v;
}

void rg_fp16_to_fp32_row(const uint16_t *x, float *y, int64_t n) {
    if (rg_half_have_simd()) rg_fp16_to_fp32_row_avx2(x, y, n);
    else rg_fp16_to_fp32_row_scalar(x, y, n);
}

void rg_fp32_to_fp16_row(const float *x, uint16_t *y, int64_t n) {
    if (rg_half_have_simd()) rg_fp32_to_fp16_row_avx2(x, y, n);
    else rg_fp32_to_fp16_row_scalar(x, y, n);
}

void rg_bf16_to_fp32_row(const uint16_t *x, float *y, int64_t n) {
    if (rg_half_have_simd()) rg_bf16_to_fp32_row_avx2(x, y, n);
    else rg_bf16_to_fp32_row_scalar(x, y, n);
}

void rg_fp32_to_bf16_row(const float *x, uint16_t *y, int64_t n) {
    if (rg_half_have_simd()) rg_fp32_to_bf16_row_avx2(x, y, n);
    else rg_fp32_to_bf16_row_scalar(x, y, n);
}
