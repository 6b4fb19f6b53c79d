// Tests of the CPU runtime's WMMA (cpu_cuda/wmma.h), doctest: nvcuda::wmma fragments,
// loads, stores and products against a float64 reference computed here, and the errors a
// misused warp collective gives. make test runs this suite twice: with the natural
// element-to-lane mapping and with CPU_CUDA_WMMA_LAYOUT=shuffled, under which every
// result must be the same (the mapping is unspecified in CUDA).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <mma.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cpu_cuda_test.h"

using namespace nvcuda;


// Values that bf16 and fp16 both hold exactly (8 significant bits, small exponents), so
// the float64 reference multiplies the very numbers the fragments hold.
static std::vector<float> exact_values(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> mant(-255, 255), expo(-6, 2);
    std::vector<float> v(n);
    for (float& x : v) x = std::ldexp((float)mant(rng), expo(rng) - 7);
    return v;
}
template <class T>
static std::vector<T> convert(const std::vector<float>& v) {
    std::vector<T> out;
    for (float x : v) out.push_back(T(x));
    return out;
}

// D (16×16, layout ld) = A·B + C, one warp per block; every operand at leading dimension
// ld, A/B in the fragment's layout, C loaded and D stored in the given memory layouts.
template <class T, class LA, class LB>
__global__ void one_product(float* d, const T* a, const T* b, const float* c, int ld, int c_col_major,
                            int d_col_major) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LA> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::load_matrix_sync(fa, a, ld);
    wmma::load_matrix_sync(fb, b, ld);
    wmma::load_matrix_sync(fc, c, ld, c_col_major ? wmma::mem_col_major : wmma::mem_row_major);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(d, fc, ld, d_col_major ? wmma::mem_col_major : wmma::mem_row_major);
}

// element (r, c) of a 16×16 matrix stored with leading dimension ld
static size_t at(int r, int c, int ld, bool col_major) { return col_major ? (size_t)c * ld + r : (size_t)r * ld + c; }

template <class T, class LA, class LB>
static void check_one_product(bool c_col, bool d_col) {
    const int ld = 24;  // a leading dimension other than 16: rows (or columns) have gaps
    const bool a_col = std::is_same<LA, wmma::col_major>::value, b_col = std::is_same<LB, wmma::col_major>::value;
    std::vector<float> a = exact_values(16 * ld, 1), b = exact_values(16 * ld, 2), c = exact_values(16 * ld, 3);
    Dev<T> da(convert<T>(a)), db(convert<T>(b));
    Dev<float> dc(c), dd(16 * ld);
    dd.fill_nan();
    one_product<T, LA, LB><<<1, 32>>>(dd.p, da.p, db.p, dc.p, ld, c_col, d_col);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> d = dd.host();
    int bad = 0;
    for (int r = 0; r < 16; r++)
        for (int col = 0; col < 16; col++) {
            double ref = c[at(r, col, ld, c_col)], magnitude = std::fabs(ref);
            for (int k = 0; k < 16; k++) {
                double p = (double)a[at(r, k, ld, a_col)] * b[at(k, col, ld, b_col)];
                ref += p, magnitude += std::fabs(p);
            }
            // 17 float32 additions of exact products: each rounds by at most 2^-24 of the
            // running sum, which is at most the sum of magnitudes
            double got = d[at(r, col, ld, d_col)];
            if (!(std::fabs(got - ref) <= 17 * std::ldexp(magnitude, -24))) bad++;
        }
    CHECK(bad == 0);
    // the gaps between rows of D were not written
    for (int r = 0; r < 16; r++)
        for (int g = 16; g < ld; g++) CHECK(std::isnan(d[(size_t)r * ld + g]));
}

TEST_CASE("mma_sync: D = A·B + C for bf16 and fp16, every layout of A, B, C and D, against float64") {
    for (int c_col = 0; c_col < 2; c_col++)
        for (int d_col = 0; d_col < 2; d_col++) {
            CAPTURE(c_col);
            CAPTURE(d_col);
            check_one_product<__nv_bfloat16, wmma::row_major, wmma::row_major>(c_col, d_col);
            check_one_product<__nv_bfloat16, wmma::row_major, wmma::col_major>(c_col, d_col);
            check_one_product<__nv_bfloat16, wmma::col_major, wmma::row_major>(c_col, d_col);
            check_one_product<__nv_bfloat16, wmma::col_major, wmma::col_major>(c_col, d_col);
            check_one_product<__half, wmma::row_major, wmma::col_major>(c_col, d_col);
            check_one_product<__half, wmma::col_major, wmma::row_major>(c_col, d_col);
        }
}

// C (M×N) = alpha·A (M×K) · B (K×N), all row-major, one 16×16 tile of C per warp: the
// way a kernel uses WMMA, with fill_fragment, a loop over k and an element-wise scale.
__global__ void tiled_product(float* c, const __nv_bfloat16* a, const __nv_bfloat16* b, int M, int N, int K,
                              float alpha) {
    int warp = threadIdx.x / 32, tiles_n = N / 16;
    int tile = blockIdx.x * (blockDim.x / 32) + warp;
    if (tile >= (M / 16) * tiles_n) return;  // whole warps leave together
    int r0 = tile / tiles_n * 16, c0 = tile % tiles_n * 16;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, a + (size_t)r0 * K + k, K);
        wmma::load_matrix_sync(fb, b + (size_t)k * N + c0, N);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    for (int i = 0; i < acc.num_elements; i++) acc.x[i] *= alpha;  // the same for every element: allowed
    wmma::store_matrix_sync(c + (size_t)r0 * N + c0, acc, N, wmma::mem_row_major);
}

TEST_CASE("a tiled product over several warps and blocks, accumulating over k, matches float64") {
    const int M = 48, N = 32, K = 80;
    std::vector<float> a = exact_values((size_t)M * K, 4), b = exact_values((size_t)K * N, 5);
    Dev<__nv_bfloat16> da(convert<__nv_bfloat16>(a)), db(convert<__nv_bfloat16>(b));
    Dev<float> dc((size_t)M * N);
    dc.fill_nan();
    tiled_product<<<2, 128>>>(dc.p, da.p, db.p, M, N, K, 0.5f);  // 6 tiles over 2 blocks of 4 warps
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> c = dc.host();
    int bad = 0;
    for (int r = 0; r < M; r++)
        for (int col = 0; col < N; col++) {
            double ref = 0, magnitude = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)a[(size_t)r * K + k] * b[(size_t)k * N + col];
                ref += p, magnitude += std::fabs(p);
            }
            ref *= 0.5, magnitude *= 0.5;
            // K float32 additions, each off by at most 2^-24 of the sum of magnitudes
            if (!(std::fabs(c[(size_t)r * N + col] - ref) <= K * std::ldexp(magnitude, -24))) bad++;
        }
    CHECK(bad == 0);
}

// Each lane writes what its fragment holds, tagged by (lane, slot): the mapping itself.
__global__ void reveal_mapping(float* out, const __half* values, const float* acc_values) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::load_matrix_sync(fa, values, 16);
    wmma::load_matrix_sync(fb, values, 16);
    wmma::load_matrix_sync(fc, acc_values, 16, wmma::mem_row_major);
    int lane = threadIdx.x;
    for (int i = 0; i < fa.num_elements; i++) {
        out[lane * fa.num_elements + i] = (float)fa.x[i];
        out[256 + lane * fb.num_elements + i] = (float)fb.x[i];
        out[512 + lane * fc.num_elements + i] = fc.x[i];
    }
}

TEST_CASE("each element is held by exactly one lane; CPU_CUDA_WMMA_LAYOUT=shuffled permutes the mapping") {
    std::vector<float> index(256);
    for (int i = 0; i < 256; i++) index[i] = (float)i;  // exact in fp16
    Dev<__half> dv(convert<__half>(index));
    Dev<float> dacc(index), out(768);
    out.fill_nan();
    reveal_mapping<<<1, 32>>>(out.p, dv.p, dacc.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> o = out.host();
    std::vector<std::vector<int>> held(3);
    for (int kind = 0; kind < 3; kind++) {
        std::vector<int> seen(256, 0);
        for (int i = 0; i < 256; i++) {
            float v = o[kind * 256 + i];
            REQUIRE(v >= 0);  // NaN fails too
            REQUIRE(v < 256);
            seen[(int)v]++;
            held[kind].push_back((int)v);
        }
        for (int i = 0; i < 256; i++) CHECK(seen[i] == 1);
    }
    const char* layout = getenv("CPU_CUDA_WMMA_LAYOUT");
    if (layout && std::string(layout) == "shuffled") {
        // code that assumes one kind's mapping for another's, or that lane 0 holds row 0, fails
        CHECK(held[0] != held[1]);
        CHECK(held[0] != held[2]);
        CHECK(held[1] != held[2]);
        int in_place = 0;
        for (int i = 0; i < 256; i++) in_place += held[2][i] == i;
        CHECK(in_place < 16);
    }
}

// ---- misuse: errors naming the call and the line, not hangs or silent results

__global__ void lane_skips(float* out, const __nv_bfloat16* a) {
    if (threadIdx.x == 3) return;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, a, 16);
    out[threadIdx.x] = (float)fa.x[0];
}
__global__ void lanes_disagree(float* out, const __nv_bfloat16* a) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, a + (threadIdx.x == 5 ? 16 : 0), 16);
    out[threadIdx.x] = (float)fa.x[0];
}
__global__ void misaligned(float* out, const __nv_bfloat16* a) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, a + 8, 16);  // 16 bytes in: not 32-byte aligned
    out[threadIdx.x] = (float)fa.x[0];
}
__global__ void bad_ldm(float* out, const __nv_bfloat16* a) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, a, 20);  // 40 bytes: not a multiple of 16
    out[threadIdx.x] = (float)fa.x[0];
}
__global__ void diverged(float* out) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    if (threadIdx.x < 16)
        wmma::fill_fragment(acc, 1.0f);
    else
        wmma::fill_fragment(acc, 2.0f);
    wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
}
__global__ void partial_warp(float* out) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 1.0f);
    wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
}

TEST_CASE("misused WMMA calls fail the launch with the call, the reason and the source line") {
    Dev<__nv_bfloat16> a(512);
    Dev<float> out(512);
    struct Case {
        std::function<void()> launch;
        const char* says;
    };
    std::vector<Case> cases = {
        {[&] { lane_skips<<<1, 32>>>(out.p, a.p); }, "did not take part"},
        {[&] { lanes_disagree<<<1, 32>>>(out.p, a.p); }, "must agree"},
        {[&] { misaligned<<<1, 32>>>(out.p, a.p); }, "32-byte"},
        {[&] { bad_ldm<<<1, 32>>>(out.p, a.p); }, "leading dimension 20"},
        {[&] { diverged<<<1, 32>>>(out.p); }, "diverged"},
        {[&] { partial_warp<<<1, 48>>>(out.p); }, "partial"},
    };
    for (const Case& c : cases) {
        std::string says = c.says;
        CAPTURE(says);
        std::string err = capture_stderr(c.launch);
        CAPTURE(err);
        CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
        CHECK(contains(err, says));
        CHECK(contains(err, "wmma::"));
        CHECK(contains(err, "test/cpu_runtime/wmma.cu:"));  // the caller's line, not the runtime's
    }
}

// ----------------------------------------------------------------------------
// m16n16k8 with wmma::precision::tf32 (the programming guide's alternate floating point WMMA):
// A 16x8 and B 8x16 in float, each input rounded to tf32 (10-bit mantissa, to nearest, ties away
// from zero, as wmma::__float_to_tf32) before the product, summed in float onto C.

// tf32 rounding computed another way than the runtime's: the significand scaled to 11 bits and
// rounded by std::round (which rounds ties away from zero)
static double tf32_reference(float x) {
    int e = 0;
    double m = std::frexp((double)x, &e);  // x = m 2^e, 0.5 <= |m| < 1: 11 significant bits are m 2^11
    return std::ldexp(std::round(std::ldexp(m, 11)), e - 11);
}

template <class LA, class LB>
__global__ void tf32_product(float* d, const float* a, int lda, const float* b, int ldb, const float* c) {
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, LA> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, LB> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
    wmma::load_matrix_sync(fa, a, lda);
    wmma::load_matrix_sync(fb, b, ldb);
    wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(d, fc, 16, wmma::mem_row_major);
}
__global__ void tf32_convert(float* out, const float* in, int n) {
    for (int i = 0; i < n; i++) out[i] = wmma::__float_to_tf32(in[i]);
}

template <class LA, class LB>
static void check_tf32_product() {
    const bool a_col = std::is_same<LA, wmma::col_major>::value, b_col = std::is_same<LB, wmma::col_major>::value;
    const int lda = a_col ? 16 : 8, ldb = b_col ? 8 : 16;  // the smallest leading dimensions allowed
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<float> a(16 * 8), b(8 * 16), c(16 * 16);
    for (float& x : a) x = u(rng);  // full float mantissas: the rounding shows
    for (float& x : b) x = u(rng);
    for (float& x : c) x = u(rng);
    Dev<float> da(a), db(b), dc(c), dd(16 * 16);
    dd.fill_nan();
    tf32_product<LA, LB><<<1, 32>>>(dd.p, da.p, lda, db.p, ldb, dc.p);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> d = dd.host();
    int bad = 0, differs_unrounded = 0;
    for (int r = 0; r < 16; r++)
        for (int col = 0; col < 16; col++) {
            double ref = c[r * 16 + col], unrounded = ref, magnitude = std::fabs(ref);
            for (int k = 0; k < 8; k++) {
                float x = a[a_col ? k * lda + r : r * lda + k], y = b[b_col ? col * ldb + k : k * ldb + col];
                ref += tf32_reference(x) * tf32_reference(y), unrounded += (double)x * y;
                magnitude += std::fabs(tf32_reference(x) * tf32_reference(y));
            }
            // the products are exact in float (11-bit significands); the float sum of 9 terms
            // errs by at most 9 float roundings of the running magnitude: 9 * 2^-24 * magnitude
            const double tol = 9 * std::ldexp(magnitude, -24);
            const float got = d[r * 16 + col];
            bad += !(std::fabs(got - ref) <= tol);  // (NaN fails)
            differs_unrounded += std::fabs(got - unrounded) > tol;
        }
    CHECK(bad == 0);
    CHECK(differs_unrounded > 128);  // inputs not rounded would agree with the float product instead
}

TEST_CASE("mma_sync m16n16k8 with precision::tf32: inputs rounded to tf32, every layout of A and B, against float64") {
    check_tf32_product<wmma::row_major, wmma::row_major>();
    check_tf32_product<wmma::row_major, wmma::col_major>();
    check_tf32_product<wmma::col_major, wmma::row_major>();
    check_tf32_product<wmma::col_major, wmma::col_major>();
    // __float_to_tf32: 1 + 2^-11 is a tie (away from zero: 1 + 2^-10), 1 + 2^-12 rounds down,
    // 1 + 3·2^-12 up; the sign does not change the magnitude's rounding
    std::vector<float> in = {1.0f + std::ldexp(1.0f, -11), 1.0f + std::ldexp(1.0f, -12), 1.0f + 3 * std::ldexp(1.0f, -12),
                             -(1.0f + std::ldexp(1.0f, -11)), 3.14159265f, -1e-30f};
    Dev<float> din(in), dout(in.size());
    tf32_convert<<<1, 1>>>(dout.p, din.p, (int)in.size());
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> out = dout.host();
    CHECK(out[0] == 1.0f + std::ldexp(1.0f, -10));
    CHECK(out[1] == 1.0f);
    CHECK(out[2] == 1.0f + std::ldexp(1.0f, -10));
    CHECK(out[3] == -(1.0f + std::ldexp(1.0f, -10)));
    for (size_t i = 0; i < in.size(); i++) CHECK(out[i] == (float)tf32_reference(in[i]));
}
