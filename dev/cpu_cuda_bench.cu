// dev/cpu_cuda_bench.cu: what the CPU runtime's execution model costs (make bench_cpu_cuda).
// CPU figures, on whatever machine runs it: a fiber switch, a barrier, a shuffle, a thread
// that never waits, an empty launch, a tensor-core call (WMMA, mma.sync, ldmatrix). Each is
// the best of 5 runs, in CPU time (all threads' together) per unit of work: that is the cost,
// and it moves less than the wall clock on a busy machine.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <functional>

#include "../gpu/mma.cuh"

__global__ void empty_kernel() {}
__global__ void no_wait(float* x) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    x[i] = (float)i;
}
__global__ void barriers(int rounds) {
    for (int r = 0; r < rounds; r++) __syncthreads();
}
__global__ void shuffles(float* out, int rounds) {
    float v = (float)threadIdx.x;
    for (int r = 0; r < rounds; r++) v += __shfl_xor_sync(0xffffffffu, v, r & 31);
    out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

// tensor-core calls, each a rendezvous of the warp: WMMA's product, and gpu/mma.cuh's
__global__ void wmma_products(float* out, int rounds) {
    using namespace nvcuda;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    wmma::fill_fragment(a, 0.5f), wmma::fill_fragment(b, 0.25f), wmma::fill_fragment(c, 0.0f);
    for (int r = 0; r < rounds; r++) wmma::mma_sync(c, a, b, c);
    out[blockIdx.x * blockDim.x + threadIdx.x] = c.x[0];
}
__global__ void mma_products(float* out, int rounds) {
    uint32_t a[4], b[2];
    for (uint32_t& x : a) x = gpu::pack_bf16x2(0.5f, 0.25f);
    for (uint32_t& x : b) x = gpu::pack_bf16x2(0.25f, 0.5f);
    float c[4] = {0, 0, 0, 0};
    for (int r = 0; r < rounds; r++) gpu::mma_bf16_16816(c, a, b);
    out[blockIdx.x * blockDim.x + threadIdx.x] = c[0];
}
__global__ void ldmatrix_loads(float* out, int rounds) {
    __shared__ __align__(16) uint16_t tile[256 * 8];
    for (int i = threadIdx.x; i < 256 * 8; i += blockDim.x) tile[i] = (uint16_t)i;
    __syncthreads();
    uint32_t r[4], sum = 0;
    for (int k = 0; k < rounds; k++) {
        gpu::ldmatrix_x4(r, tile + threadIdx.x * 8);
        sum += r[k & 3];
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = (float)sum;
}

static double cpu_ns() {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}
// Best of 5: CPU nanoseconds per unit of f, which does `units` units of work.
static double ns_per(double units, const std::function<void()>& f) {
    double best = 1e30;
    for (int i = 0; i < 5; i++) {
        double t0 = cpu_ns();
        f();
        best = std::min(best, (cpu_ns() - t0) / units);
    }
    return best;
}

int main() {
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("%s: CPU time per unit, best of 5\n\n", prop.name);
    const int blocks = 64, threads = 256, rounds = 100;
    float* x;
    cudaMalloc(&x, (size_t)blocks * threads * sizeof(float));
    auto check = [] {
        if (cudaGetLastError() != cudaSuccess) {
            printf("launch failed\n");
            exit(1);
        }
    };
    double launch = ns_per(1000, [&] {
        for (int i = 0; i < 1000; i++) empty_kernel<<<1, 1>>>();
        check();
    });
    double thread = ns_per((double)blocks * threads * 20, [&] {
        for (int i = 0; i < 20; i++) no_wait<<<blocks, threads>>>(x);
        check();
    });
    // a barrier makes every thread wait once and be resumed once: two switches each
    double barrier = ns_per((double)blocks * threads * rounds, [&] {
        barriers<<<blocks, threads>>>(rounds);
        check();
    });
    double shuffle = ns_per((double)blocks * threads * rounds, [&] {
        shuffles<<<blocks, threads>>>(x, rounds);
        check();
    });
    double wmma_call = ns_per((double)blocks * threads / 32 * rounds, [&] {
        wmma_products<<<blocks, threads>>>(x, rounds);
        check();
    });
    double mma_call = ns_per((double)blocks * threads / 32 * rounds, [&] {
        mma_products<<<blocks, threads>>>(x, rounds);
        check();
    });
    double ldmatrix_call = ns_per((double)blocks * threads / 32 * rounds, [&] {
        ldmatrix_loads<<<blocks, threads>>>(x, rounds);
        check();
    });
    printf("%-46s %10s\n", "what", "CPU ns");
    printf("%-46s %10.1f\n", "empty launch (1 block of 1 thread)", launch);
    printf("%-46s %10.1f\n", "thread that never waits (64 x 256 threads)", thread);
    printf("%-46s %10.1f\n", "__syncthreads, per thread", barrier);
    printf("%-46s %10.1f\n", "fiber switch (half a barrier per thread)", barrier / 2);
    printf("%-46s %10.1f\n", "__shfl_xor_sync, per lane", shuffle);
    printf("%-46s %10.1f\n", "wmma::mma_sync 16x16x16, per warp", wmma_call);
    printf("%-46s %10.1f\n", "mma.sync m16n8k16 (gpu/mma.cuh), per warp", mma_call);
    printf("%-46s %10.1f\n", "ldmatrix .x4 (gpu/mma.cuh), per warp", ldmatrix_call);
    printf("\n(%d OS threads run blocks; CPU_CUDA_THREADS changes that)\n", prop.multiProcessorCount);
    cudaFree(x);
    return 0;
}
