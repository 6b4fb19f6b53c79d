// cpu_cuda/device_presets.h: the GPU the runtime says it is. CPU_CUDA_DEVICE=t4|v100|a10|
// rtx4090|a100|h100 (default h100) picks one row of the table below, and cudaGetDeviceProperties
// and cudaDeviceGetAttribute (runtime.h) answer that GPU's figures, so a program that sizes its
// launches from the device (blocks per SM, shared memory per block, registers, L2) gets what it
// would get on that GPU. The table is one place that other parts of the runtime can query
// (cpu_cuda::device_preset()), e.g. to refuse a launch the chosen GPU would refuse.
//
// Sources of the figures:
//   - CUDA C++ Programming Guide, "Compute Capabilities", table "Technical Specifications per
//     Compute Capability" (threads, blocks and warps per SM, 32-bit registers per SM and per
//     block, shared memory per SM and the opt-in maximum per block, constant memory, grid and
//     block limits, texture and surface limits) and "Shared Memory" per architecture (1 KB
//     reserved per block from compute capability 8.0 on).
//   - NVIDIA's product pages and datasheets for the SM count, memory size, bus width, clocks and
//     L2: Tesla T4 datasheet; Tesla V100 datasheet (SXM2 32 GB) and the Volta whitepaper; A10
//     datasheet; Ada Lovelace architecture whitepaper (GeForce RTX 4090); A100 datasheet and
//     Ampere whitepaper (SXM4 80 GB); H100 datasheet and Hopper whitepaper (SXM5 80 GB).
//     Clocks are the boost clocks, in kHz as CUDA reports them; the memory clock is the one
//     deviceQuery prints (the data rate per pin divided by the transfers per clock).
// Figures no public table gives (copy engines) are marked where they are set.
//
// Two figures are the runtime's own unless CPU_CUDA_DEVICE is set:
//   - multiProcessorCount is the number of OS threads that run blocks (CPU_CUDA_THREADS): the
//     trainer sizes some grids from it (gpu/adamw.cuh: 8 blocks per SM for the gradient norm),
//     and 132 SMs would change those grids, the order of their sums, and the speed, of every
//     existing run and test. With CPU_CUDA_DEVICE set it is the GPU's SM count.
//   - totalGlobalMem is always what cudaMalloc can really use (CPU_CUDA_MEMORY, else RAM), so
//     that it agrees with cudaMemGetInfo; set CPU_CUDA_MEMORY=80GB to match an H100.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace cpu_cuda {

struct DevicePreset {
    const char* key;   // the CPU_CUDA_DEVICE value
    const char* name;  // as the GPU reports itself
    int major, minor;
    int sms;                        // multiprocessors
    int max_threads_per_sm, max_blocks_per_sm;
    int smem_per_sm;                // bytes of shared memory per SM (the largest carveout)
    int smem_per_block_optin;       // the most one block may use after cudaFuncSetAttribute
    int reserved_smem_per_block;    // taken by the system from each block's share (cc >= 8.0: 1 KB)
    int regs_per_sm, regs_per_block;
    uint64_t memory_bytes;          // the board's memory, nominal
    int clock_khz, memory_clock_khz, memory_bus_bits;
    int l2_bytes;
    int fp32_per_fp64;              // single-to-double precision throughput ratio
    int pci_device_id;              // the PCI device id of the board's GPU
    int copy_engines;               // asyncEngineCount (not in a public table: 2 = copies both ways overlap kernels)

    unsigned pci_id() const { return ((unsigned)pci_device_id << 16) | 0x10de; }  // device id, NVIDIA's vendor id

    // The figures every preset shares (compute capability 7.0 to 9.0).
    static constexpr int max_threads_per_block = 1024;
    static constexpr int max_block_dim[3] = {1024, 1024, 64};
    static constexpr int max_grid_dim[3] = {2147483647, 65535, 65535};
    static constexpr int smem_per_block = 48 << 10;  // without opting in
    static constexpr int const_memory = 64 << 10;
    static constexpr int warp_size = 32;
};

// clang-format off
inline constexpr DevicePreset device_presets[] = {
    // key      name                               cc    SMs  thr/SM blk/SM smem/SM     optin/block  resv  regs/SM regs/blk memory         clock  memclk bus   L2               fp64  pci    copy
    {"t4",      "Tesla T4",                        7, 5,  40, 1024, 16,  64 << 10,  64 << 10,   0,    65536, 65536, 16ull << 30, 1590000, 5001000,  256,  4 << 20,  32, 0x1eb8, 2},
    {"v100",    "Tesla V100-SXM2-32GB",            7, 0,  80, 2048, 32,  96 << 10,  96 << 10,   0,    65536, 65536, 32ull << 30, 1530000,  877000, 4096,  6 << 20,   2, 0x1db5, 2},
    {"a10",     "NVIDIA A10",                      8, 6,  72, 1536, 16, 100 << 10,  99 << 10,   1024, 65536, 65536, 24ull << 30, 1695000, 6251000,  384,  6 << 20,  64, 0x2236, 2},
    {"rtx4090", "NVIDIA GeForce RTX 4090",         8, 9, 128, 1536, 24, 100 << 10,  99 << 10,   1024, 65536, 65536, 24ull << 30, 2520000, 10501000, 384, 72 << 20,  64, 0x2684, 2},
    {"a100",    "NVIDIA A100-SXM4-80GB",           8, 0, 108, 2048, 32, 164 << 10, 163 << 10,   1024, 65536, 65536, 80ull << 30, 1410000, 1593000, 5120, 40 << 20,   2, 0x20b2, 2},
    {"h100",    "NVIDIA H100 80GB HBM3",           9, 0, 132, 2048, 32, 228 << 10, 227 << 10,   1024, 65536, 65536, 80ull << 30, 1980000, 2619000, 5120, 50 << 20,   2, 0x2330, 2},
};
// clang-format on

// The preset CPU_CUDA_DEVICE names (h100 when unset); an unknown name stops the program with
// the list, as the other CPU_CUDA_* settings do.
inline const DevicePreset* find_device_preset(const char* key) {
    for (const DevicePreset& p : device_presets)
        if (strcmp(p.key, key) == 0) return &p;
    return nullptr;
}
inline bool device_preset_chosen() {  // CPU_CUDA_DEVICE is set: every figure is the GPU's
    static const bool chosen = getenv("CPU_CUDA_DEVICE") != nullptr;
    return chosen;
}
inline const DevicePreset& device_preset() {
    static const DevicePreset* p = [] {
        const char* v = getenv("CPU_CUDA_DEVICE");
        if (!v) return find_device_preset("h100");
        const DevicePreset* found = find_device_preset(v);
        if (!found) {
            fprintf(stderr, "cpu_cuda: CPU_CUDA_DEVICE='%s' is not valid: expected one of", v);
            for (const DevicePreset& q : device_presets) fprintf(stderr, " %s", q.key);
            fprintf(stderr, "\n");
            exit(2);
        }
        return found;
    }();
    return *p;
}

}  // namespace cpu_cuda
