#!/usr/bin/env bash
# Trains on the GPUs of several machines: one process per GPU, started by mpirun from a
# hostfile. Every machine needs the same ./train_gpt (built with MPI) and the data at the
# same paths; rank 0 writes the checkpoints.
#
#   scripts/run_multinode.sh --hostfile FILE --gpus-per-node G [--dry-run [0|1]] [TRAINER OPTIONS...]
#
#   --hostfile FILE      one machine per line (Open MPI's format: "node1 slots=8"; # comments)
#   --gpus-per-node G    processes (GPUs) on each machine
#   --dry-run            print the batch arithmetic, the command and the trainer's plan; launch nothing
# Every other argument (and all after "--") goes to the trainer. NCCL_* variables of this
# shell are passed on to every process.
# Environment: TRAIN_BIN (default ./train_gpt), MPIRUN_ARGS (extra mpirun options).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/launch_common.sh

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
HOSTFILE="" PER_NODE=""
while [ $# -gt 0 ]; do
    case "$1" in
        --hostfile) HOSTFILE=${2:?--hostfile needs a file}; shift 2 ;;
        --gpus-per-node) PER_NODE=${2:?--gpus-per-node needs a number}; shift 2 ;;
        --dry-run|--dry-run=*) if take_dry_run "$1" "${2:-}"; then shift; fi; shift ;;
        -h|--help) usage 0 ;;
        --) shift; TRAINER_ARGS+=("$@"); break ;;
        *) TRAINER_ARGS+=("$1"); shift ;;
    esac
done
[ -n "$HOSTFILE" ] || die "--hostfile FILE is required (see --help)"
[ -f "$HOSTFILE" ] || die "hostfile '$HOSTFILE' not found"
[ -n "$PER_NODE" ] || die "--gpus-per-node G is required (see --help)"
positive_int --gpus-per-node "$PER_NODE"

NODES=$(grep -cvE '^[[:space:]]*(#|$)' "$HOSTFILE" || true)
[ "$NODES" -ge 1 ] || die "hostfile '$HOSTFILE' lists no machine"
R=$((NODES * PER_NODE))
echo "$NODES machine(s) × $PER_NODE GPU(s) = $R replicas"
print_plan "$R"

read -r -a EXTRA <<< "${MPIRUN_ARGS:-}"
CMD=(mpirun -np "$R" --hostfile "$HOSTFILE" --map-by "ppr:${PER_NODE}:node" --bind-to none -x PATH -x LD_LIBRARY_PATH)
for v in $(compgen -e | grep '^NCCL_' || true); do CMD+=(-x "$v"); done
CMD+=(${EXTRA[@]+"${EXTRA[@]}"} "$TRAIN_BIN" ${TRAINER_ARGS[@]+"${TRAINER_ARGS[@]}"})
if [ "$DRY_RUN" -eq 0 ]; then
    command -v mpirun > /dev/null || die "mpirun not found (apt-get install openmpi-bin libopenmpi-dev, then rebuild train_gpt)"
fi
launch "${CMD[@]}"
