#!/usr/bin/env bash
# scripts/llama3_1b.sh --dry-run: the plan of Llama-3.2 1B's shape (--preset llama3.2-1b) on one
# 80 GB GPU and on 8 with ZeRO stage 1, from ./train's dry run, in seconds. Each plan's memory
# line, the micro-batch chosen from memory, the published parameter count; ZeRO's shard of
# AdamW's state smaller than the whole; the commands printed; the refusals (no --dry-run, a
# batch that does not split). Needs ./train (make train).
set -u
cd "$(dirname "$0")/../.."
source test/suite_lib.sh  # pass, fail, finish
[ -x ./train ] || { echo "./train is not built (make train)"; echo "0 passed, 1 failed"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# expect NAME FILE TEXT [COUNT]: FILE holds TEXT (a fixed string) on COUNT lines (default: at least one)
expect() {
    local n; n=$(grep -cF -- "$3" "$2")
    if { [ -z "${4:-}" ] && [ "$n" -ge 1 ]; } || [ "$n" = "${4:-}" ]; then pass "$1"
    else fail "$1: '$3' on $n lines${4:+, not $4}"; sed 's/^/   /' "$2"; fi
}

start=$SECONDS
bash scripts/llama3_1b.sh --dry-run >"$work/out" 2>&1; rc=$?
seconds=$((SECONDS - start))
[ $rc -eq 0 ] && pass "scripts/llama3_1b.sh --dry-run exits 0" || { fail "scripts/llama3_1b.sh --dry-run: exit status $rc"; cat "$work/out"; }
[ $seconds -le 30 ] && pass "the two plans take seconds ($seconds s)" || fail "the two plans took $seconds s"
expect "it prints the 1-GPU command it runs" "$work/out" "command: ./train --preset llama3.2-1b -b auto -t 2048 -d 1048576" 1
expect "it prints the 8-GPU command, with --zero 1" "$work/out" "command: mpirun -np 8 ./train --preset llama3.2-1b" 1
expect "the 8-GPU command has --device-memory 80GB --zero 1" "$work/out" "--device h100-sxm --device-memory 80GB --zero 1" 1
expect "the dry run for 1 replica" "$work/out" "plan (./train ... --dry-run 1 --replicas 1):" 1
expect "the dry run for 8 replicas" "$work/out" "plan (./train ... --dry-run 1 --replicas 8):" 1
expect "the shape: Llama-3.2 1B's, and its published count" "$work/out" \
    "model: llama3 L=16 NH=32 KVH=8 C=2048 F=8192 maxT=131072 V=128256 Vp=128256, RoPE theta 500000 scaled (factor 32, low 1, high 4, from 8192), tied head, 1,235,814,400 parameters" 2
expect "the micro-batch chosen from 80 GB (74.5 GiB), twice" "$work/out" \
    "micro-batch chosen from memory: B=" 2
expect "B fits in 80GB" "$work/out" "the largest that fits in 74.5 GiB and splits the global batch" 2
expect "a memory line per plan" "$work/out" "  memory per replica: parameters 4.6 GiB, gradients 4.6 GiB, AdamW state" 2
expect "ZeRO stage 1 shards AdamW's state over the 8" "$work/out" "AdamW state (1/8 shard)" 1
expect "ZeRO's two collectives" "$work/out" "communication (--zero 1): a reduce-scatter" 1
expect "the time on H100s" "$work/out" "estimate for h100-sxm (989 TFLOP/s" 2
# the memory per replica, in GiB, of each plan: the 8-GPU one with ZeRO must be the smaller, by
# 7/8 of AdamW's 8 bytes per parameter (8.1 GiB for 1,235,814,400 parameters), to the printed 0.1
mapfile -t memory < <(sed -nE 's/^  memory per replica: .*: ([0-9.]+) GiB in all$/\1/p' "$work/out")
if [ ${#memory[@]} -eq 2 ] && awk -v a="${memory[0]}" -v b="${memory[1]}" \
    'BEGIN { d = 8 * 1235814400 * 7 / 8 / 2^30; exit !(a - b > d - 0.11 && a - b < d + 0.11) }'; then
    pass "ZeRO stage 1 saves 7/8 of AdamW's state per replica (${memory[0]} GiB -> ${memory[1]} GiB)"
else fail "the memory per replica with and without ZeRO: '${memory[*]}'"; fi
# the memory chosen fits: each plan's total is at most the 74.5 GiB allowed
for m in "${memory[@]}"; do
    awk -v m="$m" 'BEGIN { exit !(m <= 74.5) }' && pass "$m GiB per replica fits 80GB" || fail "$m GiB does not fit 74.5 GiB"
done

bash scripts/llama3_1b.sh >"$work/out" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "only plans for now (--dry-run)" "$work/out" && pass "without --dry-run: exit 2, it says it only plans" ||
    { fail "without --dry-run: exit status $rc"; cat "$work/out"; }
bash scripts/llama3_1b.sh --dry-run --gpus 3 >"$work/out" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "do not split into 2048-token sequences over 3 GPUs" "$work/out" &&
    pass "--gpus 3: 2^20 tokens do not split, exit 2" || { fail "--gpus 3: exit status $rc"; cat "$work/out"; }
finish
