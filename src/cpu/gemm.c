// gemm.c - see gemm.h. Our packed kernel, the OpenBLAS tiles, the choice
// between them and the split of the work over the pool.
//
// Our kernel is the classic five-loop blocking (Goto & van de Geijn):
//
//   for jc over N by NC:                 a block of columns of C
//     for pc over K by KC:               a slice of the depth
//       pack B[pc:pc+KC, jc:jc+NC]  ->  Bp  [NC/16 panels][KC][16]   (L2/L3; 16 KB per panel)
//       for ic over the rows by MC:
//         pack A[ic:ic+MC, pc:pc+KC] ->  Ap  [MC/6 panels][KC][6]    (L2: 144 x 256 x 4 = 144 KB)
//         for jr over NC by 16:          one B panel stays in L1 (256 x 16 x 4 = 16 KB of 32 KB)
//           for ir over MC by 6:         A panels stream from L2
//             C[ir:ir+6, jr:jr+16] (+)= Ap panel . Bp panel      (the 6x16 micro-kernel)
//
// Where AVX-512 is usable, two A panels at a time go through gemm_avx512.c's
// kernels on the same packed panels, with the same bits: 12x32 against two B
// panels where the B block is packed whole (the NC loop), 12x16 against the
// one panel of the other loops.
//
// KC = 256 keeps one B panel at half of Zen 3's 32 KB L1 so the A panel and
// the C rows fit beside it, and it is a multiple of every quant block size
// (32, 64, 256), so a slice of a quantized row is whole blocks. MC = 144 (24
// A panels) fills about a third of the 512 KB L2, leaving room for the B panel
// stream. NC = 2048 bounds the packed B block at 2 MB per thread (L3 is 32 MB).
// When all the rows a thread computes fit one A block (<= MC rows: MUL_MAT on
// up to 144 tokens) and B is packed by transposing its columns (weights
// [K, N] with rows along k), the loops change order: each depth slice of A is
// packed once, then every B panel is packed (dequantized) right before the
// tiles that use it, while it is in L1; no B block is kept. (It used to be
// blocks of 256 columns with A packed again for each: 5-6% of a prompt's
// time went to packing A.) A B with contiguous rows is packed row by row and
// keeps NC: on deep products (K >= 2048) rows of 2048 floats stream from
// memory 20-40% faster than rows of 256.
//
// Packing is where strides and types go away: A and B may have any strides;
// a B of another type is dequantized row segment by row segment into a small
// buffer and packed from there, so each weight element is dequantized once per
// thread that needs it. Edge panels are padded with zeros and the micro-kernel
// writes edge tiles into a 6x16 buffer first; an element's arithmetic is the
// same in an edge tile as in a full one.
#include "cpu/gemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/error.h"
#include "tensor/quant/quant.h"

#include "cpu/gemm_openblas.h"
#include "cpu/gemm_tiles.h"

#define MR RG_GEMM_MR
#define NR RG_GEMM_NR
#define KC RG_GEMM_KC
#define MC 144
#define NC 2048
// The most floats of packed A kept whole (384 KB: 128 tokens of depth 576 fit).
#define FULL_A_FLOATS (96 * 1024)
// Rows of C a thread may stage (see ours_block): 512 x 2064 floats = 4 MB.
#define STAGE_ROWS 512

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }
// Floats rounded up to whole 64-byte lines, so every buffer starts aligned.
static int64_t lines(int64_t n_floats) { return round_up(n_floats, 16); }

static bool use_avx2(void) { return rg_gemm_avx2_built && rg_cpu_has_avx2(); }
static bool use_avx512(void) { return rg_gemm_avx512_built && rg_cpu_has_avx512_vnni(); }

const char *rg_sgemm_impl_name(rg_sgemm_impl impl) {
    switch (impl) {
    case RG_SGEMM_AUTO: return "auto";
    case RG_SGEMM_OURS: return !use_avx2() ? "ours (portable)" : use_avx512() ? "ours (avx2+avx512)" : "ours (avx2)";
    case RG_SGEMM_OURS_PORTABLE: return "ours (portable)";
    case RG_SGEMM_OPENBLAS:
        return rg_gemm_ob_name();
    case RG_SGEMM_BF16: return rg_tile_path_name(rg_gemm_tiles_path());
    }
    return "?";
}

// ---------------------------------------------------------------------------
// The rule for AUTO.
//
// Measured on the 2-core Zen 3 machine, one thread, F32, our kernel against
// OpenBLAS 0.3.21 (Zen kernels) called per tile as below, over M in {8, 16,
// 32, 48, 64, 96, 128, 256, 1024} x N in {64, 576, 1536, 4096} x K in {64,
// 256, 1536, 2048, 4096, 8192}, with B row-major and transposed (bench_gemm
// prints the training shapes):
//   - M >= 64: ours is as fast or faster (ours/OpenBLAS 0.95 - 1.5; 1.1 - 1.3
//     on the K = 256 weight-gradient shapes), and it reads a quantized B
//     without a dequantized copy;
//   - 16 <= M < 64: even (0.85 - 1.6); OpenBLAS leads by 5 - 20% only on deep
//     products (K >= 2048) with a transposed B, within run-to-run noise on
//     this shared machine for half of them, so they are not routed;
//   - M <= 8: our 6-row micro-tiles spend a third or more of their FMAs on
//     zero padding and OpenBLAS, with narrower edge kernels, is 10 - 35%
//     faster with a row-major B.
// So: OpenBLAS for an F32 B and M <= 8, ours otherwise (always ours in builds
// without OpenBLAS). In the ops, M <= 8 is MUL_MAT on exactly 8 tokens (fewer
// take the dot products) and dX = out_prod(W, dY^T) on at most 8 tokens.
rg_sgemm_impl rg_sgemm_pick(int64_t M, int64_t N, int64_t K, uint32_t b_type) {
    (void)N, (void)K;
#ifdef RG_HAVE_OPENBLAS
    if (b_type == RG_TYPE_F32 && M <= 8) return RG_SGEMM_OPENBLAS;
#else
    (void)M, (void)b_type;
#endif
    return RG_SGEMM_OURS;
}

// ---------------------------------------------------------------------------
// Portable micro-kernel: the same products in the same order as the AVX2 one,
// each a fused multiply-add (fmaf), so both give the same bits.

static void ukernel_portable(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, bool add) {
    float acc[MR][NR];
    memset(acc, 0, sizeof acc);
    for (int64_t k = 0; k < kc; k++)
        for (int r = 0; r < MR; r++) {
            float ar = a[k * MR + r];
            for (int j = 0; j < NR; j++) acc[r][j] = fmaf(ar, b[k * NR + j], acc[r][j]);
        }
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) c[r * ldc + j] = add ? c[r * ldc + j] + acc[r][j] : acc[r][j];
}

static void pack_bt_portable(int64_t kc, const float *src, int64_t ld, int n, float *dst) {
    for (int64_t k = 0; k < kc; k++)
        for (int j = 0; j < NR; j++) dst[k * NR + j] = j < n ? src[j * ld + k] : 0.0f;
}

static void pack_at_portable(int64_t kc, const float *src, int64_t ld, int n, float *dst) {
    for (int r = 0; r < MR; r++) {
        if (r < n)
            for (int64_t k = 0; k < kc; k++) dst[k * MR + r] = src[r * ld + k];
        else
            for (int64_t k = 0; k < kc; k++) dst[k * MR + r] = 0.0f;
    }
}

typedef void (*ukernel_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, bool add);
typedef void (*pack_bt_fn)(int64_t kc, const float *src, int64_t ld, int n, float *dst);

// ---------------------------------------------------------------------------
// Packing.

typedef struct ours_sizes {
    int64_t mc, kc, nc;        // the blocking clipped to the problem
    int64_t tmp_ld, tmp_len;   // dequantization buffer
    int64_t region;            // floats of the B block, or of the whole packed A and one B panel
    int64_t stage_ld;          // staged C block (ours_block): row stride in floats, 0 = never staged
    int64_t floats;            // per thread: Ap + Bp + tmp + staged C
} ours_sizes;

typedef void (*pack_bt_half_fn)(int64_t kc, const uint16_t *src, int64_t ld, int n, float *dst);

typedef struct ours_ctx {
    ukernel_fn ukernel;
    ukernel_fn ukernel_tall;  // RG_GEMM_TALL rows (RG_GEMM_TALL / 6 A panels) at once, or NULL
    // 12 rows (two A panels) against two B panels at once, or NULL
    void (*ukernel_wide)(int64_t kc, const float *a, const float *b0, const float *b1, float *c, int64_t ldc, bool add);
    pack_bt_fn pack_bt;
    pack_bt_fn pack_at;     // A rows -> [kc][6]
    pack_bt_half_fn pack_bt_half;  // F16/BF16 weight rows packed straight from the source, or NULL
    rg_dequant_fn dequant;
    int64_t bs;
    size_t type_size;
    ours_sizes sz;
} ours_ctx;

// A[i0:i0+mc, pc:pc+kc] -> dst [ceil(mc/6) panels][kc][6], zero rows past mc.
static void pack_a(const ours_ctx *oc, const float *a, int64_t rs, int64_t cs, int64_t i0, int64_t mc, int64_t pc,
                   int64_t kc, float *dst) {
    if (rs == 1) {
        // Columns of A are contiguous (dY in dW = out_prod(X, dY)): walk each
        // column once, handing 6 floats to each panel. (Panel by panel, 6 floats
        // from each of kc columns, would touch kc lines per panel; with columns
        // a power-of-two multiple of 4 KB apart, as the LM head's 49152 logits
        // are, those lines share one L1 and one L2 set and miss every time.)
        int64_t full = mc / MR * MR;
        for (int64_t k = 0; k < kc; k++) {
            const float *s = a + i0 + (pc + k) * cs;
            float *d = dst + k * MR;
            int64_t ir = 0;
            for (; ir < full; ir += MR) memcpy(d + ir * kc, s + ir, sizeof(float) * MR);
            if (ir < mc) {
                int n = (int)(mc - ir);
                for (int r = 0; r < MR; r++) d[ir * kc + r] = r < n ? s[ir + r] : 0.0f;
            }
        }
        return;
    }
    for (int64_t ir = 0; ir < mc; ir += MR) {
        int n = (int)min64(MR, mc - ir);
        float *d = dst + ir * kc;
        const float *s = a + (i0 + ir) * rs + pc * cs;
        if (cs == 1) {
            // Rows are contiguous (activations in MUL_MAT): a transpose of up to 6 rows.
            oc->pack_at(kc, s, rs, n, d);
        } else {
            for (int64_t k = 0; k < kc; k++)
                for (int r = 0; r < MR; r++) d[k * MR + r] = r < n ? s[r * rs + k * cs] : 0.0f;
        }
    }
}

// Packed B panels ([kc][16] each) sit kc * 16 + 16 floats apart: with exactly
// kc * 16 (16 KB at kc = 256, a multiple of 4 KB) every panel would start on
// the same L1 set, and packing rows of B, which writes 16 floats into each of
// up to 128 panels in turn, would thrash that set. One line of skew per panel
// spreads them.
static int64_t bpanel_off(int64_t jr, int64_t kc) { return (jr / NR) * (kc * NR + NR); }

typedef struct b_packer {
    const rg_gemm_b *b;
    rg_dequant_fn dequant;   // typed B
    pack_bt_half_fn pack_bt_half;  // F16/BF16 B with rows along k: widened while transposing, no tmp
    int64_t bs;              // elements per block of the type (1 for F32)
    size_t type_size;        // bytes per block
    int64_t K, N;
    pack_bt_fn pack_bt;
    float *tmp;              // dequantized rows: [16][tmp_ld] or [tmp_ld]
    int64_t tmp_ld;
} b_packer;

// B[pc:pc+kc, jc:jc+nc] -> dst [ceil(nc/16) panels][kc][16], zero columns past nc.
static void pack_b(const b_packer *bp, int64_t pc, int64_t kc, int64_t jc, int64_t nc, float *dst) {
    const rg_gemm_b *b = bp->b;
    if (b->type == RG_TYPE_F32) {
        const float *base = (const float *)b->data;
        if (b->cs == 1) {
            // Rows of B are contiguous (OUT_PROD's a, a row-major B): walk each row
            // once, left to right, handing 16 floats to each panel, so the reads
            // stream (a panel at a time would touch a new row, i.e. a new line and
            // often a new page, every 16 floats).
            for (int64_t k = 0; k < kc; k++) {
                const float *row = base + (pc + k) * b->rs + jc;
                int64_t jr = 0;
                // Rows are far apart; fetch a few rows ahead so the loads do not wait.
                const float *ahead = k + 4 < kc ? row + 4 * b->rs : row;
                for (; jr + NR <= nc; jr += NR) {
                    __builtin_prefetch(ahead + jr);
                    memcpy(dst + bpanel_off(jr, kc) + k * NR, row + jr, sizeof(float) * NR);
                }
                if (jr < nc) {
                    float *d = dst + bpanel_off(jr, kc) + k * NR;
                    memcpy(d, row + jr, sizeof(float) * (size_t)(nc - jr));
                    for (int64_t j = nc - jr; j < NR; j++) d[j] = 0.0f;
                }
            }
            return;
        }
        for (int64_t jr = 0; jr < nc; jr += NR) {
            int n = (int)min64(NR, nc - jr);
            float *d = dst + bpanel_off(jr, kc);
            const float *s = base + pc * b->rs + (jc + jr) * b->cs;
            if (b->rs == 1) {
                // Columns of B are contiguous (an F32 weight [K, N] in MUL_MAT): transpose.
                bp->pack_bt(kc, s, b->cs, n, d);
            } else {
                for (int64_t k = 0; k < kc; k++)
                    for (int j = 0; j < NR; j++) d[k * NR + j] = j < n ? s[k * b->rs + j * b->cs] : 0.0f;
            }
        }
        return;
    }
    const char *rows = (const char *)b->data;
    if (b->rows_along_k && bp->pack_bt_half) {
        // 16-bit weights: each panel straight from its 16 rows, widened as it is
        // transposed (one pass; through tmp it was two, and F16 prompts ran slower
        // than F32 ones).
        for (int64_t jr = 0; jr < nc; jr += NR)
            bp->pack_bt_half(kc, (const uint16_t *)(rows + (size_t)(jc + jr) * b->row_stride) + pc,
                             (int64_t)(b->row_stride / 2), (int)min64(NR, nc - jr), dst + bpanel_off(jr, kc));
        return;
    }
    if (b->rows_along_k) {
        // B(k, j) = row j [k]: dequantize the whole blocks covering [pc, pc+kc) of
        // 16 rows, then transpose them into a panel.
        int64_t lo = pc - pc % bp->bs, hi = min64(round_up(pc + kc, bp->bs), bp->K);
        size_t boff = (size_t)(lo / bp->bs) * bp->type_size;
        for (int64_t jr = 0; jr < nc; jr += NR) {
            int n = (int)min64(NR, nc - jr);
            for (int jj = 0; jj < n; jj++)
                bp->dequant(rows + (size_t)(jc + jr + jj) * b->row_stride + boff, bp->tmp + jj * bp->tmp_ld, hi - lo);
            bp->pack_bt(kc, bp->tmp + (pc - lo), bp->tmp_ld, n, dst + bpanel_off(jr, kc));
        }
    } else {
        // B(k, j) = row k [j]: dequantize the blocks covering [jc, jc+nc) of each of
        // the kc rows and copy 16 at a time into the panels.
        int64_t lo = jc - jc % bp->bs, hi = min64(round_up(jc + nc, bp->bs), bp->N);
        size_t boff = (size_t)(lo / bp->bs) * bp->type_size;
        const float *seg = bp->tmp + (jc - lo);
        for (int64_t k = 0; k < kc; k++) {
            bp->dequant(rows + (size_t)(pc + k) * b->row_stride + boff, bp->tmp, hi - lo);
            int64_t jr = 0;
            for (; jr + NR <= nc; jr += NR) memcpy(dst + bpanel_off(jr, kc) + k * NR, seg + jr, sizeof(float) * NR);
            if (jr < nc) {
                int n = (int)(nc - jr);
                float *d = dst + bpanel_off(jr, kc) + k * NR;
                memcpy(d, seg + jr, sizeof(float) * (size_t)n);
                for (int j = n; j < NR; j++) d[j] = 0.0f;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Our kernel over one block of C: rows [i0, i1), columns [j0, j1).

// The buffers one thread needs for a batch of this shape.
static ours_sizes ours_plan(const rg_gemm_batch *bt) {
    ours_sizes s;
    s.mc = max64(MR, min64(MC, round_up(bt->M, MR)));
    s.kc = max64(1, min64(KC, bt->K));
    s.nc = max64(NR, min64(NC, round_up(bt->N, NR)));
    s.tmp_ld = s.tmp_len = 0;
    if (bt->b_type != RG_TYPE_F32) {
        int64_t bs = rg_type_get(bt->b_type)->block_size;
        if (bs < 1) bs = 1;
        // A slice [lo, hi) widened to whole blocks spans at most len + 2 (bs - 1).
        if (bt->b_rows_along_k) {
            s.tmp_ld = lines(s.kc + 2 * bs);
            s.tmp_len = NR * s.tmp_ld;
        } else {
            s.tmp_ld = lines(s.nc + 2 * bs);
            s.tmp_len = s.tmp_ld;
        }
    }
    // The B block, or in the narrow order (ours_block) the whole packed A and one B panel.
    s.region = s.kc * s.nc + s.nc;
    if (s.mc * bt->K <= FULL_A_FLOATS) s.region = max64(s.region, lines(s.mc * bt->K) + s.kc * NR + NR);
    s.stage_ld = 0;
    if (bt->K > KC && bt->M <= STAGE_ROWS) s.stage_ld = s.nc + NR;
    s.floats = lines(s.mc * s.kc) + lines(s.region) + lines(s.tmp_len) + lines(bt->M * s.stage_ld);
    return s;
}

// The bytes pack_b reads for the panel B[pc:pc+kc, jc:jc+nc] when B is a
// weight with rows along k (MUL_MAT): nc rows from `first`, `bytes` each,
// `stride` apart. false for other layouts (nothing to fetch ahead).
typedef struct b_src {
    const char *first;
    size_t stride, bytes;
    int64_t rows;
} b_src;

static bool b_panel_src(const b_packer *bp, int64_t pc, int64_t kc, int64_t jc, int64_t nc, b_src *s) {
    const rg_gemm_b *b = bp->b;
    if (pc >= bp->K || jc >= bp->N || nc <= 0) return false;
    if (b->type == RG_TYPE_F32) {
        if (b->rs != 1) return false;
        *s = (b_src){(const char *)((const float *)b->data + pc + jc * b->cs), (size_t)b->cs * sizeof(float),
                     (size_t)kc * sizeof(float), nc};
        return true;
    }
    if (!b->rows_along_k) return false;
    int64_t lo = pc - pc % bp->bs, hi = min64(round_up(pc + kc, bp->bs), bp->K);
    *s = (b_src){(const char *)b->data + (size_t)jc * b->row_stride + (size_t)(lo / bp->bs) * bp->type_size,
                 b->row_stride, (size_t)((hi - lo) / bp->bs) * bp->type_size, nc};
    return true;
}

// Every micro-tile of one packed B panel (nr <= 16 columns) against the packed
// A block (mc rows), into C at c (row 0, column 0 of the panel). With `next`,
// the source bytes of the panel packed after this one are fetched into L2 a
// few lines per tile: the weights come from memory, and without this each
// panel's dequantization waited for its 16 rows (for F16 weights ~8% of a
// prompt went to converting them, most of it waiting).
static void panel_tiles(const ours_ctx *oc, const float *ap, int64_t mc, int64_t kc, const float *bpanel, int64_t nr,
                        float *c, int64_t ldc, bool add, const b_src *next) {
    float edge[MR * NR];
    const int64_t per_row = next ? (int64_t)(next->bytes + 63) / 64 + 1 : 0;  // lines of a row, one more if unaligned
    const int64_t pf_total = next ? next->rows * per_row : 0, pf_tile = ceil_div(pf_total, ceil_div(mc, MR));
    int64_t pf = 0;
    for (int64_t ir = 0; ir < mc;) {
        // Two whole A panels against a whole B panel: the tall kernel, where there is one.
        const bool tall = oc->ukernel_tall && nr == NR && ir + RG_GEMM_TALL <= mc;
        const int64_t rows = tall ? RG_GEMM_TALL : MR;
        for (int64_t q = 0; q < pf_tile * (rows / MR) && pf < pf_total; q++, pf++) {
            const char *row = next->first + (size_t)(pf / per_row) * next->stride;
            __builtin_prefetch(row + (size_t)(pf % per_row) * 64, 0, 2);
        }
        int64_t mr = min64(MR, mc - ir);
        float *ct = c + ir * ldc;
        if (tall) {
            oc->ukernel_tall(kc, ap + ir * kc, bpanel, ct, ldc, add);
        } else if (mr == MR && nr == NR) {
            oc->ukernel(kc, ap + ir * kc, bpanel, ct, ldc, add);
        } else {
            oc->ukernel(kc, ap + ir * kc, bpanel, edge, NR, false);
            for (int64_t r = 0; r < mr; r++)
                for (int64_t j = 0; j < nr; j++)
                    ct[r * ldc + j] = add ? ct[r * ldc + j] + edge[r * NR + j] : edge[r * NR + j];
        }
        ir += rows;
    }
}

// Two whole packed B panels (32 columns) against the packed A block: 12 rows at a time
// through the wide kernel, the rows left over through panel_tiles, panel by panel.
static void panel_pair_tiles(const ours_ctx *oc, const float *ap, int64_t mc, int64_t kc, const float *b0,
                             const float *b1, float *c, int64_t ldc, bool add) {
    int64_t ir = 0;
    for (; ir + 2 * MR <= mc; ir += 2 * MR) oc->ukernel_wide(kc, ap + ir * kc, b0, b1, c + ir * ldc, ldc, add);
    if (ir < mc) {
        panel_tiles(oc, ap + ir * kc, mc - ir, kc, b0, NR, c + ir * ldc, ldc, add, NULL);
        panel_tiles(oc, ap + ir * kc, mc - ir, kc, b1, NR, c + ir * ldc + NR, ldc, add, NULL);
    }
}

static void ours_block(const ours_ctx *oc, const rg_gemm_batch *bt, const rg_gemm_problem *p, int64_t i0, int64_t i1,
                       int64_t j0, int64_t j1, float *ws) {
    if (i0 >= i1 || j0 >= j1) return;
    if (bt->K == 0) {
        if (!bt->accumulate)
            for (int64_t i = i0; i < i1; i++) memset(p->c + i * p->ldc + j0, 0, sizeof(float) * (size_t)(j1 - j0));
        return;
    }
    const ours_sizes *sz = &oc->sz;
    float *ap = ws;                                  // [mc/6][kc][6]
    float *bpk = ap + lines(sz->mc * sz->kc);        // [nc/16][kc][16], panels bpanel_off apart
    float *tmp = bpk + lines(sz->region);            // dequantized rows
    float *stage = tmp + lines(sz->tmp_len);         // [i1 - i0][stage_ld] staged C block
    const bool half_rows = oc->pack_bt_half && p->b.rows_along_k && p->b.row_stride % 2 == 0;
    b_packer bpack = {&p->b, oc->dequant, half_rows ? oc->pack_bt_half : NULL, oc->bs, oc->type_size, bt->K, bt->N,
                      oc->pack_bt, tmp, sz->tmp_ld};
    // B with contiguous rows is packed row by row, where long rows stream
    // better than short ones, so it keeps the NC blocks below.
    bool b_rows = p->b.type == RG_TYPE_F32 ? p->b.cs == 1 : !p->b.rows_along_k;
    if (i1 - i0 <= MC && !b_rows) {
        // All rows in one A block and B packed a panel at a time by transposing
        // its columns (MUL_MAT on up to MC tokens). When the whole packed A fits
        // (FULL_A_FLOATS), pack it once, then take the B panels one at a time
        // through every depth slice: a panel's rows are read start to end, one
        // after the other, which the prefetchers follow. Otherwise pack each
        // depth slice of A once and every B panel right before its tiles use
        // it. Either way the panel is in L1 when used, no B block is kept, and
        // each C element is summed over the same KC slices in the same order.
        const int64_t mcp = round_up(i1 - i0, MR);
        if (mcp * bt->K <= FULL_A_FLOATS) {
            float *afull = bpk, *bpanel = bpk + lines(mcp * bt->K);
            for (int64_t pc = 0; pc < bt->K; pc += KC)
                pack_a(oc, p->a, p->a_rs, p->a_cs, i0, i1 - i0, pc, min64(KC, bt->K - pc), afull + mcp * pc);
            for (int64_t jr = j0; jr < j1; jr += NR) {
                int64_t nr = min64(NR, j1 - jr);
                for (int64_t pc = 0; pc < bt->K; pc += KC) {
                    int64_t kc = min64(KC, bt->K - pc);
                    pack_b(&bpack, pc, kc, jr, nr, bpanel);
                    // Next: the same rows' next depth slice, or the next rows' first.
                    b_src next;
                    bool has_next = pc + KC < bt->K
                                        ? b_panel_src(&bpack, pc + KC, min64(KC, bt->K - pc - KC), jr, nr, &next)
                                        : b_panel_src(&bpack, 0, min64(KC, bt->K), jr + NR, min64(NR, j1 - jr - NR), &next);
                    panel_tiles(oc, afull + mcp * pc, i1 - i0, kc, bpanel, nr, p->c + i0 * p->ldc + jr, p->ldc,
                                bt->accumulate || pc > 0, has_next ? &next : NULL);
                }
            }
            return;
        }
        for (int64_t pc = 0; pc < bt->K; pc += KC) {
            int64_t kc = min64(KC, bt->K - pc);
            bool add = bt->accumulate || pc > 0;
            pack_a(oc, p->a, p->a_rs, p->a_cs, i0, i1 - i0, pc, kc, ap);
            for (int64_t jr = j0; jr < j1; jr += NR) {
                int64_t nr = min64(NR, j1 - jr);
                pack_b(&bpack, pc, kc, jr, nr, bpk);
                b_src next;  // the next rows of this depth slice, or the first rows of the next
                bool has_next = jr + NR < j1 ? b_panel_src(&bpack, pc, kc, jr + NR, min64(NR, j1 - jr - NR), &next)
                                             : b_panel_src(&bpack, pc + KC, min64(KC, bt->K - pc - KC), j0,
                                                           min64(NR, j1 - j0), &next);
                panel_tiles(oc, ap, i1 - i0, kc, bpk, nr, p->c + i0 * p->ldc + jr, p->ldc, add,
                            has_next ? &next : NULL);
            }
        }
        return;
    }
    // Rows of C a multiple of 4 KB apart (the LM head's logits: 49152 floats)
    // put a tile's 6 rows, and all 144 rows of an A block, in one L1 set and
    // one L2 set; summed over several depth slices, such a C block is written
    // and read back through those few ways (the LM head's forward ran at ~70%
    // of peak, ~80% with C padded by 16 floats). Then the block is summed in a
    // buffer whose rows are one line further apart and copied out at the end:
    // the same operations on the same values, so the same bits.
    const bool staged = sz->stage_ld > 0 && (p->ldc * (int64_t)sizeof(float)) % 4096 == 0;
    int64_t nc_max = NC;
    for (int64_t jc = j0; jc < j1; jc += nc_max) {
        int64_t nc = min64(nc_max, j1 - jc);
        float *cb = p->c + i0 * p->ldc + jc;  // C(i0, jc), rows ldcb apart
        int64_t ldcb = p->ldc;
        if (staged) {
            cb = stage, ldcb = sz->stage_ld;
            if (bt->accumulate)
                for (int64_t i = 0; i < i1 - i0; i++)
                    memcpy(cb + i * ldcb, p->c + (i0 + i) * p->ldc + jc, sizeof(float) * (size_t)nc);
        }
        for (int64_t pc = 0; pc < bt->K; pc += KC) {
            int64_t kc = min64(KC, bt->K - pc);
            bool add = bt->accumulate || pc > 0;
            pack_b(&bpack, pc, kc, jc, nc, bpk);
            for (int64_t ic = i0; ic < i1; ic += MC) {
                int64_t mc = min64(MC, i1 - ic);
                pack_a(oc, p->a, p->a_rs, p->a_cs, ic, mc, pc, kc, ap);
                int64_t jr = 0;
                if (oc->ukernel_wide)
                    for (; jr + 2 * NR <= nc; jr += 2 * NR)
                        panel_pair_tiles(oc, ap, mc, kc, bpk + bpanel_off(jr, kc), bpk + bpanel_off(jr + NR, kc),
                                         cb + (ic - i0) * ldcb + jr, ldcb, add);
                for (; jr < nc; jr += NR)
                    panel_tiles(oc, ap, mc, kc, bpk + bpanel_off(jr, kc), min64(NR, nc - jr),
                                cb + (ic - i0) * ldcb + jr, ldcb, add, NULL);
            }
        }
        if (staged)
            for (int64_t i = 0; i < i1 - i0; i++)
                memcpy(p->c + (i0 + i) * p->ldc + jc, cb + i * ldcb, sizeof(float) * (size_t)nc);
    }
}

// ---------------------------------------------------------------------------
// The split over the pool.

typedef struct run_job {
    const rg_gemm_batch *bt;
    int impl;               // RG_SGEMM_OURS, RG_SGEMM_OPENBLAS or RG_SGEMM_OURS_PORTABLE (never AUTO)
    bool auto_pick;         // AUTO chose OpenBLAS: problems whose strides do not suit it run ours
    ours_ctx oc;
    rg_gemm_ob_ctx obc;
    char *work;
    size_t per_thread;      // bytes of scratch per thread
    bool whole_problems;    // each thread takes whole problems (else every problem is split)
} run_job;

// Our kernel's share of one problem for thread ith of nth. Each thread packs
// the A rows and B columns of its share: split columns, and every thread
// packs all of A (M x K) and its part of B; split rows, all of B (N x K) and
// its part of A. So with an F32 B the split goes along the larger of M and N
// (dW = out_prod(X, dY) of the LM head: M = 49152 rows of dY, N = 576; split
// by columns each thread packed all 50 MB of dY). A B of another type is
// split by columns when there are enough (each thread then dequantizes only
// its part, so a weight is dequantized once overall); otherwise rows.
static void ours_share(const rg_gemm_batch *bt, int ith, int nth, int64_t *i0, int64_t *i1, int64_t *j0, int64_t *j1) {
    int64_t nbn = ceil_div(bt->N, NR), nbm = ceil_div(bt->M, MR), b0, b1;
    *i0 = 0, *i1 = bt->M, *j0 = 0, *j1 = bt->N;
    if (nth == 1) return;
    bool by_cols = bt->b_type == RG_TYPE_F32 ? (bt->N >= bt->M || nbm < 2 * nth) && nbn >= nth
                                             : nbn >= 2 * nth || nbn >= nbm;
    if (by_cols) {
        rg_split_range(nbn, ith, nth, &b0, &b1);
        *j0 = min64(b0 * NR, bt->N), *j1 = min64(b1 * NR, bt->N);
    } else {
        rg_split_range(nbm, ith, nth, &b0, &b1);
        *i0 = min64(b0 * MR, bt->M), *i1 = min64(b1 * MR, bt->M);
    }
}

static bool ob_suits(const rg_gemm_problem *p) {
    if (p->a_rs != 1 && p->a_cs != 1) return false;
    if (p->b.type == RG_TYPE_F32 && p->b.rs != 1 && p->b.cs != 1) return false;
    return true;
}

static void run_problem_share(const run_job *j, int64_t pi, int ith, int nth, float *ws) {
    const rg_gemm_batch *bt = j->bt;
    rg_gemm_problem p;
    bt->get(bt->ctx, pi, &p);
    if (j->impl == RG_SGEMM_OPENBLAS && !(j->auto_pick && !ob_suits(&p))) {
        // The tiles of this problem, in order, split over the threads.
        const rg_gemm_ob_sizes *sz = &j->obc.sz;
        int64_t t0, t1, tiles_n = ceil_div(bt->N, sz->tn);
        rg_split_range(sz->n_tiles, ith, nth, &t0, &t1);
        for (int64_t t = t0; t < t1; t++) {
            int64_t i0 = (t / tiles_n) * sz->tm, jj0 = (t % tiles_n) * sz->tn;
            rg_gemm_ob_tile(&j->obc, bt, &p, i0, min64(sz->tm, bt->M - i0), jj0, min64(sz->tn, bt->N - jj0), ws);
        }
        return;
    }
    int64_t i0, i1, j0, j1;
    ours_share(bt, ith, nth, &i0, &i1, &j0, &j1);
    ours_block(&j->oc, bt, &p, i0, i1, j0, j1, ws);
}

static void run_thread(void *arg, int ith, int nth) {
    const run_job *j = arg;
    float *ws = (float *)(j->work + (size_t)ith * j->per_thread);
    if (j->whole_problems) {
        // Whole problems while every thread gets as many, then the rest split
        // over all threads (9 attention heads on 2 threads: 4 each, then one
        // shared, instead of 5 and 4).
        int64_t p0, p1, n_whole = j->bt->n_problems / nth * nth;
        rg_split_range(n_whole, ith, nth, &p0, &p1);
        for (int64_t p = p0; p < p1; p++) run_problem_share(j, p, 0, 1, ws);
        for (int64_t p = n_whole; p < j->bt->n_problems; p++) run_problem_share(j, p, ith, nth, ws);
    } else {
        for (int64_t p = 0; p < j->bt->n_problems; p++) run_problem_share(j, p, ith, nth, ws);
    }
}

static int resolve_impl(int impl, const rg_gemm_batch *bt) {
    if (impl == RG_SGEMM_AUTO) return (int)rg_sgemm_pick(bt->M, bt->N, bt->K, bt->b_type);
    return impl;
}

static size_t per_thread_bytes(int impl, bool auto_pick, const rg_gemm_batch *bt) {
    int64_t floats = 0;
    if (impl != RG_SGEMM_OPENBLAS || auto_pick) floats = max64(floats, ours_plan(bt).floats);
    if (impl == RG_SGEMM_OPENBLAS) floats = max64(floats, rg_gemm_ob_plan(bt).floats);
    return (size_t)floats * sizeof(float);
}

size_t rg_gemm_work_size(rg_sgemm_impl impl, const rg_gemm_batch *batch, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    if (batch->M <= 0 || batch->N <= 0 || batch->n_problems <= 0) return 0;
    if (impl == RG_SGEMM_BF16) return rg_gemm_tiles_work_size(batch, n_threads);
    int r = resolve_impl((int)impl, batch);
    return per_thread_bytes(r, impl == RG_SGEMM_AUTO, batch) * (size_t)n_threads;
}

rg_status rg_gemm_run(rg_threadpool *pool, rg_sgemm_impl impl, const rg_gemm_batch *bt, void *work, size_t work_size,
                      rg_error *err) {
    if (bt->M < 0 || bt->N < 0 || bt->K < 0 || bt->n_problems < 0)
        return rg_fail(err, RG_ERR_ARG, "gemm: negative size M=%lld N=%lld K=%lld problems=%lld", (long long)bt->M,
                       (long long)bt->N, (long long)bt->K, (long long)bt->n_problems);
    if (bt->M == 0 || bt->N == 0 || bt->n_problems == 0) return RG_OK;
    if (impl == RG_SGEMM_BF16) {
        const rg_tile_path path = rg_gemm_tiles_path();
        if (path == RG_TILES_NONE)
            return rg_fail(err, RG_ERR_UNSUPPORTED, "gemm: BF16 products asked for, but %s", rg_gemm_tiles_missing());
        return rg_gemm_tiles_run(pool, path, bt, work, work_size, err);
    }
    int r = resolve_impl((int)impl, bt);
    if (r == RG_SGEMM_OPENBLAS && !rg_sgemm_have_openblas())
        return rg_fail(err, RG_ERR_UNSUPPORTED, "gemm: this build has no OpenBLAS");
    if (r != RG_SGEMM_OURS && r != RG_SGEMM_OPENBLAS && r != RG_SGEMM_OURS_PORTABLE)
        return rg_fail(err, RG_ERR_ARG, "gemm: unknown implementation %d", (int)impl);
    run_job j;
    memset(&j, 0, sizeof j);
    j.bt = bt;
    j.impl = r;
    j.auto_pick = impl == RG_SGEMM_AUTO;
    int64_t bs = 1;
    size_t type_size = sizeof(float);
    rg_dequant_fn dequant = NULL;
    if (bt->b_type != RG_TYPE_F32) {
        const rg_type_traits *tt = rg_type_get(bt->b_type);
        dequant = rg_quant_get(bt->b_type)->dequant;
        if (!dequant || tt->block_size < 1)
            return rg_fail(err, RG_ERR_UNSUPPORTED, "gemm: weight type %s has no dequantizer", tt->name);
        bs = tt->block_size, type_size = tt->type_size;
        int64_t row_len = bt->b_rows_along_k ? bt->K : bt->N;
        if (row_len % bs)
            return rg_fail(err, RG_ERR_ARG, "gemm: %s rows of %lld elements are not whole blocks of %lld", tt->name,
                           (long long)row_len, (long long)bs);
    }
    bool avx2 = r != RG_SGEMM_OURS_PORTABLE && use_avx2();
    pack_bt_half_fn half = !avx2                          ? NULL
                           : bt->b_type == RG_TYPE_F16  ? rg_gemm_pack_bt_f16_avx2
                           : bt->b_type == RG_TYPE_BF16 ? rg_gemm_pack_bt_bf16_avx2
                                                        : NULL;
    j.oc = (ours_ctx){avx2 ? rg_gemm_ukernel_avx2 : ukernel_portable,
                      avx2 && use_avx512() ? rg_gemm_ukernel_tall_avx512 : NULL,
                      avx2 && use_avx512() ? rg_gemm_ukernel_wide_avx512 : NULL,
                      avx2 ? rg_gemm_pack_bt_avx2 : pack_bt_portable,
                      avx2 ? rg_gemm_pack_at_avx2 : pack_at_portable,
                      half, dequant, bs, type_size, ours_plan(bt)};
    j.obc = (rg_gemm_ob_ctx){dequant, bs, type_size, rg_gemm_ob_plan(bt)};
    int nth = rg_threadpool_size(pool);
    j.per_thread = per_thread_bytes(r, j.auto_pick, bt);
    size_t need = j.per_thread * (size_t)nth;
    void *owned = NULL;
    if (!work) {
        owned = aligned_alloc(64, need ? (need + 63) / 64 * 64 : 64);
        if (!owned) return rg_fail(err, RG_ERR_NOMEM, "gemm: out of memory for %zu bytes of packing buffers", need);
        work = owned;
    } else if (work_size < need) {
        return rg_fail(err, RG_ERR_ARG, "gemm: work buffer of %zu bytes is below the %zu needed for %d threads",
                       work_size, need, nth);
    }
    j.work = work;
    // Whole problems per thread when there are at least as many as threads
    // (the remainder is shared, run_thread); otherwise all threads work on
    // each problem in turn.
    j.whole_problems = nth > 1 && bt->n_problems >= nth;
    if (r == RG_SGEMM_OPENBLAS) rg_gemm_ob_init();
    rg_threadpool_run(pool, run_thread, &j);
    free(owned);
    return RG_OK;
}

// ---------------------------------------------------------------------------
// Plain F32 SGEMM.

typedef struct sgemm_args {
    const float *A;
    int64_t a_rs, a_cs;
    const float *B;
    int64_t b_rs, b_cs;
    float *C;
    int64_t ldc;
} sgemm_args;

static void sgemm_get(const void *ctx, int64_t p, rg_gemm_problem *prob) {
    const sgemm_args *s = ctx;
    (void)p;
    memset(prob, 0, sizeof *prob);
    prob->a = s->A, prob->a_rs = s->a_rs, prob->a_cs = s->a_cs;
    prob->b.type = RG_TYPE_F32, prob->b.data = s->B, prob->b.rs = s->b_rs, prob->b.cs = s->b_cs;
    prob->c = s->C, prob->ldc = s->ldc;
}

static rg_gemm_batch sgemm_batch(int64_t M, int64_t N, int64_t K, bool accumulate, const sgemm_args *args) {
    rg_gemm_batch bt = {M, N, K, RG_TYPE_F32, false, accumulate, 1, sgemm_get, args};
    return bt;
}

size_t rg_sgemm_work_size(rg_sgemm_impl impl, int64_t M, int64_t N, int64_t K, int n_threads) {
    rg_gemm_batch bt = sgemm_batch(M, N, K, false, NULL);
    return rg_gemm_work_size(impl, &bt, n_threads);
}

rg_status rg_sgemm(rg_threadpool *pool, rg_sgemm_impl impl, int64_t M, int64_t N, int64_t K, const float *A,
                   int64_t a_rs, int64_t a_cs, const float *B, int64_t b_rs, int64_t b_cs, float *C, int64_t ldc,
                   bool accumulate, void *work, size_t work_size, rg_error *err) {
    if (M > 0 && N > 0 && ldc < N)
        return rg_fail(err, RG_ERR_ARG, "sgemm: ldc = %lld is below N = %lld", (long long)ldc, (long long)N);
    sgemm_args args = {A, a_rs, a_cs, B, b_rs, b_cs, C, ldc};
    rg_gemm_batch bt = sgemm_batch(M, N, K, accumulate, &args);
    return rg_gemm_run(pool, impl, &bt, work, work_size, err);
}
