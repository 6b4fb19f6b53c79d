// The PyTorch golden file (written by dev/reference/gpt2_reference.py), read by
// test/cpu_trainer/check_reference.cpp and test/gpu_trainer/trainer.cu. Layout, little-endian:
//   256 int32: [0]=20261123 [1]=1 [2]=B [3]=T [4]=maxT [5]=V [6]=L [7]=NH [8]=C [9]=Vp [10]=nsteps
//   8 float32: lr, beta1, beta2, eps, weight_decay, grad_clip, 0, 0
//   inputs, targets (B·T int32 each; one stream of B·T+1 tokens shifted by one),
//   logits (B·T·V float32), loss, the 16 parameter gradients, nsteps losses, the 16
//   parameter tensors after nsteps AdamW steps on the same batch.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../host/checkpoint.h"
#include "../host/error.h"

constexpr int GOLDEN_MAGIC = 20261123;
constexpr int GOLDEN_VERSION = 1;

struct Golden {
    int B, T, nsteps;
    ModelConfig cfg;
    float lr, beta1, beta2, eps, weight_decay, grad_clip;
    std::vector<int> inputs, targets;   // (B, T)
    std::vector<float> logits;          // (B, T, V)
    float loss;
    std::vector<float> grads;           // all 16 tensors, file order
    std::vector<float> losses;          // (nsteps)
    std::vector<float> params_after;    // all 16 tensors after nsteps
};

inline Golden read_golden(const std::string& path) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) throw Error("cannot open golden file '" + path + "'");
    int h[256];
    float hp[8];
    Golden g;
    auto need = [&](void* p, size_t size, size_t n) {
        if (fread(p, size, n, f) != n) throw Error("'" + path + "' is truncated");
    };
    need(h, 4, 256);
    if (h[0] != GOLDEN_MAGIC || h[1] != GOLDEN_VERSION)
        throw Error(strf("'%s' is not a golden file of version %d (magic %d)", path.c_str(), GOLDEN_VERSION, h[0]));
    g.B = h[2], g.T = h[3], g.nsteps = h[10];
    g.cfg.maxT = h[4], g.cfg.V = h[5], g.cfg.L = h[6], g.cfg.NH = h[7], g.cfg.C = h[8], g.cfg.Vp = h[9];
    need(hp, 4, 8);
    g.lr = hp[0], g.beta1 = hp[1], g.beta2 = hp[2], g.eps = hp[3], g.weight_decay = hp[4], g.grad_clip = hp[5];
    size_t BT = (size_t)g.B * g.T, n = g.cfg.num_params();
    g.inputs.resize(BT), g.targets.resize(BT), g.logits.resize(BT * g.cfg.V), g.grads.resize(n);
    g.losses.resize(g.nsteps), g.params_after.resize(n);
    need(g.inputs.data(), 4, BT);
    need(g.targets.data(), 4, BT);
    need(g.logits.data(), 4, g.logits.size());
    need(&g.loss, 4, 1);
    need(g.grads.data(), 4, n);
    need(g.losses.data(), 4, g.nsteps);
    need(g.params_after.data(), 4, n);
    fclose(f);
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
