// ops_ssm.cu - the CUDA cells of the state-space family (graph.h, SSM_*; cuda_common.cuh):
// SSM_CONV(_BACK), SSM_DT, SSM_SCAN(_BACK). Each kernel performs the IEEE operations of
// its CPU kernel (src/cpu/ops_ssm.c, ops_ssm_scan.c) in the same order, float arithmetic
// written with the _rn intrinsics so that nvcc never fuses it, and takes its decisions
// (document starts, conv taps, step, decay, slope) from cpu/ssm_math.h, which both compile.
// So the results are the CPU's bits (test_ops cuda_parity checks bits for these ops), with
// two exceptions. SSM_DT has its own f32 code (ssm_dt_f32, CUDA's expf and log1pf), held to
// a derived ulp bound, not to bits. The scans' step, decay and slope come from
// rg_ssm_dt_values, double exp and log1p rounded once to f32; on a GPU CUDA's are within
// 1-2 ulp of double where glibc's are correctly rounded, so a value can differ by 1 f32 ulp
// when its double lands that close to a rounding boundary (about 2^-28 of the values;
// never in the host execution, which calls glibc).
// FMA rule (nvcc builds with --fmad=false, scripts/check-fma.sh): no fused multiply-add,
// because the CPU kernels make none and these kernels promise the CPU's bits.
//
//   SSM_CONV       x [C, T, S] f32 with packed rows, any row strides (a view of zxbcdt);
//                  c, state, seg contiguous; K <= 8. A thread per (channel, token) of y,
//                  and per channel of a sequence's final state: the K taps in k order.
//   SSM_CONV_BACK  a thread per (channel, position) of dx and dstate (the taps that read
//                  the position in k order, then the final state's d), and one per (k,
//                  channel) of dc: the sum over sequences then tokens in double.
//   SSM_DT         a thread per (head, token).
//   CONV_RS_GATHER a thread per (channel, column, sequence) of the window: a copy of x's or prev's float.
//   SSM_SCAN       a block per (sequence, head), a thread per lane p < P holding its
//                  column S[:, p] in shared memory ([N][P], N*P*4 bytes; above 48 KiB the
//                  kernel asks for more, up to SSM_MAX_SHARED), the tokens in order, the
//                  n sums in order: the CPU's loop with p across threads. With snapshots
//                  (ip[3]) each thread also stores its column after every token (part 2).
//   SSM_SCAN_BACK  a block per (sequence, head) item, at most SCAN_BACK_BLOCKS blocks
//                  looping over the items; the CPU's chunks: checkpoints every
//                  RG_SSM_SCAN_CHUNK tokens and the chunk's states again, in the block's
//                  slice of the device scratch (global memory), G in shared memory
//                  [N][P+1]. Per token the sums over n run with a thread per p, those over
//                  p with a thread per n (both in the CPU's order), and one thread makes
//                  the double sums over p, ddt and dA's term; P and N up to 1024 on at
//                  most SCAN_BACK_THREADS threads (what the registers allow), a thread
//                  taking every SCAN_BACK_THREADS-th column and row. Then a kernel adds each
//                  group's heads' dB and dC (head order) and one the sequences' dA.
//                  Device scratch: 2 S T H N floats (the heads' dB and dC), S H doubles,
//                  and per block (1 + T/64 + 65) N P floats.
//
// Layout: the kernels, the launchers, then the support rules and the registration.
#include <math.h>
#include <stdint.h>

#include "cuda/cuda_common.cuh"

extern "C" {
#include "cpu/ssm_math.h"
#include "graph/pack.h"
}

namespace {

constexpr int SSM_THREADS = 256;
constexpr int64_t SSM_MAX_BLOCKS = 65535 * 16;
constexpr int SCAN_BACK_BLOCKS = 64;            // concurrent items of SSM_SCAN_BACK (each a scratch slice)
constexpr int64_t SCAN_CHUNK = 64;              // the CPU's RG_SSM_SCAN_CHUNK (ops_ssm_scan.c)
constexpr size_t SSM_MAX_SHARED = 200 * 1024;   // dynamic shared memory a scan block may ask for
// SSM_SCAN_BACK's most threads a block: its register count (96 on sm_90, kernel_table.inc)
// allows 672, not the 1024 that P or N may reach, so a thread takes every 512th column and
// row; the launch bound makes ptxas keep it within 128 registers whatever the flags.
constexpr int SCAN_BACK_THREADS = 512;

// The document ids of sequence s, or NULL (cpu_ssm_seg's rule: [T] shared, or [T, S]).
__device__ inline const int32_t *seg_of(const int32_t *seg, int64_t seg_rows, int64_t T, int64_t s) {
    return seg ? seg + (seg_rows > 1 ? s * T : 0) : NULL;
}

// ===========================================================================
// Kernels
// ===========================================================================

// The conv's geometry: x [C, T, S] with element strides xs1, xs2; state [C, K-1, S].
struct conv_geom {
    int64_t C, T, S, K, xs1, xs2, seg_rows;
};
RG_KERNEL_NO_POINTERS(conv_geom)

// u(tau)[ch] of sequence s: x, or the state before the chunk; *ok false where it reads
// zero (before `first`, or in a NULL state), as the CPU's conv_col.
__device__ inline float conv_u(const conv_geom &g, const float *x, const float *state, int64_t s, int64_t tau,
                               int64_t ch, int64_t first, bool *ok) {
    *ok = tau >= first && (tau >= 0 || state);
    if (!*ok) return 0.0f;
    return tau >= 0 ? x[ch + tau * g.xs1 + s * g.xs2] : state[ch + g.C * ((g.K - 1 + tau) + (g.K - 1) * s)];
}

// Units (ch, t, s) with t = T for the final state's K-1 columns of channel ch.
__global__ void ssm_conv_kernel(conv_geom g, const float *x, const float *c, const float *state, const int32_t *seg,
                                float *y, float *fin) {
    const int64_t count = g.C * (g.T + 1) * g.S;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < count; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t ch = e % g.C, t = e / g.C % (g.T + 1), s = e / g.C / (g.T + 1);
        const int64_t first = rg_ssm_conv_first(seg_of(seg, g.seg_rows, g.T, s), g.T, t, g.K);
        bool ok;
        if (t == g.T) {
            for (int64_t i = 0; i < g.K - 1; i++) {
                const float v = conv_u(g, x, state, s, g.T - (g.K - 1) + i, ch, first, &ok);
                fin[ch + g.C * (i + (g.K - 1) * s)] = v;
            }
            continue;
        }
        const float *w = c + g.K * ch;  // [K]
        float acc = 0.0f;
        for (int64_t k = 0; k < g.K; k++) {
            const float v = conv_u(g, x, state, s, t - (g.K - 1) + k, ch, first, &ok);
            if (ok) acc = __fadd_rn(acc, __fmul_rn(w[k], v));
        }
        y[ch + g.C * (t + g.T * s)] = acc;
    }
}

// CONV_RS_GATHER: units (ch, j, s) of the window after the first pos tokens; g.K - 1 columns, x's strides.
__global__ void conv_rs_gather_kernel(conv_geom g, int64_t pos, const float *x, const float *prev, float *out) {
    const int64_t K1 = g.K - 1, count = g.C * K1 * g.S;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < count; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t ch = e % g.C, j = e / g.C % K1, s = e / g.C / K1, tau = pos - K1 + j;
        out[e] = tau >= 0 ? x[ch + tau * g.xs1 + s * g.xs2] : prev[ch + g.C * ((K1 + tau) + K1 * s)];
    }
}

// dx and dstate: units (ch, tau + K-1, s) for positions tau = -(K-1) .. T-1.
__global__ void ssm_conv_back_x_kernel(conv_geom g, const float *dy, const float *dfin, const float *c,
                                       const int32_t *seg, float *dx, float *dstate) {
    const int64_t L = g.T + g.K - 1, count = g.C * L * g.S;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < count; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t ch = e % g.C, tau = e / g.C % L - (g.K - 1), s = e / g.C / L;
        const int32_t *sg = seg_of(seg, g.seg_rows, g.T, s);
        const float *w = c + g.K * ch;  // [K]
        float acc = 0.0f;
        for (int64_t k = 0; k < g.K; k++) {
            const int64_t t = tau + (g.K - 1) - k;
            if (t >= 0 && t < g.T && tau >= rg_ssm_conv_first(sg, g.T, t, g.K))
                acc = __fadd_rn(acc, __fmul_rn(dy[ch + g.C * (t + g.T * s)], w[k]));
        }
        const int64_t i_fin = tau - (g.T - (g.K - 1));
        if (i_fin >= 0 && tau >= rg_ssm_conv_first(sg, g.T, g.T, g.K))
            acc = __fadd_rn(acc, dfin[ch + g.C * (i_fin + (g.K - 1) * s)]);
        if (tau >= 0) dx[ch + g.C * (tau + g.T * s)] = acc;
        else dstate[ch + g.C * ((g.K - 1 + tau) + (g.K - 1) * s)] = acc;
    }
}

// dc: a thread per (k, ch), the sum over sequences then tokens in double.
__global__ void ssm_conv_back_c_kernel(conv_geom g, const float *dy, const float *x, const float *state,
                                       const int32_t *seg, float *dc) {
    const int64_t count = g.K * g.C;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < count; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t ch = e % g.C, k = e / g.C;
        double acc = 0.0;
        for (int64_t s = 0; s < g.S; s++) {
            const int32_t *sg = seg_of(seg, g.seg_rows, g.T, s);
            for (int64_t t = 0; t < g.T; t++) {
                bool ok;
                const float v = conv_u(g, x, state, s, t - (g.K - 1) + k, ch, rg_ssm_conv_first(sg, g.T, t, g.K), &ok);
                if (ok) acc = __dadd_rn(acc, __dmul_rn((double)dy[ch + g.C * (t + g.T * s)], (double)v));
            }
        }
        dc[k + g.K * ch] = (float)acc;
    }
}

// SSM_DT's values in f32 with the CUDA math library: the CPU's rule (cpu/ssm_math.h,
// rg_ssm_dt_values: double, each value rounded once) written a second time, so the parity row
// compares two implementations. The error against the CPU's (test_ops, ssm_dt_ulps): step
// <= expf's + log1pf's ulps + 1 (d log1p(y) / log1p(y) <= dy / y), slope <= expf's + 2,
// decay <= expf's + 1 + |step A| times step's (exp's argument carries step's error).
__device__ inline void ssm_dt_f32(float dt, float A, bool starts_doc, float *step, float *decay, float *slope) {
    const bool big = dt > 20.0f;  // llama.cpp's rule: softplus(dt) = dt, sigmoid = 1 above 20
    const float s = big ? dt : log1pf(expf(dt));
    *step = s;
    *decay = starts_doc ? 0.0f : expf(__fmul_rn(s, A));
    if (big) {
        *slope = 1.0f;
    } else if (dt >= 0.0f) {
        *slope = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-dt)));
    } else {
        const float e = expf(dt);
        *slope = __fdiv_rn(e, __fadd_rn(1.0f, e));
    }
}

// SSM_DT: a thread per (h, t, s) -> out [H, T, S, 3].
__global__ void ssm_dt_kernel(const float *dt, const float *A, const int32_t *seg, int64_t seg_rows, int64_t H,
                              int64_t T, int64_t S, float *out) {
    const int64_t count = H * T * S;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t h = i % H, t = i / H % T, s = i / H / T;
        const bool starts = rg_ssm_starts_doc(seg_of(seg, seg_rows, T, s), t);
        float step, decay, slope;
        ssm_dt_f32(dt[i], A[h], starts, &step, &decay, &slope);
        out[i] = step, out[i + count] = decay, out[i + 2 * count] = slope;
    }
}

// The scan's geometry (ops_ssm_scan.c's scan_dims) and where token t of sequence s starts in xBC.
struct scan_geom {
    int64_t P, H, N, G, T, S, D, seg_rows;
};
RG_KERNEL_NO_POINTERS(scan_geom)

__device__ inline const float *token_row(const scan_geom &g, const float *xbc, int64_t s, int64_t t) {
    return xbc + g.D * (t + g.T * s);
}

// SSM_SCAN: a block per item (s, h), thread p < P owning S[:, p] in shared memory [N][P].
__global__ void ssm_scan_kernel(scan_geom g, const float *xbc, const float *dt, const float *A, const float *state,
                                const int32_t *seg, float *y, float *fin, float *states) {
    RG_SHARED_DYN(float, S_np);  // [N][P]
    const int64_t p = threadIdx.x, N = g.N, P = g.P;
    for (int64_t item = blockIdx.x; item < g.S * g.H; item += gridDim.x) {
        const int64_t s = item / g.H, h = item % g.H, grp = h / (g.H / g.G);
        if (p < P) {
            const float *st = state ? state + N * P * (h + g.H * s) : NULL;
            for (int64_t n = 0; n < N; n++) S_np[n * P + p] = st ? st[n + N * p] : 0.0f;
            const int32_t *sg = seg_of(seg, g.seg_rows, g.T, s);
            for (int64_t t = 0; t < g.T; t++) {
                const float *row = token_row(g, xbc, s, t), *B = row + P * g.H + N * grp, *C = B + N * g.G;
                float step, decay, slope;
                rg_ssm_dt_values(dt[h + g.H * (t + g.T * s)], A[h], rg_ssm_starts_doc(sg, t), &step, &decay, &slope);
                const float xs = __fmul_rn(row[P * h + p], step);
                float acc = 0.0f;
                for (int64_t n = 0; n < N; n++) {
                    const float v = __fadd_rn(__fmul_rn(decay, S_np[n * P + p]), __fmul_rn(B[n], xs));
                    S_np[n * P + p] = v;
                    acc = __fadd_rn(acc, __fmul_rn(v, C[n]));
                }
                y[p + P * (h + g.H * (t + g.T * s))] = acc;
                if (states) {  // part 2 (ip[3] = 1): S_t [N, P, H] of column t + T s, as the final state is stored
                    float *st_t = states + N * P * (h + g.H * (t + g.T * s));
                    for (int64_t n = 0; n < N; n++) st_t[n + N * p] = S_np[n * P + p];
                }
            }
            float *f = fin + N * P * (h + g.H * s);
            for (int64_t n = 0; n < N; n++) f[n + N * p] = S_np[n * P + p];
        }
        __syncthreads();  // the next item reuses S_np
    }
}

// SSM_SCAN_BACK's buffers (device pointers).
struct scan_back_bufs {
    const float *dy, *dfin, *xbc, *dta, *A, *state;  // dta [H, T, S, 3]
    float *dxbc, *ddt, *dstate;                      // parts of the output
    float *dB_h, *dC_h;                              // [S, T, H, N]
    double *dA_h;                                    // [S, H]
    float *work;                                     // per block: ckpt [n_chunks][N][P], buf [(L + 1)][N][P]
    int64_t L, n_chunks;
};
RG_KERNEL_POINTERS(scan_back_bufs, dy, dfin, xbc, dta, A, state, dxbc, ddt, dstate, dB_h, dC_h, dA_h, work)

// Thread p's column of one token's state step: out[:, p] = decay in[:, p] + B (x_p step), as scan_step.
__device__ inline void back_step_column(const scan_geom &g, const float *row, int64_t h, int64_t grp, int64_t p,
                                        float step, float decay, const float *in, float *out) {
    const float *B = row + g.P * g.H + g.N * grp;
    const float xs = __fmul_rn(row[g.P * h + p], step);
    for (int64_t n = 0; n < g.N; n++) out[n * g.P + p] = __fadd_rn(__fmul_rn(decay, in[n * g.P + p]), __fmul_rn(B[n], xs));
}

__global__ void __launch_bounds__(SCAN_BACK_THREADS) ssm_scan_back_kernel(scan_geom g, scan_back_bufs b) {
    RG_SHARED_DYN(float, sh);
    const int64_t N = g.N, P = g.P, NP = N * P, Pp = P + 1, HTS = g.H * g.T * g.S;
    float *G = sh, *sgB = G + N * Pp, *sq = sgB + P;  // G [N][P + 1], gB [P], q [P]
    float *ckpt = b.work + (int64_t)blockIdx.x * (b.n_chunks + b.L + 1) * NP, *buf = ckpt + b.n_chunks * NP;
    const int64_t tid = threadIdx.x, nthr = blockDim.x;  // thread tid: columns p and rows n = tid mod nthr
    for (int64_t item = blockIdx.x; item < g.S * g.H; item += gridDim.x) {
        const int64_t s = item / g.H, h = item % g.H, grp = h / (g.H / g.G);
        __syncthreads();  // the previous item is done with G, buf and ckpt
        // The checkpoints, thread p's column each: the forward's states before every chunk.
        for (int64_t pc = tid; pc < P; pc += nthr) {
            const float *st = b.state ? b.state + NP * (h + g.H * s) : NULL;
            for (int64_t n = 0; n < N; n++) buf[n * P + pc] = st ? st[n + N * pc] : 0.0f;
            for (int64_t c = 0; c < b.n_chunks; c++) {
                for (int64_t n = 0; n < N; n++) ckpt[c * NP + n * P + pc] = buf[n * P + pc];
                for (int64_t t = c * b.L; t < g.T && t < (c + 1) * b.L; t++) {
                    const int64_t it = h + g.H * (t + g.T * s);
                    back_step_column(g, token_row(g, b.xbc, s, t), h, grp, pc, b.dta[it], b.dta[it + HTS], buf, buf);
                }
            }
            const float *df = b.dfin + NP * (h + g.H * s);
            for (int64_t n = 0; n < N; n++) G[n * Pp + pc] = df[n + N * pc];
        }
        float decay_next = 1.0f;  // G_{T-1} = C dy^T + the final state's gradient
        double dA_acc = 0.0;
        for (int64_t c = b.n_chunks - 1; c >= 0; c--) {
            const int64_t t0 = c * b.L, len = g.T - t0 < b.L ? g.T - t0 : b.L;
            __syncthreads();  // the previous chunk's readers of buf are done
            for (int64_t pc = tid; pc < P; pc += nthr) {
                for (int64_t n = 0; n < N; n++) buf[n * P + pc] = ckpt[c * NP + n * P + pc];
                for (int64_t r = 0; r < len; r++) {
                    const int64_t it = h + g.H * (t0 + r + g.T * s);
                    back_step_column(g, token_row(g, b.xbc, s, t0 + r), h, grp, pc, b.dta[it], b.dta[it + HTS],
                                     buf + r * NP, buf + (r + 1) * NP);
                }
            }
            for (int64_t r = len - 1; r >= 0; r--) {
                const int64_t t = t0 + r, it = h + g.H * (t + g.T * s);
                const float step = b.dta[it], decay = b.dta[it + HTS], slope = b.dta[it + 2 * HTS];
                const float *row = token_row(g, b.xbc, s, t), *x = row + P * h, *B = row + P * g.H + N * grp;
                const float *C = B + N * g.G, *dy = b.dy + P * it, *S_prev = buf + r * NP, *S_cur = buf + (r + 1) * NP;
                __syncthreads();  // the previous token's readers of G, gB and q are done, buf is complete
                for (int64_t pc = tid; pc < P; pc += nthr) {  // G_t's column p and its sums over n
                    float gB = 0.0f, q = 0.0f;
                    for (int64_t n = 0; n < N; n++) {
                        const float gv = __fadd_rn(__fmul_rn(C[n], dy[pc]), __fmul_rn(decay_next, G[n * Pp + pc]));
                        G[n * Pp + pc] = gv;
                        gB = __fadd_rn(gB, __fmul_rn(gv, B[n]));
                        q = __fadd_rn(q, __fmul_rn(gv, S_prev[n * P + pc]));
                    }
                    b.dxbc[g.D * (t + g.T * s) + P * h + pc] = __fmul_rn(step, gB);
                    sgB[pc] = gB, sq[pc] = q;
                }
                __syncthreads();
                // row n's sums over p, in rg_ssm_lanes_sum's order: this head's dC and dB terms
                for (int64_t nr = tid; nr < N; nr += nthr) {
                    float c_acc[RG_SSM_LANES], b_acc[RG_SSM_LANES];
                    for (int l = 0; l < RG_SSM_LANES; l++) c_acc[l] = 0.0f, b_acc[l] = 0.0f;
                    for (int64_t p0 = 0; p0 < P; p0 += RG_SSM_LANES) {
                        for (int l = 0; l < RG_SSM_LANES; l++) {  // lane l: p = l mod 8 (registers, static index)
                            const int64_t p = p0 + l;
                            if (p < P) {
                                c_acc[l] = __fadd_rn(c_acc[l], __fmul_rn(S_cur[nr * P + p], dy[p]));
                                b_acc[l] = __fadd_rn(b_acc[l], __fmul_rn(G[nr * Pp + p], x[p]));
                            }
                        }
                    }
                    b.dC_h[nr + N * it] = rg_ssm_lanes_sum(c_acc);
                    b.dB_h[nr + N * it] = __fmul_rn(step, rg_ssm_lanes_sum(b_acc));
                }
                if (tid == 0) {
                    double s1 = 0.0, s2 = 0.0;
                    for (int64_t p = 0; p < P; p++) {
                        s1 = __dadd_rn(s1, __dmul_rn((double)x[p], (double)sgB[p]));
                        s2 = __dadd_rn(s2, (double)sq[p]);
                    }
                    const double ad = __dmul_rn((double)b.A[h], (double)decay);
                    b.ddt[it] = (float)__dmul_rn(__dadd_rn(s1, __dmul_rn(ad, s2)), (double)slope);
                    dA_acc = __dadd_rn(dA_acc, __dmul_rn(__dmul_rn((double)step, (double)decay), s2));
                }
                decay_next = decay;
            }
        }
        __syncthreads();
        for (int64_t pc = tid; pc < P; pc += nthr) {  // dstate = decay_0 G_0
            float *ds = b.dstate + NP * (h + g.H * s);
            for (int64_t n = 0; n < N; n++) ds[n + N * pc] = __fmul_rn(decay_next, G[n * Pp + pc]);
        }
        if (tid == 0) b.dA_h[s * g.H + h] = dA_acc;
    }
}

// dB and dC of every (n, group, token): the heads' terms in head order.
__global__ void ssm_scan_back_bc_kernel(scan_geom g, const float *dB_h, const float *dC_h, float *dxbc) {
    const int64_t count = g.N * g.G * g.T * g.S, hpg = g.H / g.G;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < count; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = e % g.N, grp = e / g.N % g.G, r = e / g.N / g.G;  // r = t + T * s
        float bsum = 0.0f, csum = 0.0f;
        for (int64_t h = grp * hpg; h < (grp + 1) * hpg; h++) {
            bsum = __fadd_rn(bsum, dB_h[n + g.N * (h + g.H * r)]);
            csum = __fadd_rn(csum, dC_h[n + g.N * (h + g.H * r)]);
        }
        float *row = dxbc + g.D * r + g.P * g.H;
        row[n + g.N * grp] = bsum;
        row[n + g.N * (g.G + grp)] = csum;
    }
}

// dA[h] = the sequences' sums in order, in double.
__global__ void ssm_scan_back_a_kernel(int64_t H, int64_t S, const double *dA_h, float *dA) {
    for (int64_t h = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; h < H; h += (int64_t)gridDim.x * blockDim.x) {
        double a = 0.0;
        for (int64_t s = 0; s < S; s++) a = __dadd_rn(a, dA_h[s * H + h]);
        dA[h] = (float)a;
    }
}

// ===========================================================================
// Launchers
// ===========================================================================

unsigned blocks_for(int64_t count) {
    const int64_t b = (count + SSM_THREADS - 1) / SSM_THREADS;
    return (unsigned)(b < 1 ? 1 : b > SSM_MAX_BLOCKS ? SSM_MAX_BLOCKS : b);
}

// A multiple of 32 covering n threads.
unsigned threads_for(int64_t n) { return (unsigned)((n + 31) / 32 * 32); }

const float *f32_of(const rg_node *s) { return s ? (const float *)s->t.data : NULL; }
const int32_t *i32_of(const rg_node *s) { return s ? (const int32_t *)s->t.data : NULL; }
int64_t seg_rows(const rg_node *seg) { return seg ? seg->t.ne[1] : 1; }

// x (src[ix]) and c (src[ix + 1]) of a conv node, and its ids.
conv_geom conv_geom_of(const rg_node *n, int ix, const rg_node *seg) {
    const rg_tensor *x = &n->src[ix]->t;
    return conv_geom{x->ne[0], x->ne[1], x->ne[2], n->src[ix + 1]->t.ne[0], (int64_t)(x->nb[1] / 4),
                     (int64_t)(x->nb[2] / 4), seg_rows(seg)};
}

rg_status run_ssm_conv(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, rg_error *err) {
    (void)c;
    rg_pack p;
    if (!rg_pack_of(n, &p)) return rg_fail(err, RG_ERR_ARG, "cuda ssm_conv '%s': no layout", n->t.name);
    const conv_geom g = conv_geom_of(n, 0, n->src[3]);
    float *out = (float *)n->t.data;
    RG_LAUNCH(ssm_conv_kernel, blocks_for(g.C * (g.T + 1) * g.S), SSM_THREADS, 0, ctx->stream, g, f32_of(n->src[0]),
              f32_of(n->src[1]), f32_of(n->src[2]), i32_of(n->src[3]), out + p.off[RG_SSM_CONV_Y],
              out + p.off[RG_SSM_CONV_STATE]);
    CU_LAUNCHED();
    return RG_OK;
}

rg_status run_conv_rs_gather(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, rg_error *err) {
    (void)c;
    (void)err;
    const rg_tensor *x = &n->src[0]->t;
    // conv_geom's K is the window's K-1 plus one (the taps of the conv that made it).
    const conv_geom g = conv_geom{x->ne[0], x->ne[1], x->ne[2], n->src[1]->t.ne[1] + 1, (int64_t)(x->nb[1] / 4),
                                  (int64_t)(x->nb[2] / 4), 0};
    RG_LAUNCH(conv_rs_gather_kernel, blocks_for(g.C * (g.K - 1) * g.S), SSM_THREADS, 0, ctx->stream, g, n->ip[0],
              f32_of(n->src[0]), f32_of(n->src[1]), (float *)n->t.data);
    CU_LAUNCHED();
    return RG_OK;
}

rg_status run_ssm_conv_back(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, rg_error *err) {
    (void)c;
    rg_pack p, pf;
    rg_node *const fwd_src[RG_MAX_SRC] = {n->src[1], n->src[2], NULL, NULL, NULL};  // the forward's x and c
    if (!rg_pack_of(n, &p) || !rg_pack_layout(RG_OP_SSM_CONV, fwd_src, n->ip, &pf))
        return rg_fail(err, RG_ERR_ARG, "cuda ssm_conv_back '%s': no layout", n->t.name);
    const conv_geom g = conv_geom_of(n, 1, n->src[4]);
    const float *d = f32_of(n->src[0]);
    float *out = (float *)n->t.data;
    RG_LAUNCH(ssm_conv_back_x_kernel, blocks_for(g.C * (g.T + g.K - 1) * g.S), SSM_THREADS, 0, ctx->stream, g,
              d + pf.off[RG_SSM_CONV_Y], d + pf.off[RG_SSM_CONV_STATE], f32_of(n->src[2]), i32_of(n->src[4]),
              out + p.off[RG_SSM_CONV_BACK_DX], out + p.off[RG_SSM_CONV_BACK_DSTATE]);
    CU_LAUNCHED();
    RG_LAUNCH(ssm_conv_back_c_kernel, blocks_for(g.K * g.C), SSM_THREADS, 0, ctx->stream, g, d + pf.off[RG_SSM_CONV_Y],
              f32_of(n->src[1]), f32_of(n->src[3]), i32_of(n->src[4]), out + p.off[RG_SSM_CONV_BACK_DC]);
    CU_LAUNCHED();
    return RG_OK;
}

rg_status run_ssm_dt(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, rg_error *err) {
    (void)c;
    const rg_tensor *dt = &n->src[0]->t;
    RG_LAUNCH(ssm_dt_kernel, blocks_for(rg_tensor_nelements(dt)), SSM_THREADS, 0, ctx->stream, f32_of(n->src[0]),
              f32_of(n->src[1]), i32_of(n->src[2]), seg_rows(n->src[2]), dt->ne[0], dt->ne[1], dt->ne[2],
              (float *)n->t.data);
    CU_LAUNCHED();
    return RG_OK;
}

// xBC (src[ix]), dt or dta (src[ix + 1]), the ids, ip: P, N, G.
scan_geom scan_geom_of(const rg_node *n, int ix, const rg_node *seg) {
    const rg_tensor *dt = &n->src[ix + 1]->t;
    return scan_geom{n->ip[0], dt->ne[0], n->ip[1], n->ip[2], dt->ne[1], dt->ne[2], n->src[ix]->t.ne[0], seg_rows(seg)};
}

size_t scan_shared(const rg_node *n) { return (size_t)(n->ip[0] * n->ip[1]) * sizeof(float); }
size_t scan_back_shared(const rg_node *n) { return (size_t)(n->ip[1] * (n->ip[0] + 1) + 2 * n->ip[0]) * sizeof(float); }

rg_status run_ssm_scan(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, rg_error *err) {
    (void)c;
    rg_pack p;
    if (!rg_pack_of(n, &p)) return rg_fail(err, RG_ERR_ARG, "cuda ssm_scan '%s': no layout", n->t.name);
    const scan_geom g = scan_geom_of(n, 0, n->src[4]);
    const size_t shared = scan_shared(n);
    RG_TRY(rg_cu_shared_limit(ssm_scan_kernel, shared, n, err));
    float *out = (float *)n->t.data;
    const int64_t items = g.S * g.H;
    RG_LAUNCH(ssm_scan_kernel, (unsigned)(items < SSM_MAX_BLOCKS ? items : SSM_MAX_BLOCKS), threads_for(g.P), shared,
              ctx->stream, g, f32_of(n->src[0]), f32_of(n->src[1]), f32_of(n->src[2]), f32_of(n->src[3]),
              i32_of(n->src[4]), out + p.off[RG_SSM_SCAN_Y], out + p.off[RG_SSM_SCAN_STATE],
              p.n_parts > RG_SSM_SCAN_STATES ? out + p.off[RG_SSM_SCAN_STATES] : (float *)NULL);
    CU_LAUNCHED();
    return RG_OK;
}

// SSM_SCAN_BACK's scratch: dA_h [S, H] doubles, dB_h and dC_h [S, T, H, N], then per block
// (n_chunks + L + 1) N P floats.
void scan_back_chunking(int64_t T, int64_t *L, int64_t *n_chunks) {
    *L = T < SCAN_CHUNK ? (T > 0 ? T : 1) : SCAN_CHUNK;
    *n_chunks = (T + *L - 1) / *L;
}

int64_t scan_back_blocks(const scan_geom &g) { return g.S * g.H < SCAN_BACK_BLOCKS ? g.S * g.H : SCAN_BACK_BLOCKS; }

size_t scan_back_work(const rg_node *n, int n_threads) {
    (void)n_threads;
    const scan_geom g = scan_geom_of(n, 1, NULL);
    int64_t L, n_chunks;
    scan_back_chunking(g.T, &L, &n_chunks);
    return (size_t)(g.S * g.H) * sizeof(double) + 2 * (size_t)(g.S * g.T * g.H * g.N) * sizeof(float) +
           (size_t)(scan_back_blocks(g) * (n_chunks + L + 1) * g.N * g.P) * sizeof(float);
}

rg_status run_ssm_scan_back(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, rg_error *err) {
    rg_pack p, pf;
    rg_node *const fwd_src[RG_MAX_SRC] = {n->src[1], n->src[2], n->src[3], NULL, NULL};  // xBC, dta for dt, A
    if (!rg_pack_of(n, &p) || !rg_pack_layout(RG_OP_SSM_SCAN, fwd_src, n->ip, &pf))
        return rg_fail(err, RG_ERR_ARG, "cuda ssm_scan_back '%s': no layout", n->t.name);
    const scan_geom g = scan_geom_of(n, 1, NULL);
    void *scratch = NULL;
    RG_TRY(rg_cu_scratch(c, n, scan_back_work(n, 1), &scratch, err));
    const float *d = f32_of(n->src[0]);
    float *out = (float *)n->t.data;
    scan_back_bufs b = {d + pf.off[RG_SSM_SCAN_Y], d + pf.off[RG_SSM_SCAN_STATE], f32_of(n->src[1]), f32_of(n->src[2]),
                        f32_of(n->src[3]), f32_of(n->src[4]), out + p.off[RG_SSM_SCAN_BACK_DXBC],
                        out + p.off[RG_SSM_SCAN_BACK_DDT], out + p.off[RG_SSM_SCAN_BACK_DSTATE], NULL, NULL, NULL, NULL,
                        0, 0};
    scan_back_chunking(g.T, &b.L, &b.n_chunks);
    b.dA_h = (double *)scratch;
    b.dB_h = (float *)(b.dA_h + g.S * g.H);
    b.dC_h = b.dB_h + g.S * g.T * g.H * g.N;
    b.work = b.dC_h + g.S * g.T * g.H * g.N;
    const size_t shared = scan_back_shared(n);
    RG_TRY(rg_cu_shared_limit(ssm_scan_back_kernel, shared, n, err));
    const int64_t nt = g.N > g.P ? g.N : g.P;  // a thread per column and row, at most SCAN_BACK_THREADS
    const unsigned threads = threads_for(nt < SCAN_BACK_THREADS ? nt : SCAN_BACK_THREADS);
    RG_LAUNCH(ssm_scan_back_kernel, (unsigned)scan_back_blocks(g), threads, shared, ctx->stream, g, b);
    CU_LAUNCHED();
    RG_LAUNCH(ssm_scan_back_bc_kernel, blocks_for(g.N * g.G * g.T * g.S), SSM_THREADS, 0, ctx->stream, g,
              (const float *)b.dB_h, (const float *)b.dC_h, b.dxbc);
    CU_LAUNCHED();
    RG_LAUNCH(ssm_scan_back_a_kernel, blocks_for(g.H), SSM_THREADS, 0, ctx->stream, g.H, g.S, (const double *)b.dA_h,
              out + p.off[RG_SSM_SCAN_BACK_DA]);
    CU_LAUNCHED();
    return RG_OK;
}

// ===========================================================================
// Support: types, shapes and strides only (the scheduler asks before bytes are bound)
// ===========================================================================

bool out_ok(const rg_node *n) {
    return n->t.type == RG_TYPE_F32 && rg_tensor_is_contiguous(&n->t) && rg_tensor_nelements(&n->t) > 0;
}

// A source that is NULL where optional, else contiguous of `type` and not empty.
bool packed_src(const rg_node *s, uint32_t type, bool optional) {
    if (!s) return optional;
    return s->t.type == type && rg_tensor_is_contiguous(&s->t) && rg_tensor_nelements(&s->t) > 0;
}

// The conv's x: f32 with packed rows and whole-float strides.
bool conv_x_ok(const rg_node *x) {
    if (!x || x->t.type != RG_TYPE_F32 || rg_tensor_nelements(&x->t) == 0) return false;
    if (x->t.ne[0] > 1 && x->t.nb[0] != 4) return false;
    for (int i = 1; i < RG_MAX_DIMS; i++)
        if (x->t.nb[i] % 4) return false;
    return true;
}

bool sup_ssm_conv(const rg_node *n) {
    return out_ok(n) && conv_x_ok(n->src[0]) && packed_src(n->src[1], RG_TYPE_F32, false) &&
           n->src[1]->t.ne[0] <= RG_SSM_CONV_MAX_K && packed_src(n->src[2], RG_TYPE_F32, true) &&
           packed_src(n->src[3], RG_TYPE_I32, true);
}

bool sup_ssm_conv_back(const rg_node *n) {
    return out_ok(n) && packed_src(n->src[0], RG_TYPE_F32, false) && conv_x_ok(n->src[1]) &&
           packed_src(n->src[2], RG_TYPE_F32, false) && n->src[2]->t.ne[0] <= RG_SSM_CONV_MAX_K &&
           packed_src(n->src[3], RG_TYPE_F32, true) && packed_src(n->src[4], RG_TYPE_I32, true);
}

bool sup_ssm_dt(const rg_node *n) {
    return out_ok(n) && packed_src(n->src[0], RG_TYPE_F32, false) && packed_src(n->src[1], RG_TYPE_F32, false) &&
           packed_src(n->src[2], RG_TYPE_I32, true);
}

bool sup_ssm_scan(const rg_node *n) {
    return out_ok(n) && n->ip[0] <= 1024 && scan_shared(n) <= SSM_MAX_SHARED && packed_src(n->src[0], RG_TYPE_F32, false) &&
           packed_src(n->src[1], RG_TYPE_F32, false) && packed_src(n->src[2], RG_TYPE_F32, false) &&
           packed_src(n->src[3], RG_TYPE_F32, true) && packed_src(n->src[4], RG_TYPE_I32, true);
}

bool sup_conv_rs_gather(const rg_node *n) {
    return out_ok(n) && conv_x_ok(n->src[0]) && packed_src(n->src[1], RG_TYPE_F32, false);
}

bool sup_ssm_scan_back(const rg_node *n) {
    return out_ok(n) && n->ip[0] <= 1024 && n->ip[1] <= 1024 && scan_back_shared(n) <= SSM_MAX_SHARED &&
           packed_src(n->src[0], RG_TYPE_F32, false) && packed_src(n->src[1], RG_TYPE_F32, false) &&
           packed_src(n->src[2], RG_TYPE_F32, false) && packed_src(n->src[3], RG_TYPE_F32, false) &&
           packed_src(n->src[4], RG_TYPE_F32, true);
}

// The cells (RG_CU_CELL, cuda_common.cuh): op, run_/sup_ name, work size.
#define SSM_CELLS(X)                                                                            \
    X(SSM_CONV, ssm_conv, NULL) X(SSM_CONV_BACK, ssm_conv_back, NULL) X(SSM_DT, ssm_dt, NULL) \
    X(SSM_SCAN, ssm_scan, NULL) X(SSM_SCAN_BACK, ssm_scan_back, scan_back_work)                   \
    X(CONV_RS_GATHER, conv_rs_gather, NULL)
#define SSM_CELL_DEFINE(op_, fn_, work_) RG_CU_CELL(fn_)
SSM_CELLS(SSM_CELL_DEFINE)

}  // namespace

// This file's cells of the CUDA column (op_table.cu lists them).
namespace RG_CU_CELLS {
#define SSM_CELL_CONST(op_, fn_, work_) extern const rg_op_col fn_ = rg_cu_col(cell_##fn_, sup_##fn_, work_, "f32");
SSM_CELLS(SSM_CELL_CONST)
}  // namespace RG_CU_CELLS
