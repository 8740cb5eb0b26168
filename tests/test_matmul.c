// test_matmul.c - rg_sgemm (ours, the portable micro-kernel, OpenBLAS) and the
// MUL_MAT / OUT_PROD kernels for every weight type, against double-precision
// products of the dequantized weights; identical bits on 1 and 3 threads.
//
// Errors are measured relative to sum_k |a_k b_k| of the element (the scale of
// the rounding errors of any order of summation):
//   SGEMM and the SGEMM paths of both ops (F32 activations)      <= 1e-6 * (1 + sqrt(K / 64))
//     (the sum is a chain of fused multiply-adds in blocks of 256, so its error
//      grows like sqrt(K) roundings of 2^-24 for random signs; the worst seen
//      here is 3e-7, against bounds of 2e-6 to 1e-5)
//   ours against OpenBLAS (different summation orders)            <= 2x the SGEMM bound
//   MUL_MAT's dot-product path (small N) for F32/F16/BF16 weights <= 1e-5
//   MUL_MAT's dot-product path for quantized weights              <= 8e-3 (8-bit activations)
// Bits: ours with the AVX2 and the portable micro-kernel are compared for
// equality, and every path on 1 and on 3 threads.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "cpu/cpu_ops.h"
#include "cpu/dot_rows.h"
#include "cpu/gemm.h"
#include "cpu/gemm_int8.h"
#include "cpu/gemm_int8_tiles.h"
#include "rg_test.h"
#include "tensor/quant/quant.h"

static double sgemm_tol(int64_t K) { return 1e-6 * (1.0 + sqrt((double)K / 64.0)); }

static float *randn(int64_t n, uint64_t seed) {
    float *v = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = rg_rng_normal(seed, 0, (uint64_t)i);
    return v;
}

static rg_threadpool *pool_of(int n) {
    rg_threadpool *p = NULL;
    rg_error err = {0};
    if (n > 1 && rg_threadpool_create(&p, n, &err) != RG_OK) {
        fprintf(stdout, "    thread pool: %s\n", err.msg);
        exit(1);
    }
    return p;  // NULL runs on the caller's thread
}

// ---------------------------------------------------------------------------
// rg_sgemm

typedef struct layout {
    const char *name;
    bool a_t, b_t;  // A stored as [K][M] (a_t) or [M][K]; B as [N][K] (b_t) or [K][N]
} layout;

static const layout layouts[] = {{"NN", false, false}, {"NT", false, true}, {"TN", true, false}, {"TT", true, true}};

// Worst |C - ref| / sum|a b| over C, with C0 the initial C when accumulating.
static double worst_error(int64_t M, int64_t N, int64_t K, const float *A, int64_t ars, int64_t acs, const float *B,
                          int64_t brs, int64_t bcs, const float *C, int64_t ldc, const float *C0) {
    double worst = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double ref = C0 ? C0[i * ldc + j] : 0, mag = C0 ? fabs(C0[i * ldc + j]) : 0;
            for (int64_t k = 0; k < K; k++) {
                double p = (double)A[i * ars + k * acs] * B[k * brs + j * bcs];
                ref += p, mag += fabs(p);
            }
            double e = fabs(C[i * ldc + j] - ref) / (mag > 0 ? mag : 1);
            if (!(e <= worst)) worst = e;  // NaN too
        }
    return worst;
}

static const rg_sgemm_impl impls[] = {RG_SGEMM_OURS, RG_SGEMM_OURS_PORTABLE, RG_SGEMM_OPENBLAS, RG_SGEMM_AUTO};

// One product in every layout and implementation, checked against double, the
// AVX2 and portable micro-kernels bit-identical, 1 and 3 threads bit-identical.
static void check_sgemm_shape(int64_t M, int64_t N, int64_t K, rg_threadpool *pool3) {
    float *A = randn(M * K, 11 + (uint64_t)K), *B = randn(K * N, 13 + (uint64_t)N);
    int64_t ldc = N + 3;  // padding columns must survive
    size_t csz = (size_t)(M * ldc);
    float *C1 = malloc(sizeof(float) * csz), *C3 = malloc(sizeof(float) * csz), *Cref = malloc(sizeof(float) * csz);
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        const layout *ly = &layouts[l];
        int64_t ars = ly->a_t ? 1 : K, acs = ly->a_t ? M : 1, brs = ly->b_t ? 1 : N, bcs = ly->b_t ? K : 1;
        for (size_t im = 0; im < sizeof impls / sizeof impls[0]; im++) {
            rg_sgemm_impl impl = impls[im];
            if (impl == RG_SGEMM_OPENBLAS && !rg_sgemm_have_openblas()) continue;
            rg_error err = {0};
            for (size_t i = 0; i < csz; i++) C1[i] = C3[i] = -7.0f;
            RG_REQUIRE(rg_sgemm(NULL, impl, M, N, K, A, ars, acs, B, brs, bcs, C1, ldc, false, NULL, 0, &err) == RG_OK,
                       "%s", err.msg);
            size_t ws = rg_sgemm_work_size(impl, M, N, K, 3);
            void *work = ws ? aligned_alloc(64, (ws + 63) / 64 * 64) : NULL;
            RG_REQUIRE(
                rg_sgemm(pool3, impl, M, N, K, A, ars, acs, B, brs, bcs, C3, ldc, false, work, ws, &err) == RG_OK, "%s",
                err.msg);
            free(work);
            const char *name = rg_sgemm_impl_name(impl);
            RG_CHECK(memcmp(C1, C3, sizeof(float) * csz) == 0, "%lldx%lldx%lld %s %s: 1 and 3 threads differ",
                     (long long)M, (long long)N, (long long)K, ly->name, name);
            bool pad_ok = true;
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = N; j < ldc; j++) pad_ok &= C1[i * ldc + j] == -7.0f;
            RG_CHECK(pad_ok, "%lldx%lldx%lld %s %s: wrote past N", (long long)M, (long long)N, (long long)K, ly->name,
                     name);
            double e = worst_error(M, N, K, A, ars, acs, B, brs, bcs, C1, ldc, NULL);
            RG_CHECK(e <= sgemm_tol(K), "%lldx%lldx%lld %s %s: relative error %.3g over %.3g", (long long)M,
                     (long long)N, (long long)K, ly->name, name, e, sgemm_tol(K));
            if (impl == RG_SGEMM_OURS) memcpy(Cref, C1, sizeof(float) * csz);
            if (impl == RG_SGEMM_OURS_PORTABLE)
                RG_CHECK(memcmp(C1, Cref, sizeof(float) * csz) == 0,
                         "%lldx%lldx%lld %s: the portable and AVX2 micro-kernels differ", (long long)M, (long long)N,
                         (long long)K, ly->name);
            if (impl == RG_SGEMM_OPENBLAS) {
                // Ours and OpenBLAS sum in different orders: close, not equal.
                double d = 0;
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        double mag = 0;
                        for (int64_t k = 0; k < K; k++)
                            mag += fabs((double)A[i * ars + k * acs] * B[k * brs + j * bcs]);
                        double v = fabs((double)C1[i * ldc + j] - Cref[i * ldc + j]) / (mag > 0 ? mag : 1);
                        if (!(v <= d)) d = v;
                    }
                RG_CHECK(d <= 2 * sgemm_tol(K), "%lldx%lldx%lld %s: ours and OpenBLAS differ by %.3g (relative)",
                         (long long)M, (long long)N, (long long)K, ly->name, d);
            }
        }
    }
    // Accumulate: C += A.B on top of a random C.
    float *C0 = randn((int64_t)csz, 17);
    memcpy(C1, C0, sizeof(float) * csz);
    rg_error err = {0};
    RG_REQUIRE(rg_sgemm(pool3, RG_SGEMM_AUTO, M, N, K, A, K, 1, B, N, 1, C1, ldc, true, NULL, 0, &err) == RG_OK, "%s",
               err.msg);
    double e = worst_error(M, N, K, A, K, 1, B, N, 1, C1, ldc, C0);
    RG_CHECK(e <= sgemm_tol(K), "%lldx%lldx%lld accumulate: relative error %.3g", (long long)M, (long long)N,
             (long long)K, e);
    free(C0), free(A), free(B), free(C1), free(C3), free(Cref);
}

static void test_sgemm_shapes(void) {
    // Odd sizes straddle every block edge: MR = 6, NR = 16, KC = 256, MC = 144.
    static const int64_t shapes[][3] = {
        {1, 1, 1},       {1, 1, 300},     {1, 37, 5},    {29, 1, 17},    {6, 16, 256}, {7, 17, 257},
        {13, 33, 100},   {50, 47, 1},     {145, 20, 31}, {150, 70, 513}, {3, 2, 5000}, {64, 300, 64},
        {200, 530, 260}, {520, 530, 260}, {8, 530, 260},  // AUTO runs OpenBLAS (when built) for M <= 8
    };
    rg_threadpool *pool3 = pool_of(3);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        check_sgemm_shape(shapes[s][0], shapes[s][1], shapes[s][2], pool3);
    rg_threadpool_free(pool3);
}

// C rows a multiple of 4 KB apart (the LM head's logits: 49152 floats a row), K over one
// depth slice: gemm.c sums such a block in a padded per-thread buffer. The bits must equal
// those of the same product into a C with an ordinary stride, for 1 and 3 threads, and
// the columns past N must be left alone.
static void test_sgemm_rows_4k_apart(void) {
    static const int64_t shapes[][3] = {{40, 1000, 300}, {512, 200, 600}, {7, 2048, 513}};
    rg_threadpool *pool3 = pool_of(3);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t M = shapes[si][0], N = shapes[si][1], K = shapes[si][2], ldc = 4096, ldr = N + 3;
        float *A = randn(M * K, 31), *B = randn(K * N, 37);
        float *C = malloc(sizeof(float) * (size_t)(M * ldc)), *C3 = malloc(sizeof(float) * (size_t)(M * ldc));
        float *R = malloc(sizeof(float) * (size_t)(M * ldr));
        for (int acc = 0; acc < 2; acc++) {
            float *C0 = randn(M * ldc, 41);
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < ldr && j < ldc; j++) R[i * ldr + j] = C0[i * ldc + j];
            memcpy(C, C0, sizeof(float) * (size_t)(M * ldc));
            memcpy(C3, C0, sizeof(float) * (size_t)(M * ldc));
            rg_error err = {0};
            RG_REQUIRE(rg_sgemm(NULL, RG_SGEMM_OURS, M, N, K, A, K, 1, B, N, 1, R, ldr, acc, NULL, 0, &err) == RG_OK, "%s",
                       err.msg);
            RG_REQUIRE(rg_sgemm(NULL, RG_SGEMM_OURS, M, N, K, A, K, 1, B, N, 1, C, ldc, acc, NULL, 0, &err) == RG_OK, "%s",
                       err.msg);
            size_t ws = rg_sgemm_work_size(RG_SGEMM_OURS, M, N, K, 3);
            void *work = ws ? aligned_alloc(64, (ws + 63) / 64 * 64) : NULL;
            RG_REQUIRE(rg_sgemm(pool3, RG_SGEMM_OURS, M, N, K, A, K, 1, B, N, 1, C3, ldc, acc, work, ws, &err) == RG_OK,
                       "%s", err.msg);
            free(work);
            bool same = true, same3 = true, pad = true;
            for (int64_t i = 0; i < M; i++) {
                same &= memcmp(C + i * ldc, R + i * ldr, sizeof(float) * (size_t)N) == 0;
                same3 &= memcmp(C3 + i * ldc, C + i * ldc, sizeof(float) * (size_t)N) == 0;
                pad &= memcmp(C + i * ldc + N, C0 + i * ldc + N, sizeof(float) * (size_t)(ldc - N)) == 0;
            }
            RG_CHECK(same, "%lldx%lldx%lld acc %d: C rows 4096 floats apart give other bits than rows %lld apart",
                     (long long)M, (long long)N, (long long)K, acc, (long long)ldr);
            RG_CHECK(same3, "%lldx%lldx%lld acc %d: 1 and 3 threads differ", (long long)M, (long long)N, (long long)K, acc);
            RG_CHECK(pad, "%lldx%lldx%lld acc %d: wrote past N", (long long)M, (long long)N, (long long)K, acc);
            double e = worst_error(M, N, K, A, K, 1, B, N, 1, C, ldc, acc ? C0 : NULL);
            RG_CHECK(e <= sgemm_tol(K), "%lldx%lldx%lld acc %d: relative error %.3g", (long long)M, (long long)N,
                     (long long)K, acc, e);
            free(C0);
        }
        free(A), free(B), free(C), free(C3), free(R);
    }
    rg_threadpool_free(pool3);
}

static void test_sgemm_edges(void) {
    rg_error err = {0};
    float A[6] = {1, 2, 3, 4, 5, 6}, B[6] = {1, 1, 1, 1, 1, 1}, C[4] = {9, 9, 9, 9};
    // K = 0: C = 0, or C unchanged when accumulating.
    RG_CHECK(rg_sgemm(NULL, RG_SGEMM_OURS, 2, 2, 0, A, 3, 1, B, 2, 1, C, 2, true, NULL, 0, &err) == RG_OK, "%s",
             err.msg);
    RG_CHECK(C[0] == 9 && C[3] == 9, "K = 0 accumulate changed C");
    for (size_t im = 0; im < sizeof impls / sizeof impls[0]; im++) {
        if (impls[im] == RG_SGEMM_OPENBLAS && !rg_sgemm_have_openblas()) continue;
        C[0] = C[1] = C[2] = C[3] = 9;
        RG_CHECK(rg_sgemm(NULL, impls[im], 2, 2, 0, A, 3, 1, B, 2, 1, C, 2, false, NULL, 0, &err) == RG_OK, "%s",
                 err.msg);
        RG_CHECK(C[0] == 0 && C[1] == 0 && C[2] == 0 && C[3] == 0, "%s: K = 0 did not zero C",
                 rg_sgemm_impl_name(impls[im]));
    }
    // M = 0 or N = 0: nothing happens.
    RG_CHECK(rg_sgemm(NULL, RG_SGEMM_AUTO, 0, 2, 3, A, 3, 1, B, 2, 1, C, 2, false, NULL, 0, &err) == RG_OK, "%s",
             err.msg);
    // A too small work buffer and a bad ldc are errors, not overruns.
    char small[64];
    RG_CHECK(rg_sgemm(NULL, RG_SGEMM_OURS, 2, 2, 3, A, 3, 1, B, 2, 1, C, 2, false, small, sizeof small, &err) ==
                     RG_ERR_ARG &&
                 strstr(err.msg, "work buffer"),
             "%s", err.msg);
    RG_CHECK(rg_sgemm(NULL, RG_SGEMM_OURS, 2, 2, 3, A, 3, 1, B, 2, 1, C, 1, false, NULL, 0, &err) == RG_ERR_ARG &&
                 strstr(err.msg, "ldc"),
             "%s", err.msg);
    if (!rg_sgemm_have_openblas())
        RG_CHECK(rg_sgemm(NULL, RG_SGEMM_OPENBLAS, 2, 2, 3, A, 3, 1, B, 2, 1, C, 2, false, NULL, 0, &err) ==
                     RG_ERR_UNSUPPORTED,
                 "OpenBLAS accepted in a build without it");
    // 2x3 . 3x2 exactly: [[6, 6], [15, 15]].
    RG_CHECK(rg_sgemm(NULL, RG_SGEMM_AUTO, 2, 2, 3, A, 3, 1, B, 2, 1, C, 2, false, NULL, 0, &err) == RG_OK, "%s",
             err.msg);
    RG_CHECK(C[0] == 6 && C[1] == 6 && C[2] == 15 && C[3] == 15, "got %g %g %g %g", C[0], C[1], C[2], C[3]);
}

// A strided A with no unit stride goes through OpenBLAS's copy path and ours.
static void test_sgemm_general_strides(void) {
    const int64_t M = 23, N = 41, K = 70;
    float *A = randn(M * K * 6, 5), *B = randn(K * N * 3, 6), *C = malloc(sizeof(float) * M * N);
    for (size_t im = 0; im < sizeof impls / sizeof impls[0]; im++) {
        if (impls[im] == RG_SGEMM_OPENBLAS && !rg_sgemm_have_openblas()) continue;
        rg_error err = {0};
        RG_REQUIRE(
            rg_sgemm(NULL, impls[im], M, N, K, A, 2, 2 * M + 1, B, 3 * N, 3, C, N, false, NULL, 0, &err) == RG_OK, "%s",
            err.msg);
        double e = worst_error(M, N, K, A, 2, 2 * M + 1, B, 3 * N, 3, C, N, NULL);
        RG_CHECK(e <= sgemm_tol(K), "%s: relative error %.3g", rg_sgemm_impl_name(impls[im]), e);
    }
    free(A), free(B), free(C);
}

// ---------------------------------------------------------------------------
// rg_gemm_run with a quantized B, in both row orientations, every implementation

typedef struct typed_case {
    const float *a;
    int64_t K;
    rg_gemm_b b;
    float *c;
    int64_t ldc;
} typed_case;

static void typed_get(const void *ctx, int64_t p, rg_gemm_problem *prob) {
    const typed_case *t = ctx;
    (void)p;
    memset(prob, 0, sizeof *prob);
    prob->a = t->a, prob->a_rs = t->K, prob->a_cs = 1;
    prob->b = t->b;
    prob->c = t->c, prob->ldc = t->ldc;
}

static void make_weights(uint32_t type, int64_t n_per_row, int64_t n_rows, uint64_t seed, void **q, float **deq);

static void test_gemm_quantized_b(void) {
    static const uint32_t types[] = {RG_TYPE_Q8_0, RG_TYPE_Q4_K, RG_TYPE_IQ4_XS, RG_TYPE_F16, RG_TYPE_BF16};
    rg_threadpool *pool3 = pool_of(3);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (int along_k = 0; along_k < 2; along_k++) {
            // along k: B(k, j) = row j [k], rows of K = 512; else B(k, j) = row k [j], rows of N = 512.
            int64_t M = 35, K = along_k ? 512 : 300, N = along_k ? 70 : 512;
            void *q;
            float *deq;
            make_weights(types[t], along_k ? K : N, along_k ? N : K, 61 + t, &q, &deq);
            float *A = randn(M * K, 62), *C = malloc(sizeof(float) * (size_t)(M * N)),
                  *C3 = malloc(sizeof(float) * (size_t)(M * N));
            float *Cours = malloc(sizeof(float) * (size_t)(M * N));
            typed_case tc = {
                A, K, {types[t], q, 0, 0, rg_type_row_size(types[t], along_k ? K : N), along_k != 0}, C, N};
            rg_gemm_batch bt = {M, N, K, types[t], along_k != 0, false, 1, typed_get, &tc};
            for (size_t im = 0; im < sizeof impls / sizeof impls[0]; im++) {
                rg_sgemm_impl impl = impls[im];
                if (impl == RG_SGEMM_OPENBLAS && !rg_sgemm_have_openblas()) continue;
                const char *what = rg_type_get(types[t])->name;
                rg_error err = {0};
                tc.c = C;
                RG_REQUIRE(rg_gemm_run(NULL, impl, &bt, NULL, 0, &err) == RG_OK, "%s: %s", what, err.msg);
                tc.c = C3;
                size_t ws = rg_gemm_work_size(impl, &bt, 3);
                void *work = aligned_alloc(64, (ws + 63) / 64 * 64 + 64);
                RG_REQUIRE(rg_gemm_run(pool3, impl, &bt, work, ws, &err) == RG_OK, "%s: %s", what, err.msg);
                free(work);
                RG_CHECK(memcmp(C, C3, sizeof(float) * (size_t)(M * N)) == 0,
                         "%s along_k=%d %s: 1 and 3 threads differ", what, along_k, rg_sgemm_impl_name(impl));
                // B as floats: along k, B(k, j) = deq[j * K + k]; else deq[k * N + j].
                double e = worst_error(M, N, K, A, K, 1, deq, along_k ? 1 : N, along_k ? K : 1, C, N, NULL);
                RG_CHECK(e <= sgemm_tol(K), "%s along_k=%d %s: relative error %.3g", what, along_k,
                         rg_sgemm_impl_name(impl), e);
                if (impl == RG_SGEMM_OURS) memcpy(Cours, C, sizeof(float) * (size_t)(M * N));
                if (impl == RG_SGEMM_OURS_PORTABLE)
                    RG_CHECK(memcmp(C, Cours, sizeof(float) * (size_t)(M * N)) == 0,
                             "%s along_k=%d: portable and AVX2 differ", what, along_k);
            }
            free(q), free(deq), free(A), free(C), free(C3), free(Cours);
        }
    rg_threadpool_free(pool3);
}

// ---------------------------------------------------------------------------
// MUL_MAT and OUT_PROD through the op kernels

static const struct {
    uint32_t type;
    double vec_tol;  // the dot-product path
    int64_t vec_n;   // MUL_MAT takes the dot products for N < vec_n (ops_matmul.c, vec_max_n)
} wtypes[] = {
    {RG_TYPE_F32, 1e-5, 8},  {RG_TYPE_F16, 1e-5, 8},  {RG_TYPE_BF16, 1e-5, 8},
    {RG_TYPE_Q8_0, 8e-3, 4}, {RG_TYPE_Q4_0, 8e-3, 8}, {RG_TYPE_Q4_1, 8e-3, 8},
    {RG_TYPE_Q5_0, 8e-3, 4}, {RG_TYPE_Q4_K, 8e-3, 8}, {RG_TYPE_Q6_K, 8e-3, 8}, {RG_TYPE_IQ4_XS, 8e-3, 4},
};

// A contiguous tensor header over data.
static rg_tensor tensor(uint32_t type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, void *data) {
    rg_tensor t;
    memset(&t, 0, sizeof t);
    t.type = type;
    t.ne[0] = ne0, t.ne[1] = ne1, t.ne[2] = ne2, t.ne[3] = ne3;
    t.nb[0] = rg_type_get(type)->type_size;
    t.nb[1] = rg_type_row_size(type, ne0);
    t.nb[2] = t.nb[1] * (size_t)ne1;
    t.nb[3] = t.nb[2] * (size_t)ne2;
    t.data = data;
    return t;
}

// n_rows rows of n_per_row weights of `type` (quantized from Gaussians), and their dequantized values.
static void make_weights(uint32_t type, int64_t n_per_row, int64_t n_rows, uint64_t seed, void **q, float **deq) {
    size_t row = rg_type_row_size(type, n_per_row);
    float *src = malloc(sizeof(float) * (size_t)(n_per_row * n_rows));
    for (int64_t i = 0; i < n_per_row * n_rows; i++) src[i] = 0.05f * rg_rng_normal(seed, 1, (uint64_t)i);
    *q = malloc(row * (size_t)n_rows);
    *deq = malloc(sizeof(float) * (size_t)(n_per_row * n_rows));
    const rg_quant_ops *ops = rg_quant_get(type);
    for (int64_t r = 0; r < n_rows; r++) {
        ops->quantize(src + r * n_per_row, (char *)*q + r * row, n_per_row, NULL);
        ops->dequant((char *)*q + r * row, *deq + r * n_per_row, n_per_row);
    }
    free(src);
}

// Runs a node's kernel on a pool, with the scratch its work function asks for.
static rg_status run_node(rg_node *n, rg_threadpool *pool, bool out_prod, rg_error *err) {
    int nth = rg_threadpool_size(pool);
    size_t ws = out_prod ? cpu_out_prod_work(n, nth) : cpu_mul_mat_work(n, nth);
    rg_exec_ctx ctx = {pool, ws ? aligned_alloc(64, (ws + 63) / 64 * 64) : NULL, ws, false, NULL, NULL, false, NULL};
    rg_status st = out_prod ? cpu_out_prod(&ctx, n, err) : cpu_mul_mat(&ctx, n, err);
    free(ctx.scratch);
    return st;
}

// MUL_MAT: w [K, M, 2, 1] of each type, x [K, N, 4, 1] (broadcast 2 x), for
// small and large N and for x with padded rows and with a transposed layout.
static void check_mul_mat(uint32_t type, double vec_tol, int64_t vec_n, int64_t N, int x_layout, rg_threadpool *pool2,
                          rg_threadpool *pool3) {
    const char *tname = rg_type_get(type)->name;
    int64_t bs = rg_type_get(type)->block_size;
    int64_t K = bs >= 256 ? 512 : (bs > 1 ? 96 : 75), M = 37, b2 = 2, c2 = 4;
    void *wq;
    float *wf;
    make_weights(type, K, M * b2, 21 + type, &wq, &wf);
    // x layouts: 0 contiguous; 1 rows padded (nb1 = (K + 5) floats); 2 transposed storage (x[k, n] at n + k * N).
    int64_t ld = x_layout == 1 ? K + 5 : K;
    float *xbuf = randn(ld * N * c2 + K * N * c2, 31 + (uint64_t)N);
    rg_node wn, xn, y1, y3;
    memset(&wn, 0, sizeof wn), memset(&xn, 0, sizeof xn);
    wn.t = tensor(type, K, M, b2, 1, wq);
    xn.t = tensor(RG_TYPE_F32, K, N, c2, 1, xbuf);
    if (x_layout == 1) {
        xn.t.nb[1] = sizeof(float) * (size_t)ld;
        xn.t.nb[2] = xn.t.nb[1] * (size_t)N;
        xn.t.nb[3] = xn.t.nb[2] * (size_t)c2;
    }
    if (x_layout == 2) xn.t.nb[0] = sizeof(float) * (size_t)N, xn.t.nb[1] = sizeof(float);
    float *out1 = malloc(sizeof(float) * (size_t)(M * N * c2)), *out3 = malloc(sizeof(float) * (size_t)(M * N * c2));
    memset(&y1, 0, sizeof y1), memset(&y3, 0, sizeof y3);
    y1.op = y3.op = RG_OP_MUL_MAT;
    y1.src[0] = y3.src[0] = &wn, y1.src[1] = y3.src[1] = &xn;
    y1.t = tensor(RG_TYPE_F32, M, N, c2, 1, out1);
    y3.t = tensor(RG_TYPE_F32, M, N, c2, 1, out3);
    rg_error err = {0};
    RG_REQUIRE(run_node(&y1, NULL, false, &err) == RG_OK, "%s: %s", tname, err.msg);
    RG_REQUIRE(run_node(&y3, pool3, false, &err) == RG_OK, "%s: %s", tname, err.msg);
    RG_CHECK(memcmp(out1, out3, sizeof(float) * (size_t)(M * N * c2)) == 0,
             "mul_mat %s N=%lld x%d: 1 and 3 threads differ", tname, (long long)N, x_layout);
    RG_REQUIRE(run_node(&y3, pool2, false, &err) == RG_OK, "%s: %s", tname, err.msg);
    RG_CHECK(memcmp(out1, out3, sizeof(float) * (size_t)(M * N * c2)) == 0,
             "mul_mat %s N=%lld x%d: 1 and 2 threads differ", tname, (long long)N, x_layout);
    bool vec = N < vec_n;
    double tol = vec ? vec_tol : sgemm_tol(K), worst = 0;
    for (int64_t i2 = 0; i2 < c2; i2++)
        for (int64_t n = 0; n < N; n++)
            for (int64_t m = 0; m < M; m++) {
                const float *wrow = wf + ((i2 / (c2 / b2)) * M + m) * K;
                double ref = 0, mag = 0;
                for (int64_t k = 0; k < K; k++) {
                    float xv;
                    memcpy(&xv, (char *)xbuf + k * xn.t.nb[0] + n * xn.t.nb[1] + i2 * xn.t.nb[2], sizeof xv);
                    ref += (double)wrow[k] * xv, mag += fabs((double)wrow[k] * xv);
                }
                double e = fabs(out1[m + n * M + i2 * M * N] - ref) / (mag > 0 ? mag : 1);
                if (!(e <= worst)) worst = e;
            }
    RG_CHECK(worst <= tol, "mul_mat %s N=%lld x%d (%s path): relative error %.3g over %.3g", tname, (long long)N,
             x_layout, vec ? "dot" : "sgemm", worst, tol);
    free(wq), free(wf), free(xbuf), free(out1), free(out3);
}

static void test_mul_mat_every_type(void) {
    rg_threadpool *pool2 = pool_of(2), *pool3 = pool_of(3);
    static const int64_t Ns[] = {1, 3, 4, 7, 8, 37};
    for (size_t t = 0; t < sizeof wtypes / sizeof wtypes[0]; t++)
        for (size_t i = 0; i < sizeof Ns / sizeof Ns[0]; i++)
            for (int layout = 0; layout < 3; layout++)
                check_mul_mat(wtypes[t].type, wtypes[t].vec_tol, wtypes[t].vec_n, Ns[i], layout, pool2, pool3);
    rg_threadpool_free(pool2);
    rg_threadpool_free(pool3);
}

// RG_MUL_MAT_COLUMNS (graph.h): a marked MUL_MAT of N columns gives each column the bits of a MUL_MAT
// of that column alone, for every weight type, N past the dot products' usual limit, with the prompt
// paths allowed (int8_activations) and on 2 threads; and for an F32 weight read through a transposed
// view (no dot products: the SGEMM a column at a time).
static rg_status run_columns(rg_node *n, rg_threadpool *pool, rg_error *err) {
    int nth = rg_threadpool_size(pool);
    size_t ws = cpu_mul_mat_work(n, nth);
    rg_exec_ctx ctx = {pool, ws ? aligned_alloc(64, (ws + 63) / 64 * 64) : NULL, ws, true, NULL, NULL, false, NULL};
    rg_status st = cpu_mul_mat(&ctx, n, err);
    free(ctx.scratch);
    return st;
}

static void check_columns(const char *what, rg_node *wn, int64_t K, int64_t M, rg_threadpool *pool) {
    enum { N = 20 };
    float *x = randn(K * N, 61 + (uint64_t)K), *all = malloc(sizeof(float) * (size_t)(M * N)),
          *one = malloc(sizeof(float) * (size_t)M);
    rg_node xn, y, y1, x1;
    memset(&xn, 0, sizeof xn), memset(&y, 0, sizeof y);
    xn.t = tensor(RG_TYPE_F32, K, N, 1, 1, x);
    y.op = RG_OP_MUL_MAT, y.src[0] = wn, y.src[1] = &xn, y.ip[0] = RG_MUL_MAT_COLUMNS;
    y.t = tensor(RG_TYPE_F32, M, N, 1, 1, all);
    rg_error err = {0};
    RG_REQUIRE(run_columns(&y, pool, &err) == RG_OK, "%s: %s", what, err.msg);
    int differ = 0;
    for (int64_t j = 0; j < N; j++) {
        rg_mul_mat_column(&y, j, &x1, &y1);
        y1.t.data = one;
        RG_REQUIRE(run_columns(&y1, pool, &err) == RG_OK, "%s: %s", what, err.msg);
        differ += memcmp(one, all + j * M, sizeof(float) * (size_t)M) != 0;
    }
    RG_CHECK(differ == 0, "mul_mat %s marked RG_MUL_MAT_COLUMNS: %d of %d columns differ from the column alone", what,
             differ, (int)N);
    free(x), free(all), free(one);
}

// A weight node [K, M] of type made by make_weights (data malloc'd; *wf its dequantized values).
static rg_node weight_node(uint32_t type, int64_t K, int64_t M, uint64_t seed, float **wf) {
    void *wq;
    make_weights(type, K, M, seed, &wq, wf);
    rg_node wn;
    memset(&wn, 0, sizeof wn);
    wn.t = tensor(type, K, M, 1, 1, wq);
    return wn;
}

static void test_mul_mat_columns_every_type(void) {
    rg_threadpool *pool2 = pool_of(2);
    for (size_t t = 0; t < sizeof wtypes / sizeof wtypes[0]; t++) {
        const uint32_t type = wtypes[t].type;
        int64_t bs = rg_type_get(type)->block_size, K = bs >= 256 ? 512 : (bs > 1 ? 96 : 75), M = 37;
        float *wf;
        rg_node wn = weight_node(type, K, M, 71 + type, &wf);
        check_columns(rg_type_get(type)->name, &wn, K, M, pool2);
        free(wn.t.data), free(wf);
    }
    // an F32 weight through a transposed view: w[k, m] at m + k * M
    const int64_t K = 64, M = 24;
    float *wt = randn(K * M, 73);
    rg_node wn;
    memset(&wn, 0, sizeof wn);
    wn.t = tensor(RG_TYPE_F32, K, M, 1, 1, wt);
    wn.t.nb[0] = sizeof(float) * (size_t)M, wn.t.nb[1] = sizeof(float);
    check_columns("f32 (a transposed view)", &wn, K, M, pool2);
    free(wt);
    rg_threadpool_free(pool2);
}

// An inference prompt (int8 activations allowed, the node unmarked) of the types with unpacked tiles: where no
// integer GEMM serves the type (an AVX2 CPU) and N is at most rg_unpack_prompt_max_n, it takes the dot products,
// so every column has the bits of that column alone; past the limit, or where an integer GEMM serves it, another
// path. Every column within the dot products' tolerance of the F64 product on any CPU.
static void test_mul_mat_prompt_dots(void) {
    static const uint32_t types[] = {RG_TYPE_Q4_0, RG_TYPE_Q5_0, RG_TYPE_Q4_K, RG_TYPE_Q6_K};
    static const int64_t Ns[] = {12, 32, 40, 128, 136};
    rg_threadpool *pool2 = pool_of(2);
    int dots = 0, others = 0;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const uint32_t type = types[t];
        const int64_t K = rg_type_get(type)->block_size >= 256 ? 512 : 96, M = 37;
        float *wf;
        rg_node wn = weight_node(type, K, M, 81 + type, &wf);
        for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++) {
            const int64_t N = Ns[ni];
            rg_dot_rows2_fn pair;
            const bool want_dots = !rg_gemm_int8_tiles_supports(type, K) && !rg_gemm_int8_supports(type, K) &&
                                   rg_cpu_unpack_rows(type, K, &pair) && N <= rg_unpack_prompt_max_n(type);
            float *x = randn(K * N, 83 + (uint64_t)N), *all = malloc(sizeof(float) * (size_t)(M * N)),
                  *one = malloc(sizeof(float) * (size_t)M);
            rg_node xn, y, x1, y1;
            memset(&xn, 0, sizeof xn), memset(&y, 0, sizeof y);
            xn.t = tensor(RG_TYPE_F32, K, N, 1, 1, x);
            y.op = RG_OP_MUL_MAT, y.src[0] = &wn, y.src[1] = &xn;
            y.t = tensor(RG_TYPE_F32, M, N, 1, 1, all);
            rg_error err = {0};
            RG_REQUIRE(run_columns(&y, pool2, &err) == RG_OK, "%s N=%lld: %s", rg_type_get(type)->name, (long long)N,
                       err.msg);
            int differ = 0;
            double worst = 0;
            for (int64_t j = 0; j < N; j++) {
                rg_mul_mat_column(&y, j, &x1, &y1);
                y1.t.data = one;
                RG_REQUIRE(run_columns(&y1, pool2, &err) == RG_OK, "%s", err.msg);
                differ += memcmp(one, all + j * M, sizeof(float) * (size_t)M) != 0;
                for (int64_t m = 0; m < M; m++) {
                    double ref = 0, mag = 0;
                    for (int64_t k = 0; k < K; k++) ref += (double)wf[m * K + k] * x[j * K + k], mag += fabs(wf[m * K + k] * x[j * K + k]);
                    const double e = fabs(all[j * M + m] - ref) / (mag > 0 ? mag : 1);
                    if (e > worst) worst = e;
                }
            }
            RG_CHECK(worst < 8e-3, "%s prompt N=%lld: relative error %.3g", rg_type_get(type)->name, (long long)N, worst);
            if (want_dots)
                RG_CHECK(differ == 0, "%s prompt N=%lld (the dot products): %d of %lld columns differ from the column "
                         "alone", rg_type_get(type)->name, (long long)N, differ, (long long)N);
            dots += want_dots, others += !want_dots;
            free(x), free(all), free(one);
        }
        free(wn.t.data), free(wf);
    }
    rg_threadpool_free(pool2);
    printf("    %d prompts on the dot products (each column its own bits), %d on another path\n", dots, others);
}

// OUT_PROD: a [M, K, 2, 1] of each type, b [N, K, 4, 1] contiguous or a
// transposed view (b[j, k] at j * K + k... stored as [K, N]^T), out [M, N, 4, 1].
static void check_out_prod(uint32_t type, bool b_transposed, int64_t K, rg_threadpool *pool2, rg_threadpool *pool3) {
    const char *tname = rg_type_get(type)->name;
    int64_t bs = rg_type_get(type)->block_size;
    int64_t M = bs >= 256 ? 256 : (bs > 1 ? 96 : 37), N = 29, b2 = 2, c2 = 4;
    void *aq;
    float *af;
    make_weights(type, M, K * b2, 41 + type, &aq, &af);  // rows of M elements: a[i, k] = af[k * M + i]
    float *bbuf = randn(N * K * c2, 43 + (uint64_t)K);
    rg_node an, bn, y1, y3;
    memset(&an, 0, sizeof an), memset(&bn, 0, sizeof bn);
    an.t = tensor(type, M, K, b2, 1, aq);
    bn.t = tensor(RG_TYPE_F32, N, K, c2, 1, bbuf);
    if (b_transposed) {
        // The transpose of a contiguous dY [K, N]: b[j, k] = dY[k, j] at (k + j * K) floats.
        bn.t.nb[0] = sizeof(float) * (size_t)K, bn.t.nb[1] = sizeof(float);
    }
    float *out1 = malloc(sizeof(float) * (size_t)(M * N * c2)), *out3 = malloc(sizeof(float) * (size_t)(M * N * c2));
    memset(&y1, 0, sizeof y1), memset(&y3, 0, sizeof y3);
    y1.op = y3.op = RG_OP_OUT_PROD;
    y1.src[0] = y3.src[0] = &an, y1.src[1] = y3.src[1] = &bn;
    y1.t = tensor(RG_TYPE_F32, M, N, c2, 1, out1);
    y3.t = tensor(RG_TYPE_F32, M, N, c2, 1, out3);
    rg_error err = {0};
    RG_REQUIRE(run_node(&y1, NULL, true, &err) == RG_OK, "%s: %s", tname, err.msg);
    RG_REQUIRE(run_node(&y3, pool3, true, &err) == RG_OK, "%s: %s", tname, err.msg);
    RG_CHECK(memcmp(out1, out3, sizeof(float) * (size_t)(M * N * c2)) == 0,
             "out_prod %s K=%lld%s: 1 and 3 threads differ", tname, (long long)K, b_transposed ? " (b^T)" : "");
    RG_REQUIRE(run_node(&y3, pool2, true, &err) == RG_OK, "%s: %s", tname, err.msg);
    RG_CHECK(memcmp(out1, out3, sizeof(float) * (size_t)(M * N * c2)) == 0,
             "out_prod %s K=%lld%s: 1 and 2 threads differ", tname, (long long)K, b_transposed ? " (b^T)" : "");
    double worst = 0;
    for (int64_t i2 = 0; i2 < c2; i2++)
        for (int64_t j = 0; j < N; j++)
            for (int64_t i = 0; i < M; i++) {
                double ref = 0, mag = 0;
                for (int64_t k = 0; k < K; k++) {
                    double av = af[((i2 / (c2 / b2)) * K + k) * M + i];
                    double bv =
                        *(const float *)((const char *)bbuf + j * bn.t.nb[0] + k * bn.t.nb[1] + i2 * bn.t.nb[2]);
                    ref += av * bv, mag += fabs(av * bv);
                }
                double e = fabs(out1[i + j * M + i2 * M * N] - ref) / (mag > 0 ? mag : 1);
                if (!(e <= worst)) worst = e;
            }
    RG_CHECK(worst <= sgemm_tol(K), "out_prod %s K=%lld%s: relative error %.3g over %.3g", tname, (long long)K,
             b_transposed ? " (b^T)" : "", worst, sgemm_tol(K));
    free(aq), free(af), free(bbuf), free(out1), free(out3);
}

static void test_out_prod_every_type(void) {
    rg_threadpool *pool2 = pool_of(2), *pool3 = pool_of(3);
    for (size_t t = 0; t < sizeof wtypes / sizeof wtypes[0]; t++)
        for (int tr = 0; tr < 2; tr++) {
            check_out_prod(wtypes[t].type, tr, 1, pool2, pool3);
            check_out_prod(wtypes[t].type, tr, 45, pool2, pool3);
            check_out_prod(wtypes[t].type, tr, 300, pool2, pool3);
        }
    rg_threadpool_free(pool2);
    rg_threadpool_free(pool3);
}

// A MUL_MAT large enough to cross every block edge (several A blocks of 144
// rows, B blocks of 2048 columns): 1 and 3 threads still agree bit for bit.
static void test_mul_mat_large_threads_agree(void) {
    rg_threadpool *pool3 = pool_of(3);
    static const uint32_t types[] = {RG_TYPE_F32, RG_TYPE_Q4_K};
    for (size_t t = 0; t < 2; t++) {
        int64_t K = 512, M = 600, N = 530;
        void *wq;
        float *wf;
        make_weights(types[t], K, M, 51, &wq, &wf);
        float *x = randn(K * N, 52), *o1 = malloc(sizeof(float) * (size_t)(M * N)),
              *o3 = malloc(sizeof(float) * (size_t)(M * N));
        rg_node wn, xn, y1, y3;
        memset(&wn, 0, sizeof wn), memset(&xn, 0, sizeof xn), memset(&y1, 0, sizeof y1), memset(&y3, 0, sizeof y3);
        wn.t = tensor(types[t], K, M, 1, 1, wq);
        xn.t = tensor(RG_TYPE_F32, K, N, 1, 1, x);
        y1.src[0] = y3.src[0] = &wn, y1.src[1] = y3.src[1] = &xn;
        y1.t = tensor(RG_TYPE_F32, M, N, 1, 1, o1);
        y3.t = tensor(RG_TYPE_F32, M, N, 1, 1, o3);
        rg_error err = {0};
        RG_REQUIRE(run_node(&y1, NULL, false, &err) == RG_OK, "%s", err.msg);
        RG_REQUIRE(run_node(&y3, pool3, false, &err) == RG_OK, "%s", err.msg);
        RG_CHECK(memcmp(o1, o3, sizeof(float) * (size_t)(M * N)) == 0, "%s: 1 and 3 threads differ",
                 rg_type_get(types[t])->name);
        double worst = 0;
        for (int64_t n = 0; n < N; n += 7)
            for (int64_t m = 0; m < M; m += 5) {
                double ref = 0, mag = 0;
                for (int64_t k = 0; k < K; k++)
                    ref += (double)wf[m * K + k] * x[n * K + k], mag += fabs((double)wf[m * K + k] * x[n * K + k]);
                double e = fabs(o1[m + n * M] - ref) / mag;
                if (!(e <= worst)) worst = e;
            }
        RG_CHECK(worst <= sgemm_tol(K), "%s: relative error %.3g", rg_type_get(types[t])->name, worst);
        free(wq), free(wf), free(x), free(o1), free(o3);
    }
    rg_threadpool_free(pool3);
}

static void test_bad_inputs_are_refused(void) {
    float buf[64] = {0};
    rg_node wn, xn, y;
    memset(&wn, 0, sizeof wn), memset(&xn, 0, sizeof xn), memset(&y, 0, sizeof y);
    wn.t = tensor(RG_TYPE_F32, 4, 2, 3, 1, buf);
    xn.t = tensor(RG_TYPE_F32, 4, 2, 4, 1, buf);  // 4 slices are not a multiple of 3
    y.src[0] = &wn, y.src[1] = &xn;
    y.t = tensor(RG_TYPE_F32, 2, 2, 4, 1, buf);
    snprintf(y.t.name, sizeof y.t.name, "ffn_up-3");
    rg_error err = {0};
    RG_CHECK(run_node(&y, NULL, false, &err) == RG_ERR_ARG && strstr(err.msg, "ffn_up-3") && strstr(err.msg, "slices"),
             "%s", err.msg);
    wn.t = tensor(RG_TYPE_I32, 4, 2, 1, 1, buf);
    xn.t = tensor(RG_TYPE_F32, 4, 2, 1, 1, buf);
    y.t = tensor(RG_TYPE_F32, 2, 2, 1, 1, buf);
    RG_CHECK(run_node(&y, NULL, false, &err) == RG_ERR_UNSUPPORTED && strstr(err.msg, "i32"), "%s", err.msg);
    RG_CHECK(run_node(&y, NULL, true, &err) != RG_OK, "out_prod accepted an i32 src0");
    // Too little scratch: an error naming the sizes, not an overrun.
    wn.t = tensor(RG_TYPE_F32, 4, 2, 1, 1, buf);
    xn.t = tensor(RG_TYPE_F32, 4, 9, 1, 1, buf);
    y.t = tensor(RG_TYPE_F32, 2, 9, 1, 1, buf + 40);
    rg_exec_ctx ctx = {NULL, buf, 4, false, NULL, NULL, false, NULL};
    RG_CHECK(cpu_mul_mat(&ctx, &y, &err) == RG_ERR_ARG && strstr(err.msg, "work buffer"), "%s", err.msg);
}

static const rg_test_case cases[] = {
    RG_TEST(test_sgemm_rows_4k_apart),
    RG_TEST(test_sgemm_edges),
    RG_TEST(test_sgemm_general_strides),
    RG_TEST(test_sgemm_shapes),
    RG_TEST(test_gemm_quantized_b),
    RG_TEST(test_mul_mat_every_type),
    RG_TEST(test_mul_mat_columns_every_type),
    RG_TEST(test_mul_mat_prompt_dots),
    RG_TEST(test_out_prod_every_type),
    RG_TEST(test_mul_mat_large_threads_agree),
    RG_TEST(test_bad_inputs_are_refused),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
