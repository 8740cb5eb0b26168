// launch.cpp - RG_LAUNCH's way into the runtime: the launch configuration is
// checked as a GPU checks it (errors through cudaGetLastError), every pointer
// argument (and pointer member of a struct argument, kernel.h) must be device
// memory, pinned host memory or NULL, and the launch
// is queued on its stream (or recorded by a capture). cudaFuncSetAttribute
// keeps the dynamic shared-memory limit per kernel.
#include <string.h>

#include <map>

#include "cuda_host/devmem.h"
#include "cuda_host/kernel.h"
#include "cuda_host/launch.h"
#include "cuda_host/queue.h"
#include "cuda_host/state.h"

namespace rgh {

namespace {

const size_t kSmemDefault = 48 * 1024, kSmemOptin = 232448;

std::map<const void *, size_t> g_max_dynamic_smem;  // cudaFuncAttributeMaxDynamicSharedMemorySize

// "argument 2", or "argument 1 (fa_bufs::q)" for a struct's member.
std::string arg_name(const KernelBody::PointerArg &a) {
    char s[192];
    if (!a.member)
        snprintf(s, sizeof s, "argument %d", a.index);
    else if (a.element < 0)
        snprintf(s, sizeof s, "argument %d (%s::%s)", a.index, a.type, a.member);
    else
        snprintf(s, sizeof s, "argument %d (%s::%s[%d])", a.index, a.type, a.member, a.element);
    return s;
}

// "" when every pointer argument (struct members included) may be used by a kernel, else
// which one may not. `serials` (one per pointer, from dev_serial when the launch was
// submitted) finds memory freed, or freed and allocated again, since: only a graph's
// replay can see that, as cudaFree runs the queued work first.
std::string bad_pointer(const std::string &kernel, const KernelBody &body, const std::vector<uint64_t> *serials) {
    for (size_t i = 0; i < body.pointers.size(); i++) {
        const KernelBody::PointerArg &a = body.pointers[i];
        char s[384];
        if (const char *since = serials ? dev_since(a.ptr, (*serials)[i]) : nullptr) {
            snprintf(s, sizeof s, "kernel '%s' %s: the device memory at %p %s since the launch was captured",
                     kernel.c_str(), arg_name(a).c_str(), a.ptr, since);
            return s;
        }
        const Ptr k = classify(a.ptr);
        if (k == Ptr::null || k == Ptr::device || k == Ptr::pinned) continue;
        snprintf(s, sizeof s, "kernel '%s' %s: %p is %s", kernel.c_str(), arg_name(a).c_str(), a.ptr,
                 ptr_kind_name(k));
        return s;
    }
    return "";
}

bool listed(const PointerMembers &d, size_t off) {
    for (size_t m = 0; m < d.n; m++)
        if (off >= d.members[m].offset && off < d.members[m].offset + d.members[m].count * sizeof(void *)) return true;
    return false;
}

// "" unless a struct argument holds a pointer to device or pinned memory in a word its
// descriptor does not list: a member the check would not see.
std::string unlisted_pointer(const std::string &kernel, const KernelBody &body) {
    for (const KernelBody::StructArg &st : body.structs) {
        for (size_t off = 0; off + sizeof(void *) <= st.size; off += sizeof(void *)) {
            if (listed(*st.desc, off)) continue;
            const void *w;
            memcpy(&w, st.bytes + off, sizeof w);
            const Ptr k = w ? classify(w) : Ptr::null;
            if (k == Ptr::null || k == Ptr::host) continue;
            char s[384];
            snprintf(s, sizeof s,
                     "kernel '%s' argument %d: struct %s member at byte %zu holds %p (%s) that its "
                     "RG_KERNEL_POINTERS does not list",
                     kernel.c_str(), st.index, st.desc->type, off, w, ptr_kind_name(k));
            return s;
        }
    }
    return "";
}

}  // namespace

void forget_func_attributes(void) { g_max_dynamic_smem.clear(); }

void submit_launch(const char *name, const void *fn, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream,
                   std::shared_ptr<const KernelBody> body) {
    std::lock_guard<std::recursive_mutex> guard(runtime_lock());
    if (sticky_error() != cudaSuccess) return;
    const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (!block.x || !block.y || !block.z || block.x > 1024 || block.y > 1024 || block.z > 64 || threads > 1024) {
        set_error(cudaErrorInvalidConfiguration,
                  "kernel '%s': a block of (%u,%u,%u) = %llu threads (at most 1024; x and y <= 1024, z <= 64)", name,
                  block.x, block.y, block.z, threads);
        return;
    }
    if (!grid.x || !grid.y || !grid.z || grid.x > 0x7FFFFFFFu || grid.y > 65535 || grid.z > 65535) {
        set_error(cudaErrorInvalidConfiguration, "kernel '%s': a grid of (%u,%u,%u) blocks (x < 2^31, y and z <= 65535)",
                  name, grid.x, grid.y, grid.z);
        return;
    }
    auto attr = g_max_dynamic_smem.find(fn);
    const size_t dyn_limit = attr != g_max_dynamic_smem.end() ? attr->second : kSmemDefault;
    if (shmem > dyn_limit) {
        set_error(cudaErrorInvalidValue,
                  "kernel '%s': %zu bytes of dynamic shared memory, over its %zu (cudaFuncSetAttribute with "
                  "cudaFuncAttributeMaxDynamicSharedMemorySize raises the limit up to %zu)",
                  name, shmem, dyn_limit, kSmemOptin);
        return;
    }
    // Registers, __launch_bounds__ and static shared memory, as nvcc compiled the kernel.
    const size_t smem_limit = attr != g_max_dynamic_smem.end() ? kSmemOptin : kSmemDefault;
    long table_static_smem;
    if (!within_kernel_limits(name, fn, block, shmem, smem_limit, &table_static_smem)) return;
    // A GPU would fault inside the kernel (sticky); here it is found before it runs.
    std::string bad = unlisted_pointer(name, *body);
    if (bad.empty()) bad = bad_pointer(name, *body, nullptr);
    if (!bad.empty()) {
        fault_sticky(cudaErrorIllegalAddress, bad);
        return;
    }
    Stream *s = find_stream(stream, name);
    if (!s) return;
    auto launch = std::make_shared<Launch>();
    launch->name = name;
    launch->fn = fn;
    launch->grid = grid;
    launch->block = block;
    launch->shmem = shmem;
    launch->smem_limit = smem_limit;
    launch->table_static_smem = table_static_smem;
    for (const KernelBody::PointerArg &a : body->pointers) launch->serials.push_back(dev_serial(a.ptr));
    launch->body = std::move(body);
    auto w = std::make_shared<Work>();
    w->what = "kernel '" + launch->name + "'";
    w->run = [launch](std::string *why) {
        // Again when it runs: a graph replays it after the memory may have been freed.
        *why = bad_pointer(launch->name, *launch->body, &launch->serials);
        if (!why->empty()) return cudaErrorIllegalAddress;
        return run_launch(*launch, why);
    };
    submit(s, w);
}

}  // namespace rgh

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
    RGH_ENTER();
    if (!func) return rgh::set_error(cudaErrorInvalidDeviceFunction, "cudaFuncSetAttribute: NULL function");
    switch (attr) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize:
        if (value < 0 || (size_t)value > rgh::kSmemOptin)
            return rgh::set_error(cudaErrorInvalidValue,
                                  "cudaFuncSetAttribute: %d bytes of dynamic shared memory (at most %zu)", value,
                                  rgh::kSmemOptin);
        rgh::g_max_dynamic_smem[func] = (size_t)value;
        return cudaSuccess;
    case cudaFuncAttributePreferredSharedMemoryCarveout:
        if (value < -1 || value > 100)
            return rgh::set_error(cudaErrorInvalidValue, "cudaFuncSetAttribute: carveout %d (-1..100)", value);
        return cudaSuccess;
    default:
        return rgh::set_error(cudaErrorInvalidValue,
                              "cudaFuncSetAttribute: attribute %d is not modelled by the host execution", (int)attr);
    }
}
