// host/device_limits.h: the launch limits of the GPUs the trainer supports, by name, for the
// planner (--dry-run --device NAME) to say which kernel variants a run would take there
// without that GPU. On a GPU the trainer reads the same figures from cudaGetDeviceProperties.
//
// Source: CUDA C++ Programming Guide, "Compute Capabilities", table "Technical Specifications
// per Compute Capability": shared memory a block may opt in to (64 KB on 7.5, 96 KB on 7.0,
// 99 KB on 8.6 and 8.9, 163 KB on 8.0, 227 KB on 9.0), 65,535 blocks in a grid's y and z,
// 1024 threads and 64 K 32-bit registers per block.
#pragma once
#include <cstddef>
#include <string>

struct DeviceLimits {
    std::string name;          // as printed
    int major = 0, minor = 0;  // compute capability; 0 = unknown (no device, none named)
    size_t smem_optin = 0;     // dynamic shared memory one block may have after cudaFuncSetAttribute
    int max_grid_y = 65535;
    int max_threads_per_block = 1024;
    int regs_per_block = 65536;

    bool known() const { return major > 0; }
    int sm() const { return 10 * major + minor; }
};

struct NamedDeviceLimits {
    const char* key;  // as --device takes it
    const char* name;
    int major, minor, smem_optin_kb;
};
// clang-format off
inline const NamedDeviceLimits NAMED_DEVICE_LIMITS[] = {
    {"t4", "Tesla T4", 7, 5, 64},
    {"v100", "Tesla V100", 7, 0, 96},
    {"a10", "NVIDIA A10", 8, 6, 99},
    {"rtx4090", "GeForce RTX 4090", 8, 9, 99},
    {"a100", "A100", 8, 0, 163},
    {"a100-sxm", "A100 SXM", 8, 0, 163},
    {"h100", "H100", 9, 0, 227},
    {"h100-sxm", "H100 SXM", 9, 0, 227},
    {"h100-pcie", "H100 PCIe", 9, 0, 227},
    {"h200", "H200", 9, 0, 227},
};
// clang-format on

// The limits of a GPU named as --device names it; unknown() when the name is not one of them.
inline DeviceLimits device_limits_named(const std::string& key) {
    DeviceLimits d;
    for (const NamedDeviceLimits& n : NAMED_DEVICE_LIMITS)
        if (key == n.key) d.name = n.name, d.major = n.major, d.minor = n.minor, d.smem_optin = (size_t)n.smem_optin_kb << 10;
    return d;
}
