// ops_ssm_scan_avx2.c - the per-item loops of SSM_SCAN and SSM_SCAN_BACK
// (ops_ssm_scan_items.h) compiled with -mavx2 -mf16c -mfma: their loops along a head's lanes
// p run 8 floats at a time instead of 4. The operations and their order are the baseline's
// (each lane's sum over n or over its p's runs in the same order; -ffp-contract=off keeps
// every multiply and add rounded apart), so the bits are too: test_ops' SSM rows run both.
// Built without AVX2 the entry points do nothing and rg_ssm_scan_avx2_built = 0.
#include "cpu/ops_ssm_scan_jobs.h"

#if defined(__AVX2__)

const int rg_ssm_scan_avx2_built = 1;

#define SCAN_FN(name) name##_avx2
#include "cpu/ops_ssm_scan_items.h"

#else

const int rg_ssm_scan_avx2_built = 0;

void rg_ssm_scan_items_avx2(void *arg, int ith, int nth) { (void)arg, (void)ith, (void)nth; }
void rg_ssm_scan_back_items_avx2(void *arg, int ith, int nth) { (void)arg, (void)ith, (void)nth; }

#endif
