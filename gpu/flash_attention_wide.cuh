// gpu/flash_attention_wide.cuh: the bf16 attention forward at FlashAttention-2's tiling, the
// default tensor-core forward at head sizes 64 and 128 (flash_wide_supports()). The same
// contract and outputs as the forward of gpu/flash_attention_mma.cuh, which it is checked
// against (flash_attention_forward(..., MmaForward::narrow)): y, and the per-row log-sum-exp
// lse (B, NH, T) that the backward reads, causal, any T ≥ 1, multi-head and grouped-query
// attention (query head h reading K/V head h / (NH/KVH)), deterministic.
//
// The tiling, and why. The narrow forward's warp owns 16 query rows, so each B fragment that
// one ldmatrix .x4 brings from shared memory (512 bytes) feeds 2 mma: with the cp.async copies
// that fill the tiles, its loop moves 326 bytes of shared memory per HMMA (hs = 64), and an
// SM's shared memory (128 bytes per clock) could feed its tensor cores (one HMMA.16816 per
// clock on sm_90) at most 128/326 = 39% of the time. Here:
//   * a warp owns 32 query rows, two m16 tiles, and each B fragment feeds 4 mma; a block of
//     4 warps owns Br = 128 queries, so each key tile copied into shared memory serves twice
//     the rows. Per HMMA at hs = 64: 128 bytes of ldmatrix, 32 of cp.async;
//   * key tiles of Bc = 64 keys at hs = 64, 32 at hs = 128, double-buffered with cp.async: the
//     next tile is copied while this one is multiplied. Each thread's source address walks
//     qkv by a stride per row pass (KeyStream), nothing recomputed per tile. (The bytes per
//     HMMA do not depend on Bc: a key tile is copied once per block and multiplied by all
//     its rows. Bc sets the registers of S and the barriers per key.)
//   * at hs = 64 the block's q is copied into the second key buffer and read into registers
//     (2 × 4 A fragments per warp) before that buffer is first filled, so shared memory holds
//     the two key/value buffers alone. At hs = 128 q's fragments would take 64 registers beside
//     the 128 of the output accumulators: q stays in shared memory, its A fragments loaded per
//     k-step (2 ldmatrix .x4 per 16 of the head, shared by the tile's mma);
//   * the epilogue multiplies each row by 1/l once instead of dividing each element.
// The steps are those of the narrow forward (S = q·kᵀ, the causal mask where the diagonal
// crosses, online_softmax, o += P·v, in registers), on both of the warp's row tiles.
//
// Compiled (python3 dev/sass_report.py --arch 90 --head-size 0; nvcc 13.0, sm_90, bf16; both
// instantiations <HS, false> and <HS, true> alike), per block of 128 threads:
//   hs = 64, Bc = 64, q in registers: 254 registers, 0 spills, 36 KiB of shared memory, 2 blocks
//     (8 warps) per SM, bound by registers; main loop 163 shared bytes per HMMA (bound 0.785).
//   hs = 128, Bc = 32, q in shared memory: 247 registers, 0 spills, 68 KiB, 2 blocks per SM;
//     227 bytes per HMMA (0.564).
// Larger key tiles, tried and set aside (same command, ptxas's figures): at hs = 64, Bc = 128
// with S of 128 keys in registers spills (255 registers, 212/192 bytes of spill stores/loads),
// as 128 keys in two unrolled passes of 64 (255, 28/108) and 128 keys with q in shared memory
// (255, 20/20) do; two passes of 64 in a rolled loop fit (251, 0) but only halve the barriers
// per key. At hs = 128, Bc = 64 spills (255, 88/180).
//
// Cost (causal, per (b, h), about T²/2 query-key pairs): 2 products of 2·hs FLOP per pair, as
// the narrow forward (host/kernel_cost.h). Bytes: q, k, v and y once, plus each key tile once
// per query tile of 128 that sees it (half the narrow forward's re-reads, from L2 when the
// blocks of one (b, h) run together, as the grid's order arranges).
#pragma once
#include <cuda_bf16.h>

#include "flash_attention_mma.cuh"

namespace gpu {
namespace flash_wide {

using namespace flash_mma;  // Head, BlockHead, WARPS, LOG2E, online_softmax, load_tile_async, ...
using namespace frag;

template <int HS>
struct Wide {
    static_assert(HS == 64 || HS == 128, "the wide forward is instantiated at head sizes 64 and 128");
    static constexpr int M16 = 2;                     // m16 row tiles per warp
    static constexpr int WARP_ROWS = 16 * M16;        // 32 query rows per warp
    static constexpr int ROWS = WARPS * WARP_ROWS;    // Br = 128 query rows per block
    static constexpr int KEYS = HS <= 64 ? 64 : 32;   // Bc: keys per tile (why not more: the header)
    static constexpr bool Q_REGS = HS <= 64;          // q's A fragments kept in registers
    static constexpr int TILE = KEYS * Head<HS>::LD;  // elements of one k or v tile
    static_assert(!Q_REGS || 2 * TILE >= ROWS * Head<HS>::LD, "q fits in key buffer 1");
};

// Shared memory: two buffers of [k tile, v tile] (Bc × LD each), then q (Br × LD) unless it
// lives in registers (it is then copied into buffer 1 and read from there before the loop).
template <int HS>
constexpr size_t forward_wide_shared_bytes() {
    return ((size_t)4 * Wide<HS>::TILE + (Wide<HS>::Q_REGS ? 0 : Wide<HS>::ROWS * Head<HS>::LD)) * sizeof(bf16);
}

// The key and value tiles of one K/V head, BC rows after BC rows, into shared memory with
// cp.async. Thread i copies 16-byte piece i % CH of rows i / CH, i / CH + PASS_ROWS, ..:
// its source address starts there and walks qkv by PASS_ROWS rows per pass, which leaves it
// at the next tile; rows at or past T are zero-filled (they then add nothing to a product).
template <int HS, int BC>
struct KeyStream {
    static constexpr int LD = Head<HS>::LD, CH = Head<HS>::CHUNKS, PASS_ROWS = flash_mma::THREADS / CH, PASSES = BC / PASS_ROWS;
    static_assert(flash_mma::THREADS % CH == 0 && BC % PASS_ROWS == 0, "whole rows per pass, whole passes per tile");
    const bf16* src;   // this thread's piece of k in its first row of the next tile
    const bf16* head;  // k's row 0: a readable address for the zero-filled pieces
    int v_gap;         // v − k, elements
    int pass_step;     // PASS_ROWS rows of qkv, elements
    int rows_left;     // T − this thread's first row of the next tile
    int dst;           // this thread's first piece in a tile, elements
    __device__ __forceinline__ KeyStream(const bf16* k, const bf16* v, int width, int T)
        : head(k), v_gap((int)(v - k)), pass_step(PASS_ROWS * width) {
        const int r = threadIdx.x / CH, c = threadIdx.x % CH;  // CH is a constant: no division
        src = k + (size_t)r * width + c * 8, rows_left = T - r, dst = r * LD + c * 8;
    }
    // The next BC rows of k and v into k_tile and v_tile; no commit, no wait.
    __device__ __forceinline__ void load_next(bf16* k_tile, bf16* v_tile) {
        const bf16* p = src;
#pragma unroll
        for (int j = 0; j < PASSES; j++) {
            const bool inside = j * PASS_ROWS < rows_left;
            cp_async_16(k_tile + dst + j * PASS_ROWS * LD, inside ? p : head, inside ? 16 : 0);
            cp_async_16(v_tile + dst + j * PASS_ROWS * LD, (inside ? p : head) + v_gap, inside ? 16 : 0);
            p += pass_step;
        }
        src = p, rows_left -= BC;  // PASSES · PASS_ROWS = BC rows on
    }
};

// The causal mask on the scores of a key range that the diagonal crosses, for this warp's
// 2 × 16 rows: key c of the range is hidden from the warp's row r when c > r + offset, where
// offset = (the warp's first query) − (the range's first key).
template <int M, int N8>
__device__ __forceinline__ void mask_causal(float (&s)[M][N8][4], int offset) {
#pragma unroll
    for (int i = 0; i < M; i++)
#pragma unroll
        for (int n = 0; n < N8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (acc_col(n, e) > offset + 16 * i + acc_row(e)) s[i][n][e] = -INFINITY;
}

// One key tile (BC keys at k_tile, v_tile) for this warp's 32 query rows: S = q·kᵀ (q from
// registers, or from q_tile's rows warp_row..), the mask where the diagonal crosses (MASK,
// offset as in mask_causal), the online softmax of each row tile, then o += P·v.
// 2·(K16·BC/8 + BC/16·N8) mma (128 at hs = 64, Bc = 64, and at hs = 128, Bc = 32);
// K16·BC/16 + BC/16·N8/2 ldmatrix .x4 (32 at both), and at hs = 128 2·K16 more for q (16).
template <int HS, int BC, bool MASK>
__device__ __forceinline__ void forward_keys(float (&o)[2][Head<HS>::N8][4], float (&m)[2][2], float (&l)[2][2],
                                             const uint32_t (&q)[2][Head<HS>::K16][4], const bf16* q_tile,
                                             int warp_row, const bf16* k_tile, const bf16* v_tile, int offset,
                                             float scale_log2) {
    constexpr int LD = Head<HS>::LD, K16 = Head<HS>::K16, N8 = Head<HS>::N8, M = Wide<HS>::M16, KEYS8 = BC / 8;
    float s[M][KEYS8][4];  // S = q·kᵀ: 2 × 16 rows × BC keys
#pragma unroll
    for (int i = 0; i < M; i++) zero(s[i]);
    if constexpr (Wide<HS>::Q_REGS) product_rbt_rows<M, K16, KEYS8, LD>(s, q, k_tile);
    else product_abt_rows<M, K16, KEYS8, LD, LD>(s, q_tile, warp_row, k_tile);
    if (MASK) mask_causal(s, offset);
    uint32_t p[M][KEYS8 / 2][4];
#pragma unroll
    for (int i = 0; i < M; i++) {
        online_softmax(s[i], m[i], l[i], o[i], scale_log2);
        to_a_fragments<KEYS8>(p[i], s[i]);
    }
    product_rb_rows<M, KEYS8 / 2, N8, LD>(o, p, v_tile);  // o += P·v
}

// grid (query tiles of 128, B·NH), the tiles nearest the end (the most keys) first.
template <int HS, bool GQA>
__global__ void __launch_bounds__(flash_mma::THREADS, 2)
    flash_attention_forward_wide_kernel(bf16* out, float* lse, const bf16* qkv, int T, int NH, int KVH) {
    using W = Wide<HS>;
    constexpr int LD = Head<HS>::LD, K16 = Head<HS>::K16, N8 = Head<HS>::N8, M = W::M16, BC = W::KEYS;
    constexpr int TILE = W::TILE;
    extern __shared__ __align__(128) char flash_smem[];
    bf16* kv = reinterpret_cast<bf16*>(flash_smem);  // [2][k, v][BC][LD]
    bf16* q_tile = kv + (W::Q_REGS ? 2 : 4) * TILE;  // in buffer 1, or after both
    const int tiles = (T + W::ROWS - 1) / W::ROWS, q0 = (tiles - 1 - blockIdx.x) * W::ROWS;
    const BlockHead<HS, GQA> at(qkv, T, NH, KVH, false);
    const int warp_row = (threadIdx.x / 32) * W::WARP_ROWS, row0 = q0 + warp_row;  // this warp's first query
    const float scale_log2 = LOG2E / sqrtf((float)HS);
    KeyStream<HS, BC> keys(at.k, at.v, at.width, T);

    load_tile_async<HS, W::ROWS>(q_tile, at.q, at.width, q0, T);
    keys.load_next(kv, kv + TILE);  // key tile 0 into buffer 0
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    uint32_t q[M][K16][4];  // this warp's 2 × 16 query rows, for every key tile (hs = 64)
    if constexpr (W::Q_REGS) {
#pragma unroll
        for (int i = 0; i < M; i++)
#pragma unroll
            for (int k = 0; k < K16; k++) load_a<LD>(q[i][k], q_tile, warp_row + 16 * i, k * 16);
        __syncthreads();  // q lies in buffer 1: every warp has its fragments before key tile 1 lands there
    }

    float o[M][N8][4], m[M][2], l[M][2];
#pragma unroll
    for (int i = 0; i < M; i++) zero(o[i]), m[i][0] = m[i][1] = -INFINITY, l[i][0] = l[i][1] = 0.0f;
    // Key tile kt: prefetch tile kt + 1 into the other buffer, wait for tile kt, multiply. The
    // tiles before key q0 need no mask; the diagonal crosses those from the one holding key q0
    // on: masked, and a warp skips a tile whose first key comes after all its rows.
    const int last = ((q0 + W::ROWS < T ? q0 + W::ROWS : T) - 1) / BC;  // the last key tile the block sees
    auto begin_tile = [&](int kt) -> const bf16* {
        if (kt < last) keys.load_next(kv + (~kt & 1) * 2 * TILE, kv + (~kt & 1) * 2 * TILE + TILE);
        wait_for_current_tile();  // tile kt (only the next one may be in flight)
        return kv + (kt & 1) * 2 * TILE;
    };
    const int diagonal = q0 / BC;  // the first tile the diagonal crosses (≤ last: q0 < T)
    for (int kt = 0; kt < diagonal; kt++) {
        const bf16* buf = begin_tile(kt);
        forward_keys<HS, BC, false>(o, m, l, q, q_tile, warp_row, buf, buf + TILE, 0, scale_log2);
        __syncthreads();  // every warp is done with this buffer before the next prefetch refills it
    }
    for (int kt = diagonal; kt <= last; kt++) {
        const bf16* buf = begin_tile(kt);
        const int k0 = kt * BC;
        if (k0 <= row0 + W::WARP_ROWS - 1)  // a key this warp's last row sees (warp-uniform)
            forward_keys<HS, BC, true>(o, m, l, q, q_tile, warp_row, buf, buf + TILE, row0 - k0, scale_log2);
        __syncthreads();
    }
    // y = o · (1/l), and lse = m + log l per row
    bf16* y = out + (size_t)at.b * T * at.C + at.h * HS;
#pragma unroll
    for (int i = 0; i < M; i++) {
        const float sum[2] = {quad_sum(l[i][0]), quad_sum(l[i][1])};
        const float inv[2] = {1.0f / sum[0], 1.0f / sum[1]};
#pragma unroll
        for (int n = 0; n < N8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[i][n][e] *= inv[e / 2];
        store_rows<N8>(y, at.C, o[i], 1.0f, row0 + 16 * i, T);
        if (threadIdx.x % 4 == 0)
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const int t = row0 + 16 * i + acc_row(2 * half);
                if (t < T) lse[(size_t)at.bh * T + t] = (m[i][half] + log2f(sum[half])) / LOG2E;  // natural log
            }
    }
}

}  // namespace flash_wide
}  // namespace gpu
