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

// The register tile is MR rows × NR columns of C, held in MR×NV vector accumulators, plus NV
// registers for a row of B and one for a broadcast element of A. AVX-512 has 32 registers: 6
// rows of 4 vectors (24 accumulators, 29 registers in all), which reads 10 vectors (4 of B, 6
// broadcasts of A) for every 24 fused multiply-adds where the former 8×2 tile read 10 for 16
// (docs/speed.md: with the packing below, one step's products went from 71–72% to 73–76% of
// the measured peak on one Zen 5 core; the 8×2 tile within the same packing measured about the
// same, so the tile is not the whole story). AVX2 and SSE have 16: 6 rows of 2 vectors.
// The order of the sums does not depend on the tile: each element of C is one accumulator,
// from C (or 0) and then k = 0, 1, ..., K-1 one fused multiply-add at a time, stored between
// depth blocks and loaded again exactly. So the shape of the tile and of the blocks below
// change the speed and never a bit of the result.
constexpr int NV = VEC == 16 ? 4 : 2;  // vectors per row of the register tile
constexpr int NR = NV * VEC;           // columns of the register tile
constexpr int MR = 6;                  // rows of the register tile
constexpr int KC = 128;    // depth of a packed block: a KC×NR panel of B (32 KiB) stays in L1 (48 KiB on Zen 5)
constexpr int MC = 384;    // rows of A swept per B panel (a multiple of MR): an MC×KC block of A (192 KiB) stays in L2
constexpr long CHUNK_FLOATS = 128 * 1024;  // a thread's chunk of the long side's operand, one stretch: 512 KiB
constexpr long KS_FLOATS = 1024 * 1024;  // the short side's operand for one stretch of depth: 4 MiB
static_assert(MC % MR == 0, "blocks are whole tiles");

// The register tile: C[0:MR, 0:NR] (=, or += when add) Ap (KC×MR, packed) · Bp (KC×NR,
// packed), C's rows ldc apart. The accumulators start from C itself when adding, so C is read
// and written once per depth block, with no pass through a temporary. Written with explicit
// vectors: left to itself, GCC keeps a float tile this size in registers only when it has
// AVX-512's 32 of them.
inline void gemm_tile(int kc, const float* __restrict Ap, const float* __restrict Bp, float* __restrict C,
                      long ldc, bool add) {
    SimdVec acc[MR][NV] = {};
    if (add)
        for (int i = 0; i < MR; i++)
            for (int v = 0; v < NV; v++) memcpy(&acc[i][v], C + i * ldc + v * VEC, sizeof acc[i][v]);
    for (int k = 0; k < kc; k++) {
        SimdVec b[NV];
        for (int v = 0; v < NV; v++) memcpy(&b[v], Bp + k * NR + v * VEC, sizeof b[v]);
        for (int i = 0; i < MR; i++) {
            float a = Ap[k * MR + i];
            for (int v = 0; v < NV; v++) acc[i][v] += a * b[v];
        }
    }
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < NV; v++) memcpy(C + i * ldc + v * VEC, &acc[i][v], sizeof acc[i][v]);
}

// d[k*ld + j] = X[k + j*cs] for k, j in [0, 16): a 16×16 block transposed in 16-float vector
// registers (a copy: no arithmetic), for AVX-512. Pairs of rows are interleaved by 32 bits, then
// by 64, and the 128-bit lanes last, as AVX-512's unpack and shuffle instructions do (GCC's
// __builtin_shuffle, index i < 16 from the first operand, 16 + i from the second); the comments
// name the rows (j) and elements (k) a result holds.
typedef int ShuffleMask __attribute__((vector_size(16 * sizeof(int))));
inline void transpose16(float* d, long ld, const float* X, long cs) {
    typedef float V __attribute__((vector_size(16 * sizeof(float))));
    const ShuffleMask lo32 = {0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29};
    const ShuffleMask hi32 = {2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31};
    const ShuffleMask lo64 = {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29};
    const ShuffleMask hi64 = {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31};
    const ShuffleMask even128 = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};  // lanes a0 a2 b0 b2
    const ShuffleMask odd128 = {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};  // lanes a1 a3 b1 b3
    V r[16], t[16], u[16];
    for (int j = 0; j < 16; j++) memcpy(&r[j], X + j * cs, sizeof r[j]);  // r[j][k] = X(k, j)
    for (int i = 0; i < 16; i += 2) {  // lane L: rows (i, i+1) of k = 4L, 4L+1 (t[i]); 4L+2, 4L+3 (t[i+1])
        t[i] = __builtin_shuffle(r[i], r[i + 1], lo32);
        t[i + 1] = __builtin_shuffle(r[i], r[i + 1], hi32);
    }
    for (int g = 0; g < 16; g += 4) {  // u[g + c], lane L: rows g..g+3 of k = 4L + c
        u[g] = __builtin_shuffle(t[g], t[g + 2], lo64), u[g + 1] = __builtin_shuffle(t[g], t[g + 2], hi64);
        u[g + 2] = __builtin_shuffle(t[g + 1], t[g + 3], lo64), u[g + 3] = __builtin_shuffle(t[g + 1], t[g + 3], hi64);
    }
    for (int c = 0; c < 4; c++) {  // row k = c + 4L of d: lane L of u[c], u[4 + c], u[8 + c], u[12 + c]
        V v0 = __builtin_shuffle(u[c], u[4 + c], even128), v1 = __builtin_shuffle(u[c], u[4 + c], odd128);
        V w0 = __builtin_shuffle(u[8 + c], u[12 + c], even128), w1 = __builtin_shuffle(u[8 + c], u[12 + c], odd128);
        V out[4] = {__builtin_shuffle(v0, w0, even128), __builtin_shuffle(v1, w1, even128),
                    __builtin_shuffle(v0, w0, odd128), __builtin_shuffle(v1, w1, odd128)};  // L = 0, 1, 2, 3
        for (int L = 0; L < 4; L++) memcpy(d + (c + 4 * L) * ld, &out[L], sizeof out[L]);
    }
}

// Copies the rows×cols block X(r, c) = X[r*rs + c*cs] into panels of `width` columns
// ([panel][r][width], zero-padded), reading along whichever index is contiguous. Where the
// rows are the contiguous index (the forward's wᵀ: a column of B is a row of w), whole 16×16
// blocks are transposed in registers (transpose16), the rest element by element.
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
            int blocked_rows = 0, blocked_cols = 0;  // the corner done by transpose16
            if (VEC == 16 && rs == 1) {
                blocked_rows = rows / 16 * 16, blocked_cols = n / 16 * 16;
                for (int j = 0; j < blocked_cols; j += 16)
                    for (int r = 0; r < blocked_rows; r += 16)
                        transpose16(d + r * width + j, width, X + r + (long)(p * width + j) * cs, cs);
            }
            for (int j = 0; j < n; j++)
                for (int r = j < blocked_cols ? blocked_rows : 0; r < rows; r++)
                    d[r * width + j] = X[r * rs + (long)(p * width + j) * cs];
            for (int j = n; j < width; j++)
                for (int r = 0; r < rows; r++) d[r * width + j] = 0.0f;
        }
    }
}

// One register tile at C (rows × cols of it inside C: fewer than MR × NR at an edge).
inline void gemm_edge_or_tile(int kc, const float* a, const float* b, float* c, long ldc, int rows, int cols,
                              bool add) {
    if (rows == MR && cols == NR) {
        gemm_tile(kc, a, b, c, ldc, add);
        return;
    }
    // An edge tile goes through a whole one, `tile`, in the same order of sums, so an
    // element's bits do not depend on where the edges fall (on B·T, say): the tests check
    // that the loss does not depend on B.
    float tile[MR * NR] = {};
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) tile[i * NR + j] = add ? c[i * ldc + j] : 0.0f;
    gemm_tile(kc, a, b, tile, NR, add);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) c[i * ldc + j] = tile[i * NR + j];
}

// The operands as the threads share them. The product is cut along its longer side of C (the
// columns when N > M, else the rows) into chunks of whole tiles; the operand along the shorter
// side (A when the columns are cut, B when the rows are) is packed once for all K, by the team
// together, into `small`, which every chunk reads. Each chunk then packs its own depth blocks
// of the other operand, which no other chunk needs.
struct GemmShape {
    int M, N, K;
    const float* A; long a_row, a_col;
    const float* B; long b_row, b_col;
    float* C; long ldc;
    bool accumulate;
};
// Where depth block pc's panels start in a packed buffer whose first block is k0: blocks are kc
// deep and `padded` wide, in order of k, so block pc starts (pc - k0)·padded floats in.
inline size_t gemm_block_offset(int pc, int k0, int padded) { return (size_t)(pc - k0) * padded; }

// Columns [j0, j1) of C, all its rows, for depths [k0, k1), with A's panels for those depths in
// `small` (MR-row panels). The chunk's columns of B are packed first for all those depths, into
// Bp: where B is a transposed view (the forward's wᵀ) those columns are whole rows of w, read
// in order, rather than a KC-long piece of each of hundreds of rows per depth block. Then, per
// depth block, each KC×NR panel of B stays in L1 while the register tile sweeps A's rows.
inline void gemm_column_chunk(const GemmShape& g, const float* small, float* Bp, int j0, int j1, int k0, int k1) {
    const int Mp = (g.M + MR - 1) / MR * MR, nc = j1 - j0, panels = (nc + NR - 1) / NR, ncp = panels * NR;
    for (int pc = k0; pc < k1; pc += KC)  // B[pc:pc+kc, j0:j1] as kc×NR panels: B(k, j) = B[k*b_row + j*b_col]
        pack_panels(Bp + gemm_block_offset(pc, k0, ncp), g.B + (long)pc * g.b_row + (long)j0 * g.b_col, g.b_row,
                    g.b_col, std::min(KC, k1 - pc), nc, NR);
    for (int pc = k0; pc < k1; pc += KC) {
        int kc = std::min(KC, k1 - pc);
        bool add = g.accumulate || pc > 0;  // later depth blocks add to the first one
        const float* Ablock = small + gemm_block_offset(pc, k0, Mp);
        const float* Bblock = Bp + gemm_block_offset(pc, k0, ncp);
        for (int ic = 0; ic < g.M; ic += MC)
            for (int p = 0; p < panels; p++)
                for (int r = ic; r < std::min(g.M, ic + MC); r += MR)
                    gemm_edge_or_tile(kc, Ablock + (size_t)r * kc, Bblock + (size_t)p * kc * NR,
                                      g.C + (long)r * g.ldc + j0 + p * NR, g.ldc, std::min(MR, g.M - r),
                                      std::min(NR, nc - p * NR), add);
    }
}

// Rows [i0, i1) of C, all its columns, for depths [k0, k1), with B's panels for those depths in
// `small` (NR-column panels); the chunk's rows of A are packed first, into Ap.
inline void gemm_row_chunk(const GemmShape& g, const float* small, float* Ap, int i0, int i1, int k0, int k1) {
    const int Np = (g.N + NR - 1) / NR * NR, mc = i1 - i0, panels = Np / NR, mcp = (mc + MR - 1) / MR * MR;
    for (int pc = k0; pc < k1; pc += KC)  // A[i0:i1, pc:pc+kc] as kc×MR panels: the transpose view X(k, i) = A(i, k)
        pack_panels(Ap + gemm_block_offset(pc, k0, mcp), g.A + (long)i0 * g.a_row + (long)pc * g.a_col, g.a_col,
                    g.a_row, std::min(KC, k1 - pc), mc, MR);
    for (int pc = k0; pc < k1; pc += KC) {
        int kc = std::min(KC, k1 - pc);
        bool add = g.accumulate || pc > 0;
        const float* Ablock = Ap + gemm_block_offset(pc, k0, mcp);
        const float* Bblock = small + gemm_block_offset(pc, k0, Np);
        for (int p = 0; p < panels; p++)
            for (int r = 0; r < mc; r += MR)
                gemm_edge_or_tile(kc, Ablock + (size_t)r * kc, Bblock + (size_t)p * kc * NR,
                                  g.C + (long)(i0 + r) * g.ldc + p * NR, g.ldc, std::min(MR, mc - r),
                                  std::min(NR, g.N - p * NR), add);
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

// The threads share a product as described above GemmShape: first they pack the short side's
// operand together (each of its panels by one thread, then a barrier), then they take the
// chunks of the long side in turn, each thread the next one free (dynamic scheduling: on a
// machine with other work a thread that lost its core for a while does fewer chunks instead of
// holding the other back). A deep product (K beyond KS_FLOATS of the short side: the
// classifier's input gradient, K = Vp) goes in stretches of depth, one after the other, so
// that what every chunk reads again stays in the shared cache. Each element of C is summed
// within one chunk per stretch, by one thread, in the fixed order of gemm_tile, from the
// stretch before: runs are bit-reproducible and independent of the thread count and of timing.
inline void gemm(int M, int N, int K, const float* A, long a_row, long a_col, const float* B, long b_row, long b_col,
                 float* C, long ldc, bool accumulate) {
    if (M <= 0 || N <= 0) return;
    if (M == 1) {  // one row: its columns, gemv_part
        int units = (N + NR - 1) / NR;
#pragma omp parallel
        {
            int t = omp_get_thread_num(), nt = omp_get_num_threads();
            int lo = std::min(N, (int)((long)units * t / nt) * NR), hi = std::min(N, (int)((long)units * (t + 1) / nt) * NR);
            if (lo < hi) gemv_part(lo, hi, K, A, a_col, B, b_row, b_col, C, accumulate);
        }
        return;
    }
    if (K <= 0) {  // an empty sum: C = 0, or C unchanged
        if (!accumulate)
            for (int i = 0; i < M; i++) memset(C + (long)i * ldc, 0, N * sizeof(float));
        return;
    }
    const GemmShape g{M, N, K, A, a_row, a_col, B, b_row, b_col, C, ldc, accumulate};
    const bool split_columns = N > M;
    const int width = split_columns ? MR : NR;                           // panels of the short side
    const int shorter = split_columns ? M : N, longer = split_columns ? N : M;
    const int padded = (shorter + width - 1) / width * width, short_panels = padded / width;
    const int unit = split_columns ? NR : MR, units = (longer + unit - 1) / unit;
    // the stretch of depth: whole depth blocks, the short side's part at most KS_FLOATS
    const int KS = std::min(K, std::max(KC, (int)(KS_FLOATS / padded) / KC * KC));
    // chunks: the long side's operand for one chunk and one stretch about half of a 1 MiB L2
    // cache, and at least two per thread, so that the dynamic schedule can even out
    const int nt_max = omp_get_max_threads();
    int chunk = std::max(1, (int)(CHUNK_FLOATS / ((long)KS * unit)));
    chunk = std::max(1, std::min(chunk, (units + 2 * nt_max - 1) / (2 * nt_max)));
    const int chunks = (units + chunk - 1) / chunk;
    static thread_local std::vector<float> small;  // kept between products: no page faults
    if (small.size() < (size_t)padded * KS) small.resize((size_t)padded * KS);
    float* sp = small.data();
#pragma omp parallel
    {
        // this thread's packed chunk of the long side's operand, kept between products
        static thread_local std::vector<float> own;
        const size_t own_size = (size_t)KS * chunk * unit;
        if (own.size() < own_size) own.resize(own_size);
        for (int k0 = 0; k0 < K; k0 += KS) {
            const int k1 = std::min(K, k0 + KS), nblocks = (k1 - k0 + KC - 1) / KC;
#pragma omp for schedule(static)
            for (int job = 0; job < nblocks * short_panels; job++) {
                int pc = k0 + job / short_panels * KC, q = job % short_panels, kc = std::min(KC, k1 - pc);
                float* dst = sp + gemm_block_offset(pc, k0, padded) + (size_t)q * kc * width;
                int n = std::min(width, shorter - q * width);
                if (split_columns)  // A[q·MR.., pc..] as a kc×MR panel: the transpose view X(k, i) = A(i, k)
                    pack_panels(dst, A + (long)q * MR * a_row + (long)pc * a_col, a_col, a_row, kc, n, MR);
                else  // B[pc.., q·NR..] as a kc×NR panel
                    pack_panels(dst, B + (long)pc * b_row + (long)q * NR * b_col, b_row, b_col, kc, n, NR);
            }  // (the loop's implicit barrier: this stretch of the short side is packed)
#pragma omp for schedule(dynamic, 1)
            for (int ch = 0; ch < chunks; ch++) {
                int lo = ch * chunk * unit, hi = std::min(longer, (ch + 1) * chunk * unit);
                if (split_columns)
                    gemm_column_chunk(g, sp, own.data(), lo, hi, k0, k1);
                else
                    gemm_row_chunk(g, sp, own.data(), lo, hi, k0, k1);
            }  // (and its barrier: every chunk is done with `small` before it is packed again)
        }
    }
}
