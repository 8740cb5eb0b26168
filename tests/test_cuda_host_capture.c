// test_cuda_host_capture.c - the host execution of the CUDA code refuses what a GPU
// refuses around struct arguments, graphs and streams (tests/cuda_host_kernels_capture.cu):
// a host pointer inside a struct argument and a struct member its RG_KERNEL_POINTERS does
// not list are errors naming the kernel, the struct and the member; a graph replayed
// after a struct-held allocation (or a captured copy's) was freed, or freed and allocated
// again, is refused; cudaMalloc, cudaFree, cudaMallocHost, synchronous copies and
// cudaDeviceSynchronize during a capture are refused and spoil it where CUDA's mode
// rules say so (ThreadLocal: the capturing thread; Global: every thread in Global mode)
// and allowed in Relaxed mode; and two streams without an event wait, drained by
// RETRO_CUDA_HOST_ORDER=reverse or =shuffle, give the wrong result (the right one with
// the wait). Each broken case has a correct twin that must pass.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_host_checks.h"
#include "rg_test.h"

#ifdef RG_HAVE_CUDA_HOST

#include "cuda_host/rename.h"  // the runtime's names, before the toolkit's header
#include <cuda_runtime_api.h>   // cudaError_t values

#include "cuda_host_kernels_capture.h"


// Sets (or with NULL unsets) an environment variable, remembering the old value in *saved.
static void env_swap(const char *name, const char *value, char **saved) {
    const char *old = getenv(name);
    *saved = old ? strdup(old) : NULL;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
}
static void env_restore(const char *name, char *saved) {
    if (saved) setenv(name, saved, 1);
    else unsetenv(name);
    free(saved);
}

static void test_capture_descriptors_seen(void) {
    khost_result r;
    khcap_descriptor_trait(&r);
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 1, "the host twin does not tell a struct with RG_KERNEL_POINTERS from one without");
}

static void test_capture_struct_host_pointer(void) {
    khost_result r;
    khcap_struct_pointers(0, &r);
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 0, "struct_copy_kernel through a struct of device pointers: %g elements wrong", r.v[0]);
    khcap_struct_pointers(1, &r);  // out[1] is a host array
    CHECK_FAILS(r, cudaErrorIllegalAddress, "kernel 'struct_copy_kernel'", "argument 0 (cap_bufs::out[1])",
                "a host pointer");
}

static void test_capture_struct_undeclared_member(void) {
    khost_result r;
    khcap_struct_undeclared(0, &r);  // the twin whose descriptor lists extra
    CHECK_OK(r);
    khcap_struct_undeclared(1, &r);
    CHECK_FAILS(r, cudaErrorIllegalAddress, "kernel 'ones_kernel<cap_sneaky>'", "struct cap_sneaky member at byte 16",
                "device memory", "RG_KERNEL_POINTERS does not list");
}

static void test_capture_replay_after_free(void) {
    khost_result r;
    khcap_graph_stale(0, &r);
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 0, "two replays of the graph: %g elements wrong", r.v[0]);
    khcap_graph_stale(1, &r);
    CHECK_FAILS(r, cudaErrorIllegalAddress, "in a graph: kernel 'struct_copy_kernel'", "argument 0 (cap_bufs::out[0])",
                "was freed since the launch was captured");
    khcap_graph_stale(2, &r);
    RG_CHECK(r.v[1] == 1, "the re-allocation did not land on the freed block: the case tests nothing");
    CHECK_FAILS(r, cudaErrorIllegalAddress, "in a graph: kernel 'struct_copy_kernel'", "argument 0 (cap_bufs::out[0])",
                "was freed and its memory re-allocated since the launch was captured");
    khcap_graph_stale(3, &r);
    CHECK_FAILS(r, cudaErrorIllegalAddress, "in a graph: cudaMemcpyAsync: the destination",
                "was freed since the call was captured");
}

static const char *const call_names[] = {"cudaMalloc", "cudaMemcpy", "cudaDeviceSynchronize", "cudaFree",
                                         "cudaMallocHost"};

static void test_capture_thread_local_refuses(void) {
    for (int call = 0; call < 5; call++) {
        khost_result r;
        khcap_capture_call(cudaStreamCaptureModeThreadLocal, 0, call, &r);
        CHECK_FAILS(r, cudaErrorStreamCaptureUnsupported, call_names[call], "cudaStreamCaptureModeThreadLocal",
                    "begun by this thread");
        RG_CHECK(r.v[0] == cudaErrorStreamCaptureInvalidated, "%s: cudaStreamEndCapture gave %g, expected invalidated",
                 call_names[call], r.v[0]);
    }
    // Another thread's ThreadLocal capture does not bind this one.
    khost_result r;
    khcap_capture_call(cudaStreamCaptureModeThreadLocal, 1, 0, &r);
    CHECK_OK(r);
    RG_CHECK(r.v[0] == cudaSuccess && r.v[1] == 0, "the other thread's capture: end %g, %g wrong", r.v[0], r.v[1]);
}

static void test_capture_global_refuses_every_thread(void) {
    khost_result r;
    khcap_capture_call(cudaStreamCaptureModeGlobal, 1, 0, &r);
    CHECK_FAILS(r, cudaErrorStreamCaptureUnsupported, "cudaMalloc", "cudaStreamCaptureModeGlobal",
                "begun by another thread");
    RG_CHECK(r.v[0] == cudaErrorStreamCaptureInvalidated, "cudaStreamEndCapture gave %g, expected invalidated", r.v[0]);
}

static void test_capture_relaxed_allows(void) {
    const int allowed[] = {0, 1, 3, 4};  // cudaMalloc, cudaMemcpy, cudaFree, cudaMallocHost
    for (int k = 0; k < 4; k++) {
        khost_result r;
        khcap_capture_call(cudaStreamCaptureModeRelaxed, 0, allowed[k], &r);
        CHECK_OK(r);
        RG_CHECK(r.v[0] == cudaSuccess && r.v[1] == 0, "%s in Relaxed mode: end %g, %g wrong after the replay",
                 call_names[allowed[k]], r.v[0], r.v[1]);
    }
    // cudaDeviceSynchronize would wait for work the capture only records: refused even so.
    khost_result r;
    khcap_capture_call(cudaStreamCaptureModeRelaxed, 0, 2, &r);
    CHECK_FAILS(r, cudaErrorStreamCaptureUnsupported, "cudaDeviceSynchronize while this thread captures");
}

// A two-stream scenario (with_wait, result: v[0] wrong elements of 1024) in the
// reverse order: right with the event wait, all wrong without it.
static void check_reverse_order(void (*scenario)(int, khost_result *), const char *what) {
    setenv("RETRO_CUDA_HOST_ORDER", "reverse", 1);
    khost_result r;
    scenario(1, &r);
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 0, "%s, reverse order, with the event wait: %g elements wrong", what, r.v[0]);
    scenario(0, &r);
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 1024, "%s, reverse order, without the wait: %g of 1024 wrong, expected all", what, r.v[0]);
}

static void test_capture_missing_event_wait(void) {
    char *saved, *saved_seed;
    env_swap("RETRO_CUDA_HOST_ORDER", NULL, &saved);
    env_swap("RETRO_CUDA_HOST_SEED", NULL, &saved_seed);
    check_reverse_order(khcap_two_streams, "two streams");
    setenv("RETRO_CUDA_HOST_ORDER", "shuffle", 1);
    int wrong_seeds = 0, right_seeds = 0;
    for (int seed = 1; seed <= 16; seed++) {
        char v[16];
        snprintf(v, sizeof v, "%d", seed);
        setenv("RETRO_CUDA_HOST_SEED", v, 1);
        khost_result r;
        khcap_two_streams(1, &r);
        CHECK_OK(r);
        RG_CHECK(r.v[0] == 0, "seed %d with the event wait: %g elements wrong", seed, r.v[0]);
        khcap_two_streams(0, &r);
        CHECK_OK(r);
        if (r.v[0] == 0) right_seeds++;
        if (r.v[0] == 1024) wrong_seeds++;
    }
    printf("    shuffle without the wait: %d of 16 seeds wrong, %d right\n", wrong_seeds, right_seeds);
    RG_CHECK(wrong_seeds > 0 && right_seeds > 0 && wrong_seeds + right_seeds == 16,
             "without the wait %d seeds wrong and %d right: expected some of each and nothing in between", wrong_seeds,
             right_seeds);
    env_restore("RETRO_CUDA_HOST_SEED", saved_seed);
    env_restore("RETRO_CUDA_HOST_ORDER", saved);
}

// The same inside a graph: the replay interleaves the lanes of a forked capture.
static void test_capture_graph_missing_event_wait(void) {
    char *saved;
    env_swap("RETRO_CUDA_HOST_ORDER", NULL, &saved);
    khost_result r;
    khcap_graph_fork(0, &r);  // capture order: the fill was captured first
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 0, "replay in capture order: %g elements wrong", r.v[0]);
    check_reverse_order(khcap_graph_fork, "a forked graph");
    env_restore("RETRO_CUDA_HOST_ORDER", saved);
}

static void test_capture_pool_sized_before(void) {
    khost_result r;
    khcap_pool_in_capture(1, &r);
    RG_CHECK(r.err == 0, "the pool sized before the capture: %s: %s", r.name, r.msg);
    khcap_pool_in_capture(0, &r);
    RG_CHECK(r.err != 0, "the pool grew during a capture");
    RG_CHECK(strstr(r.msg, "pool slot 1 needs 3145728 bytes and holds 0 during a CUDA graph capture") != NULL,
             "the message: %s", r.msg);
    printf("    %s: %s\n", r.name, r.msg);
}

// A graph keeps the pool buffer it was captured with when the slot grows afterwards.
static void test_capture_pool_grows_after_capture(void) {
    khost_result r;
    khcap_pool_in_capture(2, &r);
    RG_CHECK(r.err == 0, "replaying a graph after its pool slot grew: %s: %s", r.name, r.msg);
    RG_CHECK(r.v[1] == 1, "the slot did not move: the case tests nothing");
}

static const rg_test_case cases[] = {
    RG_TEST(test_capture_descriptors_seen),
    RG_TEST(test_capture_struct_host_pointer),
    RG_TEST(test_capture_struct_undeclared_member),
    RG_TEST(test_capture_replay_after_free),
    RG_TEST(test_capture_thread_local_refuses),
    RG_TEST(test_capture_global_refuses_every_thread),
    RG_TEST(test_capture_relaxed_allows),
    RG_TEST(test_capture_missing_event_wait),
    RG_TEST(test_capture_graph_missing_event_wait),
    RG_TEST(test_capture_pool_sized_before),
    RG_TEST(test_capture_pool_grows_after_capture),
    {0},
};

#else  // no host execution in this build

static const rg_test_case cases[] = {
    RG_TEST(test_host_execution_is_built),
    {0},
};

#endif

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
