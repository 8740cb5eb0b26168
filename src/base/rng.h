// rng.h - counter-based random numbers: a value is a pure function of its key,
// so any element of any stream can be drawn in any order, on any thread, and
// drawn again after a resume with the same result.
#ifndef RG_BASE_RNG_H
#define RG_BASE_RNG_H

#include <stdint.h>

// A 64-bit hash of (seed, stream, index) with full avalanche (splitmix64 finalizers).
uint64_t rg_rng_u64(uint64_t seed, uint64_t stream, uint64_t index);
// Uniform in [0, 1) with 24 random bits: exactly representable as float.
float rg_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
// Approximately standard normal (Irwin-Hall sum of four uniforms, rescaled to
// unit variance): integer and float arithmetic only, so every platform gets
// the same bits. Tails stop at +-3.46, which test weights do not miss.
float rg_rng_normal(uint64_t seed, uint64_t stream, uint64_t index);

#endif
