// gemm_half.cu - the tensor path of products with F16/BF16 weights (cuda.h,
// RETRO_CUDA_HALF_GEMM=tensor, the default): the F32 operand rounded to the
// weight's type, then cublasGemmEx on the half operands with F32 accumulation.
// MUL_MAT (ops.cu) and OUT_PROD (ops_train.cu) call these two functions.
//
// Why the rounding is the whole difference from F32: a product of two BF16 (8
// significant bits) or two F16 (11 bits) values is exact in F32 (at most 22
// bits), so what the tensor cores add up are the exact products of the rounded
// operands; rounding x costs at most u |w x| per term (u = 2^-8 BF16, 2^-11
// F16), and the sum adds F32 rounding in cuBLAS's order.
// FMA rule (nvcc builds with --fmad=false, scripts/check-fma.sh): none here (the narrowing
// is a rounding, no arithmetic); cuBLAS's own kernels are not ours to audit.
#include <limits.h>
#include <stdint.h>

#include "cuda/cuda_common.cuh"

extern "C" {
#include "tensor/half_bits.h"
}

#define NARROW_THREADS 256

// narrow: dst[i0 + ne0 (i1 + ne1 (i2 + ne2 i3))] = src[i0 s0 + i1 s1 + i2 s2 + i3 s3]
// rounded to F16 (bf16 == 0) or BF16 (bf16 == 1) to nearest even, as the CPU's CPY does.
typedef struct narrow_geom {
    int64_t ne[4], s[4];
} narrow_geom;
RG_KERNEL_NO_POINTERS(narrow_geom)

__global__ static void narrow_kernel(const float *src, narrow_geom g, int bf16, uint16_t *dst, int64_t count) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c[4];
        rg_cu_unravel4(i, g.ne, c);
        const uint32_t u = __float_as_uint(src[c[0] * g.s[0] + c[1] * g.s[1] + c[2] * g.s[2] + c[3] * g.s[3]]);
        dst[i] = bf16 ? rg_bf16_from_f32_bits(u) : rg_f16_from_f32_bits(u);
    }
}

rg_status rg_cu_narrow(rg_cuda_ctx *ctx, const struct rg_node *n, const float *src, const int64_t ne[4],
                       const int64_t s[4], uint32_t type, uint16_t *dst, rg_error *err) {
    narrow_geom g;
    int64_t count = 1;
    for (int i = 0; i < 4; i++) g.ne[i] = ne[i], g.s[i] = s[i], count *= ne[i];
    if (count <= 0) return RG_OK;
    const int64_t want = (count + NARROW_THREADS - 1) / NARROW_THREADS;
    const unsigned blocks = (unsigned)(want < 65535 * 8 ? want : 65535 * 8);
    RG_LAUNCH(narrow_kernel, blocks, NARROW_THREADS, 0, ctx->stream, src, g, type == RG_TYPE_BF16 ? 1 : 0, dst, count);
    CU_LAUNCHED();
    return RG_OK;
}

static bool fits(int64_t v) { return v >= 0 && v <= INT_MAX; }

rg_status rg_cu_gemm_half(rg_cuda_ctx *ctx, const struct rg_node *n, cublasOperation_t ta, cublasOperation_t tb,
                          int64_t m, int64_t nn, int64_t k, const void *A, int64_t lda, int64_t sa, const void *B,
                          int64_t ldb, int64_t sb, float *C, int64_t ldc, int64_t sc, int64_t batch, uint32_t type,
                          rg_error *err, float beta) {
    if (!fits(m) || !fits(nn) || !fits(k) || !fits(lda) || !fits(ldb) || !fits(ldc) || !fits(batch))
        return rg_fail(err, RG_ERR_UNSUPPORTED,
                       "cuda '%s': a half-precision product of m %lld n %lld k %lld (batch %lld) exceeds cuBLAS's int "
                       "sizes",
                       n ? n->t.name : "?", (long long)m, (long long)nn, (long long)k, (long long)batch);
    const cudaDataType dt = type == RG_TYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    const float one = 1.0f;
    // The handle is pedantic for the F32 products; here the tensor cores are the point.
    CUBLAS_TRY(cublasSetMathMode(ctx->cublas, CUBLAS_DEFAULT_MATH));
    cublasStatus_t s;
    if (batch == 1)
        s = cublasGemmEx(ctx->cublas, ta, tb, (int)m, (int)nn, (int)k, &one, A, dt, (int)lda, B, dt, (int)ldb, &beta, C,
                         CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    else
        s = cublasGemmStridedBatchedEx(ctx->cublas, ta, tb, (int)m, (int)nn, (int)k, &one, A, dt, (int)lda, sa, B, dt,
                                       (int)ldb, sb, &beta, C, CUDA_R_32F, (int)ldc, sc, (int)batch,
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    const cublasStatus_t back = cublasSetMathMode(ctx->cublas, CUBLAS_PEDANTIC_MATH);
    if (s != CUBLAS_STATUS_SUCCESS)
        return rg_cublas_fail(err, n, batch == 1 ? "cublasGemmEx" : "cublasGemmStridedBatchedEx", s, __FILE__,
                              __LINE__);
    CUBLAS_TRY(back);
    return RG_OK;
}
