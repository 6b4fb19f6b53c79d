// dev/cuda/gelu.cu: tanh-GELU forward and backward on GPT-2 124M's MLP activations.
//   1: train_gpt.cu's kernels, one element per thread
//   2: four elements per thread through float4 loads and stores (n a multiple of 4)
#include "common.h"

__device__ inline float gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(gpu::GELU_K * (x + 0.044715f * x * x * x)));
}
__device__ inline float gelu_grad(float x) {
    float th = tanhf(gpu::GELU_K * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * gpu::GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
}
__global__ void gelu_forward4(float4* out, const float4* inp, size_t n4) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 x = inp[i];
    out[i] = make_float4(gelu(x.x), gelu(x.y), gelu(x.z), gelu(x.w));
}
__global__ void gelu_backward4(float4* dinp, const float4* inp, const float4* dout, size_t n4) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 x = inp[i], d = dout[i];
    dinp[i] = make_float4(gelu_grad(x.x) * d.x, gelu_grad(x.y) * d.y, gelu_grad(x.z) * d.z, gelu_grad(x.w) * d.w);
}

int main(int argc, char** argv) {
    return workbench_main("gelu", argc, argv, [] {
        const size_t n = at_scale<size_t>((size_t)8 * 1024 * 3072, 4 * 3072 + 4);  // B·T·4C for B=8, T=1024, C=768
        Rng rng(4);
        Floats x = random_floats(n, rng, 3.0), dout = random_floats(n, rng);
        std::vector<double> out(n), dinp(n);
        const double k = 0.7978845608028654;
        for (size_t i = 0; i < n; i++) {
            double xi = x[i], th = std::tanh(k * (xi + 0.044715 * xi * xi * xi));
            out[i] = 0.5 * xi * (1 + th);
            dinp[i] = (0.5 * (1 + th) + 0.5 * xi * (1 - th * th) * k * (1 + 3 * 0.044715 * xi * xi)) * dout[i];
        }
        DevArray<float> d_x(x), d_dout(dout), d_out(n), d_dinp(n);
        bool ok = true;

        table_header(strf("GELU forward, n = %s (tolerance 1e-5)", with_commas(n).c_str()).c_str());
        auto f1 = [&] { gpu::gelu_forward(d_out.ptr(), d_x.ptr(), n); };
        f1();
        double err = norm_error(d_out.host(), out);
        ok &= table_row("1 production: one element per thread", err, 1e-5, time_ms(f1), 2.0 * n * 4);
        auto f2 = [&] {
            gelu_forward4<<<gpu::blocks_for(n / 4), gpu::THREADS, 0, gpu::ctx.stream>>>((float4*)d_out.ptr(),
                                                                                       (const float4*)d_x.ptr(), n / 4);
            KERNEL_CHECK();
        };
        d_out.poison();
        f2();
        err = norm_error(d_out.host(), out);
        ok &= table_row("2 float4", err, 1e-5, time_ms(f2), 2.0 * n * 4);

        table_header("GELU backward (tolerance 1e-5)");
        auto b1 = [&] { gpu::gelu_backward(d_dinp.ptr(), d_x.ptr(), d_dout.ptr(), n); };
        b1();
        err = norm_error(d_dinp.host(), dinp);
        ok &= table_row("1 production: one element per thread", err, 1e-5, time_ms(b1), 3.0 * n * 4);
        auto b2 = [&] {
            gelu_backward4<<<gpu::blocks_for(n / 4), gpu::THREADS, 0, gpu::ctx.stream>>>(
                (float4*)d_dinp.ptr(), (const float4*)d_x.ptr(), (const float4*)d_dout.ptr(), n / 4);
            KERNEL_CHECK();
        };
        d_dinp.poison();
        b2();
        err = norm_error(d_dinp.host(), dinp);
        ok &= table_row("2 float4", err, 1e-5, time_ms(b2), 3.0 * n * 4);
        return ok;
    });
}
