#!/usr/bin/env bash
# Data-parallel replicas with real MPI processes (run by test/run_all.sh when ./train has MPI).
#
# The invariance matrix: the same global batch of 8 sequences split as (B, A, R) =
# (8,1,1) (4,2,1) (4,1,2) (2,2,2) (1,2,4) (2,4,1) must train identically: losses at
# every one of 20 steps and the final weights agree within 1e-5 relative (compare_runs.py
# says why that tolerance). A wrong loss scale, a sync per micro-batch or overlapping data
# change losses by >1e-3.
set -u
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # containers run as root
MPIRUN="mpirun --oversubscribe --bind-to none"
T=16
TINY="./train --layers 2 --heads 2 --channels 32 --max-seq-len 32 -t $T -d $((8 * T)) --val-every 0
      --sample-every 0 --threads 1 --warmup 5 -l 3e-3 --shuffle 1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; failed=$((failed + 1)); }

compare() { python3 test/compare_runs.py "$@"; }  # losses, norms, weights within 1e-5

run_split() {  # B A R DIR
    local B=$1 A=$2 R=$3 dir=$4
    $MPIRUN -np "$R" $TINY -b "$B" -n 20 -o "$dir" >"$dir.out" 2>&1 || { cat "$dir.out"; return 1; }
    grep -q "micro-batch ${B}×$T = $((B * T)) tokens × $A accumulation × $R replica" "$dir.out" || {
        echo "   unexpected arithmetic line:"; grep micro-batch "$dir.out"; return 1; }
}

# ---- the invariance matrix
run_split 8 1 1 "$work/ref" || fail "reference run (8,1,1)"
for split in "4 2 1" "4 1 2" "2 2 2" "1 2 4" "2 4 1"; do
    set -- $split
    name="invariance (B,A,R)=($1,$2,$3) vs (8,1,1)"
    if run_split "$1" "$2" "$3" "$work/s$1$2$3" && compare "$work/ref" "$work/s$1$2$3" 20; then pass "$name"
    else fail "$name"; fi
done

# ---- resume with a different number of replicas: R=2 to step 10, then R=1 to step 20
mkdir -p "$work/resume"
$MPIRUN -np 2 $TINY -b 4 -n 20 --ckpt-every 10 -o "$work/r2" >/dev/null 2>&1
cp "$work/r2/model_00000010.bin" "$work/r2/state_00000010.bin" "$work/resume/"
if $TINY -b 4 -n 20 --ckpt-every 10 --resume 1 -o "$work/resume" >"$work/resume.out" 2>&1 &&
   grep -q "2 accumulation × 1 replica" "$work/resume.out" && compare "$work/r2" "$work/resume" 20 11; then
    pass "resume from R=2 to R=1 (A: 1 to 2) continues the same trajectory"
else fail "resume from R=2 to R=1"; fi

# ---- replicas that disagree stop with one clear error, not a hang
out=$(timeout 60 $MPIRUN -np 1 $TINY -b 4 -n 2 -o "" : -np 1 $TINY -b 4 -n 2 -o "" -c 0.5 2>&1); rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "replicas disagree on the configuration" <<<"$out"; then
    pass "disagreeing options across ranks give a clear error"
else echo "$out" | tail -5; fail "disagreeing options (exit $rc)"; fi

# ---- a rank that fails ends the whole job
out=$(timeout 60 $MPIRUN -np 1 $TINY -b 4 -n 2 -o "" : -np 1 $TINY -b 4 -n 2 -o "" -e /nonexistent.bin 2>&1); rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "cannot open model file '/nonexistent.bin'" <<<"$out"; then
    pass "a failing rank ends the job with its error"
else echo "$out" | tail -5; fail "failing rank (exit $rc)"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
