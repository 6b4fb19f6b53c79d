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
#include "file.h"
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

// FNV-1a, continued from h: a small, stable hash for fingerprints.
inline uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = 1469598103934665603ull) {
    for (size_t i = 0; i < bytes; i++) h = (h ^ ((const unsigned char*)data)[i]) * 1099511628211ull;
    return h;
}

// Reads and checks a shard's header; returns its token count. Checks the file size too,
// so a truncated download is caught before training starts rather than mid-run. With
// `hash`, continues it over the header and the first KiB of tokens (llm.c's headers differ
// only in the token count, so the tokens make the fingerprint tell datasets apart). With
// `largest`, raises it to the largest of those first tokens.
inline long long read_shard_header(const std::string& path, uint64_t* hash = nullptr, int* largest = nullptr) {
    InputFile f(path, "token shard");
    int header[256];
    if (!f.read(header, sizeof header))
        throw Error(strf("'%s' is too short to be a token shard (%lld bytes)", path.c_str(), f.size()));
    if (header[0] != SHARD_MAGIC)
        throw Error(strf("'%s' is not a token shard (magic %d, expected %d)", path.c_str(), header[0], SHARD_MAGIC));
    if (header[1] != SHARD_VERSION)
        throw Error(strf("'%s': unsupported shard version %d (expected %d)", path.c_str(), header[1], SHARD_VERSION));
    long long ntok = header[2];
    long long expected = 256 * 4 + ntok * 2;  // ntok is an int32: no overflow in 64 bits
    if (ntok < 0 || f.size() != expected)
        throw Error(strf("'%s' is truncated or damaged: header says %lld tokens (%lld bytes), file has %lld bytes",
                         path.c_str(), ntok, expected, f.size()));
    if (hash || largest) {
        uint16_t first[512];
        size_t n = (size_t)std::min<long long>(512, ntok);
        if (!f.read(first, n * 2)) throw Error("'" + path + "' could not be read");
        if (hash) *hash = fnv1a(first, n * 2, fnv1a(header, sizeof header, *hash));
        if (largest)
            for (size_t i = 0; i < n; i++) *largest = std::max(*largest, (int)first[i]);
    }
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
    long long ntok = read_shard_header(path);  // checked against the file size: the allocation is bounded by it
    std::vector<uint16_t> tokens;
    try {
        tokens.resize(ntok);
    } catch (const std::bad_alloc&) {
        throw Error(strf("out of memory loading token shard '%s': %s tokens (%s)", path.c_str(),
                         with_commas(ntok).c_str(), format_bytes(ntok * 2.0).c_str()));
    }
    InputFile f(path, "token shard");
    f.seek(256 * sizeof(int));
    if (!f.read(tokens.data(), ntok * sizeof(uint16_t))) throw Error("'" + path + "' could not be read completely");
    check_token_range(tokens, V, path);
    return tokens;
}

// Where the loader stands: the next chunk it will serve. Saved in checkpoints.
struct DataPosition {
    long long epoch = 0, shard = 0, chunk = 0;
};

// What the training data is, as far as a checkpoint needs to know: a resumed run must read
// the same tokens. The fingerprint hashes every shard's header and first KiB of tokens, in
// order (not the file names: the same data moved elsewhere is the same data).
struct DataIdentity {
    uint64_t fingerprint = 0;
    long long tokens = 0;
    long long shards = 0;  // 0: unknown (a checkpoint from before fingerprints)
    std::string describe() const {
        return strf("%lld shard%s, %s tokens, fingerprint %016llx", shards, shards == 1 ? "" : "s",
                    with_commas(tokens).c_str(), (unsigned long long)fingerprint);
    }
    bool operator==(const DataIdentity& o) const {
        return fingerprint == o.fingerprint && tokens == o.tokens && shards == o.shards;
    }
};

class DataLoader {
public:
    // A loader over shard files (loaded one at a time) ...
    DataLoader(const std::vector<std::string>& files, int V) {
        uint64_t h = fnv1a(nullptr, 0);  // the hash of nothing, continued over every shard
        for (const std::string& f : files) shards_.push_back({f, read_shard_header(f, &h, &leading_max_), {}});
        fingerprint_ = h;
        V_ = V;
    }
    // ... or over tokens already in memory (the built-in corpus).
    DataLoader(const std::string& name, std::vector<uint16_t> tokens, int V) {
        check_token_range(tokens, V, name);
        long long n = (long long)tokens.size();
        fingerprint_ = fnv1a(&n, sizeof n);
        fingerprint_ = fnv1a(tokens.data(), std::min<size_t>(tokens.size(), 512) * sizeof(uint16_t), fingerprint_);
        for (size_t i = 0; i < std::min<size_t>(tokens.size(), 512); i++) leading_max_ = std::max(leading_max_, (int)tokens[i]);
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
    // Why p cannot be a position in this data with this batch geometry; empty when it can.
    std::string position_problem(const DataPosition& p) const {
        if (p.epoch < 0 || p.shard < 0 || p.chunk < 0)
            return strf("epoch %lld, shard %lld, chunk %lld: negative", p.epoch, p.shard, p.chunk);
        if (p.shard >= (long long)shards_.size())
            return strf("shard %lld, but the data has %zu shard%s", p.shard, shards_.size(),
                        shards_.size() == 1 ? "" : "s");
        const Shard& s = shards_[shard_order(p.epoch)[p.shard]];
        if (p.chunk >= chunks_in(s))
            return strf("chunk %lld of '%s', which has %lld chunks of %s tokens", p.chunk, s.name.c_str(),
                        chunks_in(s), with_commas(chunk_tokens()).c_str());
        return "";
    }
    void set_position(const DataPosition& p) {
        std::string problem = position_problem(p);
        if (!problem.empty()) throw Error("data position outside the data: " + problem);
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
        long long start = current_start_ + ((long long)a * R_ + rank_) * B_ * T_;
        for (long long i = 0; i < (long long)B_ * T_; i++) {
            inputs[i] = tok[start + i];
            targets[i] = tok[start + i + 1];  // targets are the inputs shifted by one token
        }
    }

    // Identifies the data, for checkpoints and for replicas to check they read the same tokens.
    DataIdentity identity() const { return {fingerprint_, total_tokens(), (long long)shards_.size()}; }
    size_t num_shards() const { return shards_.size(); }
    const std::string& first_shard_name() const { return shards_[0].name; }
    // The largest of the first 512 tokens of every shard: below 256, the data looks byte-level.
    int leading_max_token() const { return leading_max_; }
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

    std::vector<long long> shard_order(long long epoch) const {
        std::vector<long long> order(shards_.size());
        for (size_t i = 0; i < shards_.size(); i++) order[i] = (long long)i;
        if (shuffle_) permute(order, mix_seed(seed_, (uint64_t)epoch));
        return order;
    }
    // The shard order of an epoch and the chunk order of the current shard.
    void load_order(long long epoch) {
        shard_order_ = shard_order(epoch);
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
    uint64_t fingerprint_ = 0;
    int leading_max_ = 0;
    int V_ = 0;
    bool in_memory_ = false;
    int B_ = 1, T_ = 1, A_ = 1, R_ = 1, rank_ = 0;
    bool shuffle_ = false;
    uint64_t seed_ = 0;
    DataPosition pos_;
    std::vector<long long> shard_order_, chunk_order_;
    long long current_shard_ = 0, current_start_ = 0;
};

// Warns when data made of byte tokens meets a model with a larger vocabulary: it trains,
// but on the wrong tokenization (e.g. text_to_shards.py --tokenizer bytes without --vocab 256).
inline std::string byte_level_warning(const DataLoader& data, const char* which, int V) {
    if (V <= 256 || data.leading_max_token() >= 256) return "";
    return strf("warning: the %s data looks byte-level: the first tokens of %s are all below 256, but the model's "
                "vocabulary has V = %s (made with --tokenizer bytes? then train with --vocab 256)",
                which, data.num_shards() == 1 ? ("'" + data.first_shard_name() + "'").c_str() : "every shard",
                with_commas(V).c_str());
}
