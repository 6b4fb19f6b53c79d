// gpu/flash_attention_mma.cuh: the bf16 fused attention on tensor cores (FlashAttention-2),
// with every tile product an mma.sync.m16n8k16 and every intermediate kept in registers.
// gpu/flash_attention.cuh states the contract and picks this path; the scalar kernels there
// compute the same thing and are what this is checked against.
//
// Three layers, one job each:
//   gpu/mma.cuh            the instructions (mma.sync, ldmatrix, cp.async, ex2) and the table
//                          of which lane holds which fragment element;
//   gpu/mma_fragments.cuh  one warp's fragments: loading them from shared memory, the products
//                          (register or shared A × shared B, an accumulator reused as the next
//                          A), a quad's maximum and sum, storing result rows;
//   this file              the algorithm, in named steps: load tiles (load_tile_async), S = q·kᵀ,
//                          mask (mask_diagonal), online_softmax, o += P·v (forward_tile); and for
//                          the backward, on each tile pair, S and dP (scores_and_dp), then P and
//                          dS (scores_to_gradients), then the products that sum dv, dk or dq.
//                          Both backward kernels start from one prologue (BackwardBlock).
//
// The work of a warp: 16 rows of one side (queries in the forward and dq, keys in dk, dv)
// against tiles of the other side, which the block's 4 warps share in shared memory.
//   * Operands reach the tensor cores through ldmatrix, straight from tiles whose rows are
//     padded by 16 bytes: the 8 rows one ldmatrix reads then start in 8 different bank
//     groups, so it takes one pass instead of eight.
//   * A product's float32 result (the m16n8 accumulator layout) is, packed to bf16 pairs, the
//     A operand of the next product (mma.cuh says why), so the probabilities P and the score
//     gradients dS never leave registers.
//   * A row's values sit in the 4 lanes of a quad (lanes 4g..4g+3), so its maximum and sum
//     take two shuffles.
//   * Tiles come in with cp.async, the next one while the current one is multiplied.
//   * Only tiles that the causal mask cuts (the diagonal ones, and the last one when T is not
//     a multiple of the tile) are masked: the others run a loop without a compare.
//
// Head sizes: HS is a template parameter (the instantiated sizes: flash_mma_supports()), so
// every loop over the head unrolls, fragments are registers, and no index is divided at run
// time. Scores are kept in base-2 units, t = s·scale·log2(e), so each probability is one FFMA
// and one MUFU.EX2 (exp2_approx).
//
// Grouped-query attention (KVH < NH K/V heads, query head h reading K/V head h / G, G = NH /
// KVH; qkv rows [q: NH·HS | k: KVH·HS | v: KVH·HS]): each kernel has a second instantiation,
// GQA = true, with the same tiles and loops. The forward and dq kernels only point their k, v
// at head h / G; the dk/dv kernel's block owns 64 keys of one K/V head and sums the G query
// heads of its group into its accumulators, one after the other. Multi-head attention
// (GQA = false, GPT-2) runs the code of before: the same arithmetic, the same bits.
//
// Cost (causal, per (b, h), about T²/2 query-key pairs): the forward is 2 products of 2·HS
// FLOP per pair (S = q·kᵀ, P·v); the backward 7 (S and dP in the dk/dv kernel and again in the
// dq kernel, then dv, dk and dq), 2 of them recomputations that spare atomics. Bytes: q, k, v, y
// and dy once per kernel that reads them, plus each tile of the other side once per block that
// sees it (from L2 when the blocks of one (b, h) run together, as their order arranges).
// host/kernel_cost.h (attention_forward_cost, attention_backward_cost) counts these for the planner.
#pragma once
#include <cuda_bf16.h>

#include "common.cuh"
#include "mma.cuh"
#include "mma_fragments.cuh"

namespace gpu {
namespace flash_mma {

using namespace frag;  // the fragment layer (gpu/mma_fragments.cuh): loads, products, quad reductions
using bf16 = __nv_bfloat16;
constexpr int WARPS = 4, THREADS = 32 * WARPS;
constexpr int ROWS = 16 * WARPS;  // the rows a block owns: 64 queries (forward, dq) or keys (dk, dv)
constexpr float LOG2E = 1.4426950408889634f;

template <int HS>
struct Head {
    static_assert(HS % 16 == 0 && HS <= 128, "head sizes are multiples of 16 up to 128");
    static constexpr int K16 = HS / 16;  // 16-wide k-steps over the head (products that sum over it)
    static constexpr int N8 = HS / 8;    // 8-wide column tiles of the head (products that produce it)
    static constexpr int LD = HS + 8;    // a tile row in shared memory: 16 bytes of padding
    static constexpr int CHUNKS = HS / 8;  // 16-byte pieces of a row
    // the other side's tile: 64 rows, or 32 above head size 64, which keeps the backward's
    // accumulators (2 × N8 × 4 floats) and scores in registers without spilling
    static constexpr int OTHER = HS <= 64 ? 64 : 32;
};

// Where a block of any of the three kernels works: query head h of batch row b, its K/V head
// kh, and the q of h, the k and v of kh at (b, 0, the head's first column) of qkv (B,T,QKV),
// whose rows are width = QKV = C + 2·KVH·HS.
//   GQA = false, multi-head attention (KVH = NH, GPT-2): kh = h, width = 3C, blockIdx.y = b·NH + h
//     in every kernel: the code of before grouped-query attention, the same arithmetic.
//   GQA = true: kh = h / G (G = NH / KVH); the forward and dq kernels take blockIdx.y = b·NH + h,
//     the dk/dv kernel (keys) blockIdx.y = b·KVH + kh, with h the group's first query head kh·G
//     (the kernel steps through the others).
template <int HS, bool GQA>
struct BlockHead {
    int bh, b, h, kh, C, width;  // bh = b·NH + h: the row statistics' (lse, D) head
    int warp_row;  // this warp's first row among the block's 64
    const bf16 *q, *k, *v;
    __device__ __forceinline__ BlockHead(const bf16* qkv, int T, int NH, int KVH, bool keys)
        : warp_row((threadIdx.x / 32) * 16) {
        C = NH * HS;
        if (!GQA) {
            bh = blockIdx.y, b = bh / NH, h = bh % NH, kh = h, width = 3 * C;
            q = qkv + (size_t)b * T * width + h * HS, k = q + C, v = q + 2 * C;
        } else {
            if (keys) b = blockIdx.y / KVH, kh = blockIdx.y % KVH, h = kh * (NH / KVH), bh = b * NH + h;
            else bh = blockIdx.y, b = bh / NH, h = bh % NH, kh = h / (NH / KVH);
            width = C + 2 * KVH * HS;
            q = qkv + (size_t)b * T * width + h * HS, k = q + C + (kh - h) * HS, v = k + KVH * HS;
        }
    }
};

// rows r0.. (ROWS_ of them) of one head of a (B,T,width) tensor (src at (b, 0, the head's
// first column)) into a tile of ROWS_ × LD: rows at or past T become zeros (cp.async's
// zero-fill), so they add nothing to a product. Issued by the whole block; no wait.
template <int HS, int ROWS_>
__device__ __forceinline__ void load_tile_async(bf16* tile, const bf16* src, int width, int r0, int T) {
    constexpr int LD = Head<HS>::LD, CH = Head<HS>::CHUNKS, PIECES = ROWS_ * CH;
#pragma unroll
    for (int p0 = 0; p0 < PIECES; p0 += THREADS) {
        const int p = p0 + threadIdx.x, r = p / CH, c = p % CH;  // CH is a constant: no division
        if (PIECES % THREADS == 0 || p < PIECES) {
            const bool inside = r0 + r < T;
            const bf16* from = inside ? src + (size_t)(r0 + r) * width + c * 8 : src;
            cp_async_16(tile + r * LD + c * 8, from, inside ? 16 : 0);
        }
    }
}
// The step of a double-buffered loop after the next tile's copies are issued: closes this
// thread's group, waits until only that newest group may be in flight, then for the block, so
// the current tile is in shared memory for every warp.
__device__ __forceinline__ void wait_for_current_tile() {
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
}

// ---------------------------------------------------------------------------------------
// Forward. grid (query tiles of 64, B·NH), the tiles nearest the end (the most keys) first.
// Shared memory: q (64 × LD), then k and v twice each (this tile and the next).

template <int HS>
constexpr size_t forward_shared_bytes() {
    return (size_t)5 * ROWS * Head<HS>::LD * sizeof(bf16);
}

// The diagonal tile's causal mask on S (this warp's 16 rows × 8·N8 keys, the key tile
// starting at the block's first query): key c is hidden from row r when c > r.
template <int N8>
__device__ __forceinline__ void mask_diagonal(float (&s)[N8][4], int warp_row) {
#pragma unroll
    for (int n = 0; n < N8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (acc_col(n, e) > warp_row + acc_row(e)) s[n][e] = -INFINITY;
}

// The online softmax over one key tile, for this lane's two rows: s holds the tile's scores
// (16 rows × 8·N8 keys, -inf where masked), m the running maximum (base-2 units) and l this
// lane's share of the running sum. The maximum grows to cover the tile; what l and the output
// o summed so far shrinks by alpha = exp2(m_old − m_new); s becomes the probabilities
// P = exp2(s·scale_log2 − m), which l gains. Per lane 4·N8 + 2 MUFU.EX2 and 4 shuffles.
template <int N8, int HS_N8>
__device__ __forceinline__ void online_softmax(float (&s)[N8][4], float (&m)[2], float (&l)[2], float (&o)[HS_N8][4],
                                               float scale_log2) {
    // the new maximum of each of this lane's two rows, and by how much the old sums shrink
    float alpha[2];
#pragma unroll
    for (int half = 0; half < 2; half++) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < N8; n++) mx = fmaxf(mx, fmaxf(s[n][2 * half], s[n][2 * half + 1]));
        const float m_new = fmaxf(m[half], quad_max(mx) * scale_log2);  // finite: every row sees key 0
        alpha[half] = exp2_approx(m[half] - m_new);  // 0 on the first tile (m = -inf)
        m[half] = m_new;
        l[half] *= alpha[half];
    }
#pragma unroll
    for (int n = 0; n < N8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float p = exp2_approx(fmaf(s[n][e], scale_log2, -m[e / 2]));  // exp2(-inf) = 0 where masked
            s[n][e] = p;
            l[e / 2] += p;
        }
#pragma unroll
    for (int n = 0; n < HS_N8; n++) o[n][0] *= alpha[0], o[n][1] *= alpha[0], o[n][2] *= alpha[1], o[n][3] *= alpha[1];
}

// One key tile (64 keys at k_tile, v_tile) for this warp's 16 query rows (q, in registers):
// S = q·kᵀ, the mask on the diagonal tile (MASK), the online softmax update of m, l and o,
// then o += P·v. 8·K16 + 4·N8 mma (64 at HS = 64), 4·K16 + 2·N8 ldmatrix.
template <int HS, bool MASK>
__device__ __forceinline__ void forward_tile(float (&o)[Head<HS>::N8][4], float (&m)[2], float (&l)[2],
                                             const uint32_t (&q)[Head<HS>::K16][4], const bf16* k_tile,
                                             const bf16* v_tile, int warp_row, float scale_log2) {
    constexpr int LD = Head<HS>::LD, K16 = Head<HS>::K16, N8 = Head<HS>::N8, KEYS8 = ROWS / 8;
    float s[KEYS8][4];  // S = q·kᵀ: 16 rows × 64 keys
    zero(s);
    product_rbt<K16, KEYS8, LD>(s, q, k_tile);
    if (MASK) mask_diagonal(s, warp_row);
    online_softmax(s, m, l, o, scale_log2);
    uint32_t p[KEYS8 / 2][4];
    to_a_fragments<KEYS8>(p, s);
    product_rb<KEYS8 / 2, N8, LD>(o, p, v_tile);  // o += P·v
}

template <int HS, bool GQA>
__global__ void __launch_bounds__(THREADS)
    flash_attention_forward_mma_kernel(bf16* out, float* lse, const bf16* qkv, int T, int NH, int KVH) {
    constexpr int LD = Head<HS>::LD, K16 = Head<HS>::K16, N8 = Head<HS>::N8;
    extern __shared__ __align__(128) char flash_smem[];
    bf16* q_tile = reinterpret_cast<bf16*>(flash_smem);
    bf16* k_tiles = q_tile + ROWS * LD;      // [2][ROWS][LD]
    bf16* v_tiles = k_tiles + 2 * ROWS * LD;  // [2][ROWS][LD]
    const int tiles = (T + ROWS - 1) / ROWS, qt = tiles - 1 - blockIdx.x, q0 = qt * ROWS;
    const BlockHead<HS, GQA> at(qkv, T, NH, KVH, false);
    const int warp_row = at.warp_row;
    const float scale_log2 = LOG2E / sqrtf((float)HS);

    load_tile_async<HS, ROWS>(q_tile, at.q, at.width, q0, T);
    load_tile_async<HS, ROWS>(k_tiles, at.k, at.width, 0, T);
    load_tile_async<HS, ROWS>(v_tiles, at.v, at.width, 0, T);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    uint32_t q[K16][4];  // this warp's 16 query rows, for every key tile
#pragma unroll
    for (int k = 0; k < K16; k++) load_a<LD>(q[k], q_tile, warp_row, k * 16);

    float o[N8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    zero(o);
    // Key tile kt: prefetch tile kt + 1 into the other buffer, wait for tile kt, multiply.
    // The last tile (kt = qt) is the diagonal one, the only one the mask cuts.
    auto next_tile = [&](int kt) {
        const int cur = kt % 2;
        if (kt < qt) {
            load_tile_async<HS, ROWS>(k_tiles + (1 - cur) * ROWS * LD, at.k, at.width, (kt + 1) * ROWS, T);
            load_tile_async<HS, ROWS>(v_tiles + (1 - cur) * ROWS * LD, at.v, at.width, (kt + 1) * ROWS, T);
        }
        wait_for_current_tile();  // tile kt (only the next one may be in flight)
        return cur;
    };
    for (int kt = 0; kt < qt; kt++) {
        const int cur = next_tile(kt);
        forward_tile<HS, false>(o, m, l, q, k_tiles + cur * ROWS * LD, v_tiles + cur * ROWS * LD, warp_row, scale_log2);
        __syncthreads();  // every warp is done with this buffer before the next prefetch refills it
    }
    const int cur = next_tile(qt);
    forward_tile<HS, true>(o, m, l, q, k_tiles + cur * ROWS * LD, v_tiles + cur * ROWS * LD, warp_row, scale_log2);
    // y = o / l, and lse = m + log l per row
    const float sum[2] = {quad_sum(l[0]), quad_sum(l[1])};
#pragma unroll
    for (int n = 0; n < N8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[n][e] /= sum[e / 2];
    bf16* y = out + (size_t)at.b * T * at.C + at.h * HS;
    store_rows<N8>(y, at.C, o, 1.0f, q0 + warp_row, T);
    if (threadIdx.x % 4 == 0)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int t = q0 + warp_row + acc_row(2 * half);
            if (t < T) lse[(size_t)at.bh * T + t] = (m[half] + log2f(sum[half])) / LOG2E;  // natural log
        }
}

// ---------------------------------------------------------------------------------------
// Backward, step 1: D = rowsum(dy ⊙ y) per (b, h, t), float32 from the bf16 values. One
// thread per row, 16-byte loads; grid over B·T·NH rows. Reads 2·B·T·C·2 bytes.

template <int HS>
__global__ void flash_attention_row_dots_kernel(float* delta, const bf16* dout, const bf16* out, int B, int T, int NH) {
    const size_t row = (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // (b, t, h), h fastest
    if (row >= (size_t)B * T * NH) return;
    const int h = (int)(row % NH);
    const size_t bt = row / NH, b = bt / T, t = bt % T;
    const Pack<bf16>* dy = reinterpret_cast<const Pack<bf16>*>(dout + row * HS);
    const Pack<bf16>* y = reinterpret_cast<const Pack<bf16>*>(out + row * HS);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < HS / 8; i++) {
        const Pack<bf16> a = dy[i], c = y[i];
#pragma unroll
        for (int j = 0; j < 8; j++) sum = fmaf(__bfloat162float(a.v[j]), __bfloat162float(c.v[j]), sum);
    }
    delta[(b * NH + h) * T + t] = sum;
}

// The two passes of the backward (steps 2 and 3 below) share their shape: a block owns 64
// rows of one side, two tiles of them (k, v in the dk/dv pass; q, dy in the dq pass), and
// walks the other side's tiles of O rows (its two tiles: q, dy; or k, v), double-buffered.
// Shared memory: the own tiles (64 × LD each), then the other side's (O × LD each, twice).
// KEYS: the block owns keys (the dk/dv pass), of K/V head kh, and sees the queries of the
// group's heads h, h + 1, .. h + G − 1 in turn.
template <int HS, bool GQA, int O, bool KEYS>
struct BackwardBlock : BlockHead<HS, GQA> {
    float scale, scale_log2;    // 1/√HS, and the same times log2(e) for base-2 scores
    const bf16* dy;             // dy at (b, 0, query head h's first column) of dout (B,T,C)
    bf16 *own[2], *other[2];    // own[i]: 64 × LD; other[i]: [2][O][LD], this tile and the next
    __device__ __forceinline__ BackwardBlock(char* smem, const bf16* qkv, const bf16* dout, int T, int NH, int KVH)
        : BlockHead<HS, GQA>(qkv, T, NH, KVH, KEYS), scale(1.0f / sqrtf((float)HS)), scale_log2(scale * LOG2E),
          dy(dout + (size_t)this->b * T * this->C + this->h * HS) {
        constexpr int LD = Head<HS>::LD;
        own[0] = reinterpret_cast<bf16*>(smem);
        own[1] = own[0] + ROWS * LD;
        other[0] = own[1] + ROWS * LD;
        other[1] = other[0] + 2 * O * LD;
    }
    // The block's own 64 rows r0.. (k and v, or q and dy) into own[0], own[1].
    __device__ __forceinline__ void load_own(int r0, int T) const {
        load_tile_async<HS, ROWS>(own[0], KEYS ? this->k : this->q, this->width, r0, T);
        load_tile_async<HS, ROWS>(own[1], KEYS ? this->v : dy, KEYS ? this->width : this->C, r0, T);
    }
    // The other side's O rows r0.. (q and dy of query head h + g, or k and v) into buffer buf of
    // other[0], other[1].
    __device__ __forceinline__ void load_other(int buf, int r0, int T, int g = 0) const {
        constexpr int LD = Head<HS>::LD;
        load_tile_async<HS, O>(other[0] + buf * O * LD, KEYS ? this->q + g * HS : this->k, this->width, r0, T);
        load_tile_async<HS, O>(other[1] + buf * O * LD, KEYS ? dy + g * HS : this->v, KEYS ? this->C : this->width,
                               r0, T);
    }
    __device__ __forceinline__ const bf16* other_tile(int i, int buf) const {
        return other[i] + buf * O * Head<HS>::LD;
    }
};

// Both passes' products on one tile pair: S = own[0]·other[0]ᵀ and dP = own[1]·other[1]ᵀ for
// this warp's 16 rows × 8·N8 columns of the other side (Sᵀ = k·qᵀ and dPᵀ = v·dyᵀ in the dk/dv
// pass, S = q·kᵀ and dP = dy·vᵀ in the dq pass). 2·K16·N8 mma, 2·K16·(1 + N8/2) ldmatrix.
template <int HS, int N8>
__device__ __forceinline__ void scores_and_dp(float (&s)[N8][4], float (&dp)[N8][4], const bf16* own0,
                                              const bf16* other0, const bf16* own1, const bf16* other1, int warp_row) {
    constexpr int LD = Head<HS>::LD, K16 = Head<HS>::K16;
    zero(s), zero(dp);
    product_abt<K16, N8, LD, LD>(s, own0, warp_row, other0);
    product_abt<K16, N8, LD, LD>(dp, own1, warp_row, other1);
}

// The backward's probabilities and score gradients of one tile pair, in place: s holds the
// scores S (rows × columns of this warp's 16 × 8·N8 view), dp the products dP; afterwards s
// holds P = exp2(S·scale_log2 − lse₂) and dp holds dS = P ⊙ (dP − D), masked to 0 where
// `hidden` says (MASK: the callers mask only the tiles that the diagonal or the end of the
// sequence crosses). lse2 and D are given per row and per column by the callers' functors.
// Per lane 4·N8 MUFU.EX2.
template <int N8, bool MASK, class Stats, class Hidden>
__device__ __forceinline__ void scores_to_gradients(float (&s)[N8][4], float (&dp)[N8][4], float scale_log2,
                                                    Stats stats, Hidden hidden) {
#pragma unroll
    for (int n = 0; n < N8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float lse2, d;
            stats(n, e, lse2, d);
            float p = exp2_approx(fmaf(s[n][e], scale_log2, -lse2));
            if (MASK && hidden(n, e)) p = 0.0f;
            s[n][e] = p;
            dp[n][e] = p * (dp[n][e] - d);
        }
}

// ---------------------------------------------------------------------------------------
// Backward, step 2: dk and dv for 64 keys of K/V head kh per block, each warp 16 of them,
// summed over the query tiles that see them, of each of the group's G query heads, in a fixed
// order (deterministic, no atomics): head h = kh·G + g for g = 0..G−1, and for each its query
// tiles in order, the accumulators staying in registers throughout; a head's last tile loads
// the next head's first while it is multiplied. (GQA = false: G = 1, the loop of before.) grid
// (key tiles, B·KVH), the first keys (seen by the most queries) first. Works on the transposed
// products, keys as rows:
//   Sᵀ = k·qᵀ, dPᵀ = v·dyᵀ, Pᵀ, dSᵀ as above, dv += Pᵀ·dy, dk += dSᵀ·q (× scale at the end).
// Shared memory: k, v (64 × LD each), then q, dy (Q × LD each, twice), lse₂ and D (Q floats,
// twice), where Q = Head<HS>::OTHER query rows per step.

template <int HS>
constexpr size_t dkdv_shared_bytes() {
    constexpr int Q = Head<HS>::OTHER, LD = Head<HS>::LD;
    return (size_t)(2 * ROWS + 4 * Q) * LD * sizeof(bf16) + 4 * Q * sizeof(float);
}

template <int HS, bool GQA>
__global__ void __launch_bounds__(THREADS)
    flash_attention_backward_dkdv_mma_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                             const float* delta, int T, int NH, int KVH) {
    constexpr int LD = Head<HS>::LD, N8 = Head<HS>::N8, Q = Head<HS>::OTHER, Q8 = Q / 8;
    extern __shared__ __align__(128) char flash_smem[];
    const int tiles = (T + Q - 1) / Q, k0 = blockIdx.x * ROWS, first = k0 / Q;
    const BackwardBlock<HS, GQA, Q, true> at(flash_smem, qkv, dout, T, NH, KVH);
    float* lse2_rows = reinterpret_cast<float*>(at.other[1] + 2 * Q * LD);  // [2][Q]
    float* d_rows = lse2_rows + 2 * Q;                                     // [2][Q]
    const int warp_row = at.warp_row;
    lse += (size_t)at.bh * T, delta += (size_t)at.bh * T;  // the rows of (b, h), the group's first head

    // lse (in base-2 units) and D of query rows q0.. of the group's head h + g into buffer
    // `buf`; rows past T get values that keep the arithmetic finite (their columns are masked)
    auto load_stats = [&](int buf, int q0, int g) {
        for (int i = threadIdx.x; i < Q; i += THREADS) {
            const int t = q0 + i;
            lse2_rows[buf * Q + i] = t < T ? lse[(size_t)g * T + t] * LOG2E : 0.0f;
            d_rows[buf * Q + i] = t < T ? delta[(size_t)g * T + t] : 0.0f;
        }
    };
    at.load_own(k0, T);
    at.load_other(0, first * Q, T);
    load_stats(0, first * Q, 0);
    cp_async_commit();

    float dk[N8][4], dv[N8][4];
    zero(dk), zero(dv);
    // One step: query tile q0 (in buffer cur) against the block's keys, summed into dk, dv; the
    // next step's tiles (q0_next of head h + g_next) are loaded meanwhile, if there is one.
    auto step = [&](int cur, int q0, bool more, int q0_next, int g_next) {
        if (more) {
            at.load_other(1 - cur, q0_next, T, g_next);
            load_stats(1 - cur, q0_next, g_next);
        }
        wait_for_current_tile();
        const bf16* q_tile = at.other_tile(0, cur);
        const bf16* dy_tile = at.other_tile(1, cur);
        const float* lse2 = lse2_rows + cur * Q;
        const float* d = d_rows + cur * Q;
        auto stats = [&](int n, int e, float& l2, float& dd) {
            const int c = acc_col(n, e);
            l2 = lse2[c], dd = d[c];
        };
        // key k0 + row is hidden from query q0 + column when it comes later, or the query is past T
        auto hidden = [&](int n, int e) {
            const int key = k0 + warp_row + acc_row(e), query = q0 + acc_col(n, e);
            return key > query || query >= T;
        };
        float s[Q8][4], dp[Q8][4];  // Sᵀ and dPᵀ, then Pᵀ and dSᵀ: this warp's 16 keys × Q queries
        scores_and_dp<HS>(s, dp, at.own[0], q_tile, at.own[1], dy_tile, warp_row);  // Sᵀ = k·qᵀ, dPᵀ = v·dyᵀ
        if (q0 < k0 + ROWS || q0 + Q > T)
            scores_to_gradients<Q8, true>(s, dp, at.scale_log2, stats, hidden);
        else
            scores_to_gradients<Q8, false>(s, dp, at.scale_log2, stats, hidden);
        uint32_t pt[Q8 / 2][4], dst[Q8 / 2][4];
        to_a_fragments<Q8>(pt, s);
        to_a_fragments<Q8>(dst, dp);
        product_rb<Q8 / 2, N8, LD>(dv, pt, dy_tile);  // dv += Pᵀ·dy
        product_rb<Q8 / 2, N8, LD>(dk, dst, q_tile);  // dk += dSᵀ·q
        __syncthreads();  // this buffer is refilled next
    };
    if (!GQA) {
        for (int qt = first; qt < tiles; qt++) step((qt - first) % 2, qt * Q, qt + 1 < tiles, qt * Q + Q, 0);
    } else {
        // the group's heads h + g, g = 0..G−1 in turn, each over its query tiles first..tiles−1;
        // the last tile of a head prefetches the next head's first
        const int G = NH / KVH;
        for (int g = 0, i = 0; g < G; g++)
            for (int qt = first; qt < tiles; qt++, i++) {
                const bool head_more = qt + 1 < tiles;
                step(i % 2, qt * Q, head_more || g + 1 < G, head_more ? qt * Q + Q : first * Q,
                     head_more ? g : g + 1);
            }
    }
    // K/V head kh's columns of dqkv, and v's
    bf16* dk_dst = dqkv + (size_t)at.b * T * at.width + at.C + (GQA ? at.kh : at.h) * HS;
    store_rows<N8>(dk_dst, at.width, dk, at.scale, k0 + warp_row, T);
    store_rows<N8>(dk_dst + (GQA ? KVH * HS : at.C), at.width, dv, 1.0f, k0 + warp_row, T);
}

// ---------------------------------------------------------------------------------------
// Backward, step 3: dq for 64 queries per block, each warp 16 of them, summed over the key
// tiles (of K/V head kh = h / G) they see, in order. grid (query tiles of 64, B·NH), the last
// tiles first.
//   S = q·kᵀ, dP = dy·vᵀ, P, dS as above, dq += dS·k (× scale at the end).
// Shared memory: q, dy (64 × LD each), then k, v (K × LD each, twice), K = Head<HS>::OTHER.

template <int HS>
constexpr size_t dq_shared_bytes() {
    return (size_t)(2 * ROWS + 4 * Head<HS>::OTHER) * Head<HS>::LD * sizeof(bf16);
}

template <int HS, bool GQA>
__global__ void __launch_bounds__(THREADS)
    flash_attention_backward_dq_mma_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                           const float* delta, int T, int NH, int KVH) {
    constexpr int LD = Head<HS>::LD, N8 = Head<HS>::N8, K = Head<HS>::OTHER, K8 = K / 8;
    extern __shared__ __align__(128) char flash_smem[];
    const int tiles = (T + ROWS - 1) / ROWS, q0 = (tiles - 1 - blockIdx.x) * ROWS;
    const BackwardBlock<HS, GQA, K, false> at(flash_smem, qkv, dout, T, NH, KVH);
    const int warp_row = at.warp_row;

    at.load_own(q0, T);
    at.load_other(0, 0, T);
    cp_async_commit();
    // this lane's two rows' lse (base 2) and D; rows past T get finite values (not stored)
    float lse2[2], d[2];
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int t = q0 + warp_row + acc_row(2 * half);
        lse2[half] = t < T ? lse[(size_t)at.bh * T + t] * LOG2E : 0.0f;
        d[half] = t < T ? delta[(size_t)at.bh * T + t] : 0.0f;
    }
    float dq[N8][4];
    zero(dq);
    const int last = ((q0 + ROWS < T ? q0 + ROWS : T) - 1) / K;  // the last key tile these queries see
    for (int kt = 0; kt <= last; kt++) {
        const int cur = kt % 2, k0 = kt * K;
        if (kt < last) at.load_other(1 - cur, k0 + K, T);
        wait_for_current_tile();
        const bf16* k_tile = at.other_tile(0, cur);
        const bf16* v_tile = at.other_tile(1, cur);
        auto stats = [&](int, int e, float& l2, float& dd) { l2 = lse2[e / 2], dd = d[e / 2]; };
        auto hidden = [&](int n, int e) { return k0 + acc_col(n, e) > q0 + warp_row + acc_row(e); };
        float s[K8][4], dp[K8][4];  // S and dP, then P and dS: this warp's 16 queries × K keys
        scores_and_dp<HS>(s, dp, at.own[0], k_tile, at.own[1], v_tile, warp_row);  // S = q·kᵀ, dP = dy·vᵀ
        if (k0 + K > q0)  // a tile the diagonal crosses (keys past T lie beyond it too)
            scores_to_gradients<K8, true>(s, dp, at.scale_log2, stats, hidden);
        else
            scores_to_gradients<K8, false>(s, dp, at.scale_log2, stats, hidden);
        uint32_t ds[K8 / 2][4];
        to_a_fragments<K8>(ds, dp);
        product_rb<K8 / 2, N8, LD>(dq, ds, k_tile);  // dq += dS·k
        __syncthreads();
    }
    store_rows<N8>(dqkv + (at.q - qkv), at.width, dq, at.scale, q0 + warp_row, T);
}

}  // namespace flash_mma
}  // namespace gpu
