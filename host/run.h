// A training run around the step: set-up, the loop over optimizer steps, validation,
// samples, logs and checkpoints, the same for both trainers. Each trainer brings the step
// and the model behind the members of host/trainer.h, and nothing here knows more of it.
//
// Read it in the order run_training() calls the phases: set_up (options, model shape, batch
// plan, data), agree_and_plan (the replicas agree; the plan in numbers; a dry run ends
// here), restore (model, optimizer state, where to continue), loop (the optimizer steps,
// with evaluation and checkpoints), finish (the average speed, or where a stopped run saved).
// main_with_errors(), last, is main() of both trainers.
#pragma once
#include <unistd.h>

#include <algorithm>
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
#include "cluster.h"
#include "comm.h"
#include "corpus.h"
#include "cost.h"
#include "cpus.h"
#include "data.h"
#include "eval.h"
#include "log.h"
#include "model.h"
#include "noise.h"
#include "plan.h"
#include "rng.h"
#include "sample.h"
#include "schedule.h"
#include "stop.h"
#include "trainer.h"

// One training run, its phases in the order run_training() calls them (see the top of this file).
template <class Trainer>
class TrainingRun {
public:
    // The run owns the step's stop request and sync clock, and lends them to the communicator
    // (host/comm.h) for as long as it runs.
    explicit TrainingRun(Comm& comm) : comm(comm), main_rank(comm.rank == 0) {
        comm.stop = &stop, comm.sync_ms = &sync_ms;
    }
    ~TrainingRun() { comm.stop = nullptr, comm.sync_ms = nullptr; }

    // ---- set up: options, model shape, batch plan, data, evaluation file, tokenizer.
    // False after --help.
    bool set_up(int argc, char** argv) {
        try {  // the command line alone: the same on every rank
            if (!parse_command_line(argc, argv, cfg)) return false;
            Trainer::check_options(cfg);
        } catch (const UsageError& e) {
            throw CommandLineError(e.what());
        }
        if (cfg.threads == 0) check_omp_num_threads();  // --threads, when given, overrides it
        device = device_speed(cfg.device, cfg.device_tflops, cfg.link_gbps);
        links = cluster_links(cfg, device);  // the layout's links (host/cluster.h): a bad name stops here
        if (!cfg.noise_from.empty()) logged = read_logged_batch(cfg.noise_from);  // --noise-from: before any line
        comm.set_watchdog({cfg.comm_timeout, {}});
        check_checkpoint_to_resume(cfg);

        // model shape: from a checkpoint, or from the options
        mc = model_shape(cfg);
        if (!cfg.load.empty()) {  // the file's shape wins: say so for the shape options given with it
            std::string ignored;  // in the command line's order, each once
            for (size_t i = 0; i < cfg.given.size(); i++)
                if (is_shape_option(cfg.given[i]) &&
                    std::find(cfg.given.begin(), cfg.given.begin() + i, cfg.given[i]) == cfg.given.begin() + i)
                    ignored += std::string(ignored.empty() ? "" : ", ") + "--" + cfg.given[i];
            if (!ignored.empty())
                say(strf("note: %s ignored: the model's shape is the one in '%s' (%s)", ignored.c_str(),
                         cfg.load.c_str(), describe_model(mc).c_str()));
        }
        builtin = cfg.train_data.empty();
        if (cfg.seq_len > mc.maxT)
            throw Error(strf("--seq-len %d is longer than the model's maximum sequence length %d", cfg.seq_len, mc.maxT));
        check_sample_length(cfg, mc);
        // plan first, then touch the device: memory decides the micro-batch before any kernel
        // is timed or anything allocated; a resumed run keeps the choices of its checkpoint
        adopt_recorded_choices(cfg, Trainer::run_time_choices(), mc.num_params(),
                               [&](const std::string& line) { say(line); });
        layout = cluster_layout(cfg, mc.L, planned_replicas(cfg, comm));  // --gpus, --tp, --pp (a plan)
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
        for (const auto& [name, value] : shape_values(mc)) agreed.push_back({"the model's " + name, value});
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

        say("model: " + describe_model(mc));
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
        if (cfg.dry_run && (cfg.gpus > 0 || layout.T * layout.P > 1)) {
            if (layout.T * layout.P > 1)
                say(strf("(the lines above count each replica as one device; the layout below spreads it over T·P = %d "
                         "GPUs)",
                         layout.T * layout.P));
            for (const std::string& line :
                 cluster_plan(layout, mc, plan, cfg.steps, device, links,
                              Trainer::memory_use(mc, plan.B, plan.T, plan.R, cfg), cfg, sync))
                say(line);
        }
        if (cfg.dry_run && !cfg.noise_from.empty())  // an earlier run's batch and noise scale beside this one's
            for (const std::string& line :
                 batch_change_lines(logged, plan.global_tokens(), cfg.noise_from))
                say(line);
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
        else init_params(m->params(), mc, cfg.seed);
        std::string note = cfg.load.empty() ? "" : llmc_llama_note(cfg.load);  // llm.c's Llama-3 file
        if (!note.empty()) say(note);

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
        stop.local = stop_request();
        schedule = lr_schedule(cfg, cfg.steps);
        opt = AdamWConfig{cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay};
        replica_flops = flops_per_step(mc, plan) / plan.R;
        last_checkpoint_time = std::chrono::steady_clock::now();
        for (int step = start + 1; step <= cfg.steps; step++) {
            train_one_step(step);
            // a stop request that came during the evaluation stops the run after it, not after
            // one more step: the replicas agree on it again (evaluation is theirs together)
            if (evaluate(step) && !stop.agreed) comm.agree_stop();
            bool saved = checkpoint_due(step);
            if (saved) save_checkpoint(step);
            if (stop.agreed) {  // the same on every replica: all stop after this step
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
    Comm& comm;                   // lent `stop` and `sync_ms` below; otherwise only its collectives are used
    const bool main_rank;
    Comm::StopRequest stop;       // a signal's request to stop, and the replicas' agreement on it
    double sync_ms = 0;           // this step's time in the gradient sync (the log's sync_ms)
    Config cfg;
    DeviceSpeed device;
    ModelConfig mc;
    bool builtin = true;
    BatchPlan plan;
    ClusterLayout layout;  // the GPUs the plan lays out (host/cluster.h); one a replica unless --tp/--pp
    ClusterLinks links;    // and the links between them
    LoggedBatch logged;    // --noise-from: an earlier run's batch and noise scale
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
                check_same_kind(*train_data, *val_data);
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
            try {
                train_data->configure(plan.B, plan.T, plan.A, plan.R, comm.rank, cfg.shuffle, cfg.seed);
                if (cfg.val_every > 0) val = validation_set(*val_data, cfg.val_tokens, plan.T, comm.rank, comm.world);
            } catch (const UsageError&) {
                throw;
            } catch (const Error& e) {  // a plan needs no data: what a real run would refuse is a warning
                if (!cfg.dry_run) throw;
                say(std::string("warning: a real run would stop here, the plan goes on without the data: ") + e.what());
                train_data.reset(), val_data.reset();
            }
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
        if (cfg.sample_every > 0 && (long long)prompt.size() > plan.T)
            throw UsageError(strf("--prompt has %s tokens, more than the %s a sample's context holds (-t; the model's "
                                  "maxT is %s)",
                                  with_commas(prompt.size()).c_str(), with_commas(plan.T).c_str(),
                                  with_commas(mc.maxT).c_str()));
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
        if (st.step != step)  // trained on as its header's step, it would redo steps on later weights
            throw Error(strf("'%s' holds step %d, but its name says step %d: renamed or damaged, not resumed",
                             state_file.c_str(), st.step, step));
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
            Sample drawn = generate(*m, mc, plan.T, prompt, cfg.sample_len, sampling_of(cfg), sample_rng);
            const std::vector<int>& out = drawn.tokens;
            const std::string speed = drawn.seconds > 0 ? with_commas((long long)(cfg.sample_len / drawn.seconds)) : "-";
            std::string shown = decode(tokenizer, out, 0, prompt.size()), text = decode(tokenizer, out, prompt.size(), out.size());
            say(strf("---- sample at step %s, its prompt in brackets ----\n[%s]%s\n---- %s tokens in %s ms, %s tokens/s%s ----",
                     with_commas(step).c_str(), terminal_text(shown, false).c_str(), terminal_text(text).c_str(),
                     with_commas(cfg.sample_len).c_str(), with_commas(std::llround(drawn.seconds * 1000)).c_str(), speed.c_str(),
                     cfg.kv_cache ? "" : " (no key/value cache)"));
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
                      cfg.steps, noise.averages(), true, choices_made(cfg, Trainer::run_time_choices())};
        add_recorded_choices(*m, st.choices);
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
        sync_ms = 0;  // the step's gradient sync adds its time (host/comm.h)
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
                      sync_ms, tps, flops_per_s, mfu(flops_per_s), noise.json_fields());
    }
};

template <class Trainer>
int run_training(int argc, char** argv, Comm& comm) {
    TrainingRun<Trainer> run(comm);
    if (!run.set_up(argc, argv)) return 0;  // --help
    if (!run.agree_and_plan()) return 0;    // a dry run ends with the plan
    if (!run.restore()) return 0;           // the run in --out-dir is complete
    run.loop();
    return run.finish();
}

// The body of main() of both trainers: runs the training and turns every error into one line on
// stderr and an exit status (2 for a bad command line, 1 for anything else), ending all
// replicas so that none waits forever for a rank that has stopped.
template <class Trainer>
int run_reporting_errors(int argc, char** argv) {
    const char* program = program_name(argv[0]);
    Comm comm;
    try {
        comm = Trainer::connect(&argc, &argv);
        int code = run_training<Trainer>(argc, argv, comm);
        comm.finalize();
        return code;
    } catch (const CommandLineError& e) {
        // Every rank has this command line and stops here: rank 0 alone prints the line (under
        // mpirun every rank once printed it), and each rank leaves with 2 once all have come,
        // so that none is killed before rank 0 has written it.
        if (comm.rank == 0) fprintf(stderr, "%s: %s\n", program, e.what());
        fflush(stderr);
        if (comm.world > 1) comm.finalize();
        return 2;
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
// A trainer that lacks a member of host/trainer.h stops the build with one error per missing
// member, and nothing of the run is compiled for it.
template <class Trainer>
int main_with_errors(int argc, char** argv) {
    if constexpr (check_trainer_contract<Trainer>()) return run_reporting_errors<Trainer>(argc, argv);
    else return 1;  // (not built: the contract's errors stop the build)
}
