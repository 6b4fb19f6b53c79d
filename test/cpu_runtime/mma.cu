// Tests of the CPU runtime's PTX instructions (cpu_cuda/mma.h, behind gpu/mma.cuh), doctest:
// mma.sync m16n8k16 bf16, ldmatrix .x4 and .x4.trans, movmatrix .trans, cp.async with commit and
// wait groups.
//
// The expected register layouts are written here from the PTX ISA's tables, in the ISA's own
// terms (element a_k of a thread's fragment, groupID = lane / 4, threadID_in_group = lane % 4),
// not taken from the runtime; a few positions are also spelled out as literals from the ISA's
// figures. Products are checked against float64, and misuse against the message it must give.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../../gpu/mma.cuh"
#include "cpu_cuda_test.h"

// ---- the PTX ISA's fragment tables for mma.m16n8k16 with .bf16 inputs and .f32 accumulators.
// A thread holds A's elements a0..a7 (two per 32-bit register, a0 in the low half of the first),
// B's b0..b3 and C's c0..c3.
struct RowCol {
    int row, col;
};
static RowCol a_element(int lane, int e) {  // A is 16 (rows) × 16 (k)
    int group = lane >> 2, tig = lane % 4;
    int row = (e < 2 || (e >= 4 && e < 6)) ? group : group + 8;
    int col = tig * 2 + (e & 1) + (e >= 4 ? 8 : 0);
    return {row, col};
}
static RowCol b_element(int lane, int e) {  // B is 16 (k) × 8 (n)
    int group = lane >> 2, tig = lane % 4;
    return {tig * 2 + (e & 1) + (e >= 2 ? 8 : 0), group};
}
static RowCol c_element(int lane, int e) {  // C is 16 × 8
    int group = lane >> 2, tig = lane % 4;
    return {e < 2 ? group : group + 8, tig * 2 + (e & 1)};
}

// bf16 as bits, on both sides
static uint16_t bf16_bits(float x) {
    __nv_bfloat16 b = __float2bfloat16(x);
    uint16_t u;
    memcpy(&u, &b, 2);
    return u;
}
static float bits_to_float(uint16_t u) {
    uint32_t w = (uint32_t)u << 16;
    float f;
    memcpy(&f, &w, 4);
    return f;
}
// Values bf16 holds exactly (8 significant bits), on a grid of 2^-7, so that sums of a few
// dozen of their products are exact in float32 too.
static std::vector<float> exact_values(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> mant(-255, 255);
    std::vector<float> v(n);
    for (float& x : v) x = std::ldexp((float)mant(rng), -7);
    return v;
}
static std::vector<uint16_t> to_bits(const std::vector<float>& v) {
    std::vector<uint16_t> out;
    for (float x : v) out.push_back(bf16_bits(x));
    return out;
}
// float32 sums of n exact products: each addition rounds by at most 2^-24 of the running sum,
// which is at most the sum of the magnitudes, so |error| <= n · 2^-24 · Σ|terms| (about 1e-6
// of the magnitudes for 16 terms)
static bool close(double got, double ref, double magnitude, int n) {
    return std::fabs(got - ref) <= n * std::ldexp(magnitude, -24);
}

// ---- device helpers: registers from bf16 bits, by the element tables (written again for the
// device: the device cannot call the host functions above)
__device__ uint32_t pair(uint16_t low, uint16_t high) { return (uint32_t)low | (uint32_t)high << 16; }
__device__ void load_a(uint32_t (&a)[4], const uint16_t* A, int lda) {  // A row-major, 16×16
    int lane = threadIdx.x % 32, group = lane >> 2, tig = lane % 4;
    for (int r = 0; r < 4; r++) {
        uint16_t e[2];
        for (int h = 0; h < 2; h++) {
            int k = 2 * r + h;  // element a_k
            int row = (k < 2 || (k >= 4 && k < 6)) ? group : group + 8;
            int col = tig * 2 + (k & 1) + (k >= 4 ? 8 : 0);
            e[h] = A[row * lda + col];
        }
        a[r] = pair(e[0], e[1]);
    }
}
__device__ void load_b(uint32_t (&b)[2], const uint16_t* B, int ldb) {  // B [k][n], 16×8
    int lane = threadIdx.x % 32, group = lane >> 2, tig = lane % 4;
    for (int r = 0; r < 2; r++) {
        uint16_t e[2];
        for (int h = 0; h < 2; h++) {
            int k = 2 * r + h;  // element b_k
            e[h] = B[(tig * 2 + (k & 1) + (k >= 2 ? 8 : 0)) * ldb + group];
        }
        b[r] = pair(e[0], e[1]);
    }
}
__device__ void store_c(float* C, int ldc, const float (&c)[4]) {  // C row-major, 16×8
    int lane = threadIdx.x % 32, group = lane >> 2, tig = lane % 4;
    for (int e = 0; e < 4; e++) C[(e < 2 ? group : group + 8) * ldc + tig * 2 + (e & 1)] = c[e];
}
__device__ void load_c(float (&c)[4], const float* C, int ldc) {
    int lane = threadIdx.x % 32, group = lane >> 2, tig = lane % 4;
    for (int e = 0; e < 4; e++) c[e] = C[(e < 2 ? group : group + 8) * ldc + tig * 2 + (e & 1)];
}

// ----------------------------------------------------------------------------
// mma.sync

// D = A·B + C per warp; warp w works on the w-th set of matrices.
__global__ void one_mma(float* d, const uint16_t* a, const uint16_t* b, const float* c) {
    int w = threadIdx.x / 32;
    uint32_t ra[4], rb[2];
    float acc[4];
    load_a(ra, a + w * 256, 16);
    load_b(rb, b + w * 128, 8);
    load_c(acc, c + w * 128, 8);
    gpu::mma_bf16_16816(acc, ra, rb);
    store_c(d + w * 128, 8, acc);
}

TEST_CASE("mma_bf16_16816: C += A·B against float64, fragments loaded by the PTX ISA's tables") {
    const int warps = 3;  // independent warps in one block: each its own staging
    std::vector<float> a = exact_values(warps * 256, 1), b = exact_values(warps * 128, 2);
    std::vector<float> c(warps * 128);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-4, 4);
    for (float& x : c) x = u(rng);  // any float: C is not rounded to bf16
    Dev<uint16_t> da(to_bits(a)), db(to_bits(b));
    Dev<float> dc(c), dd(warps * 128);
    dd.fill_nan();
    one_mma<<<1, 32 * warps>>>(dd.p, da.p, db.p, dc.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> d = dd.host();
    int bad = 0;
    for (int w = 0; w < warps; w++)
        for (int r = 0; r < 16; r++)
            for (int n = 0; n < 8; n++) {
                double ref = c[w * 128 + r * 8 + n], magnitude = std::fabs(ref);
                for (int k = 0; k < 16; k++) {
                    double p = (double)a[w * 256 + r * 16 + k] * b[w * 128 + k * 8 + n];
                    ref += p, magnitude += std::fabs(p);
                }
                if (!close(d[w * 128 + r * 8 + n], ref, magnitude, 17)) bad++;
            }
    CHECK(bad == 0);
}

// Registers given straight from tags: the ISA's position of each register half, revealed.
// mode 0: A's register halves hold tags (lane·8 + register·2 + half), B selects k = n + 8·pass;
// mode 1: A is the identity, B's halves hold tags (lane·4 + register·2 + half). Each lane writes
// its c0..c3 raw, tagged by (lane, element).
__global__ void reveal(float* out, int mode, int pass) {
    int lane = threadIdx.x, group = lane >> 2, tig = lane % 4;
    uint32_t a[4], b[2];
    float c[4] = {0, 0, 0, 0};
    auto bits = [](float x) {
        __nv_bfloat16 v = __float2bfloat16(x);
        uint16_t u;
        memcpy(&u, &v, 2);
        return u;
    };
    for (int r = 0; r < 4; r++) {
        uint16_t h[2];
        for (int e = 0; e < 2; e++) {
            int k = 2 * r + e;  // a_k: (row, col) by the table, for the selection matrices
            int row = (k < 2 || (k >= 4 && k < 6)) ? group : group + 8;
            int col = tig * 2 + (k & 1) + (k >= 4 ? 8 : 0);
            h[e] = bits(mode == 0 ? (float)(lane * 8 + k) : (row == col ? 1.0f : 0.0f));
        }
        a[r] = pair(h[0], h[1]);
    }
    for (int r = 0; r < 2; r++) {
        uint16_t h[2];
        for (int e = 0; e < 2; e++) {
            int k = 2 * r + e;
            int krow = tig * 2 + (k & 1) + (k >= 2 ? 8 : 0), n = group;
            h[e] = bits(mode == 1 ? (float)(lane * 4 + k) : (krow == n + 8 * pass ? 1.0f : 0.0f));
        }
        b[r] = pair(h[0], h[1]);
    }
    gpu::mma_bf16_16816(c, a, b);
    for (int e = 0; e < 4; e++) out[lane * 4 + e] = c[e];
}

TEST_CASE("mma_bf16_16816: which register half of which lane lands where (the PTX ISA's tables)") {
    Dev<float> out(128);
    // A: C(row, n) = A(row, n + 8·pass), and A(row, k) was tagged by the lane and element holding it
    std::vector<int> a_holder(256, -1);  // (row·16 + k) -> tag
    for (int pass = 0; pass < 2; pass++) {
        out.fill_nan();
        reveal<<<1, 32>>>(out.p, 0, pass);
        REQUIRE(cudaGetLastError() == cudaSuccess);
        std::vector<float> o = out.host();
        for (int lane = 0; lane < 32; lane++)
            for (int e = 0; e < 4; e++) {
                RowCol rc = c_element(lane, e);
                float tag = o[lane * 4 + e];
                REQUIRE(tag >= 0);  // NaN fails too
                a_holder[rc.row * 16 + rc.col + 8 * pass] = (int)tag;
            }
    }
    int a_bad = 0;
    for (int lane = 0; lane < 32; lane++)
        for (int e = 0; e < 8; e++) {
            RowCol rc = a_element(lane, e);
            a_bad += a_holder[rc.row * 16 + rc.col] != lane * 8 + e;
        }
    CHECK(a_bad == 0);
    // literals from the ISA's figure: lane 0 holds A(0,0), A(0,1) in a0,a1; A(8,0) in a2;
    // A(0,8) in a4; A(8,9) in a7. Lane 5 (group 1, thread 1 in it) holds A(1,2) in a0; lane
    // 31 holds A(15,15) in a7.
    CHECK(a_holder[0 * 16 + 0] == 0);
    CHECK(a_holder[0 * 16 + 1] == 1);
    CHECK(a_holder[8 * 16 + 0] == 2);
    CHECK(a_holder[0 * 16 + 8] == 4);
    CHECK(a_holder[8 * 16 + 9] == 7);
    CHECK(a_holder[1 * 16 + 2] == 5 * 8 + 0);
    CHECK(a_holder[15 * 16 + 15] == 31 * 8 + 7);

    // B: A is the identity, so C(row, n) = B(k = row, n)
    out.fill_nan();
    reveal<<<1, 32>>>(out.p, 1, 0);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> o = out.host();
    std::vector<int> b_holder(128, -1);  // (k·8 + n) -> tag
    for (int lane = 0; lane < 32; lane++)
        for (int e = 0; e < 4; e++) {
            RowCol rc = c_element(lane, e);
            REQUIRE(o[lane * 4 + e] >= 0);
            b_holder[rc.row * 8 + rc.col] = (int)o[lane * 4 + e];
        }
    int b_bad = 0;
    for (int lane = 0; lane < 32; lane++)
        for (int e = 0; e < 4; e++) {
            RowCol rc = b_element(lane, e);
            b_bad += b_holder[rc.row * 8 + rc.col] != lane * 4 + e;
        }
    CHECK(b_bad == 0);
    // literals: lane 0 holds B(0,0), B(1,0) in b0,b1 and B(8,0) in b2; lane 6 (group 1, thread
    // 2) holds B(4,1) in b0; lane 31 holds B(15,7) in b3
    CHECK(b_holder[0 * 8 + 0] == 0);
    CHECK(b_holder[1 * 8 + 0] == 1);
    CHECK(b_holder[8 * 8 + 0] == 2);
    CHECK(b_holder[4 * 8 + 1] == 6 * 4 + 0);
    CHECK(b_holder[15 * 8 + 7] == 31 * 4 + 3);
}

// ----------------------------------------------------------------------------
// ldmatrix

constexpr int STRIDE = 24;  // elements per shared row: 48 bytes, padded (rows stay 16-byte aligned)

// Copies a 16×16 bf16 tile to shared memory (padded rows), then each lane gives the row
// address of matrix j = lane / 8: rows 8·(j % 2) + lane % 8, columns 8·(j / 2) (the four 8×8
// quadrants in A-fragment order) and writes its r[0..3]. dynamic: extern __shared__, else a
// __shared__ array.
__global__ void load_quadrants(uint32_t* out, const uint16_t* tile, int trans, int dynamic) {
    __shared__ __align__(16) uint16_t fixed[16 * STRIDE];
    extern __shared__ uint16_t dyn[];
    uint16_t* s = dynamic ? dyn : fixed;
    for (int i = threadIdx.x; i < 256; i += 32) s[i / 16 * STRIDE + i % 16] = tile[i];
    __syncwarp();
    int lane = threadIdx.x, j = lane / 8;
    const uint16_t* row = s + (8 * (j % 2) + lane % 8) * STRIDE + 8 * (j / 2);
    uint32_t r[4];
    if (trans)
        gpu::ldmatrix_x4_trans(r, row);
    else
        gpu::ldmatrix_x4(r, row);
    for (int m = 0; m < 4; m++) out[lane * 4 + m] = r[m];
}

TEST_CASE("ldmatrix_x4 and ldmatrix_x4_trans: each lane receives the elements the PTX ISA names") {
    std::vector<uint16_t> tile(256);
    for (int i = 0; i < 256; i++) tile[i] = (uint16_t)(0x1000 + i);  // distinct, the position in it
    Dev<uint16_t> dt(tile);
    Dev<uint32_t> out(128);
    for (int trans = 0; trans < 2; trans++)
        for (int dynamic = 0; dynamic < 2; dynamic++) {
            CAPTURE(trans);
            CAPTURE(dynamic);
            out.fill_nan();
            load_quadrants<<<1, 32, dynamic ? 16 * STRIDE * 2 : 0>>>(out.p, dt.p, trans, dynamic);
            REQUIRE(cudaGetLastError() == cudaSuccess);
            std::vector<uint32_t> o = out.host();
            int bad = 0;
            for (int lane = 0; lane < 32; lane++)
                for (int j = 0; j < 4; j++) {
                    // matrix j's element (row, col) is tile (8·(j%2) + row, 8·(j/2) + col)
                    auto m = [&](int row, int col) { return tile[(8 * (j % 2) + row) * 16 + 8 * (j / 2) + col]; };
                    int g = lane / 4, i = lane % 4;
                    uint16_t low = trans ? m(2 * i, g) : m(g, 2 * i), high = trans ? m(2 * i + 1, g) : m(g, 2 * i + 1);
                    uint32_t got = o[lane * 4 + j];
                    bad += (got & 0xffff) != low || got >> 16 != high;
                }
            CHECK(bad == 0);
            // literals: lane 0's r[0] holds (0,0),(0,1), or transposed (0,0),(1,0); lane 13
            // (row 3, columns 2,3) its r[3] from the bottom-right quadrant
            uint32_t l0 = o[0], l13 = o[13 * 4 + 3];
            CHECK(l0 == (trans ? (0x1000u | (0x1010u << 16)) : (0x1000u | (0x1001u << 16))));
            uint32_t want13 = trans ? ((0x1000u + (8 + 2) * 16 + 8 + 3) | (0x1000u + (8 + 3) * 16 + 8 + 3) << 16)
                                    : ((0x1000u + (8 + 3) * 16 + 8 + 2) | (0x1000u + (8 + 3) * 16 + 8 + 3) << 16);
            CHECK(l13 == want13);
        }
}

// movmatrix .trans: each lane builds its register of an 8×8 matrix by hand, the layout the
// PTX ISA gives ("movmatrix": thread l holds row l / 4, columns 2·(l % 4) and 2·(l % 4) + 1),
// and writes the register it gets back.
__global__ void transpose_registers(uint32_t* out, const uint16_t* m) {
    const int lane = threadIdx.x, row = lane / 4, col = 2 * (lane % 4);
    const uint32_t x = (uint32_t)m[row * 8 + col] | (uint32_t)m[row * 8 + col + 1] << 16;
    out[lane] = gpu::movmatrix_trans(x);
}

TEST_CASE("movmatrix_trans: each lane receives the transpose's elements the PTX ISA names") {
    std::vector<uint16_t> m(64);
    for (int i = 0; i < 64; i++) m[i] = (uint16_t)(0x2000 + i);  // distinct, the position in it
    Dev<uint16_t> dm(m);
    Dev<uint32_t> out(32);
    out.fill_nan();
    transpose_registers<<<1, 32>>>(out.p, dm.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<uint32_t> o = out.host();
    int bad = 0;
    for (int lane = 0; lane < 32; lane++) {  // the transpose's (row g, column 2i..) is m's (2i.., g)
        const int g = lane / 4, i = lane % 4;
        bad += (o[lane] & 0xffff) != m[(2 * i) * 8 + g] || o[lane] >> 16 != m[(2 * i + 1) * 8 + g];
    }
    CHECK(bad == 0);
    // literals: lane 0 gets (0,0),(1,0); lane 13 (transpose row 3, columns 2, 3) gets m's (2,3),(3,3)
    CHECK(o[0] == (0x2000u | 0x2008u << 16));
    CHECK(o[13] == ((0x2000u + 2 * 8 + 3) | (0x2000u + 3 * 8 + 3) << 16));
}

// The way attention kernels use it: A (16×16, row-major) by ldmatrix_x4; B for two n-tiles of
// 8 either from [n][k] storage (like K in Q·Kᵀ) with ldmatrix_x4, or from [k][n] storage (like
// V in P·V) with ldmatrix_x4_trans; C (16×16) = A·B by two mma.
__global__ void ldmatrix_product(float* c, const uint16_t* a, const uint16_t* b, int b_is_kn) {
    __shared__ __align__(16) uint16_t sa[16 * STRIDE], sb[16 * STRIDE];
    for (int i = threadIdx.x; i < 256; i += 32) {
        sa[i / 16 * STRIDE + i % 16] = a[i];
        sb[i / 16 * STRIDE + i % 16] = b[i];  // b's own layout: [n][k], or [k][n] when b_is_kn
    }
    __syncwarp();
    int lane = threadIdx.x, j = lane / 8;
    uint32_t ra[4], rb[4];
    gpu::ldmatrix_x4(ra, sa + (8 * (j % 2) + lane % 8) * STRIDE + 8 * (j / 2));
    if (b_is_kn)  // matrix j: k rows 8·(j%2).., n columns 8·(j/2).., transposed
        gpu::ldmatrix_x4_trans(rb, sb + (8 * (j % 2) + lane % 8) * STRIDE + 8 * (j / 2));
    else  // matrix j: n rows 8·(j/2).., k columns 8·(j%2)..
        gpu::ldmatrix_x4(rb, sb + (8 * (j / 2) + lane % 8) * STRIDE + 8 * (j % 2));
    for (int t = 0; t < 2; t++) {
        float acc[4] = {0, 0, 0, 0};
        const uint32_t b2[2] = {rb[2 * t], rb[2 * t + 1]};
        gpu::mma_bf16_16816(acc, ra, b2);
        store_c(c + 8 * t, 16, acc);
    }
}

TEST_CASE("ldmatrix fragments feed mma: A·B with B stored [n][k] (ldmatrix) or [k][n] (.trans)") {
    std::vector<float> a = exact_values(256, 4), b = exact_values(256, 5);
    Dev<uint16_t> da(to_bits(a)), db(to_bits(b));
    Dev<float> dc(256);
    for (int kn = 0; kn < 2; kn++) {
        CAPTURE(kn);
        dc.fill_nan();
        ldmatrix_product<<<1, 32>>>(dc.p, da.p, db.p, kn);
        REQUIRE(cudaGetLastError() == cudaSuccess);
        std::vector<float> c = dc.host();
        int bad = 0;
        for (int r = 0; r < 16; r++)
            for (int n = 0; n < 16; n++) {
                double ref = 0, magnitude = 0;
                for (int k = 0; k < 16; k++) {
                    double p = (double)a[r * 16 + k] * (kn ? b[k * 16 + n] : b[n * 16 + k]);
                    ref += p, magnitude += std::fabs(p);
                }
                if (!close(c[r * 16 + n], ref, magnitude, 16)) bad++;
            }
        CHECK(bad == 0);
    }
}

// ----------------------------------------------------------------------------
// The FlashAttention identity: the accumulators of S = Q·Kᵀ (two 16×8 tiles), packed to bf16
// pairs, are the A fragment of S for O = S·V: c01 -> a0, c23 -> a1, the second tile's c01 -> a2,
// c23 -> a3.
__global__ void two_products(float* o, const uint16_t* q, const uint16_t* k, const uint16_t* v) {
    uint32_t qa[4];
    load_a(qa, q, 16);  // Q: 16 rows × 16 dims
    float s[2][4] = {};
    for (int t = 0; t < 2; t++) {  // keys 8t..8t+7: B(k = dim, n = key) = K[key][dim]
        int lane = threadIdx.x, group = lane >> 2, tig = lane % 4;
        const uint16_t* key = k + (8 * t + group) * 16;
        const uint32_t kb[2] = {pair(key[2 * tig], key[2 * tig + 1]), pair(key[2 * tig + 8], key[2 * tig + 9])};
        gpu::mma_bf16_16816(s[t], qa, kb);
    }
    const uint32_t p[4] = {gpu::pack_bf16x2(s[0][0], s[0][1]), gpu::pack_bf16x2(s[0][2], s[0][3]),
                           gpu::pack_bf16x2(s[1][0], s[1][1]), gpu::pack_bf16x2(s[1][2], s[1][3])};
    uint32_t vb[2];
    load_b(vb, v, 8);  // V: 16 keys × 8 dims
    float acc[4] = {0, 0, 0, 0};
    gpu::mma_bf16_16816(acc, p, vb);
    store_c(o, 8, acc);
}

TEST_CASE("accumulators packed with pack_bf16x2 are an A fragment: (Q·Kᵀ)·V against float64") {
    std::vector<float> q = exact_values(256, 6), k = exact_values(256, 7), v = exact_values(128, 8);
    Dev<uint16_t> dq(to_bits(q)), dk(to_bits(k)), dv(to_bits(v));
    Dev<float> dout(128);
    dout.fill_nan();
    two_products<<<1, 32>>>(dout.p, dq.p, dk.p, dv.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> o = dout.host();
    // S: products on a grid of 2^-14 summing to under 2^6 are exact in float32, so float32's
    // S equals float64's and its rounding to bf16 (nearest even) is the device's exactly
    std::vector<float> s(256);
    int rounded = 0;
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++) {
            double sum = 0;
            for (int d = 0; d < 16; d++) sum += (double)q[r * 16 + d] * k[n * 16 + d];
            REQUIRE((double)(float)sum == sum);
            s[r * 16 + n] = bits_to_float(bf16_bits((float)sum));
            rounded += s[r * 16 + n] != (float)sum;
        }
    CHECK(rounded > 100);  // the rounding to bf16 matters: most of S has more than 8 bits
    int bad = 0;
    for (int r = 0; r < 16; r++)
        for (int d = 0; d < 8; d++) {
            double ref = 0, magnitude = 0;
            for (int n = 0; n < 16; n++) {
                double p = (double)s[r * 16 + n] * v[n * 8 + d];
                ref += p, magnitude += std::fabs(p);
            }
            if (!close(o[r * 8 + d], ref, magnitude, 16)) bad++;
        }
    CHECK(bad == 0);
}

// ----------------------------------------------------------------------------
// cp.async

// 64 threads; the shared tile has 4 regions of 64 × 16 bytes, first filled with 0xAB bytes:
//   region 0: thread t's 16 bytes from src (group 0)
//   region 1: src_bytes = t % 17 (so 0 and 16 included), the rest zeros (group 1)
//   region 2: a copy issued and not committed until after the first waits
// snapshots to out (64 × 16 bytes each): 0 before any wait, 1 after wait<1>, 2 after wait<0>,
// 3 after commit + wait<0>, 4 another thread's region 0 after __syncthreads.
__global__ void async_copies(unsigned char* out, const unsigned char* src) {
    __shared__ __align__(16) unsigned char tile[3][64][16];
    int t = threadIdx.x;
    memset(tile[0][t], 0xAB, 16), memset(tile[1][t], 0xAB, 16), memset(tile[2][t], 0xAB, 16);
    __syncthreads();
    gpu::cp_async_16(tile[0][t], src + 16 * t);
    gpu::cp_async_commit();
    gpu::cp_async_16(tile[1][t], src + 16 * (64 + t), t % 17);
    gpu::cp_async_commit();
    gpu::cp_async_16(tile[2][t], src + 16 * (128 + t));
    auto snapshot = [&](int n) {
        for (int r = 0; r < 3; r++) memcpy(out + ((n * 3 + r) * 64 + t) * 16, tile[r][t], 16);
    };
    snapshot(0);
    gpu::cp_async_wait<1>();
    snapshot(1);
    gpu::cp_async_wait<0>();
    snapshot(2);
    gpu::cp_async_commit();
    gpu::cp_async_wait<0>();
    snapshot(3);
    __syncthreads();
    memcpy(out + ((4 * 3) * 64 + t) * 16, tile[0][(t + 1) % 64], 16);
}

TEST_CASE("cp_async_16: deferred until cp_async_wait retires its group; zero fill past src_bytes") {
    std::vector<unsigned char> src(3 * 64 * 16);
    for (size_t i = 0; i < src.size(); i++) src[i] = (unsigned char)(i * 7 + 1);
    Dev<unsigned char> dsrc(src), out(13 * 64 * 16);
    out.fill_nan();
    async_copies<<<1, 64>>>(out.p, dsrc.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<unsigned char> o = out.host();
    auto region = [&](int snap, int r, int t) { return &o[((snap * 3 + r) * 64 + t) * 16]; };
    auto is_old = [](const unsigned char* p) {
        for (int i = 0; i < 16; i++)
            if (p[i] != 0xAB) return false;
        return true;
    };
    auto copied = [&](const unsigned char* p, int r, int t, int bytes) {  // src bytes, then zeros
        for (int i = 0; i < 16; i++)
            if (p[i] != (i < bytes ? src[(r * 64 + t) * 16 + i] : 0)) return false;
        return true;
    };
    int bad = 0;
    for (int t = 0; t < 64; t++) {
        CAPTURE(t);
        // before any wait: nothing written
        bad += !is_old(region(0, 0, t)) + !is_old(region(0, 1, t)) + !is_old(region(0, 2, t));
        // wait<1>: group 0 done, group 1 (the newest) still in flight, the uncommitted copy too
        bad += !copied(region(1, 0, t), 0, t, 16) + !is_old(region(1, 1, t)) + !is_old(region(1, 2, t));
        // wait<0>: every committed group; an uncommitted copy belongs to none
        bad += !copied(region(2, 1, t), 1, t, t % 17) + !is_old(region(2, 2, t));
        // committed, then waited for
        bad += !copied(region(3, 2, t), 2, t, 16);
        // another thread's copy, after its wait and a barrier
        bad += !copied(&o[((4 * 3) * 64 + t) * 16], 0, (t + 1) % 64, 16);
    }
    CHECK(bad == 0);
}

// A double-buffered pipeline as attention kernels run one: stage s's copy is in flight while
// stage s-1's is read, for many more stages than the runtime keeps retired copies around.
__global__ void pipeline(int* bad, const int4* src, int stages) {
    __shared__ __align__(16) int4 buf[2][32];
    int t = threadIdx.x, wrong = 0;
    for (int s = 0; s <= stages; s++) {
        if (s < stages) gpu::cp_async_16(&buf[s % 2][t], src + s * 32 + t);
        gpu::cp_async_commit();  // an empty group at the end, as kernels commit unconditionally
        gpu::cp_async_wait<1>();  // stage s-1 is complete, stage s may not be
        if (s > 0) {
            int4 v = buf[(s - 1) % 2][t], want = src[(s - 1) * 32 + t];
            wrong += v.x != want.x || v.y != want.y || v.z != want.z || v.w != want.w;
        }
    }
    bad[t] = wrong;
}

TEST_CASE("cp_async_16: a double-buffered pipeline of 300 stages reads every stage's data") {
    const int stages = 300;
    std::vector<int4> src(stages * 32);
    for (int i = 0; i < stages * 32; i++) src[i] = make_int4(i, -i, 3 * i, i ^ 0x5555);
    Dev<int4> dsrc(src);
    Dev<int> bad(32);
    bad.fill_nan();
    pipeline<<<1, 32>>>(bad.p, dsrc.p, stages);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<int> b = bad.host();
    for (int t = 0; t < 32; t++) CHECK(b[t] == 0);
}

// Thread 0 issues a copy and returns without waiting; the others read it after a barrier.
// (A race on a GPU; the runtime completes a thread's copies when it exits: documented.)
__global__ void exits_in_flight(unsigned char* out, const unsigned char* src) {
    __shared__ __align__(16) unsigned char tile[16];
    if (threadIdx.x == 0) {
        memset(tile, 0xAB, 16);
        gpu::cp_async_16(tile, src);
        gpu::cp_async_commit();
        return;
    }
    __syncthreads();
    memcpy(out + 16 * threadIdx.x, tile, 16);
}

TEST_CASE("cp_async_16: copies still in flight when a thread exits are completed then") {
    std::vector<unsigned char> src(16, 0x5C);
    Dev<unsigned char> dsrc(src), out(16 * 32);
    out.fill_nan();
    exits_in_flight<<<1, 32>>>(out.p, dsrc.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<unsigned char> o = out.host();
    for (int t = 1; t < 32; t++) CHECK(o[16 * t + 15] == 0x5C);
}

// ----------------------------------------------------------------------------
// The race detector sees through the emulation: a correct tile pipeline passes, one that reads
// another thread's copy without a barrier after the wait is a race.
__global__ void tile_exchange(float* out, const float* in, int barrier) {
    __shared__ __align__(16) float tile[32][4];
    int t = threadIdx.x;
    tile[t][0] = -1;
    __syncthreads();
    gpu::cp_async_16(tile[t], in + 4 * t);
    gpu::cp_async_commit();
    gpu::cp_async_wait<0>();
    if (barrier) __syncthreads();
    out[t] = tile[(t + 1) % 32][0];
}

TEST_CASE("the race detector with mma, ldmatrix and cp.async") {
    cpu_cuda::Settings saved = cpu_cuda::settings();
    cpu_cuda::settings().racecheck = true;
    std::vector<float> in(128);
    for (int i = 0; i < 128; i++) in[i] = (float)i;
    Dev<float> din(in), out(32);
    std::string err = capture_stderr([&] { tile_exchange<<<1, 32>>>(out.p, din.p, 1); });
    CHECK(cudaGetLastError() == cudaSuccess);
    CHECK(err.empty());
    std::vector<float> o = out.host();
    for (int t = 0; t < 32; t++) CHECK(o[t] == (float)(4 * ((t + 1) % 32)));

    err = capture_stderr([&] { tile_exchange<<<1, 32>>>(out.p, din.p, 0); });
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CHECK(contains(err, "race"));

    std::vector<float> a = exact_values(256, 9), b = exact_values(256, 10);
    Dev<uint16_t> da(to_bits(a)), db(to_bits(b));
    Dev<float> dc(256);
    err = capture_stderr([&] { ldmatrix_product<<<1, 32>>>(dc.p, da.p, db.p, 1); });
    CHECK(cudaGetLastError() == cudaSuccess);
    CHECK(err.empty());
    cpu_cuda::settings() = saved;
}

// ----------------------------------------------------------------------------
// Misuse: errors naming the instruction, the reason and the caller's line

constexpr int skip_line = __LINE__ + 5;
__global__ void mma_lane_missing(float* out) {
    if (threadIdx.x == 7) return;
    uint32_t a[4] = {}, b[2] = {};
    float c[4] = {};
    gpu::mma_bf16_16816(c, a, b);
    out[threadIdx.x] = c[0];
}
__global__ void mma_partial_warp(float* out) {
    uint32_t a[4] = {}, b[2] = {};
    float c[4] = {};
    gpu::mma_bf16_16816(c, a, b);
    out[threadIdx.x] = c[0];
}
constexpr int misaligned_line = __LINE__ + 5;
__global__ void ldmatrix_misaligned(uint32_t* out) {
    __shared__ __align__(16) uint16_t s[32 * 16];
    const uint16_t* row = s + threadIdx.x * 16 + (threadIdx.x == 3 ? 4 : 0);  // lane 3: 8 bytes in
    uint32_t r[4];
    gpu::ldmatrix_x4(r, row);
    out[threadIdx.x] = r[0];
}
__global__ void ldmatrix_global(uint32_t* out, const uint16_t* g) {
    uint32_t r[4];
    gpu::ldmatrix_x4_trans(r, g + threadIdx.x * 8);
    out[threadIdx.x] = r[0];
}
__global__ void ldmatrix_past_shared(uint32_t* out) {  // lane 31's row runs past the array
    __shared__ __align__(16) uint16_t s[31 * 8 + 4];
    uint32_t r[4];
    gpu::ldmatrix_x4(r, s + threadIdx.x * 8);
    out[threadIdx.x] = r[0];
}
constexpr int cp_line = __LINE__ + 3;
__global__ void cp_async_misaligned(const unsigned char* g) {
    __shared__ __align__(16) unsigned char s[64 * 16];
    gpu::cp_async_16(s + 16 * threadIdx.x, g + 8);
    gpu::cp_async_commit();
    gpu::cp_async_wait<0>();
}
__global__ void cp_async_misaligned_dst(const unsigned char* g) {
    __shared__ __align__(16) unsigned char s[64 * 16 + 16];
    gpu::cp_async_16(s + 16 * threadIdx.x + 4, g);
}
__global__ void cp_async_to_global(unsigned char* g) { gpu::cp_async_16(g + 16 * threadIdx.x, g); }
__global__ void cp_async_from_shared() {
    __shared__ __align__(16) unsigned char s[2][16];
    if (threadIdx.x == 0) gpu::cp_async_16(s[0], s[1]);
}
__global__ void cp_async_bad_size(const unsigned char* g) {
    __shared__ __align__(16) unsigned char s[16];
    if (threadIdx.x == 0) gpu::cp_async_16(s, g, 17);
}

TEST_CASE("misused instructions fail the launch with the instruction, the reason and the source line") {
    Dev<float> outf(64);
    Dev<uint32_t> outu(64);
    Dev<uint16_t> g16(1024);
    Dev<unsigned char> g8(4096);
    const std::string file = "test/cpu_runtime/mma.cu:";
    struct Case {
        std::function<void()> launch;
        std::vector<std::string> says;
    };
    std::vector<Case> cases = {
        {[&] { mma_lane_missing<<<1, 32>>>(outf.p); },
         {"mma.sync", "lanes 7 of warp 0 did not take part", file + std::to_string(skip_line)}},
        {[&] { mma_partial_warp<<<1, 48>>>(outf.p); }, {"mma.sync", "lanes 16-31 of warp 1", "partial", file}},
        {[&] { ldmatrix_misaligned<<<1, 32>>>(outu.p); },
         {"ldmatrix", "lane 3's row address", "not 16-byte aligned", file + std::to_string(misaligned_line)}},
        {[&] { ldmatrix_global<<<1, 32>>>(outu.p, g16.p); },
         {"ldmatrix.sync.m8n8.x4.trans", "not in this block's shared memory", file}},
        {[&] { ldmatrix_past_shared<<<1, 32>>>(outu.p); },
         {"ldmatrix", "lane 31's row address", "not in this block's shared memory", file}},
        {[&] { cp_async_misaligned<<<1, 64>>>(g8.p); },
         {"cp.async", "source", "not 16-byte aligned", file + std::to_string(cp_line)}},
        {[&] { cp_async_misaligned_dst<<<1, 64>>>(g8.p); }, {"cp.async", "destination", "not 16-byte aligned", file}},
        {[&] { cp_async_to_global<<<1, 64>>>(g8.p); }, {"cp.async", "not in this block's shared memory", file}},
        {[&] { cp_async_from_shared<<<1, 32>>>(); }, {"cp.async", "is in shared memory", file}},
        {[&] { cp_async_bad_size<<<1, 32>>>(g8.p); }, {"cp.async", "src_bytes is 17", file}},
    };
    for (const Case& c : cases) {
        std::string err = capture_stderr(c.launch);
        CAPTURE(err);
        CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
        for (const std::string& s : c.says) {
            CAPTURE(s);
            CHECK(contains(err, s));
        }
    }
}
