// threadpool.c - workers spin briefly on an atomic generation counter between
// sections, then sleep on a condition variable. A model step is hundreds of
// short sections (one per op); waking a sleeping thread costs a futex call and
// a context switch each time, while a short spin catches the next section in
// well under a microsecond.
//
// The parts of a section are claimed, not assigned: part 0 is the caller's,
// and parts 1..n-1 go to whichever thread takes them first from a shared
// ticket. When the machine is busy and a worker has been descheduled, the
// caller runs that worker's part itself instead of waiting a time slice for
// it (before this, two threads on a loaded two-core machine generated tokens
// more slowly than one). What a part computes still depends only on (ith,
// nth), so results are unchanged.
//
// When even that is not enough - a worker took its part and was then
// descheduled, so the caller waited far longer than its own part took - the
// machine is oversubscribed, and every later section risks the same wait: the
// pool then runs sections on the caller alone (all parts, in order; the
// workers sleep) for SERIAL_FACTOR times that wait before trying the workers
// again, so a rare preemption costs little and a machine that keeps
// preempting gets mostly one thread. Under that load one thread is faster
// than two (measured here: 1 thread 53-67 tokens/s generating, 2 threads
// 32-54), and the results are the same.
//
// The ticket holds the section's generation in its high bits and the next
// unclaimed part in its low 16 bits, so a worker that wakes late can never
// claim a part of a section other than the one it read the job of: a claim is
// a compare-and-swap on the ticket it saw, and the caller does not leave a
// section (and so does not publish the next job) before every claimed part is
// done.
#include "base/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cpu.h"
#include "base/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

// Waiting: SPIN_PURE pause instructions (~26 ns each on Zen 3, so ~25 us),
// then a sched_yield every YIELD_EVERY pauses (a busy machine's other threads,
// ours included, get the core: spinning through whole time slices made two
// threads slower than one there), and a worker sleeps after SPIN_ROUNDS
// (~200 us). A quiet machine runs the sections of a generated token a few
// microseconds apart, well inside the spin.
enum { SPIN_PURE = 256, YIELD_EVERY = 32, SPIN_ROUNDS = 8192 };

static inline void spin_wait(unsigned i) {
    if (i >= SPIN_PURE && i % YIELD_EVERY == 0) sched_yield();
    else CPU_RELAX();
}
enum { PART_BITS = 16 };
// A wait for the workers counts as late above LATE_NS and LATE_RATIO times the
// caller's own share; one late wait of w sends the sections of the next
// SERIAL_FACTOR * w to the caller alone.
enum { LATE_NS = 300000, LATE_RATIO = 2, SERIAL_FACTOR = 4 };
#define PART_MASK ((1ull << PART_BITS) - 1)

typedef struct worker {
    rg_threadpool *pool;
    pthread_t thread;
} worker;

struct rg_threadpool {
    int n_threads;
    worker *workers;  // [n_threads - 1]
    atomic_ulong generation;    // bumped once per section (release): the job is then valid
    atomic_ullong ticket;       // generation << PART_BITS | next unclaimed part
    atomic_int done;            // parts 1..n-1 finished in the current section
    atomic_int stop;
    rg_parallel_fn fn;
    void *arg;
    pthread_mutex_t mutex;    // guards n_sleeping and the condition variable
    pthread_cond_t wake;
    int n_sleeping;
    int64_t serial_until;     // CLOCK_MONOTONIC ns: sections before it run on the caller alone (caller-only state)
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// Claims and runs parts of section gen until none is left. Returns when the
// section has no unclaimed part, or is no longer the current one.
static void run_parts(rg_threadpool *pool, unsigned long gen) {
    const int nth = pool->n_threads;
    unsigned long long t = atomic_load_explicit(&pool->ticket, memory_order_acquire);
    for (;;) {
        if ((t >> PART_BITS) != (gen & (~0ull >> PART_BITS))) return;
        int part = (int)(t & PART_MASK);
        if (part >= nth) return;
        if (atomic_compare_exchange_weak_explicit(&pool->ticket, &t, t + 1, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            // The section cannot end before this part is done, so the job is gen's.
            pool->fn(pool->arg, part, nth);
            atomic_fetch_add_explicit(&pool->done, 1, memory_order_release);
            t = atomic_load_explicit(&pool->ticket, memory_order_acquire);
        }
    }
}

static void *worker_main(void *p) {
    worker *w = p;
    rg_threadpool *pool = w->pool;
    unsigned long seen = 0;
    for (;;) {
        for (unsigned i = 0; i < SPIN_ROUNDS; i++) {
            if (atomic_load_explicit(&pool->generation, memory_order_acquire) != seen ||
                atomic_load_explicit(&pool->stop, memory_order_relaxed))
                break;
            spin_wait(i);
        }
        if (atomic_load_explicit(&pool->generation, memory_order_acquire) == seen &&
            !atomic_load_explicit(&pool->stop, memory_order_relaxed)) {
            pthread_mutex_lock(&pool->mutex);
            pool->n_sleeping++;
            // Checked under the mutex: the caller bumps the generation, then takes
            // the mutex to wake sleepers, so no wake-up is lost.
            while (atomic_load_explicit(&pool->generation, memory_order_acquire) == seen &&
                   !atomic_load_explicit(&pool->stop, memory_order_relaxed))
                pthread_cond_wait(&pool->wake, &pool->mutex);
            pool->n_sleeping--;
            pthread_mutex_unlock(&pool->mutex);
        }
        if (atomic_load_explicit(&pool->stop, memory_order_relaxed)) return NULL;
        seen = atomic_load_explicit(&pool->generation, memory_order_acquire);
        run_parts(pool, seen);
    }
}

rg_status rg_threadpool_create(rg_threadpool **out, int n_threads, rg_error *err) {
    *out = NULL;
    if (n_threads <= 0) n_threads = rg_cpu_count();
    if (n_threads > 512) return rg_fail(err, RG_ERR_ARG, "thread pool: %d threads is too many (at most 512)", n_threads);
    rg_threadpool *pool = calloc(1, sizeof *pool);
    if (!pool) return rg_fail(err, RG_ERR_NOMEM, "thread pool: out of memory");
    pool->n_threads = n_threads;
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->ticket, PART_MASK);  // generation 0: nothing to claim
    atomic_init(&pool->done, 0);
    atomic_init(&pool->stop, 0);
    pthread_mutex_init(&pool->mutex, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pool->workers = n_threads > 1 ? calloc((size_t)n_threads - 1, sizeof *pool->workers) : NULL;
    if (n_threads > 1 && !pool->workers) {
        rg_threadpool_free(pool);
        return rg_fail(err, RG_ERR_NOMEM, "thread pool: out of memory");
    }
    for (int i = 0; i < n_threads - 1; i++) {
        pool->workers[i] = (worker){pool, 0};
        if (pthread_create(&pool->workers[i].thread, NULL, worker_main, &pool->workers[i]) != 0) {
            pool->n_threads = i + 1;  // only these exist; free joins them
            rg_threadpool_free(pool);
            return rg_fail(err, RG_ERR_NOMEM, "thread pool: cannot start thread %d of %d", i + 2, n_threads);
        }
    }
    *out = pool;
    return RG_OK;
}

int rg_threadpool_size(const rg_threadpool *pool) { return pool ? pool->n_threads : 1; }

void rg_threadpool_run(rg_threadpool *pool, rg_parallel_fn fn, void *arg) {
    if (!pool || pool->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    const int nth = pool->n_threads;
    int64_t t0 = now_ns();
    if (t0 < pool->serial_until) {
        for (int ith = 0; ith < nth; ith++) fn(arg, ith, nth);
        return;
    }
    unsigned long gen = atomic_load_explicit(&pool->generation, memory_order_relaxed) + 1;
    pool->fn = fn;
    pool->arg = arg;
    atomic_store_explicit(&pool->done, 0, memory_order_relaxed);
    atomic_store_explicit(&pool->ticket, ((unsigned long long)gen << PART_BITS) | 1, memory_order_release);
    atomic_store_explicit(&pool->generation, gen, memory_order_release);
    pthread_mutex_lock(&pool->mutex);
    if (pool->n_sleeping) pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
    fn(arg, 0, nth);
    run_parts(pool, gen);  // the parts no worker has taken yet
    if (atomic_load_explicit(&pool->done, memory_order_acquire) >= nth - 1) return;
    // Parts taken by a worker that was then descheduled may take a while.
    int64_t t1 = now_ns();
    for (unsigned i = 0; atomic_load_explicit(&pool->done, memory_order_acquire) < nth - 1; i++) spin_wait(i);
    int64_t t2 = now_ns(), waited = t2 - t1;
    if (waited > LATE_NS && waited > LATE_RATIO * (t1 - t0)) pool->serial_until = t2 + SERIAL_FACTOR * waited;
}

void rg_threadpool_free(rg_threadpool *pool) {
    if (!pool) return;
    atomic_store(&pool->stop, 1);
    pthread_mutex_lock(&pool->mutex);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
    for (int i = 0; i < pool->n_threads - 1 && pool->workers; i++) pthread_join(pool->workers[i].thread, NULL);
    free(pool->workers);
    pthread_mutex_destroy(&pool->mutex);
    pthread_cond_destroy(&pool->wake);
    free(pool);
}
