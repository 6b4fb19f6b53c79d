// A trainer with every member of host/trainer.h's contract, each of which
// test/run/trainer_contract.sh leaves out in turn (-DDROP_name) to see the build fail with
// a line that names it. Compiled only (-fsyntax-only): nothing here runs.
#include "../../host/run.h"

struct StubTrainer {
    StubTrainer(const ModelConfig&, const BatchPlan&, const Config&, const Comm&) {}
#ifndef DROP_connect
    static Comm connect(int*, char***) { return Comm{}; }
#endif
#ifndef DROP_check_options
    static void check_options(const Config&) {}
#endif
#ifndef DROP_hardware
    static std::string hardware(const Config&, const Comm&) { return ""; }
#endif
#ifndef DROP_GATHERED_WEIGHT_BYTES
    static constexpr int GATHERED_WEIGHT_BYTES = 4;
#endif
#ifndef DROP_memory_use
    static MemoryUse memory_use(const ModelConfig&, int, int, int, const Config&) { return {}; }
#endif
#ifndef DROP_memory_available
    static double memory_available(const Config&) { return 0; }
#endif
#ifndef DROP_run_time_choices
    static std::vector<std::string> run_time_choices() { return {}; }
#endif
#ifndef DROP_choose_kernels
    static void choose_kernels(Config&, const ModelConfig&, const BatchPlan&, double, const Comm&) {}
#endif
#ifndef DROP_kernel_plan
    static std::vector<std::string> kernel_plan(const ModelConfig&, const BatchPlan&, const Config&,
                                                const DeviceSpeed&) {
        return {};
    }
#endif
#ifndef DROP_params
    float* params() { return nullptr; }
#endif
#ifndef DROP_adam_m
    float* adam_m() { return nullptr; }
#endif
#ifndef DROP_adam_v
    float* adam_v() { return nullptr; }
#endif
#ifndef DROP_upload
    void upload() {}
#endif
#ifndef DROP_download
    void download() {}
#endif
#ifndef DROP_train_step
    StepResult train_step(DataLoader&, const BatchPlan&, const Comm&, const AdamWConfig&, float, float, int) {
        return {};
    }
#endif
#ifndef DROP_token_losses
    const float* token_losses(const int*, const int*, int, int) { return nullptr; }
#endif
#ifndef DROP_next_token_logits
    const float* next_token_logits(const int*, int) { return nullptr; }
#endif
#ifndef DROP_next_token_logits_cached
    const float* next_token_logits_cached(const int*, int, int) { return nullptr; }
#endif
};

int main(int argc, char** argv) { return main_with_errors<StubTrainer>(argc, argv); }
