// asan.h - RGH_ASAN is 1 in an AddressSanitizer build (gcc or clang), and the
// sanitizer interfaces the runtime uses are declared: poisoning device-memory
// red zones and freed blocks, and announcing fiber switches.
#ifndef RG_CUDA_HOST_ASAN_H
#define RG_CUDA_HOST_ASAN_H

#if defined(__SANITIZE_ADDRESS__)
#define RGH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RGH_ASAN 1
#endif
#endif
#ifndef RGH_ASAN
#define RGH_ASAN 0
#endif

#if RGH_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define RGH_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define RGH_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define RGH_POISON(p, n) ((void)(p), (void)(n))
#define RGH_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#endif
