// cuda_host_kernels.cu - kernels and host code for the runtime tests of the host
// execution (tests/test_cuda_host.c), written as any CUDA file of the backend is
// (RG_LAUNCH, RG_SHARED) and compiled only as the host twin. Correct kernels
// first, then the deliberately broken ones; every scenario is described in
// cuda_host_kernels.h.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/cuda_common.cuh"
#include "cuda_host_kernels.h"
#include "cuda_host_scenario.h"

namespace {

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// ===========================================================================
// Correct kernels
// ===========================================================================

// part[b] = sum of x over block b's elements: a tree in shared memory with a
// barrier between its levels (blockDim.x a power of two, <= 1024).
__global__ void block_sum_kernel(const float *x, int n, float *part) {
    RG_SHARED(float, sh, 1024);
    const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    sh[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        __syncthreads();
    }
    if (t == 0) part[blockIdx.x] = sh[0];
}

// The same tree with no barriers: thread t reads sh[t + s] before thread t + s has run.
__global__ void block_sum_no_barrier_kernel(const float *x, int n, float *part) {
    RG_SHARED(float, sh, 1024);
    const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    sh[t] = i < n ? x[i] : 0.0f;
    for (int s = blockDim.x / 2; s > 0; s >>= 1)
        if (t < s) sh[t] += sh[t + s];
    if (t == 0) part[blockIdx.x] = sh[0];
}

__global__ void warp_ops_kernel(khost_lane *out) {
    const unsigned full = 0xFFFFFFFFu;
    const int t = threadIdx.x, lane = t & 31;
    khost_lane o;
    float v = (float)(lane + 1);
    for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(full, v, d);
    o.sum_down = v;
    v = (float)(lane + 1);
    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(full, v, m);
    o.sum_xor = v;
    v = (float)(lane + 1);
    for (int m = 4; m > 0; m >>= 1) v += __shfl_xor_sync(full, v, m, 8);
    o.seg_sum = v;
    int s = lane + 1;
    for (int d = 1; d < 32; d <<= 1) {
        const int up = __shfl_up_sync(full, s, d);
        if (lane >= d) s += up;
    }
    o.scan = s;
    o.bcast = __shfl_sync(full, lane * 10, 5);
    o.ballot = __ballot_sync(full, lane % 3 == 0);
    o.all_true = __all_sync(full, 1);
    o.any7 = __any_sync(full, lane == 7);
    o.active = __activemask();
    o.match = __match_any_sync(full, lane / 4);
    o.reduce_add = __reduce_add_sync(full, (unsigned)lane);
    o.count_odd = __syncthreads_count(t & 1);
    out[t] = o;
}

__global__ void atomics_kernel(float *f, int *i, unsigned long long *u, double *d, int *mx, int *mn, int *cas_wins,
                               unsigned *exch) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(f, 1.0f);
    atomicAdd(i, 1);
    atomicAdd(u, 1ull);
    atomicAdd(d, 1.0);
    atomicMax(mx, t);
    atomicMin(mn, t);
    if (atomicCAS(cas_wins + 1, 0, 1) == 0) atomicAdd(cas_wins, 1);  // one thread wins the flag
    atomicExch(exch, atomicAdd(exch + 1, 1u) + 1);
}

// y[i] = x[n - 1 - i] through the block's dynamic shared memory (one block).
__global__ void reverse_dyn_kernel(const float *x, float *y, int n) {
    RG_SHARED_DYN(float, buf);
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = x[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = buf[n - 1 - i];
}

// Never given cudaFuncSetAttribute: its dynamic shared memory stays at the default limit.
__global__ void dyn_fill_kernel(float *x) {
    RG_SHARED_DYN(float, buf);
    buf[threadIdx.x] = 1.0f;
    x[threadIdx.x] = buf[threadIdx.x];
}

__global__ void affine_kernel(const float *x, float *y, int n, float a, float b) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a * x[i] + b;
}

__global__ void iota_kernel(float *x, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] = (float)i;
}

__global__ void thread_id_kernel(int *out) {
    const int per_block = blockDim.x * blockDim.y * blockDim.z;
    const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const int local = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    out[block * per_block + local] = block * per_block + local;
}

__global__ void fill_kernel(float *x, int n, float v) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}

// y[row] = softmax of row `row` of x ([cols, rows], one block per row), with
// warp shuffles and a block reduction: enough arithmetic for a replay to show
// a difference in bits.
__global__ void softmax_rows_kernel(const float *x, float *y, int cols) {
    RG_SHARED(float, sh, 32);
    const float *xr = x + (size_t)blockIdx.x * cols;
    float *yr = y + (size_t)blockIdx.x * cols;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float mx = -INFINITY;
    for (int k = threadIdx.x; k < cols; k += blockDim.x) mx = fmaxf(mx, xr[k]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
    if (lane == 0) sh[warp] = mx;
    __syncthreads();
    mx = sh[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++) mx = fmaxf(mx, sh[w]);
    __syncthreads();
    float sum = 0.0f;
    for (int k = threadIdx.x; k < cols; k += blockDim.x) {
        yr[k] = expf(xr[k] - mx);
        sum += yr[k];
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
    if (lane == 0) sh[warp] = sum;
    __syncthreads();
    sum = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) sum += sh[w];
    for (int k = threadIdx.x; k < cols; k += blockDim.x) yr[k] = yr[k] / sum;
}

// ===========================================================================
// Broken kernels
// ===========================================================================

// Lane sums through shared memory without __syncwarp: lane 0 reads sh[1..31]
// before lanes 1..31 have written them.
__global__ void warp_sum_smem_kernel(float *out) {
    RG_SHARED(float, sh, 32);
    const int lane = threadIdx.x & 31;
    sh[lane] = (float)(lane + 1);
    float s = 0.0f;
    for (int k = 0; k < 32; k++) s += sh[k];
    if (lane == 0) out[0] = s;
}

// Thread t reads sh[t - 1] with no barrier after the writes.
__global__ void neighbour_no_barrier_kernel(float *out) {
    RG_SHARED(float, sh, 64);
    const int t = threadIdx.x;
    sh[t] = (float)(t + 1);
    out[t] = t ? sh[t - 1] : 0.0f;
}

__global__ void oob_write_kernel(float *x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) x[i] = 1.0f;  // one past the end
}

__global__ void copy_kernel(const float *x, float *y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}

__global__ void barrier_after_exit_kernel(float *x) {
    if (threadIdx.x >= 200) return;  // these threads never reach the barrier
    x[threadIdx.x] = 1.0f;
    __syncthreads();
}

__global__ void shuffle_exited_lane_kernel(float *x) {
    if (threadIdx.x == 31) return;
    x[threadIdx.x] = __shfl_xor_sync(0xFFFFFFFFu, 1.0f, 1);
}

__global__ void deadlock_kernel(float *x) {
    if (threadIdx.x < 16) __syncwarp();  // waits for lanes 16..31 of warp 0
    else __syncthreads();                // which wait for lanes 0..15 here
    x[threadIdx.x] = 1.0f;
}

}  // namespace

// ===========================================================================
// Scenarios
// ===========================================================================

extern "C" void khost_device_info(char *name, int name_cap, khost_result *r) {
    memset(r, 0, sizeof *r);
    cudaDeviceProp p;
    int count = 0, v = 0;
    size_t free_b = 0, total_b = 0;
    TRY(cudaGetDeviceCount(&count));
    TRY(cudaGetDeviceProperties(&p, 0));
    TRY(cudaMemGetInfo(&free_b, &total_b));
    snprintf(name, (size_t)name_cap, "%s", p.name);
    r->v[0] = count;
    r->v[1] = p.major * 10 + p.minor;
    r->v[2] = p.warpSize;
    r->v[3] = (double)p.sharedMemPerBlock;
    r->v[4] = (double)p.sharedMemPerBlockOptin;
    r->v[5] = (double)(total_b >> 20);
    TRY(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0));
    r->v[6] = v;
    r->v[7] = cudaSetDevice(1) == cudaErrorInvalidDevice;
    cudaGetLastError();
    finish(r, cudaSuccess);
}

extern "C" void khost_block_sum(int n, int threads, int broken, khost_result *r) {
    memset(r, 0, sizeof *r);
    const int blocks = (n + threads - 1) / threads;
    float *hx = (float *)malloc((size_t)n * 4), *hp = (float *)malloc((size_t)blocks * 4);
    for (int i = 0; i < n; i++) hx[i] = (float)(i % 7 - 3);
    float *x = nullptr, *part = nullptr;
    cudaError_t e = cudaMalloc(&x, (size_t)n * 4);
    if (!e) e = cudaMalloc(&part, (size_t)blocks * 4);
    if (!e) e = cudaMemcpy(x, hx, (size_t)n * 4, cudaMemcpyHostToDevice);
    if (!e) {
        if (broken) RG_LAUNCH(block_sum_no_barrier_kernel, blocks, threads, 0, 0, x, n, part);
        else RG_LAUNCH(block_sum_kernel, blocks, threads, 0, 0, x, n, part);
        e = cudaGetLastError();
    }
    if (!e) e = cudaMemcpy(hp, part, (size_t)blocks * 4, cudaMemcpyDeviceToHost);
    double sum = 0;
    for (int b = 0; !e && b < blocks; b++) sum += hp[b];
    r->v[0] = sum;
    if (!e) e = cudaFree(x);
    if (!e) e = cudaFree(part);
    free(hx), free(hp);
    finish(r, e);
}

extern "C" void khost_warp_ops(int threads, khost_lane *out, khost_result *r) {
    memset(r, 0, sizeof *r);
    khost_lane *d = nullptr;
    TRY(cudaMalloc(&d, sizeof(khost_lane) * (size_t)threads));
    RG_LAUNCH(warp_ops_kernel, 1, threads, 0, 0, d);
    TRY(cudaGetLastError());
    TRY(cudaMemcpy(out, d, sizeof(khost_lane) * (size_t)threads, cudaMemcpyDeviceToHost));
    TRY(cudaFree(d));
    finish(r, cudaSuccess);
}

extern "C" void khost_warp_smem_no_sync(khost_result *r) {
    memset(r, 0, sizeof *r);
    float *d = nullptr, h = 0;
    TRY(cudaMalloc(&d, 4));
    RG_LAUNCH(warp_sum_smem_kernel, 1, 32, 0, 0, d);
    TRY(cudaMemcpy(&h, d, 4, cudaMemcpyDeviceToHost));
    r->v[0] = h;
    TRY(cudaFree(d));
    finish(r, cudaSuccess);
}

extern "C" void khost_atomics(int n, khost_result *r) {
    memset(r, 0, sizeof *r);
    struct {
        float f;
        int i;
        unsigned long long u;
        double d;
        int mx, mn, cas[2];
        unsigned exch[2];
    } h = {0, 0, 0, 0, -1, 1 << 30, {0, 0}, {0, 0}}, *d = nullptr;
    TRY(cudaMalloc(&d, sizeof h));
    TRY(cudaMemcpy(d, &h, sizeof h, cudaMemcpyHostToDevice));
    RG_LAUNCH(atomics_kernel, (n + 127) / 128, 128, 0, 0, &d->f, &d->i, &d->u, &d->d, &d->mx, &d->mn, d->cas,
              d->exch);
    TRY(cudaGetLastError());
    TRY(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
    TRY(cudaFree(d));
    const double v[8] = {h.f, (double)h.i, (double)h.u, h.d, (double)h.mx, (double)h.mn, (double)h.cas[0],
                         (double)h.exch[0]};
    memcpy(r->v, v, sizeof v);
    finish(r, cudaSuccess);
}

extern "C" void khost_dynamic_smem(int bytes, int set_attr, khost_result *r) {
    memset(r, 0, sizeof *r);
    const int n = bytes / 4;
    float *hx = (float *)malloc((size_t)bytes), *hy = (float *)malloc((size_t)bytes);
    for (int i = 0; i < n; i++) hx[i] = (float)i * 0.5f;
    float *x = nullptr, *y = nullptr;
    cudaError_t e = cudaMalloc(&x, (size_t)bytes);
    if (!e) e = cudaMalloc(&y, (size_t)bytes);
    if (!e) e = cudaMemcpy(x, hx, (size_t)bytes, cudaMemcpyHostToDevice);
    if (!e && set_attr) e = cudaFuncSetAttribute(reverse_dyn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (!e) {
        RG_LAUNCH(reverse_dyn_kernel, 1, 256, (size_t)bytes, 0, x, y, n);
        e = cudaGetLastError();
    }
    if (!e) e = cudaMemcpy(hy, y, (size_t)bytes, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; !e && i < n; i++) bad += hy[i] != hx[n - 1 - i];
    r->v[0] = bad;
    if (x) cudaFree(x);
    if (y) cudaFree(y);
    free(hx), free(hy);
    finish(r, e);
}

extern "C" void khost_grid_stride(int n, int blocks, int threads, khost_result *r) {
    memset(r, 0, sizeof *r);
    float *h = (float *)malloc((size_t)n * 4), *x = nullptr, *y = nullptr;
    cudaError_t e = cudaMalloc(&x, (size_t)n * 4);
    if (!e) e = cudaMalloc(&y, (size_t)n * 4);
    if (!e) {
        RG_LAUNCH(iota_kernel, blocks, threads, 0, 0, x, n);
        RG_LAUNCH(affine_kernel, blocks, threads, 0, 0, x, y, n, 2.0f, 1.0f);
        e = cudaGetLastError();
    }
    if (!e) e = cudaMemcpy(h, y, (size_t)n * 4, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; !e && i < n; i++) bad += h[i] != 2.0f * (float)i + 1.0f;
    r->v[0] = bad;
    if (x) cudaFree(x);
    if (y) cudaFree(y);
    free(h);
    finish(r, e);
}

extern "C" void khost_thread_ids(khost_result *r) {
    memset(r, 0, sizeof *r);
    const dim3 grid(3, 2, 2), block(8, 4, 3);
    const int total = 3 * 2 * 2 * 8 * 4 * 3;
    int *d = nullptr, *h = (int *)malloc((size_t)total * 4);
    TRY(cudaMalloc(&d, (size_t)total * 4));
    RG_LAUNCH(thread_id_kernel, grid, block, 0, 0, d);
    TRY(cudaGetLastError());
    TRY(cudaMemcpy(h, d, (size_t)total * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < total; i++) bad += h[i] != i;
    r->v[0] = bad;
    r->v[1] = total;
    free(h);
    TRY(cudaFree(d));
    finish(r, cudaSuccess);
}

extern "C" void khost_streams(int with_wait, khost_result *r) {
    memset(r, 0, sizeof *r);
    enum { N = 4096 };
    static float h[N];
    float *x = nullptr, *y = nullptr;
    cudaStream_t s1, s2;
    cudaEvent_t filled;
    TRY(cudaMalloc(&x, N * 4));
    TRY(cudaMalloc(&y, N * 4));
    TRY(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    TRY(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    TRY(cudaEventCreate(&filled));
    RG_LAUNCH(iota_kernel, N / 256, 256, 0, s1, x, (int)N);
    TRY(cudaEventRecord(filled, s1));
    if (with_wait) TRY(cudaStreamWaitEvent(s2, filled, 0));
    RG_LAUNCH(affine_kernel, N / 256, 256, 0, s2, x, y, (int)N, 1.0f, 1.0f);
    TRY(cudaMemcpyAsync(h, y, N * 4, cudaMemcpyDeviceToHost, s2));
    TRY(cudaStreamSynchronize(s2));  // only stream 2 (and what it waits for)
    int bad = 0;
    for (int i = 0; i < N; i++) bad += h[i] != (float)i + 1.0f;
    r->v[0] = bad;
    TRY(cudaEventDestroy(filled));
    TRY(cudaStreamDestroy(s1));
    TRY(cudaStreamDestroy(s2));
    TRY(cudaFree(x));
    TRY(cudaFree(y));
    finish(r, cudaSuccess);
}

extern "C" void khost_legacy_stream(khost_result *r) {
    memset(r, 0, sizeof *r);
    enum { N = 1024 };
    static float h[N];
    float *x = nullptr, *y = nullptr, *z = nullptr;
    cudaStream_t blocking, nonblocking;
    TRY(cudaMalloc(&x, N * 4));
    TRY(cudaMalloc(&y, N * 4));
    TRY(cudaMalloc(&z, N * 4));
    TRY(cudaStreamCreate(&blocking));
    TRY(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking));
    RG_LAUNCH(iota_kernel, N / 256, 256, 0, blocking, x, (int)N);
    RG_LAUNCH(iota_kernel, N / 256, 256, 0, nonblocking, z, (int)N);
    RG_LAUNCH(copy_kernel, N / 256, 256, 0, 0, x, y, (int)N);  // waits for the blocking stream
    TRY(cudaMemcpy(h, y, N * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < N; i++) bad += h[i] != (float)i;
    r->v[0] = bad;
    RG_LAUNCH(copy_kernel, N / 256, 256, 0, 0, z, y, (int)N);  // does not wait for the non-blocking one
    TRY(cudaMemcpy(h, y, N * 4, cudaMemcpyDeviceToHost));
    bad = 0;
    for (int i = 0; i < N; i++) bad += h[i] != (float)i;
    r->v[1] = bad;
    TRY(cudaStreamDestroy(blocking));
    TRY(cudaStreamDestroy(nonblocking));
    TRY(cudaFree(x));
    TRY(cudaFree(y));
    TRY(cudaFree(z));
    finish(r, cudaSuccess);
}

extern "C" void khost_async_stale(khost_result *r) {
    memset(r, 0, sizeof *r);
    float *d = nullptr, *h = nullptr;
    cudaStream_t s;
    TRY(cudaMalloc(&d, 256 * 4));
    TRY(cudaMallocHost(&h, 256 * 4));
    TRY(cudaStreamCreate(&s));
    for (int i = 0; i < 256; i++) h[i] = 7.0f;
    RG_LAUNCH(fill_kernel, 1, 256, 0, s, d, 256, 42.0f);
    TRY(cudaMemcpyAsync(h, d, 256 * 4, cudaMemcpyDeviceToHost, s));
    r->v[0] = h[100];  // too early: the copy has not run
    TRY(cudaStreamSynchronize(s));
    r->v[1] = h[100];
    TRY(cudaStreamDestroy(s));
    TRY(cudaFreeHost(h));
    TRY(cudaFree(d));
    finish(r, cudaSuccess);
}

namespace {

// The graph scenario's work: copy in, affine, softmax over rows, affine, copy out.
void graph_work(cudaStream_t s, const float *hin, float *hout, float *x, float *y, int cols, int rows) {
    const int n = cols * rows;
    cudaMemcpyAsync(x, hin, (size_t)n * 4, cudaMemcpyHostToDevice, s);
    RG_LAUNCH(affine_kernel, 4, 128, 0, s, x, x, n, 0.75f, -0.5f);
    RG_LAUNCH(softmax_rows_kernel, rows, 128, 0, s, x, y, cols);
    RG_LAUNCH(affine_kernel, 4, 128, 0, s, y, y, n, 3.0f, 0.25f);
    cudaMemcpyAsync(hout, y, (size_t)n * 4, cudaMemcpyDeviceToHost, s);
}

}  // namespace

extern "C" void khost_graph(khost_result *r) {
    memset(r, 0, sizeof *r);
    enum { COLS = 300, ROWS = 17, N = COLS * ROWS };
    static float hin[N], direct[N], replay[N];
    for (int i = 0; i < N; i++) hin[i] = sinf((float)i * 0.37f) * 4.0f;
    float *x = nullptr, *y = nullptr;
    cudaStream_t s;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    TRY(cudaMalloc(&x, N * 4));
    TRY(cudaMalloc(&y, N * 4));
    TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    graph_work(s, hin, direct, x, y, COLS, ROWS);
    TRY(cudaStreamSynchronize(s));
    TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    graph_work(s, hin, replay, x, y, COLS, ROWS);
    TRY(cudaStreamEndCapture(s, &g));
    TRY(cudaGraphInstantiate(&ge, g, 0));
    int bad = 0;
    for (int rep = 0; rep < 2; rep++) {
        memset(replay, 0, sizeof replay);
        TRY(cudaGraphLaunch(ge, s));
        TRY(cudaStreamSynchronize(s));
        for (int i = 0; i < N; i++) bad += memcmp(&replay[i], &direct[i], 4) != 0;
    }
    r->v[0] = bad;
    r->v[1] = 2;
    TRY(cudaGraphExecDestroy(ge));
    TRY(cudaGraphDestroy(g));
    // Synchronizing inside a capture is refused and spoils the capture.
    TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    RG_LAUNCH(fill_kernel, 1, 32, 0, s, x, 32, 1.0f);
    r->v[2] = cudaStreamSynchronize(s);
    r->v[3] = cudaStreamEndCapture(s, &g);
    cudaGetLastError();
    TRY(cudaStreamDestroy(s));
    TRY(cudaFree(x));
    TRY(cudaFree(y));
    finish(r, cudaSuccess);
}

namespace {
void CUDART_CB mark_done(void *flag) { *(int *)flag = 1; }
}  // namespace

extern "C" void khost_events(khost_result *r) {
    memset(r, 0, sizeof *r);
    float *d = nullptr;
    cudaEvent_t a, b;
    cudaStream_t s;
    static int flag;
    flag = 0;
    TRY(cudaMalloc(&d, 1 << 20));
    TRY(cudaStreamCreate(&s));
    TRY(cudaEventCreate(&a));
    TRY(cudaEventCreate(&b));
    TRY(cudaEventRecord(a, s));
    RG_LAUNCH(iota_kernel, 64, 256, 0, s, d, 1 << 18);
    TRY(cudaLaunchHostFunc(s, mark_done, &flag));
    TRY(cudaEventRecord(b, s));
    const int before = flag;
    TRY(cudaEventSynchronize(b));
    float ms = -1;
    TRY(cudaEventElapsedTime(&ms, a, b));
    r->v[0] = ms;
    r->v[1] = cudaEventQuery(b);
    r->v[2] = flag == 1 && before == 0;
    TRY(cudaEventDestroy(a));
    TRY(cudaEventDestroy(b));
    TRY(cudaStreamDestroy(s));
    TRY(cudaFree(d));
    finish(r, cudaSuccess);
}

extern "C" void khost_config_error(int which, khost_result *r) {
    memset(r, 0, sizeof *r);
    float *d = nullptr;
    TRY(cudaMalloc(&d, 4096));
    switch (which) {
    case 0: RG_LAUNCH(fill_kernel, 1, 1025, 0, 0, d, 1, 0.0f); break;
    case 1: RG_LAUNCH(fill_kernel, 0, 32, 0, 0, d, 1, 0.0f); break;
    case 2: RG_LAUNCH(dyn_fill_kernel, 1, 32, 64 * 1024, 0, d); break;
    default: RG_LAUNCH(fill_kernel, 1, dim3(1, 1, 65), 0, 0, d, 1, 0.0f); break;
    }
    const cudaError_t e = cudaGetLastError();
    r->v[0] = cudaGetLastError();  // a launch error is not sticky: cleared by the read
    r->v[1] = cudaFree(d);
    r->err = (int)e;
    snprintf(r->name, sizeof r->name, "%s", cudaGetErrorName(e));
    snprintf(r->msg, sizeof r->msg, "%s", cudaGetErrorString(e));  // the detail stays with the code
}

extern "C" void khost_memory_limit(int mb, khost_result *r) {
    memset(r, 0, sizeof *r);
    char v[32];
    snprintf(v, sizeof v, "%d", mb);
    setenv("RETRO_CUDA_HOST_MEM_MB", v, 1);
    cudaDeviceReset();  // the mapping is reserved again with the new size
    size_t free_b = 0, total_b = 0;
    void *big = nullptr, *half = nullptr;
    TRY(cudaMemGetInfo(&free_b, &total_b));
    r->v[0] = (double)(total_b >> 20);
    r->v[1] = cudaMalloc(&big, ((size_t)mb + 1) << 20);
    cudaGetLastError();
    TRY(cudaMalloc(&half, (size_t)mb << 19));
    TRY(cudaMemGetInfo(&free_b, &total_b));
    r->v[2] = (double)free_b / 1048576.0;
    TRY(cudaFree(half));
    unsetenv("RETRO_CUDA_HOST_MEM_MB");
    cudaDeviceReset();
    finish(r, cudaSuccess);
}

extern "C" void khost_launch_time(khost_result *r) {
    memset(r, 0, sizeof *r);
    float *x = nullptr;
    TRY(cudaMalloc(&x, 1000000 * 4));
    const int sizes[2] = {100000, 1000000};
    for (int k = 0; k < 2; k++) {
        const double t0 = now_s();
        RG_LAUNCH(fill_kernel, sizes[k] / 250, 250, 0, 0, x, sizes[k], 1.0f);
        TRY(cudaDeviceSynchronize());
        r->v[k] = now_s() - t0;
    }
    TRY(cudaFree(x));
    finish(r, cudaSuccess);
}

// ---------------------------------------------------------------------------
// Broken

extern "C" void khost_neighbour_no_barrier(khost_result *r) {
    memset(r, 0, sizeof *r);
    float *d = nullptr, h[64];
    TRY(cudaMalloc(&d, sizeof h));
    RG_LAUNCH(neighbour_no_barrier_kernel, 1, 64, 0, 0, d);
    TRY(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    int nan = 0;
    for (int i = 0; i < 64; i++) nan += h[i] != h[i];
    r->v[0] = nan;
    TRY(cudaFree(d));
    finish(r, cudaSuccess);
}

extern "C" void khost_oob_write(khost_result *r) {
    memset(r, 0, sizeof *r);
    float *d = nullptr;
    TRY(cudaMalloc(&d, 1000 * 4));
    RG_LAUNCH(oob_write_kernel, 4, 256, 0, 0, d, 1000);
    finish(r, cudaDeviceSynchronize());
}

extern "C" void khost_host_pointer_arg(khost_result *r) {
    memset(r, 0, sizeof *r);
    static float host[64];
    float *d = nullptr;
    TRY(cudaMalloc(&d, 64 * 4));
    RG_LAUNCH(copy_kernel, 1, 64, 0, 0, d, host, 64);
    const cudaError_t at_launch = cudaGetLastError();
    r->v[0] = at_launch;
    finish(r, cudaDeviceSynchronize());
}

extern "C" void khost_use_after_free(khost_result *r) {
    memset(r, 0, sizeof *r);
    float *a = nullptr, *b = nullptr;
    TRY(cudaMalloc(&a, 64 * 4));
    TRY(cudaMalloc(&b, 64 * 4));
    TRY(cudaFree(a));
    RG_LAUNCH(copy_kernel, 1, 64, 0, 0, a, b, 64);
    finish(r, cudaDeviceSynchronize());
}

extern "C" void khost_barrier_after_exit(khost_result *r) {
    memset(r, 0, sizeof *r);
    float *d = nullptr;
    TRY(cudaMalloc(&d, 256 * 4));
    RG_LAUNCH(barrier_after_exit_kernel, 2, 256, 0, 0, d);
    finish(r, cudaDeviceSynchronize());
}

extern "C" void khost_shuffle_exited_lane(khost_result *r) {
    memset(r, 0, sizeof *r);
    float *d = nullptr;
    TRY(cudaMalloc(&d, 32 * 4));
    RG_LAUNCH(shuffle_exited_lane_kernel, 1, 32, 0, 0, d);
    finish(r, cudaDeviceSynchronize());
}

extern "C" void khost_deadlock(khost_result *r) {
    memset(r, 0, sizeof *r);
    float *d = nullptr;
    TRY(cudaMalloc(&d, 64 * 4));
    RG_LAUNCH(deadlock_kernel, 1, 64, 0, 0, d);
    finish(r, cudaDeviceSynchronize());
}

extern "C" void khost_deref_device_pointer(void) {
    float *d = nullptr;
    if (cudaMalloc(&d, 64 * 4) != cudaSuccess) return;
    volatile float *p = d;
    p[3] = 1.0f;  // host code: the device mapping is not accessible here
}
