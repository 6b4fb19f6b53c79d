#!/usr/bin/env bash
# CPU speed of ./train: ms per optimizer step and tokens/s, averaged over the steps after
# the first (which warms caches), for the GPT-2 124M shape at B=4, T=64 and for the
# default model. Random initialisation and the built-in corpus: no files needed.
#   scripts/bench_cpu.sh [STEPS]      (make bench)
#
# With LLMC_DIR=/path/to/llm.c (a checkout where `make train_gpt2` was run and its
# gpt2_124M.bin and tiny Shakespeare shards exist), it also times llm.c's train_gpt2.c,
# which trains that same shape at B=4, T=64, and prints the ratio of the two.
set -eu
cd "$(dirname "$0")/.."
steps=${1:-6}
common=(--val-every 0 --sample-every 0 -o "" -n "$steps")
measure() {  # NAME ARGS...: runs ./train and prints its average line
    local name=$1; shift
    local line
    line=$(./train "$@" "${common[@]}" | grep '^average:') || { echo "$name: the run failed"; exit 1; }
    printf "%-34s %s\n" "$name" "${line#average: }"
    ms=${line#average: }; ms=${ms%% ms*}
}
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
measure "GPT-2 124M shape, B=4 T=64" --layers 12 --heads 12 --channels 768 --max-seq-len 1024 \
        --vocab 50257 --padded-vocab 50304 -b 4 -t 64
ours_124m=$ms
measure "default model, B=16 T=64"

[ -n "${LLMC_DIR:-}" ] || exit 0
[ -x "$LLMC_DIR/train_gpt2" ] || { echo "error: no $LLMC_DIR/train_gpt2 (run make train_gpt2 there)"; exit 1; }
# llm.c prints "step N: train loss X (took Y ms)" for the step alone (validation and
# sampling happen outside that timer); like ours, average the STEPS-1 steps after the
# first, then stop it.
llmc_ms=$(cd "$LLMC_DIR" && { stdbuf -oL ./train_gpt2 2>/dev/null || true; } |
          awk -v n="$steps" '/took/ { if (++k > n) exit; if (k > 1) { s += $(NF-1); c++ } }
                            END { if (c) printf "%.1f", s / c }')
[ -n "$llmc_ms" ] || { echo "error: $LLMC_DIR/train_gpt2 printed no step times"; exit 1; }
printf "%-34s %s ms/step (its steps 1..%d)\n" "llm.c train_gpt2, same shape" "$llmc_ms" "$((steps - 1))"
awk -v a="$llmc_ms" -v b="$ours_124m" 'BEGIN { printf "ratio llm.c / ours: %.2fx\n", a / b }'
