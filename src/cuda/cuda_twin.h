// cuda_twin.h - the CUDA backend lives in one library up to twice: src/cuda/*.cu
// built by nvcc for the GPU (the nvcc twin) and built by the host C++ compiler
// against our runtime in src/cuda_host/ (the host twin, RETRO_CUDA_HOST=1).
// Each twin's entry points carry its own prefix so that both link into one
// binary, and each twin exports its entry points as one table;
// cuda_select.c defines the rg_cuda_* functions of cuda.h by routing every
// call to one table. Where a twin is not built, cuda_stub.c's table stands in
// and says why.
//
// Included first by src/cuda/cuda_common.cuh: inside a twin, the names of
// cuda.h and of the helpers the .cu files share are renamed before cuda.h
// declares them.
#ifndef RG_CUDA_TWIN_H
#define RG_CUDA_TWIN_H

#if defined(RG_CUDA_TWIN_PREFIX)
#define RG_CUDA_TWIN(name) RG_CUDA_TWIN_PREFIX(name)  // the host twin (cuda_host/rename.h)
#elif defined(__CUDACC__)
#define RG_CUDA_TWIN(name) rg_cudadev_##name
#endif

#ifdef RG_CUDA_TWIN
#define rg_cuda_compiled RG_CUDA_TWIN(compiled)
#define rg_cuda_device_count RG_CUDA_TWIN(device_count)
#define rg_cuda_device_get RG_CUDA_TWIN(device_get)
#define rg_cuda_add_f32 RG_CUDA_TWIN(add_f32)
#define rg_cuda_ctx_create RG_CUDA_TWIN(ctx_create)
#define rg_cuda_ctx_free RG_CUDA_TWIN(ctx_free)
#define rg_cuda_mem_alloc RG_CUDA_TWIN(mem_alloc)
#define rg_cuda_mem_free RG_CUDA_TWIN(mem_free)
#define rg_cuda_copy_h2d RG_CUDA_TWIN(copy_h2d)
#define rg_cuda_copy_d2h RG_CUDA_TWIN(copy_d2h)
#define rg_cuda_mem_zero RG_CUDA_TWIN(mem_zero)
#define rg_cuda_sync RG_CUDA_TWIN(sync)
#define rg_cuda_mem_info RG_CUDA_TWIN(mem_info)
#define rg_cuda_ctx_bytes RG_CUDA_TWIN(ctx_bytes)
#define rg_cuda_column RG_CUDA_TWIN(column)
#define rg_cuda_graph_begin RG_CUDA_TWIN(graph_begin)
#define rg_cuda_graph_end RG_CUDA_TWIN(graph_end)
#define rg_cuda_graph_launch RG_CUDA_TWIN(graph_launch)
#define rg_cuda_graph_free RG_CUDA_TWIN(graph_free)
#define rg_cuda_dequant_supported RG_CUDA_TWIN(dequant_supported)
#define rg_cuda_dequant_rows RG_CUDA_TWIN(dequant_rows)
#define rg_cuda_dequant_decode32 RG_CUDA_TWIN(dequant_decode32)
// Shared by the .cu files of one twin (cuda_common.cuh).
#define rg_cu_fail RG_CUDA_TWIN(cu_fail)
#define rg_cublas_fail RG_CUDA_TWIN(cublas_fail)
#define rg_cuda_pool_get RG_CUDA_TWIN(pool_get)
#define rg_cu_narrow RG_CUDA_TWIN(narrow)
#define rg_cu_gemm_half RG_CUDA_TWIN(gemm_half)
#endif

#include "cuda/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

// The entry points of one build of the backend, as cuda.h describes them.
typedef struct rg_cuda_twin {
    int (*compiled)(void);
    int (*device_count)(char *reason, size_t reason_cap);
    rg_status (*device_get)(int index, rg_cuda_device_info *out, rg_error *err);
    rg_status (*add_f32)(int index, const float *a, const float *b, float *y, int64_t n, rg_error *err);
    rg_status (*ctx_create)(rg_cuda_ctx **out, int device, rg_error *err);
    void (*ctx_free)(rg_cuda_ctx *ctx);
    rg_status (*mem_alloc)(rg_cuda_ctx *ctx, size_t bytes, void **out, rg_error *err);
    void (*mem_free)(rg_cuda_ctx *ctx, void *p);
    rg_status (*copy_h2d)(rg_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, rg_error *err);
    rg_status (*copy_d2h)(rg_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, rg_error *err);
    rg_status (*mem_zero)(rg_cuda_ctx *ctx, void *dst, size_t bytes, rg_error *err);
    rg_status (*sync)(rg_cuda_ctx *ctx, rg_error *err);
    rg_status (*mem_info)(rg_cuda_ctx *ctx, size_t *free_bytes, size_t *total_bytes, rg_error *err);
    size_t (*ctx_bytes)(const rg_cuda_ctx *ctx);
    const struct rg_op_col *(*column)(void);
    rg_status (*graph_begin)(rg_cuda_ctx *ctx, rg_error *err);
    rg_status (*graph_end)(rg_cuda_ctx *ctx, void **graph, rg_error *err);
    rg_status (*graph_launch)(rg_cuda_ctx *ctx, void *graph, rg_error *err);
    void (*graph_free)(rg_cuda_ctx *ctx, void *graph);
    bool (*dequant_supported)(uint32_t type);
    rg_status (*dequant_rows)(rg_cuda_ctx *ctx, const struct rg_node *n, uint32_t type, const void *src,
                              int64_t row_bytes, int64_t rows, int64_t k0, int64_t K, uint32_t dst_type, void *dst,
                              int64_t ld, rg_error *err);
    rg_status (*dequant_decode32)(rg_cuda_ctx *ctx, uint32_t type, const void *src, int64_t n_blocks, float *dst,
                                  rg_error *err);
} rg_cuda_twin;

extern const rg_cuda_twin rg_cudadev_table;   // the nvcc twin (RG_HAVE_CUDA)
extern const rg_cuda_twin rg_cudahost_table;  // the host twin (RG_HAVE_CUDA_HOST)
extern const rg_cuda_twin rg_cudastub_table;       // cuda_stub.c: built without nvcc
extern const rg_cuda_twin rg_cudastub_host_table;  // cuda_stub.c: RETRO_CUDA_HOST=1 without a host twin

#ifdef __cplusplus
}
#endif

#endif
