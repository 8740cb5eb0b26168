// cuda_host_kernels_race.cu - kernels for tests/test_cuda_host_race.c, written
// as any CUDA file of the backend is (RG_LAUNCH, RG_SHARED) and compiled only as
// the host twin. Every scenario (cuda_host_kernels_race.h) runs a deliberately
// broken kernel or its correct twin.
#include <stdio.h>
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda_host_kernels_race.h"
#include "cuda_host_scenario.h"

namespace {

const unsigned kFull = 0xFFFFFFFFu;

// ---------------------------------------------------------------------------
// Shared-memory races

__global__ void shared_write_write_kernel(int *out, int broken) {
    RG_SHARED(int, sh, 64);
    const int t = threadIdx.x;
    sh[broken ? 0 : t] = t;  // broken: every thread stores into word 0 at once
    __syncthreads();
    if (t == 0) out[0] = sh[0];
}

__global__ void shared_read_write_kernel(int *out, int broken) {
    RG_SHARED(int, sh, 64);
    const int t = threadIdx.x;
    sh[t] = t;
    if (!broken) __syncthreads();
    out[t] = sh[(t + 1) % 64];  // broken: thread t + 1 may not have stored yet
}

__global__ void warp_read_write_kernel(int *out, int broken) {
    RG_SHARED(int, sh, 32);
    const int lane = threadIdx.x;
    sh[lane] = lane;
    if (!broken) __syncwarp();
    out[lane] = sh[(lane + 1) & 31];
}

// ---------------------------------------------------------------------------
// Blocks of one launch

// Block 0 stores 7 (when `writer`), every other block copies out[0].
__global__ void block_order_kernel(int *out, int writer) {
    if (threadIdx.x) return;
    if (blockIdx.x == 0) {
        if (writer) out[0] = 7;
    } else {
        out[blockIdx.x] = out[0];  // broken when block 0 writes in the same launch
    }
}

__global__ void atomics_across_blocks_kernel(unsigned *sum) { atomicAdd(sum, 1u); }

// ---------------------------------------------------------------------------
// Collectives

__global__ void divergent_shuffle_kernel(float *out, int broken) {
    const int lane = threadIdx.x;
    float v;
    if (broken) {
        if (lane < 16)
            v = __shfl_sync(kFull, (float)lane, 0);
        else
            v = __shfl_sync(kFull, (float)(2 * lane), 1);
    } else {
        v = __shfl_sync(kFull, lane < 16 ? (float)lane : (float)(2 * lane), lane < 16 ? 0 : 1);
    }
    out[lane] = v;
}

// ---------------------------------------------------------------------------
// Alignment and shared-memory bounds

__global__ void float4_load_kernel(const float *x, int offset, float *y) {
    const float4 v = *reinterpret_cast<const float4 *>(x + offset);
    y[0] = v.x + v.y + v.z + v.w;
}

__global__ void float4_store_kernel(float *y, int offset) {
    *reinterpret_cast<float4 *>(y + offset) = make_float4(1.0f, 2.0f, 3.0f, 4.0f);
}

__global__ void past_dynamic_kernel(float *out, int shift) {
    RG_SHARED_DYN(float, buf);
    const int t = threadIdx.x;
    buf[t] = (float)t;
    __syncthreads();
    out[t] = buf[t + shift];  // shift 1: thread 31 reads the float after the launch's 32
}

__global__ void past_static_kernel(float *out, int shift) {
    RG_SHARED(float, a, 8);
    const int t = threadIdx.x;
    a[t] = (float)t;
    __syncthreads();
    if (t + shift < 9) out[t] = a[t + shift];  // shift 1: thread 7 reads a[8]
}

// 16 threads: the 64 floats written as floats, then read as 16 float4.
__global__ void shared_float_as_float4_kernel(float *out) {
    RG_SHARED(float, sh, 64);
    const int t = threadIdx.x;
    for (int k = 0; k < 4; k++) sh[4 * t + k] = (float)(4 * t + k);
    __syncthreads();
    const float4 v = reinterpret_cast<const float4 *>(sh)[t];  // sh is only float-aligned
    out[t] = v.x + v.y + v.z + v.w;
}

__global__ void shared_float4_kernel(float *out) {
    RG_SHARED(float4, sh4, 16);
    float *sh = reinterpret_cast<float *>(sh4);
    const int t = threadIdx.x;
    for (int k = 0; k < 4; k++) sh[4 * t + k] = (float)(4 * t + k);
    __syncthreads();
    const float4 v = sh4[t];
    out[t] = v.x + v.y + v.z + v.w;
}

// Allocates n ints (zeroed) or floats, runs `launch`, copies them back.
template <class T, class F>
void with_buffer(int n, krace_result *r, T *host, F launch) {
    memset(r, 0, sizeof *r);
    T *d = nullptr;
    TRY(cudaMalloc(&d, sizeof(T) * (size_t)n));
    TRY(cudaMemset(d, 0, sizeof(T) * (size_t)n));
    launch(d);
    TRY(cudaGetLastError());
    TRY(cudaDeviceSynchronize());
    TRY(cudaMemcpy(host, d, sizeof(T) * (size_t)n, cudaMemcpyDeviceToHost));
    TRY(cudaFree(d));
    finish(r, cudaSuccess);
}

}  // namespace

extern "C" int krace_instrumented(void) {
#if defined(__SANITIZE_THREAD__)
    return 1;
#else
    return 0;
#endif
}

extern "C" void krace_shared_write_write(int broken, krace_result *r) {
    int h[1];
    with_buffer(1, r, h, [&](int *d) { RG_LAUNCH(shared_write_write_kernel, 1, 64, 0, 0, d, broken); });
    r->v[0] = h[0];
}

extern "C" void krace_shared_read_write(int broken, krace_result *r) {
    int h[64];
    with_buffer(64, r, h, [&](int *d) { RG_LAUNCH(shared_read_write_kernel, 1, 64, 0, 0, d, broken); });
    r->v[0] = h[63];
}

extern "C" void krace_warp_read_write(int broken, krace_result *r) {
    int h[32];
    with_buffer(32, r, h, [&](int *d) { RG_LAUNCH(warp_read_write_kernel, 1, 32, 0, 0, d, broken); });
    r->v[0] = h[31];
}

extern "C" void krace_block_order(int broken, krace_result *r) {
    int h[64];
    with_buffer(64, r, h, [&](int *d) {
        if (broken) {
            RG_LAUNCH(block_order_kernel, 64, 32, 0, 0, d, 1);
        } else {
            RG_LAUNCH(block_order_kernel, 1, 32, 0, 0, d, 1);
            RG_LAUNCH(block_order_kernel, 64, 32, 0, 0, d, 0);
        }
    });
    int sevens = 0;
    for (int i = 0; i < 64; i++) sevens += h[i] == 7;
    r->v[0] = sevens;
}

extern "C" void krace_atomics_across_blocks(krace_result *r) {
    unsigned h[1];
    with_buffer(1, r, h, [&](unsigned *d) { RG_LAUNCH(atomics_across_blocks_kernel, 64, 32, 0, 0, d); });
    r->v[0] = h[0];
}

extern "C" void krace_divergent_shuffle(int broken, krace_result *r) {
    float h[32];
    with_buffer(32, r, h, [&](float *d) { RG_LAUNCH(divergent_shuffle_kernel, 1, 32, 0, 0, d, broken); });
    r->v[0] = h[31];
}

extern "C" void krace_float4_load(int broken, krace_result *r) {
    float h[8];
    with_buffer(8, r, h, [&](float *d) { RG_LAUNCH(float4_load_kernel, 1, 1, 0, 0, d, broken ? 1 : 4, d); });
    r->v[0] = h[0];
}

extern "C" void krace_float4_store(int broken, krace_result *r) {
    float h[8];
    with_buffer(8, r, h, [&](float *d) { RG_LAUNCH(float4_store_kernel, 1, 1, 0, 0, d, broken ? 2 : 4); });
    r->v[0] = h[4];
}

extern "C" void krace_past_dynamic_shared(int broken, krace_result *r) {
    float h[32];
    with_buffer(32, r, h, [&](float *d) { RG_LAUNCH(past_dynamic_kernel, 1, 32, 32 * sizeof(float), 0, d, broken); });
    r->v[0] = h[0];
}

extern "C" void krace_past_static_shared(int broken, krace_result *r) {
    float h[8];
    with_buffer(8, r, h, [&](float *d) { RG_LAUNCH(past_static_kernel, 1, 8, 0, 0, d, broken); });
    r->v[0] = h[0];
}

extern "C" void krace_shared_float_as_float4(int broken, krace_result *r) {
    float h[16];
    with_buffer(16, r, h, [&](float *d) {
        if (broken) RG_LAUNCH(shared_float_as_float4_kernel, 1, 16, 0, 0, d);
        else RG_LAUNCH(shared_float4_kernel, 1, 16, 0, 0, d);
    });
    double s = 0;
    for (int i = 0; i < 16; i++) s += h[i];
    r->v[0] = s;
}
