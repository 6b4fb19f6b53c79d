"""Llama-3's tokenizer file (tokenizer.model) -> token ids and the trainer's tokenizer file.

Needs only the Python standard library (the `regex` package, when installed, is used for
the split pattern as Meta writes it; see "The split pattern" below).

The file.  Llama-3's tokenizer.model is in tiktoken's format: one line per token,
"BASE64_OF_THE_TOKEN'S_BYTES RANK", ranks 0..N-1 (N = 128,000 in Meta's file, which comes
with the weights: original/tokenizer.model in meta-llama/Llama-3.2-1B and its siblings on
Hugging Face).  The rank is the token id, and the order in which byte-pair merges are made.
256 special tokens follow the N ranks, ids N..N+255: <|begin_of_text|> (128000 in Meta's
file), <|end_of_text|> (128001), then the names of Hugging Face's Llama-3.1 and 3.2
tokenizers (DEFAULT_LLAMA_SPECIAL_TOKENS["3.1"] and ["3.2"] in transformers'
convert_llama_weights_to_hf.py).  Other releases name some of ids 128002..128255
differently (Llama-3.0 has reserved tokens at 128004, 128005, 128008 and 128010; Meta's
llama-models names 128005 <|step_id|> and 128011 <|image|>); those names only change how
a sample prints such a token.  Ids 128000 and 128001, the only special tokens written
into shards here, are the same in all of them.

Encoding (as tiktoken's encode_ordinary, which Meta's Tokenizer wraps): the text is cut
into pieces by the split pattern; a piece that is a token is that token; otherwise its
UTF-8 bytes start as one token each, and the adjacent pair whose concatenation has the
lowest rank is merged, again and again (the leftmost of equal pairs first), until no
adjacent pair is a token.  Every single byte is a token (the file is refused otherwise),
so any text encodes: a character with no merges, such as an emoji, becomes its bytes.
Text that looks like a special token ("<|end_of_text|>" in the input) is encoded as
ordinary text, as Meta's encode() does by default and llm.c's scripts do
(split_special_tokens=True).

Documents.  encode_document() gives <|begin_of_text|> + the text's ids + <|end_of_text|>,
Meta's Tokenizer.encode(text, bos=True, eos=True) (its test: "This is a test sentence."
-> 128000, 2028, 374, 264, 1296, 11914, 13, 128001).  llm.c's Llama-3 data scripts lead
each document with 128000 only (they call it "eot"); here each document also ends with
<|end_of_text|>, the token a base Llama-3 stops generating at (eos_token_id 128001 in
Hugging Face's config), so a model trained on these shards learns where a text ends.

The split pattern is Meta's pat_str (PATTERN below), which needs \\p{L} (letters) and
\\p{N} (numbers): the `regex` package has them, Python's `re` does not.  Without `regex`
the same pattern is built for `re` with those classes spelt out from the Unicode database
of this Python (unicodedata: general categories L* and N*) and \\s spelt out as Unicode's
White_Space property (re's own \\s also matches the separators U+001C..U+001F, which
\\p{White_Space}, regex's and tiktoken's \\s, does not).  The two can differ only on
characters whose category differs between the Unicode version of this Python's
unicodedata and that of the `regex` package (or tiktoken's Rust tables): characters new in
the later version, which the earlier calls unassigned.  For ASCII, and for every
character both versions know, they split alike (test/tools/llama3_tokenizer.py checks both).

Command line:
  python3 data/llama3_tokenizer.py tokenizer-file tokenizer.model OUT.bin [--force]
      the trainer's tokenizer file (llm.c's format, data/shards.py), so that samples
      print as text: each base token's bytes, each special token as its name
  python3 data/llama3_tokenizer.py encode tokenizer.model TEXT [--bos]
      TEXT's ids, comma-separated, as the trainer's --prompt takes them
For shards from text files: data/text_to_shards.py --tokenizer llama3 --tokenizer-model PATH.
"""
import argparse
import base64
import binascii
import hashlib
import heapq
import os
import re
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shards import die, write_tokenizer  # noqa: E402

# Meta's pat_str (llama/tokenizer.py in meta-llama/llama3, models/llama3/tokenizer.py in
# meta-llama/llama-models), for the `regex` package.
PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

BEGIN_OF_TEXT = "<|begin_of_text|>"
END_OF_TEXT = "<|end_of_text|>"
NUM_SPECIAL_TOKENS = 256
# Hugging Face's Llama-3.1 / 3.2 names, in id order from the first id after the ranks.
_NAMED = [BEGIN_OF_TEXT, END_OF_TEXT, "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
          "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>", "<|start_header_id|>",
          "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
SPECIAL_TOKENS = _NAMED + ["<|reserved_special_token_%d|>" % i
                           for i in range(3, 3 + NUM_SPECIAL_TOKENS - len(_NAMED))]
MAX_TOKEN_BYTES = 255  # the trainer's tokenizer file stores a token's length in one byte
# Meta's tokenizer.model of Llama-3, 3.1 and 3.2 (one file: 2,183,982 bytes, 128,000 ranks)
META_SHA256 = "82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55"

# Unicode's White_Space property: what \s means to `regex` and to tiktoken.
_WHITE_SPACE = "\\t\\n\\x0b\\x0c\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"


class TokenizerFileError(ValueError):
    """A malformed ranks file: the message is one line naming the file (and line)."""


def read_file(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TokenizerFileError("%s: cannot read the tokenizer file (%s)" % (path, e.strerror or e)) from None


def read_ranks(path):
    """{token bytes: rank} of a tiktoken ranks file, checked; TokenizerFileError if not."""
    return parse_ranks(read_file(path), path)


def parse_ranks(data, path):
    """{token bytes: rank} of the contents of a tiktoken ranks file (`path` names it in errors)."""
    ranks, rank_line, token_line = {}, {}, {}
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue  # tiktoken skips empty lines too
        fields = line.split()
        where = "%s line %d" % (path, number)
        if len(fields) != 2:
            raise TokenizerFileError("%s: expected 'BASE64_TOKEN RANK', got %d field(s)" % (where, len(fields)))
        b64, rank_text = fields
        try:
            token = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raise TokenizerFileError("%s: the token %r is not valid base64" % (where, b64[:40].decode("latin-1"))) \
                from None
        if not token:
            raise TokenizerFileError("%s: the token is empty" % where)
        if not re.fullmatch(rb"[0-9]+", rank_text):
            raise TokenizerFileError("%s: the rank %r is not a non-negative integer"
                                     % (where, rank_text[:40].decode("latin-1")))
        rank = int(rank_text)
        if token in token_line:
            raise TokenizerFileError("%s: the token %r repeats line %d" % (where, token, token_line[token]))
        if rank in rank_line:
            raise TokenizerFileError("%s: the rank %d repeats line %d" % (where, rank, rank_line[rank]))
        ranks[token], token_line[token], rank_line[rank] = rank, number, number
    if not ranks:
        raise TokenizerFileError("%s: holds no tokens" % path)
    n = len(ranks)
    if max(rank_line) != n - 1:
        missing = next(r for r in range(n) if r not in rank_line)
        top = max(rank_line)
        raise TokenizerFileError("%s line %d: rank %d, but the %d ranks must be 0..%d (rank %d is missing)"
                                 % (path, rank_line[top], top, n, n - 1, missing))
    for b in range(256):
        if bytes([b]) not in ranks:
            raise TokenizerFileError("%s: no token for the byte 0x%02x (every single byte must be a token, "
                                     "so that any text can be encoded)" % (path, b))
    return ranks


def _class_of(first_letter):
    """A character class body (for `re`) of the code points whose Unicode general category
    starts with `first_letter` ("L" letters, "N" numbers), from this Python's unicodedata."""
    spans, start = [], None
    for cp in range(sys.maxunicode + 2):
        inside = cp <= sys.maxunicode and unicodedata.category(chr(cp))[0] == first_letter
        if inside and start is None:
            start = cp
        elif not inside and start is not None:
            spans.append((start, cp - 1))
            start = None

    def esc(cp):
        return "\\U%08x" % cp
    return "".join(esc(a) if a == b else esc(a) + "-" + esc(b) for a, b in spans)


def fallback_pattern():
    """PATTERN for Python's `re`: \\p{L}, \\p{N} and \\s spelt out (see the module's doc)."""
    L, N, S = _class_of("L"), _class_of("N"), _WHITE_SPACE
    return ("(?i:'s|'t|'re|'ve|'m|'ll|'d)"
            "|[^\\r\\n%s%s]?[%s]+" % (L, N, L) +
            "|[%s]{1,3}" % N +
            "| ?[^%s%s%s]+[\\r\\n]*" % (S, L, N) +
            "|[%s]*[\\r\\n]+" % S +
            "|[%s]+(?![^%s])" % (S, S) +
            "|[%s]+" % S)


def splitter(use_regex=None):
    """(findall function, "regex" or "re"): the `regex` package when use_regex is True, or
    None and it is importable; else the `re` fallback."""
    if use_regex is not False:
        try:
            import regex
        except ImportError:
            if use_regex:
                raise
        else:
            return regex.compile(PATTERN).findall, "regex"
    return re.compile(fallback_pattern()).findall, "re"


class Llama3Tokenizer:
    """A tiktoken ranks file plus Llama-3's 256 special tokens after its ranks."""

    def __init__(self, ranks, path="<ranks>", use_regex=None, sha256=None):
        self.path = path
        self.sha256 = sha256
        self.ranks = ranks
        self.n_base = len(ranks)
        self.n_vocab = self.n_base + NUM_SPECIAL_TOKENS
        self.special = {name: self.n_base + i for i, name in enumerate(SPECIAL_TOKENS)}
        self.bos_id = self.special[BEGIN_OF_TEXT]
        self.eos_id = self.special[END_OF_TEXT]
        self.by_id = [b""] * self.n_base
        for token, rank in ranks.items():
            self.by_id[rank] = token
        self.by_id += [name.encode("ascii") for name in SPECIAL_TOKENS]
        self._findall, self.split_with = splitter(use_regex)
        self._cache = {}

    @classmethod
    def load(cls, path, use_regex=None):
        data = read_file(path)
        return cls(parse_ranks(data, path), path, use_regex, hashlib.sha256(data).hexdigest())

    def describe(self):
        """One phrase: the file, its size in tokens, and whether it is Meta's."""
        meta = ("Meta's Llama-3 file" if self.sha256 == META_SHA256 else
                "not Meta's Llama-3 file, sha256 %s..." % self.sha256[:16] if self.sha256 else "")
        return "%s: %s ranks and %d special tokens, vocab %s%s" % (
            self.path, format(self.n_base, ","), NUM_SPECIAL_TOKENS, format(self.n_vocab, ","),
            ", " + meta if meta else "")

    def pieces(self, text):
        """The pieces the split pattern cuts `text` into."""
        return self._findall(text)

    def _piece_ids(self, piece):
        """Byte-level BPE of one piece (bytes) by rank: the pair of adjacent parts whose
        concatenation has the lowest rank merges first (the leftmost of equal ranks), until no
        adjacent pair is a token.  The parts are a linked list over their start offsets and the
        candidate pairs a heap, so a long piece (a run of 100,000 spaces) takes n log n steps,
        not n^2; stale pairs are skipped when they come off the heap."""
        ranks = self.ranks
        whole = ranks.get(piece)
        if whole is not None:  # as tiktoken: a piece that is a token is that token
            return [whole]
        n = len(piece)
        nxt = list(range(1, n + 1))  # the part starting at s ends where the next one starts, nxt[s]
        prv = list(range(-1, n - 1))
        heap = []

        def push(a, b, c):  # the parts [a, b) and [b, c), if together they are a token
            r = ranks.get(piece[a:c])
            if r is not None:
                heapq.heappush(heap, (r, a, b, c))

        for s in range(n - 1):
            push(s, s + 1, s + 2)
        while heap:
            _, a, b, c = heapq.heappop(heap)
            if prv[b] != a or nxt[b] != c or nxt[a] != b:
                continue  # a part of this pair has merged since
            nxt[a], prv[b] = c, -2  # b is gone (-2: no part starts there now)
            if c < n:
                prv[c] = a
                push(a, c, nxt[c])
            if a > 0:
                push(prv[a], a, c)
        ids, s = [], 0
        while s < n:
            ids.append(ranks[piece[s:nxt[s]]])
            s = nxt[s]
        return ids

    def encode(self, text):
        """Ids of `text` (a str), special-token text encoded as ordinary text."""
        ids, cache = [], self._cache
        for piece in self._findall(text):
            got = cache.get(piece)
            if got is None:
                got = self._piece_ids(piece.encode("utf-8"))
                if len(cache) >= 1 << 18:  # bounded: a long corpus has many rare pieces
                    cache.clear()
                cache[piece] = got
            ids.extend(got)
        return ids

    def encode_document(self, text):
        """<|begin_of_text|>, the ids of `text`, <|end_of_text|>: one document."""
        return [self.bos_id] + self.encode(text) + [self.eos_id]

    def decode_bytes(self, ids):
        """The bytes of `ids`; a special token decodes to its name."""
        out = []
        for i in ids:
            if not 0 <= i < self.n_vocab:
                raise ValueError("token id %d is outside the vocabulary of %d" % (i, self.n_vocab))
            out.append(self.by_id[i])
        return b"".join(out)

    def trainer_table(self):
        """The trainer's tokenizer table (bytes per id); TokenizerFileError naming the line
        of a token too long for it (its length is one byte there)."""
        for rank, token in enumerate(self.by_id[:self.n_base]):
            if len(token) > MAX_TOKEN_BYTES:
                raise TokenizerFileError(
                    "%s: token %d is %d bytes; the trainer's tokenizer file holds at most %d bytes per token"
                    % (self.path, rank, len(token), MAX_TOKEN_BYTES))
        return list(self.by_id)

    def write_trainer_file(self, out, quiet=False):
        """The trainer's tokenizer file.  Its header's end-of-text field, which the trainer
        starts its samples from, is <|begin_of_text|>: the token every document starts with."""
        write_tokenizer(out, self.trainer_table(), self.bos_id, quiet=quiet)


def load_or_die(path, use_regex=None):
    """The tokenizer at `path`, or one error line and exit status 1."""
    try:
        return Llama3Tokenizer.load(path, use_regex)
    except TokenizerFileError as e:
        die(str(e))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("Command line:\n", 1)[1])
    sub = ap.add_subparsers(dest="command", required=True)
    tf = sub.add_parser("tokenizer-file", help="write the trainer's tokenizer file")
    tf.add_argument("model", help="tokenizer.model (tiktoken ranks file)")
    tf.add_argument("out", help="the trainer's tokenizer file to write")
    tf.add_argument("--force", action="store_true", help="overwrite OUT if it exists")
    en = sub.add_parser("encode", help="print the ids of a text, comma-separated")
    en.add_argument("model", help="tokenizer.model (tiktoken ranks file)")
    en.add_argument("text")
    en.add_argument("--bos", action="store_true", help="lead with <|begin_of_text|>, as a document starts")
    args = ap.parse_args(argv)

    tok = load_or_die(args.model)
    if args.command == "encode":
        ids = ([tok.bos_id] if args.bos else []) + tok.encode(args.text)
        print(",".join(map(str, ids)))
        return 0
    if os.path.exists(args.out) and not args.force:
        die("%s exists; --force overwrites it" % args.out)
    try:
        table = tok.trainer_table()
    except TokenizerFileError as e:
        die(str(e))
    tmp = args.out + ".part"
    try:
        write_tokenizer(tmp, table, tok.bos_id, quiet=True)
        os.replace(tmp, args.out)
    except OSError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        die("cannot write %s (%s)" % (args.out, e.strerror or e))
    print("read %s" % tok.describe())
    print("wrote %s: %s tokens; samples start from %s (%d)"
          % (args.out, format(tok.n_vocab, ","), BEGIN_OF_TEXT, tok.bos_id))
    print("trainer flags: --model llama3 --tokenizer %s --vocab %d --padded-vocab %d"
          % (args.out, tok.n_vocab, padded_vocab(tok.n_vocab)))
    return 0


def padded_vocab(v):
    """The vocabulary rounded up to a multiple of 128 (the trainer's default for --padded-vocab)."""
    return (v + 127) // 128 * 128


if __name__ == "__main__":
    sys.exit(main())
