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
// RG_KERNEL_POINTERS(T, members...): beside a struct passed to a kernel by value, its pointer
// members (arrays of pointers too); RG_KERNEL_NO_POINTERS(T) for one with none. The host twin
// checks them as it checks pointer arguments (at launch and at graph replay), refuses a struct
// argument without either at compile time, and a struct word that points into device memory
// at an offset the list does not name at launch. nvcc sees nothing.
#ifdef __CUDACC__
#define RG_LAUNCH(kernel, grid, block, shmem, stream, ...) kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)
#define RG_SHARED(T, name, count) __shared__ T name[count]
#define RG_SHARED_DYN(T, name)                                     \
    extern __shared__ __align__(16) unsigned char rg_shared_dyn_##name[]; \
    T *const name = reinterpret_cast<T *>(rg_shared_dyn_##name)
#define RG_KERNEL_POINTERS(T, ...)
#define RG_KERNEL_NO_POINTERS(T)
#else
#define RG_LAUNCH RGH_LAUNCH
#define RG_SHARED RGH_SHARED
#define RG_SHARED_DYN RGH_SHARED_DYN
#define RG_KERNEL_POINTERS RGH_KERNEL_POINTERS
#define RG_KERNEL_NO_POINTERS RGH_KERNEL_NO_POINTERS
#endif

// The node's fp/ip in device memory, for a cell registered with device_params (graph/backend.h):
// the executor uploads them before each run, so a kernel that reads them there stays valid in
// a captured CUDA graph when they change. An error when the executor gave none.
static inline rg_status rg_cu_params(const rg_exec_ctx *c, const rg_node *n, const rg_node_params **out,
                                     rg_error *err) {
    *out = c->params;
    if (!c->params)
        return rg_fail(err, RG_ERR_ARG, "cuda %s '%s': no device copy of the node's parameters", rg_op_defs[n->op].name,
                       n->t.name);
    return RG_OK;
}

// A cell of the CUDA column (graph/backend.h's rg_op_col): its kernel, support rule, scratch,
// the types the report lists, and whether it reads its parameters (and its moving geometry)
// from device memory.
static inline rg_op_col rg_cu_col(rg_kernel_fn run, rg_supports_fn supports, rg_work_fn work,
                                  const char *types, bool device_params = false,
                                  void (*geometry)(const rg_node *, int64_t *) = NULL) {
    rg_op_col c = rg_op_col();  // no fusion hook
    c.run = run, c.supports = supports, c.work = work, c.types = types;
    c.device_params = device_params, c.geometry = geometry;
    return c;
}

// Reductions over a warp and over a block whose size is a multiple of 32 (<= 1024); every
// thread gets the result. The xor butterfly hands every lane the same value (op is
// commutative), then warp 0 combines the warps' results the same way, so the order depends
// only on the block size. `sh` holds 32 values of T; the leading barrier lets a kernel call
// block_reduce back to back and in a loop. One copy for every family file.
struct rg_cu_add {
    template <class T>
    __device__ T operator()(T a, T b) const { return a + b; }
};
struct rg_cu_max_f32 {  // operands are never NaN: each thread's own max skips NaN, as the CPU's `if (z > mx)`
    __device__ float operator()(float a, float b) const { return b > a ? b : a; }
};

template <class T, class Op>
__device__ static inline T rg_cu_warp_reduce(T v, Op op) {
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    return v;
}

template <class T, class Op>
__device__ static inline T rg_cu_block_reduce(T v, T identity, T *sh, Op op) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = rg_cu_warp_reduce(v, op);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    return rg_cu_warp_reduce(lane < nw ? sh[lane] : identity, op);
}

// The coordinates of element i of a packed 4-D shape ne (ne[0] fastest) in c[0..3].
__device__ static inline void rg_cu_unravel4(int64_t i, const int64_t ne[4], int64_t c[4]) {
    c[0] = i % ne[0], i /= ne[0];
    c[1] = i % ne[1], i /= ne[1];
    c[2] = i % ne[2], c[3] = i / ne[2];
}

// The cells of the CUDA column: each family file defines its ops' cells (rg_cu_col constants)
// in this namespace, and op_table.cu lists them, one line per op. The namespace is named per
// twin (cuda_twin.h), so the nvcc twin's cells and the host twin's link into one binary
// without a rename each.
#define RG_CU_CELLS RG_CUDA_TWIN(cells)

// The context of the backend running a node (its kernels get rg_exec_ctx from the executor).
static inline rg_cuda_ctx *rg_cu_ctx(const rg_exec_ctx *c) { return (rg_cuda_ctx *)c->backend->impl; }

// Slots of the context's grow-only scratch pool. Kernels are stream-ordered, so a slot
// used by one node may be reused by the next (the stream runs them one after another).
enum {
    RG_CU_BUF_TMP = 0,   // op scratch (MUL_MAT: F16/BF16 weight rows widened to F32, or x rounded to half)
    RG_CU_BUF_TMP2,      // a second operand's scratch (OUT_PROD on the tensor path: a rounded to half)
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
    int half_gemm;            // RG_CUDA_HALF_GEMM_* (cuda.h): how F16/BF16 weights are multiplied
    bool capturing;           // between rg_cuda_graph_begin and _end: the pool may not grow
    int graphs;               // live CUDA graphs captured on this context
    // Pool buffers replaced while graphs were live: a graph replays the pointers it was
    // captured with, so they are freed only when the last graph is.
    void **retired;
    int n_retired;
    size_t retired_bytes;
    // The decoders' constant tables (dequant.cu's rg_cu_qtables_get: IQ grids, signs, kvalues),
    // one device allocation uploaded at the first use; freed with the context.
    void *qtables;
    size_t qtables_bytes;
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
// Dynamic shared memory above the default 48 KiB needs the kernel's limit raised first.
template <class K>
static inline rg_status rg_cu_shared_limit(K *kernel, size_t bytes, const rg_node *n, rg_error *err) {
    if (bytes > 48 * 1024) CU_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return RG_OK;
}
// Propagates an rg_status.
#define RG_TRY(expr)                  \
    do {                                \
        rg_status rg_s_ = (expr);       \
        if (rg_s_ != RG_OK) return rg_s_; \
    } while (0)

// The tensor path of F16/BF16 products (gemm_half.cu, cuda.h's RETRO_CUDA_HALF_GEMM).
// rg_cu_narrow: dst (packed, ne order) = src's 4-D F32 view (strides s in elements)
// rounded to `type` (RG_TYPE_F16 or RG_TYPE_BF16) to nearest even, the bits of the CPU's
// conversion. rg_cu_gemm_half: C_i = op(A_i) op(B_i) for i < batch (A_i = A + i sa, ...;
// cuBLAS's column-major conventions), A and B in `type`, C F32, F32 accumulation on the
// tensor cores; C = op(A) op(B) + beta C.
rg_status rg_cu_narrow(rg_cuda_ctx *ctx, const struct rg_node *n, const float *src, const int64_t ne[4],
                       const int64_t s[4], uint32_t type, uint16_t *dst, rg_error *err);
rg_status rg_cu_gemm_half(rg_cuda_ctx *ctx, const struct rg_node *n, cublasOperation_t ta, cublasOperation_t tb,
                          int64_t m, int64_t nn, int64_t k, const void *A, int64_t lda, int64_t sa, const void *B,
                          int64_t ldb, int64_t sb, float *C, int64_t ldc, int64_t sc, int64_t batch, uint32_t type,
                          rg_error *err, float beta = 0.0f);

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

// The same for a run function of the form (ctx, n, c, err), as a template: rg_cu_cell<run_x>.
typedef rg_status (*rg_cu_run_fn)(rg_cuda_ctx *ctx, const rg_node *n, const rg_exec_ctx *c, rg_error *err);
template <rg_cu_run_fn RUN>
static rg_status rg_cu_cell(rg_exec_ctx *c, rg_node *n, rg_error *err) {
    rg_cuda_ctx *ctx = rg_cu_ctx(c);
    CU_TRY(cudaSetDevice(ctx->device));
    return RUN(ctx, n, c, err);
}

// A device buffer of at least `bytes` in pool slot `slot` (grown, never shrunk).
rg_status rg_cuda_pool_get(rg_cuda_ctx *ctx, int slot, size_t bytes, void **out, const struct rg_node *n,
                           rg_error *err);
#endif
