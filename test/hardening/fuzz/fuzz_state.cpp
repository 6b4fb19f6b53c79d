// Training-state files: the header, size and moment checks of load_state(), then the checks
// against the run it would continue (check_state_fits in host/run.h) and, when they pass,
// the loader moved to the saved position and serving batches from there.
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string path = input_file(data, size);
    const size_t n = 8;  // parameters of the model this state would belong to
    std::vector<float> m(n), v(n);
    try {
        TrainState st = load_state(path, m.data(), v.data(), n);
        // a run with micro-batches of 2×4 tokens, 1 or 2 accumulation steps, on 1000 tokens
        BatchPlan plan = plan_batch(2, 4, 1, st.global_batch == 16 ? 16 : 8);
        DataLoader loader("tokens", pattern_tokens(1000, 256), 256);
        loader.configure(plan.B, plan.T, plan.A, plan.R, 0, true, st.sample_rng);
        check_state_fits(st, path, plan, loader, "tokens", 100);
        loader.set_position(st.data);
        std::vector<int> in(8), tgt(8);
        for (int i = 0; i < 3; i++) {
            loader.next_chunk();
            for (int a = 0; a < plan.A; a++) loader.micro_batch(a, in.data(), tgt.data());
        }
    } catch (const Error&) {
    }
    return 0;
}
