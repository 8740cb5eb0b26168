// bench_ssm.c - the recurrent layers' kernels on the CPU at Mamba-2-130M's and LFM2-350M's
// shapes, beside the machine's memory read rate and FMA peak measured in the same process:
//   SSM_SCAN and SSM_SCAN_BACK   Mamba-2-130M: 24 heads of 64, state 128, 1 group, T tokens
//   SSM_CONV and SSM_CONV_BACK   Mamba-2-130M's conv over x, B, C (1792 channels, kernel 4)
//                                and LFM2-350M's short conv (1024 channels, kernel 3)
//
//   ./build/bench_ssm            RG_BENCH_THREADS (default: all cores), RG_BENCH_T (default 512)
//
// Per op: microseconds (best of 5 batches), GB/s of the op's compulsory traffic (every
// source read once, every output written once) and that as a share of the plain read
// rate, and GFLOP/s of the arithmetic the recurrence needs as a share of the FMA peak (32
// FLOP/cycle/core at the measured clock, 64 where two 512-bit FMA pipes are measured). The scan's counts, per token, head, state row n
// and lane p: forward 5 (S = decay S + B (x step): 3; y += S C: 2); backward 15 (the
// state again: 3; dS = decay dS + C dy: 3; dC += S dy, dB += dS x step, dx += dS B and
// ddecay += dS S_prev: 2 each, and 1 for the step's factor). The conv: 2 K per channel and
// token forward, 4 K backward (dx and dc). A share of the read rate far below 1 with the
// arithmetic near the peak says the kernel is bound by arithmetic, not by memory.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/rng.h"
#include "bench_memrate.h"
#include "bench_util.h"
#include "graph/exec.h"

typedef struct leaf_buf {
    float *p;
    int64_t nel;
} leaf_buf;

static float *filled(int64_t n, uint64_t stream, float scale, float offset) {
    float *p = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) p[i] = offset + scale * rg_rng_normal(1, stream, (uint64_t)i);
    return p;
}

static int64_t nel_of(const rg_node *n) { return n->t.ne[0] * n->t.ne[1] * n->t.ne[2] * n->t.ne[3]; }

// Best seconds per run of g over 5 batches (the batch sized to about 0.2 s).
static double time_graph(rg_graph *g, rg_threadpool *pool, rg_error *err) {
    rg_exec *ex = NULL;
    rg_exec_opts o = {.pool = pool};
    if (rg_graph_error(g, err) || rg_exec_create(&ex, g, &o, err)) return -1;
    double t0 = bench_now();
    if (rg_exec_run(ex, 0, -1, err)) {
        rg_exec_free(ex);
        return -1;
    }
    double one = bench_now() - t0;
    int reps = one > 0 ? (int)(0.2 / one) + 1 : 1;
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        t0 = bench_now();
        for (int k = 0; k < reps; k++) rg_exec_run(ex, 0, -1, err);
        double t = (bench_now() - t0) / reps;
        if (t < best) best = t;
    }
    rg_exec_free(ex);
    return best;
}

static void row(const char *name, double sec, double bytes, double flop, double gbs, double peak) {
    const double rate = bytes / sec * 1e-9, gf = flop / sec * 1e-9;
    printf("%-34s %10.1f %9.2f %8.1f%% %9.1f %8.1f%%\n", name, sec * 1e6, rate, 100.0 * rate / gbs, gf, 100.0 * gf / peak);
}

// Mamba-2's scan, forward and backward, on one sequence of T tokens.
static int bench_scan(int64_t T, rg_threadpool *pool, double gbs, double peak) {
    enum { P = 64, H = 24, N = 128, G = 1 };
    const int64_t CX = (int64_t)P * H + 2 * G * N;
    rg_error err = {0};
    float *xbc = filled(CX * T, 1, 0.5f, 0), *dt = filled(H * T, 2, 0.5f, -1.0f), *A = filled(H, 3, 0.3f, -1.0f);
    for (int h = 0; h < H; h++) A[h] = -fabsf(A[h]) - 0.1f;
    double sec[2] = {0};
    double bytes[2];
    for (int back = 0; back < 2; back++) {
        rg_graph *g = rg_graph_new();
        rg_node *x = rg_leaf(g, "xBC", RG_TYPE_F32, 2, (int64_t[]){CX, T}, xbc);
        rg_node *d = rg_leaf(g, "dt", RG_TYPE_F32, 2, (int64_t[]){H, T}, dt);
        rg_node *a = rg_leaf(g, "ssm_a", RG_TYPE_F32, 2, (int64_t[]){1, H}, A);
        rg_node *y = rg_ssm_scan(g, x, d, a, NULL, NULL, P, N, G);
        float *dy = NULL;
        if (back) {
            // the forward's output gradient as a leaf, and SSM_DT's quantities made before the timing
            dy = filled(nel_of(y), 4, 0.1f, 0);
            rg_node *dyn = rg_leaf(g, "dy", RG_TYPE_F32, 4, y->t.ne, dy);
            y->flags &= ~RG_NODE_OUTPUT;
            y = rg_ssm_scan_back(g, dyn, x, rg_ssm_dt(g, d, a, NULL), a, NULL, P, N, G);
        }
        if (y) y->flags |= RG_NODE_OUTPUT;
        // compulsory traffic: forward reads xBC, dt, A and writes y and the final state; the
        // backward reads dy, xBC, SSM_DT's 3 per (head, token), A, writes dxBC, ddt, dA, dstate
        bytes[back] = back ? 4.0 * ((double)(P * H + N * P * H) + CX * T + 3.0 * H * T + H + CX * T + H * T + H +
                                    (double)N * P * H)
                           : 4.0 * ((double)CX * T + H * T + H + (double)P * H * T + (double)N * P * H);
        sec[back] = time_graph(g, pool, &err);
        rg_graph_free(g);
        free(dy);
        if (sec[back] < 0) {
            fprintf(stderr, "bench_ssm: scan: %s\n", err.msg);
            return 1;
        }
    }
    const double nph = (double)N * P * H * T;
    char name[64];
    snprintf(name, sizeof name, "SSM_SCAN      mamba2-130m T=%lld", (long long)T);
    row(name, sec[0], bytes[0], 5 * nph, gbs, peak);
    snprintf(name, sizeof name, "SSM_SCAN_BACK mamba2-130m T=%lld", (long long)T);
    row(name, sec[1], bytes[1], 15 * nph, gbs, peak);
    free(xbc), free(dt), free(A);
    return 0;
}

// A depthwise causal conv of C channels and kernel K, forward and backward.
static int bench_conv(const char *what, int64_t C, int64_t K, int64_t T, rg_threadpool *pool, double gbs, double peak) {
    rg_error err = {0};
    float *x = filled(C * T, 5, 0.5f, 0), *c = filled(K * C, 6, 0.3f, 0);
    double sec[2] = {0}, bytes[2];
    for (int back = 0; back < 2; back++) {
        rg_graph *g = rg_graph_new();
        rg_node *xn = rg_leaf(g, "x", RG_TYPE_F32, 2, (int64_t[]){C, T}, x);
        rg_node *cn = rg_leaf(g, "conv", RG_TYPE_F32, 2, (int64_t[]){K, C}, c);
        rg_node *y = rg_ssm_conv(g, xn, cn, NULL, NULL);
        float *dy = NULL;
        if (back) {
            dy = filled(nel_of(y), 7, 0.1f, 0);
            rg_node *dyn = rg_leaf(g, "dy", RG_TYPE_F32, 4, y->t.ne, dy);
            y = rg_ssm_conv_back(g, dyn, xn, cn, NULL, NULL);
        }
        if (y) y->flags |= RG_NODE_OUTPUT;
        const double st = (double)C * (K - 1);
        // forward: x, c in; y, state out. backward: dy (y's and the state's), x, c in; dx, dstate, dc out
        bytes[back] = back ? 4.0 * ((double)C * T + st + C * T + K * C + C * T + st + K * C)
                           : 4.0 * ((double)C * T + K * C + C * T + st);
        sec[back] = time_graph(g, pool, &err);
        rg_graph_free(g);
        free(dy);
        if (sec[back] < 0) {
            fprintf(stderr, "bench_ssm: conv: %s\n", err.msg);
            return 1;
        }
    }
    char name[64];
    snprintf(name, sizeof name, "SSM_CONV      %s T=%lld", what, (long long)T);
    row(name, sec[0], bytes[0], 2.0 * K * C * T, gbs, peak);
    snprintf(name, sizeof name, "SSM_CONV_BACK %s T=%lld", what, (long long)T);
    row(name, sec[1], bytes[1], 4.0 * K * C * T, gbs, peak);
    free(x), free(c);
    return 0;
}

int main(void) {
    int threads = getenv("RG_BENCH_THREADS") ? atoi(getenv("RG_BENCH_THREADS")) : rg_cpu_count();
    if (threads < 1) threads = rg_cpu_count();
    const int64_t T = getenv("RG_BENCH_T") && atoll(getenv("RG_BENCH_T")) > 0 ? atoll(getenv("RG_BENCH_T")) : 512;
    rg_threadpool *pool;
    rg_error err = {0};
    if (rg_threadpool_create(&pool, threads, &err)) {
        fprintf(stderr, "bench_ssm: %s\n", err.msg);
        return 1;
    }
    const double mhz = bench_measured_mhz(), peak = bench_fma_flop_per_cycle(mhz) * mhz * 1e-3 * threads;
    const double gbs = plain_read_gbs(threads);
    printf("bench_ssm: %d threads; a plain read of 512 MiB runs at %.1f GB/s; clock %.0f MHz measured, FMA peak %.1f "
           "GFLOP/s (both measured in this run)\n", threads, gbs, mhz, peak);
    printf("%-34s %10s %9s %9s %9s %9s\n", "op", "us", "GB/s", "of read", "GFLOP/s", "of peak");
    int rc = bench_scan(T, pool, gbs, peak);
    rc |= bench_conv("mamba2-130m", 64 * 24 + 2 * 128, 4, T, pool, gbs, peak);
    rc |= bench_conv("lfm2-350m  ", 1024, 3, T, pool, gbs, peak);
    rg_threadpool_free(pool);
    return rc;
}
