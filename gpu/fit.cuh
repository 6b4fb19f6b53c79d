// gpu/fit.cuh: kernels that fit the GPU they run on. Before anything is allocated or launched,
// the trainer compares what each kernel asks of a block (dynamic shared memory, grid size,
// registers × threads) with the device's limits, and picks the variant that fits:
//   * LayerNorm backward: whole rows per block when a block can hold 2 float32 sums per
//     column per warp (64·C bytes), else column chunks (gpu/layernorm.cuh): the same bits;
//   * attention: the fused path (gpu/flash_attention.cuh) when its kernels fit, else the cuBLAS
//     path (gpu/attention.cuh), which needs no opt-in shared memory and maps B·NH to grid.x;
//   * the bf16 build needs compute capability 8.0 (bf16 tensor cores, mma.sync on bf16).
// Where nothing fits, one line names the kernel, the numbers and the device's limit, and the
// run stops at start-up (exit 1), never at the first launch. The planner prints the same
// choices for a GPU named by --device (host/device_limits.h) without that GPU.
#pragma once
#include <string>
#include <vector>

#include "../host/checkpoint.h"
#include "../host/device_limits.h"
#include "adamw.cuh"
#include "common.cuh"
#include "crossentropy.cuh"
#include "flash_attention.cuh"
#include "layernorm.cuh"
#include "rmsnorm.cuh"

namespace gpu {

// The limits of the GPU in use, as cudaGetDeviceProperties gives them.
inline DeviceLimits device_limits(int device) {
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, device));
    DeviceLimits d;
    d.name = p.name, d.major = p.major, d.minor = p.minor;
    d.smem_optin = p.sharedMemPerBlockOptin;
    d.max_grid_y = p.maxGridSize[1], d.max_threads_per_block = p.maxThreadsPerBlock, d.regs_per_block = p.regsPerBlock;
    return d;
}

// The bf16 build's products and attention run on bf16 tensor cores, which start at sm_80.
constexpr int BF16_MIN_SM = 80;
inline bool bf16_build() { return std::is_same<floatX, __nv_bfloat16>::value; }
inline std::string precision_refusal(const DeviceLimits& d) {
    if (!bf16_build() || d.sm() >= BF16_MIN_SM) return "";
    return strf("this train_gpt is the bf16 build, which needs compute capability 8.0 or newer (bf16 tensor cores); "
                "%s is sm_%d: build it with `make train_gpt PRECISION=fp32` (the default for a GPU below sm_80)",
                d.name.c_str(), d.sm());
}

// One kernel's dynamic shared memory at a shape.
struct SharedNeed {
    std::string kernel;
    size_t bytes;
};
// The fused attention's kernels at head size hs on a GPU of compute capability sm: the
// tensor-core ones (bf16 from sm_80), else the scalar ones.
inline std::vector<SharedNeed> fused_attention_smem(int hs, int sm) {
    std::vector<SharedNeed> needs;
    if (flash_mma_supports(hs) && sm >= BF16_MIN_SM) {
        with_mma_head_size(hs, [&](auto h) {
            constexpr int HS = decltype(h)::value;
            needs = {{"flash_attention_forward_mma_kernel", flash_mma::forward_shared_bytes<HS>()},
                     {"flash_attention_backward_dkdv_mma_kernel", flash_mma::dkdv_shared_bytes<HS>()},
                     {"flash_attention_backward_dq_mma_kernel", flash_mma::dq_shared_bytes<HS>()}};
            if constexpr (HS == 64 || HS == 128)  // the five-product backward (flash_backward_five)
                needs.push_back({"flash_attention_backward_bwd5_mma_kernel", flash_mma::bwd5_shared_bytes<HS>()});
        });
        if (flash_wide_supports(hs))  // the forward is the wide one there
            needs[0] = {"flash_attention_forward_wide_kernel", hs == 64 ? flash_wide::forward_wide_shared_bytes<64>()
                                                                        : flash_wide::forward_wide_shared_bytes<128>()};
        return needs;
    }
    size_t forward, dq, dkdv;
    flash_forward_tiles(nullptr, hs, &forward);
    flash_backward_tiles(nullptr, hs, false, &dq);
    flash_backward_tiles(nullptr, hs, true, &dkdv);
    return {{"flash_attention_forward_kernel", forward},
            {"flash_attention_backward_dq_kernel", dq},
            {"flash_attention_backward_dkdv_kernel", dkdv}};
}

// What the trainer's kernels take on one device at one shape, and the variants that fit.
struct KernelFit {
    int ln_cols = 0;            // LayerNorm backward: columns per block (C: whole rows)
    size_t ln_smem = 0;         // its dynamic shared memory at ln_cols
    std::vector<SharedNeed> attention;  // the fused path's kernels
    std::string fused_refusal;  // why the fused attention cannot run here; "" when it can
    std::string refusal;        // why the run cannot start at all; "" when it can
};

inline KernelFit fit_kernels(const ModelConfig& mc, int B, int T, const DeviceLimits& d) {
    KernelFit f;
    const int C = mc.C, NH = mc.NH, hs = C / NH;
    f.refusal = precision_refusal(d);
    f.ln_cols = layernorm_backward_columns(C, d.smem_optin);
    f.ln_smem = layernorm_backward_smem(f.ln_cols);
    if (f.ln_smem > d.smem_optin && f.refusal.empty())  // not even one pack of columns: no such GPU
        f.refusal = strf("layernorm_backward_fused_kernel needs %zu bytes of shared memory per block; %s allows %zu",
                         f.ln_smem, d.name.c_str(), d.smem_optin);
    // the column sums of the bias and LayerNorm gradients: one block row per chunk of rows, in grid.y
    const long long chunks = ((long long)B * T + CHUNK_ROWS - 1) / CHUNK_ROWS;
    if (chunks > d.max_grid_y && f.refusal.empty())
        f.refusal = strf("bias_grad_partial_kernel: grid.y = B·T/%d = %lld chunks of rows at B=%d, T=%d, over the %d "
                         "that %s allows: lower -b",
                         CHUNK_ROWS, chunks, B, T, d.max_grid_y, d.name.c_str());
    if (!flash_attention_supports(hs)) {
        f.fused_refusal = strf("the fused attention supports head sizes that are multiples of 16 up to %d, the model's "
                               "is %d", FLASH_MAX_HS, hs);
        return f;
    }
    f.attention = fused_attention_smem(hs, d.sm());
    for (const SharedNeed& n : f.attention)
        if (n.bytes > d.smem_optin && f.fused_refusal.empty())
            f.fused_refusal = strf("%s needs %zu bytes of shared memory per block at head size %d; %s allows %zu",
                                   n.kernel.c_str(), n.bytes, hs, d.name.c_str(), d.smem_optin);
    if ((long long)B * NH > d.max_grid_y && f.fused_refusal.empty())
        f.fused_refusal = strf("the fused attention's grid.y = B·NH = %lld, over the %d that %s allows",
                               (long long)B * NH, d.max_grid_y, d.name.c_str());
    return f;
}

// Registers × threads of the kernels launched with the largest blocks, against the device's
// registers per block (cudaFuncGetAttributes' numRegs: what ptxas gave this build).
inline std::string registers_refusal(const DeviceLimits& d) {
    struct Launched {
        const void* kernel;
        const char* name;
        int threads;
    };
    const Launched launched[] = {{(const void*)add_mean_loss_kernel, "add_mean_loss_kernel", 1024},
                                 {(const void*)sum_doubles_kernel, "sum_doubles_kernel", 1024},
                                 {(const void*)crossentropy_fused_kernel, "crossentropy_fused_kernel",
                                  CE_FUSED_THREADS},
                                 {(const void*)crossentropy_three_pass_kernel, "crossentropy_three_pass_kernel",
                                  CE_THREADS},
                                 {(const void*)layernorm_backward_fused_kernel, "layernorm_backward_fused_kernel",
                                  THREADS}};
    for (const Launched& k : launched) {
        cudaFuncAttributes a;
        CUDA_CHECK(cudaFuncGetAttributes(&a, k.kernel));
        if (k.threads > a.maxThreadsPerBlock || (long long)a.numRegs * k.threads > d.regs_per_block)
            return strf("%s: %d threads × %d registers = %lld, over the %d registers per block (and %d threads) that "
                        "%s allows for it",
                        k.name, k.threads, a.numRegs, (long long)a.numRegs * k.threads, d.regs_per_block,
                        a.maxThreadsPerBlock, d.name.c_str());
    }
    return "";
}

// The plan's lines: what each kernel takes on this device, against its limit.
inline std::vector<std::string> describe_fit(const KernelFit& f, const ModelConfig& mc, const DeviceLimits& d,
                                             const std::string& attention) {
    std::vector<std::string> lines;
    lines.push_back(strf("kernels on %s (sm_%d, %s build): shared memory per block up to %s (opt-in)", d.name.c_str(),
                         d.sm(), PRECISION_NAME, format_bytes((double)d.smem_optin).c_str()));
    // the norm's backward: GPT-2's LayerNorm, or Llama's RMSNorm in the same columns (one sum a
    // column where LayerNorm keeps two, so what fits LayerNorm fits it)
    lines.push_back(strf("  %s backward: %s, %s of shared memory per block", mc.llama() ? "rmsnorm" : "layernorm",
                         f.ln_cols == mc.C ? strf("whole rows (C=%d)", mc.C).c_str()
                                           : strf("in column chunks of %d (%d chunks of C=%d)", f.ln_cols,
                                                  (mc.C + f.ln_cols - 1) / f.ln_cols, mc.C).c_str(),
                         format_bytes((double)(mc.llama() ? rmsnorm_backward_smem(f.ln_cols) : f.ln_smem)).c_str()));
    std::string kernels;
    for (const SharedNeed& n : f.attention)
        kernels += strf("%s%s %s", kernels.empty() ? "" : ", ", n.kernel.c_str(), format_bytes((double)n.bytes).c_str());
    if (!kernels.empty()) lines.push_back("  fused attention kernels: " + kernels);
    lines.push_back(f.fused_refusal.empty() ? "  attention: the fused path fits (--attention " + attention + ")"
                                            : "  attention: the fused path does not fit: " + f.fused_refusal);
    if (!f.refusal.empty()) lines.push_back("  refused: " + f.refusal);
    return lines;
}

}  // namespace gpu
