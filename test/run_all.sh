#!/usr/bin/env bash
# Runs every test suite this machine can run, then prints one closing line:
# "N passed, M failed, K skipped: WHY; WHY" (test cases summed over the suites). Exit status
# 1 if any failed. A suite that cannot run here (no MPI, no CUDA toolkit, no matplotlib)
# says why and counts as one skip; so does every case a suite skips (its "SKIP name: why"
# line). In CI (CI=true) a dependency that .ci/run installs (Open MPI, clang's libFuzzer)
# must be there: its absence is a failure, not a skip. Each suite's wall and processor times are printed.
set -u
cd "$(dirname "$0")/.."
passed=0 failed=0 skipped=0 skip_reasons=()

# add PASSED FAILED: adds one suite's counts
add() { passed=$((passed + $1)); failed=$((failed + $2)); }
# skip WHAT: one skipped suite or case, with its reason (named again in the closing line)
skip() { skipped=$((skipped + 1)); skip_reasons+=("$1"); }
# missing NAME WHY: a suite that cannot run here. In CI, where .ci/run installs what it
# needs, that is a failure; elsewhere a skip
missing() {
    if [ "${CI:-}" = true ]; then echo "==== FAIL $1: $2 (CI, where .ci/run installs it)"; add 0 1
    else echo "==== $1: skipped, $2"; skip "$1: $2"; fi
}

# children_cpu [PID]: the processor time (user + system, in clock ticks) of the finished
# children of this shell (or of PID) and their descendants, from /proc (0 where there is none)
children_cpu() {
    local stat
    read -r stat 2>/dev/null </proc/"${1:-$$}"/stat || { echo 0; return; }
    set -- ${stat##*) }  # the fields after the command's name: cutime and cstime are 14 and 15
    echo $(( ${14} + ${15} ))
}
ticks=$(getconf CLK_TCK 2>/dev/null || echo 100)

# tally NAME LOG STATUS: adds a finished suite's counts, read from the doctest summary or a
# closing "N passed, M failed" line of its LOG. No counts and a failure = 1 failed.
tally() {
    local name=$1 log=$2 rc=$3 p f
    if grep -q '^\[doctest\] test cases:' "$log"; then
        p=$(grep '^\[doctest\] test cases:' "$log" | tail -1 | sed -E 's/.*\| *([0-9]+) passed.*/\1/')
        f=$(grep '^\[doctest\] test cases:' "$log" | tail -1 | sed -E 's/.*\| *([0-9]+) failed.*/\1/')
    elif grep -qE '^[0-9]+ passed, [0-9]+ failed' "$log"; then
        p=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1 | sed -E 's/^([0-9]+) passed.*/\1/')
        f=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1 | sed -E 's/.* ([0-9]+) failed.*/\1/')
    else
        p=0 f=0
    fi
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "==== $name exited with status $rc"; fi
    add "$p" "$f"
    local line  # the cases it skipped, each on a line of its own: "SKIP name: why"
    while IFS= read -r line; do skip "$name: ${line#SKIP }"; done < <(grep '^SKIP ' "$log")
}

# suite NAME COMMAND...: runs it, shows its output and adds its counts (tally). Its wall time
# is printed with the processor time it took (two cores busy: twice the wall time).
suite() {
    local name=$1; shift
    echo "==== $name: $*"
    local log; log=$(mktemp)
    local start=$SECONDS cpu0; cpu0=$(children_cpu)
    "$@" 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    echo "==== $name: $((SECONDS - start)) s (processor $(( ($(children_cpu) - cpu0) / ticks )) s)"
    tally "$name" "$log" "$rc"
    rm -f "$log"
}

# Beside the others: a suite that keeps one core busy for minutes (one thread, a fixed
# schedule, nothing timed) runs on the second core while the suites after it run on the
# first, which they leave idle most of the time (they run one process at a time, or wait).
# suite_beside NAME COMMAND... starts it, its output kept; suites_beside_done waits for it
# and then shows that output and adds its counts, as suite does. Only suites that time
# nothing (no --comm-timeout, no kill at a moment) may run while one is beside them.
beside_names=() beside_logs=() beside_pids=()
suite_beside() {
    local name=$1; shift
    echo "==== $name: started beside the next suites: $*"
    local log; log=$(mktemp)
    (
        start=$SECONDS me=$BASHPID
        cpu0=$(children_cpu "$me")
        "$@" >"$log" 2>&1
        echo "$? $((SECONDS - start)) $(( ($(children_cpu "$me") - cpu0) / ticks ))" >"$log.status"
    ) &
    beside_names+=("$name") beside_logs+=("$log") beside_pids+=($!)
}
suites_beside_done() {
    local k rc seconds cpu
    for k in "${!beside_pids[@]}"; do
        wait "${beside_pids[$k]}"
        local name=${beside_names[$k]} log=${beside_logs[$k]}
        read -r rc seconds cpu <"$log.status" 2>/dev/null || { rc=1 seconds=? cpu=?; }
        echo "==== $name: its output (it ran beside the suites above)"
        cat "$log"
        echo "==== $name: $seconds s beside the others (processor $cpu s)"
        tally "$name" "$log" "$rc"
        rm -f "$log" "$log.status"
    done
    beside_names=() beside_logs=() beside_pids=()
}

suite "CPU trainer (doctest)" ./test/cpu_trainer/trainer
suite "CPU trainer: Llama-3's layers, model and files (doctest)" ./test/cpu_trainer/llama
suite "FLOPs and communication of a step (doctest)" ./test/cpu_trainer/plan
suite "the Llama-3.2 1B recipe on the GPU trainer: its plans (1 GPU, 8 with ZeRO stage 1) and what a run refuses (scripts/llama3_1b.sh)" \
    bash test/cpu_trainer/llama_recipe.sh
suite "threads sized to the processors a process may use" bash test/cpu_trainer/threads.sh
suite "gradient noise scale: the estimator (doctest)" ./test/cpu_trainer/noise_estimator
suite "gradient noise scale in the trainers" bash test/cpu_trainer/noise_scale.sh
suite "PyTorch reference (golden file)" ./test/cpu_trainer/check_reference test/golden/model_tiny.bin test/golden/reference_tiny.bin
suite "Hugging Face's Llama-3 (golden file)" ./test/cpu_trainer/check_reference test/golden/llama_tiny.bin test/golden/llama_reference_tiny.bin
suite "the Trainer contract: a trainer without one of its members fails to build, naming it" bash test/run/trainer_contract.sh
suite "samples: the same tokens with and without the key/value cache (train, train_gpt_cpu_fp32; both families)" bash test/run/generation.sh

source test/mpi_lib.sh  # mpi_ok
if mpi_ok ./train; then
    suite "replicas (MPI)" bash test/replicas/cpu_replicas.sh
    suite "ZeRO stage 1 in the CPU trainer (MPI)" bash test/replicas/cpu_zero.sh
    # hosts as network namespaces on this machine (needs root and ip); CI runs as root
    if why=$(bash test/replicas/multihost.sh --can-run); then
        suite "many hosts: ./train over TCP between network namespaces (invariance, resume, faults)" \
            bash test/replicas/multihost.sh
    else missing "many hosts (network namespaces)" "$why"; fi
    suite "gradient sync overlapped with the backward vs at the end (MPI; CPU runtime's NCCL)" bash test/replicas/grad_sync.sh
else
    missing "replicas (MPI)" "./train was built without MPI or mpirun is missing (apt-get install libopenmpi-dev openmpi-bin)"
fi

suite "data tools, recipes and plots" python3 test/tools/data_tools.py
suite "Llama-3's tokenizer.model in the data tools: hand-worked BPE and split, the files, bad files" python3 test/tools/llama3_tokenizer.py
# (beside the tools' suites that follow, up to the compile matrix, which takes both cores)
suite_beside "Hugging Face checkpoints in and out (scripts/hf_convert.py), and both trainers on the imports" \
    bash test/tools/hf_convert.sh
suite "SASS report: its parser and arithmetic on a hand-written listing" python3 test/tools/sass_report.py
suite "plot of a real run" bash test/tools/plot_run.sh
suite "make bench's Llama line, with and without PyTorch (no timing compared)" bash test/tools/bench_cpu.sh
suite "the README's commands (docs/commands.txt)" bash test/tools/readme_commands.sh
suite "quoted outputs and names: the checker fails on a planted digit or name; the pages' quick checks" bash test/tools/quoted_outputs.sh
suite "the GPU check's plan, usage and summary (scripts/gpu_check.sh, no GPU)" bash test/tools/gpu_check.sh
suite "cluster layouts in the plan: Llama-3 70B on 16,384 GPUs by hand, bad layouts, a plan without data" bash test/tools/cluster_plan.sh
suite "every preset GPU: kernel variants, refusals, one chunked step (CPU runtime)" bash test/gpu_trainer/devices.sh
suites_beside_done
suite "compile matrix: sm_75 to sm_120, fp32 and bf16 (nvcc, no GPU)" bash test/gpu_trainer/compile_matrix.sh

# ---- hardening: bad inputs, crash safety, sanitizers, fuzzing (see README, "Hardening")
hardening_start=$SECONDS
suite "bad inputs (table, under ulimit -v)" bash test/hardening/bad_inputs.sh
suite "crash safety (kill -9 during checkpoint writes)" bash test/hardening/crash_safety.sh
if [ -x build/asan/train ] && [ -x build/asan/cpu_trainer ]; then
    # a sanitizer report exits with status 86, which no test expects
    export ASAN_OPTIONS=exitcode=86 UBSAN_OPTIONS=exitcode=86:print_stacktrace=1
    # (not the 30-step default run: at -O0 under ASan it takes half the suite's time, and
    # the resume, 2N-steps and finite-difference cases take the same code path, shorter)
    suite "CPU tests under ASan and UBSan" env TRAIN=build/asan/train ./build/asan/cpu_trainer \
        --test-case-exclude="the default run trains*"
    # (no ulimit -v: ASan reserves terabytes of address space for its shadow memory)
    suite "bad inputs under ASan and UBSan" env TRAIN=build/asan/train BAD_INPUT_MEM_KB=unlimited \
        bash test/hardening/bad_inputs.sh
    unset ASAN_OPTIONS UBSAN_OPTIONS
else
    echo "==== sanitizers: build/asan/ is not built (make sanitizers)"
    add 0 1
fi
if ls build/fuzz/fuzz_* >/dev/null 2>&1; then
    suite "fuzzing (${FUZZ_SECONDS:-10} s per harness, after replaying the corpus)" bash test/hardening/fuzz/run.sh "${FUZZ_SECONDS:-10}"
else
    missing "fuzzing" "clang with libFuzzer not found (apt-get install clang libclang-rt-dev)"
fi
echo "==== hardening checks took $((SECONDS - hardening_start)) s (their builds are part of make test)"
# ---- end of hardening

# ---- the CUDA sources on the CPU runtime (cpu_cuda/, built by cpu.mk): no GPU needed, so
# these always run where the CUDA toolkit's headers are. OpenMP threads of the CPU trainer
# (compiled into gpu_trainer/trainer_cpu as the reference) must not spin while the runtime's pool works.
if [ -x ./test/cpu_runtime/execution ]; then
    export OMP_WAIT_POLICY=passive
    suite "CPU runtime for CUDA: stands alone (each header compiles alone, none includes the trainers)" \
        bash test/cpu_runtime/headers.sh
    suite "CPU runtime for CUDA: execution model and runtime API" ./test/cpu_runtime/execution
    suite "CPU runtime for CUDA: cooperative groups and other features of kernels from elsewhere" \
        ./test/cpu_runtime/kernel_features
    suite "CPU runtime for CUDA: the CUDA of tutorials and vendor samples (device presets, symbols, libcu++, ...)" \
        ./test/cpu_runtime/samples
    # (not the coalesced-group case: which group's atomic comes first, and so which slots each
    # thread gets, depends on the order, as on a GPU)
    suite "the same, race detector on (symbols kept between schedules)" env CPU_CUDA_RACECHECK=1 \
        ./test/cpu_runtime/samples --test-case-exclude="cooperative groups: coalesced*"
    suite "CPU runtime for CUDA: a workbench-style .cu built with the one-line rule (make NAME_cpu)" \
        ./test/cpu_runtime/byok_cpu
    suite "the same, race detector on (cooperative groups under five schedules)" env CPU_CUDA_RACECHECK=1 \
        ./test/cpu_runtime/byok_cpu
    suite "CPU runtime for CUDA: a program of two .cu files and a header of kernels (make NAME_cpu SOURCES=...)" \
        ./test/cpu_runtime/byok_multi/main_cpu
    suite "CPU runtime for CUDA: WMMA (tensor-core fragments)" ./test/cpu_runtime/wmma
    suite "CPU runtime for CUDA: WMMA, shuffled fragment layout" env CPU_CUDA_WMMA_LAYOUT=shuffled ./test/cpu_runtime/wmma
    suite "CPU runtime for CUDA: mma.sync, ldmatrix, cp.async (gpu/mma.cuh's instructions)" ./test/cpu_runtime/mma
    suite "the same, race detector on (every launch under five schedules)" env CPU_CUDA_RACECHECK=1 ./test/cpu_runtime/mma
    suite "CPU runtime for CUDA: cuBLAS subset" ./test/cpu_runtime/cublas
    suite "CPU runtime for CUDA: NCCL across processes" ./test/cpu_runtime/nccl
    # every launch under five schedules, compared: a race shows up as a difference. (Not the
    # end-to-end cases: they start train_gpt_cpu, whose kernels the other cases launch too; nor
    # HellaSwag, whose forward the golden-file case launches.) One thread and a fixed schedule,
    # for a minute or two: beside the suites up to the replicas, which time their peers' ends
    suite_beside "GPU tests on the CPU runtime, bf16 build, race detector on" env CPU_CUDA_RACECHECK=1 CPU_CUDA_DETERMINISTIC=1 ./test/gpu_trainer/trainer_cpu \
        --test-case-exclude="train_gpt:*,HellaSwag:*"
    suite "fused attention on the CPU runtime, bf16 build (tensor cores: mma.sync, ldmatrix, cp.async)" \
        ./test/gpu_trainer/flash_attention_cpu
    suite "fused attention on the CPU runtime, fp32 build (the exact tier)" ./test/gpu_trainer/flash_attention_cpu_fp32
    suite "fused attention, bf16, race detector on" env CPU_CUDA_RACECHECK=1 CPU_CUDA_DETERMINISTIC=1 \
        ./test/gpu_trainer/flash_attention_cpu --test-case="race*"
    suite "GPU tests on the CPU runtime, bf16 build" ./test/gpu_trainer/trainer_cpu
    suite "GPU tests on the CPU runtime, fp32 build (the exact tier)" ./test/gpu_trainer/trainer_cpu_fp32
    # the memory estimate against cudaMemGetInfo as a GPU's driver answers it (2 MiB pages)
    suite "GPU memory test on the CPU runtime, counting a driver's pages" env CPU_CUDA_DRIVER_PAGES=1 \
        ./test/gpu_trainer/trainer_cpu --test-case="memory: *"
    suites_beside_done
    suite "GPU replicas on the CPU runtime (mpirun and Slurm-style)" bash test/replicas/gpu_replicas.sh
    suite "ZeRO stage 1 in the GPU trainer on the CPU runtime, bf16 build" bash test/replicas/gpu_zero.sh
    suite "ZeRO stage 1 in the GPU trainer on the CPU runtime, fp32 build" env TRAIN_GPT=./train_gpt_cpu_fp32 \
        bash test/replicas/gpu_zero.sh
    workbenches() {  # the dev/cuda workbenches' correctness checks, at small shapes
        local p=0 f=0 w
        for w in dev/cuda/*_cpu; do
            if "$w" --check; then p=$((p + 1)); else f=$((f + 1)); echo "FAIL $w"; fi
        done
        echo "$p passed, $f failed"
        [ "$f" -eq 0 ]
    }
    suite "kernel workbenches on the CPU runtime (--check)" workbenches
    unset OMP_WAIT_POLICY
else
    echo "==== CPU runtime for CUDA: skipped, the CUDA toolkit's headers were not found (install the CUDA toolkit)"
    skip "CPU runtime for CUDA (every GPU test): the CUDA toolkit's headers were not found"
fi

# The nvcc build of the GPU trainer and its tests is checked wherever nvcc exists (a compile
# error fails here). The tests run only on a GPU: test/gpu_trainer/trainer exits with status 77 without one,
# and the same suite has run above on the CPU runtime. Without a GPU one architecture is
# enough: the compile matrix above has compiled every other one (to PTX, and sm_75 to machine
# code), so here it is sm_90 alone (half the time of the default "80 90").
if command -v nvcc >/dev/null && [ -f gpu.mk ]; then
    arch=() where="for this machine's GPU"
    nvidia-smi -L >/dev/null 2>&1 || arch=(CUDA_ARCH=90) where="CUDA_ARCH=90: no GPU here"
    echo "==== nvcc build: train_gpt and test/gpu_trainer/trainer ($where)"
    if make -s -j"$(nproc)" train_gpt test/gpu_trainer/trainer "${arch[@]}" >/tmp/test_gpu_build.log 2>&1; then
        echo "PASS nvcc build"
        add 1 0
        log=$(mktemp)
        ./test/gpu_trainer/trainer >"$log" 2>&1; rc=$?
        if [ $rc -eq 77 ]; then
            echo "==== GPU tests on a GPU: not run here, no GPU (they ran above on the CPU runtime)"
            skip "GPU tests on a GPU: no GPU here (the same suite ran on the CPU runtime)"
        else
            suite "GPU tests on the GPU" cat "$log"
            [ $rc -ne 0 ] && ! grep -q '^\[doctest\] test cases:' "$log" && add 0 1
        fi
        rm -f "$log"
    else
        tail -30 /tmp/test_gpu_build.log
        echo "FAIL nvcc build: train_gpt or test/gpu_trainer/trainer failed to compile"
        add 0 1
    fi
else
    echo "==== nvcc build: skipped, nvcc not found (the CPU build does not need it)"
    skip "nvcc build: nvcc not found"
fi

echo
for why in ${skip_reasons[@]+"${skip_reasons[@]}"}; do echo "skipped: $why"; done  # one a line, then all in the last
reasons=""
for why in ${skip_reasons[@]+"${skip_reasons[@]}"}; do reasons+="${reasons:+; }$why"; done
echo "$passed passed, $failed failed, $skipped skipped${reasons:+: $reasons}"
[ "$failed" -eq 0 ]
