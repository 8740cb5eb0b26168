// fiber.cpp - see fiber.h.
#include "cuda_host/fiber.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_host/asan.h"

// Our own switch where the ABI is known and no shadow stack is in use (CET
// would need the shadow stack switched too; ucontext does that).
#if defined(__x86_64__) && !defined(__CET__)
#define RGH_ASM_SWITCH 1
#else
#define RGH_ASM_SWITCH 0
#endif

#if RGH_ASM_SWITCH
// rgh_fiber_switch_asm(save, to): pushes the callee-saved registers, stores the
// MXCSR and x87 control words below them, saves rsp in *save, loads `to` as
// rsp and undoes the same on the other stack. A fresh fiber's stack is laid out
// by fiber_init so that the final `ret` lands in rgh_fiber_start_asm with
// r12 = entry and r13 = arg.
extern "C" void rgh_fiber_switch_asm(void **save, void *to) __attribute__((visibility("hidden")));
extern "C" void rgh_fiber_start_asm(void) __attribute__((visibility("hidden")));
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".globl rgh_fiber_switch_asm\n"
    ".hidden rgh_fiber_switch_asm\n"
    ".type rgh_fiber_switch_asm, @function\n"
    "rgh_fiber_switch_asm:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    subq $8, %rsp\n"
    "    stmxcsr (%rsp)\n"
    "    fnstcw 4(%rsp)\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    ldmxcsr (%rsp)\n"
    "    fldcw 4(%rsp)\n"
    "    addq $8, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size rgh_fiber_switch_asm, .-rgh_fiber_switch_asm\n"
    ".p2align 4\n"
    ".globl rgh_fiber_start_asm\n"
    ".hidden rgh_fiber_start_asm\n"
    ".type rgh_fiber_start_asm, @function\n"
    "rgh_fiber_start_asm:\n"
    "    .cfi_startproc\n"
    "    .cfi_undefined rip\n"  // the bottom of a fiber's stack: debuggers stop unwinding here
    "    movq %r13, %rdi\n"
    "    callq *%r12\n"
    "    ud2\n"
    "    .cfi_endproc\n"
    ".size rgh_fiber_start_asm, .-rgh_fiber_start_asm\n");
#endif

namespace rgh {

static int uc_mode = -1;  // 1: ucontext; decided once

bool fiber_uses_ucontext(void) {
    if (uc_mode < 0) {
        const char *v = getenv("RETRO_CUDA_HOST_FIBERS");
        uc_mode = !RGH_ASM_SWITCH || (v && !strcmp(v, "ucontext"));
    }
    return uc_mode == 1;
}

// makecontext passes only ints; the fiber being started is handed over here
// (switches happen one at a time, under the runtime's lock).
static Fiber *uc_starting;

static void uc_entry(void) {
    Fiber *f = uc_starting;
    f->entry(f->arg);
    abort();  // an entry function never returns (it ends with fiber_exit)
}

void fiber_init(Fiber *f, void (*entry)(void *), void *arg) {
    f->entry = entry;
    f->arg = arg;
    f->asan_fake = nullptr;
    f->sp = nullptr;
    if (fiber_uses_ucontext()) {
        if (getcontext(f->uc) != 0) {
            perror("retrograd cuda host: getcontext");
            abort();
        }
        f->uc->uc_stack.ss_sp = f->stack_lo;
        f->uc->uc_stack.ss_size = f->stack_size;
        f->uc->uc_link = nullptr;
        makecontext(f->uc, uc_entry, 0);
        return;
    }
#if RGH_ASM_SWITCH
    // From the 16-aligned top: 8 bytes of control words, r15 r14 r13 r12 rbx
    // rbp, the return address; after the `ret`, rsp = top - 16, so the `call`
    // in rgh_fiber_start_asm enters `entry` with the ABI's alignment.
    uintptr_t top = ((uintptr_t)f->stack_lo + f->stack_size) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 80);
    uint32_t mxcsr;
    uint16_t fpcw;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    __asm__ volatile("fnstcw %0" : "=m"(fpcw));
    memset(sp, 0, 80);
    memcpy(sp, &mxcsr, 4);
    memcpy((char *)sp + 4, &fpcw, 2);
    sp[3] = (uint64_t)(uintptr_t)arg;    // r13 (popped after r15 and r14)
    sp[4] = (uint64_t)(uintptr_t)entry;  // r12; rbx and rbp stay 0
    sp[7] = (uint64_t)(uintptr_t)&rgh_fiber_start_asm;
    f->sp = sp;
#endif
}

static void raw_switch(Fiber *from, Fiber *to) {
    if (fiber_uses_ucontext()) {
        if (to->stack_lo && !to->sp) {  // first switch into a fiber: uc_entry reads which one it is
            uc_starting = to;
            to->sp = to;  // marks it started
        }
        if (swapcontext(from->uc, to->uc) != 0) {
            perror("retrograd cuda host: swapcontext");
            abort();
        }
        return;
    }
#if RGH_ASM_SWITCH
    rgh_fiber_switch_asm(&from->sp, to->sp);
#endif
}

void fiber_switch(Fiber *from, Fiber *to) {
#if RGH_ASAN
    __sanitizer_start_switch_fiber(&from->asan_fake, to->stack_lo ? to->stack_lo : to->asan_lo,
                                   to->stack_lo ? to->stack_size : to->asan_size);
#endif
    raw_switch(from, to);
#if RGH_ASAN
    __sanitizer_finish_switch_fiber(from->asan_fake, nullptr, nullptr);
#endif
}

void fiber_exit(Fiber *from, Fiber *to) {
#if RGH_ASAN
    // NULL: this fiber's fake stack (if any) is released.
    __sanitizer_start_switch_fiber(nullptr, to->stack_lo ? to->stack_lo : to->asan_lo,
                                   to->stack_lo ? to->stack_size : to->asan_size);
#endif
    raw_switch(from, to);
    abort();  // nothing switches back to a fiber that exited
}

void fiber_started(Fiber *sched) {
#if RGH_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &sched->asan_lo, &sched->asan_size);
#else
    (void)sched;
#endif
}

void fiber_forget(Fiber *f) {
    if (f->stack_lo) RGH_UNPOISON(f->stack_lo, f->stack_size);
}

}  // namespace rgh
