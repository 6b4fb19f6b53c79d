#!/usr/bin/env bash
# The compile matrix without a GPU: `make -f gpu.mk archs` (gpu.mk says what it covers: PTX of
# test/gpu_trainer/trainer.cu, which includes train_gpt.cu, for sm_75 to sm_120 in fp32 and bf16; ptxas
# for sm_75 fp32). Fails on any compile error. Skipped without nvcc.
set -u
cd "$(dirname "$0")/../.."
source test/suite_lib.sh  # pass, fail, not_run, finish
command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { not_run "compile matrix" "no nvcc"; finish; exit; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if make -f gpu.mk -j2 archs > "$log" 2>&1; then
    tail -1 "$log"
    pass "compile matrix"
else
    grep -E "error|Error" "$log" | head -20
    fail "compile matrix"
fi
finish
