# scripts/common.sh: helpers that every launcher and run recipe uses. Sourced, not run.
# Numbers are printed with thousands separators (commas), as the trainer prints them.

die() { echo "error: $*" >&2; exit 2; }

positive_int() {  # NAME VALUE
    [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1 must be a positive integer, got '$2'"
}

# 1234567 -> 1,234,567 (printf's %'d depends on the locale; this does not)
commas() {
    local n=$1 out=""
    while [ ${#n} -gt 3 ]; do out=",${n: -3}$out"; n=${n:0:${#n}-3}; done
    echo "$n$out"
}

# batch_line B T D R [STEPS]: prints global batch = micro-batch B×T × accumulation A ×
# replicas R, as the trainer computes it (D = 0 means one micro-batch per replica), and
# with STEPS the tokens of the whole run. Stops when D is not a whole number of rounds
# of B×T×R tokens, naming the nearest valid values.
batch_line() {
    local B=$1 T=$2 D=$3 R=$4 steps=${5:-}
    local per_round=$((B * T * R))
    [ "$D" -eq 0 ] && D=$per_round
    if [ $((D % per_round)) -ne 0 ]; then
        local below=$((D / per_round * per_round))
        die "global batch $(commas "$D") tokens is not a multiple of B×T×R = ${B}×${T}×${R} = $(commas $per_round) tokens; nearest valid global batch: $(commas $below) or $(commas $((below + per_round)))"
    fi
    local replicas="$R replicas" run=""
    [ "$R" -eq 1 ] && replicas="1 replica"
    if [ -n "$steps" ]; then
        local total=$((D * steps))
        run="; $(commas "$steps") steps = $(commas $total) tokens"
        [ "$total" -ge 1000000000 ] && run+=" ($(awk -v n="$total" 'BEGIN { printf "%.2fB", n / 1e9 }'))"
    fi
    echo "micro-batch ${B}×${T} = $(commas $((B * T))) tokens × $((D / per_round)) accumulation × ${replicas} = $(commas "$D") tokens per step$run"
}

# steps_from_tokens TOKENS PER_STEP: sets STEPS to TOKENS / PER_STEP, rounded down, and prints
# the division as the trainer's --train-tokens does.
steps_from_tokens() {
    local tokens=$1 per_step=$2
    STEPS=$((tokens / per_step))
    [ "$STEPS" -ge 1 ] || die "$(commas "$tokens") tokens is less than one step of $(commas "$per_step") tokens"
    local dropped=$((tokens - STEPS * per_step)) rest=" exactly"
    [ "$dropped" -gt 0 ] && rest=" (rounding down leaves out the last $(commas $dropped) tokens)"
    echo "steps from --train-tokens: $(commas "$tokens") tokens / $(commas "$per_step") tokens per step = $(commas "$STEPS") steps$rest"
}

# --dry-run, spelt as the trainers spell it: "--dry-run 1", "--dry-run 0", "--dry-run=1", or
# "--dry-run" alone (last, or before another option: = 1). It prints the batch arithmetic, the command and the trainer's plan
# for all the replicas, and launches nothing. take_dry_run ARG NEXT sets DRY_RUN, and is true
# when NEXT was its value. In an option loop:
#   --dry-run|--dry-run=*) if take_dry_run "$1" "${2:-}"; then shift; fi; shift ;;
take_dry_run() {
    case "$1" in
        --dry-run=0 | --dry-run=1) DRY_RUN=${1#--dry-run=}; return 1 ;;
        --dry-run=*) die "--dry-run expects 0 or 1, got '${1#--dry-run=}'" ;;
    esac
    if [ -z "${2:-}" ] || [[ $2 == -* ]]; then DRY_RUN=1; return 1; fi
    [ "$2" = 0 ] || [ "$2" = 1 ] || die "--dry-run expects 0 or 1, got '$2'"
    DRY_RUN=$2
    return 0
}

# trainer_plan R BIN ARGS...: for a launcher's --dry-run, the trainer's own plan for R
# replicas (memory, FLOPs, communication, and time with --device), printed by one process:
# BIN ARGS --dry-run 1 --replicas R. Stops with the trainer's status if it rejects the run.
# Without ./train_gpt, ./train_gpt_cpu (the same source on the CPU runtime, which needs the CUDA
# toolkit's headers but no GPU) plans instead, the same memory, FLOPs and time; where it is not
# built either, it is built first (once, a few minutes), so that a learner without a GPU who ran
# only `make train` sees the plan too.
trainer_plan() {
    local R=$1 bin=$2
    shift 2
    if [ ! -x "$bin" ] && [ "$bin" = ./train_gpt ]; then
        if [ ! -x ./train_gpt_cpu ] && [ -f Makefile ]; then
            echo "plan: ./train_gpt is not built; building ./train_gpt_cpu (the GPU trainer's source on the CPU runtime, no GPU needed; a few minutes, once) to plan with it"
            make -s train_gpt_cpu >/tmp/train_gpt_cpu_build.$$.log 2>&1 ||
                echo "plan: make train_gpt_cpu failed (the last lines of its output below; it needs the CUDA toolkit's headers)"$'\n'"$(tail -3 /tmp/train_gpt_cpu_build.$$.log)"
            rm -f /tmp/train_gpt_cpu_build.$$.log
        fi
        if [ -x ./train_gpt_cpu ]; then
            echo "plan: ./train_gpt is not built; ./train_gpt_cpu (the same source on the CPU runtime) plans instead"
            bin=./train_gpt_cpu
        fi
    fi
    if [ ! -x "$bin" ]; then
        echo "plan: $bin is not built, so only the batch arithmetic above (build it, or make train_gpt_cpu, for memory, FLOPs and time)"
        return 0
    fi
    echo "plan ($(show "$bin") ... --dry-run 1 --replicas $R):"
    # a single process, even inside a batch job whose variables would make it one rank of many
    env -u SLURM_PROCID -u SLURM_LOCALID -u SLURM_NTASKS -u SLURM_STEP_NUM_TASKS -u OMPI_COMM_WORLD_SIZE \
        "$bin" "$@" --dry-run 1 --replicas "$R" | sed 's/^/  /'
}

# True when nvidia-smi lists a GPU: train_gpt can run only then (it may be built without one).
gpu_visible() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }

# Prints a command so it can be pasted into a shell: quotes only what needs it.
show() {
    local a out=""
    for a in "$@"; do
        if [[ $a =~ ^[A-Za-z0-9_./=:,+@%-]+$ ]]; then out+="$a "; else out+="'${a//\'/\'\\\'\'}' "; fi
    done
    echo "${out% }"
}
