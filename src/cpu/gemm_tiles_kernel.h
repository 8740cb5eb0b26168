// gemm_tiles_kernel.h - the one source of the BF16 tile kernel (gemm_tiles.h, RG_TILES_AMX order),
// included by gemm_tiles_amx.c (RG_TILES_HW: the AMX intrinsics) and gemm_tiles_emu.c (the
// emulated tiles). The including file defines RG_TILES_KERNEL_NAME, the function's name.
//
// Tiles: tmm0-3 hold 32 x 32 of C (tmm0 rows 0-15 columns 0-15, tmm1 rows 0-15 columns 16-31,
// tmm2 rows 16-31 columns 0-15, tmm3 rows 16-31 columns 16-31), tmm4-5 two A tiles (rows 0-15,
// 16-31), tmm6-7 two B tiles (columns 0-15, 16-31): each tile load feeds two TDPBF16PS. The two B
// tiles of a column pair are reused over every row pair while they are in L1 (the column pair is
// the outer loop); A streams from L2.
//
// Each step adds one K step of 32 to the four C tiles, in increasing K, so every C(i, j) follows
// the AMX order of gemm_tiles.h whatever the blocking. A 32 x 32 block of C that does not lie
// wholly inside C goes through blk->stage (copied in, computed, copied out: the same operations
// on the same values).
#ifndef RG_TILES_KERNEL_NAME
#error "define RG_TILES_KERNEL_NAME before including gemm_tiles_kernel.h"
#endif

#include <string.h>

#include "cpu/gemm_tiles.h"
#include "cpu/tiles.h"

void RG_TILES_KERNEL_NAME(const rg_tiles_block *blk) {
    rg_tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 8; t++) rg_tile_config_set(&cfg, t, RG_TILE_MAX_ROWS, RG_TILE_MAX_COLSB);
    RG_TILE_LOADCONFIG(&cfg);
    const size_t a_bytes = (size_t)((blk->m_tiles - 1) * blk->a_mt_stride + blk->n_steps * RG_TILES_TILE_ELEMS) * 2;
    const size_t b_bytes = (size_t)((blk->n_tiles - 1) * blk->b_nt_stride + blk->n_steps * RG_TILES_TILE_ELEMS) * 2;
    RG_TILE_BOUNDS(blk->a, a_bytes);
    RG_TILE_BOUNDS(blk->b, b_bytes);
    RG_TILE_BOUNDS(blk->c, (size_t)((blk->rows - 1) * blk->ldc + blk->cols) * sizeof(float));
    RG_TILE_BOUNDS(blk->stage, 32 * 32 * sizeof(float));
    for (int64_t nt = 0; nt < blk->n_tiles; nt += 2) {
        const int64_t c0 = nt * 16, vc = blk->cols - c0 < 32 ? blk->cols - c0 : 32;
        const uint16_t *b0 = blk->b + nt * blk->b_nt_stride, *b1 = b0 + blk->b_nt_stride;
        for (int64_t mt = 0; mt < blk->m_tiles; mt += 2) {
            const int64_t r0 = mt * 16, vr = blk->rows - r0 < 32 ? blk->rows - r0 : 32;
            const uint16_t *a0 = blk->a + mt * blk->a_mt_stride, *a1 = a0 + blk->a_mt_stride;
            const int full = vr == 32 && vc == 32;
            float *cp = blk->c + r0 * blk->ldc + c0;
            size_t cs = (size_t)blk->ldc * sizeof(float);
            if (!full) {
                // Stage the part of C that exists (rows vr, columns vc); the rest is never stored back.
                memset(blk->stage, 0, 32 * 32 * sizeof(float));
                if (blk->load_c)
                    for (int64_t r = 0; r < vr; r++) memcpy(blk->stage + r * 32, cp + r * blk->ldc, (size_t)vc * sizeof(float));
                cp = blk->stage, cs = 32 * sizeof(float);
            }
            if (blk->load_c || !full) {
                RG_TILE_LOADD(0, cp, cs);
                RG_TILE_LOADD(1, cp + 16, cs);
                RG_TILE_LOADD(2, (const char *)cp + 16 * cs, cs);
                RG_TILE_LOADD(3, (const char *)(cp + 16) + 16 * cs, cs);
            } else {
                RG_TILE_ZERO(0);
                RG_TILE_ZERO(1);
                RG_TILE_ZERO(2);
                RG_TILE_ZERO(3);
            }
            for (int64_t s = 0; s < blk->n_steps; s++) {
                const int64_t off = s * RG_TILES_TILE_ELEMS;
                RG_TILE_LOADD(4, a0 + off, 64);
                RG_TILE_LOADD(5, a1 + off, 64);
                RG_TILE_LOADD(6, b0 + off, 64);
                RG_TILE_LOADD(7, b1 + off, 64);
                RG_TILE_DPBF16PS(0, 4, 6);
                RG_TILE_DPBF16PS(1, 4, 7);
                RG_TILE_DPBF16PS(2, 5, 6);
                RG_TILE_DPBF16PS(3, 5, 7);
            }
            RG_TILE_STORED(0, cp, cs);
            RG_TILE_STORED(1, cp + 16, cs);
            RG_TILE_STORED(2, (char *)cp + 16 * cs, cs);
            RG_TILE_STORED(3, (char *)(cp + 16) + 16 * cs, cs);
            if (!full) {
                float *c = blk->c + r0 * blk->ldc + c0;
                for (int64_t r = 0; r < vr; r++) memcpy(c + r * blk->ldc, blk->stage + r * 32, (size_t)vc * sizeof(float));
            }
        }
    }
    RG_TILE_RELEASE();
}
