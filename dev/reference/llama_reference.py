#!/usr/bin/env python3
"""Hugging Face reference for the Llama-3 trainers: writes the golden files the C++ tests read.

Outputs (in --out-dir, default test/golden):
  llama_tiny.bin            a tiny random Llama-3 in the project's Llama model format (the
                            initial parameters; layout in dev/reference/README.md)
  llama_reference_tiny.bin  golden file version 2: one batch, the logits, loss and gradients
                            at those parameters, the losses of 3 AdamW steps on that batch and
                            the parameters after them
  llama_reference_tiny.txt  its companion: the torch and transformers versions, every section's
                            element count, first and last value and sum (the C++ reader's
                            round-trip test compares them), and the differences measured below

Why Hugging Face. gpt2_reference.py writes the GPT-2 model out by hand; a hand-written Llama
would share any misreading of the architecture with trainers written from the same description.
Here the expected numbers come from `transformers.LlamaForCausalLM` itself, the implementation
Meta's Llama-3 checkpoints are converted to and most often run with, built from a LlamaConfig
made in this script (nothing is downloaded). Its tensors are mapped to the project's Llama
layout, 17 tensors in file order (dev/reference/README.md):
qkvw = [q_proj; k_proj; v_proj] per layer, fcw = [gate_proj; up_proj], fcprojw = down_proj,
wout = lm_head, with the q and k rows taken back from Hugging Face's rotate_half layout to
Meta's interleaved pairs (HF's converter permutes Meta's rows; hf_to_meta is its inverse).

A second, independent reference. `forward` below is a plain float64 Llama written from that
description on the file layout (RMSNorm, interleaved RoPE with Llama-3.1's frequency rule,
grouped-query attention, SwiGLU, untied head). It must give HF's logits and gradients: that
checks the un-permutation and the mapping. The script also shows that each of a few plausible
mistakes (HF's rows used as pairs, no frequency rule, K/V heads assigned h % KVH, the RMSNorm
weights ignored) moves the logits by far more than the tolerance: the files tell them apart.

Precision. The golden numbers are HF's model in float64 (model.double()), started from the
float32-rounded parameters written to llama_tiny.bin; HF's float32 model must agree within
1e-5 (normalised error). "float64" is not all float64, though. In the installed transformers
(models/llama/modeling_llama.py, modeling_rope_utils.py) the RoPE inverse frequencies are
computed in float32 (_compute_llama3_parameters: arange(...).to(torch.float)), and
LlamaRotaryEmbedding.forward forms the angles t·freq and their cos and sin in float32
(position_ids.float() * inv_freq.float()) before casting them to the model's dtype; so do
LlamaRMSNorm, which normalises in float32 (hidden_states.to(torch.float32)), and the eager
attention, which takes its softmax in float32 (softmax(..., dtype=torch.float32)). These are
upcasts for half-precision models and downcasts in a float64 one. What they cost is measured
here by running the pure-float64 hand-written model beside HF's: logits and gradients differ by
~2e-7 and ~4e-7 (normalised; printed, and recorded in the companion file as hand_vs_hf64_*).
Little of that is the angles: in this model their cos and sin are within ~3e-7 of exact ones
(pair 0's frequency is exactly 1, the others are small), and the hand-written model given HF's
float32 angles is as far from HF as with exact ones (hand_f32_angles_vs_hf64_logits); the rest
is the float32 RMSNorm and softmax. So the golden numbers are good to a few 1e-7, a thirtieth
of the trainers' float32 tolerance of 1e-5, not to gpt2_reference.py's ~1e-16: no test may ask
for agreement much below 1e-6.

Run from the repository root:  python3 dev/reference/llama_reference.py --out-dir test/golden
It needs torch, transformers and numpy (the CPU build of torch is enough). See
dev/reference/README.md for the file formats.
"""
import argparse
import math
import os

import numpy as np
import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

# ---- configuration (the C++ tests read all of it from the file headers) ----
L, NH, KVH, C, F, MAXT, V, VP = 2, 4, 2, 64, 160, 64, 500, 512
HS = C // NH                  # 16: eight RoPE pairs per head
G = NH // KVH                 # query heads per K/V head
QKV = C + 2 * KVH * HS        # rows of qkvw per layer: [q: NH·hs | k: KVH·hs | v: KVH·hs]
B, T = 4, 32
NSTEPS = 3
LR, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP = 1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0
NORM_EPS, ROPE_THETA = 1e-5, 10000.0
# Llama-3.1's frequency rule, shrunk to this model: with hs = 16 and rope_theta = 1e4 the
# eight pairs have wavelengths 2π·10^(i/2) = 6.3, 19.9, 62.8, ... positions. With an original
# context of 32, high_freq 4 and low_freq 1 the thresholds are 32/4 = 8 and 32/1 = 32, so pair 0
# keeps its frequency, pair 1 is smoothed and pairs 2..7 are divided by the factor: all three
# branches of the rule are exercised (rope_branches() checks it).
ROPE_FACTOR, ROPE_LOW_FREQ, ROPE_HIGH_FREQ, ROPE_ORIGINAL_T = 8.0, 1.0, 4.0, 32
MULTIPLE_OF = 32              # informational in the model header: F = 160 = 5·32
TIED = 0
SEED = 1337

LLAMA_MAGIC, MODEL_VERSION_FP32 = 20240803, 3
GOLDEN_MAGIC, GOLDEN_VERSION = 20261123, 2
FAMILY_LLAMA3 = 1

# Tolerances (normalised error ‖a − ref‖ / ‖ref‖, per tensor; NaN fails every comparison).
# Both hold for the logits, the loss, every gradient, the losses of the steps and the parameters
# after them (3 steps are too few for Adam's m̂/√v̂ to amplify the differences much).
TOL_F32 = 1e-5    # HF's float32 model against its float64 one: float32 sums of at most 2F = 320
                  # terms, ~1e-6 measured; the float32 trainers are held to the same 1e-5
TOL_HAND = 1e-5   # the hand-written float64 model against HF's float64 one: HF's float32 RMSNorm,
                  # softmax and angles (above), a few 1e-7 measured
MUTANT_MIN = 1e-2  # what each planted mistake must move the logits by, at least (≫ the tolerances)


def param_shapes():
    """The 17 tensors in the file order of the Llama layout; (0,) for those a Llama lacks."""
    none = (0,)
    return [
        ("wte", (VP, C)), ("wpe", none),
        ("ln1w", (L, C)), ("ln1b", none),
        ("qkvw", (L, QKV, C)), ("qkvb", none),
        ("attprojw", (L, C, C)), ("attprojb", none),
        ("ln2w", (L, C)), ("ln2b", none),
        ("fcw", (L, 2 * F, C)), ("fcb", none),
        ("fcprojw", (L, C, F)), ("fcprojb", none),
        ("lnfw", (C,)), ("lnfb", none),
        ("wout", (VP, C)),
    ]


SHAPES = param_shapes()
ALL_NAMES = [n for n, _ in SHAPES]
NAMES = [n for n, s in SHAPES if s != (0,)]  # the present ones, in file order
# Decoupled weight decay for matrices and embeddings only; the RMSNorm weights keep wd = 0.
DECAYED = {"wte", "qkvw", "attprojw", "fcw", "fcprojw", "wout"}


def init_params(gen):
    """Random float32 parameters. The RMSNorm weights are 1 + N(0, 0.1), far from 1, so a trainer
    that ignores them fails. The attention and MLP weights are larger than GPT-2's 0.02 so the
    attention pattern is far from uniform (scores of standard deviation ~1) and each block's
    output outweighs its input: a mistake in RoPE or in the K/V heads then shows in the logits."""
    std = {"wte": 0.02, "wout": 0.02, "qkvw": 0.125, "attprojw": 0.05, "fcw": 0.125, "fcprojw": 0.05}
    p = {}
    for name, shape in SHAPES:
        if name in ("ln1w", "ln2w", "lnfw"):
            p[name] = 1.0 + 0.1 * torch.randn(shape, dtype=torch.float64, generator=gen)
        elif name in std:
            p[name] = std[name] * torch.randn(shape, dtype=torch.float64, generator=gen)
        else:
            p[name] = torch.zeros(shape, dtype=torch.float64)
    p["wte"][V:] = 0.0  # padded vocabulary rows are never used; keep them 0
    p["wout"][V:] = 0.0
    # Round once to float32: these exact values go into the model file, and every computation
    # below starts from them.
    return {n: t.to(torch.float32) for n, t in p.items()}


# ---- Hugging Face's layout <-> the file's -------------------------------------------------

def meta_to_hf(w, n_heads):
    """HF's converter (convert_llama_weights_to_hf.py, `permute`): per head, Meta's interleaved
    rows (2i, 2i+1) become rows i and i + hs/2 (rotate_half's halves)."""
    rows, cols = w.shape
    return w.reshape(n_heads, rows // n_heads // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def hf_to_meta(w, n_heads):
    """The inverse: per head, HF's rows i and i + hs/2 become the pair (2i, 2i+1)."""
    rows, cols = w.shape
    return w.reshape(n_heads, 2, rows // n_heads // 2, cols).transpose(1, 2).reshape(rows, cols)


def layer_key(l, name):
    return f"model.layers.{l}.{name}.weight"


def to_hf(p):
    """The file's tensors as HF's state dict (pad rows dropped, q and k rows permuted)."""
    sd = {"model.embed_tokens.weight": p["wte"][:V], "model.norm.weight": p["lnfw"], "lm_head.weight": p["wout"][:V]}
    for l in range(L):
        q, k, v = p["qkvw"][l].split([NH * HS, KVH * HS, KVH * HS])
        gate, up = p["fcw"][l].split([F, F])
        sd[layer_key(l, "input_layernorm")] = p["ln1w"][l]
        sd[layer_key(l, "self_attn.q_proj")] = meta_to_hf(q, NH)
        sd[layer_key(l, "self_attn.k_proj")] = meta_to_hf(k, KVH)
        sd[layer_key(l, "self_attn.v_proj")] = v
        sd[layer_key(l, "self_attn.o_proj")] = p["attprojw"][l]
        sd[layer_key(l, "post_attention_layernorm")] = p["ln2w"][l]
        sd[layer_key(l, "mlp.gate_proj")] = gate
        sd[layer_key(l, "mlp.up_proj")] = up
        sd[layer_key(l, "mlp.down_proj")] = p["fcprojw"][l]
    return {k: t.contiguous() for k, t in sd.items()}


def from_hf(sd):
    """HF's tensors (parameters or their gradients) in the file's layout; pad rows 0."""
    dtype = sd["lm_head.weight"].dtype

    def padded(t):
        out = torch.zeros((VP, C), dtype=dtype)
        out[:V] = t
        return out

    def stack(fn):
        return torch.stack([fn(l) for l in range(L)])

    p = {n: torch.zeros(s, dtype=dtype) for n, s in SHAPES}
    p["wte"], p["wout"], p["lnfw"] = padded(sd["model.embed_tokens.weight"]), padded(sd["lm_head.weight"]), sd["model.norm.weight"]
    p["ln1w"] = stack(lambda l: sd[layer_key(l, "input_layernorm")])
    p["qkvw"] = stack(lambda l: torch.cat([hf_to_meta(sd[layer_key(l, "self_attn.q_proj")], NH),
                                           hf_to_meta(sd[layer_key(l, "self_attn.k_proj")], KVH),
                                           sd[layer_key(l, "self_attn.v_proj")]]))
    p["attprojw"] = stack(lambda l: sd[layer_key(l, "self_attn.o_proj")])
    p["ln2w"] = stack(lambda l: sd[layer_key(l, "post_attention_layernorm")])
    p["fcw"] = stack(lambda l: torch.cat([sd[layer_key(l, "mlp.gate_proj")], sd[layer_key(l, "mlp.up_proj")]]))
    p["fcprojw"] = stack(lambda l: sd[layer_key(l, "mlp.down_proj")])
    return {n: t.detach().clone() for n, t in p.items()}


# ---- Hugging Face's model ---------------------------------------------------------------

def hf_model():
    """A LlamaForCausalLM of this shape with random (later overwritten) weights: no download."""
    rope = {"rope_type": "llama3", "factor": ROPE_FACTOR, "low_freq_factor": ROPE_LOW_FREQ,
            "high_freq_factor": ROPE_HIGH_FREQ, "original_max_position_embeddings": ROPE_ORIGINAL_T}
    kw = dict(vocab_size=V, hidden_size=C, intermediate_size=F, num_hidden_layers=L, num_attention_heads=NH,
              num_key_value_heads=KVH, max_position_embeddings=MAXT, rms_norm_eps=NORM_EPS, hidden_act="silu",
              tie_word_embeddings=False, attention_bias=False, mlp_bias=False, attention_dropout=0.0,
              pad_token_id=None, attn_implementation="eager")
    if int(transformers.__version__.split(".")[0]) >= 5:  # rope_theta moved into rope_parameters
        config = LlamaConfig(rope_parameters=dict(rope, rope_theta=ROPE_THETA), **kw)
    else:
        config = LlamaConfig(rope_scaling=rope, rope_theta=ROPE_THETA, **kw)
    model = LlamaForCausalLM(config)
    model.eval()  # no dropout anywhere (all rates are 0 anyway); autograd still works
    assert model.config._attn_implementation == "eager", model.config._attn_implementation
    assert model.model.rotary_emb.rope_type == "llama3", "the Llama-3.1 frequency rule did not take"
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr(), "the head is tied"
    return model


def hf_loss_and_grads(model, p, inputs, targets):
    """Loads the file-layout parameters p into the model (in its dtype) and returns the logits
    (B, T, V), the loss (mean cross-entropy over the B·T positions, against our own targets:
    HF's labels= would shift them again) and every gradient in the file layout."""
    model.load_state_dict(to_hf(p), strict=True)
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=inputs).logits
    loss = -logits.log_softmax(dim=-1).gather(-1, targets.unsqueeze(-1)).mean()
    loss.backward()
    grads = from_hf({k: t.grad for k, t in model.named_parameters()})
    return logits.detach(), loss.item(), grads


# ---- the hand-written float64 Llama, on the file layout ----------------------------------

def rope_freqs(rule=True):
    """freq_i = rope_theta^(-2i/hs), then Llama-3.1's rule (the layout's formula, README.md), float64."""
    i = torch.arange(HS // 2, dtype=torch.float64)
    freq = ROPE_THETA ** (-2.0 * i / HS)
    if not rule:
        return freq
    wavelen = 2 * math.pi / freq
    lo, hi = ROPE_ORIGINAL_T / ROPE_LOW_FREQ, ROPE_ORIGINAL_T / ROPE_HIGH_FREQ
    smooth = (ROPE_ORIGINAL_T / wavelen - ROPE_LOW_FREQ) / (ROPE_HIGH_FREQ - ROPE_LOW_FREQ)
    mid = (1 - smooth) * freq / ROPE_FACTOR + smooth * freq
    return torch.where(wavelen < hi, freq, torch.where(wavelen > lo, freq / ROPE_FACTOR, mid))


def rope_branches():
    """How many pairs take each branch of the rule: (unchanged, smoothed, divided)."""
    wavelen = 2 * math.pi / rope_freqs(rule=False)
    lo, hi = ROPE_ORIGINAL_T / ROPE_LOW_FREQ, ROPE_ORIGINAL_T / ROPE_HIGH_FREQ
    high, low = int((wavelen < hi).sum()), int((wavelen > lo).sum())
    return high, HS // 2 - high - low, low


def rmsnorm(x, w):
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + NORM_EPS) * w


def rope(x, angles):
    """Interleaved RoPE on (B, T, heads, hs): pair i is channels (2i, 2i+1), rotated by angles[t, i]."""
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


def attention(q, k, v, kv_head):
    """Causal attention; q (B, T, NH, hs), k and v (B, T, KVH, hs); query head h reads K/V head kv_head[h]."""
    Bn, Tn = q.shape[:2]
    q, k, v = (t.transpose(1, 2) for t in (q, k[:, :, kv_head], v[:, :, kv_head]))  # (B, NH, T, hs)
    att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
    future = torch.triu(torch.ones(Tn, Tn, dtype=torch.bool), diagonal=1)
    att = att.masked_fill(future, float("-inf")).softmax(dim=-1)
    return (att @ v).transpose(1, 2).reshape(Bn, Tn, C)


def rope_angles(freqs, Tn):
    """angle[t, i] = t · freq_i (t = 0-based position), float64."""
    return torch.arange(Tn, dtype=torch.float64)[:, None] * freqs[None, :]


def forward(p, inputs, angles=None, kv_head=None):
    """Logits (B, T, Vp) of the Llama layout's model on the file layout, in p's dtype. angles (T, hs/2)
    and kv_head (NH) replace the layout's (for the measurements and planted mistakes)."""
    angles = rope_angles(rope_freqs(), inputs.shape[1]) if angles is None else angles
    kv_head = torch.arange(NH) // G if kv_head is None else kv_head
    x = p["wte"][inputs]
    for l in range(L):
        h = rmsnorm(x, p["ln1w"][l])
        qkv = h @ p["qkvw"][l].t()
        q, k, v = qkv.split([NH * HS, KVH * HS, KVH * HS], dim=-1)
        q = rope(q.reshape(*q.shape[:2], NH, HS), angles)
        k = rope(k.reshape(*k.shape[:2], KVH, HS), angles)
        x = x + attention(q, k, v.reshape(*v.shape[:2], KVH, HS), kv_head) @ p["attprojw"][l].t()
        h = rmsnorm(x, p["ln2w"][l])
        gate, up = (h @ p["fcw"][l].t()).split([F, F], dim=-1)
        x = x + (torch.nn.functional.silu(gate) * up) @ p["fcprojw"][l].t()
    return rmsnorm(x, p["lnfw"]) @ p["wout"].t()


def hand_loss_and_grads(p, inputs, targets):
    q = {n: t.detach().clone().requires_grad_(True) for n, t in p.items()}
    logits = forward(q, inputs)[..., :V]  # only the V real columns enter the softmax
    loss = -logits.log_softmax(dim=-1).gather(-1, targets.unsqueeze(-1)).mean()
    loss.backward()
    return logits.detach(), loss.item(), {n: q[n].grad.detach().clone() for n in p}


# ---- the optimizer (gpt2_reference.py's formula) -----------------------------------------

def adamw_run(loss_and_grads, p, hp, nsteps):
    """nsteps AdamW steps on one batch, in p's dtype; p (file layout) is updated in place.
    Returns the loss before each update."""
    lr, b1, b2, eps, wd, clip = hp
    m = {n: torch.zeros_like(p[n]) for n in NAMES}
    v = {n: torch.zeros_like(p[n]) for n in NAMES}
    losses = []
    for t in range(1, nsteps + 1):
        _, loss, g = loss_and_grads(p)
        losses.append(loss)
        # clip by the global L2 norm of all gradients together
        norm = math.sqrt(sum(float((g[n].double() ** 2).sum()) for n in NAMES))
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
    return losses


# ---- comparisons -------------------------------------------------------------------------

def norm_err(a, ref):
    """‖a − ref‖ / ‖ref‖ in float64 (NaN when either holds one)."""
    a, ref = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(ref, dtype=torch.float64)
    den = float(ref.norm())
    return float((a - ref).norm()) / (den if den > 0 else 1.0)


def worst(a, ref, names=NAMES):
    """The largest normalised error over the tensors, and its tensor's name."""
    return max((norm_err(a[n], ref[n]), n) for n in names)


def require(value, tol, what):
    # written so that NaN fails: NaN <= tol is false
    if not value <= tol:
        raise SystemExit(f"FAILED: {what}: {value:.3e} exceeds {tol:.0e}")


# ---- files -------------------------------------------------------------------------------

def f32(t):
    return np.ascontiguousarray(torch.as_tensor(t).detach().numpy(), dtype="<f4")


def i32(values):
    return np.ascontiguousarray(values, dtype="<i4")


def header(values):
    h = np.zeros(256, dtype="<i4")
    for i, x in values.items():
        h[i] = x
    return h


def float_bits(x):
    return int(np.array([x], dtype="<f4").view("<i4")[0])


def sums(a):
    a = np.asarray(a, dtype=np.float64)
    return f"{float(a.sum()):.17g} {float(np.abs(a).sum()):.17g}"


def write(path, arrays):
    with open(path, "wb") as f:
        for a in arrays:
            f.write(a.tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default="test/golden", help="where to write the three files (default test/golden)")
    args = ap.parse_args()

    torch.set_num_threads(1)  # one thread: reductions always summed in the same order
    torch.manual_seed(SEED)   # HF draws its own (overwritten) initial weights from this one
    gen = torch.Generator().manual_seed(SEED)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}")

    # the layout mapping is a bijection, and the frequency rule takes all three branches
    probe = {n: torch.randn(s, dtype=torch.float64, generator=gen) for n, s in SHAPES}
    probe["wte"][V:], probe["wout"][V:] = 0.0, 0.0
    back = from_hf(to_hf(probe))
    assert all(torch.equal(back[n], probe[n]) for n in ALL_NAMES), "from_hf(to_hf(p)) != p"
    branches = rope_branches()
    assert min(branches) >= 1, f"the RoPE pairs do not exercise every branch of the rule: {branches}"

    params32 = init_params(gen)
    # One stream of B*T+1 tokens, split the way the trainer's data loader splits it:
    # row b is stream[b*T : b*T+T], its targets the same window shifted by one token.
    stream = torch.randint(0, V, (B * T + 1,), generator=gen, dtype=torch.int64)
    inputs, targets = stream[:-1].reshape(B, T), stream[1:].reshape(B, T)
    # The hyperparameters are stored as float32; use exactly the stored values.
    hp = tuple(float(x) for x in np.array([LR, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP], dtype=np.float32))

    model64, model32 = hf_model().double(), hf_model()
    # HF's frequencies against the formula (HF computes them in float32)
    hf_freq = model64.model.rotary_emb.inv_freq.double()
    freq_err = float(((hf_freq - rope_freqs()).abs() / rope_freqs()).max())
    require(freq_err, 1e-6, "HF's RoPE frequencies against the formula (relative)")
    # what HF's float32 angles cost: its cos and sin in the float64 model against exact ones
    positions = torch.arange(T)[None, :]
    cos64, sin64 = model64.model.rotary_emb(torch.zeros(1, T, C, dtype=torch.float64), positions)
    exact = rope_angles(rope_freqs(), T)
    angle_cost = max(float((cos64[0, :, :HS // 2] - exact.cos()).abs().max()),
                     float((sin64[0, :, :HS // 2] - exact.sin()).abs().max()))

    def hf64(p):
        return hf_loss_and_grads(model64, p, inputs, targets)

    def hf32(p):
        return hf_loss_and_grads(model32, p, inputs, targets)

    def hand(p):
        return hand_loss_and_grads(p, inputs, targets)

    p64 = {n: params32[n].double() for n in NAMES}
    logits, loss, grads = hf64(p64)
    grad_norm = math.sqrt(sum(float((grads[n] ** 2).sum()) for n in NAMES))
    assert all(float(grads[n][V:].abs().max()) == 0 for n in ("wte", "wout")), "a pad row has a gradient"

    # HF's float32 model against its float64 one
    logits32, loss32, grads32 = hf32({n: params32[n].clone() for n in NAMES})
    f32_logits, f32_loss = norm_err(logits32, logits), norm_err(loss32, loss)
    f32_grad, f32_grad_name = worst(grads32, grads)
    require(max(f32_logits, f32_loss), TOL_F32, "HF float32 against float64: logits, loss")
    require(f32_grad, TOL_F32, f"HF float32 against float64: gradient of {f32_grad_name}")

    # the hand-written float64 model against HF's float64 one
    hlogits, hloss, hgrads = hand(p64)
    hand_logits, hand_loss = norm_err(hlogits, logits), norm_err(hloss, loss)
    hand_max = float((hlogits - logits).abs().max())
    hand_grad, hand_grad_name = worst(hgrads, grads)
    with torch.no_grad():  # given HF's angles (its float32 product of float32 numbers) instead
        angles32 = (torch.arange(T, dtype=torch.float32)[:, None] * hf_freq.float()[None, :]).double()
        hand_f32_angles = norm_err(forward(p64, inputs, angles=angles32)[..., :V], logits)
    require(max(hand_logits, hand_loss), TOL_HAND, "hand-written forward against HF float64: logits, loss")
    require(hand_grad, TOL_HAND, f"hand-written forward against HF float64: gradient of {hand_grad_name}")

    # planted mistakes: each must move the logits by far more than the tolerance
    with torch.no_grad():
        hf_rows = dict(p64)
        hf_rows["qkvw"] = torch.stack([torch.cat([meta_to_hf(q, NH), meta_to_hf(k, KVH), v]) for q, k, v in
                                       (w.split([NH * HS, KVH * HS, KVH * HS]) for w in p64["qkvw"])])
        mutants = {
            "q, k rows left in HF's order": forward(hf_rows, inputs),
            "no Llama-3.1 frequency rule": forward(p64, inputs, angles=rope_angles(rope_freqs(rule=False), T)),
            "query head h reads K/V head h % KVH": forward(p64, inputs, kv_head=torch.arange(NH) % KVH),
            "RMSNorm weights ignored": forward(dict(p64, ln1w=torch.ones(L, C, dtype=torch.float64),
                                                    ln2w=torch.ones(L, C, dtype=torch.float64),
                                                    lnfw=torch.ones(C, dtype=torch.float64)), inputs),
        }
    mutant_err = {what: norm_err(m[..., :V], logits) for what, m in mutants.items()}
    for what, e in mutant_err.items():
        if not e >= MUTANT_MIN:
            raise SystemExit(f"FAILED: the logits cannot tell '{what}' apart: it moves them by {e:.3e} only")

    # the AdamW steps: HF float64 (the golden numbers), HF float32 and the hand-written model
    after = {n: t.clone() for n, t in p64.items()}
    losses = adamw_run(hf64, after, hp, NSTEPS)
    assert losses[0] == loss
    after32 = {n: params32[n].clone() for n in NAMES}
    losses32 = adamw_run(hf32, after32, hp, NSTEPS)
    after_hand = {n: t.clone() for n, t in p64.items()}
    losses_hand = adamw_run(hand, after_hand, hp, NSTEPS)
    f32_losses, hand_losses = norm_err(losses32, losses), norm_err(losses_hand, losses)
    f32_after, f32_after_name = worst(after32, after)
    hand_after, hand_after_name = worst(after_hand, after)
    require(f32_losses, TOL_F32, "HF float32 against float64: the losses of the steps")
    require(hand_losses, TOL_HAND, "hand-written against HF float64: the losses of the steps")
    require(f32_after, TOL_F32, f"HF float32 against float64: {f32_after_name} after the steps")
    require(hand_after, TOL_HAND, f"hand-written against HF float64: {hand_after_name} after the steps")

    # ---- the files
    full = {n: params32[n] for n in NAMES}
    model_header = header({0: LLAMA_MAGIC, 1: MODEL_VERSION_FP32, 2: MAXT, 3: V, 4: L, 5: NH, 6: KVH, 7: C,
                           9: MULTIPLE_OF, 11: int(ROPE_THETA), 12: int(ROPE_FACTOR > 0), 16: 1,
                           17: VP, 18: F, 19: TIED, 20: ROPE_ORIGINAL_T,
                           21: float_bits(NORM_EPS), 22: float_bits(ROPE_THETA), 23: float_bits(ROPE_FACTOR),
                           24: float_bits(ROPE_LOW_FREQ), 25: float_bits(ROPE_HIGH_FREQ)})
    golden_header = header({0: GOLDEN_MAGIC, 1: GOLDEN_VERSION, 2: B, 3: T, 4: MAXT, 5: V, 6: L, 7: NH, 8: C,
                            9: VP, 10: NSTEPS, 11: FAMILY_LLAMA3, 12: KVH, 13: F, 14: TIED, 15: ROPE_ORIGINAL_T})
    sections = [
        ("header", golden_header),
        ("hyperparameters", np.array(list(hp) + [0.0, 0.0], dtype="<f4")),
        ("llama", np.array([NORM_EPS, ROPE_THETA, ROPE_FACTOR, ROPE_LOW_FREQ, ROPE_HIGH_FREQ, 0, 0, 0], dtype="<f4")),
        ("inputs", i32(inputs.numpy()).ravel()),
        ("targets", i32(targets.numpy()).ravel()),
        ("logits", f32(logits).ravel()),
        ("loss", np.array([loss], dtype="<f4")),
        ("grads", np.concatenate([f32(grads[n]).ravel() for n in NAMES])),
        ("losses", np.array(losses, dtype="<f4")),
        ("params_after", np.concatenate([f32(after[n]).ravel() for n in NAMES])),
    ]
    os.makedirs(args.out_dir, exist_ok=True)
    model_path = os.path.join(args.out_dir, "llama_tiny.bin")
    golden_path = os.path.join(args.out_dir, "llama_reference_tiny.bin")
    text_path = os.path.join(args.out_dir, "llama_reference_tiny.txt")
    write(model_path, [model_header] + [f32(full[n]) for n in NAMES])
    write(golden_path, [a for _, a in sections])

    measured = [
        ("hf32_vs_hf64_logits", f32_logits), ("hf32_vs_hf64_loss", f32_loss),
        ("hf32_vs_hf64_worst_grad", f32_grad), ("hf32_vs_hf64_losses", f32_losses),
        ("hf32_vs_hf64_worst_after", f32_after),
        ("hand_vs_hf64_logits", hand_logits), ("hand_vs_hf64_logits_max_abs", hand_max),
        ("hand_vs_hf64_loss", hand_loss), ("hand_vs_hf64_worst_grad", hand_grad),
        ("hand_vs_hf64_losses", hand_losses), ("hand_vs_hf64_worst_after", hand_after),
        ("hand_f32_angles_vs_hf64_logits", hand_f32_angles),
        ("hf64_rope_cos_sin_max_abs_error", angle_cost),
    ]
    with open(text_path, "w") as f:
        f.write("# written by dev/reference/llama_reference.py with llama_reference_tiny.bin and llama_tiny.bin\n")
        f.write(f"torch {torch.__version__}\ntransformers {transformers.__version__}\nnumpy {np.__version__}\n")
        f.write("# the tensors in file order: name elements\n")
        for n, s in SHAPES:
            f.write(f"tensor {n} {int(np.prod(s)) if s != (0,) else 0}\n")
        f.write("# the golden file's sections after the header, as written: "
                "section name elements first last sum sum_of_abs (sums in float64)\n")
        for name, a in sections[1:]:
            f.write(f"section {name} {a.size} {a[0]:.9g} {a[-1]:.9g} {sums(a)}\n")
        f.write("# each present tensor's initial value (llama_tiny.bin), gradient and value after the steps: "
                "init|grad|after name sum sum_of_abs\n")
        for n in NAMES:
            f.write(f"init {n} {sums(f32(full[n]))}\n")
        for n in NAMES:
            f.write(f"grad {n} {sums(f32(grads[n]))}\n")
        for n in NAMES:
            f.write(f"after {n} {sums(f32(after[n]))}\n")
        f.write("# measured: normalised errors ||a - b|| / ||b|| unless named max_abs\n")
        for name, value in measured:
            f.write(f"measured {name} {value:.3e}\n")

    nparams = sum(full[n].numel() for n in NAMES)
    print(f"model: L={L} NH={NH} KVH={KVH} C={C} F={F} maxT={MAXT} V={V} Vp={VP}, {nparams} parameters; "
          f"batch B={B} T={T}")
    print(f"RoPE pairs: {branches[0]} unchanged, {branches[1]} smoothed, {branches[2]} divided by {ROPE_FACTOR:g}; "
          f"HF's frequencies within {freq_err:.1e} (relative) of the formula's, its cos and sin within {angle_cost:.1e}")
    print(f"loss at init {loss:.6f} (ln V = {math.log(V):.6f}), gradient norm {grad_norm:.6f}")
    print(f"losses of {NSTEPS} AdamW steps: " + " ".join(f"{x:.6f}" for x in losses))
    print(f"HF float32 against float64 (normalised): logits {f32_logits:.2e}, loss {f32_loss:.2e}, "
          f"gradients up to {f32_grad:.2e} ({f32_grad_name}), losses {f32_losses:.2e}, "
          f"after the steps up to {f32_after:.2e} ({f32_after_name})")
    print(f"hand-written float64 against HF float64: logits {hand_logits:.2e} (max |diff| {hand_max:.2e}), "
          f"loss {hand_loss:.2e}, gradients up to {hand_grad:.2e} ({hand_grad_name}), losses {hand_losses:.2e}, "
          f"after the steps up to {hand_after:.2e} ({hand_after_name}); given HF's float32 angles: "
          f"logits {hand_f32_angles:.2e}")
    print("planted mistakes move the logits by: " + "; ".join(f"{w} {e:.2e}" for w, e in mutant_err.items()))
    for path in (model_path, golden_path, text_path):
        print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
