// dev/cuda/layernorm.cu: LayerNorm forward and backward at GPT-2 124M's shape, alone and
// fused with the residual connection around it (what train_gpt runs).
//   forward  0: the kernel before 16-byte loads: one warp per row, one element per access
//            1: train_gpt.cu's layernorm_forward, one warp per row, 16 bytes per access, x
//               read three times (from cache after the first)
//            2: one warp per row with the row held in registers: x read once
//   residual + forward  1: residual_forward, then layernorm_forward (the composition)
//                       2: residual_layernorm_forward, fused (train_gpt's)
//   backward 0: the row kernel before 16-byte loads, then the production dw, db kernels
//            1: layernorm_backward: dinp per row; dw, db by chunks of rows, then in order
//            2: layernorm_backward_fused: dinp, dw and db partial sums from one read
//   backward + residual gradient  1: layernorm_backward, then residual_forward adding dinp
//                                 2: layernorm_backward_fused, accumulating (train_gpt's)
#include "common.h"

// Version 0 of the forward and of the backward's row kernel: the production kernels before
// they moved 16 bytes at a time, kept to measure what that gained.
__global__ void layernorm_forward_scalar(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w,
                                         const floatX* bias, int N, int C) {
    int n = blockIdx.x * gpu::ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return;
    const floatX* x = inp + (size_t)n * C;
    float sum = 0;
    for (int c = lane; c < C; c += 32) sum += (float)x[c];
    float m = gpu::warp_sum(sum) / C;
    float var = 0;
    for (int c = lane; c < C; c += 32) var += ((float)x[c] - m) * ((float)x[c] - m);
    float s = 1.0f / sqrtf(gpu::warp_sum(var) / C + 1e-5f);
    floatX* o = out + (size_t)n * C;
    for (int c = lane; c < C; c += 32) o[c] = floatX(((float)x[c] - m) * s * (float)w[c] + (float)bias[c]);
    if (lane == 0) mean[n] = m, rstd[n] = s;
}
__global__ void layernorm_backward_scalar(floatX* dinp, const floatX* dout, const floatX* inp, const floatX* w,
                                          const float* mean, const float* rstd, int N, int C) {
    int n = blockIdx.x * gpu::ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return;
    const floatX* x = inp + (size_t)n * C;
    const floatX* d = dout + (size_t)n * C;
    float m = mean[n], s = rstd[n], g_sum = 0, gx_sum = 0;
    for (int c = lane; c < C; c += 32) {
        float g = (float)d[c] * (float)w[c];
        g_sum += g;
        gx_sum += g * ((float)x[c] - m) * s;
    }
    float g_mean = gpu::warp_sum(g_sum) / C, gx_mean = gpu::warp_sum(gx_sum) / C;
    floatX* dx = dinp + (size_t)n * C;
    for (int c = lane; c < C; c += 32)
        dx[c] = floatX(s * ((float)d[c] * (float)w[c] - g_mean - ((float)x[c] - m) * s * gx_mean));
}

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

// The CPU reference, in double: LayerNorm of x (N rows of C) and its backward for dout
struct Reference {
    std::vector<double> out, mean, rstd, dinp, dw, db;
};
static Reference reference(const Floats& x, const Floats& w, const Floats& b, const Floats& dout, int N, int C) {
    Reference r{std::vector<double>((size_t)N * C), std::vector<double>(N), std::vector<double>(N),
                std::vector<double>((size_t)N * C), std::vector<double>(C, 0.0), std::vector<double>(C, 0.0)};
    for (int n = 0; n < N; n++) {
        const float* xr = &x[(size_t)n * C];
        const float* d = &dout[(size_t)n * C];
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += xr[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
        double s = 1.0 / std::sqrt(v / C + 1e-5);
        r.mean[n] = m, r.rstd[n] = s;
        double g_mean = 0, gx_mean = 0;
        for (int c = 0; c < C; c++) {
            double xhat = (xr[c] - m) * s;
            r.out[(size_t)n * C + c] = xhat * w[c] + b[c];
            g_mean += d[c] * w[c], gx_mean += d[c] * w[c] * xhat;
            r.dw[c] += d[c] * xhat, r.db[c] += d[c];
        }
        g_mean /= C, gx_mean /= C;
        for (int c = 0; c < C; c++)
            r.dinp[(size_t)n * C + c] = s * (d[c] * w[c] - g_mean - (xr[c] - m) * s * gx_mean);
    }
    return r;
}

int main(int argc, char** argv) {
    return workbench_main("layernorm", argc, argv, [] {
        const int N = at_scale(8 * 1024, 300);  // B·T = 8×1024 rows of GPT-2 124M's width
        constexpr int C = 768;
        const size_t NC = (size_t)N * C;
        Rng rng(1);
        Floats x = rounded(random_floats(NC, rng, 2.0)), w = rounded(random_floats(C, rng));
        Floats b = rounded(random_floats(C, rng)), dout = rounded(random_floats(NC, rng));
        // the fused pass's inputs: the residual stream x plus a branch's output y, rounded once as
        // the kernels round it; and the residual stream's gradient before this LayerNorm adds to it
        Floats y = rounded(random_floats(NC, rng)), dres = rounded(random_floats(NC, rng)), xy(NC);
        for (size_t i = 0; i < NC; i++) xy[i] = (float)floatX(x[i] + y[i]);
        const Reference ref = reference(x, w, b, dout, N, C), ref_xy = reference(xy, w, b, dout, N, C);
        std::vector<double> dres_out(NC);  // the residual gradient after: dres + dinp
        for (size_t i = 0; i < NC; i++) dres_out[i] = dres[i] + ref_xy.dinp[i];

        DevArray<floatX> d_x(to_x(x)), d_w(to_x(w)), d_b(to_x(b)), d_dout(to_x(dout)), d_out(NC), d_dinp(NC);
        DevArray<floatX> d_y(to_x(y)), d_xy(NC), d_dres(to_x(dres));
        DevArray<float> d_mean(N), d_rstd(N), d_dw(C), d_db(C);
        DevArray<float> scratch((size_t)gpu::row_chunks(N) * 2 * C);
        bool ok = true;
        auto forward_error = [&](const Reference& r) {
            return std::max({norm_error(d_out.host(), r.out), norm_error(d_mean.host(), r.mean),
                             norm_error(d_rstd.host(), r.rstd)});
        };
        auto poison_forward = [&] { d_out.poison(), d_mean.poison(), d_rstd.poison(), d_xy.poison(); };
        const unsigned grid = gpu::blocks_for(N, gpu::ROWS_PER_BLOCK);
        // the bytes each pass must move: x, out (floatX); with the residual, y and the sum too
        const double fwd_bytes = 2.0 * NC * sizeof(floatX), bwd_bytes = 3.0 * NC * sizeof(floatX);

        // bf16: the output is rounded once (3e-3); the statistics stay float32
        const double fwd_tol = tol(1e-5, 3e-3), bwd_tol = tol(1e-5, 3e-3);
        table_header(strf("LayerNorm forward, N=%d C=%d (error vs double; tolerance %g)", N, C, fwd_tol).c_str());
        auto v0 = [&] {
            layernorm_forward_scalar<<<grid, gpu::THREADS, 0, gpu::ctx.stream>>>(
                d_out.ptr(), d_mean.ptr(), d_rstd.ptr(), d_x.ptr(), d_w.ptr(), d_b.ptr(), N, C);
            KERNEL_CHECK();
        };
        poison_forward();
        v0();
        double err = forward_error(ref);  // before the timed calls (argument order is unspecified)
        ok &= table_row("0 before: one element per access", err, fwd_tol, time_ms(v0), fwd_bytes);
        auto v1 = [&] {
            gpu::layernorm_forward(d_out.ptr(), d_mean.ptr(), d_rstd.ptr(), d_x.ptr(), d_w.ptr(), d_b.ptr(), N, C);
        };
        poison_forward();
        v1();
        err = forward_error(ref);
        ok &= table_row("1 production: warp per row, 16-byte accesses", err, fwd_tol, time_ms(v1), fwd_bytes);
        auto v2 = [&] {
            layernorm_forward_registers<C / 32><<<grid, gpu::THREADS, 0, gpu::ctx.stream>>>(
                d_out.ptr(), d_mean.ptr(), d_rstd.ptr(), d_x.ptr(), d_w.ptr(), d_b.ptr(), N);
            KERNEL_CHECK();
        };
        poison_forward();
        v2();
        err = forward_error(ref);
        ok &= table_row("2 warp per row, row in registers", err, fwd_tol, time_ms(v2), fwd_bytes);

        // the residual sum is exact in both (one addition, one rounding); its output is checked too
        const double fused_fwd_bytes = 4.0 * NC * sizeof(floatX);  // x, y in; sum, out out
        table_header(strf("residual add + LayerNorm forward, N=%d C=%d (tolerance %g)", N, C, fwd_tol).c_str());
        auto xy_error = [&] {
            std::vector<floatX> sum = d_xy.host();
            return Floats(sum.begin(), sum.end()) == xy ? forward_error(ref_xy) : NAN;  // a wrong sum fails
        };
        auto f1 = [&] {
            gpu::residual_forward(d_xy.ptr(), d_x.ptr(), d_y.ptr(), NC);
            gpu::layernorm_forward(d_out.ptr(), d_mean.ptr(), d_rstd.ptr(), d_xy.ptr(), d_w.ptr(), d_b.ptr(), N, C);
        };
        poison_forward();
        f1();
        err = xy_error();
        ok &= table_row("1 residual_forward + layernorm_forward", err, fwd_tol, time_ms(f1), fused_fwd_bytes);
        auto f2 = [&] {
            gpu::residual_layernorm_forward(d_xy.ptr(), d_out.ptr(), d_mean.ptr(), d_rstd.ptr(), d_x.ptr(), d_y.ptr(),
                                            d_w.ptr(), d_b.ptr(), N, C);
        };
        poison_forward();
        f2();
        err = xy_error();
        ok &= table_row("2 production: residual_layernorm_forward", err, fwd_tol, time_ms(f2), fused_fwd_bytes);

        table_header(strf("LayerNorm backward, N=%d C=%d (dinp, dw, db; tolerance %g)", N, C, bwd_tol).c_str());
        auto zero_dw_db = [&] {  // dw and db accumulate: start them at 0 so the result is comparable
            CUDA_CHECK(cudaMemsetAsync(d_dw.ptr(), 0, C * sizeof(float), gpu::ctx.stream));
            CUDA_CHECK(cudaMemsetAsync(d_db.ptr(), 0, C * sizeof(float), gpu::ctx.stream));
        };
        auto backward_error = [&](const std::vector<double>& dinp, DevArray<floatX>& ours, const Reference& r) {
            return std::max(
                {norm_error(ours.host(), dinp), norm_error(d_dw.host(), r.dw), norm_error(d_db.host(), r.db)});
        };
        auto b0 = [&] {
            zero_dw_db();
            layernorm_backward_scalar<<<grid, gpu::THREADS, 0, gpu::ctx.stream>>>(
                d_dinp.ptr(), d_dout.ptr(), d_x.ptr(), d_w.ptr(), d_mean.ptr(), d_rstd.ptr(), N, C);
            KERNEL_CHECK();
            int chunks = gpu::row_chunks(N);
            gpu::layernorm_param_partial_kernel<<<dim3(gpu::blocks_for(C, 32), chunks), dim3(32, gpu::LANES), 0,
                                                  gpu::ctx.stream>>>(scratch.ptr(), scratch.ptr() + (size_t)chunks * C,
                                                                     d_dout.ptr(), d_x.ptr(), d_mean.ptr(),
                                                                     d_rstd.ptr(), N, C);
            KERNEL_CHECK();
            gpu::sum_partials_add(d_dw.ptr(), scratch.ptr(), chunks, C);
            gpu::sum_partials_add(d_db.ptr(), scratch.ptr() + (size_t)chunks * C, chunks, C);
        };
        // the statistics the backward reads: the forward's, of x
        v1();
        d_dinp.poison();
        b0();
        err = backward_error(ref.dinp, d_dinp, ref);
        ok &= table_row("0 before: one element per access", err, bwd_tol, time_ms(b0), bwd_bytes);
        auto b1 = [&] {
            zero_dw_db();
            gpu::layernorm_backward(d_dinp.ptr(), d_dw.ptr(), d_db.ptr(), scratch.ptr(), d_dout.ptr(), d_x.ptr(),
                                    d_w.ptr(), d_mean.ptr(), d_rstd.ptr(), N, C);
        };
        d_dinp.poison();
        b1();
        err = backward_error(ref.dinp, d_dinp, ref);
        ok &= table_row("1 warp per row + chunked dw, db", err, bwd_tol, time_ms(b1), bwd_bytes);
        auto b2 = [&] {
            zero_dw_db();
            gpu::layernorm_backward_fused(d_dinp.ptr(), d_dw.ptr(), d_db.ptr(), scratch.ptr(), d_dout.ptr(), d_x.ptr(),
                                          d_w.ptr(), d_mean.ptr(), d_rstd.ptr(), N, C, false);
        };
        d_dinp.poison();
        b2();
        err = backward_error(ref.dinp, d_dinp, ref);
        ok &= table_row("2 fused: dinp and dw, db partials, one read", err, bwd_tol, time_ms(b2), bwd_bytes);

        // the residual stream's gradient += dinp; bf16: dinp rounded, then the sum (4e-3)
        const double acc_tol = tol(1e-5, 4e-3), acc_bytes = 4.0 * NC * sizeof(floatX);  // dout, x, dres in; dres out
        table_header(strf("LayerNorm backward + residual gradient, N=%d C=%d (tolerance %g)", N, C, acc_tol).c_str());
        f1();  // the statistics of x + y
        // each timed call adds again: the check runs first, on a fresh copy of dres
        auto a1 = [&] {
            zero_dw_db();
            gpu::layernorm_backward(d_dinp.ptr(), d_dw.ptr(), d_db.ptr(), scratch.ptr(), d_dout.ptr(), d_xy.ptr(),
                                    d_w.ptr(), d_mean.ptr(), d_rstd.ptr(), N, C);
            gpu::residual_forward(d_dres.ptr(), d_dres.ptr(), d_dinp.ptr(), NC);
        };
        d_dres.set(to_x(dres));
        a1();
        err = backward_error(dres_out, d_dres, ref_xy);
        ok &= table_row("1 layernorm_backward + residual_forward", err, acc_tol, time_ms(a1), acc_bytes);
        auto a2 = [&] {
            zero_dw_db();
            gpu::layernorm_backward_fused(d_dres.ptr(), d_dw.ptr(), d_db.ptr(), scratch.ptr(), d_dout.ptr(),
                                          d_xy.ptr(), d_w.ptr(), d_mean.ptr(), d_rstd.ptr(), N, C, true);
        };
        d_dres.set(to_x(dres));
        a2();
        err = backward_error(dres_out, d_dres, ref_xy);
        ok &= table_row("2 production: layernorm_backward_fused", err, acc_tol, time_ms(a2), acc_bytes);
        return ok;
    });
}
