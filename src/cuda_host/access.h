// access.h - every load and store of kernel code, seen by the runtime. With
// -DRG_CUDA_HOST_RACECHECK=ON the host twin's kernel translation units are
// compiled with gcc's ThreadSanitizer instrumentation only
// (src/cuda_host/cuda_host.cmake): each memory access calls
// a __tsan_* entry point, which tsan_hooks.cpp defines itself (libtsan is never
// linked). While a kernel runs, an access to device memory or to the block's
// shared-memory arena is checked here:
//   - an N-byte access (N = 2, 4, 8, 16) the compiler issued as aligned must be
//     N-byte aligned, as a GPU requires (the host would split or tolerate it);
//   - a shared access must fall inside the launch's dynamic bytes or a static
//     array (not past the dynamic region, not in the gap between two arrays);
//   - with RETRO_CUDA_HOST_RACECHECK=1, racecheck.cpp looks for races.
// Without the instrumentation (the default build, the ASan build) the hooks are
// never called and these checks are off; in the ASan build UBSan's alignment
// check and ASan's poisoning stand in.
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

// 1 for each addressable byte of the shared arena (smem_reset, smem_mark). The
// holes between addressable runs are at least kMinSharedHole bytes wide, so an
// access no wider than that is inside one run when its first and last bytes are.
extern unsigned char g_smem_ok[kSharedArenaBytes];
const size_t kMinSharedHole = 64;

// Checks one access of kernel code (the hooks call it only while a kernel runs):
// faults the kernel or records the access for the race check.
void check_access(uintptr_t addr, size_t bytes, unsigned flags);

// What the hooks run for every access: the common case (no kernel running, an
// address outside device and shared memory, an aligned access that is fine with
// the race check off) returns without a call.
inline void on_access(uintptr_t a, size_t bytes, unsigned flags) {
    const AccessRanges &r = g_ranges;
    const bool misaligned = (flags & ACC_ALIGNED) && (a & (bytes - 1));
    if (a - r.dev_lo < r.dev_span) {
        if (misaligned || r.race) check_access(a, bytes, flags);
    } else if (a - r.smem_lo < r.smem_span) {
        const size_t off = a - r.smem_lo;
        const bool inside = bytes <= kMinSharedHole && off + bytes <= kSharedArenaBytes && g_smem_ok[off] &&
                            g_smem_ok[off + bytes - 1];
        if (misaligned || r.race || !inside) check_access(a, bytes, flags);
    }
}

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
