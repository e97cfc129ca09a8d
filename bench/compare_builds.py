#!/usr/bin/env python3
"""compare_builds.py - the same loom-bench suites of two builds, row by row.

    python3 bench/compare_builds.py BEFORE_DIR NOW_DIR [--json OUT.json]

BEFORE_DIR and NOW_DIR hold the JSON that loom-bench wrote for the same
suites and arguments, run one after the other on one machine in one job
(bench/device.sh with LOOM_BEFORE_BENCH does that). Rows are matched by
(op, what ran, shape, dtype, bytes); "what ran" is the impl name up to a
':' (a loom-auto row names the path it resolved to after it, and the two
builds may resolve differently: the table shows both). For each matched
row: the main time (median; fused_us, else auto_us, comm_us, gemm_us, seq_us: the
first the row has) of each build and now/before (< 1: faster
now). Rows whose impl is not loom's (cuBLASLt, NCCL, sequential) are the
noise floor: they run the same code in both builds, so their spread is how
far apart two runs of unchanged code land. The summary, per suite: the
geometric mean and the extremes of now/before over loom's rows and over the
others.

Two runs one after the other need not see the same clocks (a GPU that
has run large GEMMs for a minute runs them slower), so each loom row is
also compared relative to its own run: its time over the same run's
baseline for the same shape (the row's seq_us where it has one, else the
baseline rows of the same op, shape, dtype and bytes: cuBLASLt for a GEMM,
NCCL for a collective), now over before. The summary's "loom/base" rows
give that ratio; a change of code shows in it, a change of clocks does not.
"""
import argparse
import glob
import json
import math
import os
import sys


def rows_of(directory):
    """{suite: {key: row}} from every loom-bench JSON in directory."""
    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict) or "rows" not in doc or "suite" not in doc:
            continue
        suite = out.setdefault(doc["suite"], {})
        for r in doc["rows"]:
            key = (r.get("op"), r.get("impl", "").split(":")[0], r.get("shape"), r.get("dtype"), r.get("bytes"))
            suite[key] = r
    return out


TIME_KEYS = ("fused_us", "auto_us", "comm_us", "gemm_us", "seq_us")


def main_time(r):
    """A row's main time: the first of TIME_KEYS it has (a fused op's time, a
    collective's, a GEMM's, a sequential baseline's)."""
    for k in TIME_KEYS:
        v = r.get(k)
        if isinstance(v, (int, float)) and v > 0:
            return v
    return None


def is_loom(impl):
    return impl.startswith("loom")


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def baseline_time(rows, key, r):
    """The same run's baseline for loom row r (key its match key): its seq_us,
    else the geometric mean of the run's non-loom rows of the same op, shape,
    dtype and bytes; None where there is neither."""
    v = r.get("seq_us")
    if isinstance(v, (int, float)) and v > 0:
        return v
    base = [main_time(o) for k, o in rows.items()
            if (k[0], k[2], k[3], k[4]) == (key[0], key[2], key[3], key[4]) and not is_loom(k[1])]
    base = [t for t in base if t]
    return geomean(base) if base else None


def compare(before, now):
    """The matched rows and the per-suite summary."""
    table, summary = [], []
    for suite in sorted(set(before) & set(now)):
        ratios = {True: [], False: [], "rel": []}
        for key in sorted(set(before[suite]) & set(now[suite]), key=str):
            b, n = before[suite][key], now[suite][key]
            tb, tn = main_time(b), main_time(n)
            if tb is None or tn is None:
                continue
            ratio = tn / tb
            rel = None
            if is_loom(key[1]):
                bb, bn = baseline_time(before[suite], key, b), baseline_time(now[suite], key, n)
                if bb and bn:
                    rel = (tn / bn) / (tb / bb)
                    ratios["rel"].append(rel)
            table.append({"suite": suite, "op": key[0], "impl_before": b["impl"], "impl_now": n["impl"],
                          "shape": key[2], "dtype": key[3], "before_us": tb, "now_us": tn, "now_over_before": ratio,
                          "relative_to_baseline": rel})
            ratios[is_loom(key[1])].append(ratio)
        for mine, name in ((True, "loom"), (False, "baselines"), ("rel", "loom/base")):
            xs = ratios[mine]
            if xs:
                summary.append({"suite": suite, "rows": name, "n": len(xs),
                                "geomean": geomean(xs), "min": min(xs), "max": max(xs)})
    return table, summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("before")
    ap.add_argument("now")
    ap.add_argument("--json", help="also write the table and the summary here")
    a = ap.parse_args()
    table, summary = compare(rows_of(a.before), rows_of(a.now))
    if not table:
        print("compare_builds: no rows matched between %s and %s" % (a.before, a.now))
        return 1
    print("%-14s %-26s %-26s %-34s %12s %12s %10s %10s" % ("suite", "impl (before)", "impl (now)", "shape",
                                                           "before(us)", "now(us)", "now/before", "/baseline"))
    for t in table:
        rel = "%10.3f" % t["relative_to_baseline"] if t["relative_to_baseline"] else "%10s" % "-"
        print("%-14s %-26s %-26s %-34s %12.1f %12.1f %10.3f %s" % (t["suite"], t["impl_before"][:26],
                                                                  t["impl_now"][:26], (t["shape"] or "")[:34],
                                                                  t["before_us"], t["now_us"], t["now_over_before"],
                                                                  rel))
    print("\n%-14s %-10s %5s %10s %8s %8s   (now/before: < 1 faster now; loom/base: each loom row over its own"
          " run's baseline, now over before)" % ("suite", "rows", "n", "geomean", "min", "max"))
    for s in summary:
        print("%-14s %-10s %5d %10.3f %8.3f %8.3f" % (s["suite"], s["rows"], s["n"], s["geomean"], s["min"], s["max"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": table, "summary": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
