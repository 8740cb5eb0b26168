// sround.h - stochastic rounding (SR) from F32 to BF16 and F16.
//
// Spec: shared/spec/training.md §2.1 (definition), §2.3 (BF16), §2.4 (F16).
// With q the fraction of |x| between its truncation lo and the next magnitude
// hi, and Q = floor(q * 2^32), the magnitude rounds up iff r + Q >= 2^32, so a
// uniform r gives P(up) = Q/2^32 and E[SR(x)] = x. Integer-only: the result
// does not depend on the FPU's rounding mode or FTZ/DAZ.
//   - NaN -> quiet NaN exactly as the reference RNE conversions (half.h);
//   - ±Inf passes through; the sign is always kept (including -0);
//   - finite values above the largest finite value go to Inf with probability
//     q (BF16) and |x| >= 65536 always goes to Inf (F16); no clamp.
#ifndef RG_TRAIN_SROUND_H
#define RG_TRAIN_SROUND_H

#include <stdint.h>

// BF16: out = (u + (r >> 16)) >> 16 for non-NaN u; only r's top 16 bits count.
uint16_t rg_sr_bf16(float x, uint32_t r);
// F16: §2.4's algorithm; normals use r's top 13 bits, subnormals up to 32.
uint16_t rg_sr_f16(float x, uint32_t r);

// Row helpers: y[i] = rg_sr_*(x[i], rg_rand_u32(seed, step, 0, tensor_id,
// first_index + i)) for 0 <= i < n (n <= 0 does nothing). first_index is the
// ggml flat index of x[0] within the tensor.
void rg_sr_bf16_row(const float *x, uint16_t *y, int64_t n, uint64_t seed, uint32_t step, uint32_t tensor_id,
                    uint64_t first_index);
void rg_sr_f16_row(const float *x, uint16_t *y, int64_t n, uint64_t seed, uint32_t step, uint32_t tensor_id,
                   uint64_t first_index);

#endif
