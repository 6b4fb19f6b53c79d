// gpu/mma_fragments.cuh: one warp's tiles as mma.m16n8k16 fragments, the layer between the
// instructions (gpu/mma.cuh) and the attention algorithm (gpu/flash_attention_mma.cuh).
//
// A warp works on 16 rows at a time. Its operands are fragments in registers whose lanes
// follow the layouts of the table in gpu/mma.cuh (the one place it is written):
//   * an A operand, 16 rows × 16 k (uint32_t[4]), loaded from a shared-memory tile with
//     ldmatrix, or made from accumulators (to_a_fragments);
//   * B operands, 16 k × 8 columns (uint32_t[2]), loaded two at a time from a tile stored
//     n-major (tile[n][k]: a product with Bᵀ) or k-major (tile[k][n], transposed on the way);
//   * accumulators, 16 rows × 8·N8 columns of float32 (float[N8][4]), whose rows sit in the
//     4 lanes of a quad (lanes 4g..4g+3), so a row's maximum or sum takes two shuffles.
// Tiles are bf16 in shared memory with a leading dimension LD (elements per row) that keeps
// every row 16-byte aligned, as ldmatrix requires.
//
// The products sum over k in ascending order onto each accumulator, one mma per 16 k and 8
// columns; a product whose B is in shared memory loads it once per mma pair (one ldmatrix .x4
// per 2 mma, 4,096 FLOP each).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "mma.cuh"

namespace gpu {
namespace frag {

using bf16 = __nv_bfloat16;

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

// One 16-wide k-step of acc (16 × 8·N8) += A · Bᵀ: a holds A's columns k0..k0+15 (registers),
// B is stored n-major (tile b[n][k], n from 0). N8 / 2 ldmatrix and N8 mma.
template <int N8, int LDB>
__device__ __forceinline__ void k_step_abt(float (&acc)[N8][4], const uint32_t (&a)[4], const bf16* b, int k0) {
#pragma unroll
    for (int n = 0; n < N8; n += 2) {
        uint32_t fb[2][2];
        load_b_nk<LDB>(fb, b, n * 8, k0);
        mma_bf16_16816(acc[n], a, fb[0]);
        mma_bf16_16816(acc[n + 1], a, fb[1]);
    }
}
// acc (16 × 8·N8 accumulators) += A (16 × 16·K16, the A fragments in registers) · Bᵀ where B
// is stored n-major: the forward's S = q·kᵀ, with q loaded once for every key tile.
template <int K16, int N8, int LDB>
__device__ __forceinline__ void product_rbt(float (&acc)[N8][4], const uint32_t (&a)[K16][4], const bf16* b) {
#pragma unroll
    for (int k = 0; k < K16; k++) k_step_abt<N8, LDB>(acc, a[k], b, k * 16);
}
// The same with A in shared memory (tile a, rows row0..), loaded one k-step at a time: the
// backward's S = q·kᵀ, dP = dy·vᵀ (and the transposed Sᵀ = k·qᵀ, dPᵀ = v·dyᵀ).
template <int K16, int N8, int LDA, int LDB>
__device__ __forceinline__ void product_abt(float (&acc)[N8][4], const bf16* a, int row0, const bf16* b) {
#pragma unroll
    for (int k = 0; k < K16; k++) {
        uint32_t fa[4];
        load_a<LDA>(fa, a, row0, k * 16);
        k_step_abt<N8, LDB>(acc, fa, b, k * 16);
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
// Accumulators of 16 × 8·N8 as the A fragments of the same matrix in bf16: two C tiles side
// by side are one A tile (gpu/mma.cuh, after the table), so a result feeds the next product
// without leaving registers.
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
// row (0..15) and column. Elements 0, 1 are in row acc_row(0), elements 2, 3 eight rows below.
__device__ __forceinline__ int acc_row(int e) { return (threadIdx.x % 32) / 4 + (e / 2) * 8; }
__device__ __forceinline__ int acc_col(int n, int e) { return n * 8 + (threadIdx.x % 4) * 2 + e % 2; }
// The maximum and the sum over a row's 4 lanes (the quad that holds it): two shuffles each.
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
// A 16 × 8·N8 float32 result, times scale, as bf16 into rows row0.. of a (B,T,width) tensor
// at dst (at (b, 0, the head's first column)); rows at or past T are not written. Each lane
// stores 4 bytes per column tile and row.
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

// ---- M row tiles per warp (a warp owning 16·M rows): each B fragment that one ldmatrix .x4
// brings feeds 2·M mma instead of 2, so a product reads shared memory M times less per mma.
// acc[i] holds rows 16i..16i+15 of the warp's; the sums over k run in ascending order, as above.

// acc[i] (16 × 8·N8) += A[i] (16 × 16·K16, A fragments in registers) · Bᵀ, B stored n-major
// (tile b[n][k]): the wide forward's S = q·kᵀ. K16·N8/2 ldmatrix, M·K16·N8 mma.
template <int M, int K16, int N8, int LDB>
__device__ __forceinline__ void product_rbt_rows(float (&acc)[M][N8][4], const uint32_t (&a)[M][K16][4],
                                                 const bf16* b) {
#pragma unroll
    for (int k = 0; k < K16; k++)
#pragma unroll
        for (int n = 0; n < N8; n += 2) {
            uint32_t fb[2][2];
            load_b_nk<LDB>(fb, b, n * 8, k * 16);
#pragma unroll
            for (int i = 0; i < M; i++) {
                mma_bf16_16816(acc[i][n], a[i][k], fb[0]);
                mma_bf16_16816(acc[i][n + 1], a[i][k], fb[1]);
            }
        }
}
// The same with A in shared memory (tile a, the warp's rows from row0), each k-step's M A
// fragments loaded before its B fragments: K16·(M + N8/2) ldmatrix, M·K16·N8 mma.
template <int M, int K16, int N8, int LDA, int LDB>
__device__ __forceinline__ void product_abt_rows(float (&acc)[M][N8][4], const bf16* a, int row0, const bf16* b) {
#pragma unroll
    for (int k = 0; k < K16; k++) {
        uint32_t fa[M][4];
#pragma unroll
        for (int i = 0; i < M; i++) load_a<LDA>(fa[i], a, row0 + 16 * i, k * 16);
#pragma unroll
        for (int n = 0; n < N8; n += 2) {
            uint32_t fb[2][2];
            load_b_nk<LDB>(fb, b, n * 8, k * 16);
#pragma unroll
            for (int i = 0; i < M; i++) {
                mma_bf16_16816(acc[i][n], fa[i], fb[0]);
                mma_bf16_16816(acc[i][n + 1], fa[i], fb[1]);
            }
        }
    }
}
// acc[i] (16 × 8·N8) += P[i] (16 × 16·K16, A fragments in registers) · B stored k-major
// (tile b[k][n]): the wide forward's o += P·v. K16·N8/2 ldmatrix, M·K16·N8 mma.
template <int M, int K16, int N8, int LDB>
__device__ __forceinline__ void product_rb_rows(float (&acc)[M][N8][4], const uint32_t (&p)[M][K16][4],
                                                const bf16* b) {
#pragma unroll
    for (int k = 0; k < K16; k++)
#pragma unroll
        for (int n = 0; n < N8; n += 2) {
            uint32_t fb[2][2];
            load_b_kn<LDB>(fb, b, k * 16, n * 8);
#pragma unroll
            for (int i = 0; i < M; i++) {
                mma_bf16_16816(acc[i][n], p[i][k], fb[0]);
                mma_bf16_16816(acc[i][n + 1], p[i][k], fb[1]);
            }
        }
}

// ---- for the five-product backward (gpu/flash_attention_bwd5.cuh), whose dq = dS·k needs
// dS, which its warps hold transposed (dSᵀ, keys as rows) and split by keys.

// An A operand (16 rows × 16 k, the layout of load_a) into tile[row0..][k0..] (leading
// dimension LD): 4 stores of 4 bytes per lane, the inverse of load_a.
template <int LD>
__device__ __forceinline__ void store_a(bf16* tile, int row0, int k0, const uint32_t (&a)[4]) {
    const int lane = threadIdx.x % 32, r = row0 + lane / 4, c = k0 + (lane % 4) * 2;
    *reinterpret_cast<uint32_t*>(tile + r * LD + c) = a[0];
    *reinterpret_cast<uint32_t*>(tile + (r + 8) * LD + c) = a[1];
    *reinterpret_cast<uint32_t*>(tile + r * LD + c + 8) = a[2];
    *reinterpret_cast<uint32_t*>(tile + (r + 8) * LD + c + 8) = a[3];
}
// The A operand (16 rows × 16 k) of a matrix stored transposed, tile[k][row] (leading
// dimension LD): rows row0.., k k0... One ldmatrix .x4 .trans: matrix j of a (rows 8·(j % 2)..,
// k 8·(j / 2)..) is stored as the 8 rows k0 + 8·(j / 2).. at columns row0 + 8·(j % 2)...
template <int LD>
__device__ __forceinline__ void load_a_t(uint32_t (&a)[4], const bf16* tile, int row0, int k0) {
    const int lane = threadIdx.x % 32;
    ldmatrix_x4_trans(a, tile + (k0 + (lane / 16) * 8 + lane % 8) * LD + row0 + (lane / 8 % 2) * 8);
}
// acc (16 × 8·N8) += A (16 rows × 16·K16 k, stored transposed: tile a[k][row], rows row0..) ·
// B (stored k-major, tile b[k][n], columns n0..): the backward's dq = dS·k from dSᵀ. Per
// k-step one ldmatrix for A, N8 / 2 for B and N8 mma.
template <int K16, int N8, int LDA, int LDB>
__device__ __forceinline__ void product_tb(float (&acc)[N8][4], const bf16* a, int row0, const bf16* b, int n0) {
#pragma unroll
    for (int k = 0; k < K16; k++) {
        uint32_t fa[4];
        load_a_t<LDA>(fa, a, row0, k * 16);
#pragma unroll
        for (int n = 0; n < N8; n += 2) {
            uint32_t fb[2][2];
            load_b_kn<LDB>(fb, b, k * 16, n0 + n * 8);
            mma_bf16_16816(acc[n], fa, fb[0]);
            mma_bf16_16816(acc[n + 1], fa, fb[1]);
        }
    }
}

}  // namespace frag
}  // namespace gpu
