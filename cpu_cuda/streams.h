// cpu_cuda/streams.h: the work a stream runs after the call that enqueued it has returned.
//
// Most of the runtime is synchronous: a kernel, a memset or a cuBLAS call has run when its
// call returns. A GPU is not, and a host that waits for a collective the way CUDA programs
// do (cudaStreamQuery in a loop, under a timeout) must see a collective in flight: so NCCL's
// collectives, and the copies, event records and collectives enqueued behind one, go into
// the stream's queue, which a worker thread of its own runs in order. cudaStreamQuery
// answers cudaErrorNotReady until the queue is empty.
//
// Every other call waits for every queue first (settle(): memory.h's DeviceAccess calls it
// when a host thread enters the runtime), so work still runs in stream order, and no
// synchronous call ever sees a buffer that queued work has not finished with. That waits
// more than CUDA would, never less.
#pragma once
#include <cuda_runtime.h>

#include <pthread.h>

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
// its own queue would never drain).
inline void settle() {
    if (on_stream_worker) return;
    std::vector<StreamQueue*> all;
    {
        StreamQueues& q = *stream_queues_ptr();
        std::lock_guard<std::mutex> lock(q.mutex);
        for (auto& kv : q.queues) all.push_back(kv.second.get());
    }
    for (StreamQueue* s : all) s->drain();
}

}  // namespace cpu_cuda
