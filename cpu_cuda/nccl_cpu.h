// cpu_cuda/nccl_cpu.h: NCCL across the processes of one machine. The functions are the
// toolkit's own declarations (nccl.h), defined here; each rank is a process, started by
// mpirun, by srun (the id then travels through --nccl-init-file), or by fork.
//
// Transport: one POSIX shared-memory segment per communicator (shm_open + mmap). Why:
//   * the ncclUniqueId is all a rank needs to find it, so it works the same under mpirun
//     and in the Slurm-style start without MPI, and the build needs no extra library;
//   * every rank sees every contribution, so each element is reduced in one fixed order,
//     rank 0, 1, ..., R-1, whichever rank computes it: all ranks get bit-identical results,
//     run after run (real NCCL's order follows its ring or tree);
//   * on one machine, copying through shared pages is as fast as it gets.
// The id holds the segment's name, /cpu_cuda_nccl.<pid that made the id>.<64 random bits>,
// the same random token, which the segment must carry too (a stale segment is never
// joined), and the host name (a rank on another machine fails at once, with a message).
// The first rank to arrive creates the segment; it is unlinked as soon as every rank has
// joined, or joining has failed, so nothing is left in /dev/shm.
//
// Layout: a header, a record per rank, a slot of SLOT_BYTES per rank and a result area of
// the same size. Larger buffers move in rounds. A round has two phases, each ended by a
// barrier of all ranks:
//   first:  each rank writes only its own slot (and may still read the previous result);
//   second: ranks read the slots; each writes only its own share of the result area.
// No area is ever written and read in the same phase. A reduction is shared out: each rank
// reduces 1/R of the round, in rank order.
//
// Waiting: a barrier is one counter per rank. A waiting rank spins briefly, yields its core
// a few times, then sleeps on a futex in the segment, woken by each arrival or after
// LIVENESS_PERIOD_S: ranks that outnumber the cores do not burn each other's time.
//
// Failures end in an error, never a hang:
//   * each rank holds an open-file-description lock on one byte of the segment, which the
//     kernel drops when the process exits or is killed: a waiting rank sees that a peer is
//     gone within LIVENESS_PERIOD_S (with no PIDs that can be reused, no zombies that look
//     alive). A process forked by a rank shares the lock until it exits or execs;
//   * ncclCommAbort, a timeout (CPU_CUDA_NCCL_TIMEOUT) or a refused join is recorded in the
//     segment and wakes every rank, so all fail promptly;
//   * ranks that call different collectives (kind, count, type, op, root) fail with
//     ncclInvalidUsage instead of mixing their data.
// Each failure prints one line naming the call and the rank at fault, and the communicator
// stays failed (ncclCommGetAsyncError reports it), as in NCCL. Codes: ncclInvalidArgument
// for bad arguments (buffers must lie inside one device or pinned allocation, memory.h),
// ncclInvalidUsage for ranks that disagree, ncclRemoteError when a peer is gone, aborted,
// timed out or never came, ncclSystemError when the OS refuses.
//
// Asynchrony, as on a GPU: a collective's call checks its arguments and queues it on its
// stream (streams.h); the stream's worker thread runs it, after the stream's earlier work,
// and cudaStreamQuery answers cudaErrorNotReady until it is done. A failure then shows in
// ncclCommGetAsyncError (and every later call on the communicator). A non-blocking
// communicator (ncclConfig_t's blocking = 0) joins on a thread of its own: its init answers
// ncclInProgress, and so does ncclCommGetAsyncError until every rank has joined.
//
// Limits: ncclGroupStart/ncclGroupEnd only nest: the calls inside a group are queued in
// order. A group whose calls must progress together (one thread driving several ranks on
// one stream) cannot complete and fails at the timeout. Not provided: Send/Recv, AlltoAll,
// Gather, Scatter, CommSplit, user-defined reduction ops, and the fp8 types (ncclInvalidArgument).
#pragma once
#include <nccl.h>

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "memory.h"
#include "runtime.h"
#include "settings.h"

namespace cpu_cuda {
namespace nccl {

constexpr size_t SLOT_BYTES = 1 << 20;     // per rank: larger buffers move in rounds
constexpr double LIVENESS_PERIOD_S = 0.1;  // how often a waiting rank checks that its peers live
constexpr int SPINS = 100;                 // checks a waiting rank makes before it yields the core,
constexpr int YIELDS = 20;                 // and how many times it yields before it sleeps

inline double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ----------------------------------------------------------------------------
// Messages: one line on stderr per failed call, kept for ncclGetLastError.

// The process's last message, as NCCL keeps it: a collective fails on its stream's worker
// thread (streams.h), and the host asks.
inline std::mutex& message_mutex() {
    static std::mutex m;
    return m;
}
inline std::string& last_message_text() {
    static std::string s;
    return s;
}
inline void set_last_message(const std::string& text) {
    std::lock_guard<std::mutex> lock(message_mutex());
    last_message_text() = text;
}

__attribute__((format(printf, 1, 2))) inline std::string format(const char* fmt, ...) {
    va_list args, again;
    va_start(args, fmt);
    va_copy(again, args);
    int n = vsnprintf(nullptr, 0, fmt, args);
    va_end(args);
    std::vector<char> text((size_t)std::max(n, 0) + 1);
    vsnprintf(text.data(), text.size(), fmt, again);
    va_end(again);
    return text.data();
}

inline ncclResult_t report(ncclResult_t code, const std::string& where, const std::string& what) {
    set_last_message(where + ": " + what);
    fprintf(stderr, "cpu_cuda: %s: %s\n", where.c_str(), what.c_str());
    return code;
}

// "rank 2" or "ranks 1, 3"
inline std::string rank_list(const std::vector<int>& ranks) {
    std::string s = ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < ranks.size(); i++) s += (i ? ", " : "") + std::to_string(ranks[i]);
    return s;
}

// ----------------------------------------------------------------------------
// Data types and reductions

struct TypeInfo {
    const char* name;
    size_t bytes;
    bool supported;
};
inline const TypeInfo* type_info(ncclDataType_t t) {
    static const TypeInfo types[ncclNumTypes] = {
        {"ncclInt8", 1, true},      {"ncclUint8", 1, true},       {"ncclInt32", 4, true},
        {"ncclUint32", 4, true},    {"ncclInt64", 8, true},       {"ncclUint64", 8, true},
        {"ncclFloat16", 2, true},   {"ncclFloat32", 4, true},     {"ncclFloat64", 8, true},
        {"ncclBfloat16", 2, true},  {"ncclFloat8e4m3", 1, false}, {"ncclFloat8e5m2", 1, false}};
    return (unsigned)t < (unsigned)ncclNumTypes ? &types[t] : nullptr;
}
inline const char* op_name(int op) {
    static const char* names[ncclNumOps] = {"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"};
    return op >= 0 && op < ncclNumOps ? names[op] : "?";
}

// Arithmetic on one element type. The 16-bit floats compute in float and round back after
// every operation, which gives exactly what half and bfloat16 arithmetic gives on a GPU.
template <class T>
struct Arith {
    using Math = T;
    static T up(T v) { return v; }
    static T down(T v) { return v; }
};
template <>
struct Arith<__half> {
    using Math = float;
    static float up(__half v) { return __half2float(v); }
    static __half down(float v) { return __float2half_rn(v); }
};
template <>
struct Arith<__nv_bfloat16> {
    using Math = float;
    static float up(__nv_bfloat16 v) { return __bfloat162float(v); }
    static __nv_bfloat16 down(float v) { return __float2bfloat16_rn(v); }
};

// Integers wrap around, as on the GPU, instead of overflowing into undefined behaviour.
template <class M>
M plus(M a, M b) {
    if constexpr (std::is_integral_v<M>) return M(std::make_unsigned_t<M>(a) + std::make_unsigned_t<M>(b));
    else return a + b;
}
template <class M>
M times(M a, M b) {
    if constexpr (std::is_integral_v<M>) return M(std::make_unsigned_t<M>(a) * std::make_unsigned_t<M>(b));
    else return a * b;
}
// fmax/fmin ignore a NaN operand, as NCCL's float max and min do.
template <class M>
M larger(M a, M b) {
    if constexpr (std::is_floating_point_v<M>) return std::fmax(a, b);
    else return std::max(a, b);
}
template <class M>
M smaller(M a, M b) {
    if constexpr (std::is_floating_point_v<M>) return std::fmin(a, b);
    else return std::min(a, b);
}

// dst[i] = src[0][i] op src[1][i] op ... op src[nsrc-1][i], folded in that order, for i < n.
// ncclAvg is computed as NCCL computes it: floating types multiply every input by 1/nsrc
// (rounded to the type) and sum, integers divide the sum (truncating).
template <class T>
void reduce(T* dst, const char* const* src, int nsrc, size_t n, ncclRedOp_t op) {
    using A = Arith<T>;
    using M = typename A::Math;
    auto row = [&](int r) { return reinterpret_cast<const T*>(src[r]); };
    auto fold = [&](auto pre, auto combine) {
        const T* first = row(0);
        for (size_t i = 0; i < n; i++) dst[i] = pre(first[i]);
        for (int r = 1; r < nsrc; r++) {
            const T* s = row(r);
            for (size_t i = 0; i < n; i++) dst[i] = A::down(combine(A::up(dst[i]), A::up(pre(s[i]))));
        }
    };
    auto as_is = [](T v) { return v; };
    switch (op) {
        case ncclSum: return fold(as_is, plus<M>);
        case ncclProd: return fold(as_is, times<M>);
        case ncclMax: return fold(as_is, larger<M>);
        case ncclMin: return fold(as_is, smaller<M>);
        case ncclAvg:
            if constexpr (std::is_integral_v<T>) {
                fold(as_is, plus<M>);
                for (size_t i = 0; i < n; i++) dst[i] = T(dst[i] / T(nsrc));
            } else {
                const M scale = A::up(A::down(M(1.0 / nsrc)));
                fold([&](T v) { return A::down(A::up(v) * scale); }, plus<M>);
            }
            return;
        default: return;  // refused by the argument checks
    }
}

inline void reduce(char* dst, const char* const* src, int nsrc, size_t n, ncclDataType_t type, ncclRedOp_t op) {
    auto as = [&](auto zero) { reduce(reinterpret_cast<decltype(zero)*>(dst), src, nsrc, n, op); };
    switch (type) {
        case ncclInt8: return as(int8_t{});
        case ncclUint8: return as(uint8_t{});
        case ncclInt32: return as(int32_t{});
        case ncclUint32: return as(uint32_t{});
        case ncclInt64: return as(int64_t{});
        case ncclUint64: return as(uint64_t{});
        case ncclFloat16: return as(__half{});
        case ncclFloat32: return as(float{});
        case ncclFloat64: return as(double{});
        case ncclBfloat16: return as(__nv_bfloat16{});
        default: return;  // refused by the argument checks
    }
}

// ----------------------------------------------------------------------------
// The id, and what lives in the shared segment

struct Id {
    char magic[8];
    uint64_t token;     // random; the segment carries it too
    char shm_name[48];  // /cpu_cuda_nccl.<pid>.<token in hex>
    char host[64];      // where the id was made: every rank must run there
};
static_assert(sizeof(Id) == sizeof(ncclUniqueId), "the id must fill ncclUniqueId exactly");
constexpr char ID_MAGIC[8] = "cpunccl";

enum class Kind : int32_t { all_reduce, broadcast, reduce, all_gather, reduce_scatter };
inline const char* kind_name(Kind k) {
    switch (k) {
        case Kind::all_reduce: return "ncclAllReduce";
        case Kind::broadcast: return "ncclBroadcast";
        case Kind::reduce: return "ncclReduce";
        case Kind::all_gather: return "ncclAllGather";
        case Kind::reduce_scatter: return "ncclReduceScatter";
    }
    return "?";
}

// A collective call as every rank must make it.
struct Call {
    Kind kind;
    ncclDataType_t datatype;
    int32_t op;    // -1: the collective does not reduce
    int32_t root;  // -1: it has no root
    uint64_t count;
    bool operator==(const Call& o) const {
        return kind == o.kind && datatype == o.datatype && op == o.op && root == o.root && count == o.count;
    }
};
inline std::string describe(const Call& c) {
    std::string s = format("%s(count %llu, %s", kind_name(c.kind), (unsigned long long)c.count,
                           type_info(c.datatype)->name);
    if (c.op >= 0) s += std::string(", ") + op_name(c.op);
    if (c.root >= 0) s += format(", root %d", c.root);
    return s + ")";
}

struct alignas(64) Peer {          // one per rank, on a cache line of its own
    std::atomic<uint64_t> arrived;  // the last barrier the rank reached
    std::atomic<int32_t> pid;       // 0 until the rank has joined
    std::atomic<int32_t> left;      // 1 once it has destroyed its communicator
    Call call;                      // its current collective; read by the others after a barrier
};

enum class Failure : uint32_t { none, aborted, gone, timed_out, disagreed, refused };

struct Header {
    std::atomic<uint64_t> ready;    // the id's token, stored once the creator has set the segment up
    int32_t nranks;
    std::atomic<uint32_t> wake;     // futex word: bumped by every arrival and every failure
    std::atomic<int32_t> sleepers;  // ranks asleep on `wake`
    std::atomic<uint64_t> failure;  // the first failure: Failure << 32 | the rank it names
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free &&
                  sizeof(std::atomic<uint32_t>) == sizeof(uint32_t),
              "the segment's atomics must work across processes, and `wake` must be a futex word");

struct Layout {
    size_t peers, slots, result, bytes;
    explicit Layout(int nranks) {
        auto round_up = [](size_t n, size_t to) { return (n + to - 1) / to * to; };
        peers = round_up(sizeof(Header), alignof(Peer));
        slots = round_up(peers + (size_t)nranks * sizeof(Peer), 4096);
        result = slots + (size_t)nranks * SLOT_BYTES;
        bytes = result + SLOT_BYTES;
    }
};

inline void futex_wait(std::atomic<uint32_t>& word, uint32_t seen, double seconds) {
    seconds = std::max(seconds, 0.0);
    timespec timeout{(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, seen, &timeout, nullptr, 0);
}
inline void futex_wake_all(std::atomic<uint32_t>& word) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}
inline void pause_briefly() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

// ----------------------------------------------------------------------------
// One rank's view of a communicator

class Communicator {
  public:
    Communicator(int rank, int nranks, int device) : rank_(rank), nranks_(nranks), device_(device), layout_(nranks) {}
    ~Communicator() {
        stop_joining();
        if (base_) munmap(base_, layout_.bytes);
        if (fd_ >= 0) close(fd_);  // drops this rank's lock: the others now see it gone
    }
    Communicator(const Communicator&) = delete;
    Communicator& operator=(const Communicator&) = delete;

    int rank() const { return rank_; }
    int nranks() const { return nranks_; }
    int device() const { return device_; }
    ncclResult_t error() const {
        std::lock_guard<std::mutex> lock(state_mutex_);
        return error_;
    }
    bool blocking() const { return blocking_; }
    bool joining() const { return joining_.load(); }
    std::string where(const char* call) const { return format("%s (rank %d of %d)", call, rank_, nranks_); }

    // Fails a call: one line on stderr, and the communicator stays failed.
    ncclResult_t fail(const char* call, ncclResult_t code, const std::string& what) {
        {
            std::lock_guard<std::mutex> lock(state_mutex_);
            if (error_ == ncclSuccess) error_ = code, failure_ = what;
        }
        return report(code, where(call), what);
    }
    // Fails a call for the communicator's recorded failure; silently when it is this rank's
    // own ncclCommAbort, which ends its queued collectives (the caller knows why).
    ncclResult_t fail_for(const char* call, uint64_t failure) {
        if (Failure(failure >> 32) != Failure::aborted || (int)(uint32_t)failure != rank_)
            return fail(call, code_of(failure), explain(failure));
        std::lock_guard<std::mutex> lock(state_mutex_);
        if (error_ == ncclSuccess) error_ = code_of(failure), failure_ = explain(failure);
        return error_;
    }
    ncclResult_t abandon() {
        std::lock_guard<std::mutex> lock(state_mutex_);
        if (error_ == ncclSuccess) error_ = ncclRemoteError, failure_ = "ncclCommAbort or ncclCommDestroy ended its initialisation";
        return error_;
    }
    ncclResult_t refuse(const char* call) {
        std::lock_guard<std::mutex> lock(state_mutex_);
        return report(error_, where(call), "the communicator has failed: " + failure_);
    }

    // ncclCommInitRank: joins the segment the id names, and waits for every rank to join.
    ncclResult_t join(const Id& id) {
        const char* call = "ncclCommInitRank";
        ncclResult_t r = open_segment(id, now_s() + settings().nccl_timeout_s);
        if (r == ncclSuccess) r = take_rank();
        if (r == ncclSuccess) r = barrier(call);
        shm_unlink(id.shm_name);  // everyone has joined, or the communicator failed: either way no one comes now
        joined_ = r == ncclSuccess;
        return r;
    }
    // The non-blocking form (ncclConfig_t's blocking = 0): joins on a thread of its own, and
    // ncclCommGetAsyncError answers ncclInProgress until it is done. Its collectives answer
    // ncclInProgress too (NCCL allows it), so a caller must handle that code.
    void join_in_background(const Id& id) {
        blocking_ = false;
        joining_ = true;
        joiner_ = std::thread([this, id] {
            join(id);
            joining_ = false;
        });
    }
    // ncclCommAbort or ncclCommDestroy during a non-blocking join: it stops waiting (within
    // LIVENESS_PERIOD_S, when it next looks), without a message: the caller knows why.
    void stop_joining() {
        if (!joiner_.joinable()) return;
        abandoned_ = true;
        joiner_.join();
    }

    // Runs a collective whose arguments have been checked, in rounds of at most a slot.
    ncclResult_t run(const char* call, const Call& c, const char* send, char* recv) {
        if (ncclResult_t e = error()) return e;  // a collective queued before it failed, and said so
        if (uint64_t f = header().failure.load()) return fail_for(call, f);
        const size_t size = type_info(c.datatype)->bytes;
        // A reduce-scatter puts a piece of every rank's block in its slot.
        const size_t per_round = SLOT_BYTES / (c.kind == Kind::reduce_scatter ? nranks_ : 1) / size;
        const size_t block = c.count * size;  // bytes of one rank's block (all-gather, reduce-scatter)
        const ncclRedOp_t op = (ncclRedOp_t)c.op;
        std::vector<const char*> from(nranks_);
        peer(rank_).call = c;
        for (size_t first = 0; first < c.count; first += per_round) {
            const size_t n = std::min(per_round, c.count - first), at = first * size, bytes = n * size;
            // Phase 1: each rank fills its own slot.
            switch (c.kind) {
                case Kind::all_reduce:
                case Kind::reduce:
                case Kind::all_gather: memcpy(slot(rank_), send + at, bytes); break;
                case Kind::broadcast:
                    if (rank_ == c.root) {
                        memcpy(slot(rank_), send + at, bytes);
                        if (recv != send) memcpy(recv + at, send + at, bytes);
                    }
                    break;
                case Kind::reduce_scatter:
                    for (int b = 0; b < nranks_; b++) memcpy(slot(rank_) + b * per_round * size, send + b * block + at, bytes);
                    break;
            }
            if (ncclResult_t r = barrier(call)) return r;
            if (first == 0 && !agreed(c)) {
                record(Failure::disagreed, rank_);
                return fail(call, ncclInvalidUsage, disagreement());
            }
            // Phase 2: ranks read the slots; each writes only its own share of the result area.
            switch (c.kind) {
                case Kind::all_reduce:
                case Kind::reduce: {
                    const size_t lo = n * rank_ / nranks_, hi = n * (rank_ + 1) / nranks_;
                    for (int r = 0; r < nranks_; r++) from[r] = slot(r) + lo * size;
                    reduce(result() + lo * size, from.data(), nranks_, hi - lo, c.datatype, op);
                    break;
                }
                case Kind::broadcast:
                    if (rank_ != c.root) memcpy(recv + at, slot(c.root), bytes);
                    break;
                case Kind::all_gather:
                    for (int r = 0; r < nranks_; r++) memcpy(recv + r * block + at, slot(r), bytes);
                    break;
                case Kind::reduce_scatter:
                    for (int r = 0; r < nranks_; r++) from[r] = slot(r) + rank_ * per_round * size;
                    reduce(recv + at, from.data(), nranks_, n, c.datatype, op);
                    break;
            }
            if (ncclResult_t r = barrier(call)) return r;
            // The result is read in the next phase 1 (of this call or the next), while no one writes it.
            if (c.kind == Kind::all_reduce || (c.kind == Kind::reduce && rank_ == c.root))
                memcpy(recv + at, result(), bytes);
        }
        return ncclSuccess;
    }

    // ncclCommGetAsyncError: this rank's failure, or one another rank recorded.
    ncclResult_t async_error() {
        if (joining_) return ncclInProgress;
        if (!joined_) return error();
        uint64_t f = header().failure.load();
        std::lock_guard<std::mutex> lock(state_mutex_);
        if (error_ == ncclSuccess && f) error_ = code_of(f), failure_ = explain(f);
        return error_;
    }

    // ncclCommAbort: fails the other ranks, and this rank's queued collectives, at once.
    void abort_all() {
        if (joined_) record(Failure::aborted, rank_);
    }
    // ncclCommDestroy and ncclCommAbort, once the stream's work is done; the destructor then
    // lets go of the segment.
    void leave() {
        if (joined_) peer(rank_).left.store(1);
    }

  private:
    Header& header() const { return *reinterpret_cast<Header*>(base_); }
    Peer& peer(int r) const { return reinterpret_cast<Peer*>(base_ + layout_.peers)[r]; }
    char* slot(int r) const { return base_ + layout_.slots + (size_t)r * SLOT_BYTES; }
    char* result() const { return base_ + layout_.result; }

    ncclResult_t open_segment(const Id& id, double deadline) {
        const char* call = "ncclCommInitRank";
        bool created = false;
        while (fd_ < 0) {  // the first rank to arrive creates the segment, the others open it
            fd_ = shm_open(id.shm_name, O_RDWR | O_CREAT | O_EXCL, 0600);
            if (fd_ >= 0) {
                created = true;
            } else if (errno == EEXIST) {
                fd_ = shm_open(id.shm_name, O_RDWR, 0);  // ENOENT: it was unlinked in between; try again
                if (fd_ < 0 && errno != ENOENT)
                    return fail(call, ncclSystemError, format("shm_open(%s): %s", id.shm_name, strerror(errno)));
            } else {
                return fail(call, ncclSystemError, format("shm_open(%s): %s", id.shm_name, strerror(errno)));
            }
        }
        if (created) {
            // Reserving the memory now makes a full /dev/shm an error here, not a SIGBUS later.
            if (int e = posix_fallocate(fd_, 0, (off_t)layout_.bytes)) {
                shm_unlink(id.shm_name);
                return fail(call, ncclSystemError,
                            format("cannot reserve %zu bytes in /dev/shm: %s", layout_.bytes, strerror(e)));
            }
            if (ncclResult_t r = map(call)) return r;
            Header* h = new (base_) Header();
            h->nranks = nranks_;
            for (int r = 0; r < nranks_; r++) new (&peer(r)) Peer();
            h->ready.store(id.token);
            return ncclSuccess;
        }
        // The creator may still be setting it up: wait for its header page to exist (touching
        // it sooner would fault), then for its token. Only the header is touched until the
        // ranks are known to agree on nranks.
        for (;;) {
            struct stat st;
            if (fstat(fd_, &st) != 0) return fail(call, ncclSystemError, format("fstat: %s", strerror(errno)));
            if (st.st_size >= (off_t)sizeof(Header)) {
                if (!base_)
                    if (ncclResult_t r = map(call)) return r;
                const uint64_t ready = header().ready.load();
                if (ready == id.token) break;
                if (ready != 0) return fail(call, ncclInvalidUsage, format("%s belongs to another communicator", id.shm_name));
            }
            if (st.st_nlink == 0)
                return fail(call, ncclRemoteError, "the rank that created the shared segment failed");
            if (abandoned_) return abandon();
            if (now_s() > deadline)
                return fail(call, ncclRemoteError, "the rank that created the shared segment did not set it up in time");
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        if (header().nranks != nranks_) {
            record(Failure::refused, rank_);
            return fail(call, ncclInvalidUsage, format("this rank was given nranks %d, the rank that created the "
                                                       "communicator %d", nranks_, header().nranks));
        }
        return ncclSuccess;
    }
    ncclResult_t map(const char* call) {
        void* p = mmap(nullptr, layout_.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
        if (p == MAP_FAILED)
            return fail(call, ncclSystemError, format("mmap of %zu bytes: %s", layout_.bytes, strerror(errno)));
        base_ = (char*)p;
        return ncclSuccess;
    }

    // Takes this rank's lock (the others' proof that it lives) and records its pid.
    ncclResult_t take_rank() {
        const char* call = "ncclCommInitRank";
        struct flock lock = byte_lock(rank_);
        if (fcntl(fd_, F_OFD_SETLK, &lock) != 0) {
            if (errno != EAGAIN && errno != EACCES) return fail(call, ncclSystemError, format("fcntl: %s", strerror(errno)));
            record(Failure::refused, rank_);
            return fail(call, ncclInvalidUsage, format("rank %d has already joined (pid %d)", rank_, peer(rank_).pid.load()));
        }
        if (int pid = peer(rank_).pid.load()) {  // a crashed rank restarted with its old id
            record(Failure::refused, rank_);
            return fail(call, ncclInvalidUsage, format("rank %d already joined this communicator as pid %d, which "
                                                       "has exited: an id makes one communicator", rank_, pid));
        }
        peer(rank_).pid.store(getpid());
        return ncclSuccess;
    }
    static struct flock byte_lock(int r) {
        struct flock lock = {};
        lock.l_type = F_WRLCK;
        lock.l_whence = SEEK_SET;
        lock.l_start = r;
        lock.l_len = 1;
        return lock;
    }
    bool alive(int r) const {
        struct flock probe = byte_lock(r);
        if (fcntl(fd_, F_OFD_GETLK, &probe) != 0) return true;  // cannot tell: the timeout still applies
        return probe.l_type != F_UNLCK;
    }

    // Arrives at the next barrier and waits for every rank to reach it.
    ncclResult_t barrier(const char* call) {
        Header& h = header();
        peer(rank_).arrived.store(++arrived_);
        h.wake.fetch_add(1);
        if (h.sleepers.load() > 0) futex_wake_all(h.wake);
        return await(call);
    }
    ncclResult_t await(const char* call) {
        Header& h = header();
        const double start = now_s(), deadline = start + settings().nccl_timeout_s;
        double next_check = start + LIVENESS_PERIOD_S;
        for (int spin = 0;; spin++) {
            // Read before the checks: an arrival after them changes it, and the futex then
            // returns at once instead of sleeping through it.
            const uint32_t seen = h.wake.load();
            if (uint64_t f = h.failure.load()) return fail_for(call, f);
            if (all_arrived()) return ncclSuccess;
            if (abandoned_) return abandon();
            if (spin < SPINS + YIELDS) {
                if (spin < SPINS) pause_briefly();
                else sched_yield();  // a peer waiting for this core's time runs now
                continue;
            }
            const double now = now_s();
            if (now >= next_check) {
                // While this barrier is incomplete no rank can have passed it, so any rank
                // that has joined and is gone, arrived here or not, failed.
                next_check = now + LIVENESS_PERIOD_S;
                for (int r = 0; r < nranks_; r++)
                    if (r != rank_ && peer(r).pid.load() != 0 && !alive(r)) {
                        record(Failure::gone, r);
                        return fail(call, ncclRemoteError, gone(r));
                    }
            }
            if (now >= deadline) {
                std::vector<int> missing = late();
                record(Failure::timed_out, rank_);
                return fail(call, ncclRemoteError, format("%s did not %s within %g s (CPU_CUDA_NCCL_TIMEOUT)",
                                                          rank_list(missing).c_str(), arrived_ == 1 ? "join" : "arrive",
                                                          settings().nccl_timeout_s));
            }
            h.sleepers.fetch_add(1);
            futex_wait(h.wake, seen, std::min(next_check, deadline) - now);
            h.sleepers.fetch_sub(1);
        }
    }
    bool all_arrived() const {
        for (int r = 0; r < nranks_; r++)
            if (peer(r).arrived.load() < arrived_) return false;
        return true;
    }
    std::vector<int> late() const {
        std::vector<int> ranks;
        for (int r = 0; r < nranks_; r++)
            if (peer(r).arrived.load() < arrived_) ranks.push_back(r);
        return ranks;
    }
    bool agreed(const Call& c) const {
        for (int r = 0; r < nranks_; r++)
            if (!(peer(r).call == c)) return false;
        return true;
    }
    std::string disagreement() const {
        std::string s = "the ranks called different collectives:";
        for (int r = 0; r < nranks_; r++) s += format(" rank %d %s%s", r, describe(peer(r).call).c_str(), r + 1 < nranks_ ? "," : "");
        return s;
    }
    std::string gone(int r) const {
        return format("rank %d (pid %d) %s", r, peer(r).pid.load(),
                      peer(r).left.load() ? "destroyed its communicator" : "exited or was killed");
    }

    // Records the communicator's first failure and wakes every rank to see it.
    void record(Failure kind, int who) {
        Header& h = header();
        uint64_t none = 0;
        h.failure.compare_exchange_strong(none, (uint64_t)kind << 32 | (uint32_t)who);
        h.wake.fetch_add(1);
        futex_wake_all(h.wake);
    }
    static ncclResult_t code_of(uint64_t failure) {
        return Failure(failure >> 32) == Failure::disagreed ? ncclInvalidUsage : ncclRemoteError;
    }
    std::string explain(uint64_t failure) const {
        const int who = (int)(uint32_t)failure;
        switch (Failure(failure >> 32)) {
            case Failure::aborted: return format("rank %d called ncclCommAbort", who);
            case Failure::gone: return gone(who);
            case Failure::timed_out: {
                std::vector<int> missing = late();
                missing.erase(std::remove(missing.begin(), missing.end(), who), missing.end());
                return format("rank %d gave up after %g s (CPU_CUDA_NCCL_TIMEOUT) waiting for %s", who,
                              settings().nccl_timeout_s, missing.empty() ? "its peers" : rank_list(missing).c_str());
            }
            case Failure::disagreed: return disagreement();
            case Failure::refused: return format("rank %d could not join (see its own message)", who);
            case Failure::none: break;
        }
        return "?";
    }

    int rank_, nranks_, device_;
    Layout layout_;
    int fd_ = -1;
    char* base_ = nullptr;
    uint64_t arrived_ = 0;             // barriers this rank has reached
    mutable std::mutex state_mutex_;    // error_ and failure_: the stream's worker fails calls too
    ncclResult_t error_ = ncclSuccess;  // the first failure, for good (NCCL's semantics)
    std::string failure_;
    bool joined_ = false;               // join() succeeded: the segment is this communicator's
    bool blocking_ = true;
    std::atomic<bool> joining_{false}, abandoned_{false};  // a non-blocking join under way; told to stop
    std::thread joiner_;
};

}  // namespace nccl
}  // namespace cpu_cuda

// nccl.h leaves the communicator opaque: this runtime's is one rank's view.
struct ncclComm : cpu_cuda::nccl::Communicator {
    using Communicator::Communicator;
};

namespace cpu_cuda {
namespace nccl {

// Communicators of this process that are not destroyed: a handle is checked before use.
inline std::mutex& comms_mutex() {
    static std::mutex m;
    return m;
}
inline std::set<const ncclComm*>& live_comms() {
    static std::set<const ncclComm*> s;
    return s;
}
inline ncclResult_t usable(const ncclComm* comm, const char* call) {
    if (!comm) return report(ncclInvalidArgument, call, "comm is NULL");
    std::lock_guard<std::mutex> lock(comms_mutex());
    if (!live_comms().count(comm))
        return report(ncclInvalidArgument, call, format("comm %p is not a live communicator (destroyed?)", (const void*)comm));
    return ncclSuccess;
}

// ncclCommDestroy and ncclCommAbort; `abort` also makes the other ranks fail.
inline ncclResult_t leave(ncclComm* comm, bool abort, const char* call) {
    if (!comm) return ncclSuccess;  // as in NCCL
    if (ncclResult_t r = usable(comm, call)) return r;
    {
        std::lock_guard<std::mutex> lock(comms_mutex());
        live_comms().erase(comm);
    }
    comm->stop_joining();
    if (abort) comm->abort_all();
    settle();  // collectives still queued on a stream finish (or fail, aborted) first
    comm->leave();
    delete comm;
    return ncclSuccess;
}

// ncclCommCount, ncclCommUserRank, ncclCommCuDevice: one of the communicator's numbers.
template <class Get>
ncclResult_t query(const ncclComm* comm, int* out, const char* call, Get get) {
    if (ncclResult_t r = usable(comm, call)) return r;
    if (!out) return report(ncclInvalidArgument, call, "the output pointer is NULL");
    *out = get(*comm);
    return ncclSuccess;
}

inline thread_local int group_depth = 0;

// Checks a collective's arguments as NCCL documents them, then runs it.
inline ncclResult_t collective(const char* call, const Call& c, const void* sendbuff, void* recvbuff, ncclComm* comm,
                               cudaStream_t stream) {
    if (ncclResult_t r = usable(comm, call)) return r;
    const std::string where = comm->where(call);
    const int rank = comm->rank(), nranks = comm->nranks();
    const TypeInfo* type = type_info(c.datatype);
    if (!type) return report(ncclInvalidArgument, where, format("datatype %d is not an ncclDataType_t", (int)c.datatype));
    if (!type->supported) return report(ncclInvalidArgument, where, format("%s is not supported on the CPU", type->name));
    const bool reduces = c.kind == Kind::all_reduce || c.kind == Kind::reduce || c.kind == Kind::reduce_scatter;
    if (reduces && (c.op < 0 || c.op >= ncclNumOps))
        return report(ncclInvalidArgument, where, format("op %d is not ncclSum, ncclProd, ncclMax, ncclMin or ncclAvg", c.op));
    const bool rooted = c.kind == Kind::broadcast || c.kind == Kind::reduce;
    if (rooted && (c.root < 0 || c.root >= nranks))
        return report(ncclInvalidArgument, where, format("root %d is not a rank (there are %d)", c.root, nranks));
    if (!valid_stream(stream)) return report(ncclInvalidArgument, where, "stream is not a live cudaStream_t");
    if (c.count > SIZE_MAX / type->bytes / (size_t)nranks)
        return report(ncclInvalidArgument, where, format("count %llu is too large", (unsigned long long)c.count));
    if (comm->joining())
        return report(ncclInvalidUsage, where, "the communicator is still being initialised: wait until "
                                               "ncclCommGetAsyncError no longer answers ncclInProgress");
    if (comm->error()) return comm->refuse(call);
    if (c.count == 0) return ncclSuccess;  // as in NCCL: nothing moves, no peer is involved

    // Sizes, and NCCL's in-place forms: sendbuff sits at send_at bytes into recvbuff, or
    // recvbuff at recv_at bytes into sendbuff. Non-roots never touch Broadcast's sendbuff
    // or Reduce's recvbuff.
    const size_t bytes = c.count * type->bytes;
    const size_t send_bytes = c.kind == Kind::reduce_scatter ? bytes * nranks : bytes;
    const size_t recv_bytes = c.kind == Kind::all_gather ? bytes * nranks : bytes;
    const size_t send_at = c.kind == Kind::all_gather ? bytes * rank : 0;
    const size_t recv_at = c.kind == Kind::reduce_scatter ? bytes * rank : 0;
    const bool send_used = c.kind != Kind::broadcast || rank == c.root;
    const bool recv_used = c.kind != Kind::reduce || rank == c.root;
    if (send_used && !check_range(sendbuff, send_bytes, where.c_str(), "sendbuff")) {
        set_last_message(where + ": sendbuff is not device memory of the size the call needs");
        return ncclInvalidArgument;
    }
    if (recv_used && !check_range(recvbuff, recv_bytes, where.c_str(), "recvbuff")) {
        set_last_message(where + ": recvbuff is not device memory of the size the call needs");
        return ncclInvalidArgument;
    }
    const uintptr_t s = (uintptr_t)sendbuff, r = (uintptr_t)recvbuff;
    if (send_used && recv_used && s < r + recv_bytes && r < s + send_bytes && s + recv_at != r + send_at) {
        const char* form = c.kind == Kind::all_gather       ? "sendbuff == recvbuff + rank * sendcount"
                           : c.kind == Kind::reduce_scatter ? "recvbuff == sendbuff + rank * recvcount"
                                                            : "sendbuff == recvbuff";
        return report(ncclInvalidArgument, where,
                      format("sendbuff %p and recvbuff %p overlap without being in place (%s)", sendbuff, recvbuff, form));
    }
    if (capturing(stream))  // (NCCL records into graphs on a GPU; not here)
        return report(ncclInvalidUsage, where, "a collective on a capturing stream is not recorded into graphs on the CPU runtime");
    // The collective runs on the stream's worker, after the stream's earlier work; a failure
    // then shows in ncclCommGetAsyncError, as on a GPU.
    stream_queue(stream).enqueue([=] {
        DeviceAccess access;
        comm->run(call, c, (const char*)sendbuff, (char*)recvbuff);
    });
    return comm->blocking() ? ncclSuccess : ncclInProgress;
}

}  // namespace nccl
}  // namespace cpu_cuda

// ----------------------------------------------------------------------------
// The API

inline ncclResult_t ncclGetVersion(int* version) {
    if (!version) return cpu_cuda::nccl::report(ncclInvalidArgument, "ncclGetVersion", "version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

inline const char* ncclGetErrorString(ncclResult_t result) {
    switch (result) {  // NCCL's own wording
        case ncclSuccess: return "no error";
        case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
        case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
        case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
        case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
        case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
        case ncclRemoteError: return "remote process exited or there was a network error";
        case ncclInProgress: return "NCCL operation in progress";
        default: return "unknown result code";
    }
}
inline const char* ncclGetLastError(ncclComm_t) {
    using namespace cpu_cuda::nccl;
    static thread_local std::string copy;  // valid until this thread's next call
    std::lock_guard<std::mutex> lock(message_mutex());
    copy = last_message_text();
    return copy.c_str();
}

inline ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
    using namespace cpu_cuda::nccl;
    if (!uniqueId) return report(ncclInvalidArgument, "ncclGetUniqueId", "uniqueId is NULL");
    Id id = {};
    memcpy(id.magic, ID_MAGIC, sizeof id.magic);
    if (getrandom(&id.token, sizeof id.token, 0) != (ssize_t)sizeof id.token)
        return report(ncclSystemError, "ncclGetUniqueId", format("getrandom: %s", strerror(errno)));
    id.token |= 1;  // 0 marks a segment that is not ready
    snprintf(id.shm_name, sizeof id.shm_name, "/cpu_cuda_nccl.%d.%016llx", (int)getpid(), (unsigned long long)id.token);
    gethostname(id.host, sizeof id.host - 1);
    memcpy(uniqueId, &id, sizeof id);
    return ncclSuccess;
}

namespace cpu_cuda {
namespace nccl {
inline ncclResult_t init_rank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, bool blocking) {
    const char* call = "ncclCommInitRank";
    if (!comm) return report(ncclInvalidArgument, call, "comm is NULL");
    *comm = nullptr;
    if (nranks < 1) return report(ncclInvalidArgument, call, format("nranks %d is not positive", nranks));
    if (rank < 0 || rank >= nranks) return report(ncclInvalidArgument, call, format("rank %d is not in [0, %d)", rank, nranks));
    Id id;
    memcpy(&id, &commId, sizeof id);
    if (memcmp(id.magic, ID_MAGIC, sizeof id.magic) != 0)
        return report(ncclInvalidArgument, call, "commId was not made by ncclGetUniqueId");
    char host[sizeof id.host] = {};
    gethostname(host, sizeof host - 1);
    if (strcmp(host, id.host) != 0)
        return report(ncclInvalidUsage, call, format("the id was made on host '%s' and this is '%s': the CPU runtime "
                                                     "connects the ranks of one machine only", id.host, host));
    auto c = std::make_unique<ncclComm>(rank, nranks, cpu_cuda::current_device);
    if (blocking) {
        if (ncclResult_t r = c->join(id)) return r;
    } else {
        c->join_in_background(id);  // the handle is live at once: ncclCommGetAsyncError, ncclCommAbort
    }
    std::lock_guard<std::mutex> lock(comms_mutex());
    live_comms().insert(c.get());
    *comm = c.release();
    return blocking ? ncclSuccess : ncclInProgress;
}
}  // namespace nccl
}  // namespace cpu_cuda

inline ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
    return cpu_cuda::nccl::init_rank(comm, nranks, commId, rank, true);
}

// config->blocking = 0 makes a non-blocking communicator (NCCL_CONFIG_UNDEF_INT, the
// initializer's, means blocking, NCCL's default); its other fields mean nothing here.
inline ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                           ncclConfig_t* config) {
    if (config && config->magic != 0xcafebeef)
        return cpu_cuda::nccl::report(ncclInvalidArgument, "ncclCommInitRankConfig",
                                      "config was not initialised with NCCL_CONFIG_INITIALIZER");
    if (config && config->blocking != 0 && config->blocking != 1 && config->blocking != NCCL_CONFIG_UNDEF_INT)
        return cpu_cuda::nccl::report(ncclInvalidArgument, "ncclCommInitRankConfig",
                                      cpu_cuda::nccl::format("config->blocking is %d, not 0 or 1", config->blocking));
    return cpu_cuda::nccl::init_rank(comm, nranks, commId, rank, !config || config->blocking != 0);
}

inline ncclResult_t ncclCommDestroy(ncclComm_t comm) { return cpu_cuda::nccl::leave(comm, false, "ncclCommDestroy"); }
inline ncclResult_t ncclCommAbort(ncclComm_t comm) { return cpu_cuda::nccl::leave(comm, true, "ncclCommAbort"); }

inline ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    if (ncclResult_t r = cpu_cuda::nccl::usable(comm, "ncclCommFinalize")) return r;
    cpu_cuda::settle();  // the collectives still queued on streams
    return comm->async_error();
}

inline ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
    using namespace cpu_cuda::nccl;
    if (ncclResult_t r = usable(comm, "ncclCommGetAsyncError")) return r;
    if (!asyncError) return report(ncclInvalidArgument, "ncclCommGetAsyncError", "asyncError is NULL");
    *asyncError = comm->async_error();
    return ncclSuccess;
}

inline ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
    return cpu_cuda::nccl::query(comm, count, "ncclCommCount", [](const ncclComm& c) { return c.nranks(); });
}
inline ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
    return cpu_cuda::nccl::query(comm, rank, "ncclCommUserRank", [](const ncclComm& c) { return c.rank(); });
}
inline ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
    return cpu_cuda::nccl::query(comm, device, "ncclCommCuDevice", [](const ncclComm& c) { return c.device(); });
}

// ---- collectives (kind, datatype, op or -1, root or -1, count)
inline ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                  ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    using namespace cpu_cuda::nccl;
    return collective("ncclAllReduce", {Kind::all_reduce, datatype, (int32_t)op, -1, count}, sendbuff, recvbuff,
                      comm, stream);
}
inline ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                  int root, ncclComm_t comm, cudaStream_t stream) {
    using namespace cpu_cuda::nccl;
    return collective("ncclBroadcast", {Kind::broadcast, datatype, -1, root, count}, sendbuff, recvbuff, comm, stream);
}
inline ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                              cudaStream_t stream) {
    using namespace cpu_cuda::nccl;
    return collective("ncclBcast", {Kind::broadcast, datatype, -1, root, count}, buff, buff, comm, stream);
}
inline ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                               ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
    using namespace cpu_cuda::nccl;
    return collective("ncclReduce", {Kind::reduce, datatype, (int32_t)op, root, count}, sendbuff, recvbuff, comm,
                      stream);
}
inline ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                  ncclComm_t comm, cudaStream_t stream) {
    using namespace cpu_cuda::nccl;
    return collective("ncclAllGather", {Kind::all_gather, datatype, -1, -1, sendcount}, sendbuff, recvbuff, comm,
                      stream);
}
inline ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                      ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    using namespace cpu_cuda::nccl;
    return collective("ncclReduceScatter", {Kind::reduce_scatter, datatype, (int32_t)op, -1, recvcount}, sendbuff,
                      recvbuff, comm, stream);
}

// Groups only nest: their calls have already run (see the top of this file).
inline ncclResult_t ncclGroupStart() {
    cpu_cuda::nccl::group_depth++;
    return ncclSuccess;
}
inline ncclResult_t ncclGroupEnd() {
    using namespace cpu_cuda::nccl;
    if (group_depth == 0) return report(ncclInvalidUsage, "ncclGroupEnd", "no ncclGroupStart to end");
    group_depth--;
    return ncclSuccess;
}
