#!/usr/bin/env bash
# make check-docs can fail: test/tools/check_docs.py on a small page whose quotes are right passes, and
# on copies with one planted wrong digit (in a table, in an error line, a digit more than the
# program prints) fails, naming the page, the line and both texts. Then the quick checks of the
# real pages (the error lines and dry-run plans; make check-docs also reruns the training runs).
# A few seconds: no training.
set -u
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source test/suite_lib.sh  # pass, fail, not_run, finish
[ -x ./train ] || { echo "./train is not built (make train)"; echo "0 passed, 1 failed"; exit 1; }

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
