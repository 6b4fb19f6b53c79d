#!/usr/bin/env python3
"""check_noise_runs.py: the trainers' noise-scale measurements (test/cpu_trainer/noise_scale.sh).

  agree DIR_A DIR_B          grad_norm_small and grad_norm_big of every step within 1e-5 relative
                             (the CPU trainer against train_gpt's fp32 build: the same float32
                             gradients, summed in another order; ~1e-7 per value, 1e-5 leaves room)
  reference GOLDEN BETA DIR    a run over the golden set (dev/reference/noise_reference.py: --lr 0,
                             --shuffle 0, one or more whole epochs) against its exact float64 numbers:
                             |G_small|² and |G_big|² of every step within 1e-5 relative; the logged
                             noise_scale equal to the EMA of the exact norms; B_noise from the run
                             equal to the set's exact B_noise' within the statistical tolerance below
  splits T BETA DIR...       runs of one global batch with frozen weights (--lr 0), split differently:
                             |G_big|² per step within 1e-5 relative (the same global batch, the same
                             weights); B_noise within a stated statistical tolerance (below); and each
                             run's logged noise_scale equal to this file's own EMA of the paper's
                             estimates (recomputed from the logged norms)

The estimate of B_noise here is the ratio of the plain means of the per-step unbiased estimates
(McCandlish et al. 2018, App. A): with frozen weights every step is an independent draw of
batches, so a mean over N steps has standard error sd/√N, and the ratio r = mean(tr)/mean(g2)
the linearised one sd(tr_i − r·g2_i) / (√N · mean(g2)). Two splits must agree within
5·√(se_a² + se_b²): the splits share their global batches, which correlates their estimates
positively, so the true spread of the difference is smaller and the bound conservative; a false
failure is rarer than 1 in 10⁶ (and the data are fixed). Each se must also be below 20 % of r, so
that a wrong rescale of |G_small|² (by A·R instead of (A·R)², say: a factor 2 to 4) fails.
"""
import collections
import json
import math
import sys


def train_records(d):
    return [r for r in map(json.loads, open(f"{d}/log.jsonl")) if r["type"] == "train"]


def config(d):
    return next(r for r in map(json.loads, open(f"{d}/log.jsonl")) if r["type"] == "config")


def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-30)


def agree(a, b):
    ra, rb = train_records(a), train_records(b)
    if len(ra) != len(rb) or not ra:
        print(f"FAIL: {len(ra)} and {len(rb)} steps")
        return False
    worst = 0.0
    for x, y in zip(ra, rb):
        for k in ("grad_norm_small", "grad_norm_big"):
            if k not in x or k not in y or not all(map(math.isfinite, (x[k], y[k]))):
                print(f"FAIL: step {x['step']}: {k} missing or not finite")
                return False
            worst = max(worst, rel(x[k], y[k]))
    print(f"largest relative difference of grad_norm_small, grad_norm_big: {worst:.2e} (tolerance 1e-5)")
    return worst <= 1e-5


def estimates(d, T):
    c = config(d)
    b_small, b_big = c["B"] * T, c["global_batch"]
    g2, tr = [], []
    for r in train_records(d):
        s, b = r["grad_norm_small"] ** 2, r["grad_norm_big"] ** 2
        g2.append((b_big * b - b_small * s) / (b_big - b_small))
        tr.append((s - b) / (1 / b_small - 1 / b_big))
    return g2, tr


def ratio_and_se(g2, tr):
    n = len(g2)
    mg, mt = sum(g2) / n, sum(tr) / n
    r = mt / mg
    e = [t - r * g for g, t in zip(g2, tr)]
    me = sum(e) / n
    sd = math.sqrt(sum((x - me) ** 2 for x in e) / (n - 1))
    return r, sd / (math.sqrt(n) * mg)


def ema_check(d, T, beta):
    """The last logged noise_scale against the EMAs recomputed here from the logged norms."""
    g2, tr = estimates(d, T)
    eg = et = 0.0
    for g, t in zip(g2, tr):
        eg, et = beta * eg + (1 - beta) * g, beta * et + (1 - beta) * t
    logged = train_records(d)[-1]["noise_scale"]
    # the norms are logged with 7 significant digits; squared and subtracted, that leaves ~1e-5
    ok = logged is not None and rel(logged, et / eg) < 1e-3
    print(f"{d}: logged noise_scale {logged}, recomputed {et / eg:.6g} (tolerance 1e-3 relative)")
    return ok


def splits(T, dirs, beta):
    ok = True
    runs = {d: train_records(d) for d in dirs}
    ref = dirs[0]
    for d in dirs[1:]:
        if len(runs[d]) != len(runs[ref]):
            print(f"FAIL: {d} has {len(runs[d])} steps, {ref} {len(runs[ref])}")
            return False
        worst = max(rel(x["grad_norm_big"] ** 2, y["grad_norm_big"] ** 2) for x, y in zip(runs[ref], runs[d]))
        print(f"|G_big|², {d} vs {ref}: largest relative difference {worst:.2e} (tolerance 1e-5)")
        ok &= worst <= 1e-5
    results = {}
    for d in dirs:
        c = config(d)
        r, se = ratio_and_se(*estimates(d, T))
        results[d] = (r, se)
        print(f"{d}: (B,A,R)=({c['B']},{c['A']},{c['R']}) B_noise = {r:.1f} ± {se:.1f} tokens over {len(runs[d])} steps")
        if not (math.isfinite(r) and r > 0 and se < 0.20 * r):
            print(f"FAIL: {d}: the estimate is not precise enough for the comparison to mean anything")
            ok = False
        ok &= ema_check(d, T, beta)
    for i, a in enumerate(dirs):
        for b in dirs[i + 1:]:
            (ra, sa), (rb, sb) = results[a], results[b]
            tol = 5 * math.hypot(sa, sb)
            print(f"B_noise {a} vs {b}: {ra:.1f} vs {rb:.1f}, difference {abs(ra - rb):.1f} (tolerance {tol:.1f})")
            ok &= abs(ra - rb) <= tol
    return ok


def read_golden(path):
    """The reference's "name value" lines, and per split (B, A, R) its per-chunk (small², big²)."""
    values, chunks, split = {}, collections.defaultdict(list), None
    for words in map(str.split, open(path)):
        if words[0] == "split":
            split = tuple(map(int, words[1:]))
        elif words[0] == "chunk":
            chunks[split].append((float(words[2]), float(words[3])))
        else:
            values[words[0]] = float(words[1])
    return values, chunks


def reference(golden, beta, d):
    values, chunks = read_golden(golden)
    c, runs = config(d), train_records(d)
    T, split = int(values["seq_len"]), (c["B"], c["A"], c["R"])
    rows = chunks.get(split)
    if not rows or not runs or len(runs) % len(rows):
        print(f"FAIL: {d}: split {split}, {len(runs)} steps: the golden file has "
              f"{len(rows or [])} chunks for it (the run must cover whole epochs)")
        return False
    # float32 gradients summed over ~10⁵ parameters: ~1e-6 relative; the log keeps 7 digits
    worst = 0.0
    for r in runs:
        small, big = rows[(r["step"] - 1) % len(rows)]
        worst = max(worst, rel(r["grad_norm_small"] ** 2, small), rel(r["grad_norm_big"] ** 2, big))
    print(f"{d}: (B,A,R)={split}: |G_small|², |G_big|² of {len(runs)} steps against the exact values: "
          f"largest relative difference {worst:.2e} (tolerance 1e-5)")
    ok = worst <= 1e-5
    # the estimate: the ratio of the means of the per-step unbiased estimates over whole epochs, so
    # every sequence counts equally. The chunks are one partition of the set, not independent draws;
    # its sampling error is estimated as for independent draws (ratio_and_se), and the estimate must
    # lie within 4 such errors of the set's B_noise' (the value over all partitions). Since the
    # partition is fixed, this is a fixed number: it shows the estimator's formulas and units (a
    # wrong rescale of |G_small|², a factor 2 or more, fails), not its spread.
    r, se = ratio_and_se(*estimates(d, T))
    truth = values["noise_scale_tokens_finite"]
    print(f"{d}: B_noise {r:.1f} ± {se:.1f} tokens; the set's exact B_noise' {truth:.1f} "
          f"(tolerance 4 × {se:.1f}; the estimate's error must be under 25 %)")
    ok &= abs(r - truth) <= 4 * se and se < 0.25 * truth
    # the logged moving average against the paper's EMAs of the exact norms (host/noise.h's
    # formulas, written again here): the norms enter squared and subtracted, so 1e-3
    b_small, b_big = c["B"] * T, c["global_batch"]
    eg = et = 0.0
    for r in runs:
        small, big = rows[(r["step"] - 1) % len(rows)]
        eg = beta * eg + (1 - beta) * (b_big * big - b_small * small) / (b_big - b_small)
        et = beta * et + (1 - beta) * (small - big) / (1 / b_small - 1 / b_big)
    logged = runs[-1]["noise_scale"]
    print(f"{d}: logged noise_scale {logged}, from the exact norms {et / eg:.6g} (tolerance 1e-3 relative)")
    return ok and logged is not None and rel(logged, et / eg) <= 1e-3


if __name__ == "__main__":
    if sys.argv[1] == "agree":
        ok = agree(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "reference":
        ok = reference(sys.argv[2], float(sys.argv[3]), sys.argv[4])
    elif sys.argv[1] == "splits":
        ok = splits(int(sys.argv[2]), sys.argv[4:], float(sys.argv[3]))
    else:
        sys.exit(__doc__)
    sys.exit(0 if ok else 1)
