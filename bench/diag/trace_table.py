#!/usr/bin/env python3
"""trace_table.py - the stage timelines of LOOM_DEBUG=TRACE logs as a table.

A traced call logs one line (src/core/trace.h):
  loom 123 TRACE: ag_gemm rank 0 call 7 [2048 x 1280 x 8192, LOOM_TP_COPY_ENGINE]: host 38.2 us;
      device/host us: begin 7.5/5.6 side.ready 19.9/10.6 ... end 162.6/46.6
This prints, per op, label and rank, the median device time of each stage
over the calls (the first `--skip` calls of each left out: warm-up), in the
order the stages were logged, and the number of calls.

    python3 bench/diag/trace_table.py [--skip N] [--rank R] LOG [LOG ...]
"""
import argparse
import re
import statistics
import sys

LINE = re.compile(r"TRACE: (\S+) rank (\d+) call (\d+) \[([^\]]*)\]: host [0-9.]+ us; device/host us: (.*)$")
STAGE = re.compile(r"(\S+) (-?[0-9.]+)/(-?[0-9.]+)")


def parse(lines):
    """(op, label, rank) -> list of (call, [(stage, device_us), ...])."""
    out = {}
    for line in lines:
        m = LINE.search(line)
        if not m:
            continue
        op, rank, call, label, rest = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4), m.group(5)
        stages = [(s, float(d)) for s, d, _ in STAGE.findall(rest)]
        out.setdefault((op, label, rank), []).append((call, stages))
    return out


def table(calls, skip):
    """The stages in logged order with their median device time (us), and the calls counted."""
    kept = [st for c, st in sorted(calls) if c >= skip] or [st for c, st in sorted(calls)]
    order, times = [], {}
    for st in kept:
        for s, d in st:
            if s not in times:
                order.append(s)
                times[s] = []
            times[s].append(d)
    return [(s, statistics.median(times[s])) for s in order], len(kept)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--skip", type=int, default=2, help="calls of each plan left out at the start (default 2)")
    ap.add_argument("--rank", type=int, default=None, help="one rank only")
    a = ap.parse_args(argv)
    lines = []
    for p in a.logs:
        with open(p, errors="replace") as f:
            lines += f.read().splitlines()
    rows = parse(lines)
    if not rows:
        print("trace_table: no TRACE call lines found", file=sys.stderr)
        return 1
    for (op, label, rank), calls in sorted(rows.items()):
        if a.rank is not None and rank != a.rank:
            continue
        st, n = table(calls, a.skip)
        print(f"{op} [{label}] rank {rank}, {n} calls, median us: " + "  ".join(f"{s} {d:.1f}" for s, d in st))
    return 0


if __name__ == "__main__":
    sys.exit(main())
