// Tests of the CPU runtime's cuBLAS and cuBLASLt subset (cpu_cuda/cublas_cpu.h), doctest.
// Built with the runtime (one command):
//   g++ -std=c++17 -O2 -march=native -I/usr/local/cuda/include -include cpu_cuda/cuda_cpu.h
//       -x c++ test/cpu_runtime/cublas.cpp -o test/cpu_runtime/cublas -lpthread
//
// Every expected value is computed here, in float64, from the inputs and cuBLAS's documented
// semantics (column-major storage, op(X), alpha and beta, the epilogues' formulas), never by
// the code under test. Each tolerance is stated where it is checked, with its reason; the
// comparisons are written so that a NaN fails them.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cpu_cuda_test.h"

// ----------------------------------------------------------------------------
// Helpers

struct Handle {
    cublasHandle_t h = nullptr;
    Handle() { REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS); }
    ~Handle() { cublasDestroy(h); }
    operator cublasHandle_t() const { return h; }
};

static std::mt19937& rng() {
    static std::mt19937 r(20240521);
    return r;
}
static std::vector<float> random_floats(size_t n) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng());
    return v;
}
// Multiples of 1/64 in [-2, 2]: exact in bf16 and fp16 (at most 8 significant bits), and
// their products summed over k ≤ 256 terms are exact in float32 (multiples of 2^-12 below
// 2^10: 22 bits), so float32 accumulation of these inputs has no rounding error at all.
static std::vector<float> grid_floats(size_t n) {
    std::uniform_int_distribution<int> u(-128, 128);
    std::vector<float> v(n);
    for (float& x : v) x = (float)u(rng()) / 64.0f;
    return v;
}

static std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& v) {
    std::vector<__nv_bfloat16> out(v.size());
    for (size_t i = 0; i < v.size(); i++) out[i] = __float2bfloat16(v[i]);
    return out;
}
static std::vector<__half> to_half(const std::vector<float>& v) {
    std::vector<__half> out(v.size());
    for (size_t i = 0; i < v.size(); i++) out[i] = __float2half(v[i]);
    return out;
}

// Rounding to p significant bits, written independently of the runtime: scale the value so
// that its last kept bit is the units digit, round to an integer, scale back.
static double round_bits(double x, int p, bool ties_away) {
    if (x == 0 || !std::isfinite(x)) return x;
    double ulp = std::ldexp(1.0, std::ilogb(x) - (p - 1));
    double q = x / ulp;  // exact: a power-of-two scaling
    return (ties_away ? std::round(q) : std::nearbyint(q)) * ulp;  // nearbyint: ties to even
}
// TF32: 10 explicit mantissa bits (11 significant), to nearest with ties away from zero
static double tf32(double x) { return round_bits(x, 11, true); }
static double bf16_round(double x) { return round_bits(x, 8, false); }  // nearest, ties to even
static double fp16_round(double x) { return round_bits(x, 11, false); }

// Element (r, c) of op(X), for X column-major with leading dimension ld.
static double op_at(const std::vector<float>& X, bool trans, int64_t ld, int64_t r, int64_t c) {
    return trans ? X[(size_t)(c + r * ld)] : X[(size_t)(r + c * ld)];
}

// alpha·op(A)·op(B) + beta·C in float64, with the inputs first passed through `input`; and,
// per element, Σ|terms| (with |beta·c|): what a float32 sum's error is proportional to.
struct Ref {
    int64_t m, n;
    std::vector<double> value, scale;  // m×n, column-major, dense
    double at(int64_t i, int64_t j) const { return value[(size_t)(i + j * m)]; }
};
static Ref reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const std::vector<float>& A,
                     int64_t lda, const std::vector<float>& B, int64_t ldb, double beta, const std::vector<float>& C,
                     int64_t ldc, const std::function<double(double)>& input = [](double x) { return x; }) {
    Ref r{m, n, std::vector<double>((size_t)(m * n)), std::vector<double>((size_t)(m * n))};
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < m; i++) {
            double sum = 0, mag = 0;
            for (int64_t p = 0; p < k; p++) {
                double t = input(op_at(A, ta, lda, i, p)) * input(op_at(B, tb, ldb, p, j));
                sum += t, mag += std::fabs(t);
            }
            double c = beta == 0 ? 0 : beta * C[(size_t)(i + j * ldc)];
            r.value[(size_t)(i + j * m)] = alpha * sum + c;
            r.scale[(size_t)(i + j * m)] = std::fabs(alpha) * mag + std::fabs(c);
        }
    return r;
}

// The largest |got - want| / scale over the m×n matrix (got column-major, leading dimension
// ld); infinity if any element is NaN or infinite, so that every check on it fails.
template <class T>
static double worst_error(const std::vector<T>& got, int64_t ld, const Ref& ref) {
    double worst = 0;
    for (int64_t j = 0; j < ref.n; j++)
        for (int64_t i = 0; i < ref.m; i++) {
            double g = (double)(float)got[(size_t)(i + j * ld)];
            double e = std::fabs(g - ref.at(i, j)) / std::max(ref.scale[(size_t)(i + j * ref.m)], 1e-30);
            if (!std::isfinite(e)) return INFINITY;
            worst = std::max(worst, e);
        }
    return worst;
}

// A float32 sum of k products, then alpha·sum + beta·c: at most k + 3 roundings of 2^-24
// each, relative to Σ|terms| (the classical γ bound, with a little slack).
static double float32_bound(int64_t k) { return (double)(k + 3) * std::ldexp(1.0, -24) * 1.01; }

// Elements of C outside its m×n region (rows m..ldc-1 of each column, and whatever follows
// the last column) must keep their bits.
static bool padding_untouched(const std::vector<float>& before, const std::vector<float>& after, int64_t m,
                              int64_t n, int64_t ldc) {
    for (size_t i = 0; i < before.size(); i++) {
        bool inside = (int64_t)i < ldc * n && (int64_t)i % ldc < m;
        if (!inside && memcmp(&before[i], &after[i], 4) != 0) return false;
    }
    return true;
}

static const cublasOperation_t N = CUBLAS_OP_N, T = CUBLAS_OP_T;

// GELU in its tanh form, and its derivative, in float64.
static double gelu(double x) {
    const double s = std::sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
}
static double gelu_grad(double x) {
    const double s = std::sqrt(2.0 / M_PI), t = std::tanh(s * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

// The descriptors of one cuBLASLt product, destroyed at scope end.
struct LtMatmul {
    cublasLtHandle_t lt = nullptr;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
    LtMatmul(cublasOperation_t ta, cublasOperation_t tb, cudaDataType in, cudaDataType out, uint64_t m, uint64_t n,
             uint64_t k, int64_t lda, int64_t ldb, int64_t ldc, int64_t ldd,
             cublasComputeType_t compute = CUBLAS_COMPUTE_32F) {
        REQUIRE(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS);
        REQUIRE(cublasLtMatmulDescCreate(&op, compute, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
        set(CUBLASLT_MATMUL_DESC_TRANSA, ta);
        set(CUBLASLT_MATMUL_DESC_TRANSB, tb);
        REQUIRE(cublasLtMatrixLayoutCreate(&a, in, ta == N ? m : k, ta == N ? k : m, lda) == CUBLAS_STATUS_SUCCESS);
        REQUIRE(cublasLtMatrixLayoutCreate(&b, in, tb == N ? k : n, tb == N ? n : k, ldb) == CUBLAS_STATUS_SUCCESS);
        REQUIRE(cublasLtMatrixLayoutCreate(&c, out, m, n, ldc) == CUBLAS_STATUS_SUCCESS);
        REQUIRE(cublasLtMatrixLayoutCreate(&d, out, m, n, ldd) == CUBLAS_STATUS_SUCCESS);
    }
    ~LtMatmul() {
        cublasLtMatrixLayoutDestroy(a), cublasLtMatrixLayoutDestroy(b);
        cublasLtMatrixLayoutDestroy(c), cublasLtMatrixLayoutDestroy(d);
        cublasLtMatmulDescDestroy(op);
        cublasLtDestroy(lt);
    }
    template <class V>
    void set(cublasLtMatmulDescAttributes_t attr, V value) {
        REQUIRE(cublasLtMatmulDescSetAttribute(op, attr, &value, sizeof value) == CUBLAS_STATUS_SUCCESS);
    }
    cublasStatus_t run(const float* alpha, const void* A, const void* B, const float* beta, const void* C, void* D) {
        return cublasLtMatmul(lt, op, alpha, A, a, B, b, beta, C, c, D, d, nullptr, nullptr, 0, nullptr);
    }
};

// ----------------------------------------------------------------------------
// cublasSgemm

// One Sgemm with leading dimensions larger than needed, checked against float64; C's
// padding rows must be left alone.
static void check_sgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                        float alpha, float beta, int pad) {
    bool at = ta != N, bt = tb != N;
    int lda = (at ? k : m) + pad, ldb = (bt ? n : k) + 2 * pad, ldc = m + 3 * pad;
    std::vector<float> A = random_floats((size_t)lda * (at ? m : k)), B = random_floats((size_t)ldb * (bt ? k : n));
    std::vector<float> C = random_floats((size_t)ldc * n);
    Dev<float> dA(A), dB(B), dC(C);
    REQUIRE(cublasSgemm(h, ta, tb, m, n, k, &alpha, dA.p, lda, dB.p, ldb, &beta, dC.p, ldc) ==
            CUBLAS_STATUS_SUCCESS);
    std::vector<float> got = dC.host();
    Ref ref = reference(at, bt, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    CHECK(worst_error(got, ldc, ref) <= float32_bound(k));
    CHECK(padding_untouched(C, got, m, n, ldc));
}

TEST_CASE("cublasSgemm: every transpose combination, leading dimensions above the minimum") {
    Handle h;
    const cublasOperation_t ops[] = {N, T, CUBLAS_OP_C};  // C is T for real matrices
    for (cublasOperation_t ta : ops)
        for (cublasOperation_t tb : ops)
            for (int pad : {0, 3}) {
                CAPTURE(ta);
                CAPTURE(tb);
                CAPTURE(pad);
                check_sgemm(h, ta, tb, 37, 29, 45, 1.0f, 0.0f, pad);
                check_sgemm(h, ta, tb, 5, 70, 300, -0.75f, 0.5f, pad);  // k across a 256 block
            }
}

TEST_CASE("cublasSgemm: sizes that cross every block and tile edge") {
    Handle h;
    check_sgemm(h, T, N, 777, 401, 519, 1.0f, 1.0f, 1);  // D += the product, as the weight gradients do
    check_sgemm(h, N, T, 1, 1, 1, 2.0f, 0.0f, 0);
    check_sgemm(h, N, N, 17, 1, 600, 1.0f, 0.0f, 2);     // a matrix-vector product
}

TEST_CASE("cublasSgemm: beta == 0 never reads C, alpha == 0 reads neither A nor B") {
    Handle h;
    int m = 20, n = 12, k = 9, ldc = 24;
    std::vector<float> A = random_floats((size_t)m * k), B = random_floats((size_t)k * n);
    Dev<float> dA(A), dB(B), dC((size_t)ldc * n);
    std::vector<float> nan_c = dC.fill_nan().host();
    REQUIRE(std::isnan(nan_c[0]));
    float one = 1.0f, zero = 0.0f;
    REQUIRE(cublasSgemm(h, N, N, m, n, k, &one, dA.p, m, dB.p, k, &zero, dC.p, ldc) == CUBLAS_STATUS_SUCCESS);
    std::vector<float> got = dC.host();
    CHECK(worst_error(got, ldc, reference(false, false, m, n, k, 1.0, A, m, B, k, 0.0, nan_c, ldc)) <=
          float32_bound(k));
    CHECK(padding_untouched(nan_c, got, m, n, ldc));

    // alpha == 0: C = beta·C, as reference BLAS defines it; A and B may hold NaN
    Dev<float> nanA((size_t)m * k), nanB((size_t)k * n);
    nanA.fill_nan(), nanB.fill_nan();
    std::vector<float> C = random_floats((size_t)ldc * n);
    Dev<float> dC2(C);
    float beta = -2.0f;
    REQUIRE(cublasSgemm(h, N, N, m, n, k, &zero, nanA.p, m, nanB.p, k, &beta, dC2.p, ldc) ==
            CUBLAS_STATUS_SUCCESS);
    got = dC2.host();
    bool scaled = true;  // -2·c is exact in float
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) scaled = scaled && got[(size_t)(i + j * ldc)] == -2.0f * C[(size_t)(i + j * ldc)];
    CHECK(scaled);

    // k == 0: the product is empty, C = beta·C
    Dev<float> dC3(C);
    REQUIRE(cublasSgemm(h, N, N, m, n, 0, &one, nanA.p, m, nanB.p, 1, &beta, dC3.p, ldc) == CUBLAS_STATUS_SUCCESS);
    CHECK(dC3.host() == got);
}

TEST_CASE("cublasSgemm: alpha and beta from device memory in device pointer mode") {
    Handle h;
    int m = 16, n = 8, k = 5;
    std::vector<float> A = random_floats((size_t)m * k), B = random_floats((size_t)k * n), C = random_floats((size_t)m * n);
    Dev<float> dA(A), dB(B), dC(C), scalars(std::vector<float>{1.5f, -0.25f});
    REQUIRE(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasSgemm(h, N, N, m, n, k, scalars.p, dA.p, m, dB.p, k, scalars.p + 1, dC.p, m) ==
            CUBLAS_STATUS_SUCCESS);
    CHECK(worst_error(dC.host(), m, reference(false, false, m, n, k, 1.5, A, m, B, k, -0.25, C, m)) <=
          float32_bound(k));
    // a host pointer for alpha in device mode: a GPU would fault reading it
    float host_alpha = 1.0f;
    std::string err = capture_stderr([&] {
        CHECK(cublasSgemm(h, N, N, m, n, k, &host_alpha, dA.p, m, dB.p, k, scalars.p + 1, dC.p, m) ==
              CUBLAS_STATUS_EXECUTION_FAILED);
    });
    CHECK(err.find("cublasSgemm: alpha") != std::string::npos);
}

TEST_CASE("cublasSgemmStridedBatched: each batch at its stride, A shared with stride 0") {
    Handle h;
    int m = 23, n = 17, k = 31, batch = 5, lda = k + 2, ldb = k + 1, ldc = m + 4;  // A transposed
    long long sa = 0, sb = (long long)ldb * n + 7, sc = (long long)ldc * n + 3;
    std::vector<float> A = random_floats((size_t)lda * m), B = random_floats((size_t)(sb * batch));
    std::vector<float> C = random_floats((size_t)(sc * batch));
    Dev<float> dA(A), dB(B), dC(C);
    float alpha = 0.5f, beta = 2.0f;
    REQUIRE(cublasSgemmStridedBatched(h, T, N, m, n, k, &alpha, dA.p, lda, sa, dB.p, ldb, sb, &beta, dC.p, ldc, sc,
                                      batch) == CUBLAS_STATUS_SUCCESS);
    std::vector<float> got = dC.host();
    for (int b = 0; b < batch; b++) {
        CAPTURE(b);
        auto slice = [](const std::vector<float>& v, long long start, long long len) {
            return std::vector<float>(v.begin() + start, v.begin() + start + len);
        };
        std::vector<float> Bb = slice(B, b * sb, sb), Cb = slice(C, b * sc, sc), got_b = slice(got, b * sc, sc);
        Ref ref = reference(true, false, m, n, k, alpha, A, lda, Bb, ldb, beta, Cb, ldc);
        CHECK(worst_error(got_b, ldc, ref) <= float32_bound(k));
        CHECK(padding_untouched(Cb, got_b, m, n, ldc));  // and the gap before the next batch
    }
    // batchCount == 0 does nothing
    CHECK(cublasSgemmStridedBatched(h, T, N, m, n, k, &alpha, dA.p, lda, sa, dB.p, ldb, sb, &beta, dC.p, ldc, sc,
                                    0) == CUBLAS_STATUS_SUCCESS);
    CHECK(dC.host() == got);
}

// ----------------------------------------------------------------------------
// Argument checks, and memory a GPU could not check

TEST_CASE("documented argument checks return the documented status and leave C alone") {
    Handle h;
    int m = 8, n = 6, k = 4;
    std::vector<float> C = random_floats((size_t)m * n);
    Dev<float> dA((size_t)m * k), dB((size_t)k * n), dC(C);
    float one = 1.0f;
    auto sgemm = [&](cublasHandle_t hd, cublasOperation_t ta, cublasOperation_t tb, int mm, int nn, int kk, int lda,
                     int ldb, int ldc, const float* alpha = nullptr) {
        return cublasSgemm(hd, ta, tb, mm, nn, kk, alpha ? alpha : &one, dA.p, lda, dB.p, ldb, &one, dC.p, ldc);
    };
    CHECK(sgemm(nullptr, N, N, m, n, k, m, k, m) == CUBLAS_STATUS_NOT_INITIALIZED);
    CHECK(sgemm(h, N, N, -1, n, k, m, k, m) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(sgemm(h, N, N, m, -1, k, m, k, m) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(sgemm(h, N, N, m, n, -1, m, k, m) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(sgemm(h, N, N, m, n, k, m - 1, k, m) == CUBLAS_STATUS_INVALID_VALUE);  // lda < m
    CHECK(sgemm(h, T, N, m, n, k, k - 1, k, m) == CUBLAS_STATUS_INVALID_VALUE);  // lda < k
    CHECK(sgemm(h, N, N, m, n, k, m, k - 1, m) == CUBLAS_STATUS_INVALID_VALUE);  // ldb < k
    CHECK(sgemm(h, N, T, m, n, k, m, n - 1, m) == CUBLAS_STATUS_INVALID_VALUE);  // ldb < n
    CHECK(sgemm(h, N, N, m, n, k, m, k, m - 1) == CUBLAS_STATUS_INVALID_VALUE);  // ldc < m
    CHECK(sgemm(h, N, N, 0, n, k, 0, k, 0) == CUBLAS_STATUS_INVALID_VALUE);      // ld ≥ 1 even when m = 0
    CHECK(sgemm(h, CUBLAS_OP_CONJG, N, m, n, k, m, k, m) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(cublasSgemm(h, N, N, m, n, k, nullptr, dA.p, m, dB.p, k, &one, dC.p, m) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(cublasSgemmStridedBatched(h, N, N, m, n, k, &one, dA.p, m, 0, dB.p, k, 0, &one, dC.p, m, 0, -1) ==
          CUBLAS_STATUS_INVALID_VALUE);
    auto ex = [&](cudaDataType a, cudaDataType b, cudaDataType c, cublasComputeType_t compute,
                  cublasGemmAlgo_t algo = CUBLAS_GEMM_DEFAULT) {
        return cublasGemmEx(h, N, N, m, n, k, &one, dA.p, a, m, dB.p, b, k, &one, dC.p, c, m, compute, algo);
    };
    CHECK(ex(CUDA_R_16BF, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_NOT_SUPPORTED);  // A ≠ B
    CHECK(ex(CUDA_R_16F, CUDA_R_16F, CUDA_R_16BF, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(ex(CUDA_R_32F, CUDA_R_32F, CUDA_R_16BF, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(ex(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32) == CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(ex(CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F) == CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(ex(CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, (cublasGemmAlgo_t)50) ==
          CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(dC.host() == C);  // every rejected call left C as it was
    CHECK(ex(CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP) ==
          CUBLAS_STATUS_SUCCESS);
}

TEST_CASE("a footprint outside its allocation fails the call, naming the call and the operand") {
    Handle h;
    int m = 8, n = 4, k = 8;
    float one = 1.0f;
    Dev<float> A_short((size_t)m * k - 1), B((size_t)k * n), C((size_t)m * n), A((size_t)m * k);
    std::string err = capture_stderr([&] {
        CHECK(cublasSgemm(h, N, N, m, n, k, &one, A_short.p, m, B.p, k, &one, C.p, m) ==
              CUBLAS_STATUS_EXECUTION_FAILED);
    });
    CHECK(err.find("cublasSgemm: A") != std::string::npos);
    CHECK(err.find("4 bytes past the end") != std::string::npos);

    err = capture_stderr([&] {  // ldc spans more than C's allocation
        CHECK(cublasSgemm(h, N, N, m, n, k, &one, A.p, m, B.p, k, &one, C.p, m + 1) ==
              CUBLAS_STATUS_EXECUTION_FAILED);
    });
    CHECK(err.find("cublasSgemm: C") != std::string::npos);

    err = capture_stderr([&] {  // the second batch of B is past its end
        CHECK(cublasSgemmStridedBatched(h, N, N, m, n, k, &one, A.p, m, 0, B.p, k, (long long)k * n, &one, C.p, m,
                                        0, 2) == CUBLAS_STATUS_EXECUTION_FAILED);
    });
    CHECK(err.find("cublasSgemmStridedBatched: B") != std::string::npos);

    std::vector<float> host_B((size_t)k * n, 1.0f);  // host memory: a GPU cannot read it
    err = capture_stderr([&] {
        CHECK(cublasSgemm(h, N, N, m, n, k, &one, A.p, m, host_B.data(), k, &one, C.p, m) ==
              CUBLAS_STATUS_EXECUTION_FAILED);
    });
    CHECK(err.find("not device memory") != std::string::npos);
}

// ----------------------------------------------------------------------------
// cublasGemmEx: types and math modes

TEST_CASE("cublasGemmEx: every supported type combination against float64") {
    Handle h;
    int m = 37, n = 29, k = 45, lda = k + 1, ldb = k + 2, ldc = m + 3;  // A transposed, B not
    std::vector<float> A = grid_floats((size_t)lda * m), B = grid_floats((size_t)ldb * n), C = grid_floats((size_t)ldc * n);
    float alpha = 0.5f, beta = -1.5f;
    Ref ref = reference(true, false, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    Dev<float> A32(A), B32(B);
    Dev<__nv_bfloat16> A16b(to_bf16(A)), B16b(to_bf16(B));
    Dev<__half> A16h(to_half(A)), B16h(to_half(B));
    struct Case {
        cudaDataType in, out;
    };
    for (Case c : {Case{CUDA_R_32F, CUDA_R_32F}, Case{CUDA_R_16BF, CUDA_R_16BF}, Case{CUDA_R_16BF, CUDA_R_32F},
                   Case{CUDA_R_16F, CUDA_R_16F}, Case{CUDA_R_16F, CUDA_R_32F}}) {
        CAPTURE(c.in);
        CAPTURE(c.out);
        const void* dA = c.in == CUDA_R_32F ? (const void*)A32.p : c.in == CUDA_R_16BF ? (const void*)A16b.p : A16h.p;
        const void* dB = c.in == CUDA_R_32F ? (const void*)B32.p : c.in == CUDA_R_16BF ? (const void*)B16b.p : B16h.p;
        std::vector<float> got;
        if (c.out == CUDA_R_32F) {
            Dev<float> dC(C);
            REQUIRE(cublasGemmEx(h, T, N, m, n, k, &alpha, dA, c.in, lda, dB, c.in, ldb, &beta, dC.p, c.out, ldc,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
            got = dC.host();
            // The grid inputs make every float32 operation exact (see grid_floats): no tolerance.
            CHECK(worst_error(got, ldc, ref) == 0.0);
        } else {
            bool bf = c.out == CUDA_R_16BF;
            Dev<__nv_bfloat16> dCb(to_bf16(C));
            Dev<__half> dCh(to_half(C));
            void* dC = bf ? (void*)dCb.p : (void*)dCh.p;
            REQUIRE(cublasGemmEx(h, T, N, m, n, k, &alpha, dA, c.in, lda, dB, c.in, ldb, &beta, dC, c.out, ldc,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
            if (bf)
                for (__nv_bfloat16 x : dCb.host()) got.push_back(__bfloat162float(x));
            else
                for (__half x : dCh.host()) got.push_back(__half2float(x));
            // The float32 result is exact; one rounding to the output type remains: at most
            // half a unit in the last place, 2^-8 of the value for bf16 (8 significant bits),
            // 2^-11 for fp16 (11). Relative to |value| (the ref's scale would be looser).
            double u = bf ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11), worst = 0;
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) {
                    double e = std::fabs(got[(size_t)(i + j * ldc)] - ref.at(i, j));
                    worst = std::isfinite(e) ? std::max(worst, e / std::max(std::fabs(ref.at(i, j)), 1e-30)) : INFINITY;
                }
            CHECK(worst <= u);
            CHECK(worst > 0);  // and the output really is rounded (the values need more bits)
        }
    }
}

TEST_CASE("cublasGemmStridedBatchedEx: bf16 batches, float output") {
    Handle h;
    int m = 19, n = 21, k = 64, batch = 3;
    long long sa = (long long)m * k, sb = (long long)k * n + 5, sc = (long long)m * n;
    std::vector<float> A = grid_floats((size_t)(sa * batch)), B = grid_floats((size_t)(sb * batch));
    Dev<__nv_bfloat16> dA(to_bf16(A)), dB(to_bf16(B));
    Dev<float> dC((size_t)(sc * batch));
    float one = 1.0f, zero = 0.0f;
    REQUIRE(cublasGemmStridedBatchedEx(h, N, N, m, n, k, &one, dA.p, CUDA_R_16BF, m, sa, dB.p, CUDA_R_16BF, k, sb,
                                       &zero, dC.p, CUDA_R_32F, m, sc, batch, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
    std::vector<float> got = dC.host();
    for (int b = 0; b < batch; b++) {
        std::vector<float> Ab(A.begin() + b * sa, A.begin() + (b + 1) * sa), Bb(B.begin() + b * sb, B.end());
        std::vector<float> gb(got.begin() + b * sc, got.begin() + (b + 1) * sc);
        CHECK(worst_error(gb, m, reference(false, false, m, n, k, 1.0, Ab, m, Bb, k, 0.0, gb, m)) == 0.0);  // exact
    }
}

TEST_CASE("TF32 math rounds float inputs to nearest, ties away from zero; default math does not round") {
    Handle h;
    // Ties: 1 + 2^-11 lies halfway between the TF32 neighbours 1 and 1 + 2^-10. Away from zero
    // gives ±(1 + 2^-10); to-even would give ±1.
    float tie = 1.0f + std::ldexp(1.0f, -11), one = 1.0f, zero = 0.0f;
    Dev<float> a(std::vector<float>{tie, -tie}), b(std::vector<float>{1.0f}), c(2);
    REQUIRE(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasSgemm(h, N, N, 2, 1, 1, &one, a.p, 2, b.p, 1, &zero, c.p, 2) == CUBLAS_STATUS_SUCCESS);
    CHECK(c.host() == std::vector<float>{1.0f + std::ldexp(1.0f, -10), -(1.0f + std::ldexp(1.0f, -10))});

    // A short k, so that the rounding errors of a few products do not average out: relative
    // to Σ|terms|, TF32 rounding then leaves errors up to ~10^-3, float32 sums ~10^-7.
    int m = 64, n = 48, k = 8;
    std::vector<float> A = random_floats((size_t)m * k), B = random_floats((size_t)k * n);
    Dev<float> dA(A), dB(B), dC((size_t)m * n);
    Ref exact = reference(false, false, m, n, k, 1.0, A, m, B, k, 0.0, {}, m);
    Ref rounded = reference(false, false, m, n, k, 1.0, A, m, B, k, 0.0, {}, m, tf32);
    auto run = [&](cublasMath_t mode, cublasComputeType_t compute) {
        REQUIRE(cublasSetMathMode(h, mode) == CUBLAS_STATUS_SUCCESS);
        REQUIRE(cublasGemmEx(h, N, N, m, n, k, &one, dA.p, CUDA_R_32F, m, dB.p, CUDA_R_32F, k, &zero, dC.p,
                             CUDA_R_32F, m, compute, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
        return dC.host();
    };
    // TF32 through the handle's math mode, and through the compute type: the result is the
    // float32 sum of TF32-rounded products (float32_bound), and far from the unrounded one.
    for (std::vector<float> got : {run(CUBLAS_TF32_TENSOR_OP_MATH, CUBLAS_COMPUTE_32F),
                                   run(CUBLAS_DEFAULT_MATH, CUBLAS_COMPUTE_32F_FAST_TF32)}) {
        CHECK(worst_error(got, m, rounded) <= float32_bound(k));
        CHECK(worst_error(got, m, exact) > 1e-4);
    }
    // Default and pedantic math: only float32 accumulation error.
    for (std::vector<float> got : {run(CUBLAS_DEFAULT_MATH, CUBLAS_COMPUTE_32F),
                                   run(CUBLAS_TF32_TENSOR_OP_MATH, CUBLAS_COMPUTE_32F_PEDANTIC)}) {
        CHECK(worst_error(got, m, exact) <= float32_bound(k));
        CHECK(worst_error(got, m, rounded) > 1e-4);
    }
    // The fast bf16 and fp16 compute types round inputs to bf16 or fp16, to nearest even.
    CHECK(worst_error(run(CUBLAS_DEFAULT_MATH, CUBLAS_COMPUTE_32F_FAST_16BF), m,
                      reference(false, false, m, n, k, 1.0, A, m, B, k, 0.0, {}, m, bf16_round)) <= float32_bound(k));
    CHECK(worst_error(run(CUBLAS_DEFAULT_MATH, CUBLAS_COMPUTE_32F_FAST_16F), m,
                      reference(false, false, m, n, k, 1.0, A, m, B, k, 0.0, {}, m, fp16_round)) <= float32_bound(k));
    {  // cuBLASLt has no math mode: its compute type alone decides
        LtMatmul mm(N, N, CUDA_R_32F, CUDA_R_32F, m, n, k, m, k, m, m, CUBLAS_COMPUTE_32F_FAST_TF32);
        REQUIRE(mm.run(&one, dA.p, dB.p, &zero, nullptr, dC.p) == CUBLAS_STATUS_SUCCESS);
        CHECK(worst_error(dC.host(), m, rounded) <= float32_bound(k));
        LtMatmul plain(N, N, CUDA_R_32F, CUDA_R_32F, m, n, k, m, k, m, m, CUBLAS_COMPUTE_32F);
        REQUIRE(plain.run(&one, dA.p, dB.p, &zero, nullptr, dC.p) == CUBLAS_STATUS_SUCCESS);
        CHECK(worst_error(dC.host(), m, exact) <= float32_bound(k));
    }
    // The legacy form with a cudaDataType compute type (cublas_api.h maps it to COMPUTE_32F,
    // or _PEDANTIC under pedantic math): TF32 math still applies.
    REQUIRE(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasGemmEx(h, N, N, m, n, k, &one, dA.p, CUDA_R_32F, m, dB.p, CUDA_R_32F, k, &zero, dC.p, CUDA_R_32F,
                         m, CUDA_R_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
    CHECK(worst_error(dC.host(), m, rounded) <= float32_bound(k));
}

TEST_CASE("handle settings: stream, math mode, pointer mode, workspace, status strings") {
    Handle h;
    cudaStream_t s, got;
    REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
    CHECK(cublasSetStream(h, s) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasGetStream(h, &got) == CUBLAS_STATUS_SUCCESS);
    CHECK(got == s);
    cublasMath_t mode;
    CHECK(cublasGetMathMode(h, &mode) == CUBLAS_STATUS_SUCCESS);
    CHECK(mode == CUBLAS_DEFAULT_MATH);
    CHECK(cublasSetMathMode(h, (cublasMath_t)(CUBLAS_TF32_TENSOR_OP_MATH |
                                              CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)) ==
          CUBLAS_STATUS_SUCCESS);
    CHECK(cublasSetMathMode(h, (cublasMath_t)5) == CUBLAS_STATUS_INVALID_VALUE);
    cublasPointerMode_t pm;
    CHECK(cublasGetPointerMode(h, &pm) == CUBLAS_STATUS_SUCCESS);
    CHECK(pm == CUBLAS_POINTER_MODE_HOST);
    CHECK(cublasSetPointerMode(h, (cublasPointerMode_t)2) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(cublasSetWorkspace(h, nullptr, 0) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasGetMathMode(nullptr, &mode) == CUBLAS_STATUS_NOT_INITIALIZED);
    CHECK(cublasDestroy(nullptr) == CUBLAS_STATUS_NOT_INITIALIZED);
    CHECK(std::string(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE)) == "CUBLAS_STATUS_INVALID_VALUE");
    CHECK(std::string(cublasGetStatusName(CUBLAS_STATUS_EXECUTION_FAILED)) == "CUBLAS_STATUS_EXECUTION_FAILED");
    CHECK(std::string(cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED)) !=
          cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE));  // a sentence of its own for each
    cudaStreamDestroy(s);
}

// ----------------------------------------------------------------------------
// cuBLASLt

// Every epilogue on one shape, D apart from C (with another leading dimension), against
// float64 computed from the cuBLASLt documentation's formulas.
static void check_epilogues(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k) {
    const bool at = ta != N, bt = tb != N;
    const int64_t lda = (at ? k : m) + 1, ldb = (bt ? n : k) + 3, ldc = m + 2, ldd = m + 5;
    const int64_t ld_aux = (m + 7) / 8 * 8 + 8;  // a multiple of 8, as documented
    std::vector<float> A = random_floats((size_t)(lda * (at ? m : k))), B = random_floats((size_t)(ldb * (bt ? k : n)));
    std::vector<float> C = random_floats((size_t)(ldc * n)), bias = random_floats((size_t)std::max(m, n));
    std::vector<float> aux_in = random_floats((size_t)(ld_aux * n));
    for (float& x : aux_in) x *= 3.0f;  // GELU inputs over the interesting range
    const float alpha = 0.75f, beta = 0.5f;
    Ref ref = reference(at, bt, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    Dev<float> dA(A), dB(B), dC(C);

    struct Case {
        cublasLtEpilogue_t epilogue;
        bool bias, aux_out, aux_in, relu, gelu, dgelu, bgrad, bgrada, bgradb;
    };
    const Case cases[] = {
        {CUBLASLT_EPILOGUE_DEFAULT, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {CUBLASLT_EPILOGUE_RELU, 0, 0, 0, 1, 0, 0, 0, 0, 0},
        {CUBLASLT_EPILOGUE_RELU_BIAS, 1, 0, 0, 1, 0, 0, 0, 0, 0},
        {CUBLASLT_EPILOGUE_BIAS, 1, 0, 0, 0, 0, 0, 0, 0, 0},
        {CUBLASLT_EPILOGUE_GELU, 0, 0, 0, 0, 1, 0, 0, 0, 0},
        {CUBLASLT_EPILOGUE_GELU_BIAS, 1, 0, 0, 0, 1, 0, 0, 0, 0},
        {CUBLASLT_EPILOGUE_GELU_AUX, 0, 1, 0, 0, 1, 0, 0, 0, 0},
        {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, 1, 1, 0, 0, 1, 0, 0, 0, 0},
        {CUBLASLT_EPILOGUE_DGELU, 0, 0, 1, 0, 0, 1, 0, 0, 0},
        {CUBLASLT_EPILOGUE_DGELU_BGRAD, 0, 0, 1, 0, 0, 1, 1, 0, 0},
        {CUBLASLT_EPILOGUE_BGRADA, 0, 0, 0, 0, 0, 0, 0, 1, 0},
        {CUBLASLT_EPILOGUE_BGRADB, 0, 0, 0, 0, 0, 0, 0, 0, 1},
    };
    for (const Case& c : cases) {
        CAPTURE(c.epilogue);
        LtMatmul mm(ta, tb, CUDA_R_32F, CUDA_R_32F, m, n, k, lda, ldb, ldc, ldd);
        mm.set(CUBLASLT_MATMUL_DESC_EPILOGUE, c.epilogue);
        Dev<float> dD((size_t)(ldd * n)), dBias(c.bias ? bias : std::vector<float>(bias.size()));
        Dev<float> dAux(c.aux_in ? aux_in : std::vector<float>((size_t)(ld_aux * n)));
        if (c.bias || c.bgrad || c.bgrada || c.bgradb) mm.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, (void*)dBias.p);
        if (c.aux_in || c.aux_out) {
            mm.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, (void*)dAux.p);
            mm.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ld_aux);
        }
        REQUIRE(mm.run(&alpha, dA.p, dB.p, &beta, dC.p, dD.p) == CUBLAS_STATUS_SUCCESS);
        std::vector<float> D = dD.host(), aux = dAux.host(), bias_out = dBias.host();

        // The float32 sums are off by at most float32_bound(k)·Σ|terms| (2·10^-6 relative
        // here); the epilogue's float32 tanh and products add a few units in the last place.
        // Tolerance: 10^-5 of (Σ|terms| + 1), since values and factors are of order 1 to 10.
        const double tol = 1e-5;
        double worst_d = 0, worst_aux = 0, worst_bias = 0;
        auto track = [](double& worst, double got, double want, double scale) {
            double e = std::fabs(got - want) / scale;
            worst = std::isfinite(e) ? std::max(worst, e) : INFINITY;
        };
        std::vector<double> row_sum((size_t)m, 0.0), row_scale((size_t)m, 0.0);
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < m; i++) {
                double v = ref.at(i, j), scale = ref.scale[(size_t)(i + j * m)] + 1;
                if (c.bias) v += bias[(size_t)i], scale += std::fabs(bias[(size_t)i]);
                if (c.aux_out) track(worst_aux, aux[(size_t)(i + j * ld_aux)], v, scale);
                if (c.relu) v = std::max(v, 0.0);
                if (c.gelu) v = gelu(v);
                if (c.dgelu) v *= gelu_grad(aux_in[(size_t)(i + j * ld_aux)]);
                track(worst_d, D[(size_t)(i + j * ldd)], v, scale);
                row_sum[(size_t)i] += v, row_scale[(size_t)i] += scale;
            }
        CHECK(worst_d <= tol);
        CHECK(worst_aux <= tol);
        if (c.bgrad)  // the bias gradient: D's rows summed, "bias vector length = D rows"
            for (int64_t i = 0; i < m; i++) track(worst_bias, bias_out[(size_t)i], row_sum[(size_t)i], row_scale[(size_t)i]);
        if (c.bgrada || c.bgradb) {  // Σ over k of op(A)'s rows (m of them) or op(B)'s columns (n)
            int64_t len = c.bgrada ? m : n;
            for (int64_t r = 0; r < len; r++) {
                double sum = 0, mag = 0;
                for (int64_t p = 0; p < k; p++) {
                    double x = c.bgrada ? op_at(A, at, lda, r, p) : op_at(B, bt, ldb, p, r);
                    sum += x, mag += std::fabs(x);
                }
                track(worst_bias, bias_out[(size_t)r], sum, mag + 1);
            }
        }
        CHECK(worst_bias <= tol);
        CHECK(dC.host() == C);  // C is only read
    }
}

TEST_CASE("cublasLtMatmul: every epilogue against float64") {
    SUBCASE("A transposed") { check_epilogues(T, N, 40, 24, 33); }
    SUBCASE("B transposed") { check_epilogues(N, T, 40, 24, 33); }
    SUBCASE("over several column tiles") { check_epilogues(N, N, 50, 700, 20); }
}

TEST_CASE("cublasLtMatmul: bf16 in and out with a bf16 bias; in place; batched; heuristics") {
    const int64_t m = 24, n = 16, k = 40;
    std::vector<float> A = grid_floats((size_t)(m * k)), B = grid_floats((size_t)(k * n)), C = grid_floats((size_t)(m * n));
    std::vector<float> bias = grid_floats((size_t)m);
    Dev<__nv_bfloat16> dA(to_bf16(A)), dB(to_bf16(B)), dC(to_bf16(C)), dBias(to_bf16(bias));
    const float one = 1.0f;
    {
        LtMatmul mm(N, N, CUDA_R_16BF, CUDA_R_16BF, m, n, k, m, k, m, m);
        mm.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
        mm.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, (void*)dBias.p);
        cublasLtMatmulPreference_t pref = nullptr;
        REQUIRE(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
        uint64_t workspace = 32 << 20;
        CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                   sizeof workspace) == CUBLAS_STATUS_SUCCESS);
        cublasLtMatmulHeuristicResult_t result;
        int count = 0;
        CHECK(cublasLtMatmulAlgoGetHeuristic(mm.lt, mm.op, mm.a, mm.b, mm.c, mm.d, pref, 1, &result, &count) ==
              CUBLAS_STATUS_SUCCESS);
        CHECK(count == 1);
        CHECK(result.state == CUBLAS_STATUS_SUCCESS);
        cublasLtMatmulPreferenceDestroy(pref);
        // in place: D is C
        REQUIRE(cublasLtMatmul(mm.lt, mm.op, &one, dA.p, mm.a, dB.p, mm.b, &one, dC.p, mm.c, dC.p, mm.d,
                               &result.algo, nullptr, 0, nullptr) == CUBLAS_STATUS_SUCCESS);
        Ref ref = reference(false, false, m, n, k, 1.0, A, m, B, k, 1.0, C, m);
        std::vector<__nv_bfloat16> got = dC.host();
        double worst = 0;  // exact float32 sum (grid inputs) rounded once to bf16: ≤ 2^-8 relative
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < m; i++) {
                double want = ref.at(i, j) + bias[(size_t)i];
                double e = std::fabs(__bfloat162float(got[(size_t)(i + j * m)]) - want) / std::max(std::fabs(want), 1e-30);
                worst = std::isfinite(e) ? std::max(worst, e) : INFINITY;
            }
        CHECK(worst <= std::ldexp(1.0, -8));
    }
    {  // a strided batch of 3 float products with the default epilogue
        const int batch = 3;
        std::vector<float> A3 = random_floats((size_t)(m * k * batch)), B3 = random_floats((size_t)(k * n * batch));
        Dev<float> dA3(A3), dB3(B3), dD3((size_t)(m * n * batch));
        LtMatmul mm(N, N, CUDA_R_32F, CUDA_R_32F, m, n, k, m, k, m, m);
        int64_t strides[] = {m * k, k * n, m * n, m * n};
        cublasLtMatrixLayout_t layouts[] = {mm.a, mm.b, mm.c, mm.d};
        for (int i = 0; i < 4; i++) {
            REQUIRE(cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                     sizeof batch) == CUBLAS_STATUS_SUCCESS);
            REQUIRE(cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                     &strides[i], sizeof strides[i]) == CUBLAS_STATUS_SUCCESS);
        }
        const float zero = 0.0f;
        REQUIRE(mm.run(&one, dA3.p, dB3.p, &zero, nullptr, dD3.p) == CUBLAS_STATUS_SUCCESS);  // beta = 0: no C
        std::vector<float> D = dD3.host();
        for (int b = 0; b < batch; b++) {
            std::vector<float> Ab(A3.begin() + b * m * k, A3.end()), Bb(B3.begin() + b * k * n, B3.end());
            std::vector<float> Db(D.begin() + b * m * n, D.begin() + (b + 1) * m * n);
            CHECK(worst_error(Db, m, reference(false, false, m, n, k, 1.0, Ab, m, Bb, k, 0.0, {}, m)) <=
                  float32_bound(k));
        }
    }
}

// The heuristic offers three algorithms, as a GPU's offers several: k in 1, 2 or 3 slices,
// each one chain, added in order. Each is within float32's bound of float64; the first
// gives the bits of a call without an algorithm (the one chain); the others other bits (the
// trainer's choice among them must show). CPU_CUDA_LT_REFUSE_EPILOGUE names epilogues the
// heuristic offers nothing for and cublasLtMatmul refuses; others are offered as before.
TEST_CASE("cublasLtMatmul: the heuristic's three algorithms (k in 1, 2, 3 slices); refused epilogues") {
    const int64_t m = 40, n = 24, k = 333;
    std::vector<float> A = random_floats((size_t)(m * k)), B = random_floats((size_t)(k * n));
    Dev<float> dA(A), dB(B), dD((size_t)(m * n));
    const float one = 1.0f, zero = 0.0f;
    LtMatmul mm(N, N, CUDA_R_32F, CUDA_R_32F, m, n, k, m, k, m, m);
    cublasLtMatmulPreference_t pref = nullptr;
    REQUIRE(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t results[8];
    int count = 0;
    const long long queries = cpu_cuda::blas::heuristic_queries();
    REQUIRE(cublasLtMatmulAlgoGetHeuristic(mm.lt, mm.op, mm.a, mm.b, mm.c, mm.d, pref, 8, results, &count) ==
            CUBLAS_STATUS_SUCCESS);
    CHECK(cpu_cuda::blas::heuristic_queries() == queries + 1);
    REQUIRE(count == 3);
    REQUIRE(mm.run(&one, dA.p, dB.p, &zero, nullptr, dD.p) == CUBLAS_STATUS_SUCCESS);  // no algorithm: one chain
    const std::vector<float> plain = dD.host();
    const Ref ref = reference(false, false, m, n, k, 1.0, A, m, B, k, 0.0, {}, m);
    std::vector<std::vector<float>> got;
    for (int i = 0; i < count; i++) {
        CAPTURE(i);
        CHECK(results[i].state == CUBLAS_STATUS_SUCCESS);
        REQUIRE(cublasLtMatmul(mm.lt, mm.op, &one, dA.p, mm.a, dB.p, mm.b, &zero, dD.p, mm.c, dD.p, mm.d,
                               &results[i].algo, nullptr, 0, nullptr) == CUBLAS_STATUS_SUCCESS);
        got.push_back(dD.host());
        CHECK(worst_error(got.back(), m, ref) <= float32_bound(k));
    }
    CHECK(got[0] == plain);
    CHECK(got[1] != got[0]);
    CHECK(got[2] != got[0]);
    CHECK(got[2] != got[1]);
    count = 1;  // fewer asked for: fewer given
    REQUIRE(cublasLtMatmulAlgoGetHeuristic(mm.lt, mm.op, mm.a, mm.b, mm.c, mm.d, pref, 1, results, &count) ==
            CUBLAS_STATUS_SUCCESS);
    CHECK(count == 1);

    setenv("CPU_CUDA_LT_REFUSE_EPILOGUE", "bgradb,default", 1);
    count = -1;
    CHECK(cublasLtMatmulAlgoGetHeuristic(mm.lt, mm.op, mm.a, mm.b, mm.c, mm.d, pref, 8, results, &count) ==
          CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(count == 0);
    CHECK(cublasLtMatmul(mm.lt, mm.op, &one, dA.p, mm.a, dB.p, mm.b, &zero, dD.p, mm.c, dD.p, mm.d, &results[0].algo,
                         nullptr, 0, nullptr) == CUBLAS_STATUS_NOT_SUPPORTED);
    setenv("CPU_CUDA_LT_REFUSE_EPILOGUE", "bgradb", 1);  // DEFAULT is offered again
    CHECK(cublasLtMatmulAlgoGetHeuristic(mm.lt, mm.op, mm.a, mm.b, mm.c, mm.d, pref, 8, results, &count) ==
          CUBLAS_STATUS_SUCCESS);
    CHECK(count == 3);
    unsetenv("CPU_CUDA_LT_REFUSE_EPILOGUE");
    cublasLtMatmulPreferenceDestroy(pref);
}

// cuBLASLt's rule (cublasLt.h): the heuristic's answer "doesn't fully guarantee algo will run
// (will fail if e.g. buffers are not correctly aligned)"; CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*
// default to 256 bytes, and a smaller value admits only algorithms that work at that alignment.
// A slice of a buffer at 16 bytes (8 bf16) in: refused under the default, run under a
// preference of 16, with the same result as from an aligned copy. (The shifted buffers are a
// multiple of 256 bytes long, so that the runtime starts them on 256 bytes, as a GPU would.)
TEST_CASE("cublasLtMatmul: an algorithm refuses buffers less aligned than its preference (default 256)") {
    const int64_t m = 24, n = 16, k = 40, shift = 8;  // 8 bf16: 16 bytes
    std::vector<float> A = grid_floats((size_t)(m * k)), B = grid_floats((size_t)(k * n));
    std::vector<float> A_shifted(shift, 0.0f);
    A_shifted.insert(A_shifted.end(), A.begin(), A.end());
    A_shifted.resize(1024, 0.0f);  // 2048 bytes
    Dev<__nv_bfloat16> dA(to_bf16(A)), dA_shifted(to_bf16(A_shifted)), dB(to_bf16(B));
    Dev<__nv_bfloat16> dD(512);  // 1024 bytes, for m·n + shift
    const __nv_bfloat16* A16 = dA_shifted.p + shift;  // A again, 16 bytes past a 256-byte boundary
    const float one = 1.0f, zero = 0.0f;
    LtMatmul mm(N, N, CUDA_R_16BF, CUDA_R_16BF, m, n, k, m, k, m, m);
    auto algo_for = [&](uint32_t alignment_a) {
        cublasLtMatmulPreference_t pref = nullptr;
        REQUIRE(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
        if (alignment_a)
            REQUIRE(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                         &alignment_a, sizeof alignment_a) == CUBLAS_STATUS_SUCCESS);
        cublasLtMatmulHeuristicResult_t result;
        int count = 0;
        REQUIRE(cublasLtMatmulAlgoGetHeuristic(mm.lt, mm.op, mm.a, mm.b, mm.c, mm.d, pref, 1, &result, &count) ==
                CUBLAS_STATUS_SUCCESS);
        REQUIRE(count == 1);
        cublasLtMatmulPreferenceDestroy(pref);
        return result.algo;
    };
    auto run = [&](const cublasLtMatmulAlgo_t* algo, const void* a, void* d) {
        return cublasLtMatmul(mm.lt, mm.op, &one, a, mm.a, dB.p, mm.b, &zero, d, mm.c, d, mm.d, algo, nullptr, 0,
                              nullptr);
    };
    cublasLtMatmulAlgo_t by_default = algo_for(0), at_16 = algo_for(16);
    REQUIRE(run(&by_default, dA.p, dD.p) == CUBLAS_STATUS_SUCCESS);  // every buffer at its allocation's start
    std::vector<__nv_bfloat16> aligned = dD.host();
    std::string err = capture_stderr([&] { CHECK(run(&by_default, A16, dD.p) == CUBLAS_STATUS_NOT_SUPPORTED); });
    CHECK(err.find("matrix A is 16-byte aligned; its algorithm was chosen for 256") != std::string::npos);
    err = capture_stderr([&] { CHECK(run(&at_16, dA.p, dD.p + shift) == CUBLAS_STATUS_NOT_SUPPORTED); });
    CHECK(err.find("matrix C is 16-byte aligned") != std::string::npos);  // C (= D) still wants 256
    dD.fill_nan();
    REQUIRE(run(&at_16, A16, dD.p) == CUBLAS_STATUS_SUCCESS);
    CHECK(memcmp(dD.host().data(), aligned.data(), (size_t)(m * n) * sizeof(__nv_bfloat16)) == 0);
    dD.fill_nan();  // without an algorithm, cuBLASLt picks one for these very pointers
    REQUIRE(run(nullptr, A16, dD.p + shift) == CUBLAS_STATUS_SUCCESS);
    CHECK(memcmp(dD.host().data() + shift, aligned.data(), (size_t)(m * n) * sizeof(__nv_bfloat16)) == 0);
}

TEST_CASE("cuBLASLt descriptor and argument checks") {
    const int64_t m = 16, n = 8, k = 8;
    Dev<float> dA((size_t)(m * k)), dB((size_t)(k * n)), dC((size_t)(m * n)), dD((size_t)(m * n));
    const float one = 1.0f;
    LtMatmul mm(N, N, CUDA_R_32F, CUDA_R_32F, m, n, k, m, k, m, m);

    int32_t row_major = CUBLASLT_ORDER_ROW;  // only column-major layouts are emulated
    CHECK(cublasLtMatrixLayoutSetAttribute(mm.a, CUBLASLT_MATRIX_LAYOUT_ORDER, &row_major, sizeof row_major) ==
          CUBLAS_STATUS_NOT_SUPPORTED);
    int32_t col_major = CUBLASLT_ORDER_COL;
    CHECK(cublasLtMatrixLayoutSetAttribute(mm.a, CUBLASLT_MATRIX_LAYOUT_ORDER, &col_major, sizeof col_major) ==
          CUBLAS_STATUS_SUCCESS);
    int64_t wrong_size = 0;  // an attribute's value must have its documented size
    CHECK(cublasLtMatmulDescSetAttribute(mm.op, CUBLASLT_MATMUL_DESC_TRANSA, &wrong_size, sizeof wrong_size) ==
          CUBLAS_STATUS_INVALID_VALUE);

    // attributes read back; size 0 asks for the size
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_GELU_AUX;
    mm.set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    cublasLtEpilogue_t read_back = CUBLASLT_EPILOGUE_DEFAULT;
    size_t written = 0;
    CHECK(cublasLtMatmulDescGetAttribute(mm.op, CUBLASLT_MATMUL_DESC_EPILOGUE, nullptr, 0, &written) ==
          CUBLAS_STATUS_SUCCESS);
    CHECK(written == sizeof read_back);
    CHECK(cublasLtMatmulDescGetAttribute(mm.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &read_back, sizeof read_back,
                                         &written) == CUBLAS_STATUS_SUCCESS);
    CHECK(read_back == epilogue);

    // GELU_AUX: the aux pointer is required, and its ld must be ≥ rows and a multiple of 8
    CHECK(mm.run(&one, dA.p, dB.p, &one, dC.p, dD.p) == CUBLAS_STATUS_INVALID_VALUE);
    Dev<float> aux((size_t)(24 * n));
    mm.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, (void*)aux.p);
    mm.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, (int64_t)20);
    CHECK(mm.run(&one, dA.p, dB.p, &one, dC.p, dD.p) == CUBLAS_STATUS_INVALID_VALUE);
    mm.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, (int64_t)24);
    CHECK(mm.run(&one, dA.p, dB.p, &one, dC.p, dD.p) == CUBLAS_STATUS_SUCCESS);
    mm.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, (int64_t)32);  // aux now spans past its allocation
    std::string err = capture_stderr(
        [&] { CHECK(mm.run(&one, dA.p, dB.p, &one, dC.p, dD.p) == CUBLAS_STATUS_EXECUTION_FAILED); });
    CHECK(err.find("cublasLtMatmul: aux") != std::string::npos);

    mm.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_RELU_AUX);  // a ReLU bit mask: not emulated
    CHECK(mm.run(&one, dA.p, dB.p, &one, dC.p, dD.p) == CUBLAS_STATUS_NOT_SUPPORTED);
    mm.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DEFAULT);
    CHECK(mm.run(&one, dA.p, dB.p, &one, dC.p, dD.p) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasLtMatmul(nullptr, mm.op, &one, dA.p, mm.a, dB.p, mm.b, &one, dC.p, mm.c, dD.p, mm.d, nullptr,
                         nullptr, 0, nullptr) == CUBLAS_STATUS_NOT_INITIALIZED);
    // in place with differing layouts is not allowed
    cublasLtMatrixLayout_t wide = nullptr;
    REQUIRE(cublasLtMatrixLayoutCreate(&wide, CUDA_R_32F, m, n, m + 8) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasLtMatmul(mm.lt, mm.op, &one, dA.p, mm.a, dB.p, mm.b, &one, dC.p, mm.c, dC.p, wide, nullptr, nullptr,
                         0, nullptr) == CUBLAS_STATUS_INVALID_VALUE);
    cublasLtMatrixLayoutDestroy(wide);

    // shapes must agree: op(A) with m rows and k columns
    LtMatmul bad(N, N, CUDA_R_32F, CUDA_R_32F, m, n, k, m, k, m, m);
    uint64_t rows = m + 1;
    REQUIRE(cublasLtMatrixLayoutSetAttribute(bad.a, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof rows) ==
            CUBLAS_STATUS_SUCCESS);
    CHECK(bad.run(&one, dA.p, dB.p, &one, dC.p, dD.p) == CUBLAS_STATUS_INVALID_VALUE);
    // float inputs with a bf16 output is not a documented combination
    LtMatmul mixed(N, N, CUDA_R_32F, CUDA_R_16BF, m, n, k, m, k, m, m);
    CHECK(mixed.run(&one, dA.p, dB.p, &one, dC.p, dD.p) == CUBLAS_STATUS_NOT_SUPPORTED);
}

// ----------------------------------------------------------------------------
// Determinism across thread counts

// FNV-1a over the bytes of some products' results, for comparing processes.
static uint64_t hash_bytes(uint64_t h, const void* p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
    return h;
}
static uint64_t products_hash() {
    std::mt19937 gen(7);  // its own inputs, so that the hash does not depend on which tests ran first
    std::uniform_real_distribution<float> u(-1, 1);
    auto values = [&](size_t n) {
        std::vector<float> v(n);
        for (float& x : v) x = u(gen);
        return v;
    };
    Handle h;
    uint64_t hash = 14695981039346656037ull;
    const float one = 1.0f, half = 0.5f;
    {
        int m = 700, n = 500, k = 600;
        Dev<float> A(values((size_t)k * m)), B(values((size_t)k * n)), C(values((size_t)m * n));
        REQUIRE(cublasSgemm(h, T, N, m, n, k, &one, A.p, k, B.p, k, &half, C.p, m) == CUBLAS_STATUS_SUCCESS);
        std::vector<float> r = C.host();
        hash = hash_bytes(hash, r.data(), r.size() * 4);
    }
    {
        int m = 300, n = 257, k = 513;
        Dev<__nv_bfloat16> A(to_bf16(values((size_t)m * k))), B(to_bf16(values((size_t)k * n))), C((size_t)m * n);
        const float zero = 0.0f;
        REQUIRE(cublasGemmEx(h, N, N, m, n, k, &one, A.p, CUDA_R_16BF, m, B.p, CUDA_R_16BF, k, &zero, C.p,
                             CUDA_R_16BF, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
        std::vector<__nv_bfloat16> r = C.host();
        hash = hash_bytes(hash, r.data(), r.size() * 2);
    }
    {  // the bias gradient sums across the tiles of D
        int64_t m = 300, n = 900, k = 200;
        const int64_t ld_aux = 304;  // ≥ m, a multiple of 8
        Dev<float> A(values((size_t)(m * k))), B(values((size_t)(k * n))), D((size_t)(m * n));
        Dev<float> aux(values((size_t)(ld_aux * n))), bias((size_t)m);
        LtMatmul mm(N, N, CUDA_R_32F, CUDA_R_32F, m, n, k, m, k, m, m);
        mm.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DGELU_BGRAD);
        mm.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, (void*)bias.p);
        mm.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, (void*)aux.p);
        mm.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ld_aux);
        const float zero = 0.0f;
        REQUIRE(mm.run(&one, A.p, B.p, &zero, nullptr, D.p) == CUBLAS_STATUS_SUCCESS);
        std::vector<float> r = D.host(), b = bias.host();
        hash = hash_bytes(hash_bytes(hash, r.data(), r.size() * 4), b.data(), b.size() * 4);
    }
    return hash;
}

// Run as a child of the test below, with a pool of another size: prints the hash.
TEST_CASE("products hash" * doctest::skip(getenv("CPU_CUBLAS_HASH_CHILD") == nullptr)) {
    printf("hash %016llx\n", (unsigned long long)products_hash());
}

TEST_CASE("results are bit-identical whatever the number of threads") {
    // Settings are read once per process, so other pool sizes run in child processes.
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    REQUIRE(len > 0);
    self[len] = 0;
    unsigned long long here = products_hash();
    for (int threads : {1, 3}) {
        CAPTURE(threads);
        std::string cmd = "CPU_CUBLAS_HASH_CHILD=1 CPU_CUDA_THREADS=" + std::to_string(threads) + " '" + self +
                          "' --test-case='products hash' 2>&1";
        FILE* child = popen(cmd.c_str(), "r");
        REQUIRE(child);
        unsigned long long theirs = 0;
        bool found = false;
        char line[512];
        while (fgets(line, sizeof line, child)) found = found || sscanf(line, "hash %llx", &theirs) == 1;
        CHECK(pclose(child) == 0);
        CHECK(found);
        CHECK(theirs == here);
    }
}
