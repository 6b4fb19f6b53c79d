// gpu/crossentropy.cuh: softmax over the vocabulary and the cross-entropy loss, fused with
// its backward; and the mean loss.
#pragma once
#include "common.cuh"

namespace gpu {

// Softmax over the first V of Vp logits and cross-entropy against the targets, fused with
// its backward: one block per row (position), in float32. losses (N); with `backward` the
// logits are overwritten by their gradient, (probs - onehot(target))·dloss, 0 in the padded
// columns, so neither the probabilities nor a separate gradient buffer is ever stored.
// Two kernels do this; crossentropy_forward_backward picks one (CrossEntropyPath).
//
// The fused kernel (the trainer's): two passes over the row.
//   1. max and sum of exponentials together, "online": each thread keeps a running (m, s)
//      and rescales s when m grows; the pairs then combine over the block (block_max_sum).
//   2. the gradient, written in place, going through the row's chunks (blockDim packs each)
//      from the last to the first: the chunks pass 1 read last are the likeliest to be still
//      in L2. With 1024 threads two rows per SM are in flight: 264 rows of 100 KB on an H100
//      (GPT-2's Vp = 50304 in bf16), 26 MB, inside its 50 MB L2, so pass 2 reads from L2.
// Cost per row (host/kernel_cost.h, crossentropy_cost): V + Vp elements read, Vp written
// (DRAM: the row once each way when pass 2 hits L2), about 10 FLOPs per element (exp as one).
// 16-byte accesses (for_row_pieces, for_row_pieces_reverse: a row of Vp elements need not
// start on a 16-byte boundary).
//
// The three-pass kernel (the reference, CrossEntropyPath::three_pass): a max pass, a sum pass
// (in double, as on the CPU) and the gradient pass: the row read three times, written once.
constexpr int CE_THREADS = 512;         // the three-pass kernel
constexpr int CE_FUSED_THREADS = 1024;  // the fused kernel: fewer rows in flight, see above
enum class CrossEntropyPath { fused, three_pass };

// for_row_pieces' pieces, each thread's in the reverse order, the last pieces of the row first
template <class T, class F>
__device__ inline void for_row_pieces_reverse(const T* x, int n, int lane, int lanes, F f) {
    constexpr int N = pack_size<T>();
    const int head = min(n, (int)((16 - reinterpret_cast<uintptr_t>(x) % 16) % 16 / sizeof(T)));
    const int packs = (n - head) / N, tail = head + packs * N;
    for (int i = n - 1 - lane; i >= tail; i -= lanes) f(i, 1);
    for (int j = packs - 1 - lane; j >= 0; j -= lanes) f(head + j * N, N);
    for (int i = head - 1 - lane; i >= 0; i -= lanes) f(i, 1);
}

// (m, s) += (m2, s2): the running maximum and the sum of exponentials relative to it
__device__ inline void combine_max_sum(float& m, float& s, float m2, float s2) {
    float mm = fmaxf(m, m2);
    s = (m == -INFINITY ? 0.0f : s * expf(m - mm)) + (m2 == -INFINITY ? 0.0f : s2 * expf(m2 - mm));
    m = mm;
}
__device__ inline void warp_max_sum(float& m, float& s) {
    for (int offset = 16; offset > 0; offset /= 2)
        combine_max_sum(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
}
// Every thread receives the block's (m, s); in a fixed order, as block_sum.
__device__ inline void block_max_sum(float& m, float& s) {
    __shared__ float part_m[32], part_s[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    warp_max_sum(m, s);
    __syncthreads();
    if (lane == 0) part_m[warp] = m, part_s[warp] = s;
    __syncthreads();
    m = lane < warps ? part_m[lane] : -INFINITY, s = lane < warps ? part_s[lane] : 0.0f;
    warp_max_sum(m, s);
}

__global__ void __launch_bounds__(CE_FUSED_THREADS)
    crossentropy_fused_kernel(float* losses, floatX* logits, const int* targets, int V, int Vp, float dloss,
                              bool backward) {
    int n = blockIdx.x;
    floatX* x = logits + (size_t)n * Vp;
    int target = targets[n];
    // read before any thread overwrites the row: the barriers in block_max_sum keep every
    // thread's reads before any thread's writes
    float target_logit = (float)x[target];
    float m = -INFINITY, s = 0.0f;
    for_row_pieces(x, V, threadIdx.x, blockDim.x, [&](int i, int count) {
        Pack<floatX> v = load_part(x + i, count);
        float pm = -INFINITY;
        for (int k = 0; k < count; k++) pm = fmaxf(pm, (float)v.v[k]);
        float ps = 0.0f;
        for (int k = 0; k < count; k++) ps += expf((float)v.v[k] - pm);
        combine_max_sum(m, s, pm, ps);
    });
    block_max_sum(m, s);
    // log-sum-exp form: exact even when the target's probability underflows; m - target_logit
    // first, exact for neighbours, so logits far from 0 (±1e30) keep the loss's digits
    if (threadIdx.x == 0) losses[n] = (m - target_logit) + logf(s);
    if (!backward) return;
    float scale = dloss / s;
    // each thread rewrites only the pieces it alone reads in this pass
    for_row_pieces_reverse(x, Vp, threadIdx.x, blockDim.x, [&](int i, int count) {
        Pack<floatX> v = load_part(x + i, count), g;
        for (int k = 0; k < count; k++) {
            float gk = i + k < V ? expf((float)v.v[k] - m) * scale : 0.0f;
            if (i + k == target) gk -= dloss;
            g.v[k] = floatX(gk);
        }
        store_part(x + i, count, g);
    });
}

__global__ void crossentropy_three_pass_kernel(float* losses, floatX* logits, const int* targets, int V, int Vp,
                                               float dloss, bool backward) {
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
                                   int Vp, bool backward, CrossEntropyPath path = CrossEntropyPath::fused) {
    int most = path == CrossEntropyPath::fused ? CE_FUSED_THREADS : CE_THREADS;
    int threads = std::min(most, (V + 31) / 32 * 32);  // a small vocabulary leaves none idle
    if (path == CrossEntropyPath::fused)
        crossentropy_fused_kernel<<<N, threads, 0, ctx.stream>>>(losses, logits, targets, V, Vp, dloss, backward);
    else
        crossentropy_three_pass_kernel<<<N, threads, 0, ctx.stream>>>(losses, logits, targets, V, Vp, dloss,
                                                                      backward);
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
