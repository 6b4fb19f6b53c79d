// train_gpt.cu: GPT-2 training on NVIDIA GPUs, one process per GPU.
//
// The same model, optimizer step, options, log lines and checkpoint files as train.cpp,
// the CPU reference that every kernel here is tested against (test/test_gpu.cu). Read
// train.cpp first: this file follows its order, its names and its contracts:
//   * parameter gradients ADD (+=), activation gradients are OVERWRITTEN (=);
//   * the loss is scaled by 1/(B·T·A·R) before backward, so the gradients summed over A
//     micro-batches and R replicas are the mean over the global batch.
// Everything is float32. Matrix products go to cuBLAS, in full FP32 unless --tf32 1 lets
// it use TF32 tensor cores. Every other layer is a small kernel written to be read.
//
// Deterministic: no kernel uses floating-point atomics, and every reduction adds its terms
// in a fixed order, so two runs with the same inputs give the same bits (cuBLAS guarantees
// the same for its products on one GPU model). The embedding backward even adds in the
// CPU's order, and matches train.cpp bit for bit.
//
// Sections: errors and the device; reductions; the layers (each forward with its backward
// below it); the optimizer; the model's buffers; start-up of the replicas; the trainer that
// host/run.h drives.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "host/run.h"

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
    const char* hint = e == cudaErrorMemoryAllocation ? " (try a smaller --batch-size)" : "";
    throw Error(strf("%s:%d: CUDA error %s: %s%s, in %s", file, line, cudaGetErrorName(e), cudaGetErrorString(e),
                     hint, call));
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
    int device = -1;                 // -1: no GPU selected (--help, or a dry run without one)
    int sms = 1;                     // the GPU's multiprocessors (SMs), which grids are sized to fill
    cudaStream_t stream = nullptr;   // kernels, copies, cuBLAS and NCCL all run on it, in order
    cublasHandle_t blas = nullptr;
};
inline Context ctx;

// Default math never uses TF32 for float32 products (it keeps at least the requested
// precision); TF32_TENSOR_OP_MATH lets cuBLAS round the inputs to TF32 (10-bit mantissa).
inline void set_tf32(bool on) {
    CUBLAS_CHECK(cublasSetMathMode(ctx.blas, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}

inline void init_device(int device) {
    CUDA_CHECK(cudaSetDevice(device));
    ctx.device = device;
    CUDA_CHECK(cudaDeviceGetAttribute(&ctx.sms, cudaDevAttrMultiProcessorCount, device));
    CUDA_CHECK(cudaStreamCreate(&ctx.stream));
    CUBLAS_CHECK(cublasCreate(&ctx.blas));
    CUBLAS_CHECK(cublasSetStream(ctx.blas, ctx.stream));
    set_tf32(false);
}

inline void synchronize() { CUDA_CHECK(cudaStreamSynchronize(ctx.stream)); }

// One cudaMalloc, freed when the owner goes away.
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
    void alloc(size_t n) {
        if (ptr) cudaFree(ptr), ptr = nullptr;
        CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T)));
        count = n;
    }
};

constexpr int THREADS = 256;  // threads per block of the element-wise kernels
inline unsigned blocks_for(size_t n, int threads = THREADS) { return (unsigned)((n + threads - 1) / threads); }

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
// floats of a row (coalesced); the 8 lanes' sums meet in shared memory.
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

// ----------------------------------------------------------------------------
// Layers, in train.cpp's order and with its signatures, on device pointers. Launchers
// take the shapes; the kernels above each launcher do the work.

// Token + position embedding: out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]
__global__ void encoder_forward_kernel(float* out, const int* inp, const float* wte, const float* wpe, int T, int C,
                                       size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t bt = i / C;
    int c = (int)(i % C), t = (int)(bt % T);
    out[i] = wte[(size_t)inp[bt] * C + c] + wpe[(size_t)t * C + c];
}
void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
    size_t n = (size_t)B * T * C;
    encoder_forward_kernel<<<blocks_for(n), THREADS, 0, ctx.stream>>>(out, inp, wte, wpe, T, C, n);
    KERNEL_CHECK();
}

// The positions of a micro-batch grouped by token id (device pointers): group k holds the
// positions b·T + t with inp[b,t] = token[k], in increasing order, at
// position[start[k] .. start[k+1]). The host builds it (group_by_token below), so that
// the embedding backward needs no atomics: one thread owns one (token, channel) sum.
struct TokenGroups {
    const int* start;     // (groups + 1)
    const int* token;     // (groups)
    const int* position;  // (B·T)
    int groups;
};
// dwte[token,c] += dout[p,c] for p in the token's positions, in increasing p: the CPU's order
__global__ void wte_backward_kernel(float* dwte, const float* __restrict__ dout, const int* start, const int* token,
                                    const int* position, int C) {
    int k = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float* row = dwte + (size_t)token[k] * C;
    float sum = row[c];
#pragma unroll 8
    for (int j = start[k]; j < start[k + 1]; j++) sum += dout[(size_t)position[j] * C + c];
    row[c] = sum;
}
// dwpe[t,c] += dout[b,t,c] for b = 0..B-1 in order (the CPU's order)
__global__ void wpe_backward_kernel(float* dwpe, const float* dout, int B, size_t TC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= TC) return;
    float sum = dwpe[i];
    for (int b = 0; b < B; b++) sum += dout[b * TC + i];
    dwpe[i] = sum;
}
void encoder_backward(float* dwte, float* dwpe, const float* dout, const TokenGroups& groups, int B, int T, int C) {
    dim3 grid(groups.groups, blocks_for(C));
    wte_backward_kernel<<<grid, THREADS, 0, ctx.stream>>>(dwte, dout, groups.start, groups.token, groups.position, C);
    KERNEL_CHECK();
    size_t TC = (size_t)T * C;
    wpe_backward_kernel<<<blocks_for(TC), THREADS, 0, ctx.stream>>>(dwpe, dout, B, TC);
    KERNEL_CHECK();
}

// LayerNorm over C for each of N rows; one warp per row.
constexpr int ROWS_PER_BLOCK = THREADS / 32;
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* w,
                                         const float* bias, int N, int C) {
    int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return;  // the whole warp leaves together
    const float* x = inp + (size_t)n * C;
    float sum = 0;
    for (int c = lane; c < C; c += 32) sum += x[c];
    float m = warp_sum(sum) / C;
    float var = 0;
    for (int c = lane; c < C; c += 32) var += (x[c] - m) * (x[c] - m);
    float s = 1.0f / sqrtf(warp_sum(var) / C + 1e-5f);
    float* o = out + (size_t)n * C;
    for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * s * w[c] + bias[c];
    if (lane == 0) mean[n] = m, rstd[n] = s;
}
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* bias,
                       int N, int C) {
    layernorm_forward_kernel<<<blocks_for(N, ROWS_PER_BLOCK), THREADS, 0, ctx.stream>>>(out, mean, rstd, inp, w,
                                                                                          bias, N, C);
    KERNEL_CHECK();
}
// dinp = rstd · (g - mean(g) - xhat · mean(g · xhat)), g = dout · w; one warp per row
__global__ void layernorm_backward_kernel(float* dinp, const float* dout, const float* inp, const float* w,
                                          const float* mean, const float* rstd, int N, int C) {
    int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return;
    const float* x = inp + (size_t)n * C;
    const float* d = dout + (size_t)n * C;
    float m = mean[n], s = rstd[n], g_sum = 0, gx_sum = 0;
    for (int c = lane; c < C; c += 32) {
        float g = d[c] * w[c];
        g_sum += g;
        gx_sum += g * (x[c] - m) * s;
    }
    float g_mean = warp_sum(g_sum) / C, gx_mean = warp_sum(gx_sum) / C;
    float* dx = dinp + (size_t)n * C;
    for (int c = lane; c < C; c += 32) dx[c] = s * (d[c] * w[c] - g_mean - (x[c] - m) * s * gx_mean);
}
// First pass of dw[c] += Σ_n dout·xhat and db[c] += Σ_n dout: per chunk of rows
__global__ void layernorm_param_partial_kernel(float* partial_w, float* partial_b, const float* dout, const float* inp,
                                               const float* mean, const float* rstd, int N, int C) {
    int c = blockIdx.x * 32 + threadIdx.x, chunk = blockIdx.y;
    int n_end = min(N, (chunk + 1) * CHUNK_ROWS);
    float sw = 0, sb = 0;
    if (c < C)
        for (int n = chunk * CHUNK_ROWS + threadIdx.y; n < n_end; n += LANES) {
            float d = dout[(size_t)n * C + c];
            sw += d * (inp[(size_t)n * C + c] - mean[n]) * rstd[n];
            sb += d;
        }
    __shared__ float lane_w[LANES][32], lane_b[LANES][32];
    lane_w[threadIdx.y][threadIdx.x] = sw, lane_b[threadIdx.y][threadIdx.x] = sb;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        for (int k = 1; k < LANES; k++) sw += lane_w[k][threadIdx.x], sb += lane_b[k][threadIdx.x];
        partial_w[(size_t)chunk * C + c] = sw, partial_b[(size_t)chunk * C + c] = sb;
    }
}
// scratch: row_chunks(N) · 2C floats
void layernorm_backward(float* dinp, float* dw, float* db, float* scratch, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward_kernel<<<blocks_for(N, ROWS_PER_BLOCK), THREADS, 0, ctx.stream>>>(dinp, dout, inp, w, mean,
                                                                                           rstd, N, C);
    KERNEL_CHECK();
    int chunks = row_chunks(N);
    float *partial_w = scratch, *partial_b = scratch + (size_t)chunks * C;
    layernorm_param_partial_kernel<<<dim3(blocks_for(C, 32), chunks), dim3(32, LANES), 0, ctx.stream>>>(
        partial_w, partial_b, dout, inp, mean, rstd, N, C);
    KERNEL_CHECK();
    sum_partials_add(dw, partial_w, chunks, C);
    sum_partials_add(db, partial_b, chunks, C);
}

// Linear layer: out (N,OC) = inp (N,IC) · w (OC,IC)ᵀ + bias (OC); bias may be null.
//
// cuBLAS is column-major: to it, a row-major X (rows × cols) is the column-major matrix Xᵀ
// (cols × rows) with leading dimension cols, without moving a byte. So each row-major
// product below is written as its transpose, Cᵀ = (A·B)ᵀ = Bᵀ·Aᵀ, and the comment above
// each call gives the row-major product, then the column-major one that cuBLAS computes.
__global__ void add_bias_kernel(float* out, const float* bias, int OC, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += bias[i % OC];
}
void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int N, int IC, int OC) {
    const float one = 1.0f, zero = 0.0f;
    // row-major out (N×OC) = inp (N×IC) · wᵀ
    // column-major outᵀ (OC×N) = op_T(w: IC×OC, ld IC) · inpᵀ (IC×N, ld IC)
    CUBLAS_CHECK(cublasSgemm(ctx.blas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, &one, w, IC, inp, IC, &zero, out, OC));
    if (bias) {
        size_t n = (size_t)N * OC;
        add_bias_kernel<<<blocks_for(n), THREADS, 0, ctx.stream>>>(out, bias, OC, n);
        KERNEL_CHECK();
    }
}
// First pass of dbias[o] += Σ_n dout[n,o]: per chunk of rows
__global__ void bias_grad_partial_kernel(float* partial, const float* dout, int N, int OC) {
    int o = blockIdx.x * 32 + threadIdx.x, chunk = blockIdx.y;
    int n_end = min(N, (chunk + 1) * CHUNK_ROWS);
    float s = 0;
    if (o < OC)
        for (int n = chunk * CHUNK_ROWS + threadIdx.y; n < n_end; n += LANES) s += dout[(size_t)n * OC + o];
    __shared__ float lane_sum[LANES][32];
    lane_sum[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && o < OC) {
        for (int k = 1; k < LANES; k++) s += lane_sum[k][threadIdx.x];
        partial[(size_t)chunk * OC + o] = s;
    }
}
// scratch: row_chunks(N) · OC floats (only with a bias)
void matmul_backward(float* dinp, float* dw, float* dbias, float* scratch, const float* dout, const float* inp,
                     const float* w, int N, int IC, int OC) {
    const float one = 1.0f, zero = 0.0f;
    // row-major dinp (N×IC) = dout (N×OC) · w (OC×IC)
    // column-major dinpᵀ (IC×N) = w (IC×OC, ld IC) · doutᵀ (OC×N, ld OC)
    CUBLAS_CHECK(cublasSgemm(ctx.blas, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, &one, w, IC, dout, OC, &zero, dinp, IC));
    // row-major dw (OC×IC) += doutᵀ (OC×N) · inp (N×IC)
    // column-major dwᵀ (IC×OC) += inpᵀ (IC×N, ld IC) · op_T(doutᵀ: OC×N, ld OC)
    CUBLAS_CHECK(cublasSgemm(ctx.blas, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, &one, inp, IC, dout, OC, &one, dw, IC));
    if (dbias) {
        int chunks = row_chunks(N);
        bias_grad_partial_kernel<<<dim3(blocks_for(OC, 32), chunks), dim3(32, LANES), 0, ctx.stream>>>(scratch, dout,
                                                                                                       N, OC);
        KERNEL_CHECK();
        sum_partials_add(dbias, scratch, chunks, OC);
    }
}

// Causal multi-head self-attention on qkv (B,T,3C) = [q | k | v], as in train.cpp: att
// (B,NH,T,T) keeps the probabilities (zeros above the diagonal), out is (B,T,C).
//
// The products run per (b, h) as strided-batched cuBLAS calls on q, k, v with the heads
// split out: (B,T,3,NH,hs) is permuted to three (B,NH,T,hs) tensors, each head's T×hs
// matrix contiguous. Row-major per head, with P the probabilities:
//   forward:   S = q·kᵀ·scale   P = causal_softmax(S)   y = P·v
//   backward:  dP = dy·vᵀ   dv = Pᵀ·dy   dS = softmax_backward(P, dP)·scale
//              dq = dS·k    dk = dSᵀ·q
// The scores are written into att, and the softmax works there in place; its backward
// likewise turns dP into dS in place.

// index i of a (B,NH,T,hs) tensor → the matching index in a (B,T,[parts,]NH·hs) row layout
__device__ inline size_t head_to_row(size_t i, int NH, int T, int hs, int row_width) {
    int d = (int)(i % hs), t = (int)(i / hs % T), h = (int)(i / ((size_t)hs * T) % NH);
    size_t b = i / ((size_t)hs * T * NH);
    return (b * T + t) * row_width + (size_t)h * hs + d;
}
// qkv (B,T,3C) → q, k, v, each (B,NH,T,hs)
__global__ void split_qkv_kernel(float* q, float* k, float* v, const float* qkv, int NH, int T, int hs, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int C = NH * hs;
    size_t r = head_to_row(i, NH, T, hs, 3 * C);
    q[i] = qkv[r], k[i] = qkv[r + C], v[i] = qkv[r + 2 * C];
}
// the reverse, for the gradients: dq, dk, dv → dqkv (B,T,3C), every element overwritten
__global__ void join_qkv_kernel(float* dqkv, const float* dq, const float* dk, const float* dv, int NH, int T, int hs,
                                size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int C = NH * hs;
    size_t r = head_to_row(i, NH, T, hs, 3 * C);
    dqkv[r] = dq[i], dqkv[r + C] = dk[i], dqkv[r + 2 * C] = dv[i];
}
// (B,NH,T,hs) ⇄ (B,T,C): heads_to_rows for y, rows_to_heads for its gradient
__global__ void heads_to_rows_kernel(float* out, const float* y, int NH, int T, int hs, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[head_to_row(i, NH, T, hs, NH * hs)] = y[i];
}
__global__ void rows_to_heads_kernel(float* y, const float* in, int NH, int T, int hs, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = in[head_to_row(i, NH, T, hs, NH * hs)];
}

// Row r of att (one of B·NH·T) is query position t = r % T: softmax over columns 0..t,
// zeros after. One warp per row; each lane touches only its own columns, so in place is safe.
__global__ void causal_softmax_kernel(float* att, int rows, int T) {
    int r = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= rows) return;
    int t = r % T;
    float* a = att + (size_t)r * T;
    float maxv = -INFINITY;
    for (int t2 = lane; t2 <= t; t2 += 32) maxv = fmaxf(maxv, a[t2]);
    maxv = warp_max(maxv);
    float sum = 0;
    for (int t2 = lane; t2 <= t; t2 += 32) sum += (a[t2] = expf(a[t2] - maxv));
    sum = warp_sum(sum);
    for (int t2 = lane; t2 <= t; t2 += 32) a[t2] /= sum;
    for (int t2 = t + 1 + lane; t2 < T; t2 += 32) a[t2] = 0;
}
// dS = P ⊙ (dP - Σ P·dP) · scale over columns 0..t, zeros after; in place on dP
__global__ void causal_softmax_backward_kernel(float* datt, const float* att, int rows, int T, float scale) {
    int r = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= rows) return;
    int t = r % T;
    const float* a = att + (size_t)r * T;
    float* d = datt + (size_t)r * T;
    float dot = 0;
    for (int t2 = lane; t2 <= t; t2 += 32) dot += a[t2] * d[t2];
    dot = warp_sum(dot);
    for (int t2 = lane; t2 <= t; t2 += 32) d[t2] = a[t2] * (d[t2] - dot) * scale;
    for (int t2 = t + 1 + lane; t2 < T; t2 += 32) d[t2] = 0;
}

// Column-major strided-batched product over the B·NH heads: C = alpha·op(A)·op(B) + beta·C
static void gemm_heads(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, float alpha,
                       const float* A, int lda, long long stride_a, const float* B, int ldb, long long stride_b,
                       float beta, float* C, int ldc, long long stride_c, int heads) {
    CUBLAS_CHECK(cublasSgemmStridedBatched(ctx.blas, op_a, op_b, m, n, k, &alpha, A, lda, stride_a, B, ldb, stride_b,
                                           &beta, C, ldc, stride_c, heads));
}

// qkvr: 3·B·T·C floats (q, k, v per head); yr: B·T·C floats
void attention_forward(float* out, float* att, const float* qkv, float* qkvr, float* yr, int B, int T, int C,
                       int NH) {
    int hs = C / NH, heads = B * NH;
    size_t n = (size_t)B * T * C;
    long long sx = (long long)T * hs, sa = (long long)T * T;  // per-head strides of q/k/v/y and of att
    float *q = qkvr, *k = qkvr + n, *v = qkvr + 2 * n;
    split_qkv_kernel<<<blocks_for(n), THREADS, 0, ctx.stream>>>(q, k, v, qkv, NH, T, hs, n);
    KERNEL_CHECK();
    // row-major S (T×T) = q (T×hs) · kᵀ · scale
    // column-major Sᵀ (T×T, ld T) = op_T(kᵀ: hs×T, ld hs) · qᵀ (hs×T, ld hs)
    gemm_heads(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f / sqrtf((float)hs), k, hs, sx, q, hs, sx, 0.0f, att, T, sa,
               heads);
    int rows = heads * T;
    causal_softmax_kernel<<<blocks_for(rows, ROWS_PER_BLOCK), THREADS, 0, ctx.stream>>>(att, rows, T);
    KERNEL_CHECK();
    // row-major y (T×hs) = P (T×T) · v (T×hs)
    // column-major yᵀ (hs×T, ld hs) = vᵀ (hs×T, ld hs) · Pᵀ (T×T, ld T)
    gemm_heads(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, v, hs, sx, att, T, sa, 0.0f, yr, hs, sx, heads);
    heads_to_rows_kernel<<<blocks_for(n), THREADS, 0, ctx.stream>>>(out, yr, NH, T, hs, n);
    KERNEL_CHECK();
}
// Overwrites dqkv. qkvr, dqkvr: 3·B·T·C floats; dyr: B·T·C; datt: B·NH·T·T
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, float* qkvr, float* dqkvr,
                        float* dyr, float* datt, int B, int T, int C, int NH) {
    int hs = C / NH, heads = B * NH;
    size_t n = (size_t)B * T * C;
    long long sx = (long long)T * hs, sa = (long long)T * T;
    float *q = qkvr, *k = qkvr + n, *v = qkvr + 2 * n;
    float *dq = dqkvr, *dk = dqkvr + n, *dv = dqkvr + 2 * n;
    split_qkv_kernel<<<blocks_for(n), THREADS, 0, ctx.stream>>>(q, k, v, qkv, NH, T, hs, n);
    KERNEL_CHECK();
    rows_to_heads_kernel<<<blocks_for(n), THREADS, 0, ctx.stream>>>(dyr, dout, NH, T, hs, n);
    KERNEL_CHECK();
    // row-major dP (T×T) = dy (T×hs) · vᵀ
    // column-major dPᵀ (T×T, ld T) = op_T(vᵀ: hs×T, ld hs) · dyᵀ (hs×T, ld hs)
    gemm_heads(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, v, hs, sx, dyr, hs, sx, 0.0f, datt, T, sa, heads);
    // row-major dv (T×hs) = Pᵀ (T×T) · dy (T×hs)
    // column-major dvᵀ (hs×T, ld hs) = dyᵀ (hs×T, ld hs) · op_T(Pᵀ: T×T, ld T)
    gemm_heads(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, dyr, hs, sx, att, T, sa, 0.0f, dv, hs, sx, heads);
    int rows = heads * T;
    causal_softmax_backward_kernel<<<blocks_for(rows, ROWS_PER_BLOCK), THREADS, 0, ctx.stream>>>(
        datt, att, rows, T, 1.0f / sqrtf((float)hs));
    KERNEL_CHECK();
    // row-major dq (T×hs) = dS (T×T) · k (T×hs)
    // column-major dqᵀ (hs×T, ld hs) = kᵀ (hs×T, ld hs) · dSᵀ (T×T, ld T)
    gemm_heads(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, k, hs, sx, datt, T, sa, 0.0f, dq, hs, sx, heads);
    // row-major dk (T×hs) = dSᵀ (T×T) · q (T×hs)
    // column-major dkᵀ (hs×T, ld hs) = qᵀ (hs×T, ld hs) · op_T(dSᵀ: T×T, ld T)
    gemm_heads(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, q, hs, sx, datt, T, sa, 0.0f, dk, hs, sx, heads);
    join_qkv_kernel<<<blocks_for(n), THREADS, 0, ctx.stream>>>(dqkv, dq, dk, dv, NH, T, hs, n);
    KERNEL_CHECK();
}

// GELU, tanh approximation (as in GPT-2): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
constexpr float GELU_K = 0.7978845608028654f;  // √(2/π)
__global__ void gelu_forward_kernel(float* out, const float* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
}
void gelu_forward(float* out, const float* inp, size_t n) {
    gelu_forward_kernel<<<blocks_for(n), THREADS, 0, ctx.stream>>>(out, inp, n);
    KERNEL_CHECK();
}
__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = inp[i], u = GELU_K * (x + 0.044715f * x * x * x), th = tanhf(u);
    float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du) * dout[i];
}
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
    gelu_backward_kernel<<<blocks_for(n), THREADS, 0, ctx.stream>>>(dinp, inp, dout, n);
    KERNEL_CHECK();
}

// Residual connection: out = a + b (out may be a: the backward's gradient sums use that).
__global__ void residual_forward_kernel(float* out, const float* a, const float* b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
void residual_forward(float* out, const float* a, const float* b, size_t n) {
    residual_forward_kernel<<<blocks_for(n), THREADS, 0, ctx.stream>>>(out, a, b, n);
    KERNEL_CHECK();
}

// Softmax over the first V of Vp logits and cross-entropy against the targets, fused with
// its backward: one block per row (position). losses (N); with dlogits non-null it also
// writes dlogits = (probs - onehot(target))·dloss, 0 in the padded columns, so the
// probabilities are never stored. The sum of exponentials is kept in double, as on the CPU.
constexpr int CE_THREADS = 512;
__global__ void crossentropy_kernel(float* losses, float* dlogits, const float* logits, const int* targets, int V,
                                    int Vp, float dloss) {
    int n = blockIdx.x;
    const float* x = logits + (size_t)n * Vp;
    float maxv = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) maxv = fmaxf(maxv, x[i]);
    maxv = block_max(maxv);
    double sum = 0;
    for (int i = threadIdx.x; i < V; i += blockDim.x) sum += expf(x[i] - maxv);
    sum = block_sum(sum);
    int target = targets[n];
    // log-sum-exp form: exact even when the target's probability underflows
    if (threadIdx.x == 0) losses[n] = (float)(maxv + log(sum) - x[target]);
    if (!dlogits) return;
    float inv_sum = (float)(1.0 / sum);
    float* d = dlogits + (size_t)n * Vp;
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
        float g = i < V ? expf(x[i] - maxv) * inv_sum * dloss : 0.0f;
        if (i == target) g -= dloss;
        d[i] = g;
    }
}
// dlogits null: the loss only (evaluation)
void crossentropy_forward_backward(float* losses, float* dlogits, const float* logits, const int* targets, float dloss,
                                   int N, int V, int Vp) {
    int threads = std::min(CE_THREADS, (V + 31) / 32 * 32);  // a small vocabulary leaves none idle
    crossentropy_kernel<<<N, threads, 0, ctx.stream>>>(losses, dlogits, logits, targets, V, Vp, dloss);
    KERNEL_CHECK();
}
// *acc += (float)mean(losses), in double, one block: the CPU adds each micro-batch's float mean
__global__ void add_mean_loss_kernel(double* acc, const float* losses, int N) {
    double s = 0;
    for (int i = threadIdx.x; i < N; i += blockDim.x) s += losses[i];
    s = block_sum(s);
    if (threadIdx.x == 0) *acc += (float)(s / N);
}
void add_mean_loss(double* acc, const float* losses, int N) {
    add_mean_loss_kernel<<<1, 1024, 0, ctx.stream>>>(acc, losses, N);
    KERNEL_CHECK();
}

// ----------------------------------------------------------------------------
// Optimizer

// AdamW with bias correction, element-wise: inv_bc1 = 1/(1 - β1^t), inv_bc2 = 1/(1 - β2^t);
// wd = 0 for tensors that do not decay. Multiplies by 1/bc as train.cpp's adamw_update
// does, so both round the bias correction the same way.
__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1,
                             float beta2, float eps, float wd, float inv_bc1, float inv_bc2, float grad_scale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float grad = g[i] * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * grad;
    float vi = beta2 * v[i] + (1.0f - beta2) * grad * grad;
    m[i] = mi, v[i] = vi;
    float mhat = mi * inv_bc1, vhat = vi * inv_bc2;
    p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
}
// One update of all parameters (buffers in file order); t is the 1-based update count.
// Gradients are multiplied by grad_scale as they are read: that is how clipping is applied.
void adamw_update(float* params, const float* grads, float* m, float* v, const ModelConfig& cfg,
                  const AdamWConfig& h, float lr, int t, float grad_scale = 1.0f) {
    float bc1 = 1.0f - powf(h.beta1, (float)t), bc2 = 1.0f - powf(h.beta2, (float)t);
    float inv_bc1 = 1.0f / bc1, inv_bc2 = 1.0f / bc2;
    std::vector<size_t> sizes = cfg.param_sizes();
    size_t offset = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {  // one launch per tensor: the decay differs
        float wd = param_decays(i) ? h.weight_decay : 0.0f;
        adamw_kernel<<<blocks_for(sizes[i]), THREADS, 0, ctx.stream>>>(params + offset, grads + offset, m + offset,
                                                                      v + offset, sizes[i], lr, h.beta1, h.beta2,
                                                                      h.eps, wd, inv_bc1, inv_bc2, grad_scale);
        KERNEL_CHECK();
        offset += sizes[i];
    }
}

// ‖g‖₂ in two fixed passes: a grid that fills the GPU (8 blocks per SM, at most
// MAX_NORM_BLOCKS) each sums a fixed, strided share of the squares in double, then one
// block adds the partial sums. The grid depends only on the GPU model, so the result
// repeats bit for bit on one. scratch: MAX_NORM_BLOCKS + 1 doubles, the total last.
constexpr int MAX_NORM_BLOCKS = 1024;
__global__ void sum_squares_kernel(double* partial, const float* g, size_t n) {
    double s = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        s += (double)g[i] * g[i];
    s = block_sum(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}
__global__ void sum_doubles_kernel(double* out, const double* in, int n) {
    double s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += in[i];
    s = block_sum(s);
    if (threadIdx.x == 0) *out = s;
}
float global_norm(const float* g, size_t n, double* scratch) {
    int blocks = std::min(MAX_NORM_BLOCKS, 8 * ctx.sms);
    sum_squares_kernel<<<blocks, THREADS, 0, ctx.stream>>>(scratch, g, n);
    KERNEL_CHECK();
    sum_doubles_kernel<<<1, 1024, 0, ctx.stream>>>(scratch + MAX_NORM_BLOCKS, scratch, blocks);
    KERNEL_CHECK();
    double total;
    CUDA_CHECK(cudaMemcpyAsync(&total, scratch + MAX_NORM_BLOCKS, sizeof total, cudaMemcpyDeviceToHost, ctx.stream));
    synchronize();  // the host decides about clipping
    return (float)std::sqrt(total);
}

// ----------------------------------------------------------------------------
// The model's buffers: parameters, gradients, AdamW's m and v, activations, activation
// gradients and scratch, each ONE device allocation, carved into named tensors:
// ParamTensors (host/checkpoint.h) and the structs below.

// Activations kept from forward for backward: train.cpp's, except that there are no
// probabilities (the fused cross-entropy writes dlogits directly). Sized for the largest
// (B, T); a smaller batch uses the front of each tensor with strides from its own B and T.
struct Activations {
    float *encoded;                    // (B, T, C)
    float *ln1, *ln1_mean, *ln1_rstd;  // (L, B, T, C), (L, B, T), (L, B, T)
    float *qkv;                        // (L, B, T, 3C)
    float *att;                        // (L, B, NH, T, T)
    float *atty;                       // (L, B, T, C)
    float *attproj;                    // (L, B, T, C)
    float *residual2;                  // (L, B, T, C)
    float *ln2, *ln2_mean, *ln2_rstd;  // (L, B, T, C), (L, B, T), (L, B, T)
    float *fch;                        // (L, B, T, 4C)
    float *fch_gelu;                   // (L, B, T, 4C)
    float *fcproj;                     // (L, B, T, C)
    float *residual3;                  // (L, B, T, C)
    float *lnf, *lnf_mean, *lnf_rstd;  // (B, T, C), (B, T), (B, T)
    float *logits;                     // (B, T, Vp)
    float *losses;                     // (B, T)
};
// Gradients of activations: one block's worth, reused layer after layer (as train.cpp).
struct ActivationGrads {
    float *dresidual;  // (B, T, C)
    float *dx;         // (B, T, C)
    float *dln;        // (B, T, C)
    float *datty;      // (B, T, C)
    float *dqkv;       // (B, T, 3C)
    float *dfch;       // (B, T, 4C)
    float *dfch_gelu;  // (B, T, 4C)
    float *dlogits;    // (B, T, Vp)
};
// Working memory of single layers, GPU only.
struct Scratch {
    float *qkvr;      // (3, B, NH, T, hs)  q, k, v with the heads split out
    float *dqkvr;     // (3, B, NH, T, hs)  their gradients
    float *yr;        // (B, NH, T, hs)     attention output per head; its gradient in backward
    float *datt;      // (B, NH, T, T)      gradient of the probabilities, then of the scores
    float *partials;  // (row_chunks(B·T), 4C) column sums per chunk of rows
};

using Layout = std::vector<std::pair<float**, size_t>>;
inline Layout activation_layout(Activations& a, const ModelConfig& c, int B, int T) {
    size_t BT = (size_t)B * T, L = c.L, C = c.C, NH = c.NH, Vp = c.Vp;
    return {{&a.encoded, BT * C},
            {&a.ln1, L * BT * C}, {&a.ln1_mean, L * BT}, {&a.ln1_rstd, L * BT},
            {&a.qkv, L * BT * 3 * C}, {&a.att, L * B * NH * T * T}, {&a.atty, L * BT * C},
            {&a.attproj, L * BT * C}, {&a.residual2, L * BT * C},
            {&a.ln2, L * BT * C}, {&a.ln2_mean, L * BT}, {&a.ln2_rstd, L * BT},
            {&a.fch, L * BT * 4 * C}, {&a.fch_gelu, L * BT * 4 * C}, {&a.fcproj, L * BT * C},
            {&a.residual3, L * BT * C},
            {&a.lnf, BT * C}, {&a.lnf_mean, BT}, {&a.lnf_rstd, BT},
            {&a.logits, BT * Vp}, {&a.losses, BT}};
}
inline Layout activation_grad_layout(ActivationGrads& d, const ModelConfig& c, int B, int T) {
    size_t BT = (size_t)B * T, C = c.C;
    return {{&d.dresidual, BT * C}, {&d.dx, BT * C}, {&d.dln, BT * C}, {&d.datty, BT * C},
            {&d.dqkv, BT * 3 * C}, {&d.dfch, BT * 4 * C}, {&d.dfch_gelu, BT * 4 * C}, {&d.dlogits, BT * c.Vp}};
}
inline Layout scratch_layout(Scratch& s, const ModelConfig& c, int B, int T) {
    size_t BT = (size_t)B * T, C = c.C;
    return {{&s.qkvr, 3 * BT * C}, {&s.dqkvr, 3 * BT * C}, {&s.yr, BT * C},
            {&s.datt, (size_t)B * c.NH * T * T}, {&s.partials, (size_t)row_chunks((int)BT) * 4 * C}};
}

// Each tensor starts on a 256-byte boundary (64 floats), which the matrix kernels prefer.
inline size_t aligned(size_t floats) { return (floats + 63) / 64 * 64; }
inline size_t layout_floats(const Layout& fields) {
    size_t total = 0;
    for (auto& f : fields) total += aligned(f.second);
    return total;
}
// Lays out `fields` one after another in one new allocation.
inline void carve(DeviceBuffer<float>& buffer, const Layout& fields) {
    buffer.alloc(layout_floats(fields));
    float* p = buffer.ptr;
    for (auto& f : fields) *f.first = p, p += aligned(f.second);
}

// Floats of activations, their gradients and scratch for a micro-batch of B×T.
inline size_t activation_floats(const ModelConfig& c, int B, int T) {
    Activations a;
    ActivationGrads d;
    Scratch s;
    return layout_floats(activation_layout(a, c, B, T)) + layout_floats(activation_grad_layout(d, c, B, T)) +
           layout_floats(scratch_layout(s, c, B, T));
}

// Groups the positions of inputs (n tokens, each < V) by token id, for TokenGroups: fills
// start (groups + 1), token (groups) and position (n); returns the number of groups.
inline int group_by_token(const int* inputs, int n, int V, int* start, int* token, int* position) {
    std::vector<int> count(V, 0), next(V);
    for (int i = 0; i < n; i++) count[inputs[i]]++;
    int groups = 0, offset = 0;
    for (int tok = 0; tok < V; tok++)
        if (count[tok] > 0) {
            token[groups] = tok, start[groups] = offset, next[tok] = offset;
            groups++, offset += count[tok];
        }
    start[groups] = n;
    for (int i = 0; i < n; i++) position[next[inputs[i]]++] = i;  // increasing within a group
    return groups;
}

// ----------------------------------------------------------------------------
// Start-up of the replicas: one process per GPU.
//
//   * a single process: no launcher needed;
//   * mpirun (or srun with PMI) and a train_gpt built with MPI: Comm::init starts MPI, rank 0
//     makes NCCL's id and MPI broadcasts it; host/run.h's collectives go through MPI;
//   * srun without MPI: Slurm's variables give the ranks, the NCCL id travels through the
//     file named by --nccl-init-file, and host/run.h's collectives go through NCCL.
// Gradients always travel through NCCL, one all-reduce per optimizer step.

// The value of option --name in argv ("--name VALUE" or "--name=VALUE"), or "" when absent.
// connect() runs before the command line is parsed and needs only a few options; like the
// parser, it knows that every option but --help takes a value.
inline std::string scan_option(int argc, char** argv, const std::string& name) {
    std::string flag = "--" + name;
    for (int i = 1; i < argc; i++) {
        std::string arg = argv[i];
        if (arg.rfind(flag + "=", 0) == 0) return arg.substr(flag.size() + 1);
        if (arg == "-h" || arg == "--help" || arg.find('=') != std::string::npos) continue;
        if (arg == flag && i + 1 < argc) return argv[i + 1];
        i++;  // skip this option's value
    }
    return "";
}
inline bool wants_help(int argc, char** argv) {
    for (int i = 1; i < argc; i++) {
        std::string arg = argv[i];
        if (arg == "-h" || arg == "--help") return true;
        if (arg.find('=') == std::string::npos) i++;
    }
    return false;
}

// The replicas' NCCL communicator, shared by the two Collectives below and ended with them.
struct NcclComm {
    ncclComm_t comm = nullptr;
    NcclComm(const ncclUniqueId& id, int world, int rank) {
        NCCL_CHECK(ncclCommInitRank(&comm, world, id, rank));
    }
    ~NcclComm() {
        if (comm) ncclCommDestroy(comm);  // at teardown an error is not worth reporting
    }
};

// Collectives over NCCL on the context's stream. With `host_memory` the data is host memory,
// staged through a device buffer: host/run.h's few small collectives (loss means,
// agreement checks) in jobs without MPI. Without it the data is GPU memory: the gradient
// sync (Comm::buffers), which NCCL sums where it lies.
struct NcclCollectives : Collectives {
    std::shared_ptr<NcclComm> nccl;
    int world;
    bool host_memory;
    DeviceBuffer<char> staging;
    NcclCollectives(std::shared_ptr<NcclComm> nccl, int world, bool host_memory)
        : nccl(std::move(nccl)), world(world), host_memory(host_memory) {}
    char* device_space(size_t bytes) {
        if (staging.count < bytes) staging.alloc(bytes);
        return staging.ptr;
    }
    // Runs op on device memory holding `bytes` of data (in place), staging host data.
    template <class Op>
    void in_place(void* data, size_t bytes, Op op) {
        if (!host_memory) return op((char*)data);
        char* d = device_space(bytes);
        CUDA_CHECK(cudaMemcpyAsync(d, data, bytes, cudaMemcpyHostToDevice, ctx.stream));
        op(d);
        CUDA_CHECK(cudaMemcpyAsync(data, d, bytes, cudaMemcpyDeviceToHost, ctx.stream));
        synchronize();
    }
    void allreduce_sum(float* data, size_t n) override {
        in_place(data, n * sizeof(float), [&](char* d) {
            NCCL_CHECK(ncclAllReduce(d, d, n, ncclFloat, ncclSum, nccl->comm, ctx.stream));
        });
    }
    void allreduce_sum(double* data, size_t n) override {
        in_place(data, n * sizeof(double), [&](char* d) {
            NCCL_CHECK(ncclAllReduce(d, d, n, ncclDouble, ncclSum, nccl->comm, ctx.stream));
        });
    }
    void broadcast(void* data, size_t bytes) override {
        in_place(data, bytes, [&](char* d) {
            NCCL_CHECK(ncclBroadcast(d, d, bytes, ncclChar, 0, nccl->comm, ctx.stream));
        });
    }
    void allgather(const void* mine, size_t bytes, void* all) override {
        if (!host_memory) {
            NCCL_CHECK(ncclAllGather(mine, all, bytes, ncclChar, nccl->comm, ctx.stream));
            return;
        }
        char* d = device_space(bytes * (world + 1));  // [everyone's (world × bytes)] [mine]
        char* send = d + bytes * world;
        CUDA_CHECK(cudaMemcpyAsync(send, mine, bytes, cudaMemcpyHostToDevice, ctx.stream));
        NCCL_CHECK(ncclAllGather(send, d, bytes, ncclChar, nccl->comm, ctx.stream));
        CUDA_CHECK(cudaMemcpyAsync(all, d, bytes * world, cudaMemcpyDeviceToHost, ctx.stream));
        synchronize();
    }
    void barrier() override {  // a one-element all-reduce: it returns once every rank has joined
        char* d = device_space(sizeof(double));
        NCCL_CHECK(ncclAllReduce(d, d, 1, ncclDouble, ncclSum, nccl->comm, ctx.stream));
        synchronize();
    }
    [[noreturn]] void abort(int code) override {
        ncclCommAbort(nccl->comm);  // no check: the process is leaving either way
        nccl->comm = nullptr;
        exit(code);
    }
    const char* name() const override { return host_memory ? "NCCL (no MPI)" : "NCCL"; }
};

inline std::string to_hex(const void* data, size_t bytes) {
    std::string s;
    for (size_t i = 0; i < bytes; i++) s += strf("%02x", ((const unsigned char*)data)[i]);
    return s;
}
inline bool from_hex(const std::string& s, void* data, size_t bytes) {
    if (s.size() != 2 * bytes) return false;
    for (size_t i = 0; i < bytes; i++) {
        unsigned v;
        if (sscanf(s.c_str() + 2 * i, "%2x", &v) != 1) return false;
        ((unsigned char*)data)[i] = (unsigned char)v;
    }
    return true;
}

// NCCL's id through a file on a filesystem that every node shares. Rank 0 writes it
// atomically (a temporary file, then a rename); the others poll until it appears. The
// file names the Slurm job and step it belongs to, so a file left by an earlier run (or
// an earlier srun of the same job) is never taken for this one's.
constexpr int RENDEZVOUS_TIMEOUT_S = 600;
inline ncclUniqueId nccl_id_rendezvous(const std::string& path, int rank, int world) {
    auto env = [](const char* name) {
        const char* v = getenv(name);
        return std::string(v ? v : "none");
    };
    std::string tag = "slurm job " + env("SLURM_JOB_ID") + " step " + env("SLURM_STEP_ID") + strf(" world %d", world);
    ncclUniqueId id;
    if (rank == 0) {
        NCCL_CHECK(ncclGetUniqueId(&id));
        std::string text = "nccl-id v1\n" + tag + "\n" + to_hex(&id, sizeof id) + "\n";
        write_file_atomic(path, {{text.data(), text.size()}});
        return id;
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(RENDEZVOUS_TIMEOUT_S);
    for (;;) {
        std::ifstream f(path);
        std::string magic, file_tag, hex;
        if (f && std::getline(f, magic) && std::getline(f, file_tag) && std::getline(f, hex) &&
            magic == "nccl-id v1" && file_tag == tag && from_hex(hex, &id, sizeof id))
            return id;
        if (std::chrono::steady_clock::now() > deadline)
            throw Error(strf("rank %d waited %d s for rank 0 to write NCCL's id (%s) into '%s': is that path on a "
                             "filesystem every node shares, and did rank 0 start?",
                             rank, RENDEZVOUS_TIMEOUT_S, tag.c_str(), path.c_str()));
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
}

// srun without MPI: rank, world and local rank from Slurm's variables. Also catches a
// train_gpt without MPI started by mpirun, which would otherwise train R separate models.
inline void adopt_launcher_ranks(Comm& comm, const std::string& init_file) {
    const char* ompi_size = getenv("OMPI_COMM_WORLD_SIZE");
    if (ompi_size && atoi(ompi_size) > 1)
        throw Error("started by mpirun, but this train_gpt was built without MPI (install libopenmpi-dev and "
                    "rebuild), or launch with srun and --nccl-init-file");
    const char* procid = getenv("SLURM_PROCID");
    const char* ntasks = getenv("SLURM_STEP_NUM_TASKS") ? getenv("SLURM_STEP_NUM_TASKS") : getenv("SLURM_NTASKS");
    const char* localid = getenv("SLURM_LOCALID");
    if (!procid || !ntasks || !localid || atoi(ntasks) <= 1) return;
    if (init_file.empty())
        throw UsageError(strf("started by srun as task %s of %s without MPI: pass --nccl-init-file PATH, a path on a "
                              "filesystem every node shares, so the tasks can exchange NCCL's id",
                              procid, ntasks));
    comm.rank = atoi(procid), comm.world = atoi(ntasks), comm.local_rank = atoi(localid);
}

// Prints rank → host → GPU, and stops when two ranks on one host chose the same GPU, or
// when ranks on one host see different numbers of GPUs (their CUDA_VISIBLE_DEVICES differ).
inline void check_device_map(const Comm& comm) {
    int count = 0;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    char bus[32] = "?";
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, ctx.device));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, ctx.device));
    std::vector<std::string> all = comm.allgather(strf("%s|%s|%d|%d|%s", comm.host.c_str(), bus, ctx.device, count,
                                                       prop.name));
    struct Entry {
        std::string host, bus, name;
        int device, count;
    };
    std::vector<Entry> e(comm.world);
    for (int r = 0; r < comm.world; r++) {
        char host[256] = "", b[32] = "", name[256] = "";
        sscanf(all[r].c_str(), "%255[^|]|%31[^|]|%d|%d|%255[^\n]", host, b, &e[r].device, &e[r].count, name);
        e[r].host = host, e[r].bus = b, e[r].name = name;
        if (comm.rank == 0)
            printf("rank %d -> %s -> GPU %d (%s, %s)\n", r, host, e[r].device, b, name);
    }
    fflush(stdout);
    for (int r = 0; r < comm.world; r++)
        for (int s = r + 1; s < comm.world; s++) {
            if (e[r].host != e[s].host) continue;
            if (e[r].bus == e[s].bus)
                throw Error(strf("ranks %d and %d on %s both chose the GPU at %s: more ranks than GPUs on that "
                                 "host, or CUDA_VISIBLE_DEVICES hides the others",
                                 r, s, e[r].host.c_str(), e[r].bus.c_str()));
            if (e[r].count != e[s].count)
                throw Error(strf("ranks %d and %d on %s see %d and %d GPUs: give every rank the same "
                                 "CUDA_VISIBLE_DEVICES, or each rank exactly one GPU",
                                 r, s, e[r].host.c_str(), e[r].count, e[s].count));
        }
}

}  // namespace gpu

// ----------------------------------------------------------------------------
// The GPU trainer, as host/run.h's training loop sees it.

struct GpuTrainer {
    ModelConfig cfg;
    int maxB, maxT;  // activation capacity
    int rank;
    // host copies: where run.h initialises, loads and saves
    std::vector<float> host_params, host_m, host_v;
    // device buffers, each one allocation
    gpu::DeviceBuffer<float> params_buf, grads_buf, m_buf, v_buf, acts_buf, dacts_buf, scratch_buf;
    gpu::DeviceBuffer<int> tokens_buf;     // inputs, targets, token groups of the micro-batch
    gpu::DeviceBuffer<double> sums_buf;    // [0] loss sum, [1..] global-norm partial sums
    ParamTensors p, g;  // views into params and grads (host/checkpoint.h)
    gpu::Activations a;
    gpu::ActivationGrads d;
    gpu::Scratch s;
    std::vector<int> inputs, targets, host_tokens;  // the current micro-batch, on the host
    int* d_inputs;
    int* d_targets;
    gpu::TokenGroups groups;
    std::vector<float> logits_row;  // next_token_logits' answer
    size_t peak_bytes = 0;          // most GPU memory in use after a step (device-wide)
    int steps_done = 0;

    GpuTrainer(const ModelConfig& mc, const BatchPlan& plan, const Config& config, const Comm& comm)
        : cfg(mc), maxB(plan.B), maxT(plan.T), rank(comm.rank) {
        gpu::set_tf32(config.tf32);
        size_t n = mc.num_params(), BT = (size_t)maxB * maxT;
        host_params.assign(n, 0.0f), host_m.assign(n, 0.0f), host_v.assign(n, 0.0f);
        params_buf.alloc(n), grads_buf.alloc(n), m_buf.alloc(n), v_buf.alloc(n);
        p = param_views(params_buf.ptr, mc);
        g = param_views(grads_buf.ptr, mc);
        gpu::carve(acts_buf, gpu::activation_layout(a, mc, maxB, maxT));
        gpu::carve(dacts_buf, gpu::activation_grad_layout(d, mc, maxB, maxT));
        gpu::carve(scratch_buf, gpu::scratch_layout(s, mc, maxB, maxT));
        // tokens: [inputs BT] [targets BT] [group start BT+1] [group token BT] [position BT]
        inputs.assign(BT, 0), targets.assign(BT, 0), host_tokens.assign(5 * BT + 1, 0);
        tokens_buf.alloc(host_tokens.size());
        int* t = tokens_buf.ptr;
        d_inputs = t, d_targets = t + BT;
        groups = {t + 2 * BT, t + 3 * BT + 1, t + 4 * BT + 1, 0};
        sums_buf.alloc(1 + gpu::MAX_NORM_BLOCKS + 1);
    }
    ~GpuTrainer() {
        if (rank == 0 && steps_done > 0 && std::uncaught_exceptions() == 0) {
            size_t free_bytes = 0, total = 0;
            cudaMemGetInfo(&free_bytes, &total);
            printf("peak GPU memory: %.0f MiB of %.0f MiB (in use on the whole device after a step, cudaMemGetInfo)\n",
                   peak_bytes / 1048576.0, total / 1048576.0);
        }
    }

    static Comm connect(int* argc, char*** argv) {
        if (gpu::wants_help(*argc, *argv)) {  // --help needs no GPU
            Comm c;
            c.host = host_name();
            return c;
        }
        Comm comm = Comm::init(argc, argv);  // MPI when launched by mpirun and built with it
        try {
            std::string init_file = gpu::scan_option(*argc, *argv, "nccl-init-file");
            bool via_file = false;
            if (comm.world == 1) {
                gpu::adopt_launcher_ranks(comm, init_file);
                via_file = comm.world > 1;
            }
            int count = 0;
            cudaError_t e = cudaGetDeviceCount(&count);
            if (e != cudaSuccess || count == 0) {
                if (comm.world == 1 && gpu::scan_option(*argc, *argv, "dry-run") == "1") return comm;
                throw Error(strf("no usable GPU: %s", e != cudaSuccess ? cudaGetErrorString(e) : "none found"));
            }
            gpu::init_device(comm.local_rank % count);
            if (comm.world > 1) {
                ncclUniqueId id;
                if (via_file) {
                    id = gpu::nccl_id_rendezvous(init_file, comm.rank, comm.world);
                } else {
                    if (comm.rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
                    comm.broadcast(&id, sizeof id);
                }
                auto nccl = std::make_shared<gpu::NcclComm>(id, comm.world, comm.rank);
                comm.buffers = std::make_shared<gpu::NcclCollectives>(nccl, comm.world, false);
                if (via_file) {
                    comm.backend = std::make_shared<gpu::NcclCollectives>(nccl, comm.world, true);
                    if (comm.rank == 0) remove(init_file.c_str());  // every rank has read it by now
                }
                gpu::check_device_map(comm);
            }
        } catch (const Error& e) {
            // with a backend, end every replica here: the others would wait for this one
            if (comm.world > 1 && comm.backend) {
                fprintf(stderr, "%s: error (rank %d): %s\n", program_name((*argv)[0]), comm.rank, e.what());
                comm.abort_all(1);
            }
            throw;
        }
        return comm;
    }

    static std::string hardware(const Config& config, const Comm& comm) {
        if (gpu::ctx.device < 0) return "GPU: none found (dry run only)";
        cudaDeviceProp prop;
        CUDA_CHECK(cudaGetDeviceProperties(&prop, gpu::ctx.device));
        std::string s = strf("GPU %d: %s (sm_%d%d, %d SMs, %.1f GiB), TF32 %s", gpu::ctx.device, prop.name, prop.major,
                             prop.minor, prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0,
                             config.tf32 ? "on" : "off");
        if (comm.world > 1) s += strf(", gradients via NCCL %d.%d.%d", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
        return s;
    }
    static double activation_bytes(const ModelConfig& mc, int B, int T) {
        return gpu::activation_floats(mc, B, T) * 4.0;
    }

    float* params() { return host_params.data(); }
    float* adam_m() { return host_m.data(); }
    float* adam_v() { return host_v.data(); }
    void upload() {
        size_t bytes = host_params.size() * sizeof(float);
        CUDA_CHECK(cudaMemcpy(params_buf.ptr, host_params.data(), bytes, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(m_buf.ptr, host_m.data(), bytes, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(v_buf.ptr, host_v.data(), bytes, cudaMemcpyHostToDevice));
    }
    void download() {
        gpu::synchronize();
        size_t bytes = host_params.size() * sizeof(float);
        CUDA_CHECK(cudaMemcpy(host_params.data(), params_buf.ptr, bytes, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(host_m.data(), m_buf.ptr, bytes, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(host_v.data(), v_buf.ptr, bytes, cudaMemcpyDeviceToHost));
    }

    // The micro-batch in inputs/targets (targets may be absent) to the device, with its
    // positions grouped by token, in one copy. The host buffer is pageable memory, which
    // cudaMemcpyAsync copies out before it returns, so the next micro-batch may reuse it.
    void upload_tokens(const int* in, const int* tgt, int B, int T) {
        int BT = B * T;
        size_t cap = (size_t)maxB * maxT;  // the layout's offsets are fixed by the capacity
        int* h = host_tokens.data();
        std::copy(in, in + BT, h);
        if (tgt) std::copy(tgt, tgt + BT, h + cap);
        groups.groups = gpu::group_by_token(in, BT, cfg.V, h + 2 * cap, h + 3 * cap + 1, h + 4 * cap + 1);
        CUDA_CHECK(cudaMemcpyAsync(tokens_buf.ptr, h, host_tokens.size() * sizeof(int), cudaMemcpyHostToDevice,
                                   gpu::ctx.stream));
    }

    // Forward to the logits (B, T, Vp) for the inputs on the device; B ≤ maxB, T ≤ maxT.
    void forward(int B, int T) {
        const int C = cfg.C, NH = cfg.NH, Vp = cfg.Vp;
        const size_t BT = (size_t)B * T;
        gpu::encoder_forward(a.encoded, d_inputs, p.wte, p.wpe, B, T, C);
        for (int l = 0; l < cfg.L; l++) {
            const float* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * BT * C;
            // this block's slices of the activations and parameters
            float* ln1 = a.ln1 + l * BT * C;       float* ln1_mean = a.ln1_mean + l * BT;
            float* ln1_rstd = a.ln1_rstd + l * BT; float* qkv = a.qkv + l * BT * 3 * C;
            float* att = a.att + l * BT * NH * T;  float* atty = a.atty + l * BT * C;
            float* attproj = a.attproj + l * BT * C;  float* residual2 = a.residual2 + l * BT * C;
            float* ln2 = a.ln2 + l * BT * C;       float* ln2_mean = a.ln2_mean + l * BT;
            float* ln2_rstd = a.ln2_rstd + l * BT; float* fch = a.fch + l * BT * 4 * C;
            float* fch_gelu = a.fch_gelu + l * BT * 4 * C;  float* fcproj = a.fcproj + l * BT * C;
            float* residual3 = a.residual3 + l * BT * C;
            // x + attention(ln1(x)), then x + mlp(ln2(x))
            gpu::layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, p.ln1w + l * C, p.ln1b + l * C, BT, C);
            gpu::matmul_forward(qkv, ln1, p.qkvw + (size_t)l * 3 * C * C, p.qkvb + l * 3 * C, BT, C, 3 * C);
            gpu::attention_forward(atty, att, qkv, s.qkvr, s.yr, B, T, C, NH);
            gpu::matmul_forward(attproj, atty, p.attprojw + (size_t)l * C * C, p.attprojb + l * C, BT, C, C);
            gpu::residual_forward(residual2, residual, attproj, BT * C);
            gpu::layernorm_forward(ln2, ln2_mean, ln2_rstd, residual2, p.ln2w + l * C, p.ln2b + l * C, BT, C);
            gpu::matmul_forward(fch, ln2, p.fcw + (size_t)l * 4 * C * C, p.fcb + l * 4 * C, BT, C, 4 * C);
            gpu::gelu_forward(fch_gelu, fch, BT * 4 * C);
            gpu::matmul_forward(fcproj, fch_gelu, p.fcprojw + (size_t)l * C * 4 * C, p.fcprojb + l * C, BT, 4 * C, C);
            gpu::residual_forward(residual3, residual2, fcproj, BT * C);
        }
        const float* last = a.residual3 + (cfg.L - 1) * BT * C;  // the output of the last block
        gpu::layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, last, p.lnfw, p.lnfb, BT, C);
        gpu::matmul_forward(a.logits, a.lnf, p.wte, nullptr, BT, C, Vp);  // the output head is wte, tied
    }

    // Cross-entropy of the logits against the targets on the device: adds the mean loss to
    // the loss sum on the device, and with `backward` writes dlogits for a per-position
    // loss scale of loss_scale.
    void cross_entropy(int B, int T, bool backward, float loss_scale) {
        int N = B * T;
        gpu::crossentropy_forward_backward(a.losses, backward ? d.dlogits : nullptr, a.logits, d_targets, loss_scale, N,
                                           cfg.V, cfg.Vp);
        gpu::add_mean_loss(sums_buf.ptr, a.losses, N);
    }
    void zero_loss_sum() { CUDA_CHECK(cudaMemsetAsync(sums_buf.ptr, 0, sizeof(double), gpu::ctx.stream)); }
    double loss_sum() {
        double sum;
        CUDA_CHECK(cudaMemcpyAsync(&sum, sums_buf.ptr, sizeof sum, cudaMemcpyDeviceToHost, gpu::ctx.stream));
        gpu::synchronize();
        return sum;
    }

    // Backward from dlogits (written by cross_entropy) to the parameter gradients (+=).
    void backward(int B, int T) {
        const int C = cfg.C, NH = cfg.NH, Vp = cfg.Vp;
        const size_t BT = (size_t)B * T;
        float* work = s.partials;  // column-sum scratch of the bias and LayerNorm gradients
        gpu::matmul_backward(d.dln, g.wte, nullptr, work, d.dlogits, a.lnf, p.wte, BT, C, Vp);
        const float* last = a.residual3 + (cfg.L - 1) * BT * C;  // the output of the last block
        gpu::layernorm_backward(d.dresidual, g.lnfw, g.lnfb, work, d.dln, last, p.lnfw, a.lnf_mean, a.lnf_rstd, BT, C);
        for (int l = cfg.L - 1; l >= 0; l--) {
            // d.dresidual holds ∂loss/∂(output of block l)
            const float* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * BT * C;
            const float* ln1 = a.ln1 + l * BT * C;        const float* ln1_mean = a.ln1_mean + l * BT;
            const float* ln1_rstd = a.ln1_rstd + l * BT;  const float* qkv = a.qkv + l * BT * 3 * C;
            const float* att = a.att + l * BT * NH * T;   const float* atty = a.atty + l * BT * C;
            const float* residual2 = a.residual2 + l * BT * C;  const float* ln2 = a.ln2 + l * BT * C;
            const float* ln2_mean = a.ln2_mean + l * BT;  const float* ln2_rstd = a.ln2_rstd + l * BT;
            const float* fch = a.fch + l * BT * 4 * C;    const float* fch_gelu = a.fch_gelu + l * BT * 4 * C;
            // MLP branch: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
            gpu::matmul_backward(d.dfch_gelu, g.fcprojw + (size_t)l * C * 4 * C, g.fcprojb + l * C, work, d.dresidual,
                                 fch_gelu, p.fcprojw + (size_t)l * C * 4 * C, BT, 4 * C, C);
            gpu::gelu_backward(d.dfch, fch, d.dfch_gelu, BT * 4 * C);
            gpu::matmul_backward(d.dln, g.fcw + (size_t)l * 4 * C * C, g.fcb + l * 4 * C, work, d.dfch, ln2,
                                 p.fcw + (size_t)l * 4 * C * C, BT, C, 4 * C);
            gpu::layernorm_backward(d.dx, g.ln2w + l * C, g.ln2b + l * C, work, d.dln, residual2, p.ln2w + l * C,
                                    ln2_mean, ln2_rstd, BT, C);
            // residual2 fed both the skip path and ln2: its gradient is the sum of the two
            gpu::residual_forward(d.dresidual, d.dresidual, d.dx, BT * C);
            // attention branch: residual2 = residual + attproj(attention(qkv(ln1(residual))))
            gpu::matmul_backward(d.datty, g.attprojw + (size_t)l * C * C, g.attprojb + l * C, work, d.dresidual, atty,
                                 p.attprojw + (size_t)l * C * C, BT, C, C);
            gpu::attention_backward(d.dqkv, d.datty, qkv, att, s.qkvr, s.dqkvr, s.yr, s.datt, B, T, C, NH);
            gpu::matmul_backward(d.dln, g.qkvw + (size_t)l * 3 * C * C, g.qkvb + l * 3 * C, work, d.dqkv, ln1,
                                 p.qkvw + (size_t)l * 3 * C * C, BT, C, 3 * C);
            gpu::layernorm_backward(d.dx, g.ln1w + l * C, g.ln1b + l * C, work, d.dln, residual, p.ln1w + l * C,
                                    ln1_mean, ln1_rstd, BT, C);
            gpu::residual_forward(d.dresidual, d.dresidual, d.dx, BT * C);  // same for the block's input
        }
        gpu::encoder_backward(g.wte, g.wpe, d.dresidual, groups, B, T, C);
    }

    // One optimizer step: train.cpp's train_step(), on the GPU.
    StepResult step(DataLoader& loader, const BatchPlan& plan, const Comm& comm, const AdamWConfig& opt, float lr,
                    float grad_clip, int t) {
        const int B = plan.B, T = plan.T;
        const size_t n = cfg.num_params();
        cudaStream_t stream = gpu::ctx.stream;
        // 1. zero the parameter gradients: they accumulate over the micro-batches below
        CUDA_CHECK(cudaMemsetAsync(grads_buf.ptr, 0, n * sizeof(float), stream));
        zero_loss_sum();

        // 2. accumulation loop: A micro-batches of this replica's share of the global batch
        loader.next_chunk();
        for (int i = 0; i < plan.A; i++) {
            loader.micro_batch(i, inputs.data(), targets.data());
            upload_tokens(inputs.data(), targets.data(), B, T);
            forward(B, T);
            cross_entropy(B, T, true, 1.0f / (float)plan.global_tokens());
            backward(B, T);
        }

        // 3. gradient sync, once per step: sum over replicas = mean over the global batch
        comm.allreduce_sum(grads_buf.ptr, n);
        float loss = (float)comm.allreduce_mean(loss_sum() / plan.A);

        // 4. clip: scale the synced gradient down to norm grad_clip (the same on every replica)
        float norm = gpu::global_norm(grads_buf.ptr, n, sums_buf.ptr + 1);
        float grad_scale = (grad_clip > 0 && norm > grad_clip) ? grad_clip / (norm + 1e-6f) : 1.0f;

        // 5. update, with the clipping scale applied as AdamW reads each gradient; then wait
        //    for the GPU, so that the step's time in the log is the GPU's
        gpu::adamw_update(params_buf.ptr, grads_buf.ptr, m_buf.ptr, v_buf.ptr, cfg, opt, lr, t, grad_scale);
        gpu::synchronize();
        size_t free_bytes, total;
        CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
        peak_bytes = std::max(peak_bytes, total - free_bytes);
        steps_done++;
        return {loss, norm};
    }

    // Mean loss over `batches` validation micro-batches (replicas split them, then average).
    float evaluate(DataLoader& val, int batches, const BatchPlan& plan, const Comm& comm) {
        val.reset();
        zero_loss_sum();
        for (int i = 0; i < batches; i++) {
            val.next_chunk();
            val.micro_batch(0, inputs.data(), targets.data());
            upload_tokens(inputs.data(), targets.data(), plan.B, plan.T);
            forward(plan.B, plan.T);
            cross_entropy(plan.B, plan.T, false, 0.0f);
        }
        return (float)comm.allreduce_mean(loss_sum() / batches);
    }

    const float* next_token_logits(const int* context, int T) {
        upload_tokens(context, nullptr, 1, T);
        forward(1, T);
        logits_row.resize(cfg.Vp);
        CUDA_CHECK(cudaMemcpyAsync(logits_row.data(), a.logits + (size_t)(T - 1) * cfg.Vp, cfg.Vp * sizeof(float),
                                   cudaMemcpyDeviceToHost, gpu::ctx.stream));
        gpu::synchronize();
        return logits_row.data();
    }
};

#ifndef TRAIN_NO_MAIN
int main(int argc, char** argv) { return main_with_errors<GpuTrainer>(argc, argv); }
#endif
