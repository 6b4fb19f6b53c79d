// gpu/crossentropy.cuh: softmax over the vocabulary and the cross-entropy loss, fused with
// its backward; and the mean loss.
#pragma once
#include "common.cuh"

namespace gpu {

// Softmax over the first V of Vp logits and cross-entropy against the targets, fused with
// its backward: one block per row (position), in float32. losses (N); with `backward` the
// logits are overwritten by their gradient, (probs - onehot(target))·dloss, 0 in the padded
// columns, so neither the probabilities nor a separate gradient buffer is ever stored. The
// sum of exponentials is kept in double, as on the CPU. Rows move 16 bytes at a time
// (for_row_pieces: a row of Vp elements need not start on a 16-byte boundary).
constexpr int CE_THREADS = 512;
__global__ void crossentropy_kernel(float* losses, floatX* logits, const int* targets, int V, int Vp, float dloss,
                                    bool backward) {
    int n = blockIdx.x;
    floatX* x = logits + (size_t)n * Vp;
    int target = targets[n];
    // read before any thread overwrites the row: the barriers in block_max and block_sum
    // keep every thread's reads before any thread's writes
    float target_logit = (float)x[target];
    float maxv = -INFINITY;
    for_row_pieces(x, V, threadIdx.x, blockDim.x, [&](int i, int count) {
        Pack<floatX> v = load_part(x + i, count);
        for (int k = 0; k < count; k++) maxv = fmaxf(maxv, (float)v.v[k]);
    });
    maxv = block_max(maxv);
    double sum = 0;
    for_row_pieces(x, V, threadIdx.x, blockDim.x, [&](int i, int count) {
        Pack<floatX> v = load_part(x + i, count);
        for (int k = 0; k < count; k++) sum += expf((float)v.v[k] - maxv);
    });
    sum = block_sum(sum);
    // log-sum-exp form: exact even when the target's probability underflows
    if (threadIdx.x == 0) losses[n] = (float)(maxv + log(sum) - target_logit);
    if (!backward) return;
    float inv_sum = (float)(1.0 / sum);
    // each thread rewrites only the pieces it alone reads in this pass
    for_row_pieces(x, Vp, threadIdx.x, blockDim.x, [&](int i, int count) {
        Pack<floatX> v = load_part(x + i, count), g;
        for (int k = 0; k < count; k++) {
            float gk = i + k < V ? expf((float)v.v[k] - maxv) * inv_sum * dloss : 0.0f;
            if (i + k == target) gk -= dloss;
            g.v[k] = floatX(gk);
        }
        store_part(x + i, count, g);
    });
}
// without `backward`, the loss only (evaluation), and the logits stay
void crossentropy_forward_backward(float* losses, floatX* logits, const int* targets, float dloss, int N, int V,
                                   int Vp, bool backward) {
    int threads = std::min(CE_THREADS, (V + 31) / 32 * 32);  // a small vocabulary leaves none idle
    crossentropy_kernel<<<N, threads, 0, ctx.stream>>>(losses, logits, targets, V, Vp, dloss, backward);
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

}  // namespace gpu
