// ops_flash_avx2.c - the per-item loops of FLASH_ATTN_EXT and FLASH_ATTN_BACK
// (ops_flash_items.h) compiled with -mavx2 -mf16c -mfma: the dot products take four key
// (or value) rows per pass in 8-float registers, and the elementwise loops (the weighted
// sums of v, q, k and dO rows) run 8 floats at a time. The operations and their order are
// the baseline's (each lane's sum runs over the same elements in the same order; no fused
// multiply-adds), so the bits are too: test_ops' flash rows run both.
// Built without AVX2 the entry points do nothing and rg_flash_avx2_built = 0.
#include "cpu/ops_flash_jobs.h"

#if defined(__AVX2__)

const int rg_flash_avx2_built = 1;

#define FA_FN(name) name##_avx2
#include "cpu/ops_flash_items.h"

#else

const int rg_flash_avx2_built = 0;

void rg_flash_fwd_items_avx2(void *arg, int ith, int nth) { (void)arg, (void)ith, (void)nth; }
void rg_flash_dsum_items_avx2(void *arg, int ith, int nth) { (void)arg, (void)ith, (void)nth; }
void rg_flash_dkv_items_avx2(void *arg, int ith, int nth) { (void)arg, (void)ith, (void)nth; }
void rg_flash_dq_items_avx2(void *arg, int ith, int nth) { (void)arg, (void)ith, (void)nth; }

#endif
