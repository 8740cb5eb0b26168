// ops_elementwise.cu - the CUDA cells of the elementwise and copy ops (cuda_common.cuh;
// the reductions and row gathers: ops_reduce_gather.cu; their shared helpers:
// ops_elementwise.cuh). Each kernel performs the same IEEE operations in the same
// order as its CPU kernel (src/cpu/ops_elementwise.c, ops_copy.c, ops_copy_into.c),
// float arithmetic written with the _rn intrinsics so that nvcc never contracts it
// into a fused multiply-add: every result below is bit-identical to the CPU (tests/test_cuda_elementwise.c
// compares bits). The one difference is not one of value: a NaN made by float
// arithmetic on a GPU is the canonical NaN, whatever the inputs' payloads.
//
//   FILL         f32, f16, bf16 output: every element the value's bits as the CPU
//                writes them (rg_fp32_to_fp16 / rg_fp32_to_bf16 on the host).
//   SUB, MUL     f32: a [ne] any strides, b any strides tiled over a (b.ne[i]
//                divides ne[i]); one IEEE op per element.
//   SCALE        f32, a any strides: a * fp[0].
//   SILU         f32, any strides: a * sigmoid(a), sigmoid = num / (1 + e) with
//   SILU_BACK    e = exp(-|a|) from exp_poly.h's polynomial, step by step;
//   SWIGLU       dy * s (1 + a c) and (g * sigmoid(g)) * u as on the CPU.
//   REPEAT       f32, a any strides: a tiled into like's shape (bits copied).
//   CONT         any unquantized type of 1, 2, 4 or 8 bytes, any strides, or a
//                quantized type with packed blocks (whole rows of blocks).
//   CPY          f32, f16, bf16 to f32, f16, bf16, any strides: bits copied for
//                the same type, else through f32 with half.c's RNE conversions
//                (NaN, Inf, subnormals included).
//   VIEW_BACK    f32: zeros with dy written into the window (ip strides and
//                offset); windows that overlap themselves are left to the CPU.
//   CPY_INTO     f32, f16, bf16 on both sides, any strides: a into the window of
//                dst's owner the node is; a window that overlaps itself is left
//                to the CPU. Bits copied where the CPU copies them (same type,
//                f32 or both sides packed), else through f32 as the CPU does.
//
// Supports decide from op, types, shapes and strides only: every stride and
// view offset a multiple of the element size (so that every access is aligned),
// no empty tensor, a contiguous output (CPY_INTO: the window).
//
// FMA rule (nvcc builds with --fmad=false, scripts/check-fma.sh): no fused multiply-add; the
// CPU's elementwise kernels make none, and these rows are the CPU's bits.
#include "cuda/ops_elementwise.cuh"

namespace {

// ===========================================================================
// Device helpers
// ===========================================================================

// exp_poly.h's rg_exp_neg_abs: e = exp(-|a|), the same rounded operations in the same order.
__device__ inline float exp_neg_abs(float a) {
    const float ax = fabsf(a);
    if (!(ax <= 87.3f)) return ax > 87.3f ? 0.0f : ax;  // too small to matter, or NaN
    const float x = -ax;
    const float fn = __fsub_rn(__fadd_rn(__fmul_rn(x, 1.44269504088896341f), 12582912.0f), 12582912.0f);
    const float r = __fsub_rn(__fsub_rn(x, __fmul_rn(fn, 0.693359375f)), __fmul_rn(fn, -2.12194440e-4f));
    float p = 1.9875691500e-4f;
    p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
    p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
    p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
    p = __fadd_rn(__fmul_rn(p, __fmul_rn(r, r)), r);
    p = __fadd_rn(p, 1.0f);
    return __fmul_rn(p, __uint_as_float((uint32_t)((int32_t)fn + 127) << 23));
}

__device__ inline float sigmoid1(float a) {
    const float e = exp_neg_abs(a);
    return __fdiv_rn(a < 0.0f ? e : 1.0f, __fadd_rn(1.0f, e));
}

// The elementwise ops: y = apply(x, z, s) with x from a, z from b (binary ops), s = fp[0].
struct op_sub {
    static constexpr bool binary = true;
    __device__ static float apply(float x, float z, float) { return __fsub_rn(x, z); }
};
struct op_mul {
    static constexpr bool binary = true;
    __device__ static float apply(float x, float z, float) { return __fmul_rn(x, z); }
};
struct op_scale {
    static constexpr bool binary = false;
    __device__ static float apply(float x, float, float s) { return __fmul_rn(x, s); }
};
struct op_silu {
    static constexpr bool binary = false;
    __device__ static float apply(float x, float, float) { return __fmul_rn(x, sigmoid1(x)); }
};
// dy * silu'(a), silu' = s (1 + a c) with c = sigmoid(-a) from the same e (see ops_elementwise.c).
struct op_silu_back {
    static constexpr bool binary = true;
    __device__ static float apply(float dy, float a, float) {
        const float e = exp_neg_abs(a), d = __fadd_rn(1.0f, e);
        const float s = __fdiv_rn(a < 0.0f ? e : 1.0f, d), c = __fdiv_rn(a < 0.0f ? 1.0f : e, d);
        return __fmul_rn(dy, __fmul_rn(s, __fadd_rn(1.0f, __fmul_rn(a, c))));
    }
};
struct op_swiglu {
    static constexpr bool binary = true;
    __device__ static float apply(float g, float u, float) { return __fmul_rn(__fmul_rn(g, sigmoid1(g)), u); }
};

// ===========================================================================
// Kernels
// ===========================================================================

// fill: y[k] = bits for k < n.
template <class T>
__global__ void fill_kernel(T *y, T bits, int64_t n) {
    GRID_STRIDE(k, n) y[k] = bits;
}

// The shape and strides (elements) of an elementwise op; the output is contiguous.
struct ew_geom {
    int64_t ne[4];   // output shape
    int64_t as[4];   // a's strides
    int64_t bne[4];  // b's shape (tiles into ne)
    int64_t bs[4];   // b's strides
    bool a_flat;     // a is contiguous with the output's shape: element k is a[k]
    bool b_flat;     // likewise b
    float s;         // fp[0]
};
RG_KERNEL_NO_POINTERS(ew_geom)

// ew: y[k] = Op(a[k], b[k tiled into b]). In place (y == a, a_flat) every thread
// reads its element before writing it.
template <class Op>
__global__ void ew_kernel(const float *a, const float *b, float *y, ew_geom g, int64_t n) {
    GRID_STRIDE(k, n) {
        int64_t i[4] = {0, 0, 0, 0};
        if (!g.a_flat || (Op::binary && !g.b_flat)) unravel(k, g.ne, i);
        const float x = a[g.a_flat ? k : dot4(i, g.as)];
        const float z = Op::binary ? b[g.b_flat ? k : tiled4(i, g.bne, g.bs)] : 0.0f;
        y[k] = Op::apply(x, z, g.s);
    }
}

// The walk of a copy: element k of shape ne (linear order) reads the source at
// (i % sne) . snb and writes the destination at i . dnb (bytes).
struct copy_geom {
    int64_t ne[4], sne[4], snb[4], dnb[4];
};
RG_KERNEL_NO_POINTERS(copy_geom)

// copy_bits: the element's bytes (T is the element size).
// dst_off (device memory, or NULL): bytes added to dst, read when the kernel runs (CPY_INTO's
// window offset, so that a captured decode step stays valid when the window moves).
template <class T>
__global__ void copy_bits_kernel(const char *src, char *dst, copy_geom g, int64_t n, const int64_t *dst_off) {
    if (dst_off) dst += *dst_off;
    GRID_STRIDE(k, n) {
        int64_t i[4];
        unravel(k, g.ne, i);
        *(T *)(dst + dot4(i, g.dnb)) = *(const T *)(src + tiled4(i, g.sne, g.snb));
    }
}

// acc_f32: CPY_INTO's accumulate mode, dst += src element by element, f32 both sides (one
// rounded add: ADD's bits, the CPU's add_rows). dst_off as copy_bits's.
__global__ void acc_f32_kernel(const char *src, char *dst, copy_geom g, int64_t n, const int64_t *dst_off) {
    if (dst_off) dst += *dst_off;
    GRID_STRIDE(k, n) {
        int64_t i[4];
        unravel(k, g.ne, i);
        float *y = (float *)(dst + dot4(i, g.dnb));
        *y = __fadd_rn(*y, *(const float *)(src + tiled4(i, g.sne, g.snb)));
    }
}

// copy_convert: the element's value through f32 (exact widening, RNE narrowing).
__global__ void copy_convert_kernel(const char *src, uint32_t stype, char *dst, uint32_t dtype, copy_geom g,
                                    int64_t n, const int64_t *dst_off) {
    if (dst_off) dst += *dst_off;
    GRID_STRIDE(k, n) {
        int64_t i[4];
        unravel(k, g.ne, i);
        store_f32(dst + dot4(i, g.dnb), dtype, load_f32(src + tiled4(i, g.sne, g.snb), stype));
    }
}

// ===========================================================================
// Launchers
// ===========================================================================

// ---------------------------------------------------------------------------
// FILL

rg_status run_fill(rg_cuda_ctx *ctx, const rg_node *n, rg_error *err) {
    const int64_t count = rg_tensor_nelements(&n->t);
    const float v = n->fp[0];
    if (n->t.type == RG_TYPE_F32) {
        uint32_t bits;
        memcpy(&bits, &v, 4);
        RG_LAUNCH(fill_kernel<uint32_t>, blocks_for(count), THREADS, 0, ctx->stream, (uint32_t *)n->t.data, bits,
                  count);
    } else {
        const uint16_t bits = n->t.type == RG_TYPE_F16 ? rg_fp32_to_fp16(v) : rg_fp32_to_bf16(v);
        RG_LAUNCH(fill_kernel<uint16_t>, blocks_for(count), THREADS, 0, ctx->stream, (uint16_t *)n->t.data, bits,
                  count);
    }
    CU_LAUNCHED();
    return RG_OK;
}

bool sup_fill(const rg_node *n) {
    return n && (out_ok(n, RG_TYPE_F32) || out_ok(n, RG_TYPE_F16) || out_ok(n, RG_TYPE_BF16));
}

// ---------------------------------------------------------------------------
// SUB, MUL, SCALE, SILU, SILU_BACK, SWIGLU

template <class Op>
rg_status run_ew(rg_cuda_ctx *ctx, const rg_node *n, rg_error *err) {
    const rg_tensor *a = &n->src[0]->t, *b = Op::binary ? &n->src[1]->t : a;
    ew_geom g;
    for (int i = 0; i < 4; i++) g.ne[i] = n->t.ne[i], g.bne[i] = b->ne[i];
    strides_of(a, g.as, 4);
    strides_of(b, g.bs, 4);
    g.a_flat = rg_tensor_is_contiguous(a);
    g.b_flat = rg_tensor_is_contiguous(b) && rg_tensor_same_shape(a, b);
    g.s = n->fp[0];
    const int64_t count = rg_tensor_nelements(&n->t);
    RG_LAUNCH(ew_kernel<Op>, blocks_for(count), THREADS, 0, ctx->stream, (const float *)a->data,
              (const float *)b->data, (float *)n->t.data, g, count);
    CU_LAUNCHED();
    return RG_OK;
}

// a has the output's shape; b (binary ops) tiles into it (same shape: SILU_BACK, SWIGLU).
template <bool Binary, bool SameShape>
bool sup_ew(const rg_node *n) {
    if (!n || !out_ok(n, RG_TYPE_F32) || !src_f32(n->src[0]) || !rg_tensor_same_shape(&n->src[0]->t, &n->t))
        return false;
    if (!Binary) return true;
    const rg_node *b = n->src[1];
    return src_f32(b) && (SameShape ? rg_tensor_same_shape(&b->t, &n->t) : tiles(&n->t, &b->t));
}

// ---------------------------------------------------------------------------
// CONT, CPY, REPEAT, VIEW_BACK, CPY_INTO: one walk (copy_geom), bits or values.

rg_status launch_copy(rg_cuda_ctx *ctx, const rg_node *n, const char *src, uint32_t stype, char *dst, uint32_t dtype,
                      size_t esz, bool bits, const copy_geom &g, rg_error *err, const int64_t *dst_off = NULL) {
    const int64_t count = g.ne[0] * g.ne[1] * g.ne[2] * g.ne[3];
    const unsigned grid = blocks_for(count);
    if (!bits) RG_LAUNCH(copy_convert_kernel, grid, THREADS, 0, ctx->stream, src, stype, dst, dtype, g, count, dst_off);
    else if (esz == 1) RG_LAUNCH(copy_bits_kernel<uint8_t>, grid, THREADS, 0, ctx->stream, src, dst, g, count, dst_off);
    else if (esz == 2) RG_LAUNCH(copy_bits_kernel<uint16_t>, grid, THREADS, 0, ctx->stream, src, dst, g, count, dst_off);
    else if (esz == 4) RG_LAUNCH(copy_bits_kernel<uint32_t>, grid, THREADS, 0, ctx->stream, src, dst, g, count, dst_off);
    else RG_LAUNCH(copy_bits_kernel<uint64_t>, grid, THREADS, 0, ctx->stream, src, dst, g, count, dst_off);
    CU_LAUNCHED();
    return RG_OK;
}

// a's elements in its linear order into the contiguous output (CONT, CPY; the
// shapes may differ when the counts agree, as on the CPU).
rg_status run_copy(rg_cuda_ctx *ctx, const rg_node *n, rg_error *err) {
    const rg_tensor *a = &n->src[0]->t, *o = &n->t;
    copy_geom g;
    const rg_type_traits *tt = rg_type_get(o->type);
    if (tt->block_size != 1) {
        // Quantized: rows of packed blocks, copied as words (or bytes).
        const int64_t row = (int64_t)rg_type_row_size(o->type, o->ne[0]);
        const bool words = row % 4 == 0 && a->view_offs % 4 == 0 && a->nb[1] % 4 == 0 && a->nb[2] % 4 == 0 &&
                           a->nb[3] % 4 == 0;
        const size_t w = words ? 4 : 1;
        int64_t ne[4] = {row / (int64_t)w, o->ne[1], o->ne[2], o->ne[3]};
        for (int i = 0; i < 4; i++) g.ne[i] = g.sne[i] = ne[i], g.snb[i] = i ? (int64_t)a->nb[i] : (int64_t)w;
        packed_strides(ne, w, g.dnb);
        return launch_copy(ctx, n, (const char *)a->data, a->type, (char *)o->data, o->type, w, true, g, err);
    }
    for (int i = 0; i < 4; i++) g.ne[i] = g.sne[i] = a->ne[i], g.snb[i] = (int64_t)a->nb[i];
    packed_strides(a->ne, tt->type_size, g.dnb);
    return launch_copy(ctx, n, (const char *)a->data, a->type, (char *)o->data, o->type, tt->type_size,
                       a->type == o->type, g, err);
}

bool sup_cont(const rg_node *n) {
    if (!n || !n->src[0] || n->src[0]->t.type != n->t.type || !rg_tensor_is_contiguous(&n->t)) return false;
    const rg_tensor *a = &n->src[0]->t;
    const int64_t count = rg_tensor_nelements(&n->t);
    const rg_type_traits *tt = rg_type_get(a->type);
    if (tt->block_size > 1) {  // whole rows of packed blocks, same shape
        if (!rg_tensor_same_shape(a, &n->t) || a->nb[0] != tt->type_size || !rg_type_row_size(a->type, a->ne[0]))
            return false;
        for (int i = 1; i < 4; i++)
            if (a->ne[i] <= 0) return false;
        return count > 0;
    }
    const size_t esz = elem_size(a->type);
    return (esz == 1 || esz == 2 || esz == 4 || esz == 8) && aligned(a, esz) && count > 0 &&
           rg_tensor_nelements(a) == count;
}

bool sup_cpy(const rg_node *n) {
    if (!n || !n->src[0] || !is_float_type(n->t.type) || !is_float_type(n->src[0]->t.type)) return false;
    const rg_tensor *a = &n->src[0]->t;
    return out_ok(n, n->t.type) && aligned(a, elem_size(a->type)) &&
           rg_tensor_nelements(a) == rg_tensor_nelements(&n->t);
}

rg_status run_repeat(rg_cuda_ctx *ctx, const rg_node *n, rg_error *err) {
    const rg_tensor *a = &n->src[0]->t, *o = &n->t;
    copy_geom g;
    for (int i = 0; i < 4; i++) g.ne[i] = o->ne[i], g.sne[i] = a->ne[i], g.snb[i] = (int64_t)a->nb[i];
    packed_strides(o->ne, 4, g.dnb);
    return launch_copy(ctx, n, (const char *)a->data, a->type, (char *)o->data, o->type, 4, true, g, err);
}

bool sup_repeat(const rg_node *n) {
    return n && out_ok(n, RG_TYPE_F32) && src_f32(n->src[0]) && tiles(&n->t, &n->src[0]->t);
}

// VIEW_BACK: zeros, then dy's elements at ip[4] + i . ip[0..3] (bytes).
rg_status run_view_back(rg_cuda_ctx *ctx, const rg_node *n, rg_error *err) {
    const rg_tensor *dy = &n->src[0]->t;
    CU_TRY(cudaMemsetAsync(n->t.data, 0, (size_t)rg_tensor_nelements(&n->t) * 4, ctx->stream));
    copy_geom g;
    for (int i = 0; i < 4; i++) g.ne[i] = g.sne[i] = dy->ne[i], g.snb[i] = (int64_t)dy->nb[i], g.dnb[i] = n->ip[i];
    return launch_copy(ctx, n, (const char *)dy->data, RG_TYPE_F32, (char *)n->t.data + n->ip[4], RG_TYPE_F32, 4, true,
                       g, err);
}

bool sup_view_back(const rg_node *n) {
    if (!n || !n->src[1] || !out_ok(n, RG_TYPE_F32) || !src_f32(n->src[0])) return false;
    const rg_tensor *dy = &n->src[0]->t;
    int64_t last = n->ip[4];  // the window's last byte must lie inside the output
    if (n->ip[4] < 0 || n->ip[4] % 4) return false;
    for (int i = 0; i < 4; i++) {
        if (n->ip[i] < 0 || n->ip[i] % 4) return false;
        last += (dy->ne[i] - 1) * n->ip[i];
    }
    return last + 4 <= rg_tensor_nelements(&n->t) * 4 && window_is_injective(dy->ne, n->ip, 4);
}

// CPY_INTO: the node is the window (its strides), a's elements written there (with ip[0] = 1
// added there: acc_f32).
// Bits where the CPU copies bits: the same type, and f32 or both sides packed. The window's
// offset in its owner comes from the node's parameters on the device (geom[0] = view_offs),
// so a decode step that moves the window keeps a captured graph valid.
void cpy_into_geometry(const rg_node *n, int64_t geom[4]) { geom[0] = (int64_t)n->t.view_offs; }

rg_status run_cpy_into(rg_cuda_ctx *ctx, const rg_exec_ctx *c, const rg_node *n, rg_error *err) {
    const rg_tensor *a = &n->src[0]->t, *d = &n->t;
    const size_t esz = elem_size(d->type);
    const bool bits = a->type == d->type && (d->type == RG_TYPE_F32 || (a->nb[0] == esz && d->nb[0] == esz));
    copy_geom g;
    for (int i = 0; i < 4; i++)
        g.ne[i] = g.sne[i] = a->ne[i], g.snb[i] = (int64_t)a->nb[i], g.dnb[i] = (int64_t)d->nb[i];
    const rg_node_params *prm;
    RG_TRY(rg_cu_params(c, n, &prm, err));
    char *base = (char *)d->data - n->t.view_offs;  // the owner's bytes (or its mirror's on this device)
    if (n->ip[0]) {  // accumulate (rg_acc_into): f32 on both sides, sup_cpy_into checked
        const int64_t count = g.ne[0] * g.ne[1] * g.ne[2] * g.ne[3];
        RG_LAUNCH(acc_f32_kernel, blocks_for(count), THREADS, 0, ctx->stream, (const char *)a->data, base, g, count,
                  (const int64_t *)&prm->geom[0]);
        CU_LAUNCHED();
        return RG_OK;
    }
    return launch_copy(ctx, n, (const char *)a->data, a->type, base, d->type, esz, bits, g, err, &prm->geom[0]);
}

bool sup_cpy_into(const rg_node *n) {
    if (!n || !n->src[0] || !n->src[1] || !is_float_type(n->t.type) || !is_float_type(n->src[0]->t.type)) return false;
    const rg_tensor *a = &n->src[0]->t, *d = &n->t;
    const size_t esz = elem_size(d->type);
    int64_t nb[4];
    strides_of(d, nb, 1);
    if (n->ip[0] && (a->type != RG_TYPE_F32 || d->type != RG_TYPE_F32)) return false;  // accumulate: f32 only
    return rg_tensor_same_shape(a, d) && aligned(a, elem_size(a->type)) && aligned(d, esz) &&
           window_is_injective(d->ne, nb, esz);
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
CELL(fill, run_fill(ctx, n, err))
CELL(sub, run_ew<op_sub>(ctx, n, err))
CELL(mul, run_ew<op_mul>(ctx, n, err))
CELL(scale, run_ew<op_scale>(ctx, n, err))
CELL(silu, run_ew<op_silu>(ctx, n, err))
CELL(silu_back, run_ew<op_silu_back>(ctx, n, err))
CELL(swiglu, run_ew<op_swiglu>(ctx, n, err))
CELL(repeat, run_repeat(ctx, n, err))
CELL(cont, run_copy(ctx, n, err))
CELL(cpy, run_copy(ctx, n, err))
CELL(view_back, run_view_back(ctx, n, err))
CELL(cpy_into, run_cpy_into(ctx, c, n, err))
#undef CELL

}  // namespace

// This file's cells of the CUDA column (op_table.cu lists them).
namespace RG_CU_CELLS {
extern const rg_op_col fill = rg_cu_col(cell_fill, sup_fill, NULL, "f32, f16, bf16");
extern const rg_op_col sub = rg_cu_col(cell_sub, sup_ew<true, false>, NULL, "f32");
extern const rg_op_col mul = rg_cu_col(cell_mul, sup_ew<true, false>, NULL, "f32");
extern const rg_op_col scale = rg_cu_col(cell_scale, sup_ew<false, true>, NULL, "f32");
extern const rg_op_col silu = rg_cu_col(cell_silu, sup_ew<false, true>, NULL, "f32");
extern const rg_op_col silu_back = rg_cu_col(cell_silu_back, sup_ew<true, true>, NULL, "f32");
extern const rg_op_col swiglu = rg_cu_col(cell_swiglu, sup_ew<true, true>, NULL, "f32");
extern const rg_op_col repeat = rg_cu_col(cell_repeat, sup_repeat, NULL, "f32");
extern const rg_op_col cont = rg_cu_col(cell_cont, sup_cont, NULL, "any");
extern const rg_op_col cpy = rg_cu_col(cell_cpy, sup_cpy, NULL, "f32, f16, bf16");
extern const rg_op_col view_back = rg_cu_col(cell_view_back, sup_view_back, NULL, "f32");
// The window's offset read on the device: a decode step's moved cache window keeps a graph valid.
extern const rg_op_col cpy_into =
    rg_cu_col(cell_cpy_into, sup_cpy_into, NULL, "f32, f16, bf16", true, cpy_into_geometry);
}  // namespace RG_CU_CELLS
