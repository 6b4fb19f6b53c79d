// dev/cuda/crossentropy.cu: softmax + cross-entropy over the padded vocabulary, fused with
// its backward (the logits overwritten by their gradient), at GPT-2's vocabulary.
//   0: the kernel before 16-byte accesses: the same passes, one element per access
//   1: train_gpt's kernel (gpu::CrossEntropyPath::fused): version 2's online pass with 16-byte
//      accesses, 1024 threads, then the gradient pass from the row's last chunk to its first,
//      so that it finds in L2 what the first pass read last
//   2: a block per row; max and sum in one "online" pass (float), then the gradient pass:
//      one read of the logits fewer
//   3: version 2 with cooperative groups: the (max, sum) pairs combine by cg::reduce with a
//      function of their own, in version 2's order, so with its bits
//   4: the reference (gpu::CrossEntropyPath::three_pass), train_gpt's kernel before version 1:
//      a block per row; max pass, sum pass (double), gradient pass, 16 bytes per access
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

#include "common.h"

namespace cg = cooperative_groups;

// Version 2. A thread keeps a running (max, sum) pair and rescales the sum when the max
// grows; pairs combine as m = max(m1, m2), s = s1·e^(m1-m) + s2·e^(m2-m).
__device__ inline void combine(float& m, float& s, float m2, float s2) {
    float mm = fmaxf(m, m2);
    s = (m == -INFINITY ? 0.0f : s * expf(m - mm)) + (m2 == -INFINITY ? 0.0f : s2 * expf(m2 - mm));
    m = mm;
}
__global__ void crossentropy_online(float* losses, floatX* logits, const int* targets, int V, int Vp, float dloss) {
    int n = blockIdx.x;
    floatX* x = logits + (size_t)n * Vp;
    int target = targets[n];
    float target_logit = (float)x[target];  // before the barrier below, after which the row is overwritten
    float m = -INFINITY, s = 0;
    for (int i = threadIdx.x; i < V; i += blockDim.x) combine(m, s, (float)x[i], 1.0f);
    for (int offset = 16; offset > 0; offset /= 2)
        combine(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
    __shared__ float warp_m[32], warp_s[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    if (lane == 0) warp_m[warp] = m, warp_s[warp] = s;
    __syncthreads();
    m = lane < warps ? warp_m[lane] : -INFINITY, s = lane < warps ? warp_s[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2)
        combine(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
    if (threadIdx.x == 0) losses[n] = m + logf(s) - target_logit;
    float inv_sum = 1.0f / s;
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
        float g = i < V ? expf((float)x[i] - m) * inv_sum * dloss : 0.0f;
        if (i == target) g -= dloss;
        x[i] = floatX(g);
    }
}

// Version 0: train_gpt's kernel before it moved 16 bytes at a time.
__global__ void crossentropy_scalar(float* losses, floatX* logits, const int* targets, int V, int Vp, float dloss) {
    int n = blockIdx.x;
    floatX* x = logits + (size_t)n * Vp;
    int target = targets[n];
    float target_logit = (float)x[target];
    float maxv = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) maxv = fmaxf(maxv, (float)x[i]);
    maxv = gpu::block_max(maxv);
    double sum = 0;
    for (int i = threadIdx.x; i < V; i += blockDim.x) sum += expf((float)x[i] - maxv);
    sum = gpu::block_sum(sum);
    if (threadIdx.x == 0) losses[n] = (float)(maxv + log(sum) - target_logit);
    float inv_sum = (float)(1.0 / sum);
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
        float g = i < V ? expf((float)x[i] - maxv) * inv_sum * dloss : 0.0f;
        if (i == target) g -= dloss;
        x[i] = floatX(g);
    }
}

// Version 3. cg::reduce combines as version 2's loop does: op(own pair, partner's pair) over
// the xor-butterfly, so the two give the same bits.
struct MaxSum {
    float m, s;
};
__global__ void __launch_bounds__(1024) crossentropy_cg(float* losses, floatX* logits, const int* targets, int V,
                                                        int Vp, float dloss) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int n = blockIdx.x;
    floatX* x = logits + (size_t)n * Vp;  // (plain loads: the kernel overwrites the row)
    int target = __ldg(targets + n);
    float target_logit = (float)x[target];
    MaxSum p{-INFINITY, 0.0f};
    for (int i = block.thread_rank(); i < V; i += block.size()) combine(p.m, p.s, (float)x[i], 1.0f);
    auto pairs = [](MaxSum a, MaxSum b) {
        combine(a.m, a.s, b.m, b.s);
        return a;
    };
    p = cg::reduce(warp, p, pairs);
    __shared__ MaxSum per_warp[32];
    if (warp.thread_rank() == 0) per_warp[warp.meta_group_rank()] = p;
    block.sync();
    p = warp.thread_rank() < warp.meta_group_size() ? per_warp[warp.thread_rank()] : MaxSum{-INFINITY, 0.0f};
    p = cg::reduce(warp, p, pairs);
    if (block.thread_rank() == 0) losses[n] = p.m + logf(p.s) - target_logit;
    float inv_sum = 1.0f / p.s;
    for (int i = block.thread_rank(); i < Vp; i += block.size()) {
        float g = i < V ? expf((float)x[i] - p.m) * inv_sum * dloss : 0.0f;
        if (i == target) g -= dloss;
        x[i] = floatX(g);
    }
}

int main(int argc, char** argv) {
    return workbench_main("crossentropy", argc, argv, [] {
        const int N = at_scale(1024, 8), V = 50257, Vp = 50304;  // N rows (B·T) of GPT-2's vocabulary
        const float dloss = 1.0f / N;
        Rng rng(3);
        Floats logits = rounded(random_floats((size_t)N * Vp, rng, 3.0));
        std::vector<int> targets(N);
        for (int& t : targets) t = (int)rng.below(V);

        // CPU reference, in double
        std::vector<double> losses(N), dlogits((size_t)N * Vp);
        for (int n = 0; n < N; n++) {
            const float* x = &logits[(size_t)n * Vp];
            double m = -INFINITY, sum = 0;
            for (int i = 0; i < V; i++) m = std::max(m, (double)x[i]);
            for (int i = 0; i < V; i++) sum += std::exp(x[i] - m);
            losses[n] = m + std::log(sum) - x[targets[n]];
            for (int i = 0; i < Vp; i++)
                dlogits[(size_t)n * Vp + i] = (i < V ? std::exp(x[i] - m) / sum : 0.0) * dloss -
                                              (i == targets[n] ? dloss : 0.0);
        }

        DevArray<floatX> d_logits(to_x(logits));
        DevArray<float> d_losses(N);
        DevArray<int> d_targets(targets);
        const double bytes = 2.0 * N * Vp * sizeof(floatX);  // read the logits once, write the gradient once
        const double tolerance = tol(1e-5, 3e-3);  // bf16: the gradient rounded once; the loss stays float32
        bool ok = true;
        // run once from the logits and compare; timed calls then work on gradients, still valid inputs
        auto checked = [&](const std::function<void()>& f) {
            d_logits.set(to_x(logits)), d_losses.poison();
            f();
            return std::max(norm_error(d_losses.host(), losses), norm_error(d_logits.host(), dlogits));
        };

        table_header(strf("fused softmax + cross-entropy + backward, in place, N=%d V=%d Vp=%d (tolerance %g)", N, V,
                          Vp, tolerance)
                         .c_str());
        auto v0 = [&] {
            crossentropy_scalar<<<N, gpu::CE_THREADS, 0, gpu::ctx.stream>>>(d_losses.ptr(), d_logits.ptr(),
                                                                           d_targets.ptr(), V, Vp, dloss);
            KERNEL_CHECK();
        };
        double err = checked(v0);
        ok &= table_row("0 before: one element per access", err, tolerance, time_ms(v0), bytes);
        auto v1 = [&] {
            gpu::crossentropy_forward_backward(d_losses.ptr(), d_logits.ptr(), d_targets.ptr(), dloss, N, V, Vp, true,
                                               gpu::CrossEntropyPath::fused);
        };
        err = checked(v1);
        ok &= table_row("1 production: online, reversed gradient pass", err, tolerance, time_ms(v1), bytes);
        auto v4 = [&] {
            gpu::crossentropy_forward_backward(d_losses.ptr(), d_logits.ptr(), d_targets.ptr(), dloss, N, V, Vp, true,
                                               gpu::CrossEntropyPath::three_pass);
        };
        err = checked(v4);
        ok &= table_row("4 reference: 3 passes, double sum, 16 bytes", err, tolerance, time_ms(v4), bytes);
        for (int threads : {256, 1024}) {
            auto v2 = [&] {
                crossentropy_online<<<N, threads, 0, gpu::ctx.stream>>>(d_losses.ptr(), d_logits.ptr(),
                                                                        d_targets.ptr(), V, Vp, dloss);
                KERNEL_CHECK();
            };
            err = checked(v2);
            std::vector<floatX> grad2 = d_logits.host();  // before the timed calls change them
            std::vector<float> loss2 = d_losses.host();
            ok &= table_row(strf("2 online max+sum, float, %d threads", threads), err, tolerance, time_ms(v2), bytes);
            auto v3 = [&] {
                crossentropy_cg<<<N, threads, 0, gpu::ctx.stream>>>(d_losses.ptr(), d_logits.ptr(), d_targets.ptr(), V,
                                                                    Vp, dloss);
                KERNEL_CHECK();
            };
            err = checked(v3);
            if (!(d_logits.host() == grad2 && d_losses.host() == loss2)) err = NAN;  // version 2's bits, or fail
            ok &= table_row(strf("3 cg::reduce (= 2's bits), %d threads", threads), err, tolerance, time_ms(v3),
                            bytes);
        }
        return ok;
    });
}
