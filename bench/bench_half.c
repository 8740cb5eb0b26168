// bench_half.c - F16/BF16 row conversions: the dispatched (AVX2/F16C) rows
// against the scalar reference loops, in GB/s of source+destination traffic,
// on a row that fits in L2 (64 Ki elements) and one that does not (16 Mi).
#include <stdio.h>
#include <stdlib.h>

#include "base/rng.h"
#include "bench_util.h"
#include "tensor/half.h"

typedef struct job {
    int64_t n;
    float *f;
    uint16_t *h;
    void (*dec)(const uint16_t *, float *, int64_t);
    void (*enc)(const float *, uint16_t *, int64_t);
} job;

static void run_dec(void *a) { job *j = a; j->dec(j->h, j->f, j->n); }
static void run_enc(void *a) { job *j = a; j->enc(j->f, j->h, j->n); }

int main(void) {
    static const int64_t sizes[] = {1 << 16, 1 << 24};
    printf("bench_half: F16/BF16 rows, simd=%s (ratio base: the scalar reference loop)\n",
           rg_half_have_simd() ? "avx2+f16c" : "none");
    printf("%-16s %10s %12s %12s %8s\n", "conversion", "elements", "scalar GB/s", "rows GB/s", "ratio");
    for (size_t s = 0; s < 2; s++) {
        int64_t n = sizes[s];
        job j = {n, malloc((size_t)n * 4), malloc((size_t)n * 2), NULL, NULL};
        for (int64_t i = 0; i < n; i++) j.f[i] = rg_rng_normal(1, 0, (uint64_t)i) * 3.0f;
        int reps = n > (1 << 20) ? 3 : 200;
        struct {
            const char *name;
            int encode;
            void (*scalar_dec)(const uint16_t *, float *, int64_t), (*fast_dec)(const uint16_t *, float *, int64_t);
            void (*scalar_enc)(const float *, uint16_t *, int64_t), (*fast_enc)(const float *, uint16_t *, int64_t);
        } rows[] = {
            {"f32 -> f16", 1, NULL, NULL, rg_fp32_to_fp16_row_scalar, rg_fp32_to_fp16_row},
            {"f16 -> f32", 0, rg_fp16_to_fp32_row_scalar, rg_fp16_to_fp32_row, NULL, NULL},
            {"f32 -> bf16", 1, NULL, NULL, rg_fp32_to_bf16_row_scalar, rg_fp32_to_bf16_row},
            {"bf16 -> f32", 0, rg_bf16_to_fp32_row_scalar, rg_bf16_to_fp32_row, NULL, NULL},
        };
        for (size_t r = 0; r < 4; r++) {
            double t_scalar, t_fast;
            if (rows[r].encode) {
                j.enc = rows[r].scalar_enc, t_scalar = bench_best(run_enc, &j, reps, 5);
                j.enc = rows[r].fast_enc, t_fast = bench_best(run_enc, &j, reps, 5);
            } else {
                rg_fp32_to_fp16_row(j.f, j.h, n);
                j.dec = rows[r].scalar_dec, t_scalar = bench_best(run_dec, &j, reps, 5);
                j.dec = rows[r].fast_dec, t_fast = bench_best(run_dec, &j, reps, 5);
            }
            double bytes = (double)n * 6;
            printf("%-16s %10lld %12.2f %12.2f %7.1fx\n", rows[r].name, (long long)n, bytes / t_scalar / 1e9,
                   bytes / t_fast / 1e9, t_scalar / t_fast);
        }
        free(j.f);
        free(j.h);
    }
    return 0;
}
