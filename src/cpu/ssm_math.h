// ssm_math.h - the per-element rules of the state-space ops (graph.h, SSM_*), compiled by
// the CPU kernels (cpu/ops_ssm*.c) and the CUDA kernels (cuda/ops_ssm.cu) alike, so the
// two make the same decisions and the same values: where a document starts, which conv
// taps a token sees, and the scan's step, decay and slope.
#ifndef RG_CPU_SSM_MATH_H
#define RG_CPU_SSM_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/hd.h"

// The longest conv kernel (d_conv) the ops take.
#define RG_SSM_CONV_MAX_K 8

// Whether token t of a sequence starts a document: t > 0 and its id differs from the
// previous token's. seg: that sequence's T ids, or NULL (one document).
RG_HD static inline bool rg_ssm_starts_doc(const int32_t *seg, int64_t t) {
    return seg && t > 0 && seg[t] != seg[t - 1];
}

// The first position tau the conv may read for token t (0 <= t <= T; t = T is the next
// chunk's first token, for the final state), with K taps: t - (K-1), or the start of
// t's document when that is later. Positions below 0 are the incoming state, readable
// only while t's document is the chunk's first.
RG_HD static inline int64_t rg_ssm_conv_first(const int32_t *seg, int64_t T, int64_t t, int64_t K) {
    const int64_t lo = t - (K - 1);
    for (int64_t u = t < T ? t : T - 1; u > lo && u > 0; u--)
        if (rg_ssm_starts_doc(seg, u)) return u;
    return lo;
}

// The scan's per-token quantities from dt (dt_bias added) and the head's A, in double,
// each rounded once (architectures.md §3.3 step 4; training.md §8.2):
//   step  = softplus(dt) = log(1 + e^dt), dt itself above 20 (llama.cpp's rule)
//   decay = exp(step * A), 0 where the token starts a document (the state before it is 0)
//   slope = d step / d dt = sigmoid(dt), 1 above 20
RG_HD static inline void rg_ssm_dt_values(float dt, float A, bool starts_doc, float *step, float *decay,
                                          float *slope) {
    const double u = (double)dt;
    const double s = u > 20.0 ? u : log1p(exp(u));
    *step = (float)s;
    *decay = starts_doc ? 0.0f : (float)exp(s * (double)A);
    *slope = u > 20.0 ? 1.0f : (float)(u >= 0.0 ? 1.0 / (1.0 + exp(-u)) : exp(u) / (1.0 + exp(u)));
}

// The order of the scan backward's sums over a head's lanes p (dC and dB): eight partial
// sums, lane j taking p = j, j + 8, j + 16, ... in order, then combined as
// ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)). One order for the CPU (which runs the eight as
// vector lanes) and the CUDA kernels, so their bits agree; a plain p-in-order sum was a
// chain of P dependent adds per state row.
#define RG_SSM_LANES 8
RG_HD static inline float rg_ssm_lanes_sum(const float a[RG_SSM_LANES]) {
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

#endif
