#!/usr/bin/env python3
"""plot.py - charts from a loom-bench JSON file (<results dir>/<suite>-<date>.json: ./loom-results by default).

    python3 bench/plot.py bench/results/baseline-20261122-101500.json [--out DIR]

Draws PNG files next to the JSON (or in DIR), named <json stem>-<chart>.png:
  time-vs-m      rows with a GEMM shape (m > 0), one panel per (op, n, k,
                 layout, dtype): every measured time column (fused, gemm,
                 comm, seq, the PyTorch peer's) per implementation against
                 m, so fused ops and their baselines share a panel (an
                 AUTO row's time, auto_us, is one line per AUTO row kind,
                 whichever path each point took)
  tflops         TFLOP/s of every row that has it
  time-vs-bytes  rows with a byte size and no GEMM shape (collectives), one
                 panel per op, time against bytes
  busbw          bus bandwidth against bytes, one line per op
A chart with no rows is not drawn. Prints the files written.

Needs matplotlib; without it, says so in one line and exits 1.
"""
import argparse
import json
import os
import sys
from collections import OrderedDict

TIME_COLS = [("fused_us", "fused"), ("auto_us", "auto"), ("gemm_us", "GEMM"), ("comm_us", "comm"),
             ("seq_us", "sequential"), ("peer_us", "PyTorch peer")]


def num(v):
    """A JSON number or None (null, missing, NaN)."""
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f else None


def layout_of(shape):
    last = (shape or "").split()[-1:] or [""]
    return last[0] if last[0] in ("KN", "NK") else ""


def fmt_bytes(b):
    for unit, s in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if b >= unit:
            return "%g %s" % (b / unit, s)
    return "%d B" % b


def gemm_groups(rows):
    groups = OrderedDict()
    for r in rows:
        if (r.get("m") or 0) > 0:
            key = (r.get("op", "?"), r.get("n", 0), r.get("k", 0), layout_of(r.get("shape")), r.get("dtype", ""))
            groups.setdefault(key, []).append(r)
    return groups


def coll_groups(rows):
    groups = OrderedDict()
    for r in rows:
        if (r.get("m") or 0) == 0 and (r.get("bytes") or 0) > 0:
            groups.setdefault(r.get("op", "?"), []).append(r)
    return groups


def series(rows, xkey):
    """{(impl, column label): [(x, y)]} for every time column present. The
    fused and auto columns are per implementation; the baselines (GEMM,
    comm, sequential, peer), which every row of one shape repeats, once."""
    out = OrderedDict()
    for r in sorted(rows, key=lambda r: r.get(xkey) or 0):
        for col, label in TIME_COLS:
            y = num(r.get(col))
            if y is None:
                continue
            own = col in ("fused_us", "auto_us")
            impl = r.get("impl", "")
            if col == "auto_us":  # one line per AUTO row kind, whichever path each m took
                impl = impl.split(":")[0]
            key = (impl, label) if own else ("", label)
            pts = out.setdefault(key, [])
            if own or all(x != r.get(xkey) for x, _ in pts):
                pts.append((r.get(xkey), y))
    return out


def panels(plt, n):
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.9 * rows), squeeze=False)
    flat = [a for row in axes for a in row]
    for a in flat[n:]:
        a.set_visible(False)
    return fig, flat[:n]


def title_of(data):
    return "%s on %s (%d GPU%s, world %s), %s, commit %s" % (
        data.get("suite", "?"), data.get("device", "?"), data.get("gpus", 0),
        "" if data.get("gpus", 0) == 1 else "s", data.get("world", "?"), data.get("date", "?"),
        data.get("commit", "?"))


def draw(data, out_dir, stem, plt):
    rows = data.get("rows", [])
    written = []

    def save(fig, name):
        path = os.path.join(out_dir, "%s-%s.png" % (stem, name))
        fig.suptitle(title_of(data), fontsize=9)
        fig.tight_layout(rect=(0, 0, 1, 0.95))
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)

    g = gemm_groups(rows)
    if g:
        fig, axes = panels(plt, len(g))
        for ax, (key, grows) in zip(axes, g.items()):
            op, n, k, lay, dt = key
            for (impl, label), pts in series(grows, "m").items():
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=("%s %s" % (impl, label)).strip())
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("m")
            ax.set_ylabel("time (us)")
            ax.set_title("%s n=%s k=%s %s %s" % (op, n, k, lay, dt), fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        save(fig, "time-vs-m")

    tf = [r for r in rows if num(r.get("tflops")) is not None]
    if tf:
        fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(tf) + 2), 4.5))
        labels = ["%s %s %s" % (r.get("op", ""), r.get("impl", ""), r.get("shape", "")) for r in tf]
        ax.bar(range(len(tf)), [num(r["tflops"]) for r in tf])
        ax.set_xticks(range(len(tf)))
        ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("TFLOP/s")
        ax.grid(True, axis="y", alpha=0.3)
        save(fig, "tflops")

    c = coll_groups(rows)
    if c:
        fig, axes = panels(plt, len(c))
        for ax, (op, crows) in zip(axes, c.items()):
            for (impl, label), pts in series(crows, "bytes").items():
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=("%s %s" % (impl, label)).strip())
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ticks = sorted({r["bytes"] for r in crows})
            ax.set_xticks(ticks)
            ax.set_xticklabels([fmt_bytes(b) for b in ticks], rotation=45, fontsize=7)
            ax.set_xlabel("bytes")
            ax.set_ylabel("time (us)")
            ax.set_title(op, fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        save(fig, "time-vs-bytes")

        bw = OrderedDict()
        for op, crows in c.items():
            pts = [(r["bytes"], num(r.get("busbw_gbs"))) for r in sorted(crows, key=lambda r: r["bytes"])]
            pts = [p for p in pts if p[1] is not None]
            if pts:
                bw[op] = pts
        if bw:
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for op, pts in bw.items():
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=op)
            ax.set_xscale("log", base=2)
            ticks = sorted({p[0] for pts in bw.values() for p in pts})
            ax.set_xticks(ticks)
            ax.set_xticklabels([fmt_bytes(b) for b in ticks], rotation=45, fontsize=7)
            ax.set_xlabel("bytes")
            ax.set_ylabel("busbw (GB/s)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
            save(fig, "busbw")
    return written


def main(argv):
    ap = argparse.ArgumentParser(description="Charts (PNG) from a loom-bench JSON results file.")
    ap.add_argument("json", help="a file written by loom-bench (<results dir>/<suite>-<date>.json)")
    ap.add_argument("--out", help="directory for the PNG files (default: next to the JSON)")
    args = ap.parse_args(argv)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: matplotlib is not installed (pip install matplotlib); no charts drawn", file=sys.stderr)
        return 1
    try:
        with open(args.json) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        print("plot.py: cannot read %s: %s" % (args.json, e), file=sys.stderr)
        return 1
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        print("plot.py: %s is not a loom-bench results file (no \"rows\" list)" % args.json, file=sys.stderr)
        return 1
    out_dir = args.out or os.path.dirname(os.path.abspath(args.json))
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.splitext(os.path.basename(args.json))[0]
    written = draw(data, out_dir, stem, plt)
    if not written:
        print("plot.py: %s has no rows to chart" % args.json, file=sys.stderr)
        return 1
    for p in written:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
