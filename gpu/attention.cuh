// gpu/attention.cuh: causal self-attention with NH query heads and KVH key/value heads
// (grouped-query attention; GPT-2: KVH = NH) on qkv (B,T,QKV) = [q: NH·hs | k: KVH·hs | v: KVH·hs],
// QKV = C + 2·KVH·hs; query head h reads K/V head h / G, G = NH / KVH (the group). Out (B,T,C),
// forward and backward.
//
// The products run as strided-batched cuBLAS calls on q, k, v with the heads split out: q to
// (B,NH,T,hs), k and v to (B,KVH,T,hs), each head's T×hs matrix contiguous. The G query heads
// of a group are adjacent (h = kh·G + g), so q read as (B,KVH,G·T,hs) stacks a group's queries
// into one (G·T)×hs matrix, and its scores and probabilities (B,NH,T,T) likewise into one
// (G·T)×T matrix per K/V head: every product is one batch of B·KVH, the group's queries as
// extra rows. Row-major per K/V head, with S the scores and P the probabilities of its G·T
// query rows (a row's query position t = row % T, which the causal mask uses):
//   forward:   S = q·kᵀ·scale   P = causal_softmax(S)   y = P·v
//   backward:  dP = dy·vᵀ   dv = Pᵀ·dy   dS = softmax_backward(P, dP)·scale
//              dq = dS·k    dk = dSᵀ·q
// dv and dk sum over the group's G·T query rows inside one product (its k dimension): the
// group's heads are summed by cuBLAS in its fixed order, deterministic, no atomics. With G = 1
// (KVH = NH) every call is the multi-head one, unchanged.
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
// Where q, k, v of qkv (B,T,QKV) go in the split layout, and back: element i = (b, h, t, d)
// of q (B,NH,T,hs) is at r in qkv; when h < KVH, element kv = (b, h, t, d) of k and of v
// (B,KVH,T,hs) is at r + C and r + C + KVH·hs (k's and v's head h).
struct SplitIndex {
    size_t r, kv;
    bool has_kv;
    __device__ SplitIndex(size_t i, int NH, int KVH, int T, int hs) {
        const int d = (int)(i % hs), t = (int)(i / hs % T), h = (int)(i / ((size_t)hs * T) % NH);
        const size_t b = i / ((size_t)hs * T * NH);
        r = (b * T + t) * (size_t)(NH + 2 * KVH) * hs + (size_t)h * hs + d;
        kv = ((b * KVH + h) * T + t) * hs + d;
        has_kv = h < KVH;
    }
};
// qkv (B,T,QKV) → q (B,NH,T,hs), k and v (B,KVH,T,hs); n = B·NH·T·hs, one thread per q element
__global__ void split_qkv_kernel(floatX* q, floatX* k, floatX* v, const floatX* qkv, int NH, int KVH, int T, int hs,
                                 size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const SplitIndex at(i, NH, KVH, T, hs);
    const int C = NH * hs;
    q[i] = qkv[at.r];
    if (at.has_kv) k[at.kv] = qkv[at.r + C], v[at.kv] = qkv[at.r + C + (size_t)KVH * hs];
}
// the reverse, for the gradients: dq, dk, dv → dqkv (B,T,QKV), every element overwritten
__global__ void join_qkv_kernel(floatX* dqkv, const floatX* dq, const floatX* dk, const floatX* dv, int NH, int KVH,
                                int T, int hs, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const SplitIndex at(i, NH, KVH, T, hs);
    const int C = NH * hs;
    dqkv[at.r] = dq[i];
    if (at.has_kv) dqkv[at.r + C] = dk[at.kv], dqkv[at.r + C + (size_t)KVH * hs] = dv[at.kv];
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

// Column-major strided-batched product over `heads` batches: C = alpha·op(A)·op(B) + beta·C
static void gemm_heads(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, float alpha,
                       const floatX* A, int lda, long long stride_a, const floatX* B, int ldb, long long stride_b,
                       floatX* C, int ldc, long long stride_c, int heads) {
    const float zero = 0.0f;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx.blas, op_a, op_b, m, n, k, &alpha, A, CUDA_FLOATX, lda, stride_a, B,
                                            CUDA_FLOATX, ldb, stride_b, &zero, C, CUDA_FLOATX, ldc, stride_c, heads,
                                            ctx.compute, CUBLAS_GEMM_DEFAULT));
}

// Working memory of one layer's attention, shared by all layers. QKV = C + 2·KVH·hs.
struct AttentionScratch {
    floatX* qkvr;   // (B·T·QKV)  q (B,NH,T,hs), then k and v (B,KVH,T,hs): the heads split out
    floatX* dqkvr;  // (B·T·QKV)  their gradients, the same layout
    floatX* yr;     // (B, NH, T, hs)     the output per head; its gradient in backward
    floatX* att;    // (B, NH, T, T)      scores, then probabilities (forward; recomputed in backward)
    floatX* datt;   // (B, NH, T, T)      gradient of the probabilities, then of the scores
};

// The shapes of one call: the split tensors' places in the scratch and the strides of a batch
// (one K/V head and its group's G query heads, the group's G·T query rows stacked).
struct AttentionShape {
    int T, hs, G, heads, rows, GT;  // heads: batches (B·KVH); rows: B·NH·T softmax rows; GT = G·T
    size_t n, nkv;                  // elements of q (B·T·C) and of each of k, v (B·T·KVH·hs)
    long long sq, skv, sa;          // per-batch strides of q (and y, dq), of k and v (and dk, dv), of att
    AttentionShape(int B, int T_, int C, int NH, int KVH)
        : T(T_), hs(C / NH), G(NH / KVH), heads(B * KVH), rows(B * NH * T), GT(G * T), n((size_t)B * T * C),
          nkv((size_t)B * T * KVH * hs), sq((long long)GT * hs), skv((long long)T * hs), sa((long long)GT * T) {}
    template <class X>
    X* k(X* split) const { return split + n; }
    template <class X>
    X* v(X* split) const { return split + n + nkv; }
};
inline void check_heads(int NH, int KVH) {
    if (KVH < 1 || NH % KVH) throw Error(strf("attention: %d query heads do not split into %d K/V heads", NH, KVH));
}

// S = q·kᵀ·scale for every head, into s.att
static void attention_scores(const AttentionScratch& s, const AttentionShape& a) {
    // per K/V head, row-major S (G·T×T) = q (G·T×hs) · kᵀ · scale
    // column-major Sᵀ (T×G·T, ld T) = op_T(kᵀ: hs×T, ld hs) · qᵀ (hs×G·T, ld hs)
    gemm_heads(CUBLAS_OP_T, CUBLAS_OP_N, a.T, a.GT, a.hs, 1.0f / sqrtf((float)a.hs), a.k(s.qkvr), a.hs, a.skv, s.qkvr,
               a.hs, a.sq, s.att, a.T, a.sa, a.heads);
}
static void split_qkv(const AttentionScratch& s, const floatX* qkv, const AttentionShape& a, int NH, int KVH) {
    split_qkv_kernel<<<blocks_for(a.n), THREADS, 0, ctx.stream>>>(s.qkvr, a.k(s.qkvr), a.v(s.qkvr), qkv, NH, KVH, a.T,
                                                                  a.hs, a.n);
    KERNEL_CHECK();
}

// att_max, att_sum: (B, NH, T) softmax statistics, kept for the backward
void attention_forward(floatX* out, float* att_max, float* att_sum, const floatX* qkv, const AttentionScratch& s, int B,
                       int T, int C, int NH, int KVH) {
    check_heads(NH, KVH);
    const AttentionShape a(B, T, C, NH, KVH);
    const int hs = a.hs;
    split_qkv(s, qkv, a, NH, KVH);
    attention_scores(s, a);
    causal_softmax_kernel<<<blocks_for(a.rows, ROWS_PER_BLOCK), THREADS, 0, ctx.stream>>>(s.att, att_max, att_sum,
                                                                                          nullptr, nullptr, a.rows, T);
    KERNEL_CHECK();
    // per K/V head, row-major y (G·T×hs) = P (G·T×T) · v (T×hs)
    // column-major yᵀ (hs×G·T, ld hs) = vᵀ (hs×T, ld hs) · Pᵀ (T×G·T, ld T)
    gemm_heads(CUBLAS_OP_N, CUBLAS_OP_N, hs, a.GT, T, 1.0f, a.v(s.qkvr), hs, a.skv, s.att, T, a.sa, s.yr, hs, a.sq,
               a.heads);
    heads_to_rows_kernel<<<blocks_for(a.n), THREADS, 0, ctx.stream>>>(out, s.yr, NH, T, hs, a.n);
    KERNEL_CHECK();
}
// Overwrites dqkv (B,T,QKV).
void attention_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* att_max,
                        const float* att_sum, const AttentionScratch& s, int B, int T, int C, int NH, int KVH) {
    check_heads(NH, KVH);
    const AttentionShape a(B, T, C, NH, KVH);
    const int hs = a.hs;
    const floatX *q = s.qkvr, *k = a.k(s.qkvr), *v = a.v(s.qkvr);
    floatX *dq = s.dqkvr, *dk = a.k(s.dqkvr), *dv = a.v(s.dqkvr), *dyr = s.yr;
    split_qkv(s, qkv, a, NH, KVH);
    attention_scores(s, a);  // the forward's probabilities again, from its statistics
    causal_softmax_kernel<<<blocks_for(a.rows, ROWS_PER_BLOCK), THREADS, 0, ctx.stream>>>(s.att, nullptr, nullptr,
                                                                                          att_max, att_sum, a.rows, T);
    KERNEL_CHECK();
    rows_to_heads_kernel<<<blocks_for(a.n), THREADS, 0, ctx.stream>>>(dyr, dout, NH, T, hs, a.n);
    KERNEL_CHECK();
    // per K/V head, row-major dP (G·T×T) = dy (G·T×hs) · vᵀ
    // column-major dPᵀ (T×G·T, ld T) = op_T(vᵀ: hs×T, ld hs) · dyᵀ (hs×G·T, ld hs)
    gemm_heads(CUBLAS_OP_T, CUBLAS_OP_N, T, a.GT, hs, 1.0f, v, hs, a.skv, dyr, hs, a.sq, s.datt, T, a.sa, a.heads);
    // row-major dv (T×hs) = Pᵀ (T×G·T) · dy (G·T×hs): the group's heads summed over k = G·T
    // column-major dvᵀ (hs×T, ld hs) = dyᵀ (hs×G·T, ld hs) · op_T(Pᵀ: T×G·T, ld T)
    gemm_heads(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, a.GT, 1.0f, dyr, hs, a.sq, s.att, T, a.sa, dv, hs, a.skv, a.heads);
    causal_softmax_backward_kernel<<<blocks_for(a.rows, ROWS_PER_BLOCK), THREADS, 0, ctx.stream>>>(
        s.datt, s.att, a.rows, T, 1.0f / sqrtf((float)hs));
    KERNEL_CHECK();
    // row-major dq (G·T×hs) = dS (G·T×T) · k (T×hs)
    // column-major dqᵀ (hs×G·T, ld hs) = kᵀ (hs×T, ld hs) · dSᵀ (T×G·T, ld T)
    gemm_heads(CUBLAS_OP_N, CUBLAS_OP_N, hs, a.GT, T, 1.0f, k, hs, a.skv, s.datt, T, a.sa, dq, hs, a.sq, a.heads);
    // row-major dk (T×hs) = dSᵀ (T×G·T) · q (G·T×hs): the group's heads summed over k = G·T
    // column-major dkᵀ (hs×T, ld hs) = qᵀ (hs×G·T, ld hs) · op_T(dSᵀ: T×G·T, ld T)
    gemm_heads(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, a.GT, 1.0f, q, hs, a.sq, s.datt, T, a.sa, dk, hs, a.skv, a.heads);
    join_qkv_kernel<<<blocks_for(a.n), THREADS, 0, ctx.stream>>>(dqkv, dq, dk, dv, NH, KVH, T, hs, a.n);
    KERNEL_CHECK();
}

}  // namespace gpu
