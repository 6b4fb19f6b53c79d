#!/usr/bin/env bash
# The trainer's start-up on every GPU the CPU runtime can pose as (CPU_CUDA_DEVICE,
# cpu_cuda/device_presets.h): for GPT-2 124M, 350M, 774M and 1.5B's shapes, the kernel
# variants it picks (gpu/fit.cuh), or the one line with which it refuses. The expectations
# come from the issue's audit and the Programming Guide's opt-in shared memory per block
# (64 KB sm_75, 96 KB sm_70, 99 KB sm_86/89, 163 KB sm_80, 227 KB sm_90), not from the code:
#   * LayerNorm backward needs 64·C bytes for whole rows: chunked where 64·C > the limit;
#   * the fp32 fused attention at head size 64 needs 70,912 bytes in its dk/dv kernel (q, k, v,
#     dy: 4 tiles of 32×68 floats; p, ds, s, dp: 4 of 32×36; dk, dv: 2 of 32×68; lse and D:
#     2 × 32; each rounded up to 128 bytes): over a T4's 64 KB, so the cuBLAS path;
#   * the bf16 build refuses a GPU below sm_80 (and the fp32 build runs there).
# Dry runs for every pair (no step: the plan, the memory check, the kernel choice), then one
# step of the 1.5B shape's width (C=1600, one layer, B=1, T=16) where its LayerNorm backward
# is chunked, and a deliberately oversized shape refused on every preset. About a minute.
# Ends with "N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source test/suite_lib.sh  # pass, fail, skip, check, finish
has() { grep -qF -- "$2" "$1" || { echo "  not in $1: $2"; sed 's/^/  | /' "$1" | head -30; return 1; }; }
lacks() { ! grep -qF -- "$2" "$1" || { echo "  unexpected in $1: $2"; return 1; }; }
for b in train_gpt_cpu train_gpt_cpu_fp32; do
    [ -x ./$b ] || { echo "SKIP devices: ./$b is not built (make $b)"; echo "0 passed, 0 failed"; exit 0; }
done

# the opt-in shared memory per block (bytes) and the compute capability of each preset
declare -A optin=([t4]=65536 [v100]=98304 [a10]=101376 [rtx4090]=101376 [a100]=166912 [h100]=232448)
declare -A sm=([t4]=75 [v100]=70 [a10]=86 [rtx4090]=89 [a100]=80 [h100]=90)
# GPT-2's shapes: layers, heads, channels
declare -A shape=([124M]="12 12 768" [350M]="24 16 1024" [774M]="36 20 1280" [1.5B]="48 25 1600")

start() {  # start OUT DEVICE BINARY ARGS...: one start-up, stdout and stderr to OUT, status to OUT.rc
    local out=$1 dev=$2 bin=$3; shift 3
    CPU_CUDA_DEVICE=$dev CPU_CUDA_MEMORY=4GB ./$bin --max-seq-len 64 -t 16 -b 1 -n 1 --val-every 0 \
        --sample-every 0 --out-dir "" "$@" > "$out" 2>&1
    echo $? > "$out.rc"
}
status() { [ "$(cat "$1.rc")" = "$2" ] || { echo "  exit $(cat "$1.rc"), expected $2"; sed 's/^/  | /' "$1" | tail -5; return 1; }; }

for dev in t4 v100 a10 rtx4090 a100 h100; do
    bin=train_gpt_cpu
    if [ "${sm[$dev]}" -lt 80 ]; then
        bin=train_gpt_cpu_fp32
        start "$work/$dev-bf16" $dev train_gpt_cpu --layers 1 --heads 12 --channels 768 --dry-run 1
        check "$dev: the bf16 build refuses sm_${sm[$dev]} in one line, exit 1" status "$work/$dev-bf16" 1
        check "$dev: ... saying to build fp32" has "$work/$dev-bf16" "needs compute capability 8.0 or newer (bf16 tensor cores); Tesla"
        check "$dev: ... and naming PRECISION=fp32" has "$work/$dev-bf16" "make train_gpt PRECISION=fp32"
    fi
    for model in 124M 350M 774M 1.5B; do
        read -r L NH C <<< "${shape[$model]}"
        out="$work/$dev-$model"
        start "$out" $dev $bin --layers $L --heads $NH --channels $C --dry-run 1 --device-memory 80GB
        check "$dev $model: the plan runs (exit 0)" status "$out" 0
        if [ $((64 * C)) -gt "${optin[$dev]}" ]; then
            check "$dev $model: LayerNorm backward in column chunks (64·C = $((64 * C)) > ${optin[$dev]})" \
                has "$out" "layernorm backward: in column chunks"
        else
            check "$dev $model: LayerNorm backward on whole rows (64·C = $((64 * C)) <= ${optin[$dev]})" \
                has "$out" "layernorm backward: whole rows (C=$C)"
        fi
        if [ $dev = t4 ]; then
            check "$dev $model: fp32 fused attention does not fit 64 KB: cublas" has "$out" "attention: the fused path does not fit: flash_attention_backward_dkdv_kernel needs 70912 bytes"
        else
            check "$dev $model: the fused attention fits" has "$out" "attention: the fused path fits"
        fi
    done
    # the planner names the device without being it: --device DEVICE from the default H100
    out="$work/plan-$dev"
    ./$bin --layers 1 --heads 25 --channels 1600 --max-seq-len 64 -t 16 -b 1 --dry-run 1 \
        --device $dev > "$out" 2>&1; echo $? > "$out.rc"
    check "--dry-run --device $dev plans for it from another GPU" has "$out" "(sm_${sm[$dev]}, "
    # a deliberately oversized shape: B·NH = 65,536 blocks in the fused attention's grid.y
    out="$work/$dev-oversized"
    start "$out" $dev $bin --layers 1 --heads 16 --channels 256 -b 4096 -t 4 --attention fused --dry-run 1
    check "$dev: B·NH over 65,535 with --attention fused: refused at start-up, exit 1" status "$out" 1
    check "$dev: ... naming grid.y, the numbers and the device" has "$out" "--attention fused: the fused attention's grid.y = B·NH = 65536, over the 65535 that"
    check "$dev: ... in one line" [ "$(wc -l < "$out")" -eq 1 ]
    start "$out.auto" $dev $bin --layers 1 --heads 16 --channels 256 -b 4096 -t 4 --attention auto --dry-run 1
    check "$dev: ... and --attention auto takes the cublas path there" has "$out.auto" "attention: cublas (the fused path does not fit this GPU)"
done

# one step where the LayerNorm backward is chunked: the 1.5B shape's width on an RTX 4090
# (bf16) and a T4 (fp32, cuBLAS attention); the loss is finite and the run ends normally
for run in "rtx4090 train_gpt_cpu" "t4 train_gpt_cpu_fp32"; do
    read -r dev bin <<< "$run"
    out="$work/step-$dev"
    start "$out" $dev $bin --layers 1 --heads 25 --channels 1600
    check "$dev: one step of C=1600 runs (exit 0)" status "$out" 0
    check "$dev: ... with the LayerNorm backward in 2 column chunks" has "$out" "in column chunks of 800 (2 chunks of C=1600)"
    check "$dev: ... and a finite loss" grep -qE "^step +1/1 .*loss [0-9]+\.[0-9]+" "$out"
done

finish
