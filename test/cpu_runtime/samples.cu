// Tests of the CPU runtime (cpu_cuda/) on the CUDA that tutorials and vendor samples are
// written in, beyond what the trainer needs: every device attribute, from a preset GPU
// (CPU_CUDA_DEVICE); the rewrite of a string continued with backslash-newline and of the
// other forms of shared and launch syntax; libcu++'s barrier and pipeline with memcpy_async;
// symbols (__constant__ and __device__ variables) with cudaMemcpyToSymbol; the smaller
// runtime calls (profiler, host registration, occupancy, function attributes, stream-ordered
// allocation); cuBLAS's old helpers and more GEMM forms; cooperative groups' grid_group,
// coalesced groups and tiles over 32 threads; atomicInc, atomicDec and umin.
//
// Every expected value comes from the CUDA Runtime API reference, the CUDA C++ Programming
// Guide (its compute-capability table for the device figures) or NVIDIA's datasheets,
// written here by hand, or from simple host loops; never from the runtime's own tables.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <cooperative_groups.h>

#include "cpu_cuda_test.h"

// ----------------------------------------------------------------------------
// Device figures: each preset GPU's, from its datasheet and the Programming Guide's table

struct Expected {
    const char* key;
    int major, minor, sms, threads_per_sm, blocks_per_sm, smem_per_sm_kb, optin_kb, reserved, l2_mb, bus_bits,
        clock_mhz;
};
static const Expected expected_gpus[] = {
    {"t4", 7, 5, 40, 1024, 16, 64, 64, 0, 4, 256, 1590},
    {"v100", 7, 0, 80, 2048, 32, 96, 96, 0, 6, 4096, 1530},
    {"a10", 8, 6, 72, 1536, 16, 100, 99, 1024, 6, 384, 1695},
    {"rtx4090", 8, 9, 128, 1536, 24, 100, 99, 1024, 72, 384, 2520},
    {"a100", 8, 0, 108, 2048, 32, 164, 163, 1024, 40, 5120, 1410},
    {"h100", 9, 0, 132, 2048, 32, 228, 227, 1024, 50, 5120, 1980},
};

static int attr(cudaDeviceAttr a) {
    int v = -12345;
    CHECK(cudaDeviceGetAttribute(&v, a, 0) == cudaSuccess);
    return v;
}

__global__ void smem_user(float* out) {
    extern __shared__ float smem_user_buf[];
    smem_user_buf[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = smem_user_buf[blockDim.x - 1 - threadIdx.x];
}

// The launch limits of the preset GPU: dynamic shared memory up to 48 KB without opting in,
// up to the GPU's opt-in maximum (the Programming Guide's table, expected_gpus) after
// cudaFuncSetAttribute, never beyond; the refusal names the kernel and the numbers.
static void check_launch_limits(const Expected& e) {
    float* out = nullptr;
    REQUIRE(cudaMalloc(&out, 1024 * sizeof(float)) == cudaSuccess);
    std::string err = capture_stderr([&] { smem_user<<<1, 32, (48 << 10) + 4>>>(out); });
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    CHECK(contains(err, "kernel 'smem_user' not launched: 49156 bytes of dynamic shared memory, over the kernel's "
                        "limit of 49152"));
    smem_user<<<1, 32, 48 << 10>>>(out);
    CHECK(cudaGetLastError() == cudaSuccess);
    const int optin = e.optin_kb * 1024;
    err = capture_stderr([&] {
        CHECK(cudaFuncSetAttribute(smem_user, cudaFuncAttributeMaxDynamicSharedMemorySize, optin + 1) ==
              cudaErrorInvalidValue);
    });
    CHECK(contains(err, std::to_string(optin + 1)));
    CHECK(contains(err, std::to_string(optin)));
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    REQUIRE(cudaFuncSetAttribute(smem_user, cudaFuncAttributeMaxDynamicSharedMemorySize, optin) == cudaSuccess);
    smem_user<<<1, 32, optin>>>(out);
    CHECK(cudaGetLastError() == cudaSuccess);
    err = capture_stderr([&] { smem_user<<<dim3(1, 65536), 32>>>(out); });
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    CHECK(contains(err, "kernel 'smem_user' not launched: grid (1,65536,1)"));
    CHECK(contains(err, "65535"));
    err = capture_stderr([&] { smem_user<<<1, 1025>>>(out); });
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    CHECK(contains(err, "1025 threads"));
    cudaFree(out);
}

// Run by the case below in a child process, once per CPU_CUDA_DEVICE value (the preset is read
// once per process); alone, it checks the default.
TEST_CASE("device figures: the GPU CPU_CUDA_DEVICE names") {
    cudaDeviceProp p;
    REQUIRE(cudaGetDeviceProperties(&p, 0) == cudaSuccess);  // (first: a bad name stops the program here)
    const char* key = getenv("CPU_CUDA_DEVICE");
    const Expected* e = nullptr;
    for (const Expected& x : expected_gpus)
        if (strcmp(x.key, key ? key : "h100") == 0) e = &x;
    REQUIRE(e);
    CHECK(p.major == e->major);
    CHECK(p.minor == e->minor);
    if (key) {
        CHECK(p.multiProcessorCount == e->sms);
    } else {  // unset: the runtime's own thread count, as before presets (docs/cpu-runtime.md says why)
        CHECK(p.multiProcessorCount == cpu_cuda::pool().size());
    }
    CHECK(attr(cudaDevAttrMultiProcessorCount) == p.multiProcessorCount);
    CHECK(p.maxThreadsPerMultiProcessor == e->threads_per_sm);
    CHECK(attr(cudaDevAttrMaxThreadsPerMultiProcessor) == e->threads_per_sm);
    CHECK(p.maxBlocksPerMultiProcessor == e->blocks_per_sm);
    CHECK(attr(cudaDevAttrMaxBlocksPerMultiprocessor) == e->blocks_per_sm);
    CHECK(p.sharedMemPerMultiprocessor == (size_t)e->smem_per_sm_kb * 1024);
    CHECK(attr(cudaDevAttrMaxSharedMemoryPerMultiprocessor) == e->smem_per_sm_kb * 1024);
    CHECK(p.sharedMemPerBlockOptin == (size_t)e->optin_kb * 1024);
    CHECK(attr(cudaDevAttrMaxSharedMemoryPerBlockOptin) == e->optin_kb * 1024);
    CHECK(attr(cudaDevAttrReservedSharedMemoryPerBlock) == e->reserved);
    CHECK(p.sharedMemPerBlock == 48 * 1024);
    CHECK(attr(cudaDevAttrMaxSharedMemoryPerBlock) == 48 * 1024);
    CHECK(p.regsPerBlock == 65536);
    CHECK(p.regsPerMultiprocessor == 65536);
    CHECK(attr(cudaDevAttrMaxRegistersPerBlock) == 65536);
    CHECK(attr(cudaDevAttrMaxRegistersPerMultiprocessor) == 65536);
    CHECK(p.l2CacheSize == e->l2_mb << 20);
    CHECK(attr(cudaDevAttrL2CacheSize) == e->l2_mb << 20);
    CHECK(attr(cudaDevAttrGlobalMemoryBusWidth) == e->bus_bits);
    CHECK(attr(cudaDevAttrClockRate) == e->clock_mhz * 1000);  // kHz
    CHECK(attr(cudaDevAttrComputeCapabilityMajor) == e->major);
    CHECK(attr(cudaDevAttrComputeCapabilityMinor) == e->minor);
    CHECK(attr(cudaDevAttrClusterLaunch) == (e->major >= 9));
    // the limits every one of these GPUs shares
    CHECK(attr(cudaDevAttrComputeMode) == cudaComputeModeDefault);
    CHECK(attr(cudaDevAttrMaxThreadsPerBlock) == 1024);
    CHECK(attr(cudaDevAttrMaxBlockDimX) == 1024);
    CHECK(attr(cudaDevAttrMaxBlockDimZ) == 64);
    CHECK(attr(cudaDevAttrMaxGridDimX) == 2147483647);
    CHECK(attr(cudaDevAttrMaxGridDimY) == 65535);
    CHECK(attr(cudaDevAttrWarpSize) == 32);
    CHECK(attr(cudaDevAttrTotalConstantMemory) == 65536);
    CHECK(attr(cudaDevAttrCooperativeLaunch) == 1);
    CHECK(attr(cudaDevAttrConcurrentKernels) == 1);
    CHECK(attr(cudaDevAttrUnifiedAddressing) == 1);
    CHECK(attr(cudaDevAttrMemoryPoolsSupported) == 1);
    CHECK(contains(p.name, "cpu_cuda"));
    check_launch_limits(*e);
}

TEST_CASE("device figures: every preset, every attribute") {
    for (const Expected& e : expected_gpus) {
        CAPTURE(e.key);
        pid_t pid = fork();
        if (pid == 0) {
            setenv("CPU_CUDA_DEVICE", e.key, 1);
            int quiet = open("/dev/null", 1);
            dup2(quiet, 1);
            execl("/proc/self/exe", "test_cpu_cuda_surface", "--test-case=device figures: the GPU*", (char*)nullptr);
            _exit(127);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
    }
    // an unknown name stops the program with the list
    std::string err;
    int status = in_child(
        [] {
            setenv("CPU_CUDA_DEVICE", "k80", 1);
            dup2(open("/dev/null", 1), 1);
            execl("/proc/self/exe", "test_cpu_cuda_surface", "--test-case=device figures: the GPU*", (char*)nullptr);
        },
        &err);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 2));
    CHECK(contains(err, "CPU_CUDA_DEVICE='k80' is not valid: expected one of t4 v100 a10 rtx4090 a100 h100"));
    // every attribute CUDA defines answers; a reserved number or one past the last does not
    for (int a = 1; a <= 150; a++) {
        bool reserved = a == 44 || (a >= 92 && a <= 94) || a == 96 || (a >= 102 && a <= 105) || a == 107 ||
                        a == 110 || (a >= 122 && a <= 124) || (a >= 127 && a <= 129) || a == 132 || a == 136 ||
                        a == 137 || a == 141 || a == 145 || a == 146 || a > 147;
        int v = -12345;
        CAPTURE(a);
        CHECK((cudaDeviceGetAttribute(&v, (cudaDeviceAttr)a, 0) == cudaSuccess) == !reserved);
    }
    cudaGetLastError();
    int v;
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, 99) == cudaErrorInvalidDevice);
    cudaGetLastError();
}

// ----------------------------------------------------------------------------
// The rewrite step: a string literal continued with backslash-newline (phase 2 of translation
// splices the lines), in host code and in a kernel with a launch after it

static const char* const continued = "first: %d\n\
second: %d\n";

__global__ void continued_string_kernel(int* out) {
    const char* s = "ab\
cd";
    int n = 0;
    while (s[n]) n++;
    out[threadIdx.x] = n;
}

TEST_CASE("rewrite: a string literal continued on the next line with a backslash") {
    char buf[64];
    snprintf(buf, sizeof buf, continued, 1, 2);
    CHECK(std::string(buf) == "first: 1\nsecond: 2\n");
    Dev<int> out(4);
    continued_string_kernel<<<1, 4>>>(out.p);
    CHECK(cudaGetLastError() == cudaSuccess);
    CHECK(out.host() == std::vector<int>{4, 4, 4, 4});
}

// ----------------------------------------------------------------------------
// libcu++: cuda::barrier, cuda::pipeline, cuda::memcpy_async, cuda::aligned_size_t

#include <cuda/barrier>
#include <cuda/pipeline>

// Each block sums 4 tiles of 64 floats, each tile copied into shared memory with memcpy_async
// completing on a block barrier; the barrier's phase orders the copy before the reads.
__global__ void barrier_tiles(float* out, const float* in) {
    __shared__ cuda::barrier<cuda::thread_scope_block> bar;
    alignas(16) __shared__ float tile[64];
    if (threadIdx.x == 0) init(&bar, blockDim.x);
    __syncthreads();
    float acc = 0;
    for (int t = 0; t < 4; t++) {
        const float* src = in + (blockIdx.x * 4 + t) * 64;
        if (threadIdx.x == 0) cuda::memcpy_async(tile, src, cuda::aligned_size_t<16>(sizeof tile), bar);
        bar.arrive_and_wait();
        acc += tile[threadIdx.x];
        auto token = bar.arrive();  // everyone has read the tile before the next copy
        bar.wait(std::move(token));
    }
    out[blockIdx.x * 64 + threadIdx.x] = acc;
}

// Warp 0 produces, warp 1 consumes, through a barrier of 64 expected arrivals; then warp 1
// drops out and warp 0 alone completes the next phases.
__global__ void barrier_drop(int* out) {
    __shared__ cuda::barrier<cuda::thread_scope_block> bar;
    __shared__ int value[32];
    if (threadIdx.x == 0) init(&bar, 64);
    __syncthreads();
    if (threadIdx.x < 32) value[threadIdx.x] = threadIdx.x * 3;
    bar.arrive_and_wait();
    if (threadIdx.x >= 32) {
        out[threadIdx.x - 32] = value[threadIdx.x - 32];
        bar.arrive_and_drop();
        return;
    }
    bar.arrive_and_wait();  // phase 1: 64 arrivals (32 of them drops)
    bar.arrive_and_wait();  // phase 2: the 32 that remain
    out[32 + threadIdx.x] = 1;
}

// A thread's own two-stage pipeline: stage k+1's copy is in flight while stage k is summed
__global__ void pipeline_thread_scope(float* out, const float* in, int stages) {
    __shared__ float buf[2][32];
    auto pipe = cuda::make_pipeline();
    int t = threadIdx.x;
    pipe.producer_acquire();
    cuda::memcpy_async(&buf[0][t], &in[t], sizeof(float), pipe);
    pipe.producer_commit();
    float acc = 0;
    for (int s = 0; s < stages; s++) {
        if (s + 1 < stages) {
            pipe.producer_acquire();
            cuda::memcpy_async(&buf[(s + 1) % 2][t], &in[(s + 1) * 32 + t], sizeof(float), pipe);
            pipe.producer_commit();
        }
        cuda::pipeline_consumer_wait_prior<1>(pipe);
        if (s + 1 == stages) pipe.consumer_wait();
        acc += buf[s % 2][t];
        pipe.consumer_release();
    }
    out[t] = acc;
}

// A block's pipeline: each thread copies the element its neighbour will read
__global__ void pipeline_block_scope(float* out, const float* in, int stages) {
    auto block = cooperative_groups::this_thread_block();
    __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, 2> state;
    __shared__ float buf[2][64];
    auto pipe = cuda::make_pipeline(block, &state);
    int t = threadIdx.x;
    float acc = 0;
    for (int s = 0; s < stages; s++) {
        pipe.producer_acquire();
        cuda::memcpy_async(&buf[s % 2][t], &in[s * 64 + t], sizeof(float), pipe);
        pipe.producer_commit();
        pipe.consumer_wait();
        acc += buf[s % 2][(t + 1) % 64];
        pipe.consumer_release();
    }
    out[t] = acc;
}

// A partitioned block pipeline (libcu++: make_pipeline(group, state, role), or the first
// producer_count ranks as producers): 16 producer threads fill each stage's 64 floats, 48
// consumers each read two of them, through 2 slots over 6 stages
template <bool by_count>
__global__ void pipeline_roles(float* out, const float* in, int stages) {
    auto block = cooperative_groups::this_thread_block();
    __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, 2> state;
    __shared__ float buf[2][64];
    const int t = threadIdx.x;
    const bool producer = by_count ? t < 16 : t >= 48;
    auto pipe = by_count ? cuda::make_pipeline(block, &state, (size_t)16)
                         : cuda::make_pipeline(block, &state, producer ? cuda::pipeline_role::producer
                                                                       : cuda::pipeline_role::consumer);
    const int p = by_count ? t : t - 48, c = by_count ? t - 16 : t;  // rank among producers, consumers
    float acc = 0;
    for (int s = 0; s < stages; s++) {
        if (producer) {
            pipe.producer_acquire();
            for (int k = p; k < 64; k += 16) cuda::memcpy_async(&buf[s % 2][k], &in[s * 64 + k], sizeof(float), pipe);
            pipe.producer_commit();
        } else {
            pipe.consumer_wait();
            acc += buf[s % 2][c] + buf[s % 2][c + 16];
            pipe.consumer_release();
        }
    }
    if (!producer) out[c] = acc;
}

__global__ void misaligned_memcpy_async(float* out, const float* in) {
    __shared__ cuda::barrier<cuda::thread_scope_block> bar;
    alignas(16) __shared__ float tile[8];
    if (threadIdx.x == 0) init(&bar, blockDim.x);
    __syncthreads();
    if (threadIdx.x == 0) cuda::memcpy_async(tile, in + 1, cuda::aligned_size_t<16>(16), bar);  // MISALIGNED
    bar.arrive_and_wait();
    out[threadIdx.x] = tile[threadIdx.x];
}
__global__ void barrier_short(float* out) {
    __shared__ cuda::barrier<cuda::thread_scope_block> bar;
    if (threadIdx.x == 0) init(&bar, blockDim.x + 1);  // one more than will ever arrive
    __syncthreads();
    bar.arrive_and_wait();  // NEVER COMPLETES
    out[threadIdx.x] = 1;
}
__global__ void barrier_too_many(float* out) {
    __shared__ cuda::barrier<cuda::thread_scope_block> bar;
    if (threadIdx.x == 0) init(&bar, 2);
    __syncthreads();
    if (threadIdx.x == 0) (void)bar.arrive(3);  // TOO MANY: three arrivals at once, two expected
    out[threadIdx.x] = 1;
}

TEST_CASE("libcu++: barrier with memcpy_async, arrive/wait tokens, arrive_and_drop") {
    std::vector<float> h(2 * 4 * 64);
    for (size_t i = 0; i < h.size(); i++) h[i] = (float)(i % 97) * 0.5f;
    Dev<float> in(h), out(2 * 64);
    barrier_tiles<<<2, 64>>>(out.p, in.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> got = out.host();
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 64; i++) {
            float want = 0;
            for (int t = 0; t < 4; t++) want += h[(b * 4 + t) * 64 + i];
            CHECK(got[b * 64 + i] == want);
        }
    Dev<int> iout(64);
    barrier_drop<<<1, 64>>>(iout.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<int> ig = iout.host();
    for (int i = 0; i < 32; i++) CHECK(ig[i] == 3 * i);
    for (int i = 32; i < 64; i++) CHECK(ig[i] == 1);
}

TEST_CASE("libcu++: pipelines of a thread and of a block") {
    const int stages = 5;
    std::vector<float> h(stages * 64);
    for (size_t i = 0; i < h.size(); i++) h[i] = (float)i;
    Dev<float> in(h), out(64);
    pipeline_thread_scope<<<1, 32>>>(out.p, in.p, stages);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> got = out.host();
    for (int t = 0; t < 32; t++) {
        float want = 0;
        for (int s = 0; s < stages; s++) want += h[s * 32 + t];
        CHECK(got[t] == want);
    }
    pipeline_block_scope<<<1, 64>>>(out.p, in.p, stages);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    got = out.host();
    for (int t = 0; t < 64; t++) {
        float want = 0;
        for (int s = 0; s < stages; s++) want += h[s * 64 + (t + 1) % 64];
        CHECK(got[t] == want);
    }
}

TEST_CASE("libcu++: a partitioned pipeline, producers and consumers by pipeline_role or by producer count") {
    const int stages = 6;
    std::vector<float> h(stages * 64);
    for (size_t i = 0; i < h.size(); i++) h[i] = (float)(i % 89) + 0.25f;
    Dev<float> in(h), out(48);
    for (bool by_count : {false, true}) {
        out.fill_nan();
        if (by_count)
            pipeline_roles<true><<<1, 64>>>(out.p, in.p, stages);
        else
            pipeline_roles<false><<<1, 64>>>(out.p, in.p, stages);
        REQUIRE(cudaGetLastError() == cudaSuccess);
        std::vector<float> o = out.host();
        for (int c = 0; c < 48; c++) {
            float want = 0;  // sums of small integers plus quarters: exact in float in any order
            for (int s = 0; s < stages; s++) want += h[s * 64 + c] + h[s * 64 + c + 16];
            CHECK(o[c] == want);
        }
    }
}

TEST_CASE("libcu++: misaligned memcpy_async, a barrier never completed, too many arrivals") {
    Dev<float> in(64), out(64);
    std::string err = capture_stderr([&] { misaligned_memcpy_async<<<1, 8>>>(out.p, in.p); });
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CHECK(contains(err, "cuda::memcpy_async at " + std::string(__FILE__) + ":" +
                            std::to_string(line_of("// MISALIGNED")) + ": cuda::aligned_size_t<16> promises"));
    err = capture_stderr([&] { barrier_short<<<1, 32>>>(out.p); });
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CHECK(contains(err, "deadlock: threads 0-31 wait in cuda::barrier::wait (" + std::string(__FILE__) + ":" +
                            std::to_string(line_of("// NEVER COMPLETES"))));
    err = capture_stderr([&] { barrier_too_many<<<1, 2>>>(out.p); });
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CHECK(contains(err, "cuda::barrier::arrive at " + std::string(__FILE__) + ":" +
                            std::to_string(line_of("// TOO MANY")) + ": update 3 with 2 of 2 arrivals still expected"));
}

// ----------------------------------------------------------------------------
// Symbols: __constant__ and __device__ variables filled and read with cudaMemcpy*Symbol

__constant__ float poly[4];    // coefficients, c0 + c1 x + c2 x² + c3 x³
__device__ int hits;           // a counter the kernel updates
__device__ float table[8];

__global__ void eval_poly(float* out, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = poly[0] + x[i] * (poly[1] + x[i] * (poly[2] + x[i] * poly[3]));
    atomicAdd(&hits, 1);
    if (i < 8) table[i] = 2.0f * x[i];
}

TEST_CASE("symbols: cudaMemcpyToSymbol and cudaMemcpyFromSymbol, with offsets and checks") {
    const float c[4] = {1.0f, -2.0f, 0.5f, 0.25f};
    REQUIRE(cudaMemcpyToSymbol(poly, c, sizeof c) == cudaSuccess);
    const int zero = 0;
    REQUIRE(cudaMemcpyToSymbol(hits, &zero, sizeof zero) == cudaSuccess);
    const float c3 = 0.125f;  // replace the last coefficient through an offset
    REQUIRE(cudaMemcpyToSymbol(poly, &c3, sizeof c3, 3 * sizeof(float)) == cudaSuccess);
    std::vector<float> hx(100);
    for (int i = 0; i < 100; i++) hx[i] = (float)i / 16 - 3;
    Dev<float> x(hx), out(100);
    eval_poly<<<4, 32>>>(out.p, x.p, 100);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> got = out.host();
    for (int i = 0; i < 100; i++) CHECK(got[i] == 1.0f + hx[i] * (-2.0f + hx[i] * (0.5f + hx[i] * 0.125f)));
    int h = -1;
    REQUIRE(cudaMemcpyFromSymbol(&h, hits, sizeof h) == cudaSuccess);
    CHECK(h == 100);
    float back[2];  // from the device into the host, then device to device through an offset
    REQUIRE(cudaMemcpyFromSymbol(back, table, sizeof back, 6 * sizeof(float)) == cudaSuccess);
    CHECK(back[0] == 2 * hx[6]);
    CHECK(back[1] == 2 * hx[7]);
    Dev<float> d(8);
    REQUIRE(cudaMemcpyFromSymbol(d.p, table, 8 * sizeof(float), 0, cudaMemcpyDeviceToDevice) == cudaSuccess);
    CHECK(d.host()[5] == 2 * hx[5]);
    size_t size = 0;
    CHECK(cudaGetSymbolSize(&size, poly) == cudaSuccess);
    CHECK(size == 4 * sizeof(float));
    // the wrong size, an offset past the end, a direction that cannot be
    std::string err = capture_stderr([&] {
        CHECK(cudaMemcpyToSymbol(poly, c, sizeof c, sizeof(float)) == cudaErrorInvalidValue);  // SYMBOL OVERRUN
    });
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    CHECK(contains(err, "cudaMemcpyToSymbol at " + std::string(__FILE__) + ":" +
                            std::to_string(line_of("// SYMBOL OVERRUN")) +
                            ": 16 bytes at offset 4 run past the end of the symbol (16 bytes)"));
    err = capture_stderr([&] { CHECK(cudaMemcpyFromSymbol(&h, hits, 8) == cudaErrorInvalidValue); });
    CHECK(contains(err, "8 bytes at offset 0 run past the end of the symbol (4 bytes)"));
    CHECK(cudaMemcpyToSymbol(poly, c, sizeof c, 0, cudaMemcpyDeviceToHost) == cudaErrorInvalidMemcpyDirection);
    cudaGetLastError();
}

// ----------------------------------------------------------------------------
// The smaller runtime calls of samples: profiler, device flags, host registration, occupancy,
// function attributes, the stream-ordered allocator; cuBLAS's vector and matrix helpers

__global__ void add_one(float* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1.0f;
}

TEST_CASE("profiler, device flags, host registration") {
    CHECK(cudaProfilerStart() == cudaSuccess);
    CHECK(cudaProfilerStop() == cudaSuccess);
    CHECK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync) == cudaSuccess);
    unsigned flags = 0;
    CHECK(cudaGetDeviceFlags(&flags) == cudaSuccess);
    CHECK((flags & cudaDeviceScheduleMask) == cudaDeviceScheduleBlockingSync);
    CHECK((flags & cudaDeviceMapHost));
    CHECK(cudaSetDeviceFlags(cudaDeviceScheduleSpin | cudaDeviceScheduleYield) == cudaErrorInvalidValue);
    CHECK(cudaSetDeviceFlags(0x100000) == cudaErrorInvalidValue);
    cudaGetLastError();
    cudaSetDeviceFlags(cudaDeviceScheduleAuto);

    std::vector<float> host(1000, 2.0f);
    REQUIRE(cudaHostRegister(host.data(), host.size() * sizeof(float), cudaHostRegisterDefault) == cudaSuccess);
    float* dp = nullptr;
    REQUIRE(cudaHostGetDevicePointer((void**)&dp, host.data(), 0) == cudaSuccess);
    CHECK(dp == host.data());
    add_one<<<4, 256>>>(dp, 1000);  // a kernel may use registered host memory
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(cudaGetLastError() == cudaSuccess);
    CHECK(host[999] == 3.0f);
    std::string err = capture_stderr([&] {
        CHECK(cudaHostRegister(host.data() + 10, 40, 0) == cudaErrorHostMemoryAlreadyRegistered);
    });
    CHECK(contains(err, "overlaps memory already registered"));
    CHECK(cudaHostUnregister(host.data()) == cudaSuccess);
    CHECK(cudaHostUnregister(host.data()) == cudaErrorHostMemoryNotRegistered);
    err = capture_stderr([&] { add_one<<<1, 32>>>(host.data(), 32); });  // no longer pinned
    CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
    CHECK(contains(err, "which is not device memory"));
}

TEST_CASE("occupancy and function attributes, from the preset GPU (H100 unless CPU_CUDA_DEVICE says)") {
    // By the Programming Guide's figures for compute capability 9.0: 2048 threads, 32 blocks,
    // 228 KB of shared memory per SM, 1 KB of it reserved per block
    int blocks = -1;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, add_one, 256, 0) == cudaSuccess);
    CHECK(blocks == 8);  // 2048 / 256
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, add_one, 32, 0) == cudaSuccess);
    CHECK(blocks == 32);  // the blocks-per-SM limit
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, add_one, 100, 0) == cudaSuccess);
    CHECK(blocks == 16);  // 100 threads take 4 warps: 2048 / 128
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, add_one, 128, 40 * 1024) == cudaSuccess);
    CHECK(blocks == 5);  // 228 KB / (40 KB + 1 KB)
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, add_one, 128, 64 * 1024) == cudaSuccess);
    CHECK(blocks == 0);  // beyond the 48 KB a kernel may use without opting in
    CHECK(cudaFuncSetAttribute(add_one, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024) == cudaSuccess);
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, add_one, 128, 100 * 1024) == cudaSuccess);
    CHECK(blocks == 2);  // 228 / 101
    int min_grid = 0, block = 0;
    CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, add_one) == cudaSuccess);
    CHECK(block == 1024);  // 2 blocks of 1024 fill an SM; the largest such size wins
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    CHECK(min_grid == 2 * sms);
    CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, add_one, 0, 200) == cudaSuccess);
    CHECK(block == 128);  // 16 blocks of 128 = 2048 threads; 160 and 192 keep fewer resident
    CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, add_one, 60 * 1024) == cudaSuccess);
    CHECK(block == 1024);  // 3 blocks of (60 + 1) KB fit, but at most 2 of 1024 threads
    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, add_one) == cudaSuccess);
    CHECK(fa.maxThreadsPerBlock == 1024);
    CHECK(fa.maxDynamicSharedSizeBytes == 100 * 1024);
    CHECK(fa.binaryVersion == 90);
}

TEST_CASE("the stream-ordered allocator and memory pools") {
    cudaStream_t s = nullptr;
    REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
    float* p = nullptr;
    REQUIRE(cudaMallocAsync((void**)&p, 256 * sizeof(float), s) == cudaSuccess);
    CHECK(cudaMemsetAsync(p, 0, 256 * sizeof(float), s) == cudaSuccess);
    add_one<<<1, 256, 0, s>>>(p, 256);
    std::vector<float> h(256);
    CHECK(cudaMemcpyAsync(h.data(), p, 256 * sizeof(float), cudaMemcpyDeviceToHost, s) == cudaSuccess);
    CHECK(cudaFreeAsync(p, s) == cudaSuccess);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(h[255] == 1.0f);
    cudaMemPool_t pool;
    REQUIRE(cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess);
    unsigned long long threshold = ~0ull, back = 0;
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold) == cudaSuccess);
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &back) == cudaSuccess);
    CHECK(back == threshold);
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t mine = nullptr;
    REQUIRE(cudaMemPoolCreate(&mine, &props) == cudaSuccess);
    REQUIRE(cudaMallocFromPoolAsync((void**)&p, 64, mine, s) == cudaSuccess);
    CHECK(cudaFreeAsync(p, s) == cudaSuccess);
    CHECK(cudaMemPoolTrimTo(mine, 0) == cudaSuccess);
    CHECK(cudaMemPoolDestroy(mine) == cudaSuccess);
    CHECK(cudaMallocAsync((void**)&p, 64, (cudaStream_t)&h) == cudaErrorInvalidResourceHandle);
    cudaGetLastError();
    cudaStreamDestroy(s);
}

TEST_CASE("cuBLAS: cublasSetVector, GetVector, SetMatrix, GetMatrix") {
    std::vector<float> x(10);
    for (int i = 0; i < 10; i++) x[i] = (float)i;
    Dev<float> d(20);
    d.fill_nan();
    REQUIRE(cublasSetVector(5, sizeof(float), x.data(), 2, d.p, 3) == CUBLAS_STATUS_SUCCESS);  // x[0,2,..8] -> d[0,3,..12]
    std::vector<float> y(5, -1);
    REQUIRE(cublasGetVector(5, sizeof(float), d.p, 3, y.data(), 1) == CUBLAS_STATUS_SUCCESS);
    CHECK(y == std::vector<float>{0, 2, 4, 6, 8});
    // a 3 x 2 column-major host matrix (ld 4) into a device one of ld 3, and back into ld 5
    std::vector<float> a = {1, 2, 3, -9, 4, 5, 6, -9};
    REQUIRE(cublasSetMatrix(3, 2, sizeof(float), a.data(), 4, d.p, 3) == CUBLAS_STATUS_SUCCESS);
    std::vector<float> b(10, 0);
    REQUIRE(cublasGetMatrix(3, 2, sizeof(float), d.p, 3, b.data(), 5) == CUBLAS_STATUS_SUCCESS);
    CHECK(b == std::vector<float>{1, 2, 3, 0, 0, 4, 5, 6, 0, 0});
    CHECK(cublasSetMatrix(3, 2, sizeof(float), a.data(), 2, d.p, 3) == CUBLAS_STATUS_INVALID_VALUE);  // lda < rows
    CHECK(cublasSetVector(5, sizeof(float), x.data(), 0, d.p, 1) == CUBLAS_STATUS_INVALID_VALUE);
    std::string err = capture_stderr([&] {  // 8 elements of stride 3 run past the 20 floats
        CHECK(cublasSetVector(8, sizeof(float), x.data(), 1, d.p, 3) == CUBLAS_STATUS_INVALID_VALUE);
    });
    CHECK(contains(err, "cublasSetVector: destination"));
}

// ----------------------------------------------------------------------------
// atomicInc, atomicDec (CUDA's wrap-around rules) and umin / umax

__global__ void inc_dec(unsigned* counters, unsigned* mins) {
    atomicInc(&counters[0], 9);   // counts 0..9 then wraps to 0: 64 calls leave 64 % 10
    atomicDec(&counters[1], 9);   // from 0: wraps to 9, then counts down
    mins[threadIdx.x] = umin(threadIdx.x, 40u) + umax(threadIdx.x, 60u);
}

TEST_CASE("atomicInc, atomicDec, umin, umax") {
    Dev<unsigned> c(std::vector<unsigned>{0, 0}), m(64);
    inc_dec<<<1, 64>>>(c.p, m.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<unsigned> got = c.host();
    CHECK(got[0] == 64 % 10);
    unsigned v = 0;  // the documented rule, step by step
    for (int i = 0; i < 64; i++) v = (v == 0 || v > 9) ? 9 : v - 1;
    CHECK(got[1] == v);
    std::vector<unsigned> mins = m.host();
    for (unsigned t = 0; t < 64; t++) CHECK(mins[t] == std::min(t, 40u) + std::max(t, 60u));
}

// ----------------------------------------------------------------------------
// The rewrite on other valid forms: a 2-D dynamic shared array, the qualifier after the type,
// a launch through a function-pointer variable

__global__ void transpose_rows(float* out, const float* in) {  // a 32 x 32 tile through s[y][x] (rows of 33)
    extern __shared__ float s[][33];
    int x = threadIdx.x, y = threadIdx.y;
    s[y][x] = in[y * 32 + x];
    __syncthreads();
    out[y * 32 + x] = s[x][y];
}
__global__ void qualifier_after(float* out) {
    extern float __shared__ smem[];
    smem[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = smem[31 - threadIdx.x];
}
__global__ void scale2(float* p) { p[threadIdx.x] *= 2; }
__global__ void scale3(float* p) { p[threadIdx.x] *= 3; }
static void (*pick(int k))(float*) { return k == 2 ? scale2 : scale3; }

TEST_CASE("rewrite: extern __shared__ T s[][N], extern T __shared__ s[], a launch through a pointer") {
    std::vector<float> h(32 * 32);
    for (int i = 0; i < 32 * 32; i++) h[i] = (float)i;
    Dev<float> in(h), out(32 * 32);
    transpose_rows<<<1, dim3(32, 32), 32 * 33 * sizeof(float)>>>(out.p, in.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> t = out.host();
    for (int y = 0; y < 32; y++)
        for (int x = 0; x < 32; x++) CHECK(t[y * 32 + x] == h[x * 32 + y]);
    qualifier_after<<<1, 32, 32 * sizeof(float)>>>(out.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    t = out.host();
    for (int i = 0; i < 32; i++) CHECK(t[i] == (float)(31 - i));
    Dev<float> p(std::vector<float>(32, 1.0f));
    void (*k)(float*) = pick(3);
    k<<<1, 32>>>(p.p);
    k = pick(2);
    k<<<1, 32>>>(p.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    CHECK(p.host()[31] == 6.0f);
}

// ----------------------------------------------------------------------------
// Textures and surfaces. Every expected value is the Programming Guide's arithmetic ("Texture
// Fetching"), written out here by hand: point sampling reads T[floor(x)]; linear filtering
// (1-a) T[i] + a T[i+1] with i = floor(x - 0.5) and a = frac(x - 0.5) kept in 9-bit fixed point
// with 8 fractional bits; wrap takes frac(x) of a normalized coordinate, mirror 1 - frac(x) on
// odd floor(x); normalized-float reads divide by 255 (unsigned 8-bit) or 127 (signed).

// One fetch per thread: out[k] = tex1D or tex2D at (x[k], y[k])
__global__ void fetch_2d(cudaTextureObject_t tex, const float* x, const float* y, float* out, int n) {
    int k = threadIdx.x;
    if (k < n) out[k] = tex2D<float>(tex, x[k], y[k]);
}
__global__ void fetch_1d(cudaTextureObject_t tex, const float* x, float* out, int n) {
    int k = threadIdx.x;
    if (k < n) out[k] = tex1D<float>(tex, x[k]);
}

struct Texture1D {  // a 1-D CUDA array of floats and a texture object over it
    cudaArray_t array = nullptr;
    cudaTextureObject_t tex = 0;
    Texture1D(const std::vector<float>& texels, cudaTextureDesc desc) {
        cudaChannelFormatDesc ch = cudaCreateChannelDesc<float>();
        REQUIRE(cudaMallocArray(&array, &ch, texels.size()) == cudaSuccess);
        REQUIRE(cudaMemcpy2DToArray(array, 0, 0, texels.data(), texels.size() * 4, texels.size() * 4, 1,
                                    cudaMemcpyHostToDevice) == cudaSuccess);
        cudaResourceDesc res = {};
        res.resType = cudaResourceTypeArray, res.res.array.array = array;
        REQUIRE(cudaCreateTextureObject(&tex, &res, &desc, nullptr) == cudaSuccess);
    }
    ~Texture1D() { cudaDestroyTextureObject(tex), cudaFreeArray(array); }
    std::vector<float> at(const std::vector<float>& xs) {
        Dev<float> x(xs), out(xs.size());
        fetch_1d<<<1, 32>>>(tex, x.p, out.p, (int)xs.size());
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        return out.host();
    }
};
static cudaTextureDesc texture_desc(cudaTextureAddressMode mode, cudaTextureFilterMode filter, bool normalized) {
    cudaTextureDesc d = {};
    d.addressMode[0] = d.addressMode[1] = mode;
    d.filterMode = filter, d.normalizedCoords = normalized, d.readMode = cudaReadModeElementType;
    return d;
}

TEST_CASE("textures: point sampling and the four address modes") {
    const std::vector<float> t = {10, 11, 12, 13};  // N = 4
    SUBCASE("unnormalized, clamp: T[floor(x)], the edge texel outside") {
        Texture1D tex(t, texture_desc(cudaAddressModeClamp, cudaFilterModePoint, false));
        CHECK(tex.at({0.0f, 0.99f, 1.0f, 3.5f, -3.0f, 9.0f}) == std::vector<float>{10, 10, 11, 13, 10, 13});
    }
    SUBCASE("normalized, wrap: frac(x) * N") {
        Texture1D tex(t, texture_desc(cudaAddressModeWrap, cudaFilterModePoint, true));
        // 0.3 * 4 = 1.2 -> 1; 1.3 -> 1.2 -> 1; -0.2 -> frac 0.8 -> 3.2 -> 3; 0.99 -> 3
        CHECK(tex.at({0.3f, 1.3f, -0.2f, 0.99f}) == std::vector<float>{11, 11, 13, 13});
    }
    SUBCASE("normalized, mirror: 1 - frac(x) where floor(x) is odd") {
        Texture1D tex(t, texture_desc(cudaAddressModeMirror, cudaFilterModePoint, true));
        // 1.1 -> 0.9 -> 3.6 -> 3; 1.8 -> 0.2 -> 0.8 -> 0; 2.3 (even) -> 0.3 -> 1
        CHECK(tex.at({1.1f, 1.8f, 2.3f}) == std::vector<float>{13, 10, 11});
    }
    SUBCASE("border: the border colour outside") {
        cudaTextureDesc d = texture_desc(cudaAddressModeBorder, cudaFilterModePoint, false);
        d.borderColor[0] = -7.0f;
        Texture1D tex(t, d);
        CHECK(tex.at({-0.5f, 2.5f, 4.0f}) == std::vector<float>{-7, 12, -7});
    }
}

TEST_CASE("textures: linear filtering keeps its weight in 8 fractional bits") {
    Texture1D tex({0.0f, 1.0f, 5.0f}, texture_desc(cudaAddressModeClamp, cudaFilterModeLinear, false));
    // x = 0.8: i = floor(0.3) = 0, a = 0.3, in 8 fractional bits round(0.3 * 256) / 256 = 77/256
    // (the exact 0.3 would be 7.8e-4 away). x = 1.75: i = 1, a = 0.25 exactly: 1 + 0.25 * 4 = 2.
    // x = 0.25: i = -1, clamped to T[0] on both sides: 0. x = 2.9: T[2] and the clamped T[2]: 5.
    std::vector<float> got = tex.at({0.8f, 1.75f, 0.25f, 2.9f, 0.5f});
    CHECK(got[0] == 77.0f / 256.0f);  // exact: both are sums of powers of two
    CHECK(got[1] == 2.0f);
    CHECK(got[2] == 0.0f);
    CHECK(got[3] == 5.0f);
    CHECK(got[4] == 0.0f);  // a texel's centre reads the texel
}

TEST_CASE("textures: a 2-D array, bilinear, with normalized coordinates and wrap") {
    const int W = 4, H = 2;
    const std::vector<float> t = {0, 1, 2, 3,   //
                                  10, 11, 12, 13};
    cudaChannelFormatDesc ch = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
    cudaArray_t array;
    REQUIRE(cudaMallocArray(&array, &ch, W, H) == cudaSuccess);
    REQUIRE(cudaMemcpy2DToArray(array, 0, 0, t.data(), W * 4, W * 4, H, cudaMemcpyHostToDevice) == cudaSuccess);
    cudaResourceDesc res = {};
    res.resType = cudaResourceTypeArray, res.res.array.array = array;
    cudaTextureDesc d = texture_desc(cudaAddressModeWrap, cudaFilterModeLinear, true);
    cudaTextureObject_t tex;
    REQUIRE(cudaCreateTextureObject(&tex, &res, &d, nullptr) == cudaSuccess);
    // (u, v) = (0.25, 0.5): x = 1.0, y = 1.0 -> i = 0, a = 0.5; j = 0, b = 0.5: the mean of
    // 0, 1, 10, 11 = 5.5. (0.0, 0.25): x = 0 -> i = -1 wraps to 3, a = 0.5; y = 0.5 -> j = 0,
    // b = 0: (3 + 0) / 2 = 1.5. (0.625, 0.75): x = 2.5 -> T[2] of row j = 1 (b = 0): 12.
    Dev<float> x(std::vector<float>{0.25f, 0.0f, 0.625f}), y(std::vector<float>{0.5f, 0.25f, 0.75f}), out(3);
    fetch_2d<<<1, 32>>>(tex, x.p, y.p, out.p, 3);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(out.host() == std::vector<float>{5.5f, 1.5f, 12.0f});
    std::vector<float> back(W * H);
    REQUIRE(cudaMemcpy2DFromArray(back.data(), W * 4, array, 0, 0, W * 4, H, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(back == t);
    CHECK(cudaDestroyTextureObject(tex) == cudaSuccess);
    CHECK(cudaFreeArray(array) == cudaSuccess);
}

__global__ void fetch_uchar4(cudaTextureObject_t tex, float4* out) { *out = tex2D<float4>(tex, 0.5f, 0.5f); }
__global__ void fetch_schar(cudaTextureObject_t tex, float* out) {
    for (int i = 0; i < 3; i++) out[i] = tex1Dfetch<float>(tex, i);
}
__global__ void fetch_int(cudaTextureObject_t tex, int* out) {
    for (int i = 0; i < 4; i++) out[i] = tex1Dfetch<int>(tex, i - 1);  // index -1 and 3: outside, 0
}

TEST_CASE("textures: normalized-float reads of 8-bit integers, and tex1Dfetch over linear memory") {
    SUBCASE("unsigned 8-bit over pitched memory: v / 255") {
        void* p = nullptr;
        size_t pitch = 0;
        REQUIRE(cudaMallocPitch(&p, &pitch, 4, 2) == cudaSuccess);
        CHECK(pitch % 32 == 0);  // cudaDeviceProp::texturePitchAlignment
        CHECK(pitch >= 4);
        const unsigned char texels[2][4] = {{255, 51, 0, 102}, {1, 2, 3, 4}};
        REQUIRE(cudaMemcpy2D(p, pitch, texels, 4, 4, 2, cudaMemcpyHostToDevice) == cudaSuccess);
        cudaResourceDesc res = {};
        res.resType = cudaResourceTypePitch2D;
        res.res.pitch2D = {p, cudaCreateChannelDesc<uchar4>(), 1, 2, pitch};
        cudaTextureDesc d = texture_desc(cudaAddressModeClamp, cudaFilterModePoint, false);
        d.readMode = cudaReadModeNormalizedFloat;
        cudaTextureObject_t tex;
        REQUIRE(cudaCreateTextureObject(&tex, &res, &d, nullptr) == cudaSuccess);
        Dev<float4> out(1);
        fetch_uchar4<<<1, 1>>>(tex, out.p);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        float4 v = out.host()[0];
        CHECK(v.x == 1.0f);
        CHECK(v.y == doctest::Approx(0.2f).epsilon(1e-7));  // 51/255 exactly 0.2, to float rounding
        CHECK(v.z == 0.0f);
        CHECK(v.w == doctest::Approx(0.4f).epsilon(1e-7));
        cudaDestroyTextureObject(tex);
        cudaFree(p);
    }
    SUBCASE("signed 8-bit: v / 127, and -128 reads -1") {
        Dev<signed char> m(std::vector<signed char>{-128, 127, -127});
        cudaResourceDesc res = {};
        res.resType = cudaResourceTypeLinear;
        res.res.linear = {m.p, cudaCreateChannelDesc<signed char>(), 3};
        cudaTextureDesc d = {};
        d.readMode = cudaReadModeNormalizedFloat;
        cudaTextureObject_t tex;
        REQUIRE(cudaCreateTextureObject(&tex, &res, &d, nullptr) == cudaSuccess);
        Dev<float> out(3);
        fetch_schar<<<1, 1>>>(tex, out.p);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        CHECK(out.host() == std::vector<float>{-1.0f, 1.0f, -1.0f});
        cudaDestroyTextureObject(tex);
    }
    SUBCASE("32-bit integers as elements; tex1Dfetch reads 0 outside") {
        Dev<int> m(std::vector<int>{7, -8, 9});
        cudaResourceDesc res = {};
        res.resType = cudaResourceTypeLinear;
        res.res.linear = {m.p, cudaCreateChannelDesc<int>(), 3 * sizeof(int)};
        cudaTextureDesc d = {};
        cudaTextureObject_t tex;
        REQUIRE(cudaCreateTextureObject(&tex, &res, &d, nullptr) == cudaSuccess);
        Dev<int> out(4);
        fetch_int<<<1, 1>>>(tex, out.p);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        CHECK(out.host() == std::vector<int>{0, 7, -8, 9});
        cudaDestroyTextureObject(tex);
    }
}

// A surface is written by byte offset: x counts bytes, not elements
__global__ void write_surface(cudaSurfaceObject_t s, cudaSurfaceBoundaryMode mode, int x, int y, float v) {
    surf2Dwrite(v, s, x, y, mode);
}
__global__ void read_surface(cudaSurfaceObject_t s, cudaSurfaceBoundaryMode mode, int x, int y, float* out) {
    *out = surf2Dread<float>(s, x, y, mode);
}

TEST_CASE("surfaces: byte offsets (a misaligned one fails the launch), and the three boundary modes") {
    const int W = 3, H = 2;
    cudaChannelFormatDesc ch = cudaCreateChannelDesc<float>();
    cudaArray_t array;
    REQUIRE(cudaMallocArray(&array, &ch, W, H, cudaArraySurfaceLoadStore) == cudaSuccess);
    std::vector<float> zero(W * H, 0.0f);
    REQUIRE(cudaMemcpy2DToArray(array, 0, 0, zero.data(), W * 4, W * 4, H, cudaMemcpyHostToDevice) == cudaSuccess);
    cudaResourceDesc res = {};
    res.resType = cudaResourceTypeArray, res.res.array.array = array;
    cudaSurfaceObject_t s;
    REQUIRE(cudaCreateSurfaceObject(&s, &res) == cudaSuccess);
    auto contents = [&] {
        std::vector<float> h(W * H);
        REQUIRE(cudaMemcpy2DFromArray(h.data(), W * 4, array, 0, 0, W * 4, H, cudaMemcpyDeviceToHost) == cudaSuccess);
        return h;
    };
    write_surface<<<1, 1>>>(s, cudaBoundaryModeTrap, 2 * 4, 1, 5.0f);  // element (2, 1)
    write_surface<<<1, 1>>>(s, cudaBoundaryModeZero, 3 * 4, 0, 6.0f);  // outside: dropped
    write_surface<<<1, 1>>>(s, cudaBoundaryModeClamp, -4, 0, 7.0f);    // clamped to (0, 0)
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(contents() == std::vector<float>{7, 0, 0, 0, 0, 5});
    Dev<float> out(1);
    read_surface<<<1, 1>>>(s, cudaBoundaryModeZero, 0, 5, out.p);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(out.host()[0] == 0.0f);
    read_surface<<<1, 1>>>(s, cudaBoundaryModeClamp, 100, 1, out.p);  // clamped to the row's last element
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(out.host()[0] == 5.0f);
    std::string err = capture_stderr([&] {
        write_surface<<<1, 1>>>(s, cudaBoundaryModeTrap, 0, 2, 1.0f);  // row 2 of 2
        CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    });
    CHECK(contains(err, "surf2Dwrite: 4 bytes at byte 0 of row 2 fall outside the surface of 12 bytes x 2 rows"));
    // x counts bytes: a float at byte 2 would straddle elements 0 and 1, a misaligned access,
    // which a GPU does not carry out (the launch fails and nothing is written), in every mode
    for (cudaSurfaceBoundaryMode mode : {cudaBoundaryModeTrap, cudaBoundaryModeClamp, cudaBoundaryModeZero}) {
        CAPTURE((int)mode);
        err = capture_stderr([&] {
            write_surface<<<1, 1>>>(s, mode, 2, 0, 9.0f);
            CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
        });
        CHECK(contains(err, "surf2Dwrite: x = 2 is not a multiple of the element's 4 bytes (a surface's x is a byte offset"));
        err = capture_stderr([&] {
            read_surface<<<1, 1>>>(s, mode, 7, 1, out.p);
            CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
        });
        CHECK(contains(err, "surf2Dread: x = 7 is not a multiple of the element's 4 bytes"));
    }
    CHECK(contents() == std::vector<float>{7, 0, 0, 0, 0, 5});
    CHECK(cudaDestroySurfaceObject(s) == cudaSuccess);
    CHECK(cudaFreeArray(array) == cudaSuccess);
}

TEST_CASE("textures: wrong use is refused with a message naming the call") {
    cudaArray_t array = nullptr;
    cudaChannelFormatDesc three = cudaCreateChannelDesc(32, 32, 32, 0, cudaChannelFormatKindFloat);
    cudaChannelFormatDesc one = cudaCreateChannelDesc<int>();
    cudaTextureDesc linear = texture_desc(cudaAddressModeClamp, cudaFilterModeLinear, false);
    std::string err = capture_stderr([&] {
        // CUDA arrays have 1, 2 or 4 channels
        CHECK(cudaMallocArray(&array, &three, 8, 8) == cudaErrorInvalidChannelDescriptor);
        CHECK(array == nullptr);
        REQUIRE(cudaMallocArray(&array, &one, 8, 8) == cudaSuccess);
        cudaResourceDesc res = {};
        res.resType = cudaResourceTypeArray, res.res.array.array = array;
        cudaTextureObject_t tex = 1;
        // linear filtering of integers read as integers
        CHECK(cudaCreateTextureObject(&tex, &res, &linear, nullptr) == cudaErrorInvalidValue);
        CHECK(tex == 0);
        cudaSurfaceObject_t s = 1;  // a surface needs cudaArraySurfaceLoadStore
        CHECK(cudaCreateSurfaceObject(&s, &res) == cudaErrorInvalidValue);
        std::vector<int> h(8 * 8);  // a copy that runs past the array's last row
        CHECK(cudaMemcpy2DToArray(array, 0, 1, h.data(), 32, 32, 8, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
        CHECK(cudaFreeArray(array) == cudaSuccess);
        CHECK(cudaFreeArray(array) == cudaErrorInvalidValue);  // twice
    });
    CHECK(contains(err, "cpu_cuda: cudaMallocArray: no CUDA array holds {32, 32, 32, 0} bits of float"));
    CHECK(contains(err, "cpu_cuda: cudaCreateTextureObject: linear filtering needs a float result"));
    CHECK(contains(err, "cpu_cuda: cudaCreateSurfaceObject: the array was not made with cudaArraySurfaceLoadStore"));
    CHECK(contains(err, "cpu_cuda: cudaMemcpy2DToArray: 32 bytes x 8 rows at (0, 1) fall outside the array of 32 bytes x 8 rows"));
    CHECK(contains(err, "cpu_cuda: cudaFreeArray: not a live CUDA array"));
    cudaGetLastError();
}

TEST_CASE("textures: a fetch from a destroyed texture, or of the wrong type, fails the launch") {
    cudaTextureObject_t tex;
    {
        Texture1D t({1, 2}, texture_desc(cudaAddressModeClamp, cudaFilterModePoint, false));
        tex = t.tex;
    }
    Dev<float> x(std::vector<float>{0.0f}), out(1);
    std::string err = capture_stderr([&] {
        fetch_1d<<<1, 1>>>(tex, x.p, out.p, 1);
        CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    });
    CHECK(contains(err, "is not a live texture object (it was destroyed)"));
    Dev<int> m(std::vector<int>{1});
    cudaResourceDesc res = {};
    res.resType = cudaResourceTypeLinear;
    res.res.linear = {m.p, cudaCreateChannelDesc<int>(), sizeof(int)};
    cudaTextureDesc d = {};
    REQUIRE(cudaCreateTextureObject(&tex, &res, &d, nullptr) == cudaSuccess);
    err = capture_stderr([&] {
        fetch_schar<<<1, 1>>>(tex, out.p);  // tex1Dfetch<float> of 32-bit integers
        CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    });
    CHECK(contains(err, "tex1Dfetch: a texture of {32, 0, 0, 0} bits of signed read as elements returns integer types, not float ones"));
    cudaDestroyTextureObject(tex);
}

// A texture or surface over memory freed since it was made fails the launch, even when
// cudaMalloc has handed the same address out again; so does a handle no call made. (Each in a
// child process: a runtime that read the freed memory would die of it, or read the newer
// allocation.) The child's exit status: 0 when the launch failed as it should, 3 when not.
static int fetch_fails_in_child(const std::function<cudaError_t()>& launch, std::string* err) {
    int status = in_child([&] {
        try {
            _exit(launch() == cudaErrorLaunchFailure ? 0 : 3);
        } catch (...) {
            _exit(4);  // a REQUIRE failed
        }
    }, err);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST_CASE("textures: a texture or surface over freed memory, or a handle never made, fails the launch") {
    Dev<int> out(4);
    SUBCASE("linear memory freed, its address reused by the next cudaMalloc") {
        std::string err;
        int code = fetch_fails_in_child([&] {
            int* m = nullptr;
            REQUIRE(cudaMalloc(&m, 4 * sizeof(int)) == cudaSuccess);
            cudaResourceDesc res = {};
            res.resType = cudaResourceTypeLinear;
            res.res.linear = {m, cudaCreateChannelDesc<int>(), 4 * sizeof(int)};
            cudaTextureDesc d = {};
            cudaTextureObject_t tex = 0;
            REQUIRE(cudaCreateTextureObject(&tex, &res, &d, nullptr) == cudaSuccess);
            REQUIRE(cudaFree(m) == cudaSuccess);
            int* again = nullptr;
            REQUIRE(cudaMalloc(&again, 4 * sizeof(int)) == cudaSuccess);
            fprintf(stderr, again == m ? "reused\n" : "not reused\n");
            fetch_int<<<1, 1>>>(tex, out.p);
            return cudaGetLastError();
        }, &err);
        CHECK(code == 0);
        CHECK(contains(err, "tex1Dfetch: the memory of texture object 0x"));
        CHECK(contains(err, "was freed after the object was made"));
        if (!contains(err, "reused\n") || contains(err, "not reused")) MESSAGE("(cudaMalloc did not reuse the address this time)");
    }
    SUBCASE("the CUDA array freed") {
        std::string err;
        int code = fetch_fails_in_child([&] {
            Texture1D t({1, 2}, texture_desc(cudaAddressModeClamp, cudaFilterModePoint, false));
            REQUIRE(cudaFreeArray(t.array) == cudaSuccess);
            t.array = nullptr;
            Dev<float> x(std::vector<float>{0.0f}), f(1);
            fetch_1d<<<1, 1>>>(t.tex, x.p, f.p, 1);
            return cudaGetLastError();
        }, &err);
        CHECK(code == 0);
        CHECK(contains(err, "tex1D: the memory of texture object 0x"));
        CHECK(contains(err, "(its CUDA array was freed)"));
    }
    SUBCASE("a surface's CUDA array freed") {
        std::string err;
        int code = fetch_fails_in_child([&] {
            cudaArray_t array = nullptr;
            cudaChannelFormatDesc ch = cudaCreateChannelDesc<float>();
            REQUIRE(cudaMallocArray(&array, &ch, 4, 2, cudaArraySurfaceLoadStore) == cudaSuccess);
            cudaResourceDesc res = {};
            res.resType = cudaResourceTypeArray, res.res.array.array = array;
            cudaSurfaceObject_t s = 0;
            REQUIRE(cudaCreateSurfaceObject(&s, &res) == cudaSuccess);
            REQUIRE(cudaFreeArray(array) == cudaSuccess);
            write_surface<<<1, 1>>>(s, cudaBoundaryModeTrap, 0, 0, 1.0f);
            return cudaGetLastError();
        }, &err);
        CHECK(code == 0);
        CHECK(contains(err, "surf2Dwrite: the memory of surface object 0x"));
    }
    SUBCASE("a handle no call made") {
        std::string err;
        int code = fetch_fails_in_child([&] {
            fetch_int<<<1, 1>>>((cudaTextureObject_t)0x123456, out.p);
            return cudaGetLastError();
        }, &err);
        CHECK(code == 0);
        CHECK(contains(err, "tex1Dfetch: 0x123456 is not a live texture object (no object was made with it)"));
        err = capture_stderr([] { CHECK(cudaDestroyTextureObject((cudaTextureObject_t)0x123456) == cudaErrorInvalidValue); });
        CHECK(contains(err, "cudaDestroyTextureObject: no texture object was made with this handle"));
        cudaGetLastError();
    }
}

// ----------------------------------------------------------------------------
// Cooperative groups: coalesced_threads() and tiles of more than 32 threads

namespace cg = cooperative_groups;

// The threads that take the branch form a coalesced group: one atomic per group, each
// thread's slot from its rank (the Programming Guide's aggregated-increment pattern)
__global__ void aggregated_increment(int* counter, int* slot, unsigned* sizes) {
    if (threadIdx.x % 3 == 0) {
        cg::coalesced_group active = cg::coalesced_threads();
        int base = 0;
        if (active.thread_rank() == 0) base = atomicAdd(counter, (int)active.size());
        base = active.shfl(base, 0);
        slot[threadIdx.x] = base + (int)active.thread_rank();
        sizes[threadIdx.x] = active.size() * 100 + active.shfl_down((unsigned)threadIdx.x, 1) % 100;
        active.sync();
    }
}

__global__ void big_tiles(float* sums, float* picked, int* votes) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<128> tile = cg::tiled_partition<128>(block);
    float v = (float)threadIdx.x;
    sums[threadIdx.x] = cg::reduce(tile, v, cg::plus<float>());
    picked[threadIdx.x] = tile.shfl(v, 100) + tile.shfl_up(v, 64);
    tile.sync();
    votes[threadIdx.x] = tile.any(threadIdx.x == 200) * 2 + tile.all(threadIdx.x < 1000) +
                         4 * (int)tile.meta_group_rank();
}

// The same tiles partitioned from a block given a block_tile_memory (the form that GPUs before
// compute capability 8.0 need for tiles over 32 threads): 64-thread tiles of a 192-thread block
__global__ void tiles_with_scratch(int* sums, int* picked) {
    __shared__ cg::block_tile_memory<256> scratch;
    cg::thread_block block = cg::this_thread_block(scratch);
    cg::thread_block_tile<64> tile = cg::tiled_partition<64>(block);
    int v = (int)threadIdx.x * (int)threadIdx.x;
    sums[threadIdx.x] = cg::reduce(tile, v, cg::plus<int>());
    tile.sync();
    picked[threadIdx.x] = tile.shfl_down(v, 40) + 1000000 * (int)tile.meta_group_rank();
}

TEST_CASE("cooperative groups: tiles of 64 threads from a block with block_tile_memory; a block too large for it") {
    Dev<int> sums(192), picked(192);
    sums.fill_nan(), picked.fill_nan();
    tiles_with_scratch<<<1, 192>>>(sums.p, picked.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<int> su = sums.host(), pk = picked.host();
    for (int t = 0; t < 192; t++) {
        int base = t / 64 * 64, r = t % 64, want = 0;
        for (int i = base; i < base + 64; i++) want += i * i;  // the tile's sum of squares
        const int src = r + 40 < 64 ? t + 40 : t;               // shfl_down past the end keeps its own
        CHECK(su[t] == want);
        CHECK(pk[t] == src * src + 1000000 * (t / 64));
    }
    Dev<int> big_sums(512), big_picked(512);
    std::string err = capture_stderr([&] {
        tiles_with_scratch<<<1, 512>>>(big_sums.p, big_picked.p);  // 512 threads, scratch for 256
        CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    });
    CHECK(contains(err, "the block has 512 threads, more than the 256 its block_tile_memory<256> is sized for"));
}

TEST_CASE("cooperative groups: coalesced_threads, tiles of 128 threads") {
    Dev<int> counter(std::vector<int>{0}), slot(64);
    Dev<unsigned> sizes(64);
    slot.fill_nan();
    aggregated_increment<<<1, 64>>>(counter.p, slot.p, sizes.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    CHECK(counter.host()[0] == 22);  // 0, 3, ..., 63
    std::vector<int> s = slot.host();
    std::vector<unsigned> z = sizes.host();
    std::vector<int> seen;
    for (int t = 0; t < 64; t += 3) seen.push_back(s[t]);
    std::sort(seen.begin(), seen.end());
    for (int i = 0; i < 22; i++) CHECK(seen[i] == i);  // every slot exactly once
    for (int t = 0; t < 64; t += 3) {
        const unsigned group = 11;  // lanes 0, 3, .., 30 of warp 0; 33, .., 63 of warp 1
        unsigned next = (t == 30 || t == 63) ? t : t + 3;  // shfl_down past the last keeps its own
        CHECK(z[t] == group * 100 + next % 100);
    }
    Dev<float> sums(256), picked(256);
    Dev<int> votes(256);
    big_tiles<<<1, 256>>>(sums.p, picked.p, votes.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> su = sums.host(), pk = picked.host();
    std::vector<int> vo = votes.host();
    for (int t = 0; t < 256; t++) {
        int base = t / 128 * 128, r = t % 128;
        CHECK(su[t] == (float)(128 * base + 127 * 128 / 2));
        CHECK(pk[t] == (float)(base + 100) + (float)(r >= 64 ? t - 64 : t));
        CHECK(vo[t] == (t >= 128 ? 2 + 1 + 4 : 1));
    }
}

// ----------------------------------------------------------------------------
// cuBLAS: cublasDgemm (float64), cublasSgemmBatched and cublasDgemmBatched (arrays of pointers), against host loops

TEST_CASE("cuBLAS: cublasDgemm, cublasSgemmBatched and cublasDgemmBatched") {
    cublasHandle_t h;
    REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
    const int m = 5, n = 4, k = 3;  // C (m x n) = 2 A^T B + 0.5 C, A stored k x m, column-major
    std::vector<double> A(k * m), B(k * n), C(m * n);
    for (int i = 0; i < k * m; i++) A[i] = 0.25 * i - 1;
    for (int i = 0; i < k * n; i++) B[i] = 1.0 / (i + 1);
    for (int i = 0; i < m * n; i++) C[i] = i;
    Dev<double> dA(A), dB(B), dC(C);
    const double alpha = 2, beta = 0.5;
    REQUIRE(cublasDgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, dA.p, k, dB.p, k, &beta, dC.p, m) ==
            CUBLAS_STATUS_SUCCESS);
    std::vector<double> got = dC.host();
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k; p++) s += A[i * k + p] * B[j * k + p];
            CHECK(got[j * m + i] == doctest::Approx(2 * s + 0.5 * C[j * m + i]).epsilon(1e-15));
        }
    CHECK(cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, dA.p, m - 1, dB.p, k, &beta, dC.p, m) ==
          CUBLAS_STATUS_INVALID_VALUE);  // lda < m
    // two 2 x 2 products through device arrays of pointers
    std::vector<float> a = {1, 2, 3, 4, 5, 6, 7, 8}, b = {1, 0, 0, 1, 2, 1, 1, 2}, c(8, 0);
    Dev<float> fa(a), fb(b), fc(c);
    std::vector<const float*> pa = {fa.p, fa.p + 4}, pb = {fb.p, fb.p + 4};
    std::vector<float*> pc = {fc.p, fc.p + 4};
    Dev<const float*> da(pa), db(pb);
    Dev<float*> dc(pc);
    const float one = 1, zero = 0;
    REQUIRE(cublasSgemmBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, da.p, 2, db.p, 2, &zero, dc.p, 2, 2) ==
            CUBLAS_STATUS_SUCCESS);
    // first: A = [1 3; 2 4] times I; second: [5 7; 6 8] times [2 1; 1 2]
    CHECK(fc.host() == std::vector<float>{1, 2, 3, 4, 17, 20, 19, 22});
    // cublasDgemmBatched: three products C_b (3 x 2) = 1.5 A_b B_b^T - 0.25 C_b, A_b 3 x 4 and B_b
    // 2 x 4 column-major, each batch's matrices at its own place in one allocation, against a
    // plain double loop (the tolerance, 1e-15 relative: a sum of four float64 products in
    // another order)
    const int bm = 3, bn = 2, bk = 4, batches = 3;
    std::vector<double> hA(batches * bm * bk), hB(batches * bn * bk), hC(batches * bm * bn);
    for (size_t i = 0; i < hA.size(); i++) hA[i] = std::sin(0.7 * i + 0.1);
    for (size_t i = 0; i < hB.size(); i++) hB[i] = std::cos(0.3 * i) - 0.5;
    for (size_t i = 0; i < hC.size(); i++) hC[i] = 0.125 * i - 1;
    Dev<double> bA(hA), bB(hB), bC(hC);
    std::vector<const double*> ppa, ppb;
    std::vector<double*> ppc;
    for (int b = 0; b < batches; b++)
        ppa.push_back(bA.p + b * bm * bk), ppb.push_back(bB.p + b * bn * bk), ppc.push_back(bC.p + b * bm * bn);
    Dev<const double*> dpa(ppa), dpb(ppb);
    Dev<double*> dpc(ppc);
    const double balpha = 1.5, bbeta = -0.25;
    REQUIRE(cublasDgemmBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, bm, bn, bk, &balpha, dpa.p, bm, dpb.p, bn, &bbeta, dpc.p, bm,
                               batches) == CUBLAS_STATUS_SUCCESS);
    std::vector<double> bgot = bC.host();
    for (int b = 0; b < batches; b++)
        for (int j = 0; j < bn; j++)
            for (int i = 0; i < bm; i++) {
                double sum = 0;
                for (int p = 0; p < bk; p++) sum += hA[b * bm * bk + p * bm + i] * hB[b * bn * bk + p * bn + j];
                const double want = 1.5 * sum - 0.25 * hC[b * bm * bn + j * bm + i];
                CHECK(bgot[b * bm * bn + j * bm + i] == doctest::Approx(want).epsilon(1e-15));
            }
    CHECK(cublasDgemmBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, bm, bn, bk, &balpha, dpa.p, bm, dpb.p, bn, &bbeta, dpc.p, bm,
                             -1) == CUBLAS_STATUS_INVALID_VALUE);  // a negative batch count
    CHECK(bC.host() == bgot);  // left alone
    cublasDestroy(h);
}

// ----------------------------------------------------------------------------
// grid_group with cudaLaunchCooperativeKernel (CUDA C++ Programming Guide, "Grid
// Synchronization"): every block resident at once, grid.sync() a barrier across the grid, a
// grid beyond the occupancy calculator's blocks per SM x the SM count refused with
// cudaErrorCooperativeLaunchTooLarge.

// Phase 1: each block sums its strided share of in[0..n) into partial[block]. grid.sync().
// Phase 2: every block adds up all the partials (they are only complete after the barrier) and
// writes the total; a second grid.sync() then lets block 0 clear the partials, which no block
// may still be reading. ranks[grid rank] = the rank and sizes[] = grid.size() check the numbering.
__global__ void grid_sum(const float* in, int n, float* partial, float* total, unsigned long long* ranks,
                         unsigned long long* sizes, int* valid) {
    cg::grid_group grid = cg::this_grid();
    cg::thread_block block = cg::this_thread_block();
    __shared__ float s[128];
    float v = 0;
    for (unsigned long long i = grid.thread_rank(); i < (unsigned long long)n; i += grid.size()) v += in[i];
    s[threadIdx.x] = v;
    block.sync();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half) s[threadIdx.x] += s[threadIdx.x + half];
        block.sync();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
    grid.sync();
    float sum = 0;
    for (unsigned b = 0; b < gridDim.x; b++) sum += partial[b];
    if (threadIdx.x == 0) total[blockIdx.x] = sum;
    grid.sync();
    if (blockIdx.x == 0 && threadIdx.x < gridDim.x) partial[threadIdx.x] = -1;
    ranks[grid.thread_rank()] = grid.thread_rank();
    sizes[grid.thread_rank()] = grid.size();
    valid[grid.thread_rank()] = grid.is_valid();
}
__global__ void grid_sync_uncooperative(float* out) {
    cg::this_grid().sync();  // NOT COOPERATIVE
    out[threadIdx.x] = 1;
}

// The grid a sample would choose: the most blocks the device holds at once.
static int max_cooperative_blocks(int threads) {
    int per_sm = 0, sms = 0;
    REQUIRE(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, grid_sum, threads, 0) == cudaSuccess);
    REQUIRE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess);
    return per_sm * sms;
}

TEST_CASE("cooperative groups: grid.sync() in a cooperative launch, a reduction in two phases") {
    CHECK(attr(cudaDevAttrCooperativeLaunch) == 1);
    // (at most 16 blocks: each of the grid's threads holds a fiber stack, two memory maps, and
    // the grid a many-core machine holds would need more than vm.max_map_count's default)
    const int threads = 128, blocks = std::min(max_cooperative_blocks(threads), 16), n = 100003;
    REQUIRE(blocks >= 2);
    std::vector<float> h(n);
    double expect = 0;
    for (int i = 0; i < n; i++) h[i] = (float)(i % 7), expect += i % 7;  // small integers: every sum exact
    const unsigned long long size = (unsigned long long)blocks * threads;
    Dev<float> in(h), partial(blocks), total(blocks);
    Dev<unsigned long long> ranks(size), sizes(size);
    Dev<int> valid(size);
    total.fill_nan(), ranks.fill_nan();
    float* in_p = in.p;
    int n_arg = n;
    void* args[] = {&in_p, &n_arg, &partial.p, &total.p, &ranks.p, &sizes.p, &valid.p};
    REQUIRE(cudaLaunchCooperativeKernel((void*)grid_sum, blocks, threads, args, 0, nullptr) == cudaSuccess);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> t = total.host(), p = partial.host();
    for (int b = 0; b < blocks; b++) CHECK(t[b] == (float)expect);  // every block saw every partial
    for (int b = 0; b < blocks; b++) CHECK(p[b] == -1.0f);          // cleared after the second barrier
    std::vector<unsigned long long> r = ranks.host(), z = sizes.host();
    std::vector<int> v = valid.host();
    for (unsigned long long i = 0; i < size; i++) {
        CHECK(r[i] == i);  // each rank exactly once
        CHECK(z[i] == size);
        CHECK(v[i] == 1);
    }
}

TEST_CASE("cooperative groups: a grid too large to be resident, grid.sync() outside a cooperative launch") {
    const int threads = 128, blocks = max_cooperative_blocks(threads) + 1;
    Dev<float> in(std::vector<float>(16, 1.0f)), partial(blocks), total(blocks);
    Dev<unsigned long long> ranks(blocks * threads), sizes(blocks * threads);
    Dev<int> valid(blocks * threads);
    total.fill_nan();
    int n_arg = 16;
    void* args[] = {&in.p, &n_arg, &partial.p, &total.p, &ranks.p, &sizes.p, &valid.p};
    std::string err = capture_stderr([&] {
        CHECK(cudaLaunchCooperativeKernel((void*)grid_sum, blocks, threads, args, 0, nullptr) ==
              cudaErrorCooperativeLaunchTooLarge);
    });
    CHECK(cudaGetLastError() == cudaErrorCooperativeLaunchTooLarge);
    CHECK(contains(err, "blocks of 128 threads, but the device holds"));  // the occupancy's reason
    CHECK(contains(err, "cooperative launch too large"));
    CHECK(std::isnan(total.host()[0]));  // no thread ran
    Dev<float> out(32);
    err = capture_stderr([&] { grid_sync_uncooperative<<<2, 32>>>(out.p); });
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CHECK(contains(err, "grid.sync() at " + std::string(__FILE__) + ":" +
                            std::to_string(line_of("// NOT COOPERATIVE")) +
                            " in a kernel not launched with cudaLaunchCooperativeKernel"));
}

// ----------------------------------------------------------------------------
// Device limits and stream attributes: what a program sets it reads back (CUDA Runtime API,
// cudaDeviceSetLimit / cudaStreamSetAttribute); a limit CUDA does not define is refused.

TEST_CASE("cudaDeviceSetLimit, cudaDeviceGetLimit, cudaStreamSetAttribute") {
    size_t v = 0;
    CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 3 << 20) == cudaSuccess);
    CHECK(cudaDeviceGetLimit(&v, cudaLimitPersistingL2CacheSize) == cudaSuccess);
    CHECK(v == (size_t)3 << 20);
    CHECK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 12345) == cudaSuccess);
    CHECK(cudaDeviceGetLimit(&v, cudaLimitMallocHeapSize) == cudaSuccess);
    CHECK(v == 12345);
    CHECK(cudaDeviceGetLimit(&v, (cudaLimit)99) == cudaErrorUnsupportedLimit);
    CHECK(cudaGetLastError() == cudaErrorUnsupportedLimit);
    cudaStream_t s;
    REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
    cudaStreamAttrValue set{}, got{};
    set.accessPolicyWindow.num_bytes = 4096;
    set.accessPolicyWindow.hitRatio = 0.5f;
    CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &set) == cudaSuccess);
    CHECK(cudaStreamGetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &got) == cudaSuccess);
    CHECK(got.accessPolicyWindow.num_bytes == 4096);
    CHECK(got.accessPolicyWindow.hitRatio == 0.5f);
    CHECK(cudaStreamDestroy(s) == cudaSuccess);
    CHECK(cudaCtxResetPersistingL2Cache() == cudaSuccess);
}

// ----------------------------------------------------------------------------
// Scoped atomics (CUDA C++ Programming Guide, "Atomic Functions": the _block and _system forms
// of each atomic): the same operations, counted here against plain arithmetic.

__global__ void scoped_atomics(int* sum, float* fsum, unsigned* mx, int* cas_wins, unsigned* wrap) {
    atomicAdd_system(sum, (int)threadIdx.x);
    atomicAdd_block(fsum, 0.5f);
    atomicMax_system(mx, threadIdx.x * 3u);
    if (atomicCAS_block(cas_wins + 1, 0, 1) == 0) atomicAdd(cas_wins, 1);  // exactly one thread wins
    atomicInc_system(wrap, 9u);
}

TEST_CASE("atomics: the _block and _system scopes") {
    Dev<int> sum(std::vector<int>{0}), wins(std::vector<int>{0, 0});
    Dev<float> fsum(std::vector<float>{0});
    Dev<unsigned> mx(std::vector<unsigned>{0}), wrap(std::vector<unsigned>{0});
    scoped_atomics<<<1, 64>>>(sum.p, fsum.p, mx.p, wins.p, wrap.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    CHECK(sum.host()[0] == 63 * 64 / 2);
    CHECK(fsum.host()[0] == 32.0f);  // 64 halves: exact in float
    CHECK(mx.host()[0] == 189u);
    CHECK(wins.host()[0] == 1);
    CHECK(wrap.host()[0] == 64u % 10u);  // counts 0..9 and wraps: 64 increments end at 4
}

// ----------------------------------------------------------------------------
// Managed memory (CUDA C++ Programming Guide, "Unified Memory"): one pointer that host code and
// kernels both use, no copies; prefetches and advice accept a range inside the allocation.

TEST_CASE("cudaMallocManaged: host writes, a kernel adds, the host reads; prefetch and advice") {
    float* m = nullptr;
    REQUIRE(cudaMallocManaged(&m, 64 * sizeof(float)) == cudaSuccess);  // the toolkit's template and default
    for (int i = 0; i < 64; i++) m[i] = (float)i;
    cudaMemLocation where{};
    where.type = cudaMemLocationTypeDevice, where.id = 0;
    CHECK(cudaMemPrefetchAsync(m, 64 * sizeof(float), where, 0, nullptr) == cudaSuccess);
    CHECK(cudaMemAdvise(m, 64 * sizeof(float), cudaMemAdviseSetReadMostly, where) == cudaSuccess);
    CHECK(cudaStreamAttachMemAsync(nullptr, m) == cudaSuccess);  // the toolkit's defaults: whole, single stream
    add_one<<<2, 32>>>(m, 64);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    for (int i = 0; i < 64; i++) CHECK(m[i] == (float)i + 1.0f);
    CHECK(cudaMemPrefetchAsync(m, 65 * sizeof(float), where, 0, nullptr) == cudaErrorInvalidValue);  // past its end
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    CHECK(cudaFree(m) == cudaSuccess);
    void* z = nullptr;
    CHECK(cudaMallocManaged(&z, 0, cudaMemAttachGlobal) == cudaErrorInvalidValue);
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
}

// ----------------------------------------------------------------------------
// The rewrite: "__shared__ alignas(N) T t[...]" (the order NVIDIA's samples write) compiles,
// and the array is N-aligned and shared by the block.

__global__ void shared_alignas_after(float* out) {
    __shared__ alignas(alignof(float4)) float t[2][16];
    t[threadIdx.x / 16][threadIdx.x % 16] = (float)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = t[1 - threadIdx.x / 16][threadIdx.x % 16] + ((uintptr_t)&t[0][0] % 16 ? 1000.0f : 0.0f);
}

TEST_CASE("rewrite: __shared__ alignas(N) T t[...]") {
    Dev<float> out(32);
    shared_alignas_after<<<1, 32>>>(out.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> h = out.host();
    for (int i = 0; i < 32; i++) CHECK(h[i] == (float)(i < 16 ? i + 16 : i - 16));  // the other row; aligned
}
