#!/usr/bin/env bash
# The Trainer contract (host/trainer.h) is checked by the compiler: a trainer that lacks one
# of its members fails to build with an error that names that member, and the run's own code
# (host/run.h) adds no errors of its own. test/run/trainer_contract.cpp has every member; each
# case leaves one out (-DDROP_name) and compiles it (syntax only: a second or two each).
set -u
cd "$(dirname "$0")/../.."
source test/suite_lib.sh
CXX=${CXX:-g++}
compile() { "$CXX" -std=c++17 -fsyntax-only "$@" test/run/trainer_contract.cpp 2>&1; }

out=$(compile) && pass "a trainer with every member builds" || { fail "a trainer with every member builds"; echo "$out" | head -20; }
for member in connect check_options hardware GATHERED_WEIGHT_BYTES memory_use memory_available run_time_choices \
              choose_kernels kernel_plan params adam_m adam_v upload download train_step token_losses \
              next_token_logits next_token_logits_cached; do
    out=$(compile "-DDROP_$member") && { fail "without $member: the build fails"; continue; }
    # the contract's line names the member; no error comes from inside host/run.h
    if grep -q "the Trainer (host/trainer.h) needs $member: " <<<"$out" && ! grep -q 'host/run.h:[0-9]*:[0-9]*: error' <<<"$out"; then
        pass "without $member: the build fails naming it"
    else
        fail "without $member: the build fails naming it"
        echo "$out" | grep -E 'error' | head -5
    fi
done
finish
