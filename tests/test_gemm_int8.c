// test_gemm_int8.c - the integer GEMM of inference prompts (cpu/gemm_int8.h), Q4_0 and Q4_K
// weights times Q8_0 activations: the AVX-512 VNNI panel kernel against the portable reference
// bit for bit, the threaded driver the same on 1 and 2 threads, both against the exact sum of
// the dequantized operands in double, and MUL_MAT with int8 activations allowed against the
// F32 SGEMM and (Q4_0) against generation's dot products, which quantize the activations the
// same way. Also the BF16 GEMM (cpu/gemm_bf16.h): kernel and packing against the portable
// reference bit for bit, threads, and MUL_MAT against the SGEMM.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "base/threadpool.h"
#include "cpu/cpu_ops.h"
#include "cpu/gemm_bf16.h"
#include "cpu/gemm_int8.h"
#include "tensor/half.h"
#include "graph/graph.h"
#include "rg_test.h"
#include "tensor/quant/quant.h"

typedef struct shape {
    uint32_t type;
    int64_t K, M, N;
} shape;

// K: one block, SmolLM2's 576 and 1536, longer rows; M and N around the panel of 8 rows and the 4
// columns the kernel takes at a time.
static const shape shapes[] = {
    {RG_TYPE_Q4_0, 32, 1, 1},   {RG_TYPE_Q4_0, 64, 7, 3},    {RG_TYPE_Q4_0, 96, 8, 4},    {RG_TYPE_Q4_0, 576, 13, 5},
    {RG_TYPE_Q4_0, 576, 64, 9}, {RG_TYPE_Q4_0, 1536, 24, 17}, {RG_TYPE_Q4_0, 2080, 9, 8}, {RG_TYPE_Q4_0, 128, 40, 33},
    {RG_TYPE_Q4_K, 256, 1, 1},  {RG_TYPE_Q4_K, 256, 7, 3},   {RG_TYPE_Q4_K, 512, 8, 4},   {RG_TYPE_Q4_K, 1536, 13, 5},
    {RG_TYPE_Q4_K, 768, 24, 17}, {RG_TYPE_Q4_K, 2304, 9, 6},
    {RG_TYPE_Q5_0, 32, 1, 1},   {RG_TYPE_Q5_0, 96, 7, 5},    {RG_TYPE_Q5_0, 576, 16, 9},  {RG_TYPE_Q5_0, 1536, 13, 4},
    {RG_TYPE_Q8_0, 32, 3, 2},   {RG_TYPE_Q8_0, 576, 9, 7},   {RG_TYPE_Q8_0, 1536, 24, 12},
    {RG_TYPE_Q6_K, 256, 1, 1},  {RG_TYPE_Q6_K, 512, 7, 3},   {RG_TYPE_Q6_K, 768, 24, 17}, {RG_TYPE_Q6_K, 4608, 17, 5},
};

static float *randn(int64_t n, uint64_t seed, float scale) {
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = scale * rg_rng_normal(seed, 7, (uint64_t)i);
    return x;
}

static void *quant_rows(uint32_t type, const float *src, int64_t K, int64_t M) {
    size_t row = rg_type_row_size(type, K);
    char *q = malloc(row * (size_t)M);
    for (int64_t m = 0; m < M; m++) rg_quant_get(type)->quantize(src + m * K, q + (size_t)m * row, K, NULL);
    return q;
}

// The exact value of the header's sum: dequantized weights times dequantized Q8_0 activations, in double.
static double exact(uint32_t type, const void *wq, const float *x, int64_t K, int64_t m, int64_t n, double *abs_sum) {
    size_t row = rg_type_row_size(type, K), xrow = rg_type_row_size(RG_TYPE_Q8_0, K);
    float *wd = malloc(sizeof(float) * (size_t)K), *xd = malloc(sizeof(float) * (size_t)K);
    char *xq = malloc(xrow);
    rg_quant_get(type)->dequant((const char *)wq + (size_t)m * row, wd, K);
    rg_quant_get(RG_TYPE_Q8_0)->quantize(x + n * K, xq, K, NULL);
    rg_quant_get(RG_TYPE_Q8_0)->dequant(xq, xd, K);
    double s = 0, a = 0;
    for (int64_t k = 0; k < K; k++) s += (double)wd[k] * xd[k], a += fabs((double)wd[k] * xd[k]);
    free(wd), free(xd), free(xq);
    *abs_sum = a;
    return s;
}

#define NEED_VNNI() \
    if (!rg_gemm_int8_supports(RG_TYPE_Q4_0, 32)) RG_SKIP("no AVX-512 VNNI on this CPU: the int8 path is not used here")

static void test_panel_kernel_matches_reference(void) {
    NEED_VNNI();
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const shape s = shapes[c];
        float *wf = randn(s.K * s.M, 11 + c, 0.05f), *x = randn(s.K * s.N, 21 + c, 1.0f);
        void *wq = quant_rows(s.type, wf, s.K, s.M);
        rg_q8_cols cols;
        rg_int8_panel p, pv;
        RG_REQUIRE(rg_q8_cols_alloc(&cols, s.K, s.N) && rg_int8_panel_alloc(&p, s.type, s.K) &&
                       rg_int8_panel_alloc(&pv, s.type, s.K), "oom");
        rg_q8_cols_quantize(&cols, x, s.K);
        float *ya = malloc(sizeof(float) * (size_t)(s.M * s.N)), *yr = malloc(sizeof(float) * (size_t)(s.M * s.N));
        int64_t diff = 0;
        for (int64_t m0 = 0; m0 < s.M; m0 += RG_INT8_PANEL) {
            int rows = s.M - m0 < RG_INT8_PANEL ? (int)(s.M - m0) : RG_INT8_PANEL;
            rg_int8_panel_pack(&p, wq, rg_type_row_size(s.type, s.K), m0, s.M);
            rg_int8_panel_pack_avx512(&pv, wq, rg_type_row_size(s.type, s.K), m0, s.M);
            RG_CHECK(!memcmp(p.scale, pv.scale, sizeof(float) * (size_t)(p.n_sub * RG_INT8_PANEL)) &&
                         !memcmp(p.min, pv.min, sizeof(float) * (size_t)(p.n_sub * RG_INT8_PANEL)) &&
                         !memcmp(p.sc16, pv.sc16, sizeof(int32_t) * (size_t)(2 * p.n_sub * RG_INT8_PANEL)) &&
                         !memcmp(p.codes, pv.codes, (size_t)p.n_sub * 4 * RG_INT8_PANEL *
                                                        (s.type == RG_TYPE_Q4_0 ? 4 : 8) / (s.type == RG_TYPE_Q4_K ? 2 : 1)),
                     "%s K %lld: the vectorized packing differs at panel %lld", rg_type_get(s.type)->name, (long long)s.K,
                     (long long)(m0 / RG_INT8_PANEL));
            rg_int8_panel_mul_avx512(&pv, &cols, rows, ya + m0, s.M);
            rg_int8_panel_mul_ref(&p, &cols, rows, yr + m0, s.M);
        }
        for (int64_t i = 0; i < s.M * s.N; i++) diff += memcmp(&ya[i], &yr[i], sizeof(float)) != 0;
        RG_CHECK(diff == 0, "%s K %lld M %lld N %lld: %lld of %lld outputs differ from the reference",
                 rg_type_get(s.type)->name, (long long)s.K, (long long)s.M, (long long)s.N, (long long)diff,
                 (long long)(s.M * s.N));
        free(wf), free(x), free(wq), free(cols.q), free(p.codes), free(pv.codes), free(ya), free(yr);
    }
}

// The threaded driver: the same bits on 1 and 2 threads, within float rounding of the exact sum.
static void test_driver_exact_and_thread_independent(void) {
    NEED_VNNI();
    rg_threadpool *p1 = NULL, *p2 = NULL;
    rg_error err = {0};
    RG_REQUIRE(!rg_threadpool_create(&p1, 1, &err) && !rg_threadpool_create(&p2, 2, &err), "%s", err.msg);
    double worst[2] = {0, 0};  // the 32-value types, Q4_K
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const shape s = shapes[c];
        float *wf = randn(s.K * s.M, 31 + c, 0.05f), *x = randn(s.K * s.N, 41 + c, 1.0f);
        void *wq = quant_rows(s.type, wf, s.K, s.M);
        size_t ws = rg_gemm_int8_work(s.K, s.N, 2);
        void *work = aligned_alloc(64, (ws + 63) / 64 * 64);
        float *y1 = malloc(sizeof(float) * (size_t)(s.M * s.N)), *y2 = malloc(sizeof(float) * (size_t)(s.M * s.N));
        size_t row = rg_type_row_size(s.type, s.K);
        rg_gemm_int8(p1, s.type, s.K, s.M, s.N, wq, row, x, s.K, y1, s.M, work);
        rg_gemm_int8(p2, s.type, s.K, s.M, s.N, wq, row, x, s.K, y2, s.M, work);
        RG_CHECK(!memcmp(y1, y2, sizeof(float) * (size_t)(s.M * s.N)), "%s K %lld M %lld N %lld: 1 and 2 threads differ",
                 rg_type_get(s.type)->name, (long long)s.K, (long long)s.M, (long long)s.N);
        double *wt = &worst[s.type == RG_TYPE_Q4_K];
        for (int64_t n = 0; n < s.N; n++)
            for (int64_t m = 0; m < s.M; m++) {
                double a, e = exact(s.type, wq, x, s.K, m, n, &a);
                double rel = fabs(y1[n * s.M + m] - e) / (a > 0 ? a : 1);
                if (rel > *wt) *wt = rel;
            }
        free(wf), free(x), free(wq), free(work), free(y1), free(y2);
    }
    printf("    against the exact sum of the dequantized operands: worst q4_0/q5_0/q8_0 %.2e, q4_K %.2e of sum |w x| "
           "(pass <= 1e-6)\n",
           worst[0], worst[1]);
    RG_CHECK(worst[0] <= 1e-6 && worst[1] <= 1e-6, "worst %.3g, %.3g", worst[0], worst[1]);
    rg_threadpool_free(p1);
    rg_threadpool_free(p2);
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

static void run_mul_mat(rg_node *y, rg_threadpool *pool, bool int8) {
    size_t ws = cpu_mul_mat_work(y, rg_threadpool_size(pool));
    rg_exec_ctx ctx = {pool, ws ? aligned_alloc(64, (ws + 63) / 64 * 64) : NULL, ws, int8, NULL, NULL, false, NULL};
    rg_error err = {0};
    rg_status st = cpu_mul_mat(&ctx, y, &err);
    RG_CHECK(st == RG_OK, "%s", err.msg);
    free(ctx.scratch);
}

// MUL_MAT [K, 96] x [K, 32]: int8 allowed against F32 activations (the SGEMM: the quantization
// error of the activations, about 1% of |w||x|), and against one column at a time through the dot
// products (N = 1: Q8_0 activations too, so within float rounding).
static void check_mul_mat_paths(uint32_t type, int64_t K) {
    const int64_t M = 96, N = 32;
    rg_threadpool *pool = NULL;
    rg_error err = {0};
    RG_REQUIRE(!rg_threadpool_create(&pool, 2, &err), "%s", err.msg);
    float *wf = randn(K * M, 51, 0.05f), *x = randn(K * N, 61, 1.0f);
    void *wq = quant_rows(type, wf, K, M);
    float *yi = calloc((size_t)(M * N), sizeof(float)), *yf = calloc((size_t)(M * N), sizeof(float)),
          *yv = calloc((size_t)M, sizeof(float));
    rg_node wn, xn, y;
    memset(&wn, 0, sizeof wn), memset(&xn, 0, sizeof xn), memset(&y, 0, sizeof y);
    wn.t = tensor2(type, K, M, wq);
    xn.t = tensor2(RG_TYPE_F32, K, N, x);
    y.op = RG_OP_MUL_MAT, y.src[0] = &wn, y.src[1] = &xn;
    y.t = tensor2(RG_TYPE_F32, M, N, yi);
    run_mul_mat(&y, pool, true);
    y.t.data = yf;
    run_mul_mat(&y, pool, false);
    double worst_f = 0, worst_v = 0, norm = 0;
    for (int64_t i = 0; i < M * N; i++) norm = fmax(norm, fabs(yf[i]));
    for (int64_t i = 0; i < M * N; i++) worst_f = fmax(worst_f, fabs(yi[i] - yf[i]) / norm);
    rg_node x1 = xn, y1 = y;
    for (int64_t n = 0; n < N; n++) {
        x1.t = tensor2(RG_TYPE_F32, K, 1, x + n * K);
        y1.src[1] = &x1, y1.t = tensor2(RG_TYPE_F32, M, 1, yv);
        run_mul_mat(&y1, pool, true);
        for (int64_t m = 0; m < M; m++) worst_v = fmax(worst_v, fabs(yi[n * M + m] - yv[m]) / norm);
    }
    // Q4_K's and Q6_K's dot products quantize the activations to Q8_K (256 values per scale), BF16's
    // keep them F32: not the same rounding
    const bool same_codes = type != RG_TYPE_Q4_K && type != RG_TYPE_Q6_K && type != RG_TYPE_BF16;
    const bool used = type == RG_TYPE_BF16 ? rg_gemm_bf16_supports(K) : rg_gemm_int8_supports(type, K);
    const double vec_tol = same_codes ? 1e-5 : 2e-2;
    printf("    %s: int8 path %s; against the F32 SGEMM %.2e, against the dot products %.2e of max|y| (pass <= 2e-2, "
           "<= %.0e)\n", rg_type_get(type)->name, used ? "used" : "not available (both are the SGEMM)", worst_f, worst_v,
           vec_tol);
    RG_CHECK(worst_f <= 2e-2, "against the SGEMM: %.3g", worst_f);
    if (used) {
        RG_CHECK(worst_f > 0, "int8 activations allowed but the output equals the SGEMM's: the path did not run");
        RG_CHECK(worst_v <= vec_tol, "against the dot products: %.3g", worst_v);
    }
    free(wf), free(x), free(wq), free(yi), free(yf), free(yv);
    rg_threadpool_free(pool);
}

// BF16 weights: the kernel and the vectorized packing against the reference, bit for bit; the driver on 1
// and 2 threads; the result against the double sum of the rounded operands.
static void test_bf16_kernel_matches_reference(void) {
    if (!rg_gemm_bf16_supports(16)) RG_SKIP("no AVX512_BF16 on this CPU: the BF16 path is not used here");
    static const shape bs[] = {{RG_TYPE_BF16, 16, 1, 1},  {RG_TYPE_BF16, 32, 7, 3},    {RG_TYPE_BF16, 576, 13, 9},
                               {RG_TYPE_BF16, 1536, 24, 17}, {RG_TYPE_BF16, 96, 40, 8}, {RG_TYPE_BF16, 64, 33, 30}};
    rg_threadpool *p1 = NULL, *p2 = NULL;
    rg_error err = {0};
    RG_REQUIRE(!rg_threadpool_create(&p1, 1, &err) && !rg_threadpool_create(&p2, 2, &err), "%s", err.msg);
    double worst = 0;
    for (size_t c = 0; c < sizeof bs / sizeof bs[0]; c++) {
        const shape s = bs[c];
        float *wf = randn(s.K * s.M, 71 + c, 0.05f), *x = randn(s.K * s.N, 81 + c, 1.0f);
        x[0] = 1e-39f;  // a denormal activation: flushed by the instruction, and by the reference
        uint16_t *wb = malloc(sizeof(uint16_t) * (size_t)(s.K * s.M)), *xb = malloc(sizeof(uint16_t) * (size_t)(s.K * s.N));
        rg_fp32_to_bf16_row(wf, wb, s.K * s.M);
        rg_bf16_round_cols(x, s.K, s.K, 0, s.N, xb);
        const int PN = RG_BF16_PANEL;
        uint32_t *pa = malloc((size_t)s.K / 2 * PN * 4), *pb = malloc((size_t)s.K / 2 * PN * 4);
        float *ya = malloc(sizeof(float) * (size_t)(s.M * s.N)), *yr = malloc(sizeof(float) * (size_t)(s.M * s.N)),
              *y2 = malloc(sizeof(float) * (size_t)(s.M * s.N));
        int64_t diff = 0;
        for (int64_t m0 = 0; m0 < s.M; m0 += PN) {
            int rows = s.M - m0 < PN ? (int)(s.M - m0) : PN;
            rg_bf16_panel_pack(pa, wb, (size_t)s.K * 2, s.K, m0, s.M);
            rg_bf16_panel_pack_avx512(pb, wb, (size_t)s.K * 2, s.K, m0, s.M);
            RG_CHECK(!memcmp(pa, pb, (size_t)s.K / 2 * PN * 4), "K %lld: the vectorized packing differs at panel %lld",
                     (long long)s.K, (long long)(m0 / PN));
            rg_bf16_panel_mul_avx512(pb, s.K, xb, s.N, rows, ya + m0, s.M);
            rg_bf16_panel_mul_ref(pa, s.K, xb, s.N, rows, yr + m0, s.M);
        }
        for (int64_t i = 0; i < s.M * s.N; i++) diff += memcmp(&ya[i], &yr[i], sizeof(float)) != 0;
        RG_CHECK(diff == 0, "bf16 K %lld M %lld N %lld: %lld of %lld outputs differ from the reference", (long long)s.K,
                 (long long)s.M, (long long)s.N, (long long)diff, (long long)(s.M * s.N));
        size_t ws = rg_gemm_bf16_work(s.K, s.N, 2);
        void *work = aligned_alloc(64, (ws + 63) / 64 * 64);
        rg_gemm_bf16(p1, s.K, s.M, s.N, wb, (size_t)s.K * 2, x, s.K, ya, s.M, work);
        rg_gemm_bf16(p2, s.K, s.M, s.N, wb, (size_t)s.K * 2, x, s.K, y2, s.M, work);
        RG_CHECK(!memcmp(ya, y2, sizeof(float) * (size_t)(s.M * s.N)) && !memcmp(ya, yr, sizeof(float) * (size_t)(s.M * s.N)),
                 "bf16 K %lld: the driver on 1 and 2 threads differs from the panels", (long long)s.K);
        for (int64_t n = 0; n < s.N; n++)
            for (int64_t m = 0; m < s.M; m++) {
                double e = 0, a = 0;
                for (int64_t k = 0; k < s.K; k++) {
                    float xv = rg_bf16_to_fp32(xb[n * s.K + k]);
                    if (fabsf(xv) < 1.17549435e-38f) xv = 0;
                    double t = (double)rg_bf16_to_fp32(wb[m * s.K + k]) * xv;
                    e += t, a += fabs(t);
                }
                worst = fmax(worst, fabs(ya[n * s.M + m] - e) / (a > 0 ? a : 1));
            }
        free(wf), free(x), free(wb), free(xb), free(pa), free(pb), free(ya), free(yr), free(y2), free(work);
    }
    printf("    bf16: against the double sum of the rounded operands: worst %.2e of sum |w x| (pass <= 1e-5)\n", worst);
    RG_CHECK(worst <= 1e-5, "worst %.3g", worst);
    rg_threadpool_free(p1);
    rg_threadpool_free(p2);
}

static void test_mul_mat_paths_q4_0(void) { check_mul_mat_paths(RG_TYPE_Q4_0, 576); }
static void test_mul_mat_paths_q4_K(void) { check_mul_mat_paths(RG_TYPE_Q4_K, 768); }
static void test_mul_mat_paths_q5_0(void) { check_mul_mat_paths(RG_TYPE_Q5_0, 576); }
static void test_mul_mat_paths_q8_0(void) { check_mul_mat_paths(RG_TYPE_Q8_0, 576); }
static void test_mul_mat_paths_q6_K(void) { check_mul_mat_paths(RG_TYPE_Q6_K, 768); }
static void test_mul_mat_paths_bf16(void) { check_mul_mat_paths(RG_TYPE_BF16, 576); }

static const rg_test_case cases[] = {
    RG_TEST(test_panel_kernel_matches_reference),
    RG_TEST(test_driver_exact_and_thread_independent),
    RG_TEST(test_mul_mat_paths_q4_0), RG_TEST(test_mul_mat_paths_q6_K),
    RG_TEST(test_mul_mat_paths_q4_K),
    RG_TEST(test_mul_mat_paths_q5_0),
    RG_TEST(test_mul_mat_paths_q8_0),
    RG_TEST(test_bf16_kernel_matches_reference),
    RG_TEST(test_mul_mat_paths_bf16),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
