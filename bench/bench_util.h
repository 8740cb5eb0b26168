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
// does not count; best of 20 runs of ~20 ms. The addend is a register: Golden
// Cove (Sapphire Rapids) folds chains of add-immediate at rename, and a chain
// of `add $1` measured 22 GHz there against 4.0 GHz with `add %reg`.
static inline double bench_measured_mhz(void) {
#if defined(__x86_64__)
    double best = 0;
    for (int t = 0; t < 20; t++) {
        unsigned long x = 0, one = 1;
        const long trips = 1200000;
        struct timespec t0, t1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        for (long i = 0; i < trips; i++) __asm__ volatile(".rept 50\n\taddq %1, %0\n\t.endr" : "+r"(x) : "r"(one));
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        double mhz = 50.0 * (double)trips / s * 1e-6;
        if (mhz > best) best = mhz;
    }
    return best;
#else
    return 0;
#endif
}

#if defined(__x86_64__)
// FMA throughput: 16 independent chains of vfmadd on 256-bit or 512-bit registers per
// trip, zeros in and zeros out (no denormal or NaN can slow a chain down).
static inline void bench_fma_trips_ymm(long trips) {
    __asm__ volatile(".irp r,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15\n\tvxorps %%xmm\\r, %%xmm\\r, %%xmm\\r\n\t.endr" :::
                     "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
                     "xmm13", "xmm14", "xmm15");
    for (long i = 0; i < trips; i++)
        __asm__ volatile("vxorps %%xmm0, %%xmm0, %%xmm0\n\t"
                         ".irp r,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15\n\tvfmadd231ps %%ymm0, %%ymm0, %%ymm\\r\n\t.endr\n\t"
                         "vfmadd231ps %%ymm0, %%ymm0, %%ymm1" ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",
                         "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
}
__attribute__((target("avx512f"))) static inline void bench_fma_trips_zmm(long trips) {
    __asm__ volatile(".irp r,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31\n\tvpxord %%zmm\\r, %%zmm\\r, %%zmm\\r\n\t.endr" :::
                     "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26",
                     "xmm27", "xmm28", "xmm29", "xmm30", "xmm31");
    for (long i = 0; i < trips; i++)
        __asm__ volatile("vpxord %%zmm0, %%zmm0, %%zmm0\n\t"
                         ".irp r,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31\n\tvfmadd231ps %%zmm0, %%zmm0, %%zmm\\r\n\t.endr"
                         ::: "xmm0", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24",
                         "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31");
}
// FP32 FLOP per second of thread CPU time of run (16 FMAs of `lanes` floats a trip), best of 5.
static inline double bench_fma_rate(void (*run)(long), int lanes) {
    double best = 0;
    for (int t = 0; t < 5; t++) {
        const long trips = 2000000;
        struct timespec t0, t1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        run(trips);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        double r = 16.0 * 2.0 * lanes * (double)trips / s;
        if (r > best) best = r;
    }
    return best;
}
#endif

// FP32 FLOP per cycle per core of the widest FMA our kernels use here: the
// measured FMA rate over the measured clock, rounded to 16, 32 or 64 (two
// 256-bit pipes give 32; two 512-bit pipes, Sapphire Rapids, 64; Zen 4's
// 512-bit FMAs issue as two halves, 32). 32 when nothing can be measured.
static inline int bench_fma_flop_per_cycle(double mhz) {
#if defined(__x86_64__)
    if (!(mhz > 0) || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 32;
    double rate = bench_fma_rate(bench_fma_trips_ymm, 8);
    if (__builtin_cpu_supports("avx512f")) {
        double z = bench_fma_rate(bench_fma_trips_zmm, 16);
        if (z > rate) rate = z;
    }
    double per = rate / (mhz * 1e6);
    return per > 45 ? 64 : per > 22 ? 32 : 16;
#else
    (void)mhz;
    return 32;
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

// An integer from the environment, def when unset or empty.
static inline int bench_env_int(const char *name, int def) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : def;
}

// The English paragraph the generation benchmarks feed SmolLM2 (bench_speculative repeats it, bench_seqs slices it).
static inline const char *bench_paragraph(void) {
    return "The lighthouse keeper climbed the spiral stairs every evening at dusk. He trimmed the wick, polished the "
           "great lens until it shone, and wound the clockwork that turned the beam across the water. Ships passing "
           "in the night saw the light sweep the rocks twice a minute, and they knew where the channel ran. In the "
           "winter the storms came from the north, and the keeper wrote in his log the speed of the wind, the height "
           "of the waves and the names of the ships that sheltered in the bay.";
}

#endif
