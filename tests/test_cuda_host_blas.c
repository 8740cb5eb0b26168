// test_cuda_host_blas.c - the cuBLAS stand-in of the host execution
// (src/cuda_host/blas_gemm.cpp) against cuBLAS's documented definition, written
// out here in double:
//
//     C[b] = alpha op(A[b]) op(B[b]) + beta C[b]    (column-major, element (i, j) at i + j ld)
//
// with op(X) = X (CUBLAS_OP_N) or X^T (CUBLAS_OP_T and, for real types,
// CUBLAS_OP_C); C is not read when beta is 0 (it holds NaN in those cases), A and
// B are not read when alpha is 0 (A holds NaN then). Every entry point
// (cublasSgemm, cublasSgemmStridedBatched, cublasGemmEx,
// cublasGemmStridedBatchedEx), every op pair, every type combination cuBLAS
// offers with the 32-bit compute types, odd sizes, padded leading dimensions
// and batch strides with gaps. Tolerance: the float accumulation's bound
// (k + 2) 2^-23 sum|alpha a b| + |beta c|, plus the input rounding the FAST
// compute types allow and the rounding into a 16-bit C. Then the argument
// checks cuBLAS makes (INVALID_VALUE, NOT_SUPPORTED, NOT_INITIALIZED) and that
// the product is stream work: not in C before the stream is synchronized.
//
// cublasLtMatmul runs the same table (C updated in place), and its epilogues
// (bias, ReLU) and layout checks have their own case.
//
// The reference shares nothing with the library's CPU GEMM (src/cpu/gemm*.c).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_host_checks.h"
#include "rg_test.h"

#ifdef RG_HAVE_CUDA_HOST

#include "cuda_host/rename.h"  // the runtime's names, before the toolkit's headers
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "base/rng.h"
#include "tensor/half.h"

// ---------------------------------------------------------------------------
// Host-side values in each storage type

static size_t type_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

static const char *type_name(cudaDataType t) {
    return t == CUDA_R_32F ? "32F" : t == CUDA_R_16F ? "16F" : t == CUDA_R_16BF ? "16BF" : "?";
}

static void put(cudaDataType t, void *base, long long i, float v) {
    if (t == CUDA_R_32F) ((float *)base)[i] = v;
    else ((uint16_t *)base)[i] = t == CUDA_R_16F ? rg_fp32_to_fp16(v) : rg_fp32_to_bf16(v);
}

static double get(cudaDataType t, const void *base, long long i) {
    if (t == CUDA_R_32F) return ((const float *)base)[i];
    const uint16_t h = ((const uint16_t *)base)[i];
    return t == CUDA_R_16F ? rg_fp16_to_fp32(h) : rg_bf16_to_fp32(h);
}

// ---------------------------------------------------------------------------
// The cases

typedef enum { API_SGEMM, API_SGEMM_BATCHED, API_GEMM_EX, API_GEMM_BATCHED_EX, API_LT_MATMUL } api_kind;
static const char *const api_names[] = {"cublasSgemm", "cublasSgemmStridedBatched", "cublasGemmEx",
                                        "cublasGemmStridedBatchedEx", "cublasLtMatmul"};
static cublasLtHandle_t lt_handle;

typedef struct combo {
    cudaDataType ab, c;
    cublasComputeType_t compute;
    const char *compute_name;
    double in_round;  // relative error the compute type may add to each product (input rounding)
} combo;

static const combo combos[] = {
    {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, "32F", 0},
    {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_PEDANTIC, "32F_PEDANTIC", 0},
    {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_16F, "32F_FAST_16F", 0x1p-10},
    {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_16BF, "32F_FAST_16BF", 0x1p-7},
    {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, "32F_FAST_TF32", 0x1p-10},
    {CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F, "32F", 0},
    {CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, "32F", 0},
    {CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F_PEDANTIC, "32F_PEDANTIC", 0},
    {CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F, "32F", 0},
    {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, "32F", 0},
    {CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F_PEDANTIC, "32F_PEDANTIC", 0},
};

typedef struct shape {
    int m, n, k;
    int pad_a, pad_b, pad_c;  // leading dimension beyond the stored rows
    int batch, gap;           // batches, and elements between two batches' matrices
} shape;

static const shape shapes[] = {
    {5, 7, 3, 0, 0, 0, 1, 0},  {5, 7, 3, 3, 2, 1, 1, 0}, {33, 1, 70, 1, 0, 4, 1, 0},
    {1, 9, 1, 0, 0, 0, 1, 0},  {6, 4, 5, 2, 3, 1, 3, 11}, {17, 3, 8, 0, 1, 0, 2, 0},
};

static const cublasOperation_t op_pairs[][2] = {
    {CUBLAS_OP_N, CUBLAS_OP_N}, {CUBLAS_OP_N, CUBLAS_OP_T}, {CUBLAS_OP_T, CUBLAS_OP_N},
    {CUBLAS_OP_T, CUBLAS_OP_T}, {CUBLAS_OP_C, CUBLAS_OP_N},
};

static const float scalars[][2] = {{1.0f, 0.0f}, {1.5f, -0.5f}, {0.0f, 2.0f}};

static const char *op_name(cublasOperation_t op) { return op == CUBLAS_OP_N ? "N" : op == CUBLAS_OP_T ? "T" : "C"; }

// One operand on the host and on the device: `rows` x `cols` stored with ld, `batch` of them `stride` apart.
typedef struct operand {
    cudaDataType t;
    int rows, cols, ld, batch;
    long long stride, count;  // elements
    void *host, *dev;
} operand;

static int operand_init(operand *o, cudaDataType t, int rows, int cols, int pad, int batch, int gap,
                        uint64_t stream, float fill_nan) {
    o->t = t, o->rows = rows, o->cols = cols, o->batch = batch;
    o->ld = (rows > 1 ? rows : 1) + pad;
    o->stride = (long long)o->ld * cols + gap;
    o->count = (long long)(batch - 1) * o->stride + (long long)o->ld * cols;
    o->host = malloc((size_t)o->count * type_size(t) + 1);
    o->dev = NULL;
    for (long long i = 0; i < o->count; i++) {
        const float v = rg_rng_normal(3, stream, (uint64_t)i);
        put(t, o->host, i, fill_nan ? NAN : v);
    }
    if (cudaMalloc(&o->dev, (size_t)o->count * type_size(t)) != cudaSuccess) return 0;
    return cudaMemcpy(o->dev, o->host, (size_t)o->count * type_size(t), cudaMemcpyHostToDevice) == cudaSuccess;
}

static void operand_free(operand *o) {
    cudaFree(o->dev);
    free(o->host);
}

// op(X)(i, j) of batch b.
static double op_at(const operand *o, cublasOperation_t op, int b, int i, int j) {
    const long long base = (long long)b * o->stride;
    return op == CUBLAS_OP_N ? get(o->t, o->host, base + i + (long long)j * o->ld)
                             : get(o->t, o->host, base + j + (long long)i * o->ld);
}

// A cuBLASLt layout of an operand, with its batch count and stride.
static cublasLtMatrixLayout_t lt_layout(const operand *o) {
    cublasLtMatrixLayout_t l = NULL;
    const int32_t batch = o->batch;
    const int64_t stride = o->stride;
    if (cublasLtMatrixLayoutCreate(&l, o->t, (uint64_t)o->rows, (uint64_t)o->cols, o->ld) != CUBLAS_STATUS_SUCCESS)
        return NULL;
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch);
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
    return l;
}

// cublasLtMatmul with D = C, after asking the heuristic for its algorithm.
static cublasStatus_t lt_matmul(const cublasOperation_t ops[2], const combo *c, const float *alpha, const operand *A,
                                const operand *B, const float *beta, operand *C) {
    cublasLtMatmulDesc_t d = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasStatus_t st = cublasLtMatmulDescCreate(&d, c->compute, CUDA_R_32F);
    if (st) return st;
    const int32_t ta = ops[0], tb = ops[1];
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    cublasLtMatrixLayout_t la = lt_layout(A), lb = lt_layout(B), lc = lt_layout(C);
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    cublasLtMatmulPreferenceCreate(&pref);
    st = cublasLtMatmulAlgoGetHeuristic(lt_handle, d, la, lb, lc, lc, pref, 1, &heur, &found);
    if (!st && found != 1) st = CUBLAS_STATUS_NOT_SUPPORTED;
    if (!st)
        st = cublasLtMatmul(lt_handle, d, alpha, A->dev, la, B->dev, lb, beta, C->dev, lc, C->dev, lc, &heur.algo, NULL,
                            0, NULL);
    cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatmulDescDestroy(d);
    return st;
}

static cublasStatus_t call_api(api_kind api, cublasHandle_t h, const cublasOperation_t ops[2], const shape *s,
                               const combo *c, const float *alpha, const operand *A, const operand *B,
                               const float *beta, operand *C) {
    switch (api) {
    case API_LT_MATMUL: return lt_matmul(ops, c, alpha, A, B, beta, C);
    case API_SGEMM:
        return cublasSgemm(h, ops[0], ops[1], s->m, s->n, s->k, alpha, A->dev, A->ld, B->dev, B->ld, beta, C->dev,
                           C->ld);
    case API_SGEMM_BATCHED:
        return cublasSgemmStridedBatched(h, ops[0], ops[1], s->m, s->n, s->k, alpha, A->dev, A->ld, A->stride, B->dev,
                                         B->ld, B->stride, beta, C->dev, C->ld, C->stride, s->batch);
    case API_GEMM_EX:
        return cublasGemmEx(h, ops[0], ops[1], s->m, s->n, s->k, alpha, A->dev, c->ab, A->ld, B->dev, c->ab, B->ld,
                            beta, C->dev, c->c, C->ld, c->compute, CUBLAS_GEMM_DEFAULT);
    case API_GEMM_BATCHED_EX:
        return cublasGemmStridedBatchedEx(h, ops[0], ops[1], s->m, s->n, s->k, alpha, A->dev, c->ab, A->ld, A->stride,
                                          B->dev, c->ab, B->ld, B->stride, beta, C->dev, c->c, C->ld, C->stride,
                                          s->batch, c->compute, CUBLAS_GEMM_DEFAULT);
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}

// Runs one product and checks every element of C; returns the worst |got - ref| / tol (> 1 fails).
static double check_one(cublasHandle_t h, api_kind api, const combo *c, const shape *s, const cublasOperation_t ops[2],
                        const float sc[2], uint64_t seed, int *bad) {
    const int rows_a = ops[0] == CUBLAS_OP_N ? s->m : s->k, cols_a = ops[0] == CUBLAS_OP_N ? s->k : s->m;
    const int rows_b = ops[1] == CUBLAS_OP_N ? s->k : s->n, cols_b = ops[1] == CUBLAS_OP_N ? s->n : s->k;
    operand A, B, C;
    const int ok = operand_init(&A, c->ab, rows_a, cols_a, s->pad_a, s->batch, s->gap, seed, sc[0] == 0.0f) &&
                   operand_init(&B, c->ab, rows_b, cols_b, s->pad_b, s->batch, s->gap, seed + 1, 0) &&
                   operand_init(&C, c->c, s->m, s->n, s->pad_c, s->batch, s->gap, seed + 2, sc[1] == 0.0f);
    double worst = 0;
    *bad = 0;
    if (!ok) {
        *bad = -1;
        return INFINITY;
    }
    void *out = malloc((size_t)C.count * type_size(c->c));
    cublasStatus_t st = call_api(api, h, ops, s, c, &sc[0], &A, &B, &sc[1], &C);
    if (st != CUBLAS_STATUS_SUCCESS || cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(out, C.dev, (size_t)C.count * type_size(c->c), cudaMemcpyDeviceToHost) != cudaSuccess) {
        *bad = -1;
        worst = INFINITY;
    }
    const double out_round = c->c == CUDA_R_16F ? 0x1p-10 : c->c == CUDA_R_16BF ? 0x1p-7 : 0;
    for (int b = 0; *bad >= 0 && b < s->batch; b++)
        for (int j = 0; j < s->n; j++)
            for (int i = 0; i < s->m; i++) {
                const long long ci = (long long)b * C.stride + i + (long long)j * C.ld;
                double sum = 0, mag = 0;
                if (sc[0] != 0.0f)
                    for (int l = 0; l < s->k; l++) {
                        const double p = op_at(&A, ops[0], b, i, l) * op_at(&B, ops[1], b, l, j);
                        sum += p, mag += fabs(p);
                    }
                const double c_old = sc[1] != 0.0f ? get(c->c, C.host, ci) : 0;
                const double ref = sc[0] * sum + sc[1] * c_old;
                mag = fabs(sc[0]) * mag + fabs(sc[1] * c_old);
                const double tol = ((s->k + 2) * 0x1p-23 + c->in_round) * mag + out_round * fabs(ref) + 1e-30;
                const double d = fabs(get(c->c, out, ci) - ref);
                if (!(d <= tol)) (*bad)++;
                if (d / tol > worst || d != d) worst = d != d ? INFINITY : d / tol;
            }
    // Between the batches' matrices and past each C's rows nothing may change.
    for (long long i = 0; *bad >= 0 && i < C.count; i++) {
        const long long in_batch = i % C.stride, row = in_batch % C.ld;
        const int inside = in_batch < (long long)C.ld * s->n && row < s->m;
        if (!inside && memcmp((char *)out + i * (long long)type_size(c->c), (char *)C.host + i * (long long)type_size(c->c),
                              type_size(c->c)))
            (*bad)++;
    }
    free(out);
    operand_free(&A), operand_free(&B), operand_free(&C);
    return worst;
}

static void test_blas_gemm_definition(void) {
    cublasHandle_t h;
    RG_REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate failed");
    RG_REQUIRE(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH) == CUBLAS_STATUS_SUCCESS, "cublasSetMathMode failed");
    RG_REQUIRE(cublasLtCreate(&lt_handle) == CUBLAS_STATUS_SUCCESS, "cublasLtCreate failed");
    uint64_t seed = 100;
    for (int api = API_SGEMM; api <= API_LT_MATMUL; api++)
        for (size_t ci = 0; ci < sizeof combos / sizeof *combos; ci++) {
            const combo *c = &combos[ci];
            const int sgemm = api == API_SGEMM || api == API_SGEMM_BATCHED;
            const int batched = api == API_SGEMM_BATCHED || api == API_GEMM_BATCHED_EX || api == API_LT_MATMUL;
            if (sgemm && (c->ab != CUDA_R_32F || c->compute != CUBLAS_COMPUTE_32F)) continue;
            int runs = 0, failed = 0;
            double worst = 0;
            for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
                if (!batched && shapes[si].batch > 1) continue;
                for (size_t oi = 0; oi < sizeof op_pairs / sizeof *op_pairs; oi++)
                    for (size_t ki = 0; ki < sizeof scalars / sizeof *scalars; ki++) {
                        int bad;
                        const double w = check_one(h, (api_kind)api, c, &shapes[si], op_pairs[oi], scalars[ki], seed++, &bad);
                        runs++;
                        if (w > worst) worst = w;
                        if (bad) {
                            failed++;
                            const shape *s = &shapes[si];
                            RG_CHECK(bad == 0, "%s A/B %s C %s compute %s op %s%s m %d n %d k %d pads %d/%d/%d batch %d "
                                     "alpha %g beta %g: %d elements wrong (worst %.3g tol)",
                                     api_names[api], type_name(c->ab), type_name(c->c), c->compute_name,
                                     op_name(op_pairs[oi][0]), op_name(op_pairs[oi][1]), s->m, s->n, s->k, s->pad_a,
                                     s->pad_b, s->pad_c, s->batch, scalars[ki][0], scalars[ki][1], bad, w);
                        }
                    }
            }
            printf("    %-27s A/B %-4s C %-4s compute %-14s %3d products, worst %.3f of the tolerance  %s\n",
                   api_names[api], type_name(c->ab), type_name(c->c), c->compute_name, runs, worst,
                   failed ? "FAIL" : "ok");
        }
    RG_CHECK(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS, "cublasDestroy failed");
    RG_CHECK(cublasLtDestroy(lt_handle) == CUBLAS_STATUS_SUCCESS, "cublasLtDestroy failed");
}

// ---------------------------------------------------------------------------
// cuBLASLt: D apart from C, the epilogues, what it refuses

// D = epilogue(alpha A B + beta C + bias) for a 3 x 2 product of small integers (exact in every type).
static void test_blas_lt_epilogues(void) {
    cublasLtHandle_t lt;
    RG_REQUIRE(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS, "cublasLtCreate failed");
    enum { M = 3, N = 2, K = 2 };
    const float A[M * K] = {1, -2, 3, 4, 5, -6}, B[K * N] = {1, 2, -3, 1}, C[M * N] = {1, 1, 1, 2, 2, 2};
    const float bias[M] = {0.5f, -40, 10}, alpha = 1.0f, beta = 2.0f;
    float *d = NULL;
    RG_REQUIRE(cudaMalloc((void **)&d, 64 * 4) == cudaSuccess, "cudaMalloc failed");
    float *dA = d, *dB = d + 8, *dC = d + 16, *dD = d + 24, *dbias = d + 32;
    cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, B, sizeof B, cudaMemcpyHostToDevice);
    cudaMemcpy(dC, C, sizeof C, cudaMemcpyHostToDevice);
    cudaMemcpy(dbias, bias, sizeof bias, cudaMemcpyHostToDevice);
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, M, K, M);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, K, N, K);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, M, N, M);
    static const struct {
        const char *what;
        uint32_t epilogue;
    } cases[] = {{"DEFAULT", CUBLASLT_EPILOGUE_DEFAULT},
                 {"BIAS", CUBLASLT_EPILOGUE_BIAS},
                 {"RELU", CUBLASLT_EPILOGUE_RELU},
                 {"RELU_BIAS", CUBLASLT_EPILOGUE_RELU_BIAS}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        cublasLtMatmulDesc_t desc;
        cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &cases[c].epilogue, sizeof cases[c].epilogue);
        const void *bp = dbias;
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp);
        const cublasStatus_t st =
            cublasLtMatmul(lt, desc, &alpha, dA, la, dB, lb, &beta, dC, lc, dD, lc, NULL, NULL, 0, NULL);
        float got[M * N];
        cudaDeviceSynchronize();
        cudaMemcpy(got, dD, sizeof got, cudaMemcpyDeviceToHost);
        int bad = st != CUBLAS_STATUS_SUCCESS;
        for (int j = 0; j < N; j++)
            for (int i = 0; i < M; i++) {
                double ref = beta * C[i + j * M];
                for (int l = 0; l < K; l++) ref += alpha * A[i + l * M] * B[l + j * K];
                if (cases[c].epilogue & CUBLASLT_EPILOGUE_BIAS) ref += bias[i];
                if ((cases[c].epilogue & CUBLASLT_EPILOGUE_RELU) && ref < 0) ref = 0;
                bad += got[i + j * M] != (float)ref;
            }
        printf("    epilogue %-9s D = %g %g %g | %g %g %g  %s\n", cases[c].what, got[0], got[1], got[2], got[3], got[4],
               got[5], bad ? "FAIL" : "ok");
        RG_CHECK(bad == 0, "epilogue %s: %s, %d elements wrong", cases[c].what, cublasGetStatusName(st), bad);
        cublasLtMatmulDescDestroy(desc);
    }
    // What it refuses, and why.
    cublasLtMatmulDesc_t desc;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const int32_t trans = CUBLAS_OP_T;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof trans);
    cublasStatus_t st = cublasLtMatmul(lt, desc, &alpha, dA, la, dB, lb, &beta, dC, lc, dD, lc, NULL, NULL, 0, NULL);
    printf("    op(A) = A^T of 3 x 2 with B 2 x 2: %s: %s\n", cublasGetStatusName(st), cublasGetStatusString(st));
    RG_CHECK(st == CUBLAS_STATUS_INVALID_VALUE && strstr(cublasGetStatusString(st), "do not agree"),
             "shapes that do not agree gave %s", cublasGetStatusName(st));
    cublasLtMatmulDescDestroy(desc);
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const uint32_t gelu = CUBLASLT_EPILOGUE_GELU;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &gelu, sizeof gelu);
    st = cublasLtMatmul(lt, desc, &alpha, dA, la, dB, lb, &beta, dC, lc, dD, lc, NULL, NULL, 0, NULL);
    RG_CHECK(st == CUBLAS_STATUS_NOT_SUPPORTED && strstr(cublasGetStatusString(st), "epilogue"),
             "the GELU epilogue gave %s", cublasGetStatusName(st));
    const int64_t short_ld = 2;
    RG_CHECK(cublasLtMatrixLayoutSetAttribute(lc, CUBLASLT_MATRIX_LAYOUT_LD, &short_ld, 4) == CUBLAS_STATUS_INVALID_VALUE,
             "an attribute of the wrong size was taken");
    cublasLtMatrixLayoutSetAttribute(lc, CUBLASLT_MATRIX_LAYOUT_LD, &short_ld, sizeof short_ld);
    cublasLtMatmulDescDestroy(desc);
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    st = cublasLtMatmul(lt, desc, &alpha, dA, la, dB, lb, &beta, dC, lc, dD, lc, NULL, NULL, 0, NULL);
    RG_CHECK(st == CUBLAS_STATUS_INVALID_VALUE && strstr(cublasGetStatusString(st), "ld 2"),
             "ld 2 for 3 rows gave %s: %s", cublasGetStatusName(st), cublasGetStatusString(st));
    cublasLtMatmulDescDestroy(desc);
    cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc);
    cudaFree(d);
    cublasLtDestroy(lt);
}

// ---------------------------------------------------------------------------
// What cuBLAS refuses

static void test_blas_argument_checks(void) {
    cublasHandle_t h;
    RG_REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate failed");
    float *d = NULL;
    RG_REQUIRE(cudaMalloc((void **)&d, 4096 * 4) == cudaSuccess, "cudaMalloc failed");
    const float one = 1.0f, zero = 0.0f;
    static const struct {
        const char *what;
        cublasOperation_t ta, tb;
        int m, n, k, lda, ldb, ldc, batch;
        cudaDataType at, bt, ct;
        cublasComputeType_t compute;
        cublasStatus_t want;
        const char *detail;  // in cublasGetStatusString
    } cases[] = {
        {"lda < m (op N)", CUBLAS_OP_N, CUBLAS_OP_N, 5, 4, 3, 4, 3, 5, 1, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
         CUBLAS_COMPUTE_32F, CUBLAS_STATUS_INVALID_VALUE, "lda 4"},
        {"lda < k (op T)", CUBLAS_OP_T, CUBLAS_OP_N, 5, 4, 3, 2, 3, 5, 1, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
         CUBLAS_COMPUTE_32F, CUBLAS_STATUS_INVALID_VALUE, "lda 2"},
        {"ldb < k (op N)", CUBLAS_OP_N, CUBLAS_OP_N, 5, 4, 3, 5, 2, 5, 1, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
         CUBLAS_COMPUTE_32F, CUBLAS_STATUS_INVALID_VALUE, "ldb 2"},
        {"ldb < n (op T)", CUBLAS_OP_N, CUBLAS_OP_T, 5, 4, 3, 5, 3, 5, 1, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
         CUBLAS_COMPUTE_32F, CUBLAS_STATUS_INVALID_VALUE, "ldb 3"},
        {"ldc < m", CUBLAS_OP_N, CUBLAS_OP_N, 5, 4, 3, 5, 3, 4, 1, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
         CUBLAS_COMPUTE_32F, CUBLAS_STATUS_INVALID_VALUE, "ldc 4"},
        {"lda 0 with m 0", CUBLAS_OP_N, CUBLAS_OP_N, 0, 4, 3, 0, 3, 1, 1, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
         CUBLAS_COMPUTE_32F, CUBLAS_STATUS_INVALID_VALUE, "lda 0"},
        {"m < 0", CUBLAS_OP_N, CUBLAS_OP_N, -1, 4, 3, 5, 3, 5, 1, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
         CUBLAS_COMPUTE_32F, CUBLAS_STATUS_INVALID_VALUE, "m -1"},
        {"batchCount < 0", CUBLAS_OP_N, CUBLAS_OP_N, 5, 4, 3, 5, 3, 5, -2, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
         CUBLAS_COMPUTE_32F, CUBLAS_STATUS_INVALID_VALUE, "batchCount -2"},
        {"A 16F with C 16BF", CUBLAS_OP_N, CUBLAS_OP_N, 5, 4, 3, 5, 3, 5, 1, CUDA_R_16F, CUDA_R_16F, CUDA_R_16BF,
         CUBLAS_COMPUTE_32F, CUBLAS_STATUS_NOT_SUPPORTED, "C CUDA_R_16BF"},
        {"A 16F with B 32F", CUBLAS_OP_N, CUBLAS_OP_N, 5, 4, 3, 5, 3, 5, 1, CUDA_R_16F, CUDA_R_32F, CUDA_R_32F,
         CUBLAS_COMPUTE_32F, CUBLAS_STATUS_NOT_SUPPORTED, "B CUDA_R_32F"},
        {"FAST_16F on 16F inputs", CUBLAS_OP_N, CUBLAS_OP_N, 5, 4, 3, 5, 3, 5, 1, CUDA_R_16F, CUDA_R_16F, CUDA_R_32F,
         CUBLAS_COMPUTE_32F_FAST_16F, CUBLAS_STATUS_NOT_SUPPORTED, "compute type"},
        {"64F compute", CUBLAS_OP_N, CUBLAS_OP_N, 5, 4, 3, 5, 3, 5, 1, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
         CUBLAS_COMPUTE_64F, CUBLAS_STATUS_NOT_SUPPORTED, "compute type"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const cublasStatus_t got = cublasGemmStridedBatchedEx(
            h, cases[i].ta, cases[i].tb, cases[i].m, cases[i].n, cases[i].k, &one, d, cases[i].at, cases[i].lda, 0, d,
            cases[i].bt, cases[i].ldb, 0, &zero, d, cases[i].ct, cases[i].ldc, 0, cases[i].batch, cases[i].compute,
            CUBLAS_GEMM_DEFAULT);
        const char *text = cublasGetStatusString(got);
        printf("    %-24s %-28s %s\n", cases[i].what, cublasGetStatusName(got), text);
        RG_CHECK(got == cases[i].want, "%s: %s, expected %s", cases[i].what, cublasGetStatusName(got),
                 cublasGetStatusName(cases[i].want));
        RG_CHECK(strstr(text, cases[i].detail) != NULL, "%s: the status string lacks '%s': %s", cases[i].what,
                 cases[i].detail, text);
    }
    const cublasStatus_t st = cublasSgemm(NULL, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, d, 1, d, 1, &zero, d, 1);
    RG_CHECK(st == CUBLAS_STATUS_NOT_INITIALIZED, "a NULL handle gave %s", cublasGetStatusName(st));
    RG_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 0, 5, 3, &one, d, 1, d, 3, &zero, d, 1) == CUBLAS_STATUS_SUCCESS,
             "m = 0 is a valid empty product");
    cudaFree(d);
    cublasDestroy(h);
}

// The product is work on the handle's stream: a blocking copy on the legacy
// stream does not wait for a non-blocking stream, so it sees C as it was.
static void test_blas_runs_on_its_stream(void) {
    cublasHandle_t h;
    cudaStream_t s;
    float *d = NULL, out[4] = {0};
    const float a[4] = {1, 2, 3, 4}, c_old[4] = {-7, -7, -7, -7}, one = 1.0f, zero = 0.0f;
    RG_REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate failed");
    RG_REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreate failed");
    RG_REQUIRE(cublasSetStream(h, s) == CUBLAS_STATUS_SUCCESS, "cublasSetStream failed");
    RG_REQUIRE(cudaMalloc((void **)&d, 12 * 4) == cudaSuccess, "cudaMalloc failed");
    cudaMemcpy(d, a, 16, cudaMemcpyHostToDevice);      // A = B = [[1, 3], [2, 4]] (column-major)
    cudaMemcpy(d + 8, c_old, 16, cudaMemcpyHostToDevice);
    RG_REQUIRE(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, d, 2, d, 2, &zero, d + 8, 2) ==
                   CUBLAS_STATUS_SUCCESS,
               "cublasSgemm failed");
    cudaMemcpy(out, d + 8, 16, cudaMemcpyDeviceToHost);
    printf("    C before the stream is synchronized: %g %g %g %g\n", out[0], out[1], out[2], out[3]);
    RG_CHECK(out[0] == -7 && out[3] == -7, "C changed before its stream ran: %g .. %g", out[0], out[3]);
    RG_REQUIRE(cudaStreamSynchronize(s) == cudaSuccess, "cudaStreamSynchronize failed");
    cudaMemcpy(out, d + 8, 16, cudaMemcpyDeviceToHost);
    printf("    after: %g %g %g %g (A A = [[7, 15], [10, 22]])\n", out[0], out[1], out[2], out[3]);
    RG_CHECK(out[0] == 7 && out[1] == 10 && out[2] == 15 && out[3] == 22, "A A = %g %g %g %g", out[0], out[1], out[2],
             out[3]);
    // Device pointer mode: alpha and beta are read from device memory when the product runs.
    const float ab[2] = {2.0f, 1.0f};
    cudaMemcpy(d + 4, ab, 8, cudaMemcpyHostToDevice);
    RG_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE) == CUBLAS_STATUS_SUCCESS, "cublasSetPointerMode");
    RG_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, d + 4, d, 2, d, 2, d + 5, d + 8, 2) ==
                 CUBLAS_STATUS_SUCCESS,
             "cublasSgemm with device scalars failed");
    cudaStreamSynchronize(s);
    cudaMemcpy(out, d + 8, 16, cudaMemcpyDeviceToHost);
    RG_CHECK(out[0] == 21 && out[3] == 66, "2 A A + C = %g .. %g, expected 21 .. 66", out[0], out[3]);
    cudaFree(d);
    cudaStreamDestroy(s);
    cublasDestroy(h);
}

// A host pointer as a matrix: a GPU would fault; the call fails and says which matrix.
static void test_blas_host_matrix(void) {
    cublasHandle_t h;
    static float host[16];
    float *d = NULL;
    const float one = 1.0f, zero = 0.0f;
    RG_REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate failed");
    RG_REQUIRE(cudaMalloc((void **)&d, 64) == cudaSuccess, "cudaMalloc failed");
    const cublasStatus_t st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, host, 2, d, 2, &zero, d, 2);
    const char *text = cublasGetStatusString(st);
    printf("    %s: %s\n", cublasGetStatusName(st), text);
    RG_CHECK(st == CUBLAS_STATUS_EXECUTION_FAILED && strstr(text, "matrix A"), "a host A gave %s: %s",
             cublasGetStatusName(st), text);
    RG_CHECK(cudaDeviceSynchronize() == cudaErrorIllegalAddress, "the device is not faulted after it");
    cublasDestroy(h);
    cudaDeviceReset();
}

static const rg_test_case cases[] = {
    RG_TEST(test_blas_gemm_definition),
    RG_TEST(test_blas_lt_epilogues),
    RG_TEST(test_blas_argument_checks),
    RG_TEST(test_blas_runs_on_its_stream),
    RG_TEST(test_blas_host_matrix),
    {0},
};

#else  // no host execution in this build

static const rg_test_case cases[] = {
    RG_TEST(test_host_execution_is_built),
    {0},
};

#endif

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
