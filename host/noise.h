// The gradient noise scale: is the global batch too big? (McCandlish, Kaplan, Amodei et al.,
// "An Empirical Model of Large-Batch Training", 2018, Appendix A.)
//
// Let G be the true gradient and Σ the covariance of one example's gradient. The gradient of
// a batch of b examples has E|G_b|² = |G|² + tr(Σ)/b. The simple noise scale
//     B_noise = tr(Σ) / |G|²
// predicts the critical batch: a global batch well below it gains nearly a step per
// doubling (with a proportionally larger learning rate); one well above it wastes compute.
//
// Every optimizer step already holds gradients at two batch sizes:
//   |G_small|²  one micro-batch on one replica, b_small = B·T tokens: the gradient buffer
//               right after the first micro-batch of the accumulation loop. The loss is scaled
//               by 1/(B·T·A·R), so the micro-batch's mean gradient is that buffer × A·R, and
//               its squared norm the buffer's × (A·R)². Each replica measures its own; the
//               mean over replicas (still unbiased, less noisy) rides in the all-reduce that
//               already carries the loss.
//   |G_big|²    the synced global gradient before clipping, b_big = B·T·A·R tokens (the norm
//               the clipping decision computes anyway).
// Solving the two expectations for the unknowns gives unbiased per-step estimates:
//     |G|²  ≈ (b_big·|G_big|² − b_small·|G_small|²) / (b_big − b_small)
//     tr(Σ) ≈ (|G_small|² − |G_big|²) / (1/b_small − 1/b_big)
// Each is very noisy from one step, and a ratio of noisy estimates is biased, so (as the paper
// advises) each gets its own exponential moving average, and B_noise = EMA(tr Σ) / EMA(|G|²).
// The EMAs start from 0 and are not bias-corrected: both would be divided by the same
// 1 − β^n, which cancels in the ratio.
//
// Units: the batches are made of whole sequences, and the tokens of one sequence are not
// independent examples. The estimator therefore measures the per-sequence noise: B_noise in
// sequences. Written with b in tokens (b = sequences × T), as above, the result is that
// number × T, i.e. B_noise in tokens, the unit in which the global batch is printed.
//
// It needs b_big > b_small: A ≥ 2 or R ≥ 2. With A = R = 1 there is one gradient per step
// and nothing to measure; the run says so once at the start.
#pragma once
#include <cmath>
#include <string>

#include "batch.h"
#include "error.h"

// One step's unbiased estimates of |G|² and tr(Σ), both for b in tokens (see above).
struct NoiseEstimate {
    double g2;     // |G|²
    double trace;  // tr(Σ), per token of batch size: tr(Σ_sequence) / T
};

inline NoiseEstimate noise_estimate(double small_sq, double big_sq, double b_small, double b_big) {
    return {(b_big * big_sq - b_small * small_sq) / (b_big - b_small),
            (small_sq - big_sq) / (1.0 / b_small - 1.0 / b_big)};
}

// |G_small|² from the squared norm of the gradient buffer after the first micro-batch,
// which holds that micro-batch's gradient scaled by 1/(A·R) (the loss scale 1/(B·T·A·R)).
inline double small_batch_norm_squared(double buffer_norm_squared, const BatchPlan& plan) {
    double scale = (double)plan.A * plan.R;
    return buffer_norm_squared * scale * scale;
}

// Whether the trainers measure |G_small|² at all: on (ema > 0) and two batch sizes to compare.
inline bool noise_scale_measured(float ema, const BatchPlan& plan) { return ema > 0 && (plan.A >= 2 || plan.R >= 2); }

// "41k", "4.1k", "850", "1.2M": two significant digits, as the step line shows sizes
inline std::string short_count(double x) {
    const char* unit = "";
    if (std::fabs(x) >= 1e6) x /= 1e6, unit = "M";
    else if (std::fabs(x) >= 1e3) x /= 1e3, unit = "k";
    return strf(std::fabs(x) >= 10 ? "%.0f%s" : "%.2g%s", x, unit);
}

// The moving averages of the two estimates over the run's steps: what a checkpoint keeps, so a
// resumed run goes on with the same averages (host/checkpoint.h).
struct NoiseAverages {
    long long steps = 0;        // steps averaged
    double g2 = 0, trace = 0;   // EMAs of |G|² and tr(Σ)
};

// The moving averages over the run's steps, and what the log and the step line show.
class NoiseScale {
public:
    NoiseScale(float ema, const BatchPlan& plan)
        : beta_(ema), b_small_((double)plan.micro_tokens()), b_big_((double)plan.global_tokens()),
          on_(noise_scale_measured(ema, plan)) {}

    bool on() const { return on_; }

    // The line said once at the start when it cannot be measured; empty otherwise.
    std::string start_note() const {
        if (on_ || beta_ <= 0) return "";
        return "noise scale: not measured: with one micro-batch on one replica (A = R = 1) each step has one "
               "gradient, and the estimate compares two batch sizes; accumulate (-d larger than B·T·replicas, e.g. "
               "2× it) to measure it, or --noise-ema 0 to silence this line";
    }

    // One step: grad_norm_small = √(mean over replicas of |G_small|²), grad_norm_big = |G_big|.
    void add(double grad_norm_small, double grad_norm_big) {
        if (!on_) return;
        avg_.steps++;
        small_sq_ = grad_norm_small * grad_norm_small, big_sq_ = grad_norm_big * grad_norm_big;
        NoiseEstimate e = noise_estimate(small_sq_, big_sq_, b_small_, b_big_);
        avg_.g2 = beta_ * avg_.g2 + (1 - beta_) * e.g2;
        avg_.trace = beta_ * avg_.trace + (1 - beta_) * e.trace;
    }

    const NoiseAverages& averages() const { return avg_; }
    void restore(const NoiseAverages& a) { avg_ = a; }

    // B_noise in tokens; NaN while the averaged |G|² or tr(Σ) is not positive (early, noisy steps)
    double tokens() const { return avg_.g2 > 0 && avg_.trace > 0 ? avg_.trace / avg_.g2 : NAN; }

    // The JSONL fields of the last step, after a comma; empty when not measured.
    std::string json_fields() const {
        if (!on_) return "";
        double b = tokens();
        return strf(",\"grad_norm_small\":%.6e,\"grad_norm_big\":%.6e,\"noise_scale\":%s", std::sqrt(small_sq_),
                    std::sqrt(big_sq_), std::isfinite(b) ? strf("%.6e", b).c_str() : "null");
    }

    // For the step line when validation runs: " | noise scale ≈ 41k tokens (global batch 4k)";
    // nothing before the first step.
    std::string text() const {
        if (!on_ || avg_.steps == 0) return "";
        double b = tokens();
        std::string batch = short_count(b_big_);
        if (!std::isfinite(b)) return strf(" | noise scale: no estimate yet (global batch %s)", batch.c_str());
        return strf(" | noise scale ≈ %s tokens (global batch %s)", short_count(b).c_str(), batch.c_str());
    }

private:
    double beta_, b_small_, b_big_;
    bool on_;
    NoiseAverages avg_;
    double small_sq_ = 0, big_sq_ = 0;  // the last step's, for the log
};
