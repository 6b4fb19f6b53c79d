// cpu_cuda/mma.h: the tensor-core instructions of gpu/mma.cuh on the CPU runtime:
// mma.sync.m16n8k16 (bf16 in, float32 sums), ldmatrix .x4 (and .trans), and cp.async with its
// commit and wait groups. gpu/mma.cuh uses these names where a GPU build has inline PTX, so a
// kernel written for the documented register layouts runs here unchanged.
//
// Unlike WMMA's fragments (wmma.h), these layouts are documented, lane by lane, in the PTX ISA
// ("Matrix fragments for mma.m16n8k16", "ldmatrix"), and kernels rely on them (FlashAttention
// reuses an accumulator as the next product's A operand). So the runtime implements exactly
// those layouts, with g = lane / 4 and i = lane % 4, two bf16 to a 32-bit register (the lower
// index in the low half):
//   A (16×16): a0 (g, 2i..2i+1)  a1 (g+8, 2i..)  a2 (g, 2i+8..)  a3 (g+8, 2i+8..)
//   B (16×8):  b0 (k 2i..2i+1, n g)  b1 (k 2i+8..2i+9, n g)
//   C (16×8):  c0 (g, 2i)  c1 (g, 2i+1)  c2 (g+8, 2i)  c3 (g+8, 2i+1)
//   ldmatrix:  lanes 8j..8j+7 give the rows of matrix j; lane l receives r[j] = (row l/4,
//              columns 2(l%4), 2(l%4)+1), or with .trans (rows 2(l%4), 2(l%4)+1, column l/4).
//
// What the hardware requires is checked, and a violation fails the launch with one line naming
// the instruction, the file and line, and the lane:
//   * mma.sync and ldmatrix are warp collectives: every lane of the warp takes part (".aligned");
//   * ldmatrix rows and both cp.async addresses are 16-byte aligned; ldmatrix reads, and
//     cp.async writes, this block's shared memory (dynamic, or a __shared__ variable);
//   * cp.async copies at most 16 bytes of its 16 from the source (src-size), zeros the rest.
// A cp.async copy is performed when a cp_async_wait<N>() retires its group, not when it is
// issued, so a kernel that reads its tile before waiting sees the old contents, as it could on
// a GPU. Products are exact (bf16 × bf16 fits in float) and summed in float32 in k order onto
// c; the tensor cores' own rounding of the sum is not reproduced.
//
// How: like wmma.h, a collective stages each lane's registers (or row address) per warp in
// one of two slots, waits for the whole warp (a vote), and then each lane reads what it needs.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "exec.h"
#include "wmma.h"

namespace cpu_cuda {
namespace ptx {
namespace detail {

inline float bf16_bits_to_float(uint32_t bits16) {
    uint32_t b = bits16 << 16;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}
inline float low(uint32_t r) { return bf16_bits_to_float(r & 0xffffu); }
inline float high(uint32_t r) { return bf16_bits_to_float(r >> 16); }

[[noreturn]] inline void fail(WarpOp op, const char* file, int line, const std::string& why) {
    wmma_detail::fail(op, file, line, why);
}
inline std::string hex(const void* p) {
    char b[32];
    snprintf(b, sizeof b, "%p", p);
    return b;
}

// cp.async's copies of one CUDA thread, in order of issue, with the group each belongs to.
struct Copy {
    void* dst;
    const void* src;
    int bytes;
    uint32_t group;
};
struct AsyncCopies {
    std::vector<std::vector<Copy>> pending;  // per thread of the block
    std::vector<uint32_t> open_group;        // per thread: the group its next copy joins
    uint64_t block = ~0ull;
};
inline AsyncCopies& async_copies() {
    static thread_local AsyncCopies a;
    const dim3 d = current_block->launch->block;
    const size_t threads = (size_t)d.x * d.y * d.z;
    if (a.block != current_block->generation) {  // a new block: nothing in flight
        if (a.pending.size() < threads) a.pending.resize(threads);
        for (auto& p : a.pending) p.clear();
        a.open_group.assign(threads, 0);
        a.block = current_block->generation;
    }
    return a;
}

}  // namespace detail

// c (16×8 float32) += a (16×16 bf16) · b (16×8 bf16).
inline void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                           const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    using namespace wmma_detail;
    Staging& s = staging(block_threads());
    float* A = s.matrices[next_slot(s)].data() + (size_t)warp() * 3 * ELEMENTS;  // 16×16, row-major
    float* B = A + ELEMENTS;                                                      // 16×8 (k × n), row-major
    const int g = (int)lane() / 4, i = (int)lane() % 4;
    for (int half = 0; half < 2; half++) {  // a[0], a[1] at k 2i.., a[2], a[3] at k 2i+8..
        const int k = 2 * i + 8 * half;
        A[g * 16 + k] = detail::low(a[2 * half]), A[g * 16 + k + 1] = detail::high(a[2 * half]);
        A[(g + 8) * 16 + k] = detail::low(a[2 * half + 1]), A[(g + 8) * 16 + k + 1] = detail::high(a[2 * half + 1]);
        B[k * 8 + g] = detail::low(b[half]), B[(k + 1) * 8 + g] = detail::high(b[half]);
    }
    whole_warp(WarpOp::mma_sync, file, line);
    for (int e = 0; e < 4; e++) {
        const int row = g + 8 * (e / 2), col = 2 * i + e % 2;
        float acc = c[e];
        for (int k = 0; k < 16; k++) acc = fmaf(A[row * 16 + k], B[k * 8 + col], acc);
        c[e] = acc;
    }
}

namespace detail {
// ldmatrix .x4, transposed or not: see the header.
inline void ldmatrix(uint32_t (&r)[4], const void* row, bool trans, const char* file, int line) {
    using namespace wmma_detail;
    Staging& s = staging(block_threads());
    Args* args = s.args[next_slot(s)].data() + (size_t)warp() * 32;
    const unsigned l = lane();
    args[l].ptr = row;
    if ((uintptr_t)row % 16)
        fail(WarpOp::ldmatrix, file, line,
             "lane " + std::to_string(l) + "'s row address " + hex(row) + " is not 16-byte aligned");
    if (!current_block->in_shared(row, 16))
        fail(WarpOp::ldmatrix, file, line,
             "lane " + std::to_string(l) + "'s row address " + hex(row) +
                 " is not in the block's shared memory (ldmatrix reads shared memory only)");
    whole_warp(WarpOp::ldmatrix, file, line);
    for (int j = 0; j < 4; j++) {
        uint16_t lo, hi;
        if (!trans) {
            const uint16_t* e = (const uint16_t*)args[8 * j + l / 4].ptr + 2 * (l % 4);
            lo = e[0], hi = e[1];
        } else {
            lo = ((const uint16_t*)args[8 * j + 2 * (l % 4)].ptr)[l / 4];
            hi = ((const uint16_t*)args[8 * j + 2 * (l % 4) + 1].ptr)[l / 4];
        }
        r[j] = (uint32_t)lo | (uint32_t)hi << 16;
    }
}
}  // namespace detail

inline void ldmatrix_x4(uint32_t (&r)[4], const void* row, const char* file = __builtin_FILE(),
                        int line = __builtin_LINE()) {
    detail::ldmatrix(r, row, false, file, line);
}
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
    detail::ldmatrix(r, row, true, file, line);
}

// 16 bytes to shared memory: the first src_bytes from src_global, zeros after; performed when
// a cp_async_wait retires its group.
inline void cp_async_16(void* dst_shared, const void* src_global, int src_bytes = 16,
                        const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    auto refuse = [&](const std::string& why) {
        current_block->fail("cp.async at " + std::string(file) + ":" + std::to_string(line) + ": thread " +
                            std::to_string(current_lane->id) + ": " + why);
    };
    if ((uintptr_t)dst_shared % 16 || (uintptr_t)src_global % 16)
        refuse("the addresses " + detail::hex(dst_shared) + " (shared) and " + detail::hex(src_global) +
               " (global) must both be 16-byte aligned");
    if (!current_block->in_shared(dst_shared, 16))
        refuse("the destination " + detail::hex(dst_shared) + " is not in the block's shared memory");
    if (src_bytes < 0 || src_bytes > 16)
        refuse("src-size " + std::to_string(src_bytes) + " is not within 0..16");
    detail::AsyncCopies& a = detail::async_copies();
    const unsigned me = current_lane->id;
    a.pending[me].push_back({dst_shared, src_global, src_bytes, a.open_group[me]});
}
// Closes this thread's group of copies issued since the last commit.
inline void cp_async_commit(const char* = __builtin_FILE(), int = __builtin_LINE()) {
    detail::async_copies().open_group[current_lane->id]++;
}
// Performs this thread's copies of every committed group but the N newest.
template <int N>
inline void cp_async_wait(const char* = __builtin_FILE(), int = __builtin_LINE()) {
    static_assert(N >= 0, "cp.async.wait_group takes a count of groups");
    detail::AsyncCopies& a = detail::async_copies();
    const unsigned me = current_lane->id;
    std::vector<detail::Copy>& pending = a.pending[me];
    const uint32_t committed = a.open_group[me];
    size_t kept = 0;
    for (const detail::Copy& c : pending) {
        if (c.group + N < committed) {  // a group older than the N newest committed ones
            memcpy(c.dst, c.src, (size_t)c.bytes);
            memset((char*)c.dst + c.bytes, 0, 16 - (size_t)c.bytes);
        } else {
            pending[kept++] = c;
        }
    }
    pending.resize(kept);
}

}  // namespace ptx
}  // namespace cpu_cuda
