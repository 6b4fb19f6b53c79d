#!/usr/bin/env bash
# ZeRO stage 1 in the CPU trainer, with real MPI processes (run by test/run_all.sh when
# ./train has MPI). TRAIN=... tests another build of the same trainer.
#
# Invariance: --zero 1 changes where AdamW's state lives and how the gradient sync is done
# (a reduce-scatter, a shard's update, an all-gather), not what is computed: the same global
# batch must train the same losses, gradient norms, final weights and, gathered into the
# state file, the same AdamW moments as --zero 0, within 1e-5 relative (compare_runs.py
# --states; the sums over replicas round differently, ~1e-7 per step). R = 3 does not divide
# the tiny model's 34,688 parameters into shards of whole 8-value packs: it runs on the
# padding. A shard updated twice, or not at all, or an all-gather of the wrong shard moves
# the weights by far more than 1e-5.
# Resume across layouts: the checkpoint files are the unsharded ones, so a run saved with
# --zero 1 on 4 replicas continues with --zero 0 on 1 or --zero 1 on 2, and the reverse, on
# the uninterrupted trajectory.
set -u
cd "$(dirname "$0")/../.."
source test/mpi_lib.sh  # OMPI_ALLOW_RUN_AS_ROOT, $MPIRUN, mpi_ok
TRAIN=${TRAIN:-./train}
PROGRAM=$(basename "$TRAIN")  # how its error lines start
T=16
TINY="$TRAIN --layers 2 --heads 2 --channels 32 --max-seq-len 32 -t $T --val-every 10 --val-tokens 2048
      --sample-every 0 --threads 1 --warmup 5 -l 3e-3 --shuffle 1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source test/suite_lib.sh  # pass, fail, skip, check, finish
suite_arguments "" "$@"  # --help: the usage; it takes no arguments
compare() { python3 test/replicas/compare_runs.py --states "$@"; }

run() {  # DIR R ZERO B SEQUENCES STEPS [more options]: a run of R processes, its output in DIR.out
    local dir=$1 R=$2 zero=$3 B=$4 seqs=$5 steps=$6
    shift 6
    $MPIRUN -np "$R" $TINY -b "$B" -d $((seqs * T)) -n "$steps" --zero "$zero" -o "$dir" "$@" >"$dir.out" 2>&1 ||
        { tail -5 "$dir.out"; return 1; }
}

# ---- invariance: (B, A, R) with --zero 1 against --zero 0 at (8,1,1) (6,1,1 for R = 3)
run "$work/ref8" 1 0 8 8 20 || fail "reference run (8,1,1)"
run "$work/ref6" 1 0 6 6 20 || fail "reference run (6,1,1)"
# the memory line shows the shard: 34,688 parameters padded to 34,704 = 3 × 11,568 for R = 3
for split in "8 1 1 8" "4 1 2 8" "2 2 2 8" "1 2 4 8" "2 1 4 8" "2 1 3 6" "1 2 3 6"; do
    set -- $split
    name="--zero 1 (B,A,R)=($1,$2,$3) trains as --zero 0 at ($4,1,1)"
    if run "$work/z$1$2$3" "$3" 1 "$1" "$4" 20 && grep -q "$2 accumulation × $3 replica" "$work/z$1$2$3.out" &&
       compare "$work/ref$4" "$work/z$1$2$3" 20; then pass "$name"
    else fail "$name"; fi
done
shard=$(grep -o "AdamW state (1/3 shard) [0-9.]* KiB" "$work/z213.out")
if [ "$shard" = "AdamW state (1/3 shard) 90.4 KiB" ]; then  # 2 × 4 bytes × 11,568 = 92,544 B = 90.375 KiB
    pass "R=3: the shard printed is 2 × 11,568 floats of the padded 34,704 ($shard)"
else fail "R=3 shard size: got '$shard'"; fi

# ---- a Llama (its untied head and fewer K/V heads change where the shards fall)
run "$work/lref8" 1 0 8 8 20 --model llama3 || fail "Llama reference run (8,1,1)"
for split in "2 2 2 8" "1 2 4 8"; do
    set -- $split
    name="Llama: --zero 1 (B,A,R)=($1,$2,$3) trains as --zero 0 at ($4,1,1)"
    if run "$work/lz$1$2$3" "$3" 1 "$1" "$4" 20 --model llama3 && compare "$work/lref$4" "$work/lz$1$2$3" 20; then
        pass "$name"
    else fail "$name"; fi
done

# ---- resume across layouts: saved at step 10 by one layout, continued to 20 by another,
# against the uninterrupted --zero 0 run; the step-10 files against that run's too
resume() {  # R ZERO -> R ZERO
    local name="saved with --zero $2 on R=$1, resumed with --zero $4 on R=$3" dir="$work/res$1$2$3$4"
    run "$dir.first" "$1" "$2" $((8 / $1)) 8 20 --ckpt-every 10 || { fail "$name (first part)"; return; }
    mkdir -p "$dir"
    cp "$dir.first/model_00000010.bin" "$dir.first/state_00000010.bin" "$dir/"
    if compare "$work/ref8c" "$dir.first" 10 && run "$dir" "$3" "$4" $((8 / $3)) 8 20 --ckpt-every 10 --resume 1 &&
       grep -q "resumed from step 10" "$dir.out" && compare "$work/ref8c" "$dir" 20 11; then pass "$name"
    else fail "$name"; fi
}
run "$work/ref8c" 1 0 8 8 20 --ckpt-every 10 || fail "reference run with checkpoints"
resume 4 1 1 0
resume 4 1 2 1
resume 1 0 4 1
resume 2 1 4 1

# ---- bad input: one line, exit 2, with the reason
for z in 2 3 -1; do
    out=$($TRAIN -n 1 --zero "$z" 2>&1); rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] &&
       grep -q "^$PROGRAM: --zero $z: only stage 1 (or 0, off) is supported: stages 2 and 3 shard the gradients too, which would need a reduce-scatter after every micro-batch" <<<"$out"; then
        pass "--zero $z: exit 2, one line with the reason"
    else echo "   $out"; fail "--zero $z (exit $rc)"; fi
done

# ---- a frozen replica inside ZeRO's collectives ends the job with one line naming it: the
# stopped rank is in its forward or backward pass, so the others wait in the reduce-scatter
# (or, if it stopped between the collectives, in the all-gather or the scalar all-reduce)
log="$work/frozen.out"
timeout 90 $MPIRUN -np 2 $TINY -b 4 -d $((8 * T)) -n 100000 -o "" --zero 1 --comm-timeout 3 >"$log" 2>&1 &
job=$!
for _ in $(seq 300); do grep -q "^step     5/" "$log" 2>/dev/null && break; sleep 0.1; done
pid=$(sed -n "s/^rank 1 on .*, pid \([0-9]*\)$/\1/p" "$log")
[ -n "$pid" ] && kill -STOP "$pid"
t0=$SECONDS
wait $job; rc=$? took=$((SECONDS - t0))
[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
name="--zero 1: a stopped rank 1 of 2 ends the job with one line naming it (${took} s)"
if [ -n "$pid" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -le 20 ] &&
   grep -qE "rank 1 \(.*pid $pid\) did not arrive at the (reduce-scatter|all-gather|all-reduce) of .* within --comm-timeout 3 s" "$log" &&
   [ "$(grep -c "^$PROGRAM:" "$log")" -eq 1 ]; then
    pass "$name: $(grep -oE 'at the (reduce-scatter|all-gather|all-reduce)' "$log")"
else tail -5 "$log"; fail "$name (exit $rc)"; fi

finish
