// gemm_tiles_emu.c - the BF16 tile kernel (gemm_tiles_kernel.h) on the emulated tiles of
// tiles_emu.c: RG_TILES_EMULATED, the same bits as the AMX build, every tile instruction checked.
#define RG_TILES_KERNEL_NAME rg_gemm_tiles_block_emu
#include "cpu/gemm_tiles_kernel.h"
