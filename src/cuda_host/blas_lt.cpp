// blas_lt.cpp - the cuBLASLt stand-in: handles, matmul descriptors, matrix
// layouts, preferences, the heuristic (one algorithm, no workspace) and
// cublasLtMatmul,
//
//     D[b] = epilogue(alpha op(A[b]) op(B[b]) + beta C[b] + bias)
//
// with the product of blas_product.cpp. What is taken: column-major layouts
// (CUBLASLT_ORDER_COL), strided batches (every layout the same batch count),
// the type and compute combinations of cublasGemmEx with float scalars, host
// or device pointer mode, and the epilogues DEFAULT, RELU, BIAS and RELU_BIAS
// (the bias: D's rows long, added to every column, D's type or 32F). The rest
// is CUBLAS_STATUS_NOT_SUPPORTED naming what; shapes that do not agree and a
// leading dimension below its layout's rows are CUBLAS_STATUS_INVALID_VALUE.
#include <cublasLt.h>
#include <limits.h>
#include <string.h>

#include <map>

#include "cuda_host/blas.h"
#include "cuda_host/devmem.h"
#include "cuda_host/state.h"

namespace rgh {

namespace {

enum Kind { HANDLE, DESC, LAYOUT, PREF };

struct LtHandle {
    static const Kind kind = HANDLE;
};

struct LtDesc {
    static const Kind kind = DESC;
    int32_t compute, scale;
    int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
    int32_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N, tc = CUBLAS_OP_N;
    uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bias = nullptr;
    int64_t bias_stride = 0;
    int32_t bias_type = -1;  // -1: D's type
};

struct LtLayout {
    static const Kind kind = LAYOUT;
    uint32_t type;
    int32_t order = CUBLASLT_ORDER_COL;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch = 1;
    int64_t stride = 0;
};

struct LtPref {
    static const Kind kind = PREF;
    uint32_t search = 0;
    uint64_t workspace = 0;
};

std::map<const void *, Kind> g_lt;  // every live handle, descriptor, layout and preference

template <class T>
T *live(const void *h) {
    auto it = g_lt.find(h);
    return it != g_lt.end() && it->second == T::kind ? static_cast<T *>(const_cast<void *>(h)) : nullptr;
}

template <class T, class H>
cublasStatus_t create(const char *call, H *out, T *obj) {
    if (!out) {
        delete obj;
        return blas_status(CUBLAS_STATUS_INVALID_VALUE, "%s: NULL result pointer", call);
    }
    g_lt[obj] = T::kind;
    *out = reinterpret_cast<H>(obj);
    return CUBLAS_STATUS_SUCCESS;
}

template <class T>
cublasStatus_t destroy(const char *call, const void *h) {
    T *obj = live<T>(h);
    if (!obj) return blas_status(CUBLAS_STATUS_INVALID_VALUE, "%s: %p is not live", call, h);
    g_lt.erase(h);
    delete obj;
    return CUBLAS_STATUS_SUCCESS;
}

// An attribute's storage in a descriptor: where and how many bytes.
struct Field {
    void *p;
    size_t bytes;
};

Field desc_field(LtDesc *d, cublasLtMatmulDescAttributes_t a) {
    switch (a) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return {&d->compute, 4};
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return {&d->scale, 4};
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return {&d->pointer_mode, 4};
    case CUBLASLT_MATMUL_DESC_TRANSA: return {&d->ta, 4};
    case CUBLASLT_MATMUL_DESC_TRANSB: return {&d->tb, 4};
    case CUBLASLT_MATMUL_DESC_TRANSC: return {&d->tc, 4};
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return {&d->epilogue, 4};
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return {&d->bias, sizeof(void *)};
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return {&d->bias_stride, 8};
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return {&d->bias_type, 4};
    default: return {nullptr, 0};
    }
}

Field layout_field(LtLayout *l, cublasLtMatrixLayoutAttribute_t a) {
    switch (a) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return {&l->type, 4};
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return {&l->order, 4};
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return {&l->rows, 8};
    case CUBLASLT_MATRIX_LAYOUT_COLS: return {&l->cols, 8};
    case CUBLASLT_MATRIX_LAYOUT_LD: return {&l->ld, 8};
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return {&l->batch, 4};
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return {&l->stride, 8};
    default: return {nullptr, 0};
    }
}

Field pref_field(LtPref *p, cublasLtMatmulPreferenceAttributes_t a) {
    switch (a) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return {&p->search, 4};
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return {&p->workspace, 8};
    default: return {nullptr, 0};
    }
}

cublasStatus_t set_field(const char *call, int attr, Field f, const void *buf, size_t bytes) {
    if (!f.p) return blas_status(CUBLAS_STATUS_NOT_SUPPORTED, "%s: attribute %d is not modelled by the host execution", call, attr);
    if (!buf || bytes != f.bytes)
        return blas_status(CUBLAS_STATUS_INVALID_VALUE, "%s: attribute %d takes %zu bytes, not %zu", call, attr, f.bytes, bytes);
    memcpy(f.p, buf, bytes);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t get_field(const char *call, int attr, Field f, void *buf, size_t bytes, size_t *written) {
    if (!f.p) return blas_status(CUBLAS_STATUS_NOT_SUPPORTED, "%s: attribute %d is not modelled by the host execution", call, attr);
    if (written) *written = f.bytes;
    if (bytes == 0 && written) return CUBLAS_STATUS_SUCCESS;  // a size query
    if (!buf || bytes < f.bytes)
        return blas_status(CUBLAS_STATUS_INVALID_VALUE, "%s: attribute %d needs %zu bytes, %zu given", call, attr, f.bytes, bytes);
    memcpy(buf, f.p, f.bytes);
    return CUBLAS_STATUS_SUCCESS;
}

// Checks a matmul's descriptor and layouts; fills everything of g but the pointers and scalars.
cublasStatus_t check_matmul(const char *call, cublasLtMatmulDesc_t hd, cublasLtMatrixLayout_t ha,
                            cublasLtMatrixLayout_t hb, cublasLtMatrixLayout_t hc, cublasLtMatrixLayout_t hdd,
                            GemmRun *g, const LtDesc **out_desc) {
    const LtDesc *d = live<LtDesc>(hd);
    const LtLayout *A = live<LtLayout>(ha), *B = live<LtLayout>(hb), *C = live<LtLayout>(hc), *D = live<LtLayout>(hdd);
    if (!d || !A || !B || !C || !D)
        return blas_status(CUBLAS_STATUS_INVALID_VALUE, "%s: the descriptor or a layout is not live", call);
    *out_desc = d;
    const LtLayout *all[4] = {A, B, C, D};
    for (const LtLayout *l : all) {
        if (l->order != CUBLASLT_ORDER_COL)
            return blas_status(CUBLAS_STATUS_NOT_SUPPORTED, "%s: order %d (the stand-in takes CUBLASLT_ORDER_COL)", call, l->order);
        if (l->ld < (int64_t)(l->rows > 1 ? l->rows : 1))
            return blas_status(CUBLAS_STATUS_INVALID_VALUE, "%s: a layout of %llu rows has ld %lld", call,
                               (unsigned long long)l->rows, (long long)l->ld);
        if (l->rows > INT_MAX || l->cols > INT_MAX || l->batch != D->batch || l->batch < 0 || l->stride < 0)
            return blas_status(CUBLAS_STATUS_INVALID_VALUE,
                               "%s: layouts of %llu x %llu, batch %d, stride %lld (every layout must have D's batch count)",
                               call, (unsigned long long)l->rows, (unsigned long long)l->cols, l->batch, (long long)l->stride);
    }
    const cudaDataType ab = (cudaDataType)A->type, cd = (cudaDataType)D->type;
    const cublasComputeType_t compute = (cublasComputeType_t)d->compute;
    if (B->type != A->type || C->type != D->type || d->scale != CUDA_R_32F || !blas_types_offered(ab, cd, compute))
        return blas_status(CUBLAS_STATUS_NOT_SUPPORTED, "%s: A %s, B %s, C %s, D %s, scale type %d, compute type %d",
                           call, blas_type_name(ab), blas_type_name((cudaDataType)B->type),
                           blas_type_name((cudaDataType)C->type), blas_type_name(cd), d->scale, d->compute);
    const auto valid_op = [](int32_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; };
    if (!valid_op(d->ta) || !valid_op(d->tb) || d->tc != CUBLAS_OP_N)
        return blas_status(CUBLAS_STATUS_NOT_SUPPORTED, "%s: transa %d, transb %d, transc %d", call, d->ta, d->tb, d->tc);
    const int m = (int)D->rows, n = (int)D->cols;
    const bool ta = d->ta != CUBLAS_OP_N, tb = d->tb != CUBLAS_OP_N;
    const int k = (int)(ta ? A->rows : A->cols);
    if ((ta ? A->cols : A->rows) != (uint64_t)m || (tb ? B->cols : B->rows) != (uint64_t)k ||
        (tb ? B->rows : B->cols) != (uint64_t)n || C->rows != D->rows || C->cols != D->cols)
        return blas_status(CUBLAS_STATUS_INVALID_VALUE,
                           "%s: A %llu x %llu (op %s), B %llu x %llu (op %s), C %llu x %llu, D %llu x %llu do not agree",
                           call, (unsigned long long)A->rows, (unsigned long long)A->cols, ta ? "T" : "N",
                           (unsigned long long)B->rows, (unsigned long long)B->cols, tb ? "T" : "N",
                           (unsigned long long)C->rows, (unsigned long long)C->cols, (unsigned long long)D->rows,
                           (unsigned long long)D->cols);
    const uint32_t epi = d->epilogue;
    if (epi != CUBLASLT_EPILOGUE_DEFAULT && epi != CUBLASLT_EPILOGUE_RELU && epi != CUBLASLT_EPILOGUE_BIAS &&
        epi != CUBLASLT_EPILOGUE_RELU_BIAS)
        return blas_status(CUBLAS_STATUS_NOT_SUPPORTED, "%s: epilogue %u (the stand-in takes DEFAULT, RELU, BIAS, RELU_BIAS)",
                           call, epi);
    const cudaDataType bias_type = d->bias_type < 0 ? cd : (cudaDataType)d->bias_type;
    if ((epi & CUBLASLT_EPILOGUE_BIAS) && bias_type != cd && bias_type != CUDA_R_32F)
        return blas_status(CUBLAS_STATUS_NOT_SUPPORTED, "%s: bias type %d with D %s", call, d->bias_type, blas_type_name(cd));
    if (d->pointer_mode != CUBLASLT_POINTER_MODE_HOST && d->pointer_mode != CUBLASLT_POINTER_MODE_DEVICE)
        return blas_status(CUBLAS_STATUS_NOT_SUPPORTED, "%s: pointer mode %d", call, d->pointer_mode);
    *g = GemmRun{};
    g->ta = (cublasOperation_t)d->ta, g->tb = (cublasOperation_t)d->tb;
    g->m = m, g->n = n, g->k = k, g->batch = D->batch;
    g->ab = ab, g->cd = cd;
    g->lda = A->ld, g->ldb = B->ld, g->ldc = C->ld, g->ldd = D->ld;
    g->sa = A->stride, g->sb = B->stride, g->sc = C->stride, g->sd = D->stride;
    g->reduce = blas_reduce_of(compute);
    g->relu = epi & CUBLASLT_EPILOGUE_RELU;
    g->bias_type = bias_type;
    g->bias_stride = d->bias_stride;
    return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

}  // namespace rgh

using namespace rgh;

#define RGH_LT_LOCK() std::lock_guard<std::recursive_mutex> rgh_guard_(runtime_lock())

cublasStatus_t cublasLtCreate(cublasLtHandle_t *out) {
    RGH_LT_LOCK();
    return create("cublasLtCreate", out, new LtHandle);
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    RGH_LT_LOCK();
    return destroy<LtHandle>("cublasLtDestroy", h);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *out, cublasComputeType_t compute, cudaDataType_t scale) {
    RGH_LT_LOCK();
    LtDesc *d = new LtDesc;
    d->compute = compute, d->scale = scale;
    return create("cublasLtMatmulDescCreate", out, d);
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    RGH_LT_LOCK();
    return destroy<LtDesc>("cublasLtMatmulDescDestroy", d);
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t h, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t bytes) {
    RGH_LT_LOCK();
    LtDesc *d = live<LtDesc>(h);
    if (!d) return blas_status(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute: not a live descriptor");
    return set_field("cublasLtMatmulDescSetAttribute", attr, desc_field(d, attr), buf, bytes);
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t h, cublasLtMatmulDescAttributes_t attr, void *buf,
                                              size_t bytes, size_t *written) {
    RGH_LT_LOCK();
    LtDesc *d = live<LtDesc>(h);
    if (!d) return blas_status(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescGetAttribute: not a live descriptor");
    return get_field("cublasLtMatmulDescGetAttribute", attr, desc_field(d, attr), buf, bytes, written);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *out, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    RGH_LT_LOCK();
    LtLayout *l = new LtLayout;
    l->type = type, l->rows = rows, l->cols = cols, l->ld = ld;
    return create("cublasLtMatrixLayoutCreate", out, l);
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    RGH_LT_LOCK();
    return destroy<LtLayout>("cublasLtMatrixLayoutDestroy", l);
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t h, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t bytes) {
    RGH_LT_LOCK();
    LtLayout *l = live<LtLayout>(h);
    if (!l) return blas_status(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutSetAttribute: not a live layout");
    return set_field("cublasLtMatrixLayoutSetAttribute", attr, layout_field(l, attr), buf, bytes);
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t h, cublasLtMatrixLayoutAttribute_t attr,
                                                void *buf, size_t bytes, size_t *written) {
    RGH_LT_LOCK();
    LtLayout *l = live<LtLayout>(h);
    if (!l) return blas_status(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutGetAttribute: not a live layout");
    return get_field("cublasLtMatrixLayoutGetAttribute", attr, layout_field(l, attr), buf, bytes, written);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *out) {
    RGH_LT_LOCK();
    return create("cublasLtMatmulPreferenceCreate", out, new LtPref);
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    RGH_LT_LOCK();
    return destroy<LtPref>("cublasLtMatmulPreferenceDestroy", p);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t h,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t bytes) {
    RGH_LT_LOCK();
    LtPref *p = live<LtPref>(h);
    if (!p) return blas_status(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceSetAttribute: not a live preference");
    return set_field("cublasLtMatmulPreferenceSetAttribute", attr, pref_field(p, attr), buf, bytes);
}

// One algorithm, needing no workspace, for every configuration cublasLtMatmul takes.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lt, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                              cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int *returned) {
    RGH_LT_LOCK();
    const char *call = "cublasLtMatmulAlgoGetHeuristic";
    if (!live<LtHandle>(lt)) return blas_status(CUBLAS_STATUS_NOT_INITIALIZED, "%s: not a live handle", call);
    if (!live<LtPref>(pref)) return blas_status(CUBLAS_STATUS_INVALID_VALUE, "%s: not a live preference", call);
    if (requested <= 0 || !results || !returned)
        return blas_status(CUBLAS_STATUS_INVALID_VALUE, "%s: %d algorithms requested", call, requested);
    GemmRun g;
    const LtDesc *d;
    *returned = 0;
    if (cublasStatus_t st = check_matmul(call, desc, A, B, C, D, &g, &d)) return st;
    memset(&results[0], 0, sizeof results[0]);
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lt, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t ha, const void *B, cublasLtMatrixLayout_t hb, const void *beta,
                              const void *C, cublasLtMatrixLayout_t hc, void *D, cublasLtMatrixLayout_t hd,
                              const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
    RGH_LT_LOCK();
    (void)algo, (void)workspace, (void)workspace_bytes;  // one algorithm, no workspace
    const char *call = "cublasLtMatmul";
    if (!live<LtHandle>(lt)) return blas_status(CUBLAS_STATUS_NOT_INITIALIZED, "%s: %p is not a live handle", call, (void *)lt);
    if (sticky_error() != cudaSuccess) return blas_status(CUBLAS_STATUS_EXECUTION_FAILED, "%s: the device faulted", call);
    GemmRun g;
    const LtDesc *d;
    if (cublasStatus_t st = check_matmul(call, desc, ha, hb, hc, hd, &g, &d)) return st;
    if (C == D && (g.ldc != g.ldd || g.sc != g.sd))
        return blas_status(CUBLAS_STATUS_INVALID_VALUE, "%s: C and D are the same memory with different layouts", call);
    if (cublasStatus_t st = blas_scalars(call, d->pointer_mode == CUBLASLT_POINTER_MODE_DEVICE, alpha, beta, &g)) return st;
    if (g.m == 0 || g.n == 0 || g.batch == 0) return CUBLAS_STATUS_SUCCESS;
    const LtLayout *la = live<LtLayout>(ha), *lb = live<LtLayout>(hb);
    const size_t eab = blas_type_bytes(g.ab), ecd = blas_type_bytes(g.cd);
    const bool reads_ab = g.k > 0 && (g.device_scalars || g.alpha != 0.0f);
    const bool reads_c = g.device_scalars || g.beta != 0.0f;
    if (!blas_span_ok(D, g.m, g.n, g.ldd, g.sd, g.batch, ecd)) return blas_bad_matrix(call, "D", D);
    if (reads_c && !blas_span_ok(C, g.m, g.n, g.ldc, g.sc, g.batch, ecd)) return blas_bad_matrix(call, "C", C);
    if (reads_ab && !blas_span_ok(A, (long long)la->rows, (long long)la->cols, g.lda, g.sa, g.batch, eab))
        return blas_bad_matrix(call, "A", A);
    if (reads_ab && !blas_span_ok(B, (long long)lb->rows, (long long)lb->cols, g.ldb, g.sb, g.batch, eab))
        return blas_bad_matrix(call, "B", B);
    if (d->epilogue & CUBLASLT_EPILOGUE_BIAS) {
        if (!blas_span_ok(d->bias, g.m, 1, g.m, d->bias_stride, g.batch, blas_type_bytes(g.bias_type)))
            return blas_bad_matrix(call, "bias", d->bias);
        g.bias = d->bias;
    }
    g.A = A, g.B = B, g.C = C, g.D = D;
    return blas_submit(call, stream, g);
}
