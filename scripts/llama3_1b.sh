#!/usr/bin/env bash
# Llama-3.2 1B's shape from scratch (--preset llama3.2-1b: L=16, C=2048, NH=32 query heads and
# KVH=8 K/V heads, F=8192, V=128,256, the head tied to the embedding) on the GPU trainer
# (./train_gpt): on a node of 8 GPUs with ZeRO stage 1 (--zero 1), or on one (--gpus 1), the
# micro-batch chosen from memory (-b auto). 1,048,576-token batches (2^20) of 2048-token
# sequences, AdamW with Llama 2's published settings (Touvron et al. 2023, section 2.2: lr 3e-4,
# 2000 warm-up steps, cosine decay to 10%, weight decay 0.1, clipping at 1, betas 0.9 and 0.95,
# eps 1e-5), 25B tokens (about 20 per parameter, Chinchilla's rule): the trainer derives the steps.
#
#   scripts/llama3_1b.sh --data DIR [--gpus N] [--device-memory SIZE] [--tokens N] [--out DIR]
#                        [-- TRAINER ARGS...]
#   scripts/llama3_1b.sh --dry-run [--data DIR] [--gpus N] ...   the plans, launching nothing
#
#   --data DIR     Llama-3-tokenized shards: DIR/*_train_*.bin and DIR/*_val_*.bin in llm.c's
#                  Llama-3 format (uint32 tokens, magic 20240801: host/data.h), e.g. what
#                  data/text_to_shards.py --tokenizer llama3 or llm.c's dev/data/fineweb.py
#                  -m llama-3 writes (env DATA_DIR); a dry run plans without them (the plan
#                  does not depend on the data)
#   --gpus N       replicas (default 8); N > 1 launches through mpirun -np N, with --zero 1
#   --device-memory SIZE  memory per GPU for -b auto; default: what the GPU has free, and 80GB
#                  for a dry run (its plans are for 80 GB GPUs)
#   --tokens N     tokens to train on (default 25,000,000,000)
#   --out DIR      log and checkpoints (default out/llama3_1b; --resume auto continues there)
#   --dry-run      print each command and the GPU trainer's plan for it, on 1 GPU and on N with
#                  --zero 1 (memory per replica in bf16, the micro-batch chosen, FLOPs, sync, time
#                  on H100s); launch nothing. Without ./train_gpt, ./train_gpt_cpu (the same
#                  source on the CPU runtime, no GPU needed) plans (scripts/common.sh)
# Needs a GPU visible to nvidia-smi (--dry-run does not), and mpirun for N > 1.
# Environment: DATA_DIR, TRAIN_BIN (default ./train_gpt; ./train plans with the CPU trainer's
# estimate, which keeps the attention probabilities).
# The times, and a run's MFU, are for H100 SXM (-- --device NAME for another GPU). Without a
# tokenizer file, samples print the token ids above 255 as <id> (-- --tokenizer FILE, in llm.c's
# format, decodes them).
# Arguments after "--" are appended to the trainer's command line (the last of an option wins).
set -euo pipefail
cd "$(dirname "$0")/.."

DRY_RUN=0
GPUS=8
DEVICE_MEMORY=""
TOKENS=25000000000
SEQ_LEN=2048
TOTAL_BATCH=1048576
DATA_DIR=${DATA_DIR:-}
OUT_DIR=out/llama3_1b
TRAIN_BIN=${TRAIN_BIN:-./train_gpt}
EXTRA=()

source scripts/common.sh  # die, positive_int, show, take_dry_run, steps_from_tokens, trainer_plan, gpu_visible
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

while [ $# -gt 0 ]; do
    case "$1" in
        --data) DATA_DIR=${2:?--data needs a directory}; shift 2 ;;
        --gpus) GPUS=${2:?--gpus needs a number}; shift 2 ;;
        --device-memory) DEVICE_MEMORY=${2:?--device-memory needs a size, e.g. 80GB}; shift 2 ;;
        --tokens) TOKENS=${2:?--tokens needs a number}; shift 2 ;;
        --out) OUT_DIR=${2:?--out needs a directory}; shift 2 ;;
        --dry-run|--dry-run=*) if take_dry_run "$1" "${2:-}"; then shift; fi; shift ;;
        -h|--help) usage 0 ;;
        --) shift; EXTRA=("$@"); break ;;
        *) echo "error: unknown option $1" >&2; usage 2 ;;
    esac
done
positive_int GPUS "$GPUS"
positive_int TOKENS "$TOKENS"
[ $((TOTAL_BATCH % (SEQ_LEN * GPUS))) -eq 0 ] ||
    die "$(commas $TOTAL_BATCH) tokens per step do not split into ${SEQ_LEN}-token sequences over $GPUS GPUs"

# data_problem: why DATA_DIR cannot be trained on, in one line, or nothing. GPT-2's uint16 shards
# would train too (their ids are below V), on another tokenizer's tokens: the first shard's magic
# is read.
data_problem() {
    [ -n "$DATA_DIR" ] || { echo "no --data DIR: a run needs Llama-3-tokenized shards, DIR/*_train_*.bin and DIR/*_val_*.bin in llm.c's uint32 format (data/text_to_shards.py --tokenizer llama3 writes them from text, llm.c's dev/data/fineweb.py -m llama-3 from FineWeb)"; return; }
    [ -d "$DATA_DIR" ] || { echo "--data $DATA_DIR: no such directory"; return; }
    local split first magic
    for split in train val; do
        first=$(compgen -G "$DATA_DIR/*_${split}_*.bin" | sort | head -1 || true)
        [ -n "$first" ] || { echo "no $split shards in $DATA_DIR ($DATA_DIR/*_${split}_*.bin, Llama-3's uint32 format)"; return; }
        magic=$(od -An -t d4 -N 4 "$first" | tr -d ' ')
        case "$magic" in
            20240801) ;;
            20240520) echo "$first holds GPT-2's uint16 tokens (magic 20240520), not Llama-3's uint32 tokens (magic 20240801)"; return ;;
            *) echo "$first is not a token shard (magic ${magic:-none: the file is shorter than 4 bytes}; Llama-3's uint32 shards have 20240801)"; return ;;
        esac
    done
}

if [ "$DRY_RUN" -eq 1 ]; then
    DEVICE_MEMORY=${DEVICE_MEMORY:-80GB}
    if [ -z "$DATA_DIR" ]; then
        echo "data: no --data DIR, so none in the commands; the plans are the same with Llama-3's shards (a run needs them)"
    elif problem=$(data_problem) && [ -n "$problem" ]; then
        echo "warning: $problem" >&2
    fi
else  # what a run needs, checked before anything is printed
    problem=$(data_problem)
    [ -z "$problem" ] || die "$problem"
    gpu_visible || die "no GPU visible to nvidia-smi: this recipe trains on GPUs (--dry-run plans without one)"
    [ -x "$TRAIN_BIN" ] || die "$TRAIN_BIN not found or not executable; build it first: make train_gpt (or set TRAIN_BIN)"
    [ "$GPUS" -eq 1 ] || command -v mpirun > /dev/null || die "mpirun not found; it launches the $GPUS replicas (--gpus 1 for one GPU)"
fi
steps_from_tokens "$TOKENS" "$TOTAL_BATCH"
DATA=()
[ -n "$DATA_DIR" ] && DATA=(-i "$DATA_DIR/*_train_*.bin" -j "$DATA_DIR/*_val_*.bin")
# --val-tokens 10,485,760: 5,120 sequences of 2048, 640 on each of 8 GPUs
ARGS=(--preset llama3.2-1b ${DATA[@]+"${DATA[@]}"}
    -b auto -t "$SEQ_LEN" -d "$TOTAL_BATCH" --train-tokens "$TOKENS"
    -l 3e-4 --lr-schedule cosine --warmup 2000 --lr-final-frac 0.1
    --beta1 0.9 --beta2 0.95 --eps 1e-5 -c 0.1 --grad-clip 1.0 --seed 1337
    -o "$OUT_DIR" -v 250 --val-tokens 10485760 -s 1000 -g 64 --ckpt-every 1000 --resume auto
    --device h100-sxm ${DEVICE_MEMORY:+--device-memory "$DEVICE_MEMORY"})
ONE=("$TRAIN_BIN" "${ARGS[@]}" ${EXTRA[@]+"${EXTRA[@]}"})
MANY=(mpirun -np "$GPUS" "$TRAIN_BIN" "${ARGS[@]}" --zero 1 ${EXTRA[@]+"${EXTRA[@]}"})

if [ "$DRY_RUN" -eq 1 ]; then
    echo "1 GPU of $DEVICE_MEMORY:"
    echo "command: $(show "${ONE[@]}")"
    trainer_plan 1 "${ONE[@]}"
    if [ "$GPUS" -gt 1 ]; then
        echo "$GPUS GPUs of $DEVICE_MEMORY each, ZeRO stage 1:"
        echo "command: $(show "${MANY[@]}")"
        trainer_plan "$GPUS" "${MANY[@]:3}"
    fi
    exit 0
fi

CMD=("${ONE[@]}")
[ "$GPUS" -eq 1 ] || CMD=("${MANY[@]}")
echo "command: $(show "${CMD[@]}")"
mkdir -p "$OUT_DIR"
exec "${CMD[@]}"
