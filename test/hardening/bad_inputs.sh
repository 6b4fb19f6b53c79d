#!/usr/bin/env bash
# The bad-input table: damaged, hostile or mismatched files of every type (model, token
# shard, tokenizer, training state, output directory) and bad values for every option
# family. For each case the trainer must
#   * exit with the expected status (1: a file or the numbers, 2: a malformed command line),
#     not by a signal (a status of 128 or more, or the 60 s timeout's 124);
#   * print exactly one line on stderr, containing the expected text, which names the file,
#     the field or the numbers;
#   * stay within a bounded address space: each case runs under `ulimit -v` (2 GiB by
#     default), so a header that makes the trainer allocate before it checks fails here.
# TRAIN=path runs another build (the sanitizer build runs the table too, without ulimit,
# which ASan's shadow memory cannot run under: BAD_INPUT_MEM_KB=unlimited).
# A second, shorter table holds the GPU trainer's own cases (launcher variables, its build's
# options), run on the CPU runtime: GPU_TRAIN=path (default ./train_gpt_cpu when TRAIN is not
# given; GPU_TRAIN= skips them).
set -u
cd "$(dirname "$0")/../.."
source test/hardening/bad_files.sh
source scripts/common.sh  # commas
GPU_TRAIN=${GPU_TRAIN-$([ -z "${TRAIN:-}" ] && echo ./train_gpt_cpu)}
TRAIN=${TRAIN:-./train}
MEM_KB=${BAD_INPUT_MEM_KB:-2097152}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
TINY_OPTIONS="--layers 2 --heads 2 --channels 32 --max-seq-len 32 -b 4 -t 16 --val-every 0 --sample-every 0"
TINY_OPTIONS+=" --threads 1 -n 1 -o ''"
TINY="$TRAIN $TINY_OPTIONS"
GOOD="-i $D/good.bin -j $D/good.bin --vocab 256"  # shards instead of the built-in corpus

# ---- the files
shard "$D/good.bin" 5000
cp "$D/good.bin" "$D/other.bin" && put16 "$D/other.bin" 1024 7  # same size, another first token
cp "$D/good.bin" "$D/badtoken.bin" && put16 "$D/badtoken.bin" $((1024 + 2 * 123)) 300
cp "$D/good.bin" "$D/shard_magic.bin" && put32 "$D/shard_magic.bin" 0 12345
cp "$D/good.bin" "$D/shard_version.bin" && put32 "$D/shard_version.bin" 1 7
cp "$D/good.bin" "$D/shard_negative.bin" && put32 "$D/shard_negative.bin" 2 -5
head -c $((1024 + 2 * 4900)) "$D/good.bin" >"$D/shard_trunc.bin"
shard "$D/small.bin" 20
head -c 100 "$D/good.bin" >"$D/shard_short.bin"
mkdir -p "$D/shard_dir.bin"
# uint32 shards (llm.c's Llama-3 kind): a token above 65,535 out of range, a wrong version, a
# truncated file, and a run that mixes them with uint16 shards (in one glob; train against val)
shard32 "$D/good32.bin" 5000
cp "$D/good32.bin" "$D/badtoken32.bin" && put32 "$D/badtoken32.bin" $((256 + 123)) 70000
cp "$D/good32.bin" "$D/shard32_version.bin" && put32 "$D/shard32_version.bin" 1 1
head -c $((1024 + 4 * 4900)) "$D/good32.bin" >"$D/shard32_trunc.bin"
mkdir -p "$D/mixed" && cp "$D/good.bin" "$D/mixed/a.bin" && cp "$D/good32.bin" "$D/mixed/b.bin"

# a model and a training state from a real one-step run, then damaged copies
# (the tiny model: C = 32, V = Vp = 256; padded: Vp = 384, so wte rows 256..383 are padding)
eval "$TINY -o $D/run" >/dev/null || { echo "FAIL could not make the model files"; echo "0 passed, 1 failed"; exit 1; }
eval "$TINY --padded-vocab 384 -o $D/run_padded" >/dev/null || { echo "FAIL padded model"; exit 1; }
M=$D/model.bin S=$D/run/state_00000001.bin
cp "$D/run/model_00000001.bin" "$M"
params=$((($(stat -c %s "$M") - 1024) / 4))
head -c $(($(stat -c %s "$M") - 4)) "$M" >"$D/model_trunc.bin"
head -c 1024 "$M" >"$D/model_header_only.bin"
: >"$D/model_empty.bin"
cp "$M" "$D/model_magic.bin" && put32 "$D/model_magic.bin" 0 1
cp "$M" "$D/model_bf16.bin" && put32 "$D/model_bf16.bin" 1 5
# sizes whose product wraps 64 bits: L = 2^30, C = 2^30 (12·L·C² ≈ 2^94)
cp "$D/model_header_only.bin" "$D/model_wrap.bin" && put32 "$D/model_wrap.bin" 4 $((1 << 30)) &&
    put32 "$D/model_wrap.bin" 6 $((1 << 30)) && put32 "$D/model_wrap.bin" 5 1
# within every limit, but 211 TB of parameters in a 1 KB file: the size it needs, from the
# tensor list in docs/formats.md (wte, wpe, 12·L·C² of matrices, 13·L·C of vectors, lnf)
cp "$D/model_header_only.bin" "$D/model_huge.bin" && put32 "$D/model_huge.bin" 4 1024 &&
    put32 "$D/model_huge.bin" 6 65536 && put32 "$D/model_huge.bin" 5 1
huge_params=$((256 * 65536 + 32 * 65536 + 12 * 1024 * 65536 * 65536 + 13 * 1024 * 65536 + 2 * 65536))
huge_bytes=$(commas $((huge_params * 4 + 1024)))
cp "$M" "$D/model_heads.bin" && put32 "$D/model_heads.bin" 5 3          # C = 32 not divisible by 3
cp "$M" "$D/model_vp.bin" && put32 "$D/model_vp.bin" 7 128              # Vp < V
cp "$M" "$D/model_maxt.bin" && put32 "$D/model_maxt.bin" 2 -32
cp "$D/run_padded/model_00000001.bin" "$D/model_nan_pad.bin" &&
    put32 "$D/model_nan_pad.bin" $((256 + 300 * 32 + 5)) $nan32           # wte row 300, a padding row
cp "$M" "$D/model_inf.bin" && put32 "$D/model_inf.bin" $((256 + params - 64)) $inf32  # lnfw[0]
mkdir -p "$D/model_dir.bin"
# a Llama from a one-step run (NH = 2, so KVH = 1), its K/V heads damaged; a run directory of it
eval "$TINY --model llama3 -o $D/run_llama" >/dev/null || { echo "FAIL could not make the Llama files"; exit 1; }
cp "$D/run_llama/model_00000001.bin" "$D/llama_kvh.bin" && put32 "$D/llama_kvh.bin" 6 3
# llm.c's own Llama-3 layout (no [16] extension: F is solved from the size) with NH = 0 (SIGFPE once)
cp "$D/run_llama/model_00000001.bin" "$D/llmc_nh0.bin" && put32 "$D/llmc_nh0.bin" 16 0 && put32 "$D/llmc_nh0.bin" 5 0
mkdir -p "$D/r_llama" && cp "$D/run_llama/"*_00000001.bin "$D/r_llama/"

E=test/golden/hellaswag_tiny.bin  # 64 examples, tokens below 91, endings of up to 16 tokens
cp $E "$D/eval_magic.bin" && put32 "$D/eval_magic.bin" 0 1
head -c 3000 $E >"$D/eval_trunc.bin"
cp $E "$D/eval_token.bin" && put16 "$D/eval_token.bin" $((1024 + 2 * 6)) 300   # the first context token
cp $E "$D/eval_size.bin" && put16 "$D/eval_size.bin" $((1024 + 2)) 7          # an odd size in bytes
mkdir -p "$D/eval_dir.bin"

tokenizer "$D/tok.bin" 256 2 255
cp "$D/tok.bin" "$D/tok_magic.bin" && put32 "$D/tok_magic.bin" 0 20240327
cp "$D/tok.bin" "$D/tok_version.bin" && put32 "$D/tok_version.bin" 1 3
cp "$D/tok.bin" "$D/tok_count.bin" && put32 "$D/tok_count.bin" 2 -1   # 2^32 - 1 tokens
cp "$D/tok.bin" "$D/tok_zero.bin" && put32 "$D/tok_zero.bin" 2 0
tokenizer "$D/tok_eot.bin" 256 2 99999
tokenizer "$D/tok_eot_big.bin" 300 2 280                                 # an id the model (V = 256) lacks
head -c 1500 "$D/tok.bin" >"$D/tok_trunc.bin"
mkdir -p "$D/tok_dir.bin"

# resume cases: a run directory holding the step-1 checkpoint, its state patched
# state RUN INDEX VALUE
state() {
    mkdir -p "$D/$1" && cp "$D/run/model_00000001.bin" "$S" "$D/$1/"
    [ -z "${2:-}" ] || put32 "$D/$1/state_00000001.bin" "$2" "$3"
}
state r_step 2 -5
state r_epoch 3 -1
state r_shard 4 1000000
state r_chunk 5 -7
state r_chunk_big 5 1000000
state r_count 6 12345
state r_magic 0 7
state r_version 1 9
state r_batch 10 0
state r_v_nan $((256 + params + 10)) $nan32                               # AdamW v[10]
state r_v_neg $((256 + params + 11)) -1082130432                          # v[11] = -1.0f
state r_epoch5 3 5                                                        # epoch 5 at step 1 (65,535 chunks an epoch)
state r_epoch_max 3 2147483647
# the step-1 pair renamed as step 2: the state's header says 1, its name 2
mkdir -p "$D/r_renamed" && cp "$D/run/model_00000001.bin" "$D/r_renamed/model_00000002.bin" &&
    cp "$S" "$D/r_renamed/state_00000002.bin"
state r_shape && state r_data && state r_past && state r_complete
mkdir -p "$D/r_trunc" && cp "$D/run/model_00000001.bin" "$D/r_trunc/" && head -c 2000 "$S" >"$D/r_trunc/state_00000001.bin"
touch "$D/outfile"
# inputs that are not regular files: a named pipe with no writer blocks whoever opens it
mkfifo "$D/fifo"
mkdir -p "$D/r_fifo" "$D/logfifo" && cp "$D/run/model_00000001.bin" "$D/r_fifo/" && mkfifo "$D/r_fifo/state_00000001.bin" &&
    mkfifo "$D/logfifo/log.jsonl"
state r_choices 24 9999                                                   # the run-time choices' length
printf 'garbage\n' >"$D/garbage.id"

# ---- the table: exit status | text the error line must contain | arguments after $TINY
cases=$(cat <<EOF
2 | unknown option '--no-such-option' (see --help) | --no-such-option 3
2 | --lr needs a value | --lr
2 | unknown option '--step'; did you mean --steps? (see --help) | --step 10
2 | unknown option '--val-evry=5'; did you mean --val-every? | --val-evry=5
2 | --resume expects 0, 1 or auto, got 'yes' | --resume yes
2 | --batch-size expects an integer, got 'x' | -b x
2 | --batch-size 99999999999 is too large (at most 2,147,483,647) | -b 99999999999
2 | --steps expects a non-negative integer, got '-3' | -n -3
2 | --seed expects a non-negative integer, got '-1' | --seed -1
2 | --total-batch 99999999999999999999 is too large | -d 99999999999999999999
2 | --shuffle expects 0 or 1, got '2' | --shuffle 2
2 | --lr expects a number, got 'nan' | --lr nan
2 | --lr expects a number, got '1e99' | --lr 1e99
2 | --lr, --weight-decay and --grad-clip must be >= 0 | --lr -1
2 | --beta1 and --beta2 must be in [0, 1) | --beta1 1
2 | --noise-ema must be in [0, 1) (0 = off), got 1.5 | --noise-ema 1.5
2 | --lr-final-frac must be in [0, 1] (the cosine's floor as a fraction of --lr), got -5 | --lr-final-frac -5
2 | --lr-final-frac must be in [0, 1] (the cosine's floor as a fraction of --lr), got 1.5 | --lr-final-frac 1.5
2 | --lr-final-frac must be in [0, 1] (the cosine's floor as a fraction of --lr), got 100 | --lr-final-frac 100
2 | --noise-ema must be in [0, 1) (0 = off), got -0.1 | --noise-ema -0.1
2 | --temperature must be positive | --temperature 0
2 | --top-p must be in (0, 1] (1 = all tokens), got 0 | --top-p 0
2 | --top-p must be in (0, 1] (1 = all tokens), got 1.5 | --top-p 1.5
2 | --kv-cache must be 0 or 1, got 2 | --kv-cache 2
2 | --prompt has 20 tokens, more than the 16 a sample's context holds (-t; the model's maxT is 32) | --sample-every 1 --prompt aaaaaaaaaaaaaaaaaaaa
1 | key/value cache (samples) 8.0 KiB: 708.7 KiB in all, but 703.1 KiB is allowed (--device-memory) | -b 1 --sample-every 1 --device-memory 720000
2 | --lr-schedule must be 'cosine' or 'constant', got 'linear' | --lr-schedule linear
2 | --comm-timeout must be >= 0 seconds | --comm-timeout -1
2 | --channels 30 is not divisible by --heads 4 | --channels 30 --heads 4
2 | --model must be 'gpt2' or 'llama3' (the families this trainer builds), got 'llama2' | --model llama2
2 | --heads 4 is not a multiple of --kv-heads 3 | --model llama3 --heads 4 --kv-heads 3
2 | --kv-heads and --ffn-hidden set a Llama's shape: add --model llama3 | --kv-heads 1
2 | the head size C/NH = 15 is odd: RoPE rotates pairs of channels | --model llama3 --channels 30 --heads 2
2 | --rope-theta = 0.5 is not above 1 | --model llama3 --rope-theta 0.5
2 | --layers 5000 is out of range (1 to 1,024) | --layers 5000
2 | --max-seq-len 2000000 is out of range (1 to 1,048,576) | --max-seq-len 2000000
2 | --vocab 2147483647 is out of range (1 to 16,777,216) | --vocab 2147483647
2 | --padded-vocab 200 is smaller than --vocab 256 | --padded-vocab 200
2 | --train-data needs --val-data as well | -i $D/good.bin
2 | -m/--val-batches is gone: validation now covers --val-tokens N tokens | -m 8
2 | --val-tokens must be at least 1 | --val-tokens 0
2 | --train-tokens and --steps both set the run's length: give one of them | --train-tokens 4096
1 | --val-tokens 15 is less than one sequence of --seq-len 16 | --val-tokens 15 --val-every 1
2 | --device-memory 0.5B is less than one byte | --device-memory 0.5B
2 | --device-memory 1e-5B is less than one byte | --device-memory 1e-5B
2 | --grad-bucket 0.5 is less than one byte: give a bucket size such as 25MB, or 0 for a bucket per block | --grad-bucket 0.5
2 | --grad-bucket expects a size from 0 to 1e18 bytes | --grad-bucket 2e18
2 | --eval-every 5 does nothing without --hellaswag | --eval-every 5
2 | --tf32 is an option of the GPU trainer (train_gpt) only | --tf32 1
2 | --recompute is an option of the GPU trainer (train_gpt) only | --recompute 1
2 | --nccl-init-file is an option of the GPU trainer (train_gpt) only | --nccl-init-file $D/nccl.id
1 | global batch 100 tokens is not a multiple of T×R = 32×1 = 32 tokens, so --batch-size auto cannot split it | -b auto -t 32 -d 100
1 | a global batch of 1,099,511,627,776 tokens is more than the largest accepted | -d 1099511627776 -b 1 -t 1
1 | a global batch of 4,294,967,297 tokens is more than the largest accepted | -d 4294967297 -b 1 -t 1
1 | needs 4,294,967,296 accumulation steps of B×T×R = 1×1×1 tokens, more than 2,147,483,647 | -d 4294967296 -b 1 -t 1
1 | global batch 100 tokens is not a multiple of B×T×R = 4×16×1 = 64 | -d 100
1 | a micro-batch of B×T = 65536×65536 = 4,294,967,296 tokens is more than 2,147,483,647 | --max-seq-len 65536 -t 65536 -b 65536
1 | --seq-len 64 is longer than the model's maximum sequence length 32 | -t 64
1 | --threads 100000 is more than the | --threads 100000
1 | the model does not fit even with a micro-batch of 1×16 | --layers 1024 --channels 65536 --heads 1
1 | out of memory allocating | --layers 2 --channels 2560 --heads 1 | ulimit
2 | --prompt token 4294967361 is out of range for vocabulary 256 | --tokenizer $D/tok.bin --prompt 4294967361
2 | --prompt token -1 is out of range for vocabulary 256 | --tokenizer $D/tok.bin --prompt 4,-1
2 | --prompt with a tokenizer expects token ids like 464,318, got 'abc' | --tokenizer $D/tok.bin --prompt abc
1 | cannot open model file '$D/nothere.bin': No such file or directory | -e $D/nothere.bin
1 | '$D/model_dir.bin' is a directory, not a model file | -e $D/model_dir.bin
1 | '$D/model_empty.bin' is too short to be a model file (0 bytes) | -e $D/model_empty.bin
1 | '$D/model_magic.bin' is not a model file (magic 1, expected 20240326 for GPT-2 or 20240803 for Llama-3) | -e $D/model_magic.bin
1 | '$M' holds a gpt2 model, not the llama3 that --model asks for | -e $M --model llama3
1 | '$D/llama_kvh.bin' has an impossible shape: NH = 2 is not a multiple of KVH = 3 | -e $D/llama_kvh.bin
1 | '$D/llmc_nh0.bin' has an impossible shape: header field [5] NH = 0 is out of range | -e $D/llmc_nh0.bin
1 | '$D/r_llama/model_00000001.bin' has another model shape than this run: family: llama3 against gpt2 | -n 4 --resume 1 -o $D/r_llama
1 | '$D/r_llama/model_00000001.bin' has another model shape than this run: KVH (--kv-heads): 1 against 2 | -n 4 --resume 1 -o $D/r_llama --model llama3 --kv-heads 2
1 | '$D/model_bf16.bin': model version 5 is not supported (expected 3, float32); this is a bf16 file | -e $D/model_bf16.bin
1 | '$D/model_trunc.bin' is truncated or damaged | -e $D/model_trunc.bin
1 | '$D/model_wrap.bin' has an impossible shape: header field [4] L = 1073741824 is out of range (1 to 1,024) | -e $D/model_wrap.bin --dry-run 1
1 | '$D/model_huge.bin' is truncated or damaged: its shape (maxT 32, V 256, Vp 256, L 1024, NH 1, C 65536) needs $huge_bytes bytes, the file has 1,024 | -e $D/model_huge.bin
1 | '$D/model_heads.bin' has an impossible shape: C = 32 is not divisible by NH = 3 | -e $D/model_heads.bin
1 | '$D/model_vp.bin' has an impossible shape: Vp = 128 is smaller than V = 256 | -e $D/model_vp.bin
1 | '$D/model_maxt.bin' has an impossible shape: header field [2] maxT = -32 is out of range | -e $D/model_maxt.bin
1 | '$D/model_nan_pad.bin': the weights hold 1 non-finite value (NaN or infinity), the first in wte | -e $D/model_nan_pad.bin -n 0 --val-every 1
1 | '$D/model_inf.bin': the weights hold 1 non-finite value (NaN or infinity), the first in lnfw | -e $D/model_inf.bin
1 | no file matches '$D/missing.bin' | -i $D/missing.bin -j $D/good.bin
1 | '$D/shard_dir.bin' is a directory, not a token shard | -i $D/shard_dir.bin -j $D/good.bin
1 | '$D/shard_magic.bin' is not a token shard (magic 12345, expected 20240520 for uint16 tokens or 20240801 for uint32 tokens) | -i $D/shard_magic.bin -j $D/good.bin
1 | '$D/shard_version.bin': unsupported shard version 7 (expected 1 with magic 20240520, uint16 tokens) | -i $D/shard_version.bin -j $D/good.bin
1 | '$D/shard32_version.bin': unsupported shard version 1 (expected 7 with magic 20240801, uint32 tokens) | -i $D/shard32_version.bin -j $D/good32.bin
1 | '$D/shard32_trunc.bin' is truncated or damaged: header says 5000 tokens (21024 bytes), file has 20624 bytes | -i $D/shard32_trunc.bin -j $D/good32.bin
1 | '$D/badtoken32.bin': token 70000 at position 123 is out of range for vocabulary size 256 | -i $D/badtoken32.bin -j $D/good32.bin --vocab 256
1 | '$D/mixed/b.bin' holds uint32 tokens but '$D/mixed/a.bin' holds uint16 tokens: every shard of a run must be of one kind | -i '$D/mixed/*.bin' -j $D/good.bin --vocab 256
1 | '$D/good.bin' (validation data) holds uint16 tokens but '$D/good32.bin' (training data) holds uint32 tokens: every shard of a run must be of one kind | -i $D/good32.bin -j $D/good.bin --vocab 256
1 | '$D/shard_trunc.bin' is truncated or damaged: header says 5000 tokens | -i $D/shard_trunc.bin -j $D/good.bin
1 | '$D/shard_negative.bin' is truncated or damaged: header says -5 tokens | -i $D/good.bin -j $D/shard_negative.bin
1 | '$D/shard_short.bin' is too short to be a token shard (100 bytes) | -i $D/shard_short.bin -j $D/good.bin
1 | '$D/badtoken.bin': token 300 at position 123 is out of range for vocabulary size 256 | $GOOD -i $D/badtoken.bin
1 | '$D/small.bin' has 20 tokens, too few for one step of 64 tokens | $GOOD -i $D/small.bin
1 | cannot open tokenizer file '$D/nothere.bin' | --tokenizer $D/nothere.bin
1 | '$D/tok_dir.bin' is a directory, not a tokenizer file | --tokenizer $D/tok_dir.bin
1 | '$D/tok_magic.bin' is not an llm.c tokenizer file (magic 20240327, expected 20240328) | --tokenizer $D/tok_magic.bin
1 | '$D/tok_version.bin': tokenizer version 3 is not supported (expected 1 or 2) | --tokenizer $D/tok_version.bin
1 | '$D/tok_count.bin' says it holds 4,294,967,295 tokens, but its 512 bytes after the header can hold at most 512 | --tokenizer $D/tok_count.bin
1 | '$D/tok_zero.bin' holds no tokens | --tokenizer $D/tok_zero.bin
1 | '$D/tok_eot.bin': end-of-text token 99999 is not below its 256 tokens | --tokenizer $D/tok_eot.bin
1 | '$D/tok_eot_big.bin' holds 300 tokens, but the model's vocabulary has V = 256 | --tokenizer $D/tok_eot_big.bin
1 | '$D/tok.bin' holds 256 tokens, but the model's vocabulary has V = 50,257 | --tokenizer $D/tok.bin --vocab 50257
1 | '$D/tok_trunc.bin' is truncated at token 238 of 256 | --tokenizer $D/tok_trunc.bin
1 | cannot open multiple-choice evaluation file '$D/nothere.bin' | --hellaswag $D/nothere.bin
1 | '$D/eval_dir.bin' is a directory, not a multiple-choice evaluation file | --hellaswag $D/eval_dir.bin
1 | '$D/eval_magic.bin' is not an llm.c evaluation file (magic 1, expected 20240522) | --hellaswag $D/eval_magic.bin
1 | '$D/eval_trunc.bin': example | --hellaswag $D/eval_trunc.bin
1 | '$D/eval_token.bin': example 0 of 64 (uint16 0 of the body) has token 300 in its context, out of range for vocabulary size 256 | --hellaswag $D/eval_token.bin
1 | '$D/eval_size.bin': example 0 of 64 (uint16 0 of the body) says it has 7 bytes | --hellaswag $D/eval_size.bin
1 | 'test/golden/hellaswag_tiny.bin': example 0 of 64 (uint16 0 of the body) has an ending of 12 tokens, more than a sequence of --seq-len 4 can score | --hellaswag $E -t 4
1 | '$D/r_step/state_00000001.bin': step -5 is negative | -n 4 --resume 1 -o $D/r_step
1 | '$D/r_epoch/state_00000001.bin': its data position is outside the training data: epoch -1, shard 0, chunk 1: negative | -n 4 --resume 1 -o $D/r_epoch
1 | '$D/r_epoch5/state_00000001.bin': its data position is impossible: epoch 5 at step 1, which stands in epoch 0 (one chunk a step, 65,535 chunks an epoch) | -n 4 --resume 1 -o $D/r_epoch5
1 | '$D/r_epoch_max/state_00000001.bin': its data position is impossible: epoch 2147483647 at step 1 | -n 4 --resume 1 -o $D/r_epoch_max
1 | '$D/r_renamed/state_00000002.bin' holds step 1, but its name says step 2: renamed or damaged, not resumed | -n 4 --resume 1 -o $D/r_renamed
1 | '$D/r_shard/state_00000001.bin': its data position is outside the training data: shard 1000000, but the data has 1 shard | -n 4 --resume 1 -o $D/r_shard
1 | '$D/r_chunk/state_00000001.bin': its data position is outside the training data: epoch 0, shard 0, chunk -7: negative | -n 4 --resume 1 -o $D/r_chunk
1 | '$D/r_chunk_big/state_00000001.bin': its data position is outside the training data: chunk 1000000 of '<built-in corpus, train>', which has 65535 chunks of 64 tokens | -n 4 --resume 1 -o $D/r_chunk_big
1 | '$D/r_count/state_00000001.bin' holds optimizer state for 12345 parameters, the model has $params | -n 4 --resume 1 -o $D/r_count
1 | '$D/r_magic/state_00000001.bin' is not a training-state file (magic 7, expected 20261124) | -n 4 --resume 1 -o $D/r_magic
1 | '$D/r_version/state_00000001.bin': training-state version 9 is not supported (expected 1 to 5) | -n 4 --resume 1 -o $D/r_version
1 | '$D/r_choices/state_00000001.bin': its record of the run-time choices (header [24] = 9999 bytes at [32]) is damaged | -n 4 --resume 1 -o $D/r_choices
1 | '$D/r_fifo/state_00000001.bin' is a named pipe (FIFO), not a training-state file | -n 4 --resume 1 -o $D/r_fifo
1 | '$D/fifo' is a named pipe (FIFO), not a model file | -e $D/fifo
1 | '$D/fifo' is a named pipe (FIFO), not a token shard | -i $D/fifo -j $D/good.bin --vocab 256
1 | '$D/fifo' is a named pipe (FIFO), not a token shard | -i $D/good.bin -j $D/fifo --vocab 256
1 | '$D/fifo' is a named pipe (FIFO), not a tokenizer file | --tokenizer $D/fifo
1 | '$D/fifo' is a named pipe (FIFO), not a multiple-choice evaluation file | --hellaswag $D/fifo
1 | log file '$D/logfifo/log.jsonl' is a named pipe (FIFO), not a regular file | -o $D/logfifo
1 | --sample-len 100,000,000 is more than 16 times the model's context of 32 tokens (at most 512) | --sample-every 1 -g 100000000
1 | '$D/r_batch/state_00000001.bin': global batch 0 is not positive | -n 4 --resume 1 -o $D/r_batch
1 | '$D/r_trunc/state_00000001.bin' is truncated or damaged | -n 4 --resume 1 -o $D/r_trunc
1 | '$D/r_v_nan/state_00000001.bin': AdamW's moments hold 1 non-finite or negative value | -n 4 --resume 1 -o $D/r_v_nan
1 | '$D/r_v_neg/state_00000001.bin': AdamW's moments hold 1 non-finite or negative value | -n 4 --resume 1 -o $D/r_v_neg
1 | '$D/r_shape/model_00000001.bin' has another model shape than this run: NH (--heads): 2 against 4 | -n 4 --resume 1 -o $D/r_shape --heads 4
1 | was made on other training data (1 shard, 4,194,304 tokens, fingerprint | -n 4 --resume 1 -o $D/r_data -i $D/other.bin -j $D/good.bin --vocab 256
1 | '$D/r_past/state_00000001.bin' is at step 1, past --steps 0: pass --steps 1 or more | -n 0 --resume 1 -o $D/r_past
1 | the checkpoint was made with a global batch of 64 tokens, this run has 128 | -n 4 --resume 1 -o $D/r_data -d 128
1 | '$D/run' already holds checkpoints up to step 1; pass --resume 1 | -o $D/run
1 | --resume 1: no checkpoint in '$D/typo_dir' | --resume 1 -o $D/typo_dir
1 | --resume 1 needs the --out-dir that holds the checkpoints | --resume
1 | --out-dir '$D/outfile' exists and is not a directory | -o $D/outfile
1 | not writing the checkpoint of step 1: this run's updates made the weights non-finite | --lr 3.4e38 --lr-schedule constant -o $D/lr
1 | the loss is nan at step 2 (gradient norm nan): this run's updates made the weights non-finite | --lr 3.4e38 --lr-schedule constant -n 3 -o $D/lr3
EOF
)

source test/suite_lib.sh  # pass, fail, not_run, finish (check is this file's own, below)
# check NAME CODE EXPECT COMMAND: runs the command (eval'd) and judges its status and stderr
check() {
    local name=$1 code=$2 expect=$3 err rc lines problem=""
    err=$( (ulimit -v "$MEM_KB"; eval "timeout 60 $4" 2>&1 >/dev/null) ); rc=$?
    lines=$(printf '%s' "$err" | grep -c '')
    if [ $rc -ge 124 ]; then problem="ended by a signal or the timeout (status $rc)"
    elif [ $rc -ne "$code" ]; then problem="exit status $rc, expected $code"
    elif [ "$lines" -ne 1 ]; then problem="$lines lines on stderr, expected 1"
    elif ! grep -qF -- "$expect" <<<"$err"; then problem="the error does not contain: $expect"
    fi
    if [ -z "$problem" ]; then pass "$name"
    else fail "$name"; printf '     %s\n     stderr: %s\n' "$problem" "$err"; fi
}
while IFS='|' read -r code expect args limit; do
    code=${code// /} expect=${expect# } expect=${expect% } args=${args# } limit=${limit// /}
    name="[$code] $args"
    if [ "$limit" = ulimit ] && [ "$MEM_KB" = unlimited ]; then  # needs the address-space limit to fail
        not_run "$name (runs only under ulimit -v)"; continue
    fi
    check "$name" "$code" "$expect" "$TINY $args"
done <<<"$cases"
# launcher variables naming a job of 2 this process is not in (MPI_Init alone): refused, exit 1
if ldd "$TRAIN" | grep -q libmpi; then
    check "[1] PMI_SIZE=2 PMI_RANK=1 $(basename "$TRAIN")" 1 "PMI_SIZE is '2', but MPI's job holds 1 process" \
        "env PMI_SIZE=2 PMI_RANK=1 $TINY"
    check "[1] PMIX_RANK=1 $(basename "$TRAIN")" 1 "PMIX_RANK is '1', but MPI's job holds 1 process" "env PMIX_RANK=1 $TINY"
else
    not_run "PMI_SIZE=2 without a launcher ($TRAIN was built without MPI)"
fi

# environment variables that set a count are checked like the option that sets it (--threads
# 0: OMP_NUM_THREADS is in effect; at 100,000 OpenMP crashed starting the threads)
check "[1] OMP_NUM_THREADS=100000 $(basename "$TRAIN") --threads 0" 1 "OMP_NUM_THREADS=100000 is more than the" \
    "env OMP_NUM_THREADS=100000 $TINY --threads 0"
check "[1] OMP_NUM_THREADS=1,100000 $(basename "$TRAIN") --threads 0" 1 "OMP_NUM_THREADS=100000 is more than the" \
    "env OMP_NUM_THREADS=1,100000 $TINY --threads 0"
# a value OpenMP cannot take: the trainer's line alone (libgomp's own warnings, printed while the
# program loaded, once came before it); with --threads given, the run goes on without a word
for value in 0 abc -1; do
    check "[2] OMP_NUM_THREADS=$value $(basename "$TRAIN") --threads 0" 2 "OMP_NUM_THREADS='$value' is not a thread count" \
        "env OMP_NUM_THREADS=$value $TINY --threads 0"
done
err=$(eval "timeout 60 env OMP_NUM_THREADS=abc $TINY --threads 1" 2>&1 >/dev/null); rc=$?
if [ $rc -eq 0 ] && [ -z "$err" ]; then pass "OMP_NUM_THREADS=abc $(basename "$TRAIN") --threads 1 trains, nothing on stderr"
else fail "OMP_NUM_THREADS=abc --threads 1 (exit $rc): $err"; fi
# Slurm's task variables that are not numbers, alone (no launcher): one line, not a run alone without a word
check "[2] SLURM_NTASKS=abc $(basename "$TRAIN")" 2 "SLURM_NTASKS is 'abc', not a whole number" "env SLURM_NTASKS=abc $TINY"

# ---- not errors, but they must say so: resuming a finished run, stale temporaries
out=$(eval "$TINY --resume 1 -o $D/r_complete" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -qF "the run in '$D/r_complete' is complete (step 1 of --steps 1): nothing to do" <<<"$out"; then
    pass "resuming a finished run says so"
else fail "resuming a finished run (exit $rc): $out"; fi

# --resume auto where there is no checkpoint starts fresh and says so; then, with one, it resumes
# (and --resume alone, like --dry-run alone, means --resume 1)
out=$(eval "$TINY --lr-schedule constant --resume auto -o $D/r_auto" 2>&1); rc=$?
out2=$(eval "$TINY --lr-schedule constant -n 2 --resume -o $D/r_auto" 2>&1); rc2=$?
if [ $rc -eq 0 ] && grep -qF -- "--resume auto: no checkpoint in '$D/r_auto' yet, so a fresh run from step 0" <<<"$out" &&
   [ $rc2 -eq 0 ] && grep -qF "resumed from step 1" <<<"$out2"; then
    pass "--resume auto starts fresh and says so; --resume alone then continues from its step 1"
else fail "--resume auto (exit $rc, then $rc2): $out $out2"; fi

# --val-tokens that is not a whole number of sequences: the log says it was rounded down
out=$(eval "$TINY --val-every 1 --val-tokens 33" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -qF "(--val-tokens 33 rounded down to 2 sequences of 16)" <<<"$out" &&
   ! grep -qF "all the validation data holds" <<<"$out"; then
    pass "--val-tokens 33 says it was rounded down to 2 sequences of 16"
else fail "--val-tokens 33 (exit $rc): $(grep validation <<<"$out")"; fi
# the dry run's tables at a global batch of 2^32 tokens of B×T = 2: their replica counts double
# up to 2^30 (A = 2), never wrapping an int to 0 (that was `global % 0`, SIGFPE); the R = 1 row
# (A = 2^31, more than an int) is left out, the run's own R = 2 is there
# (shards that are not there: a dry run plans without them)
out=$(eval "timeout 60 $TINY --dry-run -b 2 -t 1 -d 4294967296 --replicas 2 -i $D/nothere.bin -j $D/nothere.bin" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -qE '^ +2 +1073741824 .*<- this run$' <<<"$out" &&
   grep -qE '^ +1073741824 +2 ' <<<"$out" && ! grep -qE '^ +1 +2147483648 ' <<<"$out"; then
    pass "--dry-run -b 2 -t 1 -d 4294967296 --replicas 2 plans (replica counts 2 to 2^30, no wrap)"
else fail "--dry-run -b 2 -t 1 -d 4294967296 --replicas 2 (exit $rc): $(tail -2 <<<"$out")"; fi
# -e FILE with shape options: the file's shape is used, and the run says the options are ignored
out=$(eval "$TINY -e $M --layers 12 --channels 768 --heads 12 -n 0" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -qF -- "note: --layers, --heads, --channels, --max-seq-len ignored: the model's shape is the one in '$M' (L=2 NH=2 C=32" <<<"$out"; then
    pass "-e FILE --layers 12 --channels 768 --heads 12 says the shape options are ignored"
else fail "-e FILE --layers 12 --channels 768 --heads 12 (exit $rc): $(grep -i 'note\|error' <<<"$out" | head -2)"; fi
# Slurm's task variables: the CPU trainer starts replicas through MPI only, and says it ignores them
out=$(eval "SLURM_NTASKS=2 SLURM_PROCID=5 SLURM_LOCALID=0 $TINY" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -qF "note: Slurm's variables (SLURM_PROCID 5, SLURM_NTASKS 2) are ignored" <<<"$out"; then
    pass "a single ./train under Slurm's task variables says it ignores them"
else fail "./train with SLURM_NTASKS=2 SLURM_PROCID=5 (exit $rc): $(head -2 <<<"$out")"; fi

# ---- the GPU trainer's own cases, on the CPU runtime: exit status | error text | environment | arguments
if [ -n "$GPU_TRAIN" ] && [ -x "$GPU_TRAIN" ]; then
    GPU_TINY="$GPU_TRAIN $TINY_OPTIONS"
    gpu_cases="2 | --device-memory 0.5B is less than one byte | | --device-memory 0.5B
2 | --lr-final-frac must be in [0, 1] (the cosine's floor as a fraction of --lr), got -5 | | --lr-final-frac -5
1 | '$D/r_renamed/state_00000002.bin' holds step 1, but its name says step 2 | | -n 4 --resume 1 -o $D/r_renamed
1 | '$D/r_epoch5/state_00000001.bin': its data position is impossible: epoch 5 at step 1, which stands in epoch 0 | | -n 4 --resume 1 -o $D/r_epoch5
1 | --threads 5000 is more than the | | --threads 5000
1 | SLURM_PROCID is '5', expected 0 to 1 in a job of 2 tasks (SLURM_NTASKS) | SLURM_NTASKS=2 SLURM_PROCID=5 SLURM_LOCALID=0 | --nccl-init-file $D/nccl.id
1 | SLURM_PROCID is '-1', expected 0 to 1 in a job of 2 tasks (SLURM_NTASKS) | SLURM_NTASKS=2 SLURM_PROCID=-1 SLURM_LOCALID=0 | --nccl-init-file $D/nccl.id
1 | rank 1 waited 3 s (--comm-timeout) for rank 0 to write NCCL's id (slurm job none step none world 2) into '$D/garbage.id', which holds a file of 8 bytes that is not one of NCCL's ids | SLURM_NTASKS=2 SLURM_PROCID=1 SLURM_LOCALID=0 | --nccl-init-file $D/garbage.id --comm-timeout 3
1 | --nccl-init-file '$D/fifo' is a named pipe (FIFO), not a regular file | SLURM_NTASKS=2 SLURM_PROCID=1 SLURM_LOCALID=0 | --nccl-init-file $D/fifo
1 | '$D/fifo' is a named pipe (FIFO), not a model file | | -e $D/fifo
1 | '$D/mixed/b.bin' holds uint32 tokens but '$D/mixed/a.bin' holds uint16 tokens: every shard of a run must be of one kind | | -i '$D/mixed/*.bin' -j $D/good.bin --vocab 256
1 | OMP_NUM_THREADS=100000 is more than the | OMP_NUM_THREADS=100000 | --threads 0
2 | OMP_NUM_THREADS='0' is not a thread count | OMP_NUM_THREADS=0 | --threads 0
2 | OMP_NUM_THREADS='abc' is not a thread count | OMP_NUM_THREADS=abc | --threads 0
2 | SLURM_NTASKS is 'abc', not a whole number | SLURM_NTASKS=abc |
2 | CPU_CUDA_NCCL_TIMEOUT='5x' is not valid | CPU_CUDA_NCCL_TIMEOUT=5x |
2 | CPU_CUDA_STACK_KB='1' is not valid: expected a whole number from 16 to 1048576 | CPU_CUDA_STACK_KB=1 |
2 | CPU_CUDA_DELAY_STREAM='0:5' is not valid: expected K:MS, the K-th stream the program creates (1 to 1000) | CPU_CUDA_DELAY_STREAM=0:5 |
2 | CPU_CUDA_DELAY_STREAM='2' is not valid: expected K:MS | CPU_CUDA_DELAY_STREAM=2 |
2 | TRAIN_GPT_ATTENTION_PICK='slow' is not valid: expected fused or cublas | TRAIN_GPT_ATTENTION_PICK=slow |"
    # CPU_CUDA_THREADS: at most what vm.max_map_count leaves the fibers' stacks (1024 CUDA threads
    # of a block on each OS thread, 2 maps each, half of the maps): its documented maximum,
    # 1024, only where the limit allows it
    maps=$(cat /proc/sys/vm/max_map_count 2>/dev/null || echo 65530)
    most=$((maps / 2 / 2048)); [ "$most" -gt 1024 ] && most=1024; [ "$most" -lt 1 ] && most=1
    [ "$most" -lt 1024 ] && gpu_cases+=$'\n'"2 | CPU_CUDA_THREADS='1024' is not valid: expected a whole number from 0 (the processors it may use) to $most | CPU_CUDA_THREADS=1024 |"
    if eval "$GPU_TINY --dry-run 1" 2>/dev/null | grep -q ', bf16'; then
        gpu_cases+=$'\n2 | --tf32 1 has no effect in the bf16 build of train_gpt | | --tf32 1'
    fi
    if ldd "$GPU_TRAIN" | grep -q libmpi; then  # MPI_Init alone, though the variables name a job of 2
        gpu_cases+=$'\n1 | OMPI_COMM_WORLD_SIZE is 2, but MPI\'s job holds 1 process: this one was not started by mpirun | OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 |'
        # other launchers' variables (MPICH's Hydra, srun with PMI) naming a job this process is not in
        gpu_cases+=$'\n1 | PMI_SIZE is \'2\', but MPI\'s job holds 1 process: this one was not started by the launcher | PMI_SIZE=2 PMI_RANK=1 |'
        gpu_cases+=$'\n1 | PMIX_RANK is \'1\', but MPI\'s job holds 1 process | PMIX_RANK=1 |'
    else
        not_run "OMPI_COMM_WORLD_SIZE=2 without mpirun ($GPU_TRAIN was built without MPI)"
    fi
    while IFS='|' read -r code expect envs args; do
        code=${code// /} expect=${expect# } expect=${expect% } envs=${envs# } args=${args# }
        check "[$code] ${envs}$(basename "$GPU_TRAIN") $args" "$code" "$expect" "env $envs $GPU_TINY $args"
    done <<<"$gpu_cases"
    # a state recording a value this trainer cannot take (attention=bogus) is refused whatever
    # the options (--attention cublas given once ran on with a note)
    if eval "$GPU_TINY --attention fused -o $D/gpu_run" >/dev/null 2>&1 && mkdir -p "$D/r_bogus" &&
       cp "$D/gpu_run/"*_00000001.bin "$D/r_bogus/" &&
       perl -pi -e 's/attention=fused/attention=bogus/' "$D/r_bogus/state_00000001.bin"; then
        for given in "" "--attention cublas" "--attention fused"; do
            check "[1] $(basename "$GPU_TRAIN") $given --resume 1 (a state recording attention=bogus)" 1 \
                "'$D/r_bogus/state_00000001.bin' records --attention bogus, which this trainer cannot take" \
                "$GPU_TINY $given -n 4 --resume 1 -o $D/r_bogus"
        done
    else fail "the GPU trainer's state file with attention=bogus: could not make it"; fi
    # the dry run's tables at 2^32 tokens of B×T = 2 (SIGFPE once): the plan, exit 0
    out=$(eval "timeout 60 $GPU_TINY --dry-run -b 2 -t 1 -d 4294967296 --replicas 2 -i $D/nothere.bin -j $D/nothere.bin" 2>&1); rc=$?
    if [ $rc -eq 0 ] && grep -qE '^ +2 +1073741824 .*<- this run$' <<<"$out" && grep -qE '^ +1073741824 +2 ' <<<"$out"; then
        pass "$(basename "$GPU_TRAIN") --dry-run -b 2 -t 1 -d 4294967296 --replicas 2 plans"
    else fail "$(basename "$GPU_TRAIN") --dry-run -b 2 -t 1 -d 4294967296 --replicas 2 (exit $rc): $(tail -2 <<<"$out")"; fi
fi

# ---- the shell suites' own command lines (test/suite_lib.sh, suite_arguments): --help is a usage
# line and exit 0, an unknown argument one line and exit 2, and neither runs a case
# (test/replicas/multihost.sh --help once started the whole suite)
for suite in $(grep -l '^suite_arguments ' test/*/*.sh); do
    out=$(timeout 20 bash "$suite" --help 2>&1); rc=$?
    err=$(timeout 20 bash "$suite" --bogus-argument 2>&1 >/dev/null); rc2=$?
    stdout=$(timeout 20 bash "$suite" --bogus-argument 2>/dev/null)
    if [ $rc -eq 0 ] && [ "$(grep -c '' <<<"$out")" -eq 1 ] && grep -q "^usage: bash $suite" <<<"$out" &&
       [ $rc2 -eq 2 ] && [ "$(printf '%s' "$err" | grep -c '')" -eq 1 ] &&
       grep -qF "$(basename "$suite"): unknown argument '--bogus-argument'" <<<"$err" && [ -z "$stdout" ]; then
        pass "bash $suite --help: its usage, exit 0; --bogus-argument: one line, exit 2; no case run"
    else fail "bash $suite --help (exit $rc): $(head -3 <<<"$out"); --bogus-argument (exit $rc2): $(head -3 <<<"$err")"; fi
done
grep -q '^suite_arguments ' test/replicas/multihost.sh || fail "test/replicas/multihost.sh does not check its arguments"

finish
