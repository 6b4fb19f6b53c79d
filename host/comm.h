// Communication between data-parallel replicas on the host.
//
// A Comm is created once in main() and passed to whoever needs it; model code never sees
// it. It has a rank, a world size and a few collectives. Without a backend it is a single
// process and every collective is a no-op. Backends plug in behind one small interface:
// MPI here (the project's one MPI #ifdef), NCCL in the GPU trainer (train_gpt.cu).
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

// ---- the watchdog: a frozen replica ends the job instead of hanging it
//
// In a collective every rank waits until all have joined. One that never joins (stopped by
// SIGSTOP, deadlocked, on a node that died without closing its connections) would keep all
// the others waiting forever. A backend that can start its collectives without blocking
// (MPI's non-blocking collectives; NCCL's are asynchronous anyway) hands the waiting to a
// Watchdog. When a collective has not completed within the timeout, the watchdog holds a
// roll call over a side channel that needs no collective: it asks every rank, each rank
// that is waiting in a collective answers, and those that stay silent are the ones that
// did not arrive. It reports them as an Error, which main_with_errors() prints as one line
// before it ends the job. When several ranks time out together, the lowest one reports and
// the others stay quiet (unless it fails to end the job), so the job prints one line.

// The roll call's side channel, one per backend: small messages that must not block.
struct RollCall {
    struct Notice {
        enum Kind { REQUEST, REPLY } kind;
        int rank;             // the sender
        long long id;         // REQUEST: the requester's collective number; REPLY: the id it answers
        char waiting_in[64];  // the sender's collective, e.g. "all-reduce of 4,096 bytes (collective 12)"
    };
    virtual ~RollCall() = default;
    virtual void send(int to_rank, const Notice& notice) = 0;  // without blocking
    virtual std::vector<Notice> receive() = 0;                 // what has arrived, without blocking
};

struct WatchdogSettings {
    double timeout_s = 600;           // --comm-timeout; 0 waits forever
    std::vector<std::string> places;  // each rank's "host, pid N", for the report; may be empty
};

// Without a roll call (roll_call null) the watchdog still ends the job at the timeout, but
// cannot say which rank is missing.
class Watchdog {
public:
    Watchdog(int rank, int world, RollCall* roll_call) : rank_(rank), world_(world), roll_call_(roll_call) {}
    WatchdogSettings settings;

    // Waits for one collective: `done()` tests it (and drives its progress); `op` and
    // `bytes` describe it for the report. Returns when done() is true; throws Error when the
    // watchdog ends the job.
    template <class Done>
    void wait(const char* op, size_t bytes, Done&& done) {
        using Clock = std::chrono::steady_clock;
        auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
        const long long id = ++collectives_;
        const Clock::time_point start = Clock::now();
        Clock::time_point asked_at{}, next_look = start;
        bool asked = false, lower_rank_asked = false;
        std::vector<std::string> answers(world_);  // who answered this rank's roll call, and where they wait
        RollCall::Notice mine{RollCall::Notice::REPLY, rank_, id, {}};
        snprintf(mine.waiting_in, sizeof mine.waiting_in, "%s of %s bytes (collective %lld)", op,
                 with_commas((long long)bytes).c_str(), id);
        const double timeout = settings.timeout_s, grace = std::min(timeout, 2.0);
        while (!done()) {
            // past a second this is a wait for a straggler, not for bandwidth: stop spinning.
            // Before it, give the core away between tests: where ranks outnumber cores (hosts
            // sharing a machine), a spinning rank takes the time another needs to move bytes
            if (seconds_since(start) > 1.0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
            else std::this_thread::yield();
            if (timeout <= 0 || Clock::now() < next_look) continue;
            next_look = Clock::now() + std::chrono::milliseconds(10);
            if (!roll_call_) {
                if (seconds_since(start) > timeout)
                    throw Error(strf("the %s did not complete within --comm-timeout %g s (this backend cannot tell "
                                     "which rank did not arrive); ending the job",
                                     mine.waiting_in, timeout));
                continue;
            }
            for (const RollCall::Notice& n : roll_call_->receive()) {
                if (n.rank < 0 || n.rank >= world_) continue;
                if (n.kind == RollCall::Notice::REQUEST) {  // someone's roll call: say where this rank waits
                    RollCall::Notice reply = mine;
                    reply.id = n.id;
                    roll_call_->send(n.rank, reply);
                    lower_rank_asked = lower_rank_asked || n.rank < rank_;
                } else if (asked && n.id == id) {
                    answers[n.rank] = std::string(n.waiting_in, strnlen(n.waiting_in, sizeof n.waiting_in));
                }
            }
            if (!asked && seconds_since(start) > timeout) {  // time is up: ask every rank
                RollCall::Notice request = mine;
                request.kind = RollCall::Notice::REQUEST;
                for (int r = 0; r < world_; r++)
                    if (r != rank_) roll_call_->send(r, request);
                asked = true, asked_at = Clock::now();
            }
            if (asked && seconds_since(asked_at) > (lower_rank_asked ? 4 * grace : grace))
                throw Error(report(mine.waiting_in, answers));
        }
    }

private:
    std::string place(int r) const {
        return r < (int)settings.places.size() ? strf("rank %d (%s)", r, settings.places[r].c_str()) : strf("rank %d", r);
    }
    // "rank 1 (node7, pid 123) did not arrive at the all-reduce of ... within --comm-timeout 5 s ..."
    std::string report(const std::string& collective, const std::vector<std::string>& answers) const {
        std::string missing, elsewhere;
        int n_missing = 0;
        for (int r = 0; r < world_; r++) {
            if (r == rank_) continue;
            if (answers[r].empty()) missing += (n_missing++ ? ", " : "") + place(r);
            else if (answers[r] != collective && elsewhere.size() < 200)
                elsewhere += strf("; rank %d waits in the %s", r, answers[r].c_str());
        }
        std::string timeout = strf("--comm-timeout %g s", settings.timeout_s);
        if (n_missing == 0)
            return strf("the %s did not complete within %s, although every rank is waiting in a collective%s; "
                        "ending the job",
                        collective.c_str(), timeout.c_str(), elsewhere.c_str());
        return strf("%s did not arrive at the %s within %s (stopped, hung or dead?)%s; ending the job",
                    missing.c_str(), collective.c_str(), timeout.c_str(), elsewhere.c_str());
    }

    int rank_, world_;
    RollCall* roll_call_;
    long long collectives_ = 0;  // collectives waited for so far: the same count on every rank
};

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
    // A request to stop the run: this process's (a flag a signal handler sets, host/stop.h)
    // and the replicas' agreement on it, learnt in the step's scalar all-reduce.
    struct StopRequest {
        const volatile std::sig_atomic_t* local = nullptr;  // null: nothing asks this process to stop
        bool agreed = false;                                // some replica was asked, as of the last step
    };
    std::shared_ptr<StopRequest> stop = std::make_shared<StopRequest>();
    // Milliseconds spent in the step's gradient sync (and ZeRO's all-gather of the weights)
    // since the training loop last set it to 0: the log's sync_ms, to set beside the planner's
    // communication time (host/cost.h). Wall time of the calls; on the GPU that includes
    // waiting for the backward's kernels still queued before the sync. With --grad-sync overlap
    // it counts the buckets' starts during the backward and the wait at the end: the time the
    // sync was not hidden.
    std::shared_ptr<double> sync_ms = std::make_shared<double>(0);

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
        v[N] = stop->local && *stop->local ? 1.0 : 0.0;
        if (backend) backend->allreduce_sum(v, N + 1);
        stop->agreed = v[N] > 0;
        for (size_t i = 0; i < N; i++) x[i] = v[i] / world;
    }
    // Whether any replica has been asked to stop, outside a step (after an evaluation, which
    // can take longer than a step): sets stop->agreed, the same on every replica.
    void agree_stop() const {
        double v = stop->local && *stop->local ? 1.0 : 0.0;
        if (backend) backend->allreduce_sum(&v, 1);
        stop->agreed = v > 0;
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
    // Runs the sync call f, adding its wall time to *sync_ms.
    template <class F>
    void timed(F&& f) const {
        auto t0 = std::chrono::steady_clock::now();
        f();
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

// The CPU trainer's replicas start through MPI only (mpirun, or srun with PMI on a build with
// MPI); it does not read Slurm's task variables. A process that finds them saying "one of
// several tasks" yet runs alone says so once: srun --ntasks N would otherwise start N
// separate trainings without a word.
inline void note_ignored_slurm_tasks() {
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

#ifdef TRAIN_MPI
#include <mpi.h>

// Open MPI's launcher tells each process the job's size; a process that MPI starts alone
// although that variable names more (it was set by hand, or inherited from an mpirun this
// process was not started by) would train on its own without a word.
inline void check_launcher_world(int world) {
    const char* size = getenv("OMPI_COMM_WORLD_SIZE");
    if (size && atoi(size) > world)
        throw Error(strf("OMPI_COMM_WORLD_SIZE is %s, but MPI's job holds %d process%s: this one was not started "
                         "by mpirun (or by the mpirun of another MPI than the one it was built with); launch it with "
                         "mpirun -np %s, or unset the OMPI_* variables",
                         size, world, world == 1 ? "" : "es", size));
}

// The roll call over point-to-point messages on a communicator of its own, so that they
// never mix with anything else.
struct MpiRollCall : RollCall {
    MPI_Comm comm;
    std::vector<std::pair<MPI_Request, std::unique_ptr<Notice>>> sending;  // each buffer lives until sent
    MpiRollCall() { MPI_Comm_dup(MPI_COMM_WORLD, &comm); }
    void send(int to_rank, const Notice& notice) override {
        auto copy = std::make_unique<Notice>(notice);
        MPI_Request req;
        MPI_Isend(copy.get(), sizeof(Notice), MPI_BYTE, to_rank, 0, comm, &req);
        sending.emplace_back(req, std::move(copy));
    }
    std::vector<Notice> receive() override {
        std::vector<Notice> got;
        int flag = 1;
        while (flag) {
            MPI_Status st;
            MPI_Iprobe(MPI_ANY_SOURCE, 0, comm, &flag, &st);
            if (!flag) break;
            Notice n;
            MPI_Recv(&n, sizeof n, MPI_BYTE, st.MPI_SOURCE, 0, comm, MPI_STATUS_IGNORE);
            n.rank = st.MPI_SOURCE;  // trust MPI, not the bytes, for who sent it
            got.push_back(n);
        }
        // forget the sends that have completed (a frozen receiver may never take the others)
        sending.erase(std::remove_if(sending.begin(), sending.end(),
                                     [](auto& s) {
                                         int done = 0;
                                         MPI_Test(&s.first, &done, MPI_STATUS_IGNORE);
                                         return done != 0;
                                     }),
                      sending.end());
        return got;
    }
};

// Every collective is started without blocking and waited for by the watchdog.
struct MpiCollectives : Collectives {
    std::shared_ptr<RollCall> roll_call;
    int rank, world;
    Watchdog watchdog;
    MpiCollectives(int rank, int world, std::shared_ptr<RollCall> roll_call)
        : roll_call(roll_call), rank(rank), world(world), watchdog(rank, world, roll_call.get()) {}

    void wait(const char* op, size_t bytes, MPI_Request& req) {
        watchdog.wait(op, bytes, [&] {
            int done = 0;
            MPI_Test(&req, &done, MPI_STATUS_IGNORE);
            return done != 0;
        });
    }
    // The gradient sync, in slices of 2^21 floats (8 MiB), one after another: Open MPI's
    // non-blocking all-reduce switches to a slower algorithm for large messages (one of
    // 64 MB took twice as long as the blocking call), while 8 MiB slices matched or beat
    // the blocking call on 64 and 256 MB (2 and 4 ranks, 2-core machine).
    void allreduce_sum(float* data, size_t n) override {
        const size_t slice = (size_t)1 << 21;
        for (size_t off = 0; off < n; off += slice) {
            int count = (int)std::min(n - off, slice);
            MPI_Request req;
            MPI_Iallreduce(MPI_IN_PLACE, data + off, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
            wait("all-reduce", count * sizeof(float), req);
        }
    }
    // The bucketed sync: non-blocking collectives on pieces of at most 2^21 floats (the
    // slices above), all in flight at once; each start also tests those in flight, which is
    // what lets Open MPI move them on while the backward computes (it has no progress thread).
    std::vector<MPI_Request> in_flight;
    size_t in_flight_bytes = 0;
    const char* in_flight_op = "all-reduce";  // the watchdog's name for them
    void start_sum(float* data, const std::vector<GradRange>& ranges, const Shard& shard, bool bf16) override {
        if (bf16) throw Error("--grad-sync-dtype bf16 is the GPU trainer's (NCCL's bf16 sum); MPI sums float32");
        const size_t slice = (size_t)1 << 21;
        in_flight_op = shard.size != shard.padded ? "reduce-scatter" : "all-reduce";
        for (const GradRange& r : ranges)
            for (size_t off = r.begin; off < r.begin + r.count;) {
                // the piece ends at the slice's end, the range's, or (ZeRO) the owner's shard's
                size_t end = std::min(r.begin + r.count, off + slice);
                int owner = -1;  // -1: every rank (all-reduce)
                if (shard.size != shard.padded) {
                    owner = (int)(off / shard.size);
                    end = std::min(end, (size_t)(owner + 1) * shard.size);
                }
                int count = (int)(end - off);
                in_flight.emplace_back();
                if (owner < 0)
                    MPI_Iallreduce(MPI_IN_PLACE, data + off, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &in_flight.back());
                else if (owner == rank)
                    MPI_Ireduce(MPI_IN_PLACE, data + off, count, MPI_FLOAT, MPI_SUM, owner, MPI_COMM_WORLD,
                                &in_flight.back());
                else
                    MPI_Ireduce(data + off, nullptr, count, MPI_FLOAT, MPI_SUM, owner, MPI_COMM_WORLD,
                                &in_flight.back());
                in_flight_bytes += count * sizeof(float);
                off = end;
            }
        int done = 0;
        MPI_Testall((int)in_flight.size(), in_flight.data(), &done, MPI_STATUSES_IGNORE);
    }
    void wait_sums() override {
        watchdog.wait(in_flight_op, in_flight_bytes, [&] {
            int done = 0;
            MPI_Testall((int)in_flight.size(), in_flight.data(), &done, MPI_STATUSES_IGNORE);
            return done != 0;
        });
        in_flight.clear(), in_flight_bytes = 0;
    }
    void allreduce_sum(double* data, size_t n) override {
        MPI_Request req;
        MPI_Iallreduce(MPI_IN_PLACE, data, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req);
        wait("all-reduce", n * sizeof(double), req);
    }
    void broadcast(void* data, size_t bytes) override {
        MPI_Request req;
        MPI_Ibcast(data, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
        wait("broadcast", bytes, req);
    }
    void allgather(const void* mine, size_t bytes, void* all) override {
        MPI_Request req;
        MPI_Iallgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD, &req);
        wait("all-gather", bytes, req);
    }
    // MPI's in-place reduce-scatter leaves this rank's block at the start of the buffer; it
    // is moved to the rank's own place, where the shard is updated and gathered from.
    void reduce_scatter_sum(float* data, size_t n) override {
        const size_t shard = n / (size_t)world;
        MPI_Request req;
        MPI_Ireduce_scatter_block(MPI_IN_PLACE, data, int_count(shard), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
        wait("reduce-scatter", n * sizeof(float), req);
        if (rank > 0) memmove(data + rank * shard, data, shard * sizeof(float));
    }
    void allgather_shards(void* data, size_t bytes) override {
        const bool floats = bytes % (sizeof(float) * world) == 0;  // MPI counts are ints: count in floats
        const size_t shard = bytes / world / (floats ? sizeof(float) : 1);
        MPI_Request req;
        MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, int_count(shard), floats ? MPI_FLOAT : MPI_BYTE,
                       MPI_COMM_WORLD, &req);
        wait("all-gather", bytes, req);
    }
    static int int_count(size_t n) {
        if (n > INT_MAX)
            throw Error(strf("a shard of %s values is more than MPI's int counts can address; use more replicas",
                             with_commas((long long)n).c_str()));
        return (int)n;
    }
    void barrier() override {
        MPI_Request req;
        MPI_Ibarrier(MPI_COMM_WORLD, &req);
        wait("barrier", 0, req);
    }
    [[noreturn]] void abort(int code) override {
        MPI_Abort(MPI_COMM_WORLD, code);
        exit(code);
    }
    void finalize() override { MPI_Finalize(); }
    const char* name() const override { return "MPI"; }
    void set_watchdog(const WatchdogSettings& s) override { watchdog.settings = s; }
};

// Open MPI's non-blocking all-reduce (libnbc) picks, for an in-place call or fewer than 4
// ranks, a binomial tree: a reduce to rank 0, then a broadcast, each moving the whole buffer
// ceil(log2 R) times over rank 0's link, 2·ceil(log2 R)·n in all, where a ring moves
// 2·(R−1)/R·n (the planner's formula, host/cost.h). Over TCP links of 200 Mbit/s the ring cut
// the gradient sync of 12.6 MiB from 1.13 s to 0.75 s (2 hosts) and from 2.92 s to 2.14 s (4
// hosts; make bench_comm, docs/replicas.md, "Across hosts"). A setting given to mpirun (-mca or
// OMPI_MCA_coll_libnbc_iallreduce_algorithm) wins. Other MPIs ignore the variable.
inline void prefer_ring_allreduce() { setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0); }

inline Comm Comm::init(int* argc, char*** argv) {
    Comm c;
    c.host = host_name();
    // Launchers announce themselves in the environment; without one, stay a single
    // process rather than let MPI try to start a runtime of its own.
    if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK")) {
        prefer_ring_allreduce();
        MPI_Init(argc, argv);
        MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
        MPI_Comm_size(MPI_COMM_WORLD, &c.world);
        check_launcher_world(c.world);
        MPI_Comm node;  // the ranks sharing this host
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c.rank, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &c.local_rank);
        MPI_Comm_free(&node);
        c.roll_call = std::make_shared<MpiRollCall>();
        c.backend = std::make_shared<MpiCollectives>(c.rank, c.world, c.roll_call);
    }
    return c;
}
#else
inline Comm Comm::init(int*, char***) {
    Comm c;
    c.host = host_name();
    return c;
}
#endif
