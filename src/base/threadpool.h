// threadpool.h - a persistent pool of worker threads running one parallel
// section at a time. The caller's thread is worker 0, so a pool of n threads
// starts n - 1. Work is split by index, never stolen: which thread computes
// which element depends only on (n, ith), so results are deterministic for a
// given thread count.
#ifndef RG_BASE_THREADPOOL_H
#define RG_BASE_THREADPOOL_H

#include "retrograd.h"

typedef struct rg_threadpool rg_threadpool;

// fn(arg, ith, nth) runs once on every thread, ith in 0..nth-1.
typedef void (*rg_parallel_fn)(void *arg, int ith, int nth);

// n_threads <= 0 means one per online core.
rg_status rg_threadpool_create(rg_threadpool **out, int n_threads, rg_error *err);
int rg_threadpool_size(const rg_threadpool *pool);
// Runs fn on every thread and returns when all are done. A NULL pool runs fn(arg, 0, 1).
void rg_threadpool_run(rg_threadpool *pool, rg_parallel_fn fn, void *arg);
void rg_threadpool_free(rg_threadpool *pool);

// The half-open range [*begin, *end) of n items that thread ith of nth takes.
static inline void rg_split_range(int64_t n, int ith, int nth, int64_t *begin, int64_t *end) {
    int64_t per = n / nth, extra = n % nth;
    *begin = ith * per + (ith < extra ? ith : extra);
    *end = *begin + per + (ith < extra ? 1 : 0);
}

#endif
