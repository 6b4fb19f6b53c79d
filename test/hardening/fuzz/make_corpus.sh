#!/usr/bin/env bash
# Writes the committed seed and regression corpus of the fuzz harnesses, corpus/<harness>/:
# a few valid inputs (so that fuzzing starts past the header checks) and every input that
# crashed or misled the trainer before the hardening (issue 12). test/hardening/fuzz/run.sh replays
# all of them before it fuzzes. Run it again only to change the corpus; the files are
# committed.
set -eu
cd "$(dirname "$0")"
source ../bad_files.sh
rm -rf corpus && mkdir -p corpus/{model_header,shard_header,tokenizer,state,command_line,eval_file}

# ---- model files. A valid tiny model: maxT 2, V 3, Vp 4, L 1, NH 1, C 2: wte 8 + wpe 4 +
# 12·L·C² 48 + 13·L·C 26 + lnf 4 = 90 floats after the 1 KB header.
m=corpus/model_header
model() {  # FILE MAXT V VP L NH C FLOATS
    head -c $((1024 + 4 * $8)) /dev/zero >"$1"
    put32 "$1" 0 20240326 && put32 "$1" 1 3
    put32 "$1" 2 "$2" && put32 "$1" 3 "$3" && put32 "$1" 7 "$4" && put32 "$1" 4 "$5" && put32 "$1" 5 "$6" && put32 "$1" 6 "$7"
}
model $m/valid_tiny 2 3 4 1 1 2 90
model $m/wraps_64_bits 32 256 256 $((1 << 30)) 1 $((1 << 30)) 0        # 12·L·C² ≈ 2^94: "0 parameters" before
model $m/huge_in_1k 32 256 256 1024 1 65536 0                          # 211 TB of parameters in a 1 KB file
model $m/nan_in_padding 2 3 4 1 1 2 90 && put32 $m/nan_in_padding $((256 + 3 * 2)) $nan32  # wte row 3 of Vp 4
model $m/inf_weight 2 3 4 1 1 2 90 && put32 $m/inf_weight $((256 + 89)) $inf32
model $m/bf16 2 3 4 1 1 2 90 && put32 $m/bf16 1 5
model $m/negative_maxt 2 3 4 1 1 2 90 && put32 $m/negative_maxt 2 -2
: >$m/empty

# ---- token shards
s=corpus/shard_header
shard $s/valid 40 && put16 $s/valid 1030 50256
shard $s/negative_count 40 && put32 $s/negative_count 2 -5
shard $s/truncated 40 && head -c 1050 $s/truncated >$s/t && mv $s/t $s/truncated
shard $s/token_out_of_range 40 && put16 $s/token_out_of_range 1040 65535
shard $s/too_few_tokens 5
shard32 $s/valid_uint32 40 && put32 $s/valid_uint32 259 50256  # llm.c's Llama-3 kind, uint32 tokens
shard32 $s/uint32_token_out_of_range 40 && put32 $s/uint32_token_out_of_range 270 70000
shard32 $s/uint32_version_1 40 && put32 $s/uint32_version_1 1 1

# ---- tokenizers
t=corpus/tokenizer
tokenizer $t/valid 4 2 3
tokenizer $t/version_1 4 1 0
tokenizer $t/count_2_32_minus_1 4 2 3 && put32 $t/count_2_32_minus_1 2 -1   # allocated first, before
tokenizer $t/version_3 4 3 3                                                # "magic 20240328, expected 20240328"
tokenizer $t/eot_99999 4 2 99999                                            # blamed on --prompt
tokenizer $t/eot_beyond_model 350 2 320                                     # outside the harness's 300 tokens
tokenizer $t/truncated 4 2 3 && head -c 1030 $t/truncated >$t/x && mv $t/x $t/truncated

# ---- training states, for the harness's model of 8 parameters and its 1000 tokens in
# chunks of 8 (global batch 8) or 16 (global batch 16): 125 or 62 chunks
st=corpus/state
state() {  # FILE STEP EPOCH SHARD CHUNK BATCH
    head -c $((1024 + 8 * 8)) /dev/zero >"$1"
    put32 "$1" 0 20261124 && put32 "$1" 1 2 && put32 "$1" 2 "$2"
    put32 "$1" 3 "$3" && put32 "$1" 4 "$4" && put32 "$1" 5 "$5"
    put32 "$1" 6 8 && put32 "$1" 8 12345 && put32 "$1" 10 "$6"
}
state $st/valid 3 0 0 1 8
state $st/valid_accumulation 5 2 0 60 16
state $st/step_minus_5 -5 0 0 1 8                 # trained "step -4" with a negative learning rate
state $st/shard_1000000 3 0 1000000 1 8           # SIGSEGV
state $st/chunk_minus_7 3 0 0 -7 8                # read out of bounds, exit 0
state $st/chunk_past_the_end 3 0 0 125 8
state $st/epoch_minus_1 3 -1 0 1 8
state $st/batch_0 3 0 0 1 0
state $st/nan_moment 3 0 0 1 8 && put32 $st/nan_moment $((256 + 8 + 2)) $nan32
state $st/version_1 3 0 0 1 8 && put32 $st/version_1 1 1
state $st/other_data 3 0 0 1 8 && put32 $st/other_data 12 99 && put32 $st/other_data 14 1000 && put32 $st/other_data 16 1
# found by fuzzing: a token count of -2^63, whose negation in with_commas() overflowed
state $st/tokens_most_negative 3 0 0 1 8 && put32 $st/tokens_most_negative 15 $((1 << 31)) && put32 $st/tokens_most_negative 16 1

# ---- command lines: arguments separated by NUL bytes (the last byte also picks 1..8 replicas)
c=corpus/command_line
args() { local f=$1; shift; printf '%s\0' "$@" >"$c/$f"; }
args defaults
args typical -b 4 -t 16 -d 128 --lr 3e-4 --warmup 10 -n 100 --seed 7 --prompt 1,2,3
args total_batch_2_40 -d 1099511627776 -b 1 -t 1              # SIGFPE
args total_batch_2_32_plus_1 -d 4294967297 -b 1 -t 1          # trained on 1 token per step
args prompt_2_32_plus_65 --prompt 4294967361                  # wrapped to token 65
args vocab_int_max --vocab 2147483647                         # V + 127 overflowed
args micro_batch_2_32 --max-seq-len 65536 -t 65536 -b 65536
args huge_model --layers 1024 --channels 65536 --heads 1
args seed_minus_1 --seed -1
args equals_forms --steps=5 --lr=1e-3 --lr-schedule=constant --warmup=0

# ---- multiple-choice evaluation files (the harness: V = 300, T = 12): two valid examples,
# written by data/shards.py, and damaged copies
e=corpus/eval_file
python3 -c "import sys; sys.path.insert(0, '../../../data'); import shards
shards.write_eval_file('$e/valid', [([5, 6, 7], [[8], [9, 10], [11, 12, 13], [14]], 2),
                                   (list(range(20)), [[2, 3], [4], [5] * 12, [6, 7]], 0)], quiet=True)"
cp $e/valid $e/token_out_of_range && put16 $e/token_out_of_range $((1024 + 2 * 6)) 400
cp $e/valid $e/odd_size && put16 $e/odd_size 1026 7
cp $e/valid $e/size_past_end && put16 $e/size_past_end 1026 60000
cp $e/valid $e/label_past_endings && put16 $e/label_past_endings 1030 4
cp $e/valid $e/count_2_31 && put32 $e/count_2_31 2 2147483647
head -c 1060 $e/valid >$e/truncated
