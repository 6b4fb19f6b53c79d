"""Local UTF-8 text file(s) -> token shards and a tokenizer file, offline.

The path to real-text training on a machine without network access.

Tokenizers (--tokenizer):
  gpt2   tiktoken's GPT-2 BPE (vocab 50257).  Each input file is one document
         led by the end-of-text token 50256 (--blank-line-docs: every
         blank-line separated passage is a document, as for tiny Shakespeare).
         tiktoken downloads its BPE file on first use, so this needs the
         network once (it is cached), or a local rank file: $GPT2_BPE_FILE or
         data/bpe/gpt2.tiktoken (see data/shards.py, gpt2_encoding).
  llama3 Llama-3's BPE from its tokenizer.model (--tokenizer-model PATH; the file
         comes with the weights, docs/tokenizers.md): vocab 128,256 for Meta's
         file.  Each input file (or, with --blank-line-docs, each blank-line
         separated passage) is one document: <|begin_of_text|> (128000), its
         tokens, <|end_of_text|> (128001).  Needs only the Python standard
         library (data/llama3_tokenizer.py).
  bytes  byte-level: token = byte value (vocab 256), one token per byte of the
         file, no end-of-text token.  Needs only the Python standard library.
  auto   (default) gpt2 if the encoding loads, otherwise bytes.

Shards (--token-bytes): 2, uint16 tokens (llm.c's GPT-2 shards), unless the
vocabulary exceeds 65,536 or the tokenizer is llama3; 4 writes uint32 tokens
(llm.c's Llama-3 shards: magic 20240801, version 7) whatever the vocabulary.

Output, in --out-dir (default data/<name>):
  <name>_val_000000.bin                 the first --val-tokens tokens
  <name>_train_000001.bin, _000002 ...  the rest, --shard-tokens per file
  <name>_tokenizer.bin                  so the trainer can print samples as text
The last lines printed are the trainer flags that match the output.
"""
import argparse
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shards import (GPT2_EOT, ShardWriter, byte_tokenizer_table, check_input_file,  # noqa: E402
                    check_output_dir, check_range, die, gpt2_encoding, gpt2_tokenizer_table,
                    token_bytes_for_vocab, usage_error, write_tokenizer)
import llama3_tokenizer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_VAL_FRACTION = 0.1
DEFAULT_VAL_CAP = 1 << 20  # 1M tokens is plenty of validation for the trainer's -m batches
# Byte mode has no end-of-text token, but the tokenizer header needs an id there
# (the trainer starts its samples from it).  A newline is a natural start of text.
BYTES_START_TOKEN = 10


def read_text(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as e:
        die("%s is not valid UTF-8 (%s); --tokenizer bytes accepts any bytes" % (path, e))
    except OSError as e:
        die("cannot read %s: %s" % (path, e.strerror or e))
    return None  # not reached: die() exits


def tokenize_gpt2(enc, paths, blank_line_docs):
    from tinyshakespeare import encode_documents
    tokens = []
    for p in paths:
        text = read_text(p)
        if blank_line_docs:
            tokens.extend(encode_documents(text, enc.encode_ordinary, GPT2_EOT))
        else:
            tokens.append(GPT2_EOT)
            tokens.extend(enc.encode_ordinary(text))
    return tokens


def tokenize_llama3(tok, paths, blank_line_docs):
    """Each file, or each blank-line separated passage (the blank line kept at the end of the
    passage it closes, as for gpt2), is a document: <|begin_of_text|> ... <|end_of_text|>.
    An empty passage (after a trailing blank line) is no document."""
    tokens = []
    for p in paths:
        text = read_text(p)
        parts = text.split("\n\n") if blank_line_docs else [text]
        for i, part in enumerate(parts):
            doc = part if i == len(parts) - 1 else part + "\n\n"
            if doc:
                tokens.extend(tok.encode_document(doc))
    return tokens


def tokenize_bytes(paths):
    data = bytearray()
    for p in paths:
        try:
            with open(p, "rb") as f:
                data += f.read()
        except OSError as e:
            die("cannot read %s: %s" % (p, e.strerror or e))
    return bytes(data)  # token i is data[i]; shards.py widens bytes to uint16


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("inputs", nargs="+", help="UTF-8 text file(s), concatenated in order")
    ap.add_argument("--tokenizer", choices=["auto", "gpt2", "llama3", "bytes"], default="auto")
    ap.add_argument("--tokenizer-model", metavar="PATH",
                    help="llama3 only: Llama-3's tokenizer.model (tiktoken ranks file)")
    ap.add_argument("--name", help="file name prefix (default: first input's name without extension)")
    ap.add_argument("--out-dir", help="default: data/<name>")
    ap.add_argument("--val-tokens", type=int,
                    help="first N tokens are validation (default: 10%%%% of the tokens, at most %s)"
                    % format(DEFAULT_VAL_CAP, ","))  # %%%% here: argparse formats the help text once more
    ap.add_argument("--shard-tokens", type=int, default=10 ** 8, help="training tokens per shard file")
    ap.add_argument("--token-bytes", type=int, choices=[2, 4],
                    help="bytes per token in the shards: 2 (uint16) or 4 (uint32); "
                         "default: 2 unless the vocabulary exceeds 65,536 or the tokenizer is llama3")
    ap.add_argument("--blank-line-docs", action="store_true",
                    help="gpt2 and llama3: one document per blank-line separated passage")
    args = ap.parse_args(argv)
    if (args.tokenizer == "llama3") != (args.tokenizer_model is not None):
        ap.error("--tokenizer llama3 needs --tokenizer-model PATH, and --tokenizer-model needs --tokenizer llama3")

    # The command line first (exit 2), then the files (exit 1), all before tokenizing.
    check_range("--shard-tokens", args.shard_tokens, 1, 2 ** 31 - 1, "tokens per shard")
    if args.val_tokens is not None:
        check_range("--val-tokens", args.val_tokens, 0, 2 ** 31 - 1, "tokens")
    if args.name is not None and (not args.name or "/" in args.name or os.sep in args.name or "\0" in args.name):
        usage_error("--name %r is a file name prefix: it must be non-empty, without '/'" % args.name)
    if args.out_dir == "":
        usage_error("--out-dir is empty: give a folder")
    for p in args.inputs:
        check_input_file(p)
    name = args.name or os.path.splitext(os.path.basename(args.inputs[0]))[0]
    out_dir = args.out_dir or os.path.join(HERE, name)
    check_output_dir(out_dir)

    enc, why, llama = None, None, None
    if args.tokenizer == "llama3":
        llama = llama3_tokenizer.load_or_die(args.tokenizer_model)
        try:
            llama_table = llama.trainer_table()  # before any shard is written
        except llama3_tokenizer.TokenizerFileError as e:
            die(str(e))
    if args.tokenizer in ("auto", "gpt2"):
        enc, why = gpt2_encoding()
        if enc is None and args.tokenizer == "gpt2":
            die(why + "; use --tokenizer bytes to work offline")
    if llama is not None:
        kind, vocab = "llama3", llama.n_vocab
        padded = llama3_tokenizer.padded_vocab(vocab)
        print("tokenizer: llama3 (%s; pieces split with %s)" % (llama.describe(), llama.split_with))
        tokens = tokenize_llama3(llama, args.inputs, args.blank_line_docs)
    elif enc is not None:
        kind, vocab, padded = "gpt2", 50257, 50304
        print("tokenizer: gpt2 (tiktoken BPE, vocab 50257)")
        tokens = tokenize_gpt2(enc, args.inputs, args.blank_line_docs)
    else:
        if why:
            print("note: %s; falling back to byte-level tokens" % why)
        if args.blank_line_docs:
            print("note: --blank-line-docs ignored: byte mode has no end-of-text token")
        kind, vocab, padded = "bytes", 256, 256
        print("tokenizer: bytes (token = byte value, vocab 256)")
        tokens = tokenize_bytes(args.inputs)

    # llm.c's Llama-3 shards are uint32 whatever the vocabulary (scripts/llama3_1b.sh expects them)
    token_bytes = args.token_bytes or (4 if kind == "llama3" else token_bytes_for_vocab(vocab))
    if token_bytes == 2 and vocab > 65536:
        die("--token-bytes 2: uint16 tokens cannot hold the vocabulary of %s; use 4" % format(vocab, ","))
    total = len(tokens)
    if total == 0:
        die("the input has no tokens (%s %s empty)"
            % (", ".join(args.inputs), "is" if len(args.inputs) == 1 else "are"))
    val = args.val_tokens
    if val is None:
        val = min(int(total * DEFAULT_VAL_FRACTION), DEFAULT_VAL_CAP)
    if not 0 <= val < total:
        die("--val-tokens %d must be in [0, %d): the %d tokens must leave some for training"
            % (val, total, total))

    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        die("cannot make the output folder %s: %s" % (out_dir, e.strerror or e))
    # Shards of an earlier run with more files would otherwise match the trainer's glob.
    for old in glob.glob(os.path.join(out_dir, name + "_val_*.bin")) + \
            glob.glob(os.path.join(out_dir, name + "_train_*.bin")):
        try:
            os.remove(old)
        except OSError as e:
            die("cannot remove the earlier run's shard %s: %s" % (old, e.strerror or e))

    def write(index, split, lo, hi):
        path = os.path.join(out_dir, "%s_%s_%06d.bin" % (name, split, index))
        try:
            with ShardWriter(path, token_bytes) as w:  # removes a half-written shard on an error
                w.write(tokens[lo:hi])
        except OSError as e:  # a full disk, a quota, a file size limit
            die("cannot write %s: %s (the partial shard is removed)" % (path, e.strerror or e))
        print("wrote %s %s tokens to %s" % (format(hi - lo, ","), split, path))

    if val:
        write(0, "val", 0, val)
    else:
        print("note: --val-tokens 0: no validation shard written")
    for i, lo in enumerate(range(val, total, args.shard_tokens)):
        write(i + 1, "train", lo, min(lo + args.shard_tokens, total))

    tok_path = os.path.join(out_dir, name + "_tokenizer.bin")
    if kind == "gpt2":
        table, start = gpt2_tokenizer_table(enc), GPT2_EOT
    elif kind == "llama3":
        table, start = llama_table, llama.bos_id  # samples start as documents do
    else:
        table, start = byte_tokenizer_table(), BYTES_START_TOKEN
    try:
        write_tokenizer(tok_path, table, start)
    except OSError as e:
        try:
            os.remove(tok_path)
        except OSError:
            pass
        die("cannot write %s: %s (the partial file is removed)" % (tok_path, e.strerror or e))

    print("%s tokens: %s val, %s train; tokenizer %s%s"
          % (format(total, ","), format(val, ","), format(total - val, ","), kind,
             "; uint32 shards" if token_bytes == 4 else ""))
    flags = "--model llama3 " if kind == "llama3" else ""
    flags += "-i '%s'" % os.path.join(out_dir, name + "_train_*.bin")
    if val:
        flags += " -j '%s'" % os.path.join(out_dir, name + "_val_*.bin")
    flags += " --tokenizer %s --vocab %d --padded-vocab %d" % (tok_path, vocab, padded)
    print("trainer flags: " + flags)
    return 0


if __name__ == "__main__":
    sys.exit(main())
