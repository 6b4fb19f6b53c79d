// train.cpp: GPT-2 training on the CPU, the reference every faster path is checked against.
//
// Read it top to bottom: shapes and the accumulation contract; the layers, each a
// forward/backward pair; the model and its three buffers; AdamW; train_step(), the whole
// optimizer step in one function; main(), which wires in data, logging and checkpoints.
//
// Shapes, used in every name and comment below:
//   B   sequences per micro-batch        T   tokens per sequence (T ≤ maxT)
//   C   channels                         NH  attention heads, each hs = C/NH wide
//   L   transformer blocks               V   vocabulary, Vp ≥ V its padded size
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

#include "host/batch.h"
#include "host/checkpoint.h"
#include "host/cli.h"
#include "host/comm.h"
#include "host/corpus.h"
#include "host/data.h"
#include "host/log.h"
#include "host/rng.h"
#include "host/sample.h"
#include "host/schedule.h"

#ifdef _OPENMP
#include <omp.h>
#else  // the Makefile warned: everything runs on one core
static int omp_get_max_threads() { return 1; }
static void omp_set_num_threads(int) {}
#endif

// ----------------------------------------------------------------------------
// Matrix products: where nearly all the time goes, hence a blocked kernel.
//
// gemm computes C[M,N] (= or +=) A[M,K] · B[K,N], where A and B may be transposed views
// (element (i,k) of A is A[i*a_row + k*a_col], likewise for B) and C is row-major with
// row stride ldc. Blocks of A and B are first copied ("packed") into contiguous panels so
// that the innermost kernel streams through memory and keeps a MR×NR tile of C in
// registers. Each element of C is computed by one thread in a fixed order, so results do
// not depend on timing: runs are bit-reproducible.

#if defined(__AVX512F__)
constexpr int NR = 32;  // two 16-float vector registers per row of the tile
#else
constexpr int NR = 16;
#endif
constexpr int MR = 6;    // rows of the register tile: 6×NR accumulators fit the register file
constexpr int KC = 256;  // depth of a packed block: a B panel of KC×NR stays in L1
constexpr int MC = 96;   // rows of A per thread-block (a multiple of MR)
constexpr int NC = 1024; // columns of B per packed block (a multiple of NR): KC×NC stays in L2

// The register tile: acc[MR][NR] = Ap (KC×MR, packed) · Bp (KC×NR, packed).
static inline void gemm_tile(int kc, const float* __restrict Ap, const float* __restrict Bp, float* __restrict acc_out) {
    float acc[MR][NR] = {};
    for (int k = 0; k < kc; k++) {
        const float* b = Bp + k * NR;
        for (int i = 0; i < MR; i++) {
            float a = Ap[k * MR + i];
            for (int j = 0; j < NR; j++) acc[i][j] += a * b[j];
        }
    }
    memcpy(acc_out, acc, sizeof acc);
}

static void gemm(int M, int N, int K, const float* A, long a_row, long a_col, const float* B, long b_row, long b_col,
                 float* C, long ldc, bool accumulate) {
    static thread_local std::vector<float> Bp_storage;
    std::vector<float>& Bp = Bp_storage;
    int nc_max = std::min(NC, (N + NR - 1) / NR * NR);
    Bp.resize((size_t)KC * nc_max);
    for (int jc = 0; jc < N; jc += NC) {
        int nc = std::min(NC, N - jc);
        int panels = (nc + NR - 1) / NR;
        for (int pc = 0; pc < K; pc += KC) {
            int kc = std::min(KC, K - pc);
            bool add = accumulate || pc > 0;  // later depth blocks add to the first one
            // pack B[pc:pc+kc, jc:jc+nc] into panels of NR columns, zero-padded
#pragma omp parallel for schedule(static)
            for (int p = 0; p < panels; p++)
                for (int k = 0; k < kc; k++)
                    for (int j = 0; j < NR; j++) {
                        int col = jc + p * NR + j;
                        Bp[((size_t)p * kc + k) * NR + j] =
                            col < jc + nc ? B[(long)(pc + k) * b_row + (long)col * b_col] : 0.0f;
                    }
            int mblocks = (M + MC - 1) / MC;
#pragma omp parallel for schedule(static)
            for (int mb = 0; mb < mblocks; mb++) {
                float Ap[MC * KC];
                float tile[MR * NR];
                int ic = mb * MC, mc = std::min(MC, M - ic);
                // pack A[ic:ic+mc, pc:pc+kc] into panels of MR rows, zero-padded
                for (int r = 0; r < mc; r += MR)
                    for (int k = 0; k < kc; k++)
                        for (int i = 0; i < MR; i++)
                            Ap[(size_t)r * kc + k * MR + i] =
                                r + i < mc ? A[(long)(ic + r + i) * a_row + (long)(pc + k) * a_col] : 0.0f;
                for (int p = 0; p < panels; p++)
                    for (int r = 0; r < mc; r += MR) {
                        gemm_tile(kc, Ap + (size_t)r * kc, Bp.data() + (size_t)p * kc * NR, tile);
                        int rows = std::min(MR, mc - r), cols = std::min(NR, nc - p * NR);
                        for (int i = 0; i < rows; i++) {
                            float* c = C + (long)(ic + r + i) * ldc + jc + p * NR;
                            if (add)
                                for (int j = 0; j < cols; j++) c[j] += tile[i * NR + j];
                            else
                                for (int j = 0; j < cols; j++) c[j] = tile[i * NR + j];
                        }
                    }
            }
        }
    }
}

// ----------------------------------------------------------------------------
// Layers. Each forward has its backward right below it.

// Token + position embedding: out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]
// out (B,T,C), inp (B,T), wte (Vp,C), wpe (maxT,C)
void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float* o = out + ((size_t)b * T + t) * C;
            const float* tok = wte + (size_t)inp[b * T + t] * C;
            const float* pos = wpe + (size_t)t * C;
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
                dwpe[(size_t)t * C + c] += d;
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

// Linear layer: out (N,OC) = inp (N,IC) · w (OC,IC)ᵀ + bias (OC); bias may be null.
void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int N, int IC, int OC) {
    if (bias) {
#pragma omp parallel for
        for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, bias, OC * sizeof(float));
    }
    // B = wᵀ: element (k = ic, j = oc) is w[oc*IC + ic]
    gemm(N, OC, IC, inp, IC, 1, w, 1, IC, out, OC, bias != nullptr);
}
void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w, int N,
                     int IC, int OC) {
    gemm(N, IC, OC, dout, OC, 1, w, IC, 1, dinp, IC, false);   // dinp (N,IC)  = dout · w
    gemm(OC, IC, N, dout, 1, OC, inp, IC, 1, dw, IC, true);    // dw  (OC,IC) += doutᵀ · inp
    if (dbias) {
#pragma omp parallel for
        for (int o = 0; o < OC; o++) {
            float s = 0;
            for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + o];
            dbias[o] += s;
        }
    }
}

// Causal multi-head self-attention on the fused projection qkv (B,T,3C) = [q | k | v].
// Head h uses channels [h·hs, (h+1)·hs) of each of q, k, v. att (B,NH,T,T) keeps the
// softmax probabilities (row t uses only columns ≤ t); out (B,T,C).
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float* q = qkv + ((size_t)b * T + t) * C3 + h * hs;
                float* a = att + (((size_t)b * NH + h) * T + t) * T;
                float maxv = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {  // causal: position t sees positions ≤ t
                    const float* k = qkv + ((size_t)b * T + t2) * C3 + C + h * hs;
                    float s = 0;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    a[t2] = s * scale;
                    maxv = fmaxf(maxv, a[t2]);
                }
                float sum = 0;
                for (int t2 = 0; t2 <= t; t2++) sum += (a[t2] = expf(a[t2] - maxv));
                for (int t2 = 0; t2 <= t; t2++) a[t2] /= sum;
                for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0;
                float* o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* v = qkv + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    for (int i = 0; i < hs; i++) o[i] += a[t2] * v[i];
                }
            }
}
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T, int C,
                        int NH) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    // Each (b, h) owns its own slice of dqkv, so threads never write the same element.
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            std::vector<float> datt(T), dpre(T);
            for (int t = 0; t < T; t++)
                for (int i = 0; i < hs; i++)
                    for (int part = 0; part < 3; part++) dqkv[((size_t)b * T + t) * C3 + part * C + h * hs + i] = 0;
            for (int t = 0; t < T; t++) {
                const float* a = att + (((size_t)b * NH + h) * T + t) * T;
                const float* d = dout + ((size_t)b * T + t) * C + h * hs;
                // out_t = Σ a[t2] v_t2  →  datt[t2] = d · v_t2,  dv_t2 += a[t2] d
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* v = qkv + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    float* dv = dqkv + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    float s = 0;
                    for (int i = 0; i < hs; i++) s += d[i] * v[i], dv[i] += a[t2] * d[i];
                    datt[t2] = s;
                }
                // softmax backward: dpre = a ⊙ (datt - Σ a·datt)
                float dot = 0;
                for (int t2 = 0; t2 <= t; t2++) dot += a[t2] * datt[t2];
                for (int t2 = 0; t2 <= t; t2++) dpre[t2] = a[t2] * (datt[t2] - dot) * scale;
                // pre[t2] = q_t · k_t2 · scale
                const float* q = qkv + ((size_t)b * T + t) * C3 + h * hs;
                float* dq = dqkv + ((size_t)b * T + t) * C3 + h * hs;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = qkv + ((size_t)b * T + t2) * C3 + C + h * hs;
                    float* dk = dqkv + ((size_t)b * T + t2) * C3 + C + h * hs;
                    for (int i = 0; i < hs; i++) dq[i] += dpre[t2] * k[i], dk[i] += dpre[t2] * q[i];
                }
            }
        }
}

// GELU, tanh approximation (as in GPT-2): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
constexpr float GELU_K = 0.7978845608028654f;  // √(2/π)
void gelu_forward(float* out, const float* inp, size_t N) {
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
    }
}
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t N) {
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) {
        float x = inp[i], u = GELU_K * (x + 0.044715f * x * x * x), th = tanhf(u);
        float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du) * dout[i];
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
        for (int i = 0; i < V; i++) maxv = fmaxf(maxv, x[i]);
        double sum = 0;
        for (int i = 0; i < V; i++) sum += (p[i] = expf(x[i] - maxv));
        for (int i = 0; i < V; i++) p[i] = (float)(p[i] / sum);
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
// two moments, and named views into them.

// Views into the parameter buffer (or the gradient buffer: same layout), in file order.
struct ParamTensors {
    float *wte;       // (Vp, C)
    float *wpe;       // (maxT, C)
    float *ln1w, *ln1b;          // (L, C)
    float *qkvw;      // (L, 3C, C)
    float *qkvb;      // (L, 3C)
    float *attprojw;  // (L, C, C)
    float *attprojb;  // (L, C)
    float *ln2w, *ln2b;          // (L, C)
    float *fcw;       // (L, 4C, C)
    float *fcb;       // (L, 4C)
    float *fcprojw;   // (L, C, 4C)
    float *fcprojb;   // (L, C)
    float *lnfw, *lnfb;          // (C)
};
static ParamTensors param_views(float* base, const ModelConfig& cfg) {
    ParamTensors p;
    float** fields[NUM_PARAM_TENSORS] = {&p.wte, &p.wpe, &p.ln1w, &p.ln1b, &p.qkvw, &p.qkvb, &p.attprojw, &p.attprojb,
                                         &p.ln2w, &p.ln2b, &p.fcw, &p.fcb, &p.fcprojw, &p.fcprojb, &p.lnfw, &p.lnfb};
    std::vector<size_t> sizes = cfg.param_sizes();
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) *fields[i] = base, base += sizes[i];
    return p;
}

// Activations kept from forward for backward, sized for the largest (B, T) of the run.
// A smaller batch uses the front of each tensor, with strides from its own B and T.
struct Activations {
    float *encoded;               // (B, T, C)     embeddings, the input of block 0
    float *ln1, *ln1_mean, *ln1_rstd;  // (L, B, T, C), (L, B, T), (L, B, T)
    float *qkv;                   // (L, B, T, 3C)
    float *att;                   // (L, B, NH, T, T) attention probabilities
    float *atty;                  // (L, B, T, C)  attention output, before its projection
    float *attproj;               // (L, B, T, C)
    float *residual2;             // (L, B, T, C)  after the attention residual
    float *ln2, *ln2_mean, *ln2_rstd;  // (L, B, T, C), (L, B, T), (L, B, T)
    float *fch;                   // (L, B, T, 4C) before GELU
    float *fch_gelu;              // (L, B, T, 4C)
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
    float *dx;         // (B, T, C)   a block LayerNorm's input gradient, before it joins the stream
    float *dln;        // (B, T, C)   gradient of a LayerNorm output (ln1, ln2 or lnf)
    float *datty;      // (B, T, C)
    float *dqkv;       // (B, T, 3C)
    float *dfch;       // (B, T, 4C)
    float *dfch_gelu;  // (B, T, 4C)
    float *dlogits;    // (B, T, Vp)
};

// Lays out `fields` one after another in `buffer`; sizes in floats.
static void carve(std::vector<float>& buffer, std::vector<std::pair<float**, size_t>> fields) {
    size_t total = 0;
    for (auto& f : fields) total += f.second;
    buffer.assign(total, 0.0f);
    float* p = buffer.data();
    for (auto& f : fields) *f.first = p, p += f.second;
}

struct GPT2 {
    ModelConfig cfg;
    int maxB = 0, maxT = 0;          // activation capacity
    std::vector<float> params, grads, adam_m, adam_v;  // each num_params floats, file order
    ParamTensors p, g;               // views into params and grads
    std::vector<float> act_buffer, dact_buffer;
    Activations a;
    ActivationGrads da;
    std::vector<int> inputs, targets;  // (B, T) of the current micro-batch
};

// The activation layout, written once: each field and its size in floats.
static std::vector<std::pair<float**, size_t>> activation_layout(Activations& a, const ModelConfig& c, int B, int T) {
    size_t BT = (size_t)B * T, L = c.L, C = c.C, NH = c.NH, Vp = c.Vp;
    return {{&a.encoded, BT * C},
            {&a.ln1, L * BT * C}, {&a.ln1_mean, L * BT}, {&a.ln1_rstd, L * BT},
            {&a.qkv, L * BT * 3 * C}, {&a.att, L * B * NH * T * T}, {&a.atty, L * BT * C},
            {&a.attproj, L * BT * C}, {&a.residual2, L * BT * C},
            {&a.ln2, L * BT * C}, {&a.ln2_mean, L * BT}, {&a.ln2_rstd, L * BT},
            {&a.fch, L * BT * 4 * C}, {&a.fch_gelu, L * BT * 4 * C}, {&a.fcproj, L * BT * C},
            {&a.residual3, L * BT * C},
            {&a.lnf, BT * C}, {&a.lnf_mean, BT}, {&a.lnf_rstd, BT},
            {&a.logits, BT * Vp}, {&a.probs, BT * Vp}, {&a.losses, BT}};
}
static std::vector<std::pair<float**, size_t>> activation_grad_layout(ActivationGrads& d, const ModelConfig& c, int B,
                                                                      int T) {
    size_t BT = (size_t)B * T, C = c.C;
    return {{&d.dresidual, BT * C}, {&d.dx, BT * C}, {&d.dln, BT * C}, {&d.datty, BT * C},
            {&d.dqkv, BT * 3 * C}, {&d.dfch, BT * 4 * C}, {&d.dfch_gelu, BT * 4 * C}, {&d.dlogits, BT * c.Vp}};
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

void gpt2_build(GPT2& m, const ModelConfig& cfg, int B, int T) {
    m.cfg = cfg, m.maxB = B, m.maxT = T;
    size_t n = cfg.num_params();
    m.params.assign(n, 0.0f), m.grads.assign(n, 0.0f), m.adam_m.assign(n, 0.0f), m.adam_v.assign(n, 0.0f);
    m.p = param_views(m.params.data(), cfg);
    m.g = param_views(m.grads.data(), cfg);
    carve(m.act_buffer, activation_layout(m.a, cfg, B, T));
    carve(m.dact_buffer, activation_grad_layout(m.da, cfg, B, T));
    size_t BT = (size_t)B * T;
    m.inputs.assign(BT, 0), m.targets.assign(BT, 0);
}

// GPT-2 initialisation: weights N(0, 0.02), the two projections that write into the
// residual stream scaled by 1/√(2L) (so the stream's variance does not grow with depth),
// biases 0, LayerNorm weights 1, padded vocabulary rows 0.
void gpt2_init_random(GPT2& m, uint64_t seed) {
    const ModelConfig& c = m.cfg;
    Rng rng(seed);
    std::vector<size_t> sizes = c.param_sizes();
    float* t = m.params.data();
    float residual_std = 0.02f / sqrtf(2.0f * c.L);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        std::string name = PARAM_NAMES[i];
        bool is_weight = name == "wte" || name == "wpe" || name == "qkvw" || name == "fcw";
        bool is_residual_proj = name == "attprojw" || name == "fcprojw";
        bool is_ln_weight = name == "ln1w" || name == "ln2w" || name == "lnfw";
        size_t n = name == "wte" ? (size_t)c.V * c.C : sizes[i];  // padded rows stay 0
        for (size_t j = 0; j < n; j++)
            t[j] = is_weight ? (float)(0.02 * rng.normal())
                 : is_residual_proj ? (float)(residual_std * rng.normal())
                 : is_ln_weight ? 1.0f : 0.0f;
        t += sizes[i];
    }
}

// Forward to the logits (B, T, Vp) for inputs (B, T), B ≤ maxB and T ≤ maxT.
void gpt2_forward(GPT2& m, const int* inputs, int B, int T) {
    const ModelConfig& c = m.cfg;
    const int C = c.C, NH = c.NH, Vp = c.Vp;
    const size_t BT = (size_t)B * T;
    ParamTensors& p = m.p;
    Activations& a = m.a;
    encoder_forward(a.encoded, inputs, p.wte, p.wpe, B, T, C);
    for (int l = 0; l < c.L; l++) {
        const float* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * BT * C;
        // this block's slices of the activations and parameters
        float* ln1 = a.ln1 + l * BT * C;       float* ln1_mean = a.ln1_mean + l * BT;
        float* ln1_rstd = a.ln1_rstd + l * BT; float* qkv = a.qkv + l * BT * 3 * C;
        float* att = a.att + l * BT * NH * T;  float* atty = a.atty + l * BT * C;
        float* attproj = a.attproj + l * BT * C;  float* residual2 = a.residual2 + l * BT * C;
        float* ln2 = a.ln2 + l * BT * C;       float* ln2_mean = a.ln2_mean + l * BT;
        float* ln2_rstd = a.ln2_rstd + l * BT; float* fch = a.fch + l * BT * 4 * C;
        float* fch_gelu = a.fch_gelu + l * BT * 4 * C;  float* fcproj = a.fcproj + l * BT * C;
        float* residual3 = a.residual3 + l * BT * C;
        // x + attention(ln1(x)), then x + mlp(ln2(x))
        layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, p.ln1w + l * C, p.ln1b + l * C, BT, C);
        matmul_forward(qkv, ln1, p.qkvw + (size_t)l * 3 * C * C, p.qkvb + l * 3 * C, BT, C, 3 * C);
        attention_forward(atty, att, qkv, B, T, C, NH);
        matmul_forward(attproj, atty, p.attprojw + (size_t)l * C * C, p.attprojb + l * C, BT, C, C);
        residual_forward(residual2, residual, attproj, BT * C);
        layernorm_forward(ln2, ln2_mean, ln2_rstd, residual2, p.ln2w + l * C, p.ln2b + l * C, BT, C);
        matmul_forward(fch, ln2, p.fcw + (size_t)l * 4 * C * C, p.fcb + l * 4 * C, BT, C, 4 * C);
        gelu_forward(fch_gelu, fch, BT * 4 * C);
        matmul_forward(fcproj, fch_gelu, p.fcprojw + (size_t)l * C * 4 * C, p.fcprojb + l * C, BT, 4 * C, C);
        residual_forward(residual3, residual2, fcproj, BT * C);
    }
    layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, a.residual3 + (c.L - 1) * BT * C, p.lnfw, p.lnfb, BT, C);
    matmul_forward(a.logits, a.lnf, p.wte, nullptr, BT, C, Vp);  // the output head is wte, tied
}

// Mean cross-entropy of the logits from gpt2_forward against targets (B, T).
float gpt2_loss(GPT2& m, const int* targets, int B, int T) {
    int N = B * T;
    crossentropy_forward(m.a.losses, m.a.probs, m.a.logits, targets, N, m.cfg.V, m.cfg.Vp);
    double sum = 0;
    for (int n = 0; n < N; n++) sum += m.a.losses[n];
    return (float)(sum / N);
}

// Backward of gpt2_forward + gpt2_loss, with each position's loss scaled by loss_scale
// (1/(B·T·A·R) in training). Adds (+=) into m.grads.
void gpt2_backward(GPT2& m, const int* inputs, const int* targets, int B, int T, float loss_scale) {
    const ModelConfig& c = m.cfg;
    const int C = c.C, NH = c.NH, Vp = c.Vp;
    const size_t BT = (size_t)B * T;
    ParamTensors& p = m.p;
    ParamTensors& g = m.g;
    Activations& a = m.a;
    ActivationGrads& d = m.da;
    crossentropy_backward(d.dlogits, a.probs, targets, loss_scale, BT, Vp);
    matmul_backward(d.dln, g.wte, nullptr, d.dlogits, a.lnf, p.wte, BT, C, Vp);
    layernorm_backward(d.dresidual, g.lnfw, g.lnfb, d.dln, a.residual3 + (c.L - 1) * BT * C, p.lnfw, a.lnf_mean,
                       a.lnf_rstd, BT, C);
    for (int l = c.L - 1; l >= 0; l--) {
        // d.dresidual holds ∂loss/∂(output of block l)
        const float* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * BT * C;
        const float* ln1 = a.ln1 + l * BT * C;        const float* ln1_mean = a.ln1_mean + l * BT;
        const float* ln1_rstd = a.ln1_rstd + l * BT;  const float* qkv = a.qkv + l * BT * 3 * C;
        const float* att = a.att + l * BT * NH * T;   const float* atty = a.atty + l * BT * C;
        const float* residual2 = a.residual2 + l * BT * C;  const float* ln2 = a.ln2 + l * BT * C;
        const float* ln2_mean = a.ln2_mean + l * BT;  const float* ln2_rstd = a.ln2_rstd + l * BT;
        const float* fch = a.fch + l * BT * 4 * C;    const float* fch_gelu = a.fch_gelu + l * BT * 4 * C;
        // MLP branch: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
        matmul_backward(d.dfch_gelu, g.fcprojw + (size_t)l * C * 4 * C, g.fcprojb + l * C, d.dresidual, fch_gelu,
                        p.fcprojw + (size_t)l * C * 4 * C, BT, 4 * C, C);
        gelu_backward(d.dfch, fch, d.dfch_gelu, BT * 4 * C);
        matmul_backward(d.dln, g.fcw + (size_t)l * 4 * C * C, g.fcb + l * 4 * C, d.dfch, ln2,
                        p.fcw + (size_t)l * 4 * C * C, BT, C, 4 * C);
        layernorm_backward(d.dx, g.ln2w + l * C, g.ln2b + l * C, d.dln, residual2, p.ln2w + l * C, ln2_mean,
                           ln2_rstd, BT, C);
        // residual2 fed both the skip path and ln2: its gradient is the sum of the two
        for (size_t i = 0; i < BT * C; i++) d.dresidual[i] += d.dx[i];
        // attention branch: residual2 = residual + attproj(attention(qkv(ln1(residual))))
        matmul_backward(d.datty, g.attprojw + (size_t)l * C * C, g.attprojb + l * C, d.dresidual, atty,
                        p.attprojw + (size_t)l * C * C, BT, C, C);
        attention_backward(d.dqkv, d.datty, qkv, att, B, T, C, NH);
        matmul_backward(d.dln, g.qkvw + (size_t)l * 3 * C * C, g.qkvb + l * 3 * C, d.dqkv, ln1,
                        p.qkvw + (size_t)l * 3 * C * C, BT, C, 3 * C);
        layernorm_backward(d.dx, g.ln1w + l * C, g.ln1b + l * C, d.dln, residual, p.ln1w + l * C, ln1_mean,
                           ln1_rstd, BT, C);
        for (size_t i = 0; i < BT * C; i++) d.dresidual[i] += d.dx[i];  // same for the block's input
    }
    encoder_backward(g.wte, g.wpe, d.dresidual, inputs, B, T, C);
}

// ----------------------------------------------------------------------------
// Optimizer

struct AdamWConfig {
    float beta1, beta2, eps, weight_decay;
};

// Decoupled weight decay applies to the matrices and embeddings only, not to biases or
// LayerNorm parameters (they set scales and offsets, which decay would pull towards 0).
inline bool decays(int tensor) {
    std::string n = PARAM_NAMES[tensor];
    return n == "wte" || n == "wpe" || n == "qkvw" || n == "attprojw" || n == "fcw" || n == "fcprojw";
}

// One AdamW update with bias correction; t is the 1-based update count.
void adamw_update(GPT2& m, const AdamWConfig& h, float lr, int t) {
    float bc1 = 1.0f - powf(h.beta1, (float)t), bc2 = 1.0f - powf(h.beta2, (float)t);
    std::vector<size_t> sizes = m.cfg.param_sizes();
    size_t offset = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        float wd = decays(i) ? h.weight_decay : 0.0f;
        float *p = m.params.data() + offset, *g = m.grads.data() + offset;
        float *mm = m.adam_m.data() + offset, *vv = m.adam_v.data() + offset;
#pragma omp parallel for
        for (size_t j = 0; j < sizes[i]; j++) {
            mm[j] = h.beta1 * mm[j] + (1.0f - h.beta1) * g[j];
            vv[j] = h.beta2 * vv[j] + (1.0f - h.beta2) * g[j] * g[j];
            float mhat = mm[j] / bc1, vhat = vv[j] / bc2;
            p[j] -= lr * (mhat / (sqrtf(vhat) + h.eps) + wd * p[j]);
        }
        offset += sizes[i];
    }
}

// ‖g‖₂ over the whole buffer. Partial sums over fixed 4096-element blocks, added in
// order, so the result is the same for any number of threads.
float global_norm(const float* g, size_t n) {
    const size_t block = 4096;
    size_t nblocks = (n + block - 1) / block;
    std::vector<double> partial(nblocks);
#pragma omp parallel for
    for (size_t b = 0; b < nblocks; b++) {
        double s = 0;
        for (size_t i = b * block; i < std::min(n, (b + 1) * block); i++) s += (double)g[i] * g[i];
        partial[b] = s;
    }
    double total = 0;
    for (double s : partial) total += s;
    return (float)std::sqrt(total);
}

// ----------------------------------------------------------------------------
// One optimizer step: the heart of the trainer.

struct StepResult {
    float loss;       // mean training loss over the global batch
    float grad_norm;  // global gradient norm before clipping
};

StepResult train_step(GPT2& m, DataLoader& loader, const BatchPlan& plan, const Comm& comm, const AdamWConfig& opt,
                      float lr, float grad_clip, int t) {
    const int B = plan.B, T = plan.T;
    // 1. zero the parameter gradients: they accumulate over the micro-batches below
    std::fill(m.grads.begin(), m.grads.end(), 0.0f);

    // 2. accumulation loop: A micro-batches of this replica's share of the global batch
    loader.next_chunk();
    double loss_sum = 0;
    for (int a = 0; a < plan.A; a++) {
        loader.micro_batch(a, m.inputs.data(), m.targets.data());
        gpt2_forward(m, m.inputs.data(), B, T);
        loss_sum += gpt2_loss(m, m.targets.data(), B, T);
        gpt2_backward(m, m.inputs.data(), m.targets.data(), B, T, 1.0f / (float)plan.global_tokens());
    }

    // 3. gradient sync, once per step: sum over replicas = mean over the global batch
    comm.allreduce_sum(m.grads.data(), m.grads.size());
    float loss = (float)comm.allreduce_mean(loss_sum / plan.A);

    // 4. clip by the global norm of the synced gradient, identical on every replica
    float norm = global_norm(m.grads.data(), m.grads.size());
    if (grad_clip > 0 && norm > grad_clip) {
        float scale = grad_clip / (norm + 1e-6f);
        for (float& g : m.grads) g *= scale;
    }

    // 5. update
    adamw_update(m, opt, lr, t);
    return {loss, norm};
}

// Mean loss over `batches` validation micro-batches (replicas split them, then average).
float evaluate(GPT2& m, DataLoader& val, int batches, const BatchPlan& plan, const Comm& comm) {
    val.reset();
    double sum = 0;
    for (int i = 0; i < batches; i++) {
        val.next_chunk();
        val.micro_batch(0, m.inputs.data(), m.targets.data());
        gpt2_forward(m, m.inputs.data(), plan.B, plan.T);
        sum += gpt2_loss(m, m.targets.data(), plan.B, plan.T);
    }
    return (float)comm.allreduce_mean(sum / batches);
}

// Continues `prompt` by n tokens, one forward pass per token over the last maxT tokens.
std::vector<int> generate(GPT2& m, std::vector<int> tokens, int n, float temperature, int top_k, Rng& rng) {
    for (int i = 0; i < n; i++) {
        int T = std::min((int)tokens.size(), m.maxT);
        const int* context = tokens.data() + tokens.size() - T;
        gpt2_forward(m, context, 1, T);
        const float* last = m.a.logits + (size_t)(T - 1) * m.cfg.Vp;
        tokens.push_back(sample_token(last, m.cfg.V, temperature, top_k, rng));
    }
    return tokens;
}

// ----------------------------------------------------------------------------
// main: set-up, the loop over steps, evaluation, samples, logs and checkpoints.

#ifndef TRAIN_NO_MAIN

static std::string decode(const Tokenizer& tok, const std::vector<int>& tokens, size_t from) {
    std::string s;
    for (size_t i = from; i < tokens.size(); i++) s += tok.decode(tokens[i]);
    return s;
}

// The prompt is text for byte-level models and comma-separated token ids with a
// tokenizer (this trainer has no BPE encoder). Empty: the end-of-text token, or a newline.
static std::vector<int> parse_prompt(const std::string& text, const Tokenizer& tok, int V) {
    std::vector<int> ids;
    if (text.empty()) ids.push_back(tok.eot >= 0 ? tok.eot : '\n');
    else if (tok.pieces.empty()) for (unsigned char ch : text) ids.push_back(ch);
    else {
        size_t pos = 0;
        while (pos < text.size()) {
            size_t end = text.find(',', pos);
            std::string item = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
            char* stop;
            long id = strtol(item.c_str(), &stop, 10);
            if (item.empty() || *stop) throw UsageError("--prompt with a tokenizer expects token ids like 464,318");
            ids.push_back((int)id);
            pos = end == std::string::npos ? text.size() : end + 1;
        }
    }
    for (int id : ids)
        if (id < 0 || id >= V) throw UsageError(strf("--prompt token %d is out of range for vocabulary %d", id, V));
    return ids;
}

static int run(int argc, char** argv, const Comm& comm) {
    Config cfg;
    if (!parse_command_line(argc, argv, cfg)) return 0;
    if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
    const bool main_rank = comm.rank == 0;
    auto say = [&](const std::string& s) {
        if (main_rank) printf("%s\n", s.c_str()), fflush(stdout);
    };

    // ---- model shape: from a checkpoint, or from the options
    ModelConfig mc;
    bool builtin = cfg.train_data.empty();
    if (!cfg.load.empty()) {
        mc = read_model_header(cfg.load);
    } else {
        mc.L = cfg.layers, mc.NH = cfg.heads, mc.C = cfg.channels, mc.maxT = cfg.max_seq_len;
        mc.V = cfg.vocab ? cfg.vocab : (builtin ? 256 : 50257);
        mc.Vp = cfg.padded_vocab ? cfg.padded_vocab : (mc.V + 127) / 128 * 128;
        if (mc.Vp < mc.V) throw UsageError(strf("--padded-vocab %d is smaller than --vocab %d", mc.Vp, mc.V));
    }
    if (cfg.seq_len > mc.maxT)
        throw Error(strf("--seq-len %d is longer than the model's maximum sequence length %d", cfg.seq_len, mc.maxT));
    BatchPlan plan = plan_batch(cfg.batch_size, cfg.seq_len, comm.world, cfg.total_batch);

    // ---- data
    std::unique_ptr<DataLoader> train_data, val_data;
    if (builtin) {
        say(strf("data: built-in corpus (byte tokens); its entropy is %.4f nats/token, the loss of a perfect model",
                 corpus::entropy_per_token()));
        if (mc.V < 256) throw Error(strf("the built-in corpus needs a vocabulary of at least 256, the model has %d", mc.V));
        train_data = std::make_unique<DataLoader>("<built-in corpus, train>", corpus::generate(4 << 20, 1), mc.V);
        val_data = std::make_unique<DataLoader>("<built-in corpus, val>", corpus::generate(256 << 10, 2), mc.V);
    } else {
        if (cfg.val_data.empty()) throw UsageError("--train-data needs --val-data as well");
        train_data = std::make_unique<DataLoader>(expand_glob(cfg.train_data), mc.V);
        val_data = std::make_unique<DataLoader>(expand_glob(cfg.val_data), mc.V);
        say(strf("data: %zu train shard(s), %s tokens; %zu val shard(s), %s tokens", train_data->num_shards(),
                 with_commas(train_data->total_tokens()).c_str(), val_data->num_shards(),
                 with_commas(val_data->total_tokens()).c_str()));
    }
    train_data->configure(plan.B, plan.T, plan.A, plan.R, comm.rank, cfg.shuffle, cfg.seed);
    val_data->configure(plan.B, plan.T, 1, plan.R, comm.rank, false, 0);
    int val_batches = (int)std::min<long long>(cfg.val_batches, val_data->chunks_per_epoch());

    // ---- every replica must agree on what it is about to do
    std::string agreed = strf("%d %d %d %d %d %d|%d %d %d|%lld|", mc.maxT, mc.V, mc.Vp, mc.L, mc.NH, mc.C, plan.B,
                              plan.T, plan.A, (long long)train_data->fingerprint());
    for (int i = 1; i < argc; i++) agreed += std::string(argv[i]) + " ";
    uint64_t h = 1469598103934665603ull;
    for (char ch : agreed) h = (h ^ (unsigned char)ch) * 1099511628211ull;
    comm.check_agree(h, "the configuration or the data");
    std::vector<std::string> hosts = comm.allgather(comm.host);
    if (comm.world > 1)
        for (int r = 0; r < comm.world; r++) say(strf("rank %d on %s", r, hosts[r].c_str()));

    // ---- the plan, in numbers
    say(strf("model: L=%d NH=%d C=%d maxT=%d V=%d Vp=%d, %s parameters", mc.L, mc.NH, mc.C, mc.maxT, mc.V, mc.Vp,
             with_commas(mc.num_params()).c_str()));
    say(describe_plan(plan, cfg.steps));
    double MB = 1.0 / (1 << 20), pbytes = mc.num_params() * 4.0;
    say(strf("memory per replica: parameters %.1f MB, gradients %.1f MB, AdamW state %.1f MB, activations %.1f MB",
             pbytes * MB, pbytes * MB, 2 * pbytes * MB, activation_floats(mc, plan.B, plan.T) * 4.0 * MB));
    say(strf("threads: %d; communication: %s, %d replica%s", omp_get_max_threads(), comm.backend(), comm.world,
             comm.world == 1 ? "" : "s"));
    if (cfg.dry_run) return 0;

    // ---- model, optimizer state, and where to continue from
    GPT2 m;
    gpt2_build(m, mc, plan.B, plan.T);
    if (!cfg.load.empty()) load_model_params(cfg.load, mc, m.params.data());
    else gpt2_init_random(m, cfg.seed);

    const bool writes = main_rank && !cfg.out_dir.empty();
    int start = 0;
    Rng sample_rng(cfg.sample_seed);
    int resume_step = cfg.out_dir.empty() ? -1 : latest_checkpoint(cfg.out_dir);
    if (cfg.resume && resume_step >= 0) {
        ModelConfig saved = read_model_header(model_path(cfg.out_dir, resume_step));
        if (saved.num_params() != mc.num_params() || saved.C != mc.C || saved.L != mc.L || saved.Vp != mc.Vp)
            throw Error("the checkpoint in '" + cfg.out_dir + "' has a different model shape than this run");
        load_model_params(model_path(cfg.out_dir, resume_step), mc, m.params.data());
        TrainState st = load_state(state_path(cfg.out_dir, resume_step), m.adam_m.data(), m.adam_v.data(),
                                   m.params.size());
        if (st.global_batch != plan.global_tokens())
            throw Error(strf("the checkpoint was made with a global batch of %s tokens, this run has %s; resume "
                             "with the same --total-batch (any split of it works)",
                             with_commas(st.global_batch).c_str(), with_commas(plan.global_tokens()).c_str()));
        train_data->set_position(st.data);
        sample_rng.state = st.sample_rng;
        start = st.step;
        say(strf("resumed from step %d in %s", start, cfg.out_dir.c_str()));
    } else if (cfg.resume) {
        say("no checkpoint to resume from in '" + cfg.out_dir + "': starting from step 0");
    } else if (resume_step >= 0) {
        throw Error(strf("'%s' already holds checkpoints up to step %d; pass --resume 1 to continue that run, or "
                         "choose another --out-dir",
                         cfg.out_dir.c_str(), resume_step));
    }

    RunLog log;
    if (writes) {
        make_dir(cfg.out_dir);
        log.open(cfg.out_dir + "/log.jsonl", start > 0);
        log.write(strf("{\"type\":\"config\",\"L\":%d,\"NH\":%d,\"C\":%d,\"V\":%d,\"Vp\":%d,\"maxT\":%d,\"B\":%d,"
                       "\"T\":%d,\"A\":%d,\"R\":%d,\"global_batch\":%lld,\"steps\":%d,\"start\":%d,\"lr\":%g}",
                       mc.L, mc.NH, mc.C, mc.V, mc.Vp, mc.maxT, plan.B, plan.T, plan.A, plan.R,
                       plan.global_tokens(), cfg.steps, start, cfg.lr));
    }
    Tokenizer tokenizer = cfg.tokenizer.empty() ? Tokenizer{} : Tokenizer::load(cfg.tokenizer);
    if (tokenizer.pieces.empty() && mc.V > 256 && cfg.sample_every > 0)
        say("note: no --tokenizer given, samples print token ids above 255 as <id>");
    std::vector<int> prompt = parse_prompt(cfg.prompt, tokenizer, mc.V);

    LrSchedule schedule{cfg.lr, cfg.warmup, cfg.steps, cfg.lr_final_frac, cfg.lr_schedule == "constant"};
    AdamWConfig opt{cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay};
    auto save_checkpoint = [&](int step) {
        if (!writes) return;
        TrainState st{step, train_data->position(), sample_rng.state, plan.global_tokens()};
        save_state(state_path(cfg.out_dir, step), st, m.adam_m.data(), m.adam_v.data(), m.params.size());
        save_model(model_path(cfg.out_dir, step), mc, m.params.data());
        say(strf("checkpoint: %s", model_path(cfg.out_dir, step).c_str()));
    };

    // ---- the loop over optimizer steps
    double ema_ms = 0, total_ms = 0;
    int timed_steps = 0;
    for (int step = start; step <= cfg.steps; step++) {
        bool last = step == cfg.steps;
        long long tokens_seen = (long long)step * plan.global_tokens();
        if (cfg.val_every > 0 && (step % cfg.val_every == 0 || last)) {
            float val = evaluate(m, *val_data, val_batches, plan, comm);
            say(strf("val loss %.4f", val));
            if (writes) log.val(step, tokens_seen, val);
        }
        if (cfg.sample_every > 0 && main_rank && (step % cfg.sample_every == 0 || last) && step > start) {
            std::vector<int> out = generate(m, prompt, cfg.sample_len, cfg.temperature, cfg.top_k, sample_rng);
            std::string text = decode(tokenizer, out, prompt.size());
            say("---- sample ----\n" + text + "\n----------------");
            if (writes) log.sample(step, text);
        }
        if (last) break;

        auto t0 = std::chrono::steady_clock::now();
        float lr = schedule.at(step);
        StepResult r = train_step(m, *train_data, plan, comm, opt, lr, cfg.grad_clip, step + 1);
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (!std::isfinite(r.loss)) throw Error(strf("loss became %f at step %d; lower --lr?", r.loss, step + 1));
        ema_ms = step == start ? ms : 0.9 * ema_ms + 0.1 * ms;
        if (step > start) total_ms += ms, timed_steps++;  // the first step warms caches
        double tps = plan.global_tokens() / (ms / 1000.0);
        say(strf("step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %s tok/s | eta %s", step + 1, cfg.steps,
                 r.loss, lr, r.grad_norm, ms, with_commas((long long)tps).c_str(),
                 format_duration((cfg.steps - step - 1) * ema_ms / 1000.0).c_str()));
        if (writes) log.train(step + 1, cfg.steps, tokens_seen + plan.global_tokens(), r.loss, lr, r.grad_norm, ms, tps);
        if ((cfg.ckpt_every > 0 && (step + 1) % cfg.ckpt_every == 0) || step + 1 == cfg.steps) save_checkpoint(step + 1);
    }
    if (timed_steps > 0)
        say(strf("average: %.1f ms/step, %s tokens/s (steps 2..%d)", total_ms / timed_steps,
                 with_commas((long long)(plan.global_tokens() / (total_ms / timed_steps / 1000.0))).c_str(), cfg.steps));
    return 0;
}

int main(int argc, char** argv) {
    Comm comm = Comm::init(&argc, &argv);
    int code = 0;
    try {
        code = run(argc, argv, comm);
    } catch (const UsageError& e) {
        fprintf(stderr, "train: %s\n", e.what());
        comm.abort_all(2);
    } catch (const Error& e) {
        if (comm.world > 1) fprintf(stderr, "train: error (rank %d): %s\n", comm.rank, e.what());
        else fprintf(stderr, "train: error: %s\n", e.what());
        comm.abort_all(1);
    } catch (const std::bad_alloc&) {
        fprintf(stderr, "train: error: out of memory (try a smaller --batch-size)\n");
        comm.abort_all(1);
    }
    comm.finalize();
    return code;
}
#endif
