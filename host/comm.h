// Communication between data-parallel replicas: the only place that knows about MPI.
//
// A Comm object is created once in main() and passed to whoever needs it; model code
// never sees it. Built without MPI (or run without mpirun) it is a single process and
// every operation is a no-op. Built with -DTRAIN_MPI and launched by mpirun, it wraps
// MPI_COMM_WORLD. This file holds the project's one MPI #ifdef.
#pragma once
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "error.h"

#ifdef TRAIN_MPI
#include <mpi.h>
#endif

struct Comm {
    int rank = 0;        // this replica, 0..world-1
    int world = 1;       // number of replicas R
    int local_rank = 0;  // rank among the replicas on this host (selects the GPU)
    std::string host;
    bool mpi = false;    // true when MPI was initialised

    // Starts MPI when the process was launched by mpirun (or srun with PMI), else runs alone.
    static Comm init(int* argc, char*** argv) {
        Comm c;
        char name[256] = "?";
        gethostname(name, sizeof name);
        c.host = name;
#ifdef TRAIN_MPI
        // Launchers announce themselves in the environment; without one, stay single-process
        // rather than let MPI try to start a runtime of its own.
        if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK")) {
            MPI_Init(argc, argv);
            MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
            MPI_Comm_size(MPI_COMM_WORLD, &c.world);
            MPI_Comm node;
            MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c.rank, MPI_INFO_NULL, &node);
            MPI_Comm_rank(node, &c.local_rank);
            MPI_Comm_free(&node);
            c.mpi = true;
        }
#else
        (void)argc, (void)argv;
#endif
        return c;
    }

    const char* backend() const {
#ifdef TRAIN_MPI
        return mpi ? "MPI" : "single process (not launched by mpirun)";
#else
        return "single process (built without MPI)";
#endif
    }

    // Sum of a float buffer over all replicas, in place. The gradient sync uses this once
    // per optimizer step: each replica's gradient is already scaled by 1/(B·T·A·R), so
    // the sum is the mean over the global batch.
    void allreduce_sum(float* data, size_t n) const {
#ifdef TRAIN_MPI
        if (mpi && world > 1) {
            // MPI counts are int: reduce in slices for buffers over 2^31 elements
            for (size_t off = 0; off < n; off += (size_t)1 << 30) {
                int count = (int)std::min(n - off, (size_t)1 << 30);
                MPI_Allreduce(MPI_IN_PLACE, data + off, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            }
        }
#else
        (void)data, (void)n;
#endif
    }

    // Mean of one number over all replicas (losses, validation loss).
    double allreduce_mean(double x) const {
#ifdef TRAIN_MPI
        if (mpi && world > 1) {
            MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            return x / world;
        }
#endif
        return x;
    }

    // Copies bytes from rank 0 to every rank.
    void broadcast(void* data, size_t bytes) const {
#ifdef TRAIN_MPI
        if (mpi && world > 1) MPI_Bcast(data, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
#else
        (void)data, (void)bytes;
#endif
    }

    // Every rank's value of one number, indexed by rank.
    std::vector<uint64_t> allgather(uint64_t value) const {
        std::vector<uint64_t> all(world, value);
#ifdef TRAIN_MPI
        if (mpi && world > 1)
            MPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
#endif
        return all;
    }

    // Every rank's string (host names for the start-up table), gathered on every rank.
    std::vector<std::string> allgather(const std::string& s) const {
        std::vector<std::string> all(world, s);
#ifdef TRAIN_MPI
        if (mpi && world > 1) {
            char mine[256] = {};
            snprintf(mine, sizeof mine, "%s", s.c_str());
            std::vector<char> buf(256 * (size_t)world);
            MPI_Allgather(mine, 256, MPI_CHAR, buf.data(), 256, MPI_CHAR, MPI_COMM_WORLD);
            for (int r = 0; r < world; r++) all[r] = std::string(&buf[256 * (size_t)r]);
        }
#endif
        return all;
    }

    // Stops with the same error on every rank when ranks disagree, e.g. on the
    // configuration or the data: silent divergence or a hang would be worse.
    void check_agree(uint64_t value, const char* what) const {
        std::vector<uint64_t> all = allgather(value);
        for (int r = 1; r < world; r++)
            if (all[r] != all[0])
                throw Error(strf("replicas disagree on %s: rank %d differs from rank 0 (check that every "
                                 "rank got the same options and files)", what, r));
    }

    void barrier() const {
#ifdef TRAIN_MPI
        if (mpi && world > 1) MPI_Barrier(MPI_COMM_WORLD);
#endif
    }

    // After an error on one rank the others would wait forever in the next collective:
    // abort the whole job instead.
    [[noreturn]] void abort_all(int code) const {
#ifdef TRAIN_MPI
        if (mpi && world > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
        exit(code);
    }

    void finalize() const {
#ifdef TRAIN_MPI
        if (mpi) MPI_Finalize();
#endif
    }
};
