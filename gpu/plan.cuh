// gpu/plan.cuh: what the GPU trainer decides before it allocates or launches anything: the
// memory a replica needs, to the byte; whether each kernel fits the device (gpu/fit.cuh);
// --attention auto's choice; the dry run's kernel-by-kernel table; the start-up line on the
// GPU. GpuTrainer (train_gpt.cu) answers host/trainer.h's planning members with these.
#pragma once
#include <algorithm>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "../host/batch.h"
#include "../host/checkpoint.h"
#include "../host/cli.h"
#include "../host/comm.h"
#include "../host/cost.h"
#include "../host/cpus.h"
#include "../host/device_limits.h"
#include "../host/gradsync.h"
#include "../host/noise.h"
#include "attention_choice.cuh"
#include "common.cuh"
#include "fit.cuh"
#include "flash_attention.cuh"
#include "layernorm.cuh"

namespace gpu {

// ---- memory

// bf16: the kernels read a bf16 copy of the weights, and the float32 master weights are
// AdamW's alone (sharded with --zero 1); fp32: the kernels read the master weights themselves.
inline bool weights_copy() { return !std::is_same<floatX, float>::value; }
// float32 master weights held: the shard's in bf16; in fp32 every one, as the kernels read them
inline size_t master_count(const Shard& sh) { return weights_copy() ? sh.size : sh.padded; }
// The parameters replica `rank` of R updates: with --zero 1 its 1/R shard, else all of them.
inline Shard shard_of(const ModelConfig& mc, int rank, int R, const Config& config) {
    return Shard::of(mc.num_params(), rank, R, config.zero && R > 1);
}
constexpr int GATHERED_WEIGHT_BYTES = sizeof(floatX);  // --zero 1's all-gather: the weights the kernels read

// What one of R replicas allocates on the GPU, to the byte, given the bytes of the model's
// activations (with their gradients and scratch) and of its tokens and sums, which the
// model's layout in train_gpt.cu counts: printed at the start, and compared with the GPU's
// free memory before allocating.
inline MemoryUse memory_use(const ModelConfig& mc, int R, const Config& config, double activation_bytes,
                            double token_and_sum_bytes) {
    Shard sh = shard_of(mc, 0, R, config);
    const bool sharded = sh.size != sh.padded;
    const std::string of_shard = sharded ? strf(" (1/%d shard)", R) : "";
    double n = (double)sh.padded, p = n * sizeof(float);
    MemoryUse use{{{weights_copy() ? "parameters" + of_shard : "parameters",
                    (double)master_count(sh) * sizeof(float)}}};
    if (weights_copy()) use.parts.push_back({"their bf16 copy", n * sizeof(floatX)});
    use.parts.insert(use.parts.end(), {{"gradients", p},
                                       {"AdamW state" + of_shard, 2.0 * sh.size * sizeof(float)},
                                       {"activations", activation_bytes},
                                       {"tokens and sums", token_and_sum_bytes}});
    if (config.grad_sync_dtype == "bf16" && R > 1) {  // NCCL's side of the sync: the largest bucket in bf16
        size_t largest = 0;
        for (const GradBucket& b : gradient_buckets(mc, config.grad_bucket)) largest = std::max(largest, b.floats);
        use.parts.push_back({"bf16 gradient sync buffer", (double)largest * sizeof(__nv_bfloat16)});
    }
    return use;
}

inline double memory_available(const Config& config) {
    if (config.device_memory > 0) return config.device_memory;
    if (gpu::ctx.device < 0) return 0;  // a dry run without a GPU: unknown
    size_t free_bytes = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return (double)free_bytes;
}

// ---- the kernels: what fits the device, and what --attention auto resolves to

// --attention: "fused" or "cublas" as given, recorded or resolved by choose_kernels; "auto"
// (before the choice, in a dry run, in a trainer built directly) is the fused path when it
// supports the head size: the smaller of the two, which memory is planned with.
inline bool uses_fused_attention(const Config& config, const ModelConfig& mc) {
    return config.attention == "fused" ||
           (config.attention == "auto" && gpu::flash_attention_supports(mc.C / mc.NH));
}

// The options that choose kernels or the sums' type, and so the rounding of what a step
// computes: written into every state file; a resumed run keeps what `auto` resolved to, and
// says so when an option given anew changes the arithmetic (host/checkpoint.h,
// adopt_recorded_choices). --epilogues changes the bits (gpu/matmul.cuh, matmul_backward);
// so does --classifier (the head's weight gradient summed chunk by chunk, gpu/classifier.cuh),
// and --grad-sync-dtype bf16 (rounded sums), not fp32.
inline std::vector<std::string> run_time_choices() {
    return {"attention", "epilogues", "classifier", "grad-sync-dtype"};
}

// The device the kernels are fitted to: in a dry run the GPU --device names (when it is one
// of host/device_limits.h's), else the GPU in use; unknown in a dry run without either.
inline DeviceLimits device_to_fit(const Config& config) {
    DeviceLimits named = device_limits_named(config.device);
    if (config.dry_run && named.known()) return named;
    return gpu::ctx.device >= 0 ? gpu::device_limits(gpu::ctx.device) : DeviceLimits{};
}

// LayerNorm backward's columns per block on the GPU in use (whole rows without one). The
// chunks give the same bits as whole rows, so this choice, derived from the device at each
// start, does not change what a resumed run computes (gpu/layernorm.cuh).
inline int layernorm_columns(const ModelConfig& mc) {
    if (gpu::ctx.device < 0) return mc.C;
    return gpu::layernorm_backward_columns(mc.C, gpu::device_limits(gpu::ctx.device).smem_optin);
}

// Every kernel against the device's limits, before anything is allocated: stops the run
// with one line when one cannot fit (--attention fused included), else prints the variants
// (rank 0); false, with the reason in *unfit, when the fused attention does not fit (the
// cuBLAS path then runs).
inline bool fit_device(const Config& config, const ModelConfig& mc, const BatchPlan& plan, const Comm& comm,
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

inline bool on_cpu_runtime() {
#ifdef CPU_CUDA
    return true;
#else
    return false;
#endif
}

// Resolves --attention auto once memory is planned, with rank 0's choice on every replica.
// The candidates are the paths whose memory fits at the planned micro-batch (the plan was
// made with the smaller, fused one); of two, rank 0 times one layer of each at the planned
// B×T and keeps the faster. Nothing is timed in a dry run, nor on the CPU runtime, which
// takes the fused path so that CI runs it, unless TRAIN_GPT_ATTENTION_PICK=fused|cublas asks
// it to time both as a GPU does and to let the named path win (the tests' way to make auto
// choose differently from one process to the next, as timing can on a GPU).
template <class Need>
void choose_kernels(Config& config, const ModelConfig& mc, const BatchPlan& plan, double available, const Comm& comm,
                    Need&& need_for) {
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
        return need_for(c);
    };
    const std::string pick = attention_pick_for_tests();
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
        double fused = gpu::time_attention_layer(true, plan.B, plan.T, mc.C, mc.NH, mc.kv_heads());
        double cublas = gpu::time_attention_layer(false, plan.B, plan.T, mc.C, mc.NH, mc.kv_heads());
        choice = cublas > 0 && cublas < fused ? "cublas" : "fused";
        line = strf("attention: fused %.2f ms, cublas %s per layer (forward and backward, B=%d T=%d): %s", fused,
                    cublas > 0 ? strf("%.2f ms", cublas).c_str() : "does not fit", plan.B, plan.T,
                    choice.c_str());
        if (!pick.empty() && (pick == "fused" || cublas > 0)) {
            choice = pick;
            line += strf("; TRAIN_GPT_ATTENTION_PICK=%s keeps %s", pick.c_str(), pick.c_str());
        }
    } else if (config.dry_run && !on_cpu_runtime() && gpu::ctx.device >= 0) {
        choice = "auto";  // memory_use counts the fused path, the smaller
        line = "attention: auto, timed when the run starts (a dry run launches nothing; the plan counts the fused "
               "path, the smaller)";
    }
    config.attention = comm.allgather(choice)[0];  // every replica takes rank 0's
    if (comm.rank == 0 && !line.empty()) printf("%s\n", line.c_str());
}

// ---- the options, the dry run's table and the start-up line

// TF32 changes float32 products only: the bf16 build has none for it to change.
inline void check_options(const Config& config) {
    if (weights_copy() && config.tf32)
        throw UsageError(strf("--tf32 1 has no effect in the %s build of train_gpt (TF32 applies to float32 "
                              "products, this build's are %s): drop it, or use the fp32 build",
                              PRECISION_NAME, PRECISION_NAME));
}

// The dry run's table: this step kernel by kernel, predicted for the device (host/cost.h).
// The fused classifier, the backward's epilogues per --epilogues, the sync per --grad-sync.
inline std::vector<std::string> kernel_plan(const ModelConfig& mc, const BatchPlan& plan, const Config& config,
                                            const DeviceSpeed& device) {
    StepOptions o;
    o.x = sizeof(floatX), o.recompute = config.recompute, o.epilogues_fused = config.epilogues == "fused";
    o.grad_sync_overlap = sync_overlaps(config.grad_sync == "overlap", plan.R);
    o.sync_grad_bytes = config.grad_sync_dtype == "bf16" ? 2 : 4;
    std::vector<std::string> rows = kernel_table(mc, plan, device, o);
    if (!rows.empty() && config.attention == "cublas")
        rows.push_back("  (the table counts the fused attention path; --attention cublas runs another)");
    return rows;
}

inline std::string hardware(const Config& config, const Comm& comm) {
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

}  // namespace gpu
