// ops_quant_mm.cuh - MUL_MAT and OUT_PROD with a quantized weight on the device
// (ops_quant_mm.cu): what the cells of ops.cu (MUL_MAT) and ops_train.cu (OUT_PROD) call
// when the weight (MUL_MAT's src[0], OUT_PROD's a) is of a quantized type the device decodes.
// Included after cuda/cuda_common.cuh.
#ifndef RG_CUDA_OPS_QUANT_MM_CUH
#define RG_CUDA_OPS_QUANT_MM_CUH

#include "cuda/cuda_common.cuh"

// Shared by the .cu files of one twin: renamed per twin (cuda_twin.h).
#define rg_cu_qmm_supported RG_CUDA_TWIN(qmm_supported)
#define rg_cu_qmm_work RG_CUDA_TWIN(qmm_work)
#define rg_cu_qmm_run RG_CUDA_TWIN(qmm_run)
#define rg_cu_qop_supported RG_CUDA_TWIN(qop_supported)
#define rg_cu_qop_work RG_CUDA_TWIN(qop_work)
#define rg_cu_qop_run RG_CUDA_TWIN(qop_run)
#define rg_cu_qmm_types RG_CUDA_TWIN(qmm_types)

// Products with at most this many columns (MUL_MAT's x.ne1, OUT_PROD's b.ne0) take the
// in-place decoder in both modes; wider ones the sliced decode + cuBLAS.
enum { RG_QMM_INPLACE_MAX_N = 8 };

// MUL_MAT: w [K, M, b2, b3] quantized (packed blocks along ne0; row and slice strides whole
// blocks), x [K, N, c2, c3] f32 (packed rows), y [M, N, c2, c3] f32 contiguous.
bool rg_cu_qmm_supported(const rg_node *n);
// The device scratch of the sliced path (0 on the in-place path): the decoded slice, at most
// the dequantization budget (at least one row), and x rounded to BF16.
size_t rg_cu_qmm_work(const rg_node *n);
rg_status rg_cu_qmm_run(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, rg_error *err);

// OUT_PROD: a [Ka, M, b2, b3] quantized (packed blocks along ne0), b [N, M, c2, c3] f32
// (any strides; the backward's dY^T), out [Ka, N, c2, c3] f32 contiguous:
// out[i, j] = sum_m a[i, m] b[j, m].
bool rg_cu_qop_supported(const rg_node *n);
size_t rg_cu_qop_work(const rg_node *n);
rg_status rg_cu_qop_run(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, rg_error *err);

// The types the two cells list after f32, f16, bf16: "f32, f16, bf16, q4_0, ..." (every
// quantized type the device decodes), built once.
const char *rg_cu_qmm_types(void);

#endif
