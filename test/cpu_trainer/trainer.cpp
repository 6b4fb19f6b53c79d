// Tests of the CPU reference trainer (doctest). Run from the repository root: some tests
// start ./train as a separate process to check what a user sees (errors, exit codes,
// checkpoints and resume).
//
// References are independent of the code under test:
//   * gradients: central finite differences of double-precision re-implementations of
//     each layer (namespace ref below), never of train.cpp's own float forward;
//   * batch splits: the same global batch split differently must give the same step;
//   * hand computations for AdamW and the schedule.
// Every tolerance is stated next to its check with the reason. NaN always fails, because
// every comparison is written so that NaN makes it false.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#define TRAIN_NO_MAIN
#include "../../train.cpp"
#include "../generation_check.h"
#include "../golden.h"
#include "../test_util.h"
#include "finite_diff.h"

// ----------------------------------------------------------------------------
// Helpers (and finite_diff.h)

static void write_bytes(const std::string& path, const void* data, size_t n) {
    FILE* f = fopen(path.c_str(), "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}
static void write_shard(const std::string& path, const std::vector<uint16_t>& tokens, int magic = SHARD_MAGIC,
                        int version = SHARD_VERSION) {
    int header[256] = {};
    header[0] = magic, header[1] = version, header[2] = (int)tokens.size();
    FILE* f = fopen(path.c_str(), "wb");
    fwrite(header, sizeof header, 1, f);
    fwrite(tokens.data(), 2, tokens.size(), f);
    fclose(f);
}
// A shard of llm.c's Llama-3 kind: uint32 tokens after the header (magic 20240801, version 7)
static void write_shard32(const std::string& path, const std::vector<uint32_t>& tokens, int magic = SHARD32_MAGIC,
                          int version = SHARD32_VERSION) {
    int header[256] = {};
    header[0] = magic, header[1] = version, header[2] = (int)tokens.size();
    FILE* f = fopen(path.c_str(), "wb");
    fwrite(header, sizeof header, 1, f);
    fwrite(tokens.data(), 4, tokens.size(), f);
    fclose(f);
}

// ----------------------------------------------------------------------------
// Double-precision references, written independently of train.cpp's float layers.
namespace ref {

void encoder(Vec& out, const int* inp, const Vec& wte, const Vec& wpe, int B, int T, int C) {
    out.assign((size_t)B * T * C, 0);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                out[(b * T + t) * C + c] = wte[inp[b * T + t] * C + c] + wpe[t * C + c];
}
void layernorm(Vec& out, const Vec& x, const Vec& w, const Vec& b, int N, int C) {
    out.assign((size_t)N * C, 0);
    for (int n = 0; n < N; n++) {
        double mean = 0, var = 0;
        for (int c = 0; c < C; c++) mean += x[n * C + c] / C;
        for (int c = 0; c < C; c++) var += (x[n * C + c] - mean) * (x[n * C + c] - mean) / C;
        for (int c = 0; c < C; c++) out[n * C + c] = (x[n * C + c] - mean) / std::sqrt(var + 1e-5) * w[c] + b[c];
    }
}
void matmul(Vec& out, const Vec& x, const Vec& w, const Vec* bias, int N, int IC, int OC) {
    out.assign((size_t)N * OC, 0);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? (*bias)[o] : 0;
            for (int i = 0; i < IC; i++) s += x[n * IC + i] * w[o * IC + i];
            out[n * OC + o] = s;
        }
}
void attention(Vec& out, const Vec& qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    out.assign((size_t)B * T * C, 0);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                Vec score(t + 1);
                double mx = -1e300, sum = 0;
                for (int u = 0; u <= t; u++) {
                    double s = 0;
                    for (int i = 0; i < hs; i++)
                        s += qkv[(b * T + t) * 3 * C + h * hs + i] * qkv[(b * T + u) * 3 * C + C + h * hs + i];
                    score[u] = s / std::sqrt((double)hs);
                    mx = std::max(mx, score[u]);
                }
                for (int u = 0; u <= t; u++) sum += (score[u] = std::exp(score[u] - mx));
                for (int u = 0; u <= t; u++)
                    for (int i = 0; i < hs; i++)
                        out[(b * T + t) * C + h * hs + i] += score[u] / sum * qkv[(b * T + u) * 3 * C + 2 * C + h * hs + i];
            }
}
void gelu(Vec& out, const Vec& x) {
    out.resize(x.size());
    for (size_t i = 0; i < x.size(); i++)
        out[i] = 0.5 * x[i] * (1 + std::tanh(std::sqrt(2 / M_PI) * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
}
// mean cross-entropy over N rows of Vp logits, of which the first V count
double crossentropy(const Vec& logits, const int* targets, int N, int V, int Vp) {
    double total = 0;
    for (int n = 0; n < N; n++) {
        double mx = -1e300, sum = 0;
        for (int i = 0; i < V; i++) mx = std::max(mx, logits[n * Vp + i]);
        for (int i = 0; i < V; i++) sum += std::exp(logits[n * Vp + i] - mx);
        total += mx + std::log(sum) - logits[n * Vp + targets[n]];
    }
    return total / N;
}
// The whole model's loss, in double, from a flat parameter vector in file order.
double model_loss(const ModelConfig& c, const Vec& params, const int* inp, const int* tgt, int B, int T) {
    std::vector<size_t> sizes = c.param_sizes();
    std::vector<Vec> P(NUM_PARAM_TENSORS);
    size_t off = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) P[i].assign(params.begin() + off, params.begin() + off + sizes[i]), off += sizes[i];
    auto slice = [](const Vec& v, size_t start, size_t n) { return Vec(v.begin() + start, v.begin() + start + n); };
    int C = c.C, N = B * T;
    Vec x, ln, qkv, atty, proj, h, hg;
    encoder(x, inp, P[0], P[1], B, T, C);
    for (int l = 0; l < c.L; l++) {
        Vec b;
        layernorm(ln, x, slice(P[2], l * C, C), slice(P[3], l * C, C), N, C);
        b = slice(P[5], l * 3 * C, 3 * C);
        matmul(qkv, ln, slice(P[4], (size_t)l * 3 * C * C, 3 * C * C), &b, N, C, 3 * C);
        attention(atty, qkv, B, T, C, c.NH);
        b = slice(P[7], l * C, C);
        matmul(proj, atty, slice(P[6], (size_t)l * C * C, C * C), &b, N, C, C);
        for (size_t i = 0; i < x.size(); i++) x[i] += proj[i];
        layernorm(ln, x, slice(P[8], l * C, C), slice(P[9], l * C, C), N, C);
        b = slice(P[11], l * 4 * C, 4 * C);
        matmul(h, ln, slice(P[10], (size_t)l * 4 * C * C, 4 * C * C), &b, N, C, 4 * C);
        gelu(hg, h);
        b = slice(P[13], l * C, C);
        matmul(proj, hg, slice(P[12], (size_t)l * C * 4 * C, C * 4 * C), &b, N, 4 * C, C);
        for (size_t i = 0; i < x.size(); i++) x[i] += proj[i];
    }
    layernorm(ln, x, P[14], P[15], N, C);
    Vec logits;
    matmul(logits, ln, P[0], nullptr, N, C, c.Vp);
    return crossentropy(logits, tgt, N, c.V, c.Vp);
}

}  // namespace ref

// ----------------------------------------------------------------------------
// Each layer's backward against finite differences of its double reference.
//
// Each test takes the scalar f = Σ out ⊙ R for a random R, so ∂f/∂out = R is the dout
// fed to our backward, and compares every input and parameter gradient with the finite
// difference of f computed by the double reference.
// Tolerance 1e-5 normalised: our backward runs in float32 (relative rounding ~6e-8 per
// operation, sums over at most a few hundred terms), the finite differences are accurate
// to ~1e-9; a wrong formula gives errors of order 1.

constexpr double LAYER_TOL = 1e-5;

TEST_CASE("encoder backward matches finite differences") {
    const int B = 2, T = 3, C = 4, V = 5;
    Rng rng(1);
    std::vector<int> inp = {0, 3, 3, 1, 3, 4};  // token 3 repeats: its gradient rows must add
    std::vector<float> wte = random_floats(V * C, rng), wpe = random_floats(T * C, rng);
    std::vector<float> R = random_floats(B * T * C, rng), out(B * T * C);
    encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
    Vec dwte_ref, dwpe_ref, wte_d = to_double(wte), wpe_d = to_double(wpe), R_d = to_double(R), o;
    auto f = [&] { ref::encoder(o, inp.data(), wte_d, wpe_d, B, T, C); double s = 0; for (size_t i = 0; i < o.size(); i++) s += o[i] * R_d[i]; return s; };
    CHECK(norm_error(out, (ref::encoder(o, inp.data(), wte_d, wpe_d, B, T, C), o)) <= 1e-7);  // forward: one add
    std::vector<float> dwte(V * C, 0.5f), dwpe(T * C, 0.5f);  // start non-zero: backward must add
    encoder_backward(dwte.data(), dwpe.data(), R.data(), inp.data(), B, T, C);
    Vec g1 = finite_diff(f, wte_d), g2 = finite_diff(f, wpe_d);
    for (double& x : g1) x += 0.5;
    for (double& x : g2) x += 0.5;
    CHECK(norm_error(dwte, g1) <= LAYER_TOL);
    CHECK(norm_error(dwpe, g2) <= LAYER_TOL);
}

TEST_CASE("layernorm backward matches finite differences") {
    const int N = 6, C = 16;
    Rng rng(2);
    std::vector<float> x = random_floats(N * C, rng, 2.0), w = random_floats(C, rng), b = random_floats(C, rng);
    for (int i = 0; i < N * C; i++) x[i] += 3.0f;  // an offset: the mean must be subtracted
    std::vector<float> R = random_floats(N * C, rng), out(N * C), mean(N), rstd(N);
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    Vec xd = to_double(x), wd = to_double(w), bd = to_double(b), Rd = to_double(R), o;
    ref::layernorm(o, xd, wd, bd, N, C);
    CHECK(norm_error(out, o) <= 1e-6);  // forward: float32 mean/variance over 16 values
    auto f = [&] { ref::layernorm(o, xd, wd, bd, N, C); double s = 0; for (size_t i = 0; i < o.size(); i++) s += o[i] * Rd[i]; return s; };
    std::vector<float> dx(N * C, 7.0f), dw(C, 0.0f), db(C, 0.0f);  // dx pre-filled: must be overwritten
    layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    CHECK(norm_error(dx, finite_diff(f, xd)) <= LAYER_TOL);
    CHECK(norm_error(dw, finite_diff(f, wd)) <= LAYER_TOL);
    CHECK(norm_error(db, finite_diff(f, bd)) <= LAYER_TOL);
}

TEST_CASE("matmul forward and backward match the double reference (sizes not multiples of the tile)") {
    // 37×29 · 29×23 exercises the partial tiles of the blocked kernel
    const int N = 37, IC = 29, OC = 23;
    Rng rng(3);
    std::vector<float> x = random_floats(N * IC, rng), w = random_floats(OC * IC, rng), b = random_floats(OC, rng);
    std::vector<float> R = random_floats(N * OC, rng), out(N * OC);
    matmul_forward(out.data(), x.data(), w.data(), b.data(), N, IC, OC);
    Vec xd = to_double(x), wd = to_double(w), bd = to_double(b), Rd = to_double(R), o;
    ref::matmul(o, xd, wd, &bd, N, IC, OC);
    CHECK(norm_error(out, o) <= 1e-6);  // float32 dot products of 29 terms
    auto f = [&] { ref::matmul(o, xd, wd, &bd, N, IC, OC); double s = 0; for (size_t i = 0; i < o.size(); i++) s += o[i] * Rd[i]; return s; };
    std::vector<float> dx(N * IC, 7.0f), dw(OC * IC, 0.25f), db(OC, 0.25f);
    matmul_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), N, IC, OC);
    Vec gw = finite_diff(f, wd), gb = finite_diff(f, bd);
    for (double& v : gw) v += 0.25;  // parameter gradients add to what was there
    for (double& v : gb) v += 0.25;
    CHECK(norm_error(dx, finite_diff(f, xd)) <= LAYER_TOL);
    CHECK(norm_error(dw, gw) <= LAYER_TOL);
    CHECK(norm_error(db, gb) <= LAYER_TOL);
}

TEST_CASE("large matmul agrees with the double reference (blocked paths, several threads)") {
    // K > KC and N over several chunks exercise the depth blocks and the column chunks of
    // host/gemm.h, and the forward's wᵀ its 16×16 transposes and their edges (300 = 18·16 + 12)
    const int N = 70, IC = 300, OC = 1100;
    Rng rng(4);
    std::vector<float> x = random_floats(N * IC, rng), w = random_floats(OC * IC, rng), out(N * OC);
    matmul_forward(out.data(), x.data(), w.data(), nullptr, N, IC, OC);
    Vec o;
    ref::matmul(o, to_double(x), to_double(w), nullptr, N, IC, OC);
    CHECK(norm_error(out, o) <= 1e-6);  // float32 dot products of 300 terms: ~1e-7 relative
}

// A deep product (the classifier's input gradient, K = Vp) goes in stretches of depth
// (host/gemm.h, KS_FLOATS: 4 MiB of packed rows): with 60 rows (fewer than IC, so the columns are
// split), K = 20000 is two of them, 17,408 and 2,592 deep, the second adding to the first.
TEST_CASE("deep matmul: the input gradient over K in stretches matches the double reference") {
    const int N = 60, IC = 100, OC = 20000;
    Rng rng(5);
    std::vector<float> x = random_floats(N * IC, rng), w = random_floats(OC * IC, rng), R = random_floats(N * OC, rng);
    std::vector<float> dx(N * IC), dw(OC * IC, 0.0f);
    matmul_backward(dx.data(), dw.data(), nullptr, R.data(), x.data(), w.data(), N, IC, OC);
    // dx = R · w in double: dx[n, i] = Σ_o R[n, o] w[o, i]
    Vec ref_dx((size_t)N * IC, 0.0);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++)
            for (int i = 0; i < IC; i++) ref_dx[(size_t)n * IC + i] += (double)R[(size_t)n * OC + o] * w[(size_t)o * IC + i];
    // float32 sums of 20,000 terms, one after the other: ~sqrt(K)·2^-24 ≈ 1e-5 relative (2.5e-6
    // measured); the first stretch lost (17,408 of the 20,000 terms) gives ~0.9
    CHECK(norm_error(dx, ref_dx) <= 1e-5);
}

// A single row (generation's decode) skips the packing (host/gemm.h, gemv_part) but must keep
// the blocked kernel's order of sums: its bits are the first row's of the same product of many
// rows, with and without a bias, K > KC (depth blocks) and N > NC (column blocks), any threads.
TEST_CASE("matmul of one row: the bits of that row in a product of many") {
    const int N = 9, IC = 300, OC = 1100;
    Rng rng(8);
    std::vector<float> x = random_floats(N * IC, rng), w = random_floats(OC * IC, rng), b = random_floats(OC, rng);
    for (const float* bias : {(const float*)nullptr, (const float*)b.data()}) {
        std::vector<float> many(N * OC), one(OC);
        matmul_forward(many.data(), x.data(), w.data(), bias, N, IC, OC);
        matmul_forward(one.data(), x.data(), w.data(), bias, 1, IC, OC);
        CHECK(memcmp(one.data(), many.data(), OC * sizeof(float)) == 0);
        Vec o, bd = to_double(b);
        ref::matmul(o, to_double(std::vector<float>(x.begin(), x.begin() + IC)), to_double(w), bias ? &bd : nullptr, 1,
                    IC, OC);
        CHECK(norm_error(one, o) <= 1e-6);  // float32 dot products of 300 terms: ~1e-7 relative
    }
}

TEST_CASE("attention backward matches finite differences") {
    const int B = 2, T = 5, C = 8, NH = 2;
    Rng rng(5);
    std::vector<float> qkv = random_floats(B * T * 3 * C, rng), R = random_floats(B * T * C, rng);
    std::vector<float> out(B * T * C), att(B * NH * T * T);
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, NH);
    Vec qd = to_double(qkv), Rd = to_double(R), o;
    ref::attention(o, qd, B, T, C, NH);
    CHECK(norm_error(out, o) <= 1e-6);  // float32 softmax and sums over ≤ 5 positions
    auto f = [&] { ref::attention(o, qd, B, T, C, NH); double s = 0; for (size_t i = 0; i < o.size(); i++) s += o[i] * Rd[i]; return s; };
    std::vector<float> dqkv(B * T * 3 * C, 7.0f);
    attention_backward(dqkv.data(), R.data(), qkv.data(), att.data(), B, T, C, NH, NH);
    CHECK(norm_error(dqkv, finite_diff(f, qd)) <= LAYER_TOL);
}

TEST_CASE("GELU backward matches finite differences") {
    Rng rng(6);
    std::vector<float> x = random_floats(64, rng, 2.0), R = random_floats(64, rng), out(64), dx(64, 7.0f);
    gelu_forward(out.data(), x.data(), 64);
    Vec xd = to_double(x), Rd = to_double(R), o;
    ref::gelu(o, xd);
    CHECK(norm_error(out, o) <= 1e-6);
    auto f = [&] { ref::gelu(o, xd); double s = 0; for (size_t i = 0; i < o.size(); i++) s += o[i] * Rd[i]; return s; };
    gelu_backward(dx.data(), x.data(), R.data(), 64);
    CHECK(norm_error(dx, finite_diff(f, xd)) <= LAYER_TOL);
}

TEST_CASE("residual: the forward adds, and the model sums the two gradient paths") {
    std::vector<float> a = {1, 2, 3}, b = {10, 20, 30}, out(3);
    residual_forward(out.data(), a.data(), b.data(), 3);
    CHECK(out == std::vector<float>{11, 22, 33});
    // The residual's backward is the identity for each input; that the stream gradient
    // is the sum of the skip and branch paths is checked by the whole-model test below.
}

TEST_CASE("softmax + cross-entropy backward matches finite differences, padded columns excluded") {
    const int N = 4, V = 7, Vp = 16;
    Rng rng(7);
    std::vector<float> logits = random_floats(N * Vp, rng, 3.0);
    for (int n = 0; n < N; n++)
        for (int i = V; i < Vp; i++) logits[n * Vp + i] = 50.0f;  // huge padded logits must not matter
    std::vector<int> targets = {0, 6, 3, 3};
    std::vector<float> losses(N), probs(N * Vp), dlogits(N * Vp, 7.0f);
    crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V, Vp);
    Vec ld = to_double(logits);
    double mean = 0;
    for (float l : losses) mean += l / N;
    double ref_loss = ref::crossentropy(ld, targets.data(), N, V, Vp);
    CHECK(std::fabs(mean - ref_loss) <= 1e-6 * std::fabs(ref_loss));  // float32 log-sum-exp
    crossentropy_backward(dlogits.data(), probs.data(), targets.data(), 1.0f / N, N, Vp);
    Vec g = finite_diff([&] { return ref::crossentropy(ld, targets.data(), N, V, Vp); }, ld);
    CHECK(norm_error(dlogits, g) <= LAYER_TOL);
    for (int n = 0; n < N; n++)
        for (int i = V; i < Vp; i++) CHECK(dlogits[n * Vp + i] == 0.0f);  // exactly: never part of the loss
}

// ----------------------------------------------------------------------------
// The whole model

// A tiny model with V not a multiple of the padding, and non-trivial LayerNorm and bias
// values so that mistakes in them cannot hide behind 1s and 0s.
static ModelConfig tiny_config() {
    ModelConfig c;
    c.maxT = 8, c.V = 37, c.Vp = 64, c.L = 2, c.NH = 2, c.C = 16;
    return c;
}
static void randomize(Model& m, uint64_t seed) {
    init_params(m.params.data(), m.cfg, seed);
    Rng rng(seed + 100);
    std::vector<size_t> sizes = m.cfg.param_sizes();
    float* p = m.params.data();
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        for (size_t j = 0; j < sizes[i]; j++) p[j] += (float)(0.1 * rng.normal());
        if (i == 0)
            for (size_t j = (size_t)m.cfg.V * m.cfg.C; j < sizes[i]; j++) p[j] = 0;  // padded rows stay 0
        p += sizes[i];
    }
}

TEST_CASE("whole-model gradient matches finite differences of the double model") {
    ModelConfig c = tiny_config();
    const int B = 2, T = 6;
    Model m;
    model_build(m, c, B, T);
    randomize(m, 11);
    Rng rng(12);
    std::vector<int> inp(B * T), tgt(B * T);
    for (int i = 0; i < B * T; i++) inp[i] = (int)rng.below(c.V), tgt[i] = (int)rng.below(c.V);

    model_forward(m, inp.data(), B, T);
    float loss = model_loss(m, tgt.data(), B, T);
    std::fill(m.grads.begin(), m.grads.end(), 0.0f);
    model_backward(m, inp.data(), tgt.data(), B, T, 1.0f / (B * T));

    Vec pd = to_double(m.params);
    double ref_loss = ref::model_loss(c, pd, inp.data(), tgt.data(), B, T);
    CHECK(std::fabs(loss - ref_loss) <= 1e-5 * ref_loss);  // float32 forward through 2 blocks

    // Finite differences for a sample of elements of every tensor (all of the small ones).
    // Tolerance 1e-4 normalised per tensor: float32 rounding accumulates through the
    // whole backward (~20 layers of ops) yet stays near 1e-6; a wrong formula gives ~1.
    std::vector<size_t> sizes = c.param_sizes();
    size_t off = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        std::vector<size_t> idx;
        size_t n = t == 0 ? (size_t)c.V * c.C : sizes[t];  // padded rows are checked below
        for (size_t k = 0; k < std::min<size_t>(n, 40); k++) idx.push_back(n <= 40 ? k : rng.below(n));
        std::vector<float> ours;
        Vec fd;
        for (size_t k : idx) {
            double keep = pd[off + k], h = 1e-4;
            pd[off + k] = keep + h;
            double up = ref::model_loss(c, pd, inp.data(), tgt.data(), B, T);
            pd[off + k] = keep - h;
            double down = ref::model_loss(c, pd, inp.data(), tgt.data(), B, T);
            pd[off + k] = keep;
            fd.push_back((up - down) / (2 * h));
            ours.push_back(m.grads[off + k]);
        }
        INFO("tensor ", PARAM_NAMES[t]);
        CHECK(norm_error(ours, fd) <= 1e-4);
        off += sizes[t];
    }
    for (size_t j = (size_t)c.V * c.C; j < sizes[0]; j++) CHECK(m.grads[j] == 0.0f);  // padded wte rows
}

// ----------------------------------------------------------------------------
// Accumulation invariance: one micro-batch of 2B equals two accumulated micro-batches of B.

struct StepOutcome {
    float loss, norm;
    std::vector<float> params;
};
static StepOutcome one_step(int B, int A, int steps = 1) {
    ModelConfig c = tiny_config();
    const int T = 6;
    Model m;
    model_build(m, c, B, T);
    randomize(m, 21);
    std::vector<uint16_t> tokens(4000);
    Rng rng(22);
    for (auto& t : tokens) t = (uint16_t)rng.below(c.V);
    DataLoader data("tokens", tokens, c.V);
    BatchPlan plan = plan_batch(B, T, 1, (long long)8 * T);
    REQUIRE(plan.A == A);
    data.configure(plan.B, plan.T, plan.A, plan.R, 0, true, 5);
    Comm single;
    StepResult r{};
    for (int s = 1; s <= steps; s++)
        r = train_step(m, data, plan, single, AdamWConfig{0.9f, 0.95f, 1e-8f, 0.1f}, 1e-3f, 0.5f, s);
    return {r.loss, r.grad_norm, m.params};
}

TEST_CASE("accumulation invariance over 3 steps: B=8 A=1 equals B=4 A=2 equals B=2 A=4") {
    // Several steps, so that a gradient left over from an earlier step (or a micro-batch's
    // gradient counted twice) shows. 1e-6 relative: the splits add the same float32 terms in
    // a different order, which changes results by a few ulps (~1e-7), never more.
    StepOutcome one = one_step(8, 1, 3), two = one_step(4, 2, 3), four = one_step(2, 4, 3);
    for (const StepOutcome* o : {&two, &four}) {
        CHECK(std::fabs(o->loss - one.loss) <= 1e-6 * std::fabs(one.loss));
        CHECK(std::fabs(o->norm - one.norm) <= 1e-6 * std::fabs(one.norm));
        CHECK(one.norm > 0.5f);  // clipping at 0.5 was active, so the clipped update is compared too
        double num = 0, den = 0;
        for (size_t i = 0; i < one.params.size(); i++) {
            num += (o->params[i] - one.params[i]) * (o->params[i] - one.params[i]);
            den += one.params[i] * one.params[i];
        }
        // the weights: Adam turns ulp-sized differences in near-zero gradients (the key bias,
        // whose true gradient is 0) into steps of lr each; measured 2.8e-6 after 3 steps, so
        // 1e-5. Micro-batches lost (gradients zeroed per micro-batch) moved them by 1.2e-2
        CHECK(std::sqrt(num / den) <= 1e-5);
    }
}

// ----------------------------------------------------------------------------
// Optimizer and schedule, against hand computations

TEST_CASE("AdamW matches a hand computation, with decay on matrices only") {
    ModelConfig c = tiny_config();
    Model m;
    model_build(m, c, 1, 1);
    Rng rng(31);
    for (float& p : m.params) p = (float)rng.normal();
    std::vector<float> p0 = m.params;
    AdamWConfig h{0.8f, 0.9f, 1e-3f, 0.5f};
    std::vector<float> g1 = random_floats(m.params.size(), rng), g2 = random_floats(m.params.size(), rng);
    m.grads = g1;
    adamw_update(m, h, 0.1f, 1);
    m.grads = g2;
    adamw_update(m, h, 0.05f, 2);
    // hand computation for the first element of each tensor, in double
    std::vector<size_t> sizes = c.param_sizes();
    size_t off = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        if (sizes[t] == 0) continue;  // wout: GPT-2's head is wte
        double p = p0[off], mm = 0, vv = 0, wd = param_decays(t) ? 0.5 : 0.0;
        double lrs[2] = {0.1, 0.05}, gs[2] = {g1[off], g2[off]};
        for (int s = 1; s <= 2; s++) {
            mm = 0.8 * mm + 0.2 * gs[s - 1];
            vv = 0.9 * vv + 0.1 * gs[s - 1] * gs[s - 1];
            double mhat = mm / (1 - std::pow(0.8, s)), vhat = vv / (1 - std::pow(0.9, s));
            p -= lrs[s - 1] * (mhat / (std::sqrt(vhat) + 1e-3) + wd * p);
        }
        INFO("tensor ", PARAM_NAMES[t]);
        CHECK(std::fabs(m.params[off] - p) <= 1e-6 * std::max(1.0, std::fabs(p)));  // float32 vs double
        off += sizes[t];
    }
    CHECK(param_decays(0));   // wte
    CHECK(!param_decays(2));  // ln1w
    CHECK(!param_decays(5));  // qkvb
}

TEST_CASE("learning-rate schedule: warm-up, cosine, floor, constant") {
    LrSchedule s{1.0f, 10, 110, 0.1f, false};
    CHECK(s.at(0) == doctest::Approx(0.1));   // (0+1)/10 of the peak
    CHECK(s.at(9) == doctest::Approx(1.0));   // warm-up ends at the peak
    CHECK(s.at(10) == doctest::Approx(1.0));  // cosine starts at the peak
    CHECK(s.at(60) == doctest::Approx(0.55));  // halfway: floor + (peak-floor)/2
    CHECK(s.at(110) == doctest::Approx(0.1));  // the floor
    LrSchedule constant{0.5f, 10, 110, 0.1f, true};
    CHECK(constant.at(0) == 0.5f);
    CHECK(constant.at(100) == 0.5f);
}

// Clipping. The norm against a hand value; then whole steps of train_step() on one batch at
// several thresholds, compared with the same step unclipped (grad_clip 0 = off). Adam is
// nearly blind to a constant factor on the gradient (m/√v cancels it, up to eps), so the
// parameters alone cannot show a wrong scale: the optimizer state can, since after step 1
// m = (1−β1)·s·g and v = (1−β2)·s²·g² for the scale s that clipping applied.
TEST_CASE("global gradient norm: a constant vector, and a 3-4-5 triangle across blocks") {
    std::vector<float> g(10000, 0.01f);
    CHECK(global_norm(g.data(), g.size()) == doctest::Approx(1.0).epsilon(1e-6));  // double sums: ~1e-7
    std::vector<float> h(9000, 0.0f);
    h[10] = 3.0f, h[8000] = 4.0f;  // in two different 4096-element blocks
    CHECK(global_norm(h.data(), h.size()) == 5.0f);  // exact: 9 + 16 = 25 in double
}

struct ClipStep {
    float norm;
    std::vector<float> params, m, v;
};
// One step of train_step() from the same model and batch, clipping at grad_clip.
static ClipStep clip_step(float grad_clip) {
    ModelConfig c = tiny_config();
    const int B = 4, T = 6;
    Model m;
    model_build(m, c, B, T);
    randomize(m, 41);
    std::vector<uint16_t> tokens(2000);
    Rng rng(42);
    for (auto& t : tokens) t = (uint16_t)rng.below(c.V);
    DataLoader data("tokens", tokens, c.V);
    BatchPlan plan = plan_batch(B, T, 1, (long long)B * T);
    data.configure(plan.B, plan.T, plan.A, plan.R, 0, false, 0);
    Comm single;
    StepResult r = train_step(m, data, plan, single, AdamWConfig{0.9f, 0.95f, 1e-8f, 0.1f}, 1e-3f, grad_clip, 1);
    return {r.grad_norm, m.params, m.adam_m, m.adam_v};
}

TEST_CASE("clipping: below the threshold the step is the unclipped one bit for bit; above, the gradient is scaled to it") {
    ClipStep off = clip_step(0.0f);
    const float N = off.norm;
    REQUIRE(N > 0.0f);
    // below (2N, and a threshold the norm never reaches): nothing is scaled, so m, v and the
    // weights are the unclipped step's bit for bit. (A scale of 2 moves m by 2x.)
    for (float threshold : {2 * N, 1e30f}) {
        ClipStep below = clip_step(threshold);
        INFO("threshold ", threshold, " norm ", N);
        CHECK(below.norm == N);
        CHECK(below.m == off.m);
        CHECK(below.v == off.v);
        CHECK(below.params == off.params);
    }
    // the boundary: clipping scales only when the norm is strictly above the threshold, so a
    // norm equal to it is left alone (scaling would multiply by N/(N + 1e-6), not by 1)
    ClipStep boundary = clip_step(N);
    CHECK(boundary.m == off.m);
    CHECK(boundary.v == off.v);
    // above (N/4): every gradient is multiplied by s = (N/4)/(N + 1e-6), so m by s and v by
    // s². 1e-6 relative: m and v are one float32 product each, ~1 ulp from the scaled value
    ClipStep above = clip_step(N / 4);
    const double s = (N / 4.0) / (N + 1e-6);
    double m_num = 0, m_den = 0, v_num = 0, v_den = 0, g_norm = 0;
    for (size_t i = 0; i < off.m.size(); i++) {
        m_num += std::pow(above.m[i] - s * off.m[i], 2), m_den += std::pow(s * off.m[i], 2);
        v_num += std::pow(above.v[i] - s * s * off.v[i], 2), v_den += std::pow(s * s * off.v[i], 2);
        g_norm += std::pow(above.m[i] / (1 - 0.9), 2);  // m = (1 − β1)·g at step 1
    }
    CHECK(std::sqrt(m_num / m_den) <= 1e-6);
    CHECK(std::sqrt(v_num / v_den) <= 1e-6);
    // the gradient AdamW saw has the threshold's norm (1e-5: float32 m, summed in double)
    CHECK(std::fabs(std::sqrt(g_norm) - N / 4) <= 1e-5 * N / 4);
    CHECK(above.params != off.params);
}

TEST_CASE("a step at a threshold the norm does not reach is AdamW on the unclipped gradient, by hand") {
    // The reference: the gradient from model_forward/model_backward (checked against finite
    // differences above), then AdamW's first update computed here in double.
    ModelConfig c = tiny_config();
    const int B = 4, T = 6;
    Model m;
    model_build(m, c, B, T);
    randomize(m, 41);
    std::vector<uint16_t> tokens(2000);
    Rng rng(42);
    for (auto& t : tokens) t = (uint16_t)rng.below(c.V);
    std::vector<int> inp(B * T), tgt(B * T);
    for (int i = 0; i < B * T; i++) inp[i] = tokens[i], tgt[i] = tokens[i + 1];  // batch 0, no shuffling
    model_forward(m, inp.data(), B, T);
    model_loss(m, tgt.data(), B, T);
    std::fill(m.grads.begin(), m.grads.end(), 0.0f);
    model_backward(m, inp.data(), tgt.data(), B, T, 1.0f / (B * T));
    std::vector<float> g = m.grads, p0 = m.params;

    ClipStep step = clip_step(1e30f);  // the same model and batch, through train_step()
    const double b1 = 0.9, b2 = 0.95, eps = 1e-8, lr = 1e-3, wd = 0.1;
    std::vector<size_t> sizes = c.param_sizes();
    size_t off = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        Vec mm(sizes[t]), vv(sizes[t]), p(sizes[t]);
        for (size_t j = 0; j < sizes[t]; j++) {
            double gj = g[off + j];
            mm[j] = (1 - b1) * gj, vv[j] = (1 - b2) * gj * gj;
            double mhat = mm[j] / (1 - b1), vhat = vv[j] / (1 - b2);
            p[j] = p0[off + j] - lr * (mhat / (std::sqrt(vhat) + eps) + (param_decays(t) ? wd : 0.0) * p0[off + j]);
        }
        auto slice = [&](const std::vector<float>& v) {
            return std::vector<float>(v.begin() + off, v.begin() + off + sizes[t]);
        };
        INFO("tensor ", PARAM_NAMES[t]);
        // float32 against double, one update: ~1e-7 relative; a scale of 2 on g is 1 for m
        CHECK(norm_error(slice(step.m), mm) <= 1e-6);
        CHECK(norm_error(slice(step.v), vv) <= 1e-6);
        CHECK(norm_error(slice(step.params), p) <= 1e-6);
        off += sizes[t];
    }
}

// ----------------------------------------------------------------------------
// Data order and batch arithmetic

TEST_CASE("data order without shuffling follows llm.c: batch i is tokens [i·B·T, i·B·T + B·T + 1)") {
    std::vector<uint16_t> tokens(1000);
    for (size_t i = 0; i < tokens.size(); i++) tokens[i] = (uint16_t)i;
    const int B = 3, T = 7;
    DataLoader d("positions", tokens, 1000);
    d.configure(B, T, 1, 1, 0, false, 0);
    std::vector<int> in(B * T), tg(B * T);
    for (int i = 0; i < 5; i++) {
        d.next_chunk();
        d.micro_batch(0, in.data(), tg.data());
        for (int j = 0; j < B * T; j++) {
            REQUIRE(in[j] == i * B * T + j);
            REQUIRE(tg[j] == i * B * T + j + 1);  // targets: the next token
        }
    }
    // after the last whole batch the loader starts a new epoch at the beginning
    long long batches = (1000 - 1) / (B * T);
    for (long long i = 5; i < batches; i++) d.next_chunk();
    d.next_chunk();
    d.micro_batch(0, in.data(), tg.data());
    CHECK(in[0] == 0);
    CHECK(d.position().epoch == 1);
}

// Tokens used by one step: the set of (micro-step, replica) micro-batches.
static std::multiset<int> step_tokens(int B, int A, int R, bool shuffle, int step) {
    std::vector<uint16_t> tokens(5000);
    for (size_t i = 0; i < tokens.size(); i++) tokens[i] = (uint16_t)i;
    std::multiset<int> used;
    for (int r = 0; r < R; r++) {
        DataLoader d("positions", tokens, 5000);
        d.configure(B, 4, A, R, r, shuffle, 9);
        for (int s = 0; s <= step; s++) d.next_chunk();
        std::vector<int> in(B * 4), tg(B * 4);
        for (int a = 0; a < A; a++) {
            d.micro_batch(a, in.data(), tg.data());
            used.insert(in.begin(), in.end());
        }
    }
    return used;
}

TEST_CASE("replicas read disjoint parts whose union is the global batch, for every split") {
    for (bool shuffle : {false, true}) {
        std::multiset<int> reference = step_tokens(8, 1, 1, shuffle, 3);
        CHECK(reference.size() == 32);
        CHECK(std::set<int>(reference.begin(), reference.end()).size() == 32);  // no token twice
        for (auto [B, A, R] : std::vector<std::tuple<int, int, int>>{{4, 2, 1}, {4, 1, 2}, {2, 2, 2}, {1, 2, 4}, {2, 4, 1}}) {
            INFO("B=", B, " A=", A, " R=", R, " shuffle=", shuffle);
            CHECK(step_tokens(B, A, R, shuffle, 3) == reference);
        }
    }
}

// Several shard files of different sizes, read over several epochs: shard s holds the tokens
// 1000·s + i, so the first input of a chunk names its shard and its place. Every epoch must
// serve every chunk of every shard exactly once (a shard's end taken from another shard's
// size skips or repeats chunks); shuffling must give each epoch its own shard order and its
// own chunk order (the same order every epoch would train on a repeating sequence); and a
// loader set to any position an earlier one passed (a resume) must serve the same chunks
// from there, across shard and epoch boundaries.
TEST_CASE("data order over several shards of different sizes, across epochs, reshuffled each epoch, and resumed anywhere") {
    std::string dir = temp_dir();
    const int B = 2, T = 4, CHUNK = B * T;
    const int chunks[4] = {5, 2, 7, 3};
    std::vector<std::string> files;
    std::vector<int> every_chunk;  // the first token of each chunk of each shard
    for (int s = 0; s < 4; s++) {
        std::vector<uint16_t> tokens(chunks[s] * CHUNK + 1 + (s == 1 ? 3 : 0));  // shard 1: 3 tokens left over
        for (size_t i = 0; i < tokens.size(); i++) tokens[i] = (uint16_t)(1000 * s + i);
        files.push_back(dir + "/shard_" + std::to_string(s) + ".bin");
        write_shard(files.back(), tokens);
        for (int c = 0; c < chunks[s]; c++) every_chunk.push_back(1000 * s + c * CHUNK);
    }
    const int per_epoch = 5 + 2 + 7 + 3, EPOCHS = 4;
    for (bool shuffle : {false, true}) {
        INFO("shuffle=", shuffle);
        DataLoader d(files, 4096);
        d.configure(B, T, 1, 1, 0, shuffle, 5);
        REQUIRE(d.chunks_per_epoch() == per_epoch);
        std::vector<DataPosition> positions;
        std::vector<int> served;
        std::vector<int> in(CHUNK), tg(CHUNK);
        for (int e = 0; e < EPOCHS; e++) {
            for (int i = 0; i < per_epoch; i++) {
                CHECK(d.position().epoch == e);
                positions.push_back(d.position());
                d.next_chunk();
                d.micro_batch(0, in.data(), tg.data());
                for (int j = 0; j < CHUNK; j++) {  // consecutive tokens of one shard, targets one ahead
                    REQUIRE(in[j] == in[0] + j);
                    REQUIRE(tg[j] == in[0] + j + 1);
                }
                served.push_back(in[0]);
            }
        }
        CHECK(d.position().epoch == EPOCHS);
        std::vector<std::vector<int>> epoch(EPOCHS);
        for (int e = 0; e < EPOCHS; e++) {
            epoch[e].assign(served.begin() + e * per_epoch, served.begin() + (e + 1) * per_epoch);
            std::vector<int> sorted = epoch[e];
            std::sort(sorted.begin(), sorted.end());
            CHECK(sorted == every_chunk);  // each chunk once per epoch
        }
        // the order of the shards in an epoch, and the order of shard 2's seven chunks
        auto shard_order = [](const std::vector<int>& chunks_served) {
            std::vector<int> order;
            for (int c : chunks_served)
                if (order.empty() || order.back() != c / 1000) order.push_back(c / 1000);
            return order;
        };
        auto chunks_of_shard_2 = [](const std::vector<int>& chunks_served) {
            std::vector<int> order;
            for (int c : chunks_served)
                if (c / 1000 == 2) order.push_back(c);
            return order;
        };
        if (!shuffle) {
            for (int e = 0; e < EPOCHS; e++) CHECK(epoch[e] == every_chunk);  // the files' order, each from its start
        } else {
            // A correct shuffle repeats the order of 4 shards in all 4 epochs with probability
            // (1/24)^3, and shard 2's order of 7 chunks with (1/5040)^3: the seed is fixed, so
            // this either always passes or never does.
            std::set<std::vector<int>> shard_orders, chunk_orders;
            for (int e = 0; e < EPOCHS; e++) {
                CHECK(shard_order(epoch[e]).size() == 4);  // a shard's chunks are served together
                shard_orders.insert(shard_order(epoch[e]));
                chunk_orders.insert(chunks_of_shard_2(epoch[e]));
            }
            CHECK(shard_orders.size() > 1);
            CHECK(chunk_orders.size() > 1);
        }
        // a resume at any position passed: the same chunks from there to the end
        for (size_t k : {1, 4, 5, 6, 8, 16, 17, 22, 40, 50}) {
            INFO("resumed at chunk ", k);
            DataLoader r(files, 4096);
            r.configure(B, T, 1, 1, 0, shuffle, 5);
            r.set_position(positions[k]);
            for (size_t i = k; i < served.size(); i++) {
                r.next_chunk();
                r.micro_batch(0, in.data(), tg.data());
                REQUIRE(in[0] == served[i]);
            }
        }
    }
    run_command("rm -rf " + dir);
}

// uint32 shards, llm.c's Llama-3 kind (vocabulary 128,256): the tokens served are the tokens
// written, ids above 65,535 included (a reader that takes them as uint16 cuts them to 16 bits,
// or reads two halves as two tokens), over two shards, from files and from memory. The
// refusals name the file: a token ≥ V, a wrong version, a mixed run. And the fingerprint of
// uint16 shards is the one checkpoints made before uint32 shards hold (pinned here).
TEST_CASE("data: uint32 shards (Llama-3's) are served as written, ids above 65,535 included; mixed kinds refused") {
    std::string dir = temp_dir();
    const int V = 128256, B = 2, T = 8, CHUNK = B * T;
    std::vector<std::vector<uint32_t>> written(2);
    std::vector<std::string> files;
    for (int s = 0; s < 2; s++) {
        written[s].resize((s == 0 ? 5 : 3) * CHUNK + 1);
        for (size_t i = 0; i < written[s].size(); i++)
            written[s][i] = (uint32_t)((i * 40009 + 65530 + 17 * s) % V);  // most of them above 65,535
        written[s][3] = V - 1, written[s][4] = 65535, written[s][5] = 65536;
        files.push_back(dir + "/llama_" + std::to_string(s) + ".bin");
        write_shard32(files.back(), written[s]);
    }
    Tokens back = read_shard(files[0], V);
    CHECK(back.token_bytes == 4);
    CHECK(back.u32 == written[0]);

    DataLoader d(files, V), m("in memory", written[0], V);
    CHECK(d.token_bytes() == 4);
    CHECK(m.token_bytes() == 4);
    CHECK(d.total_tokens() == (long long)(written[0].size() + written[1].size()));
    d.configure(B, T, 1, 1, 0, false, 0);
    m.configure(B, T, 1, 1, 0, false, 0);
    std::vector<int> in(CHUNK), tg(CHUNK), min(CHUNK), mtg(CHUNK);
    int above_16_bits = 0;
    for (int s = 0; s < 2; s++)
        for (int c = 0; c < (s == 0 ? 5 : 3); c++) {
            d.next_chunk();
            d.micro_batch(0, in.data(), tg.data());
            for (int j = 0; j < CHUNK; j++) {
                INFO("shard ", s, " chunk ", c, " position ", j);
                REQUIRE(in[j] == (int)written[s][c * CHUNK + j]);
                REQUIRE(tg[j] == (int)written[s][c * CHUNK + j + 1]);
                above_16_bits += in[j] > 65535;
            }
            if (s == 0) {
                m.next_chunk();
                m.micro_batch(0, min.data(), mtg.data());
                CHECK(min == in);
                CHECK(mtg == tg);
            }
        }
    CHECK(above_16_bits > CHUNK);

    // the refusals: the error names the file, the token, its position and V
    std::vector<uint32_t> bad = written[0];
    bad[77] = V;
    write_shard32(dir + "/badtoken.bin", bad);
    write_shard32(dir + "/version.bin", written[0], SHARD32_MAGIC, SHARD_VERSION);
    std::vector<uint16_t> gpt2(200, 7);
    write_shard(dir + "/gpt2.bin", gpt2);
    auto error_of = [](const std::function<void()>& f) -> std::string {
        try {
            f();
        } catch (const Error& e) {
            return e.what();
        }
        return "(no error)";
    };
    CHECK(error_of([&] { read_shard(dir + "/badtoken.bin", V); }) ==
          "'" + dir + "/badtoken.bin': token 128256 at position 77 is out of range for vocabulary size 128256");
    CHECK(error_of([&] { read_shard(dir + "/badtoken.bin", V + 1); }) == "(no error)");
    CHECK(error_of([&] { DataLoader("in memory", bad, V); }).find("token 128256 at position 77 is out of range") !=
          std::string::npos);
    CHECK(error_of([&] { read_shard_header(dir + "/version.bin"); }) ==
          "'" + dir + "/version.bin': unsupported shard version 1 (expected 7 with magic 20240801, uint32 tokens)");
    CHECK(error_of([&] { DataLoader({files[0], dir + "/gpt2.bin", files[1]}, V); }) ==
          "'" + dir + "/gpt2.bin' holds uint16 tokens but '" + files[0] +
              "' holds uint32 tokens: every shard of a run must be of one kind (llm.c's GPT-2 shards or its "
              "Llama-3 shards)");
    DataLoader g({dir + "/gpt2.bin"}, V);
    CHECK(g.token_bytes() == 2);
    CHECK(error_of([&] { check_same_kind(d, g); }) ==
          "'" + dir + "/gpt2.bin' (validation data) holds uint16 tokens but '" + files[0] +
              "' (training data) holds uint32 tokens: every shard of a run must be of one kind (llm.c's GPT-2 "
              "shards or its Llama-3 shards)");
    CHECK(error_of([&] { check_same_kind(d, d); }) == "(no error)");

    // uint16 shards: the fingerprints of the reader before uint32 shards, for the same files
    // and tokens (checkpoints hold them: a resume compares)
    std::vector<uint16_t> a(5000), b(300), t(1000);
    for (size_t i = 0; i < a.size(); i++) a[i] = (uint16_t)(i * 7 % 50257);
    for (size_t i = 0; i < b.size(); i++) b[i] = (uint16_t)(i * 7 % 50257);
    for (size_t i = 0; i < t.size(); i++) t[i] = (uint16_t)(i * 7 % 256);
    write_shard(dir + "/a.bin", a);
    write_shard(dir + "/b.bin", b);
    CHECK(DataLoader({dir + "/a.bin", dir + "/b.bin"}, 50257).identity().describe() ==
          "2 shards, 5,300 tokens, fingerprint 553a96ac726fcfbf");
    CHECK(DataLoader("memory", t, 256).identity().describe() == "1 shard, 1,000 tokens, fingerprint e1cd2c7d6c6831a6");
    // the same ids as uint32 are other data (another header): another fingerprint
    std::vector<uint32_t> a32(a.begin(), a.end()), b32(b.begin(), b.end());
    write_shard32(dir + "/a32.bin", a32);
    write_shard32(dir + "/b32.bin", b32);
    CHECK(!(DataLoader({dir + "/a32.bin", dir + "/b32.bin"}, 50257).identity() ==
            DataLoader({dir + "/a.bin", dir + "/b.bin"}, 50257).identity()));
    run_command("rm -rf " + dir);
}

TEST_CASE("batch arithmetic: A from the global batch, and a clear error when it does not divide") {
    BatchPlan p = plan_batch(4, 64, 2, 4096);
    CHECK(p.A == 8);
    CHECK(describe_plan(p, 500) == "micro-batch 4×64 = 256 tokens × 8 accumulation × 2 replicas = 4,096 tokens per step; "
                                   "500 steps = 2,048,000 tokens");
    CHECK(plan_batch(4, 64, 1, 0).A == 1);
    try {
        plan_batch(4, 64, 3, 4096);
        FAIL("expected an error");
    } catch (const Error& e) {
        std::string msg = e.what();
        CHECK(msg.find("4,096") != std::string::npos);
        CHECK(msg.find("4×64×3 = 768") != std::string::npos);
        CHECK(msg.find("3,840 or 4,608") != std::string::npos);  // the nearest multiples of 768
    }
}

// ----------------------------------------------------------------------------
// Checkpoints

TEST_CASE("model and state files round-trip bit-exactly; an interrupted write keeps the old file") {
    std::string dir = temp_dir();
    ModelConfig c = tiny_config();
    Model m;
    model_build(m, c, 1, 1);
    randomize(m, 41);
    Rng rng(42);
    for (float& x : m.adam_m) x = (float)rng.normal();
    for (float& x : m.adam_v) x = (float)rng.uniform();
    save_model(dir + "/model.bin", c, m.params.data());
    TrainState st{17, {2, 0, 5}, 0x1234567890abcdefull, 4096, {0xfedcba9876543210ull, 123456789012ll, 3},
                  300, {12, 0.125, -3.5e-7}, true, {}};  // a negative tr(Σ) estimate is possible early: kept as is
    save_state(dir + "/state.bin", st, m.adam_m.data(), m.adam_v.data(), m.params.size());

    ModelConfig back = read_model_header(dir + "/model.bin");
    CHECK(back.L == c.L);
    CHECK(back.V == c.V);
    CHECK(back.Vp == c.Vp);
    std::vector<float> params(back.num_params()), mm(back.num_params()), vv(back.num_params());
    load_model_params(dir + "/model.bin", back, params.data());
    TrainState st2 = load_state(dir + "/state.bin", mm.data(), vv.data(), mm.size());
    CHECK(memcmp(params.data(), m.params.data(), params.size() * 4) == 0);
    CHECK(memcmp(mm.data(), m.adam_m.data(), mm.size() * 4) == 0);
    CHECK(memcmp(vv.data(), m.adam_v.data(), vv.size() * 4) == 0);
    CHECK(st2.step == 17);
    CHECK(st2.data.epoch == 2);
    CHECK(st2.data.chunk == 5);
    CHECK(st2.sample_rng == 0x1234567890abcdefull);
    CHECK(st2.global_batch == 4096);
    CHECK(st2.train_data == st.train_data);
    CHECK(st2.run_steps == 300);
    CHECK(st2.noise.steps == 12);  // the noise scale's averages, bit for bit
    CHECK(st2.noise.g2 == 0.125);
    CHECK(st2.noise.trace == -3.5e-7);

    // A write that fails half-way (here: the temporary name is blocked by a directory)
    // reports an error and leaves the previous file as it was.
    std::vector<char> before = read_bytes(dir + "/model.bin");
    mkdir((dir + "/model.bin.tmp").c_str(), 0755);
    std::fill(m.params.begin(), m.params.end(), 0.0f);
    CHECK_THROWS_AS(save_model(dir + "/model.bin", c, m.params.data()), Error);
    CHECK(read_bytes(dir + "/model.bin") == before);
    run_command("rm -rf " + dir);
}

// ----------------------------------------------------------------------------
// The trainer as a user runs it

// The trainer under test: ./train, or the sanitizer build (TRAIN=build/asan/train).
static const std::string TRAIN = getenv("TRAIN") ? getenv("TRAIN") : "./train";
static const std::string TINY = TRAIN + " --layers 2 --heads 2 --channels 32 --max-seq-len 32 -b 4 -t 16 "
                                "--val-every 0 --sample-every 0 --threads 1 --warmup 2 ";

TEST_CASE("2N steps equal N steps + resume + N steps, bit for bit") {
    std::string a = temp_dir(), b = temp_dir(), out;
    REQUIRE(run_command(TINY + "-n 8 --ckpt-every 4 -o " + a, &out) == 0);
    // b starts from a's step-4 checkpoint only, then resumes to step 8
    REQUIRE(run_command("cp " + a + "/model_00000004.bin " + a + "/state_00000004.bin " + b) == 0);
    REQUIRE(run_command(TINY + "-n 8 --ckpt-every 4 --resume 1 -o " + b, &out) == 0);
    CHECK(out.find("resumed from step 4") != std::string::npos);
    std::vector<char> ma = read_bytes(a + "/model_00000008.bin"), mb = read_bytes(b + "/model_00000008.bin");
    CHECK(ma.size() > 1024);
    CHECK(ma == mb);
    CHECK(read_bytes(a + "/state_00000008.bin") == read_bytes(b + "/state_00000008.bin"));
    // the losses of steps 5..8 are identical too (same text in the log, minus timings)
    std::vector<std::string> la = log_lines(a + "/log.jsonl", "train"), lb = log_lines(b + "/log.jsonl", "train");
    REQUIRE(la.size() == 8);
    REQUIRE(lb.size() == 4);
    for (int i = 0; i < 4; i++) CHECK(strip_timing(la[4 + i]) == strip_timing(lb[i]));
    run_command("rm -rf " + a + " " + b);
}

TEST_CASE("a fresh run refuses to overwrite an earlier run's checkpoints") {
    std::string dir = temp_dir(), out;
    REQUIRE(run_command(TINY + "-n 2 -o " + dir) == 0);
    std::vector<char> before = read_bytes(dir + "/model_00000002.bin");
    CHECK(run_command(TINY + "-n 2 -o " + dir, &out) == 1);
    CHECK(out.find("already holds checkpoints up to step 2") != std::string::npos);
    CHECK(read_bytes(dir + "/model_00000002.bin") == before);
    run_command("rm -rf " + dir);
}

TEST_CASE("the default run trains: loss falls and the log has every field") {
    std::string dir = temp_dir(), out;
    REQUIRE(run_command(TINY + "-n 30 -l 3e-3 --val-every 15 -o " + dir, &out) == 0);
    std::vector<std::string> train = log_lines(dir + "/log.jsonl", "train"), val = log_lines(dir + "/log.jsonl", "val");
    REQUIRE(train.size() == 30);
    REQUIRE(val.size() == 3);  // steps 0, 15, 30
    auto field = [](const std::string& line, const std::string& key) {
        size_t p = line.find("\"" + key + "\":");
        return p == std::string::npos ? NAN : atof(line.c_str() + p + key.size() + 3);
    };
    for (const char* key : {"step", "loss", "lr", "grad_norm", "ms", "sync_ms", "tokens_per_s", "tokens"})
        CHECK(std::isfinite(field(train.back(), key)));
    // how far 30 steps get (the bands and how they were chosen: test_util.h)
    const double reached[3] = {field(train.front(), "loss"), field(val[1], "val_loss"), field(val[2], "val_loss")};
    for (int i = 0; i < 3; i++) {
        INFO(DEFAULT_RUN_BANDS[i].what);
        CHECK(reached[i] > DEFAULT_RUN_BANDS[i].low);
        CHECK(reached[i] < DEFAULT_RUN_BANDS[i].high);
    }
    CHECK(out.find("entropy is 0.2687 nats/token") != std::string::npos);
    run_command("rm -rf " + dir);
}

// Every bad input: one line naming the file or the numbers, and a non-zero exit.
TEST_CASE("bad input gives one clear error line and a non-zero exit") {
    std::string dir = temp_dir();
    std::vector<uint16_t> good(5000, 1), bad_token(5000, 1);
    bad_token[123] = 300;  // ≥ V = 256
    write_shard(dir + "/good.bin", good);
    write_shard(dir + "/badtoken.bin", bad_token);
    write_shard(dir + "/magic.bin", good, 12345);
    write_shard(dir + "/version.bin", good, SHARD_MAGIC, 7);
    write_shard(dir + "/small.bin", std::vector<uint16_t>(20, 1));
    std::vector<char> shard = read_bytes(dir + "/good.bin");
    write_bytes(dir + "/truncated.bin", shard.data(), shard.size() - 100);
    // a model file, then a truncated copy and one with a wrong magic number
    std::string model = dir + "/model.bin";
    REQUIRE(run_command(TINY + "-n 1 -o " + dir + "/run") == 0);
    REQUIRE(run_command("cp " + dir + "/run/model_00000001.bin " + model) == 0);
    std::vector<char> mbytes = read_bytes(model);
    write_bytes(dir + "/model_trunc.bin", mbytes.data(), mbytes.size() - 4);
    mbytes[0] = 1;
    write_bytes(dir + "/model_magic.bin", mbytes.data(), mbytes.size());

    std::string data = " -i " + dir + "/good.bin -j " + dir + "/good.bin --vocab 256 ";
    struct Case {
        std::string args, expect;
        int code;
    };
    std::vector<Case> cases = {
        {"-i " + dir + "/missing.bin -j " + dir + "/good.bin", "no file matches '" + dir + "/missing.bin'", 1},
        {"-i " + dir + "/magic.bin -j " + dir + "/good.bin --vocab 256", "is not a token shard (magic 12345", 1},
        {"-i " + dir + "/version.bin -j " + dir + "/good.bin --vocab 256", "unsupported shard version 7", 1},
        {"-i " + dir + "/truncated.bin -j " + dir + "/good.bin --vocab 256", "truncated.bin' is truncated", 1},
        {"-i " + dir + "/badtoken.bin -j " + dir + "/good.bin --vocab 256", "token 300 at position 123 is out of range", 1},
        {"-i " + dir + "/small.bin -j " + dir + "/good.bin --vocab 256", "small.bin' has 20 tokens, too few", 1},
        {"-e " + dir + "/nothere.bin", "cannot open model file", 1},
        {"-e " + dir + "/model_trunc.bin", "model_trunc.bin' is truncated or damaged", 1},
        {"-e " + dir + "/model_magic.bin", "is not a model file (magic", 1},
        {"-e " + model + " -t 64", "--seq-len 64 is longer than the model's maximum sequence length 32", 1},
        {data + "-d 100", "global batch 100 tokens is not a multiple of B×T×R = 4×16×1 = 64", 1},
        {"--no-such-option 3", "unknown option '--no-such-option'", 2},
        {"-b x", "--batch-size expects an integer, got 'x'", 2},
        {"--shuffle 2", "--shuffle expects 0 or 1", 2},
        {"--lr", "--lr needs a value", 2},
        {"--channels 30 --heads 4", "--channels 30 is not divisible by --heads 4", 2},
    };
    for (const Case& c : cases) {
        std::string out;
        int code = run_command(TINY + "-n 1 -o \"\" " + c.args, &out);
        INFO("args: ", c.args, "\noutput: ", out);
        CHECK(code == c.code);
        CHECK(out.find(c.expect) != std::string::npos);
        // the error is the last line, and the only line that mentions an error
        CHECK(std::count(out.begin(), out.end(), '\n') >= 1);
        CHECK(out.find("rror") == out.rfind("rror"));
    }
    run_command("rm -rf " + dir);
}

TEST_CASE("--help lists every option the parser accepts, with its default") {
    std::string out;
    CHECK(run_command(TRAIN + " --help", &out) == 0);
    Config c;
    for (const Option& o : option_table(c)) {
        INFO("option ", o.name);
        CHECK(out.find(std::string("--") + o.name + " ") != std::string::npos);
    }
    CHECK(out.find("[3e-3]") == std::string::npos);  // defaults are printed as parsed values
    CHECK(out.find("[0.003]") != std::string::npos);
}

// ----------------------------------------------------------------------------
// Hardening: the guards behind the bad-input table (test/hardening/bad_inputs.sh), at the level
// of the functions that hold them.

TEST_CASE("a NaN in the gradient stops the step before the update, naming the gradient norm") {
    ModelConfig c = tiny_config();  // Vp 64 > V 37: wte rows 37..63 are padding
    Model m;
    model_build(m, c, 2, 4);
    randomize(m, 5);
    // a NaN in a padding row: the loss stays finite (padded logits are never used), the
    // gradient does not (it flows back through the tied output head)
    m.params[(size_t)40 * c.C + 3] = NAN;
    std::vector<float> before = m.params, m_before = m.adam_m;
    std::vector<uint16_t> tokens(200);
    for (size_t i = 0; i < tokens.size(); i++) tokens[i] = (uint16_t)(i % c.V);
    DataLoader data("tokens", tokens, c.V);
    BatchPlan plan = plan_batch(2, 4, 1, 0);
    data.configure(2, 4, 1, 1, 0, false, 0);
    Comm single;
    std::string msg;
    try {
        train_step(m, data, plan, single, AdamWConfig{0.9f, 0.95f, 1e-8f, 0.1f}, 1e-3f, 1.0f, 1);
    } catch (const NonFiniteStep& e) {
        msg = e.what();
    }
    CHECK(msg.find("the gradient norm is nan at step 1 (loss ") != std::string::npos);
    // nothing was updated: NaN == NaN is false, so compare the bytes
    CHECK(memcmp(before.data(), m.params.data(), before.size() * 4) == 0);
    CHECK(memcmp(m_before.data(), m.adam_m.data(), m_before.size() * 4) == 0);
}

TEST_CASE("no checkpoint file is written that holds a NaN or an infinity") {
    std::string dir = temp_dir();
    ModelConfig c = tiny_config();
    Model m;
    model_build(m, c, 1, 1);
    randomize(m, 7);
    save_model(dir + "/model.bin", c, m.params.data());
    std::vector<char> good = read_bytes(dir + "/model.bin");
    m.params[c.num_params() - 1] = INFINITY;  // lnfb, the last tensor
    try {
        save_model(dir + "/model.bin", c, m.params.data());
        FAIL("expected an error");
    } catch (const NonFiniteValues& e) {
        CHECK(std::string(e.what()).find("1 non-finite value (NaN or infinity), the first in lnfb") != std::string::npos);
    }
    CHECK(read_bytes(dir + "/model.bin") == good);  // the earlier file, untouched
    CHECK(!file_exists(dir + "/model.bin.tmp"));
    m.adam_v[3] = NAN;
    CHECK_THROWS_AS(save_state(dir + "/state.bin", TrainState{}, m.adam_m.data(), m.adam_v.data(), m.adam_v.size()),
                    NonFiniteValues);
    CHECK(!file_exists(dir + "/state.bin"));
    run_command("rm -rf " + dir);
}

TEST_CASE("batch arithmetic is range-checked in 64 bits before anything is narrowed") {
    // (the SIGFPE of -d 1099511627776 -b 1 -t 1, and the 1-token steps of -d 4294967297)
    CHECK_THROWS_AS(plan_batch(1, 1, 1, 1099511627776ll), Error);
    CHECK_THROWS_AS(plan_batch(1, 1, 1, 4294967297ll), Error);
    CHECK_THROWS_AS(plan_batch(1, 1, 1, MAX_GLOBAL_BATCH), Error);  // A = 2^32 does not fit an int
    CHECK_THROWS_AS(plan_batch(65536, 65536, 1, 0), Error);        // B·T = 2^32 does not fit an int
    CHECK_THROWS_AS(plan_batch(2, 1, 1, MAX_GLOBAL_BATCH), Error);  // A = 2^31: one more than an int holds
    CHECK(plan_batch(4, 1, 1, MAX_GLOBAL_BATCH).A == 1 << 30);      // the largest global batch accepted
}

TEST_CASE("a data position from a state file is checked against the data before it is used") {
    std::vector<uint16_t> tokens(1000, 1);
    DataLoader d("tokens", tokens, 10);
    d.configure(4, 8, 1, 1, 0, true, 3);  // chunks of 32 tokens: (1000 - 1) / 32 = 31 of them
    CHECK(d.position_problem({0, 0, 30}).empty());
    CHECK(d.position_problem({0, 0, 31}).find("chunk 31 of 'tokens', which has 31 chunks of 32 tokens") !=
          std::string::npos);
    CHECK(d.position_problem({0, 1000000, 0}).find("shard 1000000, but the data has 1 shard") != std::string::npos);
    CHECK(!d.position_problem({0, 0, -7}).empty());
    CHECK(!d.position_problem({-1, 0, 0}).empty());
    CHECK_THROWS_AS(d.set_position({0, 0, -7}), Error);
}

TEST_CASE("checkpoint rotation keeps the newest N complete pairs and never the only one") {
    std::string dir = temp_dir();
    auto touch = [&](const std::string& name) { write_bytes(dir + "/" + name, "x", 1); };
    for (int step : {1, 2, 3, 4}) touch(strf("model_%08d.bin", step)), touch(strf("state_%08d.bin", step));
    touch("state_00000005.bin");  // an incomplete newer pair (a crash before the model's rename)
    touch("model_00000000.bin");  // an orphan older than every complete pair
    CHECK(prune_checkpoints(dir, 2) == std::vector<int>{0, 1, 2});
    CHECK(complete_checkpoints(dir) == std::vector<int>{3, 4});
    CHECK(file_exists(dir + "/state_00000005.bin"));  // newer than the kept pairs: not touched
    CHECK(prune_checkpoints(dir, 1) == std::vector<int>{3});
    CHECK(complete_checkpoints(dir) == std::vector<int>{4});
    CHECK(prune_checkpoints(dir, 1).empty());  // the only complete pair stays
    CHECK(prune_checkpoints(dir, 0).empty());  // 0 keeps everything
    CHECK(complete_checkpoints(dir) == std::vector<int>{4});
    touch("model_00000004.bin.tmp"), touch("state_00000009.bin.tmp"), touch("notes.tmp");
    CHECK(remove_stale_temporaries(dir).size() == 2);
    CHECK(file_exists(dir + "/notes.tmp"));  // not a name this program writes
    run_command("rm -rf " + dir);
}

// ----------------------------------------------------------------------------
// Comparable numbers (issue 13): evaluation independent of the split, exact resume of
// samples, sample-only runs, steps from tokens, schedule changes on resume, mismatched files

TEST_CASE("validation: exactly the first --val-tokens tokens, the same loss for every micro-batch and replica share") {
    ModelConfig c = tiny_config();  // maxT 8
    const int T = 6;
    std::vector<uint16_t> tokens(1000);
    Rng rng(77);
    for (auto& t : tokens) t = (uint16_t)rng.below(c.V);
    CpuTrainer m(c, plan_batch(8, T, 1, 0), Config{}, Comm{});
    Model probe;
    model_build(probe, c, 1, 1);
    randomize(probe, 78);
    std::copy(probe.params.begin(), probe.params.end(), m.params());
    DataLoader data("tokens", tokens, c.V);
    // 100 tokens: 16 whole sequences of 6 (the last 4 tokens make no sequence)
    ValidationSet all = validation_set(data, 100, T, 0, 1);
    CHECK(all.total == 16);
    CHECK(all.tokens() == 96);
    for (int s = 0; s < 16; s++) CHECK(all.inputs[s * T] == tokens[s * T]);  // in order from the start
    // the independent reference: the double model's mean loss over the same 16 sequences;
    // 1e-5 relative: a float32 forward against a double one (as the whole-model check)
    Vec params(m.params(), m.params() + c.num_params());
    double expected = 0;
    for (int s = 0; s < 16; s++)
        expected += ref::model_loss(c, params, &all.inputs[s * T], &all.targets[s * T], 1, T) / 16;
    double at8 = validation_loss(m, all, 8, Comm{});
    CHECK(std::fabs(at8 - expected) <= 1e-5 * expected);
    // every micro-batch size gives the same bits: each position's loss does not depend on B
    for (int B : {1, 3, 5}) CHECK(validation_loss(m, all, B, Comm{}) == at8);
    // replica shares: contiguous, disjoint, covering all 16 sequences, for R = 2, 3 and 5
    for (int R : {2, 3, 5}) {
        long long next = 0;
        for (int r = 0; r < R; r++) {
            ValidationSet share = validation_set(data, 100, T, r, R);
            CHECK(share.first == next);
            CHECK(std::equal(share.inputs.begin(), share.inputs.end(), all.inputs.begin() + next * T));
            next += share.count;
        }
        CHECK(next == 16);
    }
    // more than the data holds: all of it, (1000 - 1) / 6 = 166 sequences
    CHECK(validation_set(data, 1 << 20, T, 0, 1).total == 166);
    CHECK_THROWS_AS(validation_set(data, 5, T, 0, 1), Error);  // less than one sequence
}

// The sum and the sum of absolute values of n numbers, in double, first to last.
template <typename T>
static std::pair<double, double> sums(const T* x, size_t n) {
    double s = 0, a = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i], a += std::fabs((double)x[i]);
    return {s, a};
}
// The writer summed the same values in double in another order: the sums agree to ~1e-16 of
// the sum of absolute values; 1e-12 of it leaves room and still catches any value misplaced.
static void check_sums(const std::pair<double, double>& ours, double sum, double abs_sum) {
    CHECK(std::fabs(ours.second - abs_sum) <= 1e-12 * abs_sum);
    CHECK(std::fabs(ours.first - sum) <= 1e-12 * abs_sum);
}

TEST_CASE("golden files: version 2 reads back what llama_reference.py wrote, with its model file; version 1 as before") {
    Golden g = read_golden("test/golden/llama_reference_tiny.bin");
    CHECK(g.version == 2);
    CHECK(g.cfg.llama());
    CHECK(g.cfg.tied == 0);
    // the companion text: the writer's own record of the element counts and of every section
    std::ifstream text("test/golden/llama_reference_tiny.txt");
    REQUIRE(text);
    std::vector<std::string> tensors;
    std::vector<double> counts;
    std::map<std::string, std::vector<double>> section, init, grad, after;
    std::string line, kind, name;
    while (std::getline(text, line)) {
        std::istringstream in(line);
        in >> kind >> name;
        std::vector<double> v;
        for (double x; in >> x;) v.push_back(x);
        if (kind == "tensor") tensors.push_back(name), counts.push_back(v.empty() ? -1 : v[0]);
        if (kind == "section") section[name] = v;
        if (kind == "init") init[name] = v;
        if (kind == "grad") grad[name] = v;
        if (kind == "after") after[name] = v;
    }
    REQUIRE(tensors.size() == 17);
    REQUIRE(g.sizes.size() == 17);
    for (size_t t = 0; t < 17; t++) CHECK(g.sizes[t] == counts[t]);
    CHECK(tensors[16] == "wout");
    size_t n = 0;
    for (size_t s : g.sizes) n += s;
    // section name -> what the reader made of it (first and last compared exactly: the text
    // holds each float32 to 9 digits, which round-trips)
    std::vector<float> hp = {g.lr, g.beta1, g.beta2, g.eps, g.weight_decay, g.grad_clip, 0, 0};
    std::vector<float> lf = {g.cfg.norm_eps, g.cfg.rope_theta, g.cfg.rope_factor, g.cfg.rope_low_freq,
                             g.cfg.rope_high_freq, 0, 0, 0};
    std::vector<float> loss = {g.loss};
    std::vector<float> inputs(g.inputs.begin(), g.inputs.end()), targets(g.targets.begin(), g.targets.end());
    std::map<std::string, const std::vector<float>*> read = {
        {"hyperparameters", &hp}, {"llama", &lf},   {"inputs", &inputs},       {"targets", &targets},
        {"logits", &g.logits},    {"loss", &loss},  {"grads", &g.grads},       {"losses", &g.losses},
        {"params_after", &g.params_after}};
    REQUIRE(section.size() == read.size());
    for (auto& [what, ref] : section) {
        CAPTURE(what);
        REQUIRE(read.count(what));
        const std::vector<float>& x = *read[what];
        REQUIRE(ref.size() == 5);  // elements, first, last, sum, sum of absolute values
        REQUIRE(x.size() == (size_t)ref[0]);
        CHECK(x.front() == (float)ref[1]);
        CHECK(x.back() == (float)ref[2]);
        check_sums(sums(x.data(), x.size()), ref[3], ref[4]);
    }
    CHECK(g.grads.size() == n);
    // each tensor at the offset the reader's sizes give it, in the golden file and in the model file
    std::vector<char> model = read_bytes("test/golden/llama_tiny.bin");
    REQUIRE(model.size() == 1024 + 4 * n);
    std::vector<int> h(256);
    std::vector<float> params(n);
    memcpy(h.data(), model.data(), 1024), memcpy(params.data(), model.data() + 1024, 4 * n);
    CHECK(h[0] == 20240803);
    CHECK(h[1] == 3);
    CHECK(std::vector<int>(h.begin() + 2, h.begin() + 8) ==
          std::vector<int>{g.cfg.maxT, g.cfg.V, g.cfg.L, g.cfg.NH, g.cfg.KVH, g.cfg.C});
    CHECK(h[16] == 1);
    CHECK(std::vector<int>(h.begin() + 17, h.begin() + 21) ==
          std::vector<int>{g.cfg.Vp, g.cfg.F, g.cfg.tied, g.cfg.rope_original_T});
    std::vector<float> model_floats(5);
    memcpy(model_floats.data(), h.data() + 21, 20);
    CHECK(model_floats == std::vector<float>(lf.begin(), lf.begin() + 5));
    size_t off = 0, present = 0;
    for (size_t t = 0; t < 17; t++) {
        CAPTURE(tensors[t]);
        if (g.sizes[t] > 0) {
            present++;
            REQUIRE(init.count(tensors[t]));
            check_sums(sums(params.data() + off, g.sizes[t]), init[tensors[t]][0], init[tensors[t]][1]);
            check_sums(sums(g.grads.data() + off, g.sizes[t]), grad[tensors[t]][0], grad[tensors[t]][1]);
            check_sums(sums(g.params_after.data() + off, g.sizes[t]), after[tensors[t]][0], after[tensors[t]][1]);
        } else {
            CHECK(init.count(tensors[t]) == 0);
        }
        off += g.sizes[t];
    }
    CHECK(present == 9);
    CHECK(present == init.size());

    // version 1 reads as it always did: GPT-2's 16 tensors, LayerNorm, tied head
    Golden g1 = read_golden("test/golden/reference_tiny.bin");
    CHECK(g1.version == 1);
    CHECK(g1.sizes == g1.cfg.param_sizes());
    CHECK(g1.grads.size() == g1.cfg.num_params());
    CHECK(g1.params_after.size() == g1.cfg.num_params());
    CHECK((!g1.cfg.llama() && g1.cfg.tied_head() && g1.cfg.kv_heads() == g1.cfg.NH && g1.cfg.hidden() == 4 * g1.cfg.C));

    // a damaged copy is refused: one byte short, one byte more, another version, a bad KVH
    std::string dir = temp_dir();
    std::vector<char> bytes = read_bytes("test/golden/llama_reference_tiny.bin");
    auto refused = [&](std::vector<char> b, const char* why) {
        write_bytes(dir + "/g.bin", b.data(), b.size());
        try {
            read_golden(dir + "/g.bin");
            return false;
        } catch (const Error& e) {
            return std::string(e.what()).find(why) != std::string::npos;
        }
    };
    CHECK(refused(std::vector<char>(bytes.begin(), bytes.end() - 1), "truncated"));
    std::vector<char> longer = bytes;
    longer.push_back(0);
    CHECK(refused(longer, "after its last field"));
    std::vector<char> v3 = bytes;
    v3[4] = 3;
    CHECK(refused(v3, "version 1 to 2"));
    std::vector<char> kvh = bytes;
    kvh[12 * 4] = 3;  // NH = 4
    CHECK(refused(kvh, "not a multiple of KVH"));
    run_command("rm -rf " + dir);
}

TEST_CASE("HellaSwag: every example's scores and choices match the PyTorch reference") {
    HellaSwagReference gold = read_hellaswag_reference("test/golden/hellaswag_tiny_reference.txt");
    ModelConfig mc = read_model_header("test/golden/model_tiny.bin");
    std::vector<EvalExample> examples = read_eval_file("test/golden/hellaswag_tiny.bin", mc.V, gold.T);
    REQUIRE(examples.size() == gold.label.size());
    REQUIRE(examples.size() >= 50);
    CpuTrainer m(mc, plan_batch(8, gold.T, 1, 0), Config{}, Comm{});
    load_model_params("test/golden/model_tiny.bin", mc, m.params());
    // 5 rows per micro-batch: most examples' 4 endings straddle two micro-batches
    std::vector<ExampleScores> scores = score_examples(m, examples, 0, examples.size(), 5, gold.T);
    int truncated = 0, right = 0, right_norm = 0;
    for (size_t e = 0; e < examples.size(); e++) {
        CAPTURE(e);
        CHECK(examples[e].label == gold.label[e]);
        CHECK(scores[e].pred == gold.pred[e]);
        CHECK(scores[e].pred_norm == gold.pred_norm[e]);
        for (int k = 0; k < 4; k++) {
            // float32 against float64: the losses agree to ~1e-6 relative (~5e-6 of a loss
            // near ln 91); 1e-5 for a mean, and per token for a sum
            size_t n = examples[e].endings[k].size();
            CHECK(std::fabs(scores[e].mean[k] - gold.mean[e][k]) <= 1e-5);
            CHECK(std::fabs(scores[e].sum[k] - gold.sum[e][k]) <= 1e-5 * n);
            truncated += examples[e].context.size() + n > (size_t)gold.T + 1;
        }
        right += gold.pred[e] == gold.label[e], right_norm += gold.pred_norm[e] == gold.label[e];
    }
    CHECK(truncated > 20);  // the rule that cuts contexts to fit T was exercised
    CHECK(right != right_norm);  // and the two scores choose differently somewhere
    // the accuracies over the set, and the same for any micro-batch size
    for (int B : {1, 8}) {
        HellaSwagResult r = hellaswag_accuracy(m, examples, B, gold.T, Comm{});
        CHECK(r.examples == (long long)examples.size());
        CHECK(r.acc == (double)right / examples.size());
        CHECK(r.acc_norm == (double)right_norm / examples.size());
    }
}

TEST_CASE("terminal text: control bytes and invalid UTF-8 escaped, valid UTF-8 kept") {
    CHECK(terminal_text("plain text.\nnext line\tx") == "plain text.\nnext line\tx");
    CHECK(terminal_text("a\nb\tc", false) == "a\\nb\\tc");                       // a prompt keeps one line
    CHECK(terminal_text("bell\x07 esc\x1b[2J del\x7f") == "bell\\x07 esc\\x1b[2J del\\x7f");
    CHECK(terminal_text("caf\xc3\xa9 \xe6\x9d\xb1 \xf0\x9f\x8e\xad") == "caf\xc3\xa9 \xe6\x9d\xb1 \xf0\x9f\x8e\xad");
    CHECK(terminal_text("\xc2\x9b") == "\\xc2\\x9b");        // U+009B, a C1 control (CSI)
    CHECK(terminal_text("\xe9t\xe9") == "\\xe9t\\xe9");      // Latin-1, not UTF-8
    CHECK(terminal_text("\xc3") == "\\xc3");                 // cut off
    CHECK(terminal_text("\xc0\xaf") == "\\xc0\\xaf");        // overlong '/'
    CHECK(terminal_text("\xed\xa0\x80") == "\\xed\\xa0\\x80"); // a surrogate
    CHECK(terminal_text("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // beyond U+10FFFF
}

TEST_CASE("steps from --train-tokens: the division, what rounding down leaves out, and its limits") {
    std::string division;
    // llm.c's recipe: 10e9 / 524,288 = 19,073.49...; 19,073 · 524,288 = 9,999,745,024
    CHECK(steps_from_tokens(10000000000ll, 524288, division) == 19073);
    CHECK(division == "10,000,000,000 tokens / 524,288 tokens per step = 19,073 steps (rounding down leaves out "
                      "the last 254,976 tokens)");
    CHECK(steps_from_tokens(4096, 1024, division) == 4);
    CHECK(division == "4,096 tokens / 1,024 tokens per step = 4 steps exactly");
    CHECK_THROWS_AS(steps_from_tokens(1023, 1024, division), Error);
    CHECK_THROWS_AS(steps_from_tokens(1ll << 62, 1, division), Error);  // more steps than an int holds
    std::string out;
    REQUIRE(run_command(TINY + "--train-tokens 1000 -o '' --dry-run 1", &out) == 0);  // 64 tokens per step
    CHECK(out.find("1,000 tokens / 64 tokens per step = 15 steps (rounding down leaves out the last 40 tokens)") !=
          std::string::npos);
    CHECK(out.find("64 tokens per step; 15 steps = 960 tokens") != std::string::npos);
}

TEST_CASE("resume: the samples, the validation, the log and the state equal an uninterrupted run's, byte for byte") {
    std::string a = temp_dir(), b = temp_dir(), out_a, out_b;
    const std::string run = TINY + "-n 8 --ckpt-every 4 --val-every 2 --sample-every 2 --val-tokens 512 ";
    REQUIRE(run_command(run + "-o " + a, &out_a) == 0);
    REQUIRE(run_command("cp " + a + "/model_00000004.bin " + a + "/state_00000004.bin " + b) == 0);
    REQUIRE(run_command(run + "--resume 1 -o " + b, &out_b) == 0);
    CHECK(read_bytes(a + "/state_00000008.bin") == read_bytes(b + "/state_00000008.bin"));  // sampler state included
    CHECK(read_bytes(a + "/model_00000008.bin") == read_bytes(b + "/model_00000008.bin"));
    // every record after step 4 (train, val, sample), minus timings, in the same order
    auto after_step_4 = [](const std::string& dir) {
        std::ifstream f(dir + "/log.jsonl");
        std::vector<std::string> lines;
        bool on = false;
        for (std::string line; std::getline(f, line);) {
            if (line.find("\"type\":\"train\",\"step\":5,") != std::string::npos) on = true;
            if (on) lines.push_back(strip_timing(line));
        }
        return lines;
    };
    std::vector<std::string> la = after_step_4(a), lb = after_step_4(b);
    CHECK(la.size() == 4 + 2 + 2);  // train 5..8, val at 6 and 8, samples at 6 and 8
    CHECK(la == lb);
    // the console too: everything from step 5 on but the timings (step lines, the average)
    auto from_step_5 = [](const std::string& out, const std::string& dir) {
        std::istringstream in(out.substr(out.find("step     5/")));
        std::string kept;
        for (std::string line; std::getline(in, line);)
            if (line.find(" ms") == std::string::npos) kept += line.substr(0, line.find(dir)) + "\n";
        return kept;
    };
    CHECK(from_step_5(out_a, a).find("---- sample at step 6") != std::string::npos);
    CHECK(from_step_5(out_a, a).find("step 8 | val loss") != std::string::npos);
    CHECK(from_step_5(out_a, a) == from_step_5(out_b, b));
    run_command("rm -rf " + a + " " + b);
}

// The learning rate each step of a run trains with, from the log, against the schedule
// written out here in double: warm-up to the peak, then a cosine down to the floor, which a
// run reaches (to within its last step) only when the trainer builds the schedule from the
// options as given. The log prints 7 significant digits of a float32: 2e-6 relative.
TEST_CASE("learning-rate schedule of a run: the log's lr at every step, warm-up, cosine and floor, by hand") {
    std::string dir = temp_dir(), out;
    const int steps = 24, warmup = 3;
    const double peak = 2e-3, floor_frac = 0.25;
    REQUIRE(run_command(TINY + "-n 24 --warmup 3 -l 2e-3 --lr-final-frac 0.25 -o " + dir, &out) == 0);
    std::vector<std::string> lines = log_lines(dir + "/log.jsonl", "train");
    REQUIRE(lines.size() == (size_t)steps);
    const double pi = std::acos(-1.0);
    for (int t = 1; t <= steps; t++) {  // step t trains with the schedule at t - 1
        int s = t - 1;
        double expected = s < warmup ? peak * (s + 1) / warmup
                                     : peak * floor_frac + peak * (1 - floor_frac) * 0.5 *
                                                               (1 + std::cos(pi * (s - warmup) / (steps - warmup)));
        const std::string& line = lines[t - 1];
        size_t at = line.find("\"lr\":");
        REQUIRE(at != std::string::npos);
        double lr = std::atof(line.c_str() + at + 5);
        INFO("step ", t, ": ", line);
        CHECK(std::fabs(lr - expected) <= 2e-6 * expected);
    }
    run_command("rm -rf " + dir);
}

// The gradient noise scale's moving averages are part of the state: a run resumed at step 4
// logs the same |G_small|, |G_big| and B_noise at steps 5..8 as the run never stopped. A = 2
// (a global batch of twice B·T) so that it is measured.
TEST_CASE("resume: the noise scale of a resumed run equals the uninterrupted run's, field for field") {
    std::string a = temp_dir(), b = temp_dir(), out;
    const std::string run = TINY + "-n 8 --ckpt-every 4 -d 128 --noise-ema 0.9 ";
    REQUIRE(run_command(run + "-o " + a, &out) == 0);
    REQUIRE(run_command("cp " + a + "/model_00000004.bin " + a + "/state_00000004.bin " + b) == 0);
    REQUIRE(run_command(run + "--resume 1 -o " + b, &out) == 0);
    auto noise_fields = [](const std::string& line) {
        size_t at = line.find(",\"grad_norm_small\"");
        return at == std::string::npos ? std::string() : line.substr(at);
    };
    std::vector<std::string> la = log_lines(a + "/log.jsonl", "train"), lb = log_lines(b + "/log.jsonl", "train");
    REQUIRE(la.size() == 8);
    REQUIRE(lb.size() == 4);
    for (int i = 0; i < 4; i++) {
        INFO("step ", 5 + i);
        CHECK(noise_fields(la[4 + i]).find("\"noise_scale\"") != std::string::npos);
        CHECK(noise_fields(la[4 + i]) == noise_fields(lb[i]));
    }
    run_command("rm -rf " + a + " " + b);
}

// Each stop signal, in a child process that catches them as the trainer does: the first is
// recorded (the run stops after its step), not fatal; a second ends the process at once with
// 128 + the signal, the status a shell shows for it. SIGUSR1 is what Slurm's --signal sends
// before a time limit; SIGINT is Ctrl-C.
TEST_CASE("signals: SIGINT, SIGTERM and SIGUSR1 each ask the run to stop; a second one exits at once") {
    for (int sig : {SIGINT, SIGTERM, SIGUSR1}) {
        for (int count : {1, 2}) {
            INFO("signal ", sig, " sent ", count, " time(s)");
            pid_t pid = fork();
            REQUIRE(pid >= 0);
            if (pid == 0) {
                catch_stop_signals();
                for (int i = 0; i < count; i++) raise(sig);
                _exit(stop_signal_received() == sig ? 0 : 1);
            }
            int status = 0;
            REQUIRE(waitpid(pid, &status, 0) == pid);
            REQUIRE(WIFEXITED(status));  // not ended by the signal itself
            CHECK(WEXITSTATUS(status) == (count == 1 ? 0 : 128 + sig));
        }
    }
}

TEST_CASE("-n 0 samples from a model file without training: the prompt shown, nothing written") {
    std::string dir = temp_dir(), out;
    // a trained model whose only sample is at its last step, from a fresh sampler
    REQUIRE(run_command(TINY + "-n 6 --sample-every 6 --prompt 'the ' -o " + dir, &out) == 0);
    std::vector<std::string> trained = log_lines(dir + "/log.jsonl", "sample");
    REQUIRE(trained.size() == 1);
    CHECK(trained[0].find("\"prompt\":\"the \"") != std::string::npos);
    std::vector<char> log_before = read_bytes(dir + "/log.jsonl");
    // -n 0 with the same model, prompt and seed draws the same sample; the run directory,
    // which holds checkpoints, is neither refused nor written to
    std::string sample_only = TINY + "-e " + dir + "/model_00000006.bin -n 0 --sample-every 6 --prompt 'the ' -o " + dir;
    REQUIRE(run_command(sample_only, &out) == 0);
    // the logged text's exact bytes (json_string writes \n, \" , \\ and \u00XX for bytes)
    std::string logged = trained[0].substr(trained[0].find("\"text\":\"") + 8), text;
    for (size_t i = 0; logged[i] != '"'; i++) {
        if (logged[i] != '\\') text += logged[i];
        else if (logged[++i] == 'n') text += '\n';
        else if (logged[i] == 'u') text += (char)strtol(logged.substr(i + 1, 4).c_str(), nullptr, 16), i += 4;
        else text += logged[i];
    }
    CHECK(text.size() >= 96);  // 96 tokens, one byte each
    CHECK(out.find("---- sample at step 0, its prompt in brackets ----\n[the ]" + terminal_text(text) + "\n") !=
          std::string::npos);
    CHECK(read_bytes(dir + "/log.jsonl") == log_before);
    CHECK(out.find("step     1/") == std::string::npos);  // no training step
    // --val-every 1: it also evaluates the model, at step 0
    REQUIRE(run_command(sample_only + " --val-every 1 --val-tokens 512", &out) == 0);
    CHECK(out.find("step 0 | val loss ") != std::string::npos);
    run_command("rm -rf " + dir);
}

TEST_CASE("resume with another --steps: refused for a cosine, unless --extend 1 recomputes it") {
    std::string dir = temp_dir(), out;
    REQUIRE(run_command(TINY + "-n 4 -o " + dir, &out) == 0);  // -l 3e-3, --warmup 2, floor 0.1 of the peak
    // by hand: step 4 of 4 trained with lr at(3) = 3e-4 + 2.7e-3 · (1 + cos(π·1/2))/2 = 1.65e-3;
    // step 5 of 8 would train with at(4) = 3e-4 + 2.7e-3 · (1 + cos(π·2/6))/2 = 2.325e-3
    CHECK(run_command(TINY + "-n 8 --resume 1 -o " + dir, &out) == 1);
    CHECK(out.find("the checkpoint's run had --steps 4, this one has 8, and the cosine schedule depends on the "
                   "length: the learning rate goes from 1.65e-03 at step 4 to 2.33e-03 at step 5") != std::string::npos);
    CHECK(out.find("--extend 1") != std::string::npos);
    CHECK(!file_exists(dir + "/model_00000008.bin"));
    REQUIRE(run_command(TINY + "-n 8 --resume 1 --extend 1 -o " + dir, &out) == 0);
    CHECK(out.find("extending the run (--extend 1): the checkpoint's run had --steps 4, this one has 8; the cosine "
                   "is recomputed over 8 steps") != std::string::npos);
    std::vector<std::string> train = log_lines(dir + "/log.jsonl", "train");
    REQUIRE(train.size() == 8);
    CHECK(train[4].find("\"step\":5,") != std::string::npos);
    CHECK(std::fabs(atof(train[4].c_str() + train[4].find("\"lr\":") + 5) - 2.325e-3) <= 1e-8);
    // the extended run's checkpoint records its new length: resuming it with -n 8 is plain
    REQUIRE(run_command(TINY + "-n 10 --resume 1 --lr-schedule constant -o " + dir, &out) == 0);
    CHECK(out.find("the learning rate is constant, so only the length changes") != std::string::npos);
    run_command("rm -rf " + dir);
}

TEST_CASE("mismatched files: a byte-level shard with a GPT-2 vocabulary is flagged; eval and log lines carry the step") {
    std::string dir = temp_dir(), out;
    std::vector<uint16_t> bytes(5000);
    for (size_t i = 0; i < bytes.size(); i++) bytes[i] = (uint16_t)"the cat sat.\n"[i % 13];
    write_shard(dir + "/bytes.bin", bytes);
    std::string data = " -i " + dir + "/bytes.bin -j " + dir + "/bytes.bin -o '' --dry-run 1 ";
    REQUIRE(run_command(TINY + data + "--vocab 50257", &out) == 0);
    CHECK(out.find("warning: the training data looks byte-level: the first tokens of '" + dir +
                   "/bytes.bin' are all below 256, but the model's vocabulary has V = 50,257") != std::string::npos);
    CHECK(out.find("warning: the validation data looks byte-level") != std::string::npos);
    REQUIRE(run_command(TINY + data + "--vocab 256", &out) == 0);
    CHECK(out.find("looks byte-level") == std::string::npos);
    bytes[100] = 300;  // one token above 255 in the first 512: not byte-level
    write_shard(dir + "/bytes.bin", bytes);
    REQUIRE(run_command(TINY + data + "--vocab 50257", &out) == 0);
    CHECK(out.find("looks byte-level") == std::string::npos);
    // the final validation comes before the final checkpoint line, and names its step
    REQUIRE(run_command(TINY + "-n 3 --val-every 2 --val-tokens 256 -o " + dir + "/run", &out) == 0);
    size_t val = out.find("step 3 | val loss "), ckpt = out.find("checkpoint: " + dir + "/run/model_00000003.bin");
    CHECK(out.find("step 0 | val loss ") != std::string::npos);
    CHECK(out.find("step 2 | val loss ") != std::string::npos);
    CHECK(val != std::string::npos);
    CHECK(ckpt != std::string::npos);
    CHECK(val < ckpt);
    run_command("rm -rf " + dir);
}

// The same token ids as uint16 shards and as uint32 shards are the same training: the log's
// losses (train and validation) are equal, line for line.
TEST_CASE("data: a run on uint32 shards logs the losses of the same tokens in uint16 shards") {
    std::string dir = temp_dir(), out;
    std::vector<uint16_t> t16(3000);
    for (size_t i = 0; i < t16.size(); i++) t16[i] = (uint16_t)"the cat sat on the mat.\n"[i % 24];
    write_shard(dir + "/a16.bin", t16);
    write_shard32(dir + "/a32.bin", std::vector<uint32_t>(t16.begin(), t16.end()));
    std::vector<std::vector<std::string>> logs;
    for (const char* kind : {"16", "32"}) {
        std::string shard = dir + "/a" + kind + ".bin", run = dir + "/run" + kind;
        REQUIRE(run_command(TINY + "-n 4 --vocab 256 --val-every 2 --val-tokens 256 -i " + shard + " -j " + shard +
                                " -o " + run,
                            &out) == 0);
        std::vector<std::string> lines = log_lines(run + "/log.jsonl", "train"), val = log_lines(run + "/log.jsonl", "val");
        REQUIRE(lines.size() == 4);
        REQUIRE(val.size() == 3);
        lines.insert(lines.end(), val.begin(), val.end());
        for (std::string& l : lines) l = strip_timing(l);
        logs.push_back(lines);
    }
    CHECK(logs[0] == logs[1]);
    run_command("rm -rf " + dir);
}

TEST_CASE("HellaSwag through the trainer: the reference's accuracies, on one line with the step and in the log") {
    HellaSwagReference gold = read_hellaswag_reference("test/golden/hellaswag_tiny_reference.txt");
    double acc = 0, acc_norm = 0;
    for (size_t e = 0; e < gold.label.size(); e++)
        acc += gold.pred[e] == gold.label[e], acc_norm += gold.pred_norm[e] == gold.label[e];
    acc /= gold.label.size(), acc_norm /= gold.label.size();
    std::string dir = temp_dir(), out;
    std::vector<uint16_t> tokens(2000, 3);  // the tiny golden model has V = 91: not the built-in corpus
    write_shard(dir + "/data.bin", tokens);
    std::string args = TRAIN + " -e test/golden/model_tiny.bin -i " + dir + "/data.bin -j " + dir + "/data.bin " +
                       strf("-b 4 -t %d --sample-every 0 --hellaswag test/golden/hellaswag_tiny.bin ", gold.T);
    REQUIRE(run_command(args + "-n 0 --val-every 0", &out) == 0);
    CHECK(out.find(strf("step 0 | HellaSwag acc_norm %.4f, acc %.4f", acc_norm, acc)) != std::string::npos);
    // in a training run: at step 0, every --eval-every steps and at the end, logged with the step
    REQUIRE(run_command(args + "-n 3 --val-every 1 --val-tokens 256 --eval-every 2 -o " + dir + "/run", &out) == 0);
    CHECK(out.find(strf("step 0 | val loss ")) != std::string::npos);
    std::vector<std::string> h = log_lines(dir + "/run/log.jsonl", "hellaswag");
    REQUIRE(h.size() == 3);  // steps 0, 2 and 3
    CHECK(h[1].find("\"step\":2,") != std::string::npos);
    CHECK(h[2].find("\"step\":3,") != std::string::npos);
    CHECK(h[0].find(strf("\"acc_norm\":%.6f,\"acc\":%.6f,\"examples\":%zu", acc_norm, acc, gold.label.size())) !=
          std::string::npos);
    run_command("rm -rf " + dir);
}

// Writes `text` to dir/relative, creating the directories on the way.
static void put_file(const std::string& dir, const std::string& relative, const std::string& text) {
    run_command("mkdir -p '" + dir + "/" + relative.substr(0, relative.find_last_of('/')) + "'");
    std::ofstream(dir + "/" + relative) << text;
}

// host/cpus.h, on cgroup trees made here as the kernel documents them (cgroup v2's cpu.max is
// "QUOTA PERIOD" or "max PERIOD"; v1's cpu.cfs_quota_us is -1 for no limit).
TEST_CASE("threads: a cgroup's CPU quota is found in v2 and v1 layouts, the smallest of the ancestors wins; replicas split a host") {
    CHECK(quota_cpus(250000, 100000) == 2);  // whole CPUs, rounded down
    CHECK(quota_cpus(50000, 100000) == 1);   // never below one
    CHECK(quota_cpus(-1, 100000) == 0);      // v1: no limit
    CHECK(quota_cpus(100000, 50000) == 2);   // a period other than the default 100 ms
    CHECK(quota_cpus(600000, 200000) == 3);
    std::string root = temp_dir();
    CHECK(cgroup_cpu_quota(root) == 0);  // no /proc/self/cgroup: no quota, no error

    // v2, nested: the parent's 3 CPUs limit a child that has none ("max")
    put_file(root, "proc/self/cgroup", "0::/job/step\n");
    put_file(root, "sys/fs/cgroup/job/cpu.max", "300000 100000\n");
    put_file(root, "sys/fs/cgroup/job/step/cpu.max", "max 100000\n");
    CHECK(cgroup_cpu_quota(root) == 3);
    put_file(root, "sys/fs/cgroup/job/step/cpu.max", "150000 100000\n");  // the child's is smaller
    CHECK(cgroup_cpu_quota(root) == 1);
    put_file(root, "sys/fs/cgroup/job/step/cpu.max", "garbage\n");  // unreadable: ignored, the parent's stands
    CHECK(cgroup_cpu_quota(root) == 3);
    // the period is the file's, not always 100 ms: 2 CPUs as 50 ms per 25 ms, under a parent of 3
    put_file(root, "sys/fs/cgroup/job/step/cpu.max", "50000 25000\n");
    CHECK(cgroup_cpu_quota(root) == 2);

    // v1 as a container sees it: /proc/self/cgroup names the host's path, the mount is the
    // container's own cgroup, so only the mount's root exists
    run_command("rm -rf '" + root + "/sys'");
    put_file(root, "proc/self/cgroup", "4:memory:/docker/abc\n2:cpuacct,cpu:/docker/abc\n0::/\n");
    put_file(root, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "400000\n");
    put_file(root, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    CHECK(cgroup_cpu_quota(root) == 4);
    put_file(root, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "250000\n");  // 4 CPUs' time per 250 ms: 1.6
    CHECK(cgroup_cpu_quota(root) == 1);
    put_file(root, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
    CHECK(cgroup_cpu_quota(root) == 0);
    put_file(root, "proc/self/cgroup", "3:cpuacct:/x\n");  // "cpuacct" alone is not the cpu controller
    put_file(root, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "100000\n");
    CHECK(cgroup_cpu_quota(root) == 0);
    run_command("rm -rf '" + root + "'");

    CpuAllowance limited{64, 4}, unlimited{8, 0}, wide{2, 16};
    CHECK(limited.usable() == 4);
    CHECK(limited.note() == " (the cgroup's CPU limit: 4 of 64 processors)");
    CHECK(unlimited.usable() == 8);
    CHECK(unlimited.note().empty());
    CHECK(wide.usable() == 2);  // a quota above the mask changes nothing
    CHECK(wide.note().empty());
    // replicas on one host with the same processors split them, never below one thread each
    CpuAllowance shared{8, 0, 2}, shared_limited{64, 4, 2}, crowded{2, 0, 4};
    CHECK(shared.usable() == 4);
    CHECK(shared.note() == " (8 processors, shared by 2 replicas on this host)");
    CHECK(shared_limited.usable() == 2);
    CHECK(shared_limited.note() == " (the cgroup's CPU limit: 4 of 64 processors, shared by 2 replicas on this host)");
    CHECK(crowded.usable() == 1);
}

// ----------------------------------------------------------------------------
// --grad-sync overlap's buckets (host/gradsync.h): every gradient is summed exactly once, and
// never in a bucket that starts before the backward has finished it. When each element is
// final is worked out here from the tensor layout: a per-block tensor's element of block b
// after block b's backward, lnf's before any block's, wte's and wpe's only at the end (-1).
TEST_CASE("gradient buckets cover every parameter once, each started only once it is final") {
    ModelConfig c = tiny_config();
    c.L = 5;
    const std::vector<size_t> sizes = c.param_sizes();
    const size_t n = c.num_params();
    std::vector<int> final_after(n);  // the block after whose backward the element is final
    for (size_t t = 0, off = 0; t < (size_t)NUM_PARAM_TENSORS; off += sizes[t], t++)
        for (size_t j = 0; j < sizes[t]; j++)
            final_after[off + j] = t < 2 ? -1 : t >= 14 ? c.L : (int)(j / (sizes[t] / c.L));
    const double block_bytes = 4.0 * (12.0 * c.C * c.C + 13.0 * c.C);
    // bucket bytes -> buckets expected: 0 and one block's bytes give a bucket per block, and
    // the embeddings' at the end; 2.5 blocks, blocks 4-2 with lnf, then blocks 1-0 (too few to
    // close a bucket) with the embeddings at the end; more than the model, one bucket at the end
    for (auto [bytes, expect] : std::vector<std::pair<double, int>>{
             {0.0, c.L + 1}, {block_bytes, c.L + 1}, {2.5 * block_bytes, 2}, {1e12, 1}}) {
        CAPTURE(bytes);
        std::vector<GradBucket> buckets = gradient_buckets(c, bytes);
        CHECK((int)buckets.size() == expect);
        std::vector<int> times(n, 0);
        int previous = c.L;
        for (const GradBucket& b : buckets) {
            CHECK(b.after_block < previous);  // in the backward's order
            previous = b.after_block;
            size_t floats = 0;
            for (const GradRange& r : b.ranges) {
                REQUIRE(r.begin + r.count <= n);
                floats += r.count;
                for (size_t i = r.begin; i < r.begin + r.count; i++) {
                    times[i]++;
                    if (b.after_block >= 0 && final_after[i] < b.after_block)
                        FAIL_CHECK("element " << i << " is final after block " << final_after[i]
                                              << ", its bucket starts after block " << b.after_block);
                    if (b.after_block >= 0 && final_after[i] < 0) FAIL_CHECK("an embedding before the end: " << i);
                }
            }
            CHECK(floats == b.floats);
        }
        CHECK(buckets.back().after_block == -1);
        CHECK(std::count(times.begin(), times.end(), 1) == (long)n);  // each exactly once
        // the noise scale's norm units: every unit in exactly one bucket, and inside its ranges
        const std::vector<GradRange> units = norm_units(c);
        std::vector<int> in_buckets(units.size(), 0);
        for (const GradBucket& b : buckets)
            for (int u : b.units) {
                REQUIRE(u >= 0);
                REQUIRE(u < (int)units.size());
                in_buckets[u]++;
                bool inside = false;
                for (const GradRange& r : b.ranges)
                    inside = inside || (units[u].begin >= r.begin && units[u].begin + units[u].count <= r.begin + r.count);
                CHECK_MESSAGE(inside, "unit " << u << " is not inside its bucket's ranges");
            }
        CHECK(std::count(in_buckets.begin(), in_buckets.end(), 1) == (long)units.size());
    }
}

// The units cover the buffer in order without a gap: the embeddings, each per-block tensor
// block by block, then lnf (and a Llama's head); 12·L + 2 of them for GPT-2.
TEST_CASE("the noise scale's norm units tile the gradient buffer in order") {
    ModelConfig c = tiny_config();
    c.L = 3;
    const std::vector<GradRange> units = norm_units(c);
    CHECK(units.size() == 12 * 3 + 2);
    size_t next = 0;
    for (const GradRange& u : units) {
        CHECK(u.begin == next);
        CHECK(u.count > 0);
        next = u.begin + u.count;
    }
    CHECK(next == c.num_params());
    const std::vector<size_t> sizes = c.param_sizes();
    CHECK(units[0].count == sizes[0] + sizes[1]);          // wte and wpe
    CHECK(units[1].count == sizes[2] / 3);                 // ln1w of block 0
    CHECK(units.back().count == sizes[14] + sizes[15] + sizes[16]);  // lnfw, lnfb (and wout: none for GPT-2)
}

// ----------------------------------------------------------------------------
// Generation: the key/value cache, the context's restarts, top-k and top-p (host/sample.h)

// Tolerance 1e-5 normalised: both paths compute in float32 the same sums of the same terms,
// except that a product over one row and over several may block its sums differently
// (host/gemm.h); that moves logits by ~1e-7. A wrong position, a key of the wrong head or a
// stale cache row moves them by order 1.
TEST_CASE("generation: the key/value cache's logits equal the full forward's at every position (GPT-2)") {
    ModelConfig c = tiny_config();
    c.maxT = 12;
    CpuTrainer m(c, plan_batch(1, c.maxT, 1, 0), Config{}, Comm{});  // samples on: the cache is built
    randomize(m.m, 41);
    std::vector<int> tokens = {3, 17, 0, 36, 5, 5, 21, 9, 30, 2, 11, 8};
    std::vector<double> errors = cached_logits_errors(m, c, tokens);
    INFO("largest error " << largest(errors));
    CHECK(errors.size() == 9);  // positions 2, 4, 5..11
    CHECK(all_within(errors, 1e-5));
    // with the cache off (or no samples) there is none, and a cached call says so in one line
    Config off;
    off.kv_cache = 0;
    CpuTrainer without(c, plan_batch(1, c.maxT, 1, 0), off, Comm{});
    CHECK(without.m.kv_cache.empty());
    CHECK_THROWS_WITH(without.next_token_logits_cached(tokens.data(), 3, 0),
                      "the key/value cache holds 0 positions, not 3");
}

// A trainer that records what generate() asks of it and answers logits that favour token
// (context length mod V): the schedule below is worked out by hand from host/sample.h's rule.
struct RecordingTrainer {
    std::vector<std::string> calls;
    std::vector<float> logits = std::vector<float>(16, 0.0f);
    const float* answer(int length) {
        std::fill(logits.begin(), logits.end(), 0.0f);
        logits[length % 16] = 50;  // e^50: every draw picks it
        return logits.data();
    }
    const float* next_token_logits(const int*, int T) {
        calls.push_back(strf("full %d", T));
        return answer(T);
    }
    const float* next_token_logits_cached(const int*, int T, int P) {
        calls.push_back(strf("cached P=%d T=%d", P, T));
        return answer(P + T);
    }
};

TEST_CASE("generation: the context restarts from its last window/2 tokens when full, the same with and without the cache") {
    ModelConfig c;
    c.V = 16;
    Rng rng(1);
    Sampling s;
    // window 6, a prompt of 4, 6 new tokens: contexts 4, 5, 6, then 7 > 6 restarts at its last 3
    RecordingTrainer cached;
    Sample out = generate(cached, c, 6, {1, 1, 1, 1}, 6, s, rng);
    CHECK(cached.calls == std::vector<std::string>{"cached P=0 T=4", "cached P=4 T=1", "cached P=5 T=1",
                                                   "cached P=0 T=3", "cached P=3 T=1", "cached P=4 T=1"});
    // the tokens: each the context's length mod 16
    CHECK(out.tokens == std::vector<int>{1, 1, 1, 1, 4, 5, 6, 3, 4, 5});
    RecordingTrainer full;
    s.kv_cache = false;
    Sample again = generate(full, c, 6, {1, 1, 1, 1}, 6, s, rng);
    CHECK(full.calls == std::vector<std::string>{"full 4", "full 5", "full 6", "full 3", "full 4", "full 5"});
    CHECK(again.tokens == out.tokens);
    // a window of 1: every context is the last token alone
    RecordingTrainer one;
    generate(one, c, 1, {2}, 3, Sampling{}, rng);
    CHECK(one.calls == std::vector<std::string>{"cached P=0 T=1", "cached P=0 T=1", "cached P=0 T=1"});
}

TEST_CASE("generation: with a fixed seed the default model samples the same tokens with and without the cache") {
    ModelConfig c = tiny_config();
    c.maxT = 16;
    for (int T : {16, 7}) {  // the whole context, and a window that restarts several times in 40 tokens
        CAPTURE(T);
        CpuTrainer m(c, plan_batch(1, T, 1, 0), Config{}, Comm{});
        randomize(m.m, 7);
        Sampling s;
        s.top_k = 20;
        Rng r1(5), r2(5);
        Sample cached = generate(m, c, T, {4, 9}, 40, s, r1);
        s.kv_cache = false;
        Sample full = generate(m, c, T, {4, 9}, 40, s, r2);
        CHECK(cached.tokens == full.tokens);
        CHECK(cached.tokens.size() == 42);
    }
}

TEST_CASE("sampling: top-k keeps the k likeliest, top-p the fewest likeliest whose probability reaches p") {
    // probabilities 0.5, 0.3, 0.15, 0.05 for tokens 2, 0, 3, 1
    const float logits[4] = {logf(0.3f), logf(0.05f), logf(0.5f), logf(0.15f)};
    auto counts = [&](Sampling s, int draws = 20000) {
        Rng rng(3);
        std::vector<int> n(4, 0);
        for (int i = 0; i < draws; i++) n[sample_token(logits, 4, s, rng)]++;
        return n;
    };
    Sampling s;
    std::vector<int> all = counts(s);
    // every token drawn, at its probability: 20,000 draws, a binomial's σ ≤ 71, bounds at ±5σ = 350
    CHECK(std::abs(all[2] - 10000) < 350);
    CHECK(std::abs(all[0] - 6000) < 350);
    CHECK(std::abs(all[3] - 3000) < 350);
    CHECK(std::abs(all[1] - 1000) < 350);
    s.top_p = 0.7f;  // 0.5 < 0.7 ≤ 0.8: tokens 2 and 0, renormalised to 5/8 and 3/8
    std::vector<int> nucleus = counts(s);
    CHECK(nucleus[3] == 0);
    CHECK(nucleus[1] == 0);
    CHECK(std::abs(nucleus[2] - 12500) < 350);
    s.top_p = 0.4f;  // the likeliest alone reaches 0.4
    CHECK(counts(s)[2] == 20000);
    s.top_p = 1, s.top_k = 3;  // without token 1: 0.5, 0.3, 0.15 renormalised over 0.95
    std::vector<int> top3 = counts(s);
    CHECK(top3[1] == 0);
    CHECK(std::abs(top3[3] - 3158) < 350);
    s.top_k = 3, s.top_p = 0.9f;  // top-k first: 0.5/0.95 + 0.3/0.95 = 0.84 < 0.9, so all three stay
    CHECK(counts(s)[3] > 2000);
    s.top_k = 1, s.top_p = 1;
    CHECK(counts(s)[2] == 20000);  // top-k 1 is the most likely token
}

TEST_CASE("a line longer than strf's buffer is formatted whole (a long sample's text)") {
    const std::string text(5000, 'x');
    CHECK(strf("[%s] %d", text.c_str(), 7) == "[" + text + "] 7");
}

TEST_CASE("generation: the key/value cache is in the plan's memory, its bytes written out") {
    ModelConfig c = tiny_config();  // L = 2, C = 16, NH = 2: hs = 8, KVH = NH
    Config cfg;
    auto cache_bytes = [&](const Config& with) {
        for (const auto& [name, bytes] : CpuTrainer::memory_use(c, 4, 8, 1, with).parts)
            if (name.find("key/value cache") != std::string::npos) return bytes;
        return 0.0;
    };
    CHECK(cache_bytes(cfg) == 2 * 8 * (2 * 2 * 8) * 4.0);  // L · T · (keys and values of NH heads of hs) · 4 bytes
    cfg.kv_cache = 0;
    CHECK(cache_bytes(cfg) == 0);
    cfg.kv_cache = 1, cfg.sample_every = 0;  // no samples: no cache
    CHECK(cache_bytes(cfg) == 0);
}
