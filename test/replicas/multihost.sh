#!/usr/bin/env bash
# Many hosts without a cluster: ./train over MPI across network namespaces on one machine
# (test/replicas/cluster.sh: each host its own network, host name and disk; TCP over veth
# links to a bridge, no shared memory, so the gradients really cross a link).
#
#   test/replicas/multihost.sh --can-run   says why not (exit 1) where namespaces cannot be made
#   test/replicas/multihost.sh             the cases; closing line "N passed, M failed"
#
# The invariance across hosts is replicas/cpu_replicas.sh's, with its method and tolerance
# (compare_runs.py: losses, norms and weights within 1e-5 relative): the same global batch of
# 8 sequences as one process, (B,A,R) = (8,1,1), split over 2 and 4 hosts × 1 rank and
# 2 hosts × 2 ranks, must train the same model. The faults (a host's link down, its rank
# killed, its rank frozen) must end the job within --comm-timeout 3 s and a few seconds,
# with a line naming the rank, leave nothing running on any host, and (link down) leave a
# checkpoint that the remaining hosts resume exactly.
set -u
cd "$(dirname "$0")/../.."
source test/suite_lib.sh  # pass, fail, skip, check, finish; suite_arguments
source test/replicas/cluster.sh
usage="bash test/replicas/multihost.sh [--can-run]   (--can-run: exit 1 and say why where the hosts cannot be made; without it, the cases)"
if [ "${1:-}" = --can-run ]; then
    [ $# -eq 1 ] && { cluster_can_run; exit; }
    suite_arguments "$usage" "${@:2}"
fi
suite_arguments "$usage" "$@"
why=$(cluster_can_run) || { echo "SKIP many hosts: $why"; echo "0 passed, 0 failed"; exit 0; }

T=16 STEPS=30
TINY="./train --layers 2 --heads 2 --channels 32 --max-seq-len 32 -t $T -d $((8 * T)) --val-every 10
      --val-tokens 2048 --sample-every 0 --threads 1 --warmup 5 -l 3e-3 --shuffle 1 -n $STEPS"
compare() { python3 test/replicas/compare_runs.py "$@"; }

cluster_up 4 || { echo "FAIL could not make the cluster"; echo "0 passed, 1 failed"; exit 1; }
disk=$CLUSTER_DIR/disk  # the same path on every host; host hN's files are in $CLUSTER_DIR/hN/disk
ref=$CLUSTER_DIR/ref    # one process, outside the cluster
$TINY -b 8 -o "$ref" >"$ref.out" 2>&1 || { cat "$ref.out"; fail "reference run (8,1,1)"; }

# hosts HOSTS B NAME [ARGS...]: ./train on the hosts (--host syntax, e.g. h1:2,h2:2), output $NAME.out
hosts() {
    local hostlist=$1 B=$2 name=$3 np
    shift 3
    np=$(tr ',' '\n' <<<"$hostlist" | awk -F: '{ n += ($2 == "" ? 1 : $2) } END { print n }')
    timeout 120 "$CLUSTER_DIR/mpirun" --host "$hostlist" -np "$np" $TINY -b "$B" -o "$disk/$name" "$@" \
        >"$CLUSTER_DIR/$name.out" 2>&1
}
# place RUN STEP NAME HOSTS...: RUN's checkpoint at STEP (on h1's disk) copied to NAME on each
# host's disk. Every rank reads the checkpoint it resumes from: without a shared file system,
# it must be on every host (rank 0 alone writes it).
place() {
    local from=$CLUSTER_DIR/h1/disk/$1 step=$2 name=$3 h
    shift 3
    for h in "$@"; do
        mkdir -p "$CLUSTER_DIR/$h/disk/$name"
        cp "$from/model_$step.bin" "$from/state_$step.bin" "$CLUSTER_DIR/$h/disk/$name/" || return 1
    done
}
# nothing_left: no process of the job on any host
nothing_left() {
    local h left=""
    for h in $(seq "$CLUSTER_N"); do left+=$(cluster_pids "h$h" | xargs -r ps -o pid=,comm= -p); done
    [ -z "$left" ] || { echo "   left running: $left"; return 1; }
}

# ---- the invariance across hosts, and where the files land
for run in "h1,h2 4 2 2x1" "h1,h2,h3,h4 2 4 4x1" "h1:2,h2:2 2 4 2x2"; do
    set -- $run
    name="$4 hosts×ranks: (B,A,R)=($2,1,$3) equals one process (8,1,1), over TCP between hosts"
    out=$CLUSTER_DIR/$4.out
    if hosts "$1" "$2" "$4" --ckpt-every 10 &&
       grep -q "× 1 accumulation × $3 replicas" "$out" && grep -q "^rank 1 on h$([ "$4" = 2x2 ] && echo 1 || echo 2), " "$out" &&
       grep -q "^rank $(($3 - 1)) on h${4%%x*}, " "$out" && compare "$ref" "$CLUSTER_DIR/h1/disk/$4" $STEPS; then
        pass "$name"
    else tail -5 "$out"; fail "$name"; fi
    name="$4: checkpoints and log written by rank 0 on h1's disk only"
    if [ -f "$CLUSTER_DIR/h1/disk/$4/model_00000010.bin" ] && [ -f "$CLUSTER_DIR/h1/disk/$4/log.jsonl" ] &&
       [ ! -e "$CLUSTER_DIR/h2/disk/$4" ]; then pass "$name"
    else ls -R "$CLUSTER_DIR"/h*/disk | head; fail "$name"; fi
done

# ---- the log's sync_ms: the time of the gradient sync, inside the step's time
name="2x1: every step logs a sync_ms in (0, ms]: the all-reduce over the link takes time, and less than the step"
if python3 -c "import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
t = [x for x in r if x['type'] == 'train']
bad = [x for x in t if not 0 < x['sync_ms'] <= x['ms']]
print('   steps', len(t), 'outside (0, ms]:', [(x['step'], x['sync_ms'], x['ms']) for x in bad][:3])
sys.exit(len(t) != $STEPS or bool(bad))" "$CLUSTER_DIR/h1/disk/2x1/log.jsonl"; then pass "$name"; else fail "$name"; fi

# ---- resume on another host count: 2 hosts × 2 ranks to step 10, then 4 hosts × 1 to the end
place 2x2 00000010 r4 h1 h2 h3 h4
name="resume at step 10 of 2 hosts × 2 ranks on 4 hosts × 1 continues the same trajectory"
if hosts h1,h2,h3,h4 2 r4 --resume 1 && compare "$CLUSTER_DIR/h1/disk/2x2" "$CLUSTER_DIR/h1/disk/r4" $STEPS 11; then
    pass "$name"
else tail -5 "$CLUSTER_DIR/r4.out"; fail "$name"; fi

# ---- faults. Each run is slowed by a link of 4 Mbit/s (~0.4 s a step) so that the fault
# falls mid-run; FAULT runs once the step-5 checkpoint exists. The job must end within
# --comm-timeout 3 s + the roll call's 2 s + the teardown (for a dead link, Open MPI waits
# for its daemon until TCP gives up: ~3 s with the hosts' tcp_retries2=3; cluster.sh): 25 s
# leaves room for a slow machine. Sets $took, $rc and $pid (the faulty rank's).
# fault HOSTS B NAME RANK 'FAULT' (a command line, run with $pid set)
fault() {
    local hostlist=$1 B=$2 name=$3 rank=$4
    cluster_limit 4mbit
    hosts "$hostlist" "$B" "$name" --ckpt-every 5 --comm-timeout 3 &
    local job=$! i
    for i in $(seq 600); do [ -f "$CLUSTER_DIR/h1/disk/$name/model_00000005.bin" ] && break; sleep 0.05; done
    pid=$(sed -n "s/^rank $rank on .*, pid \([0-9]*\)$/\1/p" "$CLUSTER_DIR/$name.out")
    eval "$5"
    local t0=$SECONDS
    wait $job; rc=$? took=$((SECONDS - t0))
    cluster_unlimit
}
# ended_naming NAME RANK HOST [PATTERN]: the job failed in time, with a line naming the rank
# (the watchdog's, or PATTERN: Open MPI's own), and at most one line of the trainer
ended_naming() {
    local out=$CLUSTER_DIR/$1.out named="rank $2 \\($3, pid $pid\\) did not arrive at the all-reduce"
    [ -n "$pid" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -le 25 ] &&
        grep -qE "$named${4:+|$4}" "$out" &&
        [ "$(grep -c '^train:' "$out")" -le 1 ] || { tail -8 "$out"; return 1; }
}

# a host's link goes down mid-run; the remaining two hosts resume from the last checkpoint
fault h1,h2,h3,h4 2 down 3 'cluster_link h4 down'
name="h4's link down: the job ends naming rank 3 (${took} s), nothing left running on any host"
if ended_naming down 3 h4 && sleep 1 && nothing_left; then pass "$name"; else fail "$name (exit $rc)"; fi
cluster_link h4 up
sleep 2
name="h4's link back up after the job ended: no stray process on any host"
if nothing_left; then pass "$name"; else fail "$name"; fi
last=$(ls "$CLUSTER_DIR/h1/disk/down" | sed -n 's/^model_\([0-9]*\)\.bin$/\1/p' | sort | tail -1)
place down "$last" rest h1 h2
name="resume of the last checkpoint (step $((10#${last:-0}))) on the 2 remaining hosts (B=2, A=2) continues exactly"
if [ -n "$last" ] && [ $((10#$last)) -lt $STEPS ] && hosts h1,h2 2 rest --resume 1 &&
   grep -q "2 accumulation × 2 replicas" "$CLUSTER_DIR/rest.out" &&
   compare "$ref" "$CLUSTER_DIR/h1/disk/rest" $STEPS $((10#$last + 1)); then pass "$name"
else tail -5 "$CLUSTER_DIR/rest.out"; fail "$name"; fi

# a host's rank killed: Open MPI's daemon on that host sees it die and ends the job
fault h1,h2 4 killed 1 'kill -KILL $pid'
name="h2's rank killed (kill -9): the job ends naming rank 1 (${took} s), nothing left running"
if ended_naming killed 1 h2 "rank 1 with PID $pid on node h2 exited on signal 9" && sleep 1 && nothing_left; then pass "$name"
else fail "$name (exit $rc)"; fi

# a host's rank frozen: the watchdog's roll call names it
fault h1,h2 4 frozen 1 'kill -STOP $pid'
name="h2's rank frozen (SIGSTOP): the job ends naming rank 1 (${took} s), nothing left running"
if ended_naming frozen 1 h2 && sleep 1 && nothing_left; then pass "$name"; else fail "$name (exit $rc)"; fi

# ---- the GPU trainer without MPI, as srun starts it on two hosts: Slurm's variables give the
# ranks and NCCL's id travels through --nccl-init-file, a file both hosts see ($CLUSTER_DIR/
# shared; their disks are their own). The CPU runtime's NCCL moves the data through shared
# memory and connects the ranks of one machine only, by host name: across hosts of their own
# names it must refuse with a line naming both; under the machine's one name (the memory
# really is shared) the hosts train as one process does, and a frozen rank on h2 ends rank 0
# on h1 at --comm-timeout. What crosses the link is nothing: the rendezvous and the watchdog
# are what is tested (docs/replicas.md).
GPU_TINY="./train_gpt_cpu --layers 2 --heads 2 --channels 32 --max-seq-len 32 -t $T -d $((8 * T)) --val-every 3
          --val-tokens 512 --sample-every 0 --warmup 5 -l 3e-3 --shuffle 1"
# slurm_on HOST RANK R NAME ARGS...: rank RANK of R on HOST, in the background; its pid in $pid.
# SLURM_LOCALID is the rank: under one host name the CPU runtime sees one machine, whose
# "GPUs" the ranks must not share.
slurm_on() {
    local host=$1 r=$2 R=$3 name=$4
    shift 4
    mkdir -p "$CLUSTER_DIR/shared"
    cluster_exec "$host" env -u OMPI_COMM_WORLD_SIZE OMP_WAIT_POLICY=passive CPU_CUDA_THREADS=1 SLURM_PROCID=$r \
        SLURM_NTASKS=$R SLURM_LOCALID=$r SLURM_JOB_ID=$$ SLURM_STEP_ID=0 $GPU_TINY -o "$disk/$name" \
        --nccl-init-file "$CLUSTER_DIR/shared/$name.ncclid" "$@" >"$CLUSTER_DIR/$name.$r.out" 2>&1 &
    pid=$!
}
# ended PID SECONDS: waits at most SECONDS for PID to end; false if it still runs (then killed)
ended() {
    local _
    for _ in $(seq $(($2 * 10))); do kill -0 "$1" 2>/dev/null || { wait "$1"; return 0; }; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null; return 1
}
if [ ! -x ./train_gpt_cpu ]; then
    echo "SKIP train_gpt_cpu across hosts: ./train_gpt_cpu is not built (make train_gpt_cpu)"
else
    slurm_on h1 0 2 named -b 4 -n 6 --comm-timeout 3; p0=$pid
    slurm_on h2 1 2 named -b 4 -n 6 --comm-timeout 3; p1=$pid
    name="train_gpt_cpu on h1 and h2 under their own names: rank 1 read h1's NCCL id and refuses, naming both hosts"
    if ended $p1 60 && ended $p0 60 &&
       grep -q "the id was made on host 'h1' and this is 'h2'" "$CLUSTER_DIR/named.1.out"; then pass "$name"
    else tail -n 2 "$CLUSTER_DIR"/named.*.out; fail "$name"; fi
    export CLUSTER_SAME_NAME=1
    env OMP_WAIT_POLICY=passive CPU_CUDA_THREADS=1 $GPU_TINY -b 8 -n 6 -o "$CLUSTER_DIR/gref" >"$CLUSTER_DIR/gref.out" 2>&1
    slurm_on h1 0 2 gpu -b 4 -n 6; p0=$pid
    slurm_on h2 1 2 gpu -b 4 -n 6; p1=$pid
    name="train_gpt_cpu, Slurm-style on h1 and h2, NCCL's id in a shared file: (4,1,2) equals (8,1,1)"
    if ended $p0 300 && ended $p1 60 && grep -q "× 1 accumulation × 2 replicas" "$CLUSTER_DIR/gpu.0.out" &&
       compare "$CLUSTER_DIR/gref" "$CLUSTER_DIR/h1/disk/gpu" 6; then pass "$name"
    else tail -n 3 "$CLUSTER_DIR"/gpu.*.out; fail "$name"; fi
    # without MPI no roll call: the line names the collective and the timeout (replicas/gpu_replicas.sh)
    slurm_on h1 0 2 gfrozen -b 4 -n 100000 --comm-timeout 3; p0=$pid
    slurm_on h2 1 2 gfrozen -b 4 -n 100000 --comm-timeout 3
    for _ in $(seq 600); do grep -q "^step     2/" "$CLUSTER_DIR/gfrozen.0.out" 2>/dev/null && break; sleep 0.1; done
    victim=$(cluster_pids h2 | xargs -r ps -o pid=,comm= -p | awk '/train_gpt/ { print $1 }' | head -1)
    [ -n "$victim" ] && kill -STOP $victim
    t0=$SECONDS
    ended $p0 60; took=$((SECONDS - t0))
    [ -n "$victim" ] && kill -KILL $victim 2>/dev/null
    name="train_gpt_cpu: h2's rank frozen, rank 0 on h1 ends at --comm-timeout 3 s (${took} s)"
    if [ -n "$victim" ] && [ $took -le 15 ] && grep -q "did not complete within --comm-timeout 3 s" "$CLUSTER_DIR/gfrozen.0.out"
    then pass "$name"; else tail -3 "$CLUSTER_DIR/gfrozen.0.out"; fail "$name"; fi
    unset CLUSTER_SAME_NAME
fi

finish
