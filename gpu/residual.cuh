// gpu/residual.cuh: the residual connection, out = a + b, and the cast of float32 master
// weights to floatX.
#pragma once
#include "common.cuh"

namespace gpu {

// out = a + b (out may be a: the backward's gradient sums use that), a pack per thread
__global__ void residual_forward_kernel(floatX* out, const floatX* a, const floatX* b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= packs_for<floatX>(n)) return;
    Pack<floatX> x = load_pack(a, i, n), y = load_pack(b, i, n), o;
    for (int k = 0; k < pack_size<floatX>(); k++) o.v[k] = floatX((float)x.v[k] + (float)y.v[k]);
    store_pack(out, i, n, o);
}
void residual_forward(floatX* out, const floatX* a, const floatX* b, size_t n) {
    residual_forward_kernel<<<blocks_for(packs_for<floatX>(n)), THREADS, 0, ctx.stream>>>(out, a, b, n);
    KERNEL_CHECK();
}

// out = floatX(in): the weights as the kernels read them, rounded once from the master copy
__global__ void to_floatX_kernel(floatX* out, const float* in, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = floatX(in[i]);
}
void to_floatX(floatX* out, const float* in, size_t n) {
    to_floatX_kernel<<<blocks_for(n), THREADS, 0, ctx.stream>>>(out, in, n);
    KERNEL_CHECK();
}

}  // namespace gpu
