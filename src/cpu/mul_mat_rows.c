// mul_mat_rows.c - see mul_mat_rows.h.
#include "cpu/mul_mat_rows.h"

#include <stdlib.h>

#include "base/error.h"
#include "cpu/dot_rows.h"
#include "tensor/quant/quant.h"

// Activations up to this many elements are quantized by the calling thread.
enum { SERIAL_QUANTIZE_MAX = 16384, XQ_STACK_BYTES = 16384 };

typedef struct job {
    const rg_quant_ops *ops;
    rg_dot_rows_fn rows;  // several rows per pass (dot_rows.h), or NULL: ops->vec_dot per row
    const rg_quant_ops *act_ops;
    const char *w;
    size_t w_row_stride;
    int64_t K, M, N;
    const float *x;
    char *xq;          // [N] activation rows in vec_dot_type, or NULL when x is used directly
    size_t xq_row;     // bytes per activation row
    float *y;
} job;

static void quantize_columns(void *p, int ith, int nth) {
    job *j = p;
    int64_t n0, n1;
    rg_split_range(j->N, ith, nth, &n0, &n1);
    for (int64_t n = n0; n < n1; n++) j->act_ops->quantize(j->x + n * j->K, j->xq + (size_t)n * j->xq_row, j->K, NULL);
}

// Rows in tiles of 16 so a tile of weights stays in L1/L2 while every column passes.
static void dot_rows(void *p, int ith, int nth) {
    job *j = p;
    int64_t m0, m1;
    rg_split_range(j->M, ith, nth, &m0, &m1);
    const char *xs = j->xq ? j->xq : (const char *)j->x;
    size_t x_row = j->xq ? j->xq_row : (size_t)j->K * sizeof(float);
    for (int64_t mt = m0; mt < m1; mt += 16) {
        int64_t mt_end = mt + 16 < m1 ? mt + 16 : m1;
        for (int64_t n = 0; n < j->N; n++) {
            if (j->rows) {
                j->rows(j->K, mt_end - mt, j->w + (size_t)mt * j->w_row_stride, j->w_row_stride, xs + (size_t)n * x_row,
                        &j->y[mt + n * j->M]);
                continue;
            }
            for (int64_t m = mt; m < mt_end; m++)
                j->ops->vec_dot(j->K, &j->y[m + n * j->M], j->w + (size_t)m * j->w_row_stride, xs + (size_t)n * x_row);
        }
    }
}

rg_status rg_cpu_mul_mat_rows(rg_threadpool *pool, uint32_t w_type, const void *w, size_t w_row_stride, int64_t K,
                              int64_t M, const float *x, int64_t N, float *y, rg_error *err) {
    const rg_type_traits *tt = rg_type_get(w_type);
    const rg_quant_ops *ops = rg_quant_get(w_type);
    if (!ops->vec_dot)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "mul_mat: no dot product for weight type %s", tt->name);
    uint32_t vt = ops->vec_dot_type;
    const rg_type_traits *vtt = rg_type_get(vt);
    if (K <= 0 || K % tt->block_size || K % vtt->block_size)
        return rg_fail(err, RG_ERR_ARG, "mul_mat: K = %lld must be a multiple of the %s block (%lld) and the %s block (%lld)",
                       (long long)K, tt->name, (long long)tt->block_size, vtt->name, (long long)vtt->block_size);
    if (w_row_stride < rg_type_row_size(w_type, K))
        return rg_fail(err, RG_ERR_ARG, "mul_mat: weight row stride %zu is below the %zu bytes of a %s row of %lld",
                       w_row_stride, rg_type_row_size(w_type, K), tt->name, (long long)K);
    job j = {ops, rg_cpu_dot_rows(w_type), NULL, w, w_row_stride, K, M, N, x, NULL, 0, y};
    _Alignas(64) uint64_t xq_stack[XQ_STACK_BYTES / sizeof(uint64_t)];
    if (vt != RG_TYPE_F32) {
        j.act_ops = rg_quant_get(vt);
        if (!j.act_ops->quantize)
            return rg_fail(err, RG_ERR_UNSUPPORTED, "mul_mat: no quantizer for activation type %s", vtt->name);
        j.xq_row = rg_type_row_size(vt, K);
        size_t xq_bytes = j.xq_row * (size_t)(N > 0 ? N : 1);
        j.xq = xq_bytes <= sizeof(xq_stack) ? (char *)xq_stack : malloc(xq_bytes);
        if (!j.xq) return rg_fail(err, RG_ERR_NOMEM, "mul_mat: out of memory for %lld activation rows", (long long)N);
        // A few columns (token generation: N = 1) are quantized here: that takes
        // far less time than handing the work to the pool and waiting for it.
        if (N * K <= SERIAL_QUANTIZE_MAX) quantize_columns(&j, 0, 1);
        else rg_threadpool_run(pool, quantize_columns, &j);
    }
    rg_threadpool_run(pool, dot_rows, &j);
    if (j.xq != (char *)xq_stack) free(j.xq);
    return RG_OK;
}
