// racecheck.cpp - see racecheck.h.
#include "cuda_host/racecheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cuda_host/access.h"
#include "cuda_host/kernel.h"

namespace rgh {

namespace {

// ---------------------------------------------------------------------------
// Shared memory

// One access: the event count when it happened, the thread, the bytes of the word.
struct Acc {
    uint32_t seq;
    uint16_t tid;
    uint8_t mask;
    uint8_t atomic;
};
// A word: its last writer and its last two readers (distinct threads).
struct SharedWord {
    Acc w, r[2];
};

SharedWord g_words[kSharedArenaBytes / 4];
// g_pair[warp][a][b]: the count at which lanes a and b last completed a collective together.
uint32_t g_pair[32][32][32];
uint32_t g_seq = 1;  // advanced by every barrier, collective and block start
uint32_t g_bar = 1;  // the count at the last barrier or block start

bool ordered(const Acc &a, unsigned tid) {
    if (a.seq < g_bar || a.tid == tid) return true;  // an empty record has seq 0
    return (a.tid >> 5) == (tid >> 5) && g_pair[tid >> 5][a.tid & 31][tid & 31] > a.seq;
}

// "thread (x,y,z)" of a linear index in the running block.
const char *thread_name(unsigned tid, char *s, size_t n) {
    const dim3 d = g_block->dim;
    snprintf(s, n, "thread (%u,%u,%u)", tid % d.x, tid / d.x % d.y, tid / (d.x * d.y));
    return s;
}

[[noreturn]] void shared_race(size_t word, const Acc &other, bool other_wrote, bool write, size_t bytes) {
    char s[64];
    kernel_fault("%s %zu byte%s at shared offset 0x%zx that %s %s with no barrier or warp collective between them "
                 "(a race: a GPU may order the two either way)",
                 write ? "writes" : "reads", bytes, bytes == 1 ? "" : "s", word * 4,
                 thread_name(other.tid, s, sizeof s), other_wrote ? "wrote" : "read");
}

// The bytes of word `w` that [offset, offset + bytes) covers.
uint8_t word_mask(size_t w, size_t offset, size_t bytes) {
    const size_t lo = offset > w * 4 ? offset - w * 4 : 0, hi = offset + bytes < w * 4 + 4 ? offset + bytes - w * 4 : 4;
    return (uint8_t)(((1u << hi) - 1) & ~((1u << lo) - 1));
}

// ---------------------------------------------------------------------------
// Device memory

struct GlobalWord {
    uint32_t gen;     // the launch this record belongs to
    uint32_t wblock;  // last writing block + 1 (0: none)
    uint32_t rblock;  // first reading block + 1 (0: none)
    uint8_t wmask, rmask;
    uint8_t flags;
    uint8_t pad;
};
enum : uint8_t { W_ATOMIC = 1, R_ATOMIC = 2, R_MANY = 4 };

struct Shadow {
    GlobalWord *words = nullptr;
    size_t bytes = 0;
    uintptr_t dev_lo = 0;
    size_t dev_span = 0;
} g_shadow;
uint32_t g_gen = 0;

[[noreturn]] void global_race(size_t offset, size_t bytes, bool write, uint32_t other_block, bool other_wrote) {
    const dim3 g = g_block->grid;
    char other[96];
    if (other_block) {
        const unsigned long long b = other_block - 1;
        snprintf(other, sizeof other, "block (%llu,%llu,%llu)", b % g.x, b / g.x % g.y,
                 b / ((unsigned long long)g.x * g.y));
    } else {
        snprintf(other, sizeof other, "another block");
    }
    kernel_fault("%s %zu byte%s of device memory at %p that %s %s in the same launch (a race: blocks run in any "
                 "order on a GPU; only atomics may share a word between blocks)",
                 write ? "writes" : "reads", bytes, bytes == 1 ? "" : "s", (void *)(g_shadow.dev_lo + offset), other,
                 other_wrote ? "wrote" : "read");
}

}  // namespace

void race_launch(uintptr_t dev_lo, size_t dev_span) {
    if (++g_gen == 0) g_gen = 1;
    if (g_shadow.dev_lo == dev_lo && g_shadow.dev_span == dev_span) return;
    race_release();
    if (!dev_span) return;
    g_shadow.bytes = dev_span / 4 * sizeof(GlobalWord);
    void *p = mmap(nullptr, g_shadow.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        perror("retrograd cuda host: cannot map the race check's shadow of device memory");
        abort();
    }
    g_shadow.words = (GlobalWord *)p;
    g_shadow.dev_lo = dev_lo;
    g_shadow.dev_span = dev_span;
}

void race_release(void) {
    if (g_shadow.words) munmap(g_shadow.words, g_shadow.bytes);
    g_shadow = Shadow();
}

void race_block(unsigned threads) {
    (void)threads;
    g_bar = ++g_seq;
}

void race_barrier(void) { g_bar = ++g_seq; }

void race_collective(unsigned warp, unsigned mask) {
    const uint32_t now = ++g_seq;
    for (unsigned a = 0; a < 32; a++) {
        if (!(mask >> a & 1)) continue;
        uint32_t *row = g_pair[warp & 31][a];
        for (unsigned b = 0; b < 32; b++)
            if (mask >> b & 1) row[b] = now;
    }
}

void race_shared(size_t offset, size_t bytes, unsigned flags) {
    const unsigned tid = running_tid();
    const bool write = flags & ACC_WRITE;
    const uint8_t atomic = (flags & ACC_ATOMIC) != 0;
    for (size_t w = offset / 4; w <= (offset + bytes - 1) / 4; w++) {
        SharedWord &e = g_words[w];
        const uint8_t m = word_mask(w, offset, bytes);
        if ((e.w.mask & m) && !(atomic && e.w.atomic) && !ordered(e.w, tid)) shared_race(w, e.w, true, write, bytes);
        if (write) {
            for (const Acc &r : e.r)
                if ((r.mask & m) && !(atomic && r.atomic) && !ordered(r, tid)) shared_race(w, r, false, write, bytes);
            e.w = Acc{g_seq, (uint16_t)tid, m, atomic};
            e.r[0] = e.r[1] = Acc{0, 0, 0, 0};
        } else if (e.r[0].tid == tid && e.r[0].seq >= g_bar) {
            e.r[0].seq = g_seq, e.r[0].mask |= m, e.r[0].atomic &= atomic;
        } else {
            e.r[1] = e.r[0];
            e.r[0] = Acc{g_seq, (uint16_t)tid, m, atomic};
        }
    }
}

void race_global(size_t offset, size_t bytes, unsigned flags) {
    if (!g_shadow.words || offset + bytes > g_shadow.dev_span) return;
    const uint32_t me = (uint32_t)running_block() + 1;
    const bool write = flags & ACC_WRITE, atomic = flags & ACC_ATOMIC;
    for (size_t w = offset / 4; w <= (offset + bytes - 1) / 4; w++) {
        GlobalWord &e = g_shadow.words[w];
        if (e.gen != g_gen) e = GlobalWord{g_gen, 0, 0, 0, 0, 0, 0};
        const uint8_t m = word_mask(w, offset, bytes);
        if (e.wblock && e.wblock != me && (e.wmask & m) && !(atomic && (e.flags & W_ATOMIC)))
            global_race(offset, bytes, write, e.wblock, true);
        if (write) {
            const bool other_reader = (e.rblock && e.rblock != me) || (e.flags & R_MANY);
            if ((e.rmask & m) && other_reader && !(atomic && (e.flags & R_ATOMIC)))
                global_race(offset, bytes, write, e.rblock != me ? e.rblock : 0, false);
            const bool mine = e.wblock == me;
            e.wmask = mine ? (uint8_t)(e.wmask | m) : m;
            e.flags = (uint8_t)((e.flags & ~W_ATOMIC) | ((atomic && (!mine || (e.flags & W_ATOMIC))) ? W_ATOMIC : 0));
            e.wblock = me;
        } else if (!e.rblock) {
            e.rblock = me, e.rmask = m;
            e.flags = (uint8_t)((e.flags & ~R_ATOMIC) | (atomic ? R_ATOMIC : 0));
        } else {
            if (e.rblock != me) e.flags |= R_MANY;
            e.rmask |= m;
            if (!atomic) e.flags &= (uint8_t)~R_ATOMIC;
        }
    }
}

}  // namespace rgh
