#!/usr/bin/env python3
"""PyTorch's count of the FLOPs in one training step (forward and backward) of the reference
GPT-2, for several shapes: writes the golden file host/cost.h's formulas are tested against.

The model is gpt2_reference.py's forward, unchanged (written out by hand, so no fused kernel
hides a product from the counter), run for each shape under torch's FlopCounterMode, which
counts 2 FLOPs per multiply-add in every matrix product it sees, forward and backward. The
count is of what runs, independent of the formulas in host/cost.h: a missed weight, a wrong
factor for the backward or a wrong attention term shows up as a mismatch.

The Llama-3 shapes run a Llama forward written out here (docs/llama.md's layout, the spec the
trainer follows): RMSNorm, one qkv product of C + 2*KVH*hs columns, RoPE on q and k, grouped-query
attention (each K/V head repeated for its NH/KVH query heads, so the counter sees NH heads'
products), SwiGLU (one fc product of 2F columns, gate and up; fcproj from F), and the head, wte
when tied, its own wout otherwise. It shares no code with host/cost.h either; only the shapes of
the products matter to the count, so the two large Llama shapes run on the meta device (no
memory, no arithmetic: PyTorch still dispatches, and counts, every product).

Run from the repository root:  python3 dev/reference/flops_reference.py > test/golden/flops.txt
Output: one line per shape, "L NH C T V Vp B flops" (GPT-2), then "llama3 L NH KVH C F T V Vp tied B
flops" (Llama-3), after comment lines starting with '#'.
"""
import math

import torch
import torch.nn.functional as Fn
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


# (L, NH, KVH, C, F, T, V, Vp, tied, B): grouped (G = 2) with its own head; one K/V head for all
# (G = 4) and tied; no grouping (KVH = NH), an unpadded vocabulary; the shape the trainer's tests
# run (V = 300 >= 256: the built-in corpus serves); and Llama-3.2 1B's and Llama-3.1 8B's shapes
# themselves at T = 16, B = 1 (on the meta device).
LLAMA_SHAPES = [
    (2, 4, 2, 64, 160, 32, 91, 128, 0, 4),
    (1, 4, 1, 32, 96, 7, 50, 64, 1, 3),
    (3, 2, 2, 16, 40, 5, 50, 50, 0, 2),
    (2, 4, 1, 32, 80, 256, 300, 320, 0, 2),
    (16, 32, 8, 2048, 8192, 16, 128256, 128256, 1, 1),
    (32, 32, 8, 4096, 14336, 16, 128256, 128256, 0, 1),
]


def rmsnorm(x, w, eps=1e-5):
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w


def rope(x, T, hs, theta=500000.0):
    """Meta's interleaved rotation of each head's channel pairs (2i, 2i+1) by t * theta^(-2i/hs);
    x is (B, heads, T, hs). Elementwise: no product for the counter, but it runs as the trainer's."""
    freq = theta ** (-torch.arange(0, hs, 2, dtype=x.dtype, device=x.device) / hs)
    angle = torch.arange(T, dtype=x.dtype, device=x.device)[:, None] * freq[None, :]  # (T, hs/2)
    cos, sin = torch.cos(angle), torch.sin(angle)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


def llama_forward(p, idx, targets, L, NH, KVH, C, F, V, tied):
    B, T = idx.shape
    hs = C // NH
    x = p["wte"][idx]  # (B, T, C): the token embedding alone, no positions table
    mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    for l in range(L):
        qkv = rmsnorm(x, p["ln1w"][l]) @ p["qkvw"][l].T  # (B, T, C + 2*KVH*hs)
        q, k, v = qkv.split([C, KVH * hs, KVH * hs], dim=-1)
        q = rope(q.view(B, T, NH, hs).transpose(1, 2), T, hs)
        k = rope(k.view(B, T, KVH, hs).transpose(1, 2), T, hs)
        v = v.view(B, T, KVH, hs).transpose(1, 2)
        k = k.repeat_interleave(NH // KVH, dim=1)  # query head h reads K/V head h / G
        v = v.repeat_interleave(NH // KVH, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p["attprojw"][l].T
        fc = rmsnorm(x, p["ln2w"][l]) @ p["fcw"][l].T  # (B, T, 2F): [gate | up]
        gate, up = fc[..., :F], fc[..., F:]
        x = x + (Fn.silu(gate) * up) @ p["fcprojw"][l].T
    logits = rmsnorm(x, p["lnfw"]) @ (p["wte"] if tied else p["wout"]).T  # (B, T, Vp)
    return Fn.cross_entropy(logits[..., :V].reshape(B * T, V), targets.reshape(B * T))


def llama_step_flops(L, NH, KVH, C, F, T, V, Vp, tied, B):
    QKV = C + 2 * KVH * (C // NH)
    shapes = {"wte": (Vp, C), "ln1w": (L, C), "qkvw": (L, QKV, C), "attprojw": (L, C, C), "ln2w": (L, C),
              "fcw": (L, 2 * F, C), "fcprojw": (L, C, F), "lnfw": (C,)}
    if not tied:
        shapes["wout"] = (Vp, C)
    device = "meta" if C >= 1024 else "cpu"  # the published shapes: their shapes only
    gen = torch.Generator().manual_seed(0)
    p = {n: (0.02 * torch.randn(s, generator=gen) if device == "cpu" else torch.empty(s, device=device)).requires_grad_(True)
         for n, s in shapes.items()}
    tokens = torch.randint(0, V, (B, T + 1), generator=gen).to(device)
    with FlopCounterMode(display=False) as counter:
        loss = llama_forward(p, tokens[:, :-1], tokens[:, 1:], L, NH, KVH, C, F, V, tied)
        loss.backward()
    return counter.get_total_flops()


def main():
    torch.set_num_threads(1)
    print("# FLOPs of one training step (forward + backward) as counted by PyTorch's FlopCounterMode")
    print(f"# torch {torch.__version__}; written by dev/reference/flops_reference.py")
    print("# L NH C T V Vp B flops")
    for shape in SHAPES:
        print(*shape, step_flops(*shape))
    print("# llama3 L NH KVH C F T V Vp tied B flops")
    for shape in LLAMA_SHAPES:
        print("llama3", *shape, llama_step_flops(*shape))


if __name__ == "__main__":
    main()
