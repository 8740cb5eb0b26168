// state.h - what every part of the host runtime shares: the lock that makes the
// runtime thread-safe (one host thread inside it at a time; kernels run under
// it), the per-thread last error, the sticky error a kernel fault leaves (every
// later call returns it until cudaDeviceReset, as on a GPU), and the detail
// string that cudaGetErrorString returns for the last error of this thread, so
// that a message names the call, the kernel or the pointer at fault.
#ifndef RG_CUDA_HOST_STATE_H
#define RG_CUDA_HOST_STATE_H

#include <cuda_runtime_api.h>

#include <mutex>
#include <string>

namespace rgh {

std::recursive_mutex &runtime_lock(void);

// Sets this thread's last error to e with a detail (printf format, may be NULL) and returns e.
cudaError_t set_error(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// The sticky error (cudaSuccess when none); also made the last error when set.
cudaError_t sticky_error(void);
// A fault while device work ran: printed on stderr once, sticky from now on.
cudaError_t fault_sticky(cudaError_t e, const std::string &why);
// Forgets the sticky error and this thread's last error (cudaDeviceReset).
void clear_errors(void);
// cudaGetLastError / cudaPeekAtLastError.
cudaError_t last_error(bool reset);
const char *error_name(cudaError_t e);
const char *error_text(cudaError_t e);  // with the detail when e is this thread's last error
// RETRO_CUDA_HOST_VERBOSE=1: every error set is also printed on stderr.
bool verbose(void);

// An API entry point: takes the lock, returns the sticky error if there is one.
#define RGH_ENTER()                                           \
    std::lock_guard<std::recursive_mutex> rgh_guard_(::rgh::runtime_lock()); \
    do {                                                      \
        cudaError_t rgh_st_ = ::rgh::sticky_error();          \
        if (rgh_st_ != cudaSuccess) return rgh_st_;           \
    } while (0)

}  // namespace rgh

#endif
