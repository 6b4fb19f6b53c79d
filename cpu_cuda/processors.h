// cpu_cuda/processors.h: how many processors this process can keep busy, what sizes the pool
// (pool.h) when CPU_CUDA_THREADS does not (settings.h). The runtime counts them itself, so that
// it depends on nothing of the programs it runs.
//
// Two limits apply, and std::thread::hardware_concurrency() sees neither: the affinity mask
// (taskset, numactl, a batch system's binding of a task to cores), and the cgroup's CPU quota
// (a container's --cpus, a Kubernetes CPU limit: cgroup v2's cpu.max, v1's cpu.cfs_quota_us
// per cpu.cfs_period_us), past which the kernel stops the whole group until the next period,
// so that a pool wider than the quota waits at every launch's end for its stopped threads.
// The pool takes the smaller of the two, the quota rounded down to whole CPUs (at least one).
#pragma once
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

namespace cpu_cuda {

// Whole CPUs in a quota of quota_us per period_us; 0 = no quota (v1 writes -1, v2 "max").
inline int quota_whole_cpus(long long quota_us, long long period_us) {
    if (quota_us <= 0 || period_us <= 0) return 0;
    return (int)std::max(1LL, quota_us / period_us);
}

// The quota of this process's cgroup and of its ancestors (each one's applies: the smallest
// wins), in whole CPUs; 0 = none, or no file could be read. `root` prefixes every path (for
// tests). /proc/self/cgroup names the cgroup's path from the host's root, while a container
// may see its own cgroup at the root of the mount: walking up the path to the mount's root
// reads the files that exist either way.
inline int cgroup_quota_cpus(const std::string& root = "") {
    int cpus = 0;
    auto take = [&](int q) {
        if (q > 0) cpus = cpus ? std::min(cpus, q) : q;
    };
    auto read_v2 = [](const std::string& dir) {  // cpu.max: "QUOTA PERIOD" or "max PERIOD"
        std::ifstream f(dir + "/cpu.max");
        std::string quota;
        long long period = 0;
        if (!(f >> quota >> period) || quota == "max") return 0;
        return quota_whole_cpus(std::atoll(quota.c_str()), period);
    };
    auto read_v1 = [](const std::string& dir) {
        std::ifstream q(dir + "/cpu.cfs_quota_us"), p(dir + "/cpu.cfs_period_us");
        long long quota = 0, period = 0;
        return q >> quota && p >> period ? quota_whole_cpus(quota, period) : 0;
    };
    // reads `mount` + `path` and each of its ancestors up to the mount's root
    auto walk = [&](const std::string& mount, std::string path, bool v2) {
        for (;;) {
            take(v2 ? read_v2(mount + path) : read_v1(mount + path));
            if (path.empty() || path == "/") return;
            size_t slash = path.find_last_of('/');
            path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
        }
    };
    // Each line is "ID:CONTROLLERS:PATH": ID 0 with no controllers is cgroup v2's hierarchy;
    // v1's CPU controller is the line whose comma-separated list names "cpu".
    std::ifstream membership(root + "/proc/self/cgroup");
    for (std::string line; std::getline(membership, line);) {
        size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos) continue;
        std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
        if (line.compare(0, a, "0") == 0 && controllers.empty()) {
            walk(root + "/sys/fs/cgroup", path, true);
            walk(root + "/sys/fs/cgroup/unified", path, true);  // a hybrid host's v2 mount
        } else if (("," + controllers + ",").find(",cpu,") != std::string::npos) {
            walk(root + "/sys/fs/cgroup/cpu", path, false);
            walk(root + "/sys/fs/cgroup/cpu,cpuacct", path, false);
        }
    }
    return cpus;
}

// The processors of the affinity mask, within the cgroup's quota; at least one.
inline int usable_processors() {
    cpu_set_t set;
    int mask = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    int quota = cgroup_quota_cpus();
    return std::max(1, quota > 0 ? std::min(mask, quota) : mask);
}

}  // namespace cpu_cuda
