// threadpool.c - workers sleep on a condition variable between sections and
// wake when the generation counter moves; the last one to finish signals the
// caller. Sections are short (one matmul), so the handshake is kept simple.
#include "base/threadpool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/error.h"

typedef struct worker {
    rg_threadpool *pool;
    int ith;
    pthread_t thread;
} worker;

struct rg_threadpool {
    int n_threads;
    worker *workers;  // [n_threads - 1]
    pthread_mutex_t mutex;
    pthread_cond_t wake;  // workers wait here for a new generation
    pthread_cond_t done;  // the caller waits here for pending == 0
    unsigned long generation;
    int pending;          // workers still running the current section
    int stop;
    rg_parallel_fn fn;
    void *arg;
};

static void *worker_main(void *p) {
    worker *w = p;
    rg_threadpool *pool = w->pool;
    unsigned long seen = 0;
    for (;;) {
        pthread_mutex_lock(&pool->mutex);
        while (pool->generation == seen && !pool->stop) pthread_cond_wait(&pool->wake, &pool->mutex);
        if (pool->stop) {
            pthread_mutex_unlock(&pool->mutex);
            return NULL;
        }
        seen = pool->generation;
        rg_parallel_fn fn = pool->fn;
        void *arg = pool->arg;
        pthread_mutex_unlock(&pool->mutex);
        fn(arg, w->ith, pool->n_threads);
        pthread_mutex_lock(&pool->mutex);
        if (--pool->pending == 0) pthread_cond_signal(&pool->done);
        pthread_mutex_unlock(&pool->mutex);
    }
}

rg_status rg_threadpool_create(rg_threadpool **out, int n_threads, rg_error *err) {
    *out = NULL;
    if (n_threads <= 0) n_threads = rg_cpu_count();
    if (n_threads > 512) return rg_fail(err, RG_ERR_ARG, "thread pool: %d threads is too many (at most 512)", n_threads);
    rg_threadpool *pool = calloc(1, sizeof *pool);
    if (!pool) return rg_fail(err, RG_ERR_NOMEM, "thread pool: out of memory");
    pool->n_threads = n_threads;
    pthread_mutex_init(&pool->mutex, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
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
    pthread_mutex_lock(&pool->mutex);
    pool->fn = fn;
    pool->arg = arg;
    pool->pending = pool->n_threads - 1;
    pool->generation++;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
    fn(arg, 0, pool->n_threads);
    pthread_mutex_lock(&pool->mutex);
    while (pool->pending > 0) pthread_cond_wait(&pool->done, &pool->mutex);
    pthread_mutex_unlock(&pool->mutex);
}

void rg_threadpool_free(rg_threadpool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mutex);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
    for (int i = 0; i < pool->n_threads - 1 && pool->workers; i++) pthread_join(pool->workers[i].thread, NULL);
    free(pool->workers);
    pthread_mutex_destroy(&pool->mutex);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done);
    free(pool);
}
