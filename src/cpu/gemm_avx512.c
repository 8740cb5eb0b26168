// gemm_avx512.c - our SGEMM's micro-kernels on 512-bit registers, used where
// rg_cpu_has_avx512_vnni() says AVX-512 is usable, on the AVX2 kernel's packed
// layouts (A panels [kc][6], B panels [kc][16]), so packing, blocking and the
// edge paths are unchanged:
//   wide  C[12 rows, 32 columns]: two consecutive A panels against two B panels,
//         where gemm.c has the B block packed whole (its NC loop: training's
//         products and every MUL_MAT on more tokens than one A block);
//   tall  C[12 rows, 16 columns]: two A panels against the single packed B
//         panel of the other loops (prompts of up to 144 tokens a thread).
// The 6x16 AVX2 kernel takes what is left over.
//
// Why: on a core with two 512-bit FMA pipes (Sapphire Rapids) a zmm FMA does
// twice a ymm one's work per cycle. A step of k of the wide kernel is 24 FMAs
// (12 cycles on two pipes) against 2 vector loads and 12 broadcasts, with 24
// accumulators hiding the FMA latency; the tall one's 12 FMAs need 12
// broadcasts and a load, which is why the wide one leads where it can run.
// Measured on SmolLM2's dW shapes (576x1536x256 and the like, one thread,
// 2026-12-02): AVX2 6x16 99-106 GFLOP/s, tall alone 146-161, wide 172-175
// (the zmm FMA rate measured beside them: 222-234 GFLOP/s); 4096x4096x256
// (rows 16 KB apart) 103 / 120 (tall of 24 rows: 108) / 144.
//
// Same bits: every C element is acc = fma(a[k], b[k], acc) from acc = 0 for k
// = 0 .. kc-1 in order, then C = acc or C = C + acc, exactly what the AVX2
// kernel and the portable one do (test_matmul compares them bit for bit).
#include "cpu/gemm.h"

#if defined(__AVX512F__) && defined(__x86_64__)

#include <immintrin.h>

const int rg_gemm_avx512_built = 1;

// The accumulators live in registers only when these constant-trip loops are unrolled:
// at -O2 gcc 12 kept them in memory and the wide kernel ran at 44 GFLOP/s, not 127.
#if defined(__clang__)
#define RG_UNROLL _Pragma("unroll")
#else
#define RG_UNROLL _Pragma("GCC unroll 16")
#endif

enum { MR_ = RG_GEMM_MR, NR_ = RG_GEMM_NR, PANELS = RG_GEMM_TALL / RG_GEMM_MR };  // tall: 2 A panels

void rg_gemm_ukernel_tall_avx512(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, bool add) {
    // a: PANELS packed panels [kc][6], kc * 6 floats apart; b: [kc][16].
    const float *ap[PANELS];
    for (int p = 0; p < PANELS; p++) ap[p] = a + (int64_t)p * kc * MR_;
    // The tile of C is read (or written) after the loop; start fetching its rows now.
    for (int i = 0; i < PANELS * MR_; i++) _mm_prefetch((const char *)(c + (int64_t)i * ldc), _MM_HINT_T0);
    __m512 acc[PANELS * MR_];
    RG_UNROLL
    for (int i = 0; i < PANELS * MR_; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        const __m512 bk = _mm512_loadu_ps(b + k * NR_);
        RG_UNROLL
        for (int p = 0; p < PANELS; p++) {
            const float *ak = ap[p] + k * MR_;
            RG_UNROLL
            for (int r = 0; r < MR_; r++) acc[p * MR_ + r] = _mm512_fmadd_ps(_mm512_set1_ps(ak[r]), bk, acc[p * MR_ + r]);
        }
        if ((k & 3) == 0) _mm_prefetch((const char *)(b + (k + 8) * NR_), _MM_HINT_T0);
    }
    RG_UNROLL
    for (int i = 0; i < PANELS * MR_; i++) {
        float *ci = c + (int64_t)i * ldc;
        __m512 v = acc[i];
        if (add) v = _mm512_add_ps(_mm512_loadu_ps(ci), v);
        _mm512_storeu_ps(ci, v);
    }
}

void rg_gemm_ukernel_wide_avx512(int64_t kc, const float *a, const float *b0, const float *b1, float *c, int64_t ldc,
                                  bool add) {
    // a: 2 packed panels [kc][6], kc * 6 floats apart; b0, b1: [kc][16] each, columns 0-15 and 16-31.
    const float *a1 = a + kc * MR_;
    for (int i = 0; i < 2 * MR_; i++) {
        _mm_prefetch((const char *)(c + (int64_t)i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + (int64_t)i * ldc + 16), _MM_HINT_T0);
    }
    __m512 lo[2 * MR_], hi[2 * MR_];  // row r: columns 0-15 in lo[r], 16-31 in hi[r]
    RG_UNROLL
    for (int i = 0; i < 2 * MR_; i++) lo[i] = hi[i] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        const __m512 v0 = _mm512_loadu_ps(b0 + k * NR_), v1 = _mm512_loadu_ps(b1 + k * NR_);
        RG_UNROLL
        for (int r = 0; r < MR_; r++) {
            const __m512 x = _mm512_set1_ps(a[k * MR_ + r]);
            lo[r] = _mm512_fmadd_ps(x, v0, lo[r]);
            hi[r] = _mm512_fmadd_ps(x, v1, hi[r]);
        }
        RG_UNROLL
        for (int r = 0; r < MR_; r++) {
            const __m512 x = _mm512_set1_ps(a1[k * MR_ + r]);
            lo[MR_ + r] = _mm512_fmadd_ps(x, v0, lo[MR_ + r]);
            hi[MR_ + r] = _mm512_fmadd_ps(x, v1, hi[MR_ + r]);
        }
    }
    RG_UNROLL
    for (int i = 0; i < 2 * MR_; i++) {
        float *ci = c + (int64_t)i * ldc;
        __m512 l = lo[i], h = hi[i];
        if (add) l = _mm512_add_ps(_mm512_loadu_ps(ci), l), h = _mm512_add_ps(_mm512_loadu_ps(ci + 16), h);
        _mm512_storeu_ps(ci, l);
        _mm512_storeu_ps(ci + 16, h);
    }
}

#else

const int rg_gemm_avx512_built = 0;

void rg_gemm_ukernel_wide_avx512(int64_t kc, const float *a, const float *b0, const float *b1, float *c, int64_t ldc,
                                  bool add) {
    (void)kc, (void)a, (void)b0, (void)b1, (void)c, (void)ldc, (void)add;
}

void rg_gemm_ukernel_tall_avx512(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, bool add) {
    (void)kc, (void)a, (void)b, (void)c, (void)ldc, (void)add;
}

#endif
