// bench_tile_peak.h - the AMX tile peak measured in the run that uses it (bench_gemm, bench_train):
// a register-resident TDPBF16PS loop, no memory touched, on 1 thread and on a pool's threads.
//
// Tiles 0-3 are the accumulators C [16 rows x 16 F32], 4-5 the A tiles [16 rows x 32 BF16], 6-7
// the B tiles [16 pairs x 16 columns of BF16 pairs], all zero (zeros in, zeros out: no denormal
// or NaN can slow a product down). A trip is 4 x the 2x2 block (A4, A5) x (B6, B7): 16
// TDPBF16PS, four independent accumulator chains, as a GEMM kernel's inner loop issues them. One
// TDPBF16PS is 16 x 16 x 32 multiply-adds = 16384 FLOP.
//
// Hardware only: the loop runs where rg_cpu_has_amx_bf16() (CPUID, XCR0 and the kernel's
// permission for tile data, asked once there); elsewhere it reports why, in words. The emulated
// tiles (RG_TILES_EMULATE=1) have no peak: their timings are never matrix-unit results. The
// instructions are written as inline assembly, so no AMX compiler flag is needed (the assembler
// must know them: binutils 2.36 or later, clang 11 or later).
#ifndef RG_BENCH_TILE_PEAK_H
#define RG_BENCH_TILE_PEAK_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/cpu.h"
#include "base/threadpool.h"
#include "bench_util.h"

#define BENCH_TILE_FLOP_PER_DP 16384.0  // 2 x 16 rows x 16 columns x 32 k
#define BENCH_TILE_DP_PER_TRIP 16

#if defined(__x86_64__) && defined(__GNUC__)
#define BENCH_TILE_ASM 1
// Palette 1's configuration (the SDM's 64-byte TILECFG): every tile 16 rows x 64 bytes.
typedef struct bench_tilecfg {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} bench_tilecfg;

// `trips` trips of 16 TDPBF16PS on zeroed tiles; configures and releases the tiles itself.
static void bench_tile_dp_trips(long trips) {
    bench_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
    __asm__ volatile("tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3\n\t"
                     "tilezero %%tmm4\n\ttilezero %%tmm5\n\ttilezero %%tmm6\n\ttilezero %%tmm7" ::: "memory");
    // AT&T order: tdpbf16ps B, A, C (C += A . B)
    for (long i = 0; i < trips; i++)
        __asm__ volatile(".rept 4\n\t"
                         "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\ttdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\t"
                         "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\ttdpbf16ps %%tmm7, %%tmm5, %%tmm3\n\t"
                         ".endr" ::: "memory");
    __asm__ volatile("tilerelease" ::: "memory");
}
#else
#define BENCH_TILE_ASM 0
#endif

typedef struct bench_tile_job {
    long trips;
} bench_tile_job;

static void bench_tile_thread(void *arg, int ith, int nth) {
    (void)ith, (void)nth;
#if BENCH_TILE_ASM
    bench_tile_dp_trips(((const bench_tile_job *)arg)->trips);
#else
    (void)arg;
#endif
}

// The TDPBF16PS peak in GFLOP/s on the pool's threads (NULL: this thread alone): best of 5 runs
// of ~0.1 s, wall clock, every thread running the loop. 0 where AMX-BF16 is not usable, with
// why[] saying so ("needs AMX (<rg_cpu_amx_reason()>)").
static double bench_tile_peak_gflops(rg_threadpool *pool, char *why, size_t cap) {
    if (why && cap) why[0] = 0;
    if (!BENCH_TILE_ASM || !rg_cpu_has_amx_bf16()) {
        if (why)
            snprintf(why, cap, "needs AMX (%s)",
                     BENCH_TILE_ASM ? rg_cpu_amx_reason() : "not an x86-64 build with GNU inline assembly");
        return 0;
    }
    const int nth = rg_threadpool_size(pool);
    // ~0.1 s per run at ~3,000 GFLOP/s a core: 300 GFLOP / 262144 FLOP per trip
    bench_tile_job job = {.trips = 1200000};
    rg_threadpool_run(pool, bench_tile_thread, &job);  // warm-up: the tile state enabled on every thread
    double best = 1e30;
    for (int t = 0; t < 5; t++) {
        const double t0 = bench_now();
        rg_threadpool_run(pool, bench_tile_thread, &job);
        const double dt = bench_now() - t0;
        if (dt < best) best = dt;
    }
    return (double)nth * (double)job.trips * BENCH_TILE_DP_PER_TRIP * BENCH_TILE_FLOP_PER_DP / best * 1e-9;
}

#endif
