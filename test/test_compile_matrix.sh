#!/usr/bin/env bash
# The compile matrix without a GPU: `make -f gpu.mk archs` (gpu.mk says what it covers: PTX of
# test/test_gpu.cu, which includes train_gpt.cu, for sm_75 to sm_120 in fp32 and bf16; ptxas
# for sm_75 fp32). Fails on any compile error. Skipped without nvcc.
set -u
cd "$(dirname "$0")/.."
command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { echo "SKIP compile matrix: no nvcc"; echo "0 passed, 0 failed"; exit 0; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if make -f gpu.mk -j2 archs > "$log" 2>&1; then
    tail -1 "$log"
    echo "1 passed, 0 failed"
else
    grep -E "error|Error" "$log" | head -20
    echo "0 passed, 1 failed"
    exit 1
fi
