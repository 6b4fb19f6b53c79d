#!/usr/bin/env bash
# The CPU runtime (cpu_cuda/) stands alone, a library beneath the trainers:
#   * every header of it compiles alone: a translation unit that includes it and nothing else,
#     compiled with the compiler and flags of the CPU runtime's builds, less the umbrella
#     header that they include first (cpu.mk's print-cpu-cuda-compiler). A header that uses
#     what only another one declares compiles in the umbrella's order and fails here;
#   * none of its files includes anything of the trainers (host/, gpu/, train*): a failing
#     case names the line.
# Syntax only (g++ -fsyntax-only): a few seconds a header, one a processor at a time.
# Skipped without the CUDA toolkit's headers, which declare what the runtime defines.
set -u
cd "$(dirname "$0")/../.."
source test/suite_lib.sh  # pass, fail, skip, check, finish, a_processor_free

if ! make -s --no-print-directory cpu_cuda_check >/dev/null 2>&1; then
    skip "cpu_cuda/ headers" "the CUDA toolkit's headers were not found (install the CUDA toolkit)"
    finish
    exit
fi
read -r -a compiler <<<"$(make -s --no-print-directory print-cpu-cuda-compiler)"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# the headers a program may include: cpu_cuda/*.h, and include/'s stand-ins for the toolkit's
headers=(cpu_cuda/*.h cpu_cuda/include/*.h cpu_cuda/include/*/*.h cpu_cuda/include/cuda/*)
# compiled as many at a time as there are processors, each leaving its status beside its log
for header in "${headers[@]}"; do
    unit=$dir/$(tr / _ <<<"$header").cpp
    echo "#include \"$PWD/$header\"" >"$unit"
    a_processor_free
    { "${compiler[@]}" -fsyntax-only "$unit" >"$unit.log" 2>&1; echo $? >"$unit.rc"; } &
done
wait
for header in "${headers[@]}"; do
    unit=$dir/$(tr / _ <<<"$header").cpp
    if [ "$(cat "$unit.rc" 2>/dev/null)" = 0 ]; then
        pass "$header compiles alone"
    else
        fail "$header compiles alone:"
        grep -m 5 'error' "$unit.log" | sed 's/^/   /'
    fi
done

# (files the runtime is built from; a quoted or bracketed path naming the trainers' code)
trainers=$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]([^">]*/)?(host|gpu|train)' cpu_cuda)
if [ -z "$trainers" ]; then
    pass "cpu_cuda/ includes nothing of the trainers (host/, gpu/, train*)"
else
    fail "cpu_cuda/ includes the trainers' code:"
    sed 's/^/   /' <<<"$trainers"
fi
finish
