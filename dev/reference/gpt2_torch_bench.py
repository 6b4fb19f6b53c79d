#!/usr/bin/env python3
"""Times a plain PyTorch GPT-2 training step on the CPU, for comparison with ./train.

The model has ./train's shape and work per step: token and position embeddings, L blocks of
(LayerNorm, causal self-attention, LayerNorm, tanh-GELU MLP) with residuals, a final LayerNorm,
the classifier tied to the token embedding over the padded vocabulary Vp, cross-entropy over
the first V logits, the gradient clipped to norm 1, and an AdamW update with weight decay on the
matrices and embeddings. It is what a PyTorch user would write (nn.Linear, nn.LayerNorm,
F.scaled_dot_product_attention, torch.optim.AdamW with its defaults): float32, eager, no
torch.compile, on the thread count given (./train uses every core, so the default is nproc).

Prints one line, which scripts/bench_cpu.sh reads:
  average: X ms/step (steps 2..N)
the mean over the steps after the first, which warms caches and allocates the optimizer's state.

  python3 dev/reference/gpt2_torch_bench.py --layers 12 --heads 12 --channels 768 \
      --vocab 50257 --padded-vocab 50304 -b 4 -t 64 -n 6
"""
import argparse
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.attproj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        # (B, T, C) -> (B, NH, T, hs)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attproj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, L, NH, C, maxT, Vp):
        super().__init__()
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        for name, p in self.named_parameters():  # GPT-2's initialisation
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets, V):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.blocks:
            x = block(x)
        logits = self.lnf(x) @ self.wte.weight.t()  # (B, T, Vp): the classifier is wte, tied
        return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--channels", type=int, default=128)
    ap.add_argument("--max-seq-len", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--padded-vocab", type=int, default=0, help="0 = vocab rounded up to 128")
    ap.add_argument("-b", "--batch-size", type=int, default=4)
    ap.add_argument("-t", "--seq-len", type=int, default=64)
    ap.add_argument("-n", "--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    if a.steps < 2:
        ap.error("--steps must be at least 2: the first step is not timed")
    V = a.vocab
    Vp = a.padded_vocab or (V + 127) // 128 * 128
    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)

    model = GPT2(a.layers, a.heads, a.channels, a.max_seq_len, Vp)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    tokens = torch.randint(0, V, (a.batch_size, a.seq_len + 1))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    times = []
    for _ in range(a.steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(inputs, targets, V)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()
        times.append(time.perf_counter() - start)
    ms = 1000 * sum(times[1:]) / len(times[1:])
    print(f"average: {ms:.1f} ms/step (steps 2..{a.steps}, torch {torch.__version__}, {a.threads} threads)")


if __name__ == "__main__":
    main()
