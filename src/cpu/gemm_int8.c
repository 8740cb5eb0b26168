// gemm_int8.c - the driver, the repacking and the portable reference of the integer GEMM of
// inference prompts (gemm_int8.h).
#include "cpu/gemm_int8.h"

#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"
#include "tensor/quant/quant_legacy_k.h"

enum { QK = 32, Q4_0_BYTES = 18, Q5_0_BYTES = 22, Q4_K_BYTES = 144, Q6_K_BYTES = 210, Q8_0_BYTES = 34, PANEL = RG_INT8_PANEL };
// Bytes of one group (4 codes of every row of a panel), and of a block of 8 or 4 groups.
enum { GROUP = 4 * PANEL, BLOCK8 = 8 * GROUP, BLOCK4 = 4 * GROUP };

bool rg_gemm_int8_supports(uint32_t type, int64_t K) {
    if (!rg_cpu_has_avx512_vnni() || K <= 0) return false;
    if (type == RG_TYPE_Q4_0 || type == RG_TYPE_Q5_0 || type == RG_TYPE_Q8_0) return K % 32 == 0;
    if (type == RG_TYPE_Q4_K || type == RG_TYPE_Q6_K) return K % 256 == 0;
    return false;
}

static bool byte_codes(uint32_t type) { return type == RG_TYPE_Q5_0 || type == RG_TYPE_Q8_0 || type == RG_TYPE_Q6_K; }

static size_t align64(size_t n) { return (n + 63) / 64 * 64; }

// The quantized columns' arrays, carved from buf (NULL: only the size).
static size_t carve_cols(rg_q8_cols *c, char *buf, int64_t K, int64_t N) {
    const int64_t nb = K / QK;
    const size_t q = align64((size_t)(N * K)), a = align64((size_t)(N * nb) * 4);
    if (buf)
        *c = (rg_q8_cols){K, N, nb, (int8_t *)buf, (float *)(buf + q), (int32_t *)(buf + q + a), (float *)(buf + q + 2 * a),
                          (int32_t *)(buf + q + 3 * a)};
    return q + 5 * a;
}

int32_t rg_int8_code_offset(uint32_t type) {
    return type == RG_TYPE_Q4_0 ? 8 : type == RG_TYPE_Q5_0 ? 16 : type == RG_TYPE_Q8_0 ? 128 : type == RG_TYPE_Q6_K ? 32 : 0;
}

// One panel's arrays, carved from buf (NULL: only the size).
static size_t carve_panel(rg_int8_panel *p, uint32_t type, char *buf, int64_t K) {
    const int64_t n_sub = K / QK;
    const size_t codes = align64((size_t)n_sub * BLOCK8), sc = align64((size_t)n_sub * PANEL * sizeof(float));
    const int32_t offset = rg_int8_code_offset(type);
    if (buf)
        *p = (rg_int8_panel){type, n_sub, offset, (uint8_t *)buf, (float *)(buf + codes), (float *)(buf + codes + sc),
                             (int32_t *)(buf + codes + 2 * sc)};
    return codes + 4 * sc;
}

static size_t staging_bytes(int64_t K) { return align64((size_t)(K / QK) * Q8_0_BYTES); }

size_t rg_gemm_int8_work(int64_t K, int64_t N, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    return carve_cols(NULL, NULL, K, N) + (size_t)n_threads * (staging_bytes(K) + carve_panel(NULL, 0, NULL, K));
}

bool rg_q8_cols_alloc(rg_q8_cols *c, int64_t K, int64_t N) {
    char *buf = aligned_alloc(64, carve_cols(NULL, NULL, K, N) + 64);
    if (buf) carve_cols(c, buf, K, N);
    return buf != NULL;
}

bool rg_int8_panel_alloc(rg_int8_panel *p, uint32_t type, int64_t K) {
    char *buf = aligned_alloc(64, carve_panel(NULL, type, NULL, K) + 64);
    if (buf) carve_panel(p, type, buf, K);
    return buf != NULL;
}

// Column n: the library's Q8_0 quantizer (so the codes are llama.cpp's) into staging
// (nb * 34 bytes), then split into codes, scales and sums.
static void quantize_col(rg_q8_cols *c, const float *col, int64_t n, uint8_t *staging) {
    rg_quant_get(RG_TYPE_Q8_0)->quantize(col, staging, c->K, NULL);
    for (int64_t b = 0; b < c->nb; b++) {
        const uint8_t *blk = staging + b * Q8_0_BYTES;
        int8_t *q = c->q + n * c->K + b * QK;
        memcpy(q, blk + 2, QK);
        int32_t s = 0, s16 = 0;
        for (int i = 0; i < QK; i++) s += q[i], s16 += i < 16 ? q[i] : 0;
        c->sum16[2 * (n * c->nb + b)] = s16, c->sum16[2 * (n * c->nb + b) + 1] = s - s16;
        const float d = rg_fp16_to_fp32((uint16_t)(blk[0] | blk[1] << 8));
        c->d[n * c->nb + b] = d;
        c->sum[n * c->nb + b] = s;
        c->dsum[n * c->nb + b] = d * (float)s;
    }
}

void rg_q8_cols_quantize(rg_q8_cols *c, const float *x, int64_t ldx) {
    uint8_t *staging = malloc(staging_bytes(c->K));
    if (!staging) abort();  // a test helper; the library's path stages in its scratch
    for (int64_t n = 0; n < c->N; n++) quantize_col(c, x + n * ldx, n, staging);
    free(staging);
}

static void pack_row_q4_0(rg_int8_panel *p, const uint8_t *row, int r) {
    for (int64_t b = 0; b < p->n_sub; b++) {
        const uint8_t *blk = row + b * Q4_0_BYTES;
        for (int j = 0; j < 4; j++) memcpy(p->codes + b * BLOCK4 + j * GROUP + r * 4, blk + 2 + 4 * j, 4);
        p->scale[b * PANEL + r] = rg_fp16_to_fp32((uint16_t)(blk[0] | blk[1] << 8));
        p->min[b * PANEL + r] = 0.0f;
    }
}

// Q5_0, 22 bytes: d f16 @0 | qh u32 @2 (bit i: the fifth bit of code i) | qs[16] @6 as Q4_0's.
// Q8_0, 34 bytes: d f16 @0 | 32 signed codes @2, stored + 128.
static void pack_row_bytes(rg_int8_panel *p, const uint8_t *row, int r) {
    const size_t bytes = p->type == RG_TYPE_Q5_0 ? Q5_0_BYTES : Q8_0_BYTES;
    for (int64_t b = 0; b < p->n_sub; b++) {
        const uint8_t *blk = row + b * bytes;
        uint8_t u[QK];
        if (p->type == RG_TYPE_Q5_0) {
            uint32_t qh;
            memcpy(&qh, blk + 2, 4);
            for (int e = 0; e < QK; e++)
                u[e] = (uint8_t)((e < 16 ? blk[6 + e] & 15 : blk[6 + e - 16] >> 4) | ((qh >> e) & 1) << 4);
        } else {
            for (int e = 0; e < QK; e++) u[e] = (uint8_t)(blk[2 + e] ^ 0x80);
        }
        for (int e = 0; e < QK; e++) p->codes[b * BLOCK8 + (e / 4) * GROUP + r * 4 + e % 4] = u[e];
        p->scale[b * PANEL + r] = rg_fp16_to_fp32((uint16_t)(blk[0] | blk[1] << 8));
        p->min[b * PANEL + r] = 0.0f;
    }
}

// Q6_K, 210 bytes: ql[128] @0 | qh[64] @128 | scales[16] int8 @192 | d f16 @208 (quant_k.c):
// code u = low4 | high2 << 4 (0..63, the value's code + 32), a byte each as Q8_0's; the
// sub-block's scale is d, and its two halves' int8 scales go to sc16.
static void pack_row_q6_K(rg_int8_panel *p, const uint8_t *row, int r) {
    for (int64_t b = 0; b < p->n_sub; b++) {
        const uint8_t *blk = row + (b / 8) * Q6_K_BYTES;
        for (int e = 0; e < QK; e++) {
            const int el = (int)(b % 8) * QK + e, h = el / 128, k = (el % 128) / 32, l = el % 32;
            const int lo = (blk[64 * h + l + 32 * (k & 1)] >> (4 * (k >> 1))) & 15;
            const int hi = (blk[128 + 32 * h + l] >> (2 * k)) & 3;
            p->codes[b * BLOCK8 + (e / 4) * GROUP + r * 4 + e % 4] = (uint8_t)(lo | hi << 4);
        }
        p->scale[b * PANEL + r] = rg_fp16_to_fp32((uint16_t)(blk[208] | blk[209] << 8));
        p->min[b * PANEL + r] = 0.0f;
        p->sc16[(2 * b) * PANEL + r] = (int8_t)blk[192 + 2 * (b % 8)];
        p->sc16[(2 * b + 1) * PANEL + r] = (int8_t)blk[192 + 2 * (b % 8) + 1];
    }
}

static void pack_row_q4_K(rg_int8_panel *p, const uint8_t *row, int r) {
    for (int64_t sb = 0; sb < p->n_sub / 8; sb++) {
        const uint8_t *blk = row + sb * Q4_K_BYTES;
        const float d = rg_fp16_to_fp32((uint16_t)(blk[0] | blk[1] << 8));
        const float dmin = rg_fp16_to_fp32((uint16_t)(blk[2] | blk[3] << 8));
        for (int s = 0; s < 8; s++) {
            int sc, m;
            rg_k4_scale_min(s, blk + 4, &sc, &m);
            p->scale[(sb * 8 + s) * PANEL + r] = d * (float)sc;
            p->min[(sb * 8 + s) * PANEL + r] = dmin * (float)m;
        }
        for (int i = 0; i < 4; i++)
            for (int g = 0; g < 8; g++)
                memcpy(p->codes + (sb * 4 + i) * BLOCK8 + g * GROUP + r * 4, blk + 16 + 32 * i + 4 * g, 4);
    }
}

void rg_int8_panel_pack(rg_int8_panel *p, const void *w, size_t w_stride, int64_t m0, int64_t M) {
    if (p->type != RG_TYPE_Q6_K) memset(p->sc16, 0, sizeof(int32_t) * (size_t)(2 * p->n_sub * PANEL));
    for (int r = 0; r < PANEL; r++) {
        if (m0 + r < M) {
            const uint8_t *row = (const uint8_t *)w + (size_t)(m0 + r) * w_stride;
            if (p->type == RG_TYPE_Q4_0) pack_row_q4_0(p, row, r);
            else if (p->type == RG_TYPE_Q4_K) pack_row_q4_K(p, row, r);
            else if (p->type == RG_TYPE_Q6_K) pack_row_q6_K(p, row, r);
            else pack_row_bytes(p, row, r);
            continue;
        }
        for (int64_t s = 0; s < p->n_sub; s++) {
            p->scale[s * PANEL + r] = p->min[s * PANEL + r] = 0.0f;
            p->sc16[2 * s * PANEL + r] = p->sc16[(2 * s + 1) * PANEL + r] = 0;
        }
        const int64_t groups = p->n_sub * (byte_codes(p->type) ? 8 : 4);
        for (int64_t g = 0; g < groups; g++) memset(p->codes + g * GROUP + r * 4, 0, 4);
    }
}

// The code of row r, element e (0..31) of sub-block s, in the panel's layout.
static int code_at(const rg_int8_panel *p, int64_t s, int r, int e) {
    if (byte_codes(p->type)) return p->codes[s * BLOCK8 + (e / 4) * GROUP + r * 4 + e % 4];
    if (p->type == RG_TYPE_Q4_0) {  // group e % 16 / 4, low nibble for e < 16
        uint8_t byte = p->codes[s * BLOCK4 + (e % 16 / 4) * GROUP + r * 4 + e % 4];
        return e < 16 ? byte & 15 : byte >> 4;
    }
    uint8_t byte = p->codes[(s / 2) * BLOCK8 + (e / 4) * GROUP + r * 4 + e % 4];  // pair s / 2, group e / 4
    return s % 2 ? byte >> 4 : byte & 15;
}

void rg_int8_panel_mul_ref(const rg_int8_panel *p, const rg_q8_cols *c, int rows, float *y, int64_t ldy) {
    for (int64_t n = 0; n < c->N; n++)
        for (int r = 0; r < rows; r++) {
            float acc = 0.0f;
            for (int64_t s = 0; s < p->n_sub; s++) {
                const int8_t *q = c->q + n * c->K + s * QK;
                const int64_t cb = n * c->nb + s;
                int32_t isum = 0;
                if (p->type == RG_TYPE_Q6_K) {  // two halves of 16, each (sum u q - 32 sx) times its int8 scale
                    int32_t ia = 0, ib = 0;
                    for (int e = 0; e < 16; e++) ia += code_at(p, s, r, e) * q[e], ib += code_at(p, s, r, 16 + e) * q[16 + e];
                    isum = p->sc16[2 * s * PANEL + r] * (ia - p->offset * c->sum16[2 * cb]) +
                           p->sc16[(2 * s + 1) * PANEL + r] * (ib - p->offset * c->sum16[2 * cb + 1]);
                    acc = __builtin_fmaf((float)isum, p->scale[s * PANEL + r] * c->d[cb], acc);
                    continue;
                }
                for (int e = 0; e < QK; e++) isum += code_at(p, s, r, e) * q[e];
                if (p->type != RG_TYPE_Q4_K) {
                    acc = __builtin_fmaf((float)(isum - p->offset * c->sum[cb]), p->scale[s * PANEL + r] * c->d[cb], acc);
                } else {
                    acc = __builtin_fmaf((float)isum, p->scale[s * PANEL + r] * c->d[cb], acc);
                    acc = __builtin_fmaf(-p->min[s * PANEL + r], c->dsum[cb], acc);
                }
            }
            y[n * ldy + r] = acc;
        }
}

typedef struct int8_job {
    uint32_t type;
    int64_t K, M;
    const void *w;
    size_t w_stride;
    const float *x;
    int64_t ldx;
    float *y;
    int64_t ldy;
    rg_q8_cols cols;
    char *per_thread;  // [n_threads] staging, then panel
    size_t per_thread_size;
} int8_job;

static void quantize_part(void *arg, int ith, int nth) {
    int8_job *j = arg;
    int64_t n0, n1;
    rg_split_range(j->cols.N, ith, nth, &n0, &n1);
    uint8_t *staging = (uint8_t *)(j->per_thread + (size_t)ith * j->per_thread_size);
    for (int64_t n = n0; n < n1; n++) quantize_col(&j->cols, j->x + n * j->ldx, n, staging);
}

static void panels_part(void *arg, int ith, int nth) {
    int8_job *j = arg;
    const int64_t n_panels = (j->M + PANEL - 1) / PANEL;
    int64_t p0, p1;
    rg_split_range(n_panels, ith, nth, &p0, &p1);
    rg_int8_panel p;
    carve_panel(&p, j->type, j->per_thread + (size_t)ith * j->per_thread_size + staging_bytes(j->K), j->K);
    for (int64_t i = p0; i < p1; i++) {
        const int64_t m0 = i * PANEL;
        const int rows = j->M - m0 < PANEL ? (int)(j->M - m0) : PANEL;
        rg_int8_panel_pack_avx512(&p, j->w, j->w_stride, m0, j->M);
        rg_int8_panel_mul_avx512(&p, &j->cols, rows, j->y + m0, j->ldy);
    }
}

void rg_gemm_int8(rg_threadpool *pool, uint32_t type, int64_t K, int64_t M, int64_t N, const void *w,
                  size_t w_stride, const float *x, int64_t ldx, float *y, int64_t ldy, void *work) {
    int8_job j = {type, K, M, w, w_stride, x, ldx, y, ldy, {0}, NULL,
                  staging_bytes(K) + carve_panel(NULL, type, NULL, K)};
    size_t cols = carve_cols(&j.cols, work, K, N);
    j.per_thread = (char *)work + cols;
    rg_threadpool_run(pool, quantize_part, &j);
    rg_threadpool_run(pool, panels_part, &j);
}
