// launch.h - one kernel launch as the runtime keeps it (queued on a stream or
// recorded in a graph), and the function that executes it (block.cpp).
#ifndef RG_CUDA_HOST_LAUNCH_H
#define RG_CUDA_HOST_LAUNCH_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include <memory>
#include <string>
#include <vector>

namespace rgh {

class KernelBody;

struct Launch {
    std::string name;      // the kernel as RG_LAUNCH spelled it
    const void *fn;        // the kernel function (key of cudaFuncSetAttribute)
    dim3 grid, block;
    size_t shmem;          // dynamic shared memory, bytes
    size_t smem_limit;     // static + dynamic bytes a block may use (48 KiB, or more by the attribute)
    long table_static_smem;  // static shared memory the kernel table gives it, -1 when it has no row
    std::shared_ptr<const KernelBody> body;
    std::vector<uint64_t> serials;  // dev_serial of each of body->pointers when submitted
};

// Runs every block of the launch in order (x fastest, then y, then z), each
// block's threads as fibers. Returns cudaSuccess, or cudaErrorLaunchFailure
// with *why naming the kernel, the block, the thread and what went wrong
// (a barrier or warp collective that cannot complete, misuse of one, shared
// memory over the limit).
cudaError_t run_launch(const Launch &launch, std::string *why);

// Forgets what cudaFuncSetAttribute set (cudaDeviceReset).
void forget_func_attributes(void);

// Frees the fiber stacks and the shared-memory arena (cudaDeviceReset).
void release_blocks(void);

}  // namespace rgh

#endif
