#!/usr/bin/env bash
# --grad-sync overlap (the default) against --grad-sync end, in float32, in both trainers:
# ./train with MPI (MPI_Iallreduce / MPI_Ireduce started during the last backward) and
# train_gpt_cpu (the GPU trainer on the CPU runtime, NCCL on a second stream), with and
# without ZeRO (--zero 1: each bucket reduced to the shards' owners).
#
# Each replica runs A = 2 micro-batches (B = 4/R): the first only adds, the last's backward
# starts the buckets. Then A = 1 (B = 8/R) with the noise scale on, as by default: that one
# micro-batch's own gradient norm is taken bucket by bucket before each bucket's sum starts
# (host/gradsync.h), so the overlap stays on, and |G_small| must have the same bits as with
# --grad-sync end (its units are added in one order however they were measured), as must the
# losses, norms and weights (the same bounds as below).
# --grad-bucket 0 gives the tiny model (2 blocks) three buckets: block 1 and lnf, started
# after block 1's backward; block 0, after block 0's; the embeddings, by the step's sync. The
# sum of each element over the replicas must not depend on which bucket carried it:
#   * 2 replicas: a + b is one rounding whatever the order, so overlap and end must give the
#     same bits (losses, gradient norms, weights; with ZeRO the AdamW moments too): --tol 0;
#   * 4 replicas: the CPU runtime's NCCL adds every element in rank order whatever the call,
#     so bit-identical again; MPI may pick another algorithm (another order of the four
#     terms) for another message size (a bucket's pieces are smaller than the one all-reduce
#     or reduce-scatter at the end): within 1e-6 relative, ~10 roundings of 6e-8 over 10 steps.
# A bucket started before its block's backward is done (test/mutations.sh) moves the weights
# by ~5e-2. Needs ./train with MPI; the GPU half needs train_gpt_cpu (skipped without).
set -u
cd "$(dirname "$0")/../.."
source test/mpi_lib.sh  # OMPI_ALLOW_RUN_AS_ROOT, $MPIRUN, mpi_ok
export OMP_WAIT_POLICY=passive CPU_CUDA_THREADS=1                 # up to 4 ranks share the cores
T=16 STEPS=10
MODEL="--layers 2 --heads 2 --channels 32 --max-seq-len 32 -t $T -d $((8 * T)) --val-every 5 --val-tokens 512
       --sample-every 0 --warmup 5 -l 3e-3 --shuffle 1 -n $STEPS"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source test/suite_lib.sh  # pass, fail, skip, check, finish
suite_arguments "" "$@"  # --help: the usage; it takes no arguments

PER=4  # tokens' sequences per micro-batch summed over the replicas: B = PER/R, A = 8/PER
run() {  # DIR R PROGRAM [options]
    local dir=$1 R=$2
    shift 2
    timeout 300 $MPIRUN -np "$R" "$@" $MODEL -b $((PER / R)) -o "$dir" >"$dir.out" 2>&1 || { tail -5 "$dir.out"; return 1; }
}
# overlap vs end: PROGRAM R ZERO TOL (A = 8/PER micro-batches; with A = 1, |G_small| compared too)
check_overlap() {
    local program=$1 R=$2 zero=$3 tol=$4 A=$((8 / PER)) tag="$work/$(basename "$1")$2$3a$((8 / PER))" states="" noise=""
    [ "$zero" = 1 ] && states=--states
    [ "$A" = 1 ] && noise=--noise
    local name="$(basename "$program") R=$R A=$A --zero $zero: --grad-sync overlap (a bucket per block) = end within $tol"
    [ "$A" = 1 ] && name+=", the noise scale's |G_small| too"
    if run "$tag.end" "$R" "$program" --zero "$zero" --grad-sync end &&
       run "$tag.overlap" "$R" "$program" --zero "$zero" --grad-sync overlap --grad-bucket 0 &&
       { [ "$A" != 1 ] || grep -q '"grad_norm_small"' "$tag.overlap/log.jsonl" || { echo "  no grad_norm_small logged"; false; }; } &&
       python3 test/replicas/compare_runs.py $states $noise --tol "$tol" "$tag.end" "$tag.overlap" $STEPS; then pass "$name"
    else fail "$name"; fi
}

# the GPU trainer's plan at A = 1 with the noise scale on (the default): the sync overlapped
if [ -x ./train_gpt_cpu ]; then
    ./train_gpt_cpu $MODEL -b 4 --replicas 2 --device h100-sxm --dry-run 1 > "$work/plan.out" 2>&1  # A = 1
    check "train_gpt_cpu's plan at A = 1 with the noise scale on: the sync overlapped with the last backward" \
        grep -q "per step: 1 x .*gradient sync .*(overlapped with the last backward)" "$work/plan.out"
    # the kernel table's sync prices bf16 at 2 bytes a value: its exposed part is smaller than
    # fp32's (here fp32 leaves 0.00642 µs exposed, bf16 none)
    ./train_gpt_cpu $MODEL -b 4 --replicas 2 --device h100-sxm --dry-run 1 --grad-sync-dtype bf16 > "$work/plan16.out" 2>&1
    exposed() { sed -n 's/.*per step: .* gradient sync \([0-9.e+-]*\)\( [µm]s\)\? (overlapped.*/\1\2/p' "$1"; }
    check "train_gpt_cpu's plan: the kernel table's bf16 sync exposes less than fp32's ($(exposed "$work/plan16.out") < $(exposed "$work/plan.out"))" \
        python3 -c "import sys; v = [float(x.replace(' µs', 'e-6').replace(' ms', 'e-3')) for x in sys.argv[1:]]
sys.exit(0 if len(v) == 2 and v[0] < v[1] else 1)" "$(exposed "$work/plan16.out")" "$(exposed "$work/plan.out")"
fi

if mpi_ok ./train; then
    check_overlap ./train 2 0 0
    check_overlap ./train 4 0 1e-6
    check_overlap ./train 2 1 0
    check_overlap ./train 4 1 1e-6
    PER=8 check_overlap ./train 2 0 0
    PER=8 check_overlap ./train 4 0 1e-6
else
    skip "the CPU trainer's overlap" "./train without MPI, or no mpirun"
fi

if [ ! -x ./train_gpt_cpu ]; then
    skip "the GPU trainer's overlap" "./train_gpt_cpu is not built (make train_gpt_cpu)"
elif ! mpi_ok ./train_gpt_cpu; then
    skip "the GPU trainer's overlap" "./train_gpt_cpu without MPI, or no mpirun"
else
    check_overlap ./train_gpt_cpu 2 0 0
    check_overlap ./train_gpt_cpu 4 0 0
    check_overlap ./train_gpt_cpu 2 1 0
    check_overlap ./train_gpt_cpu 4 1 0
    PER=8 check_overlap ./train_gpt_cpu 2 0 0
    PER=8 check_overlap ./train_gpt_cpu 4 0 0
    PER=8 check_overlap ./train_gpt_cpu 2 1 0
    # The CPU runtime's streams are as independent as a GPU's (cpu_cuda/streams.h), and
    # CPU_CUDA_DELAY_STREAM=K:MS makes the K-th stream created run its work MS ms late a piece:
    # stream 1 is the compute stream (gpu/common.cuh), 2 the sync's side stream (gpu/replicas.cuh).
    # With the compute stream late, a bucket's collective must wait for its gradients (the event
    # bucket_ready); with the side stream late, the clipping and AdamW must wait for the sums
    # (sums_done, and every bucket started before the final wait). Either wait missing moves the
    # weights (test/mutations.sh); with both in place the run is --grad-sync end's, bit for bit.
    for delay in 1:1 2:20; do
        name="train_gpt_cpu R=2 A=2: overlap with stream ${delay%%:*}'s work ${delay##*:} ms late a piece (CPU_CUDA_DELAY_STREAM=$delay) = end within 0"
        if CPU_CUDA_DELAY_STREAM=$delay run "$work/delay${delay%%:*}" 2 ./train_gpt_cpu --grad-sync overlap --grad-bucket 0 &&
           python3 test/replicas/compare_runs.py --tol 0 "$work/train_gpt_cpu20a2.end" "$work/delay${delay%%:*}" $STEPS
        then pass "$name"; else fail "$name"; fi
    done
    # bf16 changes the arithmetic, so the state file records it (int32 [24] bytes of text at
    # [32]), and a resume with another type says so; the bf16 run differs from fp32 (a sync
    # that silently stayed fp32 would not) and agrees with it within 1e-2 relative: bf16's
    # rounding of each summed gradient (2^-9) moves the weights by 2.7e-3 over 10 steps
    # (measured), where a sum written back to the wrong range stalls training (losses ~20% apart)
    name="train_gpt_cpu --grad-sync-dtype bf16: within 1e-2 of fp32 and not equal, recorded in the state file, a resume with fp32 says it changes"
    recorded() { python3 -c "import struct, sys; b = open(sys.argv[1], 'rb').read(); n = struct.unpack_from('i', b, 96)[0]
print(b[128:128 + n].decode())" "$1"; }
    if run "$work/bf16" 2 ./train_gpt_cpu --grad-sync-dtype bf16 --ckpt-every 5 &&
       [[ "$(recorded "$work/bf16/state_00000005.bin")" == *"grad-sync-dtype=bf16"* ]] &&
       ! python3 test/replicas/compare_runs.py --tol 0 "$work/train_gpt_cpu20a2.end" "$work/bf16" $STEPS &&
       python3 test/replicas/compare_runs.py --tol 1e-2 "$work/train_gpt_cpu20a2.end" "$work/bf16" $STEPS &&
       mkdir -p "$work/resumed" && cp "$work/bf16/model_00000005.bin" "$work/bf16/state_00000005.bin" "$work/resumed/" &&
       run "$work/resumed" 2 ./train_gpt_cpu --grad-sync-dtype fp32 --resume 1 &&
       grep -q "computed with --grad-sync-dtype bf16 until step 5; --grad-sync-dtype fp32 changes the arithmetic" \
           "$work/resumed.out" &&
       [[ "$(recorded "$work/resumed/state_00000010.bin")" == *"grad-sync-dtype=fp32"* ]]; then pass "$name"
    else fail "$name"; fi
    # resumed without --grad-sync-dtype: the recorded bf16 is kept (fp32, the default, is no
    # request), and the run is the uninterrupted bf16 one, bit for bit
    name="train_gpt_cpu --grad-sync-dtype bf16: a resume without the option keeps bf16, bit for bit"
    if mkdir -p "$work/kept" && cp "$work/bf16/model_00000005.bin" "$work/bf16/state_00000005.bin" "$work/kept/" &&
       run "$work/kept" 2 ./train_gpt_cpu --resume 1 &&
       grep -qF -- "--grad-sync-dtype bf16, as recorded in '$work/kept/state_00000005.bin'" "$work/kept.out" &&
       ! grep -q "changes the arithmetic" "$work/kept.out" &&
       [[ "$(recorded "$work/kept/state_00000010.bin")" == *"grad-sync-dtype=bf16"* ]] &&
       cmp -s "$work/bf16/model_00000010.bin" "$work/kept/model_00000010.bin"; then pass "$name"
    else fail "$name"; fi
fi

finish
