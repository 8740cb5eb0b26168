// dot_rows_avx512.c - the AVX-512 VNNI kernels behind dot_rows.h for Q4_0 and Q5_0 weights,
// chosen over the AVX2 ones (dot_rows_avx2.c) when rg_cpu_has_avx512_vnni() says the CPU
// and OS have AVX-512 F/BW/VL and VNNI.
//
// Eight rows per pass as in the AVX2 kernels, with VPDPBUSD on 256-bit registers (unsigned
// codes times signed activations, four products summed into each 32-bit lane) in place of
// maddubs + madd, and the offset of the codes folded into the accumulator it starts from:
//   Q4_0: sum (q - 8) y  = dpbusd(-8 sum y, q, y)      (-8 sum y per lane, once per block)
//   Q5_0: sum (q - 16) y = dpbusd(-16 sum y, q, y)     (q = nibble | 0x10 where qh's bit is
//                                                        set: one masked move, not six ops)
// Both kernels are bound by arithmetic, not memory, on two Zen 4 cores: SmolLM2-135M
// generation, interleaved with RG_NO_AVX512=1 in one run, Q4_0 218-220 -> 251-278 tok/s,
// Q4_K_M (mostly Q5_0: 576 is no multiple of 256) 188-202 -> 219-223.
// The integer sums are exact (|sum| <= 32 * 31 * 127, and maddubs never saturates on these
// codes), so each block's value is the AVX2 kernel's; the f32 accumulation runs in the same
// order and the final reduction is the same fixed tree: the bits are the AVX2 kernels'
// (test_dot_rows checks it).
//
// Not here: F32/F16/BF16 on 512-bit registers. The same one-row loop on zmm was slower from
// memory (SmolLM2 F16 generation 83-88 tok/s against 96-98 for the AVX2 loop, F32 45-50
// against 51-52, interleaved), so those types keep dot_rows_avx2.c's kernels.
#include "cpu/dot_rows.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)

#include "cpu/dot_rows_avx2.h"

const int rg_dot_rows_avx512_built = 1;

// Q4_0 (ofs 8, no high bits) and Q5_0 (ofs 16, qh at bytes 2..5, codes at 6): one loop.
static inline void dot_rows_legacy(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y,
                                   int block_bytes, int qs_at, int ofs, int has_qh) {
    const int64_t nb = K / 32;
    const __m256i high = _mm256_set1_epi8(0x10);
    for (int64_t r = 0; r < nr; r += 8) {
        const uint8_t *p[8];
        group_rows_n(w, w_stride, r, nr, p, 8);
        const uint8_t *next = p[0] + 8 * w_stride;
        __m256 acc[8];
        for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
        const uint8_t *xb = x;
        for (int64_t b = 0; b < nb; b++, xb += Q8_0_BYTES) {
            prefetch_ahead(next, b, 8 * block_bytes);
            const __m256i qy = _mm256_loadu_si256((const __m256i *)(xb + 2));
            // -ofs * (y0 + y1 + y2 + y3) per lane: exactly what subtracting maddubs(ofs, y) gives.
            const __m256i neg = _mm256_sub_epi32(_mm256_setzero_si256(),
                                                 _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)ofs), qy));
            const __m256 dy = bcast_f16(xb);
            for (int i = 0; i < 8; i++) {
                const uint8_t *wb = p[i] + b * block_bytes;
                __m256i q = nibbles(wb + qs_at);
                if (has_qh) q = _mm256_or_si256(q, _mm256_maskz_mov_epi8((__mmask32)rd32(wb + 2), high));
                const __m256i s = _mm256_dpbusd_epi32(neg, q, qy);
                acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(bcast_f16(wb), dy), _mm256_cvtepi32_ps(s), acc[i]);
            }
        }
        store_group(y, r, nr, reduce4(acc[0], acc[1], acc[2], acc[3]));
        store_group(y, r + 4, nr, reduce4(acc[4], acc[5], acc[6], acc[7]));
    }
}

void rg_dot_rows_q4_0_avx512(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y) {
    dot_rows_legacy(K, nr, w, w_stride, x, y, Q4_0_BYTES, 2, 8, 0);
}

void rg_dot_rows_q5_0_avx512(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y) {
    dot_rows_legacy(K, nr, w, w_stride, x, y, Q5_0_BYTES, 6, 16, 1);
}

#else  // built without AVX-512 VNNI: never called (rg_cpu_dot_rows checks rg_dot_rows_avx512_built)

const int rg_dot_rows_avx512_built = 0;

#define STUB(name) \
    void name(int64_t K, int64_t nr, const void *w, size_t w_stride, const void *x, float *y) { \
        (void)K, (void)nr, (void)w, (void)w_stride, (void)x, (void)y;                         \
    }
STUB(rg_dot_rows_q4_0_avx512)
STUB(rg_dot_rows_q5_0_avx512)

#endif
