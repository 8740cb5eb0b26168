// access.cpp - see access.h.
#include "cuda_host/access.h"

#include <string.h>

#include "cuda_host/racecheck.h"

namespace rgh {

AccessRanges g_ranges;
bool g_in_atomic;

unsigned char g_smem_ok[kSharedArenaBytes];

namespace {

size_t g_smem_top;  // no byte at or above it is addressable

}  // namespace

void smem_reset(size_t dynamic_bytes) {
    memset(g_smem_ok, 0, g_smem_top);
    g_smem_top = 0;
    smem_mark(0, dynamic_bytes);
}

void smem_mark(size_t offset, size_t bytes) {
    if (offset >= kSharedArenaBytes) return;
    if (bytes > kSharedArenaBytes - offset) bytes = kSharedArenaBytes - offset;
    memset(g_smem_ok + offset, 1, bytes);
    if (offset + bytes > g_smem_top) g_smem_top = offset + bytes;
}

void check_access(uintptr_t addr, size_t bytes, unsigned flags) {
    if (g_in_atomic) flags |= ACC_ATOMIC;
    const char *what = flags & ACC_WRITE ? "store" : "load";
    const bool misaligned = (flags & ACC_ALIGNED) && bytes > 1 && (addr & (bytes - 1));
    if (addr - g_ranges.smem_lo < g_ranges.smem_span) {
        const size_t off = addr - g_ranges.smem_lo;
        if (misaligned)
            kernel_fault("a %zu-byte %s at shared offset 0x%zx: a GPU requires %zu-byte alignment (declare the "
                         "array with the vector type or alignas)",
                         bytes, what, off, bytes);
        for (size_t i = off; i < off + bytes; i++) {
            if (i < kSharedArenaBytes && g_smem_ok[i]) continue;
            if (i < g_ranges.smem_static_lo)
                kernel_fault("a %zu-byte %s at shared offset 0x%zx reaches byte 0x%zx, past the launch's %zu bytes "
                             "of dynamic shared memory",
                             bytes, what, off, i, g_ranges.smem_dynamic);
            kernel_fault("a %zu-byte %s at shared offset 0x%zx reaches byte 0x%zx, outside every static shared "
                         "array of the block",
                         bytes, what, off, i);
        }
        if (g_ranges.race) race_shared(off, bytes, flags);
    } else if (addr - g_ranges.dev_lo < g_ranges.dev_span) {
        if (misaligned)
            kernel_fault("a %zu-byte %s at %p (device memory): a GPU requires %zu-byte alignment", bytes, what,
                         (void *)addr, bytes);
        if (g_ranges.race) race_global(addr - g_ranges.dev_lo, bytes, flags);
    }
}

}  // namespace rgh
