// blas.h - what the cuBLAS and cuBLASLt stand-ins share: the product itself,
// the handle behind cublasHandle_t and the status detail (the counterpart of
// state.h's error detail: cublasGetStatusString names the argument at fault).
#ifndef RG_CUDA_HOST_BLAS_H
#define RG_CUDA_HOST_BLAS_H

#include <cublas_v2.h>
#include <stddef.h>

namespace rgh {

struct BlasHandle {
    cudaStream_t stream = nullptr;
    cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
    cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
    cublasAtomicsMode_t atomics = CUBLAS_ATOMICS_NOT_ALLOWED;
};

// The product both APIs run (blas_product.cpp), as deferred stream work:
//   D[b] = epilogue(alpha op(A[b]) op(B[b]) + beta C[b] + bias),   b < batch
// column-major, C not read when beta is 0, A and B not when alpha is 0 or k is 0;
// each element sums its k products in float in increasing k.
enum class Reduce { none, f16, bf16, tf32 };  // input rounding a compute type allows
struct GemmRun {
    cublasOperation_t ta, tb;
    int m, n, k, batch;
    const void *A, *B, *C;
    void *D;
    cudaDataType ab, cd;  // A and B share a type, C and D another
    long long lda, ldb, ldc, ldd, sa, sb, sc, sd;
    Reduce reduce;
    bool device_scalars;
    float alpha, beta;              // host pointer mode: read at the call
    const float *alpha_p, *beta_p;  // device pointer mode: read when it runs
    const void *bias;               // NULL, or m values per batch (bias_stride apart) added to every column
    cudaDataType bias_type;
    long long bias_stride;
    bool relu;
};
void run_gemm(const GemmRun &g);

size_t blas_type_bytes(cudaDataType t);
const char *blas_type_name(cudaDataType t);
// Whether cuBLAS offers A/B of type ab, C/D of type cd with this compute type (32-bit compute types only).
bool blas_types_offered(cudaDataType ab, cudaDataType cd, cublasComputeType_t compute);
Reduce blas_reduce_of(cublasComputeType_t compute);
// Whether a stored rows x cols operand with leading dimension ld, `batch` of them
// `stride` elements apart (stride >= 0), lies in one live device allocation.
bool blas_span_ok(const void *p, long long rows, long long cols, long long ld, long long stride, int batch, size_t esz);
// A matrix outside device memory: the device faults (a GPU would) and the call
// fails with CUBLAS_STATUS_EXECUTION_FAILED naming it.
cublasStatus_t blas_bad_matrix(const char *call, const char *which, const void *p);
// Takes alpha and beta as the pointer mode says (host: their values now; device: checked pointers).
cublasStatus_t blas_scalars(const char *call, bool device_mode, const void *alpha, const void *beta, GemmRun *g);
// Queues the product on s (the handle's or the call's stream).
cublasStatus_t blas_submit(const char *call, cudaStream_t s, const GemmRun &g);

// The live handle behind h, or NULL.
BlasHandle *blas_handle(cublasHandle_t h);
// Sets this thread's last cuBLAS status with a detail (printf format) and returns s.
cublasStatus_t blas_status(cublasStatus_t s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace rgh

#endif
