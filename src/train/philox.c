// philox.c - Philox4x32-10 in portable C (training.md §2.2): the inline
// functions of sround_bits.h, which the CUDA kernels share, behind the C names.
#include "philox.h"

#include "sround_bits.h"

void rg_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    rg_philox4x32_10_bits(ctr, key, out);
}

void rg_rand_block4(uint64_t seed, uint32_t step, uint32_t purpose, uint32_t tensor_id, uint64_t block,
                    uint32_t out[4]) {
    rg_rand_block4_bits(seed, step, purpose, tensor_id, block, out);
}

uint32_t rg_rand_u32(uint64_t seed, uint32_t step, uint32_t purpose, uint32_t tensor_id, uint64_t index) {
    uint32_t out[4];
    rg_rand_block4(seed, step, purpose, tensor_id, index >> 2, out);
    return out[index & 3];
}
