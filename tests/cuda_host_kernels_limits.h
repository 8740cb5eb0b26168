// cuda_host_kernels_limits.h - the scenarios of tests/cuda_host_kernels_limits.cu:
// launches checked against the kernel table (src/cuda_host/kernel_limits.h), each
// kernel given its row by the test hook as nvcc would have compiled it. The
// expectations are in tests/test_cuda_host_limits.c.
#ifndef RG_TEST_CUDA_HOST_KERNELS_LIMITS_H
#define RG_TEST_CUDA_HOST_KERNELS_LIMITS_H

#include "cuda_host_kernels.h"  // khost_result: what a scenario ended with

#ifdef __cplusplus
extern "C" {
#endif

// A kernel of 96 registers a thread (the row says so; sm_90 allows it 672 threads)
// launched with `threads` threads; v[0]: elements it got wrong.
void klim_registers(int threads, khost_result *r);
// A kernel with __launch_bounds__(128) (and 32 registers) launched with `threads` threads.
void klim_launch_bounds(int threads, khost_result *r);
// A kernel whose 40 KiB static array is declared only on a branch no thread takes,
// launched with `dyn_bytes` of dynamic shared memory (48 KiB a block in all).
void klim_static_smem(int dyn_bytes, khost_result *r);
// A kernel that declares 2 KiB of static shared memory where its row says `table_bytes`.
void klim_static_smem_row(int table_bytes, khost_result *r);
// A kernel without a row, launched as if from `file` (a src/cuda file the table covers,
// or this test's own).
void klim_unlisted(const char *file, khost_result *r);
// kernel_key of four kernels shaped like src/cuda's (a template of an int, a template of a
// type, one in the anonymous namespace, a static one), each into keys[i] (cap bytes).
void klim_keys(char keys[4][160]);

#ifdef __cplusplus
}
#endif

#endif
