#!/usr/bin/env bash
# scripts/gpu_check.sh without a GPU: --help and --plan (which run nothing), a bad option, the
# no-GPU exit, the summary parsed from logs in the formats our programs and llm.c print (the
# step benchmark through scripts/bench_gpu.sh with stand-ins for the trainer and llm.c), and
# the stage runner (time limits, a stage that runs out, the budget, --out) with stand-in
# stages. A few seconds. Ends with "N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
root=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source test/suite_lib.sh  # pass, fail, skip, check, finish
has() { grep -qF -- "$2" "$1" || { echo "  not in $1: $2"; sed 's/^/  | /' "$1" | head -40; return 1; }; }
has_re() { grep -qE -- "$2" "$1" || { echo "  no match in $1: $2"; sed 's/^/  | /' "$1" | head -40; return 1; }; }
lacks() { ! grep -qF -- "$2" "$1" || { echo "  unexpected in $1: $2"; return 1; }; }

# ---- a fake nvidia-smi: one that fails, and one that finds an H200
mkdir -p "$work/nogpu" "$work/gpu"
printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver." >&2\nexit 9\n' > "$work/nogpu/nvidia-smi"
cat > "$work/gpu/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in
    -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)" ;;
    *name,memory.total,compute_cap*) echo "NVIDIA H200, 143771 MiB, 9.0" ;;
    *compute_cap*) echo "9.0" ;;
    *driver_version*) echo "580.159.03" ;;
    *name*) echo "NVIDIA H200" ;;
esac
EOF
chmod +x "$work/nogpu/nvidia-smi" "$work/gpu/nvidia-smi"

# ---- usage
scripts/gpu_check.sh --help > "$work/help" 2>&1
check "--help exits 0" [ $? -eq 0 ]
for s in build bench test_gpu flash prepare epilogues sanitizer ncu llama default_run fp32 workbenches --plan --full \
         '--stage default|first-run|full' --budget '--out DIR' --bundle LLMC_PEER; do
    check "--help mentions $s" has "$work/help" "$s"
done
check "--help gives each stage's cap" has "$work/help" "    bench          90 s"
check "--help gives each set's budget" has "$work/help" "  first-run (budget 300 s):"
# it describes any machine with a GPU, not one lender's tooling (the words are split here so
# that this file does not hold them either)
for w in '$''OUT' "timeout""_s" "../sha""red" "device"" tool"; do
    check "--help and docs/gpu.md do not name '$w'" bash -c "! grep -qiF -- '$w' '$work/help' docs/gpu.md"
done

PATH="$work/nogpu:$PATH" scripts/gpu_check.sh --plan --out "$work/logs" > "$work/plan" 2>&1
check "--plan exits 0 without a GPU" [ $? -eq 0 ]
check "--plan --out DIR creates no folder" [ ! -e "$work/logs" ]
check "--plan --out DIR: the results go to DIR" has "$work/plan" "results: $work/logs/summary.md and $work/logs/logs.tar.gz"
(cd "$work" && "$root/scripts/gpu_check.sh" --out rel/dir --plan) > "$work/plan_rel" 2>&1
check "--out DIR: a relative DIR is where the command was given" has "$work/plan_rel" "results: $work/rel/dir/summary.md"

for s in "stage set default: budget 300 s" "build        time limit 130 s" "bench        time limit 90 s" \
         "test_gpu     time limit 55 s" "flash        time limit 15 s" "--attention 'fused cublas auto'" \
         "./test/gpu_trainer/flash_attention" \
         "stage set first-run (--stage first-run): budget 300 s" "prepare      time limit 90 s" \
         "epilogues    time limit 60 s" "--epilogues fused" "--epilogues separate" "CUBLASLT_LOG_LEVEL=2" \
         "sanitizer    time limit 75 s" "--tool racecheck" "--tool synccheck" "--tool memcheck" \
         "ncu          time limit 35 s" "llama        time limit 30 s" "--model llama3"; do
    check "--plan lists: $s" has "$work/plan" "$s"
done
# each short set fits the budget it is sized for: its stages' caps and the reserve add up to at most 300 s
for set in default first-run; do
    total=$(awk -v set="$set" '$0 ~ "^gpu_check plan, stage set " set "[ :]" { on = 1; next } /^gpu_check plan/ { on = 0 }
                               on && / time limit [0-9]+ s$/ { t += $(NF - 1) } END { print t + 0 }' "$work/plan")
    check "--plan: the $set set's limits and the 10 s reserve are at most 300 s ($total + 10)" [ "$total" -gt 0 -a $((total + 10)) -le 300 ]
done
check "--plan: the build is for the GPU's own architecture" has "$work/plan" "CUDA_ARCH: the GPU's own"
PATH="$work/gpu:$PATH" scripts/gpu_check.sh --plan > "$work/plan_gpu" 2>&1
check "--plan with a GPU: make is given its architecture" has "$work/plan_gpu" "CUDA_ARCH=90 "
scripts/gpu_check.sh --plan --stage first-run > "$work/plan_first" 2>&1
check "--plan --stage first-run: that set only" has "$work/plan_first" "stage set first-run" && lacks "$work/plan_first" "stage set default"
check "--plan keeps --full's stages out" lacks "$work/plan" "workbenches  time limit"
scripts/gpu_check.sh --plan --full --budget 1000 > "$work/plan_full" 2>&1
check "--plan --full: a stage the budget cannot fit is skipped, saying so" \
    has "$work/plan_full" "workbenches  skipped: 0 s of the budget left, it needs 60 s"
check "--plan --full: the last stage that fits gets what is left" has "$work/plan_full" "fp32         time limit 430 s"
check "--plan without --out: the results go to out/gpu_check/" has "$work/plan_full" "results: out/gpu_check/summary.md and out/gpu_check/logs.tar.gz"

scripts/gpu_check.sh --frobnicate > "$work/bad.out" 2> "$work/bad.err"
check "a bad option exits 2" [ $? -eq 2 ]
check "a bad option: one line on stderr, nothing on stdout" [ "$(wc -l < "$work/bad.err")" -eq 1 ] && [ ! -s "$work/bad.out" ]
scripts/gpu_check.sh --budget soon > /dev/null 2>&1
check "a bad --budget exits 2" [ $? -eq 2 ]
scripts/gpu_check.sh --stage later > "$work/bad.out" 2> "$work/bad.err"
check "a bad --stage exits 2" [ $? -eq 2 ]
check "a bad --stage: one line naming the sets" bash -c "[ \$(wc -l < '$work/bad.err') -eq 1 ] && grep -q 'default first-run full' '$work/bad.err'"
for bad in "--out" "--out --plan" "--out scripts/gpu_check.sh --plan"; do
    scripts/gpu_check.sh $bad > "$work/bad.out" 2> "$work/bad.err"
    rc=$?
    check "a bad '$bad' exits 2" [ $rc -eq 2 ]
    check "a bad '$bad': one line on stderr naming --out, nothing on stdout" \
        bash -c "[ \$(wc -l < '$work/bad.err') -eq 1 ] && grep -q -- '--out' '$work/bad.err' && [ ! -s '$work/bad.out' ]"
done

PATH="$work/nogpu:$PATH" scripts/gpu_check.sh --out "$work/logs" > "$work/nogpu.out" 2>&1
check "nvidia-smi failing: exit 77" [ $? -eq 77 ]
check "nvidia-smi failing: one line" [ "$(wc -l < "$work/nogpu.out")" -eq 1 ]
check "nvidia-smi failing: nothing built or written" [ ! -e "$work/logs" ]
if ! command -v nvidia-smi > /dev/null; then
    scripts/gpu_check.sh --out "$work/logs" > "$work/nosmi.out" 2>&1
    check "no nvidia-smi: exit 77" [ $? -eq 77 ]
fi

# ---- the formats the summary reads, still printed where they come from
check "train_gpt's average line" grep -qF '"average: %.1f ms/step, %s tokens/s, per replica %s (steps %s..%s)"' host/run.h
check "train_gpt's auto line" grep -qF '"attention: fused %.2f ms, cublas %s per layer (forward and backward, B=%d T=%d): %s"' gpu/plan.cuh
check "train_gpt's memory line" grep -qF '"peak GPU memory: %.0f MiB of %.0f MiB' train_gpt.cu
for peer in ${LLMC_PEER:-} shared/peers/llmc-gpu; do  # where gpu_check.sh looks for llm.c's sources
    [ -f "$peer/src/train_gpt2.cu" ] || continue
    check "llm.c's average line ($peer)" grep -qF '"total average iteration time: %f ms\n"' "$peer/src/train_gpt2.cu"
    check "build.sh's lines ($peer)" grep -qF 'llmc-gpu: built $dest/nocudnn/train_gpt2cu' "$peer/build.sh"
    break
done

# ---- the step benchmark, through bench_gpu.sh, with stand-ins that print those lines
cat > "$work/train_gpt" <<'EOF'
#!/usr/bin/env bash
attention=auto
while [ $# -gt 0 ]; do [ "$1" = --attention ] && attention=$2; shift; done
[ "$attention" = auto ] && echo "attention: fused 1.52 ms, cublas 2.87 ms per layer (forward and backward, B=64 T=1024): fused"
ms=210.4 tps=311,482 mfu=24.1; [ "$attention" = cublas ] && ms=250.0 tps=262,144 mfu=20.2
echo "step    10/10 | loss 7.4213 | lr 6.00e-04 | norm 1.204 | $ms ms | ${tps} tok/s | 238 TFLOP/s | MFU $mfu% | eta 0:00"
echo "average: $ms ms/step, $tps tokens/s, per replica 238 TFLOP/s, MFU $mfu% (steps 2..10)"
echo "peak GPU memory: 29012 MiB of 143771 MiB (in use on the whole device after a step, cudaMemGetInfo)"
EOF
mkdir -p "$work/llmc/cudnn" "$work/llmc/nocudnn"
cat > "$work/llmc/cudnn/train_gpt2cu" <<'EOF'
#!/bin/sh
# llm.c's lines, from its printf formats
printf "step %4d/%d | loss %7.6f (%+.2fz)| norm %6.4f (%+.2fz)| lr %.2e | %.2f ms | %.1f%% bf16 MFU | %.0f tok/s\n" \
    10 10 7.419 0.1 1.21 0.3 0.0006 160.1 40.2 409000
printf "val loss %f\n" 7.41
printf "total average iteration time: %f ms\n" 160.25
EOF
chmod +x "$work/train_gpt" "$work/llmc/cudnn/train_gpt2cu"
mkdir -p "$work/case/logs"
PATH="$work/gpu:$PATH" bash scripts/bench_gpu.sh --precisions bf16 --trainer "$work/train_gpt" --batch 64 --steps 10 \
    --attention "fused cublas auto" --no-kernels --llmc "$work/llmc/cudnn $work/llmc/nocudnn" > "$work/case/logs/stage_bench.log" 2>&1
check "bench_gpu.sh: a missing llm.c build fails it" [ $? -eq 1 ]
check "bench_gpu.sh: the auto row names its pick" has "$work/case/logs/stage_bench.log" "| auto: fused  |"
check "bench_gpu.sh: llm.c's figures" has "$work/case/logs/stage_bench.log" \
    "llm.c [cudnn] train_gpt2cu, bf16, B=64: 160.2 ms/step, 408961 tokens/s; ours (--attention fused): 311482 tokens/s; ratio ours/llm.c = 0.76"

PATH="$work/gpu:$PATH" bash scripts/bench_gpu.sh --model llama3 --precisions bf16 --trainer "$work/train_gpt" --batch 8 \
    --steps 10 --attention fused --no-kernels > "$work/case/logs/stage_llama.log" 2>&1
check "bench_gpu.sh --model llama3: Llama-3.2 1B's shape, no llm.c" has "$work/case/logs/stage_llama.log" \
    "model: Llama-3.2 1B shape"

# ---- the summary, from those logs and the others' canned lines
cat > "$work/case/logs/stage_build.log" <<'EOF'
llm.c: bash shared/peers/llmc-gpu/build.sh build/llmc-gpu (log: build_llmc.log)
ours: make -j16 -k PRECISION=bf16 train_gpt train test/gpu_trainer/trainer test/gpu_trainer/flash_attention (log: build_ours.log)
built: train_gpt
built: train
NOT BUILT: test/gpu_trainer/trainer
built: test/gpu_trainer/flash_attention
llmc-gpu: built build/llmc-gpu/nocudnn/train_gpt2cu
llmc-gpu: the cuDNN build failed (build/llmc-gpu/cudnn/build.log)
EOF
printf '%s\n' "[doctest] doctest version is \"2.4.11\"" "===============" \
    "[doctest] test cases: 34 | 33 passed | 1 failed | 0 skipped" "[doctest] assertions: 2 | 1 passed | 1 failed |" \
    > "$work/case/logs/test_gpu.log"
# doctest's older layout (fixed widths), and colours, which a terminal gets
printf '\033[0;36m[doctest] \033[0mtest cases:      4 | \033[0;32m     4 passed\033[0m |      0 failed |      0 skipped\n' \
    > "$work/case/logs/flash.log"
printf 'build\tok\t131\t210\nbench\tok\t88\t150\nllama\tok\t30\t40\ntest_gpu\tfailed (exit status 1)\t64\t120\nflash\ttimed out after 45 s\t45\t45\n' \
    > "$work/case/logs/stages.tsv"
(
    source scripts/gpu_check.sh
    parse_args --full
    LOGS=$work/case/logs INFO_GPU="NVIDIA H200, 143771 MiB, compute capability 9.0" INFO_DRIVER=580.159.03
    INFO_NVCC="release 13.0, V13.0.88" INFO_COMMIT=abc1234 LLMC_BUILD=$work/llmc
    write_summary
) > "$work/summary.md" 2>&1
s=$work/summary.md
check "summary: GPU and driver" has "$s" "- GPU: NVIDIA H200, 143771 MiB, compute capability 9.0; driver 580.159.03"
check "summary: nvcc and commit" has "$s" "- nvcc: release 13.0, V13.0.88" && has "$s" "- commit: abc1234"
check "summary: the build's row" has "$s" \
    "| build | 210 s | ok | 131 s | ours: NOT built: test/gpu_trainer/trainer; llm.c: nocudnn built, cudnn FAILED |"
check "summary: the bench's row" has "$s" "| bench | 150 s | ok | 88 s | auto picked fused; the figures are in the table below |"
check "summary: the Llama step's row" has "$s" "| llama | 40 s | ok | 30 s | 210.4 ms/step, 311482 tokens/s, MFU 24.1%, 29012 MiB |"
check "summary: test counts" has "$s" "| test_gpu | 120 s | failed (exit status 1) | 64 s | 33 passed, 1 failed, 0 skipped |"
check "summary: a timed-out stage, counts in the old layout with colours" has "$s" \
    "| flash | 45 s | timed out after 45 s | 45 s | 4 passed, 0 failed, 0 skipped |"
check "summary: a stage of the set not reached" has "$s" "| fp32 | | not reached | | |"
check "summary: the other sets" has "$s" "Other stage sets (--stage): default: build bench test_gpu flash; first-run: prepare epilogues"
check "summary: fused" has "$s" "| ours, --attention fused | 210.4 | 311482 | 24.1% | 29012 MiB | 0.76 | |"
check "summary: cublas" has "$s" "| ours, --attention cublas | 250.0 | 262144 | 20.2% | 29012 MiB | 0.64 | |"
check "summary: auto and its pick" has "$s" "| ours, --attention auto (picked fused) | 210.4 | 311482 |"
check "summary: llm.c with cuDNN" has "$s" "| llm.c, cuDNN attention | 160.2 | 408961 |"
check "summary: llm.c without, not built" has "$s" "| llm.c, its own attention | no figure"
check "summary: auto's per-layer times" has "$s" "auto timed one layer's attention: fused 1.52 ms, cublas 2.87 ms per layer"

# a build stopped at its limit: no per-target lines yet
mkdir -p "$work/case2/logs"
echo "ours: make -j16 -k PRECISION=bf16 train_gpt (log: build_ours.log)" > "$work/case2/logs/stage_build.log"
printf 'build\ttimed out after 200 s\t200\t200\n' > "$work/case2/logs/stages.tsv"
( source scripts/gpu_check.sh; parse_args; LOGS=$work/case2/logs; write_summary ) > "$work/summary2.md" 2>&1
check "summary: a build that ran out" has "$work/summary2.md" \
    "| build | 200 s | timed out after 200 s | 200 s | ours: unfinished (build_ours.log); llm.c: no result (build_llmc.log) |"
check "summary: no bench log, no figures" has "$work/summary2.md" "| ours, --attention fused | no figure (stage_bench.log) |"

# ---- the runner: stand-in stages, a fake GPU, --out. bench outlives its limit; the check goes on.
mkdir -p "$work/out"
printf '#!/bin/sh\necho "test_gpu: no GPU (cudaGetDeviceCount: no CUDA-capable device is detected): tests NOT run"\nexit 77\n' > "$work/no_gpu_test"
printf '#!/bin/sh\necho "[doctest] test cases: 4 | 4 passed | 0 failed | 0 skipped"\n' > "$work/passing_test"
chmod +x "$work/no_gpu_test" "$work/passing_test"
(
    source scripts/gpu_check.sh
    CAP[bench]=2 MIN=([build]=1 [bench]=1 [llama]=1 [test_gpu]=1 [flash]=1)
    stage_build() { echo "built: train_gpt"; }
    stage_llama() { :; }
    stage_bench() { sleep 60 & echo $! > "$work/sleeper"; wait; }
    # the test programs' runner, on stand-ins: one finds no GPU (exit 77), one passes
    stage_test_gpu() { cp "$RESULTS/summary.md" "$work/during.md"; run_test "$work/no_gpu_test" test_gpu.log; }
    stage_flash() { run_test "$work/passing_test" flash.log; }
    cd "$root" && PATH="$work/gpu:$PATH" GIT_COMMIT=feedbee main --budget 30 --out "$work/out"
) > "$work/run.out" 2>&1
rc=$?
check "runner: a stage that timed out makes exit status 1" [ $rc -eq 1 ]
check "runner: the limit is printed" has "$work/run.out" "==== bench: time limit 2 s"
check "runner: timed out" has "$work/out/summary.md" "| bench | 2 s | timed out after 2 s |"
gone() {  # gone PID: within 3 s (a killed process stays a zombie until it is reaped)
    local _; for _ in $(seq 30); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done; return 1
}
check "runner: its processes were ended" gone "$(cat "$work/sleeper")"
check "runner: the next stages ran" has_re "$work/out/summary.md" "^\| flash \| [0-9]+ s \| ok \| [0-9]+ s \| 4 passed, 0 failed, 0 skipped \|$"
check "runner: a stage's skip and why" has_re "$work/out/summary.md" "^\| test_gpu \| [0-9]+ s \| skipped: $work/no_gpu_test found no GPU \|"
check "runner: the commit" has "$work/out/summary.md" "- commit: feedbee"
check "runner: the summary is there while a stage runs" has_re "$work/during.md" "^\| test_gpu \| [0-9]+ s \| was running when the check stopped \|"
# (the build's limit is what the budget has left when it starts: 20 s, less on a busy machine)
check "runner: ... with the stages before it" has_re "$work/during.md" "^\| build \| [0-9]+ s \| ok \|"
check "runner: ... and those after it" has "$work/during.md" "| flash | | not reached | | |"
check "runner: the results line names --out's folder" has "$work/run.out" "results: $work/out/summary.md and $work/out/logs.tar.gz"
check "runner: two files in --out's folder" [ "$(ls "$work/out" | tr '\n' ' ')" = "logs.tar.gz summary.md " ]
check "runner: the logs in one archive" bash -c "tar -tzf '$work/out/logs.tar.gz' | grep -q '^logs/stage_bench.log$'"
# a budget too small for the last stage: skipped with a line saying so
(
    source scripts/gpu_check.sh
    stage_build() { :; }; stage_bench() { :; }; stage_llama() { :; }; stage_test_gpu() { :; }; stage_flash() { :; }
    MIN=([build]=1 [bench]=1 [llama]=1 [test_gpu]=1 [flash]=20)
    cd "$root" && PATH="$work/gpu:$PATH" main --budget 25 --out "$work/out2"
) > "$work/run2.out" 2>&1
check "runner: a stage the budget cannot fit is skipped (exit 0)" [ $? -eq 0 ]
check "runner: ... saying so" has_re "$work/run2.out" "^==== flash: skipped: 1[0-5] s of the budget left, it needs 20 s$"
check "runner: ... and in the table" has_re "$work/out2/summary.md" "^\| flash \| 1[0-5] s \| skipped: 1[0-5] s of the budget left, it needs 20 s \|"

# ---- the first-run stages' readers, on logs in the formats their programs print
mkdir -p "$work/fr"
step_log() {  # step_log FILE LOSS...: trainer step lines in host/run.h's format
    local f=$1 i=1 l; shift; : > "$f"
    for l in "$@"; do printf 'step %5s/%s | loss %s | lr 6.00e-04 | norm 1.204 | 160.1 ms | 51,200 tok/s | 238 TFLOP/s | eta 0:00\n' "$i" "$#" "$l" >> "$f"; i=$((i + 1)); done
}
step_log "$work/fr/fused.log" 10.9912 10.4021 9.9017 9.5003 9.2111 8.9876
step_log "$work/fr/separate.log" 10.9912 10.4025 9.9031 9.5012 9.2102 8.9901
step_log "$work/fr/wrong.log" 10.9912 10.4025 9.9031 9.9012 9.8102 9.7901
step_log "$work/fr/nan.log" 10.9912 10.4025 9.9031 nan 9.2102 8.9901
step_log "$work/fr/short.log" 10.9912 10.4025 9.9031
( source scripts/gpu_check.sh
  for other in separate wrong nan short; do
      compare_losses "$work/fr/fused.log" "$work/fr/$other.log" 6 > "$work/fr/cmp_$other.txt"; echo "rc=$?" >> "$work/fr/cmp_$other.txt"
  done )
check "epilogues: losses within 0.05 agree" has "$work/fr/cmp_separate.txt" \
    "losses: 6 of 6 steps compared, largest difference 0.0025 (tolerance 0.05): agree" && has "$work/fr/cmp_separate.txt" "rc=0"
check "epilogues: losses 0.8 apart differ" has "$work/fr/cmp_wrong.txt" "largest difference 0.8025 (tolerance 0.05): DIFFER" &&
    has "$work/fr/cmp_wrong.txt" "rc=1"
check "epilogues: a NaN loss fails" has "$work/fr/cmp_nan.txt" "(a loss is not a number)" && has "$work/fr/cmp_nan.txt" "rc=1"
check "epilogues: a run that stopped early fails" has "$work/fr/cmp_short.txt" "3 of 6 steps compared" &&
    has "$work/fr/cmp_short.txt" "rc=1"
# Nsight Compute's default report layout: the kernel's line, then each section's metric table
cat > "$work/fr/ncu.log" <<'EOF'
==PROF== Connected to process 4242 (dev/cuda/attention_fused)
==PROF== Profiling "forward": 0%....50%....100% - 9 passes
  void gpu::flash_mma::forward<64, false>(const __nv_bfloat16 *, __nv_bfloat16 *, float *, int, int, int) (16, 96, 1)x(128, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: GPU Speed Of Light Throughput
    ----------------------- ----------- ------------
    Metric Name             Metric Unit Metric Value
    ----------------------- ----------- ------------
    DRAM Frequency                  Ghz         2.62
    Memory Throughput                 %        43.21
    Duration                         us        81.28
    Compute (SM) Throughput           %        71.35
    ----------------------- ----------- ------------
  gpu::flash_mma::dkdv<64, false>(const __nv_bfloat16 *) (16, 96, 1)x(128, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: GPU Speed Of Light Throughput
    Memory Throughput                 %        12.50
    Compute (SM) Throughput           %        80.02
EOF
( source scripts/gpu_check.sh; ncu_kernels "$work/fr/ncu.log" ) > "$work/fr/ncu.txt"
check "ncu: one row per kernel, its name without the template" has "$work/fr/ncu.txt" "gpu::flash_mma::forward: SM 71.35%, memory 43.21%"
check "ncu: ... the second kernel too" has "$work/fr/ncu.txt" "gpu::flash_mma::dkdv: SM 80.02%, memory 12.50%"
check "ncu: two rows" [ "$(wc -l < "$work/fr/ncu.txt")" -eq 2 ]

# the first-run set through the runner, with stand-in stages whose output the summary reads
(
    source scripts/gpu_check.sh
    stage_prepare() { echo "built: train_gpt"; echo "built: dev/cuda/attention_fused"; }
    stage_epilogues() { echo "--epilogues fused: cuBLASLt errors: 0"; echo "--epilogues separate: cuBLASLt errors: 0"
                        compare_losses "$work/fr/fused.log" "$work/fr/separate.log" 6; }
    stage_sanitizer() { echo "memcheck: ok (ERROR SUMMARY: 0 errors)"; echo "racecheck: FAILED (exit status 1): RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"; return 1; }
    stage_ncu() { cp "$work/fr/ncu.log" "$LOGS/ncu.log"; ncu_kernels "$LOGS/ncu.log"; }
    stage_llama() { echo "skipped: ./train_gpt was not built"; return 77; }
    cd "$root" && PATH="$work/gpu:$PATH" GIT_COMMIT=c0ffee main --stage first-run --out "$work/out3"
) > "$work/run3.out" 2>&1
rc=$?
m=$work/out3/summary.md
check "first-run: a failed sanitizer makes exit status 1" [ $rc -eq 1 ]
check "first-run: the set and its budget" has "$m" "- stage set first-run, budget 300 s"
check "first-run: prepare's row" has_re "$m" "^\| prepare \| 90 s \| ok \| [0-9]+ s \| train_gpt, dev/cuda/attention_fused built \|$"
check "first-run: the epilogues' row" has "$m" \
    "| --epilogues fused: cuBLASLt errors: 0; --epilogues separate: cuBLASLt errors: 0; losses: 6 of 6 steps compared, largest difference 0.0025 (tolerance 0.05): agree |"
check "first-run: the sanitizer's row" has "$m" "| failed (exit status 1) |" &&
    has "$m" "memcheck: ok (ERROR SUMMARY: 0 errors); racecheck: FAILED (exit status 1): RACECHECK SUMMARY: 1 hazard"
check "first-run: ncu's row and table" has "$m" "| 2 kernels profiled (the table below) |" &&
    has "$m" "| gpu::flash_mma::forward | 71.35% | 43.21% |"
check "first-run: a skipped stage and why" has_re "$m" "^\| llama \| [0-9]+ s \| skipped: ./train_gpt was not built \|"
check "first-run: no step benchmark table" lacks "$m" "## The step"

# --bundle: llm.c's sources and doctest's header into the bundle folder
mkdir -p "$work/peer/src" "$work/inc/doctest"
echo "echo built" > "$work/peer/build.sh"; echo "// llm.c" > "$work/peer/src/train_gpt2.cu"; echo "// doctest" > "$work/inc/doctest/doctest.h"
( source scripts/gpu_check.sh; BUNDLE=$work/bundle; cd "$root" && LLMC_PEER=$work/peer DOCTEST_INC=$work/inc bundle ) > "$work/bundle.out" 2>&1
check "--bundle: exit 0 when both are found" [ $? -eq 0 ]
check "--bundle: llm.c's sources copied" [ -f "$work/bundle/llmc-gpu/src/train_gpt2.cu" ] && has "$work/bundle.out" "-> $work/bundle/llmc-gpu"
check "--bundle: doctest copied" [ -f "$work/bundle/include/doctest/doctest.h" ]
check "--bundle: says how large it is" has_re "$work/bundle.out" "^bundle: .* holds [0-9.]+[KMG]?; copy the checkout with it"
( source scripts/gpu_check.sh; BUNDLE=$work/bundle2; cd "$root" && LLMC_PEER=$work/nowhere bundle ) > "$work/bundle2.out" 2>&1
rc=$?
if [ -d shared/peers/llmc-gpu ]; then skip "--bundle without llm.c's sources (this checkout has shared/peers/llmc-gpu)"
else
    check "--bundle: llm.c's sources missing: exit 1" [ $rc -eq 1 ]
    check "--bundle: ... naming LLMC_PEER" has "$work/bundle2.out" "llm.c's sources not found (LLMC_PEER"
fi
( source scripts/gpu_check.sh; BUNDLE=$work/bundle; find_tools; echo "llmc=$LLMC_SRC doctest=$DOCTEST" ) > "$work/found.out" 2>&1
check "the check finds the bundle's llm.c" has "$work/found.out" "llmc=$work/bundle/llmc-gpu"

finish
