// api_memory.cpp - the CUDA runtime's memory calls for the host execution:
// allocation (devmem.cpp), and copies and memsets as deferred stream work. A
// copy's pointers are checked against its kind when it is called (the device
// side must lie inside one live allocation, the host side must not be device
// memory); the blocking forms run the legacy stream up to themselves, which
// runs what they depend on first.
#include <stdio.h>
#include <string.h>

#include <string>

#include "cuda_host/devmem.h"
#include "cuda_host/queue.h"
#include "cuda_host/state.h"

using namespace rgh;

namespace {

const char *kind_name(cudaMemcpyKind k) {
    switch (k) {
    case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault: return "cudaMemcpyDefault";
    }
    return "an unknown kind";
}

bool on_device(const void *p) {
    const Ptr k = classify(p);
    return k == Ptr::device || k == Ptr::device_freed || k == Ptr::device_stray;
}

// Checks one side of a copy: `want_device` says which memory the kind names.
cudaError_t check_side(const char *call, const char *side, const void *p, size_t n, bool want_device,
                       cudaMemcpyKind kind) {
    if (want_device && !dev_range(p, n))
        return set_error(cudaErrorInvalidValue, "%s(%zu bytes, %s): the %s %p is %s%s", call, n, kind_name(kind), side,
                         p, ptr_kind_name(classify(p)),
                         classify(p) == Ptr::device ? " but the range runs past its allocation" : "");
    if (!want_device && (!p || on_device(p)))
        return set_error(cudaErrorInvalidValue, "%s(%zu bytes, %s): the %s %p is %s, not host memory", call, n,
                         kind_name(kind), side, p, ptr_kind_name(classify(p)));
    return cudaSuccess;
}

cudaError_t check_copy(const char *call, void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    bool dst_dev, src_dev;
    switch (kind) {
    case cudaMemcpyHostToHost: dst_dev = false, src_dev = false; break;
    case cudaMemcpyHostToDevice: dst_dev = true, src_dev = false; break;
    case cudaMemcpyDeviceToHost: dst_dev = false, src_dev = true; break;
    case cudaMemcpyDeviceToDevice: dst_dev = true, src_dev = true; break;
    case cudaMemcpyDefault: dst_dev = on_device(dst), src_dev = on_device(src); break;  // unified addressing
    default: return set_error(cudaErrorInvalidMemcpyDirection, "%s: copy kind %d", call, (int)kind);
    }
    if (cudaError_t e = check_side(call, "destination", dst, n, dst_dev, kind)) return e;
    return check_side(call, "source", src, n, src_dev, kind);
}

// A recorded copy's or memset's device side must still be the allocation it was when
// recorded: a graph replays it after the memory may have been freed, or freed and
// allocated again (`serial` from dev_serial then).
cudaError_t still_allocated(const char *call, const char *side, const void *p, uint64_t serial, std::string *why) {
    const char *since = dev_since(p, serial);
    if (!since) return cudaSuccess;
    char s[256];
    snprintf(s, sizeof s, "%s: the %s %p %s since the call was captured", call, side, p, since);
    *why = s;
    return cudaErrorIllegalAddress;
}

WorkPtr copy_work(const char *call, void *dst, const void *src, size_t n) {
    const uint64_t dst_serial = dev_serial(dst), src_serial = dev_serial(src);
    auto w = std::make_shared<Work>();
    w->what = call;
    w->run = [=](std::string *why) {
        if (cudaError_t e = still_allocated(call, "destination", dst, dst_serial, why)) return e;
        if (cudaError_t e = still_allocated(call, "source", src, src_serial, why)) return e;
        memmove(dst, src, n);
        return cudaSuccess;
    };
    return w;
}

WorkPtr set_work(const char *call, void *dst, int value, size_t n) {
    const uint64_t serial = dev_serial(dst);
    auto w = std::make_shared<Work>();
    w->what = call;
    w->run = [=](std::string *why) {
        if (cudaError_t e = still_allocated(call, "destination", dst, serial, why)) return e;
        memset(dst, value, n);
        return cudaSuccess;
    };
    return w;
}

// The blocking forms: queued on the legacy stream, which then runs up to them.
cudaError_t run_blocking(const char *call, WorkPtr w) {
    if (cudaError_t e = refuse_during_capture(call)) return e;
    Stream *s = find_stream(nullptr, call);
    if (cudaError_t e = submit(s, std::move(w))) return e;
    return sync_stream(s);
}

}  // namespace

cudaError_t cudaMalloc(void **p, size_t bytes) {
    RGH_ENTER();
    if (!p) return set_error(cudaErrorInvalidValue, "cudaMalloc: NULL result pointer");
    if (cudaError_t e = refuse_during_capture("cudaMalloc")) return e;
    return dev_malloc(p, bytes);
}

// cudaFree waits for the device first: queued work may still use the memory.
cudaError_t cudaFree(void *p) {
    RGH_ENTER();
    if (cudaError_t e = refuse_during_capture("cudaFree")) return e;
    if (cudaError_t e = sync_all()) return e;
    return dev_free(p);
}

cudaError_t cudaMallocHost(void **p, size_t bytes) {
    RGH_ENTER();
    if (!p) return set_error(cudaErrorInvalidValue, "cudaMallocHost: NULL result pointer");
    if (cudaError_t e = refuse_during_capture("cudaMallocHost")) return e;
    return pinned_malloc(p, bytes);
}

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned int flags) {
    (void)flags;  // portable, mapped and write-combined memory are all ordinary host memory here
    return cudaMallocHost(p, bytes);
}

cudaError_t cudaFreeHost(void *p) {
    RGH_ENTER();
    if (cudaError_t e = refuse_during_capture("cudaFreeHost")) return e;
    if (cudaError_t e = sync_all()) return e;
    return pinned_free(p);
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    RGH_ENTER();
    if (!free_bytes || !total_bytes) return set_error(cudaErrorInvalidValue, "cudaMemGetInfo: NULL result pointer");
    *total_bytes = dev_total();
    *free_bytes = dev_total() - dev_used();
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
    RGH_ENTER();
    if (!a) return set_error(cudaErrorInvalidValue, "cudaPointerGetAttributes: NULL attributes");
    memset(a, 0, sizeof *a);
    switch (classify(p)) {
    case Ptr::device: a->type = cudaMemoryTypeDevice, a->devicePointer = (void *)p; break;
    case Ptr::pinned: a->type = cudaMemoryTypeHost, a->devicePointer = (void *)p, a->hostPointer = (void *)p; break;
    default: a->type = cudaMemoryTypeUnregistered, a->device = -2; break;
    }
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    RGH_ENTER();
    if (n == 0) return cudaSuccess;
    if (cudaError_t e = check_copy("cudaMemcpy", dst, src, n, kind)) return e;
    return run_blocking("cudaMemcpy", copy_work("cudaMemcpy", dst, src, n));
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t stream) {
    RGH_ENTER();
    Stream *s = find_stream(stream, "cudaMemcpyAsync");
    if (!s) return cudaErrorInvalidResourceHandle;
    if (n == 0) return cudaSuccess;
    if (cudaError_t e = check_copy("cudaMemcpyAsync", dst, src, n, kind)) return e;
    return submit(s, copy_work("cudaMemcpyAsync", dst, src, n));
}

cudaError_t cudaMemset(void *p, int value, size_t n) {
    RGH_ENTER();
    if (n == 0) return cudaSuccess;
    if (cudaError_t e = check_side("cudaMemset", "destination", p, n, true, cudaMemcpyHostToDevice)) return e;
    return run_blocking("cudaMemset", set_work("cudaMemset", p, value, n));
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t stream) {
    RGH_ENTER();
    Stream *s = find_stream(stream, "cudaMemsetAsync");
    if (!s) return cudaErrorInvalidResourceHandle;
    if (n == 0) return cudaSuccess;
    if (cudaError_t e = check_side("cudaMemsetAsync", "destination", p, n, true, cudaMemcpyHostToDevice)) return e;
    return submit(s, set_work("cudaMemsetAsync", p, value, n));
}
