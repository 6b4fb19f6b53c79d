#!/usr/bin/env bash
# The CPU trainer sizes its thread team to the processors it may use (host/cpus.h):
#   * in a real cgroup given a quota of one CPU, on a machine with more, it starts one thread
#     and says why, while --threads and OMP_NUM_THREADS still decide when given. Needs root
#     and a writable cgroup hierarchy (v1's cpu controller, or v2 with the cpu controller
#     already enabled for the root's children);
#   * replicas started by mpirun on one host without binding share its processors; bound to
#     a core each, each keeps its own. Needs ./train built with MPI.
# A part that cannot run here is skipped, and counted (in CI, where .ci/run installs Open MPI,
# the MPI part must run).
set -u
cd "$(dirname "$0")/../.."
source test/suite_lib.sh  # pass, fail, not_run, finish
source test/mpi_lib.sh    # $MPIRUN, mpi_ok
verdict() {  # NAME OK(1 or empty) OUTPUT: counts it, and shows the output of a failure
    if [ "$2" = 1 ]; then pass "$1"
    else fail "$1:"; echo "$3" | sed 's/^/   /'; fi
}
expect() {  # NAME OUTPUT EXPECTED-SUBSTRING
    verdict "$1 (expected '$3')" "$(grep -qF -- "$3" <<<"$2" && echo 1)" "$2"
}
[ -x ./train ] || { echo "./train is not built (make train)"; echo "0 passed, 1 failed"; exit 1; }
unset OMP_NUM_THREADS
procs=$(nproc)

# ---- a cgroup with a quota of 100 ms of CPU time per 100 ms: one CPU
cgroup_cases() {
    local name=gpt2_train_test_$$ group=""
    # v2: only where the root already hands the cpu controller to its children (the test
    # changes nothing of the machine's but the group it makes and removes)
    if grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
        if mkdir "/sys/fs/cgroup/$name" 2>/dev/null; then
            group=/sys/fs/cgroup/$name
            echo "100000 100000" >"$group/cpu.max" 2>/dev/null || { rmdir "$group"; group=""; }
        fi
    elif [ -w /sys/fs/cgroup/cpu ] && mkdir "/sys/fs/cgroup/cpu/$name" 2>/dev/null; then  # v1
        group=/sys/fs/cgroup/cpu/$name
        { echo 100000 >"$group/cpu.cfs_period_us" && echo 100000 >"$group/cpu.cfs_quota_us"; } 2>/dev/null ||
            { rmdir "$group"; group=""; }
    fi
    [ -n "$group" ] || { not_run "CPU quota" "no writable cgroup with a cpu controller here (needs root)"; return; }
    # COMMAND... inside the group (the shell moves itself in, then becomes the command)
    in_group() { sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$group" "$@" 2>&1; }
    local out
    out=$(in_group ./train --dry-run 1)
    expect "in a one-CPU cgroup, the default team is one thread, and the line says why" "$out" \
          "CPU threads: 1 (the cgroup's CPU limit: 1 of $procs processors)"
    out=$(in_group ./train --dry-run 1 --threads 2)
    expect "--threads 2 inside the quota is kept" "$out" "CPU threads: 2;"
    out=$(in_group env OMP_NUM_THREADS=2 ./train --dry-run 1)
    expect "OMP_NUM_THREADS=2 inside the quota is kept" "$out" "CPU threads: 2;"
    rmdir "$group"  # empty again: its processes have exited
}
if [ "$procs" -ge 2 ]; then cgroup_cases; else not_run "CPU quota" "one processor: a one-CPU quota changes nothing"; fi
out=$(./train --dry-run 1)
expect "one process, no limit: every processor" "$out" "CPU threads: $procs;"

# ---- replicas on one host
if mpi_ok ./train; then
    out=$(timeout 120 $MPIRUN -np 2 ./train --dry-run 1 2>&1)
    expect "2 unbound replicas split the processors" "$out" \
          "CPU threads: $((procs / 2 > 0 ? procs / 2 : 1)) ($procs processors, shared by 2 replicas on this host)"
    out=$(timeout 120 mpirun -np 2 --oversubscribe --bind-to core ./train --dry-run 1 2>&1)
    line=$(grep "CPU threads:" <<<"$out")  # a core's hardware threads (one, or two with SMT), not shared
    verdict "2 replicas bound to a core each keep their own" \
            "$([ -n "$line" ] && [[ $line != *"shared by"* ]] && echo 1)" "$out"
elif [ "${CI:-}" = true ]; then
    fail "replicas on one host: ./train without MPI in CI (.ci/run installs it)"
else
    not_run "replicas on one host" "./train was built without MPI or mpirun is missing (apt-get install libopenmpi-dev openmpi-bin)"
fi
finish
