// cpu_cuda/runtime.h: the CUDA runtime API the project calls, on the CPU. The functions
// are the toolkit's own declarations (cuda_runtime_api.h), defined here.
//
// Streams run their work in order, each independent of the others (streams.h): kernels,
// memsets and most copies run at once, within their call, on a stream with nothing queued;
// collectives, host functions, waits on events still to come, and what is enqueued behind
// them run on the stream's worker, so cudaStreamQuery can answer "not ready" and the host
// never waits for one stream to go on with another. Events are host timestamps. Launches and copies are checked as a GPU would check them, and more:
// copies and memsets must stay inside one allocation (a GPU might silently corrupt memory
// instead), and the error codes are CUDA's.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>

#include "device_presets.h"
#include "exec.h"
#include "memory.h"
#include "settings.h"
#include "streams.h"

#include <cuda_profiler_api.h>

// The toolkit declares these handle types but leaves them opaque: the runtime defines them.
struct CUstream_st {
    unsigned flags;
};
namespace cpu_cuda {
// How far an event's records have come: the count of records made, and the number of the last
// one done. Shared with the waits queued on streams (cudaStreamWaitEvent), which may outlive
// the event (CUDA lets a program destroy an event that a stream still waits for).
struct EventClock {
    std::atomic<uint64_t> made{0}, done{0};
    static std::mutex& mutex() {
        static std::mutex m;
        return m;
    }
    static std::condition_variable& changed() {
        static std::condition_variable c;
        return c;
    }
    void finish(uint64_t record) {
        {
            std::lock_guard<std::mutex> lock(mutex());
            if (record > done) done = record;
        }
        changed().notify_all();
    }
    void wait_for(uint64_t record) {
        std::unique_lock<std::mutex> lock(mutex());
        changed().wait(lock, [&] { return done >= record; });
    }
};
}  // namespace cpu_cuda
struct CUevent_st {
    std::atomic<double> ms{0.0};  // host time of the last record, in ms
    std::atomic<bool> recorded{false};
    std::atomic<int> pending{0};  // records queued behind a stream's work, not yet done
    std::shared_ptr<cpu_cuda::EventClock> clock = std::make_shared<cpu_cuda::EventClock>();
    CUgraph_st* captured_in = nullptr;           // recorded on a capturing stream: that capture's graph,
    std::vector<CUgraphNode_st*> captured_nodes;  // and the nodes a stream waiting on it then depends on
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

// The device every process sees: the GPU of CPU_CUDA_DEVICE (device_presets.h, an H100 by
// default), with the runtime's pool as its SMs unless CPU_CUDA_DEVICE is set, and the memory
// cudaMalloc can really use.
inline int preset_sm_count() { return device_preset_chosen() ? device_preset().sms : pool().size(); }
inline cudaDeviceProp device_properties(int device) {
    const DevicePreset& d = device_preset();
    cudaDeviceProp p;
    memset(&p, 0, sizeof p);
    if (device_preset_chosen())
        snprintf(p.name, sizeof p.name, "%s (cpu_cuda: CUDA on the CPU, %d threads)", d.name, pool().size());
    else
        snprintf(p.name, sizeof p.name, "cpu_cuda (CUDA on the CPU, %d threads)", pool().size());
    for (int i = 0; i < 16; i++) p.uuid.bytes[i] = (char)(0xc0 + i + 16 * device);
    p.totalGlobalMem = memory().capacity();
    p.sharedMemPerBlock = DevicePreset::smem_per_block;
    p.regsPerBlock = d.regs_per_block;
    p.warpSize = DevicePreset::warp_size;
    p.memPitch = 2147483647;
    p.maxThreadsPerBlock = DevicePreset::max_threads_per_block;
    for (int i = 0; i < 3; i++) p.maxThreadsDim[i] = DevicePreset::max_block_dim[i], p.maxGridSize[i] = DevicePreset::max_grid_dim[i];
    p.totalConstMem = DevicePreset::const_memory;
    p.major = d.major, p.minor = d.minor;
    p.textureAlignment = 512, p.texturePitchAlignment = 32, p.surfaceAlignment = 512;
    p.multiProcessorCount = preset_sm_count();
    p.canMapHostMemory = 1;
    // texture and surface limits (the Programming Guide's table; the runtime has no textures)
    p.maxTexture1D = 131072, p.maxTexture1DMipmap = 32768;
    p.maxTexture2D[0] = 131072, p.maxTexture2D[1] = 65536;
    p.maxTexture2DMipmap[0] = p.maxTexture2DMipmap[1] = 32768;
    p.maxTexture2DLinear[0] = 131072, p.maxTexture2DLinear[1] = 65000, p.maxTexture2DLinear[2] = 2097120;
    p.maxTexture2DGather[0] = p.maxTexture2DGather[1] = 32768;
    p.maxTexture3D[0] = p.maxTexture3D[1] = p.maxTexture3D[2] = 16384;
    p.maxTexture3DAlt[0] = p.maxTexture3DAlt[1] = 8192, p.maxTexture3DAlt[2] = 32768;
    p.maxTextureCubemap = 32768;
    p.maxTexture1DLayered[0] = 32768, p.maxTexture1DLayered[1] = 2048;
    p.maxTexture2DLayered[0] = p.maxTexture2DLayered[1] = 32768, p.maxTexture2DLayered[2] = 2048;
    p.maxTextureCubemapLayered[0] = 32768, p.maxTextureCubemapLayered[1] = 2046;
    p.maxSurface1D = 32768;
    p.maxSurface2D[0] = 131072, p.maxSurface2D[1] = 65536;
    p.maxSurface3D[0] = p.maxSurface3D[1] = p.maxSurface3D[2] = 16384;
    p.maxSurface1DLayered[0] = 32768, p.maxSurface1DLayered[1] = 2048;
    p.maxSurface2DLayered[0] = p.maxSurface2DLayered[1] = 32768, p.maxSurface2DLayered[2] = 2048;
    p.maxSurfaceCubemap = 32768;
    p.maxSurfaceCubemapLayered[0] = 32768, p.maxSurfaceCubemapLayered[1] = 2046;
    p.concurrentKernels = 1;
    p.pciBusID = device + 1, p.pciDeviceID = 0, p.pciDomainID = 0;
    p.asyncEngineCount = d.copy_engines;
    p.unifiedAddressing = 1;
    p.memoryBusWidth = d.memory_bus_bits;
    p.l2CacheSize = d.l2_bytes;
    // cc >= 8.0 can set aside up to 3/4 of L2 for persisting accesses (A100: 30 of 40 MB)
    p.persistingL2CacheMaxSize = d.major >= 8 ? d.l2_bytes / 4 * 3 : 0;
    p.maxThreadsPerMultiProcessor = d.max_threads_per_sm;
    p.streamPrioritiesSupported = 1;
    p.globalL1CacheSupported = 1, p.localL1CacheSupported = 1;
    p.sharedMemPerMultiprocessor = (size_t)d.smem_per_sm;
    p.regsPerMultiprocessor = d.regs_per_sm;
    p.managedMemory = 1;
    p.computePreemptionSupported = 1;
    p.cooperativeLaunch = 1;
    p.sharedMemPerBlockOptin = (size_t)d.smem_per_block_optin;
    p.maxBlocksPerMultiProcessor = d.max_blocks_per_sm;
    p.accessPolicyMaxWindowSize = d.major >= 8 ? 134213632 : 0;  // (what an A100 or H100 reports)
    p.reservedSharedMemPerBlock = (size_t)d.reserved_smem_per_block;
    p.hostRegisterSupported = 1;
    p.memoryPoolsSupported = 1;
    p.clusterLaunch = d.major >= 9;
#if CUDART_VERSION >= 13000  // (fields of recent toolkits)
    p.deviceNumaId = -1, p.hostNumaId = -1;
    p.gpuPciDeviceID = d.pci_id();
#endif
#if CUDART_VERSION < 13000  // fields CUDA 13 removed from cudaDeviceProp (the attributes remain)
    p.clockRate = d.clock_khz;
    p.memoryClockRate = d.memory_clock_khz;
    p.deviceOverlap = 1;
    p.computeMode = cudaComputeModeDefault;
    p.maxTexture1DLinear = 1 << 27;
    p.cooperativeMultiDeviceLaunch = 1;
    p.singleToDoublePrecisionPerfRatio = d.fp32_per_fp64;
#endif
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
    if (async) {
        if (queue_behind(stream)) {
            if (pageable) {
                stream_queue(stream).drain();
            } else {
                stream_queue(stream).enqueue([=] {
                    DeviceAccess access;
                    memmove(dst, src, count);
                });
                return cudaSuccess;
            }
        }
        DeviceAccess access{DeviceAccess::Ordered{}};
        memmove(dst, src, count);
        return cudaSuccess;
    }
    DeviceAccess access;
    memmove(dst, src, count);
    return cudaSuccess;
}

// cudaMemset, and cudaMemsetAsync on `stream` (queued behind the stream's work, if it has some).
inline cudaError_t fill(void* p, int value, size_t count, const char* call, bool async = false,
                        cudaStream_t stream = nullptr) {
    if (count == 0) return cudaSuccess;
    if (!check_range(p, count, call, "destination")) return set_error(cudaErrorInvalidValue);
    if (async && queue_behind(stream)) {
        stream_queue(stream).enqueue([=] {
            DeviceAccess access;
            memset(p, value, count);
        });
        return cudaSuccess;
    }
    DeviceAccess access{DeviceAccess::Ordered{}, !async};
    memset(p, value, count);
    return cudaSuccess;
}

}  // namespace cpu_cuda

// ----------------------------------------------------------------------------
// Errors

inline cudaError_t cudaGetLastError() {
    if (cpu_cuda::sticky_error != cudaSuccess) return cpu_cuda::sticky();
    cudaError_t e = cpu_cuda::last_error;
    cpu_cuda::last_error = cudaSuccess;
    cudaError_t failed = cpu_cuda::pending_error.exchange(cudaSuccess);  // (reported now, not by the next sync)
    return e != cudaSuccess ? e : failed;
}
inline cudaError_t cudaPeekAtLastError() {
    return cpu_cuda::sticky_error != cudaSuccess ? cpu_cuda::sticky() : cpu_cuda::last_error;
}

// The error codes by number (their values are the toolkit's, stable across versions; numbers,
// so that an older toolkit's headers, without the newest names, still compile), with CUDA's
// names and its own wording. Every enumerator of the toolkit's cudaError (driver_types.h, CUDA
// 13.0) is here; where CUDA's wording was not at hand, the text is a short one written from the
// header's description of the code. Unknown codes answer "unrecognized error code", as CUDA's do.
namespace cpu_cuda {
struct ErrorText {
    int code;
    const char* name;
    const char* text;
};
inline const ErrorText* error_text(cudaError_t e) {
    static const ErrorText table[] = {
        {0, "cudaSuccess", "no error"},
        {1, "cudaErrorInvalidValue", "invalid argument"},
        {2, "cudaErrorMemoryAllocation", "out of memory"},
        {3, "cudaErrorInitializationError", "initialization error"},
        {4, "cudaErrorCudartUnloading", "driver shutting down"},
        {5, "cudaErrorProfilerDisabled", "profiler disabled while using external profiling tool"},
        {6, "cudaErrorProfilerNotInitialized", "profiler not initialized (deprecated)"},
        {7, "cudaErrorProfilerAlreadyStarted", "profiler already started (deprecated)"},
        {8, "cudaErrorProfilerAlreadyStopped", "profiler already stopped (deprecated)"},
        {9, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
        {12, "cudaErrorInvalidPitchValue", "invalid pitch argument"},
        {13, "cudaErrorInvalidSymbol", "invalid device symbol"},
        {16, "cudaErrorInvalidHostPointer", "invalid host pointer"},
        {17, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
        {18, "cudaErrorInvalidTexture", "invalid texture reference"},
        {19, "cudaErrorInvalidTextureBinding", "texture is not bound to a pointer"},
        {20, "cudaErrorInvalidChannelDescriptor", "invalid channel descriptor"},
        {21, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
        {22, "cudaErrorAddressOfConstant", "invalid address of constant"},
        {23, "cudaErrorTextureFetchFailed", "fetch from texture failed"},
        {24, "cudaErrorTextureNotBound", "cannot fetch from a texture that is not bound"},
        {25, "cudaErrorSynchronizationError", "incorrect use of __syncthreads()"},
        {26, "cudaErrorInvalidFilterSetting", "linear filtering not supported for non-float type"},
        {27, "cudaErrorInvalidNormSetting", "read as normalized float not supported for 32-bit non float type"},
        {28, "cudaErrorMixedDeviceExecution", "mixed device execution (deprecated)"},
        {31, "cudaErrorNotYetImplemented", "feature not yet implemented"},
        {32, "cudaErrorMemoryValueTooLarge", "memory value too large (deprecated)"},
        {34, "cudaErrorStubLibrary", "CUDA driver is a stub library"},
        {35, "cudaErrorInsufficientDriver", "CUDA driver version is insufficient for CUDA runtime version"},
        {36, "cudaErrorCallRequiresNewerDriver", "API call is not supported in the installed CUDA driver"},
        {37, "cudaErrorInvalidSurface", "invalid surface reference"},
        {43, "cudaErrorDuplicateVariableName", "duplicate global variable looked up by string name"},
        {44, "cudaErrorDuplicateTextureName", "duplicate texture looked up by string name"},
        {45, "cudaErrorDuplicateSurfaceName", "duplicate surface looked up by string name"},
        {46, "cudaErrorDevicesUnavailable", "CUDA-capable device(s) is/are busy or unavailable"},
        {49, "cudaErrorIncompatibleDriverContext", "incompatible driver context"},
        {52, "cudaErrorMissingConfiguration", "__global__ function call is not configured"},
        {53, "cudaErrorPriorLaunchFailure", "unspecified launch failure in prior launch"},
        {65, "cudaErrorLaunchMaxDepthExceeded", "launch failed because launch would exceed cudaLimitDevRuntimeSyncDepth"},
        {66, "cudaErrorLaunchFileScopedTex", "launch failed because kernel uses unsupported, file-scoped textures (texture objects are supported)"},
        {67, "cudaErrorLaunchFileScopedSurf", "launch failed because kernel uses unsupported, file-scoped surfaces (surface objects are supported)"},
        {68, "cudaErrorSyncDepthExceeded", "cudaDeviceSynchronize failed because caller's grid depth exceeds cudaLimitDevRuntimeSyncDepth"},
        {69, "cudaErrorLaunchPendingCountExceeded", "launch failed because launch would exceed cudaLimitDevRuntimePendingLaunchCount"},
        {98, "cudaErrorInvalidDeviceFunction", "invalid device function"},
        {100, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
        {101, "cudaErrorInvalidDevice", "invalid device ordinal"},
        {102, "cudaErrorDeviceNotLicensed", "device doesn't have valid Grid license"},
        {103, "cudaErrorSoftwareValidityNotEstablished", "integrity checks failed"},
        {127, "cudaErrorStartupFailure", "device init failed"},
        {200, "cudaErrorInvalidKernelImage", "device kernel image is invalid"},
        {201, "cudaErrorDeviceUninitialized", "invalid device context"},
        {205, "cudaErrorMapBufferObjectFailed", "mapping of buffer object failed"},
        {206, "cudaErrorUnmapBufferObjectFailed", "unmapping of buffer object failed"},
        {207, "cudaErrorArrayIsMapped", "array is mapped"},
        {208, "cudaErrorAlreadyMapped", "resource already mapped"},
        {209, "cudaErrorNoKernelImageForDevice", "no kernel image is available for execution on the device"},
        {210, "cudaErrorAlreadyAcquired", "resource already acquired"},
        {211, "cudaErrorNotMapped", "resource not mapped"},
        {212, "cudaErrorNotMappedAsArray", "resource not mapped as array"},
        {213, "cudaErrorNotMappedAsPointer", "resource not mapped as pointer"},
        {214, "cudaErrorECCUncorrectable", "uncorrectable ECC error encountered"},
        {215, "cudaErrorUnsupportedLimit", "limit is not supported on this architecture"},
        {216, "cudaErrorDeviceAlreadyInUse", "exclusive-thread device already in use by a different thread"},
        {217, "cudaErrorPeerAccessUnsupported", "peer access is not supported between these two devices"},
        {218, "cudaErrorInvalidPtx", "a PTX JIT compilation failed"},
        {219, "cudaErrorInvalidGraphicsContext", "invalid OpenGL or DirectX context"},
        {220, "cudaErrorNvlinkUncorrectable", "uncorrectable NVLink error detected during the execution"},
        {221, "cudaErrorJitCompilerNotFound", "PTX JIT compiler library not found"},
        {222, "cudaErrorUnsupportedPtxVersion", "the provided PTX was compiled with an unsupported toolchain."},
        {223, "cudaErrorJitCompilationDisabled", "PTX JIT compilation was disabled"},
        {224, "cudaErrorUnsupportedExecAffinity", "the provided execution affinity is not supported by the device"},
        {225, "cudaErrorUnsupportedDevSideSync", "the PTX JIT compiled code contains an unsupported call to cudaDeviceSynchronize"},
        {226, "cudaErrorContained", "an exception was contained by the GPU's error containment"},
        {300, "cudaErrorInvalidSource", "device kernel image is invalid"},
        {301, "cudaErrorFileNotFound", "file not found"},
        {302, "cudaErrorSharedObjectSymbolNotFound", "shared object symbol not found"},
        {303, "cudaErrorSharedObjectInitFailed", "shared object initialization failed"},
        {304, "cudaErrorOperatingSystem", "OS call failed or operation not supported on this OS"},
        {400, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
        {401, "cudaErrorIllegalState", "the operation cannot be performed in the present state"},
        {402, "cudaErrorLossyQuery", "attempted introspection would discard important information"},
        {500, "cudaErrorSymbolNotFound", "named symbol not found"},
        {600, "cudaErrorNotReady", "device not ready"},
        {700, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
        {701, "cudaErrorLaunchOutOfResources", "too many resources requested for launch"},
        {702, "cudaErrorLaunchTimeout", "the launch timed out and was terminated"},
        {703, "cudaErrorLaunchIncompatibleTexturing", "launch uses incompatible texturing mode"},
        {704, "cudaErrorPeerAccessAlreadyEnabled", "peer access is already enabled"},
        {705, "cudaErrorPeerAccessNotEnabled", "peer access has not been enabled"},
        {708, "cudaErrorSetOnActiveProcess", "cannot set while device is active in this process"},
        {709, "cudaErrorContextIsDestroyed", "context is destroyed"},
        {710, "cudaErrorAssert", "device-side assert triggered"},
        {711, "cudaErrorTooManyPeers", "peer mapping resources exhausted"},
        {712, "cudaErrorHostMemoryAlreadyRegistered", "part or all of the requested memory range is already mapped"},
        {713, "cudaErrorHostMemoryNotRegistered", "pointer does not correspond to a registered memory region"},
        {714, "cudaErrorHardwareStackError", "hardware stack error"},
        {715, "cudaErrorIllegalInstruction", "an illegal instruction was encountered"},
        {716, "cudaErrorMisalignedAddress", "misaligned address"},
        {717, "cudaErrorInvalidAddressSpace", "operation not supported on global/shared address space"},
        {718, "cudaErrorInvalidPc", "invalid program counter"},
        {719, "cudaErrorLaunchFailure", "unspecified launch failure"},
        {720, "cudaErrorCooperativeLaunchTooLarge", "too many blocks in cooperative launch"},
        {721, "cudaErrorTensorMemoryLeak", "tensor memory not completely freed when the kernel exited"},
        {800, "cudaErrorNotPermitted", "operation not permitted"},
        {801, "cudaErrorNotSupported", "operation not supported"},
        {802, "cudaErrorSystemNotReady", "system not yet initialized"},
        {803, "cudaErrorSystemDriverMismatch", "system has unsupported display driver / cuda driver combination"},
        {804, "cudaErrorCompatNotSupportedOnDevice", "forward compatibility was attempted on non supported hardware"},
        {805, "cudaErrorMpsConnectionFailed", "MPS client failed to connect to the MPS control daemon or the MPS server"},
        {806, "cudaErrorMpsRpcFailure", "the remote procedural call between the MPS server and the MPS client failed"},
        {807, "cudaErrorMpsServerNotReady", "MPS server is not ready to accept new MPS client requests"},
        {808, "cudaErrorMpsMaxClientsReached", "the hardware resources required to create MPS client have been exhausted"},
        {809, "cudaErrorMpsMaxConnectionsReached", "the hardware resources required to support device connections have been exhausted"},
        {810, "cudaErrorMpsClientTerminated", "the MPS client has been terminated by the server"},
        {811, "cudaErrorCdpNotSupported", "CUDA Dynamic Parallelism is not supported in this configuration"},
        {812, "cudaErrorCdpVersionMismatch", "an unsupported interaction between CUDA Dynamic Parallelism versions"},
        {900, "cudaErrorStreamCaptureUnsupported", "operation not permitted when stream is capturing"},
        {901, "cudaErrorStreamCaptureInvalidated", "operation failed due to a previous error during capture"},
        {902, "cudaErrorStreamCaptureMerge", "operation would result in a merge of separate capture sequences"},
        {903, "cudaErrorStreamCaptureUnmatched", "capture was not ended in the same stream as it began"},
        {904, "cudaErrorStreamCaptureUnjoined", "capturing stream has unjoined work"},
        {905, "cudaErrorStreamCaptureIsolation", "dependency created on uncaptured work in another stream"},
        {906, "cudaErrorStreamCaptureImplicit", "operation would make the legacy stream depend on a capturing blocking stream"},
        {907, "cudaErrorCapturedEvent", "operation not permitted on an event last recorded in a capturing stream"},
        {908, "cudaErrorStreamCaptureWrongThread", "attempt to terminate a thread-local capture sequence from another thread"},
        {909, "cudaErrorTimeout", "wait operation timed out"},
        {910, "cudaErrorGraphExecUpdateFailure", "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"},
        {911, "cudaErrorExternalDevice", "an asynchronous error occurred in a device outside of CUDA"},
        {912, "cudaErrorInvalidClusterSize", "a kernel launch error occurred due to a cluster misconfiguration"},
        {913, "cudaErrorFunctionNotLoaded", "the function handle is not loaded"},
        {914, "cudaErrorInvalidResourceType", "a resource passed in is not of a valid type for the operation"},
        {915, "cudaErrorInvalidResourceConfiguration", "a resource passed in is insufficient or does not apply to the operation"},
        {999, "cudaErrorUnknown", "unknown error"},
        {10000, "cudaErrorApiFailureBase", "API failure base (deprecated)"},
    };
    for (const ErrorText& t : table)
        if (t.code == (int)e) return &t;
    return nullptr;
}
}  // namespace cpu_cuda
inline const char* cudaGetErrorName(cudaError_t e) {
    const cpu_cuda::ErrorText* t = cpu_cuda::error_text(e);
    return t ? t->name : "unrecognized error code";
}
inline const char* cudaGetErrorString(cudaError_t e) {
    const cpu_cuda::ErrorText* t = cpu_cuda::error_text(e);
    return t ? t->text : "unrecognized error code";
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
// Every attribute CUDA defines, from the same figures as cudaGetDeviceProperties (those the
// struct no longer carries in CUDA 13, clocks and compute mode, from the preset directly).
// The reserved numbers answer cudaErrorInvalidValue, as CUDA's do.
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    if (!value) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (device < 0 || device >= cpu_cuda::settings().devices) return cpu_cuda::set_error(cudaErrorInvalidDevice);
    const cudaDeviceProp p = cpu_cuda::device_properties(device);
    const cpu_cuda::DevicePreset& d = cpu_cuda::device_preset();
    int v;
    switch (attr) {
        case cudaDevAttrMaxThreadsPerBlock: v = p.maxThreadsPerBlock; break;
        case cudaDevAttrMaxBlockDimX: v = p.maxThreadsDim[0]; break;
        case cudaDevAttrMaxBlockDimY: v = p.maxThreadsDim[1]; break;
        case cudaDevAttrMaxBlockDimZ: v = p.maxThreadsDim[2]; break;
        case cudaDevAttrMaxGridDimX: v = p.maxGridSize[0]; break;
        case cudaDevAttrMaxGridDimY: v = p.maxGridSize[1]; break;
        case cudaDevAttrMaxGridDimZ: v = p.maxGridSize[2]; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: v = (int)p.sharedMemPerBlock; break;
        case cudaDevAttrTotalConstantMemory: v = (int)p.totalConstMem; break;
        case cudaDevAttrWarpSize: v = p.warpSize; break;
        case cudaDevAttrMaxPitch: v = (int)p.memPitch; break;
        case cudaDevAttrMaxRegistersPerBlock: v = p.regsPerBlock; break;
        case cudaDevAttrClockRate: v = d.clock_khz; break;
        case cudaDevAttrTextureAlignment: v = (int)p.textureAlignment; break;
        case cudaDevAttrGpuOverlap: v = 1; break;
        case cudaDevAttrMultiProcessorCount: v = p.multiProcessorCount; break;
        case cudaDevAttrKernelExecTimeout: v = 0; break;  // a compute GPU without a display
        case cudaDevAttrIntegrated: v = p.integrated; break;
        case cudaDevAttrCanMapHostMemory: v = p.canMapHostMemory; break;
        case cudaDevAttrComputeMode: v = cudaComputeModeDefault; break;
        case cudaDevAttrMaxTexture1DWidth: v = p.maxTexture1D; break;
        case cudaDevAttrMaxTexture2DWidth: v = p.maxTexture2D[0]; break;
        case cudaDevAttrMaxTexture2DHeight: v = p.maxTexture2D[1]; break;
        case cudaDevAttrMaxTexture3DWidth: v = p.maxTexture3D[0]; break;
        case cudaDevAttrMaxTexture3DHeight: v = p.maxTexture3D[1]; break;
        case cudaDevAttrMaxTexture3DDepth: v = p.maxTexture3D[2]; break;
        case cudaDevAttrMaxTexture2DLayeredWidth: v = p.maxTexture2DLayered[0]; break;
        case cudaDevAttrMaxTexture2DLayeredHeight: v = p.maxTexture2DLayered[1]; break;
        case cudaDevAttrMaxTexture2DLayeredLayers: v = p.maxTexture2DLayered[2]; break;
        case cudaDevAttrSurfaceAlignment: v = (int)p.surfaceAlignment; break;
        case cudaDevAttrConcurrentKernels: v = p.concurrentKernels; break;
        case cudaDevAttrEccEnabled: v = p.ECCEnabled; break;
        case cudaDevAttrPciBusId: v = p.pciBusID; break;
        case cudaDevAttrPciDeviceId: v = p.pciDeviceID; break;
        case cudaDevAttrTccDriver: v = p.tccDriver; break;
        case cudaDevAttrMemoryClockRate: v = d.memory_clock_khz; break;
        case cudaDevAttrGlobalMemoryBusWidth: v = p.memoryBusWidth; break;
        case cudaDevAttrL2CacheSize: v = p.l2CacheSize; break;
        case cudaDevAttrMaxThreadsPerMultiProcessor: v = p.maxThreadsPerMultiProcessor; break;
        case cudaDevAttrAsyncEngineCount: v = p.asyncEngineCount; break;
        case cudaDevAttrUnifiedAddressing: v = p.unifiedAddressing; break;
        case cudaDevAttrMaxTexture1DLayeredWidth: v = p.maxTexture1DLayered[0]; break;
        case cudaDevAttrMaxTexture1DLayeredLayers: v = p.maxTexture1DLayered[1]; break;
        case cudaDevAttrMaxTexture2DGatherWidth: v = p.maxTexture2DGather[0]; break;
        case cudaDevAttrMaxTexture2DGatherHeight: v = p.maxTexture2DGather[1]; break;
        case cudaDevAttrMaxTexture3DWidthAlt: v = p.maxTexture3DAlt[0]; break;
        case cudaDevAttrMaxTexture3DHeightAlt: v = p.maxTexture3DAlt[1]; break;
        case cudaDevAttrMaxTexture3DDepthAlt: v = p.maxTexture3DAlt[2]; break;
        case cudaDevAttrPciDomainId: v = p.pciDomainID; break;
        case cudaDevAttrTexturePitchAlignment: v = (int)p.texturePitchAlignment; break;
        case cudaDevAttrMaxTextureCubemapWidth: v = p.maxTextureCubemap; break;
        case cudaDevAttrMaxTextureCubemapLayeredWidth: v = p.maxTextureCubemapLayered[0]; break;
        case cudaDevAttrMaxTextureCubemapLayeredLayers: v = p.maxTextureCubemapLayered[1]; break;
        case cudaDevAttrMaxSurface1DWidth: v = p.maxSurface1D; break;
        case cudaDevAttrMaxSurface2DWidth: v = p.maxSurface2D[0]; break;
        case cudaDevAttrMaxSurface2DHeight: v = p.maxSurface2D[1]; break;
        case cudaDevAttrMaxSurface3DWidth: v = p.maxSurface3D[0]; break;
        case cudaDevAttrMaxSurface3DHeight: v = p.maxSurface3D[1]; break;
        case cudaDevAttrMaxSurface3DDepth: v = p.maxSurface3D[2]; break;
        case cudaDevAttrMaxSurface1DLayeredWidth: v = p.maxSurface1DLayered[0]; break;
        case cudaDevAttrMaxSurface1DLayeredLayers: v = p.maxSurface1DLayered[1]; break;
        case cudaDevAttrMaxSurface2DLayeredWidth: v = p.maxSurface2DLayered[0]; break;
        case cudaDevAttrMaxSurface2DLayeredHeight: v = p.maxSurface2DLayered[1]; break;
        case cudaDevAttrMaxSurface2DLayeredLayers: v = p.maxSurface2DLayered[2]; break;
        case cudaDevAttrMaxSurfaceCubemapWidth: v = p.maxSurfaceCubemap; break;
        case cudaDevAttrMaxSurfaceCubemapLayeredWidth: v = p.maxSurfaceCubemapLayered[0]; break;
        case cudaDevAttrMaxSurfaceCubemapLayeredLayers: v = p.maxSurfaceCubemapLayered[1]; break;
        case cudaDevAttrMaxTexture1DLinearWidth: v = 1 << 27; break;
        case cudaDevAttrMaxTexture2DLinearWidth: v = p.maxTexture2DLinear[0]; break;
        case cudaDevAttrMaxTexture2DLinearHeight: v = p.maxTexture2DLinear[1]; break;
        case cudaDevAttrMaxTexture2DLinearPitch: v = p.maxTexture2DLinear[2]; break;
        case cudaDevAttrMaxTexture2DMipmappedWidth: v = p.maxTexture2DMipmap[0]; break;
        case cudaDevAttrMaxTexture2DMipmappedHeight: v = p.maxTexture2DMipmap[1]; break;
        case cudaDevAttrComputeCapabilityMajor: v = p.major; break;
        case cudaDevAttrComputeCapabilityMinor: v = p.minor; break;
        case cudaDevAttrMaxTexture1DMipmappedWidth: v = p.maxTexture1DMipmap; break;
        case cudaDevAttrStreamPrioritiesSupported: v = p.streamPrioritiesSupported; break;
        case cudaDevAttrGlobalL1CacheSupported: v = p.globalL1CacheSupported; break;
        case cudaDevAttrLocalL1CacheSupported: v = p.localL1CacheSupported; break;
        case cudaDevAttrMaxSharedMemoryPerMultiprocessor: v = (int)p.sharedMemPerMultiprocessor; break;
        case cudaDevAttrMaxRegistersPerMultiprocessor: v = p.regsPerMultiprocessor; break;
        case cudaDevAttrManagedMemory: v = p.managedMemory; break;
        case cudaDevAttrIsMultiGpuBoard: v = p.isMultiGpuBoard; break;
        case cudaDevAttrMultiGpuBoardGroupID: v = device; break;
        case cudaDevAttrHostNativeAtomicSupported: v = p.hostNativeAtomicSupported; break;
        case cudaDevAttrSingleToDoublePrecisionPerfRatio: v = d.fp32_per_fp64; break;
        case cudaDevAttrPageableMemoryAccess: v = p.pageableMemoryAccess; break;
        case cudaDevAttrConcurrentManagedAccess: v = p.concurrentManagedAccess; break;
        case cudaDevAttrComputePreemptionSupported: v = p.computePreemptionSupported; break;
        case cudaDevAttrCanUseHostPointerForRegisteredMem: v = p.canUseHostPointerForRegisteredMem; break;
        case cudaDevAttrCooperativeLaunch: v = p.cooperativeLaunch; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: v = (int)p.sharedMemPerBlockOptin; break;
        case cudaDevAttrCanFlushRemoteWrites: v = 0; break;
        case cudaDevAttrHostRegisterSupported: v = p.hostRegisterSupported; break;
        case cudaDevAttrPageableMemoryAccessUsesHostPageTables: v = p.pageableMemoryAccessUsesHostPageTables; break;
        case cudaDevAttrDirectManagedMemAccessFromHost: v = p.directManagedMemAccessFromHost; break;
        case cudaDevAttrMaxBlocksPerMultiprocessor: v = p.maxBlocksPerMultiProcessor; break;
        case cudaDevAttrMaxPersistingL2CacheSize: v = p.persistingL2CacheMaxSize; break;
        case cudaDevAttrMaxAccessPolicyWindowSize: v = p.accessPolicyMaxWindowSize; break;
        case cudaDevAttrReservedSharedMemoryPerBlock: v = (int)p.reservedSharedMemPerBlock; break;
        case cudaDevAttrSparseCudaArraySupported: v = 0; break;
        case cudaDevAttrHostRegisterReadOnlySupported: v = 0; break;
        case cudaDevAttrTimelineSemaphoreInteropSupported: v = 0; break;
        case cudaDevAttrMemoryPoolsSupported: v = p.memoryPoolsSupported; break;
        case cudaDevAttrGPUDirectRDMASupported: v = 0; break;
        case cudaDevAttrGPUDirectRDMAFlushWritesOptions: v = 0; break;
        case cudaDevAttrGPUDirectRDMAWritesOrdering: v = 0; break;
        case cudaDevAttrMemoryPoolSupportedHandleTypes: v = 0; break;
        case cudaDevAttrClusterLaunch: v = p.clusterLaunch; break;
        case cudaDevAttrDeferredMappingCudaArraySupported: v = 0; break;
        default:
            // Attributes newer toolkits added, by number (an older toolkit lacks their names)
            switch ((int)attr) {
                case 126: v = d.major >= 9 ? 4 : 1; break;  // memory sync domains (Hopper has 4)
                case 131: case 134: v = -1; break;          // the GPU's and the host's NUMA node: none
                case 139: v = (int)d.pci_id(); break;
                case 125: case 130: case 133: case 135: case 138: case 140: case 142: case 143: case 144: case 147:
                    v = 0;  // IPC events, NUMA config, MPS, CIG interop, subsystem id, host memory pools: no
                    break;
                default: return cpu_cuda::set_error(cudaErrorInvalidValue);  // reserved or unknown, as CUDA
            }
    }
    *value = v;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int device) {
    if (!id || len <= 0) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (device < 0 || device >= cpu_cuda::settings().devices) return cpu_cuda::set_error(cudaErrorInvalidDevice);
    snprintf(id, (size_t)len, "0000:%02x:00.0", device + 1);
    return cudaSuccess;
}
// What streams have queued (streams.h); the rest is done. Inside a stream capture CUDA refuses
// it (cudaErrorStreamCaptureUnsupported) and invalidates the capture; after a launch that failed
// it answers the failure (exec.h's pending_error).
inline cudaError_t cudaDeviceSynchronize() {
    if (cudaError_t e = cpu_cuda::refuse_in_host_fn("cudaDeviceSynchronize")) return cpu_cuda::set_error(e);
    if (cpu_cuda::invalidate_captures()) {
        fprintf(stderr, "cpu_cuda: cudaDeviceSynchronize: called while a stream is capturing, which CUDA does not "
                        "permit; the capture is invalidated (cudaErrorStreamCaptureUnsupported)\n");
        return cpu_cuda::set_error(cudaErrorStreamCaptureUnsupported);
    }
    cpu_cuda::settle();
    return cpu_cuda::sync_error();
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
    if (cudaError_t e = cpu_cuda::refuse_unsafe("cudaMalloc")) return cpu_cuda::set_error(e);
    if (cpu_cuda::sticky_error != cudaSuccess) return cpu_cuda::sticky();
    if (!p) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *p = nullptr;
    if (bytes == 0) return cudaSuccess;
    cpu_cuda::DeviceAccess access;  // (CPU_CUDA_PROTECT=1: closed with the rest when the call ends)
    cpu_cuda::install_fault_handler();
    *p = cpu_cuda::memory().allocate(bytes, true);
    return *p ? cudaSuccess : cpu_cuda::set_error(cudaErrorMemoryAllocation);
}
// Managed (unified) memory: host and device share one address space here, so an allocation
// that both may use is pinned host memory (kernels accept it; CPU_CUDA_PROTECT leaves it
// readable), remembered so that cudaFree releases it. Prefetches and advice (CUDA 13's forms,
// with a cudaMemLocation) have nothing to move: they check the range and succeed.
namespace cpu_cuda {
inline std::set<void*>& managed_allocations() {
    static std::set<void*> s;
    return s;
}
inline std::mutex& managed_mutex() {
    static std::mutex m;
    return m;
}
inline cudaError_t managed_range(const void* p, size_t count) {
    const Allocation* a = memory().find(p);
    if (!a || (const char*)p + count > a->end()) return set_error(cudaErrorInvalidValue);
    return cudaSuccess;
}
}  // namespace cpu_cuda
inline cudaError_t cudaMallocManaged(void** p, size_t bytes, unsigned int flags) {
    if (!p || bytes == 0 || (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost))
        return cpu_cuda::set_error(cudaErrorInvalidValue);
    *p = cpu_cuda::memory().allocate(bytes, false);
    if (!*p) return cpu_cuda::set_error(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> lock(cpu_cuda::managed_mutex());
    cpu_cuda::managed_allocations().insert(*p);
    return cudaSuccess;
}
inline cudaError_t cudaMemPrefetchAsync(const void* p, size_t count, cudaMemLocation, unsigned int, cudaStream_t) {
    return cpu_cuda::managed_range(p, count);
}
inline cudaError_t cudaMemAdvise(const void* p, size_t count, cudaMemoryAdvise, cudaMemLocation) {
    return cpu_cuda::managed_range(p, count);
}
// (count 0: the whole allocation, as CUDA's default)
inline cudaError_t cudaStreamAttachMemAsync(cudaStream_t, void* p, size_t count, unsigned int) {
    return cpu_cuda::managed_range(p, count);
}
inline cudaError_t cudaFree(void* p) {
    if (cudaError_t e = cpu_cuda::refuse_unsafe("cudaFree")) return cpu_cuda::set_error(e);
    if (!p) return cudaSuccess;
    cpu_cuda::settle();  // as CUDA's cudaFree: queued work may still use it
    {
        std::lock_guard<std::mutex> lock(cpu_cuda::managed_mutex());
        if (cpu_cuda::managed_allocations().erase(p)) return cpu_cuda::memory().release(p, false) ? cudaSuccess : cpu_cuda::set_error(cudaErrorInvalidValue);
    }
    if (cpu_cuda::memory().release(p, true)) return cudaSuccess;
    fprintf(stderr, "cpu_cuda: cudaFree(%p): not the start of a live device allocation (%s)\n", p,
            cpu_cuda::memory().describe(p).c_str());
    return cpu_cuda::set_error(cudaErrorInvalidValue);
}
inline cudaError_t cudaMallocHost(void** p, size_t bytes) {
    if (cudaError_t e = cpu_cuda::refuse_unsafe("cudaMallocHost")) return cpu_cuda::set_error(e);
    if (!p) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *p = cpu_cuda::memory().allocate(std::max<size_t>(bytes, 1), false);
    return *p ? cudaSuccess : cpu_cuda::set_error(cudaErrorMemoryAllocation);
}
inline cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) { return cudaMallocHost(p, bytes); }
inline cudaError_t cudaFreeHost(void* p) {
    if (cudaError_t e = cpu_cuda::refuse_unsafe("cudaFreeHost")) return cpu_cuda::set_error(e);
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
    if (cudaError_t e = cpu_cuda::refuse_unsafe("cudaMemcpy")) return cpu_cuda::set_error(e);
    if (cpu_cuda::sticky_error != cudaSuccess) return cpu_cuda::sticky();
    return cpu_cuda::copy(dst, src, count, kind, "cudaMemcpy");
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                   cudaStream_t stream) {
    if (cudaError_t e = cpu_cuda::refuse_in_host_fn("cudaMemcpyAsync")) return cpu_cuda::set_error(e);
    if (!cpu_cuda::valid_stream(stream)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    if (cpu_cuda::capturing(stream)) {
        cpu_cuda::KeptPointers kept;
        kept.keep(src, "src"), kept.keep(dst, "dst");
        return cpu_cuda::capture(stream, cudaGraphNodeTypeMemcpy, [=](cudaStream_t) {
            const char* call = "cudaMemcpyAsync (a graph's node)";
            if (!kept.still_live(call)) return cpu_cuda::set_error(cudaErrorInvalidValue);
            return cpu_cuda::copy(dst, src, count, kind, call);
        });
    }
    return cpu_cuda::copy(dst, src, count, kind, "cudaMemcpyAsync", true, stream);
}
inline cudaError_t cudaMemset(void* p, int value, size_t count) {
    if (cudaError_t e = cpu_cuda::refuse_unsafe("cudaMemset")) return cpu_cuda::set_error(e);
    return cpu_cuda::fill(p, value, count, "cudaMemset");
}
inline cudaError_t cudaMemsetAsync(void* p, int value, size_t count, cudaStream_t stream) {
    if (cudaError_t e = cpu_cuda::refuse_in_host_fn("cudaMemsetAsync")) return cpu_cuda::set_error(e);
    if (!cpu_cuda::valid_stream(stream)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    if (cpu_cuda::capturing(stream)) {
        cpu_cuda::KeptPointers kept;
        kept.keep(p, "destination");
        return cpu_cuda::capture(stream, cudaGraphNodeTypeMemset, [=](cudaStream_t) {
            const char* call = "cudaMemsetAsync (a graph's node)";
            if (!kept.still_live(call)) return cpu_cuda::set_error(cudaErrorInvalidValue);
            return cpu_cuda::fill(p, value, count, call);
        });
    }
    return cpu_cuda::fill(p, value, count, "cudaMemsetAsync", true, stream);
}

// ----------------------------------------------------------------------------
// Streams and events

inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
    if (cudaError_t e = cpu_cuda::refuse_in_host_fn("cudaStreamCreate")) return cpu_cuda::set_error(e);
    if (!s) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *s = new CUstream_st{flags};
    cpu_cuda::StreamQueue& queue = cpu_cuda::stream_queue(*s);
    queue.nonblocking = flags & cudaStreamNonBlocking;
    const bool delayed = ++cpu_cuda::streams_created() == cpu_cuda::settings().delay_stream;
    queue.delay_ms = delayed ? cpu_cuda::settings().delay_ms : 0;
    std::lock_guard<std::mutex> lock(cpu_cuda::handles_mutex());
    cpu_cuda::live_handles().insert(*s);
    return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (cudaError_t e = cpu_cuda::refuse_in_host_fn("cudaStreamDestroy")) return cpu_cuda::set_error(e);
    if (cpu_cuda::valid_stream(s)) cpu_cuda::stream_queue(s).drain(), cpu_cuda::forget_capture(s);
    std::lock_guard<std::mutex> lock(cpu_cuda::handles_mutex());
    if (!cpu_cuda::live_handles().erase(s)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    delete s;
    return cudaSuccess;
}
// Only queued work (streams.h) can still be running when a call has returned.
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (cudaError_t e = cpu_cuda::refuse_in_host_fn("cudaStreamSynchronize")) return cpu_cuda::set_error(e);
    if (!cpu_cuda::valid_stream(s)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    if (cpu_cuda::capturing(s)) return cpu_cuda::set_error(cpu_cuda::refuse_capturing_stream(s, "cudaStreamSynchronize"));
    cpu_cuda::stream_queue(s).drain();
    return cpu_cuda::sync_error();
}
inline cudaError_t cudaStreamQuery(cudaStream_t s) {
    if (cudaError_t e = cpu_cuda::refuse_in_host_fn("cudaStreamQuery")) return cpu_cuda::set_error(e);
    if (!cpu_cuda::valid_stream(s)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    if (cpu_cuda::capturing(s)) return cpu_cuda::set_error(cpu_cuda::refuse_capturing_stream(s, "cudaStreamQuery"));
    return cpu_cuda::stream_busy(s) ? cudaErrorNotReady : cudaSuccess;  // (not an error: not recorded)
}

inline bool cpu_cuda_valid_event(cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(cpu_cuda::handles_mutex());
    return e && cpu_cuda::live_handles().count(e);
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
    if (cudaError_t e = cpu_cuda::refuse_in_host_fn("cudaEventCreate")) return cpu_cuda::set_error(e);
    if (!e) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *e = new CUevent_st{};
    std::lock_guard<std::mutex> lock(cpu_cuda::handles_mutex());
    cpu_cuda::live_handles().insert(*e);
    return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
// (Out of line: inlined into a caller whose handle GCC cannot prove was set, the event's
// destructor draws a false -Wmaybe-uninitialized.)
[[gnu::noinline]] inline void cpu_cuda_delete_event(cudaEvent_t e) { delete e; }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (cudaError_t refused = cpu_cuda::refuse_in_host_fn("cudaEventDestroy")) return cpu_cuda::set_error(refused);
    if (cpu_cuda_valid_event(e)) e->clock->wait_for(e->clock->made);  // its records still queued
    std::lock_guard<std::mutex> lock(cpu_cuda::handles_mutex());
    if (!cpu_cuda::live_handles().erase(e)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    cpu_cuda_delete_event(e);
    return cudaSuccess;
}
// Events in a capture: recorded on a capturing stream, an event stands for the stream's last
// nodes; a stream that waits on it depends on them, and one not capturing yet joins the capture
// (how a capture forks onto other streams). An event of a capture that has ended is an ordinary one.
namespace cpu_cuda {
inline bool record_in_capture(cudaEvent_t e, cudaStream_t s) {
    if (!capturing(s)) return false;
    std::lock_guard<std::mutex> lock(capture_mutex());
    const Capture& c = captures().at(s);
    e->captured_in = c.graph, e->captured_nodes = c.frontier;
    return true;
}
inline bool wait_in_capture(cudaStream_t s, cudaEvent_t e) {
    if (!e->captured_in || capturing_streams == 0) return false;
    std::lock_guard<std::mutex> lock(capture_mutex());
    const Capture* of_event = nullptr;
    for (const auto& [stream, c] : captures())
        if (c.graph == e->captured_in) of_event = &c;
    if (!of_event) return false;
    auto it = captures().find(s);
    if (it == captures().end()) {
        captures()[s] = {of_event->graph, of_event->origin, e->captured_nodes};
        capturing_streams++;
        return true;
    }
    for (CUgraphNode_st* n : e->captured_nodes)
        if (std::find(it->second.frontier.begin(), it->second.frontier.end(), n) == it->second.frontier.end())
            it->second.frontier.push_back(n);
    return true;
}
}  // namespace cpu_cuda
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (cudaError_t e = cpu_cuda::refuse_in_host_fn("cudaEventRecord")) return cpu_cuda::set_error(e);
    if (!cpu_cuda_valid_event(e) || !cpu_cuda::valid_stream(s))
        return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    if (cpu_cuda::record_in_capture(e, s)) return cudaSuccess;
    e->captured_in = nullptr;
    const uint64_t record = ++e->clock->made;
    if (cpu_cuda::queue_behind(s)) {  // the event completes when the stream's queued work has
        e->pending++;
        cpu_cuda::stream_queue(s).enqueue([e, clock = e->clock, record] {
            e->ms = cpu_cuda::now_ms(), e->recorded = true;
            e->pending--;
            clock->finish(record);  // (after which the event may be destroyed)
        });
        return cudaSuccess;
    }
    e->ms = cpu_cuda::now_ms(), e->recorded = true;
    e->clock->finish(record);
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (cudaError_t e = cpu_cuda::refuse_in_host_fn("cudaEventSynchronize")) return cpu_cuda::set_error(e);
    if (!cpu_cuda_valid_event(e)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    e->clock->wait_for(e->clock->made);  // its last record
    return cpu_cuda::sticky();
}
inline cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (!cpu_cuda_valid_event(e)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    return e->pending ? cudaErrorNotReady : cudaSuccess;
}
// The stream's later work runs after the event's last record: when that is still queued on a
// stream, a wait for it is queued on `s` (the host goes on, as on a GPU), and s's later work
// queues behind the wait.
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
    if (cudaError_t e = cpu_cuda::refuse_in_host_fn("cudaStreamWaitEvent")) return cpu_cuda::set_error(e);
    if (!cpu_cuda::valid_stream(s) || !cpu_cuda_valid_event(e))
        return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    if (cpu_cuda::wait_in_capture(s, e)) return cudaSuccess;
    const uint64_t record = e->clock->made;
    if (e->clock->done >= record) return cudaSuccess;
    cpu_cuda::stream_queue(s).enqueue([clock = e->clock, record] { clock->wait_for(record); });
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
        if (value < 0 || (size_t)value > cpu_cuda::max_dynamic_smem_optin()) {
            fprintf(stderr, "cpu_cuda: cudaFuncSetAttribute(MaxDynamicSharedMemorySize, %d): over the %zu bytes per "
                    "block that %s allows\n", value, cpu_cuda::max_dynamic_smem_optin(), cpu_cuda::device_preset().name);
            return cpu_cuda::set_error(cudaErrorInvalidValue);
        }
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
// The L1/shared-memory split a kernel prefers: a hint that CUDA lets a device ignore; nothing here
// (one memory). Both forms, so that a kernel template's instance (k<float>) may be named.
inline cudaError_t cudaFuncSetCacheConfig(const void* func, cudaFuncCache) {
    return func ? cudaSuccess : cpu_cuda::set_error(cudaErrorInvalidDeviceFunction);
}
template <class T>
inline cudaError_t cudaFuncSetCacheConfig(T* entry, cudaFuncCache config) {
    return cudaFuncSetCacheConfig((const void*)entry, config);
}

// ----------------------------------------------------------------------------
// Symbols: __constant__ and __device__ variables. Without nvcc they are ordinary globals of
// the program (the toolkit's headers define __constant__ and __device__ as nothing for a host
// compiler), which kernels here read directly; these calls copy into and out of them. The
// C++ forms (a variable, not its address: what programs write) know the symbol's size, so a
// count or offset beyond it fails with cudaErrorInvalidValue and a line naming the call's file
// and line, where a GPU would write past it. (The C forms, given only an address, cannot check.)

namespace cpu_cuda {
inline cudaError_t symbol_copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind, bool to_symbol,
                               const char* call, cudaStream_t stream = nullptr) {
    if (!valid_stream(stream)) return set_error(cudaErrorInvalidResourceHandle);
    if (count == 0) return cudaSuccess;
    if (!dst || !src) return set_error(cudaErrorInvalidValue);
    const void* other = to_symbol ? src : dst;  // the operand that is not the symbol
    if (kind == cudaMemcpyDefault) kind = memory().is_device(other) ? cudaMemcpyDeviceToDevice
                                          : to_symbol ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    if (kind != cudaMemcpyDeviceToDevice && kind != (to_symbol ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost))
        return set_error(cudaErrorInvalidMemcpyDirection);
    DeviceAccess access;
    if (kind == cudaMemcpyDeviceToDevice && !check_range(other, count, call, to_symbol ? "source" : "destination"))
        return set_error(cudaErrorInvalidValue);
    memmove(dst, src, count);
    return cudaSuccess;
}
inline cudaError_t symbol_range(size_t symbol_bytes, size_t count, size_t offset, const char* call, const char* file,
                                int line) {
    if (offset <= symbol_bytes && count <= symbol_bytes - offset) return cudaSuccess;
    fprintf(stderr, "cpu_cuda: %s at %s:%d: %zu bytes at offset %zu run past the end of the symbol (%zu bytes)\n",
            call, file, line, count, offset, symbol_bytes);
    return set_error(cudaErrorInvalidValue);
}
}  // namespace cpu_cuda

inline cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                                      cudaMemcpyKind kind) {
    if (!symbol) return cpu_cuda::set_error(cudaErrorInvalidSymbol);
    return cpu_cuda::symbol_copy((char*)symbol + offset, src, count, kind, true, "cudaMemcpyToSymbol");
}
inline cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset,
                                        cudaMemcpyKind kind) {
    if (!symbol) return cpu_cuda::set_error(cudaErrorInvalidSymbol);
    return cpu_cuda::symbol_copy(dst, (const char*)symbol + offset, count, kind, false, "cudaMemcpyFromSymbol");
}
inline cudaError_t cudaMemcpyToSymbolAsync(const void* symbol, const void* src, size_t count, size_t offset,
                                           cudaMemcpyKind kind, cudaStream_t stream) {
    if (!symbol) return cpu_cuda::set_error(cudaErrorInvalidSymbol);
    return cpu_cuda::symbol_copy((char*)symbol + offset, src, count, kind, true, "cudaMemcpyToSymbolAsync", stream);
}
inline cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const void* symbol, size_t count, size_t offset,
                                             cudaMemcpyKind kind, cudaStream_t stream) {
    if (!symbol) return cpu_cuda::set_error(cudaErrorInvalidSymbol);
    return cpu_cuda::symbol_copy(dst, (const char*)symbol + offset, count, kind, false, "cudaMemcpyFromSymbolAsync",
                                 stream);
}
template <class T>
cudaError_t cudaMemcpyToSymbol(const T& symbol, const void* src, size_t count, size_t offset = 0,
                               cudaMemcpyKind kind = cudaMemcpyHostToDevice, const char* file = __builtin_FILE(),
                               int line = __builtin_LINE()) {
    if (cudaError_t e = cpu_cuda::symbol_range(sizeof(T), count, offset, "cudaMemcpyToSymbol", file, line)) return e;
    cpu_cuda::note_symbol((void*)&symbol, sizeof(T));  // (for the race detector)
    return cudaMemcpyToSymbol((const void*)&symbol, src, count, offset, kind);
}
template <class T>
cudaError_t cudaMemcpyFromSymbol(void* dst, const T& symbol, size_t count, size_t offset = 0,
                                 cudaMemcpyKind kind = cudaMemcpyDeviceToHost, const char* file = __builtin_FILE(),
                                 int line = __builtin_LINE()) {
    if (cudaError_t e = cpu_cuda::symbol_range(sizeof(T), count, offset, "cudaMemcpyFromSymbol", file, line)) return e;
    cpu_cuda::note_symbol((void*)&symbol, sizeof(T));  // (for the race detector)
    return cudaMemcpyFromSymbol(dst, (const void*)&symbol, count, offset, kind);
}
template <class T>
cudaError_t cudaMemcpyToSymbolAsync(const T& symbol, const void* src, size_t count, size_t offset = 0,
                                    cudaMemcpyKind kind = cudaMemcpyHostToDevice, cudaStream_t stream = 0,
                                    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    if (cudaError_t e = cpu_cuda::symbol_range(sizeof(T), count, offset, "cudaMemcpyToSymbolAsync", file, line))
        return e;
    cpu_cuda::note_symbol((void*)&symbol, sizeof(T));  // (for the race detector)
    return cudaMemcpyToSymbolAsync((const void*)&symbol, src, count, offset, kind, stream);
}
template <class T>
cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const T& symbol, size_t count, size_t offset = 0,
                                      cudaMemcpyKind kind = cudaMemcpyDeviceToHost, cudaStream_t stream = 0,
                                      const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    if (cudaError_t e = cpu_cuda::symbol_range(sizeof(T), count, offset, "cudaMemcpyFromSymbolAsync", file, line))
        return e;
    cpu_cuda::note_symbol((void*)&symbol, sizeof(T));  // (for the race detector)
    return cudaMemcpyFromSymbolAsync(dst, (const void*)&symbol, count, offset, kind, stream);
}
template <class T>
cudaError_t cudaGetSymbolSize(size_t* size, const T&) {
    if (!size) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *size = sizeof(T);
    return cudaSuccess;
}

// ----------------------------------------------------------------------------
// The profiler, device flags and host memory registration

inline cudaError_t cudaProfilerStart() { return cudaSuccess; }  // (no profiler to start: nothing to record)
inline cudaError_t cudaProfilerStop() { return cudaSuccess; }

// Device limits (cudaDeviceSetLimit / GetLimit) and stream attributes (an L2 access-policy
// window, ...): recorded and answered back, with the CUDA Runtime API's defaults; nothing here
// uses them (stacks are CPU_CUDA_STACK_KB's, printf has no FIFO, the host has no L2 to reserve).
namespace cpu_cuda {
inline size_t* device_limit(cudaLimit limit) {
    static size_t values[] = {1024, 1 << 20, 8 << 20, 2, 2048, 64, 0};  // in cudaLimit's order
    static_assert(cudaLimitStackSize == 0 && cudaLimitPersistingL2CacheSize == 6, "cudaLimit's order");
    return (unsigned)limit <= (unsigned)cudaLimitPersistingL2CacheSize ? &values[limit] : nullptr;
}
inline std::map<std::pair<cudaStream_t, int>, cudaStreamAttrValue>& stream_attributes() {
    static std::map<std::pair<cudaStream_t, int>, cudaStreamAttrValue> m;
    return m;
}
}  // namespace cpu_cuda
inline cudaError_t cudaDeviceSetLimit(cudaLimit limit, size_t value) {
    size_t* v = cpu_cuda::device_limit(limit);
    if (!v) return cpu_cuda::set_error(cudaErrorUnsupportedLimit);
    *v = value;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetLimit(size_t* value, cudaLimit limit) {
    size_t* v = cpu_cuda::device_limit(limit);
    if (!v) return cpu_cuda::set_error(cudaErrorUnsupportedLimit);
    if (!value) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *value = *v;
    return cudaSuccess;
}
inline cudaError_t cudaCtxResetPersistingL2Cache() { return cudaSuccess; }  // (no lines persist here)
inline cudaError_t cudaStreamSetAttribute(cudaStream_t stream, cudaStreamAttrID attr, const cudaStreamAttrValue* value) {
    if (!value) return cpu_cuda::set_error(cudaErrorInvalidValue);
    cpu_cuda::stream_attributes()[{stream, (int)attr}] = *value;
    return cudaSuccess;
}
inline cudaError_t cudaStreamGetAttribute(cudaStream_t stream, cudaStreamAttrID attr, cudaStreamAttrValue* value) {
    if (!value) return cpu_cuda::set_error(cudaErrorInvalidValue);
    auto it = cpu_cuda::stream_attributes().find({stream, (int)attr});
    if (it != cpu_cuda::stream_attributes().end()) *value = it->second;
    else memset((void*)value, 0, sizeof *value);  // (never set: an empty window, the defaults)
    return cudaSuccess;
}

namespace cpu_cuda {
inline unsigned& device_flags() {
    static unsigned flags = cudaDeviceScheduleAuto;
    return flags;
}
}  // namespace cpu_cuda
// The flags are recorded and answered back; scheduling and mapping mean nothing here (host
// memory is always mapped). Unknown bits, or two scheduling policies at once, are refused.
inline cudaError_t cudaSetDeviceFlags(unsigned int flags) {
    const unsigned known = cudaDeviceScheduleMask | cudaDeviceMapHost | cudaDeviceLmemResizeToMax;
    unsigned schedule = flags & cudaDeviceScheduleMask;
    if ((flags & ~known) || (schedule & (schedule - 1))) return cpu_cuda::set_error(cudaErrorInvalidValue);
    cpu_cuda::device_flags() = flags | cudaDeviceMapHost;  // (CUDA reports MapHost as always set)
    return cudaSuccess;
}
inline cudaError_t cudaGetDeviceFlags(unsigned int* flags) {
    if (!flags) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *flags = cpu_cuda::device_flags() | cudaDeviceMapHost;
    return cudaSuccess;
}
// The range becomes pinned host memory: kernels may be given pointers into it (cudaHostGetDevicePointer
// answers the same address, as with unified addressing) and async copies from it are queued.
inline cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
    if (!ptr || size == 0 || (flags & ~15u)) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (!cpu_cuda::memory().register_host(ptr, size)) {
        fprintf(stderr, "cpu_cuda: cudaHostRegister(%p, %zu): overlaps memory already registered or allocated (%s)\n",
                ptr, size, cpu_cuda::memory().describe(ptr).c_str());
        return cpu_cuda::set_error(cudaErrorHostMemoryAlreadyRegistered);
    }
    return cudaSuccess;
}
inline cudaError_t cudaHostUnregister(void* ptr) {
    cpu_cuda::settle();  // queued copies may still read it
    if (!cpu_cuda::memory().unregister_host(ptr)) return cpu_cuda::set_error(cudaErrorHostMemoryNotRegistered);
    return cudaSuccess;
}
inline cudaError_t cudaHostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned int flags) {
    if (!device_ptr || flags) return cpu_cuda::set_error(cudaErrorInvalidValue);
    const cpu_cuda::Allocation* a = cpu_cuda::memory().find(host_ptr);
    if (!a || a->device) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *device_ptr = host_ptr;
    return cudaSuccess;
}

// ----------------------------------------------------------------------------
// Occupancy and function attributes, from the preset GPU's figures (device_presets.h). What
// only the compiler knows, the runtime cannot: it counts a kernel as using 32 registers per
// thread (then registers never limit a block of up to 1024 threads on these GPUs) and no static
// shared memory; the dynamic shared memory asked for and the block size do limit, as CUDA's
// occupancy calculator computes (warps, blocks and shared memory per SM, per-block reserve
// included).

namespace cpu_cuda {
constexpr int ASSUMED_REGISTERS_PER_THREAD = 32;
inline size_t kernel_smem_limit(const void* func) {
    std::lock_guard<std::mutex> lock(smem_limits_mutex());
    auto it = smem_limits().find(func);
    return it != smem_limits().end() ? it->second : DEFAULT_DYNAMIC_SMEM;
}
inline int blocks_per_sm(int block_size, size_t dynamic_smem) {
    const DevicePreset& d = device_preset();
    int warps = (block_size + 31) / 32;
    int by_threads = d.max_threads_per_sm / (warps * 32);
    int by_regs = d.regs_per_sm / (warps * 32 * ASSUMED_REGISTERS_PER_THREAD);
    size_t per_block = dynamic_smem + (size_t)d.reserved_smem_per_block;
    int by_smem = per_block ? (int)((size_t)d.smem_per_sm / per_block) : d.max_blocks_per_sm;
    return std::max(0, std::min({d.max_blocks_per_sm, by_threads, by_regs, by_smem}));
}
}  // namespace cpu_cuda

inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void* func, int block_size,
                                                                          size_t dynamic_smem, unsigned int) {
    if (!blocks || block_size <= 0) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (!func) return cpu_cuda::set_error(cudaErrorInvalidDeviceFunction);
    if (block_size > cpu_cuda::DevicePreset::max_threads_per_block || dynamic_smem > cpu_cuda::kernel_smem_limit(func)) {
        *blocks = 0;  // (CUDA: a launch that could not run at all has no resident blocks)
        return cudaSuccess;
    }
    *blocks = cpu_cuda::blocks_per_sm(block_size, dynamic_smem);
    return cudaSuccess;
}
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* func, int block_size,
                                                                 size_t dynamic_smem) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, func, block_size, dynamic_smem, 0);
}
template <class T>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, T* func, int block_size, size_t dynamic_smem) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, (const void*)func, block_size, dynamic_smem);
}
// (cudaOccupancyMaxPotentialBlockSize and its variants are the toolkit's own, in cuda_runtime.h:
// host code that asks the calls above and the device's attributes.)
inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
    if (!attr) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (!func) return cpu_cuda::set_error(cudaErrorInvalidDeviceFunction);
    const cpu_cuda::DevicePreset& d = cpu_cuda::device_preset();
    memset(attr, 0, sizeof *attr);
    attr->maxThreadsPerBlock = cpu_cuda::DevicePreset::max_threads_per_block;
    attr->numRegs = cpu_cuda::ASSUMED_REGISTERS_PER_THREAD;
    attr->maxDynamicSharedSizeBytes = (int)cpu_cuda::kernel_smem_limit(func);
    attr->ptxVersion = attr->binaryVersion = d.major * 10 + d.minor;
    attr->preferredShmemCarveout = -1;
    return cudaSuccess;
}
template <class T>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, T* func) {
    return cudaFuncGetAttributes(attr, (const void*)func);
}

// ----------------------------------------------------------------------------
// Launches with an array of argument pointers: cudaLaunchKernel and cudaLaunchCooperativeKernel.
// CUDA's functions take the kernel as a void*, which has lost its parameter types; the build's
// rewrite step (rewrite.cpp) turns a call that names the kernel, cudaLaunchCooperativeKernel(
// (void*)k, grid, block, args, smem, stream), into cooperative_launch("k", k, grid, ...), which
// knows them and copies each argument from args[i] as a <<<>>> launch would.
// A cooperative launch also needs every block resident at once, as the CUDA C++ Programming
// Guide says: a grid beyond the occupancy calculator's blocks per SM x the SM count is refused
// (cudaErrorCooperativeLaunchTooLarge) before any thread runs. Here each of its threads also
// keeps a fiber stack (two memory maps) until the launch ends: a grid whose stacks need more
// than three quarters of the maps vm.max_map_count leaves free now is refused the same way,
// with that reason.

namespace cpu_cuda {
inline long long maps_in_use() {
    long long n = 0;
    if (FILE* f = fopen("/proc/self/maps", "r")) {
        for (int c; (c = fgetc(f)) != EOF;) n += c == '\n';
        fclose(f);
    }
    return n;
}
inline cudaError_t check_cooperative(const char* name, const void* func, dim3 grid, dim3 block, size_t smem) {
    const uint64_t blocks = (uint64_t)grid.x * grid.y * grid.z, threads = (uint64_t)block.x * block.y * block.z;
    int per_sm = 0;
    if (threads == 0 || threads > (uint64_t)DevicePreset::max_threads_per_block || blocks == 0)
        return cudaSuccess;  // the launch's own checks answer these
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, func, (int)threads, smem);
    const uint64_t resident = (uint64_t)per_sm * preset_sm_count();
    const uint64_t maps = 2 * blocks * threads + 4 * blocks;  // fiber stacks; each block's OS thread
    if (blocks <= resident && maps <= (uint64_t)std::max(0LL, max_map_count() - maps_in_use()) / 4 * 3)
        return cudaSuccess;
    if (blocks > resident)
        fprintf(stderr,
                "cpu_cuda: cudaLaunchCooperativeKernel('%s'): %llu blocks of %llu threads, but the device holds %d "
                "per SM x %d SMs = %llu at once (cudaOccupancyMaxActiveBlocksPerMultiprocessor x "
                "cudaDevAttrMultiProcessorCount): cooperative launch too large\n",
                name, (unsigned long long)blocks, (unsigned long long)threads, per_sm, preset_sm_count(),
                (unsigned long long)resident);
    else
        fprintf(stderr,
                "cpu_cuda: cudaLaunchCooperativeKernel('%s'): %llu threads in all need %llu memory maps for their "
                "stacks, more than three quarters of what vm.max_map_count (%lld) leaves free (%lld in use): "
                "cooperative launch too large on the CPU runtime (fewer blocks, CPU_CUDA_THREADS, or raise the "
                "sysctl)\n",
                name, (unsigned long long)(blocks * threads), (unsigned long long)maps, max_map_count(),
                maps_in_use());
    return set_error(cudaErrorCooperativeLaunchTooLarge);
}
template <class... P, size_t... I>
cudaError_t launch_from_array(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, void** args,
                              size_t smem, cudaStream_t stream, bool cooperative, std::index_sequence<I...>) {
    if (sizeof...(P) && !args) return set_error(cudaErrorInvalidValue);
    auto config = launch_config(name, kernel, grid, block, smem, stream);
    config.cooperative = cooperative;
    return config.launch(*static_cast<std::decay_t<P>*>(args[I])...);
}
template <class... P>
cudaError_t cooperative_launch(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, void** args,
                               size_t smem = 0, cudaStream_t stream = nullptr) {
    if (cudaError_t e = check_cooperative(name, (const void*)kernel, grid, block, smem)) return e;
    return launch_from_array(name, kernel, grid, block, args, smem, stream, true, std::index_sequence_for<P...>{});
}
template <class... P>
cudaError_t kernel_launch(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, void** args,
                          size_t smem = 0, cudaStream_t stream = nullptr) {
    return launch_from_array(name, kernel, grid, block, args, smem, stream, false, std::index_sequence_for<P...>{});
}
// A kernel the rewrite could not name (a void* variable): its parameter types are gone.
inline cudaError_t unnamed_launch(const char* call, const char* name) {
    fprintf(stderr,
            "cpu_cuda: %s(%s, ...): the CPU runtime needs the kernel itself at the call (a function name, or a "
            "cast of one), to know its parameters; a void* variable has lost them\n",
            call, name);
    return set_error(cudaErrorInvalidDeviceFunction);
}
// A void* whose kernel a cast of its name has filed (capture.h) launches as that kernel.
inline cudaError_t cooperative_launch(const char* name, const void* func, dim3 grid, dim3 block, void** args,
                                      size_t smem = 0, cudaStream_t stream = nullptr) {
    const KnownKernel* k = known_kernel(func);
    if (!k) return unnamed_launch("cudaLaunchCooperativeKernel", name);
    if (cudaError_t e = check_cooperative(k->name, func, grid, block, smem)) return e;
    GraphWork run = k->bind(func, k->name, grid, block, args, smem, true);
    return run ? run(stream) : set_error(cudaErrorInvalidValue);
}
inline cudaError_t kernel_launch(const char* name, const void* func, dim3 grid, dim3 block, void** args,
                                 size_t smem = 0, cudaStream_t stream = nullptr) {
    const KnownKernel* k = known_kernel(func);
    if (!k) return unnamed_launch("cudaLaunchKernel", name);
    GraphWork run = k->bind(func, k->name, grid, block, args, smem, false);
    return run ? run(stream) : set_error(cudaErrorInvalidValue);
}
}  // namespace cpu_cuda
// Calls the rewrite did not see (code built without it) land here.
inline cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 grid, dim3 block, void** args, size_t smem,
                                               cudaStream_t stream) {
    return cpu_cuda::cooperative_launch("?", func, grid, block, args, smem, stream);
}
inline cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t smem,
                                    cudaStream_t stream) {
    return cpu_cuda::kernel_launch("?", func, grid, block, args, smem, stream);
}

// ----------------------------------------------------------------------------
// The stream-ordered allocator: streams here run their work in order, at once, so an
// allocation on a stream is an allocation now, and a free on a stream waits for what the
// stream has queued. Pools keep their attributes (a release threshold, ...) for the program
// to read back; memory is never held back in them.

struct CUmemPoolHandle_st {
    cudaMemPoolProps props;
    unsigned long long release_threshold = 0;
    int flags[3] = {1, 1, 0};  // reuse follow event dependencies, allow opportunistic, allow internal dependencies
};
namespace cpu_cuda {
inline cudaMemPool_t default_mem_pool() {
    static CUmemPoolHandle_st pool{};
    return &pool;
}
}  // namespace cpu_cuda
inline cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t stream) {
    if (!cpu_cuda::valid_stream(stream)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    return cudaMalloc(p, bytes);
}
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t stream) {
    if (!cpu_cuda::valid_stream(stream)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    return cudaFree(p);
}
inline cudaError_t cudaMallocFromPoolAsync(void** p, size_t bytes, cudaMemPool_t pool, cudaStream_t stream) {
    if (!pool) return cpu_cuda::set_error(cudaErrorInvalidValue);
    return cudaMallocAsync(p, bytes, stream);
}
inline cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
    if (!pool) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (device < 0 || device >= cpu_cuda::settings().devices) return cpu_cuda::set_error(cudaErrorInvalidDevice);
    *pool = cpu_cuda::default_mem_pool();
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* pool, int device) { return cudaDeviceGetDefaultMemPool(pool, device); }
inline cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
    if (!pool || !props) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *pool = new CUmemPoolHandle_st{};
    (*pool)->props = *props;
    return cudaSuccess;
}
inline cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
    if (!pool || pool == cpu_cuda::default_mem_pool()) return cpu_cuda::set_error(cudaErrorInvalidValue);
    delete pool;
    return cudaSuccess;
}
inline cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t) {
    return pool ? cudaSuccess : cpu_cuda::set_error(cudaErrorInvalidValue);
}
inline cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
    if (!pool || !value) return cpu_cuda::set_error(cudaErrorInvalidValue);
    switch (attr) {
        case cudaMemPoolAttrReleaseThreshold: pool->release_threshold = *(unsigned long long*)value; return cudaSuccess;
        case cudaMemPoolReuseFollowEventDependencies: pool->flags[0] = *(int*)value; return cudaSuccess;
        case cudaMemPoolReuseAllowOpportunistic: pool->flags[1] = *(int*)value; return cudaSuccess;
        case cudaMemPoolReuseAllowInternalDependencies: pool->flags[2] = *(int*)value; return cudaSuccess;
        default: return cpu_cuda::set_error(cudaErrorInvalidValue);  // the statistics are read-only
    }
}
inline cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
    if (!pool || !value) return cpu_cuda::set_error(cudaErrorInvalidValue);
    switch (attr) {
        case cudaMemPoolAttrReleaseThreshold: *(unsigned long long*)value = pool->release_threshold; return cudaSuccess;
        case cudaMemPoolReuseFollowEventDependencies: *(int*)value = pool->flags[0]; return cudaSuccess;
        case cudaMemPoolReuseAllowOpportunistic: *(int*)value = pool->flags[1]; return cudaSuccess;
        case cudaMemPoolReuseAllowInternalDependencies: *(int*)value = pool->flags[2]; return cudaSuccess;
        default:  // reserved and used memory: the pool holds none beyond what is allocated
            *(unsigned long long*)value = 0;
            return cudaSuccess;
    }
}

