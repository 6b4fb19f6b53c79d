// dev/cuda/device_array.h: a device array for checking kernels, shared by the kernel
// workbenches (common.h) and the GPU tests (test/gpu_trainer/trainer.cu). Include train_gpt.cu first.
#pragma once
#include <vector>

// A device array: a copy of a host vector, or n elements poisoned with 0xFF bytes (NaN).
template <class T>
struct DevArray {
    gpu::DeviceBuffer<T> buf;
    explicit DevArray(const std::vector<T>& host) {
        buf.alloc(host.size());
        CUDA_CHECK(cudaMemcpy(buf.ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
    explicit DevArray(size_t n) {
        buf.alloc(n);
        poison();
    }
    void poison() { CUDA_CHECK(cudaMemset(buf.ptr, 0xFF, buf.count * sizeof(T))); }
    void set(const std::vector<T>& host) {
        CUDA_CHECK(cudaMemcpy(buf.ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
    T* ptr() { return buf.ptr; }
    std::vector<T> host() const {
        CUDA_CHECK(cudaDeviceSynchronize());  // the kernel may still be running
        std::vector<T> v(buf.count);
        CUDA_CHECK(cudaMemcpy(v.data(), buf.ptr, v.size() * sizeof(T), cudaMemcpyDeviceToHost));
        return v;
    }
};
