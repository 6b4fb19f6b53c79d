// Evaluation: the validation loss and HellaSwag accuracy, numbers that do not depend on how
// the work is split over replicas and micro-batches, so that runs compare.
//
// Both are computed here from one primitive that each trainer provides:
//   const float* token_losses(const int* inputs, const int* targets, int B, int T)
// the forward pass of B sequences of T tokens (no more than the training micro-batch holds)
// and the cross-entropy at each of the B·T positions, in host memory.
//
// Validation. The first --val-tokens tokens of the validation data are cut into sequences
// of T tokens, each with the token after it as the last target (as in training; a sequence
// does not cross a shard boundary). Replica r takes a contiguous share of the sequences and
// adds their per-token losses in double; the sums of all replicas are added and divided by
// the number of tokens. Neither the tokens nor the per-token losses depend on B or R, so
// the result does not either, up to the order of the double additions (~1e-16).
//
// HellaSwag, in llm.c's evaluation-file format (data/hellaswag.py writes it):
//   header: 256 int32, [0] = 20240522, [1] = 1, [2] = examples, [3] = longest example in bytes
//   each example, as uint16: 65535, the example's size in bytes (counted from the 65535),
//   its index, the label (the correct ending), the number of endings K, then the context's
//   length and tokens, and for each ending its length and tokens.
// An ending is scored by the losses of predicting its tokens after the context: their sum
// (acc counts the examples whose lowest sum is the label) and their mean (acc_norm, the
// length-normalised score that GPT-2 124M's published ~29.4% uses). When context and
// ending are longer than T + 1 tokens, the context loses its first tokens. Replicas take
// contiguous shares of the examples and add up what they got right.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "comm.h"
#include "data.h"
#include "error.h"
#include "file.h"

// ---- validation

// This replica's share of the validation sequences.
struct ValidationSet {
    int T = 0;
    long long total = 0;               // sequences, over all replicas
    long long first = 0, count = 0;    // this replica's: [first, first + count)
    std::vector<int> inputs, targets;  // (count, T) each
    bool all_data = false;             // the data held fewer sequences than asked for
    long long tokens() const { return total * T; }
};

// The first `tokens` tokens of `data` as whole sequences of T (all of it when it holds
// fewer), and this replica's share of them.
inline ValidationSet validation_set(DataLoader& data, long long tokens, int T, int rank, int world) {
    data.configure(1, T, 1, 1, 0, false, 0);  // one sequence per chunk, in file order
    ValidationSet v;
    v.T = T;
    v.total = std::min(tokens / T, data.chunks_per_epoch());
    v.all_data = data.chunks_per_epoch() < tokens / T;
    if (v.total < 1)
        throw Error(strf("--val-tokens %s is less than one sequence of --seq-len %d", with_commas(tokens).c_str(), T));
    v.first = v.total * rank / world;
    long long end = v.total * (rank + 1) / world;
    v.count = end - v.first;
    v.inputs.resize(v.count * T), v.targets.resize(v.count * T);
    data.reset();
    for (long long s = 0; s < end; s++) {
        data.next_chunk();
        if (s >= v.first) data.micro_batch(0, &v.inputs[(s - v.first) * T], &v.targets[(s - v.first) * T]);
    }
    return v;
}

// Why the validation set holds fewer tokens than --val-tokens asked for, for the log line
// (with a leading space); "" when it holds exactly that many.
inline std::string validation_rounding(const ValidationSet& v, long long asked) {
    if (v.tokens() == asked) return "";
    if (v.all_data) return " (all the validation data holds)";
    return strf(" (--val-tokens %s rounded down to %s sequence%s of %d)", with_commas(asked).c_str(),
                with_commas(v.total).c_str(), v.total == 1 ? "" : "s", v.T);
}

// Mean loss per token over the whole validation set (every replica gets the same number).
template <class Trainer>
double validation_loss(Trainer& m, const ValidationSet& v, int B, const Comm& comm) {
    double sum = 0;
    for (long long s = 0; s < v.count; s += B) {
        int b = (int)std::min<long long>(B, v.count - s);
        const float* losses = m.token_losses(&v.inputs[s * v.T], &v.targets[s * v.T], b, v.T);
        for (long long i = 0; i < (long long)b * v.T; i++) sum += losses[i];
    }
    return comm.allreduce_sum(sum) / (double)v.tokens();
}

// ---- HellaSwag (multiple-choice examples)

constexpr int EVAL_MAGIC = 20240522;
constexpr int EVAL_VERSION = 1;  // uint16 tokens
constexpr uint16_t EVAL_START = 65535;

struct EvalExample {
    int label = 0;
    std::vector<int> context;
    std::vector<std::vector<int>> endings;
};

// Reads and checks an evaluation file: every token below V, every ending short enough to be
// scored in a sequence of T tokens (it needs one token of context before it).
inline std::vector<EvalExample> read_eval_file(const std::string& path, int V, int T) {
    InputFile f(path, "multiple-choice evaluation file");
    int h[256];
    if (!f.read(h, sizeof h))
        throw Error(strf("'%s' is too short to be an evaluation file (%lld bytes)", path.c_str(), f.size()));
    if (h[0] != EVAL_MAGIC)
        throw Error(strf("'%s' is not an llm.c evaluation file (magic %d, expected %d)", path.c_str(), h[0], EVAL_MAGIC));
    if (h[1] != EVAL_VERSION)
        throw Error(strf("'%s': evaluation-file version %d is not supported (expected %d, uint16 tokens)", path.c_str(),
                         h[1], EVAL_VERSION));
    long long body = f.size() - (long long)sizeof h;
    if (h[2] < 1 || body % 2 != 0 || body < 12ll * h[2])  // an example takes at least 6 uint16
        throw Error(strf("'%s' is truncated or damaged: its header says %d examples, its body has %s bytes",
                         path.c_str(), h[2], with_commas(body).c_str()));
    std::vector<uint16_t> s(body / 2);  // bounded by the file's size (HellaSwag's is 3.6 MB)
    if (!f.read(s.data(), body)) throw Error("'" + path + "' could not be read");
    std::vector<EvalExample> examples(h[2]);
    size_t pos = 0;
    for (int e = 0; e < h[2]; e++) {
        auto damaged = [&](const std::string& why) {
            return Error(strf("'%s': example %d of %d (uint16 %zu of the body) %s", path.c_str(), e, h[2], pos,
                              why.c_str()));
        };
        if (pos + 6 > s.size()) throw damaged("is missing: the file ends first");
        if (s[pos] != EVAL_START) throw damaged(strf("does not start with %u but %u", EVAL_START, s[pos]));
        size_t end = pos + s[pos + 1] / 2;
        if (s[pos + 1] % 2 != 0 || end < pos + 6 || end > s.size())
            throw damaged(strf("says it has %u bytes, which the file does not hold", s[pos + 1]));
        EvalExample& ex = examples[e];
        ex.label = s[pos + 3];
        int K = s[pos + 4];
        if (K < 2 || ex.label >= K) throw damaged(strf("has label %d of %d endings", ex.label, K));
        size_t p = pos + 5;
        auto take = [&](std::vector<int>& out, const std::string& what) {
            size_t len = p < end ? s[p++] : 0;
            if (len == 0 || p + len > end) throw damaged("has an empty or cut-off " + what);
            for (size_t i = 0; i < len; i++)
                if (s[p + i] >= V)
                    throw damaged(strf("has token %u in its %s, out of range for vocabulary size %d", s[p + i],
                                       what.c_str(), V));
            out.assign(s.begin() + p, s.begin() + p + len);
            p += len;
        };
        take(ex.context, "context");
        ex.endings.resize(K);
        for (int k = 0; k < K; k++) {
            take(ex.endings[k], strf("ending %d", k));
            if ((int)ex.endings[k].size() > T)
                throw damaged(strf("has an ending of %zu tokens, more than a sequence of --seq-len %d can score",
                                   ex.endings[k].size(), T));
        }
        if (p != end) throw damaged(strf("has %zu bytes more than its endings hold", 2 * (end - p)));
        pos = end;
    }
    if (pos != s.size())
        throw Error(strf("'%s' has %zu bytes after its %d examples", path.c_str(), 2 * (s.size() - pos), h[2]));
    return examples;
}

// The scores of one example's endings (lower is likelier) and the choices they make.
struct ExampleScores {
    std::vector<double> sum, mean;  // per ending: summed and mean loss over its tokens
    int pred = 0, pred_norm = 0;    // the ending with the lowest sum, the lowest mean (first on ties)
};

// Scores examples [first, end) in micro-batches of up to B rows (one row per ending) of at
// most T positions; each micro-batch is as long as its longest row.
template <class Trainer>
std::vector<ExampleScores> score_examples(Trainer& m, const std::vector<EvalExample>& examples, size_t first,
                                          size_t end, int B, int T) {
    struct Row {
        size_t example;
        int ending;
        std::vector<int> tokens;  // context then ending, the context cut from the front to fit T + 1
        int scored;               // the last `scored` positions predict the ending
    };
    std::vector<Row> rows;
    std::vector<ExampleScores> scores(end - first);
    for (size_t e = first; e < end; e++) {
        const EvalExample& ex = examples[e];
        scores[e - first].sum.assign(ex.endings.size(), 0.0);
        scores[e - first].mean.assign(ex.endings.size(), 0.0);
        for (size_t k = 0; k < ex.endings.size(); k++) {
            const std::vector<int>& ending = ex.endings[k];
            size_t keep = std::min(ex.context.size(), (size_t)T + 1 - ending.size());  // ≥ 1: endings fit T
            Row r{e, (int)k, std::vector<int>(ex.context.end() - keep, ex.context.end()), (int)ending.size()};
            r.tokens.insert(r.tokens.end(), ending.begin(), ending.end());
            rows.push_back(std::move(r));
        }
    }
    std::vector<int> inputs, targets;
    for (size_t r0 = 0; r0 < rows.size(); r0 += B) {
        size_t r1 = std::min(rows.size(), r0 + B);
        int Tb = 0;  // positions of the longest row
        for (size_t r = r0; r < r1; r++) Tb = std::max(Tb, (int)rows[r].tokens.size() - 1);
        inputs.assign((r1 - r0) * Tb, 0), targets.assign((r1 - r0) * Tb, 0);  // shorter rows padded after their end
        for (size_t r = r0; r < r1; r++) {
            const std::vector<int>& t = rows[r].tokens;
            std::copy(t.begin(), t.end() - 1, inputs.begin() + (r - r0) * Tb);
            std::copy(t.begin() + 1, t.end(), targets.begin() + (r - r0) * Tb);
        }
        const float* losses = m.token_losses(inputs.data(), targets.data(), (int)(r1 - r0), Tb);
        for (size_t r = r0; r < r1; r++) {  // causal attention: the padding does not reach these positions
            const Row& row = rows[r];
            int n = (int)row.tokens.size() - 1;
            double sum = 0;
            for (int p = n - row.scored; p < n; p++) sum += losses[(r - r0) * Tb + p];
            ExampleScores& s = scores[row.example - first];
            s.sum[row.ending] = sum, s.mean[row.ending] = sum / row.scored;
        }
    }
    for (ExampleScores& s : scores) {
        s.pred = (int)(std::min_element(s.sum.begin(), s.sum.end()) - s.sum.begin());
        s.pred_norm = (int)(std::min_element(s.mean.begin(), s.mean.end()) - s.mean.begin());
    }
    return scores;
}

struct HellaSwagResult {
    long long examples = 0;
    double acc = 0, acc_norm = 0;  // fractions of the examples chosen right
};

// Accuracy over all examples; replica r scores a contiguous share of them.
template <class Trainer>
HellaSwagResult hellaswag_accuracy(Trainer& m, const std::vector<EvalExample>& examples, int B, int T,
                                   const Comm& comm) {
    size_t n = examples.size(), first = n * comm.rank / comm.world, end = n * (comm.rank + 1) / comm.world;
    double right = 0, right_norm = 0;
    std::vector<ExampleScores> scores = score_examples(m, examples, first, end, B, T);
    for (size_t e = first; e < end; e++) {
        right += scores[e - first].pred == examples[e].label;
        right_norm += scores[e - first].pred_norm == examples[e].label;
    }
    return {(long long)n, comm.allreduce_sum(right) / n, comm.allreduce_sum(right_norm) / n};
}
