// cpu.c - feature detection for run-time dispatch.
#include "base/cpu.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <stdio.h>
#if defined(__linux__) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <errno.h>
#include <string.h>
#include <sys/syscall.h>
#define RG_ARCH_REQ_XCOMP_PERM 0x1023
#define RG_XFEATURE_XTILEDATA 18
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

// ---------------------------------------------------------------------------
// AMX: CPUID leaf 7 sub-leaf 0 EDX bit 22 (AMX-BF16), 24 (AMX-TILE), 25 (AMX-INT8); the OS must
// save XTILECFG and XTILEDATA (XCR0 bits 17 and 18), and Linux hands tile data to a process only
// after arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) (without it the first tile load is a
// SIGILL).

static atomic_int cached_amx = -1;  // bit 0: AMX-BF16 usable, bit 1: AMX-INT8 usable
static char amx_reason[160];

static int env_on(const char *name) {
    const char *v = getenv(name);
    return v && *v && *v != '0';
}

static int detect_amx(void) {
#if defined(__linux__) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (env_on("RG_NO_AMX") || env_on("RG_NO_AVX512") || env_on("RG_NO_AVX2")) {
        snprintf(amx_reason, sizeof amx_reason, "%s=1",
                 env_on("RG_NO_AMX") ? "RG_NO_AMX" : env_on("RG_NO_AVX512") ? "RG_NO_AVX512" : "RG_NO_AVX2");
        return 0;
    }
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((d >> 24) & 1) || !((d >> 22) & 1)) {
        snprintf(amx_reason, sizeof amx_reason, "no AMX-TILE/AMX-BF16 in CPUID");
        return 0;
    }
    const int int8 = (d >> 25) & 1;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1)) {  // OSXSAVE: xgetbv is allowed
        snprintf(amx_reason, sizeof amx_reason, "the OS has not enabled XSAVE");
        return 0;
    }
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if (((lo >> 17) & 3) != 3) {
        snprintf(amx_reason, sizeof amx_reason, "the OS does not save the tile state (XCR0 bits 17-18 clear)");
        return 0;
    }
    if (syscall(SYS_arch_prctl, RG_ARCH_REQ_XCOMP_PERM, RG_XFEATURE_XTILEDATA) != 0) {
        snprintf(amx_reason, sizeof amx_reason, "the kernel refused tile data (arch_prctl: %s)", strerror(errno));
        fprintf(stderr, "retrograd: AMX present but %s; BF16 products fall back to AVX-512/F32\n", amx_reason);
        return 0;
    }
    amx_reason[0] = 0;
    return 1 | (int8 ? 2 : 0);
#else
    snprintf(amx_reason, sizeof amx_reason, "not an x86-64 Linux build");
    return 0;
#endif
}

static int amx_bits(void) {
    int v = atomic_load_explicit(&cached_amx, memory_order_acquire);
    if (v < 0) {
        v = detect_amx();  // two threads may both detect: same answer, arch_prctl is idempotent
        atomic_store_explicit(&cached_amx, v, memory_order_release);
    }
    return v;
}

int rg_cpu_has_amx_bf16(void) { return amx_bits() & 1; }
int rg_cpu_has_amx_int8(void) { return (amx_bits() & 3) == 3; }
const char *rg_cpu_amx_reason(void) {
    (void)amx_bits();
    return amx_reason;
}
const char *rg_cpu_matrix_unit(void) {
    return rg_cpu_has_amx_bf16() ? "amx" : rg_cpu_has_avx512_bf16() ? "avx512_bf16" : "none";
}
