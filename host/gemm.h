// host/gemm.h: the CPU trainer's matrix products (train.cpp), where nearly all its time goes,
// hence a blocked kernel.
//
// gemm computes C[M,N] (= or +=) A[M,K] · B[K,N], where A and B may be transposed views
// (element (i,k) of A is A[i*a_row + k*a_col], likewise for B) and C is row-major with
// row stride ldc. Blocks of A and B are first copied ("packed") into contiguous panels so
// that the innermost kernel streams through memory and keeps a MR×NR tile of C in
// registers. Each element of C is computed by one thread in a fixed order, so results do
// not depend on timing: runs are bit-reproducible.
#pragma once
#include <algorithm>
#include <cstring>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#else  // one thread: what OpenMP's calls answer without it
inline int omp_get_max_threads() { return 1; }
inline int omp_get_num_threads() { return 1; }
inline int omp_get_thread_num() { return 0; }
inline void omp_set_num_threads(int) {}
#endif

// One SIMD register of floats, as wide as the machine has (GCC's vector extension: the
// arithmetic below is written once and compiles to AVX-512, AVX2 or SSE instructions).
#if defined(__AVX512F__)
constexpr int VEC = 16;
#elif defined(__AVX__)
constexpr int VEC = 8;
#else
constexpr int VEC = 4;
#endif
typedef float SimdVec __attribute__((vector_size(VEC * sizeof(float))));

// The register tile is MR rows × NR columns of C, held in MR×2 vector accumulators, plus two
// registers for a row of B and one for a broadcast element of A. AVX-512 has 32 registers:
// 8 rows (16 accumulators), which also divides the B·T rows of the usual shapes evenly among
// the threads (B·T = 256 in 6-row tiles leaves one thread a tile more than the other). AVX2
// and SSE have 16: 6 rows (12 accumulators).
constexpr int NR = 2 * VEC;  // columns of the register tile: two vector registers per row
constexpr int MR = VEC == 16 ? 8 : 6;  // rows of the register tile
constexpr int KC = 256;    // depth of a packed block: a B panel of KC×NR stays in L1
constexpr int MC_MAX = 96; // rows of A per thread-block (a multiple of MR)
constexpr int NC = 1024;   // columns of B per packed block (a multiple of NR): KC×NC stays in L2
static_assert(MC_MAX % MR == 0 && NC % NR == 0, "blocks are whole tiles");

// The register tile: C[0:MR, 0:NR] (=, or += when add) Ap (KC×MR, packed) · Bp (KC×NR,
// packed), C's rows ldc apart. The accumulators start from C itself when adding, so C is read
// and written once per depth block, with no pass through a temporary. Written with explicit
// vectors: left to itself, GCC keeps a float tile this size in registers only when it has
// AVX-512's 32 of them.
inline void gemm_tile(int kc, const float* __restrict Ap, const float* __restrict Bp, float* __restrict C,
                             long ldc, bool add) {
    SimdVec acc[MR][2] = {};
    if (add)
        for (int i = 0; i < MR; i++) {
            memcpy(&acc[i][0], C + i * ldc, sizeof acc[i][0]);
            memcpy(&acc[i][1], C + i * ldc + VEC, sizeof acc[i][1]);
        }
    for (int k = 0; k < kc; k++) {
        SimdVec b0, b1;
        memcpy(&b0, Bp + k * NR, sizeof b0);
        memcpy(&b1, Bp + k * NR + VEC, sizeof b1);
        for (int i = 0; i < MR; i++) {
            float a = Ap[k * MR + i];
            acc[i][0] += a * b0;
            acc[i][1] += a * b1;
        }
    }
    for (int i = 0; i < MR; i++) {
        memcpy(C + i * ldc, &acc[i][0], sizeof acc[i][0]);
        memcpy(C + i * ldc + VEC, &acc[i][1], sizeof acc[i][1]);
    }
}

// Copies the rows×cols block X(r, c) = X[r*rs + c*cs] into panels of `width` columns
// ([panel][r][width], zero-padded), reading along whichever index is contiguous.
inline void pack_panels(float* dst, const float* X, long rs, long cs, int rows, int cols, int width) {
    int panels = (cols + width - 1) / width;
    for (int p = 0; p < panels; p++) {
        float* d = dst + (size_t)p * rows * width;
        int n = std::min(width, cols - p * width);
        if (cs == 1)  // rows contiguous: read each row's slice in order
            for (int r = 0; r < rows; r++) {
                for (int j = 0; j < n; j++) d[r * width + j] = X[r * rs + p * width + j];
                for (int j = n; j < width; j++) d[r * width + j] = 0.0f;
            }
        else {  // columns contiguous: read each column in order
            for (int j = 0; j < n; j++)
                for (int r = 0; r < rows; r++) d[r * width + j] = X[r * rs + (long)(p * width + j) * cs];
            for (int j = n; j < width; j++)
                for (int r = 0; r < rows; r++) d[r * width + j] = 0.0f;
        }
    }
}

// C[i0:i1, j0:j1] of the product, by one thread: blocks of B (KC×NC) and of A (MC_MAX×KC) are
// packed into this thread's own buffers, then swept by the register tile.
inline void gemm_part(int i0, int i1, int j0, int j1, int K, const float* A, long a_row, long a_col, const float* B,
                      long b_row, long b_col, float* C, long ldc, bool accumulate) {
    static thread_local std::vector<float> Bp(KC * NC);  // kept between products: no page faults
    float Ap[MC_MAX * KC];
    float tile[MR * NR] = {};  // an edge tile (see below)
    for (int jc = j0; jc < j1; jc += NC) {
        int nc = std::min(NC, j1 - jc);
        int panels = (nc + NR - 1) / NR;
        for (int pc = 0; pc < K; pc += KC) {
            int kc = std::min(KC, K - pc);
            bool add = accumulate || pc > 0;  // later depth blocks add to the first one
            // B[pc:pc+kc, jc:jc+nc] as kc×NR panels: B(k, j) = B[k*b_row + j*b_col]
            pack_panels(Bp.data(), B + (long)pc * b_row + (long)jc * b_col, b_row, b_col, kc, nc, NR);
            for (int ic = i0; ic < i1; ic += MC_MAX) {
                int mc = std::min(MC_MAX, i1 - ic);
                // A[ic:ic+mc, pc:pc+kc] as kc×MR panels: the transpose view X(k, i) = A(i, k)
                pack_panels(Ap, A + (long)ic * a_row + (long)pc * a_col, a_col, a_row, kc, mc, MR);
                for (int p = 0; p < panels; p++)
                    for (int r = 0; r < mc; r += MR) {
                        const float* a = Ap + (size_t)r * kc;
                        const float* b = Bp.data() + (size_t)p * kc * NR;
                        float* c = C + (long)(ic + r) * ldc + jc + p * NR;
                        int rows = std::min(MR, mc - r), cols = std::min(NR, nc - p * NR);
                        if (rows == MR && cols == NR) {
                            gemm_tile(kc, a, b, c, ldc, add);
                            continue;
                        }
                        // An edge tile goes through a whole one, `tile`, in the same order of
                        // sums, so an element's bits do not depend on where the edges fall
                        // (on B·T, say): the tests check that the loss does not depend on B.
                        for (int i = 0; i < rows; i++)
                            for (int j = 0; j < cols; j++) tile[i * NR + j] = add ? c[i * ldc + j] : 0.0f;
                        gemm_tile(kc, a, b, tile, NR, add);
                        for (int i = 0; i < rows; i++)
                            for (int j = 0; j < cols; j++) c[i * ldc + j] = tile[i * NR + j];
                    }
            }
        }
    }
}

// A product of one row (generation's decode step: one position) without the packing: with a
// single row of A, packing B would move every weight twice to use it once. Each C[0, j] is the
// register tile's sum, in its order (from C or 0, then k = 0, 1, ..., one term at a time), so
// its bits are gemm_part's; columns go in groups of 16 independent sums, which keeps the adds
// of a sum from waiting on each other and reads 16 rows of B (16 weights' rows) side by side.
inline void gemv_part(int j0, int j1, int K, const float* A, long a_col, const float* B, long b_row, long b_col,
                      float* C, bool accumulate) {
    constexpr int G = 16;
    for (int j = j0; j < j1; j += G) {
        const int n = std::min(G, j1 - j);
        float acc[G];
        for (int g = 0; g < n; g++) acc[g] = accumulate ? C[j + g] : 0.0f;
        for (int k = 0; k < K; k++) {
            const float a = A[(long)k * a_col];
            const float* b = B + (long)k * b_row + (long)j * b_col;
            for (int g = 0; g < n; g++) acc[g] += a * b[g * b_col];
        }
        for (int g = 0; g < n; g++) C[j + g] = acc[g];
    }
}

// The threads split C along its longer side, in whole tiles, and each computes its part
// alone: no thread waits for another inside a product (a shared packed B needed two barriers
// per block of B, thousands per step, each a sleep and a wake-up with the passive wait).
// What a thread packs for itself (A, when the columns are split; B, when the rows are) is the
// small operand. Each element is summed by one thread in a fixed order whatever the split, so
// runs are bit-reproducible and independent of the thread count.
inline void gemm(int M, int N, int K, const float* A, long a_row, long a_col, const float* B, long b_row, long b_col,
                 float* C, long ldc, bool accumulate) {
    bool split_columns = N > M || M == 1;  // (one row: its columns, gemv_part)
    int unit = split_columns ? NR : MR, units = ((split_columns ? N : M) + unit - 1) / unit;
#pragma omp parallel
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int lo = std::min((split_columns ? N : M), (int)((long)units * t / nt) * unit);
        int hi = std::min((split_columns ? N : M), (int)((long)units * (t + 1) / nt) * unit);
        if (lo < hi) {
            if (M == 1)
                gemv_part(lo, hi, K, A, a_col, B, b_row, b_col, C, accumulate);
            else if (split_columns)
                gemm_part(0, M, lo, hi, K, A, a_row, a_col, B, b_row, b_col, C, ldc, accumulate);
            else
                gemm_part(lo, hi, 0, N, K, A, a_row, a_col, B, b_row, b_col, C, ldc, accumulate);
        }
    }
}
