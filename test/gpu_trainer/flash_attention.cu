// Tests of the fused causal attention (gpu/flash_attention.cuh), doctest, built like
// gpu_trainer/trainer.cu by nvcc or on the CPU runtime (make test/gpu_trainer/flash_attention_cpu and _fp32).
// Multi-head attention (KVH = NH, GPT-2's) and grouped-query attention (KVH < NH K/V heads,
// query head h reading K/V head h / (NH/KVH): Llama's) on all three paths: the tensor-core
// kernels, the scalar ones and the cuBLAS path.
//
// References, independent of the kernels under test: train.cpp's attention (the CPU
// trainer's, compiled in), the cuBLAS path (gpu/attention.cuh), and the log-sum-exp of each
// row computed here in float64. Outputs start as NaN bytes, so an element a kernel forgot
// fails every check. make test runs the suite in both precisions, and the bf16 one's race
// case under CPU_CUDA_RACECHECK=1. In the bf16 build the fused path is the tensor-core one
// (gpu/flash_attention_mma.cuh), checked here against train.cpp, float64 and the scalar
// kernels of the same algorithm (flash_attention_*(..., scalar = true)).
//
// The bf16 build's forward at head sizes 64 and 128 is the wide one (gpu/flash_attention_wide.cuh,
// 32 query rows per warp), so the cases above run it there; "the wide forward" cases check it
// against the narrow one (MmaForward::narrow), the scalar kernels, train.cpp and float64.
//
// Tolerances (normalised, ‖ours − ref‖/‖ref‖), next to each check with their reason:
//   fp32: both sides sum in float32 in different orders (online softmax rescaling, tiles):
//         ~1e-7 relative, 1e-5;
//   bf16: the inputs are rounded to bf16 first, so both sides see the same numbers; the
//         fused path then rounds P (8-bit mantissa, ≤ 2^-9 relative) before P·v and y once,
//         8e-3 as the cuBLAS path's check in gpu_trainer/trainer.cu; the gradients pass P and dS
//         rounded into two products each, and dy·y's row sum (D) from rounded y: 1.5e-2.
//         The tensor-core and the scalar kernels round the same quantities at different
//         points (dS before or after the scale, sums in other orders): the sum of their two
//         bounds against train.cpp.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#define TRAIN_NO_MAIN
#include "../../train.cpp"
#include "../../gpu/attention.cuh"
#include "../../gpu/flash_attention.cuh"
#include "../../dev/cuda/device_array.h"
#include "../test_util.h"

using Floats = std::vector<float>;
using FloatXs = std::vector<floatX>;
constexpr bool BF16 = !std::is_same<floatX, float>::value;
static double tol(double fp32, double bf16) { return BF16 ? bf16 : fp32; }

static Floats rounded(Floats v) {
    for (float& x : v) x = (float)floatX(x);
    return v;
}
static FloatXs to_x(const Floats& v) { return FloatXs(v.begin(), v.end()); }
template <class T>
static double norm_error(const std::vector<T>& ours, const Floats& ref) {
    REQUIRE(ours.size() == ref.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        double o = (double)(float)ours[i];
        if (std::isnan(o)) return NAN;
        num += (o - ref[i]) * (o - ref[i]), den += (double)ref[i] * ref[i];
    }
    return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

// The fused path on one input: y (B,T,C), lse (B,NH,T), dqkv (B,T,QKV), QKV = C + 2·KVH·hs.
struct Fused {
    FloatXs y, dqkv;
    std::vector<float> lse;
};
static size_t qkv_width(int C, int NH, int KVH) { return (size_t)C + 2 * (size_t)KVH * (C / NH); }
// scalar: the scalar kernels, which the bf16 build otherwise replaces by the tensor-core ones;
// three_kernels: the tensor-core backward of three kernels where the five-product one applies.
static Fused run_fused(const Floats& qkv, const Floats& dout, int B, int T, int C, int NH, int KVH,
                       bool scalar = false, bool three_kernels = false) {
    const size_t n = (size_t)B * T * C, rows = (size_t)B * NH * T, nqkv = (size_t)B * T * qkv_width(C, NH, KVH);
    REQUIRE(qkv.size() == nqkv);
    DevArray<floatX> d_qkv(to_x(qkv)), d_dout(to_x(dout)), d_y(n), d_dqkv(nqkv);
    DevArray<float> d_lse(rows), d_scratch(gpu::flash_backward_scratch_floats(B, T, C, NH));
    gpu::flash_attention_forward(d_y.ptr(), d_lse.ptr(), d_qkv.ptr(), B, T, C, NH, KVH, scalar);
    gpu::flash_attention_backward(d_dqkv.ptr(), d_scratch.ptr(), d_dout.ptr(), d_y.ptr(), d_qkv.ptr(), d_lse.ptr(), B,
                                  T, C, NH, KVH, scalar, three_kernels);
    return {d_y.host(), d_dqkv.host(), d_lse.host()};
}
// The cuBLAS path on the same input.
static void run_cublas(const Floats& qkv, const Floats& dout, int B, int T, int C, int NH, int KVH, FloatXs& y,
                       FloatXs& dqkv) {
    const size_t n = (size_t)B * T * C, att_n = (size_t)B * NH * T * T, rows = (size_t)B * NH * T;
    const size_t nqkv = (size_t)B * T * qkv_width(C, NH, KVH);
    REQUIRE(qkv.size() == nqkv);
    DevArray<floatX> d_qkv(to_x(qkv)), d_dout(to_x(dout)), d_y(n), d_dqkv(nqkv);
    DevArray<float> d_max(rows), d_sum(rows);
    DevArray<floatX> qkvr(nqkv), dqkvr(nqkv), yr(n), att(att_n), datt(att_n);
    gpu::AttentionScratch s{qkvr.ptr(), dqkvr.ptr(), yr.ptr(), att.ptr(), datt.ptr()};
    gpu::attention_forward(d_y.ptr(), d_max.ptr(), d_sum.ptr(), d_qkv.ptr(), s, B, T, C, NH, KVH);
    gpu::attention_backward(d_dqkv.ptr(), d_dout.ptr(), d_qkv.ptr(), d_max.ptr(), d_sum.ptr(), s, B, T, C, NH, KVH);
    y = d_y.host(), dqkv = d_dqkv.host();
}
// log Σ_{s ≤ t} exp(q_t·k_s·scale) per (b, h, t), in float64 from the (rounded) inputs, with
// k of query head h's K/V head h / (NH/KVH)
static std::vector<double> reference_lse(const Floats& qkv, int B, int T, int C, int NH, int KVH) {
    const int hs = C / NH, G = NH / KVH;
    const size_t QKV = qkv_width(C, NH, KVH);
    std::vector<double> lse((size_t)B * NH * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                std::vector<double> s(t + 1);
                double m = -INFINITY, sum = 0;
                for (int u = 0; u <= t; u++) {
                    double dot = 0;
                    for (int d = 0; d < hs; d++)
                        dot += (double)qkv[((size_t)b * T + t) * QKV + h * hs + d] *
                               qkv[((size_t)b * T + u) * QKV + C + (h / G) * hs + d];
                    s[u] = dot / std::sqrt((double)hs), m = std::max(m, s[u]);
                }
                for (double x : s) sum += std::exp(x - m);
                lse[((size_t)b * NH + h) * T + t] = m + std::log(sum);
            }
    return lse;
}

struct Shape {
    int B, T, NH, hs, KVH = 0;  // KVH: K/V heads, 0 for NH (multi-head attention)
};

// Each of dq, dk, dv of `ours` against `ref` (B·T rows of QKV = C + 2·KVH·hs: q in [0, C), k
// in [C, C + KVH·hs), v after), each normalised by the whole reference gradient: at T = 1 dq
// and dk are exactly 0 (one key, whose probability is 1 whatever the score).
static void check_parts(const FloatXs& ours, const Floats& ref, int B, int T, int C, int NH, int KVH, double bound) {
    const int QKV = (int)qkv_width(C, NH, KVH), ends[] = {0, C, C + (QKV - C) / 2, QKV};
    double whole = 0;
    for (float g : ref) whole += (double)g * g;
    whole = std::sqrt(whole);
    for (int part = 0; part < 3; part++) {
        double err = 0;
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int c = ends[part]; c < ends[part + 1]; c++) {
                double d = (double)(float)ours[r * QKV + c] - ref[r * QKV + c];
                err += std::isnan(d) ? INFINITY : d * d;
            }
        CAPTURE(part);
        CHECK(std::sqrt(err) / whole <= bound);
    }
}

// One shape: the fused path against train.cpp (y, every gradient, each of dq, dk, dv) and
// the log-sum-exp against float64; with `others`, also against the cuBLAS path and, in the
// bf16 build, the tensor-core kernels against the scalar ones.
static void check_shape(const Shape& sh, bool others) {
    const int B = sh.B, T = sh.T, NH = sh.NH, KVH = sh.KVH ? sh.KVH : sh.NH, C = NH * sh.hs;
    CAPTURE(B);
    CAPTURE(T);
    CAPTURE(NH);
    CAPTURE(KVH);
    CAPTURE(sh.hs);
    const size_t n = (size_t)B * T * C, nqkv = (size_t)B * T * qkv_width(C, NH, KVH);
    Rng rng(1000 + T * 7 + sh.hs + 131 * (NH - KVH));  // multi-head attention: the seed of before
    Floats qkv = rounded(random_floats(nqkv, rng)), dout = rounded(random_floats(n, rng));
    Floats att((size_t)B * NH * T * T), y(n), dqkv(nqkv);
    attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH, KVH);
    attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, KVH);
    Fused f = run_fused(qkv, dout, B, T, C, NH, KVH);

    CHECK(norm_error(f.y, y) <= tol(1e-5, 8e-3));
    CHECK(norm_error(f.dqkv, dqkv) <= tol(1e-5, 1.5e-2));
    check_parts(f.dqkv, dqkv, B, T, C, NH, KVH, tol(1e-5, 1.5e-2));
    if (others) {
        // against the cuBLAS path: both tiers' own roundings apart, so the sum of the two
        // tolerances against train.cpp
        FloatXs cy, cdqkv;
        run_cublas(qkv, dout, B, T, C, NH, KVH, cy, cdqkv);
        CHECK(norm_error(f.y, Floats(cy.begin(), cy.end())) <= tol(2e-5, 1.6e-2));
        CHECK(norm_error(f.dqkv, Floats(cdqkv.begin(), cdqkv.end())) <= tol(2e-5, 3e-2));
    }
    if (others && BF16) {  // the tensor-core kernels against the scalar ones: the sum of their bounds
        Fused sc = run_fused(qkv, dout, B, T, C, NH, KVH, true);
        CHECK(norm_error(f.y, Floats(sc.y.begin(), sc.y.end())) <= 1.6e-2);
        CHECK(norm_error(f.dqkv, Floats(sc.dqkv.begin(), sc.dqkv.end())) <= 3e-2);
    }
    // log-sum-exp: float32 scores of the same inputs, float32 sums (1e-5 of the value,
    // or 1e-5 absolute near 0), in both builds (P's rounding does not enter it)
    std::vector<double> lse = reference_lse(qkv, B, T, C, NH, KVH);
    int bad = 0;
    for (size_t i = 0; i < lse.size(); i++)
        if (!(std::fabs(f.lse[i] - lse[i]) <= 1e-5 * std::max(1.0, std::fabs(lse[i])))) bad++;
    CHECK(bad == 0);
}

const int HEAD_SIZES[] = {16, 32, 48, 64, 80, 96, 112, 128};  // every supported one

TEST_CASE("fused attention matches train.cpp and the cuBLAS path: y, log-sum-exp and every gradient") {
    // every head size with T = 1 and 7 (less than a tile), 100 (ends inside one), 64 and 256
    // (on a boundary of the tensor-core kernels' 64-row tiles and the scalar ones' 32); B·NH
    // from 1 to 6
    const int Ts[] = {1, 7, 64, 100, 256};
    for (int T : Ts)
        for (int hs : HEAD_SIZES) check_shape({1, T, T <= 64 ? 2 : 1, hs}, true);
    check_shape({2, 37, 3, 16}, true);
    check_shape({3, 65, 2, 32}, true);
}

TEST_CASE("fused attention at T = 1024: 16 query tiles, the online softmax over many key tiles") {
    // every head size, against train.cpp and float64 (the cuBLAS path and the scalar kernels
    // of the bf16 build are left out: they would make this the suite's slowest case for no
    // new check)
    for (int hs : HEAD_SIZES) check_shape({1, 1024, 1, hs}, false);
}

// The causal boundary on one set of kernels (scalar: the scalar ones).
static void check_causal_boundary(bool scalar) {
    CAPTURE(scalar);
    const int B = 1, T = 100, NH = 1, hs = 32, C = NH * hs;
    const size_t n = (size_t)B * T * C;
    Rng rng(77);
    Floats qkv = rounded(random_floats(3 * n, rng));
    Floats zero_dout(n, 0.0f);
    Fused base = run_fused(qkv, zero_dout, B, T, C, NH, NH, scalar);
    for (int t : {0, 15, 16, 31, 32, 63, 64, 99}) {  // the last and first rows of tiles and warps
        CAPTURE(t);
        // changing v at key t + 1 changes no output row up to t, bit for bit
        if (t + 1 < T) {
            Floats later = qkv;
            for (int d = 0; d < hs; d++) later[(size_t)(t + 1) * 3 * C + 2 * C + d] += 1.0f;
            Fused f = run_fused(later, zero_dout, B, T, C, NH, NH, scalar);
            CHECK(memcmp(f.y.data(), base.y.data(), (size_t)(t + 1) * C * sizeof(floatX)) == 0);
            CHECK(memcmp(f.lse.data(), base.lse.data(), (size_t)(t + 1) * sizeof(float)) == 0);
        }
        // changing v at key t (the last key query t sees) changes row t
        Floats last = qkv;
        for (int d = 0; d < hs; d++) last[(size_t)t * 3 * C + 2 * C + d] += 1.0f;
        Fused g = run_fused(last, zero_dout, B, T, C, NH, NH, scalar);
        bool changed = false;
        for (int d = 0; d < hs; d++) changed = changed || (float)g.y[(size_t)t * C + d] != (float)base.y[(size_t)t * C + d];
        CHECK(changed);
        // a gradient on row t alone reaches q_t and keys/values 0..t, none after t
        Floats dout(n, 0.0f);
        for (int d = 0; d < hs; d++) dout[(size_t)t * C + d] = 1.0f + 0.01f * d;
        Fused f = run_fused(qkv, rounded(dout), B, T, C, NH, NH, scalar);
        bool after_zero = true, at_t_nonzero = false, other_dq_zero = true;
        for (int u = 0; u < T; u++)
            for (int d = 0; d < hs; d++) {
                float dq = (float)f.dqkv[(size_t)u * 3 * C + d], dk = (float)f.dqkv[(size_t)u * 3 * C + C + d];
                float dv = (float)f.dqkv[(size_t)u * 3 * C + 2 * C + d];
                if (u > t) after_zero = after_zero && dk == 0.0f && dv == 0.0f;
                if (u == t) at_t_nonzero = at_t_nonzero || dv != 0.0f;
                if (u != t) other_dq_zero = other_dq_zero && dq == 0.0f;
            }
        CHECK(after_zero);
        CHECK(at_t_nonzero);
        CHECK(other_dq_zero);
    }
}
TEST_CASE("the causal boundary: query t sees key t and nothing after it, across tile edges") {
    check_causal_boundary(false);
    if (BF16) check_causal_boundary(true);  // the fp32 build has the scalar kernels only
}

// Two runs of one set of kernels give the same bits, and the right answer.
static void check_reruns(bool scalar, int NH, int KVH, int hs = 16) {
    CAPTURE(scalar);
    CAPTURE(NH);
    CAPTURE(KVH);
    CAPTURE(hs);
    // T = 100: two key tiles of the tensor-core kernels (64 rows: the second partial, loaded
    // while the first is multiplied), four of the scalar ones (32); with KVH < NH, the dk/dv
    // pass's steps cross from one query head of the group to the next
    const int B = 1, T = 100, C = NH * hs;
    const size_t n = (size_t)B * T * C, nqkv = (size_t)B * T * qkv_width(C, NH, KVH);
    Rng rng(3);
    Floats qkv = rounded(random_floats(nqkv, rng)), dout = rounded(random_floats(n, rng));
    Fused a = run_fused(qkv, dout, B, T, C, NH, KVH, scalar), b = run_fused(qkv, dout, B, T, C, NH, KVH, scalar);
    CHECK(memcmp(a.y.data(), b.y.data(), n * sizeof(floatX)) == 0);
    CHECK(memcmp(a.dqkv.data(), b.dqkv.data(), nqkv * sizeof(floatX)) == 0);
    CHECK(memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)) == 0);
    // and the answer is right (a race that every schedule repeated would still show here)
    Floats att((size_t)B * NH * T * T), y(n), dqkv(nqkv);
    attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH, KVH);
    attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, KVH);
    CHECK(norm_error(a.y, y) <= tol(1e-5, 8e-3));
    CHECK(norm_error(a.dqkv, dqkv) <= tol(1e-5, 1.5e-2));
}
TEST_CASE("race: the fused kernels give the same bits twice (and under CPU_CUDA_RACECHECK=1, every schedule)") {
    check_reruns(false, 2, 2);
    check_reruns(false, 4, 2);  // grouped-query attention, 2 query heads per K/V head
    if (BF16) check_reruns(true, 2, 2), check_reruns(true, 4, 2);
    // the five-product backward (bf16, hs = 64 and 128): dq's terms wait for their turn on
    // counters; under the race detector the blocks start one at a time, last index first
    if (BF16) check_reruns(false, 2, 2, 64), check_reruns(false, 4, 1, 128);
}

// ---- the five-product backward (gpu/flash_attention_bwd5.cuh): the bf16 build's default at
// hs = 64 and 128, one kernel for dk, dv and dq, dq's terms (one per key tile) added into a
// float32 partial sum in key-tile order, which counters enforce. The fp32 build has no such
// kernel (its fused path is the scalar one): these cases check nothing there.

static Floats as_floats(const FloatXs& v) { return Floats(v.begin(), v.end()); }
// with_scalar: also against the scalar kernels (left out at T = 1024, where they are slow)
static void check_five_products(const Shape& sh, bool with_scalar = true) {
    const int B = sh.B, T = sh.T, NH = sh.NH, KVH = sh.KVH ? sh.KVH : sh.NH, C = NH * sh.hs;
    CAPTURE(B);
    CAPTURE(T);
    CAPTURE(NH);
    CAPTURE(KVH);
    CAPTURE(sh.hs);
    REQUIRE(gpu::flash_backward_five(sh.hs));
    const size_t n = (size_t)B * T * C, nqkv = (size_t)B * T * qkv_width(C, NH, KVH);
    Rng rng(7000 + 31 * T + sh.hs + 5 * KVH);
    Floats qkv = rounded(random_floats(nqkv, rng)), dout = rounded(random_floats(n, rng));
    Floats att((size_t)B * NH * T * T), y(n), dqkv(nqkv);
    attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH, KVH);
    attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, KVH);
    Fused five = run_fused(qkv, dout, B, T, C, NH, KVH);
    Fused three = run_fused(qkv, dout, B, T, C, NH, KVH, false, true);
    // against train.cpp, each of dq, dk, dv: the tensor-core path's bound (P and dS rounded to
    // bf16 into two products each, D from rounded y), as for the three-kernel backward
    check_parts(five.dqkv, dqkv, B, T, C, NH, KVH, 1.5e-2);
    // against the scalar kernels: their two bounds against train.cpp added
    if (with_scalar)
        check_parts(five.dqkv, as_floats(run_fused(qkv, dout, B, T, C, NH, KVH, true).dqkv), B, T, C, NH, KVH, 3e-2);
    // against the three-kernel backward, the same algorithm with the same bf16 roundings of P
    // and dS: dk and dv sum the same float32 terms in another order (query tiles last to
    // first), dq the same terms grouped by key tile (and its dS from Sᵀ = k·qᵀ, not S = q·kᵀ:
    // the same products, whose float32 sums may round apart). The float32 sums then differ
    // by ~1e-6 relative, and an element differs after its one rounding to bf16 only where
    // that straddles a rounding boundary: by one bf16 step, 2^-8 relative at most. So 2^-8
    // (3.9e-3) bounds the norm even if every element differed; a lost or doubled term, or
    // terms of the wrong key tile, move dq by far more
    check_parts(five.dqkv, as_floats(three.dqkv), B, T, C, NH, KVH, 3.9e-3);
    // the forward is the same kernels: its y and lse bit for bit
    CHECK(memcmp(five.y.data(), three.y.data(), n * sizeof(floatX)) == 0);
    // a rerun gives the same bits (the order of dq's terms is fixed, whatever the blocks' timing)
    Fused again = run_fused(qkv, dout, B, T, C, NH, KVH);
    CHECK(memcmp(again.dqkv.data(), five.dqkv.data(), nqkv * sizeof(floatX)) == 0);
}

TEST_CASE("five-product backward: against train.cpp, the three-kernel one and the scalar kernels, every gradient") {
    if (!BF16) return;  // the fp32 build: no tensor-core kernels
    // T = 1 and 7 (less than a tile), 64 and 128 (a multiple of the key tiles), 127 and 129 (one
    // short of it, one past: a last query tile of 1 row), 100, 256 (4 key tiles of 64, 8 query
    // tiles of 32 at hs = 128, so up to 4 terms in one dq tile's order); G = 1, 2, 4 (NH = 4)
    for (int T : {1, 7, 64, 100, 127, 128, 129, 256})
        for (int hs : {64, 128})
            for (int KVH : {4, 2, 1}) check_five_products({1, T, 4, hs, KVH});
    check_five_products({2, 100, 2, 64, 1});  // two batch rows, multi-query
}
TEST_CASE("five-product backward at T = 1024: 16 terms in the order of the last query tiles") {
    if (!BF16) return;
    check_five_products({1, 1024, 2, 64, 1}, false);
    check_five_products({1, 1024, 1, 128, 1}, false);
}

// ---- grouped-query attention: KVH < NH K/V heads, query head h reading K/V head h / (NH/KVH)

// Each path on its own against train.cpp's attention_forward and attention_backward (which
// take KVH): y, each of dq, dk, dv, and the fused kernels' log-sum-exp against float64. The
// tolerances are those of multi-head attention above: fp32 1e-5 (the same float32 sums in
// other orders); bf16 8e-3 for y (P rounded before P·v, y once) and 1.5e-2 for the gradients
// (P and dS rounded into two products each, D from rounded y). A K/V head's dk and dv sum
// over its G query heads in float32 before the one rounding to bf16 at the store, so the
// bound does not grow with G: the sum of G heads' errors is relative to a sum G times as large.
enum class Path { fused, scalar, cublas };
static const char* path_name(Path p) { return p == Path::fused ? "fused" : p == Path::scalar ? "scalar" : "cublas"; }
static void check_gqa(const Shape& sh, std::initializer_list<Path> paths) {
    const int B = sh.B, T = sh.T, NH = sh.NH, KVH = sh.KVH, C = NH * sh.hs;
    CAPTURE(B);
    CAPTURE(T);
    CAPTURE(NH);
    CAPTURE(KVH);
    CAPTURE(sh.hs);
    const size_t n = (size_t)B * T * C, nqkv = (size_t)B * T * qkv_width(C, NH, KVH);
    Rng rng(5000 + 97 * T + 13 * sh.hs + KVH);
    Floats qkv = rounded(random_floats(nqkv, rng)), dout = rounded(random_floats(n, rng));
    Floats att((size_t)B * NH * T * T), y(n), dqkv(nqkv);
    attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH, KVH);
    attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, KVH);
    const std::vector<double> lse = reference_lse(qkv, B, T, C, NH, KVH);
    for (Path path : paths) {
        if (path == Path::scalar && !BF16) continue;  // the fp32 build's fused path is the scalar one
        const std::string path_is = path_name(path);
        CAPTURE(path_is);
        Fused f;
        if (path == Path::cublas) run_cublas(qkv, dout, B, T, C, NH, KVH, f.y, f.dqkv);
        else f = run_fused(qkv, dout, B, T, C, NH, KVH, path == Path::scalar);
        CHECK(norm_error(f.y, y) <= tol(1e-5, 8e-3));
        CHECK(norm_error(f.dqkv, dqkv) <= tol(1e-5, 1.5e-2));
        check_parts(f.dqkv, dqkv, B, T, C, NH, KVH, tol(1e-5, 1.5e-2));
        if (path != Path::cublas) {
            int bad = 0;
            for (size_t i = 0; i < lse.size(); i++)
                if (!(std::fabs(f.lse[i] - lse[i]) <= 1e-5 * std::max(1.0, std::fabs(lse[i])))) bad++;
            CHECK(bad == 0);
        }
    }
}

TEST_CASE("grouped-query attention: every path against train.cpp, KVH = 1 (multi-query), 2 and NH") {
    // NH = 4: KVH = 1 (G = 4), 2 (G = 2) and 4 (multi-head, the G = 1 instantiations); T = 7
    // (less than a tile), 100 (two key tiles of 64, the second partial) and 130 (three, with
    // hs = 128's 32-row tiles of the other side); B = 2, so that batch rows do not mix
    const Shape shapes[] = {{2, 7, 4, 16}, {2, 100, 4, 64}, {1, 130, 4, 128}};
    for (int KVH : {1, 2, 4})
        for (Shape sh : shapes) {
            sh.KVH = KVH;
            check_gqa(sh, {Path::fused, Path::scalar, Path::cublas});
        }
    // groups of 3 and of 2 out of 6 query heads (G not a power of two), hs = 32
    check_gqa({1, 70, 6, 32, 2}, {Path::fused, Path::scalar, Path::cublas});
    check_gqa({1, 70, 6, 32, 3}, {Path::fused, Path::scalar, Path::cublas});
}

TEST_CASE("grouped-query attention: the backward gives the same bits twice on every path") {
    const int B = 2, T = 100, NH = 4, KVH = 2, hs = 64, C = NH * hs;  // two query heads per K/V head
    const size_t n = (size_t)B * T * C, nqkv = (size_t)B * T * qkv_width(C, NH, KVH);
    Rng rng(11);
    Floats qkv = rounded(random_floats(nqkv, rng)), dout = rounded(random_floats(n, rng));
    for (Path path : {Path::fused, Path::scalar, Path::cublas}) {
        const std::string path_is = path_name(path);
        CAPTURE(path_is);
        Fused a, b;
        if (path == Path::cublas) {
            run_cublas(qkv, dout, B, T, C, NH, KVH, a.y, a.dqkv);
            run_cublas(qkv, dout, B, T, C, NH, KVH, b.y, b.dqkv);
        } else {
            a = run_fused(qkv, dout, B, T, C, NH, KVH, path == Path::scalar);
            b = run_fused(qkv, dout, B, T, C, NH, KVH, path == Path::scalar);
        }
        CHECK(memcmp(a.y.data(), b.y.data(), n * sizeof(floatX)) == 0);
        CHECK(memcmp(a.dqkv.data(), b.dqkv.data(), nqkv * sizeof(floatX)) == 0);
    }
}

// ---- the wide tensor-core forward (gpu/flash_attention_wide.cuh): 32 query rows per warp, 128
// per block, against the narrow one (16 per warp), the scalar kernels, train.cpp and float64

struct Forward {
    FloatXs y;
    std::vector<float> lse;
};
// The forward alone on one set of kernels: the scalar ones, or the tensor-core forward `mma`.
static Forward run_forward(const Floats& qkv, int B, int T, int C, int NH, int KVH, bool scalar,
                           gpu::MmaForward mma) {
    const size_t nqkv = (size_t)B * T * qkv_width(C, NH, KVH);
    REQUIRE(qkv.size() == nqkv);
    DevArray<floatX> d_qkv(to_x(qkv)), d_y((size_t)B * T * C);  // y and lse start as NaN bytes
    DevArray<float> d_lse((size_t)B * NH * T);
    gpu::flash_attention_forward(d_y.ptr(), d_lse.ptr(), d_qkv.ptr(), B, T, C, NH, KVH, scalar, mma);
    return {d_y.host(), d_lse.host()};
}
// Elements of a and b further apart than one bf16 step of the larger (2^-7 of it: 8 significant
// bits), or NaN on either side
static int beyond_one_bf16_step(const FloatXs& a, const FloatXs& b) {
    REQUIRE(a.size() == b.size());
    int bad = 0;
    for (size_t i = 0; i < a.size(); i++) {
        const double x = (float)a[i], y = (float)b[i];
        if (!(std::fabs(x - y) <= std::ldexp(std::max(std::fabs(x), std::fabs(y)), -7))) bad++;
    }
    return bad;
}

static void check_wide(int B, int T, int NH, int KVH, int hs) {
    const int C = NH * hs;
    CAPTURE(B);
    CAPTURE(T);
    CAPTURE(NH);
    CAPTURE(KVH);
    CAPTURE(hs);
    const size_t n = (size_t)B * T * C, nqkv = (size_t)B * T * qkv_width(C, NH, KVH);
    Rng rng(9000 + 31 * T + hs + 7 * KVH);
    Floats qkv = rounded(random_floats(nqkv, rng)), att((size_t)B * NH * T * T), y(n);
    attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH, KVH);
    const Forward wide = run_forward(qkv, B, T, C, NH, KVH, false, gpu::MmaForward::wide);
    const Forward narrow = run_forward(qkv, B, T, C, NH, KVH, false, gpu::MmaForward::narrow);
    const Forward scalar = run_forward(qkv, B, T, C, NH, KVH, true, gpu::MmaForward::wide);
    // against train.cpp: P rounded to bf16 before P·v, y once (the file's header): 8e-3
    CHECK(norm_error(wide.y, y) <= 8e-3);
    // against the scalar kernels: both tiers' bounds against train.cpp, summed
    CHECK(norm_error(wide.y, Floats(scalar.y.begin(), scalar.y.end())) <= 1.6e-2);
    if (hs == 64) {
        // the narrow forward walks the same 64-key tiles with the same arithmetic per row (mma
        // order, online softmax), so the row statistics agree bit for bit, and y differs only
        // by o·(1/l) against o/l: at most one bf16 step per element
        CHECK(memcmp(wide.lse.data(), narrow.lse.data(), wide.lse.size() * sizeof(float)) == 0);
        CHECK(beyond_one_bf16_step(wide.y, narrow.y) == 0);
    } else {
        // hs = 128: key tiles of 32 against 64, so the online softmax rescales at other points
        // and P rounds from other maxima: both bounds against train.cpp, summed
        CHECK(norm_error(wide.y, Floats(narrow.y.begin(), narrow.y.end())) <= 1.6e-2);
    }
    // log-sum-exp against float64: float32 scores and sums, 1e-5 of the value (1e-5 absolute
    // near 0); NaN (an element never written) fails
    const std::vector<double> lse = reference_lse(qkv, B, T, C, NH, KVH);
    int bad = 0;
    for (size_t i = 0; i < lse.size(); i++)
        if (!(std::fabs(wide.lse[i] - lse[i]) <= 1e-5 * std::max(1.0, std::fabs(lse[i])))) bad++;
    CHECK(bad == 0);
}

TEST_CASE("the wide forward against the narrow one, the scalar kernels, train.cpp and float64") {
    if (!BF16) {
        MESSAGE("the fp32 build has the scalar kernels only: no tensor-core forward to check");
        return;
    }
    // T: less than a tile (1, 7), on and around the 128-row query tiles and the key tiles (64,
    // 127, 128, 129, 256), inside one (100); GQA groups of 1, 2 and 4 out of NH = 4
    for (int hs : {64, 128})
        for (int T : {1, 7, 64, 100, 127, 128, 129, 256})
            for (int KVH : {4, 2, 1}) check_wide(1, T, 4, KVH, hs);
    check_wide(2, 129, 2, 1, 64);  // two batch rows, multi-query
}

TEST_CASE("the wide forward at T = 1024: 8 query tiles, the online softmax over 16 or 32 key tiles") {
    if (!BF16) {
        MESSAGE("the fp32 build has the scalar kernels only: no tensor-core forward to check");
        return;
    }
    for (int hs : {64, 128}) check_wide(1, 1024, 1, 1, hs);
}

TEST_CASE("race: the wide forward gives the same bits twice (and under CPU_CUDA_RACECHECK=1, every schedule)") {
    if (!BF16) {
        MESSAGE("the fp32 build has the scalar kernels only: no tensor-core forward to check");
        return;
    }
    // T = 200: 2 query tiles, 4 key tiles at hs = 64 (64 keys, the last partial, loaded while
    // the one before is multiplied), 7 at hs = 128 (32 keys); GQA (2 per K/V head) and MHA
    for (int hs : {64, 128})
        for (int KVH : {2, 4}) {
            CAPTURE(hs);
            CAPTURE(KVH);
            const int B = 1, T = 200, NH = 4, C = NH * hs;
            Rng rng(21 + hs + KVH);
            Floats qkv = rounded(random_floats((size_t)B * T * qkv_width(C, NH, KVH), rng));
            const Forward a = run_forward(qkv, B, T, C, NH, KVH, false, gpu::MmaForward::wide);
            const Forward b = run_forward(qkv, B, T, C, NH, KVH, false, gpu::MmaForward::wide);
            CHECK(memcmp(a.y.data(), b.y.data(), a.y.size() * sizeof(floatX)) == 0);
            CHECK(memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)) == 0);
            // and the answer is right (a race that every schedule repeated would still show here)
            Floats att((size_t)B * NH * T * T), y((size_t)B * T * C);
            attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH, KVH);
            CHECK(norm_error(a.y, y) <= 8e-3);  // as above
        }
}

TEST_CASE("grouped-query attention: query heads that do not split into the K/V heads are refused") {
    const int B = 1, T = 4, NH = 4, KVH = 3, C = NH * 16;
    DevArray<floatX> qkv((size_t)B * T * qkv_width(C, NH, KVH)), y((size_t)B * T * C);
    DevArray<float> lse((size_t)B * NH * T);
    CHECK_THROWS_WITH_AS(gpu::flash_attention_forward(y.ptr(), lse.ptr(), qkv.ptr(), B, T, C, NH, KVH),
                         doctest::Contains("4 query heads do not split into 3 K/V heads"), Error);
}

TEST_CASE("head sizes: multiples of 16 up to 128 are supported, others are not") {
    for (int hs : {16, 32, 48, 64, 80, 96, 112, 128}) CHECK(gpu::flash_attention_supports(hs));
    for (int hs : {0, 8, 24, 65, 144, 256}) CHECK_FALSE(gpu::flash_attention_supports(hs));
}

int main(int argc, char** argv) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("test_flash_attention: no GPU found; not run\n");
        return 77;
    }
    try {
        gpu::init_device(0);
        doctest::Context context(argc, argv);
        return context.run();
    } catch (const Error& e) {
        fprintf(stderr, "test_flash_attention: error: %s\n", e.what());
        return 1;
    }
}
