// Tests of the CPU runtime for CUDA (cpu_cuda/), doctest: the execution model and the
// runtime API. Built by cpu.mk with the runtime (g++ -include cpu_cuda/cuda_cpu.h), after
// the launch rewrite. (Its cuBLAS and NCCL subsets have suites of their own.)
//
// Every expected value is computed here from CUDA's documented semantics, never by the
// runtime: shuffles from the programming guide's description of each variant and width,
// built-in variables from the launch shape, errors from the codes a GPU returns.
// Faults that end a process (a kernel running off an allocation, a host dereference of
// device memory, a stack overflow) are provoked in a child process, whose death by signal
// and one-line report are checked.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <fstream>
#include <thread>
#include <map>
#include <set>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cpu_cuda_test.h"

// ----------------------------------------------------------------------------
// Built-in variables, grids and blocks

__global__ void write_coordinates(unsigned* out) {
    unsigned bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    unsigned tx = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned threads = blockDim.x * blockDim.y * blockDim.z;
    unsigned* o = out + 8 * ((size_t)bx * threads + tx);
    o[0] = threadIdx.x, o[1] = threadIdx.y, o[2] = threadIdx.z;
    o[3] = blockIdx.x, o[4] = blockIdx.y, o[5] = blockIdx.z;
    o[6] = blockDim.x * 1000000 + blockDim.y * 1000 + blockDim.z;
    o[7] = gridDim.x * 1000000 + gridDim.y * 1000 + gridDim.z;
}

TEST_CASE("threadIdx, blockIdx, blockDim and gridDim in 1-D, 2-D and 3-D launches") {
    struct Shape {
        dim3 grid, block;
    };
    for (Shape s : {Shape{dim3(5), dim3(64)}, Shape{dim3(3, 2), dim3(8, 4)}, Shape{dim3(2, 3, 2), dim3(4, 3, 5)},
                    Shape{dim3(1), dim3(1000)}}) {
        unsigned threads = s.block.x * s.block.y * s.block.z, blocks = s.grid.x * s.grid.y * s.grid.z;
        CAPTURE(threads);
        Dev<unsigned> out((size_t)8 * threads * blocks);
        write_coordinates<<<s.grid, s.block>>>(out.p);
        REQUIRE(cudaGetLastError() == cudaSuccess);
        std::vector<unsigned> h = out.host();
        bool all = true;
        size_t at = 0;
        for (unsigned bz = 0; bz < s.grid.z; bz++)
            for (unsigned by = 0; by < s.grid.y; by++)
                for (unsigned bx = 0; bx < s.grid.x; bx++)
                    for (unsigned tz = 0; tz < s.block.z; tz++)
                        for (unsigned ty = 0; ty < s.block.y; ty++)
                            for (unsigned tx = 0; tx < s.block.x; tx++, at += 8) {
                                unsigned want[8] = {tx, ty, tz, bx, by, bz,
                                                    s.block.x * 1000000 + s.block.y * 1000 + s.block.z,
                                                    s.grid.x * 1000000 + s.grid.y * 1000 + s.grid.z};
                                all = all && memcmp(&h[at], want, sizeof want) == 0;
                            }
        CHECK(all);  // every thread ran exactly where it should (a missed one would be 0xFFFFFFFF)
    }
}

// A kernel may change its by-value parameters; every thread starts from the launch's values.
__global__ void count_down(int* out, int n) {
    while (n > 0) n -= 2;
    out[threadIdx.x] = n;
}

TEST_CASE("every thread gets its own copy of the kernel's parameters") {
    Dev<int> out(64);
    count_down<<<1, 64>>>(out.p, 9);
    std::vector<int> h = out.host();
    CHECK(std::all_of(h.begin(), h.end(), [](int v) { return v == -1; }));
}

// A template kernel, launched over several lines.
template <int K, class T>
__global__ void scale_by(T* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= K;
}

TEST_CASE("template kernels and launches that span several lines") {
    std::vector<float> h(300);
    for (size_t i = 0; i < h.size(); i++) h[i] = (float)i;
    Dev<float> x(h);
    scale_by<3, float><<<(300 + 127) / 128,
                         128,
                         0>>>(x.p,
                              300);
    std::vector<float> r = x.host();
    bool ok = true;
    for (size_t i = 0; i < r.size(); i++) ok = ok && r[i] == 3.0f * i;
    CHECK(ok);
}

// ----------------------------------------------------------------------------
// Warp collectives, against the CUDA programming guide's definition of each

enum Variant { IDX, UP, DOWN, XOR };

template <class T>
__global__ void shuffle_all(T* out, const T* in, int variant, int operand, int width) {
    unsigned t = threadIdx.x;
    T v = in[t];
    T r = variant == IDX ? __shfl_sync(0xffffffffu, v, operand, width)
        : variant == UP ? __shfl_up_sync(0xffffffffu, v, (unsigned)operand, width)
        : variant == DOWN ? __shfl_down_sync(0xffffffffu, v, (unsigned)operand, width)
                          : __shfl_xor_sync(0xffffffffu, v, operand, width);
    out[t] = r;
}

// The lane whose value lane l receives, as the programming guide states it: width splits
// the warp into groups; __shfl_sync reads lane srcLane % width of the own group; up/down
// keep the own value when the source falls outside the group; xor may read an earlier
// group but keeps the own value for a later one. The hardware reads only the low five bits
// of the operand (PTX shfl.sync: bval = b[4:0]), so a delta of 37 shifts by 5.
static int expected_source(int variant, int l, int operand, int width) {
    int group = l / width * width;
    operand %= 32;
    switch (variant) {
        case IDX: return group + operand % width;
        case UP: return l - group >= operand ? l - operand : l;
        case DOWN: return l - group + operand < width ? l + operand : l;
        default: {
            int j = l ^ operand;
            return j < group + width ? j : l;
        }
    }
}

TEST_CASE("__shfl_sync, __shfl_up_sync, __shfl_down_sync and __shfl_xor_sync for every width") {
    const int warps = 2;  // the second warp checks that lanes are numbered within their warp
    std::vector<float> in(32 * warps);
    for (size_t i = 0; i < in.size(); i++) in[i] = 100.0f + (float)i;
    Dev<float> d_in(in), d_out(in.size());
    int cases = 0, wrong = 0;
    for (int variant : {IDX, UP, DOWN, XOR})
        for (int width : {1, 2, 4, 8, 16, 32})
            for (int operand : {0, 1, 3, 5, 16, 31, 37}) {
                if (variant == XOR && operand >= 32) continue;
                shuffle_all<<<1, 32 * warps>>>(d_out.p, d_in.p, variant, operand, width);
                REQUIRE(cudaGetLastError() == cudaSuccess);
                std::vector<float> out = d_out.host();
                for (int t = 0; t < 32 * warps; t++) {
                    int w = t / 32 * 32, src = w + expected_source(variant, t % 32, operand, width);
                    cases++;
                    if (out[t] != in[src]) {
                        if (wrong++ < 5) MESSAGE("variant " << variant << " width " << width << " operand " << operand
                                                          << " thread " << t << ": got " << out[t] << ", want "
                                                          << in[src]);
                    }
                }
            }
    CHECK(cases == 4 * 6 * 7 * 64 - 6 * 64);
    CHECK(wrong == 0);
}

struct Sixteen {
    double a, b;
};
template <class T>
__global__ void rotate(T* out, const T* in) {
    out[threadIdx.x] = __shfl_sync(0xffffffffu, in[threadIdx.x], (threadIdx.x + 1) % 32);
}

TEST_CASE("shuffles move any value of up to 16 bytes: double, bf16, half, float4, a struct") {
    auto check_type = [](auto sample) {
        using T = decltype(sample(0));
        std::vector<T> in(32);
        for (int i = 0; i < 32; i++) in[i] = sample(i);
        Dev<T> d_in(in), d_out(32);
        rotate<<<1, 32>>>(d_out.p, d_in.p);
        std::vector<T> out = d_out.host();
        bool ok = true;
        for (int i = 0; i < 32; i++) ok = ok && memcmp(&out[i], &in[(i + 1) % 32], sizeof(T)) == 0;
        return ok;
    };
    CHECK(check_type([](int i) { return 1.0 / (i + 1); }));
    CHECK(check_type([](int i) { return __float2bfloat16(0.5f * i); }));
    CHECK(check_type([](int i) { return __float2half(0.25f * i); }));
    CHECK(check_type([](int i) { return make_float4(i, 2 * i, 3 * i, 4 * i); }));
    CHECK(check_type([](int i) { return Sixteen{(double)i, -(double)i}; }));
}

__global__ void votes(unsigned* ballots, int* any, int* all, int threshold) {
    int t = threadIdx.x;
    unsigned b = __ballot_sync(0xffffffffu, t % 32 >= threshold);
    int a = __any_sync(0xffffffffu, t % 32 >= threshold), l = __all_sync(0xffffffffu, t % 32 >= threshold);
    ballots[t] = b, any[t] = a, all[t] = l;
}

TEST_CASE("__ballot_sync, __any_sync and __all_sync") {
    Dev<unsigned> b(64);
    Dev<int> any(64), all(64);
    for (int threshold : {0, 1, 17, 31, 32}) {
        votes<<<1, 64>>>(b.p, any.p, all.p, threshold);
        unsigned want = threshold >= 32 ? 0u : ~0u << threshold;
        std::vector<unsigned> hb = b.host();
        std::vector<int> ha = any.host(), hl = all.host();
        CHECK(std::all_of(hb.begin(), hb.end(), [&](unsigned v) { return v == want; }));
        CHECK(std::all_of(ha.begin(), ha.end(), [&](int v) { return v == (threshold < 32); }));
        CHECK(std::all_of(hl.begin(), hl.end(), [&](int v) { return v == (threshold == 0); }));
    }
}

// Two half-warps shuffle independently, each with its own mask; __syncwarp with a mask.
__global__ void half_warps(float* out, const float* in) {
    unsigned lane = threadIdx.x % 32;
    unsigned mask = lane < 16 ? 0x0000ffffu : 0xffff0000u;
    float v = in[threadIdx.x];
    for (int offset = 8; offset > 0; offset /= 2) v += __shfl_xor_sync(mask, v, offset);
    __syncwarp(mask);
    out[threadIdx.x] = v;
}

TEST_CASE("collectives over disjoint masks in one warp, and __syncwarp") {
    std::vector<float> in(32);
    for (int i = 0; i < 32; i++) in[i] = (float)(i * i);
    Dev<float> d_in(in), d_out(32);
    half_warps<<<1, 32>>>(d_out.p, d_in.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> out = d_out.host();
    float lo = 0, hi = 0;
    for (int i = 0; i < 16; i++) lo += in[i], hi += in[16 + i];
    bool ok = true;
    for (int i = 0; i < 32; i++) ok = ok && out[i] == (i < 16 ? lo : hi);
    CHECK(ok);
}

// Lanes that have exited no longer count: the rest of the warp still completes a collective
// whose mask names them (PTX waits for "all non-exited threads in membermask").
__global__ void exit_then_vote(unsigned* out, unsigned* active) {
    if (threadIdx.x % 32 >= 20) return;
    active[threadIdx.x] = __activemask();
    out[threadIdx.x] = __ballot_sync(0xffffffffu, threadIdx.x % 2 == 0);
}

TEST_CASE("exited lanes do not hold up a collective; __activemask names the live lanes") {
    Dev<unsigned> out(32), active(32);
    exit_then_vote<<<1, 32>>>(out.p, active.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<unsigned> o = out.host(), a = active.host();
    for (int i = 0; i < 20; i++) {
        CHECK(o[i] == 0x55555u);  // even lanes below 20
        CHECK(a[i] == 0xfffffu);
    }
}

// ----------------------------------------------------------------------------
// Barriers and shared memory

// A block sum with static shared memory and two barriers; threads beyond n exit early, which
// a barrier must count as arrived.
__global__ void block_total(float* out, const float* in, int n) {
    __shared__ float partial[32];
    if ((int)threadIdx.x >= n) return;
    float v = in[threadIdx.x];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(__activemask(), v, offset);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0;
        for (int w = 0; w < (n + 31) / 32; w++) s += partial[w];
        partial[0] = s;
    }
    __syncthreads();
    out[threadIdx.x] = partial[0];
}

TEST_CASE("__syncthreads with threads that exited early; static shared memory per block") {
    std::vector<float> in(256, 1.0f);
    Dev<float> d_in(in), out(256);
    block_total<<<1, 256>>>(out.p, d_in.p, 256);  // every thread stays
    REQUIRE(cudaGetLastError() == cudaSuccess);
    CHECK(out.host()[255] == 256.0f);
    Dev<float> out2(256);
    block_total<<<1, 256>>>(out2.p, d_in.p, 160);  // 96 threads exit before the barriers
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> h = out2.host();
    CHECK(h[0] == 160.0f);
    CHECK(h[159] == 160.0f);
    CHECK(std::isnan(h[160]));  // never written: still the NaN bytes of cudaMalloc
}

__global__ void barrier_votes(int* out) {
    int t = threadIdx.x;
    out[3 * t] = __syncthreads_count(t % 3 == 0);
    out[3 * t + 1] = __syncthreads_and(t < 1000);
    out[3 * t + 2] = __syncthreads_or(t == 77);
}

TEST_CASE("__syncthreads_count, __syncthreads_and, __syncthreads_or") {
    Dev<int> out(3 * 300);
    barrier_votes<<<1, 300>>>(out.p);
    std::vector<int> h = out.host();
    bool ok = true;
    for (int t = 0; t < 300; t++) ok = ok && h[3 * t] == 100 && h[3 * t + 1] != 0 && h[3 * t + 2] != 0;
    CHECK(ok);
}

// Reads shared memory before anything writes it: a GPU gives garbage, the runtime NaN bytes.
__global__ void read_fresh_shared(unsigned* out, int dynamic) {
    __shared__ unsigned fixed[4];
    extern __shared__ unsigned dyn[];
    unsigned* s = dynamic ? dyn : fixed;
    if (threadIdx.x == 0) out[blockIdx.x] = s[blockIdx.x % 4];
    __syncthreads();
    s[threadIdx.x % 4] = blockIdx.x;  // a block that ran before must not leave this behind
}

TEST_CASE("shared memory, static and dynamic, starts as NaN bytes in every block") {
    for (int dynamic : {0, 1}) {
        CAPTURE(dynamic);
        Dev<unsigned> out(40);
        read_fresh_shared<<<40, 32, dynamic ? 4 * sizeof(unsigned) : 0>>>(out.p, dynamic);
        REQUIRE(cudaGetLastError() == cudaSuccess);
        std::vector<unsigned> h = out.host();
        CHECK(std::all_of(h.begin(), h.end(), [](unsigned v) { return v == 0xFFFFFFFFu; }));
    }
}

// Dynamic shared memory sized at launch: a block-wide reversal.
__global__ void reverse_block(float* x) {
    extern __shared__ float buf[];
    unsigned t = threadIdx.x, n = blockDim.x;
    buf[t] = x[blockIdx.x * n + t];
    __syncthreads();
    x[blockIdx.x * n + t] = buf[n - 1 - t];
}

TEST_CASE("dynamic shared memory, including more than 48 KiB after cudaFuncSetAttribute") {
    const int n = 1024, blocks = 3;
    std::vector<float> h(n * blocks);
    for (size_t i = 0; i < h.size(); i++) h[i] = (float)i;
    Dev<float> x(h);
    reverse_block<<<blocks, n, n * sizeof(float)>>>(x.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> r = x.host();
    bool ok = true;
    for (int b = 0; b < blocks; b++)
        for (int t = 0; t < n; t++) ok = ok && r[b * n + t] == h[b * n + n - 1 - t];
    CHECK(ok);

    reverse_block<<<1, 32, 64 << 10>>>(x.p);  // 64 KiB without asking: refused, as on a GPU
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    REQUIRE(cudaFuncSetAttribute(reverse_block, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 << 10) ==
            cudaSuccess);
    reverse_block<<<1, 32, 64 << 10>>>(x.p);
    CHECK(cudaGetLastError() == cudaSuccess);
    CHECK(cudaFuncSetAttribute(reverse_block, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 << 10) ==
          cudaErrorInvalidValue);
}

// ----------------------------------------------------------------------------
// Launch limits, with the codes a GPU gives

__global__ void nothing() {}

TEST_CASE("launch limits: threads per block, block and grid dimensions") {
    struct Bad {
        dim3 grid, block;
    };
    for (Bad b : {Bad{dim3(1), dim3(1025)}, Bad{dim3(1), dim3(32, 33)}, Bad{dim3(1), dim3(1, 1, 65)},
                  Bad{dim3(1), dim3(2048)}, Bad{dim3(1, 65536), dim3(32)}, Bad{dim3(1, 1, 65536), dim3(32)},
                  Bad{dim3(0), dim3(32)}, Bad{dim3(1), dim3(0)}}) {
        nothing<<<b.grid, b.block>>>();
        CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
        CHECK(cudaGetLastError() == cudaSuccess);  // read and cleared
    }
    nothing<<<dim3(70000), dim3(1, 1, 64)>>>();  // beyond 65535 is legal in x: runs
    CHECK(cudaGetLastError() == cudaSuccess);
    nothing<<<1, dim3(32, 32)>>>();
    CHECK(cudaGetLastError() == cudaSuccess);
    CHECK(cudaPeekAtLastError() == cudaSuccess);
}

// ----------------------------------------------------------------------------
// Errors a GPU would hang or misbehave on: reported, with the place, and the launch fails

__global__ void barrier_in_branch(float* out) {
    if (threadIdx.x < 16) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = 1;
}
__global__ void shuffle_skipped(float* out) {
    float v = 1;
    if (threadIdx.x % 32 < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
    __syncthreads();
    out[threadIdx.x] = v;
}
__global__ void shuffle_not_in_mask(float* out) { out[threadIdx.x] = __shfl_xor_sync(0x1u, 1.0f, 0); }  // fine for lane 0 only
__global__ void shuffle_from_exited(float* out) {
    if (threadIdx.x % 32 >= 16) return;
    out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 8);  // lanes 8..15 read 16..23: gone
}
__global__ void shuffle_bad_width(float* out) { out[threadIdx.x] = __shfl_sync(0xffffffffu, 1.0f, 0, 3); }
__global__ void traps(float* out) {
    if (threadIdx.x == 5) __trap();
    out[threadIdx.x] = 1;
}

TEST_CASE("barriers from different places, deadlocks and misused collectives are errors, not hangs") {
    Dev<float> out(64);
    struct Case {
        std::function<void()> launch;
        const char* says;
    };
    std::vector<Case> cases = {
        {[&] { barrier_in_branch<<<1, 32>>>(out.p); }, "__syncthreads reached from different places"},
        {[&] { shuffle_skipped<<<1, 64>>>(out.p); }, "deadlock"},
        {[&] { shuffle_not_in_mask<<<1, 32>>>(out.p); }, "is not in its own mask"},
        {[&] { shuffle_from_exited<<<1, 32>>>(out.p); }, "which has exited"},
        {[&] { shuffle_bad_width<<<1, 32>>>(out.p); }, "is not a power of two"},
        {[&] { traps<<<2, 32>>>(out.p); }, "__trap()"},
    };
    for (const Case& c : cases) {
        std::string says = c.says;
        CAPTURE(says);
        std::string err = capture_stderr(c.launch);
        CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
        CHECK(contains(err, says));
        CAPTURE(err);
        CHECK(contains(err, "test/cpu_runtime/execution.cu:"));  // the source line of the culprit
        CHECK(contains(err, "kernel '"));
    }
    // after a failed launch the runtime carries on
    nothing<<<4, 64>>>();
    CHECK(cudaGetLastError() == cudaSuccess);
}

// ----------------------------------------------------------------------------
// Schedules and the race detector

__global__ void correct_reduction(float* out, const float* in) {
    __shared__ float s[256];
    s[threadIdx.x] = in[blockIdx.x * 256 + threadIdx.x];
    __syncthreads();
    for (int stride = 128; stride > 0; stride /= 2) {
        if ((int)threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}
// The same without the barrier inside the loop: a thread may read a partner's value before
// the partner has added into it.
__global__ void racy_reduction(float* out, const float* in) {
    __shared__ float s[256];
    s[threadIdx.x] = in[blockIdx.x * 256 + threadIdx.x];
    __syncthreads();
    for (int stride = 128; stride > 0; stride /= 2)
        if ((int)threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}
// Every block writes its own index into element 0: which block wins depends on the order.
__global__ void blocks_collide(int* out) {
    if (threadIdx.x == 0) out[0] = (int)blockIdx.x;
}
// Warp-synchronous code without __syncwarp: correct only if a warp ran in lockstep.
__global__ void warp_tail_without_syncwarp(float* out, const float* in) {
    __shared__ float s[64];
    s[threadIdx.x] = in[threadIdx.x];
    __syncthreads();
    if (threadIdx.x < 32) {
        for (int stride = 32; stride > 0; stride /= 2) s[threadIdx.x] += s[threadIdx.x + stride];  // no __syncwarp
    }
    if (threadIdx.x == 0) out[0] = s[0];
}

TEST_CASE("every schedule gives a correct kernel the same result") {
    std::mt19937 rng(3);
    std::vector<float> in(256 * 8);
    for (float& v : in) v = (float)(rng() % 1000) / 7.0f;
    Dev<float> d_in(in), out(8);
    cpu_cuda::Settings saved = cpu_cuda::settings();
    std::vector<float> first;
    for (const char* spec : {"warp", "forward", "reverse", "shuffle:7", "warp-reverse,blocks-reversed"}) {
        CAPTURE(spec);
        cpu_cuda::settings().schedule = cpu_cuda::parse_schedule(spec);
        correct_reduction<<<8, 256>>>(out.p, d_in.p);
        REQUIRE(cudaGetLastError() == cudaSuccess);
        std::vector<float> r = out.host();
        if (first.empty()) first = r;
        CHECK(memcmp(r.data(), first.data(), r.size() * sizeof(float)) == 0);
    }
    cpu_cuda::settings() = saved;
    // and the sums are right: within float32 rounding of a double sum of 256 terms
    for (int b = 0; b < 8; b++) {
        double s = 0;
        for (int i = 0; i < 256; i++) s += in[b * 256 + i];
        CHECK(std::fabs(first[b] - s) <= 1e-5 * std::fabs(s));
    }
}

TEST_CASE("the race detector catches a missing __syncthreads, a missing __syncwarp and colliding blocks") {
    std::vector<float> in(256 * 4);
    for (size_t i = 0; i < in.size(); i++) in[i] = (float)(i % 17);
    Dev<float> d_in(in), out(4);
    Dev<int> winner(1);
    cpu_cuda::Settings saved = cpu_cuda::settings();
    cpu_cuda::settings().racecheck = true;

    std::string err = capture_stderr([&] { correct_reduction<<<4, 256>>>(out.p, d_in.p); });
    CHECK(cudaGetLastError() == cudaSuccess);  // a correct kernel is not flagged
    CHECK(err.empty());

    err = capture_stderr([&] { racy_reduction<<<4, 256>>>(out.p, d_in.p); });
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CHECK(contains(err, "race"));
    CHECK(contains(err, "racy_reduction"));

    err = capture_stderr([&] { warp_tail_without_syncwarp<<<1, 64>>>(out.p, d_in.p); });
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CHECK(contains(err, "race"));

    err = capture_stderr([&] { blocks_collide<<<8, 32>>>(winner.p); });
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CHECK(contains(err, "blocks_collide"));
    cpu_cuda::settings() = saved;
}

// ----------------------------------------------------------------------------
// Atomics across blocks that run on several OS threads at once

__global__ void count_everything(int* count, float* sum, unsigned* biggest) {
    atomicAdd(count, 1);
    atomicAdd(sum, 0.5f);
    atomicMax((int*)biggest, (int)(blockIdx.x * blockDim.x + threadIdx.x));
}

TEST_CASE("atomics across blocks: exact counts") {
    Dev<int> count(1);
    Dev<float> sum(1);
    Dev<unsigned> biggest(1);
    cudaMemset(count.p, 0, 4), cudaMemset(sum.p, 0, 4), cudaMemset(biggest.p, 0, 4);
    count_everything<<<64, 128>>>(count.p, sum.p, biggest.p);
    CHECK(count.host()[0] == 64 * 128);
    CHECK(sum.host()[0] == 4096.0f);  // halves add exactly in float32 up to 2^24
    CHECK(biggest.host()[0] == 64 * 128 - 1);
}

// ----------------------------------------------------------------------------
// bf16 and fp16 device math, rounded once from float32 as the GPU's instructions are

__global__ void bf16_math(float* out, const __nv_bfloat16* x) {
    int i = threadIdx.x;
    __nv_bfloat16 v = x[i];
    out[8 * i + 0] = __bfloat162float(__hfma(v, v, v));
    out[8 * i + 1] = __bfloat162float(hsqrt(v));
    out[8 * i + 2] = __bfloat162float(hexp(v));
    out[8 * i + 3] = __bfloat162float(hlog(v));
    out[8 * i + 4] = __bfloat162float(htanh(v));
    out[8 * i + 5] = __bfloat162float(hrsqrt(v));
    out[8 * i + 6] = (float)__bfloat162int_rn(v);
    out[8 * i + 7] = __bfloat162float(__ldg(&x[i]));
}

// float -> bf16, round to nearest even, written out from the format's definition
static float round_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7FFFu + ((u >> 16) & 1)) & 0xFFFF0000u;
    memcpy(&f, &u, 4);
    return f;
}

TEST_CASE("bf16 device math, conversions and __ldg") {
    std::vector<__nv_bfloat16> x(64);
    std::vector<float> xf(64);
    for (int i = 0; i < 64; i++) xf[i] = round_bf16(0.1f + 0.37f * i), x[i] = __float2bfloat16(xf[i]);
    Dev<__nv_bfloat16> d_x(x);
    Dev<float> out(8 * 64);
    bf16_math<<<1, 64>>>(out.p, d_x.p);
    std::vector<float> o = out.host();
    int wrong = 0;
    for (int i = 0; i < 64; i++) {
        float v = xf[i];
        float want[8] = {round_bf16(v * v + v), round_bf16(std::sqrt(v)), round_bf16(std::exp(v)),
                         round_bf16(std::log(v)), round_bf16(std::tanh(v)), round_bf16(1 / std::sqrt(v)),
                         std::nearbyint(v), v};
        for (int k = 0; k < 8; k++) wrong += o[8 * i + k] != want[k];
    }
    CHECK(wrong == 0);
    // the toolkit's conversion rounds to nearest even: a million random floats
    std::mt19937 rng(5);
    int mismatches = 0;
    for (int i = 0; i < 1000000; i++) {
        uint32_t bits = rng();
        float f;
        memcpy(&f, &bits, 4);
        if (std::isnan(f)) continue;
        float got = __bfloat162float(__float2bfloat16(f));
        mismatches += memcmp(&got, &(const float&)round_bf16(f), 4) != 0 && !std::isinf(round_bf16(f));
    }
    CHECK(mismatches == 0);
}

// ----------------------------------------------------------------------------
// Memory: NaN fill, range checks, capacity, pointers

TEST_CASE("fresh device memory is NaN bytes; copies and memsets must stay inside one allocation") {
    Dev<float> a(100), b(50);
    std::vector<float> h = a.host();
    CHECK(std::all_of(h.begin(), h.end(), [](float v) { return std::isnan(v); }));

    std::vector<float> big(200, 1.0f);
    std::string err = capture_stderr([&] {
        CHECK(cudaMemcpy(a.p, big.data(), 101 * sizeof(float), cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
    });
    CHECK(contains(err, "cudaMemcpy"));
    CHECK(contains(err, "4 bytes past the end"));
    err = capture_stderr([&] { CHECK(cudaMemset(b.p + 10, 0, 41 * sizeof(float)) == cudaErrorInvalidValue); });
    CHECK(contains(err, "cudaMemset"));
    err = capture_stderr([&] {
        CHECK(cudaMemcpy(big.data(), big.data() + 1, 4, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
    });
    CHECK(contains(err, "not device memory"));
    CHECK(cudaMemcpy(a.p + 50, b.p, 50 * sizeof(float), cudaMemcpyDeviceToDevice) == cudaSuccess);
    CHECK(cudaMemcpy(a.p, big.data(), 100 * sizeof(float), cudaMemcpyDefault) == cudaSuccess);
    CHECK(a.host()[99] == 1.0f);
    err = capture_stderr([&] { CHECK(cudaFree(a.p + 1) == cudaErrorInvalidValue); });
    CHECK(contains(err, "cudaFree"));
}

__global__ void fill_ones(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 1;
}

TEST_CASE("a host pointer passed to a kernel is refused at the launch") {
    std::vector<float> host(64);
    std::string err = capture_stderr([&] { fill_ones<<<1, 64>>>(host.data(), 64); });
    CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
    CHECK(contains(err, "fill_ones"));
    CHECK(contains(err, "argument 1"));
    float* pinned = nullptr;
    REQUIRE(cudaMallocHost((void**)&pinned, 64 * sizeof(float)) == cudaSuccess);  // a GPU can read this
    fill_ones<<<1, 64>>>(pinned, 64);
    CHECK(cudaGetLastError() == cudaSuccess);
    CHECK(pinned[63] == 1.0f);
    CHECK(cudaFreeHost(pinned) == cudaSuccess);
}

TEST_CASE("memory info counts every byte allocated, and the capacity is enforced") {
    size_t free0 = 0, total = 0;
    REQUIRE(cudaMemGetInfo(&free0, &total) == cudaSuccess);
    void* p;
    REQUIRE(cudaMalloc(&p, 12345) == cudaSuccess);
    size_t free1;
    cudaMemGetInfo(&free1, &total);
    CHECK(free0 - free1 == 12345);
    cudaFree(p);
    cudaMemGetInfo(&free1, &total);
    CHECK(free1 == free0);
    void* q = nullptr;
    CHECK(cudaMalloc(&q, free0 + 1) == cudaErrorMemoryAllocation);
    CHECK(q == nullptr);
    CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
}

// A GPU's driver charges 2 MiB pages: a large allocation rounded up to whole pages, a small
// one carved out of a shared page, which stays charged (so a small cudaMalloc may cost nothing).
TEST_CASE("CPU_CUDA_DRIVER_PAGES=1: memory info counts pages as a GPU's driver does") {
    const size_t page = 2 << 20;
    cpu_cuda::settings().driver_pages = true;
    size_t free0 = 0, free1 = 0, free2 = 0, total = 0;
    cudaMemGetInfo(&free0, &total);
    void *large, *small[2];
    REQUIRE(cudaMalloc(&large, 3 * (1 << 20) + 1) == cudaSuccess);
    cudaMemGetInfo(&free1, &total);
    CHECK(free0 - free1 == 2 * page);  // 3 MiB + 1 byte: two whole pages
    REQUIRE(cudaMalloc(&small[0], 1000) == cudaSuccess);
    REQUIRE(cudaMalloc(&small[1], 1) == cudaSuccess);
    cudaMemGetInfo(&free2, &total);
    CHECK(((free1 - free2) == 0 || (free1 - free2) == page));  // a new shared page at most
    cudaFree(small[0]), cudaFree(small[1]);
    cudaMemGetInfo(&free1, &total);
    CHECK(free1 == free2);  // the shared page stays charged
    void* again;
    REQUIRE(cudaMalloc(&again, 1) == cudaSuccess);  // out of the page already charged
    cudaMemGetInfo(&free2, &total);
    CHECK(free2 == free1);
    cudaFree(again), cudaFree(large);
    cudaMemGetInfo(&free2, &total);
    CHECK(free2 - free1 == 2 * page);  // the large allocation's pages are given back
    cpu_cuda::settings().driver_pages = false;
}

// ----------------------------------------------------------------------------
// Faults that end the process: reported with the kernel, block and thread

__global__ void run_off_the_end(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    x[i] = 1;  // no bounds check: threads beyond n write past the allocation
    (void)n;
}
__device__ int recurse(int depth) {
    volatile char pad[512];
    pad[0] = (char)depth;
    return depth > 0 ? recurse(depth - 1) + pad[0] : 0;
}
__global__ void too_deep(int* out) { out[threadIdx.x] = recurse(1 << 20); }

TEST_CASE("a kernel running off the end of an allocation stops with its name, block and thread") {
    std::string err;
    int status = in_child(
        [] {
            float* x;
            cudaMalloc(&x, 1000 * sizeof(float));
            run_off_the_end<<<8, 128>>>(x, 1000);  // 1024 threads, 1000 elements
        },
        &err);
    CHECK(WIFSIGNALED(status));
    CHECK(contains(err, "kernel 'run_off_the_end' block (7,0,0) thread (104,0,0)"));
    CHECK(contains(err, "0 bytes past the end of a device allocation of 4000 bytes"));
}

TEST_CASE("a CUDA thread's stack overflow is reported as such") {
    std::string err;
    int status = in_child(
        [] {
            int* out;
            cudaMalloc(&out, 64);
            too_deep<<<1, 1>>>(out);
        },
        &err);
    CHECK(WIFSIGNALED(status));
    CHECK(contains(err, "kernel 'too_deep'"));
    CHECK(contains(err, "stack overflow"));
}

TEST_CASE("CPU_CUDA_PROTECT=1: host code that dereferences a device pointer faults with a message") {
    std::string err;
    int status = in_child(
        [] {
            cpu_cuda::settings().protect_host = true;
            float* x;
            cudaMalloc(&x, 64 * sizeof(float));  // closed to the host when the call returns
            fill_ones<<<1, 64>>>(x, 64);         // the kernel may still use it
            if (cudaGetLastError() != cudaSuccess) _exit(3);
            printf("%f\n", x[3]);  // the bug: a host read of device memory
        },
        &err);
    CHECK(WIFSIGNALED(status));
    CHECK(contains(err, "host code touched device memory"));
    CHECK(contains(err, "byte 12 of a device allocation of 256 bytes"));
}

// ----------------------------------------------------------------------------
// Streams, events, devices

TEST_CASE("streams and events: in order, timed, and checked handles") {
    cudaStream_t s = nullptr;
    REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
    cudaEvent_t start = nullptr, stop = nullptr;
    REQUIRE(cudaEventCreate(&start) == cudaSuccess);
    REQUIRE(cudaEventCreate(&stop) == cudaSuccess);
    Dev<float> x(1 << 16);
    CHECK(cudaEventRecord(start, s) == cudaSuccess);
    fill_ones<<<256, 256, 0, s>>>(x.p, 1 << 16);
    CHECK(cudaEventRecord(stop, s) == cudaSuccess);
    CHECK(cudaEventSynchronize(stop) == cudaSuccess);
    float ms = -1;
    CHECK(cudaEventElapsedTime(&ms, start, stop) == cudaSuccess);
    CHECK(ms >= 0.0f);
    CHECK(x.host()[(1 << 16) - 1] == 1.0f);  // the stream's work is done
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(cudaStreamDestroy(s) == cudaSuccess);
    CHECK(cudaStreamDestroy(s) == cudaErrorInvalidResourceHandle);
    CHECK(cudaStreamSynchronize(s) == cudaErrorInvalidResourceHandle);
    cudaEventDestroy(start), cudaEventDestroy(stop);
    cudaGetLastError();
}

// Streams are independent, as on a GPU: what one stream has queued holds up neither the host
// nor another stream; only an event wait orders one stream after another.
__global__ void copy_flag(float* x, const volatile int* flag, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = (float)*flag;
}
__global__ void plus_one(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + 1;
}
struct Sleeper {
    volatile int* flag;
    double seconds;
};
void sleep_then_set(void* p) {  // a host function: sleeps, then sets the flag to 7
    Sleeper* s = (Sleeper*)p;
    std::this_thread::sleep_for(std::chrono::duration<double>(s->seconds));
    *s->flag = 7;
}
double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
template <class T>
bool all_equal(const std::vector<T>& v, T want) {
    for (T x : v)
        if (!(x == want)) return false;  // (NaN fails)
    return true;
}

TEST_CASE("streams are independent: work queued on one holds up neither the host nor another stream") {
    // A host function keeps stream a busy for 1 s. The calls that follow it on a return at once
    // (< 0.5 s: half the second, room for a loaded machine) and their work runs after it, in
    // order; stream b's work, and the legacy stream's copies (a and b are non-blocking: CUDA's
    // legacy stream does not wait for them), run at once; b waits for a through an event only.
    const int n = 256;
    cudaStream_t a = nullptr, b = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) == cudaSuccess);
    REQUIRE(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) == cudaSuccess);
    cudaEvent_t a_done = nullptr;
    REQUIRE(cudaEventCreate(&a_done) == cudaSuccess);
    int* flag = nullptr;
    REQUIRE(cudaMallocHost((void**)&flag, sizeof(int)) == cudaSuccess);
    *flag = 0;
    Dev<float> x(std::vector<float>(n, 0.0f)), y(std::vector<float>(n, 0.0f)), z(std::vector<float>(n, -1.0f));
    Sleeper sleeper{flag, 1.0};
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(cudaLaunchHostFunc(a, sleep_then_set, &sleeper) == cudaSuccess);
    copy_flag<<<1, n, 0, a>>>(x.p, flag, n);  // x = 7, once the host function has run
    CHECK(cudaGetLastError() == cudaSuccess);
    fill_ones<<<1, 2048, 0, a>>>(x.p, n);  // refused at the launch (over 1024 threads), queue or not
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    CHECK(cudaEventRecord(a_done, a) == cudaSuccess);
    CHECK(cudaEventQuery(a_done) == cudaErrorNotReady);
    CHECK(cudaStreamQuery(a) == cudaErrorNotReady);
    fill_ones<<<1, n, 0, b>>>(y.p, n);  // b has nothing queued: runs now
    CHECK(cudaStreamQuery(b) == cudaSuccess);
    CHECK(all_equal(y.host(), 1.0f));
    CHECK(all_equal(x.host(), 0.0f));  // a's kernel has not run yet
    CHECK(cudaStreamWaitEvent(b, a_done, 0) == cudaSuccess);  // returns at once; b's later work waits
    CHECK(cudaStreamQuery(b) == cudaErrorNotReady);
    plus_one<<<1, n, 0, b>>>(z.p, x.p, n);  // z = x + 1 = 8, after a's work
    CHECK(seconds_since(t0) < 0.5);
    CHECK(cudaStreamSynchronize(b) == cudaSuccess);
    CHECK(seconds_since(t0) >= 0.9);  // (1 s, less the clock's rounding)
    CHECK(cudaStreamQuery(a) == cudaSuccess);  // b waited for the event, which came after a's work
    CHECK(all_equal(z.host(), 8.0f));
    CHECK(all_equal(x.host(), 7.0f));
    CHECK(cudaEventDestroy(a_done) == cudaSuccess);
    CHECK(cudaFreeHost(flag) == cudaSuccess);
    CHECK(cudaStreamDestroy(a) == cudaSuccess);
    CHECK(cudaStreamDestroy(b) == cudaSuccess);
}

TEST_CASE("the legacy default stream waits for the blocking streams, not for the non-blocking ones") {
    // CUDA's implicit synchronization: work on the legacy default stream (here cudaMemcpy) waits
    // for every blocking stream's earlier work; a non-blocking stream is outside that rule.
    const int n = 64;
    cudaStream_t blocking = nullptr;
    REQUIRE(cudaStreamCreate(&blocking) == cudaSuccess);
    int* flag = nullptr;
    REQUIRE(cudaMallocHost((void**)&flag, sizeof(int)) == cudaSuccess);
    *flag = 0;
    Dev<float> x(std::vector<float>(n, 0.0f));
    Sleeper sleeper{flag, 0.5};
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(cudaLaunchHostFunc(blocking, sleep_then_set, &sleeper) == cudaSuccess);
    copy_flag<<<1, n, 0, blocking>>>(x.p, flag, n);
    CHECK(seconds_since(t0) < 0.25);
    CHECK(all_equal(x.host(), 7.0f));  // the copy waited for the blocking stream
    CHECK(seconds_since(t0) >= 0.4);
    CHECK(cudaFreeHost(flag) == cudaSuccess);
    CHECK(cudaStreamDestroy(blocking) == cudaSuccess);
}

TEST_CASE("CPU_CUDA_DELAY_STREAM: the delayed stream's work runs late, so that a missing event wait shows") {
    // In a child (the setting is the process's): the next stream created is delayed by 200 ms a
    // piece. A kernel of stream b that reads what the delayed stream a writes, without waiting,
    // reads the old values (x + 1 = 1); after an event wait, the new ones (2).
    std::string err;
    int status = in_child(
        [] {
            cpu_cuda::settings().delay_stream = cpu_cuda::streams_created() + 1;
            cpu_cuda::settings().delay_ms = 200;
            const int n = 64;
            cudaStream_t a = nullptr, b = nullptr;
            cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);  // delayed
            cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
            cudaEvent_t written = nullptr;
            cudaEventCreate(&written);
            float *x, *early, *late;
            cudaMalloc(&x, n * 4), cudaMalloc(&early, n * 4), cudaMalloc(&late, n * 4);
            cudaMemset(x, 0, n * 4);
            fill_ones<<<1, n, 0, a>>>(x, n);  // queued, 200 ms late
            bool queued = cudaStreamQuery(a) == cudaErrorNotReady;
            cudaEventRecord(written, a);
            plus_one<<<1, n, 0, b>>>(early, x, n);  // no wait: before a's kernel
            cudaStreamWaitEvent(b, written, 0);
            plus_one<<<1, n, 0, b>>>(late, x, n);
            cudaStreamSynchronize(b);
            std::vector<float> e(n), l(n);
            cudaMemcpy(e.data(), early, n * 4, cudaMemcpyDeviceToHost);
            cudaMemcpy(l.data(), late, n * 4, cudaMemcpyDeviceToHost);
            fprintf(stderr, "queued %d early %g late %g\n", queued, e[0], l[n - 1]);
            _exit(queued && all_equal(e, 1.0f) && all_equal(l, 2.0f) ? 0 : 1);
        },
        &err);
    INFO(err);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
}

TEST_CASE("device count, properties and selection") {
    int count = 0;
    REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
    CHECK(count >= 1);
    cudaDeviceProp p;
    REQUIRE(cudaGetDeviceProperties(&p, 0) == cudaSuccess);
    CHECK(p.maxThreadsPerBlock == 1024);
    CHECK(p.warpSize == 32);
    CHECK(p.sharedMemPerBlock == 48 * 1024);
    CHECK(contains(p.name, "cpu_cuda"));
    CHECK(cudaSetDevice(count) == cudaErrorInvalidDevice);
    CHECK(cudaSetDevice(count - 1) == cudaSuccess);
    int d = -1;
    cudaGetDevice(&d);
    CHECK(d == count - 1);
    char bus0[32], bus1[32];
    cudaDeviceGetPCIBusId(bus0, sizeof bus0, 0);
    cudaDeviceGetPCIBusId(bus1, sizeof bus1, count - 1);
    CHECK((count == 1 || strcmp(bus0, bus1) != 0));  // ranks on one host tell their GPUs apart
    cudaSetDevice(0);
    cudaGetLastError();
}

// The pool's size when CPU_CUDA_THREADS is unset (processors.h): the cgroup's CPU quota read on
// trees made here as the kernel documents them (cgroup v2's cpu.max is "QUOTA PERIOD" or "max
// PERIOD"; v1's cpu.cfs_quota_us is -1 for no limit), and this process's affinity mask.
TEST_CASE("pool size: the affinity mask within the cgroup's CPU quota, the smallest of the ancestors' quotas") {
    CHECK(cpu_cuda::quota_whole_cpus(250000, 100000) == 2);  // whole CPUs, rounded down
    CHECK(cpu_cuda::quota_whole_cpus(50000, 100000) == 1);   // never below one
    CHECK(cpu_cuda::quota_whole_cpus(-1, 100000) == 0);      // v1: no limit
    char name[] = "/tmp/cpu_cuda_cgroup.XXXXXX";
    REQUIRE(mkdtemp(name) != nullptr);
    const std::string root = name;
    auto put = [&](const std::string& relative, const std::string& text) {
        const std::string dir = root + "/" + relative.substr(0, relative.find_last_of('/'));
        REQUIRE(system(("mkdir -p '" + dir + "'").c_str()) == 0);
        std::ofstream(root + "/" + relative) << text;
    };
    CHECK(cpu_cuda::cgroup_quota_cpus(root) == 0);  // no /proc/self/cgroup: no quota, no error
    // v2, nested: the parent's 3 CPUs limit a child that has none
    put("proc/self/cgroup", "0::/job/step\n");
    put("sys/fs/cgroup/job/cpu.max", "300000 100000\n");
    put("sys/fs/cgroup/job/step/cpu.max", "max 100000\n");
    CHECK(cpu_cuda::cgroup_quota_cpus(root) == 3);
    put("sys/fs/cgroup/job/step/cpu.max", "150000 100000\n");  // the child's is smaller
    CHECK(cpu_cuda::cgroup_quota_cpus(root) == 1);
    put("sys/fs/cgroup/job/step/cpu.max", "50000 25000\n");  // the file's period, not always 100 ms
    CHECK(cpu_cuda::cgroup_quota_cpus(root) == 2);
    // v1 as a container sees it: the path is the host's, only the mount's root exists
    REQUIRE(system(("rm -rf '" + root + "/sys'").c_str()) == 0);
    put("proc/self/cgroup", "4:memory:/docker/abc\n2:cpuacct,cpu:/docker/abc\n0::/\n");
    put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "400000\n");
    put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    CHECK(cpu_cuda::cgroup_quota_cpus(root) == 4);
    put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
    CHECK(cpu_cuda::cgroup_quota_cpus(root) == 0);
    REQUIRE(system(("rm -rf '" + root + "'").c_str()) == 0);
    // this process: at least one, never more than its mask allows
    cpu_set_t set;
    REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
    CHECK(cpu_cuda::usable_processors() >= 1);
    CHECK(cpu_cuda::usable_processors() <= CPU_COUNT(&set));
}

// Every error code the runtime returns has CUDA's name and a wording of its own: the codes are
// read from the runtime's source (cpu_cuda/*.h, from the checkout's top, where the tests run),
// and the names known are those cudaGetErrorName gives for codes 0 to 10,000. The wording of
// the capture and state codes is CUDA's (its Runtime API documentation's error types).
// Every enumerator of the toolkit's cudaError_t (driver_types.h) has its own spelling as its name
// (the toolkit's value, the enumerator's spelling: neither from the runtime's table) and a
// wording other than "unrecognized error code".
TEST_CASE("cudaGetErrorName and cudaGetErrorString know every enumerator of the toolkit's cudaError_t") {
#define E(name) std::pair<int, const char*>((int)name, #name)
    const std::pair<int, const char*> codes[] = {
        E(cudaSuccess),
        E(cudaErrorInvalidValue),
        E(cudaErrorMemoryAllocation),
        E(cudaErrorInitializationError),
        E(cudaErrorCudartUnloading),
        E(cudaErrorProfilerDisabled),
        E(cudaErrorProfilerNotInitialized),
        E(cudaErrorProfilerAlreadyStarted),
        E(cudaErrorProfilerAlreadyStopped),
        E(cudaErrorInvalidConfiguration),
        E(cudaErrorInvalidPitchValue),
        E(cudaErrorInvalidSymbol),
        E(cudaErrorInvalidHostPointer),
        E(cudaErrorInvalidDevicePointer),
        E(cudaErrorInvalidTexture),
        E(cudaErrorInvalidTextureBinding),
        E(cudaErrorInvalidChannelDescriptor),
        E(cudaErrorInvalidMemcpyDirection),
        E(cudaErrorAddressOfConstant),
        E(cudaErrorTextureFetchFailed),
        E(cudaErrorTextureNotBound),
        E(cudaErrorSynchronizationError),
        E(cudaErrorInvalidFilterSetting),
        E(cudaErrorInvalidNormSetting),
        E(cudaErrorMixedDeviceExecution),
        E(cudaErrorNotYetImplemented),
        E(cudaErrorMemoryValueTooLarge),
        E(cudaErrorStubLibrary),
        E(cudaErrorInsufficientDriver),
        E(cudaErrorCallRequiresNewerDriver),
        E(cudaErrorInvalidSurface),
        E(cudaErrorDuplicateVariableName),
        E(cudaErrorDuplicateTextureName),
        E(cudaErrorDuplicateSurfaceName),
        E(cudaErrorDevicesUnavailable),
        E(cudaErrorIncompatibleDriverContext),
        E(cudaErrorMissingConfiguration),
        E(cudaErrorPriorLaunchFailure),
        E(cudaErrorLaunchMaxDepthExceeded),
        E(cudaErrorLaunchFileScopedTex),
        E(cudaErrorLaunchFileScopedSurf),
        E(cudaErrorSyncDepthExceeded),
        E(cudaErrorLaunchPendingCountExceeded),
        E(cudaErrorInvalidDeviceFunction),
        E(cudaErrorNoDevice),
        E(cudaErrorInvalidDevice),
        E(cudaErrorDeviceNotLicensed),
        E(cudaErrorSoftwareValidityNotEstablished),
        E(cudaErrorStartupFailure),
        E(cudaErrorInvalidKernelImage),
        E(cudaErrorDeviceUninitialized),
        E(cudaErrorMapBufferObjectFailed),
        E(cudaErrorUnmapBufferObjectFailed),
        E(cudaErrorArrayIsMapped),
        E(cudaErrorAlreadyMapped),
        E(cudaErrorNoKernelImageForDevice),
        E(cudaErrorAlreadyAcquired),
        E(cudaErrorNotMapped),
        E(cudaErrorNotMappedAsArray),
        E(cudaErrorNotMappedAsPointer),
        E(cudaErrorECCUncorrectable),
        E(cudaErrorUnsupportedLimit),
        E(cudaErrorDeviceAlreadyInUse),
        E(cudaErrorPeerAccessUnsupported),
        E(cudaErrorInvalidPtx),
        E(cudaErrorInvalidGraphicsContext),
        E(cudaErrorNvlinkUncorrectable),
        E(cudaErrorJitCompilerNotFound),
        E(cudaErrorUnsupportedPtxVersion),
        E(cudaErrorJitCompilationDisabled),
        E(cudaErrorUnsupportedExecAffinity),
        E(cudaErrorUnsupportedDevSideSync),
        E(cudaErrorContained),
        E(cudaErrorInvalidSource),
        E(cudaErrorFileNotFound),
        E(cudaErrorSharedObjectSymbolNotFound),
        E(cudaErrorSharedObjectInitFailed),
        E(cudaErrorOperatingSystem),
        E(cudaErrorInvalidResourceHandle),
        E(cudaErrorIllegalState),
        E(cudaErrorLossyQuery),
        E(cudaErrorSymbolNotFound),
        E(cudaErrorNotReady),
        E(cudaErrorIllegalAddress),
        E(cudaErrorLaunchOutOfResources),
        E(cudaErrorLaunchTimeout),
        E(cudaErrorLaunchIncompatibleTexturing),
        E(cudaErrorPeerAccessAlreadyEnabled),
        E(cudaErrorPeerAccessNotEnabled),
        E(cudaErrorSetOnActiveProcess),
        E(cudaErrorContextIsDestroyed),
        E(cudaErrorAssert),
        E(cudaErrorTooManyPeers),
        E(cudaErrorHostMemoryAlreadyRegistered),
        E(cudaErrorHostMemoryNotRegistered),
        E(cudaErrorHardwareStackError),
        E(cudaErrorIllegalInstruction),
        E(cudaErrorMisalignedAddress),
        E(cudaErrorInvalidAddressSpace),
        E(cudaErrorInvalidPc),
        E(cudaErrorLaunchFailure),
        E(cudaErrorCooperativeLaunchTooLarge),
        E(cudaErrorTensorMemoryLeak),
        E(cudaErrorNotPermitted),
        E(cudaErrorNotSupported),
        E(cudaErrorSystemNotReady),
        E(cudaErrorSystemDriverMismatch),
        E(cudaErrorCompatNotSupportedOnDevice),
        E(cudaErrorMpsConnectionFailed),
        E(cudaErrorMpsRpcFailure),
        E(cudaErrorMpsServerNotReady),
        E(cudaErrorMpsMaxClientsReached),
        E(cudaErrorMpsMaxConnectionsReached),
        E(cudaErrorMpsClientTerminated),
        E(cudaErrorCdpNotSupported),
        E(cudaErrorCdpVersionMismatch),
        E(cudaErrorStreamCaptureUnsupported),
        E(cudaErrorStreamCaptureInvalidated),
        E(cudaErrorStreamCaptureMerge),
        E(cudaErrorStreamCaptureUnmatched),
        E(cudaErrorStreamCaptureUnjoined),
        E(cudaErrorStreamCaptureIsolation),
        E(cudaErrorStreamCaptureImplicit),
        E(cudaErrorCapturedEvent),
        E(cudaErrorStreamCaptureWrongThread),
        E(cudaErrorTimeout),
        E(cudaErrorGraphExecUpdateFailure),
        E(cudaErrorExternalDevice),
        E(cudaErrorInvalidClusterSize),
        E(cudaErrorFunctionNotLoaded),
        E(cudaErrorInvalidResourceType),
        E(cudaErrorInvalidResourceConfiguration),
        E(cudaErrorUnknown),
        E(cudaErrorApiFailureBase),
    };
#undef E
    CHECK(sizeof codes / sizeof codes[0] >= 130);
    for (const auto& [code, name] : codes) {
        CHECK_MESSAGE(std::string(cudaGetErrorName((cudaError_t)code)) == name, name);
        const std::string text = cudaGetErrorString((cudaError_t)code);
        CHECK_MESSAGE((text != "unrecognized error code" && !text.empty()), name);
    }
}

TEST_CASE("cudaGetErrorName and cudaGetErrorString know every code the runtime returns") {
    std::map<std::string, int> named;
    for (int e = 0; e <= 10000; e++) {
        std::string name = cudaGetErrorName((cudaError_t)e);
        if (name == "unrecognized error code") {
            CHECK(std::string(cudaGetErrorString((cudaError_t)e)) == "unrecognized error code");
            continue;
        }
        CHECK_MESSAGE(!named.count(name), name << " names two codes");
        named[name] = e;
        CHECK_MESSAGE(std::string(cudaGetErrorString((cudaError_t)e)) != "unrecognized error code", name);
    }
    std::set<std::string> returned;
    for (const char* header : {"capture.h", "cooperative_groups.h", "cublas_cpu.h", "cuda_cpu.h", "device_math.h",
                               "device_presets.h", "exec.h", "fiber.h", "graphs.h", "memory.h", "mma.h", "nccl_cpu.h",
                               "pool.h", "processors.h", "runtime.h", "settings.h", "streams.h", "textures.h", "wmma.h"}) {
        std::ifstream in(std::string("cpu_cuda/") + header);
        REQUIRE_MESSAGE(in, "cpu_cuda/" << header << " (the tests run from the checkout's top)");
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        for (size_t at = 0; (at = text.find("cudaError", at)) != std::string::npos;) {
            size_t end = at + 9;
            while (end < text.size() && isalnum((unsigned char)text[end])) end++;
            if (end > at + 9 && isupper((unsigned char)text[at + 9])) returned.insert(text.substr(at, end - at));
            at = end;
        }
    }
    CHECK(returned.size() > 20);  // (the scan finds them)
    for (const std::string& name : returned) CHECK_MESSAGE(named.count(name), name << " has no name");
    // the toolkit's values for the names
    CHECK(named["cudaErrorIllegalState"] == (int)cudaErrorIllegalState);
    CHECK(named["cudaErrorStreamCaptureUnsupported"] == (int)cudaErrorStreamCaptureUnsupported);
    CHECK(named["cudaErrorInvalidPitchValue"] == (int)cudaErrorInvalidPitchValue);
    CHECK(named["cudaErrorUnknown"] == (int)cudaErrorUnknown);
    CHECK(std::string(cudaGetErrorString(cudaErrorIllegalState)) == "the operation cannot be performed in the present state");
    CHECK(std::string(cudaGetErrorString(cudaErrorStreamCaptureUnsupported)) == "operation not permitted when stream is capturing");
    CHECK(std::string(cudaGetErrorString(cudaErrorStreamCaptureUnjoined)) == "capturing stream has unjoined work");
    CHECK(std::string(cudaGetErrorString(cudaErrorInvalidPitchValue)) == "invalid pitch argument");
    CHECK(std::string(cudaGetErrorString(cudaErrorInvalidValue)) == "invalid argument");
    CHECK(std::string(cudaGetErrorName((cudaError_t)123456)) == "unrecognized error code");
}
