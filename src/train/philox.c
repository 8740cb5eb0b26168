// philox.c - Philox4x32-10 in portable C (training.md §2.2).
#include "philox.h"

#define RG_PHILOX_M0 0xD2511F53u
#define RG_PHILOX_M1 0xCD9E8D57u
#define RG_PHILOX_W0 0x9E3779B9u
#define RG_PHILOX_W1 0xBB67AE85u

void rg_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
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

void rg_rand_block4(uint64_t seed, uint32_t step, uint32_t purpose, uint32_t tensor_id, uint64_t block,
                    uint32_t out[4]) {
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32),
                             (uint32_t)((purpose << 24) | (tensor_id & 0xFFFFFFu)), step};
    rg_philox4x32_10(ctr, key, out);
}

uint32_t rg_rand_u32(uint64_t seed, uint32_t step, uint32_t purpose, uint32_t tensor_id, uint64_t index) {
    uint32_t out[4];
    rg_rand_block4(seed, step, purpose, tensor_id, index >> 2, out);
    return out[index & 3];
}
