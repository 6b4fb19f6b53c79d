// dev/cpu_cuda_bench.cu: what the CPU runtime's execution model costs (make bench_cpu_cuda).
// CPU figures, on whatever machine runs it: a fiber switch, a barrier, a shuffle, a thread
// that never waits, an empty launch. Each is the best of 5 runs, in CPU time (all threads'
// together) per unit of work: that is the cost, and it moves less than the wall clock on
// a busy machine.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <functional>

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
    printf("%-46s %10s\n", "what", "CPU ns");
    printf("%-46s %10.1f\n", "empty launch (1 block of 1 thread)", launch);
    printf("%-46s %10.1f\n", "thread that never waits (64 x 256 threads)", thread);
    printf("%-46s %10.1f\n", "__syncthreads, per thread", barrier);
    printf("%-46s %10.1f\n", "fiber switch (half a barrier per thread)", barrier / 2);
    printf("%-46s %10.1f\n", "__shfl_xor_sync, per lane", shuffle);
    printf("\n(%d OS threads run blocks; CPU_CUDA_THREADS changes that)\n", prop.multiProcessorCount);
    cudaFree(x);
    return 0;
}
