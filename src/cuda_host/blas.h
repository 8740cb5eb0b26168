// blas.h - what the cuBLAS stand-in's two files share: the handle behind
// cublasHandle_t and the status detail (the cuBLAS counterpart of state.h's
// error detail: cublasGetStatusString names the argument at fault).
#ifndef RG_CUDA_HOST_BLAS_H
#define RG_CUDA_HOST_BLAS_H

#include <cublas_v2.h>

namespace rgh {

struct BlasHandle {
    cudaStream_t stream = nullptr;
    cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
    cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
    cublasAtomicsMode_t atomics = CUBLAS_ATOMICS_NOT_ALLOWED;
};

// The live handle behind h, or NULL.
BlasHandle *blas_handle(cublasHandle_t h);
// Sets this thread's last cuBLAS status with a detail (printf format) and returns s.
cublasStatus_t blas_status(cublasStatus_t s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace rgh

#endif
