// gemm_int8_tiles_kernel.h - THE int8 tile kernel (gemm_int8_tiles.h): a panel of 32 weight rows
// times a group of 32 Q8_0 columns on TDPBUSD, one source for both builds. Included once by
// gemm_int8_tiles_emu.c (cpu/tiles.h's emulated tiles: every configuration, load, store and product
// checked as the hardware would) and once by gemm_int8_tiles_amx.c (the AMX instructions), each
// defining INT8T_MUL, the function's name, first.
//
// Per sub-block of 32 (Q6_K: per half of 16, twice): the A tiles (weights, unsigned codes) and the
// B tiles (activations, signed codes) are loaded, the accumulator tiles zeroed, up to 4 TDPBUSD
// give the exact integer sums of 32 x 32 outputs, stored to memory and scaled into the F32
// accumulators in plain C, per output in sub-block order: gemm_int8.h's steps, so the bits of
// rg_int8_panel_mul_ref. Tiles the shape does not need (rows <= 16: tmm5, cols <= 16: tmm7) are
// configured but neither loaded nor used.
#include <string.h>

#include "cpu/gemm_int8_tiles.h"
#include "cpu/tiles.h"
#include "tensor/quant/quant.h"

#ifndef INT8T_MUL
#error "define INT8T_MUL (the kernel's name) before including gemm_int8_tiles_kernel.h"
#endif

// The integer sums of one step: [tile 2a + b][16 rows][16 columns].
typedef int32_t int8t_sums[4][16][16];

// acc[16a + r][16b + j] from the sums of tile 2a + b, for the types with a code offset (Q4_0, Q5_0,
// Q8_0): fma((float)(isum - offset sx), fl(d dx), acc).
static inline void int8t_scale_offset(float acc[restrict 32][32], const int32_t t[restrict 16][16], int a, int b,
                                      const float *scale, const float *d, const int32_t *sum, int32_t offset) {
    for (int r = 0; r < 16; r++) {
        const float sc = scale[16 * a + r];
        float *ar = acc[16 * a + r] + 16 * b;
        const float *db = d + 16 * b;
        const int32_t *sb = sum + 16 * b;
        for (int j = 0; j < 16; j++) ar[j] = __builtin_fmaf((float)(t[r][j] - offset * sb[j]), sc * db[j], ar[j]);
    }
}

// Q4_K: fma((float)isum, fl((d sc) dx), acc), then fma(-(dmin m), dx sx, acc).
static inline void int8t_scale_min(float acc[restrict 32][32], const int32_t t[restrict 16][16], int a, int b,
                                   const float *scale, const float *min, const float *d, const float *dsum) {
    for (int r = 0; r < 16; r++) {
        const float sc = scale[16 * a + r], mn = min[16 * a + r];
        float *ar = acc[16 * a + r] + 16 * b;
        const float *db = d + 16 * b, *ds = dsum + 16 * b;
        for (int j = 0; j < 16; j++) {
            ar[j] = __builtin_fmaf((float)t[r][j], sc * db[j], ar[j]);
            ar[j] = __builtin_fmaf(-mn, ds[j], ar[j]);
        }
    }
}

// Q6_K: the halves' sums t0, t1 combined in integers, sc_0 (t0 - 32 sx_0) + sc_1 (t1 - 32 sx_1), then one fma.
static inline void int8t_scale_q6(float acc[restrict 32][32], const int32_t t0[restrict 16][16],
                                  const int32_t t1[restrict 16][16], int a, int b, const float *scale,
                                  const int32_t *sc0, const int32_t *sc1, const float *d, const int32_t *s0,
                                  const int32_t *s1) {
    for (int r = 0; r < 16; r++) {
        const float sc = scale[16 * a + r];
        const int32_t h0 = sc0[16 * a + r], h1 = sc1[16 * a + r];
        float *ar = acc[16 * a + r] + 16 * b;
        const float *db = d + 16 * b;
        const int32_t *sb0 = s0 + 16 * b, *sb1 = s1 + 16 * b;
        for (int j = 0; j < 16; j++) {
            const int32_t is = h0 * (t0[r][j] - 32 * sb0[j]) + h1 * (t1[r][j] - 32 * sb1[j]);
            ar[j] = __builtin_fmaf((float)is, sc * db[j], ar[j]);
        }
    }
}

// One TDPBUSD step: A tiles from a (16 rows, a_stride bytes apart), B tiles from b (64 bytes a row),
// the sums stored into out. na, nb: how many A and B tiles the shape needs (1 or 2).
static inline void int8t_step(const uint8_t *a, int a_stride, const uint8_t *b, int na, int nb, int8t_sums out) {
    RG_TILE_LOADD(4, a, a_stride);
    if (na == 2) RG_TILE_LOADD(5, a + 512, a_stride);
    RG_TILE_LOADD(6, b, 64);
    if (nb == 2) RG_TILE_LOADD(7, b + 512, 64);
    RG_TILE_ZERO(0);
    RG_TILE_DPBUSD(0, 4, 6);
    RG_TILE_STORED(0, out[0], 64);
    if (nb == 2) {
        RG_TILE_ZERO(1);
        RG_TILE_DPBUSD(1, 4, 7);
        RG_TILE_STORED(1, out[1], 64);
    }
    if (na == 2) {
        RG_TILE_ZERO(2);
        RG_TILE_DPBUSD(2, 5, 6);
        RG_TILE_STORED(2, out[2], 64);
        if (nb == 2) {
            RG_TILE_ZERO(3);
            RG_TILE_DPBUSD(3, 5, 7);
            RG_TILE_STORED(3, out[3], 64);
        }
    }
}

void INT8T_MUL(const rg_int8t_panel *p, const rg_int8t_cols *c, int rows, int cols, float *y, int64_t ldy) {
    const bool q6 = p->type == RG_TYPE_Q6_K;
    const int na = rows > 16 ? 2 : 1, nb = cols > 16 ? 2 : 1;
    rg_tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 4; t++) rg_tile_config_set(&cfg, t, 16, 64);          // accumulators, 16 x 16 dwords
    for (int t = 4; t < 6; t++) rg_tile_config_set(&cfg, t, 16, q6 ? 16 : 32); // A: 16 rows of K bytes
    for (int t = 6; t < 8; t++) rg_tile_config_set(&cfg, t, q6 ? 4 : 8, 64);   // B: K / 4 rows of 16 dwords
    int8t_sums sums[2];
    RG_TILE_LOADCONFIG(&cfg);
    RG_TILE_BOUNDS(p->codes, p->n_sub * RG_INT8T_SUB);  // the emulation's windows: what the tiles may touch
    RG_TILE_BOUNDS(c->codes, c->n_sub * RG_INT8T_SUB);
    RG_TILE_BOUNDS(sums, sizeof sums);
    float acc[32][32];
    memset(acc, 0, sizeof acc);
    for (int64_t s = 0; s < p->n_sub; s++) {
        const uint8_t *a = p->codes + s * RG_INT8T_SUB, *b = c->codes + s * RG_INT8T_SUB;
        const float *scale = p->scale + s * 32, *d = c->d + s * 32;
        if (q6) {
            int8t_step(a, 32, b, na, nb, sums[0]);            // k 0..15: A bytes 0..15, B rows 0..3
            int8t_step(a + 16, 32, b + 256, na, nb, sums[1]); // k 16..31
        } else {
            int8t_step(a, 32, b, na, nb, sums[0]);
        }
        for (int ia = 0; ia < na; ia++)
            for (int ib = 0; ib < nb; ib++) {
                const int t = 2 * ia + ib;
                if (p->type == RG_TYPE_Q4_K)
                    int8t_scale_min(acc, sums[0][t], ia, ib, scale, p->min + s * 32, d, c->dsum + s * 32);
                else if (q6)
                    int8t_scale_q6(acc, sums[0][t], sums[1][t], ia, ib, scale, p->sc16 + 2 * s * 32,
                                   p->sc16 + (2 * s + 1) * 32, d, c->sum16 + 2 * s * 32, c->sum16 + (2 * s + 1) * 32);
                else
                    int8t_scale_offset(acc, sums[0][t], ia, ib, scale, d, c->sum + s * 32, p->offset);
            }
    }
    RG_TILE_RELEASE();
    for (int j = 0; j < cols; j++)
        for (int r = 0; r < rows; r++) y[j * ldy + r] = acc[r][j];
}
