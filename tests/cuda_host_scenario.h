// cuda_host_scenario.h - what the scenarios of tests/cuda_host_kernels*.cu share
// (CUDA code compiled only as the host twin): how a scenario ends.
#ifndef RG_TEST_CUDA_HOST_SCENARIO_H
#define RG_TEST_CUDA_HOST_SCENARIO_H

#include <stdio.h>

namespace {

// Ends a scenario: records e and its message (msg, or the runtime's for e) in *r (any
// result struct with err, name and msg), and resets the device after an error so that
// the next scenario starts clean.
template <class R>
void finish(R *r, cudaError_t e, const char *msg = nullptr) {
    r->err = (int)e;
    snprintf(r->name, sizeof r->name, "%s", cudaGetErrorName(e));
    snprintf(r->msg, sizeof r->msg, "%s", msg ? msg : cudaGetErrorString(e));
    if (e != cudaSuccess) cudaDeviceReset();
}

}  // namespace

// In a scenario with `r` in scope: run the call, end the scenario on an error.
#define TRY(call)                \
    do {                         \
        cudaError_t e_ = (call); \
        if (e_ != cudaSuccess) { \
            finish(r, e_);       \
            return;              \
        }                        \
    } while (0)

#endif
