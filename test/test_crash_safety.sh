#!/usr/bin/env bash
# Checkpoint files under crashes: kill -9 in the middle of checkpoint writes, many times, then
# resume; the final model and state must equal a straight run's byte for byte. Also: stale
# temporary files are removed on resume, --keep-checkpoints rotates, every rename is
# followed by a flush of its directory, and a full disk or a failed rename stops the run
# with the reason and without a state file whose model is missing.
set -u
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-./train}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; failed=$((failed + 1)); }

# A small model with a long position table (maxT = 32768: 2.2M parameters, most of them in
# wpe, which costs AdamW little and the forward pass nothing): a 9 MB model file and an 18 MB
# state file per checkpoint, so most of the run's time goes into the checkpoint writes the
# kills are aimed at.
STEPS=32
RUN="$TRAIN --layers 2 --heads 2 --channels 64 --max-seq-len 32768 -b 4 -t 16 --val-every 0 --sample-every 0
     --threads 1 -n $STEPS --ckpt-every 1 --keep-checkpoints 2 --resume 1"

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
if g++ -shared -fPIC -O1 -o "$work/fsync_spy.so" test/fsync_spy.cpp -ldl; then
    FSYNC_SPY_LOG=$work/fsyncs LD_PRELOAD=$work/fsync_spy.so \
        $TRAIN --layers 2 --heads 2 --channels 32 --max-seq-len 32 -b 4 -t 16 -n 2 --ckpt-every 1 \
        --val-every 0 --sample-every 0 -o "$work/spy" >/dev/null 2>&1
    # 2 checkpoints × (state + model) = 4 renames, each followed by a flush of the directory
    n=$(grep -c "^$work/spy\$" "$work/fsyncs" 2>/dev/null)
    [ "${n:-0}" -eq 4 ] && pass "each of the 4 checkpoint renames is followed by a directory flush" ||
        fail "the output directory was flushed ${n:-0} times, expected 4"
else fail "could not build test/fsync_spy.cpp"; fi

# ---- a full disk during a checkpoint (test/disk_full.cpp, preloaded: no mount, no root):
# the run stops with one line that says why, and leaves the last complete checkpoint as the
# newest, with no state file of the step whose model could not be written; a rename that
# fails says why too
SMALL="$TRAIN --layers 2 --heads 2 --channels 32 --max-seq-len 32 -b 4 -t 16 --val-every 0 --sample-every 0
       --threads 1 --ckpt-every 1"
if g++ -shared -fPIC -O1 -o "$work/disk_full.so" test/disk_full.cpp -ldl; then
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
else fail "could not build test/disk_full.cpp"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
