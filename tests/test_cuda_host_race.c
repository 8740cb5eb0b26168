// test_cuda_host_race.c - what the host execution refuses as a GPU would, or as
// a GPU's racecheck would (tests/cuda_host_kernels_race.cu): a write-write and
// a read-write race on shared memory, the same in one warp (where __syncwarp
// orders), a block reading another block's output in the same launch (under
// RETRO_CUDA_HOST_RACECHECK=1 and under RETRO_CUDA_HOST_ORDER=shuffle), atomics
// shared by blocks (never a race), a full-mask shuffle reached from two call
// sites, misaligned float4 loads and stores, reads past dynamic and static
// shared memory, a float array read as float4. Every broken kernel must fail
// with its kernel named; its correct twin must pass.
//
// The race check, the alignment and the shared-bounds checks see kernel code's
// accesses through the host twin's instrumentation (-DRG_CUDA_HOST_RACECHECK=ON,
// gcc, not with ASan): without it those cases skip, except that the ASan+UBSan
// build must stop at a misaligned float4 load naming the kernel.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_host_checks.h"
#include "rg_test.h"

#ifdef RG_HAVE_CUDA_HOST

#include "cuda_host/rename.h"  // the runtime's names, before the toolkit's header
#include <cuda_runtime_api.h>   // cudaError_t values

#include "cuda_host_kernels_race.h"


typedef void (*scenario)(int broken, krace_result *r);

static void set_or_unset(const char *name, const char *value) {
    if (value) setenv(name, value, 1);
    else unsetenv(name);
}

// Runs a scenario with RETRO_CUDA_HOST_RACECHECK and RETRO_CUDA_HOST_ORDER as
// given (NULL: unset), whatever the caller's environment says, then restores it.
static krace_result run_with(const char *race, const char *order, scenario fn, int broken) {
    char *was_race = getenv("RETRO_CUDA_HOST_RACECHECK"), *was_order = getenv("RETRO_CUDA_HOST_ORDER");
    char saved_race[32] = "", saved_order[32] = "";
    if (was_race) snprintf(saved_race, sizeof saved_race, "%s", was_race);
    if (was_order) snprintf(saved_order, sizeof saved_order, "%s", was_order);
    set_or_unset("RETRO_CUDA_HOST_RACECHECK", race);
    set_or_unset("RETRO_CUDA_HOST_ORDER", order);
    krace_result r;
    fn(broken, &r);
    set_or_unset("RETRO_CUDA_HOST_RACECHECK", was_race ? saved_race : NULL);
    set_or_unset("RETRO_CUDA_HOST_ORDER", was_order ? saved_order : NULL);
    return r;
}

#define NEEDS_INSTRUMENTATION()                                                                              \
    do {                                                                                                     \
        if (!krace_instrumented())                                                                           \
            RG_SKIP("the host twin's accesses are not instrumented in this build (configure with "            \
                    "-DRG_CUDA_HOST_RACECHECK=ON): the race check and the alignment and shared-bounds checks "     \
                    "are off");                                                                              \
    } while (0)

// ---------------------------------------------------------------------------
// Shared memory

static void test_race_shared_write_write(void) {
    NEEDS_INSTRUMENTATION();
    krace_result r = run_with(NULL, NULL, krace_shared_write_write, 1);
    CHECK_OK(r);  // without the check one thread wins, every run the same one: the bug is invisible
    printf("    without the race check: thread %g won\n", r.v[0]);
    r = run_with("1", NULL, krace_shared_write_write, 1);
    CHECK_FAILS(r, cudaErrorLaunchFailure, "kernel 'shared_write_write_kernel' block (0,0,0) thread (1,0,0)",
                "writes 4 bytes at shared offset 0x", "that thread (0,0,0) wrote", "a race");
    r = run_with("1", NULL, krace_shared_write_write, 0);
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 0, "sh[0] = %g", r.v[0]);
}

static void test_race_shared_read_write(void) {
    NEEDS_INSTRUMENTATION();
    krace_result r = run_with("1", NULL, krace_shared_read_write, 1);
    CHECK_FAILS(r, cudaErrorLaunchFailure, "kernel 'shared_read_write_kernel'", "thread (1,0,0)",
                "writes 4 bytes at shared offset 0x", "that thread (0,0,0) read");
    r = run_with("1", "reverse", krace_shared_read_write, 1);  // the other order: the read finds the write
    CHECK_FAILS(r, cudaErrorLaunchFailure, "kernel 'shared_read_write_kernel'", "reads 4 bytes at shared offset",
                "wrote");
    r = run_with("1", NULL, krace_shared_read_write, 0);  // with __syncthreads between them
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 0, "out[63] = %g, expected sh[0] = 0", r.v[0]);
}

// A GPU's racecheck accepts warp-synchronous code ordered by __syncwarp; so does this one.
static void test_race_warp_syncwarp(void) {
    NEEDS_INSTRUMENTATION();
    krace_result r = run_with("1", NULL, krace_warp_read_write, 1);
    CHECK_FAILS(r, cudaErrorLaunchFailure, "kernel 'warp_read_write_kernel'", "with no barrier or warp collective");
    r = run_with("1", "shuffle", krace_warp_read_write, 0);
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 0, "out[31] = %g, expected sh[0] = 0", r.v[0]);
}

// ---------------------------------------------------------------------------
// Blocks of one launch

static void test_race_block_order(void) {
    krace_result r = run_with(NULL, NULL, krace_block_order, 1);
    CHECK_OK(r);  // in increasing order block 0 always runs first: the bug is invisible
    RG_CHECK(r.v[0] == 64, "increasing order: %g of 64 hold 7", r.v[0]);
    r = run_with(NULL, "shuffle", krace_block_order, 1);
    CHECK_OK(r);
    printf("    shuffled blocks: %g of 64 read block 0's value\n", r.v[0]);
    RG_CHECK(r.v[0] < 64, "shuffled blocks: all 64 hold 7; some block must have run before block 0");
    r = run_with(NULL, "shuffle", krace_block_order, 0);  // two launches: ordered on a GPU too
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 64, "two launches, shuffled: %g of 64 hold 7", r.v[0]);
    if (!krace_instrumented()) return;
    r = run_with("1", NULL, krace_block_order, 1);
    CHECK_FAILS(r, cudaErrorLaunchFailure, "kernel 'block_order_kernel' block (1,0,0)",
                "reads 4 bytes of device memory at 0x", "that block (0,0,0) wrote in the same launch");
    r = run_with("1", "shuffle", krace_block_order, 0);
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 64, "two launches under the race check: %g of 64 hold 7", r.v[0]);
}

static void atomics_scenario(int broken, krace_result *r) {
    (void)broken;
    krace_atomics_across_blocks(r);
}

static void test_race_atomics_across_blocks(void) {
    NEEDS_INSTRUMENTATION();
    krace_result r = run_with("1", "shuffle", atomics_scenario, 0);
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 64 * 32, "atomicAdd over 64 blocks of 32: %g", r.v[0]);
}

// ---------------------------------------------------------------------------
// Collectives

static void test_race_divergent_shuffle(void) {
    krace_result r = run_with(NULL, NULL, krace_divergent_shuffle, 1);
    CHECK_FAILS(r, cudaErrorLaunchFailure, "kernel 'divergent_shuffle_kernel' block (0,0,0) thread (16,0,0)",
                "__shfl_sync(mask 0xffffffff) at ", "cuda_host_kernels_race.cu:", "lanes 0x0000ffff of warp 0 wait",
                "from the same call site");
    r = run_with(NULL, "shuffle", krace_divergent_shuffle, 1);  // any lane order; the seed is printed
    CHECK_FAILS(r, cudaErrorLaunchFailure, "kernel 'divergent_shuffle_kernel'", "from the same call site",
                "RETRO_CUDA_HOST_ORDER=shuffle RETRO_CUDA_HOST_SEED=");
    r = run_with(NULL, "shuffle", krace_divergent_shuffle, 0);
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 1, "lane 31 got %g from lane 1, expected 1", r.v[0]);
}

// ---------------------------------------------------------------------------
// Alignment and shared-memory bounds

// Without the instrumentation the misaligned float4 cannot be a kernel error,
// but the process must still end naming the kernel: in the ASan+UBSan build
// UBSan's alignment check stops the load and the runtime's death callback names
// the kernel; in a plain build the aligned SSE store faults and the runtime's
// SIGSEGV handler names it (the load, split into four float loads by the
// compiler, goes unseen there). The child is this binary again, told which
// scenario by the environment.
static void misaligned_in_child(const char *which, const char *report, const char *named) {
    char self[4096], cmd[4200];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    RG_REQUIRE(len > 0, "cannot find this binary");
    self[len] = 0;
    snprintf(cmd, sizeof cmd, "exec '%s' 2>&1", self);
    setenv("KRACE_CHILD", which, 1);
    FILE *p = popen(cmd, "r");
    unsetenv("KRACE_CHILD");
    RG_REQUIRE(p != NULL, "cannot start the child");
    static char out[16384];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    const int status = pclose(p);
    const char *line = strstr(out, report);
    printf("    child: %.*s\n", line ? (int)strcspn(line, "\n") : 0, line ? line : "");
    RG_CHECK(status != 0, "the child survived a misaligned %s", which);
    RG_CHECK(line != NULL, "no '%s' report: %.300s", report, out);
    RG_CHECK(strstr(out, named) != NULL, "the report does not name the kernel (%s): %.600s", named, out);
}

static void test_race_misaligned_float4(void) {
    if (!krace_instrumented()) {
#if defined(__SANITIZE_ADDRESS__)
        misaligned_in_child("float4_load", "misaligned address", "the sanitizer stopped kernel 'float4_load_kernel'");
#else
        misaligned_in_child("float4_store", "retrograd cuda host: SIGSEGV", "in kernel 'float4_store_kernel'");
#endif
        return;
    }
    krace_result r = run_with(NULL, NULL, krace_float4_load, 1);
    CHECK_FAILS(r, cudaErrorLaunchFailure, "kernel 'float4_load_kernel' block (0,0,0) thread (0,0,0)",
                "a 16-byte load at 0x", "(device memory): a GPU requires 16-byte alignment");
    r = run_with(NULL, NULL, krace_float4_load, 0);
    CHECK_OK(r);
    // A misaligned store killed the process (movaps) with no kernel named; now it is the kernel's error.
    r = run_with(NULL, NULL, krace_float4_store, 1);
    CHECK_FAILS(r, cudaErrorLaunchFailure, "kernel 'float4_store_kernel'", "a 16-byte store at 0x",
                "a GPU requires 16-byte alignment");
    r = run_with(NULL, NULL, krace_float4_store, 0);
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 1, "y[4] = %g after the float4 store", r.v[0]);
}

static void test_race_past_dynamic_shared(void) {
    NEEDS_INSTRUMENTATION();
    krace_result r = run_with(NULL, NULL, krace_past_dynamic_shared, 1);
    CHECK_FAILS(r, cudaErrorLaunchFailure, "kernel 'past_dynamic_kernel' block (0,0,0) thread (31,0,0)",
                "a 4-byte load at shared offset 0x80", "past the launch's 128 bytes of dynamic shared memory");
    r = run_with(NULL, NULL, krace_past_dynamic_shared, 0);
    CHECK_OK(r);
}

static void test_race_past_static_shared(void) {
    NEEDS_INSTRUMENTATION();
    krace_result r = run_with(NULL, NULL, krace_past_static_shared, 1);
    CHECK_FAILS(r, cudaErrorLaunchFailure, "kernel 'past_static_kernel' block (0,0,0) thread (7,0,0)",
                "a 4-byte load at shared offset", "outside every static shared array");
    r = run_with(NULL, NULL, krace_past_static_shared, 0);
    CHECK_OK(r);
}

// A shared float array is only float-aligned on a GPU: reading it as float4 faults there.
static void test_race_shared_element_alignment(void) {
    NEEDS_INSTRUMENTATION();
    krace_result r = run_with(NULL, NULL, krace_shared_float_as_float4, 1);
    CHECK_FAILS(r, cudaErrorLaunchFailure, "kernel 'shared_float_as_float4_kernel'",
                "a 16-byte load at shared offset", "a GPU requires 16-byte alignment");
    r = run_with(NULL, NULL, krace_shared_float_as_float4, 0);
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 63 * 64 / 2, "float4 array: the sum read is %g", r.v[0]);
}

static const rg_test_case cases[] = {
    RG_TEST(test_race_shared_write_write),
    RG_TEST(test_race_shared_read_write),
    RG_TEST(test_race_warp_syncwarp),
    RG_TEST(test_race_block_order),
    RG_TEST(test_race_atomics_across_blocks),
    RG_TEST(test_race_divergent_shuffle),
    RG_TEST(test_race_misaligned_float4),
    RG_TEST(test_race_past_dynamic_shared),
    RG_TEST(test_race_past_static_shared),
    RG_TEST(test_race_shared_element_alignment),
    {0},
};

#else  // no host execution in this build

static const rg_test_case cases[] = {
    RG_TEST(test_host_execution_is_built),
    {0},
};

#endif

int main(int argc, char **argv) {
#ifdef RG_HAVE_CUDA_HOST
    const char *child = getenv("KRACE_CHILD");
    if (child) {  // misaligned_in_child
        krace_result r;
        if (!strcmp(child, "float4_load")) krace_float4_load(1, &r);
        else krace_float4_store(1, &r);
        printf("the child's misaligned %s ended with %s\n", child, r.name);
        return 0;
    }
#endif
    return rg_test_run(argc, argv, cases);
}
