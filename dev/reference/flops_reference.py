#!/usr/bin/env python3
"""PyTorch's count of the FLOPs in one training step (forward and backward) of the reference
GPT-2, for several shapes: writes the golden file host/cost.h's formulas are tested against.

The model is gpt2_reference.py's forward, unchanged (written out by hand, so no fused kernel
hides a product from the counter), run for each shape under torch's FlopCounterMode, which
counts 2 FLOPs per multiply-add in every matrix product it sees, forward and backward. The
count is of what runs, independent of the formulas in host/cost.h: a missed weight, a wrong
factor for the backward or a wrong attention term shows up as a mismatch.

Run from the repository root:  python3 dev/reference/flops_reference.py > test/golden/flops.txt
Output: one line per shape, "L NH C T V Vp B flops", after comment lines starting with '#'.
"""
import torch
from torch.utils.flop_counter import FlopCounterMode

import gpt2_reference as ref

# (L, NH, C, T, V, Vp, B): the tiny reference model, odd and unpadded vocabularies, a long
# sequence, and GPT-2 124M's shape itself (at B=1: the count scales with B exactly).
SHAPES = [
    (2, 4, 64, 32, 91, 128, 4),
    (1, 1, 8, 1, 5, 5, 1),
    (3, 2, 16, 7, 50, 64, 3),
    (2, 4, 32, 256, 300, 320, 2),
    (12, 12, 768, 64, 50257, 50304, 1),
]


def step_flops(L, NH, C, T, V, Vp, B):
    # gpt2_reference.py reads the shape from its module constants; set them for this shape.
    ref.L, ref.NH, ref.C, ref.MAXT, ref.V, ref.VP = L, NH, C, T, V, Vp
    gen = torch.Generator().manual_seed(0)
    # Float32 is enough here: only the shapes of the products matter to the count.
    p = {n: (0.02 * torch.randn(shape, generator=gen)).requires_grad_(True) for n, shape in ref.param_shapes(L, C, T, Vp)}
    tokens = torch.randint(0, V, (B, T + 1), generator=gen)
    with FlopCounterMode(display=False) as counter:
        _, loss = ref.forward(p, tokens[:, :-1], tokens[:, 1:])
        loss.backward()
    return counter.get_total_flops()


def main():
    torch.set_num_threads(1)
    print("# FLOPs of one training step (forward + backward) as counted by PyTorch's FlopCounterMode")
    print(f"# torch {torch.__version__}; written by dev/reference/flops_reference.py")
    print("# L NH C T V Vp B flops")
    for shape in SHAPES:
        print(*shape, step_flops(*shape))


if __name__ == "__main__":
    main()
