// Command line: every option of both trainers, its default and its help text, in one
// table. --help is generated from the same table the parser reads, so the two cannot
// drift apart.
#pragma once
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "error.h"

struct Config {
    // data
    std::string train_data;  // glob of llm.c token shards; empty = the built-in corpus
    std::string val_data;    // glob; empty = the built-in corpus' validation split
    std::string tokenizer;   // llm.c tokenizer file used to print samples; empty = bytes
    // model: a checkpoint to start from, or the shape of a randomly initialised one
    std::string load;
    int layers = 4, heads = 4, channels = 128, max_seq_len = 256;
    int vocab = 0;         // 0 = 256 for the built-in corpus, 50257 (GPT-2) or 128256 (Llama-3) for shards
    int padded_vocab = 0;  // 0 = vocab rounded up to a multiple of 128
    // the family of a random init (docs/llama.md); "" = gpt2. A model file says its own.
    std::string model;
    // a published model's shape (MODEL_PRESETS below): it stands for the options that set it
    std::string preset;
    // Llama-3's shape (random init); Meta's published models set them all (host/model.h)
    int kv_heads = 0;         // K/V heads; 0 = NH/2 when NH is even, else NH
    int ffn_hidden = 0;       // F; 0 = Meta's rule: 8C/3, times ffn_multiplier, up to a multiple of ffn_multiple_of
    int ffn_multiple_of = 256;
    float ffn_multiplier = 0;  // 0 = none
    float norm_eps = 1e-5f, rope_theta = 500000.0f;
    float rope_factor = 0, rope_low_freq = 1, rope_high_freq = 4;  // Llama-3.1 RoPE scaling; factor 0 = off
    int rope_original_len = 8192;
    int tied = 0;  // 1: the output head is wte
    // batch: global tokens per step = batch_size × seq_len × accumulation × replicas
    int batch_size = 16, seq_len = 64;  // batch_size 0: auto, the largest that fits in memory
    long long total_batch = 0;  // tokens per optimizer step; 0 = batch_size × seq_len × replicas
    int steps = 300;
    long long train_tokens = 0;  // > 0: steps = train_tokens / tokens per step, instead of --steps
    int extend = 0;              // resume: recompute the cosine over a new --steps
    // optimizer and schedule
    float lr = 3e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
    float grad_clip = 1.0f;  // 0 disables clipping
    float noise_ema = 0.95f;  // moving average of the gradient noise scale (host/noise.h); 0 = off
    std::string lr_schedule = "cosine";
    int warmup = 20;
    float lr_final_frac = 0.1f;
    // data order
    unsigned long long seed = 1337;
    int shuffle = 1;
    // evaluation, samples, checkpoints, logging
    int val_every = 50;
    long long val_tokens = 65536;  // validation tokens, the same set whatever the split
    std::string hellaswag;         // llm.c evaluation file (data/hellaswag.py); empty = off
    int eval_every = 0;            // HellaSwag every N steps; 0 = with the validation loss
    int sample_every = 100, sample_len = 96;
    float temperature = 1.0f;
    int top_k = 0;
    float top_p = 1.0f;  // nucleus sampling: the likeliest tokens that make up this much probability; 1 = all
    int kv_cache = 1;    // samples keep each position's keys and values (host/sample.h); 0 = a full forward per token
    unsigned long long sample_seed = 42;
    std::string prompt;  // empty = start from the end-of-text token (a newline for bytes)
    std::string out_dir = "out";
    int ckpt_every = 0;  // 0 = only at the end of the run (and by time, and on a signal)
    float ckpt_minutes = 30;  // also a checkpoint once this many minutes have passed since the last; 0 = off
    int keep_checkpoints = 0;  // 0 = keep every checkpoint
    int resume = 0;  // 0, 1 (a checkpoint must be there) or RESUME_AUTO (continue if there is one)
    int threads = 0;  // 0 = OpenMP's default (all cores)
    int dry_run = 0;
    int replicas = 0;  // the replicas to plan for (--dry-run) or expect; 0 = the processes started
    // a device and link for the plan's time estimates and the MFU (host/cost.h); 0 = not given
    std::string device;
    float device_tflops = 0, link_gbps = 0;
    // a cluster layout to plan (--dry-run; host/cluster.h): N GPUs in nodes of G, tensor-parallel
    // groups of T and P pipeline stages, R = N / (T·P) replicas; gpus 0 = replicas × T × P
    int gpus = 0, gpus_per_node = 8, tp = 1, pp = 1;
    std::string intra_link, inter_link;  // link presets (host/cost.h); "" = the device's / ndr
    float intra_link_gbps = 0;           // overrides the intra-node link; --link-gbps the inter-node one
    std::string noise_from;  // --dry-run: an earlier run's log.jsonl, its batch and noise scale beside the plan's
    // replicas: a collective that has not completed after this many seconds ends the job
    // (a frozen or dead replica would otherwise hang every other one); 0 = wait forever
    float comm_timeout = 600;
    // ZeRO stage 1: each replica keeps and updates 1/R of AdamW's state (and, on the GPU, of the
    // float32 master weights); 0 = off
    int zero = 0;
    // the gradient sync (host/gradsync.h): overlapped with the last micro-batch's backward in
    // buckets of at least grad_bucket bytes (0: a block each), or one collective at the end;
    // and the type it travels in (bf16: GPU only)
    std::string grad_sync = "overlap";
    std::string grad_sync_dtype = "fp32";
    double grad_bucket = 25e6;
    // GPU trainer only
    double device_memory = 0;    // bytes the trainer may use per replica; 0 = what is free (RAM for train)
    int tf32 = 0;
    int recompute = 0;           // recompute GELU's output in backward instead of keeping it per layer
    std::string attention = "auto";  // cublas, fused or auto: the GPU trainer resolves auto after planning (host/run.h)
    std::string epilogues = "fused";  // fused or separate: the backward's GELU and bias gradients (gpu/matmul.cuh)
    std::string classifier = "chunked";  // chunked or whole: the logits in chunks of rows (gpu/classifier.cuh)
    std::vector<std::string> given;  // the options on the command line (long names; a preset's too): not an option
    std::string nccl_init_file;  // rendezvous file for jobs started without MPI (srun)
};

// --resume auto: continue from a checkpoint when --out-dir holds one, else start from step 0
// (what a recipe that is simply run again wants); --resume 1 insists on a checkpoint.
constexpr int RESUME_AUTO = 2;

// One row of the option table. `value` points into a Config; kind says how to parse it.
struct Option {
    const char* name;   // long name, without "--"
    char shortname;     // 0 = none
    const char* kind;   // "int", "long", "u64", "float", "str", "bool", "batch" (int or auto), "bytes", "zero" (0 or 1),
                        // "resume" (0, 1 or auto)
    void* value;
    const char* help;
};

inline std::vector<Option> option_table(Config& c) {
    return {
        {"train-data", 'i', "str", &c.train_data, "training shards (glob); default: built-in corpus"},
        {"val-data", 'j', "str", &c.val_data, "validation shards (glob); default: built-in corpus"},
        {"tokenizer", 0, "str", &c.tokenizer, "llm.c tokenizer file for samples; default: bytes"},
        {"load", 'e', "str", &c.load, "model file to start from; default: random init"},
        {"layers", 0, "int", &c.layers, "L, transformer blocks (random init)"},
        {"heads", 0, "int", &c.heads, "NH, attention heads (random init)"},
        {"channels", 0, "int", &c.channels, "C, embedding width (random init)"},
        {"max-seq-len", 0, "int", &c.max_seq_len, "maxT, position table size (random init)"},
        {"vocab", 0, "int", &c.vocab, "V; 0 = 256 (built-in corpus), 50257 or 128256 (shards)"},
        {"padded-vocab", 0, "int", &c.padded_vocab, "Vp >= V; 0 = V rounded up to 128"},
        {"model", 0, "str", &c.model, "family of a random init: gpt2 or llama3; \"\" = gpt2"},
        {"preset", 0, "str", &c.preset, "a published shape: sets --model and the shape (gpt2-124m, llama3.2-1b, ...)"},
        {"kv-heads", 0, "int", &c.kv_heads, "Llama: K/V heads (divides NH); 0 = NH/2 when even"},
        {"ffn-hidden", 0, "int", &c.ffn_hidden, "Llama: F, the MLP width; 0 = Meta's rule (8C/3 ...)"},
        {"ffn-multiple-of", 0, "int", &c.ffn_multiple_of, "Llama: Meta's rule rounds F up to this"},
        {"ffn-multiplier", 0, "float", &c.ffn_multiplier, "Llama: Meta's rule scales 8C/3 by this; 0 = 1"},
        {"norm-eps", 0, "float", &c.norm_eps, "Llama: RMSNorm epsilon"},
        {"rope-theta", 0, "float", &c.rope_theta, "Llama: RoPE base"},
        {"rope-factor", 0, "float", &c.rope_factor, "Llama: RoPE scaling (3.1: 8, 3.2: 32); 0 = none"},
        {"rope-low-freq", 0, "float", &c.rope_low_freq, "Llama: RoPE scaling's low frequency factor"},
        {"rope-high-freq", 0, "float", &c.rope_high_freq, "Llama: RoPE scaling's high frequency factor"},
        {"rope-original-len", 0, "int", &c.rope_original_len, "Llama: context the RoPE scaling was made for"},
        {"tied", 0, "bool", &c.tied, "Llama: output head tied to wte (0 or 1)"},
        {"batch-size", 'b', "batch", &c.batch_size, "B, sequences per micro-batch; auto = the most that fit"},
        {"seq-len", 't', "int", &c.seq_len, "T, tokens per sequence"},
        {"total-batch", 'd', "long", &c.total_batch, "tokens per optimizer step; 0 = B*T*replicas"},
        {"steps", 'n', "int", &c.steps, "optimizer steps; 0 = evaluate and sample only"},
        {"train-tokens", 0, "long", &c.train_tokens, "steps = N / tokens per step (instead of -n); 0 = off"},
        {"extend", 0, "bool", &c.extend, "resume with another --steps: recompute the cosine"},
        {"lr", 'l', "float", &c.lr, "peak learning rate"},
        {"lr-schedule", 0, "str", &c.lr_schedule, "cosine (warm-up, then cosine) or constant"},
        {"warmup", 0, "int", &c.warmup, "linear warm-up steps"},
        {"lr-final-frac", 0, "float", &c.lr_final_frac, "cosine floor as a fraction of --lr"},
        {"beta1", 0, "float", &c.beta1, "AdamW beta1"},
        {"beta2", 0, "float", &c.beta2, "AdamW beta2"},
        {"eps", 0, "float", &c.eps, "AdamW epsilon"},
        {"weight-decay", 'c', "float", &c.weight_decay, "decoupled weight decay (matrices and embeddings)"},
        {"grad-clip", 0, "float", &c.grad_clip, "clip the global gradient norm; 0 = off"},
        {"noise-ema", 0, "float", &c.noise_ema, "EMA factor of the gradient noise scale, in [0, 1); 0 = off"},
        {"seed", 0, "u64", &c.seed, "seed for init and shuffling"},
        {"shuffle", 0, "bool", &c.shuffle, "shuffle batch order each epoch (0 or 1)"},
        {"val-every", 'v', "int", &c.val_every, "validation loss every N steps; 0 = off"},
        {"val-tokens", 0, "long", &c.val_tokens, "validation tokens (the same for every split)"},
        {"hellaswag", 0, "str", &c.hellaswag, "llm.c eval file (data/hellaswag.py); \"\" = off"},
        {"eval-every", 0, "int", &c.eval_every, "HellaSwag every N steps; 0 = with --val-every"},
        {"sample-every", 's', "int", &c.sample_every, "print a sample every N steps; 0 = off"},
        {"sample-len", 'g', "int", &c.sample_len, "tokens per sample (at most 16 x maxT)"},
        {"temperature", 0, "float", &c.temperature, "sampling temperature"},
        {"top-k", 0, "int", &c.top_k, "sample among the k likeliest tokens; 0 = all"},
        {"top-p", 0, "float", &c.top_p, "sample among the likeliest tokens holding this probability, (0, 1]; 1 = all"},
        {"kv-cache", 0, "int", &c.kv_cache, "samples reuse cached keys and values (1), or rerun the context (0)"},
        {"sample-seed", 0, "u64", &c.sample_seed, "seed for sampling"},
        {"prompt", 0, "str", &c.prompt, "sample prompt (bytes, or token ids \"1,2,3\" with a tokenizer)"},
        {"out-dir", 'o', "str", &c.out_dir, "log and checkpoints go here; \"\" = none"},
        {"ckpt-every", 0, "int", &c.ckpt_every, "checkpoint every N steps; 0 = off (end, time, signal)"},
        {"ckpt-minutes", 0, "float", &c.ckpt_minutes, "also checkpoint every N minutes; 0 = off"},
        {"keep-checkpoints", 0, "int", &c.keep_checkpoints, "keep the newest N checkpoints; 0 = all"},
        {"resume", 0, "resume", &c.resume, "continue from the last checkpoint (auto: if any)"},
        {"threads", 0, "int", &c.threads, "CPU threads (waiting passively); 0 = the processors it may use"},
        {"dry-run", 0, "bool", &c.dry_run, "print the plan, then exit; --dry-run alone = 1"},
        {"replicas", 0, "int", &c.replicas, "R to plan for with --dry-run; 0 = the processes started"},
        {"device", 0, "str", &c.device, "estimates, MFU: h100-sxm, h100-pcie, a100-sxm; kernels: t4..h100"},
        {"device-tflops", 0, "float", &c.device_tflops, "peak TFLOP/s per replica (overrides --device)"},
        {"link-gbps", 0, "float", &c.link_gbps, "Gbit/s each way per replica (overrides --device)"},
        {"gpus", 0, "int", &c.gpus, "layout to plan (--dry-run): N GPUs; 0 = replicas x tp x pp"},
        {"gpus-per-node", 0, "int", &c.gpus_per_node, "layout: GPUs per node (the intra-node link joins them)"},
        {"tp", 0, "int", &c.tp, "layout: tensor-parallel group size T (a plan: --dry-run only)"},
        {"pp", 0, "int", &c.pp, "layout: pipeline stages P, 1F1B (a plan: --dry-run only)"},
        {"intra-link", 0, "str", &c.intra_link, "layout: intra-node link nvlink4 or pcie5; \"\" = the device's"},
        {"inter-link", 0, "str", &c.inter_link, "layout: inter-node link ndr or eth100; \"\" = ndr"},
        {"noise-from", 0, "str", &c.noise_from, "plan (--dry-run): an earlier run's log.jsonl, to compare its batch and noise scale"},
        {"intra-link-gbps", 0, "float", &c.intra_link_gbps, "layout: intra-node Gbit/s each way per GPU (overrides)"},
        {"device-memory", 0, "bytes", &c.device_memory, "memory per replica, e.g. 80GB; 0 = what is free"},
        {"comm-timeout", 0, "float", &c.comm_timeout, "replicas: seconds a collective may wait; 0 = forever"},
        {"zero", 0, "zero", &c.zero, "ZeRO stage: 1 = shard the optimizer state over the replicas; 0 = off"},
        {"grad-sync", 0, "str", &c.grad_sync, "overlap (in buckets, during the last backward) or end"},
        {"grad-sync-dtype", 0, "str", &c.grad_sync_dtype, "GPU only: fp32 or bf16, the gradient sync's type"},
        {"grad-bucket", 0, "bytes", &c.grad_bucket, "overlap's bucket size; 0 = a block each"},
        {"tf32", 0, "bool", &c.tf32, "GPU only: TF32 tensor-core matmuls"},
        {"recompute", 0, "bool", &c.recompute, "GPU only: recompute GELU in backward (less memory)"},
        {"attention", 0, "str", &c.attention, "GPU only: cublas, fused or auto (times both, keeps the faster)"},
        {"epilogues", 0, "str", &c.epilogues, "GPU only: fused (cuBLASLt epilogues in backward) or separate"},
        {"classifier", 0, "str", &c.classifier, "GPU only: chunked (logits and loss in chunks of rows) or whole"},
        {"nccl-init-file", 0, "str", &c.nccl_init_file, "GPU only, no MPI: shared file for the NCCL id"},
    };
}

inline std::string option_value_string(const Option& o) {
    if (!strcmp(o.kind, "batch") && *(int*)o.value == 0) return "auto";
    if (!strcmp(o.kind, "resume") && *(int*)o.value == RESUME_AUTO) return "auto";
    if (!strcmp(o.kind, "int") || !strcmp(o.kind, "bool") || !strcmp(o.kind, "batch") || !strcmp(o.kind, "zero") ||
        !strcmp(o.kind, "resume"))
        return std::to_string(*(int*)o.value);
    if (!strcmp(o.kind, "bytes")) return strf("%.0f", *(double*)o.value);
    if (!strcmp(o.kind, "long")) return std::to_string(*(long long*)o.value);
    if (!strcmp(o.kind, "u64")) return std::to_string(*(unsigned long long*)o.value);
    if (!strcmp(o.kind, "float")) return strf("%g", *(float*)o.value);
    return "\"" + *(std::string*)o.value + "\"";
}

inline void print_help(const char* program) {
    Config defaults;
    printf("usage: %s [options]\n\n", program);
    printf("Trains GPT-2. With no data options it trains a small model on a built-in corpus.\n\n");
    for (const Option& o : option_table(defaults)) {
        std::string flags = o.shortname ? strf("-%c, --%s", o.shortname, o.name) : strf("    --%s", o.name);
        printf("  %-22s %-48s [%s]\n", flags.c_str(), o.help, option_value_string(o).c_str());
    }
    printf("  %-22s %s\n", "-h, --help", "print this help and exit");
}

// Parses one value; the error names the option and shows what was given. Integers are
// read in 64 bits and range-checked before they are narrowed.
inline void parse_value(const Option& o, const char* text) {
    std::string name = std::string("--") + o.name;
    char* end = nullptr;
    errno = 0;
    if (!strcmp(o.kind, "str")) {
        *(std::string*)o.value = text;
        return;
    }
    if (!strcmp(o.kind, "float")) {
        float v = strtof(text, &end);
        if (end == text || *end || errno || !std::isfinite(v))
            throw UsageError(strf("%s expects a number, got '%s'", name.c_str(), text));
        *(float*)o.value = v;
        return;
    }
    if (!strcmp(o.kind, "bytes")) {  // 80GB, 80e9, 512MiB: decimal and binary units
        double v = strtod(text, &end);
        std::string unit = end == text ? "?" : end;
        const char* units[] = {"", "B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"};
        const double scales[] = {1, 1, 1e3, 1e6, 1e9, 1e12, 1024.0, 1048576.0, 1073741824.0, 1099511627776.0};
        double scale = -1;
        for (size_t i = 0; i < sizeof scales / sizeof scales[0]; i++)
            if (unit == units[i]) scale = scales[i];
        if (scale < 0 || errno || !std::isfinite(v) || v < 0 || v * scale > 1e18)
            throw UsageError(strf("%s expects a size from 0 to 1e18 bytes such as 80GB, 512MiB or 8e10, got '%s'",
                                  name.c_str(), text));
        // below one byte the size would be truncated to 0, which means something else (--device-
        // memory: what is free; --grad-bucket: a bucket per block): refuse it
        if (v * scale > 0 && v * scale < 1)
            throw UsageError(strcmp(o.name, "grad-bucket")
                                 ? strf("%s %s is less than one byte: give a size such as 80GB, or 0 for what is free",
                                        name.c_str(), text)
                                 : strf("%s %s is less than one byte: give a bucket size such as 25MB, or 0 for a "
                                        "bucket per block",
                                        name.c_str(), text));
        *(double*)o.value = v * scale;
        return;
    }
    if (!strcmp(o.kind, "zero")) {  // stage 1 or none, with the reason for the stages beyond
        if (strcmp(text, "0") && strcmp(text, "1"))
            throw UsageError(strf("%s %s: only stage 1 (or 0, off) is supported: stages 2 and 3 shard the gradients "
                                  "too, which would need a reduce-scatter after every micro-batch of the accumulation "
                                  "instead of one gradient sync per optimizer step",
                                  name.c_str(), text));
        *(int*)o.value = text[0] - '0';
        return;
    }
    if (!strcmp(o.kind, "resume")) {
        if (strcmp(text, "0") && strcmp(text, "1") && strcmp(text, "auto"))
            throw UsageError(strf("%s expects 0, 1 or auto, got '%s'", name.c_str(), text));
        *(int*)o.value = !strcmp(text, "auto") ? RESUME_AUTO : text[0] - '0';
        return;
    }
    if (!strcmp(o.kind, "batch") && !strcmp(text, "auto")) {
        *(int*)o.value = 0;
        return;
    }
    // integers: digits only (strtoull would wrap "-1" to 2^64 - 1)
    const char* digits = text + (text[0] == '+');
    bool negative = text[0] == '-' && isdigit((unsigned char)text[1]);
    if (!negative && !isdigit((unsigned char)digits[0]))
        throw UsageError(strf("%s expects an integer, got '%s'", name.c_str(), text));
    unsigned long long v = negative ? 0 : strtoull(digits, &end, 10);
    if (!negative && *end) throw UsageError(strf("%s expects an integer, got '%s'", name.c_str(), text));
    if (!strcmp(o.kind, "bool")) {
        if (negative || errno || v > 1) throw UsageError(strf("%s expects 0 or 1, got '%s'", name.c_str(), text));
        *(int*)o.value = (int)v;
        return;
    }
    if (negative) throw UsageError(strf("%s expects a non-negative integer, got '%s'", name.c_str(), text));
    unsigned long long max = ~0ull;  // u64
    if (!strcmp(o.kind, "int") || !strcmp(o.kind, "batch")) max = INT_MAX;
    else if (!strcmp(o.kind, "long")) max = LLONG_MAX;
    if (errno == ERANGE || v > max)
        throw UsageError(strf("%s %s is too large (at most %s)", name.c_str(), text,
                              max == ~0ull ? "2^64 - 1" : with_commas((long long)max).c_str()));
    if (!strcmp(o.kind, "batch") && v == 0)
        throw UsageError(strf("%s must be at least 1 (or auto), got '%s'", name.c_str(), text));
    if (!strcmp(o.kind, "int") || !strcmp(o.kind, "batch")) *(int*)o.value = (int)v;
    else if (!strcmp(o.kind, "long")) *(long long*)o.value = (long long)v;
    else *(unsigned long long*)o.value = v;
}

// --preset NAME: a published model's shape, as the options that set it. The preset stands for
// those options written at its place on the command line: an option after it overrides the
// preset's value (--preset llama3.2-1b --max-seq-len 8192); one of its options given before it
// is refused, since the preset would overwrite it unseen. A model file (--load) has a shape of
// its own: a preset beside it is refused. docs/planning.md, "Presets", lists them with their
// parameter counts; test/cpu_trainer/plan checks those against the published ones.
struct ModelPreset {
    const char* name;
    const char* options;
};
#define LLAMA3_ROPE "--model llama3 --norm-eps 1e-5 --rope-theta 500000 --rope-low-freq 1 --rope-high-freq 4 " \
                    "--rope-original-len 8192 --max-seq-len 131072 --vocab 128256 --padded-vocab 128256 "
inline const ModelPreset MODEL_PRESETS[] = {
    // GPT-2 (OpenAI's four sizes, as llm.c trains them: Vp = 50304, maxT = 1024)
    {"gpt2-124m", "--model gpt2 --layers 12 --heads 12 --channels 768 --max-seq-len 1024 --vocab 50257 --padded-vocab 50304"},
    {"gpt2-350m", "--model gpt2 --layers 24 --heads 16 --channels 1024 --max-seq-len 1024 --vocab 50257 --padded-vocab 50304"},
    {"gpt2-774m", "--model gpt2 --layers 36 --heads 20 --channels 1280 --max-seq-len 1024 --vocab 50257 --padded-vocab 50304"},
    {"gpt2-1558m", "--model gpt2 --layers 48 --heads 25 --channels 1600 --max-seq-len 1024 --vocab 50257 --padded-vocab 50304"},
    // Meta's Llama-3.2 and 3.1 (their config.json: hidden_size C, num_attention_heads NH,
    // num_key_value_heads KVH, intermediate_size F, tie_word_embeddings, rope_scaling)
    {"llama3.2-1b", LLAMA3_ROPE "--layers 16 --heads 32 --kv-heads 8 --channels 2048 --ffn-hidden 8192 --tied 1 --rope-factor 32"},
    {"llama3.2-3b", LLAMA3_ROPE "--layers 28 --heads 24 --kv-heads 8 --channels 3072 --ffn-hidden 8192 --tied 1 --rope-factor 32"},
    {"llama3.1-8b", LLAMA3_ROPE "--layers 32 --heads 32 --kv-heads 8 --channels 4096 --ffn-hidden 14336 --tied 0 --rope-factor 8"},
    {"llama3.1-70b", LLAMA3_ROPE "--layers 80 --heads 64 --kv-heads 8 --channels 8192 --ffn-hidden 28672 --tied 0 --rope-factor 8"},
};
#undef LLAMA3_ROPE
inline std::string model_preset_names() {
    std::string names;
    for (const ModelPreset& p : MODEL_PRESETS) names += (names.empty() ? "" : ", ") + std::string(p.name);
    return names;
}
inline const ModelPreset* find_model_preset(const std::string& name) {
    for (const ModelPreset& p : MODEL_PRESETS)
        if (name == p.name) return &p;
    return nullptr;
}
// The preset's options as (name, value) pairs, in its order.
inline std::vector<std::pair<std::string, std::string>> model_preset_options(const ModelPreset& p) {
    std::vector<std::pair<std::string, std::string>> options;
    std::vector<std::string> words;
    std::string word;
    for (const char* c = p.options;; c++) {
        if (*c == ' ' || *c == 0) {
            if (!word.empty()) words.push_back(word), word.clear();
            if (*c == 0) break;
        } else {
            word += *c;
        }
    }
    for (size_t i = 0; i + 1 < words.size(); i += 2) options.push_back({words[i].substr(2), words[i + 1]});
    return options;
}

// Checks the combinations a single value cannot express.
inline void validate_config(const Config& c) {
    auto require = [](bool ok, const std::string& msg) {
        if (!ok) throw UsageError(msg);
    };
    require(c.batch_size > 0 || c.total_batch > 0,
            "--batch-size auto needs --total-batch: the global batch it chooses a split of");
    require(c.seq_len >= 1, "--seq-len must be at least 1");
    require(c.layers >= 1 && c.heads >= 1 && c.channels >= 1, "--layers, --heads and --channels must be at least 1");
    require(c.channels % c.heads == 0,
            strf("--channels %d is not divisible by --heads %d", c.channels, c.heads));
    require(c.model.empty() || c.model == "gpt2" || c.model == "llama3",
            "--model must be 'gpt2' or 'llama3' (the families this trainer builds), got '" + c.model + "'");
    require(c.model == "llama3" || (c.kv_heads == 0 && c.ffn_hidden == 0),
            "--kv-heads and --ffn-hidden set a Llama's shape: add --model llama3 (GPT-2 has NH K/V heads and 4C)");
    require(c.kv_heads == 0 || c.heads % c.kv_heads == 0,
            strf("--heads %d is not a multiple of --kv-heads %d (each K/V head serves a whole group of query heads)",
                 c.heads, c.kv_heads));
    require(c.ffn_multiple_of >= 1, "--ffn-multiple-of must be at least 1");
    require(c.lr_schedule == "cosine" || c.lr_schedule == "constant",
            "--lr-schedule must be 'cosine' or 'constant', got '" + c.lr_schedule + "'");
    require(c.attention == "cublas" || c.attention == "fused" || c.attention == "auto",
            "--attention must be 'cublas', 'fused' or 'auto', got '" + c.attention + "'");
    require(c.epilogues == "fused" || c.epilogues == "separate",
            "--epilogues must be 'fused' or 'separate', got '" + c.epilogues + "'");
    require(c.classifier == "chunked" || c.classifier == "whole",
            "--classifier must be 'chunked' or 'whole', got '" + c.classifier + "'");
    require(c.grad_sync == "overlap" || c.grad_sync == "end",
            "--grad-sync must be 'overlap' or 'end', got '" + c.grad_sync + "'");
    require(c.grad_sync_dtype == "fp32" || c.grad_sync_dtype == "bf16",
            "--grad-sync-dtype must be 'fp32' or 'bf16', got '" + c.grad_sync_dtype + "'");
    require(c.lr >= 0 && c.weight_decay >= 0 && c.grad_clip >= 0, "--lr, --weight-decay and --grad-clip must be >= 0");
    require(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1, "--beta1 and --beta2 must be in [0, 1)");
    require(c.lr_final_frac >= 0 && c.lr_final_frac <= 1,  // below 0 the rate turns negative; above 1 it rises
            strf("--lr-final-frac must be in [0, 1] (the cosine's floor as a fraction of --lr), got %g", c.lr_final_frac));
    require(c.eps > 0, "--eps must be positive");
    require(c.noise_ema >= 0 && c.noise_ema < 1,
            strf("--noise-ema must be in [0, 1) (0 = off), got %g", c.noise_ema));
    require(c.temperature > 0, "--temperature must be positive");
    require(c.top_p > 0 && c.top_p <= 1, strf("--top-p must be in (0, 1] (1 = all tokens), got %g", c.top_p));
    require(c.kv_cache == 0 || c.kv_cache == 1, strf("--kv-cache must be 0 or 1, got %d", c.kv_cache));
    require(c.val_tokens >= 1, "--val-tokens must be at least 1");
    require(c.eval_every == 0 || !c.hellaswag.empty(),
            strf("--eval-every %d does nothing without --hellaswag FILE, the evaluation it schedules", c.eval_every));
    require(c.ckpt_minutes >= 0, strf("--ckpt-minutes must be >= 0 (0 = off), got %g", c.ckpt_minutes));
    require(c.comm_timeout >= 0, strf("--comm-timeout must be >= 0 seconds (0 = wait forever), got %g", c.comm_timeout));
}

// The cluster layout's options alone (host/cluster.h checks them against the model's layers).
inline void validate_layout_options(Config& c, bool gpus_given, bool replicas_given) {
    auto require = [](bool ok, const std::string& msg) {
        if (!ok) throw UsageError(msg);
    };
    require(!gpus_given || c.gpus >= 1, "--gpus 0 plans no GPU: give at least 1 (e.g. --gpus 8, one node)");
    require(c.gpus_per_node >= 1, strf("--gpus-per-node %d: a node holds at least 1 GPU (8 is usual)", c.gpus_per_node));
    require(c.tp >= 1, strf("--tp %d: a tensor-parallel group is at least 1 GPU (--tp 1: no tensor parallelism)", c.tp));
    require(c.pp >= 1, strf("--pp %d: a pipeline has at least 1 stage (--pp 1: no pipeline)", c.pp));
    require(c.intra_link_gbps >= 0, strf("--intra-link-gbps must be >= 0 (0 = the preset's), got %g", c.intra_link_gbps));
    require(c.dry_run || c.noise_from.empty(),
            "--noise-from LOG compares a plan's batch with an earlier run's: give it with --dry-run");
    require(c.dry_run || (c.tp == 1 && c.pp == 1),
            strf("--tp %d --pp %d: the trainers run data parallelism only (R copies of the whole model); a layout "
                 "with tensor or pipeline parallelism is a plan: add --dry-run",
                 c.tp, c.pp));
    if (!gpus_given) return;
    const long long mp = (long long)c.tp * c.pp;
    if (c.gpus % mp != 0) {  // the valid counts nearby: whole replicas in whole nodes
        long long step = c.gpus <= c.gpus_per_node ? mp : std::lcm(mp, (long long)c.gpus_per_node);
        long long below = c.gpus / step * step, above = below + step;
        throw UsageError(strf("--gpus %d is not divisible by --tp %d × --pp %d = %lld GPUs per replica: --gpus %s%s "
                              "divides",
                              c.gpus, c.tp, c.pp, mp,
                              below > 0 ? strf("%s or ", with_commas(below).c_str()).c_str() : "",
                              with_commas(above).c_str()));
    }
    if (c.gpus > c.gpus_per_node && c.gpus % c.gpus_per_node != 0) {
        long long below = (long long)c.gpus / c.gpus_per_node * c.gpus_per_node, above = below + c.gpus_per_node;
        throw UsageError(strf("--gpus %d is not a whole number of nodes of --gpus-per-node %d: --gpus %s or %s",
                              c.gpus, c.gpus_per_node, with_commas(below).c_str(), with_commas(above).c_str()));
    }
    const long long R = c.gpus / mp;
    require(!replicas_given || c.replicas == R,
            strf("--replicas %d disagrees with --gpus %d / (--tp %d × --pp %d) = %lld replicas: give one of them, or "
                 "--replicas %lld",
                 c.replicas, c.gpus, c.tp, c.pp, R, R));
    c.replicas = (int)R;
}

// "--dry-run" or "--resume" last or followed by another option means 1: the two switches that
// may go without their value (the launch scripts take --dry-run both ways too).
inline bool switch_alone(int argc, char** argv, int i) {
    return (!strcmp(argv[i], "--dry-run") || !strcmp(argv[i], "--resume")) &&
           (i + 1 >= argc || argv[i + 1][0] == '-');
}

// Levenshtein distance, for "did you mean": a typo is usually one or two edits away.
inline size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); j++) row[j] = j;
    for (size_t i = 1; i <= a.size(); i++) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); j++) {
            size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
            diagonal = up;
        }
    }
    return row[b.size()];
}

// The error for an option the table does not have, with the nearest long name when it is
// within two edits ("--step" -> "--steps", "-steps" -> "--steps").
inline std::string unknown_option_message(const std::string& arg, const std::vector<Option>& table) {
    std::string name = arg.substr(arg.find_first_not_of('-') == std::string::npos ? arg.size() : arg.find_first_not_of('-'));
    name = name.substr(0, name.find('='));
    const char* best = nullptr;
    size_t best_distance = 3;
    for (const Option& o : table) {
        size_t d = edit_distance(name, o.name);
        if (d < best_distance) best = o.name, best_distance = d;
    }
    if (name.size() > 1 && best)
        return strf("unknown option '%s'; did you mean --%s? (see --help)", arg.c_str(), best);
    return "unknown option '" + arg + "' (see --help)";
}

// Parses argv into a Config. Returns false when --help was printed.
inline bool parse_command_line(int argc, char** argv, Config& c) {
    std::vector<Option> table = option_table(c);
    std::vector<std::string> given;  // the options on the command line, by long name
    for (int i = 1; i < argc; i++) {
        std::string arg = argv[i];
        if (arg == "-h" || arg == "--help") {
            print_help(argv[0]);
            return false;
        }
        if (arg == "-m" || arg.rfind("--val-batches", 0) == 0)  // counted per replica: its loss depended on R
            throw UsageError("-m/--val-batches is gone: validation now covers --val-tokens N tokens (default 65,536), "
                             "the same for every split; -m M meant M·B·T·R tokens");
        const Option* found = nullptr;
        std::string value;
        bool has_inline_value = false;
        if (arg.rfind("--", 0) == 0) {
            std::string name = arg.substr(2);
            size_t eq = name.find('=');
            if (eq != std::string::npos) {  // --name=value
                value = name.substr(eq + 1);
                name = name.substr(0, eq);
                has_inline_value = true;
            }
            for (const Option& o : table)
                if (name == o.name) found = &o;
        } else if (arg.size() == 2 && arg[0] == '-') {
            for (const Option& o : table)
                if (o.shortname == arg[1]) found = &o;
        }
        if (!found) throw UsageError(unknown_option_message(arg, table));
        if (!has_inline_value && switch_alone(argc, argv, i)) {
            value = "1";
        } else if (!has_inline_value) {
            if (i + 1 >= argc) throw UsageError(strf("%s needs a value (see --help)", arg.c_str()));
            value = argv[++i];
        }
        parse_value(*found, value.c_str());
        given.push_back(found->name);
        if (!strcmp(found->name, "preset")) {  // the preset's options, as if written here
            const ModelPreset* preset = find_model_preset(c.preset);
            if (std::count(given.begin(), given.end(), "preset") > 1)
                throw UsageError("--preset is given twice: give one (and options after it for what differs)");
            if (!preset)
                throw UsageError(strf("--preset: unknown model '%s'; the presets: %s", c.preset.c_str(),
                                      model_preset_names().c_str()));
            for (const auto& [name, text] : model_preset_options(*preset)) {
                if (std::find(given.begin(), given.end(), name) != given.end())
                    throw UsageError(strf("--%s is given before --preset %s, which sets it: give it after the preset "
                                          "to override the preset's value (%s)",
                                          name.c_str(), preset->name, text.c_str()));
                const Option* o = nullptr;
                for (const Option& candidate : table)
                    if (name == candidate.name) o = &candidate;
                if (!o) throw Error("--preset " + c.preset + ": its option --" + name + " is no option (host/cli.h)");
                parse_value(*o, text.c_str());
                given.push_back(o->name);
            }
        }
    }
    auto has = [&](const char* name) { return std::find(given.begin(), given.end(), name) != given.end(); };
    if (has("preset") && !c.load.empty())
        throw UsageError(strf("--preset %s sets the shape of a new model, but --load '%s' brings its own: give one of "
                              "them",
                              c.preset.c_str(), c.load.c_str()));
    if (has("train-tokens") && has("steps"))
        throw UsageError("--train-tokens and --steps both set the run's length: give one of them");
    validate_config(c);
    validate_layout_options(c, has("gpus"), has("replicas"));
    c.given = given;
    return true;
}

// The CPU trainer refuses the options marked "GPU only" in the table when they are given a
// value other than their default: silently ignoring --recompute 1 or --nccl-init-file would
// leave the user believing they act.
inline void refuse_gpu_only_options(const Config& c) {
    Config defaults, copy = c;
    std::vector<Option> table = option_table(defaults), given = option_table(copy);
    for (size_t i = 0; i < table.size(); i++)
        if (!strncmp(table[i].help, "GPU only", 8) && option_value_string(given[i]) != option_value_string(table[i]))
            throw UsageError(strf("--%s is an option of the GPU trainer (train_gpt) only; the CPU trainer would ignore "
                                  "it: drop it",
                                  table[i].name));
}
