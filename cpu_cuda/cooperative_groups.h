// cpu_cuda/cooperative_groups.h: CUDA's cooperative groups on the CPU runtime, built on its
// own barriers and warp collectives (exec.h), so that their checks apply: a barrier reached
// from different places, a deadlock, a lane that has exited, lanes that disagree. Programs
// include <cooperative_groups.h> (and <cooperative_groups/reduce.h>, <.../scan.h>) as usual:
// cpu.mk puts cpu_cuda/include first on the include path, whose headers lead here.
//
// What is here:
//   thread_block        this_thread_block(): sync, thread_rank, size / num_threads,
//                       group_index, thread_index, group_dim / dim_threads
//   thread_block_tile<N> tiled_partition<N>(block or tile), N a power of two up to 32:
//                       sync, thread_rank, size / num_threads, meta_group_rank,
//                       meta_group_size, shfl, shfl_up, shfl_down, shfl_xor, any, all, ballot
//   thread_group        tiled_partition(parent, n) at run time; a block or tile passed as one
//                       (sync, thread_rank, size)
//   reduce              with plus, less, greater, bit_and, bit_or, bit_xor or any function
//   inclusive_scan, exclusive_scan (with plus by default, or any function)
// Orders are CUDA's (cooperative_groups/details): reduce is a butterfly, out = op(out,
// shfl_xor(out, m)) for m = N/2 ... 1, so every lane gets the same bits; inclusive_scan adds
// shfl_up(out, m) for m = 1, 2, 4 ..., as op(out, earlier); exclusive_scan shifts that up by
// one and gives rank 0 a value-initialised T (0).
// Every thread of a tile must take part in its collectives: a tile whose lanes have exited
// (or do not exist: a block that is not a multiple of N) fails the launch naming the call,
// as the runtime's shuffles do. grid_group (this_grid()): sync (with cudaLaunchCooperativeKernel),
// size / num_threads, thread_rank, num_blocks, block_rank, block_index, dim_blocks, is_valid.
// Also labeled_partition and binary_partition (of a coalesced group or a tile of up to 32).
// Not here: cg::memcpy_async, reduce_update_async: a program using them does
// not compile. Here as well: coalesced_threads() / coalesced_group (sync, thread_rank, size,
// shfl, shfl_up, shfl_down, ballot, any, all) and tiles of 64 to 1024 threads (sync, shfl*,
// any, all, reduce, scans; their sync is a barrier of the tile's own), with or without a
// block_tile_memory (this_thread_block(scratch)).
#pragma once
#include <array>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "exec.h"

namespace cpu_cuda {
namespace cg_detail {

inline unsigned block_rank() { return current_lane->id; }
inline unsigned block_size() {
    const dim3 d = current_block->launch->block;
    return d.x * d.y * d.z;
}
// The lanes of the tile of `size` threads that holds this thread, as a warp mask.
inline unsigned tile_mask(unsigned size) {
    if (size == 32) return 0xffffffffu;
    unsigned base = (block_rank() % 32) & ~(size - 1);
    return ((1u << size) - 1) << base;
}
[[noreturn]] inline void fail(const char* call, const char* file, int line, const std::string& why) {
    current_block->fail(std::string(call) + " at " + file + ":" + std::to_string(line) + ": " + why);
}
// A vote over the tile that every one of its threads must reach; then, unless op is syncwarp
// (a tile's sync), the vote asked for.
inline unsigned tile_vote(const char* call, const char* file, int line, unsigned size, int pred, WarpOp op) {
    unsigned mask = tile_mask(size);
    unsigned arrived = warp_op(file, line, WarpOp::ballot, mask, 0u, 0, 0, 1, call);
    if (arrived != mask) {
        unsigned warp = block_rank() / 32, missing = mask & ~arrived;
        std::vector<unsigned> ids;
        for (unsigned l = 0; l < 32; l++)
            if (missing >> l & 1) ids.push_back(warp * 32 + l);
        bool exist = warp * 32 + (31 - __builtin_clz(missing)) < block_size();
        fail(call, file, line,
             "threads " + id_ranges(ids) + " of the tile " +
                 (exist ? "have exited" : "do not exist (the block is not a multiple of the tile size)") +
                 ": every thread of a tile must take part");
    }
    if (op == WarpOp::syncwarp) return arrived;
    return warp_op(file, line, op, mask, 0u, 0, 0, pred, call);
}

// Tiles of more than 32 threads (64, 128, ... up to the block) span warps, so their sync is a
// barrier of their own: the tile's threads sleep in the block (exec.h) until the last arrives,
// and their shuffles and votes go through a slot per thread, between two such barriers.
struct BigTile {
    uint64_t block_generation = ~0ull;
    unsigned arrived = 0;
    uint64_t phase = 0;
    std::vector<std::array<unsigned char, 16>> slots;
};
inline BigTile& big_tile(unsigned size) {
    static thread_local std::map<unsigned, BigTile> tiles;  // per OS thread: per running block
    unsigned index = block_rank() / size;
    BigTile& t = tiles[size << 16 | index];
    if (t.block_generation != current_block->generation) {
        t = BigTile{};
        t.block_generation = current_block->generation;
        t.slots.resize(size);
    }
    return t;
}
inline void big_tile_sync(unsigned size, const char* call, const char* file, int line) {
    BigTile& t = big_tile(size);
    unsigned first = block_rank() / size * size;
    unsigned members = std::min(size, block_size() - first);  // the last tile of a block may be short
    if (++t.arrived == members) {
        t.arrived = 0, t.phase++;
        current_block->wake(&t);
        return;
    }
    uint64_t phase = t.phase;
    while (t.phase == phase) current_block->sleep_on(&t, call, file, line);
}
// Every thread of the tile gives v; each gets the value of rank src (its own when src is outside)
template <class T>
T big_tile_exchange(unsigned size, T v, int src, const char* call, const char* file, int line) {
    static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 16,
                  "tile shuffles move trivially copyable values of up to 16 bytes");
    BigTile& t = big_tile(size);
    unsigned me = block_rank() % size;
    memcpy(t.slots[me].data(), (const void*)&v, sizeof(T));
    big_tile_sync(size, call, file, line);
    T out = v;
    if (src >= 0 && (unsigned)src < size) memcpy((void*)&out, t.slots[src].data(), sizeof(T));
    big_tile_sync(size, call, file, line);
    return out;
}

}  // namespace cg_detail
}  // namespace cpu_cuda

namespace cooperative_groups {

class thread_group;

class thread_block {
  public:
    void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        ::cpu_cuda::syncthreads(file, line);
    }
    unsigned thread_rank() const { return ::cpu_cuda::cg_detail::block_rank(); }  // (CUDA's types)
    unsigned size() const { return ::cpu_cuda::cg_detail::block_size(); }
    unsigned long long num_threads() const { return size(); }
    dim3 group_index() const { return dim3(cpu_cuda_blockIdx.x, cpu_cuda_blockIdx.y, cpu_cuda_blockIdx.z); }
    dim3 thread_index() const { return dim3(cpu_cuda_threadIdx.x, cpu_cuda_threadIdx.y, cpu_cuda_threadIdx.z); }
    dim3 group_dim() const { return cpu_cuda_blockDim; }
    dim3 dim_threads() const { return cpu_cuda_blockDim; }
};
inline thread_block this_thread_block() { return {}; }
// block_tile_memory: the shared scratch that the programming guide's cooperative groups need
// for tiles of more than 32 threads on GPUs before compute capability 8.0, sized for blocks of
// up to MaxBlockSize threads; this_thread_block(scratch) hands it to the block's tiles. The
// runtime's big tiles exchange through their own storage, so it holds nothing here; a block
// larger than MaxBlockSize (its scratch too small on such a GPU) fails the launch.
template <unsigned MaxBlockSize = 1024>
struct block_tile_memory {
    static_assert(MaxBlockSize >= 1 && MaxBlockSize <= 1024, "block_tile_memory<MaxBlockSize>: 1 to 1024 threads");
    char unused = 0;
};
template <unsigned MaxBlockSize>
thread_block this_thread_block(block_tile_memory<MaxBlockSize>&, const char* file = __builtin_FILE(),
                               int line = __builtin_LINE()) {
    const unsigned threads = ::cpu_cuda::cg_detail::block_size();
    if (threads > MaxBlockSize)
        ::cpu_cuda::cg_detail::fail("this_thread_block", file, line,
                                    "the block has " + std::to_string(threads) + " threads, more than the " +
                                        std::to_string(MaxBlockSize) + " its block_tile_memory<" +
                                        std::to_string(MaxBlockSize) + "> is sized for");
    return {};
}

// The whole grid. sync() is a barrier across every thread of every block; it needs a launch by
// cudaLaunchCooperativeKernel (elsewhere the launch fails naming the line), whose blocks exec.h
// keeps alive together. Ranks count blocks in x, then y, then z, and threads within a block
// as thread_block does, as CUDA's do.
class grid_group {
  public:
    void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        ::cpu_cuda::current_block->grid_sync(file, line);
    }
    bool is_valid() const { return ::cpu_cuda::current_block->launch->cooperative; }
    unsigned long long num_blocks() const {
        return (unsigned long long)cpu_cuda_gridDim.x * cpu_cuda_gridDim.y * cpu_cuda_gridDim.z;
    }
    unsigned long long block_rank() const {
        return cpu_cuda_blockIdx.x + (unsigned long long)cpu_cuda_gridDim.x *
                                         (cpu_cuda_blockIdx.y + (unsigned long long)cpu_cuda_gridDim.y * cpu_cuda_blockIdx.z);
    }
    unsigned long long size() const { return num_blocks() * ::cpu_cuda::cg_detail::block_size(); }
    unsigned long long num_threads() const { return size(); }
    unsigned long long thread_rank() const {
        return block_rank() * ::cpu_cuda::cg_detail::block_size() + ::cpu_cuda::cg_detail::block_rank();
    }
    dim3 group_dim() const { return cpu_cuda_blockDim; }
    dim3 dim_blocks() const { return cpu_cuda_gridDim; }
    dim3 block_index() const { return dim3(cpu_cuda_blockIdx.x, cpu_cuda_blockIdx.y, cpu_cuda_blockIdx.z); }
};
inline grid_group this_grid() { return {}; }

// A tile of N threads (the ranks [k·N, k·N + N) of its block).
template <unsigned N, class Parent = void>
class thread_block_tile {
    static_assert(N >= 1 && N <= 1024 && (N & (N - 1)) == 0,
                  "thread_block_tile<N>: a tile is a power of two from 1 to 1024 threads");
    static constexpr bool big = N > 32;  // spans warps: cg_detail's BigTile

  public:
    thread_block_tile(unsigned meta_rank, unsigned meta_size) : meta_rank_(meta_rank), meta_size_(meta_size) {}
    template <class P>
    thread_block_tile(const thread_block_tile<N, P>& t)  // thread_block_tile<N, parent> to <N>
        : meta_rank_(t.meta_group_rank()), meta_size_(t.meta_group_size()) {}

    unsigned thread_rank() const { return ::cpu_cuda::cg_detail::block_rank() % N; }
    static constexpr unsigned size() { return N; }
    static constexpr unsigned num_threads() { return N; }
    unsigned meta_group_rank() const { return meta_rank_; }
    unsigned meta_group_size() const { return meta_size_; }

    void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        if constexpr (big) return ::cpu_cuda::cg_detail::big_tile_sync(N, "thread_block_tile::sync", file, line);
        ::cpu_cuda::cg_detail::tile_vote("thread_block_tile::sync", file, line, N, 1, ::cpu_cuda::WarpOp::syncwarp);
    }
    int any(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        if constexpr (big) return count(pred, "thread_block_tile::any", file, line) > 0;
        return (int)::cpu_cuda::cg_detail::tile_vote("thread_block_tile::any", file, line, N, pred,
                                                     ::cpu_cuda::WarpOp::any);
    }
    int all(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        if constexpr (big) return count(pred, "thread_block_tile::all", file, line) == (int)N;
        return (int)::cpu_cuda::cg_detail::tile_vote("thread_block_tile::all", file, line, N, pred,
                                                     ::cpu_cuda::WarpOp::all);
    }
    // bit r: the predicate of the tile's thread of rank r
    unsigned ballot(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        static_assert(!big, "thread_block_tile<N>::ballot is for tiles of up to 32 threads");
        unsigned b = ::cpu_cuda::cg_detail::tile_vote("thread_block_tile::ballot", file, line, N, pred,
                                                      ::cpu_cuda::WarpOp::ballot);
        return b >> ((::cpu_cuda::cg_detail::block_rank() % 32) & ~(N - 1));
    }
    template <class T>
    T shfl(T v, int src_rank, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        if constexpr (big) return shfl_labelled(::cpu_cuda::WarpOp::shfl_idx, v, src_rank, "thread_block_tile::shfl", file, line);
        return ::cpu_cuda::shuffle(file, line, ::cpu_cuda::WarpOp::shfl_idx, mask(), v, src_rank, N,
                                   "thread_block_tile::shfl");
    }
    template <class T>
    T shfl_up(T v, unsigned delta, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        return shfl_labelled(::cpu_cuda::WarpOp::shfl_up, v, (int)delta, "thread_block_tile::shfl_up", file, line);
    }
    template <class T>
    T shfl_down(T v, unsigned delta, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        return shfl_labelled(::cpu_cuda::WarpOp::shfl_down, v, (int)delta, "thread_block_tile::shfl_down", file, line);
    }
    template <class T>
    T shfl_xor(T v, unsigned lane_mask, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        return shfl_labelled(::cpu_cuda::WarpOp::shfl_bfly, v, (int)lane_mask, "thread_block_tile::shfl_xor", file, line);
    }
    // the reductions and scans below label their shuffles with their own name
    template <class T>
    T shfl_labelled(::cpu_cuda::WarpOp op, T v, int b, const char* label, const char* file, int line) const {
        if constexpr (big) {  // the source rank, by PTX's rules over the whole tile
            int r = (int)thread_rank();
            int src = op == ::cpu_cuda::WarpOp::shfl_up ? (r - b >= 0 ? r - b : r)
                    : op == ::cpu_cuda::WarpOp::shfl_down ? (r + b < (int)N ? r + b : r)
                    : op == ::cpu_cuda::WarpOp::shfl_bfly ? r ^ b : b % (int)N;
            return ::cpu_cuda::cg_detail::big_tile_exchange(N, v, src, label, file, line);
        } else {
            return ::cpu_cuda::shuffle(file, line, op, mask(), v, b, N, label);
        }
    }

  private:
    unsigned meta_rank_, meta_size_;
    static unsigned mask() { return ::cpu_cuda::cg_detail::tile_mask(big ? 32 : N); }
    int count(int pred, const char* call, const char* file, int line) const {  // big tiles' votes
        ::cpu_cuda::cg_detail::BigTile& t = ::cpu_cuda::cg_detail::big_tile(N);
        t.slots[thread_rank()][0] = pred != 0;
        ::cpu_cuda::cg_detail::big_tile_sync(N, call, file, line);
        int n = 0;
        for (unsigned r = 0; r < N; r++) n += t.slots[r][0];
        ::cpu_cuda::cg_detail::big_tile_sync(N, call, file, line);
        return n;
    }
};

template <unsigned N>
thread_block_tile<N, thread_block> tiled_partition(const thread_block& parent) {
    unsigned size = (unsigned)parent.size();
    return {(unsigned)parent.thread_rank() / N, (size + N - 1) / N};  // as CUDA's: the last tile may be short
}
template <unsigned N, unsigned M, class P>
thread_block_tile<N, thread_block_tile<M, P>> tiled_partition(const thread_block_tile<M, P>& parent) {
    static_assert(N <= M, "tiled_partition<N> of a tile of M threads needs N <= M");
    return {parent.thread_rank() / N, M / N};
}

// The threads of the warp that reach coalesced_threads() together (__activemask), ranked in lane
// order. Its shuffles name ranks, which are lanes only when the group is the whole warp.
class coalesced_group {
  public:
    explicit coalesced_group(unsigned mask) : mask_(mask) {}
    unsigned thread_rank() const { return __builtin_popcount(mask_ & ((1u << lane()) - 1)); }
    unsigned size() const { return __builtin_popcount(mask_); }
    unsigned long long num_threads() const { return size(); }
    unsigned meta_group_rank() const { return 0; }
    unsigned meta_group_size() const { return 1; }
    void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        ::cpu_cuda::warp_op(file, line, ::cpu_cuda::WarpOp::syncwarp, mask_, 0u, 0, 0, 0, "coalesced_group::sync");
    }
    template <class T>
    T shfl(T v, unsigned src_rank, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        return by_rank(v, (int)(src_rank % size()), "coalesced_group::shfl", file, line);
    }
    template <class T>
    T shfl_up(T v, unsigned delta, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        int r = (int)thread_rank() - (int)delta;
        return by_rank(v, r >= 0 ? r : (int)thread_rank(), "coalesced_group::shfl_up", file, line);
    }
    template <class T>
    T shfl_down(T v, unsigned delta, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        unsigned r = thread_rank() + delta;
        return by_rank(v, (int)(r < size() ? r : thread_rank()), "coalesced_group::shfl_down", file, line);
    }
    unsigned ballot(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        unsigned lanes = ::cpu_cuda::warp_op(file, line, ::cpu_cuda::WarpOp::ballot, mask_, 0u, 0, 0, pred != 0,
                                             "coalesced_group::ballot");
        unsigned out = 0, bit = 0;  // compacted: bit r is the thread of rank r
        for (unsigned l = 0; l < 32; l++)
            if (mask_ >> l & 1) out |= (lanes >> l & 1) << bit++;
        return out;
    }
    int any(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        return ballot(pred, file, line) != 0;
    }
    int all(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        unsigned b = ballot(pred, file, line);
        return b == (size() == 32 ? ~0u : (1u << size()) - 1);
    }

    unsigned lanes() const { return mask_; }  // the warp's lanes in the group (the runtime's own)

  private:
    unsigned mask_;
    static unsigned lane() { return ::cpu_cuda::cg_detail::block_rank() % 32; }
    template <class T>
    T by_rank(T v, int rank, const char* label, const char* file, int line) const {
        unsigned m = mask_;
        for (int k = 0; k < rank; k++) m &= m - 1;  // drop the lower set bits
        int src = __builtin_ctz(m);
        return ::cpu_cuda::shuffle(file, line, ::cpu_cuda::WarpOp::shfl_idx, mask_, v, src, 32, label);
    }
};
inline coalesced_group coalesced_threads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return coalesced_group(::cpu_cuda::activemask(file, line));
}

// labeled_partition(parent, label): the parent's threads split into coalesced groups of equal
// label; binary_partition(parent, pred) the same for a bool. The parent is a coalesced group or a
// tile of up to 32 threads, every thread of which must make the call (the programming guide).
// How: a ballot per bit of the label, each keeping the lanes that agree on it, until no lane has
// a higher bit set (two votes a bit: 8 for a label below 16).
namespace partition_detail {
inline unsigned same_label_lanes(unsigned parent, unsigned label, const char* call, const char* file, int line) {
    unsigned same = parent;
    for (unsigned b = 0; b < 32; b++) {
        const unsigned bit = label >> b & 1;
        const unsigned ones = ::cpu_cuda::warp_op(file, line, ::cpu_cuda::WarpOp::ballot, parent, 0u, 0, 0, bit, call);
        same &= bit ? ones : ~ones;
        const unsigned higher = b < 31 ? label >> (b + 1) : 0;
        if (!::cpu_cuda::warp_op(file, line, ::cpu_cuda::WarpOp::ballot, parent, 0u, 0, 0, higher != 0, call)) break;
    }
    return same;
}
template <unsigned N, class P>
unsigned parent_lanes(const thread_block_tile<N, P>&) {
    static_assert(N <= 32, "labeled_partition and binary_partition take a tile of up to 32 threads");
    return ::cpu_cuda::cg_detail::tile_mask(N);
}
inline unsigned parent_lanes(const coalesced_group& g) { return g.lanes(); }
}  // namespace partition_detail
template <class Parent>
coalesced_group labeled_partition(const Parent& parent, unsigned label, const char* file = __builtin_FILE(),
                                  int line = __builtin_LINE()) {
    return coalesced_group(partition_detail::same_label_lanes(partition_detail::parent_lanes(parent),
                                                                    label, "labeled_partition", file, line));
}
template <class Parent>
coalesced_group binary_partition(const Parent& parent, bool pred, const char* file = __builtin_FILE(),
                                 int line = __builtin_LINE()) {
    return coalesced_group(partition_detail::same_label_lanes(partition_detail::parent_lanes(parent),
                                                                    pred, "binary_partition", file, line));
}

// A block or a tile, chosen at run time (tiled_partition(parent, n), or a group passed as one)
class thread_group {
  public:
    thread_group(const thread_block&) : tile_(0) {}
    template <unsigned N, class P>
    thread_group(const thread_block_tile<N, P>&) : tile_(N) {}
    explicit thread_group(unsigned tile) : tile_(tile) {}
    void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        if (tile_ == 0) return ::cpu_cuda::syncthreads(file, line);
        ::cpu_cuda::cg_detail::tile_vote("thread_group::sync", file, line, tile_, 1, ::cpu_cuda::WarpOp::syncwarp);
    }
    unsigned long long thread_rank() const {
        return tile_ ? ::cpu_cuda::cg_detail::block_rank() % tile_ : ::cpu_cuda::cg_detail::block_rank();
    }
    unsigned long long size() const { return tile_ ? tile_ : ::cpu_cuda::cg_detail::block_size(); }
    unsigned long long num_threads() const { return size(); }

  private:
    unsigned tile_;  // 0: the whole block
};
inline thread_group tiled_partition(const thread_group& parent, unsigned n, const char* file = __builtin_FILE(),
                                    int line = __builtin_LINE()) {
    if (n == 0 || n > 32 || (n & (n - 1)) || (parent.size() % n))
        ::cpu_cuda::cg_detail::fail("tiled_partition", file, line,
                                    "tile size " + std::to_string(n) +
                                        " must be a power of two up to 32 that divides the parent's " +
                                        std::to_string(parent.size()) + " threads");
    return thread_group(n);
}
template <class Group>
void sync(const Group& g, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    g.sync(file, line);
}

// ---- the functions of reduce and scan (CUDA's: less and greater answer the smaller or
// larger value, not a bool)
template <class T>
struct plus {
    T operator()(T a, T b) const { return a + b; }
};
template <class T>
struct less {
    T operator()(T a, T b) const { return (b < a) ? b : a; }
};
template <class T>
struct greater {
    T operator()(T a, T b) const { return (a < b) ? b : a; }
};
template <class T>
struct bit_and {
    T operator()(T a, T b) const { return a & b; }
};
template <class T>
struct bit_or {
    T operator()(T a, T b) const { return a | b; }
};
template <class T>
struct bit_xor {
    T operator()(T a, T b) const { return a ^ b; }
};

// (each takes the call site's file and line as defaulted arguments, for messages)

template <unsigned N, class P, class T, class Op>
auto reduce(const thread_block_tile<N, P>& g, T val, Op op, const char* file = __builtin_FILE(),
            int line = __builtin_LINE()) -> std::decay_t<decltype(op(val, val))> {
    using R = std::decay_t<decltype(op(val, val))>;
    R out = val;
    for (int m = (int)N >> 1; m > 0; m >>= 1)
        out = op(out, g.shfl_labelled(::cpu_cuda::WarpOp::shfl_bfly, out, m, "cooperative_groups::reduce", file,
                                      line));
    return out;
}

// A coalesced group (coalesced_threads(), labeled_partition, binary_partition), in CUDA's order
// (cooperative_groups/details/coalesced_reduce.h): the butterfly when it is the whole warp,
// otherwise a Hillis-Steele scan over ranks, op(out, value of rank r - i), whose last rank's
// result every thread gets.
template <class T, class Op>
auto inclusive_scan(const coalesced_group& g, T val, Op op, const char* file = __builtin_FILE(),
                    int line = __builtin_LINE()) -> std::decay_t<decltype(op(val, val))> {
    using R = std::decay_t<decltype(op(val, val))>;
    R out = val;
    const unsigned n = g.size(), r = g.thread_rank();
    for (unsigned i = 1; i < n; i <<= 1) {
        R earlier = g.shfl(out, i <= r ? r - i : r, file, line);
        if (i <= r) out = op(out, earlier);
    }
    return out;
}
template <class T, class Op>
auto reduce(const coalesced_group& g, T val, Op op, const char* file = __builtin_FILE(),
            int line = __builtin_LINE()) -> std::decay_t<decltype(op(val, val))> {
    using R = std::decay_t<decltype(op(val, val))>;
    const unsigned n = g.size(), r = g.thread_rank();
    if (n == 32) {
        R out = val;
        for (unsigned m = 16; m > 0; m >>= 1) out = op(out, g.shfl(out, r ^ m, file, line));
        return out;
    }
    return g.shfl(inclusive_scan(g, val, op, file, line), n - 1, file, line);
}

template <unsigned N, class P, class T, class Op>
auto inclusive_scan(const thread_block_tile<N, P>& g, T val, Op op, const char* file = __builtin_FILE(),
                    int line = __builtin_LINE()) -> std::decay_t<decltype(op(val, val))> {
    using R = std::decay_t<decltype(op(val, val))>;
    R out = val;
    for (unsigned m = 1; m < N; m <<= 1) {
        R earlier = g.shfl_labelled(::cpu_cuda::WarpOp::shfl_up, out, (int)m, "cooperative_groups::inclusive_scan",
                                    file, line);
        if (m <= g.thread_rank()) out = op(out, earlier);
    }
    return out;
}
template <unsigned N, class P, class T>
T inclusive_scan(const thread_block_tile<N, P>& g, T val, const char* file = __builtin_FILE(),
                 int line = __builtin_LINE()) {
    return inclusive_scan(g, val, plus<T>(), file, line);
}

template <unsigned N, class P, class T, class Op>
auto exclusive_scan(const thread_block_tile<N, P>& g, T val, Op op, const char* file = __builtin_FILE(),
                    int line = __builtin_LINE()) -> std::decay_t<decltype(op(val, val))> {
    using R = std::decay_t<decltype(op(val, val))>;
    R inclusive = inclusive_scan(g, val, op, file, line);
    R before = g.shfl_labelled(::cpu_cuda::WarpOp::shfl_up, inclusive, 1, "cooperative_groups::exclusive_scan",
                               file, line);
    return g.thread_rank() == 0 ? R{} : before;
}
template <unsigned N, class P, class T>
T exclusive_scan(const thread_block_tile<N, P>& g, T val, const char* file = __builtin_FILE(),
                 int line = __builtin_LINE()) {
    return exclusive_scan(g, val, plus<T>(), file, line);
}

}  // namespace cooperative_groups
