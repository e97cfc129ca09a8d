#!/usr/bin/env python3
"""bench_overhead.py - what a call through the Python binding costs, against C.

For small GEMMs (where a launch costs as much as the math) it times, side
by side in one process on one GPU, N calls back to back of:
  C loop        loom_gemm called n times from C (python/tools/c_loop.c,
                compiled here with cc; it calls the binding's own libloom)
  ctypes        loom_gemm through ctypes with prepared arguments (the floor
                of any ctypes binding)
  loom.gemm     the binding's function: checks, description cache, torch's
                current stream, out= given
  loom.gemm+alloc   the same, allocating the output (torch's caching allocator)
  loom.linear   x [m, k] @ weight [n, k]^T, as a Linear layer calls it
  torch.mm      torch.mm(a, b, out=c) (cuBLAS through torch's dispatcher),
                what PyTorch users pay for an op, for scale
Each repetition runs every implementation once (order rotated), each as N
calls between two CUDA events on torch's current stream, and measures the
host time to issue them (time.perf_counter). Per call: GPU time (events /
N: the rate at which calls complete, which the host sets when it is the
slower side) and host time (issue time / N). Medians over --reps. The
overhead of the binding = its host time per call minus the C loop's.
Every implementation's output is checked against torch (fp32) once.

Prints a table and writes loom-bench's JSON format (suite
"python_overhead") to $LOOM_BENCH_RESULTS_DIR (else ./loom-results, as loom-bench).

    python3 python/tools/bench_overhead.py [--calls 200] [--reps 20] [--shapes 16x1024x1024,...]
"""
import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

import torch  # noqa: E402

import loom  # noqa: E402
from loom import _lib, ops  # noqa: E402

SHAPES = "16x1024x1024,128x1024x1024,64x4096x4096,512x4096x4096"


def build_c_loop():
    """Compiles c_loop.c into a temporary shared library; returns its function."""
    cc = os.environ.get("CC", "cc").split()[-1]
    if not shutil.which(cc):
        raise SystemExit(f"bench_overhead: no C compiler ({cc}) for the C loop")
    out = Path(tempfile.mkdtemp(prefix="loom-c-loop-")) / "libloom_c_loop.so"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", str(REPO / "python" / "tools" / "c_loop.c"), "-o", str(out)],
                   check=True)
    f = ctypes.CDLL(str(out)).loom_c_loop_gemm
    vp = ctypes.c_void_p
    f.restype = ctypes.c_int
    f.argtypes = [vp, vp, vp, vp, vp, vp, vp, ctypes.c_int]
    return f


def time_impls(impls, calls, warmup, reps):
    """{name: (gpu us/call list, host us/call list)}; impls: name -> fn(n) issuing n calls."""
    stream = torch.cuda.current_stream()
    for fn in impls.values():
        for _ in range(warmup):
            fn(calls)
    torch.cuda.synchronize()
    res = {name: ([], []) for name in impls}
    names = list(impls)
    for rep in range(reps):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for name in order:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            e0.record(stream)
            t0 = time.perf_counter()
            impls[name](calls)
            t1 = time.perf_counter()
            e1.record(stream)
            e1.synchronize()
            res[name][0].append(e0.elapsed_time(e1) * 1000.0 / calls)
            res[name][1].append((t1 - t0) * 1e6 / calls)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default=SHAPES, help="MxNxK,... (bf16, B as a [n, k] Linear weight)")
    ap.add_argument("--calls", type=int, default=200, help="calls per timed batch")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-json", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_overhead: no CUDA GPU", file=sys.stderr)
        return 1
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    lib = _lib.load()
    c_loop = build_c_loop()
    gemm_addr = ctypes.cast(lib.loom_gemm, ctypes.c_void_p).value
    rows, table = [], []
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.lower().split("x"))
        g = torch.Generator(device=dev).manual_seed(m + n + k)
        a = (torch.rand(m, k, device=dev, generator=g) * 2 - 1).bfloat16()
        w = (torch.rand(n, k, device=dev, generator=g) * 2 - 1).bfloat16()
        c = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
        wt = w.t()  # torch.mm's [k, n] view of the same weight
        desc = ops._gemm_desc(m, n, k, loom.DType.BF16, loom.DType.BF16, loom.Layout.NK, False)
        ref = a.float() @ w.float().t()
        pa, pw, pc = a.data_ptr(), w.data_ptr(), c.data_ptr()
        desc_ref = ctypes.byref(desc)
        raw = lib.loom_gemm

        def c_impl(N):
            s = torch.cuda.current_stream().cuda_stream
            r = c_loop(gemm_addr, ctypes.addressof(desc), pa, pw, pc, None, s, N)
            if r:
                _lib.check(r, "loom_gemm")
            return c

        def ctypes_impl(N):
            s = torch.cuda.current_stream().cuda_stream
            for _ in range(N):
                r = raw(desc_ref, pa, pw, pc, None, s)
                if r:
                    _lib.check(r, "loom_gemm")
            return c

        def binding_impl(N):
            for _ in range(N):
                loom.gemm(a, w, layout="nk", out=c)
            return c

        def alloc_impl(N):
            for _ in range(N):
                y = loom.gemm(a, w, layout="nk")
            return y

        def linear_impl(N):
            for _ in range(N):
                y = loom.linear(a, w)
            return y

        def torch_impl(N):
            for _ in range(N):
                torch.mm(a, wt, out=c)
            return c

        impls = {"C loop": c_impl, "ctypes": ctypes_impl, "loom.gemm": binding_impl, "loom.gemm+alloc": alloc_impl,
                 "loom.linear": linear_impl, "torch.mm": torch_impl}
        wrong = {}
        for name, fn in impls.items():
            c.fill_(float("nan"))
            out = fn(1)
            torch.cuda.synchronize()
            err = (out.float() - ref).abs() > 2e-2 * ref.abs().max()
            wrong[name] = int(err.sum().item()) + int(torch.isnan(out).sum().item())
        res = time_impls(impls, args.calls, args.warmup, args.reps)
        c_host = statistics.median(res["C loop"][1])
        for name in impls:
            gpu, host = res[name]
            gm, hm = statistics.median(gpu), statistics.median(host)
            over = hm - c_host
            table.append((f"{m}x{n}x{k}", name, gm, hm, over, wrong[name]))
            rows.append({"op": "gemm", "impl": name, "shape": f"{m}x{n}x{k} NK", "dtype": "bf16", "m": m, "n": n,
                         "k": k, "bytes": 0, "world": 1, "fused_us": None, "gemm_us": round(gm, 3), "comm_us": None,
                         "seq_us": None, "min_us": round(min(gpu), 3), "max_us": round(max(gpu), 3), "ect_us": None,
                         "seq_ect_us": None, "overlap": None, "tflops": round(2.0 * m * n * k / (gm * 1e-6) / 1e12, 3),
                         "algbw_gbs": None, "busbw_gbs": None, "wrong": wrong[name],
                         "note": f"host {hm:.2f} us/call to issue; {over:+.2f} us/call vs the C loop",
                         "host_us": round(hm, 3), "overhead_vs_c_us": round(over, 3)})

    print(f"\nloom binding overhead, {torch.cuda.get_device_name(dev)}, bf16, {args.calls} calls per batch, "
          f"median of {args.reps}")
    print(f"{'shape':>16} {'impl':>16} {'gpu us/call':>12} {'host us/call':>13} {'host - C':>9} {'wrong':>6}")
    for shape, name, gm, hm, over, bad in table:
        print(f"{shape:>16} {name:>16} {gm:12.2f} {hm:13.2f} {over:+9.2f} {bad:6d}")
    binding = [r for r in rows if r["impl"] == "loom.gemm"]
    notes = [
        "gemm_us = GPU time per call over a batch of back-to-back calls (the completion rate); host_us = time to "
        "issue one call; overhead_vs_c_us = host_us - host_us of the C loop on the same shape",
        "binding overhead per call (loom.gemm host - C loop host): " + ", ".join(
            f"{r['shape']}: {r['overhead_vs_c_us']:+.2f} us" for r in binding),
        f"torch {torch.__version__}; libloom {'.'.join(map(str, loom.version()))} at {loom.library_path()}",
    ]
    for n_ in notes:
        print("  " + n_)
    if not args.no_json:
        write_json(rows, notes, args)
    return 1 if any(r["wrong"] for r in rows) else 0


def _commit():
    if os.environ.get("LOOM_COMMIT"):
        return os.environ["LOOM_COMMIT"]
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except Exception:
        return "unknown"


def write_json(rows, notes, args):
    """The JSON file loom-bench writes (tools/bench/bench.c), suite python_overhead."""
    p = torch.cuda.get_device_properties(0)
    nv = loom.nccl_report()
    major, minor = (torch.version.cuda or "0.0").split(".")[:2]
    doc = {
        "suite": "python_overhead", "device": p.name, "compute_capability": f"{p.major}.{p.minor}",
        "sm_count": p.multi_processor_count, "gpus": torch.cuda.device_count(), "world": 1,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "commit": _commit(), "nccl_version": nv["loom_loaded"],
        "cuda_runtime": int(major) * 1000 + int(minor) * 10,
        "loom_version": ".".join(map(str, loom.version())),
        "options": {"quick": 0, "warmup": args.warmup, "reps": args.reps, "check": 1, "calls": args.calls},
        "time_unit": "us", "notes": notes, "rows": rows,
    }
    d = Path(os.environ.get("LOOM_BENCH_RESULTS_DIR") or "loom-results")
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"python_overhead-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(doc, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
