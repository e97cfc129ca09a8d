#!/usr/bin/env python3
"""gemm_torch.py - the PyTorch baseline of loom-bench gemm.

What a PyTorch user's linear layer runs, on one GPU, for each GEMM of the
shape set loom-bench times (src/gemm/gemm_shapes.h), in the exact variant
loom's row runs: C [m, n] = A [m, k] x W in bf16 or fp16 (C of the same
type), W a Linear weight [n, k] (layout NK: torch.nn.functional.linear(a, w,
bias)) or a [k, n] matrix (layout KN: torch.matmul(a, w), or torch.addmm(bias,
a, w) with a bias), bias [n] where the row has one. PyTorch's own settings
(what a user gets; the JSON records the reduced-precision flags).
Shapes: --weights N:K,... and --ms M,... are what loom-bench passes: its
selection's weights and m list; the peer runs every (m, n, k) of the two
lists, each in the set's variant, drawn here exactly as
loom__gemm_shape_variant draws it (splitmix64 of the shape: dtype per
weight, B layout and bias per GEMM; tests/python/test_bench_peers.py checks
the two agree). Without them: Llama-3-70B's four weights at m = 1, 8, 64,
512, 1000, 4096.
Inputs as loom-bench's: per weight, W and A (as many rows as the largest m;
a smaller m uses the leading rows) in enough copies that the calls between
two uses of one copy stream 4x the L2 through it (at most 32 copies, within
half the free memory and 24 GiB, like loom_bench_rotation), uniform in
[-1, 1); call j uses copy j mod copies. Copy counts are powers of two and
the calls captured in one graph a multiple of the larger, so the rotation
never repeats a copy back to back, replay after replay.
Timing (peer_timing.py): the calls captured in one CUDA graph, time per call
(timing "graph": no Python host time per call). Calls per graph: enough for
about 1 ms of GPU time per replay (so the graph's own launch is under 1% of
it), at most --graph-calls (16), at least the copy count, a multiple of it.
Writes one JSON object to --json: one row per GEMM, variant "matmul", its
complete shape (op "gemm", m, n, k, dtype, layout NK or KN, bias 0 or 1),
us, timing, shape_keys, and the calls per graph and copies used; prints one
line per GEMM. loom-bench gemm runs it first and pairs its loom rows with
these by the complete shape. Exit status 2 when PyTorch or a GPU is missing
(nothing measured).
Usage: python3 bench/peers/gemm_torch.py [--weights N:K,...] [--ms M,...] [--reps 20] [--warmup 5]
       [--graph-calls 16] [--eager] [--json FILE]
"""
import json
import math
import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import (join_ranks, peer_arguments, spawn_ranks, time_variants, tuples,  # noqa: E402
                         variant_rows, write_results)

MASK = (1 << 64) - 1
VARIANTS = ["matmul"]
DEFAULT_WEIGHTS = [(10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672)]  # Llama-3-70B, TP 1
DEFAULT_MS = [1, 8, 64, 512, 1000, 4096]
TARGET_REPLAY_US = 1000.0  # GPU time per graph replay the calls per graph aim for
MAX_COPIES = 32
BUDGET_CAP = 24 << 30
TIMING = ("per row: graph = the time per call of the row's graph_calls calls captured in one CUDA graph (about 1 ms "
          "of GPU time per replay, at most --graph-calls unless the copies need more; no Python host time), eager = "
          "each call timed from Python (includes its host time); median over the repetitions")


def shape_hash(x):
    """gemm_shapes.h: loom__gemm_shape_hash (splitmix64)."""
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def shape_variant(m, n, k):
    """gemm_shapes.h: loom__gemm_shape_variant -> (dtype, layout, bias):
    dtype "bf16" or "fp16" from (n, k), layout "NK" or "KN" and bias 0 or 1
    from (m, n, k)."""
    hw = shape_hash(((n << 32) ^ k) & MASK)
    hm = shape_hash(hw ^ ((m * 0x2545F4914F6CDD1D) & MASK))
    return ("fp16" if (hw >> 17) & 1 else "bf16", "KN" if (hm >> 11) & 1 else "NK", (hm >> 23) & 1)


def shape_fields(m, n, k):
    """The complete shape of a row, as loom-bench gemm's loom rows name it."""
    dtype, layout, bias = shape_variant(m, n, k)
    return {"op": "gemm", "m": m, "n": n, "k": k, "dtype": dtype, "layout": layout, "bias": bias}


def ms_arg(text):
    """--ms: "1,8,64" -> [1, 8, 64], each > 0."""
    out = [int(x) for x in text.split(",")]
    if not out or min(out) < 1:
        raise ValueError(f"{text!r}: the m values must be positive")
    return out


def weights_arg(text):
    """--weights: "N:K,..." -> [(N, K), ...], each a positive multiple of 8 (loom_gemm's contract)."""
    out = tuples(int, int)(text)
    for n, k in out:
        if n < 8 or k < 8 or n % 8 or k % 8:
            raise ValueError(f"{n}:{k}: n and k must be positive multiples of 8")
    return out


def pow2_copies(bytes_per_copy, budget, l2):
    """Copies of one input: enough that 4 x L2 lies between two uses of one
    copy (loom_bench_rotation's rule), rounded up to a power of two where
    the budget allows, else down; 1 to MAX_COPIES."""
    if bytes_per_copy <= 0:
        return 1
    want = min(MAX_COPIES, -(-4 * l2 // bytes_per_copy))
    p = 1
    while p < want:
        p *= 2
    while p > 1 and p * bytes_per_copy > budget:
        p //= 2
    return p


def graph_calls(t_us, ring, most):
    """Calls per graph: enough for about TARGET_REPLAY_US of GPU time at
    t_us per call, at most `most` (--graph-calls), rounded up to a multiple
    of the copies `ring` (a power of two; so each copy's turn comes at the
    same distance across replays)."""
    want = max(1, min(most, math.ceil(TARGET_REPLAY_US / max(t_us, 1e-3))))
    return ring * -(-want // ring)


def selection(args):
    """The (n, k) list and the m list the peer runs."""
    return args.weights or DEFAULT_WEIGHTS, args.ms or DEFAULT_MS


def call_of(torch, layout, a, w, bias):
    """The user's call for the variant: F.linear(a, w, bias) on a Linear
    weight (NK), torch.matmul / torch.addmm on a [k, n] matrix (KN)."""
    F = torch.nn.functional
    if layout == "NK":
        return lambda i: F.linear(a[i], w[i], bias)
    if bias is not None:
        return lambda i: torch.addmm(bias, a[i], w[i])
    return lambda i: torch.matmul(a[i], w[i])


def eager_us(torch, fn, calls=3):
    """Rough time per call (us) of fn, called eagerly after one call."""
    fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(calls):
        fn()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) * 1000.0 / calls


def worker(rank, world, args, port, result_path):
    import torch
    import torch.distributed as dist

    join_ranks(torch, dist, rank, world, port)
    log = (lambda s: print("gemm_torch: " + s, file=sys.stderr, flush=True)) if rank == 0 else None
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 0) or (64 << 20)
    g = torch.Generator(device="cuda").manual_seed(1234)
    weights, ms = selection(args)
    max_m = max(ms)
    results = []
    for n, k in weights:
        dt = torch.float16 if shape_variant(1, n, k)[0] == "fp16" else torch.bfloat16
        es = 2
        free, _ = torch.cuda.mem_get_info()
        c_bytes = max_m * n * es
        budget = min(max(free // 2 - c_bytes, 0), BUDGET_CAP)
        na = pow2_copies(max_m * k * es, budget // 2, l2)
        nb = pow2_copies(n * k * es, budget // 2, l2)
        ring = max(na, nb)
        a_full = [torch.empty(max_m, k, device="cuda", dtype=dt).uniform_(-1, 1, generator=g) for _ in range(na)]
        bias = torch.empty(n, device="cuda", dtype=dt).uniform_(-1, 1, generator=g)
        for layout in ("NK", "KN"):  # one layout's copies of W at a time
            mine = [m for m in ms if shape_variant(m, n, k)[1] == layout]
            if not mine:
                continue
            dims = (n, k) if layout == "NK" else (k, n)
            w = [torch.empty(*dims, device="cuda", dtype=dt).uniform_(-1, 1, generator=g) for _ in range(nb)]
            for m in mine:
                shape = shape_fields(m, n, k)
                one = call_of(torch, layout, [a_full[j % na][:m] for j in range(ring)],
                              [w[j % nb] for j in range(ring)], bias if shape["bias"] else None)
                turn = [0]

                def fn():
                    j = turn[0] % ring
                    turn[0] += 1
                    return one(j)

                calls = graph_calls(eager_us(torch, fn), ring, args.graph_calls)
                timed = time_variants(torch, dist, [fn], types.SimpleNamespace(**dict(vars(args), graph_calls=calls)),
                                      VARIANTS, log)
                if rank == 0:
                    rows = variant_rows(shape, VARIANTS, timed)
                    for r in rows:
                        r.update(graph_calls=calls if timed[0][1] == "graph" else 0, copies=f"{na}+{nb}")
                    results += rows
                    print("gemm_torch: " + json.dumps(dict(shape, matmul=timed[0], calls=calls,
                                                           copies=f"{na}+{nb}")), flush=True)
                del one, fn
            del w
            torch.cuda.empty_cache()
        del a_full, bias
        torch.cuda.empty_cache()
    if rank == 0 and result_path:
        cuda = torch.backends.cuda.matmul
        write_results(result_path, torch, args, world,
                      "torch: F.linear(a, w, bias) on a Linear weight [n, k] (NK), torch.matmul(a, w) or "
                      "torch.addmm(bias, a, w) on [k, n] (KN); PyTorch's default settings", results,
                      bf16_reduced_precision_reduction=bool(getattr(cuda, "allow_bf16_reduced_precision_reduction",
                                                                    False)),
                      fp16_reduced_precision_reduction=bool(getattr(cuda, "allow_fp16_reduced_precision_reduction",
                                                                    False)),
                      target_replay_us=TARGET_REPLAY_US, timing=TIMING)
    dist.destroy_process_group()


def main():
    ap = peer_arguments("ranks (1: one GPU; loom-bench gemm passes 1)")
    ap.add_argument("--weights", type=weights_arg, default=None,
                    help="N:K,... the weights to run (loom-bench passes its selection's)")
    ap.add_argument("--ms", type=ms_arg, default=None, help="M,... the m of every weight (loom-bench passes its list)")
    return spawn_ranks("gemm_torch.py", worker, ap.parse_args(), "the GEMMs", min_world=1, default_world=1)


if __name__ == "__main__":
    sys.exit(main())
