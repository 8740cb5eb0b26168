// kernel.h - what a kernel sees when the host twin runs it (src/cuda/cuda_common.cuh
// includes it when the compiler is not nvcc). The built-ins (threadIdx, blockIdx,
// blockDim, gridDim, warpSize) belong to the fiber running now; __syncthreads and
// the warp collectives are the points where a CUDA thread hands control back to
// its block's scheduler (block.cpp), so that a thread runs alone until it reaches
// one. Block-shared storage comes from RGH_SHARED / RGH_SHARED_DYN (a __shared__
// local would be one per thread here, so the plain keyword is refused), launches
// from RGH_LAUNCH (src/cuda/cuda_common.cuh maps RG_LAUNCH, RG_SHARED and
// RG_SHARED_DYN onto these or onto the nvcc spellings). A struct passed to a
// kernel by value declares its pointer members beside its definition
// (RG_KERNEL_POINTERS / RG_KERNEL_NO_POINTERS), so that the launch checks them
// as it checks pointer arguments.
#ifndef RG_CUDA_HOST_KERNEL_H
#define RG_CUDA_HOST_KERNEL_H

#ifndef RG_CUDA_HOST
#error "kernel.h belongs to the host twin: compile with -include cuda_host/rename.h"
#endif

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda_host/intrinsics.h"
#include "cuda_host/kernel_limits.h"

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

// The pointer members of a struct kernel argument, as RG_KERNEL_POINTERS lists them.
struct PointerMember {
    const char *name;
    size_t offset;  // bytes from the struct's start
    size_t count;   // pointers at that offset: 1, or an array's elements
};
struct PointerMembers {
    const char *type;  // the struct as the descriptor spells it
    const PointerMember *members;
    size_t n;
};
template <class M>
constexpr PointerMember pointer_member(const char *name, size_t offset) {
    using E = typename std::remove_all_extents<M>::type;
    static_assert(std::is_pointer<E>::value, "RG_KERNEL_POINTERS lists a member that is not a pointer or an array of them");
    return PointerMember{name, offset, sizeof(M) / sizeof(E)};
}

// Whether T has a descriptor (RG_KERNEL_POINTERS / RG_KERNEL_NO_POINTERS beside its
// definition, found by argument-dependent lookup, so one in an anonymous namespace works).
template <class T, class = void>
struct has_pointer_desc : std::false_type {};
template <class T>
struct has_pointer_desc<T, std::void_t<decltype(rgh_kernel_pointers((const T *)nullptr))>> : std::true_type {};

// A launch's arguments and kernel, type-erased: run() is one CUDA thread.
class KernelBody {
  public:
    virtual ~KernelBody() = default;
    virtual void run() const = 0;
    struct PointerArg {
        int index;  // 0-based position in the kernel's parameter list
        const void *ptr;
        const char *type = nullptr;    // a struct member: the struct's type,
        const char *member = nullptr;  // the member's name
        int element = -1;              // and the element of a member array (-1: not an array)
    };
    // The arguments of pointer type and the pointer members of struct arguments, checked
    // at launch and at run.
    std::vector<PointerArg> pointers;
    // The struct arguments' bytes: the launch refuses one whose unlisted words point into
    // device or pinned memory (a member its descriptor forgot).
    struct StructArg {
        int index;
        const PointerMembers *desc;
        const unsigned char *bytes;  // inside this body's copy of the arguments
        size_t size;
    };
    std::vector<StructArg> structs;
};

template <class... P>
class KernelCall final : public KernelBody {
  public:
    template <class... A>
    explicit KernelCall(void (*fn)(P...), A &&...a) : fn_(fn), args_(std::forward<A>(a)...) {
        note_all(std::index_sequence_for<P...>{});
    }
    KernelCall(const KernelCall &) = delete;  // structs[].bytes point into args_
    KernelCall &operator=(const KernelCall &) = delete;
    // Each thread gets its own copy of the arguments, as kernel parameters are by value.
    void run() const override { std::apply(fn_, args_); }

  private:
    template <size_t... I>
    void note_all(std::index_sequence<I...>) {
        (note((int)I, std::get<I>(args_)), ...);
    }
    template <class T>
    void note(int index, const T &v) {
        if constexpr (std::is_pointer<T>::value && !std::is_function<typename std::remove_pointer<T>::type>::value) {
            pointers.push_back(PointerArg{index, (const void *)v});
        } else if constexpr (std::is_class<T>::value || std::is_union<T>::value) {
            // No kernel may pass a pointer the launch cannot see.
            static_assert(has_pointer_desc<T>::value,
                          "a struct kernel argument needs RG_KERNEL_POINTERS(type, pointer members...) or "
                          "RG_KERNEL_NO_POINTERS(type) beside its definition (src/cuda/cuda_common.cuh)");
            if constexpr (has_pointer_desc<T>::value) {
                static const PointerMembers desc = rgh_kernel_pointers((const T *)nullptr);
                note_struct(index, desc, (const unsigned char *)&v, sizeof v);
            }
        }
        (void)index, (void)v;
    }
    void note_struct(int index, const PointerMembers &desc, const unsigned char *bytes, size_t size) {
        for (size_t m = 0; m < desc.n; m++) {
            const PointerMember &pm = desc.members[m];
            for (size_t e = 0; e < pm.count; e++) {
                const void *p;
                memcpy(&p, bytes + pm.offset + e * sizeof p, sizeof p);
                pointers.push_back(PointerArg{index, p, desc.type, pm.name, pm.count > 1 ? (int)e : -1});
            }
        }
        structs.push_back(StructArg{index, &desc, bytes, size});
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
// Descriptors of struct kernel arguments (src/cuda/cuda_common.cuh's RG_KERNEL_POINTERS and
// RG_KERNEL_NO_POINTERS map onto these; nvcc sees nothing). At namespace scope beside the
// struct: RGH_KERNEL_POINTERS(fa_bufs, q, k, v) lists its pointer members (an array of
// pointers counts each element); RGH_KERNEL_NO_POINTERS(row_geom) says it has none.

#define RGH_PM_(T, m) ::rgh::pointer_member<decltype(T::m)>(#m, offsetof(T, m)),
#define RGH_EACH_1(F, T, a) F(T, a)
#define RGH_EACH_2(F, T, a, ...) F(T, a) RGH_EACH_1(F, T, __VA_ARGS__)
#define RGH_EACH_3(F, T, a, ...) F(T, a) RGH_EACH_2(F, T, __VA_ARGS__)
#define RGH_EACH_4(F, T, a, ...) F(T, a) RGH_EACH_3(F, T, __VA_ARGS__)
#define RGH_EACH_5(F, T, a, ...) F(T, a) RGH_EACH_4(F, T, __VA_ARGS__)
#define RGH_EACH_6(F, T, a, ...) F(T, a) RGH_EACH_5(F, T, __VA_ARGS__)
#define RGH_EACH_7(F, T, a, ...) F(T, a) RGH_EACH_6(F, T, __VA_ARGS__)
#define RGH_EACH_8(F, T, a, ...) F(T, a) RGH_EACH_7(F, T, __VA_ARGS__)
#define RGH_EACH_9(F, T, a, ...) F(T, a) RGH_EACH_8(F, T, __VA_ARGS__)
#define RGH_EACH_10(F, T, a, ...) F(T, a) RGH_EACH_9(F, T, __VA_ARGS__)
#define RGH_EACH_11(F, T, a, ...) F(T, a) RGH_EACH_10(F, T, __VA_ARGS__)
#define RGH_EACH_12(F, T, a, ...) F(T, a) RGH_EACH_11(F, T, __VA_ARGS__)
#define RGH_EACH_13(F, T, a, ...) F(T, a) RGH_EACH_12(F, T, __VA_ARGS__)
#define RGH_EACH_14(F, T, a, ...) F(T, a) RGH_EACH_13(F, T, __VA_ARGS__)
#define RGH_EACH_15(F, T, a, ...) F(T, a) RGH_EACH_14(F, T, __VA_ARGS__)
#define RGH_EACH_16(F, T, a, ...) F(T, a) RGH_EACH_15(F, T, __VA_ARGS__)
#define RGH_EACH_17(F, T, a, ...) F(T, a) RGH_EACH_16(F, T, __VA_ARGS__)
#define RGH_EACH_18(F, T, a, ...) F(T, a) RGH_EACH_17(F, T, __VA_ARGS__)
#define RGH_EACH_19(F, T, a, ...) F(T, a) RGH_EACH_18(F, T, __VA_ARGS__)
#define RGH_EACH_20(F, T, a, ...) F(T, a) RGH_EACH_19(F, T, __VA_ARGS__)
#define RGH_EACH_21(F, T, a, ...) F(T, a) RGH_EACH_20(F, T, __VA_ARGS__)
#define RGH_EACH_22(F, T, a, ...) F(T, a) RGH_EACH_21(F, T, __VA_ARGS__)
#define RGH_EACH_23(F, T, a, ...) F(T, a) RGH_EACH_22(F, T, __VA_ARGS__)
#define RGH_EACH_24(F, T, a, ...) F(T, a) RGH_EACH_23(F, T, __VA_ARGS__)
#define RGH_EACH_N(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, _17, _18, _19, _20, _21, \
                   _22, _23, _24, N, ...)                                                                         \
    RGH_EACH_##N
#define RGH_EACH(F, T, ...)                                                                                      \
    RGH_EACH_N(__VA_ARGS__, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1) \
    (F, T, __VA_ARGS__)

#define RGH_KERNEL_POINTERS(T, ...)                                                        \
    [[maybe_unused]] inline ::rgh::PointerMembers rgh_kernel_pointers(const T *) {         \
        static const ::rgh::PointerMember members[] = {RGH_EACH(RGH_PM_, T, __VA_ARGS__)}; \
        return ::rgh::PointerMembers{#T, members, sizeof members / sizeof members[0]};     \
    }
#define RGH_KERNEL_NO_POINTERS(T)                                                  \
    [[maybe_unused]] inline ::rgh::PointerMembers rgh_kernel_pointers(const T *) { \
        return ::rgh::PointerMembers{#T, nullptr, 0};                              \
    }

// CUDA's vector and dimension types hold numbers only (the 8-byte x4 types are
// deprecated for their _16a / _32a spellings, which no kernel here takes).
RGH_KERNEL_NO_POINTERS(dim3)
#define RGH_VECTOR_TYPES_(b) \
    RGH_KERNEL_NO_POINTERS(b##1) RGH_KERNEL_NO_POINTERS(b##2) RGH_KERNEL_NO_POINTERS(b##3)
RGH_VECTOR_TYPES_(char)
RGH_VECTOR_TYPES_(uchar)
RGH_VECTOR_TYPES_(short)
RGH_VECTOR_TYPES_(ushort)
RGH_VECTOR_TYPES_(int)
RGH_VECTOR_TYPES_(uint)
RGH_VECTOR_TYPES_(long)
RGH_VECTOR_TYPES_(ulong)
RGH_VECTOR_TYPES_(longlong)
RGH_VECTOR_TYPES_(ulonglong)
RGH_VECTOR_TYPES_(float)
RGH_VECTOR_TYPES_(double)
RGH_KERNEL_NO_POINTERS(char4)
RGH_KERNEL_NO_POINTERS(uchar4)
RGH_KERNEL_NO_POINTERS(short4)
RGH_KERNEL_NO_POINTERS(ushort4)
RGH_KERNEL_NO_POINTERS(int4)
RGH_KERNEL_NO_POINTERS(uint4)
RGH_KERNEL_NO_POINTERS(float4)
#undef RGH_VECTOR_TYPES_

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
// The host compiler's __launch_bounds__ records nothing: what nvcc made of it (and of
// the registers) is in the kernel table, which every launch is checked against.
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

// The kernel goes through keyed<F> as a template argument, so that the launch knows
// its mangled name and the file it is launched from (kernel_limits.h).
#define RGH_LAUNCH(kernel, grid, block, shmem, stream, ...) \
    ::rgh::launch(#kernel, ::rgh::keyed<kernel>(__FILE__), grid, block, shmem, stream, ##__VA_ARGS__)
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
