// access.h - every load and store of kernel code, seen by the runtime. The host
// twin's kernel translation units are compiled with gcc's ThreadSanitizer
// instrumentation only (src/cuda_host/cuda_host.cmake): each memory access calls
// a __tsan_* entry point, which tsan_hooks.cpp defines itself (libtsan is never
// linked). While a kernel runs, an access to device memory or to the block's
// shared-memory arena is checked here:
//   - an N-byte access (N = 2, 4, 8, 16) the compiler issued as aligned must be
//     N-byte aligned, as a GPU requires (the host would split or tolerate it);
//   - a shared access must fall inside the launch's dynamic bytes or a static
//     array (not past the dynamic region, not in the gap between two arrays);
//   - with RETRO_CUDA_HOST_RACECHECK=1, racecheck.cpp looks for races.
// Without the instrumentation (the ASan build) the hooks are never called and
// these checks are off; UBSan's alignment check and ASan's poisoning stand in.
#ifndef RG_CUDA_HOST_ACCESS_H
#define RG_CUDA_HOST_ACCESS_H

#include <stddef.h>
#include <stdint.h>

namespace rgh {

// The shared-memory arena of a block: dynamic region, static arrays and the gaps between them.
const size_t kSharedArenaBytes = 320 * 1024;

enum AccessFlags : unsigned {
    ACC_WRITE = 1,
    ACC_ALIGNED = 2,  // the compiler assumed the access aligned to its width
    ACC_ATOMIC = 4,   // part of an atomic read-modify-write (intrinsics.h)
};

// What the hooks test before anything else: the ranges they look at, set by
// block.cpp for the launch that runs.
struct AccessRanges {
    uintptr_t smem_lo = 0, smem_span = 0;  // the shared-memory arena
    size_t smem_dynamic = 0;               // the launch's dynamic bytes, at the arena's start
    size_t smem_static_lo = 0;             // where the static arrays begin
    uintptr_t dev_lo = 0, dev_span = 0;    // the device mapping
    bool race = false;                     // RETRO_CUDA_HOST_RACECHECK=1 for this launch
};
extern AccessRanges g_ranges;

// Set while an atomic of intrinsics.h runs (its plain read and write are one atomic access).
extern bool g_in_atomic;

// Checks one access of kernel code (the hooks call it only while a kernel runs).
void check_access(uintptr_t addr, size_t bytes, unsigned flags);

// The shared arena's addressable bytes: a block starts with its launch's
// dynamic bytes at offset 0 (ending exactly at the byte count), and each static
// array is added when declared; everything else in the arena is refused.
void smem_reset(size_t dynamic_bytes);
void smem_mark(size_t offset, size_t bytes);

// The running CUDA thread: its linear index in the block and the block's linear
// index in the grid (block.cpp).
unsigned running_tid(void);
unsigned long long running_block(void);
// Ends the running thread's block with an error naming the kernel, block and thread (block.cpp).
[[noreturn]] void kernel_fault(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace rgh

#endif
