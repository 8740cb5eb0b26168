// bench_util.h - timing for the benchmarks: best of several runs, wall clock.
#ifndef RG_BENCH_UTIL_H
#define RG_BENCH_UTIL_H

#include <time.h>

static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Runs fn(arg) `reps` times per trial and returns the best seconds per call over `trials`.
static inline double bench_best(void (*fn)(void *), void *arg, int reps, int trials) {
    double best = 1e30;
    for (int t = 0; t < trials; t++) {
        double t0 = bench_now();
        for (int r = 0; r < reps; r++) fn(arg);
        double dt = (bench_now() - t0) / reps;
        if (dt < best) best = dt;
    }
    return best;
}

#endif
