// cpu_cuda/memory.h: device memory. Every allocation is tracked, so that the runtime can
// tell a device pointer from a host one, check that a copy, memset, cuBLAS or NCCL call
// stays inside one allocation, and name the allocation a bad address falls into.
//
// Each allocation gets pages of its own (mmap) with an inaccessible guard page on either
// side, and it ends flush against the guard after it (up to 16 bytes of alignment), so a
// kernel that runs off the end faults at once. Fresh memory is filled with 0xFF bytes,
// which read as NaN in float32 and bf16: a read of something never written shows up.
//
// cudaMemGetInfo counts every byte allocated. With CPU_CUDA_DRIVER_PAGES=1 it counts as a
// GPU's driver does instead (DriverPages), so that code which measures memory through it can
// be tried against a GPU's answers.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "settings.h"
#include "streams.h"

namespace cpu_cuda {

constexpr size_t ALIGNMENT = 16;  // of every allocation: float4 and 128-bit loads need it

// Device memory as a GPU's driver charges it: in pages of 2 MiB. An allocation of at least
// LARGE bytes gets pages of its own, its size rounded up; smaller ones are carved out of
// shared pages, which stay charged once taken (the driver keeps its pools; the context holds
// the first from the start), so a small cudaMalloc often costs nothing. (The thresholds are
// the usual ones; drivers differ.)
class DriverPages {
  public:
    static constexpr size_t PAGE = 2 << 20, LARGE = 1 << 20, SMALL_ALIGNMENT = 512;
    void add(size_t bytes) {
        if (bytes >= LARGE) {
            large_ += round_up(bytes, PAGE);
        } else {
            small_ += round_up(bytes, SMALL_ALIGNMENT);
            small_pages_ = std::max(small_pages_, round_up(small_, PAGE));
        }
    }
    void remove(size_t bytes) {
        if (bytes >= LARGE) large_ -= round_up(bytes, PAGE);
        else small_ -= round_up(bytes, SMALL_ALIGNMENT);
    }
    size_t charged() const { return large_ + small_pages_; }

  private:
    static size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }
    size_t large_ = 0, small_ = 0, small_pages_ = PAGE;
};

struct Allocation {
    char* ptr;        // what cudaMalloc returned
    size_t bytes;     // what was asked for
    char* map;        // the whole mapping, guards included
    size_t map_bytes;
    bool device;      // false: pinned host memory (cudaMallocHost), which kernels may read too
    bool registered = false;  // host memory of the program's, pinned by cudaHostRegister (not ours to unmap)
    uint64_t generation = 0;  // unique to this allocation: an address reused after a free gets a new one
    char* end() const { return ptr + bytes; }
};

class Memory {
  public:
    // Returns null when the device's capacity would be exceeded (cudaErrorMemoryAllocation).
    void* allocate(size_t bytes, bool device) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        size_t body = (bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
        size_t data_pages = std::max<size_t>((body + page - 1) / page, 1) * page;
        std::lock_guard<std::mutex> lock(mutex_);
        if (device && in_use_ + bytes > capacity()) return nullptr;
        size_t map_bytes = data_pages + 2 * page;
        char* map = (char*)mmap(nullptr, map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (map == MAP_FAILED) return nullptr;
        if (mprotect(map + page, data_pages, PROT_READ | PROT_WRITE) != 0) {
            munmap(map, map_bytes);
            return nullptr;
        }
        char* ptr = map + page + data_pages - body;
        if (settings().poison) memset(ptr, 0xFF, body);
        allocations_[(uintptr_t)ptr] = {ptr, bytes, map, map_bytes, device, false, ++generations_};
        if (device) in_use_ += bytes, peak_ = std::max(peak_, in_use_), pages_.add(bytes);
        return ptr;
    }
    // False when p is not the start of a live allocation of that kind.
    bool release(void* p, bool device) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = allocations_.find((uintptr_t)p);
        if (it == allocations_.end() || it->second.device != device || it->second.registered) return false;
        if (device) in_use_ -= it->second.bytes, pages_.remove(it->second.bytes);
        munmap(it->second.map, it->second.map_bytes);
        allocations_.erase(it);
        frees_.fetch_add(1, std::memory_order_release);
        return true;
    }

    // cudaHostRegister: the program's own memory [p, p + bytes) counts as pinned host memory
    // until unregister_host(p); false if it overlaps an allocation or a registered range.
    bool register_host(void* p, size_t bytes) {
        std::lock_guard<std::mutex> lock(mutex_);
        char* c = (char*)p;
        auto it = allocations_.lower_bound((uintptr_t)c);
        if (it != allocations_.end() && it->second.map < c + bytes) return false;
        if (it != allocations_.begin() && (--it)->second.map + it->second.map_bytes > c) return false;
        allocations_[(uintptr_t)c] = {c, bytes, c, bytes, false, true, ++generations_};
        return true;
    }
    bool unregister_host(void* p) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = allocations_.find((uintptr_t)p);
        if (it == allocations_.end() || !it->second.registered) return false;
        allocations_.erase(it);
        frees_.fetch_add(1, std::memory_order_release);
        return true;
    }

    // The allocation holding address p, or whose guard pages hold it (null: neither). The
    // mappings never overlap, so it is the one just below p or just above it.
    const Allocation* near(const void* p) const {
        std::lock_guard<std::mutex> lock(mutex_);
        auto in_map = [p](const Allocation& a) {
            return (const char*)p >= a.map && (const char*)p < a.map + a.map_bytes;
        };
        auto it = allocations_.upper_bound((uintptr_t)p);  // the first that starts after p
        if (it != allocations_.end() && in_map(it->second)) return &it->second;
        if (it != allocations_.begin() && in_map((--it)->second)) return &it->second;
        return nullptr;
    }
    // The allocation that [p, p + bytes) lies inside, or null.
    const Allocation* find(const void* p, size_t bytes = 0) const {
        const Allocation* a = near(p);
        if (!a || (const char*)p < a->ptr || (const char*)p > a->end() || bytes > (size_t)(a->end() - (const char*)p))
            return nullptr;
        return a;
    }
    // The generation of the allocation that p lies in (its end included), 0 when none: an
    // object that keeps p (a texture, a graph's node) keeps this too, and a later answer that
    // differs means the memory was freed, whatever was allocated at that address since.
    uint64_t generation(const void* p) const {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = allocations_.upper_bound((uintptr_t)p);
        if (it == allocations_.begin()) return 0;
        const Allocation& a = (--it)->second;
        return (const char*)p <= a.end() ? a.generation : 0;
    }
    // How many allocations were freed so far: while it is unchanged, a generation still holds
    uint64_t frees() const { return frees_.load(std::memory_order_acquire); }
    bool is_device(const void* p) const {
        const Allocation* a = find(p);
        return a && a->device;
    }

    // "3 bytes past the end of an allocation of 1,024 bytes at 0x7f..": where p falls.
    std::string describe(const void* p) const {
        const Allocation* a = near(p);
        if (!a) return "not in any allocation";
        const char* c = (const char*)p;
        char buf[200];
        const char* kind = a->device ? "device allocation" : "pinned host allocation";
        if (c < a->ptr)
            snprintf(buf, sizeof buf, "%zu bytes before the start of a %s of %zu bytes at %p", (size_t)(a->ptr - c),
                     kind, a->bytes, (void*)a->ptr);
        else if (c >= a->end())
            snprintf(buf, sizeof buf, "%zu bytes past the end of a %s of %zu bytes at %p", (size_t)(c - a->end()),
                     kind, a->bytes, (void*)a->ptr);
        else
            snprintf(buf, sizeof buf, "byte %zu of a %s of %zu bytes at %p", (size_t)(c - a->ptr), kind, a->bytes,
                     (void*)a->ptr);
        return buf;
    }

    std::vector<Allocation> all() const {
        std::lock_guard<std::mutex> lock(mutex_);
        std::vector<Allocation> out;
        for (auto& kv : allocations_) out.push_back(kv.second);
        return out;
    }
    size_t in_use() const { return in_use_; }
    // What cudaMemGetInfo reports in use: the bytes, or with CPU_CUDA_DRIVER_PAGES=1 the pages.
    size_t reported_in_use() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return settings().driver_pages ? pages_.charged() : in_use_;
    }
    size_t peak() const { return peak_; }
    uint64_t capacity() const {
        if (settings().memory) return settings().memory;
        return (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    }

    // CPU_CUDA_PROTECT=1: device memory is inaccessible to host code. Runtime calls open it
    // for their duration (DeviceAccess below); a host dereference of a device pointer then
    // faults, and the fault handler names the allocation.
    void set_access(bool open) {
        std::lock_guard<std::mutex> lock(mutex_);
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        for (auto& kv : allocations_) {
            const Allocation& a = kv.second;
            if (a.device) mprotect(a.map + page, a.map_bytes - 2 * page, open ? PROT_READ | PROT_WRITE : PROT_NONE);
        }
        open_ = open;
    }
    bool open() const { return open_; }

  private:
    mutable std::mutex mutex_;
    std::map<uintptr_t, Allocation> allocations_;  // by start address
    size_t in_use_ = 0, peak_ = 0;
    uint64_t generations_ = 0;
    std::atomic<uint64_t> frees_{0};
    DriverPages pages_;
    bool open_ = true;
};

inline Memory& memory() {
    static Memory m;
    return m;
}

// Entered by every runtime call that touches device memory. First, a call from the host
// waits for the work queued on streams that CUDA orders before it (streams.h): by default, as
// an operation on the legacy default stream; an operation in a stream's order has done its
// own waiting (queue_behind, wait_for_stream) and says so with `Ordered`. Then, with
// CPU_CUDA_PROTECT=1, it opens device memory to the runtime for the call's duration; nested
// scopes (a cuBLAS call that launches work) and the stream workers' scopes open it once
// between them: protection is the process's, so the count is too.
struct DeviceAccess {
    static std::mutex& mutex() {
        static std::mutex m;
        return m;
    }
    static inline int depth = 0;
    struct Ordered {};
    DeviceAccess() : DeviceAccess(Ordered{}, true) {}
    explicit DeviceAccess(Ordered) : DeviceAccess(Ordered{}, false) {}
    DeviceAccess(Ordered, bool as_default_stream) {
        if (as_default_stream) settle_default();
        if (!settings().protect_host) return;
        std::lock_guard<std::mutex> lock(mutex());
        if (depth++ == 0) memory().set_access(true);
    }
    ~DeviceAccess() {
        if (!settings().protect_host) return;
        std::lock_guard<std::mutex> lock(mutex());
        if (--depth == 0) memory().set_access(false);
    }
    DeviceAccess(const DeviceAccess&) = delete;
    DeviceAccess& operator=(const DeviceAccess&) = delete;
};

// Checks that [p, p + bytes) lies inside one device (or pinned host) allocation; if not,
// prints one line naming the call and the operand and returns false.
inline bool check_range(const void* p, size_t bytes, const char* call, const char* operand) {
    if (bytes == 0) return true;
    if (memory().find(p, bytes)) return true;
    const Allocation* a = memory().near(p);
    if (a && (const char*)p >= a->ptr && (const char*)p <= a->end())
        fprintf(stderr, "cpu_cuda: %s: %s [%p, +%zu bytes) runs %zu bytes past the end of its allocation (%zu bytes at %p)\n",
                call, operand, p, bytes, (size_t)((const char*)p + bytes - a->end()), a->bytes, (void*)a->ptr);
    else
        fprintf(stderr, "cpu_cuda: %s: %s %p is not device memory (%s)\n", call, operand, p,
                memory().describe(p).c_str());
    return false;
}

// Pointers that an object keeps for later use (a graph's kernel or memcpy node), each with the
// generation of the allocation it lay in when kept; a pointer in no allocation then (pageable
// host memory, null) is not checked. still_live() prints one line for the first one whose
// memory has been freed since, naming what and where, and answers false.
struct KeptPointers {
    struct Kept {
        const void* p;
        uint64_t generation;
        std::string what;
    };
    std::vector<Kept> kept;
    void keep(const void* p, std::string what) {
        if (uint64_t g = p ? memory().generation(p) : 0) kept.push_back({p, g, std::move(what)});
    }
    bool still_live(const char* call) const {
        for (const Kept& k : kept)
            if (memory().generation(k.p) != k.generation) {
                fprintf(stderr, "cpu_cuda: %s: %s %p was freed after it was given (%s)\n", call, k.what.c_str(), k.p,
                        memory().generation(k.p) ? "the address is now in a newer allocation" : "it is in no allocation now");
                return false;
            }
        return true;
    }
};

}  // namespace cpu_cuda
