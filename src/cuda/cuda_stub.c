// cuda_stub.c - the CUDA backend's entry points in a build without nvcc.
#include <stdio.h>

#include "base/error.h"
#include "cuda/cuda.h"

int rg_cuda_compiled(void) { return 0; }

int rg_cuda_device_count(char *reason, size_t reason_cap) {
    if (reason && reason_cap) snprintf(reason, reason_cap, "built without CUDA (configured with RG_CUDA=OFF, or nvcc was not found)");
    return 0;
}

rg_status rg_cuda_device_get(int index, rg_cuda_device_info *out, rg_error *err) {
    (void)out;
    return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda device %d: built without CUDA", index);
}

rg_status rg_cuda_add_f32(int index, const float *a, const float *b, float *y, int64_t n, rg_error *err) {
    (void)a, (void)b, (void)y, (void)n;
    return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda device %d: built without CUDA", index);
}
