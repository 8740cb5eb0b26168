// cuda_host_kernels_capture.cu - kernels and host code for the runtime tests of
// struct-held pointers, graph replay, capture rules and interleaved streams
// (tests/test_cuda_host_capture.c), written as any CUDA file of the backend is
// and compiled only as the host twin; each scenario is described in
// cuda_host_kernels_capture.h.
#include <stdio.h>
#include <string.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "cuda/cuda_common.cuh"
#include "cuda_host_kernels_capture.h"
#include "cuda_host_scenario.h"

namespace {

constexpr int N = 1024;

// Pointers in a struct argument, an array of them too.
struct cap_bufs {
    const float *x;
    float *out[2];
    int n;
};
RG_KERNEL_POINTERS(cap_bufs, x, out)

// A struct whose descriptor forgets `extra`, and its twin that lists it.
struct cap_sneaky {
    float *y;
    int64_t n;
    float *extra;
};
RG_KERNEL_POINTERS(cap_sneaky, y)
struct cap_listed {
    float *y;
    int64_t n;
    float *extra;
};
RG_KERNEL_POINTERS(cap_listed, y, extra)

// Written without a descriptor: a kernel taking it would not compile in the host twin.
struct cap_plain {
    float *y;
    int n;
};

__global__ void struct_copy_kernel(cap_bufs b) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < b.n) b.out[0][i] = b.out[1][i] = b.x[i];
}

template <class S>
__global__ void ones_kernel(S s) {
    const int64_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < s.n) s.y[i] = 1.0f;
    if (s.extra && i == 0) s.extra[0] = 2.0f;
}

__global__ void iota_kernel(float *x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = (float)i;
}

__global__ void plus_one_kernel(const float *x, float *y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + 1.0f;
}

// Elements of the device array d that are not i + add.
int wrong(const float *d, float add) {
    static float h[N];
    if (cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess) return -1;
    int bad = 0;
    for (int i = 0; i < N; i++) bad += h[i] != (float)i + add;
    return bad;
}

}  // namespace

extern "C" void khcap_descriptor_trait(khost_result *r) {
    memset(r, 0, sizeof *r);
    r->v[0] = rgh::has_pointer_desc<cap_bufs>::value && !rgh::has_pointer_desc<cap_plain>::value;
    finish(r, cudaSuccess);
}

extern "C" void khcap_struct_pointers(int broken, khost_result *r) {
    memset(r, 0, sizeof *r);
    static float host[N];
    float *x = nullptr, *a = nullptr, *b = nullptr;
    TRY(cudaMalloc(&x, N * 4));
    TRY(cudaMalloc(&a, N * 4));
    TRY(cudaMalloc(&b, N * 4));
    RG_LAUNCH(iota_kernel, N / 256, 256, 0, 0, x, N);
    const cap_bufs bufs = {x, {a, broken ? host : b}, N};
    RG_LAUNCH(struct_copy_kernel, N / 256, 256, 0, 0, bufs);
    TRY(cudaGetLastError());
    TRY(cudaDeviceSynchronize());
    r->v[0] = wrong(a, 0.0f) + wrong(b, 0.0f);
    TRY(cudaFree(x));
    TRY(cudaFree(a));
    TRY(cudaFree(b));
    finish(r, cudaSuccess);
}

extern "C" void khcap_struct_undeclared(int broken, khost_result *r) {
    memset(r, 0, sizeof *r);
    float *y = nullptr, *extra = nullptr;
    TRY(cudaMalloc(&y, N * 4));
    TRY(cudaMalloc(&extra, 4));
    if (broken) {
        const cap_sneaky s = {y, N, extra};
        RG_LAUNCH(ones_kernel<cap_sneaky>, N / 256, 256, 0, 0, s);
    } else {
        const cap_listed s = {y, N, extra};
        RG_LAUNCH(ones_kernel<cap_listed>, N / 256, 256, 0, 0, s);
    }
    TRY(cudaGetLastError());
    TRY(cudaDeviceSynchronize());
    TRY(cudaFree(y));
    TRY(cudaFree(extra));
    finish(r, cudaSuccess);
}

extern "C" void khcap_graph_stale(int what, khost_result *r) {
    memset(r, 0, sizeof *r);
    cudaDeviceReset();  // a fresh mapping: a block freed here is the first free one of its size
    float *x = nullptr, *a = nullptr, *b = nullptr, *z = nullptr;
    cudaStream_t s;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    TRY(cudaMalloc(&x, N * 4));
    TRY(cudaMalloc(&a, N * 4));
    TRY(cudaMalloc(&b, N * 4));
    TRY(cudaMalloc(&z, N * 4));
    TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    RG_LAUNCH(iota_kernel, N / 256, 256, 0, s, x, N);
    TRY(cudaStreamSynchronize(s));
    TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    const cap_bufs bufs = {x, {a, b}, N};
    RG_LAUNCH(struct_copy_kernel, N / 256, 256, 0, s, bufs);
    TRY(cudaMemcpyAsync(z, b, N * 4, cudaMemcpyDeviceToDevice, s));
    TRY(cudaStreamEndCapture(s, &g));
    TRY(cudaGraphInstantiate(&ge, g, 0));
    TRY(cudaGraphDestroy(g));
    TRY(cudaGraphLaunch(ge, s));
    TRY(cudaStreamSynchronize(s));
    r->v[0] = wrong(a, 0.0f) + wrong(z, 0.0f);
    if (what == 1 || what == 2) TRY(cudaFree(a));
    if (what == 2) {
        // Push `a` out of the quarantine with larger blocks, then allocate its size again.
        for (int k = 0; k < 70; k++) {
            float *d = nullptr;
            TRY(cudaMalloc(&d, 4 * N * 4));
            TRY(cudaFree(d));
        }
        float *again = nullptr;
        TRY(cudaMalloc(&again, N * 4));
        r->v[1] = again == a;
    }
    if (what == 3) TRY(cudaFree(z));
    TRY(cudaGraphLaunch(ge, s));
    TRY(cudaStreamSynchronize(s));
    r->v[0] += wrong(a, 0.0f) + wrong(z, 0.0f);
    TRY(cudaGraphExecDestroy(ge));
    TRY(cudaStreamDestroy(s));
    finish(r, cudaSuccess);
}

namespace {

// The call khcap_capture_call makes during the capture.
cudaError_t capture_call(int call, float *spare, void **made, void **pinned) {
    static float one = 1.0f;
    switch (call) {
    case 0: return cudaMalloc(made, 256);
    case 1: return cudaMemcpy(spare, &one, 4, cudaMemcpyHostToDevice);
    case 2: return cudaDeviceSynchronize();
    case 3: return cudaFree(spare);
    case 4: return cudaMallocHost(pinned, 64);
    }
    return cudaErrorInvalidValue;
}

}  // namespace

extern "C" void khcap_capture_call(int mode, int other_thread, int call, khost_result *r) {
    memset(r, 0, sizeof *r);
    float *x = nullptr, *spare = nullptr;
    void *made = nullptr, *pinned = nullptr;
    cudaStream_t s;
    cudaGraph_t g = nullptr;
    TRY(cudaMalloc(&x, N * 4));
    TRY(cudaMalloc(&spare, 4));
    TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const cudaStreamCaptureMode m = (cudaStreamCaptureMode)mode;
    cudaError_t e, end = cudaSuccess;
    char msg[768];
    if (!other_thread) {
        TRY(cudaStreamBeginCapture(s, m));
        RG_LAUNCH(iota_kernel, N / 256, 256, 0, s, x, N);
        e = capture_call(call, spare, &made, &pinned);
        snprintf(msg, sizeof msg, "%s", cudaGetErrorString(e));
        end = cudaStreamEndCapture(s, &g);
    } else {
        // The capture belongs to another thread, which ends it once this one has made the call.
        std::mutex mu;
        std::condition_variable cv;
        int stage = 0;
        std::thread t([&] {
            cudaError_t b = cudaStreamBeginCapture(s, m);
            if (b == cudaSuccess) RG_LAUNCH(iota_kernel, N / 256, 256, 0, s, x, N);
            {
                std::lock_guard<std::mutex> l(mu);
                stage = 1;
            }
            cv.notify_all();
            std::unique_lock<std::mutex> l(mu);
            cv.wait(l, [&] { return stage == 2; });
            end = b != cudaSuccess ? b : cudaStreamEndCapture(s, &g);
        });
        {
            std::unique_lock<std::mutex> l(mu);
            cv.wait(l, [&] { return stage == 1; });
        }
        e = capture_call(call, spare, &made, &pinned);
        snprintf(msg, sizeof msg, "%s", cudaGetErrorString(e));
        {
            std::lock_guard<std::mutex> l(mu);
            stage = 2;
        }
        cv.notify_all();
        t.join();
    }
    r->v[0] = end;
    cudaGetLastError();
    if (end == cudaSuccess) {
        cudaGraphExec_t ge;
        TRY(cudaGraphInstantiate(&ge, g, 0));
        TRY(cudaGraphDestroy(g));
        TRY(cudaGraphLaunch(ge, s));
        TRY(cudaStreamSynchronize(s));
        r->v[1] = wrong(x, 0.0f);
        TRY(cudaGraphExecDestroy(ge));
    }
    if (e == cudaSuccess) {
        if (made) TRY(cudaFree(made));
        if (pinned) TRY(cudaFreeHost(pinned));
        if (call != 3) TRY(cudaFree(spare));
        TRY(cudaFree(x));
        TRY(cudaStreamDestroy(s));
    }
    finish(r, e, msg);
}

extern "C" void khcap_two_streams(int with_wait, khost_result *r) {
    memset(r, 0, sizeof *r);
    float *x = nullptr, *y = nullptr;
    cudaStream_t s1, s2;
    cudaEvent_t filled;
    TRY(cudaMalloc(&x, N * 4));
    TRY(cudaMalloc(&y, N * 4));
    TRY(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    TRY(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    TRY(cudaEventCreateWithFlags(&filled, cudaEventDisableTiming));
    RG_LAUNCH(iota_kernel, N / 256, 256, 0, s1, x, N);
    TRY(cudaEventRecord(filled, s1));
    if (with_wait) TRY(cudaStreamWaitEvent(s2, filled, 0));
    RG_LAUNCH(plus_one_kernel, N / 256, 256, 0, s2, x, y, N);
    TRY(cudaDeviceSynchronize());  // both streams, in the drain order
    r->v[0] = wrong(y, 1.0f);
    TRY(cudaEventDestroy(filled));
    TRY(cudaStreamDestroy(s1));
    TRY(cudaStreamDestroy(s2));
    TRY(cudaFree(x));
    TRY(cudaFree(y));
    finish(r, cudaSuccess);
}

extern "C" void khcap_pool_in_capture(int what, khost_result *r) {
    memset(r, 0, sizeof *r);
    rg_cuda_ctx *ctx = nullptr;
    rg_error err;
    err.msg[0] = 0;
    rg_status st = rg_cuda_ctx_create(&ctx, 0, &err);
    void *p = nullptr, *graph = nullptr;
    const size_t bytes = (size_t)3 << 20;
    if (!st && what) st = rg_cuda_pool_get(ctx, RG_CU_BUF_TMP2, bytes, &p, nullptr, &err);
    if (!st) st = rg_cuda_graph_begin(ctx, &err);
    if (!st) {
        st = rg_cuda_pool_get(ctx, RG_CU_BUF_TMP2, bytes, &p, nullptr, &err);
        if (!st) RG_LAUNCH(iota_kernel, N / 256, 256, 0, ctx->stream, (float *)p, N);
        rg_error e2;
        const rg_status se = rg_cuda_graph_end(ctx, &graph, st ? &e2 : &err);
        if (!st) st = se;
    }
    if (!st && what == 2) {
        // The pool grows after the capture; the graph still replays its old buffer.
        void *bigger = nullptr;
        st = rg_cuda_pool_get(ctx, RG_CU_BUF_TMP2, 4 * bytes, &bigger, nullptr, &err);
        if (!st) st = rg_cuda_graph_launch(ctx, graph, &err);
        if (!st) st = rg_cuda_sync(ctx, &err);
        r->v[1] = bigger != p;
    }
    r->v[0] = ctx ? (double)ctx->buf[RG_CU_BUF_TMP2].cap : 0;
    if (graph) rg_cuda_graph_free(ctx, graph);
    if (ctx) rg_cuda_ctx_free(ctx);
    r->err = (int)st;
    snprintf(r->name, sizeof r->name, "%s", rg_status_name(st));
    snprintf(r->msg, sizeof r->msg, "%s", st ? err.msg : "");
    if (st) cudaDeviceReset();
}

extern "C" void khcap_graph_fork(int with_wait, khost_result *r) {
    memset(r, 0, sizeof *r);
    float *x = nullptr, *y = nullptr;
    cudaStream_t s1, s2;
    cudaEvent_t fork, filled, join;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    TRY(cudaMalloc(&x, N * 4));
    TRY(cudaMalloc(&y, N * 4));
    TRY(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    TRY(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    TRY(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    TRY(cudaEventCreateWithFlags(&filled, cudaEventDisableTiming));
    TRY(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    TRY(cudaStreamBeginCapture(s1, cudaStreamCaptureModeThreadLocal));
    TRY(cudaEventRecord(fork, s1));
    TRY(cudaStreamWaitEvent(s2, fork, 0));  // stream 2 joins the capture
    RG_LAUNCH(iota_kernel, N / 256, 256, 0, s1, x, N);
    if (with_wait) {
        TRY(cudaEventRecord(filled, s1));
        TRY(cudaStreamWaitEvent(s2, filled, 0));
    }
    RG_LAUNCH(plus_one_kernel, N / 256, 256, 0, s2, x, y, N);
    TRY(cudaEventRecord(join, s2));
    TRY(cudaStreamWaitEvent(s1, join, 0));
    TRY(cudaStreamEndCapture(s1, &g));
    TRY(cudaGraphInstantiate(&ge, g, 0));
    TRY(cudaGraphDestroy(g));
    TRY(cudaGraphLaunch(ge, s1));
    TRY(cudaStreamSynchronize(s1));
    r->v[0] = wrong(y, 1.0f);
    TRY(cudaGraphExecDestroy(ge));
    TRY(cudaEventDestroy(fork));
    TRY(cudaEventDestroy(filled));
    TRY(cudaEventDestroy(join));
    TRY(cudaStreamDestroy(s1));
    TRY(cudaStreamDestroy(s2));
    TRY(cudaFree(x));
    TRY(cudaFree(y));
    finish(r, cudaSuccess);
}
