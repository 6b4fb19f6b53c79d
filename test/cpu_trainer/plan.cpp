// Tests of host/cost.h, the arithmetic behind the dry run's plan and the step line's FLOP/s
// (doctest). The references are independent of the formulas:
//   * FLOPs: PyTorch's FlopCounterMode run over the reference model's forward and backward
//     (test/golden/flops.txt, from dev/reference/flops_reference.py), for five GPT-2 shapes
//     and six Llama-3 ones (two of them Llama-3.2 1B's and Llama-3.1 8B's);
//   * the presets' parameter counts: the published ones, worked out from the models'
//     configurations below, not from the code;
//   * communication: a ring all-reduce carried out here on R vectors, counting the bytes each
//     rank sends, and checking that it sums correctly;
//   * the printed plan: the numbers parsed back from ./train --dry-run against those two, and
//     the parameter count the trainer prints.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "../../host/cost.h"
#include "../../host/model.h"
#include "../test_util.h"

static ModelConfig model(int L, int NH, int C, int T, int V, int Vp) {
    ModelConfig c;
    c.L = L, c.NH = NH, c.C = C, c.maxT = T, c.V = V, c.Vp = Vp;
    return c;
}
static ModelConfig llama(int L, int NH, int KVH, int C, int F, int T, int V, int Vp, int tied) {
    ModelConfig c = model(L, NH, C, T, V, Vp);
    c.family = Family::llama3, c.KVH = KVH, c.F = F, c.tied = tied;
    return c;
}

TEST_CASE("FLOPs per step: the formula with full attention equals PyTorch's count exactly") {
    std::ifstream in("test/golden/flops.txt");
    REQUIRE_MESSAGE(in, "test/golden/flops.txt is missing (run from the repository root)");
    int shapes = 0, llama_shapes = 0;
    for (std::string line; std::getline(in, line);) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream fields(line);
        // GPT-2: "L NH C T V Vp B flops"; Llama-3: "llama3 L NH KVH C F T V Vp tied B flops"
        bool is_llama = line.rfind("llama3 ", 0) == 0;
        int L, NH, KVH = 0, C, F = 0, T, V, Vp, tied = 1, B;
        double counted;
        std::string family;
        if (is_llama)
            REQUIRE((fields >> family >> L >> NH >> KVH >> C >> F >> T >> V >> Vp >> tied >> B >> counted));
        else
            REQUIRE((fields >> L >> NH >> C >> T >> V >> Vp >> B >> counted));
        ModelConfig c = is_llama ? llama(L, NH, KVH, C, F, T, V, Vp, tied) : model(L, NH, C, T, V, Vp);
        BatchPlan p = plan_batch(B, T, 1, 0);
        // PyTorch counts all T×T attention scores; our formula's parameter term plus the full
        // attention term must give its count. Both are integers below 2^53, so exactly.
        double full = (6.0 * matmul_params(c) + full_attention_flops_per_token(c, T)) * p.global_tokens();
        INFO(line);
        CHECK(full == counted);
        llama_shapes += is_llama;
        // The causal count keeps (T + 1)/(2T) of the attention products: the useful half.
        TokenFlops f = flops_per_token(c, T);
        CHECK(f.params == 6.0 * matmul_params(c));
        CHECK(f.attention == doctest::Approx(full_attention_flops_per_token(c, T) * (T + 1) / (2.0 * T)).epsilon(1e-15));
        shapes += !is_llama;
    }
    CHECK(shapes == 5);
    CHECK(llama_shapes == 6);
}

// Llama's parameter term by hand, for the 1B shape: per block the q product C·C, k and v
// 2·C·(KVH·hs) (not 2·C·C: grouped-query attention), the projection C·C, and the MLP's three
// C×F matrices (W1 gate, W3 up, W2); then the head's Vp·C, once, tied or not.
TEST_CASE("FLOPs per token for Llama: K/V heads KVH·hs wide, three C×F matrices, the head's Vp·C") {
    ModelConfig c = llama(16, 32, 8, 2048, 8192, 8192, 128256, 128256, 1);
    const double C = 2048, kv = 8 * 64, F = 8192, per_block = C * C + 2 * C * kv + C * C + 3 * C * F;
    CHECK(matmul_params(c) == 16 * per_block + 128256 * C);
    c.tied = 0;  // its own head: the same product, so the same FLOPs (one more tensor of weights, though)
    CHECK(matmul_params(c) == 16 * per_block + 128256 * C);
    // the attention's products are the NH query heads', whatever KVH heads they read
    ModelConfig mha = c;
    mha.KVH = 32;
    CHECK(flops_per_token(c, 2048).attention == flops_per_token(mha, 2048).attention);
    CHECK(flops_per_token(c, 2048).attention == 6.0 * 16 * 2048 * 2049);
    CHECK(flops_per_token(c, 2048).params < flops_per_token(mha, 2048).params);
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
    // --grad-sync-dtype bf16: 2 bytes a gradient on the wire
    CHECK(gradient_sync_bytes(c, 8, 2) == 2.0 * 7 / 8 * 2 * c.num_params());
}

// --zero 1 moves the all-reduce's two halves as two collectives: the reduce-scatter of the
// float32 gradients and the all-gather of the weights (float32 on the CPU: the same bytes as
// the all-reduce; bf16 on the GPU: 3/4 of them). The padding to whole shards of 8 values adds
// at most 8·R values.
TEST_CASE("gradient sync bytes with ZeRO stage 1: a reduce-scatter and an all-gather") {
    ModelConfig c = model(12, 12, 768, 1024, 50257, 50304);
    const double n = (double)c.num_params();
    CHECK(zero_sync_bytes(c, 1, 4) == 0);
    for (int R : {2, 3, 4, 8}) {
        CAPTURE(R);
        const double padding = 8.0 * R * 8;  // at most 8·R values of 8 bytes (4 + 4)
        CHECK(zero_sync_bytes(c, R, 4) >= gradient_sync_bytes(c, R));
        CHECK(zero_sync_bytes(c, R, 4) <= gradient_sync_bytes(c, R) + padding);
        CHECK(std::fabs(zero_sync_bytes(c, R, 2) - (R - 1.0) / R * 6 * n) <= padding);
        // bf16 gradients (--grad-sync-dtype bf16) and bf16 weights: 2 + 2 bytes a value
        CHECK(std::fabs(zero_sync_bytes(c, R, 2, 2) - (R - 1.0) / R * 4 * n) <= padding);
    }
}

TEST_CASE("device figures: presets, overrides, and one clear error for a bad one") {
    DeviceSpeed h100 = device_speed("h100-sxm", 0, 0);
    CHECK(h100.tflops == 989);
    CHECK(h100.link_gbps == 3600);
    DeviceSpeed own = device_speed("h100-sxm", 400, 0);  // a measured figure overrides the data sheet
    CHECK(own.tflops == 400);
    CHECK(own.link_gbps == 3600);
    // H200: H100 SXM's compute and NVLink, HBM3e at 4.8 TB/s (NVIDIA's H200 data sheet)
    DeviceSpeed h200 = device_speed("h200", 0, 0);
    CHECK(h200.tflops == 989);
    CHECK(h200.memory_gbs == 4800);
    CHECK(h200.link_gbps == 3600);
    CHECK(device_limits_named("h200").major == 9);
    CHECK(device_limits_named("h200").smem_optin == (size_t)227 << 10);
    CHECK(device_speed("", 0, 0).tflops == 0);
    auto message = [](auto f) {
        try {
            f();
        } catch (const UsageError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    std::string unknown = message([] { device_speed("b300", 0, 0); });
    CHECK(unknown.find("'b300'") != std::string::npos);
    CHECK(unknown.find("h100-sxm, h200, h100-pcie, a100-sxm") != std::string::npos);
    // the GPUs known for the kernel plan only (host/device_limits.h) are named too, and taken
    // without speed figures
    CHECK(unknown.find("for the kernel plan only: t4, v100, a10, rtx4090, a100, h100") != std::string::npos);
    DeviceSpeed t4 = device_speed("t4", 0, 0);
    CHECK(t4.name == "t4");
    CHECK(t4.tflops == 0);
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

// ---- the plan as the trainers print it (--dry-run), and the FLOP/s of the step line. These
// run ./train (and ./train_gpt_cpu where it was built) and parse the numbers back.

// A shape PyTorch counted (flops.txt: 2 4 32 256 300 320 2 → 207,618,048 FLOPs for 2×256
// tokens); V = 300 ≥ 256, so the built-in corpus serves as data.
static const std::string SHAPE = "--layers 2 --heads 4 --channels 32 --max-seq-len 256 --vocab 300 --padded-vocab 320 "
                                 "-b 2 -t 256 -o '' ";
// Its causal FLOPs per token: PyTorch's count per token less the masked half of attention,
// 12·L·C·T − 6·L·C·(T + 1) = 6·L·C·(T − 1).
static const double SHAPE_FLOPS_PER_TOKEN = 207618048.0 / 512 - 6.0 * 2 * 32 * 255;

// The size of a printed unit: "MiB" → 2^20, "ms" → 1e-3, "GFLOP" → 1e9; NAN if unknown.
static double unit_size(const std::string& unit) {
    struct Unit {
        const char* name;
        double size;
    };
    const Unit units[] = {{"bytes", 1}, {"KiB", 1024}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
                          {"µs", 1e-6}, {"ms", 1e-3}, {"s", 1}, {"min", 60}, {"h", 3600},
                          {"FLOP", 1}, {"kFLOP", 1e3}, {"MFLOP", 1e6}, {"GFLOP", 1e9}, {"TFLOP", 1e12}, {"PFLOP", 1e15}};
    for (const Unit& u : units)
        if (unit == u.name) return u.size;
    return NAN;
}
// The quantity after `marker` in `text`, "4.9 MiB", "52.4 ms", "83.8 GFLOP" or a bare "0",
// in bytes, seconds or FLOPs; `unit` gets the size of its unit. NAN when not found.
static double quantity_after(const std::string& text, const std::string& marker, double* unit = nullptr) {
    size_t at = text.find(marker);
    if (at == std::string::npos) return NAN;
    std::istringstream in(text.substr(at + marker.size()));
    double v;
    std::string word;
    if (!(in >> v)) return NAN;
    double size = NAN;
    if (in.peek() == ' ' && in >> word) {
        while (!word.empty() && strchr(",;)", word.back())) word.pop_back();
        size = unit_size(word);
    }
    if (v == 0 && std::isnan(size)) size = 1;  // format_seconds(0) is a bare "0"
    if (unit) *unit = size;
    return v * size;
}
// The parameter count from the model line, "..., 36,352 parameters": what the trainer sums,
// not what cost.h computes.
static double parameters_printed(const std::string& out) {
    size_t end = out.find(" parameters\n");
    if (end == std::string::npos) return NAN;
    size_t start = out.rfind(' ', end - 1) + 1;
    std::string digits;
    for (size_t i = start; i < end; i++)
        if (isdigit((unsigned char)out[i])) digits += out[i];
    return digits.empty() ? NAN : atof(digits.c_str());
}
// The output from the line that starts with `start` on; fails the test if there is none.
static std::string from_line(const std::string& out, const std::string& start) {
    size_t at = out.find("\n" + start);
    REQUIRE_MESSAGE(at != std::string::npos, "no line starting with '", start, "'");
    return out.substr(at + 1);
}
// Three significant digits (format_flops, format_seconds): within half a unit of the third,
// at most 5e-3 of the value (and a little more for the parse's own rounding).
static void check_3_digits(double printed, double expected) {
    CHECK(std::isfinite(printed));
    CHECK(std::fabs(printed - expected) <= 5.001e-3 * expected);
}
// format_bytes prints one decimal of its unit: within half of it (and a hair for the parse).
static void check_bytes(double printed, double unit, double expected) {
    CHECK(std::isfinite(printed));
    CHECK(std::fabs(printed - expected) <= 0.05001 * unit);
}

TEST_CASE("the dry run's plan: FLOPs per step and in total, and the gradient sync of R = 1, 2, 4, 8") {
    for (int R : {1, 2, 4, 8}) {
        std::string out;
        REQUIRE(run_command("./train " + SHAPE + strf("-d 4096 -n 100 --replicas %d --dry-run 1", R), &out) == 0);
        INFO("R = ", R, "\n", out);
        double per_step = 4096 * SHAPE_FLOPS_PER_TOKEN;
        std::string compute = from_line(out, "compute: ");
        check_3_digits(quantity_after(compute, "); "), per_step);
        check_3_digits(quantity_after(compute, " per step, "), 100 * per_step);
        double n = parameters_printed(out);
        REQUIRE(n > 0);
        // The ring by hand above: each replica sends 2·(R−1)/R of the 4-byte gradients.
        if (R == 1) {
            CHECK(out.find("communication: none (one replica)") != std::string::npos);
        } else {
            double unit, sent = quantity_after(out, "each replica sends and receives ", &unit);
            check_bytes(sent, unit, 2.0 * (R - 1) / R * 4 * n);
        }
        CHECK((out.find(strf("(the plan is for --replicas %d)", R)) != std::string::npos) == (R > 1));
    }
}

TEST_CASE("the dry run's table: the same global batch over R = 1 .. 8, A·R constant, one sync per step") {
    std::string out;
    REQUIRE(run_command("./train " + SHAPE + "-d 4096 --replicas 2 --dry-run 1", &out) == 0);
    INFO(out);
    double n = parameters_printed(out);
    size_t header = out.find("  replicas  accumulation");
    REQUIRE(header != std::string::npos);
    std::istringstream rows(out.substr(out.find('\n', header) + 1));
    std::vector<int> Rs;
    for (std::string row; std::getline(rows, row) && !row.empty() && row[0] == ' ';) {  // (the ZeRO table follows)
        // R, A, FLOP per replica per step, sync bytes per step, the same after every micro-batch
        std::istringstream f(row);
        int R, A;
        double flop, sync, every;
        std::string flop_unit, sync_unit, every_unit;
        REQUIRE((f >> R >> A >> flop >> flop_unit >> sync >> sync_unit >> every >> every_unit));
        Rs.push_back(R);
        CHECK(2 * 256 * A * R == 4096);  // B·T·A·R: the global batch in every row
        check_3_digits(flop * unit_size(flop_unit), 4096 * SHAPE_FLOPS_PER_TOKEN / R);
        double ring = R == 1 ? 0 : 2.0 * (R - 1) / R * 4 * n;  // one all-reduce per step
        check_bytes(sync * unit_size(sync_unit), unit_size(sync_unit), ring);
        check_bytes(every * unit_size(every_unit), unit_size(every_unit), A * ring);  // A syncs instead of one
        CHECK((row.find("<- this run") != std::string::npos) == (R == 2));
    }
    CHECK(Rs == std::vector<int>{1, 2, 4, 8});
}

TEST_CASE("the dry run's estimates: compute at the given peak, the sync over the given link") {
    std::string out;
    REQUIRE(run_command("./train " + SHAPE + "-d 4096 -n 1000 --replicas 4 --device-tflops 2 --link-gbps 8 --dry-run 1",
                        &out) == 0);
    INFO(out);
    std::string estimate = from_line(out, "estimate for ");
    double compute = 4096 * SHAPE_FLOPS_PER_TOKEN / 4 / 2e12;
    double sync = 2.0 * 3 / 4 * 4 * parameters_printed(out) * 8 / 8e9;  // bits over 8 Gbit/s
    check_3_digits(quantity_after(estimate, "without overlap: compute "), compute);
    check_3_digits(quantity_after(estimate, "+ gradient sync "), sync);
    check_3_digits(quantity_after(estimate, " = "), compute + sync);
    // the efficiency, printed with one decimal of a percent
    double efficiency = atof(estimate.c_str() + estimate.find("scaling efficiency ") + 19);
    CHECK(std::fabs(efficiency - 100 * compute / (compute + sync)) <= 0.05001);
    check_3_digits(quantity_after(estimate, "; the run: "), 1000 * (compute + sync));
}

// The dry run's ZeRO table: a row per replica count, the memory with --zero 1 below that of
// --zero 0 from R = 2 on (AdamW's state, 8 bytes per parameter, divided by R: for this model
// 8 · 858,880 · (1 − 1/R) bytes less, the padding aside) and the same at R = 1.
TEST_CASE("the dry run's ZeRO table: memory per replica with and without --zero 1, and the sync bytes") {
    std::string out;
    REQUIRE(run_command("./train -d 2048 -t 64 -b 4 --replicas 8 --zero 1 --dry-run 1", &out) == 0);
    std::string table = from_line(out, "memory per replica and sync bytes");
    const double params = 858880;  // the default model's (printed on the model line)
    REQUIRE(out.find("858,880 parameters") != std::string::npos);
    for (int R : {1, 2, 4, 8}) {
        CAPTURE(R);
        std::string row = from_line(table, strf("  %8d  ", R));
        row = row.substr(0, row.find('\n'));
        double zero0 = 0, zero1 = 0;
        char u0[8], u1[8];
        REQUIRE(sscanf(row.c_str(), "%*d %lf %7s %lf %7s", &zero0, u0, &zero1, u1) == 4);
        REQUIRE(std::string(u0) == "MiB");
        REQUIRE(std::string(u1) == "MiB");
        const double saved = (zero0 - zero1) * 1048576, expected = 8 * params * (1 - 1.0 / R);
        // each figure is printed to 0.1 MiB, so each is off by up to 0.05 MiB and their difference by 0.1
        CHECK(std::fabs(saved - expected) <= 0.1 * 1048576 + 8 * 8 * R);
    }
    CHECK(out.find("communication (--zero 1): a reduce-scatter") != std::string::npos);
}

TEST_CASE("both trainers print the same plan") {
    // train_gpt_cpu is built where the CUDA toolkit's headers are (make test does). Without
    // it nothing is compared: a skip, which test/run_all.sh counts from this line
    if (access("./train_gpt_cpu", X_OK) != 0) {
        std::printf("SKIP both trainers print the same plan: ./train_gpt_cpu is not built (make train_gpt_cpu)\n");
        std::fflush(stdout);
        return;
    }
    std::string a, b;
    std::string args = SHAPE + "-d 4096 --replicas 4 --device h100-sxm --dry-run 1";
    REQUIRE(run_command("./train " + args, &a) == 0);
    REQUIRE(run_command("./train_gpt_cpu " + args, &b) == 0);
    // up to the ZeRO table, whose memory is each trainer's own
    auto plan = [](const std::string& out) {
        std::string from = from_line(out, "compute: ");
        return from.substr(0, from.find("memory per replica and sync bytes"));
    };
    CHECK(plan(a) == plan(b));
    CHECK(plan(a).find("replicas  accumulation") != std::string::npos);  // (the cut left the table above it)
    // --grad-sync-dtype bf16 (the GPU trainer's): the sync moves 2 bytes a gradient, not 4
    std::string bf16;
    REQUIRE(run_command("./train_gpt_cpu " + args + " --link-gbps 8 --grad-sync-dtype bf16", &bf16) == 0);
    REQUIRE(run_command("./train_gpt_cpu " + args + " --link-gbps 8", &b) == 0);
    double fp32_s = quantity_after(from_line(b, "estimate for "), "+ gradient sync ");
    double bf16_s = quantity_after(from_line(bf16, "estimate for "), "+ gradient sync ");
    CHECK(fp32_s > 0);
    CHECK(bf16_s == doctest::Approx(fp32_s / 2).epsilon(0.01));  // 3 printed digits
}

TEST_CASE("bad device figures: one line naming the problem, exit 2") {
    struct Bad {
        const char* args;
        const char* says;
    } cases[] = {
        {"--device b300", "unknown device 'b300'; known: h100-sxm, h200, h100-pcie, a100-sxm"},
        {"--device-tflops -1", "--device-tflops must be from 0 (the preset's) to below 1e6 TFLOP/s, not -1"},
        {"--device-tflops 1e30", "--device-tflops must be from 0 (the preset's) to below 1e6 TFLOP/s, not 1e+30"},
        {"--link-gbps -5", "--link-gbps must be from 0 (the preset's) to below 1e9 Gbit/s, not -5"},
        {"--device-tflops nan", "--device-tflops expects a number"},
        {"--replicas 2 -n 1", "--replicas 2, but 1 process was started"},
    };
    for (const Bad& c : cases) {
        std::string out;
        INFO(c.args);
        CHECK(run_command(std::string("./train -o '' ") + c.args, &out) == 2);
        CHECK(out.find(c.says) != std::string::npos);
        CHECK(std::count(out.begin(), out.end(), '\n') == 1);
    }
}

TEST_CASE("the step line and the log: achieved FLOP/s per replica, and MFU against the given peak") {
    std::string dir = temp_dir(), out;
    REQUIRE(run_command("./train " + SHAPE + "-o " + dir + " -n 3 -v 0 -s 0 --device-tflops 0.5", &out) == 0);
    INFO(out);
    CHECK(out.find(" GFLOP/s | MFU ") != std::string::npos);  // a CPU: GFLOP/s
    CHECK(out.find("per replica ") != std::string::npos);
    std::vector<std::string> steps = log_lines(dir + "/log.jsonl", "train");
    REQUIRE(steps.size() == 3);
    for (const std::string& line : steps) {
        auto field = [&](const char* name) {
            size_t at = line.find(strf("\"%s\":", name));
            return at == std::string::npos ? NAN : atof(line.c_str() + at + strlen(name) + 3);
        };
        double per_s = field("flops_per_s"), ms = field("ms");
        // FLOPs = rate × time: %.4e and milliseconds to 3 decimals keep 1e-3 easily
        CHECK(per_s * ms / 1000 == doctest::Approx(512 * SHAPE_FLOPS_PER_TOKEN).epsilon(1e-3));
        CHECK(field("mfu") == doctest::Approx(per_s / 0.5e12).epsilon(1e-3));
    }
    run_command("rm -rf " + dir);
}

// ---- The step kernel by kernel (host/kernel_cost.h, host/cost.h's step_kernels)

TEST_CASE("kernel costs: the bytes each kernel moves equal a count of the tensors it reads and writes") {
    // N = 4 rows (B=2, T=2), C = 8, V = 12 of Vp = 16, bf16 (2 bytes an element); each count
    // below lists the tensors of the kernel's signature, in elements, then float32 extras
    const int x = 2;
    // matmul forward (4, 8) -> (4, 24): inp 32, w 192, bias 24 read; out 96 written
    CHECK(matmul_forward_cost(4, 8, 24, x).bytes == 2 * (32 + 192 + 24 + 96));
    CHECK(matmul_forward_cost(4, 8, 24, x).flops == 2 * 4 * 8 * 24);
    // with GELU's epilogue pre_gelu is written too: 96 more
    CHECK(matmul_forward_cost(4, 8, 24, x, true).bytes == 2 * (32 + 192 + 24 + 96 + 96));
    // backward dinp (4, 8) = dout (4, 24) · w (24, 8): 96 + 192 read, 32 written
    CHECK(matmul_backward_dinp_cost(4, 8, 24, x).bytes == 2 * (96 + 192 + 32));
    // backward dw (24, 8) += doutᵀ · inp: 96 + 32 bf16 read; dw 192 float32 read and written
    CHECK(matmul_backward_dw_cost(4, 8, 24, x).bytes == 2 * (96 + 32) + 4 * 192 * 2);
    // bias gradient of (4, 24): dout 96 read; one chunk (4 ≤ 128 rows) of 24 float32 partials
    // written and read; dbias 24 float32 read and written
    CHECK(bias_grad_cost(4, 24, x).bytes == 2 * 96 + 4 * 24 * 2 + 4 * 24 * 2);
    // layernorm forward (4, 8): inp 32, w 8, b 8 read, out 32 written; mean, rstd 4 + 4 float32
    CHECK(layernorm_forward_cost(4, 8, x).bytes == 2 * (32 + 8 + 8 + 32) + 4 * 8);
    // residual + layernorm: a 32, b 32, w 8, b 8 read; residual 32, out 32 written; mean, rstd
    CHECK(residual_layernorm_forward_cost(4, 8, x).bytes == 2 * (32 + 32 + 16 + 32 + 32) + 4 * 8);
    // layernorm backward, accumulating: dout 32, inp 32, dresidual 32 read, dresidual 32
    // written, w 8; mean, rstd read (8 float32); one chunk's partials of dw and db (2·8
    // float32) written and read; dw and db (2·8 float32) read and written
    CHECK(layernorm_backward_cost(4, 8, x, true).bytes == 2 * (32 * 4 + 8) + 4 * 8 + 4 * 16 * 2 + 4 * 16 * 2);
    CHECK(layernorm_backward_cost(4, 8, x, false).bytes == 2 * (32 * 3 + 8) + 4 * 8 + 4 * 16 * 2 + 4 * 16 * 2);
    // GELU backward over 128: inp and dout read, dinp written
    CHECK(gelu_backward_cost(128, x).bytes == 2 * 3 * 128);
    // the classifier over (4, 16): fused, the logits read once and the gradient written once
    // (pass 2 from L2); three-pass, read three times; both read 4 targets and write 4 losses,
    // which add_mean_loss reads again (4-byte each)
    CHECK(crossentropy_cost(4, 12, 16, x, true).bytes == 2 * (64 + 64) + 4 * 12);
    CHECK(crossentropy_cost(4, 12, 16, x, false).bytes == 2 * (3 * 64 + 64) + 4 * 12);
    // AdamW over 100 parameters: p, g, m, v read, p, m, v written (float32), the bf16 copy written
    CHECK(adamw_cost(100, 2).bytes == 4 * 100 * 7 + 2 * 100);
    CHECK(adamw_cost(100, 4).bytes == 4 * 100 * 7);  // float32 build: no copy
    // attention forward (B=1, T=4, C=8, NH=2): qkv 96 read, out 32 written, lse 8 float32
    CHECK(attention_forward_cost(4, 4, 8, 2, x).bytes == 2 * (96 + 32) + 4 * 8);
    // causal: query t sees t + 1 keys: 1 + 2 + 3 + 4 = 10 pairs; 2 products of 2·C per pair
    CHECK(attention_forward_cost(4, 4, 8, 2, x).flops == 10 * 2 * 2 * 8);
}

TEST_CASE("the step's kernels: products as the 6·P formula counts them, the classifier and epilogue passes") {
    ModelConfig c = model(2, 4, 32, 64, 300, 320);
    const int B = 2, T = 64;
    const double N = B * T;
    StepOptions o;
    double products = 0, attention = 0, classifier = 0;
    int gelu_backward = 0, bias = 0;
    for (const StepKernel& k : step_kernels(c, B, T, o)) {
        if (k.kind == KernelKind::product) products += k.cost.flops * k.count;
        if (k.kind == KernelKind::attention) attention += k.cost.flops * k.count;
        if (k.layer == "loss") classifier += k.cost.bytes * k.count;
        gelu_backward += k.name == "gelu backward";
        bias += k.name.find("bias gradient") != std::string::npos;
    }
    // forward 2, dinp 2, dw 2 FLOPs per weight per row: the 6·P term, exactly
    CHECK(products == doctest::Approx(flops_per_token(c, T).params * N).epsilon(1e-12));
    // 2·C·(T+1) forward + 7·C·(T+1) backward per row per block: 3/2 of the useful causal count
    CHECK(attention == doctest::Approx(flops_per_token(c, T).attention * N * 9 / 6).epsilon(1e-12));
    // bf16 at hs = 64 (and 128): the five-product backward, 2 + 5 = 7/6 of the useful count; fp32
    // at hs = 64, and bf16 at hs = 32, the three-kernel one's 9/6
    for (auto [C, NH, x, ratio] : std::vector<std::tuple<int, int, int, double>>{
             {128, 2, 2, 7.0 / 6}, {256, 2, 2, 7.0 / 6}, {128, 2, 4, 9.0 / 6}, {128, 4, 2, 9.0 / 6}}) {
        ModelConfig h = model(2, NH, C, 64, 300, 320);
        StepOptions ox;
        ox.x = x;
        double att = 0;
        for (const StepKernel& k : step_kernels(h, B, T, ox))
            if (k.kind == KernelKind::attention) att += k.cost.flops * k.count;
        INFO("C=" << C << " NH=" << NH << " x=" << x);
        CHECK(att == doctest::Approx(flops_per_token(h, T).attention * N * ratio).epsilon(1e-12));
    }
    CHECK(gelu_backward == 1);
    CHECK(bias == 4);  // qkv, attproj, fc, fcproj
    CHECK(classifier == 2 * N * c.Vp * 2 + 12 * N);
    // the lead's switches: epilogues fold the GELU backward and the bias gradients away
    o.epilogues_fused = true;
    for (const StepKernel& k : step_kernels(c, B, T, o)) {
        CHECK(k.name != "gelu backward");
        CHECK(k.name.find("bias gradient") == std::string::npos);
    }
}

TEST_CASE("the step predicted: each kernel max(FLOPs / rate, bytes / bandwidth); the fused classifier saves two passes") {
    ModelConfig c = model(12, 12, 768, 1024, 50257, 50304);
    BatchPlan p = plan_batch(64, 1024, 1, 524288);
    DeviceSpeed d = device_speed("h100-sxm", 0, 0);
    CHECK(d.memory_gbs == 3350);
    CHECK(d.vector_tflops == 67);
    StepOptions fused, three;
    three.fused_classifier = false;
    StepPrediction a = predict_step(c, p, d, fused), b = predict_step(c, p, d, three);
    // the three-pass kernel moves 2·N·Vp·2 bytes more (two reads of the bf16 logits), at 85% of 3.35 TB/s
    double N = 65536, extra = 2.0 * N * 50304 * 2 / (3350e9 * 0.85);
    CHECK(b.without_attention() - a.without_attention() == doctest::Approx(extra).epsilon(1e-9));
    CHECK(a.A == 8);
    CHECK(a.step() == doctest::Approx(8 * a.micro_batch() + a.optimizer + a.sync));
    CHECK(a.sync == 0);  // one replica
    // the products are compute-bound at these shapes: at 70% of 989 TFLOP/s, 6·P·N FLOPs
    CHECK(a.products == doctest::Approx(flops_per_token(c, 1024).params * N / (0.7 * 989e12)).epsilon(1e-9));
    // an overlapped sync hides behind the last micro-batch's backward: never more than not overlapped
    BatchPlan p8 = plan_batch(64, 1024, 8, 524288);
    DeviceSpeed slow = device_speed("h100-sxm", 0, 10);  // a 10 Gbit/s link: the sync longer than a backward
    StepOptions overlap;
    overlap.grad_sync_overlap = true;
    StepPrediction s = predict_step(c, p8, slow, fused), t = predict_step(c, p8, slow, overlap);
    CHECK(s.sync == doctest::Approx(plan_run(c, p8, 1, slow).comm_s));
    CHECK(s.sync == doctest::Approx(2.0 * 7 / 8 * 4 * c.num_params() * 8 / 10e9));  // float32 at 10 Gbit/s
    CHECK(t.sync < s.sync);
    CHECK(t.sync > 0);
    // what it hides behind is the backward alone, not the whole micro-batch: 4·P·N of the
    // products' 6·P·N FLOPs (2/3) and somewhat more than its share of the memory passes
    const double hidden = (s.sync - t.sync) / s.micro_batch();
    CHECK(hidden >= 0.6);
    CHECK(hidden <= 0.75);
    StepOptions bf16_sync;  // --grad-sync-dtype bf16: half the bytes, so half the time
    bf16_sync.sync_grad_bytes = 2;
    CHECK(predict_step(c, p8, slow, bf16_sync).sync == doctest::Approx(s.sync / 2));
    // no bandwidth known (--device-tflops alone): no table
    CHECK(kernel_table(c, p, device_speed("", 500, 0), fused).empty());
    std::vector<std::string> rows = kernel_table(c, p, d, fused);
    REQUIRE(rows.size() > 10);
    // no ratio to llm.c from an uncalibrated model: the table ends saying what it is
    for (const std::string& row : rows) CHECK(row.find("x llm.c") == std::string::npos);
    CHECK(rows.back().find("not calibrated on a GPU") != std::string::npos);
}

TEST_CASE("the step's kernels for Llama: qkv of QKV, fc of 2F, fcproj from F, the head; RMSNorm, RoPE, SwiGLU") {
    for (int tied : {0, 1}) {
        ModelConfig c = llama(2, 4, 2, 32, 80, 64, 300, 320, tied);
        const int B = 2, T = 64;
        const double N = B * T, C = 32, QKV = 32 + 2 * 2 * 8, F = 80;
        CAPTURE(tied);
        double products = 0, attention = 0;
        std::vector<std::string> names;
        for (const StepKernel& k : step_kernels(c, B, T, StepOptions{})) {
            if (k.kind == KernelKind::product) products += k.cost.flops * k.count;
            if (k.kind == KernelKind::attention) attention += k.cost.flops * k.count;
            names.push_back(k.name);
            if (k.name == "qkv forward") CHECK(k.cost.flops == 2 * N * C * QKV);
            if (k.name == "fc (gate, up) forward") CHECK(k.cost.flops == 2 * N * C * 2 * F);
            if (k.name == "fcproj forward") CHECK(k.cost.flops == 2 * N * F * C);
            if (k.name.rfind("logits (", 0) == 0) CHECK(k.cost.flops == 2 * N * C * 320);
            // no biases in Llama's products: the forward reads inp and w, writes out
            if (k.name == "qkv forward") CHECK(k.cost.bytes == 2 * (N * C + QKV * C + N * QKV));
            // RoPE rotates q and k, (NH + KVH)·hs = 48 channels a row, and reads the T × hs table
            if (k.name == "rope forward (q, k)") CHECK(k.cost.bytes == 2 * 2 * N * 48 + 4 * T * 8);
            if (k.name == "attention forward") CHECK(k.cost.bytes == 2 * (N * QKV + N * C) + 4 * N * 4);
            CHECK(k.name.find("bias") == std::string::npos);
            CHECK(k.name.find("gelu") == std::string::npos);
            CHECK(k.name.find("layernorm") == std::string::npos);
        }
        // forward 2, dinp 2, dw 2 FLOPs per weight per row: the 6·P term, exactly
        CHECK(products == doctest::Approx(flops_per_token(c, T).params * N).epsilon(1e-12));
        CHECK(attention == doctest::Approx(flops_per_token(c, T).attention * N * 9 / 6).epsilon(1e-12));
        for (const char* name : {"embedding forward", "rmsnorm forward (ln1 of block 0)", "rope forward (q, k)",
                                 "residual + rmsnorm forward", "swiglu forward", "swiglu backward",
                                 "rmsnorm backward (ln1, ln2)", "rope backward (q, k)", "embedding backward",
                                 tied ? "logits (tied: wte) forward" : "logits (wout) forward"})
            CHECK_MESSAGE(std::find(names.begin(), names.end(), name) != names.end(), name);
    }
    // the table prints for a Llama shape, with no ratio to llm.c either
    ModelConfig c = llama(16, 32, 8, 2048, 8192, 8192, 128256, 128256, 1);
    std::vector<std::string> rows = kernel_table(c, plan_batch(4, 2048, 1, 0), device_speed("h100-sxm", 0, 0), {});
    REQUIRE(rows.size() > 10);
    for (const std::string& row : rows) CHECK(row.find("x llm.c") == std::string::npos);
}

// ---- Llama in the printed plan and the step line: the family's count, not GPT-2's

// A Llama shape PyTorch counted (flops.txt: llama3 2 4 1 32 80 256 300 320 0 2 → 195,035,136
// FLOPs for 2×256 tokens; GPT-2's count for the same L, C, T, Vp would be 207,618,048).
static const std::string LLAMA_SHAPE = "--model llama3 --layers 2 --heads 4 --kv-heads 1 --channels 32 --ffn-hidden 80 "
                                       "--max-seq-len 256 --vocab 300 --padded-vocab 320 -b 2 -t 256 -o '' ";
static const double LLAMA_SHAPE_FLOPS_PER_TOKEN = 195035136.0 / 512 - 6.0 * 2 * 32 * 255;  // causal

TEST_CASE("Llama's dry run and step line: FLOPs per step and FLOP/s from the Llama count") {
    std::string out;
    REQUIRE(run_command("./train " + LLAMA_SHAPE + "-d 4096 -n 100 --dry-run 1", &out) == 0);
    INFO(out);
    std::string compute = from_line(out, "compute: ");
    check_3_digits(quantity_after(compute, "); "), 4096 * LLAMA_SHAPE_FLOPS_PER_TOKEN);
    check_3_digits(quantity_after(compute, "compute: "), LLAMA_SHAPE_FLOPS_PER_TOKEN);
    std::string dir = temp_dir();
    REQUIRE(run_command("./train " + LLAMA_SHAPE + "-o " + dir + " -n 3 -v 0 -s 0", &out) == 0);
    std::vector<std::string> steps = log_lines(dir + "/log.jsonl", "train");
    REQUIRE(steps.size() == 3);
    for (const std::string& line : steps) {
        auto field = [&](const char* name) {
            size_t at = line.find(strf("\"%s\":", name));
            return at == std::string::npos ? NAN : atof(line.c_str() + at + strlen(name) + 3);
        };
        CHECK(field("flops_per_s") * field("ms") / 1000 == doctest::Approx(512 * LLAMA_SHAPE_FLOPS_PER_TOKEN).epsilon(1e-3));
    }
    run_command("rm -rf " + dir);
}

// ---- --preset: the published shapes

// The shape a command line gives (parse_command_line, then model_shape), as the trainers take it.
static ModelConfig shape_of(const std::string& args) {
    std::vector<std::string> words = {"train"};
    std::istringstream in(args);
    for (std::string w; in >> w;) words.push_back(w);
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(&w[0]);
    Config cfg;
    REQUIRE(parse_command_line((int)argv.size(), argv.data(), cfg));
    return model_shape(cfg);
}

// The parameter counts as published, each worked out here from the model's configuration
// (Hugging Face's config.json of meta-llama/Llama-3.2-1B, -3.2-3B, -3.1-8B, -3.1-70B, and
// OpenAI's GPT-2 sizes, padded as llm.c pads them), not from the code:
//   Llama: V·C (embedding) + L·(2·C·C (q, o) + 2·C·KVH·128 (k, v; head size 128 but 1B's 64)
//          + 3·C·F (gate, up, down) + 2·C (two RMSNorms)) + C (final norm) + V·C if untied.
//   3.2-1B:  128256·2048 + 16·(2·2048² + 2·2048·512 + 3·2048·8192 + 4096) + 2048
//          = 262,668,288 + 16·60,821,504 + 2,048 = 1,235,814,400 (the model card's "1.23B")
//   3.2-3B:  128256·3072 + 28·(2·3072² + 2·3072·1024 + 3·3072·8192 + 6144) + 3072
//          = 394,002,432 + 28·100,669,440 + 3,072 = 3,212,749,824 ("3.21B")
//   3.1-8B:  2·128256·4096 + 32·(2·4096² + 2·4096·1024 + 3·4096·14336 + 8192) + 4096
//          = 1,050,673,152 + 32·218,112,000 + 4,096 = 8,030,261,248
//   3.1-70B: 2·128256·8192 + 80·(2·8192² + 2·8192·1024 + 3·8192·28672 + 16384) + 8192
//          = 2,101,346,304 + 80·855,654,400 + 8,192 = 70,553,706,496
//   GPT-2: Vp·C + 1024·C (wpe) + L·(12·C² + 13·C) + 2·C, Vp = 50304 (Hugging Face's counts
//   use V = 50257: 124,439,808, 354,823,168, 774,030,080, 1,557,611,200; add 47·C):
//   124M:  50304·768 + 786,432 + 12·(12·768² + 13·768) + 1,536 = 124,475,904
//   350M:  354,823,168 + 47·1024 = 354,871,296;  774M: 774,030,080 + 47·1280 = 774,090,240
//   1558M: 1,557,611,200 + 47·1600 = 1,557,686,400
TEST_CASE("--preset: each published model's parameter count") {
    struct Published {
        const char* preset;
        long long params;
    } cases[] = {
        {"llama3.2-1b", 1235814400LL}, {"llama3.2-3b", 3212749824LL}, {"llama3.1-8b", 8030261248LL},
        {"llama3.1-70b", 70553706496LL}, {"gpt2-124m", 124475904LL}, {"gpt2-350m", 354871296LL},
        {"gpt2-774m", 774090240LL}, {"gpt2-1558m", 1557686400LL},
    };
    for (const Published& p : cases) {
        CAPTURE(p.preset);
        ModelConfig c = shape_of(std::string("--preset ") + p.preset);
        CHECK((long long)c.num_params() == p.params);
        CHECK(checked_num_params(c) == p.params);
        CHECK(c.llama() == (std::string(p.preset).rfind("llama", 0) == 0));
    }
    CHECK(std::size(cases) == std::size(MODEL_PRESETS));  // every preset has its published count
    // the fields beyond the count: Llama-3.2 1B's RoPE scaling and limits, from its config.json
    ModelConfig c = shape_of("--preset llama3.2-1b");
    CHECK(c.KVH == 8);
    CHECK(c.F == 8192);
    CHECK(c.tied == 1);
    CHECK(c.maxT == 131072);
    CHECK(c.V == 128256);
    CHECK(c.Vp == 128256);
    CHECK(c.norm_eps == 1e-5f);
    CHECK(c.rope_theta == 500000.0f);
    CHECK(c.rope_factor == 32.0f);
    CHECK(c.rope_low_freq == 1.0f);
    CHECK(c.rope_high_freq == 4.0f);
    CHECK(c.rope_original_T == 8192);
    CHECK(shape_of("--preset llama3.1-8b").rope_factor == 8.0f);
    CHECK(shape_of("--preset llama3.1-8b").tied == 0);
    // an option after the preset overrides its value; the rest stays the preset's
    ModelConfig shorter = shape_of("--preset llama3.2-1b --max-seq-len 8192");
    CHECK(shorter.maxT == 8192);
    CHECK(shorter.F == 8192);
}

TEST_CASE("--preset in the dry run: the shape's count, its FLOPs; a bad preset is one line, exit 2") {
    std::string out;
    // Llama-3.2 1B at T = 16, B = 1, as PyTorch counted it (flops.txt: 118,732,357,632 FLOPs)
    REQUIRE(run_command("./train --preset llama3.2-1b -t 16 -b 1 -o '' --device-memory 80GB --dry-run 1", &out) == 0);
    INFO(out);
    CHECK(out.find("model: llama3 L=16 NH=32 KVH=8 C=2048 F=8192 maxT=131072 V=128256 Vp=128256, RoPE theta 500000 "
                   "scaled (factor 32, low 1, high 4, from 8192), tied head, 1,235,814,400 parameters") != std::string::npos);
    std::string compute = from_line(out, "compute: ");
    check_3_digits(quantity_after(compute, "compute: "), 118732357632.0 / 16 - 6.0 * 16 * 2048 * 15);
    struct Bad {
        const char* args;
        const char* says;
    } cases[] = {
        {"--preset llama3-1b", "--preset: unknown model 'llama3-1b'; the presets: gpt2-124m, gpt2-350m, gpt2-774m, "
                               "gpt2-1558m, llama3.2-1b, llama3.2-3b, llama3.1-8b, llama3.1-70b"},
        {"--preset llama3.2-1b --load test/golden/model_tiny.bin", "--preset llama3.2-1b sets the shape of a new model, "
                                                                  "but --load 'test/golden/model_tiny.bin' brings its own"},
        {"--load test/golden/model_tiny.bin --preset gpt2-124m", "but --load 'test/golden/model_tiny.bin' brings its own"},
        {"--layers 2 --preset llama3.2-1b", "--layers is given before --preset llama3.2-1b, which sets it"},
        {"--preset gpt2-124m --preset llama3.2-1b", "--preset is given twice"},
    };
    for (const Bad& c : cases) {
        INFO(c.args);
        CHECK(run_command(std::string("./train -o '' --dry-run 1 ") + c.args, &out) == 2);
        CHECK(out.find(c.says) != std::string::npos);
        CHECK(std::count(out.begin(), out.end(), '\n') == 1);
    }
}
