// half.h - F16 (IEEE binary16) and BF16 conversions, one value or one row at a time.
//
// The scalar functions are the reference: they follow the spec's rules
// (shared/spec/gguf-and-types.md §3.2, §3.3) and agree with ggml bit for bit.
// The row functions give the same bits as the scalar loops on every input,
// whichever code path they take.
#ifndef RG_TENSOR_HALF_H
#define RG_TENSOR_HALF_H

#include <stdint.h>

// binary32 -> binary16, round to nearest even. NaN -> sign|0x7E00 (payload
// dropped); |f| >= 65520 -> ±Inf. This is the reference conversion.
uint16_t rg_fp32_to_fp16(float f);
// binary16 -> binary32, exact. A NaN comes back quiet (f32 bit 22 set) with its
// sign and payload kept.
float rg_fp16_to_fp32(uint16_t h);
// binary32 -> bf16, round to nearest even; overflow goes to Inf, subnormals are
// kept. NaN -> (bits >> 16) | 0x0040 (forced quiet, sign and top payload kept).
uint16_t rg_fp32_to_bf16(float f);
// bf16 -> binary32, exact (bits << 16).
float rg_bf16_to_fp32(uint16_t h);

// Row conversions of n elements (n <= 0 does nothing). They dispatch at run time
// to AVX2/F16C kernels when the CPU has them, otherwise they run the scalar loops.
// Source and destination must not overlap.
void rg_fp16_to_fp32_row(const uint16_t *x, float *y, int64_t n);
void rg_fp32_to_fp16_row(const float *x, uint16_t *y, int64_t n);
void rg_bf16_to_fp32_row(const uint16_t *x, float *y, int64_t n);
void rg_fp32_to_bf16_row(const float *x, uint16_t *y, int64_t n);

// The scalar loops, always available (tests compare the dispatched rows with them).
void rg_fp16_to_fp32_row_scalar(const uint16_t *x, float *y, int64_t n);
void rg_fp32_to_fp16_row_scalar(const float *x, uint16_t *y, int64_t n);
void rg_bf16_to_fp32_row_scalar(const uint16_t *x, float *y, int64_t n);
void rg_fp32_to_bf16_row_scalar(const float *x, uint16_t *y, int64_t n);

// 1 when the dispatching row functions use the AVX2/F16C kernels: the CPU (and
// OS) supports AVX2 and F16C, and half_avx2.c was compiled with those flags.
int rg_half_have_simd(void);

// Internal: the kernels in half_avx2.c. Call them only when rg_half_have_simd()
// is 1. When half_avx2.c is built without -mavx2 -mf16c they are stubs that run
// the scalar loops, and rg_half_avx2_built is 0.
extern const int rg_half_avx2_built;
void rg_fp16_to_fp32_row_avx2(const uint16_t *x, float *y, int64_t n);
void rg_fp32_to_fp16_row_avx2(const float *x, uint16_t *y, int64_t n);
void rg_bf16_to_fp32_row_avx2(const uint16_t *x, float *y, int64_t n);
void rg_fp32_to_bf16_row_avx2(const float *x, uint16_t *y, int64_t n);

#endif
