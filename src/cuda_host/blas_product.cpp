// blas_product.cpp - the matrix product behind the cuBLAS and cuBLASLt
// stand-ins (blas.h): one loop in cuBLAS's column-major terms, the checks both
// APIs make on types and device memory, and its submission as stream work.
#include <stdio.h>
#include <string.h>

#include <vector>

#include "cuda_host/blas.h"
#include "cuda_host/devmem.h"
#include "cuda_host/queue.h"
#include "cuda_host/state.h"

namespace rgh {

namespace {

float load(cudaDataType t, const void *base, long long i) {
    switch (t) {
    case CUDA_R_16F: return __half2float(((const __half *)base)[i]);
    case CUDA_R_16BF: return __bfloat162float(((const __nv_bfloat16 *)base)[i]);
    default: return ((const float *)base)[i];
    }
}

void store(cudaDataType t, void *base, long long i, float v) {
    switch (t) {
    case CUDA_R_16F: ((__half *)base)[i] = __float2half_rn(v); break;
    case CUDA_R_16BF: ((__nv_bfloat16 *)base)[i] = __float2bfloat16_rn(v); break;
    default: ((float *)base)[i] = v; break;
    }
}

float reduce_input(Reduce r, float v) {
    switch (r) {
    case Reduce::f16: return __half2float(__float2half_rn(v));
    case Reduce::bf16: return __bfloat162float(__float2bfloat16_rn(v));
    case Reduce::tf32: {  // 10 explicit mantissa bits, round to nearest even
        uint32_t u;
        memcpy(&u, &v, 4);
        if ((u & 0x7F800000u) != 0x7F800000u) u = (u + 0xFFFu + ((u >> 13) & 1u)) & ~0x1FFFu;
        memcpy(&v, &u, 4);
        return v;
    }
    case Reduce::none: break;
    }
    return v;
}

// op(X) of a stored matrix: (row, col) of op(X), ld of the stored one.
struct Operand {
    const void *p;
    cudaDataType t;
    long long ld;
    bool trans;
    float at(int row, int col) const { return load(t, p, trans ? col + (long long)row * ld : row + (long long)col * ld); }
};

}  // namespace

void run_gemm(const GemmRun &g) {
    const float alpha = g.device_scalars ? *g.alpha_p : g.alpha;
    const float beta = g.device_scalars ? *g.beta_p : g.beta;
    const long long eab = (long long)blas_type_bytes(g.ab), ecd = (long long)blas_type_bytes(g.cd);
    const long long ebias = g.bias ? (long long)blas_type_bytes(g.bias_type) : 0;
    const bool product = alpha != 0.0f && g.k > 0;
    std::vector<float> arow((size_t)g.k), bcol((size_t)g.k);
    for (int b = 0; b < g.batch; b++) {
        const Operand A{(const char *)g.A + b * g.sa * eab, g.ab, g.lda, g.ta != CUBLAS_OP_N};
        const Operand B{(const char *)g.B + b * g.sb * eab, g.ab, g.ldb, g.tb != CUBLAS_OP_N};
        const char *C = (const char *)g.C + b * g.sc * ecd;
        char *D = (char *)g.D + b * g.sd * ecd;
        const char *bias = g.bias ? (const char *)g.bias + b * g.bias_stride * ebias : nullptr;
        for (int j = 0; j < g.n; j++) {
            if (product)
                for (int l = 0; l < g.k; l++) bcol[(size_t)l] = reduce_input(g.reduce, B.at(l, j));
            for (int i = 0; i < g.m; i++) {
                float sum = 0.0f;
                if (product) {
                    for (int l = 0; l < g.k; l++) arow[(size_t)l] = reduce_input(g.reduce, A.at(i, l));
                    for (int l = 0; l < g.k; l++) sum += arow[(size_t)l] * bcol[(size_t)l];
                }
                float r = product ? alpha * sum : 0.0f;
                if (beta != 0.0f) r += beta * load(g.cd, C, i + (long long)j * g.ldc);
                if (bias) r += load(g.bias_type, bias, i);
                if (g.relu && !(r > 0.0f)) r = 0.0f;
                store(g.cd, D, i + (long long)j * g.ldd, r);
            }
        }
    }
}

size_t blas_type_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

const char *blas_type_name(cudaDataType t) {
    switch (t) {
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_16BF: return "CUDA_R_16BF";
    default: return "a type the stand-in does not take";
    }
}

bool blas_types_offered(cudaDataType ab, cudaDataType cd, cublasComputeType_t compute) {
    switch (compute) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
        return (ab == CUDA_R_32F && cd == CUDA_R_32F) ||
               ((ab == CUDA_R_16F || ab == CUDA_R_16BF) && (cd == ab || cd == CUDA_R_32F));
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32: return ab == CUDA_R_32F && cd == CUDA_R_32F;
    default: return false;
    }
}

Reduce blas_reduce_of(cublasComputeType_t compute) {
    switch (compute) {
    case CUBLAS_COMPUTE_32F_FAST_16F: return Reduce::f16;
    case CUBLAS_COMPUTE_32F_FAST_16BF: return Reduce::bf16;
    case CUBLAS_COMPUTE_32F_FAST_TF32: return Reduce::tf32;
    default: return Reduce::none;
    }
}

bool blas_span_ok(const void *p, long long rows, long long cols, long long ld, long long stride, int batch, size_t esz) {
    if (stride < 0) return false;
    const long long last = (long long)(batch - 1) * stride + (cols - 1) * ld + rows;
    return dev_range(p, (size_t)last * esz);
}

cublasStatus_t blas_bad_matrix(const char *call, const char *which, const void *p) {
    char why[256];
    snprintf(why, sizeof why, "%s: matrix %s at %p (%s) does not lie in one device allocation", call, which, p,
             ptr_kind_name(classify(p)));
    fault_sticky(cudaErrorIllegalAddress, why);
    return blas_status(CUBLAS_STATUS_EXECUTION_FAILED, "%s", why);
}

cublasStatus_t blas_scalars(const char *call, bool device_mode, const void *alpha, const void *beta, GemmRun *g) {
    if (!alpha || !beta) return blas_status(CUBLAS_STATUS_INVALID_VALUE, "%s: NULL alpha or beta", call);
    g->device_scalars = device_mode;
    if (device_mode) {
        if (!dev_range(alpha, 4) || !dev_range(beta, 4))
            return blas_status(CUBLAS_STATUS_INVALID_VALUE,
                               "%s: device pointer mode with alpha or beta not in device memory", call);
        g->alpha_p = (const float *)alpha, g->beta_p = (const float *)beta;
    } else {
        memcpy(&g->alpha, alpha, 4);
        memcpy(&g->beta, beta, 4);
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t blas_submit(const char *call, cudaStream_t stream, const GemmRun &g) {
    Stream *s = find_stream(stream, call);
    if (!s) return blas_status(CUBLAS_STATUS_EXECUTION_FAILED, "%s: the stream %p is not a live stream", call, (void *)stream);
    if (submit(s, simple_work(call, [g] { run_gemm(g); })) != cudaSuccess)
        return blas_status(CUBLAS_STATUS_EXECUTION_FAILED, "%s: %s", call, error_text(last_error(false)));
    return CUBLAS_STATUS_SUCCESS;
}

}  // namespace rgh
