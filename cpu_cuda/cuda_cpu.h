// cpu_cuda/cuda_cpu.h: CUDA C++ on the CPU. The build includes this header first in every
// file it compiles for the CPU runtime (g++ -include cpu_cuda/cuda_cpu.h), after the
// rewrite step (rewrite.cpp) has turned each kernel<<<...>>> into a call the runtime runs.
//
// The toolkit's own headers supply the declarations and types (cudaError_t, dim3, float4,
// __nv_bfloat16, cublasStatus_t, ncclComm_t, ...), so a call with the wrong signature fails
// to compile here as it would under nvcc; the files of cpu_cuda/ define what the toolkit declares:
//   cuda_cpu.h     this header: the built-in variables, the macros, then all of the below
//   settings.h     the CPU_CUDA_* switches
//   processors.h   the processors the pool may use: the affinity mask, the cgroup's CPU quota
//   memory.h       device memory: tracking, guard pages, NaN fill, range checks
//   streams.h      each stream's queue and worker: streams independent of each other, as on a GPU
//   pool.h         the OS threads that run blocks and matrix tiles
//   fiber.h        fibers: the CUDA threads of a block
//   capture.h      what a CUDA graph holds, and the streams that record into one
//   device_presets.h  the GPU the runtime says it is (CPU_CUDA_DEVICE)
//   exec.h         launches, blocks, barriers, warp collectives, the race detector
//   device_math.h  atomics, intrinsics, bf16/fp16 device math
//   wmma.h         nvcuda::wmma, the tensor-core fragments (m16n16k16)
//   mma.h          mma.sync, ldmatrix, cp.async (gpu/mma.cuh's instructions) as warp collectives
//   runtime.h      the runtime API: memory, copies, streams, events, devices, errors
//   textures.h     textures, surfaces, CUDA arrays and pitched memory
//   graphs.h       CUDA graphs: built by hand or by stream capture, instantiated, launched
//   cublas_cpu.h   the cuBLAS calls the project makes
//   nccl_cpu.h     NCCL, across processes on one machine
//   cooperative_groups.h  cooperative groups, on exec.h's barriers and warp collectives (not
//                  included here: a program's <cooperative_groups.h> is include/'s, which includes it)
//   include/       what stands in for the toolkit's headers that need nvcc, ahead of them on
//                  the include path (cpu.mk): <cooperative_groups.h> and its reduce.h and
//                  scan.h, libcu++'s <cuda/barrier> and <cuda/pipeline>
//   rewrite.cpp    the build's source rewrite: kernel<<<...>>> launches, __shared__ declarations
// Each header includes what it uses, and compiles alone (test/cpu_runtime/headers.sh), and
// none includes anything of the trainers: the runtime is a library beneath them.
// Programs are one translation unit each (the project's are), which is what lets the
// runtime live in headers.
#pragma once

// ---- the built-in variables: the runtime's copies for the thread and block running on this
// OS thread (exec.h). Names, not expressions: host code may declare `dim3 gridDim(4)` and a
// parameter may be named dim3, as nvcc allows. Defined before the toolkit's headers, so that
// their members of these names (cudaKernelNodeParams::gridDim, cudaLaunchConfig_t::blockDim)
// are renamed alike and `params.gridDim` still names the member. (The toolkit declares the
// built-ins themselves for nvcc only.)
#define threadIdx cpu_cuda_threadIdx
#define blockIdx cpu_cuda_blockIdx
#define blockDim cpu_cuda_blockDim
#define gridDim cpu_cuda_gridDim

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CPU_CUDA 1  // the program runs on the CPU runtime

#include "settings.h"
#include "memory.h"
#include "pool.h"
#include "fiber.h"
#include "exec.h"
#include "device_math.h"
#include "wmma.h"
#include "mma.h"
#include "runtime.h"
#include "textures.h"
#include "graphs.h"
#if __has_include("cublas_cpu.h")
#include "cublas_cpu.h"
#endif
#if __has_include("nccl_cpu.h")
#include "nccl_cpu.h"
#endif

// ---- __CUDA_ARCH__ for a program's own code: many samples compile their kernels' bodies only
// under `#if __CUDA_ARCH__ >= 700`. cpu.mk's bring-your-own-kernel rule sets CPU_CUDA_ARCH (900,
// an H100's 9.0, unless the make command says otherwise); defined here, after the toolkit's
// headers, whose device branches are inline PTX. The runtime compiles host and device code as
// one, so host code sees it too. The project's own builds leave it undefined.
#if defined(CPU_CUDA_ARCH) && !defined(__CUDA_ARCH__)
#define __CUDA_ARCH__ CPU_CUDA_ARCH
#endif

constexpr int warpSize = 32;

// ---- clock(): the device's cycle counter inside a kernel, the C library's elsewhere
// (device_math.h, which has included <ctime> before this point).
#define clock() cpu_cuda_clock()

// ---- barriers and warp collectives: they carry their source line, for error messages
namespace cpu_cuda {
template <class T>
T shfl_sync(const char* f, int l, unsigned mask, T v, int src_lane, int width = 32) {
    return shuffle(f, l, WarpOp::shfl_idx, mask, v, src_lane, width);
}
template <class T>
T shfl_up_sync(const char* f, int l, unsigned mask, T v, unsigned delta, int width = 32) {
    return shuffle(f, l, WarpOp::shfl_up, mask, v, (int)delta, width);
}
template <class T>
T shfl_down_sync(const char* f, int l, unsigned mask, T v, unsigned delta, int width = 32) {
    return shuffle(f, l, WarpOp::shfl_down, mask, v, (int)delta, width);
}
template <class T>
T shfl_xor_sync(const char* f, int l, unsigned mask, T v, int lane_mask, int width = 32) {
    return shuffle(f, l, WarpOp::shfl_bfly, mask, v, lane_mask, width);
}
// __syncwarp(mask = all lanes): the call site binds first, then the optional mask, so the
// macro needs no GNU comma elision (-std=c++17 has none).
struct SyncWarpAt {
    const char* f;
    int l;
    void operator()(unsigned mask = 0xffffffffu) const { warp_op(f, l, WarpOp::syncwarp, mask, 0u, 0, 0); }
};
}  // namespace cpu_cuda
#define __syncthreads() ::cpu_cuda::syncthreads(__FILE__, __LINE__)
#define __syncthreads_count(p) ::cpu_cuda::syncthreads_reduce(__FILE__, __LINE__, (p), 0)
#define __syncthreads_and(p) ::cpu_cuda::syncthreads_reduce(__FILE__, __LINE__, (p), 1)
#define __syncthreads_or(p) ::cpu_cuda::syncthreads_reduce(__FILE__, __LINE__, (p), 2)
#define __syncwarp(...) ::cpu_cuda::SyncWarpAt{__FILE__, __LINE__}(__VA_ARGS__)
#define __shfl_sync(...) ::cpu_cuda::shfl_sync(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) ::cpu_cuda::shfl_up_sync(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) ::cpu_cuda::shfl_down_sync(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) ::cpu_cuda::shfl_xor_sync(__FILE__, __LINE__, __VA_ARGS__)
#define __ballot_sync(mask, p) ::cpu_cuda::ballot(__FILE__, __LINE__, ::cpu_cuda::WarpOp::ballot, (mask), (p))
#define __any_sync(mask, p) (int)::cpu_cuda::ballot(__FILE__, __LINE__, ::cpu_cuda::WarpOp::any, (mask), (p))
#define __all_sync(mask, p) (int)::cpu_cuda::ballot(__FILE__, __LINE__, ::cpu_cuda::WarpOp::all, (mask), (p))
#define __activemask() ::cpu_cuda::activemask(__FILE__, __LINE__)
#define __trap() ::cpu_cuda::trap(__FILE__, __LINE__)

// __launch_bounds__(max_threads[, min_blocks[, max_blocks_per_cluster]]): the rewrite step
// (rewrite.cpp) moves it to a check at the top of the kernel's body (kernel_entry, exec.h);
// in a file it has not rewritten, it is accepted and means nothing.
#undef __launch_bounds__
#define __launch_bounds__(...)

// __shared__ declarations inside functions are rewritten (rewrite.cpp); one the rewrite
// cannot see (at namespace scope) is at least one per OS thread, never one per CUDA thread.
#undef __shared__
#define __shared__ static thread_local
