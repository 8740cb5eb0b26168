// racecheck.h - RETRO_CUDA_HOST_RACECHECK=1: the races a GPU's racecheck finds,
// from every load and store of kernel code (access.h).
//
// Shared memory, per 4-byte word (with a byte mask, so that threads writing the
// two halves of a word do not clash): a write and another thread's read or
// write of the same bytes is an error unless the two are ordered. A barrier
// (__syncthreads*) orders everything before it; a warp collective (__syncwarp,
// a shuffle, a vote...) orders what its lanes did before it, as a GPU's
// racecheck accepts warp-synchronous code with __syncwarp; two atomics never
// race. One event counter drives it all: each access keeps the count at which
// it happened; a barrier, a collective and a new block advance the count and
// note it (per pair of lanes for a collective), so "ordered" is one comparison
// and the shadow never needs clearing.
//
// Device memory, per 4-byte word within one launch: a write in one block and a
// read or write of the same bytes in another block is an error unless both are
// atomics (blocks are unordered on a GPU). The shadow is a mapping beside the
// device mapping (16 bytes a word, pages touched only where kernels touched
// memory), its entries stamped with the launch they belong to.
#ifndef RG_CUDA_HOST_RACECHECK_H
#define RG_CUDA_HOST_RACECHECK_H

#include <stddef.h>
#include <stdint.h>

namespace rgh {

// A launch starts: device-memory records of earlier launches are forgotten.
// dev_lo / dev_span: the device mapping (the shadow follows it).
void race_launch(uintptr_t dev_lo, size_t dev_span);
// A block starts (every shared access before is ordered with what follows).
void race_block(unsigned threads);
// Every thread of the block passed a barrier.
void race_barrier(void);
// The lanes `mask` of warp `warp` completed a collective.
void race_collective(unsigned warp, unsigned mask);
// One access by the running thread: offset in the shared arena or the device mapping.
void race_shared(size_t offset, size_t bytes, unsigned flags);
void race_global(size_t offset, size_t bytes, unsigned flags);
// Gives the shadow memory back (cudaDeviceReset).
void race_release(void);

}  // namespace rgh

#endif
