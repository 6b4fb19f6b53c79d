// The model both trainers build: its shape (from a checkpoint or the options), its
// initialisation, and the size checks on its activations. The parameter layout and the
// files are host/checkpoint.h's.
#pragma once
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "batch.h"
#include "checkpoint.h"
#include "cli.h"
#include "error.h"
#include "rng.h"

// GPT-2's initialisation, which the Llama models here share: weights N(0, 0.02), the two
// projections that write into the residual stream scaled by 1/√(2L) (so the stream's variance
// does not grow with depth), biases 0, norm weights 1, padded vocabulary rows 0 (wte's and
// the untied head's).
inline void init_params(float* params, const ModelConfig& c, uint64_t seed) {
    Rng rng(seed);
    std::vector<size_t> sizes = c.param_sizes();
    float* t = params;
    float residual_std = 0.02f / sqrtf(2.0f * c.L);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        std::string name = PARAM_NAMES[i];
        bool is_weight = name == "wte" || name == "wpe" || name == "qkvw" || name == "fcw" || name == "wout";
        bool is_residual_proj = name == "attprojw" || name == "fcprojw";
        bool is_ln_weight = name == "ln1w" || name == "ln2w" || name == "lnfw";
        size_t n = name == "wte" || name == "wout" ? std::min(sizes[i], (size_t)c.V * c.C) : sizes[i];  // padded rows stay 0
        for (size_t j = 0; j < n; j++)
            t[j] = is_weight ? (float)(0.02 * rng.normal())
                 : is_residual_proj ? (float)(residual_std * rng.normal())
                 : is_ln_weight ? 1.0f : 0.0f;
        for (size_t j = n; j < sizes[i]; j++) t[j] = 0.0f;
        t += sizes[i];
    }
}

// Meta's rule for the MLP's width (its reference model.py): 2/3 of 4C, scaled by the
// multiplier when there is one, rounded up to a multiple. Llama-3.2 1B: C = 2048, ×1.5,
// multiple of 256 → 8192; Llama-3.1 8B: C = 4096, ×1.3, multiple of 1024 → 14336.
inline long long meta_ffn_hidden(int C, float multiplier, int multiple_of) {
    long long h = 2 * (4LL * C) / 3;
    if (multiplier > 0) h = (long long)(multiplier * (double)h);
    return (h + multiple_of - 1) / multiple_of * multiple_of;
}

// The model's shape: from the file given with --load, or from the options (checked against
// the same limits as a file's header).
inline ModelConfig model_shape(const Config& cfg) {
    if (!cfg.load.empty()) {
        ModelConfig mc = read_model_header(cfg.load);
        if (!cfg.model.empty() && cfg.model != family_name(mc.family))
            throw Error(strf("'%s' holds a %s model, not the %s that --model asks for", cfg.load.c_str(),
                             family_name(mc.family), cfg.model.c_str()));
        return mc;
    }
    ModelConfig mc;
    mc.L = cfg.layers, mc.NH = cfg.heads, mc.C = cfg.channels, mc.maxT = cfg.max_seq_len;
    // bytes for the built-in corpus; for shards the family's tokenizer: GPT-2's, or Llama-3's 128,256
    mc.V = cfg.vocab ? cfg.vocab : cfg.train_data.empty() ? 256 : cfg.model == "llama3" ? 128256 : 50257;
    mc.Vp = cfg.padded_vocab ? cfg.padded_vocab : mc.V;
    if (cfg.model == "llama3") {
        mc.family = Family::llama3;
        mc.KVH = cfg.kv_heads ? cfg.kv_heads : cfg.heads % 2 == 0 ? cfg.heads / 2 : cfg.heads;
        long long F = cfg.ffn_hidden ? cfg.ffn_hidden : meta_ffn_hidden(cfg.channels, cfg.ffn_multiplier, cfg.ffn_multiple_of);
        mc.F = (int)std::min<long long>(F, INT_MAX);
        mc.tied = cfg.tied, mc.norm_eps = cfg.norm_eps, mc.rope_theta = cfg.rope_theta;
        mc.rope_factor = cfg.rope_factor, mc.rope_low_freq = cfg.rope_low_freq, mc.rope_high_freq = cfg.rope_high_freq;
        mc.rope_original_T = cfg.rope_original_len;
    }
    std::string problem = shape_problem(mc, true);
    if (problem.empty() && !cfg.padded_vocab) {  // V is in range now, so V + 127 cannot overflow
        mc.Vp = (mc.V + 127) / 128 * 128;
        problem = shape_problem(mc, true);
    }
    if (problem.empty()) return mc;
    if (mc.Vp < mc.V) throw UsageError(strf("--padded-vocab %d is smaller than --vocab %d", mc.Vp, mc.V));
    throw UsageError(problem);
}

// The run's "model:" line: GPT-2's shape, or Llama's with each field that differs.
inline std::string describe_model(const ModelConfig& mc) {
    std::string count = with_commas(mc.num_params()) + " parameters";
    if (!mc.llama())
        return strf("L=%d NH=%d C=%d maxT=%d V=%d Vp=%d, %s", mc.L, mc.NH, mc.C, mc.maxT, mc.V, mc.Vp, count.c_str());
    std::string rope = strf("RoPE theta %g", mc.rope_theta);
    if (mc.rope_factor > 0)
        rope += strf(" scaled (factor %g, low %g, high %g, from %d)", mc.rope_factor, mc.rope_low_freq, mc.rope_high_freq,
                     mc.rope_original_T);
    return strf("llama3 L=%d NH=%d KVH=%d C=%d F=%d maxT=%d V=%d Vp=%d, %s, %s head, %s", mc.L, mc.NH, mc.KVH, mc.C,
                mc.F, mc.maxT, mc.V, mc.Vp, rope.c_str(), mc.tied ? "tied" : "untied", count.c_str());
}

// RoPE's rotation for each position and channel pair of a head: cos and sin of t·freq_i,
// (maxT, hs/2, 2), computed in double and rounded once. freq_i = theta^(-2i/hs), with
// Llama-3.1's scaling when rope_factor > 0: wavelengths shorter than original_T/high_freq
// keep their frequency, those longer than original_T/low_freq are divided by the factor, and
// those between blend the two smoothly (Meta's apply_scaling).
inline std::vector<double> rope_frequencies(const ModelConfig& c) {
    int half = c.hs() / 2;
    std::vector<double> freq(half);
    const double pi = 3.14159265358979323846;
    for (int i = 0; i < half; i++) {
        double f = std::pow((double)c.rope_theta, -2.0 * i / c.hs());
        if (c.rope_factor > 0) {
            double wavelen = 2 * pi / f, T0 = c.rope_original_T;
            double low_wavelen = T0 / c.rope_low_freq, high_wavelen = T0 / c.rope_high_freq;
            if (wavelen > low_wavelen) {
                f /= c.rope_factor;
            } else if (wavelen >= high_wavelen) {
                double smooth = (T0 / wavelen - c.rope_low_freq) / (c.rope_high_freq - c.rope_low_freq);
                f = (1 - smooth) * f / c.rope_factor + smooth * f;
            }
        }
        freq[i] = f;
    }
    return freq;
}
inline std::vector<float> rope_table(const ModelConfig& c) {
    std::vector<double> freq = rope_frequencies(c);
    int half = c.hs() / 2;
    std::vector<float> table((size_t)c.maxT * half * 2);
    for (int t = 0; t < c.maxT; t++)
        for (int i = 0; i < half; i++) {
            double angle = t * freq[i];
            table[((size_t)t * half + i) * 2] = (float)std::cos(angle);
            table[((size_t)t * half + i) * 2 + 1] = (float)std::sin(angle);
        }
    return table;
}

// The largest activation tensors of a micro-batch in elements, checked so that no size
// the trainers compute with size_t can wrap: attention (L, B, NH, T, T), the MLP's
// (L, B, T, 4C or 2F) and the logits (B, T, Vp); every other tensor is smaller than one of them.
inline void check_activation_sizes(const ModelConfig& mc, const BatchPlan& plan) {
    long long att = checked_product({mc.L, plan.B, mc.NH, plan.T, plan.T});
    long long mlp = checked_product({mc.L, plan.B, plan.T, std::max(mc.fc_channels(), mc.qkv_channels())});
    long long logits = checked_product({plan.B, plan.T, mc.Vp});
    const long long limit = 1ll << 56;  // 2^56 floats, 256 PiB: beyond any machine, far from overflow in sums
    if (att < 0 || att > limit || mlp < 0 || mlp > limit || logits < 0 || logits > limit)
        throw Error(strf("the activations of a micro-batch of B×T = %d×%d with L=%d NH=%d C=%d Vp=%d are too large "
                         "to address (more than 2^56 floats in one tensor); lower --batch-size or --seq-len",
                         plan.B, plan.T, mc.L, mc.NH, mc.C, mc.Vp));
}
