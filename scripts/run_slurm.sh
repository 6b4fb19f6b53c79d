#!/usr/bin/env bash
# Trains under Slurm: srun starts one process per GPU, inside an allocation (sbatch or
# salloc) or on its own. Two ways for the processes to find each other:
#
#   without MPI (default): Slurm's variables give each process its rank; rank 0 writes
#       NCCL's id into a file on a filesystem every node shares (--init-file), the others
#       read it. Works with any train_gpt, no MPI needed.
#   with MPI (--mpi): srun starts the processes through PMIx and MPI exchanges the id;
#       needs train_gpt built with MPI and a Slurm with PMIx.
#
#   scripts/run_slurm.sh [--nodes N] [--gpus-per-node G] [--mpi] [--init-file PATH]
#                        [--dry-run [0|1]] [TRAINER OPTIONS...]
#
#   --nodes N           machines (default: the allocation's, SLURM_JOB_NUM_NODES, else 1)
#   --gpus-per-node G   processes per machine (default: SLURM_GPUS_ON_NODE, else 8)
#   --mpi               launch through MPI (srun --mpi=pmix) instead of the id file
#   --init-file PATH    the id file without MPI (default: out/nccl_init.<job id> under the
#                       current directory, which must be on a filesystem every node shares);
#                       the trainer removes it once every rank has read it
#   --dry-run           print the batch arithmetic, the command and the trainer's plan; launch nothing
# Every other argument (and all after "--") goes to the trainer. A process that fails ends
# the whole step (--kill-on-bad-exit), so no rank waits forever for a dead one.
# Environment: TRAIN_BIN (default ./train_gpt), SRUN_ARGS (extra srun options, e.g.
# --gpus-per-task=1 or --partition=gpu).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/launch_common.sh

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
NODES=${SLURM_JOB_NUM_NODES:-1}
PER_NODE=${SLURM_GPUS_ON_NODE:-8}
USE_MPI=0
INIT_FILE=""
while [ $# -gt 0 ]; do
    case "$1" in
        --nodes) NODES=${2:?--nodes needs a number}; shift 2 ;;
        --gpus-per-node) PER_NODE=${2:?--gpus-per-node needs a number}; shift 2 ;;
        --mpi) USE_MPI=1; shift ;;
        --init-file) INIT_FILE=${2:?--init-file needs a path}; shift 2 ;;
        --dry-run|--dry-run=*) if take_dry_run "$1" "${2:-}"; then shift; fi; shift ;;
        -h|--help) usage 0 ;;
        --) shift; TRAINER_ARGS+=("$@"); break ;;
        *) TRAINER_ARGS+=("$1"); shift ;;
    esac
done
positive_int --nodes "$NODES"
positive_int --gpus-per-node "$PER_NODE"
R=$((NODES * PER_NODE))
echo "$NODES node(s) × $PER_NODE GPU(s) = $R replicas, $([ $USE_MPI -eq 1 ] && echo "through MPI (PMIx)" || echo "without MPI (NCCL id through a shared file)")"
print_plan "$R"

read -r -a EXTRA <<< "${SRUN_ARGS:-}"
CMD=(srun --nodes "$NODES" --ntasks-per-node "$PER_NODE" --kill-on-bad-exit=1)
if [ "$USE_MPI" -eq 1 ]; then
    CMD+=(--mpi=pmix ${EXTRA[@]+"${EXTRA[@]}"} "$TRAIN_BIN" ${TRAINER_ARGS[@]+"${TRAINER_ARGS[@]}"})
else
    [ -n "$INIT_FILE" ] || INIT_FILE="$PWD/out/nccl_init.${SLURM_JOB_ID:-$(date +%s)}"
    [ "$DRY_RUN" -eq 1 ] || mkdir -p "$(dirname "$INIT_FILE")"
    CMD+=(--mpi=none ${EXTRA[@]+"${EXTRA[@]}"} "$TRAIN_BIN" ${TRAINER_ARGS[@]+"${TRAINER_ARGS[@]}"}
          --nccl-init-file "$INIT_FILE")
fi
if [ "$DRY_RUN" -eq 0 ]; then
    command -v srun > /dev/null || die "srun not found: run this on a Slurm cluster (or use run_node.sh / run_multinode.sh)"
fi
launch "${CMD[@]}"
