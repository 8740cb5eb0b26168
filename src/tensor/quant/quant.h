// quant.h - every tensor type as rows of numbers: dequantize, quantize, dot.
//
// One table row per ggml type id (rg_quant_get) says what this library can do
// with that type. Each family of types lives in its own files and exports
// functions with these exact signatures and names:
//
//   void   rg_dequant_row_<t>(const void *src, float *dst, int64_t n);       // dispatched (AVX2 where written)
//   void   rg_dequant_row_<t>_ref(const void *src, float *dst, int64_t n);   // scalar reference (spec §4)
//   size_t rg_quantize_row_<t>(const float *src, void *dst, int64_t n, const float *imatrix);
//          // reference quantizer (spec §5; §5.6 when imatrix != NULL: one weight per element of the row)
//          // returns the bytes written: (n / block) * type_size
//   void   rg_vec_dot_<t>_<vt>(int64_t n, float *s, const void *x, const void *y);      // dispatched
//   void   rg_vec_dot_<t>_<vt>_ref(int64_t n, float *s, const void *x, const void *y);  // scalar reference
//          // *s = dot of a row x of type <t> with a row y of the activation type <vt> (q8_0, q8_1, q8_K, f16, bf16, f32)
//
// n is always a multiple of the type's block size (callers check; kernels may assume it).
// <t> is the lowercase ggml name (q4_0, q4_K, iq2_xxs, ...). All files of this family
// are compiled with -ffp-contract=off so that quantizers are bit-exact (spec §5.9).
#ifndef RG_QUANT_H
#define RG_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "retrograd.h"

typedef void (*rg_dequant_fn)(const void *src, float *dst, int64_t n);
typedef size_t (*rg_quantize_fn)(const float *src, void *dst, int64_t n, const float *imatrix);
typedef void (*rg_vec_dot_fn)(int64_t n, float *s, const void *x, const void *y);

typedef struct rg_quant_ops {
    rg_dequant_fn dequant;        // NULL when this type cannot be read into F32
    rg_dequant_fn dequant_ref;
    rg_quantize_fn quantize;      // NULL when there is no quantizer for this type
    bool quantize_needs_imatrix;  // true for types that are useless without one (IQ2/IQ1)
    uint32_t vec_dot_type;        // type the activations are converted to for vec_dot
    rg_vec_dot_fn vec_dot;        // NULL when there is no dot product
    rg_vec_dot_fn vec_dot_ref;
} rg_quant_ops;

// The row for a type id; an all-NULL row for ids without support.
const rg_quant_ops *rg_quant_get(uint32_t type);

// Whole-buffer helpers over rows, with the checks a caller from outside needs.
// They fail (naming `what`) when n is not a multiple of the block size or the
// type has no such function.
rg_status rg_dequantize(uint32_t type, const void *src, float *dst, int64_t n, const char *what, rg_error *err);
rg_status rg_quantize(uint32_t type, const float *src, void *dst, int64_t n_rows, int64_t n_per_row,
                      const float *imatrix, const char *what, rg_error *err);

// ---------------------------------------------------------------------------
// Shared constants of the formats (spec §3.5, §4.4, §4.6). The IQ grids are
// generated data in quant_iq{1,2,3}_grids.c (tools/gen_iq_grids.py).

extern const int8_t rg_kvalues_iq4nl[16];
extern const int8_t rg_kvalues_fp4[16];

// Little-endian field access inside blocks (blocks are byte arrays, see spec §4).
static inline uint16_t rg_rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t rg_rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline void rg_wr16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static inline void rg_wr32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

#endif
