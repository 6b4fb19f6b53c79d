// The PyTorch golden files, read by test/cpu_trainer/check_reference.cpp and
// test/gpu_trainer/trainer.cu. Version 1 is GPT-2's (dev/reference/gpt2_reference.py, written
// out by hand), version 2 Llama-3's (dev/reference/llama_reference.py, Hugging Face's model).
// Layout, little-endian:
//   256 int32: [0]=20261123 [1]=version [2]=B [3]=T [4]=maxT [5]=V [6]=L [7]=NH [8]=C [9]=Vp [10]=nsteps
//              version 2 also: [11]=family (0 = gpt2, 1 = llama3) [12]=KVH [13]=F [14]=tied
//              [15]=rope_original_T; the rest 0
//   8 float32: lr, beta1, beta2, eps, weight_decay, grad_clip, 0, 0
//   version 2 only, 8 float32: norm_eps, rope_theta, rope_factor, rope_low_freq, rope_high_freq, 0, 0, 0
//   inputs, targets (B·T int32 each; one stream of B·T+1 tokens shifted by one),
//   logits (B·T·V float32), loss, the parameter gradients, nsteps losses, the parameter
//   tensors after nsteps AdamW steps on the same batch; nothing after them.
// The parameter tensors are those of the model file, in its order: version 1 the 16 of
// GPT-2 (ModelConfig::param_sizes), version 2 the 17 of the Llama layout, a tensor the family
// lacks taking no space (ModelConfig::param_sizes). dev/reference/README.md gives both in full.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "../host/checkpoint.h"
#include "../host/error.h"

constexpr int GOLDEN_MAGIC = 20261123;
constexpr int GOLDEN_VERSION = 2;  // the newest; version 1 is read too

struct Golden {
    int version;
    int B, T, nsteps;
    ModelConfig cfg;                    // the model's shape, of either family
    float lr, beta1, beta2, eps, weight_decay, grad_clip;
    std::vector<size_t> sizes;          // the parameter tensors' element counts, file order (16 or 17)
    std::vector<int> inputs, targets;   // (B, T)
    std::vector<float> logits;          // (B, T, V)
    float loss;
    std::vector<float> grads;           // all tensors, file order
    std::vector<float> losses;          // (nsteps)
    std::vector<float> params_after;    // all tensors after nsteps
};

// Why a golden header cannot describe a model (empty when it can): the test data is ours, but
// a damaged file must not become a huge allocation or a division by zero.
inline std::string golden_problem(const Golden& g) {
    const int big = 1 << 24;
    const ModelConfig& c = g.cfg;
    for (int v : {g.B, g.T})
        if (v < 1 || v > big) return strf("a batch field is %d (1 to %d)", v, big);
    if (g.nsteps < 0 || g.nsteps > big) return strf("nsteps is %d", g.nsteps);
    if (g.T > c.maxT) return "T > maxT";
    return shape_problem(c, false);
}

inline Golden read_golden(const std::string& path) {
    std::unique_ptr<FILE, int (*)(FILE*)> file(fopen(path.c_str(), "rb"), fclose);
    FILE* f = file.get();
    if (!f) throw Error("cannot open golden file '" + path + "'");
    int h[256];
    float hp[8];
    Golden g;
    auto need = [&](void* p, size_t size, size_t n) {
        if (fread(p, size, n, f) != n) throw Error("'" + path + "' is truncated");
    };
    need(h, 4, 256);
    if (h[0] != GOLDEN_MAGIC || h[1] < 1 || h[1] > GOLDEN_VERSION)
        throw Error(strf("'%s' is not a golden file of version 1 to %d (magic %d, version %d)", path.c_str(),
                         GOLDEN_VERSION, h[0], h[1]));
    g.version = h[1];
    g.B = h[2], g.T = h[3], g.nsteps = h[10];
    g.cfg.maxT = h[4], g.cfg.V = h[5], g.cfg.L = h[6], g.cfg.NH = h[7], g.cfg.C = h[8], g.cfg.Vp = h[9];
    need(hp, 4, 8);
    g.lr = hp[0], g.beta1 = hp[1], g.beta2 = hp[2], g.eps = hp[3], g.weight_decay = hp[4], g.grad_clip = hp[5];
    if (g.version == 2) {  // version 1 is GPT-2's
        float lf[8];
        need(lf, 4, 8);
        if (h[11] != 0 && h[11] != 1) throw Error(strf("'%s': family %d is neither 0 (gpt2) nor 1 (llama3)", path.c_str(), h[11]));
        ModelConfig& c = g.cfg;
        c.family = (Family)h[11], c.KVH = h[12], c.F = h[13], c.tied = h[14], c.rope_original_T = h[15];
        c.norm_eps = lf[0], c.rope_theta = lf[1], c.rope_factor = lf[2], c.rope_low_freq = lf[3], c.rope_high_freq = lf[4];
    }
    std::string problem = golden_problem(g);
    if (!problem.empty()) throw Error("'" + path + "' is not a golden file: " + problem);
    g.sizes = g.cfg.param_sizes();
    size_t BT = (size_t)g.B * g.T, n = 0;
    for (size_t s : g.sizes) n += s;
    g.inputs.resize(BT), g.targets.resize(BT), g.logits.resize(BT * g.cfg.V), g.grads.resize(n);
    g.losses.resize(g.nsteps), g.params_after.resize(n);
    need(g.inputs.data(), 4, BT);
    need(g.targets.data(), 4, BT);
    need(g.logits.data(), 4, g.logits.size());
    need(&g.loss, 4, 1);
    need(g.grads.data(), 4, n);
    need(g.losses.data(), 4, g.nsteps);
    need(g.params_after.data(), 4, n);
    if (fgetc(f) != EOF) throw Error("'" + path + "' has data after its last field");
    return g;
}

// The committed reference (dev/reference/hellaswag_reference.py, float64 PyTorch): per
// example its label, the choices by summed and by mean loss, and the endings' scores.
struct HellaSwagReference {
    int T = 0;
    std::vector<int> label, pred, pred_norm;
    std::vector<std::vector<double>> sum, mean;
};
inline HellaSwagReference read_hellaswag_reference(const std::string& path) {
    HellaSwagReference r;
    std::ifstream f(path);
    std::string line;
    std::getline(f, line);
    r.T = atoi(line.c_str() + line.find("T=") + 2);
    while (std::getline(f, line)) {
        std::istringstream in(line);
        int label, pred, pred_norm;
        std::vector<double> s(4), mn(4);
        in >> label >> pred >> pred_norm >> s[0] >> s[1] >> s[2] >> s[3] >> mn[0] >> mn[1] >> mn[2] >> mn[3];
        r.label.push_back(label), r.pred.push_back(pred), r.pred_norm.push_back(pred_norm);
        r.sum.push_back(s), r.mean.push_back(mn);
    }
    return r;
}
