// ops_norm.cu - CUDA cells of the op table for the normalization family:
// RMS_NORM(_BACK), ROPE(_BACK), SOFT_MAX_BACK, CROSS_ENTROPY_LOSS(_BACK) and
// ATTN_DECODE (cuda_common.cuh). Each kernel performs the arithmetic of the CPU
// kernel it stands for (src/cpu/ops_norm_rope.c, ops_softmax_loss.c,
// ops_attn_decode.c): the same precision per step (double where the CPU uses
// double), every product and sum rounded on its own (the _rn intrinsics: nvcc
// would otherwise fuse them into FMAs), the CPU's exp polynomial
// (cpu/exp_poly.h) step by step. What can differ is said per cell:
//
//   RMS_NORM       f32 rows (packed, any row strides). sum x^2 in double, the
//                  block's tree instead of the CPU's left-to-right order: the
//                  double sums differ in their last bits, so the f32 scale
//                  1/sqrt(ss/n + eps) may differ by 1 ulp (rarely) and y by <= 2 ulp.
//   RMS_NORM_BACK  dy, x f32 rows. Both sums in double (tree order), dx evaluated
//                  in double and rounded once: <= 1 ulp of dx plus the double
//                  sums' order (~1e-16 of |r dy| + |c x|, seen under cancellation).
//   ROPE(_BACK)    x f32 rows [head_dim, n_head, T, b], pos I32 [T], modes 0 and
//                  2, n_rot <= head_dim. theta, pow, cos and sin in double as
//                  on the CPU, rounded to f32, then the rotation in f32. CUDA's
//                  pow/sin/cos are within 2 ulp of double (glibc's are
//                  correctly rounded), so c and s are the CPU's floats except
//                  when the double lands within those ulps of a float rounding
//                  boundary: then 1 ulp of c or s, |dy| <= 2^-24 (|a| + |b|) + 1 ulp.
//   SOFT_MAX_BACK  dy, y (and a with a softcap) f32 rows. sum y dy in double (tree
//                  order), da in double, rounded once; with a softcap CUDA's
//                  tanhf (<= 2 ulp) stands for glibc's.
//   CROSS_ENTROPY_LOSS(_BACK)  logits f32 rows [V, T], labels I32 [T]. Per token:
//                  max in f32, exp_poly's exponentials (the CPU's bits), their
//                  sum in double (tree order, where the CPU has 8 partial sums),
//                  log in double. The loss adds the per-token terms in a fixed
//                  order that depends only on T (no atomics): the same result
//                  on every run, within a few ulp of double of the CPU's before
//                  the final f32 rounding. The count of valid labels (fp[0] == 0)
//                  is made on the device. A label outside [0, V) (other than the
//                  ignore index) makes the loss, or that row of the gradient and
//                  every other row (the count is unknown), NaN: the CPU refuses
//                  the node with an error instead.
//   ATTN_DECODE    q f32 [Dh, H, T] packed, k [Dh, n_kv, Hkv] and vt [n_kv, Dh, Hkv]
//                  f32 or f16 (packed rows, any row and head strides), Dh <= 512.
//                  The CPU's split: chunks of 128 keys, per chunk the f32 max,
//                  exp_poly's p, l in double (stored f32) and o = sum p v in
//                  f32, then the chunks merged in chunk order in double. The
//                  f32 dot products sum in another order than the CPU's (which
//                  itself differs between its AVX2 and scalar paths).
//
// FMA rule (nvcc builds with --fmad=false, scripts/check-fma.sh): a fused multiply-add only where
// written (__fmaf_rn in ATTN_DECODE's dot products, as the CPU's AVX2 kernel's _mm256_fmadd_ps);
// the norms, rope, softmax and loss rows are the CPU's bits, which a fusion would change.
//
// Layout: the kernels first, then the launchers, then the support rules and the registration.
#include <math.h>
#include <stdint.h>

#include <cuda_fp16.h>

#include "cuda/cuda_common.cuh"

extern "C" {
#include "cpu/exp_poly.h"  // the constants of the CPU's exp(-|a|): the device version below is step for step
}

namespace {

// ===========================================================================
// Kernels
// ===========================================================================

// Element strides and the flattening of dims 1..3 of a tensor with packed rows.
struct row_geom {
    int64_t ne1, ne2;      // rows are r = i1 + ne1 * (i2 + ne2 * i3)
    int64_t s1, s2, s3;    // strides in elements
};
RG_KERNEL_NO_POINTERS(row_geom)

__device__ inline int64_t row_offset(const row_geom &g, int64_t r) {
    const int64_t i1 = r % g.ne1, i23 = r / g.ne1;
    return i1 * g.s1 + (i23 % g.ne2) * g.s2 + (i23 / g.ne2) * g.s3;
}

// exp(-|a|) exactly as rg_exp_neg_abs (cpu/exp_poly.h): every step one rounded
// IEEE operation, in the same order, so the bits are the CPU's.
__device__ inline float exp_neg_abs(float a) {
    const float ax = fabsf(a);
    if (!(ax <= RG_EXP_CUTOFF)) return ax > RG_EXP_CUTOFF ? 0.0f : ax;  // too small to matter, or NaN
    const float x = -ax;
    const float fn = __fsub_rn(__fadd_rn(__fmul_rn(x, RG_EXP_LOG2E), RG_EXP_ROUND), RG_EXP_ROUND);
    const float r = __fsub_rn(__fsub_rn(x, __fmul_rn(fn, RG_EXP_LN2_HI)), __fmul_rn(fn, RG_EXP_LN2_LO));
    float p = RG_EXP_P0;
    p = __fadd_rn(__fmul_rn(p, r), RG_EXP_P1);
    p = __fadd_rn(__fmul_rn(p, r), RG_EXP_P2);
    p = __fadd_rn(__fmul_rn(p, r), RG_EXP_P3);
    p = __fadd_rn(__fmul_rn(p, r), RG_EXP_P4);
    p = __fadd_rn(__fmul_rn(p, r), RG_EXP_P5);
    p = __fadd_rn(__fmul_rn(p, __fmul_rn(r, r)), r);
    p = __fadd_rn(p, 1.0f);
    return __fmul_rn(p, __uint_as_float((uint32_t)((int32_t)fn + 127) << 23));  // 2^n, n in -126..0
}

// ---------------------------------------------------------------------------
// RMS_NORM: one block per row r of x [n, rows] (grid-stride over rows); y [n, rows] packed.
//   y_k = x_k * (float)(1 / sqrt(sum_j x_j^2 / n + eps)),  the sum in double.
__global__ void rms_norm_kernel(const float *x, row_geom gx, float *y, int64_t n, int64_t nrows, double eps) {
    RG_SHARED(double, sh, 32);
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        const float *xr = x + row_offset(gx, r);  // [n]
        float *yr = y + r * n;                    // [n]; may be xr (in place): each thread rewrites what it read
        double ss = 0.0;
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) ss = __dadd_rn(ss, __dmul_rn(xr[k], xr[k]));
        ss = rg_cu_block_reduce(ss, 0.0, sh, rg_cu_add());
        const float scale = (float)__ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(__ddiv_rn(ss, (double)n), eps)));
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) yr[k] = __fmul_rn(xr[k], scale);
    }
}

// RMS_NORM_BACK: one block per row of dy, x [n, rows] -> dx [n, rows] packed (training.md §5.1):
//   r = 1/sqrt(sum x^2 / n + eps),  c = r^3 / n * sum dy x,  dx_k = (float)(r dy_k - c x_k), all in double.
__global__ void rms_norm_back_kernel(const float *dy, row_geom gdy, const float *x, row_geom gx, float *dx, int64_t n,
                                     int64_t nrows, double eps) {
    RG_SHARED(double, sh, 32);
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        const float *dyr = dy + row_offset(gdy, r), *xr = x + row_offset(gx, r);  // [n]
        float *dxr = dx + r * n;                                                 // [n]
        double ss = 0.0, sdx = 0.0;
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
            ss = __dadd_rn(ss, __dmul_rn(xr[k], xr[k]));
            sdx = __dadd_rn(sdx, __dmul_rn(dyr[k], xr[k]));
        }
        ss = rg_cu_block_reduce(ss, 0.0, sh, rg_cu_add());
        sdx = rg_cu_block_reduce(sdx, 0.0, sh, rg_cu_add());
        const double rr = __ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(__ddiv_rn(ss, (double)n), eps)));
        const double c = __dmul_rn(__ddiv_rn(__dmul_rn(__dmul_rn(rr, rr), rr), (double)n), sdx);
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x)
            dxr[k] = (float)__dsub_rn(__dmul_rn(rr, dyr[k]), __dmul_rn(c, xr[k]));
    }
}

// ---------------------------------------------------------------------------
// ROPE / ROPE_BACK. The table cs [T][half][2] first (as the CPU's rope_table):
//   theta = ((double)pos_t * freq_scale) * base^(-2i / n_rot),
//   cs = (float)cos(theta), sign * (float)sin(theta)  (sign -1: the backward's rotation by -theta).
__global__ void rope_table_kernel(const int32_t *pos, int64_t T, int64_t half, double n_rot, double base,
                                  double freq_scale, float sign, float *cs) {
    const int64_t count = T * half;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < count; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = e / half, i = e - t * half;
        const double freq = pow(base, __ddiv_rn(-2.0 * (double)i, n_rot));
        const double theta = __dmul_rn(__dmul_rn((double)pos[t], freq_scale), freq);
        cs[2 * e] = (float)cos(theta);
        cs[2 * e + 1] = __fmul_rn(sign, (float)sin(theta));
    }
}

// Then the rotation: row r of x [hd, nh, T, b] (token t = (r / nh) % T) has hd - half
// units: the half pairs (p, q) = (2i, 2i + 1) (NORMAL) or (i, i + half) (NEOX),
//   (a, b) -> (a c - b s, a s + b c) in f32,
// then the dims >= 2 half copied. y packed; it may be x (each unit rewrites what it read).
__global__ void rope_kernel(const float *x, row_geom gx, float *y, const float *cs, int64_t hd, int64_t nh, int64_t T,
                            int64_t half, int neox, int64_t nrows) {
    const int64_t units = hd - half, count = nrows * units;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < count; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / units, u = e - r * units;
        const float *xr = x + row_offset(gx, r);  // [hd]
        float *yr = y + r * hd;                   // [hd]
        if (u < half) {
            const float *cst = cs + (((r / nh) % T) * half + u) * 2;
            const float c = cst[0], s = cst[1];
            const int64_t p = neox ? u : 2 * u, q = neox ? u + half : 2 * u + 1;
            const float a = xr[p], b = xr[q];
            yr[p] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
            yr[q] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
        } else {
            const int64_t k = half + u;  // 2 half + (u - half)
            yr[k] = xr[k];
        }
    }
}

// ---------------------------------------------------------------------------
// SOFT_MAX_BACK: one block per row of dy, y (a) [n, rows] -> da [n, rows] packed (§5.3-5.4):
//   s = sum y dy (double),  g_k = y_k (dy_k - s) scale,  with a softcap g_k *= 1 - t_k^2,
//   t_k = (double)tanhf(scale a_k / softcap) (the forward's f32 t); da_k = (float)g_k.
__global__ void soft_max_back_kernel(const float *dy, row_geom gdy, const float *y, row_geom gy, const float *a,
                                     row_geom ga, float *da, int64_t n, int64_t nrows, float scale, float softcap) {
    RG_SHARED(double, sh, 32);
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        const float *dyr = dy + row_offset(gdy, r), *yr = y + row_offset(gy, r);  // [n]
        const float *ar = a ? a + row_offset(ga, r) : NULL;                       // [n] with a softcap
        float *dar = da + r * n;                                                 // [n]
        double s = 0.0;
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s = __dadd_rn(s, __dmul_rn(yr[k], dyr[k]));
        s = rg_cu_block_reduce(s, 0.0, sh, rg_cu_add());
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
            double g = __dmul_rn(__dmul_rn(yr[k], __dsub_rn(dyr[k], s)), (double)scale);
            if (ar) {
                const double t = (double)tanhf(__fdiv_rn(__fmul_rn(scale, ar[k]), softcap));
                g = __dmul_rn(g, __dsub_rn(1.0, __dmul_rn(t, t)));
            }
            dar[k] = (float)g;
        }
    }
}

// ---------------------------------------------------------------------------
// CROSS_ENTROPY_LOSS(_BACK): logits Z [V, T] (rows), labels I32 [T].

// Row max (f32; NaN skipped, -inf when none) and sum_v exp(Z[v] - max) (double) of
// one row, for the whole block; with e, the exponentials are stored there too
// (each thread's own elements).
__device__ void ce_row_max_sumexp(const float *z, float *e, int64_t V, float *sh_max, double *sh_sum, float *mx_out,
                                  double *sum_out) {
    float mx = -INFINITY;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
        if (z[v] > mx) mx = z[v];
    mx = rg_cu_block_reduce(mx, -INFINITY, sh_max, rg_cu_max_f32());
    double sum = 0.0;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
        const float x = exp_neg_abs(__fsub_rn(z[v], mx));
        if (e) e[v] = x;
        sum = __dadd_rn(sum, (double)x);
    }
    *mx_out = mx;
    *sum_out = rg_cu_block_reduce(sum, 0.0, sh_sum, rg_cu_add());
}

// Per token t (one block per row): term_t = (max + log sum) - Z[label_t, t] in double,
// 0 for an ignored token, NaN for a label outside [0, V).
__global__ void ce_rows_kernel(const float *z, row_geom gz, const int32_t *labels, int32_t ignore, int64_t V,
                               int64_t T, double *terms) {
    RG_SHARED(float, sh_max, 32);
    RG_SHARED(double, sh_sum, 32);
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
        const int32_t label = labels[t];
        if (label == ignore || label < 0 || label >= V) {  // the same branch in every thread of the block
            if (threadIdx.x == 0) terms[t] = label == ignore ? 0.0 : (double)NAN;
            continue;
        }
        const float *zr = z + row_offset(gz, t);  // [V]
        float mx;
        double sum;
        ce_row_max_sumexp(zr, NULL, V, sh_max, sh_sum, &mx, &sum);
        if (threadIdx.x == 0) terms[t] = __dsub_rn(__dadd_rn((double)mx, log(sum)), (double)zr[label]);
    }
}

// 1/N_valid for labels [T], by one block (a fixed order: the same on every run):
// fp[0] when it is given (> 0), else 1 / the count of labels != ignore, 0 without
// any; NaN when a label other than ignore is outside [0, V) (the CPU's error).
__device__ double ce_inv_n(const int32_t *labels, int32_t ignore, int64_t V, int64_t T, float inv_n_given,
                           long long *sh, long long *cnt_out) {
    long long cnt = 0, bad = 0;
    for (int64_t t = threadIdx.x; t < T; t += blockDim.x) {
        const int32_t label = labels[t];
        cnt += label != ignore;
        bad += label != ignore && (label < 0 || label >= V);
    }
    cnt = rg_cu_block_reduce(cnt, 0LL, sh, rg_cu_add());
    bad = rg_cu_block_reduce(bad, 0LL, sh, rg_cu_add());
    *cnt_out = cnt;
    if (bad) return (double)NAN;
    return inv_n_given > 0.0f ? (double)inv_n_given : cnt > 0 ? __ddiv_rn(1.0, (double)cnt) : 0.0;
}

// One block: L = (float)(sum_t term_t * inv_n), the terms added thread-strided then
// as a tree (an order that depends only on T and the block size); 0 without valid tokens.
__global__ void ce_total_kernel(const double *terms, const int32_t *labels, int32_t ignore, int64_t V, int64_t T,
                                const rg_node_params *prm, float *loss) {
    const float inv_n_given = prm->fp[0];
    RG_SHARED(double, sh_sum, 32);
    RG_SHARED(long long, sh_cnt, 32);
    double sum = 0.0;
    for (int64_t t = threadIdx.x; t < T; t += blockDim.x) sum = __dadd_rn(sum, terms[t]);
    sum = rg_cu_block_reduce(sum, 0.0, sh_sum, rg_cu_add());
    long long cnt;
    const double inv_n = ce_inv_n(labels, ignore, V, T, inv_n_given, sh_cnt, &cnt);
    if (threadIdx.x == 0) *loss = cnt == 0 ? 0.0f : (float)__dmul_rn(sum, inv_n);
}

// One block: coef = dL * inv_n (double) into *coef, for the backward's rows.
__global__ void ce_coef_kernel(const float *dl, const int32_t *labels, int32_t ignore, int64_t V, int64_t T,
                               const rg_node_params *prm, double *coef) {
    const float inv_n_given = prm->fp[0];
    RG_SHARED(long long, sh_cnt, 32);
    long long cnt;
    const double inv_n = ce_inv_n(labels, ignore, V, T, inv_n_given, sh_cnt, &cnt);
    if (threadIdx.x == 0) *coef = __dmul_rn((double)dl[0], inv_n);
}

// CROSS_ENTROPY_LOSS_BACK, one block per row t of dZ [V, T] packed:
//   dZ[v] = (float)(e_v * c), c = coef / sum,  dZ[label] = (float)(e_label * c - coef);
// zeros for an ignored token, NaN for a label outside [0, V).
__global__ void ce_back_kernel(const float *z, row_geom gz, const int32_t *labels, int32_t ignore, int64_t V,
                               int64_t T, const double *coef_p, float *dz) {
    RG_SHARED(float, sh_max, 32);
    RG_SHARED(double, sh_sum, 32);
    const double coef = *coef_p;
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
        const int32_t label = labels[t];
        float *dzr = dz + t * V;  // [V]
        if (label == ignore || label < 0 || label >= V) {
            const float fill = label == ignore ? 0.0f : NAN;
            for (int64_t v = threadIdx.x; v < V; v += blockDim.x) dzr[v] = fill;
            continue;
        }
        float mx;
        double sum;
        ce_row_max_sumexp(z + row_offset(gz, t), dzr, V, sh_max, sh_sum, &mx, &sum);  // dzr[v] = e_v
        const double c = __ddiv_rn(coef, sum);
        for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
            const double ec = __dmul_rn((double)dzr[v], c);
            dzr[v] = (float)(v == label ? __dsub_rn(ec, coef) : ec);
        }
    }
}

// ---------------------------------------------------------------------------
// ATTN_DECODE (ops_attn_decode.c): the keys in chunks of AD_CH, one block of AD_CH
// threads per item (token t, head h, chunk c) with keys [j0, j0 + n) visible to t (causal, and
// from vis - window on with a window):
//   z_i = (q_h . k_(j0+i)) * scale (f32), capped softcap * tanhf(z_i / softcap) with a softcap,
//   m = max z,  p_i = exp(-|z_i - m|),  l = sum p (double),
//   o_d = sum_i p_i vt_d[j0 + i] (f32);  part[t][h][c] = {m, (float)l, o[0..Dh)}.
// Head h reads kv head h / G. A chunk the token cannot see is skipped (the merge stops before it).
constexpr int AD_CH = 128, AD_MAX_DH = 512;

__device__ inline float kv_f32(float v) { return v; }
__device__ inline float kv_f32(__half v) { return __half2float(v); }

template <class KV>
__global__ void attn_chunks_kernel(const float *q, const KV *k, int64_t k_s1, int64_t k_s2, const KV *vt, int64_t v_s1,
                                   int64_t v_s2, float *part, int64_t Dh, int64_t H, int64_t G, int64_t T,
                                   const rg_node_params *prm, int64_t n_ch, float scale, float softcap,
                                   int64_t window) {
    const int64_t n_kv = prm->geom[0];  // the keys cached now; n_ch chunks cover the most there can be
    RG_SHARED(float, sq, AD_MAX_DH);
    RG_SHARED(float, sp, AD_CH);
    RG_SHARED(float, sh_max, 32);
    RG_SHARED(double, sh_sum, 32);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    const int64_t items = T * H * n_ch;
    for (int64_t it = blockIdx.x; it < items; it += gridDim.x) {
        const int64_t c = it % n_ch, h = it / n_ch % H, t = it / n_ch / H;
        const int64_t vis = n_kv - T + 1 + t, lo = window > 0 && vis > window ? vis - window : 0;
        const int64_t j0 = c * AD_CH > lo ? c * AD_CH : lo, j1 = (c + 1) * AD_CH < vis ? (c + 1) * AD_CH : vis;
        if (j0 >= j1) continue;  // the same for the whole block
        const int64_t n = j1 - j0, kvh = h / G;
        __syncthreads();  // the previous item's readers of sq and sp are done
        for (int64_t d = threadIdx.x; d < Dh; d += blockDim.x) sq[d] = q[(t * H + h) * Dh + d];
        __syncthreads();
        for (int64_t i = warp; i < n; i += n_warps) {  // a warp per key, its lanes across d
            const KV *kr = k + kvh * k_s2 + (j0 + i) * k_s1;  // [Dh]
            float acc = 0.0f;
            for (int64_t d = lane; d < Dh; d += 32) acc = __fmaf_rn(kv_f32(kr[d]), sq[d], acc);
            acc = rg_cu_warp_reduce(acc, rg_cu_add());
            float z = __fmul_rn(acc, scale);
            if (softcap > 0.0f) z = __fmul_rn(softcap, tanhf(__fdiv_rn(z, softcap)));
            if (lane == 0) sp[i] = z;
        }
        __syncthreads();
        const float z = (int64_t)threadIdx.x < n ? sp[threadIdx.x] : -INFINITY;
        const float m = rg_cu_block_reduce(z > -INFINITY ? z : -INFINITY, -INFINITY, sh_max, rg_cu_max_f32());  // NaN skipped
        const float p = (int64_t)threadIdx.x < n ? exp_neg_abs(__fsub_rn(z, m)) : 0.0f;
        const double l = rg_cu_block_reduce((double)p, 0.0, sh_sum, rg_cu_add());
        if ((int64_t)threadIdx.x < n) sp[threadIdx.x] = p;
        __syncthreads();
        float *out = part + ((t * H + h) * n_ch + c) * (Dh + 2);
        for (int64_t d = warp; d < Dh; d += n_warps) {  // a warp per output dim, its lanes across keys
            const KV *vr = vt + kvh * v_s2 + d * v_s1 + j0;  // [n]
            float acc = 0.0f;
            for (int64_t i = lane; i < n; i += 32) acc = __fmaf_rn(sp[i], kv_f32(vr[i]), acc);
            acc = rg_cu_warp_reduce(acc, rg_cu_add());
            if (lane == 0) out[2 + d] = acc;
        }
        if (threadIdx.x == 0) out[0] = m, out[1] = (float)l;
    }
}

// The merge, one block per (t, h), threads across d, the chunks in chunk order in double:
//   y_d = (float)(sum_c e_c o_c[d] / sum_c e_c l_c),  e_c = exp(m_c - M),  M = max_c m_c.
__global__ void attn_merge_kernel(const float *part, float *y, int64_t Dh, int64_t H, int64_t T,
                                  const rg_node_params *prm, int64_t n_ch, int64_t window) {
    const int64_t pf = Dh + 2, n_kv = prm->geom[0];
    for (int64_t r = blockIdx.x; r < T * H; r += gridDim.x) {  // r = t * H + h
        const int64_t vis = n_kv - T + 1 + r / H, nc = (vis + AD_CH - 1) / AD_CH;
        const int64_t c0 = (window > 0 && vis > window ? vis - window : 0) / AD_CH;  // the window's first chunk
        const float *pc = part + r * n_ch * pf;
        double M = -INFINITY, L = 0.0;
        for (int64_t c = c0; c < nc; c++) M = fmax(M, (double)pc[c * pf]);
        for (int64_t c = c0; c < nc; c++) L = __dadd_rn(L, __dmul_rn(exp((double)pc[c * pf] - M), (double)pc[c * pf + 1]));
        for (int64_t d = threadIdx.x; d < Dh; d += blockDim.x) {
            double acc = 0.0;
            for (int64_t c = c0; c < nc; c++)
                acc = __dadd_rn(acc, __dmul_rn(exp((double)pc[c * pf] - M), (double)pc[c * pf + 2 + d]));
            y[r * Dh + d] = (float)__ddiv_rn(acc, L);  // L >= 1: the largest chunk contributes e^0 * l >= 1
        }
    }
}

// ===========================================================================
// Launchers
// ===========================================================================

constexpr int NORM_THREADS = 256;
constexpr int64_t MAX_BLOCKS = 65535 * 16;

// Blocks for `count` independent items (a row, a work unit), bounded: the kernels loop past the grid.
unsigned blocks_for(int64_t count, int64_t per_block) {
    const int64_t b = (count + per_block - 1) / per_block;
    return (unsigned)(b < 1 ? 1 : b > MAX_BLOCKS ? MAX_BLOCKS : b);
}

// Threads for one row of n: a multiple of 32 up to NORM_THREADS.
unsigned row_threads(int64_t n) {
    const int64_t t = (n + 31) / 32 * 32;
    return (unsigned)(t < 32 ? 32 : t > NORM_THREADS ? (int64_t)NORM_THREADS : t);
}

row_geom geom_of(const rg_tensor *t) {
    return row_geom{t->ne[1], t->ne[2], (int64_t)(t->nb[1] / 4), (int64_t)(t->nb[2] / 4), (int64_t)(t->nb[3] / 4)};
}

const float *f32_at(const rg_node *s) { return (const float *)s->t.data; }

rg_status run_rms_norm(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, rg_error *err) {
    (void)c;
    const rg_tensor *x = &n->src[0]->t;
    const int64_t len = x->ne[0], nrows = rg_tensor_nrows(x);
    RG_LAUNCH(rms_norm_kernel, blocks_for(nrows, 1), row_threads(len), 0, ctx->stream, f32_at(n->src[0]), geom_of(x),
              (float *)n->t.data, len, nrows, (double)n->fp[0]);
    CU_LAUNCHED();
    return RG_OK;
}

rg_status run_rms_norm_back(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, rg_error *err) {
    (void)c;
    const rg_tensor *x = &n->src[1]->t;
    const int64_t len = x->ne[0], nrows = rg_tensor_nrows(x);
    RG_LAUNCH(rms_norm_back_kernel, blocks_for(nrows, 1), row_threads(len), 0, ctx->stream, f32_at(n->src[0]),
              geom_of(&n->src[0]->t), f32_at(n->src[1]), geom_of(x), (float *)n->t.data, len, nrows,
              (double)n->fp[0]);
    CU_LAUNCHED();
    return RG_OK;
}

size_t rope_work(const rg_node *n, int n_threads) {
    (void)n_threads;
    return (size_t)(n->src[0]->t.ne[2] * (n->ip[0] / 2)) * 2 * sizeof(float);
}

rg_status run_rope(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, rg_error *err) {
    const rg_tensor *x = &n->src[0]->t;
    const int64_t hd = x->ne[0], nh = x->ne[1], T = x->ne[2], half = n->ip[0] / 2, nrows = rg_tensor_nrows(x);
    float *cs = NULL;
    if (half > 0) {
        void *p = NULL;
        RG_TRY(rg_cu_scratch(c, n, rope_work(n, 1), &p, err));
        cs = (float *)p;
        const float sign = n->op == RG_OP_ROPE_BACK ? -1.0f : 1.0f;
        RG_LAUNCH(rope_table_kernel, blocks_for(T * half, NORM_THREADS), NORM_THREADS, 0, ctx->stream,
                  (const int32_t *)n->src[1]->t.data, T, half, (double)n->ip[0], (double)n->fp[0], (double)n->fp[1],
                  sign, cs);
        CU_LAUNCHED();
    }
    RG_LAUNCH(rope_kernel, blocks_for(nrows * (hd - half), NORM_THREADS), NORM_THREADS, 0, ctx->stream, f32_at(n->src[0]),
              geom_of(x), (float *)n->t.data, (const float *)cs, hd, nh, T, half, n->ip[1] == 2 ? 1 : 0, nrows);
    CU_LAUNCHED();
    return RG_OK;
}

rg_status run_soft_max_back(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, rg_error *err) {
    (void)c;
    const rg_tensor *y = &n->src[1]->t;
    const rg_node *a = n->fp[1] > 0.0f ? n->src[2] : NULL;
    const int64_t len = y->ne[0], nrows = rg_tensor_nrows(y);
    RG_LAUNCH(soft_max_back_kernel, blocks_for(nrows, 1), row_threads(len), 0, ctx->stream, f32_at(n->src[0]),
              geom_of(&n->src[0]->t), f32_at(n->src[1]), geom_of(y), a ? f32_at(a) : (const float *)NULL,
              a ? geom_of(&a->t) : geom_of(y), (float *)n->t.data, len, nrows, n->fp[0], n->fp[1]);
    CU_LAUNCHED();
    return RG_OK;
}

size_t ce_work(const rg_node *n, int n_threads) {
    (void)n_threads;
    return n->op == RG_OP_CROSS_ENTROPY_LOSS ? (size_t)rg_tensor_nrows(&n->src[0]->t) * sizeof(double)
                                             : sizeof(double);
}

rg_status run_cross_entropy_loss(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, rg_error *err) {
    const rg_tensor *z = &n->src[0]->t;
    const int64_t V = z->ne[0], T = rg_tensor_nrows(z);
    const int32_t *labels = (const int32_t *)n->src[1]->t.data, ignore = (int32_t)n->ip[0];
    void *terms = NULL;
    RG_TRY(rg_cu_scratch(c, n, ce_work(n, 1), &terms, err));
    RG_LAUNCH(ce_rows_kernel, blocks_for(T, 1), row_threads(V), 0, ctx->stream, f32_at(n->src[0]), geom_of(z), labels,
              ignore, V, T, (double *)terms);
    CU_LAUNCHED();
    const rg_node_params *prm;
    RG_TRY(rg_cu_params(c, n, &prm, err));
    RG_LAUNCH(ce_total_kernel, 1, NORM_THREADS, 0, ctx->stream, (const double *)terms, labels, ignore, V, T, prm,
              (float *)n->t.data);
    CU_LAUNCHED();
    return RG_OK;
}

rg_status run_cross_entropy_loss_back(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, rg_error *err) {
    const rg_tensor *z = &n->src[1]->t;
    const int64_t V = z->ne[0], T = rg_tensor_nrows(z);
    const int32_t *labels = (const int32_t *)n->src[2]->t.data, ignore = (int32_t)n->ip[0];
    void *coef = NULL;
    RG_TRY(rg_cu_scratch(c, n, ce_work(n, 1), &coef, err));
    const rg_node_params *prm;
    RG_TRY(rg_cu_params(c, n, &prm, err));
    RG_LAUNCH(ce_coef_kernel, 1, NORM_THREADS, 0, ctx->stream, f32_at(n->src[0]), labels, ignore, V, T, prm,
              (double *)coef);
    CU_LAUNCHED();
    RG_LAUNCH(ce_back_kernel, blocks_for(T, 1), row_threads(V), 0, ctx->stream, f32_at(n->src[1]), geom_of(z), labels,
              ignore, V, T, (const double *)coef, (float *)n->t.data);
    CU_LAUNCHED();
    return RG_OK;
}

// The most keys the node's cache views can show: the row length of the transposed values
// (their dim-1 stride; a KV cache's n_ctx), at least the keys shown now. The launch and the
// scratch are sized by it, so a decode step that moves the views (only n_kv, in the node's
// parameters, changes) keeps a captured CUDA graph valid.
static int64_t attn_decode_max_kv(const rg_node *n) {
    const rg_tensor *k = &n->src[1]->t, *vt = &n->src[2]->t;
    const int64_t es = k->type == RG_TYPE_F16 ? 2 : 4, rows = vt->ne[1] > 1 ? (int64_t)vt->nb[1] / es : k->ne[1];
    return rows > k->ne[1] ? rows : k->ne[1];
}

void attn_decode_geometry(const rg_node *n, int64_t geom[4]) { geom[0] = n->src[1]->t.ne[1]; }

size_t attn_decode_work(const rg_node *n, int n_threads) {
    (void)n_threads;
    const rg_tensor *q = &n->src[0]->t;
    const int64_t n_ch = (attn_decode_max_kv(n) + AD_CH - 1) / AD_CH;
    return (size_t)(q->ne[1] * q->ne[2] * n_ch * (q->ne[0] + 2)) * sizeof(float);
}

rg_status run_attn_decode(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, rg_error *err) {
    const rg_tensor *q = &n->src[0]->t, *k = &n->src[1]->t, *vt = &n->src[2]->t;
    const int64_t Dh = q->ne[0], H = q->ne[1], T = q->ne[2], Hkv = k->ne[2];
    const int64_t n_ch = (attn_decode_max_kv(n) + AD_CH - 1) / AD_CH;
    const size_t es = k->type == RG_TYPE_F16 ? 2 : 4;
    const rg_node_params *prm;
    RG_TRY(rg_cu_params(c, n, &prm, err));
    const int64_t k_s1 = (int64_t)(k->nb[1] / es), k_s2 = (int64_t)(k->nb[2] / es);
    const int64_t v_s1 = (int64_t)(vt->nb[1] / es), v_s2 = (int64_t)(vt->nb[2] / es);
    void *p = NULL;
    RG_TRY(rg_cu_scratch(c, n, attn_decode_work(n, 1), &p, err));
    float *part = (float *)p;
    const unsigned items = blocks_for(T * H * n_ch, 1);
    if (k->type == RG_TYPE_F16)
        RG_LAUNCH(attn_chunks_kernel<__half>, items, AD_CH, 0, ctx->stream, f32_at(n->src[0]),
                  (const __half *)k->data, k_s1, k_s2, (const __half *)vt->data, v_s1, v_s2, part, Dh, H, H / Hkv, T,
                  prm, n_ch, n->fp[0], n->fp[1], n->ip[0]);
    else
        RG_LAUNCH(attn_chunks_kernel<float>, items, AD_CH, 0, ctx->stream, f32_at(n->src[0]), (const float *)k->data,
                  k_s1, k_s2, (const float *)vt->data, v_s1, v_s2, part, Dh, H, H / Hkv, T, prm, n_ch, n->fp[0], n->fp[1],
                  n->ip[0]);
    CU_LAUNCHED();
    RG_LAUNCH(attn_merge_kernel, blocks_for(T * H, 1), row_threads(Dh), 0, ctx->stream, (const float *)part,
              (float *)n->t.data, Dh, H, T, prm, n_ch, n->ip[0]);
    CU_LAUNCHED();
    return RG_OK;
}

// ===========================================================================
// Support: types, shapes and strides only (the scheduler asks before bytes are bound)
// ===========================================================================

// Every node of these cells: an F32 output, contiguous, not empty.
bool out_f32(const rg_node *n) {
    return n->t.type == RG_TYPE_F32 && rg_tensor_is_contiguous(&n->t) && rg_tensor_nelements(&n->t) > 0;
}

// Strides of dims >= from are whole elements of esz bytes.
bool strides_of(const rg_tensor *t, int from, size_t esz) {
    for (int i = from; i < RG_MAX_DIMS; i++)
        if (t->nb[i] % esz) return false;
    return true;
}

// An F32 source of n's shape with packed rows (what the CPU's need_f32_rows takes) and float strides.
bool f32_rows_like_out(const rg_node *s, const rg_node *n) {
    return s && s->t.type == RG_TYPE_F32 && rg_tensor_same_shape(&s->t, &n->t) &&
           (s->t.ne[0] == 1 || s->t.nb[0] == 4) && strides_of(&s->t, 1, 4);
}

// I32 [count]: one packed row (positions, labels).
bool i32_vector(const rg_node *s, int64_t count) {
    return s && s->t.type == RG_TYPE_I32 && rg_tensor_nelements(&s->t) == count && rg_tensor_nrows(&s->t) == 1 &&
           (s->t.ne[0] == 1 || s->t.nb[0] == 4);
}

bool sup_rms_norm(const rg_node *n) { return out_f32(n) && f32_rows_like_out(n->src[0], n); }

bool sup_rms_norm_back(const rg_node *n) {
    return out_f32(n) && f32_rows_like_out(n->src[0], n) && f32_rows_like_out(n->src[1], n);
}

bool sup_rope(const rg_node *n) {
    if (!out_f32(n) || !f32_rows_like_out(n->src[0], n) || !i32_vector(n->src[1], n->t.ne[2])) return false;
    const int64_t n_rot = n->ip[0], mode = n->ip[1];
    return n_rot >= 0 && n_rot % 2 == 0 && n_rot <= n->t.ne[0] && (mode == 0 || mode == 2);
}

bool sup_soft_max_back(const rg_node *n) {
    if (!out_f32(n) || !f32_rows_like_out(n->src[0], n) || !f32_rows_like_out(n->src[1], n)) return false;
    return !(n->fp[1] > 0.0f) || f32_rows_like_out(n->src[2], n);
}

// Logits [V, T] with packed rows; labels I32 [T].
bool ce_sources(const rg_node *z, const rg_node *labels) {
    if (!z || z->t.type != RG_TYPE_F32 || rg_tensor_nelements(&z->t) == 0) return false;
    if (!(z->t.ne[0] == 1 || z->t.nb[0] == 4) || !strides_of(&z->t, 1, 4)) return false;
    return i32_vector(labels, rg_tensor_nrows(&z->t));
}

bool sup_cross_entropy_loss(const rg_node *n) {
    return out_f32(n) && rg_tensor_nelements(&n->t) == 1 && ce_sources(n->src[0], n->src[1]);
}

bool sup_cross_entropy_loss_back(const rg_node *n) {
    const rg_node *dl = n->src[0];
    return out_f32(n) && dl && dl->t.type == RG_TYPE_F32 && rg_tensor_nelements(&dl->t) == 1 &&
           ce_sources(n->src[1], n->src[2]) && rg_tensor_same_shape(&n->src[1]->t, &n->t);
}

bool sup_attn_decode(const rg_node *n) {
    const rg_node *q = n->src[0], *k = n->src[1], *vt = n->src[2];
    if (!out_f32(n) || !q || !k || !vt || q->t.type != RG_TYPE_F32 || !rg_tensor_is_contiguous(&q->t)) return false;
    if (!rg_tensor_same_shape(&q->t, &n->t)) return false;
    const uint32_t kt = k->t.type;
    const size_t es = kt == RG_TYPE_F32 ? 4 : kt == RG_TYPE_F16 ? 2 : 0;
    if (!es || vt->t.type != kt || k->t.nb[0] != es || vt->t.nb[0] != es || !strides_of(&k->t, 1, es) ||
        !strides_of(&vt->t, 1, es))
        return false;
    const int64_t Dh = q->t.ne[0], H = q->t.ne[1], T = q->t.ne[2], n_kv = k->t.ne[1], Hkv = k->t.ne[2];
    return Dh >= 1 && Dh <= AD_MAX_DH && k->t.ne[0] == Dh && vt->t.ne[0] == n_kv && vt->t.ne[1] == Dh &&
           vt->t.ne[2] == Hkv && Hkv > 0 && H % Hkv == 0 && T >= 1 && T <= n_kv && q->t.ne[3] == 1 &&
           k->t.ne[3] == 1 && vt->t.ne[3] == 1;
}

// The cells (cuda_common.cuh).
RG_CU_CELL(rms_norm)
RG_CU_CELL(rms_norm_back)
RG_CU_CELL(rope)
RG_CU_CELL(soft_max_back)
RG_CU_CELL(cross_entropy_loss)
RG_CU_CELL(cross_entropy_loss_back)
RG_CU_CELL(attn_decode)

}  // namespace

// This file's cells of the CUDA column (op_table.cu lists them).
namespace RG_CU_CELLS {
extern const rg_op_col rms_norm = rg_cu_col(cell_rms_norm, sup_rms_norm, NULL, "f32");
extern const rg_op_col rms_norm_back = rg_cu_col(cell_rms_norm_back, sup_rms_norm_back, NULL, "f32");
extern const rg_op_col rope = rg_cu_col(cell_rope, sup_rope, rope_work, "f32");
extern const rg_op_col rope_back = rg_cu_col(cell_rope, sup_rope, rope_work, "f32");
extern const rg_op_col soft_max_back = rg_cu_col(cell_soft_max_back, sup_soft_max_back, NULL, "f32");
// The loss scale (fp[0]) changes from row to row: read on the device (rg_cu_params).
extern const rg_op_col cross_entropy_loss =
    rg_cu_col(cell_cross_entropy_loss, sup_cross_entropy_loss, ce_work, "f32", true);
extern const rg_op_col cross_entropy_loss_back =
    rg_cu_col(cell_cross_entropy_loss_back, sup_cross_entropy_loss_back, ce_work, "f32", true);
// n_kv (a decode step's position) read on the device: a captured decode graph stays valid.
extern const rg_op_col attn_decode =
    rg_cu_col(cell_attn_decode, sup_attn_decode, attn_decode_work, "f32, f16", true, attn_decode_geometry);
}  // namespace RG_CU_CELLS
