// Small helpers shared by the doctest suites (cpu_trainer/trainer.cpp, gpu_trainer/trainer.cu).
#pragma once
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../host/rng.h"

// n normal samples times scale, from rng (tests start from a fixed seed).
inline std::vector<float> random_floats(size_t n, Rng& rng, double scale = 1.0) {
    std::vector<float> v(n);
    for (float& x : v) x = (float)(scale * rng.normal());
    return v;
}

// Runs a shell command; returns its exit status and stdout+stderr.
inline int run_command(const std::string& cmd, std::string* output = nullptr) {
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    std::string out;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    int status = pclose(p);
    if (output) *output = out;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A new empty directory under /tmp.
inline std::string temp_dir() {
    char tmpl[] = "/tmp/train_test_XXXXXX";
    return mkdtemp(tmpl);
}

inline std::vector<char> read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// The lines of a JSONL run log whose "type" is `type`, in order.
inline std::vector<std::string> log_lines(const std::string& path, const std::string& type) {
    std::ifstream f(path);
    std::vector<std::string> out;
    for (std::string line; std::getline(f, line);)
        if (line.find("\"type\":\"" + type + "\"") != std::string::npos) out.push_back(line);
    return out;
}
// A log line without its timing fields ("ms" onwards): what must repeat bit for bit.
inline std::string strip_timing(const std::string& s) { return s.substr(0, s.find(",\"ms\"")); }

// How far the default run gets in 30 steps, checked by test/cpu_trainer/trainer ("the default run trains")
// and test/gpu_trainer/trainer (the same run of train_gpt), one band each for the loss at step 1 and the
// validation loss at steps 15 and 30. Measured: 5.4979, 3.8429, 3.4097 (the same to 4
// decimals with -O2 and no -march; train_gpt_cpu fp32 and bf16: 3.8406, 3.4102). Each band is
// 0.03 to 0.06 wide around that, ten times the bf16-fp32 spread. Without AdamW's bias
// correction the run reaches 3.957 and 3.457: outside.
struct ProgressBand {
    const char* what;
    double low, high;
};
inline const ProgressBand DEFAULT_RUN_BANDS[3] = {
    {"loss at step 1 (ln 256 = 5.545 is a uniform guess)", 5.45, 5.55},
    {"validation loss at step 15", 3.80, 3.90},
    {"validation loss at step 30", 3.38, 3.44}};
