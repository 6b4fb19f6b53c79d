// The machine's float32 peak, measured: every thread runs 12 independent chains of vector
// fused multiply-adds (enough to hide the FMA latency on both FMA pipes of current x86 cores)
// with no memory traffic, and the best of several rounds is printed. This is the figure
// docs/speed.md compares the matrix products with, rather than a count of units × lanes ×
// clock, which depends on assumptions (AMD's Zen 4 runs a 512-bit FMA as two 256-bit halves;
// the turbo clock under load is unknown).
//   g++ -O2 -march=native -fopenmp dev/cpu_peak.cpp -o /tmp/cpu_peak && /tmp/cpu_peak
#include <chrono>
#include <cstdio>
#include <omp.h>

#if defined(__AVX512F__)
constexpr int VEC = 16;
#elif defined(__AVX__)
constexpr int VEC = 8;
#else
constexpr int VEC = 4;
#endif
typedef float SimdVec __attribute__((vector_size(VEC * sizeof(float))));

int main() {
    const long iters = 50'000'000;
    double best = 0;
    for (int round = 0; round < 5; round++) {
        auto start = std::chrono::steady_clock::now();
        float sink = 0;
#pragma omp parallel reduction(+ : sink)
        {
            SimdVec m = (SimdVec){} + 0.999f, c = (SimdVec){} + 1e-6f;
            SimdVec a0 = m, a1 = m, a2 = m, a3 = m, a4 = m, a5 = m, a6 = m, a7 = m, a8 = m, a9 = m, a10 = m, a11 = m;
            for (long i = 0; i < iters; i++) {
                a0 = a0 * m + c, a1 = a1 * m + c, a2 = a2 * m + c, a3 = a3 * m + c;
                a4 = a4 * m + c, a5 = a5 * m + c, a6 = a6 * m + c, a7 = a7 * m + c;
                a8 = a8 * m + c, a9 = a9 * m + c, a10 = a10 * m + c, a11 = a11 * m + c;
                // keeps the 12 chains in registers and in this order (no reassociation)
                asm volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));
                asm volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
            }
            SimdVec s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
            sink += s[0];
        }
        double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        double gflops = omp_get_max_threads() * iters * 12.0 * VEC * 2 / seconds / 1e9;
        if (gflops > best) best = gflops;
        if (sink != sink) return 1;  // uses the result
    }
    printf("float32 peak: %.1f GFLOP/s on %d threads (%d-float vectors, best of 5 rounds)\n", best,
           omp_get_max_threads(), VEC);
}
