#!/usr/bin/env python3
"""tp_auto_check.py - does AUTO hold on the shapes of a loom-bench TP run?

    python3 bench/tp_auto_check.py RESULTS.json [RESULTS.json ...] [--floor 0.98]

Reads the JSON of `loom-bench ag_gemm` / `gemm_rs` (any --set; the shape
set's rows end in " F" for the fitting half and " H" for the held-out
half, the reference models' rows in neither) and, per op and half, prints:

  shapes      how many shapes have an AUTO row and a sequential time
  auto/seq    the geometric mean and the minimum of seq / auto (> 1: AUTO
              faster than NCCL + cuBLASLt one after the other)
  < floor     the shapes where seq / auto < floor (default 0.98: the
              never-lose rule), each listed with the path AUTO took
  oracle      seq / the best of every path measured (fused ones and the
              sequential), geometric mean: what a perfect choice reaches
  missed      the shapes where a path other than AUTO's was >= 5% faster
  overlap     the mean overlap efficiency of the best fused path at m >= 1024

A rule (or a model of the paths) is fitted on the F rows and judged on the
H rows: the H half's "< floor" list is the number that counts.
"""
import argparse
import collections
import json
import math
import re
import sys

SHAPE_RE = re.compile(r"^(?P<model>\S+) tp(?P<tp>\d+) m=(?P<m>\d+)(?: (?P<half>[FH]))?$")


def load(paths):
    """{(op, shape): {impl: row}} over every file."""
    by = collections.defaultdict(dict)
    for p in paths:
        with open(p) as f:
            doc = json.load(f)
        for r in doc.get("rows", []):
            if r.get("op") in ("ag_gemm", "gemm_rs"):
                by[(r["op"], r["shape"])][r["impl"]] = r
    return by


def half_of(shape):
    m = SHAPE_RE.match(shape)
    if not m:
        return "other", 0
    return {"F": "fitting", "H": "held-out"}.get(m.group("half"), "models"), int(m.group("m"))


def row_time(r):
    for k in ("auto_us", "fused_us"):
        v = r.get(k)
        if isinstance(v, (int, float)) and v > 0:
            return v
    return None


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def judge(by, floor):
    """Per (op, half): the statistics above."""
    out = collections.defaultdict(lambda: {"n": 0, "ratios": [], "oracle": [], "below": [], "missed": [],
                                           "overlap": []})
    for (op, shape), rows in sorted(by.items()):
        auto = next((r for impl, r in rows.items() if impl.startswith(("loom-auto", "loom-tuned"))), None)
        if not auto or not isinstance(auto.get("seq_us"), (int, float)):
            continue
        t_auto, seq = row_time(auto), auto["seq_us"]
        if not t_auto:
            continue
        half, m = half_of(shape)
        s = out[(op, half)]
        s["n"] += 1
        s["ratios"].append(seq / t_auto)
        fused = {impl: row_time(r) for impl, r in rows.items() if not impl.startswith(("loom-auto", "loom-tuned"))}
        fused = {k: v for k, v in fused.items() if v}
        best = min([seq] + list(fused.values()))
        s["oracle"].append(seq / best)
        if seq / t_auto < floor:
            s["below"].append((shape, auto["impl"], seq / t_auto))
        if best < 0.95 * t_auto:
            s["missed"].append((shape, auto["impl"], t_auto / best))
        if m >= 1024 and fused:
            impl = min(fused, key=fused.get)
            ov = rows[impl].get("overlap")
            if isinstance(ov, (int, float)):
                s["overlap"].append(ov)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json", nargs="+")
    ap.add_argument("--floor", type=float, default=0.98)
    a = ap.parse_args()
    stats = judge(load(a.json), a.floor)
    if not stats:
        print("tp_auto_check: no AUTO rows with a sequential time in %s" % ", ".join(a.json))
        return 1
    print("%-8s %-9s %6s %9s %8s %8s %8s %7s %12s" % ("op", "half", "shapes", "seq/auto", "min", "<floor", "oracle",
                                                      "missed", "overlap>=1k"))
    for (op, half), s in sorted(stats.items()):
        ov = sum(s["overlap"]) / len(s["overlap"]) if s["overlap"] else float("nan")
        print("%-8s %-9s %6d %9.3f %8.3f %8d %8.3f %7d %12.2f" % (op, half, s["n"], geomean(s["ratios"]),
                                                                  min(s["ratios"]), len(s["below"]),
                                                                  geomean(s["oracle"]), len(s["missed"]), ov))
    for (op, half), s in sorted(stats.items()):
        for shape, impl, r in s["below"]:
            print("below %.2f: %s %s %s %s seq/auto %.3f" % (a.floor, op, half, shape, impl, r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
