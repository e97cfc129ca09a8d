#!/usr/bin/env python3
"""tp_torch.py - the PyTorch baselines of loom-bench ag_gemm / gemm_rs.

PyTorch's async tensor parallelism (torch.ops.symm_mem.fused_all_gather_matmul
and fused_matmul_reduce_scatter over symmetric memory) and PyTorch's own
sequential pair (all_gather_into_tensor + matmul, matmul +
reduce_scatter_tensor), on W GPUs of one machine (torch.multiprocessing
spawn, NCCL; no torchrun), bf16, B as a Linear weight ([n, k], used as
W.t()).
Shapes: --shapes MODEL:M:N:K,... is the list loom-bench passes, its rows'
exact local GEMMs (AG: A_full [m, k] gathered from W shards of m / W rows,
x [n, k]^T; RS: [m, k] x [n, k]^T, reduce-scattered into W shards of m / W
rows; n and k are the shapes' after the --tp split, which loom-bench has
already applied). Without it: Flux's GPT-3 175B and Llama-3-70B (--model)
with the weights split --tp ways (default: the world size), m = 64 .. 8192
(--quick: 64, 512, 2048, 8192; --m: one m). A shape whose m does not
split W ways is left out (no row; loom-bench's row then says so).
Timing (peer_timing.py): per call, N calls in a CUDA graph where PyTorch
lets the op be captured, else call by call ("eager"); the variants
interleaved in each repetition after a barrier; the slowest rank; median
over --reps.
Writes one JSON object (device, torch version, options, rows) to --json:
one row per (shape, variant), variant async_tp or torch_seq, with the
shape's fields (op, model, m, n, k, world, dtype), us, timing and
shape_keys, and prints one line per shape. loom-bench ag_gemm / gemm_rs
run it and pair its rows with theirs by the complete shape.
Exit status 2 when PyTorch, its symmetric memory or a GPU is missing
(nothing measured).
Usage: python3 bench/peers/tp_torch.py --op ag_gemm|gemm_rs [--world 2] [--reps 20] [--quick]
       [--shapes MODEL:M:N:K,...] [--model gpt3|llama] [--m M] [--tp T] [--eager] [--json FILE]
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import (join_ranks, peer_arguments, spawn_ranks, time_variants, tuples,  # noqa: E402
                         variant_rows, write_results)

MODELS = {"gpt3": ("gpt3-175b", 12288, 49152), "llama": ("llama3-70b", 8192, 28672)}
MS = [64, 128, 256, 512, 1024, 2048, 4096, 8192]
MS_QUICK = [64, 512, 2048, 8192]
VARIANTS = ["async_tp", "torch_seq"]


def default_shapes(args, world):
    """(model, m, n, k) of the defaults: the weights split --tp ways (0: world)."""
    T = args.tp or world
    out = []
    for mk in ([args.model] if args.model else ["gpt3", "llama"]):
        name, hidden, ffn = MODELS[mk]
        n, k = (ffn // T, hidden) if args.op == "ag_gemm" else (hidden, ffn // T)
        out += [(name, m, n, k) for m in ([args.m] if args.m else (MS_QUICK if args.quick else MS))]
    return out


def shape_fields(op, model, m, n, k, world):
    """The complete shape of a row, as loom-bench's tp rows name it."""
    return {"op": op, "model": model, "m": m, "n": n, "k": k, "world": world, "dtype": "bf16"}


def variants(torch, dist, group, op, a, w, full, out):
    """(async-TP, torch's sequential pair) of the shape's buffers."""
    if op == "ag_gemm":
        def fused():
            return torch.ops.symm_mem.fused_all_gather_matmul(a, [w.t()], gather_dim=0, group_name=group.group_name)

        def seq():
            dist.all_gather_into_tensor(full, a)
            return full @ w.t()
    else:
        def fused():
            return torch.ops.symm_mem.fused_matmul_reduce_scatter(a, w.t(), "sum", scatter_dim=0,
                                                                   group_name=group.group_name)

        def seq():
            p = a @ w.t()
            dist.reduce_scatter_tensor(out, p)
            return out
    return [fused, seq]


def worker(rank, world, args, port, result_path):
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    join_ranks(torch, dist, rank, world, port)
    group = dist.group.WORLD
    symm_mem.enable_symm_mem_for_group(group.group_name)
    log = (lambda s: print("tp_torch: " + s, file=sys.stderr, flush=True)) if rank == 0 else None
    results = []
    g = torch.Generator(device="cuda").manual_seed(1234 + rank)
    for model, m, n, k in (args.shapes or default_shapes(args, world)):
        if m % world:
            if log:
                log(f"{model} m={m}: does not split {world} ways (torch's collectives need equal shards): no row")
            continue
        S = m // world
        rows_a = S if args.op == "ag_gemm" else m
        a = torch.empty(rows_a, k, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1, generator=g)
        w = torch.empty(n, k, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1, generator=g)
        full = torch.empty(m, k, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(S, n, device="cuda", dtype=torch.bfloat16)
        timed = time_variants(torch, dist, variants(torch, dist, group, args.op, a, w, full, out), args, VARIANTS, log)
        if rank == 0:
            shape = shape_fields(args.op, model, m, n, k, world)
            results += variant_rows(shape, VARIANTS, timed)
            print("tp_torch: " + json.dumps(dict(shape, **{v: t for v, t in zip(VARIANTS, timed)})), flush=True)
        del a, w, full, out
        torch.cuda.empty_cache()
    if rank == 0 and result_path:
        write_results(result_path, torch, args, world, "torch async-TP", results)
    dist.destroy_process_group()


def main():
    ap = peer_arguments()
    ap.add_argument("--op", choices=["ag_gemm", "gemm_rs"], required=True)
    ap.add_argument("--shapes", type=tuples(str, int, int, int), default=None,
                    help="MODEL:M:N:K,... the exact local GEMMs to run (loom-bench passes its rows')")
    ap.add_argument("--model", choices=["gpt3", "llama"], default="", help="default shapes: one model")
    ap.add_argument("--m", type=int, default=0, help="default shapes: one m")
    ap.add_argument("--tp", type=int, default=0, help="default shapes: split the weights T ways (0: the world size)")
    return spawn_ranks("tp_torch.py", worker, ap.parse_args(), "async-TP",
                       modules=("torch.distributed._symmetric_memory",))


if __name__ == "__main__":
    sys.exit(main())
