// block.cpp - running a launch on the host: blocks one after another, and in a
// block every CUDA thread a fiber. Threads run one at a time in index order,
// each until it reaches a synchronization point (a barrier, a warp collective)
// or returns; a pass over the block resumes every thread that may go on. So a
// thread never sees what another writes after their common synchronization
// point, and a missing barrier shows as a read of poisoned shared memory or of
// stale values. RETRO_CUDA_HOST_ORDER=reverse runs them in decreasing index
// order instead, which shows the reads the increasing order cannot (a thread
// reading what a lower one wrote without a barrier in between);
// RETRO_CUDA_HOST_ORDER=shuffle runs the blocks of a launch, and the threads of
// each pass, in an order drawn from RETRO_CUDA_HOST_SEED (printed with any
// error, so that a failure replays), which shows a block reading what another
// block of the same launch wrote. RETRO_CUDA_HOST_RACECHECK=1 adds the race
// check (racecheck.h) to the checks of every access (access.h, in a build with
// -DRG_CUDA_HOST_RACECHECK=ON). What cannot complete is an error naming the
// kernel, the block and the thread, never a hang: a barrier that a returned
// thread will never reach, a collective whose mask names a returned lane, a
// pass in which no thread can go on.
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "cuda_host/access.h"
#include "cuda_host/asan.h"
#include "cuda_host/devmem.h"
#include "cuda_host/fiber.h"
#include "cuda_host/kernel.h"
#include "cuda_host/launch.h"
#include "cuda_host/racecheck.h"

namespace rgh {

ThreadView *g_thread;
BlockView *g_block;

namespace {

enum class Wait : unsigned char { ready, barrier, warp, done };

struct Thread : ThreadView {
    unsigned tid = 0;  // linear index in the block
    Wait wait = Wait::ready;
    bool started = false;
    Fiber fiber;
    // A barrier's predicate or a collective's operand, and the result.
    uint64_t in = 0, out = 0;
    unsigned bytes = 0;
    int arg = 0, width = 32;
};

// A warp collective that waits for lanes (several at once when their masks are disjoint).
struct Pending {
    Collective kind;
    const char *what;
    unsigned mask, arrived;
    const char *file;  // the call site of the first lane to arrive
    int line;
};

struct Warp {
    std::vector<Pending> pending;
    unsigned done = 0;  // lanes that returned
};

struct SharedSite {
    const void *site;
    size_t offset, bytes;
};

struct Block : BlockView {
    const Launch *launch = nullptr;
    unsigned n = 0;  // threads
    std::vector<Thread> *threads = nullptr;
    std::vector<Warp> warps;
    unsigned done = 0;
    // The barrier being filled.
    unsigned at_barrier = 0;
    BarrierOp bar_op = BAR_PLAIN;
    const char *bar_what = "";
    uint64_t bar_acc = 0;
    // Shared memory: the dynamic region at offset 0, static sites after it.
    std::vector<SharedSite> sites;
    size_t static_bytes = 0, top = 0;
    bool failed = false;
    std::string why;
};

Block *g_blk;
Fiber g_sched;  // the scheduler: the OS thread's own stack

// ---------------------------------------------------------------------------
// Stacks and the shared-memory arena, kept between launches

const size_t kGuard = 4096;
const size_t kSmemDynMax = 227 * 1024;      // cudaDevAttrMaxSharedMemoryPerBlockOptin
const size_t kSmemArena = kSharedArenaBytes;  // dynamic + static + gaps between sites
const size_t kSiteGap = kMinSharedHole;     // poisoned (ASan) and refused (access.h) between two sites

size_t stack_bytes(void) {
    static size_t b = 0;
    if (!b) {
        const char *v = getenv("RETRO_CUDA_HOST_STACK_KB");
        long kb = v && *v ? strtol(v, nullptr, 10) : (RGH_ASAN ? 256 : 128);
        if (kb < 16) kb = 16;
        b = ((size_t)kb * 1024 + 4095) / 4096 * 4096;
    }
    return b;
}

struct Pool {
    char *stacks = nullptr;  // n x (guard page + stack)
    size_t n = 0;
    std::vector<ucontext_t> uc;  // one per stack and one for the scheduler (ucontext switching)
    unsigned char *smem = nullptr;
};
Pool g_pool;

void pool_reserve(size_t n) {
    if (n <= g_pool.n) return;
    const size_t one = kGuard + stack_bytes();
    if (g_pool.stacks) munmap(g_pool.stacks, g_pool.n * one);
    void *p = mmap(nullptr, n * one, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        perror("retrograd cuda host: cannot map fiber stacks");
        abort();
    }
    g_pool.stacks = (char *)p;
    g_pool.n = n;
    for (size_t i = 0; i < n; i++) mprotect(g_pool.stacks + i * one, kGuard, PROT_NONE);  // overflow faults
    g_pool.uc.resize(n + 1);
    g_sched.uc = &g_pool.uc[n];
}

unsigned char *smem_arena(void) {
    if (!g_pool.smem) {
        void *p = mmap(nullptr, kSmemArena, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("retrograd cuda host: cannot map the shared-memory arena");
            abort();
        }
        g_pool.smem = (unsigned char *)p;
    }
    return g_pool.smem;
}

// ---------------------------------------------------------------------------
// Faults

std::string where(const Block &b, const Thread *t) {
    char s[256];
    int k = snprintf(s, sizeof s, "kernel '%s' block (%u,%u,%u)", b.launch->name.c_str(), b.idx.x, b.idx.y, b.idx.z);
    if (t) snprintf(s + k, sizeof s - (size_t)k, " thread (%u,%u,%u)", t->idx.x, t->idx.y, t->idx.z);
    return s;
}

Thread *running(const char *what) {
    if (!g_thread || !g_blk) outside_kernel(what);
    return static_cast<Thread *>(g_thread);
}

// Ends the running thread's block with an error; the thread never resumes.
[[noreturn]] void vfault(const char *fmt, va_list ap) {
    Thread *t = static_cast<Thread *>(g_thread);
    Block &b = *g_blk;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (!b.failed) {
        b.failed = true;
        b.why = where(b, t) + ": " + msg;
    }
    fiber_exit(&t->fiber, &g_sched);
}

[[noreturn]] __attribute__((format(printf, 1, 2))) void fault(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfault(fmt, ap);
}

void yield(Thread *t) { fiber_switch(&t->fiber, &g_sched); }

unsigned lanes_of(const Block &b, unsigned warp) {
    const unsigned first = warp * 32, left = b.n - first;
    return left >= 32 ? 0xFFFFFFFFu : (1u << left) - 1;
}

Thread &lane_thread(Block &b, unsigned warp, unsigned lane) { return (*b.threads)[warp * 32 + lane]; }

// ---------------------------------------------------------------------------
// Warp collectives

uint64_t poison_bits(unsigned bytes) { return bytes >= 8 ? ~0ull : (1ull << (8 * bytes)) - 1; }

// The lane whose value `lane` receives, or -1 for its own (a shuffle out of its segment).
int shuffle_source(Collective kind, unsigned lane, int arg, int width) {
    const unsigned w = (unsigned)width, seg = lane & ~(w - 1);
    switch (kind) {
    case COLL_SHFL: return (int)(seg + ((unsigned)arg & (w - 1)));
    case COLL_SHFL_UP: return (lane & (w - 1)) < (unsigned)arg ? -1 : (int)(lane - (unsigned)arg);
    case COLL_SHFL_DOWN: return (lane & (w - 1)) + (unsigned)arg >= w ? -1 : (int)(lane + (unsigned)arg);
    case COLL_SHFL_XOR: {
        const unsigned src = lane ^ ((unsigned)arg & 31);
        return src >= seg + w ? -1 : (int)src;  // earlier segments may be read, later ones give the own value
    }
    default: return -1;
    }
}

void complete(Block &b, unsigned warp, const Pending &p) {
    unsigned ballot = 0;
    uint64_t acc = 0;
    bool first = true, all_equal = true;
    uint64_t first_value = 0;
    for (unsigned l = 0; l < 32; l++) {
        if (!(p.mask >> l & 1)) continue;
        const Thread &t = lane_thread(b, warp, l);
        ballot |= (unsigned)(t.in != 0) << l;
        const uint32_t v = (uint32_t)t.in;
        if (first) {
            acc = v, first_value = t.in, first = false;
            continue;
        }
        all_equal = all_equal && t.in == first_value;
        switch (p.kind) {
        case COLL_REDUCE_ADD_U32: acc = (uint32_t)(acc + v); break;
        case COLL_REDUCE_MIN_U32: acc = v < acc ? v : acc; break;
        case COLL_REDUCE_MAX_U32: acc = v > acc ? v : acc; break;
        case COLL_REDUCE_MIN_I32: acc = (int32_t)v < (int32_t)acc ? v : acc; break;
        case COLL_REDUCE_MAX_I32: acc = (int32_t)v > (int32_t)acc ? v : acc; break;
        case COLL_REDUCE_AND: acc &= v; break;
        case COLL_REDUCE_OR: acc |= v; break;
        case COLL_REDUCE_XOR: acc ^= v; break;
        default: break;
        }
    }
    for (unsigned l = 0; l < 32; l++) {
        if (!(p.mask >> l & 1)) continue;
        Thread &t = lane_thread(b, warp, l);
        switch (p.kind) {
        case COLL_SYNCWARP: t.out = 0; break;
        case COLL_SHFL:
        case COLL_SHFL_UP:
        case COLL_SHFL_DOWN:
        case COLL_SHFL_XOR: {
            const int src = shuffle_source(p.kind, l, t.arg, t.width);
            if (src < 0) t.out = t.in;
            else if (p.mask >> src & 1) t.out = lane_thread(b, warp, (unsigned)src).in;
            else t.out = poison_bits(t.bytes);  // the source lane is not in the mask: undefined on a GPU
            break;
        }
        case COLL_BALLOT: t.out = ballot; break;
        case COLL_ALL: t.out = ballot == p.mask; break;
        case COLL_ANY: t.out = ballot != 0; break;
        case COLL_MATCH_ANY: {
            unsigned same = 0;
            for (unsigned k = 0; k < 32; k++)
                if ((p.mask >> k & 1) && lane_thread(b, warp, k).in == t.in) same |= 1u << k;
            t.out = same;
            break;
        }
        case COLL_MATCH_ALL: t.out = all_equal ? (p.mask | (1ull << 32)) : 0; break;
        default: t.out = acc; break;
        }
        t.wait = Wait::ready;
    }
    if (g_ranges.race) race_collective(warp, p.mask);
}

bool is_shuffle(Collective k) {
    return k == COLL_SHFL || k == COLL_SHFL_UP || k == COLL_SHFL_DOWN || k == COLL_SHFL_XOR;
}

std::string describe_pending(Block &b, unsigned warp, const Pending &p) {
    char s[256];
    snprintf(s, sizeof s, "warp %u: lanes 0x%08x wait in %s(mask 0x%08x) for lanes 0x%08x", warp, p.arrived, p.what,
             p.mask, p.mask & ~p.arrived);
    std::string r = s;
    for (unsigned l = 0; l < 32; l++) {
        if (!((p.mask & ~p.arrived) >> l & 1)) continue;
        const Thread &t = lane_thread(b, warp, l);
        r += t.wait == Wait::barrier ? " (lane " + std::to_string(l) + " waits at " + b.bar_what + ")" : "";
        break;
    }
    return r;
}

// Why no thread of the block can go on.
std::string deadlock(Block &b) {
    std::string r = where(b, nullptr) + ": no thread can go on:";
    if (b.at_barrier) r += " " + std::to_string(b.at_barrier) + " threads wait at " + b.bar_what + ";";
    for (unsigned w = 0; w < b.warps.size(); w++)
        for (const Pending &p : b.warps[w].pending) r += " " + describe_pending(b, w, p) + ";";
    r.pop_back();
    return r;
}

// The thread's end: nothing may still wait for it.
void thread_returned(Block &b, Thread *t) {
    const unsigned warp = t->tid >> 5, lane = t->tid & 31;
    t->wait = Wait::done;
    b.done++;
    b.warps[warp].done |= 1u << lane;
    if (b.at_barrier)
        fault("returned while %u threads wait at %s: a barrier must be reached by every thread of the block",
              b.at_barrier, b.bar_what);
    for (const Pending &p : b.warps[warp].pending)
        if (p.mask >> lane & 1)
            fault("returned while lanes 0x%08x wait for it in %s(mask 0x%08x)", p.arrived, p.what, p.mask);
}

void thread_main(void *arg) {
    Thread *t = static_cast<Thread *>(arg);
    fiber_started(&g_sched);
    g_blk->launch->body->run();
    thread_returned(*g_blk, t);
    fiber_exit(&t->fiber, &g_sched);
}

// ---------------------------------------------------------------------------
// Blocks

void begin_block(Block &b) {
    std::vector<Thread> &th = *b.threads;
    const size_t one = kGuard + stack_bytes();
    for (unsigned i = 0; i < b.n; i++) {
        Thread &t = th[i];
        t.tid = i;
        t.idx.x = i % b.dim.x;
        t.idx.y = i / b.dim.x % b.dim.y;
        t.idx.z = i / (b.dim.x * b.dim.y);
        t.wait = Wait::ready;
        t.started = false;
        t.fiber.stack_lo = g_pool.stacks + i * one + kGuard;
        t.fiber.stack_size = stack_bytes();
        t.fiber.uc = &g_pool.uc[i];
    }
    for (Warp &w : b.warps) w.pending.clear(), w.done = 0;
    b.done = 0;
    b.at_barrier = 0;
    // Shared memory: what the previous block used is poisoned again, the
    // dynamic region made addressable and filled with 0xFF.
    unsigned char *smem = smem_arena();
    RGH_POISON(smem, b.top > b.launch->shmem ? b.top : b.launch->shmem);
    RGH_UNPOISON(smem, b.launch->shmem);
    smem_reset(b.launch->shmem);
    memset(smem, 0xFF, b.launch->shmem);
    b.sites.clear();
    b.static_bytes = 0;
    b.top = (b.launch->shmem + 255) / 256 * 256 + kSiteGap;
    g_ranges.smem_static_lo = b.top;
    if (g_ranges.race) race_block(b.n);
}

// Threads whose fibers were left mid-run: their stacks are reused by the next launch.
void abandon(Block &b) {
    for (unsigned i = 0; i < b.n; i++) {
        Thread &t = (*b.threads)[i];
        if (t.started && t.wait != Wait::done) fiber_forget(&t.fiber);
    }
}

// ---------------------------------------------------------------------------
// Orders

enum class Order { forward, reverse, shuffle };

// splitmix64: a small seeded generator, the same sequence on every machine.
uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

template <class T>
void shuffle(std::vector<T> &v, uint64_t *state) {
    for (size_t i = v.size(); i > 1; i--) std::swap(v[i - 1], v[next_random(state) % i]);
}

uint64_t gcd(uint64_t a, uint64_t b) {
    while (b) a %= b, std::swap(a, b);
    return a;
}

// The blocks of a launch in shuffled order: a full permutation up to 4M blocks,
// above that an affine one (a * i + c mod n, a prime to n) that needs no memory.
struct BlockOrder {
    uint64_t n = 0, a = 1, c = 0;
    std::vector<uint32_t> perm;
    void init(uint64_t blocks, uint64_t *state) {
        n = blocks;
        perm.clear();
        if (n <= (1u << 22)) {
            perm.resize(n);
            for (uint32_t i = 0; i < n; i++) perm[i] = i;
            shuffle(perm, state);
            return;
        }
        do a = next_random(state) % n; while (!a || gcd(a, n) != 1);
        c = next_random(state) % n;
    }
    uint64_t at(uint64_t i) const { return perm.empty() ? (uint64_t)(((unsigned __int128)a * i + c) % n) : perm[i]; }
};

bool run_block(Block &b, Order order, uint64_t *state) {
    begin_block(b);
    std::vector<Thread> &th = *b.threads;
    static std::vector<unsigned> pass;  // the thread order of one pass under shuffle
    for (;;) {
        bool ran = false;
        if (order == Order::shuffle) {
            pass.resize(b.n);
            for (unsigned k = 0; k < b.n; k++) pass[k] = k;
            shuffle(pass, state);
        }
        for (unsigned k = 0; k < b.n; k++) {
            Thread &t = th[order == Order::shuffle ? pass[k] : order == Order::reverse ? b.n - 1 - k : k];
            if (t.wait != Wait::ready) continue;
            if (!t.started) {
                fiber_init(&t.fiber, thread_main, &t);
                t.started = true;
            }
            g_thread = &t;
            fiber_switch(&g_sched, &t.fiber);
            g_thread = nullptr;
            ran = true;
            if (b.failed) {
                abandon(b);
                return false;
            }
        }
        if (b.done == b.n) return true;
        if (!ran) {
            b.failed = true;
            b.why = deadlock(b);
            abandon(b);
            return false;
        }
    }
}

}  // namespace

// ---------------------------------------------------------------------------
// What kernels call (kernel.h)

void outside_kernel(const char *what) {
    fprintf(stderr, "retrograd cuda host: %s used outside a kernel (host code has no CUDA thread)\n", what);
    abort();
}

int block_barrier(const char *what, BarrierOp op, int pred) {
    Thread *t = running(what);
    Block &b = *g_blk;
    if (b.done) {
        const Thread *gone = &(*b.threads)[0];
        for (unsigned i = 0; i < b.n && gone->wait != Wait::done; i++) gone = &(*b.threads)[i];
        fault("%s: thread (%u,%u,%u) has already returned, so the barrier can never complete (every thread of the "
              "block must reach it)",
              what, gone->idx.x, gone->idx.y, gone->idx.z);
    }
    if (b.at_barrier == 0) {
        b.bar_op = op, b.bar_what = what;
        b.bar_acc = op == BAR_AND ? 1 : 0;
    } else if (b.bar_op != op) {
        fault("%s while %u threads wait at %s", what, b.at_barrier, b.bar_what);
    }
    switch (op) {
    case BAR_COUNT: b.bar_acc += pred != 0; break;
    case BAR_AND: b.bar_acc &= pred != 0; break;
    case BAR_OR: b.bar_acc |= pred != 0; break;
    case BAR_PLAIN: break;
    }
    t->wait = Wait::barrier;
    if (++b.at_barrier == b.n) {
        for (unsigned i = 0; i < b.n; i++) {
            Thread &x = (*b.threads)[i];
            x.out = b.bar_acc;
            x.wait = Wait::ready;
        }
        b.at_barrier = 0;
        if (g_ranges.race) race_barrier();
    }
    yield(t);
    return (int)t->out;
}

uint64_t warp_collective(Collective kind, const char *what, unsigned mask, uint64_t value, unsigned bytes, int arg,
                         int width, const char *file, int line) {
    Thread *t = running(what);
    Block &b = *g_blk;
    const unsigned warp = t->tid >> 5, lane = t->tid & 31;
    Warp &w = b.warps[warp];
    if (!(mask >> lane & 1)) fault("%s(mask 0x%08x): the mask does not name the calling lane %u", what, mask, lane);
    if (mask & ~lanes_of(b, warp))
        fault("%s(mask 0x%08x): lanes 0x%08x do not exist (the block has %u threads)", what, mask,
              mask & ~lanes_of(b, warp), b.n);
    if (mask & w.done)
        fault("%s(mask 0x%08x): lane %d, named in the mask, has already returned", what, mask,
              __builtin_ctz(mask & w.done));
    if (is_shuffle(kind) && (width < 1 || width > 32 || (width & (width - 1))))
        fault("%s: width %d is not a power of two in 1..32", what, width);
    size_t k = 0;
    while (k < w.pending.size() && w.pending[k].mask != mask) k++;
    if (k == w.pending.size()) {
        for (const Pending &p : w.pending)
            if (p.mask & mask)
                fault("%s(mask 0x%08x) while lanes 0x%08x of the warp wait in %s(mask 0x%08x): the masks overlap",
                      what, mask, p.arrived, p.what, p.mask);
        w.pending.push_back(Pending{kind, what, mask, 0, file, line});
    } else if (w.pending[k].kind != kind) {
        fault("%s(mask 0x%08x) while lanes 0x%08x wait in %s with the same mask", what, mask, w.pending[k].arrived,
              w.pending[k].what);
    } else if (w.pending[k].line != line || (w.pending[k].file != file && strcmp(w.pending[k].file, file))) {
        // Lanes of diverged branches that each reach "the same" collective: a
        // GPU does not promise to match them (the lanes may never converge).
        fault("%s(mask 0x%08x) at %s:%d while lanes 0x%08x of warp %u wait in %s at %s:%d: the lanes of one "
              "collective must reach it from the same call site",
              what, mask, file, line, w.pending[k].arrived, warp, w.pending[k].what, w.pending[k].file,
              w.pending[k].line);
    }
    t->in = value, t->bytes = bytes, t->arg = arg, t->width = width;
    t->wait = Wait::warp;
    Pending &p = w.pending[k];
    p.arrived |= 1u << lane;
    if (p.arrived == mask) {
        complete(b, warp, p);
        w.pending.erase(w.pending.begin() + (long)k);
    }
    yield(t);
    return t->out;
}

unsigned warp_active_mask(void) {
    Thread *t = running("__activemask()");
    const unsigned warp = t->tid >> 5;
    return lanes_of(*g_blk, warp) & ~g_blk->warps[warp].done;
}

void *shared_static(const void *site, size_t bytes, size_t align, const char *name) {
    Thread *t = running("RG_SHARED");
    (void)t;
    Block &b = *g_blk;
    for (const SharedSite &s : b.sites)
        if (s.site == site) return smem_arena() + s.offset;
    // The element's alignment only, as on a GPU, and where possible not twice
    // that, so that code relying on more (a float array read as float4) shows.
    size_t off = (b.top + align - 1) / align * align;
    if (off % (2 * align) == 0) off += align;
    b.static_bytes += bytes;
    if (b.static_bytes > 48 * 1024)
        fault("static shared memory reaches %zu bytes at '%s': a block may declare 48 KiB", b.static_bytes, name);
    // The launch was checked with the table's static bytes; a declaration past them means
    // the table does not describe this kernel.
    if (b.launch->table_static_smem >= 0 && b.static_bytes > (size_t)b.launch->table_static_smem)
        fault("'%s': %zu bytes of static shared memory declared, over the %ld the kernel table gives the kernel "
              "(run scripts/cuda-kernel-table.sh generate)",
              name, b.static_bytes, b.launch->table_static_smem);
    if (b.static_bytes + b.launch->shmem > b.launch->smem_limit)
        fault("'%s': %zu bytes of static and %zu of dynamic shared memory exceed the kernel's %zu", name,
              b.static_bytes, b.launch->shmem, b.launch->smem_limit);
    if (off + bytes + kSiteGap > kSmemArena) fault("'%s': the shared-memory arena is full", name);
    b.sites.push_back(SharedSite{site, off, bytes});
    b.top = off + bytes + kSiteGap;
    unsigned char *p = smem_arena() + off;
    RGH_UNPOISON(p, bytes);
    smem_mark(off, bytes);
    memset(p, 0xFF, bytes);
    return p;
}

void *shared_dynamic(void) {
    running("RG_SHARED_DYN");
    return smem_arena();
}

namespace {

bool env_flag(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

// RETRO_CUDA_HOST_SEED (decimal or 0x hex), 1 when unset.
uint64_t env_seed(void) {
    const char *v = getenv("RETRO_CUDA_HOST_SEED");
    return v && *v ? strtoull(v, nullptr, 0) : 1;
}

// Under ASan+UBSan the host twin is not instrumented (access.h): a misaligned
// access or an overflow is the sanitizer's report, which ends the process.
// ASan's death callback and UBSan's report hook (__ubsan_on_report below: UBSan
// is its own library, with its own death callbacks) name the kernel, block and
// thread that were running.
#if RGH_ASAN
void name_running_kernel_at_death(void) {
    if (!g_blk || !g_thread) return;
    fprintf(stderr, "retrograd cuda host: the sanitizer stopped %s\n",
            where(*g_blk, static_cast<const Thread *>(g_thread)).c_str());
}
#else
// Without ASan and without the instrumentation a misaligned vector store (an
// aligned SSE store) or a wild pointer in kernel code is a SIGSEGV: the handler
// names the kernel, block and thread, then puts the previous disposition back
// and returns, so the access runs again and the process ends as it would have.
struct sigaction g_old_segv, g_old_bus;

void name_running_kernel_on_signal(int sig, siginfo_t *info, void *) {
    if (g_blk && g_thread) {
        char s[512], at[40] = "";
        if (info->si_addr) snprintf(at, sizeof at, " at %p", info->si_addr);  // none for a misaligned SSE access
        const int n = snprintf(s, sizeof s, "retrograd cuda host: %s%s in %s (a misaligned vector access or a bad "
                               "pointer in kernel code)\n", sig == SIGBUS ? "SIGBUS" : "SIGSEGV", at,
                               where(*g_blk, static_cast<const Thread *>(g_thread)).c_str());
        if (n > 0 && write(2, s, (size_t)n < sizeof s ? (size_t)n : sizeof s - 1) < 0) {
        }
    }
    sigaction(sig, sig == SIGBUS ? &g_old_bus : &g_old_segv, nullptr);
}

// Once per process; an alternate signal stack once per thread that runs kernels
// (a fiber's overflow into its guard page leaves no stack to run the handler on).
void name_running_kernel_on_fault(void) {
    static thread_local bool alt_stack = false;
    if (!alt_stack) {
        alt_stack = true;
        stack_t now;
        if (sigaltstack(nullptr, &now) == 0 && (now.ss_flags & SS_DISABLE)) {
            const size_t bytes = 64 * 1024;
            void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p != MAP_FAILED) {
                stack_t st;
                st.ss_sp = p, st.ss_size = bytes, st.ss_flags = 0;
                sigaltstack(&st, nullptr);
            }
        }
    }
    static bool installed = false;
    if (installed) return;
    installed = true;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = name_running_kernel_on_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_old_segv);
    sigaction(SIGBUS, &sa, &g_old_bus);
}
#endif

}  // namespace

cudaError_t run_launch(const Launch &launch, std::string *why) {
#if RGH_ASAN
    static bool death_named = (__sanitizer_set_death_callback(name_running_kernel_at_death), true);
    (void)death_named;
#else
    name_running_kernel_on_fault();
#endif
    static std::vector<Thread> threads;
    static uint64_t launches;  // of this process: with the seed, what a shuffled order is drawn from
    const unsigned n = launch.block.x * launch.block.y * launch.block.z;
    pool_reserve(n);
    if (threads.size() < n) threads.resize(n);
    if (launch.shmem > kSmemDynMax) {
        *why = "kernel '" + launch.name + "': dynamic shared memory over 227 KiB";
        return cudaErrorInvalidValue;
    }
    Block b;
    b.launch = &launch;
    b.n = n;
    b.threads = &threads;
    b.warps.resize((n + 31) / 32);
    b.dim = launch.block;
    b.grid = launch.grid;
    g_blk = &b;
    g_block = &b;
    // Read per launch: tests switch them.
    const char *order_env = getenv("RETRO_CUDA_HOST_ORDER");
    const Order order = !order_env                         ? Order::forward
                        : !strcmp(order_env, "reverse") ? Order::reverse
                        : !strcmp(order_env, "shuffle") ? Order::shuffle
                                                        : Order::forward;
    const uint64_t seed = env_seed(), launch_no = ++launches;
    uint64_t state = seed ^ (launch_no * 0xD1B54A32D192ED03ull);
    g_ranges.smem_lo = (uintptr_t)smem_arena();
    g_ranges.smem_span = kSmemArena;
    g_ranges.smem_dynamic = launch.shmem;
    dev_mapping(&g_ranges.dev_lo, &g_ranges.dev_span);
    g_ranges.race = env_flag("RETRO_CUDA_HOST_RACECHECK");
#ifndef RGH_INSTRUMENTED
    static bool told = false;  // the hooks are never called: say so rather than pass silently
    if (g_ranges.race && !told) {
        told = true;
        fprintf(stderr, "retrograd cuda host: RETRO_CUDA_HOST_RACECHECK=1 does nothing in this build (configure "
                        "with -DRG_CUDA_HOST_RACECHECK=ON to instrument the host twin's memory accesses)\n");
    }
#endif
    if (g_ranges.race) race_launch(g_ranges.dev_lo, g_ranges.dev_span);
    const uint64_t gx = launch.grid.x, gxy = gx * launch.grid.y, blocks = gxy * launch.grid.z;
    BlockOrder shuffled;
    if (order == Order::shuffle) shuffled.init(blocks, &state);
    cudaError_t e = cudaSuccess;
    for (uint64_t i = 0; i < blocks; i++) {
        const uint64_t k = order == Order::shuffle ? shuffled.at(i) : i;
        b.idx.x = (unsigned)(k % gx), b.idx.y = (unsigned)(k / gx % launch.grid.y), b.idx.z = (unsigned)(k / gxy);
        if (!run_block(b, order, &state)) {
            *why = b.why;
            if (order == Order::shuffle) {
                char s[160];
                snprintf(s, sizeof s, " (RETRO_CUDA_HOST_ORDER=shuffle RETRO_CUDA_HOST_SEED=%llu, launch %llu of the "
                         "process)", (unsigned long long)seed, (unsigned long long)launch_no);
                *why += s;
            }
            e = cudaErrorLaunchFailure;
            break;
        }
    }
    RGH_POISON(smem_arena(), b.top > launch.shmem ? b.top : launch.shmem);
    g_blk = nullptr;
    g_block = nullptr;
    g_ranges.race = false;
    return e;
}

unsigned running_tid(void) { return running("a memory access")->tid; }

unsigned long long running_block(void) {
    const Block &b = *g_blk;
    return b.idx.x + (unsigned long long)b.grid.x * (b.idx.y + (unsigned long long)b.grid.y * b.idx.z);
}

void kernel_fault(const char *fmt, ...) {
    running("a memory access");
    va_list ap;
    va_start(ap, fmt);
    vfault(fmt, ap);
}

void release_blocks(void) {
    if (g_pool.stacks) munmap(g_pool.stacks, g_pool.n * (kGuard + stack_bytes()));
    if (g_pool.smem) munmap(g_pool.smem, kSmemArena);
    race_release();
    g_pool.stacks = nullptr, g_pool.n = 0, g_pool.smem = nullptr;
    g_pool.uc.clear();
}

}  // namespace rgh

#if RGH_ASAN
// Called by UBSan for every report (libubsan's weak definition is overridden).
extern "C" void __ubsan_on_report(void) { rgh::name_running_kernel_at_death(); }
#endif

long long rgh_clock64(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}
