// ops_reduce_gather.cu - the CUDA cells of the reductions and row gathers (cuda_common.cuh;
// their helpers are ops_elementwise.cu's, in ops_elementwise.cuh). Each kernel performs the
// same IEEE operations in the same order as its CPU kernel (src/cpu/ops_elementwise.c's
// repeat_back, ops_reduce.c, ops_copy.c's get_rows), so every result is bit-identical to
// the CPU (tests/test_cuda_elementwise.c compares bits).
//
//   REPEAT_BACK  f32, a any strides: each output the sum of its tiles in double,
//                tiles in increasing linear index of a, rounded once.
//   SUM, MEAN    f32, any strides, as ops_reduce.c: chunks of 4096 elements in
//   SUM_ROWS     linear order (SUM_ROWS: one chunk per row), element k of a chunk
//                into the double accumulator k % 8, the 8 combined in its fixed
//                tree, the chunk sums added in chunk order (MEAN: / n in double).
//   GET_ROWS     table f32, f16, bf16 [n, rows, b2, b3] any strides, ids I32
//                [k, e2, e3] -> f32 rows. An id outside the table gives a row of
//                NaN (the CPU refuses the node; the device cannot say so without
//                a synchronization). A quantized table of a type the device decodes
//                (rg_cu_dequant_supported: a token embedding), contiguous: each
//                thread decodes 32 elements of a row with rg_cu_decode32, the bits
//                of the CPU's dequantization.
//   GET_ROWS_BACK f32 dy [n, k...] any strides, ids I32 -> [n, rows]: zeros, then
//                per table row the sum of its dy rows in f32 in increasing token
//                order, by the block of the row's first token (no atomics; each
//                block scans the ids before its token: O(k^2) id reads). Ids
//                outside the table are skipped (the CPU refuses them).
//
// Supports decide from op, types, shapes and strides only: every stride and
// view offset a multiple of the element size (so that every access is aligned),
// no empty tensor, a contiguous output.
//
// FMA rule (nvcc builds with --fmad=false, scripts/check-fma.sh): no fused multiply-add; the
// CPU's elementwise kernels make none, and these rows are the CPU's bits.
#include "cuda/ops_elementwise.cuh"
#include "cuda/dequant.cuh"

namespace {

constexpr int64_t SUM_CHUNK = 4096;         // ops_reduce.c's RD_CHUNK
constexpr int GRB_COLS = 8;                 // GET_ROWS_BACK: columns per thread and pass

// ===========================================================================
// Device helpers
// ===========================================================================

// The ops_reduce.c tree over the 8 accumulators held by lanes 8j .. 8j + 7 of a
// warp: ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)), in lane 8j. Every
// lane of the warp must call it.
__device__ inline double tree8(double v) {
    v = __dadd_rn(v, __shfl_xor_sync(0xFFFFFFFFu, v, 1));
    v = __dadd_rn(v, __shfl_xor_sync(0xFFFFFFFFu, v, 2));
    return __dadd_rn(v, __shfl_xor_sync(0xFFFFFFFFu, v, 4));
}

// ===========================================================================
// Kernels
// ===========================================================================

// repeat_back: output j [L] = sum over tiles t (t3 outermost, t0 innermost) of
// a[j + t * L] in double, rounded once; a's strides in elements.
struct rb_geom {
    int64_t L[4], f[4], as[4];
};
RG_KERNEL_NO_POINTERS(rb_geom)

__global__ void repeat_back_kernel(const float *a, float *y, rb_geom g, int64_t n) {
    GRID_STRIDE(k, n) {
        int64_t j[4];
        unravel(k, g.L, j);
        double acc = 0.0;
        for (int64_t t3 = 0; t3 < g.f[3]; t3++)
            for (int64_t t2 = 0; t2 < g.f[2]; t2++)
                for (int64_t t1 = 0; t1 < g.f[1]; t1++) {
                    const float *row = a + j[0] * g.as[0] + (j[1] + t1 * g.L[1]) * g.as[1] +
                                       (j[2] + t2 * g.L[2]) * g.as[2] + (j[3] + t3 * g.L[3]) * g.as[3];
                    for (int64_t t0 = 0; t0 < g.f[0]; t0++) acc = __dadd_rn(acc, (double)row[t0 * g.L[0] * g.as[0]]);
                }
        y[k] = (float)acc;
    }
}

// A source cut into segments of seg elements in linear order (the last one
// shorter): SUM's chunks or SUM_ROWS's rows.
struct seg_geom {
    int64_t ne[4], nb[4];  // the source's shape and strides (bytes)
    int64_t nel, seg, nseg;
};
RG_KERNEL_NO_POINTERS(seg_geom)

// segment_sum (f32 source): 8 threads per segment; thread `lane` sums elements lane, lane + 8,
// ... of the segment in double, in order; the segment's sum is tree8 of the 8.
// It goes to part[s] (double) when part is given, else to y[s] (rounded to f32).
// The loop bound depends on the block only, so every lane of a warp reaches tree8.
__global__ void segment_sum_kernel(const char *a, seg_geom g, double *part, float *y) {
    const int64_t total = g.nseg * 8;
    for (int64_t base = (int64_t)blockIdx.x * blockDim.x; base < total; base += (int64_t)gridDim.x * blockDim.x) {
        const int64_t gid = base + threadIdx.x, s = gid >> 3, lane = gid & 7;
        double acc = 0.0;
        if (gid < total) {
            const int64_t end = (s + 1) * g.seg < g.nel ? (s + 1) * g.seg : g.nel;
            int64_t k = s * g.seg + lane, i[4] = {0, 0, 0, 0};
            if (k < end) unravel(k, g.ne, i);
            for (; k < end; k += 8) {
                acc = __dadd_rn(acc, (double)*(const float *)(a + dot4(i, g.nb)));
                i[0] += 8;  // the coordinates of k + 8, carried without dividing on most steps
                if (i[0] >= g.ne[0]) {
                    int64_t c = i[0] / g.ne[0];
                    i[0] -= c * g.ne[0], i[1] += c;
                    if (i[1] >= g.ne[1]) {
                        c = i[1] / g.ne[1], i[1] -= c * g.ne[1], i[2] += c;
                        if (i[2] >= g.ne[2]) c = i[2] / g.ne[2], i[2] -= c * g.ne[2], i[3] += c;
                    }
                }
            }
        }
        acc = tree8(acc);
        if (gid < total && lane == 0) {
            if (part) part[s] = acc;
            else y[s] = (float)acc;
        }
    }
}

// sum_final (one block): y = sum of part[0 .. nseg) added in order from 0 in
// double (divided by nel for MEAN), rounded once.
__global__ void sum_final_kernel(const double *part, int64_t nseg, float *y, double nel, int mean) {
    RG_SHARED(double, sh, THREADS);
    double total = 0.0;
    for (int64_t c0 = 0; c0 < nseg; c0 += THREADS) {
        const int64_t m = nseg - c0 < THREADS ? nseg - c0 : THREADS;
        __syncthreads();
        if (threadIdx.x < m) sh[threadIdx.x] = part[c0 + threadIdx.x];
        __syncthreads();
        if (threadIdx.x == 0)
            for (int64_t j = 0; j < m; j++) total = __dadd_rn(total, sh[j]);
    }
    if (threadIdx.x == 0) y[0] = mean ? (float)__ddiv_rn(total, nel) : (float)total;
}

// GET_ROWS: out [n, k, e2, e3] f32, element (i0, t, i2, i3) = a[i0, ids[t, i2, i3], i2 % b2, i3 % b3].
struct gr_geom {
    int64_t ne[4];           // output shape
    int64_t ane[4], anb[4];  // table shape and strides (bytes)
    int64_t inb[3];          // ids strides (bytes)
};
RG_KERNEL_NO_POINTERS(gr_geom)

__global__ void get_rows_kernel(const char *a, uint32_t atype, const char *ids, float *y, gr_geom g, int64_t n) {
    GRID_STRIDE(k, n) {
        int64_t i[4];
        unravel(k, g.ne, i);
        const int64_t id = *(const int32_t *)(ids + i[1] * g.inb[0] + i[2] * g.inb[1] + i[3] * g.inb[2]);
        if (id < 0 || id >= g.ane[1]) {
            y[k] = __uint_as_float(0x7FC00000u);  // an id outside the table: NaN, never a wild read
            continue;
        }
        const int64_t off =
            i[0] * g.anb[0] + id * g.anb[1] + (i[2] % g.ane[2]) * g.anb[2] + (i[3] % g.ane[3]) * g.anb[3];
        y[k] = load_f32(a + off, atype);
    }
}

// GET_ROWS of a quantized table: item k is the group of 32 elements k % (ne0 / 32) of output
// row k / (ne0 / 32); the table's block holding it decoded by rg_cu_decode32 (block_size and
// block_bytes: the type's). An id outside the table gives the group as NaN.
__global__ void get_rows_q_kernel(const char *a, uint32_t atype, int64_t block_size, int64_t block_bytes,
                                  const char *ids, float *y, gr_geom g, rg_cu_qtables tab, int64_t n) {
    const int64_t groups = g.ne[0] / 32;
    GRID_STRIDE(k, n) {
        const int64_t gi = k % groups, r = k / groups;
        const int64_t i1 = r % g.ne[1], i2 = (r / g.ne[1]) % g.ne[2], i3 = r / (g.ne[1] * g.ne[2]);
        const int64_t id = *(const int32_t *)(ids + i1 * g.inb[0] + i2 * g.inb[1] + i3 * g.inb[2]);
        float *dst = y + r * g.ne[0] + gi * 32;
        if (id < 0 || id >= g.ane[1]) {
            for (int j = 0; j < 32; j++) dst[j] = __uint_as_float(0x7FC00000u);
            continue;
        }
        const int64_t e0 = gi * 32;
        const uint8_t *block = (const uint8_t *)(a + id * g.anb[1] + (i2 % g.ane[2]) * g.anb[2] +
                                                 (i3 % g.ane[3]) * g.anb[3] + (e0 / block_size) * block_bytes);
        float v[32];
        rg_cu_decode32(atype, block, (int)((e0 % block_size) / 32), tab, v);
        for (int j = 0; j < 32; j++) dst[j] = v[j];
    }
}

// GET_ROWS_BACK: dy [ne0, k...] (row t of dy for id t, in linear order), ids [k0, k1, k2].
struct grb_geom {
    int64_t dne[4], dnb[4];  // dy's shape and strides (bytes)
    int64_t ine[3], inb[3];  // ids' shape and strides (bytes)
    int64_t k, rows;         // ids, table rows
};
RG_KERNEL_NO_POINTERS(grb_geom)

__device__ inline int64_t grb_id(const char *ids, const grb_geom &g, int64_t t) {
    const int64_t t0 = t % g.ine[0], r = t / g.ine[0];
    return *(const int32_t *)(ids + t0 * g.inb[0] + (r % g.ine[1]) * g.inb[1] + (r / g.ine[1]) * g.inb[2]);
}

__device__ inline const char *grb_row(const char *dy, const grb_geom &g, int64_t t) {
    const int64_t r = t / g.dne[1];
    return dy + (t % g.dne[1]) * g.dnb[1] + (r % g.dne[2]) * g.dnb[2] + (r / g.dne[2]) * g.dnb[3];
}

// One block per token t (y zeroed before). The block of the first token with
// id v writes y[:, v] = dy[:, t1] + dy[:, t2] + ... over the tokens with id v in
// increasing order, from 0 in f32: the CPU's sum, in its order. Later tokens
// with the same id find an earlier one and do nothing. Every branch below is
// the same for the whole block (v and `earlier` are).
__global__ void get_rows_back_kernel(const char *dy, const char *ids, float *y, grb_geom g) {
    RG_SHARED(int32_t, tile, THREADS);
    const int64_t ne0 = g.dne[0];
    for (int64_t t = blockIdx.x; t < g.k; t += gridDim.x) {
        const int64_t v = grb_id(ids, g, t);
        if (v < 0 || v >= g.rows) continue;
        int found = 0;
        for (int64_t u = threadIdx.x; u < t; u += blockDim.x) found |= grb_id(ids, g, u) == v;
        if (__syncthreads_or(found)) continue;
        float *out = y + v * ne0;
        for (int64_t c0 = 0; c0 < ne0; c0 += (int64_t)GRB_COLS * blockDim.x) {
            float acc[GRB_COLS];
            for (int r = 0; r < GRB_COLS; r++) acc[r] = 0.0f;
            for (int64_t u0 = t; u0 < g.k; u0 += blockDim.x) {
                __syncthreads();  // the previous tile is read
                if (u0 + threadIdx.x < g.k) tile[threadIdx.x] = (int32_t)grb_id(ids, g, u0 + threadIdx.x);
                __syncthreads();
                const int64_t m = g.k - u0 < blockDim.x ? g.k - u0 : blockDim.x;
                for (int64_t j = 0; j < m; j++) {
                    if (tile[j] != v) continue;
                    const char *row = grb_row(dy, g, u0 + j);
                    for (int r = 0; r < GRB_COLS; r++) {
                        const int64_t i = c0 + r * blockDim.x + threadIdx.x;
                        if (i < ne0) acc[r] = __fadd_rn(acc[r], *(const float *)(row + i * g.dnb[0]));
                    }
                }
            }
            for (int r = 0; r < GRB_COLS; r++) {
                const int64_t i = c0 + r * blockDim.x + threadIdx.x;
                if (i < ne0) out[i] = acc[r];
            }
        }
    }
}

// ===========================================================================
// Launchers
// ===========================================================================

// ---------------------------------------------------------------------------
// REPEAT_BACK

rg_status run_repeat_back(rg_cuda_ctx *ctx, const rg_node *n, rg_error *err) {
    const rg_tensor *a = &n->src[0]->t, *o = &n->t;
    rb_geom g;
    for (int i = 0; i < 4; i++) g.L[i] = o->ne[i], g.f[i] = a->ne[i] / o->ne[i];
    strides_of(a, g.as, 4);
    const int64_t count = rg_tensor_nelements(o);
    RG_LAUNCH(repeat_back_kernel, blocks_for(count), THREADS, 0, ctx->stream, (const float *)a->data, (float *)o->data,
              g, count);
    CU_LAUNCHED();
    return RG_OK;
}

bool sup_repeat_back(const rg_node *n) {
    return n && out_ok(n, RG_TYPE_F32) && src_f32(n->src[0]) && tiles(&n->src[0]->t, &n->t);
}

// ---------------------------------------------------------------------------
// SUM, MEAN, SUM_ROWS

seg_geom seg_of(const rg_tensor *a, int64_t seg) {
    seg_geom g;
    for (int i = 0; i < 4; i++) g.ne[i] = a->ne[i], g.nb[i] = (int64_t)a->nb[i];
    g.nel = rg_tensor_nelements(a);
    g.seg = seg;
    g.nseg = (g.nel + seg - 1) / seg;
    return g;
}

// The chunk sums, in double, in the scratch.
size_t sum_work(const rg_node *n, int n_threads) {
    (void)n_threads;
    return (size_t)seg_of(&n->src[0]->t, SUM_CHUNK).nseg * sizeof(double);
}

rg_status run_sum_any(rg_exec_ctx *c, rg_cuda_ctx *ctx, const rg_node *n, bool mean, rg_error *err) {
    const rg_tensor *a = &n->src[0]->t;
    const seg_geom g = seg_of(a, SUM_CHUNK);
    if (!c->scratch || c->scratch_size < sum_work(n, 1))
        return rg_fail(err, RG_ERR_ARG, "cuda %s '%s': scratch of %zu bytes, the chunk sums need %zu",
                       rg_op_name(n->op), n->t.name, c->scratch_size, sum_work(n, 1));
    double *part = (double *)c->scratch;
    RG_LAUNCH(segment_sum_kernel, blocks_for(g.nseg * 8), THREADS, 0, ctx->stream, (const char *)a->data, g, part,
              (float *)NULL);
    CU_LAUNCHED();
    RG_LAUNCH(sum_final_kernel, 1, THREADS, 0, ctx->stream, (const double *)part, g.nseg, (float *)n->t.data,
              (double)g.nel, (int)mean);
    CU_LAUNCHED();
    return RG_OK;
}

rg_status run_sum_rows(rg_cuda_ctx *ctx, const rg_node *n, rg_error *err) {
    const rg_tensor *a = &n->src[0]->t;
    const seg_geom g = seg_of(a, a->ne[0]);
    RG_LAUNCH(segment_sum_kernel, blocks_for(g.nseg * 8), THREADS, 0, ctx->stream, (const char *)a->data, g,
              (double *)NULL, (float *)n->t.data);
    CU_LAUNCHED();
    return RG_OK;
}

bool sup_reduce_src(const rg_node *n) { return n && src_f32(n->src[0]) && out_ok(n, RG_TYPE_F32); }

bool sup_sum(const rg_node *n) { return sup_reduce_src(n) && rg_tensor_nelements(&n->t) == 1; }

bool sup_sum_rows(const rg_node *n) {
    if (!sup_reduce_src(n)) return false;
    const rg_tensor *a = &n->src[0]->t;
    return n->t.ne[0] == 1 && n->t.ne[1] == a->ne[1] && n->t.ne[2] == a->ne[2] && n->t.ne[3] == a->ne[3];
}

// ---------------------------------------------------------------------------
// GET_ROWS, GET_ROWS_BACK

rg_status run_get_rows(rg_cuda_ctx *ctx, const rg_node *n, rg_error *err) {
    const rg_tensor *a = &n->src[0]->t, *ids = &n->src[1]->t;
    gr_geom g;
    for (int i = 0; i < 4; i++) g.ne[i] = n->t.ne[i], g.ane[i] = a->ne[i], g.anb[i] = (int64_t)a->nb[i];
    for (int i = 0; i < 3; i++) g.inb[i] = (int64_t)ids->nb[i];
    const int64_t count = rg_tensor_nelements(&n->t);
    if (!is_float_type(a->type)) {  // quantized: 32 elements a thread
        const rg_type_traits *tt = rg_type_get(a->type);
        rg_cu_qtables tab;
        RG_TRY(rg_cu_qtables_get(ctx, n, &tab, err));
        RG_LAUNCH(get_rows_q_kernel, blocks_for(count / 32), THREADS, 0, ctx->stream, (const char *)a->data, a->type,
                  tt->block_size, (int64_t)tt->type_size, (const char *)ids->data, (float *)n->t.data, g, tab,
                  count / 32);
        CU_LAUNCHED();
        return RG_OK;
    }
    RG_LAUNCH(get_rows_kernel, blocks_for(count), THREADS, 0, ctx->stream, (const char *)a->data, a->type,
              (const char *)ids->data, (float *)n->t.data, g, count);
    CU_LAUNCHED();
    return RG_OK;
}

// A quantized table the device decodes: packed blocks (contiguous), rows a whole number of
// blocks, blocks a whole number of 32-element groups.
bool sup_quant_table(const rg_tensor *a) {
    const rg_type_traits *tt = rg_type_get(a->type);
    return tt->quantized && rg_cu_dequant_supported(a->type) && tt->block_size % 32 == 0 &&
           a->ne[0] % tt->block_size == 0 && rg_tensor_is_contiguous(a) && rg_tensor_nelements(a) > 0;
}

bool sup_ids(const rg_node *ids) {
    return ids && ids->t.type == RG_TYPE_I32 && aligned(&ids->t, 4) && ids->t.ne[3] == 1;
}

bool sup_get_rows(const rg_node *n) {
    if (!n || !n->src[0] || !out_ok(n, RG_TYPE_F32) || !sup_ids(n->src[1])) return false;
    const rg_tensor *a = &n->src[0]->t, *ids = &n->src[1]->t, *o = &n->t;
    const bool table_ok = is_float_type(a->type) ? aligned(a, elem_size(a->type)) : sup_quant_table(a);
    return table_ok && o->ne[0] == a->ne[0] && o->ne[1] == ids->ne[0] && o->ne[2] == ids->ne[1] &&
           o->ne[3] == ids->ne[2] && o->ne[2] % a->ne[2] == 0 && o->ne[3] % a->ne[3] == 0;
}

rg_status run_get_rows_back(rg_cuda_ctx *ctx, const rg_node *n, rg_error *err) {
    const rg_tensor *dy = &n->src[0]->t, *ids = &n->src[1]->t;
    grb_geom g;
    for (int i = 0; i < 4; i++) g.dne[i] = dy->ne[i], g.dnb[i] = (int64_t)dy->nb[i];
    for (int i = 0; i < 3; i++) g.ine[i] = ids->ne[i], g.inb[i] = (int64_t)ids->nb[i];
    g.k = rg_tensor_nrows(dy);
    g.rows = n->t.ne[1];
    CU_TRY(cudaMemsetAsync(n->t.data, 0, (size_t)rg_tensor_nelements(&n->t) * 4, ctx->stream));
    const unsigned blocks = (unsigned)(g.k < MAX_BLOCKS ? g.k : MAX_BLOCKS);
    RG_LAUNCH(get_rows_back_kernel, blocks, THREADS, 0, ctx->stream, (const char *)dy->data, (const char *)ids->data,
              (float *)n->t.data, g);
    CU_LAUNCHED();
    return RG_OK;
}

bool sup_get_rows_back(const rg_node *n) {
    if (!n || !out_ok(n, RG_TYPE_F32) || !src_f32(n->src[0]) || !sup_ids(n->src[1])) return false;
    const rg_tensor *dy = &n->src[0]->t, *o = &n->t;
    return o->ne[0] == dy->ne[0] && o->ne[1] == n->ip[0] && o->ne[2] == 1 && o->ne[3] == 1 &&
           rg_tensor_nrows(dy) == rg_tensor_nelements(&n->src[1]->t);
}

// ---------------------------------------------------------------------------
// The cells

#define CELL(name_, call_)                                                    \
    rg_status cell_##name_(rg_exec_ctx *c, rg_node *n, rg_error *err) {       \
        rg_cuda_ctx *ctx = rg_cu_ctx(c);                                      \
        (void)c;                                                              \
        CU_TRY(cudaSetDevice(ctx->device));                                   \
        return call_;                                                         \
    }
CELL(repeat_back, run_repeat_back(ctx, n, err))
CELL(sum, run_sum_any(c, ctx, n, false, err))
CELL(mean, run_sum_any(c, ctx, n, true, err))
CELL(sum_rows, run_sum_rows(ctx, n, err))
CELL(get_rows, run_get_rows(ctx, n, err))
CELL(get_rows_back, run_get_rows_back(ctx, n, err))
#undef CELL

}  // namespace

// This file's cells of the CUDA column (op_table.cu lists them).
namespace RG_CU_CELLS {
extern const rg_op_col repeat_back = rg_cu_col(cell_repeat_back, sup_repeat_back, NULL, "f32");
extern const rg_op_col sum = rg_cu_col(cell_sum, sup_sum, sum_work, "f32");
extern const rg_op_col mean = rg_cu_col(cell_mean, sup_sum, sum_work, "f32");
extern const rg_op_col sum_rows = rg_cu_col(cell_sum_rows, sup_sum_rows, NULL, "f32");
extern const rg_op_col get_rows =
    rg_cu_col(cell_get_rows, sup_get_rows, NULL, "f32, f16, bf16, quantized (device decoders)");
extern const rg_op_col get_rows_back = rg_cu_col(cell_get_rows_back, sup_get_rows_back, NULL, "f32");
}  // namespace RG_CU_CELLS
