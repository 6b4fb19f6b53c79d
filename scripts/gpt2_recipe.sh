# The body of the GPT-2 recipes on FineWeb-Edu (llm.c's hyper-parameters), sourced by
# scripts/run_gpt2_124m.sh and scripts/run_gpt2_1558m.sh with their arguments, after they set:
#   MODEL               the trainer's model options (--layers ... --padded-vocab)
#   GPUS                the default replica count
#   TOTAL_BATCH         tokens per optimizer step
#   TOKENS, STEPS       the run's length: one of them set, the other empty
#   OUT_DIR             the default output directory
#   ZERO_WITH_REPLICAS  --zero's default when GPUS > 1 (0 or 1)
# It parses the options the recipes' headers document (usage prints the sourcing script's header),
# prints the batch arithmetic and the command, and with --dry-run the trainer's plan; otherwise it
# checks the GPU, the binary and the data, then runs the command.
ZERO=""
HOSTS=""
DRY_RUN=0
MICRO_BATCH=${MICRO_BATCH:-auto}
DEVICE_MEMORY=${DEVICE_MEMORY:-}
SEQ_LEN=1024
DATA_DIR=${DATA_DIR:-data/edu_fineweb10B}
TRAIN_BIN=${TRAIN_BIN:-./train_gpt}
EXTRA=()

source scripts/common.sh  # die, positive_int, commas, batch_line, show
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

while [ $# -gt 0 ]; do
    case "$1" in
        --gpus) GPUS=${2:?--gpus needs a number}; shift 2 ;;
        --hosts) HOSTS=${2:?--hosts needs a file}; shift 2 ;;
        --micro-batch) MICRO_BATCH=${2:?--micro-batch needs a number or auto}; shift 2 ;;
        --device-memory) DEVICE_MEMORY=${2:?--device-memory needs a size, e.g. 80GB}; shift 2 ;;
        --zero) ZERO=${2:?--zero needs 0 or 1}; shift 2 ;;
        --tokens) TOKENS=${2:?--tokens needs a number}; STEPS=""; shift 2 ;;
        --steps) STEPS=${2:?--steps needs a number}; TOKENS=""; shift 2 ;;
        --data) DATA_DIR=${2:?--data needs a directory}; shift 2 ;;
        --out) OUT_DIR=${2:?--out needs a directory}; shift 2 ;;
        --dry-run|--dry-run=*) if take_dry_run "$1" "${2:-}"; then shift; fi; shift ;;
        -h|--help) usage 0 ;;
        --) shift; EXTRA=("$@"); break ;;
        *) echo "error: unknown option $1" >&2; usage 2 ;;
    esac
done

[ "$MICRO_BATCH" = auto ] || positive_int MICRO_BATCH "$MICRO_BATCH"
[ -z "$ZERO" ] && { [ "$GPUS" -gt 1 ] && ZERO=$ZERO_WITH_REPLICAS || ZERO=0; }
[[ $ZERO =~ ^[01]$ ]] || die "--zero must be 0 or 1 (ZeRO stage 1 or off), got '$ZERO'"
for v in GPUS ${TOKENS:+TOKENS} ${STEPS:+STEPS}; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
[ -n "$HOSTS" ] && [ "$GPUS" -eq 1 ] && die "--hosts needs --gpus N (the total number of GPUs over all nodes)"

LENGTH=(-n "$STEPS")
if [ -z "$STEPS" ]; then  # the trainer derives them, and prints the same division
    steps_from_tokens "$TOKENS" "$TOTAL_BATCH"
    LENGTH=(--train-tokens "$TOKENS")
fi
if [ "$MICRO_BATCH" = auto ]; then
    [ $((TOTAL_BATCH % (SEQ_LEN * GPUS))) -eq 0 ] ||
        die "$(commas $TOTAL_BATCH) tokens per step do not split into ${SEQ_LEN}-token sequences over $GPUS GPUs"
    echo "micro-batch: the largest B×$SEQ_LEN that fits in a GPU's memory and splits $(commas $TOTAL_BATCH) tokens over $GPUS GPU(s), chosen by the trainer (-b auto)"
else
    batch_line "$MICRO_BATCH" "$SEQ_LEN" "$TOTAL_BATCH" "$GPUS" "$STEPS"
fi
if [ "$DRY_RUN" -eq 1 ] && [ -z "$DEVICE_MEMORY" ] && ! gpu_visible; then
    DEVICE_MEMORY=80GB
    echo "no GPU visible: the dry run plans for 80GB per GPU (--device-memory SIZE for another)"
fi

# --val-tokens 10,485,760: llm.c's 20 validation batches of 64×1024 on each of 8 GPUs
SHARDED=()  # --zero 1, or nothing: the trainer's default is 0
[ "$ZERO" = 1 ] && SHARDED=(--zero 1)
CMD=()
if [ "$GPUS" -gt 1 ]; then
    CMD=(mpirun -np "$GPUS")
    [ -n "$HOSTS" ] && CMD+=(--hostfile "$HOSTS")
fi
ARGS=(-i "$DATA_DIR/*_train_*.bin" -j "$DATA_DIR/*_val_*.bin"
    -o "$OUT_DIR" --tokenizer data/gpt2_tokenizer.bin
    "${MODEL[@]}"
    -b "$MICRO_BATCH" -t "$SEQ_LEN" -d "$TOTAL_BATCH" "${LENGTH[@]}"
    -l 6e-4 --lr-schedule cosine --warmup 700 --lr-final-frac 0.0
    --beta1 0.9 --beta2 0.95 --eps 1e-8 -c 0.1 --grad-clip 1.0 --seed 1337
    -v 250 --val-tokens 10485760 -s 1000 -g 64 --ckpt-every 1000 --resume auto
    ${SHARDED[@]+"${SHARDED[@]}"} ${DEVICE_MEMORY:+--device-memory "$DEVICE_MEMORY"} ${EXTRA[@]+"${EXTRA[@]}"})
CMD+=("$TRAIN_BIN" "${ARGS[@]}")

echo "command: $(show "${CMD[@]}")"

if [ "$DRY_RUN" -eq 1 ]; then
    trainer_plan "$GPUS" "$TRAIN_BIN" "${ARGS[@]}"
    if [ "$ZERO" = 1 ]; then  # the same plan without ZeRO, for comparison: its micro-batch and memory
        echo "without ZeRO (--zero 0), for comparison:"
        trainer_plan "$GPUS" "$TRAIN_BIN" "${ARGS[@]}" --zero 0 2>&1 | grep -E "^plan: |^  (micro-batch|memory per replica:)|error" || true
    fi
    exit 0
fi

gpu_visible || die "no GPU visible to nvidia-smi: this recipe trains on GPUs (scripts/run_tinyshakespeare.sh runs on a CPU)"
[ -x "$TRAIN_BIN" ] || die "$TRAIN_BIN not found or not executable; build it first (or set TRAIN_BIN)"
compgen -G "$DATA_DIR/*_train_*.bin" > /dev/null || die "no training shards in $DATA_DIR; run: python3 data/fineweb.py --dataset edu"
[ -f data/gpt2_tokenizer.bin ] || echo "warning: data/gpt2_tokenizer.bin missing; samples cannot be decoded" >&2
[ -z "$HOSTS" ] || [ -f "$HOSTS" ] || die "hostfile $HOSTS not found"
[ "$GPUS" -eq 1 ] || command -v mpirun > /dev/null || die "mpirun not found; it launches the $GPUS replicas"
mkdir -p "$OUT_DIR"
exec "${CMD[@]}"
