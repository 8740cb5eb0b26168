// bench_util.h - timing for the benchmarks: best of several runs, wall clock.
#ifndef RG_BENCH_UTIL_H
#define RG_BENCH_UTIL_H

#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

// MHz from 50 dependent adds per trip (latency 1 cycle), timed on this
// thread's CPU clock so that time spent descheduled (the machine is shared)
// does not count; best of 20 runs of ~20 ms.
static inline double bench_measured_mhz(void) {
#if defined(__x86_64__)
#define RG_ADD10 "addq $1, %0\n\taddq $1, %0\n\taddq $1, %0\n\taddq $1, %0\n\taddq $1, %0\n\t" \
                 "addq $1, %0\n\taddq $1, %0\n\taddq $1, %0\n\taddq $1, %0\n\taddq $1, %0\n\t"
    double best = 0;
    for (int t = 0; t < 20; t++) {
        unsigned long x = 0;
        const long trips = 1200000;
        struct timespec t0, t1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        for (long i = 0; i < trips; i++) __asm__ volatile(RG_ADD10 RG_ADD10 RG_ADD10 RG_ADD10 RG_ADD10 : "+r"(x));
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        double mhz = 50.0 * (double)trips / s * 1e-6;
        if (mhz > best) best = mhz;
    }
    return best;
#undef RG_ADD10
#else
    return 0;
#endif
}

// The clock /proc/cpuinfo claims (in a VM, often not the real one).
static inline double bench_cpuinfo_mhz(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return 0;
    char line[256];
    double mhz = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "cpu MHz", 7) == 0) {
            const char *c = strchr(line, ':');
            if (c) mhz = atof(c + 1);
            break;
        }
    fclose(f);
    return mhz;
}

#endif
