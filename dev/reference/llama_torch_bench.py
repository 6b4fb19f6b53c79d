#!/usr/bin/env python3
"""Times a plain PyTorch Llama-3 training step on the CPU, for comparison with ./train --model llama3.

The model has ./train's Llama shape and work per step (docs/llama.md): a token embedding, L
blocks of (RMSNorm, grouped-query causal self-attention with RoPE on q and k, RMSNorm, SwiGLU
MLP) with residuals, a final RMSNorm, an untied output head over the padded vocabulary Vp,
cross-entropy over the first V logits, the gradient clipped to norm 1, and an AdamW update with
weight decay on the matrices and embeddings (not on the RMSNorm weights). No biases.

  --impl hand (the default): written by hand, what a PyTorch user would write, after Meta's
      reference model.py: RMSNorm as x·rsqrt(mean(x²) + eps)·w; RoPE on interleaved channel
      pairs (2i, 2i+1) as a complex product (torch.view_as_complex, Meta's apply_rotary_emb);
      q, k, v from one nn.Linear and SwiGLU's W1 and W3 from one, as ./train stores them;
      attention by F.scaled_dot_product_attention(..., is_causal=True, enable_gqa=True): query
      head h reads K/V head h // (NH/KVH), what repeat_interleave gives, with no copy of K/V
      (--gqa repeat expands K and V with repeat_interleave first, as Meta's repeat_kv does).
  --impl hf: Hugging Face's transformers.LlamaForCausalLM of the same shape, built from a
      LlamaConfig (nothing is downloaded), attn_implementation="eager" (its own matmul-softmax
      attention with repeat_kv); its RoPE is rotate_half's layout, the same work.

float32, eager, no torch.compile, on the thread count given (./train uses every core, so the
default is nproc). It accepts ./train's options for the shape (and --model llama3), so
scripts/bench_cpu.sh passes both the same arguments.

Prints two lines, which scripts/bench_cpu.sh reads:
  parameters: N
  average: X ms/step (steps 2..N, ...)
the mean over the steps after the first, which warms caches and allocates the optimizer's state.

  python3 dev/reference/llama_torch_bench.py --layers 4 --heads 8 --kv-heads 2 --channels 256 \
      --max-seq-len 256 --vocab 256 -b 4 -t 256 -n 6

--check runs no timing: at a tiny shape in float64 it gives the hand-written model Hugging Face's
weights (q and k rows permuted back to interleaved pairs) and compares logits, loss and every
gradient with LlamaForCausalLM's, with both --gqa modes; prints "N passed, M failed"
(test/tools/bench_cpu.sh runs it).
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def meta_ffn_hidden(C, multiplier, multiple_of):
    """Meta's rule (host/model.h's meta_ffn_hidden): 2·4C/3, times the multiplier, rounded up."""
    h = 2 * (4 * C) // 3
    if multiplier > 0:
        h = int(multiplier * h)
    return (h + multiple_of - 1) // multiple_of * multiple_of


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_table(hs, maxT, theta, dtype):
    """cos + i·sin of t·theta^(-2i/hs), (maxT, hs/2), computed in float64 like ./train's table."""
    freqs = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
    angles = torch.outer(torch.arange(maxT, dtype=torch.float64), freqs)
    cis = torch.polar(torch.ones_like(angles), angles)
    return cis.to(torch.complex64 if dtype == torch.float32 else torch.complex128)


def apply_rope(x, cis):
    """x (B, T, H, hs): each channel pair (2i, 2i+1) rotated by position t's angle i."""
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * cis[None, :, None, :]).flatten(3)


class Block(nn.Module):
    def __init__(self, C, NH, KVH, F_, eps, gqa):
        super().__init__()
        self.NH, self.KVH, self.hs, self.gqa = NH, KVH, C // NH, gqa
        self.ln1 = RMSNorm(C, eps)
        self.qkv = nn.Linear(C, C + 2 * KVH * self.hs, bias=False)  # [q: NH·hs | k: KVH·hs | v: KVH·hs]
        self.attproj = nn.Linear(C, C, bias=False)
        self.ln2 = RMSNorm(C, eps)
        self.fc = nn.Linear(C, 2 * F_, bias=False)  # [W1 (gate); W3 (up)]
        self.fcproj = nn.Linear(F_, C, bias=False)  # W2

    def forward(self, x, cis):
        B, T, C = x.shape
        hs = self.hs
        q, k, v = self.qkv(self.ln1(x)).split([self.NH * hs, self.KVH * hs, self.KVH * hs], dim=2)
        q = apply_rope(q.view(B, T, self.NH, hs), cis).transpose(1, 2)  # (B, NH, T, hs)
        k = apply_rope(k.view(B, T, self.KVH, hs), cis).transpose(1, 2)  # (B, KVH, T, hs)
        v = v.view(B, T, self.KVH, hs).transpose(1, 2)
        if self.gqa == "repeat":
            g = self.NH // self.KVH
            k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.attproj(y.transpose(1, 2).reshape(B, T, C))
        gate, up = self.fc(self.ln2(x)).chunk(2, dim=-1)
        return x + self.fcproj(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, L, NH, KVH, C, F_, maxT, Vp, eps, theta, gqa, dtype=torch.float32):
        super().__init__()
        self.wte = nn.Embedding(Vp, C)
        self.blocks = nn.ModuleList(Block(C, NH, KVH, F_, eps, gqa) for _ in range(L))
        self.lnf = RMSNorm(C, eps)
        self.wout = nn.Linear(C, Vp, bias=False)
        for name, p in self.named_parameters():  # ./train's initialisation (host/model.h)
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, std=std)
        self.to(dtype)  # (before the complex table: .to() would make it real)
        self.register_buffer("cis", rope_table(C // NH, maxT, theta, dtype), persistent=False)

    def logits(self, idx):
        cis = self.cis[: idx.shape[1]]
        x = self.wte(idx)
        for block in self.blocks:
            x = block(x, cis)
        return self.wout(self.lnf(x))  # (B, T, Vp)

    def forward(self, idx, targets, V):
        logits = self.logits(idx)
        return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))


def hf_llama(L, NH, KVH, C, F_, maxT, Vp, eps, theta, dtype=torch.float32):
    """transformers.LlamaForCausalLM of this shape (random weights, no download), eager attention."""
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
    kw = dict(vocab_size=Vp, hidden_size=C, intermediate_size=F_, num_hidden_layers=L, num_attention_heads=NH,
              num_key_value_heads=KVH, max_position_embeddings=maxT, rms_norm_eps=eps, hidden_act="silu",
              tie_word_embeddings=False, attention_bias=False, mlp_bias=False, attention_dropout=0.0,
              pad_token_id=None, attn_implementation="eager")
    if int(transformers.__version__.split(".")[0]) >= 5:  # rope_theta moved into rope_parameters
        config = LlamaConfig(rope_parameters={"rope_type": "default", "rope_theta": theta}, **kw)
    else:
        config = LlamaConfig(rope_theta=theta, **kw)
    model = LlamaForCausalLM(config).to(dtype)
    assert model.config._attn_implementation == "eager", model.config._attn_implementation
    return model


class HFLoss(nn.Module):
    """The same loss as Llama.forward, on Hugging Face's logits."""
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, idx, targets, V):
        logits = self.model(input_ids=idx).logits
        return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))


def hf_to_meta(w, n_heads):
    """Per head, HF's rows i and i + hs/2 (rotate_half's halves) become the pair (2i, 2i+1)."""
    rows, cols = w.shape
    return w.reshape(n_heads, 2, rows // n_heads // 2, cols).transpose(1, 2).reshape(rows, cols)


def load_from_hf(model, hf, NH, KVH):
    """Copies HF's weights into the hand-written model; returns {hand name: HF tensor whose
    gradient, mapped the same way, must equal the hand-written one's}."""
    sd = {"wte.weight": hf.model.embed_tokens.weight, "lnf.weight": hf.model.norm.weight, "wout.weight": hf.lm_head.weight}
    for l, layer in enumerate(hf.model.layers):
        a, m = layer.self_attn, layer.mlp
        sd[f"blocks.{l}.ln1.weight"] = layer.input_layernorm.weight
        sd[f"blocks.{l}.ln2.weight"] = layer.post_attention_layernorm.weight
        sd[f"blocks.{l}.qkv.weight"] = (a.q_proj.weight, a.k_proj.weight, a.v_proj.weight)
        sd[f"blocks.{l}.attproj.weight"] = a.o_proj.weight
        sd[f"blocks.{l}.fc.weight"] = (m.gate_proj.weight, m.up_proj.weight)
        sd[f"blocks.{l}.fcproj.weight"] = m.down_proj.weight

    def mapped(name, get):
        t = sd[name]
        if name.endswith("qkv.weight"):
            q, k, v = (get(x) for x in t)
            return torch.cat([hf_to_meta(q, NH), hf_to_meta(k, KVH), v])
        if name.endswith("fc.weight"):
            return torch.cat([get(x) for x in t])
        return get(t)

    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(mapped(name, lambda t: t.detach()))
    return lambda name: mapped(name, lambda t: t.grad)


def check():
    """The hand-written model against Hugging Face's, float64, at a tiny shape (no timing)."""
    torch.manual_seed(1234)
    L, NH, KVH, C, maxT, V, Vp, B, T = 2, 4, 2, 64, 32, 100, 128, 3, 16
    F_ = meta_ffn_hidden(C, 0, 32)
    eps, theta = 1e-5, 10000.0
    hf = hf_llama(L, NH, KVH, C, F_, maxT, Vp, eps, theta, torch.float64)
    tokens = torch.randint(0, V, (B, T + 1))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    hf_loss = HFLoss(hf)(inputs, targets, V)
    hf_loss.backward()
    hf_logits = hf(input_ids=inputs).logits.detach()
    passed = failed = 0

    def report(ok, what):
        nonlocal passed, failed
        print(("PASS " if ok else "FAIL ") + what)
        passed, failed = passed + ok, failed + (not ok)

    def rel(a, b):
        return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()

    # HF's float64 model computes its RoPE angles and RMSNorm in float32 (llama_reference.py):
    # a few 1e-7 apart from a pure float64 one, far below this tolerance
    tol = 1e-5
    for gqa in ("sdpa", "repeat"):
        model = Llama(L, NH, KVH, C, F_, maxT, Vp, eps, theta, gqa, torch.float64)
        grad_of = load_from_hf(model, hf, NH, KVH)
        loss = model(inputs, targets, V)
        loss.backward()
        e = rel(model.logits(inputs).detach(), hf_logits)
        report(e < tol, f"--gqa {gqa}: logits as LlamaForCausalLM's (normalised difference {e:.1e})")
        e = abs(loss.item() - hf_loss.item()) / hf_loss.item()
        report(e < tol, f"--gqa {gqa}: loss {loss.item():.6f} as LlamaForCausalLM's {hf_loss.item():.6f}")
        worst = max((rel(p.grad, grad_of(n)), n) for n, p in model.named_parameters())
        report(worst[0] < tol, f"--gqa {gqa}: every gradient as LlamaForCausalLM's (worst {worst[1]}, {worst[0]:.1e})")
    n_hand = sum(p.numel() for p in model.parameters())
    n_hf = sum(p.numel() for p in hf.parameters())
    report(n_hand == n_hf, f"as many parameters as LlamaForCausalLM ({n_hand:,} and {n_hf:,})")
    # a planted mistake the comparison must see: RoPE on halves (HF's layout) with Meta's rows
    model = Llama(L, NH, KVH, C, F_, maxT, Vp, eps, theta, "sdpa", torch.float64)
    load_from_hf(model, hf, NH, KVH)
    with torch.no_grad():
        for b, layer in zip(model.blocks, hf.model.layers):  # HF's q and k rows, not permuted back
            b.qkv.weight[: C + KVH * (C // NH)] = torch.cat([layer.self_attn.q_proj.weight, layer.self_attn.k_proj.weight])
    e = rel(model.logits(inputs).detach(), hf_logits)
    report(e > 100 * tol, f"q and k rows left in HF's layout are seen (normalised difference {e:.1e})")
    print(f"{passed} passed, {failed} failed")
    return failed == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="llama3", choices=["llama3"], help="accepted for ./train's arguments")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=0, help="0 = NH/2 when NH is even, else NH (./train's default)")
    ap.add_argument("--channels", type=int, default=256)
    ap.add_argument("--ffn-hidden", type=int, default=0, help="0 = Meta's rule")
    ap.add_argument("--ffn-multiple-of", type=int, default=256)
    ap.add_argument("--ffn-multiplier", type=float, default=0)
    ap.add_argument("--norm-eps", type=float, default=1e-5)
    ap.add_argument("--rope-theta", type=float, default=500000.0)
    ap.add_argument("--max-seq-len", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--padded-vocab", type=int, default=0, help="0 = vocab rounded up to 128")
    ap.add_argument("-b", "--batch-size", type=int, default=4)
    ap.add_argument("-t", "--seq-len", type=int, default=256)
    ap.add_argument("-n", "--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--impl", default="hand", choices=["hand", "hf"])
    ap.add_argument("--gqa", default="sdpa", choices=["sdpa", "repeat"],
                    help="hand: scaled_dot_product_attention's enable_gqa, or K/V expanded by repeat_interleave")
    ap.add_argument("--check", action="store_true", help="compare with LlamaForCausalLM at a tiny shape; no timing")
    a = ap.parse_args()
    if a.check:
        sys.exit(0 if check() else 1)
    if a.steps < 2:
        ap.error("--steps must be at least 2: the first step is not timed")
    NH, C = a.heads, a.channels
    KVH = a.kv_heads or (NH // 2 if NH % 2 == 0 else NH)
    F_ = a.ffn_hidden or meta_ffn_hidden(C, a.ffn_multiplier, a.ffn_multiple_of)
    V = a.vocab
    Vp = a.padded_vocab or (V + 127) // 128 * 128
    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)

    if a.impl == "hf":
        model = HFLoss(hf_llama(a.layers, NH, KVH, C, F_, a.max_seq_len, Vp, a.norm_eps, a.rope_theta))
        what = "transformers LlamaForCausalLM, eager attention"
    else:
        model = Llama(a.layers, NH, KVH, C, F_, a.max_seq_len, Vp, a.norm_eps, a.rope_theta, a.gqa)
        what = "hand-written, GQA by " + ("sdpa enable_gqa" if a.gqa == "sdpa" else "repeat_interleave")
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    tokens = torch.randint(0, V, (a.batch_size, a.seq_len + 1))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    print(f"parameters: {sum(p.numel() for p in model.parameters())}")

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
    print(f"average: {ms:.1f} ms/step (steps 2..{a.steps}, torch {torch.__version__}, {a.threads} threads, {what})")


if __name__ == "__main__":
    main()
