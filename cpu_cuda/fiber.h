// cpu_cuda/fiber.h: fibers, the CUDA threads of a block. A fiber is a stack and a saved
// stack pointer; switching saves the callee-saved registers on the old stack and pops them
// from the new one. Written by hand for x86-64 (a few ns a switch); elsewhere ucontext,
// which is slower (it saves the signal mask with a system call) but portable.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace cpu_cuda {

#if defined(__x86_64__)
extern "C" void cpu_cuda_switch(void** save_sp, void* next_sp);
extern "C" void cpu_cuda_fiber_start();
// The System V ABI: rbx, rbp and r12-r15 belong to the caller. (So do the SSE and x87
// control words, but every fiber of a process runs with the same rounding and exception
// modes, which no CUDA code can change, and ldmxcsr/fldcw would cost more than the rest of
// the switch.) A fresh stack is laid out as if cpu_cuda_switch had saved it, with
// cpu_cuda_fiber_start as the return address; that calls entry(arg) from r13 and r12 with
// the stack 16-byte aligned, as a call requires.
asm(R"(
    .text
    .weak cpu_cuda_switch
    .type cpu_cuda_switch, @function
cpu_cuda_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cpu_cuda_switch, .-cpu_cuda_switch

    .weak cpu_cuda_fiber_start
    .type cpu_cuda_fiber_start, @function
cpu_cuda_fiber_start:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size cpu_cuda_fiber_start, .-cpu_cuda_fiber_start
)");
#endif

using FiberEntry = void (*)(void* arg);

// A fiber's stack, with an inaccessible guard page below it: an overflow faults, and the
// fault handler says so. Stacks are reused from fiber to fiber.
struct Stack {
    char* map = nullptr;
    size_t map_bytes = 0;
    char* lo = nullptr;  // lowest usable byte (just above the guard page)
    char* hi = nullptr;  // one past the highest
    static Stack make(size_t bytes) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        bytes = (bytes + page - 1) / page * page;
        Stack s;
        s.map_bytes = bytes + page;
        s.map = (char*)mmap(nullptr, s.map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                            -1, 0);
        if (s.map == MAP_FAILED) {
            fprintf(stderr, "cpu_cuda: cannot map a fiber stack of %zu bytes\n", bytes);
            abort();
        }
        mprotect(s.map, page, PROT_NONE);
        s.lo = s.map + page, s.hi = s.map + s.map_bytes;
        return s;
    }
    void unmap() {
        if (map) munmap(map, map_bytes);
        map = nullptr;
    }
    bool guard_holds(const void* p) const { return (const char*)p >= map && (const char*)p < lo; }
};

struct Context {
#if defined(__x86_64__)
    void* sp = nullptr;
#else
    ucontext_t uc;
#endif
};

// Prepares ctx to start entry(arg) on stack s at the first switch to it.
inline void make_context(Context& ctx, const Stack& s, FiberEntry entry, void* arg) {
#if defined(__x86_64__)
    uint64_t* top = (uint64_t*)((uintptr_t)s.hi & ~(uintptr_t)15);
    uint64_t* sp = top - 7;
    sp[0] = 0, sp[1] = 0;                        // r15, r14
    sp[2] = (uint64_t)entry;                     // r13
    sp[3] = (uint64_t)arg;                       // r12
    sp[4] = 0, sp[5] = 0;                        // rbx, rbp
    sp[6] = (uint64_t)&cpu_cuda_fiber_start;     // popped by ret, which leaves rsp = top
    ctx.sp = sp;
#else
    getcontext(&ctx.uc);
    ctx.uc.uc_stack.ss_sp = s.lo;
    ctx.uc.uc_stack.ss_size = (size_t)(s.hi - s.lo);
    ctx.uc.uc_link = nullptr;
    makecontext(&ctx.uc, (void (*)())entry, 1, arg);  // one pointer argument: fine on LP64 glibc
#endif
}

// Saves the running context into `from` and continues `to`.
inline void switch_context(Context& from, Context& to) {
#if defined(__x86_64__)
    cpu_cuda_switch(&from.sp, to.sp);
#else
    swapcontext(&from.uc, &to.uc);
#endif
}

}  // namespace cpu_cuda
