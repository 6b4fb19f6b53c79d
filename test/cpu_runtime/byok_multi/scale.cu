// The second source file of the multi-file example (named in SOURCES for the CPU build, which
// compiles it separately and links, as nvcc does; kernels.cuh defines a kernel, so only main.cu
// may include it).
#include <cuda_runtime.h>

__global__ void scale_kernel(float* x, float factor, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= factor;
}
void scale_on_device(float* x, float factor, int n) { scale_kernel<<<(n + 255) / 256, 256>>>(x, factor, n); }
