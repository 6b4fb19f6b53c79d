"""HellaSwag validation set -> llm.c's evaluation file, for the trainers' --hellaswag.

Downloads hellaswag_val.jsonl (10,042 examples, ~11 MB) from the HellaSwag
repository and writes data/hellaswag/hellaswag_val.bin in llm.c's format (see
data/shards.py).  Each example is rendered as GPT-2 reports it: the context
("ctx") tokenized, and each of its 4 endings tokenized with a leading space,
so that it continues the context's last word.  The trainer scores an ending by
its tokens' mean loss after the context (acc_norm); GPT-2 124M scores ~29.4%,
random choice 25%.

Needs the network once (for the file and tiktoken's BPE ranks) and
`pip install tiktoken tqdm`.  Then train with
    --hellaswag data/hellaswag/hellaswag_val.bin --eval-every N
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
URL = "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl"


def render(example, encode):
    """(context tokens, [ending tokens], label) of one HellaSwag json record."""
    context = encode(example["ctx"])
    endings = [encode(" " + ending) for ending in example["endings"]]
    return context, endings, int(example["label"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--out-dir", default=os.path.join(HERE, "hellaswag"))
    args = ap.parse_args()  # before the imports below, so --help works without them installed

    sys.path.insert(0, HERE)
    from shards import download, load_gpt2_encoding, write_eval_file

    jsonl = os.path.join(args.out_dir, "hellaswag_val.jsonl")
    download(URL, jsonl)  # offline: one line saying so, and where to put the file
    enc = load_gpt2_encoding()
    with open(jsonl, encoding="utf-8") as f:
        examples = [render(json.loads(line), enc.encode_ordinary) for line in f if line.strip()]
    out = os.path.join(args.out_dir, "hellaswag_val.bin")
    write_eval_file(out, examples)
    longest = max(len(c) + max(len(e) for e in ends) for c, ends, _ in examples)
    print("longest context + ending: %d tokens (the trainer cuts contexts to fit --seq-len)" % longest)
    print("trainer flags: --hellaswag %s --eval-every 250" % out)


if __name__ == "__main__":
    sys.exit(main())
