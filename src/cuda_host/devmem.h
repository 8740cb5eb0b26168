// devmem.h - device memory of the host execution: one mapping reserved at the
// first cudaMalloc (RETRO_CUDA_HOST_MEM_MB, default 4096 MiB, is what
// cudaMemGetInfo reports and what fits), PROT_NONE except while device work
// runs (kernels, copies, memsets, cuBLAS), so that host code dereferencing a
// device pointer gets a SIGSEGV as it would on a GPU. Every allocation sits
// between red zones; new and freed bytes are filled with 0xFF (NaN as float or
// double) so that reading what was never written shows. Under AddressSanitizer
// the red zones and freed blocks are poisoned, so a kernel's out-of-bounds
// access is reported where it happens; without it the red zones hold a canary
// that is checked after every piece of device work and at cudaFree. Freed
// blocks wait in a quarantine before reuse so a stale pointer does not reach
// a new allocation at once.
//
// Pinned host memory (cudaMallocHost) is ordinary host memory, registered so
// that kernels may take it (mapped memory, as with unified addressing).
#ifndef RG_CUDA_HOST_DEVMEM_H
#define RG_CUDA_HOST_DEVMEM_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include <string>

namespace rgh {

cudaError_t dev_malloc(void **out, size_t bytes);
cudaError_t dev_free(void *p);
size_t dev_total(void);
size_t dev_used(void);

// What a pointer is, for the checks of kernel arguments and copies.
enum class Ptr {
    null,
    device,         // inside a live allocation (its end included)
    device_freed,   // in a block that was freed
    device_stray,   // in the device mapping but in no allocation (a red zone, unallocated space)
    pinned,         // cudaMallocHost memory
    host,           // anything else
};
Ptr classify(const void *p);
const char *ptr_kind_name(Ptr k);
// The serial number of the live allocation that holds p (0: none). Every cudaMalloc
// gets a new one, so a graph can tell its memory from a later allocation at the same
// address.
uint64_t dev_serial(const void *p);
// NULL when p still lies in the allocation that had `serial` (from dev_serial when the
// work was recorded; 0: none, nothing to compare), else what happened to it since.
const char *dev_since(const void *p, uint64_t serial);
// The device mapping's address range (0, 0 before the first cudaMalloc).
void dev_mapping(uintptr_t *lo, size_t *span);
// true when [p, p + n) lies inside one live device allocation.
bool dev_range(const void *p, size_t n);
// true when [p, p + n) lies inside one pinned host allocation.
bool pinned_range(const void *p, size_t n);

// Device memory readable and writable while at least one DevAccess lives.
void dev_open(void);
void dev_close(void);
struct DevAccess {
    DevAccess() { dev_open(); }
    ~DevAccess() { dev_close(); }
    DevAccess(const DevAccess &) = delete;
    DevAccess &operator=(const DevAccess &) = delete;
};
// Host code (cudaLaunchHostFunc) inside a drain: device memory closed meanwhile.
struct DevSuspend {
    DevSuspend();
    ~DevSuspend();
    DevSuspend(const DevSuspend &) = delete;
    DevSuspend &operator=(const DevSuspend &) = delete;
    int depth;
};

// "" when every red zone holds its canary, else which allocation was written
// past and where (the device memory must be open). Always "" under ASan.
std::string dev_check_red_zones(void);

cudaError_t pinned_malloc(void **out, size_t bytes);
cudaError_t pinned_free(void *p);

// Frees everything and drops the mapping (cudaDeviceReset); the next cudaMalloc
// reserves it again, reading RETRO_CUDA_HOST_MEM_MB again.
void dev_reset(void);

}  // namespace rgh

#endif
