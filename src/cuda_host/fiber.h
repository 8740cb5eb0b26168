// fiber.h - the CUDA threads of a block as fibers: each has its own stack and
// runs until it gives control back to the block's scheduler (a barrier, a warp
// collective, its return). On x86-64 a switch is a few instructions of our own
// (callee-saved registers, MXCSR and the x87 control word; no syscall);
// elsewhere, or with RETRO_CUDA_HOST_FIBERS=ucontext, it is ucontext's
// swapcontext (which also saves the signal mask: one syscall per switch).
// Switches are announced to AddressSanitizer so that ASan builds know which
// stack is live.
#ifndef RG_CUDA_HOST_FIBER_H
#define RG_CUDA_HOST_FIBER_H

#include <stddef.h>
#include <ucontext.h>

namespace rgh {

struct Fiber {
    void *sp = nullptr;        // saved stack pointer (our switch)
    ucontext_t *uc = nullptr;  // saved context (the ucontext switch); owned by the stack pool
    char *stack_lo = nullptr;  // the stack's lowest usable byte (NULL: the OS thread's own stack)
    size_t stack_size = 0;
    void *asan_fake = nullptr;  // ASan's fake-stack handle while switched away
    const void *asan_lo = nullptr;  // for the scheduler: its stack, learned from ASan
    size_t asan_size = 0;
    void (*entry)(void *) = nullptr;
    void *arg = nullptr;
};

// Prepares f (its stack_lo/stack_size/uc set by the caller) to run entry(arg) when first switched to.
void fiber_init(Fiber *f, void (*entry)(void *), void *arg);
// Saves the running context in `from` and resumes `to`; returns when something switches back to `from`.
void fiber_switch(Fiber *from, Fiber *to);
// Like fiber_switch for a fiber that never runs again (its ASan fake stack is released).
[[noreturn]] void fiber_exit(Fiber *from, Fiber *to);
// The first thing a fiber's entry function calls: completes the switch that started it.
// `sched` (the fiber that switched to it) learns its stack bounds for ASan.
void fiber_started(Fiber *sched);
// Marks a fiber's whole stack addressable again for ASan (after it was abandoned mid-run).
void fiber_forget(Fiber *f);
// true when fibers switch with ucontext (RETRO_CUDA_HOST_FIBERS=ucontext, or not x86-64).
bool fiber_uses_ucontext(void);

}  // namespace rgh

#endif
