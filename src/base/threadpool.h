// threadpool.h - a persistent pool of worker threads running one parallel
// section at a time. The caller's thread is one of them, so a pool of n
// threads starts n - 1. A section is n parts, fn(arg, ith, n) for ith in
// 0..n-1: the caller runs part 0, and each other part runs once on whichever
// thread claims it first (the caller too, when a worker has been descheduled
// on a busy machine). Work is split by part index, never by thread: what a
// part computes depends only on (ith, n), so results are deterministic for a
// given thread count. Parts of one section must not wait for each other.
#ifndef RG_BASE_THREADPOOL_H
#define RG_BASE_THREADPOOL_H

#include "retrograd.h"

typedef struct rg_threadpool rg_threadpool;

// fn(arg, ith, nth) runs once for every ith in 0..nth-1 (nth = the pool's size),
// the parts in parallel on the pool's threads.
typedef void (*rg_parallel_fn)(void *arg, int ith, int nth);

// n_threads <= 0 means one per online core.
rg_status rg_threadpool_create(rg_threadpool **out, int n_threads, rg_error *err);
int rg_threadpool_size(const rg_threadpool *pool);
// Runs every part of fn and returns when all are done. A NULL pool runs fn(arg, 0, 1).
void rg_threadpool_run(rg_threadpool *pool, rg_parallel_fn fn, void *arg);
void rg_threadpool_free(rg_threadpool *pool);

// The half-open range [*begin, *end) of n items that thread ith of nth takes.
static inline void rg_split_range(int64_t n, int ith, int nth, int64_t *begin, int64_t *end) {
    int64_t per = n / nth, extra = n % nth;
    *begin = ith * per + (ith < extra ? ith : extra);
    *end = *begin + per + (ith < extra ? 1 : 0);
}

#endif
