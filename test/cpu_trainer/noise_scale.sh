#!/usr/bin/env bash
# The gradient noise scale in the trainers (host/noise.h; its formulas alone: test/cpu_trainer/noise_estimator.cpp).
#   * train and train_gpt's fp32 build agree on grad_norm_small and grad_norm_big (1e-5), with
#     one replica and with two;
#   * frozen weights (--lr 0), one global batch of 32 sequences split as (B,A,R) = (8,4,1),
#     (16,2,1), (8,2,2): |G_big|² identical (1e-5), B_noise the same within the statistical
#     tolerance test/cpu_trainer/check_noise_runs.py derives and states; the logged noise_scale equal to the
#     paper's EMA recomputed from the logged norms;
#   * against dev/reference/noise_reference.py's exact float64 numbers (test/golden/noise_tiny.txt),
#     in both trainers and three splits: each step's |G_small|² and |G_big|² (1e-5), the logged
#     moving average, and the estimate against the golden set's exact B_noise (a stated tolerance);
#   * A = R = 1: one start-up line saying why it is not measured, no fields in the log, exit 0;
#     --noise-ema 0: neither line nor fields.
# GPU_TRAIN= (empty) skips the GPU trainer (default ./train_gpt_cpu_fp32 when it is built);
# the (8,2,2) split needs ./train with MPI and mpirun (skipped otherwise).
set -u
cd "$(dirname "$0")/../.."
source test/mpi_lib.sh  # OMPI_ALLOW_RUN_AS_ROOT, $MPIRUN, mpi_ok
GPU_TRAIN=${GPU_TRAIN-$([ -x ./train_gpt_cpu_fp32 ] && echo ./train_gpt_cpu_fp32)}
T=16
TINY="--layers 2 --heads 2 --channels 32 --max-seq-len 32 -t $T --val-every 0 --sample-every 0 --threads 1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source test/suite_lib.sh  # pass, fail, not_run, finish (a skip here is one in CI too)
check_runs() { python3 test/cpu_trainer/check_noise_runs.py "$@"; }

# ---- the two trainers: 3 steps, B = 4, A = 2 (the first micro-batch's norm and the synced one)
name="train and $GPU_TRAIN agree on grad_norm_small and grad_norm_big"
if [ -z "$GPU_TRAIN" ]; then not_run "$name (no GPU trainer built)"
elif ./train $TINY -b 4 -d 128 -n 3 --val-every 3 --val-tokens 512 -o "$work/cpu" >"$work/cpu.out" 2>&1 &&
     $GPU_TRAIN $TINY -b 4 -d 128 -n 3 -o "$work/gpu" >"$work/gpu.out" 2>&1 &&
     check_runs agree "$work/cpu" "$work/gpu"; then pass "$name"
else fail "$name"; tail -3 "$work/cpu.out" "$work/gpu.out"; fi

# the same with 2 replicas: |G_small|² averaged over them in the loss's all-reduce
name="train and $GPU_TRAIN agree with 2 replicas (B = 4, A = 2, R = 2)"
if [ -z "$GPU_TRAIN" ] || ! mpi_ok ./train; then
    not_run "$name (needs the GPU trainer, ./train with MPI and mpirun)"
elif $MPIRUN -np 2 ./train $TINY -b 4 -d 256 -n 3 -o "$work/cpu2" >"$work/cpu2.out" 2>&1 &&
     $MPIRUN -np 2 $GPU_TRAIN $TINY -b 4 -d 256 -n 3 -o "$work/gpu2" >"$work/gpu2.out" 2>&1 &&
     check_runs agree "$work/cpu2" "$work/gpu2"; then pass "$name"
else fail "$name"; tail -3 "$work/cpu2.out" "$work/gpu2.out"; fi

name="the step line of a validation shows the noise scale and the global batch"
if grep -qE '^step 3 \| val loss [0-9.]+ \| noise scale (≈ [0-9.]+k? tokens|: no estimate yet) \(global batch 128\)$' "$work/cpu.out"
then pass "$name"; else fail "$name"; grep '^step 3 |' "$work/cpu.out"; fi

# ---- splits with frozen weights: a model trained for 100 steps (at initialisation the noise
# scale is a few tokens, far below every batch, and its estimate mostly noise), then 400 steps
# at --lr 0, each an independent draw of batches
./train $TINY -b 16 -n 100 -o "$work/pre" >"$work/pre.out" 2>&1 || { cat "$work/pre.out"; fail "pre-training"; }
FROZEN="--load $work/pre/model_00000100.bin --lr 0 -n 400 -d $((32 * T)) --noise-ema 0.95"
dirs=()
for split in "8 4 1" "16 2 1" "8 2 2"; do
    set -- $split
    dir="$work/s$1$2$3"
    if [ "$3" -gt 1 ]; then
        if ! mpi_ok ./train; then
            not_run "split ($1,$2,$3): needs ./train with MPI and mpirun"; continue
        fi
        cmd="$MPIRUN -np $3 ./train"
    else cmd="./train"; fi
    if $cmd $TINY $FROZEN -b "$1" -o "$dir" >"$dir.out" 2>&1; then dirs+=("$dir")
    else fail "split ($1,$2,$3) did not run"; tail -3 "$dir.out"; fi
done
if [ ${#dirs[@]} -ge 2 ] && check_runs splits $T 0.95 "${dirs[@]}"; then pass "splits: same |G_big|², same B_noise"
else fail "splits: same |G_big|², same B_noise"; fi

# ---- against the exact numbers of dev/reference/noise_reference.py (PyTorch, float64): frozen
# weights, the golden set of 512 sequences in order, one epoch of 64 steps of 8 sequences; every
# step's two norms, the logged moving average and the estimate against the set's exact B_noise
GOLDEN="--load test/golden/noise_model.bin -i test/golden/noise_tokens.bin -j test/golden/noise_tokens.bin
        -t 32 -d 256 --lr 0 --shuffle 0 -n 64 --val-every 0 --sample-every 0 --threads 1 --noise-ema 0.9"
for trainer in ./train $GPU_TRAIN; do
    for split in "4 2 1" "4 1 2" "2 2 2"; do
        set -- $split
        name="$trainer, (B,A,R) = ($1,$2,$3): the noise-scale norms and estimate against the PyTorch reference"
        cmd=$trainer
        if [ "$3" -gt 1 ]; then
            if ! command -v mpirun >/dev/null || { [ "$trainer" = ./train ] && ! mpi_ok ./train; }; then
                not_run "$name (needs mpirun and a trainer built with MPI)"; continue
            fi
            cmd="$MPIRUN -np $3 $trainer"
        fi
        dir="$work/ref_$(basename "$trainer")_$1$2$3"
        if $cmd $GOLDEN -b "$1" -o "$dir" >"$dir.out" 2>&1 &&
           check_runs reference test/golden/noise_tiny.txt 0.9 "$dir"; then pass "$name"
        else fail "$name"; tail -3 "$dir.out"; fi
    done
done

# ---- the plot draws the noise-scale panel from a real log (not drawn without the fields)
name="scripts/plot.py draws the noise-scale panel"
if ! python3 -c "import matplotlib" 2>/dev/null; then not_run "$name (no matplotlib)"
elif [ -f "$work/s841/log.jsonl" ] && python3 - "$work/s841/log.jsonl" <<'PY'
import sys
sys.path.insert(0, "scripts")
import plot
import matplotlib.figure
panels = []
real_savefig = matplotlib.figure.Figure.savefig
def savefig(fig, *a, **k):
    panels.extend(ax.get_title() for ax in fig.axes if ax.get_visible())
    return real_savefig(fig, *a, **k)
matplotlib.figure.Figure.savefig = savefig
plot.main([sys.argv[1], "-o", sys.argv[1] + ".png"])
print("panels:", panels)
sys.exit(0 if any("noise scale" in t for t in panels) and len(panels) == 5 else 1)
PY
then pass "$name"; else fail "$name"; fi

# ---- A = R = 1, in both trainers: the start-up line, no fields, no crash
for trainer in ./train $GPU_TRAIN; do
    name="$trainer, A = R = 1: says once why there is no noise scale, logs no field"
    out="$work/one_$(basename "$trainer")"
    if $trainer $TINY -b 4 -n 2 -o "$out" >"$out.out" 2>&1 &&
       [ "$(grep -c 'noise scale: not measured: with one micro-batch on one replica (A = R = 1).*accumulate' "$out.out")" = 1 ] &&
       [ "$(grep -c '"type":"train"' "$out/log.jsonl")" = 2 ] && ! grep -q 'noise_scale\|grad_norm_small' "$out/log.jsonl"
    then pass "$name"; else fail "$name"; tail -5 "$out.out"; fi
done

# ---- --noise-ema 0: nothing measured, nothing said (the bad values are in hardening/bad_inputs.sh)
name="--noise-ema 0 with A = 2: no line, no fields"
if ./train $TINY -b 4 -d 128 -n 2 --noise-ema 0 -o "$work/off" >"$work/off.out" 2>&1 &&
   ! grep -q 'noise scale' "$work/off.out" && ! grep -q 'noise_scale' "$work/off/log.jsonl" &&
   grep -q '"grad_norm"' "$work/off/log.jsonl"; then pass "$name"
else fail "$name"; fi

finish
