// cpu_cuda/graphs.h: CUDA graphs on the CPU runtime, as the CUDA C++ Programming Guide's "CUDA
// Graphs" describes them: built by hand (kernel, memcpy, memset, host and empty nodes with
// their dependencies) or by stream capture (capture.h: the launches, async copies and memsets,
// host functions and events of a capturing stream, and of the streams that join it by waiting
// on its events, become nodes), then instantiated and launched into a stream. A launched graph
// runs its nodes one after another in the order they were added, which respects every
// dependency. cudaLaunchHostFunc is here too: outside a capture it runs the function in stream
// order.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "capture.h"
#include "exec.h"
#include "runtime.h"
#include "textures.h"

namespace cpu_cuda {

// ---- kernels by address (capture.h): the rewrite's (void*)k files k with this binder
template <class... P, size_t... I>
GraphWork bind_kernel_args(const char* name, void (*k)(P...), dim3 grid, dim3 block, void** args, size_t smem,
                           bool cooperative, std::index_sequence<I...>) {
    if (sizeof...(P) && !args) return nullptr;
    // the arguments are copied now, as CUDA copies a kernel node's parameters when it is made
    std::tuple<std::decay_t<P>...> values(*static_cast<std::decay_t<P>*>(args[I])...);
    KeptPointers kept = kept_arguments(values);
    return [=](cudaStream_t stream) {
        if (!kept.still_live(name)) return set_error(cudaErrorIllegalAddress);  // as a launch with such an argument
        auto config = launch_config(name, k, grid, block, smem, stream);
        config.cooperative = cooperative;
        return std::apply([&](const auto&... v) { return config.launch(v...); }, values);
    };
}
template <class... P>
GraphWork bind_kernel(const void* func, const char* name, dim3 grid, dim3 block, void** args, size_t smem,
                      bool cooperative) {
    auto k = reinterpret_cast<void (*)(P...)>(const_cast<void*>(func));
    return bind_kernel_args(name, k, grid, block, args, smem, cooperative, std::index_sequence_for<P...>{});
}
template <class... P>
void* kernel_address(const char* name, void (*k)(P...)) {
    std::lock_guard<std::mutex> lock(kernels_mutex());
    known_kernels().emplace((const void*)k, KnownKernel{name, &bind_kernel<P...>});
    return (void*)k;
}

inline cudaError_t graph_error(cudaError_t e, const char* call, const std::string& why) {
    fprintf(stderr, "cpu_cuda: %s: %s (%s)\n", call, why.c_str(), cudaGetErrorName(e));
    return set_error(e);
}
// cudaErrorInvalidValue, with a line, when graph (a CUgraph_st or CUgraphExec_st) is not live
inline cudaError_t refuse_dead(const void* graph, const char* call, const char* what) {
    if (graph_live(graph)) return cudaSuccess;
    char h[32];
    snprintf(h, sizeof h, "%p", graph);
    return graph_error(cudaErrorInvalidValue, call, std::string(what) + " " + h + " was destroyed or never made");
}

// A new node of graph after deps, which must be the graph's own nodes
inline cudaError_t add_node(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps, size_t n,
                            cudaGraphNodeType type, GraphWork run, const char* call) {
    if (!node || !graph || (n && !deps)) return set_error(cudaErrorInvalidValue);
    if (cudaError_t e = refuse_dead(graph, call, "graph")) return e;
    for (size_t i = 0; i < n; i++)
        if (!deps[i] || deps[i]->graph != graph)
            return graph_error(cudaErrorInvalidValue, call, "dependency " + std::to_string(i) + " is not a node of this graph");
    *node = graph->add(type, std::move(run), std::vector<CUgraphNode_st*>(deps, deps + n));
    return cudaSuccess;
}

// A 3-D copy between pitched pointers: extent.width bytes by height rows by depth slices,
// from and to the positions (x in bytes). CUDA arrays in a 3-D copy are not here.
inline cudaError_t copy_3d(const cudaMemcpy3DParms& p, const char* call) {
    if (p.srcArray || p.dstArray)
        return graph_error(cudaErrorNotSupported, call, "3-D copies to or from CUDA arrays are not supported on the CPU runtime");
    auto at = [](const cudaPitchedPtr& q, const cudaPos& pos, size_t z) {
        return (char*)q.ptr + (pos.z + z) * q.pitch * q.ysize + pos.y * q.pitch + pos.x;
    };
    for (size_t z = 0; z < p.extent.depth; z++)
        if (cudaError_t e = copy_rows(at(p.dstPtr, p.dstPos, z), p.dstPtr.pitch, at(p.srcPtr, p.srcPos, z), p.srcPtr.pitch,
                                      p.extent.width, p.extent.height, p.kind, call))
            return e;
    return cudaSuccess;
}

// Whether node a is b or one of b's ancestors
inline bool reaches(const CUgraphNode_st* a, const CUgraphNode_st* b) {
    if (a == b) return true;
    for (const CUgraphNode_st* d : b->deps)
        if (reaches(a, d)) return true;
    return false;
}

}  // namespace cpu_cuda

// ----------------------------------------------------------------------------
// Graphs built by hand

inline cudaError_t cudaGraphCreate(cudaGraph_t* graph, unsigned int flags) {
    if (!graph || flags != 0) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *graph = new CUgraph_st;
    cpu_cuda::graph_made(*graph);
    return cudaSuccess;
}
inline cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    if (!graph) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (!cpu_cuda::graph_destroyed(graph)) return cpu_cuda::refuse_dead(graph, "cudaGraphDestroy", "graph");
    graph->nodes.clear();  // (the graph itself is kept: its address is never reused)
    return cudaSuccess;
}
inline cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                          size_t n, const cudaKernelNodeParams* p) {
    const char* call = "cudaGraphAddKernelNode";
    if (!p) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (p->extra) return cpu_cuda::graph_error(cudaErrorNotSupported, call, "kernel arguments in `extra` form are not supported on the CPU runtime; use kernelParams");
    const cpu_cuda::KnownKernel* k = cpu_cuda::known_kernel(p->func);
    if (!k)
        return cpu_cuda::graph_error(cudaErrorInvalidDeviceFunction, call,
                                     "the CPU runtime does not know the parameters of the kernel at func; take its "
                                     "address with a cast of its name, (void*)kernel, in a file the build rewrites");
    cpu_cuda::GraphWork run = k->bind(p->func, k->name, p->gridDim, p->blockDim, p->kernelParams, p->sharedMemBytes, false);
    if (!run) return cpu_cuda::graph_error(cudaErrorInvalidValue, call, "kernelParams is null");
    return cpu_cuda::add_node(node, graph, deps, n, cudaGraphNodeTypeKernel, std::move(run), call);
}
inline cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                          size_t n, const cudaMemcpy3DParms* p) {
    if (!p) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (p->srcArray || p->dstArray)
        return cpu_cuda::graph_error(cudaErrorNotSupported, "cudaGraphAddMemcpyNode", "copies to or from CUDA arrays are not supported in graphs on the CPU runtime");
    const cudaMemcpy3DParms copy = *p;
    cpu_cuda::KeptPointers kept;
    kept.keep(p->srcPtr.ptr, "srcPtr.ptr"), kept.keep(p->dstPtr.ptr, "dstPtr.ptr");
    return cpu_cuda::add_node(node, graph, deps, n, cudaGraphNodeTypeMemcpy, [copy, kept](cudaStream_t) {
        const char* call = "cudaGraphAddMemcpyNode's copy";
        if (!kept.still_live(call)) return cpu_cuda::set_error(cudaErrorInvalidValue);
        return cpu_cuda::copy_3d(copy, call);
    }, "cudaGraphAddMemcpyNode");
}
inline cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                            size_t n, void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
    cpu_cuda::KeptPointers kept;
    kept.keep(src, "src"), kept.keep(dst, "dst");
    return cpu_cuda::add_node(node, graph, deps, n, cudaGraphNodeTypeMemcpy, [=](cudaStream_t) {
        const char* call = "cudaGraphAddMemcpyNode1D's copy";
        if (!kept.still_live(call)) return cpu_cuda::set_error(cudaErrorInvalidValue);
        return cpu_cuda::copy(dst, src, count, kind, call);
    }, "cudaGraphAddMemcpyNode1D");
}
// width elements of elementSize (1, 2 or 4) bytes in each of height rows, pitch bytes apart
inline cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                          size_t n, const cudaMemsetParams* p) {
    const char* call = "cudaGraphAddMemsetNode";
    if (!p) return cpu_cuda::set_error(cudaErrorInvalidValue);
    const size_t es = p->elementSize, rows = std::max<size_t>(p->height, 1);
    if (es != 1 && es != 2 && es != 4)
        return cpu_cuda::graph_error(cudaErrorInvalidValue, call, "elementSize " + std::to_string(es) + " (1, 2 or 4)");
    if (rows > 1 && p->width * es > p->pitch)
        return cpu_cuda::graph_error(cudaErrorInvalidValue, call, "a row of " + std::to_string(p->width * es) +
                                                                      " bytes is wider than the pitch, " + std::to_string(p->pitch));
    const cudaMemsetParams m = *p;
    cpu_cuda::KeptPointers kept;
    kept.keep(p->dst, "dst");
    return cpu_cuda::add_node(node, graph, deps, n, cudaGraphNodeTypeMemset, [m, es, rows, kept](cudaStream_t) {
        if (!kept.still_live("cudaGraphAddMemsetNode's memset")) return cpu_cuda::set_error(cudaErrorInvalidValue);
        for (size_t r = 0; r < rows; r++) {
            char* row = (char*)m.dst + r * m.pitch;
            if (!cpu_cuda::check_range(row, m.width * es, "cudaGraphAddMemsetNode's memset", "destination"))
                return cpu_cuda::set_error(cudaErrorInvalidValue);
            cpu_cuda::DeviceAccess access;
            for (size_t i = 0; i < m.width; i++) memcpy(row + i * es, &m.value, es);  // (the low bytes: little-endian)
        }
        return cudaSuccess;
    }, call);
}
inline cudaError_t cudaGraphAddHostNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                        size_t n, const cudaHostNodeParams* p) {
    if (!p || !p->fn) return cpu_cuda::set_error(cudaErrorInvalidValue);
    const cudaHostFn_t fn = p->fn;
    void* data = p->userData;
    return cpu_cuda::add_node(node, graph, deps, n, cudaGraphNodeTypeHost, [fn, data](cudaStream_t) {
        cpu_cuda::HostFnScope scope;  // (no CUDA calls in there: capture.h)
        fn(data);
        return cudaSuccess;
    }, "cudaGraphAddHostNode");
}
inline cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps, size_t n) {
    return cpu_cuda::add_node(node, graph, deps, n, cudaGraphNodeTypeEmpty, [](cudaStream_t) { return cudaSuccess; },
                              "cudaGraphAddEmptyNode");
}

// ----------------------------------------------------------------------------
// Reading a graph, copying it

// nodes null: the count into *count; else up to *count nodes, and *count the number written
inline cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
    if (!graph || !count) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (cudaError_t e = cpu_cuda::refuse_dead(graph, "cudaGraphGetNodes", "graph")) return e;
    if (!nodes) {
        *count = graph->nodes.size();
        return cudaSuccess;
    }
    *count = std::min(*count, graph->nodes.size());
    for (size_t i = 0; i < *count; i++) nodes[i] = graph->nodes[i].get();
    return cudaSuccess;
}
inline cudaError_t cudaGraphGetRootNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
    if (!graph || !count) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (cudaError_t e = cpu_cuda::refuse_dead(graph, "cudaGraphGetRootNodes", "graph")) return e;
    size_t roots = 0, capacity = *count;
    for (const auto& node : graph->nodes)
        if (node->deps.empty()) {
            if (nodes && roots < capacity) nodes[roots] = node.get();
            roots++;
        }
    *count = nodes ? std::min(roots, capacity) : roots;
    return cudaSuccess;
}
inline cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
    if (!node || !type) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *type = node->type;
    return cudaSuccess;
}
inline cudaError_t cudaGraphClone(cudaGraph_t* clone, cudaGraph_t graph) {
    if (!clone || !graph) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (cudaError_t e = cpu_cuda::refuse_dead(graph, "cudaGraphClone", "graph")) return e;
    auto* g = new CUgraph_st;
    cpu_cuda::graph_made(g);
    std::map<const CUgraphNode_st*, CUgraphNode_st*> copy_of;
    for (const auto& node : graph->nodes) {
        std::vector<CUgraphNode_st*> deps;
        for (const CUgraphNode_st* d : node->deps) deps.push_back(copy_of.at(d));
        copy_of[node.get()] = g->add(node->type, node->run, std::move(deps));
    }
    *clone = g;
    return cudaSuccess;
}

// ----------------------------------------------------------------------------
// Running a graph

inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
    if (!exec || !graph) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (cudaError_t e = cpu_cuda::refuse_dead(graph, "cudaGraphInstantiate", "graph")) return e;
    (void)flags;  // (auto-free on launch, upload, device launch, priority: nothing to do here)
    auto* x = new CUgraphExec_st;
    for (const auto& node : graph->nodes) x->steps.push_back(node->run);
    cpu_cuda::graph_made(x);
    *exec = x;
    return cudaSuccess;
}
inline cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
    return cudaGraphInstantiate(exec, graph, flags);
}
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    if (!exec) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (cudaError_t e = cpu_cuda::refuse_in_host_fn("cudaGraphLaunch")) return cpu_cuda::set_error(e);
    if (cudaError_t e = cpu_cuda::refuse_dead(exec, "cudaGraphLaunch", "executable graph")) return e;
    if (!cpu_cuda::valid_stream(stream)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    if (cpu_cuda::capturing(stream))
        return cpu_cuda::graph_error(cudaErrorNotSupported, "cudaGraphLaunch",
                                     "a graph launched into a capturing stream (a child graph) is not supported on the CPU runtime");
    cpu_cuda::wait_for_stream(stream);  // after the stream's earlier work (its nodes run on this thread)
    for (const cpu_cuda::GraphWork& step : exec->steps)
        if (cudaError_t e = step(stream)) return e;
    return cudaSuccess;
}
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    if (!exec) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (!cpu_cuda::graph_destroyed(exec)) return cpu_cuda::refuse_dead(exec, "cudaGraphExecDestroy", "executable graph");
    exec->steps.clear();  // (kept, as a destroyed graph)
    return cudaSuccess;
}

// ----------------------------------------------------------------------------
// Stream capture (capture.h holds the state; the calls that record are in exec.h and runtime.h)

// The mode says which captures forbid which threads the potentially unsafe calls (capture.h's
// refuse_unsafe); a capture not begun in Relaxed mode must be ended by the thread that began it.
inline cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
    if (cudaError_t e = cpu_cuda::refuse_in_host_fn("cudaStreamBeginCapture")) return cpu_cuda::set_error(e);
    if (!cpu_cuda::valid_stream(stream)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal && mode != cudaStreamCaptureModeRelaxed)
        return cpu_cuda::graph_error(cudaErrorInvalidValue, "cudaStreamBeginCapture", "mode " + std::to_string((int)mode) +
                                     " is not a cudaStreamCaptureMode (Global 0, ThreadLocal 1, Relaxed 2)");
    if (stream == nullptr || stream == cudaStreamLegacy)
        return cpu_cuda::graph_error(cudaErrorStreamCaptureUnsupported, "cudaStreamBeginCapture",
                                     "the legacy default stream cannot be captured; use a stream of your own");
    std::lock_guard<std::mutex> lock(cpu_cuda::capture_mutex());
    if (cpu_cuda::captures().count(stream)) return cpu_cuda::set_error(cudaErrorIllegalState);
    cpu_cuda::captures()[stream] = {new CUgraph_st, stream, {}, false, mode, std::this_thread::get_id()};
    cpu_cuda::graph_made(cpu_cuda::captures()[stream].graph);
    cpu_cuda::capturing_streams++;
    return cudaSuccess;
}
// Ends the capture on the stream that began it, and on every stream that joined it. A joined
// stream whose last nodes the origin stream does not depend on (it did not wait on an event
// recorded there after its work) is unjoined: CUDA's cudaErrorStreamCaptureUnjoined, no graph.
inline cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
    if (!graph) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *graph = nullptr;
    std::lock_guard<std::mutex> lock(cpu_cuda::capture_mutex());
    auto& all = cpu_cuda::captures();
    auto it = all.find(stream);
    if (it == all.end()) return cpu_cuda::set_error(cudaErrorIllegalState);
    if (it->second.origin != stream) return cpu_cuda::set_error(cudaErrorStreamCaptureUnmatched);
    if (it->second.mode != cudaStreamCaptureModeRelaxed && it->second.thread != std::this_thread::get_id())
        return cpu_cuda::set_error(cudaErrorStreamCaptureWrongThread);  // (cudaStreamBeginCapture's documentation)
    CUgraph_st* g = it->second.graph;
    const std::vector<CUgraphNode_st*> last = it->second.frontier;
    const bool invalidated = it->second.invalidated;
    bool unjoined = false;
    for (auto c = all.begin(); c != all.end();) {
        if (c->second.graph != g) {
            ++c;
            continue;
        }
        for (const CUgraphNode_st* n : c->second.frontier)
            unjoined |= std::none_of(last.begin(), last.end(), [&](const CUgraphNode_st* l) { return cpu_cuda::reaches(n, l); });
        c = all.erase(c);
        cpu_cuda::capturing_streams--;
    }
    if (invalidated) {
        cpu_cuda::graph_destroyed(g);
        delete g;
        return cpu_cuda::graph_error(cudaErrorStreamCaptureInvalidated, "cudaStreamEndCapture",
                                     "the capture was invalidated by a call not permitted during capture");
    }
    if (unjoined) {
        cpu_cuda::graph_destroyed(g);
        delete g;
        return cpu_cuda::graph_error(cudaErrorStreamCaptureUnjoined, "cudaStreamEndCapture",
                                     "a stream that joined the capture did not rejoin the stream that began it "
                                     "(record an event on it after its work, and wait on that event here)");
    }
    *graph = g;
    return cudaSuccess;
}
inline cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
    if (!status) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (!cpu_cuda::valid_stream(stream)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    *status = cpu_cuda::capture_status(stream);
    return cudaSuccess;
}
// Sets the calling thread's capture interaction mode to *mode and answers the one it had
inline cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
    if (!mode || (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
                  *mode != cudaStreamCaptureModeRelaxed))
        return cpu_cuda::set_error(cudaErrorInvalidValue);
    std::swap(*mode, cpu_cuda::thread_capture_mode);
    return cudaSuccess;
}

// fn(data) after the stream's earlier work, on the stream's worker thread (the call returns at
// once, as CUDA's does); in a capture, a host node
inline cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
    if (!fn) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (cudaError_t e = cpu_cuda::refuse_in_host_fn("cudaLaunchHostFunc")) return cpu_cuda::set_error(e);
    if (!cpu_cuda::valid_stream(stream)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    if (cpu_cuda::capturing(stream))
        return cpu_cuda::capture(stream, cudaGraphNodeTypeHost, [fn, data](cudaStream_t) {
            cpu_cuda::HostFnScope scope;
            fn(data);
            return cudaSuccess;
        });
    cpu_cuda::queue_behind(stream);  // (the legacy default stream's rule)
    cpu_cuda::stream_queue(stream).enqueue([fn, data] {  // on the stream's worker, as on a GPU
        cpu_cuda::HostFnScope scope;
        fn(data);
    });
    return cudaSuccess;
}
inline cudaError_t cudaMemcpy3D(const cudaMemcpy3DParms* p) {
    if (!p) return cpu_cuda::set_error(cudaErrorInvalidValue);
    return cpu_cuda::copy_3d(*p, "cudaMemcpy3D");
}
