// The matrix products of one GPT-2 124M training step at B=4, T=64 (the four products of each of
// the 12 blocks and the tied classifier; forward, input gradient, weight gradient), each timed
// through train.cpp's matmul_forward/matmul_backward, best of ROUNDS: GFLOP/s per product and
// over all of them, to set against dev/cpu_peak.cpp's figure (docs/speed.md).
//   g++ -O3 -march=native -std=c++17 -fno-math-errno -mprefer-vector-width=512 -fopenmp
//       dev/cpu_gemm_bench.cpp -o /tmp/cpu_gemm_bench     (one line), then /tmp/cpu_gemm_bench [ROUNDS]
#define TRAIN_NO_MAIN
#include "../train.cpp"

int main(int argc, char** argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    const int BT = 256, C = 768, Vp = 50304;
    struct Product { const char* name; int IC, OC, count; };
    const Product products[] = {{"qkv", C, 3 * C, 12}, {"attproj", C, C, 12}, {"fc", C, 4 * C, 12},
                                {"fcproj", 4 * C, C, 12}, {"classifier", C, Vp, 1}};
    // small values, so that nothing overflows or turns denormal over the rounds
    std::vector<float> inp((size_t)BT * 4 * C, 0.01f), w((size_t)Vp * C, 0.02f), out((size_t)BT * Vp),
        dout((size_t)BT * Vp, 1e-3f), dinp((size_t)BT * 4 * C), dw((size_t)Vp * C), bias(Vp), dbias(Vp);
    using clock = std::chrono::steady_clock;
    double all_flops = 0, all_seconds = 0;
    printf("best of %d rounds, %d threads\n", rounds, omp_get_max_threads());
    for (const Product& p : products) {
        const float* b = p.OC == Vp ? nullptr : bias.data();  // the classifier has no bias
        double fwd = 1e30, bwd = 1e30;
        for (int r = 0; r < rounds; r++) {
            auto t0 = clock::now();
            for (int i = 0; i < p.count; i++) matmul_forward(out.data(), inp.data(), w.data(), b, BT, p.IC, p.OC);
            auto t1 = clock::now();
            for (int i = 0; i < p.count; i++)
                matmul_backward(dinp.data(), dw.data(), b ? dbias.data() : nullptr, dout.data(), inp.data(), w.data(),
                                BT, p.IC, p.OC);
            auto t2 = clock::now();
            fwd = std::min(fwd, std::chrono::duration<double>(t1 - t0).count());
            bwd = std::min(bwd, std::chrono::duration<double>(t2 - t1).count());
        }
        double flops = 2.0 * BT * p.IC * p.OC * p.count;  // one product; the backward has two
        printf("%-10s forward %6.1f GFLOP/s   backward (both) %6.1f GFLOP/s\n", p.name, flops / fwd / 1e9,
               2 * flops / bwd / 1e9);
        all_flops += 3 * flops, all_seconds += fwd + bwd;
    }
    printf("all products: %.1f GFLOP in %.1f ms, %.1f GFLOP/s\n", all_flops / 1e9, all_seconds * 1e3,
           all_flops / all_seconds / 1e9);
}
