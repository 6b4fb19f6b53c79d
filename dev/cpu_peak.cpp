// The machine's float32 peak, measured (dev/cpu_peak.h): the best of several rounds of vector
// fused multiply-adds with no memory traffic. This is the figure docs/speed.md compares the
// matrix products with, rather than a count of units × lanes × clock, which depends on
// assumptions (AMD's Zen 4 runs a 512-bit FMA as two 256-bit halves, Zen 5 as one; the turbo
// clock under load is unknown). dev/cpu_gemm_bench.cpp measures the same in-process, between its
// products, on a machine that other work may share.
//   g++ -O2 -march=native -fopenmp dev/cpu_peak.cpp -o /tmp/cpu_peak && /tmp/cpu_peak
#include <cstdio>
#include "cpu_peak.h"

int main() {
    double best = 0;
    for (int round = 0; round < 5; round++) {
        double gflops = peak_round(50'000'000);
        if (gflops > best) best = gflops;
    }
    if (best <= 0) return 1;
    printf("float32 peak: %.1f GFLOP/s on %d threads (%d-float vectors, best of 5 rounds)\n", best,
           omp_get_max_threads(), PEAK_VEC);
}
