// Tokenizer files: header checks before allocation, the pieces, the end-of-text token as
// the default prompt of a model with a 300-token vocabulary.
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string path = input_file(data, size);
    try {
        Tokenizer tok = Tokenizer::load(path);
        std::vector<int> prompt = parse_prompt("", tok, 300);
        std::string text;
        for (int id = -1; id < 400; id += 37) text += tok.decode(id);
        (void)prompt;
    } catch (const Error&) {
    }
    return 0;
}
