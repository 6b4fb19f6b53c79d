#!/usr/bin/env bash
# A real short training run, plotted: scripts/plot.py must turn the trainer's own log into
# a non-trivial PNG (its signature and a size that only drawn curves reach).
set -u
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source test/suite_lib.sh  # not_run, finish (the plot's checks count in Python, below)
if ! python3 -c "import matplotlib" 2>/dev/null; then
    not_run "plot of a real run" "matplotlib is missing (pip install matplotlib)"
    finish
    exit 0
fi
./train --layers 2 --heads 2 --channels 32 --max-seq-len 32 -b 4 -t 16 -n 40 --val-every 10 \
        --sample-every 0 --threads 1 -o "$work/run" >"$work/train.out" 2>&1 || { cat "$work/train.out"; exit 1; }
python3 scripts/plot.py "$work/run/log.jsonl" -o "$work/plot.png" || exit 1
python3 - "$work/plot.png" <<'PY'
import sys
png = open(sys.argv[1], "rb").read()
checks = {
    "PNG signature": png[:8] == b"\x89PNG\r\n\x1a\n",
    "larger than 10 KB (four panels with curves)": len(png) > 10_000,
}
bad = [name for name, ok in checks.items() if not ok]
for name, ok in checks.items():
    print(("PASS " if ok else "FAIL ") + name)
print(f"{len(checks) - len(bad)} passed, {len(bad)} failed")
sys.exit(1 if bad else 0)
PY
