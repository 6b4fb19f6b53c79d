#!/usr/bin/env bash
# The CPU trainer sizes its thread team to the processors it may use (host/cpus.h), here in a
# real cgroup given a quota of one CPU on a machine with more: it must start one thread and
# say why, while --threads and OMP_NUM_THREADS still decide when given. Needs root and a
# writable cgroup hierarchy (v1's cpu controller, or v2 with the cpu controller available);
# elsewhere the cases are skipped, and counted.
set -u
cd "$(dirname "$0")/.."
passed=0 failed=0
check() {  # NAME OUTPUT EXPECTED-SUBSTRING
    if grep -qF -- "$3" <<<"$2"; then echo "PASS $1"; passed=$((passed + 1))
    else echo "FAIL $1: expected '$3' in:"; echo "$2" | sed 's/^/   /'; failed=$((failed + 1)); fi
}
skip_all() { echo "SKIP CPU quota: $1"; echo "0 passed, 0 failed, 1 skipped"; exit 0; }

procs=$(nproc)
[ "$procs" -ge 2 ] || skip_all "one processor: a one-CPU quota changes nothing"
[ -x ./train ] || { echo "./train is not built (make train)"; echo "0 passed, 1 failed"; exit 1; }

# A cgroup with a quota of 100 ms of CPU time per 100 ms: one CPU.
name=gpt2_train_test_$$ group=""
if grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then  # v2
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
    if mkdir "/sys/fs/cgroup/$name" 2>/dev/null; then
        group=/sys/fs/cgroup/$name
        echo "100000 100000" >"$group/cpu.max" 2>/dev/null || { rmdir "$group"; group=""; }
    fi
elif [ -w /sys/fs/cgroup/cpu ] && mkdir "/sys/fs/cgroup/cpu/$name" 2>/dev/null; then  # v1
    group=/sys/fs/cgroup/cpu/$name
    { echo 100000 >"$group/cpu.cfs_period_us" && echo 100000 >"$group/cpu.cfs_quota_us"; } 2>/dev/null ||
        { rmdir "$group"; group=""; }
fi
[ -n "$group" ] || skip_all "no writable cgroup with a cpu controller here (needs root)"
trap 'rmdir "$group" 2>/dev/null' EXIT

# COMMAND... run inside the group (the shell moves itself in, then becomes the command)
in_group() { sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$group" "$@" 2>&1; }
unset OMP_NUM_THREADS
out=$(in_group ./train --dry-run 1)
check "the default team is the quota's one CPU, and the line says why" "$out" \
      "CPU threads: 1 (the cgroup's CPU limit: 1 of $procs processors)"
out=$(in_group ./train --dry-run 1 --threads 2)
check "--threads 2 inside the quota is kept" "$out" "CPU threads: 2;"
out=$(in_group env OMP_NUM_THREADS=2 ./train --dry-run 1)
check "OMP_NUM_THREADS=2 inside the quota is kept" "$out" "CPU threads: 2;"
out=$(./train --dry-run 1)
check "outside the group, every processor" "$out" "CPU threads: $procs;"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
