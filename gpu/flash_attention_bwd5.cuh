// gpu/flash_attention_bwd5.cuh: the bf16 tensor-core attention backward in five products per
// query-key pair (FlashAttention-2's count), deterministic, without floating-point atomics.
// gpu/flash_attention.cuh states the contract and picks it (the default at the head sizes of
// bwd5_supports(), bf16); the three-kernel backward of gpu/flash_attention_mma.cuh stays as the
// reference it is checked against (flash_attention_backward(..., three_kernels = true)).
//
// The three-kernel backward makes 7 products per pair: its dk/dv pass computes S and dP, its
// dq pass computes them again, because each block owns the rows it writes. Here one kernel
// does the dk/dv pass's work (a block owns 64 keys of K/V head kh, walks the query tiles of
// its group's G query heads, dk and dv in registers) and also dq = dS·k, the fifth product,
// which it adds into a float32 dq of the whole (B,T,C) in global memory. Query tile i of head
// h receives one such term from each key tile j ≤ i·Q/64 (every key block that sees it), and
// the terms are summed in a FIXED ORDER, j = 0, 1, 2, ..., so that reruns give the same bits:
//   * an order counter per (b, h, query tile): the block of key tile j waits (one thread, an
//     acquire load in a loop) until the counter is j, i.e. until key tiles 0..j−1 have added
//     theirs; its warps then load the float32 partial sum, add dS·k and store it back (plain
//     loads and stores through L2); after a __syncthreads one thread adds 1 to the counter
//     (a release add). Key tile 0 stores without loading; the last key tile of the query tile
//     (the one holding its first query, where the diagonal crosses) writes dq·(1/√hs) as bf16
//     straight into dqkv, so no pass converts the float32 sums afterwards.
//   * each block walks its query tiles from the LAST to its diagonal one. Key tile 0 then adds
//     to tile n−1 first, n−2 next, ..., and key tile j reaches tile n−1 − s at its step s, just
//     as key tile j − 1 did one moment before: the blocks of one (b, kh) advance together and
//     a wait is about one add long. (Walking forward would make key tile j wait at its very
//     first, diagonal, tile until every block before it had reached that tile: j steps idle.)
//   * no wait can deadlock. A block waits only for a block of the same (b, kh) with a lower
//     key tile. Blocks take their work in the order they START (a ticket, atomicAdd on a
//     counter, not blockIdx: CUDA does not promise to start blocks in index order, and the CPU
//     runtime's race detector starts them in reverse), tickets ordered key tile 0, 1, ... of
//     (b, kh) = (0, 0), then (0, 1), ...: whatever a block waits for started before it, is
//     resident (GPU) or running on another OS thread or already finished (CPU runtime, where
//     a block runs to its end once started, and a waiting thread yields its OS thread), and
//     itself waits only for blocks started earlier still. The chain ends at key tile 0, which
//     never waits.
// Why not per-block float32 partials reduced in order afterwards (no waiting at all): every
// (query tile, key tile) pair would keep its own Q × hs partial, about T/128 times (B,NH,T,hs)
// float32 (8 times at T = 1024, 16 at 2048), beyond a small multiple of it. The counters here
// cost B·NH·⌈T/Q⌉ + 1 ints, the partial sums B·T·C floats: flash_backward_scratch_floats().
//
// The dq product. A warp holds dSᵀ for its 16 keys × Q queries (the accumulator layout), but
// dq = dS·k sums over all 64 keys of the block, across its 4 warps. So each warp stores its dSᵀ
// rows (bf16, already packed as the A operand of dk += dSᵀ·q) into a 64 × Q tile in shared
// memory, and after a __syncthreads each warp computes its share of dS·k over the 64 keys, A =
// dS read transposed with ldmatrix .trans, B = k. The warps' shares: Q = 64 (hs = 64): 2 × 32
// rows × 2 halves of the columns, k's fragments for them in registers (below); Q = 32 (hs =
// 128): 2 × 16 rows × 2 halves of the columns, k from the block's k tile. Either way 32 mma per
// warp per step, as each of the other four products.
//
// Shared memory per mma (hs = 64, the loop "held" in registers, Bwd5::HELD). A warp owns 16
// key rows, so an ldmatrix .x4 of a B operand feeds 2 mma: 256 bytes per mma for each product
// whose B comes from shared memory. Three things bring the loop under 200 bytes per mma:
//   * the warp's k and v rows (the A operands of Sᵀ = k·qᵀ and dPᵀ = v·dyᵀ, 2 × 16 registers)
//     and its 64 × 32 share of k as dq's B operand (32 registers) are loaded once per block,
//     not once per query tile;
//   * the query tile goes 16 queries at a time: Sᵀ and dPᵀ for them (16 keys × 16 queries),
//     Pᵀ and dSᵀ, then dv += Pᵀ·dy and dk += dSᵀ·q over those 16 queries. The B fragments of q
//     and dy that Sᵀ and dPᵀ read (pairs along the head) serve dk and dv (pairs along the
//     queries) after movmatrix .trans, one register transpose per 8 × 8 matrix: q and dy each
//     cross shared memory once per step, not twice;
//   * dq's warp tile is 32 × 32, so its A operand (dS) is 8 ldmatrix per step.
// Per warp per step: 160 mma, 16 + 16 (q, dy) + 8 (dS) = 40 ldmatrix .x4, 128 movmatrix, 16
// four-byte stores of dSᵀ, 16 eight-byte loads of lse₂ and D; 253 registers, no spills (nvcc
// 13.0, sm_90). At hs = 128 the same would need 64 registers for k and v and 64 for q's and
// dy's fragments beside dk and dv's 128 accumulators: it keeps the per-tile loop, 100
// ldmatrix .x4 per step (k and v read again at each step, q and dy twice), 252 registers.
// (The 16-query loop at hs = 128 with k and v read from shared memory for each 16 queries:
// 84 ldmatrix, but 255 registers and 16 bytes of spill stores, 24 of loads.)
// docs/attention.md has the compiled figures.
//
// Cost per query-key pair (causal: about T²/2 per (b, h)): 5 products of 2·HS FLOP (Sᵀ, dPᵀ,
// dv, dk, dq), against the three-kernel backward's 7. Bytes from global memory per block step
// (one Q-row query tile): q and dy, 2·Q·HS·2 (from L2 when the blocks of one (b, kh) run
// together, as their tickets arrange), lse and D, 2·Q·4, and the float32 partial dq loaded and
// stored, 2·Q·HS·4 (none loaded at key tile 0; bf16 stored at the last key tile); the k and v
// of the block once, 2·64·HS·2, dk and dv stored once. The K/V re-reads of the three-kernel dq
// pass (2·K·HS·2 per step) are gone; the partial dq traffic (2·Q·HS·4 per step) replaces them,
// at L2.
#pragma once
#include <cuda_bf16.h>

#include "common.cuh"
#include "flash_attention_mma.cuh"
#include "mma.cuh"
#include "mma_fragments.cuh"

namespace gpu {
namespace flash_mma {

// The head sizes this kernel is instantiated for (others keep the three-kernel backward).
inline bool bwd5_supports(int hs) { return hs == 64 || hs == 128; }
// Query rows per step: Head<HS>::OTHER (64, or 32 above head size 64), as a run-time value.
inline int bwd5_query_rows(int hs) { return hs <= 64 ? 64 : 32; }

// The scratch, in float32 elements from its start (each region 256-byte aligned when the
// start is): D (B,NH,T), then the partial dq (B,T,C) float32, then the order counters (B,NH,
// ⌈T/Q⌉) and the ticket, as ints.
inline size_t bwd5_delta_floats(int B, int T, int NH) { return ((size_t)B * NH * T + 63) / 64 * 64; }
inline size_t bwd5_dq_floats(int B, int T, int C) { return ((size_t)B * T * C + 63) / 64 * 64; }
inline size_t bwd5_counter_ints(int B, int T, int NH, int hs) {
    const int Q = bwd5_query_rows(hs);
    return (size_t)B * NH * ((T + Q - 1) / Q) + 1;  // the last: the ticket
}
inline size_t bwd5_scratch_floats(int B, int T, int C, int NH) {
    return bwd5_delta_floats(B, T, NH) + bwd5_dq_floats(B, T, C) + bwd5_counter_ints(B, T, NH, C / NH);
}

template <int HS>
struct Bwd5 {
    static constexpr int LD = Head<HS>::LD, N8 = Head<HS>::N8, K16 = Head<HS>::K16, Q = Head<HS>::OTHER,
                         Q8 = Q / 8;
    static constexpr int LDS = Q + 8;  // a row of the dSᵀ tile: Q queries, 16 bytes of padding
    // HELD (hs ≤ 64): the warp's k and v rows (the A operands of Sᵀ and dPᵀ) and its share of k
    // as dq's B operand stay in registers for the whole block, the query tile goes 16 queries at
    // a time, and each B fragment of q and dy serves two products (movmatrix). Above hs = 64
    // they would not fit beside dk and dv (2 × N8 × 4 floats): the per-tile loop of before.
    static constexpr bool HELD = HS <= 64;
    // dq = dS·k: each warp takes DQ_M × 16 query rows × DQ_N8 × 8 columns of the head.
    // HELD: 2 × 32 rows × 2 × 32 columns (32 × 32 per warp: 8 ldmatrix of dS per step, k's
    // fragments in registers); else Q = 32: 2 × 16 rows × 2 halves of the columns.
    static constexpr int DQ_M = HELD ? 2 : 1;
    static constexpr int QROWS = Q / (16 * DQ_M);  // row groups of the query tile in dq
    static constexpr int SLICES = WARPS / QROWS;   // column slices of the head per row group
    static constexpr int DQ_N8 = N8 / SLICES;      // 8-wide column tiles of a warp's dq share
    static_assert(WARPS % QROWS == 0 && N8 % SLICES == 0 && DQ_N8 % 2 == 0, "the dq shares cover the tile");
    static_assert(ROWS % Q == 0, "a key block's diagonal starts a query tile");
};

// Shared memory: k, v (64 × LD each), q, dy (Q × LD each, twice), lse₂ and D (Q floats,
// twice), the dSᵀ tile (64 × LDS), the ticket.
template <int HS>
constexpr size_t bwd5_shared_bytes() {
    using S = Bwd5<HS>;
    return (size_t)(2 * ROWS + 4 * S::Q) * S::LD * sizeof(bf16) + 4 * S::Q * sizeof(float) +
           (size_t)ROWS * S::LDS * sizeof(bf16) + 16;
}

// Waits (one thread) until *counter == value: the blocks before this one in the counter's
// order have added their share. Such a block has started before this one (the tickets), so
// the wait ends; one that would not (a bug) stops the kernel after about 30 s rather than
// hanging the GPU or the test.
__device__ __forceinline__ void wait_for_turn(const int* counter, int value) {
    if (load_acquire_gpu(counter) == value) return;
    const long long start = clock64();
    while (load_acquire_gpu(counter) != value) {
        if (clock64() - start > 60000000000ll) __trap();  // 30 s at 2 GHz
        spin_pause();
    }
}

// This warp's term of dq (M row tiles of 16 × 8·N8 columns: rows t0 + 16·i + ..., columns
// col..) into the float32 partial sum (first: stored without loading), or, at the last term,
// dq·scale as bf16 into dqkv. Rows at or past T are not written.
template <int M, int N8>
__device__ __forceinline__ void add_dq_term(float* dq_partial, bf16* dqkv, const float (&dq)[M][N8][4], int b,
                                            int t0, int col, int T, int C, int width, bool first_term,
                                            bool last_term, float scale) {
#pragma unroll
    for (int i = 0; i < M; i++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int t = t0 + 16 * i + acc_row(2 * half);
            if (t >= T) continue;
            float* sum_row = dq_partial + ((size_t)b * T + t) * C + col;
            bf16* out_row = dqkv + ((size_t)b * T + t) * width + col;
#pragma unroll
            for (int n = 0; n < N8; n++) {
                const int c = acc_col(n, 0);
                float2 x = make_float2(dq[i][n][2 * half], dq[i][n][2 * half + 1]);
                if (!first_term) {
                    const float2 was = __ldcg(reinterpret_cast<const float2*>(sum_row + c));
                    x = make_float2(was.x + x.x, was.y + x.y);
                }
                if (last_term)
                    *reinterpret_cast<uint32_t*>(out_row + c) = pack_bf16x2(x.x * scale, x.y * scale);
                else
                    __stcg(reinterpret_cast<float2*>(sum_row + c), x);
            }
        }
}

// grid: B·KVH·⌈T/64⌉ blocks (one dimension); the ticket, not blockIdx, names the work.
template <int HS>
__global__ void __launch_bounds__(THREADS)
    flash_attention_backward_bwd5_mma_kernel(bf16* dqkv, float* dq_partial, int* counters, const bf16* dout,
                                             const bf16* qkv, const float* lse, const float* delta, int T, int NH,
                                             int KVH) {
    using S = Bwd5<HS>;
    constexpr int LD = S::LD, N8 = S::N8, K16 = S::K16, Q = S::Q, Q8 = S::Q8, LDS = S::LDS, DQ_M = S::DQ_M,
                  DQ_N8 = S::DQ_N8;
    extern __shared__ __align__(128) char flash_smem[];
    bf16* k_tile = reinterpret_cast<bf16*>(flash_smem);
    bf16* v_tile = k_tile + ROWS * LD;
    bf16* q_tiles = v_tile + ROWS * LD;     // [2][Q][LD]
    bf16* dy_tiles = q_tiles + 2 * Q * LD;  // [2][Q][LD]
    float* lse2_rows = reinterpret_cast<float*>(dy_tiles + 2 * Q * LD);  // [2][Q]
    float* d_rows = lse2_rows + 2 * Q;                                    // [2][Q]
    bf16* ds_tile = reinterpret_cast<bf16*>(d_rows + 2 * Q);              // [ROWS][LDS]: dSᵀ, keys × queries
    int* ticket_shared = reinterpret_cast<int*>(ds_tile + ROWS * LDS);

    const int key_tiles = (T + ROWS - 1) / ROWS, query_tiles = (T + Q - 1) / Q;
    const int B = (int)(gridDim.x / key_tiles) / KVH;
    int* ticket = counters + (size_t)B * NH * query_tiles;  // after the counters
    if (threadIdx.x == 0) *ticket_shared = atomicAdd(ticket, 1);
    __syncthreads();
    const int work = *ticket_shared, j = work % key_tiles, bkh = work / key_tiles;
    const int G = NH / KVH, b = bkh / KVH, kh = bkh % KVH, h0 = kh * G;  // query heads h0 .. h0 + G − 1
    const int C = NH * HS, width = C + 2 * KVH * HS, warp = threadIdx.x / 32, warp_row = warp * 16;
    const float scale = 1.0f / sqrtf((float)HS), scale_log2 = scale * LOG2E;
    const bf16* q = qkv + (size_t)b * T * width + h0 * HS;     // query head h0 (head h0 + g: + g·HS)
    const bf16* k = qkv + (size_t)b * T * width + C + kh * HS;
    const bf16* v = k + KVH * HS;
    const bf16* dy = dout + (size_t)b * T * C + h0 * HS;
    lse += (size_t)(b * NH + h0) * T, delta += (size_t)(b * NH + h0) * T;
    const int k0 = j * ROWS, first = k0 / Q, per_head = query_tiles - first, steps = G * per_head;

    // step s: query head h0 + s / per_head, its query tile query_tiles − 1 − s % per_head
    auto load_step = [&](int s, int buf) {
        const int g = s / per_head, q0 = (query_tiles - 1 - s % per_head) * Q;
        load_tile_async<HS, Q>(q_tiles + buf * Q * LD, q + g * HS, width, q0, T);
        load_tile_async<HS, Q>(dy_tiles + buf * Q * LD, dy + g * HS, C, q0, T);
        static_assert(Q <= THREADS, "one row's statistics per thread");
        if (const int i = threadIdx.x; i < Q) {  // rows past T: finite values, masked
            const int t = q0 + i;
            lse2_rows[buf * Q + i] = t < T ? lse[(size_t)g * T + t] * LOG2E : 0.0f;
            d_rows[buf * Q + i] = t < T ? delta[(size_t)g * T + t] : 0.0f;
        }
    };
    load_tile_async<HS, ROWS>(k_tile, k, width, k0, T);
    load_tile_async<HS, ROWS>(v_tile, v, width, k0, T);
    cp_async_commit();  // k and v: a group of their own, so they can be taken into registers first
    load_step(0, 0);
    cp_async_commit();

    float dk[N8][4], dv[N8][4];
    zero(dk), zero(dv);
    // this warp's share of dq = dS·k: query rows dq_row.., columns dq_col..
    const int dq_row = (warp % S::QROWS) * 16 * DQ_M, dq_col = (warp / S::QROWS) * DQ_N8 * 8;
    // HELD: this warp's k and v rows as A fragments over the head (Sᵀ = k·qᵀ, dPᵀ = v·dyᵀ), and
    // its columns of all 64 rows of k as dq's B fragments (16 keys × 16 columns per kb[kk][n..n+1])
    uint32_t ka[S::HELD ? K16 : 1][4], va[S::HELD ? K16 : 1][4], kb[S::HELD ? ROWS / 16 : 1][DQ_N8][2];
    if constexpr (S::HELD) {
        cp_async_wait<1>();
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < K16; kk++)
            load_a<LD>(ka[kk], k_tile, warp_row, kk * 16), load_a<LD>(va[kk], v_tile, warp_row, kk * 16);
#pragma unroll
        for (int kk = 0; kk < ROWS / 16; kk++)
#pragma unroll
            for (int n = 0; n < DQ_N8; n += 2) {
                uint32_t fb[2][2];
                load_b_kn<LD>(fb, k_tile, kk * 16, dq_col + n * 8);
                kb[kk][n][0] = fb[0][0], kb[kk][n][1] = fb[0][1], kb[kk][n + 1][0] = fb[1][0],
                kb[kk][n + 1][1] = fb[1][1];
            }
    }
    for (int s = 0; s < steps; s++) {
        const int buf = s % 2, g = s / per_head, qt = query_tiles - 1 - s % per_head, q0 = qt * Q;
        if (s + 1 < steps) load_step(s + 1, 1 - buf);
        wait_for_current_tile();
        const bf16* q_tile = q_tiles + buf * Q * LD;
        const bf16* dy_tile = dy_tiles + buf * Q * LD;
        const float* lse2 = lse2_rows + buf * Q;
        const float* d = d_rows + buf * Q;
        const bool masked = q0 < k0 + ROWS || q0 + Q > T;
        if constexpr (S::HELD) {
            // 16 queries at a time: Sᵀ and dPᵀ of this warp's 16 keys × queries c0.., then Pᵀ and dSᵀ,
            // then dv += Pᵀ·dy and dk += dSᵀ·q over those 16 queries
#pragma unroll
            for (int c0 = 0; c0 < Q; c0 += 16) {
                // q and dy rows c0..c0+15 as the B fragments of Sᵀ and dPᵀ over the head: qb[kk][t]
                // for columns (queries) c0 + 8t.., head dimensions 16·kk.. (one ldmatrix .x4 each)
                uint32_t qb[K16][2][2], yb[K16][2][2];
#pragma unroll
                for (int kk = 0; kk < K16; kk++)
                    load_b_nk<LD>(qb[kk], q_tile, c0, kk * 16), load_b_nk<LD>(yb[kk], dy_tile, c0, kk * 16);
                float st[2][4], dpt[2][4];
                zero(st), zero(dpt);
#pragma unroll
                for (int kk = 0; kk < K16; kk++)
#pragma unroll
                    for (int t = 0; t < 2; t++)
                        mma_bf16_16816(st[t], ka[kk], qb[kk][t]), mma_bf16_16816(dpt[t], va[kk], yb[kk][t]);
                float l2[2][2], dd[2][2];  // the statistics of this lane's 4 queries, loaded once for both versions
#pragma unroll
                for (int t = 0; t < 2; t++)
#pragma unroll
                    for (int e = 0; e < 2; e++) l2[t][e] = lse2[c0 + acc_col(t, e)], dd[t][e] = d[c0 + acc_col(t, e)];
                auto stats = [&](int t, int e, float& l, float& dt) { l = l2[t][e % 2], dt = dd[t][e % 2]; };
                auto hidden = [&](int t, int e) {
                    const int key = k0 + warp_row + acc_row(e), query = q0 + c0 + acc_col(t, e);
                    return key > query || query >= T;
                };
                if (masked)
                    scores_to_gradients<2, true>(st, dpt, scale_log2, stats, hidden);
                else
                    scores_to_gradients<2, false>(st, dpt, scale_log2, stats, hidden);
                uint32_t pt[1][4], dst[1][4];
                to_a_fragments<2>(pt, st);
                to_a_fragments<2>(dst, dpt);
                store_a<LDS>(ds_tile, warp_row, c0, dst[0]);  // dSᵀ for dq
                // the same B fragments transposed: (queries c0.. as k, head columns 16·kk + 8·h..)
#pragma unroll
                for (int kk = 0; kk < K16; kk++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const uint32_t by[2] = {movmatrix_trans(yb[kk][0][h]), movmatrix_trans(yb[kk][1][h])};
                        const uint32_t bq[2] = {movmatrix_trans(qb[kk][0][h]), movmatrix_trans(qb[kk][1][h])};
                        mma_bf16_16816(dv[2 * kk + h], pt[0], by);   // dv += Pᵀ·dy
                        mma_bf16_16816(dk[2 * kk + h], dst[0], bq);  // dk += dSᵀ·q
                    }
            }
        } else {
            auto stats = [&](int n, int e, float& l2, float& dd) {
                const int c = acc_col(n, e);
                l2 = lse2[c], dd = d[c];
            };
            // key k0 + row is hidden from query q0 + column when it comes later, or the query is past T
            auto hidden = [&](int n, int e) {
                const int key = k0 + warp_row + acc_row(e), query = q0 + acc_col(n, e);
                return key > query || query >= T;
            };
            float st[Q8][4], dpt[Q8][4];  // Sᵀ and dPᵀ, then Pᵀ and dSᵀ: this warp's 16 keys × Q queries
            scores_and_dp<HS>(st, dpt, k_tile, q_tile, v_tile, dy_tile, warp_row);  // Sᵀ = k·qᵀ, dPᵀ = v·dyᵀ
            if (masked)
                scores_to_gradients<Q8, true>(st, dpt, scale_log2, stats, hidden);
            else
                scores_to_gradients<Q8, false>(st, dpt, scale_log2, stats, hidden);
            uint32_t pt[Q8 / 2][4], dst[Q8 / 2][4];
            to_a_fragments<Q8>(pt, st);
            to_a_fragments<Q8>(dst, dpt);
#pragma unroll
            for (int c = 0; c < Q8 / 2; c++) store_a<LDS>(ds_tile, warp_row, c * 16, dst[c]);  // dSᵀ for dq
            product_rb<Q8 / 2, N8, LD>(dv, pt, dy_tile);  // dv += Pᵀ·dy
            product_rb<Q8 / 2, N8, LD>(dk, dst, q_tile);  // dk += dSᵀ·q
        }

        // dq += dS·k for query tile qt of head h0 + g, in key-tile order (the counter)
        int* counter = counters + ((size_t)b * NH + h0 + g) * query_tiles + qt;
        const bool first_term = j == 0, last_term = j == q0 / ROWS;
        if (threadIdx.x == 0 && !first_term) wait_for_turn(counter, j);
        __syncthreads();  // the dSᵀ tile is whole, and it is this block's turn
        float dq[DQ_M][DQ_N8][4];
        if constexpr (S::HELD) {
            zero(dq[0]), zero(dq[1]);
#pragma unroll
            for (int kk = 0; kk < ROWS / 16; kk++) {  // dS·k over the 64 keys, 16 at a time
                uint32_t fa[DQ_M][4];
#pragma unroll
                for (int i = 0; i < DQ_M; i++) load_a_t<LDS>(fa[i], ds_tile, dq_row + 16 * i, kk * 16);
#pragma unroll
                for (int n = 0; n < DQ_N8; n++)
#pragma unroll
                    for (int i = 0; i < DQ_M; i++) mma_bf16_16816(dq[i][n], fa[i], kb[kk][n]);
            }
        } else {
            zero(dq[0]);
            product_tb<ROWS / 16, DQ_N8, LDS, LD>(dq[0], ds_tile, dq_row, k_tile, dq_col);  // dS·k over the 64 keys
        }
        add_dq_term<DQ_M, DQ_N8>(dq_partial, dqkv, dq, b, q0 + dq_row, (h0 + g) * HS + dq_col, T, C, width,
                                 first_term, last_term, scale);
        __syncthreads();  // every warp's share is stored; the tiles of this step may be refilled
        if (threadIdx.x == 0 && !last_term) add_release_gpu(counter, 1);
    }
    // K/V head kh's columns of dqkv, and v's
    bf16* dk_dst = dqkv + (size_t)b * T * width + C + kh * HS;
    store_rows<N8>(dk_dst, width, dk, scale, k0 + warp_row, T);
    store_rows<N8>(dk_dst + KVH * HS, width, dv, 1.0f, k0 + warp_row, T);
}

// The backward in five products (HS: bwd5_supports): D = rowsum(dy ⊙ y) (the three-kernel
// backward's step 1) into the scratch's start, the counters to zero, then the kernel.
// scratch: bwd5_scratch_floats(B, T, NH·HS, NH) floats.
template <int HS>
void flash_mma_backward5(__nv_bfloat16* dqkv, float* scratch, const __nv_bfloat16* dout, const __nv_bfloat16* out,
                         const __nv_bfloat16* qkv, const float* lse, int B, int T, int NH, int KVH) {
    const int C = NH * HS;
    float* delta = scratch;
    float* dq_partial = scratch + bwd5_delta_floats(B, T, NH);
    int* counters = reinterpret_cast<int*>(dq_partial + bwd5_dq_floats(B, T, C));
    const size_t rows = (size_t)B * T * NH;
    flash_attention_row_dots_kernel<HS><<<(unsigned)((rows + 255) / 256), 256, 0, ctx.stream>>>(delta, dout, out, B, T,
                                                                                              NH);
    KERNEL_CHECK();
    CUDA_CHECK(cudaMemsetAsync(counters, 0, bwd5_counter_ints(B, T, NH, HS) * sizeof(int), ctx.stream));
    const size_t bytes = bwd5_shared_bytes<HS>();
    if (bytes > (48 << 10))
        CUDA_CHECK(cudaFuncSetAttribute((const void*)flash_attention_backward_bwd5_mma_kernel<HS>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    const unsigned blocks = (unsigned)((size_t)B * KVH * ((T + ROWS - 1) / ROWS));
    flash_attention_backward_bwd5_mma_kernel<HS><<<blocks, THREADS, bytes, ctx.stream>>>(
        dqkv, dq_partial, counters, dout, qkv, lse, delta, T, NH, KVH);
    KERNEL_CHECK();
}

}  // namespace flash_mma
}  // namespace gpu
