// sround_bits.h - Philox4x32-10, the trainer's keyed random words and stochastic
// rounding F32 -> BF16 / F16 on bit patterns, as inline functions that C, C++
// and CUDA device code all compile (RG_HD). philox.c and sround.c are these
// functions behind their C names, and the CUDA optimizer kernels
// (src/cuda/ops_optim.cu) call the same ones, so the device draws the same
// words and rounds to the same bits as the host by construction.
//
// Spec: shared/spec/training.md §2.2 (the key and counter layout), §2.3 (BF16),
// §2.4 (F16); the behaviour is documented in philox.h and sround.h.
#ifndef RG_TRAIN_SROUND_BITS_H
#define RG_TRAIN_SROUND_BITS_H

#include <stdint.h>

#include "base/hd.h"

#define RG_PHILOX_M0 0xD2511F53u
#define RG_PHILOX_M1 0xCD9E8D57u
#define RG_PHILOX_W0 0x9E3779B9u
#define RG_PHILOX_W1 0xBB67AE85u

// Philox4x32-10 (Salmon et al., SC'11): ten rounds over counter ctr with key key; out may alias ctr.
static inline RG_HD void rg_philox4x32_10_bits(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)RG_PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)RG_PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t n0 = hi1 ^ c1 ^ k0;
        uint32_t n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += RG_PHILOX_W0;  // bumped after every round; the last bump is unused
        k1 += RG_PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

// The four words of the block holding element indices 4*block .. 4*block+3:
//   key = (low32(seed), high32(seed)),
//   ctr = (low32(block), high32(block), (purpose << 24) | tensor_id, step).
static inline RG_HD void rg_rand_block4_bits(uint64_t seed, uint32_t step, uint32_t purpose, uint32_t tensor_id,
                                             uint64_t block, uint32_t out[4]) {
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32),
                             (uint32_t)((purpose << 24) | (tensor_id & 0xFFFFFFu)), step};
    rg_philox4x32_10_bits(ctr, key, out);
}

// BF16 stochastic rounding of the f32 bits u with the random word r (sround.h: rg_sr_bf16).
static inline RG_HD uint16_t rg_sr_bf16_bits(uint32_t u, uint32_t r) {
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u);  // NaN, quiet
    // A carry out of the low 16 bits happens with probability (u & 0xFFFF)/65536.
    // It cannot reach the sign bit: the largest non-NaN magnitude plus 0xFFFF
    // is 0x7F80FFFF.
    return (uint16_t)((u + (r >> 16)) >> 16);
}

// F16 stochastic rounding of the f32 bits u with the random word r (sround.h: rg_sr_f16).
static inline RG_HD uint16_t rg_sr_f16_bits(uint32_t u, uint32_t r) {
    uint32_t s = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(s | 0x7E00u);   // NaN
    if (a >= 0x47800000u) return (uint16_t)(s | 0x7C00u);  // |x| >= 65536 or Inf
    if (a >= 0x38800000u) {                                // |x| >= 2^-14: 13 dropped bits
        uint32_t t = a + (r >> 19);  // at most 0x477FFFFF + 0x1FFF: no overflow
        return (uint16_t)(s | ((t >> 13) - 0x1C000u));  // rebias 127 -> 15; may carry to 0x7C00
    }
    // F16 subnormal or zero (or an f32 subnormal, treated as exponent 1).
    uint32_t E = a >> 23, m = a & 0x7FFFFFu;
    uint64_t M;
    if (E == 0) {
        M = m;
        E = 1;
    } else {
        M = m | 0x800000u;
    }
    uint32_t D = 126u - E;  // dropped bits, >= 14
    uint64_t k = D < 32 ? M >> D : 0;
    uint64_t rem = D < 32 ? M - (k << D) : M;
    uint64_t Q;
    if (D <= 32)
        Q = rem << (32 - D);
    else
        Q = (D - 32 < 24) ? rem >> (D - 32) : 0;
    uint64_t up = ((uint64_t)r + Q) >> 32;  // 0 or 1
    return (uint16_t)(s | (uint32_t)(k + up));  // k + 1 = 1024 is 0x0400, the smallest normal
}

#endif
