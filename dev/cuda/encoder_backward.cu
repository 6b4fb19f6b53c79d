// dev/cuda/encoder_backward.cu: the token-embedding gradient dwte += Σ dout over the
// positions of each token, deterministic (no atomics), at GPT-2 124M's shape, for uniform
// tokens and for a skewed distribution like text's (one token at 20%).
//   1: train_gpt.cu's kernel: positions grouped by token on the host; one thread per
//      (token, channel) adds its positions in order, the CPU's order (bit-identical to it)
//   2: segmented: each group is cut into segments of SEG positions; one pass sums each
//      segment, a second adds a token's segments in order. Still deterministic, shorter
//      serial chains for frequent tokens, but no longer the CPU's order.
#include "common.h"

constexpr int SEG = 64;

__global__ void segment_sums(float* partial, const floatX* dout, const int* seg_start, const int* position, int C) {
    int s = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sum = 0;
    for (int j = seg_start[s]; j < seg_start[s + 1]; j++) sum += (float)dout[(size_t)position[j] * C + c];
    partial[(size_t)s * C + c] = sum;
}
__global__ void add_segments(float* dwte, const float* partial, const int* group_seg, const int* token, int C) {
    int k = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float* row = dwte + (size_t)token[k] * C;
    float sum = row[c];
    for (int s = group_seg[k]; s < group_seg[k + 1]; s++) sum += partial[(size_t)s * C + c];
    row[c] = sum;
}

static bool run(const char* title, const std::vector<int>& inp, int V, int Vp, int C, Rng& rng) {
    const int BT = (int)inp.size();
    Floats dout = rounded(random_floats((size_t)BT * C, rng));
    std::vector<double> ref((size_t)Vp * C, 0.0);
    for (int p = 0; p < BT; p++)
        for (int c = 0; c < C; c++) ref[(size_t)inp[p] * C + c] += dout[(size_t)p * C + c];

    // version 1's groups, and version 2's segments of them
    std::vector<int> start(BT + 1), token(BT), position(BT);
    auto t0 = std::chrono::steady_clock::now();
    int groups = gpu::TokenGrouper().group(inp.data(), BT, V, start.data(), token.data(), position.data());
    double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::vector<int> seg_start, group_seg;
    for (int k = 0; k < groups; k++) {
        group_seg.push_back((int)seg_start.size());
        for (int j = start[k]; j < start[k + 1]; j += SEG) seg_start.push_back(j);
    }
    group_seg.push_back((int)seg_start.size());
    int segments = (int)seg_start.size();
    seg_start.push_back(BT);
    int largest = 0;
    for (int k = 0; k < groups; k++) largest = std::max(largest, start[k + 1] - start[k]);

    DevArray<floatX> d_dout(to_x(dout));
    DevArray<float> d_dwte((size_t)Vp * C), partial((size_t)segments * C);
    DevArray<int> d_start(start), d_token(token), d_position(position), d_seg_start(seg_start), d_group_seg(group_seg);
    const double bytes = (double)BT * C * sizeof(floatX) + 2.0 * groups * C * 4;
    dim3 block(gpu::THREADS);
    bool ok = true;
    table_header(strf("%s: B·T=%d C=%d, %d distinct tokens, the most frequent %d times; grouping on the host %.2f ms",
                      title, BT, C, groups, largest, host_ms)
                     .c_str());
    auto v1 = [&] {
        gpu::wte_backward_kernel<<<dim3(groups, gpu::blocks_for(C)), block, 0, gpu::ctx.stream>>>(
            d_dwte.ptr(), d_dout.ptr(), d_start.ptr(), d_token.ptr(), d_position.ptr(), C);
        KERNEL_CHECK();
    };
    auto v2 = [&] {
        segment_sums<<<dim3(segments, gpu::blocks_for(C)), block, 0, gpu::ctx.stream>>>(
            partial.ptr(), d_dout.ptr(), d_seg_start.ptr(), d_position.ptr(), C);
        KERNEL_CHECK();
        add_segments<<<dim3(groups, gpu::blocks_for(C)), block, 0, gpu::ctx.stream>>>(
            d_dwte.ptr(), partial.ptr(), d_group_seg.ptr(), d_token.ptr(), C);
        KERNEL_CHECK();
    };
    for (int version = 1; version <= 2; version++) {
        std::function<void()> call = version == 1 ? std::function<void()>(v1) : std::function<void()>(v2);
        CUDA_CHECK(cudaMemset(d_dwte.ptr(), 0, (size_t)Vp * C * sizeof(float)));  // += from zero
        call();
        double err = norm_error(d_dwte.host(), ref);
        const char* name = version == 1 ? "1 production: a thread per (token, channel)" : "2 segments of 64, in order";
        ok &= table_row(name, err, 1e-5, time_ms(call), bytes);
    }
    return ok;
}

int main(int argc, char** argv) {
    return workbench_main("encoder_backward", argc, argv, [] {
        const int B = at_scale(8, 2), T = at_scale(1024, 64), C = at_scale(768, 96), V = at_scale(50257, 1000),
                  Vp = at_scale(50304, 1024);
        Rng rng(5);
        std::vector<int> uniform(B * T), skewed(B * T);
        for (int& t : uniform) t = (int)rng.below(V);
        for (int& t : skewed) t = rng.uniform() < 0.2f ? 220 : (int)rng.below(V);  // 220: GPT-2's " "
        bool ok = run("uniform tokens", uniform, V, Vp, C, rng);
        ok &= run("skewed tokens (one at 20%)", skewed, V, Vp, C, rng);
        return ok;
    });
}
