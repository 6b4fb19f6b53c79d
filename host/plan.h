// The batch plan of a run, against memory: the replicas it is planned for and the
// micro-batch B, checked against (or, with --batch-size auto, chosen from) the memory each
// replica may use, before anything is allocated. The arithmetic of B, T, A and R alone is
// host/batch.h's; what a micro-batch costs in memory is the trainer's (Trainer::memory_use).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>

#include "batch.h"
#include "checkpoint.h"
#include "cli.h"
#include "comm.h"
#include "error.h"
#include "model.h"

// The replicas the run is planned for: the processes started, or --replicas N, which a dry
// run plans for (one process can print the plan of a 64-GPU job) and a real run checks.
inline int planned_replicas(const Config& cfg, const Comm& comm) {
    if (cfg.replicas == 0) return comm.world;
    if (!cfg.dry_run && cfg.replicas != comm.world)
        throw UsageError(strf("--replicas %d, but %d process%s started (mpirun -np, srun --ntasks)", cfg.replicas,
                              comm.world, comm.world == 1 ? " was" : "es were"));
    return cfg.replicas;
}

// The batch plan, with the micro-batch checked against memory before anything is allocated
// or launched, or chosen from it (--batch-size auto: the largest B that fits and splits the
// global batch). The replicas plan with the least memory any of them has (returned in
// `available`), so they agree on B. A kernel choice still `auto` is planned with its
// smallest option (Trainer::memory_use); choose_kernels() then picks among those that fit.
template <class Trainer>
BatchPlan plan_micro_batch(Config& cfg, const ModelConfig& mc, const Comm& comm, double& available) {
    const int T = cfg.seq_len, R = planned_replicas(cfg, comm);
    available = Trainer::memory_available(cfg);
    for (uint64_t a : comm.allgather((uint64_t)available)) available = std::min(available, (double)a);
    auto bytes = [&](int B) { return Trainer::memory_use(mc, B, T, R, cfg).total(); };
    const long long global = cfg.total_batch ? cfg.total_batch : (long long)cfg.batch_size * T * R;
    auto fitting = [&] { return largest_fitting_batch(T, R, global, available, bytes); };
    const char* limit = cfg.device_memory > 0 ? "allowed (--device-memory)" : "free";
    auto too_big = [&] {
        return Error(strf("the model does not fit even with a micro-batch of 1×%d: %s, but %s is %s", T,
                          Trainer::memory_use(mc, 1, T, R, cfg).describe().c_str(), format_bytes(available).c_str(),
                          limit));
    };
    if (cfg.batch_size == 0) {  // auto
        check_whole_sequences(global, T, R);
        if (available <= 0)
            throw UsageError("--batch-size auto needs to know the memory it may fill: no GPU was found, so pass "
                             "--device-memory (e.g. 80GB)");
        cfg.batch_size = fitting();
        if (cfg.batch_size == 0) throw too_big();
        if (comm.rank == 0)
            printf("micro-batch chosen from memory: B=%d, the largest that fits in %s and splits the global batch\n",
                   cfg.batch_size, format_bytes(available).c_str());
    }
    BatchPlan plan = plan_batch(cfg.batch_size, T, R, cfg.total_batch);
    check_activation_sizes(mc, plan);
    // a replica spread over --tp × --pp GPUs: its memory per GPU is the cluster plan's (host/cluster.h)
    if (cfg.tp * cfg.pp > 1) return plan;
    if (available > 0 && bytes(plan.B) > available) {
        int B = fitting();
        if (B == 0) throw too_big();
        std::string fix = cfg.total_batch ? strf("--batch-size %d (or --batch-size auto)", B)
                                          : strf("--batch-size %d --total-batch %lld", B, global);
        throw Error(strf("a micro-batch of %d×%d needs %s per replica, but %s is %s; the largest micro-batch that "
                         "fits and splits the global batch is %s",
                         plan.B, T, format_bytes(bytes(plan.B)).c_str(), format_bytes(available).c_str(), limit,
                         fix.c_str()));
    }
    return plan;
}
