#!/usr/bin/env python3
"""Hugging Face checkpoints in and out: a model folder <-> this project's model file.

  python3 scripts/hf_convert.py import HF_DIR MODEL.bin [--force]
  python3 scripts/hf_convert.py export MODEL.bin HF_DIR [--force]

import reads a local Hugging Face model folder (config.json, and model.safetensors or the
shards model-0000K-of-0000N.safetensors that model.safetensors.index.json lists; float32,
bfloat16, float16 or float64 weights) of a GPT2LMHeadModel or a LlamaForCausalLM, and writes
the model file the trainers load with -e (--load): GPT-2 in llm.c's float32 format, Llama in
the project's Llama-3 format (docs/formats.md). Nothing is downloaded: download the folder
first (docs/converting.md).

export writes a folder that transformers loads (AutoModelForCausalLM.from_pretrained):
config.json and model.safetensors (float32). Into an existing folder (--force) only those two
are replaced, and any other weights there (an index and its shards) removed; a tokenizer's
files are kept.

The layouts (docs/converting.md has the table):
  GPT-2  transformers' Conv1D keeps its weights as (in, out); the project's are (out, in), so
         c_attn, c_proj, c_fc and mlp.c_proj are transposed. The head is wte (tied).
  Llama  qkvw = [q_proj; k_proj; v_proj] and fcw = [gate_proj; up_proj] per layer. Hugging
         Face holds q's and k's rows in its rotate_half order (per head, rows i and i + hs/2 are
         rotated together); the trainers rotate Meta's interleaved pairs (2i, 2i+1): import
         permutes the rows back to Meta's order, export permutes them again.
  Both   the vocabulary is padded with zero rows to Vp, V rounded up to a multiple of 128, as a
         random init is (50,257 -> 50,304; Llama-3's 128,256 needs none); export drops them.

Shapes beyond what the trainers read are refused with the limit named (the limits of
SHAPE_FIELDS and shape_problem() in host/checkpoint.h, mirrored in LIMITS below). Every file
is written under a temporary name and renamed when complete; nothing existing is replaced
without --force. Errors: one line on stderr, exit status 1 (2 for a wrong command line). On
success one line: the family and shape, the parameter count, and the file or folder written.

Needs numpy and safetensors (pip install numpy safetensors); not torch.
"""
import argparse
import json
import os
import re
import sys
import tempfile

PROG = "hf_convert"

# ---- the project's model file (host/checkpoint.h) -----------------------------------------
MODEL_MAGIC, LLAMA_MAGIC, MODEL_VERSION_FP32, LLAMA_EXTENSION = 20240326, 20240803, 3, 1
# The largest value the model-file reader accepts for each shape field (SHAPE_FIELDS in
# host/checkpoint.h; test/tools/hf_convert.sh checks that the two agree).
LIMITS = {"maxT": 1 << 20, "V": 1 << 24, "L": 1024, "NH": 1 << 16, "C": 1 << 16, "Vp": 1 << 24,
          "KVH": 1 << 16, "F": 1 << 20, "rope_original_T": 1 << 24}
# Where each field sits in the header: GPT-2's and Llama's (None: the family has no such field)
HEADER_INDEX = {"maxT": (2, 2), "V": (3, 3), "L": (4, 4), "NH": (5, 5), "C": (6, 7), "Vp": (7, 17),
                "KVH": (None, 6), "F": (None, 18), "rope_original_T": (None, 20)}
REAL_INDEX = {"norm_eps": 21, "rope_theta": 22, "rope_factor": 23, "rope_low": 24, "rope_high": 25}
PARAM_NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
               "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb", "wout"]


class Failure(Exception):
    """One line for the user; exit status 1."""


def die(message, status=1):
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(status)


def commas(n):
    return f"{n:,}"


def padded_vocab(V):
    """host/model.h: a vocabulary not given padded is rounded up to a multiple of 128."""
    return (V + 127) // 128 * 128


class Shape:
    """ModelConfig's fields (host/checkpoint.h)."""

    def __init__(self, family, **fields):
        self.family = family  # "gpt2" or "llama3"
        self.maxT = self.V = self.Vp = self.L = self.NH = self.C = 0
        self.KVH = self.F = 0
        self.tied = 1
        self.norm_eps, self.rope_theta = 1e-5, 500000.0
        self.rope_factor, self.rope_low, self.rope_high, self.rope_original_T = 0.0, 1.0, 4.0, 8192
        for k, v in fields.items():
            setattr(self, k, v)

    @property
    def llama(self):
        return self.family == "llama3"

    @property
    def hs(self):
        return self.C // self.NH

    @property
    def kvh(self):
        return self.KVH if self.llama else self.NH

    @property
    def qkv(self):
        return self.C + 2 * self.kvh * self.hs

    @property
    def hidden(self):
        return self.F if self.llama else 4 * self.C

    @property
    def fc(self):
        return 2 * self.F if self.llama else 4 * self.C

    @property
    def tied_head(self):
        return not self.llama or self.tied == 1

    def param_shapes(self):
        """The 17 tensors of ModelConfig::param_sizes(), as shapes; None where the family has none."""
        L, C, g = self.L, self.C, not self.llama
        return [(self.Vp, C), (self.maxT, C) if g else None, (L, C), (L, C) if g else None,
                (L, self.qkv, C), (L, self.qkv) if g else None, (L, C, C), (L, C) if g else None,
                (L, C), (L, C) if g else None, (L, self.fc, C), (L, self.fc) if g else None,
                (L, C, self.hidden), (L, C) if g else None, (C,), (C,) if g else None,
                None if self.tied_head else (self.Vp, C)]

    def num_params(self):
        n = 0
        for s in self.param_shapes():
            if s is not None:
                k = 1
                for d in s:
                    k *= d
                n += k
        return n

    def fields(self):
        names = ["maxT", "V", "L", "NH", "C", "Vp"] + (["KVH", "F", "rope_original_T"] if self.llama else [])
        return [(n, getattr(self, n)) for n in names]

    def problem(self, source):
        """shape_problem() of host/checkpoint.h, with the config's own names for its fields
        (source: {field: "config.json's name"}); None when the trainers can read the shape."""
        def name(f):
            return source.get(f, f)
        for f, v in self.fields():
            if v < 1:
                return f"{name(f)} = {v} is not positive"
            if v > LIMITS[f]:
                return (f"{name(f)} = {commas(v)} is more than the trainers support: the model file's {f} is at most "
                        f"{commas(LIMITS[f])} (host/checkpoint.h)")
        if self.C % self.NH:
            return f"{name('C')} = {self.C} is not divisible by {name('NH')} = {self.NH}"
        if not self.llama:
            return None
        if self.NH % self.KVH:
            return (f"{name('NH')} = {self.NH} is not a multiple of {name('KVH')} = {self.KVH} (each K/V head serves "
                    f"a whole group of query heads)")
        if self.hs % 2:
            return f"the head size {self.hs} is odd: RoPE rotates pairs of channels"
        if not 0 < self.norm_eps < 1:
            return f"{name('norm_eps')} = {self.norm_eps:g} is not in (0, 1)"
        if not self.rope_theta > 1:
            return f"{name('rope_theta')} = {self.rope_theta:g} is not above 1"
        if self.rope_factor > 0 and not (self.rope_factor >= 1 and 0 < self.rope_low < self.rope_high):
            return (f"RoPE scaling needs factor >= 1 and 0 < low_freq_factor < high_freq_factor (factor "
                    f"{self.rope_factor:g}, low {self.rope_low:g}, high {self.rope_high:g})")
        return None

    def describe(self):
        """As ./train's "model:" line (describe_model in host/model.h) says it."""
        if not self.llama:
            return f"gpt2 L={self.L} NH={self.NH} C={self.C} maxT={self.maxT} V={self.V} Vp={self.Vp}"
        rope = f"RoPE theta {self.rope_theta:g}"
        if self.rope_factor > 0:
            rope += (f" scaled (factor {self.rope_factor:g}, low {self.rope_low:g}, high {self.rope_high:g}, "
                     f"from {self.rope_original_T})")
        return (f"llama3 L={self.L} NH={self.NH} KVH={self.KVH} C={self.C} F={self.F} maxT={self.maxT} V={self.V} "
                f"Vp={self.Vp}, {rope}, {'tied' if self.tied else 'untied'} head")


def float_bits(x):
    return int(np.array([x], dtype="<f4").view("<i4")[0])


def bits_float(i):
    return float(np.array([i], dtype="<i4").view("<f4")[0])


def model_header(s):
    h = np.zeros(256, dtype="<i4")
    h[0], h[1] = (LLAMA_MAGIC if s.llama else MODEL_MAGIC), MODEL_VERSION_FP32
    for f, v in s.fields():
        h[HEADER_INDEX[f][1 if s.llama else 0]] = v
    if s.llama:
        # llm.c's fields ([11] rope_theta as an integer, [12] scaled or not), then the extension
        h[11], h[12], h[16], h[19] = int(np.float32(s.rope_theta)), int(s.rope_factor > 0), LLAMA_EXTENSION, s.tied
        for f, i in REAL_INDEX.items():
            h[i] = float_bits(getattr(s, f))
    return h


def read_model_file(path):
    """The header and the parameters (a read-only memory map, file order) of a model file,
    checked as read_model_header() does."""
    if not os.path.isfile(path):
        raise Failure(f"'{path}': no such model file")
    size = os.path.getsize(path)
    if size < 1024:
        raise Failure(f"'{path}' is too short to be a model file ({commas(size)} bytes)")
    h = np.fromfile(path, dtype="<i4", count=256)
    if h[0] not in (MODEL_MAGIC, LLAMA_MAGIC):
        raise Failure(f"'{path}' is not a model file (magic {h[0]}, expected {MODEL_MAGIC} for GPT-2 or "
                      f"{LLAMA_MAGIC} for Llama-3)")
    if h[1] != MODEL_VERSION_FP32:
        raise Failure(f"'{path}': model version {h[1]} is not supported (expected {MODEL_VERSION_FP32}, float32)")
    llama = h[0] == LLAMA_MAGIC
    if llama and h[16] != LLAMA_EXTENSION:
        raise Failure(f"'{path}' is llm.c's own Llama-3 file, which records too little to export (RoPE scaling "
                      f"as yes or no, no FFN width): load it in the trainer and export one of its checkpoints")
    s = Shape("llama3" if llama else "gpt2")
    for f in (["maxT", "V", "L", "NH", "C", "Vp"] + (["KVH", "F", "rope_original_T"] if llama else [])):
        setattr(s, f, int(h[HEADER_INDEX[f][1 if llama else 0]]))
    if llama:
        s.tied = int(h[19])
        for f, i in REAL_INDEX.items():
            setattr(s, f, bits_float(h[i]))
        if s.tied not in (0, 1):
            raise Failure(f"'{path}' has an impossible shape: tied = {s.tied} is neither 0 nor 1")
    problem = s.problem({})
    if problem is None and s.Vp < s.V:
        problem = f"Vp = {s.Vp} is smaller than V = {s.V}"
    if problem:
        raise Failure(f"'{path}' has an impossible shape: {problem}")
    expected = 1024 + 4 * s.num_params()
    if size != expected:
        raise Failure(f"'{path}' is truncated or damaged: its shape ({s.describe()}) needs {commas(expected)} bytes, "
                      f"the file has {commas(size)}")
    return s, np.memmap(path, dtype="<f4", mode="r", offset=1024, shape=(s.num_params(),))


# ---- safetensors, read ---------------------------------------------------------------------

DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "BF16": "<u2"}


class Weights:
    """The tensors of a Hugging Face folder: model.safetensors, or the shards its index lists.
    numpy has no bfloat16, so those tensors are read from the file's bytes (its header gives
    where) and widened exactly: a bfloat16 is a float32's upper 16 bits."""

    def __init__(self, folder):
        self.folder = folder
        single = os.path.join(folder, "model.safetensors")
        index = os.path.join(folder, "model.safetensors.index.json")
        if os.path.isfile(single):
            files = ["model.safetensors"]
            where = None
        elif os.path.isfile(index):
            try:
                with open(index, encoding="utf-8") as f:
                    where = json.load(f)["weight_map"]
                if not isinstance(where, dict) or not all(isinstance(v, str) for v in where.values()):
                    raise ValueError("weight_map is not a map of names to files")
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise Failure(f"'{index}' is not a safetensors index ({e})")
            files = sorted(set(where.values()))
            for name in files:
                if os.path.basename(name) != name or not os.path.isfile(os.path.join(folder, name)):
                    raise Failure(f"'{folder}': the shard {name} that model.safetensors.index.json lists is missing")
        else:
            other = [n for n in ("pytorch_model.bin", "model.bin", "tf_model.h5") if os.path.exists(os.path.join(folder, n))]
            raise Failure(f"'{folder}' has no model.safetensors (nor model.safetensors.index.json)"
                          + (f"; {other[0]} is not read: download the safetensors weights" if other else ""))
        self.entries = {}  # name -> (file, dtype, shape, byte offset, byte length)
        for name in files:
            path = os.path.join(folder, name)
            for key, entry in self._read_header(path).items():
                if key in self.entries:
                    raise Failure(f"'{folder}': tensor {key} is in both {self.entries[key][0]} and {name}")
                if where is not None and where.get(key) != name:
                    raise Failure(f"'{path}' holds {key}, which model.safetensors.index.json places "
                                  f"{'in ' + where[key] if key in where else 'nowhere'}")
                self.entries[key] = (name,) + entry
        if where is not None:
            for key in where:
                if key not in self.entries:
                    raise Failure(f"'{os.path.join(folder, where[key])}' lacks {key}, which model.safetensors.index.json "
                                  f"places there")
        self.used = set()

    @staticmethod
    def _read_header(path):
        """The safetensors header: tensor -> (dtype, shape, offset of its bytes, their count),
        checked against the file's size (safe_open checks the rest)."""
        try:
            with safe_open(path, framework="np") as f:
                keys = list(f.keys())
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(n))
        except Exception as e:  # safetensors raises its own kinds for a damaged file
            raise Failure(f"'{path}' is not a safetensors file ({str(e).splitlines()[0] if str(e) else type(e).__name__})")
        out = {}
        for key in keys:
            try:
                e = header[key]
                begin, end = (int(x) for x in e["data_offsets"])
                entry = (str(e["dtype"]), tuple(int(d) for d in e["shape"]), 8 + n + begin, end - begin)
            except (KeyError, TypeError, ValueError):
                raise Failure(f"'{path}': the header's entry for {key} is damaged")
            if 8 + n + end > size:
                raise Failure(f"'{path}' is truncated: tensor {key} ends past the end of the file")
            out[key] = entry
        return out

    def has(self, key):
        return key in self.entries

    def names(self):
        return set(self.entries)

    def get(self, key, shape):
        """Tensor key as float32, of the shape config.json implies."""
        if key not in self.entries:
            raise Failure(f"'{self.folder}' has no tensor {key}, which config.json's model needs")
        file, dtype, have, offset, nbytes = self.entries[key]
        path = os.path.join(self.folder, file)
        if have != tuple(shape):
            raise Failure(f"'{path}': tensor {key} has shape {list(have)}, config.json's model needs {list(shape)}")
        if dtype not in DTYPES:
            raise Failure(f"'{path}': tensor {key} is {dtype}; only F32, BF16, F16 and F64 weights are read")
        count = 1
        for d in have:
            count *= d
        raw = np.fromfile(path, dtype=DTYPES[dtype], count=count, offset=offset)
        if raw.size != count or raw.nbytes != nbytes:
            raise Failure(f"'{path}': tensor {key} is truncated or damaged")
        a = (raw.astype("<u4") << 16).view("<f4") if dtype == "BF16" else raw.astype("<f4")
        bad = int(np.count_nonzero(~np.isfinite(a)))
        if bad:
            beyond = " (float64 values beyond float32's range)" if dtype == "F64" and np.isfinite(raw).all() else ""
            raise Failure(f"'{path}': tensor {key} holds {commas(bad)} non-finite value{'s' if bad > 1 else ''}{beyond}")
        self.used.add(key)
        return a.reshape(have)


# ---- config.json ---------------------------------------------------------------------------

def read_config(folder):
    path = os.path.join(folder, "config.json")
    if not os.path.isdir(folder):
        raise Failure(f"'{folder}' is not a folder")
    if not os.path.isfile(path):
        raise Failure(f"'{folder}' has no config.json: not a Hugging Face model folder")
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise Failure(f"'{path}' is not JSON ({e})")
    if not isinstance(cfg, dict):
        raise Failure(f"'{path}' is not a JSON object")
    return path, cfg


def whole(cfg, path, key, default=None):
    v = cfg.get(key)
    if v is None:
        v = default
    if v is None:
        raise Failure(f"'{path}' has no {key}")
    if isinstance(v, bool) or not isinstance(v, int):
        raise Failure(f"'{path}': {key} is {json.dumps(v)}, not a whole number")
    return v


def real(cfg, path, key, default):
    v = cfg.get(key)
    if v is None:
        v = default
    if v is None:
        raise Failure(f"'{path}' has no {key}")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Failure(f"'{path}': {key} is {json.dumps(v)}, not a number")
    return float(v)


def flag(cfg, path, key, default):
    v = cfg.get(key, default)
    if v is None:
        v = default
    if not isinstance(v, bool):
        raise Failure(f"'{path}': {key} is {json.dumps(v)}, not true or false")
    return v


def unsupported(path, what):
    raise Failure(f"'{path}': {what}, which the trainers' model does not have")


GPT2_NAMES = {"maxT": "n_positions", "V": "vocab_size", "L": "n_layer", "NH": "n_head", "C": "n_embd"}
LLAMA_NAMES = {"maxT": "max_position_embeddings", "V": "vocab_size", "L": "num_hidden_layers",
               "NH": "num_attention_heads", "C": "hidden_size", "KVH": "num_key_value_heads",
               "F": "intermediate_size", "norm_eps": "rms_norm_eps", "rope_theta": "rope_theta",
               "rope_original_T": "rope_scaling's original_max_position_embeddings"}


def gpt2_shape(cfg, path):
    n_positions = cfg.get("n_positions", cfg.get("n_ctx"))
    s = Shape("gpt2", maxT=whole({"n_positions": n_positions}, path, "n_positions"), V=whole(cfg, path, "vocab_size"),
              L=whole(cfg, path, "n_layer"), NH=whole(cfg, path, "n_head"), C=whole(cfg, path, "n_embd"))
    act = cfg.get("activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh"):
        unsupported(path, f"activation_function is {json.dumps(act)} (the trainers' GELU is the tanh approximation, "
                          f"gelu_new)")
    n_inner = cfg.get("n_inner")
    if n_inner is not None and n_inner != 4 * s.C:
        unsupported(path, f"n_inner is {n_inner}, not 4 * n_embd = {4 * s.C}")
    eps = real(cfg, path, "layer_norm_epsilon", 1e-5)
    if np.float32(eps) != np.float32(1e-5):
        unsupported(path, f"layer_norm_epsilon is {eps:g} (GPT-2's LayerNorm here uses 1e-5)")
    if not flag(cfg, path, "scale_attn_weights", True):
        unsupported(path, "scale_attn_weights is false (attention without the 1/sqrt(head size) scale)")
    if flag(cfg, path, "scale_attn_by_inverse_layer_idx", False):
        unsupported(path, "scale_attn_by_inverse_layer_idx is true")
    if flag(cfg, path, "add_cross_attention", False):
        unsupported(path, "add_cross_attention is true")
    if not flag(cfg, path, "tie_word_embeddings", True):
        unsupported(path, "tie_word_embeddings is false (an output head of its own: the GPT-2 family's is wte)")
    return s, GPT2_NAMES


def llama_rope(cfg, path):
    """rope_theta and the scaling, from transformers 4's rope_theta and rope_scaling or 5's
    rope_parameters: (theta, factor, low, high, original length); factor 0 = none."""
    params = cfg.get("rope_parameters")
    scaling = cfg.get("rope_scaling")
    rope = params if isinstance(params, dict) else scaling if isinstance(scaling, dict) else {}
    for key, v in (("rope_parameters", params), ("rope_scaling", scaling)):
        if v is not None and not isinstance(v, dict):
            raise Failure(f"'{path}': {key} is {json.dumps(v)}, not an object")
    theta = real(rope if "rope_theta" in rope else cfg, path, "rope_theta", 10000.0)  # LlamaConfig's default
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind in ("default", None):
        return theta, 0.0, 1.0, 4.0, 8192
    if kind != "llama3":
        unsupported(path, f"RoPE scaling of type {json.dumps(kind)} (only Llama-3.1's, rope_type llama3, is "
                          f"computed here)")
    return (theta, real(rope, path, "factor", None), real(rope, path, "low_freq_factor", None),
            real(rope, path, "high_freq_factor", None), whole(rope, path, "original_max_position_embeddings"))


def llama_shape(cfg, path):
    s = Shape("llama3", maxT=whole(cfg, path, "max_position_embeddings"), V=whole(cfg, path, "vocab_size"),
              L=whole(cfg, path, "num_hidden_layers"), NH=whole(cfg, path, "num_attention_heads"),
              C=whole(cfg, path, "hidden_size"), F=whole(cfg, path, "intermediate_size"))
    s.KVH = whole(cfg, path, "num_key_value_heads", s.NH)
    s.tied = int(flag(cfg, path, "tie_word_embeddings", False))
    s.norm_eps = float(np.float32(real(cfg, path, "rms_norm_eps", 1e-6)))
    theta, factor, low, high, original = llama_rope(cfg, path)
    s.rope_theta, s.rope_factor, s.rope_low, s.rope_high = (float(np.float32(x)) for x in (theta, factor, low, high))
    s.rope_original_T = original
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        unsupported(path, f"hidden_act is {json.dumps(act)} (the trainers' SwiGLU gates with silu)")
    for key in ("attention_bias", "mlp_bias"):
        if flag(cfg, path, key, False):
            unsupported(path, f"{key} is true (biases)")
    head_dim = cfg.get("head_dim")
    if head_dim is not None and s.NH > 0 and head_dim != s.C // s.NH:
        unsupported(path, f"head_dim is {head_dim}, not hidden_size / num_attention_heads = {s.C // max(s.NH, 1)}")
    return s, LLAMA_NAMES


ARCHITECTURES = {"GPT2LMHeadModel": gpt2_shape, "LlamaForCausalLM": llama_shape}


# ---- the layouts ---------------------------------------------------------------------------

def hf_to_meta(w, heads):
    """Per head, Hugging Face's rows i and i + hs/2 (rotate_half's halves) become the
    interleaved pair (2i, 2i+1) that the trainers' RoPE rotates."""
    rows, cols = w.shape
    return w.reshape(heads, 2, rows // heads // 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def meta_to_hf(w, heads):
    """The inverse: per head, the pair (2i, 2i+1) becomes rows i and i + hs/2."""
    rows, cols = w.shape
    return w.reshape(heads, rows // heads // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def pad_rows(a, Vp):
    if a.shape[0] == Vp:
        return a
    return np.concatenate([a, np.zeros((Vp - a.shape[0],) + a.shape[1:], dtype=a.dtype)])


def gpt2_prefix(w):
    """transformers' save_pretrained writes "transformer.wte.weight"; the hub's openai-community/gpt2
    was saved from the base model: "wte.weight"."""
    return "transformer." if w.has("transformer.wte.weight") or not w.has("wte.weight") else ""


def gpt2_tensors(s, w):
    """The project's 16 tensors, each as a list of per-layer blocks (file order), read lazily."""
    p = gpt2_prefix(w)
    C, L = s.C, s.L

    def layer(name, shape, transpose=False):
        def blocks():
            for l in range(L):
                a = w.get(f"{p}h.{l}.{name}", shape)
                yield np.ascontiguousarray(a.T) if transpose else a
        return blocks

    def one(name, shape, pad=None):
        return lambda: iter([pad_rows(w.get(p + name, shape), pad) if pad else w.get(p + name, shape)])

    return [one("wte.weight", (s.V, C), s.Vp), one("wpe.weight", (s.maxT, C)),
            layer("ln_1.weight", (C,)), layer("ln_1.bias", (C,)),
            layer("attn.c_attn.weight", (C, 3 * C), True), layer("attn.c_attn.bias", (3 * C,)),
            layer("attn.c_proj.weight", (C, C), True), layer("attn.c_proj.bias", (C,)),
            layer("ln_2.weight", (C,)), layer("ln_2.bias", (C,)),
            layer("mlp.c_fc.weight", (C, 4 * C), True), layer("mlp.c_fc.bias", (4 * C,)),
            layer("mlp.c_proj.weight", (4 * C, C), True), layer("mlp.c_proj.bias", (C,)),
            one("ln_f.weight", (C,)), one("ln_f.bias", (C,)), None]


def llama_tensors(s, w):
    C, L, F, hs = s.C, s.L, s.F, s.hs

    def get(l, name, shape):
        return w.get(f"model.layers.{l}.{name}.weight", shape)

    def per_layer(fn):
        return lambda: (fn(l) for l in range(L))

    def qkv(l):
        return np.concatenate([hf_to_meta(get(l, "self_attn.q_proj", (C, C)), s.NH),
                               hf_to_meta(get(l, "self_attn.k_proj", (s.KVH * hs, C)), s.KVH),
                               get(l, "self_attn.v_proj", (s.KVH * hs, C))])

    def fc(l):
        return np.concatenate([get(l, "mlp.gate_proj", (F, C)), get(l, "mlp.up_proj", (F, C))])

    head = None if s.tied else (lambda: iter([pad_rows(w.get("lm_head.weight", (s.V, C)), s.Vp)]))
    return [lambda: iter([pad_rows(w.get("model.embed_tokens.weight", (s.V, C)), s.Vp)]), None,
            per_layer(lambda l: get(l, "input_layernorm", (C,))), None,
            per_layer(qkv), None, per_layer(lambda l: get(l, "self_attn.o_proj", (C, C))), None,
            per_layer(lambda l: get(l, "post_attention_layernorm", (C,))), None,
            per_layer(fc), None, per_layer(lambda l: get(l, "mlp.down_proj", (C, F))), None,
            lambda: iter([w.get("model.norm.weight", (C,))]), None, head]


# tensors a folder may hold that are no parameters: GPT-2's causal-mask buffers, an old Llama's
# RoPE frequencies (recomputed from the config)
IGNORED = re.compile(r"(^|\.)(attn\.bias|attn\.masked_bias|rotary_emb\.inv_freq)$")


def check_leftovers(s, w, folder):
    """Every tensor of the folder must have had a place: one left over means config.json
    describes another model than the weights (a bias it does not mention, a layer too many)."""
    head = "lm_head.weight"
    left = sorted(k for k in w.names() - w.used if not IGNORED.search(k) and k != head)
    if left:
        raise Failure(f"'{folder}' holds {left[0]}{f' (and {len(left) - 1} more)' if len(left) > 1 else ''}, "
                      f"which config.json's model has no place for")
    if w.has(head) and s.tied_head:  # some tied folders store the head too: it must be wte
        emb = "model.embed_tokens.weight" if s.llama else gpt2_prefix(w) + "wte.weight"
        if not np.array_equal(w.get(head, (s.V, s.C)), w.get(emb, (s.V, s.C))):
            raise Failure(f"'{folder}': config.json ties the output head to {emb}, but lm_head.weight differs "
                          f"from it")


# ---- writing -------------------------------------------------------------------------------

def fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


class AtomicFile:
    """A file written under a temporary name in the target's folder, flushed and renamed to the
    target when complete; removed instead when anything goes wrong (an interrupt included)."""

    def __init__(self, target):
        self.target = target
        folder = os.path.dirname(os.path.abspath(target))
        fd, self.tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(target) + ".", suffix=".tmp")
        self.f = os.fdopen(fd, "wb")

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is not None:
            self._discard()
            return False
        try:
            self.f.flush()
            os.fsync(self.f.fileno())
            self.f.close()
            os.chmod(self.tmp, 0o644 & ~current_umask())
            os.replace(self.tmp, self.target)
        except BaseException:
            self._discard()
            raise
        fsync_dir(os.path.dirname(os.path.abspath(self.target)))
        return False

    def _discard(self):
        self.f.close()
        try:
            os.remove(self.tmp)
        except OSError:
            pass


def current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_parent(path):
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise Failure(f"'{parent}' does not exist (the folder to write '{os.path.basename(path)}' in)")


def check_target(path, force, what):
    if os.path.isdir(path) and what == "file":
        raise Failure(f"'{path}' is a folder, not a model file name")
    if os.path.lexists(path) and not force:
        raise Failure(f"'{path}' exists; pass --force to replace it")
    check_parent(path)


def do_import(folder, out, force):
    path, cfg = read_config(folder)
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not archs:
        raise Failure(f"'{path}' names no architecture (expected {' or '.join(ARCHITECTURES)})")
    arch = archs[0]
    if arch not in ARCHITECTURES:
        raise Failure(f"'{path}': architecture {arch} is not supported (only {' and '.join(ARCHITECTURES)})")
    s, names = ARCHITECTURES[arch](cfg, path)
    s.Vp = padded_vocab(s.V) if 0 < s.V <= LIMITS["V"] else s.V
    problem = s.problem(names)
    if problem:
        raise Failure(f"'{path}': {problem}")
    check_target(out, force, "file")
    w = Weights(folder)
    tensors = (llama_tensors if s.llama else gpt2_tensors)(s, w)
    shapes = s.param_shapes()
    with AtomicFile(out) as f:
        f.f.write(model_header(s).tobytes())
        for name, shape, blocks in zip(PARAM_NAMES, shapes, tensors):
            assert (shape is None) == (blocks is None), name
            if blocks is None:
                continue
            written = 0
            for block in blocks():
                f.f.write(np.ascontiguousarray(block, dtype="<f4").tobytes())
                written += block.size
            assert written == int(np.prod(shape)), (name, written, shape)
        check_leftovers(s, w, folder)
    ours = s.num_params()
    hf_params = ours - (s.Vp - s.V) * s.C * (1 if s.tied_head else 2)  # transformers' count: V rows
    extra = f" ({commas(hf_params)} in the folder; the rest are the rows padding V to Vp)" if hf_params != ours else ""
    print(f"imported {folder} -> {out}: {s.describe()}, {commas(ours)} parameters{extra}")


def decimal(x):
    """A float32 field as the shortest decimal that rounds back to it (1e-05, not 9.99999974e-06)."""
    return float(str(np.float32(x)))


def hf_config(s):
    """config.json for transformers: the fields of its GPT2Config or LlamaConfig that this shape
    sets, in transformers 4's spelling, which transformers 5 reads too. The model file does not
    know its tokenizer: the begin and end-of-text ids are GPT-2's (50256) for V = 50,257 and
    Llama-3's base models' (128000, 128001) for V = 128,256, else none."""
    if not s.llama:
        return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": s.V,
                "n_positions": s.maxT, "n_embd": s.C, "n_layer": s.L, "n_head": s.NH, "n_inner": None,
                "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.0,
                "embd_pdrop": 0.0, "attn_pdrop": 0.0, "scale_attn_weights": True,
                "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
                "tie_word_embeddings": True, "bos_token_id": 50256 if s.V == 50257 else None,
                "eos_token_id": 50256 if s.V == 50257 else None, "torch_dtype": "float32"}
    scaling = None
    if s.rope_factor > 0:
        scaling = {"rope_type": "llama3", "factor": decimal(s.rope_factor), "low_freq_factor": decimal(s.rope_low),
                   "high_freq_factor": decimal(s.rope_high), "original_max_position_embeddings": s.rope_original_T}
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": s.V,
            "max_position_embeddings": s.maxT, "hidden_size": s.C, "intermediate_size": s.F,
            "num_hidden_layers": s.L, "num_attention_heads": s.NH, "num_key_value_heads": s.KVH,
            "head_dim": s.hs, "hidden_act": "silu", "rms_norm_eps": decimal(s.norm_eps), "rope_theta": decimal(s.rope_theta),
            "rope_scaling": scaling, "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0,
            "tie_word_embeddings": bool(s.tied), "bos_token_id": 128000 if s.V == 128256 else None,
            "eos_token_id": 128001 if s.V == 128256 else None, "torch_dtype": "float32"}


def hf_state(s, params):
    """The model file's tensors (a flat float32 array, file order) as transformers' state dict."""
    views, at = {}, 0
    for name, shape in zip(PARAM_NAMES, s.param_shapes()):
        if shape is None:
            continue
        n = int(np.prod(shape))
        views[name] = params[at:at + n].reshape(shape)
        at += n
    V, C = s.V, s.C
    out = {}
    if not s.llama:
        p = "transformer."
        out[p + "wte.weight"] = views["wte"][:V]
        out[p + "wpe.weight"] = views["wpe"]
        for l in range(s.L):
            h = f"{p}h.{l}."
            for ours, theirs, t in (("ln1w", "ln_1.weight", 0), ("ln1b", "ln_1.bias", 0),
                                    ("qkvw", "attn.c_attn.weight", 1), ("qkvb", "attn.c_attn.bias", 0),
                                    ("attprojw", "attn.c_proj.weight", 1), ("attprojb", "attn.c_proj.bias", 0),
                                    ("ln2w", "ln_2.weight", 0), ("ln2b", "ln_2.bias", 0),
                                    ("fcw", "mlp.c_fc.weight", 1), ("fcb", "mlp.c_fc.bias", 0),
                                    ("fcprojw", "mlp.c_proj.weight", 1), ("fcprojb", "mlp.c_proj.bias", 0)):
                out[h + theirs] = views[ours][l].T if t else views[ours][l]  # Conv1D: (in, out)
        out[p + "ln_f.weight"], out[p + "ln_f.bias"] = views["lnfw"], views["lnfb"]
    else:
        q, kv = s.NH * s.hs, s.KVH * s.hs
        out["model.embed_tokens.weight"] = views["wte"][:V]
        for l in range(s.L):
            h = f"model.layers.{l}."
            qkv = views["qkvw"][l]
            out[h + "input_layernorm.weight"] = views["ln1w"][l]
            out[h + "self_attn.q_proj.weight"] = meta_to_hf(qkv[:q], s.NH)
            out[h + "self_attn.k_proj.weight"] = meta_to_hf(qkv[q:q + kv], s.KVH)
            out[h + "self_attn.v_proj.weight"] = qkv[q + kv:]
            out[h + "self_attn.o_proj.weight"] = views["attprojw"][l]
            out[h + "post_attention_layernorm.weight"] = views["ln2w"][l]
            out[h + "mlp.gate_proj.weight"] = views["fcw"][l][:s.F]
            out[h + "mlp.up_proj.weight"] = views["fcw"][l][s.F:]
            out[h + "mlp.down_proj.weight"] = views["fcprojw"][l]
        out["model.norm.weight"] = views["lnfw"]
        if not s.tied:
            out["lm_head.weight"] = views["wout"][:V]
    return out  # views into params (the Conv1D ones transposed): each is copied when written


def write_safetensors(f, path, state):
    """state (name -> float32 array) as a safetensors file, one tensor at a time, so that no
    more than one tensor is copied in memory: the 8-byte length of the JSON header, the header
    (each tensor's dtype, shape and byte range; padded to 8 bytes), then the tensors' bytes in
    the header's order. safetensors itself then reads the header back (check_safetensors)."""
    names = sorted(state)
    header, at = {"__metadata__": {"format": "pt"}}, 0
    for k in names:
        n = 4 * state[k].size
        header[k] = {"dtype": "F32", "shape": list(state[k].shape), "data_offsets": [at, at + n]}
        at += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    f.write(len(text).to_bytes(8, "little") + text)
    for k in names:
        f.write(memoryview(np.ascontiguousarray(state[k], dtype="<f4")).cast("B"))
    f.flush()
    with safe_open(path, framework="np") as st:
        got = {k: tuple(st.get_slice(k).get_shape()) for k in st.keys()}
    if got != {k: tuple(state[k].shape) for k in names}:
        raise Failure(f"'{path}': safetensors reads back other tensors than were written")


STALE = re.compile(r"^(model\.safetensors\.index\.json|model-\d+-of-\d+\.safetensors)$")


def do_export(model, folder, force):
    s, params = read_model_file(model)
    if os.path.lexists(folder) and not os.path.isdir(folder):
        raise Failure(f"'{folder}' exists and is not a folder")
    if os.path.isdir(folder) and not force:
        raise Failure(f"'{folder}' exists; pass --force to replace its config.json and weights")
    check_parent(folder)
    parent = os.path.dirname(os.path.abspath(folder))
    bad = int(np.count_nonzero(~np.isfinite(params)))
    if bad:
        raise Failure(f"'{model}': the weights hold {commas(bad)} non-finite values")
    state = hf_state(s, params)
    config = json.dumps(hf_config(s), indent=2) + "\n"
    fresh = not os.path.isdir(folder)
    # a new folder is made under a temporary name and renamed whole; into an existing one each
    # file is renamed in place
    target = tempfile.mkdtemp(dir=parent, prefix="." + os.path.basename(os.path.abspath(folder)) + ".",
                              suffix=".tmp") if fresh else folder
    try:
        with AtomicFile(os.path.join(target, "model.safetensors")) as f:
            write_safetensors(f.f, f.tmp, state)
        with AtomicFile(os.path.join(target, "config.json")) as f:
            f.f.write(config.encode())
        if fresh:
            os.chmod(target, 0o755 & ~current_umask())
            os.rename(target, folder)
            fsync_dir(parent)
    except BaseException:
        if fresh:
            for name in os.listdir(target):
                os.remove(os.path.join(target, name))
            os.rmdir(target)
        raise
    removed = [] if fresh else sorted(n for n in os.listdir(folder) if STALE.match(n))
    for name in removed:
        os.remove(os.path.join(folder, name))
    hf_params = sum(int(a.size) for a in state.values())
    print(f"exported {model} -> {folder}: {s.describe()}, {commas(hf_params)} parameters (config.json, "
          f"model.safetensors{'; removed ' + ', '.join(removed) if removed else ''})")


USAGE = "hf_convert.py import HF_DIR MODEL.bin [--force] | export MODEL.bin HF_DIR [--force]"


class Parser(argparse.ArgumentParser):
    """A wrong command line: one line and exit status 2, as the trainers say it."""

    def error(self, message):
        die(f"{message}; usage: {USAGE}", 2)


def main(argv=None):
    ap = Parser(prog="hf_convert.py", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[4:]))
    sub = ap.add_subparsers(dest="command", required=True, metavar="{import,export}")
    imp = sub.add_parser("import", help="Hugging Face folder -> model file")
    imp.add_argument("hf_dir", metavar="HF_DIR")
    imp.add_argument("model", metavar="MODEL.bin")
    imp.add_argument("--force", action="store_true", help="replace MODEL.bin if it exists")
    exp = sub.add_parser("export", help="model file -> Hugging Face folder")
    exp.add_argument("model", metavar="MODEL.bin")
    exp.add_argument("hf_dir", metavar="HF_DIR")
    exp.add_argument("--force", action="store_true", help="write into HF_DIR if it exists")
    args = ap.parse_args(argv)

    global np, safe_open
    try:
        import numpy as np
    except ImportError:
        die("numpy is not installed (pip install numpy safetensors)")
    try:
        from safetensors import safe_open
    except ImportError:
        die("safetensors is not installed (pip install safetensors)")
    try:
        if args.command == "import":
            do_import(args.hf_dir, args.model, args.force)
        else:
            do_export(args.model, args.hf_dir, args.force)
    except Failure as e:
        die(str(e))
    except OSError as e:  # a full disk, a folder that cannot be written
        die(f"{e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}")
    except KeyboardInterrupt:
        die("interrupted; nothing was written", 130)
    return 0


if __name__ == "__main__":
    sys.exit(main())
