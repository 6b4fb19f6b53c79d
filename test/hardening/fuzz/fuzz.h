// Shared by the libFuzzer harnesses (one per parser: fuzz_*.cpp). Each harness feeds the
// fuzzer's bytes to a parser the way the trainer does, and treats an Error (a bad input
// reported in one line) as the right answer. Everything else is a finding: a crash, a
// sanitizer report (ASan, UBSan), an exception of another type, or an allocation over
// libFuzzer's -malloc_limit_mb (an allocation sized by a header before it was checked).
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "../../../host/run.h"

// The parsers read files: the input goes to one file per fuzzing process, in memory
// (/dev/shm) where there is one.
inline std::string input_file(const uint8_t* data, size_t size) {
    static const std::string path = (access("/dev/shm", W_OK) == 0 ? "/dev/shm/" : "/tmp/") + std::string("fuzz_") +
                                    std::to_string(getpid()) + ".bin";
    FILE* f = fopen(path.c_str(), "wb");
    if (!f) abort();  // the harness itself is broken, not the parser
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    return path;
}

// Tokens 0..V-1 in a repeating pattern: data for the loaders the harnesses drive.
inline std::vector<uint16_t> pattern_tokens(size_t n, int V) {
    std::vector<uint16_t> t(n);
    for (size_t i = 0; i < n; i++) t[i] = (uint16_t)(i * 7 % V);
    return t;
}
