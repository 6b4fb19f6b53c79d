// Checkpoint I/O, in llm.c's formats so its GPT-2 weights load here unchanged.
//
// Model file: 256 little-endian int32 header
//   [0] = 20240326, [1] = 3 (float32), [2] = maxT, [3] = V, [4] = L, [5] = NH, [6] = C, [7] = Vp
// then the 16 parameter tensors as float32, in the order of ModelConfig::param_sizes.
//
// Training-state file (ours; llm.c's is not needed to resume here): 256 int32 header
//   [0] = 20261124, [1] = 1, [2] = step, [3..5] = data epoch, shard, chunk,
//   [6..7] = parameter count (low, high 32 bits), [8..9] = sampler RNG state (low, high),
//   [10..11] = global batch in tokens (low, high)
// then AdamW's first moment m and second moment v, float32, one per parameter.
//
// Every file is written to "<name>.tmp", flushed to disk, then renamed over <name>: an
// interrupted write leaves the previous checkpoint untouched.
#pragma once
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "data.h"
#include "error.h"

constexpr int MODEL_MAGIC = 20240326;
constexpr int MODEL_VERSION_FP32 = 3;
constexpr int STATE_MAGIC = 20261124;
constexpr int STATE_VERSION = 1;
constexpr int NUM_PARAM_TENSORS = 16;

struct ModelConfig {
    int maxT = 0;  // longest sequence (rows of the position table)
    int V = 0;     // vocabulary size
    int Vp = 0;    // vocabulary padded for alignment; rows V..Vp-1 of wte are never used
    int L = 0;     // transformer blocks
    int NH = 0;    // attention heads
    int C = 0;     // channels

    // Element counts of the 16 tensors, in file order; each is stacked over layers,
    // weights in (out, in) layout.
    std::vector<size_t> param_sizes() const {
        size_t l = L, c = C;
        return {
            (size_t)Vp * c,  // wte       (Vp, C)
            (size_t)maxT * c,  // wpe     (maxT, C)
            l * c,         // ln1w        (L, C)
            l * c,         // ln1b        (L, C)
            l * 3 * c * c, // qkvw        (L, 3C, C)
            l * 3 * c,     // qkvb        (L, 3C)
            l * c * c,     // attprojw    (L, C, C)
            l * c,         // attprojb    (L, C)
            l * c,         // ln2w        (L, C)
            l * c,         // ln2b        (L, C)
            l * 4 * c * c, // fcw         (L, 4C, C)
            l * 4 * c,     // fcb         (L, 4C)
            l * c * 4 * c, // fcprojw     (L, C, 4C)
            l * c,         // fcprojb     (L, C)
            c,             // lnfw        (C)
            c,             // lnfb        (C)
        };
    }
    size_t num_params() const {
        size_t n = 0;
        for (size_t s : param_sizes()) n += s;
        return n;
    }
};
inline const char* const PARAM_NAMES[NUM_PARAM_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

// Views into a buffer of parameters (or of their gradients: the same layout), in host or
// device memory, in file order. T is float for the weights and gradients; the GPU trainer
// also views its copy of the weights as its kernels read them (bf16).
template <class T>
struct ParamViews {
    T *wte;       // (Vp, C)
    T *wpe;       // (maxT, C)
    T *ln1w, *ln1b;          // (L, C)
    T *qkvw;      // (L, 3C, C)
    T *qkvb;      // (L, 3C)
    T *attprojw;  // (L, C, C)
    T *attprojb;  // (L, C)
    T *ln2w, *ln2b;          // (L, C)
    T *fcw;       // (L, 4C, C)
    T *fcb;       // (L, 4C)
    T *fcprojw;   // (L, C, 4C)
    T *fcprojb;   // (L, C)
    T *lnfw, *lnfb;          // (C)
};
using ParamTensors = ParamViews<float>;
template <class T>
inline ParamViews<T> param_views(T* base, const ModelConfig& cfg) {
    ParamViews<T> p;
    T** fields[NUM_PARAM_TENSORS] = {&p.wte, &p.wpe, &p.ln1w, &p.ln1b, &p.qkvw, &p.qkvb, &p.attprojw, &p.attprojb,
                                     &p.ln2w, &p.ln2b, &p.fcw, &p.fcb, &p.fcprojw, &p.fcprojb, &p.lnfw, &p.lnfb};
    std::vector<size_t> sizes = cfg.param_sizes();
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) *fields[i] = base, base += sizes[i];
    return p;
}

// Decoupled weight decay applies to the matrices and embeddings only, not to biases or
// LayerNorm parameters (they set scales and offsets, which decay would pull towards 0).
inline bool param_decays(int tensor) {
    std::string n = PARAM_NAMES[tensor];
    return n == "wte" || n == "wpe" || n == "qkvw" || n == "attprojw" || n == "fcw" || n == "fcprojw";
}

// ---- writing, atomically ----

// Writes blocks of bytes to path via a temporary file and a rename.
inline void write_file_atomic(const std::string& path, const std::vector<std::pair<const void*, size_t>>& blocks) {
    std::string tmp = path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "wb");
    if (!f) throw Error("cannot create '" + tmp + "' (does the directory exist and is it writable?)");
    bool ok = true;
    for (const auto& b : blocks) ok = ok && fwrite(b.first, 1, b.second, f) == b.second;
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        remove(tmp.c_str());
        throw Error("could not write '" + tmp + "' (disk full?); the previous checkpoint is untouched");
    }
    if (rename(tmp.c_str(), path.c_str()) != 0) {
        remove(tmp.c_str());
        throw Error("could not rename '" + tmp + "' to '" + path + "'");
    }
}

inline void save_model(const std::string& path, const ModelConfig& cfg, const float* params) {
    int header[256] = {};
    header[0] = MODEL_MAGIC, header[1] = MODEL_VERSION_FP32, header[2] = cfg.maxT, header[3] = cfg.V;
    header[4] = cfg.L, header[5] = cfg.NH, header[6] = cfg.C, header[7] = cfg.Vp;
    write_file_atomic(path, {{header, sizeof header}, {params, cfg.num_params() * sizeof(float)}});
}

// ---- reading, with checks ----

inline ModelConfig read_model_header(const std::string& path) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) throw Error("cannot open model file '" + path + "'");
    int h[256];
    size_t got = fread(h, sizeof(int), 256, f);
    fseek(f, 0, SEEK_END);
    long long bytes = ftell(f);
    fclose(f);
    if (got != 256) throw Error(strf("'%s' is too short to be a model file (%lld bytes)", path.c_str(), bytes));
    if (h[0] != MODEL_MAGIC)
        throw Error(strf("'%s' is not a model file (magic %d, expected %d)", path.c_str(), h[0], MODEL_MAGIC));
    if (h[1] != MODEL_VERSION_FP32)
        throw Error(strf("'%s': model version %d is not supported (expected %d, float32)%s", path.c_str(), h[1],
                         MODEL_VERSION_FP32, h[1] == 5 ? "; this is a bf16 file, export the float32 one" : ""));
    ModelConfig cfg;
    cfg.maxT = h[2], cfg.V = h[3], cfg.L = h[4], cfg.NH = h[5], cfg.C = h[6], cfg.Vp = h[7];
    if (cfg.maxT <= 0 || cfg.V <= 0 || cfg.L <= 0 || cfg.NH <= 0 || cfg.C <= 0 || cfg.Vp < cfg.V ||
        cfg.C % cfg.NH != 0)
        throw Error(strf("'%s' has an impossible shape: maxT %d, V %d, Vp %d, L %d, NH %d, C %d", path.c_str(),
                         cfg.maxT, cfg.V, cfg.Vp, cfg.L, cfg.NH, cfg.C));
    long long expected = 1024 + (long long)cfg.num_params() * 4;
    if (bytes != expected)
        throw Error(strf("'%s' is truncated or damaged: its shape needs %lld bytes, the file has %lld", path.c_str(),
                         expected, bytes));
    return cfg;
}

// Reads the parameters of a model whose header read_model_header() already checked.
inline void load_model_params(const std::string& path, const ModelConfig& cfg, float* params) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) throw Error("cannot open model file '" + path + "'");
    fseek(f, 1024, SEEK_SET);
    size_t n = cfg.num_params(), got = fread(params, sizeof(float), n, f);
    fclose(f);
    if (got != n) throw Error("could not read all parameters of '" + path + "'");
}

// ---- training state ----

struct TrainState {
    int step = 0;               // optimizer steps completed
    DataPosition data;          // next chunk of training data
    uint64_t sample_rng = 0;    // sampler state
    long long global_batch = 0; // tokens per step when saved (the data position is in these units)
};

inline void save_state(const std::string& path, const TrainState& s, const float* m, const float* v, size_t n) {
    int h[256] = {};
    h[0] = STATE_MAGIC, h[1] = STATE_VERSION, h[2] = s.step;
    h[3] = (int)s.data.epoch, h[4] = (int)s.data.shard, h[5] = (int)s.data.chunk;
    h[6] = (int)(uint32_t)n, h[7] = (int)(uint32_t)((uint64_t)n >> 32);
    h[8] = (int)(uint32_t)s.sample_rng, h[9] = (int)(uint32_t)(s.sample_rng >> 32);
    h[10] = (int)(uint32_t)s.global_batch, h[11] = (int)(uint32_t)((uint64_t)s.global_batch >> 32);
    write_file_atomic(path, {{h, sizeof h}, {m, n * sizeof(float)}, {v, n * sizeof(float)}});
}

inline TrainState load_state(const std::string& path, float* m, float* v, size_t n) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) throw Error("cannot open training state '" + path + "'");
    int h[256];
    bool ok = fread(h, sizeof(int), 256, f) == 256;
    if (!ok || h[0] != STATE_MAGIC || h[1] != STATE_VERSION) {
        fclose(f);
        throw Error("'" + path + "' is not a training-state file of this version");
    }
    uint64_t saved_n = (uint64_t)(uint32_t)h[6] | ((uint64_t)(uint32_t)h[7] << 32);
    if (saved_n != n) {
        fclose(f);
        throw Error(strf("'%s' holds optimizer state for %llu parameters, the model has %zu", path.c_str(),
                         (unsigned long long)saved_n, n));
    }
    ok = fread(m, sizeof(float), n, f) == n && fread(v, sizeof(float), n, f) == n;
    fclose(f);
    if (!ok) throw Error("'" + path + "' is truncated");
    TrainState s;
    s.step = h[2];
    s.data.epoch = h[3], s.data.shard = h[4], s.data.chunk = h[5];
    s.sample_rng = (uint64_t)(uint32_t)h[8] | ((uint64_t)(uint32_t)h[9] << 32);
    s.global_batch = (long long)((uint64_t)(uint32_t)h[10] | ((uint64_t)(uint32_t)h[11] << 32));
    return s;
}

// ---- checkpoint names in the output directory ----

inline std::string model_path(const std::string& dir, int step) { return dir + strf("/model_%08d.bin", step); }
inline std::string state_path(const std::string& dir, int step) { return dir + strf("/state_%08d.bin", step); }

inline bool file_exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

// The highest step with both a model and a state file (a crash between the two renames
// leaves an incomplete pair, which is skipped); -1 when there is none.
inline int latest_checkpoint(const std::string& dir) {
    int best = -1;
    DIR* d = opendir(dir.c_str());
    if (!d) return -1;
    while (dirent* e = readdir(d)) {
        int step;
        char tail;
        if (sscanf(e->d_name, "state_%d.bi%c", &step, &tail) == 2 && tail == 'n' &&
            std::string(e->d_name).size() == 18 && file_exists(model_path(dir, step)) && step > best)
            best = step;
    }
    closedir(d);
    return best;
}

inline void make_dir(const std::string& dir) {
    if (dir.empty() || file_exists(dir)) return;
    if (mkdir(dir.c_str(), 0755) != 0) throw Error("cannot create directory '" + dir + "'");
}
