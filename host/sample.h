// Sampling text from the model: choosing the next token from logits, and decoding tokens
// with llm.c's tokenizer file.
//
// Tokenizer file: 256 little-endian uint32 header ([0] = 20240328, [1] = version 1 or 2,
// [2] = vocabulary size, [3] = end-of-text token in version 2), then per token one byte
// length n followed by n bytes.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "error.h"
#include "rng.h"

constexpr uint32_t TOKENIZER_MAGIC = 20240328;

struct Tokenizer {
    std::vector<std::string> pieces;  // empty: tokens are bytes
    int eot = -1;                     // end-of-text token, -1 if unknown

    static Tokenizer load(const std::string& path) {
        Tokenizer t;
        FILE* f = fopen(path.c_str(), "rb");
        if (!f) throw Error("cannot open tokenizer file '" + path + "'");
        uint32_t h[256];
        bool ok = fread(h, sizeof(uint32_t), 256, f) == 256;
        if (!ok || h[0] != TOKENIZER_MAGIC || (h[1] != 1 && h[1] != 2)) {
            fclose(f);
            throw Error(strf("'%s' is not an llm.c tokenizer file (magic %u, expected %u)", path.c_str(),
                             ok ? h[0] : 0, TOKENIZER_MAGIC));
        }
        t.eot = h[1] == 2 ? (int)h[3] : -1;
        t.pieces.resize(h[2]);
        for (uint32_t i = 0; i < h[2]; i++) {
            unsigned char len;
            char buf[256];
            if (fread(&len, 1, 1, f) != 1 || fread(buf, 1, len, f) != len) {
                fclose(f);
                throw Error(strf("'%s' is truncated at token %u of %u", path.c_str(), i, h[2]));
            }
            t.pieces[i].assign(buf, len);
        }
        fclose(f);
        return t;
    }

    std::string decode(int token) const {
        if (pieces.empty()) return std::string(1, (char)token);  // byte-level tokens
        if (token >= 0 && token < (int)pieces.size()) return pieces[token];
        return strf("<%d>", token);
    }
};

// Picks the next token from one row of logits (only the first V entries are real).
// temperature < 1 sharpens the distribution; top_k > 0 keeps only the k likeliest tokens.
inline int sample_token(const float* logits, int V, float temperature, int top_k, Rng& rng) {
    std::vector<std::pair<float, int>> cand(V);
    for (int i = 0; i < V; i++) cand[i] = {logits[i] / temperature, i};
    int k = (top_k > 0 && top_k < V) ? top_k : V;
    if (k < V)
        std::partial_sort(cand.begin(), cand.begin() + k, cand.end(),
                          [](const auto& a, const auto& b) { return a.first > b.first; });
    float maxv = -INFINITY;
    for (int i = 0; i < k; i++) maxv = std::max(maxv, cand[i].first);
    double sum = 0;
    for (int i = 0; i < k; i++) sum += std::exp((double)cand[i].first - maxv);
    double u = rng.uniform() * sum, acc = 0;
    for (int i = 0; i < k; i++)
        if (u < (acc += std::exp((double)cand[i].first - maxv))) return cand[i].second;
    return cand[k - 1].second;  // rounding left u at the very end
}
