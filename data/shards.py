"""Shared helpers for the data scripts: the on-disk formats the trainer reads.

Token shard (what -i/-j point at), in one of llm.c's two kinds:
    header: 256 little-endian int32  [0]=20240520 (magic) [1]=1 (version)
                                     [2]=number of tokens, rest zero
    body:   the tokens, uint16 little-endian
  or, for vocabularies past 65,536 (Llama-3's 128,256; token_bytes=4):
    header: 256 little-endian int32  [0]=20240801 (magic) [1]=7 (version)
                                     [2]=number of tokens, rest zero
    body:   the tokens, uint32 little-endian
  (the magic, version and token type of llm.c's dev/data/data_common.py, whose
  write_datafile takes model_desc "gpt-2" or "llama-3").  Every shard of a run
  is of one kind.

Tokenizer file (what --tokenizer points at, used to print samples):
    header: 256 little-endian uint32 [0]=20240328 (magic) [1]=2 (version)
                                     [2]=vocab size [3]=end-of-text id
    body:   for each token id in order: uint8 length n (1..255), n raw bytes

Evaluation file (what --hellaswag points at; llm.c's format for multiple-choice evals):
    header: 256 little-endian int32  [0]=20240522 (magic) [1]=1 (version)
                                     [2]=number of examples [3]=longest example in bytes
    body:   per example, uint16: 65535, the example's size in bytes (from the
            65535 on), its index, its label (the correct ending), the number of
            endings K, the context's length and tokens, then for each ending its
            length and tokens

Only the standard library is imported at module level, so that
text_to_shards.py in byte mode (and the tests) work without numpy.
Download helpers import their optional dependencies lazily.
"""
import contextlib
import os
import stat
import struct
import sys
from array import array

EVAL_MAGIC = 20240522
EVAL_VERSION = 1
EVAL_START = 65535
SHARD_MAGIC = 20240520
SHARD_VERSION = 1
SHARD32_MAGIC = 20240801  # llm.c's "llama-3" shards: uint32 tokens
SHARD32_VERSION = 7
# token bytes -> (magic, version) of the shard kind
SHARD_KINDS = {2: (SHARD_MAGIC, SHARD_VERSION), 4: (SHARD32_MAGIC, SHARD32_VERSION)}
_UINT32 = "I" if array("I").itemsize == 4 else "L"  # the array typecode of 4-byte unsigned ints
TOKENIZER_MAGIC = 20240328
TOKENIZER_VERSION = 2
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
GPT2_EOT = 50256
GPT2_VOCAB = 50257


def _pack_header(values, fmt_char):
    values = list(values) + [0] * (HEADER_INTS - len(values))
    return struct.pack("<%d%s" % (HEADER_INTS, fmt_char), *values)


def _as_uint16_bytes(tokens):
    """Little-endian uint16 bytes of `tokens`; ValueError if any is out of range.

    Accepts a list/range/array of ints, bytes (one token per byte), or a numpy
    integer array (fast path, so 100M-token fineweb shards are not converted
    element by element).
    """
    if isinstance(tokens, (bytes, bytearray)):
        # byte-level tokens: each byte becomes the low half of a uint16.  (array("H",
        # some_bytes) would instead reinterpret the raw bytes, pairing them up.)
        out = bytearray(2 * len(tokens))
        out[0::2] = tokens
        return bytes(out)
    if hasattr(tokens, "dtype"):  # numpy array, checked without importing numpy
        if tokens.size and (int(tokens.min()) < 0 or int(tokens.max()) >= 65536):
            raise ValueError("token ids must be in [0, 65536) to fit in uint16; "
                             "got range [%d, %d]" % (tokens.min(), tokens.max()))
        return tokens.astype("<u2", copy=False).tobytes()
    try:
        arr = array("H", tokens)
    except OverflowError:
        bad = next(t for t in tokens if not 0 <= t < 65536)
        raise ValueError("token id %d does not fit in uint16 (must be < 65536)" % bad) from None
    if sys.byteorder != "little":
        arr.byteswap()
    return arr.tobytes()


def _as_uint32_bytes(tokens):
    """Little-endian uint32 bytes of `tokens` (as _as_uint16_bytes takes them); ValueError if
    any is out of range."""
    if isinstance(tokens, (bytes, bytearray)):
        out = bytearray(4 * len(tokens))
        out[0::4] = tokens
        return bytes(out)
    if hasattr(tokens, "dtype"):
        if tokens.size and (int(tokens.min()) < 0 or int(tokens.max()) >= 2 ** 32):
            raise ValueError("token ids must be in [0, 2^32) to fit in uint32; "
                             "got range [%d, %d]" % (tokens.min(), tokens.max()))
        return tokens.astype("<u4", copy=False).tobytes()
    arr = array(_UINT32)
    try:
        arr.extend(tokens)
    except OverflowError:
        bad = next(t for t in tokens if not 0 <= t < 2 ** 32)
        raise ValueError("token id %d does not fit in uint32 (must be < 2^32)" % bad) from None
    if sys.byteorder != "little":
        arr.byteswap()
    return arr.tobytes()


def token_bytes_for_vocab(vocab):
    """2 (uint16 shards) for a vocabulary that fits them, else 4 (uint32)."""
    return 2 if vocab <= 65536 else 4


class ShardWriter:
    """Writes one shard incrementally; the token count is patched in on close.

    Streaming matters for TinyStories' ~925M-token train file, which would not
    fit in memory as a Python list.  Use as a context manager.  On an error the
    half-written file is removed so it can never be mistaken for a good shard.
    """

    def __init__(self, path, token_bytes=2):
        if token_bytes not in SHARD_KINDS:
            raise ValueError("token_bytes must be 2 (uint16) or 4 (uint32), not %r" % (token_bytes,))
        self.path = path
        self.count = 0
        self.token_bytes = token_bytes
        self._magic, self._version = SHARD_KINDS[token_bytes]
        self._f = open(path, "wb")
        self._f.write(_pack_header([self._magic, self._version, 0], "i"))

    def write(self, tokens):
        data = _as_uint32_bytes(tokens) if self.token_bytes == 4 else _as_uint16_bytes(tokens)
        self._f.write(data)
        self.count += len(data) // self.token_bytes

    def close(self):
        """Patch the count in and close; on any error (a full disk shows here, when the buffer is
        flushed) the half-written file is removed before the error goes on."""
        try:
            if self.count >= 2 ** 31:
                raise ValueError("%s: %d tokens do not fit in the int32 header" % (self.path, self.count))
            self._f.seek(0)
            self._f.write(_pack_header([self._magic, self._version, self.count], "i"))
            self._f.close()
        except BaseException:
            self.abort()
            raise

    def abort(self):
        try:
            self._f.close()  # flushes what is buffered, which fails again on a full disk
        except OSError:
            pass
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False


def write_shard(path, tokens, quiet=False, token_bytes=2):
    """Write a whole shard at once; returns the number of tokens written.  token_bytes=4
    writes llm.c's uint32 ("llama-3") kind."""
    with ShardWriter(path, token_bytes) as w:
        w.write(tokens)
    if not quiet:
        print("wrote %s tokens to %s" % (format(w.count, ","), path))
    return w.count


def shard_header(path):
    """(token count, token bytes: 2 or 4) after checking magic, version and file size."""
    with open(path, "rb") as f:
        raw = f.read(HEADER_BYTES)
    if len(raw) != HEADER_BYTES:
        raise ValueError("%s: too short for a shard header" % path)
    magic, version, count = struct.unpack("<3i", raw[:12])
    token_bytes = next((b for b, (m, _) in SHARD_KINDS.items() if m == magic), None)
    if token_bytes is None:
        raise ValueError("%s: bad magic %d (expected %d or %d)" % (path, magic, SHARD_MAGIC, SHARD32_MAGIC))
    if version != SHARD_KINDS[token_bytes][1]:
        raise ValueError("%s: unsupported version %d" % (path, version))
    expected = HEADER_BYTES + token_bytes * count
    actual = os.path.getsize(path)
    if actual != expected:
        raise ValueError("%s: header says %d tokens (%d bytes) but file has %d bytes"
                         % (path, count, expected, actual))
    return count, token_bytes


def read_shard_header(path):
    """Return the token count after checking magic, version and file size."""
    return shard_header(path)[0]


def read_shard(path):
    """Return the tokens of a shard as array('H') (uint16 shards) or a 4-byte array (uint32)."""
    count, token_bytes = shard_header(path)
    arr = array("H" if token_bytes == 2 else _UINT32)
    with open(path, "rb") as f:
        f.seek(HEADER_BYTES)
        arr.fromfile(f, count)
    if sys.byteorder != "little":
        arr.byteswap()
    return arr


def write_tokenizer(path, token_bytes, eot, quiet=False):
    """Write the tokenizer file; token_bytes[i] is the raw byte string of id i."""
    for i, b in enumerate(token_bytes):
        if not 1 <= len(b) <= 255:
            raise ValueError("token %d is %d bytes long; the format allows 1..255" % (i, len(b)))
    with open(path, "wb") as f:
        f.write(_pack_header([TOKENIZER_MAGIC, TOKENIZER_VERSION, len(token_bytes), eot], "I"))
        for b in token_bytes:
            f.write(bytes([len(b)]) + b)
    if not quiet:
        print("wrote tokenizer (%d tokens, end-of-text %d) to %s" % (len(token_bytes), eot, path))


def read_tokenizer(path):
    """Return (token_bytes list, eot id); raises ValueError on a malformed file."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < HEADER_BYTES:
        raise ValueError("%s: too short for a tokenizer header" % path)
    magic, version, vocab, eot = struct.unpack("<4I", data[:16])
    if magic != TOKENIZER_MAGIC or version != TOKENIZER_VERSION:
        raise ValueError("%s: bad magic/version %d/%d" % (path, magic, version))
    pos, tokens = HEADER_BYTES, []
    for i in range(vocab):
        n = data[pos] if pos < len(data) else 0
        if n == 0 or pos + 1 + n > len(data):
            raise ValueError("%s: entry %d is truncated or empty" % (path, i))
        tokens.append(data[pos + 1:pos + 1 + n])
        pos += 1 + n
    if pos != len(data):
        raise ValueError("%s: %d trailing bytes after %d entries" % (path, len(data) - pos, vocab))
    return tokens, eot


def write_eval_file(path, examples, quiet=False):
    """Write multiple-choice examples, each a (context_tokens, [ending_tokens, ...], label)."""
    body, longest = array("H"), 0
    for index, (context, endings, label) in enumerate(examples):
        ex = [EVAL_START, 0, index, label, len(endings), len(context)] + list(context)
        for ending in endings:
            ex += [len(ending)] + list(ending)
        if not 0 <= label < len(endings) or not context or not all(endings):
            raise ValueError("example %d: label %d of %d endings, or an empty context or ending"
                             % (index, label, len(endings)))
        if 2 * len(ex) >= 65536 or not all(0 <= t < EVAL_START for t in ex[5:]) or index >= EVAL_START:
            raise ValueError("example %d does not fit the format (uint16 sizes, tokens below 65535)" % index)
        ex[1] = 2 * len(ex)
        longest = max(longest, ex[1])
        body.extend(ex)
    if sys.byteorder != "little":
        body.byteswap()
    with open(path, "wb") as f:
        f.write(_pack_header([EVAL_MAGIC, EVAL_VERSION, len(examples), longest], "i"))
        f.write(body.tobytes())
    if not quiet:
        print("wrote %s examples to %s" % (format(len(examples), ","), path))


def read_eval_file(path):
    """The examples of an evaluation file, as write_eval_file takes them; ValueError if damaged."""
    with open(path, "rb") as f:
        data = f.read()
    magic, version, count, _ = struct.unpack("<4i", data[:16])
    if magic != EVAL_MAGIC or version != EVAL_VERSION:
        raise ValueError("%s: bad magic/version %d/%d" % (path, magic, version))
    s = array("H", data[HEADER_BYTES:])
    if sys.byteorder != "little":
        s.byteswap()
    examples, pos = [], 0
    for i in range(count):
        if s[pos] != EVAL_START:
            raise ValueError("%s: example %d does not start with %d" % (path, i, EVAL_START))
        end, label, k = pos + s[pos + 1] // 2, s[pos + 3], s[pos + 4]
        p = pos + 5
        parts = []
        for _ in range(k + 1):
            n = s[p]
            parts.append(list(s[p + 1:p + 1 + n]))
            p += 1 + n
        if p != end:
            raise ValueError("%s: example %d's size field says %d bytes, it holds %d" % (path, i, 2 * (end - pos), 2 * (p - pos)))
        examples.append((parts[0], parts[1:], label))
        pos = end
    if pos != len(s):
        raise ValueError("%s: %d bytes after the last example" % (path, 2 * (len(s) - pos)))
    return examples


def byte_tokenizer_table():
    """The 256-entry table of byte mode: token id i is the single byte i."""
    return [bytes([i]) for i in range(256)]


# --------------------------------------------------------------------------
# Helpers for the downloaders.  Imports are lazy so the module stays
# standard-library-only for callers that do not download anything.

def die(msg):
    """One clear line on stderr and a non-zero exit."""
    print("error: " + msg, file=sys.stderr)
    sys.exit(1)


def usage_error(msg):
    """A command-line misuse: one line on stderr and exit 2, like the trainers."""
    print("error: " + msg, file=sys.stderr)
    sys.exit(2)


def file_kind(path):
    """What a path that is not a regular file is, in words ("a directory", "a FIFO (named pipe)", ...);
    None for a regular file (or a link to one), "missing" when nothing is there."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # nothing there (or a file where a folder would be)
        return "missing"
    except OSError as e:
        return "unreadable (%s)" % e.strerror
    for test, kind in ((stat.S_ISREG, None), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def check_input_file(path):
    """An input that is missing, a directory, a FIFO or a device: one line naming it and what it
    is, exit 1 (before any long work; a FIFO would otherwise block or be read only once)."""
    kind = file_kind(path)
    if kind == "missing":
        die("input file not found: %s" % path)
    if kind is not None:
        die("input %s is %s, not a regular file" % (path, kind))


def check_output_dir(path):
    """The folder shards will be written in, checked before any long work without making it: it must
    be a writable folder, or not exist yet under a writable folder. One line and exit 1 otherwise."""
    kind = file_kind(path)
    if kind == "missing":
        parent = os.path.dirname(os.path.abspath(path))
        while file_kind(parent) == "missing":
            parent = os.path.dirname(parent)
        if file_kind(parent) != "a directory":
            die("cannot make the output folder %s: %s is %s, not a folder"
                % (path, parent, file_kind(parent) or "a file"))
        if not os.access(parent, os.W_OK | os.X_OK):
            die("cannot make the output folder %s: %s is not writable" % (path, parent))
    elif kind != "a directory":
        die("output folder %s is %s, not a folder" % (path, kind or "a file"))
    elif not os.access(path, os.W_OK | os.X_OK):
        die("output folder %s is not writable" % path)


def check_range(option, value, low, high, what):
    """A command-line count outside [low, high]: one line on stderr and exit 2 (a usage error),
    before any download or long work."""
    if not low <= value <= high:
        print("error: %s %d is out of range (%s to %s %s)" % (option, value, format(low, ","), format(high, ","), what),
              file=sys.stderr)
        sys.exit(2)


def download(url, path):
    """Download url to path with a tqdm progress bar; exit cleanly when offline.

    Writes to path + ".part" and renames only a complete download, so an
    interrupted one is redone on the next run instead of being used.
    """
    import contextlib
    import urllib.error
    import urllib.request
    try:
        from tqdm import tqdm
    except ImportError:  # no progress bar, but the download still works
        def tqdm(**_):
            return contextlib.nullcontext(type("NoBar", (), {"update": lambda self, n: None})())

    if os.path.exists(path):
        print("%s already present, not downloading" % path)
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".part"
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            total = int(resp.headers.get("Content-Length") or 0) or None
            with open(tmp, "wb") as f, tqdm(total=total, unit="B", unit_scale=True,
                                            unit_divisor=1024, desc=os.path.basename(path)) as bar:
                while True:
                    chunk = resp.read(1 << 20)
                    if not chunk:
                        break
                    f.write(chunk)
                    bar.update(len(chunk))
    except urllib.error.HTTPError as e:
        die("download of %s failed: HTTP %d %s" % (url, e.code, e.reason))
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        die("cannot download %s (no network? %s). Fetch it elsewhere and place it at %s"
            % (url, reason, path))
    os.replace(tmp, path)


GPT2_BPE_URL = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe"
# sha256 of the GPT-2 merge ranks in tiktoken's own file format.  The same bytes
# are published as r50k_base.tiktoken and shipped inside the openai-whisper
# source package (whisper/assets/gpt2.tiktoken), a way to get them from PyPI.
GPT2_RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
GPT2_RANKS_DEFAULT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bpe", "gpt2.tiktoken")


def gpt2_encoding(quiet=False):
    """(tiktoken gpt2 encoding, None), or (None, why it could not be loaded).

    tiktoken downloads the BPE file on first use (and caches it), so a machine
    that was never online fails.  The fallback is a local rank file: the path in
    $GPT2_BPE_FILE, or data/bpe/gpt2.tiktoken; its hash is checked, and it encodes
    exactly like tiktoken's "gpt2" (same ranks, split pattern and end-of-text id).
    """
    try:
        import tiktoken
    except ImportError:
        return None, "tiktoken is not installed (pip install -r data/requirements.txt)"
    try:
        return tiktoken.get_encoding("gpt2"), None
    except Exception as e:  # a connection error whose class depends on the tiktoken version
        why = "tiktoken could not fetch %s (%s)" % (GPT2_BPE_URL, type(e).__name__)
    path = os.environ.get("GPT2_BPE_FILE") or GPT2_RANKS_DEFAULT
    if not os.path.exists(path):
        return None, why + " and there is no local rank file at %s ($GPT2_BPE_FILE)" % path
    try:
        from tiktoken.load import load_tiktoken_bpe
        from tiktoken_ext.openai_public import r50k_pat_str
        ranks = load_tiktoken_bpe(path, expected_hash=GPT2_RANKS_SHA256)
        enc = tiktoken.Encoding(name="gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                                special_tokens={"<|endoftext|>": GPT2_EOT}, explicit_n_vocab=GPT2_VOCAB)
    except Exception as e:
        return None, why + "; local rank file %s unusable: %s" % (path, e)
    if not quiet:
        print("note: gpt2 ranks loaded from local file %s" % path)
    return enc, None


def load_gpt2_encoding():
    """The gpt2 encoding, or a one-line error and exit (for the downloaders)."""
    enc, why = gpt2_encoding()
    if enc is None:
        die(why + ". Offline, data/text_to_shards.py --tokenizer bytes works without it")
    return enc


def gpt2_tokenizer_table(enc):
    """Raw bytes of every gpt2 token id, end-of-text included."""
    return [enc.decode_single_token_bytes(i) for i in range(enc.n_vocab)]
