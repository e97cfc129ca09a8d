#!/usr/bin/env python3
"""wgmma_wait_sites.py BUILD_LOG PTX... - where ptxas injected a warpgroup.wait (C7517) in the sm90 GEMM
kernels, relative to each kernel's main loop.

ptxas reports "(C7517) warpgroup.wait is injected in around line N ... in function 'F'" when registers
written by wgmma are read before the code waits for them; inside the main loop such a wait serialises the
wgmma pipeline. BUILD_LOG is a build's output holding those reports (the nvcc lines of `make` print them);
each PTX is the PTX of one translation unit that the reports' line numbers refer to, e.g.
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=compute_90a -I. -Iinclude -Isrc -ptx \\
       src/gemm/gemm_sm90_128x128_bf16.cu -o 128x128_bf16.ptx
A report is placed in the PTX whose entry F spans line N; "inside" means between the entry's first and
last wgmma.mma_async (the only place the kernel issues them is the main loop), "after" past the last.
Prints one line per report and a count per translation unit and place.
"""
import collections
import re
import sys


def entries(path):
    lines = open(path).read().split("\n")
    ents = []
    for i, l in enumerate(lines):
        m = re.search(r"\.entry (\S+)\(", l)
        if m:
            ents.append([i + 1, None, m.group(1)])
    for j, e in enumerate(ents):
        e[1] = ents[j + 1][0] - 1 if j + 1 < len(ents) else len(lines)
    out = {}
    for s, e, name in ents:
        w = [i + 1 for i in range(s - 1, e) if "wgmma.mma_async" in lines[i]]
        out[name] = (s, e, w)
    return out


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    reports = []
    for l in open(sys.argv[1], errors="replace"):
        m = re.search(r"C7517\) warpgroup.wait is injected in around line (\d+) .*function '(\S+)'", l)
        if m:
            reports.append((int(m.group(1)), m.group(2)))
    ptx = {p: entries(p) for p in sys.argv[2:]}
    count = collections.Counter()
    for line, fn in reports:
        for p, ents in ptx.items():
            if fn in ents and ents[fn][0] <= line <= ents[fn][1]:
                s, e, w = ents[fn]
                place = "inside" if w and w[0] <= line <= w[-1] else "after" if w and line > w[-1] else "before"
                count[(p, place)] += 1
                print("%-7s %-28s +%-6d %s" % (place, p.split("/")[-1], line - s, fn[:100]))
                break
        else:
            count[("(no PTX given)", "-")] += 1
    print("reports %d" % len(reports))
    for (p, place), n in sorted(count.items()):
        print("  %-40s %-7s %d" % (p.split("/")[-1], place, n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
