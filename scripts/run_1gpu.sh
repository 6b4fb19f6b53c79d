#!/usr/bin/env bash
# Trains on one GPU: no launcher, a single process.
#
#   scripts/run_1gpu.sh [--dry-run [0|1]] [TRAINER OPTIONS...]
#
#   --dry-run   print the batch arithmetic, the command and the trainer's plan; launch nothing
# Every other argument (and all after "--") goes to the trainer (./train_gpt --help), e.g.
#   scripts/run_1gpu.sh -b 8 -t 1024 -d 65536 -n 100
# Environment: TRAIN_BIN (default ./train_gpt).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/launch_common.sh

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run|--dry-run=*) if take_dry_run "$1" "${2:-}"; then shift; fi; shift ;;
        -h|--help) usage 0 ;;
        --) shift; TRAINER_ARGS+=("$@"); break ;;
        *) TRAINER_ARGS+=("$1"); shift ;;
    esac
done

print_plan 1
launch "$TRAIN_BIN" ${TRAINER_ARGS[@]+"${TRAINER_ARGS[@]}"}
