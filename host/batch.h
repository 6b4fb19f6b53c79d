// Batch arithmetic. One identity governs every run:
//
//     global batch (tokens per optimizer step) = B × T × A × R
//
// B sequences of T tokens form a micro-batch (what one forward/backward holds in memory),
// A micro-batches are accumulated on each replica before the optimizer steps, and R
// replicas (processes, one per GPU) each contribute their own A micro-batches. The user
// chooses the global batch, B and T; R comes from the launcher; A follows. A split that
// does not divide is an error that shows the numbers, never a silent change of batch.
#pragma once
#include <algorithm>
#include <climits>
#include <string>
#include <utility>
#include <vector>

#include "error.h"

struct BatchPlan {
    int B = 0, T = 0;  // micro-batch: B sequences × T tokens
    int A = 0;         // accumulation steps per optimizer step
    int R = 0;         // replicas
    long long micro_tokens() const { return (long long)B * T; }
    long long global_tokens() const { return (long long)B * T * A * R; }
    long long global_sequences() const { return (long long)B * A * R; }
};

// The largest global batch accepted: 2^32 tokens per step is a thousand times the largest
// GPT batches, and it keeps tokens per step × steps (an int) inside 64 bits.
constexpr long long MAX_GLOBAL_BATCH = 1ll << 32;

// total_tokens = 0 means "one micro-batch per replica" (A = 1). Every product is formed in
// 64 bits and checked before it is narrowed: B·T indexes int arrays, A is an int.
inline BatchPlan plan_batch(int B, int T, int R, long long total_tokens) {
    BatchPlan p;
    p.B = B, p.T = T, p.R = R;
    if (B < 1 || T < 1 || R < 1 || total_tokens < 0)
        throw Error(strf("impossible batch: B %d, T %d, R %d, global batch %lld", B, T, R, total_tokens));
    if ((long long)B * T > INT_MAX)
        throw Error(strf("a micro-batch of B×T = %d×%d = %s tokens is more than %s", B, T,
                         with_commas((long long)B * T).c_str(), with_commas(INT_MAX).c_str()));
    long long per_round = (long long)B * T * R;  // tokens of one micro-batch on every replica: < 2^62
    if (total_tokens == 0) total_tokens = per_round;
    if (total_tokens > MAX_GLOBAL_BATCH)
        throw Error(strf("a global batch of %s tokens is more than the largest accepted, %s (2^32) tokens per step",
                         with_commas(total_tokens).c_str(), with_commas(MAX_GLOBAL_BATCH).c_str()));
    if (total_tokens % per_round != 0) {
        long long below = total_tokens / per_round * per_round, above = below + per_round;
        std::string msg = strf("global batch %s tokens is not a multiple of B×T×R = %d×%d×%d = %s tokens; ",
                               with_commas(total_tokens).c_str(), B, T, R, with_commas(per_round).c_str());
        if (below > 0) msg += "nearest valid --total-batch: " + with_commas(below) + " or " + with_commas(above);
        else msg += "smallest valid --total-batch: " + with_commas(above);
        // Also suggest micro-batch sizes that divide the requested global batch.
        if (total_tokens % ((long long)T * R) == 0) {
            long long seqs = total_tokens / ((long long)T * R);
            std::string options;
            for (long long b = std::min<long long>(seqs, 1024); b >= 1 && options.size() < 40; b--)
                if (seqs % b == 0 && b != B) options += (options.empty() ? "" : ", ") + std::to_string(b);
            msg += "; or keep it with --batch-size " + options;
        }
        throw Error(msg);
    }
    long long A = total_tokens / per_round;
    if (A > INT_MAX)
        throw Error(strf("a global batch of %s tokens needs %s accumulation steps of B×T×R = %d×%d×%d tokens, more "
                         "than %s; raise --batch-size",
                         with_commas(total_tokens).c_str(), with_commas(A).c_str(), B, T, R,
                         with_commas(INT_MAX).c_str()));
    p.A = (int)A;
    return p;
}

// "micro-batch 4×64 = 256 tokens × 8 accumulation × 1 replica = 2,048 tokens per step;
//  500 steps = 1,024,000 tokens"
inline std::string describe_plan(const BatchPlan& p, int steps) {
    return strf("micro-batch %d×%d = %s tokens × %d accumulation × %d replica%s = %s tokens per step; "
                "%s steps = %s tokens",
                p.B, p.T, with_commas(p.micro_tokens()).c_str(), p.A, p.R, p.R == 1 ? "" : "s",
                with_commas(p.global_tokens()).c_str(), with_commas(steps).c_str(),
                with_commas(p.global_tokens() * steps).c_str());
}

// ---- memory: the limit on the micro-batch
//
// What bounds B is memory: a micro-batch's activations must fit beside the model, its
// gradients and AdamW's state. Accumulation makes up the rest of the global batch, so a
// smaller B with a larger A trains the same model.

// What a trainer allocates for one replica, part by part, in bytes.
struct MemoryUse {
    std::vector<std::pair<std::string, double>> parts;
    double total() const {
        double t = 0;
        for (const auto& p : parts) t += p.second;
        return t;
    }
    // "parameters 29.3 MB, gradients 29.3 MB, ...: 1.2 GB in all"
    std::string describe() const {
        std::string s;
        for (const auto& p : parts) s += (s.empty() ? "" : ", ") + p.first + " " + format_bytes(p.second);
        return s + ": " + format_bytes(total()) + " in all";
    }
};

// The largest micro-batch B (sequences of T tokens) that splits a global batch of
// total_tokens over R replicas and whose memory (bytes(B)) fits in `available`; 0 when even
// B = 1 does not fit. The candidates are the divisors of the sequences per replica.
template <class Bytes>
int largest_fitting_batch(int T, int R, long long total_tokens, double available, Bytes bytes) {
    if (total_tokens <= 0 || total_tokens % ((long long)T * R) != 0) return 0;
    long long sequences = total_tokens / ((long long)T * R);  // per replica
    std::vector<long long> divisors;
    for (long long d = 1; d * d <= sequences; d++)
        if (sequences % d == 0) divisors.push_back(d), divisors.push_back(sequences / d);
    std::sort(divisors.rbegin(), divisors.rend());
    for (long long B : divisors)
        if (B <= INT_MAX / T && bytes((int)B) <= available) return (int)B;
    return 0;
}

// --batch-size auto splits the global batch into whole sequences on every replica: a
// global batch that is not a multiple of T×R has no such split, whatever the memory.
inline void check_whole_sequences(long long global, int T, int R) {
    long long per = (long long)T * R;
    if (global % per == 0) return;
    long long below = global / per * per;
    throw Error(strf("global batch %s tokens is not a multiple of T×R = %d×%d = %s tokens, so --batch-size auto "
                     "cannot split it into whole sequences; nearest valid --total-batch: %s%s",
                     with_commas(global).c_str(), T, R, with_commas(per).c_str(),
                     below > 0 ? (with_commas(below) + " or ").c_str() : "", with_commas(below + per).c_str()));
}

// --train-tokens: the steps that many tokens make at `per_step` tokens per step, rounded
// down; `division` gets the arithmetic, as printed at the start.
inline int steps_from_tokens(long long tokens, long long per_step, std::string& division) {
    long long steps = tokens / per_step, dropped = tokens - steps * per_step;
    if (steps < 1)
        throw Error(strf("--train-tokens %s is less than one step of %s tokens", with_commas(tokens).c_str(),
                         with_commas(per_step).c_str()));
    if (steps > INT_MAX)
        throw Error(strf("--train-tokens %s / %s tokens per step = %s steps, more than %s", with_commas(tokens).c_str(),
                         with_commas(per_step).c_str(), with_commas(steps).c_str(), with_commas(INT_MAX).c_str()));
    division = strf("%s tokens / %s tokens per step = %s steps", with_commas(tokens).c_str(),
                    with_commas(per_step).c_str(), with_commas(steps).c_str());
    division += dropped ? strf(" (rounding down leaves out the last %s tokens)", with_commas(dropped).c_str())
                        : " exactly";
    return (int)steps;
}
