// dev/cuda/common.h: what every kernel workbench shares. See README.md.
//
// A workbench has the production kernel of train_gpt.cu (included below, so version 1 is
// always the kernel that trains) and alternatives, a CPU reference in double precision,
// a correctness check on fresh random inputs into an output poisoned with NaN bytes, and
// timings with CUDA events after a warm-up. It prints one table row per version.
#pragma once
#define TRAIN_NO_MAIN
#include "../../train_gpt.cu"
#include "device_array.h"

#include <functional>

using Floats = std::vector<float>;

inline Floats random_floats(size_t n, Rng& rng, double scale = 1.0) {
    Floats v(n);
    for (float& x : v) x = (float)(scale * rng.normal());
    return v;
}

// v rounded to floatX and back: the inputs as the kernels read them, for the reference too
inline Floats rounded(Floats v) {
    for (float& x : v) x = (float)floatX(x);
    return v;
}
inline std::vector<floatX> to_x(const Floats& v) { return std::vector<floatX>(v.begin(), v.end()); }

// ‖ours − ref‖ / ‖ref‖; NaN if any element of ours is NaN (a forgotten element). ours holds
// float or floatX.
template <class T>
inline double norm_error(const std::vector<T>& ours, const std::vector<double>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        double o = (float)ours[i];
        if (std::isnan(o)) return NAN;
        num += (o - ref[i]) * (o - ref[i]), den += ref[i] * ref[i];
    }
    return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

// The tolerance of a check: fp32 against the double reference, or bf16, whose outputs are
// rounded to an 8-bit mantissa (2^-9 relative each, ~1e-3 of a normalised error): a
// workbench's bf16 tolerance counts the roundings on the kernel's path.
inline double tol(double fp32, double bf16) { return std::is_same<floatX, float>::value ? fp32 : bf16; }

// --check: the quick correctness run (what `make test` runs on the CPU runtime): shapes
// chosen with at_scale() shrink to small ones, and each timing is a single call.
inline bool quick_check = false;
template <class T>
T at_scale(T full, T check) {
    return quick_check ? check : full;
}

// Milliseconds per call of f: `warmup` untimed calls, then the mean of `reps` timed ones.
inline float time_ms(const std::function<void()>& f, int warmup = 3, int reps = 20) {
    if (quick_check) warmup = 0, reps = 1;
    for (int i = 0; i < warmup; i++) f();
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventRecord(start, gpu::ctx.stream));
    for (int i = 0; i < reps; i++) f();
    CUDA_CHECK(cudaEventRecord(stop, gpu::ctx.stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    return ms / reps;
}

// The table: one row per kernel version.
inline void table_header(const char* title) {
    printf("\n%s, %s\n", title, PRECISION_NAME);
    printf("%-44s %12s %8s %10s %10s\n", "version", "norm. error", "check", "ms", "GB/s");
}
// bytes: the memory the kernel must move at least, for an effective bandwidth
inline bool table_row(const std::string& name, double error, double tolerance, float ms, double bytes) {
    bool ok = error <= tolerance;  // NaN fails
    printf("%-44s %12.2e %8s %10.4f %10.1f\n", name.c_str(), error, ok ? "ok" : "FAIL", ms, bytes / (ms * 1e6));
    return ok;
}

// Sets up the GPU, or explains why not (exit 77, like test/gpu_trainer/trainer: not run, not failed).
inline void workbench_init(const char* name) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("%s: no GPU found; nothing was run\n", name);
        exit(77);
    }
    gpu::init_device(0);
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("%s on %s (sm_%d%d, %d SMs)\n", name, prop.name, prop.major, prop.minor, prop.multiProcessorCount);
}

// main() of a workbench: runs body, turns errors into one line, and exits 1 if a check failed.
inline int workbench_main(const char* name, int argc, char** argv, const std::function<bool()>& body) {
    for (int i = 1; i < argc; i++) {
        if (std::string(argv[i]) != "--check") {
            fprintf(stderr, "usage: %s [--check]   (--check: small shapes, one timed call)\n", argv[0]);
            return 2;
        }
        quick_check = true;
    }
    try {
        workbench_init(name);
        bool ok = body();
        printf("%s\n", ok ? "all versions correct" : "SOME VERSIONS FAILED");
        return ok ? 0 : 1;
    } catch (const Error& e) {
        fprintf(stderr, "%s: error: %s\n", name, e.what());
        return 1;
    }
}
