// ops_flash.cu - the CUDA cells of flash attention (graph.h, FLASH_ATTN_EXT and
// FLASH_ATTN_BACK; cuda_common.cuh): FlashAttention-2 on CUDA cores in f32, the rules of
// the CPU kernel (src/cpu/ops_flash.c, ops_flash_items.h) with its own tiles and orders,
// so the results agree with the CPU's within f32 roundoff, not bit for bit (test_ops
// cuda_parity holds them to a bound derived from the lengths of their sums).
//
// FMA rule (nvcc builds with --fmad=false; scripts/check-fma.sh proves no other fusion): the
// dot products and accumulations of the inner loops (fa_dot, fa_regs_accum, dK/dV, the
// softmax's running sum) are written fmaf, one rounding per term as on the GPU's FFMA and in
// the host execution alike; everything else rounds each product and sum apart.
//
// Names as graph.h: q [Dh, T, H, S] f32, k and v [Dh, Tk, Hkv, S] f32 or f16 (widened
// exactly when a tile is loaded), any row strides, q packed within its rows, k and v with any
// element stride too (the session's transposed V cache); head h reads kv head h / (H / Hkv);
// query t sits at position t + Tk - T (a KV prefix). A key is visible when
// causal allows it (kpos <= qpos), within the window (qpos - kpos < W) and in the query's
// document (seg[kpos] == seg[qpos]); the score is softcap(scale q.k) = c tanh(s / c).
//
// Head-dim buckets: every kernel is a template on D in {128, 256, 512}, the smallest that
// covers head_dim (Dh = 5 runs in the 128 bucket, its dims past Dh untouched); wider heads
// are refused by the support rule and run on the CPU. A tile holds BR = 4096 / D query rows
// and BC = 4096 / D keys (32, 16, 8), rows in shared memory with a stride of D + 1 floats
// (column reads by consecutive keys hit distinct banks), FA_THREADS threads per block:
//   scores   a thread per (row, key) of the tile: the Dh products from shared memory
//   rows     a warp owns BR / 4 rows (or keys), a lane the dims lane + 32 i of each, its
//            accumulators in registers (D / 32 floats per row or key)
//
//   FLASH_ATTN_EXT   a block per (query tile, head, sequence): the key tiles in order,
//                    an online softmax per row (thread r: its row's max, exp and sum over
//                    the tile in key order), acc = alpha acc + P V; o = acc / l and
//                    lse = m + log l (o = 0, lse = +inf for a row that sees nothing); a
//                    sink starts its head's rows at m = sink, l = 1, as the CPU.
//   FLASH_ATTN_BACK  three kernels, no atomics, so the bits are a function of the inputs
//                    and the shapes alone: Dsum = rowsum(dO o) - dlse (a thread per row);
//                    a KV-parallel pass, a block per (key tile, kv head, sequence) holding
//                    its keys' dK and dV and walking the group's heads in order, each over
//                    its query tiles in order (dV += P^T dO, dK += scale dS^T Q); and a
//                    query-parallel pass, a block per (query tile, head, sequence) over the
//                    key tiles in order (dQ += scale dS K). Both recompute P = exp(S - lse)
//                    (S - lse clamped at 0) and dS = P (dO.v - D), times 1 - (S/c)^2 with a
//                    softcap. A forward with sinks has no backward here (the constructor
//                    refuses it, the support rule too).
// Tiles that no query of the tile can reach by position (above the causal diagonal,
// before the window) are skipped; document masks are applied per score.
//
// Shared memory per block (floats, LD = D + 1): forward (BR + 2 BC) LD + BR BC + 3 BR,
// backward (2 BR + 2 BC) LD + 2 BR BC + 2 BR: 54 and 74 KiB at D = 128 (raised above the
// default 48 KiB per kernel). Device scratch of FLASH_ATTN_BACK: Dsum [T, H, S].
//
// Layout: the kernels, the launchers, then the support rules and the registration.
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "cuda/cuda_common.cuh"

extern "C" {
#include "graph/pack.h"
}

// Loops over a thread's register accumulators are unrolled under nvcc, so the arrays stay in
// registers (the host compiler has no such pragma and needs none).
#ifdef __CUDACC__
#define FA_UNROLL _Pragma("unroll")
#else
#define FA_UNROLL
#endif

namespace {

constexpr int FA_THREADS = 128, FA_WARPS = FA_THREADS / 32;
constexpr int64_t FA_MAX_D = 512;  // the widest bucket (the seed's FA_BACK_MAX_D)

// The tiles of bucket D.
template <int D>
struct fa_tile {
    static constexpr int BR = 4096 / D;  // query rows per tile
    static constexpr int BC = 4096 / D;  // keys per tile
    static constexpr int LD = D + 1;     // row stride in shared memory, floats
    static constexpr int DPL = D / 32;   // dims per lane
    static constexpr int RPW = BR / FA_WARPS;  // rows (or keys) per warp
    static_assert(BR % FA_WARPS == 0 && BC % FA_WARPS == 0, "a tile's rows split evenly over the warps");
};

// The shapes and rules of a node (byte strides for q, k, v; the rest packed).
struct fa_geom {
    int64_t Dh, T, Tk, H, Hkv, S, G, off;  // G = H / Hkv, off = Tk - T (query t at t + off)
    int64_t q_nb1, q_nb2, q_nb3, k_nb0, k_nb1, k_nb2, k_nb3, v_nb0, v_nb1, v_nb2, v_nb3;
    int64_t seg_stride;  // between sequences' ids: Tk ([Tk, S]) or 0 ([Tk])
    int64_t window;      // 0: none
    float scale, softcap;  // softcap 0: none
    int causal, f16;     // f16: k and v are f16
};
RG_KERNEL_NO_POINTERS(fa_geom)

// Device pointers: the sources and the parts of the outputs.
struct fa_bufs {
    const char *q, *k, *v;
    const int32_t *seg;
    const float *sinks;               // [H] or NULL
    float *o, *lse;                   // FLASH_ATTN_EXT's parts: [Dh, H, T, S], [T, H, S]
    const float *dO, *dlse;           // FLASH_ATTN_BACK: d's parts, like o and lse
    const float *fo, *flse;           // the forward's o and lse
    float *Dsum;                      // scratch [T, H, S]
    float *dq, *dk, *dv;              // [Dh, T, H, S], [Dh, Tk, Hkv, S] twice
};
RG_KERNEL_POINTERS(fa_bufs, q, k, v, seg, sinks, o, lse, dO, dlse, fo, flse, Dsum, dq, dk, dv)

__device__ inline int tile_len(int64_t total, int64_t at, int cap) {
    return total - at < cap ? (int)(total - at) : cap;
}

__device__ inline bool fa_visible(const fa_geom &g, const int32_t *seg, int64_t qpos, int64_t kpos) {
    if (g.causal && kpos > qpos) return false;
    if (g.window > 0 && qpos - kpos >= g.window) return false;
    return !seg || seg[kpos] == seg[qpos];
}

// Whether keys [j0, j0 + nc) can be seen by position from queries at [qpos0, qpos0 + nr)
// (the causal diagonal and the window; documents are checked per score).
__device__ inline bool fa_reachable(const fa_geom &g, int64_t qpos0, int nr, int64_t j0, int nc) {
    if (g.causal && j0 > qpos0 + nr - 1) return false;
    return !(g.window > 0 && qpos0 - (j0 + nc - 1) >= g.window);
}

// n rows of Dh values from base (rows nb1 bytes apart, elements nb0 apart: the session's
// transposed V cache read as [Dh, n_kv] has nb0 = n_ctx elements; f32 or f16) into dst [n][ld]
// as f32.
__device__ inline void fa_load_rows(float *dst, int ld, const char *base, int64_t nb0, int64_t nb1, int n, int64_t Dh,
                                    bool f16) {
    for (int64_t i = threadIdx.x; i < n * Dh; i += blockDim.x) {
        const int64_t r = i / Dh, e = i % Dh;
        const char *x = base + r * nb1 + e * nb0;
        dst[r * ld + e] = f16 ? __half2float(*(const __half *)x) : *(const float *)x;
    }
}

__device__ inline float fa_dot(const float *a, const float *b, int64_t n) {
    float acc = 0.0f;
    for (int64_t e = 0; e < n; e++) acc = fmaf(a[e], b[e], acc);
    return acc;
}

// softcap(scale q.k) of query row r and key c of the tiles.
__device__ inline float fa_score(const fa_geom &g, const float *qrow, const float *krow) {
    float s = g.scale * fa_dot(qrow, krow, g.Dh);
    if (g.softcap > 0.0f) s = g.softcap * tanhf(s / g.softcap);
    return s;
}

// A thread's register tile: rows (or keys) warp RPW + rr, dims lane + 32 i.
template <int D>
using fa_regs = float[fa_tile<D>::RPW][fa_tile<D>::DPL];

template <int D>
__device__ inline void fa_regs_zero(fa_regs<D> &a) {
    FA_UNROLL
    for (int rr = 0; rr < fa_tile<D>::RPW; rr++)
        FA_UNROLL
        for (int i = 0; i < fa_tile<D>::DPL; i++) a[rr][i] = 0.0f;
}

// f(rr, i, r, e) for each register of the tile that holds row r < nr and dim e < Dh.
template <int D, class F>
__device__ inline void fa_regs_each(const fa_geom &g, int nr, F f) {
    using TL = fa_tile<D>;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    FA_UNROLL
    for (int rr = 0; rr < TL::RPW; rr++) {
        const int r = warp * TL::RPW + rr;
        if (r >= nr) continue;
        FA_UNROLL
        for (int i = 0; i < TL::DPL; i++)
            if (lane + 32 * i < g.Dh) f(rr, i, r, lane + 32 * i);
    }
}

// acc_r = alpha_r acc_r + sum_c W[r][c] X[c] for the rows r < nr, c < nc in order
// (W [BR][BC], X [BC][LD] in shared memory; alpha NULL: 1).
template <int D>
__device__ inline void fa_regs_accum(fa_regs<D> &acc, const fa_geom &g, int nr, int nc, const float *W, const float *X,
                                     const float *alpha) {
    fa_regs_each<D>(g, nr, [&](int rr, int i, int r, int e) {
        const float *w = W + r * fa_tile<D>::BC;
        float a = alpha ? alpha[r] * acc[rr][i] : acc[rr][i];
        for (int c = 0; c < nc; c++) a = fmaf(w[c], X[c * fa_tile<D>::LD + e], a);
        acc[rr][i] = a;
    });
}

// Row r < nr to base + r stride: acc / l_r (0 where l_r is 0), or acc without l.
template <int D>
__device__ inline void fa_regs_store(const fa_regs<D> &acc, const fa_geom &g, int nr, float *base, int64_t stride,
                                     const float *l) {
    fa_regs_each<D>(g, nr, [&](int rr, int i, int r, int e) {
        base[r * stride + e] = !l ? acc[rr][i] : l[r] > 0.0f ? acc[rr][i] / l[r] : 0.0f;
    });
}

// ===========================================================================
// Kernels
// ===========================================================================

// Keys j0 .. j0 + nc of kv head kvh, sequence s, and their values into sK and sV [BC][LD],
// widened to f32 (any element and row strides): the tile every kernel reads.
template <int D>
__device__ inline void fa_load_kv_tile(const fa_geom &g, const fa_bufs &b, int64_t s, int64_t kvh, int64_t j0, int nc,
                                       float *sK, float *sV) {
    constexpr int LD = fa_tile<D>::LD;
    fa_load_rows(sK, LD, b.k + j0 * g.k_nb1 + kvh * g.k_nb2 + s * g.k_nb3, g.k_nb0, g.k_nb1, nc, g.Dh, g.f16);
    fa_load_rows(sV, LD, b.v + j0 * g.v_nb1 + kvh * g.v_nb2 + s * g.v_nb3, g.v_nb0, g.v_nb1, nc, g.Dh, g.f16);
}

// FLASH_ATTN_EXT: block (query tile, head, sequence).
template <int D>
__global__ void __launch_bounds__(FA_THREADS) fa_fwd_kernel(fa_geom g, fa_bufs b) {
    using TL = fa_tile<D>;
    constexpr int BR = TL::BR, BC = TL::BC, LD = TL::LD;
    RG_SHARED_DYN(float, sh);
    float *sQ = sh, *sK = sQ + BR * LD, *sV = sK + BC * LD, *sS = sV + BC * LD;  // [BR][LD], [BC][LD] x2, [BR][BC]
    float *sm = sS + BR * BC, *sl = sm + BR, *salpha = sl + BR;                  // per row
    const int64_t h = blockIdx.y, s = blockIdx.z, kvh = h / g.G, i0 = (int64_t)blockIdx.x * BR;
    const int nr = tile_len(g.T, i0, BR);
    const int64_t qpos0 = i0 + g.off;
    const int32_t *seg = b.seg ? b.seg + s * g.seg_stride : NULL;
    fa_load_rows(sQ, LD, b.q + i0 * g.q_nb1 + h * g.q_nb2 + s * g.q_nb3, 4, g.q_nb1, nr, g.Dh, false);
    if (threadIdx.x < BR) {
        sm[threadIdx.x] = b.sinks ? b.sinks[h] : -INFINITY;  // a sink: the softmax starts from its logit
        sl[threadIdx.x] = b.sinks ? 1.0f : 0.0f;
    }
    fa_regs<D> acc;
    fa_regs_zero<D>(acc);
    for (int64_t j0 = 0; j0 < g.Tk; j0 += BC) {
        const int nc = tile_len(g.Tk, j0, BC);
        if (!fa_reachable(g, qpos0, nr, j0, nc)) continue;  // the same for every thread of the block
        __syncthreads();  // the previous tile's readers of sK, sV and sS are done
        fa_load_kv_tile<D>(g, b, s, kvh, j0, nc, sK, sV);
        __syncthreads();
        for (int i = threadIdx.x; i < BR * BC; i += blockDim.x) {
            const int r = i / BC, c = i % BC;
            const bool vis = r < nr && c < nc && fa_visible(g, seg, qpos0 + r, j0 + c);
            sS[i] = vis ? fa_score(g, sQ + r * LD, sK + c * LD) : -INFINITY;
        }
        __syncthreads();
        if ((int)threadIdx.x < nr) {  // row r's online softmax over the tile, keys in order
            const int r = threadIdx.x;
            float *p = sS + r * BC, mx = sm[r];
            for (int c = 0; c < nc; c++) mx = p[c] > mx ? p[c] : mx;
            if (mx == -INFINITY) {  // nothing visible yet: m, l and acc stay
                salpha[r] = 1.0f;
                for (int c = 0; c < nc; c++) p[c] = 0.0f;
            } else {
                const float alpha = expf(sm[r] - mx);  // 0 from m = -inf
                float ps = 0.0f;
                for (int c = 0; c < nc; c++) {
                    p[c] = expf(p[c] - mx);
                    ps += p[c];
                }
                sl[r] = fmaf(alpha, sl[r], ps);
                sm[r] = mx;
                salpha[r] = alpha;
            }
        }
        __syncthreads();
        fa_regs_accum<D>(acc, g, nr, nc, sS, sV, salpha);  // acc = alpha acc + sum_c p_c v_c
    }
    __syncthreads();  // the rows' m and l are final
    fa_regs_store<D>(acc, g, nr, b.o + g.Dh * (h + g.H * (i0 + g.T * s)), g.Dh * g.H, sl);  // no visible key, no sink: o = 0
    if ((int)threadIdx.x < nr) {
        const int r = threadIdx.x;
        b.lse[i0 + r + g.T * (h + g.H * s)] = sl[r] > 0.0f ? sm[r] + logf(sl[r]) : INFINITY;
    }
}

// Dsum = rowsum(dO o) - dlse: a thread per row t + T (h + H s).
__global__ void fa_dsum_kernel(fa_geom g, fa_bufs b) {
    const int64_t rows = g.T * g.H * g.S;
    for (int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; row < rows; row += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = row % g.T, h = row / g.T % g.H, s = row / g.T / g.H, at = g.Dh * (h + g.H * (t + g.T * s));
        b.Dsum[row] = fa_dot(b.dO + at, b.fo + at, g.Dh) - b.dlse[row];
    }
}

// The backward's tiles: P [BR][BC] = exp(S - lse) and G [BR][BC] = scale dS for the rows of
// sQ, sdO (their lse and D in slse, sD) against the keys of sK, sV; 0 where masked or where
// P rounds to 0. Every thread its own entries.
template <int D>
__device__ inline void fa_back_tile(const fa_geom &g, const int32_t *seg, const float *sQ, const float *sdO,
                                    const float *sK, const float *sV, const float *slse, const float *sD, int nr,
                                    int nc, int64_t qpos0, int64_t j0, float *sP, float *sG) {
    using TL = fa_tile<D>;
    constexpr int BC = TL::BC, LD = TL::LD;
    for (int i = threadIdx.x; i < TL::BR * BC; i += blockDim.x) {
        const int r = i / BC, c = i % BC;
        float p = 0.0f, gd = 0.0f;
        if (r < nr && c < nc && fa_visible(g, seg, qpos0 + r, j0 + c)) {
            const float sc = fa_score(g, sQ + r * LD, sK + c * LD), a = sc - slse[r];
            const float pc = expf(a > 0.0f ? 0.0f : a);  // lse = +inf (a row that sees nothing): 0
            if (pc != 0.0f) {
                float ds = pc * (fa_dot(sdO + r * LD, sV + c * LD, g.Dh) - sD[r]);
                if (g.softcap > 0.0f) {
                    const float u = sc / g.softcap;
                    ds = ds * (1.0f - u * u);
                }
                p = pc, gd = ds * g.scale;
            }
        }
        sP[i] = p, sG[i] = gd;
    }
}

// The query rows [i0, i0 + nr) of head h: q, dO, lse and D into the tiles.
template <int D>
__device__ inline void fa_load_query_tile(const fa_geom &g, const fa_bufs &b, int64_t s, int64_t h, int64_t i0, int nr,
                                          float *sQ, float *sdO, float *slse, float *sD) {
    constexpr int LD = fa_tile<D>::LD;
    fa_load_rows(sQ, LD, b.q + i0 * g.q_nb1 + h * g.q_nb2 + s * g.q_nb3, 4, g.q_nb1, nr, g.Dh, false);
    fa_load_rows(sdO, LD, (const char *)(b.dO + g.Dh * (h + g.H * (i0 + g.T * s))), 4,
                 (int64_t)sizeof(float) * g.Dh * g.H, nr, g.Dh, false);
    if ((int)threadIdx.x < nr) {
        const int64_t row = i0 + threadIdx.x + g.T * (h + g.H * s);
        slse[threadIdx.x] = b.flse[row], sD[threadIdx.x] = b.Dsum[row];
    }
}

// The backward's shared memory: sK, sV [BC][LD], sQ, sdO [BR][LD], sP, sG [BR][BC], lse and D [BR].
struct fa_back_shared {
    float *K, *V, *Q, *dO, *P, *G, *lse, *D;
};

template <int D>
__device__ inline fa_back_shared fa_back_carve(float *sh) {
    using TL = fa_tile<D>;
    fa_back_shared t;
    t.K = sh, t.V = t.K + TL::BC * TL::LD, t.Q = t.V + TL::BC * TL::LD, t.dO = t.Q + TL::BR * TL::LD;
    t.P = t.dO + TL::BR * TL::LD, t.G = t.P + TL::BR * TL::BC, t.lse = t.G + TL::BR * TL::BC, t.D = t.lse + TL::BR;
    return t;
}

// dK and dV: block (key tile, kv head, sequence); warp w owns keys w RPW .. of the tile.
template <int D>
__global__ void __launch_bounds__(FA_THREADS) fa_dkv_kernel(fa_geom g, fa_bufs b) {
    using TL = fa_tile<D>;
    constexpr int BR = TL::BR, BC = TL::BC, LD = TL::LD;
    RG_SHARED_DYN(float, sh);
    const fa_back_shared t = fa_back_carve<D>(sh);
    const int64_t kvh = blockIdx.y, s = blockIdx.z, j0 = (int64_t)blockIdx.x * BC;
    const int nc = tile_len(g.Tk, j0, BC);
    const int32_t *seg = b.seg ? b.seg + s * g.seg_stride : NULL;
    fa_load_kv_tile<D>(g, b, s, kvh, j0, nc, t.K, t.V);
    fa_regs<D> dK, dV;
    fa_regs_zero<D>(dK);
    fa_regs_zero<D>(dV);
    for (int64_t h = kvh * g.G; h < (kvh + 1) * g.G; h++)
        for (int64_t i0 = 0; i0 < g.T; i0 += BR) {
            const int nr = tile_len(g.T, i0, BR);
            if (!fa_reachable(g, i0 + g.off, nr, j0, nc)) continue;  // the same for every thread
            __syncthreads();  // the previous tile's readers of Q, dO, P and G are done
            fa_load_query_tile<D>(g, b, s, h, i0, nr, t.Q, t.dO, t.lse, t.D);
            __syncthreads();
            fa_back_tile<D>(g, seg, t.Q, t.dO, t.K, t.V, t.lse, t.D, nr, nc, i0 + g.off, j0, t.P, t.G);
            __syncthreads();
            // dV_c += sum_r P_rc dO_r, dK_c += sum_r G_rc q_r (r in order)
            fa_regs_each<D>(g, nc, [&](int kk, int i, int c, int e) {
                float av = dV[kk][i], ak = dK[kk][i];
                for (int r = 0; r < nr; r++) {
                    av = fmaf(t.P[r * BC + c], t.dO[r * LD + e], av);
                    ak = fmaf(t.G[r * BC + c], t.Q[r * LD + e], ak);
                }
                dV[kk][i] = av, dK[kk][i] = ak;
            });
        }
    const int64_t at = g.Dh * (j0 + g.Tk * (kvh + g.Hkv * s));  // key c at at + c Dh
    fa_regs_store<D>(dK, g, nc, b.dk + at, g.Dh, NULL);
    fa_regs_store<D>(dV, g, nc, b.dv + at, g.Dh, NULL);
}

// dQ: block (query tile, head, sequence); warp w owns rows w RPW .. of the tile.
template <int D>
__global__ void __launch_bounds__(FA_THREADS) fa_dq_kernel(fa_geom g, fa_bufs b) {
    using TL = fa_tile<D>;
    constexpr int BR = TL::BR, BC = TL::BC;
    RG_SHARED_DYN(float, sh);
    const fa_back_shared t = fa_back_carve<D>(sh);
    const int64_t h = blockIdx.y, s = blockIdx.z, kvh = h / g.G, i0 = (int64_t)blockIdx.x * BR;
    const int nr = tile_len(g.T, i0, BR);
    const int64_t qpos0 = i0 + g.off;
    const int32_t *seg = b.seg ? b.seg + s * g.seg_stride : NULL;
    fa_load_query_tile<D>(g, b, s, h, i0, nr, t.Q, t.dO, t.lse, t.D);
    fa_regs<D> acc;
    fa_regs_zero<D>(acc);
    for (int64_t j0 = 0; j0 < g.Tk; j0 += BC) {
        const int nc = tile_len(g.Tk, j0, BC);
        if (!fa_reachable(g, qpos0, nr, j0, nc)) continue;
        __syncthreads();  // the previous tile's readers of K, V, P and G are done
        fa_load_kv_tile<D>(g, b, s, kvh, j0, nc, t.K, t.V);
        __syncthreads();
        fa_back_tile<D>(g, seg, t.Q, t.dO, t.K, t.V, t.lse, t.D, nr, nc, qpos0, j0, t.P, t.G);
        __syncthreads();
        fa_regs_accum<D>(acc, g, nr, nc, t.G, t.K, NULL);  // dQ_r += sum_c G_rc k_c (c in order)
    }
    fa_regs_store<D>(acc, g, nr, b.dq + g.Dh * (i0 + g.T * (h + g.H * s)), g.Dh, NULL);
}

// ===========================================================================
// Launchers
// ===========================================================================

// The bucket covering head_dim, or 0 above FA_MAX_D.
int fa_bucket(int64_t Dh) { return Dh <= 128 ? 128 : Dh <= 256 ? 256 : Dh <= FA_MAX_D ? 512 : 0; }

size_t fa_fwd_shared(int D) {
    const size_t br = (size_t)(4096 / D), ld = (size_t)D + 1;
    return ((3 * br) * ld + br * br + 3 * br) * sizeof(float);
}
size_t fa_back_shared_bytes(int D) {
    const size_t br = (size_t)(4096 / D), ld = (size_t)D + 1;
    return ((4 * br) * ld + 2 * br * br + 2 * br) * sizeof(float);
}

// q (src[first]), k, v, ids (src[seg_ix]) of a node and its parameters.
fa_geom fa_geom_of(const rg_node *n, int first, const rg_node *seg) {
    const rg_tensor *q = &n->src[first]->t, *k = &n->src[first + 1]->t, *v = &n->src[first + 2]->t;
    fa_geom g;
    g.Dh = q->ne[0], g.T = q->ne[1], g.H = q->ne[2], g.S = q->ne[3];
    g.Tk = k->ne[1], g.Hkv = k->ne[2], g.G = g.H / g.Hkv, g.off = g.Tk - g.T;
    g.q_nb1 = (int64_t)q->nb[1], g.q_nb2 = (int64_t)q->nb[2], g.q_nb3 = (int64_t)q->nb[3];
    g.k_nb0 = (int64_t)k->nb[0], g.k_nb1 = (int64_t)k->nb[1], g.k_nb2 = (int64_t)k->nb[2], g.k_nb3 = (int64_t)k->nb[3];
    g.v_nb0 = (int64_t)v->nb[0], g.v_nb1 = (int64_t)v->nb[1], g.v_nb2 = (int64_t)v->nb[2], g.v_nb3 = (int64_t)v->nb[3];
    g.seg_stride = seg && seg->t.ne[1] > 1 ? g.Tk : 0;
    g.window = n->ip[1];
    g.scale = n->fp[0], g.softcap = n->fp[1];
    g.causal = n->ip[0] != 0, g.f16 = k->type == RG_TYPE_F16;
    return g;
}

fa_bufs fa_bufs_of(const rg_node *n, int first, const rg_node *seg) {
    fa_bufs b = {};
    b.q = (const char *)n->src[first]->t.data;
    b.k = (const char *)n->src[first + 1]->t.data;
    b.v = (const char *)n->src[first + 2]->t.data;
    b.seg = seg ? (const int32_t *)seg->t.data : NULL;
    return b;
}

template <int D>
rg_status fa_launch_fwd(rg_cuda_ctx *ctx, const rg_node *n, const fa_geom &g, const fa_bufs &b, rg_error *err) {
    const size_t shared = fa_fwd_shared(D);
    RG_TRY(rg_cu_shared_limit(fa_fwd_kernel<D>, shared, n, err));
    const dim3 grid((unsigned)((g.T + fa_tile<D>::BR - 1) / fa_tile<D>::BR), (unsigned)g.H, (unsigned)g.S);
    RG_LAUNCH(fa_fwd_kernel<D>, grid, FA_THREADS, shared, ctx->stream, g, b);
    CU_LAUNCHED();
    return RG_OK;
}

template <int D>
rg_status fa_launch_back(rg_cuda_ctx *ctx, const rg_node *n, const fa_geom &g, const fa_bufs &b, rg_error *err) {
    const size_t shared = fa_back_shared_bytes(D);
    RG_TRY(rg_cu_shared_limit(fa_dkv_kernel<D>, shared, n, err));
    RG_TRY(rg_cu_shared_limit(fa_dq_kernel<D>, shared, n, err));
    const dim3 kv_grid((unsigned)((g.Tk + fa_tile<D>::BC - 1) / fa_tile<D>::BC), (unsigned)g.Hkv, (unsigned)g.S);
    RG_LAUNCH(fa_dkv_kernel<D>, kv_grid, FA_THREADS, shared, ctx->stream, g, b);
    CU_LAUNCHED();
    const dim3 q_grid((unsigned)((g.T + fa_tile<D>::BR - 1) / fa_tile<D>::BR), (unsigned)g.H, (unsigned)g.S);
    RG_LAUNCH(fa_dq_kernel<D>, q_grid, FA_THREADS, shared, ctx->stream, g, b);
    CU_LAUNCHED();
    return RG_OK;
}

rg_status run_flash_attn_ext(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, rg_error *err) {
    (void)c;
    rg_pack p;
    if (!rg_pack_of(n, &p)) return rg_fail(err, RG_ERR_ARG, "cuda flash_attn_ext '%s': no layout", n->t.name);
    const fa_geom g = fa_geom_of(n, 0, n->src[3]);
    fa_bufs b = fa_bufs_of(n, 0, n->src[3]);
    b.sinks = n->src[4] ? (const float *)n->src[4]->t.data : NULL;
    b.o = (float *)n->t.data + p.off[RG_FLASH_O];
    b.lse = (float *)n->t.data + p.off[RG_FLASH_LSE];
    switch (fa_bucket(g.Dh)) {
    case 128: return fa_launch_fwd<128>(ctx, n, g, b, err);
    case 256: return fa_launch_fwd<256>(ctx, n, g, b, err);
    case 512: return fa_launch_fwd<512>(ctx, n, g, b, err);
    default:
        return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda flash_attn_ext '%s': head_dim %lld is above %lld", n->t.name,
                       (long long)g.Dh, (long long)FA_MAX_D);
    }
}

// FLASH_ATTN_BACK's scratch: Dsum [T, H, S].
size_t fa_back_work(const rg_node *n, int n_threads) {
    (void)n_threads;
    const rg_tensor *q = &n->src[1]->t;
    return (size_t)(q->ne[1] * q->ne[2] * q->ne[3]) * sizeof(float);
}

rg_status run_flash_attn_back(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, rg_error *err) {
    const rg_node *fwd = n->src[4];
    rg_pack p, pf;
    if (!rg_pack_of(n, &p) || !rg_pack_of(fwd, &pf))
        return rg_fail(err, RG_ERR_ARG, "cuda flash_attn_back '%s': no layout", n->t.name);
    const fa_geom g = fa_geom_of(n, 1, n->src[5]);
    if (!fa_bucket(g.Dh))
        return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda flash_attn_back '%s': head_dim %lld is above %lld", n->t.name,
                       (long long)g.Dh, (long long)FA_MAX_D);
    void *scratch = NULL;
    RG_TRY(rg_cu_scratch(c, n, fa_back_work(n, 1), &scratch, err));
    fa_bufs b = fa_bufs_of(n, 1, n->src[5]);
    const float *d = (const float *)n->src[0]->t.data, *fo = (const float *)fwd->t.data;
    float *out = (float *)n->t.data;
    b.dO = d + pf.off[RG_FLASH_O], b.dlse = d + pf.off[RG_FLASH_LSE];
    b.fo = fo + pf.off[RG_FLASH_O], b.flse = fo + pf.off[RG_FLASH_LSE];
    b.Dsum = (float *)scratch;
    b.dq = out + p.off[RG_FLASH_BACK_DQ], b.dk = out + p.off[RG_FLASH_BACK_DK], b.dv = out + p.off[RG_FLASH_BACK_DV];
    const int64_t rows = g.T * g.H * g.S, blocks = (rows + 255) / 256;
    RG_LAUNCH(fa_dsum_kernel, (unsigned)(blocks < 65535 ? blocks : 65535), 256, 0, ctx->stream, g, b);
    CU_LAUNCHED();
    switch (fa_bucket(g.Dh)) {
    case 128: return fa_launch_back<128>(ctx, n, g, b, err);
    case 256: return fa_launch_back<256>(ctx, n, g, b, err);
    default: return fa_launch_back<512>(ctx, n, g, b, err);
    }
}

// ===========================================================================
// Support: types, shapes and strides only (the scheduler asks before bytes are bound)
// ===========================================================================

// A source NULL where optional, else contiguous of `type` and not empty.
bool fa_packed(const rg_node *s, uint32_t type, bool optional) {
    if (!s) return optional;
    return s->t.type == type && rg_tensor_is_contiguous(&s->t) && rg_tensor_nelements(&s->t) > 0;
}

// Strides whole elements (aligned loads), not empty; rows packed unless strided_rows (k and v:
// the loads take any element stride, q's take 4 bytes).
bool fa_rows_ok(const rg_node *x, uint32_t type, bool strided_rows) {
    if (!x || x->t.type != type || rg_tensor_nelements(&x->t) == 0) return false;
    const size_t es = rg_type_get(type)->type_size;
    if (x->t.ne[0] > 1 && !strided_rows && x->t.nb[0] != es) return false;
    for (int i = 0; i < RG_MAX_DIMS; i++)
        if (x->t.nb[i] % es) return false;
    return true;
}

// q, k, v from src[first], the ids, the output of its packed layout, head_dim in a bucket.
bool fa_common_ok(const rg_node *n, int first, const rg_node *seg) {
    const rg_node *q = n->src[first], *k = n->src[first + 1], *v = n->src[first + 2];
    rg_pack p;
    if (!q || !k || !v || !rg_pack_of(n, &p)) return false;
    if (n->t.type != RG_TYPE_F32 || !rg_tensor_is_contiguous(&n->t) || rg_tensor_nelements(&n->t) != p.total) return false;
    const uint32_t kt = k->t.type;
    if ((kt != RG_TYPE_F32 && kt != RG_TYPE_F16) || !fa_rows_ok(q, RG_TYPE_F32, false) || !fa_rows_ok(k, kt, true) ||
        !fa_rows_ok(v, kt, true))
        return false;
    if (!fa_bucket(q->t.ne[0]) || k->t.ne[2] < 1 || q->t.ne[2] % k->t.ne[2] || k->t.ne[1] < q->t.ne[1]) return false;
    return fa_packed(seg, RG_TYPE_I32, true) && (!seg || seg->t.ne[0] == k->t.ne[1]);
}

bool sup_flash_attn_ext(const rg_node *n) {
    return fa_common_ok(n, 0, n->src[3]) && fa_packed(n->src[4], RG_TYPE_F32, true);
}

// The forward with attention sinks has no backward (the CPU refuses it with its reason).
bool sup_flash_attn_back(const rg_node *n) {
    const rg_node *fwd = n->src[4];
    return fa_common_ok(n, 1, n->src[5]) && fwd && fwd->op == RG_OP_FLASH_ATTN_EXT && !fwd->src[4] &&
           rg_tensor_is_contiguous(&fwd->t) && fa_packed(n->src[0], RG_TYPE_F32, false) &&
           rg_tensor_nelements(&n->src[0]->t) == rg_tensor_nelements(&fwd->t);
}

// The cells (RG_CU_CELL, cuda_common.cuh): op, run_/sup_ name, work size.
#define FLASH_CELLS(X) X(FLASH_ATTN_EXT, flash_attn_ext, NULL) X(FLASH_ATTN_BACK, flash_attn_back, fa_back_work)
#define FLASH_CELL_DEFINE(op_, fn_, work_) RG_CU_CELL(fn_)
FLASH_CELLS(FLASH_CELL_DEFINE)

}  // namespace

// The types the report lists say what stays on the CPU: head_dim above 512 and a sinks forward's backward.
// This file's cells of the CUDA column (op_table.cu lists them).
namespace RG_CU_CELLS {
extern const rg_op_col flash_attn_ext =
    rg_cu_col(cell_flash_attn_ext, sup_flash_attn_ext, NULL, "q f32, k/v f32 or f16; head_dim <= 512 (wider: CPU)");
extern const rg_op_col flash_attn_back = rg_cu_col(cell_flash_attn_back, sup_flash_attn_back, fa_back_work,
                                                   "q f32, k/v f32 or f16; head_dim <= 512 (wider: CPU); no sinks");
}  // namespace RG_CU_CELLS
