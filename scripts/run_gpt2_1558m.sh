#!/usr/bin/env bash
# GPT-2 1.5B (1558M: L=48, NH=25, C=1600) from scratch on FineWeb-Edu, llm.c's recipe
# for it: 1,048,576-token batches of 1024-token sequences, AdamW lr 6e-4 (700 warm-up
# steps, cosine decay to 0), weight decay 0.1, gradient clipping at 1, 32,000 steps
# (33.6B tokens), and ZeRO stage 1 (--zero 1) on more than one GPU: each GPU keeps 1/N of
# the float32 master weights and of AdamW's state, which is what lets the model fit 80 GB
# GPUs with a useful micro-batch.
#
#   scripts/run_gpt2_1558m.sh [--gpus N] [--hosts FILE] [--micro-batch B|auto] [--device-memory SIZE]
#                             [--zero 0|1] [--tokens N] [--steps N] [--data DIR] [--out DIR]
#                             [--dry-run [0|1]] [-- TRAINER ARGS...]
#
#   --gpus N       replicas (GPUs) in total (default 8); N > 1 launches through mpirun -np N
#   --zero 0|1     ZeRO stage 1 (default 1 when N > 1)
#   --hosts FILE   MPI hostfile for several nodes (mpirun --hostfile FILE)
#   --micro-batch  sequences per GPU per forward pass (env MICRO_BATCH); default auto:
#                  the trainer takes the largest that fits in the GPU's memory and
#                  splits the global batch, and gradient accumulation makes up the
#                  rest, so the optimisation is the same whatever it picks
#   --device-memory SIZE  memory per GPU for that choice, e.g. 80GB (env DEVICE_MEMORY);
#                  default: what the GPU has free; a dry run with no GPU visible plans
#                  for 80GB
#   --tokens N     tokens to train on instead of --steps (env TOKENS)
#   --steps N      optimizer steps (default 32,000, env STEPS)
#   --dry-run      print the batch arithmetic, the command and the trainer's plan, and the
#                  micro-batch and memory per GPU without ZeRO to compare; launch nothing
# Needs a GPU visible to nvidia-smi (--dry-run does not).
# Environment: MICRO_BATCH, TOKENS, STEPS, DATA_DIR, OUT_DIR, TRAIN_BIN (default ./train_gpt).
# Data: python3 data/fineweb.py --dataset edu  (writes data/edu_fineweb10B/).
# Arguments after "--" are appended to the trainer's command line.
# The rest of the recipe, shared with run_gpt2_124m.sh: scripts/gpt2_recipe.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=(--layers 48 --heads 25 --channels 1600 --max-seq-len 1024 --vocab 50257 --padded-vocab 50304)
GPUS=8
TOTAL_BATCH=1048576
TOKENS=${TOKENS:-}
STEPS=${STEPS:-32000}
OUT_DIR=${OUT_DIR:-out/gpt2_1558m}
ZERO_WITH_REPLICAS=1
source scripts/gpt2_recipe.sh
