#!/usr/bin/env python3
"""coll_torch.py - the PyTorch baselines of loom-bench allreduce.

PyTorch's symmetric-memory AllReduce kernels (torch.ops.symm_mem.
one_shot_all_reduce and two_shot_all_reduce_, on a tensor from
symm_mem.empty + rendezvous), NCCL through dist.all_reduce, and the unfused
AllReduce + residual + RMSNorm (dist.all_reduce, then
torch.nn.functional.rms_norm(x + residual)), on W GPUs of one machine
(torch.multiprocessing spawn, NCCL; no torchrun), bf16, rows of
min(4096, count) for the norm.
Sizes: --sizes B,B,... (bytes of each rank's buffer) is the list loom-bench
passes, its rows' exact sizes; without it 4 KiB .. --max-bytes in steps of
4x (--quick: 4 KiB, 256 KiB, 16 MiB, 256 MiB).
Timing (peer_timing.py): per call, N calls in a CUDA graph where PyTorch
lets the op be captured (NCCL's calls can: the communicator exists before
capture), else call by call ("eager": with Python's host time, which at
4 KiB is most of it); the variants interleaved in each repetition after a
barrier; the slowest rank; median over --reps. A variant PyTorch refuses
(size, version) gets a row with "us": null.
Writes one JSON object (device, torch version, options, rows) to --json:
one row per (size, variant), variant one_shot, two_shot, nccl or
ar_rmsnorm, with the shape's fields (op, bytes, count, world, dtype; cols
for ar_rmsnorm), us, timing and shape_keys, and prints one line per size.
loom-bench allreduce runs it and pairs its rows with theirs by the
complete shape. Exit status 2 when PyTorch, its symmetric memory or 2 GPUs
are missing (nothing measured).
Usage: python3 bench/peers/coll_torch.py [--world 2] [--reps 20] [--warmup 5] [--quick] [--max-bytes N]
       [--sizes B,B,...] [--eager] [--json FILE]
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import (NONE, TIMING, join_ranks, peer_arguments, spawn_ranks, time_variants, tuples,  # noqa: E402
                         variant_rows, write_results)

VARIANTS = ["one_shot", "two_shot", "nccl", "ar_rmsnorm"]


def sizes(quick, max_bytes):
    out, b = [], 4096
    while b <= max_bytes:
        if not quick or b in (4096, 256 << 10, 16 << 20, 256 << 20):
            out.append(b)
        b *= 4
    return out


def shape_fields(b, world):
    """The complete shape of a size's rows, as loom-bench's allreduce rows name it."""
    return {"op": "allreduce", "bytes": b, "count": b // 2, "world": world, "dtype": "bf16"}


def rows_of(b, world, timed):
    """The rows of one size: the norm variant's shape also has its rows' length."""
    shape = shape_fields(b, world)
    out = variant_rows(shape, VARIANTS[:3], timed[:3])
    out += variant_rows(dict(shape, cols=min(4096, b // 2)), VARIANTS[3:], timed[3:])
    return out


def accepted(torch, dist, rank, b, fns):
    """Which variants PyTorch runs at this size (every rank agrees)."""
    ok = []
    for name, fn in zip(VARIANTS, fns):
        try:
            fn()
            torch.cuda.synchronize()
            good = 1
        except Exception as e:  # noqa: BLE001 (any refusal: size, version)
            if rank == 0:
                print(f"coll_torch: {name} at {b} bytes: {e}", file=sys.stderr, flush=True)
            good = 0
        t = torch.tensor([good], device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        ok.append(bool(t.item()))
    return ok


def worker(rank, world, args, port, result_path):
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    join_ranks(torch, dist, rank, world, port)
    group = dist.group.WORLD
    symm_mem.enable_symm_mem_for_group(group.group_name)
    log = (lambda s: print("coll_torch: " + s, file=sys.stderr, flush=True)) if rank == 0 else None
    g = torch.Generator(device="cuda").manual_seed(4321 + rank)
    results = []
    for (b,) in (args.sizes or [(x,) for x in sizes(args.quick, args.max_bytes)]):
        n = b // 2
        cols = min(4096, n)
        src = torch.empty(n, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1, generator=g)
        res = torch.empty(n // cols, cols, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1, generator=g)
        w = torch.empty(cols, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1, generator=g)
        plain = src.clone()
        sym = symm_mem.empty(n, device="cuda", dtype=torch.bfloat16)
        handle = symm_mem.rendezvous(sym, group.group_name)
        sym.copy_(src)
        del handle

        def one_shot():
            return torch.ops.symm_mem.one_shot_all_reduce(sym, "sum", group.group_name)

        # in place, the input is not restored between repetitions (its values
        # grow, the time does not depend on them): no copy is timed
        def two_shot():
            return torch.ops.symm_mem.two_shot_all_reduce_(sym, "sum", group.group_name)

        def nccl():
            dist.all_reduce(plain)
            return plain

        def ar_rmsnorm():
            dist.all_reduce(plain)
            return torch.nn.functional.rms_norm(plain.view(n // cols, cols) + res, (cols,), w, 1e-5)

        fns = [one_shot, two_shot, nccl, ar_rmsnorm]
        ok = accepted(torch, dist, rank, b, fns)
        names = [v for v, k in zip(VARIANTS, ok) if k]
        it = iter(time_variants(torch, dist, [f for f, k in zip(fns, ok) if k], args, names, log))
        timed = [next(it) if k else (None, NONE) for k in ok]
        if rank == 0:
            results += rows_of(b, world, timed)
            print("coll_torch: " + json.dumps({"bytes": b, **{v: t for v, t in zip(VARIANTS, timed)}}), flush=True)
        del src, res, w, plain, sym
        torch.cuda.empty_cache()
    if rank == 0 and result_path:
        write_results(result_path, torch, args, world, "torch symm_mem all_reduce", results,
                      timing=TIMING + "; two_shot, nccl and ar_rmsnorm reduce in place (inputs not restored, "
                      "no copy timed)")
    dist.destroy_process_group()


def main():
    ap = peer_arguments()
    ap.add_argument("--max-bytes", type=int, default=1 << 30, help="default sizes: the largest")
    ap.add_argument("--sizes", type=tuples(int), default=None,
                    help="B,B,... the exact sizes in bytes to run (loom-bench passes its rows')")
    return spawn_ranks("coll_torch.py", worker, ap.parse_args(), "the all-reduce",
                       modules=("torch.distributed._symmetric_memory",))


if __name__ == "__main__":
    sys.exit(main())
