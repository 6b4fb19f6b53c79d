// dev/cuda/attention_softmax.cu: the causal softmax of attention, in place on the scores
// (B, NH, T, T), and its backward, at GPT-2 124M's shape.
//   forward  0: the kernel before 16-byte accesses: the same passes, one element per access
//            1: train_gpt's kernel, one warp per row: max pass, sum pass, write pass, 16
//               bytes per access (a row of T need not start on a 16-byte boundary); it
//               keeps each row's max and sum
//            1b the same kernel as the backward runs it: from the saved max and sum
//            2: one warp per row, "online" max and sum in one pass (each lane rescales its
//               running sum when its maximum grows), then one pass that writes
//            3: version 0 written with cooperative groups (a tile of 32 per row,
//               cg::reduce): the same order of operations, so the same bits as version 0
//   backward 0: the kernel before 16-byte accesses
//            1: train_gpt's kernel, one warp per row, 16 bytes per access
//            2: version 0 with cooperative groups: the same bits as version 0
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

#include "common.h"

namespace cg = cooperative_groups;

// Version 2. Combining two (max, sum) pairs: m = max(m1, m2), s = s1·e^(m1-m) + s2·e^(m2-m).
__global__ void causal_softmax_online(floatX* att, int rows, int T) {
    int r = blockIdx.x * gpu::ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= rows) return;
    int t = r % T;
    floatX* a = att + (size_t)r * T;
    float m = -INFINITY, s = 0;
    for (int t2 = lane; t2 <= t; t2 += 32) {
        float x = (float)a[t2];
        if (x > m) s = s * expf(m - x) + 1.0f, m = x;
        else s += expf(x - m);
    }
    for (int offset = 16; offset > 0; offset /= 2) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, offset), s2 = __shfl_xor_sync(0xffffffffu, s, offset);
        float mm = fmaxf(m, m2);
        // a lane without columns has m = -inf and s = 0: its term must vanish, not become NaN
        s = (m == -INFINITY ? 0.0f : s * expf(m - mm)) + (m2 == -INFINITY ? 0.0f : s2 * expf(m2 - mm));
        m = mm;
    }
    for (int t2 = lane; t2 < T; t2 += 32) a[t2] = floatX(t2 <= t ? expf((float)a[t2] - m) / s : 0.0f);
}

// Version 0 of the forward and the backward: train_gpt's kernels before 16-byte accesses.
__global__ void causal_softmax_scalar(floatX* att, float* row_max, float* row_sum, int rows, int T) {
    int r = blockIdx.x * gpu::ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= rows) return;
    int t = r % T;
    floatX* a = att + (size_t)r * T;
    float maxv = -INFINITY;
    for (int t2 = lane; t2 <= t; t2 += 32) maxv = fmaxf(maxv, (float)a[t2]);
    maxv = gpu::warp_max(maxv);
    float sum = 0;
    for (int t2 = lane; t2 <= t; t2 += 32) sum += expf((float)a[t2] - maxv);
    sum = gpu::warp_sum(sum);
    if (lane == 0) row_max[r] = maxv, row_sum[r] = sum;
    for (int t2 = lane; t2 <= t; t2 += 32) a[t2] = floatX(expf((float)a[t2] - maxv) / sum);
    for (int t2 = t + 1 + lane; t2 < T; t2 += 32) a[t2] = floatX(0.0f);
}
__global__ void causal_softmax_backward_scalar(floatX* datt, const floatX* att, int rows, int T, float scale) {
    int r = blockIdx.x * gpu::ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= rows) return;
    int t = r % T;
    const floatX* a = att + (size_t)r * T;
    floatX* d = datt + (size_t)r * T;
    float dot = 0;
    for (int t2 = lane; t2 <= t; t2 += 32) dot += (float)a[t2] * (float)d[t2];
    dot = gpu::warp_sum(dot);
    for (int t2 = lane; t2 <= t; t2 += 32) d[t2] = floatX((float)a[t2] * ((float)d[t2] - dot) * scale);
    for (int t2 = t + 1 + lane; t2 < T; t2 += 32) d[t2] = floatX(0.0f);
}

// Version 3: the row is the tile's place among the block's tiles. cg::reduce adds as
// gpu::warp_sum does (out = op(out, shfl_xor(out, m)), m = 16 ... 1), and greater<float> is
// fmaxf on numbers, so the bits are version 0's.
__global__ void causal_softmax_cg(floatX* att, int rows, int T) {
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(cg::this_thread_block());
    int r = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank(), lane = warp.thread_rank();
    if (r >= rows) return;  // whole tiles leave together
    int t = r % T;
    floatX* a = att + (size_t)r * T;
    float maxv = -INFINITY;
    for (int t2 = lane; t2 <= t; t2 += 32) maxv = fmaxf(maxv, (float)__ldg(a + t2));
    maxv = cg::reduce(warp, maxv, cg::greater<float>());
    float sum = 0;
    for (int t2 = lane; t2 <= t; t2 += 32) sum += expf((float)__ldg(a + t2) - maxv);
    sum = cg::reduce(warp, sum, cg::plus<float>());
    for (int t2 = lane; t2 <= t; t2 += 32) a[t2] = floatX(expf((float)a[t2] - maxv) / sum);
    for (int t2 = t + 1 + lane; t2 < T; t2 += 32) __stcs(a + t2, floatX(0.0f));
}

// Backward version 2: dS = P ⊙ (dP - Σ P·dP) · scale, the dot product by cg::reduce
__global__ void causal_softmax_backward_cg(floatX* datt, const floatX* att, int rows, int T, float scale) {
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(cg::this_thread_block());
    int r = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank(), lane = warp.thread_rank();
    if (r >= rows) return;
    int t = r % T;
    const floatX* a = att + (size_t)r * T;
    floatX* d = datt + (size_t)r * T;
    float dot = 0;
    for (int t2 = lane; t2 <= t; t2 += 32) dot += (float)__ldg(a + t2) * (float)d[t2];
    dot = cg::reduce(warp, dot, cg::plus<float>());
    for (int t2 = lane; t2 <= t; t2 += 32) d[t2] = floatX((float)__ldg(a + t2) * ((float)d[t2] - dot) * scale);
    for (int t2 = t + 1 + lane; t2 < T; t2 += 32) d[t2] = floatX(0.0f);
}

int main(int argc, char** argv) {
    return workbench_main("attention_softmax", argc, argv, [] {
        const int B = 2, NH = at_scale(12, 2), T = at_scale(1024, 100), rows = B * NH * T;
        const size_t n = (size_t)rows * T;
        const float scale = 1.0f / sqrtf(64.0f);
        Rng rng(2);
        Floats scores = rounded(random_floats(n, rng, 2.0)), datt = rounded(random_floats(n, rng));

        // CPU reference, in double: probabilities P, and dS = P ⊙ (dP - Σ P·dP) · scale
        std::vector<double> P(n), dS(n);
        Floats P_float(n);  // the backward's input, as the forward stores it
        for (int r = 0; r < rows; r++) {
            int t = r % T;
            const float* x = &scores[(size_t)r * T];
            double m = -INFINITY, sum = 0, dot = 0;
            for (int t2 = 0; t2 <= t; t2++) m = std::max(m, (double)x[t2]);
            for (int t2 = 0; t2 <= t; t2++) sum += std::exp(x[t2] - m);
            for (int t2 = 0; t2 < T; t2++) {
                P[(size_t)r * T + t2] = t2 <= t ? std::exp(x[t2] - m) / sum : 0.0;
                P_float[(size_t)r * T + t2] = (float)floatX((float)P[(size_t)r * T + t2]);
            }
            for (int t2 = 0; t2 <= t; t2++) dot += P_float[(size_t)r * T + t2] * (double)datt[(size_t)r * T + t2];
            for (int t2 = 0; t2 < T; t2++) {
                size_t i = (size_t)r * T + t2;
                dS[i] = t2 <= t ? P_float[i] * (datt[i] - dot) * scale : 0.0;
            }
        }

        DevArray<floatX> d_att(n), d_P(to_x(P_float)), d_datt(n);
        DevArray<float> d_max(rows), d_sum(rows);
        const double bytes = 2.0 * n * sizeof(floatX);  // read and write every element once
        const double fwd_tol = tol(1e-5, 3e-3), bwd_tol = tol(1e-5, 3e-3);  // bf16: one rounding of each output
        bool ok = true;
        unsigned grid = gpu::blocks_for(rows, gpu::ROWS_PER_BLOCK);

        table_header(strf("causal softmax forward, B=%d NH=%d T=%d, in place (tolerance %g)", B, NH, T, fwd_tol).c_str());
        // timed calls work on the previous call's output: still valid inputs, same cost
        auto v0 = [&] {
            causal_softmax_scalar<<<grid, gpu::THREADS, 0, gpu::ctx.stream>>>(d_att.ptr(), d_max.ptr(), d_sum.ptr(),
                                                                             rows, T);
            KERNEL_CHECK();
        };
        d_att.set(to_x(scores));
        v0();
        std::vector<floatX> forward0 = d_att.host();  // before the timed calls, which change d_att
        double err = norm_error(forward0, P);
        ok &= table_row("0 before: one element per access", err, fwd_tol, time_ms(v0), bytes);
        auto v1 = [&] {
            gpu::causal_softmax_kernel<<<grid, gpu::THREADS, 0, gpu::ctx.stream>>>(d_att.ptr(), d_max.ptr(),
                                                                                  d_sum.ptr(), nullptr, nullptr, rows, T);
            KERNEL_CHECK();
        };
        d_att.set(to_x(scores));
        v1();
        std::vector<floatX> forward = d_att.host();  // before the timed calls, which change d_att
        ok &= table_row("1 production: 3 passes, 16 bytes", norm_error(forward, P), fwd_tol, time_ms(v1), bytes);
        d_att.set(to_x(scores));
        v1();  // the statistics of the scores themselves, not of the timed calls' outputs
        auto v1b = [&] {
            gpu::causal_softmax_kernel<<<grid, gpu::THREADS, 0, gpu::ctx.stream>>>(d_att.ptr(), nullptr, nullptr,
                                                                                  d_max.ptr(), d_sum.ptr(), rows, T);
            KERNEL_CHECK();
        };
        d_att.set(to_x(scores));
        v1b();
        bool same = d_att.host() == forward;  // the backward's recomputation gives the forward's bits
        err = same ? norm_error(d_att.host(), P) : NAN;
        ok &= table_row("1b production, recomputed from max and sum", err, fwd_tol, time_ms(v1b), bytes);
        auto v2 = [&] {
            causal_softmax_online<<<grid, gpu::THREADS, 0, gpu::ctx.stream>>>(d_att.ptr(), rows, T);
            KERNEL_CHECK();
        };
        d_att.set(to_x(scores));
        v2();
        err = norm_error(d_att.host(), P);
        ok &= table_row("2 online max and sum, one write pass", err, fwd_tol, time_ms(v2), bytes);
        auto v3 = [&] {
            causal_softmax_cg<<<grid, gpu::THREADS, 0, gpu::ctx.stream>>>(d_att.ptr(), rows, T);
            KERNEL_CHECK();
        };
        d_att.set(to_x(scores));
        v3();
        same = d_att.host() == forward0;  // version 0's order of operations: version 0's bits
        err = same ? norm_error(d_att.host(), P) : NAN;
        ok &= table_row("3 cooperative groups (= 0's bits)", err, fwd_tol, time_ms(v3), bytes);

        table_header(strf("causal softmax backward (tolerance %g)", bwd_tol).c_str());
        auto b0 = [&] {
            causal_softmax_backward_scalar<<<grid, gpu::THREADS, 0, gpu::ctx.stream>>>(d_datt.ptr(), d_P.ptr(), rows,
                                                                                      T, scale);
            KERNEL_CHECK();
        };
        d_datt.set(to_x(datt));
        b0();
        err = norm_error(d_datt.host(), dS);
        ok &= table_row("0 before: one element per access", err, bwd_tol, time_ms(b0), 3.0 * n * sizeof(floatX));
        auto b1 = [&] {
            gpu::causal_softmax_backward_kernel<<<grid, gpu::THREADS, 0, gpu::ctx.stream>>>(d_datt.ptr(), d_P.ptr(),
                                                                                           rows, T, scale);
            KERNEL_CHECK();
        };
        d_datt.set(to_x(datt));
        b1();
        err = norm_error(d_datt.host(), dS);
        ok &= table_row("1 production: warp per row, 16 bytes", err, bwd_tol, time_ms(b1), 3.0 * n * sizeof(floatX));
        d_datt.set(to_x(datt));
        b0();  // version 0's output again: the timed calls changed d_datt
        std::vector<floatX> backward = d_datt.host();
        auto b2 = [&] {
            causal_softmax_backward_cg<<<grid, gpu::THREADS, 0, gpu::ctx.stream>>>(d_datt.ptr(), d_P.ptr(), rows, T,
                                                                                 scale);
            KERNEL_CHECK();
        };
        d_datt.set(to_x(datt));
        b2();
        err = d_datt.host() == backward ? norm_error(d_datt.host(), dS) : NAN;
        ok &= table_row("2 cooperative groups (= 0's bits)", err, bwd_tol, time_ms(b2), 3.0 * n * sizeof(floatX));
        return ok;
    });
}
