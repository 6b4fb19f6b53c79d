// Sampling text from the model: choosing the next token from logits, and decoding tokens
// with llm.c's tokenizer file.
//
// Tokenizer file: 256 little-endian uint32 header ([0] = 20240328, [1] = version 1 or 2,
// [2] = vocabulary size, [3] = end-of-text token in version 2), then per token one byte
// length n followed by n bytes.
#pragma once
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "cli.h"
#include "error.h"
#include "file.h"
#include "rng.h"

constexpr uint32_t TOKENIZER_MAGIC = 20240328;

struct Tokenizer {
    std::vector<std::string> pieces;  // empty: tokens are bytes
    int eot = -1;                     // end-of-text token, -1 if unknown
    std::string path;                 // the file it came from, for messages

    // Reads a tokenizer file, checking the header against the file's size before
    // allocating anything for it.
    static Tokenizer load(const std::string& path) {
        InputFile f(path, "tokenizer file");
        uint32_t h[256];
        if (!f.read(h, sizeof h))
            throw Error(strf("'%s' is too short to be an llm.c tokenizer file (%lld bytes)", path.c_str(), f.size()));
        if (h[0] != TOKENIZER_MAGIC)
            throw Error(strf("'%s' is not an llm.c tokenizer file (magic %u, expected %u)", path.c_str(), h[0],
                             TOKENIZER_MAGIC));
        if (h[1] != 1 && h[1] != 2)
            throw Error(strf("'%s': tokenizer version %u is not supported (expected 1 or 2)", path.c_str(), h[1]));
        // every token takes at least its length byte, so the file size bounds the count
        long long count = h[2], most = f.size() - 1024;
        if (count == 0) throw Error(strf("'%s' holds no tokens", path.c_str()));
        if (count > most)
            throw Error(strf("'%s' says it holds %s tokens, but its %s bytes after the header can hold at most %s",
                             path.c_str(), with_commas(count).c_str(), with_commas(most).c_str(),
                             with_commas(most).c_str()));
        Tokenizer t;
        t.path = path;
        if (h[1] == 2) {
            if (h[3] >= count)
                throw Error(strf("'%s': end-of-text token %u is not below its %s tokens", path.c_str(), h[3],
                                 with_commas(count).c_str()));
            t.eot = (int)h[3];
        }
        t.pieces.resize(count);
        for (long long i = 0; i < count; i++) {
            unsigned char len;
            char buf[256];
            if (!f.read(&len, 1) || !f.read(buf, len))
                throw Error(strf("'%s' is truncated at token %lld of %lld", path.c_str(), i, count));
            t.pieces[i].assign(buf, len);
        }
        return t;
    }

    std::string decode(int token) const {
        if (pieces.empty()) return std::string(1, (char)token);  // byte-level tokens
        if (token >= 0 && token < (int)pieces.size()) return pieces[token];
        return strf("<%d>", token);
    }
};

// Text made safe for a terminal: valid UTF-8 passes unchanged, but control characters (C0,
// DEL and C1, which can move the cursor or change the terminal's state) and every byte of an
// invalid sequence are written as \xNN. Newlines and tabs pass when keep_lines, else they
// are written \n and \t (to keep a prompt on one line). The log keeps the exact bytes.
inline std::string terminal_text(const std::string& s, bool keep_lines = true) {
    std::string out;
    auto escape = [&](unsigned char c) { out += strf("\\x%02x", c); };
    for (size_t i = 0; i < s.size();) {
        unsigned char c = s[i];
        if (c < 0x80) {
            bool line = c == '\n' || c == '\t';
            if (line && !keep_lines) out += c == '\n' ? "\\n" : "\\t";
            else if ((c < 0x20 && !line) || c == 0x7f) escape(c);
            else out += (char)c;
            i++;
            continue;
        }
        // the length of a well-formed sequence led by c (0: c cannot lead one), and the range
        // its second byte must be in (which excludes overlong forms, surrogates, > U+10FFFF)
        int n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        unsigned char lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
        unsigned char hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
        bool ok = n > 0 && i + n <= s.size();
        for (int k = 1; ok && k < n; k++) {
            unsigned char b = s[i + k];
            ok = k == 1 ? b >= lo && b <= hi : b >= 0x80 && b <= 0xbf;
        }
        if (ok && !(c == 0xc2 && (unsigned char)s[i + 1] < 0xa0)) {  // U+0080..U+009F are the C1 controls
            out.append(s, i, n);
            i += n;
        } else {
            escape(c);
            i++;
        }
    }
    return out;
}

// How a sample picks its tokens (--temperature, --top-k, --top-p) and computes them (--kv-cache).
struct Sampling {
    float temperature = 1;  // < 1 sharpens the distribution
    int top_k = 0;          // > 0: only the k likeliest tokens
    float top_p = 1;        // < 1: only the likeliest tokens whose probabilities add up to top_p (nucleus)
    bool kv_cache = true;   // each new token one position through the layers, else the whole context again
};
inline Sampling sampling_of(const Config& cfg) { return {cfg.temperature, cfg.top_k, cfg.top_p, cfg.kv_cache == 1}; }

// Picks the next token from one row of logits (only the first V entries are real): top-k first,
// then top-p among those k, then a draw from what is left, renormalised.
inline int sample_token(const float* logits, int V, const Sampling& s, Rng& rng) {
    std::vector<std::pair<float, int>> cand(V);
    for (int i = 0; i < V; i++) cand[i] = {logits[i] / s.temperature, i};
    int k = (s.top_k > 0 && s.top_k < V) ? s.top_k : V;
    // the likelier first; equal logits by token id, so the order does not depend on the sort
    auto likelier = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
    if (k < V) std::partial_sort(cand.begin(), cand.begin() + k, cand.end(), likelier);
    else if (s.top_p < 1) std::sort(cand.begin(), cand.end(), likelier);  // (the order is total: the same either way)
    float maxv = -INFINITY;
    for (int i = 0; i < k; i++) maxv = std::max(maxv, cand[i].first);
    double sum = 0;
    for (int i = 0; i < k; i++) sum += std::exp((double)cand[i].first - maxv);
    if (s.top_p < 1) {  // the fewest likeliest tokens whose probability reaches top_p: the nucleus
        double kept = 0;
        int n = 0;
        while (n < k && kept < s.top_p * sum) kept += std::exp((double)cand[n++].first - maxv);
        k = n, sum = kept;  // n ≥ 1: the likeliest token alone adds exp(0) = 1
    }
    double u = rng.uniform() * sum, acc = 0;
    for (int i = 0; i < k; i++)
        if (u < (acc += std::exp((double)cand[i].first - maxv))) return cand[i].second;
    return cand[k - 1].second;  // rounding left u at the very end
}

// A sample's tokens (the prompt first) and the seconds its new tokens took.
struct Sample {
    std::vector<int> tokens;
    double seconds = 0;
};

// Continues `tokens` by n sampled tokens. The model sees a context of at most `window` tokens
// (the trainer's T): when a new token would overflow it, the context restarts from its last
// window/2 tokens, at position 0. With the key/value cache (host/trainer.h,
// next_token_logits_cached) the context is run through the layers once, as it starts, and then
// each new token is one position attending to the cached keys and values: a restart costs one
// forward of window/2 positions every window/2 tokens. Without it, every token is a forward of
// the whole context: the reference the cache is checked against, the same contexts either way.
template <class Trainer>
Sample generate(Trainer& m, const ModelConfig& mc, int window, std::vector<int> tokens, int n, const Sampling& s,
                Rng& rng) {
    const auto t0 = std::chrono::steady_clock::now();
    size_t start = 0;  // the context is tokens[start, end)
    int cached = 0;    // how many of its positions the cache holds
    for (int i = 0; i < n; i++) {
        if (tokens.size() - start > (size_t)window) start = tokens.size() - std::max(window / 2, 1), cached = 0;
        const int T = (int)(tokens.size() - start);
        const int* context = tokens.data() + start;
        const float* logits = s.kv_cache ? m.next_token_logits_cached(context + cached, T - cached, cached)
                                         : m.next_token_logits(context, T);
        cached = T;
        tokens.push_back(sample_token(logits, mc.V, s, rng));
    }
    return {tokens, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

// A forward without the key/value cache (the trainers' model_forward, its P).
constexpr int NO_CACHE = -1;
// Floats (or floatX) of the key/value cache for a context of T tokens: per layer and position,
// the keys then the values of the KVH heads (Llama's grouped heads once per group).
inline size_t kv_cache_elements(const ModelConfig& c, int T) { return (size_t)c.L * T * 2 * c.kv_heads() * c.hs(); }
// Whether this process samples with the cache: only rank 0 samples, when samples are on.
inline bool kv_cache_used(const Config& cfg, int rank) { return cfg.kv_cache == 1 && cfg.sample_every > 0 && rank == 0; }

inline std::string decode(const Tokenizer& tok, const std::vector<int>& tokens, size_t from, size_t to) {
    std::string s;
    for (size_t i = from; i < to; i++) s += tok.decode(tokens[i]);
    return s;
}

// The prompt is text for byte-level models and comma-separated token ids with a
// tokenizer (this trainer has no BPE encoder). Empty: the end-of-text token, or a newline.
inline std::vector<int> parse_prompt(const std::string& text, const Tokenizer& tok, int V) {
    std::vector<long long> ids;  // 64 bits: an id beyond int must be reported, not wrapped
    if (text.empty()) {
        ids.push_back(tok.eot >= 0 ? tok.eot : '\n');  // a tokenizer's eot is below its size, which is V
    } else if (tok.pieces.empty()) {
        for (unsigned char ch : text) ids.push_back(ch);
    } else {
        size_t pos = 0;
        while (pos < text.size()) {
            size_t end = text.find(',', pos);
            std::string item = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
            char* stop;
            errno = 0;
            long long id = strtoll(item.c_str(), &stop, 10);
            if (item.empty() || *stop || errno)
                throw UsageError("--prompt with a tokenizer expects token ids like 464,318, got '" + item + "'");
            ids.push_back(id);
            pos = end == std::string::npos ? text.size() : end + 1;
        }
    }
    for (long long id : ids)
        if (id < 0 || id >= V)
            throw UsageError(strf("--prompt token %lld is out of range for vocabulary %d", id, V));
    return std::vector<int>(ids.begin(), ids.end());
}

// A sample takes one forward pass per token, and a stop request waits for it (host/stop.h):
// its length is bounded at SAMPLE_CONTEXTS times the model's context, which is already far
// beyond what a sample is read for.
constexpr int SAMPLE_CONTEXTS = 16;
inline void check_sample_length(const Config& cfg, const ModelConfig& mc) {
    const long long most = (long long)SAMPLE_CONTEXTS * mc.maxT;
    if (cfg.sample_every > 0 && cfg.sample_len > most)
        throw Error(strf("--sample-len %s is more than %d times the model's context of %s tokens (at most %s): each "
                         "token of a sample is a forward pass, and the run waits for it",
                         with_commas(cfg.sample_len).c_str(), SAMPLE_CONTEXTS, with_commas(mc.maxT).c_str(),
                         with_commas(most).c_str()));
}
