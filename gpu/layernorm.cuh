// gpu/layernorm.cuh: LayerNorm over C for each of N rows, forward and backward. The
// statistics and every sum are float32 in both precisions.
#pragma once
#include "common.cuh"

namespace gpu {

// One warp per row.
__global__ void layernorm_forward_kernel(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w,
                                         const floatX* bias, int N, int C) {
    int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return;  // the whole warp leaves together
    const floatX* x = inp + (size_t)n * C;
    float sum = 0;
    for (int c = lane; c < C; c += 32) sum += (float)x[c];
    float m = warp_sum(sum) / C;
    float var = 0;
    for (int c = lane; c < C; c += 32) var += ((float)x[c] - m) * ((float)x[c] - m);
    float s = 1.0f / sqrtf(warp_sum(var) / C + 1e-5f);
    floatX* o = out + (size_t)n * C;
    for (int c = lane; c < C; c += 32) o[c] = floatX(((float)x[c] - m) * s * (float)w[c] + (float)bias[c]);
    if (lane == 0) mean[n] = m, rstd[n] = s;
}
void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w, const floatX* bias,
                       int N, int C) {
    layernorm_forward_kernel<<<blocks_for(N, ROWS_PER_BLOCK), THREADS, 0, ctx.stream>>>(out, mean, rstd, inp, w,
                                                                                          bias, N, C);
    KERNEL_CHECK();
}
// dinp = rstd · (g - mean(g) - xhat · mean(g · xhat)), g = dout · w; one warp per row
__global__ void layernorm_backward_kernel(floatX* dinp, const floatX* dout, const floatX* inp, const floatX* w,
                                          const float* mean, const float* rstd, int N, int C) {
    int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return;
    const floatX* x = inp + (size_t)n * C;
    const floatX* d = dout + (size_t)n * C;
    float m = mean[n], s = rstd[n], g_sum = 0, gx_sum = 0;
    for (int c = lane; c < C; c += 32) {
        float g = (float)d[c] * (float)w[c];
        g_sum += g;
        gx_sum += g * ((float)x[c] - m) * s;
    }
    float g_mean = warp_sum(g_sum) / C, gx_mean = warp_sum(gx_sum) / C;
    floatX* dx = dinp + (size_t)n * C;
    for (int c = lane; c < C; c += 32)
        dx[c] = floatX(s * ((float)d[c] * (float)w[c] - g_mean - ((float)x[c] - m) * s * gx_mean));
}
// First pass of dw[c] += Σ_n dout·xhat and db[c] += Σ_n dout: per chunk of rows
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
// Overwrites dinp; dw, db (float32 parameter gradients) +=. scratch: row_chunks(N) · 2C floats
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

}  // namespace gpu
