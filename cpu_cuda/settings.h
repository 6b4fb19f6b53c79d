// cpu_cuda/settings.h: the runtime's switches, read once from the environment.
//
// Every fidelity check that costs little is on by default; the ones that cost a lot are
// switched on by the tests that need them. docs/cpu-runtime.md lists them all.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "processors.h"

namespace cpu_cuda {

// How the CUDA threads of a block take turns between barriers and warp collectives, and
// the order in which blocks run. The race detector runs a launch under several of them.
enum class ThreadOrder { forward, reverse, shuffle, warp, warp_reverse };
struct Schedule {
    ThreadOrder threads = ThreadOrder::warp;  // warp by warp: the fastest, and what a GPU resembles
    bool blocks_reversed = false;
    uint64_t seed = 1;  // for shuffle
};

struct Settings {
    bool poison = true;           // CPU_CUDA_POISON=0: fresh memory is not filled with NaN bytes
    bool protect_host = false;    // CPU_CUDA_PROTECT=1: device memory is PROT_NONE outside runtime calls
    bool racecheck = false;       // CPU_CUDA_RACECHECK=1: every launch under every schedule, compared
    bool deterministic = false;   // CPU_CUDA_DETERMINISTIC=1: the race detector also fails float atomic sums whose bits vary
    bool check_pointers = true;   // CPU_CUDA_CHECK_POINTERS=0: kernel pointer arguments not checked
    bool driver_pages = false;    // CPU_CUDA_DRIVER_PAGES=1: cudaMemGetInfo counts 2 MiB pages, as a GPU's driver
    Schedule schedule;            // CPU_CUDA_SCHEDULE=forward|reverse|shuffle[:seed]|warp|warp-reverse[,blocks-reversed]
    int threads = 0;              // CPU_CUDA_THREADS: OS threads that run blocks; 0 = the processors it may use
    int devices = 8;              // CPU_CUDA_DEVICES: how many GPUs the runtime reports
    uint64_t memory = 0;          // CPU_CUDA_MEMORY (e.g. 80GB): device memory; 0 = the machine's RAM
    size_t stack_bytes = 64 << 10;  // CPU_CUDA_STACK_KB: each CUDA thread's stack
    double nccl_timeout_s = 300;  // CPU_CUDA_NCCL_TIMEOUT: seconds a rank waits for the others
    bool wmma_shuffled = false;   // CPU_CUDA_WMMA_LAYOUT=shuffled: WMMA fragments' elements on permuted lanes
    int delay_stream = 0;         // CPU_CUDA_DELAY_STREAM=K:MS: the K-th stream created (from 1) runs all its
    int delay_ms = 0;             //   work queued, each piece MS ms late (streams.h); 0 = none
};

// "80GB", "512MiB", "1e9" -> bytes; 0 on a malformed value.
inline uint64_t parse_bytes(const char* text) {
    char* end = nullptr;
    double v = strtod(text, &end);
    if (end == text || v < 0) return 0;
    std::string unit = end;
    double scale = unit == "" || unit == "B" ? 1
                 : unit == "KB" ? 1e3 : unit == "MB" ? 1e6 : unit == "GB" ? 1e9 : unit == "TB" ? 1e12
                 : unit == "KiB" ? 1024.0 : unit == "MiB" ? 1048576.0 : unit == "GiB" ? 1073741824.0 : 0;
    return (uint64_t)(v * scale);
}

[[noreturn]] inline void bad_setting(const char* name, const char* value, const char* expected) {
    fprintf(stderr, "cpu_cuda: %s='%s' is not valid: expected %s\n", name, value, expected);
    exit(2);
}

inline Schedule parse_schedule(const char* text) {
    Schedule s;
    std::string spec = text;
    size_t comma = spec.find(',');
    if (comma != std::string::npos) {
        if (spec.substr(comma + 1) != "blocks-reversed")
            bad_setting("CPU_CUDA_SCHEDULE", text, "an order, optionally followed by ',blocks-reversed'");
        s.blocks_reversed = true;
        spec = spec.substr(0, comma);
    }
    if (spec.rfind("shuffle", 0) == 0) {
        s.threads = ThreadOrder::shuffle;
        if (spec.size() > 7) s.seed = strtoull(spec.c_str() + 8, nullptr, 10);
    } else if (spec == "forward") s.threads = ThreadOrder::forward;
    else if (spec == "reverse") s.threads = ThreadOrder::reverse;
    else if (spec == "warp") s.threads = ThreadOrder::warp;
    else if (spec == "warp-reverse") s.threads = ThreadOrder::warp_reverse;
    else bad_setting("CPU_CUDA_SCHEDULE", text, "forward, reverse, shuffle[:seed], warp or warp-reverse");
    return s;
}

inline const char* order_name(ThreadOrder o) {
    switch (o) {
        case ThreadOrder::forward: return "forward";
        case ThreadOrder::reverse: return "reverse";
        case ThreadOrder::shuffle: return "shuffle";
        case ThreadOrder::warp: return "warp";
        case ThreadOrder::warp_reverse: return "warp-reverse";
    }
    return "?";
}
inline std::string schedule_name(const Schedule& s) {
    std::string name = order_name(s.threads);
    if (s.threads == ThreadOrder::shuffle) name += ":" + std::to_string(s.seed);
    return s.blocks_reversed ? name + ",blocks-reversed" : name;
}

// The most OS threads that can run blocks at once. Each keeps a fiber per CUDA thread of the
// largest block it ran (1024), and each fiber's stack is a mapping with a guard page below it:
// two of the kernel's memory maps. vm.max_map_count (65,530 by default) bounds them all, and
// past it a stack cannot be mapped, in the middle of a launch; half of it is left for the
// rest of the process (libraries, device memory with its own guard pages).
constexpr int MAX_BLOCK_THREADS = 1024;
inline long long max_map_count() {
    long long n = 0;
    if (FILE* f = fopen("/proc/sys/vm/max_map_count", "r")) {
        if (fscanf(f, "%lld", &n) != 1) n = 0;
        fclose(f);
    }
    return n > 0 ? n : 65530;  // the kernel's default, where the file cannot be read
}
inline int max_pool_threads() {
    long long fits = max_map_count() / 2 / (2 * MAX_BLOCK_THREADS);
    return (int)std::max(1LL, std::min(fits, (long long)MAX_BLOCK_THREADS));
}

inline Settings read_settings() {
    Settings s;
    auto flag = [](const char* name, bool& value) {
        if (const char* v = getenv(name)) {
            if (strcmp(v, "0") && strcmp(v, "1")) bad_setting(name, v, "0 or 1");
            value = v[0] == '1';
        }
    };
    flag("CPU_CUDA_POISON", s.poison);
    flag("CPU_CUDA_PROTECT", s.protect_host);
    flag("CPU_CUDA_RACECHECK", s.racecheck);
    flag("CPU_CUDA_DETERMINISTIC", s.deterministic);
    flag("CPU_CUDA_CHECK_POINTERS", s.check_pointers);
    flag("CPU_CUDA_DRIVER_PAGES", s.driver_pages);
    if (const char* v = getenv("CPU_CUDA_SCHEDULE")) s.schedule = parse_schedule(v);
    auto count = [](const char* name, int lo, int hi, int& value) {
        if (const char* v = getenv(name)) {
            char* end;
            long n = strtol(v, &end, 10);
            if (end == v || *end || n < lo || n > hi) {
                const std::string expected = "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
                bad_setting(name, v, expected.c_str());
            }
            value = (int)n;
        }
    };
    const int most = max_pool_threads();
    if (const char* v = getenv("CPU_CUDA_THREADS")) {
        char* end;
        long n = strtol(v, &end, 10);
        if (end == v || *end || n < 0 || n > most) {
            std::string expected =
                "a whole number from 0 (the processors it may use) to " + std::to_string(most) +
                ": each thread keeps up to " + std::to_string(MAX_BLOCK_THREADS) +
                " fiber stacks with guard pages, 2 memory maps each, and vm.max_map_count is " +
                std::to_string(max_map_count()) + " (raise it for more)";
            bad_setting("CPU_CUDA_THREADS", v, expected.c_str());
        }
        s.threads = (int)n;
    }
    if (s.threads == 0)  // the mask and the cgroup quota (processors.h), within the maps' limit
        s.threads = std::min(usable_processors(), most);
    count("CPU_CUDA_DEVICES", 1, 64, s.devices);
    int stack_kb = (int)(s.stack_bytes >> 10);
    count("CPU_CUDA_STACK_KB", 16, 1 << 20, stack_kb);
    s.stack_bytes = (size_t)stack_kb << 10;
    if (const char* v = getenv("CPU_CUDA_MEMORY")) {
        s.memory = parse_bytes(v);
        if (s.memory == 0) bad_setting("CPU_CUDA_MEMORY", v, "a size such as 80GB or 512MiB");
    }
    if (const char* v = getenv("CPU_CUDA_NCCL_TIMEOUT")) {
        char* end = nullptr;
        s.nccl_timeout_s = strtod(v, &end);
        if (end == v || *end || !(s.nccl_timeout_s > 0) || !(s.nccl_timeout_s < 1e9))
            bad_setting("CPU_CUDA_NCCL_TIMEOUT", v, "seconds > 0");
    }
    if (const char* v = getenv("CPU_CUDA_WMMA_LAYOUT")) {
        if (strcmp(v, "natural") && strcmp(v, "shuffled")) bad_setting("CPU_CUDA_WMMA_LAYOUT", v, "natural or shuffled");
        s.wmma_shuffled = v[0] == 's';
    }
    if (const char* v = getenv("CPU_CUDA_DELAY_STREAM"); v && *v) {  // (empty: none)
        int k = 0, ms = 0, used = 0;
        if (sscanf(v, "%d:%d%n", &k, &ms, &used) != 2 || v[used] || k < 1 || k > 1000 || ms < 1 || ms > 10000)
            bad_setting("CPU_CUDA_DELAY_STREAM", v,
                        "K:MS, the K-th stream the program creates (1 to 1000) and a delay of MS ms (1 to 10000)");
        s.delay_stream = k, s.delay_ms = ms;
    }
    return s;
}

inline Settings& settings() {
    static Settings s = read_settings();
    return s;
}

}  // namespace cpu_cuda
