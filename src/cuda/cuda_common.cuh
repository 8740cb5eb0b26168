// cuda_common.cuh - what device.cu and ops.cu share: the context behind
// rg_cuda_ctx (device, stream, cuBLAS handle, a grow-only memory pool, the
// stats) and the checking macros that turn every failed CUDA or cuBLAS call
// into an rg_error naming the op, the node, the call, the error string and
// the file:line, in the spirit of llm.c's cudaCheck but returning instead of
// exiting; and the macros every kernel launch and every block-shared array go
// through, so that the same file also builds as the host twin (cuda_twin.h,
// src/cuda_host/): RG_LAUNCH, RG_SHARED, RG_SHARED_DYN.
//
// Everything a .cu file defines for itself (kernels, helpers, templates) has
// internal linkage (static or an anonymous namespace): the nvcc twin and the
// host twin of the same file link into one binary.
#ifndef RG_CUDA_COMMON_CUH
#define RG_CUDA_COMMON_CUH

extern "C" {
#include "cuda/cuda_twin.h"
}

#include <cublas_v2.h>
#include <cuda_runtime.h>

#ifndef __CUDACC__
#include "cuda_host/kernel.h"  // the host twin: kernels run on the CPU
#endif

extern "C" {
#include "base/error.h"
#include "graph/backend.h"
#include "graph/graph.h"
#include "graph/ops.h"
}

// RG_LAUNCH(kernel, grid, block, shmem_bytes, stream, args...): kernel<<<grid,
// block, shmem_bytes, stream>>>(args...). A template kernel with more than one
// template argument needs an alias (the commas would split the macro's
// arguments).
// RG_SHARED(T, name, count): T name[count] shared by the block (static);
// a 2-D array takes a row type: typedef float row[33]; RG_SHARED(row, tile, 32).
// RG_SHARED_DYN(T, name): T *name, the launch's dynamic shared memory.
#ifdef __CUDACC__
#define RG_LAUNCH(kernel, grid, block, shmem, stream, ...) kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)
#define RG_SHARED(T, name, count) __shared__ T name[count]
#define RG_SHARED_DYN(T, name)                                     \
    extern __shared__ __align__(16) unsigned char rg_shared_dyn_##name[]; \
    T *const name = reinterpret_cast<T *>(rg_shared_dyn_##name)
#else
#define RG_LAUNCH RGH_LAUNCH
#define RG_SHARED RGH_SHARED
#define RG_SHARED_DYN RGH_SHARED_DYN
#endif

// The CUDA column of the op table is filled by ops.cu (ADD, MUL_MAT, SOFT_MAX) and by one
// registration function per family file, each setting the cells of its ops:
//   ops_elementwise.cu  FILL, SUB, MUL, SCALE, REPEAT(_BACK), SUM, MEAN, SUM_ROWS, SILU(_BACK),
//                       SWIGLU, CONT, CPY, VIEW_BACK, CPY_INTO, GET_ROWS(_BACK)
//   ops_norm.cu         RMS_NORM(_BACK), ROPE(_BACK), SOFT_MAX_BACK, CROSS_ENTROPY_LOSS(_BACK),
//                       ATTN_DECODE
//   ops_train.cu        OUT_PROD, LINEAR_CE(_BACK), ADAMW, SGD
//   ops_ssm.cu          SSM_CONV(_BACK), SSM_DT, SSM_SCAN(_BACK)
void rg_cu_register_elementwise(rg_op_col *col);
void rg_cu_register_norm(rg_op_col *col);
void rg_cu_register_train(rg_op_col *col);
void rg_cu_register_ssm(rg_op_col *col);

// The context of the backend running a node (its kernels get rg_exec_ctx from the executor).
static inline rg_cuda_ctx *rg_cu_ctx(const rg_exec_ctx *c) { return (rg_cuda_ctx *)c->backend->impl; }

// Slots of the context's grow-only scratch pool. Kernels are stream-ordered, so a slot
// used by one node may be reused by the next (the stream runs them one after another).
enum {
    RG_CU_BUF_TMP = 0,   // op scratch (MUL_MAT: F16/BF16 weight rows widened to F32)
    RG_CU_BUF_COUNT,
};

typedef struct rg_cuda_buf {
    void *ptr;
    size_t cap;  // bytes
} rg_cuda_buf;

struct rg_cuda_ctx {
    int device;
    cudaStream_t stream;
    cublasHandle_t cublas;
    rg_cuda_buf buf[RG_CU_BUF_COUNT];
    size_t pool_bytes;        // sum of the slot capacities (device memory held)
    size_t alloc_bytes;       // held by rg_cuda_mem_alloc (the executor's buffers and leaves)
    size_t dequant_budget;    // bytes of widened weight per MUL_MAT slice; 0 = no slicing
};

// Builds the error for a failed CUDA call (clears the runtime's last error so
// that a later, unrelated call does not report it again). n may be NULL.
rg_status rg_cu_fail(rg_error *err, const struct rg_node *n, const char *call, cudaError_t e, const char *file,
                     int line);
rg_status rg_cublas_fail(rg_error *err, const struct rg_node *n, const char *call, cublasStatus_t s,
                         const char *file, int line);

// In a function with `const rg_node *n` (may be NULL) and `rg_error *err` in
// scope: run the call, return an error naming it on failure.
#define CU_TRY(call)                                                                    \
    do {                                                                                \
        cudaError_t cu_e_ = (call);                                                     \
        if (cu_e_ != cudaSuccess) return rg_cu_fail(err, n, #call, cu_e_, __FILE__, __LINE__); \
    } while (0)
#define CUBLAS_TRY(call)                                                                      \
    do {                                                                                      \
        cublasStatus_t cb_s_ = (call);                                                        \
        if (cb_s_ != CUBLAS_STATUS_SUCCESS) return rg_cublas_fail(err, n, #call, cb_s_, __FILE__, __LINE__); \
    } while (0)
// After a kernel launch: launch configuration errors show up here.
#define CU_LAUNCHED() CU_TRY(cudaGetLastError())
// Propagates an rg_status.
#define RG_TRY(expr)                  \
    do {                                \
        rg_status rg_s_ = (expr);       \
        if (rg_s_ != RG_OK) return rg_s_; \
    } while (0)

// The executor's device scratch for node n: at least `bytes` (the cell's work size), or an error.
static inline rg_status rg_cu_scratch(const rg_exec_ctx *c, const rg_node *n, size_t bytes, void **out, rg_error *err) {
    if (!c->scratch || c->scratch_size < bytes)
        return rg_fail(err, RG_ERR_ARG, "cuda %s '%s': device scratch of %zu bytes is below the %zu needed",
                       rg_op_name(n->op), n->t.name, c->scratch ? c->scratch_size : (size_t)0, bytes);
    *out = c->scratch;
    return RG_OK;
}

// A cell that sets the device, then queues run_<fn_>(ctx, c, n, err)'s work (the executor
// synchronizes where host code needs the bytes). For a family file's anonymous namespace.
#define RG_CU_CELL(fn_)                                               \
    rg_status cell_##fn_(rg_exec_ctx *c, rg_node *n, rg_error *err) { \
        rg_cuda_ctx *ctx = rg_cu_ctx(c);                              \
        CU_TRY(cudaSetDevice(ctx->device));                           \
        return run_##fn_(ctx, c, n, err);                             \
    }

// A device buffer of at least `bytes` in pool slot `slot` (grown, never shrunk).
rg_status rg_cuda_pool_get(rg_cuda_ctx *ctx, int slot, size_t bytes, void **out, const struct rg_node *n,
                           rg_error *err);
#endif
