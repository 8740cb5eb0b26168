// gemm_tiles_amx.c - the BF16 tile kernel (gemm_tiles_kernel.h) on the AMX hardware (TDPBF16PS,
// TILELOADD, ...). Compiled with -mamx-tile -mamx-bf16 -mamx-int8 (CMakeLists.txt's *_amx.c rule);
// run only where rg_cpu_has_amx_bf16() says so. A compiler without AMX builds a stub.
#include "cpu/gemm_tiles.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#define RG_TILES_HW 1
#define RG_TILES_KERNEL_NAME rg_gemm_tiles_block_amx
#include "cpu/gemm_tiles_kernel.h"

const int rg_gemm_tiles_amx_built = 1;
#else
#include <stdlib.h>

const int rg_gemm_tiles_amx_built = 0;
// Never called: rg_gemm_tiles_run takes the AMX path only where rg_gemm_tiles_amx_built is 1.
void rg_gemm_tiles_block_amx(const rg_tiles_block *blk) {
    (void)blk;
    abort();
}
#endif
