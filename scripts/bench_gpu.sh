#!/usr/bin/env bash
# GPU speed of ./train_gpt at GPT-2 124M's shape (L=12 NH=12 C=768, V=50257 padded to
# 50304), T=1024, random initialisation, the built-in corpus: no files needed. For each
# micro-batch B and each TF32 setting: ms per optimizer step and tokens/s (the trainer's
# average over the steps after the first), MFU, and the peak GPU memory.
#
#   scripts/bench_gpu.sh [--steps N] [--batch "4 8 16"] [--tf32 "0 1"]      (make bench_gpu)
#
# MFU = tokens/s × FLOPs per token / peak FLOP/s, with FLOPs per token = 6·N + 6·L·C·T:
# 6 per parameter (forward 2, backward 4) plus the attention products, counting only the
# causal half of the T×T scores that a token can see. Peaks are the dense figures of the
# data sheets: FP32 without tensor cores for --tf32 0, TF32 tensor cores for --tf32 1.
#   H100 / H200 SXM: 67 and 495 TFLOP/s;  H100 PCIe: 51 and 378;  A100: 19.5 and 156.
# Another GPU: set PEAK_FP32 and PEAK_TF32 (TFLOP/s), or MFU is not shown.
# A batch that does not fit in memory is reported as such; larger ones are then skipped.
set -uo pipefail
cd "$(dirname "$0")/.."

STEPS=10
BATCHES="4 8 16"
TF32S="0 1"
TRAIN_BIN=${TRAIN_BIN:-./train_gpt}
while [ $# -gt 0 ]; do
    case "$1" in
        --steps) STEPS=${2:?}; shift 2 ;;
        --batch) BATCHES=${2:?}; shift 2 ;;
        --tf32) TF32S=${2:?}; shift 2 ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ -x "$TRAIN_BIN" ] || { echo "error: $TRAIN_BIN not found; build it: make train_gpt" >&2; exit 2; }

GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$GPU" in
    *H100*PCIe*) PEAK32=51.2 PEAKTF=378 ;;
    *H100*|*H200*|*GH200*) PEAK32=67 PEAKTF=495 ;;
    *A100*) PEAK32=19.5 PEAKTF=156 ;;
    *) PEAK32="" PEAKTF="" ;;
esac
PEAK32=${PEAK_FP32:-$PEAK32}
PEAKTF=${PEAK_TF32:-$PEAKTF}

L=12 C=768 T=1024 V=50257 VP=50304 MAXT=1024
N=$((VP * C + MAXT * C + L * (12 * C * C + 13 * C) + 2 * C))
FLOPS_PER_TOKEN=$((6 * N + 6 * L * C * T))
echo "GPU: ${GPU:-unknown}; peaks used for MFU: FP32 ${PEAK32:-?} TFLOP/s, TF32 ${PEAKTF:-?} TFLOP/s"
echo "model: GPT-2 124M shape, $N parameters; FLOPs per token = 6·N + 6·L·C·T = $FLOPS_PER_TOKEN"
echo "$STEPS steps per run, T=$T; times are the average of steps 2..$STEPS"
echo
printf "| %-4s | %-5s | %10s | %12s | %6s | %14s |\n" "B" "TF32" "ms/step" "tokens/s" "MFU" "peak memory"
printf "|------|-------|------------|--------------|--------|----------------|\n"
status=0
for tf32 in $TF32S; do
    for B in $BATCHES; do
        out=$("$TRAIN_BIN" --layers $L --heads 12 --channels $C --max-seq-len $MAXT --vocab $V --padded-vocab $VP \
              -b "$B" -t $T -n "$STEPS" --val-every 0 --sample-every 0 -o "" --tf32 "$tf32" 2>&1)
        rc=$?
        mode=$([ "$tf32" = 1 ] && echo on || echo off)
        if [ $rc -ne 0 ]; then
            if grep -q "out of memory" <<< "$out"; then
                printf "| %-4s | %-5s | %10s | %12s | %6s | %14s |\n" "$B" "$mode" "-" "-" "-" "out of memory"
                break  # larger batches will not fit either
            fi
            echo "run failed (B=$B, TF32 $mode):"; echo "$out" | tail -5
            status=1
            continue
        fi
        avg=$(grep '^average:' <<< "$out")
        ms=$(sed -E 's/^average: ([0-9.]+) ms.*/\1/' <<< "$avg")
        tps=$(sed -E 's/.*ms\/step, ([0-9,]+) tokens.*/\1/' <<< "$avg" | tr -d ,)
        mem=$(grep '^peak GPU memory' <<< "$out" | sed -E 's/^peak GPU memory: ([0-9]+) MiB.*/\1/')
        peak=$([ "$tf32" = 1 ] && echo "$PEAKTF" || echo "$PEAK32")
        mfu=$(awk -v t="$tps" -v f="$FLOPS_PER_TOKEN" -v p="$peak" \
              'BEGIN { if (p == "" || t == "") print "-"; else printf "%.1f%%", 100 * t * f / (p * 1e12) }')
        printf "| %-4s | %-5s | %10s | %12s | %6s | %10s MiB |\n" "$B" "$mode" "$ms" "$tps" "$mfu" "${mem:-?}"
    done
done
exit $status
