// rng.c - see rng.h.
#include "base/rng.h"

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t rg_rng_u64(uint64_t seed, uint64_t stream, uint64_t index) {
    uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ull);
    h = mix64(h ^ (stream + 0x632be59bd9b4e019ull));
    return mix64(h ^ (index * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull));
}

float rg_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return (float)(rg_rng_u64(seed, stream, index) >> 40) * (1.0f / 16777216.0f);
}

float rg_rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    uint64_t r = rg_rng_u64(seed, stream, index);
    // Four 16-bit uniforms; their sum has mean 2 and variance 4/12.
    double s = 0;
    for (int k = 0; k < 4; k++) s += (double)((r >> (16 * k)) & 0xFFFF) / 65536.0;
    return (float)((s - 2.0 + 2.0 / 65536.0) * 1.7320508075688772);
}
