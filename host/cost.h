// What training costs: the FLOPs of a step, the bytes its gradient sync moves, and the time
// both take on a given device and link. The formulas are written once, here; the dry run
// prints a plan from them, and the step line reports the FLOP/s achieved.
//
// FLOPs are counted as 2 per multiply-add, in the matrix products only (the rest of the
// model, LayerNorm, GELU, softmax, is a few percent and bandwidth-bound). Per token, forward
// and backward together:
//   * the parameter term, 6·P: each weight that multiplies an activation costs 2 FLOPs in the
//     forward and 4 in the backward (the gradients of the input and of the weight). P counts
//     those weights, per block C·QKV (qkv), C² (projection) and C·fc + hidden·C (the MLP's
//     two products), then the head's Vp·C (all Vp columns are computed, whether the head is
//     wte or Llama's own wout). GPT-2: QKV = 3C, fc = hidden = 4C, so 12·C² per block.
//     Llama-3: QKV = C + 2·KVH·hs (its K and V are KVH heads wide), fc = 2F (gate and up),
//     hidden = F, so C·(2C + 2·KVH·hs + 3F) per block. Embedding lookups and biases cost nothing.
//   * the attention term: per block, q·kᵀ and P·v each cost 2·hs FLOPs per (query, key) pair
//     and query head, 2·NH·hs = 2·C in all, in the forward, three times that with the
//     backward: the NH query heads each do their products, whatever KVH heads they share. With
//     causal masking, query t sees t + 1 keys: (T + 1)/2 on average, so 6·C·(T + 1) per block
//     per token. (The GPU computes all T×T scores and masks them; the useful work, counted
//     here, is the causal half. PyTorch's FLOP counter counts the full products: 12·C·T per block.)
// Communication: one all-reduce of the float32 gradients per optimizer step. In a ring
// all-reduce each replica sends, and receives, 2·(R−1)/R times the buffer. With ZeRO stage 1
// (--zero 1) the same step does its two halves as two collectives: a reduce-scatter of the
// float32 gradients ((R−1)/R of them), and after the update an all-gather of the weights the
// kernels read ((R−1)/R of them: float32, or bf16 on the GPU, which then moves less).
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "batch.h"
#include "checkpoint.h"
#include "kernel_cost.h"
#include "device_limits.h"

// The weights that multiply activations, per the comment above: the family's widths
// (ModelConfig's qkv_channels(), fc_channels(), hidden()) and the head's Vp·C.
inline double matmul_params(const ModelConfig& c) {
    const double C = c.C;
    return c.L * C * ((double)c.qkv_channels() + C + c.fc_channels() + c.hidden()) + (double)c.Vp * C;
}
// The width of the attention's products per position: NH query heads of hs (= C).
inline double attention_width(const ModelConfig& c) { return (double)c.NH * c.hs(); }

struct TokenFlops {
    double params;     // 6·P
    double attention;  // 6·L·C·(T + 1): causal
    double total() const { return params + attention; }
};
inline TokenFlops flops_per_token(const ModelConfig& c, int T) {
    return {6.0 * matmul_params(c), 6.0 * c.L * attention_width(c) * (T + 1.0)};
}
// The attention term as the full T×T products count it (what PyTorch's counter reports).
inline double full_attention_flops_per_token(const ModelConfig& c, int T) { return 12.0 * c.L * attention_width(c) * T; }

inline double flops_per_step(const ModelConfig& c, const BatchPlan& p) {
    return flops_per_token(c, p.T).total() * (double)p.global_tokens();
}

// Bytes each replica sends (and receives) in a ring all-reduce of n values of `bytes` each: a
// reduce-scatter then an all-gather, each passing R − 1 chunks of n/R values to the next rank.
inline double allreduce_bytes(double n, int R, int bytes = 4) { return R <= 1 ? 0.0 : 2.0 * (R - 1) / R * bytes * n; }
// The step's gradient sync: one all-reduce of every parameter's gradient, after the last
// micro-batch of the step (accumulation adds up locally first; that is the point of it), in
// grad_bytes a value (4: float32; 2: --grad-sync-dtype bf16).
constexpr int ALLREDUCES_PER_STEP = 1;
inline double gradient_sync_bytes(const ModelConfig& c, int R, int grad_bytes = 4) {
    return ALLREDUCES_PER_STEP * allreduce_bytes((double)c.num_params(), R, grad_bytes);
}
// --zero 1: the reduce-scatter of the gradients (grad_bytes each) and the all-gather of the
// weights (weight_bytes each: 4 for float32, 2 for bf16), per replica each way; the padding counted.
inline double zero_sync_bytes(const ModelConfig& c, int R, int weight_bytes, int grad_bytes = 4) {
    if (R <= 1) return 0.0;
    double padded = (double)((c.num_params() + 8ull * R - 1) / (8ull * R) * (8ull * R));
    return (double)(R - 1) / R * padded * (grad_bytes + weight_bytes);
}
// What the sync moves per value: the gradients' type on the wire, and with --zero 1 the
// gathered weights' (0: no ZeRO).
struct SyncTypes {
    int grad_bytes = 4;
    int zero_weight_bytes = 0;
};

// A device and its link, for time estimates: a preset (--device) or the numbers given.
struct DeviceSpeed {
    std::string name;       // empty when no device was given
    double tflops = 0;      // dense peak for the precision the products run in; 0 = not given
    double link_gbps = 0;   // one replica's link to the others, gigabits per second each way; 0 = not given
    double memory_gbs = 0;  // device-memory bandwidth, GB/s; 0 = not given (a preset's only)
    double vector_tflops = 0;  // float32 peak without tensor cores (elementwise kernels); 0 = not given
};
struct DevicePreset {
    const char* name;
    double tflops, link_gbps, memory_gbs, vector_tflops;
};
// The data sheets' dense BF16 figures, the per-GPU link within a node, one direction, the
// memory bandwidth and the FP32 (non-tensor) peak; docs/planning.md, "Planning a run", gives
// the sources.
inline const DevicePreset DEVICE_PRESETS[] = {
    {"h100-sxm", 989, 3600, 3350, 67},     // NVLink 4: 450 GB/s each way; HBM3 3.35 TB/s
    {"h200", 989, 3600, 4800, 67},         // H100's compute and NVLink; 141 GB of HBM3e at 4.8 TB/s
    {"h100-pcie", 756, 512, 2000, 51},     // PCIe 5 x16: 64 GB/s each way; HBM2e 2 TB/s
    {"a100-sxm", 312, 2400, 2039, 19.5},   // NVLink 3: 300 GB/s each way; A100 80GB: 2,039 GB/s
};
inline std::string device_preset_names() {
    std::string names;
    for (const DevicePreset& d : DEVICE_PRESETS) names += (names.empty() ? "" : ", ") + std::string(d.name);
    return names;
}
// The GPUs the planner knows the launch limits of but no speed figures for (host/device_limits.h).
inline std::string device_limit_names() {
    std::string names;
    for (const NamedDeviceLimits& n : NAMED_DEVICE_LIMITS) {
        bool timed = false;
        for (const DevicePreset& d : DEVICE_PRESETS) timed = timed || std::string(d.name) == n.key;
        if (!timed) names += (names.empty() ? "" : ", ") + std::string(n.key);
    }
    return names;
}
// From the options: a preset, whose figures --device-tflops and --link-gbps override.
inline DeviceSpeed device_speed(const std::string& preset, double tflops, double link_gbps) {
    DeviceSpeed d;
    if (!preset.empty()) {
        const DevicePreset* found = nullptr;
        for (const DevicePreset& p : DEVICE_PRESETS)
            if (preset == p.name) found = &p;
        if (found) d = {found->name, found->tflops, found->link_gbps, found->memory_gbs, found->vector_tflops};
        else if (device_limits_named(preset).known()) d.name = preset;  // limits only: the kernel plan (gpu/fit.cuh)
        else throw UsageError("--device: unknown device '" + preset + "'; known: " + device_preset_names() +
                              "; for the kernel plan only: " + device_limit_names());
    }
    if (!(tflops >= 0 && tflops < 1e6))
        throw UsageError(strf("--device-tflops must be from 0 (the preset's) to below 1e6 TFLOP/s, not %g", tflops));
    if (!(link_gbps >= 0 && link_gbps < 1e9))
        throw UsageError(strf("--link-gbps must be from 0 (the preset's) to below 1e9 Gbit/s, not %g", link_gbps));
    if (tflops > 0) d.tflops = tflops;
    if (link_gbps > 0) d.link_gbps = link_gbps;
    if (d.name.empty() && (tflops > 0 || link_gbps > 0)) d.name = "the device given";
    return d;
}

// The links of a cluster layout (host/cluster.h), per GPU, one direction, in Gbit/s: what a
// GPU can send while it receives as much. docs/planning.md, "Links", gives the sources.
struct LinkPreset {
    const char* name;
    double gbps;  // each way, per GPU
    bool intra;   // within a node (true) or between nodes
    const char* what;
};
inline const LinkPreset LINK_PRESETS[] = {
    {"nvlink4", 3600, true, "NVLink 4 (H100 SXM): 900 GB/s per GPU both ways together, 450 GB/s each way"},
    {"pcie5", 512, true, "PCIe 5.0 x16: 64 GB/s each way"},
    {"ndr", 400, false, "InfiniBand NDR: one 400 Gbit/s adapter per GPU"},
    {"eth100", 100, false, "100 Gbit/s Ethernet per GPU"},
};
// The preset `name` of the kind asked for (intra- or inter-node); a one-line error otherwise.
inline const LinkPreset& link_preset(const std::string& name, bool intra) {
    std::string known;
    for (const LinkPreset& l : LINK_PRESETS)
        if (l.intra == intra) {
            if (name == l.name) return l;
            known += (known.empty() ? "" : ", ") + std::string(l.name);
        }
    throw UsageError(strf("--%s: unknown %s link '%s'; known: %s", intra ? "intra-link" : "inter-link",
                          intra ? "intra-node" : "inter-node", name.c_str(), known.c_str()));
}

// What a step and the run cost, from the formulas above. Times are estimates: the device at
// its peak and the gradient sync not overlapped with compute.
struct RunPlan {
    double flops_per_step = 0, flops_total = 0;  // all replicas together
    double comm_bytes = 0;                       // per replica per step, each way
    double compute_s = 0, comm_s = 0;            // per step; 0 when the device's figure is not given
    int R = 1, steps = 0;
    double step_s() const { return compute_s + comm_s; }
    double efficiency() const { return step_s() > 0 ? compute_s / step_s() : 0; }  // of the R replicas' compute
    double run_s() const { return step_s() * steps; }
    double gpu_hours() const { return run_s() * R / 3600; }
};
inline RunPlan plan_run(const ModelConfig& c, const BatchPlan& p, int steps, const DeviceSpeed& d,
                        SyncTypes sync = {}) {
    RunPlan r;
    r.R = p.R, r.steps = steps;
    r.flops_per_step = flops_per_step(c, p);
    r.flops_total = r.flops_per_step * steps;
    r.comm_bytes = sync.zero_weight_bytes ? zero_sync_bytes(c, p.R, sync.zero_weight_bytes, sync.grad_bytes)
                                          : gradient_sync_bytes(c, p.R, sync.grad_bytes);
    if (d.tflops > 0) r.compute_s = r.flops_per_step / p.R / (d.tflops * 1e12);
    if (d.link_gbps > 0) r.comm_s = r.comm_bytes * 8 / (d.link_gbps * 1e9);
    return r;
}

// 8.05e17 -> "805 PFLOP": three significant digits and an SI prefix.
inline std::string format_flops(double f) {
    const char* prefixes[] = {"", "k", "M", "G", "T", "P", "E", "Z"};
    int u = 0;
    while (f >= 999.5 && u < 7) f /= 1000, u++;
    return strf("%.3g %sFLOP", f, prefixes[u]);
}
// 5.3e-6 -> "5.3 µs", 0.0534 -> "53.4 ms", 1053 -> "17.6 min", 8424 -> "2.34 h", 360000 -> "4.17 days"
inline std::string format_seconds(double s) {
    if (s == 0) return "0";
    if (s < 1e-3) return strf("%.3g µs", s * 1e6);
    if (s < 1) return strf("%.3g ms", s * 1e3);
    if (s < 60) return strf("%.3g s", s);
    if (s < 3600) return strf("%.3g min", s / 60);
    if (s < 86400 * 2) return strf("%.3g h", s / 3600);
    return strf("%.3g days", s / 86400);
}

// The plan's lines for the dry run and the start of every run.
inline std::vector<std::string> describe_costs(const ModelConfig& c, const BatchPlan& p, int steps,
                                               const DeviceSpeed& d, SyncTypes sync = {}) {
    TokenFlops t = flops_per_token(c, p.T);
    RunPlan r = plan_run(c, p, steps, d, sync);
    std::vector<std::string> lines;
    lines.push_back(strf("compute: %s per token (parameters 6·P = %s, P = %s weights in products; causal "
                         "attention 6·L·C·(T+1) = %s); %s per step, %s for %s steps",
                         format_flops(t.total()).c_str(), format_flops(t.params).c_str(),
                         with_commas((long long)matmul_params(c)).c_str(), format_flops(t.attention).c_str(),
                         format_flops(r.flops_per_step).c_str(), format_flops(r.flops_total).c_str(), with_commas(steps).c_str()));
    if (p.R == 1)
        lines.push_back("communication: none (one replica)");
    else if (sync.zero_weight_bytes)
        lines.push_back(strf("communication (--zero 1): a reduce-scatter of the %s of gradients and an all-gather of "
                             "the %s of weights per step; each replica sends and receives %s (ring: (R−1)/R of each)",
                             format_bytes((double)sync.grad_bytes * c.num_params()).c_str(),
                             format_bytes((double)sync.zero_weight_bytes * c.num_params()).c_str(),
                             format_bytes(r.comm_bytes).c_str()));
    else
        lines.push_back(strf("communication: %d all-reduce of the %s of gradients per step; each replica sends and "
                             "receives %s (ring: 2·(R−1)/R of the buffer)",
                             ALLREDUCES_PER_STEP, format_bytes((double)sync.grad_bytes * c.num_params()).c_str(),
                             format_bytes(r.comm_bytes).c_str()));
    if (d.tflops > 0) {
        std::string step = format_seconds(r.compute_s);
        if (p.R > 1)
            step += d.link_gbps > 0 ? " + gradient sync " + format_seconds(r.comm_s) + " = " + format_seconds(r.step_s())
                                    : " (gradient sync not counted: no --link-gbps)";
        std::string link = d.link_gbps > 0 ? strf(", link %g Gbit/s", d.link_gbps) : "";
        lines.push_back(strf("estimate for %s (%g TFLOP/s%s), at peak and without overlap: compute %s per step (a "
                             "lower bound), scaling efficiency %.1f%%; the run: %s, %.3g GPU-hours",
                             d.name.c_str(), d.tflops, link.c_str(), step.c_str(), 100 * r.efficiency(),
                             format_seconds(r.run_s()).c_str(), r.gpu_hours()));
    } else {
        lines.push_back("estimate: give --device (" + device_preset_names() +
                        ") or --device-tflops and --link-gbps for time per step and for the run");
    }
    return lines;
}

// The replica counts the dry run's tables list for p's global batch, B fixed: R = 1, 2, 4, ...
// while R·B·T divides it (R counted in 64 bits, so it cannot wrap to 0; a row whose A would
// not fit plan_batch's int is left out), and p.R itself.
inline std::vector<int> table_replica_counts(const BatchPlan& p) {
    std::vector<int> Rs;
    long long global = p.global_tokens(), per_replica_round = (long long)p.B * p.T;
    for (long long R = 1; R <= INT_MAX && global % (per_replica_round * R) == 0; R *= 2)
        if (global / (per_replica_round * R) <= INT_MAX) Rs.push_back((int)R);
    if (std::find(Rs.begin(), Rs.end(), p.R) == Rs.end()) Rs.push_back(p.R), std::sort(Rs.begin(), Rs.end());
    return Rs;
}

// The same global batch split over other replica counts, B fixed: R doubles and A halves
// until A = 1. The last column is what the sync would cost if it ran after every
// micro-batch instead of once per step: A times as much.
inline std::vector<std::string> accumulation_table(const ModelConfig& c, const BatchPlan& p, int steps,
                                                   const DeviceSpeed& d, int grad_bytes = 4) {
    const std::vector<int> Rs = table_replica_counts(p);
    long long global = p.global_tokens();
    bool timed = d.tflops > 0;
    std::vector<std::string> rows;
    rows.push_back(strf("the same %s tokens per step over other replica counts (B=%d, T=%d: the same memory per "
                        "replica in every row)%s:",
                        with_commas(global).c_str(), p.B, p.T, timed ? ", times estimated" : ""));
    rows.push_back(timed ? "  replicas  accumulation  compute/step  sync/step       step  efficiency        run  "
                           "GPU-hours  sync/step if after every micro-batch"
                         : "  replicas  accumulation  FLOP per replica per step  sync bytes per replica per step  "
                           "the same if after every micro-batch");
    for (int R : Rs) {
        BatchPlan q = plan_batch(p.B, p.T, R, global);
        RunPlan r = plan_run(c, q, steps, d, {grad_bytes, 0});
        std::string mark = R == p.R ? " <- this run" : "";
        if (timed)
            rows.push_back(strf("  %8d  %12d  %12s  %9s  %9s  %9.1f%%  %9s  %9.3g  %s%s", R, q.A,
                                format_seconds(r.compute_s).c_str(), format_seconds(r.comm_s).c_str(),
                                format_seconds(r.step_s()).c_str(), 100 * r.efficiency(),
                                format_seconds(r.run_s()).c_str(), r.gpu_hours(),
                                format_seconds(r.comm_s * q.A).c_str(), mark.c_str()));
        else
            rows.push_back(strf("  %8d  %12d  %25s  %31s  %s%s", R, q.A, format_flops(r.flops_per_step / R).c_str(),
                                format_bytes(r.comm_bytes).c_str(), format_bytes(r.comm_bytes * q.A).c_str(),
                                mark.c_str()));
    }
    return rows;
}

// The dry run's ZeRO table: per replica count R (those of the accumulation table), the memory
// of one replica with --zero 0 and --zero 1 (memory(R, zero), the trainer's own estimate) and
// the bytes each replica sends per step in both modes.
template <class Memory>
std::vector<std::string> zero_table(const ModelConfig& c, const BatchPlan& p, int weight_bytes, Memory memory,
                                    int grad_bytes = 4) {
    const std::vector<int> Rs = table_replica_counts(p);
    std::vector<std::string> rows;
    rows.push_back(strf("memory per replica and sync bytes per replica per step, without and with ZeRO stage 1 "
                        "(--zero 1: AdamW's state%s sharded over the replicas; B=%d, T=%d):",
                        weight_bytes == 4 ? "" : " and the float32 master weights", p.B, p.T));
    rows.push_back("  replicas     memory --zero 0     memory --zero 1    sync --zero 0    sync --zero 1");
    for (int R : Rs)
        rows.push_back(strf("  %8d  %18s  %18s  %15s  %15s%s", R, format_bytes(memory(R, 0)).c_str(),
                            format_bytes(memory(R, 1)).c_str(), format_bytes(gradient_sync_bytes(c, R, grad_bytes)).c_str(),
                            format_bytes(zero_sync_bytes(c, R, weight_bytes, grad_bytes)).c_str(),
                            R == p.R ? " <- R of this run" : ""));
    return rows;
}

// ---- The GPU trainer's step, kernel by kernel (host/kernel_cost.h has each kernel's count)
// A kernel's predicted time on a device is max(FLOPs / rate, bytes / bandwidth), at realistic
// fractions of the data sheet's figures (docs/planning.md, "The step kernel by kernel"):
//   * products (cuBLAS): 70% of the tensor-core peak, the middle of issue 33's audit for
//     cuBLAS at GPT-2 124M's shapes (65-82 ms for 48.6 TFLOP per micro-batch: 60-75%);
//   * the fused attention (mma.sync tensor-core kernels): 30%, docs/attention.md's 25-35%;
//   * memory-bound kernels: 85% of the memory bandwidth and 70% of the float32 vector peak
//     for their arithmetic: assumptions, which dev/cuda/step_kernels checks on a GPU.
// A GPU run of scripts/bench_gpu.sh prints the measured times beside these.
constexpr double PRODUCT_FRACTION = 0.70, ATTENTION_FRACTION = 0.30, BANDWIDTH_FRACTION = 0.85,
                 VECTOR_FRACTION = 0.70;
enum class KernelKind { product, attention, memory };
struct StepKernel {
    std::string layer, name;
    KernelKind kind;
    KernelCost cost;  // one launch
    double count;     // launches per micro-batch, or per step for the optimizer's (per_step)
    bool per_step = false;
};
struct StepOptions {
    int x = 2;                       // bytes of an activation element: 2 in bf16, 4 in float32
    bool fused_classifier = true;    // false: the three-pass reference (gpu/crossentropy.cuh)
    bool epilogues_fused = false;    // true: GELU backward and bias gradients done by cuBLASLt's epilogues
    bool recompute = false;          // --recompute 1: GELU forward run in the forward and again in the backward
    bool grad_sync_overlap = false;  // the gradient sync overlapped with the last micro-batch's backward
    int sync_grad_bytes = 4;         // a gradient on the wire: 4 (float32), 2 (--grad-sync-dtype bf16)
};

// The optimizer's kernels, once per step over the P parameters.
inline void add_optimizer_kernels(std::vector<StepKernel>& k, double P, int x) {
    for (auto [name, cost] : {std::pair<const char*, KernelCost>{"zero the gradients", zero_grads_cost(P)},
                              {"gradient norm", global_norm_cost(P)},
                              {"AdamW update", adamw_cost(P, x)}})
        k.push_back({"optimizer", name, KernelKind::memory, cost, 1, true});
}

// Llama-3's step (docs/llama.md's forward): the token embedding alone, RMSNorm, the qkv
// product QKV = C + 2·KVH·hs wide, RoPE on its q and k parts, the attention over NH query
// heads, fc of 2F (gate and up), SwiGLU, fcproj from F, the head (wte when tied, wout
// otherwise: the same product); no biases, so no bias gradients and no epilogues.
// o.recompute and o.epilogues_fused are GPT-2's (GELU's) and change nothing here.
inline std::vector<StepKernel> llama_step_kernels(const ModelConfig& c, int B, int T, const StepOptions& o) {
    const double N = (double)B * T, C = c.C, L = c.L, NH = c.NH, V = c.V, Vp = c.Vp, P = (double)c.num_params();
    const double QKV = c.qkv_channels(), FC = c.fc_channels(), F = c.hidden(), hs = c.hs();
    const double rotated = C + (double)c.kv_heads() * hs;  // q and k: (NH + KVH)·hs channels a row
    const int x = o.x;
    const std::string blocks = strf("blocks (x%d)", c.L);
    const KernelKind prod = KernelKind::product, mem = KernelKind::memory, att = KernelKind::attention;
    std::vector<StepKernel> k;
    auto add = [&](const std::string& layer, const std::string& name, KernelKind kind, KernelCost cost, double n) {
        k.push_back({layer, name, kind, cost, n});
    };
    auto linear_forward = [&](const std::string& layer, const std::string& name, double IC, double OC, double n) {
        add(layer, name + " forward", prod, matmul_forward_cost(N, IC, OC, x, false, false), n);
    };
    auto linear_backward = [&](const std::string& layer, const std::string& name, double IC, double OC, double n) {
        add(layer, name + " backward dinp", prod, matmul_backward_dinp_cost(N, IC, OC, x), n);
        add(layer, name + " backward dw", prod, matmul_backward_dw_cost(N, IC, OC, x), n);
    };
    add("embedding", "embedding forward", mem, embedding_forward_cost(N, C, x), 1);
    add("embedding", "rmsnorm forward (ln1 of block 0)", mem, rmsnorm_forward_cost(N, C, x), 1);
    linear_forward(blocks, "qkv", C, QKV, L);
    add(blocks, "rope forward (q, k)", mem, rope_cost(N, T, rotated, hs, x), L);
    add(blocks, "attention forward", att, attention_forward_cost(N, T, C, NH, x, QKV), L);
    linear_forward(blocks, "attproj", C, C, L);
    add(blocks, "residual + rmsnorm forward", mem, residual_rmsnorm_forward_cost(N, C, x), 2 * L);
    linear_forward(blocks, "fc (gate, up)", C, FC, L);
    add(blocks, "swiglu forward", mem, swiglu_forward_cost(N * F, x), L);
    linear_forward(blocks, "fcproj", F, C, L);
    linear_forward("head", c.tied_head() ? "logits (tied: wte)" : "logits (wout)", C, Vp, 1);
    add("loss", o.fused_classifier ? "cross-entropy, fused" : "cross-entropy, three-pass", mem,
        crossentropy_cost(N, V, Vp, x, o.fused_classifier), 1);
    linear_backward("head", "logits", C, Vp, 1);
    add("head", "rmsnorm backward (lnf)", mem, rmsnorm_backward_cost(N, C, x, false), 1);
    linear_backward(blocks, "fcproj", F, C, L);
    add(blocks, "swiglu backward", mem, swiglu_backward_cost(N * F, x), L);
    linear_backward(blocks, "fc (gate, up)", C, FC, L);
    add(blocks, "rmsnorm backward (ln1, ln2)", mem, rmsnorm_backward_cost(N, C, x, true), 2 * L);
    linear_backward(blocks, "attproj", C, C, L);
    add(blocks, "attention backward", att, attention_backward_cost(N, T, C, NH, x, QKV), L);
    add(blocks, "rope backward (q, k)", mem, rope_cost(N, T, rotated, hs, x), L);
    linear_backward(blocks, "qkv", C, QKV, L);
    add("embedding", "embedding backward", mem, embedding_backward_cost(N, C, x), 1);
    add_optimizer_kernels(k, P, x);
    return k;
}

// The kernels of one micro-batch (forward, loss, backward), then the optimizer's, in launch
// order within each layer group; the fused attention path. GPT-2's below, Llama's above.
inline std::vector<StepKernel> step_kernels(const ModelConfig& c, int B, int T, const StepOptions& o) {
    if (c.llama()) return llama_step_kernels(c, B, T, o);
    const double N = (double)B * T, C = c.C, L = c.L, NH = c.NH, V = c.V, Vp = c.Vp, P = (double)c.num_params();
    const int x = o.x;
    const std::string blocks = strf("blocks (x%d)", c.L);
    const KernelKind prod = KernelKind::product, mem = KernelKind::memory, att = KernelKind::attention;
    std::vector<StepKernel> k;
    auto add = [&](const std::string& layer, const std::string& name, KernelKind kind, KernelCost cost, double n) {
        k.push_back({layer, name, kind, cost, n});
    };
    // a linear layer's backward: the two products, and the bias gradient unless an epilogue does it
    auto linear_backward = [&](const std::string& layer, const std::string& name, double IC, double OC, double n,
                               bool bias) {
        add(layer, name + " backward dinp", prod, matmul_backward_dinp_cost(N, IC, OC, x), n);
        add(layer, name + " backward dw", prod, matmul_backward_dw_cost(N, IC, OC, x), n);
        if (bias && !o.epilogues_fused) add(layer, name + " bias gradient", mem, bias_grad_cost(N, OC, x), n);
    };
    add("embedding", "encoder forward", mem, encoder_forward_cost(N, C, x), 1);
    add("embedding", "layernorm forward (ln1 of block 0)", mem, layernorm_forward_cost(N, C, x), 1);
    add(blocks, "qkv forward", prod, matmul_forward_cost(N, C, 3 * C, x), L);
    add(blocks, "attention forward", att, attention_forward_cost(N, T, C, NH, x), L);
    add(blocks, "attproj forward", prod, matmul_forward_cost(N, C, C, x), L);
    add(blocks, "residual + layernorm forward", mem, residual_layernorm_forward_cost(N, C, x), 2 * L);
    add(blocks, o.recompute ? "fc forward" : "fc forward, GELU epilogue", prod,
        matmul_forward_cost(N, C, 4 * C, x, !o.recompute), L);
    if (o.recompute) add(blocks, "gelu forward (and again in backward)", mem, gelu_forward_cost(N * 4 * C, x), 2 * L);
    add(blocks, "fcproj forward", prod, matmul_forward_cost(N, 4 * C, C, x), L);
    add("head", "logits forward", prod, matmul_forward_cost(N, C, Vp, x), 1);
    add("loss", o.fused_classifier ? "cross-entropy, fused" : "cross-entropy, three-pass", mem,
        crossentropy_cost(N, V, Vp, x, o.fused_classifier), 1);
    linear_backward("head", "logits", C, Vp, 1, false);
    add("head", "layernorm backward (lnf)", mem, layernorm_backward_cost(N, C, x, false), 1);
    linear_backward(blocks, "fcproj", 4 * C, C, L, true);
    if (!o.epilogues_fused) add(blocks, "gelu backward", mem, gelu_backward_cost(N * 4 * C, x), L);
    linear_backward(blocks, "fc", C, 4 * C, L, true);
    add(blocks, "layernorm backward (ln1, ln2)", mem, layernorm_backward_cost(N, C, x, true), 2 * L);
    linear_backward(blocks, "attproj", C, C, L, true);
    add(blocks, "attention backward", att, attention_backward_cost(N, T, C, NH, x), L);
    linear_backward(blocks, "qkv", C, 3 * C, L, true);
    add("embedding", "encoder backward", mem, encoder_backward_cost(N, T, C, x), 1);
    add_optimizer_kernels(k, P, x);
    return k;
}

// One launch's predicted time on d (0 without the device's figures).
inline double kernel_seconds(const StepKernel& k, const DeviceSpeed& d) {
    if (d.tflops <= 0 || d.memory_gbs <= 0) return 0;
    double rate = k.kind == KernelKind::product     ? d.tflops * PRODUCT_FRACTION
                  : k.kind == KernelKind::attention ? d.tflops * ATTENTION_FRACTION
                                                    : d.vector_tflops * VECTOR_FRACTION;
    double compute = rate > 0 ? k.cost.flops / (rate * 1e12) : 0;
    return std::max(compute, k.cost.bytes / (d.memory_gbs * 1e9 * BANDWIDTH_FRACTION));
}
inline bool memory_bound(const StepKernel& k, const DeviceSpeed& d) {
    return k.cost.bytes / (d.memory_gbs * 1e9 * BANDWIDTH_FRACTION) >= kernel_seconds(k, d);
}

// The step's predicted time in parts: per micro-batch (products, attention, memory-bound
// kernels), the optimizer's kernels, and the gradient sync that is not hidden.
struct StepPrediction {
    double products = 0, attention = 0, memory = 0;  // per micro-batch
    double optimizer = 0, sync = 0;                  // per step
    int A = 1;
    double micro_batch() const { return products + attention + memory; }
    double without_attention() const { return products + memory; }
    double step() const { return A * micro_batch() + optimizer + sync; }
};
inline StepPrediction predict_step(const ModelConfig& c, const BatchPlan& p, const DeviceSpeed& d,
                                   const StepOptions& o) {
    StepPrediction s;
    s.A = p.A;
    double last_backward = 0;  // what an overlapped sync can hide behind: the last micro-batch's backward
    bool backward = false;
    for (const StepKernel& k : step_kernels(c, p.B, p.T, o)) {
        double t = kernel_seconds(k, d) * k.count;
        if (k.per_step) s.optimizer += t;
        else if (k.kind == KernelKind::product) s.products += t;
        else if (k.kind == KernelKind::attention) s.attention += t;
        else s.memory += t;
        backward = backward || k.layer == "loss";
        if (backward && !k.per_step && k.layer != "loss") last_backward += t;
    }
    double comm = d.link_gbps > 0 ? plan_run(c, p, 1, d, {o.sync_grad_bytes, 0}).comm_s : 0;
    s.sync = o.grad_sync_overlap ? std::max(0.0, comm - last_backward) : comm;
    return s;
}

// The dry run's table: the step kernel by kernel on d, one row per layer group and kernel
// (its launches per micro-batch, FLOPs and bytes of them all, what bounds it, its time),
// then the sums.
inline std::vector<std::string> kernel_table(const ModelConfig& c, const BatchPlan& p, const DeviceSpeed& d,
                                             const StepOptions& o) {
    std::vector<std::string> rows;
    if (d.tflops <= 0 || d.memory_gbs <= 0) return rows;
    rows.push_back(strf("the step kernel by kernel on %s, predicted (host/kernel_cost.h): each kernel max(FLOPs / "
                        "rate, bytes / bandwidth), products at %.0f%% of %g TFLOP/s, the fused attention at %.0f%%, "
                        "memory-bound kernels at %.0f%% of %g GB/s; per micro-batch of %dx%d (%s precision), "
                        "the optimizer's per step:",
                        d.name.c_str(), 100 * PRODUCT_FRACTION, d.tflops, 100 * ATTENTION_FRACTION,
                        100 * BANDWIDTH_FRACTION, d.memory_gbs, p.B, p.T, o.x == 2 ? "bf16" : "float32"));
    rows.push_back(strf("  %-12s %-38s %6s %11s %11s %7s %9s", "layer", "kernel", "count", "FLOP", "bytes", "bound",
                        "time"));
    for (const StepKernel& k : step_kernels(c, p.B, p.T, o))
        rows.push_back(strf("  %-12s %-38s %6g %11s %11s %7s %9s", k.layer.c_str(), k.name.c_str(), k.count,
                            format_flops(k.cost.flops * k.count).c_str(),
                            format_bytes(k.cost.bytes * k.count).c_str(), memory_bound(k, d) ? "memory" : "compute",
                            format_seconds(kernel_seconds(k, d) * k.count).c_str()));
    StepPrediction s = predict_step(c, p, d, o);
    rows.push_back(strf("  per micro-batch: products %s + attention %s + memory-bound %s = %s (without attention %s)",
                        format_seconds(s.products).c_str(), format_seconds(s.attention).c_str(),
                        format_seconds(s.memory).c_str(), format_seconds(s.micro_batch()).c_str(),
                        format_seconds(s.without_attention()).c_str()));
    double tokens = (double)p.B * p.T * p.A;  // per replica per step
    rows.push_back(strf("  per step: %d x %s + optimizer %s + gradient sync %s (%s) = %s, %s tokens/s per replica",
                        p.A, format_seconds(s.micro_batch()).c_str(), format_seconds(s.optimizer).c_str(),
                        format_seconds(s.sync).c_str(),
                        o.grad_sync_overlap ? "overlapped with the last backward" : "not overlapped",
                        format_seconds(s.step()).c_str(), with_commas((long long)(tokens / s.step())).c_str()));
    StepOptions other = o;
    other.fused_classifier = !o.fused_classifier;
    StepPrediction t = predict_step(c, p, d, other);
    rows.push_back(strf("  the %s classifier instead: %s per micro-batch without attention (%+.2f ms)",
                        other.fused_classifier ? "fused" : "three-pass (reference)",
                        format_seconds(t.without_attention()).c_str(),
                        1e3 * (t.without_attention() - s.without_attention())));
    // No ratio to llm.c: the fractions above are assumptions, and the same model applied to
    // llm.c's kernels does not reproduce its published step (docs/planning.md); a ratio is
    // printed only from a measurement of both (scripts/bench_gpu.sh, scripts/gpu_check.sh)
    rows.push_back("  an estimate from assumed fractions of the data sheet, not calibrated on a GPU; "
                   "scripts/gpu_check.sh measures the step, and llm.c's beside it");
    return rows;
}
