#!/usr/bin/env bash
# Trains on the GPUs of one machine: one process per GPU, started by mpirun. Each process
# takes the GPU of its local rank; gradients are summed with NCCL once per step.
#
#   scripts/run_node.sh [--gpus N] [--dry-run [0|1]] [TRAINER OPTIONS...]
#
#   --gpus N    processes (GPUs) to use; default: every GPU nvidia-smi lists
#   --dry-run   print the batch arithmetic, the command and the trainer's plan; launch nothing
# Every other argument (and all after "--") goes to the trainer, e.g.
#   scripts/run_node.sh --gpus 8 -b 16 -t 1024 -d 524288 -i 'data/x/*_train_*.bin' -j 'data/x/*_val_*.bin'
# The global batch (-d) stays what you ask for: more GPUs means fewer accumulation steps.
# Needs ./train_gpt built with MPI (gpu.mk finds mpicxx) and mpirun.
# Environment: TRAIN_BIN (default ./train_gpt), MPIRUN_ARGS (extra mpirun options, e.g.
# --allow-run-as-root).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/launch_common.sh

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
GPUS=""
while [ $# -gt 0 ]; do
    case "$1" in
        --gpus) GPUS=${2:?--gpus needs a number}; shift 2 ;;
        --dry-run|--dry-run=*) if take_dry_run "$1" "${2:-}"; then shift; fi; shift ;;
        -h|--help) usage 0 ;;
        --) shift; TRAINER_ARGS+=("$@"); break ;;
        *) TRAINER_ARGS+=("$1"); shift ;;
    esac
done

if [ -z "$GPUS" ]; then
    GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    [ "$GPUS" -ge 1 ] 2>/dev/null || die "cannot count this machine's GPUs (nvidia-smi); pass --gpus N"
fi
positive_int --gpus "$GPUS"

print_plan "$GPUS"
read -r -a EXTRA <<< "${MPIRUN_ARGS:-}"
CMD=(mpirun -np "$GPUS" --bind-to none ${EXTRA[@]+"${EXTRA[@]}"} "$TRAIN_BIN" ${TRAINER_ARGS[@]+"${TRAINER_ARGS[@]}"})
if [ "$DRY_RUN" -eq 0 ]; then
    command -v mpirun > /dev/null || die "mpirun not found (apt-get install openmpi-bin libopenmpi-dev, then rebuild train_gpt)"
    [ -x "$TRAIN_BIN" ] && ! ldd "$TRAIN_BIN" | grep -q libmpi &&
        die "$TRAIN_BIN was built without MPI: install libopenmpi-dev and rebuild it (make train_gpt)"
fi
launch "${CMD[@]}"
