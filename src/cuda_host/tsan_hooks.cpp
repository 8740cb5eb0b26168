// tsan_hooks.cpp - the entry points that gcc's -fsanitize=thread instrumentation
// calls from the host twin's kernel code (access.h), defined here so that
// libtsan is never linked: an access is checked only while a kernel runs and
// costs one test of g_thread otherwise. This file itself is not instrumented.
//
// The instrumented objects also reference the atomic entry points (a
// shared_ptr's count in the launch code) and the vptr hooks; they do the plain
// operation. gcc calls __tsan_readN/__tsan_writeN for an access it knows to be
// N-byte aligned (by its type) and __tsan_unaligned_* for one it does not, so
// only the former are held to the alignment a GPU requires.
#include "cuda_host/access.h"
#include "cuda_host/kernel.h"

namespace {
inline void hook(void *p, unsigned long n, unsigned flags) {
    if (__builtin_expect(rgh::g_thread != nullptr, 0) && n) rgh::on_access((uintptr_t)p, n, flags);
}
}  // namespace

#define RGH_TSAN_ACCESS(N)                                                                            \
    extern "C" void __tsan_read##N(void *p) { hook(p, N, rgh::ACC_ALIGNED); }                          \
    extern "C" void __tsan_write##N(void *p) { hook(p, N, rgh::ACC_ALIGNED | rgh::ACC_WRITE); }        \
    extern "C" void __tsan_unaligned_read##N(void *p) { hook(p, N, 0); }                               \
    extern "C" void __tsan_unaligned_write##N(void *p) { hook(p, N, rgh::ACC_WRITE); }
RGH_TSAN_ACCESS(1)
RGH_TSAN_ACCESS(2)
RGH_TSAN_ACCESS(4)
RGH_TSAN_ACCESS(8)
RGH_TSAN_ACCESS(16)
#undef RGH_TSAN_ACCESS

extern "C" void __tsan_read_range(void *p, unsigned long n) { hook(p, n, 0); }
extern "C" void __tsan_write_range(void *p, unsigned long n) { hook(p, n, rgh::ACC_WRITE); }

extern "C" void __tsan_init(void) {}
extern "C" void __tsan_func_entry(void *) {}
extern "C" void __tsan_func_exit(void) {}
extern "C" void __tsan_vptr_update(void **p, void *v) { *p = v; }
extern "C" void __tsan_vptr_read(void **) {}
extern "C" void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
extern "C" void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

// The atomics, sequentially consistent whatever order was asked (stronger is allowed).
#define RGH_TSAN_RMW(N, T, op)                                                          \
    extern "C" T __tsan_atomic##N##_##op(volatile T *a, T v, int) {                      \
        return __atomic_##op(a, v, __ATOMIC_SEQ_CST);                                     \
    }
#define RGH_TSAN_ATOMIC(N, T)                                                                                  \
    extern "C" T __tsan_atomic##N##_load(const volatile T *a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); } \
    extern "C" void __tsan_atomic##N##_store(volatile T *a, T v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); } \
    extern "C" T __tsan_atomic##N##_exchange(volatile T *a, T v, int) {                                       \
        return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                                    \
    }                                                                                                          \
    RGH_TSAN_RMW(N, T, fetch_add)                                                                              \
    RGH_TSAN_RMW(N, T, fetch_sub)                                                                              \
    RGH_TSAN_RMW(N, T, fetch_and)                                                                              \
    RGH_TSAN_RMW(N, T, fetch_or)                                                                               \
    RGH_TSAN_RMW(N, T, fetch_xor)                                                                              \
    extern "C" int __tsan_atomic##N##_compare_exchange_strong(volatile T *a, T *c, T v, int, int) {           \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                \
    }                                                                                                          \
    extern "C" int __tsan_atomic##N##_compare_exchange_weak(volatile T *a, T *c, T v, int, int) {             \
        return __tsan_atomic##N##_compare_exchange_strong(a, c, v, 0, 0);                                      \
    }                                                                                                          \
    extern "C" T __tsan_atomic##N##_compare_exchange_val(volatile T *a, T c, T v, int, int) {                 \
        __tsan_atomic##N##_compare_exchange_strong(a, &c, v, 0, 0);                                            \
        return c;                                                                                              \
    }
RGH_TSAN_ATOMIC(8, unsigned char)
RGH_TSAN_ATOMIC(16, unsigned short)
RGH_TSAN_ATOMIC(32, unsigned int)
RGH_TSAN_ATOMIC(64, unsigned long long)
#undef RGH_TSAN_ATOMIC
#undef RGH_TSAN_RMW
