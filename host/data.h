// Data loading: llm.c token shards, and the order in which their tokens are served.
//
// Shard file: 256 little-endian int32 header ([0] = 20240520, [1] = 1, [2] = token count),
// then the tokens as uint16.
//
// Order. The data is cut into "chunks", one per optimizer step: a chunk is B×A×R
// consecutive sequences of T tokens (the global batch). Within a chunk, micro-step a of
// replica r takes sequences [(a·R + r)·B, (a·R + r + 1)·B). So every split of the same
// global batch (any B, A, R with the same product) trains each step on exactly the same
// tokens, and replicas never overlap. Without shuffling, a single process with A = 1
// reads batch i from tokens [i·B·T, i·B·T + B·T + 1), the order llm.c's loader uses.
// Shuffling permutes whole chunks (and the shard order) once per epoch, from a seed that
// every replica shares, so the identity above holds with shuffling too.
#pragma once
#include <glob.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "error.h"
#include "rng.h"

constexpr int SHARD_MAGIC = 20240520;
constexpr int SHARD_VERSION = 1;

// Files matching a glob, sorted; an error names the pattern when nothing matches.
inline std::vector<std::string> expand_glob(const std::string& pattern) {
    glob_t g;
    int rc = glob(pattern.c_str(), 0, nullptr, &g);
    std::vector<std::string> files;
    if (rc == 0)
        for (size_t i = 0; i < g.gl_pathc; i++) files.push_back(g.gl_pathv[i]);
    globfree(&g);
    if (files.empty()) throw Error("no file matches '" + pattern + "'");
    std::sort(files.begin(), files.end());
    return files;
}

// Reads and checks a shard's header; returns its token count. Checks the file size too,
// so a truncated download is caught before training starts rather than mid-run.
inline long long read_shard_header(const std::string& path) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) throw Error("cannot open token shard '" + path + "'");
    int header[256];
    size_t got = fread(header, sizeof(int), 256, f);
    fseek(f, 0, SEEK_END);
    long long file_bytes = ftell(f);
    fclose(f);
    if (got != 256) throw Error(strf("'%s' is too short to be a token shard (%lld bytes)", path.c_str(), file_bytes));
    if (header[0] != SHARD_MAGIC)
        throw Error(strf("'%s' is not a token shard (magic %d, expected %d)", path.c_str(), header[0], SHARD_MAGIC));
    if (header[1] != SHARD_VERSION)
        throw Error(strf("'%s': unsupported shard version %d (expected %d)", path.c_str(), header[1], SHARD_VERSION));
    long long ntok = header[2];
    long long expected = 256 * 4 + ntok * 2;
    if (ntok < 0 || file_bytes != expected)
        throw Error(strf("'%s' is truncated or damaged: header says %lld tokens (%lld bytes), file has %lld bytes",
                         path.c_str(), ntok, expected, file_bytes));
    return ntok;
}

// Every token must index the vocabulary: an out-of-range id would read past the
// embedding table, so it is an error that names the file and the position.
inline void check_token_range(const std::vector<uint16_t>& tokens, int V, const std::string& name) {
    for (size_t i = 0; i < tokens.size(); i++)
        if (tokens[i] >= V)
            throw Error(strf("'%s': token %d at position %zu is out of range for vocabulary size %d",
                             name.c_str(), tokens[i], i, V));
}

inline std::vector<uint16_t> read_shard(const std::string& path, int V) {
    long long ntok = read_shard_header(path);
    std::vector<uint16_t> tokens(ntok);
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) throw Error("cannot open token shard '" + path + "'");
    fseek(f, 256 * sizeof(int), SEEK_SET);
    size_t got = fread(tokens.data(), sizeof(uint16_t), ntok, f);
    fclose(f);
    if ((long long)got != ntok) throw Error("'" + path + "' could not be read completely");
    check_token_range(tokens, V, path);
    return tokens;
}

// Where the loader stands: the next chunk it will serve. Saved in checkpoints.
struct DataPosition {
    long long epoch = 0, shard = 0, chunk = 0;
};

class DataLoader {
public:
    // A loader over shard files (loaded one at a time) ...
    DataLoader(const std::vector<std::string>& files, int V) {
        for (const std::string& f : files) shards_.push_back({f, read_shard_header(f), {}});
        V_ = V;
    }
    // ... or over tokens already in memory (the built-in corpus).
    DataLoader(const std::string& name, std::vector<uint16_t> tokens, int V) {
        check_token_range(tokens, V, name);
        long long n = (long long)tokens.size();
        shards_.push_back({name, n, std::move(tokens)});
        V_ = V;
        in_memory_ = true;
    }

    // Sets the batch geometry. chunk_sequences = B×A×R sequences of T tokens per chunk.
    void configure(int B, int T, int A, int R, int rank, bool shuffle, uint64_t seed) {
        B_ = B, T_ = T, A_ = A, R_ = R, rank_ = rank, shuffle_ = shuffle, seed_ = seed;
        for (const Shard& s : shards_)
            if (chunks_in(s) < 1)
                throw Error(strf("'%s' has %s tokens, too few for one step of %s tokens (+1 for the last target)",
                                 s.name.c_str(), with_commas(s.ntok).c_str(), with_commas(chunk_tokens()).c_str()));
        load_order(pos_.epoch);
    }

    long long chunk_tokens() const { return (long long)B_ * A_ * R_ * T_; }
    long long chunks_per_epoch() const {
        long long n = 0;
        for (const Shard& s : shards_) n += chunks_in(s);
        return n;
    }
    const DataPosition& position() const { return pos_; }
    void set_position(const DataPosition& p) {
        pos_ = p;
        load_order(pos_.epoch);
    }
    void reset() { set_position(DataPosition{}); }

    // Moves to the next chunk (the next optimizer step's global batch).
    void next_chunk() {
        long long shard = shard_order_[pos_.shard];
        ensure_loaded(shard);
        current_shard_ = shard;
        current_start_ = chunk_order_[pos_.chunk] * chunk_tokens();
        // advance: next chunk, next shard, or next epoch (reshuffled)
        if (++pos_.chunk == chunks_in(shards_[shard])) {
            pos_.chunk = 0;
            if (++pos_.shard == (long long)shards_.size()) {
                pos_.shard = 0;
                pos_.epoch++;
            }
            load_order(pos_.epoch);
        }
    }

    // This replica's micro-batch a (0 ≤ a < A) of the current chunk: B×T inputs and targets.
    void micro_batch(int a, int* inputs, int* targets) const {
        const std::vector<uint16_t>& tok = shards_[current_shard_].tokens;
        long long start = current_start_ + (long long)(a * R_ + rank_) * B_ * T_;
        for (long long i = 0; i < (long long)B_ * T_; i++) {
            inputs[i] = tok[start + i];
            targets[i] = tok[start + i + 1];  // targets are the inputs shifted by one token
        }
    }

    // Identifies the data, so replicas can check they all read the same files.
    uint64_t fingerprint() const {
        uint64_t h = 1469598103934665603ull;
        for (const Shard& s : shards_) {
            for (char c : s.name) h = (h ^ (unsigned char)c) * 1099511628211ull;
            h = (h ^ (uint64_t)s.ntok) * 1099511628211ull;
        }
        return h;
    }
    size_t num_shards() const { return shards_.size(); }
    long long total_tokens() const {
        long long n = 0;
        for (const Shard& s : shards_) n += s.ntok;
        return n;
    }

private:
    struct Shard {
        std::string name;
        long long ntok;
        std::vector<uint16_t> tokens;  // empty until loaded (files) or always full (memory)
    };
    long long chunks_in(const Shard& s) const { return (s.ntok - 1) / chunk_tokens(); }

    void ensure_loaded(long long shard) {
        if (in_memory_ || !shards_[shard].tokens.empty()) return;
        for (Shard& s : shards_) std::vector<uint16_t>().swap(s.tokens);  // one shard in memory at a time
        shards_[shard].tokens = read_shard(shards_[shard].name, V_);
    }

    // The shard order of an epoch and the chunk order of the current shard.
    void load_order(long long epoch) {
        shard_order_.resize(shards_.size());
        for (size_t i = 0; i < shards_.size(); i++) shard_order_[i] = (long long)i;
        if (shuffle_) permute(shard_order_, mix_seed(seed_, (uint64_t)epoch));
        const Shard& s = shards_[shard_order_[pos_.shard]];
        chunk_order_.resize(chunks_in(s));
        for (long long i = 0; i < (long long)chunk_order_.size(); i++) chunk_order_[i] = i;
        if (shuffle_) permute(chunk_order_, mix_seed(seed_, (uint64_t)epoch, (uint64_t)shard_order_[pos_.shard] + 1));
    }
    static void permute(std::vector<long long>& v, uint64_t seed) {  // Fisher-Yates
        Rng rng(seed);
        for (size_t i = v.size(); i > 1; i--) std::swap(v[i - 1], v[rng.below(i)]);
    }

    std::vector<Shard> shards_;
    int V_ = 0;
    bool in_memory_ = false;
    int B_ = 1, T_ = 1, A_ = 1, R_ = 1, rank_ = 0;
    bool shuffle_ = false;
    uint64_t seed_ = 0;
    DataPosition pos_;
    std::vector<long long> shard_order_, chunk_order_;
    long long current_shard_ = 0, current_start_ = 0;
};
