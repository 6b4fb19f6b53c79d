// gpu/matmul.cuh: the linear layer, out (N,OC) = inp (N,IC) · w (OC,IC)ᵀ + bias (OC), and
// its backward. The products go to cuBLAS (cuBLASLt in forward, which adds the bias and
// applies GELU as it writes the result), with floatX inputs and float32 sums; the weight
// gradient is float32, summed straight into the accumulated gradient.
// FLOPs and bytes of each product and pass: host/kernel_cost.h (matmul_forward_cost,
// matmul_backward_dinp_cost, matmul_backward_dw_cost, bias_grad_cost, gelu_*_cost).
//
// cuBLAS is column-major: to it, a row-major X (rows × cols) is the column-major matrix Xᵀ
// (cols × rows) with leading dimension cols, without moving a byte. So each row-major
// product below is written as its transpose, Cᵀ = (A·B)ᵀ = Bᵀ·Aᵀ, and the comment above
// each call gives the row-major product, then the column-major one that cuBLAS computes.
#pragma once
#include <cstdint>
#include <utility>

#include "common.cuh"

namespace gpu {

// GELU, tanh approximation (as in GPT-2): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
constexpr float GELU_K = 0.7978845608028654f;  // √(2/π)

// How aligned p is, up to the 256 bytes cuBLASLt assumes unless told: the largest power of
// two that divides its address. A layer's slice of a tensor is only as aligned as its offset
// (C·sizeof(floatX) bytes a row, B·T rows a layer).
inline uint32_t alignment_of(const void* p) {
    uint32_t alignment = 256;
    while (alignment > 1 && (uintptr_t)p % alignment != 0) alignment /= 2;
    return alignment;
}

// Rows of a product with N rows of IC inputs and OC outputs that go to cuBLAS at once: all
// of them, unless a matrix would exceed ctx.max_matrix_elements; then as many as fit, a
// multiple of 128 where that many fit (so that chunks start as aligned as the whole).
inline int product_rows(int N, int IC, int OC) {
    size_t fit = ctx.max_matrix_elements / (size_t)std::max(IC, OC);
    if (fit >= (size_t)N) return N;
    if (fit >= 128) fit = fit / 128 * 128;
    return (int)std::max<size_t>(fit, 1);
}

// One cuBLASLt product on N rows (no more than product_rows allows): the layout of
// matmul_forward below, with the pointers' real alignments as the algorithm's preference,
// since cuBLASLt's default (256 bytes) does not let an algorithm it picks run on less.
inline void matmul_forward_rows(floatX* out, const floatX* inp, const floatX* w, const floatX* bias, int N, int IC,
                                int OC, floatX* pre_gelu) {
    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, ctx.compute, CUDA_R_32F));
    cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b));
    cublasLtEpilogue_t epilogue = pre_gelu ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                                           : (bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    if (bias) {
        cudaDataType_t bias_type = CUDA_FLOATX;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
    }
    if (pre_gelu) {  // aux: the GELU's input, laid out as the output
        int64_t ld = OC;
        CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre_gelu, sizeof pre_gelu));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    }
    cublasLtMatrixLayout_t a, b, c;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_FLOATX, IC, OC, IC));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_FLOATX, IC, N, IC));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c, CUDA_FLOATX, OC, N, OC));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t workspace = BLASLT_WORKSPACE;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                      sizeof workspace));
    const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*> operands[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, w}, {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, inp},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, out}, {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, out}};
    for (const auto& [attribute, ptr] : operands) {
        uint32_t alignment = alignment_of(ptr);
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attribute, &alignment, sizeof alignment));
    }
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(ctx.blaslt, desc, a, b, c, c, pref, 1, &heuristic, &found));
    if (found == 0)
        throw Error(strf("cuBLASLt has no algorithm for a %d×%d×%d product with this epilogue", OC, N, IC));
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(ctx.blaslt, desc, &one, w, a, inp, b, &zero, out, c, out, c, &heuristic.algo,
                                ctx.workspace, BLASLT_WORKSPACE, ctx.stream));
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(a), cublasLtMatrixLayoutDestroy(b), cublasLtMatrixLayoutDestroy(c);
    cublasLtMatmulDescDestroy(desc);
}

// row-major out (N×OC) = inp (N×IC) · wᵀ (+ bias); with pre_gelu, out = gelu(that) and
// pre_gelu keeps its input (for the backward). bias may be null.
// column-major outᵀ (OC×N) = op_T(w: IC×OC, ld IC) · inpᵀ (IC×N, ld IC), the bias added to
// each of its columns, cuBLASLt's epilogue doing the rest; in chunks of rows (product_rows).
void matmul_forward(floatX* out, const floatX* inp, const floatX* w, const floatX* bias, int N, int IC, int OC,
                    floatX* pre_gelu = nullptr) {
    const int rows = product_rows(N, IC, OC);
    for (int n = 0; n < N; n += rows)
        matmul_forward_rows(out + (size_t)n * OC, inp + (size_t)n * IC, w, bias, std::min(rows, N - n), IC, OC,
                            pre_gelu ? pre_gelu + (size_t)n * OC : nullptr);
}

// out = gelu(inp), in GPT-2's tanh form
__global__ void gelu_forward_kernel(floatX* out, const floatX* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= packs_for<floatX>(n)) return;
    Pack<floatX> x = load_pack(inp, i, n), out_pack;
    for (int k = 0; k < pack_size<floatX>(); k++) {
        float xk = (float)x.v[k];
        out_pack.v[k] = floatX(0.5f * xk * (1.0f + tanhf(GELU_K * (xk + 0.044715f * xk * xk * xk))));
    }
    store_pack(out, i, n, out_pack);
}
void gelu_forward(floatX* out, const floatX* inp, size_t n) {
    gelu_forward_kernel<<<blocks_for(packs_for<floatX>(n)), THREADS, 0, ctx.stream>>>(out, inp, n);
    KERNEL_CHECK();
}
// The MLP's first layer: out = gelu(inp·wᵀ + bias), pre_gelu keeping GELU's input. cuBLASLt's
// epilogue applies GELU as it writes the product, unless `gelu_kernel`: then gelu_forward
// does, as --recompute 1's backward does again, so that the backward sees the forward's very
// bits. (The epilogue's GELU is not gelu_forward's to the bit on a GPU, and in bf16 it reads
// the float32 sum where gelu_forward reads pre_gelu, rounded.)
void matmul_gelu_forward(floatX* out, floatX* pre_gelu, const floatX* inp, const floatX* w, const floatX* bias, int N,
                         int IC, int OC, bool gelu_kernel) {
    if (!gelu_kernel) return matmul_forward(out, inp, w, bias, N, IC, OC, pre_gelu);
    matmul_forward(pre_gelu, inp, w, bias, N, IC, OC);
    gelu_forward(out, pre_gelu, (size_t)N * OC);
}
// dinp = dout · gelu'(inp), in place on dout allowed
__global__ void gelu_backward_kernel(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= packs_for<floatX>(n)) return;
    Pack<floatX> x = load_pack(inp, i, n), d = load_pack(dout, i, n), out;
    for (int k = 0; k < pack_size<floatX>(); k++) {
        float xk = (float)x.v[k], u = GELU_K * (xk + 0.044715f * xk * xk * xk), th = tanhf(u);
        float du = GELU_K * (1.0f + 3.0f * 0.044715f * xk * xk);
        out.v[k] = floatX((0.5f * (1.0f + th) + 0.5f * xk * (1.0f - th * th) * du) * (float)d.v[k]);
    }
    store_pack(dinp, i, n, out);
}
void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    gelu_backward_kernel<<<blocks_for(packs_for<floatX>(n)), THREADS, 0, ctx.stream>>>(dinp, inp, dout, n);
    KERNEL_CHECK();
}

// First pass of dbias[o] += Σ_n dout[n,o]: per chunk of rows
__global__ void bias_grad_partial_kernel(float* partial, const floatX* dout, int N, int OC) {
    int o = blockIdx.x * 32 + threadIdx.x, chunk = blockIdx.y;
    int n_end = min(N, (chunk + 1) * CHUNK_ROWS);
    float s = 0;
    if (o < OC)
        for (int n = chunk * CHUNK_ROWS + threadIdx.y; n < n_end; n += LANES) s += (float)dout[(size_t)n * OC + o];
    __shared__ float lane_sum[LANES][32];
    lane_sum[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && o < OC) {
        for (int k = 1; k < LANES; k++) s += lane_sum[k][threadIdx.x];
        partial[(size_t)chunk * OC + o] = s;
    }
}
// Overwrites dinp; dw and dbias (float32 parameter gradients) +=; dbias may be null.
// scratch: row_chunks(N) · OC floats (only with a bias)
// The products run in chunks of rows (product_rows); dw adds up the chunks.
void matmul_backward(floatX* dinp, float* dw, float* dbias, float* scratch, const floatX* dout, const floatX* inp,
                     const floatX* w, int N, int IC, int OC) {
    const float one = 1.0f, zero = 0.0f;
    const int rows = product_rows(N, IC, OC);
    for (int n0 = 0; n0 < N; n0 += rows) {
        const int n = std::min(rows, N - n0);
        const floatX *dout_rows = dout + (size_t)n0 * OC, *inp_rows = inp + (size_t)n0 * IC;
        // row-major dinp (n×IC) = dout (n×OC) · w (OC×IC)
        // column-major dinpᵀ (IC×n) = w (IC×OC, ld IC) · doutᵀ (OC×n, ld OC)
        CUBLAS_CHECK(cublasGemmEx(ctx.blas, CUBLAS_OP_N, CUBLAS_OP_N, IC, n, OC, &one, w, CUDA_FLOATX, IC, dout_rows,
                                  CUDA_FLOATX, OC, &zero, dinp + (size_t)n0 * IC, CUDA_FLOATX, IC, ctx.compute,
                                  CUBLAS_GEMM_DEFAULT));
        // row-major dw (OC×IC) += doutᵀ (OC×n) · inp (n×IC)
        // column-major dwᵀ (IC×OC) += inpᵀ (IC×n, ld IC) · op_T(doutᵀ: OC×n, ld OC), into float32
        CUBLAS_CHECK(cublasGemmEx(ctx.blas, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, n, &one, inp_rows, CUDA_FLOATX, IC,
                                  dout_rows, CUDA_FLOATX, OC, &one, dw, CUDA_R_32F, IC, ctx.compute,
                                  CUBLAS_GEMM_DEFAULT));
    }
    if (dbias) {
        int chunks = row_chunks(N);
        bias_grad_partial_kernel<<<dim3(blocks_for(OC, 32), chunks), dim3(32, LANES), 0, ctx.stream>>>(scratch, dout,
                                                                                                       N, OC);
        KERNEL_CHECK();
        sum_partials_add(dbias, scratch, chunks, OC);
    }
}

}  // namespace gpu
