// train_gpt.cu: GPT-2 training on NVIDIA GPUs, one process per GPU.
//
// The same model, optimizer step, options, log lines and checkpoint files as train.cpp,
// the CPU reference that every kernel here is tested against (test/gpu_trainer/trainer.cu). Read
// train.cpp first: this file follows its order, its names and its contracts:
//   * parameter gradients ADD (+=), activation gradients are OVERWRITTEN (=);
//   * the loss is scaled by 1/(B·T·A·R) before backward, so the gradients summed over A
//     micro-batches and R replicas are the mean over the global batch.
//
// Precision is chosen at build time (make train_gpt PRECISION=bf16, the default, or fp32):
//   * fp32: everything in float32, the tier checked against train.cpp to 1e-5; the matrix
//     products in full float32 unless --tf32 1 lets cuBLAS use TF32 tensor cores;
//   * bf16: the weights as the kernels read them, the activations and their gradients in
//     bf16 (floatX, gpu/common.cuh); the products on tensor cores with float32 sums; the
//     master weights, AdamW's moments and the accumulated parameter gradients in float32,
//     and every statistic, softmax and loss computed in float32. Checkpoints are float32
//     either way, and interchangeable with train's.
//
// Deterministic: no kernel uses floating-point atomics, and every reduction adds its terms
// in a fixed order, so two runs with the same inputs give the same bits (cuBLAS guarantees
// the same for its products on one GPU model).
//
// The kernels live in gpu/, a header per layer, each forward with its backward below it;
// this file holds the model's buffers and the trainer that host/run.h drives, whose
// train_step() reads top to bottom like train.cpp's.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "gpu/adamw.cuh"
#include "gpu/attention.cuh"
#include "gpu/attention_choice.cuh"
#include "gpu/common.cuh"
#include "gpu/crossentropy.cuh"
#include "gpu/encoder.cuh"
#include "gpu/fit.cuh"
#include "gpu/flash_attention.cuh"
#include "gpu/layernorm.cuh"
#include "gpu/matmul.cuh"
#include "gpu/replicas.cuh"
#include "gpu/residual.cuh"
#include "host/gradsync.h"
#include "host/run.h"

namespace gpu {

// ----------------------------------------------------------------------------
// The model's buffers: parameters, gradients, AdamW's m and v, activations, activation
// gradients and scratch, each ONE device allocation, carved into named tensors:
// ParamViews (host/checkpoint.h) and the structs below. Sized for the largest (B, T); a
// smaller batch uses the front of each tensor with strides from its own B and T.

// Activations kept from forward for backward. Unlike train.cpp's: no attention
// probabilities (the backward recomputes them from per-row statistics), no
// probabilities after the classifier (the fused cross-entropy overwrites the logits with
// their gradient), and the two projections that feed the residual stream are not kept.
struct Activations {
    floatX *encoded;                   // (B, T, C)
    floatX *ln1;                       // (L, B, T, C)
    float *ln1_mean, *ln1_rstd;        // (L, B, T)
    floatX *qkv;                       // (L, B, T, 3C)
    float *att_stats;                  // (L, S, B, NH, T) per attention row: S = 2, softmax maximum then sum
                                       // (cuBLAS path), or S = 1, log-sum-exp (fused path)
    floatX *atty;                      // (L, B, T, C)
    floatX *residual2;                 // (L, B, T, C)
    floatX *ln2;                       // (L, B, T, C)
    float *ln2_mean, *ln2_rstd;        // (L, B, T)
    floatX *fch;                       // (L, B, T, 4C) GELU's input
    floatX *fch_gelu;                  // (L, B, T, 4C); with --recompute 1 (B, T, 4C), redone in backward
    floatX *residual3;                 // (L, B, T, C)
    floatX *lnf;                       // (B, T, C)
    float *lnf_mean, *lnf_rstd;        // (B, T)
    floatX *logits;                    // (B, T, Vp), overwritten by their gradient in backward
    float *losses;                     // (B, T)
};
// Gradients of activations: one block's worth, reused layer after layer (as train.cpp).
struct ActivationGrads {
    floatX *dresidual;  // (B, T, C)
    floatX *dln;        // (B, T, C)
    floatX *datty;      // (B, T, C)
    floatX *dqkv;       // (B, T, 3C)
    floatX *dfch;       // (B, T, 4C) of GELU's input (fcproj's backward applies gelu')
};
// Working memory of single layers.
struct Scratch {
    AttentionScratch att;  // cuBLAS path, gpu/attention.cuh: (3,B,NH,T,hs) ×2, (B,NH,T,hs), (B,NH,T,T) ×2
    float *att_delta;      // fused path, gpu/flash_attention.cuh: (B, NH, T) each row's dy·y
    floatX *proj;          // (B, T, C)  an output projection, before it joins the residual stream
    float *partials;       // (row_chunks(B·T), 4C) column sums per chunk of rows
};

// A layout: tensors one after another in one allocation, each on a 256-byte boundary.
struct Field {
    void** ptr;
    size_t bytes;
};
using Layout = std::vector<Field>;
template <class T>
Field tensor(T*& p, size_t count) {
    return {(void**)&p, count * sizeof(T)};
}
inline size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }
inline size_t layout_bytes(const Layout& fields) {
    size_t total = 0;
    for (const Field& f : fields) total += aligned(f.bytes);
    return total;
}
// Lays out `fields` one after another in one new allocation.
inline void carve(DeviceBuffer<char>& buffer, const Layout& fields, const char* what) {
    buffer.alloc(layout_bytes(fields), what);
    char* p = buffer.ptr;
    for (const Field& f : fields) *f.ptr = p, p += aligned(f.bytes);
}

// Statistics kept per attention row: the cuBLAS path's maximum and sum, or the fused
// path's log-sum-exp.
inline size_t att_stats_per_row(bool fused) { return fused ? 1 : 2; }

inline Layout activation_layout(Activations& a, const ModelConfig& c, int B, int T, bool recompute, bool fused) {
    size_t BT = (size_t)B * T, L = c.L, C = c.C, NH = c.NH, Vp = c.Vp;
    return {tensor(a.encoded, BT * C),
            tensor(a.ln1, L * BT * C), tensor(a.ln1_mean, L * BT), tensor(a.ln1_rstd, L * BT),
            tensor(a.qkv, L * BT * 3 * C), tensor(a.att_stats, L * att_stats_per_row(fused) * B * NH * T),
            tensor(a.atty, L * BT * C), tensor(a.residual2, L * BT * C),
            tensor(a.ln2, L * BT * C), tensor(a.ln2_mean, L * BT), tensor(a.ln2_rstd, L * BT),
            tensor(a.fch, L * BT * 4 * C), tensor(a.fch_gelu, (recompute ? 1 : L) * BT * 4 * C),
            tensor(a.residual3, L * BT * C),
            tensor(a.lnf, BT * C), tensor(a.lnf_mean, BT), tensor(a.lnf_rstd, BT),
            tensor(a.logits, BT * Vp), tensor(a.losses, BT)};
}
inline Layout activation_grad_layout(ActivationGrads& d, const ModelConfig& c, int B, int T) {
    size_t BT = (size_t)B * T, C = c.C;
    return {tensor(d.dresidual, BT * C), tensor(d.dln, BT * C), tensor(d.datty, BT * C),
            tensor(d.dqkv, BT * 3 * C), tensor(d.dfch, BT * 4 * C)};
}
// The attention scratch is the chosen path's only: the fused path has no (B,NH,T,T).
inline Layout scratch_layout(Scratch& s, const ModelConfig& c, int B, int T, bool fused) {
    size_t BT = (size_t)B * T, C = c.C, att = (size_t)B * c.NH * T * T;
    s.att = {}, s.att_delta = nullptr;
    Layout attention = fused ? Layout{tensor(s.att_delta, (size_t)B * c.NH * T)}
                             : Layout{tensor(s.att.qkvr, 3 * BT * C), tensor(s.att.dqkvr, 3 * BT * C),
                                      tensor(s.att.yr, BT * C), tensor(s.att.att, att), tensor(s.att.datt, att)};
    attention.insert(attention.end(),
                     {tensor(s.proj, BT * C), tensor(s.partials, (size_t)row_chunks((int)BT) * 4 * C)});
    return attention;
}
// Bytes of activations, their gradients and scratch for a micro-batch of B×T: exactly
// what the trainer allocates for them.
inline size_t activation_bytes(const ModelConfig& c, int B, int T, bool recompute, bool fused) {
    Activations a;
    ActivationGrads d;
    Scratch s;
    return layout_bytes(activation_layout(a, c, B, T, recompute, fused)) +
           layout_bytes(activation_grad_layout(d, c, B, T)) + layout_bytes(scratch_layout(s, c, B, T, fused));
}

// The tokens of a micro-batch as the device reads them: [inputs BT] [targets BT] [group
// start BT+1] [group token BT] [group position BT] (gpu/encoder.cuh's TokenGroups).
inline size_t token_ints(int B, int T) { return 5 * (size_t)B * T + 1; }

}  // namespace gpu

// ----------------------------------------------------------------------------
// The GPU trainer, as host/run.h's training loop sees it.

struct GpuTrainer {
    ModelConfig cfg;
    int maxB, maxT;  // activation capacity
    int slots;       // micro-batches whose tokens can be in flight at once: one step's A
    bool recompute;  // --recompute 1
    bool fused_attention;  // --attention: gpu/flash_attention.cuh, else gpu/attention.cuh (cuBLAS)
    gpu::Epilogues epilogues;  // --epilogues: the backward's GELU and bias gradients (gpu/matmul.cuh)
    int ln_cols;           // LayerNorm backward's columns per block: C, or chunks that fit the device (gpu/fit.cuh)
    bool measure_noise;  // the first micro-batch's gradient norm, for the noise scale (host/noise.h)
    int rank;
    const Comm* replicas;  // with --zero 1, download() gathers the shards from the replicas
    // --zero 1: the parameters this replica updates; the buffers of every parameter are padded to
    // shard.padded, those of the shard hold shard.size (without ZeRO, both are num_params)
    Shard shard;
    GradSync grad_sync;  // --grad-sync: the communication helper the step hands the last backward
    // host copies of every parameter: where run.h initialises, loads and saves
    std::vector<float> host_params, host_m, host_v;
    // device buffers, each one allocation
    gpu::DeviceBuffer<float> params_buf, grads_buf, m_buf, v_buf;  // float32: master weights, gradients, AdamW
    // (params_buf: the shard's master weights in bf16; in fp32 the weights the kernels read, all of them)
    gpu::DeviceBuffer<floatX> weights_buf;  // the weights as the kernels read them (bf16); fp32 reads params_buf
    gpu::DeviceBuffer<char> acts_buf, dacts_buf, scratch_buf;
    gpu::DeviceBuffer<int> tokens_buf;      // the current micro-batch's tokens (gpu::token_ints)
    gpu::DeviceBuffer<double> sums_buf;     // [0] loss sum, [1] ‖g‖², [2] |G_small|² (noise.h), [3..] partials
    static constexpr size_t SUMS = 3 + gpu::MAX_NORM_BLOCKS;  // sums_buf's doubles
    int* pinned_tokens = nullptr;           // host: `slots` micro-batches, copied to the device asynchronously
    floatX* weights;                        // weights_buf, or params_buf in fp32
    ParamViews<floatX> p;                   // views into the weights as the kernels read them
    ParamTensors g;                         // views into the float32 gradients
    gpu::Activations a;
    gpu::ActivationGrads d;
    gpu::Scratch s;
    gpu::TokenGrouper grouper;
    std::vector<int> inputs, targets;  // the current micro-batch, on the host
    int* d_inputs;
    int* d_targets;
    gpu::TokenGroups groups;
    std::vector<float> logits_row;  // next_token_logits' answer
    std::vector<float> losses_host; // token_losses' answer
    size_t peak_bytes = 0;          // most GPU memory in use after a step (device-wide)
    int steps_done = 0;

    static bool weights_copy() { return !std::is_same<floatX, float>::value; }
    bool sharded() const { return shard.size != shard.padded; }
    // float32 master weights held: the shard's in bf16; in fp32 every one, as the kernels read them
    static size_t master_count(const Shard& sh) { return weights_copy() ? sh.size : sh.padded; }
    static Shard shard_of(const ModelConfig& mc, int rank, int R, const Config& config) {
        return Shard::of(mc.num_params(), rank, R, config.zero && R > 1);
    }

    GpuTrainer(const ModelConfig& mc, const BatchPlan& plan, const Config& config, const Comm& comm)
        : cfg(mc), maxB(plan.B), maxT(plan.T), slots(plan.A), recompute(config.recompute),
          fused_attention(uses_fused_attention(config, mc)),
          epilogues(config.epilogues == "separate" ? gpu::Epilogues::separate : gpu::Epilogues::fused),
          ln_cols(layernorm_columns(mc)),
          measure_noise(noise_scale_measured(config.noise_ema, plan)), rank(comm.rank), replicas(&comm),
          shard(shard_of(mc, comm.rank, comm.world, config)),
          grad_sync(mc, config.grad_sync == "overlap", config.grad_sync_dtype == "bf16", config.grad_bucket, shard) {
        if (fused_attention && !gpu::flash_attention_supports(mc.C / mc.NH))
            throw Error(strf("--attention fused does not support the head size %d (C/NH)", mc.C / mc.NH));
        if (mc.C % gpu::pack_size<floatX>() != 0)
            throw Error(strf("train_gpt needs the channel count to be a multiple of %d (its kernels move 16 bytes at "
                             "a time); the model has C=%d",
                             gpu::pack_size<floatX>(), mc.C));
        gpu::set_tf32(config.tf32);
        size_t n = mc.num_params(), BT = (size_t)maxB * maxT;
        host_params.assign(n, 0.0f), host_m.assign(n, 0.0f), host_v.assign(n, 0.0f);
        params_buf.alloc(master_count(shard), "the parameters"), grads_buf.alloc(shard.padded, "the gradients");
        m_buf.alloc(shard.size, "AdamW's first moments"), v_buf.alloc(shard.size, "AdamW's second moments");
        if (weights_copy()) weights_buf.alloc(shard.padded, "the bf16 copy of the weights");
        weights = weights_copy() ? weights_buf.ptr : (floatX*)params_buf.ptr;
        p = param_views(weights, mc);
        g = param_views(grads_buf.ptr, mc);
        gpu::carve(acts_buf, gpu::activation_layout(a, mc, maxB, maxT, recompute, fused_attention), "the activations");
        gpu::carve(dacts_buf, gpu::activation_grad_layout(d, mc, maxB, maxT), "the activation gradients");
        gpu::carve(scratch_buf, gpu::scratch_layout(s, mc, maxB, maxT, fused_attention), "the layers' scratch");
        size_t ints = gpu::token_ints(maxB, maxT);
        tokens_buf.alloc(ints, "the tokens");
        CUDA_CHECK(cudaMallocHost((void**)&pinned_tokens, (size_t)slots * ints * sizeof(int)));
        inputs.assign(BT, 0), targets.assign(BT, 0);
        int* t = tokens_buf.ptr;
        d_inputs = t, d_targets = t + BT;
        groups = {t + 2 * BT, t + 3 * BT + 1, t + 4 * BT + 1, 0};
        sums_buf.alloc(SUMS, "the loss and norm sums");
    }
    ~GpuTrainer() {
        if (pinned_tokens) cudaFreeHost(pinned_tokens);
        if (rank == 0 && steps_done > 0 && std::uncaught_exceptions() == 0) {
            size_t free_bytes = 0, total = 0;
            cudaMemGetInfo(&free_bytes, &total);
            printf("peak GPU memory: %.0f MiB of %.0f MiB (in use on the whole device after a step, cudaMemGetInfo)\n",
                   peak_bytes / 1048576.0, total / 1048576.0);
        }
    }
    // What the constructor allocates on the GPU for a model and micro-batch, to the byte:
    // printed at the start, and compared with the GPU's free memory before allocating.
    static constexpr int GATHERED_WEIGHT_BYTES = sizeof(floatX);  // --zero 1's all-gather: the weights the kernels read
    // R: the replicas, over which --zero 1 shards the master weights (bf16) and AdamW's state.
    static MemoryUse memory_use(const ModelConfig& mc, int B, int T, int R, const Config& config) {
        Shard sh = shard_of(mc, 0, R, config);
        const bool sharded = sh.size != sh.padded;
        const std::string of_shard = sharded ? strf(" (1/%d shard)", R) : "";
        double n = (double)sh.padded, p = n * sizeof(float);
        MemoryUse use{{{weights_copy() ? "parameters" + of_shard : "parameters",
                        (double)master_count(sh) * sizeof(float)}}};
        if (weights_copy()) use.parts.push_back({"their bf16 copy", n * sizeof(floatX)});
        use.parts.insert(use.parts.end(),
                         {{"gradients", p}, {"AdamW state" + of_shard, 2.0 * sh.size * sizeof(float)},
                          {"activations", (double)gpu::activation_bytes(mc, B, T, config.recompute,
                                                                        uses_fused_attention(config, mc))},
                          {"tokens and sums", (double)(gpu::token_ints(B, T) * sizeof(int) +
                                                       SUMS * sizeof(double))}});
        if (config.grad_sync_dtype == "bf16" && R > 1) {  // NCCL's side of the sync: the largest bucket in bf16
            size_t largest = 0;
            for (const GradBucket& b : gradient_buckets(mc, config.grad_bucket)) largest = std::max(largest, b.floats);
            use.parts.push_back({"bf16 gradient sync buffer", (double)largest * sizeof(__nv_bfloat16)});
        }
        return use;
    }
    // --attention: "fused" or "cublas" as given, recorded or resolved by choose_kernels; "auto"
    // (before the choice, in a dry run, in a trainer built directly) is the fused path when it
    // supports the head size: the smaller of the two, which memory is planned with.
    static bool uses_fused_attention(const Config& config, const ModelConfig& mc) {
        return config.attention == "fused" ||
               (config.attention == "auto" && gpu::flash_attention_supports(mc.C / mc.NH));
    }
    // The options that choose kernels or the sums' type, and so the rounding of what a step
    // computes: written into every state file; a resumed run keeps what `auto` resolved to, and
    // says so when an option given anew changes the arithmetic (host/run.h,
    // adopt_recorded_choices). --epilogues changes the bits (gpu/matmul.cuh, matmul_backward);
    // so does --grad-sync-dtype bf16 (rounded sums), not fp32.
    static std::vector<std::string> run_time_choices() { return {"attention", "epilogues", "grad-sync-dtype"}; }
    // Resolves --attention auto once memory is planned, with rank 0's choice on every replica.
    // The candidates are the paths whose memory fits at the planned micro-batch (the plan was
    // made with the smaller, fused one); of two, rank 0 times one layer of each at the planned
    // B×T and keeps the faster. Nothing is timed in a dry run, nor on the CPU runtime, which
    // takes the fused path so that CI runs it, unless CPU_CUDA_ATTENTION_PICK=fused|cublas asks
    // it to time both as a GPU does and to let the named path win (the tests' way to make auto
    // choose differently from one process to the next, as timing can on a GPU).
    static void choose_kernels(Config& config, const ModelConfig& mc, const BatchPlan& plan, double available,
                               const Comm& comm) {
        const int hs = mc.C / mc.NH;
        const bool supported = gpu::flash_attention_supports(hs);
        if (config.attention == "fused" && !supported)
            throw Error(strf("--attention fused needs a head size C/NH that is a multiple of 16 from 16 to %d; the "
                             "model has C=%d, NH=%d: head size %d (--attention cublas or auto runs it)",
                             gpu::FLASH_MAX_HS, mc.C, mc.NH, hs));
        std::string unfit;  // why the fused path does not fit the device
        const bool fits = fit_device(config, mc, plan, comm, &unfit);
        if (config.attention != "auto") return;
        auto need = [&](const char* path) {
            Config c = config;
            c.attention = path;
            return memory_use(mc, plan.B, plan.T, plan.R, c).total();
        };
        const std::string pick = cpu_runtime_pick();
        const bool times = !config.dry_run && (on_cpu_runtime() ? !pick.empty() : gpu::ctx.device >= 0);
        std::string choice = "fused", line;
        if (!supported) {
            choice = "cublas";
            line = strf("attention: cublas (the fused path supports head sizes that are multiples of 16 up to %d, the "
                        "model's is %d)",
                        gpu::FLASH_MAX_HS, hs);
        } else if (!fits) {
            choice = "cublas";
            if (available > 0 && need("cublas") > available)
                throw Error(strf("attention: the fused path does not fit (%s) and the cublas path needs %s at B=%d, "
                                 "more than the %s available: lower -b",
                                 unfit.c_str(), format_bytes(need("cublas")).c_str(), plan.B,
                                 format_bytes(available).c_str()));
            line = "attention: cublas (the fused path does not fit this GPU)";
        } else if (available > 0 && need("cublas") > available) {
            if (times)
                line = strf("attention: fused (the cublas path would need %s at B=%d, more than the %s available)",
                            format_bytes(need("cublas")).c_str(), plan.B, format_bytes(available).c_str());
        } else if (times && comm.rank == 0) {
            double fused = gpu::time_attention_layer(true, plan.B, plan.T, mc.C, mc.NH);
            double cublas = gpu::time_attention_layer(false, plan.B, plan.T, mc.C, mc.NH);
            choice = cublas > 0 && cublas < fused ? "cublas" : "fused";
            line = strf("attention: fused %.2f ms, cublas %s per layer (forward and backward, B=%d T=%d): %s", fused,
                        cublas > 0 ? strf("%.2f ms", cublas).c_str() : "does not fit", plan.B, plan.T,
                        choice.c_str());
            if (!pick.empty() && (pick == "fused" || cublas > 0)) {
                choice = pick;
                line += strf("; CPU_CUDA_ATTENTION_PICK=%s keeps %s", pick.c_str(), pick.c_str());
            }
        } else if (config.dry_run && !on_cpu_runtime() && gpu::ctx.device >= 0) {
            choice = "auto";  // memory_use counts the fused path, the smaller
            line = "attention: auto, timed when the run starts (a dry run launches nothing; the plan counts the fused "
                   "path, the smaller)";
        }
        config.attention = comm.allgather(choice)[0];  // every replica takes rank 0's
        if (comm.rank == 0 && !line.empty()) printf("%s\n", line.c_str());
    }
    // The device the kernels are fitted to: in a dry run the GPU --device names (when it is one
    // of host/device_limits.h's), else the GPU in use; unknown in a dry run without either.
    static DeviceLimits device_to_fit(const Config& config) {
        DeviceLimits named = device_limits_named(config.device);
        if (config.dry_run && named.known()) return named;
        return gpu::ctx.device >= 0 ? gpu::device_limits(gpu::ctx.device) : DeviceLimits{};
    }
    // LayerNorm backward's columns per block on the GPU in use (whole rows without one). The
    // chunks give the same bits as whole rows, so this choice, derived from the device at each
    // start, does not change what a resumed run computes (gpu/layernorm.cuh).
    static int layernorm_columns(const ModelConfig& mc) {
        if (gpu::ctx.device < 0) return mc.C;
        return gpu::layernorm_backward_columns(mc.C, gpu::device_limits(gpu::ctx.device).smem_optin);
    }
    // Every kernel against the device's limits, before anything is allocated: stops the run
    // with one line when one cannot fit (--attention fused included), else prints the variants
    // (rank 0); false, with the reason in *unfit, when the fused attention does not fit (the
    // cuBLAS path then runs).
    static bool fit_device(const Config& config, const ModelConfig& mc, const BatchPlan& plan, const Comm& comm,
                           std::string* unfit) {
        const DeviceLimits d = device_to_fit(config);
        if (!d.known()) return true;
        const std::string precision = gpu::precision_refusal(d);
        if (!precision.empty()) throw Error(precision);
        gpu::KernelFit fit = gpu::fit_kernels(mc, plan.B, plan.T, d);
        if (fit.refusal.empty() && gpu::ctx.device >= 0 && d.name == gpu::device_limits(gpu::ctx.device).name)
            fit.refusal = gpu::registers_refusal(d);  // this build's registers, on the GPU in use
        if (!fit.refusal.empty()) throw Error(fit.refusal);
        *unfit = fit.fused_refusal;
        if (config.attention == "fused" && !unfit->empty())
            throw Error("--attention fused: " + *unfit + " (--attention cublas or auto runs the cuBLAS path)");
        if (comm.rank == 0)
            for (const std::string& line : gpu::describe_fit(fit, mc, d, config.attention)) printf("%s\n", line.c_str());
        return unfit->empty();
    }
    static std::string cpu_runtime_pick() {
#ifdef CPU_CUDA
        return cpu_cuda::settings().attention_pick;
#else
        return "";
#endif
    }
    static bool on_cpu_runtime() {
#ifdef CPU_CUDA
        return true;
#else
        return false;
#endif
    }
    static double memory_available(const Config& config) {
        if (config.device_memory > 0) return config.device_memory;
        if (gpu::ctx.device < 0) return 0;  // a dry run without a GPU: unknown
        size_t free_bytes = 0, total = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
        return (double)free_bytes;
    }

    static Comm connect(int* argc, char*** argv) {
        if (gpu::wants_help(*argc, *argv)) {  // --help needs no GPU
            Comm c;
            c.host = host_name();
            return c;
        }
        Comm comm = Comm::init(argc, argv);  // MPI when launched by mpirun and built with it
        try {
            std::string init_file = gpu::scan_option(*argc, *argv, "nccl-init-file");
            bool via_file = false;
            if (comm.world == 1) {
                gpu::adopt_launcher_ranks(comm, init_file);
                via_file = comm.world > 1;
            }
            int count = 0;
            cudaError_t e = cudaGetDeviceCount(&count);
            if (e != cudaSuccess || count == 0) {
                if (comm.world == 1 && gpu::scan_option(*argc, *argv, "dry-run") == "1") return comm;
                throw Error(strf("no usable GPU: %s", e != cudaSuccess ? cudaGetErrorString(e) : "none found"));
            }
            gpu::init_device(comm.local_rank % count);
            if (comm.world > 1) {
                const double comm_timeout = gpu::scan_comm_timeout(*argc, *argv);
                ncclUniqueId id;
                if (via_file) {
                    id = gpu::nccl_id_rendezvous(init_file, comm.rank, comm.world, comm_timeout);
                } else {
                    if (comm.rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
                    comm.broadcast(&id, sizeof id);
                }
                auto nccl = std::make_shared<gpu::NcclComm>(id, comm.world, comm.rank, comm_timeout,
                                                             comm.roll_call.get());
                comm.buffers = std::make_shared<gpu::NcclCollectives>(nccl, comm.rank, comm.world, false,
                                                                      comm.roll_call.get());
                if (via_file) {
                    comm.backend = std::make_shared<gpu::NcclCollectives>(nccl, comm.rank, comm.world, true,
                                                                          comm.roll_call.get());
                    if (comm.rank == 0) remove(init_file.c_str());  // every rank has read it by now
                }
                gpu::check_device_map(comm);
            }
        } catch (const Error& e) {
            // with a backend, end every replica here: the others would wait for this one
            if (comm.world > 1 && comm.backend) {
                fprintf(stderr, "%s: error (rank %d): %s\n", program_name((*argv)[0]), comm.rank, e.what());
                comm.abort_all(1);
            }
            throw;
        }
        return comm;
    }

    // TF32 changes float32 products only: the bf16 build has none for it to change.
    static void check_options(const Config& config) {
        if (weights_copy() && config.tf32)
            throw UsageError(strf("--tf32 1 has no effect in the %s build of train_gpt (TF32 applies to float32 "
                                  "products, this build's are %s): drop it, or use the fp32 build",
                                  PRECISION_NAME, PRECISION_NAME));
    }
    // The dry run's table: this step kernel by kernel, predicted for the device (host/cost.h).
    // The fused classifier, the backward's epilogues per --epilogues, the sync per --grad-sync.
    static std::vector<std::string> kernel_plan(const ModelConfig& mc, const BatchPlan& plan, const Config& config,
                                                const DeviceSpeed& device) {
        StepOptions o;
        o.x = sizeof(floatX), o.recompute = config.recompute, o.epilogues_fused = config.epilogues == "fused";
        o.grad_sync_overlap = sync_overlaps(config.grad_sync == "overlap", plan.R, plan.A,
                                            noise_scale_measured(config.noise_ema, plan));
        o.sync_grad_bytes = config.grad_sync_dtype == "bf16" ? 2 : 4;
        std::vector<std::string> rows = kernel_table(mc, plan, device, o);
        if (!rows.empty() && config.attention == "cublas")
            rows.push_back("  (the table counts the fused attention path; --attention cublas runs another)");
        return rows;
    }
    static std::string hardware(const Config& config, const Comm& comm) {
        check_thread_count(config.threads);
        if (gpu::ctx.device < 0) return strf("GPU: none found (dry run only); %s build", PRECISION_NAME);
        cudaDeviceProp prop;
        CUDA_CHECK(cudaGetDeviceProperties(&prop, gpu::ctx.device));
        std::string s = strf("GPU %d: %s (sm_%d%d, %d SMs, %.1f GiB), %s", gpu::ctx.device, prop.name, prop.major,
                             prop.minor, prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0,
                             PRECISION_NAME);
        if (!weights_copy() && prop.major * 10 + prop.minor < gpu::BF16_MIN_SM)
            s += " (the precision below sm_80: bf16 needs its tensor cores)";
        if (!weights_copy()) s += strf(", TF32 %s", config.tf32 ? "on" : "off");
        if (comm.world > 1) s += strf(", gradients via NCCL %d.%d.%d", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
        return s;
    }

    float* params() { return host_params.data(); }
    float* adam_m() { return host_m.data(); }
    float* adam_v() { return host_v.data(); }
    // Every weight in float32 goes through the gradient buffer (free between steps, padded):
    // the bf16 copy is made from it and the master weights are cut from it; AdamW's state is
    // cut to the shard (all of it without ZeRO).
    void upload() {
        const size_t n = host_params.size();
        CUDA_CHECK(cudaMemset(grads_buf.ptr, 0, shard.padded * sizeof(float)));  // the padding stays 0
        CUDA_CHECK(cudaMemcpy(grads_buf.ptr, host_params.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        const size_t master_from = weights_copy() ? shard.begin : 0;
        CUDA_CHECK(cudaMemcpy(params_buf.ptr, grads_buf.ptr + master_from, master_count(shard) * sizeof(float),
                              cudaMemcpyDeviceToDevice));
        if (weights_copy()) gpu::to_floatX(weights, grads_buf.ptr, shard.padded);  // then AdamW keeps it current
        upload_shard(m_buf.ptr, host_m), upload_shard(v_buf.ptr, host_v);
    }
    void upload_shard(float* device, const std::vector<float>& host) {
        auto [lo, hi] = shard.clip(0, host.size());
        CUDA_CHECK(cudaMemset(device, 0, shard.size * sizeof(float)));
        if (lo < hi)
            CUDA_CHECK(cudaMemcpy(device, host.data() + lo, (hi - lo) * sizeof(float), cudaMemcpyHostToDevice));
    }
    // On every replica: with --zero 1 each shard is gathered from the replicas (a collective).
    void download() {
        gpu::synchronize();
        if (weights_copy()) download_gathered(params_buf.ptr, host_params);
        else CUDA_CHECK(cudaMemcpy(host_params.data(), params_buf.ptr, host_params.size() * sizeof(float),
                                   cudaMemcpyDeviceToHost));  // every weight: gathered after each step
        download_gathered(m_buf.ptr, host_m), download_gathered(v_buf.ptr, host_v);
    }
    // A shard's buffer to the host copy of every parameter: with ZeRO through the gradient
    // buffer, where this replica's shard takes its place and the all-gather fills the rest.
    void download_gathered(const float* device_shard, std::vector<float>& host) {
        const float* all = device_shard;
        if (sharded()) {
            CUDA_CHECK(cudaMemcpy(grads_buf.ptr + shard.begin, device_shard, shard.size * sizeof(float),
                                  cudaMemcpyDeviceToDevice));
            replicas->allgather(grads_buf.ptr, shard.padded);
            all = grads_buf.ptr;
        }
        CUDA_CHECK(cudaMemcpy(host.data(), all, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
    }

    // The micro-batch in inputs/targets (targets may be absent) to the device, with its
    // positions grouped by token, in one asynchronous copy from pinned slot `slot`. A slot
    // is not written again before the step's one synchronisation, when its copy is done.
    void upload_tokens(const int* in, const int* tgt, int B, int T, int slot = 0) {
        int BT = B * T;
        size_t cap = (size_t)maxB * maxT, ints = gpu::token_ints(maxB, maxT);  // offsets fixed by the capacity
        int* h = pinned_tokens + (size_t)slot * ints;
        std::copy(in, in + BT, h);
        if (tgt) std::copy(tgt, tgt + BT, h + cap);
        groups.groups = grouper.group(in, BT, cfg.V, h + 2 * cap, h + 3 * cap + 1, h + 4 * cap + 1);
        CUDA_CHECK(cudaMemcpyAsync(tokens_buf.ptr, h, ints * sizeof(int), cudaMemcpyHostToDevice, gpu::ctx.stream));
    }

    // Forward to the logits (B, T, Vp) for the inputs on the device; B ≤ maxB, T ≤ maxT.
    void forward(int B, int T) {
        const int C = cfg.C, NH = cfg.NH, Vp = cfg.Vp;
        const size_t BT = (size_t)B * T;
        gpu::encoder_forward(a.encoded, d_inputs, p.wte, p.wpe, B, T, C);
        gpu::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.encoded, p.ln1w, p.ln1b, BT, C);  // block 0's ln1
        for (int l = 0; l < cfg.L; l++) {
            const floatX* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * BT * C;
            // this block's slices of the activations and parameters
            floatX* ln1 = a.ln1 + l * BT * C;       float* ln1_mean = a.ln1_mean + l * BT;
            float* ln1_rstd = a.ln1_rstd + l * BT;  floatX* qkv = a.qkv + l * BT * 3 * C;
            float* att_stats = a.att_stats + l * gpu::att_stats_per_row(fused_attention) * BT * NH;
            floatX* atty = a.atty + l * BT * C;     floatX* residual2 = a.residual2 + l * BT * C;
            floatX* ln2 = a.ln2 + l * BT * C;       float* ln2_mean = a.ln2_mean + l * BT;
            float* ln2_rstd = a.ln2_rstd + l * BT;  floatX* fch = a.fch + l * BT * 4 * C;
            floatX* fch_gelu = a.fch_gelu + (recompute ? 0 : l) * BT * 4 * C;
            floatX* residual3 = a.residual3 + l * BT * C;
            // x + attention(ln1(x)), then x + mlp(ln2(x)); GELU is applied as fc's product is written,
            // or with --recompute 1 by the kernel that the backward redoes it with. Each residual
            // add is fused with the LayerNorm that reads its output (gpu/layernorm.cuh): ln2, then
            // the next block's ln1, or lnf after the last block.
            gpu::matmul_forward(qkv, ln1, p.qkvw + (size_t)l * 3 * C * C, p.qkvb + l * 3 * C, BT, C, 3 * C);
            attention_forward(atty, att_stats, qkv, B, T);
            gpu::matmul_forward(s.proj, atty, p.attprojw + (size_t)l * C * C, p.attprojb + l * C, BT, C, C);
            gpu::residual_layernorm_forward(residual2, ln2, ln2_mean, ln2_rstd, residual, s.proj, p.ln2w + l * C,
                                            p.ln2b + l * C, BT, C);
            gpu::matmul_gelu_forward(fch_gelu, fch, ln2, p.fcw + (size_t)l * 4 * C * C, p.fcb + l * 4 * C, BT, C,
                                     4 * C, recompute);
            gpu::matmul_forward(s.proj, fch_gelu, p.fcprojw + (size_t)l * C * 4 * C, p.fcprojb + l * C, BT, 4 * C, C);
            if (l + 1 < cfg.L)
                gpu::residual_layernorm_forward(residual3, ln1 + BT * C, ln1_mean + BT, ln1_rstd + BT, residual2,
                                                s.proj, p.ln1w + (l + 1) * C, p.ln1b + (l + 1) * C, BT, C);
            else
                gpu::residual_layernorm_forward(residual3, a.lnf, a.lnf_mean, a.lnf_rstd, residual2, s.proj, p.lnfw,
                                                p.lnfb, BT, C);
        }
        gpu::matmul_forward(a.logits, a.lnf, p.wte, nullptr, BT, C, Vp);  // the output head is wte, tied
    }

    // One layer's attention on the chosen path; stats is the layer's slice of att_stats.
    void attention_forward(floatX* out, float* stats, const floatX* qkv, int B, int T) {
        if (fused_attention)
            gpu::flash_attention_forward(out, stats, qkv, B, T, cfg.C, cfg.NH);
        else
            gpu::attention_forward(out, stats, stats + (size_t)B * cfg.NH * T, qkv, s.att, B, T, cfg.C, cfg.NH);
    }
    // Overwrites dqkv; out is the forward's output (the fused backward reads it).
    void attention_backward(floatX* dqkv, const floatX* dout, const floatX* out, const floatX* qkv, const float* stats,
                            int B, int T) {
        if (fused_attention)
            gpu::flash_attention_backward(dqkv, s.att_delta, dout, out, qkv, stats, B, T, cfg.C, cfg.NH);
        else
            gpu::attention_backward(dqkv, dout, qkv, stats, stats + (size_t)B * cfg.NH * T, s.att, B, T, cfg.C,
                                    cfg.NH);
    }

    // Cross-entropy of the logits against the targets on the device: adds the mean loss to
    // the loss sum on the device, and with `backward` overwrites the logits with their
    // gradient for a per-position loss scale of loss_scale.
    void cross_entropy(int B, int T, bool backward, float loss_scale) {
        int N = B * T;
        gpu::crossentropy_forward_backward(a.losses, a.logits, d_targets, loss_scale, N, cfg.V, cfg.Vp, backward);
        gpu::add_mean_loss(sums_buf.ptr, a.losses, N);
    }
    // the loss sum, and |G_small|² (0 when not measured)
    void zero_loss_sum() { CUDA_CHECK(cudaMemsetAsync(sums_buf.ptr, 0, 3 * sizeof(double), gpu::ctx.stream)); }
    // The first micro-batch's ‖gradient‖², left in sums_buf[2] for the step's one wait (host/noise.h);
    // rescaled to |G_small|² on the host. One more pass over the gradient buffer.
    void first_micro_batch_norm_squared() {
        gpu::global_norm_squared(grads_buf.ptr, cfg.num_params(), sums_buf.ptr + 3, sums_buf.ptr + 2);
    }
    double loss_sum() {
        double sum;
        CUDA_CHECK(cudaMemcpyAsync(&sum, sums_buf.ptr, sizeof sum, cudaMemcpyDeviceToHost, gpu::ctx.stream));
        gpu::synchronize();
        return sum;
    }

    // Backward from the logits' gradient (written by cross_entropy) to the parameter
    // gradients (+=). With `sync` (the last micro-batch of a step with --grad-sync overlap) it
    // is told when each block's gradients are final.
    void backward(int B, int T, GradSync* sync = nullptr) {
        const int C = cfg.C, NH = cfg.NH, Vp = cfg.Vp;
        const size_t BT = (size_t)B * T;
        float* work = s.partials;  // column-sum scratch of the bias and LayerNorm gradients
        const floatX* dlogits = a.logits;
        gpu::matmul_backward(d.dln, g.wte, nullptr, work, dlogits, a.lnf, p.wte, BT, C, Vp, nullptr, epilogues);
        const floatX* last = a.residual3 + (cfg.L - 1) * BT * C;  // the output of the last block
        gpu::layernorm_backward_fused(d.dresidual, g.lnfw, g.lnfb, work, d.dln, last, p.lnfw, a.lnf_mean, a.lnf_rstd,
                                      BT, C, false, ln_cols);
        for (int l = cfg.L - 1; l >= 0; l--) {
            // d.dresidual holds ∂loss/∂(output of block l)
            const floatX* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * BT * C;
            const floatX* ln1 = a.ln1 + l * BT * C;        const float* ln1_mean = a.ln1_mean + l * BT;
            const float* ln1_rstd = a.ln1_rstd + l * BT;   const floatX* qkv = a.qkv + l * BT * 3 * C;
            const float* att_stats = a.att_stats + l * gpu::att_stats_per_row(fused_attention) * BT * NH;
            const floatX* atty = a.atty + l * BT * C;      const floatX* residual2 = a.residual2 + l * BT * C;
            const floatX* ln2 = a.ln2 + l * BT * C;        const float* ln2_mean = a.ln2_mean + l * BT;
            const float* ln2_rstd = a.ln2_rstd + l * BT;   const floatX* fch = a.fch + l * BT * 4 * C;
            floatX* fch_gelu = a.fch_gelu + (recompute ? 0 : l) * BT * 4 * C;
            if (recompute) gpu::gelu_forward(fch_gelu, fch, BT * 4 * C);  // as the forward did: the same bits
            // MLP branch: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))); d.dfch is
            // the gradient of GELU's input fch (fcproj's backward applies gelu'(fch))
            gpu::matmul_backward(d.dfch, g.fcprojw + (size_t)l * C * 4 * C, g.fcprojb + l * C, work, d.dresidual,
                                 fch_gelu, p.fcprojw + (size_t)l * C * 4 * C, BT, 4 * C, C, fch, epilogues);
            gpu::matmul_backward(d.dln, g.fcw + (size_t)l * 4 * C * C, g.fcb + l * 4 * C, work, d.dfch, ln2,
                                 p.fcw + (size_t)l * 4 * C * C, BT, C, 4 * C, nullptr, epilogues);
            // residual2 fed both the skip path and ln2: its gradient is the sum of the two, which
            // the LayerNorm backward adds as it writes (accumulate)
            gpu::layernorm_backward_fused(d.dresidual, g.ln2w + l * C, g.ln2b + l * C, work, d.dln, residual2,
                                          p.ln2w + l * C, ln2_mean, ln2_rstd, BT, C, true, ln_cols);
            // attention branch: residual2 = residual + attproj(attention(qkv(ln1(residual))))
            gpu::matmul_backward(d.datty, g.attprojw + (size_t)l * C * C, g.attprojb + l * C, work, d.dresidual, atty,
                                 p.attprojw + (size_t)l * C * C, BT, C, C, nullptr, epilogues);
            attention_backward(d.dqkv, d.datty, atty, qkv, att_stats, B, T);
            gpu::matmul_backward(d.dln, g.qkvw + (size_t)l * 3 * C * C, g.qkvb + l * 3 * C, work, d.dqkv, ln1,
                                 p.qkvw + (size_t)l * 3 * C * C, BT, C, 3 * C, nullptr, epilogues);
            // the same for the block's input, which fed the skip path and ln1
            gpu::layernorm_backward_fused(d.dresidual, g.ln1w + l * C, g.ln1b + l * C, work, d.dln, residual,
                                          p.ln1w + l * C, ln1_mean, ln1_rstd, BT, C, true, ln_cols);
            if (sync) sync->block_done(l);  // block l's parameter gradients are final: their sum may start
        }
        gpu::encoder_backward(g.wte, g.wpe, d.dresidual, groups, B, T, C);
    }

    // ZeRO stage 1's two collectives, as train.cpp names them; without ZeRO the all-reduce
    // and nothing. The gradient sync: the sum over the replicas, of this replica's shard only
    // with ZeRO (a reduce-scatter). With --grad-sync overlap the buckets the last backward
    // started, the rest, and the wait for them (host/gradsync.h).
    void sync_gradients(const Comm& comm) {
        if (grad_sync.finish(grads_buf.ptr, comm)) return;
        if (sharded()) comm.reduce_scatter_sum(grads_buf.ptr, shard.padded);
        else comm.allreduce_sum(grads_buf.ptr, shard.padded);
    }
    // After the update: every replica's updated shard of the weights the kernels read, to
    // every replica (ZeRO's all-gather); else nothing.
    void share_updated_weights(const Comm& comm) {
        if (sharded()) comm.allgather(weights, shard.padded);
    }

    // One optimizer step: train.cpp's train_step(), on the GPU. The host waits for the GPU
    // once, for the loss and the gradient norm that the clipping decision needs.
    StepResult train_step(DataLoader& loader, const BatchPlan& plan, const Comm& comm, const AdamWConfig& opt, float lr,
                          float grad_clip, int t) {
        const int B = plan.B, T = plan.T;
        const size_t n = shard.padded;  // every parameter (with --zero 1, and the padding)
        // 1. zero the parameter gradients: they accumulate over the micro-batches below
        CUDA_CHECK(cudaMemsetAsync(grads_buf.ptr, 0, n * sizeof(float), gpu::ctx.stream));
        zero_loss_sum();

        // 2. accumulation loop: A micro-batches of this replica's share of the global batch
        loader.next_chunk();
        for (int i = 0; i < plan.A; i++) {
            loader.micro_batch(i, inputs.data(), targets.data());
            upload_tokens(inputs.data(), targets.data(), B, T, i);
            forward(B, T);
            cross_entropy(B, T, true, 1.0f / (float)plan.global_tokens());
            backward(B, T, grad_sync.hook(i, plan.A, measure_noise, grads_buf.ptr, comm));  // overlap: the last one
            if (i == 0 && measure_noise) first_micro_batch_norm_squared();
        }

        // 3. gradient sync, once per step: sum over replicas = mean over the global batch (with
        //    --zero 1 a reduce-scatter: each replica receives the sum of its shard)
        sync_gradients(comm);

        // 4. clip: scale the synced gradient down to norm grad_clip (the same on every replica);
        //    a NaN or an infinity stops the run here, before it reaches the weights. With ZeRO
        //    each replica has its shard's ‖g‖², summed in the step's scalar all-reduce.
        gpu::global_norm_squared(grads_buf.ptr + shard.begin, shard.size, sums_buf.ptr + 3, sums_buf.ptr + 1);
        double sums[3];  // the loss sum, ‖g‖² and |G_small|², in the step's one wait for the GPU
        CUDA_CHECK(cudaMemcpyAsync(sums, sums_buf.ptr, sizeof sums, cudaMemcpyDeviceToHost, gpu::ctx.stream));
        gpu::synchronize();
        // the loss, |G_small|² and the shard's ‖g‖², as means over the replicas
        double means[3] = {sums[0] / plan.A, small_batch_norm_squared(sums[2], plan), sums[1]};
        comm.step_means(means);      // (and whether to stop after this step)
        float loss = (float)means[0];
        float norm = (float)std::sqrt(sharded() ? means[2] * comm.world : sums[1]);
        check_finite_step(loss, norm, t);
        float grad_scale = (grad_clip > 0 && norm > grad_clip) ? grad_clip / (norm + 1e-6f) : 1.0f;

        // 5. update this replica's shard (all of it without ZeRO), with the clipping scale applied
        //    as AdamW reads each gradient (and the bf16 copy of the weights refreshed as it writes
        //    them); then, with --zero 1, every replica's updated weights to every replica
        float* master = weights_copy() ? params_buf.ptr : params_buf.ptr + shard.begin;  // from the shard's start
        gpu::adamw_update(master, weights_copy() ? weights : nullptr, grads_buf.ptr, m_buf.ptr, v_buf.ptr, cfg, opt,
                          lr, t, grad_scale, shard);
        share_updated_weights(comm);
        gpu::synchronize();  // so that the step's time in the log is the GPU's
        size_t free_bytes, total;
        CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
        peak_bytes = std::max(peak_bytes, total - free_bytes);
        steps_done++;
        return {loss, norm, (float)std::sqrt(means[1])};
    }

    // Forward only: the B·T per-position losses, on the host (validation and HellaSwag,
    // host/eval.h; the loss sum it also adds to is zeroed by every step).
    const float* token_losses(const int* in, const int* tgt, int B, int T) {
        upload_tokens(in, tgt, B, T);
        forward(B, T);
        cross_entropy(B, T, false, 0.0f);
        losses_host.resize((size_t)B * T);
        CUDA_CHECK(cudaMemcpyAsync(losses_host.data(), a.losses, losses_host.size() * sizeof(float),
                                   cudaMemcpyDeviceToHost, gpu::ctx.stream));
        gpu::synchronize();  // also: the pinned token slot is free again
        return losses_host.data();
    }

    const float* next_token_logits(const int* context, int T) {
        upload_tokens(context, nullptr, 1, T);
        forward(1, T);
        std::vector<floatX> row(cfg.Vp);
        CUDA_CHECK(cudaMemcpyAsync(row.data(), a.logits + (size_t)(T - 1) * cfg.Vp, cfg.Vp * sizeof(floatX),
                                   cudaMemcpyDeviceToHost, gpu::ctx.stream));
        gpu::synchronize();
        logits_row.assign(row.begin(), row.end());
        return logits_row.data();
    }
};

#ifndef TRAIN_NO_MAIN
int main(int argc, char** argv) { return main_with_errors<GpuTrainer>(argc, argv); }
#endif
