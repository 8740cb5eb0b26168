// gemm_avx512.c - the tall micro-kernel of our SGEMM on 512-bit registers: 24
// rows of C (four packed 6-row A panels, one after the other in the packed A
// block) against one packed 16-column B panel, the 16 columns one zmm. gemm.c
// calls it for every run of four whole A panels against a whole B panel, on
// CPUs where rg_cpu_has_avx512_vnni() says AVX-512 is usable, and the 6x16
// AVX2 kernel for what is left over.
//
// Why this shape: on a core with two 512-bit FMA pipes (Sapphire Rapids) the
// zmm FMA does twice the ymm one's work per cycle, but with 16 columns per
// register each FMA needs its own broadcast of an A value. 24 accumulators
// (zmm8..zmm31 in effect) hide the 4-cycle latency with room to spare, and a
// step of k is 24 FMAs (12 cycles on two pipes) against 1 vector load and 24
// broadcast loads, which the three load ports take in about 8 cycles. The
// packed layouts are the AVX2 kernel's, so packing, blocking and the edge
// paths are unchanged.
//
// Same bits: every C element is acc = fma(a[k], b[k], acc) from acc = 0 for k
// = 0 .. kc-1 in order, then C = acc or C = C + acc, exactly what the AVX2
// kernel and the portable one do (test_gemm compares them bit for bit).
#include "cpu/gemm.h"

#if defined(__AVX512F__) && defined(__x86_64__)

#include <immintrin.h>

const int rg_gemm_avx512_built = 1;

enum { MR_ = RG_GEMM_MR, NR_ = RG_GEMM_NR, PANELS = RG_GEMM_TALL / RG_GEMM_MR };

void rg_gemm_ukernel_tall_avx512(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, bool add) {
    // a: PANELS packed panels [kc][6], kc * 6 floats apart; b: [kc][16].
    const float *ap[PANELS];
    for (int p = 0; p < PANELS; p++) ap[p] = a + (int64_t)p * kc * MR_;
    // The tile of C is read (or written) after the loop; start fetching its rows now.
    for (int i = 0; i < PANELS * MR_; i++) _mm_prefetch((const char *)(c + (int64_t)i * ldc), _MM_HINT_T0);
    __m512 acc[PANELS * MR_];
    for (int i = 0; i < PANELS * MR_; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        const __m512 bk = _mm512_loadu_ps(b + k * NR_);
        for (int p = 0; p < PANELS; p++) {
            const float *ak = ap[p] + k * MR_;
            for (int r = 0; r < MR_; r++) acc[p * MR_ + r] = _mm512_fmadd_ps(_mm512_set1_ps(ak[r]), bk, acc[p * MR_ + r]);
        }
        if ((k & 3) == 0) _mm_prefetch((const char *)(b + (k + 8) * NR_), _MM_HINT_T0);
    }
    for (int i = 0; i < PANELS * MR_; i++) {
        float *ci = c + (int64_t)i * ldc;
        __m512 v = acc[i];
        if (add) v = _mm512_add_ps(_mm512_loadu_ps(ci), v);
        _mm512_storeu_ps(ci, v);
    }
}

#else

const int rg_gemm_avx512_built = 0;

void rg_gemm_ukernel_tall_avx512(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, bool add) {
    (void)kc, (void)a, (void)b, (void)c, (void)ldc, (void)add;
}

#endif
