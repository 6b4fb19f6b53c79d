// Learning-rate schedule, as a function of the optimizer step (0-based).
#pragma once
#include <cmath>
#include <string>

#include "cli.h"

struct LrSchedule {
    float peak;        // learning rate after warm-up
    int warmup;        // linear warm-up steps
    int total;         // total optimizer steps
    float final_frac;  // cosine floor = peak × final_frac
    bool constant;     // constant schedule ignores warm-up and decay

    float at(int step) const {
        if (constant) return peak;
        // warm-up reaches peak at step warmup-1, so step 0 already trains (lr = peak/warmup)
        if (step < warmup) return peak * (step + 1) / warmup;
        if (total <= warmup) return peak;
        float progress = float(step - warmup) / float(total - warmup);  // 0 → 1
        float cosine = 0.5f * (1.0f + std::cos(3.14159265358979f * progress));  // 1 → 0
        float floor = peak * final_frac;
        return floor + (peak - floor) * cosine;
    }
};

inline LrSchedule lr_schedule(const Config& cfg, int steps) {
    return {cfg.lr, cfg.warmup, steps, cfg.lr_final_frac, cfg.lr_schedule == "constant"};
}
