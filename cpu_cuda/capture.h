// cpu_cuda/capture.h: what a CUDA graph holds, and the streams that record into one (stream
// capture). graphs.h has the API; this part comes first because the calls that would run work
// on a stream (a launch in exec.h, the async copies and event calls in runtime.h) record a node
// instead while their stream is capturing.
//
// A graph here is its nodes in the order they were added. A node can only depend on nodes that
// exist already, so that order is a topological one, and a launched graph runs its nodes in it,
// one after another (a GPU may overlap independent nodes; no correct program can tell).
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace cpu_cuda {
using GraphWork = std::function<cudaError_t(cudaStream_t)>;  // a node's work, on the stream the graph is launched into
}
// The toolkit leaves these handles opaque; the runtime defines them.
struct CUgraphNode_st {
    cudaGraphNodeType type;
    cpu_cuda::GraphWork run;
    std::vector<CUgraphNode_st*> deps;
    struct CUgraph_st* graph;
};
struct CUgraph_st {
    std::vector<std::unique_ptr<CUgraphNode_st>> nodes;  // in the order added: each after its dependencies
    CUgraphNode_st* add(cudaGraphNodeType type, cpu_cuda::GraphWork run, std::vector<CUgraphNode_st*> deps) {
        nodes.push_back(std::make_unique<CUgraphNode_st>(CUgraphNode_st{type, std::move(run), std::move(deps), this}));
        return nodes.back().get();
    }
};
struct CUgraphExec_st {
    std::vector<cpu_cuda::GraphWork> steps;  // a snapshot: later changes to the graph do not reach it
};

namespace cpu_cuda {

// Graphs and executable graphs made and not yet destroyed. A destroyed one's memory is kept
// (emptied), so that its address is never reused and a stale handle is refused, not run.
inline std::mutex& graphs_mutex() {
    static std::mutex m;
    return m;
}
inline std::set<const void*>& live_graphs() {  // CUgraph_st and CUgraphExec_st
    static std::set<const void*> s;
    return s;
}
inline void graph_made(const void* g) {
    std::lock_guard<std::mutex> lock(graphs_mutex());
    live_graphs().insert(g);
}
inline bool graph_live(const void* g) {
    std::lock_guard<std::mutex> lock(graphs_mutex());
    return g && live_graphs().count(g) > 0;
}
// False when g was not live (destroyed already, or never made)
inline bool graph_destroyed(const void* g) {
    std::lock_guard<std::mutex> lock(graphs_mutex());
    return live_graphs().erase(g) > 0;
}

// A stream recording into a graph: the graph, the stream whose cudaStreamBeginCapture started
// it (others join by waiting on an event recorded in the capture), and the nodes its next
// node depends on.
struct Capture {
    CUgraph_st* graph;
    const void* origin;
    std::vector<CUgraphNode_st*> frontier;
    bool invalidated = false;  // by a call CUDA does not permit during capture: its end gives no graph
    // cudaStreamBeginCapture's mode and the thread that called it (kept on the origin stream's entry)
    cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
    std::thread::id thread{};
};
inline std::mutex& capture_mutex() {
    static std::mutex m;
    return m;
}
inline std::map<const void*, Capture>& captures() {  // by stream
    static std::map<const void*, Capture> c;
    return c;
}
inline std::atomic<int> capturing_streams{0};  // 0: every stream runs its work (no lock taken)

inline bool capturing(const void* stream) {
    if (capturing_streams.load(std::memory_order_relaxed) == 0) return false;
    std::lock_guard<std::mutex> lock(capture_mutex());
    return captures().count(stream) > 0;
}
// Marks every capture under way invalidated; false when there is none
inline bool invalidate_captures() {
    if (capturing_streams.load() == 0) return false;
    std::lock_guard<std::mutex> lock(capture_mutex());
    for (auto& c : captures()) c.second.invalidated = true;
    return !captures().empty();
}
// Marks the capture sequence that `stream` records into invalidated (every stream in it)
inline void invalidate_capture_of(const void* stream) {
    std::lock_guard<std::mutex> lock(capture_mutex());
    auto it = captures().find(stream);
    if (it == captures().end()) return;
    for (auto& c : captures())
        if (c.second.graph == it->second.graph) c.second.invalidated = true;
}
// cudaStreamSynchronize (or cudaStreamQuery) on a capturing stream. The programming guide's
// stream capture section ("Prohibited and Unhandled Operations") says that synchronizing or
// querying a capturing stream is invalid, and that an invalid operation invalidates the capture
// it concerns: the call answers cudaErrorStreamCaptureUnsupported and the capture's end then
// gives cudaErrorStreamCaptureInvalidated and no graph.
inline cudaError_t refuse_capturing_stream(const void* stream, const char* call) {
    invalidate_capture_of(stream);
    fprintf(stderr, "cpu_cuda: %s: the stream is capturing, which CUDA does not permit; the capture is invalidated "
                    "(cudaErrorStreamCaptureUnsupported)\n", call);
    return cudaErrorStreamCaptureUnsupported;
}

// The calling thread's stream capture interaction mode (cudaThreadExchangeStreamCaptureMode):
// Global unless changed, as CUDA's default.
inline thread_local cudaStreamCaptureMode thread_capture_mode = cudaStreamCaptureModeGlobal;

// A host function running (cudaLaunchHostFunc's fn, a graph's host node): set around each
// fn(data) call, on the thread that runs it.
inline thread_local int in_host_fn = 0;
struct HostFnScope {
    HostFnScope() { in_host_fn++; }
    ~HostFnScope() { in_host_fn--; }
    HostFnScope(const HostFnScope&) = delete;
    HostFnScope& operator=(const HostFnScope&) = delete;
};
// CUDA's documentation of cudaLaunchHostFunc (and of host nodes, cudaGraphAddHostNode) says the
// host function must not make CUDA API calls, and that such a call may answer
// cudaErrorNotPermitted. Here it always does, with one line, so that a program that gets away
// with one on this runtime does not meet it first on a GPU (where it may also deadlock).
// cudaSuccess when the call is allowed.
inline cudaError_t refuse_in_host_fn(const char* call) {
    if (in_host_fn == 0) return cudaSuccess;
    fprintf(stderr, "cpu_cuda: %s: called from a host function (cudaLaunchHostFunc or a graph's host node), which "
                    "must not make CUDA calls (cudaErrorNotPermitted)\n", call);
    return cudaErrorNotPermitted;
}

// A potentially unsafe call (cudaMalloc, cudaFree, a synchronous copy or memset: work that is not
// on a stream, which a capture cannot record) while captures are under way. The rules are those
// of cudaThreadExchangeStreamCaptureMode's documentation: a thread in Global mode (the default)
// may not make one while it has a capture of its own begun in a mode other than Relaxed, nor
// while any other thread has a capture begun in Global mode; in ThreadLocal mode only its own
// captures count; in Relaxed mode none do. A refused call answers
// cudaErrorStreamCaptureUnsupported and invalidates the captures that forbade it. Also refused
// inside a host function (refuse_in_host_fn). cudaSuccess when the call is allowed.
inline cudaError_t refuse_unsafe(const char* call) {
    if (cudaError_t e = refuse_in_host_fn(call)) return e;
    if (capturing_streams.load() == 0 || thread_capture_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
    std::lock_guard<std::mutex> lock(capture_mutex());
    const std::thread::id me = std::this_thread::get_id();
    std::set<const CUgraph_st*> forbidding;
    for (const auto& [stream, c] : captures()) {
        if (c.origin != stream) continue;  // (each sequence once: at the stream that began it)
        const bool mine = c.thread == me;
        if ((mine && c.mode != cudaStreamCaptureModeRelaxed) ||
            (!mine && thread_capture_mode == cudaStreamCaptureModeGlobal && c.mode == cudaStreamCaptureModeGlobal))
            forbidding.insert(c.graph);
    }
    if (forbidding.empty()) return cudaSuccess;
    for (auto& c : captures())
        if (forbidding.count(c.second.graph)) c.second.invalidated = true;
    fprintf(stderr, "cpu_cuda: %s: not permitted during a stream capture begun in cudaStreamCaptureModeGlobal (or in "
                    "ThreadLocal mode on this thread); the capture is invalidated (cudaErrorStreamCaptureUnsupported; "
                    "make the call before the capture, or capture in cudaStreamCaptureModeRelaxed)\n", call);
    return cudaErrorStreamCaptureUnsupported;
}
// What cudaStreamIsCapturing answers for a stream
inline cudaStreamCaptureStatus capture_status(const void* stream) {
    if (capturing_streams.load() == 0) return cudaStreamCaptureStatusNone;
    std::lock_guard<std::mutex> lock(capture_mutex());
    auto it = captures().find(stream);
    if (it == captures().end()) return cudaStreamCaptureStatusNone;
    return it->second.invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
}
// A destroyed stream leaves any capture it was in (a later stream may reuse its address)
inline void forget_capture(const void* stream) {
    if (capturing_streams.load() == 0) return;
    std::lock_guard<std::mutex> lock(capture_mutex());
    if (captures().erase(stream)) capturing_streams--;
}
// Records work as the capturing stream's next node (its call returns cudaSuccess, as CUDA's
// does during capture: the work runs when the graph is launched).
inline cudaError_t capture(const void* stream, cudaGraphNodeType type, GraphWork run) {
    std::lock_guard<std::mutex> lock(capture_mutex());
    Capture& c = captures().at(stream);
    if (c.invalidated) return cudaErrorStreamCaptureInvalidated;
    c.frontier = {c.graph->add(type, std::move(run), c.frontier)};
    return cudaSuccess;
}

// Kernels known by address: a kernel's address cast to void* has lost its parameter types,
// which a launch from it needs (cudaLaunchKernel with a variable, a graph's kernel node). The
// rewrite turns (void*)k into kernel_address("k", k) (graphs.h), which files the kernel here
// with a function that binds its arguments from an array of pointers, as CUDA does.
using BindKernel = GraphWork (*)(const void* func, const char* name, dim3 grid, dim3 block, void** args, size_t smem,
                                 bool cooperative);
struct KnownKernel {
    const char* name;
    BindKernel bind;
};
inline std::mutex& kernels_mutex() {
    static std::mutex m;
    return m;
}
inline std::map<const void*, KnownKernel>& known_kernels() {
    static std::map<const void*, KnownKernel> k;
    return k;
}
inline const KnownKernel* known_kernel(const void* func) {
    std::lock_guard<std::mutex> lock(kernels_mutex());
    auto it = known_kernels().find(func);
    return it == known_kernels().end() ? nullptr : &it->second;  // (entries are never removed)
}

}  // namespace cpu_cuda
