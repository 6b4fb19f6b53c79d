// Tests of host/cost.h, the arithmetic behind the dry run's plan and the step line's FLOP/s
// (doctest). The references are independent of the formulas:
//   * FLOPs: PyTorch's FlopCounterMode run over the reference model's forward and backward
//     (test/golden/flops.txt, from dev/reference/flops_reference.py), for five shapes;
//   * communication: a ring all-reduce carried out here on R vectors, counting the bytes each
//     rank sends, and checking that it sums correctly.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../host/cost.h"

static ModelConfig model(int L, int NH, int C, int T, int V, int Vp) {
    ModelConfig c;
    c.L = L, c.NH = NH, c.C = C, c.maxT = T, c.V = V, c.Vp = Vp;
    return c;
}

TEST_CASE("FLOPs per step: the formula with full attention equals PyTorch's count exactly") {
    std::ifstream in("test/golden/flops.txt");
    REQUIRE_MESSAGE(in, "test/golden/flops.txt is missing (run from the repository root)");
    int shapes = 0;
    for (std::string line; std::getline(in, line);) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream fields(line);
        int L, NH, C, T, V, Vp, B;
        double counted;
        REQUIRE((fields >> L >> NH >> C >> T >> V >> Vp >> B >> counted));
        ModelConfig c = model(L, NH, C, T, V, Vp);
        BatchPlan p = plan_batch(B, T, 1, 0);
        // PyTorch counts all T×T attention scores; our formula's parameter term plus the full
        // attention term must give its count. Both are integers below 2^53, so exactly.
        double full = (6.0 * matmul_params(c) + full_attention_flops_per_token(c, T)) * p.global_tokens();
        INFO("L ", L, " C ", C, " T ", T, " Vp ", Vp, " B ", B);
        CHECK(full == counted);
        // The causal count keeps (T + 1)/(2T) of the attention products: the useful half.
        TokenFlops f = flops_per_token(c, T);
        CHECK(f.params == 6.0 * matmul_params(c));
        CHECK(f.attention == doctest::Approx(full_attention_flops_per_token(c, T) * (T + 1) / (2.0 * T)).epsilon(1e-15));
        shapes++;
    }
    CHECK(shapes == 5);
}

TEST_CASE("FLOPs per step scale with the global batch, however it is split") {
    ModelConfig c = model(12, 12, 768, 1024, 50257, 50304);
    double one = flops_per_step(c, plan_batch(1, 1024, 1, 0));
    // 124M at T=1024: 6·P + 6·L·C·(T+1) per token, P = 85.0M + 38.6M = 123.6M → 0.80 GFLOP/token
    CHECK(one / 1024 == doctest::Approx(6.0 * (12.0 * 12 * 768 * 768 + 50304.0 * 768) + 6.0 * 12 * 768 * 1025));
    for (auto [B, R] : {std::pair{64, 1}, {16, 4}, {8, 8}, {1, 512}}) {
        BatchPlan p = plan_batch(B, 1024, R, 524288);  // llm.c's GPT-2 124M batch: 2^19 tokens
        CHECK(flops_per_step(c, p) == doctest::Approx(one * 512).epsilon(1e-15));
    }
}

// A ring all-reduce of R vectors of n floats, done the textbook way. The vector is cut into
// R chunks. Reduce-scatter: in round k (of R − 1) rank r sends chunk (r − k) mod R to rank
// r + 1, which adds it to its own; afterwards rank r holds the full sum of chunk (r + 1) mod R.
// All-gather: in round k rank r passes chunk (r + 1 − k) mod R on, and the receiver keeps it.
// Returns the bytes each rank sent (the same for all) and leaves the sums in data.
static double ring_allreduce(std::vector<std::vector<float>>& data) {
    int R = (int)data.size();
    size_t n = data[0].size();
    std::vector<double> sent(R, 0);
    for (int gather = 0; gather < 2; gather++)
        for (int k = 0; k < R - 1; k++) {
            std::vector<std::vector<float>> next = data;  // every rank sends at once
            for (int r = 0; r < R; r++) {
                int c = ((gather ? r + 1 - k : r - k) % R + R) % R, to = (r + 1) % R;
                for (size_t i = n * c / R; i < n * (c + 1) / R; i++)
                    next[to][i] = gather ? data[r][i] : next[to][i] + data[r][i];
                sent[r] += 4.0 * (n * (c + 1) / R - n * c / R);
            }
            data = next;
        }
    for (int r = 1; r < R; r++) REQUIRE(sent[r] == sent[0]);
    return sent[0];
}

TEST_CASE("gradient sync bytes: a ring all-reduce sends 2·(R−1)/R of the buffer per rank") {
    for (int R : {1, 2, 4, 8}) {
        size_t n = 8 * 97;  // divisible by every R here, so the chunks are equal
        std::vector<std::vector<float>> data(R, std::vector<float>(n));
        std::vector<float> sum(n, 0);
        for (int r = 0; r < R; r++)
            for (size_t i = 0; i < n; i++) sum[i] += data[r][i] = (float)(r + 1) * (i % 13);  // small integers: exact sums
        double sent = ring_allreduce(data);
        INFO("R = ", R);
        CHECK(sent == allreduce_bytes((double)n, R));
        for (int r = 0; r < R; r++) CHECK(data[r] == sum);  // the ring really summed
    }
    ModelConfig c = model(12, 12, 768, 1024, 50257, 50304);
    CHECK(gradient_sync_bytes(c, 1) == 0);
    CHECK(gradient_sync_bytes(c, 8) == 2.0 * 7 / 8 * 4 * c.num_params());
}

TEST_CASE("device figures: presets, overrides, and one clear error for a bad one") {
    DeviceSpeed h100 = device_speed("h100-sxm", 0, 0);
    CHECK(h100.tflops == 989);
    CHECK(h100.link_gbps == 3600);
    DeviceSpeed own = device_speed("h100-sxm", 400, 0);  // a measured figure overrides the data sheet
    CHECK(own.tflops == 400);
    CHECK(own.link_gbps == 3600);
    CHECK(device_speed("", 0, 0).tflops == 0);
    auto message = [](auto f) {
        try {
            f();
        } catch (const UsageError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    std::string unknown = message([] { device_speed("h100", 0, 0); });
    CHECK(unknown.find("'h100'") != std::string::npos);
    CHECK(unknown.find("h100-sxm, h100-pcie, a100-sxm") != std::string::npos);
    CHECK(message([] { device_speed("", -5, 0); }).find("--device-tflops") != std::string::npos);
    CHECK(message([] { device_speed("", 0, -1); }).find("--link-gbps") != std::string::npos);
    CHECK(message([] { device_speed("", NAN, 0); }).find("--device-tflops") != std::string::npos);
}

TEST_CASE("time estimates: compute at the device's peak, split over replicas, plus the sync") {
    ModelConfig c = model(12, 12, 768, 1024, 50257, 50304);
    BatchPlan p = plan_batch(64, 1024, 8, 524288);
    RunPlan r = plan_run(c, p, 100, DeviceSpeed{"x", 100, 800});
    // 524,288 tokens × 797.9 MFLOP/token over 8 replicas at 1e14 FLOP/s each
    double flops = 524288.0 * (6 * (12.0 * 12 * 768 * 768 + 50304.0 * 768) + 6.0 * 12 * 768 * 1025);
    CHECK(r.compute_s == doctest::Approx(flops / 8 / 1e14).epsilon(1e-12));
    // 2·7/8 of the float32 gradients, at 800 Gbit/s = 1e11 bytes/s
    CHECK(r.comm_s == doctest::Approx(2.0 * 7 / 8 * 4 * c.num_params() / 1e11).epsilon(1e-12));
    CHECK(r.efficiency() == doctest::Approx(r.compute_s / (r.compute_s + r.comm_s)));
    CHECK(r.gpu_hours() == doctest::Approx(100 * 8 * (r.compute_s + r.comm_s) / 3600));
}
