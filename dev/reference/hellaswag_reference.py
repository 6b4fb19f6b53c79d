#!/usr/bin/env python3
"""Float64 PyTorch reference for HellaSwag scoring: a small synthetic evaluation file and
the scores the trainers must compute for it, example by example.

Outputs (in --out-dir, default test/golden):
  hellaswag_tiny.bin            synthetic multiple-choice examples in llm.c's evaluation-file
                                format (written by data/shards.py), tokens below the V of
                                model_tiny.bin
  hellaswag_tiny_reference.txt  for each example: its label, the ending chosen by the lowest
                                summed loss (acc) and by the lowest mean loss (acc_norm), and
                                every ending's summed and mean loss

The model is test/golden/model_tiny.bin, run by gpt2_reference.py's float64 forward. The
scoring rule is written out again here, from the format's description (dev/reference/README.md),
not from the C++ code: an ending's row is the context followed by the ending; a row longer
than T + 1 tokens loses context tokens from the front; the losses scored are those of the
positions whose targets are the ending's tokens.

Examples whose two best endings score within MARGIN of each other (by sum or by mean) are not
written: float32 rounding (~1e-6 here) must not be able to flip a choice the tests compare.

Run from the repository root:  python3 dev/reference/hellaswag_reference.py --out-dir test/golden
"""
import argparse
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "data"))
import gpt2_reference as ref  # noqa: E402  (the model, its shapes and its forward)
from shards import write_eval_file  # noqa: E402

T = 32            # sequence length the scores are for (the golden batch's; maxT is 64)
CANDIDATES = 64   # examples drawn; the near-ties among them are dropped
ENDINGS = 4
MAX_CONTEXT, MAX_ENDING = 50, 16  # up to 66 tokens: many rows need their context cut to T + 1
MARGIN = 1e-4
SEED = 2024


def load_model(path):
    """The parameters of an llm.c model file, as float64 tensors."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        assert header[0] == ref.MODEL_MAGIC and tuple(header[2:8]) == (ref.MAXT, ref.V, ref.L, ref.NH, ref.C, ref.VP), \
            "%s is not gpt2_reference.py's tiny model" % path
        p = {}
        for name, shape in ref.SHAPES:
            n = int(np.prod(shape))
            p[name] = torch.from_numpy(np.frombuffer(f.read(4 * n), dtype="<f4").copy()).reshape(shape).double()
    return p


def score_ending(p, context, ending):
    """(summed, mean) loss of the ending's tokens after the context, float64."""
    tokens = list(context) + list(ending)
    drop = max(0, len(tokens) - 1 - T)  # positions beyond T: the context loses its first tokens
    tokens = torch.tensor(tokens[drop:], dtype=torch.int64)
    inputs, targets = tokens[:-1].unsqueeze(0), tokens[1:].unsqueeze(0)
    with torch.no_grad():
        logits, _ = ref.forward(p, inputs, targets)
        logp = logits[0, :, :ref.V].log_softmax(dim=-1)
        losses = -logp.gather(-1, targets[0].unsqueeze(-1)).squeeze(-1)
    total = float(losses[-len(ending):].sum())
    return total, total / len(ending)


def gap(scores):
    best = sorted(scores)
    return best[1] - best[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default="test/golden", help="where model_tiny.bin is and the outputs go")
    args = ap.parse_args()
    torch.set_num_threads(1)
    p = load_model(os.path.join(args.out_dir, "model_tiny.bin"))
    gen = torch.Generator().manual_seed(SEED)

    def randint(lo, hi):  # in [lo, hi]
        return int(torch.randint(lo, hi + 1, (1,), generator=gen))

    examples, lines, dropped = [], [], 0
    for _ in range(CANDIDATES):
        # a few one-token contexts, the rest of any length up to MAX_CONTEXT
        context = [randint(0, ref.V - 1) for _ in range(1 if randint(0, 7) == 0 else randint(1, MAX_CONTEXT))]
        endings = [[randint(0, ref.V - 1) for _ in range(randint(1, MAX_ENDING))] for _ in range(ENDINGS)]
        label = randint(0, ENDINGS - 1)
        sums, means = zip(*(score_ending(p, context, e) for e in endings))
        if gap(sums) < MARGIN or gap(means) < MARGIN:
            dropped += 1
            continue
        pred, pred_norm = int(np.argmin(sums)), int(np.argmin(means))
        examples.append((context, endings, label))
        lines.append(" ".join([str(label), str(pred), str(pred_norm)] + ["%.17g" % x for x in sums + means]))

    os.makedirs(args.out_dir, exist_ok=True)
    eval_path = os.path.join(args.out_dir, "hellaswag_tiny.bin")
    ref_path = os.path.join(args.out_dir, "hellaswag_tiny_reference.txt")
    write_eval_file(eval_path, examples, quiet=True)
    with open(ref_path, "w") as f:
        f.write("# hellaswag_reference.py: T=%d examples=%d; per example: label pred pred_norm, %d summed "
                "losses, %d mean losses\n" % (T, len(examples), ENDINGS, ENDINGS))
        f.write("\n".join(lines) + "\n")
    acc = sum(int(l.split()[1]) == int(l.split()[0]) for l in lines) / len(lines)
    acc_norm = sum(int(l.split()[2]) == int(l.split()[0]) for l in lines) / len(lines)
    print("%d examples (%d near-ties dropped), T=%d: acc %.4f, acc_norm %.4f" % (len(examples), dropped, T, acc, acc_norm))
    print("wrote %s and %s" % (eval_path, ref_path))


if __name__ == "__main__":
    main()
