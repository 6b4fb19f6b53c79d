#!/usr/bin/env python3
"""Exact gradient noise scale of the tiny golden model over a fixed set of sequences (PyTorch).

The trainers estimate B_noise = tr(Σ)/|G|² from two squared gradient norms per step (host/noise.h,
McCandlish et al. 2018, Appendix A). This script computes, in float64 from the per-sequence
gradients of test/golden/model_tiny.bin (torch.func: the gradient of one sequence's mean loss,
vmapped over the sequences), both what the trainers must log at each step and the population
values their estimate aims at. The sequences are the S rows of T tokens that a token shard's first
S·T + 1 tokens make (row s = tokens[s·T : s·T + T], targets shifted by one).

Per sequence s, g_s = the gradient of its mean loss over its T positions. Over the set:
    G = mean_s g_s,   tr(Σ) = mean_s |g_s − G|²,   B_noise = tr(Σ)/|G|² sequences (× T: tokens)

What a run logs. Without shuffling (--shuffle 0) and with weights frozen (--lr 0), step k of a run
with B sequences per micro-batch, A micro-batches and R replicas trains on chunk k mod (S / BAR):
sequences [k·BAR, (k+1)·BAR) (host/data.h: micro-step a of replica r takes the B sequences from
(a·R + r)·B in the chunk). Its |G_big|² is |mean of the chunk's g_s|², and its |G_small|² the mean
over replicas r of |mean of the g_s of replica r's first micro-batch|². Those are written per chunk,
exactly, so a trainer's logged norms can be compared step by step.

What the estimate aims at. The chunks partition the set; averaged over all ways of cutting it,
E|G_b|² = |G|² + tr(Σ)/b · (S − b)/(S − 1) for a batch of b of the S sequences (drawing without
replacement). The trainers' estimator assumes an infinite population, so over this set it aims at
    |G|²' = |G|² − tr(Σ)/(S − 1)   and   tr(Σ)' = tr(Σ) · S/(S − 1);
their ratio B_noise' is written too: the one partition a run sees estimates it with sampling error
(test/cpu_trainer/check_noise_runs.py states the tolerance).

Writes OUT (default test/golden/noise_tiny.txt): "name value" lines, then for each split
"split B A R" and one "chunk k small_sq big_sq" line per chunk.
The weights: with --train-from, model_tiny.bin after 40 Adam steps on the set (at initialisation
B_noise is a few tokens; after 300 steps it is ~20 sequences, far above the test's batches of 4 and
8, and the estimate too noisy to compare; 40 steps put it near them, ~8 sequences).
With --make-shard it first writes the shard: S·T + 1 character tokens (id = byte − 32, so ' ' is
0, '.' 14 and 'a'..'z' 65..90, all below the model's V = 91) of sentences from a small seeded
grammar, so that the gradients carry signal to measure (the golden model starts random).

Run from the repository root (needs torch and numpy):
    python3 dev/reference/noise_reference.py --make-shard --train-from test/golden/model_tiny.bin
(the committed golden files; without the two options it recomputes the numbers for the committed
shard and weights).
"""
import argparse
import os
import random
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_reference as ref  # noqa: E402  the hand-written float64 model and the file layouts

SHARD_MAGIC, SHARD_VERSION = 20240520, 1
SPLITS = [(4, 2, 1), (4, 1, 2), (2, 2, 2)]  # (B, A, R) the test runs; each chunk is 8 sequences


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


def sentences(count, seed):
    """Text from a tiny grammar (subject-verb agreement, as the built-in corpus has)."""
    rng = random.Random(seed)
    nouns = ["cat", "dog", "bird", "frog", "king", "robot"]
    verbs = ["see", "help", "like", "find", "pull", "meet"]
    things = ["apple", "river", "house", "tree", "ball", "lamp"]
    out = []
    for _ in range(count):
        plural = rng.random() < 0.5
        noun = rng.choice(nouns) + ("s" if plural else "")
        verb = rng.choice(verbs) + ("" if plural else "s")
        out.append(f"the {noun} {verb} the {rng.choice(things)}. ")
    return "".join(out)


def make_shard(path, count, seed=20261125):
    text = sentences(count // 20 + 1, seed)[:count]
    ids = np.frombuffer(text.encode("ascii"), dtype=np.uint8).astype(np.int64) - 32
    assert ids.min() >= 0 and ids.max() < ref.V
    header = np.zeros(256, dtype="<i4")
    header[:3] = [SHARD_MAGIC, SHARD_VERSION, count]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(ids.astype("<u2").tobytes())


def read_tokens(path, count):
    raw = open(path, "rb").read()
    tokens = np.frombuffer(raw[1024:], dtype=np.uint16)[:count].astype(np.int64)
    if len(tokens) < count:
        sys.exit(f"{path}: {len(tokens)} tokens, {count} needed")
    if tokens.max() >= ref.V:
        sys.exit(f"{path}: token {tokens.max()} outside the model's vocabulary of {ref.V}")
    return torch.from_numpy(tokens)


def train_weights(params, inputs, targets, steps, seed=1):
    """Adam on random batches of 32 of the set's sequences: weights past initialisation, where the
    gradient is no longer dominated by learning the letter frequencies, so the noise scale is
    larger than a few tokens and its estimate precise enough to compare. Returns float32 values
    (what the model file holds), so the gradients below start from the trainers' exact numbers."""
    p = {n: t.clone().requires_grad_(True) for n, t in params.items()}
    opt = torch.optim.Adam(p.values(), lr=3e-3)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        rows = torch.randint(0, inputs.shape[0], (32,), generator=gen)
        opt.zero_grad()
        ref.forward(p, inputs[rows], targets[rows])[1].backward()
        opt.step()
    return {n: t.detach().to(torch.float32).to(torch.float64) for n, t in p.items()}


def write_model(path, params):
    header = np.zeros(256, dtype="<i4")
    header[:8] = [ref.MODEL_MAGIC, ref.MODEL_VERSION_FP32, ref.MAXT, ref.V, ref.L, ref.NH, ref.C, ref.VP]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for n in ref.NAMES:
            f.write(np.ascontiguousarray(params[n].numpy(), dtype="<f4").tobytes())


def sq(v):
    return float(v @ v)


def chunk_norms(flat, B, A, R):
    """Per chunk: (|G_small|², |G_big|²) as a run with this split logs them."""
    S, per_chunk = flat.shape[0], B * A * R
    rows = []
    for k in range(S // per_chunk):
        chunk = flat[k * per_chunk:(k + 1) * per_chunk]
        # micro-step 0 of replica r: sequences [r·B, (r+1)·B) of the chunk
        small = sum(sq(chunk[r * B:(r + 1) * B].mean(dim=0)) for r in range(R)) / R
        rows.append((small, sq(chunk.mean(dim=0))))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="test/golden/noise_model.bin", help="the fixed weights")
    ap.add_argument("--train-from", help="first write --model: this model trained --train-steps on the set")
    ap.add_argument("--train-steps", type=int, default=40)
    ap.add_argument("--shard", default="test/golden/noise_tokens.bin", help="llm.c token shard (ids below V)")
    ap.add_argument("--make-shard", action="store_true", help="write --shard first (see above)")
    ap.add_argument("--sequences", type=int, default=512, help="S, the fixed set's size")
    ap.add_argument("--seq-len", type=int, default=32, help="T (at most the model's maxT)")
    ap.add_argument("--out", default="test/golden/noise_tiny.txt")
    args = ap.parse_args()
    torch.set_num_threads(1)  # a fixed summation order: byte-identical output on one machine
    S, T = args.sequences, args.seq_len
    if args.make_shard:
        make_shard(args.shard, S * T + 1)

    stream = read_tokens(args.shard, S * T + 1)
    inputs, targets = stream[:-1].reshape(S, T), stream[1:].reshape(S, T)
    if args.train_from:
        write_model(args.model, train_weights(read_model(args.train_from), inputs, targets, args.train_steps))
    params = read_model(args.model)

    def sequence_loss(p, x, y):  # one sequence's mean loss over its T positions
        return ref.forward(p, x.unsqueeze(0), y.unsqueeze(0))[1]

    per_sequence = torch.func.vmap(torch.func.grad(sequence_loss), in_dims=(None, 0, 0))(params, inputs, targets)
    flat = torch.cat([per_sequence[n].reshape(S, -1) for n in ref.NAMES], dim=1)  # (S, P) float64
    G = flat.mean(dim=0)
    G2 = sq(G)
    trace = float(((flat - G) ** 2).sum(dim=1).mean())
    values = {
        "sequences": S, "seq_len": T,
        "G2": G2, "trace_per_sequence": trace,
        "noise_scale_sequences": trace / G2, "noise_scale_tokens": trace / G2 * T,
        # what the trainers' estimator aims at over this finite set (see above)
        "G2_finite": G2 - trace / (S - 1), "trace_finite": trace * S / (S - 1),
        "noise_scale_tokens_finite": trace * S / (S - 1) / (G2 - trace / (S - 1)) * T,
    }
    with open(args.out, "w") as f:
        for k, v in values.items():
            f.write(f"{k} {v!r}\n")
        for B, A, R in SPLITS:
            f.write(f"split {B} {A} {R}\n")
            for k, (small, big) in enumerate(chunk_norms(flat, B, A, R)):
                f.write(f"chunk {k} {small!r} {big!r}\n")
    for k, v in values.items():
        print(f"{k:28s} {v}")
    print(f"wrote {args.out}: the values above and the per-chunk norms of splits {SPLITS}")


if __name__ == "__main__":
    main()
