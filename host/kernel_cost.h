// What each kernel of the GPU trainer's step costs: the FLOPs it does and the bytes it moves
// to and from device memory, one small function per layer (the kernels' comments in gpu/
// point here). Plain C++, so that the planner (host/cost.h), both trainers and the tests can
// use it without a CUDA compiler.
//
// Conventions. N = B·T rows; x = the bytes of one activation or weight element the kernels
// read (floatX: 2 in bf16, 4 in float32); statistics (LayerNorm's mean and rstd, attention's
// log-sum-exp) and parameter gradients are float32. FLOPs count 2 per multiply-add in the
// products; elementwise kernels count their arithmetic per element, a transcendental (exp,
// tanh) as one. Bytes are what must cross the device-memory bus at least: each tensor read
// once and written once (re-reads that stay in L2 are not counted; where a kernel's design
// relies on L2, its function says so).
#pragma once
#include <cmath>

struct KernelCost {
    double flops = 0, bytes = 0;
    KernelCost& operator+=(const KernelCost& o) {
        flops += o.flops, bytes += o.bytes;
        return *this;
    }
};

// ---- gpu/matmul.cuh: out (N, OC) = inp (N, IC) · wᵀ + bias, through cuBLAS(Lt)
// Forward: reads inp, w and the bias (Llama's products have none), writes out; with a GELU
// epilogue, also pre_gelu (fc).
inline KernelCost matmul_forward_cost(double N, double IC, double OC, int x, bool gelu_epilogue = false,
                                      bool bias = true) {
    return {2 * N * IC * OC, x * (N * IC + OC * IC + (bias ? OC : 0) + N * OC * (gelu_epilogue ? 2 : 1))};
}
// Backward, the input's gradient: dinp (N, IC) = dout (N, OC) · w (OC, IC).
inline KernelCost matmul_backward_dinp_cost(double N, double IC, double OC, int x) {
    return {2 * N * IC * OC, x * (N * OC + OC * IC + N * IC)};
}
// Backward, the weight's gradient: dw (OC, IC) += doutᵀ · inp, float32 dw read and written.
inline KernelCost matmul_backward_dw_cost(double N, double IC, double OC, int x) {
    return {2 * N * IC * OC, x * (N * OC + N * IC) + 8 * OC * IC};
}
// The bias gradient, two passes (bias_grad_partial_kernel, then sum_partials_add): dout read
// once, one float32 partial sum per chunk of CHUNK_ROWS = 128 rows written and read back.
inline KernelCost bias_grad_cost(double N, double OC, int x) {
    double chunks = std::ceil(N / 128);  // CHUNK_ROWS = 128 rows a chunk
    return {N * OC, x * N * OC + 2 * 4 * chunks * OC + 8 * OC};
}
// gelu_forward (--recompute 1) and gelu_backward: elementwise over n = N·4C.
inline KernelCost gelu_forward_cost(double n, int x) { return {12 * n, x * 2 * n}; }
inline KernelCost gelu_backward_cost(double n, int x) { return {18 * n, x * 3 * n}; }

// ---- gpu/layernorm.cuh
// layernorm_forward: reads the row, writes the normalised row and float32 mean and rstd.
inline KernelCost layernorm_forward_cost(double N, double C, int x) {
    return {8 * N * C, x * (2 * N * C + 2 * C) + 8 * N};
}
// residual_layernorm_forward: residual = a + b (written), then layernorm_forward on it.
inline KernelCost residual_layernorm_forward_cost(double N, double C, int x) {
    return {9 * N * C, x * (4 * N * C + 2 * C) + 8 * N};
}
// layernorm_backward_fused: reads dout, the input, mean and rstd (and with `accumulate` the
// residual gradient it adds to), writes dinp; the weight and bias gradients as per-chunk
// float32 partials (128 rows a chunk), added in a second pass.
inline KernelCost layernorm_backward_cost(double N, double C, int x, bool accumulate) {
    double chunks = std::ceil(N / 128);  // CHUNK_ROWS = 128 rows a chunk
    return {14 * N * C, x * ((accumulate ? 4 : 3) * N * C + C) + 8 * N + 2 * (2 * 4 * chunks * C) + 16 * C};
}

// ---- gpu/encoder.cuh
// encoder_forward: out = wte[token] + wpe[t]: the tokens, two rows read per position, one written.
inline KernelCost encoder_forward_cost(double N, double C, int x) { return {N * C, 4 * N + 3 * x * N * C}; }
// encoder_backward: dout read once; wte's gradient rows of the tokens present (at most N of
// them, float32, read and written) and wpe's (T rows), plus the token groups.
inline KernelCost encoder_backward_cost(double N, double T, double C, int x) {
    return {2 * N * C, x * N * C + 8 * N * C + 8 * T * C + 12 * N};
}

// ---- gpu/flash_attention*.cuh (the fused path): causal, NH heads of hs = C/NH.
// Forward: 4·hs FLOPs per (query, key) pair and head (S = q·kᵀ, P·v), (T + 1)/2 keys per
// query on average: 2·C·(T + 1) per row. Reads qkv, writes out and the log-sum-exp. A row
// of qkv is QKV wide: 3C for GPT-2 (the default, QKV = 0), C + 2·KVH·hs for Llama, whose
// NH query heads share KVH K/V heads (the products are still NH heads').
inline KernelCost attention_forward_cost(double N, double T, double C, double NH, int x, double QKV = 0) {
    if (QKV == 0) QKV = 3 * C;
    return {2 * C * (T + 1) * N, x * (N * QKV + N * C) + 4 * N * NH};
}
// Backward: `products` of 2·hs per pair: 7 in the three-kernel backward (S and dP twice: in
// the dk/dv kernel and in the dq kernel; dv, dk, dq once), 5 in the five-product one (bf16 at
// hs 64 and 128, gpu/flash_attention_bwd5.cuh: S, dP, dv, dk, dq once each): products·C·(T + 1)/2
// per row. Reads qkv, out, dout, the log-sum-exp, writes dqkv; the row-dot kernel reads out
// and dout once more and writes delta. (The five-product kernel's float32 partial dq goes
// through L2, as the three-kernel dq pass's K/V re-reads do; neither is counted.)
inline bool five_product_backward(int x, double hs) { return x == 2 && (hs == 64 || hs == 128); }
inline KernelCost attention_backward_cost(double N, double T, double C, double NH, int x, double QKV = 0) {
    if (QKV == 0) QKV = 3 * C;
    const double products = five_product_backward(x, C / NH) ? 5 : 7;
    return {products * C * (T + 1) * N, x * (N * QKV + 2 * N * C + N * QKV + 2 * N * C) + 4 * N * NH * 3};
}

// ---- gpu/crossentropy.cuh: softmax + cross-entropy + its backward, in place, per row of Vp.
// The fused kernel reads V + Vp elements and writes Vp; its gradient pass walks the row
// backwards so as to find it in L2 (two 100 KB rows per SM on an H100, 26 MB in all), so
// device memory sees the row once each way. The three-pass kernel (the reference) reads the
// row three times: 512 threads a block, four rows per SM, 53 MB in flight, more than the
// 50 MB of L2, so each pass is counted from device memory. Both: targets and losses (4 bytes
// each per row), and add_mean_loss reads the losses again.
inline KernelCost crossentropy_cost(double N, double V, double Vp, int x, bool fused) {
    double flops = fused ? 5 * V + 5 * Vp : 3 * V + 5 * Vp;
    double passes = fused ? 2 : 4;
    return {flops * N, x * passes * N * Vp + 12 * N};
}

// ---- gpu/adamw.cuh, once per optimizer step over the n parameters
// adamw_update: reads the float32 parameter, gradient, m and v, writes the three float32
// and the floatX copy (bf16 build) of the weight.
inline KernelCost adamw_cost(double n, int x) { return {12 * n, n * (4 * 4 + 3 * 4 + (x == 4 ? 0 : x))}; }
// global_norm_squared: reads the gradients once (and the float64 partials, negligible).
inline KernelCost global_norm_cost(double n) { return {2 * n, 4 * n}; }
// zeroing the gradients (cudaMemset): one write.
inline KernelCost zero_grads_cost(double n) { return {0, 4 * n}; }

// ---- Llama-3's kernels (docs/llama.md's layout): what the planner counts for them, by the
// conventions above. The GPU trainer has no Llama path yet (train_gpt refuses the family);
// these are the kernels it will need, each counted as one pass over what it must read and write.
// rmsnorm_forward: reads the row and the weight, writes the normalised row and float32 rstd;
// x², their sum, and the two scalings: 4 FLOPs an element.
inline KernelCost rmsnorm_forward_cost(double N, double C, int x) { return {4 * N * C, x * (2 * N * C + C) + 4 * N}; }
// residual + rmsnorm: residual = a + b (written), then rmsnorm_forward on it.
inline KernelCost residual_rmsnorm_forward_cost(double N, double C, int x) {
    return {5 * N * C, x * (4 * N * C + C) + 4 * N};
}
// rmsnorm backward: reads dout, the input, rstd (and with `accumulate` the residual gradient
// it adds to) and the weight, writes dinp; the weight's gradient as per-chunk float32
// partials (128 rows a chunk), added in a second pass. No bias: one partial sum, not two.
inline KernelCost rmsnorm_backward_cost(double N, double C, int x, bool accumulate) {
    double chunks = std::ceil(N / 128);  // CHUNK_ROWS = 128 rows a chunk
    return {9 * N * C, x * ((accumulate ? 4 : 3) * N * C + C) + 4 * N + 2 * 4 * chunks * C + 8 * C};
}
// RoPE, in place on the q and k parts of qkv (width = (NH + KVH)·hs channels a row), forward
// or backward (the inverse rotation): each pair read and written, 6 FLOPs a pair; the cos/sin
// table of the T positions (T × hs/2 × 2 float32) read once, shared by the rows.
inline KernelCost rope_cost(double N, double T, double width, double hs, int x) {
    return {3 * N * width, x * 2 * N * width + 4 * T * hs};
}
// SwiGLU forward, h = silu(gate) ⊙ up over n = N·F: gate and up read, h written; silu as
// g / (1 + exp(−g)), then the product: 5 FLOPs an element.
inline KernelCost swiglu_forward_cost(double n, int x) { return {5 * n, x * 3 * n}; }
// SwiGLU backward: gate, up and dh read, dgate and dup written; 11 FLOPs an element.
inline KernelCost swiglu_backward_cost(double n, int x) { return {11 * n, x * 5 * n}; }
// The token embedding alone (no positions table): one wte row read per position, one written.
inline KernelCost embedding_forward_cost(double N, double C, int x) { return {0, 4 * N + 2 * x * N * C}; }
// Its backward: dout read once; wte's gradient rows of the tokens present (float32, read
// and written), plus the token groups.
inline KernelCost embedding_backward_cost(double N, double C, int x) { return {N * C, x * N * C + 8 * N * C + 12 * N}; }
