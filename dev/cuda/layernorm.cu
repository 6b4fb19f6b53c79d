// dev/cuda/layernorm.cu: LayerNorm forward and backward at GPT-2 124M's shape.
//   forward  1: train_gpt.cu's kernel, one warp per row, x read three times
//            2: one warp per row with the row held in registers: x read once
//   backward 1: train_gpt.cu's three kernels (dinp per row; dw, db by chunks of rows, then in order)
#include "common.h"

// Version 2: each lane keeps its PER_LANE = C/32 elements of the row in registers.
template <int PER_LANE>
__global__ void layernorm_forward_registers(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w,
                                            const floatX* bias, int N) {
    constexpr int C = PER_LANE * 32;
    int n = blockIdx.x * gpu::ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return;
    const floatX* x = inp + (size_t)n * C;
    float v[PER_LANE];
    float sum = 0;
#pragma unroll
    for (int k = 0; k < PER_LANE; k++) sum += (v[k] = (float)x[lane + 32 * k]);
    float m = gpu::warp_sum(sum) / C;
    float var = 0;
#pragma unroll
    for (int k = 0; k < PER_LANE; k++) var += (v[k] - m) * (v[k] - m);
    float s = 1.0f / sqrtf(gpu::warp_sum(var) / C + 1e-5f);
    floatX* o = out + (size_t)n * C;
#pragma unroll
    for (int k = 0; k < PER_LANE; k++) {
        int c = lane + 32 * k;
        o[c] = floatX((v[k] - m) * s * (float)w[c] + (float)bias[c]);
    }
    if (lane == 0) mean[n] = m, rstd[n] = s;
}

int main(int argc, char** argv) {
    return workbench_main("layernorm", argc, argv, [] {
        const int N = at_scale(8 * 1024, 300);  // B·T = 8×1024 rows of GPT-2 124M's width
        constexpr int C = 768;
        Rng rng(1);
        Floats x = rounded(random_floats((size_t)N * C, rng, 2.0)), w = rounded(random_floats(C, rng));
        Floats b = rounded(random_floats(C, rng)), dout = rounded(random_floats((size_t)N * C, rng));

        // CPU reference, in double
        std::vector<double> out((size_t)N * C), mean(N), rstd(N), dinp((size_t)N * C), dw(C, 0.0), db(C, 0.0);
        for (int n = 0; n < N; n++) {
            const float* xr = &x[(size_t)n * C];
            const float* d = &dout[(size_t)n * C];
            double m = 0, v = 0;
            for (int c = 0; c < C; c++) m += xr[c];
            m /= C;
            for (int c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
            double s = 1.0 / std::sqrt(v / C + 1e-5);
            mean[n] = m, rstd[n] = s;
            double g_mean = 0, gx_mean = 0;
            for (int c = 0; c < C; c++) {
                double xhat = (xr[c] - m) * s;
                out[(size_t)n * C + c] = xhat * w[c] + b[c];
                g_mean += d[c] * w[c], gx_mean += d[c] * w[c] * xhat;
                dw[c] += d[c] * xhat, db[c] += d[c];
            }
            g_mean /= C, gx_mean /= C;
            for (int c = 0; c < C; c++)
                dinp[(size_t)n * C + c] = s * (d[c] * w[c] - g_mean - (xr[c] - m) * s * gx_mean);
        }

        DevArray<floatX> d_x(to_x(x)), d_w(to_x(w)), d_b(to_x(b)), d_dout(to_x(dout)), d_out((size_t)N * C);
        DevArray<floatX> d_dinp((size_t)N * C);
        DevArray<float> d_mean(N), d_rstd(N), d_dw(C), d_db(C);
        DevArray<float> scratch((size_t)gpu::row_chunks(N) * 2 * C);
        bool ok = true;
        auto forward_error = [&] {
            return std::max({norm_error(d_out.host(), out), norm_error(d_mean.host(), mean),
                             norm_error(d_rstd.host(), rstd)});
        };
        auto poison_forward = [&] { d_out.poison(), d_mean.poison(), d_rstd.poison(); };
        const double fwd_bytes = 2.0 * N * C * sizeof(floatX), bwd_bytes = 3.0 * N * C * sizeof(floatX);

        // bf16: the output is rounded once (3e-3); the statistics stay float32
        const double fwd_tol = tol(1e-5, 3e-3), bwd_tol = tol(1e-5, 3e-3);
        table_header(strf("LayerNorm forward, N=%d C=%d (error vs double; tolerance %g)", N, C, fwd_tol).c_str());
        auto v1 = [&] {
            gpu::layernorm_forward(d_out.ptr(), d_mean.ptr(), d_rstd.ptr(), d_x.ptr(), d_w.ptr(), d_b.ptr(), N, C);
        };
        poison_forward();
        v1();
        double err = forward_error();  // before the timed calls (argument order is unspecified)
        ok &= table_row("1 production: warp per row", err, fwd_tol, time_ms(v1), fwd_bytes);
        auto v2 = [&] {
            layernorm_forward_registers<C / 32><<<gpu::blocks_for(N, gpu::ROWS_PER_BLOCK), gpu::THREADS, 0,
                                                  gpu::ctx.stream>>>(d_out.ptr(), d_mean.ptr(), d_rstd.ptr(),
                                                                     d_x.ptr(), d_w.ptr(), d_b.ptr(), N);
            KERNEL_CHECK();
        };
        poison_forward();
        v2();
        err = forward_error();
        ok &= table_row("2 warp per row, row in registers", err, fwd_tol, time_ms(v2), fwd_bytes);

        table_header(strf("LayerNorm backward, N=%d C=%d (dinp, dw, db; tolerance %g)", N, C, bwd_tol).c_str());
        auto b1 = [&] {  // dw and db accumulate: start them at 0 so the result is comparable
            CUDA_CHECK(cudaMemsetAsync(d_dw.ptr(), 0, C * sizeof(float), gpu::ctx.stream));
            CUDA_CHECK(cudaMemsetAsync(d_db.ptr(), 0, C * sizeof(float), gpu::ctx.stream));
            gpu::layernorm_backward(d_dinp.ptr(), d_dw.ptr(), d_db.ptr(), scratch.ptr(), d_dout.ptr(), d_x.ptr(),
                                    d_w.ptr(), d_mean.ptr(), d_rstd.ptr(), N, C);
        };
        d_dinp.poison();
        b1();
        err = std::max({norm_error(d_dinp.host(), dinp), norm_error(d_dw.host(), dw),
                        norm_error(d_db.host(), db)});
        ok &= table_row("1 production: warp per row + chunked dw, db", err, bwd_tol, time_ms(b1), bwd_bytes);
        return ok;
    });
}
