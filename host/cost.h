// What training costs: the FLOPs of a step, the bytes its gradient sync moves, and the time
// both take on a given device and link. The formulas are written once, here; the dry run
// prints a plan from them, and the step line reports the FLOP/s achieved.
//
// FLOPs are counted as 2 per multiply-add, in the matrix products only (the rest of the
// model, LayerNorm, GELU, softmax, is a few percent and bandwidth-bound). Per token, forward
// and backward together:
//   * the parameter term, 6·P: each weight that multiplies an activation costs 2 FLOPs in the
//     forward and 4 in the backward (the gradients of the input and of the weight). P counts
//     those weights: 12·C² per block (qkv 3C², projection C², MLP 8C²) and the tied head's
//     Vp·C (all Vp columns are computed). Embedding lookups and biases cost nothing here.
//   * the attention term: per block, q·kᵀ and P·v each cost 2·C FLOPs per (query, key) pair
//     in the forward, three times that with the backward. With causal masking, query t
//     sees t + 1 keys: (T + 1)/2 on average, so 6·C·(T + 1) per block per token. (The GPU
//     computes all T×T scores and masks them; the useful work, counted here, is the causal
//     half. PyTorch's FLOP counter counts the full products: 12·C·T per block.)
// Communication: one all-reduce of the float32 gradients per optimizer step. In a ring
// all-reduce each replica sends, and receives, 2·(R−1)/R times the buffer.
#pragma once
#include <string>

#include "batch.h"
#include "checkpoint.h"

// The weights that multiply activations, per the comment above.
inline double matmul_params(const ModelConfig& c) { return 12.0 * c.L * c.C * c.C + (double)c.Vp * c.C; }

struct TokenFlops {
    double params;     // 6·P
    double attention;  // 6·L·C·(T + 1): causal
    double total() const { return params + attention; }
};
inline TokenFlops flops_per_token(const ModelConfig& c, int T) {
    return {6.0 * matmul_params(c), 6.0 * c.L * c.C * (T + 1.0)};
}
// The attention term as the full T×T products count it (what PyTorch's counter reports).
inline double full_attention_flops_per_token(const ModelConfig& c, int T) { return 12.0 * c.L * c.C * T; }

inline double flops_per_step(const ModelConfig& c, const BatchPlan& p) {
    return flops_per_token(c, p.T).total() * (double)p.global_tokens();
}

// Bytes each replica sends (and receives) in a ring all-reduce of n float32 values: a
// reduce-scatter then an all-gather, each passing R − 1 chunks of n/R values to the next rank.
inline double allreduce_bytes(double n, int R) { return R <= 1 ? 0.0 : 2.0 * (R - 1) / R * 4.0 * n; }
// The step's gradient sync: one all-reduce of every parameter's gradient, after the last
// micro-batch of the step (accumulation adds up locally first; that is the point of it).
constexpr int ALLREDUCES_PER_STEP = 1;
inline double gradient_sync_bytes(const ModelConfig& c, int R) {
    return ALLREDUCES_PER_STEP * allreduce_bytes((double)c.num_params(), R);
}

// A device and its link, for time estimates: a preset (--device) or the numbers given.
struct DeviceSpeed {
    const char* name;
    double tflops;     // dense, for the precision the products run in
    double link_gbps;  // bandwidth of one replica's link to the others, gigabits per second, one way
    const char* source;
};
// The presets' figures are the data sheets' dense ones; README "Planning a run" lists their
// sources. The link is the one within a node (NVLink, per GPU, one direction).
inline const DeviceSpeed DEVICE_PRESETS[] = {
    {"h100-sxm", 989, 3600, "NVIDIA H100 data sheet: 989 TFLOP/s dense BF16; NVLink 4: 450 GB/s per direction"},
    {"h100-pcie", 756, 512, "NVIDIA H100 data sheet: 756 TFLOP/s dense BF16; PCIe 5 x16: 64 GB/s per direction"},
    {"a100-sxm", 312, 2400, "NVIDIA A100 data sheet: 312 TFLOP/s dense BF16; NVLink 3: 300 GB/s per direction"},
};

// What a step and the run cost, from the formulas above; times are estimates, assuming the
// device reaches its peak and the gradient sync does not overlap compute.
struct RunPlan {
    double flops_per_step, flops_total;
    double comm_bytes;  // per replica per step, each way
    double compute_s = 0, comm_s = 0;  // per step; 0 without a device speed
    double step_s() const { return compute_s + comm_s; }
    double efficiency() const { return step_s() > 0 ? compute_s / step_s() : 0; }  // of R replicas' compute
};
inline RunPlan plan_run(const ModelConfig& c, const BatchPlan& p, int steps, const DeviceSpeed* speed) {
    RunPlan r;
    r.flops_per_step = flops_per_step(c, p);
    r.flops_total = r.flops_per_step * steps;
    r.comm_bytes = gradient_sync_bytes(c, p.R);
    if (speed && speed->tflops > 0) r.compute_s = r.flops_per_step / p.R / (speed->tflops * 1e12);
    if (speed && speed->link_gbps > 0) r.comm_s = r.comm_bytes * 8 / (speed->link_gbps * 1e9);
    return r;
}
