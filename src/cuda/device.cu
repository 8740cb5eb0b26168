// device.cu - device discovery, the first kernel of the CUDA backend, and the
// per-executor context: device, stream, cuBLAS handle, a grow-only memory pool
// and the copy counters (the ops themselves are in ops.cu).
// FMA rule (nvcc builds with --fmad=false, scripts/check-fma.sh): none; the one add kernel
// rounds as the CPU's add.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_common.cuh"

// On failure the runtime's last error is cleared too: a failed call records
// it, and the next launch's cudaGetLastError() would report it again.
#define RG_CUDA_TRY(call, what)                                                                       \
    do {                                                                                              \
        cudaError_t e_ = (call);                                                                      \
        if (e_ != cudaSuccess) {                                                                      \
            st = rg_fail(err, RG_ERR_IO, "cuda device %d: %s failed: %s (%s:%d)", index, what,      \
                         cudaGetErrorString(e_), __FILE__, __LINE__);                                 \
            cudaGetLastError();                                                                       \
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
    out->mem_bus_bits = p.memoryBusWidth;
    // The clocks left cudaDeviceProp in CUDA 13. A device that does not report them still
    // works: the peaks built on them (test_ops perf) are then unknown, not an error.
    if (cudaDeviceGetAttribute(&out->clock_khz, cudaDevAttrClockRate, index) != cudaSuccess) out->clock_khz = 0;
    if (cudaDeviceGetAttribute(&out->mem_clock_khz, cudaDevAttrMemoryClockRate, index) != cudaSuccess)
        out->mem_clock_khz = 0;
    cudaGetLastError();
    RG_CUDA_TRY(cudaDriverGetVersion(&out->driver_version), "cudaDriverGetVersion");
    RG_CUDA_TRY(cudaRuntimeGetVersion(&out->runtime_version), "cudaRuntimeGetVersion");
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
    RG_LAUNCH(add_f32_kernel, (unsigned)((n + 255) / 256), 256, 0, 0, da, db, dy, n);
    RG_CUDA_TRY(cudaGetLastError(), "kernel launch");
    RG_CUDA_TRY(cudaMemcpy(y, dy, bytes, cudaMemcpyDeviceToHost), "copy to host");
done:
    cudaFree(da);
    cudaFree(db);
    cudaFree(dy);
    return st;
}

// ---------------------------------------------------------------------------
// Errors

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static const char *node_op(const struct rg_node *n) { return n ? rg_op_name(n->op) : "context"; }
static const char *node_name(const struct rg_node *n) { return n ? n->t.name : ""; }
static int node_id(const struct rg_node *n) { return n ? n->id : -1; }

rg_status rg_cu_fail(rg_error *err, const struct rg_node *n, const char *call, cudaError_t e, const char *file,
                     int line) {
    cudaGetLastError();  // a non-sticky error must not be reported again by the next call
    return rg_fail(err, e == cudaErrorMemoryAllocation ? RG_ERR_NOMEM : RG_ERR_IO,
                   "cuda %s '%s' (node %d): %s failed: %s (%s) at %s:%d", node_op(n), node_name(n), node_id(n), call,
                   cudaGetErrorName(e), cudaGetErrorString(e), base_name(file), line);
}

rg_status rg_cublas_fail(rg_error *err, const struct rg_node *n, const char *call, cublasStatus_t s,
                         const char *file, int line) {
    cudaGetLastError();
    return rg_fail(err, s == CUBLAS_STATUS_ALLOC_FAILED ? RG_ERR_NOMEM : RG_ERR_IO,
                   "cuda %s '%s' (node %d): %s failed: %s (%s) at %s:%d", node_op(n), node_name(n), node_id(n),
                   call, cublasGetStatusName(s), cublasGetStatusString(s), base_name(file), line);
}

// ---------------------------------------------------------------------------
// The context

// RETRO_CUDA_DEQUANT_BUDGET_MB (or the seed's GGML_CUDA_DEQUANT_BUDGET_MB; cuda.h,
// rg_cuda_dequant_budget_env): bytes of weight decoded at once by a wide quantized product
// (ops_quant_mm.cu) or widened by an F16/BF16 MUL_MAT under RETRO_CUDA_HALF_GEMM=f32; 0 = no
// slicing. Default 64 MiB. A value that is not an integer fails the context's creation,
// naming the variable and the value.
static rg_status dequant_budget_from_env(int device, size_t *out, rg_error *err) {
    char why[160];
    if (rg_cuda_dequant_budget_env(out, why, sizeof why) < 0)
        return rg_fail(err, RG_ERR_ARG, "cuda device %d: %s", device, why);
    return RG_OK;
}

static rg_status ctx_init(rg_cuda_ctx *ctx, int device, rg_error *err) {
    const struct rg_node *n = NULL;
    CU_TRY(cudaSetDevice(device));
    CU_TRY(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
    CUBLAS_TRY(cublasCreate(&ctx->cublas));
    CUBLAS_TRY(cublasSetStream(ctx->cublas, ctx->stream));
    // True F32 GEMMs: no TF32 or other reduced-precision shortcuts, whatever the defaults.
    CUBLAS_TRY(cublasSetMathMode(ctx->cublas, CUBLAS_PEDANTIC_MATH));
    // Deterministic results: no kernels that sum with atomics.
    CUBLAS_TRY(cublasSetAtomicsMode(ctx->cublas, CUBLAS_ATOMICS_NOT_ALLOWED));
    RG_TRY(dequant_budget_from_env(device, &ctx->dequant_budget, err));
    char why[160];
    ctx->half_gemm = rg_cuda_half_gemm_env(why, sizeof why);
    if (ctx->half_gemm < 0) return rg_fail(err, RG_ERR_ARG, "cuda device %d: %s", device, why);
    return RG_OK;
}

extern "C" rg_status rg_cuda_ctx_create(rg_cuda_ctx **out, int device, rg_error *err) {
    *out = NULL;
    char reason[256] = "";
    int count = rg_cuda_device_count(reason, sizeof reason);
    if (count <= 0) return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda device %d: %s", device, reason);
    if (device < 0 || device >= count)
        return rg_fail(err, RG_ERR_ARG, "cuda device %d: no such device (%d present)", device, count);
    rg_cuda_ctx *ctx = (rg_cuda_ctx *)calloc(1, sizeof *ctx);
    if (!ctx) return rg_fail(err, RG_ERR_NOMEM, "cuda device %d: out of host memory", device);
    ctx->device = device;
    rg_status st = ctx_init(ctx, device, err);
    if (st != RG_OK) {
        rg_cuda_ctx_free(ctx);
        return st;
    }
    *out = ctx;
    return RG_OK;
}

// Frees the pool buffers kept for graphs (cudaFree waits for the device).
static void free_retired(rg_cuda_ctx *ctx) {
    for (int i = 0; i < ctx->n_retired; i++) cudaFree(ctx->retired[i]);
    free(ctx->retired);
    ctx->retired = NULL, ctx->n_retired = 0, ctx->retired_bytes = 0;
}

extern "C" void rg_cuda_ctx_free(rg_cuda_ctx *ctx) {
    if (!ctx) return;
    // Errors are ignored here: a context is freed on error paths too.
    cudaSetDevice(ctx->device);
    if (ctx->stream) cudaStreamSynchronize(ctx->stream);
    for (int i = 0; i < RG_CU_BUF_COUNT; i++) cudaFree(ctx->buf[i].ptr);
    free_retired(ctx);
    cudaFree(ctx->qtables);
    if (ctx->cublas) cublasDestroy(ctx->cublas);
    if (ctx->stream) cudaStreamDestroy(ctx->stream);
    cudaGetLastError();
    free(ctx);
}

// ---------------------------------------------------------------------------
// Device memory and stream-ordered copies (the backend object's calls)

extern "C" rg_status rg_cuda_mem_alloc(rg_cuda_ctx *ctx, size_t bytes, void **out, rg_error *err) {
    *out = NULL;
    cudaError_t e = cudaMalloc(out, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaGetLastError();
        cudaMemGetInfo(&fr, &tot);
        cudaGetLastError();
        return rg_fail(err, RG_ERR_NOMEM, "cuda: cannot allocate %.2f MiB of device memory (%.2f MiB free of %.2f MiB): %s",
                       (double)bytes / 1048576.0, (double)fr / 1048576.0, (double)tot / 1048576.0, cudaGetErrorString(e));
    }
    ctx->alloc_bytes += bytes;  // counted as allocated: the executor frees its buffers only at its end
    return RG_OK;
}

extern "C" void rg_cuda_mem_free(rg_cuda_ctx *ctx, void *p) {
    if (!p) return;
    // cudaFree waits for the device; the executor frees only after its last run.
    cudaFree(p);
    cudaGetLastError();
    (void)ctx;
}

extern "C" rg_status rg_cuda_copy_h2d(rg_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, rg_error *err) {
    const struct rg_node *n = NULL;
    if (!bytes) return RG_OK;
    // From pageable host memory this returns once the bytes are staged: the caller may reuse them.
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx->stream));
    return RG_OK;
}

extern "C" rg_status rg_cuda_copy_d2h(rg_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, rg_error *err) {
    const struct rg_node *n = NULL;
    if (!bytes) return RG_OK;
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx->stream));
    CU_TRY(cudaStreamSynchronize(ctx->stream));
    return RG_OK;
}

extern "C" rg_status rg_cuda_mem_zero(rg_cuda_ctx *ctx, void *dst, size_t bytes, rg_error *err) {
    const struct rg_node *n = NULL;
    if (!bytes) return RG_OK;
    CU_TRY(cudaMemsetAsync(dst, 0, bytes, ctx->stream));
    return RG_OK;
}

extern "C" rg_status rg_cuda_sync(rg_cuda_ctx *ctx, rg_error *err) {
    const struct rg_node *n = NULL;
    CU_TRY(cudaStreamSynchronize(ctx->stream));
    return RG_OK;
}

extern "C" rg_status rg_cuda_mem_info(rg_cuda_ctx *ctx, size_t *free_bytes, size_t *total_bytes, rg_error *err) {
    const struct rg_node *n = NULL;
    (void)ctx;
    CU_TRY(cudaMemGetInfo(free_bytes, total_bytes));
    return RG_OK;
}

// ---------------------------------------------------------------------------
// CUDA Graphs: the executor captures a whole run once its inputs' bytes and every node's
// parameters are the same as the run before (exec_capture.c), and replays it after that.

extern "C" rg_status rg_cuda_graph_begin(rg_cuda_ctx *ctx, rg_error *err) {
    const struct rg_node *n = NULL;
    CU_TRY(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal));
    ctx->capturing = true;
    return RG_OK;
}

extern "C" rg_status rg_cuda_graph_end(rg_cuda_ctx *ctx, void **graph, rg_error *err) {
    const struct rg_node *n = NULL;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    *graph = NULL;
    ctx->capturing = false;
    CU_TRY(cudaStreamEndCapture(ctx->stream, &g));
    cudaError_t e = cudaGraphInstantiate(&ge, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) return rg_cu_fail(err, n, "cudaGraphInstantiate", e, __FILE__, __LINE__);
    *graph = (void *)ge;
    ctx->graphs++;
    return RG_OK;
}

extern "C" rg_status rg_cuda_graph_launch(rg_cuda_ctx *ctx, void *graph, rg_error *err) {
    const struct rg_node *n = NULL;
    CU_TRY(cudaGraphLaunch((cudaGraphExec_t)graph, ctx->stream));
    return RG_OK;
}

extern "C" void rg_cuda_graph_free(rg_cuda_ctx *ctx, void *graph) {
    if (!graph) return;
    cudaGraphExecDestroy((cudaGraphExec_t)graph);
    cudaGetLastError();
    if (--ctx->graphs == 0) free_retired(ctx);
    cudaGetLastError();
}

extern "C" size_t rg_cuda_ctx_bytes(const rg_cuda_ctx *ctx) {
    return ctx ? ctx->alloc_bytes + ctx->pool_bytes + ctx->retired_bytes + ctx->qtables_bytes : 0;
}

// ---------------------------------------------------------------------------
// The memory pool and the counted copies

rg_status rg_cuda_pool_get(rg_cuda_ctx *ctx, int slot, size_t bytes, void **out, const struct rg_node *n,
                           rg_error *err) {
    rg_cuda_buf *b = &ctx->buf[slot];
    if (bytes == 0) bytes = 1;
    if (b->cap < bytes && ctx->capturing) {
        // A capturing thread may not allocate (cudaMalloc invalidates the capture): the
        // executor captures a node range only at its second run with the same shapes, and
        // the first sized the pool.
        return rg_fail(err, RG_ERR_ARG,
                       "cuda %s '%s' (node %d): pool slot %d needs %zu bytes and holds %zu during a CUDA graph "
                       "capture (the pool must be sized by an uncaptured run of the same nodes first)",
                       node_op(n), node_name(n), node_id(n), slot, bytes, b->cap);
    }
    if (b->cap < bytes) {
        // Grow by at least half, in whole MiB, so that a run of slowly growing
        // nodes does not reallocate each time. cudaFree waits for the device.
        const size_t mib = (size_t)1 << 20;
        size_t want = b->cap + b->cap / 2 > bytes ? b->cap + b->cap / 2 : bytes;
        want = (want + mib - 1) / mib * mib;
        if (b->ptr && ctx->graphs > 0) {
            // A live graph may replay the old buffer: keep it until the last graph is freed.
            void **r = (void **)realloc(ctx->retired, (size_t)(ctx->n_retired + 1) * sizeof *r);
            if (!r) return rg_fail(err, RG_ERR_NOMEM, "cuda: out of host memory growing the pool");
            ctx->retired = r;
            ctx->retired[ctx->n_retired++] = b->ptr;
            ctx->retired_bytes += b->cap;
        } else if (b->ptr) {
            CU_TRY(cudaFree(b->ptr));
        }
        ctx->pool_bytes -= b->cap;
        b->ptr = NULL, b->cap = 0;
        if (cudaMalloc(&b->ptr, want) != cudaSuccess) {
            cudaGetLastError();
            want = bytes;  // the headroom did not fit: try the exact size
            CU_TRY(cudaMalloc(&b->ptr, want));
        }
        b->cap = want;
        ctx->pool_bytes += want;
    }
    *out = b->ptr;
    return RG_OK;
}

