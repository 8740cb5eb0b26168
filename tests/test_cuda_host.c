// test_cuda_host.c - the host execution of the CUDA code (src/cuda_host/) on
// its own: kernels written for it (tests/cuda_host_kernels.cu, compiled only as
// the host twin) run through the runtime, and the results must be what CUDA's
// semantics give. Correct kernels pass: barriers, shuffles and votes, atomics,
// dynamic shared memory, grid-stride loops, 3-D indices, streams and events,
// the legacy stream, graph capture and replay. Deliberately broken kernels and
// host code fail, each in the way a GPU would show the bug or better: a missing
// barrier or __syncwarp reads poisoned shared memory, an out-of-bounds write is
// caught (ASan, or the red zones' canaries), a host or freed pointer passed to
// a kernel, a barrier some threads never reach and a deadlocked block are
// errors naming the kernel, a host dereference of device memory crashes, and
// an async copy read before synchronizing holds the old bytes.
//
// cuBLAS has its own file (test_cuda_host_blas.c). Without the CUDA toolkit's
// headers the host execution is not built and every case skips saying so.
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_host_checks.h"
#include "rg_test.h"

#ifdef RG_HAVE_CUDA_HOST

#include "cuda_host/rename.h"  // the runtime's names, before the toolkit's header
#include <cuda_runtime_api.h>   // cudaError_t values

#include "cuda_host_kernels.h"

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_ASAN 1
#else
#define HAVE_ASAN 0
#endif


// Runs fn in a child process; *status is its wait status, err its stderr (truncated).
static void run_child(void (*fn)(void), int *status, char *err, size_t cap) {
    int fds[2];
    err[0] = 0;
    *status = -1;
    if (pipe(fds) != 0) return;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        signal(SIGSEGV, SIG_DFL);  // die by the signal, not by a sanitizer's handler
        fn();
        _exit(0);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t k;
    while ((k = read(fds[0], err + n, cap - 1 - n)) > 0 && n + (size_t)k < cap - 1) n += (size_t)k;
    if (k > 0) n += (size_t)k;
    err[n < cap ? n : cap - 1] = 0;
    close(fds[0]);
    waitpid(pid, status, 0);
}

// ---------------------------------------------------------------------------
// The device

static void test_host_device_properties(void) {
    char name[256];
    khost_result r;
    khost_device_info(name, sizeof name, &r);
    CHECK_OK(r);
    printf("    %s: %g device, compute %g, warp %g, shared %g / %g bytes, %g MiB, %g SM\n", name, r.v[0], r.v[1] / 10,
           r.v[2], r.v[3], r.v[4], r.v[5], r.v[6]);
    RG_CHECK(!strcmp(name, "host execution of the CUDA code (not a GPU)"), "name '%s'", name);
    RG_CHECK(r.v[0] == 1 && r.v[1] == 90 && r.v[2] == 32, "count %g, compute %g, warp %g", r.v[0], r.v[1], r.v[2]);
    RG_CHECK(r.v[3] == 48 * 1024 && r.v[4] == 232448, "shared memory %g, opt-in %g", r.v[3], r.v[4]);
    RG_CHECK(r.v[5] == 4096 && r.v[6] == 1, "memory %g MiB, %g SMs", r.v[5], r.v[6]);
    RG_CHECK(r.v[7] == 1, "cudaSetDevice(1) is not cudaErrorInvalidDevice");
}

static void test_host_memory_limit(void) {
    khost_result r;
    khost_memory_limit(64, &r);
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 64, "RETRO_CUDA_HOST_MEM_MB=64 reports %g MiB", r.v[0]);
    RG_CHECK(r.v[1] == cudaErrorMemoryAllocation, "65 MiB of 64: cudaMalloc gave %g", r.v[1]);
    RG_CHECK(r.v[2] > 31.9 && r.v[2] < 32.1, "free after 32 MiB: %g MiB", r.v[2]);
}

// ---------------------------------------------------------------------------
// Correct kernels

static double block_sum_expected(int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += i % 7 - 3;
    return s;
}

static void test_host_block_reduction(void) {
    static const struct {
        int n, threads;
    } cases[] = {{1, 32}, {1000, 128}, {100003, 256}, {5000, 1024}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        khost_result r;
        khost_block_sum(cases[c].n, cases[c].threads, 0, &r);
        CHECK_OK(r);
        const double want = block_sum_expected(cases[c].n);
        printf("    n %-6d threads %-4d sum %g (expected %g)\n", cases[c].n, cases[c].threads, r.v[0], want);
        RG_CHECK(r.v[0] == want, "n %d: sum %g, expected %g", cases[c].n, r.v[0], want);
    }
}

static void test_host_warp_collectives(void) {
    enum { T = 64 };
    khost_lane out[T];
    khost_result r;
    khost_warp_ops(T, out, &r);
    CHECK_OK(r);
    int bad = 0;
    for (int t = 0; t < T; t++) {
        const int lane = t % 32, seg = lane / 8;
        const khost_lane *o = &out[t];
        unsigned ballot = 0, match = 0;
        for (int l = 0; l < 32; l++) ballot |= (unsigned)(l % 3 == 0) << l;
        for (int l = 0; l < 32; l++) match |= (unsigned)(l / 4 == lane / 4) << l;
        const float seg_sum = (float)(8 * seg * 8 + 36);  // (8 seg + 1) + ... + (8 seg + 8)
        const struct {
            const char *what;
            int ok;
        } rows[] = {
            {"__shfl_down_sync sum in lane 0", lane != 0 || o->sum_down == 528.0f},
            {"__shfl_xor_sync butterfly sum", o->sum_xor == 528.0f},
            {"__shfl_xor_sync width 8", o->seg_sum == seg_sum},
            {"__shfl_up_sync inclusive scan", o->scan == (lane + 1) * (lane + 2) / 2},
            {"__shfl_sync broadcast of lane 5", o->bcast == 50},
            {"__ballot_sync", o->ballot == ballot},
            {"__all_sync / __any_sync", o->all_true == 1 && o->any7 == 1},
            {"__activemask", o->active == 0xFFFFFFFFu},
            {"__match_any_sync", o->match == match},
            {"__reduce_add_sync", o->reduce_add == 496},
            {"__syncthreads_count", o->count_odd == T / 2},
        };
        for (size_t k = 0; k < sizeof rows / sizeof *rows; k++)
            if (!rows[k].ok && bad++ < 8) RG_CHECK(rows[k].ok, "thread %d: %s", t, rows[k].what);
    }
    printf("    %d threads, 11 collectives each: %d wrong\n", T, bad);
}

static void test_host_atomics(void) {
    enum { N = 1000 };
    khost_result r;
    khost_atomics(N, &r);
    CHECK_OK(r);
    printf("    %d threads: float %g int %g u64 %g double %g max %g min %g cas winners %g exch %g\n", N, r.v[0], r.v[1],
           r.v[2], r.v[3], r.v[4], r.v[5], r.v[6], r.v[7]);
    const int threads = (N + 127) / 128 * 128;
    RG_CHECK(r.v[0] == threads && r.v[1] == threads && r.v[2] == threads && r.v[3] == threads, "the sums of 1");
    RG_CHECK(r.v[4] == threads - 1 && r.v[5] == 0, "atomicMax %g atomicMin %g", r.v[4], r.v[5]);
    RG_CHECK(r.v[6] == 1, "%g threads won the atomicCAS", r.v[6]);
    RG_CHECK(r.v[7] >= 1 && r.v[7] <= threads, "atomicExch left %g", r.v[7]);
}

static void test_host_dynamic_shared_memory(void) {
    khost_result r;
    khost_dynamic_smem(4096, 0, &r);
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 0, "4 KiB: %g elements reversed wrongly", r.v[0]);
    khost_dynamic_smem(100 * 1024, 0, &r);  // above 48 KiB without the attribute: a launch error, as on a GPU
    CHECK_FAILS(r, cudaErrorInvalidValue, "reverse_dyn_kernel", "cudaFuncAttributeMaxDynamicSharedMemorySize");
    khost_dynamic_smem(100 * 1024, 1, &r);  // with it (which stays set for the kernel)
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 0, "100 KiB: %g elements reversed wrongly", r.v[0]);
}

static void test_host_grid_stride_and_indices(void) {
    khost_result r;
    khost_grid_stride(100000, 7, 96, &r);
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 0, "grid-stride loop: %g wrong", r.v[0]);
    khost_thread_ids(&r);
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 0, "3-D grid of 3-D blocks: %g of %g threads wrote a wrong index", r.v[0], r.v[1]);
}

static void test_host_launch_configuration(void) {
    static const struct {
        int which, code;
        const char *what;
    } cases[] = {
        {0, cudaErrorInvalidConfiguration, "1025 threads"},
        {1, cudaErrorInvalidConfiguration, "(0,1,1) blocks"},
        {2, cudaErrorInvalidValue, "65536 bytes of dynamic shared memory"},
        {3, cudaErrorInvalidConfiguration, "(1,1,65)"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        khost_result r;
        khost_config_error(cases[c].which, &r);
        CHECK_FAILS(r, cases[c].code, cases[c].what);
        RG_CHECK(r.v[0] == cudaSuccess && r.v[1] == cudaSuccess, "a launch error must not be sticky (%g, %g)", r.v[0],
                 r.v[1]);
    }
}

static void test_host_launch_time(void) {
    khost_result r;
    khost_launch_time(&r);
    CHECK_OK(r);
    // Printed, not asserted: timings are for benchmarks (a shared CI machine varies).
    printf("    a launch of 100,000 threads %.3f s, of 1,000,000 threads %.3f s\n", r.v[0], r.v[1]);
}

// ---------------------------------------------------------------------------
// Ordering: streams, events, graphs, deferred work

static void test_host_streams_and_events(void) {
    khost_result r;
    khost_streams(1, &r);
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 0, "with cudaStreamWaitEvent: %g elements wrong", r.v[0]);
    khost_streams(0, &r);  // no wait: stream 2 reads x before stream 1 has filled it
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 4096, "without the wait %g of 4096 elements are wrong, expected all (unwritten memory)", r.v[0]);
    khost_legacy_stream(&r);
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 0, "stream 0 after a blocking stream: %g wrong", r.v[0]);
    RG_CHECK(r.v[1] == 1024, "stream 0 after a non-blocking stream: %g of 1024 wrong, expected all", r.v[1]);
    khost_events(&r);
    CHECK_OK(r);
    printf("    event elapsed %.3f ms, query after sync %g, host function ordered %g\n", r.v[0], r.v[1], r.v[2]);
    RG_CHECK(r.v[0] >= 0 && r.v[1] == cudaSuccess && r.v[2] == 1, "events: %g ms, query %g, host function %g", r.v[0],
             r.v[1], r.v[2]);
}

static void test_host_async_copy_is_deferred(void) {
    khost_result r;
    khost_async_stale(&r);
    CHECK_OK(r);
    printf("    host reads %g before cudaStreamSynchronize, %g after\n", r.v[0], r.v[1]);
    RG_CHECK(r.v[0] == 7, "before synchronizing the host sees %g, expected the old 7", r.v[0]);
    RG_CHECK(r.v[1] == 42, "after synchronizing the host sees %g, expected 42", r.v[1]);
}

static void test_host_graph_replay(void) {
    khost_result r;
    khost_graph(&r);
    CHECK_OK(r);
    printf("    %g replays, %g elements differ from the direct run\n", r.v[1], r.v[0]);
    RG_CHECK(r.v[0] == 0, "the graph's replays differ from the direct run in %g elements", r.v[0]);
    RG_CHECK(r.v[2] == cudaErrorStreamCaptureUnsupported, "synchronizing a capturing stream gave %g", r.v[2]);
    RG_CHECK(r.v[3] == cudaErrorStreamCaptureInvalidated, "ending the spoiled capture gave %g", r.v[3]);
}

// ---------------------------------------------------------------------------
// Broken kernels and host code

static void test_host_missing_syncthreads_reads_poison(void) {
    khost_result r;
    khost_block_sum(1000, 128, 1, &r);
    CHECK_OK(r);
    printf("    sum without barriers: %g (the correct sum is %g)\n", r.v[0], block_sum_expected(1000));
    RG_CHECK(isnan(r.v[0]), "a tree without __syncthreads gave %g: it must read unwritten (NaN) shared memory",
             r.v[0]);
}

static void test_host_missing_syncwarp_reads_poison(void) {
    khost_result r;
    khost_warp_smem_no_sync(&r);
    CHECK_OK(r);
    RG_CHECK(isnan(r.v[0]), "lanes reading neighbours through shared memory without __syncwarp gave %g", r.v[0]);
}

// The increasing order cannot see a read of what a lower thread wrote without a
// barrier; RETRO_CUDA_HOST_ORDER=reverse can.
static void test_host_reverse_order(void) {
    const char *was = getenv("RETRO_CUDA_HOST_ORDER");
    khost_result fwd, rev;
    unsetenv("RETRO_CUDA_HOST_ORDER");
    khost_neighbour_no_barrier(&fwd);
    setenv("RETRO_CUDA_HOST_ORDER", "reverse", 1);
    khost_neighbour_no_barrier(&rev);
    if (was) setenv("RETRO_CUDA_HOST_ORDER", was, 1);
    else unsetenv("RETRO_CUDA_HOST_ORDER");
    CHECK_OK(fwd);
    CHECK_OK(rev);
    printf("    thread t reads sh[t - 1] without a barrier: %g NaN in increasing order, %g in reverse\n", fwd.v[0],
           rev.v[0]);
    RG_CHECK(fwd.v[0] == 0, "increasing order: %g threads read NaN (they run after the thread they read)", fwd.v[0]);
    RG_CHECK(rev.v[0] == 63, "reverse order: %g of 63 threads read NaN", rev.v[0]);
    khost_result sum;  // a correct kernel does not care
    setenv("RETRO_CUDA_HOST_ORDER", "reverse", 1);
    khost_block_sum(100003, 256, 0, &sum);
    if (was) setenv("RETRO_CUDA_HOST_ORDER", was, 1);
    else unsetenv("RETRO_CUDA_HOST_ORDER");
    CHECK_OK(sum);
    RG_CHECK(sum.v[0] == block_sum_expected(100003), "reverse order: block sum %g", sum.v[0]);
}

static void oob_child(void) {
    khost_result r;
    khost_oob_write(&r);
}

static void test_host_out_of_bounds_write(void) {
    if (HAVE_ASAN) {  // ASan reports the write where it happens and ends the process
        int status;
        char err[8192];
        run_child(oob_child, &status, err, sizeof err);
        const char *line = strstr(err, "AddressSanitizer");
        printf("    child: %.*s\n", line ? (int)strcspn(line, "\n") : 0, line ? line : "");
        RG_CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0), "the child survived an out-of-bounds write");
        RG_CHECK(line != NULL, "no AddressSanitizer report: %.300s", err);
        RG_CHECK(strstr(err, "oob_write_kernel") != NULL, "the report does not show the kernel: %.300s", err);
        return;
    }
    khost_result r;
    khost_oob_write(&r);
    CHECK_FAILS(r, cudaErrorIllegalAddress, "oob_write_kernel", "red zone after device allocation", "offset +4000");
}

static void test_host_pointer_argument(void) {
    khost_result r;
    khost_host_pointer_arg(&r);
    CHECK_FAILS(r, cudaErrorIllegalAddress, "kernel 'copy_kernel' argument 1", "host pointer");
    RG_CHECK(r.v[0] == cudaErrorIllegalAddress, "cudaGetLastError after the launch gave %g", r.v[0]);
    khost_use_after_free(&r);
    CHECK_FAILS(r, cudaErrorIllegalAddress, "kernel 'copy_kernel' argument 0", "freed device memory");
}

static void test_host_barrier_not_reached(void) {
    khost_result r;
    khost_barrier_after_exit(&r);
    CHECK_FAILS(r, cudaErrorLaunchFailure, "kernel 'barrier_after_exit_kernel' block (0,0,0) thread (200,0,0)",
                "returned while 200 threads wait at __syncthreads()");
    khost_shuffle_exited_lane(&r);
    CHECK_FAILS(r, cudaErrorLaunchFailure, "kernel 'shuffle_exited_lane_kernel' block (0,0,0) thread (31,0,0)",
                "returned while lanes 0x7fffffff wait for it in __shfl_xor_sync");
    khost_deadlock(&r);
    CHECK_FAILS(r, cudaErrorLaunchFailure, "deadlock_kernel", "no thread can go on", "__syncwarp");
}

static void deref_child(void) { khost_deref_device_pointer(); }

static void test_host_dereference_crashes(void) {
    int status;
    char err[4096];
    run_child(deref_child, &status, err, sizeof err);
    printf("    the child %s\n", WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "did not die by a signal");
    RG_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV,
             "host code writing through a device pointer must get SIGSEGV (status 0x%x): %.200s", status, err);
}

// Some of the cases again with ucontext's switch instead of ours (a child run
// of this binary per case), the faulting ones included.
static void test_host_ucontext_fibers(void) {
    if (getenv("RETRO_CUDA_HOST_FIBERS")) RG_SKIP("this run already uses RETRO_CUDA_HOST_FIBERS=%s", getenv("RETRO_CUDA_HOST_FIBERS"));
    static const char *const again[] = {"test_host_block_reduction", "test_host_warp_collectives",
                                        "test_host_graph_replay", "test_host_barrier_not_reached"};
    for (size_t i = 0; i < sizeof again / sizeof *again; i++) {
        char cmd[512], line[256] = "";
        snprintf(cmd, sizeof cmd, "RETRO_CUDA_HOST_FIBERS=ucontext /proc/%d/exe %s 2>/dev/null | tail -1", (int)getpid(),
                 again[i]);
        fflush(stdout);
        FILE *p = popen(cmd, "r");
        if (p && !fgets(line, sizeof line, p)) line[0] = 0;
        if (p) pclose(p);
        line[strcspn(line, "\n")] = 0;
        printf("    ucontext %-34s %s\n", again[i], line);
        RG_CHECK(!strncmp(line, "1 passed, 0 failed", 18), "%s with RETRO_CUDA_HOST_FIBERS=ucontext: '%s'", again[i], line);
    }
}

static const rg_test_case cases[] = {
    RG_TEST(test_host_device_properties),
    RG_TEST(test_host_memory_limit),
    RG_TEST(test_host_block_reduction),
    RG_TEST(test_host_warp_collectives),
    RG_TEST(test_host_atomics),
    RG_TEST(test_host_dynamic_shared_memory),
    RG_TEST(test_host_grid_stride_and_indices),
    RG_TEST(test_host_launch_configuration),
    RG_TEST(test_host_launch_time),
    RG_TEST(test_host_streams_and_events),
    RG_TEST(test_host_async_copy_is_deferred),
    RG_TEST(test_host_graph_replay),
    RG_TEST(test_host_missing_syncthreads_reads_poison),
    RG_TEST(test_host_missing_syncwarp_reads_poison),
    RG_TEST(test_host_reverse_order),
    RG_TEST(test_host_out_of_bounds_write),
    RG_TEST(test_host_pointer_argument),
    RG_TEST(test_host_barrier_not_reached),
    RG_TEST(test_host_dereference_crashes),
    RG_TEST(test_host_ucontext_fibers),
    {0},
};

#else  // no host execution in this build

static const rg_test_case cases[] = {
    RG_TEST(test_host_execution_is_built),
    {0},
};

#endif

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
