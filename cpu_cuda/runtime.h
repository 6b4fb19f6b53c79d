// cpu_cuda/runtime.h: the CUDA runtime API the project calls, on the CPU. The functions
// are the toolkit's own declarations (cuda_runtime_api.h), defined here.
//
// Streams run their work in order. Kernels, memsets and most copies run at once, within
// their call; collectives, and what is enqueued behind one, run on the stream's worker
// (streams.h), so cudaStreamQuery can answer "not ready". Events are host timestamps. Launches and copies are checked as a GPU would check them, and more:
// copies and memsets must stay inside one allocation (a GPU might silently corrupt memory
// instead), and the error codes are CUDA's.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>

#include "exec.h"
#include "memory.h"
#include "settings.h"
#include "streams.h"

// The toolkit declares these handle types but leaves them opaque: the runtime defines them.
struct CUstream_st {
    unsigned flags;
};
struct CUevent_st {
    double ms;  // host time of the last record, in ms
    bool recorded;
    std::atomic<int> pending{0};  // records queued behind a stream's work, not yet done
};

namespace cpu_cuda {

inline std::mutex& handles_mutex() {
    static std::mutex m;
    return m;
}
inline std::set<const void*>& live_handles() {  // streams and events not yet destroyed
    static std::set<const void*> s;
    return s;
}
inline bool valid_stream(cudaStream_t s) {
    if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return true;
    std::lock_guard<std::mutex> lock(handles_mutex());
    return live_handles().count(s) > 0;
}
inline thread_local int current_device = 0;

inline double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The device every process sees: compute capability 9.0 (the architecture the kernels are
// written for), the launch limits of real hardware, and the runtime's pool as its SMs.
inline cudaDeviceProp device_properties(int device) {
    cudaDeviceProp p;
    memset(&p, 0, sizeof p);
    snprintf(p.name, sizeof p.name, "cpu_cuda (CUDA on the CPU, %d threads)", pool().size());
    p.totalGlobalMem = memory().capacity();
    p.sharedMemPerBlock = DEFAULT_DYNAMIC_SMEM;
    p.sharedMemPerBlockOptin = MAX_DYNAMIC_SMEM_OPTIN;
    p.sharedMemPerMultiprocessor = 228 << 10;
    p.regsPerBlock = 65536;
    p.warpSize = 32;
    p.maxThreadsPerBlock = (int)MAX_THREADS_PER_BLOCK;
    p.maxThreadsDim[0] = 1024, p.maxThreadsDim[1] = 1024, p.maxThreadsDim[2] = 64;
    p.maxGridSize[0] = 2147483647, p.maxGridSize[1] = 65535, p.maxGridSize[2] = 65535;
    p.totalConstMem = 64 << 10;
    p.major = 9, p.minor = 0;
    p.multiProcessorCount = pool().size();
    p.maxThreadsPerMultiProcessor = 2048;
    p.unifiedAddressing = 1;
    p.pciBusID = device + 1;
    return p;
}

// cudaMemcpy, and cudaMemcpyAsync on `stream`. An asynchronous copy between device and
// pinned memory (cudaMallocHost) on a stream with queued work is queued behind it (streams.h).
// Any other copy waits for the queued work and runs before it returns: as CUDA documents
// (API synchronization behavior), a copy from device memory to pageable host memory returns
// only once it is complete, so it waits for the stream's earlier work, a collective included.
inline cudaError_t copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind, const char* call,
                        bool async = false, cudaStream_t stream = nullptr) {
    if (count == 0) return cudaSuccess;
    if (!dst || !src) return set_error(cudaErrorInvalidValue);
    if (kind == cudaMemcpyDefault)
        kind = memory().find(src) ? (memory().find(dst) ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                                  : (memory().find(dst) ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
    bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return set_error(cudaErrorInvalidMemcpyDirection);
    if ((src_device && !check_range(src, count, call, "source")) ||
        (dst_device && !check_range(dst, count, call, "destination")))
        return set_error(cudaErrorInvalidValue);
    const bool pageable = !memory().find(src, count) || !memory().find(dst, count);
    if (async && !pageable && stream_busy(stream)) {
        stream_queue(stream).enqueue([=] {
            DeviceAccess access;
            memmove(dst, src, count);
        });
        return cudaSuccess;
    }
    DeviceAccess access;
    memmove(dst, src, count);
    return cudaSuccess;
}

inline cudaError_t fill(void* p, int value, size_t count, const char* call) {
    if (count == 0) return cudaSuccess;
    DeviceAccess access;
    if (!check_range(p, count, call, "destination")) return set_error(cudaErrorInvalidValue);
    memset(p, value, count);
    return cudaSuccess;
}

}  // namespace cpu_cuda

// ----------------------------------------------------------------------------
// Errors

inline cudaError_t cudaGetLastError() {
    cudaError_t e = cpu_cuda::last_error;
    cpu_cuda::last_error = cudaSuccess;
    return e;
}
inline cudaError_t cudaPeekAtLastError() { return cpu_cuda::last_error; }

inline const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
#define CPU_CUDA_NAME(x) \
    case x: return #x;
        CPU_CUDA_NAME(cudaSuccess)
        CPU_CUDA_NAME(cudaErrorInvalidValue)
        CPU_CUDA_NAME(cudaErrorMemoryAllocation)
        CPU_CUDA_NAME(cudaErrorInvalidConfiguration)
        CPU_CUDA_NAME(cudaErrorInvalidMemcpyDirection)
        CPU_CUDA_NAME(cudaErrorInvalidDevice)
        CPU_CUDA_NAME(cudaErrorInvalidDevicePointer)
        CPU_CUDA_NAME(cudaErrorInvalidResourceHandle)
        CPU_CUDA_NAME(cudaErrorNotReady)
        CPU_CUDA_NAME(cudaErrorIllegalAddress)
        CPU_CUDA_NAME(cudaErrorLaunchFailure)
        CPU_CUDA_NAME(cudaErrorLaunchOutOfResources)
        CPU_CUDA_NAME(cudaErrorNoDevice)
        CPU_CUDA_NAME(cudaErrorNotSupported)
#undef CPU_CUDA_NAME
        default: return "cudaErrorUnknown";
    }
}
inline const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {  // CUDA's own wording
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorInvalidDevicePointer: return "invalid device pointer";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorNotReady: return "device not ready";
        case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
        case cudaErrorLaunchFailure: return "unspecified launch failure";
        case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        case cudaErrorNotSupported: return "operation not supported";
        default: return "unrecognized error code";
    }
}

// ----------------------------------------------------------------------------
// Devices

inline cudaError_t cudaGetDeviceCount(int* count) {
    if (!count) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *count = cpu_cuda::settings().devices;
    return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= cpu_cuda::settings().devices) return cpu_cuda::set_error(cudaErrorInvalidDevice);
    cpu_cuda::current_device = device;
    return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* device) {
    if (!device) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *device = cpu_cuda::current_device;
    return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (!prop) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (device < 0 || device >= cpu_cuda::settings().devices) return cpu_cuda::set_error(cudaErrorInvalidDevice);
    *prop = cpu_cuda::device_properties(device);
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    if (!value) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (device < 0 || device >= cpu_cuda::settings().devices) return cpu_cuda::set_error(cudaErrorInvalidDevice);
    cudaDeviceProp p = cpu_cuda::device_properties(device);
    switch (attr) {
        case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)p.sharedMemPerBlock; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)p.sharedMemPerBlockOptin; break;
        case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
        case cudaDevAttrWarpSize: *value = p.warpSize; break;
        case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
        case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
        case cudaDevAttrMaxThreadsPerMultiProcessor: *value = p.maxThreadsPerMultiProcessor; break;
        default: return cpu_cuda::set_error(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int device) {
    if (!id || len <= 0) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (device < 0 || device >= cpu_cuda::settings().devices) return cpu_cuda::set_error(cudaErrorInvalidDevice);
    snprintf(id, (size_t)len, "0000:%02x:00.0", device + 1);
    return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {  // what streams have queued (streams.h); the rest is done
    cpu_cuda::settle();
    return cudaSuccess;
}
inline cudaError_t cudaDeviceReset() { return cudaSuccess; }
inline cudaError_t cudaRuntimeGetVersion(int* v) {
    if (!v) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}
inline cudaError_t cudaDriverGetVersion(int* v) { return cudaRuntimeGetVersion(v); }

// ----------------------------------------------------------------------------
// Memory

inline cudaError_t cudaMalloc(void** p, size_t bytes) {
    if (!p) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *p = nullptr;
    if (bytes == 0) return cudaSuccess;
    cpu_cuda::DeviceAccess access;  // (CPU_CUDA_PROTECT=1: closed with the rest when the call ends)
    cpu_cuda::install_fault_handler();
    *p = cpu_cuda::memory().allocate(bytes, true);
    return *p ? cudaSuccess : cpu_cuda::set_error(cudaErrorMemoryAllocation);
}
inline cudaError_t cudaFree(void* p) {
    if (!p) return cudaSuccess;
    cpu_cuda::settle();  // as CUDA's cudaFree: queued work may still use it
    if (cpu_cuda::memory().release(p, true)) return cudaSuccess;
    fprintf(stderr, "cpu_cuda: cudaFree(%p): not the start of a live device allocation (%s)\n", p,
            cpu_cuda::memory().describe(p).c_str());
    return cpu_cuda::set_error(cudaErrorInvalidValue);
}
inline cudaError_t cudaMallocHost(void** p, size_t bytes) {
    if (!p) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *p = cpu_cuda::memory().allocate(std::max<size_t>(bytes, 1), false);
    return *p ? cudaSuccess : cpu_cuda::set_error(cudaErrorMemoryAllocation);
}
inline cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) { return cudaMallocHost(p, bytes); }
inline cudaError_t cudaFreeHost(void* p) {
    if (!p) return cudaSuccess;
    cpu_cuda::settle();
    if (cpu_cuda::memory().release(p, false)) return cudaSuccess;
    fprintf(stderr, "cpu_cuda: cudaFreeHost(%p): not pinned host memory from cudaMallocHost\n", p);
    return cpu_cuda::set_error(cudaErrorInvalidValue);
}
inline cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
    if (!free_bytes || !total) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *total = cpu_cuda::memory().capacity();
    *free_bytes = *total - std::min<size_t>(*total, cpu_cuda::memory().reported_in_use());
    return cudaSuccess;
}

inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
    return cpu_cuda::copy(dst, src, count, kind, "cudaMemcpy");
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                   cudaStream_t stream) {
    if (!cpu_cuda::valid_stream(stream)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    return cpu_cuda::copy(dst, src, count, kind, "cudaMemcpyAsync", true, stream);
}
inline cudaError_t cudaMemset(void* p, int value, size_t count) {
    return cpu_cuda::fill(p, value, count, "cudaMemset");
}
inline cudaError_t cudaMemsetAsync(void* p, int value, size_t count, cudaStream_t stream) {
    if (!cpu_cuda::valid_stream(stream)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    return cpu_cuda::fill(p, value, count, "cudaMemsetAsync");
}

// ----------------------------------------------------------------------------
// Streams and events

inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
    if (!s) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *s = new CUstream_st{flags};
    std::lock_guard<std::mutex> lock(cpu_cuda::handles_mutex());
    cpu_cuda::live_handles().insert(*s);
    return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (cpu_cuda::valid_stream(s)) cpu_cuda::stream_queue(s).drain();
    std::lock_guard<std::mutex> lock(cpu_cuda::handles_mutex());
    if (!cpu_cuda::live_handles().erase(s)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    delete s;
    return cudaSuccess;
}
// Only queued work (streams.h) can still be running when a call has returned.
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (!cpu_cuda::valid_stream(s)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    cpu_cuda::stream_queue(s).drain();
    return cudaSuccess;
}
inline cudaError_t cudaStreamQuery(cudaStream_t s) {
    if (!cpu_cuda::valid_stream(s)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    return cpu_cuda::stream_busy(s) ? cudaErrorNotReady : cudaSuccess;  // (not an error: not recorded)
}

inline bool cpu_cuda_valid_event(cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(cpu_cuda::handles_mutex());
    return e && cpu_cuda::live_handles().count(e);
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
    if (!e) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *e = new CUevent_st{0.0, false, {}};
    std::lock_guard<std::mutex> lock(cpu_cuda::handles_mutex());
    cpu_cuda::live_handles().insert(*e);
    return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (cpu_cuda_valid_event(e) && e->pending) cpu_cuda::settle();  // its record is still queued
    std::lock_guard<std::mutex> lock(cpu_cuda::handles_mutex());
    if (!cpu_cuda::live_handles().erase(e)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    delete e;
    return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (!cpu_cuda_valid_event(e) || !cpu_cuda::valid_stream(s))
        return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    if (cpu_cuda::stream_busy(s)) {  // the event completes when the stream's queued work has
        e->pending++;
        cpu_cuda::stream_queue(s).enqueue([e] {
            e->ms = cpu_cuda::now_ms(), e->recorded = true;
            e->pending--;
        });
        return cudaSuccess;
    }
    e->ms = cpu_cuda::now_ms(), e->recorded = true;
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!cpu_cuda_valid_event(e)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    if (e->pending) cpu_cuda::settle();
    return cudaSuccess;
}
inline cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (!cpu_cuda_valid_event(e)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    return e->pending ? cudaErrorNotReady : cudaSuccess;
}
// The stream's later work runs after the event's: the host waits for it here (more than CUDA
// waits, never less).
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
    if (!cpu_cuda::valid_stream(s) || !cpu_cuda_valid_event(e))
        return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    if (e->pending) cpu_cuda::settle();
    return cudaSuccess;
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (!ms) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (!cpu_cuda_valid_event(start) || !cpu_cuda_valid_event(end))
        return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    if (start->pending || end->pending) return cudaErrorNotReady;
    if (!start->recorded || !end->recorded) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    *ms = (float)(end->ms - start->ms);
    return cudaSuccess;
}

// ----------------------------------------------------------------------------
// Kernel attributes

inline cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
    if (!func) return cpu_cuda::set_error(cudaErrorInvalidDeviceFunction);
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > cpu_cuda::MAX_DYNAMIC_SMEM_OPTIN) return cpu_cuda::set_error(cudaErrorInvalidValue);
        std::lock_guard<std::mutex> lock(cpu_cuda::smem_limits_mutex());
        cpu_cuda::smem_limits()[func] = (size_t)value;
    }
    return cudaSuccess;  // other attributes (carveout, cluster sizes) mean nothing here
}
// The C++ form, for a kernel itself rather than its address (cuda_runtime.h has it for nvcc only)
template <class T>
inline cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute((const void*)entry, attr, value);
}

// ----------------------------------------------------------------------------
// CUDA graphs: not here. Each call says so once and answers cudaErrorNotSupported, rather
// than leaving a program that uses them to a link error.

namespace cpu_cuda {
inline cudaError_t graphs_not_supported(const char* call) {
    static std::once_flag once;
    std::call_once(once, [call] {
        fprintf(stderr,
                "cpu_cuda: %s: CUDA graphs are not supported on the CPU runtime (cudaErrorNotSupported); launch "
                "the kernels directly\n",
                call);
    });
    return set_error(cudaErrorNotSupported);
}
}  // namespace cpu_cuda
inline cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) {
    return cpu_cuda::graphs_not_supported("cudaStreamBeginCapture");
}
inline cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t* graph) {
    if (graph) *graph = nullptr;
    return cpu_cuda::graphs_not_supported("cudaStreamEndCapture");
}
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t, unsigned long long) {
    if (exec) *exec = nullptr;
    return cpu_cuda::graphs_not_supported("cudaGraphInstantiate");
}
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t) {
    return cpu_cuda::graphs_not_supported("cudaGraphLaunch");
}
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t) { return cudaSuccess; }  // (nothing was made)
inline cudaError_t cudaGraphDestroy(cudaGraph_t) { return cudaSuccess; }
