#!/usr/bin/env python3
"""same_kernels.py - which kernels' machine code differs between two commits.

Compiles every src/**/*.cu of each commit (a `git worktree` of it) to an
sm_90a cubin with the Makefile's flags, then compares each kernel's .text
section byte for byte. A kernel whose code is identical behaves as the one
measured at the other commit; one that differs needs its GPU tests again.

  python3 bench/diag/same_kernels.py OLD NEW [--jobs N]

Prints one line per .cu file (identical / differs: the kernels that
differ / only in one commit) and exits 1 if any kernel differs. Needs nvcc,
no GPU.
"""
import argparse, concurrent.futures as cf, os, struct, subprocess, sys, tempfile

FLAGS = ["-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-I.", "-Iinclude", "-Isrc",
         "-I/usr/local/include", "-I/usr/local/cuda/include"]


def sections(path):
    """The .text.<kernel> sections of an ELF cubin: {kernel: bytes}."""
    b = open(path, "rb").read()
    shoff = struct.unpack_from("<Q", b, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3a)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + i * shentsize) for i in range(shnum)]
    stro = hdrs[shstrndx][4]
    out = {}
    for h in hdrs:
        name = b[stro + h[0]:b.index(b"\0", stro + h[0])].decode()
        if name.startswith(".text."):
            out[name[6:]] = b[h[4]:h[4] + h[5]]
    return out


def compile_tree(tree, out, jobs):
    cus = sorted(os.path.relpath(os.path.join(d, f), tree) for d, _, fs in os.walk(os.path.join(tree, "src"))
                 for f in fs if f.endswith(".cu"))
    def one(cu):
        dst = os.path.join(out, cu.replace("/", "_") + ".cubin")
        r = subprocess.run(["nvcc", *FLAGS, "-cubin", cu, "-o", dst], cwd=tree, capture_output=True, text=True)
        return cu, (dst if r.returncode == 0 else None), r.stderr[-400:]
    with cf.ThreadPoolExecutor(jobs) as ex:
        return {cu: (dst, err) for cu, dst, err in ex.map(one, cus)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old"), ap.add_argument("new"), ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="same_kernels_")
    built = {}
    for rev in (a.old, a.new):
        tree = os.path.join(tmp, "tree-" + rev)
        subprocess.run(["git", "worktree", "add", "--detach", "-f", tree, rev], check=True, capture_output=True)
        try:
            os.makedirs(os.path.join(tmp, "out-" + rev))
            built[rev] = compile_tree(tree, os.path.join(tmp, "out-" + rev), a.jobs)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", tree], capture_output=True)
    differs = 0
    for cu in sorted(set(built[a.old]) | set(built[a.new])):
        o, n = built[a.old].get(cu), built[a.new].get(cu)
        if not o or not n or not o[0] or not n[0]:
            print(f"{cu}: only in one commit or failed to build")
            differs += 1
            continue
        so, sn = sections(o[0]), sections(n[0])
        bad = sorted(k for k in set(so) | set(sn) if so.get(k) != sn.get(k))
        print(f"{cu}: " + ("identical" if not bad else "differs: " + " ".join(bad)))
        differs += bool(bad)
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
