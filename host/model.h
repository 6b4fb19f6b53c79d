// The model both trainers build: its shape (from a checkpoint or the options), its
// initialisation, and the size checks on its activations. The parameter layout and the
// files are host/checkpoint.h's.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "batch.h"
#include "checkpoint.h"
#include "cli.h"
#include "error.h"
#include "rng.h"

// GPT-2 initialisation: weights N(0, 0.02), the two projections that write into the
// residual stream scaled by 1/√(2L) (so the stream's variance does not grow with depth),
// biases 0, LayerNorm weights 1, padded vocabulary rows 0.
inline void init_params_gpt2(float* params, const ModelConfig& c, uint64_t seed) {
    Rng rng(seed);
    std::vector<size_t> sizes = c.param_sizes();
    float* t = params;
    float residual_std = 0.02f / sqrtf(2.0f * c.L);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        std::string name = PARAM_NAMES[i];
        bool is_weight = name == "wte" || name == "wpe" || name == "qkvw" || name == "fcw";
        bool is_residual_proj = name == "attprojw" || name == "fcprojw";
        bool is_ln_weight = name == "ln1w" || name == "ln2w" || name == "lnfw";
        size_t n = name == "wte" ? (size_t)c.V * c.C : sizes[i];  // padded rows stay 0
        for (size_t j = 0; j < n; j++)
            t[j] = is_weight ? (float)(0.02 * rng.normal())
                 : is_residual_proj ? (float)(residual_std * rng.normal())
                 : is_ln_weight ? 1.0f : 0.0f;
        t += sizes[i];
    }
}

// The model's shape: from the file given with --load, or from the options (checked against
// the same limits as a file's header).
inline ModelConfig model_shape(const Config& cfg) {
    if (!cfg.load.empty()) return read_model_header(cfg.load);
    ModelConfig mc;
    mc.L = cfg.layers, mc.NH = cfg.heads, mc.C = cfg.channels, mc.maxT = cfg.max_seq_len;
    mc.V = cfg.vocab ? cfg.vocab : (cfg.train_data.empty() ? 256 : 50257);
    mc.Vp = cfg.padded_vocab ? cfg.padded_vocab : mc.V;
    std::string problem = shape_problem(mc, true);
    if (problem.empty() && !cfg.padded_vocab) {  // V is in range now, so V + 127 cannot overflow
        mc.Vp = (mc.V + 127) / 128 * 128;
        problem = shape_problem(mc, true);
    }
    if (problem.empty()) return mc;
    if (mc.Vp < mc.V) throw UsageError(strf("--padded-vocab %d is smaller than --vocab %d", mc.Vp, mc.V));
    throw UsageError(problem);
}

// The largest activation tensors of a micro-batch in elements, checked so that no size
// the trainers compute with size_t can wrap: attention (L, B, NH, T, T), the MLP's
// (L, B, T, 4C) and the logits (B, T, Vp); every other tensor is smaller than one of them.
inline void check_activation_sizes(const ModelConfig& mc, const BatchPlan& plan) {
    long long att = checked_product({mc.L, plan.B, mc.NH, plan.T, plan.T});
    long long mlp = checked_product({mc.L, plan.B, plan.T, 4, mc.C});
    long long logits = checked_product({plan.B, plan.T, mc.Vp});
    const long long limit = 1ll << 56;  // 2^56 floats, 256 PiB: beyond any machine, far from overflow in sums
    if (att < 0 || att > limit || mlp < 0 || mlp > limit || logits < 0 || logits > limit)
        throw Error(strf("the activations of a micro-batch of B×T = %d×%d with L=%d NH=%d C=%d Vp=%d are too large "
                         "to address (more than 2^56 floats in one tensor); lower --batch-size or --seq-len",
                         plan.B, plan.T, mc.L, mc.NH, mc.C, mc.Vp));
}
