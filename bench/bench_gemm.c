// bench_gemm.c - SGEMM GFLOP/s, ours beside OpenBLAS, as fractions of the FMA
// peak, on 1 thread and on all cores; then MUL_MAT GFLOP/s per weight type at
// N = 256 (prompt/training: the SGEMM path) and N = 1 (generation: the dot
// products); then the crossover between the two MUL_MAT paths.
//
// The peak is 32 FP32 FLOP per cycle per core (two 256-bit FMA pipes; 64 where the measured
// zmm FMA rate says two 512-bit pipes, bench_fma_flop_per_cycle) times
// the clock, measured here with a chain of dependent integer adds (one per
// cycle on every x86 core, so no latency table is assumed) on the thread's
// CPU clock; /proc/cpuinfo's "cpu MHz" is printed beside it (in a VM it is
// often the base clock). GFLOP/s are wall-clock, best of several runs.
//
// Shapes are C[M, N] = A[M, K] . B[K, N] in rg_sgemm's order, named after the
// SmolLM2-135M products with 256 tokens (n_embd 576, n_ff 1536):
//   576 x 1536 x 256   dW of ffn_up / ffn_gate [576 -> 1536]: OUT_PROD(X [576, 256], dY [1536, 256]), K = tokens
//   1536 x 576 x 256   dW of ffn_down [1536 -> 576]:          OUT_PROD(X [1536, 256], dY [576, 256])
//   576 x 576 x 256    dW of attn_q / attn_output [576 -> 576]
//   4096 x 4096 x 256  dW of a 4096-wide layer (7B class)
// A is stored [K][M] (the activations, contiguous along M) and B [K][N], as
// OUT_PROD reads them for dW. Each shape is timed as best of 7.
//
// The tile peak (issue 25), measured in the same run: a register-resident TDPBF16PS loop on 1
// thread and on all cores (bench_tile_peak.h), where AMX is usable; elsewhere a line "tile peak:
// needs AMX (why)". Then the BF16 products at Llama-3.2-1B's training shapes (n_embd 2048, n_ff
// 8192, 8 kv heads of 64, T = 256 tokens): each product through rg_gemm_run as MUL_MAT (a
// weight W [K, N] of rows along K times activations [K, T]: C [T, N]) and OUT_PROD (dW [K, N] =
// X [K, T] . dY [N, T]^T) run it, three ways: F32 weights (RG_SGEMM_AUTO, today's F32 file), BF16
// weights widened exactly (RG_SGEMM_AUTO, today's BF16 file) and BF16 weights on the matrix unit
// (RG_SGEMM_BF16: training.compute_dtype=bf16), GFLOP/s as fractions of the FMA peak and of the
// tile peak. Where rg_gemm_tiles_path() is NONE the BF16 rows say "needs a matrix unit" and why;
// under RG_TILES_EMULATE=1 only one small shape runs once, labelled "emulated, not a
// matrix-unit result".
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/rng.h"
#include "bench_tile_peak.h"
#include "bench_util.h"
#include "cpu/cpu_ops.h"
#include "cpu/gemm.h"
#include "cpu/gemm_tiles.h"
#include "cpu/mul_mat_rows.h"
#include "tensor/quant/quant.h"

// ---------------------------------------------------------------------------
// The clock.



// ---------------------------------------------------------------------------
// SGEMM

typedef struct gemm_job {
    rg_threadpool *pool;
    rg_sgemm_impl impl;
    int64_t M, N, K;
    const float *A, *B;
    float *C;
    void *work;
    size_t work_size;
} gemm_job;

static void run_gemm(void *p) {
    gemm_job *j = p;
    rg_error err;
    // A [K][M] (a_rs = 1, a_cs = M), B [K][N] row-major, C [M][N].
    if (rg_sgemm(j->pool, j->impl, j->M, j->N, j->K, j->A, 1, j->M, j->B, j->N, 1, j->C, j->N, false, j->work,
                 j->work_size, &err) != RG_OK) {
        fprintf(stderr, "bench_gemm: %s\n", err.msg);
        exit(1);
    }
}

static double time_gemm(rg_threadpool *pool, rg_sgemm_impl impl, int64_t M, int64_t N, int64_t K, const float *A,
                        const float *B, float *C) {
    int nth = rg_threadpool_size(pool);
    gemm_job j = {pool, impl, M, N, K, A, B, C, NULL, rg_sgemm_work_size(impl, M, N, K, nth)};
    j.work = aligned_alloc(64, (j.work_size + 64) / 64 * 64);
    double flop = 2.0 * (double)M * (double)N * (double)K;
    int reps = flop > 4e9 ? 1 : (int)(2e9 / flop) + 1;
    double s = bench_best(run_gemm, &j, reps, 7);
    free(j.work);
    return flop / s * 1e-9;
}

// ---------------------------------------------------------------------------
// MUL_MAT through the op kernel

typedef struct mm_job {
    rg_node *n;
    rg_exec_ctx ctx;
} mm_job;

static void run_mul_mat(void *p) {
    mm_job *j = p;
    rg_error err;
    if (cpu_mul_mat(&j->ctx, j->n, &err) != RG_OK) {
        fprintf(stderr, "bench_gemm: %s\n", err.msg);
        exit(1);
    }
}

static rg_tensor tensor2(uint32_t type, int64_t ne0, int64_t ne1, void *data) {
    rg_tensor t;
    memset(&t, 0, sizeof t);
    t.type = type;
    t.ne[0] = ne0, t.ne[1] = ne1, t.ne[2] = t.ne[3] = 1;
    t.nb[0] = rg_type_get(type)->type_size;
    t.nb[1] = rg_type_row_size(type, ne0);
    t.nb[2] = t.nb[3] = t.nb[1] * (size_t)ne1;
    t.data = data;
    return t;
}

static double time_mul_mat(rg_threadpool *pool, uint32_t type, const void *w, int64_t K, int64_t M, const float *x,
                           int64_t N, float *y) {
    rg_node wn, xn, yn;
    memset(&wn, 0, sizeof wn), memset(&xn, 0, sizeof xn), memset(&yn, 0, sizeof yn);
    wn.t = tensor2(type, K, M, (void *)w);
    xn.t = tensor2(RG_TYPE_F32, K, N, (void *)x);
    yn.t = tensor2(RG_TYPE_F32, M, N, y);
    yn.op = RG_OP_MUL_MAT, yn.src[0] = &wn, yn.src[1] = &xn;
    size_t ws = cpu_mul_mat_work(&yn, rg_threadpool_size(pool));
    mm_job j = {&yn, {pool, aligned_alloc(64, (ws + 64) / 64 * 64), ws, false, NULL, NULL, false, NULL}};
    double flop = 2.0 * (double)M * (double)N * (double)K;
    int reps = (int)(3e8 / flop) + 1;
    double s = bench_best(run_mul_mat, &j, reps, 5);
    free(j.ctx.scratch);
    return flop / s * 1e-9;
}

// The two MUL_MAT paths forced, for the crossover table.
typedef struct path_job {
    rg_threadpool *pool;
    uint32_t type;
    const void *w;
    int64_t K, M, N;
    const float *x;
    float *y;
    bool gemm;
    void *work;
    size_t work_size;
    rg_gemm_problem prob;
} path_job;

static void path_get(const void *ctx, int64_t p, rg_gemm_problem *prob) {
    (void)p;
    *prob = ((const path_job *)ctx)->prob;
}

static void run_path(void *p) {
    path_job *j = p;
    rg_error err;
    rg_status st;
    if (j->gemm) {
        rg_gemm_batch bt = {j->N, j->M, j->K, j->type, true, false, 1, path_get, j};
        st = rg_gemm_run(j->pool, RG_SGEMM_AUTO, &bt, j->work, j->work_size, &err);
    } else {
        st = rg_cpu_mul_mat_rows(j->pool, j->type, j->w, rg_type_row_size(j->type, j->K), j->K, j->M, j->x, j->N, j->y,
                                 &err);
    }
    if (st != RG_OK) {
        fprintf(stderr, "bench_gemm: %s\n", err.msg);
        exit(1);
    }
}

static double time_path(rg_threadpool *pool, uint32_t type, const void *w, int64_t K, int64_t M, const float *x,
                        int64_t N, float *y, bool gemm) {
    path_job j = {pool, type, w, K, M, N, x, y, gemm, NULL, 0, {0}};
    j.prob.a = x, j.prob.a_rs = K, j.prob.a_cs = 1;
    j.prob.b.type = type, j.prob.b.data = w, j.prob.b.rs = 1, j.prob.b.cs = K;
    j.prob.b.row_stride = rg_type_row_size(type, K), j.prob.b.rows_along_k = true;
    j.prob.c = y, j.prob.ldc = M;
    rg_gemm_batch bt = {N, M, K, type, true, false, 1, path_get, &j};
    j.work_size = rg_gemm_work_size(RG_SGEMM_AUTO, &bt, rg_threadpool_size(pool));
    j.work = aligned_alloc(64, (j.work_size + 64) / 64 * 64);
    double flop = 2.0 * (double)M * (double)N * (double)K;
    double s = bench_best(run_path, &j, (int)(2e8 / flop) + 1, 5);
    free(j.work);
    return flop / s * 1e-9;
}

static void *make_weights(uint32_t type, int64_t K, int64_t M) {
    size_t row = rg_type_row_size(type, K);
    char *w = malloc(row * (size_t)M);
    float *src = malloc(sizeof(float) * (size_t)K);
    for (int64_t m = 0; m < M; m++) {
        for (int64_t k = 0; k < K; k++) src[k] = 0.05f * rg_rng_normal(3, (uint64_t)m, (uint64_t)k);
        rg_quant_get(type)->quantize(src, w + (size_t)m * row, K, NULL);
    }
    free(src);
    return w;
}

// ---------------------------------------------------------------------------
// BF16 products at the 1B training shapes (rg_gemm_run, as ops_matmul.c runs them)

typedef struct bf16_job {
    rg_threadpool *pool;
    rg_sgemm_impl impl;
    rg_gemm_batch bt;
    rg_gemm_problem prob;
    void *work;
    size_t work_size;
} bf16_job;

static void bf16_get(const void *ctx, int64_t p, rg_gemm_problem *prob) {
    (void)p;
    *prob = ((const bf16_job *)ctx)->prob;
}

static void run_bf16_job(void *p) {
    bf16_job *j = p;
    rg_error err;
    if (rg_gemm_run(j->pool, j->impl, &j->bt, j->work, j->work_size, &err) != RG_OK) {
        fprintf(stderr, "bench_gemm: %s (%s)\n", err.msg, rg_sgemm_impl_name(j->impl));
        exit(1);
    }
}

// GFLOP/s of C [T, N] = A [T, K] . B [K, N] through rg_gemm_run(impl). mul_mat: B is the weight,
// rows of K along k (MUL_MAT's); else B [K, N] has rows along N (OUT_PROD's dY for dW: K = T).
// The weight is stored in w_type (F32 or BF16), made from the same normal draws.
static double time_bf16_product(rg_threadpool *pool, rg_sgemm_impl impl, uint32_t w_type, int64_t M, int64_t N,
                                int64_t K, bool mul_mat, int trials) {
    float *a = malloc(sizeof(float) * (size_t)(M * K)), *c = malloc(sizeof(float) * (size_t)(M * N));
    const size_t b_row = mul_mat ? rg_type_row_size(w_type, K) : rg_type_row_size(w_type, N);
    const int64_t b_rows = mul_mat ? N : K;
    char *b = malloc(b_row * (size_t)b_rows);
    float *src = malloc(sizeof(float) * (size_t)(mul_mat ? K : N));
    if (!a || !b || !c || !src) {
        fprintf(stderr, "bench_gemm: out of memory for %lldx%lldx%lld\n", (long long)M, (long long)N, (long long)K);
        exit(1);
    }
    for (int64_t i = 0; i < M * K; i++) a[i] = rg_rng_normal(5, 0, (uint64_t)i);
    for (int64_t r = 0; r < b_rows; r++) {
        const int64_t len = mul_mat ? K : N;
        for (int64_t k = 0; k < len; k++) src[k] = 0.05f * rg_rng_normal(6, (uint64_t)r, (uint64_t)k);
        rg_quant_get(w_type)->quantize(src, b + (size_t)r * b_row, len, NULL);
    }
    bf16_job j;
    memset(&j, 0, sizeof j);
    j.pool = pool, j.impl = impl;
    j.prob.a = a, j.prob.a_rs = K, j.prob.a_cs = 1;  // A [T][K]: the activations, contiguous along K
    j.prob.b.type = w_type, j.prob.b.data = b, j.prob.b.row_stride = b_row, j.prob.b.rows_along_k = mul_mat;
    if (w_type == RG_TYPE_F32) {  // strided floats: B(k, j)
        j.prob.b.rs = mul_mat ? 1 : N, j.prob.b.cs = mul_mat ? K : 1;
    }
    j.prob.c = c, j.prob.ldc = N;
    j.bt = (rg_gemm_batch){M, N, K, w_type, mul_mat, false, 1, bf16_get, &j};
    j.work_size = rg_gemm_work_size(impl, &j.bt, rg_threadpool_size(pool));
    j.work = aligned_alloc(64, (j.work_size + 64) / 64 * 64);
    const double flop = 2.0 * (double)M * (double)N * (double)K;
    const double s = bench_best(run_bf16_job, &j, 1, trials);
    free(j.work), free(a), free(b), free(c), free(src);
    return flop / s * 1e-9;
}

static void bf16_cell(char *out, size_t cap, double g, double fma_peak, double tile_peak) {
    if (tile_peak > 0)
        snprintf(out, cap, "%8.1f (%3.0f%% | %3.0f%%)", g, 100 * g / fma_peak, 100 * g / tile_peak);
    else
        snprintf(out, cap, "%8.1f (%3.0f%% |   -)", g, 100 * g / fma_peak);
}

// The 1B training shapes' table on each pool; tile_peak[p]: the measured peak of pool p (0: none).
static void bf16_rows(rg_threadpool **pools, int n_pools, double peak1, const double *tile_peak, bool quick) {
    static const struct {
        int64_t M, N, K;
        bool mul_mat;
        const char *what;
    } shapes[] = {
        {256, 8192, 2048, true, "ffn_up/gate fwd"},   // W [2048 -> 8192] . X [2048, 256]
        {256, 2048, 8192, true, "ffn_down fwd, dX up"},
        {256, 2048, 2048, true, "attn_q/out fwd"},
        {256, 512, 2048, true, "attn_k/v fwd"},
        {2048, 8192, 256, false, "dW ffn_up (full)"},  // X [2048, T] . dY [8192, T]^T: K = tokens
    };
    const rg_tile_path path = rg_gemm_tiles_path();
    printf("\nLlama-3.2-1B training products, T = 256 tokens, C [T or K, N] through rg_gemm_run: GFLOP/s (%% of the FMA "
           "peak | %% of the tile peak of the threads used)\n");
    if (path == RG_TILES_NONE)
        printf("BF16 rows (RG_SGEMM_BF16): needs a matrix unit: %s\n", rg_gemm_tiles_missing());
    else
        printf("BF16 rows (RG_SGEMM_BF16) on the %s path%s\n", rg_tile_path_name(path),
               path == RG_TILES_EMULATED ? ": emulated, not a matrix-unit result (RG_TILES_EMULATE=1; one small shape, "
                                           "one run, on 1 thread)"
                                         : "");
    printf("%-20s %-20s %7s %24s %24s %24s\n", "M x N x K", "1B role", "threads", "f32 weights (auto)",
           "bf16 weights (auto)", "bf16 on the tiles");
    if (path == RG_TILES_EMULATED) {  // the emulation is for correctness: one small product, no ratios
        const int64_t M = 32, N = 512, K = 2048;
        double g = time_bf16_product(NULL, RG_SGEMM_BF16, RG_TYPE_BF16, M, N, K, true, 1);
        char shape[40];
        snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
        printf("%-20s %-20s %7d %24s %24s %10.2f GFLOP/s emulated, not a matrix-unit result\n", shape, "attn_k/v fwd", 1,
               "-", "-", g);
        return;
    }
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (int p = 0; p < n_pools; p++) {
            const int nth = rg_threadpool_size(pools[p]);
            const double fma = peak1 * nth;
            // OUT_PROD's B is dY (F32 activations): no weight type, so no "bf16 weights" cell; on the
            // tiles it is rounded to BF16 as the activations are.
            const uint32_t w16 = shapes[s].mul_mat ? RG_TYPE_BF16 : RG_TYPE_F32;
            char shape[40], c32[48], c16[48] = "-", ct[48] = "needs a matrix unit";
            snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)shapes[s].M, (long long)shapes[s].N,
                     (long long)shapes[s].K);
            bf16_cell(c32, sizeof c32, time_bf16_product(pools[p], RG_SGEMM_AUTO, RG_TYPE_F32, shapes[s].M, shapes[s].N,
                                                         shapes[s].K, shapes[s].mul_mat, 5), fma, tile_peak[p]);
            if (shapes[s].mul_mat)
                bf16_cell(c16, sizeof c16, time_bf16_product(pools[p], RG_SGEMM_AUTO, RG_TYPE_BF16, shapes[s].M,
                                                             shapes[s].N, shapes[s].K, true, 5), fma, tile_peak[p]);
            if (path != RG_TILES_NONE)
                bf16_cell(ct, sizeof ct, time_bf16_product(pools[p], RG_SGEMM_BF16, w16, shapes[s].M,
                                                           shapes[s].N, shapes[s].K, shapes[s].mul_mat, 5),
                          fma, tile_peak[p]);
            printf("%-20s %-20s %7d %24s %24s %24s\n", shape, shapes[s].what, nth, c32, c16, ct);
        }
        if (quick) break;
    }
}

int main(int argc, char **argv) {
    bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int cores = rg_cpu_count();
    double mhz = bench_measured_mhz(), mhz_info = bench_cpuinfo_mhz();
    double clock = mhz > 0 ? mhz : mhz_info;
    const int fpc = bench_fma_flop_per_cycle(clock);
    double peak1 = fpc * clock * 1e-3;  // GFLOP/s per core
    printf("bench_gemm: %d cores, clock %.0f MHz measured (dependent-add chain; /proc/cpuinfo says %.0f MHz)\n", cores,
           mhz, mhz_info);
    printf("FMA peak: %d FLOP/cycle/core (measured FMA rate / clock) x %.0f MHz = %.1f GFLOP/s per core, %.1f on %d cores\n",
           fpc, clock, peak1, peak1 * cores, cores);
    printf("ours = %s; openblas = %s, one thread per tile of a fixed grid (gemm.c)\n",
           rg_sgemm_impl_name(RG_SGEMM_OURS),
           rg_sgemm_have_openblas() ? rg_sgemm_impl_name(RG_SGEMM_OPENBLAS) : "not in this build");
    // The machine may be shared: the load average says how much the all-thread rows can be trusted.
    FILE *la = fopen("/proc/loadavg", "r");
    char load[64] = "?";
    if (la) {
        if (!fgets(load, sizeof load, la)) snprintf(load, sizeof load, "?");
        fclose(la);
        load[strcspn(load, "\n")] = 0;
    }
    printf("load average at start: %s\n", load);

    rg_threadpool *pools[2] = {NULL, NULL};
    rg_error err;
    if (cores > 1 && rg_threadpool_create(&pools[1], cores, &err) != RG_OK) {
        fprintf(stderr, "bench_gemm: %s\n", err.msg);
        return 1;
    }
    int n_pools = cores > 1 ? 2 : 1;

    // The tile peak, on 1 thread and on all cores (0: not measurable here; why says so).
    double tile_peak[2] = {0, 0};
    char why[256] = "";
    for (int p = 0; p < n_pools; p++) tile_peak[p] = bench_tile_peak_gflops(pools[p], why, sizeof why);
    if (tile_peak[0] > 0) {
        printf("tile peak: TDPBF16PS register-resident loop %.1f GFLOP/s on 1 thread (%.1fx the core's FMA peak)", tile_peak[0],
               tile_peak[0] / peak1);
        if (n_pools > 1) printf(", %.1f on %d threads", tile_peak[1], rg_threadpool_size(pools[1]));
        printf("\n");
    } else {
        printf("tile peak: %s\n", why);
    }
    printf("BF16 product path: %s (rg_gemm_tiles_path%s%s)\n\n", rg_tile_path_name(rg_gemm_tiles_path()),
           rg_gemm_tiles_path() == RG_TILES_NONE ? ": " : "", rg_gemm_tiles_missing());

    static const struct {
        int64_t M, N, K;
        const char *what;
    } shapes[] = {
        {576, 1536, 256, "dW ffn_up/gate"},
        {1536, 576, 256, "dW ffn_down"},
        {576, 576, 256, "dW attn_q/out"},
        {4096, 4096, 256, "dW 4096-wide"},
    };
    printf("SGEMM C[M,N] = A[M,K].B[K,N], GFLOP/s (fraction of the FMA peak of the threads used)\n");
    printf("%-18s %-16s %7s %16s %16s %10s  %s\n", "M x N x K", "SmolLM2 role", "threads", "ours", "openblas",
           "ours/ob", "auto picks");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t M = shapes[s].M, N = shapes[s].N, K = shapes[s].K;
        float *A = malloc(sizeof(float) * (size_t)(M * K)), *B = malloc(sizeof(float) * (size_t)(K * N));
        float *C = malloc(sizeof(float) * (size_t)(M * N));
        for (int64_t i = 0; i < M * K; i++) A[i] = rg_rng_normal(1, 0, (uint64_t)i);
        for (int64_t i = 0; i < K * N; i++) B[i] = rg_rng_normal(2, 0, (uint64_t)i);
        for (int p = 0; p < n_pools; p++) {
            int nth = rg_threadpool_size(pools[p]);
            double peak = peak1 * nth;
            double g_ours = time_gemm(pools[p], RG_SGEMM_OURS, M, N, K, A, B, C);
            double g_ob = rg_sgemm_have_openblas() ? time_gemm(pools[p], RG_SGEMM_OPENBLAS, M, N, K, A, B, C) : 0;
            char shape[32], ob[32];
            snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
            if (g_ob > 0)
                snprintf(ob, sizeof ob, "%6.1f (%3.0f%%)", g_ob, 100 * g_ob / peak);
            else
                snprintf(ob, sizeof ob, "%16s", "-");
            char ratio[16];
            if (g_ob > 0)
                snprintf(ratio, sizeof ratio, "%.2f", g_ours / g_ob);
            else
                snprintf(ratio, sizeof ratio, "-");
            printf("%-18s %-16s %7d %8.1f (%3.0f%%) %16s %10s  %s\n", shape, shapes[s].what, nth, g_ours,
                   100 * g_ours / peak, ob, ratio, rg_sgemm_impl_name(rg_sgemm_pick(M, N, K, RG_TYPE_F32)));
        }
        free(A), free(B), free(C);
        if (quick) break;
    }

    // MUL_MAT per weight type: w [K = 1536, M = 576] (ffn_down), x [1536, N].
    static const uint32_t types[] = {RG_TYPE_F32,  RG_TYPE_F16,  RG_TYPE_BF16, RG_TYPE_Q8_0, RG_TYPE_Q4_0,
                                     RG_TYPE_Q4_1, RG_TYPE_Q4_K, RG_TYPE_Q5_K, RG_TYPE_Q6_K, RG_TYPE_IQ4_XS};
    const int64_t K = 1536, M = 576, NMAX = 256;
    float *x = malloc(sizeof(float) * (size_t)(K * NMAX)), *y = malloc(sizeof(float) * (size_t)(M * NMAX));
    for (int64_t i = 0; i < K * NMAX; i++) x[i] = rg_rng_normal(4, 0, (uint64_t)i);
    printf(
        "\nMUL_MAT w [K=1536, M=576] (ffn_down) x [1536, N] -> [576, N], GFLOP/s (2 K M N per run), through "
        "cpu_mul_mat\n");
    printf("%-8s %7s %16s %16s\n", "type", "threads", "N = 256 (sgemm)", "N = 1 (dots)");
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        void *w = make_weights(types[t], K, M);
        for (int p = 0; p < n_pools; p++) {
            int nth = rg_threadpool_size(pools[p]);
            double g256 = time_mul_mat(pools[p], types[t], w, K, M, x, NMAX, y);
            double g1 = time_mul_mat(pools[p], types[t], w, K, M, x, 1, y);
            printf("%-8s %7d %8.1f (%3.0f%%) %16.1f\n", rg_type_get(types[t])->name, nth, g256,
                   100 * g256 / (peak1 * nth), g1);
        }
        free(w);
        if (quick) break;
    }

    // The crossover behind vec_max_n (ops_matmul.c), on all cores.
    rg_threadpool *pool = pools[n_pools - 1];
    static const int64_t Ns[] = {1, 2, 4, 6, 8, 12, 16};
    printf("\nMUL_MAT paths forced, w [1536, 576], %d threads: GFLOP/s of dot products / SGEMM\n",
           rg_threadpool_size(pool));
    printf("%-8s", "type");
    for (size_t i = 0; i < sizeof Ns / sizeof Ns[0]; i++) printf("   N=%-2lld dot/sgemm", (long long)Ns[i]);
    printf("\n");
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        void *w = make_weights(types[t], K, M);
        printf("%-8s", rg_type_get(types[t])->name);
        for (size_t i = 0; i < sizeof Ns / sizeof Ns[0]; i++) {
            double gv = time_path(pool, types[t], w, K, M, x, Ns[i], y, false);
            double gg = time_path(pool, types[t], w, K, M, x, Ns[i], y, true);
            printf("   %6.1f / %6.1f", gv, gg);
        }
        printf("\n");
        free(w);
        if (quick) break;
    }
    free(x), free(y);
    bf16_rows(pools, n_pools, peak1, tile_peak, quick);
    rg_threadpool_free(pools[1]);
    return 0;
}
