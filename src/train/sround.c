// sround.c - stochastic rounding F32 -> BF16 / F16 (training.md §2.3, §2.4).
#include "sround.h"

#include "philox.h"

#include <string.h>

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

uint16_t rg_sr_bf16(float x, uint32_t r) {
    uint32_t u = f32_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u);  // NaN, quiet
    // A carry out of the low 16 bits happens with probability (u & 0xFFFF)/65536.
    // It cannot reach the sign bit: the largest non-NaN magnitude plus 0xFFFF
    // is 0x7F80FFFF.
    return (uint16_t)((u + (r >> 16)) >> 16);
}

uint16_t rg_sr_f16(float x, uint32_t r) {
    uint32_t u = f32_bits(x);
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

// Both rows walk Philox blocks of four words, one call per block.
#define RG_SR_ROW_BODY(FN)                                                              \
    do {                                                                                \
        if (n <= 0) return;                                                             \
        uint32_t w[4];                                                                  \
        uint64_t idx = first_index;                                                     \
        rg_rand_block4(seed, step, RG_RAND_PURPOSE_SR, tensor_id, idx >> 2, w);         \
        for (int64_t i = 0; i < n; i++, idx++) {                                        \
            if (i > 0 && (idx & 3) == 0)                                                \
                rg_rand_block4(seed, step, RG_RAND_PURPOSE_SR, tensor_id, idx >> 2, w); \
            y[i] = FN(x[i], w[idx & 3]);                                                \
        }                                                                               \
    } while (0)

void rg_sr_bf16_row(const float *x, uint16_t *y, int64_t n, uint64_t seed, uint32_t step, uint32_t tensor_id,
                    uint64_t first_index) {
    RG_SR_ROW_BODY(rg_sr_bf16);
}

void rg_sr_f16_row(const float *x, uint16_t *y, int64_t n, uint64_t seed, uint32_t step, uint32_t tensor_id,
                   uint64_t first_index) {
    RG_SR_ROW_BODY(rg_sr_f16);
}
