// cuda_host_kernels_limits.cu - kernels for tests/test_cuda_host_limits.c: launches the
// kernel table (src/cuda_host/kernel_limits.h) must refuse as a GPU would, and their
// correct twins. These kernels are compiled only as the host twin, so nvcc never gave
// them rows: each scenario adds the row nvcc would have written (kernel_limits_add).
#include <stdio.h>
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda_host/kernel_limits.h"
#include "cuda_host_kernels_limits.h"
#include "cuda_host_scenario.h"

// Shaped like src/cuda's kernels, for klim_keys: the names nvcc gives them are in the test.
struct klim_geom {
    int a;
};
namespace {
struct klim_op {};
template <int D>
__global__ void lit_kernel(klim_geom g, const float *x, float *y) {
    y[0] = x[0] + (float)(D + g.a);
}
template <class Op>
__global__ void ew_kernel(const float *a, const float *b, float *y, klim_geom g, long n) {
    (void)a, (void)b, (void)y, (void)g, (void)n;
}
__global__ void scan_kernel(klim_geom g, const float *x, const float *y, float *z) {
    (void)g, (void)x, (void)y, (void)z;
}
}  // namespace
__global__ static void add_f32_kernel(const float *a, const float *b, float *y, long n) {
    (void)a, (void)b, (void)y, (void)n;
}

namespace {

// The launch's error, else the synchronization's.
cudaError_t launched(void) {
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : cudaDeviceSynchronize();
}

// Adds F's row (every architecture of the table) the first time only.
template <auto F>
void row_once(int regs, int static_smem, int launch_bounds) {
    static const bool added = (rgh::kernel_limits_add<F>(0, regs, static_smem, launch_bounds), true);
    (void)added;
}

// y = 2 x over n elements by one block.
__global__ void regs96_kernel(const float *x, float *y, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = 2.0f * x[i];
}

__global__ void __launch_bounds__(128) bounded_kernel(float *y) { y[threadIdx.x] = (float)threadIdx.x; }

// The big array is declared where no thread goes (flag is 0): only the launch's check,
// from the row's static bytes, can see it.
__global__ void big_static_kernel(const int *flag, float *y) {
    if (*flag) {
        RG_SHARED(float, big, 10240);  // 40 KiB
        big[threadIdx.x] = 1.0f;
        __syncthreads();
        y[threadIdx.x] = big[0];
    } else {
        y[threadIdx.x] = 3.0f;
    }
}

// 2 KiB of static shared memory; the rows differ: 2048 bytes (right) and 1024 (stale).
__device__ void fill_2k(float *y) {
    RG_SHARED(float, sh, 512);
    sh[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    y[threadIdx.x] = sh[31 - threadIdx.x];
}
__global__ void smem_row_right_kernel(float *y) { fill_2k(y); }
__global__ void smem_row_stale_kernel(float *y) { fill_2k(y); }

__global__ void unlisted_kernel(float *y) { y[threadIdx.x] = 1.0f; }

}  // namespace

extern "C" void klim_registers(int threads, khost_result *r) {
    memset(r, 0, sizeof *r);
    row_once<regs96_kernel>(96, 0, 0);
    const int n = 2000;
    float *x, *y;
    cudaMallocHost((void **)&x, n * sizeof(float));
    cudaMallocHost((void **)&y, n * sizeof(float));
    for (int i = 0; i < n; i++) x[i] = (float)i, y[i] = 0.0f;
    RG_LAUNCH(regs96_kernel, 1, threads, 0, 0, x, y, n);
    const cudaError_t e = launched();
    for (int i = 0; i < n && e == cudaSuccess; i++) r->v[0] += y[i] != 2.0f * (float)i;
    cudaFreeHost(x), cudaFreeHost(y);
    finish(r, e);
}

extern "C" void klim_launch_bounds(int threads, khost_result *r) {
    memset(r, 0, sizeof *r);
    row_once<bounded_kernel>(32, 0, 128);
    float *y;
    cudaMalloc((void **)&y, 1024 * sizeof(float));
    RG_LAUNCH(bounded_kernel, 1, threads, 0, 0, y);
    const cudaError_t e = launched();
    cudaFree(y);
    finish(r, e);
}

extern "C" void klim_static_smem(int dyn_bytes, khost_result *r) {
    memset(r, 0, sizeof *r);
    row_once<big_static_kernel>(16, 40960, 0);
    int *flag;
    float *y;
    cudaMallocHost((void **)&flag, sizeof(int));
    cudaMallocHost((void **)&y, 32 * sizeof(float));
    *flag = 0;
    RG_LAUNCH(big_static_kernel, 1, 32, (size_t)dyn_bytes, 0, (const int *)flag, y);
    const cudaError_t e = launched();
    if (e == cudaSuccess) r->v[0] = y[0];
    cudaFreeHost(flag), cudaFreeHost(y);
    finish(r, e);
}

extern "C" void klim_static_smem_row(int table_bytes, khost_result *r) {
    memset(r, 0, sizeof *r);
    row_once<smem_row_right_kernel>(16, 2048, 0);
    row_once<smem_row_stale_kernel>(16, 1024, 0);
    float *y;
    cudaMallocHost((void **)&y, 32 * sizeof(float));
    if (table_bytes == 2048)
        RG_LAUNCH(smem_row_right_kernel, 1, 32, 0, 0, y);
    else
        RG_LAUNCH(smem_row_stale_kernel, 1, 32, 0, 0, y);
    const cudaError_t e = launched();
    if (e == cudaSuccess) r->v[0] = y[0];
    cudaFreeHost(y);
    finish(r, e);
}

extern "C" void klim_unlisted(const char *file, khost_result *r) {
    memset(r, 0, sizeof *r);
    float *y;
    cudaMalloc((void **)&y, 32 * sizeof(float));
    // What RGH_LAUNCH does, but with the launch site named by the test.
    rgh::note_kernel(reinterpret_cast<const void *>(unlisted_kernel), typeid(rgh::KTag<unlisted_kernel>).name(), file);
    rgh::launch("unlisted_kernel", unlisted_kernel, dim3(1), dim3(32), 0, 0, y);
    const cudaError_t e = launched();
    cudaFree(y);
    finish(r, e);
}

extern "C" void klim_keys(char keys[4][160]) {
    const std::string k[4] = {rgh::kernel_key(typeid(rgh::KTag<lit_kernel<128>>).name()),
                              rgh::kernel_key(typeid(rgh::KTag<ew_kernel<klim_op>>).name()),
                              rgh::kernel_key(typeid(rgh::KTag<scan_kernel>).name()),
                              rgh::kernel_key(typeid(rgh::KTag<add_f32_kernel>).name())};
    for (int i = 0; i < 4; i++) snprintf(keys[i], 160, "%s", k[i].c_str());
}
