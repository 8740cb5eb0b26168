// half_bits.h - the F16/BF16 <-> F32 conversions on bit patterns, as inline
// functions that C, C++ and CUDA device code all compile (RG_HD): half.c's
// scalar reference is these functions, and the CUDA kernels that must give its
// bits (the optimizer's store from a master, src/cuda/ops_optim.cu) call the
// same ones, so there is one definition of each rounding.
//
// Integer-only: the results do not depend on the FPU's rounding mode or on
// flush-to-zero. The rules (shared/spec/gguf-and-types.md §3.2, §3.3) are
// stated in half.h.
#ifndef RG_TENSOR_HALF_BITS_H
#define RG_TENSOR_HALF_BITS_H

#include <stdint.h>

#include "base/hd.h"

// binary32 bits -> binary16, round to nearest even; NaN -> sign|0x7E00, |f| >= 65520 -> ±Inf.
static inline RG_HD uint16_t rg_f16_from_f32_bits(uint32_t u) {
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7FFFFFFF;

    if (a > 0x7F800000) return (uint16_t)(sign | 0x7E00);  // NaN: payload dropped
    // |f| >= 65520 (Inf included) rounds to Inf. The rounding below would
    // carry [65520, 65536] into 0x7C00 by itself, but not anything larger.
    if (a >= 0x477FF000) return (uint16_t)(sign | 0x7C00);

    if (a >= 0x38800000) {
        // Normal result (|f| >= 2^-14). Rebias the exponent (127 -> 15) in
        // place, then round the 13 dropped mantissa bits to nearest even. A
        // carry out of the mantissa bumps the exponent, which is what we want;
        // it cannot reach 31 because |f| < 65520 here.
        a -= (uint32_t)(127 - 15) << 23;
        a += 0x0FFF + ((a >> 13) & 1);
        return (uint16_t)(sign | (uint16_t)(a >> 13));
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
    return (uint16_t)(sign | (uint16_t)q);
}

// binary16 -> binary32 bits, exact. A NaN comes back quiet (bit 22) with its sign and payload.
static inline RG_HD uint32_t rg_f32_bits_from_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t e = (h >> 10) & 0x1F;
    uint32_t m = h & 0x3FF;
    if (e == 31) {
        // Inf, or NaN: the payload is kept and the NaN made quiet (bit 22),
        // as ggml's decoders (software and F16C) do.
        return sign | 0x7F800000 | (m << 13) | (m ? 0x00400000u : 0);
    }
    if (e != 0) return sign | ((e + 127 - 15) << 23) | (m << 13);
    if (m == 0) return sign;
    // Subnormal half m·2^-24: normalise so the leading 1 lands on bit 10.
    uint32_t k = 0;
    while (!(m & 0x400)) {
        m <<= 1;
        k++;
    }
    // Now the value is (m/1024)·2^(-14-k), with m in [1024, 2047].
    return sign | ((127 - 14 - k) << 23) | ((m & 0x3FF) << 13);
}

// binary32 bits -> bf16, round to nearest even; overflow goes to Inf, subnormals
// are kept; NaN -> (bits >> 16) | 0x0040 (forced quiet, sign and top payload kept).
static inline RG_HD uint16_t rg_bf16_from_f32_bits(uint32_t u) {
    if ((u & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)((u >> 16) | 0x0040);  // NaN: force quiet
    // Round to nearest even: add just under half, plus one when the kept LSB is
    // odd. Overflow lands on Inf (0x7F80), as it should.
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

// bf16 -> binary32 bits, exact.
static inline RG_HD uint32_t rg_f32_bits_from_bf16(uint16_t h) { return (uint32_t)h << 16; }

#endif
