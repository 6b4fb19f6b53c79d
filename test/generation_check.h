// The key/value cache's check, one for both trainers (test/cpu_trainer/trainer.cpp, llama.cpp,
// test/gpu_trainer/trainer.cu): at every position of a context, the logits of the cached path
// (host/trainer.h, next_token_logits_cached) against those of a full forward of the context up
// to that position (next_token_logits), the reference: the same model without the cache.
//
// The cached calls go as generation makes them, and more: the first 3 positions as a prompt
// (P = 0, T = 3), then 2 positions at once (P = 3, T = 2), then one at a time up to the end,
// each followed by the full forward it is compared with (which must leave the cache alone).
#pragma once
#include <cmath>
#include <vector>

#include "../host/checkpoint.h"

// ‖ours − ref‖ / ‖ref‖ over the V real logits; NaN when either holds one.
inline double logits_error(const float* ours, const float* ref, int V) {
    double num = 0, den = 0;
    for (int i = 0; i < V; i++) {
        double d = (double)ours[i] - ref[i];
        num += d * d, den += (double)ref[i] * ref[i];
    }
    return std::sqrt(num / den);
}

// One normalised error per position compared (positions 2, 4, 5, ..., tokens.size() − 1).
template <class Trainer>
std::vector<double> cached_logits_errors(Trainer& m, const ModelConfig& c, const std::vector<int>& tokens) {
    std::vector<double> errors;
    std::vector<float> cached;
    auto compare = [&](const float* logits, int upto) {  // upto: the positions the logits have seen
        cached.assign(logits, logits + c.V);               // (the next call reuses the trainer's buffer)
        errors.push_back(logits_error(cached.data(), m.next_token_logits(tokens.data(), upto), c.V));
    };
    compare(m.next_token_logits_cached(tokens.data(), 3, 0), 3);
    compare(m.next_token_logits_cached(tokens.data() + 3, 2, 3), 5);
    for (int P = 5; P < (int)tokens.size(); P++) compare(m.next_token_logits_cached(tokens.data() + P, 1, P), P + 1);
    return errors;
}

// True when every error is at most tol (a NaN is not).
inline bool all_within(const std::vector<double>& errors, double tol) {
    for (double e : errors)
        if (!(e <= tol)) return false;
    return !errors.empty();
}
inline double largest(const std::vector<double>& errors) {
    double w = 0;
    for (double e : errors) w = std::isnan(e) || e > w ? e : w;
    return w;
}
