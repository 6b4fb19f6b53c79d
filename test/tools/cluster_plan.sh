#!/usr/bin/env bash
# The planner's cluster layouts (host/cluster.h, docs/cluster.md): --gpus, --gpus-per-node, --tp
# and --pp in a dry run. The expected values are worked out by hand from the documents' numbers
# and written here as literals, never taken from the planner:
#   Llama-3.1 70B (80 layers, C = 8,192, 70,553,706,496 parameters, Meta's count) on 16,384 GPUs
#   in nodes of 8, TP = 8, PP = 4: 16,384 / 8 = 2,048 nodes; T·P = 32 GPUs per replica;
#   16,384 / 32 = 512 replicas; 80 / 4 = 20 layers a stage; a micro-batch of 4 × 8,192 =
#   32,768 tokens, 67,108,864 / (32,768 × 512) = 4 accumulation steps.
#   Per GPU: 70,553,706,496 / 32 = 2,204,803,328 parameters; their float32 gradients' ring
#   all-reduce over 512: 2 × 511/512 × 4 × 2,204,803,328 = 17,603,976,572 bytes = 16.4 GiB.
#   Tensor parallel: 4 all-reduces a layer × 20 layers × A = 4 = 320, each of B·T·C =
#   4 × 8,192 × 8,192 bf16 = 512 MiB, a ring over 8 sending 2 × 7/8 × 512 MiB = 896 MiB:
#   320 × 896 MiB = 280 GiB. Bubble (P − 1)/(A + P − 1) = 3/7 = 42.9%.
#   With -b 1 -d 4,194,304 (512 sequences of 8,192): A = 4,194,304 / (8,192 × 512) = 1, bubble
#   3/4 = 75%; 15,000,000,000,000 / 4,194,304 = 3,576,278.6 -> 3,576,278 steps; the bubble is
#   under 10% from 3/(A + 3) <= 0.1, A >= 27.
# Then every bad layout: exit status 2 and one line naming the numbers; and a plan that needs no
# data. Under a second: dry runs only.
set -u
cd "$(dirname "$0")/../.."
source test/suite_lib.sh  # pass, fail, finish
[ -x ./train ] || { echo "./train is not built (make train)"; echo "0 passed, 1 failed"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# has FILE WHAT REGEX: the output holds a line matching REGEX (grep -E)
has() { if grep -qE -- "$3" "$1"; then pass "$2"; else fail "$2: no line matches /$3/ in:"; sed 's/^/    /' "$1"; fi; }
hasnt() { if grep -qE -- "$3" "$1"; then fail "$2: a line matches /$3/"; else pass "$2"; fi; }

# ---- (a) the Llama-3 70B layout, 4 × 8,192-token micro-batches
L70="./train --dry-run --preset llama3.1-70b --gpus 16384 --tp 8 --pp 4 -t 8192"
$L70 -b 4 -d 67108864 --device h100-sxm >"$work/a" 2>&1; rc=$?
[ $rc -eq 0 ] && pass "(a) plans, exit 0" || { fail "(a) exit status $rc"; cat "$work/a"; }
has "$work/a" "(a) 16,384 GPUs" '^  GPUs +16,384$'
has "$work/a" "(a) 2,048 nodes of 8" '^  nodes +2,048 \(8 GPUs each\)'
has "$work/a" "(a) 2,048 tensor-parallel groups of 8" '^  tensor-parallel groups +2,048 of 8 GPUs'
has "$work/a" "(a) 4 stages of 20 layers" '^  pipeline stages +4, 20 layers each of 80'
has "$work/a" "(a) 32 GPUs per replica" '^  model-parallel group +32 GPUs per replica'
has "$work/a" "(a) 512 replicas" '^  data-parallel replicas +512 '
has "$work/a" "(a) 32,768-token micro-batch" '^  micro-batch +4 × 8,192 = 32,768 tokens$'
has "$work/a" "(a) 4 accumulation steps" '^  accumulation steps +4 '
has "$work/a" "(a) 67,108,864 tokens per step" '^  global batch +67,108,864 tokens per optimizer step$'
has "$work/a" "(a) memory per GPU, with 4 micro-batches in flight" '^per GPU, memory: .* activations of 4 in-flight micro-batches'
has "$work/a" "(a) 320 TP all-reduces of 512 MiB, 280 GiB, on NVLink" \
    '^  tensor parallel: .* 320 all-reduces of B·T·C = 512\.0 MiB \(bf16\) over 8 GPUs, 280\.0 GiB in all, .* intra-node link'
has "$work/a" "(a) pipeline: 8 sends of 64 MiB, 512 MiB" '^  pipeline: .* 64\.0 MiB each: 2 × A = 8 sends, 512\.0 MiB in all'
has "$work/a" "(a) DP all-reduce of 2,204,803,328 parameters, 16.4 GiB across nodes" \
    '^  data parallel: an all-reduce .* 2,204,803,328 parameters over R = 512 replicas, 16\.4 GiB, .* inter-node link, ndr \(400 Gbit/s\)'
has "$work/a" "(a) bubble 3/7 = 42.9%" '^pipeline bubble \(1F1B\): .* = 3/7 = 42\.9% of the step idle'
has "$work/a" "(a) step time and MFU with the bubble" '^step per GPU on h100-sxm .* with the bubble .* MFU [0-9.]+%'
has "$work/a" "(a) fixed -d: A with R, the same unit of data" \
    'R = 256: A = 8, R = 512: A = 4, R = 1,024: A = 2\): the optimizer step stays the same unit of data, 67,108,864 tokens'

# ---- (b) the documents' ~4M-token global batch, one sequence per replica, 15T tokens
$L70 -b 1 -d 4194304 --train-tokens 15000000000000 >"$work/b" 2>&1; rc=$?
[ $rc -eq 0 ] && pass "(b) plans, exit 0" || { fail "(b) exit status $rc"; cat "$work/b"; }
has "$work/b" "(b) 2,048 nodes" '^  nodes +2,048 '
has "$work/b" "(b) 32 GPUs per replica" '^  model-parallel group +32 GPUs per replica'
has "$work/b" "(b) 512 replicas" '^  data-parallel replicas +512 '
has "$work/b" "(b) 1 accumulation step" '^  accumulation steps +1 '
has "$work/b" "(b) 4,194,304 tokens per step" '^  global batch +4,194,304 tokens per optimizer step$'
has "$work/b" "(b) 3,576,278 steps" '^  optimizer steps +3,576,278 '
has "$work/b" "(b) bubble 3/4 = 75%" '^pipeline bubble \(1F1B\): .* = 3/4 = 75\.0% of the step idle'
has "$work/b" "(b) the bubble warning, A >= 27" '^warning: accumulation A = 1 is too short to hide the pipeline bubble: 75\.0% .* A >= 27 '
hasnt "$work/a" "(a) at 42.9% warns too, (b)'s warning is not the only one" '^warning: accumulation A = 4 .* A >= 28 '
has "$work/a" "(a) warns at 42.9% as well (A >= 27)" '^warning: accumulation A = 4 is too short .* A >= 27 '

# ---- the links: presets and overrides
$L70 -b 1 -d 4194304 --intra-link pcie5 --inter-link eth100 >"$work/l" 2>&1
has "$work/l" "--intra-link pcie5: 512 Gbit/s (64 GB/s)" '^  tensor parallel: .* intra-node link, pcie5 \(512 Gbit/s\)'
has "$work/l" "--inter-link eth100: 100 Gbit/s" '^  data parallel: .* inter-node link, eth100 \(100 Gbit/s\)'
$L70 -b 1 -d 4194304 --intra-link-gbps 1000 --link-gbps 200 >"$work/l2" 2>&1
has "$work/l2" "--intra-link-gbps overrides the intra-node link" '^  tensor parallel: .* \(1000 Gbit/s\)'
has "$work/l2" "--link-gbps overrides the inter-node link" '^  data parallel: .* --link-gbps \(200 Gbit/s\)'
./train --dry-run --preset llama3.1-70b --gpus 16384 --tp 16 -b 1 -t 8192 -d 8388608 >"$work/w" 2>&1
has "$work/w" "a TP group of 16 is larger than a node of 8: warned, its all-reduces inter-node" \
    '^warning: a tensor-parallel group of 16 GPUs is larger than a node of 8'
has "$work/w" "... and timed on the inter-node link" '^  tensor parallel: .* inter-node link'
./train --dry-run --preset llama3.1-70b --gpus 96 --tp 8 --pp 3 -b 1 -t 8192 -d 32768 >"$work/u" 2>&1
has "$work/u" "80 layers over 3 stages: 26 or 27 each, warned" '^  pipeline stages +3, 26 or 27 layers each'
has "$work/u" "... the uneven stages' warning" '^warning: 80 layers do not split evenly over 3 stages'

# ---- GPT-2 on 1, 8 and 64 GPUs: one node until 8, the data-parallel ring inside it
G124="./train --dry-run --preset gpt2-124m -t 1024 -d 524288 --device h100-sxm --device-memory 1TB"
$G124 -b 64 --gpus 1 >"$work/g1" 2>&1
has "$work/g1" "GPT-2 on 1 GPU: 1 node, 1 of its 8 GPUs" '^  nodes +1 \(1 of its 8 GPUs\)$'
has "$work/g1" "GPT-2 on 1 GPU: 1 replica, A = 524,288 / (64 × 1,024) = 8" '^  accumulation steps +8 '
has "$work/g1" "... no collectives" '^  data parallel: none \(one replica\)'
$G124 -b 64 --gpus 8 >"$work/g8" 2>&1
has "$work/g8" "GPT-2 on 8 GPUs: 1 node, 8 replicas" '^  data-parallel replicas +8 '
has "$work/g8" "... the ring within the node" '^  data parallel: .* intra-node link'
$G124 -b 8 --gpus 64 >"$work/g64" 2>&1
has "$work/g64" "GPT-2 on 64 GPUs: 8 nodes, 64 replicas" '^  nodes +8 \(8 GPUs each\)'
has "$work/g64" "... the ring across nodes" '^  data parallel: .* inter-node link, ndr'
./train --dry-run --preset gpt2-124m -t 1024 -d 524288 -b 64 --device-memory 1TB >"$work/none" 2>&1
hasnt "$work/none" "without the layout options, no layout in the plan" '^cluster layout'

# ---- bad layouts: exit status 2, one line, naming the numbers
# bad WHAT REGEX ARGS...: the command exits 2 with one line on stderr matching REGEX, nothing on stdout
bad() {
    local what=$1 regex=$2
    shift 2
    "$@" >"$work/out" 2>"$work/err"; local rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -qE -- "$regex" "$work/err" && [ ! -s "$work/out" ]; then
        pass "$what: exit 2, one line"
    else
        fail "$what: exit status $rc, stderr:"; cat "$work/err"; cat "$work/out"
    fi
}
D="./train --dry-run --preset llama3.1-70b -b 1 -t 8192 -d 4194304"
bad "--gpus 0" '^train: --gpus 0 .*--gpus 8' $D --gpus 0
bad "--gpus -8" "^train: --gpus .*'-8'" $D --gpus -8
bad "--tp 0" '^train: --tp 0: .*--tp 1' $D --tp 0
bad "--pp 0" '^train: --pp 0: .*--pp 1' $D --pp 0
bad "--pp -2" "^train: --pp .*'-2'" $D --pp -2
bad "--gpus-per-node 0" '^train: --gpus-per-node 0' $D --gpus-per-node 0
# 16,384 / (3·4) is not whole; the nearest counts of whole replicas in whole nodes of 8: multiples of 24
bad "--gpus 16384 --tp 3 --pp 4 does not divide" \
    '^train: --gpus 16384 is not divisible by --tp 3 × --pp 4 = 12 GPUs per replica: --gpus 16,368 or 16,392' \
    $D --gpus 16384 --tp 3 --pp 4
bad "--gpus 12 in nodes of 8" '^train: --gpus 12 is not a whole number of nodes of --gpus-per-node 8: --gpus 8 or 16' \
    $D --gpus 12
bad "--pp 128 above the 80 layers" '^train: --pp 128 is more pipeline stages than the model.s 80 layers.* --pp 80' \
    $D --gpus 16384 --pp 128
bad "--replicas disagreeing with --gpus" '^train: --replicas 100 disagrees with --gpus 16384 .* = 512 replicas' \
    $D --gpus 16384 --tp 8 --pp 4 --replicas 100
bad "--noise-from outside --dry-run" '^train: --noise-from LOG compares .*: give it with --dry-run' \
    ./train -n 1 --noise-from "$work/log.jsonl"
bad "--intra-link unknown" "^train: --intra-link: unknown intra-node link 'ndr'; known: nvlink4, pcie5" \
    $D --tp 8 --intra-link ndr
bad "--inter-link unknown" "^train: --inter-link: unknown inter-node link 'x'; known: ndr, eth100" $D --tp 8 --inter-link x
bad "-b auto with --tp" '^train: --batch-size auto .* --tp 8 --pp 1 .* 8 GPUs' \
    ./train --dry-run --preset llama3.1-70b -b auto -t 8192 -d 4194304 --tp 8 --device-memory 80GB
bad "--tp 2 outside --dry-run" '^train: --tp 2 --pp 1: the trainers run data parallelism only .* a plan' ./train --tp 2 -n 1
bad "--pp 2 outside --dry-run" '^train: --tp 1 --pp 2: the trainers run data parallelism only' ./train --pp 2 -n 1
# a global batch the layout cannot split: the documents' "about 4M" as 4,000,000 is not whole sequences of 8,192
# on 512 replicas (4,194,304 is the smallest that is): exit 1 (the numbers), one line
./train --dry-run --preset llama3.1-70b --gpus 16384 --tp 8 --pp 4 -b 1 -t 8192 -d 4000000 >"$work/out" 2>"$work/err"; rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -qE 'global batch 4,000,000 tokens is not a multiple of .* 4,194,304 tokens; smallest valid --total-batch: 4,194,304' "$work/err" &&
    pass "-d 4000000 on 512 replicas of 1 × 8,192: exit 1, one line naming 4,194,304" ||
    { fail "-d 4000000: exit status $rc"; cat "$work/err"; }
# --gpus and --replicas that agree: planned
$D --gpus 16384 --tp 8 --pp 4 --replicas 512 >"$work/agree" 2>&1 && has "$work/agree" "--gpus and --replicas agreeing" '^  data-parallel replicas +512 ' ||
    fail "--gpus 16384 --tp 8 --pp 4 --replicas 512 refused"

# ---- a plan needs no data: GPT-2 1.5B's 4M-token step is more than the built-in corpus holds
./train --dry-run --layers 48 --heads 25 --channels 1600 --max-seq-len 1024 --vocab 50257 -b auto -t 1024 -d 4194304 \
    --replicas 512 --device h100-sxm --device-memory 80GB >"$work/nodata" 2>&1; rc=$?
[ $rc -eq 0 ] && pass "the no-data plan exits 0" || { fail "the no-data plan: exit status $rc"; cat "$work/nodata"; }
has "$work/nodata" "... the data a real run refuses is a warning line" \
    "^warning: a real run would stop here, the plan goes on without the data: '<built-in corpus, train>' has 4,194,304 tokens, too few"
has "$work/nodata" "... and the plan goes on: the memory, the estimate, the table of splits" '^memory per replica: '
has "$work/nodata" "... to its estimate" '^estimate for h100-sxm '
has "$work/nodata" "... and its table of splits" '^the same 4,194,304 tokens per step over other replica counts'
# the same data in a real run still stops it, with the error (exit 1)
./train --layers 1 --heads 2 --channels 32 --max-seq-len 1024 -t 1024 -b 8 -d 4194304 -n 1 -o '' >"$work/real" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "too few for one step" "$work/real" && pass "a real run on too little data still stops, exit 1" ||
    { fail "a real run on too little data: exit status $rc"; cat "$work/real"; }

# ---- --noise-from LOG: an earlier run's batch and noise scale beside the plan's. The log is
# written here by hand in the trainers' format (host/log.h): a run of 131,072 tokens a step that
# measured B_noise = 41,000 tokens at step 50 (the later step's null is skipped). Against a plan of
# -d 524,288: x4 the batch; 524,288 / 41,000 = 12.8 x B_noise.
cat >"$work/log.jsonl" <<'LOG'
{"type":"config","L":12,"NH":12,"C":768,"V":50257,"Vp":50304,"maxT":1024,"B":16,"T":1024,"A":8,"R":1,"global_batch":131072,"steps":100,"start":0,"lr":0.0006}
{"type":"train","step":49,"steps":100,"tokens":6422528,"loss":4.1,"noise_scale":38000.0}
{"type":"train","step":50,"steps":100,"tokens":6553600,"loss":4.0,"noise_scale":4.1e+04}
{"type":"val","step":50,"tokens":6553600,"val_loss":4.2}
{"type":"train","step":51,"steps":100,"tokens":6684672,"loss":4.0,"noise_scale":null}
LOG
$G124 -b 64 --gpus 8 --noise-from "$work/log.jsonl" >"$work/nf" 2>&1
has "$work/nf" "--noise-from: -d 524,288 against the log's 131,072 tokens a step, x4: a different amount of data a step" \
    "^batch: 524,288 tokens per step against 131,072 in '.*log.jsonl' \(x4\): each optimizer step now averages a different amount of data"
has "$work/nf" "... learning-rate scaling rules are rough guides, checked against the validation loss" \
    'scaling rules .* are rough guides: check the new rate against the validation loss'
has "$work/nf" "... B_noise 41,000 tokens at step 50 (the last number logged), 12.8 x B_noise" \
    "^noise scale: B_noise ~ 41,000 tokens at step 50 of '.*'; this batch is 12\.8 x B_noise"
./train --dry-run --preset gpt2-124m -t 1024 -d 131072 -b 16 --device-memory 1TB --noise-from "$work/log.jsonl" >"$work/nf1" 2>&1
has "$work/nf1" "--noise-from: the log's own batch, the same amount of data a step" \
    '^batch: 131,072 tokens per step, as in .*: each step averages the same amount of data'
grep -v noise_scale "$work/log.jsonl" >"$work/quiet.jsonl"
$G124 -b 64 --noise-from "$work/quiet.jsonl" >"$work/nf2" 2>&1
has "$work/nf2" "--noise-from a log without a noise scale says so" "^noise scale: none logged in '.*quiet.jsonl'"
# a log that cannot be read, or is not a trainer's: one line, exit 1, before any plan line
for log in "$work/missing.jsonl" "$work/a"; do
    ./train --dry-run --preset gpt2-124m -t 1024 -d 131072 -b 16 --noise-from "$log" >"$work/nfo" 2>"$work/nfe"; rc=$?
    if [ $rc -eq 1 ] && [ ! -s "$work/nfo" ] && [ "$(wc -l <"$work/nfe")" -eq 1 ] &&
       grep -qF -- "--noise-from '$log'" "$work/nfe"; then pass "--noise-from $(basename "$log"): one line, exit 1"
    else fail "--noise-from $(basename "$log"): exit $rc"; cat "$work/nfe" "$work/nfo"; fi
done

# ---- the GPU trainer's planner: the same host/ headers, its own memory sizes
if [ -x ./train_gpt_cpu ]; then
    ./train_gpt_cpu --dry-run --preset llama3.1-70b --gpus 16384 --tp 8 --pp 4 -t 8192 -b 1 -d 4194304 \
        --train-tokens 15000000000000 >"$work/gpu" 2>&1; rc=$?
    [ $rc -eq 0 ] && pass "train_gpt_cpu: (b) plans, exit 0" || { fail "train_gpt_cpu (b): exit status $rc"; cat "$work/gpu"; }
    has "$work/gpu" "train_gpt_cpu: 512 replicas" '^  data-parallel replicas +512 '
    has "$work/gpu" "train_gpt_cpu: 3,576,278 steps" '^  optimizer steps +3,576,278 '
    has "$work/gpu" "train_gpt_cpu: the bubble warning" '^warning: accumulation A = 1 is too short to hide the pipeline bubble: 75\.0%'
    has "$work/gpu" "train_gpt_cpu: its bf16 copy split over T·P too" '^per GPU, memory: .*their bf16 copy'
    bad "train_gpt_cpu: --pp 2 outside --dry-run" '^train_gpt_cpu: --tp 1 --pp 2: the trainers run data parallelism only' \
        ./train_gpt_cpu --pp 2 -n 1
else
    not_run "the GPU trainer's planner" "./train_gpt_cpu is not built (make train_gpt_cpu)"
fi

finish
