// test_cuda.c - the CUDA backend on a real device, against the CPU. Every case
// skips with the reason where there is no GPU (or no CUDA in the build).
#include <string.h>

#include "base/rng.h"
#include "cuda/cuda.h"
#include "rg_test.h"

static char why[256];

static int have_gpu(void) { return rg_cuda_device_count(why, sizeof why) > 0; }

static void test_cuda_device_is_detected(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    rg_cuda_device_info info;
    rg_error err = {0};
    RG_REQUIRE(rg_cuda_device_get(0, &info, &err) == RG_OK, "%s", err.msg);
    printf("    device 0: %s, compute %d.%d, %zu MiB total, %zu MiB free, %d SMs\n", info.name, info.major, info.minor,
           info.total_mem >> 20, info.free_mem >> 20, info.multiprocessors);
    RG_CHECK(info.name[0] != 0, "empty device name");
    RG_CHECK(info.major >= 7, "compute capability %d.%d is below what this build targets", info.major, info.minor);
    RG_CHECK(info.total_mem > 0 && info.free_mem <= info.total_mem, "memory %zu / %zu", info.free_mem, info.total_mem);
    RG_CHECK(rg_cuda_device_get(9999, &info, &err) != RG_OK && strstr(err.msg, "9999"), "bad index: %s", err.msg);
}

static void test_cuda_add_matches_cpu(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    enum { N = 1000003 };  // not a multiple of the block size
    static float a[N], b[N], y[N];
    for (int i = 0; i < N; i++) {
        a[i] = rg_rng_normal(1, 0, (uint64_t)i);
        b[i] = rg_rng_normal(1, 1, (uint64_t)i);
        y[i] = -1.0f;
    }
    rg_error err = {0};
    RG_REQUIRE(rg_cuda_add_f32(0, a, b, y, N, &err) == RG_OK, "%s", err.msg);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += y[i] != a[i] + b[i];  // one IEEE add: bit-exact on both sides
    RG_CHECK(bad == 0, "%d of %d elements differ from the CPU", bad, N);
}

static const rg_test_case cases[] = {
    RG_TEST(test_cuda_device_is_detected),
    RG_TEST(test_cuda_add_matches_cpu),
    {0},
};

int main(int argc, char **argv) {
    printf("cuda compiled: %s\n", rg_cuda_compiled() ? "yes" : "no");
    return rg_test_run(argc, argv, cases);
}
