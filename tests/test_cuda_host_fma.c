// test_cuda_host_fma.c - the host execution rounds a multiply-add as the GPU build does
// (issue 22: the same rounding by construction). nvcc compiles src/cuda with --fmad=false
// (scripts/check-fma.sh proves no kernel fuses what its source does not), so on the GPU
// a * b + c is two roundings and fmaf / __fmaf_rn one. The host twin must match both: built
// with -ffp-contract=off, its plain multiply-add rounds twice, and fmaf (glibc's, correctly
// rounded, or vfmadd) and __fmaf_rn (intrinsics.h) are one rounding. A case where the two
// differ (a = 1 + 2^-12: a * a = 1 + 2^-11 + 2^-24 exactly) shows which one ran.
#include <math.h>
#include <stdio.h>

#include "cuda_host_checks.h"
#include "rg_test.h"

#ifdef RG_HAVE_CUDA_HOST

#include "cuda_host_kernels_fma.h"

static void test_host_fma_rounding(void) {
    float out[3] = {-1, -1, -1};
    const int err = khost_fma_rounding(out);
    RG_REQUIRE(err == 0, "fma_rounding_kernel: cudaError %d", err);
    printf("    a * a + c = %a, fmaf = %a, __fmaf_rn = %a (a = 1 + 2^-12, c = -(1 + 2^-11))\n", out[0], out[1], out[2]);
    RG_CHECK(out[0] == 0.0f, "fma_rounding_kernel: the plain a * a + c gave %a, not 0: the host twin contracts it into "
             "an fma (built without -ffp-contract=off?) while nvcc --fmad=false does not", out[0]);
    RG_CHECK(out[1] == 0x1p-24f, "fma_rounding_kernel: fmaf gave %a, not 2^-24: not one rounding", out[1]);
    RG_CHECK(out[2] == 0x1p-24f, "fma_rounding_kernel: __fmaf_rn gave %a, not 2^-24: not one rounding", out[2]);
}

static const rg_test_case cases[] = {
    RG_TEST(test_host_fma_rounding),
    {0},
};

#else  // no host execution in this build

static const rg_test_case cases[] = {
    RG_TEST(test_host_execution_is_built),
    {0},
};

#endif

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
