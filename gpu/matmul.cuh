// gpu/matmul.cuh: the linear layer, out (N,OC) = inp (N,IC) · w (OC,IC)ᵀ + bias (OC), and
// its backward. The products go to cuBLASLt, which adds the bias and applies GELU as it
// writes the forward's result, and in the backward applies GELU's gradient and sums the bias
// gradient as it writes the products (--epilogues fused; `separate` runs the backward on
// cublasGemmEx and kernels), with floatX inputs and float32 sums; the weight gradient is
// float32, summed straight into the accumulated gradient.
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

// One cuBLASLt product in cuBLAS's column-major terms: D (m×n) = op(A) (m×k) · op(B) (k×n)
// + beta·D, then the epilogue. The preference carries the pointers' real alignments (A, B, C
// = D), since cuBLASLt's default (256 bytes) does not let an algorithm it picks run on less;
// the workspace is ctx.workspace, BLASLT_WORKSPACE bytes.
// Epilogues used here (cublasLt.h): BIAS and GELU_AUX(_BIAS) in the forward; in the
// backward DGELU (D ⊙= gelu'(aux), aux laid out as D) and BGRADB (bias[j] = Σ_k op(B)(k, j),
// a vector of n, *overwritten*, in the type of D).
struct LtProduct {
    bool trans_a, trans_b;
    int m, n, k;
    const void* A;
    int64_t lda;
    cudaDataType a_type;
    const void* B;
    int64_t ldb;
    cudaDataType b_type;
    void* D;  // also C when beta != 0
    int64_t ldd;
    cudaDataType d_type;
    float beta = 0.0f;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = nullptr;  // BIAS: read; BGRADB: written
    const void* aux = nullptr;   // GELU_AUX: written (the GELU's input); DGELU: read
    int64_t aux_ld = 0;          // a multiple of 8, at least m (cublasLt.h)
};
inline void lt_matmul(const LtProduct& p) {
    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, ctx.compute, CUDA_R_32F));
    cublasOperation_t trans_a = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &p.epilogue, sizeof p.epilogue));
    if (p.bias) {  // the bias, or its gradient, in D's type (cuBLASLt's default, said explicitly)
        cudaDataType bias_type = p.d_type;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof p.bias));
        CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
    }
    if (p.aux) {
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux, sizeof p.aux));
        CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &p.aux_ld, sizeof p.aux_ld));
    }
    cublasLtMatrixLayout_t a, b, d;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, p.a_type, p.trans_a ? p.k : p.m, p.trans_a ? p.m : p.k, p.lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, p.b_type, p.trans_b ? p.n : p.k, p.trans_b ? p.k : p.n, p.ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d, p.d_type, p.m, p.n, p.ldd));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t workspace = BLASLT_WORKSPACE;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                      sizeof workspace));
    const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*> operands[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, p.A}, {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, p.B},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, p.D}, {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, p.D}};
    for (const auto& [attribute, ptr] : operands) {
        uint32_t alignment = alignment_of(ptr);
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attribute, &alignment, sizeof alignment));
    }
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(ctx.blaslt, desc, a, b, d, d, pref, 1, &heuristic, &found));
    if (found == 0)
        throw Error(strf("cuBLASLt has no algorithm for a %d×%d×%d product with epilogue %d", p.m, p.n, p.k,
                         (int)p.epilogue));
    const float one = 1.0f;
    CUBLAS_CHECK(cublasLtMatmul(ctx.blaslt, desc, &one, p.A, a, p.B, b, &p.beta, p.D, d, p.D, d, &heuristic.algo,
                                ctx.workspace, BLASLT_WORKSPACE, ctx.stream));
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(a), cublasLtMatrixLayoutDestroy(b), cublasLtMatrixLayoutDestroy(d);
    cublasLtMatmulDescDestroy(desc);
}

// The forward on N rows (no more than product_rows allows): the layout of matmul_forward below.
inline void matmul_forward_rows(floatX* out, const floatX* inp, const floatX* w, const floatX* bias, int N, int IC,
                                int OC, floatX* pre_gelu) {
    LtProduct p{true, false, OC, N, IC, w, IC, CUDA_FLOATX, inp, IC, CUDA_FLOATX, out, OC, CUDA_FLOATX};
    p.epilogue = pre_gelu ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                          : (bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
    p.bias = bias;
    p.aux = pre_gelu, p.aux_ld = OC;  // the GELU's input, laid out as the output
    lt_matmul(p);
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
// Which products run the backward's pointwise work as their epilogues (--epilogues):
// fused, both products on cuBLASLt with GELU's gradient and the bias gradient as epilogues;
// separate, the products on cublasGemmEx and that work in the kernels above (the reference).
enum class Epilogues { fused, separate };

// The bias gradient, dbias (OC) += Σ_n dout[n,:] over N rows: partial sums per chunk of rows,
// then the chunks added in order. Reads N·OC floatX, writes and reads row_chunks(N)·OC floats.
void bias_backward(float* dbias, float* scratch, const floatX* dout, int N, int OC) {
    int chunks = row_chunks(N);
    bias_grad_partial_kernel<<<dim3(blocks_for(OC, 32), chunks), dim3(32, LANES), 0, ctx.stream>>>(scratch, dout, N,
                                                                                                   OC);
    KERNEL_CHECK();
    sum_partials_add(dbias, scratch, chunks, OC);
}

// One chunk of n rows of the backward on cuBLASLt (matmul_backward's fused path).
//   dinp: 2·n·IC·OC FLOPs; reads n·OC + OC·IC floatX, writes n·IC floatX. With gelu_in, the
//   DGELU epilogue reads n·IC floatX more and multiplies as it writes: the separate path's
//   gelu_backward reads dinp and gelu_in and writes dinp again (3·n·IC floatX), so the
//   epilogue saves 2·n·IC floatX of traffic and a launch (GPT-2 124M, B·T = 65536: 805 MB a
//   layer in bf16).
//   dw: 2·n·IC·OC FLOPs; reads n·(IC + OC) floatX, reads and writes IC·OC floats. With
//   dbias, the BGRADB epilogue sums op(B) = dout over k = n as the product reads it, into
//   scratch (OC floats, overwritten as documented), then one pass adds it to dbias: the
//   separate path's bias_backward reads n·OC floatX again (GPT-2 124M: 906 MB a layer for
//   the four biases in bf16) and its partial sums.
inline void matmul_backward_rows_lt(floatX* dinp, float* dw, float* dbias, float* scratch, const floatX* dout,
                                    const floatX* inp, const floatX* w, int n, int IC, int OC, const floatX* gelu_in) {
    // row-major dinp (n×IC) = dout (n×OC) · w (OC×IC), ⊙ gelu'(gelu_in) with gelu_in
    // column-major dinpᵀ (IC×n) = w (IC×OC, ld IC) · doutᵀ (OC×n, ld OC); aux gelu_inᵀ (IC×n, ld IC)
    LtProduct di{false, false, IC, n, OC, w, IC, CUDA_FLOATX, dout, OC, CUDA_FLOATX, dinp, IC, CUDA_FLOATX};
    if (gelu_in) di.epilogue = CUBLASLT_EPILOGUE_DGELU, di.aux = gelu_in, di.aux_ld = IC;
    lt_matmul(di);
    // row-major dw (OC×IC) += doutᵀ (OC×n) · inp (n×IC), dbias (OC) = Σ_n dout[n,:]
    // column-major dwᵀ (IC×OC) += inpᵀ (IC×n, ld IC) · op_T(doutᵀ: OC×n, ld OC), into float32;
    // op(B) = dout (n×OC): BGRADB's sum over k = n gives a vector of OC, in D's type (float32)
    LtProduct dwp{false, true, IC, OC, n, inp, IC, CUDA_FLOATX, dout, OC, CUDA_FLOATX, dw, IC, CUDA_R_32F, 1.0f};
    if (dbias) dwp.epilogue = CUBLASLT_EPILOGUE_BGRADB, dwp.bias = scratch;
    lt_matmul(dwp);
    if (dbias) sum_partials_add(dbias, scratch, 1, OC);  // the parameter gradients accumulate (+=)
}

// One chunk of n rows on cublasGemmEx (the separate path); gelu_in and dbias are the caller's.
inline void matmul_backward_rows_gemm(floatX* dinp, float* dw, const floatX* dout, const floatX* inp, const floatX* w,
                                      int n, int IC, int OC) {
    const float one = 1.0f, zero = 0.0f;
    // row-major dinp (n×IC) = dout (n×OC) · w (OC×IC)
    // column-major dinpᵀ (IC×n) = w (IC×OC, ld IC) · doutᵀ (OC×n, ld OC)
    CUBLAS_CHECK(cublasGemmEx(ctx.blas, CUBLAS_OP_N, CUBLAS_OP_N, IC, n, OC, &one, w, CUDA_FLOATX, IC, dout,
                              CUDA_FLOATX, OC, &zero, dinp, CUDA_FLOATX, IC, ctx.compute, CUBLAS_GEMM_DEFAULT));
    // row-major dw (OC×IC) += doutᵀ (OC×n) · inp (n×IC)
    // column-major dwᵀ (IC×OC) += inpᵀ (IC×n, ld IC) · op_T(doutᵀ: OC×n, ld OC), into float32
    CUBLAS_CHECK(cublasGemmEx(ctx.blas, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, n, &one, inp, CUDA_FLOATX, IC, dout,
                              CUDA_FLOATX, OC, &one, dw, CUDA_R_32F, IC, ctx.compute, CUBLAS_GEMM_DEFAULT));
}

// Overwrites dinp; dw and dbias (float32 parameter gradients) +=; dbias may be null. With
// gelu_in (the forward's GELU input, laid out as dinp: the MLP's fcproj, whose input was
// gelu(gelu_in)), dinp is the gradient of gelu_in: (dout·w) ⊙ gelu'(gelu_in).
// scratch: row_chunks(N) · OC floats (only with a bias)
// The products run in chunks of rows (product_rows); dw (and dbias) add up the chunks.
// The two paths differ by rounding only: fused multiplies by gelu' before dinp is rounded to
// floatX (separate: after), and sums the bias in cuBLASLt's order.
void matmul_backward(floatX* dinp, float* dw, float* dbias, float* scratch, const floatX* dout, const floatX* inp,
                     const floatX* w, int N, int IC, int OC, const floatX* gelu_in, Epilogues path) {
    if (gelu_in && path == Epilogues::fused && IC % 8 != 0)  // cublasLt.h: the aux's ld, a multiple of 8
        throw Error(strf("--epilogues fused needs the GELU's width (4C = %d) to be a multiple of 8", IC));
    const int rows = product_rows(N, IC, OC);
    for (int n0 = 0; n0 < N; n0 += rows) {
        const int n = std::min(rows, N - n0);
        const floatX *dout_rows = dout + (size_t)n0 * OC, *inp_rows = inp + (size_t)n0 * IC;
        floatX* dinp_rows = dinp + (size_t)n0 * IC;
        if (path == Epilogues::fused)
            matmul_backward_rows_lt(dinp_rows, dw, dbias, scratch, dout_rows, inp_rows, w, n, IC, OC,
                                    gelu_in ? gelu_in + (size_t)n0 * IC : nullptr);
        else
            matmul_backward_rows_gemm(dinp_rows, dw, dout_rows, inp_rows, w, n, IC, OC);
    }
    if (path == Epilogues::fused) return;
    if (gelu_in) gelu_backward(dinp, gelu_in, dinp, (size_t)N * IC);
    if (dbias) bias_backward(dbias, scratch, dout, N, OC);
}

}  // namespace gpu
