// The machine's float32 peak, measured (dev/cpu_peak.cpp prints it; dev/cpu_gemm_bench.cpp sets
// each matrix product against it): every thread runs 12 independent chains of vector fused
// multiply-adds (enough to hide the FMA latency on both FMA pipes of current x86 cores) with no
// memory traffic. One call is one round of `iters` steps of the 12 chains on every thread of an
// OpenMP team; it returns the round's GFLOP/s. Callers keep the best of several rounds.
#pragma once
#include <chrono>
#include <omp.h>

#if defined(__AVX512F__)
constexpr int PEAK_VEC = 16;
#elif defined(__AVX__)
constexpr int PEAK_VEC = 8;
#else
constexpr int PEAK_VEC = 4;
#endif

inline double peak_round(long iters) {
    typedef float Vec __attribute__((vector_size(PEAK_VEC * sizeof(float))));
    auto start = std::chrono::steady_clock::now();
    float sink = 0;
#pragma omp parallel reduction(+ : sink)
    {
        Vec m = (Vec){} + 0.999f, c = (Vec){} + 1e-6f;
        Vec a0 = m, a1 = m, a2 = m, a3 = m, a4 = m, a5 = m, a6 = m, a7 = m, a8 = m, a9 = m, a10 = m, a11 = m;
        for (long i = 0; i < iters; i++) {
            a0 = a0 * m + c, a1 = a1 * m + c, a2 = a2 * m + c, a3 = a3 * m + c;
            a4 = a4 * m + c, a5 = a5 * m + c, a6 = a6 * m + c, a7 = a7 * m + c;
            a8 = a8 * m + c, a9 = a9 * m + c, a10 = a10 * m + c, a11 = a11 * m + c;
            // keeps the 12 chains in registers and in this order (no reassociation)
            asm volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));
            asm volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
        }
        Vec s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
        sink += s[0];
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (sink != sink) return 0;  // uses the result (the chains stay finite: 0.999·x + 1e-6)
    return omp_get_max_threads() * iters * 12.0 * PEAK_VEC * 2 / seconds / 1e9;
}
