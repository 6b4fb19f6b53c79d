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
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
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
