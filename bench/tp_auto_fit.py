#!/usr/bin/env python3
"""tp_auto_fit.py - AUTO's AllGather + GEMM rule against measured rows,
offline: for each rule, seq / chosen per shape (the fused path's measured
time where the rule fuses, the sequential path's where it does not) from
loom-bench ag_gemm JSON that holds both paths of every shape (loom-ce rows
and seq_us), split by the shape set's halves (F fitting, H held-out; rows
of --set models count as F), per file (each file one run, one device).

    python3 bench/tp_auto_fit.py [--grid] RUN.json [RUN.json ...]

Rules (the formulas of src/ops/tp/tp_schedule.h, written again here for
the sweep; tests/host/tp/test_tp_schedule.c pins the C rule's choices):
  before   loom__tp_ag_pays as of c1e5730 (c <= 0.2 at >= 1024-row shards,
           c <= 0.5 at >= 4096 rows, k >= 2048)
  gemm(TG) loom__tp_ag_pays of ccd020e .. 510d1ea: k >= 2048, >= 1024-row
           shards and the model's GEMM time 2 m n k / FLOP/s >= TG us
           (H100/H200: 132 SMs x 1.98 GHz x 4096 FLOP); that C rule's TG
           was 60; the rule since is gemm(0) (refitted once the copy
           engine's signals became copies and a shard one chunk)
--grid: the sweep of TG on the F rows of every file, printed with the H
rows' result, to choose the constant on F and read it on H.
"""
import argparse
import collections
import json
import math

FLOPS = 132 * 1.98e9 * 4096
LINK = 450e9


def before(m, n, k, W, es, S):
    if W < 2 or k < 2048:
        return False
    c = FLOPS / LINK * (W - 1) / W * es / (2.0 * n)
    return (S >= 1024 and c <= 0.2) or (S >= 4096 and c <= 0.5)


def gemm_time(tg_us):
    def rule(m, n, k, W, es, S):
        return W >= 2 and k >= 2048 and S >= 1024 and 2.0 * m * n * k / FLOPS * 1e6 >= tg_us
    return rule


def load(path):
    d = json.load(open(path))
    by = collections.defaultdict(dict)
    for r in d["rows"]:
        if r.get("op") != "ag_gemm":
            continue
        by[(r["shape"], r["m"], r["n"], r["k"], r["world"])][r["impl"]] = r
    shapes = []
    for (shape, m, n, k, W), v in by.items():
        ce = v.get("loom-ce")
        if ce is None or not ce.get("fused_us") or not ce.get("seq_us"):
            continue
        half = shape.split()[-1] if shape.split()[-1] in ("F", "H") else "F"
        es = 4 if ce.get("dtype") == "fp32" else 2
        S = -(-m // W)
        shapes.append(dict(shape=shape, m=m, n=n, k=k, W=W, es=es, S=S, half=half, seq=ce["seq_us"],
                           ce=ce["fused_us"]))
    return d.get("device", "?"), shapes


def score(shapes, rule, half):
    """(shapes, geomean of seq / chosen, min, fused count) over m > 64 rows of `half`."""
    rs, fused = [], 0
    for s in shapes:
        if s["half"] != half or s["m"] <= 64:
            continue
        f = rule(s["m"], s["n"], s["k"], s["W"], s["es"], s["S"])
        fused += f
        rs.append(s["seq"] / s["ce"] if f else 1.0)
    if not rs:
        return 0, 1.0, 1.0, 0
    return len(rs), math.exp(sum(math.log(x) for x in rs) / len(rs)), min(rs), fused


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grid", action="store_true")
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    runs = [(p,) + load(p) for p in a.runs]
    rules = {"before": before, "gemm(60)": gemm_time(60)}
    print("run | device | half | rule | shapes | fused | seq/chosen geomean | min")
    for p, dev, shapes in runs:
        for half in ("F", "H"):
            for name, rule in rules.items():
                n, g, lo, f = score(shapes, rule, half)
                if n:
                    print(f"{p.split('/')[-2]} | {dev} | {half} | {name} | {n} | {f} | {g:.4f} | {lo:.3f}")
    if a.grid:
        print("\nTG | F geomean (min) per run | H geomean (min) per run")
        for tg in (0, 20, 40, 50, 60, 80, 100, 150):
            cells = []
            for half in ("F", "H"):
                xs = [score(s, gemm_time(tg), half) for _, _, s in runs]
                cells.append(" ".join(f"{x[1]:.3f}({x[2]:.2f})" for x in xs if x[0]))
            print(f"{tg:3d} | {cells[0]} | {cells[1]}")


if __name__ == "__main__":
    main()
