// gpu/matmul.cuh: the linear layer, out (N,OC) = inp (N,IC) · w (OC,IC)ᵀ + bias (OC), and
// its backward. The products go to cuBLAS (cuBLASLt in forward, which adds the bias and
// applies GELU as it writes the result), with floatX inputs and float32 sums; the weight
// gradient is float32, summed straight into the accumulated gradient.
//
// cuBLAS is column-major: to it, a row-major X (rows × cols) is the column-major matrix Xᵀ
// (cols × rows) with leading dimension cols, without moving a byte. So each row-major
// product below is written as its transpose, Cᵀ = (A·B)ᵀ = Bᵀ·Aᵀ, and the comment above
// each call gives the row-major product, then the column-major one that cuBLAS computes.
#pragma once
#include "common.cuh"

namespace gpu {

// GELU, tanh approximation (as in GPT-2): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
constexpr float GELU_K = 0.7978845608028654f;  // √(2/π)

// row-major out (N×OC) = inp (N×IC) · wᵀ (+ bias); with pre_gelu, out = gelu(that) and
// pre_gelu keeps its input (for the backward). bias may be null.
// column-major outᵀ (OC×N) = op_T(w: IC×OC, ld IC) · inpᵀ (IC×N, ld IC), the bias added to
// each of its columns, cuBLASLt's epilogue doing the rest.
void matmul_forward(floatX* out, const floatX* inp, const floatX* w, const floatX* bias, int N, int IC, int OC,
                    floatX* pre_gelu = nullptr) {
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

// out = gelu(inp): what the forward's epilogue computed, again (--recompute 1)
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
void matmul_backward(floatX* dinp, float* dw, float* dbias, float* scratch, const floatX* dout, const floatX* inp,
                     const floatX* w, int N, int IC, int OC) {
    const float one = 1.0f, zero = 0.0f;
    // row-major dinp (N×IC) = dout (N×OC) · w (OC×IC)
    // column-major dinpᵀ (IC×N) = w (IC×OC, ld IC) · doutᵀ (OC×N, ld OC)
    CUBLAS_CHECK(cublasGemmEx(ctx.blas, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, &one, w, CUDA_FLOATX, IC, dout,
                              CUDA_FLOATX, OC, &zero, dinp, CUDA_FLOATX, IC, ctx.compute, CUBLAS_GEMM_DEFAULT));
    // row-major dw (OC×IC) += doutᵀ (OC×N) · inp (N×IC)
    // column-major dwᵀ (IC×OC) += inpᵀ (IC×N, ld IC) · op_T(doutᵀ: OC×N, ld OC), into float32
    CUBLAS_CHECK(cublasGemmEx(ctx.blas, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, &one, inp, CUDA_FLOATX, IC, dout,
                              CUDA_FLOATX, OC, &one, dw, CUDA_R_32F, IC, ctx.compute, CUBLAS_GEMM_DEFAULT));
    if (dbias) {
        int chunks = row_chunks(N);
        bias_grad_partial_kernel<<<dim3(blocks_for(OC, 32), chunks), dim3(32, LANES), 0, ctx.stream>>>(scratch, dout,
                                                                                                       N, OC);
        KERNEL_CHECK();
        sum_partials_add(dbias, scratch, chunks, OC);
    }
}

}  // namespace gpu
