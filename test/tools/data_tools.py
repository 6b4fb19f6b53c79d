#!/usr/bin/env python3
"""Offline checks of the data tools and run recipes.

Plain Python, no test framework: every function decorated with @check is run,
one line is printed per check (PASS / FAIL / SKIP and its name), and the last
line is "N passed, M failed".  Exit status 1 if anything failed.

Needs only the standard library (the plot check is skipped without matplotlib).
No network: the GPT-2 tokenizer is never loaded; the document-split rule is
tested with a fake encoder, and text_to_shards.py runs in byte mode under
`python3 -S` (no site-packages), which also proves that mode is stdlib-only.
"""
import contextlib
import importlib.util
import io
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import traceback

sys.dont_write_bytecode = True  # leave no __pycache__ in data/ (the subprocesses get the env var)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "data"))
import shards  # noqa: E402
from tinyshakespeare import encode_documents  # noqa: E402

TMP = tempfile.TemporaryDirectory(prefix="test_data_tools_")
CHECKS = []

# Mixed scripts and multi-byte characters, so byte tokens != characters.
SAMPLE = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
          "Zoë: Ça va? Grüße aus Köln — naïve café, 東京, Ελληνικά, emoji 🎭.\n\n"
          "ALL:\nSpeak, speak.\n") * 12
VAL_TOKENS = 100
SHARD_TOKENS = 700


class Skip(Exception):
    pass


def check(fn):
    CHECKS.append(fn)
    return fn


def sh(args, env=None):
    """Run a command from the repo root; returns CompletedProcess with text output."""
    full_env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **(env or {}))
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=full_env, timeout=120)


def raw_shard(path):
    """Parse a shard without data/shards.py, so a bug there cannot hide itself."""
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    body = data[1024:]
    tokens = list(struct.unpack("<%dH" % (len(body) // 2), body))
    return header, tokens, len(body)


_bytes_run = {}


def bytes_run():
    """Run text_to_shards.py once in byte mode; later checks inspect its output."""
    if not _bytes_run:
        d = os.path.join(TMP.name, "bytes")
        os.makedirs(d)
        src = os.path.join(d, "sample.txt")
        with open(src, "w", encoding="utf-8") as f:
            f.write(SAMPLE)
        out = os.path.join(d, "out")
        p = sh([sys.executable, "-S", "data/text_to_shards.py", src, "--tokenizer", "bytes",
                "--out-dir", out, "--name", "s", "--val-tokens", str(VAL_TOKENS),
                "--shard-tokens", str(SHARD_TOKENS)])
        names = sorted(os.listdir(out)) if os.path.isdir(out) else []
        _bytes_run.update(proc=p, out=out, names=names)
    return _bytes_run


def shard_files(kind):
    r = bytes_run()
    return [os.path.join(r["out"], n) for n in r["names"] if n.startswith("s_%s_" % kind)]


def all_tokens():
    toks = []
    for p in shard_files("val") + shard_files("train"):  # names sort by index within each split
        toks += raw_shard(p)[1]
    return toks


# --------------------------------------------------------------------------- text_to_shards

@check
def text_to_shards_bytes_mode_stdlib_only():
    p = bytes_run()["proc"]
    assert p.returncode == 0, "exit %d: %s" % (p.returncode, p.stderr.strip()[-300:])
    assert "tokenizer: bytes" in p.stdout, p.stdout
    assert "--vocab 256" in p.stdout, "trainer flags should say --vocab 256:\n" + p.stdout


@check
def shard_headers():
    files = shard_files("val") + shard_files("train")
    assert files, "no shards written: %s" % bytes_run()["names"]
    for path in files:
        header, _, body_len = raw_shard(path)
        assert header[0] == 20240520, "%s magic %d" % (path, header[0])
        assert header[1] == 1, "%s version %d" % (path, header[1])
        assert header[2] * 2 == body_len, "%s count %d vs %d body bytes" % (path, header[2], body_len)
        assert not any(header[3:]), "%s: reserved header ints not zero" % path


@check
def token_count_equals_byte_length():
    n = len(SAMPLE.encode("utf-8"))
    assert n > len(SAMPLE), "sample text should contain multi-byte characters"
    assert len(all_tokens()) == n, "%d tokens for %d bytes" % (len(all_tokens()), n)


@check
def val_train_split_sizes():
    n = len(SAMPLE.encode("utf-8"))
    val = [raw_shard(p)[0][2] for p in shard_files("val")]
    train = [raw_shard(p)[0][2] for p in shard_files("train")]
    assert val == [VAL_TOKENS], "val shards %s" % val
    expected = [min(SHARD_TOKENS, n - VAL_TOKENS - i) for i in range(0, n - VAL_TOKENS, SHARD_TOKENS)]
    assert train == expected, "train shards %s, expected %s" % (train, expected)
    names = [os.path.basename(p) for p in shard_files("val") + shard_files("train")]
    assert names[0] == "s_val_000000.bin" and names[1] == "s_train_000001.bin", names


@check
def round_trip_tokens_to_bytes():
    toks = all_tokens()
    assert max(toks) < 256, "byte token >= 256"
    assert bytes(toks) == SAMPLE.encode("utf-8"), "decoded bytes differ from the original text"
    # and through the module's reader too
    via_module = []
    for p in shard_files("val") + shard_files("train"):
        via_module += list(shards.read_shard(p))
    assert via_module == toks, "shards.read_shard disagrees with the raw parse"


@check
def byte_tokenizer_file_parses_and_decodes():
    path = os.path.join(bytes_run()["out"], "s_tokenizer.bin")
    with open(path, "rb") as f:
        data = f.read()
    magic, version, vocab, eot = struct.unpack("<4I", data[:16])
    assert (magic, version, vocab) == (20240328, 2, 256), (magic, version, vocab)
    assert eot < 256, "end-of-text/start id %d outside the byte vocab" % eot
    table, pos = [], 1024
    for _ in range(vocab):
        n = data[pos]
        table.append(data[pos + 1:pos + 1 + n])
        pos += 1 + n
    assert pos == len(data), "%d trailing bytes" % (len(data) - pos)
    assert table == [bytes([i]) for i in range(256)], "byte table is not the identity"
    text = b"".join(table[t] for t in all_tokens()).decode("utf-8")
    assert text == SAMPLE, "decoded text differs"
    assert shards.read_tokenizer(path) == (table, eot), "shards.read_tokenizer disagrees"


@check
def text_to_shards_default_val_is_ten_percent():
    src = os.path.join(bytes_run()["out"], "..", "sample.txt")
    out = os.path.join(TMP.name, "default_val")
    p = sh([sys.executable, "-S", "data/text_to_shards.py", src, "--tokenizer", "bytes",
            "--out-dir", out, "--name", "d"])
    assert p.returncode == 0, p.stderr
    n = len(SAMPLE.encode("utf-8"))
    val = raw_shard(os.path.join(out, "d_val_000000.bin"))[0][2]
    train = raw_shard(os.path.join(out, "d_train_000001.bin"))[0][2]
    assert (val, train) == (n // 10, n - n // 10), "val %d train %d of %d" % (val, train, n)


@check
def text_to_shards_rejects_impossible_val_split():
    src = os.path.join(TMP.name, "small.txt")
    with open(src, "w", encoding="utf-8") as f:
        f.write("tiny text")
    p = sh([sys.executable, "-S", "data/text_to_shards.py", src, "--tokenizer", "bytes",
            "--out-dir", os.path.join(TMP.name, "small"), "--val-tokens", "9"])
    assert p.returncode != 0, "9 val tokens of 9 should leave no training data and fail"
    assert "error:" in p.stderr, p.stderr


def text_to_shards_refusal(args, preexec_fn=None):
    """Runs text_to_shards.py in byte mode; (exit status, its stderr's lines, stdout)."""
    full_env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run([sys.executable, "-S", "data/text_to_shards.py", "--tokenizer", "bytes"] + args, cwd=ROOT,
                       capture_output=True, text=True, env=full_env, timeout=120, preexec_fn=preexec_fn)
    return p.returncode, p.stderr.strip().splitlines(), p.stdout


@check
def text_to_shards_checks_its_inputs_and_output_first():
    # Each was a traceback, or a misleading line ("not found" for a directory, "--val-tokens 0
    # must be in [0, 0)" for an empty file). One line naming the file and what is wrong; exit 2
    # for the command line, 1 for the files; nothing made before the refusal.
    d = os.path.join(TMP.name, "refusals")
    os.makedirs(d)
    text, empty, a_dir, a_file = (os.path.join(d, n) for n in ("a.txt", "empty.txt", "folder", "file"))
    with open(text, "w") as f:
        f.write("some text to shard\n" * 20)
    open(empty, "w").close()
    os.mkdir(a_dir)
    with open(a_file, "w") as f:
        f.write("not a folder\n")
    fifo = os.path.join(d, "fifo")
    os.mkfifo(fifo)
    out = os.path.join(d, "out")
    cases = [([empty, "--out-dir", out], 1, "the input has no tokens (%s is empty)" % empty),
             ([a_dir, "--out-dir", out], 1, "input %s is a directory, not a regular file" % a_dir),
             ([fifo, "--out-dir", out], 1, "input %s is a FIFO (named pipe), not a regular file" % fifo),
             ([os.path.join(d, "nope"), "--out-dir", out], 1, "input file not found: "),
             ([text, "--out-dir", a_file], 1, "output folder %s is a file, not a folder" % a_file),
             ([text, "--out-dir", "/dev/null"], 1, "output folder /dev/null is a character device, not a folder"),
             ([text, "--out-dir", os.path.join(a_file, "sub")], 1, "%s is a file, not a folder" % a_file),
             ([text, "--out-dir", out, "--name", "x/y"], 2, "--name 'x/y' is a file name prefix"),
             ([text, "--out-dir", out, "--name", ""], 2, "--name '' is a file name prefix"),
             ([text, "--out-dir", out, "--shard-tokens", "0"], 2, "--shard-tokens 0 is out of range"),
             ([text, "--out-dir", out, "--val-tokens", "-1"], 2, "--val-tokens -1 is out of range")]
    for args, code, why in cases:
        rc, lines, _ = text_to_shards_refusal(args)
        assert rc == code and len(lines) == 1 and why in lines[0], \
            "%s: exit %d (want %d), stderr %s" % (" ".join(args), rc, code, lines[-3:])
        assert not os.path.exists(out), "%s: made %s before refusing" % (" ".join(args), out)


@check
def text_to_shards_refuses_a_read_only_output_folder():
    if os.geteuid() == 0:
        raise Skip("running as root: a read-only folder is writable to root")
    d = tempfile.mkdtemp(dir=TMP.name)
    text = os.path.join(d, "a.txt")
    with open(text, "w") as f:
        f.write("some text to shard\n" * 20)
    ro = os.path.join(d, "readonly")
    os.mkdir(ro, 0o555)
    rc, lines, _ = text_to_shards_refusal([text, "--out-dir", ro])
    assert rc == 1 and len(lines) == 1 and "output folder %s is not writable" % ro in lines[0], (rc, lines)


@check
def text_to_shards_write_error_is_one_line_and_removes_the_partial_shard():
    # A full disk: a file size limit (RLIMIT_FSIZE; Python ignores SIGXFSZ, so the write fails
    # with EFBIG) stands in for it, on the same path: the OSError at the buffer's flush. The val
    # shard (1024 + 200 bytes) fits under 2000 bytes, the first train shard (1024 + 1400) does not.
    import resource
    src = os.path.join(bytes_run()["out"], "..", "sample.txt")
    out = os.path.join(TMP.name, "full")

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))
    rc, lines, stdout = text_to_shards_refusal([src, "--out-dir", out, "--name", "s", "--val-tokens",
                                                str(VAL_TOKENS), "--shard-tokens", str(SHARD_TOKENS)], limit)
    train = os.path.join(out, "s_train_000001.bin")
    assert rc == 1 and len(lines) == 1 and lines[0].startswith("error: cannot write %s: " % train) and \
        "partial shard is removed" in lines[0], (rc, lines)
    assert sorted(os.listdir(out)) == ["s_val_000000.bin"], "left behind: %s" % os.listdir(out)
    # the tokenizer file on a full device: a link to /dev/full (ENOSPC on every write)
    if not os.path.exists("/dev/full"):
        raise Skip("no /dev/full here (the file size limit case passed)")
    tok = os.path.join(out, "s_tokenizer.bin")
    os.symlink("/dev/full", tok)
    rc, lines, _ = text_to_shards_refusal([src, "--out-dir", out, "--name", "s"])
    assert rc == 1 and len(lines) == 1 and "cannot write %s: No space left on device" % tok in lines[0], (rc, lines)


# --------------------------------------------------------------------------- shards.py

@check
def shard_writer_rejects_tokens_over_uint16():
    path = os.path.join(TMP.name, "bad.bin")
    for bad in ([1, 2, 65536], [70000], [-1]):
        try:
            shards.write_shard(path, bad, quiet=True)
        except ValueError:
            pass
        else:
            raise AssertionError("write_shard accepted %s" % bad)
        assert not os.path.exists(path), "a rejected shard was left on disk"
    ok = os.path.join(TMP.name, "ok.bin")
    shards.write_shard(ok, [0, 65535], quiet=True)
    assert raw_shard(ok)[1] == [0, 65535], "boundary values did not round-trip"


@check
def read_shard_rejects_bad_files():
    good = os.path.join(TMP.name, "good.bin")
    shards.write_shard(good, list(range(10)), quiet=True)
    with open(good, "rb") as f:
        data = f.read()
    for name, blob in [("magic", struct.pack("<i", 1234) + data[4:]),
                       ("truncated", data[:-2])]:
        path = os.path.join(TMP.name, name + ".bin")
        with open(path, "wb") as f:
            f.write(blob)
        try:
            shards.read_shard(path)
        except ValueError:
            continue
        raise AssertionError("read_shard accepted a file with bad " + name)


def raw_shard32(path):
    """Parse a uint32 shard (llm.c's Llama-3 kind) without data/shards.py."""
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    body = data[1024:]
    return header, list(struct.unpack("<%dI" % (len(body) // 4), body)), len(body)


@check
def gpt2_shard_bytes_are_llm_c_s():
    # the uint16 kind byte for byte, built here by hand: what write_shard wrote before uint32 shards
    toks = [0, 1, 255, 256, 50256, 65535]
    want = struct.pack("<256i", *([20240520, 1, len(toks)] + [0] * 253)) + struct.pack("<6H", *toks)
    for i, kwargs in enumerate([{}, {"token_bytes": 2}]):
        path = os.path.join(TMP.name, "gpt2_%d.bin" % i)
        shards.write_shard(path, toks, quiet=True, **kwargs)
        with open(path, "rb") as f:
            assert f.read() == want, "write_shard(%s) differs from llm.c's uint16 shard" % kwargs


@check
def uint32_shard_round_trips_ids_above_65535():
    # llm.c's Llama-3 kind: magic 20240801, version 7, uint32 tokens (vocabulary 128,256)
    toks = [0, 65535, 65536, 70000, 128000, 128255, 2 ** 32 - 1, 7]
    path = os.path.join(TMP.name, "llama.bin")
    assert shards.write_shard(path, toks, quiet=True, token_bytes=4) == len(toks)
    header, body, body_len = raw_shard32(path)
    assert header[:3] == (20240801, 7, len(toks)), header[:3]
    assert not any(header[3:]), "reserved header ints not zero"
    assert body_len == 4 * len(toks) and body == toks, body
    assert list(shards.read_shard(path)) == toks, "shards.read_shard disagrees with the raw parse"
    assert shards.shard_header(path) == (len(toks), 4)
    # streamed in pieces, and from bytes (byte tokens widened, not reinterpreted)
    with shards.ShardWriter(path, token_bytes=4) as w:
        w.write(toks[:3])
        w.write(b"\x01\xff")
        w.write(toks[3:])
    assert raw_shard32(path)[1] == toks[:3] + [1, 255] + toks[3:]
    for bad in ([-1], [2 ** 32], [1, 2 ** 40]):
        try:
            shards.write_shard(path, bad, quiet=True, token_bytes=4)
        except ValueError:
            pass
        else:
            raise AssertionError("write_shard(token_bytes=4) accepted %s" % bad)
        assert not os.path.exists(path), "a rejected shard was left on disk"
    assert shards.token_bytes_for_vocab(50257) == 2 and shards.token_bytes_for_vocab(65536) == 2
    assert shards.token_bytes_for_vocab(65537) == 4 and shards.token_bytes_for_vocab(128256) == 4


@check
def read_shard_rejects_bad_uint32_files():
    good = os.path.join(TMP.name, "good32.bin")
    shards.write_shard(good, list(range(70000, 70010)), quiet=True, token_bytes=4)
    with open(good, "rb") as f:
        data = f.read()
    for name, blob in [("version", data[:4] + struct.pack("<i", 1) + data[8:]),  # GPT-2's version
                       ("truncated", data[:-2]),
                       ("uint16 magic", struct.pack("<i", 20240520) + data[4:])]:  # then the size is wrong
        path = os.path.join(TMP.name, "bad32.bin")
        with open(path, "wb") as f:
            f.write(blob)
        try:
            shards.read_shard(path)
        except ValueError:
            continue
        raise AssertionError("read_shard accepted a uint32 shard with bad " + name)


@check
def text_to_shards_token_bytes_4_writes_the_same_tokens_as_uint32():
    src = os.path.join(bytes_run()["out"], "..", "sample.txt")
    out = os.path.join(TMP.name, "wide")
    p = sh([sys.executable, "-S", "data/text_to_shards.py", src, "--tokenizer", "bytes", "--out-dir", out,
            "--name", "s", "--val-tokens", str(VAL_TOKENS), "--shard-tokens", str(SHARD_TOKENS),
            "--token-bytes", "4"])
    assert p.returncode == 0, p.stderr
    assert "uint32 shards" in p.stdout, p.stdout
    names = sorted(n for n in os.listdir(out) if n.endswith(".bin") and "tokenizer" not in n)
    assert names == sorted(n for n in bytes_run()["names"] if "tokenizer" not in n), names
    wide = []
    for kind in ("val", "train"):
        for n in (n for n in names if n.startswith("s_%s_" % kind)):
            header, toks, body_len = raw_shard32(os.path.join(out, n))
            assert header[:2] == (20240801, 7) and header[2] * 4 == body_len, (n, header[:3], body_len)
            wide += toks
    assert wide == all_tokens(), "the uint32 shards hold other tokens than the uint16 ones"
    # the default, and --token-bytes 2, are the uint16 shards byte for byte
    out2 = os.path.join(TMP.name, "narrow")
    p = sh([sys.executable, "-S", "data/text_to_shards.py", src, "--tokenizer", "bytes", "--out-dir", out2,
            "--name", "s", "--val-tokens", str(VAL_TOKENS), "--shard-tokens", str(SHARD_TOKENS),
            "--token-bytes", "2"])
    assert p.returncode == 0, p.stderr
    for n in bytes_run()["names"]:
        with open(os.path.join(out2, n), "rb") as a, open(os.path.join(bytes_run()["out"], n), "rb") as b:
            assert a.read() == b.read(), "--token-bytes 2 changed " + n


# --------------------------------------------------------------------------- tiny Shakespeare rule

MARK = "<|endoftext|>"


def fake_encode(s):
    """A stand-in tokenizer: one id per character, offset so ids differ from EOT."""
    return [1000 + ord(c) for c in s]


def reference_split(text, eot):
    """The rule as llm.c states it: prepend the marker, add one after every blank
    line, then encode with the marker as a special token."""
    marked = MARK + text.replace("\n\n", "\n\n" + MARK)
    out = []
    for i, piece in enumerate(marked.split(MARK)):
        if i:
            out.append(eot)
        out.extend(fake_encode(piece))
    return out


@check
def tinyshakespeare_document_rule():
    E = 7
    got = encode_documents("A:\nhi\n\nB:\nyo\n", fake_encode, E)
    want = [E] + fake_encode("A:\nhi\n\n") + [E] + fake_encode("B:\nyo\n")
    assert got == want, "%s != %s" % (got, want)
    # a triple newline closes the document after two of them; a trailing blank line leaves a lone EOT
    got = encode_documents("x\n\n\ny\n\n", fake_encode, E)
    want = [E] + fake_encode("x\n\n") + [E] + fake_encode("\ny\n\n") + [E]
    assert got == want, "%s != %s" % (got, want)
    rng = random.Random(0)
    for _ in range(300):
        text = "".join(rng.choice("ab \n") for _ in range(rng.randint(0, 30)))
        assert encode_documents(text, fake_encode, E) == reference_split(text, E), repr(text)


@check
def tinyshakespeare_val_train_split_constant():
    import tinyshakespeare
    assert tinyshakespeare.VAL_TOKENS == 32768, tinyshakespeare.VAL_TOKENS


@check
def tinyshakespeare_names_a_text_that_is_not_char_rnns():
    # The published file is not in the repository: a text of its length that differs (one
    # character of 1,115,394, as a hand-rebuilt copy might) must be named with both hashes.
    import tinyshakespeare
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "input.txt")
        with open(path, "wb") as f:
            f.write(b"x" * (tinyshakespeare.TEXT_BYTES - 1) + b"$")
        why = tinyshakespeare.text_mismatch(path)
        assert why and path in why and tinyshakespeare.TEXT_SHA256[:16] in why, why
        assert "1115394 bytes" in why, why



@check
def downloaders_check_their_counts_before_any_download():
    # --shard-size 0 once wrote empty shards without end. Under `python3 -S` (no site-packages:
    # neither numpy, tqdm nor datasets) a script that gets past its argument checks stops at a
    # missing package with exit 1; with HF_HUB_OFFLINE and an unroutable proxy nothing goes out.
    # Each bad count must be one line naming the option and its range, exit 2.
    env = {"HF_HUB_OFFLINE": "1", "https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"}
    cases = [("fineweb.py", ["--shard-size", "0"], "--shard-size 0 is out of range (1 to 2,147,483,647 tokens"),
             ("fineweb.py", ["--shard-size", "-5"], "--shard-size -5 is out of range"),
             ("fineweb.py", ["--shard-size", "2147483648"], "--shard-size 2147483648 is out of range"),
             ("fineweb.py", ["--workers", "0"], "--workers 0 is out of range (1 to 1,024 processes)"),
             ("tinystories.py", ["--workers", "0"], "--workers 0 is out of range (1 to 1,024 processes)"),
             ("tinystories.py", ["--workers", "5000"], "--workers 5000 is out of range")]
    with tempfile.TemporaryDirectory() as d:
        for script, args, why in cases:
            out = os.path.join(d, "out")
            p = sh([sys.executable, "-S", "data/" + script, "--out-dir", out] + args, env=env)
            lines = p.stderr.strip().splitlines()
            assert p.returncode == 2 and len(lines) == 1 and why in lines[0], \
                "%s %s: exit %d, stderr: %s" % (script, " ".join(args), p.returncode, p.stderr.strip()[-300:])
            assert not os.path.exists(out), "%s %s made %s before refusing" % (script, " ".join(args), out)



@check
def bench_comm_checks_its_arguments_first():
    # A rate 'abc' or -1 was a traceback and then an unthrottled run printed as a row of that
    # rate; 300 hosts ran past its timeout. Each bad argument: one line, exit 2, before any
    # namespace is made (an `ip` that fails stands in, so a script that gets past its checks
    # stops there with exit 1 instead of building a cluster).
    with tempfile.TemporaryDirectory() as d:
        fake = os.path.join(d, "ip")
        with open(fake, "w") as f:
            f.write("#!/bin/sh\nexit 1\n")
        os.chmod(fake, 0o755)
        env = {"PATH": d + os.pathsep + os.environ.get("PATH", "")}
        for args, why in [(["abc"], "got 'abc'"), (["-1"], "got '-1'"), (["0"], "got '0'"),
                          (["1", "300"], "a host count is 2 to 16"), (["1", "1"], "got '1'"),
                          (["1", "2", "1"], "STEPS is 2 to 1000"), (["1", "2", "x"], "got 'x'"),
                          (["1", "2", "3", "4"], "at most 3 arguments, got 4")]:
            p = sh(["bash", "scripts/bench_comm.sh"] + args, env=env)
            lines = p.stderr.strip().splitlines()
            assert p.returncode == 2 and len(lines) == 1 and why in lines[0] and not p.stdout, \
                "bench_comm.sh %s: exit %d, stdout %r, stderr %r" % (" ".join(args), p.returncode, p.stdout[-200:],
                                                                    p.stderr[-300:])


# --------------------------------------------------------------------------- recipes

@check
def recipe_gpt2_124m_8_gpus():
    p = sh(["bash", "scripts/run_gpt2_124m.sh", "--gpus", "8", "--micro-batch", "64", "--dry-run"],
           env={"TRAIN_BIN": os.path.join(TMP.name, "no_such_binary")})
    assert p.returncode == 0, "exit %d: %s" % (p.returncode, p.stderr)
    line = next((l for l in p.stdout.splitlines() if l.startswith("micro-batch")), "")
    assert "64×1024" in line and "× 1 accumulation" in line, "arithmetic line: %r" % line
    assert "8 replicas" in line and "524,288 tokens per step" in line, "arithmetic line: %r" % line
    assert "19,073 steps" in line, "arithmetic line: %r" % line
    assert "mpirun -np 8" in p.stdout, "command should launch 8 replicas:\n" + p.stdout


@check
def recipe_gpt2_1558m_dry_run_plans_8_gpus_of_80gb_with_zero():
    # llm.c's 1.5B settings on the command line; -b auto and --zero 1 for 8 GPUs; without a
    # GPU the dry run plans 80GB each (train_gpt_cpu plans when train_gpt is not built)
    p = sh(["bash", "scripts/run_gpt2_1558m.sh", "--dry-run"])
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    command = next((l for l in out.splitlines() if l.startswith("command: ")), "")
    for flag in ("mpirun -np 8", "--layers 48 --heads 25 --channels 1600", "-b auto", "-t 1024", "-d 1048576",
                 "-l 6e-4", "--warmup 700", "-c 0.1", "--zero 1", "--device-memory 80GB"):
        assert flag in command, "missing %s in: %s" % (flag, command)
    if not os.path.exists(os.path.join(ROOT, "train_gpt_cpu")):
        raise Skip("./train_gpt_cpu is not built: only the command is checked")
    # the plan with ZeRO, then the one without: each a chosen micro-batch and a memory line
    chosen = [l for l in out.splitlines() if "micro-batch chosen from memory" in l]
    memory = [l for l in out.splitlines() if l.strip().startswith("memory per replica:")]
    assert len(chosen) == 2 and len(memory) == 2, out
    assert "AdamW state (1/8 shard)" in memory[0] and "(1/8 shard)" not in memory[1], memory

    def gib(line):  # "...: 50.7 GiB in all"
        value, unit = line.rsplit(": ", 1)[1].split()[:2]
        assert unit == "GiB", line
        return float(value)
    # 80 GB = 74.5 GiB; ZeRO saves (12 bytes of master weights and AdamW state) × 7/8 of
    # 1,557,686,400 parameters = 15.2 GiB
    assert gib(memory[0]) <= 74.5 and gib(memory[1]) <= 74.5, memory
    saved = gib(memory[1]) - gib(memory[0])
    assert abs(saved - 12 * 7 / 8 * 1557686400 / 2**30) <= 0.1, (saved, memory)


@check
def recipe_gpt2_124m_single_gpu_accumulates():
    p = sh(["bash", "scripts/run_gpt2_124m.sh", "--micro-batch", "64", "--dry-run"])
    assert p.returncode == 0, p.stderr
    assert "× 8 accumulation × 1 replica" in p.stdout, p.stdout
    assert "mpirun" not in p.stdout, "one GPU should not go through mpirun"
    for flag in ("-d 524288", "--warmup 700", "-l 6e-4", "-c 0.1", "--padded-vocab 50304",
                 "--train-tokens 10000000000"):
        assert flag in p.stdout, "missing %s in:\n%s" % (flag, p.stdout)
    assert " -n " not in p.stdout, "the steps should come from --train-tokens:\n" + p.stdout


@check
def recipe_gpt2_124m_steps_from_tokens_as_the_trainer_prints_them():
    p = sh(["bash", "scripts/run_gpt2_124m.sh", "--dry-run"])
    assert p.returncode == 0, p.stderr
    division = next((l for l in p.stdout.splitlines() if l.startswith("steps from --train-tokens")), "")
    # by hand: 19,073 * 524,288 = 9,999,745,024, which leaves out 254,976 of the 10e9 tokens
    assert division == ("steps from --train-tokens: 10,000,000,000 tokens / 524,288 tokens per step = "
                        "19,073 steps (rounding down leaves out the last 254,976 tokens)"), division
    if not os.path.exists(os.path.join(ROOT, "train")):
        raise Skip("./train is not built")
    t = sh(["./train", "--max-seq-len", "1024", "-t", "1024", "-b", "1", "-d", "524288",
            "--train-tokens", "10000000000", "--dry-run", "1"])
    assert t.returncode == 0, t.stdout + t.stderr
    assert division in t.stdout.splitlines(), "the trainer printed:\n" + t.stdout
    assert "19,073 steps = 9,999,745,024 tokens" in t.stdout, t.stdout


@check
def recipe_gpt2_124m_refuses_impossible_split():
    for args, env in ((["--gpus", "3"], {}), (["--gpus", "8"], {"MICRO_BATCH": "48"}),
                      (["--gpus", "16"], {"MICRO_BATCH": "64"}), (["--micro-batch", "0"], {})):
        p = sh(["bash", "scripts/run_gpt2_124m.sh", "--dry-run"] + args, env=env)
        assert p.returncode != 0, "accepted %s %s:\n%s" % (args, env, p.stdout)
        assert "error:" in p.stderr, p.stderr


def built_train():
    if not os.path.exists(os.path.join(ROOT, "train")):
        raise Skip("./train is not built")
    return {"TRAIN_BIN": "./train"}  # the same plan code as train_gpt (host/run.h), runnable anywhere


@check
def recipe_gpt2_124m_dry_run_prints_the_trainers_plan_for_8_replicas():
    p = sh(["bash", "scripts/run_gpt2_124m.sh", "--gpus", "8", "--dry-run", "--", "--device", "h100-sxm",
                "--device-memory", "1TB"],  # ./train's 64×1024 needs 118 GiB; this is a plan
           env=built_train())
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "(the plan is for --replicas 8)" in out, out
    for start in ("compute: ", "communication: 1 all-reduce", "estimate for h100-sxm (989 TFLOP/s"):
        assert any(l.strip().startswith(start) for l in out.splitlines()), "no %r line in:\n%s" % (start, out)
    # the ring by hand: each replica sends 2·(R−1)/R of the float32 gradients, printed in MiB
    params = int(next(l for l in out.splitlines() if "parameters" in l and "model:" in l)
                 .split(", ")[-1].split()[0].replace(",", ""))
    assert "each replica sends and receives %.1f MiB" % (2 * 7 / 8 * 4 * params / 2**20) in out, out
    rows = [l.split() for l in out.splitlines() if l.strip().endswith("<- this run")]
    assert len(rows) == 1 and rows[0][:2] == ["8", "1"], "the table's row for this run: %s" % rows


@check
def recipe_gpt2_124m_micro_batch_from_memory():
    """The default, -b auto: the GPU trainer's own choice for 80GB per GPU (its estimate equals
    its allocations, test/gpu_trainer/trainer.cu checks that); one twice as large must be refused."""
    if not os.path.exists(os.path.join(ROOT, "train_gpt_cpu")):
        raise Skip("./train_gpt_cpu is not built")
    env = {"TRAIN_BIN": "./train_gpt_cpu", "PATH": fake_nvidia_smi(False)}
    for gpus, B, A in (("8", 64, 1), ("1", 128, 4)):
        p = sh(["bash", "scripts/run_gpt2_124m.sh", "--gpus", gpus, "--dry-run"], env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "plans for 80GB per GPU" in p.stdout, p.stdout
        assert "micro-batch chosen from memory: B=%d" % B in p.stdout, p.stdout
        assert "%d×1024 = %s tokens × %d accumulation" % (B, "{:,}".format(B * 1024), A) in p.stdout, p.stdout
        memory = next(l for l in p.stdout.splitlines() if "memory per replica" in l)
        assert memory.endswith("GiB in all") and float(memory.split(": ")[-1].split()[0]) <= 80e9 / 2**30, memory
        p = sh(["bash", "scripts/run_gpt2_124m.sh", "--gpus", gpus, "--micro-batch", str(2 * B), "--dry-run",
                "--device-memory", "80GB"], env=env)
        if gpus == "8":  # 128×1024 over 8 GPUs is more than the global batch: the script refuses
            assert p.returncode == 2 and "error:" in p.stderr, p.stdout + p.stderr
        else:
            assert p.returncode == 1, p.stdout + p.stderr
            assert "the largest micro-batch that fits and splits the global batch is --batch-size %d" % B in p.stderr, p.stderr


@check
def launchers_dry_run_prints_the_trainers_plan():
    p = sh(["bash", "scripts/run_node.sh", "--gpus", "4", "--dry-run", "-b", "4", "-t", "64", "-d", "4096"],
           env=built_train())
    assert p.returncode == 0, p.stdout + p.stderr
    assert "4×64 = 256 tokens × 4 accumulation × 4 replicas = 4,096 tokens per step" in p.stdout, p.stdout
    assert "(the plan is for --replicas 4)" in p.stdout, p.stdout
    # a device the trainer does not know: its one line and exit 2, through the launcher
    p = sh(["bash", "scripts/run_1gpu.sh", "--dry-run", "--device", "b300"], env=built_train())
    assert p.returncode == 2, "exit %d: %s" % (p.returncode, p.stdout + p.stderr)
    assert "unknown device 'b300'" in p.stderr, p.stderr
    # a trainer that is not built: the batch arithmetic only, and it says so
    p = sh(["bash", "scripts/run_1gpu.sh", "--dry-run"], env={"TRAIN_BIN": os.path.join(TMP.name, "none")})
    assert p.returncode == 0 and "is not built" in p.stdout, p.stdout + p.stderr


@check
def dry_run_is_spelt_alike_in_the_trainer_and_every_script():
    """--dry-run 1, --dry-run=1 and --dry-run alone plan and launch nothing, in ./train and in every
    script; --dry-run 0 launches (here: fails for want of the trainer or a GPU); anything else is refused."""
    env = built_train()
    scripts = (["scripts/run_1gpu.sh"], ["scripts/run_node.sh", "--gpus", "2"],
               ["scripts/run_gpt2_124m.sh"], ["scripts/run_tinyshakespeare.sh", "--cpu"])
    for spelling in (["--dry-run"], ["--dry-run", "1"], ["--dry-run=1"]):
        p = sh(["./train"] + spelling + ["-n", "5"])
        assert p.returncode == 0 and "<- this run" in p.stdout, "%s: %s" % (spelling, p.stdout + p.stderr)
        p = sh(["./train", "-n", "5"] + spelling)  # last on the line
        assert p.returncode == 0 and "<- this run" in p.stdout, "%s last: %s" % (spelling, p.stdout + p.stderr)
        for script in scripts:
            p = sh(["bash"] + script + spelling, env=dict(env, PATH=fake_nvidia_smi(False)))
            assert p.returncode == 0, "%s %s: exit %d: %s" % (script, spelling, p.returncode, p.stdout + p.stderr)
            assert "command: " in p.stdout and "<- this run" in p.stdout, "%s %s: %s" % (script, spelling, p.stdout)
    none = {"TRAIN_BIN": os.path.join(TMP.name, "no_such_trainer"), "PATH": fake_nvidia_smi(False)}
    for script, why in ((["scripts/run_1gpu.sh"], "not found or not executable"),
                        (["scripts/run_gpt2_124m.sh"], "no GPU visible")):
        p = sh(["bash"] + script + ["--dry-run", "0"], env=none)
        assert p.returncode == 2 and why in p.stderr, "%s --dry-run 0 should launch: %s" % (script, p.stdout + p.stderr)
    p = sh(["./train", "--dry-run", "2"])
    assert p.returncode == 2 and "--dry-run expects 0 or 1, got '2'" in p.stderr, p.stderr
    for script in scripts:
        p = sh(["bash"] + script + ["--dry-run", "2"], env=env)
        assert p.returncode == 2 and "--dry-run expects 0 or 1, got '2'" in p.stderr, "%s: %s" % (script, p.stderr)


@check
def dry_run_without_train_gpt_plans_with_train_gpt_cpu():
    """A checkout where only train_gpt_cpu is built: the launchers' dry run plans with it, and says so."""
    if not os.access(os.path.join(ROOT, "train_gpt_cpu"), os.X_OK):
        raise Skip("./train_gpt_cpu is not built")
    clone = os.path.join(TMP.name, "checkout_without_train_gpt")
    shutil.copytree(os.path.join(ROOT, "scripts"), os.path.join(clone, "scripts"))
    os.symlink(os.path.join(ROOT, "train_gpt_cpu"), os.path.join(clone, "train_gpt_cpu"))
    env = {"PATH": fake_nvidia_smi(False)}
    for script in (["run_1gpu.sh", "-n", "5"], ["run_gpt2_124m.sh", "--gpus", "8"]):
        p = subprocess.run(["bash", os.path.join(clone, "scripts", script[0]), "--dry-run"] + script[1:],
                           capture_output=True, text=True, timeout=120,
                           env={k: v for k, v in dict(os.environ, **env).items() if k != "TRAIN_BIN"})
        assert p.returncode == 0, "%s: exit %d: %s" % (script[0], p.returncode, p.stdout + p.stderr)
        assert "./train_gpt is not built; ./train_gpt_cpu (the same source on the CPU runtime) plans instead" \
            in p.stdout, p.stdout
        assert "plan (./train_gpt_cpu ... --dry-run 1" in p.stdout and "<- this run" in p.stdout, p.stdout


@check
def recipe_tinyshakespeare_dry_run():
    p = sh(["bash", "scripts/run_tinyshakespeare.sh", "--cpu", "--dry-run"])
    assert p.returncode == 0, p.stderr
    # the small default model of docs/reproduce.md's table: 16×64 tokens, 300 steps, the GPT-2 vocabulary
    assert "micro-batch 16×64 = 1,024 tokens × 1 accumulation × 1 replica = 1,024 tokens per step; " \
           "300 steps = 307,200 tokens" in p.stdout, p.stdout
    assert "command: ./train " in p.stdout and "--channels" not in p.stdout, p.stdout
    assert "--vocab 50257 --padded-vocab 50304" in p.stdout, p.stdout
    p = sh(["bash", "scripts/run_tinyshakespeare.sh", "--cpu", "--dry-run"], env={"TOTAL_BATCH": "300"})
    assert p.returncode != 0, "300 tokens is not a multiple of 16x64 and should be refused"


def fake_nvidia_smi(lists_a_gpu):
    """A directory holding an nvidia-smi that lists one GPU, or fails as it does without a driver."""
    d = os.path.join(TMP.name, "smi_gpu" if lists_a_gpu else "smi_none")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "nvidia-smi"), "w") as f:
        f.write("#!/bin/sh\n" + ("echo 'GPU 0: Fake H100 (UUID: GPU-0)'\n" if lists_a_gpu else
                                 "echo 'NVIDIA-SMI has failed' >&2; exit 9\n"))
    os.chmod(os.path.join(d, "nvidia-smi"), 0o755)
    return d + os.pathsep + os.environ["PATH"]


@check
def recipe_tinyshakespeare_picks_a_trainer_that_can_run():
    # no GPU: ./train and the small model, whether or not ./train_gpt was built (CI builds it)
    p = sh(["bash", "scripts/run_tinyshakespeare.sh", "--dry-run"], env={"PATH": fake_nvidia_smi(False)})
    assert p.returncode == 0, p.stderr
    assert "trainer: ./train on the CPU (no GPU visible to nvidia-smi)" in p.stdout, p.stdout
    assert "command: ./train " in p.stdout and "micro-batch 16×64" in p.stdout, p.stdout
    # a GPU: ./train_gpt with GPT-2 small's shape when it is built, else ./train and a note
    p = sh(["bash", "scripts/run_tinyshakespeare.sh", "--dry-run"], env={"PATH": fake_nvidia_smi(True)})
    assert p.returncode == 0, p.stderr
    if os.access(os.path.join(ROOT, "train_gpt"), os.X_OK):
        assert "trainer: ./train_gpt (a GPU is visible)" in p.stdout, p.stdout
        assert "command: ./train_gpt " in p.stdout and "--channels 768" in p.stdout, p.stdout
    else:
        assert "./train_gpt is not built: make train_gpt" in p.stdout, p.stdout
        assert "command: ./train " in p.stdout, p.stdout
    # and the 124M recipe refuses to start without a GPU (its dry run still works)
    p = sh(["bash", "scripts/run_gpt2_124m.sh"], env={"PATH": fake_nvidia_smi(False)})
    assert p.returncode != 0 and "no GPU visible to nvidia-smi" in p.stderr, p.stdout + p.stderr


@check
def every_script_help_works_without_its_dependencies():
    # python3 -S: no site-packages, so neither tiktoken, numpy, tqdm nor datasets can be imported
    for script in sorted(os.listdir(os.path.join(ROOT, "data"))):
        if not script.endswith(".py") or script == "shards.py":
            continue
        p = sh([sys.executable, "-S", os.path.join("data", script), "--help"])
        assert p.returncode == 0 and p.stdout.startswith("usage:"), \
            "%s --help: exit %d\n%s" % (script, p.returncode, (p.stdout + p.stderr)[-400:])
    for script in ("run_tinyshakespeare.sh", "run_gpt2_124m.sh"):
        p = sh(["bash", os.path.join("scripts", script), "--help"])
        assert p.returncode == 0 and "--dry-run" in p.stdout, script + ": " + p.stderr


# --------------------------------------------------------------------------- evaluation files

@check
def eval_file_layout_is_llm_c_s():
    """write_eval_file against the layout parsed by hand here, then read back by the module."""
    examples = [([5, 6, 7], [[8], [9, 10], [11, 12, 13], [14]], 2),
                ([1], [[2, 3], [4], [5], [6, 7, 8, 9]], 0)]
    path = os.path.join(TMP.name, "eval.bin")
    shards.write_eval_file(path, examples, quiet=True)
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    stream = list(struct.unpack("<%dH" % ((len(data) - 1024) // 2), data[1024:]))
    # example 0: 65535, bytes, index 0, label 2, 4 endings, context 3 tokens, endings 1+2+3+1 tokens
    first = [65535, 0, 0, 2, 4, 3, 5, 6, 7, 1, 8, 2, 9, 10, 3, 11, 12, 13, 1, 14]
    first[1] = 2 * len(first)
    second = [65535, 0, 1, 0, 4, 1, 1, 2, 2, 3, 1, 4, 1, 5, 4, 6, 7, 8, 9]
    second[1] = 2 * len(second)
    assert stream == first + second, stream
    assert header[:4] == (20240522, 1, 2, max(first[1], second[1])) and not any(header[4:]), header[:5]
    assert shards.read_eval_file(path) == examples
    for bad in ([([1], [[2], [3]], 2)], [([], [[2], [3]], 0)], [([1], [[2], [65535]], 0)]):
        try:
            shards.write_eval_file(path, bad, quiet=True)
        except ValueError:
            continue
        raise AssertionError("write_eval_file accepted %s" % bad)


# --------------------------------------------------------------------------- plot

def synthetic_log(path, steps=120, offset=0.0):
    with open(path, "w") as f:
        f.write(json.dumps({"type": "config", "model": {"layers": 2}}) + "\n")
        for s in range(1, steps + 1):
            f.write(json.dumps({"type": "train", "step": s, "steps": steps, "tokens": s * 4096,
                                "loss": 3 + offset + 5 / (1 + s / 10), "lr": 6e-4 * min(1, s / 10),
                                "grad_norm": 0.5 + 2 / s, "ms": 80.0, "tokens_per_s": 50000 + s,
                                "future_field": [1, 2]}) + "\n")
            if s % 20 == 0:
                f.write(json.dumps({"type": "val", "step": s, "tokens": s * 4096,
                                    "val_loss": 3.2 + offset + 5 / (1 + s / 10)}) + "\n")
            if s % 50 == 0:
                f.write(json.dumps({"type": "sample", "step": s, "text": "To be"}) + "\n")
            if s == 60:
                f.write(json.dumps({"type": "something_new"}) + "\n")


@check
def plot_log_reader_ignores_other_records_and_keeps_latest_step():
    # read_log needs no matplotlib: import scripts/plot.py as a module
    spec = importlib.util.spec_from_file_location("plot", os.path.join(ROOT, "scripts", "plot.py"))
    plot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plot)
    log = os.path.join(TMP.name, "resumed.jsonl")
    with open(log, "w") as f:
        # steps 1..10 with loss 9, then the run resumed from step 5 logs 6..12 with loss 2
        for steps, loss in ((range(1, 11), 9.0), (range(6, 13), 2.0)):
            for s in steps:
                f.write(json.dumps({"type": "train", "step": s, "tokens": s * 10, "loss": loss,
                                    "extra": {"x": 1}}) + "\n")
        f.write(json.dumps({"type": "sample", "step": 12, "text": "x"}) + "\n")
        f.write(json.dumps({"type": "val", "step": 12, "tokens": 120, "val_loss": 1.5}) + "\n")
        f.write('{"type": "train", "step": 13, "tok')  # torn last line of a killed run
    with contextlib.redirect_stderr(io.StringIO()) as err:
        train, val = plot.read_log(log)
    assert "not JSON" in err.getvalue(), "the torn line should be reported"
    assert [r["step"] for r in train] == list(range(1, 13)), [r["step"] for r in train]
    assert all(r["loss"] == 2.0 for r in train if r["step"] >= 6), "stale records kept after resume"
    assert [r["val_loss"] for r in val] == [1.5], val


@check
def plot_writes_png():
    if importlib.util.find_spec("matplotlib") is None:
        raise Skip("matplotlib not importable")
    logs = []
    for name, off in (("run_a", 0.0), ("run_b", 0.4)):
        os.makedirs(os.path.join(TMP.name, name), exist_ok=True)
        logs.append(os.path.join(TMP.name, name, "log.jsonl"))
        synthetic_log(logs[-1], offset=off)
    png = os.path.join(TMP.name, "plot.png")
    p = sh([sys.executable, "scripts/plot.py", *logs, "-o", png, "--smooth", "5"])
    assert p.returncode == 0, "exit %d: %s" % (p.returncode, p.stderr[-500:])
    assert os.path.isfile(png), "no PNG written"
    with open(png, "rb") as f:
        head = f.read(8)
    assert head == b"\x89PNG\r\n\x1a\n", "not a PNG: %r" % head
    assert os.path.getsize(png) > 10 * 1024, "PNG only %d bytes" % os.path.getsize(png)


@check
def plot_marks_the_corpus_entropy_and_writes_next_to_the_log():
    """The trainer's config record on the built-in corpus carries its entropy (the line the plot
    draws); with shards it does not. Without -o the PNG goes next to the first log, not into the
    current directory."""
    spec = importlib.util.spec_from_file_location("plot", os.path.join(ROOT, "scripts", "plot.py"))
    plot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plot)
    if not os.path.exists(os.path.join(ROOT, "train")):
        raise Skip("./train is not built")
    run = os.path.join(TMP.name, "entropy_run")
    p = sh(["./train", "--layers", "1", "--heads", "1", "--channels", "8", "--max-seq-len", "8", "-b", "2",
            "-t", "8", "-n", "2", "--val-every", "0", "--sample-every", "0", "--threads", "1", "-o", run])
    assert p.returncode == 0, p.stdout + p.stderr
    printed = float(p.stdout.split("its entropy is ")[1].split()[0])  # the data line, 4 decimals
    entropy = plot.corpus_entropy(os.path.join(run, "log.jsonl"))
    assert entropy is not None and abs(entropy - printed) <= 0.5e-4, (entropy, printed)
    shards_log = os.path.join(TMP.name, "shards_log.jsonl")
    with open(shards_log, "w") as f:
        f.write(json.dumps({"type": "config", "V": 50257}) + "\n")
    assert plot.corpus_entropy(shards_log) is None
    if importlib.util.find_spec("matplotlib") is None:
        raise Skip("matplotlib not importable")
    p = sh([sys.executable, "scripts/plot.py", os.path.join(run, "log.jsonl")])
    assert p.returncode == 0 and os.path.isfile(os.path.join(run, "training.png")), p.stdout + p.stderr
    assert not os.path.exists(os.path.join(ROOT, "training.png")), "a PNG was written into the checkout"


@check
def plot_rejects_log_without_train_records():
    if importlib.util.find_spec("matplotlib") is None:
        raise Skip("matplotlib not importable")
    log = os.path.join(TMP.name, "empty.jsonl")
    with open(log, "w") as f:
        f.write(json.dumps({"type": "config"}) + "\n")
    p = sh([sys.executable, "scripts/plot.py", log, "-o", os.path.join(TMP.name, "empty.png")])
    assert p.returncode != 0, "plot.py accepted a log with no train records"
    assert "no train records" in p.stderr, p.stderr


# --------------------------------------------------------------------------- runner

def main():
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
