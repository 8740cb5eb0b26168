// dequant.cu - weights decoded on the device (the decoders are in dequant.cuh): the context's
// constant tables (rg_cu_qtables_get), the slice decoder rg_cu_dequant_rows that MUL_MAT,
// OUT_PROD and LINEAR_CE run before a GEMM (dequantize + GEMM for wide products), and the C
// entry points of cuda.h (rg_cuda_dequant_*), with a kernel that checks rg_cu_decode32.
//
// The slice kernel: one thread per 32-element group, one template instance per type (no
// switch per element). A warp decodes 32 consecutive groups of one row into registers, turns
// them around through shared memory and stores them so that each store instruction of the
// warp writes 32 consecutive elements (128 bytes of F32, 64 of BF16/F16): the F32 or 16-bit
// output is 4 to 8 times the bytes read, so the stores set the speed. A block's reads are the
// consecutive bytes of its groups' blocks (neighbouring threads share a block's header).
// FMA rule (nvcc builds with --fmad=false, scripts/check-fma.sh): no multiply-add is fused; every
// decoder rounds each product and sum apart, as the CPU's dequantization does.
#include <stdint.h>

#include "cuda/cuda_common.cuh"
#include "cuda/dequant.cuh"

extern "C" {
#include "tensor/half_bits.h"
#include "tensor/quant/quant.h"
#include "tensor/quant/quant_iq_grids.h"
}

namespace {

constexpr int DQ_THREADS = 128;     // slice kernel: 4 warps, 128 groups of one row per block
constexpr int WIDEN_THREADS = 256;  // F32/F16/BF16 sources: one element per thread
constexpr unsigned MAX_GRID_Y = 65535;

typedef float dq_tile_row[33];  // a warp's 32 groups x 32 elements, padded against bank conflicts

// Element i of dst (of dst_type F32, BF16 or F16) = v, rounded to nearest even for the 16-bit types.
__device__ inline void store_as(void *dst, uint32_t dst_type, int64_t i, float v) {
    if (dst_type == RG_TYPE_F32) ((float *)dst)[i] = v;
    else if (dst_type == RG_TYPE_BF16) ((uint16_t *)dst)[i] = rg_bf16_from_f32_bits(__float_as_uint(v));
    else ((uint16_t *)dst)[i] = rg_f16_from_f32_bits(__float_as_uint(v));
}

// dst[r ld + 32 j + l] = element 32 (g0 + j) + l of row r of a TYPE tensor, for j < n_groups.
// blockIdx.x: 128 groups (warp w: groups 32 w .. 32 w + 31 of them); rows: blockIdx.y, stepping
// by gridDim.y.
template <uint32_t TYPE>
__global__ void __launch_bounds__(DQ_THREADS)
    dequant_rows_kernel(const uint8_t *src, int64_t row_bytes, int64_t rows, int64_t g0, int64_t n_groups,
                        uint32_t dst_type, void *dst, int64_t ld, rg_cu_qtables tab) {
    typedef rg_cu_qtype<TYPE> Q;
    RG_SHARED(dq_tile_row, tile, DQ_THREADS);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t first = (int64_t)blockIdx.x * DQ_THREADS + 32 * warp;  // the warp's first group
    const int64_t left = n_groups - first;
    const int n_valid = left < 0 ? 0 : left > 32 ? 32 : (int)left;  // the same in every lane
    const int64_t gg = g0 + first + lane;
    const int64_t block_off = (gg / Q::groups) * Q::bytes;
    const int sub = (int)(gg % Q::groups);
    float *mine = tile[32 * warp + lane];
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        if (lane < n_valid) {
            float v[32];
            rg_cu_decode32_t<TYPE>(src + r * row_bytes + block_off, sub, tab, v);
RG_CU_UNROLL
            for (int j = 0; j < 32; j++) mine[j] = v[j];
        }
        __syncwarp();
        const int64_t out = r * ld + 32 * first + lane;
        for (int j = 0; j < n_valid; j++) store_as(dst, dst_type, out + 32 * j, tile[32 * warp + j][lane]);
        __syncwarp();  // the tile is written again for the next row
    }
}

// The float sources: dst[r ld + k] = element k0 + k of row r, for k < K.
template <uint32_t TYPE>
__global__ void __launch_bounds__(WIDEN_THREADS)
    widen_rows_kernel(const uint8_t *src, int64_t row_bytes, int64_t rows, int64_t k0, int64_t K, uint32_t dst_type,
                      void *dst, int64_t ld) {
    const int64_t k = (int64_t)blockIdx.x * WIDEN_THREADS + threadIdx.x;
    if (k >= K) return;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const uint8_t *row = src + r * row_bytes;
        float v;
        if (TYPE == RG_TYPE_F32) v = ((const float *)row)[k0 + k];
        else if (TYPE == RG_TYPE_F16) v = rg_cu_f16(((const uint16_t *)row)[k0 + k]);
        else v = rg_cu_bf16(((const uint16_t *)row)[k0 + k]);
        store_as(dst, dst_type, r * ld + k, v);
    }
}

// The check of rg_cu_decode32 (the in-place decoders' entry, type known at run time): group i
// of n_groups consecutive groups (groups per block, bytes per block) into dst[32 i ..].
__global__ void __launch_bounds__(DQ_THREADS)
    decode32_kernel(uint32_t type, const uint8_t *src, int64_t n_groups, int groups, int bytes, float *dst,
                    rg_cu_qtables tab) {
    for (int64_t i = (int64_t)blockIdx.x * DQ_THREADS + threadIdx.x; i < n_groups;
         i += (int64_t)gridDim.x * DQ_THREADS) {
        float v[32];
        rg_cu_decode32(type, src + (i / groups) * bytes, (int)(i % groups), tab, v);
        for (int j = 0; j < 32; j++) dst[32 * i + j] = v[j];
    }
}

// The types whose decoders read rg_cu_qtables.
bool needs_tables(uint32_t type) {
    switch (type) {
    case RG_TYPE_IQ2_XXS: case RG_TYPE_IQ2_XS: case RG_TYPE_IQ2_S: case RG_TYPE_IQ3_XXS: case RG_TYPE_IQ3_S:
    case RG_TYPE_IQ1_S: case RG_TYPE_IQ1_M: case RG_TYPE_IQ4_NL: case RG_TYPE_IQ4_XS: case RG_TYPE_MXFP4:
    case RG_TYPE_NVFP4:
        return true;
    default:
        return false;
    }
}

bool is_quantized_decoded(uint32_t type) {
    switch (type) {
#define RG_CU_IS_CASE(T) case T:
        RG_CU_QTYPES(RG_CU_IS_CASE)
#undef RG_CU_IS_CASE
        return true;
    default:
        return false;
    }
}

const char *node_op(const rg_node *n) { return n ? rg_op_name(n->op) : "dequant"; }
const char *node_name(const rg_node *n) { return n ? n->t.name : ""; }
int node_id(const rg_node *n) { return n ? n->id : -1; }

// The tables' places in the one allocation (256-byte aligned, as cudaMalloc's own).
struct qtable_part {
    const void *host;
    size_t bytes;
};
const qtable_part QTABLE_PARTS[] = {
    {rg_iq2xxs_grid, sizeof rg_iq2xxs_grid}, {rg_iq2xs_grid, sizeof rg_iq2xs_grid},
    {rg_iq2s_grid, sizeof rg_iq2s_grid},     {rg_iq1s_grid, sizeof rg_iq1s_grid},
    {rg_iq3xxs_grid, sizeof rg_iq3xxs_grid}, {rg_iq3s_grid, sizeof rg_iq3s_grid},
    {rg_kvalues_iq4nl, sizeof rg_kvalues_iq4nl}, {rg_kvalues_fp4, sizeof rg_kvalues_fp4},
};
constexpr int N_QTABLE_PARTS = (int)(sizeof QTABLE_PARTS / sizeof QTABLE_PARTS[0]);

size_t qtable_offset(int part) {
    size_t off = 0;
    for (int i = 0; i < part; i++) off += (QTABLE_PARTS[i].bytes + 255) & ~(size_t)255;
    return off;
}

}  // namespace

rg_status rg_cu_qtables_get(rg_cuda_ctx *ctx, const rg_node *n, rg_cu_qtables *out, rg_error *err) {
    if (!ctx->qtables) {
        if (ctx->capturing)
            return rg_fail(err, RG_ERR_ARG,
                           "cuda %s '%s' (node %d): the decoders' tables were never uploaded and a CUDA graph "
                           "capture may not allocate (the range's first run, uncaptured, uploads them)",
                           node_op(n), node_name(n), node_id(n));
        const size_t bytes = qtable_offset(N_QTABLE_PARTS);
        void *p = NULL;
        CU_TRY(cudaMalloc(&p, bytes));
        ctx->qtables = p, ctx->qtables_bytes = bytes;
        // The host tables are static: an async copy may read them whenever it runs.
        for (int i = 0; i < N_QTABLE_PARTS; i++)
            CU_TRY(cudaMemcpyAsync((char *)p + qtable_offset(i), QTABLE_PARTS[i].host, QTABLE_PARTS[i].bytes,
                                   cudaMemcpyHostToDevice, ctx->stream));
    }
    char *base = (char *)ctx->qtables;
    out->iq2xxs_grid = (const uint64_t *)(base + qtable_offset(0));
    out->iq2xs_grid = (const uint64_t *)(base + qtable_offset(1));
    out->iq2s_grid = (const uint64_t *)(base + qtable_offset(2));
    out->iq1s_grid = (const uint64_t *)(base + qtable_offset(3));
    out->iq3xxs_grid = (const uint32_t *)(base + qtable_offset(4));
    out->iq3s_grid = (const uint32_t *)(base + qtable_offset(5));
    out->kvalues_iq4nl = (const int8_t *)(base + qtable_offset(6));
    out->kvalues_fp4 = (const int8_t *)(base + qtable_offset(7));
    return RG_OK;
}

bool rg_cu_dequant_supported(uint32_t type) {
    return type == RG_TYPE_F32 || type == RG_TYPE_F16 || type == RG_TYPE_BF16 || is_quantized_decoded(type);
}

rg_status rg_cu_dequant_rows(rg_cuda_ctx *ctx, const rg_node *n, uint32_t type, const void *src, int64_t row_bytes,
                             int64_t rows, int64_t k0, int64_t K, uint32_t dst_type, void *dst, int64_t ld,
                             rg_error *err) {
    const rg_type_traits *tt = rg_type_get(type);
    if (!rg_cu_dequant_supported(type))
        return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda %s '%s' (node %d): no device decoder for type %s (id %u)",
                       node_op(n), node_name(n), node_id(n), tt->name, type);
    if (dst_type != RG_TYPE_F32 && dst_type != RG_TYPE_BF16 && dst_type != RG_TYPE_F16)
        return rg_fail(err, RG_ERR_ARG, "cuda %s '%s' (node %d): decoding %s into %s: the output is f32, bf16 or f16",
                       node_op(n), node_name(n), node_id(n), tt->name, rg_type_get(dst_type)->name);
    const int64_t bs = tt->block_size;
    const size_t esz = rg_type_get(dst_type)->type_size;
    if (rows < 0 || k0 < 0 || K < 0 || ld < K || k0 % bs || K % bs || row_bytes < 0)
        return rg_fail(err, RG_ERR_ARG,
                       "cuda %s '%s' (node %d): decoding %s rows %lld, k0 %lld, K %lld, ld %lld, row_bytes %lld: "
                       "k0 and K must be multiples of the block size %lld and ld at least K",
                       node_op(n), node_name(n), node_id(n), tt->name, (long long)rows, (long long)k0, (long long)K,
                       (long long)ld, (long long)row_bytes, (long long)bs);
    if (rows == 0 || K == 0) return RG_OK;
    const bool float_src = !is_quantized_decoded(type);
    if (!src || !dst || (uintptr_t)dst % esz ||
        (float_src && ((uintptr_t)src % tt->type_size || row_bytes % (int64_t)tt->type_size)))
        return rg_fail(err, RG_ERR_ARG, "cuda %s '%s' (node %d): decoding %s into %s: a null or misaligned pointer or row",
                       node_op(n), node_name(n), node_id(n), tt->name, rg_type_get(dst_type)->name);
    const unsigned grid_y = (unsigned)(rows < MAX_GRID_Y ? rows : MAX_GRID_Y);
    const uint8_t *s = (const uint8_t *)src;
    if (float_src) {
        const dim3 grid((unsigned)((K + WIDEN_THREADS - 1) / WIDEN_THREADS), grid_y);
        if (type == RG_TYPE_F32)
            RG_LAUNCH(widen_rows_kernel<RG_TYPE_F32>, grid, WIDEN_THREADS, 0, ctx->stream, s, row_bytes, rows, k0, K,
                      dst_type, dst, ld);
        else if (type == RG_TYPE_F16)
            RG_LAUNCH(widen_rows_kernel<RG_TYPE_F16>, grid, WIDEN_THREADS, 0, ctx->stream, s, row_bytes, rows, k0, K,
                      dst_type, dst, ld);
        else
            RG_LAUNCH(widen_rows_kernel<RG_TYPE_BF16>, grid, WIDEN_THREADS, 0, ctx->stream, s, row_bytes, rows, k0, K,
                      dst_type, dst, ld);
        CU_LAUNCHED();
        return RG_OK;
    }
    rg_cu_qtables tab = {};
    if (needs_tables(type)) RG_TRY(rg_cu_qtables_get(ctx, n, &tab, err));
    const int64_t n_groups = K / 32;
    const dim3 grid((unsigned)((n_groups + DQ_THREADS - 1) / DQ_THREADS), grid_y);
    switch (type) {
#define RG_CU_LAUNCH_CASE(T)                                                                                   \
    case T:                                                                                                    \
        RG_LAUNCH(dequant_rows_kernel<T>, grid, DQ_THREADS, 0, ctx->stream, s, row_bytes, rows, k0 / 32, n_groups, \
                  dst_type, dst, ld, tab);                                                                     \
        break;
        RG_CU_QTYPES(RG_CU_LAUNCH_CASE)
#undef RG_CU_LAUNCH_CASE
    default:
        break;  // unreachable: checked above
    }
    CU_LAUNCHED();
    return RG_OK;
}

// ---------------------------------------------------------------------------
// cuda.h's entry points

extern "C" bool rg_cuda_dequant_supported(uint32_t type) { return rg_cu_dequant_supported(type); }

extern "C" rg_status rg_cuda_dequant_rows(rg_cuda_ctx *ctx, const struct rg_node *n, uint32_t type, const void *src,
                                          int64_t row_bytes, int64_t rows, int64_t k0, int64_t K, uint32_t dst_type,
                                          void *dst, int64_t ld, rg_error *err) {
    CU_TRY(cudaSetDevice(ctx->device));
    return rg_cu_dequant_rows(ctx, n, type, src, row_bytes, rows, k0, K, dst_type, dst, ld, err);
}

extern "C" rg_status rg_cuda_dequant_decode32(rg_cuda_ctx *ctx, uint32_t type, const void *src, int64_t n_blocks,
                                              float *dst, rg_error *err) {
    const rg_node *n = NULL;
    const rg_type_traits *tt = rg_type_get(type);
    if (!is_quantized_decoded(type))
        return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda decode32: no 32-element device decoder for type %s (id %u)",
                       tt->name, type);
    if (n_blocks <= 0) return RG_OK;
    CU_TRY(cudaSetDevice(ctx->device));
    rg_cu_qtables tab = {};
    if (needs_tables(type)) RG_TRY(rg_cu_qtables_get(ctx, n, &tab, err));
    const int groups = (int)(tt->block_size / 32);
    const int64_t n_groups = n_blocks * groups;
    const int64_t want = (n_groups + DQ_THREADS - 1) / DQ_THREADS;
    const unsigned blocks = (unsigned)(want < 65535 ? want : 65535);
    RG_LAUNCH(decode32_kernel, blocks, DQ_THREADS, 0, ctx->stream, type, (const uint8_t *)src, n_groups, groups,
              (int)tt->type_size, dst, tab);
    CU_LAUNCHED();
    return RG_OK;
}
