// Tests of the CPU trainer's Llama-3 family (doctest): each new layer's backward against
// finite differences of a double-precision re-implementation (namespace ref below, written
// from the formulas in docs/llama.md, never from train.cpp's float code), the whole model's
// gradient the same way, and the model file's round trip and refusals.
//
// Every tolerance is stated next to its check with the reason; NaN fails every check,
// because each comparison is written so that NaN makes it false.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstdlib>
#include <functional>

#define TRAIN_NO_MAIN
#include "../../train.cpp"
#include "../generation_check.h"
#include "../test_util.h"
#include "finite_diff.h"

static double dot(const Vec& a, const Vec& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
    return s;
}

// ----------------------------------------------------------------------------
// Double-precision references, from the formulas (docs/llama.md).
namespace ref {

void rmsnorm(Vec& out, const Vec& x, const Vec& w, int N, int C, double eps) {
    out.assign((size_t)N * C, 0);
    for (int n = 0; n < N; n++) {
        double ms = 0;
        for (int c = 0; c < C; c++) ms += x[n * C + c] * x[n * C + c] / C;
        for (int c = 0; c < C; c++) out[n * C + c] = x[n * C + c] / std::sqrt(ms + eps) * w[c];
    }
}
// Meta's frequencies: theta^(-2i/hs), and Llama-3.1's scaling written out again here.
Vec frequencies(const ModelConfig& c) {
    int hs = c.C / c.NH;
    Vec f(hs / 2);
    for (int i = 0; i < hs / 2; i++) {
        double base = std::pow((double)c.rope_theta, -2.0 * i / hs);
        if (c.rope_factor > 0) {
            double wl = 2 * M_PI / base, lo = c.rope_original_T / c.rope_low_freq, hi = c.rope_original_T / c.rope_high_freq;
            if (wl < hi) {
            } else if (wl > lo) {
                base = base / c.rope_factor;
            } else {
                double s = (c.rope_original_T / wl - c.rope_low_freq) / (c.rope_high_freq - c.rope_low_freq);
                base = (1 - s) * base / c.rope_factor + s * base;
            }
        }
        f[i] = base;
    }
    return f;
}
// Rotates q's NH heads and k's KVH heads of qkv (B,T,QKV) in place, pairs (2i, 2i+1).
void rope(Vec& qkv, const ModelConfig& c, int B, int T) {
    int hs = c.C / c.NH, QKV = c.C + 2 * c.KVH * hs;
    Vec f = frequencies(c);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < c.NH + c.KVH; h++)
                for (int i = 0; i < hs / 2; i++) {
                    double* x = &qkv[((size_t)b * T + t) * QKV + h * hs + 2 * i];
                    double a = t * f[i], x0 = x[0], x1 = x[1];
                    x[0] = x0 * std::cos(a) - x1 * std::sin(a), x[1] = x0 * std::sin(a) + x1 * std::cos(a);
                }
}
void attention(Vec& out, const Vec& qkv, int B, int T, int C, int NH, int KVH) {
    int hs = C / NH, QKV = C + 2 * KVH * hs, G = NH / KVH;
    out.assign((size_t)B * T * C, 0);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                auto at = [&](int u, int part, int head, int i) { return qkv[((size_t)b * T + u) * QKV + part + head * hs + i]; };
                Vec score(t + 1);
                double mx = -1e300, sum = 0;
                for (int u = 0; u <= t; u++) {
                    double s = 0;
                    for (int i = 0; i < hs; i++) s += at(t, 0, h, i) * at(u, C, h / G, i);
                    score[u] = s / std::sqrt((double)hs);
                    mx = std::max(mx, score[u]);
                }
                for (int u = 0; u <= t; u++) sum += (score[u] = std::exp(score[u] - mx));
                for (int u = 0; u <= t; u++)
                    for (int i = 0; i < hs; i++)
                        out[((size_t)b * T + t) * C + h * hs + i] += score[u] / sum * at(u, C + KVH * hs, h / G, i);
            }
}
void swiglu(Vec& out, const Vec& fc, int N, int F) {
    out.assign((size_t)N * F, 0);
    for (int n = 0; n < N; n++)
        for (int j = 0; j < F; j++) {
            double g = fc[(size_t)n * 2 * F + j], u = fc[(size_t)n * 2 * F + F + j];
            out[(size_t)n * F + j] = g / (1 + std::exp(-g)) * u;
        }
}
void matmul(Vec& out, const Vec& x, const Vec& w, int N, int IC, int OC) {
    out.assign((size_t)N * OC, 0);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = 0;
            for (int i = 0; i < IC; i++) s += x[(size_t)n * IC + i] * w[(size_t)o * IC + i];
            out[(size_t)n * OC + o] = s;
        }
}
// The whole Llama's mean loss from a flat parameter vector in file order.
double llama_loss(const ModelConfig& c, const Vec& params, const int* inp, const int* tgt, int B, int T) {
    std::vector<size_t> sizes = c.param_sizes();
    std::vector<Vec> P(NUM_PARAM_TENSORS);
    size_t off = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) P[i].assign(params.begin() + off, params.begin() + off + sizes[i]), off += sizes[i];
    auto slice = [](const Vec& v, size_t start, size_t n) { return Vec(v.begin() + start, v.begin() + start + n); };
    int C = c.C, N = B * T, hs = C / c.NH, QKV = C + 2 * c.KVH * hs, F = c.F;
    Vec x((size_t)N * C), ln, qkv, atty, proj, fc, h;
    for (int n = 0; n < N; n++)
        for (int i = 0; i < C; i++) x[(size_t)n * C + i] = P[0][(size_t)inp[n] * C + i];
    for (int l = 0; l < c.L; l++) {
        rmsnorm(ln, x, slice(P[2], l * C, C), N, C, c.norm_eps);
        matmul(qkv, ln, slice(P[4], (size_t)l * QKV * C, (size_t)QKV * C), N, C, QKV);
        rope(qkv, c, B, T);
        attention(atty, qkv, B, T, C, c.NH, c.KVH);
        matmul(proj, atty, slice(P[6], (size_t)l * C * C, (size_t)C * C), N, C, C);
        for (size_t i = 0; i < x.size(); i++) x[i] += proj[i];
        rmsnorm(ln, x, slice(P[8], l * C, C), N, C, c.norm_eps);
        matmul(fc, ln, slice(P[10], (size_t)l * 2 * F * C, (size_t)2 * F * C), N, C, 2 * F);
        swiglu(h, fc, N, F);
        matmul(proj, h, slice(P[12], (size_t)l * C * F, (size_t)C * F), N, F, C);
        for (size_t i = 0; i < x.size(); i++) x[i] += proj[i];
    }
    rmsnorm(ln, x, P[14], N, C, c.norm_eps);
    Vec logits;
    matmul(logits, ln, c.tied ? P[0] : P[16], N, C, c.Vp);
    double total = 0;
    for (int n = 0; n < N; n++) {
        double mx = -1e300, sum = 0;
        for (int i = 0; i < c.V; i++) mx = std::max(mx, logits[(size_t)n * c.Vp + i]);
        for (int i = 0; i < c.V; i++) sum += std::exp(logits[(size_t)n * c.Vp + i] - mx);
        total += mx + std::log(sum) - logits[(size_t)n * c.Vp + tgt[n]];
    }
    return total / N;
}

}  // namespace ref

// A tiny Llama: grouped K/V heads (NH = 4, KVH = 2), F not a multiple of C, V not of the
// padding, Llama-3.1's scaling with an original length (100) short enough that at hs = 8 the
// frequencies fall in all three of its bands (unchanged, blended, divided).
static ModelConfig tiny_llama(int KVH = 2, int tied = 0) {
    ModelConfig c;
    c.family = Family::llama3;
    c.maxT = 8, c.V = 37, c.Vp = 64, c.L = 2, c.NH = 4, c.C = 32, c.KVH = KVH, c.F = 40, c.tied = tied;
    c.rope_theta = 10000, c.rope_factor = 8, c.rope_low_freq = 1, c.rope_high_freq = 4, c.rope_original_T = 100;
    return c;
}

// Each test takes f = Σ out ⊙ R for a random R, so ∂f/∂out = R is the dout given to our
// backward. Tolerance 1e-5 normalised: float32 backward (rounding ~6e-8 per operation, sums
// of at most a few hundred terms) against differences accurate to ~1e-9; a wrong formula
// gives errors of order 1.
constexpr double LAYER_TOL = 1e-5;

TEST_CASE("the tiny Llama's RoPE frequencies fall in all three bands of Llama-3.1's scaling") {
    ModelConfig c = tiny_llama();
    std::vector<double> f = rope_frequencies(c);
    Vec base(f.size());
    int unchanged = 0, divided = 0, blended = 0;
    for (size_t i = 0; i < f.size(); i++) {
        base[i] = std::pow(10000.0, -2.0 * i / 8);
        double r = f[i] / base[i];
        unchanged += std::fabs(r - 1) < 1e-12, divided += std::fabs(r - 1.0 / 8) < 1e-12;
        blended += r > 1.0 / 8 + 1e-9 && r < 1 - 1e-9;
    }
    CHECK(unchanged >= 1);
    CHECK(divided >= 1);
    CHECK(blended >= 1);
    Vec r = ref::frequencies(c);
    for (size_t i = 0; i < f.size(); i++) CHECK(std::fabs(f[i] - r[i]) <= 1e-15 * r[i]);  // the same double formula
}

TEST_CASE("RMSNorm forward and backward match finite differences") {
    const int N = 6, C = 24;
    const float eps = 1e-5f;
    Rng rng(2);
    std::vector<float> x = random_floats(N * C, rng, 2.0), w = random_floats(C, rng);
    for (int i = 0; i < N * C; i++) x[i] += 1.5f;  // an offset: RMSNorm must NOT subtract the mean
    std::vector<float> R = random_floats(N * C, rng), out(N * C), rstd(N);
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    Vec xd = to_double(x), wd = to_double(w), Rd = to_double(R), o;
    ref::rmsnorm(o, xd, wd, N, C, eps);
    CHECK(norm_error(out, o) <= 1e-6);  // float32 sum of 24 squares
    auto f = [&] { ref::rmsnorm(o, xd, wd, N, C, eps); return dot(o, Rd); };
    std::vector<float> dx(N * C, 7.0f), dw(C, 0.25f);  // dx pre-filled: overwritten; dw: adds
    rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, C);
    Vec gw = finite_diff(f, wd);
    for (double& v : gw) v += 0.25;
    CHECK(norm_error(dx, finite_diff(f, xd)) <= LAYER_TOL);
    CHECK(norm_error(dw, gw) <= LAYER_TOL);
}

TEST_CASE("RoPE forward matches the double rotation, and its backward finite differences") {
    ModelConfig c = tiny_llama();
    const int B = 2, T = 8, hs = c.hs(), QKV = c.qkv_channels();
    Rng rng(3);
    std::vector<float> qkv = random_floats((size_t)B * T * QKV, rng), R = random_floats((size_t)B * T * QKV, rng);
    std::vector<float> table = rope_table(c), rotated = qkv;
    rope_forward(rotated.data(), table.data(), B, T, c.NH, c.KVH, hs);
    Vec qd = to_double(qkv), Rd = to_double(R), o = qd;
    ref::rope(o, c, B, T);
    CHECK(norm_error(rotated, o) <= 1e-6);  // float32 cos/sin and two products
    for (int b = 0; b < B; b++)  // v is not rotated: bit for bit
        for (int t = 0; t < T; t++)
            for (int i = c.C + c.KVH * hs; i < QKV; i++) CHECK(rotated[((size_t)b * T + t) * QKV + i] == qkv[((size_t)b * T + t) * QKV + i]);
    auto f = [&] { Vec r = qd; ref::rope(r, c, B, T); return dot(r, Rd); };
    std::vector<float> d = R;
    rope_backward(d.data(), table.data(), B, T, c.NH, c.KVH, hs);
    CHECK(norm_error(d, finite_diff(f, qd)) <= LAYER_TOL);
}

TEST_CASE("SwiGLU forward and backward match finite differences") {
    const int N = 5, F = 12;
    Rng rng(4);
    std::vector<float> fc = random_floats(N * 2 * F, rng, 3.0), R = random_floats(N * F, rng), out(N * F);
    swiglu_forward(out.data(), fc.data(), N, F);
    Vec fd = to_double(fc), Rd = to_double(R), o;
    ref::swiglu(o, fd, N, F);
    CHECK(norm_error(out, o) <= 1e-6);  // exp_fast: a few ulps
    auto f = [&] { ref::swiglu(o, fd, N, F); return dot(o, Rd); };
    std::vector<float> dfc(N * 2 * F, 7.0f);  // overwritten
    swiglu_backward(dfc.data(), fc.data(), R.data(), N, F);
    CHECK(norm_error(dfc, finite_diff(f, fd)) <= LAYER_TOL);
}

TEST_CASE("grouped-query attention forward and backward match finite differences (KVH = 1, 2, NH)") {
    const int B = 2, T = 5, C = 16, NH = 4;
    for (int KVH : {1, 2, 4}) {
        CAPTURE(KVH);
        const int QKV = C + 2 * KVH * (C / NH);
        Rng rng(5 + KVH);
        std::vector<float> qkv = random_floats(B * T * QKV, rng), R = random_floats(B * T * C, rng);
        std::vector<float> out(B * T * C), att(B * NH * T * T);
        attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, KVH);
        Vec qd = to_double(qkv), Rd = to_double(R), o;
        ref::attention(o, qd, B, T, C, NH, KVH);
        CHECK(norm_error(out, o) <= 1e-6);  // float32 softmax and sums over ≤ 5 positions
        auto f = [&] { ref::attention(o, qd, B, T, C, NH, KVH); return dot(o, Rd); };
        std::vector<float> dqkv(B * T * QKV, 7.0f);  // overwritten
        attention_backward(dqkv.data(), R.data(), qkv.data(), att.data(), B, T, C, NH, KVH);
        CHECK(norm_error(dqkv, finite_diff(f, qd)) <= LAYER_TOL);
    }
}

// Random parameters around the initialisation, norm weights away from 1 so that a mistake in
// them cannot hide; padded rows stay 0.
static void randomize(Model& m, uint64_t seed) {
    init_params(m.params.data(), m.cfg, seed);
    Rng rng(seed + 100);
    std::vector<size_t> sizes = m.cfg.param_sizes();
    float* p = m.params.data();
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        for (size_t j = 0; j < sizes[i]; j++) p[j] += (float)(0.1 * rng.normal());
        if (i == 0 || i == 16)
            for (size_t j = (size_t)m.cfg.V * m.cfg.C; j < sizes[i]; j++) p[j] = 0;
        p += sizes[i];
    }
}

TEST_CASE("the whole Llama's gradient matches finite differences of the double model (untied and tied)") {
    for (int tied : {0, 1}) {
        CAPTURE(tied);
        ModelConfig c = tiny_llama(2, tied);
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
        double ref_loss = ref::llama_loss(c, pd, inp.data(), tgt.data(), B, T);
        CHECK(std::fabs(loss - ref_loss) <= 1e-5 * ref_loss);  // float32 forward through 2 blocks
        // Finite differences for up to 40 elements of every tensor the family has. 1e-4
        // normalised per tensor: float32 rounding through the whole backward stays near 1e-6.
        std::vector<size_t> sizes = c.param_sizes();
        size_t off = 0;
        for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
            bool padded = t == 0 || t == 16;
            size_t n = padded && sizes[t] ? (size_t)c.V * c.C : sizes[t];
            std::vector<float> ours;
            Vec fd;
            for (size_t k = 0; k < std::min<size_t>(n, 40); k++) {
                size_t j = off + (n <= 40 ? k : rng.below(n));
                double keep = pd[j], h = 1e-4;
                pd[j] = keep + h;
                double up = ref::llama_loss(c, pd, inp.data(), tgt.data(), B, T);
                pd[j] = keep - h;
                double down = ref::llama_loss(c, pd, inp.data(), tgt.data(), B, T);
                pd[j] = keep;
                fd.push_back((up - down) / (2 * h));
                ours.push_back(m.grads[j]);
            }
            INFO("tensor ", PARAM_NAMES[t]);
            CHECK(norm_error(ours, fd) <= 1e-4);
            if (padded)
                for (size_t j = n; j < sizes[t]; j++) CHECK(m.grads[off + j] == 0.0f);  // padded rows: never in the loss
            off += sizes[t];
        }
        // GPT-2's tensors are absent: no biases, no wpe; wout only when untied
        for (const char* name : {"wpe", "ln1b", "qkvb", "attprojb", "ln2b", "fcb", "fcprojb", "lnfb"})
            CHECK(sizes[std::find_if(PARAM_NAMES, PARAM_NAMES + NUM_PARAM_TENSORS,
                                     [&](const char* p) { return std::string(p) == name; }) - PARAM_NAMES] == 0);
        CHECK((sizes[16] == 0) == (tied == 1));
    }
}

TEST_CASE("Llama's parameter count: the tensors' sizes from the shape, written out") {
    ModelConfig c = tiny_llama();
    // wte Vp·C, per layer 2 norms + q,k,v (C + 2·KVH·hs)·C + proj C² + gate/up 2F·C + down C·F,
    // lnf C, wout Vp·C: 64·32 + 2·(64 + 64·32 + 1024 + 80·32 + 32·40) + 32 + 64·32
    CHECK(c.num_params() == (size_t)(2048 + 2 * (64 + 2048 + 1024 + 2560 + 1280) + 32 + 2048));
    CHECK(checked_num_params(c) == (long long)c.num_params());
}

TEST_CASE("Llama model file: written and read back with every field; damage refused with one line") {
    ModelConfig c = tiny_llama();
    c.norm_eps = 3e-6f, c.rope_factor = 32, c.rope_low_freq = 1.5f, c.rope_high_freq = 5, c.rope_original_T = 16;
    Model m;
    model_build(m, c, 1, 4);
    randomize(m, 21);
    std::string dir = temp_dir();
    save_model(dir + "/llama.bin", c, m.params.data());
    ModelConfig r = read_model_header(dir + "/llama.bin");
    CHECK(shape_difference(r, c) == "");
    CHECK(r.llama());
    CHECK(r.rope_factor == 32.0f);
    CHECK(r.norm_eps == 3e-6f);
    std::vector<float> back(c.num_params());
    load_model_params(dir + "/llama.bin", r, back.data());
    CHECK(back == std::vector<float>(m.params.begin(), m.params.begin() + c.num_params()));

    // KVH that does not divide NH, in the header
    std::vector<char> bytes = read_bytes(dir + "/llama.bin");
    auto with = [&](int index, int value) {
        std::vector<char> b = bytes;
        memcpy(b.data() + 4 * index, &value, 4);
        FILE* out = fopen((dir + "/bad.bin").c_str(), "wb");
        fwrite(b.data(), 1, b.size(), out);
        fclose(out);
        try {
            read_model_header(dir + "/bad.bin");
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    CHECK(with(6, 3).find("not a multiple of KVH = 3") != std::string::npos);
    CHECK(with(18, 41).find("truncated or damaged") != std::string::npos);  // F: the size disagrees
    CHECK(with(1, 5).find("bf16") != std::string::npos);
}

TEST_CASE("llm.c's own Llama-3 file: F from its size, its gate and up blocks reordered into each layer's fcw") {
    // llm.c writes wte, then per tensor kind all layers: ln1w, qkvw, attprojw, ln2w, c_fc (gate),
    // c_fc2 (up), c_proj, then lnfw and lm_head; its header has no [16] and only
    // whether RoPE is scaled.
    ModelConfig c = tiny_llama();
    c.Vp = c.V;  // llm.c does not pad
    c.rope_theta = 500000, c.rope_factor = 8, c.rope_low_freq = 1, c.rope_high_freq = 4, c.rope_original_T = 8192;
    Model m;
    model_build(m, c, 1, 4);
    randomize(m, 31);
    std::vector<size_t> sizes = c.param_sizes();
    std::vector<float> file;
    size_t off = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; off += sizes[t], t++) {
        if (t != 10) {
            file.insert(file.end(), m.params.begin() + off, m.params.begin() + off + sizes[t]);
            continue;
        }
        size_t FC = (size_t)c.F * c.C;
        for (int part = 0; part < 2; part++)  // all layers' gates, then all layers' ups
            for (int l = 0; l < c.L; l++)
                file.insert(file.end(), m.params.begin() + off + (2 * l + part) * FC,
                            m.params.begin() + off + (2 * l + part + 1) * FC);
    }
    int h[256] = {};
    h[0] = 20240803, h[1] = 3, h[2] = c.maxT, h[3] = c.V, h[4] = c.L, h[5] = c.NH, h[6] = c.KVH, h[7] = c.C;
    h[9] = 1024, h[11] = 500000, h[12] = 1;
    std::string dir = temp_dir(), path = dir + "/llmc_llama.bin";
    FILE* f = fopen(path.c_str(), "wb");
    fwrite(h, 4, 256, f);
    fwrite(file.data(), 4, file.size(), f);
    fclose(f);
    ModelConfig r = read_model_header(path);
    CHECK(shape_difference(r, c) == "");  // F = 40 from the size, untied, Llama-3.1's scaling
    CHECK(llmc_llama_note(path).find("read with Llama-3.1's scaling (factor 8)") != std::string::npos);
    save_model(dir + "/ours.bin", c, m.params.data());
    CHECK(llmc_llama_note(dir + "/ours.bin") == "");  // our own file records its scaling
    std::vector<float> back(c.num_params());
    load_model_params(path, r, back.data());
    CHECK(back == std::vector<float>(m.params.begin(), m.params.begin() + c.num_params()));
}

// ----------------------------------------------------------------------------
// The trainer as a user runs it: ./train --model llama3 (a separate process).

static const std::string TINY =
    "./train --model llama3 --layers 2 --heads 4 --kv-heads 2 --channels 32 --max-seq-len 32 -b 4 -t 16 "
    "--val-every 4 --val-tokens 1024 --sample-every 4 --sample-len 8 --threads 1 ";

TEST_CASE("Llama: 2N steps equal N steps + resume + N steps, bit for bit (weights, AdamW state, losses)") {
    std::string a = temp_dir(), b = temp_dir(), out;
    REQUIRE(run_command(TINY + "-n 8 --ckpt-every 4 -o " + a, &out) == 0);
    CHECK(out.find("model: llama3 L=2 NH=4 KVH=2 C=32") != std::string::npos);
    REQUIRE(run_command("cp " + a + "/model_00000004.bin " + a + "/state_00000004.bin " + b) == 0);
    REQUIRE(run_command(TINY + "-n 8 --ckpt-every 4 --resume 1 -o " + b, &out) == 0);
    CHECK(out.find("resumed from step 4") != std::string::npos);
    std::vector<char> ma = read_bytes(a + "/model_00000008.bin"), mb = read_bytes(b + "/model_00000008.bin");
    CHECK(ma.size() > 1024);
    CHECK(ma == mb);
    CHECK(read_bytes(a + "/state_00000008.bin") == read_bytes(b + "/state_00000008.bin"));
    std::vector<std::string> la = log_lines(a + "/log.jsonl", "train"), lb = log_lines(b + "/log.jsonl", "train");
    REQUIRE(la.size() == 8);
    REQUIRE(lb.size() == 4);
    for (int i = 0; i < 4; i++) CHECK(strip_timing(la[4 + i]) == strip_timing(lb[i]));
    // the checkpoint is a Llama file that --load starts from: evaluation only, the same validation loss
    REQUIRE(run_command(TINY + "-n 0 --val-every 1 -o '' -e " + a + "/model_00000008.bin", &out) == 0);
    std::vector<std::string> val = log_lines(a + "/log.jsonl", "val");
    REQUIRE(!val.empty());
    std::string last = val.back();
    std::string loss = last.substr(last.find("\"val_loss\":") + 11, 6);
    CHECK(out.find("val loss " + loss.substr(0, 5)) != std::string::npos);
    run_command("rm -rf " + a + " " + b);
}

TEST_CASE("Llama: the default model trains (its loss falls over 30 steps)") {
    std::string dir = temp_dir(), out;
    REQUIRE(run_command("./train --model llama3 -n 30 --val-every 30 --sample-every 0 --threads 2 -o " + dir, &out) == 0);
    std::vector<std::string> train = log_lines(dir + "/log.jsonl", "train");
    REQUIRE(train.size() == 30);
    auto loss = [](const std::string& line) { return atof(line.c_str() + line.find("\"loss\":") + 7); };
    // ln 256 = 5.55 at the start; GPT-2's default reaches ~2.1 in 30 steps; a Llama whose
    // RoPE, norm or MLP were broken stays near the unigram entropy (~3.3) or diverges
    CHECK(loss(train.front()) > 5.0);
    CHECK(loss(train.front()) < 6.0);
    CHECK(loss(train.back()) < 2.6);
    run_command("rm -rf " + dir);
}

// The key/value cache of a Llama: RoPE's angles from the position P + t, K/V heads cached once
// per group and read by each of its query heads. Tolerance 1e-5 normalised, for the reason
// given in test/cpu_trainer/trainer.cpp's GPT-2 case (the same float32 sums but for a product's
// blocking over one row or several).
TEST_CASE("Llama: the key/value cache's logits equal the full forward's at every position (KVH = 1, 2, NH; tied)") {
    for (auto [KVH, tied] : {std::pair{2, 0}, std::pair{1, 0}, std::pair{4, 0}, std::pair{2, 1}}) {
        CAPTURE(KVH);
        CAPTURE(tied);
        ModelConfig c = tiny_llama(KVH, tied);
        CpuTrainer m(c, plan_batch(1, c.maxT, 1, 0), Config{}, Comm{});
        init_params(m.params(), c, 11);
        Rng rng(12);  // weights off their initial scale, so every head and position matters
        for (size_t i = 0; i < c.num_params(); i++) m.params()[i] += (float)(0.1 * rng.normal());
        CHECK(m.m.kv_cache.size() == (size_t)c.L * c.maxT * 2 * KVH * c.hs());  // once per K/V head, not per query head
        std::vector<int> tokens = {3, 17, 0, 36, 5, 5, 21, 9};
        std::vector<double> errors = cached_logits_errors(m, c, tokens);
        INFO("largest error " << largest(errors));
        CHECK(errors.size() == 5);  // positions 2, 4, 5..7
        CHECK(all_within(errors, 1e-5));
    }
}
