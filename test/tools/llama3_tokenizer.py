#!/usr/bin/env python3
"""Offline checks of Llama-3's tokenizer in the data tools: data/llama3_tokenizer.py and
data/text_to_shards.py --tokenizer llama3.

Plain Python, as test/tools/data_tools.py: every function decorated with @check is run, one
line is printed per check (PASS / FAIL / SKIP and its name), and the last line is
"N passed, M failed".  Exit status 1 if anything failed.

Needs only the standard library.  The ranks file is a small one written here: the 256 single
bytes (rank of byte b = 255 - b, so that a byte's rank is not its value) and eleven merges.
Every expected id below is worked out by hand from those ranks and Meta's split pattern, in
the comment beside it, never from the code under test.  The split is checked with Python's
`re` always and with the `regex` package when it is importable.  With `tiktoken` importable
(CI has none), our ids must equal tiktoken's on the same file and pattern; with
$LLAMA3_TOKENIZER_MODEL naming Meta's tokenizer.model, Meta's own test sentence must give
Meta's ids (and tiktoken's ids on a longer text, if it is importable, and llm.c's count on
Tiny Shakespeare, if data/tinyshakespeare.py has downloaded it).  Where ./train is built, it
trains a step on the shards with the flags text_to_shards.py prints, and samples.
"""
import base64
import importlib.util
import os
import random
import struct
import subprocess
import sys
import tempfile
import traceback

sys.dont_write_bytecode = True
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "data"))
import llama3_tokenizer as L  # noqa: E402

TMP = tempfile.TemporaryDirectory(prefix="test_llama3_tokenizer_")
CHECKS = []
HAVE_REGEX = importlib.util.find_spec("regex") is not None
PATHS = [False, True] if HAVE_REGEX else [False]  # use_regex: the re fallback, and regex if here


class Skip(Exception):
    pass


def check(fn):
    CHECKS.append(fn)
    return fn


def sh(args):
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)


# --------------------------------------------------------------------------- the small ranks file

def B(ch):
    """The rank of a one-byte token: the byte's value reversed (255 - b)."""
    return 255 - (ch if isinstance(ch, int) else ord(ch))


MERGES = [b"th", b"he", b"in", b"the", b" t", b" the", b"ing", b"er", b"ti", b"\n\n",
          b"T'"]  # "T'" is only ever adjacent across two pieces ("IT" "'S"): it must never merge
TH, HE, IN, THE, SP_T, SP_THE, ING, ER, TI, NLNL, T_QUOTE = range(256, 256 + len(MERGES))
N_BASE = 256 + len(MERGES)  # 267
BOS, EOS = N_BASE, N_BASE + 1  # the first two special tokens follow the ranks
VOCAB = N_BASE + 256  # 523


def small_lines():
    """The file's lines, merges first and bytes in descending value: the order of the lines is
    not the order of the ranks."""
    lines = [b"%s %d" % (base64.b64encode(t), 256 + i) for i, t in enumerate(MERGES)]
    lines += [b"%s %d" % (base64.b64encode(bytes([b])), B(b)) for b in range(255, -1, -1)]
    return lines


def write_ranks(name, lines):
    path = os.path.join(TMP.name, name)
    with open(path, "wb") as f:
        f.write(b"\n".join(lines) + b"\n")
    return path


SMALL = write_ranks("small.tiktoken", small_lines())
TOKENIZERS = {u: L.Llama3Tokenizer.load(SMALL, use_regex=u) for u in PATHS}


def each_path():
    """(name, tokenizer) for each split path this machine has."""
    return [("regex" if u else "re", TOKENIZERS[u]) for u in PATHS]


# Hand-worked encodings.  Within a piece, the adjacent pair whose concatenation has the
# lowest rank merges first.
CASES = [
    ("the", [THE]),  # a piece that is a token
    (" the", [SP_THE]),
    # " thing": pairs " t"(260) th(256) in(258): th first; then in; then in+g = ing(262);
    # " "+th and th+ing are no tokens.  (The highest rank first would give 260, B(h), 262.)
    (" thing", [B(" "), TH, ING]),
    # " there": th(256), then th+e = the(259), then " "+the = " the"(261); "r", "e" stay bytes.
    # (The highest rank first merges er(263) and " t"(260): 260, B(h), 263, B(e).)
    (" there", [SP_THE, B("r"), B("e")]),
    # "tin": in(258) before ti(264) though ti is to the left (leftmost first would give 264, B(n))
    ("tin", [B("t"), IN]),
    ("her", [HE, B("r")]),  # he(257) before er(263)
    # one piece of 6,000 letters: every th(256) first, then each th+e = the(259)
    ("the" * 2000, [THE] * 2000),
    # no merges: the UTF-8 bytes, one token each (é = C3 A9, the emoji = F0 9F 8E AD)
    ("café", [B("c"), B("a"), B("f"), B(0xC3), B(0xA9)]),
    (" 🎭", [B(" "), B(0xF0), B(0x9F), B(0x8E), B(0xAD)]),
]

# Meta's split pattern by hand: "IT" (letters; the apostrophe is not one), "'S" (the
# contraction alternative, case-insensitive), " the" and " thing" (one optional non-letter,
# then letters), ",", then of the two spaces before "there" the first alone (\s+(?!\S) gives
# back the space before the letter), " there", "!" with the newlines after it, digits in
# threes, " café" (é is a letter), " 🎭" (a space and a run of non-letters, non-numbers).
SPLIT_TEXT = "IT'S the thing,  there!\n\n123456 café 🎭"
SPLIT_PIECES = ["IT", "'S", " the", " thing", ",", " ", " there", "!\n\n", "123", "456", " café", " 🎭"]
SPLIT_IDS = ([B("I"), B("T")] + [B("'"), B("S")] + [SP_THE] + [B(" "), TH, ING] + [B(",")] + [B(" ")] +
             [SP_THE, B("r"), B("e")] + [B("!"), NLNL] +  # "!\n\n": only \n\n merges
             [B("1"), B("2"), B("3"), B("4"), B("5"), B("6")] +
             [B(" "), B("c"), B("a"), B("f"), B(0xC3), B(0xA9)] + [B(" "), B(0xF0), B(0x9F), B(0x8E), B(0xAD)])

# Non-ASCII splits, by hand from Unicode's categories and the pattern (both paths must agree):
NON_ASCII_SPLITS = [
    ("x²", ["x", "²"]),          # ² (U+00B2) is No, a number: not part of the letters before it
    ("ⅫB", ["Ⅻ", "B"]),          # Ⅻ (U+216B) is Nl, a number
    ("aʰb", ["aʰb"]),             # ʰ (U+02B0) is Lm, a letter
    ("e\u0301", ["e", "\u0301"]),  # U+0301 is Mn: a mark is no letter
    ("東京 Ελλάδα", ["東京", " Ελλάδα"]),  # Lo, and Greek letters after one space
    ("a\u00a0b", ["a", "\u00a0b"]),     # NBSP is White_Space; one optional non-letter before letters
    # U+001C is not White_Space (re's own \s would say it is, and split "a", "\x1c", "\x1cb"):
    # two of them are a run of non-letters, non-numbers, non-spaces
    ("a\x1c\x1cb", ["a", "\x1c\x1c", "b"]),
]


# --------------------------------------------------------------------------- encoding

@check
def special_tokens_follow_the_ranks_as_in_hugging_faces_llama_3_1_and_3_2():
    tok = TOKENIZERS[False]
    assert (tok.n_base, tok.n_vocab, tok.bos_id, tok.eos_id) == (N_BASE, VOCAB, BOS, EOS), \
        (tok.n_base, tok.n_vocab, tok.bos_id, tok.eos_id)
    # transformers' DEFAULT_LLAMA_SPECIAL_TOKENS["3.1"]: id 128000 + k for offset k
    named = {0: "<|begin_of_text|>", 1: "<|end_of_text|>", 2: "<|reserved_special_token_0|>",
             3: "<|reserved_special_token_1|>", 4: "<|finetune_right_pad_id|>",
             5: "<|reserved_special_token_2|>", 6: "<|start_header_id|>", 7: "<|end_header_id|>",
             8: "<|eom_id|>", 9: "<|eot_id|>", 10: "<|python_tag|>", 11: "<|reserved_special_token_3|>",
             255: "<|reserved_special_token_247|>"}
    assert len(L.SPECIAL_TOKENS) == 256 and len(set(L.SPECIAL_TOKENS)) == 256
    for k, name in named.items():
        assert tok.special[name] == N_BASE + k, (name, tok.special[name], N_BASE + k)
        assert tok.decode_bytes([N_BASE + k]) == name.encode(), name


@check
def hand_worked_encodings():
    for path, tok in each_path():
        for text, want in CASES:
            got = tok.encode(text)
            assert got == want, "%s: %r -> %s, by hand %s" % (path, text, got, want)


@check
def split_pattern_pieces_ascii_and_byte_fallback():
    for path, tok in each_path():
        assert tok.pieces(SPLIT_TEXT) == SPLIT_PIECES, "%s: %s" % (path, tok.pieces(SPLIT_TEXT))
        got = tok.encode(SPLIT_TEXT)
        assert got == SPLIT_IDS, "%s: %s\n  by hand %s" % (path, got, SPLIT_IDS)
        # no merge across two pieces: "T" ends "IT" and "'" starts "'S", and "T'" is a token
        assert T_QUOTE not in got


@check
def split_pattern_non_ascii_letters_numbers_and_white_space():
    for path, tok in each_path():
        for text, want in NON_ASCII_SPLITS:
            assert tok.pieces(text) == want, "%s: %r -> %s, by hand %s" % (path, text, tok.pieces(text), want)


@check
def the_two_split_paths_agree_on_mixed_scripts():
    if not HAVE_REGEX:
        raise Skip("the regex package is not importable: nothing to compare the re fallback with")
    # characters of Unicode 6.0 or older (in any Python's unicodedata and any regex package):
    # letters of several scripts and kinds, numbers of three kinds, marks, spaces, controls
    alphabet = ("abcXYZ'sStTmMdDlLrReEvV09 \t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u2003\u3000\u200b"
                "éüßÆıİſǅʰ東京ひらがなカタカナ한국어Ελληνικάкириллицаעבריתعربيहिन्दी"
                "²³½ⅫⅧ①٣३一\u0301\u0308\u064e.,;:!?-_()[]{}<>/\\|@#$%^&*+=~`\"🎭😀€$")
    rng = random.Random(45)
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60))) for _ in range(400)]
    re_tok, regex_tok = TOKENIZERS[False], TOKENIZERS[True]
    for t in texts:
        assert re_tok.pieces(t) == regex_tok.pieces(t), "%r: re %s, regex %s" % (t, re_tok.pieces(t),
                                                                                regex_tok.pieces(t))


@check
def decode_round_trips_the_bytes():
    rng = random.Random(7)
    texts = [SPLIT_TEXT, "", "\n\n\n", "x" * 300] + [
        "".join(chr(rng.choice([rng.randint(32, 126), rng.randint(0xA0, 0x2FFF), rng.randint(0x1F300, 0x1F64F)]))
                for _ in range(rng.randint(1, 80))) for _ in range(100)]
    for path, tok in each_path():
        for t in texts:
            ids = tok.encode(t)
            assert all(0 <= i < N_BASE for i in ids), "%s: a special or unknown id in %s" % (path, ids)
            assert tok.decode_bytes(ids) == t.encode("utf-8"), "%s: %r does not round-trip" % (path, t)


@check
def documents_and_special_token_text():
    tok = TOKENIZERS[False]
    assert tok.encode_document(" the") == [BOS, SP_THE, EOS]
    assert tok.encode_document("") == [BOS, EOS]
    # the name of a special token in the text is ordinary text (Meta's and llm.c's default)
    text = "<|end_of_text|>"
    ids = tok.encode(text)
    assert EOS not in ids and all(i < N_BASE for i in ids) and tok.decode_bytes(ids) == text.encode(), ids
    assert tok.decode_bytes([BOS, THE, EOS]) == b"<|begin_of_text|>the<|end_of_text|>"
    for bad in ([-1], [VOCAB]):
        try:
            tok.decode_bytes(bad)
        except ValueError:
            continue
        raise AssertionError("decode_bytes accepted %s" % bad)


@check
def equals_tiktoken_on_the_small_file():
    if importlib.util.find_spec("tiktoken") is None:
        raise Skip("tiktoken is not importable (not in CI): our encoder not compared with it")
    import tiktoken
    ranks = {base64.b64decode(line.split()[0]): int(line.split()[1]) for line in small_lines()}
    enc = tiktoken.Encoding(name="small", pat_str=L.PATTERN, mergeable_ranks=ranks,
                            special_tokens={n: N_BASE + i for i, n in enumerate(L.SPECIAL_TOKENS)})
    rng = random.Random(3)
    words = ["the", " the", "thing", " there", "tin", "her", "IT'S", "ing", "\n\n", " ", "  ", "é", "🎭", "12345"]
    texts = [t for t, _ in CASES] + [SPLIT_TEXT] + ["".join(rng.choice(words) for _ in range(30)) for _ in range(200)]
    for path, tok in each_path():
        for t in texts:
            assert tok.encode(t) == enc.encode_ordinary(t), "%s: %r: ours %s, tiktoken %s" % (
                path, t, tok.encode(t), enc.encode_ordinary(t))


@check
def metas_own_test_sentence_with_metas_file():
    path = os.environ.get("LLAMA3_TOKENIZER_MODEL")
    if not path:
        raise Skip("$LLAMA3_TOKENIZER_MODEL does not name Meta's tokenizer.model")
    # llama-models, models/llama3/api/test_tokenizer.py: encode(..., bos=True, eos=True)
    want = [128000, 2028, 374, 264, 1296, 11914, 13, 128001]
    for u in PATHS:
        tok = L.Llama3Tokenizer.load(path, use_regex=u)
        assert tok.sha256 == L.META_SHA256, "%s is not Meta's file (sha256 %s)" % (path, tok.sha256)
        assert tok.encode_document("This is a test sentence.") == want
    if importlib.util.find_spec("tiktoken") is not None:
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe
        enc = tiktoken.Encoding(name="llama3", pat_str=L.PATTERN, mergeable_ranks=load_tiktoken_bpe(path),
                                special_tokens={n: 128000 + i for i, n in enumerate(L.SPECIAL_TOKENS)})
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            text = f.read() + "".join(t for t, _ in NON_ASCII_SPLITS)
        for u in PATHS:
            assert L.Llama3Tokenizer.load(path, use_regex=u).encode(text) == enc.encode_ordinary(text)


@check
def llm_c_s_tiny_shakespeare_count_with_metas_file():
    path = os.environ.get("LLAMA3_TOKENIZER_MODEL")
    text_path = os.path.join(ROOT, "data", "tinyshakespeare", "tiny_shakespeare.txt")
    if not path or not os.path.exists(text_path):
        raise Skip("needs $LLAMA3_TOKENIZER_MODEL and the text python3 data/tinyshakespeare.py downloads")
    from tinyshakespeare import text_mismatch
    assert text_mismatch(text_path) is None, text_mismatch(text_path)
    with open(text_path, encoding="utf-8") as f:
        text = f.read()
    # llm.c's dev/data/tinyshakespeare.py (its docstring: 32,768 val + 319,555 train tokens
    # "For LLaMA 3", from Hugging Face's Llama-3.1 tokenizer): "<|endoftext|>" as plain text
    # before every passage, and one <|begin_of_text|> in front of it all
    marked = "<|endoftext|>" + text.replace("\n\n", "\n\n<|endoftext|>")
    for u in PATHS:
        n = 1 + len(L.Llama3Tokenizer.load(path, use_regex=u).encode(marked))
        assert n == 32768 + 319555, "%d tokens, llm.c's %d" % (n, 32768 + 319555)


# --------------------------------------------------------------------------- the trainer's tokenizer file

def parse_tokenizer_file(path):
    """(header ints, entries) parsed here with struct, not with data/shards.py."""
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256I", data[:1024])
    pos, entries = 1024, []
    for _ in range(header[2]):
        n = data[pos]
        entries.append(data[pos + 1:pos + 1 + n])
        pos += 1 + n
    assert pos == len(data), "%d bytes after the last entry" % (len(data) - pos)
    return header, entries


def expected_table():
    """Id -> bytes, from the test's own list of merges and the Llama-3.1 names."""
    table = {B(b): bytes([b]) for b in range(256)}
    table.update({256 + i: t for i, t in enumerate(MERGES)})
    return [table[i] for i in range(N_BASE)] + [n.encode() for n in L.SPECIAL_TOKENS]


@check
def tokenizer_file_cli_writes_llm_c_s_format():
    out = os.path.join(TMP.name, "small_tokenizer.bin")
    p = sh([sys.executable, "-S", "data/llama3_tokenizer.py", "tokenizer-file", SMALL, out])
    assert p.returncode == 0, p.stderr
    assert "--model llama3 --tokenizer %s --vocab 523 --padded-vocab 640" % out in p.stdout, p.stdout
    assert "not Meta's Llama-3 file" in p.stdout, p.stdout
    header, entries = parse_tokenizer_file(out)
    # magic, version 2, vocabulary, and the start of samples: <|begin_of_text|>
    assert header[:4] == (20240328, 2, VOCAB, BOS) and not any(header[4:]), header[:5]
    assert entries == expected_table(), "the entries differ from the ranks file's tokens and the names"
    # an existing file is kept without --force, replaced with it
    with open(out, "wb") as f:
        f.write(b"keep")
    p = sh([sys.executable, "-S", "data/llama3_tokenizer.py", "tokenizer-file", SMALL, out])
    assert p.returncode == 1 and p.stderr.strip().count("\n") == 0 and "--force" in p.stderr, p.stderr
    with open(out, "rb") as f:
        assert f.read() == b"keep", "overwritten without --force"
    p = sh([sys.executable, "-S", "data/llama3_tokenizer.py", "tokenizer-file", SMALL, out, "--force"])
    assert p.returncode == 0 and parse_tokenizer_file(out)[1] == expected_table(), p.stderr


@check
def tokenizer_file_refuses_a_token_over_255_bytes():
    lines = small_lines()
    lines[0] = b"%s 256" % base64.b64encode(b"ab" * 150)  # rank 256 becomes 300 bytes
    path = write_ranks("long.tiktoken", lines)
    out = os.path.join(TMP.name, "long.bin")
    for args in (["data/llama3_tokenizer.py", "tokenizer-file", path, out],
                 ["data/text_to_shards.py", SMALL, "--tokenizer", "llama3", "--tokenizer-model", path,
                  "--out-dir", os.path.join(TMP.name, "long_out")]):
        p = sh([sys.executable, "-S"] + args)
        err = p.stderr.strip()
        assert p.returncode == 1 and "\n" not in err and path in err and "token 256 is 300 bytes" in err, \
            (p.returncode, err)
    assert not os.path.exists(out) and not os.path.exists(os.path.join(TMP.name, "long_out")), \
        "a file was written for a tokenizer the format cannot hold"


@check
def encode_cli_prints_prompt_ids():
    p = sh([sys.executable, "-S", "data/llama3_tokenizer.py", "encode", SMALL, " thing", "--bos"])
    assert p.returncode == 0 and p.stdout.strip() == "%d,%d,%d,%d" % (BOS, B(" "), TH, ING), p.stdout + p.stderr


# --------------------------------------------------------------------------- text_to_shards.py --tokenizer llama3

def raw_shard(path):
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    body = data[1024:]
    return header, list(struct.unpack("<%dI" % (len(body) // 4), body)), len(body)


@check
def text_to_shards_llama3_writes_uint32_shards_of_documents():
    src = os.path.join(TMP.name, "docs.txt")
    with open(src, "w", encoding="utf-8") as f:
        f.write("the thing\n\nher tin")
    # by hand: "the thing\n\n" is "the" " thing" "\n\n", and "her tin" is "her" " tin", where
    # " tin" merges in(258) first, then " t"(260): 260, 258
    doc1 = [BOS, THE, B(" "), TH, ING, NLNL, EOS]
    doc2 = [BOS, HE, B("r"), SP_T, IN, EOS]
    for extra, want in (([], [BOS, THE, B(" "), TH, ING, NLNL, HE, B("r"), SP_T, IN, EOS]),
                        (["--blank-line-docs"], doc1 + doc2)):
        out = os.path.join(TMP.name, "shards" + "".join(extra))
        # python3 -S: no site-packages, so no regex package: the standard library alone
        p = sh([sys.executable, "-S", "data/text_to_shards.py", src, "--tokenizer", "llama3", "--tokenizer-model",
                SMALL, "--out-dir", out, "--name", "d", "--val-tokens", "3", "--shard-tokens", "4"] + extra)
        assert p.returncode == 0, p.stderr
        assert "pieces split with re" in p.stdout and "uint32 shards" in p.stdout, p.stdout
        assert ("trainer flags: --model llama3 -i '%s' -j '%s' --tokenizer %s --vocab 523 --padded-vocab 640"
                % (os.path.join(out, "d_train_*.bin"), os.path.join(out, "d_val_*.bin"),
                   os.path.join(out, "d_tokenizer.bin"))) in p.stdout, p.stdout
        names = sorted(n for n in os.listdir(out) if n != "d_tokenizer.bin")
        n_train = (len(want) - 3 + 3) // 4
        assert names == ["d_train_%06d.bin" % i for i in range(1, n_train + 1)] + ["d_val_000000.bin"], names
        got = []
        for n in names[-1:] + names[:-1]:  # val first, then the train shards in order
            header, toks, body_len = raw_shard(os.path.join(out, n))
            assert header[:2] == (20240801, 7) and header[2] * 4 == body_len and not any(header[3:]), \
                (n, header[:4], body_len)
            got += toks
        assert got == want, "%s: %s\n  by hand %s" % (extra, got, want)
        header, entries = parse_tokenizer_file(os.path.join(out, "d_tokenizer.bin"))
        assert header[:4] == (20240328, 2, VOCAB, BOS) and entries == expected_table()


@check
def text_to_shards_llama3_usage_and_token_bytes():
    src = os.path.join(TMP.name, "one.txt")
    with open(src, "w", encoding="utf-8") as f:
        f.write("the thing")
    out = os.path.join(TMP.name, "usage")
    base = [sys.executable, "-S", "data/text_to_shards.py", src, "--out-dir", out, "--val-tokens", "1"]
    for args in (["--tokenizer", "llama3"], ["--tokenizer", "bytes", "--tokenizer-model", SMALL]):
        p = sh(base + args)
        assert p.returncode == 2 and "--tokenizer-model" in p.stderr, (args, p.returncode, p.stderr)
    # two files are two documents; --token-bytes 2 holds a vocabulary of 523 in uint16
    p = sh(base[:4] + [src] + base[4:] + ["--tokenizer", "llama3", "--tokenizer-model", SMALL, "--token-bytes", "2"])
    assert p.returncode == 0, p.stderr
    with open(os.path.join(out, "one_train_000001.bin"), "rb") as f, \
            open(os.path.join(out, "one_val_000000.bin"), "rb") as g:
        v, t = g.read(), f.read()
    assert struct.unpack("<3i", v[:12]) == (20240520, 1, 1) and struct.unpack("<3i", t[:12])[:2] == (20240520, 1)
    doc = [BOS, THE, B(" "), TH, ING, EOS]
    assert list(struct.unpack("<%dH" % ((len(v) - 1024) // 2), v[1024:]) +
                struct.unpack("<%dH" % ((len(t) - 1024) // 2), t[1024:])) == doc + doc


@check
def the_trainer_takes_the_printed_flags_and_prints_samples_as_text():
    if not os.path.exists(os.path.join(ROOT, "train")):
        raise Skip("./train is not built")
    import shlex
    src = os.path.join(TMP.name, "corpus.txt")
    with open(src, "w", encoding="utf-8") as f:
        f.write("the thing\n\nher tin, there!\n\n" * 6)
    out = os.path.join(TMP.name, "corpus")
    p = sh([sys.executable, "-S", "data/text_to_shards.py", src, "--tokenizer", "llama3", "--tokenizer-model", SMALL,
            "--out-dir", out, "--blank-line-docs", "--val-tokens", "20"])
    assert p.returncode == 0, p.stderr
    flags = shlex.split(p.stdout.split("trainer flags: ", 1)[1].splitlines()[0])
    p = sh(["./train"] + flags + ["--layers", "1", "--heads", "2", "--channels", "8", "--max-seq-len", "8", "-b", "1",
                                  "-t", "8", "-n", "1", "--val-every", "1", "--sample-every", "1", "-g", "4",
                                  "--threads", "1", "-o", os.path.join(TMP.name, "run")])
    assert p.returncode == 0, (p.stdout + p.stderr)[-600:]
    # the sample starts from the tokenizer file's start token, printed by its name
    assert "\n[<|begin_of_text|>]" in p.stdout, p.stdout[-600:]


# --------------------------------------------------------------------------- malformed ranks files

def malformed():
    """(name, lines, what the error line must say) for each kind of damage."""
    good = small_lines()  # line 1..11 the merges (ranks 256..266), line 12.. the bytes 255..0
    cases = []
    lines = list(good)
    lines[2] = b"aW4=! 258"
    cases.append(("bad base64", lines, "line 3: the token 'aW4=!' is not valid base64"))
    lines = list(good)
    lines[4] = b"IHQ= 2x0"
    cases.append(("rank not an integer", lines, "line 5: the rank '2x0' is not a non-negative integer"))
    lines = list(good)
    lines[4] = b"IHQ= -260"
    cases.append(("negative rank", lines, "line 5: the rank '-260' is not a non-negative integer"))
    lines = list(good)
    lines[5] = good[3]  # "the" again, rank 259 again
    cases.append(("duplicate token", lines, "line 6: the token b'the' repeats line 4"))
    lines = list(good)
    lines[5] = b"%s 259" % base64.b64encode(b"xy")
    cases.append(("duplicate rank", lines, "line 6: the rank 259 repeats line 4"))
    lines = list(good)
    lines[10] = b"%s 300" % base64.b64encode(b"T'")  # 266 missing
    cases.append(("ranks with a gap", lines, "line 11: rank 300, but the 267 ranks must be 0..266 (rank 266 is missing)"))
    lines = list(good)
    a = 12 + 255 - ord("A") - 1  # the line of the byte "A": bytes 255..0 from line 12 on
    assert lines[a] == b"%s %d" % (base64.b64encode(b"A"), B("A")), lines[a]
    lines[a] = b"%s %d" % (base64.b64encode(b"AA"), B("A"))  # the ranks stay 0..266
    cases.append(("a byte without a token", lines, "no token for the byte 0x41"))
    lines = list(good)
    lines[0] = b"dGg= 256 7"
    cases.append(("three fields", lines, "line 1: expected 'BASE64_TOKEN RANK', got 3 field(s)"))
    cases.append(("empty file", [b""], "holds no tokens"))
    return cases


@check
def malformed_ranks_files_are_one_error_line_and_exit_1():
    for i, (name, lines, want) in enumerate(malformed()):
        path = write_ranks("bad%d.tiktoken" % i, lines)
        out_dir = os.path.join(TMP.name, "bad%d" % i)
        for args in (["data/llama3_tokenizer.py", "tokenizer-file", path, os.path.join(TMP.name, "bad%d.bin" % i)],
                     ["data/llama3_tokenizer.py", "encode", path, "the"],
                     ["data/text_to_shards.py", SMALL, "--tokenizer", "llama3", "--tokenizer-model", path,
                      "--out-dir", out_dir]):
            p = sh([sys.executable, "-S"] + args)
            err = p.stderr.strip()
            assert p.returncode == 1, "%s, %s: exit %d\n%s" % (name, args[0], p.returncode, p.stderr[-300:])
            assert "\n" not in err and err.startswith("error: %s" % path) and want in err, \
                "%s, %s: %r (want %r)" % (name, args[0], err, want)
        assert not os.path.exists(out_dir) and not os.path.exists(os.path.join(TMP.name, "bad%d.bin" % i)), \
            "%s: something was written" % name
    p = sh([sys.executable, "-S", "data/llama3_tokenizer.py", "encode", os.path.join(TMP.name, "absent"), "x"])
    assert p.returncode == 1 and "cannot read" in p.stderr and "absent" in p.stderr, p.stderr


# --------------------------------------------------------------------------- runner

def main():
    print("split paths: %s" % ", ".join(name for name, _ in each_path()))
    passed = failed = skipped = 0
    for fn in CHECKS:
        try:
            fn()
        except Skip as e:
            skipped += 1
            print("SKIP %s: %s" % (fn.__name__, e))
        except Exception as e:  # an AssertionError or anything the code under test raised
            failed += 1
            msg = str(e) or traceback.format_exc().strip().splitlines()[-1]
            print("FAIL %s: %s: %s" % (fn.__name__, type(e).__name__, msg))
        else:
            passed += 1
            print("PASS %s" % fn.__name__)
    TMP.cleanup()
    print("%d passed, %d failed" % (passed, failed) + (", %d skipped" % skipped if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
