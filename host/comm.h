// Communication between data-parallel replicas on the host.
//
// A Comm is created once in main() and passed to whoever needs it; model code never sees
// it. It has a rank, a world size and a few collectives. Without a backend it is a single
// process and every collective is a no-op. Backends plug in behind one small interface:
// MPI (host/comm_mpi.h, the project's one MPI #ifdef), NCCL in the GPU trainer (gpu/replicas.cuh).
// A collective that hangs is ended by the watchdog (host/watchdog.h).
//
// Two backends can be set, because the GPU trainer's buffers are not in host memory:
//   backend  collectives on host memory: losses, agreement checks, start-up (MPI, or NCCL
//            staged through the GPU for jobs launched without MPI);
//   buffers  the gradient sync on the trainer's own buffer (NCCL on GPU memory); when it
//            is null, the gradient buffer is in host memory and `backend` sums it.
#pragma once
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "error.h"
#include "watchdog.h"

// ZeRO stage 1's layout: n parameters padded so that R replicas get equal shards, each a whole
// number of the GPU's 16-byte packs of bf16 (8 values): the padding is never a parameter.
constexpr size_t ZERO_SHARD_ALIGN = 8;
inline size_t zero_padded(size_t n, int R) {
    const size_t unit = ZERO_SHARD_ALIGN * (size_t)R;
    return (n + unit - 1) / unit * unit;
}
// This replica's shard [begin, begin + size) of a buffer of n parameters over R replicas;
// without ZeRO (sharded false) the whole of it.
struct Shard {
    size_t begin = 0, size = 0, padded = 0;  // padded: the buffer's length, a multiple of R
    static Shard of(size_t n, int rank, int R, bool sharded) {
        if (!sharded) return {0, n, n};
        size_t padded = zero_padded(n, R), size = padded / R;
        return {(size_t)rank * size, size, padded};
    }
    // The part of [lo, hi) that falls in this shard, as offsets into the whole buffer.
    std::pair<size_t, size_t> clip(size_t lo, size_t hi) const {
        return {std::max(lo, begin), std::min(hi, begin + size)};
    }
};

// A contiguous piece [begin, begin + count) of the gradient buffer, in floats.
struct GradRange {
    size_t begin = 0, count = 0;
};

// What a backend must provide: collectives over host memory, across all ranks.
struct Collectives {
    virtual ~Collectives() = default;
    virtual void allreduce_sum(float* data, size_t n) = 0;   // in place
    virtual void allreduce_sum(double* data, size_t n) = 0;  // in place
    virtual void broadcast(void* data, size_t bytes) = 0;    // from rank 0
    virtual void allgather(const void* mine, size_t bytes, void* all) = 0;  // all: world × bytes
    // ZeRO stage 1's pair, in place (n floats, or bytes, a multiple of the world size; a shard
    // is 1/world of them): the reduce-scatter leaves the sum over the ranks of this rank's
    // shard at its place, data + rank·shard (the rest of data is undefined); the all-gather
    // copies each rank's shard to every rank.
    virtual void reduce_scatter_sum(float* data, size_t n) = 0;
    virtual void allgather_shards(void* data, size_t bytes) = 0;
    virtual void barrier() = 0;
    // The gradient sync in buckets (host/gradsync.h), overlapped with the backward: start_sum
    // starts the sum over the ranks of `ranges` of data and returns without waiting for it
    // (with ZeRO, `shard` cut: each piece is reduced only to the rank whose shard holds it, a
    // reduce-scatter that follows the buckets); wait_sums waits for every one started. Every
    // rank starts the same buckets in the same order. bf16: the values travel and are summed
    // in bf16 (the GPU's NCCL only), and come back as float32.
    virtual void start_sum(float* data, const std::vector<GradRange>& ranges, const Shard& shard, bool bf16) {
        (void)data, (void)ranges, (void)shard, (void)bf16;
        throw Error(strf("the %s backend cannot overlap the gradient sync: use --grad-sync end", name()));
    }
    virtual void wait_sums() {}
    [[noreturn]] virtual void abort(int code) = 0;
    virtual void finalize() {}
    virtual const char* name() const = 0;
    // The watchdog's settings, for backends that have one (a backend without ignores them).
    virtual void set_watchdog(const WatchdogSettings&) {}
};

// Thrown on the ranks that stop for a problem another rank reports (the agreement check):
// they end without a word, so that the job prints one line, not one per rank.
struct ReportedByAnotherRank : Error {
    using Error::Error;
};

struct Comm {
    int rank = 0;        // this replica, 0..world-1
    int world = 1;       // number of replicas R
    int local_rank = 0;  // rank among the replicas on this host (selects the GPU)
    std::string host;
    std::shared_ptr<Collectives> backend;  // host memory; null: a single process
    std::shared_ptr<Collectives> buffers;  // the trainer's memory (GPU); null: same as backend
    std::shared_ptr<RollCall> roll_call;   // how a stuck collective learns who is missing (MPI); may be null
    // The training run's state of the step, which the run owns and lends here (host/run.h,
    // TrainingRun); null outside a run (a test that calls a step itself): nothing asks to stop,
    // nothing is timed.
    //   stop     a request to stop the run: this process's (a flag a signal handler sets,
    //            host/stop.h) and the replicas' agreement on it, learnt in the step's scalar
    //            all-reduce (step_means) or by agree_stop;
    //   sync_ms  where the step's gradient sync (and ZeRO's all-gather of the weights) adds its
    //            milliseconds: the log's sync_ms, to set beside the planner's communication time
    //            (host/cost.h). Wall time of the calls; on the GPU that includes waiting for the
    //            backward's kernels still queued before the sync. With --grad-sync overlap it
    //            counts the buckets' starts during the backward and the wait at the end: the
    //            time the sync was not hidden.
    struct StopRequest {
        const volatile std::sig_atomic_t* local = nullptr;  // null: nothing asks this process to stop
        bool agreed = false;                                // some replica was asked, as of the last step
    };
    StopRequest* stop = nullptr;
    double* sync_ms = nullptr;

    // A single process, or MPI when built with it and launched by mpirun / srun with PMI.
    static Comm init(int* argc, char*** argv);

    const char* backend_name() const { return backend ? backend->name() : "single process"; }

    void set_watchdog(const WatchdogSettings& settings) const {
        if (backend) backend->set_watchdog(settings);
        if (buffers && buffers != backend) buffers->set_watchdog(settings);
    }

    // Sum of the gradient buffer over all replicas, in place, where the trainer keeps it
    // (host memory for train, GPU memory for train_gpt). Both trainers' gradient sync,
    // once per optimizer step: each replica's gradient is already scaled by 1/(B·T·A·R),
    // so the sum is the mean over the global batch.
    void allreduce_sum(float* data, size_t n) const {
        if (Collectives* c = buffers ? buffers.get() : backend.get()) timed([&] { c->allreduce_sum(data, n); });
    }
    // ZeRO stage 1's gradient sync, once per optimizer step, where the trainer keeps the
    // buffer: the same sum as allreduce_sum, but each replica receives only its shard,
    // data[rank·n/world, (rank+1)·n/world); n must be a multiple of world (zero_padded()).
    void reduce_scatter_sum(float* data, size_t n) const {
        if (Collectives* c = buffers ? buffers.get() : backend.get()) timed([&] { c->reduce_scatter_sum(data, n); });
    }
    // The bucketed gradient sync (host/gradsync.h): start one bucket's sum, or wait for all
    // those started; a single process has nothing to sum.
    void start_sum(float* data, const std::vector<GradRange>& ranges, const Shard& shard, bool bf16) const {
        if (Collectives* c = buffers ? buffers.get() : backend.get())
            timed([&] { c->start_sum(data, ranges, shard, bf16); });
    }
    void wait_sums() const {
        if (Collectives* c = buffers ? buffers.get() : backend.get()) timed([&] { c->wait_sums(); });
    }
    // The reverse, after each replica has updated its shard: every replica's shard of the
    // n values at data (float32 weights, or the GPU's bf16 ones) copied to every replica, in place.
    template <class T>
    void allgather(T* data, size_t n) const {
        if (Collectives* c = buffers ? buffers.get() : backend.get())
            timed([&] { c->allgather_shards(data, n * sizeof(T)); });
    }
    // Sum of one number over all replicas (loss sums, counts), in host memory.
    double allreduce_sum(double x) const {
        if (backend) backend->allreduce_sum(&x, 1);
        return x;
    }
    // The step's one scalar all-reduce: the mean over the replicas of n numbers (the training
    // loss first) and, in the same message, whether any of them has been asked to stop (a
    // signal reaches one process only); every replica reads the same sum, so all stop after
    // the same step (stop->agreed).
    template <size_t N>
    void step_means(double (&x)[N]) const {
        double v[N + 1];
        std::copy(x, x + N, v);
        v[N] = stop_asked_here() ? 1.0 : 0.0;
        if (backend) backend->allreduce_sum(v, N + 1);
        if (stop) stop->agreed = v[N] > 0;
        for (size_t i = 0; i < N; i++) x[i] = v[i] / world;
    }
    // Whether any replica has been asked to stop, outside a step (after an evaluation, which
    // can take longer than a step): sets stop->agreed, the same on every replica.
    void agree_stop() const {
        double v = stop_asked_here() ? 1.0 : 0.0;
        if (backend) backend->allreduce_sum(&v, 1);
        if (stop) stop->agreed = v > 0;
    }
    // Copies bytes from rank 0 to every rank.
    void broadcast(void* data, size_t bytes) const {
        if (backend) backend->broadcast(data, bytes);
    }
    // Every rank's value, indexed by rank.
    std::vector<uint64_t> allgather(uint64_t value) const {
        std::vector<uint64_t> all(world, value);
        if (backend) backend->allgather(&value, sizeof value, all.data());
        return all;
    }
    // Every rank's string, of any length: the lengths first, then the strings padded to the longest.
    std::vector<std::string> allgather(const std::string& s) const {
        std::vector<std::string> all(world, s);
        if (!backend) return all;
        std::vector<uint64_t> sizes = allgather((uint64_t)s.size());
        size_t longest = *std::max_element(sizes.begin(), sizes.end());
        std::vector<char> mine(longest, 0), buf(longest * (size_t)world);
        std::copy(s.begin(), s.end(), mine.begin());
        backend->allgather(mine.data(), longest, buf.data());
        for (int r = 0; r < world; r++) all[r].assign(&buf[longest * (size_t)r], sizes[r]);
        return all;
    }
    // Stops every rank when the ranks disagree on any of `fields` (name, value), e.g. an
    // option or the data: silent divergence or a hang would be worse. Rank 0 names the first
    // field that differs, with its value and the other rank's; the others stop quietly.
    void check_agree(const std::vector<std::pair<std::string, std::string>>& fields) const {
        if (world == 1) return;
        std::string mine;  // each value with its length first, so values may hold any byte
        for (const auto& f : fields) mine += std::to_string(f.second.size()) + ":" + f.second;
        std::vector<std::string> all = allgather(mine);
        for (int r = 1; r < world; r++) {
            if (all[r] == all[0]) continue;
            size_t pos0 = 0, pos = 0;
            for (const auto& f : fields) {
                std::string v0 = next_value(all[0], pos0), v = next_value(all[r], pos);
                if (v0 == v) continue;
                std::string msg = strf("replicas disagree on %s: rank 0 has %s, rank %d has %s (check that every rank "
                                       "got the same options and files)",
                                       f.first.c_str(), v0.c_str(), r, v.c_str());
                if (rank == 0) throw Error(msg);
                throw ReportedByAnotherRank(msg);
            }
        }
    }
    void barrier() const {
        if (backend) backend->barrier();
    }
    // After an error on one rank the others would wait forever in the next collective:
    // end the whole job instead.
    [[noreturn]] void abort_all(int code) const {
        if (backend && world > 1) backend->abort(code);
        exit(code);
    }
    void finalize() const {
        if (backend) backend->finalize();
    }

private:
    bool stop_asked_here() const { return stop && stop->local && *stop->local; }
    // Runs the sync call f, adding its wall time to *sync_ms (when a run lent one).
    template <class F>
    void timed(F&& f) const {
        auto t0 = std::chrono::steady_clock::now();
        f();
        if (sync_ms)
            *sync_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    // Reads "<length>:<value>" at pos and moves past it; empty at the end or on damage.
    static std::string next_value(const std::string& s, size_t& pos) {
        size_t colon = s.find(':', pos);
        if (colon == std::string::npos) return "";
        size_t n = strtoull(s.c_str() + pos, nullptr, 10);
        pos = std::min(s.size(), colon + 1 + n);
        return s.substr(colon + 1, n);
    }
};

// Slurm's task variables as a process started alone reads them (both trainers): a count or a
// rank that is not a whole number is no environment srun gives its tasks, and one line says so,
// exit 2 (SLURM_NTASKS=abc once trained alone without a note). Whether a number names this
// process's job is each trainer's own check (the GPU trainer's slurm_number, exit 1).
inline void check_slurm_task_variables() {
    for (const char* name : {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID"}) {
        const char* text = getenv(name);
        if (!text) continue;
        char* end = nullptr;
        errno = 0;
        strtoll(text, &end, 10);
        if (end == text || *end || errno)
            throw UsageError(strf("%s is '%s', not a whole number: not the environment srun gives its tasks; "
                                  "unset the SLURM_* variables to train alone",
                                  name, text));
    }
}

// The CPU trainer's replicas start through MPI only (mpirun, or srun with PMI on a build with
// MPI); it does not read Slurm's task variables. A process that finds them saying "one of
// several tasks" yet runs alone says so once: srun --ntasks N would otherwise start N
// separate trainings without a word.
inline void note_ignored_slurm_tasks() {
    check_slurm_task_variables();
    const char* ntasks = getenv("SLURM_STEP_NUM_TASKS") ? getenv("SLURM_STEP_NUM_TASKS") : getenv("SLURM_NTASKS");
    const char* procid = getenv("SLURM_PROCID");
    if (!ntasks || !procid || atoi(ntasks) <= 1) return;
    printf("note: Slurm's variables (SLURM_PROCID %s, SLURM_NTASKS %s) are ignored: this trainer starts its replicas "
           "through MPI (mpirun, or srun with PMI on a build with MPI), and this process runs alone\n",
           procid, ntasks);
    fflush(stdout);
}

inline std::string host_name() {
    char name[256] = "?";
    gethostname(name, sizeof name);
    return name;
}

#include "comm_mpi.h"  // Comm::init: MPI, or a single process
