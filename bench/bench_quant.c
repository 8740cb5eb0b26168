// bench_quant.c - every type's dequantize (GB/s of F32 output) and dot product
// (GFLOP/s, 2 per weight), beside the F32 dot product of the same length (the
// ratio base), on one core; then the threaded weight-rows matmul on all cores
// for a [4096 x 1024] weight times 8 activation columns.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/rng.h"
#include "bench_util.h"
#include "cpu/mul_mat_rows.h"
#include "tensor/quant/quant.h"

enum { K = 4096, ROWS = 256 };

typedef struct job {
    const rg_quant_ops *ops;
    const uint8_t *w;
    size_t row;
    const void *y;
    float *out;
} job;

static void run_dequant(void *p) {
    job *j = p;
    for (int r = 0; r < ROWS; r++) j->ops->dequant(j->w + r * j->row, j->out, K);
}

static void run_dot(void *p) {
    job *j = p;
    for (int r = 0; r < ROWS; r++) j->ops->vec_dot(K, &j->out[r], j->w + r * j->row, j->y);
}

static void make_rows(uint32_t type, uint8_t *w, const float *x) {
    const rg_quant_ops *ops = rg_quant_get(type);
    size_t row = rg_type_row_size(type, K);
    for (int r = 0; r < ROWS; r++) {
        if (ops->quantize && !ops->quantize_needs_imatrix) ops->quantize(x + (size_t)r * K, w + r * row, K, NULL);
        else
            for (size_t b = 0; b < row; b++) w[r * row + b] = (uint8_t)(rg_rng_u64(5, (uint64_t)r, b) & 0x3F);
    }
}

int main(void) {
    float *x = malloc(sizeof(float) * K * ROWS), *out = malloc(sizeof(float) * K);
    uint8_t *w = malloc((size_t)K * ROWS * 4), *yq = malloc((size_t)K * 4);
    for (size_t i = 0; i < (size_t)K * ROWS; i++) x[i] = 0.02f * rg_rng_normal(1, 0, i);
    printf("bench_quant: one core, rows of %d, %d rows per run, simd=%s\n", K, ROWS, rg_cpu_has_avx2() ? "avx2" : "none");
    printf("%-8s %12s %12s %14s %10s\n", "type", "dequant GB/s", "dot GFLOP/s", "dot vs f32 dot", "act type");
    double f32_gflops = 0;
    for (uint32_t t = 0; t < RG_TYPE_COUNT; t++) {
        const rg_quant_ops *ops = rg_quant_get(t);
        if (!ops->dequant || !ops->vec_dot || rg_type_get(t)->role != RG_ROLE_STORAGE) continue;
        if (ops->vec_dot_type != RG_TYPE_F32 && !rg_quant_get(ops->vec_dot_type)->quantize) continue;
        make_rows(t, w, x);
        job j = {ops, w, rg_type_row_size(t, K), NULL, out};
        double td = bench_best(run_dequant, &j, 3, 5);
        // The activation row in the type the dot product wants.
        uint32_t vt = ops->vec_dot_type;
        if (vt == RG_TYPE_F32) j.y = x;
        else {
            rg_quant_get(vt)->quantize(x, yq, K, NULL);
            j.y = yq;
        }
        double tv = bench_best(run_dot, &j, 3, 5);
        double gbs = (double)K * ROWS * 4 / td / 1e9, gflops = 2.0 * K * ROWS / tv / 1e9;
        if (t == RG_TYPE_F32) f32_gflops = gflops;
        printf("%-8s %12.2f %12.2f %13.2fx %10s\n", rg_type_get(t)->name, gbs, gflops,
               f32_gflops > 0 ? gflops / f32_gflops : 1.0, rg_type_get(vt)->name);
    }
    // Threaded: all cores against one.
    rg_threadpool *pool;
    rg_error err = {0};
    rg_threadpool_create(&pool, 0, &err);
    const int64_t M = 1024, N = 8;
    float *act = x, *y = malloc(sizeof(float) * M * N);
    printf("\nthreaded mul_mat_rows [%d x %lld] x %lld columns, %d threads vs 1\n", K, (long long)M, (long long)N,
           rg_threadpool_size(pool));
    printf("%-8s %14s %14s %8s\n", "type", "1 thr GFLOP/s", "all GFLOP/s", "speedup");
    static const uint32_t show[] = {RG_TYPE_F32, RG_TYPE_F16, RG_TYPE_BF16, RG_TYPE_Q8_0, RG_TYPE_Q4_0, RG_TYPE_Q4_1, RG_TYPE_Q4_K, RG_TYPE_Q6_K};
    uint8_t *wm = malloc((size_t)K * M * 4);
    for (size_t s = 0; s < sizeof show / sizeof show[0]; s++) {
        uint32_t t = show[s];
        if (!rg_quant_get(t)->vec_dot || !rg_quant_get(t)->quantize) continue;
        size_t row = rg_type_row_size(t, K);
        for (int64_t m = 0; m < M; m++) rg_quant_get(t)->quantize(x + (size_t)(m % ROWS) * K, wm + m * row, K, NULL);
        double t1 = 1e30, tn = 1e30;
        for (int r = 0; r < 3; r++) {
            double t0 = bench_now();
            rg_cpu_mul_mat_rows(NULL, t, wm, row, K, M, act, N, y, &err);
            double d = bench_now() - t0;
            if (d < t1) t1 = d;
            t0 = bench_now();
            rg_cpu_mul_mat_rows(pool, t, wm, row, K, M, act, N, y, &err);
            d = bench_now() - t0;
            if (d < tn) tn = d;
        }
        double flop = 2.0 * K * M * N;
        printf("%-8s %14.2f %14.2f %7.2fx\n", rg_type_get(t)->name, flop / t1 / 1e9, flop / tn / 1e9, t1 / tn);
    }
    rg_threadpool_free(pool);
    free(x), free(out), free(w), free(yq), free(y), free(wm);
    return 0;
}
