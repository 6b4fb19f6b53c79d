// gpu/attention.cuh: causal multi-head self-attention on qkv (B,T,3C) = [q | k | v], out
// (B,T,C), forward and backward.
//
// The products run per (b, h) as strided-batched cuBLAS calls on q, k, v with the heads
// split out: (B,T,3,NH,hs) is permuted to three (B,NH,T,hs) tensors, each head's T×hs
// matrix contiguous. Row-major per head, with S the scores and P the probabilities:
//   forward:   S = q·kᵀ·scale   P = causal_softmax(S)   y = P·v
//   backward:  dP = dy·vᵀ   dv = Pᵀ·dy   dS = softmax_backward(P, dP)·scale
//              dq = dS·k    dk = dSᵀ·q
//
// Memory: P is not kept for the backward, which would take (L,B,NH,T,T) elements (604 MB
// per sequence at GPT-2's T=1024 in float32). The forward keeps each row's softmax max and
// sum (B,NH,T); the backward recomputes the layer's scores with the same product, and the
// probabilities from the saved max and sum: bit for bit the forward's. Scores and
// probabilities live in one layer-sized scratch (B,NH,T,T), so attention memory grows with
// B·NH·T², not L·B·NH·T² (flash attention's saving, with the products still on cuBLAS).
#pragma once
#include "common.cuh"

namespace gpu {

// index i of a (B,NH,T,hs) tensor → the matching index in a (B,T,[parts,]NH·hs) row layout
__device__ inline size_t head_to_row(size_t i, int NH, int T, int hs, int row_width) {
    int d = (int)(i % hs), t = (int)(i / hs % T), h = (int)(i / ((size_t)hs * T) % NH);
    size_t b = i / ((size_t)hs * T * NH);
    return (b * T + t) * row_width + (size_t)h * hs + d;
}
// qkv (B,T,3C) → q, k, v, each (B,NH,T,hs)
__global__ void split_qkv_kernel(floatX* q, floatX* k, floatX* v, const floatX* qkv, int NH, int T, int hs, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int C = NH * hs;
    size_t r = head_to_row(i, NH, T, hs, 3 * C);
    q[i] = qkv[r], k[i] = qkv[r + C], v[i] = qkv[r + 2 * C];
}
// the reverse, for the gradients: dq, dk, dv → dqkv (B,T,3C), every element overwritten
__global__ void join_qkv_kernel(floatX* dqkv, const floatX* dq, const floatX* dk, const floatX* dv, int NH, int T,
                                int hs, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int C = NH * hs;
    size_t r = head_to_row(i, NH, T, hs, 3 * C);
    dqkv[r] = dq[i], dqkv[r + C] = dk[i], dqkv[r + 2 * C] = dv[i];
}
// (B,NH,T,hs) ⇄ (B,T,C): heads_to_rows for y, rows_to_heads for its gradient
__global__ void heads_to_rows_kernel(floatX* out, const floatX* y, int NH, int T, int hs, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[head_to_row(i, NH, T, hs, NH * hs)] = y[i];
}
__global__ void rows_to_heads_kernel(floatX* y, const floatX* in, int NH, int T, int hs, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = in[head_to_row(i, NH, T, hs, NH * hs)];
}

// Row r of att (one of B·NH·T) is query position t = r % T: P = exp(S - max) / sum over
// columns 0..t, zeros after, in place, in float32. One warp per row, 16 bytes at a time
// (for_row_pieces: a row of T elements need not start on a 16-byte boundary); each lane
// touches only its own pieces, so in place is safe. The forward finds max and sum and writes
// them to row_max, row_sum; the backward passes them as saved_max, saved_sum instead, which
// gives the forward's probabilities bit for bit.
__global__ void causal_softmax_kernel(floatX* att, float* row_max, float* row_sum, const float* saved_max,
                                      const float* saved_sum, int rows, int T) {
    int r = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= rows) return;
    const int seen = r % T + 1;  // the columns query t = r % T sees
    floatX* a = att + (size_t)r * T;
    float maxv, sum;
    if (saved_max) {
        maxv = saved_max[r], sum = saved_sum[r];
    } else {
        maxv = -INFINITY;
        for_row_pieces(a, seen, lane, 32, [&](int i, int count) {
            Pack<floatX> v = load_part(a + i, count);
            for (int k = 0; k < count; k++) maxv = fmaxf(maxv, (float)v.v[k]);
        });
        maxv = warp_max(maxv);
        sum = 0;
        for_row_pieces(a, seen, lane, 32, [&](int i, int count) {
            Pack<floatX> v = load_part(a + i, count);
            for (int k = 0; k < count; k++) sum += expf((float)v.v[k] - maxv);
        });
        sum = warp_sum(sum);
        if (lane == 0) row_max[r] = maxv, row_sum[r] = sum;
    }
    for_row_pieces(a, seen, lane, 32, [&](int i, int count) {
        Pack<floatX> v = load_part(a + i, count);
        for (int k = 0; k < count; k++) v.v[k] = floatX(expf((float)v.v[k] - maxv) / sum);
        store_part(a + i, count, v);
    });
    floatX* masked = a + seen;
    for_row_pieces(masked, T - seen, lane, 32,
                   [&](int i, int count) { store_part(masked + i, count, Pack<floatX>{}); });
}
// dS = P ⊙ (dP - Σ P·dP) · scale over columns 0..t, zeros after; in place on dP
__global__ void causal_softmax_backward_kernel(floatX* datt, const floatX* att, int rows, int T, float scale) {
    int r = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= rows) return;
    const int seen = r % T + 1;
    const floatX* a = att + (size_t)r * T;
    floatX* d = datt + (size_t)r * T;
    float dot = 0;
    for_row_pieces(d, seen, lane, 32, [&](int i, int count) {
        Pack<floatX> ak = load_part(a + i, count), dk = load_part(d + i, count);
        for (int k = 0; k < count; k++) dot += (float)ak.v[k] * (float)dk.v[k];
    });
    dot = warp_sum(dot);
    for_row_pieces(d, seen, lane, 32, [&](int i, int count) {
        Pack<floatX> ak = load_part(a + i, count), dk = load_part(d + i, count);
        for (int k = 0; k < count; k++) dk.v[k] = floatX((float)ak.v[k] * ((float)dk.v[k] - dot) * scale);
        store_part(d + i, count, dk);
    });
    floatX* masked = d + seen;
    for_row_pieces(masked, T - seen, lane, 32,
                   [&](int i, int count) { store_part(masked + i, count, Pack<floatX>{}); });
}

// Column-major strided-batched product over the B·NH heads: C = alpha·op(A)·op(B) + beta·C
static void gemm_heads(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, float alpha,
                       const floatX* A, int lda, long long stride_a, const floatX* B, int ldb, long long stride_b,
                       floatX* C, int ldc, long long stride_c, int heads) {
    const float zero = 0.0f;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx.blas, op_a, op_b, m, n, k, &alpha, A, CUDA_FLOATX, lda, stride_a, B,
                                            CUDA_FLOATX, ldb, stride_b, &zero, C, CUDA_FLOATX, ldc, stride_c, heads,
                                            ctx.compute, CUBLAS_GEMM_DEFAULT));
}

// Working memory of one layer's attention, shared by all layers.
struct AttentionScratch {
    floatX* qkvr;   // (3, B, NH, T, hs)  q, k, v with the heads split out
    floatX* dqkvr;  // (3, B, NH, T, hs)  their gradients
    floatX* yr;     // (B, NH, T, hs)     the output per head; its gradient in backward
    floatX* att;    // (B, NH, T, T)      scores, then probabilities (forward; recomputed in backward)
    floatX* datt;   // (B, NH, T, T)      gradient of the probabilities, then of the scores
};

// S = q·kᵀ·scale for every head, into s.att
static void attention_scores(const AttentionScratch& s, int B, int T, int C, int NH) {
    int hs = C / NH;
    size_t n = (size_t)B * T * C;
    const floatX *q = s.qkvr, *k = s.qkvr + n;
    // row-major S (T×T) = q (T×hs) · kᵀ · scale
    // column-major Sᵀ (T×T, ld T) = op_T(kᵀ: hs×T, ld hs) · qᵀ (hs×T, ld hs)
    gemm_heads(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f / sqrtf((float)hs), k, hs, (long long)T * hs, q, hs,
               (long long)T * hs, s.att, T, (long long)T * T, B * NH);
}

// att_max, att_sum: (B, NH, T) softmax statistics, kept for the backward
void attention_forward(floatX* out, float* att_max, float* att_sum, const floatX* qkv, const AttentionScratch& s, int B,
                       int T, int C, int NH) {
    int hs = C / NH, heads = B * NH, rows = heads * T;
    size_t n = (size_t)B * T * C;
    long long sx = (long long)T * hs, sa = (long long)T * T;  // per-head strides of q/k/v/y and of att
    const floatX* v = s.qkvr + 2 * n;
    split_qkv_kernel<<<blocks_for(n), THREADS, 0, ctx.stream>>>(s.qkvr, s.qkvr + n, s.qkvr + 2 * n, qkv, NH, T, hs, n);
    KERNEL_CHECK();
    attention_scores(s, B, T, C, NH);
    causal_softmax_kernel<<<blocks_for(rows, ROWS_PER_BLOCK), THREADS, 0, ctx.stream>>>(s.att, att_max, att_sum,
                                                                                        nullptr, nullptr, rows, T);
    KERNEL_CHECK();
    // row-major y (T×hs) = P (T×T) · v (T×hs)
    // column-major yᵀ (hs×T, ld hs) = vᵀ (hs×T, ld hs) · Pᵀ (T×T, ld T)
    gemm_heads(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, v, hs, sx, s.att, T, sa, s.yr, hs, sx, heads);
    heads_to_rows_kernel<<<blocks_for(n), THREADS, 0, ctx.stream>>>(out, s.yr, NH, T, hs, n);
    KERNEL_CHECK();
}
// Overwrites dqkv.
void attention_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* att_max,
                        const float* att_sum, const AttentionScratch& s, int B, int T, int C, int NH) {
    int hs = C / NH, heads = B * NH, rows = heads * T;
    size_t n = (size_t)B * T * C;
    long long sx = (long long)T * hs, sa = (long long)T * T;
    const floatX *q = s.qkvr, *k = s.qkvr + n, *v = s.qkvr + 2 * n;
    floatX *dq = s.dqkvr, *dk = s.dqkvr + n, *dv = s.dqkvr + 2 * n, *dyr = s.yr;
    split_qkv_kernel<<<blocks_for(n), THREADS, 0, ctx.stream>>>(s.qkvr, s.qkvr + n, s.qkvr + 2 * n, qkv, NH, T, hs, n);
    KERNEL_CHECK();
    attention_scores(s, B, T, C, NH);  // the forward's probabilities again, from its statistics
    causal_softmax_kernel<<<blocks_for(rows, ROWS_PER_BLOCK), THREADS, 0, ctx.stream>>>(s.att, nullptr, nullptr,
                                                                                        att_max, att_sum, rows, T);
    KERNEL_CHECK();
    rows_to_heads_kernel<<<blocks_for(n), THREADS, 0, ctx.stream>>>(dyr, dout, NH, T, hs, n);
    KERNEL_CHECK();
    // row-major dP (T×T) = dy (T×hs) · vᵀ
    // column-major dPᵀ (T×T, ld T) = op_T(vᵀ: hs×T, ld hs) · dyᵀ (hs×T, ld hs)
    gemm_heads(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, v, hs, sx, dyr, hs, sx, s.datt, T, sa, heads);
    // row-major dv (T×hs) = Pᵀ (T×T) · dy (T×hs)
    // column-major dvᵀ (hs×T, ld hs) = dyᵀ (hs×T, ld hs) · op_T(Pᵀ: T×T, ld T)
    gemm_heads(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, dyr, hs, sx, s.att, T, sa, dv, hs, sx, heads);
    causal_softmax_backward_kernel<<<blocks_for(rows, ROWS_PER_BLOCK), THREADS, 0, ctx.stream>>>(
        s.datt, s.att, rows, T, 1.0f / sqrtf((float)hs));
    KERNEL_CHECK();
    // row-major dq (T×hs) = dS (T×T) · k (T×hs)
    // column-major dqᵀ (hs×T, ld hs) = kᵀ (hs×T, ld hs) · dSᵀ (T×T, ld T)
    gemm_heads(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, k, hs, sx, s.datt, T, sa, dq, hs, sx, heads);
    // row-major dk (T×hs) = dSᵀ (T×T) · q (T×hs)
    // column-major dkᵀ (hs×T, ld hs) = qᵀ (hs×T, ld hs) · op_T(dSᵀ: T×T, ld T)
    gemm_heads(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, q, hs, sx, s.datt, T, sa, dk, hs, sx, heads);
    join_qkv_kernel<<<blocks_for(n), THREADS, 0, ctx.stream>>>(dqkv, dq, dk, dv, NH, T, hs, n);
    KERNEL_CHECK();
}

}  // namespace gpu
