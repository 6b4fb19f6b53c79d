#!/usr/bin/env bash
# Everything a machine with a GPU should check, in one command: finds nvcc, NCCL and
# doctest, builds train_gpt and test/test_gpu for this machine's GPU in both precisions
# (fp32, then bf16, the default, which stays built), runs the GPU tests, the default run's
# 300 steps against ./train (scripts/compare_default_run.sh), the kernel workbenches (dev/cuda)
# in both precisions (attention_fused times one layer's attention on both paths) and the
# benchmark (the whole step on each attention path), checks that two replicas train like one
# GPU when there are two GPUs, and ends with a summary table.
#
#   scripts/gpu_check.sh [--quick] [--no-workbenches]
#
#   --quick           benchmark B=8 only
#   --no-workbenches  skip dev/cuda
# Logs go to $LOG_DIR (default /tmp/gpu_check). Exit status 1 if anything failed.
# NCCL is found in CUDA's directories, the system's, NCCL_HOME, or the nvidia-nccl Python
# wheel (e.g. PyTorch's environment under /opt/torch/.venv); doctest in /usr/include,
# DOCTEST_INC, or .deps/include (a copy of /usr/include/doctest brought along).
set -uo pipefail
cd "$(dirname "$0")/.."
QUICK=0 WORKBENCHES=1
for a in "$@"; do
    case "$a" in
        --quick) QUICK=1 ;;
        --no-workbenches) WORKBENCHES=0 ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown option $a (see --help)" >&2; exit 2 ;;
    esac
done
LOG_DIR=${LOG_DIR:-/tmp/gpu_check}
mkdir -p "$LOG_DIR"
SUMMARY=()
FAILED=0
note() { SUMMARY+=("$(printf "%-24s %s" "$1" "$2")"); }
fail() { note "$1" "FAILED: $2"; FAILED=1; }
section() { echo; echo "==== $*"; }

# ---- tools
section "tools"
NVCC=$(command -v nvcc || true)
for d in ${CUDA_HOME:-} /usr/local/cuda /opt/cuda; do
    [ -z "$NVCC" ] && [ -x "$d/bin/nvcc" ] && NVCC=$d/bin/nvcc
done
if [ -z "$NVCC" ]; then echo "gpu_check: nvcc not found (PATH, CUDA_HOME, /usr/local/cuda)"; exit 1; fi
export PATH="$(dirname "$NVCC"):$PATH"
echo "nvcc: $NVCC ($("$NVCC" --version | grep -o 'release [0-9.]*'))"
if ! nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version --format=csv,noheader; then
    echo "gpu_check: nvidia-smi finds no GPU"; exit 1
fi
NGPU=$(nvidia-smi -L | grep -c '^GPU')

CUDA_INC=$(dirname "$NVCC")/../include
if [ -z "${NCCL_HOME:-}" ] && [ ! -f "$CUDA_INC/nccl.h" ] && [ ! -f /usr/include/nccl.h ]; then
    header=$(find /opt /usr/local/lib /usr/lib/python3* -name nccl.h -path '*nvidia*/include/*' 2>/dev/null | head -1)
    [ -n "$header" ] && export NCCL_HOME=$(dirname "$(dirname "$header")")
fi
MAKE_VARS=()
[ -n "${NCCL_HOME:-}" ] && MAKE_VARS+=("NCCL_HOME=$NCCL_HOME") && echo "NCCL: $NCCL_HOME"
for d in ${DOCTEST_INC:-} /usr/include /usr/local/include .deps/include; do
    if [ -f "$d/doctest/doctest.h" ]; then MAKE_VARS+=("DOCTEST_INC=$d"); DOCTEST=$d; break; fi
done
echo "doctest: ${DOCTEST:-NOT FOUND (test/test_gpu cannot be built)}"

# ---- build
section "build"
JOBS=$(nproc 2>/dev/null || echo 2)
make -f gpu.mk gpu_info ${MAKE_VARS[@]+"${MAKE_VARS[@]}"}
[ -f train ] || make train > "$LOG_DIR/build_train.log" 2>&1 || true  # the CPU side of the checkpoint tests
[ -n "${DOCTEST:-}" ] || fail "build test/test_gpu" "doctest.h not found"
for precision in fp32 bf16; do  # bf16 last: ./train_gpt stays the default build
    vars=(PRECISION=$precision ${MAKE_VARS[@]+"${MAKE_VARS[@]}"})
    if ! make -f gpu.mk -j2 train_gpt "${vars[@]}" > "$LOG_DIR/build_train_gpt_$precision.log" 2>&1; then
        tail -30 "$LOG_DIR/build_train_gpt_$precision.log"
        fail "build train_gpt $precision" "see $LOG_DIR/build_train_gpt_$precision.log"
        continue
    fi
    note "build train_gpt $precision" "ok"
    [ -n "${DOCTEST:-}" ] || continue
    if ! make -f gpu.mk test/test_gpu "${vars[@]}" > "$LOG_DIR/build_test_gpu_$precision.log" 2>&1; then
        tail -30 "$LOG_DIR/build_test_gpu_$precision.log"
        fail "build test_gpu $precision" "see $LOG_DIR/build_test_gpu_$precision.log"
        continue
    fi
    # ---- GPU tests
    section "test/test_gpu, $precision"
    ./test/test_gpu 2>&1 | tee "$LOG_DIR/test_gpu_$precision.log"
    rc=${PIPESTATUS[0]}
    counts=$(grep '^\[doctest\] test cases:' "$LOG_DIR/test_gpu_$precision.log" | tail -1 | sed -E 's/\[doctest\] test cases: *//')
    if [ "$rc" -eq 0 ]; then note "test_gpu $precision" "ok: ${counts:-?}"
    elif [ "$rc" -eq 77 ]; then fail "test_gpu $precision" "found no GPU (exit 77)"
    else fail "test_gpu $precision" "${counts:-exit status $rc}"; fi
    # the fused attention's own tests, on this GPU's tensor cores
    if make -f gpu.mk test/test_flash_attention "${vars[@]}" > "$LOG_DIR/build_test_flash_$precision.log" 2>&1; then
        section "test/test_flash_attention, $precision"
        ./test/test_flash_attention 2>&1 | tee "$LOG_DIR/test_flash_$precision.log"
        rc=${PIPESTATUS[0]}
        counts=$(grep '^\[doctest\] test cases:' "$LOG_DIR/test_flash_$precision.log" | tail -1 | sed -E 's/\[doctest\] test cases: *//')
        [ "$rc" -eq 0 ] && note "test_flash $precision" "ok: ${counts:-?}" || fail "test_flash $precision" "${counts:-exit status $rc}"
    else
        tail -30 "$LOG_DIR/build_test_flash_$precision.log"
        fail "build test_flash $precision" "see $LOG_DIR/build_test_flash_$precision.log"
    fi
done
# the default run's 300 steps against ./train (bf16, the build left in place)
if [ -x train_gpt ] && [ -x train ]; then
    section "the default run: train_gpt against train"
    if scripts/compare_default_run.sh ./train_gpt 2>&1 | tee "$LOG_DIR/default_run.log"; then
        note "default run (300 steps)" "ok: $(grep -o 'relative difference [^ ]*' "$LOG_DIR/default_run.log")"
    else fail "default run (300 steps)" "see $LOG_DIR/default_run.log"; fi
fi

# ---- kernel workbenches
if [ "$WORKBENCHES" -eq 1 ]; then
    for precision in fp32 bf16; do
        section "dev/cuda workbenches, $precision"
        if make -C dev/cuda -j"$JOBS" PRECISION=$precision ${MAKE_VARS[@]+"${MAKE_VARS[@]}"} \
                > "$LOG_DIR/build_dev_cuda_$precision.log" 2>&1; then
            bad=""
            for b in layernorm attention_softmax attention_fused crossentropy gelu encoder_backward adamw; do
                ./dev/cuda/$b 2>&1 | tee -a "$LOG_DIR/dev_cuda_$precision.log" || bad="$bad $b"
            done
            if [ -z "$bad" ]; then note "workbenches $precision" "ok (tables in $LOG_DIR/dev_cuda_$precision.log)"
            else fail "workbenches $precision" "failed:$bad"; fi
        else
            tail -20 "$LOG_DIR/build_dev_cuda_$precision.log"; fail "workbenches $precision" "build failed"
        fi
    done
fi

# ---- two replicas against one GPU: same global batch, same losses
if [ "$NGPU" -ge 2 ] && [ -x train_gpt ]; then
    section "replicas: 2 GPUs (B=4) against 1 GPU (B=8), global batch 8×64"
    args=(--layers 2 --heads 2 --channels 64 --max-seq-len 64 -t 64 -d 512 -n 5 --val-every 0 --sample-every 0 -o "")
    losses() { grep -E '^step ' "$1" | sed -E 's/.*\| loss ([0-9.]+) \|.*/\1/'; }
    ./train_gpt "${args[@]}" -b 8 > "$LOG_DIR/replicas_1gpu.log" 2>&1
    init="$LOG_DIR/nccl_init.$$"
    rm -f "$init"
    for r in 0 1; do  # as srun would start them, without MPI
        SLURM_JOB_ID=gpucheck$$ SLURM_STEP_ID=0 SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r \
            ./train_gpt "${args[@]}" -b 4 --nccl-init-file "$init" > "$LOG_DIR/replicas_rank$r.log" 2>&1 &
    done
    wait
    cat "$LOG_DIR/replicas_rank0.log"
    one=$(losses "$LOG_DIR/replicas_1gpu.log" | tr '\n' ' ') two=$(losses "$LOG_DIR/replicas_rank0.log" | tr '\n' ' ')
    echo "1 GPU:  $one"; echo "2 GPUs: $two"
    # 1e-3 on the printed 4-decimal losses: the splits differ only in the order of sums
    if [ -n "$one" ] && awk -v a="$one" -v b="$two" 'BEGIN { n = split(a, x, " "); m = split(b, y, " ");
            if (n != m || n == 0) exit 1; for (i = 1; i <= n; i++) if (x[i] - y[i] > 1e-3 || y[i] - x[i] > 1e-3) exit 1 }'; then
        note "replicas (no MPI)" "ok: 2 GPUs match 1 GPU over 5 steps"
    else
        fail "replicas (no MPI)" "losses differ, or a run failed (logs in $LOG_DIR)"
    fi
else
    note "replicas" "skipped: $NGPU GPU on this machine"
fi

# ---- benchmark
section "benchmark"
bench_args=(--no-kernels)  # the workbenches above printed the kernels' times
[ "$QUICK" -eq 1 ] && bench_args+=(--batch 8)
if make -f gpu.mk build/train_gpt_bf16 build/train_gpt_fp32 ${MAKE_VARS[@]+"${MAKE_VARS[@]}"} \
        > "$LOG_DIR/build_bench.log" 2>&1; then
    bash scripts/bench_gpu.sh "${bench_args[@]}" 2>&1 | tee "$LOG_DIR/bench.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] && note "benchmark" "ok" || fail "benchmark" "see $LOG_DIR/bench.log"
else
    tail -20 "$LOG_DIR/build_bench.log"; fail "benchmark" "build failed"
fi

# ---- summary
section "summary ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1))"
printf "%s\n" "${SUMMARY[@]}"
if [ -f "$LOG_DIR/bench.log" ]; then echo; grep -E '^(\||peaks|GPU:|llm.c)' "$LOG_DIR/bench.log"; fi
for precision in fp32 bf16; do  # one layer's attention, forward and backward, on each path
    [ -f "$LOG_DIR/dev_cuda_$precision.log" ] || continue
    echo; echo "attention per layer, $precision:"
    grep -A8 '^causal attention forward + backward' "$LOG_DIR/dev_cuda_$precision.log" | grep -E '^(1|2|fused / cuBLAS)'
done
echo
[ "$FAILED" -eq 0 ] && echo "gpu_check: all passed" || echo "gpu_check: SOME CHECKS FAILED"
exit $FAILED
