#!/usr/bin/env bash
# Checkpoint files under crashes: kill -9 in the middle of checkpoint writes, many times, then
# resume; the final model and state must equal a straight run's byte for byte. Also: stale
# temporary files are removed on resume, --keep-checkpoints rotates, every rename is
# followed by a flush of its directory, and a full disk or a failed rename stops the run
# with the reason and without a state file whose model is missing.
set -u
cd "$(dirname "$0")/../.."
TRAIN=${TRAIN:-./train}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source test/suite_lib.sh  # pass, fail, skip, check, finish
suite_arguments "" "$@"  # --help: the usage; it takes no arguments
source test/mpi_lib.sh  # OMPI_ALLOW_RUN_AS_ROOT, $MPIRUN, mpi_ok

# A small model with a long position table (maxT = 32768: 2.2M parameters, most of them in
# wpe, which costs AdamW little and the forward pass nothing): a 9 MB model file and an 18 MB
# state file per checkpoint, so most of the run's time goes into the checkpoint writes the
# kills are aimed at.
STEPS=32
RUN="$TRAIN --layers 2 --heads 2 --channels 64 --max-seq-len 32768 -b 4 -t 16 --val-every 0 --sample-every 0
     --threads 1 -n $STEPS --ckpt-every 1 --keep-checkpoints 2 --resume auto"

# ---- the straight run
$RUN -o "$work/straight" >"$work/straight.out" 2>&1 || { cat "$work/straight.out"; fail "straight run"; }
ls "$work/straight" | grep -q "model_000000$((STEPS - 1)).bin" && pass "--keep-checkpoints 2 kept step $((STEPS - 1))" ||
    fail "--keep-checkpoints 2: step $((STEPS - 1)) missing"
n_models=$(ls "$work/straight" | grep -c '^model_.*\.bin$')
[ "$n_models" -eq 2 ] && grep -q "(removed step $((STEPS - 2)))" "$work/straight.out" &&
    pass "--keep-checkpoints 2 leaves 2 checkpoints and says which it removed" ||
    fail "--keep-checkpoints 2 left $n_models model files"

# ---- the crash chain: each run is killed after it has started its Nth checkpoint file
# (N = 1..6, in turn), so odd N kill it while it writes a state file and even N while it
# writes a model file (its state already renamed: an incomplete pair). Each new run resumes
# from what the last one left; the watch for new files starts at its first step line, when
# it has removed the temporary files the last one left.
shopt -s nullglob
chain=$work/chain kills=0 mid_write=0
mkdir -p "$chain"
for i in $(seq 0 23); do
    want=$((i % 6 + 1))
    $RUN -o "$chain" >"$work/run$i.out" 2>&1 &
    pid=$!
    seen=() last=""
    while kill -0 $pid 2>/dev/null && ! grep -q "^step" "$work/run$i.out" 2>/dev/null; do sleep 0.01; done
    while kill -0 $pid 2>/dev/null && [ ${#seen[@]} -lt $want ]; do
        for f in "$chain"/*.tmp; do [ "$f" != "$last" ] && seen+=("$f") && last=$f; done
    done
    kill -9 $pid 2>/dev/null && kills=$((kills + 1))
    wait $pid 2>/dev/null
    tmps=("$chain"/*.tmp)
    [ ${#tmps[@]} -gt 0 ] && mid_write=$((mid_write + 1))
    grep -q "is complete" "$work/run$i.out" && break
done
$RUN -o "$chain" >"$work/final.out" 2>&1 || { tail -3 "$work/final.out"; fail "the run after the kills"; }
echo "   $kills kills, $mid_write of them left a checkpoint write unfinished"
# Most kills must land inside a write (or the test would not test that); the polling can
# miss a short write, so not all of them.
[ $kills -ge 16 ] && [ $mid_write -ge $((kills / 2)) ] && pass "the kills landed inside checkpoint writes" ||
    fail "only $mid_write of $kills kills landed inside a write"
grep -q "removed '.*\.tmp', left by an interrupted checkpoint write" "$work"/run*.out "$work/final.out" &&
    pass "a resumed run removes the temporary files of the write that was killed" || fail "stale .tmp files"
last=$(printf 'model_%08d.bin' $STEPS) last_state=$(printf 'state_%08d.bin' $STEPS)
if [ -f "$chain/$last" ] && cmp -s "$work/straight/$last" "$chain/$last" &&
   cmp -s "$work/straight/$last_state" "$chain/$last_state"; then
    pass "after $kills kills the final model and state equal the straight run's byte for byte"
else fail "the killed chain's final checkpoint differs from the straight run's"; fi
left=("$chain"/*.tmp)
[ ${#left[@]} -eq 0 ] && pass "no temporary file is left at the end" || fail "left: ${left[*]}"

# ---- every checkpoint rename is followed by a flush of its directory
if g++ -shared -fPIC -O1 -o "$work/fsync_spy.so" test/hardening/fsync_spy.cpp -ldl; then
    FSYNC_SPY_LOG=$work/fsyncs LD_PRELOAD=$work/fsync_spy.so \
        $TRAIN --layers 2 --heads 2 --channels 32 --max-seq-len 32 -b 4 -t 16 -n 2 --ckpt-every 1 \
        --val-every 0 --sample-every 0 -o "$work/spy" >/dev/null 2>&1
    # 2 checkpoints × (state + model) = 4 renames, each followed by a flush of the directory
    n=$(grep -c "^$work/spy\$" "$work/fsyncs" 2>/dev/null)
    [ "${n:-0}" -eq 4 ] && pass "each of the 4 checkpoint renames is followed by a directory flush" ||
        fail "the output directory was flushed ${n:-0} times, expected 4"
else fail "could not build test/hardening/fsync_spy.cpp"; fi

# ---- a full disk during a checkpoint (test/hardening/disk_full.cpp, preloaded: no mount, no root):
# the run stops with one line that says why, and leaves the last complete checkpoint as the
# newest, with no state file of the step whose model could not be written; a rename that
# fails says why too
SMALL="$TRAIN --layers 2 --heads 2 --channels 32 --max-seq-len 32 -b 4 -t 16 --val-every 0 --sample-every 0
       --threads 1 --ckpt-every 1"
if g++ -shared -fPIC -O1 -o "$work/disk_full.so" test/hardening/disk_full.cpp -ldl; then
    $SMALL -n 1 -o "$work/sizes" >/dev/null 2>&1
    m=$(stat -c %s "$work/sizes/model_00000001.bin") s=$(stat -c %s "$work/sizes/state_00000001.bin")
    full=$(realpath "$work")/full  # the path as /proc/self/fd shows it
    mkdir -p "$full"
    # room for step 1's state and model, step 2's state and half of step 2's model
    DISK_FULL_DIR=$full DISK_FULL_FREE=$((s + m + s + m / 2)) LD_PRELOAD=$work/disk_full.so \
        $SMALL -n 3 -o "$full" >/dev/null 2>"$work/full.err"
    rc=$? err=$(cat "$work/full.err")
    [ $rc -eq 1 ] && [ "$(grep -c '' <<<"$err")" -eq 1 ] &&
        grep -qF "could not write '$full/model_00000002.bin.tmp': No space left on device" <<<"$err" &&
        pass "a full disk while writing a model stops the run with one line naming the file and the reason" ||
        fail "a full disk: exit $rc, stderr: $err"
    left=$(cd "$full" && ls | grep -E '^(model|state)_' | tr '\n' ' ')
    [ "$left" = "model_00000001.bin state_00000001.bin " ] &&
        pass "after the full disk, step 1's checkpoint is the newest and no file of step 2 is left" ||
        fail "after the full disk the directory holds: $left"
    mkdir -p "$work/rename/model_00000001.bin"  # a directory where the model file goes: its rename fails
    $SMALL -n 1 -o "$work/rename" >/dev/null 2>"$work/rename.err"
    rc=$? err=$(cat "$work/rename.err")
    want="could not rename '$work/rename/model_00000001.bin.tmp' to '$work/rename/model_00000001.bin': Is a directory"
    [ $rc -eq 1 ] && [ "$(grep -c '' <<<"$err")" -eq 1 ] && grep -qF "$want" <<<"$err" &&
        [ ! -e "$work/rename/state_00000001.bin" ] &&
        pass "a failed rename says why, and leaves no state file without its model" ||
        fail "a failed rename: exit $rc, stderr: $err; $(ls "$work/rename" | tr '\n' ' ')"
else fail "could not build test/hardening/disk_full.cpp"; fi

# ---- signals: SIGTERM at a random step makes the trainer finish that step, save it and exit
# 143; the run resumed from that checkpoint (--resume 1) goes on exactly as a run never
# stopped: the same losses, gradient norms, validation losses and samples at every step
# (the log without its timings), and the same final model and state byte for byte. One
# process of ./train and of train_gpt_cpu, and two replicas (MPI ./train; train_gpt_cpu
# started as srun would) with the signal sent to rank 1 only.
trajectory() {  # the log's records without their timings, one per line
    python3 -c "import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r['type'] != 'config':
        print({k: v for k, v in r.items() if k not in ('ms', 'sync_ms', 'tokens_per_s', 'flops_per_s', 'mfu')})" "$1/log.jsonl"
}
# Starters: KIND DIR ARGS... starts the run in the background; sets pids (to wait for), out
# (rank 0's output) and victim (the process the signal goes to, rank 1 where there are two).
start_train() { local dir=$2; shift 2; $TRAIN "$@" -o "$dir" >"$dir.out" 2>&1 & pids=($!) out=$dir.out victim=$!; }
start_gpt() { local dir=$2; shift 2; ./train_gpt_cpu "$@" -o "$dir" >"$dir.out" 2>&1 & pids=($!) out=$dir.out victim=$!; }
start_mpi2() {  # rank 1's pid from the line "rank 1 on HOST, pid N", once it is printed
    local dir=$2; shift 2
    $MPIRUN -np 2 $TRAIN "$@" -o "$dir" >"$dir.out" 2>&1 &
    pids=($!) out=$dir.out victim=""
}
start_slurm2() {  # two processes as srun starts them: ranks from Slurm's variables, no MPI
    local dir=$2 r; shift 2
    rm -f "$dir.ncclid"
    pids=()
    for r in 0 1; do
        env -u OMPI_COMM_WORLD_SIZE SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r SLURM_JOB_ID=$$ SLURM_STEP_ID=0 \
            ./train_gpt_cpu "$@" -o "$dir" --nccl-init-file "$dir.ncclid" >"$dir.$r.out" 2>&1 &
        pids+=($!)
    done
    out=$dir.0.out victim=${pids[1]}
}
wait_pids() {  # the status of the first process that failed, else 0; kills them all after 300 s
    local deadline=$((SECONDS + 300)) pid rc=0 r
    for pid in "${pids[@]}"; do
        while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.05; done
        kill -0 "$pid" 2>/dev/null && { echo "   still running after 300 s: killed"; kill -9 "${pids[@]}" 2>/dev/null; }
        wait "$pid"; r=$?
        [ $rc -eq 0 ] && rc=$r
    done
    return $rc
}
signal_case() {  # NAME STARTER
    local name=$1 start=$2 dir=$work/sig_$1 steps=60 rc
    local tiny="--layers 2 --heads 2 --channels 32 --max-seq-len 64 -b 4 -t 32 --val-every 7 --val-tokens 256
                --sample-every 9 --sample-len 8 --threads 1 -n $steps"
    $start x "$dir.straight" $tiny; wait_pids || { tail -3 "$out"; fail "$name: the run without a signal"; return; }
    local k=$((RANDOM % 25 + 3))  # the step whose line triggers the signal
    $start x "$dir" $tiny
    while kill -0 "${pids[0]}" 2>/dev/null && ! grep -q "^step *$k/" "$out" 2>/dev/null; do sleep 0.02; done
    [ -z "$victim" ] && victim=$(sed -n 's/^rank 1 on .*, pid \([0-9]*\)$/\1/p' "$out")
    [ -n "$victim" ] && kill -TERM "$victim" 2>/dev/null
    wait_pids; rc=$?
    local at=$(sed -n 's/^stopped by a signal after step \([0-9]*\) of .*--resume 1$/\1/p' "$out")
    if [ -z "$at" ] || [ "$at" -lt "$k" ] || [ "$at" -ge "$steps" ]; then
        tail -4 "$out"; fail "$name: SIGTERM at step $k did not stop the run with a line saying how to resume"; return
    fi
    local model=$(printf '%s/model_%08d.bin' "$dir" "$at") state=$(printf '%s/state_%08d.bin' "$dir" "$at")
    # the exit status: 143 (128 + SIGTERM) from the process that got the signal (mpirun passes on a non-zero one)
    if [ -f "$model" ] && [ -f "$state" ] && { [ $rc -eq 143 ] || [ $start = start_mpi2 -a $rc -ne 0 ]; }; then
        pass "$name: SIGTERM at step $k: stopped after step $at with its checkpoint, exit status $rc"
    else fail "$name: after SIGTERM at step $k: exit $rc, checkpoint of step $at missing"; return; fi
    $start x "$dir" $tiny --resume 1; wait_pids || { tail -3 "$out"; fail "$name: the resumed run"; return; }
    local last=$(printf 'model_%08d.bin' $steps) last_state=$(printf 'state_%08d.bin' $steps)
    if cmp -s <(trajectory "$dir.straight") <(trajectory "$dir") && cmp -s "$dir.straight/$last" "$dir/$last" &&
       cmp -s "$dir.straight/$last_state" "$dir/$last_state"; then
        pass "$name: resumed from step $at, the same trajectory and final checkpoint as the run never stopped, byte for byte"
    else
        diff <(trajectory "$dir.straight") <(trajectory "$dir") | head -4
        fail "$name: the run resumed after the signal differs from the run never stopped"
    fi
}
signal_case train start_train
if mpi_ok "$TRAIN"; then signal_case "mpi-2-replicas" start_mpi2
else echo "SKIP two MPI replicas: $TRAIN was built without MPI or mpirun is missing"; fi
if [ -x ./train_gpt_cpu ]; then
    signal_case train_gpt_cpu start_gpt
    signal_case "train_gpt_cpu-2-replicas" start_slurm2
else echo "SKIP train_gpt_cpu, one process and two replicas: not built (make train_gpt_cpu)"; fi

# A second signal while the stop's checkpoint is being written ends the run at once; the
# write it cut short is a .tmp file, so the checkpoint before it stays whole: resumed from
# it, the run ends with the straight run's final model and state byte for byte.
# The polling below can miss a write (a small checkpoint takes milliseconds): an attempt whose
# second signal was never sent does not count, and up to 5 are made.
for attempt in 1 2 3 4 5; do
    sig2=$work/sig2.$attempt sent=0
    $RUN --ckpt-every 4 --keep-checkpoints 0 -o "$sig2" >"$sig2.out" 2>&1 &
    pid=$!
    k=$((RANDOM % 16 + 6))
    while kill -0 $pid 2>/dev/null && ! grep -q "^step *$k/" "$sig2.out" 2>/dev/null; do sleep 0.01; done
    kill -TERM $pid 2>/dev/null
    # the first signal must have been taken before the second is sent (two pending SIGTERMs are one)
    while kill -0 $pid 2>/dev/null && ! grep -q "^signal received" "$sig2.out"; do sleep 0.001; done
    while kill -0 $pid 2>/dev/null; do  # the second signal as soon as a checkpoint file is being written
        tmps=("$sig2"/*.tmp)
        [ ${#tmps[@]} -gt 0 ] && { kill -TERM $pid && sent=1; break; }
    done
    wait $pid; rc=$?
    [ $sent -eq 1 ] && break
    echo "   attempt $attempt: the checkpoint write ended before the second signal could be sent; again"
done
tmps=("$sig2"/*.tmp)
if [ $rc -eq 143 ] && grep -q "second signal: exiting at once" "$sig2.out" && [ ${#tmps[@]} -gt 0 ]; then
    pass "a second SIGTERM during the checkpoint write (step $k) exits at once, leaving the write as ${tmps[0]##*/}"
else tail -3 "$sig2.out"; fail "second SIGTERM (sent: $sent): exit $rc, ${#tmps[@]} .tmp files"; fi
if $RUN -o "$sig2" >"$sig2.resume.out" 2>&1 && cmp -s "$work/straight/$last" "$sig2/$last" &&
   cmp -s "$work/straight/$last_state" "$sig2/$last_state"; then
    pass "after the second signal, $(grep -o 'resumed from step [0-9]*' "$sig2.resume.out") ends with the straight run's checkpoint byte for byte"
else tail -3 "$sig2.resume.out"; fail "the run resumed after a second signal differs from the straight run"; fi

# A stop request that comes during an evaluation stops the run after that evaluation, with
# the checkpoint of its step, not after one more step. The validation of step 2 below takes
# about 2 s (all 262,128 tokens of the built-in validation split), and the signal goes out as
# soon as step 2's line is printed, which is when it starts.
val=$work/sig_val
$TRAIN --layers 2 --heads 2 --channels 32 --max-seq-len 32 -b 4 -t 16 --sample-every 0 --threads 1 -n 6 \
    --val-every 2 --val-tokens 262144 -o "$val" >"$val.out" 2>&1 &
pid=$!
while kill -0 $pid 2>/dev/null && ! grep -q "^step *2/" "$val.out" 2>/dev/null; do sleep 0.01; done
kill -TERM $pid 2>/dev/null
wait $pid; rc=$?
if [ $rc -eq 143 ] && grep -q "^step 2 | val loss" "$val.out" && ! grep -q "^step *3/" "$val.out" &&
   grep -q "^stopped by a signal after step 2 of 6" "$val.out" && [ -f "$val/model_00000002.bin" ]; then
    pass "SIGTERM during step 2's validation: stopped after it, with step 2's checkpoint, exit status 143"
else tail -4 "$val.out"; fail "SIGTERM during step 2's validation: exit $rc, not stopped after that validation"; fi

finish
