// threadpool.c - workers spin briefly on an atomic generation counter between
// sections, then sleep on a condition variable. A model step is hundreds of
// short sections (one per op); waking a sleeping thread costs a futex call and
// a context switch each time, while a short spin catches the next section in
// well under a microsecond. The caller spins for completion: the workers are
// running by then.
#include "base/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

// About half a millisecond of pause instructions before a worker sleeps.
enum { SPIN_ROUNDS = 16384 };

typedef struct worker {
    rg_threadpool *pool;
    int ith;
    pthread_t thread;
} worker;

struct rg_threadpool {
    int n_threads;
    worker *workers;  // [n_threads - 1]
    atomic_ulong generation;  // bumped once per section (release): fn and arg are then valid
    atomic_int pending;       // workers still running the current section
    atomic_int stop;
    rg_parallel_fn fn;
    void *arg;
    pthread_mutex_t mutex;    // guards n_sleeping and the condition variable
    pthread_cond_t wake;
    int n_sleeping;
};

static void *worker_main(void *p) {
    worker *w = p;
    rg_threadpool *pool = w->pool;
    unsigned long seen = 0;
    for (;;) {
        for (int i = 0; i < SPIN_ROUNDS; i++) {
            if (atomic_load_explicit(&pool->generation, memory_order_acquire) != seen ||
                atomic_load_explicit(&pool->stop, memory_order_relaxed))
                break;
            CPU_RELAX();
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
        pool->fn(pool->arg, w->ith, pool->n_threads);
        atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_release);
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
    atomic_init(&pool->pending, 0);
    atomic_init(&pool->stop, 0);
    pthread_mutex_init(&pool->mutex, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pool->workers = n_threads > 1 ? calloc((size_t)n_threads - 1, sizeof *pool->workers) : NULL;
    if (n_threads > 1 && !pool->workers) {
        rg_threadpool_free(pool);
        return rg_fail(err, RG_ERR_NOMEM, "thread pool: out of memory");
    }
    for (int i = 0; i < n_threads - 1; i++) {
        pool->workers[i] = (worker){pool, i + 1, 0};
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
    pool->fn = fn;
    pool->arg = arg;
    atomic_store_explicit(&pool->pending, pool->n_threads - 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->generation, 1, memory_order_release);
    pthread_mutex_lock(&pool->mutex);
    if (pool->n_sleeping) pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
    fn(arg, 0, pool->n_threads);
    // A worker descheduled by a busy machine may take a while: yield after a spin.
    for (unsigned i = 0; atomic_load_explicit(&pool->pending, memory_order_acquire) > 0; i++) {
        if (i < SPIN_ROUNDS) CPU_RELAX();
        else sched_yield();
    }
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
