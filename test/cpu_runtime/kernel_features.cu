// Tests of the CPU runtime (cpu_cuda/) on the CUDA features that kernels written elsewhere
// use (tutorials, other trainers' workbenches): cooperative groups, __launch_bounds__,
// built-in variable names in host code, cache-hint loads and stores, packed half atomics,
// CUDA's mixed int/unsigned min and max, __syncwarp() under -std=c++17, NULL kernel
// arguments, a kernel called as a host function, float atomics under the race detector.
//
// Every expected value is computed here from CUDA's documentation (the programming guide's
// cooperative-groups chapter and the reduction and scan orders of cooperative_groups/details),
// by simple host loops, never by the runtime. Errors are checked by their code and message.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <ctime>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>
#include <cstdio>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cpu_cuda_test.h"

namespace cg = cooperative_groups;

// ----------------------------------------------------------------------------
// 1. Cooperative groups

// the block's rank, size and indices; and block.sync(): each thread reads what its neighbour
// wrote before the barrier (without one, a thread would read the NaN poison)
__global__ void block_group(unsigned* out, float* neighbour) {
    cg::thread_block block = cg::this_thread_block();
    __shared__ float written[24];
    unsigned r = (unsigned)block.thread_rank();
    written[r] = 3.0f * r;
    block.sync();
    neighbour[block.group_index().x * 24 + r] = written[(r + 1) % block.size()];
    unsigned* o = out + 6 * (block.group_index().x * 24 + r);
    dim3 t = block.thread_index();
    o[0] = r, o[1] = (unsigned)block.size(), o[2] = block.group_index().x, o[3] = t.x, o[4] = t.y, o[5] = t.z;
}

TEST_CASE("cooperative groups: thread_block's rank, size, indices and sync") {
    Dev<unsigned> out(6 * 48);
    Dev<float> neighbour(48);
    block_group<<<2, dim3(4, 3, 2)>>>(out.p, neighbour.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<unsigned> h = out.host();
    std::vector<float> n = neighbour.host();
    bool ok = true;
    for (unsigned b = 0; b < 2; b++)
        for (unsigned z = 0; z < 2; z++)
            for (unsigned y = 0; y < 3; y++)
                for (unsigned x = 0; x < 4; x++) {
                    unsigned r = x + 4 * (y + 3 * z);  // the programming guide's thread_rank
                    const unsigned* o = &h[6 * (b * 24 + r)];
                    ok &= o[0] == r && o[1] == 24 && o[2] == b && o[3] == x && o[4] == y && o[5] == z;
                    ok &= n[b * 24 + r] == 3.0f * ((r + 1) % 24);
                }
    CHECK(ok);
}

// What each tile call answers, per thread: rank, meta rank and size, the leader's value, the
// neighbours' values, the butterfly partner's, and the three votes.
template <unsigned N>
__global__ void tile_calls(int* out) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<N> tile = cg::tiled_partition<N>(block);
    int t = (int)block.thread_rank();
    int v = 10 * t + 1;
    int* o = out + 10 * t;
    o[0] = (int)tile.thread_rank();
    o[1] = (int)tile.meta_group_rank();
    o[2] = (int)tile.meta_group_size();
    o[3] = tile.shfl(v, 0);
    o[4] = tile.shfl_down(v, 1);
    o[5] = tile.shfl_up(v, 1);
    o[6] = tile.shfl_xor(v, N / 2);
    o[7] = tile.any(t % 7 == 0);
    o[8] = tile.all(t % 2 == 0);
    o[9] = (int)tile.ballot(tile.thread_rank() % 2 == 1);
    tile.sync();
}

template <unsigned N>
void check_tile_calls() {
    CAPTURE(N);
    const int threads = 64;
    Dev<int> out(10 * threads);
    tile_calls<N><<<1, threads>>>(out.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<int> h = out.host();
    for (int t = 0; t < threads; t++) {
        CAPTURE(t);
        int r = t % (int)N, base = t - r;
        auto v = [](int i) { return 10 * i + 1; };
        bool any = false, all = true;
        for (int i = base; i < base + (int)N; i++) any |= i % 7 == 0, all &= i % 2 == 0;
        unsigned ballot = 0;
        for (int i = 0; i < (int)N; i++) ballot |= (unsigned)(i % 2 == 1) << i;
        const int* o = &h[10 * t];
        REQUIRE(o[0] == r);
        REQUIRE(o[1] == t / (int)N);
        REQUIRE(o[2] == threads / (int)N);
        REQUIRE(o[3] == v(base));
        REQUIRE(o[4] == (r + 1 < (int)N ? v(t + 1) : v(t)));  // beyond the tile: its own value
        REQUIRE(o[5] == (r >= 1 ? v(t - 1) : v(t)));
        REQUIRE(o[6] == v(base + (r ^ (int)(N / 2))));
        REQUIRE(o[7] == (int)any);
        REQUIRE(o[8] == (int)all);
        REQUIRE((unsigned)o[9] == ballot);
    }
}

TEST_CASE("cooperative groups: tiles of 1, 2, 4, 8, 16 and 32 threads, every call") {
    check_tile_calls<1>();
    check_tile_calls<2>();
    check_tile_calls<4>();
    check_tile_calls<8>();
    check_tile_calls<16>();
    check_tile_calls<32>();
}

// a tile of a tile: ranks and meta ranks relative to the parent tile
__global__ void subtile(int* out) {
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(cg::this_thread_block());
    cg::thread_block_tile<8> eight = cg::tiled_partition<8>(warp);
    int t = threadIdx.x;
    out[3 * t] = (int)eight.thread_rank(), out[3 * t + 1] = (int)eight.meta_group_rank();
    out[3 * t + 2] = (int)eight.meta_group_size();
}

TEST_CASE("cooperative groups: tiled_partition of a tile") {
    Dev<int> out(3 * 64);
    subtile<<<1, 64>>>(out.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<int> h = out.host();
    bool ok = true;
    for (int t = 0; t < 64; t++) ok &= h[3 * t] == t % 8 && h[3 * t + 1] == t % 32 / 8 && h[3 * t + 2] == 4;
    CHECK(ok);
}

// thread_group: tiled_partition(parent, n) at run time, and a block passed as a thread_group
__device__ unsigned group_rank_times_size(cg::thread_group g) {
    cg::sync(g);
    return (unsigned)(g.thread_rank() * 1000 + g.size());
}
__global__ void dynamic_tiles(unsigned* out, unsigned n) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_group tile = cg::tiled_partition(block, n);
    out[2 * threadIdx.x] = group_rank_times_size(tile);
    out[2 * threadIdx.x + 1] = group_rank_times_size(block);
}

TEST_CASE("cooperative groups: thread_group, tiled_partition(parent, n) and cg::sync") {
    Dev<unsigned> out(2 * 64);
    dynamic_tiles<<<1, 64>>>(out.p, 8);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<unsigned> h = out.host();
    bool ok = true;
    for (unsigned t = 0; t < 64; t++) ok &= h[2 * t] == t % 8 * 1000 + 8 && h[2 * t + 1] == t * 1000 + 64;
    CHECK(ok);
    std::string err = capture_stderr([&] { dynamic_tiles<<<1, 64>>>(out.p, 6); });
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CHECK(contains(err, "tiled_partition at"));
    CHECK(contains(err, "tile size 6 must be a power of two up to 32 that divides the parent's 64 threads"));
}

template <unsigned N, class T, class Op>
__global__ void tile_reduce(const T* in, T* out, Op op) {
    cg::thread_block_tile<N> tile = cg::tiled_partition<N>(cg::this_thread_block());
    out[threadIdx.x] = cg::reduce(tile, in[threadIdx.x], op);
}
template <unsigned N, class T, class Op>
__global__ void tile_scans(const T* in, T* inclusive, T* exclusive, Op op) {
    cg::thread_block_tile<N> tile = cg::tiled_partition<N>(cg::this_thread_block());
    inclusive[threadIdx.x] = cg::inclusive_scan(tile, in[threadIdx.x], op);
    exclusive[threadIdx.x] = cg::exclusive_scan(tile, in[threadIdx.x], op);
}

// CUDA's documented orders (cooperative_groups/details/coalesced_reduce.h, coalesced_scan.h),
// replayed on the host: the butterfly and Hillis-Steele steps, all lanes in lockstep.
template <class T, class Op>
std::vector<T> butterfly(const std::vector<T>& in, unsigned n, Op op) {
    std::vector<T> v = in;
    for (unsigned m = n / 2; m > 0; m /= 2) {
        std::vector<T> next = v;
        for (size_t i = 0; i < v.size(); i++) next[i] = op(v[i], v[(i / n) * n + ((i % n) ^ m)]);
        v = next;
    }
    return v;
}
template <class T, class Op>
std::vector<T> hillis_steele(const std::vector<T>& in, unsigned n, Op op) {
    std::vector<T> v = in;
    for (unsigned m = 1; m < n; m *= 2) {
        std::vector<T> next = v;
        for (size_t i = 0; i < v.size(); i++)
            if (i % n >= m) next[i] = op(v[i], v[i - m]);
        v = next;
    }
    return v;
}

template <unsigned N, class T, class Op, class HostOp>
void check_reduce(const std::vector<T>& in, Op op, HostOp host_op, const char* what) {
    CAPTURE(N);
    CAPTURE(what);
    Dev<T> d_in(in), out(in.size());
    tile_reduce<N, T, Op><<<1, (unsigned)in.size()>>>(d_in.p, out.p, op);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<T> h = out.host(), want = butterfly(in, N, host_op);
    for (size_t i = 0; i < in.size(); i++) {
        CAPTURE(i);
        REQUIRE(memcmp(&h[i], &want[i], sizeof(T)) == 0);  // the same order: the same bits
    }
}

TEST_CASE("cooperative groups: reduce with plus, less, greater, bit_and, bit_or, bit_xor and a lambda") {
    std::vector<int> ints(64);
    for (int i = 0; i < 64; i++) ints[i] = (i * 37 + 11) % 101 - 50;
    // integer answers by hand for the first tile of 32: plain loops, any order
    {
        Dev<int> d(ints), out(64);
        tile_reduce<32, int, cg::plus<int>><<<1, 64>>>(d.p, out.p, cg::plus<int>());
        REQUIRE(cudaGetLastError() == cudaSuccess);
        std::vector<int> h = out.host();
        int sum0 = 0, sum1 = 0;
        for (int i = 0; i < 32; i++) sum0 += ints[i], sum1 += ints[32 + i];
        for (int i = 0; i < 64; i++) REQUIRE(h[i] == (i < 32 ? sum0 : sum1));
    }
    check_reduce<32>(ints, cg::less<int>(), [](int a, int b) { return std::min(a, b); }, "less");
    check_reduce<8>(ints, cg::greater<int>(), [](int a, int b) { return std::max(a, b); }, "greater");
    std::vector<unsigned> bits(64);
    for (unsigned i = 0; i < 64; i++) bits[i] = 0xF0F0FFFFu ^ (1u << (i % 32)) ^ (i * 0x01010101u);
    check_reduce<16>(bits, cg::bit_and<unsigned>(), [](unsigned a, unsigned b) { return a & b; }, "bit_and");
    check_reduce<4>(bits, cg::bit_or<unsigned>(), [](unsigned a, unsigned b) { return a | b; }, "bit_or");
    check_reduce<32>(bits, cg::bit_xor<unsigned>(), [](unsigned a, unsigned b) { return a ^ b; }, "bit_xor");
    // floats whose sum depends on the order: the butterfly's bits, on every lane
    std::vector<float> floats(64);
    for (int i = 0; i < 64; i++) floats[i] = (i % 3 == 0 ? 1e7f : 0.37f) * (i % 2 ? -1.0f : 1.0f) + 0.013f * i;
    check_reduce<32>(floats, cg::plus<float>(), [](float a, float b) { return a + b; }, "plus<float>");
    check_reduce<2>(floats, cg::plus<float>(), [](float a, float b) { return a + b; }, "plus<float>, 2");
    auto absmax = [](float a, float b) { return fabsf(a) > fabsf(b) ? a : b; };
    check_reduce<32>(floats, absmax, absmax, "a lambda");
    auto skew = [](unsigned a, unsigned b) { return 3u * a + b; };  // operands that do not commute
    check_reduce<16>(bits, skew, skew, "3a + b");
    // a hand-computed one: 1..32 on a tile of 32 gives 528 exactly
    std::vector<float> counting(32);
    for (int i = 0; i < 32; i++) counting[i] = (float)(i + 1);
    Dev<float> d(counting), out(32);
    tile_reduce<32, float, cg::plus<float>><<<1, 32>>>(d.p, out.p, cg::plus<float>());
    REQUIRE(out.host()[17] == 528.0f);
}

template <unsigned N, class T, class Op, class HostOp>
void check_scans(const std::vector<T>& in, Op op, HostOp host_op, const char* what) {
    CAPTURE(N);
    CAPTURE(what);
    Dev<T> d_in(in), inc(in.size()), exc(in.size());
    tile_scans<N, T, Op><<<1, (unsigned)in.size()>>>(d_in.p, inc.p, exc.p, op);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<T> hi = inc.host(), he = exc.host(), want = hillis_steele(in, N, host_op);
    for (size_t i = 0; i < in.size(); i++) {
        CAPTURE(i);
        REQUIRE(memcmp(&hi[i], &want[i], sizeof(T)) == 0);
        T e = i % N == 0 ? T{} : want[i - 1];  // rank 0 of each tile: a value-initialised T
        REQUIRE(memcmp(&he[i], &e, sizeof(T)) == 0);
    }
}

TEST_CASE("cooperative groups: inclusive_scan and exclusive_scan, int and float") {
    // by hand: 1, 2, 3, ... on tiles of 8 give the triangular numbers, restarting per tile
    std::vector<int> counting(32);
    for (int i = 0; i < 32; i++) counting[i] = i % 8 + 1;
    Dev<int> d(counting), inc(32), exc(32);
    tile_scans<8, int, cg::plus<int>><<<1, 32>>>(d.p, inc.p, exc.p, cg::plus<int>());
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<int> hi = inc.host(), he = exc.host();
    for (int i = 0; i < 32; i++) {
        int k = i % 8 + 1;
        REQUIRE(hi[i] == k * (k + 1) / 2);
        REQUIRE(he[i] == (k - 1) * k / 2);
    }
    std::vector<int> ints(64);
    for (int i = 0; i < 64; i++) ints[i] = (i * 53 + 7) % 97 - 40;
    check_scans<32>(ints, cg::plus<int>(), [](int a, int b) { return a + b; }, "plus<int>");
    check_scans<16>(ints, cg::greater<int>(), [](int a, int b) { return std::max(a, b); }, "greater<int>");
    std::vector<float> floats(64);
    for (int i = 0; i < 64; i++) floats[i] = (i % 4 == 0 ? 3e6f : 0.7f) * (i % 3 ? 1.0f : -1.0f) + 0.011f * i;
    check_scans<32>(floats, cg::plus<float>(), [](float a, float b) { return a + b; }, "plus<float>");
    check_scans<4>(floats, cg::less<float>(), [](float a, float b) { return std::min(a, b); }, "less<float>");
    // a function whose operands do not commute: CUDA's op(own running value, the earlier one)
    auto skew = [](unsigned a, unsigned b) { return 3u * a + b; };
    std::vector<unsigned> u(64);
    for (unsigned i = 0; i < 64; i++) u[i] = i * 7 + 1;
    check_scans<8>(u, skew, skew, "3a + b");
    check_scans<32>(u, skew, skew, "3a + b");
}

// A tile collective some of whose threads have exited fails the launch like a shuffle would.
__global__ void reduce_after_exit(float* out) {
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cg::this_thread_block());
    if (tile.thread_rank() >= 20) return;
    out[threadIdx.x] = cg::reduce(tile, 1.0f, cg::plus<float>());  // (the line the message names)
}
__global__ void sync_after_exit(float* out) {
    cg::thread_block_tile<16> tile = cg::tiled_partition<16>(cg::this_thread_block());
    if (threadIdx.x == 5) return;
    tile.sync();
    out[threadIdx.x] = 1;
}
__global__ void vote_in_short_block(int* out) {
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cg::this_thread_block());
    out[threadIdx.x] = tile.all(1);
}

TEST_CASE("cooperative groups: a tile whose threads have exited, or do not exist, fails the launch") {
    Dev<float> out(64);
    std::string err = capture_stderr([&] { reduce_after_exit<<<1, 64>>>(out.p); });
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CHECK(contains(err, "kernel 'reduce_after_exit'"));
    CHECK(contains(err, "cooperative_groups::reduce at"));
    CHECK(contains(err, "kernel_features.cu:" + std::to_string(line_of("cg::reduce(tile, 1.0f"))));
    CHECK(contains(err, "has exited"));

    err = capture_stderr([&] { sync_after_exit<<<1, 32>>>(out.p); });
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CHECK(contains(err, "thread_block_tile::sync at"));
    CHECK(contains(err, "threads 5 of the tile have exited"));

    Dev<int> iout(48);
    err = capture_stderr([&] { vote_in_short_block<<<1, 48>>>(iout.p); });
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CHECK(contains(err, "thread_block_tile::all at"));
    CHECK(contains(err, "threads 48-63 of the tile do not exist"));
}

// ----------------------------------------------------------------------------
// 2. __launch_bounds__

__global__ void __launch_bounds__(64) bounded(int* out) { out[threadIdx.x] = 7; }
template <int THREADS>
__global__ void __launch_bounds__(THREADS, 2) bounded_template(int* out) {
    out[threadIdx.x] = THREADS;
}

TEST_CASE("__launch_bounds__: within the bound runs; beyond it fails as on a GPU, before any thread runs") {
    Dev<int> out(256);
    cudaMemset(out.p, 0, 256 * sizeof(int));
    bounded<<<1, 64>>>(out.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    CHECK(out.host()[63] == 7);
    cudaMemset(out.p, 0, 256 * sizeof(int));
    std::string err = capture_stderr([&] { bounded<<<2, dim3(8, 9)>>>(out.p); });
    CHECK(cudaGetLastError() == cudaErrorLaunchOutOfResources);  // "too many resources requested for launch"
    CHECK(contains(err, "kernel 'bounded'"));
    CHECK(contains(err, "72 threads per block, more than the 64 of its __launch_bounds__"));
    std::vector<int> h = out.host();
    CHECK(std::count(h.begin(), h.end(), 0) == 256);  // nothing ran
    bounded_template<128><<<1, 128>>>(out.p);
    CHECK(cudaGetLastError() == cudaSuccess);
    CHECK(out.host()[127] == 128);
    capture_stderr([&] { bounded_template<128><<<1, 256>>>(out.p); });
    CHECK(cudaGetLastError() == cudaErrorLaunchOutOfResources);
}

// ----------------------------------------------------------------------------
// 3. Built-in variable names used by host code, and a parameter named dim3

__global__ void named_dim3(int dim3, int* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = dim3 + (int)gridDim.x; }

TEST_CASE("built-in names: host variables gridDim and blockDim, a kernel parameter named dim3") {
    dim3 gridDim(3), blockDim(32);  // as nvcc allows in host code
    Dev<int> out(96);
    named_dim3<<<gridDim, blockDim>>>(100, out.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<int> h = out.host();
    CHECK(std::count(h.begin(), h.end(), 103) == 96);
    CHECK(gridDim.x * blockDim.x == 96u);  // still the host's own
}

// ----------------------------------------------------------------------------
// 4. Cache-hint loads and stores

__global__ void cache_hints(const float* f, const float4* f4, const int2* i2, const __half2* h2,
                            const __nv_bfloat162* b2, const double* d, float* of, float4* of4, int2* oi2,
                            __half2* oh2, __nv_bfloat162* ob2, double* od) {
    int i = threadIdx.x;
    __stwb(of + 6 * i + 0, __ldg(f + i));
    __stcg(of + 6 * i + 1, __ldca(f + i));
    __stcs(of + 6 * i + 2, __ldcg(f + i));
    __stwt(of + 6 * i + 3, __ldcs(f + i));
    of[6 * i + 4] = __ldlu(f + i);
    of[6 * i + 5] = __ldcv(f + i);
    __stcs(of4 + i, __ldg(f4 + i));
    __stcg(oi2 + i, __ldcs(i2 + i));
    __stwt(oh2 + i, __ldg(h2 + i));
    __stwb(ob2 + i, __ldcg(b2 + i));
    od[i] = __ldg(d + i);
}

TEST_CASE("cache hints: __ldg, __ldca, __ldcg, __ldcs, __ldlu, __ldcv and __stwb, __stcg, __stcs, __stwt") {
    const int n = 32;
    std::vector<float> f(n);
    std::vector<float4> f4(n);
    std::vector<int2> i2(n);
    std::vector<__half2> h2(n);
    std::vector<__nv_bfloat162> b2(n);
    std::vector<double> d(n);
    for (int i = 0; i < n; i++) {
        f[i] = 0.5f * i - 3;
        f4[i] = make_float4(i, -i, 2.0f * i, 0.25f);
        i2[i] = make_int2(i, -7 * i);
        h2[i] = __half2(__float2half(0.5f * i), __float2half(-1.0f * i));
        b2[i] = __nv_bfloat162(__float2bfloat16(2.0f * i), __float2bfloat16(-0.125f * i));
        d[i] = 1e-3 * i;
    }
    Dev<float> df(f), of(6 * n);
    Dev<float4> df4(f4), of4(n);
    Dev<int2> di2(i2), oi2(n);
    Dev<__half2> dh2(h2), oh2(n);
    Dev<__nv_bfloat162> db2(b2), ob2(n);
    Dev<double> dd(d), od(n);
    cache_hints<<<1, n>>>(df.p, df4.p, di2.p, dh2.p, db2.p, dd.p, of.p, of4.p, oi2.p, oh2.p, ob2.p, od.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> hf = of.host();
    std::vector<float4> hf4 = of4.host();
    std::vector<int2> hi2 = oi2.host();
    std::vector<__half2> hh2 = oh2.host();
    std::vector<__nv_bfloat162> hb2 = ob2.host();
    std::vector<double> hd = od.host();
    bool ok = true;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 6; k++) ok &= hf[6 * i + k] == f[i];
        ok &= memcmp(&hf4[i], &f4[i], sizeof(float4)) == 0 && memcmp(&hi2[i], &i2[i], sizeof(int2)) == 0;
        ok &= memcmp(&hh2[i], &h2[i], sizeof(__half2)) == 0 && memcmp(&hb2[i], &b2[i], sizeof(__nv_bfloat162)) == 0;
        ok &= hd[i] == d[i];
    }
    CHECK(ok);
}

// ----------------------------------------------------------------------------
// 5. Atomics on packed halves

__global__ void packed_atomics(__nv_bfloat162* b2, __half2* h2, __half* h, __nv_bfloat162* old_b2) {
    old_b2[blockIdx.x * blockDim.x + threadIdx.x] = atomicAdd(b2, __nv_bfloat162(__float2bfloat16(1.0f), __float2bfloat16(2.0f)));
    atomicAdd(h2, __half2(__float2half(0.5f), __float2half(-3.0f)));
    atomicAdd(h, __float2half(0.25f));
}

TEST_CASE("atomicAdd on __nv_bfloat162, __half2 and __half: each half added atomically") {
    const int n = 100;  // sums stay exact: bf16 holds integers to 256, fp16 to 2048
    Dev<__nv_bfloat162> b2(1), old(n);
    Dev<__half2> h2(1);
    Dev<__half> h(1);
    cudaMemset(b2.p, 0, sizeof(__nv_bfloat162));
    cudaMemset(h2.p, 0, sizeof(__half2));
    cudaMemset(h.p, 0, sizeof(__half));
    packed_atomics<<<4, n / 4>>>(b2.p, h2.p, h.p, old.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    __nv_bfloat162 rb = b2.host()[0];
    __half2 rh = h2.host()[0];
    CHECK(__bfloat162float(rb.x) == 100.0f);
    CHECK(__bfloat162float(rb.y) == 200.0f);
    CHECK(__half2float(rh.x) == 50.0f);
    CHECK(__half2float(rh.y) == -300.0f);
    CHECK(__half2float(h.host()[0]) == 25.0f);
    // the old values returned are the 100 partial sums 0, 1, ..., 99 (in some order)
    std::vector<__nv_bfloat162> olds = old.host();
    std::vector<int> seen(n, 0);
    for (auto& o : olds) {
        int k = (int)__bfloat162float(o.x);
        REQUIRE(k >= 0);
        REQUIRE(k < n);
        seen[k]++;
    }
    CHECK(std::count(seen.begin(), seen.end(), 1) == n);
}

// ----------------------------------------------------------------------------
// 6. min/max with mixed int and unsigned; __syncwarp() with its default mask

__global__ void mixed_min_max(unsigned* out, int i, unsigned u) {
    out[0] = min(i, u), out[1] = max(i, u), out[2] = min(u, i), out[3] = max(u, i);
    out[4] = (unsigned)min(threadIdx.x, 5);  // unsigned and int: CUDA's overload, no ambiguity
}

TEST_CASE("min and max: CUDA's overloads for mixed int and unsigned compare as unsigned") {
    Dev<unsigned> out(5);
    mixed_min_max<<<1, 1>>>(out.p, -1, 5u);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<unsigned> h = out.host();
    CHECK(h[0] == 5u);            // -1 is 0xffffffff as unsigned: the larger
    CHECK(h[1] == 0xffffffffu);
    CHECK(h[2] == 5u);
    CHECK(h[3] == 0xffffffffu);
    CHECK(h[4] == 0u);
    CHECK(min(-3L, 2UL) == 2UL);  // long and unsigned long: the same rule
    CHECK(max(-3LL, 2ULL) == (unsigned long long)-3LL);
    CHECK(min(1.5f, 2.0) == 1.5);  // float and double: double
}

__global__ void warp_exchange(float* out) {
    __shared__ float s[32];
    s[threadIdx.x] = 2.0f * threadIdx.x;
    __syncwarp();  // the default mask, under -std=c++17
    out[threadIdx.x] = s[31 - threadIdx.x];
}

TEST_CASE("__syncwarp() with its default mask, compiled as -std=c++17") {
    Dev<float> out(32);
    warp_exchange<<<1, 32>>>(out.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> h = out.host();
    bool ok = true;
    for (int i = 0; i < 32; i++) ok &= h[i] == 2.0f * (31 - i);
    CHECK(ok);
}

// ----------------------------------------------------------------------------
// 7. NULL and 0 for pointer arguments

__global__ void optional_bias(const float* bias, float* out) { out[threadIdx.x] = bias ? bias[threadIdx.x] : -1.0f; }

TEST_CASE("NULL or 0 as a pointer kernel argument is a null pointer, as nvcc's launch converts it") {
    Dev<float> out(8);
    optional_bias<<<1, 8>>>(NULL, out.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    CHECK(out.host()[3] == -1.0f);
    cudaMemset(out.p, 0, 8 * sizeof(float));
    optional_bias<<<1, 8>>>(0, out.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    CHECK(out.host()[7] == -1.0f);
    // a non-zero integer is no pointer (nvcc refuses it at compile time; here the launch fails)
    std::string err = capture_stderr([&] { optional_bias<<<1, 8>>>(5, out.p); });
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CHECK(contains(err, "argument 1 is the integer 5, for a pointer parameter"));
}

// ----------------------------------------------------------------------------
// 8. A __global__ function called from host code; a launch from device code

__global__ void called_from_host(float* out) { out[threadIdx.x] = 1; }

TEST_CASE("a kernel called from host code as a function stops with its name and line, exit status 1") {
    std::string err;
    int status = in_child(
        [] {
            float x[32];
            called_from_host(x);
        },
        &err);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 1);
    CHECK(contains(err, "kernel 'called_from_host' (test/cpu_runtime/kernel_features.cu:"));
    CHECK(contains(err, "called from host code as an ordinary function"));
}

__global__ void child_kernel(float* out) { out[0] = 1; }
__global__ void parent_kernel(float* out) { child_kernel<<<1, 1>>>(out); }

TEST_CASE("a launch from device code (dynamic parallelism) fails the launch with a message") {
    Dev<float> out(1);
    std::string err = capture_stderr([&] { parent_kernel<<<1, 1>>>(out.p); });
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CHECK(contains(err, "kernel 'child_kernel' launched from device code: dynamic parallelism is not supported"));
}

// ----------------------------------------------------------------------------
// 9. Float atomics under the race detector

// 4 blocks of 256 threads add values of mixed sizes into one float: the rounding of the sum
// depends on the order of the additions, which the race detector's schedules change.
__global__ void float_sum(const float* in, float* sum) { atomicAdd(sum, in[blockIdx.x * blockDim.x + threadIdx.x]); }
// the same, plus a real race: every thread writes its own index to one element
__global__ void float_sum_and_race(const float* in, float* sum, int* last) {
    atomicAdd(sum, in[blockIdx.x * blockDim.x + threadIdx.x]);
    *last = (int)threadIdx.x;
}

TEST_CASE("race detector: a float atomicAdd sum is non-determinism, noted once; an error only when strict") {
    std::vector<float> in(1024);
    for (int i = 0; i < 1024; i++) in[i] = (i % 5 == 0 ? 1000.0f : 0.001f) * (1.0f + 0.37f * (i % 11));
    Dev<float> d(in), sum(1);
    Dev<int> last(1);
    cpu_cuda::Settings saved = cpu_cuda::settings();
    cpu_cuda::settings().racecheck = true;
    cpu_cuda::settings().deterministic = false;
    cudaMemset(sum.p, 0, sizeof(float));
    std::string err = capture_stderr([&] {
        float_sum<<<4, 256>>>(d.p, sum.p);
        CHECK(cudaGetLastError() == cudaSuccess);
        float_sum<<<4, 256>>>(d.p, sum.p);
        CHECK(cudaGetLastError() == cudaSuccess);
    });
    CHECK(contains(err, "cpu_cuda: note: kernel 'float_sum': floating-point atomicAdd on"));
    CHECK(contains(err, "not a race"));
    CHECK(err.find("note:") == err.rfind("note:"));  // once per kernel
    // a real race next to the atomics is still a race
    err = capture_stderr([&] { float_sum_and_race<<<4, 256>>>(d.p, sum.p, last.p); });
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CHECK(contains(err, "kernel 'float_sum_and_race': race:"));
    // strict: the project's own tests promise bit-identical reruns
    cpu_cuda::settings().deterministic = true;
    cudaMemset(sum.p, 0, sizeof(float));  // (from 0: on a large sum the small terms vanish in any order)
    err = capture_stderr([&] { float_sum<<<4, 256>>>(d.p, sum.p); });
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CHECK(contains(err, "kernel 'float_sum': floating-point atomicAdd on"));
    CHECK(contains(err, "CPU_CUDA_DETERMINISTIC=1"));
    cpu_cuda::settings() = saved;
}

// ----------------------------------------------------------------------------
// CUDA graphs (the Programming Guide's "CUDA Graphs"): built by hand and by stream capture.
// What is checked is what the guide promises: nothing runs until the graph is launched, a
// kernel node's arguments are copied when the node is made, dependencies order the work, and
// a graph runs again each launch.

__global__ void graph_axpy(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
static void CUDART_CB append_host(void* log) { ((std::string*)log)->push_back('h'); }

TEST_CASE("graphs built by hand: memset, kernel, copy and host nodes, launched twice") {
    const int n = 40;
    Dev<float> x(std::vector<float>(n, 2.0f)), y(n);
    std::vector<float> out(n, -1.0f);
    std::string log;
    cudaGraph_t graph = nullptr;
    REQUIRE(cudaGraphCreate(&graph, 0) == cudaSuccess);
    cudaMemsetParams ms = {};
    ms.dst = y.p, ms.elementSize = 4, ms.width = n, ms.height = 1;
    float one = 1.0f;
    memcpy(&ms.value, &one, 4);  // y = 1.0f: a 4-byte element's bits
    cudaGraphNode_t set = nullptr, axpy = nullptr, copy = nullptr, host = nullptr;
    REQUIRE(cudaGraphAddMemsetNode(&set, graph, nullptr, 0, &ms) == cudaSuccess);
    float a = 3.0f;
    int count = n;
    void* args[] = {&y.p, &x.p, &a, &count};
    cudaKernelNodeParams kp = {};
    kp.func = (void*)graph_axpy;
    kp.gridDim = dim3(2), kp.blockDim = dim3(32), kp.kernelParams = args;
    REQUIRE(cudaGraphAddKernelNode(&axpy, graph, &set, 1, &kp) == cudaSuccess);
    a = 100.0f;  // too late: the node holds a copy of its arguments
    REQUIRE(cudaGraphAddMemcpyNode1D(&copy, graph, &axpy, 1, out.data(), y.p, n * sizeof(float),
                                     cudaMemcpyDeviceToHost) == cudaSuccess);
    cudaHostNodeParams hp = {append_host, &log};
    REQUIRE(cudaGraphAddHostNode(&host, graph, &copy, 1, &hp) == cudaSuccess);
    size_t nodes = 0, roots = 0;
    CHECK(cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess);
    CHECK(nodes == 4);
    CHECK(cudaGraphGetRootNodes(graph, nullptr, &roots) == cudaSuccess);
    CHECK(roots == 1);
    cudaGraphNodeType type;
    CHECK((cudaGraphNodeGetType(axpy, &type) == cudaSuccess && type == cudaGraphNodeTypeKernel));
    CHECK(out[0] == -1.0f);  // built, not run
    cudaGraphExec_t exec = nullptr;
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    REQUIRE(cudaGraphLaunch(exec, nullptr) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
    CHECK(out == std::vector<float>(n, 1.0f + 3.0f * 2.0f));
    CHECK(log == "h");
    out.assign(n, 0.0f);
    REQUIRE(cudaGraphLaunch(exec, nullptr) == cudaSuccess);  // again: the memset starts it over
    CHECK(out == std::vector<float>(n, 7.0f));
    CHECK(log == "hh");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
}

__global__ void graph_add(float* c, const float* a, const float* b, int n) {
    int i = threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

TEST_CASE("graphs by stream capture: a fork onto a second stream and the join back") {
    const int n = 16;
    Dev<float> a(n), b(n), c(std::vector<float>(n, -1.0f));
    std::string log;
    cudaStream_t s1 = nullptr, s2 = nullptr;
    cudaEvent_t fork = nullptr, join = nullptr;
    REQUIRE(cudaStreamCreate(&s1) == cudaSuccess);
    REQUIRE(cudaStreamCreate(&s2) == cudaSuccess);
    REQUIRE(cudaEventCreate(&fork) == cudaSuccess);
    REQUIRE(cudaEventCreate(&join) == cudaSuccess);
    REQUIRE(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal) == cudaSuccess);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    CHECK((cudaStreamIsCapturing(s1, &status) == cudaSuccess && status == cudaStreamCaptureStatusActive));
    CHECK(cudaEventRecord(fork, s1) == cudaSuccess);
    CHECK(cudaStreamWaitEvent(s2, fork, 0) == cudaSuccess);  // s2 joins the capture
    CHECK((cudaStreamIsCapturing(s2, &status) == cudaSuccess && status == cudaStreamCaptureStatusActive));
    CHECK(cudaMemsetAsync(a.p, 0, n * sizeof(float), s1) == cudaSuccess);  // a = 0
    CHECK(cudaMemsetAsync(b.p, 0x40, n * sizeof(float), s2) == cudaSuccess);  // b = 0x40404040 = 3.0039062f
    CHECK(cudaEventRecord(join, s2) == cudaSuccess);
    CHECK(cudaStreamWaitEvent(s1, join, 0) == cudaSuccess);
    graph_add<<<1, 32, 0, s1>>>(c.p, a.p, b.p, n);
    CHECK(cudaLaunchHostFunc(s1, append_host, &log) == cudaSuccess);
    // (no cudaStreamSynchronize here: in a capture it is refused and invalidates the capture, a case of its own below)
    cudaGraph_t graph = nullptr;
    REQUIRE(cudaStreamEndCapture(s1, &graph) == cudaSuccess);
    CHECK((cudaStreamIsCapturing(s2, &status) == cudaSuccess && status == cudaStreamCaptureStatusNone));
    CHECK(c.host() == std::vector<float>(n, -1.0f));  // recorded, not run
    CHECK(log.empty());
    size_t nodes = 0, roots = 0;
    CHECK((cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess && nodes == 4));  // 2 memsets, kernel, host
    CHECK((cudaGraphGetRootNodes(graph, nullptr, &roots) == cudaSuccess && roots == 2));  // the memsets
    cudaGraph_t clone = nullptr;  // a clone runs the same work after its original is gone
    REQUIRE(cudaGraphClone(&clone, graph) == cudaSuccess);
    cudaGraphDestroy(graph);
    cudaGraphExec_t exec = nullptr;
    REQUIRE(cudaGraphInstantiate(&exec, clone, 0) == cudaSuccess);
    REQUIRE(cudaGraphLaunch(exec, s1) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s1) == cudaSuccess);
    float b_value;
    const unsigned bits = 0x40404040u;
    memcpy(&b_value, &bits, 4);
    CHECK(c.host() == std::vector<float>(n, b_value));
    CHECK(log == "h");
    cudaGraphExecDestroy(exec), cudaGraphDestroy(clone);
    cudaEventDestroy(fork), cudaEventDestroy(join), cudaStreamDestroy(s1), cudaStreamDestroy(s2);
}

TEST_CASE("graphs: a cuBLAS product on a capturing stream is a node, its scalars read at the call") {
    // C (2x2) = alpha A B with A = [[1, 2], [3, 4]], B = I, column-major: C = alpha A
    Dev<float> A(std::vector<float>{1, 3, 2, 4}), B(std::vector<float>{1, 0, 0, 1}), C(std::vector<float>(4, -1.0f));
    cublasHandle_t handle;
    REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
    cudaStream_t s = nullptr;
    REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
    REQUIRE(cublasSetStream(handle, s) == CUBLAS_STATUS_SUCCESS);
    float alpha = 2.0f, beta = 0.0f;
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &alpha, A.p, 2, B.p, 2, &beta, C.p, 2) ==
          CUBLAS_STATUS_SUCCESS);
    alpha = 10.0f;  // too late: host-side scalars are read at the call
    double one = 1.0;
    std::string err = capture_stderr([&] {  // float64 products are not recorded: refused, not run at once
        CHECK(cublasDgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, nullptr, 1, nullptr, 1, &one, nullptr, 1) ==
              CUBLAS_STATUS_NOT_SUPPORTED);
    });
    CHECK(contains(err, "cpu_cuda: cublasDgemm on a capturing stream"));
    cudaGraph_t graph = nullptr;
    REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
    CHECK(C.host() == std::vector<float>(4, -1.0f));  // recorded, not run
    cudaGraphExec_t exec = nullptr;
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
    CHECK(C.host() == std::vector<float>{2, 6, 4, 8});
    cudaGraphExecDestroy(exec), cudaGraphDestroy(graph), cublasDestroy(handle), cudaStreamDestroy(s);
}

TEST_CASE("graphs: a kernel launched from a void* that a cast filed, and what is refused") {
    const int n = 8;
    Dev<float> x(std::vector<float>(n, 1.0f)), y(std::vector<float>(n, 0.0f));
    float a = 5.0f;
    int count = n;
    void* args[] = {&y.p, &x.p, &a, &count};
    const void* k = (const void*)graph_axpy;  // (the rewrite files graph_axpy's parameters here)
    REQUIRE(cudaLaunchKernel(k, dim3(1), dim3(32), args, 0, nullptr) == cudaSuccess);
    CHECK(y.host() == std::vector<float>(n, 5.0f));
    cudaStream_t s1 = nullptr, s2 = nullptr;
    REQUIRE(cudaStreamCreate(&s1) == cudaSuccess);
    REQUIRE(cudaStreamCreate(&s2) == cudaSuccess);
    cudaEvent_t fork = nullptr;
    REQUIRE(cudaEventCreate(&fork) == cudaSuccess);
    cudaGraph_t graph = nullptr, built = nullptr;
    REQUIRE(cudaGraphCreate(&built, 0) == cudaSuccess);
    cudaGraphNode_t node = nullptr;
    cudaKernelNodeParams kp = {};
    kp.func = reinterpret_cast<void*>(&append_host);  // not a kernel the runtime knows
    kp.gridDim = kp.blockDim = dim3(1), kp.kernelParams = args;
    std::string err = capture_stderr([&] {
        CHECK(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal) == cudaErrorStreamCaptureUnsupported);
        CHECK(cudaGraphAddKernelNode(&node, built, nullptr, 0, &kp) == cudaErrorInvalidDeviceFunction);
        // a fork that never joins back
        REQUIRE(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal) == cudaSuccess);
        CHECK(cudaEventRecord(fork, s1) == cudaSuccess);
        CHECK(cudaStreamWaitEvent(s2, fork, 0) == cudaSuccess);
        CHECK(cudaMemsetAsync(y.p, 0, sizeof(float), s2) == cudaSuccess);
        CHECK(cudaStreamEndCapture(s1, &graph) == cudaErrorStreamCaptureUnjoined);
    });
    CHECK(graph == nullptr);
    CHECK(y.host()[0] == 5.0f);  // the unjoined memset never ran
    CHECK(contains(err, "cpu_cuda: cudaStreamBeginCapture: the legacy default stream cannot be captured"));
    CHECK(contains(err, "cpu_cuda: cudaGraphAddKernelNode: the CPU runtime does not know the parameters of the kernel"));
    CHECK(contains(err, "cpu_cuda: cudaStreamEndCapture: a stream that joined the capture did not rejoin"));
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    CHECK((cudaStreamIsCapturing(s2, &status) == cudaSuccess && status == cudaStreamCaptureStatusNone));
    cudaGetLastError();
    cudaGraphDestroy(built);
    cudaEventDestroy(fork), cudaStreamDestroy(s1), cudaStreamDestroy(s2);
}

// A node keeps the pointers it was given; memory freed since then fails the launch with a line,
// also when the next cudaMalloc has handed the same address out again (which the address check
// alone would pass). A destroyed graph or executable graph is refused, not run.
TEST_CASE("graphs: a node over freed memory, a destroyed graph or executable graph, is refused") {
    const int n = 8;
    float a = 2.0f;
    int count = n;
    cudaStream_t s = nullptr;
    REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
    // frees x (after the graph was made) and allocates the same size again; true if the address came back
    auto free_and_reuse = [](float*& x) {
        float* old = x;
        REQUIRE(cudaFree(x) == cudaSuccess);
        REQUIRE(cudaMalloc(&x, n * sizeof(float)) == cudaSuccess);
        REQUIRE(cudaMemset(x, 0, n * sizeof(float)) == cudaSuccess);
        if (x != old) MESSAGE("(cudaMalloc did not reuse the address this time)");
    };
    SUBCASE("a kernel node, built by hand") {
        Dev<float> y(std::vector<float>(n, 1.0f));
        float* x = nullptr;
        REQUIRE(cudaMalloc(&x, n * sizeof(float)) == cudaSuccess);
        void* args[] = {&y.p, &x, &a, &count};
        cudaKernelNodeParams kp = {};
        kp.func = (void*)graph_axpy;
        kp.gridDim = dim3(1), kp.blockDim = dim3(32), kp.kernelParams = args;
        cudaGraph_t graph = nullptr;
        cudaGraphNode_t node = nullptr;
        cudaGraphExec_t exec = nullptr;
        REQUIRE(cudaGraphCreate(&graph, 0) == cudaSuccess);
        REQUIRE(cudaGraphAddKernelNode(&node, graph, nullptr, 0, &kp) == cudaSuccess);
        REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
        free_and_reuse(x);
        std::string err = capture_stderr([&] { CHECK(cudaGraphLaunch(exec, s) == cudaErrorIllegalAddress); });
        CHECK(contains(err, "cpu_cuda: graph_axpy: argument 2 "));
        CHECK(contains(err, " was freed after it was given"));
        cudaGetLastError();
        cudaGraphExecDestroy(exec), cudaGraphDestroy(graph), cudaFree(x);
    }
    SUBCASE("memcpy nodes (1-D and 3-D) and a memset node, built by hand") {
        float* x = nullptr;
        REQUIRE(cudaMalloc(&x, n * sizeof(float)) == cudaSuccess);
        std::vector<float> host(n, -1.0f);
        cudaGraph_t graph = nullptr;
        cudaGraphNode_t node = nullptr;
        REQUIRE(cudaGraphCreate(&graph, 0) == cudaSuccess);
        REQUIRE(cudaGraphAddMemcpyNode1D(&node, graph, nullptr, 0, host.data(), x, n * sizeof(float),
                                         cudaMemcpyDeviceToHost) == cudaSuccess);
        cudaMemcpy3DParms p = {};
        p.srcPtr = make_cudaPitchedPtr(host.data(), n * sizeof(float), n, 1);
        p.dstPtr = make_cudaPitchedPtr(x, n * sizeof(float), n, 1);
        p.extent = make_cudaExtent(n * sizeof(float), 1, 1), p.kind = cudaMemcpyHostToDevice;
        cudaGraph_t graph3 = nullptr, graph_set = nullptr;
        REQUIRE(cudaGraphCreate(&graph3, 0) == cudaSuccess);
        REQUIRE(cudaGraphAddMemcpyNode(&node, graph3, nullptr, 0, &p) == cudaSuccess);
        cudaMemsetParams ms = {};
        ms.dst = x, ms.elementSize = 4, ms.width = n, ms.height = 1;
        REQUIRE(cudaGraphCreate(&graph_set, 0) == cudaSuccess);
        REQUIRE(cudaGraphAddMemsetNode(&node, graph_set, nullptr, 0, &ms) == cudaSuccess);
        cudaGraphExec_t exec = nullptr, exec3 = nullptr, exec_set = nullptr;
        REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
        REQUIRE(cudaGraphInstantiate(&exec3, graph3, 0) == cudaSuccess);
        REQUIRE(cudaGraphInstantiate(&exec_set, graph_set, 0) == cudaSuccess);
        free_and_reuse(x);
        std::string err = capture_stderr([&] {
            CHECK(cudaGraphLaunch(exec, s) == cudaErrorInvalidValue);
            CHECK(cudaGraphLaunch(exec3, s) == cudaErrorInvalidValue);
            CHECK(cudaGraphLaunch(exec_set, s) == cudaErrorInvalidValue);
        });
        CHECK(host == std::vector<float>(n, -1.0f));  // nothing copied out of the newer allocation
        CHECK(contains(err, "cpu_cuda: cudaGraphAddMemcpyNode1D's copy: src "));
        CHECK(contains(err, "cpu_cuda: cudaGraphAddMemcpyNode's copy: dstPtr.ptr "));
        CHECK(contains(err, "cpu_cuda: cudaGraphAddMemsetNode's memset: dst "));
        cudaGetLastError();
        cudaGraphExecDestroy(exec), cudaGraphExecDestroy(exec3), cudaGraphExecDestroy(exec_set);
        cudaGraphDestroy(graph), cudaGraphDestroy(graph3), cudaGraphDestroy(graph_set), cudaFree(x);
    }
    SUBCASE("a captured kernel and copy") {
        Dev<float> y(std::vector<float>(n, 1.0f));
        float* x = nullptr;
        REQUIRE(cudaMalloc(&x, n * sizeof(float)) == cudaSuccess);
        std::vector<float> host(n, -1.0f);
        cudaGraph_t kernel_graph = nullptr, copy_graph = nullptr;
        REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
        graph_axpy<<<1, 32, 0, s>>>(y.p, x, a, n);
        REQUIRE(cudaStreamEndCapture(s, &kernel_graph) == cudaSuccess);
        REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
        REQUIRE(cudaMemcpyAsync(host.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost, s) == cudaSuccess);
        REQUIRE(cudaStreamEndCapture(s, &copy_graph) == cudaSuccess);
        cudaGraphExec_t kernel_exec = nullptr, copy_exec = nullptr;
        REQUIRE(cudaGraphInstantiate(&kernel_exec, kernel_graph, 0) == cudaSuccess);
        REQUIRE(cudaGraphInstantiate(&copy_exec, copy_graph, 0) == cudaSuccess);
        free_and_reuse(x);
        std::string err = capture_stderr([&] {
            CHECK(cudaGraphLaunch(kernel_exec, s) == cudaErrorIllegalAddress);
            CHECK(cudaGraphLaunch(copy_exec, s) == cudaErrorInvalidValue);
        });
        CHECK(y.host() == std::vector<float>(n, 1.0f));
        CHECK(host == std::vector<float>(n, -1.0f));
        CHECK(contains(err, "cpu_cuda: graph_axpy: argument 2 "));
        CHECK(contains(err, "cpu_cuda: cudaMemcpyAsync (a graph's node): src "));
        cudaGetLastError();
        cudaGraphExecDestroy(kernel_exec), cudaGraphExecDestroy(copy_exec);
        cudaGraphDestroy(kernel_graph), cudaGraphDestroy(copy_graph), cudaFree(x);
    }
    SUBCASE("a destroyed graph or executable graph") {
        // (in a child process: a runtime that ran the freed objects could die of it)
        std::string err;
        int status = in_child([&] {
            cudaGraph_t graph = nullptr;
            cudaGraphExec_t exec = nullptr, again = nullptr;
            cudaGraphNode_t node = nullptr;
            if (cudaGraphCreate(&graph, 0) || cudaGraphAddEmptyNode(&node, graph, nullptr, 0) ||
                cudaGraphInstantiate(&exec, graph, 0) || cudaGraphExecDestroy(exec) || cudaGraphDestroy(graph))
                _exit(3);
            int wrong = 0;
            wrong += cudaGraphLaunch(exec, nullptr) != cudaErrorInvalidValue;
            wrong += cudaGraphInstantiate(&again, graph, 0) != cudaErrorInvalidValue;
            wrong += cudaGraphAddEmptyNode(&node, graph, nullptr, 0) != cudaErrorInvalidValue;
            wrong += cudaGraphExecDestroy(exec) != cudaErrorInvalidValue;  // twice
            wrong += cudaGraphDestroy(graph) != cudaErrorInvalidValue;
            _exit(wrong ? 4 : 0);
        }, &err);
        CHECK(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 0);
        CHECK(contains(err, "cpu_cuda: cudaGraphLaunch: executable graph 0x"));
        CHECK(contains(err, "cpu_cuda: cudaGraphInstantiate: graph 0x"));
        CHECK(contains(err, "was destroyed or never made (cudaErrorInvalidValue)"));
    }
    cudaStreamDestroy(s);
}

// CUDA's Programming Guide ("Prohibited and Unhandled Operations" of stream capture): a
// synchronisation of the device during a capture is refused with
// cudaErrorStreamCaptureUnsupported and invalidates the capture, whose end then gives
// cudaErrorStreamCaptureInvalidated and no graph. And a kernel that fails as it runs is an
// asynchronous error, which the next cudaDeviceSynchronize answers.
__global__ void trapping_kernel() { __trap(); }

TEST_CASE("cudaDeviceSynchronize: refused inside a capture, which it invalidates; it answers a launch that failed") {
    cudaStream_t s = nullptr;
    REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
    Dev<float> y(std::vector<float>(4, 1.0f)), x(std::vector<float>(4, 1.0f));
    cudaGraph_t graph = nullptr;
    std::string err = capture_stderr([&] {
        REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
        graph_axpy<<<1, 4, 0, s>>>(y.p, x.p, 1.0f, 4);
        CHECK(cudaDeviceSynchronize() == cudaErrorStreamCaptureUnsupported);
        graph = (cudaGraph_t)1;
        CHECK(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated);
    });
    CHECK(graph == nullptr);
    CHECK(contains(err, "cpu_cuda: cudaDeviceSynchronize: called while a stream is capturing"));
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
    CHECK((cudaStreamIsCapturing(s, &status) == cudaSuccess && status == cudaStreamCaptureStatusNone));
    CHECK(y.host() == std::vector<float>(4, 1.0f));  // the captured launch never ran
    cudaGetLastError();
    err = capture_stderr([&] {
        trapping_kernel<<<1, 1, 0, s>>>();
        CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);
        trapping_kernel<<<1, 1>>>();
        CHECK(cudaStreamSynchronize(nullptr) == cudaErrorLaunchFailure);
    });
    CHECK(contains(err, "__trap() at "));
    cudaGetLastError();
    CHECK(cudaDeviceSynchronize() == cudaSuccess);  // (not sticky here, unlike an assert: the tests go on)
    cudaStreamDestroy(s);
}

// CUDA's documentation of cudaLaunchHostFunc (and of a graph's host node): the host function
// must not make CUDA API calls, which may answer cudaErrorNotPermitted. The runtime always
// refuses them, with one line each, so that a program relying on one fails here as on a GPU.
struct HostFnCalls {
    float* device;
    cudaStream_t stream;
    void* p = nullptr;
    int ran = 0;
    cudaError_t malloc_e = cudaSuccess, memcpy_e = cudaSuccess, sync_e = cudaSuccess, record_e = cudaSuccess;
    cudaEvent_t event = nullptr;
};
__global__ void host_fn_set_one(float* p) { *p = 1.0f; }
void CUDART_CB host_fn_calling_cuda(void* data) {
    auto* c = (HostFnCalls*)data;
    c->ran++;
    c->malloc_e = cudaMalloc(&c->p, 64);
    const float two = 2.0f;
    c->memcpy_e = cudaMemcpy(c->device, &two, sizeof two, cudaMemcpyHostToDevice);
    c->sync_e = cudaStreamSynchronize(c->stream);
    c->record_e = cudaEventRecord(c->event, c->stream);
    host_fn_set_one<<<1, 1, 0, c->stream>>>(c->device);  // (refused: its line is checked)
}

TEST_CASE("host functions: a CUDA call inside cudaLaunchHostFunc's function or a graph's host node is refused") {
    cudaStream_t s = nullptr;
    REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
    Dev<float> y(std::vector<float>(1, 0.0f));
    HostFnCalls calls{y.p, s};
    REQUIRE(cudaEventCreate(&calls.event) == cudaSuccess);
    auto check_refused = [&](const std::string& err) {
        CHECK(calls.ran == 1);
        CHECK(calls.malloc_e == cudaErrorNotPermitted);
        CHECK(calls.p == nullptr);
        CHECK(calls.memcpy_e == cudaErrorNotPermitted);
        CHECK(calls.sync_e == cudaErrorNotPermitted);
        CHECK(calls.record_e == cudaErrorNotPermitted);
        CHECK(y.host() == std::vector<float>{0.0f});  // neither the copy (2) nor the kernel (1) ran
        for (const char* call : {"cudaMalloc", "cudaMemcpy", "cudaStreamSynchronize", "cudaEventRecord", "host_fn_set_one"})
            CHECK_MESSAGE(contains(err, std::string("cpu_cuda: ") + call +
                                            ": called from a host function (cudaLaunchHostFunc or a graph's host node), "
                                            "which must not make CUDA calls (cudaErrorNotPermitted)"),
                          call);
    };
    std::string err = capture_stderr([&] {
        REQUIRE(cudaLaunchHostFunc(s, host_fn_calling_cuda, &calls) == cudaSuccess);
        REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    });
    check_refused(err);
    // the same function as a graph's host node
    calls.ran = 0, calls.malloc_e = calls.memcpy_e = calls.sync_e = calls.record_e = cudaSuccess;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    cudaGraphNode_t node = nullptr;
    REQUIRE(cudaGraphCreate(&graph, 0) == cudaSuccess);
    cudaHostNodeParams hp = {};
    hp.fn = host_fn_calling_cuda, hp.userData = &calls;
    REQUIRE(cudaGraphAddHostNode(&node, graph, nullptr, 0, &hp) == cudaSuccess);
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    err = capture_stderr([&] {
        REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
        REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    });
    check_refused(err);
    cudaGetLastError();
    // outside the function, the same calls work again
    void* p = nullptr;
    CHECK(cudaMalloc(&p, 64) == cudaSuccess);
    CHECK(cudaFree(p) == cudaSuccess);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaEventDestroy(calls.event);
    cudaStreamDestroy(s);
}

// Capture modes, as cudaThreadExchangeStreamCaptureMode's documentation gives them: a potentially
// unsafe call (cudaMalloc, cudaFree, a synchronous cudaMemcpy or cudaMemset) is refused with
// cudaErrorStreamCaptureUnsupported, and invalidates the capture, while this thread has a capture
// begun in Global or ThreadLocal mode, or another thread has one begun in Global mode (a
// ThreadLocal one of another thread does not count); a Relaxed capture forbids nothing.
TEST_CASE("stream capture modes: cudaMalloc and cudaFree refused in a global capture, which they invalidate; relaxed allows them") {
    cudaStream_t s = nullptr, s2 = nullptr;
    REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
    REQUIRE(cudaStreamCreate(&s2) == cudaSuccess);
    Dev<float> y(std::vector<float>(4, 1.0f)), x(std::vector<float>(4, 1.0f));
    cudaGraph_t graph = nullptr;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    void* p = nullptr;
    // Global, this thread's: refused, the capture invalidated and its graph not made
    std::string err = capture_stderr([&] {
        REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
        graph_axpy<<<1, 4, 0, s>>>(y.p, x.p, 1.0f, 4);
        CHECK(cudaMalloc(&p, 64) == cudaErrorStreamCaptureUnsupported);
        CHECK(p == nullptr);
        CHECK((cudaStreamIsCapturing(s, &status) == cudaSuccess && status == cudaStreamCaptureStatusInvalidated));
        graph = (cudaGraph_t)1;
        CHECK(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated);
        CHECK(graph == nullptr);
    });
    CHECK(contains(err, "cpu_cuda: cudaMalloc: not permitted during a stream capture begun in cudaStreamCaptureModeGlobal"));
    CHECK(contains(err, "the capture is invalidated (cudaErrorStreamCaptureUnsupported"));
    // ThreadLocal, this thread's: cudaFree (of null too, as CUDA's) and cudaMemcpy refused
    float h = 0.0f;
    err = capture_stderr([&] {
        REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
        CHECK(cudaFree(nullptr) == cudaErrorStreamCaptureUnsupported);
        CHECK(cudaMemcpy(&h, y.p, sizeof h, cudaMemcpyDeviceToHost) == cudaErrorStreamCaptureUnsupported);
        CHECK(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated);
    });
    CHECK(contains(err, "cpu_cuda: cudaFree: not permitted during a stream capture"));
    CHECK(contains(err, "cpu_cuda: cudaMemcpy: not permitted during a stream capture"));
    cudaGetLastError();
    // Relaxed: allowed, and the graph is made and runs
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    graph_axpy<<<1, 4, 0, s>>>(y.p, x.p, 1.0f, 4);
    CHECK(cudaMalloc(&p, 64) == cudaSuccess);
    CHECK(cudaFree(p) == cudaSuccess);
    REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
    REQUIRE(graph != nullptr);
    cudaGraphExec_t exec = nullptr;
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(y.host() == std::vector<float>(4, 2.0f));  // 1 + 1 * 1, once: the invalidated captures never ran
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    // another thread's capture: a Global one forbids this thread, a ThreadLocal one does not
    for (cudaStreamCaptureMode mode : {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal}) {
        const bool global = mode == cudaStreamCaptureModeGlobal;
        CAPTURE(global);
        std::atomic<int> step{0};
        cudaError_t begin_e = cudaErrorUnknown, end_e = cudaErrorUnknown;
        cudaGraph_t g2 = nullptr;
        cudaError_t malloc_e = cudaErrorUnknown;
        err = capture_stderr([&] {
            std::thread other([&] {
                begin_e = cudaStreamBeginCapture(s2, mode);
                step = 1;
                while (step != 2) std::this_thread::yield();
                end_e = cudaStreamEndCapture(s2, &g2);
            });
            while (step != 1) std::this_thread::yield();
            p = nullptr;
            malloc_e = cudaMalloc(&p, 64);
            step = 2;
            other.join();
        });
        CHECK(begin_e == cudaSuccess);
        CHECK(malloc_e == (global ? cudaErrorStreamCaptureUnsupported : cudaSuccess));
        CHECK(end_e == (global ? cudaErrorStreamCaptureInvalidated : cudaSuccess));
        CHECK(contains(err, "cpu_cuda: cudaMalloc: not permitted") == global);
        if (p) CHECK(cudaFree(p) == cudaSuccess);
        if (g2) cudaGraphDestroy(g2);
        cudaGetLastError();
    }
    // this thread in Relaxed interaction mode (cudaThreadExchangeStreamCaptureMode) is not forbidden
    // by its own ThreadLocal capture; the previous mode comes back
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    REQUIRE(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
    CHECK(mode == cudaStreamCaptureModeGlobal);
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    CHECK(cudaMalloc(&p, 64) == cudaSuccess);
    CHECK(cudaFree(p) == cudaSuccess);
    REQUIRE(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
    CHECK(mode == cudaStreamCaptureModeRelaxed);
    REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s2);
    cudaStreamDestroy(s);
}

// The programming guide (stream capture, "Prohibited and Unhandled Operations"): synchronizing
// a capturing stream is invalid; the call answers cudaErrorStreamCaptureUnsupported and the
// capture is invalidated, so that its end gives cudaErrorStreamCaptureInvalidated and no graph.
TEST_CASE("cudaStreamSynchronize: refused on a capturing stream, whose capture it invalidates") {
    cudaStream_t s = nullptr;
    REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
    Dev<float> y(std::vector<float>(4, 1.0f)), x(std::vector<float>(4, 1.0f));
    cudaGraph_t graph = nullptr;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    std::string err = capture_stderr([&] {
        REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
        graph_axpy<<<1, 4, 0, s>>>(y.p, x.p, 1.0f, 4);
        CHECK(cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported);
        CHECK((cudaStreamIsCapturing(s, &status) == cudaSuccess && status == cudaStreamCaptureStatusInvalidated));
        graph = (cudaGraph_t)1;
        CHECK(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated);
    });
    CHECK(graph == nullptr);
    CHECK(contains(err, "cpu_cuda: cudaStreamSynchronize: the stream is capturing, which CUDA does not permit; "
                        "the capture is invalidated (cudaErrorStreamCaptureUnsupported)"));
    CHECK(y.host() == std::vector<float>(4, 1.0f));  // the captured launch never ran
    cudaGetLastError();
    cudaStreamDestroy(s);
}

// ----------------------------------------------------------------------------
// 10. clock() and clock64(); a device assert()

// The programming guide: clock() and clock64() read a per-multiprocessor counter that is
// incremented every clock cycle; cudaDevAttrClockRate gives that clock in kHz. A kernel that
// waits `cycles` on clock64() then reads clock() on both sides of the wait.
__global__ void clock_wait(long long cycles, long long* out) {
    clock_t c0 = clock();
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
    clock_t c1 = clock();
    out[0] = (long long)(c1 - c0);
}

TEST_CASE("clock() and clock64() in a kernel: one counter, at cudaDevAttrClockRate in real time") {
    int khz = 0;
    REQUIRE(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0) == cudaSuccess);
    REQUIRE(khz > 0);
    const long long cycles = 20LL * khz;  // 20 ms at the device's clock
    Dev<long long> out(1);
    auto start = std::chrono::steady_clock::now();
    clock_wait<<<1, 1>>>(cycles, out.p);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    // clock() read before and after the same counter's wait: at least `cycles` apart, exactly
    // (the host C library's clock(), CPU microseconds, would give about 20,000)
    CHECK(out.host()[0] >= cycles);
    // 20 ms of cycles at the stated rate take at least 20 ms: a lower bound, which a slow or
    // busy machine only lengthens (a counter faster than the stated rate ends it early)
    CHECK(ms >= 20.0);
    // host code keeps the C library's clock(): CPU time, CLOCKS_PER_SEC a second
    clock_t c = std::clock();
    CHECK(c >= 0);
    CHECK(c < (clock_t)CLOCKS_PER_SEC * 3600);  // this process has not used an hour of CPU
}

// CUDA C++ Programming Guide, "Assertion": a failed assert in a kernel prints the file, line,
// function, block, thread and condition, and stops the kernel; the host then gets
// cudaErrorAssert from the next synchronising call, and every later call fails the same way
// (the context is unusable). Run in a child process, as that state cannot be left.
__global__ void assert_below(int n) {
    int gtid = blockIdx.x * blockDim.x + threadIdx.x;
    assert(gtid < n);
}

TEST_CASE("a device assert() that fails: cudaErrorAssert from the sync and every later call, with its message") {
    assert_below<<<2, 32>>>(64);  // every thread's condition holds
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(cudaGetLastError() == cudaSuccess);
    std::string err;
    int status = in_child(
        [] {
            int failed = 0;
            assert_below<<<2, 32>>>(40);
            failed |= (cudaDeviceSynchronize() != cudaErrorAssert) << 0;
            failed |= (cudaGetLastError() != cudaErrorAssert) << 1;
            failed |= (cudaGetLastError() != cudaErrorAssert) << 2;  // not reset: sticky
            void* p = nullptr;
            failed |= (cudaMalloc(&p, 16) != cudaErrorAssert) << 3;
            assert_below<<<1, 1>>>(64);  // a launch that would pass
            failed |= (cudaGetLastError() != cudaErrorAssert) << 4;
            failed |= (strcmp(cudaGetErrorString(cudaErrorAssert), "device-side assert triggered") != 0) << 5;
            failed |= (strcmp(cudaGetErrorName(cudaErrorAssert), "cudaErrorAssert") != 0) << 6;
            _exit(failed);
        },
        &err);
    REQUIRE(WIFEXITED(status));  // not aborted
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(contains(err, "test/cpu_runtime/kernel_features.cu:" + std::to_string(line_of("assert(gtid < n);")) +
                            ": void assert_below(int): block: [1,0,0], thread: ["));
    CHECK(contains(err, "Assertion `gtid < n` failed."));
}

// ----------------------------------------------------------------------------
// 11. Directed rounding: __fadd_rn/rz/ru/rd and the others (CUDA Math API: the operation
// rounded to nearest even, toward zero, up or down, as IEEE 754 defines them)

enum DirectedOp { op_add, op_sub, op_mul, op_div, op_rcp, op_sqrt };
struct DirectedCase {
    DirectedOp op;
    long double a, b;
};
// 4 results per case: rn, rz, ru, rd
__global__ void directed_float(const DirectedCase* c, int n, float* out) {
    for (int i = 0; i < n; i++) {
        float a = (float)c[i].a, b = (float)c[i].b, *o = out + 4 * i;
        switch (c[i].op) {
            case op_add: o[0] = __fadd_rn(a, b), o[1] = __fadd_rz(a, b), o[2] = __fadd_ru(a, b), o[3] = __fadd_rd(a, b); break;
            case op_sub: o[0] = __fsub_rn(a, b), o[1] = __fsub_rz(a, b), o[2] = __fsub_ru(a, b), o[3] = __fsub_rd(a, b); break;
            case op_mul: o[0] = __fmul_rn(a, b), o[1] = __fmul_rz(a, b), o[2] = __fmul_ru(a, b), o[3] = __fmul_rd(a, b); break;
            case op_div: o[0] = __fdiv_rn(a, b), o[1] = __fdiv_rz(a, b), o[2] = __fdiv_ru(a, b), o[3] = __fdiv_rd(a, b); break;
            case op_rcp: o[0] = __frcp_rn(a), o[1] = __frcp_rz(a), o[2] = __frcp_ru(a), o[3] = __frcp_rd(a); break;
            case op_sqrt: o[0] = __fsqrt_rn(a), o[1] = __fsqrt_rz(a), o[2] = __fsqrt_ru(a), o[3] = __fsqrt_rd(a); break;
        }
    }
}
__global__ void directed_double(const DirectedCase* c, int n, double* out) {
    for (int i = 0; i < n; i++) {
        double a = (double)c[i].a, b = (double)c[i].b, *o = out + 4 * i;
        switch (c[i].op) {
            case op_add: o[0] = __dadd_rn(a, b), o[1] = __dadd_rz(a, b), o[2] = __dadd_ru(a, b), o[3] = __dadd_rd(a, b); break;
            case op_sub: o[0] = __dsub_rn(a, b), o[1] = __dsub_rz(a, b), o[2] = __dsub_ru(a, b), o[3] = __dsub_rd(a, b); break;
            case op_mul: o[0] = __dmul_rn(a, b), o[1] = __dmul_rz(a, b), o[2] = __dmul_ru(a, b), o[3] = __dmul_rd(a, b); break;
            case op_div: o[0] = __ddiv_rn(a, b), o[1] = __ddiv_rz(a, b), o[2] = __ddiv_ru(a, b), o[3] = __ddiv_rd(a, b); break;
            case op_rcp: o[0] = __drcp_rn(a), o[1] = __drcp_rz(a), o[2] = __drcp_ru(a), o[3] = __drcp_rd(a); break;
            case op_sqrt: o[0] = __dsqrt_rn(a), o[1] = __dsqrt_rz(a), o[2] = __dsqrt_ru(a), o[3] = __dsqrt_rd(a); break;
        }
    }
}

// The exact result's side of each rounding, from x87 long double (64-bit significand): every
// case's exact value is either representable there (sums, products of these inputs) or at
// least 2^-30 ulps of the tested type away from its neighbours (1/3, 1/7, sqrt 2, sqrt 3).
template <class F>
void check_directed(const std::vector<DirectedCase>& cases, const std::vector<F>& out) {
    for (size_t i = 0; i < cases.size(); i++) {
        const DirectedCase& c = cases[i];
        long double a = (F)c.a, b = (F)c.b;
        long double exact = c.op == op_add ? a + b : c.op == op_sub ? a - b : c.op == op_mul ? a * b
                          : c.op == op_div ? a / b : c.op == op_rcp ? 1.0L / a : sqrtl(a);
        F rn = out[4 * i], rz = out[4 * i + 1], ru = out[4 * i + 2], rd = out[4 * i + 3];
        INFO("case " << i << ": op " << (int)c.op << " of " << (double)a << ", " << (double)b);
        CHECK(rn == (F)exact);  // the compiler's own conversion rounds to nearest even
        if ((long double)(F)exact == exact) {  // representable: no rounding in any direction
            CHECK((rz == rn && ru == rn && rd == rn));
            continue;
        }
        CHECK((long double)rd < exact);
        CHECK((long double)ru > exact);
        CHECK(ru == std::nextafter(rd, std::numeric_limits<F>::infinity()));  // neighbours
        CHECK(rz == (exact > 0 ? rd : ru));
    }
}

TEST_CASE("directed rounding: __fadd_rz/ru/rd, __fsub, __fmul, __fdiv, __frcp, __fsqrt and the double forms") {
    const long double e30 = ldexpl(1, -30), e12 = ldexpl(1, -12), e60 = ldexpl(1, -60), e27 = ldexpl(1, -27);
    std::vector<DirectedCase> fc = {
        {op_add, 1, e30},  {op_add, -1, -e30}, {op_sub, 1, e30},  {op_sub, -1, e30},  {op_add, 1.5L, 0.25L},
        {op_mul, 1 + e12, 1 + e12}, {op_mul, -(1 + e12), 1 + 2 * e12}, {op_mul, 3, 7},
        {op_div, 1, 3}, {op_div, -1, 3}, {op_div, 2, -7}, {op_div, 6, 3}, {op_rcp, 3, 0}, {op_rcp, -7, 0},
        {op_sqrt, 2, 0}, {op_sqrt, 3, 0}, {op_sqrt, 16, 0}};
    std::vector<DirectedCase> dc = {
        {op_add, 1, e60},  {op_add, -1, -e60}, {op_sub, 1, e60},  {op_mul, 1 + e27, 1 + e27},
        {op_mul, -(1 + e27), 1 + 2 * e27}, {op_div, 1, 3}, {op_div, -2, 7}, {op_rcp, 3, 0}, {op_sqrt, 2, 0},
        {op_sqrt, 3, 0}, {op_sqrt, 0.25L, 0}};
    Dev<DirectedCase> dfc(fc), ddc(dc);
    Dev<float> fo(4 * fc.size());
    Dev<double> doo(4 * dc.size());
    directed_float<<<1, 1>>>(dfc.p, (int)fc.size(), fo.p);
    directed_double<<<1, 1>>>(ddc.p, (int)dc.size(), doo.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> f = fo.host();
    std::vector<double> d = doo.host();
    check_directed(fc, f);
    check_directed(dc, d);
    // the first case by value: 1 + 2^-30 rounds up to the next float, 1 + 2^-23, and down to 1
    CHECK(f[2] == 1.0f + FLT_EPSILON);
    CHECK(f[3] == 1.0f);
    // overflow: rounding down or toward zero stops at the largest finite value (IEEE 754 7.4)
    CHECK(__fmul_ru(FLT_MAX, 2.0f) == INFINITY);
    CHECK(__fmul_rd(FLT_MAX, 2.0f) == FLT_MAX);
    CHECK(__fmul_rz(-FLT_MAX, 2.0f) == -FLT_MAX);
    CHECK(__dadd_rd(-DBL_MAX, -DBL_MAX) == -INFINITY);
    CHECK(__dadd_ru(-DBL_MAX, -DBL_MAX) == -DBL_MAX);
    // an exact zero sum is -0 rounding down, +0 otherwise (IEEE 754 6.3)
    CHECK(std::signbit(__fadd_rd(1.0f, -1.0f)));
    CHECK(!std::signbit(__fadd_ru(1.0f, -1.0f)));
    CHECK(!std::signbit(__fadd_rz(1.0f, -1.0f)));
    CHECK(std::signbit(__dsub_rd(0.0, 0.0)));
    CHECK(!std::signbit(__dsub_ru(0.0, 0.0)));
}

// cudaFuncSetCacheConfig, the C++ form (a kernel template's instance, which does not convert to
// const void* by itself) and the C form: a preference the runtime API lets a device ignore
template <class T>
__global__ void cache_config_kernel(T* out) {
    out[threadIdx.x] = T(1);
}

TEST_CASE("cudaFuncSetCacheConfig takes a kernel template's instance, or its address") {
    CHECK(cudaFuncSetCacheConfig(cache_config_kernel<float>, cudaFuncCachePreferL1) == cudaSuccess);
    CHECK(cudaFuncSetCacheConfig((const void*)cache_config_kernel<double>, cudaFuncCachePreferShared) == cudaSuccess);
    CHECK(cudaFuncSetCacheConfig((const void*)nullptr, cudaFuncCachePreferL1) == cudaErrorInvalidDeviceFunction);
    CHECK(cudaGetLastError() == cudaErrorInvalidDeviceFunction);
}

// ----------------------------------------------------------------------------
// 12. labeled_partition and binary_partition (programming guide, "Partitioning": the parent's
// threads grouped by equal label, each group a coalesced_group ranked in lane order)

__device__ unsigned partition_label(unsigned lane) { return lane % 3 + (lane % 5 == 0 ? 0x10000u : 0u); }
// per thread, three groups, four answers each: size, rank, the rank-0 thread's lane, reduce(lane + 1)
__global__ void partitions(int* out) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
    unsigned lane = tile.thread_rank();
    int* o = out + 12 * block.thread_rank();
    cg::coalesced_group labeled = cg::labeled_partition(tile, partition_label(lane));
    o[0] = (int)labeled.size(), o[1] = (int)labeled.thread_rank(), o[2] = labeled.shfl((int)lane, 0);
    o[3] = cg::reduce(labeled, (int)lane + 1, cg::plus<int>());
    cg::coalesced_group binary = cg::binary_partition(tile, lane % 3 == 0);
    o[4] = (int)binary.size(), o[5] = (int)binary.thread_rank(), o[6] = binary.shfl((int)lane, 0);
    o[7] = cg::reduce(binary, (int)lane + 1, cg::plus<int>());
    if (lane < 20) {  // of a coalesced group: the 20 lanes that arrive
        cg::coalesced_group some = cg::labeled_partition(cg::coalesced_threads(), lane % 4);
        o[8] = (int)some.size(), o[9] = (int)some.thread_rank(), o[10] = some.shfl((int)lane, 0);
        o[11] = cg::reduce(some, (int)lane + 1, cg::plus<int>());
    }
}

TEST_CASE("cooperative groups: labeled_partition and binary_partition of a tile or a coalesced group, reduce on them") {
    Dev<int> out(12 * 64);
    out.fill_nan();
    partitions<<<1, 64>>>(out.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<int> h = out.host();
    auto label = [](unsigned l) { return l % 3 + (l % 5 == 0 ? 0x10000u : 0u); };
    // the group of lane l among the parent's lanes [0, n) whose key equals l's
    auto expect = [](unsigned l, unsigned n, const std::function<unsigned(unsigned)>& key, const int* o) {
        int size = 0, rank = 0, leader = -1, sum = 0;
        for (unsigned m = 0; m < n; m++)
            if (key(m) == key(l)) size++, rank += m < l, leader = leader < 0 ? (int)m : leader, sum += (int)m + 1;
        return o[0] == size && o[1] == rank && o[2] == leader && o[3] == sum;
    };
    bool ok = true;
    for (unsigned t = 0; t < 64; t++) {
        unsigned l = t % 32;
        const int* o = &h[12 * t];
        ok &= expect(l, 32, label, o);
        ok &= expect(l, 32, [](unsigned m) { return (unsigned)(m % 3 == 0); }, o + 4);
        if (l < 20) ok &= expect(l, 20, [](unsigned m) { return m % 4; }, o + 8);
        if (!ok) {
            FAIL_CHECK("thread " << t);
            break;
        }
    }
    CHECK(ok);
}

// The toolkit's structs with members named like the built-ins (cudaKernelNodeParams, used by
// CUDA graphs' kernel nodes, and cudaLaunchConfig_t): host code sets and reads them by name
TEST_CASE("built-in names: members gridDim and blockDim of the toolkit's structs") {
    cudaKernelNodeParams p = {};
    p.gridDim = dim3(7, 2, 1);
    p.blockDim = dim3(64, 1, 1);
    cudaLaunchConfig_t c = {};
    c.gridDim = p.gridDim;
    c.blockDim = p.blockDim;
    CHECK((c.gridDim.x == 7 && c.gridDim.y == 2 && c.blockDim.x == 64));
}

// Inline PTX that reads a special register (PTX ISA, "Special Registers"): the rewrite turns
// it into the runtime's value; other inline asm still goes to the assembler
__global__ void special_registers(unsigned* out) {
    unsigned lane, warp, lt, le, eq, ge, gt;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    asm volatile("mov.u32 %0, %%warpid;" : "=r"(warp));
    asm("mov.u32 %0, %%lanemask_lt;" : "=r"(lt));
    asm("mov.u32 %0, %%lanemask_le;" : "=r"(le));
    asm("mov.u32 %0, %%lanemask_eq;" : "=r"(eq));
    asm("mov.u32 %0, %%lanemask_ge;"
        : "=r"(ge));
    asm("mov.u32 %0, %%lanemask_gt;" : "=r"(gt));
    unsigned* o = out + 7 * threadIdx.x;
    o[0] = lane, o[1] = warp, o[2] = lt, o[3] = le, o[4] = eq, o[5] = ge, o[6] = gt;
}

TEST_CASE("inline PTX: reads of %laneid, %warpid and %lanemask_* give the thread's own values") {
    Dev<unsigned> out(7 * 70);
    special_registers<<<1, 70>>>(out.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<unsigned> h = out.host();
    bool ok = true;
    for (unsigned t = 0; t < 70; t++) {
        unsigned l = t % 32;
        unsigned long long below = (1ull << l) - 1, upto = (2ull << l) - 1;  // 64-bit: l = 31
        const unsigned* o = &h[7 * t];
        ok &= o[0] == l && o[1] == t / 32 && o[2] == (unsigned)below && o[3] == (unsigned)upto &&
              o[4] == 1u << l && o[5] == ~(unsigned)below && o[6] == ~(unsigned)upto;
    }
    CHECK(ok);
}
