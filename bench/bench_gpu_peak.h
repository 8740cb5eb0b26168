// bench_gpu_peak.h - the dense BF16 peak a device's MFU is held to, three ways: measured here (a
// BF16 weight times F32 activations through our MUL_MAT on the device, the path a training
// step's products take: the activations rounded to BF16, cuBLAS on the tensor cores with F32
// accumulation), nominal by name (bench_util.h's table of known cards) and from the SM count and
// the SM clock the device reports (tensor-core FLOP per clock per SM by compute capability). The
// measured one includes the activations' rounding pass to BF16 (one read and one write of x, a
// few percent of the product's time at n = 8192), so it sits slightly under cuBLAS alone.
#ifndef RG_BENCH_GPU_PEAK_H
#define RG_BENCH_GPU_PEAK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#include "cuda/cuda.h"
#include "graph/exec.h"
#include "graph/graph.h"
#include "graph/plan.h"
#include "tensor/half.h"

// Dense BF16 tensor-core FLOP per clock per SM (F32 accumulation; data-center parts): Ampere
// GA100 2048, GA10x/Ada 1024, Hopper 4096, Blackwell 8192. 0: not known.
static inline double bench_sm_bf16_flop_per_clock(int major, int minor) {
    if (major == 8 && minor == 0) return 2048;
    if (major == 8) return 1024;
    if (major == 9) return 4096;
    if (major == 10) return 8192;
    return 0;
}

// TFLOP/s from the SM count and the reported SM clock (cudaDevAttrClockRate is the boost clock:
// on an H100 SXM 1980 MHz against the 1830 MHz its 989 TFLOP/s are quoted at, so this is an
// upper bound). 0 when either is unknown.
static inline double bench_gpu_bf16_tflops_from_sms(const rg_cuda_device_info *info) {
    return (double)info->multiprocessors * (double)info->clock_khz * 1e3 *
           bench_sm_bf16_flop_per_clock(info->major, info->minor) * 1e-12;
}

// Measured: y = w^T x with w BF16 [n, n] and x F32 [n, n / 2] on the device, the best of `trials`
// runs after a warm-up, as TFLOP/s (2 n^3 / 2 FLOP a run); *what gets the line to print. 0 (with
// the reason in *what) when it cannot run.
static inline double bench_gpu_bf16_tflops_measured(int64_t n, int trials, char *what, size_t cap) {
    const int64_t m = n / 2;
    uint16_t *w = malloc(sizeof(uint16_t) * (size_t)(n * n));
    float *x = malloc(sizeof(float) * (size_t)(n * m));
    if (!w || !x) {
        free(w), free(x);
        snprintf(what, cap, "out of host memory");
        return 0;
    }
    // Values in [-0.5, 0.5) from a multiplicative hash (the rate does not depend on them; a
    // normal draw per element would cost seconds at n = 8192).
    for (int64_t i = 0; i < n * n; i++) w[i] = rg_fp32_to_bf16(0.04f * ((float)(((uint64_t)i * 2654435761u >> 8) & 1023) / 1024.0f - 0.5f));
    for (int64_t i = 0; i < n * m; i++) x[i] = (float)(((uint64_t)i * 2246822519u >> 8) & 1023) / 1024.0f - 0.5f;
    rg_graph *g = rg_graph_new();
    rg_node *wn = rg_leaf(g, "w", RG_TYPE_BF16, 2, (int64_t[]){n, n}, w);  // [n_in, n_out]
    rg_node *xn = rg_leaf(g, "x", RG_TYPE_F32, 2, (int64_t[]){n, m}, x);   // [n_in, m]
    rg_node *y = rg_mul_mat(g, wn, xn);                                     // [n_out, m]
    if (y) y->flags |= RG_NODE_OUTPUT;
    rg_error err = {0};
    rg_plan plan;
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 1, .device = RG_DEVICE_CUDA};
    double best = 1e30;
    if (rg_graph_error(g, &err) || rg_graph_plan(g, 1, 0, &plan, &err) || rg_exec_create(&ex, g, &o, &err) ||
        rg_exec_run(ex, 0, -1, &err)) {
        snprintf(what, cap, "the measurement failed: %.200s", err.msg);
        best = 0;
    } else {
        for (int t = 0; t < trials; t++) {
            const double t0 = bench_now();
            if (rg_exec_run(ex, 0, -1, &err)) break;
            const double dt = bench_now() - t0;
            best = dt < best ? dt : best;
        }
        const rg_exec_stats st = rg_exec_get_stats(ex);
        if (st.nodes_fallback) {
            snprintf(what, cap, "the product fell back to the CPU: not a device figure");
            best = 0;
        } else {
            snprintf(what, cap, "measured: BF16 [%lld, %lld] x F32 [%lld, %lld] through MUL_MAT on the device, best of %d, "
                     "%.3f ms", (long long)n, (long long)n, (long long)n, (long long)m, trials, best * 1e3);
        }
    }
    rg_exec_free(ex);
    rg_graph_free(g);
    free(w), free(x);
    return best > 0 && best < 1e30 ? 2.0 * (double)n * (double)n * (double)m / best * 1e-12 : 0;
}

#endif
