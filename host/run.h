// A training run around the step: set-up, the loop over optimizer steps, validation,
// samples, logs and checkpoints. Both trainers share it; each brings its own Trainer,
// which owns the model and implements the step:
//
//   static Comm connect(int* argc, char*** argv)  start-up of the replicas (Comm::init)
//   Trainer(const ModelConfig&, const BatchPlan&, const Config&, const Comm&)
//   static std::string hardware(const Config&, const Comm&)  threads or GPU, for the log
//   static double activation_bytes(const ModelConfig&, int B, int T, const Config&)
//   float* params(); float* adam_m(); float* adam_v();  host copies, num_params() each
//   void upload();    host copies -> where the trainer computes (no-op on the CPU)
//   void download();  the reverse, before a checkpoint is written
//   StepResult step(DataLoader&, const BatchPlan&, const Comm&, const AdamWConfig&,
//                   float lr, float grad_clip, int t)    one optimizer step, t = 1, 2, ...
//   float evaluate(DataLoader&, int batches, const BatchPlan&, const Comm&)
//   const float* next_token_logits(const int* context, int T)  host row of Vp logits
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "batch.h"
#include "checkpoint.h"
#include "cli.h"
#include "comm.h"
#include "corpus.h"
#include "data.h"
#include "log.h"
#include "rng.h"
#include "sample.h"
#include "schedule.h"

struct AdamWConfig {
    float beta1, beta2, eps, weight_decay;
};

struct StepResult {
    float loss;       // mean training loss over the global batch
    float grad_norm;  // global gradient norm before clipping
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

inline std::string decode(const Tokenizer& tok, const std::vector<int>& tokens, size_t from) {
    std::string s;
    for (size_t i = from; i < tokens.size(); i++) s += tok.decode(tokens[i]);
    return s;
}

// The prompt is text for byte-level models and comma-separated token ids with a
// tokenizer (this trainer has no BPE encoder). Empty: the end-of-text token, or a newline.
inline std::vector<int> parse_prompt(const std::string& text, const Tokenizer& tok, int V) {
    std::vector<int> ids;
    if (text.empty()) ids.push_back(tok.eot >= 0 ? tok.eot : '\n');
    else if (tok.pieces.empty()) for (unsigned char ch : text) ids.push_back(ch);
    else {
        size_t pos = 0;
        while (pos < text.size()) {
            size_t end = text.find(',', pos);
            std::string item = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
            char* stop;
            long id = strtol(item.c_str(), &stop, 10);
            if (item.empty() || *stop) throw UsageError("--prompt with a tokenizer expects token ids like 464,318");
            ids.push_back((int)id);
            pos = end == std::string::npos ? text.size() : end + 1;
        }
    }
    for (int id : ids)
        if (id < 0 || id >= V) throw UsageError(strf("--prompt token %d is out of range for vocabulary %d", id, V));
    return ids;
}

template <class Trainer>
int run_training(int argc, char** argv, const Comm& comm) {
    Config cfg;
    if (!parse_command_line(argc, argv, cfg)) return 0;
    const bool main_rank = comm.rank == 0;
    auto say = [&](const std::string& s) {
        if (main_rank) printf("%s\n", s.c_str()), fflush(stdout);
    };

    // ---- model shape: from a checkpoint, or from the options
    ModelConfig mc;
    bool builtin = cfg.train_data.empty();
    if (!cfg.load.empty()) {
        mc = read_model_header(cfg.load);
    } else {
        mc.L = cfg.layers, mc.NH = cfg.heads, mc.C = cfg.channels, mc.maxT = cfg.max_seq_len;
        mc.V = cfg.vocab ? cfg.vocab : (builtin ? 256 : 50257);
        mc.Vp = cfg.padded_vocab ? cfg.padded_vocab : (mc.V + 127) / 128 * 128;
        if (mc.Vp < mc.V) throw UsageError(strf("--padded-vocab %d is smaller than --vocab %d", mc.Vp, mc.V));
    }
    if (cfg.seq_len > mc.maxT)
        throw Error(strf("--seq-len %d is longer than the model's maximum sequence length %d", cfg.seq_len, mc.maxT));
    BatchPlan plan = plan_batch(cfg.batch_size, cfg.seq_len, comm.world, cfg.total_batch);

    // ---- data
    std::unique_ptr<DataLoader> train_data, val_data;
    if (builtin) {
        say(strf("data: built-in corpus (byte tokens); its entropy is %.4f nats/token, the loss of a perfect model",
                 corpus::entropy_per_token()));
        if (mc.V < 256) throw Error(strf("the built-in corpus needs a vocabulary of at least 256, the model has %d", mc.V));
        train_data = std::make_unique<DataLoader>("<built-in corpus, train>", corpus::generate(4 << 20, 1), mc.V);
        val_data = std::make_unique<DataLoader>("<built-in corpus, val>", corpus::generate(256 << 10, 2), mc.V);
    } else {
        if (cfg.val_data.empty()) throw UsageError("--train-data needs --val-data as well");
        train_data = std::make_unique<DataLoader>(expand_glob(cfg.train_data), mc.V);
        val_data = std::make_unique<DataLoader>(expand_glob(cfg.val_data), mc.V);
        say(strf("data: %zu train shard(s), %s tokens; %zu val shard(s), %s tokens", train_data->num_shards(),
                 with_commas(train_data->total_tokens()).c_str(), val_data->num_shards(),
                 with_commas(val_data->total_tokens()).c_str()));
    }
    train_data->configure(plan.B, plan.T, plan.A, plan.R, comm.rank, cfg.shuffle, cfg.seed);
    val_data->configure(plan.B, plan.T, 1, plan.R, comm.rank, false, 0);
    int val_batches = (int)std::min<long long>(cfg.val_batches, val_data->chunks_per_epoch());

    // ---- every replica must agree on what it is about to do
    std::string agreed = strf("%d %d %d %d %d %d|%d %d %d|%lld|", mc.maxT, mc.V, mc.Vp, mc.L, mc.NH, mc.C, plan.B,
                              plan.T, plan.A, (long long)train_data->fingerprint());
    for (int i = 1; i < argc; i++) agreed += std::string(argv[i]) + " ";
    uint64_t h = 1469598103934665603ull;
    for (char ch : agreed) h = (h ^ (unsigned char)ch) * 1099511628211ull;
    comm.check_agree(h, "the configuration or the data");
    std::vector<std::string> hosts = comm.allgather(comm.host);
    if (comm.world > 1)
        for (int r = 0; r < comm.world; r++) say(strf("rank %d on %s", r, hosts[r].c_str()));

    // ---- the plan, in numbers
    say(strf("model: L=%d NH=%d C=%d maxT=%d V=%d Vp=%d, %s parameters", mc.L, mc.NH, mc.C, mc.maxT, mc.V, mc.Vp,
             with_commas(mc.num_params()).c_str()));
    say(describe_plan(plan, cfg.steps));
    double MB = 1.0 / (1 << 20), pbytes = mc.num_params() * 4.0;
    say(strf("memory per replica: parameters %.1f MB, gradients %.1f MB, AdamW state %.1f MB, activations %.1f MB",
             pbytes * MB, pbytes * MB, 2 * pbytes * MB, Trainer::activation_bytes(mc, plan.B, plan.T, cfg) * MB));
    say(strf("%s; communication: %s, %d replica%s", Trainer::hardware(cfg, comm).c_str(), comm.backend_name(),
             comm.world, comm.world == 1 ? "" : "s"));
    if (cfg.dry_run) return 0;

    // ---- model, optimizer state, and where to continue from
    Trainer m(mc, plan, cfg, comm);
    if (!cfg.load.empty()) load_model_params(cfg.load, mc, m.params());
    else init_params_gpt2(m.params(), mc, cfg.seed);

    const bool writes = main_rank && !cfg.out_dir.empty();
    int start = 0;
    Rng sample_rng(cfg.sample_seed);
    int resume_step = cfg.out_dir.empty() ? -1 : latest_checkpoint(cfg.out_dir);
    if (cfg.resume && resume_step >= 0) {
        ModelConfig saved = read_model_header(model_path(cfg.out_dir, resume_step));
        if (saved.num_params() != mc.num_params() || saved.C != mc.C || saved.L != mc.L || saved.Vp != mc.Vp)
            throw Error("the checkpoint in '" + cfg.out_dir + "' has a different model shape than this run");
        load_model_params(model_path(cfg.out_dir, resume_step), mc, m.params());
        TrainState st = load_state(state_path(cfg.out_dir, resume_step), m.adam_m(), m.adam_v(), mc.num_params());
        if (st.global_batch != plan.global_tokens())
            throw Error(strf("the checkpoint was made with a global batch of %s tokens, this run has %s; resume "
                             "with the same --total-batch (any split of it works)",
                             with_commas(st.global_batch).c_str(), with_commas(plan.global_tokens()).c_str()));
        train_data->set_position(st.data);
        sample_rng.state = st.sample_rng;
        start = st.step;
        say(strf("resumed from step %d in %s", start, cfg.out_dir.c_str()));
    } else if (cfg.resume) {
        say("no checkpoint to resume from in '" + cfg.out_dir + "': starting from step 0");
    } else if (resume_step >= 0) {
        throw Error(strf("'%s' already holds checkpoints up to step %d; pass --resume 1 to continue that run, or "
                         "choose another --out-dir",
                         cfg.out_dir.c_str(), resume_step));
    }

    m.upload();  // parameters and optimizer state to where the trainer computes

    RunLog log;
    if (writes) {
        make_dir(cfg.out_dir);
        log.open(cfg.out_dir + "/log.jsonl", start > 0);
        log.write(strf("{\"type\":\"config\",\"L\":%d,\"NH\":%d,\"C\":%d,\"V\":%d,\"Vp\":%d,\"maxT\":%d,\"B\":%d,"
                       "\"T\":%d,\"A\":%d,\"R\":%d,\"global_batch\":%lld,\"steps\":%d,\"start\":%d,\"lr\":%g}",
                       mc.L, mc.NH, mc.C, mc.V, mc.Vp, mc.maxT, plan.B, plan.T, plan.A, plan.R,
                       plan.global_tokens(), cfg.steps, start, cfg.lr));
    }
    Tokenizer tokenizer = cfg.tokenizer.empty() ? Tokenizer{} : Tokenizer::load(cfg.tokenizer);
    if (tokenizer.pieces.empty() && mc.V > 256 && cfg.sample_every > 0)
        say("note: no --tokenizer given, samples print token ids above 255 as <id>");
    std::vector<int> prompt = parse_prompt(cfg.prompt, tokenizer, mc.V);

    LrSchedule schedule{cfg.lr, cfg.warmup, cfg.steps, cfg.lr_final_frac, cfg.lr_schedule == "constant"};
    AdamWConfig opt{cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay};
    auto save_checkpoint = [&](int step) {
        if (!writes) return;
        m.download();
        TrainState st{step, train_data->position(), sample_rng.state, plan.global_tokens()};
        save_state(state_path(cfg.out_dir, step), st, m.adam_m(), m.adam_v(), mc.num_params());
        save_model(model_path(cfg.out_dir, step), mc, m.params());
        say(strf("checkpoint: %s", model_path(cfg.out_dir, step).c_str()));
    };

    // ---- the loop over optimizer steps
    double ema_ms = 0, total_ms = 0;
    int timed_steps = 0;
    for (int step = start; step <= cfg.steps; step++) {
        bool last = step == cfg.steps;
        long long tokens_seen = (long long)step * plan.global_tokens();
        if (cfg.val_every > 0 && (step % cfg.val_every == 0 || last)) {
            float val = m.evaluate(*val_data, val_batches, plan, comm);
            say(strf("val loss %.4f", val));
            if (writes) log.val(step, tokens_seen, val);
        }
        if (cfg.sample_every > 0 && main_rank && (step % cfg.sample_every == 0 || last) && step > start) {
            std::vector<int> out = generate(m, mc, plan.T, prompt, cfg.sample_len, cfg.temperature, cfg.top_k, sample_rng);
            std::string text = decode(tokenizer, out, prompt.size());
            say("---- sample ----\n" + text + "\n----------------");
            if (writes) log.sample(step, text);
        }
        if (last) break;

        auto t0 = std::chrono::steady_clock::now();
        float lr = schedule.at(step);
        StepResult r = m.step(*train_data, plan, comm, opt, lr, cfg.grad_clip, step + 1);
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (!std::isfinite(r.loss)) throw Error(strf("loss became %f at step %d; lower --lr?", r.loss, step + 1));
        ema_ms = step == start ? ms : 0.9 * ema_ms + 0.1 * ms;
        if (step > start) total_ms += ms, timed_steps++;  // the first step warms caches
        double tps = plan.global_tokens() / (ms / 1000.0);
        say(strf("step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %s tok/s | eta %s", step + 1, cfg.steps,
                 r.loss, lr, r.grad_norm, ms, with_commas((long long)tps).c_str(),
                 format_duration((cfg.steps - step - 1) * ema_ms / 1000.0).c_str()));
        if (writes) log.train(step + 1, cfg.steps, tokens_seen + plan.global_tokens(), r.loss, lr, r.grad_norm, ms, tps);
        if ((cfg.ckpt_every > 0 && (step + 1) % cfg.ckpt_every == 0) || step + 1 == cfg.steps) save_checkpoint(step + 1);
    }
    if (timed_steps > 0)
        say(strf("average: %.1f ms/step, %s tokens/s (steps 2..%d)", total_ms / timed_steps,
                 with_commas((long long)(plan.global_tokens() / (total_ms / timed_steps / 1000.0))).c_str(), cfg.steps));
    return 0;
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
    } catch (const Error& e) {
        if (comm.world > 1) fprintf(stderr, "%s: error (rank %d): %s\n", program, comm.rank, e.what());
        else fprintf(stderr, "%s: error: %s\n", program, e.what());
        comm.abort_all(1);
    } catch (const std::bad_alloc&) {
        fprintf(stderr, "%s: error: out of memory (try a smaller --batch-size)\n", program);
        comm.abort_all(1);
    }
}
