#!/usr/bin/env bash
# GPT-2 small (124M shape: 12 layers, 12 heads, 768 channels) trained from
# scratch on tiny Shakespeare (~305K training tokens, 32,768 validation tokens).
# A quick end-to-end run rather than a good model: it overfits within a few
# passes over the data, which the validation loss shows.
#
#   scripts/run_tinyshakespeare.sh [--cpu | --gpu] [--dry-run] [-- TRAINER ARGS...]
#
# Uses ./train_gpt (GPU) if it exists, else ./train (CPU); --cpu/--gpu choose.
# The CPU defaults are sized for minutes on a few cores, not for quality.
#   --dry-run   print the batch arithmetic and the command, run nothing
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
        --dry-run) DRY_RUN=1; shift ;;
        -h|--help) usage 0 ;;
        --) shift; EXTRA=("$@"); break ;;
        *) echo "error: unknown option $1" >&2; usage 2 ;;
    esac
done

if [ -z "$DEVICE" ]; then
    if [ -x ./train_gpt ]; then DEVICE=gpu; else DEVICE=cpu; fi
fi
if [ "$DEVICE" = gpu ]; then
    # 16 sequences of 1024: one step sees 16,384 tokens, ~19 steps per pass over the data
    DEF_BIN=./train_gpt; DEF_B=16; DEF_T=1024; DEF_TOTAL=16384; DEF_STEPS=200; DEF_LR=6e-4
    WARMUP=20; VAL_EVERY=20; VAL_BATCHES=2; SAMPLE_EVERY=50
else
    # a 124M-parameter step costs ~6 * 124M * tokens FLOPs; keep the tokens per step small on a CPU
    DEF_BIN=./train; DEF_B=4; DEF_T=64; DEF_TOTAL=256; DEF_STEPS=40; DEF_LR=3e-4
    WARMUP=4; VAL_EVERY=10; VAL_BATCHES=8; SAMPLE_EVERY=20
fi
TRAIN_BIN=${TRAIN_BIN:-$DEF_BIN}
MICRO_BATCH=${MICRO_BATCH:-$DEF_B}
SEQ_LEN=${SEQ_LEN:-$DEF_T}
TOTAL_BATCH=${TOTAL_BATCH:-$DEF_TOTAL}
STEPS=${STEPS:-$DEF_STEPS}
LR=${LR:-$DEF_LR}
OUT_DIR=${OUT_DIR:-out/tinyshakespeare}
REPLICAS=1
DATA=data/tinyshakespeare

for v in MICRO_BATCH SEQ_LEN TOTAL_BATCH STEPS; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
[ "$SEQ_LEN" -le 1024 ] || die "SEQ_LEN $SEQ_LEN exceeds the model's 1024 positions"

batch_line "$MICRO_BATCH" "$SEQ_LEN" "$TOTAL_BATCH" "$REPLICAS" "$STEPS"

CMD=("$TRAIN_BIN"
    -i "$DATA/tiny_shakespeare_train.bin" -j "$DATA/tiny_shakespeare_val.bin"
    -o "$OUT_DIR" --tokenizer data/gpt2_tokenizer.bin
    --layers 12 --heads 12 --channels 768 --max-seq-len 1024 --vocab 50257 --padded-vocab 50304
    -b "$MICRO_BATCH" -t "$SEQ_LEN" -d "$TOTAL_BATCH" -n "$STEPS"
    -l "$LR" --lr-schedule cosine --warmup "$WARMUP" --lr-final-frac 0.1
    -c 0.1 --grad-clip 1.0 --seed 1337
    -v "$VAL_EVERY" -m "$VAL_BATCHES" -s "$SAMPLE_EVERY" -g 64)
CMD+=(${EXTRA[@]+"${EXTRA[@]}"})

echo "command: $(show "${CMD[@]}")"

[ "$DRY_RUN" -eq 1 ] && exit 0

[ -x "$TRAIN_BIN" ] || die "$TRAIN_BIN not found or not executable; build it first (or set TRAIN_BIN)"
[ -f "$DATA/tiny_shakespeare_train.bin" ] || die "no $DATA/tiny_shakespeare_train.bin; run: python3 data/tinyshakespeare.py (needs the network; offline, data/text_to_shards.py makes shards from a local text)"
mkdir -p "$OUT_DIR"
exec "${CMD[@]}"
