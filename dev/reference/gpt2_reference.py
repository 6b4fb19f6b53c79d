#!/usr/bin/env python3
"""Float64 PyTorch reference for the GPT-2 trainer: writes the golden files the C++ tests read.

Outputs (in --out-dir, default test/golden):
  model_tiny.bin      a tiny GPT-2 in llm.c's float32 model format (the initial parameters)
  reference_tiny.bin  one batch, the logits, loss and gradients at those parameters, and the
                      losses and parameters of 10 AdamW steps on that batch

Every number is computed in float64 from the float32 parameters in model_tiny.bin, so the
reference's own rounding error (~1e-16) is far below the float32 trainer's (~1e-7) and any
mismatch the tests report is the trainer's. The model, the loss and the optimizer are written
out by hand (no nn.Module, no torch.optim, no fused attention) so every formula is visible here.
The only PyTorch machinery used is autograd for the backward pass, which is deterministic on CPU.

Run from the repository root:  python3 dev/reference/gpt2_reference.py --out-dir test/golden
See dev/reference/README.md for the file formats.
"""
import argparse
import math
import os

import numpy as np
import torch

# ---- configuration (the C++ tests read all of it from the file headers) ----
L, NH, C, MAXT, V, VP = 2, 4, 64, 64, 91, 128
B, T = 4, 32
NSTEPS = 10
LR, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP = 1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0
SEED = 1337

MODEL_MAGIC, MODEL_VERSION_FP32 = 20240326, 3
GOLDEN_MAGIC, GOLDEN_VERSION = 20261123, 1
LN_EPS = 1e-5


def param_shapes(L, C, maxT, Vp):
    """The 16 tensors in llm.c's file order, each stacked over layers, weights in (out, in) layout."""
    return [
        ("wte", (Vp, C)), ("wpe", (maxT, C)),
        ("ln1w", (L, C)), ("ln1b", (L, C)),
        ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)),
        ("attprojw", (L, C, C)), ("attprojb", (L, C)),
        ("ln2w", (L, C)), ("ln2b", (L, C)),
        ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)),
        ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)),
        ("lnfw", (C,)), ("lnfb", (C,)),
    ]


SHAPES = param_shapes(L, C, MAXT, VP)
NAMES = [n for n, _ in SHAPES]
# Decoupled weight decay for matrices and embeddings only; biases and LayerNorm keep wd = 0.
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


def init_params(gen):
    """Random float32 parameters. Biases and LayerNorm parameters are deliberately far from
    the usual 0 / 1 so that a trainer that ignores or mishandles them fails the comparison."""
    def normal(shape, std, mean=0.0):
        return mean + std * torch.randn(shape, dtype=torch.float64, generator=gen)

    resid_std = 0.02 / math.sqrt(2 * L)  # residual projections: GPT-2's scaled init
    p = {}
    for name, shape in SHAPES:
        if name in ("attprojw", "fcprojw"):
            p[name] = normal(shape, resid_std)
        elif name in ("ln1w", "ln2w", "lnfw"):
            p[name] = normal(shape, 0.1, mean=1.0)
        else:  # other weights, embeddings, biases and LayerNorm biases
            p[name] = normal(shape, 0.02)
    p["wte"][V:] = 0.0  # padded vocabulary rows are never used; keep them 0
    # Round once to float32: these exact values go into the model file, and the float64
    # computation below starts from them, so both sides start from identical numbers.
    return {n: t.to(torch.float32) for n, t in p.items()}


def layernorm(x, w, b):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased variance, as in GPT-2
    return (x - mean) / torch.sqrt(var + LN_EPS) * w + b


def linear(x, w, b):
    return x @ w.t() + b  # w stored (out, in)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def attention(qkv):
    """Causal multi-head self-attention on the fused (B, T, 3C) projection: q, k, v in that
    order along the last axis, head h taking columns [h*hs, (h+1)*hs) of each part."""
    Bn, Tn, _ = qkv.shape
    hs = C // NH
    q, k, v = qkv.split(C, dim=-1)
    q, k, v = (t.reshape(Bn, Tn, NH, hs).transpose(1, 2) for t in (q, k, v))  # (B, NH, T, hs)
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
    future = torch.triu(torch.ones(Tn, Tn, dtype=torch.bool), diagonal=1)
    att = att.masked_fill(future, float("-inf")).softmax(dim=-1)
    return (att @ v).transpose(1, 2).reshape(Bn, Tn, C)


def forward(p, inputs, targets):
    """Returns logits (B, T, Vp) and the mean cross-entropy loss over the B*T positions."""
    Tn = inputs.shape[1]
    x = p["wte"][inputs] + p["wpe"][:Tn]
    for l in range(L):
        h = layernorm(x, p["ln1w"][l], p["ln1b"][l])
        x = x + linear(attention(linear(h, p["qkvw"][l], p["qkvb"][l])), p["attprojw"][l], p["attprojb"][l])
        h = layernorm(x, p["ln2w"][l], p["ln2b"][l])
        x = x + linear(gelu_tanh(linear(h, p["fcw"][l], p["fcb"][l])), p["fcprojw"][l], p["fcprojb"][l])
    x = layernorm(x, p["lnfw"], p["lnfb"])
    logits = x @ p["wte"].t()  # tied head, all Vp columns
    # Only the V real columns enter the softmax; the padded ones get no probability and
    # hence no gradient (which is why wte's padded rows have exactly zero gradient).
    logp = logits[..., :V].log_softmax(dim=-1)
    loss = -logp.gather(-1, targets.unsqueeze(-1)).mean()
    return logits, loss


def loss_and_grads(p, inputs, targets):
    for t in p.values():
        t.grad = None
    logits, loss = forward(p, inputs, targets)
    loss.backward()
    return logits.detach(), loss.item(), {n: p[n].grad.detach().clone() for n in NAMES}


def adamw_run(p, inputs, targets, hp, nsteps):
    """nsteps AdamW steps on one batch, float64. Returns the loss before each update."""
    lr, b1, b2, eps, wd, clip = hp
    m = {n: torch.zeros_like(p[n]) for n in NAMES}
    v = {n: torch.zeros_like(p[n]) for n in NAMES}
    losses, norms = [], []
    for t in range(1, nsteps + 1):
        _, loss, g = loss_and_grads(p, inputs, targets)
        losses.append(loss)
        # clip by the global L2 norm of all gradients together
        norm = math.sqrt(sum(float((g[n] ** 2).sum()) for n in NAMES))
        norms.append(norm)
        if norm > 0:
            scale = min(1.0, clip / (norm + 1e-6))
            g = {n: g[n] * scale for n in NAMES}
        with torch.no_grad():
            for n in NAMES:
                m[n].mul_(b1).add_((1 - b1) * g[n])
                v[n].mul_(b2).add_((1 - b2) * g[n] ** 2)
                mhat = m[n] / (1 - b1 ** t)
                vhat = v[n] / (1 - b2 ** t)
                wd_n = wd if n in DECAYED else 0.0
                p[n].sub_(lr * (mhat / (vhat.sqrt() + eps) + wd_n * p[n]))
    return losses, norms


def f32(t):
    return np.ascontiguousarray(t.detach().numpy(), dtype="<f4").tobytes()


def i32(values):
    return np.ascontiguousarray(values, dtype="<i4").tobytes()


def header(values):
    h = np.zeros(256, dtype="<i4")
    h[: len(values)] = values
    return h.tobytes()


def write(path, blocks):
    with open(path, "wb") as f:
        for b in blocks:
            f.write(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default="test/golden", help="where to write the two files (default test/golden)")
    args = ap.parse_args()

    torch.set_num_threads(1)  # one thread: reductions always summed in the same order
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)

    params32 = init_params(gen)
    # One stream of B*T+1 tokens, split the way the trainer's data loader splits it:
    # row b is stream[b*T : b*T+T], its targets the same window shifted by one token.
    stream = torch.randint(0, V, (B * T + 1,), generator=gen, dtype=torch.int64)
    inputs, targets = stream[:-1].reshape(B, T), stream[1:].reshape(B, T)

    # The hyperparameters are stored as float32; use exactly the stored values.
    hp = tuple(float(x) for x in np.array([LR, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP], dtype=np.float32))

    p = {n: params32[n].to(torch.float64).requires_grad_(True) for n in NAMES}
    logits, loss, grads = loss_and_grads(p, inputs, targets)
    grad_norm = math.sqrt(sum(float((grads[n] ** 2).sum()) for n in NAMES))
    losses, norms = adamw_run(p, inputs, targets, hp, NSTEPS)
    assert losses[0] == loss

    os.makedirs(args.out_dir, exist_ok=True)
    model_path = os.path.join(args.out_dir, "model_tiny.bin")
    golden_path = os.path.join(args.out_dir, "reference_tiny.bin")
    write(model_path, [header([MODEL_MAGIC, MODEL_VERSION_FP32, MAXT, V, L, NH, C, VP])]
          + [f32(params32[n]) for n in NAMES])
    write(golden_path,
          [header([GOLDEN_MAGIC, GOLDEN_VERSION, B, T, MAXT, V, L, NH, C, VP, NSTEPS]),
           np.array(list(hp) + [0.0, 0.0], dtype="<f4").tobytes(),
           i32(inputs.numpy()), i32(targets.numpy()),
           f32(logits[..., :V]),
           np.array([loss], dtype="<f4").tobytes()]
          + [f32(grads[n]) for n in NAMES]
          + [np.array(losses, dtype="<f4").tobytes()]
          + [f32(p[n]) for n in NAMES])

    nparams = sum(t.numel() for t in params32.values())
    print(f"model: L={L} NH={NH} C={C} maxT={MAXT} V={V} Vp={VP}, {nparams} parameters; batch B={B} T={T}")
    print(f"loss at init {loss:.6f} (ln V = {math.log(V):.6f}), gradient norm {grad_norm:.6f}")
    print(f"losses of {NSTEPS} AdamW steps: " + " ".join(f"{x:.6f}" for x in losses))
    print("gradient norms before clipping: " + " ".join(f"{x:.4f}" for x in norms))
    print(f"wrote {model_path} ({os.path.getsize(model_path)} bytes), "
          f"{golden_path} ({os.path.getsize(golden_path)} bytes)")


if __name__ == "__main__":
    main()
