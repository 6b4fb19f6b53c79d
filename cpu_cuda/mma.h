// cpu_cuda/mma.h: the PTX instructions of gpu/mma.cuh (mma.sync m16n8k16 bf16, ldmatrix .x4
// and .x4.trans, cp.async 16 bytes with commit and wait groups) on the CPU runtime.
//
// Why: inline PTX cannot run here (g++ hands it to the assembler), but gpu/mma.cuh puts the
// few instructions the attention kernels use behind functions, and on the CPU runtime those
// names come from this file. Unlike WMMA (wmma.h), these instructions have a documented
// register layout (PTX ISA, "Matrix fragments for mma.m16n8k16 with floating point type",
// "ldmatrix"), which kernels rely on, so it is reproduced exactly, lane by lane. The table of
// which lane holds which element (A, B and C of mma.m16n8k16, and what ldmatrix .x4 gives each
// lane) is written once, at the top of gpu/mma.cuh; below, g = lane / 4 and i = lane % 4 as
// there. (A comment reference only: nothing here includes a file from gpu/.)
// The products are exact (a product of two bf16 fits in float) and the sums float32, added in
// k order onto c: tensor-core rounding is not reproduced, as in wmma.h, so results need
// bf16-level tolerances.
//
// Checked, each failing the launch with the instruction, the reason and the caller's line:
//   * mma and ldmatrix are warp collectives (.sync.aligned): every lane of the warp must reach
//     the same call, or the launch names the lanes that did not;
//   * ldmatrix: each lane's row address is 16-byte aligned and its 16 bytes lie in this block's
//     shared memory (dynamic, or a __shared__ variable declared in a function);
//   * cp.async: both addresses 16-byte aligned, the destination's 16 bytes in shared memory,
//     the source not in shared memory, src_bytes from 0 to 16.
//
// How: mma and ldmatrix stage what each lane brings (its registers; the 16 bytes of its row)
// in a per-warp area, wait for the whole warp (a vote, as __ballot_sync), then each lane
// computes or gathers its own registers. The staging area has two slots, used by a lane's
// calls in turn (the argument in wmma.h: a lane that has gone on to its next call writes the
// other slot, and cannot come back to this one before every lane has reached that next call,
// so after reading this one). ldmatrix reads each row when its lane arrives, so a lane that
// moves on and stores to the tile cannot change what a slower lane of the same instruction
// receives.
//
// cp.async is deferred, as on a GPU: cp_async_16 reads its source at once (a bad source
// faults in the caller's frame) but writes shared memory only when cp_async_wait<N>() retires
// its group, so a kernel that reads a tile before waiting sees the old contents (NaN bytes,
// where nothing was written before). Copies are per CUDA thread: uncommitted copies belong to
// no group, and wait<N> completes every committed group but the N newest. Copies a thread
// still has in flight when it returns from the kernel are completed then (a GPU completes
// them too; reading them from another thread without a wait is a race either way).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "exec.h"

namespace cpu_cuda {
namespace ptx_detail {

inline unsigned lane() { return current_lane->id % 32; }
inline unsigned warp() { return current_lane->id / 32; }
inline unsigned block_threads() {
    const dim3 d = current_block->launch->block;
    return d.x * d.y * d.z;
}

[[noreturn, gnu::noinline, gnu::cold]] inline void fail(const char* what, const char* file, int line,
                                                         const std::string& why) {
    current_block->fail(std::string(what) + " at " + file + ":" + std::to_string(line) + ": " + why);
}
[[noreturn, gnu::noinline, gnu::cold]] inline void fail(WarpOp op, const char* file, int line, const std::string& why) {
    fail(warp_op_name(op), file, line, why);
}
inline std::string address(const void* p) {
    char buf[32];
    snprintf(buf, sizeof buf, "%p", p);
    return buf;
}

// Waits for the whole warp; fails if a lane cannot arrive (it exited, or does not exist).
inline void whole_warp(WarpOp op, const char* file, int line) {
    unsigned arrived = warp_op(file, line, op, 0xffffffffu, 0u, 0, 0, 1);
    if (arrived == 0xffffffffu) return;
    std::vector<unsigned> missing;
    for (unsigned l = 0; l < 32; l++)
        if (!(arrived >> l & 1)) missing.push_back(l);
    fail(op, file, line,
         "lanes " + id_ranges(missing) + " of warp " + std::to_string(warp()) +
             " did not take part (they exited, or the block's last warp is partial): every lane of the warp must "
             "execute a .sync.aligned instruction together");
}

// One warp's staging area in one slot.
struct WarpStage {
    float a[16][16];                  // mma: A, row-major
    float bt[8][16];                  // mma: B transposed ([n][k]), so a dot product runs over k
    alignas(16) uint16_t rows[32][8]; // ldmatrix: the 16 bytes each lane's row address points to
};
// Per OS thread (one block at a time): two slots per warp, and per CUDA thread how many
// staging calls it has made in this block.
struct Staging {
    std::vector<WarpStage> slots[2];
    std::vector<uint32_t> calls;
    uint64_t block = ~0ull;  // the block (Block::generation) the counts belong to
};
// This lane's area for its next staging call.
inline WarpStage& next_stage() {
    static thread_local Staging s;
    const unsigned threads = block_threads(), warps = (threads + 31) / 32;
    if (s.block != current_block->generation) {
        for (auto& slot : s.slots)
            if (slot.size() < warps) slot.resize(warps);
        s.calls.assign(threads, 0), s.block = current_block->generation;
    }
    const int slot = (int)(s.calls[current_lane->id]++ & 1);
    return s.slots[slot][warp()];
}

inline uint16_t lo(uint32_t r) { return (uint16_t)(r & 0xffff); }
inline uint16_t hi(uint32_t r) { return (uint16_t)(r >> 16); }
inline float bf16_bits_to_float(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
inline uint32_t pack(uint16_t low, uint16_t high) { return (uint32_t)low | (uint32_t)high << 16; }

// acc + Σ_k a[k]·b[k], in k order; each product is exact, so fmaf rounds once per step.
inline float dot16(const float* a, const float* b, float acc) {
    for (int k = 0; k < 16; k++) acc = fmaf(a[k], b[k], acc);
    return acc;
}

// ldmatrix's shared part: checks this lane's row, stages its 16 bytes, waits for the warp.
inline WarpStage& stage_row(WarpOp op, const void* row, const char* file, int line) {
    if ((uintptr_t)row % 16)
        fail(op, file, line,
             "lane " + std::to_string(lane()) + "'s row address " + address(row) + " is not 16-byte aligned");
    if (!in_shared_memory(row, 16))
        fail(op, file, line,
             "lane " + std::to_string(lane()) + "'s row address " + address(row) +
                 " is not in this block's shared memory (ldmatrix reads shared memory only)");
    WarpStage& st = next_stage();
    memcpy(st.rows[lane()], row, 16);
    whole_warp(op, file, line);
    return st;
}

// ---- cp.async: per CUDA thread, the copies issued and not yet written

struct Copy {
    void* dst;
    uint32_t group;  // the commit that closes it: the thread's count of commits when issued
    alignas(16) unsigned char data[16];
};
struct ThreadCopies {
    std::vector<Copy> pending;  // in issue order, so in group order; [0, done) are written
    size_t done = 0;
    uint32_t committed = 0;     // commit_group calls so far
};
// Per OS thread (one block at a time), per CUDA thread of the block.
struct AsyncCopies {
    std::vector<ThreadCopies> threads;
    uint64_t block = ~0ull;
};
inline AsyncCopies& async_copies() {
    static thread_local AsyncCopies a;
    return a;
}
// This CUDA thread's copies, after a reset when a new block starts (capacity is kept).
inline ThreadCopies& my_copies() {
    AsyncCopies& a = async_copies();
    if (a.block != current_block->generation) {
        unsigned threads = block_threads();
        if (a.threads.size() < threads) a.threads.resize(threads);
        for (ThreadCopies& t : a.threads) t.pending.clear(), t.done = 0, t.committed = 0;
        a.block = current_block->generation;
    }
    return a.threads[current_lane->id];
}
// Writes this thread's copies of the groups before `group` (all of them: ~0u).
inline void retire_before(ThreadCopies& t, uint32_t group) {
    while (t.done < t.pending.size() && t.pending[t.done].group < group) {
        const Copy& c = t.pending[t.done++];
        memcpy(c.dst, c.data, 16);
    }
    if (t.done == t.pending.size()) {
        t.pending.clear(), t.done = 0;
    } else if (t.done >= 64 && 2 * t.done >= t.pending.size()) {  // a pipeline never drains: compact
        t.pending.erase(t.pending.begin(), t.pending.begin() + (ptrdiff_t)t.done), t.done = 0;
    }
}
// exec.h calls this as each CUDA thread returns from the kernel.
inline void complete_at_exit() {
    AsyncCopies& a = async_copies();
    if (a.block != current_block->generation) return;  // no cp.async in this block
    retire_before(a.threads[current_lane->id], ~0u);
}
inline const bool exit_hook_installed = (on_thread_exit = &complete_at_exit, true);

}  // namespace ptx_detail

namespace ptx {

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: c (16×8) += a (16×16) · b (16×8).
inline void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                           const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    using namespace ptx_detail;
    WarpStage& st = next_stage();
    const unsigned g = lane() / 4, i = lane() % 4;
    // this lane's registers to their places (the layouts: gpu/mma.cuh's table)
    const uint16_t a_half[4][2] = {{lo(a[0]), hi(a[0])}, {lo(a[1]), hi(a[1])}, {lo(a[2]), hi(a[2])},
                                   {lo(a[3]), hi(a[3])}};
    const unsigned a_row[4] = {g, g + 8, g, g + 8}, a_k[4] = {2 * i, 2 * i, 2 * i + 8, 2 * i + 8};
    for (int r = 0; r < 4; r++)
        for (int h = 0; h < 2; h++) st.a[a_row[r]][a_k[r] + h] = bf16_bits_to_float(a_half[r][h]);
    for (int r = 0; r < 2; r++) {
        st.bt[g][2 * i + 8 * r] = bf16_bits_to_float(lo(b[r]));
        st.bt[g][2 * i + 8 * r + 1] = bf16_bits_to_float(hi(b[r]));
    }
    whole_warp(WarpOp::ptx_mma, file, line);
    // this lane's four outputs: rows g and g+8, columns 2i and 2i+1
    c[0] = dot16(st.a[g], st.bt[2 * i], c[0]);
    c[1] = dot16(st.a[g], st.bt[2 * i + 1], c[1]);
    c[2] = dot16(st.a[g + 8], st.bt[2 * i], c[2]);
    c[3] = dot16(st.a[g + 8], st.bt[2 * i + 1], c[3]);
}

// ldmatrix.sync.aligned.m8n8.x4.shared.b16: four 8×8 b16 matrices from shared memory.
inline void ldmatrix_x4(uint32_t (&r)[4], const void* row, const char* file = __builtin_FILE(),
                        int line = __builtin_LINE()) {
    using namespace ptx_detail;
    WarpStage& st = stage_row(WarpOp::ptx_ldmatrix, row, file, line);
    const unsigned g = lane() / 4, i = lane() % 4;
    for (unsigned j = 0; j < 4; j++) {
        const uint16_t* src = st.rows[8 * j + g];  // matrix j, row g
        r[j] = pack(src[2 * i], src[2 * i + 1]);
    }
}

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: the same, each matrix transposed.
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
    using namespace ptx_detail;
    WarpStage& st = stage_row(WarpOp::ptx_ldmatrix_trans, row, file, line);
    const unsigned g = lane() / 4, i = lane() % 4;
    for (unsigned j = 0; j < 4; j++)  // matrix j, rows 2i and 2i+1, column g
        r[j] = pack(st.rows[8 * j + 2 * i][g], st.rows[8 * j + 2 * i + 1][g]);
}

// movmatrix.sync.aligned.m8n8.trans.b16: one 8×8 matrix, lane l holding (row g, columns 2i,
// 2i+1), becomes its transpose in the same layout: lane l receives (rows 2i, 2i+1, column g).
inline uint32_t movmatrix_trans(uint32_t x, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    using namespace ptx_detail;
    WarpStage& st = next_stage();
    const unsigned g = lane() / 4, i = lane() % 4;
    st.rows[g][2 * i] = lo(x), st.rows[g][2 * i + 1] = hi(x);
    whole_warp(WarpOp::ptx_movmatrix, file, line);
    return pack(st.rows[2 * i][g], st.rows[2 * i + 1][g]);
}

// cp.async.cg.shared.global [dst], [src], 16, src_bytes: the first src_bytes of src, then
// zeros, to dst once the group is waited for.
inline void cp_async_16(void* dst_shared, const void* src_global, int src_bytes = 16,
                        const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    using namespace ptx_detail;
    const char* what = "cp.async.cg.shared.global (cp_async_16)";
    if ((uintptr_t)dst_shared % 16 || (uintptr_t)src_global % 16)
        fail(what, file, line,
             "the " + std::string((uintptr_t)dst_shared % 16 ? "destination " + address(dst_shared)
                                                             : "source " + address(src_global)) +
                 " is not 16-byte aligned (thread " + std::to_string(current_lane->id) + ")");
    if (src_bytes < 0 || src_bytes > 16)
        fail(what, file, line, "src_bytes is " + std::to_string(src_bytes) + ", not 0 to 16");
    if (!in_shared_memory(dst_shared, 16))
        fail(what, file, line,
             "the destination " + address(dst_shared) + " is not in this block's shared memory (thread " +
                 std::to_string(current_lane->id) + ")");
    if (src_bytes > 0 && in_shared_memory(src_global, 1))
        fail(what, file, line,
             "the source " + address(src_global) + " is in shared memory; cp.async copies from global memory (thread " +
                 std::to_string(current_lane->id) + ")");
    ThreadCopies& t = my_copies();
    t.pending.emplace_back();
    Copy& c = t.pending.back();
    c.dst = dst_shared, c.group = t.committed;
    memcpy(c.data, src_global, (size_t)src_bytes);
    memset(c.data + src_bytes, 0, 16 - (size_t)src_bytes);
}

// cp.async.commit_group: closes this thread's group of the copies issued since the last one.
inline void cp_async_commit(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    (void)file, (void)line;
    ptx_detail::my_copies().committed++;
}

// cp.async.wait_group N: completes this thread's committed groups but the N newest.
template <int N>
inline void cp_async_wait(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    static_assert(N >= 0, "cp.async.wait_group takes a count from 0");
    (void)file, (void)line;
    ptx_detail::ThreadCopies& t = ptx_detail::my_copies();
    if (t.committed > (uint32_t)N) ptx_detail::retire_before(t, t.committed - (uint32_t)N);
}

}  // namespace ptx
}  // namespace cpu_cuda
