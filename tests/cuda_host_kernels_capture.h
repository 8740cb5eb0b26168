// cuda_host_kernels_capture.h - the scenarios of tests/cuda_host_kernels_capture.cu
// (CUDA code compiled only as the host twin): pointers held in struct kernel
// arguments, graphs replayed after their memory was freed or re-allocated, the
// capture rules of each cudaStreamCaptureMode, and two streams without an event
// wait drained interleaved. The expectations are in tests/test_cuda_host_capture.c.
#ifndef RG_TEST_CUDA_HOST_KERNELS_CAPTURE_H
#define RG_TEST_CUDA_HOST_KERNELS_CAPTURE_H

#include "cuda_host_kernels.h"  // khost_result: what a scenario ended with

#ifdef __cplusplus
extern "C" {
#endif

// Whether the host twin sees descriptors where they are written: v[0] = 1 when
// struct cap_bufs has one and a struct written without one has none.
void khcap_descriptor_trait(khost_result *r);
// A kernel copies x to out[0] and out[1], all three in a struct argument
// (RG_KERNEL_POINTERS lists them). broken: out[1] is a host array. v[0]: wrong elements.
void khcap_struct_pointers(int broken, khost_result *r);
// A struct whose descriptor forgets its member `extra`; broken: extra holds a device
// pointer (a member the check cannot see). Else extra is NULL and the launch runs.
void khcap_struct_undeclared(int broken, khost_result *r);
// A graph captures the struct kernel and a cudaMemcpyAsync, and is replayed twice.
// what: 0 nothing changes (v[0]: wrong elements after the replays); 1 out[0] is freed
// before the second replay; 2 it is freed and its block allocated again (v[1] = 1 when the
// new allocation has the same address); 3 the copy's destination is freed.
void khcap_graph_stale(int what, khost_result *r);
// Begins a capture in `mode` (a cudaStreamCaptureMode) on this thread, or on another
// thread when other_thread, then makes `call` on this thread: 0 cudaMalloc, 1 a
// synchronous cudaMemcpy, 2 cudaDeviceSynchronize, 3 cudaFree, 4 cudaMallocHost. err/msg:
// the call's result; v[0]: cudaStreamEndCapture's result; v[1]: wrong elements after
// replaying the graph (when the capture ended well).
void khcap_capture_call(int mode, int other_thread, int call, khost_result *r);
// Stream 1 fills x, stream 2 computes y = x + 1 (with_wait: after an event wait on
// stream 1's fill), then cudaDeviceSynchronize drains both. v[0]: wrong elements of y.
void khcap_two_streams(int with_wait, khost_result *r);
// A graph forks stream 2 off stream 1: stream 1 fills x, stream 2 computes y = x + 1
// (with_wait: after an event wait on the fill), then joins back; the graph is replayed
// once from fresh memory. v[0]: wrong elements of y.
void khcap_graph_fork(int with_wait, khost_result *r);
// The CUDA backend's pool and graphs (device.cu): a context captures a kernel writing its
// pool slot RG_CU_BUF_TMP2 of 3 MiB. what: 0 the slot was not sized before the capture;
// 1 an uncaptured request sized it; 2 sized, and after the capture the slot grows and the
// graph is replayed (v[1] = 1 when the slot moved). err: the rg_status, msg its message;
// v[0]: the slot's bytes.
void khcap_pool_in_capture(int what, khost_result *r);

#ifdef __cplusplus
}
#endif

#endif
