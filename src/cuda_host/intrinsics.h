// intrinsics.h - host definitions of the CUDA device functions that kernels
// call: IEEE-rounded arithmetic, bit casts, integer intrinsics, the fast math
// functions, min/max, loads and atomics. Where CUDA specifies the rounding
// (the _rn functions, sqrt, division) the result is the same: one IEEE
// operation in round-to-nearest-even, never fused into an FMA (the host twin
// is compiled with -ffp-contract=off). The approximate ones (__expf, rsqrtf,
// __fdividef...) are the accurate libm functions here: within CUDA's stated
// error, not bit-identical to a GPU.
//
// Atomics are plain read-modify-write: the threads of the host execution never
// run at the same time (they tell the race check they are atomic).
#ifndef RG_CUDA_HOST_INTRINSICS_H
#define RG_CUDA_HOST_INTRINSICS_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

namespace rgh {
template <class To, class From>
inline To bit_cast(From v) {
    static_assert(sizeof(To) == sizeof(From), "bit_cast between sizes");
    To t;
    memcpy(&t, &v, sizeof t);
    return t;
}
}  // namespace rgh

// ---------------------------------------------------------------------------
// Rounded arithmetic (round to nearest even; other rounding modes are not provided)

inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __fdividef(float a, float b) { return a / b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline double __drcp_rn(double a) { return 1.0 / a; }
inline double __dsqrt_rn(double a) { return sqrt(a); }
inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : x > 0.0f ? x : 0.0f; }  // NaN -> 0, as CUDA
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline float fdividef(float a, float b) { return a / b; }
inline float rgh_exp10f(float x) { return powf(10.0f, x); }

// The fast-math intrinsics share their names with glibc's internal
// declarations (__expf, __logf...), which the library does not export; macros
// keep kernel code spelled as on the GPU without redeclaring glibc's.
#define __expf(x) expf(x)
#define __exp10f(x) rgh_exp10f(x)
#define __logf(x) logf(x)
#define __log2f(x) log2f(x)
#define __log10f(x) log10f(x)
#define __sinf(x) sinf(x)
#define __cosf(x) cosf(x)
#define __tanf(x) tanf(x)
#define __powf(x, y) powf((x), (y))
inline void __sincosf(float x, float *s, float *c) { *s = sinf(x), *c = cosf(x); }

// ---------------------------------------------------------------------------
// Bit casts and conversions

inline int __float_as_int(float x) { return rgh::bit_cast<int>(x); }
inline unsigned __float_as_uint(float x) { return rgh::bit_cast<unsigned>(x); }
inline float __int_as_float(int x) { return rgh::bit_cast<float>(x); }
inline float __uint_as_float(unsigned x) { return rgh::bit_cast<float>(x); }
inline long long __double_as_longlong(double x) { return rgh::bit_cast<long long>(x); }
inline double __longlong_as_double(long long x) { return rgh::bit_cast<double>(x); }
inline int __double2hiint(double x) { return (int)(rgh::bit_cast<uint64_t>(x) >> 32); }
inline int __double2loint(double x) { return (int)(uint32_t)rgh::bit_cast<uint64_t>(x); }
inline double __hiloint2double(int hi, int lo) {
    return rgh::bit_cast<double>(((uint64_t)(uint32_t)hi << 32) | (uint32_t)lo);
}
inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline float __int2float_rn(int x) { return (float)x; }
inline float __double2float_rn(double x) { return (float)x; }

// ---------------------------------------------------------------------------
// Integer intrinsics

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
    return __builtin_bswap32(x);
}
// The low 24 bits of each, sign-extended, multiplied: the low 32 bits of the product.
inline int __mul24(int a, int b) {
    const int64_t x = (int32_t)((uint32_t)a << 8) >> 8, y = (int32_t)((uint32_t)b << 8) >> 8;
    return (int)(uint32_t)(uint64_t)(x * y);
}
inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xFFFFFFu) * (b & 0xFFFFFFu); }
inline int __mulhi(int a, int b) { return (int)(((int64_t)a * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const uint64_t v = ((uint64_t)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
    return r;
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned shift) {
    return (unsigned)((((uint64_t)hi << 32) | lo) << (shift & 31) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
    return (unsigned)((((uint64_t)hi << 32) | lo) >> (shift & 31));
}

// CUDA's device min/max overloads (mixed signedness compares as unsigned, as there).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

// ---------------------------------------------------------------------------
// Loads, fences, clocks

template <class T>
inline T __ldg(const T *p) { return *p; }
template <class T>
inline T __ldcs(const T *p) { return *p; }
template <class T>
inline T __ldcg(const T *p) { return *p; }
template <class T>
inline T __ldca(const T *p) { return *p; }
template <class T>
inline void __stcs(T *p, T v) { *p = v; }
template <class T>
inline void __stcg(T *p, T v) { *p = v; }
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}
inline void __nanosleep(unsigned) {}
long long rgh_clock64(void);
#define clock64() rgh_clock64()

// ---------------------------------------------------------------------------
// Atomics: plain read-modify-write (one CUDA thread runs at a time)

namespace rgh {
// Set around the plain read and write of an atomic so that the access checks
// (cuda_host/access.h) see one atomic access: two atomics never race.
extern bool g_in_atomic;
template <class T, class F>
inline T atomic_rmw(T *p, F f) {
    // The compiler barriers keep the flag's stores around the access (nothing
    // else reads the flag as far as the optimizer knows, so it would drop them).
    g_in_atomic = true;
    __asm__ __volatile__("" ::: "memory");
    const T old = *p;
    *p = f(old);
    __asm__ __volatile__("" ::: "memory");
    g_in_atomic = false;
    return old;
}
}  // namespace rgh

#define RGH_ATOMIC_ADD(T)                                                              \
    inline T atomicAdd(T *p, T v) { return ::rgh::atomic_rmw(p, [v](T o) { return (T)(o + v); }); } \
    inline T atomicAdd_block(T *p, T v) { return atomicAdd(p, v); }                   \
    inline T atomicAdd_system(T *p, T v) { return atomicAdd(p, v); }
RGH_ATOMIC_ADD(int)
RGH_ATOMIC_ADD(unsigned)
RGH_ATOMIC_ADD(unsigned long long)
RGH_ATOMIC_ADD(float)
RGH_ATOMIC_ADD(double)
#undef RGH_ATOMIC_ADD
inline __half atomicAdd(__half *p, __half v) {
    return ::rgh::atomic_rmw(p, [v](__half o) { return __float2half_rn(__half2float(o) + __half2float(v)); });
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16 *p, __nv_bfloat16 v) {
    return ::rgh::atomic_rmw(
        p, [v](__nv_bfloat16 o) { return __float2bfloat16_rn(__bfloat162float(o) + __bfloat162float(v)); });
}

inline int atomicSub(int *p, int v) { return ::rgh::atomic_rmw(p, [v](int o) { return o - v; }); }
inline unsigned atomicSub(unsigned *p, unsigned v) { return ::rgh::atomic_rmw(p, [v](unsigned o) { return o - v; }); }

#define RGH_ATOMIC_EXCH_CAS(T)                                                                       \
    inline T atomicExch(T *p, T v) { return ::rgh::atomic_rmw(p, [v](T) { return v; }); }            \
    inline T atomicCAS(T *p, T compare, T v) {                                                       \
        return ::rgh::atomic_rmw(p, [compare, v](T o) { return memcmp(&o, &compare, sizeof o) ? o : v; }); \
    }
RGH_ATOMIC_EXCH_CAS(int)
RGH_ATOMIC_EXCH_CAS(unsigned)
RGH_ATOMIC_EXCH_CAS(unsigned long long)
RGH_ATOMIC_EXCH_CAS(unsigned short)
#undef RGH_ATOMIC_EXCH_CAS
inline float atomicExch(float *p, float v) { return ::rgh::atomic_rmw(p, [v](float) { return v; }); }

#define RGH_ATOMIC_MINMAX_BITS(T)                                                                     \
    inline T atomicMin(T *p, T v) { return ::rgh::atomic_rmw(p, [v](T o) { return v < o ? v : o; }); } \
    inline T atomicMax(T *p, T v) { return ::rgh::atomic_rmw(p, [v](T o) { return v > o ? v : o; }); } \
    inline T atomicAnd(T *p, T v) { return ::rgh::atomic_rmw(p, [v](T o) { return (T)(o & v); }); }    \
    inline T atomicOr(T *p, T v) { return ::rgh::atomic_rmw(p, [v](T o) { return (T)(o | v); }); }     \
    inline T atomicXor(T *p, T v) { return ::rgh::atomic_rmw(p, [v](T o) { return (T)(o ^ v); }); }
RGH_ATOMIC_MINMAX_BITS(int)
RGH_ATOMIC_MINMAX_BITS(unsigned)
RGH_ATOMIC_MINMAX_BITS(long long)
RGH_ATOMIC_MINMAX_BITS(unsigned long long)
#undef RGH_ATOMIC_MINMAX_BITS
// atomicMax/Min on float (sm_90): NaN handling as fmaxf/fminf.
inline float atomicMax(float *p, float v) { return ::rgh::atomic_rmw(p, [v](float o) { return fmaxf(o, v); }); }
inline float atomicMin(float *p, float v) { return ::rgh::atomic_rmw(p, [v](float o) { return fminf(o, v); }); }
inline unsigned atomicInc(unsigned *p, unsigned limit) {
    return ::rgh::atomic_rmw(p, [limit](unsigned o) { return o >= limit ? 0u : o + 1; });
}
inline unsigned atomicDec(unsigned *p, unsigned limit) {
    return ::rgh::atomic_rmw(p, [limit](unsigned o) { return (o == 0 || o > limit) ? limit : o - 1; });
}

#endif
