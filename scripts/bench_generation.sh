#!/usr/bin/env bash
# Generation speed of ./train (host/sample.h): how the time of a sample grows with its length.
# With the key/value cache each new token is one position through the layers, so 512 tokens
# should cost about 512/64 = 8 times 64 tokens (a little more: attention reads a longer cache);
# without it each token is a forward over the whole context, which grows with it, so the ratio
# is far larger. Random weights, no files: -n 0 draws one sample and ends.
#   scripts/bench_generation.sh [ROUNDS]        (make bench runs it after bench_cpu.sh; default 3)
# Shapes: a model with GPT-2's vocabulary (L=6, C=384, NH=6, V=50,257, a 1,024-token context),
# with the cache, 64 and 512 tokens; and the default model (V=256) with and without the cache,
# 64 and 512 tokens each. The lengths take turns within each round (64, 512, 64, 512, ...) so a
# machine whose speed drifts slows both alike; it prints the median seconds of each and the
# median of the rounds' ratios. The seconds are the sample's own (its line: "N tokens in M ms"),
# not the process's start-up.
set -eu
cd "$(dirname "$0")/.."
rounds=${1:-3}
[ -x ./train ] || { echo "error: ./train is not built (make train)" >&2; exit 1; }

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
seconds() {  # N ARGS...: one sample of N tokens; prints its seconds
    local n=$1 out
    shift
    out=$(./train "$@" -n 0 --val-every 0 -o "" --sample-len "$n" 2>&1) ||
        { echo "error: ./train $* --sample-len $n failed" >&2; exit 1; }
    sed -nE "s/^---- $n tokens in ([0-9,]+) ms, .*/\1/p" <<<"$out" | tr -d , | awk '{ print $1 / 1000 }'
}
# NAME ARGS...: the two lengths in turns, then one line
bench() {
    local name=$1 r s64 s512 a=() b=() ratios=()
    shift
    for ((r = 0; r < rounds; r++)); do
        s64=$(seconds 64 "$@") s512=$(seconds 512 "$@")
        a+=("$s64") b+=("$s512") ratios+=("$(awk -v x="$s512" -v y="$s64" 'BEGIN { print x / y }')")
    done
    printf "%-44s %10.3f s %10.3f s %8.1f\n" "$name" "$(printf '%s\n' "${a[@]}" | median)" \
        "$(printf '%s\n' "${b[@]}" | median)" "$(printf '%s\n' "${ratios[@]}" | median)"
}

echo "generation, ./train, $(nproc) threads, $rounds rounds; load average before: $(cut -d' ' -f1 /proc/loadavg)"
printf "%-44s %12s %12s %8s\n" "model, path" "64 tokens" "512 tokens" "ratio"
bench "L=6 C=384 V=50257 T=1024, cache" --layers 6 --heads 6 --channels 384 --max-seq-len 1024 -t 1024 -b 1 \
    --vocab 50257
bench "default shape (L=4 C=128 V=256), T=1024, cache" --max-seq-len 1024 -t 1024 -b 1
bench "default shape (L=4 C=128 V=256), T=1024, no cache" --max-seq-len 1024 -t 1024 -b 1 --kv-cache 0
echo "load average after: $(cut -d' ' -f1 /proc/loadavg); the ratio with the cache should be about 8 (512/64)"
