"""Tiny Shakespeare -> GPT-2 token shards.

Downloads the char-rnn input.txt (~1.1 MB), treats every blank-line separated
passage (one speaker's turn, mostly) as a document, puts the end-of-text token
in front of each document, and keeps the first 32,768 tokens for validation,
as llm.c does.  Expected result: 32,768 val tokens, 305,260 train tokens.

Writes data/tinyshakespeare/tiny_shakespeare_{val,train}.bin and
data/gpt2_tokenizer.bin.  Needs the network twice: for input.txt and for
tiktoken's BPE file.  Without it, use text_to_shards.py --tokenizer bytes on
a local copy of the text.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
# The published file's size and sha256: another text (a local edit, a copy rebuilt by hand)
# gives other token counts and other losses than docs/reproduce.md's, so it is named.
TEXT_BYTES = 1115394
TEXT_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
VAL_TOKENS = 32768


def text_mismatch(path):
    """None if the file at `path` is char-rnn's input.txt, else one line saying how it differs."""
    import hashlib
    with open(path, "rb") as f:
        data = f.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest == TEXT_SHA256:
        return None
    return ("%s is not char-rnn's input.txt (%d bytes, sha256 %s; expected %d bytes, sha256 %s): "
            "token counts and losses will differ from docs/reproduce.md's"
            % (path, len(data), digest[:16], TEXT_BYTES, TEXT_SHA256[:16]))


def encode_documents(text, encode, eot):
    """Tokens of `text` split into documents on blank lines, each led by `eot`.

    Equivalent to encoding "<|endoftext|>" + text with every "\\n\\n" replaced
    by "\\n\\n<|endoftext|>": the blank line stays at the end of the document it
    closes.  A text ending in "\\n\\n" therefore ends with a lone eot, like the
    reference.  `encode` maps a str to a list of ids (no special tokens), so
    tests can pass a fake encoder.
    """
    parts = text.split("\n\n")
    tokens = []
    for i, part in enumerate(parts):
        doc = part if i == len(parts) - 1 else part + "\n\n"
        tokens.append(eot)
        tokens.extend(encode(doc))
    return tokens


def main():
    from shards import GPT2_EOT, die, download, gpt2_tokenizer_table, load_gpt2_encoding, write_shard, write_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", default=os.path.join(HERE, "tinyshakespeare"))
    ap.add_argument("--tokenizer-out", default=os.path.join(HERE, "gpt2_tokenizer.bin"))
    args = ap.parse_args()

    txt = os.path.join(args.out_dir, "tiny_shakespeare.txt")
    download(URL, txt)
    mismatch = text_mismatch(txt)
    if mismatch:
        print("warning: " + mismatch, file=sys.stderr)
    enc = load_gpt2_encoding()
    with open(txt, encoding="utf-8") as f:
        text = f.read()
    tokens = encode_documents(text, enc.encode_ordinary, GPT2_EOT)
    if len(tokens) <= VAL_TOKENS:
        die("%s has only %d tokens; expected far more than %d" % (txt, len(tokens), VAL_TOKENS))
    write_shard(os.path.join(args.out_dir, "tiny_shakespeare_val.bin"), tokens[:VAL_TOKENS])
    write_shard(os.path.join(args.out_dir, "tiny_shakespeare_train.bin"), tokens[VAL_TOKENS:])
    write_tokenizer(args.tokenizer_out, gpt2_tokenizer_table(enc), GPT2_EOT)
    print("trainer flags: -i %s -j %s --tokenizer %s --vocab 50257"
          % (os.path.join(args.out_dir, "tiny_shakespeare_train.bin"),
             os.path.join(args.out_dir, "tiny_shakespeare_val.bin"), args.tokenizer_out))


if __name__ == "__main__":
    main()
