#!/usr/bin/env bash
# The README's commands still work: every line of docs/commands.txt must appear word for word in
# README.md or docs/*.md (so the list cannot drift from the pages), and must exit with status 0
# when run in a scratch copy of the checkout (scripts/ copied, the built programs and data/
# linked), so that what it writes (out/) stays out of the checkout. "[options]" in a page stands
# for the trainer's options: it is run with --dry-run, which every launcher takes.
set -u
cd "$(dirname "$0")/../.."
root=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source test/suite_lib.sh  # pass, fail, not_run, finish

[ -x ./train ] || { echo "./train is not built (make train)"; echo "0 passed, 1 failed"; exit 1; }
cp -r scripts "$work/"
for f in train train_gpt train_gpt_cpu data; do [ -e "$f" ] && ln -s "$root/$f" "$work/$f"; done

while IFS= read -r cmd; do
    [[ -z $cmd || $cmd == \#* ]] && continue
    if ! grep -qF -- "$cmd" README.md docs/*.md; then fail "not in README.md or docs/*.md: $cmd"; continue; fi
    if [[ $cmd == *plot.py* ]] && ! python3 -c "import matplotlib" 2>/dev/null; then
        not_run "$cmd (matplotlib is missing)"; continue
    fi
    run=${cmd//\[options\]/--dry-run}
    (cd "$work" && timeout 300 bash -c "$run" >"$work/last.out" 2>&1)
    rc=$?
    if [ $rc -eq 0 ]; then pass "$cmd"; else tail -3 "$work/last.out"; fail "$cmd (exit status $rc)"; fi
done <docs/commands.txt

finish
