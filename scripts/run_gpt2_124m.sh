#!/usr/bin/env bash
# GPT-2 124M from scratch on the FineWeb-Edu 10B-token sample, llm.c's recipe:
# 524,288-token batches of 1024-token sequences, AdamW lr 6e-4 (700 warm-up
# steps, cosine decay to 0), weight decay 0.1, one pass over 10B tokens: the
# trainer derives the steps (--train-tokens), 10B / 524,288 = 19,073.
#
#   scripts/run_gpt2_124m.sh [--gpus N] [--hosts FILE] [--micro-batch B|auto] [--device-memory SIZE]
#                            [--zero 0|1] [--tokens N] [--steps N] [--data DIR] [--out DIR]
#                            [--dry-run [0|1]] [-- TRAINER ARGS...]
#
#   --gpus N       replicas (GPUs) in total; N > 1 launches through mpirun -np N
#   --zero 0|1     ZeRO stage 1 (default 0: the model and its optimizer state fit every GPU)
#   --hosts FILE   MPI hostfile for several nodes (mpirun --hostfile FILE)
#   --micro-batch  sequences per GPU per forward pass (env MICRO_BATCH); default auto:
#                  the trainer takes the largest that fits in the GPU's memory and
#                  splits the global batch, and gradient accumulation makes up the
#                  rest, so the optimisation is the same whatever it picks
#   --device-memory SIZE  memory per GPU for that choice, e.g. 80GB (env DEVICE_MEMORY);
#                  default: what the GPU has free; a dry run with no GPU visible plans
#                  for 80GB
#   --tokens N     tokens to train on (default 10,000,000,000, env TOKENS)
#   --steps N      a number of steps instead (env STEPS)
#   --dry-run      print the batch arithmetic, the command and the trainer's plan; launch nothing
# Needs a GPU visible to nvidia-smi (--dry-run does not).
# Environment: MICRO_BATCH, TOKENS, STEPS, DATA_DIR, OUT_DIR, TRAIN_BIN (default ./train_gpt).
# Data: python3 data/fineweb.py --dataset edu  (writes data/edu_fineweb10B/).
# Arguments after "--" are appended to the trainer's command line.
# The rest of the recipe, shared with run_gpt2_1558m.sh: scripts/gpt2_recipe.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=(--layers 12 --heads 12 --channels 768 --max-seq-len 1024 --vocab 50257 --padded-vocab 50304)
GPUS=1
TOTAL_BATCH=524288
TOKENS=${TOKENS:-10000000000}
STEPS=${STEPS:-}
OUT_DIR=${OUT_DIR:-out/gpt2_124m}
ZERO_WITH_REPLICAS=0
source scripts/gpt2_recipe.sh
