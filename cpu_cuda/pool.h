// cpu_cuda/pool.h: the OS threads that run blocks and cuBLAS tiles.
//
// A plain pool rather than OpenMP: its workers sleep on a condition variable between
// launches instead of spinning, which matters on a small shared machine where a spinning
// OpenMP team (the CPU trainer's, in the same process) would steal the cores.
#pragma once
#include <atomic>
#include <unistd.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "settings.h"

namespace cpu_cuda {

class Pool {
  public:
    explicit Pool(int threads) : owner_(getpid()) {
        for (int i = 1; i < threads; i++) workers_.emplace_back([this] { work(); });
    }
    int size() const { return (int)workers_.size() + 1; }

    // Calls task(i) for every i in [0, n), shared out over the workers and the calling
    // thread, in increasing i per thread; returns when all calls have returned. A call from
    // inside a task runs its tasks in order on the calling thread.
    void run(size_t n, const std::function<void(size_t)>& task) {
        if (n == 0) return;
        // (a child made by fork has none of the workers: it runs everything itself)
        if (n == 1 || workers_.empty() || inside_ || getpid() != owner_) {
            for (size_t i = 0; i < n; i++) task(i);
            return;
        }
        std::unique_lock<std::mutex> lock(mutex_);
        task_ = &task, count_ = n, next_ = 0, busy_ = (int)workers_.size();
        generation_++;
        lock.unlock();
        wake_.notify_all();
        take_tasks();
        lock.lock();
        done_.wait(lock, [this] { return busy_ == 0; });
        task_ = nullptr;
    }

  private:
    void take_tasks() {
        inside_ = true;
        for (size_t i; (i = next_.fetch_add(1)) < count_;) (*task_)(i);
        inside_ = false;
    }
    void work() {
        uint64_t seen = 0;
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            wake_.wait(lock, [&] { return generation_ != seen; });
            seen = generation_;
            lock.unlock();
            take_tasks();
            lock.lock();
            if (--busy_ == 0) done_.notify_one();
        }
    }

    pid_t owner_;
    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    const std::function<void(size_t)>* task_ = nullptr;
    size_t count_ = 0;
    std::atomic<size_t> next_{0};
    int busy_ = 0;
    uint64_t generation_ = 0;
    static inline thread_local bool inside_ = false;
};

// Never destroyed: its threads sleep until the process ends, and a child made by fork
// (which has none of them) has nothing to join either.
inline Pool& pool() {
    static Pool* p = new Pool(settings().threads);
    return *p;
}

}  // namespace cpu_cuda
