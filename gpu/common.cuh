// gpu/common.cuh: what every kernel header of the GPU trainer shares: the precision,
// errors, the device context, device buffers, 128-bit packs, reductions and column sums.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../host/error.h"

// ----------------------------------------------------------------------------
// Precision, chosen at build time (gpu.mk: PRECISION=bf16, the default, or fp32). floatX is
// the type of the parameters as the kernels read them, of the activations and of their
// gradients. Master weights, AdamW's moments and the accumulated parameter gradients are
// float32 in both builds, and so is every sum: LayerNorm statistics, softmax, the loss.
#if defined(TRAIN_BF16)
using floatX = __nv_bfloat16;
constexpr cudaDataType_t CUDA_FLOATX = CUDA_R_16BF;
constexpr const char* PRECISION_NAME = "bf16";
#else
using floatX = float;
constexpr cudaDataType_t CUDA_FLOATX = CUDA_R_32F;
constexpr const char* PRECISION_NAME = "fp32";
#endif

// ----------------------------------------------------------------------------
// Errors: every CUDA, cuBLAS and NCCL call is checked; a failure throws Error with the
// file and line, which host/run.h prints as one line before it ends every replica.

#define CUDA_CHECK(call) gpu::check_cuda((call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) gpu::check_cublas((call), #call, __FILE__, __LINE__)
#define NCCL_CHECK(call) gpu::check_nccl((call), #call, __FILE__, __LINE__)
// After a kernel launch: catches a bad launch configuration at once. An error while the
// kernel runs surfaces at the next call that waits for the GPU.
#define KERNEL_CHECK() CUDA_CHECK(cudaGetLastError())

namespace gpu {

inline void check_cuda(cudaError_t e, const char* call, const char* file, int line) {
    if (e == cudaSuccess) return;
    throw Error(strf("%s:%d: CUDA error %s: %s, in %s", file, line, cudaGetErrorName(e), cudaGetErrorString(e), call));
}
inline void check_cublas(cublasStatus_t s, const char* call, const char* file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS)
        throw Error(strf("%s:%d: cuBLAS error %s, in %s", file, line, cublasGetStatusString(s), call));
}
inline void check_nccl(ncclResult_t r, const char* call, const char* file, int line) {
    if (r != ncclSuccess)
        throw Error(strf("%s:%d: NCCL error: %s, in %s (NCCL_DEBUG=WARN tells more)", file, line,
                         ncclGetErrorString(r), call));
}

// ----------------------------------------------------------------------------
// The device: one GPU per process, one stream on which all work runs in order.

struct Context {
    int device = -1;                  // -1: no GPU selected (--help, or a dry run without one)
    int sms = 1;                      // the GPU's multiprocessors (SMs), which grids are sized to fill
    cudaStream_t stream = nullptr;    // kernels, copies, cuBLAS and NCCL all run on it, in order
    cublasHandle_t blas = nullptr;
    cublasLtHandle_t blaslt = nullptr;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;  // float32 sums; _FAST_TF32 with --tf32 1
    void* workspace = nullptr;        // cuBLASLt's scratch
    // The most elements a matrix given to cuBLAS may hold: its products index with 32-bit
    // integers, so larger ones (the logits at B=128, T=1024) go in chunks of rows. Tests lower it.
    size_t max_matrix_elements = ((size_t)1 << 31) - 1;
};
inline Context ctx;
constexpr size_t BLASLT_WORKSPACE = 32 << 20;  // what cuBLASLt may use for its faster algorithms

// Float32 products never use TF32 unless asked (--tf32 1): TF32 rounds the inputs to a
// 10-bit mantissa. bf16 products run on tensor cores either way, summing in float32.
inline void set_tf32(bool on) {
    ctx.compute = on && CUDA_FLOATX == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

inline void init_device(int device) {
    CUDA_CHECK(cudaSetDevice(device));
    ctx.device = device;
    CUDA_CHECK(cudaDeviceGetAttribute(&ctx.sms, cudaDevAttrMultiProcessorCount, device));
    CUDA_CHECK(cudaStreamCreate(&ctx.stream));
    CUBLAS_CHECK(cublasCreate(&ctx.blas));
    CUBLAS_CHECK(cublasSetStream(ctx.blas, ctx.stream));
    CUBLAS_CHECK(cublasLtCreate(&ctx.blaslt));
    CUDA_CHECK(cudaMalloc(&ctx.workspace, BLASLT_WORKSPACE));
    set_tf32(false);
}

inline void synchronize() { CUDA_CHECK(cudaStreamSynchronize(ctx.stream)); }

// One cudaMalloc, freed when the owner goes away. `what` names it in an out-of-memory error.
template <class T>
struct DeviceBuffer {
    T* ptr = nullptr;
    size_t count = 0;
    DeviceBuffer() = default;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer() {
        if (ptr) cudaFree(ptr);  // at teardown an error is not worth reporting
    }
    void alloc(size_t n, const char* what = "a buffer") {
        if (ptr) cudaFree(ptr), ptr = nullptr;
        size_t bytes = std::max<size_t>(n, 1) * sizeof(T);
        cudaError_t e = cudaMalloc(&ptr, bytes);
        if (e == cudaErrorMemoryAllocation) {
            cudaGetLastError();
            size_t free_bytes = 0, total = 0;
            cudaMemGetInfo(&free_bytes, &total);
            throw Error(strf("out of GPU memory allocating %s: %.1f MiB asked, %.1f MiB free of %.1f MiB", what,
                             bytes / 1048576.0, free_bytes / 1048576.0, total / 1048576.0));
        }
        CUDA_CHECK(e);
        count = n;
    }
};

// A layout: tensors one after another in one allocation, each on a 256-byte boundary.
struct Field {
    void** ptr;
    size_t bytes;
};
using Layout = std::vector<Field>;
template <class T>
Field tensor(T*& p, size_t count) {
    return {(void**)&p, count * sizeof(T)};
}
inline size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }
inline size_t layout_bytes(const Layout& fields) {
    size_t total = 0;
    for (const Field& f : fields) total += aligned(f.bytes);
    return total;
}
// Lays out `fields` one after another in one new allocation.
inline void carve(DeviceBuffer<char>& buffer, const Layout& fields, const char* what) {
    buffer.alloc(layout_bytes(fields), what);
    char* p = buffer.ptr;
    for (const Field& f : fields) *f.ptr = p, p += aligned(f.bytes);
}

constexpr int THREADS = 256;  // threads per block of the element-wise kernels
constexpr int ROWS_PER_BLOCK = THREADS / 32;  // of the kernels that give each row a warp
inline unsigned blocks_for(size_t n, int threads = THREADS) { return (unsigned)((n + threads - 1) / threads); }

// ----------------------------------------------------------------------------
// 128-bit packs: element-wise kernels move 16 bytes per load and store (4 floats or 8 bf16),
// the widest a GPU thread can. A kernel over n elements takes pack i = elements [i·N, i·N + N),
// and the last, partial pack element by element (n need not be a multiple of N).

template <class T>
struct alignas(16) Pack {
    static constexpr int N = 16 / sizeof(T);
    T v[N];
};
template <class T>
__host__ __device__ constexpr int pack_size() {
    return Pack<T>::N;
}
template <class T>
__host__ __device__ inline size_t packs_for(size_t n) {
    return (n + pack_size<T>() - 1) / pack_size<T>();
}
// Loads pack i of x (n elements): a 16-byte load when whole, elements (and 0s) at the end.
template <class T>
__device__ inline Pack<T> load_pack(const T* x, size_t i, size_t n) {
    constexpr int N = pack_size<T>();
    if ((i + 1) * N <= n) return reinterpret_cast<const Pack<T>*>(x)[i];
    Pack<T> p;
    for (int k = 0; k < N; k++) p.v[k] = i * N + k < n ? x[i * N + k] : T(0.0f);
    return p;
}
template <class T>
__device__ inline void store_pack(T* x, size_t i, size_t n, const Pack<T>& p) {
    constexpr int N = pack_size<T>();
    if ((i + 1) * N <= n) {
        reinterpret_cast<Pack<T>*>(x)[i] = p;
        return;
    }
    for (int k = 0; k < N && i * N + k < n; k++) x[i * N + k] = p.v[k];
}

// Rows that need not start on a 16-byte boundary (rows of T, Vp or C elements, any length):
// for_row_pieces cuts the row at x into pieces [i, i + count): the elements before its first
// 16-byte boundary one at a time, then whole packs (x + i on a boundary), then the tail one at
// a time, and gives thread `lane` of `lanes` every lanes-th piece of each kind, in order.
// load_part and store_part move a piece: one 16-byte access for a whole pack on a boundary,
// element by element otherwise (another row of the same length may sit differently).
template <class T, class F>
__device__ inline void for_row_pieces(const T* x, int n, int lane, int lanes, F f) {
    constexpr int N = pack_size<T>();
    const int head = min(n, (int)((16 - reinterpret_cast<uintptr_t>(x) % 16) % 16 / sizeof(T)));
    const int packs = (n - head) / N, tail = head + packs * N;
    for (int i = lane; i < head; i += lanes) f(i, 1);
    for (int j = lane; j < packs; j += lanes) f(head + j * N, N);
    for (int i = tail + lane; i < n; i += lanes) f(i, 1);
}
template <class T>
__device__ inline Pack<T> load_part(const T* x, int count) {
    if (count == pack_size<T>() && reinterpret_cast<uintptr_t>(x) % 16 == 0)
        return *reinterpret_cast<const Pack<T>*>(x);
    Pack<T> p{};
    for (int k = 0; k < count; k++) p.v[k] = x[k];
    return p;
}
template <class T>
__device__ inline void store_part(T* x, int count, const Pack<T>& p) {
    if (count == pack_size<T>() && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
        *reinterpret_cast<Pack<T>*>(x) = p;
        return;
    }
    for (int k = 0; k < count; k++) x[k] = p.v[k];
}

// ----------------------------------------------------------------------------
// Reductions. A warp adds with a butterfly of shuffles and a block through shared memory:
// the order of the additions is fixed by the thread layout, so results never depend on
// timing. Every thread receives the result.

__device__ inline float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
__device__ inline double warp_sum(double v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
__device__ inline float warp_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
// blockDim.x must be a multiple of 32. The first __syncthreads protects `partial` from a
// previous call in the same kernel whose readers may not be done yet.
__device__ inline double block_sum(double v) {
    __shared__ double partial[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    return warp_sum(lane < warps ? partial[lane] : 0.0);
}
__device__ inline float block_max(float v) {
    __shared__ float partial[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    return warp_max(lane < warps ? partial[lane] : -INFINITY);
}

// Column sums over many rows, for bias and LayerNorm parameter gradients, in two passes:
// rows are cut into chunks of CHUNK_ROWS, each chunk writes its partial sums, then
// sum_partials_add() adds the chunks in order. Both passes are fixed-order, so the result
// is deterministic, and the first pass has enough blocks to fill the GPU.
constexpr int CHUNK_ROWS = 128;
inline int row_chunks(int N) { return (N + CHUNK_ROWS - 1) / CHUNK_ROWS; }
// The first pass uses blocks of 32 columns × 8 row-lanes: a warp reads 32 consecutive
// elements of a row (coalesced); the 8 lanes' sums meet in shared memory.
constexpr int LANES = 8;

// out[c] += Σ_k partial[k·C + c], k = 0..chunks-1 in order
__global__ void sum_partials_add_kernel(float* out, const float* partial, int chunks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0;
    for (int k = 0; k < chunks; k++) s += partial[(size_t)k * C + c];
    out[c] += s;
}
inline void sum_partials_add(float* out, const float* partial, int chunks, int C) {
    sum_partials_add_kernel<<<blocks_for(C), THREADS, 0, ctx.stream>>>(out, partial, chunks, C);
    KERNEL_CHECK();
}

}  // namespace gpu
