// dot_rows_avx2.h - the inline pieces dot_rows_avx2.c and dot_rows_avx512.c share (block
// sizes, row groups, the prefetch, the fixed reduction tree, the f16 broadcast, the nibble
// unpacking), so that the AVX-512 kernels keep the AVX2 ones' bits by construction.
// Included only by files compiled with AVX2, F16C and FMA.
#ifndef RG_CPU_DOT_ROWS_AVX2_H
#define RG_CPU_DOT_ROWS_AVX2_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum { Q4_0_BYTES = 18, Q4_1_BYTES = 20, Q5_0_BYTES = 22, Q8_0_BYTES = 34, Q8_1_BYTES = 36 };

static inline uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

// The g rows of the group starting at r; past nr the last row repeats.
static inline void group_rows_n(const void *w, size_t stride, int64_t r, int64_t nr, const uint8_t **p, int g) {
    for (int i = 0; i < g; i++) p[i] = (const uint8_t *)w + (size_t)(r + i < nr ? r + i : nr - 1) * stride;
}
static inline void group_rows(const void *w, size_t stride, int64_t r, int64_t nr, const uint8_t *p[4]) {
    group_rows_n(w, stride, r, nr, p, 4);
}

// Software prefetch: weight rows are usually contiguous, so while a group is
// read the next group (`next`, a group's rows on) is fetched, PF_EXTRA bytes
// ahead of the same fraction of it: `step` bytes of it per block step. The
// hardware prefetcher alone loses track of several interleaved row streams
// (measured: Q4_1 and Q8_0 1.2-1.4x faster from memory with this).
enum { PF_EXTRA = 1024 };
static inline void prefetch_ahead(const uint8_t *next, int64_t b, int step) {
    const uint8_t *q = next + PF_EXTRA + b * step;
    for (int o = 0; o < step; o += 64) _mm_prefetch((const char *)q + o, _MM_HINT_T0);
}

// [hsum(a0), hsum(a1), hsum(a2), hsum(a3)], each ((v0+v1)+(v2+v3)) + ((v4+v5)+(v6+v7)).
static inline __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

static inline void store_group(float *y, int64_t r, int64_t nr, __m128 v) {
    if (r >= nr) return;
    if (r + 4 <= nr) {
        _mm_storeu_ps(y + r, v);
        return;
    }
    float t[4];
    _mm_storeu_ps(t, v);
    for (int64_t i = 0; r + i < nr; i++) y[r + i] = t[i];
}

// The f16 at p (the low half of the 4 bytes there) on all 8 lanes.
static inline __m256 bcast_f16(const uint8_t *p) {
    return _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)rd32(p))));
}

// 16 packed bytes -> 32 nibbles in element order (low nibbles are elements 0..15).
static inline __m256i nibbles(const uint8_t *qs) {
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0F));
}

#endif
