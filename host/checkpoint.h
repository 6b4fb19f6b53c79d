// Checkpoint I/O, in llm.c's formats so its GPT-2 weights load here unchanged.
//
// Model file: 256 little-endian int32 header
//   GPT-2:   [0] = 20240326, [1] = 3 (float32), [2] = maxT, [3] = V, [4] = L, [5] = NH, [6] = C, [7] = Vp
//   Llama-3: [0] = 20240803, [1] = 3, [2..7] = maxT, V, L, NH, KVH, C, then the fields that
//            save_model() lists (LLAMA_MAGIC); llm.c's own Llama-3 files are read too
// then the parameter tensors the family has as float32, in the order of ModelConfig::param_sizes.
//
// Training-state file (ours; llm.c's is not needed to resume here): 256 int32 header
//   [0] = 20261124, [1] = 3, [2] = step, [3..5] = data epoch, shard, chunk,
//   [6..7] = parameter count (low, high 32 bits), [8..9] = sampler RNG state (low, high),
//   [10..11] = global batch in tokens (low, high),
//   [12..13] = training-data fingerprint, [14..15] = its tokens, [16] = its shards,
//   [17] = the run's --steps (the length its learning-rate schedule was made for),
//   [18..23] = the noise scale's moving averages (version 4),
//   [24] = bytes of the run-time choices' text, [32..159] = that text (version 5: RunChoices)
// then AdamW's first moment m and second moment v, float32, one per parameter. Versions 1
// (no data identity, [12..16] = 0), 2 (no run length, [17] = 0), 3 (no noise averages) and
// 4 (no run-time choices: "not recorded") are still read.
//
// Every file is written to "<name>.tmp", flushed to disk, then renamed over <name>: an
// interrupted write leaves the previous checkpoint untouched. No file is written that
// holds a NaN or an infinity, and none is read without checking for them.
#pragma once
#include <dirent.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "batch.h"
#include "cli.h"
#include "data.h"
#include "error.h"
#include "file.h"
#include "noise.h"
#include "schedule.h"

constexpr int MODEL_MAGIC = 20240326;
constexpr int MODEL_VERSION_FP32 = 3;
constexpr int STATE_MAGIC = 20261124;
constexpr int STATE_VERSION = 5;
constexpr int NUM_PARAM_TENSORS = 17;

// The two model families. Each difference between them is one field of ModelConfig below,
// read where the layer that it changes runs (docs/llama.md):
//   GPT-2:    LayerNorm, learned positions (wpe), GELU MLP of 4C, NH K/V heads, head tied to wte
//   Llama-3:  RMSNorm, rotary positions (RoPE), SwiGLU MLP of F, KVH ≤ NH K/V heads, own head
enum class Family { gpt2 = 0, llama3 = 1 };

struct ModelConfig {
    int maxT = 0;  // longest sequence (rows of the position table; RoPE's table for Llama)
    int V = 0;     // vocabulary size
    int Vp = 0;    // vocabulary padded for alignment; rows V..Vp-1 of wte are never used
    int L = 0;     // transformer blocks
    int NH = 0;    // attention heads (query heads), each hs = C/NH wide
    int C = 0;     // channels
    // Llama-3's fields, unused for GPT-2 (whose accessors below give NH K/V heads, 4C, tied).
    Family family = Family::gpt2;
    int KVH = 0;   // key/value heads (grouped-query attention): query head h reads K/V head h / (NH/KVH)
    int F = 0;     // the MLP's hidden width (GPT-2: 4C)
    int tied = 1;  // 1: the output head is wte; 0: its own tensor, wout
    float norm_eps = 1e-5f;          // RMSNorm's (GPT-2's LayerNorm keeps its own 1e-5)
    float rope_theta = 500000.0f;    // RoPE's base
    float rope_factor = 0.0f;        // Llama-3.1 frequency scaling (3.1: 8, 3.2: 32); 0 = none
    float rope_low_freq = 1.0f, rope_high_freq = 4.0f;  // its low/high frequency factors
    int rope_original_T = 8192;      // the context length the scaling was made for

    bool llama() const { return family == Family::llama3; }
    int hs() const { return C / NH; }
    int kv_heads() const { return llama() ? KVH : NH; }
    int qkv_channels() const { return C + 2 * kv_heads() * hs(); }  // QKV: [q (NH·hs) | k (KVH·hs) | v (KVH·hs)]
    int hidden() const { return llama() ? F : 4 * C; }               // the MLP's activation width
    int fc_channels() const { return llama() ? 2 * F : 4 * C; }      // fc's output: SwiGLU's [gate | up]
    bool tied_head() const { return !llama() || tied; }

    // Element counts of the 17 tensors, in file order; each is stacked over layers,
    // weights in (out, in) layout. A tensor the family does not have has size 0.
    std::vector<size_t> param_sizes() const {
        size_t l = L, c = C, qkv = qkv_channels(), fc = fc_channels(), h = hidden();
        size_t gpt2 = llama() ? 0 : 1;  // biases, LayerNorm's shifts and wpe: GPT-2's only
        return {
            (size_t)Vp * c,       // wte       (Vp, C)
            gpt2 * maxT * c,      // wpe       (maxT, C)
            l * c,                // ln1w      (L, C)
            gpt2 * l * c,         // ln1b      (L, C)
            l * qkv * c,          // qkvw      (L, QKV, C)
            gpt2 * l * qkv,       // qkvb      (L, QKV)
            l * c * c,            // attprojw  (L, C, C)
            gpt2 * l * c,         // attprojb  (L, C)
            l * c,                // ln2w      (L, C)
            gpt2 * l * c,         // ln2b      (L, C)
            l * fc * c,           // fcw       (L, 4C or 2F, C): Llama's rows [gate W1 | up W3]
            gpt2 * l * fc,        // fcb       (L, 4C)
            l * c * h,            // fcprojw   (L, C, 4C or F)
            gpt2 * l * c,         // fcprojb   (L, C)
            c,                    // lnfw      (C)
            gpt2 * c,             // lnfb      (C)
            tied_head() ? 0 : (size_t)Vp * c,  // wout (Vp, C), the untied output head
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
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb", "wout"};
inline const char* family_name(Family f) { return f == Family::llama3 ? "llama3" : "gpt2"; }

// The shape's fields: where each sits in the model header (GPT-2's and Llama's: -1 where the
// family has no such field), the option that sets it, and the largest value accepted. The
// limits are far beyond any model of either family, and keep every product of them in the
// trainers (12·L·C², Vp·C, L·2F·C, ...) well inside 64 bits; a header beyond them is damage,
// not a model.
using ShapeMember = int ModelConfig::*;
struct ShapeField {
    const char* name;
    int header_index;        // GPT-2's header
    int llama_header_index;  // Llama's header
    const char* option;
    ShapeMember value;
    int max;
    int index(const ModelConfig& c) const { return c.llama() ? llama_header_index : header_index; }
};
inline const ShapeField SHAPE_FIELDS[] = {
    {"maxT", 2, 2, "--max-seq-len", &ModelConfig::maxT, 1 << 20},
    {"V", 3, 3, "--vocab", &ModelConfig::V, 1 << 24},
    {"L", 4, 4, "--layers", &ModelConfig::L, 1024},
    {"NH", 5, 5, "--heads", &ModelConfig::NH, 1 << 16},
    {"C", 6, 7, "--channels", &ModelConfig::C, 1 << 16},
    {"Vp", 7, 17, "--padded-vocab", &ModelConfig::Vp, 1 << 24},
    {"KVH", -1, 6, "--kv-heads", &ModelConfig::KVH, 1 << 16},
    {"F", -1, 18, "--ffn-hidden", &ModelConfig::F, 1 << 20},
    {"rope_original_T", -1, 20, "--rope-original-len", &ModelConfig::rope_original_T, 1 << 24},
};
// Llama's real-valued fields, as float32 bit patterns in its header.
using RealMember = float ModelConfig::*;
struct RealField {
    const char* name;
    int llama_header_index;
    const char* option;
    RealMember value;
};
inline const RealField REAL_FIELDS[] = {
    {"norm_eps", 21, "--norm-eps", &ModelConfig::norm_eps},
    {"rope_theta", 22, "--rope-theta", &ModelConfig::rope_theta},
    {"rope_factor", 23, "--rope-factor", &ModelConfig::rope_factor},
    {"rope_low_freq", 24, "--rope-low-freq", &ModelConfig::rope_low_freq},
    {"rope_high_freq", 25, "--rope-high-freq", &ModelConfig::rope_high_freq},
};

// Whether the option NAME (long name, without "--") sets part of a model's shape: a field
// above, or what F and the head are derived from.
inline bool is_shape_option(const std::string& name) {
    for (const ShapeField& f : SHAPE_FIELDS)
        if (name == f.option + 2) return true;
    for (const RealField& f : REAL_FIELDS)
        if (name == f.option + 2) return true;
    return name == "tied" || name == "ffn-multiple-of" || name == "ffn-multiplier";
}
// Every field of c's family with its value as text, the family first: what two shapes are
// compared by, and what the replicas of a run must agree on.
inline std::vector<std::pair<std::string, std::string>> shape_values(const ModelConfig& c) {
    std::vector<std::pair<std::string, std::string>> v = {{"family", family_name(c.family)}};
    for (const ShapeField& f : SHAPE_FIELDS)
        if (f.index(c) >= 0) v.push_back({strf("%s (%s)", f.name, f.option), std::to_string(c.*f.value)});
    if (c.llama()) {
        v.push_back({"tied (--tied)", std::to_string(c.tied)});
        for (const RealField& f : REAL_FIELDS) v.push_back({strf("%s (%s)", f.name, f.option), strf("%.9g", c.*f.value)});
    }
    return v;
}

// Why c cannot be a model (empty when it can). Fields are named as in the header, or as
// options when the shape came from the command line.
inline std::string shape_problem(const ModelConfig& c, bool from_options) {
    for (const ShapeField& f : SHAPE_FIELDS) {
        if (f.index(c) < 0) continue;
        int v = c.*f.value;
        if (v < 1 || v > f.max)
            return from_options ? strf("%s %d is out of range (1 to %s)", f.option, v, with_commas(f.max).c_str())
                                : strf("header field [%d] %s = %d is out of range (1 to %s)", f.index(c), f.name, v,
                                       with_commas(f.max).c_str());
    }
    auto name = [&](const char* field, const char* option) { return from_options ? option : field; };
    if (c.C % c.NH != 0)
        return strf("%s = %d is not divisible by %s = %d", name("C", "--channels"), c.C, name("NH", "--heads"), c.NH);
    if (c.Vp < c.V) return strf("Vp = %d is smaller than V = %d", c.Vp, c.V);
    if (!c.llama()) return "";
    if (c.NH % c.KVH != 0)
        return strf("%s = %d is not a multiple of %s = %d (each K/V head serves a whole group of query heads)",
                    name("NH", "--heads"), c.NH, name("KVH", "--kv-heads"), c.KVH);
    if (c.hs() % 2 != 0)
        return strf("the head size C/NH = %d is odd: RoPE rotates pairs of channels", c.hs());
    if (c.tied != 0 && c.tied != 1) return strf("tied = %d is neither 0 nor 1", c.tied);
    for (const RealField& f : REAL_FIELDS)
        if (!std::isfinite(c.*f.value) || c.*f.value < 0)
            return strf("%s = %g is not a finite value ≥ 0", name(f.name, f.option), c.*f.value);
    if (!(c.norm_eps > 0 && c.norm_eps < 1)) return strf("%s = %g is not in (0, 1)", name("norm_eps", "--norm-eps"), c.norm_eps);
    if (!(c.rope_theta > 1)) return strf("%s = %g is not above 1", name("rope_theta", "--rope-theta"), c.rope_theta);
    if (c.rope_factor > 0 && !(c.rope_factor >= 1 && c.rope_low_freq > 0 && c.rope_high_freq > c.rope_low_freq))
        return strf("RoPE scaling needs factor ≥ 1 and 0 < low_freq < high_freq (factor %g, low %g, high %g)",
                    c.rope_factor, c.rope_low_freq, c.rope_high_freq);
    return "";
}

// The first field in which two shapes differ, as "NH (--heads): 2 against 4"; empty when equal.
inline std::string shape_difference(const ModelConfig& a, const ModelConfig& b) {
    auto va = shape_values(a), vb = shape_values(b);
    for (size_t i = 0; i < std::min(va.size(), vb.size()); i++)
        if (va[i] != vb[i]) return strf("%s: %s against %s", va[i].first.c_str(), va[i].second.c_str(), vb[i].second.c_str());
    return "";
}

// Parameter count with overflow checks (-1 when it does not fit in 64 bits). Within the
// limits above it always fits; a shape from a file is sized this way all the same, so that
// raising a limit cannot bring back the wrap-around.
inline long long checked_num_params(const ModelConfig& c) {
    long long L = c.L, C = c.C, gpt2 = c.llama() ? 0 : 1;
    long long qkv = c.qkv_channels(), fc = c.fc_channels(), h = c.hidden();
    long long parts[] = {checked_product({c.Vp, C}), checked_product({gpt2, c.maxT, C}),
                         checked_product({L, C, qkv + C + fc}), checked_product({L, C, h}),
                         checked_product({L, 2 + gpt2 * 4, C}), checked_product({gpt2, L, qkv + fc}),
                         (1 + gpt2) * C, c.tied_head() ? 0 : checked_product({c.Vp, C})};
    long long n = 0;
    for (long long p : parts)
        if (p < 0 || __builtin_add_overflow(n, p, &n)) return -1;
    return n;
}

// NaN and infinity: where they are in a buffer laid out like the parameters (the
// parameters, their gradients, or AdamW's m and v).
struct NonFinite {
    size_t count = 0;           // in the whole buffer
    int first_tensor = -1;      // index into PARAM_NAMES of the first tensor that has one
    size_t in_first_tensor = 0; // how many that tensor has
    std::string describe() const {
        return strf("%s non-finite value%s (NaN or infinity), the first in %s (%s there)",
                    with_commas((long long)count).c_str(), count == 1 ? "" : "s", PARAM_NAMES[first_tensor],
                    with_commas((long long)in_first_tensor).c_str());
    }
};
inline NonFinite find_non_finite(const float* buffer, const ModelConfig& cfg) {
    NonFinite r;
    std::vector<size_t> sizes = cfg.param_sizes();
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        size_t bad = 0;
        for (size_t i = 0; i < sizes[t]; i++) bad += !std::isfinite(buffer[i]);
        if (bad > 0 && r.first_tensor < 0) r.first_tensor = t, r.in_first_tensor = bad;
        r.count += bad;
        buffer += sizes[t];
    }
    return r;
}

// Raised instead of writing a file that would hold a NaN or an infinity.
struct NonFiniteValues : Error {
    using Error::Error;
};

// Views into a buffer of parameters (or of their gradients: the same layout), in host or
// device memory, in file order; null for a tensor the family does not have. T is float for
// the weights and gradients; the GPU trainer also views its copy of the weights as its
// kernels read them (bf16).
template <class T>
struct ParamViews {
    T *wte;       // (Vp, C)
    T *wpe;       // (maxT, C)
    T *ln1w, *ln1b;          // (L, C)
    T *qkvw;      // (L, QKV, C)  QKV = 3C for GPT-2
    T *qkvb;      // (L, QKV)
    T *attprojw;  // (L, C, C)
    T *attprojb;  // (L, C)
    T *ln2w, *ln2b;          // (L, C)
    T *fcw;       // (L, 4C, C); Llama's (L, 2F, C), [gate | up]
    T *fcb;       // (L, 4C)
    T *fcprojw;   // (L, C, 4C); Llama's (L, C, F)
    T *fcprojb;   // (L, C)
    T *lnfw, *lnfb;          // (C)
    T *wout;      // (Vp, C) the untied head (Llama); empty when tied: the head is wte
};
using ParamTensors = ParamViews<float>;
template <class T>
inline ParamViews<T> param_views(T* base, const ModelConfig& cfg) {
    ParamViews<T> p;
    T** fields[NUM_PARAM_TENSORS] = {&p.wte, &p.wpe, &p.ln1w, &p.ln1b, &p.qkvw, &p.qkvb, &p.attprojw, &p.attprojb,
                                     &p.ln2w, &p.ln2b, &p.fcw, &p.fcb, &p.fcprojw, &p.fcprojb, &p.lnfw, &p.lnfb,
                                     &p.wout};
    std::vector<size_t> sizes = cfg.param_sizes();
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) *fields[i] = sizes[i] ? base : nullptr, base += sizes[i];
    return p;
}

// Decoupled weight decay applies to the matrices and embeddings only, not to biases or
// LayerNorm parameters (they set scales and offsets, which decay would pull towards 0).
inline bool param_decays(int tensor) {
    std::string n = PARAM_NAMES[tensor];
    return n == "wte" || n == "wpe" || n == "qkvw" || n == "attprojw" || n == "fcw" || n == "fcprojw" || n == "wout";
}

// ---- writing ----

// Llama's header ([0] = LLAMA_MAGIC): llm.c's fields where llm.c has them, [2..7] maxT, V, L,
// NH, KVH, C, [9] multiple_of (0 here), [11] rope_theta as an integer, [12] whether RoPE is
// scaled; then ours from [16] = 1 on: [17] Vp, [18] F, [19] tied, [20] rope_original_T and
// [21..25] the real-valued fields (REAL_FIELDS) as float32 bit patterns. llm.c's own file has
// no [16] (module comment): read_model_header() derives what it does not say.
constexpr int LLAMA_MAGIC = 20240803;
constexpr int LLAMA_EXTENSION = 1;

inline void save_model(const std::string& path, const ModelConfig& cfg, const float* params) {
    NonFinite bad = find_non_finite(params, cfg);
    if (bad.count > 0) throw NonFiniteValues("not writing '" + path + "': the weights hold " + bad.describe());
    int header[256] = {};
    header[0] = cfg.llama() ? LLAMA_MAGIC : MODEL_MAGIC, header[1] = MODEL_VERSION_FP32;
    for (const ShapeField& f : SHAPE_FIELDS)
        if (f.index(cfg) >= 0) header[f.index(cfg)] = cfg.*f.value;
    if (cfg.llama()) {
        header[11] = (int)cfg.rope_theta, header[12] = cfg.rope_factor > 0;
        header[16] = LLAMA_EXTENSION, header[19] = cfg.tied;
        for (const RealField& f : REAL_FIELDS) memcpy(&header[f.llama_header_index], &(cfg.*f.value), 4);
    }
    write_file_atomic(path, {{header, sizeof header}, {params, cfg.num_params() * sizeof(float)}});
}

// ---- reading, with checks ----

// llm.c's own Llama-3 file: no Vp (its V is 128,256, a multiple of 128), its own head, the
// eps of Meta's models, F from the file's size, and the scaling of Llama-3.1 (llm.c records
// only whether RoPE is scaled: a Llama-3.2 file, factor 32, reads as 3.1's factor 8).
inline std::string read_llmc_llama_fields(ModelConfig& cfg, const int* h, long long file_size) {
    cfg.Vp = cfg.V, cfg.tied = 0, cfg.norm_eps = 1e-5f, cfg.rope_theta = (float)h[11];
    cfg.rope_factor = h[12] ? 8.0f : 0.0f, cfg.rope_low_freq = 1, cfg.rope_high_freq = 4, cfg.rope_original_T = 8192;
    cfg.F = 1;  // its share is solved for below
    // the other fields first: the count below divides by NH (a fuzzed header held NH = 0)
    if (std::string problem = shape_problem(cfg, false); !problem.empty()) return problem;
    long long rest = checked_num_params(cfg), per_F = checked_product({3, cfg.L, cfg.C});
    long long floats = (file_size - 1024) / 4 - (rest - per_F);  // F·3LC
    if (rest < 0 || per_F <= 0 || floats <= 0 || floats % per_F != 0 || floats / per_F > (1 << 20))
        return "its size fits no FFN width";
    cfg.F = (int)(floats / per_F);
    return "";
}

// What a run says of a model file that is llm.c's own Llama-3 file (empty for any other).
inline std::string llmc_llama_note(const std::string& path) {
    InputFile f(path, "model file");
    int h[256];
    if (!f.read(h, sizeof h) || h[0] != LLAMA_MAGIC || h[16] == LLAMA_EXTENSION) return "";
    return strf("'%s' is llm.c's Llama-3 file, which records only whether RoPE is scaled: read with Llama-3.1's "
                "scaling (factor 8), so a Llama-3.2 model's (factor 32) does not match",
                path.c_str());
}

// Reads and checks a model file's header, and that the file has the size its shape needs,
// before anything is allocated for it.
inline ModelConfig read_model_header(const std::string& path) {
    InputFile f(path, "model file");
    int h[256];
    if (!f.read(h, sizeof h))
        throw Error(strf("'%s' is too short to be a model file (%lld bytes)", path.c_str(), f.size()));
    if (h[0] != MODEL_MAGIC && h[0] != LLAMA_MAGIC)
        throw Error(strf("'%s' is not a model file (magic %d, expected %d for GPT-2 or %d for Llama-3)", path.c_str(),
                         h[0], MODEL_MAGIC, LLAMA_MAGIC));
    if (h[1] != MODEL_VERSION_FP32)
        throw Error(strf("'%s': model version %d is not supported (expected %d, float32)%s", path.c_str(), h[1],
                         MODEL_VERSION_FP32, h[1] == 5 ? "; this is a bf16 file, export the float32 one" : ""));
    ModelConfig cfg;
    cfg.family = h[0] == LLAMA_MAGIC ? Family::llama3 : Family::gpt2;
    for (const ShapeField& field : SHAPE_FIELDS)
        if (field.index(cfg) >= 0) cfg.*field.value = h[field.index(cfg)];
    std::string problem;
    if (cfg.llama() && h[16] != LLAMA_EXTENSION) {
        problem = read_llmc_llama_fields(cfg, h, f.size());
    } else if (cfg.llama()) {
        cfg.tied = h[19];
        for (const RealField& field : REAL_FIELDS) memcpy(&(cfg.*field.value), &h[field.llama_header_index], 4);
    }
    if (problem.empty()) problem = shape_problem(cfg, false);
    if (!problem.empty()) throw Error(strf("'%s' has an impossible shape: %s", path.c_str(), problem.c_str()));
    long long params = checked_num_params(cfg), expected = checked_product({params, 4});
    if (params < 0 || expected < 0 || expected > LLONG_MAX - 1024 || expected + 1024 != f.size())
        throw Error(strf("'%s' is truncated or damaged: its shape (maxT %d, V %d, Vp %d, L %d, NH %d, C %d%s) needs "
                         "%s bytes, the file has %s",
                         path.c_str(), cfg.maxT, cfg.V, cfg.Vp, cfg.L, cfg.NH, cfg.C,
                         cfg.llama() ? strf(", KVH %d, F %d, Llama-3", cfg.KVH, cfg.F).c_str() : "",
                         expected < 0 ? "more than 2^63" : with_commas(expected + 1024).c_str(),
                         with_commas(f.size()).c_str()));
    return cfg;
}

// Reads the parameters of a model whose header read_model_header() already checked, and
// refuses weights that are not finite: training from them could only produce NaN.
inline void load_model_params(const std::string& path, const ModelConfig& cfg, float* params) {
    InputFile f(path, "model file");
    int h[256];
    if (!f.read(h, sizeof h) || !f.read(params, cfg.num_params() * sizeof(float)))
        throw Error("could not read all parameters of '" + path + "'");
    if (cfg.llama() && h[16] != LLAMA_EXTENSION) {
        // llm.c stores each layer's gate rows for all layers, then each layer's up rows: (2, L, F, C)
        std::vector<size_t> sizes = cfg.param_sizes();
        float* fcw = params;
        for (int t = 0; t < 10; t++) fcw += sizes[t];
        size_t FC = (size_t)cfg.F * cfg.C;
        std::vector<float> file_order(fcw, fcw + 2 * cfg.L * FC);
        for (int l = 0; l < cfg.L; l++)
            for (int part = 0; part < 2; part++)
                std::copy_n(file_order.data() + ((size_t)part * cfg.L + l) * FC, FC, fcw + ((size_t)2 * l + part) * FC);
    }
    NonFinite bad = find_non_finite(params, cfg);
    if (bad.count > 0) throw Error("'" + path + "': the weights hold " + bad.describe());
}

// ---- training state ----

// Choices a run makes at run time that change its arithmetic: --attention auto's path, and
// any later one (a kernel variant picked for the device's limits, a tile size). They are part
// of the run's state, so that a resumed run computes what the uninterrupted one would instead
// of choosing again (timing can pick differently from one process to the next). Each is
// named after the option that asks for it ("attention=fused"); entries are separated by ';'.
// The text is printable ASCII of at most RunChoices::MAX_BYTES, held in the state's header.
struct RunChoices {
    static constexpr int MAX_BYTES = 512;          // header ints [32..159]
    std::vector<std::pair<std::string, std::string>> entries;

    std::string get(const std::string& name) const {
        for (const auto& e : entries)
            if (e.first == name) return e.second;
        return "";
    }
    std::string text() const {
        std::string t;
        for (const auto& e : entries) t += (t.empty() ? "" : ";") + e.first + "=" + e.second;
        return t;
    }
    // Parses text(); false when it is not such a text (damage).
    static bool parse(const std::string& text, RunChoices& out) {
        out.entries.clear();
        if (text.size() > (size_t)MAX_BYTES) return false;
        for (char ch : text)
            if (ch < 0x20 || ch > 0x7e) return false;
        size_t pos = 0;
        while (pos < text.size()) {
            size_t end = text.find(';', pos);
            std::string entry = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
            size_t eq = entry.find('=');
            if (eq == std::string::npos || eq == 0 || eq + 1 == entry.size()) return false;
            out.entries.push_back({entry.substr(0, eq), entry.substr(eq + 1)});
            pos = end == std::string::npos ? text.size() : end + 1;
        }
        return true;
    }
};

struct TrainState {
    int step = 0;               // optimizer steps completed
    DataPosition data;          // next chunk of training data
    uint64_t sample_rng = 0;    // sampler state
    long long global_batch = 0; // tokens per step when saved (the data position is in these units)
    DataIdentity train_data;    // what the data position refers to (shards 0: not recorded)
    int run_steps = 0;          // the --steps of the run it belongs to (0: not recorded)
    NoiseAverages noise;        // the noise scale's moving averages (version 4; before: none)
    bool choices_recorded = false;  // version 5 on: `choices` is what the run chose (possibly nothing)
    RunChoices choices;         // the run-time choices the run computed with (host/run.h)
};

inline void put64(int* h, uint64_t x) { h[0] = (int)(uint32_t)x, h[1] = (int)(uint32_t)(x >> 32); }
inline uint64_t get64(const int* h) { return (uint64_t)(uint32_t)h[0] | ((uint64_t)(uint32_t)h[1] << 32); }
inline uint64_t bits(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
inline double from_bits(uint64_t u) {
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

// Counts the non-finite values in AdamW's moments (and negative ones in v, whose square
// root the update takes).
inline size_t count_bad_moments(const float* m, const float* v, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !std::isfinite(m[i]) || !std::isfinite(v[i]) || v[i] < 0;
    return bad;
}

inline void save_state(const std::string& path, const TrainState& s, const float* m, const float* v, size_t n) {
    if (size_t bad = count_bad_moments(m, v, n))
        throw NonFiniteValues(strf("not writing '%s': AdamW's moments hold %s non-finite value%s", path.c_str(),
                                   with_commas((long long)bad).c_str(), bad == 1 ? "" : "s"));
    int h[256] = {};
    h[0] = STATE_MAGIC, h[1] = STATE_VERSION, h[2] = s.step;
    h[3] = (int)s.data.epoch, h[4] = (int)s.data.shard, h[5] = (int)s.data.chunk;
    put64(h + 6, n), put64(h + 8, s.sample_rng), put64(h + 10, (uint64_t)s.global_batch);
    put64(h + 12, s.train_data.fingerprint), put64(h + 14, (uint64_t)s.train_data.tokens);
    h[16] = (int)s.train_data.shards, h[17] = s.run_steps;
    put64(h + 18, (uint64_t)s.noise.steps), put64(h + 20, bits(s.noise.g2)), put64(h + 22, bits(s.noise.trace));
    std::string choices = s.choices.text();
    if (choices.size() > (size_t)RunChoices::MAX_BYTES)  // a program error: the names are ours
        throw Error(strf("not writing '%s': the run-time choices take %zu bytes, more than %d", path.c_str(),
                         choices.size(), RunChoices::MAX_BYTES));
    h[24] = (int)choices.size();
    memcpy(h + 32, choices.data(), choices.size());
    write_file_atomic(path, {{h, sizeof h}, {m, n * sizeof(float)}, {v, n * sizeof(float)}});
}

// Reads a training state's header for a model of n parameters, checking everything the
// header and the file's size can tell; f is left at the moments. run.h checks the rest
// against the data and the options.
inline TrainState read_state_header(InputFile& f, size_t n) {
    const std::string& path = f.path();
    int h[256];
    if (!f.read(h, sizeof h))
        throw Error(strf("'%s' is too short to be a training-state file (%lld bytes)", path.c_str(), f.size()));
    if (h[0] != STATE_MAGIC)
        throw Error(strf("'%s' is not a training-state file (magic %d, expected %d)", path.c_str(), h[0], STATE_MAGIC));
    if (h[1] < 1 || h[1] > STATE_VERSION)
        throw Error(strf("'%s': training-state version %d is not supported (expected 1 to %d)", path.c_str(), h[1],
                         STATE_VERSION));
    uint64_t saved_n = get64(h + 6);
    if (saved_n != n)
        throw Error(strf("'%s' holds optimizer state for %llu parameters, the model has %zu", path.c_str(),
                         (unsigned long long)saved_n, n));
    if ((unsigned long long)f.size() != 1024 + 8ull * n)
        throw Error(strf("'%s' is truncated or damaged: %zu parameters need %s bytes, the file has %s", path.c_str(), n,
                         with_commas(1024 + 8ll * n).c_str(), with_commas(f.size()).c_str()));
    TrainState s;
    s.step = h[2];
    s.data.epoch = h[3], s.data.shard = h[4], s.data.chunk = h[5];
    s.sample_rng = get64(h + 8);
    s.global_batch = (long long)get64(h + 10);
    s.train_data = {get64(h + 12), (long long)get64(h + 14), h[16]};
    s.run_steps = h[17];
    s.noise = {(long long)get64(h + 18), from_bits(get64(h + 20)), from_bits(get64(h + 22))};  // zeros before version 4
    if (s.step < 0) throw Error(strf("'%s': step %d is negative", path.c_str(), s.step));
    if (s.run_steps < 0 || (s.run_steps > 0 && s.run_steps < s.step))
        throw Error(strf("'%s': step %d of a run of %d steps", path.c_str(), s.step, s.run_steps));
    if (s.noise.steps < 0 || !std::isfinite(s.noise.g2) || !std::isfinite(s.noise.trace))
        throw Error(strf("'%s': the noise scale's averages are damaged", path.c_str()));
    if (s.global_batch <= 0) throw Error(strf("'%s': global batch %lld is not positive", path.c_str(), s.global_batch));
    if (s.train_data.shards < 0 || s.train_data.tokens < 0)
        throw Error(strf("'%s': the training data is recorded as %s", path.c_str(), s.train_data.describe().c_str()));
    s.choices_recorded = h[1] >= 5;
    if (s.choices_recorded) {
        int bytes = h[24];
        if (bytes < 0 || bytes > RunChoices::MAX_BYTES ||
            !RunChoices::parse(std::string((const char*)(h + 32), bytes), s.choices))
            throw Error(strf("'%s': its record of the run-time choices (header [24] = %d bytes at [32]) is damaged",
                             path.c_str(), bytes));
    }
    return s;
}

// The header of the state file at path alone (a resumed run's choices are needed before
// memory is planned, long before the moments are read).
inline TrainState read_state_header(const std::string& path, size_t n) {
    InputFile f(path, "training-state file");
    return read_state_header(f, n);
}

// Reads a training state for a model of n parameters into m and v, checking everything the
// file alone can tell; run.h checks the rest against the data and the options.
inline TrainState load_state(const std::string& path, float* m, float* v, size_t n) {
    InputFile f(path, "training-state file");
    TrainState s = read_state_header(f, n);
    if (!f.read(m, n * sizeof(float)) || !f.read(v, n * sizeof(float))) throw Error("'" + path + "' is truncated");
    if (size_t bad = count_bad_moments(m, v, n))
        throw Error(strf("'%s': AdamW's moments hold %s non-finite or negative value%s", path.c_str(),
                         with_commas((long long)bad).c_str(), bad == 1 ? "" : "s"));
    return s;
}

// ---- checkpoint names in the output directory ----

inline std::string model_path(const std::string& dir, int step) { return dir + strf("/model_%08d.bin", step); }
inline std::string state_path(const std::string& dir, int step) { return dir + strf("/state_%08d.bin", step); }

// One checkpoint: the state, then the model. When the model cannot be written (a full disk),
// the state just written is removed again, so no state file is left without its model; a
// crash between the two leaves such an incomplete pair, which --resume skips.
inline void save_checkpoint_pair(const std::string& dir, int step, const TrainState& st, const float* m,
                                 const float* v, const ModelConfig& mc, const float* params) {
    std::string state = state_path(dir, step);
    save_state(state, st, m, v, mc.num_params());
    try {
        save_model(model_path(dir, step), mc, params);
    } catch (const Error&) {
        if (remove(state.c_str()) == 0) sync_dir(dir);
        throw;
    }
}

// Step of a checkpoint file name: "model_00000300.bin" with prefix "model_" and suffix ".bin"
// gives 300; any other name gives -1.
inline int checkpoint_step(const std::string& name, const std::string& prefix, const std::string& suffix) {
    if (name.size() < prefix.size() + 8 + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
        return -1;
    std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    if (digits.size() > 10 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
    long long step = atoll(digits.c_str());
    return step <= INT_MAX ? (int)step : -1;
}

inline std::vector<std::string> dir_entries(const std::string& dir) {
    std::vector<std::string> names;
    if (DIR* d = opendir(dir.c_str())) {
        while (dirent* e = readdir(d)) names.push_back(e->d_name);
        closedir(d);
    }
    return names;
}

// Steps with both a model and a state file, ascending (a crash between the two renames
// leaves an incomplete pair, which does not count).
inline std::vector<int> complete_checkpoints(const std::string& dir) {
    std::vector<int> steps;
    for (const std::string& name : dir_entries(dir)) {
        int step = checkpoint_step(name, "state_", ".bin");
        if (step >= 0 && file_exists(model_path(dir, step))) steps.push_back(step);
    }
    std::sort(steps.begin(), steps.end());
    return steps;
}

// The highest step with both files; -1 when there is none.
inline int latest_checkpoint(const std::string& dir) {
    std::vector<int> steps = complete_checkpoints(dir);
    return steps.empty() ? -1 : steps.back();
}

// Removes the temporary files of checkpoint writes that a crash interrupted; returns their
// names. Only names this program writes are touched.
inline std::vector<std::string> remove_stale_temporaries(const std::string& dir) {
    std::vector<std::string> removed;
    for (const std::string& name : dir_entries(dir))
        if (checkpoint_step(name, "model_", ".bin.tmp") >= 0 || checkpoint_step(name, "state_", ".bin.tmp") >= 0)
            if (remove((dir + "/" + name).c_str()) == 0) removed.push_back(name);
    return removed;
}

// Keeps the newest `keep` complete checkpoints and removes the files of every older step;
// returns the steps removed. The newest complete pair is never removed (keep >= 1), and each
// state file goes before its model file, so a crash half-way leaves no pair that looks
// complete but is not.
inline std::vector<int> prune_checkpoints(const std::string& dir, int keep) {
    std::vector<int> complete = complete_checkpoints(dir), removed;
    if (keep < 1 || (int)complete.size() <= keep) return removed;
    int oldest_kept = complete[complete.size() - keep];
    std::vector<int> old;
    for (const std::string& name : dir_entries(dir)) {
        int step = std::max(checkpoint_step(name, "state_", ".bin"), checkpoint_step(name, "model_", ".bin"));
        if (step >= 0 && step < oldest_kept) old.push_back(step);
    }
    std::sort(old.begin(), old.end());
    old.erase(std::unique(old.begin(), old.end()), old.end());
    for (int step : old) {
        remove(state_path(dir, step).c_str());
        remove(model_path(dir, step).c_str());
        removed.push_back(step);
    }
    return removed;
}

// Checks a training state against the run it is to continue: the same global batch, the
// same training data (data_name says which, for the message), a data position inside it,
// and a step not past --steps. Returns a note for the log, or "".
inline std::string check_state_fits(const TrainState& st, const std::string& state_file, const BatchPlan& plan,
                                    const DataLoader& data, const std::string& data_name, int steps) {
    if (st.global_batch != plan.global_tokens())
        throw Error(strf("the checkpoint was made with a global batch of %s tokens, this run has %s; resume with the "
                         "same --total-batch (any split of it works)",
                         with_commas(st.global_batch).c_str(), with_commas(plan.global_tokens()).c_str()));
    std::string note;
    if (st.train_data.shards == 0)
        note = "note: '" + state_file + "' predates data fingerprints: the data position is checked, the data is not";
    else if (!(st.train_data == data.identity()))
        throw Error(strf("'%s' was made on other training data (%s) than this run's %s (%s); resume with the same "
                         "--train-data",
                         state_file.c_str(), st.train_data.describe().c_str(), data_name.c_str(),
                         data.identity().describe().c_str()));
    std::string outside = data.position_problem(st.data);
    if (!outside.empty())
        throw Error(strf("'%s': its data position is outside the training data: %s", state_file.c_str(),
                         outside.c_str()));
    // every step takes one chunk, in order, so step s stands in epoch s / (chunks per epoch)
    const long long per_epoch = data.chunks_per_epoch(), epoch = per_epoch > 0 ? st.step / per_epoch : 0;
    if (st.data.epoch != epoch)
        throw Error(strf("'%s': its data position is impossible: epoch %lld at step %d, which stands in epoch %lld "
                         "(one chunk a step, %s chunks an epoch)",
                         state_file.c_str(), st.data.epoch, st.step, epoch, with_commas(per_epoch).c_str()));
    if (st.step > steps)
        throw Error(strf("'%s' is at step %d, past --steps %d: pass --steps %d or more to continue that run",
                         state_file.c_str(), st.step, steps, st.step));
    return note;
}

// A resumed run whose --steps differs from that of the checkpoint's run. The cosine depends
// on the run's length, so the learning rate would jump: refused, unless --extend 1 asks for
// the cosine to be recomputed over the new length (or the schedule is constant). Returns a
// note for the log, or "".
inline std::string check_schedule_fits(const TrainState& st, const std::string& state_file, const Config& cfg) {
    if (st.run_steps == 0 || st.run_steps == cfg.steps) return "";  // (0: a state from before run lengths)
    std::string change = strf("the checkpoint's run had --steps %s, this one has %s", with_commas(st.run_steps).c_str(),
                              with_commas(cfg.steps).c_str());
    if (cfg.lr_schedule == "constant") return "note: " + change + "; the learning rate is constant, so only the length changes";
    // step t trains with schedule.at(t - 1)
    float last = lr_schedule(cfg, st.run_steps).at(st.step - 1), next = lr_schedule(cfg, cfg.steps).at(st.step);
    std::string jump = strf("the learning rate goes from %.2e at step %s to %.2e at step %s", last,
                            with_commas(st.step).c_str(), next, with_commas(st.step + 1).c_str());
    if (!cfg.extend)
        throw Error(strf("'%s': %s, and the cosine schedule depends on the length: %s; pass --steps %d to continue "
                         "that run as planned, --extend 1 to recompute the cosine over %d steps, or --lr-schedule "
                         "constant",
                         state_file.c_str(), change.c_str(), jump.c_str(), st.run_steps, cfg.steps));
    return strf("extending the run (--extend 1): %s; the cosine is recomputed over %s steps, so %s", change.c_str(),
                with_commas(cfg.steps).c_str(), jump.c_str());
}

// ---- resuming: the run-time choices a state file records, and a resume with nothing to resume

// The Config string of a run-time choice's option ("attention").
inline std::string& choice_option(Config& cfg, const std::string& name) {
    for (const Option& o : option_table(cfg))
        if (name == o.name && !strcmp(o.kind, "str")) return *(std::string*)o.value;
    throw Error("no string option --" + name + " for a run-time choice");  // a trainer's mistake
}
// What this run computes with, for its state files: the values of the trainer's run-time
// choices (Trainer::run_time_choices, host/trainer.h).
inline RunChoices choices_made(Config& cfg, const std::vector<std::string>& names) {
    RunChoices made;
    for (const std::string& name : names) made.entries.push_back({name, choice_option(cfg, name)});
    return made;
}

// --resume 1 where --out-dir holds no checkpoint stops before anything is printed: a typo in
// --out-dir would otherwise start the run over from step 0, said in one line of many.
// --resume auto is for a command that is simply run again (the run says it starts fresh).
inline void check_checkpoint_to_resume(const Config& cfg) {
    if (cfg.resume != 1 || cfg.dry_run) return;
    if (cfg.out_dir.empty())
        throw Error("--resume 1 needs the --out-dir that holds the checkpoints, not \"\"");
    if (latest_checkpoint(cfg.out_dir) < 0)
        throw Error(strf("--resume 1: no checkpoint in '%s' (a model_*.bin with its state_*.bin); check --out-dir, "
                         "or pass --resume auto to start from step 0 when there is none",
                         cfg.out_dir.c_str()));
}

// The state file a run continues from: --resume's latest checkpoint in --out-dir; "" for a
// fresh run or a dry run. (A trainer reads its own recorded choices from it too: the GPU's
// algorithm per product, gpu/matmul.cuh.)
inline std::string state_to_resume(const Config& cfg) {
    if (!cfg.resume || cfg.out_dir.empty() || cfg.dry_run) return "";
    const int step = latest_checkpoint(cfg.out_dir);
    return step < 0 ? "" : state_path(cfg.out_dir, step);
}

// Before memory is planned: a resumed run takes the run-time choices its checkpoint recorded
// (RunChoices, above) for every option left at auto or not on the command line (a default
// such as --epilogues fused is no request). Choosing again could pick another kernel (timing
// differs from one process to the next), and the run would no longer compute what the
// uninterrupted one does. An option named on the command line wins, and the run says that
// its arithmetic changes there. A recorded value this trainer cannot take is refused,
// whatever the options. `say` prints a line (rank 0's).
template <class Say>
void adopt_recorded_choices(Config& cfg, const std::vector<std::string>& names, size_t num_params, Say&& say) {
    const std::string file = state_to_resume(cfg);
    if (file.empty() || names.empty()) return;
    TrainState st = read_state_header(file, num_params);
    for (const std::string& name : names) {
        std::string& value = choice_option(cfg, name);
        const std::string recorded = st.choices.get(name);
        if (recorded.empty()) {
            if (value == "auto")
                say(strf("note: '%s' does not record what --%s auto chose (%s): it is chosen again, and may differ "
                         "from that run's",
                         file.c_str(), name.c_str(),
                         st.choices_recorded ? "it was written by a trainer without that choice"
                                             : "it predates recorded choices"));
            continue;
        }
        Config with = cfg;  // the recorded value must be one this trainer takes
        choice_option(with, name) = recorded;
        try {
            if (recorded == "auto") throw UsageError("auto is not a choice");
            validate_config(with);
        } catch (const UsageError& e) {
            throw Error(strf("'%s' records --%s %s, which this trainer cannot take: %s", file.c_str(), name.c_str(),
                             recorded.c_str(), e.what()));
        }
        const bool named = std::find(cfg.given.begin(), cfg.given.end(), name) != cfg.given.end();
        if (value == "auto") {
            value = recorded;
            say(strf("--%s auto: %s, as recorded in '%s' (a resumed run keeps its checkpoint's choices)",
                     name.c_str(), recorded.c_str(), file.c_str()));
        } else if (value != recorded && !named) {
            value = recorded;
            say(strf("--%s %s, as recorded in '%s' (a resumed run keeps its checkpoint's choices; give --%s to "
                     "change it)",
                     name.c_str(), recorded.c_str(), file.c_str(), name.c_str()));
        } else if (value != recorded) {
            say(strf("note: the run in '%s' computed with --%s %s until step %d; --%s %s changes the arithmetic "
                     "from there, so this run will not reproduce an uninterrupted one bit for bit",
                     cfg.out_dir.c_str(), name.c_str(), recorded.c_str(), st.step, name.c_str(), value.c_str()));
        }
    }
}
