// A training run around the step: set-up, the loop over optimizer steps, validation,
// samples, logs and checkpoints. Both trainers share it; each brings its own Trainer,
// which owns the model and implements the step:
//
//   static Comm connect(int* argc, char*** argv)  start-up of the replicas (Comm::init)
//   Trainer(const ModelConfig&, const BatchPlan&, const Config&, const Comm&)
//   static void check_options(const Config&)  refuses options this trainer has no use for (UsageError)
//   static std::string hardware(const Config&, const Comm&)  threads or GPU, for the log
//   static constexpr int GATHERED_WEIGHT_BYTES  bytes of one weight as the kernels read it (what
//       --zero 1's all-gather moves)
//   static MemoryUse memory_use(const ModelConfig&, int B, int T, int R, const Config&)  what each
//       of R replicas allocates (--zero 1 shards the optimizer state over them); for an option
//       still `auto`, the least of its choices (the plan knows them all before any is timed)
//   static std::vector<std::string> run_time_choices()  the options whose value `auto` the trainer
//       resolves at run time (GPU: "attention"); what they resolved to is part of the run's
//       state (host/checkpoint.h, RunChoices), and a resumed run keeps it
//   static void choose_kernels(Config&, const ModelConfig&, const BatchPlan&, double available,
//       const Comm&)  resolves what is still `auto` among them, the same on every replica, after
//       memory is planned: only now may it touch the device (time kernels at the planned B, on
//       the paths whose memory fits in `available`; 0 = unknown)
//   static double memory_available(const Config&)  bytes it may use (--device-memory, else what
//                                                  is free); 0 = unknown (a dry run without a GPU)
//   float* params(); float* adam_m(); float* adam_v();  host copies, num_params() each
//   void upload();    host copies -> where the trainer computes (no-op on the CPU)
//   void download();  the reverse, before a checkpoint is written; every replica calls it (with
//                     --zero 1 it gathers the shards of the optimizer state: a collective)
//   StepResult train_step(DataLoader&, const BatchPlan&, const Comm&, const AdamWConfig&,
//                   float lr, float grad_clip, int t)    one optimizer step, t = 1, 2, ...;
//                   calls check_finite_step(loss, grad_norm, t) before it updates the weights
//   const float* token_losses(const int* inputs, const int* targets, int B, int T)
//                     forward only: the B·T per-position losses, in host memory (host/eval.h)
//   const float* next_token_logits(const int* context, int T)  host row of Vp logits
#pragma once
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "batch.h"
#include "checkpoint.h"
#include "cli.h"
#include "comm.h"
#include "corpus.h"
#include "cost.h"
#include "cpus.h"
#include "data.h"
#include "eval.h"
#include "log.h"
#include "noise.h"
#include "rng.h"
#include "sample.h"
#include "schedule.h"
#include "stop.h"

struct AdamWConfig {
    float beta1, beta2, eps, weight_decay;
};

struct StepResult {
    float loss;       // mean training loss over the global batch
    float grad_norm;  // global gradient norm before clipping
    float grad_norm_small = 0;  // one micro-batch's, √(mean over replicas of its square) (host/noise.h); 0: off
};

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

inline const char* program_name(const char* argv0) {
    const char* slash = strrchr(argv0, '/');
    return slash ? slash + 1 : argv0;
}

// Continues `tokens` by n sampled tokens, one forward pass per token over the last
// `window` tokens.
template <class Trainer>
std::vector<int> generate(Trainer& m, const ModelConfig& mc, int window, std::vector<int> tokens, int n,
                          float temperature, int top_k, Rng& rng) {
    for (int i = 0; i < n; i++) {
        int T = std::min((int)tokens.size(), window);
        const float* logits = m.next_token_logits(tokens.data() + tokens.size() - T, T);
        tokens.push_back(sample_token(logits, mc.V, temperature, top_k, rng));
    }
    return tokens;
}

inline std::string decode(const Tokenizer& tok, const std::vector<int>& tokens, size_t from, size_t to) {
    std::string s;
    for (size_t i = from; i < to; i++) s += tok.decode(tokens[i]);
    return s;
}

// The prompt is text for byte-level models and comma-separated token ids with a
// tokenizer (this trainer has no BPE encoder). Empty: the end-of-text token, or a newline.
inline std::vector<int> parse_prompt(const std::string& text, const Tokenizer& tok, int V) {
    std::vector<long long> ids;  // 64 bits: an id beyond int must be reported, not wrapped
    if (text.empty()) {
        ids.push_back(tok.eot >= 0 ? tok.eot : '\n');  // a tokenizer's eot is below its size, which is V
    } else if (tok.pieces.empty()) {
        for (unsigned char ch : text) ids.push_back(ch);
    } else {
        size_t pos = 0;
        while (pos < text.size()) {
            size_t end = text.find(',', pos);
            std::string item = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
            char* stop;
            errno = 0;
            long long id = strtoll(item.c_str(), &stop, 10);
            if (item.empty() || *stop || errno)
                throw UsageError("--prompt with a tokenizer expects token ids like 464,318, got '" + item + "'");
            ids.push_back(id);
            pos = end == std::string::npos ? text.size() : end + 1;
        }
    }
    for (long long id : ids)
        if (id < 0 || id >= V)
            throw UsageError(strf("--prompt token %lld is out of range for vocabulary %d", id, V));
    return std::vector<int>(ids.begin(), ids.end());
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

// Checks a training state against the run it is to continue: the same global batch, the
// same training data (data_name says which, for the message), a data position inside it,
// and a step not past --steps. Returns a note for the log, or "".
inline std::string check_state_fits(const TrainState& st, const std::string& state_file, const BatchPlan& plan,
                                    const DataLoader& data, const std::string& data_name, int steps) {
    if (st.global_batch != plan.global_tokens())
        throw Error(strf("the checkpoint was made with a global batch of %s tokens, this run has %s; resume with the "
                         "same --total-batch (any split of it works)",
                         with_commas(st.global_batch).c_str(), with_commas(plan.global_tokens()).c_str()));
    std::string note;
    if (st.train_data.shards == 0)
        note = "note: '" + state_file + "' predates data fingerprints: the data position is checked, the data is not";
    else if (!(st.train_data == data.identity()))
        throw Error(strf("'%s' was made on other training data (%s) than this run's %s (%s); resume with the same "
                         "--train-data",
                         state_file.c_str(), st.train_data.describe().c_str(), data_name.c_str(),
                         data.identity().describe().c_str()));
    std::string outside = data.position_problem(st.data);
    if (!outside.empty())
        throw Error(strf("'%s': its data position is outside the training data: %s", state_file.c_str(),
                         outside.c_str()));
    if (st.step > steps)
        throw Error(strf("'%s' is at step %d, past --steps %d: pass --steps %d or more to continue that run",
                         state_file.c_str(), st.step, steps, st.step));
    return note;
}

// The replicas the run is planned for: the processes started, or --replicas N, which a dry
// run plans for (one process can print the plan of a 64-GPU job) and a real run checks.
inline int planned_replicas(const Config& cfg, const Comm& comm) {
    if (cfg.replicas == 0) return comm.world;
    if (!cfg.dry_run && cfg.replicas != comm.world)
        throw UsageError(strf("--replicas %d, but %d process%s started (mpirun -np, srun --ntasks)", cfg.replicas,
                              comm.world, comm.world == 1 ? " was" : "es were"));
    return cfg.replicas;
}

// More threads than processors only slows the run, and in the tens of thousands the
// OpenMP runtime cannot start them (it crashed at 100,000): both trainers refuse them.
inline void check_thread_count(int threads) {
    int procs = affinity_processors();
    if (threads > procs)
        throw Error(strf("--threads %d is more than the %d processor%s this process may use (0 = one thread for each)",
                         threads, procs, procs == 1 ? "" : "s"));
}

// OMP_NUM_THREADS sets the count that --threads 0 leaves to OpenMP, which reads it before
// main() and starts that many threads at the first parallel region (at 100,000 it crashed):
// each of its counts (a list gives one per nesting level) is checked like --threads.
inline void check_omp_num_threads() {
    const char* text = getenv("OMP_NUM_THREADS");
    if (!text) return;
    std::string list = text;
    size_t pos = 0;
    do {
        size_t comma = list.find(',', pos);
        std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        pos = comma == std::string::npos ? list.size() + 1 : comma + 1;
        char* end = nullptr;
        errno = 0;
        long long n = item.empty() || !isdigit((unsigned char)item[0]) ? -1 : strtoll(item.c_str(), &end, 10);
        if (n < 1 || *end || errno)
            throw UsageError(strf("OMP_NUM_THREADS='%s' is not a thread count (a whole number from 1, or a list of "
                                  "them separated by commas); unset it, or pass --threads",
                                  text));
        int procs = affinity_processors();
        if (n > procs)
            throw Error(strf("OMP_NUM_THREADS=%s is more than the %d processor%s this process may use (unset it for "
                             "one thread for each, or pass --threads)",
                             item.c_str(), procs, procs == 1 ? "" : "s"));
    } while (pos <= list.size());
}

// How many processes of this job run on this host with the same processors as this one
// (host/cpus.h: they split them). A collective.
inline int ranks_sharing_processors(const Comm& comm) {
    std::string mine = comm.host + ": " + affinity_mask_text();
    std::vector<std::string> all = comm.allgather(mine);
    return (int)std::count(all.begin(), all.end(), mine);
}

// --batch-size auto splits the global batch into whole sequences on every replica: a
// global batch that is not a multiple of T×R has no such split, whatever the memory.
inline void check_whole_sequences(long long global, int T, int R) {
    long long per = (long long)T * R;
    if (global % per == 0) return;
    long long below = global / per * per;
    throw Error(strf("global batch %s tokens is not a multiple of T×R = %d×%d = %s tokens, so --batch-size auto "
                     "cannot split it into whole sequences; nearest valid --total-batch: %s%s",
                     with_commas(global).c_str(), T, R, with_commas(per).c_str(),
                     below > 0 ? (with_commas(below) + " or ").c_str() : "", with_commas(below + per).c_str()));
}

// The batch plan, with the micro-batch checked against memory before anything is allocated
// or launched, or chosen from it (--batch-size auto: the largest B that fits and splits the
// global batch). The replicas plan with the least memory any of them has (returned in
// `available`), so they agree on B. A kernel choice still `auto` is planned with its
// smallest option (Trainer::memory_use); choose_kernels() then picks among those that fit.
template <class Trainer>
BatchPlan plan_micro_batch(Config& cfg, const ModelConfig& mc, const Comm& comm, double& available) {
    const int T = cfg.seq_len, R = planned_replicas(cfg, comm);
    available = Trainer::memory_available(cfg);
    for (uint64_t a : comm.allgather((uint64_t)available)) available = std::min(available, (double)a);
    auto bytes = [&](int B) { return Trainer::memory_use(mc, B, T, R, cfg).total(); };
    const long long global = cfg.total_batch ? cfg.total_batch : (long long)cfg.batch_size * T * R;
    auto fitting = [&] { return largest_fitting_batch(T, R, global, available, bytes); };
    const char* limit = cfg.device_memory > 0 ? "allowed (--device-memory)" : "free";
    auto too_big = [&] {
        return Error(strf("the model does not fit even with a micro-batch of 1×%d: %s, but %s is %s", T,
                          Trainer::memory_use(mc, 1, T, R, cfg).describe().c_str(), format_bytes(available).c_str(),
                          limit));
    };
    if (cfg.batch_size == 0) {  // auto
        check_whole_sequences(global, T, R);
        if (available <= 0)
            throw UsageError("--batch-size auto needs to know the memory it may fill: no GPU was found, so pass "
                             "--device-memory (e.g. 80GB)");
        cfg.batch_size = fitting();
        if (cfg.batch_size == 0) throw too_big();
        if (comm.rank == 0)
            printf("micro-batch chosen from memory: B=%d, the largest that fits in %s and splits the global batch\n",
                   cfg.batch_size, format_bytes(available).c_str());
    }
    BatchPlan plan = plan_batch(cfg.batch_size, T, R, cfg.total_batch);
    check_activation_sizes(mc, plan);
    if (available > 0 && bytes(plan.B) > available) {
        int B = fitting();
        if (B == 0) throw too_big();
        std::string fix = cfg.total_batch ? strf("--batch-size %d (or --batch-size auto)", B)
                                          : strf("--batch-size %d --total-batch %lld", B, global);
        throw Error(strf("a micro-batch of %d×%d needs %s per replica, but %s is %s; the largest micro-batch that "
                         "fits and splits the global batch is %s",
                         plan.B, T, format_bytes(bytes(plan.B)).c_str(), format_bytes(available).c_str(), limit,
                         fix.c_str()));
    }
    return plan;
}

// A sample takes one forward pass per token, and a stop request waits for it (host/stop.h):
// its length is bounded at SAMPLE_CONTEXTS times the model's context, which is already far
// beyond what a sample is read for.
constexpr int SAMPLE_CONTEXTS = 16;
inline void check_sample_length(const Config& cfg, const ModelConfig& mc) {
    const long long most = (long long)SAMPLE_CONTEXTS * mc.maxT;
    if (cfg.sample_every > 0 && cfg.sample_len > most)
        throw Error(strf("--sample-len %s is more than %d times the model's context of %s tokens (at most %s): each "
                         "token of a sample is a forward pass, and the run waits for it",
                         with_commas(cfg.sample_len).c_str(), SAMPLE_CONTEXTS, with_commas(mc.maxT).c_str(),
                         with_commas(most).c_str()));
}

// --train-tokens: the steps that many tokens make at `per_step` tokens per step, rounded
// down; `division` gets the arithmetic, as printed at the start.
inline int steps_from_tokens(long long tokens, long long per_step, std::string& division) {
    long long steps = tokens / per_step, dropped = tokens - steps * per_step;
    if (steps < 1)
        throw Error(strf("--train-tokens %s is less than one step of %s tokens", with_commas(tokens).c_str(),
                         with_commas(per_step).c_str()));
    if (steps > INT_MAX)
        throw Error(strf("--train-tokens %s / %s tokens per step = %s steps, more than %s", with_commas(tokens).c_str(),
                         with_commas(per_step).c_str(), with_commas(steps).c_str(), with_commas(INT_MAX).c_str()));
    division = strf("%s tokens / %s tokens per step = %s steps", with_commas(tokens).c_str(),
                    with_commas(per_step).c_str(), with_commas(steps).c_str());
    division += dropped ? strf(" (rounding down leaves out the last %s tokens)", with_commas(dropped).c_str())
                        : " exactly";
    return (int)steps;
}

inline LrSchedule lr_schedule(const Config& cfg, int steps) {
    return {cfg.lr, cfg.warmup, steps, cfg.lr_final_frac, cfg.lr_schedule == "constant"};
}

// A resumed run whose --steps differs from that of the checkpoint's run. The cosine depends
// on the run's length, so the learning rate would jump: refused, unless --extend 1 asks for
// the cosine to be recomputed over the new length (or the schedule is constant). Returns a
// note for the log, or "".
inline std::string check_schedule_fits(const TrainState& st, const std::string& state_file, const Config& cfg) {
    if (st.run_steps == 0 || st.run_steps == cfg.steps) return "";  // (0: a state from before run lengths)
    std::string change = strf("the checkpoint's run had --steps %s, this one has %s", with_commas(st.run_steps).c_str(),
                              with_commas(cfg.steps).c_str());
    if (cfg.lr_schedule == "constant") return "note: " + change + "; the learning rate is constant, so only the length changes";
    // step t trains with schedule.at(t - 1)
    float last = lr_schedule(cfg, st.run_steps).at(st.step - 1), next = lr_schedule(cfg, cfg.steps).at(st.step);
    std::string jump = strf("the learning rate goes from %.2e at step %s to %.2e at step %s", last,
                            with_commas(st.step).c_str(), next, with_commas(st.step + 1).c_str());
    if (!cfg.extend)
        throw Error(strf("'%s': %s, and the cosine schedule depends on the length: %s; pass --steps %d to continue "
                         "that run as planned, --extend 1 to recompute the cosine over %d steps, or --lr-schedule "
                         "constant",
                         state_file.c_str(), change.c_str(), jump.c_str(), st.run_steps, cfg.steps));
    return strf("extending the run (--extend 1): %s; the cosine is recomputed over %s steps, so %s", change.c_str(),
                with_commas(cfg.steps).c_str(), jump.c_str());
}

// Warns when data made of byte tokens meets a model with a larger vocabulary: it trains,
// but on the wrong tokenization (e.g. text_to_shards.py --tokenizer bytes without --vocab 256).
inline std::string byte_level_warning(const DataLoader& data, const char* which, int V) {
    if (V <= 256 || data.leading_max_token() >= 256) return "";
    return strf("warning: the %s data looks byte-level: the first tokens of %s are all below 256, but the model's "
                "vocabulary has V = %s (made with --tokenizer bytes? then train with --vocab 256)",
                which, data.num_shards() == 1 ? ("'" + data.first_shard_name() + "'").c_str() : "every shard",
                with_commas(V).c_str());
}

// One training run, in the phases run_training() calls in turn: set up (options, shape,
// batch plan, data), plan (the replicas agree, the plan in numbers), restore (model,
// optimizer state, where to continue), loop (the optimizer steps, with evaluation and
// checkpoints) and finish (the average speed, or where a stopped run saved).
template <class Trainer>
class TrainingRun {
public:
    explicit TrainingRun(const Comm& comm) : comm(comm), main_rank(comm.rank == 0) {}

    // ---- set up: options, model shape, batch plan, data, evaluation file, tokenizer.
    // False after --help.
    bool set_up(int argc, char** argv) {
        if (!parse_command_line(argc, argv, cfg)) return false;
        Trainer::check_options(cfg);
        if (cfg.threads == 0) check_omp_num_threads();  // --threads, when given, overrides it
        device = device_speed(cfg.device, cfg.device_tflops, cfg.link_gbps);
        comm.set_watchdog({cfg.comm_timeout, {}});
        check_checkpoint_to_resume();

        // model shape: from a checkpoint, or from the options
        mc = model_shape(cfg);
        builtin = cfg.train_data.empty();
        if (cfg.seq_len > mc.maxT)
            throw Error(strf("--seq-len %d is longer than the model's maximum sequence length %d", cfg.seq_len, mc.maxT));
        check_sample_length(cfg, mc);
        // plan first, then touch the device: memory decides the micro-batch before any kernel
        // is timed or anything allocated; a resumed run keeps the choices of its checkpoint
        adopt_recorded_choices();
        double available = 0;
        plan = plan_micro_batch<Trainer>(cfg, mc, comm, available);
        Trainer::choose_kernels(cfg, mc, plan, available, comm);
        if (cfg.train_tokens > 0) cfg.steps = steps_from_tokens(cfg.train_tokens, plan.global_tokens(), division);
        read_data();
        return true;
    }

    // ---- plan: every replica must agree on what it is about to do (every option, the
    // model's shape, the batch split and the data); then the plan, in numbers. False for a
    // dry run, which ends here.
    bool agree_and_plan() {
        std::vector<std::pair<std::string, std::string>> agreed;
        for (const Option& o : option_table(cfg)) agreed.push_back({std::string("--") + o.name, option_value_string(o)});
        for (const ShapeField& f : SHAPE_FIELDS) agreed.push_back({strf("the model's %s", f.name), std::to_string(mc.*f.value)});
        agreed.push_back({"the accumulation steps", std::to_string(plan.A)});
        if (train_data && val_data) {
            agreed.push_back({"the training data", train_data->identity().describe()});
            agreed.push_back({"the validation data", val_data->identity().describe()});
        }
        comm.check_agree(agreed);
        std::vector<std::string> places = comm.allgather(strf("%s, pid %d", comm.host.c_str(), (int)getpid()));
        comm.set_watchdog({cfg.comm_timeout, places});
        if (comm.world > 1)
            for (int r = 0; r < comm.world; r++) say(strf("rank %d on %s", r, places[r].c_str()));

        say(strf("model: L=%d NH=%d C=%d maxT=%d V=%d Vp=%d, %s parameters", mc.L, mc.NH, mc.C, mc.maxT, mc.V, mc.Vp,
                 with_commas(mc.num_params()).c_str()));
        if (!division.empty()) say("steps from --train-tokens: " + division);
        say(describe_plan(plan, cfg.steps));
        if (cfg.val_every > 0 && val_data)
            say(strf("validation: %s tokens, %s sequences of %d%s, split over the replicas", with_commas(val.tokens()).c_str(),
                     with_commas(val.total).c_str(), plan.T, validation_rounding(val, cfg.val_tokens).c_str()));
        if (!hellaswag.empty())
            say(strf("HellaSwag: %s examples from '%s', %s%s", with_commas(hellaswag.size()).c_str(), cfg.hellaswag.c_str(),
                     eval_every == INT_MAX ? "at the start and the end" : strf("every %d steps", eval_every).c_str(),
                     comm.world > 1 ? ", split over the replicas" : ""));
        say("memory per replica: " + Trainer::memory_use(mc, plan.B, plan.T, plan.R, cfg).describe());
        say(strf("%s; communication: %s, %d replica%s%s", Trainer::hardware(cfg, comm).c_str(), comm.backend_name(),
                 comm.world, comm.world == 1 ? "" : "s",
                 plan.R != comm.world ? strf(" (the plan is for --replicas %d)", plan.R).c_str() : ""));
        const SyncTypes sync{cfg.grad_sync_dtype == "bf16" ? 2 : 4,
                             cfg.zero && plan.R > 1 ? Trainer::GATHERED_WEIGHT_BYTES : 0};
        for (const std::string& line : describe_costs(mc, plan, cfg.steps, device, sync)) say(line);
        if (cfg.dry_run) {
            for (const std::string& line : accumulation_table(mc, plan, cfg.steps, device, sync.grad_bytes)) say(line);
            Config with = cfg;
            auto memory = [&](int R, int zero) {
                with.zero = zero;
                return Trainer::memory_use(mc, plan.B, plan.T, R, with).total();
            };
            for (const std::string& line : zero_table(mc, plan, Trainer::GATHERED_WEIGHT_BYTES, memory, sync.grad_bytes))
                say(line);
            for (const std::string& line : Trainer::kernel_plan(mc, plan, cfg, device)) say(line);
            return false;
        }
        return true;
    }

    // ---- restore: the model, its optimizer state, and where to continue from. False when
    // the run in --out-dir is already complete.
    bool restore() {
        m = std::make_unique<Trainer>(mc, plan, cfg, comm);
        if (!cfg.load.empty()) load_model_params(cfg.load, mc, m->params());
        else init_params_gpt2(m->params(), mc, cfg.seed);

        // -n 0 trains nothing and writes nothing: it evaluates the model and samples from it
        writes = main_rank && !cfg.out_dir.empty() && cfg.steps > 0;
        sample_rng = Rng(cfg.sample_seed);
        noise = NoiseScale(cfg.noise_ema, plan);
        int resume_step = cfg.out_dir.empty() ? -1 : latest_checkpoint(cfg.out_dir);
        if (cfg.resume && resume_step >= 0) {
            if (!resume_from(resume_step)) return false;
        } else if (cfg.resume == RESUME_AUTO) {
            say("--resume auto: no checkpoint in '" + cfg.out_dir + "' yet, so a fresh run from step 0");
        } else if (resume_step >= 0 && cfg.steps > 0) {
            throw Error(strf("'%s' already holds checkpoints up to step %d; pass --resume 1 to continue that run, or "
                             "choose another --out-dir",
                             cfg.out_dir.c_str(), resume_step));
        }

        m->upload();  // parameters and optimizer state to where the trainer computes
        open_log();
        if (tokenizer.pieces.empty() && mc.V > 256 && cfg.sample_every > 0)
            say("note: no --tokenizer given, samples print token ids above 255 as <id>");
        if (cfg.steps > 0 && !noise.start_note().empty()) say(noise.start_note());
        return true;
    }

    // ---- loop: the optimizer steps, each followed by what is due after it (evaluation, a
    // checkpoint). A signal (host/stop.h) ends the loop after the step it arrives in, with a
    // checkpoint of that step.
    void loop() {
        if (start == 0) evaluate(0);  // the model as it starts (and all that -n 0 does)
        // from here on there is training to lose (before, a signal ends the process as usual)
        catch_stop_signals();
        comm.stop->local = stop_request();
        schedule = lr_schedule(cfg, cfg.steps);
        opt = AdamWConfig{cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay};
        replica_flops = flops_per_step(mc, plan) / plan.R;
        last_checkpoint_time = std::chrono::steady_clock::now();
        for (int step = start + 1; step <= cfg.steps; step++) {
            train_one_step(step);
            // a stop request that came during the evaluation stops the run after it, not after
            // one more step: the replicas agree on it again (evaluation is theirs together)
            if (evaluate(step) && !comm.stop->agreed) comm.agree_stop();
            bool saved = checkpoint_due(step);
            if (saved) save_checkpoint(step);
            if (comm.stop->agreed) {  // the same on every replica: all stop after this step
                if (!saved) save_checkpoint(step);
                stopped_at = step;
                return;
            }
        }
    }

    // ---- finish: the average speed and, for a run stopped by a signal, where it saved and
    // how to continue. Returns the exit status: 0, or 128 + the signal this process received.
    int finish() {
        if (timed_steps > 0) {
            double seconds = total_ms / timed_steps / 1000.0;
            int last = stopped_at ? stopped_at : cfg.steps;
            say(strf("average: %.1f ms/step, %s tokens/s, per replica %s (steps %s..%s)", 1000.0 * seconds,
                     with_commas((long long)(plan.global_tokens() / seconds)).c_str(),
                     rate_text(replica_flops / seconds, ", ").c_str(), with_commas(start + 2).c_str(),
                     with_commas(last).c_str()));
        }
        if (!stopped_at) return 0;
        if (cfg.out_dir.empty())
            say(strf("stopped by a signal after step %s of %s; nothing saved (no --out-dir)", with_commas(stopped_at).c_str(),
                     with_commas(cfg.steps).c_str()));
        else
            say(strf("stopped by a signal after step %s of %s; saved %s and %s; to continue, run the same command "
                     "with --resume 1",
                     with_commas(stopped_at).c_str(), with_commas(cfg.steps).c_str(),
                     model_path(cfg.out_dir, stopped_at).c_str(), state_path(cfg.out_dir, stopped_at).c_str()));
        comm.barrier();  // no replica ends (and so ends the job) before rank 0 has saved
        int sig = stop_signal_received();
        return sig ? 128 + sig : 0;
    }

private:
    const Comm& comm;
    const bool main_rank;
    Config cfg;
    DeviceSpeed device;
    ModelConfig mc;
    bool builtin = true;
    BatchPlan plan;
    std::string division;  // --train-tokens: the arithmetic of the steps, as printed
    std::unique_ptr<DataLoader> train_data, val_data;  // null only in a dry run without the data
    ValidationSet val;
    std::vector<EvalExample> hellaswag;
    int eval_every = INT_MAX;
    Tokenizer tokenizer;
    std::vector<int> prompt;
    std::unique_ptr<Trainer> m;
    bool writes = false;  // this rank writes the log and the checkpoints
    int start = 0;        // the step the run continues from
    Rng sample_rng;
    RunLog log;
    NoiseScale noise{0, BatchPlan{}};  // the gradient noise scale (host/noise.h), set in restore()
    LrSchedule schedule{};
    AdamWConfig opt{};
    // speed: the step time's moving average (for the ETA), the sum over the timed steps, and
    // the model FLOPs each replica does per step (host/cost.h), for the FLOP/s and the MFU
    double ema_ms = 0, total_ms = 0, replica_flops = 0;
    int timed_steps = 0;
    const char* rate_unit = nullptr;
    std::chrono::steady_clock::time_point last_checkpoint_time;
    int stopped_at = 0;  // the step after which a signal stopped the run; 0 = not stopped

    void say(const std::string& s) const {
        if (main_rank) printf("%s\n", s.c_str()), fflush(stdout);
    }

    // The Config string of a run-time choice's option ("attention").
    std::string& choice_option(const std::string& name) {
        for (const Option& o : option_table(cfg))
            if (name == o.name && !strcmp(o.kind, "str")) return *(std::string*)o.value;
        throw Error("no string option --" + name + " for a run-time choice");  // a trainer's mistake
    }
    // What this run computes with, for its state files.
    RunChoices choices_made() {
        RunChoices made;
        for (const std::string& name : Trainer::run_time_choices()) made.entries.push_back({name, choice_option(name)});
        return made;
    }

    // --resume 1 where --out-dir holds no checkpoint stops before anything is printed: a typo in
    // --out-dir would otherwise start the run over from step 0, said in one line of many.
    // --resume auto is for a command that is simply run again (restore() says it starts fresh).
    void check_checkpoint_to_resume() const {
        if (cfg.resume != 1 || cfg.dry_run) return;
        if (cfg.out_dir.empty())
            throw Error("--resume 1 needs the --out-dir that holds the checkpoints, not \"\"");
        if (latest_checkpoint(cfg.out_dir) < 0)
            throw Error(strf("--resume 1: no checkpoint in '%s' (a model_*.bin with its state_*.bin); check --out-dir, "
                             "or pass --resume auto to start from step 0 when there is none",
                             cfg.out_dir.c_str()));
    }

    // Before memory is planned: a resumed run takes the run-time choices its checkpoint recorded
    // (host/checkpoint.h, RunChoices) for every option left at auto. Choosing again could pick
    // another kernel (timing differs from one process to the next), and the run would no longer
    // compute what the uninterrupted one does. An option named on the command line wins, and
    // the run says that its arithmetic changes there.
    void adopt_recorded_choices() {
        const std::vector<std::string> names = Trainer::run_time_choices();
        if (!cfg.resume || cfg.out_dir.empty() || cfg.dry_run || names.empty()) return;
        const int step = latest_checkpoint(cfg.out_dir);
        if (step < 0) return;
        const std::string file = state_path(cfg.out_dir, step);
        TrainState st = read_state_header(file, mc.num_params());
        for (const std::string& name : names) {
            std::string& value = choice_option(name);
            const std::string recorded = st.choices.get(name);
            if (recorded.empty()) {
                if (value == "auto")
                    say(strf("note: '%s' does not record what --%s auto chose (%s): it is chosen again, and may differ "
                             "from that run's",
                             file.c_str(), name.c_str(),
                             st.choices_recorded ? "it was written by a trainer without that choice"
                                                 : "it predates recorded choices"));
                continue;
            }
            if (value == "auto") {
                value = recorded;
                try {
                    if (recorded == "auto") throw UsageError("auto is not a choice");
                    validate_config(cfg);
                } catch (const UsageError& e) {
                    throw Error(strf("'%s' records --%s %s, which this trainer cannot take: %s", file.c_str(),
                                     name.c_str(), recorded.c_str(), e.what()));
                }
                say(strf("--%s auto: %s, as recorded in '%s' (a resumed run keeps its checkpoint's choices)",
                         name.c_str(), recorded.c_str(), file.c_str()));
            } else if (value != recorded) {
                say(strf("note: the run in '%s' computed with --%s %s until step %d; --%s %s changes the arithmetic "
                         "from there, so this run will not reproduce an uninterrupted one bit for bit",
                         cfg.out_dir.c_str(), name.c_str(), recorded.c_str(), st.step, name.c_str(), value.c_str()));
            }
        }
    }

    // A dry run goes on without a file it cannot read, saying so: a plan is wanted before
    // the data is downloaded. A real run stops.
    template <class Read>
    void read_unless_dry_run(Read read) {
        try {
            read();
        } catch (const UsageError&) {
            throw;
        } catch (const Error& e) {
            if (!cfg.dry_run) throw;
            say(std::string("dry run, planning without it: ") + e.what());
        }
    }

    // The data, the evaluation file, the tokenizer and the prompt.
    void read_data() {
        if (builtin) {
            say(strf("data: built-in corpus (byte tokens); its entropy is %.4f nats/token, the loss of a perfect model",
                     corpus::entropy_per_token()));
            if (mc.V < 256) throw Error(strf("the built-in corpus needs a vocabulary of at least 256, the model has %d", mc.V));
            train_data = std::make_unique<DataLoader>("<built-in corpus, train>", corpus::generate(4 << 20, 1), mc.V);
            val_data = std::make_unique<DataLoader>("<built-in corpus, val>", corpus::generate(256 << 10, 2), mc.V);
        } else {
            if (cfg.val_data.empty()) throw UsageError("--train-data needs --val-data as well");
            read_unless_dry_run([&] {
                train_data = std::make_unique<DataLoader>(expand_glob(cfg.train_data), mc.V);
                val_data = std::make_unique<DataLoader>(expand_glob(cfg.val_data), mc.V);
                say(strf("data: %zu train shard(s), %s tokens; %zu val shard(s), %s tokens", train_data->num_shards(),
                         with_commas(train_data->total_tokens()).c_str(), val_data->num_shards(),
                         with_commas(val_data->total_tokens()).c_str()));
            });
        }
        if (train_data && val_data) {
            if (!builtin)  // (the built-in corpus is byte tokens, and says so, whatever the vocabulary)
                for (const std::string& w : {byte_level_warning(*train_data, "training", mc.V),
                                             byte_level_warning(*val_data, "validation", mc.V)})
                    if (!w.empty()) say(w);
            train_data->configure(plan.B, plan.T, plan.A, plan.R, comm.rank, cfg.shuffle, cfg.seed);
            if (cfg.val_every > 0) val = validation_set(*val_data, cfg.val_tokens, plan.T, comm.rank, comm.world);
        }
        if (!cfg.hellaswag.empty()) read_unless_dry_run([&] { hellaswag = read_eval_file(cfg.hellaswag, mc.V, plan.T); });
        // HellaSwag with the validation loss unless --eval-every says otherwise; with neither, at the start and end
        eval_every = cfg.eval_every > 0 ? cfg.eval_every : cfg.val_every > 0 ? cfg.val_every : INT_MAX;
        if (!cfg.tokenizer.empty()) read_unless_dry_run([&] { tokenizer = Tokenizer::load(cfg.tokenizer); });
        if (!tokenizer.pieces.empty() && (long long)tokenizer.pieces.size() != mc.V)
            throw Error(strf("'%s' holds %s tokens, but the model's vocabulary has V = %s: a tokenizer of another model "
                             "would print the wrong text",
                             cfg.tokenizer.c_str(), with_commas(tokenizer.pieces.size()).c_str(),
                             with_commas(mc.V).c_str()));
        prompt = parse_prompt(cfg.prompt, tokenizer, mc.V);
    }

    // Loads the checkpoint of `step` in --out-dir and checks that it fits this run. False
    // when that run is complete.
    bool resume_from(int step) {
        std::string model_file = model_path(cfg.out_dir, step), state_file = state_path(cfg.out_dir, step);
        std::string differs = shape_difference(read_model_header(model_file), mc);
        if (!differs.empty())
            throw Error(strf("'%s' has another model shape than this run: %s (checkpoint against this run)",
                             model_file.c_str(), differs.c_str()));
        load_model_params(model_file, mc, m->params());
        TrainState st = load_state(state_file, m->adam_m(), m->adam_v(), mc.num_params());
        std::string note = check_state_fits(st, state_file, plan, *train_data,
                                            builtin ? "built-in corpus" : "'" + cfg.train_data + "'", cfg.steps);
        if (!note.empty()) say(note);
        train_data->set_position(st.data);
        sample_rng.state = st.sample_rng;
        noise.restore(st.noise);
        start = st.step;
        say(strf("resumed from step %s in %s", with_commas(start).c_str(), cfg.out_dir.c_str()));
        if (start == cfg.steps) {
            say(strf("the run in '%s' is complete (step %d of --steps %d): nothing to do; raise --steps to train "
                     "further",
                     cfg.out_dir.c_str(), start, cfg.steps));
            return false;
        }
        note = check_schedule_fits(st, state_file, cfg);
        if (!note.empty()) say(note);
        return true;
    }

    // The output directory, freed of an interrupted write's temporary files, and the log,
    // appended to when resuming; one line says where the log and the checkpoints go.
    void open_log() {
        if (!writes) return;
        make_dir(cfg.out_dir);
        for (const std::string& name : remove_stale_temporaries(cfg.out_dir))
            say(strf("removed '%s/%s', left by an interrupted checkpoint write", cfg.out_dir.c_str(), name.c_str()));
        log.open(cfg.out_dir + "/log.jsonl", start > 0);
        log.write(strf("{\"type\":\"config\",\"L\":%d,\"NH\":%d,\"C\":%d,\"V\":%d,\"Vp\":%d,\"maxT\":%d,\"B\":%d,"
                       "\"T\":%d,\"A\":%d,\"R\":%d,\"global_batch\":%lld,\"steps\":%d,\"start\":%d,\"lr\":%g%s}",
                       mc.L, mc.NH, mc.C, mc.V, mc.Vp, mc.maxT, plan.B, plan.T, plan.A, plan.R,
                       plan.global_tokens(), cfg.steps, start, cfg.lr,
                       builtin ? strf(",\"corpus_entropy\":%.6f", corpus::entropy_per_token()).c_str() : ""));
        std::string when = "at the end";
        if (cfg.ckpt_every > 0) when += strf(", every %d steps", cfg.ckpt_every);
        if (cfg.ckpt_minutes > 0) when += strf(", every %g minutes", cfg.ckpt_minutes);
        say(strf("output: log %s/log.jsonl; checkpoints %s/model_NNNNNNNN.bin and state_NNNNNNNN.bin, %s, and on "
                 "Ctrl-C or SIGTERM",
                 cfg.out_dir.c_str(), cfg.out_dir.c_str(), when.c_str()));
    }

    // A NaN or an infinity stops the run with a line that says where it came from. The
    // weights were finite when the run started (init, or checked when loaded) and the
    // tokens are range-checked integers, so if the weights are not finite now, this run's
    // updates made them so: the learning rate is the likely cause. If they are finite, the
    // forward pass itself overflowed: after updates, training diverged; before any, the
    // loaded weights are to blame, not --lr. Every rank sees the same loss and gradient
    // norm (both are reduced over the replicas), so rank 0 reports and the others stop quietly.
    [[noreturn]] void stop_non_finite(const std::string& what, bool after_updates) {
        m->download();
        NonFinite bad = find_non_finite(m->params(), mc);
        std::string msg =
            bad.count > 0 ? strf("%s: this run's updates made the weights non-finite, they hold %s; lower --lr?",
                                 what.c_str(), bad.describe().c_str())
            : !after_updates
                ? what + ", before any update of this run: the weights are finite, so the model overflows on this data"
                : what + "; the weights and the data were finite: training diverged, lower --lr?";
        if (main_rank) throw Error(msg);
        throw ReportedByAnotherRank(msg);
    }

    // What is due after `step` optimizer steps (0: before the first): the validation loss,
    // HellaSwag and a sample, on one line each kind; all before that step's checkpoint, so a
    // run resumed from it continues with exactly what an uninterrupted run does next.
    bool due(int every, int step) const { return every > 0 && (step % every == 0 || step == cfg.steps); }
    // True when something was evaluated (the same on every replica).
    bool evaluate(int step) {
        long long tokens_seen = (long long)step * plan.global_tokens();
        std::string line;
        if (due(cfg.val_every, step)) {
            double loss = validation_loss(*m, val, plan.B, comm);
            if (!std::isfinite(loss))
                stop_non_finite(strf("the validation loss is %s at step %d", number(loss).c_str(), step), step > start);
            line += strf(" | val loss %.4f", loss) + noise.text();
            if (writes) log.val(step, tokens_seen, loss);
        }
        if (!hellaswag.empty() && due(eval_every, step)) {
            HellaSwagResult h = hellaswag_accuracy(*m, hellaswag, plan.B, plan.T, comm);
            line += strf(" | HellaSwag acc_norm %.4f, acc %.4f", h.acc_norm, h.acc);
            if (writes) log.hellaswag(step, tokens_seen, h.acc_norm, h.acc, h.examples);
        }
        if (!line.empty()) say("step " + with_commas(step) + line);
        // a sample at every --sample-every steps after the first, and at the end (-n 0: at once)
        const bool sample = due(cfg.sample_every, step) && (step > 0 || cfg.steps == 0);
        if (sample && main_rank) {
            std::vector<int> out = generate(*m, mc, plan.T, prompt, cfg.sample_len, cfg.temperature, cfg.top_k, sample_rng);
            std::string shown = decode(tokenizer, out, 0, prompt.size()), text = decode(tokenizer, out, prompt.size(), out.size());
            say(strf("---- sample at step %s, its prompt in brackets ----\n[%s]%s\n----------------",
                     with_commas(step).c_str(), terminal_text(shown, false).c_str(), terminal_text(text).c_str()));
            if (writes) log.sample(step, shown, text);
        }
        return !line.empty() || sample;
    }

    // A checkpoint after `step`: at the end, every --ckpt-every steps, and once --ckpt-minutes
    // have passed since the last one (rank 0 alone writes, so its clock alone decides; with
    // --zero 1 every replica takes part in the save, so rank 0's decision is broadcast).
    bool checkpoint_due(int step) const {
        double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_checkpoint_time).count() / 60;
        bool by_time = cfg.ckpt_minutes > 0 && minutes >= cfg.ckpt_minutes;
        if (cfg.zero && cfg.ckpt_minutes > 0 && comm.world > 1) {
            char due = by_time;
            comm.broadcast(&due, 1);
            by_time = due;
        }
        return step == cfg.steps || (cfg.ckpt_every > 0 && step % cfg.ckpt_every == 0) || by_time;
    }

    // Writes the state, then the model (host/checkpoint.h): a crash between the two leaves an
    // incomplete pair, which --resume skips. Neither is written when either would hold a
    // non-finite value.
    void save_checkpoint(int step) {
        if (cfg.out_dir.empty()) return;
        m->download();  // on every replica: with --zero 1 a collective
        if (!writes) return;
        NonFinite bad = find_non_finite(m->params(), mc);
        if (bad.count > 0)
            throw Error(strf("not writing the checkpoint of step %d: this run's updates made the weights non-finite, "
                             "they hold %s; lower --lr?",
                             step, bad.describe().c_str()));
        if (size_t bad_moments = count_bad_moments(m->adam_m(), m->adam_v(), mc.num_params()))
            throw Error(strf("not writing the checkpoint of step %d: this run's updates made %s of AdamW's moments "
                             "non-finite; lower --lr?",
                             step, with_commas((long long)bad_moments).c_str()));
        TrainState st{step, train_data->position(), sample_rng.state, plan.global_tokens(), train_data->identity(),
                      cfg.steps, noise.averages(), true, choices_made()};
        save_checkpoint_pair(cfg.out_dir, step, st, m->adam_m(), m->adam_v(), mc, m->params());
        std::string removed;
        for (int old : prune_checkpoints(cfg.out_dir, cfg.keep_checkpoints))
            removed += (removed.empty() ? " (removed step " : ", ") + std::to_string(old);
        say(strf("checkpoint: %s%s", model_path(cfg.out_dir, step).c_str(), removed.empty() ? "" : (removed + ")").c_str()));
        last_checkpoint_time = std::chrono::steady_clock::now();
    }

    // Given the device's peak, the MFU; shown in TFLOP/s once a step reaches 1 TFLOP/s.
    double mfu(double flops_per_s) const { return device.tflops > 0 ? flops_per_s / (device.tflops * 1e12) : -1.0; }
    std::string rate_text(double flops_per_s, const char* mfu_separator) {
        if (!rate_unit) rate_unit = flops_per_s >= 1e12 ? "TFLOP/s" : "GFLOP/s";
        std::string s = strf("%.3g %s", flops_per_s / (rate_unit[0] == 'T' ? 1e12 : 1e9), rate_unit);
        if (mfu(flops_per_s) >= 0) s += strf("%sMFU %.1f%%", mfu_separator, 100 * mfu(flops_per_s));
        return s;
    }

    // The trainer's step, timed, and its line on the console and in the log.
    void train_one_step(int step) {
        auto t0 = std::chrono::steady_clock::now();
        float lr = schedule.at(step - 1);
        StepResult r;
        *comm.sync_ms = 0;  // the step's gradient sync adds its time (host/comm.h)
        try {
            r = m->train_step(*train_data, plan, comm, opt, lr, cfg.grad_clip, step);
            check_finite_step(r.loss, r.grad_norm, step);  // for a trainer that did not check before its update
        } catch (const NonFiniteStep& e) {
            stop_non_finite(e.what(), step > start + 1);
        }
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        ema_ms = step == start + 1 ? ms : 0.9 * ema_ms + 0.1 * ms;
        if (step > start + 1) total_ms += ms, timed_steps++;  // the first step warms caches
        double tps = plan.global_tokens() / (ms / 1000.0), flops_per_s = replica_flops / (ms / 1000.0);
        say(strf("step %5s/%s | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %s tok/s | %s | eta %s",
                 with_commas(step).c_str(), with_commas(cfg.steps).c_str(), r.loss, lr, r.grad_norm, ms,
                 with_commas((long long)tps).c_str(), rate_text(flops_per_s, " | ").c_str(),
                 format_duration((cfg.steps - step) * ema_ms / 1000.0).c_str()));
        noise.add(r.grad_norm_small, r.grad_norm);
        if (writes)
            log.train(step, cfg.steps, (long long)step * plan.global_tokens(), r.loss, lr, r.grad_norm, ms,
                      *comm.sync_ms, tps, flops_per_s, mfu(flops_per_s), noise.json_fields());
    }
};

template <class Trainer>
int run_training(int argc, char** argv, const Comm& comm) {
    TrainingRun<Trainer> run(comm);
    if (!run.set_up(argc, argv)) return 0;  // --help
    if (!run.agree_and_plan()) return 0;    // a dry run ends with the plan
    if (!run.restore()) return 0;           // the run in --out-dir is complete
    run.loop();
    return run.finish();
}

// main() of both trainers: runs the training and turns every error into one line on
// stderr and an exit status (2 for a bad command line, 1 for anything else), ending all
// replicas so that none waits forever for a rank that has stopped.
template <class Trainer>
int main_with_errors(int argc, char** argv) {
    const char* program = program_name(argv[0]);
    Comm comm;
    try {
        comm = Trainer::connect(&argc, &argv);
        int code = run_training<Trainer>(argc, argv, comm);
        comm.finalize();
        return code;
    } catch (const UsageError& e) {
        fprintf(stderr, "%s: %s\n", program, e.what());
        comm.abort_all(2);
    } catch (const ReportedByAnotherRank&) {
        // the reporting rank prints the line and ends the job; this is in case it cannot
        std::this_thread::sleep_for(std::chrono::seconds(10));
        comm.abort_all(1);
    } catch (const Error& e) {
        if (comm.world > 1) fprintf(stderr, "%s: error (rank %d): %s\n", program, comm.rank, e.what());
        else fprintf(stderr, "%s: error: %s\n", program, e.what());
        comm.abort_all(1);
    } catch (const std::bad_alloc&) {
        fprintf(stderr, "%s: error: out of memory\n", program);
        comm.abort_all(1);
    }
}
