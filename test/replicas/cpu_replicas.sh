#!/usr/bin/env bash
# Data-parallel replicas with real MPI processes (run by test/run_all.sh when ./train has MPI).
#
# The invariance matrix: the same global batch of 8 sequences split as (B, A, R) =
# (8,1,1) (4,2,1) (4,1,2) (2,2,2) (1,2,4) (2,4,1) must train identically (a Llama too, in
# three of the splits): losses at
# every one of 20 steps, the validation losses at steps 0, 10 and 20 and the final weights
# agree within 1e-5 relative (compare_runs.py
# says why that tolerance). A wrong loss scale, a sync per micro-batch or overlapping data
# change losses by >1e-3.
set -u
cd "$(dirname "$0")/../.."
source test/mpi_lib.sh  # OMPI_ALLOW_RUN_AS_ROOT, $MPIRUN, mpi_ok
T=16
TINY="./train --layers 2 --heads 2 --channels 32 --max-seq-len 32 -t $T -d $((8 * T)) --val-every 10
      --val-tokens 2048 --sample-every 0 --threads 1 --warmup 5 -l 3e-3 --shuffle 1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source test/suite_lib.sh  # pass, fail, skip, check, finish
suite_arguments "" "$@"  # --help: the usage; it takes no arguments

compare() { python3 test/replicas/compare_runs.py "$@"; }  # losses, norms, weights within 1e-5

run_split() {  # B A R DIR [more options]
    local B=$1 A=$2 R=$3 dir=$4
    shift 4
    $MPIRUN -np "$R" $TINY -b "$B" -n 20 -o "$dir" "$@" >"$dir.out" 2>&1 || { cat "$dir.out"; return 1; }
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

# ---- the same for a Llama (RMSNorm, RoPE, SwiGLU, NH = 2 query heads sharing KVH = 1 K/V
# head, an untied head): its step is the same function, so the same splits must agree
LLAMA="--model llama3"
run_split 8 1 1 "$work/lref" $LLAMA || fail "Llama reference run (8,1,1)"
for split in "4 2 1" "2 2 2" "1 2 4"; do
    set -- $split
    name="Llama: invariance (B,A,R)=($1,$2,$3) vs (8,1,1)"
    if run_split "$1" "$2" "$3" "$work/l$1$2$3" $LLAMA && compare "$work/lref" "$work/l$1$2$3" 20; then pass "$name"
    else fail "$name"; fi
done

# ---- evaluation does not depend on the split: one model (the PyTorch golden one), its
# validation loss and HellaSwag accuracies printed by (B, R) = (8,1) (4,2) (2,3) (1,4). The
# replicas take shares of the sequences and examples and add up their sums; the per-token
# losses do not depend on B, and the double sums differ in the last bits at most, far
# below the 4 printed decimals, so the lines must be identical. The accuracies must be the
# PyTorch reference's (dev/reference/hellaswag_reference.py).
python3 -c "import sys; sys.path.insert(0, 'data'); import random, shards; r = random.Random(5)
shards.write_shard('$work/v91.bin', [r.randrange(91) for _ in range(5000)], quiet=True)"
EVAL="./train -e test/golden/model_tiny.bin -i $work/v91.bin -j $work/v91.bin -t 32 -n 0 --val-every 1
      --val-tokens 4096 --sample-every 0 --threads 1 --hellaswag test/golden/hellaswag_tiny.bin"
read -r acc acc_norm < <(awk '!/^#/ { n++; a += $1 == $2; an += $1 == $3 } END { printf "%.4f %.4f\n", a / n, an / n }' \
    test/golden/hellaswag_tiny_reference.txt)
$EVAL -b 8 >"$work/eval1.out" 2>&1
expect=$(grep '^step 0 | val loss' "$work/eval1.out")
if grep -q "^step 0 | val loss [0-9.]* | HellaSwag acc_norm $acc_norm, acc $acc$" <<<"$expect"; then
    pass "R=1: validation over 4,096 tokens, and HellaSwag acc_norm $acc_norm, acc $acc as the PyTorch reference"
else echo "   got: $expect (reference: acc_norm $acc_norm, acc $acc)"; tail -3 "$work/eval1.out"; fail "R=1 evaluation"; fi
for split in "4 2" "2 3" "1 4"; do
    set -- $split
    $MPIRUN -np "$2" $EVAL -b "$1" >"$work/eval$2.out" 2>&1
    got=$(grep '^step 0 | val loss' "$work/eval$2.out")
    if [ -n "$expect" ] && [ "$got" = "$expect" ]; then pass "B=$1 R=$2 prints the same evaluation line as B=8 R=1"
    else echo "   got: $got"; echo "   R=1: $expect"; tail -3 "$work/eval$2.out"; fail "B=$1 R=$2 evaluation"; fi
done

# ---- resume with a different number of replicas: R=2 to step 10, then R=1 to step 20
mkdir -p "$work/resume"
$MPIRUN -np 2 $TINY -b 4 -n 20 --ckpt-every 10 -o "$work/r2" >/dev/null 2>&1
cp "$work/r2/model_00000010.bin" "$work/r2/state_00000010.bin" "$work/resume/"
if $TINY -b 4 -n 20 --ckpt-every 10 --resume 1 -o "$work/resume" >"$work/resume.out" 2>&1 &&
   grep -q "2 accumulation × 1 replica" "$work/resume.out" && compare "$work/r2" "$work/resume" 20 11; then
    pass "resume from R=2 to R=1 (A: 1 to 2) continues the same trajectory"
else fail "resume from R=2 to R=1"; fi

# ---- replicas that disagree stop with one clear error, not a hang: one line, which names
# the option and both values
out=$(timeout 60 $MPIRUN -np 1 $TINY -b 4 -n 2 -o "" : -np 1 $TINY -b 4 -n 2 -o "" -c 0.5 2>&1); rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] &&
   grep -q "replicas disagree on --weight-decay: rank 0 has 0.1, rank 1 has 0.5" <<<"$out" &&
   [ "$(grep -c '^train:' <<<"$out")" -eq 1 ]; then
    pass "disagreeing options across ranks give one line naming the option and both values"
else echo "$out" | tail -5; fail "disagreeing options (exit $rc)"; fi

# ---- a rank that fails ends the whole job
out=$(timeout 60 $MPIRUN -np 1 $TINY -b 4 -n 2 -o "" : -np 1 $TINY -b 4 -n 2 -o "" -e /nonexistent.bin 2>&1); rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "cannot open model file '/nonexistent.bin'" <<<"$out"; then
    pass "a failing rank ends the job with its error"
else echo "$out" | tail -5; fail "failing rank (exit $rc)"; fi

# ---- a command-line error under mpirun: every rank meets it, one prints it (each once did,
# with Open MPI's MPI_ABORT banner), and every rank exits 2. Open MPI's own lines about a
# process's non-zero exit follow; they are mpirun's, not the trainer's. Each rank's status is
# read through a shell that records it and exits 0 (mpirun ends the others once one exits non-zero).
for bad in "--bogus-option" "--lr-final-frac -5"; do
    out=$(timeout 60 $MPIRUN -np 3 $TINY -b 4 -n 2 -o "" $bad 2>&1); rc=$?
    rm -f "$work"/usage_rc.*
    timeout 60 $MPIRUN -np 3 sh -c '"$@" 2>/dev/null; echo $? >'"$work"'/usage_rc.$OMPI_COMM_WORLD_RANK' sh \
        $TINY -b 4 -n 2 -o "" $bad >/dev/null 2>&1
    statuses=$(cat "$work"/usage_rc.0 "$work"/usage_rc.1 "$work"/usage_rc.2 2>/dev/null | tr '\n' ' ')
    name="mpirun -np 3 ./train $bad: one line, by one rank; mpirun and every rank exit 2"
    if [ $rc -eq 2 ] && [ "$(grep -c '^train:' <<<"$out")" -eq 1 ] && ! grep -q MPI_ABORT <<<"$out" &&
       [ "$statuses" = "2 2 2 " ]; then pass "$name"
    else echo "$out" | head -5; echo "   the ranks' statuses: $statuses"; fail "$name (exit $rc)"; fi
done

# ---- a frozen replica ends the job: SIGSTOP one rank in the middle of training; with
# --comm-timeout 3 the others must end the job within seconds, with one line naming the
# rank that did not arrive (by its pid, which the start-up lines print) and the collective.
# frozen NP RANK [OPTIONS]: starts NP ranks, stops RANK after step 5; in each sync mode
frozen() {
    local np=$1 stop=$2 log="$work/frozen$1$2.out"
    shift 2  # the rest: options (the sync mode)
    timeout 90 $MPIRUN -np "$np" $TINY -b 4 -d $((4 * T * np)) -n 100000 -o "" --comm-timeout 3 "$@" >"$log" 2>&1 &
    local job=$!
    for _ in $(seq 300); do grep -q "^step     5/" "$log" && break; sleep 0.1; done
    local pid; pid=$(sed -n "s/^rank $stop on .*, pid \([0-9]*\)$/\1/p" "$log")
    [ -n "$pid" ] && kill -STOP "$pid"
    local t0=$SECONDS
    wait $job; local rc=$? took=$((SECONDS - t0))
    [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null  # in case mpirun left it behind, stopped
    local name="a stopped rank $stop of $np${1:+ ($*)} ends the job with one line naming it (${took} s)"
    # timeout 3 s + the roll call's 2 s + the abort: 20 s leaves room for a slow machine
    if [ -n "$pid" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -le 20 ] &&
       grep -q "rank $stop (.*pid $pid) did not arrive at the all-reduce of .* within --comm-timeout 3 s" "$log" &&
       [ "$(grep -c '^train:' "$log")" -eq 1 ]; then pass "$name"
    else tail -5 "$log"; fail "$name (exit $rc)"; fi
}
frozen 2 1          # (the buckets overlapped with the backward: the default)
frozen 3 0
frozen 2 1 --grad-sync end

finish
