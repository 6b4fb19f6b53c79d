#!/usr/bin/env bash
# CPU speed of ./train: ms per optimizer step and tokens/s, averaged over the steps after
# the first (which warms caches), for the GPT-2 124M shape at B=4, T=64 and for the
# default model. Random initialisation and the built-in corpus: no files needed.
#   scripts/bench_cpu.sh [STEPS]      (make bench)
set -eu
cd "$(dirname "$0")/.."
steps=${1:-6}
common=(--val-every 0 --sample-every 0 -o "" -n "$steps")
measure() {  # NAME ARGS...: runs ./train and prints its average line
    local name=$1; shift
    local line
    line=$(./train "$@" "${common[@]}" | grep '^average:') || { echo "$name: the run failed"; exit 1; }
    printf "%-34s %s\n" "$name" "${line#average: }"
}
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
measure "GPT-2 124M shape, B=4 T=64" --layers 12 --heads 12 --channels 768 --max-seq-len 1024 \
        --vocab 50257 --padded-vocab 50304 -b 4 -t 64
measure "default model, B=16 T=64" 
