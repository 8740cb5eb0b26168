// device.cu - device discovery and the first kernel of the CUDA backend.
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "base/error.h"
#include "cuda/cuda.h"
}

#define RG_CUDA_TRY(call, what)                                                                       \
    do {                                                                                              \
        cudaError_t e_ = (call);                                                                      \
        if (e_ != cudaSuccess) {                                                                      \
            st = rg_fail(err, RG_ERR_IO, "cuda device %d: %s failed: %s (%s:%d)", index, what,      \
                         cudaGetErrorString(e_), __FILE__, __LINE__);                                 \
            goto done;                                                                                \
        }                                                                                             \
    } while (0)

extern "C" int rg_cuda_compiled(void) { return 1; }

extern "C" int rg_cuda_device_count(char *reason, size_t reason_cap) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (reason && reason_cap) snprintf(reason, reason_cap, "no usable CUDA device: %s", cudaGetErrorString(e));
        cudaGetLastError();  // clear the sticky error for later calls
        return 0;
    }
    if (n == 0 && reason && reason_cap) snprintf(reason, reason_cap, "no CUDA device present");
    return n;
}

extern "C" rg_status rg_cuda_device_get(int index, rg_cuda_device_info *out, rg_error *err) {
    rg_status st = RG_OK;
    cudaDeviceProp p;
    size_t free_b = 0, total_b = 0;
    memset(out, 0, sizeof *out);
    RG_CUDA_TRY(cudaGetDeviceProperties(&p, index), "cudaGetDeviceProperties");
    RG_CUDA_TRY(cudaSetDevice(index), "cudaSetDevice");
    RG_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->major = p.major;
    out->minor = p.minor;
    out->total_mem = total_b;
    out->free_mem = free_b;
    out->multiprocessors = p.multiProcessorCount;
done:
    return st;
}

// [n] = [n] + [n]
__global__ static void add_f32_kernel(const float *a, const float *b, float *y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a[i] + b[i];
}

extern "C" rg_status rg_cuda_add_f32(int index, const float *a, const float *b, float *y, int64_t n, rg_error *err) {
    rg_status st = RG_OK;
    float *da = NULL, *db = NULL, *dy = NULL;
    size_t bytes = (size_t)n * sizeof(float);
    if (n <= 0) return RG_OK;
    RG_CUDA_TRY(cudaSetDevice(index), "cudaSetDevice");
    RG_CUDA_TRY(cudaMalloc(&da, bytes), "cudaMalloc");
    RG_CUDA_TRY(cudaMalloc(&db, bytes), "cudaMalloc");
    RG_CUDA_TRY(cudaMalloc(&dy, bytes), "cudaMalloc");
    RG_CUDA_TRY(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice), "copy to device");
    RG_CUDA_TRY(cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice), "copy to device");
    add_f32_kernel<<<(unsigned)((n + 255) / 256), 256>>>(da, db, dy, n);
    RG_CUDA_TRY(cudaGetLastError(), "kernel launch");
    RG_CUDA_TRY(cudaMemcpy(y, dy, bytes, cudaMemcpyDeviceToHost), "copy to host");
done:
    cudaFree(da);
    cudaFree(db);
    cudaFree(dy);
    return st;
}
