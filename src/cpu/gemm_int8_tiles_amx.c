// gemm_int8_tiles_amx.c - the int8 tile kernel (gemm_int8_tiles_kernel.h) on the AMX instructions,
// built with -mamx-tile -mamx-int8 (the *_amx.c rule of CMakeLists.txt). A compiler without AMX
// builds a stub, and rg_int8t_amx_built() says so: the path choice then never takes AMX.
#include "cpu/gemm_int8_tiles.h"

#if defined(__AMX_TILE__) && defined(__AMX_INT8__)
#define RG_TILES_HW 1
#define INT8T_MUL rg_int8t_mul_amx
#include "cpu/gemm_int8_tiles_kernel.h"

bool rg_int8t_amx_built(void) { return true; }

#else

#include <stdio.h>
#include <stdlib.h>

bool rg_int8t_amx_built(void) { return false; }

void rg_int8t_mul_amx(const rg_int8t_panel *p, const rg_int8t_cols *c, int rows, int cols, float *y, int64_t ldy) {
    (void)p, (void)c, (void)rows, (void)cols, (void)y, (void)ldy;
    fprintf(stderr, "rg_int8t_mul_amx: this build has no AMX kernel (rg_int8t_amx_built() is false)\n");
    abort();  // a broken invariant: the path choice never takes AMX in such a build
}

#endif
