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
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "error.h"

// What a backend must provide: collectives over host memory, across all ranks.
struct Collectives {
    virtual ~Collectives() = default;
    virtual void allreduce_sum(float* data, size_t n) = 0;   // in place
    virtual void allreduce_sum(double* data, size_t n) = 0;  // in place
    virtual void broadcast(void* data, size_t bytes) = 0;    // from rank 0
    virtual void allgather(const void* mine, size_t bytes, void* all) = 0;  // all: world × bytes
    virtual void barrier() = 0;
    [[noreturn]] virtual void abort(int code) = 0;
    virtual void finalize() {}
    virtual const char* name() const = 0;
};

struct Comm {
    int rank = 0;        // this replica, 0..world-1
    int world = 1;       // number of replicas R
    int local_rank = 0;  // rank among the replicas on this host (selects the GPU)
    std::string host;
    std::shared_ptr<Collectives> backend;  // host memory; null: a single process
    std::shared_ptr<Collectives> buffers;  // the trainer's memory (GPU); null: same as backend

    // A single process, or MPI when built with it and launched by mpirun / srun with PMI.
    static Comm init(int* argc, char*** argv);

    const char* backend_name() const { return backend ? backend->name() : "single process"; }

    // Sum of the gradient buffer over all replicas, in place, where the trainer keeps it
    // (host memory for train, GPU memory for train_gpt). Both trainers' gradient sync,
    // once per optimizer step: each replica's gradient is already scaled by 1/(B·T·A·R),
    // so the sum is the mean over the global batch.
    void allreduce_sum(float* data, size_t n) const {
        if (Collectives* c = buffers ? buffers.get() : backend.get()) c->allreduce_sum(data, n);
    }
    // Mean of one number over all replicas (losses, validation loss).
    double allreduce_mean(double x) const {
        if (backend) backend->allreduce_sum(&x, 1);
        return x / world;
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
    std::vector<std::string> allgather(const std::string& s) const {
        std::vector<std::string> all(world, s);
        if (!backend) return all;
        char mine[256] = {};
        snprintf(mine, sizeof mine, "%s", s.c_str());
        std::vector<char> buf(sizeof mine * (size_t)world);
        backend->allgather(mine, sizeof mine, buf.data());
        for (int r = 0; r < world; r++) all[r] = std::string(&buf[sizeof mine * (size_t)r]);
        return all;
    }
    // Stops with the same error on every rank when ranks disagree, e.g. on the
    // configuration or the data: silent divergence or a hang would be worse.
    void check_agree(uint64_t value, const char* what) const {
        std::vector<uint64_t> all = allgather(value);
        for (int r = 1; r < world; r++)
            if (all[r] != all[0])
                throw Error(strf("replicas disagree on %s: rank %d differs from rank 0 (check that every rank got "
                                 "the same options and files)", what, r));
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
};

inline std::string host_name() {
    char name[256] = "?";
    gethostname(name, sizeof name);
    return name;
}

#ifdef TRAIN_MPI
#include <mpi.h>

struct MpiCollectives : Collectives {
    void allreduce_sum(float* data, size_t n) override {
        // MPI counts are int: reduce in slices for buffers over 2^30 elements
        for (size_t off = 0; off < n; off += (size_t)1 << 30) {
            int count = (int)std::min(n - off, (size_t)1 << 30);
            MPI_Allreduce(MPI_IN_PLACE, data + off, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }
    }
    void allreduce_sum(double* data, size_t n) override {
        MPI_Allreduce(MPI_IN_PLACE, data, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    void broadcast(void* data, size_t bytes) override { MPI_Bcast(data, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD); }
    void allgather(const void* mine, size_t bytes, void* all) override {
        MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
    }
    void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
    [[noreturn]] void abort(int code) override {
        MPI_Abort(MPI_COMM_WORLD, code);
        exit(code);
    }
    void finalize() override { MPI_Finalize(); }
    const char* name() const override { return "MPI"; }
};

inline Comm Comm::init(int* argc, char*** argv) {
    Comm c;
    c.host = host_name();
    // Launchers announce themselves in the environment; without one, stay a single
    // process rather than let MPI try to start a runtime of its own.
    if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK")) {
        MPI_Init(argc, argv);
        MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
        MPI_Comm_size(MPI_COMM_WORLD, &c.world);
        MPI_Comm node;  // the ranks sharing this host
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c.rank, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &c.local_rank);
        MPI_Comm_free(&node);
        c.backend = std::make_shared<MpiCollectives>();
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
