// bench_memrate.h - the memory yardstick of the benchmarks that compare a kernel's
// bytes per second with what the machine can read (bench_generate, bench_ssm).
#ifndef RG_BENCH_MEMRATE_H
#define RG_BENCH_MEMRATE_H

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "base/threadpool.h"
#include "bench_util.h"

// The memory yardstick, measured in this process: a plain read of 512 MiB
// (far past the caches) on the same threads, 64-bit words into independent
// sums, prefetched ahead like the kernels' rows. Generation reads every weight once per token, so bytes per token over
// this rate is the ceiling no kernel passes.
typedef struct read_job {
    const uint64_t *p;
    int64_t n;
    uint64_t sum[64];
} read_job;

static inline void read_part(void *arg, int ith, int nth) {
    read_job *j = arg;
    int64_t i0, i1;
    rg_split_range(j->n, ith, nth, &i0, &i1);
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (int64_t i = i0; i + 4 <= i1; i += 4) {
        if ((i & 7) == 0) __builtin_prefetch(j->p + i + 256);  // 2 KB ahead, as the decode kernels fetch
        a += j->p[i], b ^= j->p[i + 1], c += j->p[i + 2], d ^= j->p[i + 3];
    }
    j->sum[ith % 64] = a + b + c + d;
}

static inline double plain_read_gbs(int threads) {
    const size_t bytes = (size_t)512 << 20;
    // In huge pages when the kernel gives them, as the model's own mapping is
    // advised (base/file.c): a yardstick in 4 KiB pages read slower than the
    // weights did.
    uint64_t *buf = aligned_alloc((size_t)2 << 20, bytes);
#ifdef MADV_HUGEPAGE
    if (buf) madvise(buf, bytes, MADV_HUGEPAGE);
#endif
    rg_threadpool *pool = NULL;
    rg_error err;
    if (!buf || rg_threadpool_create(&pool, threads, &err)) {
        free(buf);
        return 0;
    }
    for (size_t i = 0; i < bytes / 8; i++) buf[i] = i * 0x9E3779B97F4A7C15ull;
    read_job j = {.p = buf, .n = (int64_t)(bytes / 8)};
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = bench_now();
        rg_threadpool_run(pool, read_part, &j);
        double t = bench_now() - t0;
        if (t < best) best = t;
    }
    rg_threadpool_free(pool);
    free(buf);
    return (double)bytes / best * 1e-9;
}

#endif
