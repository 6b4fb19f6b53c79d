// Tests of the CPU runtime's tensor-core instructions (cpu_cuda/mma.h, through gpu/mma.cuh),
// doctest: mma.sync.m16n8k16, ldmatrix .x4 (.trans) and cp.async.
//
// The references are independent of the runtime's code: the PTX ISA's fragment tables are
// written out here a second time, lane by lane ("Matrix fragments for mma.m16n8k16 with
// floating point type" and "ldmatrix"), and every product is checked against float64. The
// inputs are values that bf16 holds exactly, so the float64 reference multiplies the very
// numbers the registers hold; a float32 sum of 16 exact products is then within ~1e-6
// relative of the float64 one (the tolerance below).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../gpu/mma.cuh"
#include "cpu_cuda_test.h"

using bf16 = __nv_bfloat16;

// ---- the PTX ISA's tables, written out for this test (g = lane / 4, i = lane % 4)
// A (16×16, row-major): register r of lane holds elements (row, k) and (row, k + 1)
static int a_row(int lane, int r) { return lane / 4 + 8 * (r % 2); }
static int a_col(int lane, int r) { return 2 * (lane % 4) + 8 * (r / 2); }
// B (16×8, k × n): register r holds (k, n) and (k + 1, n)
static int b_k(int lane, int r) { return 2 * (lane % 4) + 8 * r; }
static int b_n(int lane) { return lane / 4; }
// C (16×8): element e is (row, n)
static int c_row(int lane, int e) { return lane / 4 + 8 * (e / 2); }
static int c_n(int lane, int e) { return 2 * (lane % 4) + e % 2; }

static uint16_t bits(float x) {
    bf16 b = __float2bfloat16(x);
    uint16_t u;
    memcpy(&u, &b, 2);
    return u;
}
static uint32_t pair(float lo, float hi) { return (uint32_t)bits(lo) | (uint32_t)bits(hi) << 16; }
// values bf16 holds exactly: 8 significant bits, small exponents
static std::vector<float> exact_values(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> mant(-255, 255), expo(-4, 2);
    std::vector<float> v(n);
    for (float& x : v) x = std::ldexp((float)mant(rng), expo(rng) - 7);
    return v;
}
static bool close_to(double ours, double ref) { return std::fabs(ours - ref) <= 1e-6 * std::max(1.0, std::fabs(ref)); }

// One mma per warp: every lane's registers come in from memory as the test laid them out
// (regs: 32 lanes × [a0..a3, b0, b1]), c from c_in (32 × 4), the result to c_out.
__global__ void one_mma(float* c_out, const uint32_t* regs, const float* c_in) {
    const int lane = threadIdx.x % 32;
    const uint32_t* r = regs + lane * 6;
    uint32_t a[4] = {r[0], r[1], r[2], r[3]}, b[2] = {r[4], r[5]};
    float c[4];
    for (int e = 0; e < 4; e++) c[e] = c_in[lane * 4 + e];
    gpu::mma_bf16_16816(c, a, b);
    for (int e = 0; e < 4; e++) c_out[lane * 4 + e] = c[e];
}

// Runs one_mma on A (16×16), B (16×8) and C (16×8), all row-major, distributed by the tables
// above; returns D (16×8, row-major) gathered back by the same tables.
static std::vector<float> run_mma(const std::vector<float>& A, const std::vector<float>& B,
                                  const std::vector<float>& C) {
    std::vector<uint32_t> regs(32 * 6);
    std::vector<float> c_in(32 * 4);
    for (int lane = 0; lane < 32; lane++) {
        for (int r = 0; r < 4; r++) {
            const int row = a_row(lane, r), k = a_col(lane, r);
            regs[lane * 6 + r] = pair(A[row * 16 + k], A[row * 16 + k + 1]);
        }
        for (int r = 0; r < 2; r++) {
            const int k = b_k(lane, r), n = b_n(lane);
            regs[lane * 6 + 4 + r] = pair(B[k * 8 + n], B[(k + 1) * 8 + n]);
        }
        for (int e = 0; e < 4; e++) c_in[lane * 4 + e] = C[c_row(lane, e) * 8 + c_n(lane, e)];
    }
    Dev<uint32_t> d_regs(regs);
    Dev<float> d_c(c_in), d_out(32 * 4);
    d_out.fill_nan();
    one_mma<<<1, 32>>>(d_out.p, d_regs.p, d_c.p);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<float> out = d_out.host(), D(16 * 8);
    for (int lane = 0; lane < 32; lane++)
        for (int e = 0; e < 4; e++) D[c_row(lane, e) * 8 + c_n(lane, e)] = out[lane * 4 + e];
    return D;
}

TEST_CASE("mma.sync m16n8k16: every element of D = A·B + C against float64") {
    for (unsigned seed : {1u, 2u, 3u}) {
        CAPTURE(seed);
        std::vector<float> A = exact_values(256, seed), B = exact_values(128, seed + 10),
                           C = exact_values(128, seed + 20);
        std::vector<float> D = run_mma(A, B, C);
        int bad = 0;
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 8; n++) {
                double ref = C[m * 8 + n];
                for (int k = 0; k < 16; k++) ref += (double)A[m * 16 + k] * B[k * 8 + n];
                if (!close_to(D[m * 8 + n], ref)) bad++;
            }
        CHECK(bad == 0);
    }
}

TEST_CASE("mma.sync: which lane holds which element, read off one product at a time") {
    // A = the unit matrix e(m0, k0), B = the unit matrix e(k0, n0): D = A·B is 1 at (m0, n0)
    // and 0 elsewhere, so the lane and register where the 1 appears, and the ones that fed it,
    // show the layout itself (a consistent but wrong permutation of rows would pass the float64
    // test above only if load and gather agreed, which they do by construction; this does not)
    for (int m0 : {0, 5, 8, 15})
        for (int k0 : {0, 3, 8, 14})
            for (int n0 : {0, 7}) {
                CAPTURE(m0);
                CAPTURE(k0);
                CAPTURE(n0);
                std::vector<float> A(256, 0.0f), B(128, 0.0f), C(128, 0.0f);
                A[m0 * 16 + k0] = 1.0f, B[k0 * 8 + n0] = 2.0f;
                std::vector<float> D = run_mma(A, B, C);
                for (int m = 0; m < 16; m++)
                    for (int n = 0; n < 8; n++) CHECK(D[m * 8 + n] == (m == m0 && n == n0 ? 2.0f : 0.0f));
            }
    // and the tables themselves, against the PTX ISA's figures for three lanes
    CHECK((a_row(0, 0) == 0 && a_col(0, 0) == 0 && a_row(0, 1) == 8 && a_col(0, 2) == 8));
    CHECK((a_row(7, 3) == 9 && a_col(7, 3) == 14));  // lane 7: g = 1, i = 3
    CHECK((b_k(30, 1) == 12 && b_n(30) == 7));       // lane 30: g = 7, i = 2
    CHECK((c_row(13, 2) == 11 && c_n(13, 3) == 3));  // lane 13: g = 3, i = 1
}

// A 16×32 bf16 tile in shared memory, rows padded to 40 elements (80 bytes, 16-byte aligned);
// out: each lane's 4 registers of ldmatrix .x4 (.trans), row address: matrix j = lane / 8 is
// rows 0..7 or 8..15 (j % 2) at columns 0..7, 8..15 (non-trans: matrix j's rows at column 8j).
constexpr int LDT = 40;
template <bool TRANS>
__global__ void ldmatrix_tile(uint32_t* out, const bf16* tile) {
    __shared__ __align__(16) bf16 s[16 * LDT];
    for (int i = threadIdx.x; i < 16 * LDT; i += 32) s[i] = tile[i];
    __syncthreads();
    const int lane = threadIdx.x, j = lane / 8;
    const bf16* row = s + (lane % 8 + 8 * (j % 2)) * LDT + 8 * (j / 2);
    uint32_t r[4];
    if (TRANS)
        gpu::ldmatrix_x4_trans(r, row);
    else
        gpu::ldmatrix_x4(r, row);
    for (int q = 0; q < 4; q++) out[lane * 4 + q] = r[q];
}

TEST_CASE("ldmatrix .x4 and .trans: every lane's registers are the documented elements") {
    // a distinct value per element, each exact in bf16: the 8-bit mantissa and the exponent
    // together encode the index, so a register names the elements it holds
    std::vector<float> values(16 * LDT);
    std::vector<uint16_t> code(16 * LDT);
    for (int i = 0; i < 16 * LDT; i++) {
        values[i] = std::ldexp((float)(i % 128 + 128), i / 128 - 7);
        code[i] = bits(values[i]);
    }
    std::vector<bf16> tile(16 * LDT);
    for (int i = 0; i < 16 * LDT; i++) tile[i] = __float2bfloat16(values[i]);
    Dev<bf16> d_tile(tile);
    for (bool trans : {false, true}) {
        CAPTURE(trans);
        Dev<uint32_t> d_out(32 * 4);
        if (trans)
            ldmatrix_tile<true><<<1, 32>>>(d_out.p, d_tile.p);
        else
            ldmatrix_tile<false><<<1, 32>>>(d_out.p, d_tile.p);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        std::vector<uint32_t> out = d_out.host();
        int bad = 0;
        for (int lane = 0; lane < 32; lane++)
            for (int j = 0; j < 4; j++) {
                const int r0 = 8 * (j % 2), c0 = 8 * (j / 2);  // matrix j's corner in the tile
                const int g = lane / 4, i = lane % 4;
                // non-trans: (row g, columns 2i, 2i+1); trans: (rows 2i, 2i+1, column g)
                const int lo = trans ? (r0 + 2 * i) * LDT + c0 + g : (r0 + g) * LDT + c0 + 2 * i;
                const int hi = trans ? (r0 + 2 * i + 1) * LDT + c0 + g : lo + 1;
                if (out[lane * 4 + j] != ((uint32_t)code[lo] | (uint32_t)code[hi] << 16)) bad++;
            }
        CHECK(bad == 0);
    }
}

// Q·Kᵀ·V for 16 queries and 16 keys of head size 16, as FlashAttention computes it: S = Q·Kᵀ
// (K stored n-major, ldmatrix), the two 16×8 accumulators of S packed to bf16 as the A operand
// of S·V (V stored k-major, ldmatrix .trans). out: 16×16 float32.
__global__ void two_products(float* out, const bf16* q, const bf16* k, const bf16* v) {
    __shared__ __align__(16) bf16 sq[16 * 24], sk[16 * 24], sv[16 * 24];
    for (int i = threadIdx.x; i < 256; i += 32) {
        const int r = i / 16, c = i % 16;
        sq[r * 24 + c] = q[i], sk[r * 24 + c] = k[i], sv[r * 24 + c] = v[i];
    }
    __syncthreads();
    const int lane = threadIdx.x;
    uint32_t a[4], kb[4], vb[4];
    gpu::ldmatrix_x4(a, sq + (lane % 16) * 24 + (lane / 16) * 8);
    gpu::ldmatrix_x4(kb, sk + (lane % 8 + (lane / 16) * 8) * 24 + (lane / 8 % 2) * 8);
    float s[2][4] = {};
    uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
    gpu::mma_bf16_16816(s[0], a, b0);
    gpu::mma_bf16_16816(s[1], a, b1);
    uint32_t p[4] = {gpu::pack_bf16x2(s[0][0], s[0][1]), gpu::pack_bf16x2(s[0][2], s[0][3]),
                     gpu::pack_bf16x2(s[1][0], s[1][1]), gpu::pack_bf16x2(s[1][2], s[1][3])};
    gpu::ldmatrix_x4_trans(vb, sv + (lane % 8 + (lane / 8 % 2) * 8) * 24 + (lane / 16) * 8);
    float o[2][4] = {};
    uint32_t v0[2] = {vb[0], vb[1]}, v1[2] = {vb[2], vb[3]};
    gpu::mma_bf16_16816(o[0], p, v0);
    gpu::mma_bf16_16816(o[1], p, v1);
    for (int n = 0; n < 2; n++)
        for (int e = 0; e < 4; e++) out[c_row(lane, e) * 16 + 8 * n + c_n(lane, e)] = o[n][e];
}

TEST_CASE("an accumulator packed to bf16 is the next product's A operand: (Q·Kᵀ)·V against float64") {
    std::vector<float> q = exact_values(256, 31), k = exact_values(256, 32), v = exact_values(256, 33);
    for (float& x : q) x /= 4;  // keeps S small enough that its bf16 rounding is the only error
    std::vector<bf16> bq, bk, bv;
    for (int i = 0; i < 256; i++) bq.push_back(__float2bfloat16(q[i])), bk.push_back(__float2bfloat16(k[i])),
                                  bv.push_back(__float2bfloat16(v[i]));
    Dev<bf16> dq(bq), dk(bk), dv(bv);
    Dev<float> dout(256);
    dout.fill_nan();
    two_products<<<1, 32>>>(dout.p, dq.p, dk.p, dv.p);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<float> out = dout.host();
    int bad = 0;
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            double ref = 0;
            for (int j = 0; j < 16; j++) {  // S rounded to bf16, as the kernel packs it
                double sij = 0;
                for (int d = 0; d < 16; d++) sij += (double)q[m * 16 + d] * k[j * 16 + d];
                ref += (double)__bfloat162float(__float2bfloat16((float)sij)) * v[j * 16 + n];
            }
            // the float32 sum of S may round to the other bf16 neighbour than float64's: one
            // bf16 ulp of S (2^-8 relative) times |v|, summed over 16 keys, bounds the difference
            double bound = 0;
            for (int j = 0; j < 16; j++) {
                double sij = 0;
                for (int d = 0; d < 16; d++) sij += (double)q[m * 16 + d] * k[j * 16 + d];
                bound += std::fabs(sij) * std::ldexp(1.0, -8) * std::fabs(v[j * 16 + n]);
            }
            if (!(std::fabs(out[m * 16 + n] - ref) <= bound + 1e-6 * std::max(1.0, std::fabs(ref)))) bad++;
        }
    CHECK(bad == 0);
}

// cp.async: group 0 copies 16 bytes of src, group 1 the next 16 with src-size 8 (the rest
// zeros). Snapshots of the shared tile before any wait, after wait<1> (group 0 done) and
// after wait<0> (both) go to out (3 × 32 bytes).
__global__ void async_copies(char* out, const char* src) {
    __shared__ __align__(16) char tile[32];
    if (threadIdx.x == 0) {
        memset(tile, 7, 32);
        gpu::cp_async_16(tile, src);
        gpu::cp_async_commit();
        gpu::cp_async_16(tile + 16, src + 16, 8);
        gpu::cp_async_commit();
        memcpy(out, tile, 32);
        gpu::cp_async_wait<1>();
        memcpy(out + 32, tile, 32);
        gpu::cp_async_wait<0>();
        memcpy(out + 64, tile, 32);
    }
}

TEST_CASE("cp.async: a copy lands when a wait retires its group; src-size zero-fills the rest") {
    std::vector<char> src(32);
    for (int i = 0; i < 32; i++) src[i] = (char)(100 + i);
    Dev<char> d_src(src), d_out(96);
    async_copies<<<1, 32>>>(d_out.p, d_src.p);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<char> out = d_out.host();
    std::vector<char> before(32, 7), after_one(32, 7), after_both(32, 0);
    for (int i = 0; i < 16; i++) after_one[i] = after_both[i] = src[i];
    for (int i = 16; i < 24; i++) after_both[i] = src[i];  // bytes 24..31: zeros
    CHECK(std::vector<char>(out.begin(), out.begin() + 32) == before);  // nothing before a wait
    CHECK(std::vector<char>(out.begin() + 32, out.begin() + 64) == after_one);
    CHECK(std::vector<char>(out.begin() + 64, out.end()) == after_both);
}

// ---- misuse: each fails the launch with the instruction, the reason and the caller's line
__global__ void mma_lane_missing(float* out) {
    uint32_t a[4] = {}, b[2] = {};
    float c[4] = {};
    if (threadIdx.x != 5) gpu::mma_bf16_16816(c, a, b);
    out[threadIdx.x] = c[0];
}
__global__ void ldmatrix_misaligned(float* out) {
    __shared__ __align__(16) bf16 s[512];
    uint32_t r[4];
    gpu::ldmatrix_x4(r, s + 8 * threadIdx.x + 1);  // 2 bytes past a 16-byte boundary
    out[threadIdx.x] = (float)r[0];
}
__global__ void ldmatrix_global(float* out, const bf16* g) {
    uint32_t r[4];
    gpu::ldmatrix_x4(r, g + 8 * threadIdx.x);
    out[threadIdx.x] = (float)r[0];
}
__global__ void cp_async_misaligned(float* out, const bf16* g) {
    __shared__ __align__(16) bf16 s[512];
    gpu::cp_async_16(s + 8 * threadIdx.x, g + 8 * threadIdx.x + 4);
    gpu::cp_async_commit();
    gpu::cp_async_wait<0>();
    out[threadIdx.x] = 0.0f;
}
__global__ void cp_async_to_global(float* out, bf16* g) {
    gpu::cp_async_16(g + 8 * threadIdx.x, g + 256 + 8 * threadIdx.x);
    out[threadIdx.x] = 0.0f;
}

TEST_CASE("misused tensor-core instructions fail the launch with the instruction, the reason and the line") {
    Dev<bf16> g(1024);
    Dev<float> out(64);
    struct Case {
        std::function<void()> launch;
        const char* instruction;
        const char* says;
    };
    std::vector<Case> cases = {
        {[&] { mma_lane_missing<<<1, 32>>>(out.p); }, "mma.sync", "did not take part"},
        {[&] { ldmatrix_misaligned<<<1, 32>>>(out.p); }, "ldmatrix", "not 16-byte aligned"},
        {[&] { ldmatrix_global<<<1, 32>>>(out.p, g.p); }, "ldmatrix", "not in the block's shared memory"},
        {[&] { cp_async_misaligned<<<1, 32>>>(out.p, g.p); }, "cp.async", "16-byte aligned"},
        {[&] { cp_async_to_global<<<1, 32>>>(out.p, g.p); }, "cp.async", "not in the block's shared memory"},
    };
    for (const Case& c : cases) {
        std::string says = c.says;
        CAPTURE(says);
        std::string err = capture_stderr(c.launch);
        CAPTURE(err);
        CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
        CHECK(contains(err, c.instruction));
        CHECK(contains(err, says));
        CHECK(contains(err, "test/test_cpu_mma.cu:"));  // the caller's line, not the runtime's
    }
}
