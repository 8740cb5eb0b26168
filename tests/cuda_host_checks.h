// cuda_host_checks.h - what the tests of the host execution's runtime share
// (tests/test_cuda_host*.c): the checks of a scenario's result (any struct with
// err, name and msg, filled by the scenario's finish() in tests/cuda_host_scenario.h),
// and the one case a build without the host execution has.
#ifndef RG_TEST_CUDA_HOST_CHECKS_H
#define RG_TEST_CUDA_HOST_CHECKS_H

#include <stdio.h>
#include <string.h>

#include "rg_test.h"

#ifdef RG_HAVE_CUDA_HOST

// The scenario must have ended with cudaSuccess.
#define CHECK_OK(r) RG_CHECK((r).err == cudaSuccess, "scenario failed: %s: %s", (r).name, (r).msg)
// The scenario must end with `code` and a message containing each of the strings.
#define CHECK_FAILS(r, code, ...)                                                                               \
    do {                                                                                                        \
        RG_CHECK((r).err == (code), "ended with %s (%d), expected %d: %s", (r).name, (r).err, (code), (r).msg); \
        const char *const want_[] = {__VA_ARGS__};                                                              \
        for (size_t k_ = 0; k_ < sizeof want_ / sizeof *want_; k_++)                                            \
            RG_CHECK(strstr((r).msg, want_[k_]) != NULL, "the message lacks '%s': %s", want_[k_], (r).msg);   \
        printf("    %s: %s\n", (r).name, (r).msg);                                                              \
    } while (0)

#else

static void test_host_execution_is_built(void) {
    RG_SKIP("this build has no host execution of the CUDA code (configured with RG_CUDA_HOST=OFF, or no CUDA "
            "toolkit headers were found)");
}

#endif
#endif
