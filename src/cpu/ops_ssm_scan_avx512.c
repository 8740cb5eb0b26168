// ops_ssm_scan_avx512.c - the per-item loops of SSM_SCAN and SSM_SCAN_BACK
// (ops_ssm_scan_items.h) compiled with AVX-512 as well: a head's lanes p run 16 at a
// time, and the backward's token step makes G, gB, q, dB and dC in one pass over the
// states with all of a head's lanes in registers (P <= 64), where the AVX2 build needs
// two. The operations and their order are the baseline's (each lane's sums in the same
// order, dB's and dC's sums over p in rg_ssm_lanes_sum's eight lanes; -ffp-contract=off),
// so the bits are too: test_ops' SSM rows compare them with the baseline's. Used where
// rg_cpu_has_avx512_vnni() says AVX-512 is usable; built without it the entry points do
// nothing and rg_ssm_scan_avx512_built = 0.
#include "cpu/ops_ssm_scan_jobs.h"

#if defined(__AVX512F__) && defined(__AVX2__)

const int rg_ssm_scan_avx512_built = 1;

#define SCAN_FN(name) name##_avx512
#include "cpu/ops_ssm_scan_items.h"

#else

const int rg_ssm_scan_avx512_built = 0;

void rg_ssm_scan_items_avx512(void *arg, int ith, int nth) { (void)arg, (void)ith, (void)nth; }
void rg_ssm_scan_back_items_avx512(void *arg, int ith, int nth) { (void)arg, (void)ith, (void)nth; }

#endif
