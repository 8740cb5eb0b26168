// ops_norm.cu - CUDA cells of the op table for RMS_NORM(_BACK), ROPE(_BACK), SOFT_MAX_BACK, CROSS_ENTROPY_LOSS(_BACK), ATTN_DECODE
// (cuda_common.cuh). Kernels first, then launchers, then the registration.
#include "cuda/cuda_common.cuh"

void rg_cu_register_norm(rg_op_col *col) { (void)col; }
