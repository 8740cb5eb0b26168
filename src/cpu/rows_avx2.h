// rows_avx2.h - the AVX2 row kernels shared by SOFT_MAX, CROSS_ENTROPY_LOSS,
// LINEAR_CE and ATTN_DECODE (ops_softmax_avx2.c, ops_ce_avx2.c). Each does
// exactly the IEEE operations of the scalar loops beside its callers, in the
// same order (exp_poly.h's exp; sums in 8 double partials, element v into
// v % 8), so both paths give the same bits. Built without AVX2 they do nothing
// and the *_built flags are 0.
#ifndef RG_CPU_ROWS_AVX2_H
#define RG_CPU_ROWS_AVX2_H

#include <stdint.h>

// ops_softmax_avx2.c
extern const int rg_sm_avx2_built;
// z[k] = scale * a[k] (+ mask[k]); returns max_k z[k].
float rg_sm_scores_avx2(const float *a, const float *mask, float scale, float *z, int64_t n);

// ops_ce_avx2.c
extern const int rg_ce_avx2_built;
// max_v z[v].
float rg_ce_max_avx2(const float *z, int64_t n);
// x = exp(z[v] - mx) added to sums[v % 8] in increasing v, stored to e[v] when e
// is not NULL (e may be z: the softmax's exponentials in place).
void rg_ce_exp_sum_avx2(const float *z, float *e, int64_t n, float mx, double sums[8]);
// y[v] = (float)((double)y[v] * c): the softmax's normalization, the gradient's scale.
void rg_ce_scale_avx2(float *y, int64_t n, double c);

#endif
