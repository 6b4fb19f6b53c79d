"""TinyStories -> GPT-2 token shards.

Downloads TinyStories_all_data.tar.gz (~1.5 GB, 50 JSON files data00..data49),
unpacks it, and tokenizes every story as one document led by the end-of-text
token.  As in llm.c, the first JSON file (sorted by name) is the validation
split and the other 49 are the training split; the stories inside each file are
shuffled with a fixed seed (1337 + the file's index within its split), and
each story is stripped of surrounding whitespace.  llm.c reports 19,043,638
val and 925,653,391 train tokens.  (Unlike llm.c, files are concatenated in
sorted order rather than in completion order, so the output is reproducible.)

Writes data/tinystories/TinyStories_{val,train}.bin and data/gpt2_tokenizer.bin.
"""
import argparse
import glob
import json
import os
import random
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
URL = "https://huggingface.co/datasets/roneneldan/TinyStories/resolve/main/TinyStories_all_data.tar.gz"
EOT = 50256

_enc = None


def _tokenize_file(job):
    """Worker: one JSON file -> uint16 numpy array of its shuffled stories."""
    global _enc
    import numpy as np
    from shards import gpt2_encoding
    index, path = job
    if _enc is None:
        _enc = gpt2_encoding(quiet=True)[0]  # the parent checked that it loads
    with open(path, encoding="utf-8") as f:
        stories = [ex["story"].strip() for ex in json.load(f)]
    random.Random(1337 + index).shuffle(stories)
    out = []
    for ids in _enc.encode_ordinary_batch(stories, num_threads=1):
        out.append(EOT)
        out.extend(ids)
    return np.array(out, dtype=np.uint16)


def unpack(archive, dest):
    if glob.glob(os.path.join(dest, "*.json")):
        print("%s already unpacked" % dest)
        return
    os.makedirs(dest, exist_ok=True)
    print("unpacking %s ..." % archive)
    from tqdm import tqdm
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        # the "data" filter refuses absolute paths and links out of dest (Python >= 3.11.4)
        kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        for m in tqdm(members, unit="file", desc="unpack"):
            tar.extract(m, dest, **kwargs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", default=os.path.join(HERE, "tinystories"))
    ap.add_argument("--tokenizer-out", default=os.path.join(HERE, "gpt2_tokenizer.bin"))
    ap.add_argument("--workers", type=int, default=max(1, min(1024, (os.cpu_count() or 1) - 1)))
    args = ap.parse_args()  # before the imports below, so --help works without them installed
    from shards import check_range  # (standard library only) checked before the download
    check_range("--workers", args.workers, 1, 1024, "processes")

    from multiprocessing import Pool
    from shards import ShardWriter, die, download, gpt2_tokenizer_table, load_gpt2_encoding, write_tokenizer
    try:
        from tqdm import tqdm
    except ImportError:
        die("the tqdm package is missing (pip install -r data/requirements.txt)")

    archive = os.path.join(args.out_dir, "TinyStories_all_data.tar.gz")
    download(URL, archive)
    json_dir = os.path.join(args.out_dir, "TinyStories_all_data")
    unpack(archive, json_dir)
    files = sorted(glob.glob(os.path.join(json_dir, "*.json")))
    if len(files) < 2:
        die("expected the 50 TinyStories JSON files in %s, found %d" % (json_dir, len(files)))
    print("%d JSON files: %s is validation, the rest training" % (len(files), os.path.basename(files[0])))

    enc = load_gpt2_encoding()  # fail early and clearly, before starting workers
    splits = [("val", files[:1]), ("train", files[1:])]
    with Pool(args.workers) as pool:
        for split, split_files in splits:
            path = os.path.join(args.out_dir, "TinyStories_%s.bin" % split)
            jobs = list(enumerate(split_files))
            # imap keeps file order; ShardWriter streams, so memory stays at a few files
            with ShardWriter(path) as w:
                for arr in tqdm(pool.imap(_tokenize_file, jobs), total=len(jobs),
                                unit="file", desc="tokenize " + split):
                    w.write(arr)
            print("wrote %s tokens to %s" % (format(w.count, ","), path))
    write_tokenizer(args.tokenizer_out, gpt2_tokenizer_table(enc), EOT)
    print("trainer flags: -i %s -j %s --tokenizer %s --vocab 50257"
          % (os.path.join(args.out_dir, "TinyStories_train.bin"),
             os.path.join(args.out_dir, "TinyStories_val.bin"), args.tokenizer_out))


if __name__ == "__main__":
    sys.exit(main())
