// train.cpp: GPT-2 and Llama-3 training on the CPU, the reference every faster path is
// checked against.
//
// Read it top to bottom: shapes and the accumulation contract; the layers, each a
// forward/backward pair; the model and its three buffers; AdamW; train_step(), the whole
// optimizer step in one function; main(), which wires in data, logging and checkpoints.
// The two families share everything but five layers, each chosen where it runs in
// model_forward() and model_backward(): the norm, the positions, the MLP, the attention's K/V
// heads and the output head (docs/llama.md).
//
// Shapes, used in every name and comment below:
//   B   sequences per micro-batch        T   tokens per sequence (T ≤ maxT)
//   C   channels                         NH  attention heads, each hs = C/NH wide
//   L   transformer blocks               V   vocabulary, Vp ≥ V its padded size
//   KVH K/V heads (Llama; GPT-2: NH)     QKV = C + 2·KVH·hs, the q, k, v projection's width
//   F   Llama's MLP width (GPT-2: 4C)
// Tensors are row-major float32. A leading d marks a gradient: dwte is ∂loss/∂wte.
//
// The accumulation contract, which every backward function below follows:
//   * parameter gradients ADD (+=): A micro-batches sum into one gradient buffer, which
//     train_step() zeroes once per optimizer step;
//   * activation gradients are OVERWRITTEN (=): they live for one backward pass;
//   * the loss is scaled by 1/(B·T·A·R) before backward, so the sum over A micro-batches
//     and R replicas is the mean gradient over the global batch.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "host/gradsync.h"
#include "host/run.h"

#ifdef _OPENMP
#include <omp.h>

// OpenMP's idle threads wait for the next parallel region by spinning (GCC's libgomp: some
// 300,000 checks before they sleep). On a machine with other work those spins take the cores
// the other threads of the team need, and a step runs 3-16 times slower; a passive wait costs
// the small default model about a tenth on an idle machine and the 124M shape nothing
// measurable (docs/speed.md). So the trainer chooses it, unless the environment
// already sets OMP_WAIT_POLICY (active, to compare). libgomp reads the variable once, while
// the program is loaded: setenv() in main() is too late, and so is a constructor of ours (one
// in .preinit_array runs first, but its setenv() was lost: OMP_DISPLAY_ENV=verbose still showed
// GOMP_SPINCOUNT 300000). The process therefore starts itself again, once, with the variable
// set (same pid, arguments and environment otherwise); if that fails it carries on as it is.
[[maybe_unused]] static void choose_passive_openmp_wait(char** argv) {
    if (getenv("OMP_WAIT_POLICY")) return;
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);
}
#else  // the Makefile warned: everything runs on one core (host/gemm.h has OpenMP's calls for one thread)
[[maybe_unused]] static void choose_passive_openmp_wait(char**) {}
#endif

// The matrix products, where nearly all the time goes: a blocked, packed kernel of its own
// (host/gemm.h), so that the model reads first. gemm(M, N, K, A, ..., B, ..., C, ldc, accumulate).
#include "host/gemm.h"

// Where a step's time goes (make bench, docs/speed.md): with TRAIN_PHASE_TIMES=1 in the
// environment, the wall time inside the products (matmul_forward and matmul_backward, their
// bias passes included), the attention (forward and backward) and AdamW's update is summed over
// the training steps after the first, and the shares of the step are printed as the program
// ends; the rest of the step is the element-wise passes (norms, GELU or SwiGLU, residual adds,
// embeddings, the loss, the gradient norm) and the data. The timer reads the clock and changes
// nothing else; without the variable each phase costs one test of a flag.
enum Phase { PHASE_PRODUCTS, PHASE_ATTENTION, PHASE_OPTIMIZER, NUM_PHASES };
struct PhaseTimes {
    const bool on = getenv("TRAIN_PHASE_TIMES") && std::string(getenv("TRAIN_PHASE_TIMES")) == "1";
    double ms[NUM_PHASES] = {};               // running sums, in or out of a step
    double step_ms[NUM_PHASES] = {}, total_ms = 0;  // over the steps after the first
    int steps = 0, seen = 0;
    ~PhaseTimes() {
        if (!on || steps == 0) return;
        double other = total_ms;
        for (double x : step_ms) other -= x;
        auto share = [&](double x) { return 100 * x / total_ms; };
        printf("phases: %.1f ms/step (%d steps after the first): products %.1f%%, attention %.1f%%, element-wise "
               "passes and the rest %.1f%%, optimizer %.1f%%\n", total_ms / steps, steps,
               share(step_ms[PHASE_PRODUCTS]), share(step_ms[PHASE_ATTENTION]), share(other),
               share(step_ms[PHASE_OPTIMIZER]));
        fflush(stdout);
    }
};
inline PhaseTimes phase_times;
inline double phase_now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
struct PhaseScope {  // adds the time until the end of its scope to phase p
    Phase p;
    double t0 = 0;
    explicit PhaseScope(Phase p) : p(p) { if (phase_times.on) t0 = phase_now_ms(); }
    ~PhaseScope() { if (phase_times.on) phase_times.ms[p] += phase_now_ms() - t0; }
};
struct PhaseStep {  // one training step: what the phases took during it, after the first step
    double t0 = 0, ms0[NUM_PHASES] = {};
    PhaseStep() {
        if (!phase_times.on) return;
        t0 = phase_now_ms();
        std::copy(phase_times.ms, phase_times.ms + NUM_PHASES, ms0);
    }
    ~PhaseStep() {
        if (!phase_times.on || phase_times.seen++ == 0) return;  // the first step warms caches
        phase_times.total_ms += phase_now_ms() - t0, phase_times.steps++;
        for (int i = 0; i < NUM_PHASES; i++) phase_times.step_ms[i] += phase_times.ms[i] - ms0[i];
    }
};

// ----------------------------------------------------------------------------
// Layers. Each forward has its backward right below it.

// Token + position embedding: out[b,t,:] = wte[inp[b,t],:] + wpe[P+t,:]
// out (B,T,C), inp (B,T), wte (Vp,C), wpe (maxT,C); wpe null: the token's row alone (Llama,
// whose positions enter as RoPE's rotation of q and k instead). P: the position of the first
// token, 0 but in generation with the key/value cache.
void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C, int P = 0) {
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float* o = out + ((size_t)b * T + t) * C;
            const float* tok = wte + (size_t)inp[b * T + t] * C;
            if (!wpe) {
                memcpy(o, tok, C * sizeof(float));
                continue;
            }
            const float* pos = wpe + (size_t)(P + t) * C;
            for (int c = 0; c < C; c++) o[c] = tok[c] + pos[c];
        }
}
// Threads split the channels, not the tokens: two tokens may share an embedding row,
// and splitting channels keeps the sums race-free and in a fixed order.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C) {
#pragma omp parallel for
    for (int c = 0; c < C; c++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                float d = dout[((size_t)b * T + t) * C + c];
                dwte[(size_t)inp[b * T + t] * C + c] += d;
                if (dwpe) dwpe[(size_t)t * C + c] += d;
            }
}

// LayerNorm over C for each of N = B·T rows: out = (x - mean) · rstd · w + b.
// mean and rstd (N) are kept for the backward pass.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* bias,
                       int N, int C) {
    const float eps = 1e-5f;
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        float s = 1.0f / sqrtf(v / C + eps);
        float* o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + bias[c];
        mean[n] = m, rstd[n] = s;
    }
}
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                        const float* mean, const float* rstd, int N, int C) {
    // dinp = rstd · (g - mean(g) - xhat · mean(g · xhat)), where g = dout · w
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        const float* d = dout + (size_t)n * C;
        float m = mean[n], s = rstd[n], g_mean = 0, gx_mean = 0;
        for (int c = 0; c < C; c++) {
            float g = d[c] * w[c];
            g_mean += g;
            gx_mean += g * (x[c] - m) * s;
        }
        g_mean /= C, gx_mean /= C;
        float* dx = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) dx[c] = s * (d[c] * w[c] - g_mean - (x[c] - m) * s * gx_mean);
    }
    // parameter gradients: threads split the channels so each sum runs in a fixed order
#pragma omp parallel for
    for (int c = 0; c < C; c++) {
        float sw = 0, sb = 0;
        for (int n = 0; n < N; n++) {
            float d = dout[(size_t)n * C + c];
            sw += d * (inp[(size_t)n * C + c] - mean[n]) * rstd[n];
            sb += d;
        }
        dw[c] += sw, db[c] += sb;
    }
}

// RMSNorm over C for each of N rows (Llama): out = x · rstd · w, rstd = 1/√(mean(x²) + eps),
// kept for the backward pass. No mean is subtracted and there is no bias.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int C, float eps) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float ss = 0;
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float s = 1.0f / sqrtf(ss / C + eps);
        float* o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = x[c] * s * w[c];
        rstd[n] = s;
    }
}
void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                      int N, int C) {
    // dinp = rstd · (g - xhat · mean(g · xhat)), where g = dout · w and xhat = x · rstd
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        const float* d = dout + (size_t)n * C;
        float s = rstd[n], gx_mean = 0;
        for (int c = 0; c < C; c++) gx_mean += d[c] * w[c] * x[c] * s;
        gx_mean /= C;
        float* dx = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) dx[c] = s * (d[c] * w[c] - x[c] * s * gx_mean);
    }
    // the weight's gradient: threads split the channels so each sum runs in a fixed order
#pragma omp parallel for
    for (int c = 0; c < C; c++) {
        float sw = 0;
        for (int n = 0; n < N; n++) sw += dout[(size_t)n * C + c] * inp[(size_t)n * C + c] * rstd[n];
        dw[c] += sw;
    }
}

// The block's norm, one of the family's choices: GPT-2's LayerNorm (mean, rstd, weight and
// bias) or Llama's RMSNorm (rstd and weight; mean and bias unused).
void norm_forward(const ModelConfig& c, float* out, float* mean, float* rstd, const float* inp, const float* w,
                  const float* bias, int N) {
    if (c.llama()) rmsnorm_forward(out, rstd, inp, w, N, c.C, c.norm_eps);
    else layernorm_forward(out, mean, rstd, inp, w, bias, N, c.C);
}
void norm_backward(const ModelConfig& c, float* dinp, float* dw, float* db, const float* dout, const float* inp,
                   const float* w, const float* mean, const float* rstd, int N) {
    if (c.llama()) rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, c.C);
    else layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, c.C);
}

// Linear layer: out (N,OC) = inp (N,IC) · w (OC,IC)ᵀ + bias (OC); bias may be null.
void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int N, int IC, int OC) {
    PhaseScope timed(PHASE_PRODUCTS);
    if (bias) {
#pragma omp parallel for
        for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, bias, OC * sizeof(float));
    }
    // B = wᵀ: element (k = ic, j = oc) is w[oc*IC + ic]
    gemm(N, OC, IC, inp, IC, 1, w, 1, IC, out, OC, bias != nullptr);
}
void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w, int N,
                     int IC, int OC) {
    PhaseScope timed(PHASE_PRODUCTS);
    gemm(N, IC, OC, dout, OC, 1, w, IC, 1, dinp, IC, false);   // dinp (N,IC)  = dout · w
    gemm(OC, IC, N, dout, 1, OC, inp, IC, 1, dw, IC, true);    // dw  (OC,IC) += doutᵀ · inp
    if (dbias) {  // dbias += Σ_n dout[n,:], each sum in order over n, 64 columns at a time in vectors
        constexpr int W = 64;
#pragma omp parallel for
        for (int o0 = 0; o0 < OC; o0 += W) {
            int w = std::min(W, OC - o0);
            float s[W] = {};
            for (int n = 0; n < N; n++)
                for (int o = 0; o < w; o++) s[o] += dout[(size_t)n * OC + o0 + o];
            for (int o = 0; o < w; o++) dbias[o0 + o] += s[o];
        }
    }
}

// Rotary position embedding (Llama), in place on the q and k parts of qkv (B,T,QKV): in each
// head, channels (2i, 2i+1) are rotated by the angle t·freq_i of their position t. cos_sin
// (maxT, hs/2, 2) is host/model.h's rope_table(). v is not rotated. The attention that
// follows sees only rotated q and k, so positions enter through q·k alone.
void rope_forward(float* qkv, const float* cos_sin, int B, int T, int NH, int KVH, int hs) {
    int QKV = (NH + 2 * KVH) * hs, half = hs / 2;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float* row = qkv + ((size_t)b * T + t) * QKV;
            const float* cs = cos_sin + (size_t)t * half * 2;
            for (int h = 0; h < NH + KVH; h++)  // NH query heads, then KVH key heads
                for (int i = 0; i < half; i++) {
                    float* x = row + h * hs + 2 * i;
                    float x0 = x[0], x1 = x[1], c = cs[2 * i], s = cs[2 * i + 1];
                    x[0] = x0 * c - x1 * s, x[1] = x0 * s + x1 * c;
                }
        }
}
// A rotation's transpose is its inverse: the gradient is rotated back by the same angle.
void rope_backward(float* dqkv, const float* cos_sin, int B, int T, int NH, int KVH, int hs) {
    int QKV = (NH + 2 * KVH) * hs, half = hs / 2;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float* row = dqkv + ((size_t)b * T + t) * QKV;
            const float* cs = cos_sin + (size_t)t * half * 2;
            for (int h = 0; h < NH + KVH; h++)
                for (int i = 0; i < half; i++) {
                    float* d = row + h * hs + 2 * i;
                    float d0 = d[0], d1 = d[1], c = cs[2 * i], s = cs[2 * i + 1];
                    d[0] = d0 * c + d1 * s, d[1] = -d0 * s + d1 * c;
                }
        }
}

// Causal self-attention on the fused projection qkv (B,T,QKV) = [q | k | v]: NH query heads
// and KVH key/value heads (GPT-2: KVH = NH, QKV = 3C). Query head h uses channels
// [h·hs, (h+1)·hs) of q and K/V head h / (NH/KVH), whose channels are [kh·hs, (kh+1)·hs) of k
// and of v: grouped-query attention reads the shared head where it is, no copy. out (B,T,C).
// The keys and values are read from kv, one row of kv_row floats per position (the key of K/V
// head kh at kh·hs, its value at (KVH + kh)·hs): by default the qkv rows themselves (kv = qkv
// + C), or, in generation, the key/value cache (B = 1), whose first P rows hold the context
// before these T queries, which are positions P..P+T-1. att (B,NH,T,P+T) keeps the softmax
// probabilities (row t uses only columns ≤ P + t).
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH, int KVH,
                       const float* kv = nullptr, size_t kv_row = 0, int P = 0) {
    PhaseScope timed(PHASE_ATTENTION);
    const int hs = C / NH, QKV = C + 2 * KVH * hs, group = NH / KVH, Tk = P + T;
    if (!kv) kv = qkv + C, kv_row = QKV;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const size_t k_at = (h / group) * hs, v_at = (KVH + h / group) * hs;  // this head's K and V
                const float* q = qkv + ((size_t)b * T + t) * QKV + h * hs;
                const float* keys = kv + (size_t)b * Tk * kv_row;
                float* a = att + (((size_t)b * NH + h) * T + t) * Tk;
                const int last = P + t;  // causal: position P + t sees positions ≤ P + t
                float maxv = -INFINITY;
                for (int t2 = 0; t2 <= last; t2++) {
                    const float* k = keys + t2 * kv_row + k_at;
                    float s = 0;
#pragma omp simd reduction(+ : s)  // in vector lanes, then summed: only the order of the sum changes
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    a[t2] = s * scale;
                    maxv = fmaxf(maxv, a[t2]);
                }
                float sum = 0;
                for (int t2 = 0; t2 <= last; t2++) sum += (a[t2] = expf(a[t2] - maxv));
                for (int t2 = 0; t2 <= last; t2++) a[t2] /= sum;
                for (int t2 = last + 1; t2 < Tk; t2++) a[t2] = 0;
                float* o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0;
                for (int t2 = 0; t2 <= last; t2++) {
                    const float* v = keys + t2 * kv_row + v_at;
                    for (int i = 0; i < hs; i++) o[i] += a[t2] * v[i];
                }
            }
}
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T, int C,
                        int NH, int KVH) {
    PhaseScope timed(PHASE_ATTENTION);
    int hs = C / NH, QKV = C + 2 * KVH * hs, group = NH / KVH;
    float scale = 1.0f / sqrtf((float)hs);
    // Each (b, K/V head) owns its slice of dqkv: the dq of its group's query heads and its dk,
    // dv. The heads of a group add into dk and dv one after another, in a fixed order.
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int kh = 0; kh < KVH; kh++) {
            std::vector<float> datt(T), dpre(T);
            const int k_at = C + kh * hs, v_at = C + (KVH + kh) * hs;
            for (int t = 0; t < T; t++) {
                float* row = dqkv + ((size_t)b * T + t) * QKV;
                for (int i = 0; i < hs; i++) row[k_at + i] = 0, row[v_at + i] = 0;
                for (int h = kh * group; h < (kh + 1) * group; h++)
                    for (int i = 0; i < hs; i++) row[h * hs + i] = 0;
            }
            for (int h = kh * group; h < (kh + 1) * group; h++)
                for (int t = 0; t < T; t++) {
                    const float* a = att + (((size_t)b * NH + h) * T + t) * T;
                    const float* d = dout + ((size_t)b * T + t) * C + h * hs;
                    // out_t = Σ a[t2] v_t2  →  datt[t2] = d · v_t2,  dv_t2 += a[t2] d
                    for (int t2 = 0; t2 <= t; t2++) {
                        const float* v = qkv + ((size_t)b * T + t2) * QKV + v_at;
                        float* dv = dqkv + ((size_t)b * T + t2) * QKV + v_at;
                        float s = 0;
#pragma omp simd reduction(+ : s)
                        for (int i = 0; i < hs; i++) s += d[i] * v[i];
                        for (int i = 0; i < hs; i++) dv[i] += a[t2] * d[i];
                        datt[t2] = s;
                    }
                    // softmax backward: dpre = a ⊙ (datt - Σ a·datt)
                    float dot = 0;
                    for (int t2 = 0; t2 <= t; t2++) dot += a[t2] * datt[t2];
                    for (int t2 = 0; t2 <= t; t2++) dpre[t2] = a[t2] * (datt[t2] - dot) * scale;
                    // pre[t2] = q_t · k_t2 · scale
                    const float* q = qkv + ((size_t)b * T + t) * QKV + h * hs;
                    float* dq = dqkv + ((size_t)b * T + t) * QKV + h * hs;
                    for (int t2 = 0; t2 <= t; t2++) {
                        const float* k = qkv + ((size_t)b * T + t2) * QKV + k_at;
                        float* dk = dqkv + ((size_t)b * T + t2) * QKV + k_at;
#pragma omp simd  // dq and dk are different parts of a row of dqkv
                        for (int i = 0; i < hs; i++) dq[i] += dpre[t2] * k[i], dk[i] += dpre[t2] * q[i];
                    }
                }
        }
}

// exp(x), written so that the compiler vectorizes the loops that call it (libm's expf is
// a scalar call, and GELU evaluates one per element of the widest activations).
// x = n·ln2 + r with |r| ≤ ln2/2, then a degree-7 Taylor polynomial: relative error < 2e-8
// from the polynomial, so the result is within a couple of float32 ulps.
static inline float exp_fast(float x) {
    x = std::min(std::max(x, -87.0f), 88.0f);  // keep 2^n a normal float
    float n = floorf(x * 1.44269504f + 0.5f);
    float r = x - n * 0.693145751953125f - n * 1.4286068203094172e-06f;  // ln2 in two parts
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720 + r * (1.0f / 5040)))))));
    // A NaN x passes the clamp, and converting a NaN to int is undefined: take n = 0 for it
    // (p is NaN already, so the result stays NaN and the trainer's checks see it).
    n = n == n ? n : 0.0f;
    int32_t bits = ((int32_t)n + 127) << 23;  // 2^n, built in the exponent field
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}
// tanh(u) = 1 − 2 / (e^{2u} + 1); absolute error ~1e-7, which is what GELU's 1 + tanh needs.
static inline float tanh_fast(float u) { return 1.0f - 2.0f / (exp_fast(2.0f * u) + 1.0f); }

// GELU, tanh approximation (as in GPT-2): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
constexpr float GELU_K = 0.7978845608028654f;  // √(2/π)
void gelu_forward(float* out, const float* inp, size_t N) {
#pragma omp parallel for simd
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanh_fast(GELU_K * (x + 0.044715f * x * x * x)));
    }
}
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t N) {
#pragma omp parallel for simd
    for (size_t i = 0; i < N; i++) {
        float x = inp[i], th = tanh_fast(GELU_K * (x + 0.044715f * x * x * x));
        float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du) * dout[i];
    }
}

// SwiGLU (Llama's MLP activation) on fc (N, 2F) = [gate | up] per row:
// out (N, F) = silu(gate) ⊙ up, silu(g) = g·σ(g), σ(g) = 1/(1 + e^-g).
static inline float sigmoid_fast(float g) { return 1.0f / (1.0f + exp_fast(-g)); }
void swiglu_forward(float* out, const float* fc, size_t N, int F) {
#pragma omp parallel for
    for (size_t n = 0; n < N; n++) {
        const float *gate = fc + n * 2 * F, *up = gate + F;
        float* o = out + n * F;
#pragma omp simd
        for (int j = 0; j < F; j++) o[j] = gate[j] * sigmoid_fast(gate[j]) * up[j];
    }
}
// From what the forward kept (fc) and dout (N, F): dfc (N, 2F) overwritten,
// dgate = dout · up · σ(g)·(1 + g·(1 − σ(g))), dup = dout · silu(g).
void swiglu_backward(float* dfc, const float* fc, const float* dout, size_t N, int F) {
#pragma omp parallel for
    for (size_t n = 0; n < N; n++) {
        const float *gate = fc + n * 2 * F, *up = gate + F, *d = dout + n * F;
        float *dgate = dfc + n * 2 * F, *dup = dgate + F;
#pragma omp simd
        for (int j = 0; j < F; j++) {
            float g = gate[j], sg = sigmoid_fast(g);
            dgate[j] = d[j] * up[j] * sg * (1.0f + g * (1.0f - sg));
            dup[j] = d[j] * g * sg;
        }
    }
}

// Residual connection: out = a + b. Its backward is the identity for both inputs, so the
// model passes the gradient through rather than copying it.
void residual_forward(float* out, const float* a, const float* b, size_t N) {
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) out[i] = a[i] + b[i];
}

// Softmax over the first V of Vp logits, then cross-entropy against the targets.
// logits, probs (B·T, Vp); losses (B·T). Padded columns get probability 0.
void crossentropy_forward(float* losses, float* probs, const float* logits, const int* targets, int N, int V, int Vp) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* x = logits + (size_t)n * Vp;
        float* p = probs + (size_t)n * Vp;
        float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
        for (int i = 0; i < V; i++) maxv = std::max(maxv, x[i]);  // not fmaxf: its NaN rules keep it scalar
        double sum = 0;  // double: V terms (50,257 for GPT-2) would lose digits in float
#pragma omp simd reduction(+ : sum)
        for (int i = 0; i < V; i++) sum += (p[i] = exp_fast(x[i] - maxv));
        float inv = (float)(1.0 / sum);
#pragma omp simd
        for (int i = 0; i < V; i++) p[i] *= inv;
        for (int i = V; i < Vp; i++) p[i] = 0;
        // log-sum-exp form: exact even when the target's probability underflows
        losses[n] = (float)(maxv + log(sum) - x[targets[n]]);
    }
}
// dlogits = (probs - onehot(target)) · dloss, where dloss is the scale of each position's loss.
void crossentropy_backward(float* dlogits, const float* probs, const int* targets, float dloss, int N, int Vp) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float* d = dlogits + (size_t)n * Vp;
        const float* p = probs + (size_t)n * Vp;
        for (int i = 0; i < Vp; i++) d[i] = p[i] * dloss;
        d[targets[n]] -= dloss;
    }
}

// ----------------------------------------------------------------------------
// The model: three contiguous buffers (parameters, gradients, activations) plus AdamW's
// two moments, and named views into them (ParamTensors, in host/checkpoint.h).

// Activations kept from forward for backward, sized for the largest (B, T) of the run.
// A smaller batch uses the front of each tensor, with strides from its own B and T.
struct Activations {
    float *encoded;               // (B, T, C)     embeddings, the input of block 0
    float *ln1, *ln1_mean, *ln1_rstd;  // (L, B, T, C), (L, B, T), (L, B, T); no mean for RMSNorm
    float *qkv;                   // (L, B, T, QKV) q, k (RoPE-rotated for Llama), v
    float *att;                   // (L, B, NH, T, T) attention probabilities
    float *atty;                  // (L, B, T, C)  attention output, before its projection
    float *attproj;               // (L, B, T, C)
    float *residual2;             // (L, B, T, C)  after the attention residual
    float *ln2, *ln2_mean, *ln2_rstd;  // (L, B, T, C), (L, B, T), (L, B, T)
    float *fch;                   // (L, B, T, 4C) before GELU; Llama: (L, B, T, 2F), [gate | up]
    float *fch_gelu;              // (L, B, T, 4C) GELU's output; Llama: (L, B, T, F), SwiGLU's
    float *fcproj;                // (L, B, T, C)
    float *residual3;             // (L, B, T, C)  output of block l
    float *lnf, *lnf_mean, *lnf_rstd;  // (B, T, C), (B, T), (B, T)
    float *logits;                // (B, T, Vp)
    float *probs;                 // (B, T, Vp)
    float *losses;                // (B, T)
};
// Gradients of activations: only one block's worth, reused layer after layer.
struct ActivationGrads {
    float *dresidual;  // (B, T, C)   the residual stream's gradient, carried down the blocks
    float *dx;         // (B, T, C)   a block norm's input gradient, before it joins the stream
    float *dln;        // (B, T, C)   gradient of a norm's output (ln1, ln2 or lnf)
    float *datty;      // (B, T, C)
    float *dqkv;       // (B, T, QKV)
    float *dfch;       // (B, T, 4C or 2F)
    float *dfch_gelu;  // (B, T, 4C or F)
    float *dlogits;    // (B, T, Vp)
};

// n zeros in v; when memory runs out, the error says what was being allocated and how much.
template <class T>
static void allocate(std::vector<T>& v, size_t n, const char* what) {
    try {
        v.assign(n, T{});
    } catch (const std::bad_alloc&) {
        throw Error(strf("out of memory allocating %s: %s values, %s", what, with_commas((long long)n).c_str(),
                         format_bytes((double)n * sizeof(T)).c_str()));
    }
}

// Lays out `fields` one after another in `buffer`; sizes in floats.
static void carve(std::vector<float>& buffer, std::vector<std::pair<float**, size_t>> fields, const char* what) {
    size_t total = 0;
    for (auto& f : fields) total += f.second;
    allocate(buffer, total, what);
    float* p = buffer.data();
    for (auto& f : fields) *f.first = p, p += f.second;
}

struct Model {  // the model, of either family (cfg.family)
    ModelConfig cfg;
    int maxB = 0, maxT = 0;          // activation capacity
    std::vector<float> params, grads;  // num_params floats each, file order (ZeRO: + padding, shard.padded)
    std::vector<float> adam_m, adam_v;  // AdamW's moments of this replica's shard: all num_params without ZeRO
    Shard shard;                        // the parameters this replica updates (host/comm.h)
    ParamTensors p, g;               // views into params and grads
    std::vector<float> act_buffer, dact_buffer;
    Activations a;
    ActivationGrads da;
    std::vector<float> rope;           // Llama: RoPE's (maxT, hs/2, 2) cos and sin (host/model.h)
    std::vector<int> inputs, targets;  // (B, T) of the current micro-batch
    std::vector<float> kv_cache;       // generation: (L, maxT, 2·KVH·hs) each position's keys, then values
    std::vector<GradRange> norm_units;  // the noise scale's units of the gradient buffer (host/gradsync.h)
    std::vector<double> unit_sq;        // |g|² of each unit, of the step's first micro-batch
};

// The activation layout, written once: each field and its size in floats.
static std::vector<std::pair<float**, size_t>> activation_layout(Activations& a, const ModelConfig& c, int B, int T) {
    size_t BT = (size_t)B * T, L = c.L, C = c.C, NH = c.NH, Vp = c.Vp;
    size_t QKV = c.qkv_channels(), FC = c.fc_channels(), H = c.hidden();
    size_t mean = c.llama() ? 0 : BT;  // RMSNorm subtracts no mean
    return {{&a.encoded, BT * C},
            {&a.ln1, L * BT * C}, {&a.ln1_mean, L * mean}, {&a.ln1_rstd, L * BT},
            {&a.qkv, L * BT * QKV}, {&a.att, L * B * NH * T * T}, {&a.atty, L * BT * C},
            {&a.attproj, L * BT * C}, {&a.residual2, L * BT * C},
            {&a.ln2, L * BT * C}, {&a.ln2_mean, L * mean}, {&a.ln2_rstd, L * BT},
            {&a.fch, L * BT * FC}, {&a.fch_gelu, L * BT * H}, {&a.fcproj, L * BT * C},
            {&a.residual3, L * BT * C},
            {&a.lnf, BT * C}, {&a.lnf_mean, mean}, {&a.lnf_rstd, BT},
            {&a.logits, BT * Vp}, {&a.probs, BT * Vp}, {&a.losses, BT}};
}
static std::vector<std::pair<float**, size_t>> activation_grad_layout(ActivationGrads& d, const ModelConfig& c, int B,
                                                                      int T) {
    size_t BT = (size_t)B * T, C = c.C;
    return {{&d.dresidual, BT * C}, {&d.dx, BT * C}, {&d.dln, BT * C}, {&d.datty, BT * C},
            {&d.dqkv, BT * c.qkv_channels()}, {&d.dfch, BT * c.fc_channels()}, {&d.dfch_gelu, BT * c.hidden()},
            {&d.dlogits, BT * c.Vp}};
}

// Floats of activations and their gradients for a micro-batch of B×T (the memory estimate).
size_t activation_floats(const ModelConfig& c, int B, int T) {
    Activations a;
    ActivationGrads d;
    size_t n = 0;
    for (auto& f : activation_layout(a, c, B, T)) n += f.second;
    for (auto& f : activation_grad_layout(d, c, B, T)) n += f.second;
    return n;
}

// shard: the parameters this replica updates (ZeRO stage 1); default: all of them.
void model_build(Model& m, const ModelConfig& cfg, int B, int T, Shard shard = {}) {
    m.cfg = cfg, m.maxB = B, m.maxT = T;
    m.shard = shard.padded ? shard : Shard::of(cfg.num_params(), 0, 1, false);
    allocate(m.params, m.shard.padded, "the parameters");
    allocate(m.grads, m.shard.padded, "the gradients");
    allocate(m.adam_m, m.shard.size, "AdamW's first moment");
    allocate(m.adam_v, m.shard.size, "AdamW's second moment");
    m.p = param_views(m.params.data(), cfg);
    m.g = param_views(m.grads.data(), cfg);
    m.norm_units = norm_units(cfg), m.unit_sq.assign(m.norm_units.size(), 0.0);
    carve(m.act_buffer, activation_layout(m.a, cfg, B, T), "the activations");
    carve(m.dact_buffer, activation_grad_layout(m.da, cfg, B, T), "the activation gradients");
    if (cfg.llama()) m.rope = rope_table(cfg);
    size_t BT = (size_t)B * T;
    allocate(m.inputs, BT, "the micro-batch's inputs");
    allocate(m.targets, BT, "the micro-batch's targets");
}

// Layer l's slice of a tensor stacked over layers, n floats a layer; null for a tensor the
// family does not have (a bias, for Llama).
static inline float* slice(float* stacked, int l, size_t n) { return stacked ? stacked + l * n : nullptr; }

// Generation's key/value cache (host/sample.h), for contexts of up to m.maxT tokens (the run's -t).
void kv_cache_build(Model& m) { allocate(m.kv_cache, kv_cache_elements(m.cfg, m.maxT), "the key/value cache"); }
// Layer l's keys and values of T new positions P..P+T-1 (qkv's rows, after RoPE) into its
// cache; returns the layer's cache, whose first P + T rows the attention then reads.
static const float* kv_cache_append(Model& m, int l, const float* qkv, int T, int P) {
    const ModelConfig& c = m.cfg;
    const size_t KV = 2 * (size_t)c.kv_heads() * c.hs(), QKV = c.qkv_channels();
    if (m.kv_cache.empty() || P + T > m.maxT)
        throw Error(strf("the key/value cache holds %d positions, not %d", m.kv_cache.empty() ? 0 : m.maxT, P + T));
    float* layer = m.kv_cache.data() + (size_t)l * m.maxT * KV;
    for (int t = 0; t < T; t++) memcpy(layer + (size_t)(P + t) * KV, qkv + t * QKV + c.C, KV * sizeof(float));
    return layer;
}

// Forward to the logits (B, T, Vp) for inputs (B, T), B ≤ maxB and T ≤ maxT. In generation
// with the key/value cache (P ≥ 0, B = 1) the cache holds the context's positions 0..P-1: the
// inputs are positions P..P+T-1, their keys and values join the cache, and attention reads it.
void model_forward(Model& m, const int* inputs, int B, int T, int P = NO_CACHE) {
    const ModelConfig& c = m.cfg;
    const int C = c.C, NH = c.NH, KVH = c.kv_heads(), Vp = c.Vp;
    const size_t BT = (size_t)B * T, QKV = c.qkv_channels(), FC = c.fc_channels(), H = c.hidden();
    const bool cached = P != NO_CACHE;
    const int P0 = cached ? P : 0, Tk = P0 + T;  // the first position, the attention's keys
    ParamTensors& p = m.p;
    Activations& a = m.a;
    encoder_forward(a.encoded, inputs, p.wte, p.wpe, B, T, C, P0);  // Llama: no wpe, positions are RoPE's
    for (int l = 0; l < c.L; l++) {
        const float* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * BT * C;
        // this block's slices of the activations
        float* ln1 = a.ln1 + l * BT * C;       float* ln1_mean = slice(a.ln1_mean, l, BT);
        float* ln1_rstd = a.ln1_rstd + l * BT; float* qkv = a.qkv + l * BT * QKV;
        float* att = a.att + l * BT * NH * Tk;  float* atty = a.atty + l * BT * C;
        float* attproj = a.attproj + l * BT * C;  float* residual2 = a.residual2 + l * BT * C;
        float* ln2 = a.ln2 + l * BT * C;       float* ln2_mean = slice(a.ln2_mean, l, BT);
        float* ln2_rstd = a.ln2_rstd + l * BT; float* fch = a.fch + l * BT * FC;
        float* fch_gelu = a.fch_gelu + l * BT * H;  float* fcproj = a.fcproj + l * BT * C;
        float* residual3 = a.residual3 + l * BT * C;
        // x + attention(norm1(x)), then x + mlp(norm2(x))
        norm_forward(c, ln1, ln1_mean, ln1_rstd, residual, p.ln1w + l * C, slice(p.ln1b, l, C), BT);
        matmul_forward(qkv, ln1, slice(p.qkvw, l, QKV * C), slice(p.qkvb, l, QKV), BT, C, QKV);
        if (c.llama()) rope_forward(qkv, m.rope.data() + (size_t)P0 * c.hs(), B, T, NH, KVH, c.hs());  // q, k rotated
        if (cached) attention_forward(atty, att, qkv, B, T, C, NH, KVH, kv_cache_append(m, l, qkv, T, P),
                                      2 * KVH * c.hs(), P);  // generation: the cached keys and values too
        else attention_forward(atty, att, qkv, B, T, C, NH, KVH);
        matmul_forward(attproj, atty, slice(p.attprojw, l, C * C), slice(p.attprojb, l, C), BT, C, C);
        residual_forward(residual2, residual, attproj, BT * C);
        norm_forward(c, ln2, ln2_mean, ln2_rstd, residual2, p.ln2w + l * C, slice(p.ln2b, l, C), BT);
        matmul_forward(fch, ln2, slice(p.fcw, l, FC * C), slice(p.fcb, l, FC), BT, C, FC);
        if (c.llama()) swiglu_forward(fch_gelu, fch, BT, c.F);
        else gelu_forward(fch_gelu, fch, BT * FC);
        matmul_forward(fcproj, fch_gelu, slice(p.fcprojw, l, C * H), slice(p.fcprojb, l, C), BT, H, C);
        residual_forward(residual3, residual2, fcproj, BT * C);
    }
    norm_forward(c, a.lnf, a.lnf_mean, a.lnf_rstd, a.residual3 + (c.L - 1) * BT * C, p.lnfw, p.lnfb, BT);
    matmul_forward(a.logits, a.lnf, c.tied_head() ? p.wte : p.wout, nullptr, BT, C, Vp);  // GPT-2's head is wte
}

// Mean cross-entropy of the logits from model_forward against targets (B, T).
float model_loss(Model& m, const int* targets, int B, int T) {
    int N = B * T;
    crossentropy_forward(m.a.losses, m.a.probs, m.a.logits, targets, N, m.cfg.V, m.cfg.Vp);
    double sum = 0;
    for (int n = 0; n < N; n++) sum += m.a.losses[n];
    return (float)(sum / N);
}

// Backward of model_forward + model_loss, with each position's loss scaled by loss_scale
// (1/(B·T·A·R) in training). Adds (+=) into m.grads. With `sync` (the last micro-batch of a
// step with --grad-sync overlap) it is told when each block's gradients are final.
void model_backward(Model& m, const int* inputs, const int* targets, int B, int T, float loss_scale,
                   GradSync* sync = nullptr) {
    const ModelConfig& c = m.cfg;
    const int C = c.C, NH = c.NH, KVH = c.kv_heads(), Vp = c.Vp;
    const size_t BT = (size_t)B * T, QKV = c.qkv_channels(), FC = c.fc_channels(), H = c.hidden();
    ParamTensors& p = m.p;
    ParamTensors& g = m.g;
    Activations& a = m.a;
    ActivationGrads& d = m.da;
    crossentropy_backward(d.dlogits, a.probs, targets, loss_scale, BT, Vp);
    matmul_backward(d.dln, c.tied_head() ? g.wte : g.wout, nullptr, d.dlogits, a.lnf, c.tied_head() ? p.wte : p.wout,
                    BT, C, Vp);
    norm_backward(c, d.dresidual, g.lnfw, g.lnfb, d.dln, a.residual3 + (c.L - 1) * BT * C, p.lnfw, a.lnf_mean,
                  a.lnf_rstd, BT);
    for (int l = c.L - 1; l >= 0; l--) {
        // d.dresidual holds ∂loss/∂(output of block l)
        const float* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * BT * C;
        const float* ln1 = a.ln1 + l * BT * C;        const float* ln1_mean = slice(a.ln1_mean, l, BT);
        const float* ln1_rstd = a.ln1_rstd + l * BT;  const float* qkv = a.qkv + l * BT * QKV;
        const float* att = a.att + l * BT * NH * T;   const float* atty = a.atty + l * BT * C;
        const float* residual2 = a.residual2 + l * BT * C;  const float* ln2 = a.ln2 + l * BT * C;
        const float* ln2_mean = slice(a.ln2_mean, l, BT);   const float* ln2_rstd = a.ln2_rstd + l * BT;
        const float* fch = a.fch + l * BT * FC;       const float* fch_gelu = a.fch_gelu + l * BT * H;
        // MLP branch: residual3 = residual2 + fcproj(act(fc(norm2(residual2)))), act GELU or SwiGLU
        matmul_backward(d.dfch_gelu, slice(g.fcprojw, l, C * H), slice(g.fcprojb, l, C), d.dresidual, fch_gelu,
                        slice(p.fcprojw, l, C * H), BT, H, C);
        if (c.llama()) swiglu_backward(d.dfch, fch, d.dfch_gelu, BT, c.F);
        else gelu_backward(d.dfch, fch, d.dfch_gelu, BT * FC);
        matmul_backward(d.dln, slice(g.fcw, l, FC * C), slice(g.fcb, l, FC), d.dfch, ln2, slice(p.fcw, l, FC * C), BT,
                        C, FC);
        norm_backward(c, d.dx, g.ln2w + l * C, slice(g.ln2b, l, C), d.dln, residual2, p.ln2w + l * C, ln2_mean,
                      ln2_rstd, BT);
        // residual2 fed both the skip path and ln2: its gradient is the sum of the two
        for (size_t i = 0; i < BT * C; i++) d.dresidual[i] += d.dx[i];
        // attention branch: residual2 = residual + attproj(attention(qkv(norm1(residual))))
        matmul_backward(d.datty, slice(g.attprojw, l, C * C), slice(g.attprojb, l, C), d.dresidual, atty,
                        slice(p.attprojw, l, C * C), BT, C, C);
        attention_backward(d.dqkv, d.datty, qkv, att, B, T, C, NH, KVH);
        if (c.llama()) rope_backward(d.dqkv, m.rope.data(), B, T, NH, KVH, c.hs());  // rotated back
        matmul_backward(d.dln, slice(g.qkvw, l, QKV * C), slice(g.qkvb, l, QKV), d.dqkv, ln1, slice(p.qkvw, l, QKV * C),
                        BT, C, QKV);
        norm_backward(c, d.dx, g.ln1w + l * C, slice(g.ln1b, l, C), d.dln, residual, p.ln1w + l * C, ln1_mean, ln1_rstd,
                      BT);
        for (size_t i = 0; i < BT * C; i++) d.dresidual[i] += d.dx[i];  // same for the block's input
        if (sync) sync->block_done(l);  // block l's parameter gradients are final: their sum may start
    }
    encoder_backward(g.wte, g.wpe, d.dresidual, inputs, B, T, C);
}

// ----------------------------------------------------------------------------
// Optimizer

// One AdamW update with bias correction; t is the 1-based update count. Each gradient is
// multiplied by grad_scale as it is read: that is how clipping is applied, without an
// extra pass over the gradient buffer. Only this replica's shard of the parameters is
// updated (all of them without ZeRO); the moments are indexed from the shard's start.
void adamw_update(Model& m, const AdamWConfig& h, float lr, int t, float grad_scale = 1.0f) {
    PhaseScope timed(PHASE_OPTIMIZER);
    float bc1 = 1.0f - powf(h.beta1, (float)t), bc2 = 1.0f - powf(h.beta2, (float)t);
    float inv_bc1 = 1.0f / bc1, inv_bc2 = 1.0f / bc2;
    std::vector<size_t> sizes = m.cfg.param_sizes();
    size_t offset = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        float wd = param_decays(i) ? h.weight_decay : 0.0f;
        auto [lo, hi] = m.shard.clip(offset, offset + sizes[i]);
        offset += sizes[i];
        if (lo >= hi) continue;
        float *p = m.params.data() + lo, *g = m.grads.data() + lo;
        float *mm = m.adam_m.data() + (lo - m.shard.begin), *vv = m.adam_v.data() + (lo - m.shard.begin);
        const float beta1 = h.beta1, beta2 = h.beta2, eps = h.eps;
        const size_t n = hi - lo;
#pragma omp parallel for simd
        for (size_t j = 0; j < n; j++) {
            float grad = g[j] * grad_scale;
            float mj = beta1 * mm[j] + (1.0f - beta1) * grad;
            float vj = beta2 * vv[j] + (1.0f - beta2) * grad * grad;
            mm[j] = mj, vv[j] = vj;
            // bias correction by multiplying with 1/bc: divisions are what bound this loop
            float mhat = mj * inv_bc1, vhat = vj * inv_bc2;
            p[j] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[j]);
        }
    }
}

// ‖g‖² over the whole buffer. Partial sums over fixed 4096-element blocks, added in
// order, so the result is the same for any number of threads.
double global_norm_squared(const float* g, size_t n) {
    const size_t block = 4096;
    size_t nblocks = (n + block - 1) / block;
    std::vector<double> partial(nblocks);
#pragma omp parallel for
    for (size_t b = 0; b < nblocks; b++) {
        double s = 0;
        const size_t end = std::min(n, (b + 1) * block);
#pragma omp simd reduction(+ : s)
        for (size_t i = b * block; i < end; i++) s += (double)g[i] * g[i];
        partial[b] = s;
    }
    double total = 0;
    for (double s : partial) total += s;
    return total;
}
float global_norm(const float* g, size_t n) { return (float)std::sqrt(global_norm_squared(g, n)); }

// ZeRO stage 1's helpers for train_step(); without ZeRO (the shard is the whole buffer)
// they are the all-reduce, the norm of the whole buffer, and nothing.
// The gradient sync: the sum over the replicas, of this replica's shard only with ZeRO. With
// --grad-sync overlap the buckets the last backward started, the rest, and the wait for them.
void sync_gradients(Model& m, GradSync& sync, const Comm& comm) {
    if (sync.finish(m.grads.data(), comm)) return;
    if (m.shard.size == m.grads.size()) comm.allreduce_sum(m.grads.data(), m.grads.size());
    else comm.reduce_scatter_sum(m.grads.data(), m.grads.size());
}
// The global gradient norm: with ZeRO each replica's shard norm², summed in one scalar all-reduce.
float synced_gradient_norm(const Model& m, const Comm& comm) {
    double sq = global_norm_squared(m.grads.data() + m.shard.begin, m.shard.size);
    return (float)std::sqrt(m.shard.size == m.grads.size() ? sq : comm.allreduce_sum(sq));
}
// After the update: every replica's updated shard to every replica (ZeRO); else nothing.
void share_updated_weights(Model& m, const Comm& comm) {
    if (m.shard.size != m.params.size()) comm.allgather(m.params.data(), m.params.size());
}

// The noise scale's norm of the first micro-batch (host/noise.h), while the gradient buffer
// holds its gradient alone: |g|² of each of the given units (host/gradsync.h), all of them after
// the backward, or a bucket's just before its sum starts (A = 1 with --grad-sync overlap).
void measure_unit(Model& m, size_t u) {
    m.unit_sq[u] = global_norm_squared(m.grads.data() + m.norm_units[u].begin, m.norm_units[u].count);
}
void measure_units(Model& m, const std::vector<int>& units) {
    for (int u : units) measure_unit(m, u);
}
void measure_all_units(Model& m) {
    for (size_t u = 0; u < m.norm_units.size(); u++) measure_unit(m, u);
}
// |G_small|² from the units, added in buffer order: the same bits however they were measured.
double first_micro_batch_norm_squared(const Model& m, const BatchPlan& plan) {
    double sq = 0;
    for (double u : m.unit_sq) sq += u;
    return small_batch_norm_squared(sq, plan);
}

// ----------------------------------------------------------------------------
// One optimizer step: the heart of the trainer.

// measure_noise: also the squared norm of the first micro-batch's gradient, for the noise
// scale (host/noise.h); one more pass over the gradient buffer.
StepResult train_step(Model& m, DataLoader& loader, const BatchPlan& plan, const Comm& comm, const AdamWConfig& opt,
                      float lr, float grad_clip, int t, bool measure_noise = false, GradSync* grad_sync = nullptr) {
    PhaseStep timed;  // TRAIN_PHASE_TIMES
    const int B = plan.B, T = plan.T;
    GradSync at_end, &sync = grad_sync ? *grad_sync : at_end;  // without one: --grad-sync end
    // 1. zero the parameter gradients: they accumulate over the micro-batches below
    std::fill(m.grads.begin(), m.grads.end(), 0.0f);

    // 2. accumulation loop: A micro-batches of this replica's share of the global batch
    loader.next_chunk();
    double loss_sum = 0;
    const MeasureUnits measure = [&](const std::vector<int>& units) { measure_units(m, units); };
    for (int a = 0; a < plan.A; a++) {
        loader.micro_batch(a, m.inputs.data(), m.targets.data());
        model_forward(m, m.inputs.data(), B, T);
        loss_sum += model_loss(m, m.targets.data(), B, T);
        const bool first = a == 0 && measure_noise;  // the noise scale's micro-batch (host/noise.h)
        GradSync* overlap = sync.hook(a, plan.A, m.grads.data(), comm, first ? &measure : nullptr);
        model_backward(m, m.inputs.data(), m.targets.data(), B, T, 1.0f / (float)plan.global_tokens(),
                       overlap);  // overlap: the last one starts the buckets' sums
        if (first && !overlap) measure_all_units(m);  // else each bucket's, as its sum starts
    }

    // 3. gradient sync, once per step: sum over replicas = mean over the global batch (with
    //    --zero 1 a reduce-scatter: each replica receives its shard); the loss and |G_small|²
    //    averaged over replicas in one scalar all-reduce
    sync_gradients(m, sync, comm);
    double means[2] = {loss_sum / plan.A, measure_noise ? first_micro_batch_norm_squared(m, plan) : 0};
    comm.step_means(means);                            // (and whether to stop after this step)
    float loss = (float)means[0];

    // 4. clip: scale the synced gradient down to norm grad_clip (the same on every replica);
    //    a NaN or an infinity stops the run here, before it reaches the weights
    float norm = synced_gradient_norm(m, comm);
    check_finite_step(loss, norm, t);
    float grad_scale = (grad_clip > 0 && norm > grad_clip) ? grad_clip / (norm + 1e-6f) : 1.0f;

    // 5. update, with the clipping scale applied to each gradient as AdamW reads it: this
    //    replica's shard, then (--zero 1) an all-gather of the updated weights
    adamw_update(m, opt, lr, t, grad_scale);
    share_updated_weights(m, comm);
    return {loss, norm, (float)std::sqrt(means[1])};
}

// ----------------------------------------------------------------------------
// The CPU trainer, as host/run.h's training run sees it (host/trainer.h).

struct CpuTrainer {
    Model m;
    bool measure_noise;
    const Comm& comm;
    GradSync grad_sync;  // --grad-sync: the communication helper the step hands the last backward
    // With ZeRO, AdamW's moments of every parameter, for the checkpoint files only: filled by
    // load_state() before upload() or by download() before a save, freed by the next step.
    std::vector<float> file_m, file_v;
    CpuTrainer(const ModelConfig& mc, const BatchPlan& plan, const Config& cfg, const Comm& comm)
        : measure_noise(noise_scale_measured(cfg.noise_ema, plan)), comm(comm) {
        model_build(m, mc, plan.B, plan.T, Shard::of(mc.num_params(), comm.rank, comm.world, cfg.zero && comm.world > 1));
        grad_sync = GradSync(mc, cfg.grad_sync == "overlap", false, cfg.grad_bucket, m.shard);
        if (kv_cache_used(cfg, comm.rank)) kv_cache_build(m);
    }
    bool sharded() const { return m.shard.size != m.params.size(); }
    static Comm connect(int* argc, char*** argv) {
        Comm comm = Comm::init(argc, argv);
        if (comm.world == 1) note_ignored_slurm_tasks();
        return comm;
    }
    static void check_options(const Config& cfg) { refuse_gpu_only_options(cfg); }
    // one attention, one of each kernel: nothing is chosen at run time
    static std::vector<std::string> run_time_choices() { return {}; }
    static void choose_kernels(Config&, const ModelConfig&, const BatchPlan&, double, const Comm&) {}
    // the dry run's kernel-by-kernel table is the GPU trainer's (host/cost.h)
    static std::vector<std::string> kernel_plan(const ModelConfig&, const BatchPlan&, const Config&,
                                                const DeviceSpeed&) {
        return {};
    }
    static std::string hardware(const Config& cfg, const Comm& comm) {
        check_thread_count(cfg.threads);
        CpuAllowance cpus = cpu_allowance(ranks_sharing_processors(comm));  // a collective: every rank
        std::string why;
        if (cfg.threads > 0) {
            omp_set_num_threads(cfg.threads);
        } else if (!getenv("OMP_NUM_THREADS")) {  // OpenMP's own default sees the affinity mask only
            omp_set_num_threads(cpus.usable());
            why = cpus.note();
        }
        return strf("CPU threads: %d%s", omp_get_max_threads(), why.c_str());
    }
    static constexpr int GATHERED_WEIGHT_BYTES = sizeof(float);  // --zero 1's all-gather
    // R: the replicas, over which --zero 1 shards AdamW's state.
    static MemoryUse memory_use(const ModelConfig& mc, int B, int T, int R, const Config& cfg) {
        Shard shard = Shard::of(mc.num_params(), 0, R, cfg.zero && R > 1);
        double p = shard.padded * 4.0;
        MemoryUse use{{{"parameters", p}, {"gradients", p},
                       {shard.size == shard.padded ? "AdamW state" : strf("AdamW state (1/%d shard)", R), 8.0 * shard.size},
                       {"activations", activation_floats(mc, B, T) * 4.0}}};
        if (kv_cache_used(cfg, 0)) use.parts.push_back({"key/value cache (samples)", kv_cache_elements(mc, T) * 4.0});
        return use;
    }
    // Linux hands out memory it does not have and kills the process when it is touched:
    // what does not fit in the memory free now is refused up front.
    static double memory_available(const Config& cfg) { return cfg.device_memory > 0 ? cfg.device_memory : free_ram(); }
    // The kernel's estimate of what can be allocated without swapping (MemAvailable: free
    // memory plus caches it can drop); the total RAM where /proc/meminfo does not say.
    static double free_ram() {
        if (FILE* f = fopen("/proc/meminfo", "r")) {
            char line[256];
            long long kib = -1;
            while (kib < 0 && fgets(line, sizeof line, f)) sscanf(line, "MemAvailable: %lld kB", &kib);
            fclose(f);
            if (kib >= 0) return kib * 1024.0;
        }
        return (double)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGE_SIZE);
    }
    float* params() { return m.params.data(); }
    float* adam_m() { return sharded() ? file_moments(file_m) : m.adam_m.data(); }
    float* adam_v() { return sharded() ? file_moments(file_v) : m.adam_v.data(); }
    float* file_moments(std::vector<float>& full) {
        if (full.empty()) allocate(full, m.cfg.num_params(), "AdamW's state for the checkpoint files");
        return full.data();
    }
    // The CPU computes on the host copies themselves; with ZeRO, a loaded optimizer state
    // is cut to this replica's shard.
    void upload() {
        if (!sharded() || file_m.empty()) return;
        auto [lo, hi] = m.shard.clip(0, m.cfg.num_params());
        for (size_t i = lo; i < hi; i++) m.adam_m[i - lo] = file_m[i], m.adam_v[i - lo] = file_v[i];
        free_file_moments();
    }
    // With ZeRO, every replica takes part (a collective): the shards of the moments are
    // gathered through the gradient buffer, which is free between steps.
    void download() {
        if (!sharded()) return;
        for (auto [shard, full] : {std::pair{&m.adam_m, &file_m}, std::pair{&m.adam_v, &file_v}}) {
            std::copy(shard->begin(), shard->end(), m.grads.begin() + m.shard.begin);
            comm.allgather(m.grads.data(), m.grads.size());
            std::copy(m.grads.begin(), m.grads.begin() + m.cfg.num_params(), file_moments(*full));
        }
    }
    void free_file_moments() { std::vector<float>().swap(file_m), std::vector<float>().swap(file_v); }
    StepResult train_step(DataLoader& data, const BatchPlan& plan, const Comm& comm, const AdamWConfig& opt, float lr,
                          float grad_clip, int t) {
        free_file_moments();  // (a checkpoint's copy)
        return ::train_step(m, data, plan, comm, opt, lr, grad_clip, t, measure_noise, &grad_sync);
    }
    // Forward only: the B·T per-position losses (validation and HellaSwag, host/eval.h).
    const float* token_losses(const int* inputs, const int* targets, int B, int T) {
        model_forward(m, inputs, B, T);
        model_loss(m, targets, B, T);
        return m.a.losses;
    }
    const float* next_token_logits(const int* context, int T) { return logits_of(context, T, NO_CACHE); }
    const float* next_token_logits_cached(const int* tokens, int T, int P) { return logits_of(tokens, T, P); }
    const float* logits_of(const int* tokens, int T, int P) {  // the last position's
        model_forward(m, tokens, 1, T, P);
        return m.a.logits + (size_t)(T - 1) * m.cfg.Vp;
    }
};

#ifndef TRAIN_NO_MAIN
int main(int argc, char** argv) {
    choose_passive_openmp_wait(argv);
    return main_with_errors<CpuTrainer>(argc, argv);
}
#endif
