// dev/cpu_cuda_gemm_bench.cpp: GFLOP/s of the CPU runtime's cuBLAS (cpu_cuda/cublas_cpu.h)
// on the shapes the GPU trainer calls, for tuning its blocking. A benchmark, not a test.
//
//   make dev/cpu_cuda_gemm_bench && CPU_CUDA_THREADS=2 ./dev/cpu_cuda_gemm_bench
//   (make bench_cpu_cuda runs it too)
#include <chrono>
#include <cstdio>
#include <vector>

struct Shape {
    const char* what;
    cublasOperation_t ta, tb;
    int m, n, k, batch;
    cudaDataType type;  // of A and B; C is float
};

static float* device_floats(size_t n, float value) {
    std::vector<float> h(n, value);
    float* p = nullptr;
    cudaMalloc(&p, n * sizeof(float));
    cudaMemcpy(p, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    return p;
}

int main() {
    const Shape shapes[] = {
        {"fc forward      out = inp·wᵀ  ", CUBLAS_OP_T, CUBLAS_OP_N, 3072, 1024, 768, 1, CUDA_R_32F},
        {"fcproj backward dinp = dout·w ", CUBLAS_OP_N, CUBLAS_OP_N, 768, 1024, 3072, 1, CUDA_R_32F},
        {"fcproj backward dw += doutᵀ·inp", CUBLAS_OP_N, CUBLAS_OP_T, 3072, 768, 1024, 1, CUDA_R_32F},
        {"1024×768×3072 N,N              ", CUBLAS_OP_N, CUBLAS_OP_N, 1024, 768, 3072, 1, CUDA_R_32F},
        {"attention 64×64×64 ×96 batched ", CUBLAS_OP_T, CUBLAS_OP_N, 64, 64, 64, 96, CUDA_R_32F},
        {"lm head 50304×1024×768         ", CUBLAS_OP_T, CUBLAS_OP_N, 50304, 1024, 768, 1, CUDA_R_32F},
        {"fc forward, bf16 inputs        ", CUBLAS_OP_T, CUBLAS_OP_N, 3072, 1024, 768, 1, CUDA_R_16BF},
    };
    cublasHandle_t handle;
    cublasCreate(&handle);
    printf("cpu_cuda cuBLAS, %d threads\n", cpu_cuda::pool().size());
    for (const Shape& s : shapes) {
        size_t a = (size_t)s.m * s.k * s.batch, b = (size_t)s.k * s.n * s.batch, c = (size_t)s.m * s.n * s.batch;
        float *A = device_floats(a, 0.5f), *B = device_floats(b, 0.25f), *C = device_floats(c, 0.0f);
        int lda = s.ta == CUBLAS_OP_N ? s.m : s.k, ldb = s.tb == CUBLAS_OP_N ? s.k : s.n;
        const float one = 1.0f, zero = 0.0f;
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            auto t0 = std::chrono::steady_clock::now();
            cublasStatus_t st = cublasGemmStridedBatchedEx(
                handle, s.ta, s.tb, s.m, s.n, s.k, &one, A, s.type, lda, (long long)s.m * s.k, B, s.type, ldb,
                (long long)s.k * s.n, &zero, C, CUDA_R_32F, s.m, (long long)s.m * s.n, s.batch, CUBLAS_COMPUTE_32F,
                CUBLAS_GEMM_DEFAULT);
            double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (st != CUBLAS_STATUS_SUCCESS) {
                printf("%s: %s\n", s.what, cublasGetStatusName(st));
                return 1;
            }
            best = std::min(best, dt);
        }
        double flops = 2.0 * s.m * s.n * s.k * s.batch;
        printf("%s  %8.2f ms  %6.1f GFLOP/s\n", s.what, best * 1e3, flops / best * 1e-9);
        cudaFree(A), cudaFree(B), cudaFree(C);
    }
    cublasDestroy(handle);
}
