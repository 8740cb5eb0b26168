// cuda_host_kernels_fma.h - the scenario of tests/cuda_host_kernels_fma.cu (compiled only as
// the host twin), checked by tests/test_cuda_host_fma.c: how the host execution rounds a
// multiply-add, written plain and written fused.
#ifndef RG_TEST_CUDA_HOST_KERNELS_FMA_H
#define RG_TEST_CUDA_HOST_KERNELS_FMA_H

#ifdef __cplusplus
extern "C" {
#endif

// One thread computes a * a + c three ways for a = 1 + 2^-12, c = -(1 + 2^-11) (passed as
// arguments, so nothing is folded at compile time): out[0] plain (a * a rounds to 1 + 2^-11,
// so 0), out[1] fmaf and out[2] __fmaf_rn (one rounding: the exact 2^-24).
// Returns the cudaError_t of the launch and copies (0: success).
int khost_fma_rounding(float out[3]);

#ifdef __cplusplus
}
#endif

#endif
