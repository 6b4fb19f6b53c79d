# scripts/launch_common.sh: what the GPU launchers (run_1gpu.sh, run_node.sh,
# run_multinode.sh, run_slurm.sh) share. Sourced, not run.
#
# A launcher parses its own options with take_option, leaves every other argument in
# TRAINER_ARGS for the trainer, prints the batch arithmetic with print_plan R, and hands
# the command line to launch, which prints it and runs it (or stops there with --dry-run).

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # die, positive_int, commas, batch_line, show

TRAIN_BIN=${TRAIN_BIN:-./train_gpt}
DRY_RUN=0
TRAINER_ARGS=()

# The micro-batch and global batch the trainer will use: its -b/--batch-size, -t/--seq-len
# and -d/--total-batch among TRAINER_ARGS (the last one wins, as in the trainer), with the
# trainer's defaults (host/cli.h) when absent. Sets B, T, D.
batch_from_args() {
    B=16 T=64 D=0
    local i=0 n=${#TRAINER_ARGS[@]} name value
    while [ "$i" -lt "$n" ]; do
        name=${TRAINER_ARGS[$i]}
        if [[ $name == --*=* ]]; then
            value=${name#*=} name=${name%%=*}
        elif [ "$name" = --dry-run ] && [[ ${TRAINER_ARGS[$((i + 1))]:--} == -* ]]; then
            value=1  # --dry-run alone, the one option that may go without its value
        else
            value=${TRAINER_ARGS[$((i + 1))]:-} i=$((i + 1))  # every trainer option takes a value
        fi
        case "$name" in
            -b|--batch-size) B=$value ;;
            -t|--seq-len) T=$value ;;
            -d|--total-batch) D=$value ;;
        esac
        i=$((i + 1))
    done
    for v in B T D; do
        [[ ${!v} =~ ^[0-9]+$ ]] || die "the trainer's ${v} must be a non-negative integer, got '${!v}'"
    done
}

# print_plan R: the batch arithmetic of TRAINER_ARGS with R replicas; stops when the global
# batch is not a whole number of micro-batches.
print_plan() {
    PLAN_R=$1
    batch_from_args
    [ "$B" -ge 1 ] && [ "$T" -ge 1 ] || die "batch size and sequence length must be at least 1"
    batch_line "$B" "$T" "$D" "$1"
}

# launch CMD...: prints the command, then runs it in place of this script; with --dry-run,
# prints the trainer's plan for the replicas of print_plan instead.
launch() {
    echo "command: $(show "$@")"
    if [ "$DRY_RUN" -eq 1 ]; then
        trainer_plan "$PLAN_R" "$TRAIN_BIN" ${TRAINER_ARGS[@]+"${TRAINER_ARGS[@]}"}
        exit 0
    fi
    [ -x "$TRAIN_BIN" ] || die "$TRAIN_BIN not found or not executable; build it first: make train_gpt (or set TRAIN_BIN)"
    exec "$@"
}
