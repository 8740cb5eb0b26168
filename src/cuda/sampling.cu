// sampling.cu - the sampler chain of infer/sampler.h on [n_vocab] F32 logits in device memory,
// picking exactly the token rg_sampler_sample picks for the same logits, settings, penalty
// window and draw index; only the token id comes back to the host (cuda.h's rg_cuda_sample).
//
// The shared arithmetic (infer/sample_math.h, base/rng_core.h) makes every value the CPU
// computes computable here with the same bits: the penalty in float, exp in double from
// + - * / only, the rank key, the blocked summation order, the counter-based uniform. The
// stages, each a kernel (or a few) on the context's stream; the host knows the settings, the
// device alone the data (the candidate count, whether the answer is already known), so the
// launches are sized by the vocabulary and the kernels read the count from `samp_state`:
//
//   prep        NaN -> -inf, the list = every id in id order           (a block per 256 ids)
//   penalty     the distinct ids of the window, each once               (a thread per id)
//   argmax      per block, then one block: the largest logit, ties to the lowest id; the
//               token is known when greedy or every logit is -inf; a +inf maximum relabels
//               (+inf -> 0, the rest -inf) as the CPU does
//   top-k       radix select of the k-th largest rank key (8 passes of 8 bits: integer
//               histograms, whose atomics count and never round), the ids with a key at or
//               above it compacted in id order, then sorted by rank
//   e, z        e = exp(l - max) per list position; z their blocked sum in list order
//   min-p       the positions with e >= min_p compacted (order kept)
//   top-p head  without top-k and min-p: the CPU's falling threshold exp(-8), exp(-16), ...
//               until the head holds more than top_p + 1e-6 of the mass (a decision only: the
//               head holds the nucleus either way, so its sum's order does not matter)
//   sort        the list by rank (bitonic, one block over global memory)
//   top-p cut   the first position whose blocked running sum of e / z reaches top_p
//   draw        w = exp((l - max) / temp); the first position with w > 0 whose blocked running
//               sum passes u * total, u = rg_rng_uniform(seed, RG_SAMPLER_STREAM, step)
//   tail        with top-k up to 1024 (the default chain's 40), everything after the sort in one
//               block with the list in shared memory (tail_kernel): the same arithmetic and order
//
// Block sums (the order of sample_math.h): a block per 256 list positions loads them into
// shared memory and one thread adds them left to right; one thread then folds the block sums.
// No floating-point atomics anywhere, so the bits depend only on the inputs.
//
// FMA rule (nvcc builds with --fmad=false, scripts/check-fma.sh): no fused multiply-add; the
// CPU's sampler makes none.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cuda/cuda_common.cuh"

extern "C" {
#include "base/rng_core.h"
#include "infer/sample_math.h"
#include "infer/sampler.h"  // RG_SAMPLER_STREAM
}

namespace {

constexpr int BLOCK = RG_SAMPLE_BLOCK;  // threads of the vocabulary-sized kernels = one summation block
constexpr int SORT_THREADS = 1024;
constexpr int TAIL = 1024;  // the longest list the one-block tail takes (top-k up to 1024)

// What the device knows about the draw in progress (device memory, one per sampler).
struct samp_state {
    float max;         // the largest logit (0 after a +inf relabel)
    int32_t best;      // its lowest id
    int32_t done;      // the token is known (greedy, every logit -inf)
    int32_t relabel;   // the largest logit is +inf
    int32_t token;
    int32_t pad_;
    int64_t n;         // candidates in the list
    int64_t n_prev;    // the count before the last compaction
    double z;          // the blocked sum of e over the list before min-p / top-p
    double head_t;     // top-p's head threshold
    uint64_t prefix, mask;  // top-k's radix select: the key bits fixed so far
    int64_t k_rem;          // and the rank still to find among the keys with that prefix
};

enum pred_kind { PRED_TOPK, PRED_MINP, PRED_HEAD };

__device__ inline bool better(float va, int32_t ia, float vb, int32_t ib) {
    return va > vb || (va == vb && ia < ib);
}

// ===========================================================================
// Kernels
// ===========================================================================

// l = the logits with NaN as -inf, ids = 0..V-1; block 0 resets the state.
__global__ void prep_kernel(const float *logits, float *l, int32_t *ids, int64_t V, samp_state *st, int64_t k) {
    const int64_t i = (int64_t)blockIdx.x * BLOCK + threadIdx.x;
    if (i < V) {
        const float x = logits[i];
        l[i] = x != x ? -INFINITY : x;
        ids[i] = (int32_t)i;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        st->done = 0, st->relabel = 0, st->token = 0;
        st->n = V, st->n_prev = V;
        st->z = 0.0, st->head_t = 0.0;
        st->prefix = 0, st->mask = 0, st->k_rem = k;
    }
}

// The repetition penalty of each distinct id of the window (distinct: no two threads share one).
__global__ void penalty_kernel(float *l, const int32_t *pen, int64_t n_pen, float penalty) {
    const int64_t i = (int64_t)blockIdx.x * BLOCK + threadIdx.x;
    if (i < n_pen) {
        const int32_t id = pen[i];
        l[id] = rg_sample_penalize(l[id], penalty);
    }
}

// The best (logit, id) of a block's 256 ids, by a tree in shared memory.
__global__ void argmax_part_kernel(const float *l, int64_t V, float *part_v, int32_t *part_i) {
    RG_SHARED(float, sv, BLOCK);
    RG_SHARED(int32_t, si, BLOCK);
    const int64_t i = (int64_t)blockIdx.x * BLOCK + threadIdx.x;
    sv[threadIdx.x] = i < V ? l[i] : -INFINITY;
    si[threadIdx.x] = i < V ? (int32_t)i : INT32_MAX;
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        __syncthreads();
        if ((int)threadIdx.x < s && better(sv[threadIdx.x + s], si[threadIdx.x + s], sv[threadIdx.x], si[threadIdx.x])) {
            sv[threadIdx.x] = sv[threadIdx.x + s];
            si[threadIdx.x] = si[threadIdx.x + s];
        }
    }
    if (threadIdx.x == 0) part_v[blockIdx.x] = sv[0], part_i[blockIdx.x] = si[0];
}

// One block: the best of the blocks' bests; decides greedy, all -inf and +inf.
__global__ void argmax_final_kernel(const float *part_v, const int32_t *part_i, int64_t n_part, samp_state *st,
                                    int greedy) {
    RG_SHARED(float, sv, BLOCK);
    RG_SHARED(int32_t, si, BLOCK);
    float bv = -INFINITY;
    int32_t bi = INT32_MAX;
    for (int64_t b = threadIdx.x; b < n_part; b += BLOCK)
        if (better(part_v[b], part_i[b], bv, bi)) bv = part_v[b], bi = part_i[b];
    sv[threadIdx.x] = bv, si[threadIdx.x] = bi;
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        __syncthreads();
        if ((int)threadIdx.x < s && better(sv[threadIdx.x + s], si[threadIdx.x + s], sv[threadIdx.x], si[threadIdx.x])) {
            sv[threadIdx.x] = sv[threadIdx.x + s];
            si[threadIdx.x] = si[threadIdx.x + s];
        }
    }
    if (threadIdx.x == 0) {
        st->best = si[0], st->max = sv[0];
        if (greedy || sv[0] == -INFINITY) st->done = 1, st->token = si[0];
        if (sv[0] == INFINITY) st->relabel = 1, st->max = 0.0f;
    }
}

// A +inf maximum: the +inf tokens share the mass equally (logit 0), the rest drop out.
__global__ void relabel_kernel(float *l, int64_t V, const samp_state *st) {
    if (st->done || !st->relabel) return;
    const int64_t i = (int64_t)blockIdx.x * BLOCK + threadIdx.x;
    if (i < V) l[i] = l[i] == INFINITY ? 0.0f : -INFINITY;
}

// Top-k's radix select, one pass: the histogram of the key's byte at `shift` among the keys
// that carry the prefix found so far (counts: integer atomics, exact in any order).
__global__ void radix_hist_kernel(const float *l, int64_t V, const samp_state *st, uint32_t *hist, int shift) {
    RG_SHARED(uint32_t, sh, 256);
    sh[threadIdx.x] = 0;
    __syncthreads();
    const int64_t i = (int64_t)blockIdx.x * BLOCK + threadIdx.x;
    if (!st->done && i < V) {
        const uint64_t key = rg_sample_rank_key(l[i], (int32_t)i);
        if ((key & st->mask) == st->prefix) atomicAdd(&sh[(key >> shift) & 255], 1u);
    }
    __syncthreads();
    if (sh[threadIdx.x]) atomicAdd(&hist[threadIdx.x], sh[threadIdx.x]);
}

// One block of 256: the byte holding the k_rem-th largest key, walked from the top; the
// histogram is zeroed for the next pass.
__global__ void radix_select_kernel(samp_state *st, uint32_t *hist, int shift) {
    if (threadIdx.x == 0 && !st->done) {
        int64_t above = 0;
        for (int d = 255; d >= 0; d--) {
            const int64_t c = hist[d];
            if (above + c >= st->k_rem) {
                st->prefix |= (uint64_t)d << shift;
                st->mask |= (uint64_t)255 << shift;
                st->k_rem -= above;
                break;
            }
            above += c;
        }
    }
    __syncthreads();
    hist[threadIdx.x] = 0;
}

__device__ inline bool keep(int kind, const float *l, int32_t id, const double *val, int64_t j, const samp_state *st,
                            double min_p) {
    if (kind == PRED_TOPK) return rg_sample_rank_key(l[id], id) >= st->prefix;  // prefix: the k-th key
    if (kind == PRED_MINP) return val[j] >= min_p;
    return val[j] >= st->head_t;
}

// Compaction, 1 of 3: how many of a block's 256 list positions stay.
__global__ void keep_count_kernel(int kind, const float *l, const int32_t *ids, const double *val,
                                  const samp_state *st, double min_p, int32_t *counts) {
    const int64_t j = (int64_t)blockIdx.x * BLOCK + threadIdx.x;
    const int64_t n = st->n;
    const bool k = !st->done && j < n && keep(kind, l, ids[j], val, j, st, min_p);
    const int c = __syncthreads_count(k);
    if (threadIdx.x == 0) counts[blockIdx.x] = c;
}

// 2 of 3, one thread: the blocks' counts to offsets; the new count.
__global__ void keep_scan_kernel(int32_t *counts, samp_state *st) {
    if (st->done) return;
    const int64_t nb = (st->n + BLOCK - 1) / BLOCK;
    int64_t off = 0;
    for (int64_t b = 0; b < nb; b++) {
        const int32_t c = counts[b];
        counts[b] = (int32_t)off;
        off += c;
    }
    st->n_prev = st->n;
    st->n = off;
}

// 3 of 3: the kept positions to their places, in order (a warp's ballot, the warps in order).
__global__ void keep_scatter_kernel(int kind, const float *l, const int32_t *ids, const double *val,
                                    const samp_state *st, double min_p, const int32_t *offsets, int32_t *ids_out,
                                    double *val_out) {
    RG_SHARED(int32_t, warp_base, BLOCK / 32);
    const int64_t j = (int64_t)blockIdx.x * BLOCK + threadIdx.x;
    const bool k = !st->done && j < st->n_prev && keep(kind, l, ids[j], val, j, st, min_p);
    const unsigned ballot = __ballot_sync(0xFFFFFFFFu, k);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_base[warp] = __popc(ballot);
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t off = 0;
        for (int w = 0; w < BLOCK / 32; w++) {
            const int32_t c = warp_base[w];
            warp_base[w] = off;
            off += c;
        }
    }
    __syncthreads();
    if (k) {
        const int64_t dst = offsets[blockIdx.x] + warp_base[warp] + __popc(ballot & ((1u << lane) - 1u));
        ids_out[dst] = ids[j];
        if (val_out) val_out[dst] = val[j];
    }
}

// e = exp(l - max) at each list position.
__global__ void exp_kernel(const float *l, const int32_t *ids, const samp_state *st, double *val) {
    const int64_t j = (int64_t)blockIdx.x * BLOCK + threadIdx.x;
    if (st->done || j >= st->n) return;
    val[j] = rg_sample_exp((double)l[ids[j]] - (double)st->max);
}

// The temperature's weights: exp((l - max) / temp) (temp 1: exp(l - max), the CPU's e).
__global__ void weight_kernel(const float *l, const int32_t *ids, const samp_state *st, float temp, double *w) {
    const int64_t j = (int64_t)blockIdx.x * BLOCK + threadIdx.x;
    if (st->done || j >= st->n) return;
    const double d = (double)l[ids[j]] - (double)st->max;
    w[j] = temp != 1.0f ? rg_sample_exp(d / (double)temp) : rg_sample_exp(d);
}

// q = e / z at each list position (top-p's probabilities).
__global__ void prob_kernel(const double *val, const samp_state *st, double *q) {
    const int64_t j = (int64_t)blockIdx.x * BLOCK + threadIdx.x;
    if (st->done || j >= st->n) return;
    q[j] = val[j] / st->z;
}

// The block sum of 256 list positions, left to right (sample_math.h's order).
__global__ void block_sum_kernel(const double *v, const samp_state *st, double *sums) {
    RG_SHARED(double, sh, BLOCK);
    const int64_t j0 = (int64_t)blockIdx.x * BLOCK, n = st->n;
    if (st->done || j0 >= n) return;
    if (j0 + threadIdx.x < n) sh[threadIdx.x] = v[j0 + threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0) {
        const int64_t m = n - j0 < BLOCK ? n - j0 : BLOCK;
        double s = 0.0;
        for (int64_t t = 0; t < m; t++) s = s + sh[t];
        sums[blockIdx.x] = s;
    }
}

__device__ inline double fold_blocks(const double *sums, int64_t n) {
    double total = 0.0;
    for (int64_t b = 0; b < (n + BLOCK - 1) / BLOCK; b++) total = total + sums[b];
    return total;
}

// One thread: z = the blocks' sums folded.
__global__ void z_kernel(const double *sums, samp_state *st) {
    if (!st->done) st->z = fold_blocks(sums, st->n);
}

// One block: top-p's head threshold, the CPU's loop (a decision: any summation order).
__global__ void head_kernel(const double *val, samp_state *st, double top_p) {
    RG_SHARED(double, red, 32);
    if (st->done) return;
    const int64_t n = st->n;
    const double z = st->z;
    double t = 0.0;
    for (double cut = 8.0;; cut = cut * 2.0) {
        t = cut > 700 ? 0.0 : rg_sample_exp(-cut);
        double mass = 0.0;
        for (int64_t j = threadIdx.x; j < n; j += BLOCK)
            if (val[j] >= t) mass = mass + val[j];
        mass = rg_cu_block_reduce(mass, 0.0, red, rg_cu_add());
        if (t == 0.0 || mass / z > top_p + 1e-6) break;
    }
    if (threadIdx.x == 0) st->head_t = t;
}

// One block: the list sorted by rank (rank key descending), bitonic over the next power of two
// with the padding ranked last; keys is scratch of that size.
__global__ void __launch_bounds__(SORT_THREADS) sort_kernel(const float *l, int32_t *ids, uint64_t *keys,
                                                            const samp_state *st) {
    if (st->done) return;
    const int64_t n = st->n;
    int64_t P = 1;
    while (P < n) P <<= 1;
    for (int64_t j = threadIdx.x; j < P; j += SORT_THREADS) keys[j] = j < n ? rg_sample_rank_key(l[ids[j]], ids[j]) : 0;
    for (int64_t size = 2; size <= P; size <<= 1) {
        for (int64_t stride = size >> 1; stride > 0; stride >>= 1) {
            __syncthreads();
            for (int64_t j = threadIdx.x; j < P; j += SORT_THREADS) {
                const int64_t o = j ^ stride;
                if (o <= j) continue;
                const uint64_t a = keys[j], b = keys[o];
                const bool descending = (j & size) == 0;  // the first half of each merge runs high to low
                if (descending ? a < b : a > b) keys[j] = b, keys[o] = a;
            }
        }
    }
    __syncthreads();
    for (int64_t j = threadIdx.x; j < n; j += SORT_THREADS) ids[j] = (int32_t)(0xFFFFFFFFu - (uint32_t)keys[j]);
}

// Top-p's cut on one thread: the first position whose blocked running sum of q reaches top_p,
// searched in the first block whose end reaches it; n when none does.
__device__ inline int64_t cut_walk(const double *q, const double *sums, int64_t n, double top_p) {
    double before = 0.0;
    for (int64_t b = 0; b * BLOCK < n; b++) {
        const double after = before + sums[b];
        if (after >= top_p) {
            double done = before, part = 0.0;
            const int64_t end = (b + 1) * BLOCK < n ? (b + 1) * BLOCK : n;
            for (int64_t j = b * BLOCK; j < end; j++)
                if (rg_sample_block_add(&done, &part, j, q[j]) >= top_p) return j + 1;
            return n;  // not reached: the block's last running sum is `after`
        }
        before = after;
    }
    return n;
}

// The draw on one thread: target = u * total; the first position with w > 0 whose blocked
// running sum passes it (in the first block whose end passes it), else the last with w > 0.
__device__ inline int64_t draw_walk(const double *w, const double *sums, int64_t n, uint64_t seed, uint64_t step) {
    const double total = fold_blocks(sums, n);
    const double u = (double)rg_rng_uniform_inline(seed, RG_SAMPLER_STREAM, step);
    const double target = u * total;
    double before = 0.0;
    for (int64_t b = 0; b * BLOCK < n; b++) {
        const double after = before + sums[b];
        if (target < after) {
            double done = before, part = 0.0;
            const int64_t end = (b + 1) * BLOCK < n ? (b + 1) * BLOCK : n;
            for (int64_t j = b * BLOCK; j < end; j++) {
                const double cum = rg_sample_block_add(&done, &part, j, w[j]);
                if (w[j] > 0 && target < cum) return j;
            }
        }
        before = after;
    }
    int64_t last = n - 1;  // rounding: the sum fell short of target
    while (last > 0 && !(w[last] > 0)) last--;
    return last;
}

// One thread: top-p's cut of the list.
__global__ void top_p_cut_kernel(const double *q, const double *sums, samp_state *st, double top_p) {
    if (!st->done) st->n = cut_walk(q, sums, st->n, top_p);
}

// One thread: the draw from the list.
__global__ void draw_kernel(const int32_t *ids, const double *w, const double *sums, samp_state *st, uint64_t seed,
                            uint64_t step) {
    if (!st->done) st->token = ids[draw_walk(w, sums, st->n, seed, step)];
}

// Block sums of v[0..n) in shared memory, n <= TAIL: thread b adds block b left to right.
__device__ inline void tail_block_sums(const double *v, int64_t n, double *sums) {
    const int b = threadIdx.x;
    __syncthreads();
    if (b < TAIL / BLOCK && (int64_t)b * BLOCK < n) {
        const int64_t end = ((int64_t)b + 1) * BLOCK < n ? ((int64_t)b + 1) * BLOCK : n;
        double s = 0.0;
        for (int64_t t = (int64_t)b * BLOCK; t < end; t++) s = s + v[t];
        sums[b] = s;
    }
    __syncthreads();
}

// Everything after the sort for a list of at most TAIL candidates (top-k up to TAIL), in one
// block with the list in shared memory: e and z, min-p, top-p's cut, the weights and the draw,
// the stages above with the same arithmetic and order (a thread per position, one thread per
// summation block, one thread for each walk).
__global__ void __launch_bounds__(TAIL) tail_kernel(const float *l, const int32_t *ids, samp_state *st, float temp,
                                                    double top_p, double min_p, uint64_t seed, uint64_t step) {
    RG_SHARED(double, e, TAIL);
    RG_SHARED(double, w, TAIL);
    RG_SHARED(int32_t, id, TAIL);
    RG_SHARED(double, sums, TAIL / BLOCK);
    RG_SHARED(int32_t, warp_base, TAIL / 32);
    RG_SHARED(int64_t, count, 1);
    if (st->done) return;
    const int j = threadIdx.x, lane = j & 31, warp = j >> 5;
    int64_t n = st->n;
    const double mx = (double)st->max;
    id[j] = j < n ? ids[j] : 0;
    if (top_p < 1.0 || min_p > 0.0) {
        e[j] = j < n ? rg_sample_exp((double)l[id[j]] - mx) : 0.0;
        tail_block_sums(e, n, sums);
        const double z = fold_blocks(sums, n);
        if (min_p > 0.0) {  // the positions with e >= min_p, in order
            const bool keep = j < n && e[j] >= min_p;
            const unsigned ballot = __ballot_sync(0xFFFFFFFFu, keep);
            if (lane == 0) warp_base[warp] = __popc(ballot);
            __syncthreads();
            if (j == 0) {
                int32_t off = 0;
                for (int k = 0; k < TAIL / 32; k++) {
                    const int32_t c = warp_base[k];
                    warp_base[k] = off;
                    off += c;
                }
                count[0] = off;
            }
            const int32_t my_id = id[j];
            const double my_e = e[j];
            __syncthreads();
            if (keep) {
                const int pos = warp_base[warp] + __popc(ballot & ((1u << lane) - 1u));
                id[pos] = my_id;
                e[pos] = my_e;
            }
            __syncthreads();
            n = count[0];
        }
        if (top_p < 1.0) {
            w[j] = j < n ? e[j] / z : 0.0;
            tail_block_sums(w, n, sums);
            if (j == 0) count[0] = cut_walk(w, sums, n, top_p);
            __syncthreads();
            n = count[0];
        }
    }
    const double d = j < n ? (double)l[id[j]] - mx : 0.0;
    w[j] = j >= n ? 0.0 : temp != 1.0f ? rg_sample_exp(d / (double)temp) : rg_sample_exp(d);
    tail_block_sums(w, n, sums);
    if (j == 0) st->token = id[draw_walk(w, sums, n, seed, step)];
}

}  // namespace

// ===========================================================================
// Launchers
// ===========================================================================

struct rg_cuda_sampler {
    rg_cuda_ctx *ctx;
    int64_t V, n_blocks, max_pen, sort_cap;
    float *l;                 // [V] the working logits
    int32_t *ids, *ids2;      // [V] the list and the compaction's output
    double *val, *val2, *w;   // [V] e per list position (and the compaction's copy), the weights
    double *sums;             // [n_blocks] block sums
    int32_t *counts;          // [n_blocks] compaction counts, then offsets
    float *part_v;            // [n_blocks] argmax per block
    int32_t *part_i;
    uint64_t *keys;           // [sort_cap] the sort's keys
    uint32_t *hist;           // [256]
    int32_t *pen;             // [max_pen] the window's distinct ids
    void *state;              // samp_state (internal to this file; the struct is not)
};

static samp_state *state_of(const rg_cuda_sampler *s) { return (samp_state *)s->state; }

// count elements of T in device memory.
template <class T>
static rg_status dev_alloc(rg_cuda_ctx *ctx, T **p, size_t count, rg_error *err) {
    void *v = NULL;
    rg_status st = rg_cuda_mem_alloc(ctx, count * sizeof(T), &v, err);
    *p = (T *)v;
    return st;
}

extern "C" void rg_cuda_sampler_free(rg_cuda_sampler *s) {
    if (!s) return;
    void *bufs[] = {s->l, s->ids, s->ids2, s->val, s->val2, s->w, s->sums, s->counts, s->part_v, s->part_i,
                    s->keys, s->hist, s->pen, s->state};
    for (void *p : bufs) rg_cuda_mem_free(s->ctx, p);
    free(s);
}

extern "C" rg_status rg_cuda_sampler_create(rg_cuda_ctx *ctx, int32_t n_vocab, int32_t max_penalized,
                                            rg_cuda_sampler **out, rg_error *err) {
    *out = NULL;
    if (n_vocab <= 0) return rg_fail(err, RG_ERR_ARG, "cuda sampler: the vocabulary size %d is not positive", (int)n_vocab);
    rg_cuda_sampler *s = (rg_cuda_sampler *)calloc(1, sizeof *s);
    if (!s) return rg_fail(err, RG_ERR_NOMEM, "cuda sampler: out of memory");
    s->ctx = ctx;
    s->V = n_vocab;
    s->n_blocks = (n_vocab + BLOCK - 1) / BLOCK;
    s->max_pen = max_penalized > 0 ? max_penalized : 1;
    s->sort_cap = 1;
    while (s->sort_cap < n_vocab) s->sort_cap <<= 1;
    const size_t V = (size_t)n_vocab, nb = (size_t)s->n_blocks;
    rg_status st = dev_alloc(ctx, &s->l, V, err);
    if (!st) st = dev_alloc(ctx, &s->ids, V, err);
    if (!st) st = dev_alloc(ctx, &s->ids2, V, err);
    if (!st) st = dev_alloc(ctx, &s->val, V, err);
    if (!st) st = dev_alloc(ctx, &s->val2, V, err);
    if (!st) st = dev_alloc(ctx, &s->w, V, err);
    if (!st) st = dev_alloc(ctx, &s->sums, nb, err);
    if (!st) st = dev_alloc(ctx, &s->counts, nb, err);
    if (!st) st = dev_alloc(ctx, &s->part_v, nb, err);
    if (!st) st = dev_alloc(ctx, &s->part_i, nb, err);
    if (!st) st = dev_alloc(ctx, &s->keys, (size_t)s->sort_cap, err);
    if (!st) st = dev_alloc(ctx, &s->hist, 256, err);
    if (!st) st = dev_alloc(ctx, &s->pen, (size_t)s->max_pen, err);
    samp_state *state = NULL;
    if (!st) st = dev_alloc(ctx, &state, 1, err);
    s->state = state;
    if (!st) st = rg_cuda_mem_zero(ctx, s->hist, 256 * sizeof(uint32_t), err);
    if (st) {
        rg_cuda_sampler_free(s);
        return st;
    }
    *out = s;
    return RG_OK;
}

// Keeps the list positions `kind` accepts, in order: ids (and val) to ids2 (val2), swapped back.
static rg_status compact(rg_cuda_sampler *s, int kind, double min_p, bool with_val, rg_error *err) {
    const rg_node *n = NULL;
    cudaStream_t stream = s->ctx->stream;
    RG_LAUNCH(keep_count_kernel, (unsigned)s->n_blocks, BLOCK, 0, stream, kind, s->l, s->ids, s->val, state_of(s), min_p,
              s->counts);
    RG_LAUNCH(keep_scan_kernel, 1, 1, 0, stream, s->counts, state_of(s));
    RG_LAUNCH(keep_scatter_kernel, (unsigned)s->n_blocks, BLOCK, 0, stream, kind, s->l, s->ids, s->val, state_of(s), min_p,
              s->counts, s->ids2, with_val ? s->val2 : (double *)NULL);
    CU_LAUNCHED();
    int32_t *ti = s->ids;
    s->ids = s->ids2, s->ids2 = ti;
    if (with_val) {
        double *tv = s->val;
        s->val = s->val2, s->val2 = tv;
    }
    return RG_OK;
}

extern "C" rg_status rg_cuda_sample(rg_cuda_sampler *s, const float *logits, const rg_cuda_sample_args *a, int32_t *id,
                                    rg_error *err) {
    const rg_node *n = NULL;
    rg_cuda_ctx *ctx = s->ctx;
    cudaStream_t stream = ctx->stream;
    const unsigned nb = (unsigned)s->n_blocks;
    const rg_sampler_params *p = &a->p;
    CU_TRY(cudaSetDevice(ctx->device));
    const bool topk = p->top_k > 0 && p->top_k < s->V;
    RG_LAUNCH(prep_kernel, nb, BLOCK, 0, stream, logits, s->l, s->ids, s->V, state_of(s), (int64_t)(topk ? p->top_k : 0));
    if (p->repeat_penalty != 1.0f && a->n_penalized > 0) {
        if (a->n_penalized > s->max_pen)
            return rg_fail(err, RG_ERR_ARG, "cuda sampler: %lld penalized tokens, room for %lld",
                           (long long)a->n_penalized, (long long)s->max_pen);
        RG_TRY(rg_cuda_copy_h2d(ctx, s->pen, a->penalized, (size_t)a->n_penalized * sizeof(int32_t), err));
        RG_LAUNCH(penalty_kernel, (unsigned)((a->n_penalized + BLOCK - 1) / BLOCK), BLOCK, 0, stream, s->l, s->pen,
                  a->n_penalized, p->repeat_penalty);
    }
    RG_LAUNCH(argmax_part_kernel, nb, BLOCK, 0, stream, s->l, s->V, s->part_v, s->part_i);
    RG_LAUNCH(argmax_final_kernel, 1, BLOCK, 0, stream, s->part_v, s->part_i, s->n_blocks, state_of(s), p->temp <= 0.0f ? 1 : 0);
    CU_LAUNCHED();
    if (p->temp > 0.0f) {
        RG_LAUNCH(relabel_kernel, nb, BLOCK, 0, stream, s->l, s->V, state_of(s));
        bool sorted = false;
        if (topk) {
            for (int pass = 0; pass < 8; pass++) {
                const int shift = 56 - 8 * pass;
                RG_LAUNCH(radix_hist_kernel, nb, BLOCK, 0, stream, s->l, s->V, state_of(s), s->hist, shift);
                RG_LAUNCH(radix_select_kernel, 1, 256, 0, stream, state_of(s), s->hist, shift);
            }
            CU_LAUNCHED();
            RG_TRY(compact(s, PRED_TOPK, 0.0, false, err));
            RG_LAUNCH(sort_kernel, 1, SORT_THREADS, 0, stream, s->l, s->ids, s->keys, state_of(s));
            sorted = true;
            if (p->top_k <= TAIL) {  // the rest in one block
                RG_LAUNCH(tail_kernel, 1, TAIL, 0, stream, s->l, s->ids, state_of(s), p->temp, (double)p->top_p,
                          (double)p->min_p, p->seed, a->step);
                CU_LAUNCHED();
                return rg_cuda_copy_d2h(ctx, id, &state_of(s)->token, sizeof *id, err);
            }
        }
        const bool have_e = p->top_p < 1.0f || p->min_p > 0.0f;
        if (have_e) {
            RG_LAUNCH(exp_kernel, nb, BLOCK, 0, stream, s->l, s->ids, state_of(s), s->val);
            RG_LAUNCH(block_sum_kernel, nb, BLOCK, 0, stream, s->val, state_of(s), s->sums);
            RG_LAUNCH(z_kernel, 1, 1, 0, stream, s->sums, state_of(s));
            CU_LAUNCHED();
            if (p->min_p > 0.0f) {
                RG_TRY(compact(s, PRED_MINP, (double)p->min_p, true, err));
            } else if (!sorted) {
                RG_LAUNCH(head_kernel, 1, BLOCK, 0, stream, s->val, state_of(s), (double)p->top_p);
                RG_TRY(compact(s, PRED_HEAD, 0.0, true, err));
            }
            if (!sorted) {
                RG_LAUNCH(sort_kernel, 1, SORT_THREADS, 0, stream, s->l, s->ids, s->keys, state_of(s));
                RG_LAUNCH(exp_kernel, nb, BLOCK, 0, stream, s->l, s->ids, state_of(s), s->val);  // e in the new order
            }
            if (p->top_p < 1.0f) {
                RG_LAUNCH(prob_kernel, nb, BLOCK, 0, stream, s->val, state_of(s), s->w);
                RG_LAUNCH(block_sum_kernel, nb, BLOCK, 0, stream, s->w, state_of(s), s->sums);
                RG_LAUNCH(top_p_cut_kernel, 1, 1, 0, stream, s->w, s->sums, state_of(s), (double)p->top_p);
            }
            CU_LAUNCHED();
        }
        RG_LAUNCH(weight_kernel, nb, BLOCK, 0, stream, s->l, s->ids, state_of(s), p->temp, s->w);
        RG_LAUNCH(block_sum_kernel, nb, BLOCK, 0, stream, s->w, state_of(s), s->sums);
        RG_LAUNCH(draw_kernel, 1, 1, 0, stream, s->ids, s->w, s->sums, state_of(s), p->seed, a->step);
        CU_LAUNCHED();
    }
    return rg_cuda_copy_d2h(ctx, id, &state_of(s)->token, sizeof *id, err);
}
