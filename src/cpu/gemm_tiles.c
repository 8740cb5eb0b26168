// gemm_tiles.c - the path choice and the portable reference of the BF16 products (gemm_tiles.h).
// rg_gemm_tiles_run is, for now, the reference on one thread; the tile kernels replace it.
#include "cpu/gemm_tiles.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/error.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"

static atomic_int cached_path = -1;

static rg_tile_path detect_path(void) {
    if (rg_cpu_has_amx_bf16()) return RG_TILES_AMX;
    if (rg_cpu_has_avx512_bf16()) return RG_TILES_AVX512;
    const char *e = getenv("RG_TILES_EMULATE");
    if (e && *e && *e != '0') return RG_TILES_EMULATED;
    return RG_TILES_NONE;
}

rg_tile_path rg_gemm_tiles_path(void) {
    int v = atomic_load_explicit(&cached_path, memory_order_acquire);
    if (v < 0) {
        v = (int)detect_path();
        atomic_store_explicit(&cached_path, v, memory_order_release);
    }
    return (rg_tile_path)v;
}

const char *rg_tile_path_name(rg_tile_path path) {
    switch (path) {
        case RG_TILES_AMX: return "amx";
        case RG_TILES_AVX512: return "avx512_bf16";
        case RG_TILES_EMULATED: return "emulated";
        default: return "none";
    }
}

const char *rg_gemm_tiles_missing(void) {
    static char why[320];
    if (rg_gemm_tiles_path() != RG_TILES_NONE) return "";
    snprintf(why, sizeof why,
             "this CPU has neither AMX-BF16 (TDPBF16PS: %s) nor AVX512_BF16 (VDPBF16PS%s)", rg_cpu_amx_reason(),
             rg_cpu_has_avx512_vnni() ? "" : ", nor AVX-512 at all");
    return why;
}

// ---------------------------------------------------------------------------
// The reference.

static float daz(float x) { return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x; }
// fl(acc + a * b) as the instructions do it: inputs read with denormals as zero, one rounding
// to nearest even (the product is exact), a denormal result flushed to zero.
static float fma_ftz(float a, float b, float acc) { return daz(fmaf(daz(a), daz(b), daz(acc))); }
static float add_ftz(float a, float b) { return daz(daz(a) + daz(b)); }
static float to_bf16(float x) { return rg_bf16_to_fp32(rg_fp32_to_bf16(x)); }

// Element (k, j) of B for product prob, decoded to F32 through row (a scratch of one row).
typedef struct b_reader {
    const rg_gemm_batch *bt;
    const rg_gemm_problem *p;
    rg_dequant_fn dequant;
    float *row;
    int64_t row_idx;  // the row decoded in `row`, -1 for none
} b_reader;

static float b_at(b_reader *r, int64_t k, int64_t j) {
    const rg_gemm_b *b = &r->p->b;
    if (r->bt->b_type == RG_TYPE_F32) return ((const float *)b->data)[k * b->rs + j * b->cs];
    const int64_t ri = b->rows_along_k ? j : k, len = b->rows_along_k ? r->bt->K : r->bt->N;
    if (r->row_idx != ri) {
        r->dequant((const uint8_t *)b->data + (size_t)ri * b->row_stride, r->row, len);
        r->row_idx = ri;
    }
    return r->row[b->rows_along_k ? k : j];
}

static float a_at(const rg_gemm_problem *p, int64_t i, int64_t k) { return p->a[i * p->a_rs + k * p->a_cs]; }

static float ref_amx(const rg_gemm_batch *bt, const rg_gemm_problem *p, b_reader *br, int64_t i, int64_t j) {
    float c = bt->accumulate ? p->c[i * p->ldc + j] : 0.0f;
    for (int64_t k0 = 0; k0 < bt->K; k0 += 32) {
        float e = 0.0f, o = 0.0f;
        for (int q = 0; q < 16; q++) {
            const int64_t k = k0 + 2 * q;
            const float a0 = k < bt->K ? to_bf16(a_at(p, i, k)) : 0.0f, b0 = k < bt->K ? to_bf16(b_at(br, k, j)) : 0.0f;
            const float a1 = k + 1 < bt->K ? to_bf16(a_at(p, i, k + 1)) : 0.0f;
            const float b1 = k + 1 < bt->K ? to_bf16(b_at(br, k + 1, j)) : 0.0f;
            e = fma_ftz(a0, b0, e);
            o = fma_ftz(a1, b1, o);
        }
        c = add_ftz(c, add_ftz(e, o));
    }
    return c;
}

static float ref_avx512(const rg_gemm_batch *bt, const rg_gemm_problem *p, b_reader *br, int64_t i, int64_t j) {
    float acc = bt->accumulate ? p->c[i * p->ldc + j] : 0.0f;
    for (int64_t k = 0; k < bt->K; k += 2) {
        const float a0 = to_bf16(a_at(p, i, k)), b0 = to_bf16(b_at(br, k, j));
        const float a1 = k + 1 < bt->K ? to_bf16(a_at(p, i, k + 1)) : 0.0f;
        const float b1 = k + 1 < bt->K ? to_bf16(b_at(br, k + 1, j)) : 0.0f;
        acc = fma_ftz(a1, b1, acc);
        acc = fma_ftz(a0, b0, acc);
    }
    return acc;
}

rg_status rg_gemm_tiles_ref(rg_tile_path path, const rg_gemm_batch *bt, rg_error *err) {
    if (path == RG_TILES_NONE) return rg_fail(err, RG_ERR_ARG, "gemm tiles: no path to take the reference of");
    if (bt->M < 0 || bt->N < 0 || bt->K < 0 || bt->n_problems < 0)
        return rg_fail(err, RG_ERR_ARG, "gemm tiles: negative size M=%lld N=%lld K=%lld", (long long)bt->M,
                       (long long)bt->N, (long long)bt->K);
    rg_dequant_fn dq = NULL;
    if (bt->b_type != RG_TYPE_F32) {
        dq = rg_quant_get(bt->b_type) ? rg_quant_get(bt->b_type)->dequant : NULL;
        if (!dq) return rg_fail(err, RG_ERR_UNSUPPORTED, "gemm tiles: type %u has no dequantizer", bt->b_type);
    }
    const int64_t len = bt->b_rows_along_k ? bt->K : bt->N;
    float *row = dq ? malloc((size_t)(len > 0 ? len : 1) * sizeof(float)) : NULL;
    if (dq && !row) return rg_fail(err, RG_ERR_NOMEM, "gemm tiles: no memory for a row of %lld", (long long)len);
    for (int64_t pi = 0; pi < bt->n_problems; pi++) {
        rg_gemm_problem p;
        bt->get(bt->ctx, pi, &p);
        b_reader br = {bt, &p, dq, row, -1};
        for (int64_t j = 0; j < bt->N; j++)
            for (int64_t i = 0; i < bt->M; i++)
                p.c[i * p.ldc + j] = path == RG_TILES_AVX512 ? ref_avx512(bt, &p, &br, i, j) : ref_amx(bt, &p, &br, i, j);
    }
    free(row);
    return RG_OK;
}

size_t rg_gemm_tiles_work_size(const rg_gemm_batch *batch, int n_threads) {
    (void)batch, (void)n_threads;
    return 0;
}

rg_status rg_gemm_tiles_run(rg_threadpool *pool, rg_tile_path path, const rg_gemm_batch *bt, void *work,
                            size_t work_size, rg_error *err) {
    (void)pool, (void)work, (void)work_size;
    if (path == RG_TILES_NONE || (path == RG_TILES_AMX && !rg_cpu_has_amx_bf16()) ||
        (path == RG_TILES_AVX512 && !rg_cpu_has_avx512_bf16()))
        return rg_fail(err, RG_ERR_UNSUPPORTED, "gemm tiles: path %s cannot run here: %s", rg_tile_path_name(path),
                       rg_gemm_tiles_missing());
    return rg_gemm_tiles_ref(path, bt, err);
}
