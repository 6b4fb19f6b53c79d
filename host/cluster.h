// A cluster layout on paper (--dry-run with --gpus, --tp, --pp): N GPUs in nodes of G, cut
// into tensor-parallel groups of T GPUs, P pipeline stages, and R = N / (T·P) data-parallel
// replicas, each replica T·P GPUs holding one copy of the model. The trainers execute data
// parallelism only (T = P = 1); the rest is a plan, printed from the formulas below
// (docs/cluster.md walks through them, docs/planning.md lists the links).
//
// The ranks are laid out the Megatron way: the T GPUs of a tensor-parallel group are
// neighbours (within a node when T <= G), then the R replicas, then the P stages. So a
// tensor-parallel all-reduce stays in a node when T <= G, the data-parallel ring (members T
// apart, spanning T·R GPUs) does when T·R <= G, and the pipeline's sends when N <= G.
//
// Per GPU, per optimizer step of A micro-batches of B×T tokens (T here the sequence length):
//   * memory: the trainer's own sizes of a replica (Trainer::memory_use, which already splits
//     AdamW's state over R under --zero 1) with parameters, gradients and optimizer state
//     split over the T·P GPUs; the activations of one micro-batch split over T (the tensor
//     split) and over P (L/P layers a stage), times the micro-batches a 1F1B first stage
//     holds in flight, min(A, P);
//   * tensor parallel (Megatron's split of attention and MLP): 2 all-reduces per layer in the
//     forward and 2 in the backward, each of B·T·C activations (bf16, 2 bytes), a ring over
//     the T GPUs: 4·(L/P)·A all-reduces of 2·(T−1)/T·B·T·C·2 bytes each;
//   * pipeline: per micro-batch, a stage sends its output activations forward and receives the
//     gradient back, each B·T·C·2 bytes, split over the T GPUs of the stage (each sends its
//     1/T slice): 2·A·B·T·C·2/T bytes;
//   * data parallel: the all-reduce of this GPU's 1/(T·P) of the gradients over the R
//     replicas (ring: 2·(R−1)/R of it), or under --zero 1 the reduce-scatter of the gradients
//     and the all-gather of the weights ((R−1)/R of each);
//   * the 1F1B bubble: a stage idles for P − 1 micro-batch slots of the A + P − 1 the step
//     takes, (P − 1)/(A + P − 1) of it; the step's compute is A micro-batches at peak divided by
//     1 − bubble, and the communication is added without overlap (an upper bound on the step).
#pragma once
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "batch.h"
#include "cli.h"
#include "cost.h"
#include "error.h"
#include "model.h"

struct ClusterLayout {
    int N = 1, G = 8, T = 1, P = 1, R = 1;
    long long nodes() const { return N <= G ? 1 : N / G; }
    bool planned() const { return T * P > 1 || N > R; }  // more than one GPU per replica
};

// The layout of the options, checked against the model's L layers; sets cfg.replicas when
// --gpus gave N (cli.h's validate_layout_options did the arithmetic alone). R = 0 (the
// processes started) is resolved by the caller.
inline ClusterLayout cluster_layout(const Config& cfg, int L, int R) {
    ClusterLayout l;
    l.G = cfg.gpus_per_node, l.T = cfg.tp, l.P = cfg.pp, l.R = R;
    l.N = cfg.gpus > 0 ? cfg.gpus : R * cfg.tp * cfg.pp;
    if (cfg.pp > L)
        throw UsageError(strf("--pp %d is more pipeline stages than the model's %d layers: a stage holds at least one "
                              "layer, so at most --pp %d",
                              cfg.pp, L, L));
    if (cfg.tp * cfg.pp > 1 && cfg.batch_size == 0)
        throw UsageError(strf("--batch-size auto chooses from one GPU's memory per replica, but --tp %d --pp %d spread "
                              "a replica over %d GPUs: give --batch-size (e.g. -b 1)",
                              cfg.tp, cfg.pp, cfg.tp * cfg.pp));
    return l;
}

// The fraction of a 1F1B step a stage idles: P − 1 slots of A + P − 1.
inline double pipeline_bubble(int A, int P) { return (P - 1.0) / (A + P - 1.0); }
// The smallest A that keeps the bubble at or under `fraction`: (P − 1)(1 − f)/f.
inline long long accumulation_for_bubble(int P, double fraction) {
    long long A = 1;
    while (pipeline_bubble((int)A, P) > fraction + 1e-12) A++;
    return A;
}

// The links a layout's traffic takes, in Gbit/s each way per GPU.
struct ClusterLinks {
    double intra = 0, inter = 0;
    std::string intra_name, inter_name;
};
inline ClusterLinks cluster_links(const Config& cfg, const DeviceSpeed& d) {
    ClusterLinks k;
    if (!cfg.intra_link.empty()) {
        const LinkPreset& l = link_preset(cfg.intra_link, true);
        k.intra = l.gbps, k.intra_name = l.name;
    } else if (d.link_gbps > 0 && cfg.link_gbps <= 0) {
        k.intra = d.link_gbps, k.intra_name = d.name + "'s";
    } else {
        k.intra = link_preset("nvlink4", true).gbps, k.intra_name = "nvlink4";
    }
    if (cfg.intra_link_gbps > 0) k.intra = cfg.intra_link_gbps, k.intra_name = "--intra-link-gbps";
    const LinkPreset& l = link_preset(cfg.inter_link.empty() ? "ndr" : cfg.inter_link, false);
    k.inter = l.gbps, k.inter_name = l.name;
    if (cfg.link_gbps > 0) k.inter = cfg.link_gbps, k.inter_name = "--link-gbps";
    return k;
}

// The plan's lines: the units table, then per GPU memory, communication, the bubble, the step
// and the warnings. `replica_memory` is Trainer::memory_use of one replica (all its GPUs).
inline std::vector<std::string> cluster_plan(const ClusterLayout& l, const ModelConfig& c, const BatchPlan& p,
                                             int steps, const DeviceSpeed& d,
                                             const ClusterLinks& links, const MemoryUse& replica_memory,
                                             const Config& cfg, SyncTypes sync) {
    std::vector<std::string> out;
    const int T = l.T, P = l.P, R = l.R, A = p.A, mp = T * P;
    const double params = (double)c.num_params(), x = 2;  // activations on the wire: bf16
    auto n = [](long long v) { return with_commas(v); };
    auto row = [&](const char* name, const std::string& value) { out.push_back(strf("  %-28s %s", name, value.c_str())); };
    out.push_back(strf("cluster layout (a plan: the trainers run data parallelism only; host/cluster.h, docs/cluster.md):"));
    row("GPUs", n(l.N));
    row("nodes", l.N < l.G ? strf("1 (%d of its %d GPUs)", l.N, l.G) : strf("%s (%d GPUs each)", n(l.nodes()).c_str(), l.G));
    row("tensor-parallel groups", strf("%s of %d GPUs (--tp %d)", n(l.N / T).c_str(), T, T));
    std::string layers = c.L % P == 0 ? strf("%d layers each", c.L / P)
                                      : strf("%d or %d layers each", c.L / P, c.L / P + 1);
    row("pipeline stages", strf("%d, %s of %d (--pp %d)", P, layers.c_str(), c.L, P));
    row("model-parallel group", strf("%d GPUs per replica (T·P = %d × %d): one copy of the model", mp, T, P));
    row("data-parallel replicas", strf("%s (R = N / (T·P) = %s / %d)", n(R).c_str(), n(l.N).c_str(), mp));
    row("micro-batch", strf("%d × %s = %s tokens", p.B, n(p.T).c_str(), n((long long)p.B * p.T).c_str()));
    row("accumulation steps", strf("%d (A = global batch / (B·T·R))", A));
    row("global batch", strf("%s tokens per optimizer step", n(p.global_tokens()).c_str()));
    row("optimizer steps", n(steps) + (cfg.train_tokens > 0 ? strf(" (--train-tokens %s / %s tokens a step, rounded down)",
                                                                   n(cfg.train_tokens).c_str(), n(p.global_tokens()).c_str())
                                                              : std::string(" (--steps)")));

    // memory per GPU
    double total = 0;
    std::string parts;
    const int in_flight = std::min(A, P);
    for (const auto& [name, bytes] : replica_memory.parts) {
        if (name.rfind("key/value cache", 0) == 0) continue;  // samples, not training
        bool act = name.rfind("activations", 0) == 0;
        double b = act ? bytes * in_flight / mp : bytes / mp;
        total += b;
        parts += (parts.empty() ? "" : ", ") + name + " " + format_bytes(b);
    }
    out.push_back(strf("per GPU, memory: %s; %s in all (the trainer's sizes of a replica: weights, gradients and "
                       "optimizer state / (T·P)%s; activations of %d in-flight micro-batch%s of a 1F1B first stage, "
                       "one micro-batch's / (T·P) × min(A, P))",
                       parts.c_str(), format_bytes(total).c_str(), cfg.zero && R > 1 ? ", AdamW's also / R (--zero 1)" : "",
                       in_flight, in_flight == 1 ? "" : "es"));
    if (cfg.device_memory > 0 && total > cfg.device_memory)
        out.push_back(strf("warning: %s per GPU is more than the %s of --device-memory", format_bytes(total).c_str(),
                           format_bytes(cfg.device_memory).c_str()));

    // communication per GPU per optimizer step
    const bool tp_intra = T <= l.G, dp_intra = (long long)T * R <= l.G, pp_intra = l.N <= l.G;
    auto link_of = [&](bool intra) { return intra ? links.intra : links.inter; };
    auto where = [&](bool intra) {
        return strf("%s link, %s (%g Gbit/s)", intra ? "intra-node" : "inter-node",
                    (intra ? links.intra_name : links.inter_name).c_str(), link_of(intra));
    };
    auto secs = [&](double bytes, bool intra) { return bytes * 8 / (link_of(intra) * 1e9); };
    const double act = (double)p.B * p.T * c.C * x;  // one micro-batch's B·T·C activations, bytes
    const double layers_here = (double)c.L / P;
    double tp_bytes = T > 1 ? 4 * layers_here * A * allreduce_bytes(act / x, T, (int)x) : 0;
    double pp_bytes = P > 1 ? 2.0 * A * act / T : 0;
    double shard = params / mp;
    double dp_bytes = R <= 1 ? 0
                      : sync.zero_weight_bytes ? (double)(R - 1) / R * shard * (sync.grad_bytes + sync.zero_weight_bytes)
                                               : allreduce_bytes(shard, R, sync.grad_bytes);
    double tp_s = secs(tp_bytes, tp_intra), pp_s = secs(pp_bytes, pp_intra), dp_s = secs(dp_bytes, dp_intra);
    out.push_back("per GPU, communication per optimizer step (each way; ring collectives):");
    if (T > 1)
        out.push_back(strf("  tensor parallel: 4 all-reduces a layer (2 forward, 2 backward) × %g layers × A = %d: %s "
                           "all-reduces of B·T·C = %s (bf16) over %d GPUs, %s in all, %s on the %s",
                           layers_here, A, n((long long)(4 * layers_here * A)).c_str(), format_bytes(act).c_str(), T,
                           format_bytes(tp_bytes).c_str(), format_seconds(tp_s).c_str(), where(tp_intra).c_str()));
    else out.push_back("  tensor parallel: none (--tp 1)");
    if (P > 1)
        out.push_back(strf("  pipeline: per micro-batch the activations forward and their gradient back, B·T·C / T = %s "
                           "each: 2 × A = %d sends, %s in all, %s on the %s",
                           format_bytes(act / T).c_str(), 2 * A, format_bytes(pp_bytes).c_str(),
                           format_seconds(pp_s).c_str(), where(pp_intra).c_str()));
    else out.push_back("  pipeline: none (--pp 1)");
    if (R > 1)
        out.push_back(strf("  data parallel: %s of this GPU's 1/(T·P) = %s parameters over R = %s replicas, %s, %s on "
                           "the %s",
                           sync.zero_weight_bytes ? "a reduce-scatter of the gradients and an all-gather of the weights"
                                                  : "an all-reduce of the gradients",
                           n((long long)shard).c_str(), n(R).c_str(), format_bytes(dp_bytes).c_str(),
                           format_seconds(dp_s).c_str(), where(dp_intra).c_str()));
    else out.push_back("  data parallel: none (one replica)");

    // the bubble, the step, the MFU
    const double bubble = pipeline_bubble(A, P);
    out.push_back(strf("pipeline bubble (1F1B): (P − 1)/(A + P − 1) = %d/%d = %.1f%% of the step idle", P - 1, A + P - 1,
                       100 * bubble));
    if (d.tflops > 0) {
        double flops_gpu = flops_per_step(c, p) / l.N;  // the model's FLOPs a GPU does per step
        double compute = flops_gpu / (d.tflops * 1e12), with_bubble = compute / (1 - bubble);
        double step = with_bubble + tp_s + pp_s + dp_s;
        out.push_back(strf("step per GPU on %s (%g TFLOP/s, at peak, communication not overlapped): compute %s, with "
                           "the bubble %s, + tensor %s + pipeline %s + data-parallel %s = %s; MFU %.1f%%; the run: %s, "
                           "%.3g GPU-hours",
                           d.name.c_str(), d.tflops, format_seconds(compute).c_str(), format_seconds(with_bubble).c_str(),
                           format_seconds(tp_s).c_str(), format_seconds(pp_s).c_str(), format_seconds(dp_s).c_str(),
                           format_seconds(step).c_str(), 100 * compute / step, format_seconds(step * steps).c_str(),
                           step * steps * l.N / 3600));
    } else {
        out.push_back("step time and MFU: give --device (" + device_preset_names() + ") or --device-tflops");
    }

    // what changes with R at this -d
    if (cfg.total_batch > 0) {
        std::string as;
        long long per_round = (long long)p.B * p.T;
        for (long long r : {(long long)R / 2, (long long)R, 2LL * R})
            if (r >= 1 && (r != R / 2 || R % 2 == 0) && p.global_tokens() % (per_round * r) == 0)
                as += strf("%sR = %s: A = %s", as.empty() ? "" : ", ", n(r).c_str(),
                           n(p.global_tokens() / (per_round * r)).c_str());
        out.push_back(strf("with -d fixed at %s tokens, adding replicas lowers A (A = d / (B·T·R); %s): the optimizer "
                           "step stays the same unit of data, %s tokens, whatever R",
                           n(p.global_tokens()).c_str(), as.c_str(), n(p.global_tokens()).c_str()));
    }

    // warnings
    if (T > l.G)
        out.push_back(strf("warning: a tensor-parallel group of %d GPUs is larger than a node of %d: its all-reduces "
                           "leave the intra-node link for the inter-node one",
                           T, l.G));
    if (c.L % P != 0)
        out.push_back(strf("warning: %d layers do not split evenly over %d stages: the stages with one layer more set "
                           "the pace",
                           c.L, P));
    if (P > 1 && bubble > 0.10)
        out.push_back(strf("warning: accumulation A = %d is too short to hide the pipeline bubble: %.1f%% of each step "
                           "idles; A >= %s (a global batch of %s tokens at this B and R) keeps it under 10%%",
                           A, 100 * bubble, n(accumulation_for_bubble(P, 0.10)).c_str(),
                           n(accumulation_for_bubble(P, 0.10) * p.B * p.T * (long long)R).c_str()));
    return out;
}

// --noise-from LOG (--dry-run): an earlier run's global batch and the noise scale it measured
// (the "config" and "train" records of its log.jsonl, host/log.h), beside the plan's batch.
// A different -d makes each optimizer step average a different amount of data, so the same
// learning rate is no longer the same step; scaling rules are rough guides, and B_noise (the
// batch beyond which more tokens per step buy little, docs/noise-scale.md) says which side
// of that knee the new batch is on.
struct LoggedBatch {
    long long global_batch = 0;  // tokens per optimizer step, the last "config" record's
    int noise_step = 0;          // the last step whose noise_scale is a number; 0 = none logged
    double noise_scale = 0;      // B_noise there, tokens
};

// The number after "KEY": in one JSON line of the log; false when absent or not a number.
inline bool logged_number(const std::string& line, const char* key, double& value) {
    const std::string quoted = std::string("\"") + key + "\":";
    size_t at = line.find(quoted);
    if (at == std::string::npos) return false;
    const char* start = line.c_str() + at + quoted.size();
    char* end = nullptr;
    value = strtod(start, &end);
    return end != start && std::isfinite(value);
}

inline LoggedBatch read_logged_batch(const std::string& file) {
    std::ifstream in(file);
    if (!in) throw Error(strf("--noise-from '%s': cannot open it (%s)", file.c_str(), strerror(errno)));
    LoggedBatch b;
    for (std::string line; std::getline(in, line);) {
        double v, step;
        if (line.find("\"type\":\"config\"") != std::string::npos && logged_number(line, "global_batch", v) && v >= 1)
            b.global_batch = (long long)v;
        if (line.find("\"type\":\"train\"") != std::string::npos && logged_number(line, "noise_scale", v) && v > 0 &&
            logged_number(line, "step", step))
            b.noise_scale = v, b.noise_step = (int)step;
    }
    if (b.global_batch == 0)
        throw Error(strf("--noise-from '%s' has no \"config\" record with a global_batch: is it a trainer's log.jsonl?",
                         file.c_str()));
    return b;
}

inline std::vector<std::string> batch_change_lines(const LoggedBatch& was, long long global, const std::string& file) {
    auto n = [](long long v) { return with_commas(v); };
    std::vector<std::string> out;
    if (global == was.global_batch)
        out.push_back(strf("batch: %s tokens per step, as in '%s': each step averages the same amount of data",
                           n(global).c_str(), file.c_str()));
    else
        out.push_back(strf("batch: %s tokens per step against %s in '%s' (x%.3g): each optimizer step now averages a "
                           "different amount of data, so the same learning rate is not the same step; scaling rules "
                           "(the rate in proportion to the batch, or to its square root) are rough guides: check the "
                           "new rate against the validation loss",
                           n(global).c_str(), n(was.global_batch).c_str(), file.c_str(),
                           (double)global / was.global_batch));
    if (was.noise_step == 0)
        out.push_back(strf("noise scale: none logged in '%s' (it is measured with A >= 2 or R >= 2 and --noise-ema > 0)",
                           file.c_str()));
    else
        out.push_back(strf("noise scale: B_noise ~ %s tokens at step %d of '%s'; this batch is %.3g x B_noise (well "
                           "below it a larger batch saves steps almost in proportion; well above it the extra tokens "
                           "buy little)",
                           n(std::llround(was.noise_scale)).c_str(), was.noise_step, file.c_str(),
                           global / was.noise_scale));
    return out;
}
