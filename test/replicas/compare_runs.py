#!/usr/bin/env python3
"""compare_runs.py [--states] [--tol X] DIR_A DIR_B STEP [FROM]: do two training runs agree?

The losses, validation losses and gradient norms of steps >= FROM in both runs' log.jsonl, and their model
files at STEP, must agree within 1e-5 relative (weights: ||a - b|| / ||a||). Prints the
largest differences; exit status 0 if they agree, 1 if not. Used by the replica tests
(replicas/cpu_replicas.sh, replicas/gpu_replicas.sh): every split of one global batch trains the same
model, up to float32 rounding (~1e-7 per step; 20 Adam steps amplify that to ~1e-6).
The gradient norm matters: Adam and clipping hide a gradient that is off by a constant
factor (a loss scaled by 1/(B·T·A) instead of 1/(B·T·A·R)) from the losses.
With --states, AdamW's moments m and v in the state files at STEP too, each within 1e-5
relative by the same norm (the ZeRO tests: the sharded optimizer state gathered into the file
must be the unsharded one, up to the rounding of the sums).
--tol X replaces 1e-5 in every bound above.
With --noise, also the noise scale's grad_norm_small (√|G_small|², host/noise.h) of every step:
present and positive in both runs, and within the same bound.
"""
import json
import math
import struct
import sys


def losses(d, first):
    out, val = {}, {}
    for line in open(f"{d}/log.jsonl"):
        r = json.loads(line)
        if r["type"] == "train" and r["step"] >= first:
            out[r["step"]] = (r["loss"], r["grad_norm"], r.get("grad_norm_small", float("nan")))
        if r["type"] == "val" and r["step"] >= first:
            val[r["step"]] = r["val_loss"]
    return out, val


def weights(d, step):
    raw = open(f"{d}/model_{step:08d}.bin", "rb").read()[1024:]
    return struct.unpack(f"{len(raw) // 4}f", raw)


def moments(d, step):
    raw = open(f"{d}/state_{step:08d}.bin", "rb").read()[1024:]
    n = len(raw) // 8
    return struct.unpack(f"{n}f", raw[:4 * n]), struct.unpack(f"{n}f", raw[4 * n:8 * n])


def relative(wa, wb):
    if len(wa) != len(wb) or not wa:  # zip() would compare only the common start
        return float("inf")
    num = sum((x - y) ** 2 for x, y in zip(wa, wb))
    den = sum(x * x for x in wa)
    return math.sqrt(num / den) if den > 0 else float("inf")


def main():
    args = sys.argv[1:]
    states = "--states" in args
    noise = "--noise" in args
    args = [x for x in args if x not in ("--states", "--noise")]
    tol = 1e-5
    if "--tol" in args:  # a looser bound, for splits the bf16 build cannot hold to 1e-5 (replicas/gpu_zero.sh)
        i = args.index("--tol")
        tol = float(args[i + 1])
        args = args[:i] + args[i + 2:]
    a, b, step = args[0], args[1], int(args[2])
    first = int(args[3]) if len(args) > 3 else 1
    (la, va), (lb, vb) = losses(a, first), losses(b, first)
    if sorted(la) != sorted(lb) or not la or sorted(va) != sorted(vb):
        sys.exit(f"different steps logged: {sorted(la)} vs {sorted(lb)}, validation {sorted(va)} vs {sorted(vb)}")
    worst_loss = max([abs(la[s][0] - lb[s][0]) / abs(la[s][0]) for s in la] +
                     [abs(va[s] - vb[s]) / abs(va[s]) for s in va])  # training and validation losses
    worst_norm = max(abs(la[s][1] - lb[s][1]) / abs(la[s][1]) for s in la)
    wa, wb = weights(a, step), weights(b, step)
    if len(wa) != len(wb) or not wa:  # zip() would compare only the common start
        sys.exit(f"model files at step {step} hold {len(wa)} and {len(wb)} weights")
    num = sum((x - y) ** 2 for x, y in zip(wa, wb))
    den = sum(x * x for x in wa)
    worst_w = math.sqrt(num / den)
    line = f"   max relative difference: loss {worst_loss:.2e}, grad norm {worst_norm:.2e}, weights {worst_w:.2e}"
    ok = worst_loss <= tol and worst_norm <= tol and worst_w <= tol  # NaN compares false: fails
    if noise:  # a missing or zero |G_small| (NaN here) fails
        diffs = [abs(la[s][2] - lb[s][2]) / la[s][2] if la[s][2] > 0 else math.inf for s in la]
        worst_small = math.inf if any(not math.isfinite(d) for d in diffs) else max(diffs)
        line += f", grad norm small {worst_small:.2e}"
        ok = ok and worst_small <= tol
    if states:
        (ma, va_), (mb, vb_) = moments(a, step), moments(b, step)
        dm, dv = relative(ma, mb), relative(va_, vb_)
        line += f", AdamW m {dm:.2e}, v {dv:.2e}"
        ok = ok and dm <= tol and dv <= tol
    print(line)
    sys.exit(0 if ok else 1)


main()
