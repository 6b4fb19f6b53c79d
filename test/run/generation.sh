#!/usr/bin/env bash
# Samples from the command line, on each trainer and family: with a fixed seed the default model
# (-n 0: random weights, nothing trained or written) samples the same tokens with the key/value
# cache (--kv-cache 1, the default) and without it (--kv-cache 0, a full forward per token), in
# a window short enough (-t 24, 400 tokens) that the context restarts many times; the sample
# line (longer than 1,024 characters) is whole and reports its speed; the plan counts the cache's memory. The tokens are compared on the
# float32 tiers (train, train_gpt_cpu_fp32): bf16 samples may part at a near tie, and its cached
# logits are checked against the full forward's within a bound in test/gpu_trainer/trainer.cu.
set -u
cd "$(dirname "$0")/../.."
source test/suite_lib.sh
trainers=(./train)
[ -x ./train_gpt_cpu_fp32 ] && trainers+=(./train_gpt_cpu_fp32)
[ -x ./train_gpt_cpu_fp32 ] || not_run "train_gpt_cpu_fp32's samples" "train_gpt_cpu_fp32 is not built"

# the sample's text: the lines between its header and its closing line
sample_text() { sed -n '/^---- sample at step/,/^---- [0-9,]* tokens in /p' <<<"$1" | sed '1d;$d'; }
for train in "${trainers[@]}"; do
    for model in gpt2 llama3; do
        run="$train --model $model -n 0 --val-every 0 -t 24 -b 1 --sample-len 400 --top-k 40 --sample-seed 9"
        with=$($run 2>&1) || { fail "$train $model: -n 0 samples"; echo "$with" | tail -3; continue; }
        without=$($run --kv-cache 0 2>&1) || { fail "$train $model --kv-cache 0: -n 0 samples"; continue; }
        a=$(sample_text "$with") b=$(sample_text "$without")
        if [ -n "$a" ] && [ "$a" = "$b" ]; then pass "$train $model: the same 400 tokens with and without the cache"
        else fail "$train $model: the same 400 tokens with and without the cache"; diff <(echo "$a") <(echo "$b") | head -5; fi
        grep -qE '^---- 400 tokens in [0-9,]+ ms, [0-9,]+ tokens/s ----$' <<<"$with" &&
            grep -qE '^---- 400 tokens in [0-9,]+ ms, [0-9,]+ tokens/s \(no key/value cache\) ----$' <<<"$without" &&
            pass "$train $model: the sample line gives its tokens per second, and says when the cache is off" ||
            fail "$train $model: the sample line gives its tokens per second, and says when the cache is off"
        grep -q '^memory per replica: .*key/value cache (samples) ' <<<"$with" &&
            ! grep -q 'key/value cache' <<<"$(grep '^memory per replica' <<<"$without")" &&
            pass "$train $model: the plan counts the cache, and only when it is used" ||
            fail "$train $model: the plan counts the cache, and only when it is used"
    done
done
# no samples: no cache in the plan
out=$(./train -n 0 --val-every 1 --val-tokens 256 --sample-every 0 2>&1)
grep '^memory per replica' <<<"$out" | grep -q 'key/value cache' && fail "--sample-every 0: no cache in the plan" ||
    pass "--sample-every 0: no cache in the plan"
finish
