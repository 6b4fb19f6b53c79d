// Model files: the header checks, the size check before allocation, the weights' check.
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string path = input_file(data, size);
    try {
        ModelConfig c = read_model_header(path);
        // allocated only after the header matched the file size, so bounded by the input
        std::vector<float> params(c.num_params());
        load_model_params(path, c, params.data());
        (void)shape_difference(c, c);
    } catch (const Error&) {
    }
    return 0;
}
