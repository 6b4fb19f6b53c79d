// Token shards (uint16 and uint32): the header and size checks, the token range check, and the loader serving
// batches from a shard that passed them.
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string path = input_file(data, size);
    try {
        uint64_t hash = 0;
        read_shard_header(path, &hash);
        const int V = 50257;
        Tokens tokens = read_shard(path, V);
        DataLoader loader(std::vector<std::string>{path}, V);
        loader.configure(2, 3, 1, 1, 0, true, hash);  // chunks of 6 tokens
        std::vector<int> in(6), tgt(6);
        for (int i = 0; i < 5; i++) {
            loader.next_chunk();
            loader.micro_batch(0, in.data(), tgt.data());
        }
    } catch (const Error&) {
    }
    return 0;
}
