// philox.h - Philox4x32-10 and the trainer's keyed random words.
//
// Spec: shared/spec/training.md §2.2. Philox4x32-10 (Salmon et al., SC'11) is
// a pure function of a 128-bit counter and a 64-bit key, so the same bits come
// out on the CPU and the GPU whatever the thread count or launch shape.
#ifndef RG_TRAIN_PHILOX_H
#define RG_TRAIN_PHILOX_H

#include <stdint.h>

// Purposes (the top 8 bits of counter word 2). A purpose is never used twice
// for the same (step, tensor, element).
enum {
    RG_RAND_PURPOSE_SR = 0,         // stochastic rounding of weights
    RG_RAND_PURPOSE_LORA_INIT = 1,  // LoRA initialisation
    RG_RAND_PURPOSE_DROPOUT = 2,    // dropout masks
    RG_RAND_PURPOSE_DATA = 3,       // data: eval split, packing order, epoch row orders (train/data.c)
};

// Philox4x32-10: ten rounds over counter ctr with key key; the result goes to
// out (which may alias ctr).
void rg_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

// One uniform 32-bit word for element `index` of trainable tensor `tensor_id`
// (< 2^24) at optimizer step `step`, for `purpose` (< 2^8), under run `seed`:
//   key = (low32(seed), high32(seed))
//   ctr = (low32(index>>2), high32(index>>2), (purpose<<24) | tensor_id, step)
//   result = output word (index & 3).
uint32_t rg_rand_u32(uint64_t seed, uint32_t step, uint32_t purpose, uint32_t tensor_id, uint64_t index);

// The four words of the block holding indices 4*block .. 4*block+3 (the same
// layout as rg_rand_u32; out[j] is the word for index 4*block + j).
void rg_rand_block4(uint64_t seed, uint32_t step, uint32_t purpose, uint32_t tensor_id, uint64_t block,
                    uint32_t out[4]);

#endif
