#!/usr/bin/env bash
# GPU speed of the GPU trainer at GPT-2 124M's shape (L=12 NH=12 C=768, V=50257 padded to
# 50304), T=1024, random initialisation, the built-in corpus: no files needed. For both
# precisions (bf16, and fp32 with TF32 off and on) and each micro-batch B: ms per optimizer
# step and tokens/s (the trainer's average over the steps after the first), MFU and the
# peak GPU memory, on each attention path (--attention fused and cublas); then the time of
# each kernel, from the dev/cuda workbenches' CUDA events (attention_fused: one layer's
# attention, forward and backward, on both paths).
#
#   scripts/bench_gpu.sh [--steps N] [--batch "8 16 32"] [--attention "fused cublas"] [--no-kernels]
#                                                                            (make bench_gpu)
#
# MFU is the trainer's own (--device-tflops PEAK, its average line): model FLOPs per second
# over the peak, FLOPs per token as host/cost.h counts them (6 per weight in a matrix product
# plus the causal half of the attention products). Peaks are the dense figures of the data
# sheets, for the precision the products run in:
#   H100 / H200 SXM: bf16 989, TF32 495, FP32 67 TFLOP/s;  H100 PCIe: 756, 378, 51;
#   A100: 312, 156, 19.5.   Another GPU: set PEAK_BF16, PEAK_TF32, PEAK_FP32 (TFLOP/s).
# With LLMC_DIR set to a built llm.c (make train_gpt2cu there, and its tiny Shakespeare
# shards in dev/data/), llm.c's train_gpt2cu is timed on the same shape and the ratio printed.
# A batch that does not fit in memory is reported as such; larger ones are then skipped.
set -uo pipefail
cd "$(dirname "$0")/.."

STEPS=10
BATCHES="8 16 32"
ATTENTIONS="fused cublas"
KERNELS=1
while [ $# -gt 0 ]; do
    case "$1" in
        --steps) STEPS=${2:?}; shift 2 ;;
        --batch) BATCHES=${2:?}; shift 2 ;;
        --attention) ATTENTIONS=${2:?}; shift 2 ;;
        --no-kernels) KERNELS=0; shift ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
for p in bf16 fp32; do
    [ -x build/train_gpt_$p ] || { echo "error: build/train_gpt_$p not found; build both: make bench_gpu" >&2; exit 2; }
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
MODEL=(--layers $L --heads 12 --channels $C --max-seq-len $MAXT --vocab $V --padded-vocab $VP -t $T)
echo "GPU: ${GPU:-unknown}; peaks used for MFU: bf16 ${BF16:-?}, TF32 ${TF32:-?}, FP32 ${FP32:-?} TFLOP/s"
echo "model: GPT-2 124M shape; FLOPs per token and MFU as the trainer prints them (host/cost.h)"
echo "$STEPS steps per run, T=$T; times are the average of steps 2..$STEPS"
echo
row() { printf "| %-22s | %-9s | %-4s | %10s | %12s | %6s | %14s |\n" "$@"; }
row "build" "attention" "B" "ms/step" "tokens/s" "MFU" "peak memory"
printf "|------------------------|-----------|------|------------|--------------|--------|----------------|\n"
status=0
best_bf16_tps=""
for build in "bf16" "fp32 TF32 off" "fp32 TF32 on"; do
    set -- $build
    precision=$1 tf32=$([ "${3:-}" = on ] && echo 1 || echo 0)
    peak=$([ "$precision" = bf16 ] && echo "$BF16" || { [ "$tf32" = 1 ] && echo "$TF32" || echo "$FP32"; })
    for attention in $ATTENTIONS; do
    for B in $BATCHES; do
        out=$(build/train_gpt_$precision "${MODEL[@]}" -b "$B" -n "$STEPS" --val-every 0 --sample-every 0 -o "" \
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
        row "$build" "$attention" "$B" "$ms" "$tps" "${mfu:--}" "${mem:-?} MiB"
        if [ "$precision" = bf16 ] && { [ -z "$best_bf16_tps" ] || [ "$tps" -gt "$best_bf16_tps" ]; }; then
            best_bf16_tps=$tps best_B=$B best_attention=$attention
        fi
    done
    done
done

# ---- llm.c's train_gpt2cu on the same shape, side by side (LLMC_DIR)
if [ -n "${LLMC_DIR:-}" ]; then
    echo
    if [ -x "$LLMC_DIR/train_gpt2cu" ] && [ -n "$best_bf16_tps" ]; then
        out=$(cd "$LLMC_DIR" && ./train_gpt2cu -e d12 -b "$best_B" -t $T -x "$STEPS" -v 0 -s 0 -g 0 \
              -i dev/data/tinyshakespeare/tiny_shakespeare_train.bin \
              -j dev/data/tinyshakespeare/tiny_shakespeare_val.bin 2>&1)
        # its step lines end "| N tok/s"; the mean of steps 2.. as ours
        llmc=$(grep -oE '[0-9.]+ tok/s' <<< "$out" | tail -n +2 | awk '{ s += $1; n++ } END { if (n) printf "%.0f", s / n }')
        if [ -n "$llmc" ]; then
            echo "llm.c train_gpt2cu, bf16, B=$best_B: $llmc tokens/s; ours (--attention $best_attention): $best_bf16_tps tokens/s;" \
                 "ratio ours/llm.c = $(awk -v a="$best_bf16_tps" -v b="$llmc" 'BEGIN { printf "%.2f", a / b }')"
        else
            echo "llm.c train_gpt2cu ran, but printed no tok/s figures:"; echo "$out" | tail -5; status=1
        fi
    else
        echo "LLMC_DIR=$LLMC_DIR: no train_gpt2cu built there (make train_gpt2cu), or no bf16 run above"
    fi
fi

# ---- per kernel: the dev/cuda workbenches at GPT-2 124M's shapes, CUDA events
if [ "$KERNELS" -eq 1 ]; then
    for precision in bf16 fp32; do
        echo
        echo "kernels, $precision (dev/cuda workbenches; ms per call from CUDA events):"
        make -s -C dev/cuda PRECISION=$precision >/dev/null 2>&1 || { echo "dev/cuda did not build"; status=1; continue; }
        for w in layernorm attention_softmax attention_fused crossentropy gelu encoder_backward adamw; do
            ./dev/cuda/$w | grep -E '^(1|2|[A-Za-z].*tolerance|fused / cuBLAS|attention memory|causal attention)' || status=1
        done
    done
fi
exit $status
