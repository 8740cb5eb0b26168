// sround.c - stochastic rounding F32 -> BF16 / F16 (training.md §2.3, §2.4): the
// inline functions of sround_bits.h (shared with the CUDA kernels) and the keyed rows.
#include "sround.h"

#include "philox.h"
#include "sround_bits.h"

#include <string.h>

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

uint16_t rg_sr_bf16(float x, uint32_t r) { return rg_sr_bf16_bits(f32_bits(x), r); }

uint16_t rg_sr_f16(float x, uint32_t r) { return rg_sr_f16_bits(f32_bits(x), r); }

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
