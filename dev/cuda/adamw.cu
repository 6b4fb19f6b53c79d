// dev/cuda/adamw.cu: the AdamW update of all GPT-2 124M parameters.
//   1: train_gpt.cu's kernel, one launch per tensor (the weight decay differs), one element
//      per thread
//   2: one launch for all tensors, four elements per thread (float4); each thread finds its
//      tensor's decay among the 16 tensor boundaries (all sizes are multiples of 4 here)
#include "common.h"

struct Tensors {
    size_t end[NUM_PARAM_TENSORS];  // cumulative sizes, in floats
    float wd[NUM_PARAM_TENSORS];
};
__device__ inline float adamw_one(float& p, float g, float& m, float& v, float lr, float b1, float b2, float eps,
                                  float wd, float bc1, float bc2) {
    m = b1 * m + (1.0f - b1) * g;
    v = b2 * v + (1.0f - b2) * g * g;
    p -= lr * ((m / bc1) / (sqrtf(v / bc2) + eps) + wd * p);
    return p;
}
__global__ void adamw_all4(float4* p, floatX* px, const float4* g, float4* m, float4* v, size_t n4, Tensors tensors,
                           float lr, float b1, float b2, float eps, float bc1, float bc2) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    int t = 0;
    while (4 * i >= tensors.end[t]) t++;
    float wd = tensors.wd[t];
    float4 pi = p[i], gi = g[i], mi = m[i], vi = v[i];
    adamw_one(pi.x, gi.x, mi.x, vi.x, lr, b1, b2, eps, wd, bc1, bc2);
    adamw_one(pi.y, gi.y, mi.y, vi.y, lr, b1, b2, eps, wd, bc1, bc2);
    adamw_one(pi.z, gi.z, mi.z, vi.z, lr, b1, b2, eps, wd, bc1, bc2);
    adamw_one(pi.w, gi.w, mi.w, vi.w, lr, b1, b2, eps, wd, bc1, bc2);
    p[i] = pi, m[i] = mi, v[i] = vi;
    if (px) px[4 * i] = floatX(pi.x), px[4 * i + 1] = floatX(pi.y), px[4 * i + 2] = floatX(pi.z), px[4 * i + 3] = floatX(pi.w);
}

int main(int argc, char** argv) {
    return workbench_main("adamw", argc, argv, [] {
        ModelConfig c;
        c.maxT = 1024, c.V = 50257, c.Vp = 50304, c.L = 12, c.NH = 12, c.C = 768;  // GPT-2 124M
        if (quick_check) c.maxT = 64, c.V = 1000, c.Vp = 1024, c.L = 2, c.NH = 4, c.C = 64;
        const size_t n = c.num_params();
        const AdamWConfig h{0.9f, 0.95f, 1e-8f, 0.1f};
        const float lr = 6e-4f;
        const int t = 3;
        Rng rng(6);
        Floats p = random_floats(n, rng, 0.02), g = random_floats(n, rng, 1e-3), m = random_floats(n, rng, 1e-4);
        Floats v(n);
        for (float& x : v) x = (float)(1e-7 * std::fabs(rng.normal()));

        // CPU reference: train.cpp's formula
        float bc1 = 1.0f - powf(h.beta1, (float)t), bc2 = 1.0f - powf(h.beta2, (float)t);
        std::vector<double> p_ref(n), m_ref(n), v_ref(n);
        std::vector<size_t> sizes = c.param_sizes();
        Tensors tensors;
        size_t offset = 0;
        for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
            float wd = param_decays(i) ? h.weight_decay : 0.0f;
            tensors.end[i] = offset + sizes[i], tensors.wd[i] = wd;
            for (size_t j = offset; j < offset + sizes[i]; j++) {
                float mm = h.beta1 * m[j] + (1.0f - h.beta1) * g[j];
                float vv = h.beta2 * v[j] + (1.0f - h.beta2) * g[j] * g[j];
                float pp = p[j] - lr * ((mm / bc1) / (sqrtf(vv / bc2) + h.eps) + wd * p[j]);
                p_ref[j] = pp, m_ref[j] = mm, v_ref[j] = vv;
            }
            offset += sizes[i];
        }
        bool all4 = true;
        for (size_t s : sizes) all4 = all4 && s % 4 == 0;

        DevArray<float> d_p(p), d_g(g), d_m(m), d_v(v);
        auto reset = [&] { d_p.set(p), d_m.set(m), d_v.set(v); };
        auto error = [&] {
            return std::max({norm_error(d_p.host(), p_ref), norm_error(d_m.host(), m_ref),
                             norm_error(d_v.host(), v_ref)});
        };
        const double bytes = 7.0 * n * 4;  // read p, g, m, v; write p, m, v
        bool ok = true;
        table_header(strf("AdamW over %s parameters (tolerance 1e-6: the same formula, fused multiply-adds)",
                          with_commas(n).c_str())
                         .c_str());
        // the bf16 build also refreshes the weights' bf16 copy; fp32 has none
        const bool copy = !std::is_same<floatX, float>::value;
        DevArray<floatX> d_px(copy ? n : 1);
        floatX* px = copy ? d_px.ptr() : nullptr;
        auto v1 = [&] { gpu::adamw_update(d_p.ptr(), px, d_g.ptr(), d_m.ptr(), d_v.ptr(), c, h, lr, t); };
        reset();
        v1();
        double err = error();
        ok &= table_row("1 production: a launch per tensor", err, 1e-6, time_ms(v1), bytes);
        if (all4) {
            auto v2 = [&] {
                adamw_all4<<<gpu::blocks_for(n / 4), gpu::THREADS, 0, gpu::ctx.stream>>>(
                    (float4*)d_p.ptr(), px, (const float4*)d_g.ptr(), (float4*)d_m.ptr(), (float4*)d_v.ptr(), n / 4,
                    tensors, lr, h.beta1, h.beta2, h.eps, bc1, bc2);
                KERNEL_CHECK();
            };
            reset();
            v2();
            err = error();
            ok &= table_row("2 one launch, float4", err, 1e-6, time_ms(v2), bytes);
        }
        return ok;
    });
}
