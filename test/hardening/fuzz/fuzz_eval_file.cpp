// Multiple-choice evaluation files (HellaSwag, llm.c's format): the header and per-example
// checks of read_eval_file(), then the examples scored the way the trainers score them
// (score_examples in host/eval.h: rows cut to fit T, micro-batches of up to B rows), by a
// stand-in model whose per-position losses are a pattern, so that ASan sees every index.
#include "fuzz.h"

struct PatternLosses {
    std::vector<float> losses;
    const float* token_losses(const int* inputs, const int* targets, int B, int T) {
        losses.resize((size_t)B * T);
        for (size_t i = 0; i < losses.size(); i++) losses[i] = (float)((inputs[i] * 31 + targets[i]) % 97) / 16;
        return losses.data();
    }
};

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string path = input_file(data, size);
    try {
        const int V = 300, T = 12, B = 5;
        std::vector<EvalExample> examples = read_eval_file(path, V, T);
        PatternLosses model;
        Comm single;
        (void)hellaswag_accuracy(model, examples, B, T, single);
    } catch (const Error&) {
    }
    return 0;
}
