#!/usr/bin/env bash
# make check-docs can fail: test/tools/check_docs.py on a small page whose quotes are right passes, and
# on copies with one planted wrong digit (in a table, in an error line, a digit more than the
# program prints) fails, naming the page, the line and both texts. Then the quick checks of the
# real pages (the error lines and dry-run plans; make check-docs also reruns the training runs).
# First, the names the pages give (check_docs.py --names): the real pages pass, and a copy of
# them with a renamed function, a missing file or a missing option planted fails, naming it.
# A few seconds: no training.
#
#   test/tools/quoted_outputs.sh            all of it (needs ./train)
#   test/tools/quoted_outputs.sh --names    the name check's cases only (nothing built needed)
set -u
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source test/suite_lib.sh  # pass, fail, not_run, finish
case "${1:-}" in
    "") names_only=0 ;;
    --names) names_only=1 ;;
    *) echo "test_check_docs.sh: unknown option '$1' (--names, or none)" >&2; exit 2 ;;
esac

# ---- the names: the pages' files, functions and options exist
python3 test/tools/check_docs.py --names >"$work/names.out" 2>&1 && grep -qE "^names: [1-9][0-9]+ checked, 0 missing$" "$work/names.out" &&
    pass "the files, functions and options README.md and docs/*.md name exist: $(tail -1 "$work/names.out")" ||
    { cat "$work/names.out"; fail "the names README.md and docs/*.md give"; }
# plant_name PAGE TEXT KIND NAME: a copy of the pages with TEXT added at the end of PAGE; the
# checker must fail on it, naming the page, the line, the kind and the name
plant_name() {
    rm -rf "$work/tree" && mkdir "$work/tree" && cp -r README.md docs "$work/tree/"
    printf '\n%s\n' "$2" >>"$work/tree/$1"
    local line; line=$(wc -l <"$work/tree/$1")
    python3 test/tools/check_docs.py --names --docs-root "$work/tree" >"$work/planted.out" 2>&1; local rc=$?
    if [ $rc -eq 1 ] && grep -qF "MISSING $1:$line: $3 $4: not in the checkout" "$work/planted.out" &&
       grep -q ", 1 missing$" "$work/planted.out"; then
        pass "a missing $3 in $1 fails the name check, named: $4"
    else cat "$work/planted.out"; fail "a missing $3 in $1: $4 (exit status $rc)"; fi
}
# (each planted name is written in two halves here, so that this file does not define it)
n="sync_grad""ient()";           plant_name docs/zero.md "The sync is \`$n\` in train.cpp." function "$n"
n="DataLoader::serve_micro""_batch()"; plant_name README.md "The loader's \`$n\`." function "$n"
n="DataLoader::train""_step()";  plant_name README.md "The loader's \`$n\`." function "$n"  # a function, not the class's
n="host/gradient""_sync.h";      plant_name docs/gpu.md "See \`$n\`." file "$n"
n="../host/cl""ii.h";            plant_name docs/planning.md "As \`$n\` says." file "$n"
n="--grad-sync""-mode";          plant_name README.md "Pass \`$n overlap\`." option "$n"
n="--results""-folder";         plant_name docs/gpu.md "Run \`scripts/gpu_check.sh $n DIR\`." option "$n"
# and what must pass: a path from the page's folder, a build output, a function in a class's body
rm -rf "$work/tree" && mkdir "$work/tree" && cp -r README.md docs "$work/tree/"
printf '\n%s\n' "From here \`../host/cli.h\`, built \`./train\` and \`dev/cuda/layernorm\`, run \`out/r1/log.jsonl\`," \
    "\`DataLoader::micro_batch()\`, \`scripts/gpu_check.sh --out DIR --plan\`." >>"$work/tree/docs/zero.md"
python3 test/tools/check_docs.py --names --docs-root "$work/tree" >"$work/planted.out" 2>&1 &&
    pass "paths from the page's folder, build and run outputs, a class's function, a script's options pass" ||
    { cat "$work/planted.out"; fail "the names that exist"; }
if [ "$names_only" -eq 1 ]; then finish; exit; fi

# ---- the quoted outputs
[ -x ./train ] || { echo "./train is not built (make train)"; echo "$passed passed, $((failed + 1)) failed"; exit 1; }

cat >"$work/page.md" <<'PAGE'
# A page

A mistyped output directory:

<!-- check: ./train --resume 1 -o out/typo_dir -->
```
train: error: --resume 1: no checkpoint in 'out/typo_dir' (a model_*.bin with its state_*.bin); check --out-dir, or pass --resume auto to start from step 0 when there is none
```

Two defaults, from --help:

<!-- check: ./train --help | sed -En 's/^ +-n, --steps .*\[(.*)\]$/\1/p; s/^ +--warmup .*\[(.*)\]$/\1/p' -->
| option | default |
|---|---|
| `--steps` | 300 |
| `--warmup` | 20 |

With a wildcard and a skip:

<!-- check: ./train --help | head -3 -->
```
usage: … [options]
...
```
PAGE

# plant SED NAME LINE QUOTED PRINTED: a copy of the page with one edit; the checker must fail on it and show both texts
plant() {
    sed "$1" "$work/page.md" >"$work/bad.md"
    if cmp -s "$work/page.md" "$work/bad.md"; then fail "$2: the edit '$1' changed nothing"; return; fi
    python3 test/tools/check_docs.py "$work/bad.md" >"$work/bad.out" 2>&1; local rc=$?
    if [ $rc -eq 1 ] && grep -qF "$work/bad.md:$3 quotes" "$work/bad.out" && grep -qF "$4" "$work/bad.out" &&
       grep -qF "$5" "$work/bad.out"; then
        pass "$2: fails with the page and line ($3) and both texts"
    else cat "$work/bad.out"; fail "$2 (exit status $rc)"; fi
}

python3 test/tools/check_docs.py "$work/page.md" >"$work/good.out" 2>&1 && grep -q "^3 passed, 0 failed" "$work/good.out" &&
    pass "a page whose quotes match passes (an error line, a table's numbers, … and ...)" ||
    { cat "$work/good.out"; fail "the matching page"; }
plant 's/| 300 |/| 310 |/' "a wrong digit in a table" 15 "quotes 310" "prints 300"
plant "s/--resume 1: no/--resume 7: no/" "a wrong digit in an error line" 7 "quotes: train: error: --resume 7" \
    "prints:  train: error: --resume 1"
plant 's/| 20 |/| 20.0 |/' "a digit more than the program prints" 16 "quotes 20.0" "prints 20"

# the real pages' quick checks (the trainings are make check-docs's)
if [ -x ./train_gpt_cpu ] || [ -x ./train_gpt ]; then
    if python3 test/tools/check_docs.py --quick >"$work/docs.out" 2>&1; then
        pass "the quick checks of README.md and docs/*.md: $(tail -1 "$work/docs.out")"
    else cat "$work/docs.out"; fail "the quick checks of README.md and docs/*.md"; fi
else
    not_run "the quick checks of README.md and docs/*.md" "./train_gpt_cpu is not built (the recipes' plans need it)"
fi
finish
