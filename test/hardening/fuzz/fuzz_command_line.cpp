// The command line: the input is split at NUL bytes into arguments. Everything the trainer
// derives from the options before it touches a file runs: parsing and validation, the model
// shape, the batch arithmetic for 1 to 8 replicas, the activation sizes, the schedule, the
// prompt (against a 300-token tokenizer), and a loader configured with the plan.
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<std::string> args = {"train"};
    std::string arg;
    for (size_t i = 0; i < size && args.size() < 64; i++) {
        if (data[i] == 0) args.push_back(arg), arg.clear();
        else arg += (char)data[i];
    }
    if (!arg.empty()) args.push_back(arg);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(&a[0]);
    argv.push_back(nullptr);
    int replicas = size ? data[size - 1] % 8 + 1 : 1;
    try {
        Config cfg;
        if (!parse_command_line((int)args.size(), argv.data(), cfg)) return 0;
        cfg.load.clear();  // no files: --load would read one
        ModelConfig mc = model_shape(cfg);
        BatchPlan plan = plan_batch(cfg.batch_size, cfg.seq_len, replicas, cfg.total_batch);
        check_activation_sizes(mc, plan);
        (void)describe_plan(plan, cfg.steps);
        LrSchedule schedule{cfg.lr, cfg.warmup, cfg.steps, cfg.lr_final_frac, cfg.lr_schedule == "constant"};
        for (int step : {0, cfg.warmup, cfg.steps / 2, cfg.steps}) (void)schedule.at(step);
        Tokenizer tok;
        for (int i = 0; i < 300; i++) tok.pieces.push_back(std::string(1, (char)i));
        tok.eot = 299;
        (void)parse_prompt(cfg.prompt, tok, mc.V);
        DataLoader loader("tokens", pattern_tokens(4096, mc.V < 256 ? mc.V : 256), mc.V);
        loader.configure(plan.B, plan.T, plan.A, plan.R, replicas - 1, cfg.shuffle, cfg.seed);
        if (plan.micro_tokens() <= 4096) {
            std::vector<int> in(plan.micro_tokens()), tgt(plan.micro_tokens());
            loader.next_chunk();
            for (int a = 0; a < plan.A; a++) loader.micro_batch(a, in.data(), tgt.data());
        }
    } catch (const Error&) {
    }
    return 0;
}
