// dev/cuda/attention_fused.cu: one layer's causal attention, forward and backward, on the
// two paths the trainer can take (--attention), at GPT-2 124M's shape (B=64 needs ~4 GB
// of (B,NH,T,T) scratch on the cuBLAS path; the workbench runs B=8 of it by default).
//   1: cuBLAS path (gpu/attention.cuh): permutes, strided-batched products, softmax
//      kernels over (B,NH,T,T) scores and probabilities
//   2: fused path (gpu/flash_attention.cuh): online softmax, saved log-sum-exp; in bf16 the
//      tensor-core kernels (gpu/flash_attention_mma.cuh: mma.sync, tiles in registers),
//      whose backward at hs = 64 and 128 is the five-product one (gpu/flash_attention_bwd5.cuh)
//   2b: the same with the three-kernel tensor-core backward (7 products per pair)
//   3: the fused path's scalar kernels (float32 FMAs over tiles in shared memory): the fp32
//      build's path, and the reference the tensor-core kernels are checked against
// Checked against a float64 reference on batch row 0 (all heads), computed here. The GB/s
// column counts the bytes either path must move at least (q, k, v, y, dy, dqkv once each),
// so the two rows compare time for the same work; the attention FLOPs are printed too.
#include "common.h"

// y = softmax(q·kᵀ/√hs, causal)·v and its gradients, in float64, for batch row b = 0.
struct Reference {
    std::vector<double> y, dqkv;  // (T, C) and (T, 3C)
};
static Reference reference(const Floats& qkv, const Floats& dout, int T, int C, int NH) {
    const int hs = C / NH;
    const double scale = 1.0 / std::sqrt((double)hs);
    Reference r{std::vector<double>((size_t)T * C, 0.0), std::vector<double>((size_t)T * 3 * C, 0.0)};
    auto q = [&](int t, int h, int d) { return (double)qkv[(size_t)t * 3 * C + h * hs + d]; };
    auto k = [&](int t, int h, int d) { return (double)qkv[(size_t)t * 3 * C + C + h * hs + d]; };
    auto v = [&](int t, int h, int d) { return (double)qkv[(size_t)t * 3 * C + 2 * C + h * hs + d]; };
    for (int h = 0; h < NH; h++)
        for (int t = 0; t < T; t++) {
            std::vector<double> p(t + 1), dp(t + 1);
            double m = -INFINITY, sum = 0, dot = 0;
            for (int u = 0; u <= t; u++) {
                double s = 0;
                for (int d = 0; d < hs; d++) s += q(t, h, d) * k(u, h, d);
                p[u] = s * scale, m = std::max(m, p[u]);
            }
            for (double& x : p) sum += (x = std::exp(x - m));
            for (double& x : p) x /= sum;
            const float* dy = &dout[(size_t)t * C + h * hs];
            for (int u = 0; u <= t; u++) {
                double s = 0;
                for (int d = 0; d < hs; d++) {
                    r.y[(size_t)t * C + h * hs + d] += p[u] * v(u, h, d);
                    r.dqkv[(size_t)u * 3 * C + 2 * C + h * hs + d] += p[u] * dy[d];
                    s += dy[d] * v(u, h, d);
                }
                dp[u] = s, dot += p[u] * s;
            }
            for (int u = 0; u <= t; u++) {
                double ds = p[u] * (dp[u] - dot) * scale;
                for (int d = 0; d < hs; d++) {
                    r.dqkv[(size_t)t * 3 * C + h * hs + d] += ds * k(u, h, d);
                    r.dqkv[(size_t)u * 3 * C + C + h * hs + d] += ds * q(t, h, d);
                }
            }
        }
    return r;
}

int main(int argc, char** argv) {
    return workbench_main("attention_fused", argc, argv, [] {
        const int B = at_scale(8, 2), NH = at_scale(12, 2), T = at_scale(1024, 100), hs = 64, C = NH * hs;
        const size_t n = (size_t)B * T * C, rows = (size_t)B * NH * T, att = rows * T;
        Rng rng(7);
        Floats qkv = rounded(random_floats(3 * n, rng)), dout = rounded(random_floats(n, rng));
        Reference ref = reference(qkv, dout, T, C, NH);  // batch row 0

        DevArray<floatX> d_qkv(to_x(qkv)), d_dout(to_x(dout)), d_y(n), d_dqkv(3 * n);
        DevArray<float> d_stats(2 * rows), d_delta(gpu::flash_backward_scratch_floats(B, T, C, NH));
        DevArray<floatX> qkvr(3 * n), dqkvr(3 * n), yr(n), d_att(att), d_datt(att);
        gpu::AttentionScratch scratch{qkvr.ptr(), dqkvr.ptr(), yr.ptr(), d_att.ptr(), d_datt.ptr()};

        // bf16: y passes P rounded once and is rounded once (8e-3, as gpu_trainer/trainer.cu); the
        // gradients pass P and dS rounded into two products each (1.5e-2)
        const double y_tol = tol(1e-5, 8e-3), g_tol = tol(1e-5, 1.5e-2);
        const double bytes = (4.0 * n + 8.0 * n) * sizeof(floatX);  // fwd: qkv, y; bwd: qkv, y, dy, dqkv
        // causal attention FLOPs of the minimal algorithm: 2 products forward, 5 backward
        // (with the recomputed scores), each 2·B·NH·T²·hs over half the T×T square
        const double flops = 7.0 * 2.0 * B * NH * (double)T * T * hs / 2;
        auto check = [&](const char* name, const std::function<void()>& layer) {
            d_y.poison(), d_dqkv.poison();
            layer();
            std::vector<floatX> y = d_y.host(), dqkv = d_dqkv.host();
            y.resize((size_t)T * C), dqkv.resize((size_t)T * 3 * C);  // batch row 0
            double ey = norm_error(y, ref.y), eg = norm_error(dqkv, ref.dqkv);
            float ms = time_ms(layer);
            bool ok = table_row(strf("%s, y", name), ey, y_tol, ms, bytes);
            ok &= table_row(strf("%s, dq dk dv", name), eg, g_tol, ms, bytes);
            printf("%-44s %.3g TFLOP/s of the minimal causal FLOPs (%.3g GFLOP)\n", "", flops / (ms * 1e9),
                   flops / 1e9);
            return std::make_pair(ok, ms);
        };
        table_header(strf("causal attention forward + backward, one layer, B=%d NH=%d T=%d hs=%d", B, NH, T, hs).c_str());
        auto cublas = check("1 cuBLAS path", [&] {
            gpu::attention_forward(d_y.ptr(), d_stats.ptr(), d_stats.ptr() + rows, d_qkv.ptr(), scratch, B, T, C, NH, NH);
            gpu::attention_backward(d_dqkv.ptr(), d_dout.ptr(), d_qkv.ptr(), d_stats.ptr(), d_stats.ptr() + rows,
                                    scratch, B, T, C, NH, NH);
        });
        auto fused = check("2 fused path", [&] {
            gpu::flash_attention_forward(d_y.ptr(), d_stats.ptr(), d_qkv.ptr(), B, T, C, NH, NH);
            gpu::flash_attention_backward(d_dqkv.ptr(), d_delta.ptr(), d_dout.ptr(), d_y.ptr(), d_qkv.ptr(),
                                          d_stats.ptr(), B, T, C, NH, NH);
        });
        check("2b fused path, three-kernel backward", [&] {
            gpu::flash_attention_forward(d_y.ptr(), d_stats.ptr(), d_qkv.ptr(), B, T, C, NH, NH);
            gpu::flash_attention_backward(d_dqkv.ptr(), d_delta.ptr(), d_dout.ptr(), d_y.ptr(), d_qkv.ptr(),
                                          d_stats.ptr(), B, T, C, NH, NH, false, true);
        });
        auto scalar = check("3 fused path, scalar kernels", [&] {
            gpu::flash_attention_forward(d_y.ptr(), d_stats.ptr(), d_qkv.ptr(), B, T, C, NH, NH, true);
            gpu::flash_attention_backward(d_dqkv.ptr(), d_delta.ptr(), d_dout.ptr(), d_y.ptr(), d_qkv.ptr(),
                                          d_stats.ptr(), B, T, C, NH, NH, true);
        });
        printf("fused / cuBLAS time per layer: %.2f (below 1: the fused path is faster)\n", fused.second / cublas.second);
        printf("attention memory per layer: cuBLAS path %.1f MB of (B,NH,T,T) scratch and (3+3+1)·B·T·C permuted "
               "copies (%.1f MB), fused path %.1f MB of row statistics\n",
               2.0 * att * sizeof(floatX) / 1e6, 7.0 * n * sizeof(floatX) / 1e6, 2.0 * rows * sizeof(float) / 1e6);
        return cublas.first && fused.first && scalar.first;
    });
}
