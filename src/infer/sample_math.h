// sample_math.h - the arithmetic the CPU sampler (sampler.c) and the device sampler
// (src/cuda/sampling.cu) share, as inline functions C and CUDA both compile, so that the
// same logits, settings, seed and history pick the same token on either side:
//   - rg_sample_exp: exp in IEEE double from + - * / only (no libm, no fused multiply-add:
//     the C code builds with -ffp-contract=off, nvcc with --fmad=false);
//   - the penalty of one logit, the rank key of a candidate;
//   - RG_SAMPLE_BLOCK: the fixed summation order of every sum the chain makes (below).
//
// Summation order. A sum over a list of candidates (in the list's order: rank order once a
// filter has sorted it, id order otherwise) is taken in blocks of RG_SAMPLE_BLOCK consecutive
// positions: each block's values are added left to right from 0, and the block sums are added
// left to right from 0. A running sum at position i (top-p's cumulative mass, the draw's walk)
// is the sum of the blocks before i's block plus the left-to-right sum of i's block up to i, so
// at a block's end it is the running total itself. The device computes the block sums in
// parallel and walks the blocks on one thread; the CPU folds in the same order (a list of at
// most RG_SAMPLE_BLOCK candidates, such as top-k 40, adds plainly left to right).
#ifndef RG_INFER_SAMPLE_MATH_H
#define RG_INFER_SAMPLE_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define RG_SAMPLE_FN __host__ __device__ static inline
#else
#define RG_SAMPLE_FN static inline
#endif

#define RG_SAMPLE_BLOCK 256

// exp(x) with the same bits on every IEEE-754 machine (libm exp is not correctly rounded
// everywhere). Cody-Waite reduction x = k ln2 + r, |r| <= ln2/2, the Taylor series of e^r to
// degree 13 (error below 1e-17) evaluated by Estrin's scheme, and 2^k written as bits; results
// under 2^-1021 are 0.
RG_SAMPLE_FN double rg_sample_exp(double x) {
    if (!(x > -708.0)) return 0.0;  // also -inf and NaN
    if (x > 709.0) return HUGE_VAL;
    double kf = x * 1.4426950408889634;
    int64_t k = kf >= 0 ? (int64_t)(kf + 0.5) : (int64_t)(kf - 0.5);
    kf = (double)k;
    double r = (x - kf * 6.93147180369123816490e-01) - kf * 1.90821492927058770002e-10;
    double r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;
    double p01 = 1.0 + r, p23 = 1.0 / 2 + r * (1.0 / 6), p45 = 1.0 / 24 + r * (1.0 / 120);
    double p67 = 1.0 / 720 + r * (1.0 / 5040), p89 = 1.0 / 40320 + r * (1.0 / 362880);
    double pab = 1.0 / 3628800 + r * (1.0 / 39916800), pcd = 1.0 / 479001600 + r * (1.0 / 6227020800.0);
    double q = (p01 + r2 * p23) + r4 * (p45 + r2 * p67) + r8 * ((p89 + r2 * pab) + r4 * pcd);
    uint64_t bits = (uint64_t)(k + 1023) << 52;  // k in [-1021, 1023]
    double scale;
    memcpy(&scale, &bits, sizeof scale);
    return q * scale;
}

// The repetition penalty of one logit (llama.cpp's): > 0 divided by the penalty, else multiplied.
RG_SAMPLE_FN float rg_sample_penalize(float l, float penalty) { return l > 0.0f ? l / penalty : l * penalty; }

// The rank of a candidate as one unsigned key, larger = ranked first: the logit's order
// (-0 and +0 equal; never NaN here: NaN counts as -inf), then the lower id. Keys of distinct
// ids differ, so the rank order is total.
RG_SAMPLE_FN uint64_t rg_sample_rank_key(float logit, int32_t id) {
    uint32_t u;
    if (logit == 0.0f) logit = 0.0f;  // -0 as +0
    memcpy(&u, &logit, sizeof u);
    uint32_t ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((uint64_t)ord << 32) | (uint64_t)(0xFFFFFFFFu - (uint32_t)id);
}

// Adds one value to a blocked running sum (the order above): *total holds the completed
// blocks, *part the current one, pos the value's position in the list. Returns the running
// sum through this position.
RG_SAMPLE_FN double rg_sample_block_add(double *total, double *part, int64_t pos, double v) {
    *part = *part + v;
    if ((pos + 1) % RG_SAMPLE_BLOCK == 0) {
        *total = *total + *part;
        *part = 0.0;
        return *total;
    }
    return *total + *part;
}

#endif
