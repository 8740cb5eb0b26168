// mul_mat_rows.h - weight rows of any type times F32 activations, on the
// thread pool: the CPU matmul kernel the graph's MUL_MAT issues.
#ifndef RG_CPU_MUL_MAT_ROWS_H
#define RG_CPU_MUL_MAT_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "retrograd.h"

// y[m + n*M] = sum_k W[k, m] * x[k + n*K] for m < M, n < N.
//   w: [K, M] rows of type w_type, row m at w + m * w_row_stride bytes
//   x: [K, N] f32, contiguous columns; y: [M, N] f32
// Activations are first converted to the type's vec_dot_type (q8_0, q8_1,
// q8_K) once per column, as that type is meant to be multiplied; F32, F16
// and BF16 weights take the F32 activations directly. Rows are split across
// the pool's threads; each output is computed by one thread in one fixed
// order, so the result does not depend on the thread count.
rg_status rg_cpu_mul_mat_rows(rg_threadpool *pool, uint32_t w_type, const void *w, size_t w_row_stride, int64_t K,
                              int64_t M, const float *x, int64_t N, float *y, rg_error *err);

#endif
