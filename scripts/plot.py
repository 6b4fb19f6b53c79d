#!/usr/bin/env python3
"""Plot one or more trainer JSONL logs into a single PNG with four panels.

  loss (train, and validation as markers) | learning rate
  gradient norm                           | throughput (tokens/s)
  gradient noise scale (when logged)

all against tokens seen, but the noise scale against steps, with each run's global batch as a
horizontal line (docs/noise-scale.md).  Several logs are overlaid, one colour per run.

  python3 scripts/plot.py out/run1/log.jsonl out/run2/log.jsonl -o compare.png --smooth 20

Only "train" and "val" records are used; other record types ("config",
"sample", ...) and unknown fields are ignored, so the log format can grow.
"""
import argparse
import json
import math
import os
import sys


def read_log(path):
    """Return (train records, val records) of a JSONL log."""
    train, val = [], []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                # a run killed mid-write leaves a partial last line; skip it, say so
                print("warning: %s:%d is not JSON, skipped" % (path, lineno), file=sys.stderr)
                continue
            if not isinstance(rec, dict):
                continue
            kind = rec.get("type")
            if kind == "train" and "tokens" in rec:
                train.append(rec)
            elif kind == "val" and "tokens" in rec and "val_loss" in rec:
                val.append(rec)
    return latest_per_step(train), latest_per_step(val)


def global_batch(path):
    """Tokens per optimizer step, from the log's "config" record (None without one)."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and rec.get("type") == "config" and isinstance(rec.get("global_batch"), int):
                return rec["global_batch"]
    return None


def latest_per_step(records):
    """A resumed run appends to its log from the checkpoint's step on, repeating
    steps logged before the interruption: keep the last record of each step."""
    by_step = {}
    for i, r in enumerate(records):
        by_step[r.get("step", -1 - i)] = r  # records without a step are all kept
    return sorted(by_step.values(), key=lambda r: r["tokens"])


def smooth(ys, n):
    """Trailing moving average over up to n points (no lag-free tricks, no numpy)."""
    if n <= 1:
        return list(ys)
    out, acc = [], 0.0
    for i, y in enumerate(ys):
        acc += y
        if i >= n:
            acc -= ys[i - n]
        out.append(acc / min(i + 1, n))
    return out


def series(records, key):
    """(tokens, values) of the records that have a numeric `key`."""
    pts = [(r["tokens"], r[key]) for r in records
           if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
    return [p[0] for p in pts], [p[1] for p in pts]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logs", nargs="+", help="trainer JSONL log files")
    ap.add_argument("-o", "--output", default="training.png", help="PNG to write (default training.png)")
    ap.add_argument("--labels", help="comma-separated run names (default: each log's directory name)")
    ap.add_argument("--smooth", type=int, default=1, metavar="N",
                    help="moving average over N steps for train loss, grad norm and tokens/s")
    args = ap.parse_args(argv)

    labels = args.labels.split(",") if args.labels else \
        [os.path.basename(os.path.dirname(os.path.abspath(p))) or p for p in args.logs]
    if len(labels) != len(args.logs):
        sys.exit("error: %d labels for %d logs" % (len(labels), len(args.logs)))

    runs = []
    for path, label in zip(args.logs, labels):
        if not os.path.isfile(path):
            sys.exit("error: no such log file: %s" % path)
        train, val = read_log(path)
        if not train:
            sys.exit("error: %s has no train records (lines with \"type\": \"train\")" % path)
        runs.append((label, train, val, global_batch(path)))

    import matplotlib
    matplotlib.use("Agg")  # files only; no display is needed or wanted
    import matplotlib.pyplot as plt

    # the noise scale's panel only when some run logged it (an accumulation or replicas)
    noise = any(series(train, "noise_scale")[0] for _, train, _, _ in runs)
    fig, axes = plt.subplots(3 if noise else 2, 2, figsize=(13, 12.5 if noise else 8.5))
    ax_loss, ax_lr, ax_gn, ax_tps = axes.flat[:4]
    if noise:
        ax_noise = axes.flat[4]
        axes.flat[5].set_visible(False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, train, val, batch) in enumerate(runs):
        c = colors[i % len(colors)]
        x, y = series(train, "loss")
        ax_loss.plot(x, smooth(y, args.smooth), color=c, lw=1.2, label=label + " train")
        x, y = series(val, "val_loss")
        if x:
            ax_loss.plot(x, y, color=c, ls="--", marker="o", ms=4, label=label + " val")
        x, y = series(train, "lr")
        ax_lr.plot(x, y, color=c, label=label)
        x, y = series(train, "grad_norm")
        ax_gn.plot(x, smooth(y, args.smooth), color=c, lw=1, label=label)
        x, y = series(train, "tokens_per_s")
        ax_tps.plot(x, smooth(y, args.smooth), color=c, lw=1, label=label)
        if noise:
            steps = [r["step"] for r in train if isinstance(r.get("noise_scale"), (int, float))]
            if steps:
                ax_noise.plot(steps, series(train, "noise_scale")[1], color=c, lw=1, label=label + " noise scale")
            if steps and batch:
                ax_noise.axhline(batch, color=c, ls=":", lw=1.2, label=label + " global batch")

    from matplotlib.ticker import EngFormatter, FuncFormatter, LogFormatter
    suffix = " (moving average %d)" % args.smooth if args.smooth > 1 else ""
    for ax, title in [(ax_loss, "loss" + suffix), (ax_lr, "learning rate"),
                      (ax_gn, "gradient norm" + suffix), (ax_tps, "throughput, tokens/s" + suffix)]:
        ax.set_title(title)
        ax.set_xlabel("tokens seen")
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 500k, 1.5M, 10G
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    ax_gn.set_yscale("log")  # early spikes would otherwise flatten the rest
    if noise:
        # already a moving average (--noise-ema): not smoothed again
        ax_noise.set_title("gradient noise scale B_noise (tokens); dotted: the global batch")
        ax_noise.set_xlabel("step")
        ax_noise.set_ylabel("tokens")
        ax_noise.set_yscale("log")  # it grows by orders of magnitude as the loss falls
        ax_noise.grid(alpha=0.3)
        ax_noise.legend(fontsize=8)

    class PlainLogFormatter(LogFormatter):
        """LogFormatter's choice of which ticks to label, but "0.6" rather than "6e-01"."""
        def __call__(self, x, pos=None):
            return "%g" % x if super().__call__(x, pos) else ""

    # intermediate ticks are labelled only when the range is narrow
    ax_gn.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
    ax_gn.yaxis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(1.2, 0.5)))
    if noise:
        eng = EngFormatter(sep="")  # 500, 2k, 40k
        ax_noise.yaxis.set_major_formatter(FuncFormatter(lambda v, _: eng(v)))
        # minor ticks at 2× and 5× each power of ten labelled too: the range is often under a decade
        ax_noise.yaxis.set_minor_formatter(FuncFormatter(
            lambda v, _: eng(v) if round(v / 10 ** math.floor(math.log10(v))) in (2, 5) else ""))
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print("wrote %s (%d run%s)" % (args.output, len(runs), "" if len(runs) == 1 else "s"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
