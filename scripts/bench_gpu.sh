#!/usr/bin/env bash
# GPU speed of the GPU trainer at GPT-2 124M's shape (L=12 NH=12 C=768, V=50257 padded to
# 50304), T=1024, random initialisation, the built-in corpus: no files needed. For both
# precisions (bf16, and fp32 with TF32 off and on) and each micro-batch B: ms per optimizer
# step and tokens/s (the trainer's average over the steps after the first), MFU and the
# peak GPU memory, on each attention path (--attention fused and cublas; auto adds a row
# showing which path it picked and the trainer's line with both paths' per-layer times); then
# the time of each kernel, from the dev/cuda workbenches' CUDA events (attention_fused: one
# layer's attention, forward and backward, on both paths; step_kernels: every kernel of the
# step, measured beside the planner's prediction, host/cost.h).
#
#   scripts/bench_gpu.sh [--steps N] [--batch "8 16 32"] [--attention "fused cublas"]
#                        [--precisions "bf16 fp32"] [--trainer PATH] [--llmc "DIR ..."]
#                        [--model gpt2|llama3] [--no-kernels]                (make bench_gpu)
#
#   --model       gpt2 (the default: GPT-2 124M's shape) or llama3: Llama-3.2 1B's shape
#                 (--preset llama3.2-1b, docs/llama.md), the same T; llm.c is timed with GPT-2 only
#   --precisions  the builds to time: bf16 (build/train_gpt_bf16), fp32 (build/train_gpt_fp32,
#                 TF32 off and on)
#   --trainer     with one precision: the trainer to time instead (e.g. ./train_gpt)
#   --llmc        llm.c builds to time (default: $LLMC_DIR), each labelled by its directory's name
#
# MFU is the trainer's own (--device-tflops PEAK, its average line): model FLOPs per second
# over the peak, FLOPs per token as host/cost.h counts them (6 per weight in a matrix product
# plus the causal half of the attention products). Peaks are the dense figures of the data
# sheets, for the precision the products run in:
#   H100 / H200 SXM: bf16 989, TF32 495, FP32 67 TFLOP/s;  H100 PCIe: 756, 378, 51;
#   A100: 312, 156, 19.5.   Another GPU: set PEAK_BF16, PEAK_TF32, PEAK_FP32 (TFLOP/s).
# Each llm.c directory (the build.sh of llm.c's sources, LLMC_PEER/build.sh DEST, makes DEST/cudnn and
# DEST/nocudnn; or a checkout where make train_gpt2cu was run) holds ./train_gpt2cu and the Tiny
# Shakespeare shards in dev/data/tinyshakespeare/; its train_gpt2cu is timed on the same shape
# at the B of our fastest bf16 run (its own "total average iteration time", steps 2..N, like
# ours) and the ratio printed.
# A batch that does not fit in memory is reported as such; larger ones are then skipped.
set -uo pipefail
cd "$(dirname "$0")/.."

STEPS=10
BATCHES="8 16 32"
ATTENTIONS="fused cublas"
PRECISIONS="bf16 fp32"
TRAINER=""
LLMC_DIRS=${LLMC_DIR:-}
KERNELS=1
FAMILY=gpt2
while [ $# -gt 0 ]; do
    case "$1" in
        --model) FAMILY=${2:?}; shift 2 ;;
        --steps) STEPS=${2:?}; shift 2 ;;
        --batch) BATCHES=${2:?}; shift 2 ;;
        --attention) ATTENTIONS=${2:?}; shift 2 ;;
        --precisions) PRECISIONS=${2:?}; shift 2 ;;
        --trainer) TRAINER=${2:?}; shift 2 ;;
        --llmc) LLMC_DIRS=${2?}; shift 2 ;;
        --no-kernels) KERNELS=0; shift ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
set -- $PRECISIONS
if [ -n "$TRAINER" ] && [ $# -ne 1 ]; then echo "error: --trainer needs exactly one of --precisions" >&2; exit 2; fi
# trainer PRECISION: the binary that times it
trainer() { echo "${TRAINER:-build/train_gpt_$1}"; }
status=0
BUILDS=()  # the rows' builds, of the trainers that are there (llm.c is still timed without them)
for p in $PRECISIONS; do
    case "$p" in bf16|fp32) ;; *) echo "error: --precisions takes bf16 and fp32, not $p" >&2; exit 2 ;; esac
    if [ ! -x "$(trainer "$p")" ]; then
        echo "error: $(trainer "$p") not found; build both: make bench_gpu" >&2
        [ -z "$LLMC_DIRS" ] && exit 2
        status=2; continue
    fi
    if [ "$p" = bf16 ]; then BUILDS+=("bf16"); else BUILDS+=("fp32 TF32 off" "fp32 TF32 on"); fi
done

GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$GPU" in
    *H100*PCIe*) BF16=756 TF32=378 FP32=51.2 ;;
    *H100*|*H200*|*GH200*) BF16=989 TF32=495 FP32=67 ;;
    *A100*) BF16=312 TF32=156 FP32=19.5 ;;
    *) BF16="" TF32="" FP32="" ;;
esac
BF16=${PEAK_BF16:-$BF16} TF32=${PEAK_TF32:-$TF32} FP32=${PEAK_FP32:-$FP32}

L=12 C=768 T=1024 V=50257 VP=50304 MAXT=1024
case "$FAMILY" in
    gpt2) MODEL=(--layers $L --heads 12 --channels $C --max-seq-len $MAXT --vocab $V --padded-vocab $VP -t $T)
          SHAPE="GPT-2 124M shape" ;;
    llama3) MODEL=(--preset llama3.2-1b -t $T) SHAPE="Llama-3.2 1B shape (L=16 NH=32 KVH=8 C=2048 F=8192 V=128256)"
            LLMC_DIRS="" ;;
    *) echo "error: --model takes gpt2 or llama3, not $FAMILY" >&2; exit 2 ;;
esac
echo "GPU: ${GPU:-unknown}; peaks used for MFU: bf16 ${BF16:-?}, TF32 ${TF32:-?}, FP32 ${FP32:-?} TFLOP/s"
echo "model: $SHAPE; FLOPs per token and MFU as the trainer prints them (host/cost.h)"
echo "$STEPS steps per run, T=$T; times are the average of steps 2..$STEPS"
echo
row() { printf "| %-22s | %-12s | %-4s | %10s | %12s | %6s | %14s |\n" "$@"; }
row "build" "attention" "B" "ms/step" "tokens/s" "MFU" "peak memory"
printf "|------------------------|--------------|------|------------|--------------|--------|----------------|\n"
best_bf16_tps=""
auto_lines=()
for build in ${BUILDS[@]+"${BUILDS[@]}"}; do
    set -- $build
    precision=$1 tf32=$([ "${3:-}" = on ] && echo 1 || echo 0)
    peak=$([ "$precision" = bf16 ] && echo "$BF16" || { [ "$tf32" = 1 ] && echo "$TF32" || echo "$FP32"; })
    for attention in $ATTENTIONS; do
    for B in $BATCHES; do
        out=$("$(trainer "$precision")" "${MODEL[@]}" -b "$B" -n "$STEPS" --val-every 0 --sample-every 0 -o "" \
              --tf32 "$tf32" --attention "$attention" ${peak:+--device-tflops "$peak"} 2>&1)
        if [ $? -ne 0 ]; then
            if grep -qE "out of (GPU )?memory|needs .* per replica" <<< "$out"; then
                row "$build" "$attention" "$B" "-" "-" "-" "does not fit"
                break  # larger batches will not fit either
            fi
            echo "run failed ($build, --attention $attention, B=$B):"; echo "$out" | tail -5
            status=1
            continue
        fi
        avg=$(grep '^average:' <<< "$out")
        ms=$(sed -E 's/^average: ([0-9.]+) ms.*/\1/' <<< "$avg")
        tps=$(sed -E 's/.*ms\/step, ([0-9,]+) tokens.*/\1/' <<< "$avg" | tr -d ,)
        mem=$(grep '^peak GPU memory' <<< "$out" | sed -E 's/^peak GPU memory: ([0-9]+) MiB.*/\1/')
        mfu=$(sed -nE 's/.*MFU ([0-9.]+%).*/\1/p' <<< "$avg")
        label=$attention
        if [ "$attention" = auto ]; then  # its line: "attention: fused X ms, cublas Y ms per layer (...): CHOICE"
            picked=$(grep '^attention: ' <<< "$out" | tail -1)
            label="auto: ${picked##*: }"
            [ -n "$picked" ] && auto_lines+=("$build, B=$B: $picked")
        fi
        row "$build" "$label" "$B" "$ms" "$tps" "${mfu:--}" "${mem:-?} MiB"
        if [ "$precision" = bf16 ] && { [ -z "$best_bf16_tps" ] || [ "$tps" -gt "$best_bf16_tps" ]; }; then
            best_bf16_tps=$tps best_B=$B best_attention=$attention
        fi
    done
    done
done

for line in ${auto_lines[@]+"${auto_lines[@]}"}; do echo "auto, $line"; done

# ---- llm.c's train_gpt2cu on the same shape, side by side (--llmc, LLMC_DIR)
# llmc_ms OUTPUT: its "total average iteration time: X ms" (steps 2..N), X
llmc_ms() { sed -nE 's/^total average iteration time: ([0-9.]+) ms.*/\1/p' <<< "$1" | tail -1; }
llmc_B=${best_B:-${BATCHES%% *}}
for dir in $LLMC_DIRS; do
    echo
    name=$(basename "$dir")
    if [ ! -x "$dir/train_gpt2cu" ]; then
        echo "llm.c [$name]: no train_gpt2cu in $dir (bash \$LLMC_PEER/build.sh, or make train_gpt2cu there)"
        status=1; continue
    fi
    # -e d12: GPT-2 124M from random weights; -v: a validation interval past the run (0 would
    # divide by zero in its loop), -m 1: one validation batch at the start and end, untimed
    out=$(cd "$dir" && ./train_gpt2cu -e d12 -b "$llmc_B" -t $T -x "$STEPS" -v 1000000 -m 1 -s 0 -g 0 -h 0 \
          -i dev/data/tinyshakespeare/tiny_shakespeare_train.bin \
          -j dev/data/tinyshakespeare/tiny_shakespeare_val.bin 2>&1)
    ms=$(llmc_ms "$out")
    if [ -z "$ms" ]; then
        echo "llm.c [$name] train_gpt2cu printed no average time:"; echo "$out" | tail -5; status=1; continue
    fi
    tps=$(awk -v ms="$ms" -v n=$((llmc_B * T)) 'BEGIN { printf "%.0f", n * 1000 / ms }')
    line="llm.c [$name] train_gpt2cu, bf16, B=$llmc_B: $(printf %.1f "$ms") ms/step, $tps tokens/s"
    if [ -n "$best_bf16_tps" ] && [ "$best_B" = "$llmc_B" ]; then
        line+="; ours (--attention $best_attention): $best_bf16_tps tokens/s; ratio ours/llm.c = $(awk -v a="$best_bf16_tps" -v b="$tps" 'BEGIN { printf "%.2f", a / b }')"
    fi
    echo "$line"
done

# ---- per kernel: the dev/cuda workbenches at GPT-2 124M's shapes, CUDA events
if [ "$KERNELS" -eq 1 ] && [ "$FAMILY" = gpt2 ]; then
    for precision in $PRECISIONS; do
        echo
        echo "kernels, $precision (dev/cuda workbenches; ms per call from CUDA events):"
        make -s -C dev/cuda PRECISION=$precision >/dev/null 2>&1 || { echo "dev/cuda did not build"; status=1; continue; }
        for w in layernorm attention_softmax attention_fused crossentropy gelu encoder_backward adamw; do
            ./dev/cuda/$w | grep -E '^(1|2|4 reference|[A-Za-z].*tolerance|fused / cuBLAS|attention memory|causal attention)' || status=1
        done
        # the planner's table (--dry-run --device), each kernel measured beside its prediction
        ./dev/cuda/step_kernels | sed -n '/step kernel by kernel/,$p' || status=1
    done
fi
exit $status
