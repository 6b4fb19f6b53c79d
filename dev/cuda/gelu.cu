// dev/cuda/gelu.cu: tanh-GELU forward and backward on GPT-2 124M's MLP activations. (In
// training the forward is applied by cuBLASLt as fc's product is written; this kernel is
// the recomputation of --recompute 1.)
//   1: train_gpt's kernels: a 16-byte pack per thread (4 floats or 8 bf16), the tail of a
//      length that is no multiple of the pack element by element
//   2: one element per thread
#include "common.h"

__device__ inline float gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(gpu::GELU_K * (x + 0.044715f * x * x * x)));
}
__device__ inline float gelu_grad(float x) {
    float th = tanhf(gpu::GELU_K * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * gpu::GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
}
__global__ void gelu_forward1(floatX* out, const floatX* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = floatX(gelu((float)inp[i]));
}
__global__ void gelu_backward1(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dinp[i] = floatX(gelu_grad((float)inp[i]) * (float)dout[i]);
}

int main(int argc, char** argv) {
    return workbench_main("gelu", argc, argv, [] {
        // B·T·4C for B=8, T=1024, C=768; the check's length is no multiple of a pack
        const size_t n = at_scale<size_t>((size_t)8 * 1024 * 3072, 4 * 3072 + 5);
        Rng rng(4);
        Floats x = rounded(random_floats(n, rng, 3.0)), dout = rounded(random_floats(n, rng));
        std::vector<double> out(n), dinp(n);
        const double k = 0.7978845608028654;
        for (size_t i = 0; i < n; i++) {
            double xi = x[i], th = std::tanh(k * (xi + 0.044715 * xi * xi * xi));
            out[i] = 0.5 * xi * (1 + th);
            dinp[i] = (0.5 * (1 + th) + 0.5 * xi * (1 - th * th) * k * (1 + 3 * 0.044715 * xi * xi)) * dout[i];
        }
        DevArray<floatX> d_x(to_x(x)), d_dout(to_x(dout)), d_out(n), d_dinp(n);
        const double tolerance = tol(1e-5, 3e-3), bytes = sizeof(floatX) * (double)n;  // bf16: one rounding
        bool ok = true;

        table_header(strf("GELU forward, n = %s (tolerance %g)", with_commas(n).c_str(), tolerance).c_str());
        auto f1 = [&] { gpu::gelu_forward(d_out.ptr(), d_x.ptr(), n); };
        f1();
        double err = norm_error(d_out.host(), out);
        ok &= table_row("1 production: a 16-byte pack per thread", err, tolerance, time_ms(f1), 2 * bytes);
        auto f2 = [&] {
            gelu_forward1<<<gpu::blocks_for(n), gpu::THREADS, 0, gpu::ctx.stream>>>(d_out.ptr(), d_x.ptr(), n);
            KERNEL_CHECK();
        };
        d_out.poison();
        f2();
        err = norm_error(d_out.host(), out);
        ok &= table_row("2 one element per thread", err, tolerance, time_ms(f2), 2 * bytes);

        table_header(strf("GELU backward (tolerance %g)", tolerance).c_str());
        auto b1 = [&] { gpu::gelu_backward(d_dinp.ptr(), d_x.ptr(), d_dout.ptr(), n); };
        b1();
        err = norm_error(d_dinp.host(), dinp);
        ok &= table_row("1 production: a 16-byte pack per thread", err, tolerance, time_ms(b1), 3 * bytes);
        auto b2 = [&] {
            gelu_backward1<<<gpu::blocks_for(n), gpu::THREADS, 0, gpu::ctx.stream>>>(d_dinp.ptr(), d_x.ptr(),
                                                                                    d_dout.ptr(), n);
            KERNEL_CHECK();
        };
        d_dinp.poison();
        b2();
        err = norm_error(d_dinp.host(), dinp);
        ok &= table_row("2 one element per thread", err, tolerance, time_ms(b2), 3 * bytes);
        return ok;
    });
}
