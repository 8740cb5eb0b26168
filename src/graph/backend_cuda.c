// backend_cuda.c - the CUDA backend object (graph/backend.h) over cuda.h's context:
// device memory, stream-ordered copies, and the CUDA column of the op table.
#include <stdlib.h>

#include "base/error.h"
#include "cuda/cuda.h"
#include "graph/backend.h"

static rg_cuda_ctx *ctx_of(rg_backend *b) { return (rg_cuda_ctx *)b->impl; }

static rg_op_col cuda_cell(int op) { return rg_op_cell(RG_BACKEND_CUDA, op); }
static rg_status cu_alloc(rg_backend *b, size_t bytes, void **out, rg_error *err) {
    return rg_cuda_mem_alloc(ctx_of(b), bytes, out, err);
}
static void cu_release(rg_backend *b, void *p) { rg_cuda_mem_free(ctx_of(b), p); }
static rg_status cu_upload(rg_backend *b, void *dst, const void *src, size_t bytes, rg_error *err) {
    return rg_cuda_copy_h2d(ctx_of(b), dst, src, bytes, err);
}
static rg_status cu_download(rg_backend *b, void *dst, const void *src, size_t bytes, rg_error *err) {
    return rg_cuda_copy_d2h(ctx_of(b), dst, src, bytes, err);
}
static rg_status cu_zero(rg_backend *b, void *dst, size_t bytes, rg_error *err) {
    return rg_cuda_mem_zero(ctx_of(b), dst, bytes, err);
}
static rg_status cu_sync(rg_backend *b, rg_error *err) { return rg_cuda_sync(ctx_of(b), err); }
static rg_status cu_mem_info(rg_backend *b, size_t *free_bytes, size_t *total_bytes, rg_error *err) {
    return rg_cuda_mem_info(ctx_of(b), free_bytes, total_bytes, err);
}
static rg_status cu_graph_begin(rg_backend *b, rg_error *err) { return rg_cuda_graph_begin(ctx_of(b), err); }
static rg_status cu_graph_end(rg_backend *b, void **graph, rg_error *err) { return rg_cuda_graph_end(ctx_of(b), graph, err); }
static rg_status cu_graph_launch(rg_backend *b, void *graph, rg_error *err) {
    return rg_cuda_graph_launch(ctx_of(b), graph, err);
}
static void cu_graph_free(rg_backend *b, void *graph) { rg_cuda_graph_free(ctx_of(b), graph); }
static void cu_destroy(rg_backend *b) {
    rg_cuda_ctx_free(ctx_of(b));
    free(b);
}

static const rg_backend_vt cuda_vt = {
    .id = RG_BACKEND_CUDA,
    .cell = cuda_cell,
    .alloc = cu_alloc,
    .release = cu_release,
    .upload = cu_upload,
    .download = cu_download,
    .zero = cu_zero,
    .sync = cu_sync,
    .graph_begin = cu_graph_begin,
    .graph_end = cu_graph_end,
    .graph_launch = cu_graph_launch,
    .graph_free = cu_graph_free,
    .mem_info = cu_mem_info,
    .destroy = cu_destroy,
};

rg_status rg_backend_cuda_create(rg_backend **out, int device, rg_error *err) {
    *out = NULL;
    rg_backend *b = calloc(1, sizeof *b);
    if (!b) return rg_fail(err, RG_ERR_NOMEM, "cuda: out of host memory");
    rg_cuda_ctx *ctx;
    rg_status st = rg_cuda_ctx_create(&ctx, device, err);
    if (st) {
        free(b);
        return st;
    }
    b->vt = &cuda_vt;
    b->impl = ctx;
    b->host_memory = false;
    b->label = "cuda";
    *out = b;
    return RG_OK;
}
