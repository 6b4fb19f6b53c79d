#!/usr/bin/env bash
# scripts/llama3_1b.sh: Llama-3.2 1B's shape (--preset llama3.2-1b) on the GPU trainer. Its dry
# run, in seconds: the plan on one 80 GB GPU and on 8 with ZeRO stage 1, from ./train_gpt or,
# where it is not built, ./train_gpt_cpu (the same source on the CPU runtime): each plan's memory
# line, to the byte of what the GPU trainer allocates (bf16), the micro-batch chosen from memory,
# the published parameter count, ZeRO's plan smaller by its shards, the commands printed, the
# same plans with data given (--data) and one plan for --gpus 1. Then what a run refuses, before
# it launches anything: no --data, a missing or empty directory, GPT-2's uint16 shards, a batch
# that does not split, no GPU (or no trainer). The dry-run cases need ./train_gpt_cpu (make test
# builds it where the CUDA toolkit's headers are; the recipe would build it, which takes minutes)
# or ./train_gpt, and are skipped without either; the refusals need neither.
set -u
cd "$(dirname "$0")/../.."
source test/suite_lib.sh  # pass, fail, not_run, finish
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# expect NAME FILE TEXT [COUNT]: FILE holds TEXT (a fixed string) on COUNT lines (default: at least one)
expect() {
    local n; n=$(grep -cF -- "$3" "$2")
    if { [ -z "${4:-}" ] && [ "$n" -ge 1 ]; } || [ "$n" = "${4:-}" ]; then pass "$1"
    else fail "$1: '$3' on $n lines${4:+, not $4}"; sed 's/^/   /' "$2"; fi
}
# refuses NAME TEXT ARGS...: scripts/llama3_1b.sh ARGS exits 2 with one line, "error: TEXT..."
refuses() {
    local name=$1 text=$2; shift 2
    bash scripts/llama3_1b.sh "$@" >"$work/refused" 2>&1; local rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <"$work/refused")" -eq 1 ] && grep -qF -- "error: $text" "$work/refused"; then
        pass "$name: exit 2, one line: $(cut -c1-100 "$work/refused")"
    else fail "$name: exit status $rc, not 2 with one line 'error: $text...'"; sed 's/^/   /' "$work/refused"; fi
}
# shard FILE MAGIC VERSION BYTES N: an llm.c token shard of N tokens of BYTES bytes each
shard() {
    python3 -c 'import struct, sys
f, magic, version, width, n = sys.argv[1], *map(int, sys.argv[2:])
with open(f, "wb") as out:
    out.write(struct.pack("<256i", magic, version, n, *[0] * 253))
    out.write(struct.pack("<%d%s" % (n, "I" if width == 4 else "H"), *[i * 7919 % 50257 for i in range(n)]))' "$@"
}
# Llama-3's uint32 shards (magic 20240801, version 7) with one step of 2^20 tokens, and GPT-2's
mkdir -p "$work/llama" "$work/gpt2" "$work/empty"
shard "$work/llama/x_train_000001.bin" 20240801 7 4 1100000
shard "$work/llama/x_val_000000.bin" 20240801 7 4 300000
shard "$work/gpt2/x_train_000001.bin" 20240520 1 2 1100000
shard "$work/gpt2/x_val_000000.bin" 20240520 1 2 300000

if [ -x ./train_gpt ]; then planner=./train_gpt
elif [ -x ./train_gpt_cpu ]; then planner=./train_gpt_cpu
else planner=""; fi

# The memory lines the GPU trainer prints for B=16, T=2048 (bf16): without ZeRO, and with it
# over 8 replicas (1/8 of the float32 master weights and of AdamW's state on each)
mem1="  memory per replica: parameters 4.6 GiB, their bf16 copy 2.3 GiB, gradients 4.6 GiB, AdamW state 9.2 GiB, activations 39.8 GiB, logits (2,048 of 32,768 rows at a time) 501.0 MiB, tokens and sums 664.3 KiB, key/value cache (samples) 64.0 MiB: 61.1 GiB in all"
mem8="  memory per replica: parameters (1/8 shard) 589.3 MiB, their bf16 copy 2.3 GiB, gradients 4.6 GiB, AdamW state (1/8 shard) 1.2 GiB, activations 39.8 GiB, logits (2,048 of 32,768 rows at a time) 501.0 MiB, tokens and sums 664.3 KiB, key/value cache (samples) 64.0 MiB: 49.0 GiB in all"

if [ -z "$planner" ]; then
    not_run "the dry run's plans" "neither ./train_gpt nor ./train_gpt_cpu is built (make train_gpt_cpu, a few minutes; make test builds it where the CUDA toolkit's headers are)"
else
    start=$SECONDS
    bash scripts/llama3_1b.sh --dry-run >"$work/out" 2>&1; rc=$?
    seconds=$((SECONDS - start))
    [ $rc -eq 0 ] && pass "scripts/llama3_1b.sh --dry-run exits 0" || { fail "scripts/llama3_1b.sh --dry-run: exit status $rc"; cat "$work/out"; }
    [ $seconds -le 30 ] && pass "the two plans take seconds ($seconds s)" || fail "the two plans took $seconds s"
    expect "it prints the 1-GPU command, on the GPU trainer" "$work/out" "command: ./train_gpt --preset llama3.2-1b -b auto -t 2048 -d 1048576" 1
    expect "it prints the 8-GPU command, on the GPU trainer" "$work/out" "command: mpirun -np 8 ./train_gpt --preset llama3.2-1b" 1
    expect "the 8-GPU command has --device-memory 80GB --zero 1" "$work/out" "--device h100-sxm --device-memory 80GB --zero 1" 1
    expect "a run checkpoints and resumes" "$work/out" "-o out/llama3_1b -v 250 --val-tokens 10485760 -s 1000 -g 64 --ckpt-every 1000 --resume auto" 2
    expect "no data given: it says so" "$work/out" "data: no --data DIR, so none in the commands" 1
    expect "the GPU trainer's dry run for 1 replica ($planner)" "$work/out" "plan ($planner ... --dry-run 1 --replicas 1):" 1
    expect "the GPU trainer's dry run for 8 replicas ($planner)" "$work/out" "plan ($planner ... --dry-run 1 --replicas 8):" 1
    [ "$planner" = ./train_gpt_cpu ] &&
        expect "without ./train_gpt, ./train_gpt_cpu plans, and it says so" "$work/out" "plan: ./train_gpt is not built; ./train_gpt_cpu (the same source on the CPU runtime) plans instead" 2
    expect "the shape: Llama-3.2 1B's, and its published count" "$work/out" \
        "model: llama3 L=16 NH=32 KVH=8 C=2048 F=8192 maxT=131072 V=128256 Vp=128256, RoPE theta 500000 scaled (factor 32, low 1, high 4, from 8192), tied head, 1,235,814,400 parameters" 2
    expect "the micro-batch chosen from 80 GB (74.5 GiB): B=16, twice" "$work/out" \
        "  micro-batch chosen from memory: B=16, the largest that fits in 74.5 GiB and splits the global batch" 2
    expect "the bf16 build's kernels" "$work/out" "(sm_90, bf16 build)" 2
    expect "the 1-GPU plan's memory, the GPU trainer's (bf16 copy, no attention probabilities)" "$work/out" "$mem1" 1
    expect "the 8-GPU plan's memory, ZeRO's shards" "$work/out" "$mem8" 1
    expect "ZeRO's two collectives" "$work/out" "communication (--zero 1): a reduce-scatter" 1
    expect "the time on H100s" "$work/out" "estimate for h100-sxm (989 TFLOP/s" 2
    # the memory per replica, in GiB, of each plan: the 8-GPU one with ZeRO must be the smaller, by
    # 7/8 of the float32 master weights' 4 bytes and AdamW's 8 per parameter (12.1 GiB for
    # 1,235,814,400 parameters), to the printed 0.1
    mapfile -t memory < <(sed -nE 's/^  memory per replica: .*: ([0-9.]+) GiB in all$/\1/p' "$work/out")
    if [ ${#memory[@]} -eq 2 ] && awk -v a="${memory[0]}" -v b="${memory[1]}" \
        'BEGIN { d = 12 * 1235814400 * 7 / 8 / 2^30; exit !(a - b > d - 0.11 && a - b < d + 0.11) }'; then
        pass "ZeRO stage 1 saves 7/8 of the master weights and AdamW's state per replica (${memory[0]} GiB -> ${memory[1]} GiB)"
    else fail "the memory per replica with and without ZeRO: '${memory[*]}'"; fi
    # the memory chosen fits: each plan's total is at most the 74.5 GiB allowed
    for m in "${memory[@]}"; do
        awk -v m="$m" 'BEGIN { exit !(m <= 74.5) }' && pass "$m GiB per replica fits 80GB" || fail "$m GiB does not fit 74.5 GiB"
    done

    # with Llama-3 shards: the commands read them, and the plans are the same
    bash scripts/llama3_1b.sh --dry-run --data "$work/llama" >"$work/data" 2>&1; rc=$?
    [ $rc -eq 0 ] && pass "--dry-run --data DIR exits 0" || { fail "--dry-run --data DIR: exit status $rc"; cat "$work/data"; }
    expect "--data DIR: both commands read its shards" "$work/data" "-i '$work/llama/*_train_*.bin' -j '$work/llama/*_val_*.bin' -b auto" 2
    expect "--data DIR: the trainer reads them" "$work/data" "  data: 1 train shard(s), 1,100,000 tokens; 1 val shard(s), 300,000 tokens" 2
    expect "--data DIR: the same 1-GPU memory" "$work/data" "$mem1" 1
    expect "--data DIR: the same 8-GPU memory" "$work/data" "$mem8" 1
    bash scripts/llama3_1b.sh --dry-run --data "$work/gpt2" >"$work/data" 2>&1
    expect "--dry-run with GPT-2's shards: a warning" "$work/data" "warning: $work/gpt2/x_train_000001.bin holds GPT-2's uint16 tokens" 1

    # one GPU: one plan, no mpirun, no ZeRO
    bash scripts/llama3_1b.sh --dry-run --gpus 1 >"$work/one" 2>&1; rc=$?
    if [ $rc -eq 0 ] && [ "$(grep -c '^plan (' "$work/one")" -eq 1 ] && ! grep -E "^command:" "$work/one" | grep -qE "mpirun|--zero" &&
        grep -qF -- "$mem1" "$work/one"; then pass "--gpus 1: one plan, no mpirun, no --zero"
    else fail "--gpus 1: exit status $rc"; cat "$work/one"; fi
fi

# what a run refuses, each before it launches anything (and before the trainer is needed)
refuses "without --data" "no --data DIR: a run needs Llama-3-tokenized shards"
refuses "--data DIR that is not there" "--data $work/nowhere: no such directory" --data "$work/nowhere"
refuses "--data DIR without shards" "no train shards in $work/empty" --data "$work/empty"
refuses "--data DIR of GPT-2's uint16 shards" \
    "$work/gpt2/x_train_000001.bin holds GPT-2's uint16 tokens (magic 20240520), not Llama-3's uint32 tokens (magic 20240801)" \
    --data "$work/gpt2"
cp "$work/llama/x_train_000001.bin" "$work/empty/x_train_000001.bin"
refuses "--data DIR without validation shards" "no val shards in $work/empty" --data "$work/empty"
refuses "--gpus 3: 2^20 tokens do not split" "1,048,576 tokens per step do not split into 2048-token sequences over 3 GPUs" --dry-run --gpus 3
# Llama-3 shards: then the GPU (or, with one, the trainer) is what is missing. A trainer that is
# not there, so that no machine with a GPU starts a 1B run here.
source scripts/common.sh  # gpu_visible
if gpu_visible; then why="$work/no_trainer not found or not executable"; else why="no GPU visible to nvidia-smi"; fi
TRAIN_BIN=$work/no_trainer refuses "--data DIR of Llama-3's shards: the data passes" "$why" --data "$work/llama"
finish
