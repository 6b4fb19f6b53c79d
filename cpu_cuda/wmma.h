// cpu_cuda/wmma.h: nvcuda::wmma, CUDA's warp matrix (tensor-core) API, on the CPU runtime.
//
// What is here: the m16n16k16 shape; matrix_a and matrix_b fragments of __nv_bfloat16 or
// __half, row- or column-major; float accumulators; and the m16n16k8 shape with
// wmma::precision::tf32 (the programming guide's "alternate floating point" WMMA: the fragments
// hold float, A is 16x8 and B 8x16, and the product takes each input rounded to tf32, a 10-bit
// mantissa, to nearest with ties away from zero, as wmma::__float_to_tf32 rounds); fill_fragment, load_matrix_sync,
// store_matrix_sync (with the leading dimension, and the layout for accumulators) and
// mma_sync (d = a·b + c). The products are exact (bf16 and fp16 products fit in float) and
// the sums float32, added in k order onto c: tensor-core rounding is not reproduced, so a
// bf16 kernel's results need bf16-level tolerances, as everywhere on this runtime.
//
// As on a GPU:
//   * each call is a warp collective: every lane of the warp must reach the same call, or
//     the launch fails naming it (lanes that exited or skipped it, or a block whose last
//     warp is partial); all lanes must pass the same pointer, leading dimension and layout;
//   * the pointer must be 256-bit (32-byte) aligned and the leading dimension a multiple of
//     16 bytes, the documented requirements;
//   * which lane holds which element of a fragment is unspecified. Code may apply the same
//     operation to every x[i] (scaling, conversion), never one that depends on the mapping.
//     CPU_CUDA_WMMA_LAYOUT=shuffled permutes the mapping, differently for matrix_a,
//     matrix_b and the accumulator, so that code which depends on it gives wrong results
//     (CI runs the tensor-core kernels' tests under it too).
//
// How: a call stages each lane's elements (or arguments) per warp, waits for the whole
// warp (a vote, as __ballot_sync), then each lane computes or moves its own elements. The
// staging area has two slots, used by a lane's calls in turn: a lane that has gone on to its
// next call writes the other slot, and cannot come back to this one before every lane has
// reached that next call, so after reading this one.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "exec.h"
#include "settings.h"

namespace cpu_cuda {
namespace wmma_detail {

constexpr int TILE = 16, ELEMENTS = TILE * TILE, PER_LANE = ELEMENTS / 32;  // 8 elements per lane
enum Kind { kind_a = 0, kind_b = 1, kind_acc = 2, kind_a_tf32 = 3, kind_b_tf32 = 4 };  // (tf32: m16n16k8's A, B)
constexpr int KINDS = 5;
inline constexpr int kind_elements(int kind) { return kind >= kind_a_tf32 ? TILE * 8 : ELEMENTS; }

// float to tf32 (kept in a float): 10 of the 23 mantissa bits, rounded to nearest with ties
// away from zero (PTX's cvt.rna.tf32.f32, which wmma::__float_to_tf32 is); NaN and infinity kept.
inline float to_tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;  // (a carry into the exponent is right)
    memcpy(&x, &u, 4);
    return x;
}

// position[kind][lane·8 + slot] = the element (row·16 + column) that lane holds in slot:
// lane-major in the natural layout, a fixed permutation per kind when shuffled.
inline const std::vector<int>& position(int kind) {
    using Tables = std::array<std::array<std::vector<int>, KINDS>, 2>;  // [shuffled][kind]
    static const Tables tables = [] {
        Tables t;
        for (int k = 0; k < KINDS; k++) {
            for (int shuffled = 0; shuffled < 2; shuffled++) {
                t[shuffled][k].resize(kind_elements(k));
                for (int i = 0; i < kind_elements(k); i++) t[shuffled][k][i] = i;
            }
            std::mt19937 rng(20 + k);
            std::shuffle(t[1][k].begin(), t[1][k].end(), rng);
        }
        return t;
    }();
    return tables[settings().wmma_shuffled ? 1 : 0][kind];
}

struct Args {
    const void* ptr;
    unsigned ldm;
    int layout;
};
// Per OS thread (one block at a time), in two slots: each warp's staged matrices, each
// lane's arguments; and per lane, how many staging calls it has made in this block.
struct Staging {
    std::vector<float> matrices[2];  // per warp: a, b, c as 16×16 row-major
    std::vector<Args> args[2];       // per thread of the block
    std::vector<uint32_t> calls;     // per thread of the block
    uint64_t block = ~0ull;          // the block (Block::generation) the counts belong to
};
inline Staging& staging(unsigned threads) {
    static thread_local Staging s;
    unsigned warps = (threads + 31) / 32;
    for (int slot = 0; slot < 2; slot++) {
        if (s.matrices[slot].size() < (size_t)warps * 3 * ELEMENTS) s.matrices[slot].resize((size_t)warps * 3 * ELEMENTS);
        if (s.args[slot].size() < warps * 32) s.args[slot].resize(warps * 32);
    }
    if (s.block != current_block->generation) s.calls.assign(warps * 32, 0), s.block = current_block->generation;
    return s;
}
// The slot of this lane's next staging call.
inline int next_slot(Staging& s) { return (int)(s.calls[current_lane->id]++ & 1); }

[[noreturn]] inline void fail(WarpOp op, const char* file, int line, const std::string& why) {
    current_block->fail(std::string(warp_op_name(op)) + " at " + file + ":" + std::to_string(line) + ": " + why);
}

// Waits for the whole warp; fails if a lane cannot arrive (it exited, or does not exist).
inline void whole_warp(WarpOp op, const char* file, int line) {
    unsigned arrived = warp_op(file, line, op, 0xffffffffu, 0u, 0, 0, 1);
    if (arrived != 0xffffffffu) {
        std::vector<unsigned> missing;
        for (unsigned l = 0; l < 32; l++)
            if (!(arrived >> l & 1)) missing.push_back(l);
        fail(op, file, line,
             "lanes " + id_ranges(missing) + " of warp " + std::to_string(current_lane->id / 32) +
                 " did not take part (they exited, or the block's last warp is partial): every lane of the warp "
                 "must reach a wmma call");
    }
}

inline unsigned lane() { return current_lane->id % 32; }
inline unsigned warp() { return current_lane->id / 32; }
inline unsigned block_threads() {
    const dim3 d = current_block->launch->block;
    return d.x * d.y * d.z;
}

// The same pointer, leading dimension and layout in every lane, aligned as documented.
inline void check_args(WarpOp op, const char* file, int line, const Args& first, const Args& mine,
                       size_t element_bytes, unsigned min_ld = TILE) {
    if (first.ptr != mine.ptr || first.ldm != mine.ldm || first.layout != mine.layout)
        fail(op, file, line,
             "lane " + std::to_string(lane()) +
                 " passed another pointer, leading dimension or layout than lane 0 of its warp (they must agree)");
    if ((uintptr_t)mine.ptr % 32)
        fail(op, file, line, "the pointer must be 256-bit (32-byte) aligned");
    if (mine.ldm * element_bytes % 16 || mine.ldm < min_ld)
        fail(op, file, line,
             "leading dimension " + std::to_string(mine.ldm) + " must be at least " + std::to_string(min_ld) +
                 " and a multiple of " +
                 std::to_string(16 / element_bytes) + " elements (16 bytes)");
}

inline size_t memory_index(int element, unsigned ldm, bool col_major, int cols = TILE) {
    int r = element / cols, c = element % cols;
    return col_major ? (size_t)c * ldm + r : (size_t)r * ldm + c;
}

template <class T>
inline float to_float(T v) {
    return (float)v;
}

}  // namespace wmma_detail
}  // namespace cpu_cuda

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};  // m16n16k8's A and B: float storage, tf32 in the product
}
inline float __float_to_tf32(float x) { return cpu_cuda::wmma_detail::to_tf32(x); }

template <class Use, int m, int n, int k, class T, class Layout = void>
class fragment {
    static constexpr bool is_a = std::is_same<Use, matrix_a>::value, is_b = std::is_same<Use, matrix_b>::value;
    static constexpr bool tf32 = std::is_same<T, precision::tf32>::value;
    static_assert(m == 16 && n == 16 && (k == 16 || (k == 8 && (tf32 || !(is_a || is_b)))) && (!tf32 || k == 8),
                  "the CPU runtime's WMMA has the m16n16k16 shape, and m16n16k8 with wmma::precision::tf32");
    static_assert(!(is_a || is_b) ? std::is_same<T, float>::value && std::is_void<Layout>::value
                                  : (std::is_same<T, __nv_bfloat16>::value || std::is_same<T, __half>::value || tf32) &&
                                        (std::is_same<Layout, row_major>::value || std::is_same<Layout, col_major>::value),
                  "the CPU runtime's WMMA has matrix_a/matrix_b of __nv_bfloat16, __half or precision::tf32 with "
                  "row_major or col_major, and float accumulators without a layout");

  public:
    using element_type = std::conditional_t<tf32, float, T>;  // (tf32 fragments hold float, as CUDA's)
    static constexpr int rows = is_b ? k : m, cols = is_a ? k : n;  // the fragment's matrix
    enum { num_elements = rows * cols / 32 };
    element_type x[num_elements];
    static constexpr int kind = is_a   ? (tf32 ? cpu_cuda::wmma_detail::kind_a_tf32 : cpu_cuda::wmma_detail::kind_a)
                                : is_b ? (tf32 ? cpu_cuda::wmma_detail::kind_b_tf32 : cpu_cuda::wmma_detail::kind_b)
                                       : cpu_cuda::wmma_detail::kind_acc;
};

template <class Use, int m, int n, int k, class T, class Layout, class V>
void fill_fragment(fragment<Use, m, n, k, T, Layout>& f, const V& value, const char* file = __builtin_FILE(),
                   int line = __builtin_LINE()) {
    using namespace cpu_cuda;
    wmma_detail::whole_warp(WarpOp::wmma_fill, file, line);
    using E = typename fragment<Use, m, n, k, T, Layout>::element_type;
    for (E& e : f.x) e = E(static_cast<float>(value));
}

namespace detail_cpu {
// Loads (store = false) or stores this lane's elements of f from/to p.
template <bool store, class F, class M>
void move(F& f, M* p, unsigned ldm, bool col_major, cpu_cuda::WarpOp op, const char* file, int line) {
    using namespace cpu_cuda;
    wmma_detail::Staging& s = wmma_detail::staging(wmma_detail::block_threads());
    const int slot = wmma_detail::next_slot(s);
    wmma_detail::Args mine{(const void*)p, ldm, col_major ? 1 : 0};
    s.args[slot][current_lane->id] = mine;
    wmma_detail::whole_warp(op, file, line);
    wmma_detail::check_args(op, file, line, s.args[slot][wmma_detail::warp() * 32], mine, sizeof(M),
                            col_major ? F::rows : F::cols);
    const std::vector<int>& pos = wmma_detail::position(F::kind);
    const int* mine_pos = pos.data() + wmma_detail::lane() * F::num_elements;
    for (int i = 0; i < F::num_elements; i++) {
        size_t at = wmma_detail::memory_index(mine_pos[i], ldm, col_major, F::cols);
        if constexpr (store)
            p[at] = f.x[i];
        else
            f.x[i] = p[at];
    }
}
}  // namespace detail_cpu

template <class Use, int m, int n, int k, class T, class Layout>
void load_matrix_sync(fragment<Use, m, n, k, T, Layout>& f,
                      const typename fragment<Use, m, n, k, T, Layout>::element_type* p, unsigned ldm,
                      const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    static_assert(!std::is_void<Layout>::value, "an accumulator is loaded with a layout_t argument");
    detail_cpu::move<false>(f, p, ldm, std::is_same<Layout, col_major>::value, cpu_cuda::WarpOp::wmma_load, file,
                     line);
}
template <int m, int n, int k>
void load_matrix_sync(fragment<accumulator, m, n, k, float>& f, const float* p, unsigned ldm, layout_t layout,
                      const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    detail_cpu::move<false>(f, p, ldm, layout == mem_col_major, cpu_cuda::WarpOp::wmma_load, file, line);
}
template <int m, int n, int k>
void store_matrix_sync(float* p, const fragment<accumulator, m, n, k, float>& f, unsigned ldm, layout_t layout,
                       const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    detail_cpu::move<true>(f, p, ldm, layout == mem_col_major, cpu_cuda::WarpOp::wmma_store, file, line);
}

// d = a·b + c (d may be c)
template <int m, int n, int k, class T, class LA, class LB>
void mma_sync(fragment<accumulator, m, n, k, float>& d, const fragment<matrix_a, m, n, k, T, LA>& a,
              const fragment<matrix_b, m, n, k, T, LB>& b, const fragment<accumulator, m, n, k, float>& c,
              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    using namespace cpu_cuda;
    using namespace cpu_cuda::wmma_detail;
    using FA = fragment<matrix_a, m, n, k, T, LA>;
    using FB = fragment<matrix_b, m, n, k, T, LB>;
    constexpr bool tf32 = std::is_same<T, precision::tf32>::value;  // inputs rounded to tf32 (products exact in float)
    auto input = [](auto v) { return tf32 ? to_tf32(to_float(v)) : to_float(v); };
    Staging& s = staging(block_threads());
    float* A = s.matrices[next_slot(s)].data() + (size_t)warp() * 3 * ELEMENTS;  // m x k, then k x n, m x n
    float *Bm = A + ELEMENTS, *Cm = Bm + ELEMENTS;
    const int at = (int)lane() * PER_LANE;
    for (int i = 0; i < FA::num_elements; i++)  // this lane's share of each operand, to its place
        A[position(FA::kind)[lane() * FA::num_elements + i]] = input(a.x[i]);
    for (int i = 0; i < FB::num_elements; i++) Bm[position(FB::kind)[lane() * FB::num_elements + i]] = input(b.x[i]);
    for (int i = 0; i < PER_LANE; i++) Cm[position(kind_acc)[at + i]] = c.x[i];
    whole_warp(WarpOp::wmma_mma, file, line);
    float out[PER_LANE];
    for (int i = 0; i < PER_LANE; i++) {
        int e = position(kind_acc)[at + i], r = e / TILE, col = e % TILE;
        float acc = Cm[e];
        for (int kk = 0; kk < k; kk++) acc = fmaf(A[r * k + kk], Bm[kk * n + col], acc);
        out[i] = acc;
    }
    for (int i = 0; i < PER_LANE; i++) d.x[i] = out[i];
}

}  // namespace wmma
}  // namespace nvcuda
