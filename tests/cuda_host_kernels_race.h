// cuda_host_kernels_race.h - the scenarios of tests/cuda_host_kernels_race.cu
// (CUDA code compiled only as the host twin): races, block-order dependence,
// collectives reached from two call sites, misaligned vector accesses and
// shared-memory bounds. Each broken kernel has a correct twin; `broken` picks.
// The expectations are in tests/test_cuda_host_race.c.
#ifndef RG_TEST_CUDA_HOST_KERNELS_RACE_H
#define RG_TEST_CUDA_HOST_KERNELS_RACE_H

#ifdef __cplusplus
extern "C" {
#endif

// What a scenario ended with (after an error the device was reset).
typedef struct krace_result {
    int err;        // the cudaError_t (0: cudaSuccess)
    char name[64];  // cudaGetErrorName
    char msg[768];  // cudaGetErrorString
    double v[4];    // the scenario's figures
} krace_result;

// 1 when the host twin's memory accesses are instrumented (-DRG_CUDA_HOST_RACECHECK=ON):
// without it the race check, the alignment and the shared-bounds checks are off.
int krace_instrumented(void);

// 64 threads store their index into one shared word (broken) or each into its own.
void krace_shared_write_write(int broken, krace_result *r);
// Thread t stores sh[t] then reads sh[t + 1] with no barrier (broken) or after __syncthreads.
void krace_shared_read_write(int broken, krace_result *r);
// The same in one warp, ordered by __syncwarp in the twin (a GPU's racecheck accepts it).
void krace_warp_read_write(int broken, krace_result *r);
// 64 blocks: block 0 stores 7 into out[0], every other block copies out[0] into
// its own element in the same launch (broken) or in a second launch.
// v[0]: how many of the 64 elements hold 7.
void krace_block_order(int broken, krace_result *r);
// 64 blocks atomicAdd 1 into one word (v[0]: the sum); never a race.
void krace_atomics_across_blocks(krace_result *r);
// Lanes 0-15 and 16-31 reach a full-mask __shfl_sync from two call sites (broken)
// or one. v[0]: lane 31's result.
void krace_divergent_shuffle(int broken, krace_result *r);
// A float4 load (store) at a float's offset from a 256-byte aligned allocation
// (broken) or at a multiple of 4 floats.
void krace_float4_load(int broken, krace_result *r);
void krace_float4_store(int broken, krace_result *r);
// 32 threads read buf[threadIdx.x + 1] of 32 floats of dynamic shared memory
// (broken: thread 31 reads past it) or buf[threadIdx.x].
void krace_past_dynamic_shared(int broken, krace_result *r);
// A static float array read past its end (broken) or within it.
void krace_past_static_shared(int broken, krace_result *r);
// A static shared float array read as float4 (broken: it is 4-byte aligned) or a
// float4 array (16-byte aligned). v[0]: the sum read.
void krace_shared_float_as_float4(int broken, krace_result *r);

#ifdef __cplusplus
}
#endif

#endif
