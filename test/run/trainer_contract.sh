#!/usr/bin/env bash
# The Trainer contract (host/trainer.h) is checked by the compiler: a trainer that lacks one
# of its members fails to build with an error that names that member, and the run's own code
# (host/run.h) adds no errors of its own. test/run/trainer_contract.cpp has every member; each
# case leaves one out (-DDROP_name) and compiles it (syntax only: a second or two each, one a processor at a time).
set -u
cd "$(dirname "$0")/../.."
source test/suite_lib.sh
CXX=${CXX:-g++}
compile() { "$CXX" -std=c++17 -fsyntax-only "$@" test/run/trainer_contract.cpp 2>&1; }

members=(connect check_options hardware GATHERED_WEIGHT_BYTES memory_use memory_available run_time_choices
         choose_kernels kernel_plan params adam_m adam_v upload download train_step token_losses
         next_token_logits next_token_logits_cached)
# the compiles, as many at a time as there are processors, each to its own log and status
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for member in all "${members[@]}"; do
    a_processor_free
    flag=(); [ "$member" = all ] || flag=("-DDROP_$member")
    { compile "${flag[@]}" >"$work/$member.log"; echo $? >"$work/$member.rc"; } &
done
wait
built() { [ "$(cat "$work/$1.rc" 2>/dev/null)" = 0 ]; }

built all && pass "a trainer with every member builds" || { fail "a trainer with every member builds"; head -20 "$work/all.log"; }
for member in "${members[@]}"; do
    built "$member" && { fail "without $member: the build fails"; continue; }
    out=$(cat "$work/$member.log")
    # the contract's line names the member; no error comes from inside host/run.h
    if grep -q "the Trainer (host/trainer.h) needs $member: " <<<"$out" && ! grep -q 'host/run.h:[0-9]*:[0-9]*: error' <<<"$out"; then
        pass "without $member: the build fails naming it"
    else
        fail "without $member: the build fails naming it"
        echo "$out" | grep -E 'error' | head -5
    fi
done
finish
