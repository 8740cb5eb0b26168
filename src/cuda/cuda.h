// cuda.h - the CUDA backend as C sees it. cuda_select.c defines every function
// here by routing it to one build of src/cuda/*.cu: the nvcc one for the GPU,
// or with RETRO_CUDA_HOST=1 the host twin that executes the same code on the
// CPU (src/cuda_host/); where a build is missing, cuda_stub.c says why. So
// callers never need #ifdefs (see cuda_twin.h).
#ifndef RG_CUDA_H
#define RG_CUDA_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "retrograd.h"

typedef struct rg_cuda_device_info {
    char name[256];
    int major, minor;        // compute capability
    size_t total_mem;        // bytes
    size_t free_mem;         // bytes, at the time of the query
    int multiprocessors;
    int clock_khz;           // the SM clock's peak (cudaDevAttrClockRate); 0 when the device does not say
    int mem_clock_khz;       // the memory clock's peak (cudaDevAttrMemoryClockRate); 0 when unknown
    int mem_bus_bits;        // the global memory bus width: with the clocks, the peaks a perf line is held to
    int driver_version;      // cudaDriverGetVersion: 1000 * major + 10 * minor (12040 = CUDA 12.4)
    int runtime_version;     // the runtime this build links (cudaRuntimeGetVersion)
} rg_cuda_device_info;

// 1 when the library was compiled with the CUDA backend.
int rg_cuda_compiled(void);
// Number of usable devices; 0 when none or when built without CUDA. reason, when
// non-NULL, receives why there is none ("built without CUDA", the driver's message).
int rg_cuda_device_count(char *reason, size_t reason_cap);
rg_status rg_cuda_device_get(int index, rg_cuda_device_info *out, rg_error *err);
// y[i] = a[i] + b[i] on device `index`, copying through device memory: the
// smallest end-to-end check that kernels built for this GPU run on it.
rg_status rg_cuda_add_f32(int index, const float *a, const float *b, float *y, int64_t n, rg_error *err);


// ---------------------------------------------------------------------------
// The device backend (graph/backend.h builds its rg_backend on these). Tensors live in
// device memory: the executor plans and allocates the device buffer, uploads the leaves
// the device reads once, and runs each node's kernel on device pointers; the only copies
// are the ones the scheduling pass lists (graph/schedule.h).

struct rg_node;
struct rg_op_col;
typedef struct rg_cuda_ctx rg_cuda_ctx;

rg_status rg_cuda_ctx_create(rg_cuda_ctx **out, int device, rg_error *err);
void rg_cuda_ctx_free(rg_cuda_ctx *ctx);
// Device memory (cudaMalloc), and copies and zeroing ordered on the context's stream.
// copy_h2d returns once the host bytes may be reused; copy_d2h returns with the bytes
// in host memory (it synchronizes the stream).
rg_status rg_cuda_mem_alloc(rg_cuda_ctx *ctx, size_t bytes, void **out, rg_error *err);
void rg_cuda_mem_free(rg_cuda_ctx *ctx, void *p);
rg_status rg_cuda_copy_h2d(rg_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, rg_error *err);
rg_status rg_cuda_copy_d2h(rg_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, rg_error *err);
rg_status rg_cuda_mem_zero(rg_cuda_ctx *ctx, void *dst, size_t bytes, rg_error *err);
rg_status rg_cuda_sync(rg_cuda_ctx *ctx, rg_error *err);
// The whole device's free and total memory now (cudaMemGetInfo).
rg_status rg_cuda_mem_info(rg_cuda_ctx *ctx, size_t *free_bytes, size_t *total_bytes, rg_error *err);
// This context's device memory in use (allocations made through it, including scratch).
size_t rg_cuda_ctx_bytes(const rg_cuda_ctx *ctx);

// CUDA Graphs on the context's stream: what is queued between begin and end is recorded,
// not run (end returns the instantiated graph); launch replays it on the stream.
rg_status rg_cuda_graph_begin(rg_cuda_ctx *ctx, rg_error *err);
rg_status rg_cuda_graph_end(rg_cuda_ctx *ctx, void **graph, rg_error *err);
rg_status rg_cuda_graph_launch(rg_cuda_ctx *ctx, void *graph, rg_error *err);
void rg_cuda_graph_free(rg_cuda_ctx *ctx, void *graph);

// The dequantization budget: RETRO_CUDA_DEQUANT_BUDGET_MB, else the seed's
// GGML_CUDA_DEQUANT_BUDGET_MB, in MiB (default 64). It bounds the bytes of weight a wide
// product with a quantized weight decodes at once (MUL_MAT's weight rows, OUT_PROD's a
// columns; ops_quant_mm.cu), and those of F16/BF16 rows widened under
// RETRO_CUDA_HALF_GEMM=f32. 0 or less: no slicing (the whole weight decoded at once); the
// product's bits never depend on it. Sets *bytes (0 = no slicing) and returns 0, or returns
// -1 with `why` naming the variable and its value when that is not an integer.
int rg_cuda_dequant_budget_env(size_t *bytes, char *why, size_t why_cap);

// How F16/BF16 weights are multiplied on the device (RETRO_CUDA_HALF_GEMM):
//   tensor (default)  the seed's design: the F32 operand (activations, or the upstream
//                     gradient) rounded to the weight's type (RNE), the product on the
//                     tensor cores with F32 accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F).
//                     A weight gradient dW = x dy^T of a half weight rounds both to that
//                     type too (OUT_PROD's ip[0], set by MUL_MAT's backward rule). Each
//                     product is exact in F32, so an element differs from the F32 one by
//                     at most u * sum |w x| (u = 2^-8 BF16, 2^-11 F16) plus F32 summation.
//   f32               the weight widened to F32 (exact) and a pedantic-F32 SGEMM: the CPU's
//                     values up to the summation order, at the F32 (non-tensor) rate.
// LINEAR_CE with a half head follows the same mode: h and the chunk's G rounded to the head's
// type on the tensor path (an F16 G below 2^-14 keeps F16's subnormal spacing, 2^-24), its
// chunks widened under f32. Returns the mode, or -1 with `why` filled when the variable holds
// anything else.
enum { RG_CUDA_HALF_GEMM_TENSOR = 0, RG_CUDA_HALF_GEMM_F32 = 1 };
int rg_cuda_half_gemm_env(char *why, size_t why_cap);
const char *rg_cuda_half_gemm_name(int mode);

// Device dequantization (dequant.cu, the decoders of dequant.cuh), for C callers and tests.
// rg_cuda_dequant_supported: whether the device decodes `type` (F32, F16, BF16 and every
// storage type the CPU dequantizes; not Q8_K, not the integer types).
// rg_cuda_dequant_rows: elements [k0, k0 + K) of `rows` rows of `type` (row r at src + r *
// row_bytes, device memory; k0, K multiples of the block size) into dst (device memory):
// element (r, k) at dst[r * ld + k]; dst_type F32 gives the bits of the CPU's dequantization,
// BF16 / F16 those values rounded to nearest even. Queued on the context's stream; n (may be
// NULL) names the node in errors (an unsupported type is one).
// rg_cuda_dequant_decode32: n_blocks consecutive blocks at src decoded into dst (F32,
// n_blocks * block size) by a kernel that calls the in-place decoders' entry (rg_cu_decode32)
// per 32 elements: the check of that path.
bool rg_cuda_dequant_supported(uint32_t type);
rg_status rg_cuda_dequant_rows(rg_cuda_ctx *ctx, const struct rg_node *n, uint32_t type, const void *src,
                               int64_t row_bytes, int64_t rows, int64_t k0, int64_t K, uint32_t dst_type, void *dst,
                               int64_t ld, rg_error *err);
rg_status rg_cuda_dequant_decode32(rg_cuda_ctx *ctx, uint32_t type, const void *src, int64_t n_blocks, float *dst,
                                   rg_error *err);

// The CUDA column of the op table: RG_OP_COUNT cells (run on device pointers, supports,
// types), or NULL when the library was built without CUDA (the list in op_table.cu).
const struct rg_op_col *rg_cuda_column(void);

#endif
