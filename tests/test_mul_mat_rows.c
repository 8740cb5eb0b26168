// test_mul_mat_rows.c - the threaded weight-rows x activations kernel, for
// every weight type, against a double-precision product of the dequantized
// weights; bit-identical across thread counts.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "cpu/mul_mat_rows.h"
#include "rg_test.h"
#include "tensor/quant/quant.h"

// Every type the kernel must multiply, with the tolerance on |y - ref| relative
// to sum_k |w_k x_k|: F32/F16/BF16 multiply F32 activations (float rounding
// only); the others go through an 8-bit activation (about 1/254 relative per
// element, and far less on the sum).
static const struct { uint32_t type; double tol; } types[] = {
    {RG_TYPE_F32, 1e-5},    {RG_TYPE_F16, 1e-5},    {RG_TYPE_BF16, 1e-5},   {RG_TYPE_Q4_0, 8e-3},
    {RG_TYPE_Q4_1, 8e-3},   {RG_TYPE_Q5_0, 8e-3},   {RG_TYPE_Q5_1, 8e-3},   {RG_TYPE_Q8_0, 8e-3},
    {RG_TYPE_Q2_K, 8e-3},   {RG_TYPE_Q3_K, 8e-3},   {RG_TYPE_Q4_K, 8e-3},   {RG_TYPE_Q5_K, 8e-3},
    {RG_TYPE_Q6_K, 8e-3},   {RG_TYPE_IQ2_XXS, 8e-3}, {RG_TYPE_IQ2_XS, 8e-3}, {RG_TYPE_IQ2_S, 8e-3},
    {RG_TYPE_IQ3_XXS, 8e-3}, {RG_TYPE_IQ3_S, 8e-3}, {RG_TYPE_IQ1_S, 8e-3},  {RG_TYPE_IQ1_M, 8e-3},
    {RG_TYPE_IQ4_NL, 8e-3}, {RG_TYPE_IQ4_XS, 8e-3}, {RG_TYPE_TQ1_0, 8e-3},  {RG_TYPE_TQ2_0, 8e-3},
    {RG_TYPE_MXFP4, 8e-3},  {RG_TYPE_NVFP4, 8e-3},  {RG_TYPE_Q1_0, 8e-3},   {RG_TYPE_Q2_0, 8e-3},
};

// Weights: quantized from Gaussian rows where a quantizer exists, random
// bytes with sane scales otherwise (the IQ1-3 types have no quantizer here).
static void make_weights(uint32_t type, int64_t K, int64_t M, uint8_t *w, float *scratch) {
    const rg_quant_ops *ops = rg_quant_get(type);
    size_t row = rg_type_row_size(type, K);
    for (int64_t m = 0; m < M; m++) {
        for (int64_t k = 0; k < K; k++) scratch[k] = 0.05f * rg_rng_normal(7, (uint64_t)m, (uint64_t)k);
        if (ops->quantize && !ops->quantize_needs_imatrix) {
            ops->quantize(scratch, w + m * row, K, NULL);
        } else {
            for (size_t b = 0; b < row; b++) w[m * row + b] = (uint8_t)rg_rng_u64(9, (uint64_t)m, b);
            // Keep every f16 scale finite and small: overwrite the exponent bits of
            // each 16-bit word with a moderate value (a valid, if odd, block).
            for (size_t b = 1; b < row; b += 2) w[m * row + b] = (uint8_t)((w[m * row + b] & 0x83) | 0x10);
        }
    }
}

static void test_every_type_against_double(void) {
    const int64_t K = 512, M = 37, N = 5;
    float *x = malloc(sizeof(float) * K * N), *scratch = malloc(sizeof(float) * K);
    float *wf = malloc(sizeof(float) * K * M), *y1 = malloc(sizeof(float) * M * N), *y3 = malloc(sizeof(float) * M * N);
    uint8_t *w = malloc((size_t)K * M * 4);
    for (int64_t i = 0; i < K * N; i++) x[i] = rg_rng_normal(3, 0, (uint64_t)i);
    rg_threadpool *pool3;
    rg_error err = {0};
    RG_REQUIRE(rg_threadpool_create(&pool3, 3, &err) == RG_OK, "%s", err.msg);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        uint32_t type = types[t].type;
        const char *name = rg_type_get(type)->name;
        const rg_quant_ops *ops = rg_quant_get(type);
        if (!ops->vec_dot || !ops->dequant) {
            RG_CHECK(0, "%s: no dot product or dequantizer", name);
            continue;
        }
        make_weights(type, K, M, w, scratch);
        size_t row = rg_type_row_size(type, K);
        for (int64_t m = 0; m < M; m++) ops->dequant(w + m * row, wf + m * K, K);
        RG_REQUIRE(rg_cpu_mul_mat_rows(NULL, type, w, row, K, M, x, N, y1, &err) == RG_OK, "%s: %s", name, err.msg);
        RG_REQUIRE(rg_cpu_mul_mat_rows(pool3, type, w, row, K, M, x, N, y3, &err) == RG_OK, "%s: %s", name, err.msg);
        RG_CHECK(memcmp(y1, y3, sizeof(float) * M * N) == 0, "%s: 1 and 3 threads differ", name);
        double worst = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t m = 0; m < M; m++) {
                double ref = 0, mag = 0;
                for (int64_t k = 0; k < K; k++) {
                    ref += (double)wf[m * K + k] * x[n * K + k];
                    mag += fabs((double)wf[m * K + k] * x[n * K + k]);
                }
                double e = fabs(y1[m + n * M] - ref) / (mag > 0 ? mag : 1);
                if (!(e <= worst)) worst = e;  // catches NaN too
            }
        RG_CHECK(worst <= types[t].tol, "%s: relative error %.3g over the bound %.3g", name, worst, types[t].tol);
    }
    rg_threadpool_free(pool3);
    free(x), free(scratch), free(wf), free(y1), free(y3), free(w);
}

static void test_bad_shapes_are_refused(void) {
    float x[64] = {0}, y[8];
    uint8_t w[1024] = {0};
    rg_error err = {0};
    RG_CHECK(rg_cpu_mul_mat_rows(NULL, RG_TYPE_Q4_K, w, 144, 128, 1, x, 1, y, &err) == RG_ERR_ARG &&
                 strstr(err.msg, "K = 128"), "%s", err.msg);
    RG_CHECK(rg_cpu_mul_mat_rows(NULL, RG_TYPE_F32, w, 8, 64, 1, x, 1, y, &err) == RG_ERR_ARG &&
                 strstr(err.msg, "row stride 8"), "%s", err.msg);
    RG_CHECK(rg_cpu_mul_mat_rows(NULL, RG_TYPE_I32, w, 256, 64, 1, x, 1, y, &err) == RG_ERR_UNSUPPORTED &&
                 strstr(err.msg, "i32"), "%s", err.msg);
}

static void test_thread_pool_splits_exactly(void) {
    for (int nth = 1; nth <= 7; nth++)
        for (int64_t n = 0; n < 40; n++) {
            int64_t covered = 0, prev_end = 0;
            for (int ith = 0; ith < nth; ith++) {
                int64_t b, e;
                rg_split_range(n, ith, nth, &b, &e);
                RG_CHECK(b == prev_end && e >= b, "gap at n=%lld nth=%d", (long long)n, nth);
                covered += e - b;
                prev_end = e;
            }
            RG_CHECK(covered == n && prev_end == n, "n=%lld nth=%d covered %lld", (long long)n, nth, (long long)covered);
        }
}

static void count_calls(void *arg, int ith, int nth) {
    (void)nth;
    __atomic_fetch_add((int *)arg + ith, 1, __ATOMIC_RELAXED);
}

static void test_thread_pool_runs_every_thread_once(void) {
    rg_threadpool *pool;
    rg_error err = {0};
    RG_REQUIRE(rg_threadpool_create(&pool, 4, &err) == RG_OK, "%s", err.msg);
    int calls[4] = {0};
    for (int r = 0; r < 1000; r++) rg_threadpool_run(pool, count_calls, calls);
    for (int i = 0; i < 4; i++) RG_CHECK(calls[i] == 1000, "thread %d ran %d times", i, calls[i]);
    rg_threadpool_free(pool);
    RG_CHECK(rg_threadpool_create(&pool, 100000, &err) == RG_ERR_ARG, "absurd thread count accepted");
}

static const rg_test_case cases[] = {
    RG_TEST(test_thread_pool_splits_exactly),
    RG_TEST(test_thread_pool_runs_every_thread_once),
    RG_TEST(test_bad_shapes_are_refused),
    RG_TEST(test_every_type_against_double),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
