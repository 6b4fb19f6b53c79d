#!/usr/bin/env bash
# Llama-3.2 1B's shape from scratch (--preset llama3.2-1b: L=16, C=2048, NH=32 query heads and
# KVH=8 K/V heads, F=8192, V=128,256, the head tied to the embedding): the plan of the run on
# one 80 GB GPU, and on a node of 8 with ZeRO stage 1 (--zero 1), each with the micro-batch
# chosen from memory (-b auto). 1,048,576-token batches (2^20) of 2048-token sequences, AdamW
# with Llama 2's published settings (Touvron et al. 2023, section 2.2: lr 3e-4, 2000 warm-up
# steps, cosine decay to 10%, weight decay 0.1, clipping at 1, betas 0.9 and 0.95, eps 1e-5),
# 25B tokens (about 20 per parameter, Chinchilla's rule): the trainer derives the steps.
#
#   scripts/llama3_1b.sh --dry-run [--gpus N] [--device-memory SIZE] [--tokens N] [-- TRAINER ARGS...]
#
#   --dry-run      print each command and the trainer's plan for it (memory per replica, the
#                  micro-batch chosen, FLOPs, sync, time on H100s); launch nothing
#   --gpus N       the replicas of the second plan (default 8), with --zero 1
#   --device-memory SIZE  memory per GPU (default 80GB)
#   --tokens N     tokens to train on (default 25,000,000,000)
# The plans are the CPU trainer's (./train; env TRAIN_BIN=./train_gpt_cpu for the GPU trainer's,
# which plans Llama but does not train it yet): its memory estimate keeps the full attention
# probabilities and three logits tensors, so the GPU trainer's is smaller; the FLOPs, the sync
# and the time are both trainers' alike (host/cost.h). Only --dry-run for now: the
# GPU trainer has no Llama path yet, and the CPU trainer would take days per 8 PFLOP step.
# Arguments after "--" are appended to the trainer's command line.
set -euo pipefail
cd "$(dirname "$0")/.."

DRY_RUN=0
GPUS=8
DEVICE_MEMORY=80GB
TOKENS=25000000000
SEQ_LEN=2048
TOTAL_BATCH=1048576
TRAIN_BIN=${TRAIN_BIN:-./train}
EXTRA=()

source scripts/common.sh  # die, positive_int, show, take_dry_run, steps_from_tokens, trainer_plan
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

while [ $# -gt 0 ]; do
    case "$1" in
        --gpus) GPUS=${2:?--gpus needs a number}; shift 2 ;;
        --device-memory) DEVICE_MEMORY=${2:?--device-memory needs a size, e.g. 80GB}; shift 2 ;;
        --tokens) TOKENS=${2:?--tokens needs a number}; shift 2 ;;
        --dry-run|--dry-run=*) if take_dry_run "$1" "${2:-}"; then shift; fi; shift ;;
        -h|--help) usage 0 ;;
        --) shift; EXTRA=("$@"); break ;;
        *) echo "error: unknown option $1" >&2; usage 2 ;;
    esac
done
positive_int GPUS "$GPUS"
positive_int TOKENS "$TOKENS"
[ "$DRY_RUN" -eq 1 ] || die "this recipe only plans for now (--dry-run): the GPU trainer has no Llama path yet (train_gpt refuses --model llama3), and the CPU trainer would take days per step of this shape"
[ $((TOTAL_BATCH % (SEQ_LEN * GPUS))) -eq 0 ] ||
    die "$(commas $TOTAL_BATCH) tokens per step do not split into ${SEQ_LEN}-token sequences over $GPUS GPUs"

steps_from_tokens "$TOKENS" "$TOTAL_BATCH"
ARGS=(--preset llama3.2-1b
    -b auto -t "$SEQ_LEN" -d "$TOTAL_BATCH" --train-tokens "$TOKENS"
    -l 3e-4 --lr-schedule cosine --warmup 2000 --lr-final-frac 0.1
    --beta1 0.9 --beta2 0.95 --eps 1e-5 -c 0.1 --grad-clip 1.0 --seed 1337
    -o out/llama3_1b --device h100-sxm --device-memory "$DEVICE_MEMORY" ${EXTRA[@]+"${EXTRA[@]}"})

echo "1 GPU of $DEVICE_MEMORY:"
echo "command: $(show "$TRAIN_BIN" "${ARGS[@]}")"
trainer_plan 1 "$TRAIN_BIN" "${ARGS[@]}"
echo "$GPUS GPUs of $DEVICE_MEMORY each, ZeRO stage 1:"
echo "command: $(show mpirun -np "$GPUS" "$TRAIN_BIN" "${ARGS[@]}" --zero 1)"
trainer_plan "$GPUS" "$TRAIN_BIN" "${ARGS[@]}" --zero 1
