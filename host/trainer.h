// The Trainer contract: what host/run.h's training run calls on a trainer, and nothing else.
// Each trainer (CpuTrainer in train.cpp, GpuTrainer in train_gpt.cu) is a struct with these
// members; check_trainer_contract<Trainer>() names any one that is missing, at compile time.
//
// Start-up and planning (static: no model exists yet)
//   static Comm connect(int* argc, char*** argv)
//       start the replicas (Comm::init, and on the GPU the NCCL communicator); may consume options
//   static void check_options(const Config&)
//       refuse options this trainer has no use for (a UsageError)
//   static std::string hardware(const Config&, const Comm&)
//       threads or GPU, one line for the log
//   static constexpr int GATHERED_WEIGHT_BYTES
//       bytes of one weight as the kernels read it: what --zero 1's all-gather moves
//   static MemoryUse memory_use(const ModelConfig&, int B, int T, int R, const Config&)
//       what each of R replicas allocates, to the byte (--zero 1 shards the optimizer state over
//       them), rank 0's where it holds more (the key/value cache of samples); for an option
//       still `auto`, the least of its choices
//   static double memory_available(const Config&)
//       bytes the trainer may use (--device-memory, else what is free); 0 = unknown
//   static std::vector<std::string> run_time_choices()
//       the options whose `auto` the trainer resolves at run time (GPU: "attention"); what they
//       resolved to is recorded in the state files (host/checkpoint.h, RunChoices) and kept on resume
//   static void choose_kernels(Config&, const ModelConfig&, const BatchPlan&, double available, const Comm&)
//       resolve what is still `auto` among them, the same on every replica, after memory is planned
//   static std::vector<std::string> kernel_plan(const ModelConfig&, const BatchPlan&, const Config&,
//                                               const DeviceSpeed&)
//       the dry run's step, kernel by kernel (empty: none)
// The model (one object, built once the plan is known)
//   Trainer(const ModelConfig&, const BatchPlan&, const Config&, const Comm&)
//   float* params(); float* adam_m(); float* adam_v();
//       host copies of every parameter and of AdamW's moments, num_params() each
//   void upload()     host copies -> where the trainer computes (nothing on the CPU)
//   void download()   the reverse, before a checkpoint; every replica calls it (a collective with --zero 1)
//   StepResult train_step(DataLoader&, const BatchPlan&, const Comm&, const AdamWConfig&, float lr,
//                         float grad_clip, int t)
//       one optimizer step, t = 1, 2, ...; calls check_finite_step() before it updates the weights
//   const float* token_losses(const int* inputs, const int* targets, int B, int T)
//       forward only: the B·T per-position losses, in host memory (host/eval.h)
//   const float* next_token_logits(const int* context, int T)
//       forward only: the last position's Vp logits, in host memory (samples without the cache)
//   const float* next_token_logits_cached(const int* tokens, int T, int P)
//       the same with the key/value cache, which holds positions 0..P-1 of the context (P = 0:
//       a new context): tokens are positions P..P+T-1; their keys and values join the cache
// Optional
//   std::vector<std::pair<std::string, std::string>> recorded_choices()
//       choices made at run time that are no option's (GPU: "gemm", the cuBLASLt algorithm of
//       each product, gpu/matmul.cuh): name=value entries that every state file records with
//       the options' (RunChoices); the trainer reads them back itself on resume
//       (state_to_resume, host/checkpoint.h)
#pragma once
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "batch.h"
#include "checkpoint.h"
#include "cli.h"
#include "comm.h"
#include "cost.h"
#include "data.h"
#include "error.h"

struct AdamWConfig {
    float beta1, beta2, eps, weight_decay;
};

// What one optimizer step reports.
struct StepResult {
    float loss;       // mean training loss over the global batch
    float grad_norm;  // global gradient norm before clipping
    float grad_norm_small = 0;  // one micro-batch's, √(mean over replicas of its square) (host/noise.h); 0: off
};

// "nan" for every NaN (printf writes "-nan" for some), else %g.
inline std::string number(double x) { return std::isnan(x) ? "nan" : strf("%g", x); }

// Thrown by a trainer's step when the loss or the gradient norm is not finite, before the
// update: the weights are still the ones the step started from.
struct NonFiniteStep : Error {
    NonFiniteStep(float loss, float grad_norm, int step)
        : Error(!std::isfinite(loss)
                    ? strf("the loss is %s at step %d (gradient norm %s)", number(loss).c_str(), step,
                           number(grad_norm).c_str())
                    : strf("the gradient norm is %s at step %d (loss %s)", number(grad_norm).c_str(), step,
                           number(loss).c_str())) {}
};
// What each trainer's step calls between the gradient norm and the update.
inline void check_finite_step(float loss, float grad_norm, int step) {
    if (!std::isfinite(loss) || !std::isfinite(grad_norm)) throw NonFiniteStep(loss, grad_norm, step);
}

// ---- the check: one detector per member, true when the expression compiles and its type
// converts to what the run expects.
namespace trainer_contract {
template <class T>
T& obj();  // declared only: for the expressions below
#define TRAINER_MEMBER(name, type, ...)                                                    \
    template <class T, class = void>                                                       \
    struct has_##name : std::false_type {};                                                \
    template <class T>                                                                     \
    struct has_##name<T, std::enable_if_t<std::is_convertible<decltype(__VA_ARGS__), type>::value>> \
        : std::true_type {};
TRAINER_MEMBER(connect, Comm, T::connect((int*)nullptr, (char***)nullptr))
TRAINER_MEMBER(check_options, void, T::check_options(obj<const Config>()))
TRAINER_MEMBER(hardware, std::string, T::hardware(obj<const Config>(), obj<const Comm>()))
TRAINER_MEMBER(gathered_weight_bytes, int, std::integral_constant<int, T::GATHERED_WEIGHT_BYTES>::value)
TRAINER_MEMBER(memory_use, MemoryUse, T::memory_use(obj<const ModelConfig>(), 1, 1, 1, obj<const Config>()))
TRAINER_MEMBER(memory_available, double, T::memory_available(obj<const Config>()))
TRAINER_MEMBER(run_time_choices, std::vector<std::string>, T::run_time_choices())
TRAINER_MEMBER(choose_kernels, void,
               T::choose_kernels(obj<Config>(), obj<const ModelConfig>(), obj<const BatchPlan>(), 0.0, obj<const Comm>()))
TRAINER_MEMBER(kernel_plan, std::vector<std::string>,
               T::kernel_plan(obj<const ModelConfig>(), obj<const BatchPlan>(), obj<const Config>(),
                              obj<const DeviceSpeed>()))
TRAINER_MEMBER(params, float*, obj<T>().params())
TRAINER_MEMBER(adam_m, float*, obj<T>().adam_m())
TRAINER_MEMBER(adam_v, float*, obj<T>().adam_v())
TRAINER_MEMBER(upload, void, obj<T>().upload())
TRAINER_MEMBER(download, void, obj<T>().download())
TRAINER_MEMBER(train_step, StepResult,
               obj<T>().train_step(obj<DataLoader>(), obj<const BatchPlan>(), obj<const Comm>(), obj<const AdamWConfig>(),
                                   0.0f, 0.0f, 1))
TRAINER_MEMBER(token_losses, const float*, obj<T>().token_losses((const int*)nullptr, (const int*)nullptr, 1, 1))
TRAINER_MEMBER(next_token_logits, const float*, obj<T>().next_token_logits((const int*)nullptr, 1))
TRAINER_MEMBER(next_token_logits_cached, const float*, obj<T>().next_token_logits_cached((const int*)nullptr, 1, 0))
#undef TRAINER_MEMBER
template <class T>  // (a trainer need not be movable: is_constructible, not a conversion)
using has_constructor = std::is_constructible<T, const ModelConfig&, const BatchPlan&, const Config&, const Comm&>;
}  // namespace trainer_contract

// The optional recorded_choices(), appended to a state file's choices where the trainer has it.
template <class T, class = void>
struct has_recorded_choices : std::false_type {};
template <class T>
struct has_recorded_choices<T, std::void_t<decltype(std::declval<T&>().recorded_choices())>> : std::true_type {};
template <class T>
void add_recorded_choices(T& trainer, RunChoices& choices) {
    if constexpr (has_recorded_choices<T>::value)
        for (const auto& entry : trainer.recorded_choices())
            if (!entry.second.empty()) choices.entries.push_back(entry);
}

// Each missing member is one error naming it (with its signature); true when none is.
// main_with_errors() runs the training only when this is true, so a missing member is
// reported by these lines alone, not by errors from deep inside the run.
template <class T>
constexpr bool check_trainer_contract() {
    using namespace trainer_contract;
    bool met = true;
#define TRAINER_NEEDS(name, what) \
    static_assert(has_##name<T>::value, "the Trainer (host/trainer.h) needs " what); \
    met = met && has_##name<T>::value
    TRAINER_NEEDS(connect, "connect: static Comm connect(int* argc, char*** argv)");
    TRAINER_NEEDS(check_options, "check_options: static void check_options(const Config&)");
    TRAINER_NEEDS(hardware, "hardware: static std::string hardware(const Config&, const Comm&)");
    TRAINER_NEEDS(gathered_weight_bytes, "GATHERED_WEIGHT_BYTES: static constexpr int GATHERED_WEIGHT_BYTES");
    TRAINER_NEEDS(memory_use, "memory_use: static MemoryUse memory_use(const ModelConfig&, int B, int T, int R, "
                              "const Config&)");
    TRAINER_NEEDS(memory_available, "memory_available: static double memory_available(const Config&)");
    TRAINER_NEEDS(run_time_choices, "run_time_choices: static std::vector<std::string> run_time_choices()");
    TRAINER_NEEDS(choose_kernels, "choose_kernels: static void choose_kernels(Config&, const ModelConfig&, "
                                  "const BatchPlan&, double available, const Comm&)");
    TRAINER_NEEDS(kernel_plan, "kernel_plan: static std::vector<std::string> kernel_plan(const ModelConfig&, "
                               "const BatchPlan&, const Config&, const DeviceSpeed&)");
    TRAINER_NEEDS(constructor, "its constructor: Trainer(const ModelConfig&, const BatchPlan&, const Config&, "
                               "const Comm&)");
    TRAINER_NEEDS(params, "params: float* params()");
    TRAINER_NEEDS(adam_m, "adam_m: float* adam_m()");
    TRAINER_NEEDS(adam_v, "adam_v: float* adam_v()");
    TRAINER_NEEDS(upload, "upload: void upload()");
    TRAINER_NEEDS(download, "download: void download()");
    TRAINER_NEEDS(train_step, "train_step: StepResult train_step(DataLoader&, const BatchPlan&, const Comm&, "
                              "const AdamWConfig&, float lr, float grad_clip, int t)");
    TRAINER_NEEDS(token_losses, "token_losses: const float* token_losses(const int* inputs, const int* targets, "
                                "int B, int T)");
    TRAINER_NEEDS(next_token_logits, "next_token_logits: const float* next_token_logits(const int* context, int T)");
    TRAINER_NEEDS(next_token_logits_cached, "next_token_logits_cached: const float* next_token_logits_cached(const int* "
                                            "tokens, int T, int P)");
#undef TRAINER_NEEDS
    return met;
}
