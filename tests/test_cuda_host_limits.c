// test_cuda_host_limits.c - the launch limits of the host execution: the kernel
// table that scripts/cuda-kernel-table.sh writes from the real nvcc compile
// (src/cuda_host/kernel_table.inc) and the checks src/cuda_host/kernel_limits.cpp
// makes at each launch. Broken launches must fail as a GPU would fail them, each
// error naming the kernel: more threads than the registers allow (checked with a
// kernel given 96 registers, as ssm_scan_back had), more than __launch_bounds__,
// static + dynamic shared memory over the block's limit at launch (the big array on
// a branch no thread takes), a declaration past the table's static bytes, a src/cuda
// kernel the table lacks; their correct twins must pass. And the table must be
// current: regenerated and compared where nvcc is, and at least cross-checked
// against the __global__ kernels of src/cuda/*.cu everywhere.
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "cuda_host_checks.h"
#include "rg_test.h"

// ---------------------------------------------------------------------------
// The table

#define MAX_ROWS 1024

typedef struct table_row {
    int arch, regs, max_threads;
    char file[64], mangled[512];
} table_row;

static int read_table(table_row *rows, int cap) {
    FILE *f = fopen(RG_SOURCE_DIR "/src/cuda_host/kernel_table.inc", "r");
    if (!f) return -1;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < cap) {
        table_row *r = &rows[n];
        if (sscanf(line, "RGH_KERNEL_ROW(%d, \"%63[^\"]\", \"%511[^\"]\"", &r->arch, r->file, r->mangled) != 3) continue;
        int v[8];
        if (!fgets(line, sizeof line, f) || !fgets(line, sizeof line, f) ||
            sscanf(line, " %d, %d, %d, %d, %d, %d, %d, %d)", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) !=
                8)
            break;
        r->regs = v[0], r->max_threads = v[7];
        n++;
    }
    fclose(f);
    return n;
}

// Calls fn(file, kernel name) for each __global__ function defined in src/cuda/*.cu.
static int each_cuda_kernel(void (*fn)(const char *file, const char *name, void *arg), void *arg) {
    DIR *d = opendir(RG_SOURCE_DIR "/src/cuda");
    if (!d) return -1;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".cu")) continue;
        char path[1024], line[1024];
        snprintf(path, sizeof path, RG_SOURCE_DIR "/src/cuda/%s", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        while (fgets(line, sizeof line, f)) {
            const char *g = strstr(line, "__global__"), *c = strstr(line, "//");
            if (!g || (c && c < g)) continue;
            // The name: the identifier before the first '(' that is not __launch_bounds__'s.
            const char *p = g;
            char name[128] = "";
            while ((p = strchr(p, '('))) {
                const char *q = p;
                while (q > g && (q[-1] == '_' || (q[-1] >= '0' && q[-1] <= '9') || (q[-1] >= 'a' && q[-1] <= 'z') ||
                                 (q[-1] >= 'A' && q[-1] <= 'Z')))
                    q--;
                snprintf(name, sizeof name, "%.*s", (int)(p - q), q);
                if (strcmp(name, "__launch_bounds__")) break;
                p = strchr(p, ')');
                if (!p) break;
            }
            // A declaration the formatter split: the name begins the next line.
            if (!strcmp(name, "__launch_bounds__") && fgets(line, sizeof line, f)) {
                const char *q = line, *open = strchr(line, '(');
                while (*q == ' ' || *q == '\t') q++;
                snprintf(name, sizeof name, "%.*s", open && open > q ? (int)(open - q) : 0, q);
            }
            if (name[0]) fn(e->d_name, name, arg), count++;
        }
        fclose(f);
    }
    closedir(d);
    return count;
}

typedef struct table_view {
    const table_row *rows;
    int n, archs[8], n_archs;
} table_view;

static void check_kernel_has_rows(const char *file, const char *name, void *arg) {
    const table_view *t = arg;
    char token[160];
    snprintf(token, sizeof token, "%zu%s", strlen(name), name);  // its <length><name> in the mangled name
    for (int a = 0; a < t->n_archs; a++) {
        int found = 0;
        for (int i = 0; i < t->n && !found; i++)
            found = t->rows[i].arch == t->archs[a] && !strcmp(t->rows[i].file, file) && strstr(t->rows[i].mangled, token);
        RG_CHECK(found, "%s's kernel %s has no row for sm_%d in src/cuda_host/kernel_table.inc: run "
                 "scripts/cuda-kernel-table.sh generate", file, name, t->archs[a]);
    }
}

// The table's max_threads must be the register rule: registers rounded up to 8 a thread (256
// a warp), 64K a block.
static int threads_for(int regs) {
    const int warps = 65536 / (((regs < 1 ? 1 : regs) * 32 + 255) / 256 * 256);
    return warps * 32 > 1024 ? 1024 : warps * 32;
}

// Without nvcc: every kernel of src/cuda/*.cu has rows for every architecture of the table.
static void cross_check_table(void) {
    static table_row rows[MAX_ROWS];
    table_view t = {rows, read_table(rows, MAX_ROWS), {0}, 0};
    RG_REQUIRE(t.n > 0, "cannot read src/cuda_host/kernel_table.inc (%d rows)", t.n);
    for (int i = 0; i < t.n; i++) {
        int known = 0;
        for (int a = 0; a < t.n_archs; a++) known |= t.archs[a] == rows[i].arch;
        if (!known && t.n_archs < 8) t.archs[t.n_archs++] = rows[i].arch;
        RG_CHECK(rows[i].max_threads == threads_for(rows[i].regs), "sm_%d %s: max_threads %d for %d registers, not %d",
                 rows[i].arch, rows[i].mangled, rows[i].max_threads, rows[i].regs, threads_for(rows[i].regs));
    }
    const int kernels = each_cuda_kernel(check_kernel_has_rows, &t);
    RG_CHECK(kernels > 0, "found no __global__ kernel in src/cuda/*.cu");
    printf("    %d kernels of src/cuda/*.cu against %d rows for %d architectures\n", kernels, t.n, t.n_archs);
}

static void test_kernel_table_is_current(void) {
    cross_check_table();
    if (getenv("RG_TEST_QUICK")) {
        printf("    RG_TEST_QUICK: the checked-in table, not compared with a fresh nvcc compile\n");
        return;
    }
    fflush(stdout);
    const int st = system("bash " RG_SOURCE_DIR "/scripts/cuda-kernel-table.sh check");
    const int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (rc == 77) {
        printf("    no nvcc: using the checked-in kernel table (cross-checked above)\n");
        return;
    }
    RG_CHECK(rc == 0, "the kernel table is stale (scripts/cuda-kernel-table.sh check exited %d): run "
             "scripts/cuda-kernel-table.sh generate",
             rc);
}

#ifdef RG_HAVE_CUDA_HOST

#include "cuda_host/rename.h"  // the runtime's names, before the toolkit's header
#include <cuda_runtime_api.h>   // cudaError_t values

#include "cuda_host_kernels_limits.h"


// ---------------------------------------------------------------------------
// Launch checks

static void test_limits_registers(void) {
    khost_result r;
    klim_registers(704, &r);  // 22 warps of 96 * 32 registers: 67584 > 65536
    CHECK_FAILS(r, cudaErrorLaunchOutOfResources, "regs96_kernel", "704 threads", "96 registers", "sm_90",
                "672 threads");
    klim_registers(672, &r);  // 21 warps: 64512
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 0, "%g elements wrong at 672 threads", r.v[0]);
}

static void test_limits_launch_bounds(void) {
    khost_result r;
    klim_launch_bounds(256, &r);
    CHECK_FAILS(r, cudaErrorLaunchOutOfResources, "bounded_kernel", "256 threads", "__launch_bounds__ of 128");
    klim_launch_bounds(128, &r);
    CHECK_OK(r);
}

static void test_limits_static_shared_at_launch(void) {
    khost_result r;
    klim_static_smem(16384, &r);  // 40 KiB static + 16 KiB dynamic > 48 KiB, though no thread declares the 40
    CHECK_FAILS(r, cudaErrorInvalidValue, "big_static_kernel", "40960 bytes of static shared memory",
                "16384 of dynamic");
    klim_static_smem(4096, &r);
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 3.0, "y[0] = %g, expected 3", r.v[0]);
}

static void test_limits_static_shared_over_the_row(void) {
    khost_result r;
    klim_static_smem_row(1024, &r);  // declares 2048 bytes where the row says 1024: the table is wrong
    CHECK_FAILS(r, cudaErrorLaunchFailure, "smem_row_stale_kernel", "2048 bytes of static shared memory declared",
                "1024 the kernel table");
    klim_static_smem_row(2048, &r);
    CHECK_OK(r);
    RG_CHECK(r.v[0] == 31.0, "y[0] = %g, expected 31", r.v[0]);
}

static void test_limits_unlisted_kernel(void) {
    khost_result r;
    klim_unlisted(RG_SOURCE_DIR "/src/cuda/ops_ssm.cu", &r);  // a file the table covers: its kernels have rows
    CHECK_FAILS(r, cudaErrorInvalidDeviceFunction, "unlisted_kernel", "ops_ssm.cu", "no row in the kernel table",
                "cuda-kernel-table.sh generate");
    klim_unlisted(RG_SOURCE_DIR "/tests/cuda_host_kernels_limits.cu", &r);  // a test's kernel: no rows needed
    CHECK_OK(r);
}

// The names nvcc gives these kernels (nvcc -Xptxas -v on the same declarations), with the
// anonymous namespace spelt _GLOBAL__N_1 as the table does.
static void test_limits_kernel_keys(void) {
    static const char *const want[4] = {
        "_ZN12_GLOBAL__N_110lit_kernelILi128EEEv9klim_geomPKfPf",
        "_ZN12_GLOBAL__N_19ew_kernelINS_7klim_opEEEvPKfS3_Pf9klim_geoml",
        "_ZN12_GLOBAL__N_111scan_kernelE9klim_geomPKfS2_Pf",
        "_Z14add_f32_kernelPKfS0_Pfl",
    };
    char keys[4][160];
    klim_keys(keys);
    for (int i = 0; i < 4; i++) RG_CHECK(!strcmp(keys[i], want[i]), "key %d: '%s', nvcc's '%s'", i, keys[i], want[i]);
}

static const rg_test_case cases[] = {
    RG_TEST(test_limits_registers),
    RG_TEST(test_limits_launch_bounds),
    RG_TEST(test_limits_static_shared_at_launch),
    RG_TEST(test_limits_static_shared_over_the_row),
    RG_TEST(test_limits_unlisted_kernel),
    RG_TEST(test_limits_kernel_keys),
    RG_TEST(test_kernel_table_is_current),
    {0},
};

#else  // no host execution in this build

static const rg_test_case cases[] = {
    RG_TEST(test_host_execution_is_built),
    RG_TEST(test_kernel_table_is_current),
    {0},
};

#endif

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
