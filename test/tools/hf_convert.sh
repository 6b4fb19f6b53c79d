#!/usr/bin/env bash
# scripts/hf_convert.py: Hugging Face folders in and out, on the fixtures of
# dev/reference/hf_fixtures.py (test/golden/hf/: a GPT2LMHeadModel, and a LlamaForCausalLM
# sharded in two files, with transformers' logits, loss, gradients and 3 AdamW steps for each).
#   - import both; the model file's header against config.json; the CPU trainer
#     (check_reference) and the GPU trainer on the CPU runtime (its "Hugging Face import" case,
#     fp32 and bf16) against transformers' numbers; ./train -e on each
#   - export both back: every tensor equal to the fixture's bit for bit, config.json's model
#     fields the same; the export imported again gives the same model file, byte for byte
#   - folders as users have them: the hub's GPT-2 (no "transformer." prefix, mask buffers),
#     bfloat16 and float16 weights, a tied Llama whose vocabulary is padded, without RoPE scaling
#   - bad folders and command lines: one line, exit 1 (2 for usage), nothing written
#   - with torch and transformers (not in CI): the exported folders load in transformers and
#     compute the fixtures' logits
# Needs python3 with numpy and safetensors (test/run_all.sh says so when they are missing).
set -u
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source test/suite_lib.sh  # pass, fail, not_run, check, finish
export PYTHONDONTWRITEBYTECODE=1 OMP_WAIT_POLICY=passive
conv="python3 scripts/hf_convert.py"
chk="python3 test/tools/hf_convert_check.py"
hf=test/golden/hf
if ! python3 -c "import numpy, safetensors" 2>/dev/null; then
    skip "Hugging Face conversion" "python3 lacks numpy or safetensors (pip install numpy safetensors)"
    finish
    exit
fi

# ok NAME COMMAND...: a case that must succeed; its output is shown when it does not
ok() {
    local what=$1
    shift
    if "$@" >"$work/out" 2>&1; then pass "$what"; else fail "$what"; cat "$work/out"; fi
}
# refused NAME STATUS PATTERN COMMAND...: must exit with STATUS, print nothing on stdout and
# exactly one line on stderr, matching PATTERN (grep -E)
refused() {
    local what=$1 want=$2 pattern=$3
    shift 3
    "$@" >"$work/stdout" 2>"$work/stderr"
    local rc=$?
    if [ "$rc" -eq "$want" ] && [ ! -s "$work/stdout" ] && [ "$(wc -l <"$work/stderr")" -eq 1 ] &&
        grep -qE -- "$pattern" "$work/stderr"; then
        pass "$what: $(cat "$work/stderr")"
    else
        fail "$what (exit $rc, expected $want and one line matching '$pattern'):"
        cat "$work/stdout" "$work/stderr"
    fi
}
# no_file NAME PATH: nothing under PATH, nor any temporary file beside it
no_file() {
    local dir
    dir=$(dirname "$1")
    if [ -e "$1" ] || ls -A "$dir" | grep -q '\.tmp$'; then fail "$2: '$1' or a temporary file was left"; ls -la "$dir"
    else pass "$2: nothing written"; fi
}

# ---- import, and the trainers against transformers' numbers
for f in gpt2 llama; do
    $conv import $hf/${f}_tiny "$work/$f.bin" >"$work/$f.import" 2>&1
    rc=$?
    cat "$work/$f.import"
    check "$f: import exits 0 with one line" [ "$rc" -eq 0 -a "$(wc -l <"$work/$f.import")" -eq 1 ]
done
check "gpt2: the summary names the shape and the padded vocabulary's parameters" grep -qxF \
    "imported $hf/gpt2_tiny -> $work/gpt2.bin: gpt2 L=2 NH=2 C=32 maxT=64 V=260 Vp=384, 39,808 parameters (35,840 in the folder; the rest are the rows padding V to Vp)" \
    "$work/gpt2.import"
check "llama: the summary names KVH, F, RoPE's scaling, the untied head" grep -qxF \
    "imported $hf/llama_tiny -> $work/llama.bin: llama3 L=2 NH=4 KVH=2 C=64 F=96 maxT=64 V=256 Vp=256, RoPE theta 10000 scaled (factor 8, low 1, high 4, from 32), untied head, 94,528 parameters" \
    "$work/llama.import"
for f in gpt2 llama; do
    ok "$f: the model file's header and size as config.json says" $chk header "$work/$f.bin" $hf/${f}_tiny
    # (its table: every row within 1e-5, the parameters after the steps within 1e-4)
    ./test/cpu_trainer/check_reference "$work/$f.bin" $hf/${f}_tiny_reference.bin >"$work/ref.out" 2>&1
    rc=$?
    grep -E 'FAIL|passed' "$work/ref.out" | sed 's/^/    /'  # (indented: test/run_all.sh reads our count)
    check "$f: the CPU trainer on the import computes transformers' logits, loss, gradients and 3 AdamW steps (check_reference)" \
        [ "$rc" -eq 0 ]
done
if [ -x ./test/gpu_trainer/trainer_cpu_fp32 ] && [ -x ./test/gpu_trainer/trainer_cpu ]; then
    for build in fp32 bf16; do
        program=./test/gpu_trainer/trainer_cpu$([ $build = fp32 ] && echo _fp32)
        for f in gpt2 llama; do
            # both attention paths; fp32: 1e-5, and 1e-4 after the steps; bf16: the golden
            # cases' bounds (check_golden and its callers in test/gpu_trainer/trainer.cu)
            HF_IMPORT_MODEL="$work/$f.bin" HF_IMPORT_GOLDEN=$hf/${f}_tiny_reference.bin \
                $program --no-skip -tc="Hugging Face import*" >"$work/gpu.out" 2>&1
            rc=$?
            grep -E '^\[doctest\] test cases' "$work/gpu.out" | sed 's/^/    /'
            check "$f: the GPU trainer (CPU runtime, $build) on the import computes transformers' numbers" \
                bash -c "[ $rc -eq 0 ] && grep -qE '^\[doctest\] test cases: +1 \| +1 passed' '$work/gpu.out'"
            [ "$rc" -eq 0 ] || tail -30 "$work/gpu.out"
        done
    done
    # the case compares nothing without its files: it must fail, not pass
    ./test/gpu_trainer/trainer_cpu_fp32 --no-skip -tc="Hugging Face import*" >"$work/gpu.out" 2>&1
    check "the GPU case without HF_IMPORT_MODEL and HF_IMPORT_GOLDEN fails" \
        bash -c "[ $? -ne 0 ] && grep -q 'HF_IMPORT_MODEL and HF_IMPORT_GOLDEN must name' '$work/gpu.out'"
else
    not_run "the GPU trainer on the imports" "test/gpu_trainer/trainer_cpu and trainer_cpu_fp32 are not built (the CPU runtime needs the CUDA toolkit's headers)"
fi
if [ -x ./train ]; then
    for f in gpt2 llama; do
        ./train -e "$work/$f.bin" -n 0 --sample-every 0 --val-tokens 8192 --threads 1 >"$work/train.out" 2>&1
        rc=$?
        check "$f: ./train -e IMPORT -n 0 loads it and evaluates it" \
            bash -c "[ $rc -eq 0 ] && grep -q '^model: .*L=2' '$work/train.out' && grep -qE '^step 0 \| val loss [0-9.]+$' '$work/train.out'"
    done
else
    fail "./train is built (make train)"
fi

# ---- export, bit for bit
for f in gpt2 llama; do
    $conv export "$work/$f.bin" "$work/${f}_hf" >"$work/$f.export" 2>&1
    rc=$?
    cat "$work/$f.export"
    check "$f: export exits 0 with one line" [ "$rc" -eq 0 -a "$(wc -l <"$work/$f.export")" -eq 1 ]
    ok "$f: the exported tensors are the fixture's, bit for bit, and config.json agrees" $chk same $hf/${f}_tiny "$work/${f}_hf"
    $conv import "$work/${f}_hf" "$work/$f.again.bin" >/dev/null 2>&1
    check "$f: the export imported again is the same model file, byte for byte" cmp -s "$work/$f.bin" "$work/$f.again.bin"
done
check "only the two files are written (config.json, model.safetensors), and no temporary" \
    [ "$(ls -A "$work/llama_hf" | tr '\n' ' ')" = "config.json model.safetensors " ]

# ---- folders as users have them
$chk variant gpt2-hub $hf/gpt2_tiny "$work/hub"
$conv import "$work/hub" "$work/hub.bin" >/dev/null 2>&1
check "the hub's GPT-2 layout (no 'transformer.' prefix, attn.bias buffers) imports to the same file" \
    cmp -s "$work/gpt2.bin" "$work/hub.bin"
for dtype in bf16 f16; do
    for f in gpt2 llama; do
        $chk variant $dtype $hf/${f}_tiny "$work/${f}_${dtype}_f32" "$work/${f}_$dtype"
        $conv import "$work/${f}_${dtype}_f32" "$work/a.bin" --force >/dev/null 2>&1
        $conv import "$work/${f}_$dtype" "$work/b.bin" --force >/dev/null 2>&1
        check "$f: $dtype weights (in 2 shards) widen exactly: the same file as their values in float32" \
            bash -c "[ -s '$work/a.bin' ] && cmp -s '$work/a.bin' '$work/b.bin'"
        rm -f "$work/a.bin" "$work/b.bin"
    done
done
$chk variant llama-tied $hf/llama_tiny "$work/tied"
ok "a tied Llama without RoPE scaling, V=200: imports" $conv import "$work/tied" "$work/tied.bin"
ok "... its header: Vp 256, tied, RoPE unscaled (factor 0)" $chk header "$work/tied.bin" "$work/tied"
ok "... exports to the same tensors (the padding dropped, no lm_head)" \
    bash -c "$conv export '$work/tied.bin' '$work/tied_hf' && $chk same '$work/tied' '$work/tied_hf'"

# ---- what is refused
g=$hf/gpt2_tiny
mkdir "$work/bad"
refused "no such folder" 1 "'$work/none' is not a folder" $conv import "$work/none" "$work/bad/x.bin"
mkdir "$work/empty"
refused "no config.json" 1 "has no config.json" $conv import "$work/empty" "$work/bad/x.bin"
mkdir "$work/notjson" && echo '{"architectures": [' >"$work/notjson/config.json"
refused "config.json not JSON" 1 "config.json' is not JSON" $conv import "$work/notjson" "$work/bad/x.bin"
mkdir "$work/noweights" && cp $g/config.json "$work/noweights/"
refused "no safetensors weights" 1 "has no model.safetensors" $conv import "$work/noweights" "$work/bad/x.bin"
$chk variant config $g "$work/bert" 'architectures=["BertForMaskedLM"]'
refused "another architecture" 1 "architecture BertForMaskedLM is not supported" $conv import "$work/bert" "$work/bad/x.bin"
$chk variant config $g "$work/wide" vocab_size=261
refused "a tensor's shape against config.json" 1 "tensor transformer.wte.weight has shape \[260, 32\], config.json's model needs \[261, 32\]" \
    $conv import "$work/wide" "$work/bad/x.bin"
$chk variant drop $g "$work/lacks" transformer.ln_f.bias
refused "a missing tensor (the last one written: the file is half done when it fails)" 1 \
    "has no tensor transformer.ln_f.bias" $conv import "$work/lacks" "$work/bad/x.bin"
no_file "$work/bad/x.bin" "a conversion that fails half way"
$chk variant nan $g "$work/nan" transformer.h.0.mlp.c_fc.bias
refused "a non-finite weight" 1 "tensor transformer.h.0.mlp.c_fc.bias holds 1 non-finite value" \
    $conv import "$work/nan" "$work/bad/x.bin"
cp -r $g "$work/cut" && head -c 100 $g/model.safetensors >"$work/cut/model.safetensors"
refused "a damaged safetensors file" 1 "model.safetensors' is not a safetensors file" $conv import "$work/cut" "$work/bad/x.bin"
$chk variant config $g "$work/short" n_layer=1
refused "a tensor config.json has no place for" 1 "holds transformer.h.1.attn.c_attn.bias \(and 11 more\)" \
    $conv import "$work/short" "$work/bad/x.bin"
cp -r $hf/llama_tiny "$work/noshard" && rm "$work/noshard/model-00002-of-00002.safetensors"
refused "a shard the index lists is missing" 1 "the shard model-00002-of-00002.safetensors .* is missing" \
    $conv import "$work/noshard" "$work/bad/x.bin"
$chk variant config $g "$work/relu" 'activation_function="relu"'
refused "a feature the trainers' model lacks" 1 "activation_function is \"relu\"" $conv import "$work/relu" "$work/bad/x.bin"
$chk variant config $g "$work/bigv" vocab_size=16777217
refused "a vocabulary beyond the trainers' limit names it" 1 "vocab_size = 16,777,217 is more than the trainers support: the model file's V is at most 16,777,216" \
    $conv import "$work/bigv" "$work/bad/x.bin"
$chk variant config $hf/llama_tiny "$work/bigt" max_position_embeddings=1048577
refused "positions beyond the trainers' limit name it" 1 "max_position_embeddings = 1,048,577 is more than the trainers support: the model file's maxT is at most 1,048,576" \
    $conv import "$work/bigt" "$work/bad/x.bin"
ok "hf_convert.py's limits are host/checkpoint.h's (SHAPE_FIELDS)" $chk limits
no_file "$work/bad/x.bin" "after every refusal"

# existing outputs
cp "$work/llama.bin" "$work/kept.bin"
sum_before=$(cksum <"$work/kept.bin")
refused "an existing model file without --force" 1 "'$work/kept.bin' exists; pass --force" $conv import $g "$work/kept.bin"
check "... is left as it was" [ "$(cksum <"$work/kept.bin")" = "$sum_before" ]
ok "with --force it is replaced" bash -c "$conv import $g '$work/kept.bin' --force && cmp -s '$work/kept.bin' '$work/gpt2.bin'"
refused "an existing folder without --force" 1 "'$work/gpt2_hf' exists; pass --force" $conv export "$work/llama.bin" "$work/gpt2_hf"
# a folder with a tokenizer and a sharded model: --force replaces the weights, keeps the tokenizer
cp -r $hf/llama_tiny "$work/into" && echo '{}' >"$work/into/tokenizer.json"
ok "export --force into a folder holding shards: its weights replaced" \
    bash -c "$conv export '$work/gpt2.bin' '$work/into' --force && $chk same $g '$work/into'"
check "... the shards and their index removed, the tokenizer kept" \
    [ "$(ls -A "$work/into" | tr '\n' ' ')" = "config.json generation_config.json model.safetensors tokenizer.json " ]
refused "export of a file that is not a model" 1 "is not a model file \(magic" $conv export $g/model.safetensors "$work/bad/y"
head -c 5000 "$work/llama.bin" >"$work/cut.bin"
refused "export of a truncated model file" 1 "is truncated or damaged" $conv export "$work/cut.bin" "$work/bad/y"
no_file "$work/bad/y" "export refused"

# command lines and packages
usage="; usage: hf_convert.py import HF_DIR MODEL.bin \[--force\] \| export MODEL.bin HF_DIR \[--force\]\$"
refused "no command" 2 "^hf_convert: error: the following arguments are required: \{import,export\}$usage" $conv
refused "an unknown command" 2 "invalid choice: 'convert'.*$usage" $conv convert a b
refused "import with one argument" 2 "the following arguments are required: MODEL.bin$usage" $conv import $g
refused "an unknown option" 2 "unrecognized arguments: --froce$usage" $conv import $g "$work/bad/x.bin" --froce
mkdir "$work/nonumpy" && echo 'raise ImportError("no numpy here")' >"$work/nonumpy/numpy.py"
refused "without numpy: named, exit 1" 1 "numpy is not installed" env PYTHONPATH="$work/nonumpy" $conv import $g "$work/bad/x.bin"
mkdir "$work/nosafe" && echo 'raise ImportError("no safetensors here")' >"$work/nosafe/safetensors.py"
refused "without safetensors: named, exit 1" 1 "safetensors is not installed" env PYTHONPATH="$work/nosafe" $conv import $g "$work/bad/x.bin"

# ---- transformers loads the exports (where torch and transformers are installed; not in CI)
for f in gpt2 llama; do
    $chk transformers $hf/${f}_tiny "$work/${f}_hf" $hf/${f}_tiny_reference.bin >"$work/tf.out" 2>&1
    rc=$?
    if [ "$rc" -eq 77 ]; then
        not_run "$f: the exported folder in transformers" "$(cat "$work/tf.out")"
    else
        cat "$work/tf.out"
        check "$f: the exported folder loads in transformers and computes the fixture's logits" [ "$rc" -eq 0 ]
    fi
done
finish
