// twin.cu - this build's table of the backend's entry points (cuda_twin.h):
// rg_cudadev_table under nvcc, rg_cudahost_table in the host twin.
#include "cuda/cuda_common.cuh"

extern "C" const rg_cuda_twin RG_CUDA_TWIN(table) = {
    rg_cuda_compiled,   rg_cuda_device_count, rg_cuda_device_get,   rg_cuda_add_f32, rg_cuda_ctx_create,
    rg_cuda_ctx_free,   rg_cuda_ctx_stats,    rg_cuda_op_supported, rg_cuda_op_types, rg_cuda_op_run,
};
