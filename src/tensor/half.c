// half.c - scalar F16/BF16 conversions (the reference) and the row dispatch.
//
// The rules are those of shared/spec/gguf-and-types.md §3.2 (F16) and §3.3
// (BF16). Everything here works on bit patterns, so it does not depend on the
// FPU's rounding mode, flush-to-zero or denormals-are-zero settings. This file
// is built without any -m flags; the AVX2/F16C kernels live in half_avx2.c.
#include "half.h"

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
// F16

// The conversions work on bit patterns; the scalar rows call these directly so
// that no value travels through a float register (on x87 that would quiet a
// signalling NaN).
static inline uint16_t fp16_from_f32_bits(uint32_t u) {
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7FFFFFFF;

    if (a > 0x7F800000) return sign | 0x7E00;  // NaN: payload dropped
    // |f| >= 65520 (Inf included) rounds to Inf. The rounding below would
    // carry [65520, 65536] into 0x7C00 by itself, but not anything larger.
    if (a >= 0x477FF000) return sign | 0x7C00;

    if (a >= 0x38800000) {
        // Normal result (|f| >= 2^-14). Rebias the exponent (127 -> 15) in
        // place, then round the 13 dropped mantissa bits to nearest even. A
        // carry out of the mantissa bumps the exponent, which is what we want;
        // it cannot reach 31 because |f| < 65520 here.
        a -= (uint32_t)(127 - 15) << 23;
        a += 0x0FFF + ((a >> 13) & 1);
        return sign | (uint16_t)(a >> 13);
    }

    // Subnormal result: the value in units of 2^-24 is m·2^(e-126), with m the
    // 24-bit significand. Below 2^-25 (e < 102, f32 subnormals included) that
    // is under half a unit, so it rounds to zero.
    uint32_t e = a >> 23;
    if (e < 102) return sign;
    uint32_t m = (a & 0x007FFFFF) | 0x00800000;
    uint32_t shift = 126 - e;  // 14..24
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;  // may carry into 0x400 = 2^-14: still right
    return sign | (uint16_t)q;
}

static inline uint32_t f32_bits_from_fp16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t e = (h >> 10) & 0x1F;
    uint32_t m = h & 0x3FF;
    uint32_t u;
    if (e == 31) {
        // Inf, or NaN: the payload is kept and the NaN made quiet (bit 22),
        // as ggml's decoders (software and F16C) do.
        u = sign | 0x7F800000 | (m << 13) | (m ? 0x00400000u : 0);
    } else if (e != 0) {
        u = sign | ((e + 127 - 15) << 23) | (m << 13);
    } else if (m == 0) {
        u = sign;
    } else {
        // Subnormal half m·2^-24: normalise so the leading 1 lands on bit 10.
        uint32_t k = 0;
        while (!(m & 0x400)) {
            m <<= 1;
            k++;
        }
        // Now the value is (m/1024)·2^(-14-k), with m in [1024, 2047].
        u = sign | ((127 - 14 - k) << 23) | ((m & 0x3FF) << 13);
    }
    return u;
}

uint16_t rg_fp32_to_fp16(float f) {
    return fp16_from_f32_bits(bits_of(f));
}

float rg_fp16_to_fp32(uint16_t h) {
    return float_of(f32_bits_from_fp16(h));
}

// ---------------------------------------------------------------------------
// BF16

static inline uint16_t bf16_from_f32_bits(uint32_t u) {
    if ((u & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)((u >> 16) | 0x0040);  // NaN: force quiet
    // Round to nearest even: add just under half, plus one when the kept LSB is
    // odd. Overflow lands on Inf (0x7F80), as it should.
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

uint16_t rg_fp32_to_bf16(float f) {
    return bf16_from_f32_bits(bits_of(f));
}

float rg_bf16_to_fp32(uint16_t h) {
    return float_of((uint32_t)h << 16);
}

// ---------------------------------------------------------------------------
// Scalar rows

void rg_fp16_to_fp32_row_scalar(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = f32_bits_from_fp16(x[i]);
        memcpy(&y[i], &u, sizeof u);
    }
}

void rg_fp32_to_fp16_row_scalar(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        y[i] = fp16_from_f32_bits(u);
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
        y[i] = bf16_from_f32_bits(u);
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
