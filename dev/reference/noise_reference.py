#!/usr/bin/env python3
"""Exact gradient noise scale of the tiny golden model over a fixed set of sequences (PyTorch).

The trainers estimate B_noise = tr(Σ)/|G|² from two squared gradient norms per step (host/noise.h,
McCandlish et al. 2018, Appendix A). This script computes the two quantities exactly, in float64,
from the per-sequence gradients of the model in test/golden/model_tiny.bin (torch.func: grad of one
sequence's mean loss, vmapped over the sequences), for the S sequences of T tokens that a token
shard's first S·T + 1 tokens make (row s = tokens[s·T : s·T + T], targets shifted by one, as the
trainer's data loader cuts them):

    g_s    the gradient of sequence s's mean loss over its T positions
    G      = mean_s g_s                (the gradient of the whole set)
    tr(Σ)  = mean_s |g_s − G|²         (population covariance over the set)
    B_noise = tr(Σ)/|G|² sequences, × T tokens (the trainers' unit)

A trainer run over exactly these sequences (--lr 0, so the weights stay fixed; each step draws its
batch from the set) estimates a finite population. Drawing b of the S sequences without
replacement gives E|G_b|² = |G|² + tr(Σ)/b · (S − b)/(S − 1), so the trainers' estimator, which
assumes an infinite population, converges to
    |G|²'  = |G|² − tr(Σ)/(S − 1)      and      tr(Σ)' = tr(Σ) · S/(S − 1);
both are written too, and the comparison must use them.

Writes OUT (default test/golden/noise_tiny.txt): one "name value" per line.
Run from the repository root (needs torch and numpy):
    python3 data/shards.py ...   # or any llm.c token shard with ids < the model's V
    python3 dev/reference/noise_reference.py --shard SHARD --sequences 256 --seq-len 32

Status: written without PyTorch at hand (it is not installed where this was written), so its
golden numbers have NOT been generated, and no test reads them yet.
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_reference as ref  # noqa: E402  the hand-written float64 model and the file layouts


def read_model(path):
    """The float32 parameters of an llm.c model file (256 int32 header, then the tensors in file order)."""
    raw = open(path, "rb").read()
    header = np.frombuffer(raw[:1024], dtype=np.int32)
    if header[0] != ref.MODEL_MAGIC:
        sys.exit(f"{path}: not an llm.c model file")
    maxT, V, L, NH, C, Vp = (int(x) for x in header[2:8])
    if (L, NH, C, maxT, V, Vp) != (ref.L, ref.NH, ref.C, ref.MAXT, ref.V, ref.VP):
        sys.exit(f"{path}: another shape than gpt2_reference.py's tiny model")
    data, params, off = np.frombuffer(raw[1024:], dtype=np.float32), {}, 0
    for name, shape in ref.SHAPES:
        n = int(np.prod(shape))
        params[name] = torch.from_numpy(data[off:off + n].copy()).reshape(shape).to(torch.float64)
        off += n
    return params


def read_tokens(path, count):
    raw = open(path, "rb").read()
    tokens = np.frombuffer(raw[1024:], dtype=np.uint16)[:count].astype(np.int64)
    if len(tokens) < count:
        sys.exit(f"{path}: {len(tokens)} tokens, {count} needed")
    if tokens.max() >= ref.V:
        sys.exit(f"{path}: token {tokens.max()} outside the model's vocabulary of {ref.V}")
    return torch.from_numpy(tokens)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="test/golden/model_tiny.bin")
    ap.add_argument("--shard", required=True, help="llm.c token shard (ids below the model's V)")
    ap.add_argument("--sequences", type=int, default=256, help="S, the fixed set's size")
    ap.add_argument("--seq-len", type=int, default=32, help="T (at most the model's maxT)")
    ap.add_argument("--out", default="test/golden/noise_tiny.txt")
    args = ap.parse_args()
    torch.set_num_threads(1)  # a fixed summation order: byte-identical output on one machine
    S, T = args.sequences, args.seq_len

    params = read_model(args.model)
    stream = read_tokens(args.shard, S * T + 1)
    inputs, targets = stream[:-1].reshape(S, T), stream[1:].reshape(S, T)

    def sequence_loss(p, x, y):  # one sequence's mean loss over its T positions
        return ref.forward(p, x.unsqueeze(0), y.unsqueeze(0))[1]

    per_sequence = torch.func.vmap(torch.func.grad(sequence_loss), in_dims=(None, 0, 0))(params, inputs, targets)
    flat = torch.cat([per_sequence[n].reshape(S, -1) for n in ref.NAMES], dim=1)  # (S, P) float64
    G = flat.mean(dim=0)
    G2 = float(G @ G)
    trace = float(((flat - G) ** 2).sum(dim=1).mean())
    values = {
        "sequences": S, "seq_len": T,
        "G2": G2, "trace_per_sequence": trace,
        "noise_scale_sequences": trace / G2, "noise_scale_tokens": trace / G2 * T,
        # what the trainers' estimator converges to over this finite set (see above)
        "G2_finite": G2 - trace / (S - 1), "trace_finite": trace * S / (S - 1),
        "noise_scale_tokens_finite": trace * S / (S - 1) / (G2 - trace / (S - 1)) * T,
    }
    with open(args.out, "w") as f:
        for k, v in values.items():
            f.write(f"{k} {v!r}\n")
    for k, v in values.items():
        print(f"{k:28s} {v}")


if __name__ == "__main__":
    main()
