// gpu/replicas.cuh: start-up of the replicas, one process per GPU, and the collectives
// over NCCL that the communication object (host/comm.h) plugs in.
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../host/comm.h"
#include "../host/error.h"
#include "common.cuh"

namespace gpu {

// How the replicas start:
//   * a single process: no launcher needed;
//   * mpirun (or srun with PMI) and a train_gpt built with MPI: Comm::init starts MPI, rank 0
//     makes NCCL's id and MPI broadcasts it; host/run.h's collectives go through MPI;
//   * srun without MPI: Slurm's variables give the ranks, the NCCL id travels through the
//     file named by --nccl-init-file, and host/run.h's collectives go through NCCL.
// Gradients always travel through NCCL, one all-reduce per optimizer step.

// The value of option --name in argv ("--name VALUE" or "--name=VALUE"), or "" when absent.
// connect() runs before the command line is parsed and needs only a few options; like the
// parser, it knows that every option but --help takes a value, and that --dry-run and --resume may go
// without one (host/cli.h's switch_alone: then it means 1, and the next word is an option).
inline std::string scan_option(int argc, char** argv, const std::string& name) {
    std::string flag = "--" + name;
    for (int i = 1; i < argc; i++) {
        std::string arg = argv[i];
        if (arg.rfind(flag + "=", 0) == 0) return arg.substr(flag.size() + 1);
        if (arg == "-h" || arg == "--help" || arg.find('=') != std::string::npos) continue;
        bool alone = switch_alone(argc, argv, i);
        if (arg == flag) return alone ? "1" : i + 1 < argc ? argv[i + 1] : "";
        if (!alone) i++;  // skip this option's value
    }
    return "";
}
inline bool wants_help(int argc, char** argv) {
    for (int i = 1; i < argc; i++) {
        std::string arg = argv[i];
        if (arg == "-h" || arg == "--help") return true;
        if (arg.find('=') == std::string::npos && !switch_alone(argc, argv, i)) i++;
    }
    return false;
}

// --comm-timeout, read before the command line is parsed: connect() waits for NCCL's
// start-up under it. A value the parser will refuse counts as the default here.
inline double scan_comm_timeout(int argc, char** argv) {
    std::string v = scan_option(argc, argv, "comm-timeout");
    char* end = nullptr;
    double t = strtod(v.c_str(), &end);
    return !v.empty() && *end == 0 && t >= 0 ? t : WatchdogSettings{}.timeout_s;
}

// Whether a non-blocking communicator's last call has finished (NCCL answers ncclInProgress
// until it has); throws when it failed, or when another rank's failure reached this one.
inline bool nccl_settled(ncclComm_t comm) {
    ncclResult_t state = ncclSuccess;  // set by the query; initialised for g++'s flow analysis
    NCCL_CHECK(ncclCommGetAsyncError(comm, &state));
    if (state == ncclInProgress) return false;
    check_nccl(state, "the communicator (ncclCommGetAsyncError)", __FILE__, __LINE__);
    return true;
}

// The replicas' NCCL communicator, shared by the two Collectives below and ended with them.
// It is non-blocking (ncclConfig_t's blocking = 0), so that no NCCL call can hang the host:
// its start-up, like every collective, is waited for under the watchdog, and a rank that
// never arrives (it died, or it took an old id) ends the job at --comm-timeout.
struct NcclComm {
    ncclComm_t comm = nullptr;
    NcclComm(const ncclUniqueId& id, int world, int rank, double timeout_s, RollCall* roll_call) {
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        ncclResult_t r = ncclCommInitRankConfig(&comm, world, id, rank, &config);
        if (r != ncclInProgress) NCCL_CHECK(r);
        Watchdog watchdog(rank, world, roll_call);
        watchdog.settings.timeout_s = timeout_s;
        try {
            watchdog.wait("NCCL start-up", 0, [&] { return nccl_settled(comm); });
        } catch (...) {
            if (comm) ncclCommAbort(comm);
            comm = nullptr;
            throw;
        }
    }
    ~NcclComm() {
        if (comm) ncclCommDestroy(comm);  // at teardown an error is not worth reporting
    }
};

// Pinned host memory (cudaMallocHost), freed with its owner: a copy from the device into
// it is asynchronous, where one into ordinary (pageable) memory returns only once complete.
struct PinnedBuffer {
    char* ptr = nullptr;
    size_t bytes = 0;
    PinnedBuffer() = default;
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;
    ~PinnedBuffer() {
        if (ptr) cudaFreeHost(ptr);
    }
    char* at_least(size_t n) {
        if (bytes >= n) return ptr;
        if (ptr) CUDA_CHECK(cudaFreeHost(ptr)), ptr = nullptr, bytes = 0;
        CUDA_CHECK(cudaMallocHost((void**)&ptr, n));
        bytes = n;
        return ptr;
    }
};

// The bf16 gradient sync's conversions (--grad-sync-dtype bf16), element-wise on the sync's
// stream: no FLOPs; 6 bytes per element each way (4 read and 2 written, or 2 and 4).
__global__ void float_to_bf16_kernel(__nv_bfloat16* out, const float* in, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2bfloat16(in[i]);
}
__global__ void bf16_to_float_kernel(float* out, const __nv_bfloat16* in, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __bfloat162float(in[i]);
}

// Collectives over NCCL on the context's stream. With `host_memory` the data is host memory,
// staged through pinned host memory and a device buffer: host/run.h's few small collectives
// (loss means, agreement checks) in jobs without MPI. Without it the data is GPU memory: the
// gradient sync (Comm::buffers), which NCCL sums where it lies. Every collective is waited
// for through the watchdog (--comm-timeout, host/comm.h): a replica that never arrives ends
// the job with a line naming it (when MPI can ask the others where they wait), instead of
// hanging it. Nothing before that wait may block: the results come back to pinned memory
// (a copy to pageable memory would wait for the collective inside cudaMemcpyAsync).
struct NcclCollectives : Collectives {
    std::shared_ptr<NcclComm> nccl;
    int rank, world;
    bool host_memory;
    DeviceBuffer<char> staging;
    PinnedBuffer pinned;
    Watchdog watchdog;
    NcclCollectives(std::shared_ptr<NcclComm> nccl, int rank, int world, bool host_memory, RollCall* roll_call)
        : nccl(std::move(nccl)), rank(rank), world(world), host_memory(host_memory), watchdog(rank, world, roll_call) {}
    char* device_space(size_t bytes) {
        if (staging.count < bytes) staging.alloc(bytes, "NCCL's staging buffer");
        return staging.ptr;
    }
    // The watchdog's wait; when it ends the job, the communicator is aborted first, which
    // ends the collective in flight: otherwise the stream never completes, and the first
    // call that waits for it (cudaFree, cudaFreeHost, in the destructors on the way out)
    // hangs the process.
    template <class Done>
    void watch(const char* op, size_t bytes, Done&& done) {
        try {
            watchdog.wait(op, bytes, done);
        } catch (...) {
            if (nccl->comm) ncclCommAbort(nccl->comm);
            nccl->comm = nullptr;
            throw;
        }
    }
    // A call on a non-blocking communicator may answer ncclInProgress: it is being enqueued,
    // and nothing else may be enqueued until it is (under the watchdog: it may be waiting to
    // connect to a peer).
    void enqueued(ncclResult_t r, const char* op, size_t bytes) {
        if (r != ncclInProgress) return check_nccl(r, op, __FILE__, __LINE__);
        if (!nccl_settled(nccl->comm))  // (the watchdog counts it as a collective only when it must wait)
            watch(op, bytes, [&] { return nccl_settled(nccl->comm); });
    }
    // Waits until the stream has done the collective just enqueued (and what came before).
    void wait(const char* op, size_t bytes) {
        watch(op, bytes, [&] {
            if (!nccl_settled(nccl->comm)) return false;
            cudaError_t e = cudaStreamQuery(ctx.stream);
            if (e == cudaErrorNotReady) return false;
            CUDA_CHECK(e);
            return true;
        });
    }
    // Runs op (an NCCL call) on device memory holding `bytes` of data, in place; host data
    // goes through the pinned and device staging buffers.
    template <class Op>
    void in_place(const char* what, void* data, size_t bytes, Op op) {
        if (!host_memory) {
            enqueued(op((char*)data), what, bytes);
            wait(what, bytes);
            return;
        }
        char *d = device_space(bytes), *h = pinned.at_least(bytes);
        memcpy(h, data, bytes);
        CUDA_CHECK(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, ctx.stream));
        enqueued(op(d), what, bytes);
        CUDA_CHECK(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, ctx.stream));
        wait(what, bytes);
        memcpy(data, h, bytes);
    }
    void allreduce_sum(float* data, size_t n) override {
        in_place("all-reduce", data, n * sizeof(float), [&](char* d) {
            return ncclAllReduce(d, d, n, ncclFloat, ncclSum, nccl->comm, ctx.stream);
        });
    }
    void allreduce_sum(double* data, size_t n) override {
        in_place("all-reduce", data, n * sizeof(double), [&](char* d) {
            return ncclAllReduce(d, d, n, ncclDouble, ncclSum, nccl->comm, ctx.stream);
        });
    }
    void broadcast(void* data, size_t bytes) override {
        in_place("broadcast", data, bytes, [&](char* d) {
            return ncclBroadcast(d, d, bytes, ncclChar, 0, nccl->comm, ctx.stream);
        });
    }
    void allgather(const void* mine, size_t bytes, void* all) override {
        if (!host_memory) {
            enqueued(ncclAllGather(mine, all, bytes, ncclChar, nccl->comm, ctx.stream), "all-gather", bytes);
            wait("all-gather", bytes);
            return;
        }
        char* d = device_space(bytes * (world + 1));  // [everyone's (world × bytes)] [mine]
        char* send = d + bytes * world;
        char* h = pinned.at_least(bytes * world);
        memcpy(h, mine, bytes);
        CUDA_CHECK(cudaMemcpyAsync(send, h, bytes, cudaMemcpyHostToDevice, ctx.stream));
        enqueued(ncclAllGather(send, d, bytes, ncclChar, nccl->comm, ctx.stream), "all-gather", bytes);
        CUDA_CHECK(cudaMemcpyAsync(h, d, bytes * world, cudaMemcpyDeviceToHost, ctx.stream));
        wait("all-gather", bytes);
        memcpy(all, h, bytes * world);
    }
    // ZeRO stage 1's pair, in place as NCCL defines it: this rank's shard lies at
    // data + rank·shard in both the reduce-scatter's result and the all-gather's input.
    void reduce_scatter_sum(float* data, size_t n) override {
        const size_t shard = n / world;
        in_place("reduce-scatter", data, n * sizeof(float), [&](char* d) {
            float* f = (float*)d;
            return ncclReduceScatter(f, f + rank * shard, shard, ncclFloat, ncclSum, nccl->comm, ctx.stream);
        });
    }
    void allgather_shards(void* data, size_t bytes) override {
        const size_t shard = bytes / world;
        in_place("all-gather", data, bytes, [&](char* d) {
            return ncclAllGather(d + rank * shard, d, shard, ncclChar, nccl->comm, ctx.stream);
        });
    }
    void barrier() override {  // a one-element all-reduce: it returns once every rank has joined
        char* d = device_space(sizeof(double));
        enqueued(ncclAllReduce(d, d, 1, ncclDouble, ncclSum, nccl->comm, ctx.stream), "barrier", 0);
        wait("barrier", 0);
    }
    [[noreturn]] void abort(int code) override {
        ncclCommAbort(nccl->comm);  // no check: the process is leaving either way
        nccl->comm = nullptr;
        exit(code);
    }
    // The bucketed gradient sync (host/gradsync.h) on a stream of its own, `side`, so that the
    // backward goes on while a bucket travels: an event recorded on the compute stream when a
    // bucket is started orders its collective after the backward's work so far (the bucket's
    // gradients are final there); wait_sums records one on `side` that the compute stream
    // waits for, so the clipping and AdamW read the summed gradients, then waits on the host
    // under the watchdog (a replica that never arrives ends the job). Without ZeRO each range
    // is all-reduced; with ZeRO each piece of a range is reduced to the rank whose shard holds
    // it. bf16: the ranges are packed into bf16 (side_staging, one bucket; the buckets run one
    // after another on `side`), summed in bf16 and unpacked into the float32 gradients.
    cudaStream_t side = nullptr;
    cudaEvent_t bucket_ready = nullptr, sums_done = nullptr;
    DeviceBuffer<__nv_bfloat16> side_staging;
    size_t side_bytes = 0;                    // of the collectives in flight, for the watchdog
    const char* side_op = "all-reduce";
    ~NcclCollectives() {
        if (side) cudaStreamDestroy(side);  // at teardown an error is not worth reporting
        if (bucket_ready) cudaEventDestroy(bucket_ready);
        if (sums_done) cudaEventDestroy(sums_done);
    }
    void start_sum(float* data, const std::vector<GradRange>& ranges, const Shard& shard, bool bf16) override {
        if (!side) {
            CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
            CUDA_CHECK(cudaEventCreateWithFlags(&bucket_ready, cudaEventDisableTiming));
            CUDA_CHECK(cudaEventCreateWithFlags(&sums_done, cudaEventDisableTiming));
        }
        size_t total = 0;
        for (const GradRange& r : ranges) total += r.count;
        if (bf16 && side_staging.count < total) {
            wait_side();  // the buckets in flight may still read the smaller buffer
            side_staging.alloc(total, "the bf16 gradient sync's staging buffer");
        }
        CUDA_CHECK(cudaEventRecord(bucket_ready, ctx.stream));
        CUDA_CHECK(cudaStreamWaitEvent(side, bucket_ready, 0));
        const bool sharded = shard.size != shard.padded;
        side_op = sharded ? "reduce-scatter" : "all-reduce";
        const ncclDataType_t type = bf16 ? ncclBfloat16 : ncclFloat;
        const size_t elem = bf16 ? sizeof(__nv_bfloat16) : sizeof(float);
        // bf16: every range packed first (the kernels must run before the group's collectives)
        size_t packed = 0;  // where each range lies in side_staging
        for (const GradRange& r : ranges) {
            if (bf16) float_to_bf16_kernel<<<blocks_for(r.count), THREADS, 0, side>>>(side_staging.ptr + packed,
                                                                                      data + r.begin, r.count);
            if (bf16) KERNEL_CHECK();
            packed += r.count;
        }
        // the bucket's collectives as one NCCL group: one launch for all of them, not one per
        // range. Without ZeRO a packed bf16 bucket is one all-reduce over the packed buffer.
        enqueued(ncclGroupStart(), "group start", 0);
        if (bf16 && !sharded) {
            enqueued(ncclAllReduce(side_staging.ptr, side_staging.ptr, packed, type, ncclSum, nccl->comm, side), side_op,
                     packed * elem);
            side_bytes += packed * elem;
        } else {
            packed = 0;
            for (const GradRange& r : ranges) {
                char* buf = bf16 ? (char*)(side_staging.ptr + packed) : (char*)(data + r.begin);
                for (size_t off = 0; off < r.count;) {  // the pieces: the whole range, or (ZeRO) each owner's part
                    size_t end = r.count;
                    int owner = -1;
                    if (sharded) {
                        owner = (int)((r.begin + off) / shard.size);
                        end = std::min(end, (size_t)(owner + 1) * shard.size - r.begin);
                    }
                    char* piece = buf + off * elem;
                    if (owner < 0) enqueued(ncclAllReduce(piece, piece, end - off, type, ncclSum, nccl->comm, side),
                                            side_op, (end - off) * elem);
                    else enqueued(ncclReduce(piece, piece, end - off, type, ncclSum, owner, nccl->comm, side), side_op,
                                  (end - off) * elem);
                    side_bytes += (end - off) * elem;
                    off = end;
                }
                packed += r.count;
            }
        }
        enqueued(ncclGroupEnd(), side_op, side_bytes);
        packed = 0;
        for (const GradRange& r : ranges) {  // bf16: back into the float32 gradients
            if (bf16) bf16_to_float_kernel<<<blocks_for(r.count), THREADS, 0, side>>>(data + r.begin,
                                                                                      side_staging.ptr + packed, r.count);
            if (bf16) KERNEL_CHECK();
            packed += r.count;
        }
    }
    void wait_sums() override {
        if (!side) return;
        CUDA_CHECK(cudaEventRecord(sums_done, side));
        CUDA_CHECK(cudaStreamWaitEvent(ctx.stream, sums_done, 0));  // the optimizer after every bucket
        wait_side();
    }
    void wait_side() {
        watch(side_op, side_bytes, [&] {
            if (!nccl_settled(nccl->comm)) return false;
            cudaError_t e = cudaStreamQuery(side);
            if (e == cudaErrorNotReady) return false;
            CUDA_CHECK(e);
            return true;
        });
        side_bytes = 0;
    }
    const char* name() const override { return host_memory ? "NCCL (no MPI)" : "NCCL"; }
    void set_watchdog(const WatchdogSettings& s) override { watchdog.settings = s; }
};

inline std::string to_hex(const void* data, size_t bytes) {
    std::string s;
    for (size_t i = 0; i < bytes; i++) s += strf("%02x", ((const unsigned char*)data)[i]);
    return s;
}
inline bool from_hex(const std::string& s, void* data, size_t bytes) {
    if (s.size() != 2 * bytes) return false;
    for (size_t i = 0; i < bytes; i++) {
        unsigned v;
        if (sscanf(s.c_str() + 2 * i, "%2x", &v) != 1) return false;
        ((unsigned char*)data)[i] = (unsigned char)v;
    }
    return true;
}

// NCCL's id through a file on a filesystem that every node shares. Rank 0 writes it
// atomically (a temporary file, then a rename); the others poll until it appears. The
// file names the Slurm job and step it belongs to, so a file left by an earlier run (or
// an earlier srun of the same job) is never taken for this one's.
//
// A job that died before rank 0 removed the file leaves it behind, and a later job with the
// same job and step (a requeued job) finds it: its rank 0 overwrites it, but a rank that
// comes first must not take the dead job's id. The file's age tells: rank 0 writes it as it
// starts, and waits for the others at most timeout_s (--comm-timeout) in NCCL's start-up, so
// a file written more than timeout_s before this rank got here belongs to a rank 0 that has
// given up. Such a file is ignored while rank 0 may still replace it, then named in the error.
//
// The wait is the job's watchdog's: a rank ends after --comm-timeout seconds (600 when it is
// 0) without an id, saying what the file held; a path that is not a regular file (a named pipe
// would block the read until a writer comes) is refused at once.
constexpr int RENDEZVOUS_TIMEOUT_S = 600;
inline ncclUniqueId nccl_id_rendezvous(const std::string& path, int rank, int world, double timeout_s) {
    auto env = [](const char* name) {
        const char* v = getenv(name);
        return std::string(v ? v : "none");
    };
    std::string tag = "slurm job " + env("SLURM_JOB_ID") + " step " + env("SLURM_STEP_ID") + strf(" world %d", world);
    ncclUniqueId id;
    if (rank == 0) {
        NCCL_CHECK(ncclGetUniqueId(&id));
        std::string text = "nccl-id v1\n" + tag + "\n" + to_hex(&id, sizeof id) + "\n";
        write_file_atomic(path, {{text.data(), text.size()}});
        return id;
    }
    const double arrived = (double)time(nullptr);  // the ranks of one launch get here within seconds
    const double wait_s = timeout_s > 0 ? timeout_s : RENDEZVOUS_TIMEOUT_S;
    const double oldest = wait_s;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
    for (;;) {
        std::string found = "no file there";  // what the path holds now, for the error
        double stale_age = -1;                 // this job's id, but older than a live rank 0 leaves it
        struct stat st;
        if (stat(path.c_str(), &st) == 0) {
            if (!S_ISREG(st.st_mode))
                throw Error(strf("--nccl-init-file '%s' is %s, not a regular file: rank 0 writes NCCL's id into it",
                                 path.c_str(), file_kind(st.st_mode)));
            std::ifstream f(path);
            std::string magic, file_tag, hex;
            std::getline(f, magic), std::getline(f, file_tag), std::getline(f, hex);
            if (magic != "nccl-id v1" || !from_hex(hex, &id, sizeof id)) {
                found = strf("a file of %lld bytes that is not one of NCCL's ids", (long long)st.st_size);
            } else if (file_tag != tag) {
                found = "the id of another job (" + file_tag + ")";
            } else {
                double age = arrived - (double)st.st_mtime;  // how long before this rank came it was written
                if (age <= oldest) return id;
                stale_age = age;
            }
        }
        if (std::chrono::steady_clock::now() > deadline && stale_age >= 0)
            throw Error(strf("'%s' holds NCCL's id for %s, but was written %.0f s before rank %d started, by a job "
                             "that is gone (its rank 0 waits at most %g s), and rank 0 has not replaced it: delete "
                             "it, and check that rank 0 started",
                             path.c_str(), tag.c_str(), stale_age, rank, oldest));
        if (std::chrono::steady_clock::now() > deadline)
            throw Error(strf("rank %d waited %g s (--comm-timeout) for rank 0 to write NCCL's id (%s) into '%s', which "
                             "holds %s: is that path on a filesystem every node shares, and did rank 0 start?",
                             rank, wait_s, tag.c_str(), path.c_str(), found.c_str()));
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
}

// A Slurm variable's number, checked: a rank outside the job would wait at the rendezvous
// for a job that never has it.
inline int slurm_number(const char* name, const char* text, int lo, int hi, const std::string& job = "") {
    char* end = nullptr;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end || errno || v < lo || v > hi)
        throw Error(strf("%s is '%s', expected %d to %s%s: not the environment srun gives its tasks", name, text, lo,
                         with_commas(hi).c_str(), job.c_str()));
    return (int)v;
}

// srun without MPI: rank, world and local rank from Slurm's variables. Also catches a
// train_gpt without MPI started by mpirun, which would otherwise train R separate models.
inline void adopt_launcher_ranks(Comm& comm, const std::string& init_file) {
    const char* ompi_size = getenv("OMPI_COMM_WORLD_SIZE");
    if (ompi_size && atoi(ompi_size) > 1)
        throw Error("started by mpirun, but this train_gpt was built without MPI (install libopenmpi-dev and "
                    "rebuild), or launch with srun and --nccl-init-file");
    check_slurm_task_variables();  // (host/comm.h) a count or rank that is not a number
    const char* procid = getenv("SLURM_PROCID");
    const char* ntasks_name = getenv("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
    const char* ntasks = getenv(ntasks_name);
    const char* localid = getenv("SLURM_LOCALID");
    if (!procid || !ntasks || !localid || atoi(ntasks) <= 1) return;
    if (init_file.empty())
        throw UsageError(strf("started by srun as task %s of %s without MPI: pass --nccl-init-file PATH, a path on a "
                              "filesystem every node shares, so the tasks can exchange NCCL's id",
                              procid, ntasks));
    comm.world = slurm_number(ntasks_name, ntasks, 2, INT_MAX);
    std::string job = strf(" in a job of %d tasks (%s)", comm.world, ntasks_name);
    comm.rank = slurm_number("SLURM_PROCID", procid, 0, comm.world - 1, job);
    comm.local_rank = slurm_number("SLURM_LOCALID", localid, 0, comm.world - 1, job);
}

// Prints rank → host → GPU, and stops when two ranks on one host chose the same GPU, or
// when ranks on one host see different numbers of GPUs (their CUDA_VISIBLE_DEVICES differ).
inline void check_device_map(const Comm& comm) {
    int count = 0;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    char bus[32] = "?";
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, ctx.device));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, ctx.device));
    std::vector<std::string> all = comm.allgather(strf("%s|%s|%d|%d|%s", comm.host.c_str(), bus, ctx.device, count,
                                                       prop.name));
    struct Entry {
        std::string host, bus, name;
        int device, count;
    };
    std::vector<Entry> e(comm.world);
    for (int r = 0; r < comm.world; r++) {
        char host[256] = "", b[32] = "", name[256] = "";
        sscanf(all[r].c_str(), "%255[^|]|%31[^|]|%d|%d|%255[^\n]", host, b, &e[r].device, &e[r].count, name);
        e[r].host = host, e[r].bus = b, e[r].name = name;
        if (comm.rank == 0)
            printf("rank %d -> %s -> GPU %d (%s, %s)\n", r, host, e[r].device, b, name);
    }
    fflush(stdout);
    for (int r = 0; r < comm.world; r++)
        for (int s = r + 1; s < comm.world; s++) {
            if (e[r].host != e[s].host) continue;
            if (e[r].bus == e[s].bus)
                throw Error(strf("ranks %d and %d on %s both chose the GPU at %s: more ranks than GPUs on that "
                                 "host, or CUDA_VISIBLE_DEVICES hides the others",
                                 r, s, e[r].host.c_str(), e[r].bus.c_str()));
            if (e[r].count != e[s].count)
                throw Error(strf("ranks %d and %d on %s see %d and %d GPUs: give every rank the same "
                                 "CUDA_VISIBLE_DEVICES, or each rank exactly one GPU",
                                 r, s, e[r].host.c_str(), e[r].count, e[s].count));
        }
}

// The replicas' start-up for train_gpt (GpuTrainer::connect): the processes (Comm::init: MPI
// when launched by mpirun, or the launcher's variables with --nccl-init-file), this process's
// GPU, and NCCL's communicator for the gradients (and, without MPI, for everything else).
// --help needs no GPU, nor does a single process's dry run without one.
inline Comm connect_replicas(int* argc, char*** argv) {
    if (gpu::wants_help(*argc, *argv)) {  // --help needs no GPU
        Comm c;
        c.host = host_name();
        return c;
    }
    Comm comm = Comm::init(argc, argv);  // MPI when launched by mpirun and built with it
    try {
        std::string init_file = gpu::scan_option(*argc, *argv, "nccl-init-file");
        bool via_file = false;
        if (comm.world == 1) {
            gpu::adopt_launcher_ranks(comm, init_file);
            via_file = comm.world > 1;
        }
        int count = 0;
        cudaError_t e = cudaGetDeviceCount(&count);
        if (e != cudaSuccess || count == 0) {
            if (comm.world == 1 && gpu::scan_option(*argc, *argv, "dry-run") == "1") return comm;
            throw Error(strf("no usable GPU: %s", e != cudaSuccess ? cudaGetErrorString(e) : "none found"));
        }
        gpu::init_device(comm.local_rank % count);
        if (comm.world > 1) {
            const double comm_timeout = gpu::scan_comm_timeout(*argc, *argv);
            ncclUniqueId id;
            if (via_file) {
                id = gpu::nccl_id_rendezvous(init_file, comm.rank, comm.world, comm_timeout);
            } else {
                if (comm.rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
                comm.broadcast(&id, sizeof id);
            }
            auto nccl = std::make_shared<gpu::NcclComm>(id, comm.world, comm.rank, comm_timeout,
                                                         comm.roll_call.get());
            comm.buffers = std::make_shared<gpu::NcclCollectives>(nccl, comm.rank, comm.world, false,
                                                                  comm.roll_call.get());
            if (via_file) {
                comm.backend = std::make_shared<gpu::NcclCollectives>(nccl, comm.rank, comm.world, true,
                                                                      comm.roll_call.get());
                if (comm.rank == 0) remove(init_file.c_str());  // every rank has read it by now
            }
            gpu::check_device_map(comm);
        }
    } catch (const Error& e) {
        // with a backend, end every replica here: the others would wait for this one
        if (comm.world > 1 && comm.backend) {
            fprintf(stderr, "%s: error (rank %d): %s\n", program_name((*argv)[0]), comm.rank, e.what());
            comm.abort_all(1);
        }
        throw;
    }
    return comm;
}

}  // namespace gpu
