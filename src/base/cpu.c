// cpu.c - feature detection for run-time dispatch.
#include "base/cpu.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static atomic_int cached = -1;

static int detect(void) {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
    // RG_NO_AVX2=1: the baseline x86-64 kernels everywhere (what a machine without AVX2 runs;
    // the tests that promise the same bits on both paths run under it too)
    const char *off = getenv("RG_NO_AVX2");
    if (off && *off && *off != '0') return 0;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 0;
    unsigned a, b, c, d;
    // clang 14 lacks __builtin_cpu_supports("f16c"): read CPUID leaf 1, ECX bit 29.
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    return (c >> 29) & 1;
#else
    return 0;
#endif
}

int rg_cpu_has_avx2(void) {
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        v = detect();
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
}

void rg_cpu_force_baseline(int on) { atomic_store_explicit(&cached, on ? 0 : -1, memory_order_relaxed); }

static atomic_int cached_vnni = -1;

static int detect_vnni(void) {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
    const char *off = getenv("RG_NO_AVX512");
    if (off && *off && *off != '0') return 0;
    __builtin_cpu_init();  // libgcc's detection also checks that the OS saves the AVX-512 state
    return rg_cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

int rg_cpu_has_avx512_vnni(void) {
    int v = atomic_load_explicit(&cached_vnni, memory_order_relaxed);
    if (v < 0) {
        v = detect_vnni();
        atomic_store_explicit(&cached_vnni, v, memory_order_relaxed);
    }
    return v;
}

static atomic_int cached_bf16 = -1;

int rg_cpu_has_avx512_bf16(void) {
    int v = atomic_load_explicit(&cached_bf16, memory_order_relaxed);
    if (v < 0) {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
        unsigned a, b, c, d;
        // CPUID leaf 7 sub-leaf 1, EAX bit 5 (clang 14's __builtin_cpu_supports lacks "avx512bf16")
        v = rg_cpu_has_avx512_vnni() && __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1);
#else
        v = 0;
#endif
        atomic_store_explicit(&cached_bf16, v, memory_order_relaxed);
    }
    return v;
}

int rg_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
