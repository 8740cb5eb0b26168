// gemm_bf16.c - the driver, the repacking and the portable reference of the BF16 GEMM of
// inference prompts (gemm_bf16.h).
#include "cpu/gemm_bf16.h"

#include <math.h>
#include <string.h>

#include "base/cpu.h"
#include "tensor/half.h"

enum { PANEL = RG_BF16_PANEL };

bool rg_gemm_bf16_supports(int64_t K) { return rg_cpu_has_avx512_bf16() && K > 0 && K % 16 == 0; }

static size_t align64(size_t n) { return (n + 63) / 64 * 64; }
static size_t panel_bytes(int64_t K) { return align64((size_t)K / 2 * PANEL * 4); }
static size_t cols_bytes(int64_t K, int64_t N) { return align64((size_t)(K * N) * 2); }

size_t rg_gemm_bf16_work(int64_t K, int64_t N, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    return cols_bytes(K, N) + (size_t)n_threads * panel_bytes(K);
}

void rg_bf16_round_cols(const float *x, int64_t ldx, int64_t K, int64_t n0, int64_t n1, uint16_t *xb) {
    for (int64_t n = n0; n < n1; n++) rg_fp32_to_bf16_row(x + n * ldx, xb + n * K, K);
}

void rg_bf16_panel_pack(uint32_t *panel, const void *w, size_t w_stride, int64_t K, int64_t m0, int64_t M) {
    for (int r = 0; r < PANEL; r++) {
        const uint8_t *row = m0 + r < M ? (const uint8_t *)w + (size_t)(m0 + r) * w_stride : NULL;
        for (int64_t p = 0; p < K / 2; p++) {
            uint32_t v = 0;
            if (row) memcpy(&v, row + 4 * p, 4);
            panel[p * PANEL + r] = v;
        }
    }
}

// fl(a + b) with VDPBF16PS's rules: denormal inputs read as zero, a denormal result flushed to zero.
static float add_ftz(float a, float b) {
    if (fpclassify(a) == FP_SUBNORMAL) a = copysignf(0.0f, a);
    if (fpclassify(b) == FP_SUBNORMAL) b = copysignf(0.0f, b);
    volatile float s = a + b;  // one rounding in float
    float r = s;
    return fpclassify(r) == FP_SUBNORMAL ? copysignf(0.0f, r) : r;
}

static float bf(uint16_t h) {
    float f = rg_bf16_to_fp32(h);
    return fpclassify(f) == FP_SUBNORMAL ? copysignf(0.0f, f) : f;
}

void rg_bf16_panel_mul_ref(const uint32_t *panel, int64_t K, const uint16_t *xb, int64_t N, int rows, float *y,
                           int64_t ldy) {
    for (int64_t n = 0; n < N; n++)
        for (int r = 0; r < rows; r++) {
            float acc = 0.0f;
            for (int64_t p = 0; p < K / 2; p++) {
                const uint32_t wp = panel[p * PANEL + r];
                const uint16_t w0 = (uint16_t)(wp & 0xFFFF), w1 = (uint16_t)(wp >> 16);
                acc = add_ftz(acc, bf(w1) * bf(xb[n * K + 2 * p + 1]));  // exact: 8-bit significands
                acc = add_ftz(acc, bf(w0) * bf(xb[n * K + 2 * p]));
            }
            y[n * ldy + r] = acc;
        }
}

typedef struct bf16_job {
    int64_t K, M, N;
    const void *w;
    size_t w_stride;
    const float *x;
    int64_t ldx;
    float *y;
    int64_t ldy;
    uint16_t *xb;
    char *panels;
} bf16_job;

static void round_part(void *arg, int ith, int nth) {
    bf16_job *j = arg;
    int64_t n0, n1;
    rg_split_range(j->N, ith, nth, &n0, &n1);
    rg_bf16_round_cols(j->x, j->ldx, j->K, n0, n1, j->xb);
}

static void panels_part(void *arg, int ith, int nth) {
    bf16_job *j = arg;
    int64_t p0, p1;
    rg_split_range((j->M + PANEL - 1) / PANEL, ith, nth, &p0, &p1);
    uint32_t *panel = (uint32_t *)(j->panels + (size_t)ith * panel_bytes(j->K));
    for (int64_t i = p0; i < p1; i++) {
        const int64_t m0 = i * PANEL;
        const int rows = j->M - m0 < PANEL ? (int)(j->M - m0) : PANEL;
        rg_bf16_panel_pack_avx512(panel, j->w, j->w_stride, j->K, m0, j->M);
        rg_bf16_panel_mul_avx512(panel, j->K, j->xb, j->N, rows, j->y + m0, j->ldy);
    }
}

void rg_gemm_bf16(rg_threadpool *pool, int64_t K, int64_t M, int64_t N, const void *w, size_t w_stride,
                  const float *x, int64_t ldx, float *y, int64_t ldy, void *work) {
    bf16_job j = {K, M, N, w, w_stride, x, ldx, y, ldy, (uint16_t *)work, (char *)work + cols_bytes(K, N)};
    rg_threadpool_run(pool, round_part, &j);
    rg_threadpool_run(pool, panels_part, &j);
}
