// gemm_int8_tiles_emu.c - the int8 tile kernel (gemm_int8_tiles_kernel.h) on the emulated tiles of
// cpu/tiles.h: the same bits as on AMX, every tile instruction checked; for tests and for
// RG_TILES_EMULATE=1 on CPUs without the matrix unit (slow).
#define INT8T_MUL rg_int8t_mul_emu
#include "cpu/gemm_int8_tiles_kernel.h"
