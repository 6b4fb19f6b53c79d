// dev/cuda/step_kernels.cu: the GPU trainer's step kernel by kernel, measured with CUDA
// events beside the planner's prediction (host/cost.h's step_kernels and kernel_table, the
// same rows as `--dry-run --device ...` prints), at GPT-2 124M's shape, B=8, T=1024 (--check:
// B=1, T=64). Each row times one launch of the kernel on buffers of the right shapes (random
// values: only the time matters here) and multiplies by the launches per micro-batch.
// The prediction is for the preset of the GPU's name (H100 PCIe, other H100/H200: h100-sxm,
// A100); on the CPU runtime the measured column is CPU-runtime time, not a GPU's.
#include "common.h"

#ifdef CPU_CUDA
constexpr bool CPU_RUNTIME = true;
#else
constexpr bool CPU_RUNTIME = false;
#endif

// The preset for this GPU's name, h100-sxm when none matches.
static DeviceSpeed device_for(const std::string& gpu) {
    if (gpu.find("A100") != std::string::npos) return device_speed("a100-sxm", 0, 0);
    if (gpu.find("H100") != std::string::npos && gpu.find("PCIe") != std::string::npos)
        return device_speed("h100-pcie", 0, 0);
    return device_speed("h100-sxm", 0, 0);
}

int main(int argc, char** argv) {
    return workbench_main("step_kernels", argc, argv, [] {
        ModelConfig c;
        c.L = 12, c.NH = 12, c.C = 768, c.maxT = 1024, c.V = 50257, c.Vp = 50304;
        const int B = at_scale(8, 1), T = at_scale(1024, 64), C = c.C, NH = c.NH, V = c.V, Vp = c.Vp;
        const size_t N = (size_t)B * T, P = c.num_params();
        cudaDeviceProp prop;
        CUDA_CHECK(cudaGetDeviceProperties(&prop, gpu::ctx.device));
        DeviceSpeed d = device_for(prop.name);
        Rng rng(5);
        auto xs = [&](size_t n) { return DevArray<floatX>(to_x(random_floats(n, rng, 0.5))); };
        auto fs = [&](size_t n, double scale = 0.5) { return DevArray<float>(random_floats(n, rng, scale)); };
        // one layer's activations and weights, the head's, and the optimizer's buffers
        DevArray<floatX> x_ = xs(N * C), x2_ = xs(N * C), y_ = xs(N * C), y2_ = xs(N * C), qkv_ = xs(N * 3 * C),
                         dqkv_ = xs(N * 3 * C), fch_ = xs(N * 4 * C), fch_gelu_ = xs(N * 4 * C), logits_(N * Vp),
                         w_ = xs((size_t)4 * C * C), bias_ = xs(4 * C), lnw_ = xs(C), lnb_ = xs(C),
                         wte_ = xs((size_t)Vp * C), wpe_ = xs((size_t)T * C), weights_x_(P);
        // stats_: the lse (N·NH), then the attention backward's scratch
        DevArray<float> mean_ = fs(N), rstd_(Floats(N, 1.0f)),
                        stats_(N * NH + gpu::flash_backward_scratch_floats(B, T, C, NH)), dw_((size_t)4 * C * C),
                        dbias_(4 * C), dlnw_(C), dlnb_(C), dwte_((size_t)Vp * C), dwpe_((size_t)T * C),
                        scratch_((size_t)gpu::row_chunks(N) * 4 * C), losses_(N), params_ = fs(P), grads_ = fs(P),
                        m_ = fs(P, 0.01), v_(Floats(P, 1e-4f));
        DevArray<double> sums_(gpu::MAX_NORM_BLOCKS + 1);
        std::vector<int> tokens(N);
        for (int& t : tokens) t = (int)rng.below(V);
        DevArray<int> tokens_(tokens);
        // the encoder backward's token groups, as the trainer builds them
        gpu::TokenGrouper grouper;
        std::vector<int> start(N + 1), token(N), position(N);
        int groups = grouper.group(tokens.data(), (int)N, V, start.data(), token.data(), position.data());
        DevArray<int> start_(start), token_(token), position_(position);
        const gpu::TokenGroups tg{start_.ptr(), token_.ptr(), position_.ptr(), groups};
        const AdamWConfig opt{0.9f, 0.95f, 1e-8f, 0.1f};
        // raw pointers, which the launches below capture by value
        floatX *x = x_.ptr(), *x2 = x2_.ptr(), *y = y_.ptr(), *y2 = y2_.ptr(), *qkv = qkv_.ptr(), *dqkv = dqkv_.ptr(),
               *fch = fch_.ptr(), *fch_gelu = fch_gelu_.ptr(), *logits = logits_.ptr(), *w = w_.ptr(),
               *bias = bias_.ptr(), *lnw = lnw_.ptr(), *lnb = lnb_.ptr(), *wte = wte_.ptr(), *wpe = wpe_.ptr(),
               *weights_x = std::is_same<floatX, float>::value ? nullptr : weights_x_.ptr();
        float *mean = mean_.ptr(), *rstd = rstd_.ptr(), *stats = stats_.ptr(), *dw = dw_.ptr(), *dbias = dbias_.ptr(),
              *dlnw = dlnw_.ptr(), *dlnb = dlnb_.ptr(), *dwte = dwte_.ptr(), *dwpe = dwpe_.ptr(),
              *scratch = scratch_.ptr(), *losses = losses_.ptr(), *params = params_.ptr(), *grads = grads_.ptr(),
              *m = m_.ptr(), *v = v_.ptr();
        double* sums = sums_.ptr();
        int* d_tokens = tokens_.ptr();

        // a linear layer's (IC, OC) from the planner's kernel name
        auto linear = [&](const std::string& name) -> std::pair<int, int> {
            if (name.rfind("qkv", 0) == 0) return {C, 3 * C};
            if (name.rfind("attproj", 0) == 0) return {C, C};
            if (name.rfind("fcproj", 0) == 0) return {4 * C, C};
            if (name.rfind("fc", 0) == 0) return {C, 4 * C};
            return {C, Vp};  // logits
        };
        // one launch of each kernel the planner lists, by its name there
        auto launch = [&](const StepKernel& k) -> std::function<void()> {
            const std::string& n = k.name;
            const std::pair<int, int> io = linear(n);
            const int IC = io.first, OC = io.second;
            // inputs and outputs of the right sizes: (N, 4C) holds any block's, the logits the head's
            floatX* in = IC == 4 * C ? fch : x;
            floatX* out = OC == Vp ? logits : fch_gelu;
            floatX* dout = OC == Vp ? logits : fch_gelu;
            const floatX* weight = OC == Vp ? wte : w;
            float* weight_grad = OC == Vp ? dwte : dw;
            if (n == "encoder forward") return [=] { gpu::encoder_forward(x, d_tokens, wte, wpe, B, T, C); };
            if (n.rfind("layernorm forward", 0) == 0)
                return [=] { gpu::layernorm_forward(y, mean, rstd, x, lnw, lnb, N, C); };
            if (n == "residual + layernorm forward")
                return [=] { gpu::residual_layernorm_forward(y2, y, mean, rstd, x, x2, lnw, lnb, N, C); };
            if (n == "attention forward") return [=] { gpu::flash_attention_forward(y, stats, qkv, B, T, C, NH, NH); };
            if (n == "attention backward")
                return [=] { gpu::flash_attention_backward(dqkv, stats + N * NH, x, y, qkv, stats, B, T, C, NH, NH); };
            if (n.rfind("fc forward", 0) == 0)
                return [=] { gpu::matmul_gelu_forward(fch_gelu, fch, x, w, bias, N, C, 4 * C, false); };
            if (n.find(" forward") != std::string::npos)  // qkv, attproj, fcproj, logits
                return [=] { gpu::matmul_forward(out, in, weight, OC == Vp ? nullptr : bias, N, IC, OC); };
            if (n.find("backward dinp") != std::string::npos)  // matmul_backward's first product, alone
                return [=] {
                    const float one = 1.0f, zero = 0.0f;
                    CUBLAS_CHECK(cublasGemmEx(gpu::ctx.blas, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, &one, weight,
                                              CUDA_FLOATX, IC, dout, CUDA_FLOATX, OC, &zero, in, CUDA_FLOATX, IC,
                                              gpu::ctx.compute, CUBLAS_GEMM_DEFAULT));
                };
            if (n.find("backward dw") != std::string::npos)  // and its second
                return [=] {
                    const float one = 1.0f;
                    CUBLAS_CHECK(cublasGemmEx(gpu::ctx.blas, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, &one, in,
                                              CUDA_FLOATX, IC, dout, CUDA_FLOATX, OC, &one, weight_grad, CUDA_R_32F,
                                              IC, gpu::ctx.compute, CUBLAS_GEMM_DEFAULT));
                };
            if (n.find("bias gradient") != std::string::npos)
                return [=] {
                    int chunks = gpu::row_chunks(N);
                    gpu::bias_grad_partial_kernel<<<dim3(gpu::blocks_for(OC, 32), chunks), dim3(32, gpu::LANES), 0,
                                                    gpu::ctx.stream>>>(scratch, fch_gelu, N, OC);
                    KERNEL_CHECK();
                    gpu::sum_partials_add(dbias, scratch, chunks, OC);
                };
            if (n == "gelu backward") return [=] { gpu::gelu_backward(fch_gelu, fch, fch_gelu, N * 4 * C); };
            if (n.rfind("gelu forward", 0) == 0) return [=] { gpu::gelu_forward(fch_gelu, fch, N * 4 * C); };
            if (n.rfind("layernorm backward", 0) == 0) {
                const bool acc = n.find("lnf") == std::string::npos;
                return [=] { gpu::layernorm_backward_fused(x2, dlnw, dlnb, scratch, y, x, lnw, mean, rstd, N, C, acc); };
            }
            if (n.rfind("cross-entropy", 0) == 0) {
                const auto path = n.find("fused") != std::string::npos ? gpu::CrossEntropyPath::fused
                                                                       : gpu::CrossEntropyPath::three_pass;
                return [=] { gpu::crossentropy_forward_backward(losses, logits, d_tokens, 1.0f / N, N, V, Vp, true, path); };
            }
            if (n == "encoder backward") return [=] { gpu::encoder_backward(dwte, dwpe, x, tg, B, T, C); };
            if (n == "zero the gradients")
                return [=] { CUDA_CHECK(cudaMemsetAsync(grads, 0, P * sizeof(float), gpu::ctx.stream)); };
            if (n == "gradient norm") return [=] { gpu::global_norm_squared(grads, P, sums + 1, sums); };
            if (n == "AdamW update")
                return [=, &c] { gpu::adamw_update(params, weights_x, grads, m, v, c, opt, 1e-4f, 1); };
            throw Error("step_kernels: no launch for the planner's kernel '" + n + "'");
        };

        printf("\nthe step kernel by kernel, GPT-2 124M shape, B=%d T=%d, %s; predicted for %s (host/cost.h); "
               "measured: CUDA events%s\n",
               B, T, PRECISION_NAME, d.name.c_str(), CPU_RUNTIME ? " on the CPU runtime (CPU-runtime time, not a GPU's)" : "");
        printf("  %-12s %-38s %6s %12s %12s\n", "layer", "kernel", "count", "predicted", "measured");
        StepOptions o;
        o.x = sizeof(floatX);
        double predicted = 0, measured = 0;
        StepOptions reference = o;
        reference.fused_classifier = false;
        std::vector<StepKernel> rows = step_kernels(c, B, T, o);
        for (const StepKernel& k : step_kernels(c, B, T, reference))  // the reference classifier too
            if (k.layer == "loss") rows.push_back(k);
        for (const StepKernel& k : rows) {
            std::function<void()> f = launch(k);
            // in place: valid logits first, then gradients, which are valid logits too
            if (k.layer == "loss") logits_.set(to_x(random_floats(N * Vp, rng, 3.0)));
            double ms = time_ms(f) * k.count, pred = kernel_seconds(k, d) * 1e3 * k.count;
            printf("  %-12s %-38s %6g %12s %12s\n", k.layer.c_str(), k.name.c_str(), k.count,
                   format_seconds(pred / 1e3).c_str(), format_seconds(ms / 1e3).c_str());
            if (k.name != "cross-entropy, three-pass") predicted += pred, measured += ms;
        }
        printf("  sum (micro-batch and optimizer, fused classifier): predicted %s, measured %s\n",
               format_seconds(predicted / 1e3).c_str(), format_seconds(measured / 1e3).c_str());
        return true;
    });
}
