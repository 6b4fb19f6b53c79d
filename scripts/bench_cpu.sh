#!/usr/bin/env bash
# CPU speed of ./train: ms per optimizer step, averaged over the steps after the first (which
# warms caches), for the GPT-2 124M shape at B=4, T=64, a small model with GPT-2's vocabulary
# the default model, and a Llama-3 (--model llama3: L=4, NH=8, KVH=2, C=256, F=768 by Meta's
# rule, V=256) at B=4, T=256. Random initialisation and the built-in corpus: no files needed.
#   scripts/bench_cpu.sh [STEPS [ROUNDS]]      (make bench; defaults 6 steps, 3 rounds)
# BENCH_SHAPES picks shapes (comma-separated among gpt2-124m, gpt2-small, default, llama;
# default all of them).
#
# Under each shape's line, the shares of ./train's step (the median over the rounds of each) spent
# in the matrix products, the attention, the element-wise passes (and the rest) and the optimizer,
# which ./train measures when TRAIN_PHASE_TIMES=1 (train.cpp; it changes no result).
#
# When python3 can import torch, each shape is also trained by a plain PyTorch model of the
# same shape (float32, eager, the same thread count): GPT-2 by dev/reference/gpt2_torch_bench.py,
# the Llama by dev/reference/llama_torch_bench.py (written by hand: RMSNorm, interleaved RoPE,
# grouped-query attention by scaled_dot_product_attention's enable_gqa, SwiGLU, untied head), the
# two taking turns ROUNDS times (ours, PyTorch, ours, ...) so that a machine whose speed drifts
# slows both alike; it prints the median of each and the median of the per-round ratios. For the
# Llama it first checks that the two have the same number of parameters. BENCH_HF=1 adds a line
# timing the Llama shape against Hugging Face's LlamaForCausalLM (attn_implementation="eager")
# instead of the hand-written model, in turns with ./train the same way.
#
# The load average is printed before and after: other work on the machine slows ./train and
# PyTorch unequally (docs/speed.md), so when the 1-minute load before was at least BENCH_MAX_LOAD
# (default: half the processors) or after it exceeded that plus the benchmark's own threads, it
# ends with a warning that the ratios describe a busy machine.
#
# With LLMC_DIR=/path/to/llm.c (a checkout where `make train_gpt2` was run and its
# gpt2_124M.bin and tiny Shakespeare shards exist), it also times llm.c's train_gpt2.c,
# which trains that same shape at B=4, T=64, and prints the ratio of the two.
set -eu
cd "$(dirname "$0")/.."
steps=${1:-6}
rounds=${2:-3}
threads=$(nproc)
common=(--val-every 0 --sample-every 0 -o "" -n "$steps")

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ours_ms() {  # ARGS...: one ./train run; prints its ms/step, GFLOP/s, parameter count and the shares
    # of its step (percent: products, attention, element-wise passes and the rest, optimizer)
    local out line params phases
    out=$(TRAIN_PHASE_TIMES=1 ./train "$@" "${common[@]}") && line=$(echo "$out" | grep '^average:') ||
        { echo "error: ./train $* failed" >&2; exit 1; }
    params=$(echo "$out" | sed -nE 's/^model: .* ([0-9,]+) parameters$/\1/p' | tr -d ,)
    phases=$(echo "$out" | sed -nE 's/^phases: .*products ([0-9.]+)%, attention ([0-9.]+)%, element-wise passes and the rest (-?[0-9.]+)%, optimizer ([0-9.]+)%$/\1 \2 \3 \4/p')
    echo "$(echo "$line" | sed -E 's/^average: ([0-9.]+) ms.* ([0-9.]+) GFLOP.*/\1 \2/') ${params:-?} ${phases:-? ? ? ?}"
}
# the PyTorch model of the shape being measured: its script and options (set before measure)
torch_bench=(dev/reference/gpt2_torch_bench.py)
torch_ms() {  # ARGS...: one run of the PyTorch model; prints its ms/step and parameter count (? if not printed)
    local out line params
    out=$(python3 "${torch_bench[@]}" "$@" -n "$steps" --threads "$threads") && line=$(echo "$out" | grep '^average:') ||
        { echo "error: ${torch_bench[*]} $* failed" >&2; exit 1; }
    params=$(echo "$out" | sed -nE 's/^parameters: ([0-9]+)$/\1/p')
    line=${line#average: }; echo "${line%% ms*} ${params:-?}"
}

have_torch=no
if python3 -c 'import torch' 2>/dev/null; then
    have_torch=yes
else
    echo "PyTorch not found: timing ./train alone. For the side-by-side figures install it (CPU build):"
    echo "    pip install torch --index-url https://download.pytorch.org/whl/cpu"
    rounds=1
fi

# measure NAME ARGS...: ROUNDS turns of ./train (and PyTorch), then one line of figures
measure() {
    local name=$1; shift
    local ours=() gflops=() torch=() ratios=() shares=() i o t p q s1 s2 s3 s4
    for ((i = 0; i < rounds; i++)); do
        read -r o t p s1 s2 s3 s4 < <(ours_ms "$@"); ours+=("$o"); gflops+=("$t")
        shares+=("$s1 $s2 $s3 $s4")
        if [ $have_torch = yes ]; then
            read -r t q < <(torch_ms "$@"); torch+=("$t")
            # the same model: where the PyTorch script counts its parameters, as many as ./train's
            if [ "$q" != "?" ] && [ "$q" != "$p" ]; then
                echo "error: ${torch_bench[*]} has $q parameters, ./train $p (for $*): not the same shape" >&2; exit 1
            fi
            ratios+=("$(awk -v t="$t" -v o="$o" 'BEGIN { print t / o }')")
        fi
    done
    o=$(printf '%s\n' "${ours[@]}" | median)
    printf "%-30s ./train %7.1f ms/step %5.1f GFLOP/s" "$name" "$o" "$(printf '%s\n' "${gflops[@]}" | median)"
    if [ $have_torch = yes ]; then
        t=$(printf '%s\n' "${torch[@]}" | median)
        printf "   PyTorch %7.1f ms/step   PyTorch/ours %.2fx (median of %d rounds: %s)" "$t" \
            "$(printf '%s\n' "${ratios[@]}" | median)" "$rounds" "$(printf '%.2f ' "${ratios[@]}" | xargs)"
    fi
    echo
    # where ./train's step goes (TRAIN_PHASE_TIMES, train.cpp): each share's median over the rounds
    if [[ ${shares[0]} != *"?"* ]]; then
        local col names=(products attention "element-wise passes and the rest" optimizer) parts=()
        for col in 1 2 3 4; do
            parts+=("${names[col - 1]} $(printf '%s\n' "${shares[@]}" | awk -v c="$col" '{ print $c }' | median |
                                         awk '{ printf "%.1f", $1 }')%")
        done
        printf "    ./train's step: %s, %s, %s, %s\n" "${parts[@]}"
    fi
    ms=$o
}

load1() { cut -d' ' -f1 /proc/loadavg; }
max_load=${BENCH_MAX_LOAD:-$(awk -v n="$threads" 'BEGIN { print n / 2 }')}
load_before=$(load1)
echo "load average before: $load_before (1 minute; busy from $max_load, BENCH_MAX_LOAD)"
# at_exit: the load after, and a warning when the machine was busy (the benchmark's own threads
# add about one per thread to the load after)
at_exit() {
    local after; after=$(load1)
    echo "load average after: $after"
    if awk -v b="$load_before" -v a="$after" -v m="$max_load" -v t="$threads" 'BEGIN { exit !(b >= m || a > m + t) }'; then
        echo "warning: the machine was busy (load average $load_before before, $after after, on $threads processors):" \
             "other work slows ./train and PyTorch unequally, so these figures say how the two share a busy machine," \
             "not how they compare on a quiet one; rerun when it is quiet (docs/speed.md)"
    fi
}
trap at_exit EXIT
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $threads cores," \
     "$(grep -qw avx512f /proc/cpuinfo && echo AVX-512 || { grep -qw avx2 /proc/cpuinfo && echo AVX2 || echo 'no AVX2'; })"
echo "(median ms per step over $rounds rounds of $steps steps each, the first step of each not counted)"
shapes=",${BENCH_SHAPES:-gpt2-124m,gpt2-small,default,llama},"
for s in $(echo "$shapes" | tr , ' '); do
    case $s in gpt2-124m|gpt2-small|default|llama) ;; *) echo "error: BENCH_SHAPES: no shape $s (gpt2-124m, gpt2-small, default, llama)"; exit 1;; esac
done
wanted() { [[ $shapes == *",$1,"* ]]; }
ours_124m=
if wanted gpt2-124m; then
    measure "GPT-2 124M, B=4 T=64" --layers 12 --heads 12 --channels 768 --max-seq-len 1024 \
            --vocab 50257 --padded-vocab 50304 -b 4 -t 64
    ours_124m=$ms
fi
wanted gpt2-small && measure "L4 NH4 C128 V=50257, B=8 T=64" --layers 4 --heads 4 --channels 128 --max-seq-len 1024 \
        --vocab 50257 --padded-vocab 50304 -b 8 -t 64
wanted default && measure "default model, B=16 T=64" --layers 4 --heads 4 --channels 128 --max-seq-len 256 --vocab 256 -b 16 -t 64
# Llama-3: L=4 NH=8 KVH=2 C=256, F = 768 (Meta's rule: 8·256/3 = 682, up to a multiple of 256), V = Vp = 256
llama=(--model llama3 --layers 4 --heads 8 --kv-heads 2 --channels 256 --max-seq-len 256 --vocab 256 -b 4 -t 256)
if wanted llama; then
    torch_bench=(dev/reference/llama_torch_bench.py)
    measure "Llama L4 C256 KVH2, B=4 T=256" "${llama[@]}"
    if [ "${BENCH_HF:-0}" = 1 ] && [ $have_torch = yes ]; then
        if python3 -c 'import transformers' 2>/dev/null; then
            torch_bench=(dev/reference/llama_torch_bench.py --impl hf)
            measure "Llama, HF LlamaForCausalLM" "${llama[@]}"
        else
            echo "BENCH_HF=1: transformers not found (pip install transformers): no line for LlamaForCausalLM"
        fi
    fi
fi

[ -n "${LLMC_DIR:-}" ] || exit 0
[ -n "$ours_124m" ] || { echo "error: LLMC_DIR needs the GPT-2 124M shape (BENCH_SHAPES=gpt2-124m)"; exit 1; }
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
