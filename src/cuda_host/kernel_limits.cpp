// kernel_limits.cpp - the kernel table (kernel_table.inc, written by
// scripts/cuda-kernel-table.sh from the nvcc compile) and the launch checks it
// makes possible: what a device of each architecture of the table would refuse.
//
// A kernel launched from a file the table covers (a src/cuda/*.cu) must have rows:
// one without is a kernel added or changed since the table was generated, and its
// launch is refused (cudaErrorInvalidDeviceFunction) rather than let through
// unchecked. Kernels of other files (tests/*.cu, never compiled by nvcc) have rows
// only when a test adds them (kernel_limits_add).
#include <cxxabi.h>
#include <stdlib.h>
#include <string.h>

#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "cuda_host/kernel_limits.h"
#include "cuda_host/state.h"

namespace rgh {

namespace {

struct Row {
    int arch;
    const char *file, *mangled, *demangled;
    int regs, static_smem, spill_stores, spill_loads, stack, launch_bounds, min_blocks, max_threads;
};

const Row kTable[] = {
#define RGH_KERNEL_ROW(...) {__VA_ARGS__},
#include "cuda_host/kernel_table.inc"
#undef RGH_KERNEL_ROW
};

struct Kernel {
    std::string key, file;  // file: the launch site's base name
};

struct Limits {
    std::map<std::string, std::vector<Row>> rows;  // by mangled name
    std::set<std::string> files;                     // the .cu files the table covers
    std::set<int> archs;
    std::map<const void *, Kernel> kernels;        // noted by RGH_LAUNCH
    std::deque<std::string> names;                 // the names of the rows tests add (deque: they never move)
    Limits() {
        for (const Row &r : kTable) {
            rows[r.mangled].push_back(r);
            files.insert(r.file);
            archs.insert(r.arch);
        }
    }
};

std::mutex g_mutex;

Limits &limits(void) {
    static Limits l;
    return l;
}

const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

// The demangled name of a key, for a row a test added.
std::string demangle(const std::string &key) {
    int status = 0;
    char *d = abi::__cxa_demangle(key.c_str(), nullptr, nullptr, &status);
    std::string s = status == 0 && d ? d : key;
    free(d);
    return s;
}

}  // namespace

int threads_for_registers(int regs) {
    // Registers go to a warp in units of 256 (regs rounded up to a multiple of 8, times
    // 32 lanes); a block has 64K of them (sm_80..sm_90). The same formula as the table's
    // max_threads column (scripts/cuda-kernel-table.sh).
    if (regs < 1) regs = 1;
    const int per_warp = (regs * 32 + 255) / 256 * 256;
    const int threads = 65536 / per_warp * 32;
    return threads > 1024 ? 1024 : threads;
}

void note_kernel(const void *fn, const char *ktag_name, const char *file) {
    std::lock_guard<std::mutex> guard(g_mutex);
    limits().kernels[fn] = Kernel{kernel_key(ktag_name), base_name(file)};
}

void kernel_limits_add(const char *ktag_name, int arch, int regs, int static_smem, int launch_bounds) {
    std::lock_guard<std::mutex> guard(g_mutex);
    Limits &l = limits();
    const std::string key = kernel_key(ktag_name);
    l.names.push_back(key);
    const char *mangled = l.names.back().c_str();
    l.names.push_back(demangle(key));
    const char *demangled = l.names.back().c_str();
    std::vector<Row> &rows = l.rows[key];
    for (auto a = l.archs.rbegin(); a != l.archs.rend(); ++a) {  // the newest first, as the table
        if (arch && *a != arch) continue;
        rows.push_back(Row{*a, "(test)", mangled, demangled, regs, static_smem, 0, 0, 0, launch_bounds, 0,
                           threads_for_registers(regs)});
    }
}

bool within_kernel_limits(const char *name, const void *fn, dim3 block, size_t shmem, size_t smem_limit,
                          long *static_smem) {
    std::lock_guard<std::mutex> guard(g_mutex);
    Limits &l = limits();
    *static_smem = -1;
    auto k = l.kernels.find(fn);
    if (k == l.kernels.end()) return true;  // not launched through RGH_LAUNCH
    auto it = l.rows.find(k->second.key);
    if (it == l.rows.end()) {
        if (!l.files.count(k->second.file)) return true;  // a test's kernel: the table does not cover its file
        set_error(cudaErrorInvalidDeviceFunction,
                  "kernel '%s' of %s has no row in the kernel table (src/cuda_host/kernel_table.inc is stale: run "
                  "scripts/cuda-kernel-table.sh generate)",
                  name, k->second.file.c_str());
        return false;
    }
    const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    for (const Row &r : it->second) {
        if (threads > (unsigned long long)r.max_threads) {
            set_error(cudaErrorLaunchOutOfResources,
                      "kernel '%s' (%s): a block of %llu threads at %d registers a thread needs more than the 65536 "
                      "registers a block has on sm_%d, enough for %d threads (too many resources requested for launch)",
                      name, r.demangled, threads, r.regs, r.arch, r.max_threads);
            return false;
        }
        // The device folds the launch bounds and the registers into one figure, the function's
        // maxThreadsPerBlock ("beyond which a launch of the function would fail"), so both are
        // refused alike: cudaErrorLaunchOutOfResources. (Not yet confirmed on a GPU.)
        if (r.launch_bounds && threads > (unsigned long long)r.launch_bounds) {
            set_error(cudaErrorLaunchOutOfResources,
                      "kernel '%s' (%s): a block of %llu threads, over its __launch_bounds__ of %d (sm_%d, %d registers)",
                      name, r.demangled, threads, r.launch_bounds, r.arch, r.regs);
            return false;
        }
        if ((size_t)r.static_smem + shmem > smem_limit) {
            set_error(cudaErrorInvalidValue,
                      "kernel '%s' (%s): %d bytes of static shared memory (sm_%d) and %zu of dynamic exceed the "
                      "block's %zu",
                      name, r.demangled, r.static_smem, r.arch, shmem, smem_limit);
            return false;
        }
        if (r.static_smem > *static_smem) *static_smem = r.static_smem;
    }
    return true;
}

}  // namespace rgh
