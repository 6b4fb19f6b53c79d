#!/usr/bin/env bash
# The GPU trainer's replicas, on the CPU runtime: train_gpt_cpu as real processes running
# the real multi-rank code (NCCL's id exchange, NCCL collectives, one gradient all-reduce
# per step), started the two ways a cluster starts them:
#   * mpirun, with train_gpt_cpu built with MPI: MPI carries NCCL's id;
#   * Slurm-style without MPI: SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID per process, and
#     NCCL's id through the file named by --nccl-init-file.
# The same global batch of 8 sequences split over R = 1, 2 and 4 replicas must train the
# same model (losses, gradient norms, validation losses and weights within 1e-5:
# test/replicas/compare_runs.py), and a rank that dies must end the job with an error that names it,
# never a hang. Without MPI the mpirun cases are skipped (counted; a failure in CI, where
# .ci/run installs Open MPI).
set -u
cd "$(dirname "$0")/../.."
source test/mpi_lib.sh  # OMPI_ALLOW_RUN_AS_ROOT, $MPIRUN, mpi_ok
export OMP_WAIT_POLICY=passive CPU_CUDA_THREADS=1                 # up to 4 ranks share the cores
T=16 STEPS=10
# --epilogues separate: its bias gradients are summed over fixed chunks of rows, so the sums do
# not depend on how the batch is split, and the splits below can be held to 1e-5 in bf16 too.
# cuBLASLt's BGRADB (the default, fused) sums a product's rows in an order that depends on their
# number: one split with it is checked below at the bf16 bound of replicas/gpu_zero.sh.
TINY="./train_gpt_cpu --layers 2 --heads 2 --channels 32 --max-seq-len 32 -t $T -d $((8 * T)) --val-every 5
      --val-tokens 512 --sample-every 0 --warmup 5 -l 3e-3 --shuffle 1 --epilogues separate"  # validation split over the ranks too
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source test/suite_lib.sh  # pass, fail, skip, check, finish
suite_arguments "" "$@"  # --help: the usage; it takes no arguments

[ -x ./train_gpt_cpu ] || { echo "./train_gpt_cpu is not built (make train_gpt_cpu)"; echo "0 passed, 1 failed"; exit 1; }
has_mpi=$(mpi_ok ./train_gpt_cpu && echo yes)

arithmetic_ok() {  # OUTPUT B A R: the trainer printed the split it was asked for
    grep -q "micro-batch ${2}×$T = $(($2 * T)) tokens × $3 accumulation × $4 replica" "$1" || {
        echo "   unexpected arithmetic line:"; grep micro-batch "$1"; return 1; }
}
mpi_split() {  # B A R DIR
    timeout 300 $MPIRUN -np "$3" $TINY -b "$1" -n $STEPS -o "$4" >"$4.out" 2>&1 || { tail -5 "$4.out"; return 1; }
    arithmetic_ok "$4.out" "$1" "$2" "$3"
}
# R processes as srun starts them (no MPI): each learns its rank from Slurm's variables.
slurm_start() {  # R DIR ARGS...: starts them in the background; their pids in $pids
    local R=$1 dir=$2; shift 2
    pids=()
    for ((r = 0; r < R; r++)); do
        env -u OMPI_COMM_WORLD_SIZE SLURM_PROCID=$r SLURM_NTASKS=$R SLURM_LOCALID=$r SLURM_JOB_ID=$$ \
            SLURM_STEP_ID=0 $TINY "$@" -o "$dir" --nccl-init-file "$dir.ncclid" >"$dir.$r.out" 2>&1 &
        pids+=($!)
    done
}
# Waits for the processes, at most SECONDS (then kills them: a hang is a failure, not a
# stuck test run); 0 if every one exited with status 0.
wait_all() {  # SECONDS PID...
    local deadline=$((SECONDS + $1)) pid rc=0; shift
    for pid in "$@"; do
        while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && { echo "   pid $pid still running after the deadline: killed"; kill -9 "$@" 2>/dev/null; }
        wait "$pid" 2>/dev/null || rc=1
    done
    return $rc
}
slurm_rank() {  # R RANK DIR ARGS...: starts rank RANK of R alone, in the background; its pid in $pid
    local R=$1 r=$2 dir=$3; shift 3
    env -u OMPI_COMM_WORLD_SIZE SLURM_PROCID=$r SLURM_NTASKS=$R SLURM_LOCALID=$r SLURM_JOB_ID=$$ \
        SLURM_STEP_ID=0 $TINY "$@" -o "$dir" --nccl-init-file "$dir.ncclid" >"$dir.$r.out" 2>&1 &
    pid=$!
}
slurm_split() {  # B A R DIR
    slurm_start "$3" "$4" -b "$1" -n $STEPS
    wait_all 300 "${pids[@]}" || { tail -3 "$4".*.out; return 1; }
    arithmetic_ok "$4.0.out" "$1" "$2" "$3"
}

# ---- the reference: one process, the whole global batch in one micro-batch
if timeout 300 $TINY -b 8 -n $STEPS -o "$work/ref" >"$work/ref.out" 2>&1; then pass "reference run (8,1,1)"
else tail -5 "$work/ref.out"; fail "reference run (8,1,1)"; fi

# ---- the same global batch over more replicas
if [ "$has_mpi" = yes ]; then
    for split in "4 1 2" "2 1 4" "2 2 2" "1 2 4"; do
        set -- $split
        name="mpirun: (B,A,R)=($1,$2,$3) equals (8,1,1)"
        if mpi_split "$1" "$2" "$3" "$work/m$1$2$3" && python3 test/replicas/compare_runs.py "$work/ref" "$work/m$1$2$3" $STEPS
        then pass "$name"; else fail "$name"; fi
    done
    # the default epilogues (fused): the same model within bf16's split bound (2e-3, as
    # replicas/gpu_zero.sh); 1e-5 in fp32, where rounding the sums differently moves the last bits only
    fused_tol=1e-5
    ./train_gpt_cpu --dry-run 1 2>&1 | grep -q "bf16" && fused_tol=2e-3
    name="mpirun, --epilogues fused: (B,A,R)=(4,1,2) equals (8,1,1) within $fused_tol"
    if timeout 300 $TINY --epilogues fused -b 8 -n $STEPS -o "$work/ref_fused" >"$work/ref_fused.out" 2>&1 &&
        timeout 300 $MPIRUN -np 2 $TINY --epilogues fused -b 4 -n $STEPS -o "$work/m_fused" >"$work/m_fused.out" 2>&1 &&
        python3 test/replicas/compare_runs.py --tol $fused_tol "$work/ref_fused" "$work/m_fused" $STEPS
    then pass "$name"; else fail "$name"; fi
else
    skip "mpirun splits" "train_gpt_cpu was built without MPI (apt-get install libopenmpi-dev openmpi-bin)"
fi
for split in "4 1 2" "1 2 4"; do
    set -- $split
    name="Slurm-style with --nccl-init-file: (B,A,R)=($1,$2,$3) equals (8,1,1)"
    if slurm_split "$1" "$2" "$3" "$work/s$1$2$3" && python3 test/replicas/compare_runs.py "$work/ref" "$work/s$1$2$3" $STEPS
    then pass "$name"; else fail "$name"; fi
done

# ---- a Llama (RMSNorm, RoPE, SwiGLU, an untied head, NH = 2 query heads sharing KVH = 1):
# the same step, so the same invariance. 1e-5 in fp32; in bf16 the split bound of the fused
# epilogues above (2e-3): a split sums the weight gradients in another float32 order, and once
# that flips one bf16 rounding the runs part at ~1e-5 (measured here: loss 1.1e-5, weights 2e-6)
llama_tol=1e-5
./train_gpt_cpu --dry-run 1 2>&1 | grep -q "bf16" && llama_tol=2e-3
name="Llama, Slurm-style: (B,A,R)=(4,1,2) equals (8,1,1) within $llama_tol"
if timeout 300 $TINY --model llama3 -b 8 -n $STEPS -o "$work/lref" >"$work/lref.out" 2>&1 &&
   slurm_start 2 "$work/l412" --model llama3 -b 4 -n $STEPS && wait_all 300 "${pids[@]}" &&
   arithmetic_ok "$work/l412.0.out" 4 1 2 &&
   python3 test/replicas/compare_runs.py --tol $llama_tol "$work/lref" "$work/l412" $STEPS
then pass "$name"; else tail -n 3 "$work"/lref.out "$work"/l412.*.out; fail "$name"; fi

# ---- evaluation split over the ranks: the golden model's HellaSwag accuracies (the PyTorch
# reference's, dev/reference/hellaswag_reference.py) and one validation loss, the same line
# from 1 and 2 ranks (the replicas add up their sums; 4 decimals are printed). The 2 ranks
# start Slurm-style, so this runs without MPI too.
python3 -c "import sys; sys.path.insert(0, 'data'); import random, shards; r = random.Random(5)
shards.write_shard('$work/v91.bin', [r.randrange(91) for _ in range(3000)], quiet=True)"
EVAL="./train_gpt_cpu -e test/golden/model_tiny.bin -i $work/v91.bin -j $work/v91.bin -t 32 -b 4 -n 0
      --val-every 1 --val-tokens 1024 --sample-every 0 --hellaswag test/golden/hellaswag_tiny.bin"
# The accuracies may differ from the reference's only by examples whose choice is within the
# build's rounding. fp32: none (float32 against float64 moves a mean loss by ~1e-6). bf16:
# an ending's mean loss moves by up to 5e-3, its summed loss by 5e-3 per token (gpu_trainer/trainer.cu,
# "HellaSwag"), so a choice can flip only where the runner-up is within twice that; counted
# from the reference (1 of 64 for acc, 7 for acc_norm). Plus 5e-5, the printed rounding.
if ./train_gpt_cpu --dry-run 1 2>&1 | grep -q "bf16"; then hs_tol=5e-3; else hs_tol=0; fi
read -r acc acc_norm acc_slack acc_norm_slack < <(awk -v tol=$hs_tol '!/^#/ { n++; a += $1 == $2; an += $1 == $3
    for (k = 0; k < 4; k++) { s[k] = $(4 + k); m[k] = $(8 + k); len[k] = s[k] / m[k] }
    ua = un = 0
    for (k = 0; k < 4; k++) { if (k != $2 && s[k] - s[$2] <= tol * (len[k] + len[$2])) ua = 1
                              if (k != $3 && m[k] - m[$3] <= 2 * tol) un = 1 }
    na += ua; nn += un }
    END { printf "%.4f %.4f %.6f %.6f\n", a / n, an / n, na / n + 5e-5, nn / n + 5e-5 }' test/golden/hellaswag_tiny_reference.txt)
one=$(timeout 300 $EVAL 2>&1 | grep '^step 0 |')
TINY=$EVAL slurm_start 2 "$work/eval2"
wait_all 300 "${pids[@]}"
two=$(grep '^step 0 |' "$work/eval2.0.out")
got_norm=$(sed -nE 's/.*HellaSwag acc_norm ([0-9.]+), acc ([0-9.]+)$/\1/p' <<<"$one")
got_acc=$(sed -nE 's/.*HellaSwag acc_norm ([0-9.]+), acc ([0-9.]+)$/\2/p' <<<"$one")
if [ -n "$got_norm" ] && [ -n "$got_acc" ] && [ "$one" = "$two" ] &&
   awk -v a="$got_acc" -v b="$acc" -v c="$got_norm" -v d="$acc_norm" -v sa="$acc_slack" -v sn="$acc_norm_slack" \
       'BEGIN { exit !((a - b <= sa && b - a <= sa) && (c - d <= sn && d - c <= sn)) }'; then
    pass "evaluation over 2 ranks prints what 1 rank does: $one (reference acc_norm $acc_norm ± $acc_norm_slack, acc $acc ± $acc_slack)"
else echo "   1 rank: $one"; echo "   2 ranks: $two"
    echo "   reference: acc_norm $acc_norm ± $acc_norm_slack, acc $acc ± $acc_slack"; tail -3 "$work"/eval2.*.out
    fail "evaluation over 2 ranks"; fi
if [ "$has_mpi" = yes ]; then
    three=$(timeout 300 $MPIRUN -np 2 $EVAL 2>&1 | grep '^step 0 |')
    if [ -n "$one" ] && [ "$three" = "$one" ]; then pass "evaluation over 2 ranks under mpirun prints the same line"
    else echo "   mpirun: $three"; fail "evaluation over 2 ranks under mpirun"; fi
else
    skip "evaluation under mpirun" "train_gpt_cpu was built without MPI"
fi

# ---- a command-line error under mpirun: one line (rank 0's), mpirun and each rank exit 2 (each
# rank's status through a shell that records it and exits 0: mpirun ends the others once one
# exits non-zero). The lines after it about the non-zero exit are mpirun's own.
if [ "$has_mpi" = yes ]; then
    out=$(timeout 120 $MPIRUN -np 2 $TINY -b 4 -n 2 -o "" --bogus-option 2>&1); rc=$?
    timeout 120 $MPIRUN -np 2 sh -c '"$@" 2>/dev/null; echo $? >'"$work"'/usage_rc.$OMPI_COMM_WORLD_RANK' sh \
        $TINY -b 4 -n 2 -o "" --bogus-option >/dev/null 2>&1
    statuses=$(cat "$work"/usage_rc.0 "$work"/usage_rc.1 2>/dev/null | tr '\n' ' ')
    name="mpirun -np 2 ./train_gpt_cpu --bogus-option: one line, by one rank; mpirun and every rank exit 2"
    if [ $rc -eq 2 ] && [ "$(grep -c '^train_gpt_cpu:' <<<"$out")" -eq 1 ] && ! grep -q MPI_ABORT <<<"$out" &&
       [ "$statuses" = "2 2 " ]; then pass "$name"
    else echo "$out" | head -5; echo "   the ranks' statuses: $statuses"; fail "$name (exit $rc)"; fi
else
    skip "a command-line error under mpirun" "train_gpt_cpu was built without MPI"
fi

# ---- a rank that dies mid-run: the others stop with an error naming it, within seconds
slurm_start 2 "$work/dead" -b 4 -n 100000
for _ in $(seq 300); do grep -q "step     2/" "$work/dead.0.out" 2>/dev/null && break; sleep 0.1; done
kill -9 "${pids[1]}"; wait "${pids[1]}" 2>/dev/null
start=$SECONDS
wait_all 60 "${pids[0]}"; rc=$?  # non-zero: it failed (or was killed at the deadline)
took=$((SECONDS - start))
# rank 0's error (not its start-up list, "rank 1 on HOST") names rank 1, by its pid: NCCL's
# (CPU runtime: "ncclAllReduce (rank 0 of 2): rank 1 (pid N) exited or was killed") or the
# watchdog's ("rank 1 (HOST, pid N) did not arrive at the ...")
if [ $rc -ne 0 ] && [ $took -le 30 ] &&
   grep -qE "rank 0[^:]*: .*rank 1 \([^)]*pid ${pids[1]}\) (exited or was killed|did not arrive)" "$work/dead.0.out"; then
    pass "a rank killed mid-run ends the job in ${took} s with an error naming it"
else
    tail -3 "$work/dead.0.out"; fail "killed rank (still running, or no error naming it, after ${took} s)"
fi
wait 2>/dev/null

# ---- a rank that freezes (SIGSTOP): the others stop within seconds of --comm-timeout, in
# every sync mode: the all-reduce at the end of the step (--grad-sync end), the buckets
# overlapped with the backward on a side stream (the default), and those in bf16. The CPU
# runtime's collectives run after their call returns and its streams are independent, as on a
# GPU (cpu_cuda/streams.h): the compute stream's work does not wait for a collective in flight
# on the side stream, so the watchdog's wait is reached; the runtime's own bound
# (CPU_CUDA_NCCL_TIMEOUT, 300 s) must not be what ends it. Without MPI no rank can be asked
# where it waits: the line names the collective and the timeout.
# (Here the end and the bf16 buckets, whose side stream runs kernels as well as collectives; under
# mpirun below, all three.)
for sync in "--grad-sync end" "--grad-sync overlap --grad-sync-dtype bf16"; do
    CPU_CUDA_NCCL_TIMEOUT=300 slurm_start 2 "$work/frozen" -b 4 -n 100000 --comm-timeout 3 $sync
    for _ in $(seq 300); do grep -q "step     2/" "$work/frozen.0.out" 2>/dev/null && break; sleep 0.1; done
    kill -STOP "${pids[1]}"
    start=$SECONDS
    wait_all 60 "${pids[0]}"; rc=$?
    took=$((SECONDS - start))
    kill -9 "${pids[1]}"; wait "${pids[1]}" 2>/dev/null
    if [ $rc -ne 0 ] && [ $took -le 15 ] && grep -q "did not complete within --comm-timeout 3 s" "$work/frozen.0.out"; then
        pass "$sync: a frozen rank ends the job in ${took} s, at --comm-timeout"
    else
        tail -3 "$work/frozen.0.out"; fail "$sync: frozen rank (still running, or no --comm-timeout error, after ${took} s)"
    fi
done

# ---- the same under mpirun: MPI asks the ranks where they wait, so the line names the
# frozen rank (by the pid the start-up lines print) and the collective it did not come to
if [ "$has_mpi" = yes ]; then
    for sync in "--grad-sync end" "--grad-sync overlap" "--grad-sync overlap --grad-sync-dtype bf16"; do
        log="$work/mfrozen.out"
        CPU_CUDA_NCCL_TIMEOUT=300 timeout 120 $MPIRUN -np 2 $TINY -b 4 -n 100000 -o "" --comm-timeout 3 $sync \
            >"$log" 2>&1 &
        job=$!
        for _ in $(seq 300); do grep -q "^step     2/" "$log" && break; sleep 0.1; done
        pid=$(sed -n "s/^rank 1 on .*, pid \([0-9]*\)$/\1/p" "$log")
        [ -n "$pid" ] && kill -STOP "$pid"
        start=$SECONDS
        wait $job; rc=$?
        took=$((SECONDS - start))
        [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null  # in case mpirun left it behind, stopped
        if [ -n "$pid" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -le 15 ] &&
           grep -qE "rank 1 \(.*pid $pid\) did not arrive at the (all-reduce|barrier) of .* within --comm-timeout 3 s" "$log"; then
            pass "mpirun $sync: a frozen rank ends the job in ${took} s with a line naming it"
        else tail -5 "$log"; fail "mpirun $sync: frozen rank (exit $rc after ${took} s)"; fi
    done
fi

# ---- NCCL's start-up is waited for under the watchdog too: rank 0 of 2, whose rank 1 never
# starts, ends at --comm-timeout (not at the runtime's 300 s)
CPU_CUDA_NCCL_TIMEOUT=300 slurm_rank 2 0 "$work/alone" -b 4 -n 2 --comm-timeout 2
start=$SECONDS
wait_all 60 "$pid"; rc=$?
took=$((SECONDS - start))
if [ $rc -ne 0 ] && [ $took -le 15 ] &&
   grep -q "NCCL start-up of 0 bytes (collective 1) did not complete within --comm-timeout 2 s" "$work/alone.0.out"; then
    pass "a rank that never comes to NCCL's start-up ends the job in ${took} s, at --comm-timeout"
else tail -3 "$work/alone.0.out"; fail "NCCL start-up without rank 1 (exit $rc after ${took} s)"; fi

# ---- a stale NCCL id file: the one that rank 0 above left behind (it never got to remove
# it), aged an hour: a dead job's, with this job's Slurm job and step. Rank 1 of a new job
# that starts before its rank 0 must not take the dead job's id but wait for the new one;
# and when no rank 0 comes, it must end at --comm-timeout with one line naming the file.
if [ -f "$work/alone.ncclid" ]; then
    touch -d '1 hour ago' "$work/alone.ncclid"
    cp -p "$work/alone.ncclid" "$work/restart.ncclid"
    cp -p "$work/alone.ncclid" "$work/orphan.ncclid"
    CPU_CUDA_NCCL_TIMEOUT=300 slurm_rank 2 1 "$work/restart" -b 4 -n 2 --comm-timeout 10; first=$pid
    sleep 1
    CPU_CUDA_NCCL_TIMEOUT=300 slurm_rank 2 0 "$work/restart" -b 4 -n 2 --comm-timeout 10
    if wait_all 120 "$pid" "$first"; then pass "a stale NCCL id file is not taken for the new job's"
    else tail -3 "$work/restart".*.out; fail "stale NCCL id file, rank 0 late"; fi

    CPU_CUDA_NCCL_TIMEOUT=300 slurm_rank 2 1 "$work/orphan" -b 4 -n 2 --comm-timeout 2
    start=$SECONDS
    wait_all 60 "$pid"; rc=$?
    took=$((SECONDS - start))
    if [ $rc -ne 0 ] && [ $took -le 15 ] && [ "$(grep -c "error" "$work/orphan.1.out")" -eq 1 ] &&
       grep -q "'$work/orphan.ncclid' holds NCCL's id for slurm job $$ step 0 world 2, but was written" "$work/orphan.1.out"
    then pass "a stale NCCL id file that no rank 0 replaces ends the job in ${took} s, naming it"
    else cat "$work/orphan.1.out"; fail "stale NCCL id file, no rank 0 (exit $rc after ${took} s)"; fi
else
    fail "rank 0 left no NCCL id file behind for the stale-file tests"
fi

finish
