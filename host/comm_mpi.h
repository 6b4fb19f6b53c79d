// The MPI backend of the replicas' communication (host/comm.h), the project's one MPI
// #ifdef: MPI's collectives behind Collectives, its roll call for the watchdog, and
// Comm::init, which starts MPI when a launcher started this process. Without TRAIN_MPI,
// Comm::init makes a single process. Included at the end of host/comm.h.
#pragma once
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "comm.h"
#include "error.h"
#include "watchdog.h"

#ifdef TRAIN_MPI
#include <mpi.h>

// Open MPI's launcher tells each process the job's size; a process that MPI starts alone
// although that variable names more (it was set by hand, or inherited from an mpirun this
// process was not started by) would train on its own without a word.
// The same for the PMI variables other launchers set (MPICH's Hydra, srun with PMI): a job size
// above MPI's, or a rank outside it.
// `before`: the PMI variables as the process found them (MPI_Init may rewrite them).
inline void check_launcher_world(int world, const std::vector<std::pair<std::string, std::string>>& before) {
    const char* size = getenv("OMPI_COMM_WORLD_SIZE");
    if (size && atoi(size) > world)
        throw Error(strf("OMPI_COMM_WORLD_SIZE is %s, but MPI's job holds %d process%s: this one was not started "
                         "by mpirun (or by the mpirun of another MPI than the one it was built with); launch it with "
                         "mpirun -np %s, or unset the OMPI_* variables",
                         size, world, world == 1 ? "" : "es", size));
    for (const auto& [name_, value] : before) {
        const char *name = name_.c_str(), *v = value.c_str();
        char* end = nullptr;
        long n = strtol(v, &end, 10);
        const bool is_size = name_ == "PMI_SIZE";
        if (end == v || *end || n < 0 || (is_size ? n > world : n >= world))
            throw Error(strf("%s is '%s', but MPI's job holds %d process%s: this one was not started by the launcher "
                             "those variables describe (or by one of another MPI than the one it was built with); "
                             "launch it with mpirun or srun, or unset the PMI_* and PMIX_* variables",
                             name, v, world, world == 1 ? "" : "es"));
    }
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
        std::vector<std::pair<std::string, std::string>> pmi;  // as found, before MPI_Init
        for (const char* name : {"PMI_SIZE", "PMI_RANK", "PMIX_RANK"})
            if (const char* v = getenv(name)) pmi.emplace_back(name, v);
        MPI_Init(argc, argv);
        MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
        MPI_Comm_size(MPI_COMM_WORLD, &c.world);
        check_launcher_world(c.world, pmi);
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
