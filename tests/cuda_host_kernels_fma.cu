// cuda_host_kernels_fma.cu - the kernel of tests/test_cuda_host_fma.c, compiled only as the
// host twin: a multiply-add written plain, with fmaf and with __fmaf_rn. nvcc builds the
// backend with --fmad=false (src/cuda/nvcc_flags.cmake), so on a GPU the plain one rounds
// twice and the other two once; the host execution must do the same (-ffp-contract=off, and
// fmaf / __fmaf_rn one fused operation), or the host twin's bits are not the GPU's.
#include "cuda/cuda_common.cuh"
#include "cuda_host_kernels_fma.h"

namespace {

__global__ void fma_rounding_kernel(float a, float c, float *out) {
    out[0] = a * a + c;
    out[1] = fmaf(a, a, c);
    out[2] = __fmaf_rn(a, a, c);
}

}  // namespace

extern "C" int khost_fma_rounding(float out[3]) {
    float *d = nullptr;
    cudaError_t e = cudaMalloc(&d, 3 * sizeof(float));
    if (!e) {
        RG_LAUNCH(fma_rounding_kernel, 1, 1, 0, 0, 1.0f + 0x1p-12f, -(1.0f + 0x1p-11f), d);
        e = cudaGetLastError();
    }
    if (!e) e = cudaMemcpy(out, d, 3 * sizeof(float), cudaMemcpyDeviceToHost);
    if (d) cudaFree(d);
    if (e) cudaDeviceReset();
    return (int)e;
}
