// blas_gemm.cpp - the cuBLAS stand-in's GEMMs: cublasSgemm, cublasGemmEx and
// their strided-batched forms, by cuBLAS's definition
//
//     C[b] = alpha op(A[b]) op(B[b]) + beta C[b],   b < batchCount
//
// in column-major storage (element (i, j) of a matrix with leading dimension
// ld at i + j * ld), op(X) = X or its transpose (CUBLAS_OP_C is the transpose
// for real types). Arguments are checked as cuBLAS checks them, when the call
// is made: negative sizes, a leading dimension below the rows of the stored
// matrix (max(1, rows)), a NULL scalar give CUBLAS_STATUS_INVALID_VALUE; a
// type combination cuBLAS does not offer, CUBLAS_STATUS_NOT_SUPPORTED. Every
// matrix must lie in device memory (a GPU would fault; here the call fails
// and the device is faulted with the reason). The product (blas_product.cpp)
// runs as deferred work on the handle's stream: each output element sums its
// k products in float in increasing k, then alpha * sum + beta * C in float,
// rounded once into C's type. The FAST compute types (and
// CUBLAS_TF32_TENSOR_OP_MATH on a 32-bit GEMM) round the inputs to their
// reduced type first, as cuBLAS may.
#include <string.h>

#include "cuda_host/blas.h"
#include "cuda_host/devmem.h"
#include "cuda_host/state.h"

namespace rgh {

namespace {

const char *op_name(cublasOperation_t op) { return op == CUBLAS_OP_N ? "N" : op == CUBLAS_OP_T ? "T" : "C"; }

cublasStatus_t gemm(const char *call, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, const void *alpha, const void *A, cudaDataType at, int lda, long long sa, const void *B,
                    cudaDataType bt, int ldb, long long sb, const void *beta, void *C, cudaDataType ct, int ldc,
                    long long sc, int batch, cublasComputeType_t compute) {
    std::lock_guard<std::recursive_mutex> guard(runtime_lock());
    BlasHandle *hb = blas_handle(h);
    if (!hb) return blas_status(CUBLAS_STATUS_NOT_INITIALIZED, "%s: %p is not a live handle", call, (void *)h);
    if (sticky_error() != cudaSuccess) return blas_status(CUBLAS_STATUS_EXECUTION_FAILED, "%s: the device faulted", call);
    const auto valid_op = [](cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; };
    if (!valid_op(ta) || !valid_op(tb)) return blas_status(CUBLAS_STATUS_INVALID_VALUE, "%s: transa %d, transb %d", call, ta, tb);
    if (m < 0 || n < 0 || k < 0 || batch < 0)
        return blas_status(CUBLAS_STATUS_INVALID_VALUE, "%s: m %d n %d k %d batchCount %d", call, m, n, k, batch);
    const int rows_a = ta == CUBLAS_OP_N ? m : k, cols_a = ta == CUBLAS_OP_N ? k : m;
    const int rows_b = tb == CUBLAS_OP_N ? k : n, cols_b = tb == CUBLAS_OP_N ? n : k;
    if (lda < (rows_a > 1 ? rows_a : 1))
        return blas_status(CUBLAS_STATUS_INVALID_VALUE, "%s: lda %d < max(1, %d), the rows of A stored for op %s", call,
                           lda, rows_a, op_name(ta));
    if (ldb < (rows_b > 1 ? rows_b : 1))
        return blas_status(CUBLAS_STATUS_INVALID_VALUE, "%s: ldb %d < max(1, %d), the rows of B stored for op %s", call,
                           ldb, rows_b, op_name(tb));
    if (ldc < (m > 1 ? m : 1)) return blas_status(CUBLAS_STATUS_INVALID_VALUE, "%s: ldc %d < max(1, m = %d)", call, ldc, m);
    if (!alpha || !beta) return blas_status(CUBLAS_STATUS_INVALID_VALUE, "%s: NULL alpha or beta", call);
    if (at != bt || !blas_types_offered(at, ct, compute))
        return blas_status(CUBLAS_STATUS_NOT_SUPPORTED, "%s: A %s, B %s, C %s with compute type %d", call,
                           blas_type_name(at), blas_type_name(bt), blas_type_name(ct), (int)compute);
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;

    GemmRun g{};
    g.ta = ta, g.tb = tb, g.m = m, g.n = n, g.k = k, g.batch = batch;
    g.A = A, g.B = B, g.C = C, g.D = C, g.ab = at, g.cd = ct;
    g.lda = lda, g.ldb = ldb, g.ldc = ldc, g.ldd = ldc, g.sa = sa, g.sb = sb, g.sc = sc, g.sd = sc;
    g.reduce = blas_reduce_of(compute);
    const unsigned math = (unsigned)hb->math_mode & ~(unsigned)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (compute == CUBLAS_COMPUTE_32F && at == CUDA_R_32F && math == CUBLAS_TF32_TENSOR_OP_MATH) g.reduce = Reduce::tf32;
    if (cublasStatus_t st = blas_scalars(call, hb->pointer_mode == CUBLAS_POINTER_MODE_DEVICE, alpha, beta, &g)) return st;
    // A GPU reads only what the product needs; so is checked here.
    const bool reads_ab = k > 0 && (g.device_scalars || g.alpha != 0.0f);
    const size_t ea = blas_type_bytes(at), ec = blas_type_bytes(ct);
    if (!blas_span_ok(C, m, n, ldc, sc, batch, ec)) return blas_bad_matrix(call, "C", C);
    if (reads_ab && !blas_span_ok(A, rows_a, cols_a, lda, sa, batch, ea)) return blas_bad_matrix(call, "A", A);
    if (reads_ab && !blas_span_ok(B, rows_b, cols_b, ldb, sb, batch, ea)) return blas_bad_matrix(call, "B", B);
    return blas_submit(call, hb->stream, g);
}

}  // namespace

}  // namespace rgh

using namespace rgh;

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                              float *C, int ldc) {
    return gemm("cublasSgemm", h, ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, 0, B, CUDA_R_32F, ldb, 0, beta, C,
                CUDA_R_32F, ldc, 0, 1, CUBLAS_COMPUTE_32F);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *A, int lda, long long int sa,
                                         const float *B, int ldb, long long int sb, const float *beta, float *C,
                                         int ldc, long long int sc, int batch) {
    return gemm("cublasSgemmStridedBatched", h, ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, sa, B, CUDA_R_32F, ldb, sb,
                beta, C, CUDA_R_32F, ldc, sc, batch, CUBLAS_COMPUTE_32F);
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, const void *B,
                            cudaDataType bt, int ldb, const void *beta, void *C, cudaDataType ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    (void)algo;  // every algorithm is the same loop here
    return gemm("cublasGemmEx", h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1,
                compute);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                          long long int sa, const void *B, cudaDataType bt, int ldb, long long int sb,
                                          const void *beta, void *C, cudaDataType ct, int ldc, long long int sc,
                                          int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    (void)algo;
    return gemm("cublasGemmStridedBatchedEx", h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct,
                ldc, sc, batch, compute);
}
