// gpu/attention_choice.cuh: --attention auto on a GPU: one layer's attention, forward and
// backward, timed on each path (gpu/attention.cuh's cuBLAS products, gpu/flash_attention.cuh's
// fused kernels) at the run's shape, before training; the trainer keeps the faster.
#pragma once
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "attention.cuh"
#include "common.cuh"
#include "flash_attention.cuh"

namespace gpu {

// TRAIN_GPT_ATTENTION_PICK=fused|cublas, read on the CPU runtime only: its timings say nothing
// of a GPU's, so --attention auto takes the fused path there without timing, unless this names
// the path that is to win; auto then times both as on a GPU and keeps it (the tests' way to
// make auto choose differently from one process to the next, as timing can on a GPU). "" when
// unset, and always in a GPU build, where the timing decides.
inline std::string attention_pick_for_tests() {
#ifdef CPU_CUDA
    const char* v = getenv("TRAIN_GPT_ATTENTION_PICK");
    if (!v) return "";
    if (strcmp(v, "fused") && strcmp(v, "cublas"))
        throw UsageError(strf("TRAIN_GPT_ATTENTION_PICK='%s' is not valid: expected fused or cublas", v));
    return v;
#else
    return "";
#endif
}

// Milliseconds per forward + backward of one layer's attention on (B,T,C) with NH query heads
// and KVH K/V heads, on the fused path or the cuBLAS one, the mean of `reps` after one
// untimed; -1 when that path's buffers do not fit in the GPU's free memory. Inputs are zeros:
// the time of these kernels does not depend on the values.
inline double time_attention_layer(bool fused, int B, int T, int C, int NH, int KVH, int reps = 5) {
    const size_t n = (size_t)B * T * C, rows = (size_t)B * NH * T, att = rows * T;
    const size_t nqkv = (size_t)B * T * (C + 2 * KVH * (C / NH));  // (B,T,QKV)
    std::vector<void*> owned;
    bool fits = true;
    auto get = [&](size_t bytes) -> void* {
        void* p = nullptr;
        if (!fits || cudaMalloc(&p, bytes) != cudaSuccess) {
            cudaGetLastError();  // an out-of-memory here is an answer, not an error
            fits = false;
            return nullptr;
        }
        owned.push_back(p);
        CUDA_CHECK(cudaMemset(p, 0, bytes));
        return p;
    };
    floatX *qkv = (floatX*)get(nqkv * sizeof(floatX)), *out = (floatX*)get(n * sizeof(floatX));
    floatX *dout = (floatX*)get(n * sizeof(floatX)), *dqkv = (floatX*)get(nqkv * sizeof(floatX));
    float* stats = (float*)get(2 * rows * sizeof(float));
    float* delta = fused ? (float*)get(flash_backward_scratch_floats(B, T, C, NH) * sizeof(float)) : nullptr;
    AttentionScratch s{};
    if (!fused)
        s = {(floatX*)get(nqkv * sizeof(floatX)), (floatX*)get(nqkv * sizeof(floatX)), (floatX*)get(n * sizeof(floatX)),
             (floatX*)get(att * sizeof(floatX)), (floatX*)get(att * sizeof(floatX))};
    double ms = -1;
    if (fits) {
        auto layer = [&] {
            if (fused) {
                flash_attention_forward(out, stats, qkv, B, T, C, NH, KVH);
                flash_attention_backward(dqkv, delta, dout, out, qkv, stats, B, T, C, NH, KVH);
            } else {
                attention_forward(out, stats, stats + rows, qkv, s, B, T, C, NH, KVH);
                attention_backward(dqkv, dout, qkv, stats, stats + rows, s, B, T, C, NH, KVH);
            }
        };
        layer();  // first launches: module loading, cuBLAS's heuristics
        cudaEvent_t start, stop;
        CUDA_CHECK(cudaEventCreate(&start));
        CUDA_CHECK(cudaEventCreate(&stop));
        CUDA_CHECK(cudaEventRecord(start, ctx.stream));
        for (int i = 0; i < reps; i++) layer();
        CUDA_CHECK(cudaEventRecord(stop, ctx.stream));
        CUDA_CHECK(cudaEventSynchronize(stop));
        float total = 0;
        CUDA_CHECK(cudaEventElapsedTime(&total, start, stop));
        CUDA_CHECK(cudaEventDestroy(start));
        CUDA_CHECK(cudaEventDestroy(stop));
        ms = total / reps;
    }
    synchronize();
    for (void* p : owned) CUDA_CHECK(cudaFree(p));
    return ms;
}

}  // namespace gpu
