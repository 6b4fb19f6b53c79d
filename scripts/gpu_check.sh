#!/usr/bin/env bash
# What a machine with a GPU should check, in one command that fits when the GPU is only there for
# a few minutes (one rented for a quarter of an hour, a slot on a shared node): at most 8 minutes
# on a 16-core H100/H200 machine, builds included (the default stages' caps add up to 520 s),
# and never more than its budget (540 s). The most valuable figures come first:
#   build        bf16 train_gpt, train, test/gpu_trainer/trainer and test/gpu_trainer/flash_attention (make -j),
#                and beside them llm.c with and without cuDNN (its sources' build.sh: see below)
#   bench        the whole step at GPT-2 124M, B=64, T=1024, bf16, on each attention path (fused,
#                cublas, and auto: which one it picks), then llm.c's train_gpt2cu on the same
#                shape, with cuDNN and without (scripts/bench_gpu.sh)
#   llama        the step at Llama-3.2 1B's shape, B=8, T=1024, bf16, fused attention (grouped
#                K/V heads): ms/step, tokens/s, MFU (scripts/bench_gpu.sh --model llama3)
#   test_gpu     test/gpu_trainer/trainer, bf16
#   flash        test/gpu_trainer/flash_attention, bf16
# and only with --full (longer than a short session; budget 1800 s):
#   default_run  300 steps of the default model against ./train (scripts/compare_default_run.sh)
#   fp32         the GPU tests in fp32 (leaves ./train_gpt built fp32: make train_gpt restores bf16)
#   workbenches  the dev/cuda kernel workbenches, bf16 and fp32
# Each stage runs under its own time limit: its cap, or what the budget has left if that is less
# (one that cannot get its minimum is skipped, saying so). A stage that fails or runs out is
# reported ("timed out after N s") and the next one still runs. The summary (summary.md: GPU,
# driver, nvcc, commit; each stage's status and wall time; ms/step and tokens/s per attention
# path, what auto picked, llm.c's tokens/s with cuDNN and without, ours/llm.c, test counts) is
# rewritten after every stage, so a run killed from outside still leaves its table.
#
#   scripts/gpu_check.sh [--full] [--budget S] [--batch B] [--steps N] [--out DIR] [--plan] [--help]
#
#   --plan      prints each stage's commands and time limit and where the results would go,
#               runs nothing (no GPU or nvcc needed): read it before the GPU is yours
#   --full      adds the stages above that a short session has no time for
#   --budget S  the whole check's seconds (default 540; 1800 with --full): a little less than
#               the time the GPU is yours, so that the results are written before it goes
#   --batch B   the benchmark's micro-batch (default 64); --steps N: steps per run (default 10)
#   --out DIR   where the results go (default out/gpu_check/): DIR/summary.md, and every log
#               packed in DIR/logs.tar.gz, both rewritten after every stage. Two files, so that
#               copying them off a machine that is going away is one command; the logs
#               themselves are written in a temporary folder whose name it prints.
#
# Exit status: 0 every stage that ran passed, 1 one failed or timed out, 2 bad usage, 77 no GPU
# here (nvidia-smi missing or failing): then it says so in one line and builds nothing.
# Found where they are: nvcc (PATH, CUDA_HOME, /usr/local/cuda); NCCL (CUDA's, the system's,
# NCCL_HOME, the nvidia-nccl wheel); doctest.h (DOCTEST_INC, /usr/include, or .deps/include:
# a copy brought along; without it the tests are skipped); llm.c's sources for the side-by-side
# (a folder with llm.c's checkout and its build.sh: LLMC_PEER, else shared/peers/llmc-gpu inside
# this checkout), or LLMC_DIR, an llm.c already built, timed instead. GIT_COMMIT names the commit
# where the copy has no .git.
set -uo pipefail

# ---- the stages: cap and minimum, in seconds. The default ones' caps add up to 8 minutes, less
# than the default budget: each gets its whole cap, and the budget's last minute is for the
# probe, the summary and stragglers. (The build's cap covers test/gpu_trainer/trainer, the longest
# compile; if it runs out, whatever was built by then is still used.)
DEFAULT_STAGES=(build bench llama test_gpu flash)
FULL_STAGES=(default_run fp32 workbenches)
declare -A CAP=([build]=200 [bench]=140 [llama]=40 [test_gpu]=100 [flash]=40 [default_run]=240 [fp32]=480 [workbenches]=420)
declare -A MIN=([build]=60 [bench]=40 [llama]=20 [test_gpu]=30 [flash]=15 [default_run]=60 [fp32]=120 [workbenches]=60)
RESERVE=10                 # seconds kept for the last summary and the archive
WORKBENCHES="layernorm attention_softmax attention_fused crossentropy gelu encoder_backward adamw"
LLMC_BUILD=build/llmc-gpu  # where build.sh puts llm.c: cudnn/ and nocudnn/ (ignored by git)
DEFAULT_OUT=out/gpu_check  # --out's default (out/ is ignored by git)
LLMC_PLACES="LLMC_PEER, shared/peers/llmc-gpu"  # where llm.c's sources are looked for, in words

usage() {
    sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
    echo
    echo "Stages and their caps (the time limit is the cap, or less where the budget has less left):"
    local s
    for s in "${DEFAULT_STAGES[@]}" "${FULL_STAGES[@]}"; do
        printf "  %-12s %4d s%s\n" "$s" "${CAP[$s]}" "$(is_full_stage "$s" && echo "   (--full)")"
    done
}
is_full_stage() { [[ " ${FULL_STAGES[*]} " == *" $1 "* ]]; }

# ---- options
parse_args() {
    FULL=0 PLAN=0 BUDGET="" BATCH=64 STEPS=10 RESULTS=$DEFAULT_OUT
    while [ $# -gt 0 ]; do
        case "$1" in
            --full) FULL=1 ;;
            --plan) PLAN=1 ;;
            --budget|--batch|--steps)
                [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_check: $1 takes a positive whole number (see --help)" >&2; exit 2; }
                case "$1" in --budget) BUDGET=$2 ;; --batch) BATCH=$2 ;; --steps) STEPS=$2 ;; esac
                shift ;;
            --out)
                [ -n "${2:-}" ] && [[ "$2" != -* ]] || { echo "gpu_check: --out takes a folder for the results (see --help)" >&2; exit 2; }
                [ ! -e "$2" ] || [ -d "$2" ] || { echo "gpu_check: --out $2: that is a file, not a folder" >&2; exit 2; }
                RESULTS=${2%/}; [[ "$RESULTS" == /* ]] || RESULTS=$PWD/$RESULTS  # main works from the checkout
                shift ;;
            -h|--help) usage; exit 0 ;;
            *) echo "gpu_check: unknown option '$1' (see --help)" >&2; exit 2 ;;
        esac
        shift
    done
    STAGES=("${DEFAULT_STAGES[@]}")
    [ "$FULL" -eq 1 ] && STAGES+=("${FULL_STAGES[@]}")
    [ -n "$BUDGET" ] || BUDGET=$([ "$FULL" -eq 1 ] && echo 1800 || echo 540)
}

# ---- tools: nvcc, NCCL, doctest, llm.c's sources. Only looks; builds nothing.
find_tools() {
    NVCC=$(command -v nvcc || true)
    local d
    for d in ${CUDA_HOME:-} /usr/local/cuda /opt/cuda; do
        [ -z "$NVCC" ] && [ -x "$d/bin/nvcc" ] && NVCC=$d/bin/nvcc
    done
    [ -n "$NVCC" ] && PATH="$(dirname "$NVCC"):$PATH"
    MAKE_VARS=()
    # the nvidia-nccl wheel (PyTorch's environment) where CUDA and the system have no nccl.h
    if [ -n "$NVCC" ] && [ -z "${NCCL_HOME:-}" ] && [ ! -f "$(dirname "$NVCC")/../include/nccl.h" ] && [ ! -f /usr/include/nccl.h ]; then
        local header
        header=$(find /opt /usr/local/lib /usr/lib/python3* -name nccl.h -path '*nvidia*/include/*' 2>/dev/null | head -1)
        [ -n "$header" ] && NCCL_HOME=$(dirname "$(dirname "$header")")
    fi
    [ -n "${NCCL_HOME:-}" ] && MAKE_VARS+=("NCCL_HOME=$NCCL_HOME")
    DOCTEST=""
    for d in ${DOCTEST_INC:-} /usr/include /usr/local/include .deps/include; do
        if [ -f "$d/doctest/doctest.h" ]; then DOCTEST=$d; MAKE_VARS+=("DOCTEST_INC=$d"); break; fi
    done
    LLMC_SRC=""
    for d in ${LLMC_PEER:-} shared/peers/llmc-gpu; do
        if [ -f "$d/build.sh" ]; then LLMC_SRC=$d; break; fi
    done
}

# llmc_dirs: the llm.c builds the benchmark times (LLMC_DIR, else build.sh's two)
llmc_dirs() {
    if [ -n "${LLMC_DIR:-}" ]; then echo "$LLMC_DIR"; else echo "$LLMC_BUILD/cudnn $LLMC_BUILD/nocudnn"; fi
}
our_targets() {  # what the build stage makes: the tests only where doctest.h is
    echo "train_gpt${DOCTEST:+ train test/gpu_trainer/trainer test/gpu_trainer/flash_attention}"
}
make_cmd() { echo "make -j$(nproc 2>/dev/null || echo 4) -k PRECISION=${1:-bf16} ${MAKE_VARS[*]}"; }
llama_cmd() {
    echo "bash scripts/bench_gpu.sh --model llama3 --precisions bf16 --trainer ./train_gpt --batch 8 --steps $STEPS" \
         "--attention fused --no-kernels"
}
bench_cmd() {  # $1: the llm.c builds to time
    echo "bash scripts/bench_gpu.sh --precisions bf16 --trainer ./train_gpt --batch $BATCH --steps $STEPS" \
         "--attention 'fused cublas auto' --no-kernels --llmc '$1'"
}

# describe STAGE: what it runs, in words and commands (for --plan)
describe() {
    case "$1" in
        build)
            echo "$(make_cmd) $(our_targets)"
            [ -n "$DOCTEST" ] || echo "(doctest.h not found: the tests are not built; see --help)"
            if [ -n "${LLMC_DIR:-}" ]; then echo "llm.c: LLMC_DIR=$LLMC_DIR, already built"
            elif [ -n "$LLMC_SRC" ]; then echo "beside it: bash $LLMC_SRC/build.sh $LLMC_BUILD"
            else echo "llm.c: its sources are not here ($LLMC_PLACES)"; fi ;;
        bench) bench_cmd "$(llmc_dirs)" ;;
        llama) llama_cmd ;;
        test_gpu) echo "./test/gpu_trainer/trainer" ;;
        flash) echo "./test/gpu_trainer/flash_attention" ;;
        default_run) echo "scripts/compare_default_run.sh ./train_gpt" ;;
        fp32) echo "$(make_cmd fp32) train_gpt test/gpu_trainer/trainer test/gpu_trainer/flash_attention;" \
                   "./test/gpu_trainer/trainer; ./test/gpu_trainer/flash_attention" ;;
        workbenches) echo "make -C dev/cuda PRECISION=bf16, then fp32; each of: $WORKBENCHES" ;;
    esac
}

print_plan() {
    echo "gpu_check plan ($([ "$FULL" -eq 1 ] && echo "--full" || echo "default")): budget $BUDGET s," \
         "$RESERVE s of it kept for the summary; nothing is run"
    local s left=$((BUDGET - RESERVE)) limit
    for s in "${STAGES[@]}"; do
        # the most each can get: its cap, or what the caps before it leave
        limit=$(( CAP[$s] < left ? CAP[$s] : left ))
        if [ "$limit" -lt "${MIN[$s]}" ]; then
            printf "%-12s skipped: %d s of the budget left, it needs %d s\n" "$s" "$limit" "${MIN[$s]}"
        else
            printf "%-12s time limit %d s\n" "$s" "$limit"
            describe "$s" | sed 's/^/    /'
        fi
        left=$((left - limit))
    done
    [ "$FULL" -eq 1 ] || echo "(with --full: ${FULL_STAGES[*]})"
    echo "results: $(results_text)"
}
results_text() { echo "$RESULTS/summary.md and $RESULTS/logs.tar.gz${LOGS:+ (the logs written in $LOGS/)}"; }

# ---- the stages. Each writes its details to logs in $LOGS and a few lines to its own log;
# exit status 0 ok, 77 skipped (its last line says why), anything else failed.
stage_build() {
    local llmc_pid="" rc=0 t
    if [ -n "${LLMC_DIR:-}" ]; then
        echo "llm.c: LLMC_DIR=$LLMC_DIR (not built here)"
    elif [ -n "$LLMC_SRC" ]; then
        echo "llm.c: bash $LLMC_SRC/build.sh $LLMC_BUILD (log: build_llmc.log)"
        bash "$LLMC_SRC/build.sh" "$LLMC_BUILD" > "$LOGS/build_llmc.log" 2>&1 &
        llmc_pid=$!
    else
        echo "llm.c: not built: its sources are not here ($LLMC_PLACES)"
    fi
    [ -n "$DOCTEST" ] || echo "tests: not built: doctest.h not found (DOCTEST_INC, /usr/include, .deps/include)"
    echo "ours: $(make_cmd) $(our_targets) (log: build_ours.log)"
    $(make_cmd) $(our_targets) > "$LOGS/build_ours.log" 2>&1
    for t in $(our_targets); do  # make -q: up to date, so built
        if $(make_cmd) -q "$t" 2>/dev/null; then echo "built: $t"; else echo "NOT BUILT: $t"; rc=1; fi
    done
    [ "$rc" -eq 0 ] || tail -n 30 "$LOGS/build_ours.log"
    if [ -n "$llmc_pid" ]; then
        wait "$llmc_pid"
        grep '^llmc-gpu: ' "$LOGS/build_llmc.log"
        cp "$LLMC_BUILD"/cudnn/build.log "$LOGS/build_llmc_cudnn.log" 2>/dev/null
        cp "$LLMC_BUILD"/nocudnn/build.log "$LOGS/build_llmc_nocudnn.log" 2>/dev/null
        grep -q '^llmc-gpu: .*failed' "$LOGS/build_llmc.log" && rc=1
    fi
    return $rc
}

stage_bench() {
    local dirs="" d
    for d in $(llmc_dirs); do [ -x "$d/train_gpt2cu" ] && dirs+="${dirs:+ }$d"; done
    if [ ! -x ./train_gpt ] && [ -z "$dirs" ]; then echo "skipped: neither ./train_gpt nor llm.c was built"; return 77; fi
    echo "$(bench_cmd "$dirs")"
    eval "$(bench_cmd "$dirs")"
}

stage_llama() {
    [ -x ./train_gpt ] || { echo "skipped: ./train_gpt was not built"; return 77; }
    echo "$(llama_cmd)"
    eval "$(llama_cmd)"
}

# run_test BINARY LOG: a doctest program; exit 77 from it (no GPU) is a skip
run_test() {
    [ -n "$DOCTEST" ] || { echo "skipped: doctest.h not found (DOCTEST_INC, or a copy in .deps/include/doctest/)"; return 77; }
    [ -x "$1" ] || { echo "skipped: $1 was not built"; return 77; }
    echo "$1 (log: $2)"
    "$1" > "$LOGS/$2" 2>&1
    local rc=$?
    grep -a '\[doctest\] test cases:' "$LOGS/$2"
    [ "$rc" -eq 77 ] && echo "skipped: $1 found no GPU"
    return $rc
}
stage_test_gpu() { run_test ./test/gpu_trainer/trainer test_gpu.log; }
stage_flash() { run_test ./test/gpu_trainer/flash_attention flash.log; }

stage_default_run() {
    [ -x ./train_gpt ] && [ -x ./train ] || { echo "skipped: ./train_gpt or ./train was not built"; return 77; }
    scripts/compare_default_run.sh ./train_gpt
}

stage_fp32() {
    [ -n "$DOCTEST" ] || { echo "skipped: doctest.h not found"; return 77; }
    echo "$(make_cmd fp32) train_gpt test/gpu_trainer/trainer test/gpu_trainer/flash_attention (log: build_fp32.log)"
    $(make_cmd fp32) train_gpt test/gpu_trainer/trainer test/gpu_trainer/flash_attention > "$LOGS/build_fp32.log" 2>&1 ||
        { tail -n 30 "$LOGS/build_fp32.log"; return 1; }
    echo "./train_gpt is now the fp32 build (make train_gpt rebuilds bf16)"
    local rc=0
    run_test ./test/gpu_trainer/trainer test_gpu_fp32.log || rc=1
    run_test ./test/gpu_trainer/flash_attention flash_fp32.log || rc=1
    return $rc
}

stage_workbenches() {
    local p w rc=0
    for p in bf16 fp32; do
        echo "make -C dev/cuda PRECISION=$p (log: build_dev_cuda_$p.log)"
        if ! make -C dev/cuda -j"$(nproc 2>/dev/null || echo 4)" PRECISION=$p ${MAKE_VARS[@]+"${MAKE_VARS[@]}"} > "$LOGS/build_dev_cuda_$p.log" 2>&1; then
            echo "workbenches $p: NOT BUILT"; rc=1; continue
        fi
        for w in $WORKBENCHES; do
            if ./dev/cuda/$w >> "$LOGS/dev_cuda_$p.log" 2>&1; then echo "workbench $p $w: ok"
            else echo "workbench $p $w: FAILED"; rc=1; fi
        done
    done
    return $rc
}

# ---- running a stage under its limit
# run_limited LIMIT LOG COMMAND...: runs COMMAND (a function of this script) in a process group
# of its own, output to LOG and the terminal, and ends the whole group (make, nvcc, trainers)
# at LIMIT seconds. Returns its exit status, or 124 when the limit ended it.
JOB="" WATCHDOG=""
run_limited() {
    local limit=$1 log=$2; shift 2
    local flag; flag=$(mktemp)
    set -m  # job control: each background job gets its own process group, so one kill ends it all
    ( "$@" 2>&1 | tee "$log"; exit "${PIPESTATUS[0]}" ) < /dev/null &
    JOB=$!
    ( sleep "$limit"; echo timeout > "$flag"; kill -TERM -- -"$JOB" 2>/dev/null
      sleep 5; kill -KILL -- -"$JOB" 2>/dev/null ) &
    WATCHDOG=$!
    set +m
    wait "$JOB"
    local rc=$?
    kill -KILL -- -"$JOB" 2>/dev/null       # whatever of it outlived its top process
    kill -TERM -- -"$WATCHDOG" 2>/dev/null  # its sleep too
    wait "$WATCHDOG" 2>/dev/null
    JOB="" WATCHDOG=""
    [ -s "$flag" ] && rc=124
    rm -f "$flag"
    return $rc
}
# stopped from outside (Ctrl-C, a TERM): the stage's process group is not ours, so end it too,
# and say in the table where the check stopped
on_signal() {
    [ -n "$WATCHDOG" ] && kill -TERM -- -"$WATCHDOG" 2>/dev/null
    [ -n "$JOB" ] && kill -TERM -- -"$JOB" 2>/dev/null
    [ -n "${STAGE:-}" ] && record "$STAGE" "stopped from outside after $((SECONDS - STAGE_START)) s" \
        $((SECONDS - STAGE_START)) "$STAGE_LIMIT"
    exit 143
}

# run_stage NAME: its limit from the cap and the budget left, then the stage, recorded in
# $LOGS/stages.tsv (name, status, wall seconds, limit) and the summary rewritten
run_stage() {
    local name=$1 left limit
    left=$((BUDGET - RESERVE - (SECONDS - START)))
    limit=$(( CAP[$name] < left ? CAP[$name] : left ))
    if [ "$limit" -lt "${MIN[$name]}" ]; then
        echo "==== $name: skipped: $((left > 0 ? left : 0)) s of the budget left, it needs ${MIN[$name]} s"
        record "$name" "skipped: $((left > 0 ? left : 0)) s of the budget left, it needs ${MIN[$name]} s" 0 "$limit"
        return
    fi
    echo "==== $name: time limit $limit s"
    local start=$SECONDS rc status
    STAGE=$name STAGE_START=$SECONDS STAGE_LIMIT=$limit
    record "$name" "was running when the check stopped" "-" "$limit"  # replaced when it ends
    run_limited "$limit" "$LOGS/stage_$name.log" "stage_$name"
    rc=$?
    STAGE=""
    case $rc in
        0) status=ok ;;
        124) status="timed out after $limit s" ;;
        77) status="skipped: $(grep -a '^skipped: ' "$LOGS/stage_$name.log" | tail -1 | sed 's/^skipped: //')" ;;
        *) status="failed (exit status $rc)" ;;
    esac
    echo "==== $name: $status, $((SECONDS - start)) s"
    record "$name" "$status" $((SECONDS - start)) "$limit"
}
record() {
    printf "%s\t%s\t%s\t%s\n" "$@" >> "$LOGS/stages.tsv"
    write_summary > "$RESULTS/summary.md.part" && mv -f "$RESULTS/summary.md.part" "$RESULTS/summary.md"
    pack_logs
}
pack_logs() {  # every log in one archive beside the summary, replaced whole
    tar -czf "$RESULTS/logs.tar.gz.part" -C "$(dirname "$LOGS")" "$(basename "$LOGS")" && mv -f "$RESULTS/logs.tar.gz.part" "$RESULTS/logs.tar.gz"
}

# ---- reading the logs (the summary is made from them alone, so a partial log gives a partial table)
strip_colour() { sed -E 's/\x1b\[[0-9;]*m//g' "$@"; }
# test_counts LOG: "N passed, M failed, K skipped" from doctest's last summary line
test_counts() {
    [ -f "$1" ] || return 0
    strip_colour "$1" | grep -a '\[doctest\] test cases:' | tail -1 |
        sed -E 's/.*test cases: *[0-9]+ *\| *([0-9]+) passed *\| *([0-9]+) failed *\|? *(([0-9]+) skipped)?.*/\1 passed, \2 failed, \4 skipped/; s/, +skipped$//'
}
# bench_row LOG ATTENTION: "ms tokens/s MFU memory" from bench_gpu.sh's bf16 row whose attention
# cell starts with ATTENTION ("auto" matches "auto: fused"); nothing when there is none
bench_row() {
    [ -f "$1" ] || return 0
    awk -F'|' -v a="$2" '
        function trim(s) { gsub(/^ +| +$/, "", s); return s }
        trim($2) == "bf16" && index(trim($3), a) == 1 {
            mem = trim($8); sub(/ MiB$/, "", mem)
            print trim($5), trim($6), trim($7), mem; exit }' "$1"
}
# auto_pick LOG: the path auto chose, and the trainer's line with both per-layer times
auto_pick() { [ -f "$1" ] && grep -a '^auto, bf16' "$1" | head -1 | sed -E 's/^auto, bf16, B=[0-9]+: attention: //'; }
# llmc_figures LOG NAME: "ms tokens/s" of the llm.c build labelled NAME (its directory's name)
llmc_figures() {
    [ -f "$1" ] && grep -a "^llm.c \[$2\] train_gpt2cu" "$1" | head -1 |
        sed -E 's/.*: ([0-9.]+) ms\/step, ([0-9]+) tokens\/s.*/\1 \2/'
}
llmc_label() { case "$1" in cudnn) echo "llm.c, cuDNN attention" ;; nocudnn) echo "llm.c, its own attention" ;; *) echo "llm.c ($1)" ;; esac; }
# stage_notes NAME: the figures of a stage's row in the table
stage_notes() {
    case "$1" in
        build)
            [ -f "$LOGS/stage_build.log" ] || return 0
            local not; not=$(grep -a '^NOT BUILT: ' "$LOGS/stage_build.log" | sed 's/^NOT BUILT: //' | paste -sd, | sed 's/,/, /g')
            if [ -n "$not" ]; then echo -n "ours: NOT built: $not"
            elif grep -aq '^built: ' "$LOGS/stage_build.log"; then echo -n "ours: all built"
            else echo -n "ours: unfinished (build_ours.log)"; fi
            grep -aq '^tests: not built' "$LOGS/stage_build.log" && echo -n " (no doctest.h: no tests)"
            local llmc; llmc=$(grep -aE '^llmc-gpu: (built|the|no cuDNN|nvidia-smi)|^llm.c: (not|LLMC_DIR)' "$LOGS/stage_build.log" |
                sed -E 's/^llmc-gpu: built .*\/(cudnn|nocudnn)\/train_gpt2cu.*/\1 built/; s/^llmc-gpu: the build without cuDNN failed.*/nocudnn FAILED/;
                        s/^llmc-gpu: the cuDNN build failed.*/cudnn FAILED/; s/^llmc-gpu: no cuDNN found.*/no cuDNN here/;
                        s/^llmc-gpu: nvidia-smi finds no GPU.*/build.sh found no GPU/; s/^llm.c: //' |
                tr '\n' ';' | sed 's/;$//; s/;/, /g')
            echo "; llm.c: ${llmc:-no result (build_llmc.log)}" ;;
        bench)
            local f; f=$(auto_pick "$LOGS/stage_bench.log")
            [ -n "$f" ] && echo -n "auto picked ${f##*: }; "
            echo "the figures are in the table below" ;;
        llama)
            local f ms tps mfu mem; f=$(bench_row "$LOGS/stage_llama.log" fused)
            [ -n "$f" ] || { echo "no figure (stage_llama.log)"; return 0; }
            read -r ms tps mfu mem <<< "$f"
            [ "$ms" = "-" ] && echo "does not fit" || echo "$ms ms/step, $tps tokens/s, MFU $mfu, $mem MiB" ;;
        test_gpu) test_counts "$LOGS/test_gpu.log" ;;
        flash) test_counts "$LOGS/flash.log" ;;
        default_run) [ -f "$LOGS/stage_default_run.log" ] && grep -ao 'relative difference [^ ]*' "$LOGS/stage_default_run.log" | tail -1 ;;
        fp32) echo "test_gpu: $(test_counts "$LOGS/test_gpu_fp32.log"); flash: $(test_counts "$LOGS/flash_fp32.log")" ;;
        workbenches) [ -f "$LOGS/stage_workbenches.log" ] && echo "$(grep -ac ': ok$' "$LOGS/stage_workbenches.log") ok, $(grep -ac 'FAILED\|NOT BUILT' "$LOGS/stage_workbenches.log") failed" ;;
    esac
}
llmc_names() { local d; for d in $(llmc_dirs); do basename "$d"; done; }

# write_summary: the whole table, from $LOGS/stages.tsv and the logs (INFO_* from collect_info)
write_summary() {
    echo "# GPU check"
    echo
    echo "- GPU: ${INFO_GPU:-?}; driver ${INFO_DRIVER:-?}"
    echo "- nvcc: ${INFO_NVCC:-not found}"
    echo "- commit: ${INFO_COMMIT:-?}"
    echo "- $([ "$FULL" -eq 1 ] && echo "--full" || echo "default run"), budget $BUDGET s; benchmark: GPT-2 124M," \
         "B=$BATCH, T=1024, bf16, $STEPS steps per run, times the mean of steps 2..$STEPS"
    echo
    echo "| stage | time limit | status | wall | figures |"
    echo "|---|---|---|---|---|"
    local s line status wall limit
    for s in "${DEFAULT_STAGES[@]}" "${FULL_STAGES[@]}"; do
        line=$(awk -F'\t' -v s="$s" '$1 == s' "$LOGS/stages.tsv" 2>/dev/null | tail -1)
        if [ -n "$line" ]; then
            IFS=$'\t' read -r _ status wall limit <<< "$line"
            echo "| $s | $limit s | $status | ${wall/#-/} s | $(stage_notes "$s") |"
        elif [[ " ${STAGES[*]} " == *" $s "* ]]; then echo "| $s | | not reached | | |"
        else echo "| $s | | not run (--full only) | | |"; fi
    done
    echo
    bench_table
}
# bench_table: ms/step and tokens/s of each of our paths and of each llm.c build, with ratios
bench_table() {
    local log=$LOGS/stage_bench.log names n a f ms tps mfu mem
    names=$(llmc_names)
    echo "## The step: GPT-2 124M, B=$BATCH, T=1024, bf16"
    echo
    local head="| run | ms/step | tokens/s | MFU | peak memory |" rule="|---|---|---|---|---|"
    for n in $names; do head+=" ours / $(llmc_label "$n") |"; rule+="---|"; done
    echo "$head"; echo "$rule"
    declare -A llmc_tps
    for n in $names; do f=$(llmc_figures "$log" "$n"); llmc_tps[$n]=${f#* }; done
    for a in fused cublas auto; do
        f=$(bench_row "$log" "$a")
        local label="ours, --attention $a"
        [ "$a" = auto ] && [ -n "$(auto_pick "$log")" ] && label+=" (picked $(auto_pick "$log" | sed 's/.*: //'))"
        if [ -z "$f" ]; then echo "| $label | no figure (stage_bench.log) | | | |$(for n in $names; do echo -n " |"; done)"; continue; fi
        read -r ms tps mfu mem <<< "$f"
        [ "$ms" = "-" ] && mem="does not fit" || mem+=" MiB"
        echo -n "| $label | $ms | $tps | $mfu | $mem |"
        for n in $names; do
            if [ -n "${llmc_tps[$n]}" ] && [ "$tps" != "-" ] && [ -n "$tps" ]; then
                echo -n " $(awk -v a="$tps" -v b="${llmc_tps[$n]}" 'BEGIN { printf "%.2f", a / b }') |"
            else echo -n " |"; fi
        done
        echo
    done
    for n in $names; do
        f=$(llmc_figures "$log" "$n")
        if [ -n "$f" ]; then echo "| $(llmc_label "$n") | ${f% *} | ${f#* } | | |$(for _ in $names; do echo -n " |"; done)"
        else echo "| $(llmc_label "$n") | no figure (not built, or see stage_bench.log) | | | |$(for _ in $names; do echo -n " |"; done)"; fi
    done
    f=$(auto_pick "$log")
    [ -n "$f" ] && { echo; echo "auto timed one layer's attention: $f"; }
    return 0
}

# ---- the machine
gpu_present() { timeout 30 nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }
collect_info() {
    INFO_GPU=$(timeout 30 nvidia-smi --query-gpu=name,memory.total,compute_cap --format=csv,noheader 2>/dev/null | head -1 |
               sed -E 's/, ([0-9.]+)$/, compute capability \1/')
    INFO_DRIVER=$(timeout 30 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
    INFO_NVCC=$([ -n "$NVCC" ] && "$NVCC" --version | grep -o 'release [0-9.]*, V[0-9.]*')
    INFO_COMMIT=${GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}
    if [ -z "$INFO_COMMIT" ]; then INFO_COMMIT="unknown (no .git here; GIT_COMMIT=... names it)"
    elif [ -z "${GIT_COMMIT:-}" ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
        INFO_COMMIT+=" with uncommitted changes"
    fi
}

# where the summary and the logs go: --out's folder gets summary.md and logs.tar.gz; the logs are
# written in a temporary folder of their own (a stale log from an earlier run is never packed)
setup_output() {
    mkdir -p "$RESULTS" || { echo "gpu_check: --out $RESULTS: cannot create that folder" >&2; exit 2; }
    rm -f "$RESULTS/summary.md" "$RESULTS/logs.tar.gz"
    LOGS=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")/logs
    mkdir -p "$LOGS"
    : > "$LOGS/stages.tsv"
}

main() {
    parse_args "$@"
    cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
    START=$SECONDS  # the budget counts from here: the probe, the stages and the summary
    find_tools
    if [ "$PLAN" -eq 1 ]; then print_plan; exit 0; fi
    if ! gpu_present; then
        echo "gpu_check: no GPU here (nvidia-smi is missing or finds none): nothing built or run"
        exit 77
    fi
    trap on_signal INT TERM HUP
    setup_output
    collect_info
    echo "gpu_check: ${INFO_GPU}; driver ${INFO_DRIVER}; nvcc ${INFO_NVCC:-not found}; commit $INFO_COMMIT"
    echo "gpu_check: budget $BUDGET s; results: $(results_text)"
    write_summary > "$RESULTS/summary.md"
    local s
    for s in "${STAGES[@]}"; do run_stage "$s"; done
    echo
    cat "$RESULTS/summary.md"
    ! cut -f2 "$LOGS/stages.tsv" | grep -qE '^(failed|timed out)'
}

# Sourced (by test/tools/gpu_check.sh), it only defines the functions.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then main "$@"; fi
