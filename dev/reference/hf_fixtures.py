#!/usr/bin/env python3
"""Tiny Hugging Face model folders and what transformers computes for them: the fixtures of
scripts/hf_convert.py's tests (test/tools/hf_convert.sh).

Outputs (in --out-dir, default test/golden/hf):
  gpt2_tiny/                 a random GPT2LMHeadModel as save_pretrained writes it: config.json,
                             generation_config.json, model.safetensors (float32)
  llama_tiny/                a random LlamaForCausalLM, sharded into two files with an index:
                             model-0000{1,2}-of-00002.safetensors, model.safetensors.index.json
  gpt2_tiny_reference.bin    golden file version 1 (test/golden.h) for the GPT-2 folder
  llama_tiny_reference.bin   golden file version 2 for the Llama folder
  *_reference.txt            their companions: versions, shapes, and the differences measured

The folders are what a user downloads from a model hub, in miniature: the converter must turn
them into the project's model files, and the trainers must then compute what transformers
computes. The golden numbers come from transformers' own GPT2LMHeadModel and LlamaForCausalLM
on the folders' weights (nothing is downloaded; each model is built from a config made here):
one batch of fixed tokens, its logits, loss and every gradient, then NSTEPS AdamW steps on that
batch (gpt2_reference.py's formula and hyperparameters) and the parameters after them. The
gradients and parameters are written in the project's layout, mapped from Hugging Face's by the
functions below, written from the layout's description (dev/reference/README.md) and not taken
from the converter; the logits and the loss do not depend on any mapping, so a converter and a
fixture that shared a mistake would still be caught there.

Shapes. GPT-2: L=2, C=32, NH=2 (head size 16: the fused attention's smallest), V=260 (Vp=384:
the vocabulary is padded, as GPT-2's 50,257 is to 50,304), maxT=64. Llama: L=2, C=64, NH=4,
KVH=2 (two query heads per K/V head), F=96 (not 4C), V=256, maxT=64, untied head, rms_norm_eps
1e-5, RoPE theta 1e4 with Llama-3.1's scaling (factor 8, low 1, high 4, original 32: of the
eight pairs one keeps its frequency, one is blended and six are divided, as in
llama_reference.py). V is at least 256 so that `./train -e` runs on the built-in corpus (bytes).
The weights are drawn here, not by transformers' init: larger than its 0.02 where that makes
attention far from uniform (so a Q/K permutation left out moves the logits by far more than the
tolerance; the script requires it), and norms and biases away from 1 and 0.

Precision. The golden numbers are transformers' model in float64 (model.double()) on the
folders' float32 weights; its float32 model must agree within 1e-5 (normalised error, per
tensor). As llama_reference.py measures, transformers' float64 Llama computes RoPE's angles,
RMSNorm and the softmax in float32: its numbers are good to a few 1e-7, far below the trainers'
float32 tolerance of 1e-5.

Run from the repository root (needs torch, transformers, numpy, safetensors; the CPU build of
torch is enough; a few seconds):
  python3 dev/reference/hf_fixtures.py --out-dir test/golden/hf
Two runs give byte-identical files; another torch or transformers version may draw or round
differently: regenerate every file together, never one alone.
"""
import argparse
import json
import math
import os
import shutil

import numpy as np
import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

SEED = 2045
B, T = 2, 32
NSTEPS = 3
LR, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP = 1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0
GOLDEN_MAGIC = 20261123
TOL_F32 = 1e-5     # transformers' float32 model against its float64 one (normalised, per tensor):
                   # logits, loss, gradients, the losses of the steps (~1e-6 measured)
TOL_AFTER = 1e-4   # the same for the parameters after the steps: Adam's division by sqrt(v)
                   # amplifies tiny gradients' rounding (as check_reference.cpp allows)
MUTANT_MIN = 1e-2  # what the Q/K rows left in Hugging Face's order must move the Llama logits by

GPT2 = dict(L=2, C=32, NH=2, V=260, maxT=64)
LLAMA = dict(L=2, C=64, NH=4, KVH=2, F=96, V=256, maxT=64, norm_eps=1e-5, rope_theta=1e4,
             rope_factor=8.0, rope_low=1.0, rope_high=4.0, rope_original=32)


def padded(V):
    """The project's padded vocabulary: V rounded up to a multiple of 128 (host/model.h)."""
    return (V + 127) // 128 * 128


# ---- the models -------------------------------------------------------------------------

def gpt2_model():
    s = GPT2
    config = GPT2Config(vocab_size=s["V"], n_positions=s["maxT"], n_embd=s["C"], n_layer=s["L"], n_head=s["NH"],
                        activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, tie_word_embeddings=True, bos_token_id=None, eos_token_id=None,
                        attn_implementation="eager")
    return GPT2LMHeadModel(config)


def llama_model():
    s = LLAMA
    rope = {"rope_type": "llama3", "factor": s["rope_factor"], "low_freq_factor": s["rope_low"],
            "high_freq_factor": s["rope_high"], "original_max_position_embeddings": s["rope_original"]}
    kw = dict(vocab_size=s["V"], hidden_size=s["C"], intermediate_size=s["F"], num_hidden_layers=s["L"],
              num_attention_heads=s["NH"], num_key_value_heads=s["KVH"], max_position_embeddings=s["maxT"],
              rms_norm_eps=s["norm_eps"], hidden_act="silu", tie_word_embeddings=False, attention_bias=False,
              mlp_bias=False, attention_dropout=0.0, bos_token_id=None, eos_token_id=None, pad_token_id=None,
              attn_implementation="eager")
    if int(transformers.__version__.split(".")[0]) >= 5:  # rope_theta moved into rope_parameters
        config = LlamaConfig(rope_parameters=dict(rope, rope_theta=s["rope_theta"]), **kw)
    else:
        config = LlamaConfig(rope_scaling=rope, rope_theta=s["rope_theta"], **kw)
    model = LlamaForCausalLM(config)
    assert model.model.rotary_emb.rope_type == "llama3", "the Llama-3.1 frequency rule did not take"
    return model


def qkv_spread(q, k, v):
    """Per column of c_attn (Conv1D: its outputs are the last dimension, [q | k | v])."""
    C = GPT2["C"]
    return torch.tensor([q] * C + [k] * C + [v] * C, dtype=torch.float64)


def gpt2_std(name):
    """The spread each GPT-2 tensor is drawn with (name: transformers' parameter name).

    The keys' weights are large and the queries' small: attention scores of spread ~0.6, far
    from uniform. The key's bias is N(0, 1): its true gradient is 0 (softmax ignores what it
    adds, a constant per row of scores), so all a float32 trainer computes for it is rounding
    noise, ~1e-9, which Adam (eps 1e-8) turns into steps of up to ~3e-5 in 3 updates where the
    float64 reference moves it by nothing. Drawn that large, the key bias keeps that noise near
    1e-5 of qkvb's norm, well inside the 1e-4 that check_reference allows after the steps (the
    noise grows with the queries' size: hence their small weights)."""
    if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
        return None  # 1 + N(0, 0.1)
    if name.endswith("attn.c_attn.weight"):
        return qkv_spread(0.03, 0.6, 0.1)
    if name.endswith("attn.c_attn.bias"):
        return qkv_spread(0.05, 1.0, 0.05)
    if name.endswith(("c_proj.weight",)):
        return 0.05
    if name.endswith("mlp.c_fc.weight"):
        return 0.1
    if name.endswith(("wte.weight", "wpe.weight")):
        return 0.1
    return 0.05      # biases, LayerNorm shifts


def llama_std(name):
    if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
        return None
    if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight", "up_proj.weight")):
        return 0.125
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        return 0.05
    return 0.02      # embed_tokens, lm_head


def randomize(model, std_of, gen):
    """Every parameter drawn from gen in float64 (in name order) and rounded once to float32."""
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            std = std_of(name)
            x = torch.randn(p.shape, dtype=torch.float64, generator=gen)
            p.copy_((1.0 + 0.1 * x) if std is None else std * x)


# ---- Hugging Face's layout -> the project's (dev/reference/README.md) -------------------

def hf_to_meta(w, heads):
    """Per head, Hugging Face's rows i and i + hs/2 (rotate_half's halves) become Meta's interleaved
    pair (2i, 2i+1), the rows the trainers' RoPE rotates together."""
    rows, cols = w.shape
    return w.reshape(heads, 2, rows // heads // 2, cols).transpose(1, 2).reshape(rows, cols)


def meta_to_hf(w, heads):
    """The inverse (Hugging Face's conversion of Meta's checkpoints)."""
    rows, cols = w.shape
    return w.reshape(heads, rows // heads // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def pad_rows(t, Vp):
    out = torch.zeros((Vp,) + tuple(t.shape[1:]), dtype=t.dtype)
    out[:t.shape[0]] = t
    return out


def gpt2_layout(sd):
    """transformers' GPT-2 tensors (parameters or gradients, by name) as the project's 16, in file
    order. Conv1D stores (in, out): the project's (out, in) is its transpose."""
    s = GPT2
    L = s["L"]

    def h(l, name):
        return sd[f"transformer.h.{l}.{name}"]

    def stack(fn):
        return torch.stack([fn(l) for l in range(L)])

    return {
        "wte": pad_rows(sd["transformer.wte.weight"], padded(s["V"])),
        "wpe": sd["transformer.wpe.weight"],
        "ln1w": stack(lambda l: h(l, "ln_1.weight")), "ln1b": stack(lambda l: h(l, "ln_1.bias")),
        "qkvw": stack(lambda l: h(l, "attn.c_attn.weight").t()), "qkvb": stack(lambda l: h(l, "attn.c_attn.bias")),
        "attprojw": stack(lambda l: h(l, "attn.c_proj.weight").t()),
        "attprojb": stack(lambda l: h(l, "attn.c_proj.bias")),
        "ln2w": stack(lambda l: h(l, "ln_2.weight")), "ln2b": stack(lambda l: h(l, "ln_2.bias")),
        "fcw": stack(lambda l: h(l, "mlp.c_fc.weight").t()), "fcb": stack(lambda l: h(l, "mlp.c_fc.bias")),
        "fcprojw": stack(lambda l: h(l, "mlp.c_proj.weight").t()),
        "fcprojb": stack(lambda l: h(l, "mlp.c_proj.bias")),
        "lnfw": sd["transformer.ln_f.weight"], "lnfb": sd["transformer.ln_f.bias"],
    }


def llama_layout(sd):
    """transformers' Llama tensors as the project's 9 Llama tensors, in file order: per layer
    qkvw = [q; k; v] with q's and k's rows in Meta's pairs, fcw = [gate; up]."""
    s = LLAMA
    L, NH, KVH = s["L"], s["NH"], s["KVH"]

    def w(l, name):
        return sd[f"model.layers.{l}.{name}.weight"]

    def stack(fn):
        return torch.stack([fn(l) for l in range(L)])

    return {
        "wte": pad_rows(sd["model.embed_tokens.weight"], padded(s["V"])),
        "ln1w": stack(lambda l: w(l, "input_layernorm")),
        "qkvw": stack(lambda l: torch.cat([hf_to_meta(w(l, "self_attn.q_proj"), NH), hf_to_meta(w(l, "self_attn.k_proj"), KVH),
                                           w(l, "self_attn.v_proj")])),
        "attprojw": stack(lambda l: w(l, "self_attn.o_proj")),
        "ln2w": stack(lambda l: w(l, "post_attention_layernorm")),
        "fcw": stack(lambda l: torch.cat([w(l, "mlp.gate_proj"), w(l, "mlp.up_proj")])),
        "fcprojw": stack(lambda l: w(l, "mlp.down_proj")),
        "lnfw": sd["model.norm.weight"],
        "wout": pad_rows(sd["lm_head.weight"], padded(s["V"])),
    }


# Decoupled weight decay on the matrices and embeddings (param_decays() in host/checkpoint.h's
# terms: wte, wpe, qkvw, attprojw, fcw, fcprojw, wout), by transformers' names; none on biases
# and norms.
def decays(name):
    return name.endswith("weight") and not any(k in name for k in ("ln_", "norm", "layernorm"))


# ---- transformers' numbers ----------------------------------------------------------------

def loss_and_grads(model, inputs, targets):
    """Logits (B, T, V), the mean cross-entropy against our targets (transformers' labels= would
    shift them a second time) and the gradient of every parameter, by name."""
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=inputs).logits
    loss = -logits.log_softmax(dim=-1).gather(-1, targets.unsqueeze(-1)).mean()
    loss.backward()
    return logits.detach(), loss.item(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def adamw_steps(model, inputs, targets, hp, nsteps):
    """nsteps AdamW steps on one batch, on the model's own parameters (element-wise, so the same
    as on the project's layout); returns the loss before each update."""
    lr, b1, b2, eps, wd, clip = hp
    params = dict(model.named_parameters())
    m = {n: torch.zeros_like(p) for n, p in params.items()}
    v = {n: torch.zeros_like(p) for n, p in params.items()}
    losses = []
    for t in range(1, nsteps + 1):
        _, loss, g = loss_and_grads(model, inputs, targets)
        losses.append(loss)
        norm = math.sqrt(sum(float((g[n].double() ** 2).sum()) for n in params))  # global norm, then clip
        if norm > 0:
            scale = min(1.0, clip / (norm + 1e-6))
            g = {n: g[n] * scale for n in params}
        with torch.no_grad():
            for n, p in params.items():
                m[n].mul_(b1).add_((1 - b1) * g[n])
                v[n].mul_(b2).add_((1 - b2) * g[n] ** 2)
                mhat, vhat = m[n] / (1 - b1 ** t), v[n] / (1 - b2 ** t)
                p.sub_(lr * (mhat / (vhat.sqrt() + eps) + (wd if decays(n) else 0.0) * p))
    return losses


def norm_err(a, ref):
    a, ref = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(ref, dtype=torch.float64)
    den = float(ref.norm())
    return float((a - ref).norm()) / (den if den > 0 else 1.0)


def require(value, tol, what):
    if not value <= tol:  # NaN fails
        raise SystemExit(f"FAILED: {what}: {value:.3e} exceeds {tol:.0e}")


def f32(t):
    return np.ascontiguousarray(torch.as_tensor(t).detach().numpy(), dtype="<f4").ravel()


def run_family(family, folder, hp, inputs, targets, gen):
    """Makes the folder and returns the golden file's sections and the companion's lines."""
    model = gpt2_model() if family == "gpt2" else llama_model()
    layout = gpt2_layout if family == "gpt2" else llama_layout
    randomize(model, gpt2_std if family == "gpt2" else llama_std, gen)
    model.eval()
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    if family == "gpt2":
        model.save_pretrained(folder)
    else:  # ~380 KB in two files: the sharded path, with its index
        model.save_pretrained(folder, max_shard_size="250KB")
    for name in os.listdir(folder):  # (transformers writes the weights 0600)
        os.chmod(os.path.join(folder, name), 0o644)

    # the saved float32 weights, and the models that compute with them
    model64 = (gpt2_model() if family == "gpt2" else llama_model()).double().eval()
    model32 = (gpt2_model() if family == "gpt2" else llama_model()).eval()
    sd = {n: p.detach().clone() for n, p in model.named_parameters()}
    model64.load_state_dict({n: t.double() for n, t in sd.items()}, strict=False)
    model32.load_state_dict(sd, strict=False)
    if family == "gpt2":  # tied: the head is wte, a single parameter
        assert model64.lm_head.weight.data_ptr() == model64.transformer.wte.weight.data_ptr()
    else:
        assert model64.lm_head.weight.data_ptr() != model64.model.embed_tokens.weight.data_ptr()
    assert model64.config._attn_implementation == "eager"

    logits, loss, grads = loss_and_grads(model64, inputs, targets)
    logits32, loss32, grads32 = loss_and_grads(model32, inputs, targets)
    g64, g32 = layout(grads), layout(grads32)
    worst_grad = max((norm_err(g32[n], g64[n]), n) for n in g64)
    require(max(norm_err(logits32, logits), norm_err(loss32, loss)), TOL_F32, f"{family}: float32 logits, loss")
    require(worst_grad[0], TOL_F32, f"{family}: float32 gradient of {worst_grad[1]}")
    pad_rows_zero = all(float(g64[n][V_of(family):].abs().sum()) == 0 for n in ("wte", "wout") if n in g64)
    assert pad_rows_zero, "a padded vocabulary row has a gradient"

    mutant = None
    if family == "llama":
        # A converter that left q's and k's rows in Hugging Face's order would give the trainers
        # rows they rotate as the wrong pairs: the model transformers would run for that is the
        # one whose q_proj and k_proj are meta_to_hf of the real ones. Its logits must differ.
        wrong = {n: t.double() for n, t in sd.items()}
        for l in range(LLAMA["L"]):
            for proj, heads in (("q_proj", LLAMA["NH"]), ("k_proj", LLAMA["KVH"])):
                key = f"model.layers.{l}.self_attn.{proj}.weight"
                wrong[key] = meta_to_hf(wrong[key], heads)
        probe = llama_model().double().eval()
        probe.load_state_dict(wrong, strict=False)
        with torch.no_grad():
            mutant = norm_err(probe(input_ids=inputs).logits, logits)
        if not mutant >= MUTANT_MIN:
            raise SystemExit(f"FAILED: the logits cannot tell Q/K rows left unpermuted apart ({mutant:.3e})")

    losses = adamw_steps(model64, inputs, targets, hp, NSTEPS)
    assert losses[0] == loss
    losses32 = adamw_steps(model32, inputs, targets, hp, NSTEPS)
    after = layout({n: p.detach() for n, p in model64.named_parameters()})
    after32 = layout({n: p.detach() for n, p in model32.named_parameters()})
    worst_after = max((norm_err(after32[n], after[n]), n) for n in after)
    require(norm_err(losses32, losses), TOL_F32, f"{family}: float32 losses of the steps")
    require(worst_after[0], TOL_AFTER, f"{family}: float32 {worst_after[1]} after the steps")

    names = list(g64)  # file order (dicts keep it)
    s = GPT2 if family == "gpt2" else LLAMA
    h = np.zeros(256, dtype="<i4")
    h[0], h[1] = GOLDEN_MAGIC, 1 if family == "gpt2" else 2
    h[2:11] = [B, T, s["maxT"], s["V"], s["L"], s["NH"], s["C"], padded(s["V"]), NSTEPS]
    sections = [h, np.array(list(hp) + [0.0, 0.0], dtype="<f4")]
    if family == "llama":
        h[11:16] = [1, s["KVH"], s["F"], 0, s["rope_original"]]
        sections.append(np.array([s["norm_eps"], s["rope_theta"], s["rope_factor"], s["rope_low"], s["rope_high"],
                                  0, 0, 0], dtype="<f4"))
    sections += [np.ascontiguousarray(inputs.numpy(), dtype="<i4").ravel(),
                 np.ascontiguousarray(targets.numpy(), dtype="<i4").ravel(),
                 f32(logits), np.array([loss], dtype="<f4"),
                 np.concatenate([f32(g64[n]) for n in names]), np.array(losses, dtype="<f4"),
                 np.concatenate([f32(after[n]) for n in names])]
    nparams = sum(g64[n].numel() for n in names)
    measured = [("hf32_vs_hf64_logits", norm_err(logits32, logits)), ("hf32_vs_hf64_loss", norm_err(loss32, loss)),
                (f"hf32_vs_hf64_worst_grad_{worst_grad[1]}", worst_grad[0]),
                ("hf32_vs_hf64_losses", norm_err(losses32, losses)),
                (f"hf32_vs_hf64_worst_after_{worst_after[1]}", worst_after[0])]
    if mutant is not None:
        measured.append(("qk_rows_unpermuted_moves_logits_by", mutant))
    text = [f"# written by dev/reference/hf_fixtures.py with {os.path.basename(folder)}/",
            f"torch {torch.__version__}", f"transformers {transformers.__version__}", f"numpy {np.__version__}",
            f"model {family} " + " ".join(f"{k}={v}" for k, v in s.items()) + f" Vp={padded(s['V'])}",
            f"parameters {nparams} (the project's layout, padded rows included)",
            f"batch B={B} T={T}, {NSTEPS} AdamW steps: lr {hp[0]:g} betas {hp[1]:g} {hp[2]:g} eps {hp[3]:g} "
            f"weight_decay {hp[4]:g} grad_clip {hp[5]:g}",
            f"loss {loss:.9g}", "losses " + " ".join(f"{x:.9g}" for x in losses),
            "# measured: normalised errors ||a - b|| / ||b||"] + [f"measured {k} {v:.3e}" for k, v in measured]
    summary = (f"{family}: {nparams} parameters, loss at init {loss:.6f} (ln V = {math.log(s['V']):.6f}), "
               f"losses " + " ".join(f"{x:.6f}" for x in losses) + "; float32 against float64: logits "
               f"{measured[0][1]:.1e}, gradients up to {worst_grad[0]:.1e} ({worst_grad[1]}), after the steps "
               f"up to {worst_after[0]:.1e}" + (f"; Q/K rows unpermuted move the logits by {mutant:.2f}"
                                                 if mutant is not None else ""))
    return sections, text, summary


def V_of(family):
    return (GPT2 if family == "gpt2" else LLAMA)["V"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default="test/golden/hf", help="where to write (default test/golden/hf)")
    args = ap.parse_args()
    transformers.utils.logging.disable_progress_bar()  # (save_pretrained's "Writing model shards")
    torch.set_num_threads(1)  # one thread: reductions always summed in the same order
    torch.manual_seed(SEED)   # transformers' own (overwritten) initial weights
    gen = torch.Generator().manual_seed(SEED)
    os.makedirs(args.out_dir, exist_ok=True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}")
    hp = tuple(float(x) for x in np.array([LR, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP], dtype=np.float32))
    for family in ("gpt2", "llama"):
        # one stream of B*T+1 tokens below V: row b is stream[b*T : b*T+T], its targets shifted by one
        stream = torch.randint(0, V_of(family), (B * T + 1,), generator=gen, dtype=torch.int64)
        inputs, targets = stream[:-1].reshape(B, T), stream[1:].reshape(B, T)
        folder = os.path.join(args.out_dir, f"{family}_tiny")
        sections, text, summary = run_family(family, folder, hp, inputs, targets, gen)
        golden = os.path.join(args.out_dir, f"{family}_tiny_reference.bin")
        with open(golden, "wb") as f:
            for a in sections:
                f.write(a.tobytes())
        with open(os.path.join(args.out_dir, f"{family}_tiny_reference.txt"), "w") as f:
            f.write("\n".join(text) + "\n")
        print(summary)
        size = sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder))
        print(f"wrote {folder}/ ({', '.join(sorted(os.listdir(folder)))}; {size} bytes) and {golden} "
              f"({os.path.getsize(golden)} bytes)")


if __name__ == "__main__":
    main()
