// rng_core.h - the arithmetic of base/rng.h as inline functions that C, the CUDA kernels
// (src/cuda/sampling.cu) and their host execution share, so that a draw on the device is
// the same 64-bit hash and the same float as rg_rng_uniform on the CPU. Integer operations
// and one exact float product only: no rounding choice is left to a compiler.
#ifndef RG_BASE_RNG_CORE_H
#define RG_BASE_RNG_CORE_H

#include <stdint.h>

#ifdef __CUDACC__
#define RG_HOST_DEVICE __host__ __device__
#else
#define RG_HOST_DEVICE
#endif

// splitmix64's finalizer.
RG_HOST_DEVICE static inline uint64_t rg_rng_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// rg_rng_u64's value (base/rng.h).
RG_HOST_DEVICE static inline uint64_t rg_rng_u64_inline(uint64_t seed, uint64_t stream, uint64_t index) {
    uint64_t h = rg_rng_mix64(seed + 0x9e3779b97f4a7c15ull);
    h = rg_rng_mix64(h ^ (stream + 0x632be59bd9b4e019ull));
    return rg_rng_mix64(h ^ (index * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull));
}

// rg_rng_uniform's value: 24 random bits times 2^-24 (exact).
RG_HOST_DEVICE static inline float rg_rng_uniform_inline(uint64_t seed, uint64_t stream, uint64_t index) {
    return (float)(rg_rng_u64_inline(seed, stream, index) >> 40) * (1.0f / 16777216.0f);
}

#endif
