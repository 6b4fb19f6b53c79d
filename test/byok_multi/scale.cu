// The second source file of the multi-file example (named in SOURCES for the CPU build; nvcc
// would compile it separately and link).
#include "kernels.cuh"

__global__ void scale_kernel(float* x, float factor, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= factor;
}
void scale_on_device(float* x, float factor, int n) { scale_kernel<<<(n + 255) / 256, 256>>>(x, factor, n); }
