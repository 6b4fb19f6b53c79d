// gpu/adamw.cuh: the optimizer: AdamW, and the global gradient norm that clipping needs.
// FLOPs and bytes: host/kernel_cost.h (adamw_cost, global_norm_cost).
#pragma once
#include "../host/checkpoint.h"
#include "../host/comm.h"
#include "../host/trainer.h"
#include "common.cuh"

namespace gpu {

// AdamW with bias correction, element-wise, in float32: inv_bc1 = 1/(1 - β1^t),
// inv_bc2 = 1/(1 - β2^t); wd = 0 for tensors that do not decay. Multiplies by 1/bc as
// train.cpp's adamw_update does, so both round the bias correction the same way. With
// p_x, also writes the updated weight as the kernels read it (floatX): the cast to bf16
// happens once per step, here.
__global__ void adamw_kernel(float* p, floatX* p_x, const float* g, float* m, float* v, size_t n, float lr,
                             float beta1, float beta2, float eps, float wd, float inv_bc1, float inv_bc2,
                             float grad_scale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float grad = g[i] * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * grad;
    float vi = beta2 * v[i] + (1.0f - beta2) * grad * grad;
    m[i] = mi, v[i] = vi;
    float mhat = mi * inv_bc1, vhat = vi * inv_bc2;
    float pi = p[i] - lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
    p[i] = pi;
    if (p_x) p_x[i] = floatX(pi);
}
// One update of the parameters in `shard` (host/comm.h; default: all of them); t is the
// 1-based update count. Gradients are multiplied by grad_scale as they are read: that is how
// clipping is applied. params, m and v hold the shard (indexed from its start); params_x,
// the floatX copy to refresh (null when the kernels read params itself, fp32), and grads
// hold every parameter, in file order.
void adamw_update(float* params, floatX* params_x, const float* grads, float* m, float* v, const ModelConfig& cfg,
                  const AdamWConfig& h, float lr, int t, float grad_scale = 1.0f, Shard shard = {}) {
    float bc1 = 1.0f - powf(h.beta1, (float)t), bc2 = 1.0f - powf(h.beta2, (float)t);
    float inv_bc1 = 1.0f / bc1, inv_bc2 = 1.0f / bc2;
    if (!shard.padded) shard = Shard::of(cfg.num_params(), 0, 1, false);
    std::vector<size_t> sizes = cfg.param_sizes();
    size_t offset = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {  // one launch per tensor: the decay differs
        float wd = param_decays(i) ? h.weight_decay : 0.0f;
        auto [lo, hi] = shard.clip(offset, offset + sizes[i]);
        offset += sizes[i];
        if (lo >= hi) continue;
        const size_t at = lo - shard.begin;  // in the shard's buffers
        adamw_kernel<<<blocks_for(hi - lo), THREADS, 0, ctx.stream>>>(
            params + at, params_x ? params_x + lo : nullptr, grads + lo, m + at, v + at, hi - lo, lr, h.beta1,
            h.beta2, h.eps, wd, inv_bc1, inv_bc2, grad_scale);
        KERNEL_CHECK();
    }
}

// ‖g‖₂ in two fixed passes: a grid that fills the GPU (8 blocks per SM, at most
// MAX_NORM_BLOCKS) each sums a fixed, strided share of the squares in double, then one
// block adds the partial sums. The grid depends only on the GPU model, so the result
// repeats bit for bit on one.
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
// The noise scale's norm of the first micro-batch, by the units of the gradient buffer
// (host/gradsync.h: norm_units): each unit's |g|² by UNIT_BLOCKS blocks, each a fixed strided
// share of its squares in double (unit_squares_kernel, one grid row per unit of a list), then
// its partials added in order (unit_sums_kernel); at the end the units' sum in buffer order
// (sum_in_order_kernel). The grids depend on nothing but the units, so the bits are the same on
// every GPU and however the units were grouped into launches: all at once, or bucket by bucket.
// Cost: reads each gradient once (4 bytes a parameter), 2 FLOPs a parameter.
constexpr int UNIT_BLOCKS = 16;
__global__ void unit_squares_kernel(double* partials, const float* g, const size_t* begin, const size_t* count,
                                    const int* units) {
    const int u = units[blockIdx.y];
    const float* x = g + begin[u];
    double s = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count[u]; i += (size_t)gridDim.x * blockDim.x)
        s += (double)x[i] * x[i];
    s = block_sum(s);
    if (threadIdx.x == 0) partials[(size_t)u * UNIT_BLOCKS + blockIdx.x] = s;
}
__global__ void unit_sums_kernel(double* unit_sq, const double* partials, const int* units, int n) {
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += gridDim.x * blockDim.x) {
        const int u = units[k];
        double s = 0;
        for (int b = 0; b < UNIT_BLOCKS; b++) s += partials[(size_t)u * UNIT_BLOCKS + b];
        unit_sq[u] = s;
    }
}
__global__ void sum_in_order_kernel(double* out, const double* in, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += in[i];
    *out = s;
}
// The units on the device: where each lies, the lists of units measured together, and each
// unit's partial sums and |g|².
struct NormUnitsDevice {
    size_t *begin = nullptr, *count = nullptr;       // (n)
    double *partials = nullptr, *unit_sq = nullptr;  // (n, UNIT_BLOCKS), (n)
    int n = 0;
};
// |g|² of the n units listed at `units` (on the device), into unit_sq; not waited for.
inline void unit_norms_squared(const float* g, const NormUnitsDevice& d, const int* units, int n) {
    if (n == 0) return;
    unit_squares_kernel<<<dim3(UNIT_BLOCKS, n), THREADS, 0, ctx.stream>>>(d.partials, g, d.begin, d.count, units);
    KERNEL_CHECK();
    unit_sums_kernel<<<1, THREADS, 0, ctx.stream>>>(d.unit_sq, d.partials, units, n);
    KERNEL_CHECK();
}
// Σ unit_sq in buffer order into *out, on the device.
inline void units_sum(double* out, const NormUnitsDevice& d) {
    sum_in_order_kernel<<<1, 1, 0, ctx.stream>>>(out, d.unit_sq, d.n);
    KERNEL_CHECK();
}

// Leaves ‖g‖² in *total on the device, without waiting for it. partials: MAX_NORM_BLOCKS doubles.
void global_norm_squared(const float* g, size_t n, double* partials, double* total) {
    int blocks = std::min(MAX_NORM_BLOCKS, 8 * ctx.sms);
    sum_squares_kernel<<<blocks, THREADS, 0, ctx.stream>>>(partials, g, n);
    KERNEL_CHECK();
    sum_doubles_kernel<<<1, 1024, 0, ctx.stream>>>(total, partials, blocks);
    KERNEL_CHECK();
}
// ‖g‖₂, waited for. scratch: MAX_NORM_BLOCKS + 1 doubles.
float global_norm(const float* g, size_t n, double* scratch) {
    global_norm_squared(g, n, scratch, scratch + MAX_NORM_BLOCKS);
    double total;
    CUDA_CHECK(cudaMemcpyAsync(&total, scratch + MAX_NORM_BLOCKS, sizeof total, cudaMemcpyDeviceToHost, ctx.stream));
    synchronize();
    return (float)std::sqrt(total);
}

}  // namespace gpu
