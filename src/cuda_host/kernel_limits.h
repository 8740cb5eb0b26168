// kernel_limits.h - what the real compile says a kernel may be launched with.
// scripts/cuda-kernel-table.sh compiles every src/cuda/*.cu with nvcc and writes
// kernel_table.inc: per architecture and kernel, its registers, static shared
// memory and __launch_bounds__. At each launch, kernel_limits.cpp refuses what a
// device of any of those architectures would refuse: a block of more threads than
// the registers or the launch bounds allow, static + dynamic shared memory over the
// block's limit. The host compiler's own __launch_bounds__ records nothing: the
// table is the truth.
//
// A kernel is known by its mangled name, which the host compiler and nvcc spell the
// same way (Itanium ABI) but for the anonymous namespace and the L of a static
// function: RGH_LAUNCH hands the kernel to keyed<F>() as a template argument, and
// typeid(KTag<F>).name() carries F's mangled name.
#ifndef RG_CUDA_HOST_KERNEL_LIMITS_H
#define RG_CUDA_HOST_KERNEL_LIMITS_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include <string>
#include <typeinfo>

namespace rgh {

template <auto F>
struct KTag {};

// The kernel's name as the table spells it, from typeid(KTag<F>).name(); "" when
// the compiler spells KTag in a way this does not read.
std::string kernel_key(const char *ktag_name);

// Remembers that fn is the kernel ktag_name names, launched from `file` (the
// launch site's __FILE__: a src/cuda file the table covers must have its row).
void note_kernel(const void *fn, const char *ktag_name, const char *file);

// RGH_LAUNCH's view of a kernel: F itself, noted once.
template <auto F>
inline decltype(F) keyed(const char *file) {
    static const bool noted = (note_kernel(reinterpret_cast<const void *>(F), typeid(KTag<F>).name(), file), true);
    (void)noted;
    return F;
}

// At launch: false, with the error set (cudaGetLastError) naming the kernel, the
// threads, the registers and the architecture, when a block of `block` threads
// with `shmem` dynamic bytes under a static + dynamic limit of `smem_limit` would be
// refused on an architecture of the table, or when fn comes from a file the table
// covers but has no row (the table is stale). *static_smem: the most static shared
// memory the table gives the kernel, -1 when it has no row (a test kernel).
bool within_kernel_limits(const char *name, const void *fn, dim3 block, size_t shmem, size_t smem_limit,
                          long *static_smem);

// Tests: a row for a kernel nvcc never compiles (tests/*.cu), for architecture
// `arch` (0: every architecture of the table), as if the table had it.
void kernel_limits_add(const char *ktag_name, int arch, int regs, int static_smem, int launch_bounds);
template <auto F>
inline void kernel_limits_add(int arch, int regs, int static_smem, int launch_bounds) {
    kernel_limits_add(typeid(KTag<F>).name(), arch, regs, static_smem, launch_bounds);
}
// The most threads a block of a kernel of `regs` registers a thread may have (sm_80..sm_90).
int threads_for_registers(int regs);

}  // namespace rgh

#endif
