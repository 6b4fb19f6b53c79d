// gpu/flash_attention_mma.cuh: the bf16 fused attention on tensor cores (FlashAttention-2),
// with every tile product an mma.sync.m16n8k16 (gpu/mma.cuh) and every intermediate kept in
// registers. gpu/flash_attention.cuh states the contract and picks this path; the scalar
// kernels there compute the same thing and are what this is checked against.
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

namespace gpu {
namespace flash_mma {

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

// The A operand (16 rows × 16 k, row-major) at tile[row0][k0] (leading dimension LD):
// lanes 0-15 give rows 0-15 at k0, lanes 16-31 the same rows at k0 + 8.
template <int LD>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* tile, int row0, int k0) {
    const int lane = threadIdx.x % 32;
    ldmatrix_x4(a, tile + (row0 + lane % 16) * LD + k0 + (lane / 16) * 8);
}
// B operands of two 8-column tiles (n0.., n0 + 8..) over 16 k, from a tile stored n-major,
// tile[n][k] (keys for S = q·kᵀ): b[0] for columns n0.., b[1] for n0 + 8...
template <int LD>
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[2][2], const bf16* tile, int n0, int k0) {
    const int lane = threadIdx.x % 32;
    uint32_t r[4];
    ldmatrix_x4(r, tile + (n0 + lane % 8 + (lane / 16) * 8) * LD + k0 + (lane / 8 % 2) * 8);
    b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
}
// The same from a tile stored k-major, tile[k][n] (values for P·v), transposed on the way.
template <int LD>
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[2][2], const bf16* tile, int k0, int n0) {
    const int lane = threadIdx.x % 32;
    uint32_t r[4];
    ldmatrix_x4_trans(r, tile + (k0 + lane % 8 + (lane / 8 % 2) * 8) * LD + n0 + (lane / 16) * 8);
    b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
}

// acc (16 × 8·N8 accumulators) += A (16 × 16·K16, from shared memory at tile a, rows row0..)
// · Bᵀ where B is stored n-major (tile b[n][k], n from 0): the products S = q·kᵀ, dP = dy·vᵀ.
template <int K16, int N8, int LDA, int LDB>
__device__ __forceinline__ void product_abt(float (&acc)[N8][4], const bf16* a, int row0, const bf16* b) {
#pragma unroll
    for (int k = 0; k < K16; k++) {
        uint32_t fa[4];
        load_a<LDA>(fa, a, row0, k * 16);
#pragma unroll
        for (int n = 0; n < N8; n += 2) {
            uint32_t fb[2][2];
            load_b_nk<LDB>(fb, b, n * 8, k * 16);
            mma_bf16_16816(acc[n], fa, fb[0]);
            mma_bf16_16816(acc[n + 1], fa, fb[1]);
        }
    }
}
// acc (16 × 8·N8) += P (16 × 16·K16, the A fragments in registers) · B stored k-major (tile
// b[k][n]): the products P·v, dS·k, Pᵀ·dy, dSᵀ·q.
template <int K16, int N8, int LDB>
__device__ __forceinline__ void product_rb(float (&acc)[N8][4], const uint32_t (&p)[K16][4], const bf16* b) {
#pragma unroll
    for (int k = 0; k < K16; k++)
#pragma unroll
        for (int n = 0; n < N8; n += 2) {
            uint32_t fb[2][2];
            load_b_kn<LDB>(fb, b, k * 16, n * 8);
            mma_bf16_16816(acc[n], p[k], fb[0]);
            mma_bf16_16816(acc[n + 1], p[k], fb[1]);
        }
}
// Accumulators of 16 × 8·N8 as the A fragments of the same matrix in bf16 (mma.cuh).
template <int N8>
__device__ __forceinline__ void to_a_fragments(uint32_t (&a)[N8 / 2][4], const float (&c)[N8][4]) {
#pragma unroll
    for (int k = 0; k < N8 / 2; k++) {
        a[k][0] = pack_bf16x2(c[2 * k][0], c[2 * k][1]);
        a[k][1] = pack_bf16x2(c[2 * k][2], c[2 * k][3]);
        a[k][2] = pack_bf16x2(c[2 * k + 1][0], c[2 * k + 1][1]);
        a[k][3] = pack_bf16x2(c[2 * k + 1][2], c[2 * k + 1][3]);
    }
}
template <int N8>
__device__ __forceinline__ void zero(float (&acc)[N8][4]) {
#pragma unroll
    for (int n = 0; n < N8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}
// Where accumulator element e of column tile n of this lane lies in a 16 × 8·N8 result:
// row (0..15) and column.
__device__ __forceinline__ int acc_row(int e) { return (threadIdx.x % 32) / 4 + (e / 2) * 8; }
__device__ __forceinline__ int acc_col(int n, int e) { return n * 8 + (threadIdx.x % 4) * 2 + e % 2; }
// The maximum and the sum over a row's 4 lanes (the quad that holds it).
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
// A 16 × 8·N8 float32 result, times scale, as bf16 into rows row0.. of a (B,T,width) tensor
// at dst (at (b, 0, the head's first column)); rows at or past T are not written.
template <int N8>
__device__ __forceinline__ void store_rows(bf16* dst, int width, const float (&acc)[N8][4], float scale, int row0,
                                           int T) {
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int t = row0 + acc_row(2 * half);
        if (t >= T) continue;
#pragma unroll
        for (int n = 0; n < N8; n++) {
            uint32_t v = pack_bf16x2(acc[n][2 * half] * scale, acc[n][2 * half + 1] * scale);
            *reinterpret_cast<uint32_t*>(dst + (size_t)t * width + acc_col(n, 0)) = v;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Forward. grid (query tiles of 64, B·NH), the tiles nearest the end (the most keys) first.
// Shared memory: q (64 × LD), then k and v twice each (this tile and the next).

template <int HS>
constexpr size_t forward_shared_bytes() {
    return (size_t)5 * ROWS * Head<HS>::LD * sizeof(bf16);
}

// One key tile (64 keys at k_tile, v_tile) for this warp's 16 query rows: the online softmax
// update of m (running maximum, base-2 units), l (this lane's share of the running sum) and
// o. MASK: the diagonal tile, where key c is hidden from row r when c > r.
template <int HS, bool MASK>
__device__ __forceinline__ void forward_tile(float (&o)[Head<HS>::N8][4], float (&m)[2], float (&l)[2],
                                             const uint32_t (&q)[Head<HS>::K16][4], const bf16* k_tile,
                                             const bf16* v_tile, int warp_row, float scale_log2) {
    constexpr int LD = Head<HS>::LD, K16 = Head<HS>::K16, N8 = Head<HS>::N8, KEYS8 = ROWS / 8;
    float s[KEYS8][4];  // S = q·kᵀ: 16 rows × 64 keys
    zero(s);
#pragma unroll
    for (int k = 0; k < K16; k++)
#pragma unroll
        for (int n = 0; n < KEYS8; n += 2) {
            uint32_t fb[2][2];
            load_b_nk<LD>(fb, k_tile, n * 8, k * 16);
            mma_bf16_16816(s[n], q[k], fb[0]);
            mma_bf16_16816(s[n + 1], q[k], fb[1]);
        }
    if (MASK) {
#pragma unroll
        for (int n = 0; n < KEYS8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (acc_col(n, e) > warp_row + acc_row(e)) s[n][e] = -INFINITY;
    }
    // the new maximum of each of this lane's two rows, and by how much the old sums shrink
    float alpha[2];
#pragma unroll
    for (int half = 0; half < 2; half++) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < KEYS8; n++) mx = fmaxf(mx, fmaxf(s[n][2 * half], s[n][2 * half + 1]));
        const float m_new = fmaxf(m[half], quad_max(mx) * scale_log2);  // finite: every row sees key 0
        alpha[half] = exp2_approx(m[half] - m_new);  // 0 on the first tile (m = -inf)
        m[half] = m_new;
        l[half] *= alpha[half];
    }
#pragma unroll
    for (int n = 0; n < KEYS8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float p = exp2_approx(fmaf(s[n][e], scale_log2, -m[e / 2]));  // exp2(-inf) = 0 where masked
            s[n][e] = p;
            l[e / 2] += p;
        }
#pragma unroll
    for (int n = 0; n < N8; n++) o[n][0] *= alpha[0], o[n][1] *= alpha[0], o[n][2] *= alpha[1], o[n][3] *= alpha[1];
    uint32_t p[KEYS8 / 2][4];
    to_a_fragments<KEYS8>(p, s);
    product_rb<KEYS8 / 2, N8, LD>(o, p, v_tile);  // o += P·v
}

template <int HS>
__global__ void __launch_bounds__(THREADS)
    flash_attention_forward_mma_kernel(bf16* out, float* lse, const bf16* qkv, int T, int NH) {
    constexpr int LD = Head<HS>::LD, K16 = Head<HS>::K16, N8 = Head<HS>::N8;
    extern __shared__ __align__(128) char flash_smem[];
    bf16* q_tile = reinterpret_cast<bf16*>(flash_smem);
    bf16* k_tiles = q_tile + ROWS * LD;      // [2][ROWS][LD]
    bf16* v_tiles = k_tiles + 2 * ROWS * LD;  // [2][ROWS][LD]
    const int tiles = (T + ROWS - 1) / ROWS, qt = tiles - 1 - blockIdx.x, q0 = qt * ROWS;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS, width = 3 * C;
    const int warp_row = (threadIdx.x / 32) * 16;
    const float scale_log2 = LOG2E / sqrtf((float)HS);
    const bf16* q_src = qkv + (size_t)b * T * width + h * HS;
    const bf16* k_src = q_src + C;
    const bf16* v_src = q_src + 2 * C;

    load_tile_async<HS, ROWS>(q_tile, q_src, width, q0, T);
    load_tile_async<HS, ROWS>(k_tiles, k_src, width, 0, T);
    load_tile_async<HS, ROWS>(v_tiles, v_src, width, 0, T);
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
            load_tile_async<HS, ROWS>(k_tiles + (1 - cur) * ROWS * LD, k_src, width, (kt + 1) * ROWS, T);
            load_tile_async<HS, ROWS>(v_tiles + (1 - cur) * ROWS * LD, v_src, width, (kt + 1) * ROWS, T);
        }
        cp_async_commit();
        cp_async_wait<1>();  // tile kt's group is complete (only the next one may be in flight)
        __syncthreads();
        return cur;
    };
    for (int kt = 0; kt < qt; kt++) {
        const int cur = next_tile(kt);
        forward_tile<HS, false>(o, m, l, q, k_tiles + cur * ROWS * LD, v_tiles + cur * ROWS * LD, warp_row, scale_log2);
        __syncthreads();  // every warp is done with this buffer before the next prefetch refills it
    }
    const int cur = next_tile(qt);
    forward_tile<HS, true>(o, m, l, q, k_tiles + cur * ROWS * LD, v_tiles + cur * ROWS * LD, warp_row, scale_log2);
    const float sum[2] = {quad_sum(l[0]), quad_sum(l[1])};
#pragma unroll
    for (int n = 0; n < N8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[n][e] /= sum[e / 2];
    bf16* y = out + (size_t)b * T * C + h * HS;
    store_rows<N8>(y, C, o, 1.0f, q0 + warp_row, T);
    if (threadIdx.x % 4 == 0)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int t = q0 + warp_row + acc_row(2 * half);
            if (t < T) lse[(size_t)bh * T + t] = (m[half] + log2f(sum[half])) / LOG2E;  // natural log
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

// The backward's probabilities and score gradients of one tile pair, in place: s holds the
// scores S (rows × columns of this warp's 16 × 8·N8 view), dp the products dP; afterwards s
// holds P = exp2(S·scale_log2 − lse₂) and dp holds dS = P ⊙ (dP − D), masked to 0 where
// `hidden` says. lse2 and D are given per row and per column by the callers' functors.
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
// Backward, step 2: dk and dv for 64 keys per block, each warp 16 of them, summed over the
// query tiles that see them in order (deterministic). grid (key tiles, B·NH), the first keys
// (seen by the most queries) first. Works on the transposed products, keys as rows:
//   Sᵀ = k·qᵀ, dPᵀ = v·dyᵀ, Pᵀ, dSᵀ as above, dv += Pᵀ·dy, dk += dSᵀ·q (× scale at the end).
// Shared memory: k, v (64 × LD each), then q, dy (Q × LD each, twice), lse₂ and D (Q floats,
// twice), where Q = Head<HS>::OTHER query rows per step.

template <int HS>
constexpr size_t dkdv_shared_bytes() {
    constexpr int Q = Head<HS>::OTHER, LD = Head<HS>::LD;
    return (size_t)(2 * ROWS + 4 * Q) * LD * sizeof(bf16) + 4 * Q * sizeof(float);
}

template <int HS>
__global__ void __launch_bounds__(THREADS)
    flash_attention_backward_dkdv_mma_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                             const float* delta, int T, int NH) {
    constexpr int LD = Head<HS>::LD, K16 = Head<HS>::K16, N8 = Head<HS>::N8, Q = Head<HS>::OTHER, Q8 = Q / 8;
    extern __shared__ __align__(128) char flash_smem[];
    bf16* k_tile = reinterpret_cast<bf16*>(flash_smem);
    bf16* v_tile = k_tile + ROWS * LD;
    bf16* q_tiles = v_tile + ROWS * LD;  // [2][Q][LD]
    bf16* dy_tiles = q_tiles + 2 * Q * LD;  // [2][Q][LD]
    float* lse2_rows = reinterpret_cast<float*>(dy_tiles + 2 * Q * LD);  // [2][Q]
    float* d_rows = lse2_rows + 2 * Q;                                   // [2][Q]
    const int tiles = (T + Q - 1) / Q, k0 = blockIdx.x * ROWS, first = k0 / Q;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS, width = 3 * C;
    const int warp_row = (threadIdx.x / 32) * 16;
    const float scale = 1.0f / sqrtf((float)HS), scale_log2 = scale * LOG2E;
    const bf16* q_src = qkv + (size_t)b * T * width + h * HS;
    const bf16* dy_src = dout + (size_t)b * T * C + h * HS;
    lse += (size_t)bh * T, delta += (size_t)bh * T;

    // lse (in base-2 units) and D of query rows q0.. into buffer `buf`; rows past T get
    // values that keep the arithmetic finite (their columns are masked)
    auto load_stats = [&](int buf, int q0) {
        for (int i = threadIdx.x; i < Q; i += THREADS) {
            const int t = q0 + i;
            lse2_rows[buf * Q + i] = t < T ? lse[t] * LOG2E : 0.0f;
            d_rows[buf * Q + i] = t < T ? delta[t] : 0.0f;
        }
    };
    load_tile_async<HS, ROWS>(k_tile, q_src + C, width, k0, T);
    load_tile_async<HS, ROWS>(v_tile, q_src + 2 * C, width, k0, T);
    load_tile_async<HS, Q>(q_tiles, q_src, width, first * Q, T);
    load_tile_async<HS, Q>(dy_tiles, dy_src, C, first * Q, T);
    load_stats(0, first * Q);
    cp_async_commit();

    float dk[N8][4], dv[N8][4];
    zero(dk), zero(dv);
    for (int qt = first; qt < tiles; qt++) {
        const int cur = (qt - first) % 2, q0 = qt * Q;
        if (qt + 1 < tiles) {
            load_tile_async<HS, Q>(q_tiles + (1 - cur) * Q * LD, q_src, width, q0 + Q, T);
            load_tile_async<HS, Q>(dy_tiles + (1 - cur) * Q * LD, dy_src, C, q0 + Q, T);
            load_stats(1 - cur, q0 + Q);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const bf16* q_tile = q_tiles + cur * Q * LD;
        const bf16* dy_tile = dy_tiles + cur * Q * LD;
        const float* lse2 = lse2_rows + cur * Q;
        const float* d = d_rows + cur * Q;
        float s[Q8][4], dp[Q8][4];  // Sᵀ and dPᵀ: this warp's 16 keys × Q queries
        zero(s), zero(dp);
        product_abt<K16, Q8, LD, LD>(s, k_tile, warp_row, q_tile);
        product_abt<K16, Q8, LD, LD>(dp, v_tile, warp_row, dy_tile);
        auto stats = [&](int n, int e, float& l2, float& dd) {
            const int c = acc_col(n, e);
            l2 = lse2[c], dd = d[c];
        };
        // key k0 + row is hidden from query q0 + column when it comes later, or the query is past T
        auto hidden = [&](int n, int e) {
            const int key = k0 + warp_row + acc_row(e), query = q0 + acc_col(n, e);
            return key > query || query >= T;
        };
        if (q0 < k0 + ROWS || q0 + Q > T)
            scores_to_gradients<Q8, true>(s, dp, scale_log2, stats, hidden);
        else
            scores_to_gradients<Q8, false>(s, dp, scale_log2, stats, hidden);
        uint32_t pt[Q8 / 2][4], dst[Q8 / 2][4];
        to_a_fragments<Q8>(pt, s);
        to_a_fragments<Q8>(dst, dp);
        product_rb<Q8 / 2, N8, LD>(dv, pt, dy_tile);  // dv += Pᵀ·dy
        product_rb<Q8 / 2, N8, LD>(dk, dst, q_tile);  // dk += dSᵀ·q
        __syncthreads();  // this buffer is refilled next
    }
    bf16* dk_dst = dqkv + (size_t)b * T * width + C + h * HS;
    store_rows<N8>(dk_dst, width, dk, scale, k0 + warp_row, T);
    store_rows<N8>(dk_dst + C, width, dv, 1.0f, k0 + warp_row, T);
}

// ---------------------------------------------------------------------------------------
// Backward, step 3: dq for 64 queries per block, each warp 16 of them, summed over the key
// tiles they see, in order. grid (query tiles of 64, B·NH), the last tiles first.
//   S = q·kᵀ, dP = dy·vᵀ, P, dS as above, dq += dS·k (× scale at the end).
// Shared memory: q, dy (64 × LD each), then k, v (K × LD each, twice), K = Head<HS>::OTHER.

template <int HS>
constexpr size_t dq_shared_bytes() {
    return (size_t)(2 * ROWS + 4 * Head<HS>::OTHER) * Head<HS>::LD * sizeof(bf16);
}

template <int HS>
__global__ void __launch_bounds__(THREADS)
    flash_attention_backward_dq_mma_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                           const float* delta, int T, int NH) {
    constexpr int LD = Head<HS>::LD, K16 = Head<HS>::K16, N8 = Head<HS>::N8, K = Head<HS>::OTHER, K8 = K / 8;
    extern __shared__ __align__(128) char flash_smem[];
    bf16* q_tile = reinterpret_cast<bf16*>(flash_smem);
    bf16* dy_tile = q_tile + ROWS * LD;
    bf16* k_tiles = dy_tile + ROWS * LD;     // [2][K][LD]
    bf16* v_tiles = k_tiles + 2 * K * LD;    // [2][K][LD]
    const int tiles = (T + ROWS - 1) / ROWS, q0 = (tiles - 1 - blockIdx.x) * ROWS;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS, width = 3 * C;
    const int warp_row = (threadIdx.x / 32) * 16;
    const float scale = 1.0f / sqrtf((float)HS), scale_log2 = scale * LOG2E;
    const bf16* q_src = qkv + (size_t)b * T * width + h * HS;
    const bf16* k_src = q_src + C;
    const bf16* v_src = q_src + 2 * C;

    load_tile_async<HS, ROWS>(q_tile, q_src, width, q0, T);
    load_tile_async<HS, ROWS>(dy_tile, dout + (size_t)b * T * C + h * HS, C, q0, T);
    load_tile_async<HS, K>(k_tiles, k_src, width, 0, T);
    load_tile_async<HS, K>(v_tiles, v_src, width, 0, T);
    cp_async_commit();
    // this lane's two rows' lse (base 2) and D; rows past T get finite values (not stored)
    float lse2[2], d[2];
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int t = q0 + warp_row + acc_row(2 * half);
        lse2[half] = t < T ? lse[(size_t)bh * T + t] * LOG2E : 0.0f;
        d[half] = t < T ? delta[(size_t)bh * T + t] : 0.0f;
    }
    float dq[N8][4];
    zero(dq);
    const int last = ((q0 + ROWS < T ? q0 + ROWS : T) - 1) / K;  // the last key tile these queries see
    for (int kt = 0; kt <= last; kt++) {
        const int cur = kt % 2, k0 = kt * K;
        if (kt < last) {
            load_tile_async<HS, K>(k_tiles + (1 - cur) * K * LD, k_src, width, k0 + K, T);
            load_tile_async<HS, K>(v_tiles + (1 - cur) * K * LD, v_src, width, k0 + K, T);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const bf16* k_tile = k_tiles + cur * K * LD;
        const bf16* v_tile = v_tiles + cur * K * LD;
        float s[K8][4], dp[K8][4];  // S and dP: this warp's 16 queries × K keys
        zero(s), zero(dp);
        product_abt<K16, K8, LD, LD>(s, q_tile, warp_row, k_tile);
        product_abt<K16, K8, LD, LD>(dp, dy_tile, warp_row, v_tile);
        auto stats = [&](int, int e, float& l2, float& dd) { l2 = lse2[e / 2], dd = d[e / 2]; };
        auto hidden = [&](int n, int e) { return k0 + acc_col(n, e) > q0 + warp_row + acc_row(e); };
        if (k0 + K > q0)  // a tile the diagonal crosses (keys past T lie beyond it too)
            scores_to_gradients<K8, true>(s, dp, scale_log2, stats, hidden);
        else
            scores_to_gradients<K8, false>(s, dp, scale_log2, stats, hidden);
        uint32_t ds[K8 / 2][4];
        to_a_fragments<K8>(ds, dp);
        product_rb<K8 / 2, N8, LD>(dq, ds, k_tile);  // dq += dS·k
        __syncthreads();
    }
    store_rows<N8>(dqkv + (size_t)b * T * width + h * HS, width, dq, scale, q0 + warp_row, T);
}

}  // namespace flash_mma
}  // namespace gpu
