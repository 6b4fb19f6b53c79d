"""FineWeb-Edu / FineWeb sample -> GPT-2 token shards of 100M tokens.

Every document is led by the end-of-text token; documents are packed back to
back and cut into shards of exactly --shard-size tokens (a document may span
two shards; the last shard holds the remainder).  Shard 0 is the validation
split, as in llm.c:

  --dataset edu:     data/edu_fineweb10B/edu_fineweb_val_000000.bin, edu_fineweb_train_000001.bin, ...
  --dataset classic: data/fineweb10B/fineweb_val_000000.bin, fineweb_train_000001.bin, ...

The 10B-token sample is ~28 GB of parquet in the HuggingFace cache (plus the
datasets library's Arrow cache), and ~20 GB of shards; --streaming reads the
documents over the network instead of keeping a local copy.
"""
import argparse
import os
import socket
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATASETS = {"edu": ("HuggingFaceFW/fineweb-edu", "edu_fineweb"),
            "classic": ("HuggingFaceFW/fineweb", "fineweb")}
EOT = 50256

_enc = None


def _init_worker():
    global _enc
    from shards import gpt2_encoding
    _enc = gpt2_encoding(quiet=True)[0]  # the parent checked that it loads (and filled tiktoken's cache)


def _tokenize(text):
    import numpy as np
    ids = _enc.encode_ordinary(text)
    out = np.empty(len(ids) + 1, dtype=np.uint16)  # gpt2 ids are < 50257, so they fit
    out[0] = EOT
    out[1:] = ids
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", choices=sorted(DATASETS), default="edu")
    ap.add_argument("--version", choices=["10B", "100B"], default="10B",
                    help="which sample of the dataset (sample-10BT or sample-100BT)")
    ap.add_argument("--shard-size", type=int, default=10 ** 8, help="tokens per shard")
    ap.add_argument("--out-dir", help="default data/<prefix><version>")
    ap.add_argument("--tokenizer-out", default=os.path.join(HERE, "gpt2_tokenizer.bin"))
    ap.add_argument("--streaming", action="store_true", help="stream documents instead of downloading")
    ap.add_argument("--workers", type=int, default=max(1, min(1024, (os.cpu_count() or 1) - 1)))
    args = ap.parse_args()  # before the imports below, so --help works without them installed
    from shards import check_range  # (standard library only) checked before any download
    check_range("--shard-size", args.shard_size, 1, 2 ** 31 - 1, "tokens; a shard's header counts them in an int32")
    check_range("--workers", args.workers, 1, 1024, "processes")

    from multiprocessing import Pool
    from shards import die, gpt2_tokenizer_table, load_gpt2_encoding, write_shard, write_tokenizer
    try:
        import numpy as np
        from tqdm import tqdm
    except ImportError as e:
        die("the %s package is missing (pip install -r data/requirements.txt)" % e.name)

    repo, prefix = DATASETS[args.dataset]
    url = "https://huggingface.co/datasets/" + repo
    out_dir = args.out_dir or os.path.join(HERE, "%s%s" % (prefix, args.version))
    os.makedirs(out_dir, exist_ok=True)

    try:
        from datasets import load_dataset
    except ImportError:
        die("the datasets package is missing (pip install -r data/requirements.txt)")
    # The hub client retries a missing network for ~30 s with noisy logs; one DNS
    # lookup tells us up front (unless HF_HUB_OFFLINE asks for the local cache only).
    if not os.environ.get("HF_HUB_OFFLINE"):
        try:
            socket.getaddrinfo("huggingface.co", 443)
        except OSError as e:
            die("cannot reach %s (no network? %s)" % (url, e))
    enc = load_gpt2_encoding()
    try:
        ds = load_dataset(repo, name="sample-%sT" % args.version, split="train", streaming=args.streaming)
    except Exception as e:  # ConnectionError, hub errors, disk full, ...
        die("could not load %s (sample-%sT): %s: %s" % (url, args.version, type(e).__name__, e))

    def shard_path(index):
        split = "val" if index == 0 else "train"
        return os.path.join(out_dir, "%s_%s_%06d.bin" % (prefix, split, index))

    buf = np.empty(args.shard_size, dtype=np.uint16)
    fill, index, total = 0, 0, 0
    bar = tqdm(total=args.shard_size, unit="tok", unit_scale=True, desc="shard 0")
    texts = (doc["text"] for doc in ds)
    with Pool(args.workers, initializer=_init_worker) as pool:
        for toks in pool.imap(_tokenize, texts, chunksize=16):
            pos = 0
            while pos < len(toks):  # a long document may fill the rest of this shard and start the next
                take = min(len(toks) - pos, args.shard_size - fill)
                buf[fill:fill + take] = toks[pos:pos + take]
                fill, pos = fill + take, pos + take
                bar.update(take)
                if fill == args.shard_size:
                    bar.close()
                    write_shard(shard_path(index), buf)
                    total += fill
                    index, fill = index + 1, 0
                    bar = tqdm(total=args.shard_size, unit="tok", unit_scale=True, desc="shard %d" % index)
    bar.close()
    if fill:
        write_shard(shard_path(index), buf[:fill])
        total += fill
        index += 1
    write_tokenizer(args.tokenizer_out, gpt2_tokenizer_table(enc), EOT)
    print("%s tokens in %d shards (1 val, %d train) in %s"
          % (format(total, ","), index, max(0, index - 1), out_dir))
    print("trainer flags: -i '%s' -j '%s' --tokenizer %s --vocab 50257"
          % (os.path.join(out_dir, prefix + "_train_*.bin"),
             os.path.join(out_dir, prefix + "_val_*.bin"), args.tokenizer_out))


if __name__ == "__main__":
    sys.exit(main())
