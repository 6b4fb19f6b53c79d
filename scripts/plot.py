#!/usr/bin/env python3
"""Plot one or more trainer JSONL logs into a single PNG with four panels.

  loss (train, and validation as markers) | learning rate
  gradient norm                           | throughput (tokens/s)
  gradient noise scale (when logged)

all against tokens seen, but the noise scale against steps, with each run's global batch as a
horizontal line (docs/noise-scale.md).  Several logs are overlaid, one colour and line style per
run, so that runs whose curves coincide stay visible.  A run on the built-in corpus
(its "config" record holds "corpus_entropy") gets that entropy as a dashed line on the
loss panel: the loss of a perfect model.

  python3 scripts/plot.py out/run1/log.jsonl out/run2/log.jsonl -o out/compare.png --smooth 20

Without -o the PNG goes next to the first log (its directory's training.png).
Only "train", "val" and "config" records are used; other record types ("sample", ...)
and unknown fields are ignored, so the log format can grow.
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


def config_record(path):
    """The log's "config" record (a dict; empty without one)."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and rec.get("type") == "config":
                return rec
    return {}


def corpus_entropy(path):
    """The built-in corpus's entropy in nats/token, from the log's config record, or None."""
    e = config_record(path).get("corpus_entropy")
    return e if isinstance(e, (int, float)) else None


def global_batch(path):
    """Tokens per optimizer step, from the log's config record, or None."""
    b = config_record(path).get("global_batch")
    return b if isinstance(b, int) else None


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
    ap.add_argument("-o", "--output", help="PNG to write (default: training.png next to the first log)")
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
        runs.append((label, train, val, corpus_entropy(path), global_batch(path)))
    output = args.output or os.path.join(os.path.dirname(args.logs[0]), "training.png")

    import matplotlib
    matplotlib.use("Agg")  # files only; no display is needed or wanted
    import matplotlib.pyplot as plt

    # the noise scale's panel when some run logged the field (even if every value is null: the
    # panel then says why there is no curve rather than vanish)
    noise = any("noise_scale" in r for _, train, _, _, _ in runs for r in train)
    fig, axes = plt.subplots(3 if noise else 2, 2, figsize=(13, 12.5 if noise else 8.5))
    ax_loss, ax_lr, ax_gn, ax_tps = axes.flat[:4]
    if noise:
        ax_noise = axes.flat[4]
        axes.flat[5].set_visible(False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ["-", (0, (5, 2)), (0, (1, 1.5)), (0, (6, 2, 1, 2))]  # solid, dashed, dotted, dash-dot
    markers = ["o", "s", "^", "D", "v", "x"]
    entropies = set()
    missing = []  # runs without a noise-scale value, named in the panel
    for i, (label, train, val, entropy, batch) in enumerate(runs):
        # colour, line style and marker all change from run to run, and later runs are drawn
        # thinner: runs that train identically (the replica splits) show as interleaved dashes
        style = dict(color=colors[i % len(colors)], ls=styles[i % len(styles)], lw=max(0.8, 1.6 - 0.3 * i))
        x, y = series(train, "loss")
        ax_loss.plot(x, smooth(y, args.smooth), label=label + " train", **style)
        x, y = series(val, "val_loss")
        if x:
            ax_loss.plot(x, y, marker=markers[i % len(markers)], ms=6 - min(i, 3), mfc="none",
                         label=label + " val", **style)
        x, y = series(train, "lr")
        ax_lr.plot(x, y, label=label, **style)
        x, y = series(train, "grad_norm")
        ax_gn.plot(x, smooth(y, args.smooth), label=label, **style)
        x, y = series(train, "tokens_per_s")
        ax_tps.plot(x, smooth(y, args.smooth), label=label, **style)
        if entropy is not None:
            entropies.add(round(entropy, 4))
        if noise:
            steps = [r["step"] for r in train if isinstance(r.get("noise_scale"), (int, float))]
            if steps:
                ax_noise.plot(steps, series(train, "noise_scale")[1], label=label + " noise scale", **style)
            if steps and batch:
                # long dash, two dots: a pattern no run's curve uses (theirs are solid, dashed,
                # dotted, dash-dot), so a curve and its batch line cannot be confused
                ax_noise.axhline(batch, color=style["color"], ls=(0, (8, 3, 1, 3, 1, 3)), lw=1.0, alpha=0.8,
                                 label=label + " global batch")
            if not steps:
                missing.append(label)
    for e in sorted(entropies):
        ax_loss.axhline(e, color="0.4", ls="--", lw=1,
                        label="built-in corpus entropy %.3f (a perfect model's loss)" % e)

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
        ax_noise.set_title("gradient noise scale B_noise (tokens); dash-dot-dot: the global batch")
        if missing:
            ax_noise.text(0.02, 0.02, "no value for " + ", ".join(missing) + ":\nnoise scale needs accumulation or "
                          "replicas (A or R >= 2),\nand some steps for its averages to become positive",
                          transform=ax_noise.transAxes, fontsize=8, va="bottom")
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
    fig.savefig(output, dpi=110)
    print("wrote %s (%d run%s)" % (output, len(runs), "" if len(runs) == 1 else "s"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
