// gemm_q4_0.c - the driver and portable reference of the Q4_0 x Q8_0 integer GEMM (gemm_q4_0.h).
#include "cpu/gemm_q4_0.h"

#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"

enum { QK = 32, Q4_0_BYTES = 18, Q8_0_BYTES = 34 };

bool rg_gemm_q4_0_available(void) { return rg_cpu_has_avx512_vnni() != 0; }

static size_t align64(size_t n) { return (n + 63) / 64 * 64; }

// Bytes of the quantized columns, and of one thread's panel.
static size_t cols_bytes(int64_t K, int64_t N) {
    int64_t nb = K / QK;
    return align64((size_t)(N * K)) + 2 * align64((size_t)(N * nb) * 4) + align64((size_t)N * Q8_0_BYTES * (size_t)nb);
}
static size_t panel_bytes(int64_t K) {
    int64_t nb = K / QK;
    return align64((size_t)nb * 128) + align64((size_t)nb * RG_Q4_0_PANEL * sizeof(float));
}

size_t rg_gemm_q4_0_work(int64_t K, int64_t N, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    return cols_bytes(K, N) + (size_t)n_threads * panel_bytes(K);
}

// The Q8_0 blocks staged per column (the library's quantizer, so the codes are llama.cpp's),
// then split into codes, scales and offset sums. blocks: the column's staging, nb * 34 bytes.
static void quantize_col(rg_q8_cols *c, const float *col, int64_t n, uint8_t *blocks) {
    rg_quant_get(RG_TYPE_Q8_0)->quantize(col, blocks, c->K, NULL);
    for (int64_t b = 0; b < c->nb; b++) {
        const uint8_t *blk = blocks + b * Q8_0_BYTES;
        uint16_t h = (uint16_t)(blk[0] | blk[1] << 8);
        int8_t *q = c->q + n * c->K + b * QK;
        memcpy(q, blk + 2, QK);
        int32_t s = 0;
        for (int i = 0; i < QK; i++) s += q[i];
        c->d[n * c->nb + b] = rg_fp16_to_fp32(h);
        c->sum8[n * c->nb + b] = 8 * s;
    }
}

void rg_q8_cols_quantize(rg_q8_cols *c, const float *x, int64_t ldx, int64_t n0, int64_t n1) {
    uint8_t *staging = malloc((size_t)(c->nb * Q8_0_BYTES) + 1);
    if (!staging) abort();  // a test helper: the library's path stages in its scratch
    for (int64_t n = n0; n < n1; n++) quantize_col(c, x + n * ldx, n, staging);
    free(staging);
}

void rg_q4_0_panel_pack(rg_q4_0_panel *p, const void *w, size_t w_stride, int64_t m0, int64_t M) {
    for (int r = 0; r < RG_Q4_0_PANEL; r++) {
        const bool live = m0 + r < M;
        const uint8_t *row = live ? (const uint8_t *)w + (size_t)(m0 + r) * w_stride : NULL;
        for (int64_t b = 0; b < p->nb; b++) {
            uint8_t *dst = p->codes + b * 128 + r * 4;
            if (!live) {
                for (int j = 0; j < 4; j++) memset(dst + j * 32, 0, 4);
                p->d[b * RG_Q4_0_PANEL + r] = 0.0f;
                continue;
            }
            const uint8_t *blk = row + b * Q4_0_BYTES;
            for (int j = 0; j < 4; j++) memcpy(dst + j * 32, blk + 2 + 4 * j, 4);
            p->d[b * RG_Q4_0_PANEL + r] = rg_fp16_to_fp32((uint16_t)(blk[0] | blk[1] << 8));
        }
    }
}

// The arithmetic of the header, one output at a time.
void rg_q4_0_panel_mul_ref(const rg_q4_0_panel *p, const rg_q8_cols *c, int rows, float *y, int64_t ldy) {
    for (int64_t n = 0; n < c->N; n++)
        for (int r = 0; r < rows; r++) {
            float acc = 0.0f;
            for (int64_t b = 0; b < p->nb; b++) {
                const uint8_t *codes = p->codes + b * 128;
                const int8_t *q = c->q + n * c->K + b * QK;
                int32_t isum = 0;
                for (int j = 0; j < 4; j++)
                    for (int t = 0; t < 4; t++) {
                        uint8_t byte = codes[j * 32 + r * 4 + t];
                        isum += (byte & 15) * q[4 * j + t] + (byte >> 4) * q[16 + 4 * j + t];
                    }
                isum -= c->sum8[n * c->nb + b];
                float s = p->d[b * RG_Q4_0_PANEL + r] * c->d[n * c->nb + b];
                acc = __builtin_fmaf((float)isum, s, acc);
            }
            y[n * ldy + r] = acc;
        }
}

typedef struct q4_job {
    int64_t K, M, N;
    const void *w;
    size_t w_stride;
    const float *x;
    int64_t ldx;
    float *y;
    int64_t ldy;
    rg_q8_cols cols;
    uint8_t *staging;  // the Q8_0 blocks of one column per thread (nb * 34 bytes each)
    char *panels;      // [n_threads] panel buffers
    size_t panel_size;
} q4_job;

static void quantize_part(void *arg, int ith, int nth) {
    q4_job *j = arg;
    int64_t n0, n1;
    rg_split_range(j->N, ith, nth, &n0, &n1);
    for (int64_t n = n0; n < n1; n++)
        quantize_col(&j->cols, j->x + n * j->ldx, n, j->staging + (size_t)ith * (size_t)(j->cols.nb * Q8_0_BYTES));
}

static void panels_part(void *arg, int ith, int nth) {
    q4_job *j = arg;
    const int64_t n_panels = (j->M + RG_Q4_0_PANEL - 1) / RG_Q4_0_PANEL;
    int64_t p0, p1;
    rg_split_range(n_panels, ith, nth, &p0, &p1);
    char *buf = j->panels + (size_t)ith * j->panel_size;
    rg_q4_0_panel p = {j->cols.nb, (uint8_t *)buf, (float *)(buf + align64((size_t)j->cols.nb * 128))};
    for (int64_t i = p0; i < p1; i++) {
        const int64_t m0 = i * RG_Q4_0_PANEL;
        const int rows = j->M - m0 < RG_Q4_0_PANEL ? (int)(j->M - m0) : RG_Q4_0_PANEL;
        rg_q4_0_panel_pack(&p, j->w, j->w_stride, m0, j->M);
        rg_q4_0_panel_mul_avx512(&p, &j->cols, rows, j->y + m0, j->ldy);
    }
}

void rg_gemm_q4_0(rg_threadpool *pool, int64_t K, int64_t M, int64_t N, const void *w, size_t w_stride,
                  const float *x, int64_t ldx, float *y, int64_t ldy, void *work) {
    const int64_t nb = K / QK;
    char *p = work;
    q4_job j = {K, M, N, w, w_stride, x, ldx, y, ldy, {K, N, nb, NULL, NULL, NULL}, NULL, NULL, panel_bytes(K)};
    j.cols.q = (int8_t *)p, p += align64((size_t)(N * K));
    j.cols.d = (float *)p, p += align64((size_t)(N * nb) * 4);
    j.cols.sum8 = (int32_t *)p, p += align64((size_t)(N * nb) * 4);
    j.staging = (uint8_t *)p, p += align64((size_t)N * Q8_0_BYTES * (size_t)nb);
    j.panels = p;
    rg_threadpool_run(pool, quantize_part, &j);
    rg_threadpool_run(pool, panels_part, &j);
}
