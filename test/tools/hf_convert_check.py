#!/usr/bin/env python3
"""The checks of test/tools/hf_convert.sh that need Python: each subcommand exits 0 when what it
checks holds, else prints why (one line) and exits 1. Written apart from scripts/hf_convert.py
(which it never imports, but for `limits`): the folders and headers are read here with the
formats' own descriptions (the safetensors header, docs/formats.md), not with its code.

  same FIXTURE EXPORTED         the exported folder's tensors equal the fixture's bit for bit (names,
                                dtypes, shapes, bytes), and config.json's model fields agree
  header MODEL.bin HF_DIR       the model file's header against the folder's config.json
  variant KIND SRC DST ...      writes a folder made from SRC (the cases below)
  limits                        hf_convert.py's LIMITS against SHAPE_FIELDS in host/checkpoint.h
  transformers FIX EXP GOLDEN   (needs torch and transformers; exit 77 without) the exported folder
                                loads in transformers and computes the fixture's logits: the same
                                bits as the fixture's own folder, and the golden file's within 1e-5

Needs numpy and safetensors.
"""
import json
import os
import re
import shutil
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Fail(Exception):
    pass


# ---- safetensors folders, read from their headers ---------------------------------------

def raw_tensors(folder):
    """name -> (dtype, shape, bytes) of every tensor of a folder (single file or shards)."""
    files = ["model.safetensors"]
    if not os.path.exists(os.path.join(folder, files[0])):
        with open(os.path.join(folder, "model.safetensors.index.json")) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for name in files:
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + n])
        for key, e in header.items():
            if key == "__metadata__":
                continue
            begin, end = e["data_offsets"]
            out[key] = (e["dtype"], tuple(e["shape"]), data[8 + n + begin:8 + n + end])
    return out


def float_tensors(folder):
    out = {}
    for key, (dtype, shape, data) in raw_tensors(folder).items():
        if dtype == "BF16":
            a = (np.frombuffer(data, "<u2").astype("<u4") << 16).view("<f4")
        else:
            a = np.frombuffer(data, {"F32": "<f4", "F16": "<f2", "F64": "<f8"}[dtype]).astype("<f4")
        out[key] = a.reshape(shape)
    return out


def write_folder(dst, config, tensors, dtype="F32", shards=1):
    """A model folder: config.json and the tensors (float32 arrays) stored as dtype, in one file
    or in `shards` files with an index. BF16 is written by hand (numpy has none): the header,
    then each tensor's upper 16 bits (the values must be bfloat16 already)."""
    os.makedirs(dst)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    names = sorted(tensors)
    groups = [names[i::shards] for i in range(shards)]
    weight_map = {}
    for i, group in enumerate(groups):
        file = "model.safetensors" if shards == 1 else f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        path = os.path.join(dst, file)
        if dtype == "BF16":
            header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
            for k in group:
                bits = np.ascontiguousarray(tensors[k], "<f4").view("<u4")
                if np.any(bits & 0xFFFF):
                    raise Fail(f"{k} is not bfloat16-valued")
                blob = (bits >> 16).astype("<u2").tobytes()
                header[k] = {"dtype": "BF16", "shape": list(tensors[k].shape), "data_offsets": [at, at + len(blob)]}
                blobs.append(blob)
                at += len(blob)
            text = json.dumps(header).encode()
            text += b" " * (-len(text) % 8)
            with open(path, "wb") as f:
                f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))
        else:
            np_dtype = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}[dtype]
            save_file({k: np.ascontiguousarray(tensors[k], np_dtype) for k in group}, path, metadata={"format": "pt"})
        weight_map.update({k: file for k in group})
    if shards > 1:
        with open(os.path.join(dst, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=2)


def config_of(folder):
    with open(os.path.join(folder, "config.json")) as f:
        return json.load(f)


# ---- same -----------------------------------------------------------------------------------

def model_fields(cfg):
    """The fields that define the model's computation, in one spelling: transformers 5 writes
    rope_parameters (rope_theta inside), 4 rope_theta and rope_scaling."""
    arch = cfg["architectures"][0]
    if arch == "GPT2LMHeadModel":
        keys = ["vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "activation_function",
                "layer_norm_epsilon", "tie_word_embeddings", "model_type"]
        out = {k: cfg.get(k) for k in keys}
        out["n_inner"] = cfg.get("n_inner") or 4 * cfg["n_embd"]
        return dict(out, architecture=arch)
    keys = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "hidden_act", "tie_word_embeddings",
            "attention_bias", "mlp_bias", "model_type"]
    out = {k: cfg.get(k) for k in keys}
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    out["rope_theta"] = float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    kind = rope.get("rope_type", rope.get("type", "default"))
    out["rope"] = (kind,) + tuple(float(rope[k]) for k in ("factor", "low_freq_factor", "high_freq_factor",
                                                            "original_max_position_embeddings")
                                  if kind == "llama3")
    out["head_dim"] = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    return dict(out, architecture=arch)


IGNORED = re.compile(r"(^|\.)(attn\.bias|attn\.masked_bias|rotary_emb\.inv_freq)$")


def library_tensors(folder):
    """name -> (dtype, shape, bytes), read by safetensors itself (float32 folders)."""
    with safe_open(os.path.join(folder, "model.safetensors"), framework="np") as f:
        return {k: ("F32" if f.get_tensor(k).dtype == np.float32 else str(f.get_tensor(k).dtype),
                    tuple(f.get_tensor(k).shape), f.get_tensor(k).astype("<f4").tobytes()) for k in f.keys()}


def cmd_same(fixture, exported):
    a, b = raw_tensors(fixture), library_tensors(exported)
    a = {k: v for k, v in a.items() if not IGNORED.search(k)}
    if set(a) != set(b):
        raise Fail(f"tensor names differ: only in the fixture {sorted(set(a) - set(b))[:3]}, only exported "
                   f"{sorted(set(b) - set(a))[:3]}")
    for k in sorted(a):
        if a[k][:2] != b[k][:2]:
            raise Fail(f"{k}: {a[k][0]} {list(a[k][1])} in the fixture, {b[k][0]} {list(b[k][1])} exported")
        if a[k][2] != b[k][2]:
            x, y = np.frombuffer(a[k][2], "<u1"), np.frombuffer(b[k][2], "<u1")
            raise Fail(f"{k}: the bytes differ ({int(np.count_nonzero(x != y))} of {x.size})")
    fa, fb = model_fields(config_of(fixture)), model_fields(config_of(exported))
    for k in fa:
        if fa[k] != fb[k]:
            raise Fail(f"config.json: {k} is {fa[k]!r} in the fixture, {fb[k]!r} exported")
    print(f"{len(a)} tensors equal bit for bit; config.json's {len(fa)} model fields agree")


# ---- header ---------------------------------------------------------------------------------

def cmd_header(model, folder):
    cfg = model_fields(config_of(folder))
    h = np.fromfile(model, "<i4", count=256)
    f = np.fromfile(model, "<i4", count=256).view("<f4")
    V = cfg["vocab_size"]
    Vp = (V + 127) // 128 * 128
    if cfg["architecture"] == "GPT2LMHeadModel":
        want = {0: 20240326, 1: 3, 2: cfg["n_positions"], 3: V, 4: cfg["n_layer"], 5: cfg["n_head"], 6: cfg["n_embd"],
                7: Vp}
        C, L = cfg["n_embd"], cfg["n_layer"]
        P = Vp * C + cfg["n_positions"] * C + L * (12 * C * C + 13 * C) + 2 * C
        reals = {}
    else:
        C, L, F, NH, KVH = (cfg[k] for k in ("hidden_size", "num_hidden_layers", "intermediate_size",
                                             "num_attention_heads", "num_key_value_heads"))
        rope = cfg["rope"]
        scaled = rope[0] == "llama3"
        want = {0: 20240803, 1: 3, 2: cfg["max_position_embeddings"], 3: V, 4: L, 5: NH, 6: KVH, 7: C,
                11: int(cfg["rope_theta"]), 12: int(scaled), 16: 1, 17: Vp, 18: F,
                19: int(cfg["tie_word_embeddings"]), 20: int(rope[4]) if scaled else None}
        reals = {21: cfg["rms_norm_eps"], 22: cfg["rope_theta"], 23: rope[1] if scaled else 0.0}
        if scaled:
            reals.update({24: rope[2], 25: rope[3]})
        hs = C // NH
        P = Vp * C * (1 if cfg["tie_word_embeddings"] else 2) + L * (C * (C + 2 * KVH * hs) + C * C + 3 * C * F + 2 * C) + C
    for i, v in want.items():
        if v is not None and h[i] != v:
            raise Fail(f"header [{i}] is {h[i]}, config.json makes it {v}")
    for i, v in reals.items():
        if f[i] != np.float32(v):
            raise Fail(f"header [{i}] is {f[i]!r} (float32 bits), config.json makes it {v!r}")
    if os.path.getsize(model) != 1024 + 4 * P:
        raise Fail(f"{model} has {os.path.getsize(model)} bytes, {P} parameters need {1024 + 4 * P}")
    print(f"header and size ({P} parameters) as config.json says")


# ---- variants -------------------------------------------------------------------------------

def to_bfloat16(a):
    """Each float32 rounded to the nearest bfloat16 (ties to even), kept as float32."""
    bits = np.ascontiguousarray(a, "<f4").view("<u4").astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype("<u4").view("<f4").reshape(a.shape)


def cmd_variant(kind, src, *dst):
    cfg, t = config_of(src), float_tensors(src)
    if kind == "gpt2-hub":
        # as openai-community/gpt2's model.safetensors: saved from the base model (no
        # "transformer."), with each layer's causal-mask buffer attn.bias (1, 1, maxT, maxT)
        out = {k[len("transformer."):]: v for k, v in t.items()}
        n = cfg["n_positions"]
        for l in range(cfg["n_layer"]):
            out[f"h.{l}.attn.bias"] = np.tril(np.ones((n, n), "<f4"))[None, None]
        write_folder(dst[0], cfg, out)
    elif kind in ("bf16", "f16"):
        # the same values stored as float32 (dst[0]) and as bfloat16 or float16 (dst[1])
        rounded = {k: (to_bfloat16(v) if kind == "bf16" else v.astype("<f2").astype("<f4")) for k, v in t.items()}
        write_folder(dst[0], cfg, rounded)
        write_folder(dst[1], cfg, rounded, dtype="BF16" if kind == "bf16" else "F16", shards=2)
    elif kind == "llama-tied":
        # a tied Llama whose vocabulary needs padding (V = 200: Vp = 256), without RoPE scaling,
        # config.json in transformers 4's spelling
        V = 200
        out = {k: v for k, v in t.items() if k != "lm_head.weight"}
        out["model.embed_tokens.weight"] = t["model.embed_tokens.weight"][:V]
        theta = (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta"))
        cfg = {k: v for k, v in cfg.items() if k != "rope_parameters"}
        cfg.update(vocab_size=V, tie_word_embeddings=True, rope_theta=theta, rope_scaling=None)
        write_folder(dst[0], cfg, out)
    elif kind == "drop":
        # without the tensor named in dst[1]
        write_folder(dst[0], cfg, {k: v for k, v in t.items() if k != dst[1]})
    elif kind == "nan":
        # one NaN in the tensor named in dst[1]
        t[dst[1]] = t[dst[1]].copy()
        t[dst[1]].flat[3] = np.nan
        write_folder(dst[0], cfg, t)
    elif kind == "config":
        # config.json edited: KEY=JSON ... (KEY=- removes it)
        shutil.copytree(src, dst[0])
        for edit in dst[1:]:
            key, value = edit.split("=", 1)
            if value == "-":
                cfg.pop(key, None)
            else:
                cfg[key] = json.loads(value)
        with open(os.path.join(dst[0], "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
    else:
        raise Fail(f"no variant {kind}")


# ---- limits ---------------------------------------------------------------------------------

def cmd_limits():
    text = open(os.path.join(ROOT, "host", "checkpoint.h")).read()
    table = text[text.index("inline const ShapeField SHAPE_FIELDS[]"):]
    table = table[:table.index("};")]
    ours = {}
    for name, limit in re.findall(r'\{"(\w+)", -?\d+, -?\d+, "[^"]*", &ModelConfig::\w+, ([^}]+)\}', table):
        if not re.fullmatch(r"[0-9 <]+", limit):
            raise Fail(f"SHAPE_FIELDS: {name}'s limit {limit!r} is not an integer or a shift")
        ours[name] = eval(limit, {"__builtins__": {}})  # "1 << 20", "1024"
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import hf_convert  # noqa: E402
    if ours != hf_convert.LIMITS:
        raise Fail(f"host/checkpoint.h's SHAPE_FIELDS limits {ours} are not hf_convert.py's {hf_convert.LIMITS}")
    if len(ours) < 9:
        raise Fail(f"read only {len(ours)} fields of SHAPE_FIELDS: {ours}")
    print(f"the {len(ours)} limits agree: " + ", ".join(f"{k} {v:,}" for k, v in ours.items()))


# ---- transformers -----------------------------------------------------------------------------

def read_golden(path):
    data = open(path, "rb").read()
    h = np.frombuffer(data[:1024], "<i4")
    B, T, V = int(h[2]), int(h[3]), int(h[5])
    at = 1024 + 32 + (32 if h[1] == 2 else 0)
    inputs = np.frombuffer(data[at:at + 4 * B * T], "<i4").reshape(B, T)
    at += 8 * B * T
    logits = np.frombuffer(data[at:at + 4 * B * T * V], "<f4").reshape(B, T, V)
    return inputs, logits


def cmd_transformers(fixture, exported, golden):
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        print(f"{e.name or 'torch or transformers'} is not installed")
        sys.exit(77)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(1)
    inputs, ref = read_golden(golden)
    out = []
    for folder in (fixture, exported):
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
        with torch.no_grad():
            out.append(model(input_ids=torch.tensor(inputs, dtype=torch.long)).logits.numpy())
    if not np.array_equal(out[0], out[1]):
        raise Fail(f"the exported folder's logits differ from the fixture's: max |diff| "
                   f"{float(np.abs(out[0] - out[1]).max()):.3e}")
    err = float(np.linalg.norm(out[1].astype(np.float64) - ref) / np.linalg.norm(ref.astype(np.float64)))
    # 1e-5: transformers' float32 model against the golden logits of its float64 one (~1e-6)
    if not err <= 1e-5:
        raise Fail(f"the exported folder's logits are {err:.3e} from the golden file's (normalised; 1e-5 allowed)")
    print(f"transformers {transformers.__version__} loads it ({type(model).__name__}): its logits are the fixture "
          f"folder's bit for bit, {err:.1e} from the golden file's")


def main():
    cmds = {"same": cmd_same, "header": cmd_header, "variant": cmd_variant, "limits": cmd_limits,
            "transformers": cmd_transformers}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        print(__doc__)
        return 2
    try:
        cmds[sys.argv[1]](*sys.argv[2:])
    except Fail as e:
        print(f"{sys.argv[1]}: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
