// api_device.cpp - the CUDA runtime's device, error and version calls for the
// host execution: one device, "host execution of the CUDA code (not a GPU)",
// compute capability 9.0, warp 32, 48 KiB of shared memory per block (227 KiB
// opt-in), one multiprocessor, RETRO_CUDA_HOST_MEM_MB of memory.
#include <stdio.h>
#include <string.h>

#include "cuda_host/devmem.h"
#include "cuda_host/launch.h"
#include "cuda_host/queue.h"
#include "cuda_host/state.h"

using namespace rgh;

namespace {

const char kName[] = "host execution of the CUDA code (not a GPU)";
const int kSmemPerBlock = 48 * 1024, kSmemOptin = 232448, kSmemPerSm = 233472;

cudaError_t check_device(int device, const char *call) {
    if (device != 0) return set_error(cudaErrorInvalidDevice, "%s(%d): the host execution has one device, 0", call, device);
    return cudaSuccess;
}

}  // namespace

cudaError_t cudaGetDeviceCount(int *count) {
    RGH_ENTER();
    if (!count) return set_error(cudaErrorInvalidValue, "cudaGetDeviceCount: NULL count");
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device) {
    RGH_ENTER();
    if (!p) return set_error(cudaErrorInvalidValue, "cudaGetDeviceProperties: NULL properties");
    if (cudaError_t e = check_device(device, "cudaGetDeviceProperties")) return e;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", kName);
    p->totalGlobalMem = dev_total();
    p->sharedMemPerBlock = kSmemPerBlock;
    p->sharedMemPerBlockOptin = kSmemOptin;
    p->sharedMemPerMultiprocessor = kSmemPerSm;
    p->regsPerBlock = 65536;
    p->regsPerMultiprocessor = 65536;
    p->warpSize = 32;
    p->memPitch = (size_t)1 << 31;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7FFFFFFF, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
    p->totalConstMem = 65536;
    p->major = 9, p->minor = 0;
    p->textureAlignment = 512;
    p->multiProcessorCount = 1;
    p->maxThreadsPerMultiProcessor = 2048;
    p->maxBlocksPerMultiProcessor = 32;
    p->canMapHostMemory = 1;
    p->unifiedAddressing = 1;
    p->concurrentKernels = 1;
    p->asyncEngineCount = 1;
    p->l2CacheSize = 1 << 20;
    p->memoryBusWidth = 64;
    p->globalL1CacheSupported = 1;
    p->localL1CacheSupported = 1;
    p->computePreemptionSupported = 1;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
    RGH_ENTER();
    if (!value) return set_error(cudaErrorInvalidValue, "cudaDeviceGetAttribute: NULL value");
    if (cudaError_t e = check_device(device, "cudaDeviceGetAttribute")) return e;
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrMaxBlockDimX:
    case cudaDevAttrMaxBlockDimY: *value = 1024; break;
    case cudaDevAttrMaxBlockDimZ: *value = 64; break;
    case cudaDevAttrMaxGridDimX: *value = 0x7FFFFFFF; break;
    case cudaDevAttrMaxGridDimY:
    case cudaDevAttrMaxGridDimZ: *value = 65535; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = kSmemPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = kSmemOptin; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = kSmemPerSm; break;
    case cudaDevAttrTotalConstantMemory: *value = 65536; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMaxRegistersPerBlock:
    case cudaDevAttrMaxRegistersPerMultiprocessor: *value = 65536; break;
    case cudaDevAttrMultiProcessorCount: *value = 1; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = 2048; break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *value = 32; break;
    case cudaDevAttrL2CacheSize: *value = 1 << 20; break;
    // Made-up clocks (1 GHz) and the bus width of cudaGetDeviceProperties: the peaks test_ops
    // perf derives from them are labelled fake there.
    case cudaDevAttrClockRate:
    case cudaDevAttrMemoryClockRate: *value = 1000000; break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = 64; break;
    case cudaDevAttrUnifiedAddressing:
    case cudaDevAttrCanMapHostMemory:
    case cudaDevAttrConcurrentKernels: *value = 1; break;
    case cudaDevAttrIntegrated:
    case cudaDevAttrMemoryPoolsSupported:
    case cudaDevAttrManagedMemory: *value = 0; break;
    default:
        return set_error(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute %d is not modelled by the host execution",
                         (int)attr);
    }
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    RGH_ENTER();
    return check_device(device, "cudaSetDevice");
}

cudaError_t cudaGetDevice(int *device) {
    RGH_ENTER();
    if (!device) return set_error(cudaErrorInvalidValue, "cudaGetDevice: NULL device");
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    RGH_ENTER();
    if (cudaError_t e = refuse_during_capture("cudaDeviceSynchronize")) return e;
    // Even in Relaxed mode: it would wait for work the thread's capture only records.
    if (thread_captures())
        return set_error(cudaErrorStreamCaptureUnsupported,
                         "cudaDeviceSynchronize while this thread captures (cudaStreamCaptureModeRelaxed too)");
    return sync_all();
}

// Everything goes: queued work (not run), streams, events, graphs, memory, the
// sticky error. The next call starts afresh, reading the environment again.
cudaError_t cudaDeviceReset(void) {
    std::lock_guard<std::recursive_mutex> guard(runtime_lock());
    queue_reset();
    dev_reset();
    forget_func_attributes();
    release_blocks();
    clear_errors();
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v) {
    if (!v) return set_error(cudaErrorInvalidValue, "cudaDriverGetVersion: NULL version");
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v) {
    if (!v) return set_error(cudaErrorInvalidValue, "cudaRuntimeGetVersion: NULL version");
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) { return last_error(true); }
cudaError_t cudaPeekAtLastError(void) { return last_error(false); }
const char *cudaGetErrorString(cudaError_t e) { return error_text(e); }
const char *cudaGetErrorName(cudaError_t e) { return error_name(e); }
