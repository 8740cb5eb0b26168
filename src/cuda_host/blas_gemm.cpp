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
// and the device is faulted with the reason). The product runs as deferred
// work on the handle's stream: each output element sums its k products in
// float in increasing k, then alpha * sum + beta * C in float (C is not read
// when beta is 0, A and B not when alpha is 0 or k is 0), rounded once into
// C's type. The FAST compute types (and CUBLAS_TF32_TENSOR_OP_MATH on a
// 32-bit GEMM) round the inputs to their reduced type first, as cuBLAS may.
#include <math.h>
#include <string.h>

#include <vector>

#include "cuda_host/blas.h"
#include "cuda_host/devmem.h"
#include "cuda_host/queue.h"
#include "cuda_host/state.h"

namespace rgh {

namespace {

enum class Reduce { none, f16, bf16, tf32 };

struct Gemm {
    cublasOperation_t ta, tb;
    int m, n, k, batch;
    const void *A, *B;
    void *C;
    cudaDataType at, ct;  // A and B share a type
    long long lda, ldb, ldc, sa, sb, sc;
    Reduce reduce;
    bool device_scalars;
    float alpha, beta;              // host pointer mode: read at the call
    const float *alpha_p, *beta_p;  // device pointer mode: read when it runs
};

size_t type_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

float load(cudaDataType t, const void *base, long long i) {
    switch (t) {
    case CUDA_R_16F: return __half2float(((const __half *)base)[i]);
    case CUDA_R_16BF: return __bfloat162float(((const __nv_bfloat16 *)base)[i]);
    default: return ((const float *)base)[i];
    }
}

void store(cudaDataType t, void *base, long long i, float v) {
    switch (t) {
    case CUDA_R_16F: ((__half *)base)[i] = __float2half_rn(v); break;
    case CUDA_R_16BF: ((__nv_bfloat16 *)base)[i] = __float2bfloat16_rn(v); break;
    default: ((float *)base)[i] = v; break;
    }
}

float reduce_input(Reduce r, float v) {
    switch (r) {
    case Reduce::f16: return __half2float(__float2half_rn(v));
    case Reduce::bf16: return __bfloat162float(__float2bfloat16_rn(v));
    case Reduce::tf32: {  // 10 explicit mantissa bits, round to nearest even
        uint32_t u;
        memcpy(&u, &v, 4);
        if ((u & 0x7F800000u) != 0x7F800000u) u = (u + 0xFFFu + ((u >> 13) & 1u)) & ~0x1FFFu;
        memcpy(&v, &u, 4);
        return v;
    }
    case Reduce::none: break;
    }
    return v;
}

// op(X) of a stored matrix: rows x cols of op(X), ld of the stored one.
struct Operand {
    const void *p;
    cudaDataType t;
    long long ld;
    bool trans;
    float at(int row, int col) const { return load(t, p, trans ? col + (long long)row * ld : row + (long long)col * ld); }
};

void run_gemm(const Gemm &g) {
    const float alpha = g.device_scalars ? *g.alpha_p : g.alpha;
    const float beta = g.device_scalars ? *g.beta_p : g.beta;
    const size_t ea = type_bytes(g.at), ec = type_bytes(g.ct);
    std::vector<float> arow((size_t)g.k), bcol((size_t)g.k);
    for (int b = 0; b < g.batch; b++) {
        const Operand A{(const char *)g.A + b * g.sa * (long long)ea, g.at, g.lda, g.ta != CUBLAS_OP_N};
        const Operand B{(const char *)g.B + b * g.sb * (long long)ea, g.at, g.ldb, g.tb != CUBLAS_OP_N};
        char *C = (char *)g.C + b * g.sc * (long long)ec;
        const bool product = alpha != 0.0f && g.k > 0;
        for (int j = 0; j < g.n; j++) {
            if (product)
                for (int l = 0; l < g.k; l++) bcol[(size_t)l] = reduce_input(g.reduce, B.at(l, j));
            for (int i = 0; i < g.m; i++) {
                float sum = 0.0f;
                if (product) {
                    for (int l = 0; l < g.k; l++) arow[(size_t)l] = reduce_input(g.reduce, A.at(i, l));
                    for (int l = 0; l < g.k; l++) sum += arow[(size_t)l] * bcol[(size_t)l];
                }
                const long long ci = i + (long long)j * g.ldc;
                float r = product ? alpha * sum : 0.0f;
                if (beta != 0.0f) r += beta * load(g.ct, C, ci);
                store(g.ct, C, ci, r);
            }
        }
    }
}

const char *op_name(cublasOperation_t op) { return op == CUBLAS_OP_N ? "N" : op == CUBLAS_OP_T ? "T" : "C"; }

// The bytes a stored operand spans over all batches, from its pointer: NULL-free, non-negative strides.
bool span_ok(const void *p, long long rows, long long cols, long long ld, long long stride, int batch, size_t esz) {
    if (stride < 0) return false;
    const long long last = (long long)(batch - 1) * stride + (cols - 1) * ld + rows;
    return dev_range(p, (size_t)last * esz);
}

bool types_offered(cudaDataType at, cudaDataType ct, cublasComputeType_t compute) {
    switch (compute) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
        return (at == CUDA_R_32F && ct == CUDA_R_32F) || ((at == CUDA_R_16F || at == CUDA_R_16BF) && (ct == at || ct == CUDA_R_32F));
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32: return at == CUDA_R_32F && ct == CUDA_R_32F;
    default: return false;
    }
}

const char *type_name(cudaDataType t) {
    switch (t) {
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_16BF: return "CUDA_R_16BF";
    default: return "a type the stand-in does not take";
    }
}

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
    if (at != bt || !types_offered(at, ct, compute))
        return blas_status(CUBLAS_STATUS_NOT_SUPPORTED, "%s: A %s, B %s, C %s with compute type %d", call, type_name(at),
                           type_name(bt), type_name(ct), (int)compute);
    Stream *s = find_stream(hb->stream, call);
    if (!s) return blas_status(CUBLAS_STATUS_EXECUTION_FAILED, "%s: the handle's stream is gone", call);
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;

    Gemm g{};
    g.ta = ta, g.tb = tb, g.m = m, g.n = n, g.k = k, g.batch = batch;
    g.A = A, g.B = B, g.C = C, g.at = at, g.ct = ct;
    g.lda = lda, g.ldb = ldb, g.ldc = ldc, g.sa = sa, g.sb = sb, g.sc = sc;
    g.reduce = compute == CUBLAS_COMPUTE_32F_FAST_16F    ? Reduce::f16
               : compute == CUBLAS_COMPUTE_32F_FAST_16BF ? Reduce::bf16
               : compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? Reduce::tf32
                                                         : Reduce::none;
    const unsigned math = (unsigned)hb->math_mode & ~(unsigned)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (compute == CUBLAS_COMPUTE_32F && at == CUDA_R_32F && math == CUBLAS_TF32_TENSOR_OP_MATH) g.reduce = Reduce::tf32;
    g.device_scalars = hb->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
    if (g.device_scalars) {
        if (!dev_range(alpha, 4) || !dev_range(beta, 4))
            return blas_status(CUBLAS_STATUS_INVALID_VALUE, "%s: device pointer mode with alpha or beta not in device memory", call);
        g.alpha_p = (const float *)alpha, g.beta_p = (const float *)beta;
    } else {
        memcpy(&g.alpha, alpha, 4);
        memcpy(&g.beta, beta, 4);
    }
    // A GPU reads only what the product needs; so is checked here.
    const bool reads_ab = k > 0 && (g.device_scalars || g.alpha != 0.0f);
    const size_t ea = type_bytes(at), ec = type_bytes(ct);
    const char *bad = nullptr;
    if (!span_ok(C, m, n, ldc, sc, batch, ec)) bad = "C";
    else if (reads_ab && !span_ok(A, rows_a, cols_a, lda, sa, batch, ea)) bad = "A";
    else if (reads_ab && !span_ok(B, rows_b, cols_b, ldb, sb, batch, ea)) bad = "B";
    if (bad) {
        char why[256];
        const void *p = *bad == 'A' ? A : *bad == 'B' ? B : C;
        snprintf(why, sizeof why, "%s: matrix %s at %p (%s) does not lie in one device allocation", call, bad, p,
                 ptr_kind_name(classify(p)));
        fault_sticky(cudaErrorIllegalAddress, why);
        return blas_status(CUBLAS_STATUS_EXECUTION_FAILED, "%s", why);
    }
    if (submit(s, simple_work(call, [g] { run_gemm(g); })) != cudaSuccess)
        return blas_status(CUBLAS_STATUS_EXECUTION_FAILED, "%s: %s", call, error_text(last_error(false)));
    return CUBLAS_STATUS_SUCCESS;
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
