// rng.c - see rng.h.
// The arithmetic is in rng_core.h, which the CUDA sampler shares.
#include "base/rng.h"

#include "base/rng_core.h"

uint64_t rg_rng_u64(uint64_t seed, uint64_t stream, uint64_t index) { return rg_rng_u64_inline(seed, stream, index); }

float rg_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return rg_rng_uniform_inline(seed, stream, index);
}

float rg_rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    uint64_t r = rg_rng_u64(seed, stream, index);
    // Four 16-bit uniforms; their sum has mean 2 and variance 4/12.
    double s = 0;
    for (int k = 0; k < 4; k++) s += (double)((r >> (16 * k)) & 0xFFFF) / 65536.0;
    return (float)((s - 2.0 + 2.0 / 65536.0) * 1.7320508075688772);
}
