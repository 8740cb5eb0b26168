// kernel.h - what a kernel sees when the host twin runs it (src/cuda/cuda_common.cuh
// includes it when the compiler is not nvcc). The built-ins (threadIdx, blockIdx,
// blockDim, gridDim, warpSize) belong to the fiber running now; __syncthreads and
// the warp collectives are the points where a CUDA thread hands control back to
// its block's scheduler (block.cpp), so that a thread runs alone until it reaches
// one. Block-shared storage comes from RGH_SHARED / RGH_SHARED_DYN (a __shared__
// local would be one per thread here, so the plain keyword is refused), launches
// from RGH_LAUNCH (src/cuda/cuda_common.cuh maps RG_LAUNCH, RG_SHARED and
// RG_SHARED_DYN onto these or onto the nvcc spellings).
#ifndef RG_CUDA_HOST_KERNEL_H
#define RG_CUDA_HOST_KERNEL_H

#ifndef RG_CUDA_HOST
#error "kernel.h belongs to the host twin: compile with -include cuda_host/rename.h"
#endif

#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda_host/intrinsics.h"

namespace rgh {

// The part of a CUDA thread and of its block that kernel code reads.
struct ThreadView {
    uint3 idx;  // threadIdx
};
struct BlockView {
    uint3 idx;   // blockIdx
    dim3 dim;    // blockDim
    dim3 grid;   // gridDim
};

// The thread and block running now; NULL outside a kernel.
extern ThreadView *g_thread;
extern BlockView *g_block;

// Reports a device-only facility used by host code, and aborts.
[[noreturn]] void outside_kernel(const char *what);

inline const ThreadView &cur_thread(const char *what) {
    if (__builtin_expect(!g_thread, 0)) outside_kernel(what);
    return *g_thread;
}
inline const BlockView &cur_block(const char *what) {
    if (__builtin_expect(!g_block, 0)) outside_kernel(what);
    return *g_block;
}

// What a barrier combines (__syncthreads_count/and/or).
enum BarrierOp { BAR_PLAIN, BAR_COUNT, BAR_AND, BAR_OR };
// A barrier of the whole block; returns the combined predicate.
int block_barrier(const char *what, BarrierOp op, int pred);

// Warp collectives: the calling lane blocks until every lane in `mask` has
// called the same collective with the same mask; then each gets its result.
enum Collective {
    COLL_SYNCWARP,
    COLL_SHFL,       // arg: source lane
    COLL_SHFL_UP,    // arg: delta
    COLL_SHFL_DOWN,  // arg: delta
    COLL_SHFL_XOR,   // arg: lane mask
    COLL_BALLOT,
    COLL_ALL,
    COLL_ANY,
    COLL_MATCH_ANY,
    COLL_MATCH_ALL,  // result bit 32: the predicate
    COLL_REDUCE_ADD_U32,
    COLL_REDUCE_MIN_U32,
    COLL_REDUCE_MAX_U32,
    COLL_REDUCE_MIN_I32,
    COLL_REDUCE_MAX_I32,
    COLL_REDUCE_AND,
    COLL_REDUCE_OR,
    COLL_REDUCE_XOR,
};
// file and line: the kernel's call site (the wrappers' defaults, __builtin_FILE
// and __builtin_LINE, take the caller's), matched as well as the mask. A source
// line rather than a return address: compiler copies of one call (an unrolled or
// unswitched loop) still match, and every lane of an unrolled call runs each copy.
uint64_t warp_collective(Collective kind, const char *what, unsigned mask, uint64_t value, unsigned value_bytes,
                         int arg, int width, const char *file, int line);
// The lanes of the caller's warp that have not returned.
unsigned warp_active_mask(void);

// Block-shared storage: the same bytes for every thread of the block, keyed by
// the declaration's site, filled with 0xFF bytes (a NaN as float or double) when
// the block starts so that reading what no thread wrote shows.
void *shared_static(const void *site, size_t bytes, size_t align, const char *name);
// The launch's dynamic shared memory (its shmem bytes), poisoned likewise.
void *shared_dynamic(void);

// A launch's arguments and kernel, type-erased: run() is one CUDA thread.
class KernelBody {
  public:
    virtual ~KernelBody() = default;
    virtual void run() const = 0;
    struct PointerArg {
        int index;  // 0-based position in the kernel's parameter list
        const void *ptr;
    };
    std::vector<PointerArg> pointers;  // the arguments of pointer type, checked at launch and at run
};

template <class... P>
class KernelCall final : public KernelBody {
  public:
    template <class... A>
    explicit KernelCall(void (*fn)(P...), A &&...a) : fn_(fn), args_(std::forward<A>(a)...) {
        note_all(std::index_sequence_for<P...>{});
    }
    // Each thread gets its own copy of the arguments, as kernel parameters are by value.
    void run() const override { std::apply(fn_, args_); }

  private:
    template <size_t... I>
    void note_all(std::index_sequence<I...>) {
        (note((int)I, std::get<I>(args_)), ...);
    }
    template <class T>
    void note(int index, const T &v) {
        if constexpr (std::is_pointer<T>::value && !std::is_function<typename std::remove_pointer<T>::type>::value)
            pointers.push_back(PointerArg{index, (const void *)v});
        (void)index, (void)v;
    }
    void (*fn_)(P...);
    std::tuple<typename std::decay<P>::type...> args_;
};

// Checks the configuration and the pointer arguments, then enqueues the launch
// on the stream (or records it in a capture). Errors go to cudaGetLastError.
void submit_launch(const char *name, const void *fn, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream,
                   std::shared_ptr<const KernelBody> body);

template <class... P, class... A>
inline void launch(const char *name, void (*fn)(P...), dim3 grid, dim3 block, size_t shmem, cudaStream_t stream,
                   A &&...args) {
    static_assert(sizeof...(P) == sizeof...(A), "RG_LAUNCH: the kernel takes a different number of arguments");
    submit_launch(name, reinterpret_cast<const void *>(fn), grid, block, shmem, stream,
                  std::make_shared<const KernelCall<P...>>(fn, std::forward<A>(args)...));
}

template <class T>
inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "warp collectives move values of 8 bytes at most");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof v);
    return b;
}
template <class T>
inline T from_bits(uint64_t b) {
    T v;
    memcpy(&v, &b, sizeof v);
    return v;
}

}  // namespace rgh

// ---------------------------------------------------------------------------
// The built-ins

#define threadIdx (::rgh::cur_thread("threadIdx").idx)
#define blockIdx (::rgh::cur_block("blockIdx").idx)
#define blockDim (::rgh::cur_block("blockDim").dim)
#define gridDim (::rgh::cur_block("gridDim").grid)
constexpr int warpSize = 32;

// A __shared__ variable would be one per thread on the host: use RG_SHARED.
#undef __shared__
#define __shared__ static_assert(false, "use RG_SHARED / RG_SHARED_DYN (src/cuda/cuda_common.cuh), not __shared__");
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

#define RGH_LAUNCH(kernel, grid, block, shmem, stream, ...) \
    ::rgh::launch(#kernel, kernel, grid, block, shmem, stream, ##__VA_ARGS__)
#define RGH_SHARED(T, name, count)                   \
    static char rgh_shared_site_##name;               \
    T(&name)[count] = *static_cast<T(*)[count]>(     \
        ::rgh::shared_static(&rgh_shared_site_##name, sizeof(T) * (count), alignof(T), #name))
#define RGH_SHARED_DYN(T, name) T *const name = static_cast<T *>(::rgh::shared_dynamic())

// The C++ form of cudaFuncSetAttribute that cuda_runtime.h declares for nvcc only.
template <class T>
inline cudaError_t cudaFuncSetAttribute(T *func, enum cudaFuncAttribute attr, int value) {
    return ::cudaFuncSetAttribute(reinterpret_cast<const void *>(func), attr, value);
}

// ---------------------------------------------------------------------------
// Synchronization: barriers and warp collectives

// The call site each collective wrapper takes (its defaults are the caller's file and line).
#define RGH_SITE const char *rgh_file = __builtin_FILE(), int rgh_line = __builtin_LINE()
#define RGH_AT rgh_file, rgh_line

inline void __syncthreads() { ::rgh::block_barrier("__syncthreads()", ::rgh::BAR_PLAIN, 0); }
inline int __syncthreads_count(int pred) { return ::rgh::block_barrier("__syncthreads_count()", ::rgh::BAR_COUNT, pred); }
inline int __syncthreads_and(int pred) { return ::rgh::block_barrier("__syncthreads_and()", ::rgh::BAR_AND, pred); }
inline int __syncthreads_or(int pred) { return ::rgh::block_barrier("__syncthreads_or()", ::rgh::BAR_OR, pred); }

inline void __syncwarp(unsigned mask = 0xFFFFFFFFu, RGH_SITE) {
    ::rgh::warp_collective(::rgh::COLL_SYNCWARP, "__syncwarp", mask, 0, 0, 0, 32, RGH_AT);
}
inline unsigned __activemask() { return ::rgh::warp_active_mask(); }

template <class T>
inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize, RGH_SITE) {
    return ::rgh::from_bits<T>(::rgh::warp_collective(::rgh::COLL_SHFL, "__shfl_sync", mask, ::rgh::to_bits(var),
                                                      sizeof(T), src_lane, width, RGH_AT));
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize, RGH_SITE) {
    return ::rgh::from_bits<T>(::rgh::warp_collective(::rgh::COLL_SHFL_UP, "__shfl_up_sync", mask,
                                                      ::rgh::to_bits(var), sizeof(T), (int)delta, width, RGH_AT));
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize, RGH_SITE) {
    return ::rgh::from_bits<T>(::rgh::warp_collective(::rgh::COLL_SHFL_DOWN, "__shfl_down_sync", mask,
                                                      ::rgh::to_bits(var), sizeof(T), (int)delta, width, RGH_AT));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize, RGH_SITE) {
    return ::rgh::from_bits<T>(::rgh::warp_collective(::rgh::COLL_SHFL_XOR, "__shfl_xor_sync", mask,
                                                      ::rgh::to_bits(var), sizeof(T), lane_mask, width, RGH_AT));
}

inline unsigned __ballot_sync(unsigned mask, int pred, RGH_SITE) {
    return (unsigned)::rgh::warp_collective(::rgh::COLL_BALLOT, "__ballot_sync", mask, pred != 0, 4, 0, 32, RGH_AT);
}
inline int __all_sync(unsigned mask, int pred, RGH_SITE) {
    return (int)::rgh::warp_collective(::rgh::COLL_ALL, "__all_sync", mask, pred != 0, 4, 0, 32, RGH_AT);
}
inline int __any_sync(unsigned mask, int pred, RGH_SITE) {
    return (int)::rgh::warp_collective(::rgh::COLL_ANY, "__any_sync", mask, pred != 0, 4, 0, 32, RGH_AT);
}
template <class T>
inline unsigned __match_any_sync(unsigned mask, T value, RGH_SITE) {
    return (unsigned)::rgh::warp_collective(::rgh::COLL_MATCH_ANY, "__match_any_sync", mask, ::rgh::to_bits(value),
                                            sizeof(T), 0, 32, RGH_AT);
}
template <class T>
inline unsigned __match_all_sync(unsigned mask, T value, int *pred, RGH_SITE) {
    uint64_t r = ::rgh::warp_collective(::rgh::COLL_MATCH_ALL, "__match_all_sync", mask, ::rgh::to_bits(value),
                                        sizeof(T), 0, 32, RGH_AT);
    *pred = (int)(r >> 32);
    return (unsigned)r;
}

inline unsigned __reduce_add_sync(unsigned mask, unsigned v, RGH_SITE) {
    return (unsigned)::rgh::warp_collective(::rgh::COLL_REDUCE_ADD_U32, "__reduce_add_sync", mask, v, 4, 0, 32, RGH_AT);
}
inline int __reduce_add_sync(unsigned mask, int v, RGH_SITE) {
    return (int)__reduce_add_sync(mask, (unsigned)v, RGH_AT);
}
inline unsigned __reduce_min_sync(unsigned mask, unsigned v, RGH_SITE) {
    return (unsigned)::rgh::warp_collective(::rgh::COLL_REDUCE_MIN_U32, "__reduce_min_sync", mask, v, 4, 0, 32, RGH_AT);
}
inline unsigned __reduce_max_sync(unsigned mask, unsigned v, RGH_SITE) {
    return (unsigned)::rgh::warp_collective(::rgh::COLL_REDUCE_MAX_U32, "__reduce_max_sync", mask, v, 4, 0, 32, RGH_AT);
}
inline int __reduce_min_sync(unsigned mask, int v, RGH_SITE) {
    return (int)::rgh::warp_collective(::rgh::COLL_REDUCE_MIN_I32, "__reduce_min_sync", mask, (uint32_t)v, 4, 0, 32,
                                       RGH_AT);
}
inline int __reduce_max_sync(unsigned mask, int v, RGH_SITE) {
    return (int)::rgh::warp_collective(::rgh::COLL_REDUCE_MAX_I32, "__reduce_max_sync", mask, (uint32_t)v, 4, 0, 32,
                                       RGH_AT);
}
inline unsigned __reduce_and_sync(unsigned mask, unsigned v, RGH_SITE) {
    return (unsigned)::rgh::warp_collective(::rgh::COLL_REDUCE_AND, "__reduce_and_sync", mask, v, 4, 0, 32, RGH_AT);
}
inline unsigned __reduce_or_sync(unsigned mask, unsigned v, RGH_SITE) {
    return (unsigned)::rgh::warp_collective(::rgh::COLL_REDUCE_OR, "__reduce_or_sync", mask, v, 4, 0, 32, RGH_AT);
}
inline unsigned __reduce_xor_sync(unsigned mask, unsigned v, RGH_SITE) {
    return (unsigned)::rgh::warp_collective(::rgh::COLL_REDUCE_XOR, "__reduce_xor_sync", mask, v, 4, 0, 32, RGH_AT);
}

#endif
