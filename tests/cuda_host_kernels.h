// cuda_host_kernels.h - the scenarios of tests/cuda_host_kernels.cu, which is
// CUDA code compiled only as the host twin (src/cuda_host/). Each scenario
// runs kernels and runtime calls and reports what it observed; the
// expectations are in tests/test_cuda_host.c.
#ifndef RG_TEST_CUDA_HOST_KERNELS_H
#define RG_TEST_CUDA_HOST_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif

// What a scenario ended with. After an error the device was reset
// (cudaDeviceReset), so the next scenario starts clean.
typedef struct khost_result {
    int err;         // the cudaError_t (0: cudaSuccess)
    char name[64];   // cudaGetErrorName
    char msg[768];   // cudaGetErrorString: names the kernel, argument, block, thread
    double v[8];     // the scenario's figures
} khost_result;

// One lane's view of the warp collectives (khost_warp_ops).
typedef struct khost_lane {
    float sum_down;       // __shfl_down_sync tree over the warp: lane 0 holds the sum of (lane + 1)
    float sum_xor;        // __shfl_xor_sync butterfly: every lane holds that sum
    float seg_sum;        // the butterfly with width 8: the sum over the lane's 8-lane segment
    int scan;             // inclusive scan of (lane + 1) with __shfl_up_sync
    int bcast;            // __shfl_sync from lane 5
    unsigned ballot;      // __ballot_sync(lane % 3 == 0)
    int all_true, any7;   // __all_sync(1), __any_sync(lane == 7)
    unsigned active;      // __activemask()
    unsigned match;       // __match_any_sync(lane / 4)
    unsigned reduce_add;  // __reduce_add_sync(lane)
    int count_odd;        // __syncthreads_count(threadIdx.x odd) over the block
} khost_lane;

void khost_device_info(char *name, int name_cap, khost_result *r);
// Sums x[i] = (i % 7) - 3 over n elements: a block tree in shared memory, then
// the block sums on the host (v[0]). broken: the tree lacks its __syncthreads.
void khost_block_sum(int n, int threads, int broken, khost_result *r);
// Every collective for `threads` threads in one block (out[threads]).
void khost_warp_ops(int threads, khost_lane *out, khost_result *r);
// A warp sum that reads its neighbours' values through shared memory without
// __syncwarp or a shuffle (v[0]: lane 0's result).
void khost_warp_smem_no_sync(khost_result *r);
// n threads: atomicAdd float/int/unsigned long long/double of 1, atomicMax and
// atomicMin of the thread index, the threads that win one atomicCAS, the
// atomicExch count. v[0..7] in that order.
void khost_atomics(int n, khost_result *r);
// Reverses `bytes` / 4 floats through dynamic shared memory (v[0]: mismatches);
// set_attr raises the kernel's limit with cudaFuncSetAttribute first.
void khost_dynamic_smem(int bytes, int set_attr, khost_result *r);
// y = 2 x + 1 over n elements by a grid-stride loop of `blocks` blocks (v[0]: mismatches).
void khost_grid_stride(int n, int blocks, int threads, khost_result *r);
// Every thread of a 3-D grid of 3-D blocks writes its global index (v[0]: mismatches, v[1]: threads).
void khost_thread_ids(khost_result *r);
// Stream 1 fills x, stream 2 computes y = x + 1 and copies it back; with_wait:
// stream 2 waits on an event recorded after the fill. v[0]: wrong elements of y.
void khost_streams(int with_wait, khost_result *r);
// Legacy default stream ordering: v[0] wrong elements after a blocking stream's
// write, v[1] after a non-blocking stream's write (both read on stream 0, no events).
void khost_legacy_stream(khost_result *r);
// A D2H cudaMemcpyAsync of a kernel's output: v[0] what the host reads before
// synchronizing (the old value 7), v[1] after (42).
void khost_async_stale(khost_result *r);
// A captured sequence (copy in, three kernels, copy out) replayed twice by a
// graph against the same work run directly: v[0] differing bits, v[1] replays,
// v[2] the cudaError_t of a synchronize during a capture, v[3] of ending that capture.
void khost_graph(khost_result *r);
// Events: v[0] elapsed ms >= 0 between two records, v[1] cudaEventQuery after
// synchronizing, v[2] a host function ran after the kernel before it (1).
void khost_events(khost_result *r);
// Launch configuration errors: which = 0 a block of 1025 threads, 1 a grid of 0,
// 2 64 KiB of dynamic shared memory without the attribute, 3 a block z of 65.
void khost_config_error(int which, khost_result *r);
// RETRO_CUDA_HOST_MEM_MB = mb: v[0] total MiB, v[1] the cudaError_t of
// allocating mb + 1 MiB, v[2] free MiB after allocating mb / 2.
void khost_memory_limit(int mb, khost_result *r);
// The launch time of 100,000 threads (v[0], seconds) and of 1,000,000 (v[1]).
void khost_launch_time(khost_result *r);

// Thread t reads what thread t - 1 wrote to shared memory, with no barrier
// between (64 threads): v[0] how many read unwritten (NaN) values.
void khost_neighbour_no_barrier(khost_result *r);

// Deliberately broken kernels and host code.
void khost_oob_write(khost_result *r);             // writes one element past its allocation
void khost_host_pointer_arg(khost_result *r);      // a host pointer as the kernel's argument 1
void khost_use_after_free(khost_result *r);        // a freed allocation as argument 0
void khost_barrier_after_exit(khost_result *r);    // threads return before the others' __syncthreads
void khost_shuffle_exited_lane(khost_result *r);   // a shuffle whose mask names a returned lane
void khost_deadlock(khost_result *r);              // half a warp at __syncwarp, the rest at __syncthreads
void khost_deref_device_pointer(void);             // host code writes through a device pointer

#ifdef __cplusplus
}
#endif

#endif
