#!/usr/bin/env bash
# make bench's Llama line (scripts/bench_cpu.sh, BENCH_SHAPES=llama, 2 steps, 1 round): printed
# without PyTorch (./train's figure alone, and the install hint) and with it (PyTorch's figure
# and the ratio, the two models' parameter counts agreeing); and the hand-written PyTorch Llama
# it times (dev/reference/llama_torch_bench.py --check) against Hugging Face's LlamaForCausalLM.
# Nothing here compares times: only the lines' form is checked.
set -u
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source test/suite_lib.sh  # pass, fail, not_run, check, finish
[ -x ./train ] || { fail "./train is built (make train)"; finish; exit 1; }
line='^Llama L4 C256 KVH2, B=4 T=256 +\./train +[0-9.]+ ms/step +[0-9.]+ GFLOP/s'

# no torch: a python3 that cannot import it comes first on PATH
mkdir "$work/bin" && printf '#!/bin/sh\nexit 1\n' >"$work/bin/python3" && chmod +x "$work/bin/python3"
PATH="$work/bin:$PATH" BENCH_SHAPES=llama bash scripts/bench_cpu.sh 2 1 >"$work/alone.out" 2>&1
rc=$?
cat "$work/alone.out"
check "without torch: exit status 0" [ "$rc" -eq 0 ]
check "without torch: it says so" grep -q '^PyTorch not found: timing ./train alone' "$work/alone.out"
check "without torch: the Llama line, ./train's figure alone" \
    bash -c "grep -E '$line *\$' '$work/alone.out' | grep -vq PyTorch"
check "BENCH_SHAPES=llama: only the Llama line" [ "$(grep -c ' ms/step' "$work/alone.out")" -eq 1 ]
# under it, where ./train's step went (TRAIN_PHASE_TIMES, train.cpp): each of the four phases runs
# in every step, so each share is above 0, and they make up the step (100%, each rounded to 0.1)
shares_ok() {  # FILE: its one line of shares, each above 0, the four adding up to 100 (± the rounding)
    sed -nE "s/^    \.\/train's step: products ([0-9.]+)%, attention ([0-9.]+)%, element-wise passes and the rest ([0-9.]+)%, optimizer ([0-9.]+)%\$/\1 \2 \3 \4/p" "$1" |
        awk '{ s = $1 + $2 + $3 + $4; ok = $1 > 0 && $2 > 0 && $3 > 0 && $4 > 0 && s > 99.7 && s < 100.3 }
             END { exit !(NR == 1 && ok) }'
}
check "the shares of ./train's step: products, attention, element-wise passes, optimizer, each above 0, adding up to 100%" \
    shares_ok "$work/alone.out"
BENCH_SHAPES=llama,gpt3 bash scripts/bench_cpu.sh 2 1 >"$work/bad.out" 2>&1
rc=$?
check "an unknown shape in BENCH_SHAPES is refused, by name, before any run" \
    bash -c "[ $rc -ne 0 ] && grep -q 'no shape gpt3' '$work/bad.out' && ! grep -q ms/step '$work/bad.out'"

if ! python3 -c 'import torch' 2>/dev/null; then
    not_run "with torch: the Llama line against PyTorch" "torch is not installed (pip install torch --index-url https://download.pytorch.org/whl/cpu)"
else
    BENCH_SHAPES=llama bash scripts/bench_cpu.sh 2 1 >"$work/torch.out" 2>&1
    rc=$?
    cat "$work/torch.out"
    check "with torch: exit status 0" [ "$rc" -eq 0 ]
    check "with torch: the Llama line with PyTorch's figure and the ratio" \
        grep -qE "$line +PyTorch +[0-9.]+ ms/step +PyTorch/ours [0-9.]+x \(median of 1 rounds: [0-9.]+\)\$" "$work/torch.out"
    if python3 -c 'import transformers' 2>/dev/null; then
        # (its own PASS lines and count shown only when it fails: this suite counts it as one case)
        python3 dev/reference/llama_torch_bench.py --check >"$work/check.out" 2>&1
        rc=$?
        [ "$rc" -eq 0 ] || cat "$work/check.out"
        check "the hand-written Llama computes LlamaForCausalLM's logits, loss and gradients (--check)" [ "$rc" -eq 0 ]
    else
        not_run "the hand-written Llama against LlamaForCausalLM" "transformers is not installed"
    fi
fi
finish
