// Tests of NCCL on the CPU runtime (cpu_cuda/nccl_cpu.h), with doctest. From the
// repository root:
//   g++ -std=c++17 -O2 -g -Wall -Wextra -I/usr/local/cuda/include -include cpu_cuda/cuda_cpu.h
//       -x c++ test/cpu_runtime/nccl.cpp -o test/cpu_runtime/nccl -lpthread -lrt
//   ./test/cpu_runtime/nccl
//
// Every rank is a process forked by the test. The test waits for its ranks with a time
// limit and kills them past it, so a hang fails a test instead of stalling the suite. A rank
// checks its own results against hand formulas (never against the code under test),
// writes what went wrong to its stderr, which the test captures and shows, and reports
// through its exit status. The test process itself calls nothing of the runtime but
// ncclGetUniqueId and ncclGetErrorString: the runtime reads its settings once per process,
// so each rank reads the CPU_CUDA_NCCL_TIMEOUT that its test sets for it.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ----------------------------------------------------------------------------
// Inside a rank: checks that print what failed and count it.

int failures = 0;

bool expect(bool ok, const char* what, const char* file, int line) {
    if (!ok) {
        failures++;
        fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what);
    }
    return ok;
}
#define EXPECT(cond) expect((cond), #cond, __FILE__, __LINE__)

bool expect_result(ncclResult_t got, ncclResult_t want, const char* what, const char* file, int line) {
    if (got == want) return true;
    failures++;
    fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d (%s)\n", file, line, what, (int)got,
            ncclGetErrorString(got), (int)want, ncclGetErrorString(want));
    return false;
}
#define EXPECT_RESULT(call, want) expect_result((call), (want), #call, __FILE__, __LINE__)

template <class T>
T from_double(double v) {
    if constexpr (std::is_same_v<T, __half>) return __float2half_rn((float)v);
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn((float)v);
    else return (T)v;
}
template <class T>
double to_double(T v) {
    if constexpr (std::is_same_v<T, __half>) return __half2float(v);
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
    else return (double)v;
}

// Checks got[i] == want(i) for every i (exactly: every value in these tests is exact in its
// type); prints the first difference.
template <class T, class Want>
bool expect_values(const char* what, const std::vector<T>& got, Want want) {
    for (size_t i = 0; i < got.size(); i++) {
        const double g = to_double(got[i]), w = want(i);
        if (!(g == w)) {
            failures++;
            fprintf(stderr, "%s[%zu] = %.17g, expected %.17g\n", what, i, g, w);
            return false;
        }
    }
    return true;
}

template <class T>
T* device_alloc(size_t n) {
    void* p = nullptr;
    EXPECT(cudaMalloc(&p, n * sizeof(T)) == cudaSuccess);
    return (T*)p;
}
template <class T>
T* device_copy(const std::vector<T>& host) {
    T* d = device_alloc<T>(host.size());
    EXPECT(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
    return d;
}
template <class T>
std::vector<T> host_copy(const T* device, size_t n) {
    std::vector<T> host(n);
    EXPECT(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return host;
}
template <class T, class F>
std::vector<T> make(size_t n, F value) {
    std::vector<T> v(n);
    for (size_t i = 0; i < n; i++) v[i] = from_double<T>(value(i));
    return v;
}

struct Rank {
    int rank, nranks;
    ncclUniqueId id;
};

// What a collective enqueued on the default stream came to: its call's result, or once the
// stream has done it, the communicator's (a collective runs after its call has returned, as
// on a GPU, so a peer's failure shows there).
ncclResult_t completed(ncclResult_t enqueued, ncclComm_t comm) {
    if (enqueued != ncclSuccess) return enqueued;
    EXPECT(cudaStreamSynchronize(nullptr) == cudaSuccess);
    ncclResult_t async = ncclInternalError;
    EXPECT(ncclCommGetAsyncError(comm, &async) == ncclSuccess);
    return async;
}

ncclComm_t join(const Rank& me) {
    ncclComm_t comm = nullptr;
    EXPECT_RESULT(ncclCommInitRank(&comm, me.nranks, me.id, me.rank), ncclSuccess);
    return comm;
}

double triangle(int R) { return R * (R + 1) / 2.0; }  // 1 + 2 + ... + R

// ----------------------------------------------------------------------------
// The test process: starts the ranks, and waits for them with a limit.

struct Outcome {
    int rank;
    int status;      // waitpid's
    double seconds;  // from the start of the job to the rank's end
    std::string err;
    bool passed() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
};

struct Job {
    std::vector<int> start;           // the ranks to start (empty: all of them)
    const char* nccl_timeout = "20";  // CPU_CUDA_NCCL_TIMEOUT in the ranks
    double limit_s = 30;              // the ranks still running then are killed, and fail
};

// Segments in /dev/shm named for this process's ids: none may outlive their ranks.
std::vector<std::string> segments_left() {
    std::vector<std::string> names;
    const std::string prefix = "cpu_cuda_nccl." + std::to_string(getpid()) + ".";
    if (DIR* dir = opendir("/dev/shm")) {
        while (dirent* e = readdir(dir))
            if (strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) names.push_back(e->d_name);
        closedir(dir);
    }
    return names;
}

std::vector<Outcome> run_ranks(int nranks, const std::function<void(const Rank&)>& body, Job job = {}) {
    if (job.start.empty())
        for (int r = 0; r < nranks; r++) job.start.push_back(r);
    Rank me{0, nranks, {}};
    REQUIRE(ncclGetUniqueId(&me.id) == ncclSuccess);
    fflush(nullptr);  // or the ranks would print this process's buffered output again

    struct Child {
        pid_t pid;
        FILE* err;
        Outcome outcome;
    };
    std::vector<Child> children;
    const double start = now_s();
    for (int rank : job.start) {
        FILE* err = tmpfile();
        REQUIRE(err);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            setenv("CPU_CUDA_NCCL_TIMEOUT", job.nccl_timeout, 1);
            dup2(fileno(err), 2);
            me.rank = rank;
            body(me);
            fflush(nullptr);
            _exit(failures ? 1 : 0);
        }
        children.push_back({pid, err, {rank, 0, 0, ""}});
    }
    for (size_t running = children.size(); running > 0;) {
        bool late = now_s() - start > job.limit_s;
        for (Child& c : children) {
            if (c.pid == 0) continue;
            if (late) kill(c.pid, SIGKILL);
            if (waitpid(c.pid, &c.outcome.status, late ? 0 : WNOHANG) == c.pid) {
                c.outcome.seconds = now_s() - start;
                c.pid = 0;
                running--;
            }
        }
        if (late) FAIL_CHECK("the ranks were still running after ", job.limit_s, " s, and were killed");
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::vector<Outcome> outcomes;
    for (Child& c : children) {
        rewind(c.err);
        char buf[4096];
        for (size_t n; (n = fread(buf, 1, sizeof buf, c.err)) > 0;) c.outcome.err.append(buf, n);
        fclose(c.err);
        outcomes.push_back(c.outcome);
    }
    std::vector<std::string> left = segments_left();
    CHECK_MESSAGE(left.empty(), "left in /dev/shm: ", left.empty() ? "" : left[0]);
    for (const std::string& name : left) shm_unlink(("/" + name).c_str());
    return outcomes;
}

void check_passed(const std::vector<Outcome>& outcomes) {
    for (const Outcome& o : outcomes) {
        INFO("rank ", o.rank, " wrote:\n", o.err);
        CHECK(o.passed());
    }
}

// ----------------------------------------------------------------------------
// The basics

TEST_CASE("ids differ, and the error strings are NCCL's") {
    ncclUniqueId a, b;
    REQUIRE(ncclGetUniqueId(&a) == ncclSuccess);
    REQUIRE(ncclGetUniqueId(&b) == ncclSuccess);
    CHECK(memcmp(&a, &b, sizeof a) != 0);
    CHECK(std::string(ncclGetErrorString(ncclSuccess)) == "no error");
    CHECK(std::string(ncclGetErrorString(ncclInvalidArgument)) == "invalid argument (run with NCCL_DEBUG=WARN for details)");
    CHECK(std::string(ncclGetErrorString(ncclRemoteError)) == "remote process exited or there was a network error");
    CHECK(std::string(ncclGetErrorString((ncclResult_t)99)) == "unknown result code");
}

TEST_CASE("a communicator knows its size, rank and device") {
    for (int R : {1, 2, 4}) {
        CAPTURE(R);
        check_passed(run_ranks(R, [](const Rank& me) {
            EXPECT(cudaSetDevice(me.rank) == cudaSuccess);
            ncclComm_t comm = join(me);
            int count = -1, rank = -1, device = -1, version = 0;
            ncclResult_t async = ncclInternalError;
            EXPECT_RESULT(ncclCommCount(comm, &count), ncclSuccess);
            EXPECT_RESULT(ncclCommUserRank(comm, &rank), ncclSuccess);
            EXPECT_RESULT(ncclCommCuDevice(comm, &device), ncclSuccess);
            EXPECT_RESULT(ncclCommGetAsyncError(comm, &async), ncclSuccess);
            EXPECT_RESULT(ncclGetVersion(&version), ncclSuccess);
            EXPECT(count == me.nranks && rank == me.rank && device == me.rank);
            EXPECT(async == ncclSuccess && version == NCCL_VERSION_CODE);
            EXPECT_RESULT(ncclCommFinalize(comm), ncclSuccess);
            EXPECT_RESULT(ncclCommDestroy(comm), ncclSuccess);
        }));
    }
}

// ----------------------------------------------------------------------------
// Results

TEST_CASE("all-reduce of floats, every operation") {
    for (int R : {1, 2, 4}) {
        CAPTURE(R);
        check_passed(run_ranks(R, [](const Rank& me) {
            const int R = me.nranks;
            const size_t n = 1000;
            // Rank r holds (r + 1) k, with k = 1 + i % 7.
            auto k = [](size_t i) { return 1.0 + (double)(i % 7); };
            std::vector<float> mine = make<float>(n, [&](size_t i) { return (me.rank + 1) * k(i); });
            ncclComm_t comm = join(me);
            float* send = device_copy(mine);
            float* recv = device_alloc<float>(n);
            double factorial = 1;
            for (int r = 2; r <= R; r++) factorial *= r;
            struct Case {
                ncclRedOp_t op;
                std::function<double(size_t)> want;
            } cases[] = {
                {ncclSum, [&](size_t i) { return k(i) * triangle(R); }},
                {ncclProd, [&](size_t i) { return std::pow(k(i), R) * factorial; }},
                {ncclMax, [&](size_t i) { return k(i) * R; }},
                {ncclMin, [&](size_t i) { return k(i); }},
                {ncclAvg, [&](size_t i) { return k(i) * (R + 1) / 2; }},
            };
            for (const Case& c : cases) {
                EXPECT_RESULT(ncclAllReduce(send, recv, n, ncclFloat, c.op, comm, nullptr), ncclSuccess);
                expect_values(cpu_cuda::nccl::op_name(c.op), host_copy(recv, n), c.want);
            }
            expect_values("sendbuff", host_copy(send, n), [&](size_t i) { return (me.rank + 1) * k(i); });
            EXPECT_RESULT(ncclCommDestroy(comm), ncclSuccess);
        }));
    }
}

// Rank r holds r + 1 + i % 5, so the sum is R (R + 1) / 2 + R (i % 5): at most 26 for 4 ranks.
template <class T>
void sum_of_type(const Rank& me, ncclComm_t comm, ncclDataType_t type, const char* name) {
    const int R = me.nranks;
    const size_t n = 301;
    T* buf = device_copy(make<T>(n, [&](size_t i) { return me.rank + 1 + (double)(i % 5); }));
    EXPECT_RESULT(ncclAllReduce(buf, buf, n, type, ncclSum, comm, nullptr), ncclSuccess);
    expect_values(name, host_copy(buf, n), [&](size_t i) { return triangle(R) + R * (double)(i % 5); });
}

TEST_CASE("all-reduce sums every data type") {
    for (int R : {1, 2, 4}) {
        CAPTURE(R);
        check_passed(run_ranks(R, [](const Rank& me) {
            ncclComm_t comm = join(me);
            sum_of_type<int8_t>(me, comm, ncclInt8, "ncclInt8");
            sum_of_type<uint8_t>(me, comm, ncclUint8, "ncclUint8");
            sum_of_type<int32_t>(me, comm, ncclInt32, "ncclInt32");
            sum_of_type<uint32_t>(me, comm, ncclUint32, "ncclUint32");
            sum_of_type<int64_t>(me, comm, ncclInt64, "ncclInt64");
            sum_of_type<uint64_t>(me, comm, ncclUint64, "ncclUint64");
            sum_of_type<__half>(me, comm, ncclFloat16, "ncclFloat16");
            sum_of_type<float>(me, comm, ncclFloat32, "ncclFloat32");
            sum_of_type<double>(me, comm, ncclFloat64, "ncclFloat64");
            sum_of_type<__nv_bfloat16>(me, comm, ncclBfloat16, "ncclBfloat16");
            EXPECT_RESULT(ncclCommDestroy(comm), ncclSuccess);
        }));
    }
}

TEST_CASE("integers wrap around and ncclAvg truncates them; 16-bit floats round at every step") {
    check_passed(run_ranks(4, [](const Rank& me) {
        ncclComm_t comm = join(me);
        auto one = [&](auto value, ncclDataType_t type, ncclRedOp_t op) {
            auto* d = device_copy(std::vector<decltype(value)>{value});
            EXPECT_RESULT(ncclAllReduce(d, d, 1, type, op, comm, nullptr), ncclSuccess);
            return to_double(host_copy(d, 1)[0]);
        };
        const int r = me.rank;
        EXPECT(one((int8_t)100, ncclInt8, ncclSum) == 400 - 512);
        EXPECT(one((uint8_t)200, ncclUint8, ncclSum) == 800 % 256);
        EXPECT(one((int32_t)(r + 1), ncclInt32, ncclAvg) == 2);  // 10 / 4
        EXPECT(one((int32_t)((r % 2 ? -10 : 10) * (r + 1)), ncclInt32, ncclMax) == 30);  // of 10, -20, 30, -40
        EXPECT(one((int32_t)((r % 2 ? -10 : 10) * (r + 1)), ncclInt32, ncclMin) == -40);
        EXPECT(one((uint64_t)(r + 2), ncclUint64, ncclProd) == 120);  // 2 3 4 5
        // Rank 0 holds 2048 (256 in bfloat16), the others 1. Adding 1 in rank order rounds
        // back every time (ties to even); a sum in float, or in another order, gives 2052 (260).
        EXPECT(one(from_double<__half>(r == 0 ? 2048 : 1), ncclFloat16, ncclSum) == 2048);
        EXPECT(one(from_double<__nv_bfloat16>(r == 0 ? 256 : 1), ncclBfloat16, ncclSum) == 256);
        EXPECT_RESULT(ncclCommDestroy(comm), ncclSuccess);
    }));
}

TEST_CASE("broadcast and reduce, from every root") {
    for (int R : {1, 2, 4}) {
        CAPTURE(R);
        check_passed(run_ranks(R, [](const Rank& me) {
            const int R = me.nranks;
            const size_t n = 777;
            ncclComm_t comm = join(me);
            for (int root = 0; root < R; root++) {
                int32_t* send = device_copy(make<int32_t>(n, [&](size_t i) { return 1000 * me.rank + (double)i; }));
                int32_t* recv = device_copy(std::vector<int32_t>(n, -1));
                EXPECT_RESULT(ncclBroadcast(send, recv, n, ncclInt32, root, comm, nullptr), ncclSuccess);
                expect_values("broadcast", host_copy(recv, n), [&](size_t i) { return 1000 * root + (double)i; });

                int32_t* sum = device_copy(std::vector<int32_t>(n, -1));
                EXPECT_RESULT(ncclReduce(send, sum, n, ncclInt32, ncclSum, root, comm, nullptr), ncclSuccess);
                if (me.rank == root)
                    expect_values("reduce", host_copy(sum, n), [&](size_t i) { return 1000 * triangle(R - 1) + R * (double)i; });
                else  // a non-root's recvbuff is not touched
                    expect_values("reduce (not root)", host_copy(sum, n), [](size_t) { return -1; });
            }
            EXPECT_RESULT(ncclCommDestroy(comm), ncclSuccess);
        }));
    }
}

TEST_CASE("all-gather and reduce-scatter") {
    for (int R : {1, 2, 4}) {
        CAPTURE(R);
        check_passed(run_ranks(R, [](const Rank& me) {
            const int R = me.nranks;
            const size_t n = 1001;
            ncclComm_t comm = join(me);
            int32_t* mine = device_copy(make<int32_t>(n, [&](size_t i) { return 100000 * me.rank + (double)i; }));
            int32_t* all = device_alloc<int32_t>(n * R);
            EXPECT_RESULT(ncclAllGather(mine, all, n, ncclInt32, comm, nullptr), ncclSuccess);
            expect_values("all-gather", host_copy(all, n * R), [&](size_t j) { return 100000 * (double)(j / n) + (double)(j % n); });

            // Rank r sends (r + 1)(j + 1) for j < R n; rank q gets the sum of block q.
            int32_t* send = device_copy(make<int32_t>(n * R, [&](size_t j) { return (me.rank + 1) * (j + 1.0); }));
            int32_t* recv = device_alloc<int32_t>(n);
            EXPECT_RESULT(ncclReduceScatter(send, recv, n, ncclInt32, ncclSum, comm, nullptr), ncclSuccess);
            expect_values("reduce-scatter", host_copy(recv, n), [&](size_t i) { return triangle(R) * (me.rank * n + i + 1.0); });
            EXPECT_RESULT(ncclCommDestroy(comm), ncclSuccess);
        }));
    }
}

TEST_CASE("in place, as NCCL defines it for each collective") {
    for (int R : {2, 4}) {
        CAPTURE(R);
        check_passed(run_ranks(R, [](const Rank& me) {
            const int R = me.nranks, root = R - 1;
            const size_t n = 513;
            ncclComm_t comm = join(me);
            auto x = [&](size_t i) { return (me.rank + 1) * (i + 1.0); };

            float* buf = device_copy(make<float>(n, x));
            EXPECT_RESULT(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
            expect_values("all-reduce", host_copy(buf, n), [&](size_t i) { return triangle(R) * (i + 1.0); });

            buf = device_copy(make<float>(n, x));
            EXPECT_RESULT(ncclReduce(buf, buf, n, ncclFloat, ncclMax, root, comm, nullptr), ncclSuccess);
            if (me.rank == root) expect_values("reduce", host_copy(buf, n), [&](size_t i) { return R * (i + 1.0); });

            buf = device_copy(make<float>(n, x));
            EXPECT_RESULT(ncclBroadcast(buf, buf, n, ncclFloat, root, comm, nullptr), ncclSuccess);
            expect_values("broadcast", host_copy(buf, n), [&](size_t i) { return R * (i + 1.0); });

            buf = device_copy(make<float>(n, x));
            EXPECT_RESULT(ncclBcast(buf, n, ncclFloat, 0, comm, nullptr), ncclSuccess);
            expect_values("bcast", host_copy(buf, n), [&](size_t i) { return i + 1.0; });

            // All-gather: this rank's part already sits at its place in recvbuff.
            std::vector<float> all(n * R, NAN);
            for (size_t i = 0; i < n; i++) all[me.rank * n + i] = (float)x(i);
            float* gathered = device_copy(all);
            EXPECT_RESULT(ncclAllGather(gathered + me.rank * n, gathered, n, ncclFloat, comm, nullptr), ncclSuccess);
            expect_values("all-gather", host_copy(gathered, n * R), [&](size_t j) { return (j / n + 1) * (j % n + 1.0); });

            // Reduce-scatter: recvbuff is this rank's block of sendbuff.
            float* blocks = device_copy(make<float>(n * R, [&](size_t j) { return (me.rank + 1) * (j + 1.0); }));
            EXPECT_RESULT(ncclReduceScatter(blocks, blocks + me.rank * n, n, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
            expect_values("reduce-scatter", host_copy(blocks + me.rank * n, n),
                          [&](size_t i) { return triangle(R) * (me.rank * n + i + 1.0); });
            EXPECT_RESULT(ncclCommDestroy(comm), ncclSuccess);
        }));
    }
}

TEST_CASE("buffers larger than a slot move in rounds") {
    for (int R : {1, 2, 4}) {
        CAPTURE(R);
        check_passed(run_ranks(R, [](const Rank& me) {
            const int R = me.nranks, r = me.rank;
            const size_t slot = cpu_cuda::nccl::SLOT_BYTES;
            ncclComm_t comm = join(me);

            const size_t n = slot / sizeof(float) * 5 / 2 + 3;  // 2.5 slots, and not a whole number of elements per rank
            float* sum = device_copy(make<float>(n, [&](size_t i) { return (r + 1) * (double)(i % 1024); }));
            EXPECT_RESULT(ncclAllReduce(sum, sum, n, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
            expect_values("all-reduce", host_copy(sum, n), [&](size_t i) { return triangle(R) * (double)(i % 1024); });

            const size_t m = slot / sizeof(int32_t) * 3 / 2 + 1;
            int32_t* mine = device_copy(make<int32_t>(m, [&](size_t i) { return 10000000.0 * r + (double)i; }));
            int32_t* all = device_alloc<int32_t>(m * R);
            EXPECT_RESULT(ncclAllGather(mine, all, m, ncclInt32, comm, nullptr), ncclSuccess);
            expect_values("all-gather", host_copy(all, m * R), [&](size_t j) { return 10000000.0 * (double)(j / m) + (double)(j % m); });

            const size_t k = slot / sizeof(double) * 3 / 2 + 5;  // a slot holds a piece of every rank's block
            double* blocks = device_copy(make<double>(k * R, [&](size_t j) { return (r + 1) * (double)(j % 4096); }));
            double* recv = device_alloc<double>(k);
            EXPECT_RESULT(ncclReduceScatter(blocks, recv, k, ncclDouble, ncclSum, comm, nullptr), ncclSuccess);
            expect_values("reduce-scatter", host_copy(recv, k), [&](size_t i) { return triangle(R) * (double)((r * k + i) % 4096); });

            const size_t b = slot * 5 / 2;
            uint8_t* bytes = device_copy(make<uint8_t>(b, [&](size_t i) { return (double)((i * 7 + r) & 255); }));
            EXPECT_RESULT(ncclBroadcast(bytes, bytes, b, ncclUint8, R - 1, comm, nullptr), ncclSuccess);
            expect_values("broadcast", host_copy(bytes, b), [&](size_t i) { return (double)((i * 7 + R - 1) & 255); });
            EXPECT_RESULT(ncclCommDestroy(comm), ncclSuccess);
        }));
    }
}

// Floats of many magnitudes, so that the order of a sum shows in its bits.
std::vector<float> scattered(int seed, size_t n) {
    std::vector<float> v(n);
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(seed + 1);
    for (float& x : v) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x = std::ldexp((float)(s >> 40) / (float)(1 << 24) - 0.5f, (int)((s >> 8) % 21) - 10);
    }
    return v;
}

TEST_CASE("every rank gets bit-identical sums, in rank order, run after run") {
    const int R = 4;
    const size_t n = cpu_cuda::nccl::SLOT_BYTES / sizeof(float) + 12345;  // two rounds, split unevenly over the ranks
    std::vector<std::vector<float>> inputs;
    for (int r = 0; r < R; r++) inputs.push_back(scattered(r, n));
    std::vector<float> in_order(n), reversed(n);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) {
        in_order[i] = ((inputs[0][i] + inputs[1][i]) + inputs[2][i]) + inputs[3][i];
        reversed[i] = ((inputs[3][i] + inputs[2][i]) + inputs[1][i]) + inputs[0][i];
        differ += memcmp(&in_order[i], &reversed[i], sizeof(float)) != 0;
    }
    REQUIRE(differ > n / 10);  // the check below can tell the orders apart
    for (int run = 0; run < 2; run++) {
        CAPTURE(run);
        check_passed(run_ranks(R, [&](const Rank& me) {
            ncclComm_t comm = join(me);
            float* d = device_copy(inputs[me.rank]);
            EXPECT_RESULT(ncclAllReduce(d, d, n, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
            EXPECT(memcmp(host_copy(d, n).data(), in_order.data(), n * sizeof(float)) == 0);
            EXPECT_RESULT(ncclCommDestroy(comm), ncclSuccess);
        }));
    }
}

TEST_CASE("hundreds of collectives in a row") {
    const int iterations = 300;
    const double start = now_s();
    check_passed(run_ranks(4, [](const Rank& me) {
        const int R = me.nranks, r = me.rank;
        ncclComm_t comm = join(me);
        float* sum = device_alloc<float>(64);
        int32_t* one = device_alloc<int32_t>(1);
        int32_t* all = device_alloc<int32_t>(3 * R);
        for (int it = 0; it < iterations && failures == 0; it++) {
            std::vector<float> x = make<float>(64, [&](size_t i) { return (r + 1) * (it + 1.0) + (double)i; });
            EXPECT(cudaMemcpy(sum, x.data(), sizeof(float) * 64, cudaMemcpyHostToDevice) == cudaSuccess);
            EXPECT_RESULT(ncclAllReduce(sum, sum, 64, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
            expect_values("all-reduce", host_copy(sum, 64), [&](size_t i) { return triangle(R) * (it + 1.0) + R * (double)i; });

            const int root = it % R;
            std::vector<int32_t> mine{10 * it + r};
            EXPECT(cudaMemcpy(one, mine.data(), sizeof(int32_t), cudaMemcpyHostToDevice) == cudaSuccess);
            EXPECT_RESULT(ncclBroadcast(one, one, 1, ncclInt32, root, comm, nullptr), ncclSuccess);
            EXPECT(host_copy(one, 1)[0] == 10 * it + root);

            if (it % 10 == 0) {
                int32_t* part = device_copy(std::vector<int32_t>{it, r, -r});
                EXPECT_RESULT(ncclAllGather(part, all, 3, ncclInt32, comm, nullptr), ncclSuccess);
                expect_values("all-gather", host_copy(all, 3 * R), [&](size_t j) {
                    const double q = (double)(j / 3);
                    return j % 3 == 0 ? it : j % 3 == 1 ? q : -q;
                });
                cudaFree(part);
            }
        }
        EXPECT_RESULT(ncclCommDestroy(comm), ncclSuccess);
    }));
    MESSAGE("4 ranks, ", iterations, " x (all-reduce + broadcast) + ", iterations / 10, " all-gathers: ", now_s() - start, " s");
}

// ----------------------------------------------------------------------------
// Failures: an error, promptly, never a hang

// What the survivors of a lost rank do: the next all-reduce fails, and so does every call after it.
void survive(ncclComm_t comm, const char* lost) {
    float* d = device_alloc<float>(16);
    EXPECT_RESULT(completed(ncclAllReduce(d, d, 16, ncclFloat, ncclSum, comm, nullptr), comm), ncclRemoteError);
    ncclResult_t async = ncclSuccess;
    EXPECT_RESULT(ncclCommGetAsyncError(comm, &async), ncclSuccess);
    EXPECT(async == ncclRemoteError);
    EXPECT_RESULT(ncclAllReduce(d, d, 16, ncclFloat, ncclSum, comm, nullptr), ncclRemoteError);  // failed for good
    EXPECT(contains(ncclGetLastError(comm), lost));
    EXPECT_RESULT(ncclCommDestroy(comm), ncclSuccess);
}

// Checks that every rank but `lost` passed, and wrote every one of `lines`; returns how
// long after `lost` ended the last of them ended.
double check_survivors(const std::vector<Outcome>& outcomes, int lost, const std::vector<std::string>& lines) {
    double lost_at = 0, last = 0;
    for (const Outcome& o : outcomes) {
        if (o.rank == lost) {
            lost_at = o.seconds;
            continue;
        }
        INFO("rank ", o.rank, " wrote:\n", o.err);
        CHECK(o.passed());
        for (const std::string& line : lines) CHECK(contains(o.err, line));
        last = std::max(last, o.seconds);
    }
    return last - lost_at;
}

TEST_CASE("a rank that exits or is killed makes the others fail within a second") {
    const std::vector<std::string> lines = {"ncclAllReduce (rank ", "rank 2 (pid ", "exited or was killed"};
    SUBCASE("it exits between collectives") {
        auto outcomes = run_ranks(4, [](const Rank& me) {
            ncclComm_t comm = join(me);
            float* d = device_alloc<float>(16);
            EXPECT_RESULT(ncclAllReduce(d, d, 16, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
            if (me.rank == 2) _exit(0);  // without ncclCommDestroy
            survive(comm, "rank 2");
        });
        double latency = check_survivors(outcomes, 2, lines);
        CHECK(latency < 1.0);
        MESSAGE("the others failed ", latency, " s after rank 2 exited");
    }
    SUBCASE("it is killed while the others wait in a collective") {
        auto outcomes = run_ranks(4, [](const Rank& me) {
            ncclComm_t comm = join(me);
            if (me.rank == 2) {
                sleep_s(0.35);
                raise(SIGKILL);
            }
            survive(comm, "rank 2");
        });
        CHECK(WIFSIGNALED(outcomes[2].status));
        double latency = check_survivors(outcomes, 2, lines);
        CHECK(latency < 1.0);
        MESSAGE("the others failed ", latency, " s after rank 2 was killed");
    }
    SUBCASE("it is killed while the others wait in ncclCommInitRank") {
        // Rank 2 never comes, so ranks 0 and 1 wait in ncclCommInitRank until rank 1 dies.
        auto outcomes = run_ranks(3, [](const Rank& me) {
            if (me.rank == 1) alarm(1);  // SIGALRM ends the process
            ncclComm_t comm = nullptr;
            EXPECT_RESULT(ncclCommInitRank(&comm, me.nranks, me.id, me.rank), ncclRemoteError);
        }, {{0, 1}});
        CHECK(WIFSIGNALED(outcomes[1].status));
        double latency = check_survivors(outcomes, 1, {"ncclCommInitRank (rank 0 of 3): rank 1 (pid ", "exited or was killed"});
        CHECK(latency < 1.0);
        MESSAGE("rank 0 failed ", latency, " s after rank 1 died");
    }
}

TEST_CASE("ncclCommAbort on one rank makes the others fail at once") {
    auto outcomes = run_ranks(3, [](const Rank& me) {
        ncclComm_t comm = join(me);
        if (me.rank == 1) {
            sleep_s(0.3);  // the others are waiting in their all-reduce by then
            EXPECT_RESULT(ncclCommAbort(comm), ncclSuccess);
            return;
        }
        survive(comm, "rank 1 called ncclCommAbort");
    });
    double latency = check_survivors(outcomes, 1, {"ncclAllReduce (rank ", "rank 1 called ncclCommAbort"});
    CHECK(outcomes[1].passed());
    CHECK(latency < 0.5);
    MESSAGE("the others failed ", latency, " s after rank 1 aborted");
}

TEST_CASE("a rank that never joins: ncclCommInitRank fails after CPU_CUDA_NCCL_TIMEOUT, naming it") {
    auto outcomes = run_ranks(3, [](const Rank& me) {
        const double start = now_s();
        ncclComm_t comm = nullptr;
        EXPECT_RESULT(ncclCommInitRank(&comm, me.nranks, me.id, me.rank), ncclRemoteError);
        const double waited = now_s() - start;
        EXPECT(comm == nullptr);
        EXPECT(waited > 0.9 && waited < 3);
        fprintf(stderr, "waited %.2f s\n", waited);
    }, {{0, 1}, "1"});
    for (const Outcome& o : outcomes) {
        INFO("rank ", o.rank, " wrote:\n", o.err);
        CHECK(o.passed());
        CHECK(contains(o.err, "ncclCommInitRank (rank "));
        CHECK(contains(o.err, "rank 2"));
    }
    CHECK((contains(outcomes[0].err, "rank 2 did not join within 1 s") ||
           contains(outcomes[1].err, "rank 2 did not join within 1 s")));
}

TEST_CASE("a collective whose peer does not come fails after CPU_CUDA_NCCL_TIMEOUT, naming it") {
    auto outcomes = run_ranks(2, [](const Rank& me) {
        ncclComm_t comm = join(me);
        float* d = device_alloc<float>(4);
        if (me.rank == 1) sleep_s(1.5);  // alive, but late
        const double start = now_s();
        EXPECT_RESULT(completed(ncclAllReduce(d, d, 4, ncclFloat, ncclSum, comm, nullptr), comm), ncclRemoteError);
        const double waited = now_s() - start;
        EXPECT(me.rank == 0 ? waited > 0.9 && waited < 2 : waited < 0.5);
        ncclResult_t async = ncclSuccess;
        EXPECT_RESULT(ncclCommGetAsyncError(comm, &async), ncclSuccess);
        EXPECT(async == ncclRemoteError);
        EXPECT_RESULT(ncclCommDestroy(comm), ncclSuccess);
    }, {{}, "1"});
    check_passed(outcomes);
    CHECK(contains(outcomes[0].err, "ncclAllReduce (rank 0 of 2): rank 1 did not arrive within 1 s"));
    CHECK(contains(outcomes[1].err, "ncclAllReduce (rank 1 of 2): rank 0 gave up after 1 s"));
}

// ----------------------------------------------------------------------------
// Asynchrony, as on a GPU: what a host that waits under its own timeout relies on

TEST_CASE("a collective runs after its call returns: the stream answers not ready until every rank has come") {
    // Rank 1 comes 0.5 s late. Rank 0's calls return at once (< 0.2 s: far below 0.5 s, far
    // above a call's cost); what waits for the collective takes >= 0.4 s (0.5 s less the
    // launch skew of the two processes, < 0.1 s).
    check_passed(run_ranks(2, [](const Rank& me) {
        ncclComm_t comm = join(me);
        const int n = 1000;
        float* d = device_copy(make<float>(n, [&](size_t i) { return (me.rank + 1) * (double)i; }));
        float* pinned = nullptr;
        EXPECT(cudaMallocHost((void**)&pinned, n * sizeof(float)) == cudaSuccess);
        std::vector<float> pageable(n, -1.0f);
        cudaEvent_t done = nullptr;
        EXPECT(cudaEventCreate(&done) == cudaSuccess);
        if (me.rank == 1) sleep_s(0.5);
        const double start = now_s();
        EXPECT_RESULT(ncclAllReduce(d, d, n, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
        if (me.rank == 0) {
            EXPECT(now_s() - start < 0.2);
            EXPECT(cudaStreamQuery(nullptr) == cudaErrorNotReady);
            EXPECT(cudaGetLastError() == cudaSuccess);  // "not ready" is an answer, not an error
            // device -> pinned: queued behind the collective, as CUDA's copy is asynchronous
            EXPECT(cudaMemcpyAsync(pinned, d, n * sizeof(float), cudaMemcpyDeviceToHost, nullptr) == cudaSuccess);
            EXPECT(cudaEventRecord(done, nullptr) == cudaSuccess);
            EXPECT(now_s() - start < 0.2);
            EXPECT(cudaStreamQuery(nullptr) == cudaErrorNotReady);
            EXPECT(cudaEventQuery(done) == cudaErrorNotReady);
            ncclResult_t async = ncclInternalError;
            EXPECT_RESULT(ncclCommGetAsyncError(comm, &async), ncclSuccess);
            EXPECT(async == ncclSuccess);  // in flight is not failed
        }
        // device -> pageable: CUDA returns only once the copy is complete, so after the collective
        EXPECT(cudaMemcpyAsync(pageable.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, nullptr) == cudaSuccess);
        if (me.rank == 0) EXPECT(now_s() - start >= 0.4);
        expect_values("pageable", pageable, [](size_t i) { return 3.0 * i; });
        EXPECT(cudaStreamSynchronize(nullptr) == cudaSuccess);
        EXPECT(cudaStreamQuery(nullptr) == cudaSuccess);
        EXPECT(cudaEventQuery(done) == cudaSuccess);
        if (me.rank == 0) expect_values("pinned", std::vector<float>(pinned, pinned + n), [](size_t i) { return 3.0 * i; });
        EXPECT(cudaEventDestroy(done) == cudaSuccess);
        EXPECT(cudaFreeHost(pinned) == cudaSuccess);
        EXPECT_RESULT(ncclCommDestroy(comm), ncclSuccess);
    }));
}

TEST_CASE("a collective on a stream of its own runs in that stream's order") {
    // Two collectives and a copy queued on one stream: they run in order (the copy sees the
    // second sum), and the default stream's copies wait for them.
    check_passed(run_ranks(2, [](const Rank& me) {
        ncclComm_t comm = join(me);
        cudaStream_t stream;
        EXPECT(cudaStreamCreate(&stream) == cudaSuccess);
        float* d = device_copy(std::vector<float>(64, 1.0f + me.rank));  // 1 and 2
        float* pinned = nullptr;
        EXPECT(cudaMallocHost((void**)&pinned, 64 * sizeof(float)) == cudaSuccess);
        if (me.rank == 1) sleep_s(0.2);
        EXPECT_RESULT(ncclAllReduce(d, d, 64, ncclFloat, ncclSum, comm, stream), ncclSuccess);  // 3
        EXPECT_RESULT(ncclAllReduce(d, d, 64, ncclFloat, ncclProd, comm, stream), ncclSuccess);  // 9
        EXPECT(cudaMemcpyAsync(pinned, d, 64 * sizeof(float), cudaMemcpyDeviceToHost, stream) == cudaSuccess);
        EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
        expect_values("pinned", std::vector<float>(pinned, pinned + 64), [](size_t) { return 9.0; });
        EXPECT(cudaFreeHost(pinned) == cudaSuccess);
        EXPECT(cudaStreamDestroy(stream) == cudaSuccess);
        EXPECT_RESULT(ncclCommDestroy(comm), ncclSuccess);
    }));
}

// A non-blocking communicator (ncclConfig_t's blocking = 0): the init and the collectives may
// answer ncclInProgress, and ncclCommGetAsyncError says when they are done.
ncclResult_t poll_async(ncclComm_t comm, double seconds) {
    ncclResult_t async = ncclInProgress;
    for (const double end = now_s() + seconds; now_s() < end; sleep_s(0.005)) {
        EXPECT_RESULT(ncclCommGetAsyncError(comm, &async), ncclSuccess);
        if (async != ncclInProgress) break;
    }
    return async;
}

TEST_CASE("non-blocking init: ncclInProgress until every rank has joined") {
    check_passed(run_ranks(2, [](const Rank& me) {
        if (me.rank == 1) sleep_s(0.5);
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        ncclComm_t comm = nullptr;
        const double start = now_s();
        EXPECT_RESULT(ncclCommInitRankConfig(&comm, me.nranks, me.id, me.rank, &config), ncclInProgress);
        EXPECT(comm != nullptr && now_s() - start < 0.2);  // returned at once
        float* d = device_copy(std::vector<float>(8, 1.0f));
        if (me.rank == 0) {  // rank 1 is not there yet
            ncclResult_t async = ncclSuccess;
            EXPECT_RESULT(ncclCommGetAsyncError(comm, &async), ncclSuccess);
            EXPECT(async == ncclInProgress);
            EXPECT_RESULT(ncclAllReduce(d, d, 8, ncclFloat, ncclSum, comm, nullptr), ncclInvalidUsage);
        }
        EXPECT(poll_async(comm, 5) == ncclSuccess);
        if (me.rank == 0) EXPECT(now_s() - start >= 0.4);
        ncclResult_t r = ncclAllReduce(d, d, 8, ncclFloat, ncclSum, comm, nullptr);
        EXPECT(r == ncclSuccess || r == ncclInProgress);
        EXPECT(poll_async(comm, 5) == ncclSuccess);
        expect_values("sum", host_copy(d, 8), [](size_t) { return 2.0; });
        EXPECT_RESULT(ncclCommDestroy(comm), ncclSuccess);
    }));
}

TEST_CASE("non-blocking init: a rank that never comes leaves it in progress, and ncclCommAbort ends it at once") {
    // Rank 2 never starts. CPU_CUDA_NCCL_TIMEOUT is 20 s: the ranks' own bound (1 s of
    // polling) must end the wait, not the runtime's.
    auto outcomes = run_ranks(3, [](const Rank& me) {
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        ncclComm_t comm = nullptr;
        EXPECT_RESULT(ncclCommInitRankConfig(&comm, me.nranks, me.id, me.rank, &config), ncclInProgress);
        EXPECT(poll_async(comm, 1.0) == ncclInProgress);
        const double start = now_s();
        EXPECT_RESULT(ncclCommAbort(comm), ncclSuccess);
        EXPECT(now_s() - start < 0.5);  // the init polls for an abort every 0.1 s
    }, {{0, 1}});
    check_passed(outcomes);
    for (const Outcome& o : outcomes) CHECK(o.seconds < 5);
}

TEST_CASE("ranks that call different collectives fail with ncclInvalidUsage") {
    auto outcomes = run_ranks(2, [](const Rank& me) {
        ncclComm_t comm = join(me);
        float* d = device_alloc<float>(9);
        EXPECT_RESULT(completed(ncclAllReduce(d, d, 8 + me.rank, ncclFloat, ncclSum, comm, nullptr), comm),
                      ncclInvalidUsage);
        EXPECT_RESULT(ncclBroadcast(d, d, 1, ncclFloat, 0, comm, nullptr), ncclInvalidUsage);  // failed for good
        EXPECT_RESULT(ncclCommDestroy(comm), ncclSuccess);
    });
    check_passed(outcomes);
    for (const Outcome& o : outcomes) {
        CHECK(contains(o.err, "rank 0 ncclAllReduce(count 8, ncclFloat32, ncclSum)"));
        CHECK(contains(o.err, "rank 1 ncclAllReduce(count 9, ncclFloat32, ncclSum)"));
    }
}

TEST_CASE("a rank that joins twice, or with another nranks, fails at once") {
    SUBCASE("twice") {  // both processes claim rank 0 of 2
        auto outcomes = run_ranks(2, [](const Rank& me) {
            ncclComm_t comm = nullptr;
            ncclResult_t r = ncclCommInitRank(&comm, 2, me.id, 0);
            EXPECT(r == ncclInvalidUsage || r == ncclRemoteError);
        });
        check_passed(outcomes);
        CHECK(contains(outcomes[0].err + outcomes[1].err, "rank 0 has already joined (pid"));
        for (const Outcome& o : outcomes) CHECK(o.seconds < 2);
    }
    SUBCASE("another nranks") {
        auto outcomes = run_ranks(2, [](const Rank& me) {
            ncclComm_t comm = nullptr;
            ncclResult_t r = ncclCommInitRank(&comm, me.rank == 0 ? 2 : 3, me.id, me.rank);
            EXPECT(r == ncclInvalidUsage || r == ncclRemoteError);
        });
        check_passed(outcomes);
        CHECK(contains(outcomes[0].err + outcomes[1].err, "was given nranks"));
        for (const Outcome& o : outcomes) CHECK(o.seconds < 2);
    }
}

// ----------------------------------------------------------------------------
// Argument checks

TEST_CASE("bad arguments are refused with ncclInvalidArgument, and the communicator still works") {
    auto outcomes = run_ranks(2, [](const Rank& me) {
        const size_t n = 16;
        ncclComm_t comm = nullptr;
        ncclUniqueId zero = {};
        EXPECT_RESULT(ncclCommInitRank(nullptr, 2, me.id, me.rank), ncclInvalidArgument);
        EXPECT_RESULT(ncclCommInitRank(&comm, 0, me.id, 0), ncclInvalidArgument);
        EXPECT_RESULT(ncclCommInitRank(&comm, 2, me.id, -1), ncclInvalidArgument);
        EXPECT_RESULT(ncclCommInitRank(&comm, 2, me.id, 2), ncclInvalidArgument);
        EXPECT_RESULT(ncclCommInitRank(&comm, 2, zero, me.rank), ncclInvalidArgument);
        ncclConfig_t unset = {};
        EXPECT_RESULT(ncclCommInitRankConfig(&comm, 2, me.id, me.rank, &unset), ncclInvalidArgument);
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        EXPECT_RESULT(ncclCommInitRankConfig(&comm, 2, me.id, me.rank, &config), ncclSuccess);

        float* send = device_copy(std::vector<float>(n + 1, 1.0f));
        float* recv = device_alloc<float>(n);
        std::vector<float> host(2 * n);
        const ncclResult_t bad = ncclInvalidArgument;
        EXPECT_RESULT(ncclAllReduce(send, recv, n, ncclFloat, ncclSum, nullptr, nullptr), bad);
        EXPECT_RESULT(ncclAllReduce(send, recv, n, (ncclDataType_t)ncclNumTypes, ncclSum, comm, nullptr), bad);
        EXPECT_RESULT(ncclAllReduce(send, recv, n, ncclFloat8e4m3, ncclSum, comm, nullptr), bad);
        EXPECT_RESULT(ncclAllReduce(send, recv, n, ncclFloat, (ncclRedOp_t)ncclNumOps, comm, nullptr), bad);
        EXPECT_RESULT(ncclBroadcast(send, recv, n, ncclFloat, -1, comm, nullptr), bad);
        EXPECT_RESULT(ncclReduce(send, recv, n, ncclFloat, ncclSum, 2, comm, nullptr), bad);
        EXPECT_RESULT(ncclAllReduce(send, recv, n, ncclFloat, ncclSum, comm, (cudaStream_t)&host), bad);
        EXPECT_RESULT(ncclAllReduce(host.data(), recv, n, ncclFloat, ncclSum, comm, nullptr), bad);
        EXPECT_RESULT(ncclAllReduce(send, host.data(), n, ncclFloat, ncclSum, comm, nullptr), bad);
        EXPECT_RESULT(ncclAllReduce(send, recv, n + 1, ncclFloat, ncclSum, comm, nullptr), bad);
        EXPECT_RESULT(ncclAllGather(send, recv, n, ncclFloat, comm, nullptr), bad);      // recvbuff needs 2n
        EXPECT_RESULT(ncclReduceScatter(send, recv, n, ncclFloat, ncclSum, comm, nullptr), bad);  // sendbuff needs 2n
        EXPECT_RESULT(ncclAllReduce(send, send + 1, n, ncclFloat, ncclSum, comm, nullptr), bad);  // overlap, not in place
        EXPECT(contains(ncclGetLastError(comm), "overlap"));
        EXPECT_RESULT(ncclAllReduce(nullptr, nullptr, 0, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
        EXPECT_RESULT(ncclGroupEnd(), ncclInvalidUsage);

        // None of that harmed the communicator; a group's calls have run when it ends.
        ncclResult_t async = ncclInternalError;
        EXPECT_RESULT(ncclCommGetAsyncError(comm, &async), ncclSuccess);
        EXPECT(async == ncclSuccess);
        EXPECT_RESULT(ncclGroupStart(), ncclSuccess);
        EXPECT_RESULT(ncclAllReduce(send, recv, n, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
        EXPECT_RESULT(ncclGroupEnd(), ncclSuccess);
        expect_values("all-reduce", host_copy(recv, n), [](size_t) { return 2; });

        EXPECT_RESULT(ncclCommDestroy(comm), ncclSuccess);
        EXPECT_RESULT(ncclAllReduce(send, recv, n, ncclFloat, ncclSum, comm, nullptr), bad);  // destroyed
        EXPECT_RESULT(ncclCommDestroy(comm), bad);
    });
    check_passed(outcomes);
    const std::string& err = outcomes[0].err;
    CHECK(contains(err, "ncclAllReduce: comm is NULL"));
    CHECK(contains(err, "ncclCommInitRank: rank 2 is not in [0, 2)"));
    CHECK(contains(err, "ncclFloat8e4m3 is not supported"));
    CHECK(contains(err, "ncclReduce (rank 0 of 2): root 2 is not a rank"));
    CHECK(contains(err, "ncclAllReduce (rank 0 of 2): sendbuff 0x"));
    CHECK(contains(err, "is not device memory"));
    CHECK(contains(err, "ncclAllGather (rank 0 of 2): recvbuff"));
    CHECK(contains(err, "past the end"));
    CHECK(contains(err, "is not a live communicator"));
}

}  // namespace
