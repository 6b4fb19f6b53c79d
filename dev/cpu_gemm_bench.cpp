// The matrix products of one GPT-2 124M training step at B=4, T=64 (the four products of each of
// the 12 blocks and the tied classifier): each one's forward, input gradient and weight gradient,
// called as train.cpp's matmul_forward and matmul_backward call host/gemm.h, best of ROUNDS:
// each call timed alone, GFLOP/s and share of the float32 peak, measured in-process (dev/cpu_peak.h) in short rounds
// between the products, so that on a machine other work shares, the products and the peak are
// measured under the same load (the best round of each is kept). The target of docs/speed.md is
// three quarters of the peak at K = 768 and K = 3072.
//   g++ -O3 -march=native -std=c++17 -fno-math-errno -mprefer-vector-width=512 -fopenmp
//       dev/cpu_gemm_bench.cpp -o /tmp/cpu_gemm_bench     (one line), then /tmp/cpu_gemm_bench [ROUNDS]
#define TRAIN_NO_MAIN
#include "../train.cpp"
#include "cpu_peak.h"

int main(int argc, char** argv) {
    choose_passive_openmp_wait(argv);  // the threads wait for work as ./train's do (train.cpp)
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    if (rounds < 1) {
        fprintf(stderr, "usage: %s [ROUNDS >= 1]\n", argv[0]);
        return 2;
    }
    const int BT = 256, C = 768, Vp = 50304;
    struct Product { const char* name; int IC, OC, count; };
    const Product products[] = {{"qkv", C, 3 * C, 12}, {"attproj", C, C, 12}, {"fc", C, 4 * C, 12},
                                {"fcproj", 4 * C, C, 12}, {"classifier", C, Vp, 1}};
    const int P = sizeof products / sizeof products[0];
    // small values, so that nothing overflows or turns denormal over the rounds
    std::vector<float> inp((size_t)BT * 4 * C, 0.01f), w((size_t)Vp * C, 0.02f), out((size_t)BT * Vp),
        dout((size_t)BT * Vp, 1e-3f), dinp((size_t)BT * 4 * C), dw((size_t)Vp * C);
    using clock = std::chrono::steady_clock;
    auto since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
    // best seconds of [product][forward, input gradient, weight gradient], and the best peak round
    std::vector<std::array<double, 3>> best(P, {1e30, 1e30, 1e30});
    double peak = 0;
    for (int r = 0; r < rounds; r++)
        for (int q = 0; q < P; q++) {
            const Product& p = products[q];
            peak = std::max(peak, peak_round(2'000'000));  // ~10 ms on each thread
            // the three calls of matmul_forward (bias: C starts from it) and matmul_backward, each
            // call timed alone: on a shared machine a run of several is seldom left alone throughout
            for (int i = 0; i < p.count; i++) {
                auto t = clock::now();
                gemm(BT, p.OC, p.IC, inp.data(), p.IC, 1, w.data(), 1, p.IC, out.data(), p.OC, p.OC != Vp);
                best[q][0] = std::min(best[q][0], since(t));
                t = clock::now();
                gemm(BT, p.IC, p.OC, dout.data(), p.OC, 1, w.data(), p.IC, 1, dinp.data(), p.IC, false);
                best[q][1] = std::min(best[q][1], since(t));
                t = clock::now();
                gemm(p.OC, p.IC, BT, dout.data(), 1, p.OC, inp.data(), p.IC, 1, dw.data(), p.IC, true);
                best[q][2] = std::min(best[q][2], since(t));
            }
        }
    printf("float32 peak, measured between the products: %.1f GFLOP/s (best of %d rounds, %d threads)\n", peak,
           rounds * P, omp_get_max_threads());
    printf("%-10s  %-28s  %-28s  %-28s\n", "product", "forward", "input gradient", "weight gradient");
    double all_flops = 0, all_seconds = 0, k768 = 0, k768_s = 0, k3072 = 0, k3072_s = 0;
    for (int q = 0; q < P; q++) {
        const Product& p = products[q];
        const double flops = 2.0 * BT * p.IC * p.OC;  // each of the three, one call
        const double step_flops = flops * p.count;    // and in a step
        const int K[3] = {p.IC, p.OC, BT};
        printf("%-10s", p.name);
        for (int s = 0; s < 3; s++) {
            double g = flops / best[q][s] / 1e9;
            printf("  K=%-5d %6.1f GFLOP/s %3.0f%%", K[s], g, 100 * g / peak);
            if (K[s] == 768) k768 += step_flops, k768_s += best[q][s] * p.count;
            if (K[s] == 3072) k3072 += step_flops, k3072_s += best[q][s] * p.count;
            all_flops += step_flops, all_seconds += best[q][s] * p.count;
        }
        printf("\n");
    }
    printf("products with K = 768:  %6.1f GFLOP/s, %3.0f%% of the peak (target 75%%)\n", k768 / k768_s / 1e9,
           100 * k768 / k768_s / 1e9 / peak);
    printf("products with K = 3072: %6.1f GFLOP/s, %3.0f%% of the peak (target 75%%)\n", k3072 / k3072_s / 1e9,
           100 * k3072 / k3072_s / 1e9 / peak);
    printf("all products of a step: %.1f GFLOP in %.1f ms (best calls), %.1f GFLOP/s, %.0f%% of the peak\n", all_flops / 1e9,
           all_seconds * 1e3, all_flops / all_seconds / 1e9, 100 * all_flops / all_seconds / 1e9 / peak);
}
