// A kernel program of the kind learners bring (a CPU reference, several kernel versions, a
// validation with a tolerance), written as for nvcc and built unchanged on the CPU runtime
// with the README's one-line command:   make test/cpu_runtime/byok_cpu && ./test/cpu_runtime/byok_cpu
// (`nvcc -std=c++17 -arch=sm_90 -o byok test/cpu_runtime/byok.cu` builds the same file for a GPU.)
//
// It uses the features the runtime learned for such programs: cooperative groups (tiles,
// reduce, scans), __launch_bounds__, cache-hint loads and stores, atomicAdd on
// __nv_bfloat162, CUDA's mixed int/unsigned min, __syncwarp() under -std=c++17, NULL as a
// kernel argument and host variables named gridDim and blockDim. Exit status 0 when every
// version matches the reference, 1 otherwise.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace cg = cooperative_groups;

#define CHECK_CUDA(call)                                                                          \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

// ---- CPU references
void softmax_cpu(float* out, const float* in, const float* mask, int N, int C) {
    for (int r = 0; r < N; r++) {
        const float* x = in + (size_t)r * C;
        double m = -INFINITY, sum = 0;
        for (int c = 0; c < C; c++) m = fmax(m, x[c] + (mask ? mask[c] : 0.0f));
        for (int c = 0; c < C; c++) sum += exp(x[c] + (mask ? mask[c] : 0.0f) - m);
        for (int c = 0; c < C; c++) out[(size_t)r * C + c] = (float)(exp(x[c] + (mask ? mask[c] : 0.0f) - m) / sum);
    }
}
void bias_grad_cpu(float* dbias, const float* dout, int N, int C) {
    for (int c = 0; c < C; c++) {
        double s = 0;
        for (int r = 0; r < N; r++) s += dout[(size_t)r * C + c];
        dbias[c] = (float)s;
    }
}

// ---- softmax, version 1: a thread per row
__global__ void softmax_kernel1(float* out, const float* in, const float* mask, int N, int C) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= N) return;
    const float* x = in + (size_t)r * C;
    float m = -INFINITY, sum = 0;
    for (int c = 0; c < C; c++) m = fmaxf(m, x[c] + (mask ? mask[c] : 0.0f));
    for (int c = 0; c < C; c++) sum += expf(x[c] + (mask ? mask[c] : 0.0f) - m);
    for (int c = 0; c < C; c++) out[(size_t)r * C + c] = expf(x[c] + (mask ? mask[c] : 0.0f) - m) / sum;
}

// ---- softmax, version 2: a warp per row, cooperative groups, streaming loads and stores
__global__ void __launch_bounds__(256) softmax_kernel2(float* out, const float* in, const float* mask, int N, int C) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int r = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
    if (r >= N) return;  // whole warps leave together
    const float* x = in + (size_t)r * C;
    float m = -INFINITY;
    for (int c = warp.thread_rank(); c < C; c += warp.size()) m = fmaxf(m, __ldcs(x + c) + (mask ? __ldg(mask + c) : 0.0f));
    m = cg::reduce(warp, m, cg::greater<float>());
    float sum = 0;
    for (int c = warp.thread_rank(); c < C; c += warp.size()) sum += expf(__ldcs(x + c) + (mask ? __ldg(mask + c) : 0.0f) - m);
    sum = cg::reduce(warp, sum, cg::plus<float>());
    for (int c = warp.thread_rank(); c < C; c += warp.size())
        __stcs(out + (size_t)r * C + c, expf(__ldcs(x + c) + (mask ? __ldg(mask + c) : 0.0f) - m) / sum);
}

// ---- softmax, version 3: a warp per row with shuffles and a warp-shared staging buffer
__global__ void softmax_kernel3(float* out, const float* in, const float* mask, int N, int C) {
    __shared__ float partial[8][32];
    int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    int r = blockIdx.x * (blockDim.x / 32) + w;
    if (r >= N) return;
    const float* x = in + (size_t)r * C;
    float m = -INFINITY;
    for (int c = lane; c < C; c += 32) m = fmaxf(m, x[c] + (mask ? mask[c] : 0.0f));
    partial[w][lane] = m;
    __syncwarp();
    for (int k = 0; k < min(32, C); k++) m = fmaxf(m, partial[w][k]);  // (int, int)
    __syncwarp();
    float sum = 0;
    for (int c = lane; c < C; c += 32) sum += expf(x[c] + (mask ? mask[c] : 0.0f) - m);
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    unsigned stop = min(C, 1u << 17);  // CUDA's min(int, unsigned): at most 128k columns
    for (unsigned c = lane; c < stop; c += 32)
        out[(size_t)r * C + c] = expf(x[c] + (mask ? mask[c] : 0.0f) - m) / sum;
}

// ---- bias gradient in bf16: each warp adds its rows' column pairs with packed atomics
__global__ void bias_grad_kernel(__nv_bfloat162* dbias, const float* dout, int N, int C) {
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(cg::this_thread_block());
    int pairs = C / 2;
    int p = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
    if (p >= pairs) return;
    float sx = 0, sy = 0;
    for (int r = warp.thread_rank(); r < N; r += 32) {
        float2 v = __ldg(reinterpret_cast<const float2*>(dout + (size_t)r * C) + p);
        sx += v.x, sy += v.y;
    }
    sx = cg::reduce(warp, sx, cg::plus<float>());
    sy = cg::reduce(warp, sy, cg::plus<float>());
    // rows split in two halves: two atomic adds on each pair, as a split-K kernel would
    if (warp.thread_rank() == 0) atomicAdd(dbias + p, __floats2bfloat162_rn(0.5f * sx, 0.5f * sy));
    if (warp.thread_rank() == 1) atomicAdd(dbias + p, __floats2bfloat162_rn(0.5f * sx, 0.5f * sy));
}

// ---- row offsets by a scan: out[r] = how many entries of rows before r are positive
__global__ void count_offsets(int* offsets, const float* in, int N, int C) {
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(cg::this_thread_block());
    int r = warp.thread_rank();
    int positive = 0;
    if (r < N)
        for (int c = 0; c < C; c++) positive += in[(size_t)r * C + c] > 0;
    int before = cg::exclusive_scan(warp, positive);
    if (r < N) offsets[r] = before;
}

static bool validate(const char* name, const float* got, const float* want, size_t n, float tolerance) {
    float worst = 0;
    for (size_t i = 0; i < n; i++) {
        float e = fabsf(got[i] - want[i]);
        if (!(e <= worst)) worst = e;  // NaN becomes the worst
    }
    bool ok = worst <= tolerance;
    printf("%-36s max abs error %.3g (tolerance %.3g): %s\n", name, worst, tolerance, ok ? "ok" : "FAILED");
    return ok;
}

int main() {
    const int N = 24, C = 100;  // 24 rows: not a multiple of the 8 warps of a block
    std::vector<float> in((size_t)N * C), mask(C), ref((size_t)N * C), ref_masked((size_t)N * C), out((size_t)N * C);
    for (size_t i = 0; i < in.size(); i++) in[i] = sinf(0.37f * i) * 4.0f;
    for (int c = 0; c < C; c++) mask[c] = c % 10 == 9 ? -1e4f : 0.0f;
    softmax_cpu(ref.data(), in.data(), nullptr, N, C);
    softmax_cpu(ref_masked.data(), in.data(), mask.data(), N, C);

    float *d_in, *d_mask, *d_out;
    CHECK_CUDA(cudaMalloc(&d_in, in.size() * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&d_mask, mask.size() * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&d_out, out.size() * sizeof(float)));
    CHECK_CUDA(cudaMemcpy(d_in, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d_mask, mask.data(), mask.size() * sizeof(float), cudaMemcpyHostToDevice));

    bool ok = true;
    // float32 softmax against a float64 reference: expf and the sums' rounding, ~1e-7 relative
    // on values at most 1, so 1e-6 absolute leaves margin and catches any indexing slip
    const float tol = 1e-6f;
    for (int version = 1; version <= 3; version++) {
        for (int masked = 0; masked < 2; masked++) {
            dim3 blockDim(256);  // host variables named as the built-ins, as nvcc allows
            dim3 gridDim(version == 1 ? (N + 255) / 256 : (N + 7) / 8);
            const float* m = masked ? d_mask : NULL;
            CHECK_CUDA(cudaMemset(d_out, 0, out.size() * sizeof(float)));
            if (version == 1) softmax_kernel1<<<gridDim, blockDim>>>(d_out, d_in, m, N, C);
            if (version == 2) softmax_kernel2<<<gridDim, blockDim>>>(d_out, d_in, m, N, C);
            if (version == 3) softmax_kernel3<<<gridDim, blockDim>>>(d_out, d_in, m, N, C);
            CHECK_CUDA(cudaGetLastError());
            CHECK_CUDA(cudaMemcpy(out.data(), d_out, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
            char name[64];
            snprintf(name, sizeof name, "softmax version %d%s", version, masked ? ", masked" : "");
            ok &= validate(name, out.data(), masked ? ref_masked.data() : ref.data(), out.size(), tol);
        }
    }
    // the launch bound holds: 512 threads is more than version 2's 256
    softmax_kernel2<<<1, 512>>>(d_out, d_in, NULL, N, C);
    cudaError_t e = cudaGetLastError();
    bool bound_ok = e == cudaErrorLaunchOutOfResources;
    printf("%-36s %s: %s\n", "softmax version 2 with 512 threads", cudaGetErrorString(e), bound_ok ? "ok" : "FAILED");
    ok &= bound_ok;

    // bias gradient: bf16 sums of up to 24 values of magnitude 4: bf16 keeps 8 bits, so
    // 2^-8 relative of the largest |sum| (< 100) bounds the error, with margin: 0.5
    std::vector<float> dbias_ref(C), dbias(C);
    bias_grad_cpu(dbias_ref.data(), in.data(), N, C);
    __nv_bfloat162* d_dbias;
    CHECK_CUDA(cudaMalloc(&d_dbias, C / 2 * sizeof(__nv_bfloat162)));
    CHECK_CUDA(cudaMemset(d_dbias, 0, C / 2 * sizeof(__nv_bfloat162)));
    bias_grad_kernel<<<(C / 2 + 7) / 8, 256>>>(d_dbias, d_in, N, C);
    CHECK_CUDA(cudaGetLastError());
    std::vector<__nv_bfloat162> h_dbias(C / 2);
    CHECK_CUDA(cudaMemcpy(h_dbias.data(), d_dbias, C / 2 * sizeof(__nv_bfloat162), cudaMemcpyDeviceToHost));
    for (int p = 0; p < C / 2; p++) dbias[2 * p] = __bfloat162float(h_dbias[p].x), dbias[2 * p + 1] = __bfloat162float(h_dbias[p].y);
    ok &= validate("bias gradient (bf16 packed atomics)", dbias.data(), dbias_ref.data(), C, 0.5f);

    // row offsets: integers, exact
    int* d_offsets;
    CHECK_CUDA(cudaMalloc(&d_offsets, N * sizeof(int)));
    count_offsets<<<1, 32>>>(d_offsets, d_in, N, C);
    CHECK_CUDA(cudaGetLastError());
    std::vector<int> offsets(N);
    CHECK_CUDA(cudaMemcpy(offsets.data(), d_offsets, N * sizeof(int), cudaMemcpyDeviceToHost));
    int running = 0;
    bool offsets_ok = true;
    for (int r = 0; r < N; r++) {
        offsets_ok &= offsets[r] == running;
        for (int c = 0; c < C; c++) running += in[(size_t)r * C + c] > 0;
    }
    printf("%-36s %s\n", "row offsets (exclusive_scan)", offsets_ok ? "ok" : "FAILED");
    ok &= offsets_ok;

    cudaFree(d_in), cudaFree(d_mask), cudaFree(d_out), cudaFree(d_dbias), cudaFree(d_offsets);
    printf("%s\n", ok ? "all versions match the reference" : "MISMATCH");
    return ok ? 0 : 1;
}
