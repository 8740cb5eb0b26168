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
// Ops on the GPU, per node, for the scheduler (src/graph/exec.c). The host
// buffers stay the home of every tensor: a node run on the GPU uploads its
// sources, computes, and downloads its output, and every copy is counted.

struct rg_node;
typedef struct rg_cuda_ctx rg_cuda_ctx;

typedef struct rg_cuda_stats {
    uint64_t nodes;          // nodes run on the GPU
    uint64_t copies_to_device, bytes_to_device;
    uint64_t copies_to_host, bytes_to_host;
} rg_cuda_stats;

rg_status rg_cuda_ctx_create(rg_cuda_ctx **out, int device, rg_error *err);
void rg_cuda_ctx_free(rg_cuda_ctx *ctx);
const rg_cuda_stats *rg_cuda_ctx_stats(const rg_cuda_ctx *ctx);
// Whether this node (op, types, strides) runs on the GPU.
bool rg_cuda_op_supported(const struct rg_node *n);
// The types a report lists for an op on the GPU ("f32, f16, bf16"), or NULL when none.
const char *rg_cuda_op_types(int op);
rg_status rg_cuda_op_run(rg_cuda_ctx *ctx, struct rg_node *n, rg_error *err);

#endif
