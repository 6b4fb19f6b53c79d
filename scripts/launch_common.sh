# scripts/launch_common.sh: what the GPU launchers (run_1gpu.sh, run_node.sh,
# run_multinode.sh, run_slurm.sh) share. Sourced, not run.
#
# A launcher parses its own options with take_option, leaves every other argument in
# TRAINER_ARGS for the trainer, prints the batch arithmetic with print_plan R, and hands
# the command line to launch, which prints it and runs it (or stops there with --dry-run).

TRAIN_BIN=${TRAIN_BIN:-./train_gpt}
DRY_RUN=0
TRAINER_ARGS=()

die() { echo "error: $*" >&2; exit 2; }

# 1234567 -> 1,234,567 (printf's %'d depends on the locale; this does not)
commas() {
    local n=$1 out=""
    while [ ${#n} -gt 3 ]; do out=",${n: -3}$out"; n=${n:0:${#n}-3}; done
    echo "$n$out"
}

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

# print_plan R: global batch = B × T × A × R, as the trainer will compute it; stops when the
# global batch is not a whole number of micro-batches.
print_plan() {
    local R=$1
    batch_from_args
    [ "$B" -ge 1 ] && [ "$T" -ge 1 ] || die "batch size and sequence length must be at least 1"
    local per_round=$((B * T * R))
    [ "$D" -eq 0 ] && D=$per_round
    if [ $((D % per_round)) -ne 0 ]; then
        local below=$((D / per_round * per_round))
        die "global batch $(commas "$D") tokens is not a multiple of B×T×R = ${B}×${T}×${R} = $(commas $per_round) tokens; nearest valid --total-batch: $(commas $below) or $(commas $((below + per_round)))"
    fi
    local A=$((D / per_round)) replicas="$R replicas"
    [ "$R" -eq 1 ] && replicas="1 replica"
    echo "micro-batch ${B}×${T} = $(commas $((B * T))) tokens × ${A} accumulation × ${replicas} = $(commas "$D") tokens per step"
}

# Prints a command so it can be pasted into a shell: quotes only what needs it.
show() {
    local a out=""
    for a in "$@"; do
        if [[ $a =~ ^[A-Za-z0-9_./=:,+@%-]+$ ]]; then out+="$a "; else out+="'${a//\'/\'\\\'\'}' "; fi
    done
    echo "${out% }"
}

# launch CMD...: prints the command, then runs it in place of this script (not with --dry-run).
launch() {
    echo "command: $(show "$@")"
    [ "$DRY_RUN" -eq 1 ] && exit 0
    [ -x "$TRAIN_BIN" ] || die "$TRAIN_BIN not found or not executable; build it first: make train_gpt (or set TRAIN_BIN)"
    exec "$@"
}

# --dry-run (optionally followed by 0 or 1) belongs to the launcher: it prints the batch
# arithmetic and the command, and runs nothing. (The trainer's own check, with the GPU's
# memory estimate, is --dry-run=1 after the launcher's options.)
# Usage in a launcher's option loop:  --dry-run) take_dry_run "${2:-}" && shift; shift ;;
take_dry_run() {
    if [ "$1" = 0 ] || [ "$1" = 1 ]; then DRY_RUN=$1; return 0; fi
    DRY_RUN=1
    return 1
}

positive_int() {  # NAME VALUE
    [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1 must be a positive integer, got '$2'"
}
