// How many processors this process can keep busy: what sizes the CPU trainer's OpenMP team
// when the user does not.
//
// Two limits apply, and a process sees only the first by default:
//   * its affinity mask: the processors it may run on (taskset, numactl, Slurm's binding of a
//     task to cores). std::thread::hardware_concurrency() ignores it and counts the machine;
//   * its cgroup's CPU quota: CPU time per period, which is what a container's --cpus, a
//     Kubernetes CPU limit or a batch system's share sets (cgroup v2's cpu.max, v1's
//     cpu.cfs_quota_us and cpu.cfs_period_us). The mask still shows every processor of the host.
// Past its quota the kernel stops the whole group until the next period (100 ms by default),
// so a team of 64 threads on a host of 64 under a 4-CPU limit can spend most of each step
// stopped at a barrier. Threads are therefore sized to the smaller of the two, the quota
// rounded down to whole CPUs (at least one): a thread more than the quota pays for only a
// fraction of a CPU and still waits at every barrier for the others.
// (The CPU runtime counts its pool's processors alike, on its own: cpu_cuda/processors.h.)
#pragma once

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "comm.h"
#include "error.h"

// Whole CPUs in a quota of quota_us per period_us; 0 = no quota (v1 writes -1, v2 "max").
inline int quota_cpus(long long quota_us, long long period_us) {
    if (quota_us <= 0 || period_us <= 0) return 0;
    return (int)std::max(1LL, quota_us / period_us);
}

// The quota on this process's cgroup and its ancestors (each one's limit applies: the
// smallest wins), in whole CPUs; 0 = none, or no cgroup file could be read. `root` prefixes
// every path, for tests. A container usually sees its own cgroup as the root of the mount
// while /proc/self/cgroup names the host's path to it: walking up from that path to the
// first directory that exists finds the container's files either way.
inline int cgroup_cpu_quota(const std::string& root = "") {
    std::ifstream membership(root + "/proc/self/cgroup");
    int cpus = 0;
    auto take = [&](int q) {
        if (q > 0) cpus = cpus ? std::min(cpus, q) : q;
    };
    // Reads the quota in the directory `mount` + `path` and in each ancestor's, where they exist.
    auto walk = [&](const std::string& mount, std::string path, auto read_quota) {
        for (;;) {
            take(read_quota(mount + path));
            if (path.empty() || path == "/") return;
            size_t slash = path.find_last_of('/');
            path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
        }
    };
    auto read_v2 = [](const std::string& dir) {  // cpu.max: "QUOTA PERIOD" or "max PERIOD"
        std::ifstream f(dir + "/cpu.max");
        std::string quota;
        long long period = 0;
        if (!(f >> quota >> period) || quota == "max") return 0;
        return quota_cpus(std::atoll(quota.c_str()), period);
    };
    auto read_v1 = [](const std::string& dir) {
        std::ifstream q(dir + "/cpu.cfs_quota_us"), p(dir + "/cpu.cfs_period_us");
        long long quota = 0, period = 0;
        return q >> quota && p >> period ? quota_cpus(quota, period) : 0;
    };
    // Each line is "ID:CONTROLLERS:PATH": ID 0 with no controllers is cgroup v2's hierarchy;
    // v1's CPU controller is the line whose comma-separated list names "cpu".
    for (std::string line; std::getline(membership, line);) {
        size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos) continue;
        std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
        if (line.compare(0, a, "0") == 0 && controllers.empty()) {
            walk(root + "/sys/fs/cgroup", path, read_v2);
            walk(root + "/sys/fs/cgroup/unified", path, read_v2);  // a hybrid host's v2 mount
        } else if (("," + controllers + ",").find(",cpu,") != std::string::npos) {
            walk(root + "/sys/fs/cgroup/cpu", path, read_v1);
            walk(root + "/sys/fs/cgroup/cpu,cpuacct", path, read_v1);
        }
    }
    return cpus;
}

// The processors in this process's affinity mask.
inline int affinity_processors() {
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
}
// The mask itself, as the processors' numbers ("0 1 2 3"): replicas on one host compare them
// to learn which of them share processors.
inline std::string affinity_mask_text() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return "all";
    std::string s;
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &set)) s += (s.empty() ? "" : " ") + std::to_string(i);
    return s;
}

// Replicas started on one host without binding (mpirun --bind-to none, its default of a
// socket per rank past two ranks, or srun without --cpu-bind) all see the same processors:
// each takes its share of them, or their teams together would oversubscribe the host.
struct CpuAllowance {
    int processors;   // in the affinity mask
    int quota;        // whole CPUs of the cgroup's quota; 0 = none
    int sharing = 1;  // processes of this job on this host with the same mask (this one included)
    int usable() const { return std::max(1, (quota > 0 ? std::min(processors, quota) : processors) / sharing); }
    // What a start-up line adds when something other than the mask sizes the team; "" otherwise.
    std::string note() const {
        std::ostringstream s;
        if (quota > 0 && quota < processors) s << "the cgroup's CPU limit: " << quota << " of " << processors << " processors";
        else if (sharing > 1) s << processors << " processors";
        if (sharing > 1) s << ", shared by " << sharing << " replicas on this host";
        return s.str().empty() ? "" : " (" + s.str() + ")";
    }
};
inline CpuAllowance cpu_allowance(int sharing = 1) { return {affinity_processors(), cgroup_cpu_quota(), sharing}; }


// More threads than processors only slows the run, and in the tens of thousands the
// OpenMP runtime cannot start them (it crashed at 100,000): both trainers refuse them.
inline void check_thread_count(int threads) {
    int procs = affinity_processors();
    if (threads > procs)
        throw Error(strf("--threads %d is more than the %d processor%s this process may use (0 = one thread for each)",
                         threads, procs, procs == 1 ? "" : "s"));
}

// OMP_NUM_THREADS's syntax as check_omp_num_threads takes it: whole numbers from 1, separated
// by commas. No allocation, no errno: the .preinit_array hook below calls it before the C library is set up.
inline bool omp_num_threads_well_formed(const char* text) {
    bool digits = false;
    long long n = 0;
    for (const char* p = text;; p++) {
        if (*p >= '0' && *p <= '9') {
            n = n * 10 + (*p - '0');
            if (n > 2147483647) return false;  // more than an int (and than any processor count)
            digits = true;
        } else if (*p == ',' || *p == 0) {
            if (!digits || n < 1) return false;
            if (*p == 0) return true;
            digits = false, n = 0;
        } else {
            return false;
        }
    }
}

// libgomp reads OMP_NUM_THREADS in its shared library's constructor, before main() and before
// this program's own constructors, and prints its own warning for a value it cannot take (0,
// "abc", -1: "libgomp: Invalid value ...") before the trainer could say anything. A function in
// the executable's .preinit_array runs before any shared library's initializer (glibc; it gets
// argc, argv and the environment, which getenv cannot read yet, and a setenv there is lost): a
// malformed value is renamed in place, OMP_NUM_THREADS=abc becoming TRAIN_OMP_NUM=abc, so
// libgomp never sees it, and check_omp_num_threads refuses it with the trainer's one line unless
// --threads is given. In place, because the CPU trainer starts itself again once (train.cpp,
// choose_passive_openmp_wait) with the environment as it is then.
constexpr const char* OMP_NUM_THREADS_WITHHELD = "TRAIN_OMP_NUM";
inline const char* omp_num_threads_withheld() {
    const char* text = getenv(OMP_NUM_THREADS_WITHHELD);
    return text && !omp_num_threads_well_formed(text) ? text : nullptr;  // only what the hook below renamed
}
#if defined(__linux__) && defined(__ELF__)
static void withhold_malformed_omp_num_threads(int, char**, char** envp) {
    static const char name[] = "OMP_NUM_THREADS=";
    for (char** p = envp; p && *p; p++) {
        char* s = *p;
        size_t i = 0;
        while (name[i] && s[i] == name[i]) i++;
        if (name[i] || omp_num_threads_well_formed(s + i)) continue;
        size_t j = 0;  // the new name is shorter: write it, then move the value (and its 0) after it
        for (const char* n = OMP_NUM_THREADS_WITHHELD; *n; n++) s[j++] = *n;
        s[j++] = '=';
        for (;; i++, j++)
            if ((s[j] = s[i]) == 0) break;
    }
}
__attribute__((section(".preinit_array"), used)) static void (*const withhold_omp_num_threads_hook)(
    int, char**, char**) = withhold_malformed_omp_num_threads;
#endif

// OMP_NUM_THREADS sets the count that --threads 0 leaves to OpenMP, which reads it before
// main() and starts that many threads at the first parallel region (at 100,000 it crashed):
// each of its counts (a list gives one per nesting level) is checked like --threads.
inline void check_omp_num_threads() {
    const char* text = getenv("OMP_NUM_THREADS");
    if (!text) text = omp_num_threads_withheld();  // malformed: kept from libgomp (above)
    if (!text) return;
    if (!omp_num_threads_well_formed(text))
        throw UsageError(strf("OMP_NUM_THREADS='%s' is not a thread count (a whole number from 1, or a list of "
                              "them separated by commas); unset it, or pass --threads",
                              text));
    std::string list = text;
    size_t pos = 0;
    do {
        size_t comma = list.find(',', pos);
        std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        pos = comma == std::string::npos ? list.size() + 1 : comma + 1;
        long long n = strtoll(item.c_str(), nullptr, 10);
        int procs = affinity_processors();
        if (n > procs)
            throw Error(strf("OMP_NUM_THREADS=%s is more than the %d processor%s this process may use (unset it for "
                             "one thread for each, or pass --threads)",
                             item.c_str(), procs, procs == 1 ? "" : "s"));
    } while (pos <= list.size());
}

// How many processes of this job run on this host with the same processors as this one
// (host/cpus.h: they split them). A collective.
inline int ranks_sharing_processors(const Comm& comm) {
    std::string mine = comm.host + ": " + affinity_mask_text();
    std::vector<std::string> all = comm.allgather(mine);
    return (int)std::count(all.begin(), all.end(), mine);
}
