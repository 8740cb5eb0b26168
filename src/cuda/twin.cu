// twin.cu - this build's table of the backend's entry points (cuda_twin.h):
// rg_cudadev_table under nvcc, rg_cudahost_table in the host twin.
// FMA rule (scripts/check-fma.sh): no arithmetic here.
#include "cuda/cuda_common.cuh"

extern "C" const rg_cuda_twin RG_CUDA_TWIN(table) = {
    rg_cuda_compiled,  rg_cuda_device_count, rg_cuda_device_get, rg_cuda_add_f32,  rg_cuda_ctx_create,
    rg_cuda_ctx_free,  rg_cuda_mem_alloc,    rg_cuda_mem_free,   rg_cuda_copy_h2d, rg_cuda_copy_d2h,
    rg_cuda_mem_zero,  rg_cuda_sync,         rg_cuda_mem_info,   rg_cuda_ctx_bytes, rg_cuda_column,
    rg_cuda_graph_begin, rg_cuda_graph_end,  rg_cuda_graph_launch, rg_cuda_graph_free,
    rg_cuda_dequant_supported, rg_cuda_dequant_rows, rg_cuda_dequant_decode32,
};
