// train_gpt.cu: GPT-2 training on NVIDIA GPUs, one process per GPU.
//
// The same model, optimizer step, options, log lines and checkpoint files as train.cpp, the
// CPU reference that every kernel here is tested against (test/gpu_trainer/trainer.cu), and the
// same order: read it top to bottom. The model and its buffers, forward and backward as functions
// of the model (on gpu/'s kernels, a header per layer); the optimizer; train_step(), the
// whole optimizer step in one function; last, the adapter that host/run.h's training run
// drives (host/trainer.h). What is decided before anything is allocated (memory, which
// kernels fit the device, --attention auto) is gpu/plan.cuh's; the replicas' start-up and
// NCCL are gpu/replicas.cuh's.
//
// Shapes, as in train.cpp: B sequences of T tokens, C channels, NH heads of hs = C/NH,
// L blocks, V tokens in the vocabulary (Vp ≥ V padded). A leading d marks a gradient.
// The accumulation contract, as in train.cpp:
//   * parameter gradients ADD (+=), activation gradients are OVERWRITTEN (=);
//   * the loss is scaled by 1/(B·T·A·R) before backward, so the gradients summed over A
//     micro-batches and R replicas are the mean over the global batch.
//
// Precision is chosen at build time (make train_gpt PRECISION=bf16, the default, or fp32):
//   * fp32: everything in float32, the tier checked against train.cpp to 1e-5; the matrix
//     products in full float32 unless --tf32 1 lets cuBLAS use TF32 tensor cores;
//   * bf16: the weights as the kernels read them, the activations and their gradients in
//     bf16 (floatX, gpu/common.cuh); the products on tensor cores with float32 sums; the
//     master weights, AdamW's moments and the accumulated parameter gradients in float32,
//     and every statistic, softmax and loss computed in float32. Checkpoints are float32
//     either way, and interchangeable with train's.
//
// Deterministic: no kernel uses floating-point atomics, and every reduction adds its terms
// in a fixed order, so two runs with the same inputs give the same bits (cuBLAS guarantees
// the same for its products on one GPU model).
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "gpu/adamw.cuh"
#include "gpu/attention.cuh"
#include "gpu/attention_cached.cuh"
#include "gpu/classifier.cuh"
#include "gpu/common.cuh"
#include "gpu/crossentropy.cuh"
#include "gpu/encoder.cuh"
#include "gpu/flash_attention.cuh"
#include "gpu/layernorm.cuh"
#include "gpu/matmul.cuh"
#include "gpu/plan.cuh"
#include "gpu/replicas.cuh"
#include "gpu/residual.cuh"
#include "gpu/rmsnorm.cuh"
#include "gpu/rope.cuh"
#include "gpu/swiglu.cuh"
#include "host/gradsync.h"
#include "host/run.h"

namespace gpu {

// ----------------------------------------------------------------------------
// The model: parameters, gradients, AdamW's m and v, activations, activation gradients and
// scratch, each ONE device allocation carved into named tensors (ParamViews, host/checkpoint.h,
// and the structs below). Sized for the largest (B, T); a smaller batch uses the front of each
// tensor with strides from its own B and T.

// Activations kept from forward for backward. Unlike train.cpp's: no attention
// probabilities (the backward recomputes them from per-row statistics), no probabilities
// after the classifier (the fused cross-entropy overwrites the logits with their gradient),
// no logits of the whole micro-batch (gpu/classifier.cuh: a chunk of rows at a time, R rows,
// R = classifier_rows), and the two projections that feed the residual stream are not kept.
struct Activations {
    floatX *encoded;                   // (B, T, C)
    floatX *ln1;                       // (L, B, T, C)
    float *ln1_mean, *ln1_rstd;        // (L, B, T)
    floatX *qkv;                       // (L, B, T, QKV); Llama's q and k RoPE-rotated
    float *att_stats;                  // (L, S, B, NH, T) per attention row: S = 2, softmax maximum then sum
                                       // (cuBLAS path), or S = 1, log-sum-exp (fused path)
    floatX *atty;                      // (L, B, T, C)
    floatX *residual2;                 // (L, B, T, C)
    floatX *ln2;                       // (L, B, T, C)
    float *ln2_mean, *ln2_rstd;        // (L, B, T)
    floatX *fch;                       // (L, B, T, 4C) GELU's input; Llama's (L, B, T, 2F), [gate | up]
    floatX *fch_gelu;                  // (L, B, T, 4C or F) GELU's (SwiGLU's) output; with --recompute 1
                                       // one layer's, redone in backward
    floatX *residual3;                 // (L, B, T, C)
    floatX *lnf;                       // (B, T, C)
    float *lnf_mean, *lnf_rstd;        // (B, T)
    floatX *logits;                    // (R, Vp) a chunk of rows' logits, overwritten by their gradient in
                                       // backward; --classifier whole: R = B·T
    float *losses;                     // (B, T)
};
// Gradients of activations: one block's worth, reused layer after layer (as train.cpp).
struct ActivationGrads {
    floatX *dresidual;  // (B, T, C)
    floatX *dln;        // (B, T, C)
    floatX *datty;      // (B, T, C)
    floatX *dqkv;       // (B, T, QKV)
    floatX *dfch;       // (B, T, 4C) of GELU's input (fcproj's backward applies gelu'); Llama's (B, T, 2F)
    floatX *dh;         // Llama: (B, T, F) of SwiGLU's output; GPT-2: none
};
// Working memory of single layers.
struct Scratch {
    AttentionScratch att;  // cuBLAS path, gpu/attention.cuh: (3,B,NH,T,hs) ×2, (B,NH,T,hs), (B,NH,T,T) ×2
    float *att_delta;      // fused path, gpu/flash_attention.cuh: (B, NH, T) each row's dy·y, then
                           // (five-product backward) the float32 dq (B, T, C) and its counters
    floatX *proj;          // (B, T, C)  an output projection, before it joins the residual stream
    float *partials;       // (row_chunks(B·T), 4C) column sums per chunk of rows
    float *rope;           // Llama: (maxT, hs/2, 2) RoPE's cos and sin (host/model.h's rope_table)
};

// Statistics kept per attention row: the cuBLAS path's maximum and sum, or the fused
// path's log-sum-exp.
inline size_t att_stats_per_row(bool fused) { return fused ? 1 : 2; }

// --classifier: the rows of logits the buffer holds for micro-batches of up to B×T.
inline int logits_rows(const ModelConfig& c, int B, int T, bool whole_classifier) {
    return classifier_rows(B * T, c.Vp, whole_classifier);
}
inline Layout activation_layout(Activations& a, const ModelConfig& c, int B, int T, bool recompute, bool fused,
                                bool whole_classifier) {
    size_t BT = (size_t)B * T, L = c.L, C = c.C, NH = c.NH, Vp = c.Vp;
    size_t R = logits_rows(c, B, T, whole_classifier);
    size_t QKV = c.qkv_channels(), FC = c.fc_channels(), H = c.hidden(), mean = c.llama() ? 0 : BT;  // RMSNorm: no mean
    return {tensor(a.encoded, BT * C),
            tensor(a.ln1, L * BT * C), tensor(a.ln1_mean, L * mean), tensor(a.ln1_rstd, L * BT),
            tensor(a.qkv, L * BT * QKV), tensor(a.att_stats, L * att_stats_per_row(fused) * B * NH * T),
            tensor(a.atty, L * BT * C), tensor(a.residual2, L * BT * C),
            tensor(a.ln2, L * BT * C), tensor(a.ln2_mean, L * mean), tensor(a.ln2_rstd, L * BT),
            tensor(a.fch, L * BT * FC), tensor(a.fch_gelu, (recompute ? 1 : L) * BT * H),
            tensor(a.residual3, L * BT * C),
            tensor(a.lnf, BT * C), tensor(a.lnf_mean, mean), tensor(a.lnf_rstd, BT),
            tensor(a.logits, R * Vp), tensor(a.losses, BT)};
}
inline Layout activation_grad_layout(ActivationGrads& d, const ModelConfig& c, int B, int T) {
    size_t BT = (size_t)B * T, C = c.C;
    return {tensor(d.dresidual, BT * C), tensor(d.dln, BT * C), tensor(d.datty, BT * C),
            tensor(d.dqkv, BT * c.qkv_channels()), tensor(d.dfch, BT * c.fc_channels()),
            tensor(d.dh, c.llama() ? BT * c.F : 0)};
}
// The attention scratch is the chosen path's only: the fused path has no (B,NH,T,T).
inline Layout scratch_layout(Scratch& s, const ModelConfig& c, int B, int T, bool fused) {
    size_t BT = (size_t)B * T, C = c.C, att = (size_t)B * c.NH * T * T, QKV = c.qkv_channels();
    s.att = {}, s.att_delta = nullptr;
    Layout attention = fused ? Layout{tensor(s.att_delta, flash_backward_scratch_floats(B, T, c.C, c.NH))}
                             : Layout{tensor(s.att.qkvr, BT * QKV), tensor(s.att.dqkvr, BT * QKV),
                                      tensor(s.att.yr, BT * C), tensor(s.att.att, att), tensor(s.att.datt, att)};
    attention.insert(attention.end(),
                     {tensor(s.proj, BT * C), tensor(s.partials, (size_t)row_chunks((int)BT) * c.fc_channels()),
                      tensor(s.rope, c.llama() ? (size_t)c.maxT * c.hs() : 0)});
    return attention;
}
// Bytes of activations, their gradients and scratch for a micro-batch of B×T: exactly
// what model_build allocates for them (gpu/plan.cuh's memory_use counts them).
inline size_t activation_bytes(const ModelConfig& c, int B, int T, bool recompute, bool fused,
                               bool whole_classifier) {
    Activations a;
    ActivationGrads d;
    Scratch s;
    return layout_bytes(activation_layout(a, c, B, T, recompute, fused, whole_classifier)) +
           layout_bytes(activation_grad_layout(d, c, B, T)) + layout_bytes(scratch_layout(s, c, B, T, fused));
}

// The tokens of a micro-batch as the device reads them: [inputs BT] [targets BT] [group
// start BT+1] [group token BT] [group position BT] (gpu/encoder.cuh's TokenGroups).
inline size_t token_ints(int B, int T) { return 5 * (size_t)B * T + 1; }
// The step's sums on the device: [0] loss sum, [1] ‖g‖², [2] |G_small|² (host/noise.h), [3..] partials
constexpr size_t SUMS = 3 + MAX_NORM_BLOCKS;
// The noise scale's units of the gradient buffer (host/gradsync.h, gpu/adamw.cuh): their
// places, the lists measured together (all n, then each bucket's), partial sums and |g|².
struct NormUnits : NormUnitsDevice {
    int* lists = nullptr;        // (2n): 0..n-1, then the buckets' units, bucket after bucket
    std::map<int, int> list_at;  // on the host: a bucket's first unit → its list's offset in lists
};
inline Layout norm_units_layout(NormUnits& u, size_t n) {
    return {tensor(u.begin, n), tensor(u.count, n), tensor(u.lists, 2 * n), tensor(u.partials, n * UNIT_BLOCKS),
            tensor(u.unit_sq, n)};
}
inline size_t norm_units_bytes(const ModelConfig& c) {
    NormUnits u;
    return layout_bytes(norm_units_layout(u, norm_units(c).size()));
}

// The kernel paths a model computes with: each changes the rounding, so a resumed run takes
// the same (gpu/plan.cuh, run_time_choices).
struct KernelPaths {
    bool recompute = false;        // --recompute 1: GELU's output redone in backward, not kept
    bool fused_attention = true;   // --attention: gpu/flash_attention.cuh, else gpu/attention.cuh (cuBLAS)
    Epilogues epilogues = Epilogues::fused;  // --epilogues: the backward's GELU and bias gradients (gpu/matmul.cuh)
    int ln_cols = 0;               // LayerNorm backward's columns per block: C, or chunks that fit (gpu/fit.cuh)
    bool whole_classifier = false;  // --classifier whole: the logits of every row at once (gpu/classifier.cuh)
};

struct Model {
    ModelConfig cfg;
    int maxB = 0, maxT = 0;  // activation capacity
    int logits_rows = 0;     // rows of the logits buffer: a chunk's (--classifier chunked) or maxB·maxT (whole)
    KernelPaths k;
    // --zero 1: the parameters this replica updates; the buffers of every parameter are padded
    // to shard.padded, those of the shard hold shard.size (without ZeRO, both are num_params)
    Shard shard;
    DeviceBuffer<float> params_buf;  // float32 master weights: bf16, the shard's; fp32, every one (the kernels read them)
    DeviceBuffer<float> grads_buf;   // (shard.padded) float32 gradients, file order
    DeviceBuffer<float> m_buf, v_buf;  // (shard.size) AdamW's moments
    DeviceBuffer<floatX> weights_buf;  // (shard.padded) bf16: the weights as the kernels read them; fp32: none
    DeviceBuffer<char> acts_buf, dacts_buf, scratch_buf;
    DeviceBuffer<int> tokens_buf;      // the current micro-batch's tokens (token_ints)
    DeviceBuffer<double> sums_buf;     // (SUMS)
    NormUnits units;                   // the noise scale's norm by units (host/gradsync.h)
    DeviceBuffer<char> units_buf;
    floatX* weights = nullptr;         // weights_buf, or params_buf in fp32
    ParamViews<floatX> p;              // views into the weights as the kernels read them
    ParamTensors g;                    // views into the float32 gradients
    Activations a;
    ActivationGrads d;
    Scratch s;
    int *inputs = nullptr, *targets = nullptr;  // (B, T) each, on the device (in tokens_buf)
    TokenGroups groups;                         // the inputs' positions grouped by token, on the device
    // the host's side of the tokens: `slots` micro-batches (one step's A) of pinned memory, so
    // that each is copied asynchronously; a slot is written again only after the step's one wait
    int* pinned_tokens = nullptr;
    int slots = 1;
    TokenGrouper grouper;
    std::vector<int> host_inputs, host_targets;  // (B, T) the current micro-batch, as the loader serves it
    DeviceBuffer<floatX> kv_cache;  // generation: (L, maxT, 2·KVH·hs) each position's keys, then values

    Model() = default;
    Model(const Model&) = delete;
    ~Model() {
        if (pinned_tokens) cudaFreeHost(pinned_tokens);
    }
    bool sharded() const { return shard.size != shard.padded; }
};

// Allocates the model for micro-batches up to B×T, with `slots` token slots.
void model_build(Model& m, const ModelConfig& cfg, int B, int T, int slots, const KernelPaths& k, const Shard& shard) {
    m.cfg = cfg, m.maxB = B, m.maxT = T, m.slots = slots, m.k = k, m.shard = shard;
    const size_t BT = (size_t)B * T;
    m.params_buf.alloc(master_count(shard), "the parameters"), m.grads_buf.alloc(shard.padded, "the gradients");
    m.m_buf.alloc(shard.size, "AdamW's first moments"), m.v_buf.alloc(shard.size, "AdamW's second moments");
    if (weights_copy()) m.weights_buf.alloc(shard.padded, "the bf16 copy of the weights");
    m.weights = weights_copy() ? m.weights_buf.ptr : (floatX*)m.params_buf.ptr;
    m.p = param_views(m.weights, cfg);
    m.g = param_views(m.grads_buf.ptr, cfg);
    m.logits_rows = logits_rows(cfg, B, T, k.whole_classifier);
    carve(m.acts_buf, activation_layout(m.a, cfg, B, T, k.recompute, k.fused_attention, k.whole_classifier),
          "the activations");
    carve(m.dacts_buf, activation_grad_layout(m.d, cfg, B, T), "the activation gradients");
    carve(m.scratch_buf, scratch_layout(m.s, cfg, B, T, k.fused_attention), "the layers' scratch");
    if (cfg.llama()) {  // RoPE's table, once: the same double-precision values train.cpp rotates with
        std::vector<float> table = rope_table(cfg);
        CUDA_CHECK(cudaMemcpy(m.s.rope, table.data(), table.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
    const size_t ints = token_ints(B, T);
    m.tokens_buf.alloc(ints, "the tokens");
    CUDA_CHECK(cudaMallocHost((void**)&m.pinned_tokens, (size_t)slots * ints * sizeof(int)));
    m.host_inputs.assign(BT, 0), m.host_targets.assign(BT, 0);
    int* t = m.tokens_buf.ptr;
    m.inputs = t, m.targets = t + BT;
    m.groups = {t + 2 * BT, t + 3 * BT + 1, t + 4 * BT + 1, 0};
    m.sums_buf.alloc(SUMS, "the loss and norm sums");
    const std::vector<GradRange> units = norm_units(cfg);
    carve(m.units_buf, norm_units_layout(m.units, units.size()), "the noise scale's norm units");
    m.units.n = (int)units.size();
    std::vector<size_t> begin, count;
    std::vector<int> all(units.size());
    for (size_t u = 0; u < units.size(); u++) begin.push_back(units[u].begin), count.push_back(units[u].count), all[u] = (int)u;
    CUDA_CHECK(cudaMemcpy(m.units.begin, begin.data(), begin.size() * sizeof(size_t), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(m.units.count, count.data(), count.size() * sizeof(size_t), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(m.units.lists, all.data(), all.size() * sizeof(int), cudaMemcpyHostToDevice));
}
// The gradient sync's buckets' lists of units, after the identity list: each bucket measures
// its own before its sum starts (host/gradsync.h). The buckets hold every unit once.
void norm_units_of_buckets(Model& m, const std::vector<GradBucket>& buckets) {
    std::vector<int> lists;
    for (const GradBucket& b : buckets) {
        if (b.units.empty()) continue;
        m.units.list_at[b.units.front()] = m.units.n + (int)lists.size();
        lists.insert(lists.end(), b.units.begin(), b.units.end());
    }
    if ((int)lists.size() != m.units.n) throw Error(strf("the gradient buckets hold %zu norm units of %d", lists.size(), m.units.n));
    CUDA_CHECK(cudaMemcpy(m.units.lists + m.units.n, lists.data(), lists.size() * sizeof(int), cudaMemcpyHostToDevice));
}

// A micro-batch (targets may be absent) to the device, with its positions grouped by token,
// in one asynchronous copy from pinned slot `slot`.
void upload_tokens(Model& m, const int* in, const int* tgt, int B, int T, int slot = 0) {
    const int BT = B * T;
    const size_t cap = (size_t)m.maxB * m.maxT, ints = token_ints(m.maxB, m.maxT);  // offsets fixed by the capacity
    int* h = m.pinned_tokens + (size_t)slot * ints;
    std::copy(in, in + BT, h);
    if (tgt) std::copy(tgt, tgt + BT, h + cap);
    m.groups.groups = m.grouper.group(in, BT, m.cfg.V, h + 2 * cap, h + 3 * cap + 1, h + 4 * cap + 1);
    CUDA_CHECK(cudaMemcpyAsync(m.tokens_buf.ptr, h, ints * sizeof(int), cudaMemcpyHostToDevice, ctx.stream));
}

// Generation's key/value cache (host/sample.h), for contexts of up to m.maxT tokens (the run's -t).
void kv_cache_build(Model& m) { m.kv_cache.alloc(kv_cache_elements(m.cfg, m.maxT), "the key/value cache"); }
// Layer l's keys and values of T new positions P..P+T-1 (qkv's rows, after RoPE) into its
// cache, one strided copy; returns the layer's cache, whose first P + T rows attention reads.
const floatX* kv_cache_append(Model& m, int l, const floatX* qkv, int T, int P) {
    const ModelConfig& c = m.cfg;
    const size_t KV = 2 * (size_t)c.kv_heads() * c.hs(), QKV = c.qkv_channels();
    if (!m.kv_cache.ptr || P + T > m.maxT)
        throw Error(strf("the key/value cache holds %d positions, not %d", m.kv_cache.ptr ? m.maxT : 0, P + T));
    floatX* layer = m.kv_cache.ptr + (size_t)l * m.maxT * KV;
    CUDA_CHECK(cudaMemcpy2DAsync(layer + (size_t)P * KV, KV * sizeof(floatX), qkv + c.C, QKV * sizeof(floatX),
                                 KV * sizeof(floatX), T, cudaMemcpyDeviceToDevice, ctx.stream));
    return layer;
}

// One layer's attention on the chosen path; stats is the layer's slice of att_stats.
void attention_forward(Model& m, floatX* out, float* stats, const floatX* qkv, int B, int T) {
    const ModelConfig& c = m.cfg;
    if (m.k.fused_attention) flash_attention_forward(out, stats, qkv, B, T, c.C, c.NH, c.kv_heads());
    else attention_forward(out, stats, stats + (size_t)B * c.NH * T, qkv, m.s.att, B, T, c.C, c.NH, c.kv_heads());
}
// Overwrites dqkv; out is the forward's output (the fused backward reads it).
void attention_backward(Model& m, floatX* dqkv, const floatX* dout, const floatX* out, const floatX* qkv,
                        const float* stats, int B, int T) {
    const ModelConfig& c = m.cfg;
    if (m.k.fused_attention)
        flash_attention_backward(dqkv, m.s.att_delta, dout, out, qkv, stats, B, T, c.C, c.NH, c.kv_heads());
    else
        attention_backward(dqkv, dout, qkv, stats, stats + (size_t)B * c.NH * T, m.s.att, B, T, c.C, c.NH,
                           c.kv_heads());
}

// Layer l's slice of a tensor stacked over layers, n elements a layer; null for a tensor the
// family does not have (a bias, for Llama).
template <class X>
inline X* slice(X* stacked, int l, size_t n) { return stacked ? stacked + l * n : nullptr; }

// The block's norm, one of the family's choices, each fused with the residual add whose output
// it reads: GPT-2's LayerNorm (gpu/layernorm.cuh) or Llama's RMSNorm (gpu/rmsnorm.cuh, no mean,
// no bias). residual = a + b, out = norm(residual).
void residual_norm_forward(const ModelConfig& c, floatX* residual, floatX* out, float* mean, float* rstd,
                           const floatX* a, const floatX* b, const floatX* w, const floatX* bias, int N) {
    if (c.llama()) residual_rmsnorm_forward(residual, out, rstd, a, b, w, N, c.C, c.norm_eps);
    else residual_layernorm_forward(residual, out, mean, rstd, a, b, w, bias, N, c.C);
}
// Its backward: the input gradient written to dresidual, or added to it (accumulate); the
// parameter gradients +=. ln_cols: the columns per block that fit (gpu/fit.cuh).
void norm_backward(const ModelConfig& c, floatX* dresidual, float* dw, float* db, float* work, const floatX* dout,
                   const floatX* inp, const floatX* w, const float* mean, const float* rstd, int N, bool accumulate,
                   int ln_cols) {
    if (c.llama()) rmsnorm_backward(dresidual, dw, work, dout, inp, w, rstd, N, c.C, accumulate, ln_cols);
    else layernorm_backward_fused(dresidual, dw, db, work, dout, inp, w, mean, rstd, N, c.C, accumulate, ln_cols);
}

// The head: GPT-2's is the token embedding wte (tied), Llama's its own wout; and its gradient.
inline const floatX* head_weights(const Model& m) { return m.cfg.tied_head() ? m.p.wte : m.p.wout; }
inline float* head_grads(Model& m) { return m.cfg.tied_head() ? m.g.wte : m.g.wout; }

// Forward to lnf (B, T, C), the classifier's input, for the inputs on the device; B ≤ maxB,
// T ≤ maxT. The classifier itself is model_loss's (training, evaluation) or model_logits'
// (generation): done in chunks of rows, its logits are never whole in memory. In
// generation with the key/value cache (P ≥ 0, B = 1) the cache holds the context's positions
// 0..P-1: the inputs are positions P..P+T-1, their keys and values join the cache, and
// attention reads it (gpu/attention_cached.cuh).
void model_forward(Model& m, int B, int T, int P = NO_CACHE) {
    const ModelConfig& c = m.cfg;
    const int C = c.C, NH = c.NH, KVH = c.kv_heads();
    const size_t BT = (size_t)B * T, QKV = c.qkv_channels(), FC = c.fc_channels(), H = c.hidden();
    const bool cached = P != NO_CACHE;
    const int P0 = cached ? P : 0;  // the first position
    const ParamViews<floatX>& p = m.p;
    Activations& a = m.a;
    encoder_forward(a.encoded, m.inputs, p.wte, p.wpe, B, T, C, P0);  // Llama: no wpe, positions are RoPE's
    if (c.llama()) rmsnorm_forward(a.ln1, a.ln1_rstd, a.encoded, p.ln1w, BT, C, c.norm_eps);  // block 0's norm1
    else layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.encoded, p.ln1w, p.ln1b, BT, C);
    for (int l = 0; l < c.L; l++) {
        const floatX* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * BT * C;
        // this block's slices of the activations
        floatX* ln1 = a.ln1 + l * BT * C;       float* ln1_mean = slice(a.ln1_mean, l, BT);
        float* ln1_rstd = a.ln1_rstd + l * BT;  floatX* qkv = a.qkv + l * BT * QKV;
        float* att_stats = a.att_stats + l * att_stats_per_row(m.k.fused_attention) * BT * NH;
        floatX* atty = a.atty + l * BT * C;     floatX* residual2 = a.residual2 + l * BT * C;
        floatX* ln2 = a.ln2 + l * BT * C;       float* ln2_mean = slice(a.ln2_mean, l, BT);
        float* ln2_rstd = a.ln2_rstd + l * BT;  floatX* fch = a.fch + l * BT * FC;
        floatX* fch_gelu = a.fch_gelu + (m.k.recompute ? 0 : l) * BT * H;
        floatX* residual3 = a.residual3 + l * BT * C;
        // x + attention(norm1(x)), then x + mlp(norm2(x)); GELU is applied as fc's product is
        // written, or with --recompute 1 by the kernel that the backward redoes it with. Each
        // residual add is fused with the norm that reads its output: norm2, then the next
        // block's norm1, or lnf after the last block.
        matmul_forward(qkv, ln1, slice(p.qkvw, l, QKV * C), slice(p.qkvb, l, QKV), BT, C, QKV);
        if (c.llama()) rope_forward(qkv, m.s.rope + (size_t)P0 * c.hs(), B, T, NH, KVH, c.hs());  // q, k rotated
        if (cached) attention_cached_forward(atty, qkv, kv_cache_append(m, l, qkv, T, P), T, P, C, NH, KVH);
        else attention_forward(m, atty, att_stats, qkv, B, T);
        matmul_forward(m.s.proj, atty, slice(p.attprojw, l, C * C), slice(p.attprojb, l, C), BT, C, C);
        residual_norm_forward(c, residual2, ln2, ln2_mean, ln2_rstd, residual, m.s.proj, p.ln2w + l * C,
                              slice(p.ln2b, l, C), BT);
        if (c.llama()) {  // SwiGLU: silu(gate) ⊙ up of fc's two halves
            matmul_forward(fch, ln2, slice(p.fcw, l, FC * C), nullptr, BT, C, FC);
            swiglu_forward(fch_gelu, fch, BT, c.F);
        } else {
            matmul_gelu_forward(fch_gelu, fch, ln2, slice(p.fcw, l, FC * C), slice(p.fcb, l, FC), BT, C, FC,
                                m.k.recompute);
        }
        matmul_forward(m.s.proj, fch_gelu, slice(p.fcprojw, l, C * H), slice(p.fcprojb, l, C), BT, H, C);
        if (l + 1 < c.L)
            residual_norm_forward(c, residual3, ln1 + BT * C, slice(ln1_mean, 1, BT), ln1_rstd + BT, residual2,
                                  m.s.proj, p.ln1w + (l + 1) * C, slice(p.ln1b, l + 1, C), BT);
        else
            residual_norm_forward(c, residual3, a.lnf, a.lnf_mean, a.lnf_rstd, residual2, m.s.proj, p.lnfw, p.lnfb, BT);
    }
}

// The classifier and the cross-entropy against the targets on the device, from lnf (after
// model_forward), m.logits_rows rows at a time (gpu/classifier.cuh): the losses (B, T), their
// mean added to the loss sum on the device; and with `backward`, for a per-position loss
// scale of loss_scale, THE CLASSIFIER'S BACKWARD TOO: each chunk's logits are overwritten by
// their gradient, which then gives that chunk's rows of dlnf (in d.dln, where model_backward
// starts) and its share of the head's weight gradient (+=). With --classifier whole, one chunk
// of all B·T rows.
void model_loss(Model& m, int B, int T, bool backward, float loss_scale) {
    const ModelConfig& c = m.cfg;
    const int N = B * T;
    classifier_loss(m.a.losses, m.d.dln, head_grads(m), m.a.logits, m.a.lnf, head_weights(m), m.targets, loss_scale,
                    N, c.C, c.V, c.Vp, m.logits_rows, backward, m.k.epilogues);
    add_mean_loss(m.sums_buf.ptr, m.a.losses, N);
}
// Generation: the logits (n, Vp) of rows row..row+n-1 of the last forward, n ≤ m.logits_rows,
// into the logits buffer (returned).
const floatX* model_logits(Model& m, size_t row, int n) {
    if (n > m.logits_rows) throw Error(strf("the logits buffer holds %d rows, not %d", m.logits_rows, n));
    classifier_forward(m.a.logits, m.a.lnf + row * m.cfg.C, head_weights(m), n, m.cfg.C, m.cfg.Vp);
    return m.a.logits;
}
// Zeroes the loss sum and |G_small|² (0 when not measured).
void zero_loss_sum(Model& m) { CUDA_CHECK(cudaMemsetAsync(m.sums_buf.ptr, 0, 3 * sizeof(double), ctx.stream)); }
double loss_sum(Model& m) {
    double sum;
    CUDA_CHECK(cudaMemcpyAsync(&sum, m.sums_buf.ptr, sizeof sum, cudaMemcpyDeviceToHost, ctx.stream));
    synchronize();
    return sum;
}

// Backward from lnf's gradient (in d.dln: model_loss's classifier backward wrote it, and
// added the head's weight gradient) to the parameter gradients (+=).
// With `sync` (the last micro-batch of a step with --grad-sync overlap) it is told when each
// block's gradients are final.
void model_backward(Model& m, int B, int T, GradSync* sync = nullptr) {
    const ModelConfig& c = m.cfg;
    const int C = c.C, NH = c.NH, KVH = c.kv_heads();
    const size_t BT = (size_t)B * T, QKV = c.qkv_channels(), FC = c.fc_channels(), H = c.hidden();
    const ParamViews<floatX>& p = m.p;
    ParamTensors& g = m.g;
    Activations& a = m.a;
    ActivationGrads& d = m.d;
    const Epilogues epilogues = m.k.epilogues;
    const int ln_cols = m.k.ln_cols;
    float* work = m.s.partials;  // column-sum scratch of the bias and norm gradients
    // (the classifier's backward, to d.dln = dlnf and the head's weight gradient, was model_loss's)
    const floatX* last = a.residual3 + (c.L - 1) * BT * C;  // the output of the last block
    norm_backward(c, d.dresidual, g.lnfw, g.lnfb, work, d.dln, last, p.lnfw, a.lnf_mean, a.lnf_rstd, BT,
                  false, ln_cols);
    for (int l = c.L - 1; l >= 0; l--) {
        // d.dresidual holds ∂loss/∂(output of block l)
        const floatX* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * BT * C;
        const floatX* ln1 = a.ln1 + l * BT * C;        const float* ln1_mean = slice(a.ln1_mean, l, BT);
        const float* ln1_rstd = a.ln1_rstd + l * BT;   const floatX* qkv = a.qkv + l * BT * QKV;
        const float* att_stats = a.att_stats + l * att_stats_per_row(m.k.fused_attention) * BT * NH;
        const floatX* atty = a.atty + l * BT * C;      const floatX* residual2 = a.residual2 + l * BT * C;
        const floatX* ln2 = a.ln2 + l * BT * C;        const float* ln2_mean = slice(a.ln2_mean, l, BT);
        const float* ln2_rstd = a.ln2_rstd + l * BT;   const floatX* fch = a.fch + l * BT * FC;
        floatX* fch_gelu = a.fch_gelu + (m.k.recompute ? 0 : l) * BT * H;
        if (m.k.recompute && c.llama()) swiglu_forward(fch_gelu, fch, BT, c.F);  // as the forward did: the same bits
        else if (m.k.recompute) gelu_forward(fch_gelu, fch, BT * FC);
        // MLP branch: residual3 = residual2 + fcproj(act(fc(norm2(residual2)))). GPT-2: d.dfch
        // is the gradient of GELU's input fch (fcproj's backward applies gelu'(fch)); Llama:
        // fcproj's backward gives SwiGLU's output gradient d.dh, SwiGLU's backward d.dfch
        if (c.llama()) {
            matmul_backward(d.dh, slice(g.fcprojw, l, C * H), nullptr, work, d.dresidual, fch_gelu,
                            slice(p.fcprojw, l, C * H), BT, H, C, nullptr, epilogues);
            swiglu_backward(d.dfch, fch, d.dh, BT, c.F);
        } else {
            matmul_backward(d.dfch, slice(g.fcprojw, l, C * H), slice(g.fcprojb, l, C), work, d.dresidual, fch_gelu,
                            slice(p.fcprojw, l, C * H), BT, H, C, fch, epilogues);
        }
        matmul_backward(d.dln, slice(g.fcw, l, FC * C), slice(g.fcb, l, FC), work, d.dfch, ln2, slice(p.fcw, l, FC * C),
                        BT, C, FC, nullptr, epilogues);
        // residual2 fed both the skip path and norm2: its gradient is the sum of the two, which
        // the norm's backward adds as it writes (accumulate)
        norm_backward(c, d.dresidual, g.ln2w + l * C, slice(g.ln2b, l, C), work, d.dln, residual2,
                      p.ln2w + l * C, ln2_mean, ln2_rstd, BT, true, ln_cols);
        // attention branch: residual2 = residual + attproj(attention(qkv(norm1(residual))))
        matmul_backward(d.datty, slice(g.attprojw, l, C * C), slice(g.attprojb, l, C), work, d.dresidual, atty,
                        slice(p.attprojw, l, C * C), BT, C, C, nullptr, epilogues);
        attention_backward(m, d.dqkv, d.datty, atty, qkv, att_stats, B, T);
        if (c.llama()) rope_backward(d.dqkv, m.s.rope, B, T, NH, KVH, c.hs());  // rotated back
        matmul_backward(d.dln, slice(g.qkvw, l, QKV * C), slice(g.qkvb, l, QKV), work, d.dqkv, ln1,
                        slice(p.qkvw, l, QKV * C), BT, C, QKV, nullptr, epilogues);
        // the same for the block's input, which fed the skip path and norm1
        norm_backward(c, d.dresidual, g.ln1w + l * C, slice(g.ln1b, l, C), work, d.dln, residual,
                      p.ln1w + l * C, ln1_mean, ln1_rstd, BT, true, ln_cols);
        if (sync) sync->block_done(l);  // block l's parameter gradients are final: their sum may start
    }
    encoder_backward(g.wte, g.wpe, d.dresidual, m.groups, B, T, C);
}

// ----------------------------------------------------------------------------
// Optimizer: AdamW (gpu/adamw.cuh) and ZeRO stage 1's two collectives, as train.cpp names
// them; without ZeRO (the shard is every parameter) the all-reduce and nothing.

// The gradient sync: the sum over the replicas, of this replica's shard only with ZeRO (a
// reduce-scatter). With --grad-sync overlap the buckets the last backward started, the rest,
// and the wait for them (host/gradsync.h).
void sync_gradients(Model& m, GradSync& sync, const Comm& comm) {
    if (sync.finish(m.grads_buf.ptr, comm)) return;
    if (m.sharded()) comm.reduce_scatter_sum(m.grads_buf.ptr, m.shard.padded);
    else comm.allreduce_sum(m.grads_buf.ptr, m.shard.padded);
}
// One AdamW update of this replica's shard, with the clipping scale applied as each gradient
// is read (and the bf16 copy of the weights refreshed as it writes them).
void adamw_update(Model& m, const AdamWConfig& opt, float lr, int t, float grad_scale) {
    float* master = weights_copy() ? m.params_buf.ptr : m.params_buf.ptr + m.shard.begin;  // from the shard's start
    adamw_update(master, weights_copy() ? m.weights : nullptr, m.grads_buf.ptr, m.m_buf.ptr, m.v_buf.ptr, m.cfg, opt,
                 lr, t, grad_scale, m.shard);
}
// After the update: every replica's updated shard of the weights the kernels read, to every
// replica (ZeRO's all-gather); else nothing.
void share_updated_weights(Model& m, const Comm& comm) {
    if (m.sharded()) comm.allgather(m.weights, m.shard.padded);
}
// The noise scale's norm of the first micro-batch (host/noise.h), while the gradient buffer
// holds its gradient alone: |g|² of a bucket's units just before its sum starts (A = 1 with
// --grad-sync overlap), or of every unit after the backward. One more pass over the gradients.
void measure_units(Model& m, const std::vector<int>& units) {
    auto at = m.units.list_at.find(units.empty() ? -1 : units.front());
    if (at == m.units.list_at.end()) throw Error("the noise scale's norm: a list of units that is no bucket's");
    unit_norms_squared(m.grads_buf.ptr, m.units, m.units.lists + at->second, (int)units.size());
}
void measure_all_units(Model& m) { unit_norms_squared(m.grads_buf.ptr, m.units, m.units.lists, m.units.n); }
// The first micro-batch's ‖gradient‖², the units added in buffer order (the same bits however
// they were measured), left in sums_buf[2] for the step's one wait; rescaled to |G_small|² on
// the host.
void first_micro_batch_norm_squared(Model& m) { units_sum(m.sums_buf.ptr + 2, m.units); }

// ----------------------------------------------------------------------------
// One optimizer step: train.cpp's train_step(), on the GPU. The host waits for the GPU once,
// for the loss and the gradient norm that the clipping decision needs.

// measure_noise: also the squared norm of the first micro-batch's gradient, for the noise
// scale (host/noise.h).
StepResult train_step(Model& m, DataLoader& loader, const BatchPlan& plan, const Comm& comm, const AdamWConfig& opt,
                      float lr, float grad_clip, int t, bool measure_noise, GradSync& sync) {
    const int B = plan.B, T = plan.T;
    // 1. zero the parameter gradients: they accumulate over the micro-batches below
    CUDA_CHECK(cudaMemsetAsync(m.grads_buf.ptr, 0, m.shard.padded * sizeof(float), ctx.stream));
    zero_loss_sum(m);

    // 2. accumulation loop: A micro-batches of this replica's share of the global batch
    loader.next_chunk();
    const MeasureUnits measure = [&](const std::vector<int>& units) { measure_units(m, units); };
    for (int a = 0; a < plan.A; a++) {
        loader.micro_batch(a, m.host_inputs.data(), m.host_targets.data());
        upload_tokens(m, m.host_inputs.data(), m.host_targets.data(), B, T, a);
        model_forward(m, B, T);  // to lnf
        // the classifier, the loss and the classifier's backward (dlnf, the head's gradient), in row chunks
        model_loss(m, B, T, true, 1.0f / (float)plan.global_tokens());
        const bool first = a == 0 && measure_noise;  // the noise scale's micro-batch (host/noise.h)
        GradSync* overlap = sync.hook(a, plan.A, m.grads_buf.ptr, comm, first ? &measure : nullptr);
        model_backward(m, B, T, overlap);  // from dlnf; overlap: the last one starts the buckets' sums
        if (first && !overlap) measure_all_units(m);  // else each bucket's, as its sum starts
    }

    // 3. gradient sync, once per step: sum over replicas = mean over the global batch (with
    //    --zero 1 a reduce-scatter: each replica receives the sum of its shard)
    sync_gradients(m, sync, comm);
    if (measure_noise) first_micro_batch_norm_squared(m);

    // 4. clip: scale the synced gradient down to norm grad_clip (the same on every replica);
    //    a NaN or an infinity stops the run here, before it reaches the weights. With ZeRO
    //    each replica has its shard's ‖g‖², summed in the step's scalar all-reduce.
    global_norm_squared(m.grads_buf.ptr + m.shard.begin, m.shard.size, m.sums_buf.ptr + 3, m.sums_buf.ptr + 1);
    double sums[3];  // the loss sum, ‖g‖² and |G_small|², in the step's one wait for the GPU
    CUDA_CHECK(cudaMemcpyAsync(sums, m.sums_buf.ptr, sizeof sums, cudaMemcpyDeviceToHost, ctx.stream));
    synchronize();
    // the loss, |G_small|² and the shard's ‖g‖², as means over the replicas
    double means[3] = {sums[0] / plan.A, small_batch_norm_squared(sums[2], plan), sums[1]};
    comm.step_means(means);  // (and whether to stop after this step)
    float loss = (float)means[0];
    float norm = (float)std::sqrt(m.sharded() ? means[2] * comm.world : sums[1]);
    check_finite_step(loss, norm, t);
    float grad_scale = (grad_clip > 0 && norm > grad_clip) ? grad_clip / (norm + 1e-6f) : 1.0f;

    // 5. update this replica's shard (all of it without ZeRO), with the clipping scale applied
    //    as AdamW reads each gradient; then, with --zero 1, every replica's updated weights to
    //    every replica
    adamw_update(m, opt, lr, t, grad_scale);
    share_updated_weights(m, comm);
    synchronize();  // so that the step's time in the log is the GPU's
    return {loss, norm, (float)std::sqrt(means[1])};
}

}  // namespace gpu

// ----------------------------------------------------------------------------
// The GPU trainer, as host/run.h's training run sees it (host/trainer.h): the model, the
// host copies of its parameters and optimizer state that checkpoints are read into and
// written from, and the planning of gpu/plan.cuh.

struct GpuTrainer {
    gpu::Model model;
    bool measure_noise;    // the first micro-batch's gradient norm, for the noise scale (host/noise.h)
    const Comm* replicas;  // with --zero 1, download() gathers the shards from the replicas
    GradSync grad_sync;    // --grad-sync: the communication helper the step hands the last backward
    std::vector<float> host_params, host_m, host_v;  // every parameter: where run.h initialises, loads and saves
    std::vector<float> logits_row;   // next_token_logits' answer
    std::vector<float> losses_host;  // token_losses' answer
    size_t peak_bytes = 0;           // most GPU memory in use after a step (device-wide)
    int steps_done = 0;
    std::string resumed_state, recorded_gemm;  // a resumed run's state file and its "gemm" choices
    bool products_chosen = false;              // choose_products() has run

    GpuTrainer(const ModelConfig& mc, const BatchPlan& plan, const Config& config, const Comm& comm)
        : measure_noise(noise_scale_measured(config.noise_ema, plan)), replicas(&comm) {
        gpu::KernelPaths k;
        k.recompute = config.recompute;
        k.fused_attention = gpu::uses_fused_attention(config, mc);
        k.epilogues = config.epilogues == "separate" ? gpu::Epilogues::separate : gpu::Epilogues::fused;
        k.ln_cols = gpu::layernorm_columns(mc);
        k.whole_classifier = config.classifier == "whole";
        if (k.fused_attention && !gpu::flash_attention_supports(mc.C / mc.NH))
            throw Error(strf("--attention fused does not support the head size %d (C/NH)", mc.C / mc.NH));
        if (mc.C % gpu::pack_size<floatX>() != 0)
            throw Error(strf("train_gpt needs the channel count to be a multiple of %d (its kernels move 16 bytes at "
                             "a time); the model has C=%d",
                             gpu::pack_size<floatX>(), mc.C));
        gpu::set_tf32(config.tf32);
        const Shard shard = gpu::shard_of(mc, comm.rank, comm.world, config);
        grad_sync = GradSync(mc, config.grad_sync == "overlap", config.grad_sync_dtype == "bf16", config.grad_bucket,
                             shard);
        const size_t n = mc.num_params();
        host_params.assign(n, 0.0f), host_m.assign(n, 0.0f), host_v.assign(n, 0.0f);
        gpu::model_build(model, mc, plan.B, plan.T, plan.A, k, shard);
        gpu::norm_units_of_buckets(model, grad_sync.buckets());
        resumed_state = state_to_resume(config);
        if (!resumed_state.empty()) recorded_gemm = read_state_header(resumed_state, n).choices.get("gemm");
        if (kv_cache_used(config, comm.rank)) {
            if (mc.hs() > gpu::CACHED_MAX_HS)
                throw Error(strf("samples with --kv-cache 1 support head sizes up to %d; the model's is %d: sample with "
                                 "--kv-cache 0",
                                 gpu::CACHED_MAX_HS, mc.hs()));
            gpu::kv_cache_build(model);
        }
    }
    ~GpuTrainer() {
        if (replicas->rank == 0 && steps_done > 0 && std::uncaught_exceptions() == 0) {
            size_t free_bytes = 0, total = 0;
            cudaMemGetInfo(&free_bytes, &total);
            printf("peak GPU memory: %.0f MiB of %.0f MiB (in use on the whole device after a step, cudaMemGetInfo)\n",
                   peak_bytes / 1048576.0, total / 1048576.0);
        }
    }

    // ---- start-up and planning (gpu/replicas.cuh, gpu/plan.cuh)
    static Comm connect(int* argc, char*** argv) { return gpu::connect_replicas(argc, argv); }
    static void check_options(const Config& config) { gpu::check_options(config); }
    static std::string hardware(const Config& config, const Comm& comm) { return gpu::hardware(config, comm); }
    static constexpr int GATHERED_WEIGHT_BYTES = gpu::GATHERED_WEIGHT_BYTES;
    // What the constructor allocates on the GPU, to the byte (R replicas: --zero 1 shards over them).
    static MemoryUse memory_use(const ModelConfig& mc, int B, int T, int R, const Config& config) {
        const bool whole = config.classifier == "whole";
        double activations = (double)gpu::activation_bytes(mc, B, T, config.recompute,
                                                           gpu::uses_fused_attention(config, mc), whole);
        const int rows = gpu::logits_rows(mc, B, T, whole);  // the logits, a part of the activations, shown apart
        double logits = (double)gpu::aligned((size_t)rows * mc.Vp * sizeof(floatX));
        double tokens_and_sums = (double)(gpu::token_ints(B, T) * sizeof(int) + gpu::SUMS * sizeof(double)) +
                                 (double)gpu::norm_units_bytes(mc);  // (the noise scale's norm units)
        MemoryUse use = gpu::memory_use(mc, R, config, activations - logits, tokens_and_sums);
        auto after = std::find_if(use.parts.begin(), use.parts.end(), [](auto& p) { return p.first == "activations"; });
        use.parts.insert(after + 1,
                         {rows == B * T ? strf("logits (%s rows)", with_commas(rows).c_str())
                                        : strf("logits (%s of %s rows at a time)", with_commas(rows).c_str(),
                                               with_commas((long long)B * T).c_str()),
                          logits});
        if (kv_cache_used(config, 0))
            use.parts.push_back({"key/value cache (samples)", (double)kv_cache_elements(mc, T) * sizeof(floatX)});
        return use;
    }
    static double memory_available(const Config& config) { return gpu::memory_available(config); }
    static std::vector<std::string> run_time_choices() { return gpu::run_time_choices(); }
    static void choose_kernels(Config& config, const ModelConfig& mc, const BatchPlan& plan, double available,
                               const Comm& comm) {
        gpu::choose_kernels(config, mc, plan, available, comm,
                            [&](const Config& c) { return memory_use(mc, plan.B, plan.T, plan.R, c).total(); });
    }
    static std::vector<std::string> kernel_plan(const ModelConfig& mc, const BatchPlan& plan, const Config& config,
                                                const DeviceSpeed& device) {
        return gpu::kernel_plan(mc, plan, config, device);
    }

    // ---- the host copies and the device
    float* params() { return host_params.data(); }
    float* adam_m() { return host_m.data(); }
    float* adam_v() { return host_v.data(); }
    // Every weight in float32 goes through the gradient buffer (free between steps, padded):
    // the bf16 copy is made from it and the master weights are cut from it; AdamW's state is
    // cut to the shard (all of it without ZeRO).
    void upload() {
        const size_t n = host_params.size();
        const Shard& shard = model.shard;
        CUDA_CHECK(cudaMemset(model.grads_buf.ptr, 0, shard.padded * sizeof(float)));  // the padding stays 0
        CUDA_CHECK(cudaMemcpy(model.grads_buf.ptr, host_params.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        const size_t master_from = gpu::weights_copy() ? shard.begin : 0;
        CUDA_CHECK(cudaMemcpy(model.params_buf.ptr, model.grads_buf.ptr + master_from,
                              gpu::master_count(shard) * sizeof(float), cudaMemcpyDeviceToDevice));
        if (gpu::weights_copy()) gpu::to_floatX(model.weights, model.grads_buf.ptr, shard.padded);  // then AdamW keeps it current
        upload_shard(model.m_buf.ptr, host_m), upload_shard(model.v_buf.ptr, host_v);
        if (!products_chosen) choose_products();
    }
    // Once, with the weights in place and before any step or evaluation: each of the step's
    // cuBLASLt products gets its algorithm (gpu/matmul.cuh: timed on a GPU, or as the resumed
    // run's state file records), in one micro-batch's forward and backward whose results are
    // thrown away (each step zeroes the gradients and sums first); then every replica takes
    // rank 0's choices.
    void choose_products() {
        products_chosen = true;
        const int B = model.maxB, T = model.maxT;
        std::vector<int> zeros((size_t)B * T, 0);
        std::vector<std::string> lines;
        auto pass = [&](const std::string& record) {
            lines.clear();
            gpu::lt_choose_begin(record);
            gpu::upload_tokens(model, zeros.data(), zeros.data(), B, T);
            gpu::model_forward(model, B, T);
            gpu::model_loss(model, B, T, true, 1.0f / (float)(B * T));
            gpu::model_backward(model, B, T);
            gpu::synchronize();
            return gpu::lt_choose_end(record, resumed_state, &lines);
        };
        if (!pass(recorded_gemm)) {
            std::vector<std::string> said = lines;
            pass("");
            lines.insert(lines.begin(), said.begin(), said.end());
        }
        const std::string agreed = replicas->allgather(gpu::lt_record())[0];
        if (agreed != gpu::lt_record()) pass(agreed);  // this replica's timing chose otherwise
        if (replicas->rank == 0)
            for (const std::string& line : lines) printf("%s\n", line.c_str());
    }
    // The state files' record of those choices (host/trainer.h)
    std::vector<std::pair<std::string, std::string>> recorded_choices() const {
        return {{"gemm", gpu::lt_record_to_keep()}};
    }
    void upload_shard(float* device, const std::vector<float>& host) {
        auto [lo, hi] = model.shard.clip(0, host.size());
        CUDA_CHECK(cudaMemset(device, 0, model.shard.size * sizeof(float)));
        if (lo < hi)
            CUDA_CHECK(cudaMemcpy(device, host.data() + lo, (hi - lo) * sizeof(float), cudaMemcpyHostToDevice));
    }
    // On every replica: with --zero 1 each shard is gathered from the replicas (a collective).
    void download() {
        gpu::synchronize();
        if (gpu::weights_copy()) download_gathered(model.params_buf.ptr, host_params);
        else CUDA_CHECK(cudaMemcpy(host_params.data(), model.params_buf.ptr, host_params.size() * sizeof(float),
                                   cudaMemcpyDeviceToHost));  // every weight: gathered after each step
        download_gathered(model.m_buf.ptr, host_m), download_gathered(model.v_buf.ptr, host_v);
    }
    // A shard's buffer to the host copy of every parameter: with ZeRO through the gradient
    // buffer, where this replica's shard takes its place and the all-gather fills the rest.
    void download_gathered(const float* device_shard, std::vector<float>& host) {
        const float* all = device_shard;
        if (model.sharded()) {
            CUDA_CHECK(cudaMemcpy(model.grads_buf.ptr + model.shard.begin, device_shard, model.shard.size * sizeof(float),
                                  cudaMemcpyDeviceToDevice));
            replicas->allgather(model.grads_buf.ptr, model.shard.padded);
            all = model.grads_buf.ptr;
        }
        CUDA_CHECK(cudaMemcpy(host.data(), all, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
    }

    // ---- the step, and the forward passes of evaluation and samples
    StepResult train_step(DataLoader& loader, const BatchPlan& plan, const Comm& comm, const AdamWConfig& opt, float lr,
                          float grad_clip, int t) {
        StepResult r = gpu::train_step(model, loader, plan, comm, opt, lr, grad_clip, t, measure_noise, grad_sync);
        size_t free_bytes, total;
        CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
        peak_bytes = std::max(peak_bytes, total - free_bytes);
        steps_done++;
        return r;
    }
    // Forward only: the B·T per-position losses, on the host (validation and HellaSwag,
    // host/eval.h; the loss sum it also adds to is zeroed by every step).
    const float* token_losses(const int* in, const int* tgt, int B, int T) {
        gpu::upload_tokens(model, in, tgt, B, T);
        gpu::model_forward(model, B, T);
        gpu::model_loss(model, B, T, false, 0.0f);
        losses_host.resize((size_t)B * T);
        CUDA_CHECK(cudaMemcpyAsync(losses_host.data(), model.a.losses, losses_host.size() * sizeof(float),
                                   cudaMemcpyDeviceToHost, gpu::ctx.stream));
        gpu::synchronize();  // also: the pinned token slot is free again
        return losses_host.data();
    }
    const float* next_token_logits(const int* context, int T) { return logits_of(context, T, NO_CACHE); }
    const float* next_token_logits_cached(const int* tokens, int T, int P) { return logits_of(tokens, T, P); }
    const float* logits_of(const int* tokens, int T, int P) {
        gpu::upload_tokens(model, tokens, nullptr, 1, T);
        gpu::model_forward(model, 1, T, P);
        // the last row's logits alone; --classifier whole computes every row's, as it always did
        const int first = model.k.whole_classifier ? 0 : T - 1;
        const floatX* logits = gpu::model_logits(model, first, T - first);
        std::vector<floatX> row(model.cfg.Vp);
        CUDA_CHECK(cudaMemcpyAsync(row.data(), logits + (size_t)(T - 1 - first) * model.cfg.Vp,
                                   model.cfg.Vp * sizeof(floatX), cudaMemcpyDeviceToHost, gpu::ctx.stream));
        gpu::synchronize();
        logits_row.assign(row.begin(), row.end());
        return logits_row.data();
    }
};

#ifndef TRAIN_NO_MAIN
int main(int argc, char** argv) { return main_with_errors<GpuTrainer>(argc, argv); }
#endif
