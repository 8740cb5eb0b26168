// gemm_int8_tiles.c - the path choice, the packing and the driver of the int8 tile GEMM of inference
// prompts (gemm_int8_tiles.h); the kernel is gemm_int8_tiles_kernel.h, built twice (emulated, AMX).
#include "cpu/gemm_int8_tiles.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "cpu/gemm_int8.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"
#include "tensor/quant/quant_legacy_k.h"

enum { QK = 32, Q4_0_BYTES = 18, Q5_0_BYTES = 22, Q8_0_BYTES = 34, Q4_K_BYTES = 144, Q6_K_BYTES = 210 };
enum { ROWS = RG_INT8T_ROWS, COLS = RG_INT8T_COLS, SUB = RG_INT8T_SUB };

static atomic_int cached_path = -1;

static rg_tile_path detect_path(void) {
    if (rg_cpu_has_amx_int8() && rg_int8t_amx_built()) return RG_TILES_AMX;
    const char *e = getenv("RG_TILES_EMULATE");
    if (e && *e && *e != '0') return RG_TILES_EMULATED;
    return RG_TILES_NONE;
}

rg_tile_path rg_int8_tiles_path(void) {
    int v = atomic_load_explicit(&cached_path, memory_order_acquire);
    if (v < 0) {
        v = (int)detect_path();
        atomic_store_explicit(&cached_path, v, memory_order_release);
    }
    return (rg_tile_path)v;
}

static bool type_fits(uint32_t type, int64_t K) {
    if (K <= 0) return false;
    if (type == RG_TYPE_Q4_0 || type == RG_TYPE_Q5_0 || type == RG_TYPE_Q8_0) return K % 32 == 0;
    if (type == RG_TYPE_Q4_K || type == RG_TYPE_Q6_K) return K % 256 == 0;
    return false;
}

bool rg_gemm_int8_tiles_supports(uint32_t type, int64_t K) {
    return type_fits(type, K) && rg_int8_tiles_path() != RG_TILES_NONE;
}

static size_t align64(size_t n) { return (n + 63) / 64 * 64; }

// One panel's arrays carved from buf (NULL: only the size).
static size_t carve_panel(rg_int8t_panel *p, uint32_t type, char *buf, int64_t K) {
    const int64_t n_sub = K / QK;
    const size_t codes = align64((size_t)n_sub * SUB), sc = align64((size_t)n_sub * ROWS * sizeof(float));
    const int32_t offset = rg_int8_code_offset(type);
    if (buf)
        *p = (rg_int8t_panel){type, n_sub, offset, (uint8_t *)buf, (float *)(buf + codes), (float *)(buf + codes + sc),
                              (int32_t *)(buf + codes + 2 * sc)};
    return codes + 4 * sc;
}

// One column group's arrays carved from buf (NULL: only the size).
static size_t carve_cols(rg_int8t_cols *c, char *buf, int64_t K) {
    const int64_t n_sub = K / QK;
    const size_t codes = align64((size_t)n_sub * SUB), a = align64((size_t)n_sub * COLS * 4);
    if (buf)
        *c = (rg_int8t_cols){n_sub, (uint8_t *)buf, (float *)(buf + codes), (int32_t *)(buf + codes + a),
                             (float *)(buf + codes + 2 * a), (int32_t *)(buf + codes + 3 * a)};
    return codes + 5 * a;
}

static size_t staging_bytes(int64_t K) { return align64((size_t)(K / QK) * Q8_0_BYTES); }

bool rg_int8t_panel_alloc(rg_int8t_panel *p, uint32_t type, int64_t K) {
    char *buf = aligned_alloc(64, carve_panel(NULL, type, NULL, K));
    if (buf) carve_panel(p, type, buf, K);
    return buf != NULL;
}

bool rg_int8t_cols_alloc(rg_int8t_cols *c, int64_t K) {
    char *buf = aligned_alloc(64, carve_cols(NULL, NULL, K));
    if (buf) carve_cols(c, buf, K);
    return buf != NULL;
}

// ---------------------------------------------------------------------------
// Packing: the codes of a weight row as bytes, gemm_int8.c's values (the same u, d, sc, m).

static float f16_at(const uint8_t *b) { return rg_fp16_to_fp32((uint16_t)(b[0] | b[1] << 8)); }

// Where code e of sub-block s of panel row r goes.
static uint8_t *code_slot(const rg_int8t_panel *p, int64_t s, int r) {
    return p->codes + s * SUB + (r / 16) * 512 + (r % 16) * 32;
}

// Q4_0, 18 bytes: d f16 @0 | qs[16] @2, code e < 16 in the low nibble of qs[e], 16 + e in the high one.
static void pack_row_q4_0(rg_int8t_panel *p, const uint8_t *row, int r) {
    for (int64_t s = 0; s < p->n_sub; s++) {
        const uint8_t *blk = row + s * Q4_0_BYTES;
        uint8_t *u = code_slot(p, s, r);
        for (int e = 0; e < 16; e++) u[e] = blk[2 + e] & 15, u[16 + e] = blk[2 + e] >> 4;
        p->scale[s * ROWS + r] = f16_at(blk);
    }
}

// Q5_0, 22 bytes: d f16 @0 | qh u32 @2 (bit e: the fifth bit of code e) | qs[16] @6 as Q4_0's.
// Q8_0, 34 bytes: d f16 @0 | 32 signed codes @2, stored + 128.
static void pack_row_q5_0_q8_0(rg_int8t_panel *p, const uint8_t *row, int r) {
    const bool q5 = p->type == RG_TYPE_Q5_0;
    for (int64_t s = 0; s < p->n_sub; s++) {
        const uint8_t *blk = row + s * (q5 ? Q5_0_BYTES : Q8_0_BYTES);
        uint8_t *u = code_slot(p, s, r);
        if (q5) {
            uint32_t qh;
            memcpy(&qh, blk + 2, 4);
            for (int e = 0; e < QK; e++)
                u[e] = (uint8_t)((e < 16 ? blk[6 + e] & 15 : blk[6 + e - 16] >> 4) | ((qh >> e) & 1) << 4);
        } else {
            for (int e = 0; e < QK; e++) u[e] = (uint8_t)(blk[2 + e] ^ 0x80);
        }
        p->scale[s * ROWS + r] = f16_at(blk);
    }
}

// Q4_K, 144 bytes: d f16 @0 | dmin f16 @2 | 12 bytes of 6-bit scales and mins @4 | qs[128] @16:
// the 32 bytes of pair i hold sub-block 2i (low nibbles) and 2i + 1 (high nibbles).
static void pack_row_q4_K(rg_int8t_panel *p, const uint8_t *row, int r) {
    for (int64_t s = 0; s < p->n_sub; s++) {
        const uint8_t *blk = row + (s / 8) * Q4_K_BYTES;
        const int sb = (int)(s % 8);
        const uint8_t *qs = blk + 16 + 32 * (sb / 2);
        uint8_t *u = code_slot(p, s, r);
        for (int e = 0; e < QK; e++) u[e] = (qs[e] >> (4 * (sb % 2))) & 15;
        int sc, m;
        rg_k4_scale_min(sb, blk + 4, &sc, &m);
        p->scale[s * ROWS + r] = f16_at(blk) * (float)sc;
        p->min[s * ROWS + r] = f16_at(blk + 2) * (float)m;
    }
}

// Q6_K, 210 bytes: ql[128] @0 | qh[64] @128 | scales[16] int8 @192 | d f16 @208 (quant_k.c): code
// u = low4 | high2 << 4 (0..63, the value's code + 32); d is the sub-block's scale, its halves'
// int8 scales go to sc16.
static void pack_row_q6_K(rg_int8t_panel *p, const uint8_t *row, int r) {
    for (int64_t s = 0; s < p->n_sub; s++) {
        const uint8_t *blk = row + (s / 8) * Q6_K_BYTES;
        uint8_t *u = code_slot(p, s, r);
        for (int e = 0; e < QK; e++) {
            const int el = (int)(s % 8) * QK + e, h = el / 128, k = (el % 128) / 32, l = el % 32;
            const int lo = (blk[64 * h + l + 32 * (k & 1)] >> (4 * (k >> 1))) & 15;
            const int hi = (blk[128 + 32 * h + l] >> (2 * k)) & 3;
            u[e] = (uint8_t)(lo | hi << 4);
        }
        p->scale[s * ROWS + r] = f16_at(blk + 208);
        p->sc16[(2 * s) * ROWS + r] = (int8_t)blk[192 + 2 * (s % 8)];
        p->sc16[(2 * s + 1) * ROWS + r] = (int8_t)blk[192 + 2 * (s % 8) + 1];
    }
}

void rg_int8t_panel_pack(rg_int8t_panel *p, const void *w, size_t w_stride, int64_t m0, int64_t M) {
    const size_t n = (size_t)p->n_sub * ROWS;
    memset(p->scale, 0, n * sizeof(float));
    memset(p->min, 0, n * sizeof(float));
    memset(p->sc16, 0, 2 * n * sizeof(int32_t));
    for (int r = 0; r < ROWS; r++) {
        if (m0 + r >= M) {
            for (int64_t s = 0; s < p->n_sub; s++) memset(code_slot(p, s, r), 0, QK);
            continue;
        }
        const uint8_t *row = (const uint8_t *)w + (size_t)(m0 + r) * w_stride;
        if (p->type == RG_TYPE_Q4_0) pack_row_q4_0(p, row, r);
        else if (p->type == RG_TYPE_Q4_K) pack_row_q4_K(p, row, r);
        else if (p->type == RG_TYPE_Q6_K) pack_row_q6_K(p, row, r);
        else pack_row_q5_0_q8_0(p, row, r);
    }
}

// Column j of the group: quantized by the library's Q8_0 quantizer into staging (gemm_int8.c's
// codes, scales and sums), its codes put in the B layout.
void rg_int8t_cols_pack(rg_int8t_cols *c, const float *x, int64_t ldx, int64_t n0, int64_t N, uint8_t *staging) {
    const int64_t K = c->n_sub * QK;
    for (int j = 0; j < COLS; j++) {
        const bool live = n0 + j < N;
        if (live) rg_quant_get(RG_TYPE_Q8_0)->quantize(x + (n0 + j) * ldx, staging, K, NULL);
        for (int64_t s = 0; s < c->n_sub; s++) {
            const uint8_t *blk = staging + s * Q8_0_BYTES;
            uint8_t *dst = c->codes + s * SUB + (j / 16) * 512 + (j % 16) * 4;
            int32_t sum = 0, s16 = 0;
            for (int e = 0; e < QK; e++) {
                const int8_t q = live ? (int8_t)blk[2 + e] : 0;
                dst[(e / 4) * 64 + e % 4] = (uint8_t)q;
                sum += q, s16 += e < 16 ? q : 0;
            }
            const float d = live ? f16_at(blk) : 0.0f;
            c->d[s * COLS + j] = d;
            c->sum[s * COLS + j] = sum;
            c->dsum[s * COLS + j] = d * (float)sum;
            c->sum16[(2 * s) * COLS + j] = s16;
            c->sum16[(2 * s + 1) * COLS + j] = sum - s16;
        }
    }
}

// ---------------------------------------------------------------------------
// The driver: the columns quantized and packed once (split over the threads by groups), then
// each thread packs its panels of 32 weight rows and multiplies each by every column group.

size_t rg_gemm_int8_tiles_work(int64_t K, int64_t N, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    const size_t groups = (size_t)((N + COLS - 1) / COLS);
    return groups * carve_cols(NULL, NULL, K) + (size_t)n_threads * (staging_bytes(K) + carve_panel(NULL, 0, NULL, K));
}

typedef struct int8t_job {
    rg_tile_path path;
    uint32_t type;
    int64_t K, M, N;
    const void *w;
    size_t w_stride;
    const float *x;
    int64_t ldx;
    float *y;
    int64_t ldy;
    char *groups;       // [n_groups] carved column groups
    size_t group_size;
    char *per_thread;   // [n_threads] staging, then a panel
    size_t per_thread_size;
} int8t_job;

static void cols_part(void *arg, int ith, int nth) {
    int8t_job *j = arg;
    int64_t g0, g1;
    rg_split_range((j->N + COLS - 1) / COLS, ith, nth, &g0, &g1);
    uint8_t *staging = (uint8_t *)(j->per_thread + (size_t)ith * j->per_thread_size);
    for (int64_t g = g0; g < g1; g++) {
        rg_int8t_cols c;
        carve_cols(&c, j->groups + (size_t)g * j->group_size, j->K);
        rg_int8t_cols_pack(&c, j->x, j->ldx, g * COLS, j->N, staging);
    }
}

// Work items are (panel, share of the column groups): one share per panel when there are at least as
// many panels as threads, else enough shares to give every thread one (each packs its panel itself).
static void panels_part(void *arg, int ith, int nth) {
    int8t_job *j = arg;
    const int64_t n_panels = (j->M + ROWS - 1) / ROWS, n_groups = (j->N + COLS - 1) / COLS;
    if (n_panels == 0 || n_groups == 0) return;
    int64_t shares = n_panels >= nth ? 1 : (nth + n_panels - 1) / n_panels;
    if (shares > n_groups) shares = n_groups;
    int64_t i0, i1, packed = -1;
    rg_split_range(n_panels * shares, ith, nth, &i0, &i1);
    rg_int8t_panel p;
    carve_panel(&p, j->type, j->per_thread + (size_t)ith * j->per_thread_size + staging_bytes(j->K), j->K);
    for (int64_t i = i0; i < i1; i++) {
        const int64_t panel = i / shares, m0 = panel * ROWS;
        const int rows = j->M - m0 < ROWS ? (int)(j->M - m0) : ROWS;
        if (panel != packed) rg_int8t_panel_pack(&p, j->w, j->w_stride, m0, j->M), packed = panel;
        int64_t g0, g1;
        rg_split_range(n_groups, (int)(i % shares), (int)shares, &g0, &g1);
        for (int64_t g = g0; g < g1; g++) {
            rg_int8t_cols c;
            carve_cols(&c, j->groups + (size_t)g * j->group_size, j->K);
            const int cols = j->N - g * COLS < COLS ? (int)(j->N - g * COLS) : COLS;
            float *y = j->y + g * COLS * j->ldy + m0;
            if (j->path == RG_TILES_AMX) rg_int8t_mul_amx(&p, &c, rows, cols, y, j->ldy);
            else rg_int8t_mul_emu(&p, &c, rows, cols, y, j->ldy);
        }
    }
}

void rg_gemm_int8_tiles(rg_threadpool *pool, rg_tile_path path, uint32_t type, int64_t K, int64_t M, int64_t N,
                        const void *w, size_t w_stride, const float *x, int64_t ldx, float *y, int64_t ldy,
                        void *work) {
    const size_t group_size = carve_cols(NULL, NULL, K), groups = (size_t)((N + COLS - 1) / COLS);
    int8t_job j = {path, type, K, M, N, w, w_stride, x, ldx, y, ldy, work, group_size,
                   (char *)work + groups * group_size, staging_bytes(K) + carve_panel(NULL, type, NULL, K)};
    rg_threadpool_run(pool, cols_part, &j);
    rg_threadpool_run(pool, panels_part, &j);
}
