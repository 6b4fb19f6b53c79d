// cpu_cuda/exec.h: the execution model. A launch runs its blocks on the pool's OS threads,
// one block at a time per OS thread; the CUDA threads of a block are fibers (fiber.h).
//
// A thread runs without interruption until it reaches __syncthreads or a warp collective
// (__shfl_*_sync, __ballot_sync, __syncwarp, ...), where it waits and the next thread runs.
// A "runner" fiber starts threads one after the other on the same stack, so a thread that
// never waits costs about one function call; only threads that wait keep a fiber of their
// own. Switches go directly from fiber to fiber, without a scheduler in between.
//
// The order in which waiting threads are resumed is a Schedule (settings.h). The race
// detector (CPU_CUDA_RACECHECK=1) runs every launch under several schedules, from the same
// memory, and compares what they wrote: a missing barrier or two blocks writing one
// element then shows up as a difference, instead of as luck.
//
// Errors a GPU would hang or misbehave on are reported as they happen, with the kernel,
// block, thread and source line, and the launch fails (cudaErrorLaunchFailure): a barrier
// reached from different places, a deadlock, a warp collective whose lanes disagree, a
// shuffle that reads a lane that did not take part. A fault inside a kernel (running off an
// allocation into its guard page, a null pointer, a stack overflow) names the same.
#pragma once
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "capture.h"
#include "fiber.h"
#include "memory.h"
#include "pool.h"
#include "device_presets.h"
#include "settings.h"

namespace cpu_cuda {

// ----------------------------------------------------------------------------
// Errors: CUDA keeps the last error per host thread; launches and API calls set it.

inline thread_local cudaError_t last_error = cudaSuccess;
inline cudaError_t set_error(cudaError_t e) {
    if (e != cudaSuccess) last_error = e;
    return e;
}
// A sticky error: after a device assert() fails, CUDA documents that every later call of the
// process returns cudaErrorAssert ("the process must be terminated and relaunched"). Launches,
// synchronisations, cudaMalloc, cudaMemcpy and cudaGetLastError answer it here. (Other launch
// failures stay the launch's own, so that a test can go on after one it provoked.)
inline std::atomic<cudaError_t> sticky_error{cudaSuccess};
inline cudaError_t sticky() { return set_error(sticky_error.load()); }
// A launch that failed while it ran: on a GPU that is found asynchronously, so the next
// cudaDeviceSynchronize or cudaStreamSynchronize answers it (here, as cudaGetLastError does;
// whichever of them comes first reports it, once).
inline std::atomic<cudaError_t> pending_error{cudaSuccess};
inline cudaError_t sync_error() {
    if (sticky_error != cudaSuccess) return sticky();
    return set_error(pending_error.exchange(cudaSuccess));
}

// ----------------------------------------------------------------------------
// What one launch is: the kernel bound to its arguments, and the grid.

struct Launch {
    const char* kernel;                  // the kernel's name, as written at the launch
    dim3 grid, block;
    size_t dynamic_smem;
    void (*invoke)(const void* bound);   // runs the kernel body for the current thread
    const void* bound;
    bool cooperative = false;            // cudaLaunchCooperativeKernel: grid.sync() allowed
};

enum class LaneState : uint8_t { unstarted, running, ready, at_barrier, in_collective, exited,
                                 sleeping,    // sleeping: on an object until wake(it) (libcu++ barriers)
                                 at_grid_barrier };  // in grid.sync(): until every block arrives
enum class WarpOp : uint8_t { shfl_idx, shfl_up, shfl_down, shfl_bfly, ballot, any, all, syncwarp, activemask,
                               wmma_fill, wmma_load, wmma_store, wmma_mma,  // wmma_*: votes, as ballot (wmma.h)
                               ptx_mma, ptx_ldmatrix, ptx_ldmatrix_trans, ptx_movmatrix };  // ptx_*: the same (mma.h)
inline const char* warp_op_name(WarpOp op) {
    static const char* names[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                                  "__ballot_sync", "__any_sync", "__all_sync", "__syncwarp", "__activemask",
                                  "wmma::fill_fragment", "wmma::load_matrix_sync", "wmma::store_matrix_sync",
                                  "wmma::mma_sync", "mma.sync.m16n8k16 (mma_bf16_16816)",
                                  "ldmatrix.sync.m8n8.x4 (ldmatrix_x4)",
                                  "ldmatrix.sync.m8n8.x4.trans (ldmatrix_x4_trans)",
                                  "movmatrix.sync.m8n8.trans (movmatrix_trans)"};
    return names[(int)op];
}
// A collective's name in messages: the call the program made (a cooperative-groups call
// built on a shuffle or vote gives its own label), else the intrinsic's.
inline const char* op_label(WarpOp op, const char* label) { return label ? label : warp_op_name(op); }

// One CUDA thread of the running block.
struct Lane {
    uint3 tid;
    unsigned id;        // x + X·(y + Y·z), the thread's place in the block; lane = id % 32
    LaneState state;
    int fiber;          // the fiber it runs on; -1 before it starts
    const char* file;   // where it waits
    int line;
    // a warp collective in flight
    WarpOp op;
    unsigned mask;
    int b, c;           // shuffle operand (source lane, delta or lane mask) and clamp/segment
    int pred;
    const char* label;  // the cooperative-groups call behind it, or null
    const void* sleeps_on;  // LaneState::sleeping: the object it waits for (sleep_on)
    const char* sleep_what;  // and what that is, for a deadlock's message
    alignas(16) unsigned char value[16];
    alignas(16) unsigned char result[16];
};

// A warp collective waiting for its lanes.
struct WarpGroup {
    unsigned mask, arrived;
    WarpOp op;
    const char* file;
    int line;
    const char* label;
};

// "3" or "0-31" or "0-3, 8": a set of thread ids, for messages.
inline std::string id_ranges(const std::vector<unsigned>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size();) {
        size_t j = i;
        while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) j++;
        if (!s.empty()) s += ", ";
        s += std::to_string(ids[i]) + (j > i ? "-" + std::to_string(ids[j]) : "");
        i = j + 1;
    }
    return s;
}

// ----------------------------------------------------------------------------
// The block executor: one per OS thread, running one block at a time.

class Block;
inline thread_local Block* current_block = nullptr;  // the block running on this OS thread
inline thread_local Lane* current_lane = nullptr;    // the CUDA thread running on it
// Called on each CUDA thread as it returns from the kernel (current_lane is still that
// thread): mma.h completes the thread's cp.async copies still in flight there.
inline void (*on_thread_exit)() = nullptr;
}  // namespace cpu_cuda

// The built-in variables (cuda_cpu.h maps threadIdx to cpu_cuda_threadIdx, ...): copies for
// the block and thread running on this OS thread, set when a block starts and at every
// switch between its threads. Plain variables, not expressions, so that host code may
// declare its own `dim3 gridDim(...)` (a local shadows them, as with nvcc).
inline thread_local uint3 cpu_cuda_threadIdx{};
inline thread_local uint3 cpu_cuda_blockIdx{};
inline thread_local dim3 cpu_cuda_blockDim{0, 0, 0};
inline thread_local dim3 cpu_cuda_gridDim{0, 0, 0};

namespace cpu_cuda {
inline void set_lane(Lane* l) {
    current_lane = l;
    if (l) cpu_cuda_threadIdx = l->tid;
}

class Block {
  public:
    const Launch* launch = nullptr;
    uint3 block_idx{};
    uint64_t generation = 0;  // counts blocks run here: __shared__ memory is fresh for each
    std::string error;        // why the block failed ("" = it did not)
    cudaError_t error_code = cudaErrorLaunchFailure;  // what the launch returns when it did

    // Runs every thread of block `idx` to its end under schedule s; false if it failed.
    bool run(const Launch& l, uint3 idx, const Schedule& s) {
        launch = &l, block_idx = idx, schedule_ = s, error.clear(), error_code = cudaErrorLaunchFailure;
        cpu_cuda_blockIdx = idx, cpu_cuda_blockDim = l.block, cpu_cuda_gridDim = l.grid;
        generation++;
        const dim3 d = l.block;
        n_ = d.x * d.y * d.z;
        warps_ = (n_ + 31) / 32;
        lanes_.resize(n_);
        if (ready_.slots.size() < n_) ready_.slots.resize(n_);
        uint3 t{0, 0, 0};  // thread i's index, counted up (three divisions a thread were a quarter of a
        for (unsigned i = 0; i < n_; i++) {  // short kernel's time: simpleStreams, 16 M threads a launch)
            Lane& lane = lanes_[i];
            lane.tid = t;
            lane.id = i, lane.state = LaneState::unstarted, lane.fiber = -1;
            if (++t.x == d.x) t.x = 0, t.y = t.y + 1 == d.y ? (t.z++, 0) : t.y + 1;
        }
        make_order();
        live_.assign(warps_, ~0u);
        if (n_ % 32) live_[warps_ - 1] = (1u << (n_ % 32)) - 1;  // a partial last warp
        next_unstarted_ = 0, exited_ = 0, at_barrier_ = 0, at_grid_ = 0, parked_ = false;
        ready_.clear();
        if (groups_.size() < warps_) groups_.resize(warps_), converging_.resize(warps_);
        for (unsigned w = 0; w < warps_; w++) groups_[w].clear(), converging_[w].clear();
        free_fibers_.clear(), idle_runners_.clear();
        unused_fibers_ = 0;  // every fiber is free again
        if (dynamic_smem_.size() < l.dynamic_smem + 128) dynamic_smem_.resize(l.dynamic_smem + 128);
        if (settings().poison && l.dynamic_smem) memset(dynamic_shared(), 0xFF, l.dynamic_smem);
        breadth_first_ = s.threads == ThreadOrder::forward || s.threads == ThreadOrder::reverse ||
                         s.threads == ThreadOrder::shuffle;

        current_block = this;
        running_ = choose();  // a runner: nothing has started yet
        switch_context(main_, fibers_[running_]->ctx);
        current_block = nullptr, current_lane = nullptr;
        cpu_cuda_blockDim = cpu_cuda_gridDim = dim3(0, 0, 0);  // host code sees no launch shape
        return error.empty();
    }

    // A cooperative launch's block stops ("parks") once each of its threads waits in
    // grid.sync() or has exited: run() or resume() returns with parked() true. When every block
    // of the grid has parked or finished, resume() lets its threads past the barrier and runs
    // the block on to its next park or its end; false if it failed.
    bool parked() const { return parked_; }
    bool resume() {
        parked_ = false;
        cpu_cuda_blockIdx = block_idx, cpu_cuda_blockDim = launch->block, cpu_cuda_gridDim = launch->grid;
        for (unsigned id : order_)
            if (lanes_[id].state == LaneState::at_grid_barrier) lanes_[id].state = LaneState::ready, ready_.push_back((int)id);
        at_grid_ = 0;
        current_block = this;
        running_ = choose();
        switch_context(main_, fibers_[running_]->ctx);
        current_block = nullptr, current_lane = nullptr;
        cpu_cuda_blockDim = cpu_cuda_gridDim = dim3(0, 0, 0);
        return error.empty();
    }
    // grid.sync(): a barrier across the grid, allowed only in a cooperative launch (on a GPU,
    // elsewhere it may hang or pass unsynchronised: here the launch fails naming the line).
    void grid_sync(const char* file, int line) {
        Lane& me = *current_lane;
        if (!launch->cooperative)
            fail(strf_("grid.sync() at %s:%d in a kernel not launched with cudaLaunchCooperativeKernel: a "
                       "grid-wide barrier needs every block of the grid resident at once",
                       file, line));
        me.state = LaneState::at_grid_barrier, me.file = file, me.line = line;
        at_grid_++;
        check_converged(me.id / 32);
        transfer(me.fiber);
    }

    // ---- called from device code
    void barrier(const char* file, int line) {
        Lane& me = *current_lane;
        if (at_barrier_ > 0 && (file != barrier_file_ || line != barrier_line_))
            fail(strf_("__syncthreads reached from different places: thread %u at %s:%d while threads %s wait at "
                       "%s:%d",
                       me.id, file, line, waiting_ids(LaneState::at_barrier).c_str(), barrier_file_, barrier_line_));
        barrier_file_ = file, barrier_line_ = line;
        me.state = LaneState::at_barrier, me.file = file, me.line = line;
        at_barrier_++;
        if (at_barrier_ + exited_ == n_) release_barrier();
        check_converged(me.id / 32);
        transfer(me.fiber);
    }
    // Counts, ands or ors a predicate over the block (the __syncthreads_* forms).
    int barrier_reduce(const char* file, int line, int pred, int kind) {
        Lane& me = *current_lane;
        me.pred = pred != 0;
        barrier(file, line);
        return kind == 0 ? reduction_count_ : kind == 1 ? reduction_count_ == reduction_total_ : reduction_count_ > 0;
    }

    // A warp collective: waits until every lane of mask that has not exited arrives, then
    // returns with this lane's result in me.result.
    void warp_collective(Lane& me) {
        unsigned lane = me.id % 32, warp = me.id / 32;
        if (!(me.mask >> lane & 1))
            fail(strf_("%s at %s:%d: thread %u (lane %u) is not in its own mask 0x%08x", op_label(me.op, me.label),
                       me.file, me.line, me.id, lane, me.mask));
        std::vector<WarpGroup>& groups = groups_[warp];
        WarpGroup* group = nullptr;
        for (WarpGroup& g : groups) {
            // Another mask that overlaps this one: groups of a split warp (labeled_partition, a
            // half warp's shuffle) that sm_70's independent thread scheduling runs apart. This
            // lane waits in a group of its own mask, which the other group's lanes join once
            // theirs completes (if it never can, that is the deadlock reported at the end).
            if (g.mask != me.mask) continue;
            if (g.op != me.op || g.file != me.file || g.line != me.line)
                fail(strf_("warp %u diverged: lane %u reached %s at %s:%d while lanes of mask 0x%08x wait in %s at "
                           "%s:%d",
                           warp, lane, op_label(me.op, me.label), me.file, me.line, g.mask, op_label(g.op, g.label),
                           g.file, g.line));
            group = &g;
        }
        if (!group) {
            groups.push_back({me.mask, 0, me.op, me.file, me.line, me.label});
            group = &groups.back();
        }
        group->arrived |= 1u << lane;
        me.state = LaneState::in_collective;
        unsigned needed = group->mask & live_[warp];
        if ((group->arrived & needed) == needed) {  // the last lane: only this group can be complete
            WarpGroup g = *group;
            groups.erase(groups.begin() + (group - groups.data()));
            complete(warp, g);
        }
        if (!converging_[warp].empty()) check_converged(warp);
        transfer(me.fiber);
    }

    // __activemask(): the lanes of this warp that are here together. A GPU answers with the
    // lanes that execute this instruction in convergence; here a lane waits until no lane of
    // its warp can still arrive (each has exited or waits somewhere), and the answer is the
    // lanes that reached this same call.
    unsigned activemask(const char* file, int line) {
        Lane& me = *current_lane;
        unsigned warp = me.id / 32;
        WarpGroup* group = nullptr;
        for (WarpGroup& g : converging_[warp])
            if (g.file == file && g.line == line) group = &g;
        if (!group) {
            converging_[warp].push_back({0, 0, WarpOp::activemask, file, line, nullptr});
            group = &converging_[warp].back();
        }
        group->arrived |= 1u << (me.id % 32);
        me.state = LaneState::in_collective, me.op = WarpOp::activemask, me.file = file, me.line = line;
        me.label = nullptr;
        check_converged(warp);
        transfer(me.fiber);
        unsigned mask;
        memcpy(&mask, me.result, sizeof mask);
        return mask;
    }

    // Waiting on an object of the block's (a libcu++ barrier's phase, a pipeline's stage): the
    // thread sleeps until another calls wake(obj), then checks its condition again. If no
    // thread can run while some sleep, that is a deadlock, reported with where they sleep.
    void sleep_on(const void* obj, const char* what, const char* file, int line) {
        Lane& me = *current_lane;
        me.state = LaneState::sleeping, me.sleeps_on = obj, me.sleep_what = what, me.file = file, me.line = line;
        check_converged(me.id / 32);
        transfer(me.fiber);
    }
    void wake(const void* obj) {
        for (unsigned id : order_) {
            Lane& l = lanes_[id];
            if (l.state != LaneState::sleeping || l.sleeps_on != obj) continue;
            l.state = LaneState::ready;
            ready_.push_back((int)id);
        }
    }

    // Abandons the block with an error: its threads never run again.
    [[noreturn, gnu::noinline, gnu::cold]] void fail(const std::string& why,
                                                     cudaError_t code = cudaErrorLaunchFailure) {
        if (error.empty()) error = why, error_code = code;
        current_lane = nullptr;
        Fiber& me = *fibers_[running_];
        switch_context(me.ctx, main_);
        __builtin_unreachable();
    }

    // 128-byte aligned, as a GPU's (WMMA needs 32 bytes)
    void* dynamic_shared() { return (void*)(((uintptr_t)dynamic_smem_.data() + 127) & ~(uintptr_t)127); }

    // Fills a __shared__ variable with NaN bytes when the first thread of a block reaches
    // its declaration: __shared__ memory starts undefined on a GPU.
    void touch_shared(void* p, size_t bytes) {
        for (SharedVariable& seen : shared_seen_)
            if (seen.p == p) {
                if (seen.block == generation) return;
                seen.block = generation, seen.bytes = bytes;
                if (settings().poison) memset(p, 0xFF, bytes);
                return;
            }
        shared_seen_.push_back({(char*)p, bytes, generation});
        if (settings().poison) memset(p, 0xFF, bytes);
    }

    // Whether [p, p + bytes) lies in this block's shared memory: its dynamic shared memory,
    // or a __shared__ variable whose declaration a thread of this block has reached (the
    // rewritten declaration calls touch_shared). For the checks of ldmatrix and cp.async.
    bool in_shared(const void* p, size_t bytes) {
        const char* c = (const char*)p;
        const char* dynamic = (const char*)dynamic_shared();
        if (c >= dynamic && c + bytes <= dynamic + launch->dynamic_smem) return true;
        for (const SharedVariable& v : shared_seen_)
            if (v.block == generation && c >= v.p && c + bytes <= v.p + v.bytes) return true;
        return false;
    }

    // Whether p lies on the guard page of one of this OS thread's fiber stacks.
    bool stack_guard_holds(const void* p) const {
        for (auto& f : fibers_)
            if (f->stack.guard_holds(p)) return true;
        return false;
    }

  private:
    struct Fiber {
        Context ctx;
        Stack stack;
        ~Fiber() { stack.unmap(); }  // (a cooperative launch's threads end with their blocks)
    };
    std::vector<std::unique_ptr<Fiber>> fibers_;
    std::vector<int> free_fibers_, idle_runners_;  // freed in this block; runners with nothing to start
    size_t unused_fibers_ = 0;  // fibers_[unused_fibers_..] have not been used in this block
    Context main_;
    int running_ = -1;  // the fiber running now

    Schedule schedule_;
    bool breadth_first_ = false;  // start every thread before resuming any (else depth first)
    unsigned n_ = 0, warps_ = 0;
    std::vector<Lane> lanes_;
    std::vector<unsigned> order_;  // the order threads start in (and are released from a barrier)
    bool order_is_identity_ = false;
    std::vector<unsigned> warp_order_;  // the lanes of warp w in that order, at [32w, 32w + 32)
    std::vector<unsigned> live_;   // per warp, the lanes that exist and have not exited
    unsigned next_unstarted_ = 0, exited_ = 0, at_barrier_ = 0;
    unsigned at_grid_ = 0;  // threads in grid.sync()
    bool parked_ = false;
    // Lanes that may continue, in the order they will: a queue that never holds a lane twice.
    struct Queue {
        std::vector<int> slots;
        size_t head = 0, count = 0;
        void clear() { head = count = 0; }
        bool empty() const { return count == 0; }
        void push_back(int v) {
            size_t at = head + count++;
            slots[at < slots.size() ? at : at - slots.size()] = v;
        }
        int pop_front() {
            int v = slots[head];
            if (++head == slots.size()) head = 0;
            count--;
            return v;
        }
    } ready_;
    std::vector<std::vector<WarpGroup>> groups_;  // per warp: collectives waiting for lanes
    std::vector<std::vector<WarpGroup>> converging_;  // per warp: __activemask calls waiting
    const char* barrier_file_ = nullptr;
    int barrier_line_ = 0;
    int reduction_count_ = 0, reduction_total_ = 0;
    std::vector<char> dynamic_smem_;
    struct SharedVariable {
        char* p;
        size_t bytes;
        uint64_t block;  // the last block (generation) that reached its declaration
    };
    std::vector<SharedVariable> shared_seen_;

    template <class... A>  // out of line: error messages must not bloat the hot paths' stack frames
    [[gnu::noinline, gnu::cold]] static std::string strf_(const char* fmt, A... a) {
        char buf[1024];
        snprintf(buf, sizeof buf, fmt, a...);
        return buf;
    }

    // The order threads start in; barriers release them in the same order, and a warp's
    // collective releases its lanes in the order they have in it.
    void make_order() {
        bool identity = schedule_.threads == ThreadOrder::forward || schedule_.threads == ThreadOrder::warp;
        if (identity && order_is_identity_ && order_.size() == n_) return;  // the common case, reused
        order_is_identity_ = identity;
        order_.clear();
        switch (schedule_.threads) {
            case ThreadOrder::forward:
            case ThreadOrder::warp:
                for (unsigned i = 0; i < n_; i++) order_.push_back(i);
                break;
            case ThreadOrder::reverse:
                for (unsigned i = n_; i-- > 0;) order_.push_back(i);
                break;
            case ThreadOrder::shuffle: {
                for (unsigned i = 0; i < n_; i++) order_.push_back(i);
                std::mt19937_64 rng(schedule_.seed * 0x9E3779B97F4A7C15ull + generation);
                std::shuffle(order_.begin(), order_.end(), rng);
                break;
            }
            case ThreadOrder::warp_reverse:  // warps last to first, lanes in order
                for (unsigned w = warps_; w-- > 0;)
                    for (unsigned id = w * 32; id < std::min(n_, w * 32 + 32); id++) order_.push_back(id);
                break;
        }
        unsigned filled[32] = {};
        warp_order_.resize(n_);
        for (unsigned id : order_) warp_order_[id / 32 * 32 + filled[id / 32]++] = id;
    }

    struct Span {
        const unsigned *b, *e;
        const unsigned* begin() const { return b; }
        const unsigned* end() const { return e; }
    };
    Span warp_lanes(unsigned warp) const {
        const unsigned* first = warp_order_.data() + warp * 32;
        return {first, first + std::min(32u, n_ - warp * 32)};
    }

    std::string waiting_ids(LaneState state) const {
        std::vector<unsigned> ids;
        for (const Lane& l : lanes_)
            if (l.state == state) ids.push_back(l.id);
        return id_ranges(ids);
    }

    // The next fiber to run, making a runner when a thread must start; -1: nothing can run.
    int choose() {
        bool start = next_unstarted_ < n_ && (breadth_first_ || ready_.empty());
        if (start) {
            if (!idle_runners_.empty()) {
                int f = idle_runners_.back();
                idle_runners_.pop_back();
                return f;
            }
            return new_runner();
        }
        if (!ready_.empty()) {
            Lane& l = lanes_[ready_.pop_front()];
            l.state = LaneState::running;
            set_lane(&l);
            return l.fiber;
        }
        return -1;
    }
    // The current fiber stops here (its thread waits, or its runner is done or idle).
    // (A thread that waits is never the last one alive, so "nothing can run" is a deadlock.)
    void transfer(int from) {
        int to = choose();
        if (to < 0 && grid_barrier_reached()) return park(from);
        if (to < 0) fail("deadlock: " + describe_waiting());
        if (to == from) return;  // released at once: carry on
        running_ = to;
        switch_context(fibers_[from]->ctx, fibers_[to]->ctx);
    }

    // Every thread of the block waits in grid.sync() or has exited.
    bool grid_barrier_reached() const { return at_grid_ > 0 && at_grid_ + exited_ == n_; }
    // Back to run() or resume(), from fiber `from`, which resume() (or a thread it lets run)
    // switches back to.
    void park(int from) {
        parked_ = true, running_ = from;
        switch_context(fibers_[from]->ctx, main_);
    }

    int new_runner() {
        int f;
        if (!free_fibers_.empty()) {
            f = free_fibers_.back();
            free_fibers_.pop_back();
        } else if (unused_fibers_ < fibers_.size()) {
            f = (int)unused_fibers_++;
        } else {
            f = (int)fibers_.size();
            fibers_.push_back(std::make_unique<Fiber>());
            fibers_[f]->stack = Stack::make(settings().stack_bytes);
            unused_fibers_ = fibers_.size();
        }
        make_context(fibers_[f]->ctx, fibers_[f]->stack, &Block::runner_entry, (void*)(intptr_t)f);
        return f;
    }
    static void runner_entry(void* arg) { current_block->runner((int)(intptr_t)arg); }

    // A runner starts threads one after the other until none is left to start.
    void runner(int f) {
        for (;;) {
            if (!breadth_first_ && !ready_.empty()) {  // depth first: waiting threads go first
                idle_runners_.push_back(f);
                transfer(f);  // resumed when a thread must start
            }
            if (next_unstarted_ >= n_) break;
            Lane& l = lanes_[order_[next_unstarted_++]];
            l.state = LaneState::running, l.fiber = f;
            set_lane(&l);
            launch->invoke(launch->bound);
            if (on_thread_exit) on_thread_exit();
            l.state = LaneState::exited;
            exited_++;
            lane_exited(l);
        }
        // Nothing left to start. Choose before this fiber is freed: we are still on its stack.
        int to = choose();
        free_fibers_.push_back(f);
        if (to < 0 && grid_barrier_reached()) parked_ = true;  // (this runner is never resumed)
        else if (to < 0 && exited_ < n_) fail("deadlock: " + describe_waiting());
        running_ = to;
        switch_context(fibers_[f]->ctx, to < 0 ? main_ : fibers_[to]->ctx);  // -1: the block is done
        __builtin_unreachable();  // a finished runner is never resumed
    }

    void lane_exited(const Lane& l) {
        live_[l.id / 32] &= ~(1u << (l.id % 32));
        if (at_barrier_ > 0 && at_barrier_ + exited_ == n_) release_barrier();
        try_complete(l.id / 32);  // an exited lane no longer holds up its warp's collectives
        check_converged(l.id / 32);
    }

    // Completes the warp's __activemask calls once none of its lanes can still arrive.
    void check_converged(unsigned warp) {
        if (converging_[warp].empty()) return;
        for (unsigned id = warp * 32; id < std::min(n_, warp * 32 + 32); id++) {
            LaneState st = lanes_[id].state;
            if (st == LaneState::unstarted || st == LaneState::running || st == LaneState::ready) return;
        }
        for (const WarpGroup& g : converging_[warp])
            for (unsigned id : warp_lanes(warp))
                if (g.arrived >> (id % 32) & 1) {
                    memcpy(lanes_[id].result, &g.arrived, sizeof g.arrived);
                    lanes_[id].state = LaneState::ready;
                    ready_.push_back((int)id);
                }
        converging_[warp].clear();
    }

    void release_barrier() {
        reduction_count_ = reduction_total_ = 0;
        for (unsigned id : order_) {
            Lane& l = lanes_[id];
            if (l.state != LaneState::at_barrier) continue;
            reduction_count_ += l.pred, reduction_total_++;
            l.state = LaneState::ready;
            ready_.push_back((int)id);
        }
        at_barrier_ = 0;
    }

    void try_complete(unsigned warp) {
        std::vector<WarpGroup>& groups = groups_[warp];
        for (size_t i = 0; i < groups.size();) {
            WarpGroup g = groups[i];
            unsigned needed = g.mask & live_[warp];
            if ((g.arrived & needed) != needed || g.arrived == 0) {
                i++;
                continue;
            }
            groups.erase(groups.begin() + i);
            complete(warp, g);
        }
    }

    // Every lane of the group has arrived: compute each lane's result (PTX's rules for
    // shfl.sync, including segments of `width` < 32 lanes) and let the lanes continue.
    void complete(unsigned warp, const WarpGroup& g) {
        Lane* lanes = &lanes_[warp * 32];
        bool shuffle = g.op <= WarpOp::shfl_bfly;
        if (shuffle) {
            for (unsigned lane = 0; lane < 32; lane++) {
                if (!(g.arrived >> lane & 1)) continue;
                Lane& me = lanes[lane];
                int src = shuffle_source(g.op, (int)lane, me.b, me.c);
                if (!(g.arrived >> src & 1))
                    fail(strf_("%s at %s:%d: lane %u of warp %u reads lane %d, which %s (mask 0x%08x)",
                               op_label(g.op, g.label), g.file, g.line, lane, warp, src,
                               warp * 32 + src >= n_ ? "does not exist (the block is smaller)"
                               : !(live_[warp] >> src & 1) ? "has exited" : "is not in the mask",
                               g.mask));
                memcpy(me.result, lanes[src].value, sizeof me.result);
            }
        } else if (g.op != WarpOp::syncwarp) {  // a vote: every lane gets the same answer
            unsigned ballot = 0;
            for (unsigned lane = 0; lane < 32; lane++)
                if (g.arrived >> lane & 1) ballot |= (unsigned)(lanes[lane].pred != 0) << lane;
            unsigned answer = g.op == WarpOp::ballot || g.op >= WarpOp::wmma_fill ? ballot
                            : g.op == WarpOp::any ? (unsigned)(ballot != 0) : (unsigned)(ballot == g.arrived);
            for (unsigned lane = 0; lane < 32; lane++)
                if (g.arrived >> lane & 1) memcpy(lanes[lane].result, &answer, sizeof answer);
        }
        for (unsigned id : warp_lanes(warp))  // the lanes continue in the schedule's order
            if (g.arrived >> (id % 32) & 1) {
                lanes_[id].state = LaneState::ready;
                ready_.push_back((int)id);
            }
    }

    // PTX shfl.sync: c packs the segment mask (bits 8-12, = 32 - width) and the clamp
    // (bits 0-4). A source outside the lane's segment means "keep your own value".
    static int shuffle_source(WarpOp op, int lane, int b, int c) {
        int bval = b & 31, cval = c & 31, segmask = (c >> 8) & 31;
        int max_lane = (lane & segmask) | (cval & ~segmask);
        int min_lane = lane & segmask;
        int j = lane;
        bool in_range = false;
        switch (op) {
            case WarpOp::shfl_up: j = lane - bval, in_range = j >= max_lane; break;
            case WarpOp::shfl_down: j = lane + bval, in_range = j <= max_lane; break;
            case WarpOp::shfl_bfly: j = lane ^ bval, in_range = j <= max_lane; break;
            default: j = min_lane | (bval & ~segmask), in_range = j <= max_lane; break;
        }
        return in_range ? j : lane;
    }

    std::string describe_waiting() const {
        std::map<std::string, std::vector<unsigned>> where;
        for (const Lane& l : lanes_) {
            if (l.state == LaneState::at_barrier)
                where[strf_("at __syncthreads (%s:%d)", l.file, l.line)].push_back(l.id);
            else if (l.state == LaneState::sleeping)
                where[strf_("in %s (%s:%d)", l.sleep_what, l.file, l.line)].push_back(l.id);
            else if (l.state == LaneState::at_grid_barrier)
                where[strf_("in grid.sync() (%s:%d)", l.file, l.line)].push_back(l.id);
            else if (l.state == LaneState::in_collective)
                where[strf_("in %s (%s:%d) with mask 0x%08x", op_label(l.op, l.label), l.file, l.line, l.mask)]
                    .push_back(l.id);
        }
        std::string s;
        for (auto& w : where) s += (s.empty() ? "" : "; ") + std::string("threads ") + id_ranges(w.second) + " wait " + w.first;
        std::vector<unsigned> gone;
        for (const Lane& l : lanes_)
            if (l.state == LaneState::exited) gone.push_back(l.id);
        if (!gone.empty()) s += "; threads " + id_ranges(gone) + " have exited";
        return s + " (a collective inside a branch that some threads skip?)";
    }
};

inline Block& this_block_executor() {
    static thread_local Block b;
    return b;
}

// ----------------------------------------------------------------------------
// Device-side entry points behind the CUDA built-ins (cuda_cpu.h maps the names).

inline void syncthreads(const char* file, int line) {
    current_lane->pred = 1;
    current_block->barrier(file, line);
}
inline int syncthreads_reduce(const char* file, int line, int pred, int kind) {
    return current_block->barrier_reduce(file, line, pred, kind);
}

template <class T>
T warp_op(const char* file, int line, WarpOp op, unsigned mask, T value, int b, int c, int pred = 0,
          const char* label = nullptr) {
    static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 16,
                  "warp shuffles move trivially copyable values of up to 16 bytes");
    Lane& me = *current_lane;
    me.op = op, me.mask = mask, me.b = b, me.c = c, me.pred = pred, me.file = file, me.line = line, me.label = label;
    memcpy(me.value, (const void*)&value, sizeof(T));
    current_block->warp_collective(me);
    T out;
    memcpy((void*)&out, me.result, sizeof(T));
    return out;
}
inline bool valid_width(int width) { return width >= 1 && width <= 32 && (width & (width - 1)) == 0; }
template <class T>
T shuffle(const char* file, int line, WarpOp op, unsigned mask, T value, int b, int width,
          const char* label = nullptr) {
    if (!valid_width(width))
        current_block->fail(std::string(op_label(op, label)) + " at " + file + ":" + std::to_string(line) +
                            ": width " + std::to_string(width) + " is not a power of two from 1 to 32");
    int c = ((32 - width) << 8) | (op == WarpOp::shfl_up ? 0 : 0x1f);  // as CUDA's headers pack it
    return warp_op(file, line, op, mask, value, b, c, 0, label);
}
inline unsigned ballot(const char* file, int line, WarpOp op, unsigned mask, int pred) {
    return warp_op(file, line, op, mask, 0u, 0, 0, pred != 0);
}
inline unsigned activemask(const char* file, int line) { return current_block->activemask(file, line); }

// PTX's special registers that kernels read through inline asm (the rewrite turns
// asm("mov.u32 %0, %%laneid;" : "=r"(x)) into a call): the lane within the warp, the warp
// within the block, and the masks of the lanes below, at, above this one (PTX ISA, "Special
// Registers")
inline unsigned ptx_sreg_laneid() { return current_lane->id % 32; }
inline unsigned ptx_sreg_warpid() { return current_lane->id / 32; }
inline unsigned ptx_sreg_lanemask_eq() { return 1u << ptx_sreg_laneid(); }
inline unsigned ptx_sreg_lanemask_lt() { return ptx_sreg_lanemask_eq() - 1; }
inline unsigned ptx_sreg_lanemask_le() { return ptx_sreg_lanemask_lt() | ptx_sreg_lanemask_eq(); }
inline unsigned ptx_sreg_lanemask_ge() { return ~ptx_sreg_lanemask_lt(); }
inline unsigned ptx_sreg_lanemask_gt() { return ~ptx_sreg_lanemask_le(); }

inline void shared_touch(void* p, size_t bytes) { current_block->touch_shared(p, bytes); }
inline void* dynamic_shared() { return current_block->dynamic_shared(); }
inline bool in_shared_memory(const void* p, size_t bytes) { return current_block->in_shared(p, bytes); }

[[noreturn]] inline void trap(const char* file, int line) {
    current_block->fail(std::string("__trap() at ") + file + ":" + std::to_string(line));
}

// A device assert() that fails: the message in a GPU's form, then the launch fails with
// cudaErrorAssert, which stays (sticky_error, above).
[[noreturn]] inline void assert_failed(const char* expr, const char* file, unsigned line, const char* func) {
    const uint3 b = current_block->block_idx, t = cpu_cuda_threadIdx;
    fprintf(stderr, "%s:%u: %s: block: [%u,%u,%u], thread: [%u,%u,%u] Assertion `%s` failed.\n", file, line, func,
            b.x, b.y, b.z, t.x, t.y, t.z, expr);
    current_block->fail(std::string("assert(") + expr + ") failed at " + file + ":" + std::to_string(line),
                        cudaErrorAssert);
}

// ----------------------------------------------------------------------------
// Faults inside kernels: the kernel, block and thread, and where the address falls.

inline void write_stderr(const char* s) {
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(2, s, n);
        if (w <= 0) return;
        s += w, n -= (size_t)w;
    }
}

inline struct sigaction previous_handler[NSIG];  // what was there before ours, per signal

inline void on_fault(int sig, siginfo_t* info, void*) {
    char line[600];
    void* addr = info->si_addr;
    const char* what = sig == SIGSEGV ? "invalid memory access" : sig == SIGBUS ? "bus error"
                     : sig == SIGFPE ? "arithmetic error (integer division by zero?)" : "illegal instruction";
    if (Block* b = current_block) {
        Lane* lane = current_lane;
        std::string where = sig == SIGSEGV || sig == SIGBUS
                                ? (b->stack_guard_holds(addr)
                                       ? std::string("stack overflow of the CUDA thread (CPU_CUDA_STACK_KB raises it)")
                                       : memory().describe(addr))
                                : std::string("");
        snprintf(line, sizeof line, "cpu_cuda: kernel '%s' block (%u,%u,%u) thread (%u,%u,%u): %s at %p%s%s\n",
                 b->launch ? b->launch->kernel : "?", b->block_idx.x, b->block_idx.y, b->block_idx.z,
                 lane ? lane->tid.x : 0, lane ? lane->tid.y : 0, lane ? lane->tid.z : 0, what, addr,
                 where.empty() ? "" : ": ", where.c_str());
        write_stderr(line);
        signal(sig, SIG_DFL);  // returning re-runs the faulting instruction, which now ends the process
        return;
    }
    if (sig == SIGSEGV && settings().protect_host && !memory().open() && memory().find(addr)) {
        snprintf(line, sizeof line,
                 "cpu_cuda: host code touched device memory at %p (%s) outside a CUDA call: copy it to the host "
                 "with cudaMemcpy first (CPU_CUDA_PROTECT=1 found this)\n",
                 addr, memory().describe(addr).c_str());
        write_stderr(line);
        signal(sig, SIG_DFL);
        return;
    }
    sigaction(sig, &previous_handler[sig], nullptr);  // not ours: whoever handled it before does
}

// Faults are reported by on_fault, on a stack of its own per OS thread that runs blocks (so
// that a fiber's stack overflow can still be reported).
inline void ensure_signal_stack() {
    static thread_local std::vector<char> alt;
    if (!alt.empty()) return;
    alt.resize(64 << 10);
    stack_t ss{};
    ss.ss_sp = alt.data(), ss.ss_size = alt.size();
    sigaltstack(&ss, nullptr);
}
// Called at every launch and allocation: a test framework may have put its own handler back
// in between. Ours passes on what is not ours to the handler it replaced.
inline void install_fault_handler() {
    ensure_signal_stack();
    struct sigaction now {};
    sigaction(SIGSEGV, nullptr, &now);
    if ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_fault) return;
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) {
        struct sigaction sa {};
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(sig, &sa, &previous_handler[sig]);
    }
}

// ----------------------------------------------------------------------------
// Running a launch.

// The launch limits: those every preset GPU shares (block and grid sizes), and the shared
// memory of the one CPU_CUDA_DEVICE names (device_presets.h).
constexpr unsigned MAX_THREADS_PER_BLOCK = DevicePreset::max_threads_per_block;
constexpr size_t DEFAULT_DYNAMIC_SMEM = DevicePreset::smem_per_block;  // without cudaFuncSetAttribute
inline size_t max_dynamic_smem_optin() { return (size_t)device_preset().smem_per_block_optin; }

inline std::mutex& smem_limits_mutex() {
    static std::mutex m;
    return m;
}
inline std::map<const void*, size_t>& smem_limits() {  // kernel -> cudaFuncAttributeMaxDynamicSharedMemorySize
    static std::map<const void*, size_t> m;
    return m;
}

// What the preset GPU would refuse at launch, with the numbers: "" if it would launch. A GPU
// answers cudaErrorInvalidConfiguration (block or grid dimensions) or cudaErrorInvalidValue
// (dynamic shared memory over the kernel's limit) at cudaGetLastError, without the reason;
// the runtime prints the reason too, so that a trainer's CUDA_CHECK line comes with it.
inline std::string launch_refusal(const Launch& l, const void* kernel, cudaError_t* code) {
    const dim3 g = l.grid, b = l.block;
    const DevicePreset& d = device_preset();
    char buf[400];
    *code = cudaErrorInvalidConfiguration;
    const uint64_t threads = (uint64_t)b.x * b.y * b.z;
    if (b.x == 0 || b.y == 0 || b.z == 0 || b.x > (unsigned)d.max_block_dim[0] || b.y > (unsigned)d.max_block_dim[1] ||
        b.z > (unsigned)d.max_block_dim[2] || threads > MAX_THREADS_PER_BLOCK) {
        snprintf(buf, sizeof buf, "block (%u,%u,%u) = %llu threads: a block is at most (%d,%d,%d) and %u threads on %s",
                 b.x, b.y, b.z, (unsigned long long)threads, d.max_block_dim[0], d.max_block_dim[1], d.max_block_dim[2],
                 MAX_THREADS_PER_BLOCK, d.name);
        return buf;
    }
    if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > (unsigned)d.max_grid_dim[0] || g.y > (unsigned)d.max_grid_dim[1] ||
        g.z > (unsigned)d.max_grid_dim[2]) {
        snprintf(buf, sizeof buf, "grid (%u,%u,%u): a grid is at most (%d,%d,%d) blocks on %s", g.x, g.y, g.z,
                 d.max_grid_dim[0], d.max_grid_dim[1], d.max_grid_dim[2], d.name);
        return buf;
    }
    size_t limit = DEFAULT_DYNAMIC_SMEM;
    bool opted_in = false;
    {
        std::lock_guard<std::mutex> lock(smem_limits_mutex());
        auto it = smem_limits().find(kernel);
        if (it != smem_limits().end()) limit = it->second, opted_in = true;
    }
    *code = cudaErrorInvalidValue;
    if (l.dynamic_smem > limit) {
        snprintf(buf, sizeof buf, "%zu bytes of dynamic shared memory, over the kernel's limit of %zu (%s; %s allows up "
                 "to %zu per block after opting in)", l.dynamic_smem, limit,
                 opted_in ? "set by cudaFuncSetAttribute" : "the default: no cudaFuncSetAttribute("
                 "cudaFuncAttributeMaxDynamicSharedMemorySize) for it", d.name, max_dynamic_smem_optin());
        return buf;
    }
    *code = cudaSuccess;
    return "";
}

inline uint3 block_index(const dim3& grid, uint64_t i) {
    return {(unsigned)(i % grid.x), (unsigned)(i / grid.x % grid.y), (unsigned)(i / ((uint64_t)grid.x * grid.y))};
}

inline std::string strf_block(const char* kernel, uint3 b) {
    char buf[300];
    snprintf(buf, sizeof buf, "kernel '%s' block (%u,%u,%u): ", kernel, b.x, b.y, b.z);
    return buf;
}

// Runs every block under schedule s (blocks over the pool, or on this thread for the race
// detector, whose orders must be exact); returns the first failure, "" if none.
inline thread_local cudaError_t failed_launch_code = cudaErrorLaunchFailure;  // of run_blocks' first failure
inline std::string run_blocks(const Launch& l, const Schedule& s, bool on_this_thread) {
    const uint64_t blocks = (uint64_t)l.grid.x * l.grid.y * l.grid.z;
    std::mutex m;
    std::string first_error;
    cudaError_t first_code = cudaErrorLaunchFailure;
    std::atomic<bool> failed{false};
    auto one = [&](size_t i) {
        if (failed.load(std::memory_order_relaxed)) return;
        ensure_signal_stack();
        uint64_t k = s.blocks_reversed ? blocks - 1 - i : i;
        Block& b = this_block_executor();
        if (!b.run(l, block_index(l.grid, k), s)) {
            std::lock_guard<std::mutex> lock(m);
            if (first_error.empty()) {
                uint3 bi = block_index(l.grid, k);
                first_error = strf_block(l.kernel, bi) + b.error;
                first_code = b.error_code;
            }
            failed = true;
        }
    };
    if (on_this_thread)
        for (uint64_t i = 0; i < blocks; i++) one(i);
    else
        pool().run(blocks, one);
    failed_launch_code = first_code;
    return first_error;
}

// The race detector: the launch under each of these schedules, from the same memory.
inline std::vector<Schedule> race_schedules(uint64_t launch_number) {
    return {{ThreadOrder::warp, false, 0},
            {ThreadOrder::forward, true, 0},
            {ThreadOrder::reverse, false, 0},
            {ThreadOrder::shuffle, true, launch_number + 1},
            {ThreadOrder::warp_reverse, true, 0}};
}

// The elements that floating-point atomicAdd (float, double, half, bf16 and their pairs) has
// updated during the race detector's runs of one launch: a sum's last bits depend on the
// order of its additions, which is not a race. Null outside the race detector.
struct AtomicTargets {
    std::vector<std::pair<uintptr_t, size_t>> ranges;  // address, bytes
    // The element that holds byte p, or {0, 0}
    std::pair<uintptr_t, size_t> find(const void* p) {
        uintptr_t a = (uintptr_t)p;
        auto it = std::upper_bound(ranges.begin(), ranges.end(), std::make_pair(a, ~(size_t)0));
        if (it == ranges.begin()) return {0, 0};
        --it;
        return a < it->first + it->second ? *it : std::make_pair(uintptr_t(0), size_t(0));
    }
};
inline thread_local AtomicTargets* float_atomic_targets = nullptr;
inline void note_float_atomic(const void* address, size_t bytes) {
    if (AtomicTargets* t = float_atomic_targets) t->ranges.push_back({(uintptr_t)address, bytes});
}
inline std::string element_text(const unsigned char* p, size_t bytes) {
    char buf[80];
    if (bytes == 4) {
        float v;
        memcpy(&v, p, 4);
        snprintf(buf, sizeof buf, "%.9g (bits 0x%08x)", v, *(const unsigned*)p);
    } else if (bytes == 8) {
        double v;
        memcpy(&v, p, 8);
        snprintf(buf, sizeof buf, "%.17g", v);
    } else {
        snprintf(buf, sizeof buf, "bits 0x%04x", *(const unsigned short*)p);
    }
    return buf;
}

// A difference confined to float atomicAdd targets: not a race but order-dependent rounding.
// Reported once per kernel as a note; under CPU_CUDA_DETERMINISTIC=1 (the project's own tests
// set it: the trainer promises bit-identical reruns) it fails the launch.
inline std::string atomic_rounding(const Launch& l, uintptr_t at, size_t bytes, const unsigned char* was,
                                   const unsigned char* now, const std::string& a, const std::string& b) {
    char buf[700];
    snprintf(buf, sizeof buf,
             "kernel '%s': floating-point atomicAdd on %p gives %s under schedule %s but %s under %s: the sum's "
             "rounding depends on the order of the additions",
             l.kernel, (void*)at, element_text(was, bytes).c_str(), a.c_str(), element_text(now, bytes).c_str(),
             b.c_str());
    if (settings().deterministic) return std::string(buf) + " (CPU_CUDA_DETERMINISTIC=1 asks for the same bits)";
    static std::mutex m;
    static std::set<std::string> noted;
    std::lock_guard<std::mutex> lock(m);
    if (noted.insert(l.kernel).second)
        fprintf(stderr, "cpu_cuda: note: %s; not a race, but the results are not bit-reproducible "
                        "(CPU_CUDA_DETERMINISTIC=1 makes this an error)\n", buf);
    return "";
}

// The __constant__ and __device__ variables the program has copied to or from (runtime.h's
// cudaMemcpy*Symbol): kernels use them without a pointer argument, so the race detector keeps
// them too, restoring them before each schedule and comparing them after.
inline std::vector<Allocation>& known_symbols() {
    static std::vector<Allocation> symbols;
    return symbols;
}
inline void note_symbol(void* p, size_t bytes) {
    static std::mutex m;
    std::lock_guard<std::mutex> lock(m);
    for (const Allocation& a : known_symbols())
        if (a.ptr == (char*)p) return;
    known_symbols().push_back(Allocation{(char*)p, bytes, (char*)p, bytes, true});
}

// A cooperative launch: every block alive at once, so that grid.sync() can hold them all.
// Each block runs on an OS thread of its own (its __shared__ variables are thread_local), and
// the blocks take turns in the schedule's block order: a block runs until its threads all
// wait in grid.sync() (it parks) or have exited, then hands the turn to the next block that
// has not finished. A turn that comes round again finds every unfinished block parked, which
// is the barrier's release. One block runs at a time, so a run is as deterministic as a
// normal launch on one OS thread; memory: a fiber stack per thread of the grid, which
// cudaLaunchCooperativeKernel bounds (runtime.h).
inline std::string run_cooperative(const Launch& l, const Schedule& s) {
    const uint64_t blocks = (uint64_t)l.grid.x * l.grid.y * l.grid.z;
    std::mutex m;
    std::vector<std::condition_variable> wake(blocks);
    std::vector<bool> done(blocks, false);
    uint64_t turn = 0;
    bool stop = false;
    std::string first_error;
    cudaError_t first_code = cudaErrorLaunchFailure;
    AtomicTargets* targets = float_atomic_targets;  // the race detector's, if it runs
    auto next_turn = [&](uint64_t i) {  // (m held) the next unfinished block after i, cyclically
        for (uint64_t k = 1; k <= blocks; k++)
            if (!done[(i + k) % blocks]) return wake[turn = (i + k) % blocks].notify_one();
        stop = true;
    };
    auto block = [&](uint64_t i) {
        float_atomic_targets = targets;
        ensure_signal_stack();
        const uint3 idx = block_index(l.grid, s.blocks_reversed ? blocks - 1 - i : i);
        Block& b = this_block_executor();
        for (bool started = false;; started = true) {
            std::unique_lock<std::mutex> lock(m);
            wake[i].wait(lock, [&] { return stop || turn == i; });
            if (stop) return;
            lock.unlock();
            bool ok = started ? b.resume() : b.run(l, idx, s);
            lock.lock();
            if (!ok) {
                first_error = strf_block(l.kernel, idx) + b.error, first_code = b.error_code, stop = true;
                for (auto& w : wake) w.notify_one();
                return;
            }
            done[i] = !b.parked();
            next_turn(i);
            if (stop)
                for (auto& w : wake) w.notify_one();
            if (done[i]) return;
        }
    };
    std::vector<std::thread> threads;
    threads.reserve(blocks);
    for (uint64_t i = 0; i < blocks; i++) threads.emplace_back(block, i);
    for (std::thread& t : threads) t.join();
    failed_launch_code = first_code;
    return first_error;
}
inline std::string run_grid(const Launch& l, const Schedule& s, bool on_this_thread) {
    return l.cooperative ? run_cooperative(l, s) : run_blocks(l, s, on_this_thread);
}

// Runs l under every race schedule, restoring the memory its pointer arguments reach before
// each; reports the first element that differs between two schedules (differences only in
// float atomicAdd targets: atomic_rounding).
inline std::string race_check(const Launch& l, const std::vector<const void*>& pointers) {
    static std::atomic<uint64_t> launches{0};
    AtomicTargets targets;
    float_atomic_targets = &targets;
    struct Reset {
        ~Reset() { float_atomic_targets = nullptr; }
    } reset;
    std::vector<Allocation> touched;
    for (const void* p : pointers)
        if (const Allocation* a = memory().find(p))
            if (std::none_of(touched.begin(), touched.end(), [&](const Allocation& t) { return t.ptr == a->ptr; }))
                touched.push_back(*a);
    for (const Allocation& sym : known_symbols())  // __device__ variables a kernel may update in place
        touched.push_back(sym);
    std::vector<std::vector<char>> before(touched.size()), reference(touched.size());
    for (size_t i = 0; i < touched.size(); i++) before[i].assign(touched[i].ptr, touched[i].end());
    std::vector<Schedule> schedules = race_schedules(launches++);
    for (size_t s = 0; s < schedules.size(); s++) {
        for (size_t i = 0; i < touched.size() && s > 0; i++) memcpy(touched[i].ptr, before[i].data(), before[i].size());
        std::string err = run_grid(l, schedules[s], true);
        if (!err.empty()) return err + " (schedule " + schedule_name(schedules[s]) + ")";
        for (size_t i = 0; i < touched.size(); i++) {
            if (s == 0) {
                reference[i].assign(touched[i].ptr, touched[i].end());
                continue;
            }
            if (memcmp(reference[i].data(), touched[i].ptr, touched[i].bytes) == 0) continue;
            std::sort(targets.ranges.begin(), targets.ranges.end());
            size_t at = 0, first_atomic = SIZE_MAX;
            for (; at < touched[i].bytes; at++) {  // the first difference that is not an atomic sum's
                if (reference[i][at] == touched[i].ptr[at]) continue;
                if (targets.find(touched[i].ptr + at).second == 0) break;
                if (first_atomic == SIZE_MAX) first_atomic = at;
            }
            if (at == touched[i].bytes) {
                auto e = targets.find(touched[i].ptr + first_atomic);
                size_t off = e.first - (uintptr_t)touched[i].ptr;
                std::string why = atomic_rounding(l, e.first, e.second, (const unsigned char*)&reference[i][off],
                                                  (const unsigned char*)touched[i].ptr + off,
                                                  schedule_name(schedules[0]), schedule_name(schedules[s]));
                if (!why.empty()) return why;
                continue;
            }
            at &= ~(size_t)3;  // the float it belongs to
            float was = 0, now = 0;
            if (at + 4 <= touched[i].bytes) memcpy(&was, &reference[i][at], 4), memcpy(&now, touched[i].ptr + at, 4);
            char buf[600];
            snprintf(buf, sizeof buf,
                     "kernel '%s': race: byte %zu of the allocation at %p (%zu bytes) is %g (bits 0x%08x) under "
                     "schedule %s but %g (bits 0x%08x) under %s; a missing __syncthreads/__syncwarp, or two "
                     "threads or blocks writing one element?",
                     l.kernel, at, (void*)touched[i].ptr, touched[i].bytes, was, *(unsigned*)&reference[i][at],
                     schedule_name(schedules[0]).c_str(), now, *(unsigned*)(touched[i].ptr + at),
                     schedule_name(schedules[s]).c_str());
            return buf;
        }
    }
    return "";
}

// One kernel runs at a time, whichever thread launched it (the host's, or a stream's worker):
// the pool, the fibers and the race detector serve one grid at a time.
inline std::recursive_mutex& device_mutex() {
    static std::recursive_mutex m;
    return m;
}
// What a GPU refuses at the launch itself (the launch returns it); printed with the kernel's name.
inline cudaError_t refuse_launch(const Launch& l, const void* kernel) {
    install_fault_handler();
    if (sticky_error != cudaSuccess) return sticky();
    cudaError_t e;
    std::string refused = launch_refusal(l, kernel, &e);
    if (e != cudaSuccess) {
        fprintf(stderr, "cpu_cuda: kernel '%s' not launched: %s\n", l.kernel, refused.c_str());
        return set_error(e);
    }
    return cudaSuccess;
}
// Validates and runs a launch whose stream has no work queued before it (LaunchConfig::launch
// has seen to that); the error a GPU would give goes to cudaGetLastError, and one that the
// kernel met while it ran also to the next synchronization (pending_error).
inline cudaError_t execute(const Launch& l, const void* kernel, const std::vector<const void*>& pointers) {
    DeviceAccess access{DeviceAccess::Ordered{}};
    if (cudaError_t e = refuse_launch(l, kernel)) return e;
    std::lock_guard<std::recursive_mutex> one_grid(device_mutex());
    std::string err = settings().racecheck ? race_check(l, pointers) : run_grid(l, settings().schedule, false);
    if (!err.empty()) {
        fprintf(stderr, "cpu_cuda: %s\n", err.c_str());
        if (failed_launch_code == cudaErrorAssert) sticky_error = cudaErrorAssert;
        pending_error = failed_launch_code;
        return set_error(failed_launch_code);
    }
    return cudaSuccess;
}

// ----------------------------------------------------------------------------
// The first statement of every kernel (the rewrite step puts it there).
// A kernel called from host code as a function is a bug nvcc lets through ("a __global__
// function call must be configured" aside); here its built-in variables would be garbage, so
// it stops with a message. A launch with more threads per block than the kernel's
// __launch_bounds__ fails as on a GPU: cudaErrorLaunchOutOfResources ("too many resources
// requested for launch"), before any of its threads has run a statement.
inline void kernel_entry(const char* kernel, const char* file, int line, unsigned max_threads = 0,
                         unsigned min_blocks = 0, unsigned max_blocks_per_cluster = 0) {
    (void)min_blocks, (void)max_blocks_per_cluster;  // occupancy hints: nothing to check here
    Block* b = current_block;
    if (!b) {
        fprintf(stderr,
                "cpu_cuda: kernel '%s' (%s:%d) was called from host code as an ordinary function: launch it with "
                "%s<<<grid, block>>>(...) (in gdb, 'bt' shows the call)\n",
                kernel, file, line, kernel);
        exit(1);
    }
    const dim3 d = b->launch->block;
    unsigned threads = d.x * d.y * d.z;
    if (max_threads && threads > max_threads) {
        char why[300];
        snprintf(why, sizeof why,
                 "launched with %u threads per block, more than the %u of its __launch_bounds__ (%s:%d): "
                 "too many resources requested for launch",
                 threads, max_threads, file, line);
        b->fail(why, cudaErrorLaunchOutOfResources);
    }
}

// ----------------------------------------------------------------------------
// The launch syntax. The build's rewrite step turns
//     kernel<<<grid, block, smem, stream>>>(args...)
// into
//     ::cpu_cuda::launch_config("kernel", CPU_CUDA_KERNEL(kernel), grid, block, smem, stream)(args...)
// and a kernel named with explicit template arguments, k<T, 4><<<...>>>, into
//     ::cpu_cuda::launch_config("k<T, 4>", k<T, 4>, grid, block, smem, stream)(args...)
// (so every template argument must be given: a lambda around a name that uses a local
// constexpr, k<C / 32>, is beyond g++ 12). Every CUDA thread
// calls the kernel as a function call would: template arguments deduced, arguments converted
// to the parameter types (NULL included: call_kernel), and a copy of its own (a kernel may
// change its parameters). CPU_CUDA_KERNEL gives the kernel's address (for
// cudaFuncSetAttribute's limits; null for a template whose arguments the call deduces) and
// a thunk that calls it.

template <class R, class... P>
const void* address_of(R (*kernel)(P...), int) {
    return (const void*)kernel;
}
template <class F>
auto address_or_null(F f, int) -> decltype(f(0)) {
    return f(0);
}
template <class F>
const void* address_or_null(F, long) {
    return nullptr;
}
// &kernel inside a call that depends on a generic lambda's parameter: when &kernel cannot be
// formed (a template whose arguments the call deduces), that is a substitution failure and
// the second overload above answers null, instead of a compile error. (The lambda captures by
// reference so that the kernel may be a local function-pointer variable: k<<<1, 32>>>(x).)
#define CPU_CUDA_ADDRESS(...)                                                                               \
    ::cpu_cuda::address_or_null(                                                                           \
        [&](auto tag) -> decltype(::cpu_cuda::address_of(&__VA_ARGS__, tag)) {                             \
            return ::cpu_cuda::address_of(&__VA_ARGS__, tag);                                              \
        },                                                                                                  \
        0)
// The kernel as a typed function pointer where &kernel names one function, else null.
template <class F>
auto typed_or_null(F f, int) -> decltype(f(0)) {
    return f(0);
}
template <class F>
std::nullptr_t typed_or_null(F, long) {
    return nullptr;
}
template <class R, class... P>
auto typed_of(R (*kernel)(P...), int) {
    return kernel;
}
#define CPU_CUDA_TYPED(...)                                                                                \
    ::cpu_cuda::typed_or_null(                                                                              \
        [&](auto tag) -> decltype(::cpu_cuda::typed_of(&__VA_ARGS__, tag)) {                                \
            return ::cpu_cuda::typed_of(&__VA_ARGS__, tag);                                                 \
        },                                                                                                  \
        0)

// An argument as the kernel's parameter P takes it. As nvcc's launch, NULL or 0 passed for a
// pointer parameter is a null pointer (the argument list has made it a long or int by now,
// so a non-zero integer is refused here rather than by the compiler).
template <class P, class A>
P kernel_argument(const A& a, size_t index) {
    if constexpr (std::is_pointer<P>::value && std::is_integral<A>::value) {
        if (a != 0)
            current_block->fail(std::string("argument ") + std::to_string(index + 1) +
                                " is the integer " + std::to_string((long long)a) + ", for a pointer parameter");
        return nullptr;
    } else {
        return a;
    }
}
template <class R, class... P, class... A, size_t... I>
void call_typed(R (*kernel)(P...), std::index_sequence<I...>, const A&... a) {
    kernel(kernel_argument<P>(a, I)...);
}
template <class R, class... P, class Untyped, class... A>
void call_kernel(R (*kernel)(P...), Untyped&& untyped, const A&... a) {
    if constexpr (sizeof...(P) == sizeof...(A))
        call_typed(kernel, std::index_sequence_for<A...>{}, a...);
    else
        untyped(a...);  // default arguments fill the rest (or the compiler explains)
}
template <class Untyped, class... A>
void call_kernel(std::nullptr_t, Untyped&& untyped, const A&... a) {
    untyped(a...);  // a template whose arguments the call deduces: called as written
}
#define CPU_CUDA_KERNEL(...)                                                                               \
    CPU_CUDA_ADDRESS(__VA_ARGS__), [&](auto... cpu_cuda_arg) {                                              \
        ::cpu_cuda::call_kernel(                                                                            \
            CPU_CUDA_TYPED(__VA_ARGS__), [&](auto... cpu_cuda_a) { __VA_ARGS__(cpu_cuda_a...); }, cpu_cuda_arg...); \
    }

template <class Thunk, class... A>
struct Bound {
    Thunk thunk;
    std::tuple<A...> args;
    static void invoke(const void* self) {
        const Bound* b = (const Bound*)self;
        std::apply(b->thunk, b->args);  // the thunk takes copies: every thread gets its own
    }
};

// Pointer arguments must be device memory (or pinned host memory, which a GPU can read).
template <class T>
void collect_pointer(const T& value, size_t index, const char* kernel, std::vector<const void*>& pointers,
                     bool& ok) {
    if constexpr (std::is_pointer<T>::value) {
        const void* p = (const void*)value;
        if (!p) return;
        pointers.push_back(p);
        if (ok && settings().check_pointers && !memory().find(p)) {
            fprintf(stderr, "cpu_cuda: kernel '%s': argument %zu is %p, which is not device memory (%s)\n", kernel,
                    index + 1, p, memory().describe(p).c_str());
            ok = false;
        }
    }
}

// The pointer arguments of a kernel kept for later (a graph's kernel node), with their allocations
template <class... A>
KeptPointers kept_arguments(const std::tuple<A...>& args) {
    KeptPointers kept;
    std::apply(
        [&](const auto&... a) {
            size_t i = 0;
            [[maybe_unused]] auto one = [&](const auto& v) {  // (unused by a kernel without parameters)
                i++;
                if constexpr (std::is_pointer<std::decay_t<decltype(v)>>::value)
                    kept.keep((const void*)v, "argument " + std::to_string(i));
            };
            (one(a), ...);
        },
        args);
    return kept;
}

template <class... P>
struct KernelCall;
template <class T>
struct is_kernel_call : std::false_type {};
template <class... P>
struct is_kernel_call<KernelCall<P...>> : std::true_type {};

template <class Thunk>
struct LaunchConfig {
    const char* kernel;
    const void* address;
    Thunk thunk;
    dim3 grid, block;
    size_t smem;
    bool cooperative = false;
    cudaStream_t stream = nullptr;  // (a capturing stream records the launch; a busy one queues it)
    // A launch can be queued when its thunk can be copied for later: a kernel named at the call
    // (a lambda that captures nothing) or a function pointer (KernelCall). One that captured a local
    // variable by reference (a kernel in a function-pointer variable) runs on this thread,
    // after the stream's queued work.
    static constexpr bool can_queue = std::is_empty<Thunk>::value || is_kernel_call<Thunk>::value;

    template <class... A>
    void operator()(A&&... args) const {
        launch(std::forward<A>(args)...);
    }
    template <class... A>
    cudaError_t launch(A&&... args) const {
        if (current_block)  // a launch inside a kernel
            current_block->fail(std::string("kernel '") + kernel +
                                "' launched from device code: dynamic parallelism is not supported on the CPU runtime");
        if (cudaError_t e = refuse_in_host_fn(kernel)) return set_error(e);
        if (capturing(stream)) {  // a graph's kernel node: this launch, with copies of the arguments
            LaunchConfig later = *this;
            later.stream = nullptr;
            std::tuple<std::decay_t<A>...> values(std::forward<A>(args)...);
            KeptPointers kept = kept_arguments(values);
            return capture(stream, cudaGraphNodeTypeKernel,
                           [later, kept, args = std::move(values)](cudaStream_t) {
                               if (!kept.still_live(later.kernel)) return set_error(cudaErrorIllegalAddress);
                               return std::apply([&](const auto&... a) { return later.launch(a...); }, args);
                           });
        }
        Bound<Thunk, std::decay_t<A>...> bound{thunk, {std::forward<A>(args)...}};
        std::vector<const void*> pointers;
        bool ok = true;
        std::apply(
            [&](const auto&... a) {
                size_t i = 0;
                (collect_pointer(a, i++, kernel, pointers, ok), ...);
            },
            bound.args);
        if (!ok) return set_error(cudaErrorIllegalAddress);  // where a GPU would fault
        Launch l{kernel, grid, block, smem, &Bound<Thunk, std::decay_t<A>...>::invoke, &bound, cooperative};
        if (queue_behind(stream)) {
            if (!can_queue) {
                stream_queue(stream).drain();
                return execute(l, address, pointers);
            }
            // checked now, as a GPU refuses a launch; run later, behind the stream's work, on
            // copies of the arguments (a failure then shows at the next synchronization)
            if (cudaError_t e = refuse_launch(l, address)) return e;
            stream_queue(stream).enqueue([later = *this, bound, pointers] {
                Launch q{later.kernel, later.grid, later.block, later.smem, &Bound<Thunk, std::decay_t<A>...>::invoke,
                         &bound, later.cooperative};
                execute(q, later.address, pointers);
            });
            return cudaSuccess;
        }
        return execute(l, address, pointers);
    }
};
template <class Thunk>
LaunchConfig<Thunk> launch_config(const char* kernel, const void* address, Thunk thunk, dim3 grid, dim3 block,
                                  size_t smem = 0, cudaStream_t stream = nullptr) {
    LaunchConfig<Thunk> config{kernel, address, thunk, grid, block, smem};
    config.stream = stream;
    return config;
}

template <class... P>
struct KernelCall {
    void (*kernel)(P...);
    template <class... A>
    void operator()(const A&... a) const {
        call_kernel(kernel, [this](const auto&... b) { kernel(b...); }, a...);
    }
};
template <class... P>
LaunchConfig<KernelCall<P...>> launch_config(const char* name, void (*kernel)(P...), dim3 grid, dim3 block,
                                             size_t smem = 0, cudaStream_t stream = nullptr) {
    return launch_config(name, (const void*)kernel, KernelCall<P...>{kernel}, grid, block, smem, stream);
}

}  // namespace cpu_cuda
