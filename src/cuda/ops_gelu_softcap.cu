// ops_gelu_softcap.cu - the CUDA cells of GELU (tanh approximation), SOFTCAP and their
// backward: the Gemma family's elementwise ops (src/cpu/ops_gelu_softcap.c has the CPU
// twins and the formulas):
//
//   GELU          y = 0.5 a (1 + t),  t = tanh(c (a + k a^3)),  c = sqrt(2/pi), k = 0.044715
//   GELU_BACK     y = dy (0.5 (1 + t) + 0.5 a (1 - t^2) c (1 + 3 k a^2))
//   SOFTCAP       y = cap tanh(a / cap),  cap = fp[0] > 0
//   SOFTCAP_BACK  y = dy (1 - tanh^2(a / cap))
//
// Each element in double from its f32 inputs, rounded once, as on the CPU; the arithmetic
// through the _rn intrinsics so nvcc contracts nothing. The one difference from the CPU is
// CUDA's double tanh against glibc's (both within 2 ulp of the exact value in double), which
// after the rounding to f32 almost never shows (cuda_parity holds them to the CPU's bound).
// Supports: f32, packed sources of the output's shape, a positive cap (the CPU refuses the rest
// with the reason, so those nodes stay there).
// FMA rule (nvcc builds with --fmad=false, scripts/check-fma.sh): no fused multiply-add in our
// code (the CPU's formulas make none); the fma in the PTX are the CUDA math library's own.
#include <math.h>
#include <stdint.h>

#include "cuda/cuda_common.cuh"

namespace {

constexpr double GELU_C = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double GELU_K = 0.044715;
constexpr int THREADS = 256;
constexpr int64_t MAX_BLOCKS = 65535;

enum ew_kind { EW_GELU, EW_GELU_BACK, EW_SOFTCAP, EW_SOFTCAP_BACK };

__device__ inline double gelu_t(double a) {  // tanh(c (a + k a^3))
    return tanh(__dmul_rn(GELU_C, __dadd_rn(a, __dmul_rn(__dmul_rn(__dmul_rn(GELU_K, a), a), a))));
}

// y[i] for n elements; dy NULL for the forward ops.
__global__ void gelu_softcap_kernel(const float *a, const float *dy, float *y, int64_t n, int kind, double cap) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const double x = a[i];
        double v;
        if (kind == EW_GELU) {
            v = __dmul_rn(__dmul_rn(0.5, x), __dadd_rn(1.0, gelu_t(x)));
        } else if (kind == EW_GELU_BACK) {
            const double t = gelu_t(x);
            const double left = __dmul_rn(0.5, __dadd_rn(1.0, t));
            const double slope = __dadd_rn(1.0, __dmul_rn(__dmul_rn(__dmul_rn(3.0, GELU_K), x), x));
            const double right = __dmul_rn(__dmul_rn(__dmul_rn(__dmul_rn(0.5, x), __dsub_rn(1.0, __dmul_rn(t, t))), GELU_C),
                                           slope);
            v = __dmul_rn((double)dy[i], __dadd_rn(left, right));
        } else if (kind == EW_SOFTCAP) {
            v = __dmul_rn(cap, tanh(__ddiv_rn(x, cap)));
        } else {
            const double t = tanh(__ddiv_rn(x, cap));
            v = __dmul_rn((double)dy[i], __dsub_rn(1.0, __dmul_rn(t, t)));
        }
        y[i] = (float)v;
    }
}

bool packed_f32(const rg_node *x, const rg_node *n) {
    return x && x->t.type == RG_TYPE_F32 && rg_tensor_is_contiguous(&x->t) && rg_tensor_same_shape(&x->t, &n->t);
}

bool sup_gelu_softcap(const rg_node *n) {
    if (!n || n->t.type != RG_TYPE_F32 || !rg_tensor_is_contiguous(&n->t) || rg_tensor_nelements(&n->t) == 0) return false;
    const bool back = n->op == RG_OP_GELU_BACK || n->op == RG_OP_SOFTCAP_BACK;
    const bool cap = n->op == RG_OP_SOFTCAP || n->op == RG_OP_SOFTCAP_BACK;
    if (cap && !(n->fp[0] > 0.0f)) return false;
    return packed_f32(n->src[back ? 1 : 0], n) && (!back || packed_f32(n->src[0], n));
}

rg_status cell_gelu_softcap(rg_exec_ctx *c, rg_node *n, rg_error *err) {
    rg_cuda_ctx *ctx = rg_cu_ctx(c);
    CU_TRY(cudaSetDevice(ctx->device));
    const bool back = n->op == RG_OP_GELU_BACK || n->op == RG_OP_SOFTCAP_BACK;
    const int kind = n->op == RG_OP_GELU ? EW_GELU : n->op == RG_OP_GELU_BACK ? EW_GELU_BACK
                     : n->op == RG_OP_SOFTCAP                               ? EW_SOFTCAP
                                                                            : EW_SOFTCAP_BACK;
    const int64_t count = rg_tensor_nelements(&n->t);
    const int64_t want = (count + THREADS - 1) / THREADS;
    const unsigned blocks = (unsigned)(want < MAX_BLOCKS ? want : MAX_BLOCKS);
    const float *a = (const float *)n->src[back ? 1 : 0]->t.data;
    const float *dy = back ? (const float *)n->src[0]->t.data : NULL;
    RG_LAUNCH(gelu_softcap_kernel, blocks, THREADS, 0, ctx->stream, a, dy, (float *)n->t.data, count, kind,
              (double)n->fp[0]);
    CU_LAUNCHED();
    return RG_OK;
}

}  // namespace

// This file's cells of the CUDA column (op_table.cu lists them).
namespace RG_CU_CELLS {
extern const rg_op_col gelu = rg_cu_col(cell_gelu_softcap, sup_gelu_softcap, NULL, "f32");
extern const rg_op_col gelu_back = rg_cu_col(cell_gelu_softcap, sup_gelu_softcap, NULL, "f32");
extern const rg_op_col softcap = rg_cu_col(cell_gelu_softcap, sup_gelu_softcap, NULL, "f32");
extern const rg_op_col softcap_back = rg_cu_col(cell_gelu_softcap, sup_gelu_softcap, NULL, "f32");
}  // namespace RG_CU_CELLS
