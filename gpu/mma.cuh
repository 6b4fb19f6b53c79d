// gpu/mma.cuh: the tensor-core instructions that the attention kernels use, one seam (the
// instruction layer; gpu/mma_fragments.cuh builds a warp's fragments and products on it, and
// gpu/flash_attention_mma.cuh the algorithm on those).
//
// Each function here is one PTX instruction whose register layout the PTX ISA documents
// ("Warp-level matrix fragments for mma.m16n8k16", "ldmatrix", "cp.async"), so a kernel can
// keep tiles in registers and move them between products without a trip through shared
// memory (which nvcuda::wmma, whose layout is unspecified, cannot). On a GPU each is a few
// lines of inline PTX; on the CPU runtime (cpu_cuda/mma.h, which the runtime's build includes
// everywhere) the same names are warp collectives that follow the documented layouts lane by
// lane, so kernels run unchanged.
//
// The layouts (PTX ISA), with g = lane / 4 and i = lane % 4: which lane holds which fragment
// element. This table is the project's one copy; cpu_cuda/mma.h (which reproduces it),
// gpu/mma_fragments.cuh and docs/attention.md refer to it. A 32-bit register holds two bf16,
// the lower column (or k) in its low half.
//   A, 16×16 row-major, a[0..3]: (row g, k 2i..2i+1), (row g+8, k 2i..), (row g, k 2i+8..),
//                                (row g+8, k 2i+8..)
//   B, 16×8 (k × n), b[0..1]:     (k 2i..2i+1, n g), (k 2i+8..2i+9, n g)
//   C, 16×8 float32, c[0..3]:     (row g, n 2i), (row g, n 2i+1), (row g+8, n 2i), (row g+8, n 2i+1)
// So two C tiles side by side (n 0..7 and 8..15), packed to bf16 pairs, are exactly the A
// fragment of a 16×16 matrix: c01 → a0, c23 → a1, the second tile's c01 → a2, c23 → a3.
//
//   ldmatrix .x4: lanes 8j..8j+7 give the addresses of the 8 rows (16 bytes each) of matrix
//   j; lane l receives in r[j] the elements (row g, columns 2i, 2i+1) of matrix j, or with
//   .trans (rows 2i, 2i+1 of column g), i.e. the matrix transposed.
//
//   movmatrix .trans: one 8×8 matrix held as ldmatrix leaves it (lane l: row g, columns 2i,
//   2i+1) becomes its transpose in the same layout (lane l: rows 2i, 2i+1 of column g), without
//   touching shared memory: a B fragment loaded for a product over one dimension of a tile
//   serves, transposed, a product over the other.
//
// Requirements, which the CPU runtime checks: every lane of the warp calls mma_bf16_16816 and
// ldmatrix together; ldmatrix rows and cp.async's both addresses are 16-byte aligned; ldmatrix
// and cp.async's destination are in shared memory. A cp.async copy is complete and visible to
// this thread after cp_async_wait<N>() leaves at most N newer groups in flight; to other threads
// after that and a __syncthreads().
//
// Costs: mma_bf16_16816 is 2·16·8·16 = 4,096 FLOP in one instruction (HMMA.16816.F32.BF16);
// ldmatrix .x4 moves 512 bytes for the warp in one instruction (LDSM.16.M88.4); movmatrix is
// one instruction (MOVM.16.MT88) per 8×8 matrix, register to register.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>
#ifdef CPU_CUDA
#include <thread>
#endif

namespace gpu {

// Two floats as a bf16 pair (round to nearest even): lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return bits;
}

// 2^x in one instruction (MUFU.EX2, ex2.approx.ftz: about 2 ulp, subnormal results flushed
// to 0, 2^-inf = 0). exp2f() adds a range check and two multiplies around it for subnormals,
// which would be a fifth of the attention forward's instructions. The CPU runtime uses exp2f.
__device__ __forceinline__ float exp2_approx(float x) {
#ifdef CPU_CUDA
    return exp2f(x);
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
#endif
}

#ifdef CPU_CUDA
using cpu_cuda::ptx::cp_async_16;
using cpu_cuda::ptx::cp_async_commit;
using cpu_cuda::ptx::cp_async_wait;
using cpu_cuda::ptx::ldmatrix_x4;
using cpu_cuda::ptx::ldmatrix_x4_trans;
using cpu_cuda::ptx::mma_bf16_16816;
using cpu_cuda::ptx::movmatrix_trans;
#else

// The instructions below exist from sm_80 on (ldmatrix from sm_75); the kernels that use them
// are launched only there, and an older build traps if one ever runs.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define GPU_MMA_UNAVAILABLE 1
#endif

// c (16×8, float32) += a (16×16, bf16) · b (16×8, bf16), the layouts above.
__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#ifdef GPU_MMA_UNAVAILABLE
    __trap();
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

// Four 8×8 bf16 matrices from shared memory; row is this lane's row address (see above).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
#ifdef GPU_MMA_UNAVAILABLE
    __trap();
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row)));
#endif
}
// The same, each matrix transposed.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
#ifdef GPU_MMA_UNAVAILABLE
    __trap();
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row)));
#endif
}
// One 8×8 bf16 matrix transposed across the warp's registers (see above): x is this lane's
// register of it, the result its register of the transpose.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
#ifdef GPU_MMA_UNAVAILABLE
    __trap();
    return x;
#else
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
#endif
}

// 16 bytes from global to shared memory without passing through registers (LDGSTS). Only the
// first src_bytes (0 or 16) are read; the rest of the 16 are zeros, so rows past the end of a
// sequence cost no branch.
__device__ __forceinline__ void cp_async_16(void* dst_shared, const void* src_global, int src_bytes = 16) {
#ifdef GPU_MMA_UNAVAILABLE
    __trap();
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst_shared)),
                 "l"(src_global), "r"(src_bytes));
#endif
}
// Closes the group of this thread's cp.async copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() {
#ifndef GPU_MMA_UNAVAILABLE
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifndef GPU_MMA_UNAVAILABLE
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}
#undef GPU_MMA_UNAVAILABLE
#endif  // CPU_CUDA

// ---- the order counters of the five-product backward (gpu/flash_attention_bwd5.cuh): a block
// waits until an integer in global memory reaches a value, then reads what the blocks before it
// wrote; after its own writes (and a __syncthreads), one thread moves the integer on. These are
// the two halves of that hand-over (PTX ISA, "Memory consistency model": an acquire pattern and a
// release pattern at gpu scope), and the pause a waiting loop takes between two reads.
#ifdef CPU_CUDA
__device__ __forceinline__ int load_acquire_gpu(const int* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
__device__ __forceinline__ void add_release_gpu(int* p, int v) { __atomic_fetch_add(p, v, __ATOMIC_RELEASE); }
// the waited-for block runs on another OS thread: give it the core
__device__ __forceinline__ void spin_pause() { std::this_thread::yield(); }
#else
// ld.acquire.gpu (sm_70 on): no later load or store of this thread moves before it.
__device__ __forceinline__ int load_acquire_gpu(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
// red.release.gpu (sm_70 on): every earlier write of this thread, and (after a __syncthreads)
// of its block, is visible to a thread that then reads the new value with load_acquire_gpu.
__device__ __forceinline__ void add_release_gpu(int* p, int v) {
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
// NANOSLEEP (sm_70 on): this warp sleeps about 64 ns, its issue slots left to the others.
__device__ __forceinline__ void spin_pause() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    __nanosleep(64);
#endif
}
#endif

}  // namespace gpu
