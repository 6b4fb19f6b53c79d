// gpu/layernorm.cuh: LayerNorm over C for each of N rows, forward and backward. The
// statistics and every sum are float32 in both precisions.
//
// Two fused kernels serve the trainer; the compositions they replace stay below them as the
// simple path they are checked against (test/gpu_trainer/trainer.cu), doing the same arithmetic in the
// same order:
//   residual_layernorm_forward = residual_forward, then layernorm_forward on its output;
//   layernorm_backward_fused   = layernorm_backward (dinp, then dw and db from a second read
//                                of dout and inp), then with `accumulate` residual_forward
//                                adding dinp into the residual stream's gradient.
// Rows move 16 bytes at a time (for_row_pieces, gpu/common.cuh), for any C.
// FLOPs and bytes of each kernel: host/kernel_cost.h (layernorm_forward_cost,
// residual_layernorm_forward_cost, layernorm_backward_cost), which the planner adds up.
#pragma once
#include "common.cuh"

namespace gpu {

// One warp per row. With `skip`, the row is first inp + skip, rounded to floatX as
// residual_forward rounds it and written to `residual`: the residual connection fused with
// the LayerNorm that reads it, so the sum is not written by one kernel and read back by the
// next (the later passes re-read this thread's own writes, from cache).
__global__ void layernorm_forward_kernel(floatX* out, float* mean, float* rstd, floatX* residual, const floatX* inp,
                                         const floatX* skip, const floatX* w, const floatX* bias, int N, int C) {
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
        for (int k = 0; k < count; k++) sum += (float)v.v[k];
    });
    if (skip) x = residual + row;
    float m = warp_sum(sum) / C;
    float var = 0;
    for_row_pieces(x, C, lane, 32, [&](int i, int count) {
        Pack<floatX> v = load_part(x + i, count);
        for (int k = 0; k < count; k++) var += ((float)v.v[k] - m) * ((float)v.v[k] - m);
    });
    float s = 1.0f / sqrtf(warp_sum(var) / C + 1e-5f);
    floatX* o = out + row;
    for_row_pieces(x, C, lane, 32, [&](int i, int count) {
        Pack<floatX> v = load_part(x + i, count), wk = load_part(w + i, count), bk = load_part(bias + i, count), r;
        for (int k = 0; k < count; k++)
            r.v[k] = floatX(((float)v.v[k] - m) * s * (float)wk.v[k] + (float)bk.v[k]);
        store_part(o + i, count, r);
    });
    if (lane == 0) mean[n] = m, rstd[n] = s;
}
void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w, const floatX* bias,
                       int N, int C) {
    layernorm_forward_kernel<<<blocks_for(N, ROWS_PER_BLOCK), THREADS, 0, ctx.stream>>>(
        out, mean, rstd, nullptr, inp, nullptr, w, bias, N, C);
    KERNEL_CHECK();
}
// residual = a + b (as residual_forward), out = LayerNorm(residual), in one pass
void residual_layernorm_forward(floatX* residual, floatX* out, float* mean, float* rstd, const floatX* a,
                                const floatX* b, const floatX* w, const floatX* bias, int N, int C) {
    layernorm_forward_kernel<<<blocks_for(N, ROWS_PER_BLOCK), THREADS, 0, ctx.stream>>>(out, mean, rstd, residual, a,
                                                                                          b, w, bias, N, C);
    KERNEL_CHECK();
}

// Backward of one row, by one warp: dinp = rstd · (g - mean(g) - xhat · mean(g · xhat)),
// g = dout · w. The row's two means first; both backward kernels call these two, so their
// dinp agree bit for bit.
struct LayerNormRowMeans {
    float g, gx;
};
__device__ inline LayerNormRowMeans layernorm_backward_means(const floatX* d, const floatX* x, const floatX* w, float m,
                                                             float s, int C, int lane) {
    float g_sum = 0, gx_sum = 0;
    for_row_pieces(d, C, lane, 32, [&](int i, int count) {
        Pack<floatX> dk = load_part(d + i, count), xk = load_part(x + i, count), wk = load_part(w + i, count);
        for (int k = 0; k < count; k++) {
            float g = (float)dk.v[k] * (float)wk.v[k];
            g_sum += g;
            gx_sum += g * ((float)xk.v[k] - m) * s;
        }
    });
    return {warp_sum(g_sum) / C, warp_sum(gx_sum) / C};
}
__device__ inline float layernorm_dinp(float d, float w, float x, float m, float s, LayerNormRowMeans means) {
    return s * (d * w - means.g - (x - m) * s * means.gx);
}

// The composition's first kernel: dinp per row (overwritten), one warp per row
__global__ void layernorm_backward_kernel(floatX* dinp, const floatX* dout, const floatX* inp, const floatX* w,
                                          const float* mean, const float* rstd, int N, int C) {
    int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return;
    const size_t row = (size_t)n * C;
    const floatX *d = dout + row, *x = inp + row;
    floatX* dx = dinp + row;
    float m = mean[n], s = rstd[n];
    LayerNormRowMeans means = layernorm_backward_means(d, x, w, m, s, C, lane);
    for_row_pieces(d, C, lane, 32, [&](int i, int count) {
        Pack<floatX> dk = load_part(d + i, count), xk = load_part(x + i, count), wk = load_part(w + i, count), r;
        for (int k = 0; k < count; k++)
            r.v[k] = floatX(layernorm_dinp((float)dk.v[k], (float)wk.v[k], (float)xk.v[k], m, s, means));
        store_part(dx + i, count, r);
    });
}
// Its second: the first pass of dw[c] += Σ_n dout·xhat and db[c] += Σ_n dout, per chunk of
// rows, lane y of a column summing rows y, y + LANES, ... of the chunk
__global__ void layernorm_param_partial_kernel(float* partial_w, float* partial_b, const floatX* dout,
                                               const floatX* inp, const float* mean, const float* rstd, int N, int C) {
    int c = blockIdx.x * 32 + threadIdx.x, chunk = blockIdx.y;
    int n_end = min(N, (chunk + 1) * CHUNK_ROWS);
    float sw = 0, sb = 0;
    if (c < C)
        for (int n = chunk * CHUNK_ROWS + threadIdx.y; n < n_end; n += LANES) {
            float d = (float)dout[(size_t)n * C + c];
            sw += d * ((float)inp[(size_t)n * C + c] - mean[n]) * rstd[n];
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
// The composition: overwrites dinp; dw, db (float32 parameter gradients) +=.
// scratch: row_chunks(N) · 2C floats
void layernorm_backward(floatX* dinp, float* dw, float* db, float* scratch, const floatX* dout, const floatX* inp,
                        const floatX* w, const float* mean, const float* rstd, int N, int C) {
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

// Fused: one block per chunk of CHUNK_ROWS rows and `cols` columns, warp y taking rows y,
// y + LANES, ... of it (the rows lane y of layernorm_param_partial_kernel sums, in the same
// order). Each warp computes its rows' dinp in its columns and, from the same loads, adds
// dout·xhat and dout into its own float32 sums per column in shared memory; the warps' sums
// are then added in warp order into the chunk's partial sums. dout and inp are read once
// instead of twice, dinp written once.
// Column chunks (cols < C, grid.y = ⌈C/cols⌉) are for a GPU whose blocks cannot hold the sums
// of a whole row (64·C bytes: above C = 1,584 on sm_86/89): each block reads its rows whole for
// the two means, then only its columns. Every column's sum adds the same rows in the same
// order, and dinp comes from the same means, so the result is the same to the bit whatever
// `cols` is (test/gpu_trainer/trainer.cu checks it): the choice, made from the device at start-up, cannot
// change what a resumed run computes.
// Column c's sum sits in slot (c % P)·stride + c / P (P elements per pack, stride = ⌈cols/P⌉,
// c counted from the block's first column): the lanes of a warp hold consecutive packs, so
// they touch consecutive shared-memory banks rather than every P-th one.
constexpr int LN_BACKWARD_WARPS = LANES;
static_assert(LN_BACKWARD_WARPS * 32 == THREADS, "a block of the fused LayerNorm backward is THREADS threads");
__host__ __device__ inline int layernorm_slot_stride(int cols) {
    return (cols + pack_size<floatX>() - 1) / pack_size<floatX>();
}
__host__ __device__ inline int layernorm_slots(int cols) { return pack_size<floatX>() * layernorm_slot_stride(cols); }
// Dynamic shared memory of a block taking `cols` columns: 2 float32 sums per column per warp.
// FLOPs per element: 12 (means 5, dinp 5, sums 2); bytes: dout and inp read twice per column
// chunk they are not in (the means) and once more in it, dinp written (read too with accumulate).
inline size_t layernorm_backward_smem(int cols) {
    return (size_t)LN_BACKWARD_WARPS * 2 * layernorm_slots(cols) * sizeof(float);
}
// The columns a block takes: all C when their sums fit in `smem_limit` bytes (the device's
// opt-in maximum per block), else the fewest equal chunks, whole packs each, that fit.
inline int layernorm_backward_columns(int C, size_t smem_limit) {
    const int P = pack_size<floatX>();
    for (int k = 1;; k++) {
        const int cols = ((C + k - 1) / k + P - 1) / P * P;
        if (layernorm_backward_smem(cols) <= smem_limit || cols <= P) return std::min(cols, C);
    }
}
__device__ inline int layernorm_slot(int c, int stride) {
    return c % pack_size<floatX>() * stride + c / pack_size<floatX>();
}
__global__ void layernorm_backward_fused_kernel(floatX* dinp, float* partial_w, float* partial_b, const floatX* dout,
                                                const floatX* inp, const floatX* w, const float* mean,
                                                const float* rstd, int N, int C, int cols, bool accumulate) {
    extern __shared__ float ln_sums[];  // [warp][dw, db][slots]
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, chunk = blockIdx.x;
    const int c0 = blockIdx.y * cols, width = min(cols, C - c0);  // this block's columns: c0 .. c0 + width
    const int stride = layernorm_slot_stride(cols), slots = layernorm_slots(cols);
    float *sum_w = ln_sums + (size_t)warp * 2 * slots, *sum_b = sum_w + slots;
    for (int c = threadIdx.x; c < LN_BACKWARD_WARPS * 2 * slots; c += blockDim.x) ln_sums[c] = 0.0f;
    __syncthreads();
    const int n_end = min(N, (chunk + 1) * CHUNK_ROWS);
    for (int n = chunk * CHUNK_ROWS + warp; n < n_end; n += LN_BACKWARD_WARPS) {
        const size_t row = (size_t)n * C;
        float m = mean[n], s = rstd[n];
        LayerNormRowMeans means = layernorm_backward_means(dout + row, inp + row, w, m, s, C, lane);
        const floatX *d = dout + row + c0, *x = inp + row + c0, *wc = w + c0;
        floatX* dx = dinp + row + c0;
        for_row_pieces(d, width, lane, 32, [&](int i, int count) {
            Pack<floatX> dk = load_part(d + i, count), xk = load_part(x + i, count), wk = load_part(wc + i, count), r;
            Pack<floatX> old = accumulate ? load_part(dx + i, count) : Pack<floatX>{};
            for (int k = 0; k < count; k++) {
                float dv = (float)dk.v[k], xv = (float)xk.v[k];
                floatX g = floatX(layernorm_dinp(dv, (float)wk.v[k], xv, m, s, means));
                r.v[k] = accumulate ? floatX((float)old.v[k] + (float)g) : g;  // as residual_forward adds
                const int slot = layernorm_slot(i + k, stride);
                sum_w[slot] += dv * (xv - m) * s;
                sum_b[slot] += dv;
            }
            store_part(dx + i, count, r);
        });
        // a row that sits differently (C not a multiple of the pack) gives a column to another lane
        __syncwarp(0xffffffffu);
    }
    __syncthreads();
    for (int c = threadIdx.x; c < width; c += blockDim.x) {
        const int slot = layernorm_slot(c, stride);
        float sw = ln_sums[slot], sb = ln_sums[slots + slot];
        for (int k = 1; k < LN_BACKWARD_WARPS; k++)
            sw += ln_sums[(size_t)k * 2 * slots + slot], sb += ln_sums[(size_t)k * 2 * slots + slots + slot];
        partial_w[(size_t)chunk * C + c0 + c] = sw, partial_b[(size_t)chunk * C + c0 + c] = sb;
    }
}
// Writes the input gradient to dinp, or with `accumulate` adds it to dinp (rounded as
// residual_forward rounds); dw, db +=. scratch: row_chunks(N) · 2C floats. cols: the columns
// per block (layernorm_backward_columns; C, the default, is the whole row). Shared memory:
// layernorm_backward_smem(cols), 64·cols bytes, above the default 48 KiB when cols > 768.
void layernorm_backward_fused(floatX* dinp, float* dw, float* db, float* scratch, const floatX* dout,
                              const floatX* inp, const floatX* w, const float* mean, const float* rstd, int N, int C,
                              bool accumulate, int cols = 0) {
    if (cols <= 0 || cols > C) cols = C;
    const size_t smem = layernorm_backward_smem(cols);
    if (smem > (48 << 10))  // GPT-2 124M's C=768 fits the default exactly
        CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_fused_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
    int chunks = row_chunks(N);
    float *partial_w = scratch, *partial_b = scratch + (size_t)chunks * C;
    const dim3 grid(chunks, (C + cols - 1) / cols);
    layernorm_backward_fused_kernel<<<grid, THREADS, smem, ctx.stream>>>(dinp, partial_w, partial_b, dout, inp, w, mean,
                                                                        rstd, N, C, cols, accumulate);
    KERNEL_CHECK();
    sum_partials_add(dw, partial_w, chunks, C);
    sum_partials_add(db, partial_b, chunks, C);
}

}  // namespace gpu
