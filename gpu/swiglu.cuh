// gpu/swiglu.cuh: SwiGLU, Llama's MLP activation, forward and backward, on fc (N, 2F) =
// [gate | up] per row (fcw's rows: W1 then W3): out (N, F) = silu(gate) ⊙ up, silu(g) = g·σ(g),
// σ(g) = 1/(1 + e^−g). Float32 arithmetic in both precisions, e^x by CUDA's expf (train.cpp's
// swiglu_forward / swiglu_backward use their exp_fast, which agrees to a few ulp: the tests'
// tolerance); otherwise the same formulas in the same order (test/gpu_trainer/trainer.cu).
#pragma once
#include "common.cuh"

namespace gpu {

__device__ inline float swiglu_sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

// A pack of a row's F columns per thread (row_packs = ⌈F/P⌉ a row, the last one partial; any F):
// out[n, j] = gate·σ(gate)·up. FLOPs: 6 per output element (σ 4, the exp as one; 2 products).
// Bytes: 3x·NF (gate and up read, out written).
__global__ void swiglu_forward_kernel(floatX* out, const floatX* fc, int F, int row_packs, size_t packs) {
    constexpr int P = pack_size<floatX>();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= packs) return;
    const size_t n = i / row_packs;
    const int j = (int)(i % row_packs) * P, count = min(P, F - j);
    const floatX* gate = fc + n * 2 * F + j;
    Pack<floatX> g = load_part(gate, count), u = load_part(gate + F, count), o;
#pragma unroll
    for (int k = 0; k < P; k++) {  // past `count` the packs hold 0s, and nothing is stored
        const float gk = (float)g.v[k];
        o.v[k] = floatX(gk * swiglu_sigmoid(gk) * (float)u.v[k]);
    }
    store_part(out + n * F + j, count, o);
}
// out (N, F) = silu(fc[:, :F]) ⊙ fc[:, F:]
void swiglu_forward(floatX* out, const floatX* fc, size_t N, int F) {
    const int row_packs = (int)packs_for<floatX>(F);
    const size_t packs = N * row_packs;
    swiglu_forward_kernel<<<blocks_for(packs), THREADS, 0, ctx.stream>>>(out, fc, F, row_packs, packs);
    KERNEL_CHECK();
}

// dgate = dout·up·σ(g)·(1 + g·(1 − σ(g))), dup = dout·silu(g), g = gate. Each thread reads
// its gate and up before it writes their gradients, so dfc may be fc (in place).
// FLOPs: 12 per output element (σ 4, dgate 6, dup 2). Bytes: 5x·NF
// (gate, up and dout read, dgate and dup written).
__global__ void swiglu_backward_kernel(floatX* dfc, const floatX* fc, const floatX* dout, int F, int row_packs,
                                       size_t packs) {
    constexpr int P = pack_size<floatX>();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= packs) return;
    const size_t n = i / row_packs;
    const int j = (int)(i % row_packs) * P, count = min(P, F - j);
    const floatX* gate = fc + n * 2 * F + j;
    Pack<floatX> g = load_part(gate, count), u = load_part(gate + F, count), d = load_part(dout + n * F + j, count);
    Pack<floatX> dg, du;
#pragma unroll
    for (int k = 0; k < P; k++) {
        const float gk = (float)g.v[k], sg = swiglu_sigmoid(gk), dk = (float)d.v[k];
        dg.v[k] = floatX(dk * (float)u.v[k] * sg * (1.0f + gk * (1.0f - sg)));
        du.v[k] = floatX(dk * gk * sg);
    }
    floatX* dgate = dfc + n * 2 * F + j;
    store_part(dgate, count, dg);
    store_part(dgate + F, count, du);
}
// From what the forward kept (fc) and dout (N, F): dfc (N, 2F) overwritten (may be fc)
void swiglu_backward(floatX* dfc, const floatX* fc, const floatX* dout, size_t N, int F) {
    const int row_packs = (int)packs_for<floatX>(F);
    const size_t packs = N * row_packs;
    swiglu_backward_kernel<<<blocks_for(packs), THREADS, 0, ctx.stream>>>(dfc, fc, dout, F, row_packs, packs);
    KERNEL_CHECK();
}

}  // namespace gpu
