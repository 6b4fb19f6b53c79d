// cpu_cuda/streams.h: each stream's work, in order, independent of the other streams.
//
// Each stream has a queue, which a worker thread of its own runs in order. An operation in a
// stream's order (a kernel, an asynchronous copy or memset, an event record, a wait on an
// event, a collective, a host function) runs at once on the calling thread when the stream
// has nothing queued, and is queued behind the stream's work when it has: so the host never
// waits for one stream's work to go on with another's, as on a GPU. Collectives and host
// functions are always queued (they may wait a long time), and so is a wait on an event whose
// record is still queued on another stream (cudaStreamWaitEvent returns at once, as CUDA's).
//
// The legacy default stream's rule (CUDA's "implicit synchronization"): its work waits for the
// earlier work of every blocking stream (created without cudaStreamNonBlocking), and theirs
// for its. Here the host waits for those queues before such an operation (settle_default);
// the calls in nobody's stream order (cudaMalloc, cudaMemcpy, cudaMemset, ...) act on the
// legacy default stream, and cudaDeviceSynchronize, cudaFree and the like wait for every
// queue (settle). Where the runtime cannot queue an operation (a cuBLAS product, a graph's
// launch) the host waits for its stream's queue first. That waits more than CUDA in places,
// never less, and never for a stream that CUDA does not order before the operation.
//
// CPU_CUDA_DELAY_STREAM=K:MS (settings.h) queues all of the K-th created stream's work (0: the
// legacy default stream's) and starts each piece MS milliseconds late, so that an event wait
// missing between that stream and another one shows as a wrong result instead of passing by luck.
#pragma once
#include <cuda_runtime.h>

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace cpu_cuda {

inline thread_local bool on_stream_worker = false;  // true on the threads that run queued work

class StreamQueue {
  public:
    bool nonblocking = false;  // created with cudaStreamNonBlocking: outside the legacy stream's rule
    int delay_ms = 0;          // CPU_CUDA_DELAY_STREAM: everything queued, each piece this much late
    // Runs `task` on the worker after everything enqueued before it.
    void enqueue(std::function<void()> task) {
        std::lock_guard<std::mutex> lock(mutex_);
        tasks_.push_back(std::move(task));
        unfinished_++;
        if (!started_) {
            started_ = true;
            // Detached: a process that exits while a collective waits for a frozen peer must
            // not wait for it too.
            std::thread([this] { loop(); }).detach();
        }
        changed_.notify_all();
    }
    bool busy() {
        std::lock_guard<std::mutex> lock(mutex_);
        return unfinished_ > 0;
    }
    void drain() {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [this] { return unfinished_ == 0; });
    }

  private:
    void loop() {
        on_stream_worker = true;
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            changed_.wait(lock, [this] { return !tasks_.empty(); });
            std::function<void()> task = std::move(tasks_.front());
            tasks_.pop_front();
            lock.unlock();
            if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
            task();
            lock.lock();
            unfinished_--;
            changed_.notify_all();
        }
    }
    std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<std::function<void()>> tasks_;
    int unfinished_ = 0;  // enqueued and not yet finished
    bool started_ = false;
};

// The queues, by stream (the legacy and per-thread default streams share one). Never
// freed: their workers are detached. A forked child starts with none, since it has no
// threads but the one that forked (what its parent had in flight is not its work).
struct StreamQueues {
    std::mutex mutex;
    std::map<const void*, std::unique_ptr<StreamQueue>> queues;
};
inline StreamQueues*& stream_queues_ptr() {
    static StreamQueues* q = [] {
        pthread_atfork(nullptr, nullptr, [] { stream_queues_ptr() = new StreamQueues; });
        return new StreamQueues;
    }();
    return q;
}
// Streams created so far by cudaStreamCreate* (CPU_CUDA_DELAY_STREAM counts them from 1).
inline std::atomic<int>& streams_created() {
    static std::atomic<int> n{0};
    return n;
}
inline const void* queue_key(const void* stream) {
    return stream == (const void*)cudaStreamLegacy || stream == (const void*)cudaStreamPerThread ? nullptr : stream;
}
inline StreamQueue& stream_queue(const void* stream) {
    StreamQueues& q = *stream_queues_ptr();
    std::lock_guard<std::mutex> lock(q.mutex);
    std::unique_ptr<StreamQueue>& s = q.queues[queue_key(stream)];
    if (!s) s = std::make_unique<StreamQueue>();
    return *s;
}
// The stream has queued work that has not finished.
inline bool stream_busy(const void* stream) {
    StreamQueues& q = *stream_queues_ptr();
    std::lock_guard<std::mutex> lock(q.mutex);
    auto it = q.queues.find(queue_key(stream));
    return it != q.queues.end() && it->second->busy();
}
// Waits for every stream's queued work (a call from a worker thread waits for nothing:
// its own queue would never drain), or, with only_blocking, for the legacy default stream's
// and the blocking streams' (the legacy stream's rule above), and, with but_default, not for
// the legacy default stream's own.
inline void settle(bool only_blocking = false, bool but_default = false) {
    if (on_stream_worker) return;
    std::vector<StreamQueue*> all;
    {
        StreamQueues& q = *stream_queues_ptr();
        std::lock_guard<std::mutex> lock(q.mutex);
        for (auto& kv : q.queues)
            if ((!only_blocking || !kv.second->nonblocking) && (!but_default || kv.first != nullptr))
                all.push_back(kv.second.get());
    }
    for (StreamQueue* s : all) s->drain();
}
// What an operation on the legacy default stream waits for, and a call in no stream's order.
inline void settle_default() { settle(true); }
inline bool is_default_stream(const void* stream) { return queue_key(stream) == nullptr; }
// Before an operation in `stream`'s order, from the host: waits for the work of other streams
// that CUDA orders before it (the legacy stream's rule), and answers whether the operation
// must be queued behind the stream's own (it has work queued, or it is the delayed stream).
// A worker thread runs what it has been given, at once.
inline bool queue_behind(const void* stream) {
    if (on_stream_worker) return false;
    StreamQueue& own = stream_queue(stream);
    if (is_default_stream(stream)) settle(true, true);  // every blocking stream's work
    else if (!own.nonblocking) stream_queue(nullptr).drain();  // the legacy default stream's
    return own.delay_ms > 0 || own.busy();
}
// The same, for an operation that runs on the host's thread whatever the stream has queued:
// it waits for the stream's queue too.
inline void wait_for_stream(const void* stream) {
    if (queue_behind(stream)) stream_queue(stream).drain();
}

}  // namespace cpu_cuda
