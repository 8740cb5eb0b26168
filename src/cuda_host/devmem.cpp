// devmem.cpp - see devmem.h.
//
// Layout of an allocation of n bytes (offsets from its block's start):
//   [0, 256)              front red zone
//   [256, 256 + n)        the caller's bytes (cudaMalloc's 256-byte alignment)
//   [256 + n, footprint)  back red zone: at least 256 bytes, up to the next
//                         256-byte boundary plus 256
// Blocks are carved first-fit by address from the free list, else from the top
// of the used part of the mapping; only [base, top) is ever made accessible.
#include "cuda_host/devmem.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <deque>
#include <iterator>
#include <map>

#include "cuda_host/asan.h"
#include "cuda_host/state.h"

namespace rgh {

namespace {

const size_t kRedZone = 256;
const unsigned char kCanary = 0xFD;
const unsigned char kPoison = 0xFF;
// Small enough that the used part of the mapping (which every protection change
// walks, page by page) stays small; large enough that a freed block is not at once
// the next allocation.
const size_t kQuarantineBytes = (size_t)64 << 20;
const size_t kQuarantineBlocks = 64;
const size_t kPage = 4096;
const size_t kDropBytes = (size_t)64 << 10;  // freed blocks this large give their pages back

struct Alloc {
    size_t block;      // offset of the block in the mapping
    size_t footprint;  // bytes of the block
    size_t bytes;      // the caller's bytes
    uint64_t serial;   // which allocation: a block re-used by a later cudaMalloc gets a new one
};

struct Region {
    char *base = nullptr;
    size_t reserved = 0;  // bytes of address space
    size_t total = 0;     // what cudaMemGetInfo reports
    size_t top = 0;       // [0, top) has been handed out at some point
    size_t used = 0;      // footprints of live allocations
    size_t opened = 0;    // bytes made accessible by the current open
    int depth = 0;        // open nesting
    std::map<size_t, Alloc> live;     // by the caller's offset (block + kRedZone)
    std::map<size_t, size_t> free;    // block offset -> length, coalesced
    std::deque<Alloc> quarantine;
    size_t quarantined = 0;
    std::map<uintptr_t, size_t> pinned;  // cudaMallocHost blocks
    uint64_t serials = 0;                // allocations made so far
} R;

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

size_t footprint_of(size_t bytes) { return kRedZone + round_up(bytes ? bytes : 1, 256) + kRedZone; }

size_t total_from_env(void) {
    const char *v = getenv("RETRO_CUDA_HOST_MEM_MB");
    long long mb = 4096;
    if (v && *v) {
        char *end = nullptr;
        long long x = strtoll(v, &end, 10);
        if (end && *end == 0 && x > 0 && x < (1ll << 24)) mb = x;
    }
    return (size_t)mb << 20;
}

bool reserve(void) {
    if (R.base) return true;
    R.total = total_from_env();
    // Room for red zones and fragmentation beyond what is reported.
    R.reserved = R.total * 2 + ((size_t)256 << 20);
    void *p = mmap(nullptr, R.reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        R.reserved = 0;
        return false;
    }
    R.base = (char *)p;
    return true;
}

void protect(size_t from, size_t to, int prot) {
    if (to <= from) return;
    if (mprotect(R.base + from, to - from, prot) != 0) {
        perror("retrograd cuda host: mprotect of device memory");
        abort();
    }
}

// Grows the part of the mapping that is open now to cover [0, top).
void open_to_top(void) {
    if (R.depth > 0 && round_up(R.top, kPage) > R.opened) {
        protect(R.opened, round_up(R.top, kPage), PROT_READ | PROT_WRITE);
        R.opened = round_up(R.top, kPage);
    }
}

void release_block(size_t off, size_t len) {
    // Coalesce with the neighbours in the free list.
    auto next = R.free.lower_bound(off);
    if (next != R.free.end() && off + len == next->first) {
        len += next->second;
        next = R.free.erase(next);
    }
    if (next != R.free.begin()) {
        auto prev = std::prev(next);
        if (prev->first + prev->second == off) {
            prev->second += len;
            return;
        }
    }
    R.free.emplace(off, len);
}

void flush_quarantine(size_t keep_bytes, size_t keep_blocks) {
    while (!R.quarantine.empty() && (R.quarantined > keep_bytes || R.quarantine.size() > keep_blocks)) {
        const Alloc a = R.quarantine.front();
        R.quarantine.pop_front();
        R.quarantined -= a.footprint;
        release_block(a.block, a.footprint);
    }
}

// Returns the whole pages inside [off, off + len) to the kernel (they read as zeros afterwards).
void drop_pages(size_t off, size_t len) {
    const size_t lo = round_up(off, kPage), hi = (off + len) / kPage * kPage;
    if (hi > lo) madvise(R.base + lo, hi - lo, MADV_DONTNEED);
}

bool take_block(size_t len, size_t *off) {
    for (auto it = R.free.begin(); it != R.free.end(); ++it) {
        if (it->second < len) continue;
        *off = it->first;
        const size_t rest = it->second - len;
        R.free.erase(it);
        if (rest) R.free.emplace(*off + len, rest);
        return true;
    }
    if (R.top + len > R.reserved) return false;
    *off = R.top;
    R.top += len;
    return true;
}

const Alloc *live_at(const void *p) {
    if (!R.base || (const char *)p < R.base || (const char *)p >= R.base + R.reserved) return nullptr;
    const size_t off = (size_t)((const char *)p - R.base);
    auto it = R.live.upper_bound(off);
    if (it == R.live.begin()) return nullptr;
    --it;
    const Alloc &a = it->second;
    return off <= it->first + a.bytes ? &a : nullptr;
}

bool in_mapping(const void *p) {
    return R.base && (const char *)p >= R.base && (const char *)p < R.base + R.reserved;
}

}  // namespace

cudaError_t dev_malloc(void **out, size_t bytes) {
    *out = nullptr;
    if (bytes == 0) return cudaSuccess;
    if (!reserve()) return set_error(cudaErrorMemoryAllocation, "cannot reserve the device mapping: %s", strerror(errno));
    const size_t len = footprint_of(bytes);
    if (bytes > R.total || R.used + len > R.total)
        return set_error(cudaErrorMemoryAllocation,
                         "cudaMalloc(%zu bytes): %zu of the %zu MiB of device memory are in use "
                         "(RETRO_CUDA_HOST_MEM_MB sets the size)",
                         bytes, R.used, R.total >> 20);
    size_t off;
    if (!take_block(len, &off)) {
        flush_quarantine(0, 0);
        if (!take_block(len, &off))
            return set_error(cudaErrorMemoryAllocation, "cudaMalloc(%zu bytes): the device mapping is fragmented",
                             bytes);
    }
    DevAccess open;
    open_to_top();
    char *block = R.base + off, *user = block + kRedZone;
    RGH_UNPOISON(block, len);
    memset(block, kCanary, kRedZone);
    memset(user, kPoison, bytes);
    memset(user + bytes, kCanary, len - kRedZone - bytes);
    RGH_POISON(block, kRedZone);
    RGH_POISON(user + bytes, len - kRedZone - bytes);
    R.live.emplace(off + kRedZone, Alloc{off, len, bytes, ++R.serials});
    R.used += len;
    *out = user;
    return cudaSuccess;
}

cudaError_t dev_free(void *p) {
    if (!p) return cudaSuccess;
    const size_t off = in_mapping(p) ? (size_t)((char *)p - R.base) : 0;
    auto it = in_mapping(p) ? R.live.find(off) : R.live.end();
    if (it == R.live.end())
        return set_error(cudaErrorInvalidValue, "cudaFree(%p): %s, not the start of a live device allocation", p,
                         ptr_kind_name(classify(p)));
    const Alloc a = it->second;
    DevAccess open;
    std::string damage = dev_check_red_zones();
    R.live.erase(it);
    R.used -= a.footprint;
    // A stale read sees 0xFF bytes; a large block gives its pages back instead
    // (it reads as zeros then): every populated page makes the protection
    // changes around device work slower.
    char *block = R.base + a.block;
    RGH_UNPOISON(block + kRedZone, a.bytes);
    memset(block + kRedZone, kPoison, a.bytes < kDropBytes ? a.bytes : kPage);
    if (a.bytes >= kDropBytes) drop_pages(a.block + kRedZone + kPage, a.bytes - kPage);
    RGH_POISON(block, a.footprint);
    R.quarantine.push_back(a);
    R.quarantined += a.footprint;
    flush_quarantine(kQuarantineBytes, kQuarantineBlocks);
    if (!damage.empty()) return fault_sticky(cudaErrorIllegalAddress, "at cudaFree: " + damage);
    return cudaSuccess;
}

uint64_t dev_serial(const void *p) {
    const Alloc *a = p ? live_at(p) : nullptr;
    return a ? a->serial : 0;
}

const char *dev_since(const void *p, uint64_t serial) {
    if (!serial) return nullptr;
    const uint64_t now = dev_serial(p);
    if (now == serial) return nullptr;
    return now ? "was freed and its memory re-allocated" : "was freed";
}

void dev_mapping(uintptr_t *lo, size_t *span) {
    *lo = (uintptr_t)R.base;
    *span = R.base ? R.reserved : 0;
}

size_t dev_total(void) { return R.base ? R.total : total_from_env(); }
size_t dev_used(void) { return R.used; }

Ptr classify(const void *p) {
    if (!p) return Ptr::null;
    if (in_mapping(p)) {
        if (live_at(p)) return Ptr::device;
        const size_t off = (size_t)((const char *)p - R.base);
        for (const Alloc &a : R.quarantine)
            if (off >= a.block && off < a.block + a.footprint) return Ptr::device_freed;
        return Ptr::device_stray;
    }
    auto it = R.pinned.upper_bound((uintptr_t)p);
    if (it != R.pinned.begin()) {
        --it;
        if ((uintptr_t)p <= it->first + it->second) return Ptr::pinned;
    }
    return Ptr::host;
}

const char *ptr_kind_name(Ptr k) {
    switch (k) {
    case Ptr::null: return "NULL";
    case Ptr::device: return "device memory";
    case Ptr::device_freed: return "freed device memory";
    case Ptr::device_stray: return "device address space outside any allocation (a red zone or unallocated)";
    case Ptr::pinned: return "pinned host memory";
    case Ptr::host: return "a host pointer, not device memory";
    }
    return "?";
}

bool dev_range(const void *p, size_t n) {
    const Alloc *a = p ? live_at(p) : nullptr;
    if (!a) return false;
    const size_t off = (size_t)((const char *)p - R.base), start = a->block + kRedZone;
    return off + n <= start + a->bytes;
}

bool pinned_range(const void *p, size_t n) {
    auto it = R.pinned.upper_bound((uintptr_t)p);
    if (!p || it == R.pinned.begin()) return false;
    --it;
    return (uintptr_t)p + n <= it->first + it->second;
}

void dev_open(void) {
    if (R.depth++ == 0 && R.base) {
        R.opened = round_up(R.top, kPage);
        protect(0, R.opened, PROT_READ | PROT_WRITE);
    }
}

void dev_close(void) {
    if (--R.depth == 0 && R.base) {
        protect(0, R.opened, PROT_NONE);
        R.opened = 0;
    }
}

DevSuspend::DevSuspend() : depth(R.depth) {
    if (depth > 0 && R.base) protect(0, R.opened, PROT_NONE);
}
DevSuspend::~DevSuspend() {
    if (depth > 0 && R.base) protect(0, R.opened, PROT_READ | PROT_WRITE);
}

std::string dev_check_red_zones(void) {
#if RGH_ASAN
    return "";  // ASan reports the access itself
#else
    for (const auto &kv : R.live) {
        const Alloc &a = kv.second;
        const unsigned char *block = (const unsigned char *)R.base + a.block;
        const size_t user = kRedZone, end = kRedZone + a.bytes;
        for (size_t i = 0; i < a.footprint; i++) {
            if (i == user) i = end;  // skip the caller's bytes
            if (i >= a.footprint || block[i] == kCanary) continue;
            char s[320];
            const long long at = i < user ? -(long long)(user - i) : (long long)(i - user);
            snprintf(s, sizeof s,
                     "the red zone %s device allocation %p (%zu bytes) was overwritten at offset %+lld (byte 0x%02x)",
                     i < user ? "before" : "after", (const void *)(block + user), a.bytes, at, block[i]);
            return s;
        }
    }
    return "";
#endif
}

cudaError_t pinned_malloc(void **out, size_t bytes) {
    *out = nullptr;
    void *p = nullptr;
    if (posix_memalign(&p, kPage, bytes ? bytes : 1) != 0)
        return set_error(cudaErrorMemoryAllocation, "cudaMallocHost(%zu bytes): out of host memory", bytes);
    R.pinned.emplace((uintptr_t)p, bytes);
    *out = p;
    return cudaSuccess;
}

cudaError_t pinned_free(void *p) {
    if (!p) return cudaSuccess;
    auto it = R.pinned.find((uintptr_t)p);
    if (it == R.pinned.end())
        return set_error(cudaErrorInvalidValue, "cudaFreeHost(%p): not memory from cudaMallocHost", p);
    R.pinned.erase(it);
    free(p);
    return cudaSuccess;
}

void dev_reset(void) {
    for (auto &kv : R.pinned) free((void *)kv.first);
    R.pinned.clear();
    if (R.base) {
        RGH_UNPOISON(R.base, R.top);  // the shadow must not outlive the mapping
        munmap(R.base, R.reserved);
    }
    R.base = nullptr;
    R.reserved = R.total = R.top = R.used = R.opened = 0;
    R.live.clear();
    R.free.clear();
    R.quarantine.clear();
    R.quarantined = 0;
    // R.depth stays: a reset never happens inside a drain.
}

}  // namespace rgh
