#!/usr/bin/env bash
# scripts/measure_cpu_runtime_samples.sh: the CPU runtime measured as a new user would try it,
# on public teaching code the project has not seen (docs/cpu-runtime.md keeps the table).
#
#   scripts/measure_cpu_runtime_samples.sh MIRRORS WORK [NAME...]
#
# MIRRORS holds bare git snapshots NVIDIA+cuda-samples/repo, siboehm+SGEMM_CUDA/repo and
# tspeterkim+flash-attention-minimal/repo (git clone --bare of each). Their files are copied
# into WORK, outside the project, and each program is built by the documented route,
#     make -C PROJECT /abs/path/NAME_cpu [SOURCES=...] [INCLUDES=-I...]
# one at a time (-j1), then run from its own folder with a time limit (TIMEOUT, 60 s).
# One line per program: NAME  built|build-failed  passed|failed|timeout  first blocker.
# "passed" is exit status 0 and no FAIL/Failed/error in the output; a program that stops
# at the limit counts as not run to completion. NAME... measures only those.
# Not part of make test: it needs the snapshots and takes about an hour on 2 cores.
set -u
MIRRORS=${1:?usage: $0 MIRRORS WORK [NAME...]}
WORK=${2:?usage: $0 MIRRORS WORK [NAME...]}
shift 2
ONLY=" $* "
PROJECT=$(cd "$(dirname "$0")/.." && pwd)
TIMEOUT=${TIMEOUT:-60}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)

export_tree() {  # REPO PATH...: the files at HEAD, into WORK/REPO
    local repo=$1
    shift
    mkdir -p "$WORK/$repo"
    # (source files and the samples' input images only, one by one: the snapshots lack some
    # large documents and other images)
    local f
    git --git-dir="$MIRRORS/$repo/repo" ls-tree -r --name-only HEAD -- "$@" |
        grep -E '\.(cu|cuh|h|hpp|cpp|c|inl)$|/data/[^/]+\.pgm$' | while read -r f; do
        mkdir -p "$WORK/$repo/$(dirname "$f")"
        git --git-dir="$MIRRORS/$repo/repo" show "HEAD:$f" >"$WORK/$repo/$f"
    done
}

# NAME DIR MAIN [SOURCES] [INCLUDES] [ARGS] [VERDICT]: one program. VERDICT, for a program whose
# correct output says "failed" (simpleAssert: "Device assert failed as expected"), is its own
# line of success: then "passed" is exit status 0 and that line in the output.
measure() {
    local name=$1 dir=$2 main=$3 sources=${4:-} includes=${5:-} args=${6:-} verdict=${7:-}
    [ "$ONLY" != "  " ] && [[ "$ONLY" != *" $name "* ]] && return
    local log="$WORK/logs/$name"
    mkdir -p "$WORK/logs"
    local target="$dir/${main%.cu}_cpu"
    [ -z "${KEEP:-}" ] && rm -f "$target"  # KEEP=1: the same program again, with other arguments
    if ! make -j1 -C "$PROJECT" "$target" SOURCES="$sources" INCLUDES="$includes" >"$log.build" 2>&1; then
        local why
        why=$(grep -m1 -E " error|Error:|undefined reference" "$log.build" | sed "s|$WORK/||g; s|$PROJECT/||g" | cut -c1-160)
        printf '%-34s build-failed  -        %s\n' "$name" "$why"
        return
    fi
    local rc
    (cd "$dir" && timeout "$TIMEOUT" "$target" $args </dev/null >"$log.run" 2>&1)
    rc=$?
    local status=passed why=""
    if [ $rc = 124 ]; then
        status=timeout why="still running after ${TIMEOUT} s"
    elif [ $rc != 0 ] || { [ -z "$verdict" ] && grep -q -E "FAIL|Failed|failed|ERROR" "$log.run"; } ||
        { [ -n "$verdict" ] && ! grep -q -F "$verdict" "$log.run"; }; then
        status=failed
        why=$(grep -m1 -E "cpu_cuda|FAIL|Failed|failed|rror|not supported" "$log.run" | cut -c1-160)
        [ -z "$why" ] && why="exit status $rc"
    fi
    printf '%-34s built         %-8s %s\n' "$name" "$status" "$why"
}

S=NVIDIA+cuda-samples
export_tree $S Common Samples/0_Introduction Samples/2_Concepts_and_Techniques Samples/3_CUDA_Features \
    Samples/4_CUDA_Libraries/conjugateGradientMultiBlockCG Samples/6_Performance
C="-I$WORK/$S/Common"
measure matrixMul "$WORK/$S/Samples/0_Introduction/matrixMul" matrixMul.cu "" "$C" "-wA=64 -hA=64 -wB=64 -hB=64"
measure simpleAssert "$WORK/$S/Samples/0_Introduction/simpleAssert" simpleAssert.cu "" "$C" "" \
    "simpleAssert completed, returned OK"
for n in asyncAPI clock fp16ScalarProduct simpleAWBarrier simpleAttributes \
    simpleCooperativeGroups simpleHyperQ simpleMultiCopy simpleMultiGPU simpleOccupancy simplePrintf \
    simpleStreams simpleTemplates simpleVoteIntrinsics simpleZeroCopy systemWideAtomics vectorAdd \
    simpleTexture simpleSurfaceWrite simplePitchLinearTexture; do
    measure $n "$WORK/$S/Samples/0_Introduction/$n" $n.cu "" "$C"
done
measure simpleAtomicIntrinsics "$WORK/$S/Samples/0_Introduction/simpleAtomicIntrinsics" simpleAtomicIntrinsics.cu \
    simpleAtomicIntrinsics_cpu.cpp "$C"
measure template "$WORK/$S/Samples/0_Introduction/template" template.cu template_cpu.cpp "$C"
measure reductionMultiBlockCG "$WORK/$S/Samples/2_Concepts_and_Techniques/reductionMultiBlockCG" \
    reductionMultiBlockCG.cu "" "$C" -n=100000  # (2^25 elements by default: minutes here)
I="$WORK/$S/Samples/2_Concepts_and_Techniques/interval"
measure interval "$I" interval.cu "" "$C -I$I"  # (<boost/numeric/interval.hpp> from its own folder)
for n in shfl_scan threadFenceReduction inlinePTX streamOrderedAllocation; do
    measure $n "$WORK/$S/Samples/2_Concepts_and_Techniques/$n" $n.cu "" "$C"
done
measure scalarProd "$WORK/$S/Samples/2_Concepts_and_Techniques/scalarProd" scalarProd.cu scalarProd_cpu.cpp "$C"
for n in warpAggregatedAtomicsCG binaryPartitionCG cudaTensorCoreGemm bf16TensorCoreGemm tf32TensorCoreGemm; do
    measure $n "$WORK/$S/Samples/3_CUDA_Features/$n" $n.cu "" "$C"
done
measure globalToShmemAsyncCopy "$WORK/$S/Samples/3_CUDA_Features/globalToShmemAsyncCopy" globalToShmemAsyncCopy.cu \
    "" "$C" "-wA=128 -hA=128 -wB=128 -hB=128"  # (1280 x 1280, 101 times, by default: 212 G multiply-adds)
measure simpleCudaGraphs "$WORK/$S/Samples/3_CUDA_Features/simpleCudaGraphs" simpleCudaGraphs.cu "" "$C"
measure conjugateGradientMultiBlockCG "$WORK/$S/Samples/4_CUDA_Libraries/conjugateGradientMultiBlockCG" \
    conjugateGradientMultiBlockCG.cu "" "$C"
measure transpose "$WORK/$S/Samples/6_Performance/transpose" transpose.cu "" "$C" "-dimX=512 -dimY=512"  # (1024: 53 s)
measure alignedTypes "$WORK/$S/Samples/6_Performance/alignedTypes" alignedTypes.cu "" "$C"
measure UnifiedMemoryPerf "$WORK/$S/Samples/6_Performance/UnifiedMemoryPerf" matrixMultiplyPerf.cu \
    "commonKernels.cu helperFunctions.cpp" "$C"

# The SGEMM series: one program, a kernel number as its argument (0 is cuBLAS). Measured at
# sizes 128 and 256 with 5 timing repeats instead of up to 4096 and 50 (sed, in WORK's copy).
G=siboehm+SGEMM_CUDA
export_tree $G sgemm.cu src
sed -i 's/SIZE = {128, 256, 512, 1024, 2048, 4096}/SIZE = {128, 256}/; s/repeat_times = 50/repeat_times = 5/' \
    "$WORK/$G/sgemm.cu"
for k in 0 1 2 3 4 5 6 7 8 9 10 11 12; do
    KEEP=$([ $k = 0 ] || echo 1) measure sgemm_$k "$WORK/$G" sgemm.cu src/runner.cu "-I$WORK/$G/src" $k
done

# The minimal flash attention: a PyTorch extension (flash.cu includes torch/types.h).
F=tspeterkim+flash-attention-minimal
export_tree $F flash.cu main.cpp
measure flash_attention_minimal "$WORK/$F" flash.cu "" ""
