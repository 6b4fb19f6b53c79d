// The gradient noise scale's estimator (host/noise.h) against a synthetic problem whose answer
// is known exactly (doctest): "gradients" drawn from a Gaussian with mean G and diagonal
// covariance Σ, so B_noise = tr(Σ)/|G|² by construction. The trainers' measurement of
// it (the norms they feed the estimator, the splits, the log) is test/cpu_trainer/noise_scale.sh.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "../../host/noise.h"
#include "../../host/rng.h"

namespace {

// The synthetic problem: D coordinates, mean G_i = g, variances σ_i² cycling over 0.5, 1, 1.5
// (mean 1), so |G|² = D·g² and tr(Σ) = D.
struct Gaussian {
    int D = 48;
    double g = 0.125;
    double G2() const { return D * g * g; }          // 0.75
    double trace() const { return (double)D; }       // 48 → B_noise = 64 examples
    double sigma(int i) const { return std::sqrt(0.5 * (1 + i % 3)); }
};

// Adds `count` draws into `sum` (so that a big batch can contain the small one).
void add_draws(const Gaussian& p, Rng& rng, int count, std::vector<double>& sum) {
    for (int k = 0; k < count; k++)
        for (int i = 0; i < p.D; i++) sum[i] += p.g + p.sigma(i) * rng.normal();
}
double mean_norm_squared(const std::vector<double>& sum, int count) {
    double s = 0;
    for (double x : sum) s += (x / count) * (x / count);
    return s;
}

}  // namespace

TEST_CASE("noise estimator: unbiased |G|², tr(Σ) and their ratio on a Gaussian with a known answer") {
    // b_small = 4 examples, b_big = 16 (A·R = 4), the big batch containing the small one as
    // in the trainers. N steps; plain means of the per-step estimates, whose standard errors
    // come from their own spread over the N independent steps: se = sd/√N. The ratio of the
    // means is checked with its linearised standard error, sd(tr_i − r·g2_i) / (√N·mean g2).
    // Each check allows 5 standard errors (a false failure about once in 1.7 million runs,
    // and the seed is fixed), and requires the standard error to be below 10 % of the true
    // value, so that an estimator biased by 50 % (e.g. a missing (A·R)² rescale) fails.
    Gaussian p;
    Rng rng(2024);
    const int N = 4000, b_small = 4, b_big = 16;
    std::vector<double> g2(N), tr(N);
    for (int s = 0; s < N; s++) {
        std::vector<double> sum(p.D, 0.0);
        add_draws(p, rng, b_small, sum);
        double small_sq = mean_norm_squared(sum, b_small);
        add_draws(p, rng, b_big - b_small, sum);
        double big_sq = mean_norm_squared(sum, b_big);
        NoiseEstimate e = noise_estimate(small_sq, big_sq, b_small, b_big);
        g2[s] = e.g2, tr[s] = e.trace;
    }
    auto mean = [&](const std::vector<double>& v) {
        double m = 0;
        for (double x : v) m += x;
        return m / v.size();
    };
    auto se = [&](const std::vector<double>& v) {
        double m = mean(v), ss = 0;
        for (double x : v) ss += (x - m) * (x - m);
        return std::sqrt(ss / (v.size() - 1) / v.size());
    };
    double g2_mean = mean(g2), tr_mean = mean(tr), ratio = tr_mean / g2_mean;
    std::vector<double> resid(N);
    for (int s = 0; s < N; s++) resid[s] = tr[s] - ratio * g2[s];
    double ratio_se = se(resid) / g2_mean;
    const double truth = p.trace() / p.G2();
    INFO("|G|² " << g2_mean << " ± " << se(g2) << " (true " << p.G2() << "), tr(Σ) " << tr_mean << " ± " << se(tr)
                 << " (true " << p.trace() << "), B_noise " << ratio << " ± " << ratio_se << " (true " << truth << ")");
    CHECK(std::isfinite(ratio));
    CHECK(se(g2) < 0.1 * p.G2());
    CHECK(se(tr) < 0.1 * p.trace());
    CHECK(ratio_se < 0.1 * truth);
    CHECK(std::fabs(g2_mean - p.G2()) < 5 * se(g2));
    CHECK(std::fabs(tr_mean - p.trace()) < 5 * se(tr));
    CHECK(std::fabs(ratio - truth) < 5 * ratio_se);
    // the naive estimate, |G_big|² taken for |G|², is biased by tr(Σ)/b_big = 3 = 4 |G|²: far outside
    // the tolerance above, so this problem can tell a biased estimator from an unbiased one
    CHECK(p.trace() / b_big > 10 * se(g2));
}

TEST_CASE("noise estimator: exact on noiseless inputs, EMAs kept apart, units, A = R = 1") {
    // Norms generated from the expectations themselves, E|G_b|² = |G|² + tr(Σ)/b, give the
    // answer to rounding (1e-9 relative: a few double operations), with b in tokens.
    BatchPlan plan{8, 16, 4, 2};  // b_small = 128 tokens, b_big = 1024
    const double G2 = 0.3, trace = 120.0;
    auto expected_sq = [&](double b) { return G2 + trace / b; };
    NoiseScale noise(0.9f, plan);
    REQUIRE(noise.on());
    CHECK(std::isnan(noise.tokens()));  // nothing yet: not estimable
    CHECK(noise.text().empty());
    for (int s = 0; s < 5; s++) noise.add(std::sqrt(expected_sq(128)), std::sqrt(expected_sq(1024)));
    CHECK(std::fabs(noise.tokens() - trace / G2) < 1e-9 * trace / G2);
    CHECK(noise.json_fields().find("\"noise_scale\":4.000000e+02") != std::string::npos);
    CHECK(noise.text() == " | noise scale ≈ 400 tokens (global batch 1k)");

    // separate averages: the ratio of the EMAs, not the EMA of the ratios. Two steps with
    // (|G|², tr Σ) = (1, 100) then (0.01, 100): per-step ratios 100 and 10000; with β = 0.5
    // the EMAs are g2 = 0.25·1 + 0.5·0.01, tr = 0.25·100 + 0.5·100, ratio 75/0.255.
    NoiseScale two(0.5f, plan);
    two.add(std::sqrt(1 + 100.0 / 128), std::sqrt(1 + 100.0 / 1024));
    two.add(std::sqrt(0.01 + 100.0 / 128), std::sqrt(0.01 + 100.0 / 1024));
    CHECK(std::fabs(two.tokens() - 75 / 0.255) < 1e-9 * 75 / 0.255);
    // a step whose estimate of |G|² is negative (noise): no estimate yet, written as null
    NoiseScale early(0.5f, plan);
    early.add(std::sqrt(1.0), std::sqrt(2.0));  // |G_big| > |G_small|: tr(Σ) < 0
    CHECK(std::isnan(early.tokens()));
    CHECK(early.json_fields().find("\"noise_scale\":null") != std::string::npos);
    CHECK(early.text() == " | noise scale: no estimate yet (global batch 1k)");

    // |G_small|²'s rescale: the buffer after one micro-batch holds its gradient × 1/(A·R)
    CHECK(small_batch_norm_squared(2.0, plan) == 2.0 * 64);

    // A = R = 1: nothing measured, one start-up line, no fields; --noise-ema 0: not even the line
    BatchPlan one{8, 16, 1, 1};
    NoiseScale single(0.95f, one);
    CHECK(!single.on());
    CHECK(single.start_note().find("accumulate") != std::string::npos);
    single.add(1.0, 1.0);
    CHECK(single.json_fields().empty());
    CHECK(single.text().empty());
    CHECK(NoiseScale(0.0f, one).start_note().empty());
    CHECK(!NoiseScale(0.0f, plan).on());
    CHECK(NoiseScale(0.95f, BatchPlan{8, 16, 1, 2}).on());  // replicas alone are enough
}

TEST_CASE("noise estimator: sizes on the step line") {
    CHECK(short_count(41234) == "41k");
    CHECK(short_count(4096) == "4.1k");
    CHECK(short_count(850) == "850");
    CHECK(short_count(1.2e6) == "1.2M");
}
