// gemm_tiles.c - the BF16 products of gemm_tiles.h: the path choice, the portable reference of
// both sum orders, and the driver of the kernels: packing, blocking, the split over the pool.
//
// Blocking, per thread and product (the thread owns rows [i0, i1) x columns [j0, j1) of C):
//
//   for ic over the rows by MB:                 256 rows, or all of them (below)
//     for kc over K by KB:                      512 of K (16 tile steps)
//       pack A[ic:ic+MB, kc:kc+KB]  -> ap       [MB/16 tiles][16 steps][16][32] BF16 (256 KB)
//       for jc over the columns by NB:          256 columns
//         pack B[kc:kc+KB, jc:jc+NB] -> bp      [NB/16 tiles][16 steps][16 pairs][16][2] (256 KB)
//         the kernel: C[ic.., jc..] (+)= ap . bp, 32 x 32 of C a pass, the K steps in order
//
// so A and B blocks together stay within half of Sapphire Rapids' 2 MB L2 and a column pair of
// B tiles (32 KB over 16 steps) within its 48 KB L1. B is packed once per MB rows: when the
// packed A of all of a product's rows for one K block fits 1 MB (2048 rows at K = 256: a weight
// gradient over 256 tokens), MB is all the rows, so A and B are each packed once. C holds the running sum between K blocks
// (stored and loaded as F32: exact), so each C(i, j) is one thread's sum over all of K in the
// documented order and the bits do not depend on the blocking or the thread count.
//
// Packing rounds A and B to BF16 (nearest even); a typed B is decoded to F32 first, 32 rows or 32
// columns at a time, in whole blocks of its type. K, rows and columns are padded with zeros to
// whole tiles (K to 32, rows and columns to 32: the kernel works on pairs of tiles).
#include "cpu/gemm_tiles.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/error.h"
#include "tensor/half_bits.h"
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

// ---------------------------------------------------------------------------
// Packing.

#define MB 256
#define A_FULL_BYTES (1 << 20)  // a packed A block of all the rows, when it fits
#define KB 512
#define NB 256
#define TILE RG_TILES_TILE_ELEMS

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }

static inline uint16_t bf16_of(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return rg_bf16_from_f32_bits(u);
}

// A(i0 + r, k0 + k) for r < mn, k < kn -> m_tiles x n_steps packed tiles (zero past mn, kn).
static void pack_a(const rg_gemm_problem *p, int64_t i0, int64_t mn, int64_t k0, int64_t kn, int64_t m_tiles,
                   int64_t n_steps, uint16_t *dst, int64_t mt_stride) {
    for (int64_t mt = 0; mt < m_tiles; mt++)
        for (int64_t s = 0; s < n_steps; s++) {
            uint16_t *tile = dst + mt * mt_stride + s * TILE;
            const int64_t kk = min64(RG_TILES_KSTEP, kn - s * RG_TILES_KSTEP);
            const int64_t rows = mn - mt * 16 < 0 ? 0 : min64(16, mn - mt * 16);
            if (p->a_rs == 1 && p->a_cs != 1 && rows > 0 && kk > 0) {
                // Columns of A contiguous (dY in a weight gradient): 16 rows of each column at once.
                memset(tile, 0, TILE * sizeof(uint16_t));
                for (int64_t k = 0; k < kk; k++) {
                    const float *col = p->a + i0 + mt * 16 + (k0 + s * RG_TILES_KSTEP + k) * p->a_cs;
                    for (int64_t r = 0; r < rows; r++) tile[r * 32 + k] = bf16_of(col[r]);
                }
                continue;
            }
            for (int r = 0; r < 16; r++) {
                uint16_t *row = tile + r * 32;
                const int64_t i = mt * 16 + r;
                int64_t k = 0;
                if (i < mn && kk > 0) {
                    const float *src = p->a + (i0 + i) * p->a_rs + (k0 + s * RG_TILES_KSTEP) * p->a_cs;
                    if (p->a_cs == 1)
                        for (; k < kk; k++) row[k] = bf16_of(src[k]);
                    else
                        for (; k < kk; k++) row[k] = bf16_of(src[k * p->a_cs]);
                }
                for (; k < 32; k++) row[k] = 0;
            }
        }
}

// B(k, j) = src[k * rs + j * cs] for k < kn, j < jn -> n_tiles x n_steps packed tiles (zero past).
static void pack_b_f32(const float *src, int64_t rs, int64_t cs, int64_t kn, int64_t jn, int64_t n_tiles,
                       int64_t n_steps, uint16_t *dst, int64_t nt_stride) {
    for (int64_t nt = 0; nt < n_tiles; nt++)
        for (int64_t s = 0; s < n_steps; s++) {
            uint16_t *tile = dst + nt * nt_stride + s * TILE;
            const int64_t k0 = s * RG_TILES_KSTEP, j0 = nt * 16;
            const int kk = (int)(kn - k0 < 0 ? 0 : min64(32, kn - k0)), jj = (int)(jn - j0 < 0 ? 0 : min64(16, jn - j0));
            if (kk < 32 || jj < 16) memset(tile, 0, TILE * sizeof(uint16_t));
            if (cs == 1) {
                // Rows of B contiguous: 16 floats of row k to lane k % 2 of every column.
                for (int k = 0; k < kk; k++) {
                    const float *row = src + (k0 + k) * rs + j0;
                    uint16_t *d = tile + (k / 2) * 32 + (k % 2);
                    for (int j = 0; j < jj; j++) d[2 * j] = bf16_of(row[j]);
                }
            } else {
                // Columns of B contiguous (rs == 1, a weight's rows along K) or neither.
                for (int j = 0; j < jj; j++) {
                    const float *col = src + k0 * rs + (j0 + j) * cs;
                    uint16_t *d = tile + 2 * j;
                    for (int k = 0; k < kk; k++) d[(k / 2) * 32 + (k % 2)] = bf16_of(col[k * rs]);
                }
            }
        }
}

// BF16 rows along K (a BF16 weight in MUL_MAT): each pair (k, k + 1) of row j is already the
// pair the tile wants; copied as 32-bit words, a NaN quieted as the rounding would.
static void pack_b_bf16_rows(const char *rows, size_t row_stride, int64_t k0, int64_t kn, int64_t j0, int64_t jn,
                             int64_t n_tiles, int64_t n_steps, uint16_t *dst, int64_t nt_stride) {
    for (int64_t nt = 0; nt < n_tiles; nt++)
        for (int64_t s = 0; s < n_steps; s++) {
            uint16_t *tile = dst + nt * nt_stride + s * TILE;
            const int64_t ks = s * RG_TILES_KSTEP, jt = nt * 16;
            const int kk = (int)(kn - ks < 0 ? 0 : min64(32, kn - ks)), jj = (int)(jn - jt < 0 ? 0 : min64(16, jn - jt));
            if (kk < 32 || jj < 16) memset(tile, 0, TILE * sizeof(uint16_t));
            for (int j = 0; j < jj; j++) {
                const uint16_t *src = (const uint16_t *)(rows + (size_t)(j0 + jt + j) * row_stride) + k0 + ks;
                for (int k = 0; k < kk; k++) {
                    uint16_t h = src[k];
                    if ((h & 0x7FFF) > 0x7F80) h |= 0x0040;
                    tile[(k / 2) * 32 + 2 * j + (k % 2)] = h;
                }
            }
        }
}

// ---------------------------------------------------------------------------
// The driver.

typedef void (*block_fn)(const rg_tiles_block *blk);

typedef struct tiles_sizes {
    int64_t mb, kb, nb;          // the blocking clipped to the problem (multiples of 32)
    int64_t tmp_ld, tmp_rows;    // decoded rows of a typed B
    size_t per_thread;           // bytes
} tiles_sizes;

typedef struct tiles_job {
    const rg_gemm_batch *bt;
    block_fn kernel;
    rg_dequant_fn dequant;
    int64_t bs;
    size_t type_size;
    tiles_sizes sz;
    char *work;
    bool whole_problems;
    const uint16_t *packed;      // a pre-packed B (rg_gemm_tiles_pack_b), or NULL to pack per block
    int64_t packed_nt_stride;    // its tile stride: ceil(K / 32) steps of tiles
    int64_t packed_per_problem;  // its elements per problem
} tiles_job;

static size_t lines_bytes(size_t n) { return (n + 63) / 64 * 64; }

static tiles_sizes tiles_plan(const rg_gemm_batch *bt) {
    tiles_sizes s;
    s.kb = min64(KB, round_up(bt->K > 0 ? bt->K : 1, 32));
    s.mb = round_up(bt->M > 0 ? bt->M : 1, 32);
    if (s.mb > MB && s.mb * s.kb * 2 > A_FULL_BYTES) s.mb = MB;
    s.nb = min64(NB, round_up(bt->N > 0 ? bt->N : 1, 32));
    s.tmp_ld = s.tmp_rows = 0;
    if (bt->b_type != RG_TYPE_F32) {
        const rg_type_traits *tt = rg_type_get(bt->b_type);
        int64_t bs = tt && tt->block_size > 0 ? tt->block_size : 1;
        // A slice widened to whole blocks spans at most len + 2 (bs - 1); 32 rows of it at a time.
        s.tmp_ld = round_up((bt->b_rows_along_k ? s.kb : s.nb) + 2 * bs, 16);
        s.tmp_rows = 32;
    }
    s.per_thread = lines_bytes((size_t)(s.mb * s.kb) * 2) + lines_bytes((size_t)(s.nb * s.kb) * 2) +
                   lines_bytes(32 * 32 * sizeof(float)) + lines_bytes((size_t)(s.tmp_ld * s.tmp_rows) * sizeof(float));
    return s;
}

// B[kc:kc+kn, jc:jc+jn] of problem p -> bp (n_tiles x n_steps tiles, nt_stride apart).
static void pack_b(const tiles_job *jb, const rg_gemm_problem *p, int64_t kc, int64_t kn, int64_t jc, int64_t jn,
                   int64_t n_tiles, int64_t n_steps, uint16_t *bp, int64_t nt_stride, float *tmp) {
    const rg_gemm_batch *bt = jb->bt;
    const rg_gemm_b *b = &p->b;
    if (b->type == RG_TYPE_F32) {
        pack_b_f32((const float *)b->data + kc * b->rs + jc * b->cs, b->rs, b->cs, kn, jn, n_tiles, n_steps, bp,
                   nt_stride);
        return;
    }
    const char *rows = (const char *)b->data;
    const int64_t ld = jb->sz.tmp_ld, bs = jb->bs;
    if (b->rows_along_k && b->type == RG_TYPE_BF16 && b->row_stride % 2 == 0) {
        pack_b_bf16_rows(rows, b->row_stride, kc, kn, jc, jn, n_tiles, n_steps, bp, nt_stride);
        return;
    }
    if (b->rows_along_k) {
        // B(k, j) = row j [k]: 32 rows' slices [lo, hi) decoded, then packed as a column-contiguous B.
        const int64_t lo = kc - kc % bs, hi = min64(round_up(kc + kn, bs), bt->K);
        const size_t boff = (size_t)(lo / bs) * jb->type_size;
        for (int64_t g = 0; g < n_tiles; g += 2) {
            const int64_t jg = g * 16, n = jn - jg < 0 ? 0 : min64(32, jn - jg);
            for (int64_t j = 0; j < n; j++) jb->dequant(rows + (size_t)(jc + jg + j) * b->row_stride + boff, tmp + j * ld, hi - lo);
            pack_b_f32(tmp + (kc - lo), 1, ld, kn, n, 2, n_steps, bp + g * nt_stride, nt_stride);
        }
    } else {
        // B(k, j) = row k [j]: a step's 32 rows' slices [lo, hi) decoded, then packed as a row-contiguous B.
        const int64_t lo = jc - jc % bs, hi = min64(round_up(jc + jn, bs), bt->N);
        const size_t boff = (size_t)(lo / bs) * jb->type_size;
        for (int64_t s = 0; s < n_steps; s++) {
            const int64_t ks = s * RG_TILES_KSTEP, n = kn - ks < 0 ? 0 : min64(32, kn - ks);
            for (int64_t k = 0; k < n; k++) jb->dequant(rows + (size_t)(kc + ks + k) * b->row_stride + boff, tmp + k * ld, hi - lo);
            pack_b_f32(tmp + (jc - lo), ld, 1, n, jn, n_tiles, 1, bp + s * TILE, nt_stride);
        }
    }
}

// Rows [i0, i1) x columns [j0, j1) of problem p, over all of K.
static void tiles_share(const tiles_job *jb, int64_t pi, const rg_gemm_problem *p, int64_t i0, int64_t i1, int64_t j0,
                        int64_t j1, char *ws) {
    const rg_gemm_batch *bt = jb->bt;
    if (i0 >= i1 || j0 >= j1) return;
    if (bt->K == 0) {
        if (!bt->accumulate)
            for (int64_t i = i0; i < i1; i++) memset(p->c + i * p->ldc + j0, 0, sizeof(float) * (size_t)(j1 - j0));
        return;
    }
    const tiles_sizes *sz = &jb->sz;
    uint16_t *ap = (uint16_t *)ws;
    uint16_t *bp = (uint16_t *)(ws + lines_bytes((size_t)(sz->mb * sz->kb) * 2));
    float *stage = (float *)((char *)bp + lines_bytes((size_t)(sz->nb * sz->kb) * 2));
    float *tmp = stage + 32 * 32;
    for (int64_t ic = i0; ic < i1; ic += sz->mb) {
        const int64_t mn = min64(sz->mb, i1 - ic), m_tiles = round_up(mn, 32) / 16;
        for (int64_t kc = 0; kc < bt->K; kc += sz->kb) {
            const int64_t kn = min64(sz->kb, bt->K - kc), n_steps = ceil_div(kn, RG_TILES_KSTEP);
            pack_a(p, ic, mn, kc, kn, m_tiles, n_steps, ap, n_steps * TILE);
            for (int64_t jc = j0; jc < j1; jc += sz->nb) {
                const int64_t jn = min64(sz->nb, j1 - jc), n_tiles = round_up(jn, 32) / 16;
                const uint16_t *bt_tiles = bp;
                int64_t b_stride = n_steps * TILE;
                if (jb->packed) {
                    // jc and kc are multiples of 32: whole tiles of the packed B
                    bt_tiles = jb->packed + pi * jb->packed_per_problem + (jc / 16) * jb->packed_nt_stride +
                               (kc / RG_TILES_KSTEP) * TILE;
                    b_stride = jb->packed_nt_stride;
                } else {
                    pack_b(jb, p, kc, kn, jc, jn, n_tiles, n_steps, bp, b_stride, tmp);
                }
                const rg_tiles_block blk = {ap, n_steps * TILE, bt_tiles, b_stride, m_tiles, n_tiles, n_steps,
                                            ceil_div(kn, 2), p->c + ic * p->ldc + jc, p->ldc, mn, jn,
                                            bt->accumulate || kc > 0, stage};
                jb->kernel(&blk);
            }
        }
    }
}

// Thread ith's block of one product: 32-row or 32-column units of the larger side that has
// enough of them for every thread (a typed B prefers columns: each thread decodes its own part).
static void split_share(const rg_gemm_batch *bt, int ith, int nth, int64_t *i0, int64_t *i1, int64_t *j0, int64_t *j1) {
    const int64_t nbn = ceil_div(bt->N, 32), nbm = ceil_div(bt->M, 32);
    int64_t u0, u1;
    *i0 = 0, *i1 = bt->M, *j0 = 0, *j1 = bt->N;
    if (nth == 1) return;
    const bool by_cols = bt->b_type != RG_TYPE_F32 ? nbn >= nth || nbn >= nbm : (nbn >= nbm && nbn >= nth) || nbm < nth;
    if (by_cols) {
        rg_split_range(nbn, ith, nth, &u0, &u1);
        *j0 = min64(u0 * 32, bt->N), *j1 = min64(u1 * 32, bt->N);
    } else {
        rg_split_range(nbm, ith, nth, &u0, &u1);
        *i0 = min64(u0 * 32, bt->M), *i1 = min64(u1 * 32, bt->M);
    }
}

static void problem_share(const tiles_job *jb, int64_t pi, int ith, int nth, char *ws) {
    rg_gemm_problem p;
    jb->bt->get(jb->bt->ctx, pi, &p);
    int64_t i0, i1, j0, j1;
    split_share(jb->bt, ith, nth, &i0, &i1, &j0, &j1);
    tiles_share(jb, pi, &p, i0, i1, j0, j1, ws);
}

static void tiles_thread(void *arg, int ith, int nth) {
    const tiles_job *jb = arg;
    char *ws = jb->work + (size_t)ith * jb->sz.per_thread;
    if (jb->whole_problems) {
        // Whole problems while every thread gets as many, then the rest split over all threads.
        int64_t p0, p1, n_whole = jb->bt->n_problems / nth * nth;
        rg_split_range(n_whole, ith, nth, &p0, &p1);
        for (int64_t p = p0; p < p1; p++) problem_share(jb, p, 0, 1, ws);
        for (int64_t p = n_whole; p < jb->bt->n_problems; p++) problem_share(jb, p, ith, nth, ws);
    } else {
        for (int64_t p = 0; p < jb->bt->n_problems; p++) problem_share(jb, p, ith, nth, ws);
    }
}

size_t rg_gemm_tiles_work_size(const rg_gemm_batch *batch, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    if (batch->M <= 0 || batch->N <= 0 || batch->n_problems <= 0) return 0;
    return tiles_plan(batch).per_thread * (size_t)n_threads;
}

static bool path_runs_here(rg_tile_path path) {
    switch (path) {
        case RG_TILES_AMX: return rg_gemm_tiles_amx_built && rg_cpu_has_amx_bf16();
        case RG_TILES_AVX512: return rg_gemm_tiles_avx512_built && rg_cpu_has_avx512_bf16();
        case RG_TILES_EMULATED: return true;
        default: return false;
    }
}

// The checks and the per-type setup shared by running and packing.
static rg_status job_init(tiles_job *jb, const rg_gemm_batch *bt, rg_error *err) {
    if (bt->M < 0 || bt->N < 0 || bt->K < 0 || bt->n_problems < 0)
        return rg_fail(err, RG_ERR_ARG, "gemm tiles: negative size M=%lld N=%lld K=%lld problems=%lld",
                       (long long)bt->M, (long long)bt->N, (long long)bt->K, (long long)bt->n_problems);
    memset(jb, 0, sizeof *jb);
    jb->bt = bt;
    jb->bs = 1;
    jb->type_size = sizeof(float);
    if (bt->b_type != RG_TYPE_F32) {
        const rg_type_traits *tt = rg_type_get(bt->b_type);
        const rg_quant_ops *qo = rg_quant_get(bt->b_type);
        jb->dequant = qo ? qo->dequant : NULL;
        if (!tt || !jb->dequant || tt->block_size < 1)
            return rg_fail(err, RG_ERR_UNSUPPORTED, "gemm tiles: weight type %s has no dequantizer",
                           tt ? tt->name : "?");
        jb->bs = tt->block_size, jb->type_size = tt->type_size;
        const int64_t row_len = bt->b_rows_along_k ? bt->K : bt->N;
        if (row_len % jb->bs)
            return rg_fail(err, RG_ERR_ARG, "gemm tiles: %s rows of %lld elements are not whole blocks of %lld",
                           tt->name, (long long)row_len, (long long)jb->bs);
    }
    jb->sz = tiles_plan(bt);
    jb->packed_nt_stride = ceil_div(bt->K, RG_TILES_KSTEP) * TILE;
    jb->packed_per_problem = round_up(bt->N, 32) / 16 * jb->packed_nt_stride;
    return RG_OK;
}

static rg_status run_job(rg_threadpool *pool, rg_tile_path path, const rg_gemm_batch *bt, const void *packed,
                         void *work, size_t work_size, rg_error *err) {
    if (!path_runs_here(path))
        return rg_fail(err, RG_ERR_UNSUPPORTED, "gemm tiles: path %s cannot run here: %s", rg_tile_path_name(path),
                       path == RG_TILES_NONE || rg_gemm_tiles_path() == RG_TILES_NONE ? rg_gemm_tiles_missing()
                                                                                     : "this build lacks its kernel");
    tiles_job jb;
    rg_status st = job_init(&jb, bt, err);
    if (st != RG_OK) return st;
    if (bt->M == 0 || bt->N == 0 || bt->n_problems == 0) return RG_OK;
    jb.kernel = path == RG_TILES_AMX ? rg_gemm_tiles_block_amx
                : path == RG_TILES_AVX512 ? rg_gemm_tiles_block_avx512
                                          : rg_gemm_tiles_block_emu;
    jb.packed = packed;
    const int nth = rg_threadpool_size(pool);
    const size_t need = jb.sz.per_thread * (size_t)nth;
    void *owned = NULL;
    if (!work) {
        owned = aligned_alloc(64, (need + 63) / 64 * 64);
        if (!owned) return rg_fail(err, RG_ERR_NOMEM, "gemm tiles: out of memory for %zu bytes of packing buffers", need);
        work = owned;
    } else if (work_size < need) {
        return rg_fail(err, RG_ERR_ARG, "gemm tiles: work buffer of %zu bytes is below the %zu needed for %d threads",
                       work_size, need, nth);
    }
    jb.work = work;
    jb.whole_problems = nth > 1 && bt->n_problems >= nth;
    rg_threadpool_run(pool, tiles_thread, &jb);
    free(owned);
    return RG_OK;
}

rg_status rg_gemm_tiles_run(rg_threadpool *pool, rg_tile_path path, const rg_gemm_batch *bt, void *work,
                            size_t work_size, rg_error *err) {
    return run_job(pool, path, bt, NULL, work, work_size, err);
}

rg_status rg_gemm_tiles_run_packed(rg_threadpool *pool, rg_tile_path path, const rg_gemm_batch *bt,
                                   const void *packed, void *work, size_t work_size, rg_error *err) {
    if (!packed && rg_gemm_tiles_packed_b_size(bt) > 0) return rg_fail(err, RG_ERR_ARG, "gemm tiles: no packed B given");
    return run_job(pool, path, bt, packed, work, work_size, err);
}

// ---------------------------------------------------------------------------
// A whole B packed once: items of (problem, NB columns, KB of K), split over the pool.

size_t rg_gemm_tiles_packed_b_size(const rg_gemm_batch *bt) {
    if (bt->N <= 0 || bt->K <= 0 || bt->n_problems <= 0) return 0;
    return (size_t)(round_up(bt->N, 32) / 16 * ceil_div(bt->K, RG_TILES_KSTEP) * TILE) * sizeof(uint16_t) *
           (size_t)bt->n_problems;
}

typedef struct pack_job {
    const tiles_job *jb;
    uint16_t *dst;
    int64_t n_col_blocks, n_k_blocks;
    atomic_int failed;  // a thread without memory for its decoding buffer
} pack_job;

static void pack_thread(void *arg, int ith, int nth) {
    pack_job *pj = arg;
    const tiles_job *jb = pj->jb;
    const rg_gemm_batch *bt = jb->bt;
    const tiles_sizes *sz = &jb->sz;
    float *tmp = NULL;
    if (sz->tmp_rows && !(tmp = malloc(sizeof(float) * (size_t)(sz->tmp_ld * sz->tmp_rows)))) {
        atomic_store(&pj->failed, 1);
        return;
    }
    int64_t t0, t1;
    rg_split_range(bt->n_problems * pj->n_col_blocks * pj->n_k_blocks, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        const int64_t pi = t / (pj->n_col_blocks * pj->n_k_blocks), rest = t % (pj->n_col_blocks * pj->n_k_blocks);
        const int64_t jc = (rest / pj->n_k_blocks) * sz->nb, kc = (rest % pj->n_k_blocks) * sz->kb;
        const int64_t jn = min64(sz->nb, bt->N - jc), kn = min64(sz->kb, bt->K - kc);
        rg_gemm_problem p;
        bt->get(bt->ctx, pi, &p);
        pack_b(jb, &p, kc, kn, jc, jn, round_up(jn, 32) / 16, ceil_div(kn, RG_TILES_KSTEP),
               pj->dst + pi * jb->packed_per_problem + (jc / 16) * jb->packed_nt_stride + (kc / RG_TILES_KSTEP) * TILE,
               jb->packed_nt_stride, tmp);
    }
    free(tmp);
}

rg_status rg_gemm_tiles_pack_b(rg_threadpool *pool, const rg_gemm_batch *bt, void *packed, size_t size,
                               rg_error *err) {
    tiles_job jb;
    rg_status st = job_init(&jb, bt, err);
    if (st != RG_OK) return st;
    const size_t need = rg_gemm_tiles_packed_b_size(bt);
    if (need == 0) return RG_OK;
    if (!packed || size < need)
        return rg_fail(err, RG_ERR_ARG, "gemm tiles: packed B buffer of %zu bytes is below the %zu needed", size, need);
    pack_job pj = {&jb, packed, ceil_div(bt->N, jb.sz.nb), ceil_div(bt->K, jb.sz.kb), 0};
    rg_threadpool_run(pool, pack_thread, &pj);
    if (atomic_load(&pj.failed)) return rg_fail(err, RG_ERR_NOMEM, "gemm tiles: out of memory for a decoding buffer while packing B");
    return RG_OK;
}
