// ops_optim.cu - CUDA cells of the op table for the optimizer step (cuda_common.cuh): the
// global norm's sum of squares, its clip coefficient and the AdamW / SGD updates, the CPU's
// bits (cpu/ops_optim.c). Kernels first, then launchers, then the cells. Every launcher only
// queues work on the context's stream and reads nothing back.
//
//   SUMSQ           a f32 [nel], prev f64 [1] -> f64 [1]: the CPU's block sums (16 double lanes by
//                   i % 16, folded 8, 4, 2, 1) into device scratch, then prev + the blocks in order
//                   by one thread: __dmul_rn / __dadd_rn, so the CPU's bits.
//   CLIP_COEF       total f64 [1] -> f32 [1]: max_norm / (sqrt(total) + 1e-6) capped at 1 in double,
//                   correctly rounded sqrt and division: the CPU's bits.
//   ADAMW, SGD      the canonical f32 sequence of ops_optim.c, op for op: __fmaf_rn where the
//                   CPU calls fmaf, __fmul_rn/__fsub_rn/__fadd_rn/__fdiv_rn/__fsqrt_rn elsewhere
//                   (nvcc would otherwise contract a * b + c), so the same gradients give the
//                   same bits. f32 parameters; f16/bf16 ones stored back by stochastic rounding
//                   with sround_bits.h's keyed words (Philox4x32-10 keyed by (seed, step,
//                   tensor id, element)), or by RNE (half_bits.h) of an f32 master updated in
//                   place: the functions the CPU runs, so bit for bit too. SGD with a momentum
//                   buffer (src[3]) updates it in place as rg_sgd_momentum_row does.
//
// FMA rule (nvcc builds with --fmad=false, scripts/check-fma.sh): __fmaf_rn exactly where the
// CPU's ops_optim.c calls fmaf, every other operation rounded apart: the optimizer's bits are
// the CPU's.
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cuda/cuda_common.cuh"

extern "C" {
#include "cpu/cpu_ops.h"   // RG_SUMSQ_BLOCK: the CPU's norm blocks
#include "train/philox.h"  // RG_RAND_PURPOSE_SR
}
#include "tensor/half_bits.h"
#include "train/sround_bits.h"

// ===========================================================================
// Kernels
// ===========================================================================

// The optimizer's scalars (the node's fp) and the SR key (its ip).
typedef struct optim_par {
    float fp[8];
} optim_par;
typedef struct sr_key {
    uint64_t seed;
    uint32_t step, tensor_id;
} sr_key;

// ops_optim.c's rg_adamw_row for one element, op for op.
__device__ static inline float adamw_one(float th, float g, float *m, float *v, const optim_par &p) {
    const float step = p.fp[0], omb1 = p.fp[1], b2 = p.fp[2], omb2 = p.fp[3], eps = p.fp[4];
    const float decay = p.fp[5], bc2s = p.fp[6], clip = p.fp[7];
    if (clip != 1.0f) g = __fmul_rn(g, clip);
    const float mi = __fmaf_rn(omb1, __fsub_rn(g, *m), *m);
    const float vi = __fmaf_rn(omb2, __fmul_rn(g, g), __fmul_rn(b2, *v));
    const float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2s), eps);
    if (decay != 1.0f) th = __fmul_rn(th, decay);
    *m = mi;
    *v = vi;
    return __fmaf_rn(-step, __fdiv_rn(mi, den), th);
}

// ops_optim.c's rg_sgd_row for one element; with a momentum buffer b, rg_sgd_momentum_row's
// (fp[3] mu, fp[4] first).
__device__ static inline float sgd_one(float th, float g, float *b, const optim_par &p) {
    const float lr = p.fp[0], wd = p.fp[1], clip = p.fp[2];
    if (clip != 1.0f) g = __fmul_rn(g, clip);
    if (wd != 0.0f) g = __fmaf_rn(wd, th, g);
    if (b) {
        g = p.fp[4] == 1.0f ? g : __fmaf_rn(1.0f, g, __fmul_rn(p.fp[3], *b));
        *b = g;
    }
    return __fmaf_rn(-lr, g, th);
}

// optim: one step (AdamW when adamw, else SGD) over n elements of a parameter of `type`. Each
// thread takes groups of four elements, the elements of one Philox block, so a half parameter
// without a master draws each block's words once: element i's word is word i & 3 of block
// i >> 2, as rg_sr_*_row draws them. theta: the parameter as it is; out: where it goes (normally
// the same bytes); master: f32 master of a half parameter (updated, then stored by RNE), or NULL.
__global__ static void optim_kernel(const void *theta, void *out, float *master, const float *grad, float *m,
                                    float *v, int64_t n, uint32_t type, int adamw, const rg_node_params *prm,
                                    const float *clip) {
    // The node's scalars and SR key (ip: seed, step, tensor id), read where the executor put them;
    // the clip from the CLIP_COEF node's output when the node reads one (src[5] / src[4]).
    optim_par p;
    for (int k = 0; k < 8; k++) p.fp[k] = prm->fp[k];
    if (clip) p.fp[adamw ? 7 : 2] = *clip;
    const sr_key key = {(uint64_t)prm->ip[0], (uint32_t)prm->ip[1], (uint32_t)prm->ip[2]};
    const int64_t quads = (n + 3) / 4;
    for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < quads; q += (int64_t)gridDim.x * blockDim.x) {
        uint32_t r[4] = {0, 0, 0, 0};
        if (type != RG_TYPE_F32 && !master)
            rg_rand_block4_bits(key.seed, key.step, RG_RAND_PURPOSE_SR, key.tensor_id, (uint64_t)q, r);
        for (int j = 0; j < 4 && 4 * q + j < n; j++) {
            const int64_t i = 4 * q + j;
            float th;
            if (master) th = master[i];
            else if (type == RG_TYPE_F32) th = ((const float *)theta)[i];
            else if (type == RG_TYPE_F16) th = __uint_as_float(rg_f32_bits_from_f16(((const uint16_t *)theta)[i]));
            else th = __uint_as_float(rg_f32_bits_from_bf16(((const uint16_t *)theta)[i]));
            th = adamw ? adamw_one(th, grad[i], m + i, v + i, p) : sgd_one(th, grad[i], m ? m + i : NULL, p);
            if (type == RG_TYPE_F32) {
                ((float *)out)[i] = th;
                continue;
            }
            const uint32_t u = __float_as_uint(th);
            uint16_t h;
            if (master) {
                master[i] = th;
                h = type == RG_TYPE_F16 ? rg_f16_from_f32_bits(u) : rg_bf16_from_f32_bits(u);
            } else {
                h = type == RG_TYPE_F16 ? rg_sr_f16_bits(u, r[j]) : rg_sr_bf16_bits(u, r[j]);
            }
            ((uint16_t *)out)[i] = h;
        }
    }
}

// sumsq_blocks: the sum of squares of each SUMSQ_BLOCK-element block of a (rg_sumsq_f64's order):
// 16 threads per block, thread l summing elements l, l + 16, ... in double (exact products,
// __dadd_rn), then the 16 lanes folded 8, 4, 2, 1 by the block's first thread. A CUDA block takes
// SUMSQ_PER_CTA norm blocks; the grid loops past its size.
#define SUMSQ_LANES 16
#define SUMSQ_PER_CTA 16
__global__ static void sumsq_blocks_kernel(const float *a, int64_t nel, int64_t n_blocks, double *sums) {
    RG_SHARED(double, lanes, SUMSQ_PER_CTA * SUMSQ_LANES);
    const int slot = threadIdx.x / SUMSQ_LANES, l = threadIdx.x % SUMSQ_LANES;
    for (int64_t b0 = (int64_t)blockIdx.x * SUMSQ_PER_CTA; b0 < n_blocks; b0 += (int64_t)gridDim.x * SUMSQ_PER_CTA) {
        const int64_t b = b0 + slot;
        double acc = 0.0;
        if (b < n_blocks) {
            const int64_t i0 = b * RG_SUMSQ_BLOCK, i1 = i0 + RG_SUMSQ_BLOCK < nel ? i0 + RG_SUMSQ_BLOCK : nel;
            for (int64_t i = i0 + l; i < i1; i += SUMSQ_LANES) {
                const double x = (double)a[i];
                acc = __dadd_rn(acc, __dmul_rn(x, x));
            }
        }
        lanes[threadIdx.x] = acc;
        __syncthreads();
        if (l == 0 && b < n_blocks) {
            double *ln = lanes + slot * SUMSQ_LANES;
            for (int w = SUMSQ_LANES / 2; w >= 1; w /= 2)
                for (int k = 0; k < w; k++) ln[k] = __dadd_rn(ln[k], ln[k + w]);
            sums[b] = ln[0];
        }
        __syncthreads();
    }
}

// sumsq_total: *out = prev (0 without) + the block sums in block order (one thread: the CPU's chain).
__global__ static void sumsq_total_kernel(const double *sums, int64_t n_blocks, const double *prev, double *out) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    double total = prev ? *prev : 0.0;
    for (int64_t b = 0; b < n_blocks; b++) total = __dadd_rn(total, sums[b]);
    *out = total;
}

// clip_coef: rg_clip_coef_f64(sqrt(*total), max_norm) in double, cast once.
__global__ static void clip_coef_kernel(const double *total, double max_norm, float *out) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    if (!(max_norm > 0.0)) {
        *out = 1.0f;
        return;
    }
    const double c = __ddiv_rn(max_norm, __dadd_rn(__dsqrt_rn(*total), 1e-6));
    *out = __double2float_rn(c < 1.0 ? c : 1.0);
}

// ===========================================================================
// Launchers
// ===========================================================================

static const int THREADS = 256;
static const int64_t MAX_GRID = 65535 * 16;

// Blocks for n items at `threads` per block; the kernels loop past the grid.
static unsigned grid_for(int64_t n, int threads) {
    const int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > MAX_GRID ? MAX_GRID : b);
}

static bool is_plain_f32(const rg_node *n) {
    return n && n->t.type == RG_TYPE_F32 && rg_tensor_is_contiguous(&n->t) && rg_tensor_nelements(&n->t) > 0;
}

// ---------------------------------------------------------------------------
// ADAMW and SGD

static bool sup_optim(const rg_node *n) {
    const rg_node *p = n->src[0];
    if (!p || !n->src[1]) return false;
    const uint32_t t = p->t.type;
    if ((t != RG_TYPE_F32 && t != RG_TYPE_F16 && t != RG_TYPE_BF16) || n->t.type != t) return false;
    const int64_t count = rg_tensor_nelements(&p->t);
    if (count < 1 || !rg_tensor_is_contiguous(&p->t) || !rg_tensor_is_contiguous(&n->t) ||
        rg_tensor_nelements(&n->t) != count)
        return false;
    const rg_node *master = rg_optim_master(n);
    if (master && t == RG_TYPE_F32) return false;
    // AdamW's moments; SGD's momentum buffer (src[3]) when it has one
    const rg_node *state[4] = {n->src[1], n->op == RG_OP_ADAMW ? n->src[2] : n->src[3],
                               n->op == RG_OP_ADAMW ? n->src[3] : NULL, master};
    if (n->op == RG_OP_ADAMW && (!state[1] || !state[2])) return false;
    for (int i = 0; i < 4; i++)
        if (state[i] && (!is_plain_f32(state[i]) || rg_tensor_nelements(&state[i]->t) != count)) return false;
    const rg_node *clip = rg_optim_clip_src(n);
    return !clip || (is_plain_f32(clip) && rg_tensor_nelements(&clip->t) == 1);
}

static rg_status run_optim(rg_cuda_ctx *ctx, const rg_node *n, const rg_exec_ctx *c, rg_error *err) {
    const bool adamw = n->op == RG_OP_ADAMW;
    const rg_node *master = rg_optim_master(n), *clip = rg_optim_clip_src(n);
    const int64_t count = rg_tensor_nelements(&n->src[0]->t);
    const rg_node_params *prm;
    RG_TRY(rg_cu_params(c, n, &prm, err));
    RG_LAUNCH(optim_kernel, grid_for((count + 3) / 4, THREADS), THREADS, 0, ctx->stream,
              (const void *)n->src[0]->t.data, n->t.data, master ? (float *)master->t.data : (float *)NULL,
              (const float *)n->src[1]->t.data,
              adamw ? (float *)n->src[2]->t.data : n->src[3] ? (float *)n->src[3]->t.data : (float *)NULL,
              adamw ? (float *)n->src[3]->t.data : (float *)NULL, count, n->src[0]->t.type, adamw ? 1 : 0, prm,
              clip ? (const float *)clip->t.data : (const float *)NULL);
    CU_LAUNCHED();
    return RG_OK;
}

// ---------------------------------------------------------------------------
// SUMSQ and CLIP_COEF

static int64_t sumsq_n_blocks(const rg_node *n) {
    return (rg_tensor_nelements(&n->src[0]->t) + RG_SUMSQ_BLOCK - 1) / RG_SUMSQ_BLOCK;
}

static bool sup_sumsq(const rg_node *n) {
    const rg_node *a = n->src[0], *prev = n->src[1];
    return a && is_plain_f32(a) && n->t.type == RG_TYPE_F64 && rg_tensor_nelements(&n->t) == 1 &&
           (!prev || (prev->t.type == RG_TYPE_F64 && rg_tensor_nelements(&prev->t) == 1));
}

static size_t work_sumsq(const rg_node *n, int n_threads) {
    (void)n_threads;
    return sizeof(double) * (size_t)sumsq_n_blocks(n);
}

static rg_status run_sumsq(rg_cuda_ctx *ctx, const rg_node *n, const rg_exec_ctx *c, rg_error *err) {
    const int64_t nel = rg_tensor_nelements(&n->src[0]->t), n_blocks = sumsq_n_blocks(n);
    if (n_blocks && (!c->scratch || c->scratch_size < work_sumsq(n, 1)))
        return rg_fail(err, RG_ERR_ARG, "cuda sumsq '%s': device scratch of %zu bytes is below the %zu needed",
                       n->t.name, c->scratch_size, work_sumsq(n, 1));
    double *sums = (double *)c->scratch;
    if (n_blocks) {
        RG_LAUNCH(sumsq_blocks_kernel, grid_for((n_blocks + SUMSQ_PER_CTA - 1) / SUMSQ_PER_CTA, 1),
                  SUMSQ_PER_CTA * SUMSQ_LANES, 0, ctx->stream, (const float *)n->src[0]->t.data, nel, n_blocks, sums);
        CU_LAUNCHED();
    }
    RG_LAUNCH(sumsq_total_kernel, 1, 1, 0, ctx->stream, (const double *)sums, n_blocks,
              n->src[1] ? (const double *)n->src[1]->t.data : (const double *)NULL, (double *)n->t.data);
    CU_LAUNCHED();
    return RG_OK;
}

static bool sup_clip_coef(const rg_node *n) {
    const rg_node *t = n->src[0];
    return t && t->t.type == RG_TYPE_F64 && rg_tensor_nelements(&t->t) == 1 && n->t.type == RG_TYPE_F32 &&
           rg_tensor_nelements(&n->t) == 1;
}

static rg_status run_clip_coef(rg_cuda_ctx *ctx, const rg_node *n, const rg_exec_ctx *c, rg_error *err) {
    (void)c;
    double max_norm;  // a constant of the graph: its bits, a kernel argument
    memcpy(&max_norm, &n->ip[0], sizeof max_norm);
    RG_LAUNCH(clip_coef_kernel, 1, 1, 0, ctx->stream, (const double *)n->src[0]->t.data, max_norm, (float *)n->t.data);
    CU_LAUNCHED();
    return RG_OK;
}

// ---------------------------------------------------------------------------
// The cells (rg_cu_cell: the device set, then the run function)

// This file's cells of the CUDA column (op_table.cu lists them).
namespace RG_CU_CELLS {
// The optimizer's step scalars change from run to run: read on the device.
extern const rg_op_col adamw = rg_cu_col(rg_cu_cell<run_optim>, sup_optim, NULL, "f32, f16, bf16", true);
extern const rg_op_col sgd = rg_cu_col(rg_cu_cell<run_optim>, sup_optim, NULL, "f32, f16, bf16", true);
extern const rg_op_col sumsq = rg_cu_col(rg_cu_cell<run_sumsq>, sup_sumsq, work_sumsq, "f32 into f64");
extern const rg_op_col clip_coef =
    rg_cu_col(rg_cu_cell<run_clip_coef>, sup_clip_coef, NULL, "f64 into f32");
}  // namespace RG_CU_CELLS
