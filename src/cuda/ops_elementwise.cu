// ops_elementwise.cu - the CUDA cells of the elementwise, reduction, copy and
// row-gather ops (cuda_common.cuh). Each kernel performs the same IEEE
// operations in the same order as its CPU kernel (src/cpu/ops_elementwise.c,
// ops_reduce.c, ops_copy.c, ops_copy_into.c), float arithmetic written with
// the _rn intrinsics so that nvcc never contracts it into a fused multiply-add:
// every result below is bit-identical to the CPU (tests/test_cuda_elementwise.c
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
//   REPEAT_BACK  f32, a any strides: each output the sum of its tiles in double,
//                tiles in increasing linear index of a, rounded once.
//   SUM, MEAN    f32, any strides, as ops_reduce.c: chunks of 4096 elements in
//   SUM_ROWS     linear order (SUM_ROWS: one chunk per row), element k of a chunk
//                into the double accumulator k % 8, the 8 combined in its fixed
//                tree, the chunk sums added in chunk order (MEAN: / n in double).
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
//   GET_ROWS     table f32, f16, bf16 [n, rows, b2, b3] any strides, ids I32
//                [k, e2, e3] -> f32 rows. An id outside the table gives a row of
//                NaN (the CPU refuses the node; the device cannot say so without
//                a synchronization).
//   GET_ROWS_BACK f32 dy [n, k...] any strides, ids I32 -> [n, rows]: zeros, then
//                per table row the sum of its dy rows in f32 in increasing token
//                order, by the block of the row's first token (no atomics; each
//                block scans the ids before its token: O(k^2) id reads). Ids
//                outside the table are skipped (the CPU refuses them).
//
// Supports decide from op, types, shapes and strides only: every stride and
// view offset a multiple of the element size (so that every access is aligned),
// no empty tensor, a contiguous output (CPY_INTO: the window).
//
// FMA rule (nvcc builds with --fmad=false, scripts/check-fma.sh): no fused multiply-add; the
// CPU's elementwise kernels make none, and these rows are the CPU's bits.
//
// Layout: device helpers, kernels, launchers, then the registration.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cuda/cuda_common.cuh"

extern "C" {
#include "tensor/half.h"
}

namespace {

constexpr int THREADS = 256;              // per block
constexpr int64_t MAX_BLOCKS = 65535 * 16;  // the grids' bound (every kernel loops past it)
constexpr int64_t SUM_CHUNK = 4096;         // ops_reduce.c's RD_CHUNK
constexpr int GRB_COLS = 8;                 // GET_ROWS_BACK: columns per thread and pass

// ===========================================================================
// Device helpers
// ===========================================================================

// The coordinates of linear index k in shape ne (i0 fastest).
__device__ inline void unravel(int64_t k, const int64_t ne[4], int64_t i[4]) {
    i[0] = k % ne[0];
    k /= ne[0];
    i[1] = k % ne[1];
    k /= ne[1];
    i[2] = k % ne[2];
    i[3] = k / ne[2];
}

__device__ inline int64_t dot4(const int64_t i[4], const int64_t s[4]) {
    return i[0] * s[0] + i[1] * s[1] + i[2] * s[2] + i[3] * s[3];
}

// The offset of element i of a source of shape sne tiled over it: (i % sne) . s.
__device__ inline int64_t tiled4(const int64_t i[4], const int64_t sne[4], const int64_t s[4]) {
    return (i[0] % sne[0]) * s[0] + (i[1] % sne[1]) * s[1] + (i[2] % sne[2]) * s[2] + (i[3] % sne[3]) * s[3];
}

// Conversions on bit patterns, step for step those of src/tensor/half.c.
__device__ inline uint16_t f16_from_f32(float f) {
    uint32_t a = __float_as_uint(f);
    const uint16_t sign = (uint16_t)((a >> 16) & 0x8000u);
    a &= 0x7FFFFFFFu;
    if (a > 0x7F800000u) return sign | 0x7E00u;   // NaN: payload dropped
    if (a >= 0x477FF000u) return sign | 0x7C00u;  // rounds to Inf
    if (a >= 0x38800000u) {                       // normal: rebias, round the 13 dropped bits to even
        a -= (uint32_t)(127 - 15) << 23;
        a += 0x0FFFu + ((a >> 13) & 1u);
        return sign | (uint16_t)(a >> 13);
    }
    const uint32_t e = a >> 23;  // subnormal result, in units of 2^-24
    if (e < 102) return sign;
    const uint32_t m = (a & 0x007FFFFFu) | 0x00800000u, shift = 126 - e;
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return sign | (uint16_t)q;
}

__device__ inline float f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu;
    uint32_t m = h & 0x3FFu;
    if (e == 31)  // Inf, or a NaN made quiet with its payload kept
        return __uint_as_float(sign | 0x7F800000u | (m << 13) | (m ? 0x00400000u : 0u));
    if (e != 0) return __uint_as_float(sign | ((e + 127 - 15) << 23) | (m << 13));
    if (m == 0) return __uint_as_float(sign);
    const uint32_t k = (uint32_t)__clz((int)m) - 21;  // shifts that bring the leading 1 to bit 10
    m <<= k;
    return __uint_as_float(sign | ((127 - 14 - k) << 23) | ((m & 0x3FFu) << 13));
}

__device__ inline uint16_t bf16_from_f32(float f) {
    const uint32_t u = __float_as_uint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u);  // NaN: forced quiet
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

__device__ inline float load_f32(const char *p, uint32_t type) {
    if (type == RG_TYPE_F16) return f16_to_f32(*(const uint16_t *)p);
    if (type == RG_TYPE_BF16) return __uint_as_float((uint32_t)*(const uint16_t *)p << 16);
    return *(const float *)p;
}

__device__ inline void store_f32(char *p, uint32_t type, float v) {
    if (type == RG_TYPE_F16) *(uint16_t *)p = f16_from_f32(v);
    else if (type == RG_TYPE_BF16) *(uint16_t *)p = bf16_from_f32(v);
    else *(float *)p = v;
}

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

#define GRID_STRIDE(k, n) \
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < (n); k += (int64_t)gridDim.x * blockDim.x)

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

unsigned blocks_for(int64_t threads) {
    const int64_t b = (threads + THREADS - 1) / THREADS;
    return (unsigned)(b < 1 ? 1 : b > MAX_BLOCKS ? MAX_BLOCKS : b);
}

// Bytes per element of an unquantized type, 0 for a quantized or unknown one.
size_t elem_size(uint32_t type) {
    const rg_type_traits *tt = rg_type_get(type);
    return tt->block_size == 1 ? tt->type_size : 0;
}

bool is_float_type(uint32_t type) { return type == RG_TYPE_F32 || type == RG_TYPE_F16 || type == RG_TYPE_BF16; }

// Every access aligned: strides and the view offset multiples of esz; no empty dim.
bool aligned(const rg_tensor *t, size_t esz) {
    if (!esz || t->view_offs % esz) return false;
    for (int i = 0; i < RG_MAX_DIMS; i++)
        if (t->ne[i] <= 0 || t->nb[i] % esz) return false;
    return true;
}

bool src_f32(const rg_node *s) { return s && s->t.type == RG_TYPE_F32 && aligned(&s->t, 4); }

// A contiguous, non-empty output of the given type.
bool out_ok(const rg_node *n, uint32_t type) {
    return n->t.type == type && rg_tensor_is_contiguous(&n->t) && rg_tensor_nelements(&n->t) > 0;
}

// small.ne[i] divides big.ne[i] in every dim.
bool tiles(const rg_tensor *big, const rg_tensor *small) {
    for (int i = 0; i < RG_MAX_DIMS; i++)
        if (small->ne[i] <= 0 || big->ne[i] % small->ne[i]) return false;
    return true;
}

// The window of shape ne with byte strides nb (>= 0) touches no byte twice:
// with its dims of more than one element ordered by stride, each stride is at
// least the extent of the dims below it (the first: an element).
bool window_is_injective(const int64_t ne[4], const int64_t nb[4], size_t esz) {
    int d[4], m = 0;
    for (int i = 0; i < 4; i++) {
        if (nb[i] < 0) return false;
        if (ne[i] > 1) d[m++] = i;
    }
    for (int x = 1; x < m; x++)  // insertion sort by stride
        for (int y = x; y > 0 && nb[d[y]] < nb[d[y - 1]]; y--) {
            const int tmp = d[y];
            d[y] = d[y - 1], d[y - 1] = tmp;
        }
    int64_t extent = (int64_t)esz;  // bytes from the first element to past the last, over the dims so far
    for (int x = 0; x < m; x++) {
        if (nb[d[x]] < extent) return false;
        extent += (ne[d[x]] - 1) * nb[d[x]];
    }
    return true;
}

void strides_of(const rg_tensor *t, int64_t out[4], size_t unit) {
    for (int i = 0; i < 4; i++) out[i] = (int64_t)(t->nb[i] / unit);
}

// Packed strides (bytes) of shape ne with esz-byte elements.
void packed_strides(const int64_t ne[4], size_t esz, int64_t out[4]) {
    out[0] = (int64_t)esz;
    for (int i = 1; i < 4; i++) out[i] = out[i - 1] * ne[i - 1];
}

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

// CPY_INTO: the node is the window (its strides), a's elements written there.
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
    return launch_copy(ctx, n, (const char *)a->data, a->type, base, d->type, esz, bits, g, err, &prm->geom[0]);
}

bool sup_cpy_into(const rg_node *n) {
    if (!n || !n->src[0] || !n->src[1] || !is_float_type(n->t.type) || !is_float_type(n->src[0]->t.type)) return false;
    const rg_tensor *a = &n->src[0]->t, *d = &n->t;
    const size_t esz = elem_size(d->type);
    int64_t nb[4];
    strides_of(d, nb, 1);
    return rg_tensor_same_shape(a, d) && aligned(a, elem_size(a->type)) && aligned(d, esz) &&
           window_is_injective(d->ne, nb, esz);
}

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
    RG_LAUNCH(get_rows_kernel, blocks_for(count), THREADS, 0, ctx->stream, (const char *)a->data, a->type,
              (const char *)ids->data, (float *)n->t.data, g, count);
    CU_LAUNCHED();
    return RG_OK;
}

bool sup_ids(const rg_node *ids) {
    return ids && ids->t.type == RG_TYPE_I32 && aligned(&ids->t, 4) && ids->t.ne[3] == 1;
}

bool sup_get_rows(const rg_node *n) {
    if (!n || !n->src[0] || !out_ok(n, RG_TYPE_F32) || !sup_ids(n->src[1])) return false;
    const rg_tensor *a = &n->src[0]->t, *ids = &n->src[1]->t, *o = &n->t;
    return is_float_type(a->type) && aligned(a, elem_size(a->type)) && o->ne[0] == a->ne[0] && o->ne[1] == ids->ne[0] &&
           o->ne[2] == ids->ne[1] && o->ne[3] == ids->ne[2] && o->ne[2] % a->ne[2] == 0 && o->ne[3] % a->ne[3] == 0;
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
CELL(fill, run_fill(ctx, n, err))
CELL(sub, run_ew<op_sub>(ctx, n, err))
CELL(mul, run_ew<op_mul>(ctx, n, err))
CELL(scale, run_ew<op_scale>(ctx, n, err))
CELL(silu, run_ew<op_silu>(ctx, n, err))
CELL(silu_back, run_ew<op_silu_back>(ctx, n, err))
CELL(swiglu, run_ew<op_swiglu>(ctx, n, err))
CELL(repeat, run_repeat(ctx, n, err))
CELL(repeat_back, run_repeat_back(ctx, n, err))
CELL(sum, run_sum_any(c, ctx, n, false, err))
CELL(mean, run_sum_any(c, ctx, n, true, err))
CELL(sum_rows, run_sum_rows(ctx, n, err))
CELL(cont, run_copy(ctx, n, err))
CELL(cpy, run_copy(ctx, n, err))
CELL(view_back, run_view_back(ctx, n, err))
CELL(cpy_into, run_cpy_into(ctx, c, n, err))
CELL(get_rows, run_get_rows(ctx, n, err))
CELL(get_rows_back, run_get_rows_back(ctx, n, err))
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
extern const rg_op_col repeat_back = rg_cu_col(cell_repeat_back, sup_repeat_back, NULL, "f32");
extern const rg_op_col sum = rg_cu_col(cell_sum, sup_sum, sum_work, "f32");
extern const rg_op_col mean = rg_cu_col(cell_mean, sup_sum, sum_work, "f32");
extern const rg_op_col sum_rows = rg_cu_col(cell_sum_rows, sup_sum_rows, NULL, "f32");
extern const rg_op_col cont = rg_cu_col(cell_cont, sup_cont, NULL, "any");
extern const rg_op_col cpy = rg_cu_col(cell_cpy, sup_cpy, NULL, "f32, f16, bf16");
extern const rg_op_col view_back = rg_cu_col(cell_view_back, sup_view_back, NULL, "f32");
// The window's offset read on the device: a decode step's moved cache window keeps a graph valid.
extern const rg_op_col cpy_into =
    rg_cu_col(cell_cpy_into, sup_cpy_into, NULL, "f32, f16, bf16", true, cpy_into_geometry);
extern const rg_op_col get_rows = rg_cu_col(cell_get_rows, sup_get_rows, NULL, "f32, f16, bf16");
extern const rg_op_col get_rows_back = rg_cu_col(cell_get_rows_back, sup_get_rows_back, NULL, "f32");
}  // namespace RG_CU_CELLS
