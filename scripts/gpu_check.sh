#!/usr/bin/env bash
# What a machine with a GPU should check, in one command that fits when the GPU is only there for
# a few minutes (one rented for a quarter of an hour, a slot on a shared node). Two stage sets of
# at most 300 s each, builds included, so that a quarter of an hour holds the machine's start,
# one run and a rerun after a fix, or both sets:
#
#   default (no --stage): the figures worth the most, first
#     build      bf16 train_gpt, train, test/gpu_trainer/trainer and test/gpu_trainer/flash_attention
#                for this GPU's architecture only (make -j CUDA_ARCH=, from nvidia-smi), and
#                beside them llm.c with and without cuDNN (its sources' build.sh: see below)
#     bench      the whole step at GPT-2 124M, B=64, T=1024, bf16, on each attention path (fused,
#                cublas, and auto: which one it picks), then llm.c's train_gpt2cu on the same
#                shape, with cuDNN and without (scripts/bench_gpu.sh)
#     test_gpu   test/gpu_trainer/trainer, bf16
#     flash      test/gpu_trainer/flash_attention, bf16
#   --stage first-run: what no emulator can check, the first time the code meets a GPU
#     prepare    bf16 train_gpt and the attention workbench (dev/cuda/attention_fused), this GPU only
#     epilogues  6 steps at GPT-2 124M (B=8) with --epilogues fused, then separate, cuBLASLt's log on
#                (CUBLASLT_LOG_LEVEL=2): both must run, log no cuBLASLt error, and agree in loss
#     sanitizer  compute-sanitizer --tool memcheck, racecheck and synccheck on the attention
#                workbench's --check (small shapes: every attention kernel of both paths)
#     ncu        one counter pass (Nsight Compute's SpeedOfLight and memory sections) over the
#                workbench's tensor-core attention kernels, where ncu is present and may read them
#     llama      the step at Llama-3.2 1B's shape, B=8, T=1024, bf16, fused attention (grouped
#                K/V heads): ms/step, tokens/s, MFU (scripts/bench_gpu.sh --model llama3)
#   --full (--stage full; budget 1800 s): the default set, llama, and
#     default_run  300 steps of the default model against ./train (scripts/compare_default_run.sh)
#     fp32         the GPU tests in fp32 (leaves ./train_gpt built fp32: make train_gpt restores bf16)
#     workbenches  the dev/cuda kernel workbenches, bf16 and fp32
# Each stage runs under its own time limit: its cap, or what the budget has left if that is less
# (one that cannot get its minimum is skipped, saying so). A stage that fails or runs out is
# reported ("timed out after N s") and the next one still runs. The summary (summary.md: GPU,
# driver, nvcc, commit; each stage's status and wall time; ms/step and tokens/s per attention
# path, what auto picked, llm.c's tokens/s with cuDNN and without, ours/llm.c, test counts; the
# first-run checks' findings) is rewritten after every stage, so a run killed from outside still
# leaves its table.
#
#   scripts/gpu_check.sh [--stage default|first-run|full] [--full] [--budget S] [--batch B]
#                        [--steps N] [--out DIR] [--plan] [--bundle] [--help]
#
#   --plan      prints each stage set's commands and time limits and where the results would go,
#               runs nothing (no GPU or nvcc needed): read it before the GPU is yours
#   --stage SET the stage set to run (default: default); --full is --stage full
#   --budget S  the whole check's seconds (default 300; 1800 with --full): a little less than
#               the time the GPU is yours, so that the results are written before it goes
#   --batch B   the benchmark's micro-batch (default 64); --steps N: steps per run (default 10)
#   --out DIR   where the results go (default out/gpu_check/): DIR/summary.md, and every log
#               packed in DIR/logs.tar.gz, both rewritten after every stage. Two files, so that
#               copying them off a machine that is going away is one command; the logs
#               themselves are written in a temporary folder whose name it prints.
#   --bundle    run on the machine you copy the checkout from (no GPU needed): copies what a GPU
#               machine without network needs into .deps/ inside the checkout (ignored by git):
#               llm.c's sources (from LLMC_PEER) into .deps/llmc-gpu and doctest's header into
#               .deps/include/doctest, then says what it copied; copying the checkout is enough
#
# Exit status: 0 every stage that ran passed, 1 one failed or timed out (--bundle: something it
# needs was not found), 2 bad usage, 77 no GPU here (nvidia-smi missing or failing): then it says
# so in one line and builds nothing.
# Found where they are: nvcc (PATH, CUDA_HOME, /usr/local/cuda); NCCL (CUDA's, the system's,
# NCCL_HOME, the nvidia-nccl wheel); doctest.h (DOCTEST_INC, /usr/include, or .deps/include:
# a copy brought along; without it the tests are skipped); llm.c's sources for the side-by-side
# (a folder with llm.c's checkout and its build.sh: LLMC_PEER, else .deps/llmc-gpu or
# shared/peers/llmc-gpu inside this checkout), or LLMC_DIR, an llm.c already built, timed
# instead; compute-sanitizer and ncu (PATH, or CUDA's bin/). GIT_COMMIT names the commit where
# the copy has no .git.
set -uo pipefail

# ---- the stages: cap and minimum, in seconds. Each set's caps add up to its budget less RESERVE,
# so each stage gets its whole cap and the last seconds are for the probe, the summary and
# stragglers. The caps are estimates for a 16-core H100/H200 machine: the build's from compile
# times measured on one core (sm_90 only: train_gpt 41 s, test/gpu_trainer/trainer 53 s, the
# attention test 29 s) and llm.c's cuDNN attention file (about 1.5 min of one core, its
# README), which all compile side by side; the rest from the runs' sizes. docs/gpu.md says so.
declare -A SET_STAGES=(
    [default]="build bench test_gpu flash"
    [first-run]="prepare epilogues sanitizer ncu llama"
    [full]="build bench test_gpu flash llama default_run fp32 workbenches")
declare -A SET_BUDGET=([default]=300 [first-run]=300 [full]=1800)
SETS="default first-run full"
declare -A CAP=([build]=130 [bench]=90 [test_gpu]=55 [flash]=15
                [prepare]=90 [epilogues]=60 [sanitizer]=75 [ncu]=35 [llama]=30
                [default_run]=240 [fp32]=480 [workbenches]=420)
declare -A MIN=([build]=60 [bench]=40 [test_gpu]=30 [flash]=10
                [prepare]=40 [epilogues]=30 [sanitizer]=20 [ncu]=15 [llama]=20
                [default_run]=60 [fp32]=120 [workbenches]=60)
RESERVE=10                 # seconds kept for the last summary and the archive
WORKBENCHES="layernorm attention_softmax attention_fused crossentropy gelu encoder_backward adamw"
LLMC_BUILD=build/llmc-gpu  # where build.sh puts llm.c: cudnn/ and nocudnn/ (ignored by git)
DEFAULT_OUT=out/gpu_check  # --out's default (out/ is ignored by git)
BUNDLE=.deps               # --bundle's folder (ignored by git)
LLMC_PLACES="LLMC_PEER, .deps/llmc-gpu, shared/peers/llmc-gpu"  # where llm.c's sources are looked for, in words
EPILOGUE_STEPS=6
# the epilogues' loss tolerance: the fused and separate epilogues compute GELU's derivative and
# the bias gradients with bf16 roundings at different points, so the losses drift apart by a few
# bf16 ulps of the activations over 6 steps from the same start (~1e-3 at a loss of ~10); 0.05
# allows that and catches a wrong gradient, which moves the loss by tenths within 6 steps
EPILOGUE_TOL=0.05

usage() {
    sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
    echo
    echo "Stages and their caps (the time limit is the cap, or less where the budget has less left):"
    local set s
    for set in $SETS; do
        echo "  $set (budget ${SET_BUDGET[$set]} s):"
        for s in ${SET_STAGES[$set]}; do printf "    %-12s %4d s\n" "$s" "${CAP[$s]}"; done
    done
}

# ---- options
parse_args() {
    SET=default PLAN=0 BUNDLE_ONLY=0 BUDGET="" BATCH=64 STEPS=10 RESULTS=$DEFAULT_OUT SET_GIVEN=0
    while [ $# -gt 0 ]; do
        case "$1" in
            --full) SET=full SET_GIVEN=1 ;;
            --plan) PLAN=1 ;;
            --bundle) BUNDLE_ONLY=1 ;;
            --stage)
                [[ " $SETS " == *" ${2:-none} "* ]] || { echo "gpu_check: --stage takes one of: $SETS (see --help)" >&2; exit 2; }
                SET=$2 SET_GIVEN=1; shift ;;
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
    read -r -a STAGES <<< "${SET_STAGES[$SET]}"
    BUDGET_GIVEN=$BUDGET
    [ -n "$BUDGET" ] || BUDGET=${SET_BUDGET[$SET]}
}
in_set() { [[ " ${SET_STAGES[$1]} " == *" $2 "* ]]; }

# ---- tools: nvcc, NCCL, doctest, llm.c's sources, the GPU's architecture, compute-sanitizer, ncu.
# Only looks; builds nothing.
find_tools() {
    NVCC=$(command -v nvcc || true)
    local d
    for d in ${CUDA_HOME:-} /usr/local/cuda /opt/cuda; do
        [ -z "$NVCC" ] && [ -x "$d/bin/nvcc" ] && NVCC=$d/bin/nvcc
    done
    [ -n "$NVCC" ] && PATH="$(dirname "$NVCC"):$PATH"
    MAKE_VARS=()
    # only this GPU's architecture: one ptxas pass per kernel instead of two (gpu.mk's default
    # without a GPU is 80 and 90)
    GPU_ARCH=$(timeout 30 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
    [[ "$GPU_ARCH" =~ ^[0-9]+$ ]] || GPU_ARCH=""
    [ -n "$GPU_ARCH" ] && MAKE_VARS+=("CUDA_ARCH=$GPU_ARCH")
    # the nvidia-nccl wheel (PyTorch's environment) where CUDA and the system have no nccl.h
    if [ -n "$NVCC" ] && [ -z "${NCCL_HOME:-}" ] && [ ! -f "$(dirname "$NVCC")/../include/nccl.h" ] && [ ! -f /usr/include/nccl.h ]; then
        local header
        header=$(find /opt /usr/local/lib /usr/lib/python3* -name nccl.h -path '*nvidia*/include/*' 2>/dev/null | head -1)
        [ -n "$header" ] && NCCL_HOME=$(dirname "$(dirname "$header")")
    fi
    [ -n "${NCCL_HOME:-}" ] && MAKE_VARS+=("NCCL_HOME=$NCCL_HOME")
    DOCTEST=""
    for d in ${DOCTEST_INC:-} /usr/include /usr/local/include $BUNDLE/include; do
        if [ -f "$d/doctest/doctest.h" ]; then DOCTEST=$d; MAKE_VARS+=("DOCTEST_INC=$d"); break; fi
    done
    LLMC_SRC=""
    for d in ${LLMC_PEER:-} $BUNDLE/llmc-gpu shared/peers/llmc-gpu; do
        if [ -f "$d/build.sh" ]; then LLMC_SRC=$d; break; fi
    done
    SANITIZER=$(find_cuda_tool compute-sanitizer)
    NCU=$(find_cuda_tool ncu)
}
find_cuda_tool() {  # PATH (nvcc's bin/ is on it by now), else CUDA_HOME's or /usr/local/cuda's
    local d
    command -v "$1" 2>/dev/null && return
    for d in ${CUDA_HOME:-} /usr/local/cuda /opt/cuda; do
        [ -x "$d/bin/$1" ] && { echo "$d/bin/$1"; return; }
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
workbench_cmd() { echo "make -C dev/cuda -j$(nproc 2>/dev/null || echo 4) PRECISION=bf16 ${MAKE_VARS[*]} attention_fused"; }
llama_cmd() {
    echo "bash scripts/bench_gpu.sh --model llama3 --precisions bf16 --trainer ./train_gpt --batch 8 --steps $STEPS" \
         "--attention fused --no-kernels"
}
bench_cmd() {  # $1: the llm.c builds to time
    echo "bash scripts/bench_gpu.sh --precisions bf16 --trainer ./train_gpt --batch $BATCH --steps $STEPS" \
         "--attention 'fused cublas auto' --no-kernels --llmc '$1'"
}
# epilogue_cmd E: the epilogues stage's run with --epilogues E (its cuBLASLt log in $LOGS)
epilogue_cmd() {
    echo "CUBLASLT_LOG_LEVEL=2 CUBLASLT_LOG_FILE=${LOGS:-LOGS}/cublaslt_$1.log ./train_gpt --layers 12 --heads 12" \
         "--channels 768 --max-seq-len 1024 --vocab 50257 --padded-vocab 50304 -t 1024 -b 8 -n $EPILOGUE_STEPS" \
         "--val-every 0 --sample-every 0 -o '' --epilogues $1"
}
SANITIZER_TOOLS="memcheck racecheck synccheck"
sanitizer_cmd() { echo "${SANITIZER:-compute-sanitizer} --tool $1 --error-exitcode 1 ./dev/cuda/attention_fused --check"; }
ncu_cmd() {
    echo "${NCU:-ncu} --kernel-name regex:'mma|flash' --launch-count 8 --section SpeedOfLight" \
         "--section MemoryWorkloadAnalysis ./dev/cuda/attention_fused --check"
}

# describe STAGE: what it runs, in words and commands (for --plan)
describe() {
    local t
    case "$1" in
        build)
            echo "$(make_cmd) $(our_targets)"
            [ -n "$GPU_ARCH" ] || echo "(CUDA_ARCH: the GPU's own, from nvidia-smi, e.g. 90 on an H100 or H200)"
            [ -n "$DOCTEST" ] || echo "(doctest.h not found: the tests are not built; see --help)"
            if [ -n "${LLMC_DIR:-}" ]; then echo "llm.c: LLMC_DIR=$LLMC_DIR, already built"
            elif [ -n "$LLMC_SRC" ]; then echo "beside it: bash $LLMC_SRC/build.sh $LLMC_BUILD"
            else echo "llm.c: its sources are not here ($LLMC_PLACES)"; fi ;;
        prepare)
            echo "$(make_cmd) train_gpt"
            echo "$(workbench_cmd)" ;;
        bench) bench_cmd "$(llmc_dirs)" ;;
        llama) llama_cmd ;;
        test_gpu) echo "./test/gpu_trainer/trainer" ;;
        flash) echo "./test/gpu_trainer/flash_attention" ;;
        epilogues)
            epilogue_cmd fused; epilogue_cmd separate
            echo "(the losses agree within $EPILOGUE_TOL at every step; no [Error] line in either cuBLASLt log)" ;;
        sanitizer)
            for t in $SANITIZER_TOOLS; do sanitizer_cmd "$t"; done
            [ -n "$SANITIZER" ] || echo "(compute-sanitizer not found here: skipped where it is absent)" ;;
        ncu)
            ncu_cmd
            [ -n "$NCU" ] || echo "(ncu not found here: skipped where it is absent)" ;;
        default_run) echo "scripts/compare_default_run.sh ./train_gpt" ;;
        fp32) echo "$(make_cmd fp32) train_gpt test/gpu_trainer/trainer test/gpu_trainer/flash_attention;" \
                   "./test/gpu_trainer/trainer; ./test/gpu_trainer/flash_attention" ;;
        workbenches) echo "make -C dev/cuda PRECISION=bf16, then fp32; each of: $WORKBENCHES" ;;
    esac
}

# print_plan: the chosen set; without --stage, both short sets (and a word on --full)
print_plan() {
    local set sets=$SET
    [ "$SET_GIVEN" -eq 1 ] || sets="default first-run"
    for set in $sets; do plan_of "$set"; echo; done
    [ "$SET_GIVEN" -eq 1 ] || echo "(--full, budget ${SET_BUDGET[full]} s: ${SET_STAGES[full]})"
    echo "results: $(results_text)"
}
plan_of() {  # plan_of SET
    local set=$1 budget=${BUDGET_GIVEN:-${SET_BUDGET[$1]}}
    echo "gpu_check plan, stage set $set$([ "$set" = default ] || echo " (--stage $set)"): budget $budget s," \
         "$RESERVE s of it kept for the summary; nothing is run"
    local s left=$((budget - RESERVE)) limit
    for s in ${SET_STAGES[$set]}; do
        # the most each can get: its cap, or what the caps before it leave
        limit=$(( CAP[$s] < left ? CAP[$s] : left ))
        [ "$limit" -gt 0 ] || limit=0
        if [ "$limit" -lt "${MIN[$s]}" ]; then
            printf "%-12s skipped: %d s of the budget left, it needs %d s\n" "$s" "$limit" "${MIN[$s]}"
        else
            printf "%-12s time limit %d s\n" "$s" "$limit"
            describe "$s" | sed 's/^/    /'
        fi
        left=$((left - limit))
    done
}
results_text() { echo "$RESULTS/summary.md and $RESULTS/logs.tar.gz${LOGS:+ (the logs written in $LOGS/)}"; }

# ---- --bundle: what a machine without network needs, copied into the checkout's .deps/
bundle() {
    local rc=0 src
    mkdir -p "$BUNDLE/include" || { echo "gpu_check: --bundle: cannot create $BUNDLE/" >&2; return 1; }
    src=""
    for d in ${LLMC_PEER:-} shared/peers/llmc-gpu; do [ -f "$d/build.sh" ] && { src=$d; break; }; done
    if [ -z "$src" ]; then
        echo "gpu_check: --bundle: llm.c's sources not found (LLMC_PEER names the folder with its build.sh)"; rc=1
    elif [ "$(cd "$src" && pwd -P)" != "$(cd "$BUNDLE" && pwd -P)/llmc-gpu" ]; then
        rm -rf "$BUNDLE/llmc-gpu.part" && cp -rL "$src" "$BUNDLE/llmc-gpu.part" &&
            rm -rf "$BUNDLE/llmc-gpu" && mv "$BUNDLE/llmc-gpu.part" "$BUNDLE/llmc-gpu" ||
            { echo "gpu_check: --bundle: copying $src failed"; rc=1; }
        [ "$rc" -eq 0 ] && echo "llm.c's sources: $src -> $BUNDLE/llmc-gpu ($(du -sh "$BUNDLE/llmc-gpu" | cut -f1))"
    else
        echo "llm.c's sources: already in $BUNDLE/llmc-gpu"
    fi
    src=""
    for d in ${DOCTEST_INC:-} /usr/include /usr/local/include; do [ -f "$d/doctest/doctest.h" ] && { src=$d; break; }; done
    if [ -n "$src" ]; then
        rm -rf "$BUNDLE/include/doctest" && cp -rL "$src/doctest" "$BUNDLE/include/doctest" &&
            echo "doctest: $src/doctest -> $BUNDLE/include/doctest" || { echo "gpu_check: --bundle: copying doctest failed"; rc=1; }
    elif [ -f "$BUNDLE/include/doctest/doctest.h" ]; then
        echo "doctest: already in $BUNDLE/include/doctest"
    else
        echo "gpu_check: --bundle: doctest.h not found (DOCTEST_INC names the folder holding doctest/doctest.h)"; rc=1
    fi
    [ "$rc" -eq 0 ] && echo "bundle: $BUNDLE/ holds $(du -sh "$BUNDLE" | cut -f1); copy the checkout with it, then run" \
                            "scripts/gpu_check.sh there"
    return $rc
}

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

# ---- the first-run stages
stage_prepare() {
    local rc=0
    echo "$(make_cmd) train_gpt (log: build_ours.log)"
    $(make_cmd) train_gpt > "$LOGS/build_ours.log" 2>&1 || { tail -n 30 "$LOGS/build_ours.log"; rc=1; }
    [ -x ./train_gpt ] && [ "$rc" -eq 0 ] && echo "built: train_gpt"
    echo "$(workbench_cmd) (log: build_workbench.log)"
    $(workbench_cmd) > "$LOGS/build_workbench.log" 2>&1 || { tail -n 30 "$LOGS/build_workbench.log"; rc=1; }
    [ -x ./dev/cuda/attention_fused ] && echo "built: dev/cuda/attention_fused"
    return $rc
}
# step_losses LOG: "step loss" per step line of a trainer's log
step_losses() { sed -nE 's/^step +([0-9]+)\/[0-9]+ \| loss ([^ ]+) .*/\1 \2/p' "$1"; }
# compare_losses LOG_A LOG_B STEPS: step by step, the largest difference in loss within
# EPILOGUE_TOL; a NaN, a step missing from either log or a different count fails
compare_losses() {
    awk -v tol="$EPILOGUE_TOL" -v n="$3" '
        function number(x) { return x ~ /^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$/ }
        FNR == NR { a[$1] = $2; next }
        $1 in a { if (!number(a[$1]) || !number($2)) bad = 1
                  d = a[$1] - $2; if (d < 0) d = -d; if (d > worst) worst = d; steps++ }
        END { ok = steps == n && !bad && worst <= tol
              printf "losses: %d of %d steps compared, largest difference %.4g (tolerance %g): %s%s\n", steps, n, worst, tol,
                     ok ? "agree" : "DIFFER", bad ? " (a loss is not a number)" : ""
              exit ok ? 0 : 1 }' <(step_losses "$1") <(step_losses "$2")
}
stage_epilogues() {
    [ -x ./train_gpt ] || { echo "skipped: ./train_gpt was not built"; return 77; }
    local e rc=0
    for e in fused separate; do
        echo "$(epilogue_cmd "$e") (log: epilogues_$e.log)"
        eval "$(epilogue_cmd "$e")" > "$LOGS/epilogues_$e.log" 2>&1 || { echo "--epilogues $e: FAILED"; tail -n 5 "$LOGS/epilogues_$e.log"; rc=1; }
        grep -a 'cuBLASLt\|epilogue' "$LOGS/epilogues_$e.log" | grep -v '^step ' | head -5
        local errors; errors=$(grep -ac '\[Error\]' "$LOGS/cublaslt_$e.log" 2>/dev/null); errors=${errors:-0}
        echo "--epilogues $e: cuBLASLt errors: $errors"
        [ "$errors" -eq 0 ] || { grep -a '\[Error\]' "$LOGS/cublaslt_$e.log" | head -3; rc=1; }
    done
    compare_losses "$LOGS/epilogues_fused.log" "$LOGS/epilogues_separate.log" "$EPILOGUE_STEPS" || rc=1
    return $rc
}
stage_sanitizer() {
    [ -n "$SANITIZER" ] || { echo "skipped: compute-sanitizer not found (PATH, CUDA_HOME/bin)"; return 77; }
    [ -x ./dev/cuda/attention_fused ] || { echo "skipped: dev/cuda/attention_fused was not built"; return 77; }
    local t rc=0 each=$(( ${STAGE_LIMIT:-90} / 3 ))
    for t in $SANITIZER_TOOLS; do
        echo "$(sanitizer_cmd "$t") (log: sanitizer_$t.log, at most $each s)"
        timeout "$each" $(sanitizer_cmd "$t") > "$LOGS/sanitizer_$t.log" 2>&1
        local r=$? summary
        summary=$(grep -a 'SUMMARY' "$LOGS/sanitizer_$t.log" | tail -1 | sed 's/^=* *//')
        case $r in
            0) echo "$t: ok${summary:+ ($summary)}" ;;
            124) echo "$t: TIMED OUT after $each s"; rc=1 ;;
            *) echo "$t: FAILED (exit status $r)${summary:+: $summary}"; grep -a -m 3 'ERROR\|Error\|hazard' "$LOGS/sanitizer_$t.log"; rc=1 ;;
        esac
    done
    return $rc
}
stage_ncu() {
    [ -n "$NCU" ] || { echo "skipped: ncu not found (PATH, CUDA_HOME/bin)"; return 77; }
    [ -x ./dev/cuda/attention_fused ] || { echo "skipped: dev/cuda/attention_fused was not built"; return 77; }
    echo "$(ncu_cmd) (log: ncu.log)"
    eval "$(ncu_cmd)" > "$LOGS/ncu.log" 2>&1
    local r=$?
    if grep -aq 'ERR_NVGPUCTRPERM' "$LOGS/ncu.log"; then
        echo "skipped: this machine does not let users read the GPU's performance counters (ERR_NVGPUCTRPERM)"; return 77
    fi
    ncu_kernels "$LOGS/ncu.log"
    [ "$r" -eq 0 ] && [ -n "$(ncu_kernels "$LOGS/ncu.log")" ]
}
# ncu_kernels LOG: "kernel: SM x%, memory y%" per profiled kernel of ncu's default report
ncu_kernels() {
    [ -f "$1" ] || return 0
    awk '/^  [^ ].*\(.*\)x\(/ { if (name != "") print name ": SM " sm "%, memory " mem "%"
                                 name = $0; sub(/^ +(void +)?/, "", name); sub(/[<(].*/, "", name); sm = "?"; mem = "?" }
         /^ +Compute \(SM\) Throughput/ { sm = $NF }
         /^ +Memory Throughput +%/ { mem = $NF }
         END { if (name != "") print name ": SM " sm "%, memory " mem "%" }' "$1"
}

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
        prepare) [ -f "$LOGS/stage_prepare.log" ] &&
            echo "$(grep -a '^built: ' "$LOGS/stage_prepare.log" | sed 's/^built: //' | paste -sd, | sed 's/,/, /g; s/^$/nothing/') built" ;;
        epilogues) [ -f "$LOGS/stage_epilogues.log" ] &&
            grep -aE '^(losses: |--epilogues [a-z]+: (cuBLASLt errors|FAILED))' "$LOGS/stage_epilogues.log" | paste -sd';' | sed 's/;/; /g' ;;
        sanitizer) [ -f "$LOGS/stage_sanitizer.log" ] &&
            grep -aE '^(memcheck|racecheck|synccheck): ' "$LOGS/stage_sanitizer.log" | paste -sd';' | sed 's/;/; /g' ;;
        ncu) [ -f "$LOGS/ncu.log" ] && echo "$(ncu_kernels "$LOGS/ncu.log" | wc -l) kernels profiled (the table below)" ;;
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
    echo "- stage set $SET, budget $BUDGET s$(in_set "$SET" bench && echo "; benchmark: GPT-2 124M, B=$BATCH, T=1024, bf16, $STEPS steps per run, times the mean of steps 2..$STEPS")"
    echo
    echo "| stage | time limit | status | wall | figures |"
    echo "|---|---|---|---|---|"
    local s line status wall limit
    for s in "${STAGES[@]}"; do
        line=$(awk -F'\t' -v s="$s" '$1 == s' "$LOGS/stages.tsv" 2>/dev/null | tail -1)
        if [ -n "$line" ]; then
            IFS=$'\t' read -r _ status wall limit <<< "$line"
            echo "| $s | $limit s | $status | ${wall/#-/} s | $(stage_notes "$s") |"
        else echo "| $s | | not reached | | |"; fi
    done
    local other others=""
    for other in $SETS; do [ "$other" = "$SET" ] || others+="${others:+; }$other: ${SET_STAGES[$other]}"; done
    echo
    echo "Other stage sets (--stage): $others"
    echo
    in_set "$SET" bench && bench_table
    in_set "$SET" ncu && ncu_table
    return 0
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

# ncu_table: the counter pass's figures, one row per kernel launch profiled
ncu_table() {
    local rows; rows=$(ncu_kernels "$LOGS/ncu.log")
    [ -n "$rows" ] || return 0
    echo "## Nsight Compute: the attention workbench's tensor-core kernels (--check shapes)"
    echo
    echo "| kernel | SM throughput | memory throughput |"
    echo "|---|---|---|"
    sed -E 's/^(.*): SM (.*), memory (.*)$/| \1 | \2 | \3 |/' <<< "$rows"
    echo
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
    if [ "$BUNDLE_ONLY" -eq 1 ]; then bundle; exit $?; fi
    if [ "$PLAN" -eq 1 ]; then print_plan; exit 0; fi
    if ! gpu_present; then
        echo "gpu_check: no GPU here (nvidia-smi is missing or finds none): nothing built or run"
        exit 77
    fi
    trap on_signal INT TERM HUP
    setup_output
    collect_info
    echo "gpu_check: ${INFO_GPU}; driver ${INFO_DRIVER}; nvcc ${INFO_NVCC:-not found}; commit $INFO_COMMIT"
    echo "gpu_check: stage set $SET (${STAGES[*]}), budget $BUDGET s; results: $(results_text)"
    write_summary > "$RESULTS/summary.md"
    local s
    for s in "${STAGES[@]}"; do run_stage "$s"; done
    echo
    cat "$RESULTS/summary.md"
    ! cut -f2 "$LOGS/stages.tsv" | grep -qE '^(failed|timed out)'
}

# Sourced (by test/tools/gpu_check.sh), it only defines the functions.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then main "$@"; fi
