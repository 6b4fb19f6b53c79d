// A CUDA program of two .cu files, a host-only .cpp and a header of kernels, built on the CPU runtime with
//     make test/cpu_runtime/byok_multi/main_cpu   (cpu.mk sets SOURCES="scale.cu host_gold.cpp" for it)
// and checked against a host loop: "N passed, M failed" on its last line.
#include <cstdio>
#include <vector>

#include "kernels.cuh"

// CUDA defines __CUDA_ARCH__ as the compute capability times 10 (xy0) in device code; many
// samples compile a kernel's body only under it. The CPU build's default is 900 (an H100).
__global__ void arch_of(int* out) {
#if __CUDA_ARCH__ >= 700
    *out = __CUDA_ARCH__;
#else
    *out = -1;
#endif
}

unsigned int smallest_on_host(const unsigned int* v, int n);  // host_gold.cpp
__global__ void smallest_on_device(unsigned int* out, unsigned int a, unsigned int b) { *out = umin(a, b); }

int main() {
    const int blocks = 6, n = blocks * 128;
    std::vector<float> h(n);
    for (int i = 0; i < n; i++) h[i] = (float)(i % 13) - 6.0f;
    float *x = nullptr, *sums = nullptr;
    cudaMalloc(&x, n * sizeof(float));
    cudaMalloc(&sums, blocks * sizeof(float));
    cudaMemcpy(x, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    scale_on_device(x, 0.5f, n);  // scale.cu
    launch_block_sums(sums, x, blocks);  // kernels.cuh
    std::vector<float> got(blocks);
    cudaMemcpy(got.data(), sums, blocks * sizeof(float), cudaMemcpyDeviceToHost);
    int passed = 0, failed = 0;
    cudaGetLastError() == cudaSuccess ? passed++ : failed++;
    for (int b = 0; b < blocks; b++) {
        float want = 0;  // the values are small integers and halves: every order sums exactly
        for (int i = 0; i < 128; i++) want += 0.5f * h[b * 128 + i];
        if (got[b] == want) {
            passed++;
        } else {
            failed++;
            printf("FAIL block %d: %g, expected %g\n", b, got[b], want);
        }
    }
    int* arch = nullptr;
    int arch_host = 0;
    cudaMalloc(&arch, sizeof(int));
    arch_of<<<1, 1>>>(arch);
    cudaMemcpy(&arch_host, arch, sizeof(int), cudaMemcpyDeviceToHost);
    arch_host == 900 ? passed++ : failed++;
    if (arch_host != 900) printf("FAIL __CUDA_ARCH__ in a kernel: %d, expected 900\n", arch_host);
    // a host-only .cpp of the program with a umin of its own (host_gold.cpp), and CUDA's device
    // umin in a kernel here
    const unsigned int values[4] = {9, 4, 7, 5};
    unsigned int* small = nullptr;
    unsigned int small_host = 0;
    cudaMalloc(&small, sizeof(unsigned int));
    smallest_on_device<<<1, 1>>>(small, 9, 4);
    cudaMemcpy(&small_host, small, sizeof(unsigned int), cudaMemcpyDeviceToHost);
    const unsigned int gold = smallest_on_host(values, 4);
    gold == 4 && small_host == 4 ? passed++ : failed++;
    if (gold != 4 || small_host != 4) printf("FAIL umin: host %u, device %u, expected 4\n", gold, small_host);
    cudaFree(x), cudaFree(sums), cudaFree(arch), cudaFree(small);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
