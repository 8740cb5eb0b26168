// ops_elementwise.cuh - what ops_elementwise.cu and ops_reduce_gather.cu share: device helpers
// (coordinates, the half conversions of src/tensor/half.c step for step, typed loads and
// stores), the grid-stride loop and the launchers' checks. Everything here has internal
// linkage (an anonymous namespace), so each file has its own copy, as cuda_common.cuh asks.
#ifndef RG_CUDA_OPS_ELEMENTWISE_CUH
#define RG_CUDA_OPS_ELEMENTWISE_CUH

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


#define GRID_STRIDE(k, n) \
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < (n); k += (int64_t)gridDim.x * blockDim.x)


inline unsigned blocks_for(int64_t threads) {
    const int64_t b = (threads + THREADS - 1) / THREADS;
    return (unsigned)(b < 1 ? 1 : b > MAX_BLOCKS ? MAX_BLOCKS : b);
}

// Bytes per element of an unquantized type, 0 for a quantized or unknown one.
inline size_t elem_size(uint32_t type) {
    const rg_type_traits *tt = rg_type_get(type);
    return tt->block_size == 1 ? tt->type_size : 0;
}

inline bool is_float_type(uint32_t type) { return type == RG_TYPE_F32 || type == RG_TYPE_F16 || type == RG_TYPE_BF16; }

// Every access aligned: strides and the view offset multiples of esz; no empty dim.
inline bool aligned(const rg_tensor *t, size_t esz) {
    if (!esz || t->view_offs % esz) return false;
    for (int i = 0; i < RG_MAX_DIMS; i++)
        if (t->ne[i] <= 0 || t->nb[i] % esz) return false;
    return true;
}

inline bool src_f32(const rg_node *s) { return s && s->t.type == RG_TYPE_F32 && aligned(&s->t, 4); }

// A contiguous, non-empty output of the given type.
inline bool out_ok(const rg_node *n, uint32_t type) {
    return n->t.type == type && rg_tensor_is_contiguous(&n->t) && rg_tensor_nelements(&n->t) > 0;
}

// small.ne[i] divides big.ne[i] in every dim.
inline bool tiles(const rg_tensor *big, const rg_tensor *small) {
    for (int i = 0; i < RG_MAX_DIMS; i++)
        if (small->ne[i] <= 0 || big->ne[i] % small->ne[i]) return false;
    return true;
}

// The window of shape ne with byte strides nb (>= 0) touches no byte twice:
// with its dims of more than one element ordered by stride, each stride is at
// least the extent of the dims below it (the first: an element).
inline bool window_is_injective(const int64_t ne[4], const int64_t nb[4], size_t esz) {
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

inline void strides_of(const rg_tensor *t, int64_t out[4], size_t unit) {
    for (int i = 0; i < 4; i++) out[i] = (int64_t)(t->nb[i] / unit);
}

// Packed strides (bytes) of shape ne with esz-byte elements.
inline void packed_strides(const int64_t ne[4], size_t esz, int64_t out[4]) {
    out[0] = (int64_t)esz;
    for (int i = 1; i < 4; i++) out[i] = out[i - 1] * ne[i - 1];
}


}  // namespace

#endif
