#!/usr/bin/env bash
# Runs every fuzz harness (built by `make fuzzers` into build/fuzz/) for SECONDS each:
# first it replays the committed corpus (corpus/<harness>/: valid seeds and every input that
# once crashed the trainer), then it fuzzes from there. New inputs go to a scratch directory,
# never into the committed corpus; a crash leaves its input in build/fuzz/crashes/ and fails
# the harness. Harnesses run side by side, one per processor. Prints executions per harness
# and ends with "N passed, M failed".
#   bash test/hardening/fuzz/run.sh [SECONDS]      (make fuzz: 60 s each; CI: 20 s each)
set -u
cd "$(dirname "$0")/../../.."
seconds=${1:-60}
harnesses=(model_header shard_header tokenizer state command_line eval_file)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p build/fuzz/crashes
# One harness: fuzzes, then leaves its exit status in $work/$h.rc.
fuzz() {
    local h=$1 bin=build/fuzz/fuzz_$1
    mkdir -p "$work/$h"
    # malloc limit: no input of a few KB may make a parser allocate 256 MB (a size taken from
    # a header before it was checked); -close_fd_mask=1 silences the parsers' stdout
    "$bin" "$work/$h" "test/hardening/fuzz/corpus/$h" -max_total_time="$seconds" -malloc_limit_mb=256 -rss_limit_mb=2048 \
        -max_len=4096 -timeout=10 -close_fd_mask=1 -print_final_stats=1 -artifact_prefix="build/fuzz/crashes/$h-" \
        >"$work/$h.log" 2>&1
    echo $? >"$work/$h.rc"
}
# Each harness is one process on one core: as many run at once as there are processors.
jobs_max=$(nproc)
for h in "${harnesses[@]}"; do
    [ -x "build/fuzz/fuzz_$h" ] || continue
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
    fuzz "$h" &
done
wait
source test/suite_lib.sh  # pass, fail, finish
for h in "${harnesses[@]}"; do
    bin=build/fuzz/fuzz_$h log=$work/$h.log
    if [ ! -x "$bin" ]; then fail "$h: $bin is not built (make fuzzers)"; continue; fi
    rc=$(cat "$work/$h.rc" 2>/dev/null || echo 1)
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    replayed=$(ls "test/hardening/fuzz/corpus/$h" | wc -l)
    if [ "$rc" -eq 0 ] && [ -n "$runs" ]; then
        pass "$h: corpus of $replayed replayed, $(printf "%'d" "$runs") executions in $seconds s, no finding"
    else
        grep -E "ERROR|runtime error|SUMMARY|Test unit written" "$log" | head -8
        fail "$h (status $rc): the input is in build/fuzz/crashes/; replay: $bin build/fuzz/crashes/$h-*"
    fi
done
finish
