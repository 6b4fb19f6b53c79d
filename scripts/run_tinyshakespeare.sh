#!/usr/bin/env bash
# Tiny Shakespeare (~305K training tokens, 32,768 validation tokens), on whichever trainer
# can run here:
#   GPU (a GPU is visible to nvidia-smi and ./train_gpt is built): GPT-2 small's shape (12
#       layers, 12 heads, 768 channels) from scratch; it overfits within a few passes over
#       the data, which the validation loss shows;
#   CPU (otherwise): ./train's small default model (4 layers, 4 heads, 128 channels), the
#       run whose validation losses docs/reproduce.md quotes: 300 steps of 1,024 tokens, minutes.
#
#   scripts/run_tinyshakespeare.sh [--cpu | --gpu] [--dry-run [0|1]] [-- TRAINER ARGS...]
#
#   --cpu, --gpu  choose instead of detecting
#   --dry-run     print the batch arithmetic, the command and the trainer's plan; launch nothing
# Environment overrides: MICRO_BATCH, SEQ_LEN, TOTAL_BATCH, STEPS, LR, OUT_DIR, TRAIN_BIN.
# Data: python3 data/tinyshakespeare.py (needs the network once).
# Arguments after "--" are appended to the trainer's command line.
set -euo pipefail
cd "$(dirname "$0")/.."

DRY_RUN=0
DEVICE=""
EXTRA=()
source scripts/common.sh  # die, positive_int, commas, batch_line, show
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

while [ $# -gt 0 ]; do
    case "$1" in
        --cpu) DEVICE=cpu; shift ;;
        --gpu) DEVICE=gpu; shift ;;
        --dry-run|--dry-run=*) if take_dry_run "$1" "${2:-}"; then shift; fi; shift ;;
        -h|--help) usage 0 ;;
        --) shift; EXTRA=("$@"); break ;;
        *) echo "error: unknown option $1" >&2; usage 2 ;;
    esac
done

if [ -z "$DEVICE" ]; then
    if ! gpu_visible; then
        DEVICE=cpu; echo "trainer: ./train on the CPU (no GPU visible to nvidia-smi)"
    elif [ ! -x ./train_gpt ]; then
        DEVICE=cpu; echo "trainer: ./train on the CPU (a GPU is visible, but ./train_gpt is not built: make train_gpt)"
    else
        DEVICE=gpu; echo "trainer: ./train_gpt (a GPU is visible)"
    fi
fi
MODEL=()
if [ "$DEVICE" = gpu ]; then
    # 16 sequences of 1024: one step sees 16,384 tokens, ~19 steps per pass over the data
    DEF_BIN=./train_gpt; DEF_B=16; DEF_T=1024; DEF_TOTAL=16384; DEF_STEPS=200; DEF_LR=6e-4
    WARMUP=20; VAL_EVERY=20; SAMPLE_EVERY=50; DEF_OUT=out/tinyshakespeare
    MODEL=(--layers 12 --heads 12 --channels 768 --max-seq-len 1024)
else
    # the trainer's defaults: the small model, 16 sequences of 64 tokens per step
    DEF_BIN=./train; DEF_B=16; DEF_T=64; DEF_TOTAL=1024; DEF_STEPS=300; DEF_LR=3e-3
    WARMUP=20; VAL_EVERY=50; SAMPLE_EVERY=100; DEF_OUT=out/shakespeare_small
fi
TRAIN_BIN=${TRAIN_BIN:-$DEF_BIN}
MICRO_BATCH=${MICRO_BATCH:-$DEF_B}
SEQ_LEN=${SEQ_LEN:-$DEF_T}
TOTAL_BATCH=${TOTAL_BATCH:-$DEF_TOTAL}
STEPS=${STEPS:-$DEF_STEPS}
LR=${LR:-$DEF_LR}
OUT_DIR=${OUT_DIR:-$DEF_OUT}
REPLICAS=1
DATA=data/tinyshakespeare

for v in MICRO_BATCH SEQ_LEN TOTAL_BATCH STEPS; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done

batch_line "$MICRO_BATCH" "$SEQ_LEN" "$TOTAL_BATCH" "$REPLICAS" "$STEPS"

ARGS=(-i "$DATA/tiny_shakespeare_train.bin" -j "$DATA/tiny_shakespeare_val.bin"
    -o "$OUT_DIR" --tokenizer data/gpt2_tokenizer.bin
    ${MODEL[@]+"${MODEL[@]}"} --vocab 50257 --padded-vocab 50304
    -b "$MICRO_BATCH" -t "$SEQ_LEN" -d "$TOTAL_BATCH" -n "$STEPS"
    -l "$LR" --lr-schedule cosine --warmup "$WARMUP" --lr-final-frac 0.1
    -c 0.1 --grad-clip 1.0 --seed 1337
    -v "$VAL_EVERY" --val-tokens 32768 -s "$SAMPLE_EVERY"
    ${EXTRA[@]+"${EXTRA[@]}"})
CMD=("$TRAIN_BIN" "${ARGS[@]}")

echo "command: $(show "${CMD[@]}")"

if [ "$DRY_RUN" -eq 1 ]; then
    trainer_plan "$REPLICAS" "$TRAIN_BIN" "${ARGS[@]}"
    exit 0
fi

[ -x "$TRAIN_BIN" ] || die "$TRAIN_BIN not found or not executable; build it first (or set TRAIN_BIN)"
[ -f "$DATA/tiny_shakespeare_train.bin" ] || die "no $DATA/tiny_shakespeare_train.bin; run: python3 data/tinyshakespeare.py (needs the network; offline, data/text_to_shards.py makes shards from a local text)"
mkdir -p "$OUT_DIR"
exec "${CMD[@]}"
