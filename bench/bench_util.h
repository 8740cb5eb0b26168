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

// What the GPUs we know can do at most, by a name cudaGetDeviceProperties gives: the dense
// BF16 tensor-core peak (TFLOP/s, without sparsity; training's MFU) and the memory bandwidth
// (GB/s; generation's ceiling). Zeros when the name is not known. The first key found in the
// name wins, so the specific ones come first.
typedef struct bench_device_peak {
    const char *key;
    double bf16_tflops, mem_gbs;
} bench_device_peak;

static inline bench_device_peak bench_device_peak_of(const char *name) {
    static const bench_device_peak known[] = {
        {"H200", 989.4, 4800},     {"H100 NVL", 835.0, 3900},  {"H100 PCIe", 756.0, 2000}, {"H100 SXM", 989.4, 3350},
        {"H100 80GB HBM3", 989.4, 3350}, {"H100", 756.0, 2000}, {"A100-SXM4-80GB", 312.0, 2039},
        {"A100", 312.0, 1555},     {"L40S", 362.1, 864},       {"L4", 121.0, 300},         {"RTX 4090", 165.2, 1008},
        {"A10", 125.0, 600},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strstr(name, known[i].key)) return known[i];
    return (bench_device_peak){name, 0, 0};
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
