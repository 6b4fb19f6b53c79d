// gpu/rmsnorm.cuh: RMSNorm over C for each of N rows (Llama), forward and backward:
// out = x · rstd · w, rstd = 1/√(mean(x²) + eps); no mean is subtracted and there is no bias.
// The statistic and every sum are float32 in both precisions; the formulas and their order
// are train.cpp's rmsnorm_forward and rmsnorm_backward (test/gpu_trainer/trainer.cu checks them).
//
// The kernels follow gpu/layernorm.cuh's fused pair: the forward takes the residual connection
// that feeds it (residual_rmsnorm_forward), the backward writes or adds the input gradient and
// makes the weight gradient from the same loads, in per-chunk partial sums added in order
// (deterministic, no atomics), in column chunks where a block cannot hold a whole row's sums.
// Rows move 16 bytes at a time (for_row_pieces, gpu/common.cuh), for any C.
// FLOPs and bytes of each kernel: beside it (N rows of C, x = sizeof(floatX)).
#pragma once
#include "common.cuh"
#include "layernorm.cuh"  // the column-sum slots in shared memory (layernorm_slot and its stride)

namespace gpu {

// One warp per row. With `skip`, the row is first inp + skip, rounded to floatX as
// residual_forward rounds it and written to `residual` (as layernorm_forward_kernel does).
// FLOPs: 4 per element (x², its sum, x·rstd·w), 5 with skip. Bytes: x·(2NC + C) + 4N;
// with skip x·(4NC + C) + 4N (a + b read, residual written, then re-read from cache).
__global__ void rmsnorm_forward_kernel(floatX* out, float* rstd, floatX* residual, const floatX* inp,
                                       const floatX* skip, const floatX* w, int N, int C, float eps) {
    int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return;  // the whole warp leaves together
    const size_t row = (size_t)n * C;
    const floatX* x = inp + row;
    float sum = 0;
    for_row_pieces(x, C, lane, 32, [&](int i, int count) {
        Pack<floatX> v = load_part(x + i, count);
        if (skip) {
            Pack<floatX> y = load_part(skip + row + i, count);
            for (int k = 0; k < count; k++) v.v[k] = floatX((float)v.v[k] + (float)y.v[k]);
            store_part(residual + row + i, count, v);
        }
        for (int k = 0; k < count; k++) sum += (float)v.v[k] * (float)v.v[k];
    });
    if (skip) {
        x = residual + row;
        __syncwarp(0xffffffffu);  // the next pass may read a piece another lane wrote
    }
    float s = 1.0f / sqrtf(warp_sum(sum) / C + eps);
    floatX* o = out + row;
    for_row_pieces(x, C, lane, 32, [&](int i, int count) {
        Pack<floatX> v = load_part(x + i, count), wk = load_part(w + i, count), r;
        for (int k = 0; k < count; k++) r.v[k] = floatX((float)v.v[k] * s * (float)wk.v[k]);
        store_part(o + i, count, r);
    });
    if (lane == 0) rstd[n] = s;
}
// out (N, C) = RMSNorm(inp) · w; rstd (N) kept for the backward
void rmsnorm_forward(floatX* out, float* rstd, const floatX* inp, const floatX* w, int N, int C, float eps) {
    rmsnorm_forward_kernel<<<blocks_for(N, ROWS_PER_BLOCK), THREADS, 0, ctx.stream>>>(out, rstd, nullptr, inp, nullptr,
                                                                                        w, N, C, eps);
    KERNEL_CHECK();
}
// residual = a + b (as residual_forward), out = RMSNorm(residual) · w, in one pass
void residual_rmsnorm_forward(floatX* residual, floatX* out, float* rstd, const floatX* a, const floatX* b,
                              const floatX* w, int N, int C, float eps) {
    rmsnorm_forward_kernel<<<blocks_for(N, ROWS_PER_BLOCK), THREADS, 0, ctx.stream>>>(out, rstd, residual, a, b, w, N,
                                                                                        C, eps);
    KERNEL_CHECK();
}

// Backward of one row, by one warp: dinp = rstd · (g − xhat · mean(g · xhat)), g = dout · w,
// xhat = x · rstd. The row's mean first, over the whole row (whatever columns the block takes).
__device__ inline float rmsnorm_backward_mean(const floatX* d, const floatX* x, const floatX* w, float s, int C,
                                              int lane) {
    float gx_sum = 0;
    for_row_pieces(d, C, lane, 32, [&](int i, int count) {
        Pack<floatX> dk = load_part(d + i, count), xk = load_part(x + i, count), wk = load_part(w + i, count);
        for (int k = 0; k < count; k++) gx_sum += (float)dk.v[k] * (float)wk.v[k] * (float)xk.v[k] * s;
    });
    return warp_sum(gx_sum) / C;
}
__device__ inline float rmsnorm_dinp(float d, float w, float x, float s, float gx_mean) {
    return s * (d * w - x * s * gx_mean);
}

// One block per chunk of CHUNK_ROWS rows and `cols` columns, warp y taking rows y, y + WARPS,
// ... of it. Each warp computes its rows' dinp in its columns and, from the same loads, adds
// dout · x · rstd into its own float32 sum per column in shared memory; the warps' sums are
// then added in warp order into the chunk's partial sums, which sum_partials_add adds in chunk
// order into dw. Column chunks (cols < C, grid.y = ⌈C/cols⌉), as LayerNorm's (gpu/layernorm.cuh):
// every column's sum adds the same rows in the same order and dinp comes from the same mean,
// so the result is the same to the bit whatever `cols` is. Column c's sum sits in LayerNorm's
// slot layout (layernorm_slot: the lanes of a warp touch consecutive banks).
// FLOPs per element: 12 (the mean 4, dinp 5, dw's sum 3; 13 with accumulate). Bytes: dout and
// inp read once for the mean (twice when C is cut in column chunks; the second read of a
// block's own columns comes from cache), w read, dinp written (read too with accumulate):
// x·((accumulate ? 4 : 3)·NC + C) + 4N, the partials 2·4·row_chunks(N)·C, dw read and written 8C.
constexpr int RMS_BACKWARD_WARPS = LANES;
static_assert(RMS_BACKWARD_WARPS * 32 == THREADS, "a block of the RMSNorm backward is THREADS threads");
// Dynamic shared memory of a block taking `cols` columns: one float32 sum per column per warp
// (32·cols bytes: 128 KiB at Llama-3 8B's C = 4096, which sm_86/89 blocks cannot hold).
inline size_t rmsnorm_backward_smem(int cols) {
    return (size_t)RMS_BACKWARD_WARPS * layernorm_slots(cols) * sizeof(float);
}
// The columns a block takes: all C when their sums fit in `smem_limit` bytes (the device's
// opt-in maximum per block), else the fewest equal chunks, whole packs each, that fit.
inline int rmsnorm_backward_columns(int C, size_t smem_limit) {
    const int P = pack_size<floatX>();
    for (int k = 1;; k++) {
        const int cols = ((C + k - 1) / k + P - 1) / P * P;
        if (rmsnorm_backward_smem(cols) <= smem_limit || cols <= P) return std::min(cols, C);
    }
}
__global__ void rmsnorm_backward_kernel(floatX* dinp, float* partial_w, const floatX* dout, const floatX* inp,
                                        const floatX* w, const float* rstd, int N, int C, int cols, bool accumulate) {
    extern __shared__ float rms_sums[];  // [warp][slots]
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, chunk = blockIdx.x;
    const int c0 = blockIdx.y * cols, width = min(cols, C - c0);  // this block's columns: c0 .. c0 + width
    const int stride = layernorm_slot_stride(cols), slots = layernorm_slots(cols);
    float* sum_w = rms_sums + (size_t)warp * slots;
    for (int c = threadIdx.x; c < RMS_BACKWARD_WARPS * slots; c += blockDim.x) rms_sums[c] = 0.0f;
    __syncthreads();
    const int n_end = min(N, (chunk + 1) * CHUNK_ROWS);
    for (int n = chunk * CHUNK_ROWS + warp; n < n_end; n += RMS_BACKWARD_WARPS) {
        const size_t row = (size_t)n * C;
        const float s = rstd[n];
        const float gx_mean = rmsnorm_backward_mean(dout + row, inp + row, w, s, C, lane);
        const floatX *d = dout + row + c0, *x = inp + row + c0, *wc = w + c0;
        floatX* dx = dinp + row + c0;
        for_row_pieces(d, width, lane, 32, [&](int i, int count) {
            Pack<floatX> dk = load_part(d + i, count), xk = load_part(x + i, count), wk = load_part(wc + i, count), r;
            Pack<floatX> old = accumulate ? load_part(dx + i, count) : Pack<floatX>{};
            for (int k = 0; k < count; k++) {
                float dv = (float)dk.v[k], xv = (float)xk.v[k];
                floatX g = floatX(rmsnorm_dinp(dv, (float)wk.v[k], xv, s, gx_mean));
                r.v[k] = accumulate ? floatX((float)old.v[k] + (float)g) : g;  // as residual_forward adds
                sum_w[layernorm_slot(i + k, stride)] += dv * xv * s;
            }
            store_part(dx + i, count, r);
        });
        // a row that sits differently (C not a multiple of the pack) gives a column to another lane
        __syncwarp(0xffffffffu);
    }
    __syncthreads();
    for (int c = threadIdx.x; c < width; c += blockDim.x) {
        const int slot = layernorm_slot(c, stride);
        float sw = rms_sums[slot];
        for (int k = 1; k < RMS_BACKWARD_WARPS; k++) sw += rms_sums[(size_t)k * slots + slot];
        partial_w[(size_t)chunk * C + c0 + c] = sw;
    }
}
// Writes the input gradient to dinp, or with `accumulate` adds it to dinp (rounded as
// residual_forward rounds: the residual stream's gradient); dw (float32, C) +=.
// scratch: row_chunks(N) · C floats. cols: the columns per block (rmsnorm_backward_columns;
// 0, the default, is the whole row). Shared memory: rmsnorm_backward_smem(cols), 32·cols bytes,
// above the default 48 KiB when cols > 1536.
void rmsnorm_backward(floatX* dinp, float* dw, float* scratch, const floatX* dout, const floatX* inp, const floatX* w,
                      const float* rstd, int N, int C, bool accumulate = false, int cols = 0) {
    if (cols <= 0 || cols > C) cols = C;
    const size_t smem = rmsnorm_backward_smem(cols);
    if (smem > (48 << 10))
        CUDA_CHECK(
            cudaFuncSetAttribute(rmsnorm_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const int chunks = row_chunks(N);
    const dim3 grid(chunks, (C + cols - 1) / cols);
    rmsnorm_backward_kernel<<<grid, THREADS, smem, ctx.stream>>>(dinp, scratch, dout, inp, w, rstd, N, C, cols,
                                                                 accumulate);
    KERNEL_CHECK();
    sum_partials_add(dw, scratch, chunks, C);
}

}  // namespace gpu
