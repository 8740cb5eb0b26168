// gemm_avx2.c - the AVX2/FMA micro-kernel of our SGEMM and the transposing
// panel packer. The build compiles *_avx2.c with -mavx2 -mfma -mf16c; gemm.c
// calls these only after rg_cpu_has_avx2(). Without those flags this file
// defines stubs and rg_gemm_avx2_built = 0.
//
// Why 6x16: a Zen 3 core retires two 256-bit FMAs per cycle with a latency of
// 4 cycles, so at least 8 independent accumulators are needed to keep both
// pipes busy. 6 rows x 2 vectors of 8 columns = 12 accumulators, plus the two
// B vectors and one broadcast A value = 15 of the 16 ymm registers. Each step
// of k does 12 FMAs (6 cycles) against 2 vector loads and 6 broadcasts (8
// loads; Zen 3 does 2-3 per cycle), so the loads hide under the FMAs.
#include "cpu/gemm.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

const int rg_gemm_avx2_built = 1;

enum { MR_ = RG_GEMM_MR, NR_ = RG_GEMM_NR };

// One step of k in AT&T syntax: two vectors of B, six broadcasts of A (two
// registers, alternating, so a broadcast can issue while the previous one's
// FMAs wait), twelve FMAs into ymm4..ymm15 (row r, half h -> ymm(4 + 2r + h)).
#define RG_UK_STEP(ao, bo)                                  \
    "vmovups " #bo "(%[b]), %%ymm0\n\t"                     \
    "vmovups " #bo "+32(%[b]), %%ymm1\n\t"                  \
    "vbroadcastss " #ao "(%[a]), %%ymm2\n\t"                \
    "vbroadcastss " #ao "+4(%[a]), %%ymm3\n\t"              \
    "vfmadd231ps %%ymm0, %%ymm2, %%ymm4\n\t"               \
    "vfmadd231ps %%ymm1, %%ymm2, %%ymm5\n\t"               \
    "vfmadd231ps %%ymm0, %%ymm3, %%ymm6\n\t"               \
    "vfmadd231ps %%ymm1, %%ymm3, %%ymm7\n\t"               \
    "vbroadcastss " #ao "+8(%[a]), %%ymm2\n\t"              \
    "vbroadcastss " #ao "+12(%[a]), %%ymm3\n\t"             \
    "vfmadd231ps %%ymm0, %%ymm2, %%ymm8\n\t"               \
    "vfmadd231ps %%ymm1, %%ymm2, %%ymm9\n\t"               \
    "vfmadd231ps %%ymm0, %%ymm3, %%ymm10\n\t"              \
    "vfmadd231ps %%ymm1, %%ymm3, %%ymm11\n\t"              \
    "vbroadcastss " #ao "+16(%[a]), %%ymm2\n\t"             \
    "vbroadcastss " #ao "+20(%[a]), %%ymm3\n\t"             \
    "vfmadd231ps %%ymm0, %%ymm2, %%ymm12\n\t"              \
    "vfmadd231ps %%ymm1, %%ymm2, %%ymm13\n\t"              \
    "vfmadd231ps %%ymm0, %%ymm3, %%ymm14\n\t"              \
    "vfmadd231ps %%ymm1, %%ymm3, %%ymm15\n\t"

void rg_gemm_ukernel_avx2(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, bool add) {
    // a: [kc][6] packed rows of A; b: [kc][16] packed columns of B.
    // The loop is written in assembly so that every compiler keeps the twelve
    // accumulators in registers with no spills or copies (gcc 12 with
    // intrinsics added register moves that cost ~10% here). The sums leave the
    // asm through acc and C is updated below in C, one add per element.
    float acc[MR_ * NR_] __attribute__((aligned(32)));  // [6][16]
    // The tile of C is read after the loop; start fetching its 6 rows now.
    for (int r = 0; r < MR_; r++) {
        _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + r * ldc + 15), _MM_HINT_T0);
    }
    int64_t k4 = kc / 4, k1 = kc % 4;
    __asm__ volatile(
        "vxorps %%ymm4, %%ymm4, %%ymm4\n\t"
        "vxorps %%ymm5, %%ymm5, %%ymm5\n\t"
        "vxorps %%ymm6, %%ymm6, %%ymm6\n\t"
        "vxorps %%ymm7, %%ymm7, %%ymm7\n\t"
        "vxorps %%ymm8, %%ymm8, %%ymm8\n\t"
        "vxorps %%ymm9, %%ymm9, %%ymm9\n\t"
        "vxorps %%ymm10, %%ymm10, %%ymm10\n\t"
        "vxorps %%ymm11, %%ymm11, %%ymm11\n\t"
        "vxorps %%ymm12, %%ymm12, %%ymm12\n\t"
        "vxorps %%ymm13, %%ymm13, %%ymm13\n\t"
        "vxorps %%ymm14, %%ymm14, %%ymm14\n\t"
        "vxorps %%ymm15, %%ymm15, %%ymm15\n\t"
        "test %[k4], %[k4]\n\t"
        "jz 2f\n\t"
        // Four steps per trip; the prefetch runs 8 steps (512 bytes) ahead in B.
        "1:\n\t"
        "prefetcht0 512(%[b])\n\t"
        RG_UK_STEP(0, 0)
        RG_UK_STEP(24, 64)
        RG_UK_STEP(48, 128)
        RG_UK_STEP(72, 192)
        "add $96, %[a]\n\t"
        "add $256, %[b]\n\t"
        "dec %[k4]\n\t"
        "jnz 1b\n\t"
        "2:\n\t"
        "test %[k1], %[k1]\n\t"
        "jz 4f\n\t"
        "3:\n\t"
        RG_UK_STEP(0, 0)
        "add $24, %[a]\n\t"
        "add $64, %[b]\n\t"
        "dec %[k1]\n\t"
        "jnz 3b\n\t"
        "4:\n\t"
        "vmovaps %%ymm4, 0(%[acc])\n\t"
        "vmovaps %%ymm5, 32(%[acc])\n\t"
        "vmovaps %%ymm6, 64(%[acc])\n\t"
        "vmovaps %%ymm7, 96(%[acc])\n\t"
        "vmovaps %%ymm8, 128(%[acc])\n\t"
        "vmovaps %%ymm9, 160(%[acc])\n\t"
        "vmovaps %%ymm10, 192(%[acc])\n\t"
        "vmovaps %%ymm11, 224(%[acc])\n\t"
        "vmovaps %%ymm12, 256(%[acc])\n\t"
        "vmovaps %%ymm13, 288(%[acc])\n\t"
        "vmovaps %%ymm14, 320(%[acc])\n\t"
        "vmovaps %%ymm15, 352(%[acc])\n\t"
        : [a] "+r"(a), [b] "+r"(b), [k4] "+r"(k4), [k1] "+r"(k1)
        : [acc] "r"(acc)
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
          "xmm13", "xmm14", "xmm15", "cc", "memory");
    // C = acc, or C = C + acc: one rounding, as the portable kernel does.
    for (int r = 0; r < MR_; r++) {
        float *cr = c + r * ldc;
        __m256 lo = _mm256_load_ps(acc + r * NR_), hi = _mm256_load_ps(acc + r * NR_ + 8);
        if (add) lo = _mm256_add_ps(_mm256_loadu_ps(cr), lo), hi = _mm256_add_ps(_mm256_loadu_ps(cr + 8), hi);
        _mm256_storeu_ps(cr, lo), _mm256_storeu_ps(cr + 8, hi);
    }
}
#undef RG_UK_STEP

// 8 rows of 8 floats -> 8 columns, in registers.
static inline void transpose8(__m256 r[8]) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20), r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20), r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20), r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20), r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

void rg_gemm_pack_bt_avx2(int64_t kc, const float *src, int64_t ld, int n, float *dst) {
    if (n < 16) {
        // An edge panel: rare, plain loops.
        for (int64_t k = 0; k < kc; k++)
            for (int j = 0; j < 16; j++) dst[k * 16 + j] = j < n ? src[j * ld + k] : 0.0f;
        return;
    }
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8) {
        // Two 8x8 blocks: rows 0..7 become columns 0..7, rows 8..15 columns 8..15.
        for (int half = 0; half < 2; half++) {
            __m256 r[8];
            for (int j = 0; j < 8; j++) r[j] = _mm256_loadu_ps(src + (int64_t)(half * 8 + j) * ld + k);
            transpose8(r);
            for (int t = 0; t < 8; t++) _mm256_storeu_ps(dst + (k + t) * 16 + half * 8, r[t]);
        }
    }
    for (; k < kc; k++)
        for (int j = 0; j < 16; j++) dst[k * 16 + j] = src[j * ld + k];
}

// rg_gemm_pack_bt_avx2 reading 16-bit rows: LOAD8 widens 8 of them to f32.
static inline __m256 ld8_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256 ld8_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
static inline float ld1_f16(const uint16_t *p) { return _cvtsh_ss(*p); }
static inline float ld1_bf16(const uint16_t *p) {
    const uint32_t u = (uint32_t)*p << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
#define PACK_BT_HALF(name, LOAD8, LOAD1)                                                                   \
    void name(int64_t kc, const uint16_t *src, int64_t ld, int n, float *dst) {                            \
        if (n < 16) {                                                                                      \
            for (int64_t k = 0; k < kc; k++)                                                               \
                for (int j = 0; j < 16; j++) dst[k * 16 + j] = j < n ? LOAD1(src + j * ld + k) : 0.0f;     \
            return;                                                                                        \
        }                                                                                                  \
        int64_t k = 0;                                                                                     \
        for (; k + 8 <= kc; k += 8)                                                                        \
            for (int half = 0; half < 2; half++) {                                                         \
                __m256 r[8];                                                                               \
                for (int j = 0; j < 8; j++) r[j] = LOAD8(src + (int64_t)(half * 8 + j) * ld + k);          \
                transpose8(r);                                                                             \
                for (int t = 0; t < 8; t++) _mm256_storeu_ps(dst + (k + t) * 16 + half * 8, r[t]);         \
            }                                                                                              \
        for (; k < kc; k++)                                                                                \
            for (int j = 0; j < 16; j++) dst[k * 16 + j] = LOAD1(src + j * ld + k);                        \
    }
PACK_BT_HALF(rg_gemm_pack_bt_f16_avx2, ld8_f16, ld1_f16)
PACK_BT_HALF(rg_gemm_pack_bt_bf16_avx2, ld8_bf16, ld1_bf16)

void rg_gemm_pack_at_avx2(int64_t kc, const float *src, int64_t ld, int n, float *dst) {
    int64_t k = 0;
    // 8 steps of k at a time: rows 0..n-1 (and zero rows up to 8) transposed in
    // registers; the first 6 lanes of each column are one step of the panel.
    for (; k + 8 <= kc; k += 8) {
        __m256 r[8];
        for (int j = 0; j < 8; j++) r[j] = j < n ? _mm256_loadu_ps(src + j * ld + k) : _mm256_setzero_ps();
        transpose8(r);
        for (int t = 0; t < 8; t++) {
            float *d = dst + (k + t) * MR_;
            _mm_storeu_ps(d, _mm256_castps256_ps128(r[t]));
            _mm_storel_pi((__m64 *)(d + 4), _mm256_extractf128_ps(r[t], 1));
        }
    }
    for (; k < kc; k++)
        for (int j = 0; j < MR_; j++) dst[k * MR_ + j] = j < n ? src[j * ld + k] : 0.0f;
}

#else

const int rg_gemm_avx2_built = 0;

void rg_gemm_ukernel_avx2(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, bool add) {
    (void)kc, (void)a, (void)b, (void)c, (void)ldc, (void)add;
}

void rg_gemm_pack_bt_avx2(int64_t kc, const float *src, int64_t ld, int n, float *dst) {
    (void)kc, (void)src, (void)ld, (void)n, (void)dst;
}

void rg_gemm_pack_at_avx2(int64_t kc, const float *src, int64_t ld, int n, float *dst) {
    (void)kc, (void)src, (void)ld, (void)n, (void)dst;
}

void rg_gemm_pack_bt_f16_avx2(int64_t kc, const uint16_t *src, int64_t ld, int n, float *dst) {
    (void)kc, (void)src, (void)ld, (void)n, (void)dst;
}

void rg_gemm_pack_bt_bf16_avx2(int64_t kc, const uint16_t *src, int64_t ld, int n, float *dst) {
    (void)kc, (void)src, (void)ld, (void)n, (void)dst;
}

#endif
