// Kernels in a header beside main.cu: the CPU build rewrites this file too (cpu.mk's
// DIR/NAME_cpu rule), so its __shared__ array and its launch run as they would under nvcc.
#pragma once
#include <cuda_runtime.h>

// Each block sums its 128 elements through shared memory; thread 0 writes the block's sum.
__global__ void block_sums(float* sums, const float* x) {
    __shared__ float part[128];
    part[threadIdx.x] = x[blockIdx.x * 128 + threadIdx.x];
    __syncthreads();
    for (unsigned half = 64; half > 0; half /= 2) {
        if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) sums[blockIdx.x] = part[0];
}
inline void launch_block_sums(float* sums, const float* x, int blocks) { block_sums<<<blocks, 128>>>(sums, x); }

void scale_on_device(float* x, float factor, int n);  // in scale.cu
