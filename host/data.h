// Data loading: llm.c token shards, and the order in which their tokens are served.
//
// Shard file: 256 little-endian int32 header ([0] magic, [1] version, [2] token count), then
// the tokens, in one of llm.c's two kinds (the header says which):
//   GPT-2:   [0] = 20240520, [1] = 1, tokens as uint16;
//   Llama-3: [0] = 20240801, [1] = 7, tokens as uint32 (vocabularies past 65,536, such as
//            Llama-3's 128,256). These are the magic, version and token type that llm.c's
//            dev/data/data_common.py gives its "llama-3" model_desc (HEADERS_INFO, used by
//            write_datafile); its "gpt-2" entry is the kind above.
// Every shard of a loader is of one kind. A uint16 shard stays uint16 in memory.
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
#include <climits>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "error.h"
#include "file.h"
#include "rng.h"

constexpr int SHARD_MAGIC = 20240520;  // GPT-2: uint16 tokens
constexpr int SHARD_VERSION = 1;
constexpr int SHARD32_MAGIC = 20240801;  // Llama-3: uint32 tokens
constexpr int SHARD32_VERSION = 7;

// What a shard's header says: its token count and the bytes of one token (2 or 4).
struct ShardHeader {
    long long tokens = 0;
    int token_bytes = 2;
};

// "uint16" or "uint32": a kind of shard as error lines name it.
inline const char* token_type(int token_bytes) { return token_bytes == 4 ? "uint32" : "uint16"; }

// A shard's tokens, as wide as its file stores them: u16 when token_bytes is 2, u32 when 4
// (the other vector stays empty).
struct Tokens {
    int token_bytes = 2;
    std::vector<uint16_t> u16;
    std::vector<uint32_t> u32;
    size_t size() const { return token_bytes == 4 ? u32.size() : u16.size(); }
    bool empty() const { return size() == 0; }
    uint32_t operator[](size_t i) const { return token_bytes == 4 ? u32[i] : u16[i]; }
    const void* data() const { return token_bytes == 4 ? (const void*)u32.data() : (const void*)u16.data(); }
    void release() { std::vector<uint16_t>().swap(u16), std::vector<uint32_t>().swap(u32); }
    static Tokens of(std::vector<uint16_t> v) {
        Tokens t;
        t.u16 = std::move(v);
        return t;
    }
    static Tokens of(std::vector<uint32_t> v) {
        Tokens t;
        t.token_bytes = 4;
        t.u32 = std::move(v);
        return t;
    }
};

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

// Reads and checks a shard's header: its kind (magic and version), and its token count
// against the file size, so a truncated download is caught before training starts rather
// than mid-run. With `hash`, continues it over the header and the first 512 tokens (llm.c's
// headers differ only in the token count, so the tokens make the fingerprint tell datasets
// apart; for a uint16 shard that is its first KiB, as it has always been). With
// `largest`, raises it to the largest of those first tokens.
inline ShardHeader read_shard_header(const std::string& path, uint64_t* hash = nullptr, int* largest = nullptr) {
    InputFile f(path, "token shard");
    int header[256];
    if (!f.read(header, sizeof header))
        throw Error(strf("'%s' is too short to be a token shard (%lld bytes)", path.c_str(), f.size()));
    ShardHeader h;
    if (header[0] == SHARD_MAGIC)
        h.token_bytes = 2;
    else if (header[0] == SHARD32_MAGIC)
        h.token_bytes = 4;
    else
        throw Error(strf("'%s' is not a token shard (magic %d, expected %d for uint16 tokens or %d for uint32 tokens)",
                         path.c_str(), header[0], SHARD_MAGIC, SHARD32_MAGIC));
    int version = h.token_bytes == 4 ? SHARD32_VERSION : SHARD_VERSION;
    if (header[1] != version)
        throw Error(strf("'%s': unsupported shard version %d (expected %d with magic %d, %s tokens)", path.c_str(),
                         header[1], version, header[0], token_type(h.token_bytes)));
    h.tokens = header[2];
    long long expected = 256 * 4 + h.tokens * h.token_bytes;  // the count is an int32: no overflow in 64 bits
    if (h.tokens < 0 || f.size() != expected)
        throw Error(strf("'%s' is truncated or damaged: header says %lld tokens (%lld bytes), file has %lld bytes",
                         path.c_str(), h.tokens, expected, f.size()));
    if (hash || largest) {
        uint16_t first16[512];
        uint32_t first32[512];
        size_t n = (size_t)std::min<long long>(512, h.tokens);
        void* first = h.token_bytes == 4 ? (void*)first32 : (void*)first16;
        if (!f.read(first, n * h.token_bytes)) throw Error("'" + path + "' could not be read");
        if (hash) *hash = fnv1a(first, n * h.token_bytes, fnv1a(header, sizeof header, *hash));
        if (largest)
            for (size_t i = 0; i < n; i++) {
                uint32_t t = h.token_bytes == 4 ? first32[i] : first16[i];
                *largest = std::max(*largest, (int)std::min<uint32_t>(t, INT_MAX));
            }
    }
    return h;
}

// Every token must index the vocabulary: an out-of-range id would read past the
// embedding table, so it is an error that names the file and the position.
template <class T>
inline void check_token_range(const std::vector<T>& tokens, int V, const std::string& name) {
    for (size_t i = 0; i < tokens.size(); i++)
        if ((long long)tokens[i] >= V)
            throw Error(strf("'%s': token %lld at position %zu is out of range for vocabulary size %d",
                             name.c_str(), (long long)tokens[i], i, V));
}
inline void check_token_range(const Tokens& tokens, int V, const std::string& name) {
    if (tokens.token_bytes == 4)
        check_token_range(tokens.u32, V, name);
    else
        check_token_range(tokens.u16, V, name);
}

inline Tokens read_shard(const std::string& path, int V) {
    ShardHeader h = read_shard_header(path);  // checked against the file size: the allocation is bounded by it
    Tokens tokens;
    tokens.token_bytes = h.token_bytes;
    try {
        if (h.token_bytes == 4)
            tokens.u32.resize(h.tokens);
        else
            tokens.u16.resize(h.tokens);
    } catch (const std::bad_alloc&) {
        throw Error(strf("out of memory loading token shard '%s': %s %s tokens (%s)", path.c_str(),
                         with_commas(h.tokens).c_str(), token_type(h.token_bytes),
                         format_bytes((double)h.tokens * h.token_bytes).c_str()));
    }
    InputFile f(path, "token shard");
    f.seek(256 * sizeof(int));
    if (!f.read((void*)tokens.data(), (size_t)h.tokens * h.token_bytes))
        throw Error("'" + path + "' could not be read completely");
    check_token_range(tokens, V, path);
    return tokens;
}

// Where the loader stands: the next chunk it will serve. Saved in checkpoints.
struct DataPosition {
    long long epoch = 0, shard = 0, chunk = 0;
};

// What the training data is, as far as a checkpoint needs to know: a resumed run must read
// the same tokens. The fingerprint hashes every shard's header and first 512 tokens, in
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
    // A loader over shard files (loaded one at a time), all of one kind ...
    DataLoader(const std::vector<std::string>& files, int V) {
        uint64_t h = fnv1a(nullptr, 0);  // the hash of nothing, continued over every shard
        for (const std::string& f : files) {
            ShardHeader header = read_shard_header(f, &h, &leading_max_);
            if (!shards_.empty() && header.token_bytes != token_bytes_)
                throw Error(strf("'%s' holds %s tokens but '%s' holds %s tokens: every shard of a run must be of "
                                 "one kind (llm.c's GPT-2 shards or its Llama-3 shards)",
                                 f.c_str(), token_type(header.token_bytes), shards_[0].name.c_str(),
                                 token_type(token_bytes_)));
            token_bytes_ = header.token_bytes;
            shards_.push_back({f, header.tokens, {}});
        }
        fingerprint_ = h;
        V_ = V;
    }
    // ... or over tokens already in memory (the built-in corpus; tests), uint16 or uint32. The
    // fingerprint hashes the count and the first 512 tokens (uint16: what it always hashed).
    DataLoader(const std::string& name, Tokens tokens, int V) {
        check_token_range(tokens, V, name);
        long long n = (long long)tokens.size();
        size_t lead = std::min<size_t>(tokens.size(), 512);
        fingerprint_ = fnv1a(&n, sizeof n);
        fingerprint_ = fnv1a(tokens.data(), lead * tokens.token_bytes, fingerprint_);
        for (size_t i = 0; i < lead; i++) leading_max_ = std::max(leading_max_, (int)std::min<uint32_t>(tokens[i], INT_MAX));
        token_bytes_ = tokens.token_bytes;
        shards_.push_back({name, n, std::move(tokens)});
        V_ = V;
        in_memory_ = true;
    }
    DataLoader(const std::string& name, std::vector<uint16_t> tokens, int V)
        : DataLoader(name, Tokens::of(std::move(tokens)), V) {}
    DataLoader(const std::string& name, std::vector<uint32_t> tokens, int V)
        : DataLoader(name, Tokens::of(std::move(tokens)), V) {}

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
        const Tokens& tok = shards_[current_shard_].tokens;
        long long start = current_start_ + ((long long)a * R_ + rank_) * B_ * T_;
        if (tok.token_bytes == 4)  // (the width is chosen once per micro-batch, not per token)
            copy_batch(tok.u32.data() + start, (long long)B_ * T_, inputs, targets);
        else
            copy_batch(tok.u16.data() + start, (long long)B_ * T_, inputs, targets);
    }

    // Identifies the data, for checkpoints and for replicas to check they read the same tokens.
    DataIdentity identity() const { return {fingerprint_, total_tokens(), (long long)shards_.size()}; }
    size_t num_shards() const { return shards_.size(); }
    // The bytes of one token in every shard: 2 (uint16, GPT-2's shards) or 4 (uint32, Llama-3's).
    int token_bytes() const { return token_bytes_; }
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
        Tokens tokens;  // empty until loaded (files) or always full (memory)
    };
    // Inputs and targets (the inputs shifted by one token) of n positions from src.
    template <class T>
    static void copy_batch(const T* src, long long n, int* inputs, int* targets) {
        for (long long i = 0; i < n; i++) {
            inputs[i] = (int)src[i];  // below V (checked at load), so it fits an int
            targets[i] = (int)src[i + 1];
        }
    }
    long long chunks_in(const Shard& s) const { return (s.ntok - 1) / chunk_tokens(); }

    void ensure_loaded(long long shard) {
        if (in_memory_ || !shards_[shard].tokens.empty()) return;
        for (Shard& s : shards_) s.tokens.release();  // one shard in memory at a time
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
    int token_bytes_ = 2;
    int V_ = 0;
    bool in_memory_ = false;
    int B_ = 1, T_ = 1, A_ = 1, R_ = 1, rank_ = 0;
    bool shuffle_ = false;
    uint64_t seed_ = 0;
    DataPosition pos_;
    std::vector<long long> shard_order_, chunk_order_;
    long long current_shard_ = 0, current_start_ = 0;
};

// The training and the validation data of a run are of one kind too: the same model reads
// both, and uint16 shards beside uint32 ones are two tokenizers' data.
inline void check_same_kind(const DataLoader& train, const DataLoader& val) {
    if (train.token_bytes() != val.token_bytes())
        throw Error(strf("'%s' (validation data) holds %s tokens but '%s' (training data) holds %s tokens: every shard "
                         "of a run must be of one kind (llm.c's GPT-2 shards or its Llama-3 shards)",
                         val.first_shard_name().c_str(), token_type(val.token_bytes()),
                         train.first_shard_name().c_str(), token_type(train.token_bytes())));
}

// Warns when data made of byte tokens meets a model with a larger vocabulary: it trains,
// but on the wrong tokenization (e.g. text_to_shards.py --tokenizer bytes without --vocab 256).
inline std::string byte_level_warning(const DataLoader& data, const char* which, int V) {
    if (V <= 256 || data.leading_max_token() >= 256) return "";
    return strf("warning: the %s data looks byte-level: the first tokens of %s are all below 256, but the model's "
                "vocabulary has V = %s (made with --tokenizer bytes? then train with --vocab 256)",
                which, data.num_shards() == 1 ? ("'" + data.first_shard_name() + "'").c_str() : "every shard",
                with_commas(V).c_str());
}
